//! NAT44 TCP state tracking: timeouts by handshake state, half-open sessions at a port
//! forward, early drop, RST window checks.

use std::net::{Ipv4Addr, SocketAddrV4};

use conntrack::tcp::{ConnState, TcpPhase};
use conntrack::Timestamp;

use super::config::{Nat44Config, PortForward};
use super::tests::{config, IN_A, PUB, SRV};
use super::Nat44;
use crate::config::L4Proto;
use crate::testpkt::{assert_checksums, ports};
use crate::verdict::{Direction, Direction::*, DropReason};
use crate::Emit;

const SYN: u8 = 0x02;
const SYNACK: u8 = 0x12;
const ACK: u8 = 0x10;
const FIN: u8 = 0x01;
const RST: u8 = 0x04;

/// The inside server behind the port forward 203.0.113.1:80.
const WEB: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 80);

fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

use crate::testpkt::tcp_segment as seg;

fn run(n: &mut Nat44, now: u64, dir: Direction, mut p: Vec<u8>) -> Result<Vec<u8>, DropReason> {
    match n.process(t(now), dir, &mut p) {
        Emit::Drop(r) => Err(r),
        _ => {
            assert_checksums(&p);
            Ok(p)
        }
    }
}

fn forward_config() -> Nat44Config {
    let mut cfg = config();
    cfg.port_forwards.push(PortForward {
        protocol: L4Proto::Tcp,
        public: SocketAddrV4::new(PUB, 80),
        inside: SocketAddrV4::new(WEB, 80),
    });
    cfg
}

/// The only session's TCP state.
fn state(n: &Nat44) -> ConnState {
    let s = n.sessions();
    assert_eq!(s.len(), 1);
    s[0].tcp.state()
}

/// An inside client's full handshake to SRV:80 from `sport`; returns the public port.
/// Client ISN 100, server ISN 5000.
fn handshake(n: &mut Nat44, now: u64, sport: u16) -> u16 {
    let o = run(n, now, Outbound, seg(IN_A, sport, SRV, 80, SYN, 100, 0, 0)).unwrap();
    let public = ports(&o).0;
    run(
        n,
        now,
        Inbound,
        seg(SRV, 80, PUB, public, SYNACK, 5000, 101, 0),
    )
    .unwrap();
    run(
        n,
        now,
        Outbound,
        seg(IN_A, sport, SRV, 80, ACK, 101, 5001, 0),
    )
    .unwrap();
    public
}

/// Each state has its own timeout: SYN only 120 s, SYN + SYN-ACK 60 s, handshake done
/// 7440 s, FIN both ways 240 s, an in-window RST 240 s (RFC 7857 §2.2).
#[test]
fn timeouts_follow_the_handshake() {
    let expect_life = |n: &mut Nat44, from: u64, life: u64| {
        n.handle_timeout(t(from + life - 1));
        assert_eq!(n.session_count(), 1, "alive at {} s", life - 1);
        n.handle_timeout(t(from + life + 1));
        assert_eq!(n.session_count(), 0, "gone after {life} s");
    };
    let mut n = Nat44::new(config()).unwrap();
    run(
        &mut n,
        0,
        Outbound,
        seg(IN_A, 1111, SRV, 80, SYN, 100, 0, 0),
    )
    .unwrap();
    assert_eq!(state(&n), ConnState::SynSent);
    expect_life(&mut n, 0, 120);

    let o = run(
        &mut n,
        1000,
        Outbound,
        seg(IN_A, 2222, SRV, 80, SYN, 100, 0, 0),
    )
    .unwrap();
    run(
        &mut n,
        1000,
        Inbound,
        seg(SRV, 80, PUB, ports(&o).0, SYNACK, 5000, 101, 0),
    )
    .unwrap();
    assert_eq!(state(&n), ConnState::SynRecv);
    expect_life(&mut n, 1000, 60);

    handshake(&mut n, 2000, 3333);
    assert_eq!(state(&n), ConnState::Established);
    expect_life(&mut n, 2000, 7440);

    let p = handshake(&mut n, 20_000, 4444);
    run(
        &mut n,
        20_000,
        Outbound,
        seg(IN_A, 4444, SRV, 80, FIN | ACK, 101, 5001, 0),
    )
    .unwrap();
    assert_eq!(state(&n), ConnState::FinWait);
    run(
        &mut n,
        20_000,
        Inbound,
        seg(SRV, 80, PUB, p, FIN | ACK, 5001, 102, 0),
    )
    .unwrap();
    assert_eq!(state(&n), ConnState::TimeWait);
    expect_life(&mut n, 20_000, 240);

    let p = handshake(&mut n, 30_000, 5555);
    run(
        &mut n,
        30_000,
        Inbound,
        seg(SRV, 80, PUB, p, RST | ACK, 5001, 101, 0),
    )
    .unwrap();
    assert_eq!(state(&n), ConnState::Close);
    expect_life(&mut n, 30_000, 240);
}

/// A spoofed SYN at a port forward, answered by the inside server's SYN-ACK, lives 60 s
/// (tcp_syn_recv), not the 7440 s established timeout.
#[test]
fn spoofed_syn_at_a_port_forward_lives_on_the_syn_recv_timeout() {
    let mut n = Nat44::new(forward_config()).unwrap();
    let spoofer = Ipv4Addr::new(192, 0, 2, 66);
    let i = run(
        &mut n,
        0,
        Inbound,
        seg(spoofer, 4321, PUB, 80, SYN, 7, 0, 0),
    )
    .unwrap();
    assert_eq!(ports(&i).1, 80);
    run(
        &mut n,
        0,
        Outbound,
        seg(WEB, 80, spoofer, 4321, SYNACK, 9000, 8, 0),
    )
    .unwrap();
    // The server retransmits its SYN-ACK; the spoofer never answers.
    run(
        &mut n,
        3,
        Outbound,
        seg(WEB, 80, spoofer, 4321, SYNACK, 9000, 8, 0),
    )
    .unwrap();
    assert_eq!(state(&n), ConnState::SynRecv);
    n.handle_timeout(t(3 + 59));
    assert_eq!(n.session_count(), 1);
    n.handle_timeout(t(3 + 61));
    assert_eq!(n.session_count(), 0, "reaped after tcp_syn_recv");
    // A blind ACK guessing the server's ISN wrong does not establish either.
    run(
        &mut n,
        100,
        Inbound,
        seg(spoofer, 4321, PUB, 80, SYN, 7, 0, 0),
    )
    .unwrap();
    run(
        &mut n,
        100,
        Outbound,
        seg(WEB, 80, spoofer, 4321, SYNACK, 9000, 8, 0),
    )
    .unwrap();
    run(
        &mut n,
        100,
        Inbound,
        seg(spoofer, 4321, PUB, 80, ACK, 8, 0x4000_0000, 0),
    )
    .unwrap();
    assert_eq!(state(&n), ConnState::SynRecv);
    // The real client's ACK does.
    run(
        &mut n,
        100,
        Inbound,
        seg(spoofer, 4321, PUB, 80, ACK, 8, 9001, 0),
    )
    .unwrap();
    assert_eq!(state(&n), ConnState::Established);
}

/// A RST outside the window is dropped and counted and changes nothing; one inside the
/// window closes the session (kept for tcp_closed).
#[test]
fn off_path_rst_is_dropped_in_window_rst_closes() {
    let mut n = Nat44::new(config()).unwrap();
    let p = handshake(&mut n, 0, 1111);
    run(
        &mut n,
        1,
        Inbound,
        seg(SRV, 80, PUB, p, ACK, 5001, 101, 300),
    )
    .unwrap();
    // The server's next sequence number is 5301; its peer's window is 1000.
    for guess in [0u32, 5301 + 1001, 5301 - 1001, 0x8000_0000] {
        assert_eq!(
            run(&mut n, 2, Inbound, seg(SRV, 80, PUB, p, RST, guess, 0, 0)),
            Err(DropReason::TcpRstOutOfWindow),
            "seq {guess}"
        );
    }
    assert_eq!(n.counters().dropped(DropReason::TcpRstOutOfWindow), 4);
    assert_eq!(state(&n), ConnState::Established);
    n.handle_timeout(t(2 + 7000));
    assert_eq!(n.session_count(), 1, "still on the established timeout");
    // Both directions carry on.
    run(
        &mut n,
        7003,
        Outbound,
        seg(IN_A, 1111, SRV, 80, ACK, 101, 5301, 10),
    )
    .unwrap();
    // In window (not exactly at 5301: forwarded, the endpoint judges it per RFC 5961).
    run(
        &mut n,
        7004,
        Inbound,
        seg(SRV, 80, PUB, p, RST, 5301 + 500, 0, 0),
    )
    .unwrap();
    assert_eq!(state(&n), ConnState::Close);
    assert_eq!(n.sessions()[0].tcp.phase(), TcpPhase::Closed);
    // The outside RST from the inside side too: same rule, other direction.
    let mut n = Nat44::new(config()).unwrap();
    handshake(&mut n, 0, 2222);
    assert_eq!(
        run(
            &mut n,
            1,
            Outbound,
            seg(IN_A, 2222, SRV, 80, RST, 50_000, 0, 0)
        ),
        Err(DropReason::TcpRstOutOfWindow)
    );
    run(
        &mut n,
        1,
        Outbound,
        seg(IN_A, 2222, SRV, 80, RST, 101, 0, 0),
    )
    .unwrap();
    assert_eq!(state(&n), ConnState::Close);
}

/// A closed port pair is reused by a new SYN: the session starts over unconfirmed.
#[test]
fn closed_session_reused_by_a_new_syn() {
    let mut n = Nat44::new(config()).unwrap();
    let p = handshake(&mut n, 0, 1111);
    run(
        &mut n,
        1,
        Inbound,
        seg(SRV, 80, PUB, p, RST | ACK, 5001, 101, 0),
    )
    .unwrap();
    assert_eq!(state(&n), ConnState::Close);
    let o = run(
        &mut n,
        2,
        Outbound,
        seg(IN_A, 1111, SRV, 80, SYN, 777, 0, 0),
    )
    .unwrap();
    assert_eq!(ports(&o).0, p, "same session, same public port");
    assert_eq!(state(&n), ConnState::SynSent);
    run(&mut n, 2, Inbound, seg(SRV, 80, PUB, p, SYNACK, 1, 778, 0)).unwrap();
    run(
        &mut n,
        2,
        Outbound,
        seg(IN_A, 1111, SRV, 80, ACK, 778, 2, 0),
    )
    .unwrap();
    assert_eq!(state(&n), ConnState::Established);
}

/// Early drop: a table filled with half-open sessions from spoofed sources at a port
/// forward still gives inside hosts their sessions; the half-open ones are reclaimed
/// and counted, established ones are never touched.
#[test]
fn spoofed_syn_flood_does_not_lock_inside_users_out() {
    let mut cfg = forward_config();
    cfg.max_sessions = 64;
    let mut n = Nat44::new(cfg).unwrap();
    // Four established connections before the flood.
    let est: Vec<u16> = (0..4).map(|i| handshake(&mut n, 0, 2000 + i)).collect();
    // The flood: SYNs from spoofed sources, each answered by the web server.
    let mut refused = 0;
    for i in 0..200u32 {
        let src = Ipv4Addr::from(0xc612_0000 + i); // 198.18.0.0/15
        match run(&mut n, 1, Inbound, seg(src, 1024, PUB, 80, SYN, i, 0, 0)) {
            Ok(_) => {
                run(
                    &mut n,
                    1,
                    Outbound,
                    seg(WEB, 80, src, 1024, SYNACK, 9, i + 1, 0),
                )
                .unwrap();
            }
            Err(DropReason::TableFull) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(refused > 0, "the flood filled what it may");
    assert!(
        n.shared().sessions.occupied() <= 56,
        "outside sessions stop at 7/8"
    );
    // Inside users open new connections at once: the last eighth is theirs.
    for i in 0..8u16 {
        run(
            &mut n,
            2,
            Outbound,
            seg(IN_A, 3000 + i, SRV, 443, SYN, 1, 0, 0),
        )
        .unwrap();
    }
    // The reaper's sweep reclaims half-open sessions; more inside connections succeed
    // while the flood goes on.
    let mut next_src = 0xc613_0000u32;
    let mut flood = |n: &mut Nat44, now: u64| {
        for i in 0..50 {
            next_src += 1;
            let src = Ipv4Addr::from(next_src);
            let _ = run(n, now, Inbound, seg(src, 1024, PUB, 80, SYN, i, 0, 0));
        }
    };
    for round in 0..5u64 {
        // A sweep (early drop, unlink), the flood (the workers pass quiescent points),
        // the next sweep (frees what the first unlinked), the flood again.
        n.handle_timeout(t(3 + round));
        flood(&mut n, 3 + round);
        n.handle_timeout(t(3 + round));
        flood(&mut n, 3 + round);
        for i in 0..4u16 {
            let sport = 4000 + (round as u16) * 10 + i;
            run(
                &mut n,
                3 + round,
                Outbound,
                seg(IN_A, sport, SRV, 443, SYN, 1, 0, 0),
            )
            .unwrap();
        }
    }
    let c = n.counters();
    assert!(
        c.sessions_early_dropped > 0,
        "half-open sessions reclaimed and counted"
    );
    // The established connections are all there and still established.
    for p in est {
        let s = n.sessions();
        let mine = s
            .iter()
            .find(|v| v.revised.src.port == p)
            .expect("established kept");
        assert_eq!(mine.tcp.state(), ConnState::Established);
    }
}

/// The early drop never takes an established session, even when that leaves the table
/// full.
#[test]
fn early_drop_never_takes_established_sessions() {
    let mut cfg = config();
    cfg.max_sessions = 8;
    let mut n = Nat44::new(cfg).unwrap();
    for i in 0..8 {
        handshake(&mut n, 0, 1000 + i);
    }
    assert_eq!(
        run(&mut n, 1, Outbound, seg(IN_A, 9, SRV, 80, SYN, 1, 0, 0)),
        Err(DropReason::TableFull)
    );
    n.handle_timeout(t(2));
    n.handle_timeout(t(2));
    assert_eq!(n.session_count(), 8);
    assert_eq!(n.counters().sessions_early_dropped, 0);
}
