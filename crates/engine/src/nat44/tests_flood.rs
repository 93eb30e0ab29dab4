//! A flood of new outbound flows against a full session table (the bench's
//! `syn_flood`): the new flows are refused, and the established ones never lose a packet
//! either way, their bindings and ports untouched. Time is passed in: deterministic.

use std::net::Ipv4Addr;

use conntrack::{Endpoint, Proto, Timestamp};

use super::tests::{config, IN_A, PUB, SRV};
use super::{ep_key, key_ep, Nat44};
use crate::testpkt::{fill_l4_csum, ipv4, ports, tcp_segment, udp, v4_addrs, UDP};
use crate::verdict::{Direction, Direction::*, DropReason};
use crate::Emit;

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
/// Session table size.
const CAP: usize = 64;
/// Established flows: half TCP, half UDP.
const FLOWS: u16 = 32;
/// New flows tried, interleaved with the established traffic.
const FLOOD: usize = 400;

/// Established flow `i`'s packet from `from` to `to` (the inside's, or the reply).
fn flow_pkt(i: u16, from: Endpoint, to: Endpoint) -> Vec<u8> {
    if i.is_multiple_of(2) {
        // A connection picked up mid-stream (an ACK first, as after a restart): not
        // confirmed until its reply passes.
        let (seq, ack) = if from.addr == IN_A {
            (1_000_000, 2_000_000)
        } else {
            (2_000_000, 1_000_000)
        };
        tcp_segment(from.addr, from.port, to.addr, to.port, ACK, seq, ack, 0)
    } else {
        let mut p = ipv4(
            UDP,
            from.addr,
            to.addr,
            64,
            &udp(from.port, to.port, b"data"),
        );
        fill_l4_csum(&mut p);
        p
    }
}

fn proto_of(i: u16) -> Proto {
    if i.is_multiple_of(2) {
        Proto::Tcp
    } else {
        Proto::Udp
    }
}

fn send(
    n: &mut Nat44,
    now: Timestamp,
    dir: Direction,
    mut p: Vec<u8>,
) -> Result<Vec<u8>, DropReason> {
    match n.process(now, dir, &mut p) {
        Emit::Drop(r) => Err(r),
        _ => Ok(p),
    }
}

#[test]
fn refused_new_flows_never_break_established_ones() {
    let mut cfg = config();
    cfg.max_sessions = CAP;
    let mut n = Nat44::new(cfg).unwrap();
    let mut clock = 1_000_000_000u64;
    let mut now = || {
        clock += 10_000;
        Timestamp::from_nanos(clock)
    };
    let inside = |i: u16| Endpoint::new(IN_A, 5000 + i);
    let server = |i: u16| Endpoint::new(SRV, 1000 + i);
    // The established flows: their first packet out, the public endpoint each got.
    let public: Vec<Endpoint> = (0..FLOWS)
        .map(|i| {
            let out = send(&mut n, now(), Outbound, flow_pkt(i, inside(i), server(i)))
                .unwrap_or_else(|e| panic!("flow {i}: {e:?}"));
            let (src, _) = v4_addrs(&out);
            assert_eq!(src, PUB);
            Endpoint::new(src, ports(&out).0)
        })
        .collect();
    // The flood: SYNs from new inside endpoints, one between each established packet
    // (every flow's packet out, then every reply in, again and again). The table is full
    // after CAP - FLOWS of them.
    let (mut admitted, mut table_full) = (0, 0);
    for k in 0..FLOOD {
        let host = Ipv4Addr::new(10, 0, 0, 100 + (k / 8) as u8);
        let syn = tcp_segment(host, 2000 + k as u16, SRV, 443, SYN, 7, 0, 0);
        match send(&mut n, now(), Outbound, syn) {
            Ok(_) => admitted += 1,
            Err(DropReason::TableFull) => table_full += 1,
            Err(e) => panic!("flood SYN {k}: {e:?}"),
        }
        let i = (k % FLOWS as usize) as u16;
        let (dir, from, to) = if (k / FLOWS as usize).is_multiple_of(2) {
            (Outbound, inside(i), server(i))
        } else {
            (Inbound, server(i), public[i as usize])
        };
        let p = send(&mut n, now(), dir, flow_pkt(i, from, to))
            .unwrap_or_else(|e| panic!("flow {i} {dir:?} at flood SYN {k}: {e:?}"));
        let (src, dst) = v4_addrs(&p);
        let (sport, dport) = ports(&p);
        match dir {
            Outbound => assert_eq!(Endpoint::new(src, sport), public[i as usize], "flow {i}"),
            _ => assert_eq!(Endpoint::new(dst, dport), inside(i), "flow {i}"),
        }
    }
    assert_eq!(admitted, CAP - FLOWS as usize);
    assert_eq!(table_full, FLOOD - admitted);
    let c = n.counters();
    assert_eq!(c.sessions_early_dropped, 0, "{c:?}");
    assert_eq!(c.dropped(DropReason::TableFull), table_full as u64);
    assert_eq!(c.dropped(DropReason::NoMapping), 0);
    // Bookkeeping: each established flow keeps its binding (one reference: its session)
    // on its public endpoint; no binding beyond the sessions' was made for a refused
    // flow.
    let sh = n.shared();
    for i in 0..FLOWS {
        let b = sh
            .bindings
            .find_a(ep_key(proto_of(i), inside(i)))
            .unwrap_or_else(|| panic!("flow {i} lost its binding"));
        let v = sh.bindings.get(b).unwrap();
        assert_eq!(key_ep(v.key_b), public[i as usize], "flow {i}");
        assert_eq!(v.refs, 1, "flow {i}");
    }
    assert_eq!(sh.sessions.live_count(), CAP);
    assert_eq!(sh.bindings.live(), CAP);
    assert!(sh.bindings.taken() <= sh.binding_room());
}
