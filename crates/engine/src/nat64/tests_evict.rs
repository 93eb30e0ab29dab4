//! A spoofed SYN flood at a static binding (NAT64's port forward) against a full table,
//! as `nat44::tests_evict` does for NAT44: NAT64 runs on NAT44's session table, so a new
//! session at the live bound evicts an unconfirmed one and gets in; the NAT64 reaper must
//! also run NAT44's drain between passes, or the victims' slots come back only at the next
//! full sweep and the flood fills the slot bound with dead sessions (`table_full` for
//! everyone from the outside). Time is passed in: deterministic.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

use conntrack::tcp::ConnState;
use conntrack::Endpoint;

use super::*;
use crate::testpkt::*;
use crate::HEADROOM;

const SYN: u8 = 0x02;
const SYNACK: u8 = 0x12;
const ACK: u8 = 0x10;

const POOL: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
/// The IPv6 web server behind the static binding 203.0.113.1:80.
const WEB: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x80);
/// An IPv6 inside user, and the IPv4 server it reaches.
const USER: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x10);
const SRV4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
/// The legitimate IPv4 client.
const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 7);
/// Table size.
const CAP: usize = 1024;

fn pref64() -> Pref64 {
    "2001:db8:64::/96".parse().unwrap()
}

fn config() -> Nat64Config {
    Nat64Config {
        pref64: pref64(),
        pool4: vec!["203.0.113.1/32".parse().unwrap()],
        max_sessions: CAP,
        static_bindings: vec![Nat64Static {
            protocol: crate::config::L4Proto::Tcp,
            public: SocketAddrV4::new(POOL, 80),
            inside: SocketAddrV6::new(WEB, 80, 0, 0),
        }],
        ..Nat64Config::default()
    }
}

fn seg(sport: u16, dport: u16, flags: u8, seq: u32, ack: u32) -> Vec<u8> {
    let mut h = tcp(sport, dport, flags);
    h[4..8].copy_from_slice(&seq.to_be_bytes());
    h[8..12].copy_from_slice(&ack.to_be_bytes());
    h[14..16].copy_from_slice(&1000u16.to_be_bytes());
    h
}

fn v6(src: Ipv6Addr, dst: Ipv6Addr, l4: &[u8]) -> Vec<u8> {
    let mut p = ipv6(TCP, src, dst, 64, l4);
    fill_l4_csum(&mut p);
    p
}

fn v4(src: Ipv4Addr, dst: Ipv4Addr, l4: &[u8]) -> Vec<u8> {
    let mut p = ipv4(TCP, src, dst, 60, l4);
    fill_l4_csum(&mut p);
    p
}

/// A fake clock: 10 µs a packet (100 kpps).
struct Clock(u64);

impl Clock {
    fn tick(&mut self) -> Timestamp {
        self.0 += 10_000;
        Timestamp::from_nanos(self.0)
    }
}

fn run(n: &mut Nat64, c: &mut Clock, dir: Direction, pkt: &[u8]) -> Result<Vec<u8>, DropReason> {
    let mut b = with_room(pkt, HEADROOM);
    match n.process(c.tick(), dir, &mut b, HEADROOM, pkt.len()) {
        Emit::Forward { start, len } => Ok(b[start..start + len].to_vec()),
        e => Err(e.drop_reason().unwrap_or(DropReason::Truncated)),
    }
}

/// Spoofed flood sources: 198.18.0.0/15, one per SYN.
struct Flood(u32);

impl Flood {
    /// One spoofed SYN at the binding; the web server's SYN-ACK too when it got through.
    fn syn(&mut self, n: &mut Nat64, c: &mut Clock) -> Result<(), DropReason> {
        self.0 += 1;
        let src = Ipv4Addr::from(0xc612_0000 + (self.0 & 0x1_ffff));
        run(
            n,
            c,
            Direction::Inbound,
            &v4(src, POOL, &seg(1024, 80, SYN, self.0, 0)),
        )?;
        let synack = v6(
            WEB,
            pref64().embed(src),
            &seg(80, 1024, SYNACK, 9, self.0 + 1),
        );
        run(n, c, Direction::Outbound, &synack).map(|_| ())
    }
}

/// The IPv4 client's handshake through the binding, `flood` spoofed SYNs between each of
/// its segments; Ok when all three got through.
fn outside_handshake(
    n: &mut Nat64,
    c: &mut Clock,
    f: &mut Flood,
    cport: u16,
    flood: usize,
) -> Result<(), DropReason> {
    let mut between = |n: &mut Nat64, c: &mut Clock| {
        for _ in 0..flood {
            let _ = f.syn(n, c);
        }
    };
    let client6 = pref64().embed(CLIENT);
    run(
        n,
        c,
        Direction::Inbound,
        &v4(CLIENT, POOL, &seg(cport, 80, SYN, 100, 0)),
    )?;
    between(n, c);
    run(
        n,
        c,
        Direction::Outbound,
        &v6(WEB, client6, &seg(80, cport, SYNACK, 5000, 101)),
    )?;
    between(n, c);
    run(
        n,
        c,
        Direction::Inbound,
        &v4(CLIENT, POOL, &seg(cport, 80, ACK, 101, 5001)),
    )?;
    Ok(())
}

/// The IPv6 user's handshake to SRV4:443.
fn inside_handshake(n: &mut Nat64, c: &mut Clock, sport: u16) -> Result<(), DropReason> {
    let srv6 = pref64().embed(SRV4);
    let o = run(
        n,
        c,
        Direction::Outbound,
        &v6(USER, srv6, &seg(sport, 443, SYN, 100, 0)),
    )?;
    let public = ports(&o).0;
    run(
        n,
        c,
        Direction::Inbound,
        &v4(SRV4, POOL, &seg(443, public, SYNACK, 5000, 101)),
    )?;
    run(
        n,
        c,
        Direction::Outbound,
        &v6(USER, srv6, &seg(sport, 443, ACK, 101, 5001)),
    )?;
    Ok(())
}

/// The TCP state of the session opened by the IPv4 client from `cport`.
fn client_state(n: &Nat64, cport: u16) -> Option<ConnState> {
    let src = Endpoint::new(CLIENT, cport);
    n.shared()
        .nat
        .sessions()
        .iter()
        .find(|v| v.initial.src == src)
        .map(|v| v.tcp.state())
}

/// Fills the table with the flood (3/4 of it live: the bound for sessions opened from the
/// outside), then runs 200 legitimate handshakes with 25 flood SYNs (each answered) between
/// each of their segments; `drain`: the reaper's drain runs after each, as it does live.
/// Returns (legitimate ok, inside ok).
fn flood_and_connect(n: &mut Nat64, drain: bool) -> (usize, usize) {
    let mut c = Clock(1_000_000_000);
    let mut f = Flood(0);
    for i in 0..CAP {
        let _ = f.syn(n, &mut c);
        if drain && i % 50 == 49 {
            let now = c.tick();
            n.drain(now);
        }
    }
    let (mut legit, mut inside) = (0, 0);
    for i in 0..200u16 {
        if outside_handshake(n, &mut c, &mut f, 10_000 + i, 25).is_ok() {
            legit += 1;
        }
        if i % 10 == 0 && inside_handshake(n, &mut c, 4000 + i).is_ok() {
            inside += 1;
        }
        if drain {
            let now = c.tick();
            n.drain(now);
            assert!(n.shared().nat.sessions.dead_pending() <= CAP / 8);
        }
    }
    (legit, inside)
}

/// Every legitimate IPv4 client gets its session through a table full of spoofed
/// half-open ones and completes its handshake; inside users still connect; every eviction
/// is counted and nothing but evictions took sessions away.
#[test]
fn legitimate_clients_connect_through_a_spoofed_syn_flood() {
    let mut n = Nat64::new(config()).unwrap();
    let (legit, inside) = flood_and_connect(&mut n, true);
    assert_eq!(
        legit,
        200,
        "every legitimate connection got through: {:?}",
        n.counters()
    );
    assert_eq!(inside, 20, "inside users still get sessions");
    for i in 0..200u16 {
        assert_eq!(
            client_state(&n, 10_000 + i),
            Some(ConnState::Established),
            "{i}"
        );
    }
    let k = n.counters();
    assert_eq!(
        k.dropped(DropReason::TableFull),
        0,
        "every SYN found a victim"
    );
    assert!(k.sessions_early_dropped >= 200 * 50, "{k:?}");
    assert_eq!(k.sessions_expired, 0);
    assert_eq!(
        k.sessions_created,
        n.shared().session_count() as u64 + k.sessions_early_dropped,
        "created = live + evicted"
    );
    // Everything expires; nothing leaks.
    let later = Timestamp::from_secs(20_000);
    for _ in 0..3 {
        n.handle_timeout(later);
        let mut c = Clock(later.as_nanos());
        let _ = run(&mut n, &mut c, Direction::Inbound, &[0u8; 20]);
    }
    n.handle_timeout(later);
    assert_eq!(n.shared().session_count(), 0);
    assert_eq!(n.shared().nat.sessions.occupied(), 0, "every slot freed");
}

/// Without the drain, the evicted sessions' slots wait for the next full sweep: the flood
/// fills the slot bound with dead sessions and legitimate clients are refused
/// `table_full`, the failure the drain prevents. The inside users' eighth of the table
/// stays theirs either way.
#[test]
fn without_the_drain_the_flood_locks_clients_out() {
    let mut n = Nat64::new(config()).unwrap();
    let (legit, inside) = flood_and_connect(&mut n, false);
    assert!(legit < 10, "{legit} of 200 got through without the drain");
    assert_eq!(inside, 20, "the inside share holds");
    assert!(n.counters().dropped(DropReason::TableFull) > 0);
    assert_eq!(n.shared().nat.sessions.occupied(), CAP - CAP / 8 + 20);
}
