//! A spoofed SYN flood at a port forward against a full table (as in the attack lab's SYN
//! flood): a new outside session at the live bound evicts an unconfirmed one and gets in
//! (conntrack's `early_drop` at insert), so legitimate clients connect while the flood goes
//! on; the reaper's drain reclaims the victims' slots within a tick. Time is passed in:
//! deterministic.

use std::net::{Ipv4Addr, SocketAddrV4};

use conntrack::tcp::ConnState;
use conntrack::{Counted, Endpoint, Proto, Timestamp};

use super::config::{Nat44Config, PortForward};
use super::tests::{config, IN_A, PUB, SRV};
use super::Nat44;
use crate::config::L4Proto;
use crate::testpkt::ports;
use crate::verdict::{Direction, Direction::*, DropReason};
use crate::Emit;

const SYN: u8 = 0x02;
const SYNACK: u8 = 0x12;
const ACK: u8 = 0x10;

/// The inside server behind the port forward 203.0.113.1:80.
const WEB: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 80);
/// The legitimate outside client.
const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 7);
/// Table size.
const CAP: usize = 1024;

/// A TCP segment without payload ([`crate::testpkt::tcp_segment`]).
fn seg(
    src: Ipv4Addr,
    sport: u16,
    dst: Ipv4Addr,
    dport: u16,
    flags: u8,
    seq: u32,
    ack: u32,
) -> Vec<u8> {
    crate::testpkt::tcp_segment(src, sport, dst, dport, flags, seq, ack, 0)
}

/// A fake clock: 10 µs a packet (100 kpps).
struct Clock(u64);

impl Clock {
    fn tick(&mut self) -> Timestamp {
        self.0 += 10_000;
        Timestamp::from_nanos(self.0)
    }
}

fn run(
    n: &mut Nat44,
    c: &mut Clock,
    dir: Direction,
    mut p: Vec<u8>,
) -> Result<Vec<u8>, DropReason> {
    match n.process(c.tick(), dir, &mut p) {
        Emit::Drop(r) => Err(r),
        _ => Ok(p),
    }
}

fn forward_config() -> Nat44Config {
    let mut cfg = config();
    cfg.max_sessions = CAP;
    cfg.port_forwards.push(PortForward {
        protocol: L4Proto::Tcp,
        public: SocketAddrV4::new(PUB, 80),
        inside: SocketAddrV4::new(WEB, 80),
    });
    cfg
}

/// Spoofed flood sources: 198.18.0.0/15, one per SYN.
struct Flood(u32);

impl Flood {
    /// One spoofed SYN at the forward; the web server's SYN-ACK too when it got through.
    fn syn(&mut self, n: &mut Nat44, c: &mut Clock) -> Result<(), DropReason> {
        self.0 += 1;
        let src = Ipv4Addr::from(0xc612_0000 + (self.0 & 0x1_ffff));
        run(n, c, Inbound, seg(src, 1024, PUB, 80, SYN, self.0, 0))?;
        run(
            n,
            c,
            Outbound,
            seg(WEB, 80, src, 1024, SYNACK, 9, self.0 + 1),
        )
        .map(|_| ())
    }
}

/// An outside client's handshake through the forward, `flood` spoofed SYNs arriving
/// between each of its segments (the round trips); Ok when all three got through.
fn outside_handshake(
    n: &mut Nat44,
    c: &mut Clock,
    f: &mut Flood,
    cport: u16,
    flood: usize,
) -> Result<(), DropReason> {
    let mut between = |n: &mut Nat44, c: &mut Clock| {
        for _ in 0..flood {
            let _ = f.syn(n, c);
        }
    };
    run(n, c, Inbound, seg(CLIENT, cport, PUB, 80, SYN, 100, 0))?;
    between(n, c);
    run(
        n,
        c,
        Outbound,
        seg(WEB, 80, CLIENT, cport, SYNACK, 5000, 101),
    )?;
    between(n, c);
    run(n, c, Inbound, seg(CLIENT, cport, PUB, 80, ACK, 101, 5001))?;
    Ok(())
}

/// An inside client's handshake to SRV:443.
fn inside_handshake(n: &mut Nat44, c: &mut Clock, sport: u16) -> Result<(), DropReason> {
    let o = run(n, c, Outbound, seg(IN_A, sport, SRV, 443, SYN, 100, 0))?;
    let public = ports(&o).0;
    run(n, c, Inbound, seg(SRV, 443, PUB, public, SYNACK, 5000, 101))?;
    run(n, c, Outbound, seg(IN_A, sport, SRV, 443, ACK, 101, 5001))?;
    Ok(())
}

fn state_of(n: &Nat44, src: Endpoint) -> Option<ConnState> {
    n.sessions()
        .iter()
        .find(|v| v.initial.src == src)
        .map(|v| v.tcp.state())
}

/// The table (1024 sessions) full of half-open sessions from spoofed sources at the
/// forward; then 200 legitimate connections, 50 flood SYNs (each with the server's
/// SYN-ACK) around each, the reaper draining every round (a 1 ms tick at 100 kpps would
/// drain every 100 packets; here every ~53): every legitimate connection gets its session
/// and completes; established sessions, outside or inside, are never evicted; inside
/// users still connect; every eviction is counted; after everything expires nothing is
/// left. Fails on `integ` (legitimate SYNs refused `table_full`).
#[test]
fn legitimate_clients_connect_through_a_spoofed_syn_flood() {
    let mut n = Nat44::new(forward_config()).unwrap();
    let bindings_at_rest = n.binding_count();
    let mut c = Clock(1_000_000_000);
    let mut f = Flood(0);
    // Established before the flood: four outside clients, four inside ones.
    for p in 0..4 {
        outside_handshake(&mut n, &mut c, &mut f, 2000 + p, 0).unwrap();
        inside_handshake(&mut n, &mut c, 3000 + p).unwrap();
    }
    // Fill: every outside-opened session the table allows (3/4 of it live), the reaper
    // draining as it does every tick.
    for i in 0..CAP {
        let _ = f.syn(&mut n, &mut c);
        if i % 50 == 49 {
            let now = c.tick();
            n.drain(now);
        }
    }
    // (The live bound counts every session: the eight established ones too.)
    assert_eq!(n.shared().sessions.live_count(), CAP - CAP / 4);
    let created_before = n.counters().sessions_created;
    let mut legit_ok = 0;
    let mut inside_ok = 0;
    for i in 0..200u16 {
        match outside_handshake(&mut n, &mut c, &mut f, 10_000 + i, 25) {
            Ok(()) => legit_ok += 1,
            Err(e) => eprintln!("legitimate {i}: {e}"),
        }
        if i % 10 == 0 && inside_handshake(&mut n, &mut c, 4000 + i).is_ok() {
            inside_ok += 1;
        }
        let now = c.tick();
        n.drain(now);
        // The dead slots never outgrow the room kept for them.
        assert!(n.shared().sessions.dead_pending() <= CAP / 8);
    }
    assert_eq!(legit_ok, 200, "every legitimate connection got through");
    assert_eq!(inside_ok, 20, "inside users still get sessions");
    for i in 0..200u16 {
        let s = state_of(&n, Endpoint::new(CLIENT, 10_000 + i));
        assert_eq!(
            s,
            Some(ConnState::Established),
            "legitimate {i} established"
        );
    }
    for p in 0..4 {
        let s = state_of(&n, Endpoint::new(CLIENT, 2000 + p));
        assert_eq!(s, Some(ConnState::Established), "outside {p} kept");
        let s = state_of(&n, Endpoint::new(IN_A, 3000 + p));
        assert_eq!(s, Some(ConnState::Established), "inside {p} kept");
    }
    let k = n.counters();
    assert_eq!(
        k.dropped(DropReason::TableFull),
        0,
        "every SYN found a victim"
    );
    assert!(k.sessions_early_dropped >= 200 * 50, "{k:?}");
    // Every eviction counted: whatever was created and is not live was early-dropped
    // (nothing expired yet).
    assert_eq!(k.sessions_expired, 0);
    assert_eq!(
        k.sessions_created,
        n.session_count() as u64 + k.sessions_early_dropped,
        "created = live + evicted"
    );
    assert!(k.sessions_created > created_before);
    // Everything expires (established 7440 s); the reaper runs: nothing leaks.
    let later = Timestamp::from_secs(20_000);
    for _ in 0..3 {
        n.handle_timeout(later);
        // The worker passes a quiescent point between passes.
        let _ = run(&mut n, &mut Clock(later.as_nanos()), Inbound, vec![0u8; 20]);
    }
    n.handle_timeout(later);
    let sh = n.shared();
    assert_eq!(n.session_count(), 0);
    assert_eq!(sh.sessions.occupied(), 0, "every slot freed");
    assert_eq!(sh.sessions.dead_pending(), 0);
    assert_eq!(
        n.binding_count(),
        bindings_at_rest,
        "only the forward's binding"
    );
    assert_eq!(sh.host_count(Counted::Sessions, IN_A), 0);
    assert_eq!(sh.host_count(Counted::Ports(Proto::Tcp), IN_A), 0);
}

/// Without the reaper's drain, the evicted sessions' slots are not free yet: outside
/// sessions stop at 7/8 of the slots (refused, counted `table_full`) and the last eighth
/// is still the inside users'.
#[test]
fn dead_slots_waiting_for_the_reaper_never_take_the_inside_share() {
    let mut n = Nat44::new(forward_config()).unwrap();
    let mut c = Clock(1_000_000_000);
    let mut f = Flood(0);
    let mut refused = 0;
    for _ in 0..2 * CAP {
        match f.syn(&mut n, &mut c) {
            Err(DropReason::TableFull) => refused += 1,
            Err(e) => panic!("{e}"),
            Ok(()) => {}
        }
    }
    assert!(refused > 0);
    let sh = n.shared();
    assert_eq!(sh.sessions.occupied(), CAP - CAP / 8);
    assert_eq!(sh.sessions.live_count(), CAP - CAP / 4);
    assert_eq!(n.counters().dropped(DropReason::TableFull), refused);
    for i in 0..(CAP / 8) as u16 {
        let r = inside_handshake(&mut n, &mut c, 5000 + i);
        assert_eq!(r, Ok(()), "inside {i}: {:?}", n.counters());
    }
    // The drain gives the dead slots back; the inside users now hold their eighth, so
    // outside sessions are refused at the slot bound without evicting anyone.
    let now = c.tick();
    n.drain(now);
    let _ = run(&mut n, &mut c, Inbound, vec![0u8; 20]); // a quiescent point
    let now = c.tick();
    assert!(!n.drain(now), "all reclaimed");
    let sh = n.shared();
    assert_eq!(sh.sessions.dead_pending(), 0);
    assert_eq!(sh.sessions.occupied(), CAP - CAP / 8);
    let evicted = n.counters().sessions_early_dropped;
    assert_eq!(f.syn(&mut n, &mut c), Err(DropReason::TableFull));
    assert_eq!(n.counters().sessions_early_dropped, evicted);
}
