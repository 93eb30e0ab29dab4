//! The reuse hold through the engine: a flood of unanswered flows from spoofed inside
//! sources gives its ports back as soon as its sessions expire, so a tiny pool is not
//! held away from every subscriber for `port_reuse_hold`; a port that was answered still
//! waits out the whole hold; a full hold gives its oldest port back early and counts it.
//! Time is passed in: no sleeping.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::time::Duration;

use conntrack::{Endpoint, Timestamp};

use super::config::{DynamicRule, Nat44Config};
use super::tests::{PUB, SRV};
use super::Nat44;
use crate::config::PortRange;
use crate::testpkt::{fill_l4_csum, ipv4, ports, tcp_segment, udp, v4_addrs, UDP};
use crate::verdict::{Direction::*, DropReason};
use crate::Emit;

const SYN: u8 = 0x02;
const SYN_ACK: u8 = 0x12;
const HOLD: Duration = Duration::from_secs(120);
/// Ports in the pool: one address, 64 ports.
const PORTS: u16 = 64;

/// One public address, ports 1024-1087, for the inside /16.
fn tiny_pool(max_sessions: usize) -> Nat44Config {
    Nat44Config {
        rules: vec![DynamicRule {
            inside: "10.0.0.0/16".parse().unwrap(),
            pool: vec!["203.0.113.1/32".parse().unwrap()],
            ports: PortRange::new(1024, 1024 + PORTS - 1).unwrap(),
        }],
        port_reuse_hold: HOLD,
        max_sessions,
        ..Nat44Config::default()
    }
}

fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

/// Inside host `i` of the flood (10.0.1.0 and up: distinct sources).
fn host(i: u16) -> Ipv4Addr {
    Ipv4Addr::from(0x0a00_0100 + u32::from(i))
}

/// A SYN from `src:40000` to the server; the public endpoint it left from, or the drop.
fn syn(n: &mut Nat44, now: Timestamp, src: Ipv4Addr) -> Result<Endpoint, DropReason> {
    let mut p = tcp_segment(src, 40000, SRV, 443, SYN, 1000, 0, 0);
    match n.process(now, Outbound, &mut p) {
        Emit::Forward { .. } => Ok(Endpoint::new(v4_addrs(&p).0, ports(&p).0)),
        e => Err(e.drop_reason().unwrap()),
    }
}

/// The server's SYN-ACK to public endpoint `to`: forwarded in.
fn syn_ack(n: &mut Nat44, now: Timestamp, to: Endpoint) {
    let mut p = tcp_segment(SRV, 443, to.addr, to.port, SYN_ACK, 5000, 1001, 0);
    let e = n.process(now, Inbound, &mut p);
    assert!(matches!(e, Emit::Forward { .. }), "{e:?}");
}

/// 63 spoofed inside sources send a SYN each that is never answered, beside one real
/// connection that is answered: the pool is full (a 65th host is refused). Once the
/// sessions expire, the 63 unanswered ports come back at once: as many new hosts get a
/// port straight away, none of them the answered flow's, which waits out the full hold
/// and only then goes to the next host.
#[test]
fn unanswered_flood_ports_come_back_at_once_and_answered_ones_wait_the_hold() {
    let mut n = Nat44::new(tiny_pool(1024)).unwrap();
    // The real connection: its SYN out, the server's SYN-ACK in.
    let real = syn(&mut n, t(1), Ipv4Addr::new(10, 0, 0, 2)).unwrap();
    syn_ack(&mut n, t(1), real);
    // The flood takes every other port.
    for i in 0..PORTS - 1 {
        let e = syn(&mut n, t(2), host(i)).unwrap_or_else(|e| panic!("SYN {i}: {e:?}"));
        assert_eq!(e.addr, PUB);
    }
    assert_eq!(
        syn(&mut n, t(2), host(PORTS)),
        Err(DropReason::PoolExhausted)
    );
    // Every session expires (SYN_SENT 120 s, SYN_RECV 60 s): one sweep ends them and
    // their bindings.
    let end = t(300);
    n.handle_timeout(end);
    assert_eq!((n.session_count(), n.binding_count()), (0, 0));
    let c = n.counters();
    assert_eq!(c.ports_released_unheld, u64::from(PORTS - 1), "{c:?}");
    assert_eq!(c.port_holds_cut_short, 0);
    // New hosts get ports at once (their sessions outlive what follows): every port
    // but the answered one.
    let wave = end + Duration::from_secs(10);
    let mut got = HashSet::new();
    for i in 0..PORTS - 1 {
        let e = syn(&mut n, wave, host(1000 + i)).unwrap_or_else(|e| panic!("host {i}: {e:?}"));
        assert_ne!(e, real, "the answered port is held");
        got.insert(e.port);
    }
    assert_eq!(got.len(), usize::from(PORTS - 1));
    assert_eq!(
        syn(&mut n, wave, host(2000)),
        Err(DropReason::PoolExhausted),
        "the answered port is held"
    );
    assert_eq!(n.counters().dropped(DropReason::PoolExhausted), 2);
    // A second before the hold passes it is still held; after it (and the hold's 1/2048
    // rounding), it is the one port left.
    n.handle_timeout(end + (HOLD - Duration::from_secs(1)));
    assert_eq!(
        syn(&mut n, end + HOLD, host(2001)),
        Err(DropReason::PoolExhausted)
    );
    let ready = n.poll_timeout().unwrap();
    assert!(
        ready >= end + HOLD && ready <= end + HOLD + HOLD / 2048,
        "{ready:?}"
    );
    n.handle_timeout(ready);
    assert_eq!(syn(&mut n, ready, host(2002)), Ok(real));
}

/// A UDP flow from `src:5000` to the server, answered; its public endpoint.
fn answered_udp(n: &mut Nat44, now: Timestamp, src: Ipv4Addr) -> Endpoint {
    let mut p = ipv4(UDP, src, SRV, 64, &udp(5000, 53, b"q"));
    fill_l4_csum(&mut p);
    assert!(matches!(
        n.process(now, Outbound, &mut p),
        Emit::Forward { .. }
    ));
    let public = Endpoint::new(v4_addrs(&p).0, ports(&p).0);
    let mut r = ipv4(UDP, SRV, public.addr, 64, &udp(53, public.port, b"a"));
    fill_l4_csum(&mut r);
    assert!(matches!(
        n.process(now, Inbound, &mut r),
        Emit::Forward { .. }
    ));
    public
}

/// With `max_sessions` = 16 the pool holds at most 16 released ports (min(max_sessions,
/// 64 ports × 3)). Bindings can end faster than that only with a timeout below the hold
/// (here UDP's, 10 s): 40 answered flows ending within one hold, 8 per sweep, leave the
/// 16 newest held and the 24 oldest given back early, counted; the pool's taken ports
/// are the held ones alone.
#[test]
fn a_full_hold_gives_back_the_oldest_early_and_counts_it() {
    let mut cfg = tiny_pool(16);
    cfg.timeouts.udp = Duration::from_secs(10);
    let mut n = Nat44::new(cfg).unwrap();
    let pool = std::sync::Arc::clone(&n.shared().pools[0]);
    assert_eq!(pool.hold_capacity(), 16);
    let mut last = Vec::new();
    for round in 0..5u16 {
        // Eight flows, answered, ending in one sweep: their ports enter the hold.
        let start = 11 * u64::from(round);
        last = (0..8)
            .map(|i| answered_udp(&mut n, t(start + 1), host(round * 8 + i)))
            .collect();
        n.handle_timeout(t(start + 11));
        assert_eq!(n.session_count(), 0);
        assert!(pool.cooling_len() <= 16);
    }
    let c = n.counters();
    assert_eq!(c.port_holds_cut_short, 24, "{c:?}");
    assert_eq!(c.ports_released_unheld, 0);
    assert_eq!(pool.cooling_len(), 16);
    assert_eq!(
        pool.taken(PUB, conntrack::Proto::Udp),
        16,
        "only the held ports"
    );
    // The newest round is among the held.
    for e in last {
        assert!(!pool.reserve(conntrack::Proto::Udp, e), "{e} held");
    }
}
