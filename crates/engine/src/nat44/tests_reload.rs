//! Live reload: sessions and bindings survive a policy swap, removed pools drain per the
//! policy and never hand out a port still in use, timeouts apply to the sessions already
//! there, refusals keep the policy in force, and workers translating while the policy
//! swaps never see a mix of two.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use conntrack::Timestamp;
use wire::checksum::{checksum, combine, fold, pseudo_header_v4, sum};

use super::config::{DynamicRule, Nat44Config};
use super::{Nat44, Nat44Shared};
use crate::config::{PortRange, ReloadDrain};
use crate::verdict::{Direction, DropReason};

const IN_A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const IN_B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 3);
const IN_C: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 4);
const SRV: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 80);
const POOL_A: &str = "203.0.113.1/32";
const POOL_B: &str = "198.51.100.0/30";

fn udp(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16) -> Vec<u8> {
    let mut p = vec![0x45, 0, 0, 36, 0, 0, 0, 0, 64, 17, 0, 0];
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    let c = checksum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    let mut u = vec![0u8; 16];
    u[0..2].copy_from_slice(&sport.to_be_bytes());
    u[2..4].copy_from_slice(&dport.to_be_bytes());
    u[4..6].copy_from_slice(&16u16.to_be_bytes());
    let c = !fold(combine(
        pseudo_header_v4(src.octets(), dst.octets(), 17, 16),
        sum(&u),
    ));
    u[6..8].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(&u);
    p
}

fn src(p: &[u8]) -> (Ipv4Addr, u16) {
    (
        Ipv4Addr::new(p[12], p[13], p[14], p[15]),
        u16::from_be_bytes([p[20], p[21]]),
    )
}

fn dst(p: &[u8]) -> (Ipv4Addr, u16) {
    (
        Ipv4Addr::new(p[16], p[17], p[18], p[19]),
        u16::from_be_bytes([p[22], p[23]]),
    )
}

fn rule(inside: &str, pools: &[&str], ports: (u16, u16)) -> DynamicRule {
    DynamicRule {
        inside: inside.parse().unwrap(),
        pool: pools.iter().map(|p| p.parse().unwrap()).collect(),
        ports: PortRange::new(ports.0, ports.1).unwrap(),
    }
}

fn config(pools: &[&str]) -> Nat44Config {
    Nat44Config {
        rules: vec![rule("10.0.0.0/24", pools, (1024, 65535))],
        ..Nat44Config::default()
    }
}

fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

/// Sends one packet of flow `inside:sport -> SRV:53` out; its public endpoint.
fn out(
    n: &mut Nat44,
    now: u64,
    inside: Ipv4Addr,
    sport: u16,
) -> Result<(Ipv4Addr, u16), DropReason> {
    let mut p = udp(inside, sport, SRV, 53);
    match n.process(t(now), Direction::Outbound, &mut p).drop_reason() {
        None => Ok(src(&p)),
        Some(r) => Err(r),
    }
}

/// Sends the server's reply to `public`; where it went inside.
fn reply(n: &mut Nat44, now: u64, public: (Ipv4Addr, u16)) -> Result<(Ipv4Addr, u16), DropReason> {
    let mut p = udp(SRV, 53, public.0, public.1);
    match n.process(t(now), Direction::Inbound, &mut p).drop_reason() {
        None => Ok(dst(&p)),
        Some(r) => Err(r),
    }
}

#[test]
fn a_reload_keeps_every_session_and_binding() {
    let mut n = Nat44::new(config(&[POOL_A])).unwrap();
    let public = out(&mut n, 1, IN_A, 4000).unwrap();
    let created = n.counters().sessions_created;
    let mut next = config(&[POOL_A, POOL_B]);
    next.timeouts.tcp_established = Duration::from_secs(3600);
    let report = n.shared().reload(next).unwrap().to_string();
    assert!(report.contains("pool + 198.51.100.0/30"), "{report}");
    assert!(
        report.contains("tcp_established 7440 s → 3600 s"),
        "{report}"
    );
    // Same flow: same session, same public endpoint, both ways.
    assert_eq!(out(&mut n, 2, IN_A, 4000), Ok(public));
    assert_eq!(reply(&mut n, 2, public), Ok((IN_A, 4000)));
    assert_eq!(n.counters().sessions_created, created);
    assert_eq!(n.session_count(), 1);
    assert_eq!(
        n.config().rules[0].pool.len(),
        1,
        "the handle's first generation"
    );
    assert_eq!(n.shared().current().config().rules[0].pool.len(), 2);
}

#[test]
fn new_flows_use_a_new_rule_and_pool() {
    let mut n = Nat44::new(config(&[POOL_A])).unwrap();
    let mut next = config(&[POOL_A]);
    next.rules
        .push(rule("10.0.1.0/24", &[POOL_B], (1024, 65535)));
    let report = n.shared().reload(next).unwrap().to_string();
    assert!(report.contains("nat44 rules 1 → 2"), "{report}");
    let (addr, _) = out(&mut n, 1, Ipv4Addr::new(10, 0, 1, 9), 5000).unwrap();
    assert!(addr.octets()[..3] == [198, 51, 100], "{addr}");
}

#[test]
fn a_timeout_change_applies_to_existing_sessions() {
    let mut n = Nat44::new(config(&[POOL_A])).unwrap();
    out(&mut n, 1, IN_A, 4000).unwrap();
    n.handle_timeout(t(100));
    assert_eq!(n.session_count(), 1, "udp 300 s: alive at 100 s");
    let mut next = config(&[POOL_A]);
    next.timeouts.udp = Duration::from_secs(60);
    n.shared().reload(next).unwrap();
    n.handle_timeout(t(102));
    assert_eq!(
        n.session_count(),
        0,
        "udp 60 s after the reload: expired at 102 s"
    );
}

#[test]
fn a_removed_pool_drains_by_expiry_and_is_never_handed_out_again() {
    let mut n = Nat44::new(config(&[POOL_A])).unwrap();
    let old = out(&mut n, 1, IN_A, 4000).unwrap();
    let report = n.shared().reload(config(&[POOL_B])).unwrap().to_string();
    assert!(report.contains("pool - 203.0.113.1/32"), "{report}");
    assert!(
        report.contains("1 sessions on removed addresses left to expire"),
        "{report}"
    );
    // The old session keeps working until it expires ("expire", the default).
    assert_eq!(out(&mut n, 2, IN_A, 4000), Ok(old));
    assert_eq!(reply(&mut n, 2, old), Ok((IN_A, 4000)));
    // New flows take the new pool only.
    for port in 5000..5050 {
        let (addr, _) = out(&mut n, 3, IN_B, port).unwrap();
        assert_ne!(addr, old.0);
    }
    n.handle_timeout(t(400));
    assert_eq!(n.session_count(), 0);
    // Expired: the address is gone with it; the same inside flow gets the new pool.
    let (addr, _) = out(&mut n, 401, IN_A, 4000).unwrap();
    assert_ne!(addr, old.0);
}

#[test]
fn a_removed_pool_drains_at_once_under_the_immediate_policy() {
    let mut cfg = config(&[POOL_A]);
    cfg.reload_drain = ReloadDrain::Immediate;
    let mut n = Nat44::new(cfg).unwrap();
    let old = out(&mut n, 1, IN_A, 4000).unwrap();
    out(&mut n, 1, IN_B, 4000).unwrap();
    let mut next = config(&[POOL_B]);
    next.reload_drain = ReloadDrain::Immediate;
    let report = n.shared().reload(next).unwrap().to_string();
    assert!(report.contains("2 sessions drained"), "{report}");
    n.handle_timeout(t(2));
    assert_eq!(n.session_count(), 0);
    assert_eq!(reply(&mut n, 2, old), Err(DropReason::NoMapping));
}

#[test]
fn a_pool_given_back_never_hands_out_a_port_an_old_binding_holds() {
    // One address, two ports. A holds one; the pool is removed, then given back as a
    // new pool (other range): it must not hand out A's port while A lives.
    let one = |ports| Nat44Config {
        rules: vec![rule("10.0.0.0/24", &[POOL_A], ports)],
        port_preservation: false,
        ..Nat44Config::default()
    };
    let mut n = Nat44::new(one((1024, 1025))).unwrap();
    let held = out(&mut n, 1, IN_A, 4000).unwrap();
    n.shared().reload(config(&[POOL_B])).unwrap();
    n.shared().reload(one((1024, 1026))).unwrap();
    let b = out(&mut n, 2, IN_B, 4000).unwrap();
    let c = out(&mut n, 2, IN_C, 4000).unwrap();
    assert!(b != held && c != held && b != c, "{held:?} {b:?} {c:?}");
    assert_eq!(out(&mut n, 2, IN_C, 4001), Err(DropReason::PoolExhausted));
    assert_eq!(reply(&mut n, 2, held), Ok((IN_A, 4000)));
}

#[test]
fn a_refused_reload_keeps_the_policy_in_force() {
    let n = Nat44::new(config(&[POOL_A])).unwrap();
    let mut next = config(&[POOL_B]);
    next.max_sessions = 1000;
    next.port_reuse_hold = Duration::from_secs(1);
    let e = n.shared().reload(next).unwrap_err().to_string();
    assert!(e.contains("max_sessions, port_reuse_hold"), "{e}");
    assert!(e.contains("restart"), "{e}");
    assert_eq!(*n.shared().current().config(), config(&[POOL_A]));
    // An invalid configuration is refused by validation, nothing applied either.
    let e = n.shared().reload(config(&[])).unwrap_err().to_string();
    assert!(e.contains("pool"), "{e}");
    assert_eq!(*n.shared().current().config(), config(&[POOL_A]));
}

#[test]
fn limits_apply_to_new_sessions() {
    let mut n = Nat44::new(config(&[POOL_A])).unwrap();
    for port in 0..3 {
        out(&mut n, 1, IN_A, 4000 + port).unwrap();
    }
    let mut next = config(&[POOL_A]);
    next.max_sessions_per_host = 2;
    n.shared().reload(next).unwrap();
    assert_eq!(
        out(&mut n, 2, IN_A, 4000).map(|_| ()),
        Ok(()),
        "existing ones go on"
    );
    assert_eq!(out(&mut n, 2, IN_A, 5000), Err(DropReason::SubscriberLimit));
}

/// Workers translate new flows without pause while the policy swaps between two pools
/// a hundred times, a thread spinning beside them: every packet is translated to one of
/// the two pools (never dropped: each generation is whole), no public endpoint serves two
/// flows, and every reply finds its flow.
#[test]
fn workers_never_see_a_torn_policy_while_it_swaps() {
    const WORKERS: usize = 2;
    const FLOWS: usize = 3000;
    // Each generation is told apart by its pool's addresses and port range together.
    let gen = |pool: &str, ports, udp| {
        let mut c = Nat44Config {
            rules: vec![rule("10.0.0.0/16", &[pool], ports)],
            port_preservation: false,
            max_sessions_per_host: 0,
            max_ports_per_host: 0,
            ..Nat44Config::default()
        };
        c.timeouts.udp = Duration::from_secs(udp);
        c
    };
    let p1 = gen(POOL_A, (1024, 10000), 300);
    let p2 = gen(POOL_B, (20000, 40000), 120);
    let shared = Nat44Shared::new(p1.clone(), WORKERS).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let busy = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut x = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            x
        })
    };
    // Flows translated so far: each reload waits for a few more, so every generation
    // serves some flows whatever the scheduler does (no reload races ahead of the workers).
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Reloads published: the workers never get more than 10 flows ahead of them either.
    let published = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let handles: Vec<_> = (0..WORKERS)
        .map(|id| {
            let mut w = shared.worker(id);
            let stop = Arc::clone(&stop);
            let done = Arc::clone(&done);
            let published = Arc::clone(&published);
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                for k in 0..FLOWS {
                    loop {
                        let r = published.load(Ordering::Relaxed);
                        if r >= 100 || done.load(Ordering::Relaxed) < 10 * (r + 1) {
                            break;
                        }
                        std::thread::yield_now();
                    }
                    let inside = Ipv4Addr::new(10, 0, id as u8, (k % 250) as u8 + 1);
                    let port = 1024 + (k / 250) as u16;
                    let mut p = udp(inside, port, SRV, 53);
                    w.refresh_if_stale(); // a batch of one
                    let v = w.process_packet(t(1), Direction::Outbound, &mut p);
                    assert_eq!(v.drop_reason(), None, "worker {id} flow {k}");
                    let public = src(&p);
                    let whole = (public.0 == Ipv4Addr::new(203, 0, 113, 1)
                        && (1024..=10000).contains(&public.1))
                        || (public.0.octets()[..3] == [198, 51, 100]
                            && (20000..=40000).contains(&public.1));
                    assert!(whole, "{public:?} for {inside}:{port}");
                    seen.push((inside, port, public));
                    done.fetch_add(1, Ordering::Relaxed);
                    w.quiescent();
                    if stop.load(Ordering::Relaxed) && k >= 200 {
                        break;
                    }
                }
                seen
            })
        })
        .collect();
    for i in 0..100 {
        // At most 1,000 of the workers' 6,000 flows: always reached.
        while done.load(Ordering::Relaxed) < 10 * (i + 1) {
            std::thread::yield_now();
        }
        let cfg = if i % 2 == 0 { p2.clone() } else { p1.clone() };
        shared.reload(cfg).unwrap();
        published.fetch_add(1, Ordering::Relaxed);
    }
    stop.store(true, Ordering::Relaxed);
    let mut publics = HashSet::new();
    let mut w = shared.worker(0);
    for h in handles {
        for (inside, port, public) in h.join().unwrap() {
            assert!(publics.insert(public), "{public:?} handed out twice");
            let mut r = udp(SRV, 53, public.0, public.1);
            let v = w.process_packet(t(2), Direction::Inbound, &mut r);
            assert_eq!(v.drop_reason(), None);
            assert_eq!(dst(&r), (inside, port));
        }
    }
    busy.join().unwrap();
    assert_eq!(shared.cell().generation(), 100);
    // The swaps happened under the workers' feet: both generations handed out ports.
    let in_b = publics.iter().filter(|p| p.0.octets()[0] == 198).count();
    assert!(
        in_b > 0 && in_b < publics.len(),
        "{in_b} of {}",
        publics.len()
    );
}

#[test]
fn port_forwards_come_and_go_live() {
    use super::config::PortForward;
    use crate::config::L4Proto;
    let fwd = PortForward {
        protocol: L4Proto::Udp,
        public: "203.0.113.1:5353".parse().unwrap(),
        inside: "10.0.0.20:53".parse().unwrap(),
    };
    // Two ports on the pool address, one of them the forward's.
    let config = |_: &[&str]| Nat44Config {
        rules: vec![rule("10.0.0.0/24", &[POOL_A], (5353, 5354))],
        port_preservation: false,
        ..Nat44Config::default()
    };
    let mut n = Nat44::new(config(&[POOL_A])).unwrap();
    let public = (Ipv4Addr::new(203, 0, 113, 1), 5353);
    assert!(reply(&mut n, 1, public).is_err(), "no forward yet");
    let mut with = config(&[POOL_A]);
    with.port_forwards.push(fwd);
    let report = n.shared().reload(with).unwrap().to_string();
    assert!(report.contains("forwards 0 → 1"), "{report}");
    assert_eq!(
        reply(&mut n, 2, public),
        Ok((Ipv4Addr::new(10, 0, 0, 20), 53))
    );
    // Removed: the open session goes on until it expires, then nothing gets in.
    n.shared().reload(config(&[POOL_A])).unwrap();
    assert_eq!(
        reply(&mut n, 3, public),
        Ok((Ipv4Addr::new(10, 0, 0, 20), 53))
    );
    n.handle_timeout(t(1000));
    assert_eq!(n.session_count(), 0);
    n.handle_timeout(t(1001));
    assert!(reply(&mut n, 1002, public).is_err(), "forward removed");
    // Its port stays taken (returned nowhere): one port left for outbound flows.
    assert_eq!(out(&mut n, 1003, IN_A, 6000), Ok((public.0, 5354)));
    assert_eq!(
        out(&mut n, 1003, IN_A, 6001),
        Err(DropReason::PoolExhausted)
    );
}

/// A preview reports what a reload would change, or refuses as it would, and changes
/// nothing: the policy in force, the sessions, the pool and a forward's endpoint stay.
#[test]
fn a_preview_reports_and_refuses_as_a_reload_would_and_changes_nothing() {
    use super::config::PortForward;
    use crate::config::L4Proto;
    use crate::reload::ReloadAction::Preview;
    let mut cfg = config(&[POOL_A]);
    cfg.reload_drain = ReloadDrain::Immediate;
    let mut n = Nat44::new(cfg.clone()).unwrap();
    let public = out(&mut n, 1, IN_A, 4000).unwrap();
    let mut next = config(&[POOL_B]);
    next.reload_drain = ReloadDrain::Immediate;
    next.port_forwards.push(PortForward {
        protocol: L4Proto::Udp,
        public: "198.51.100.1:53".parse().unwrap(),
        inside: "10.0.0.20:53".parse().unwrap(),
    });
    let preview = n
        .shared()
        .reload_as(next.clone(), Preview)
        .unwrap()
        .to_string();
    assert!(preview.contains("pool - 203.0.113.1/32"), "{preview}");
    assert!(preview.contains("pool + 198.51.100.0/30"), "{preview}");
    assert!(preview.contains("1 sessions drained"), "{preview}");
    // Nothing changed: same policy, the session still answered, nothing drained.
    assert_eq!(*n.shared().current().config(), cfg);
    n.handle_timeout(t(2));
    assert_eq!(n.session_count(), 1);
    assert_eq!(reply(&mut n, 2, public), Ok((IN_A, 4000)));
    // The forward's endpoint was not bound: the real reload then says the same.
    let applied = n.shared().reload(next).unwrap().to_string();
    assert_eq!(applied, preview);
    // A refusal is the same refusal.
    let mut bad = config(&[POOL_B]);
    bad.max_sessions = 1000;
    let e = n.shared().reload_as(bad.clone(), Preview).unwrap_err();
    assert_eq!(
        e.to_string(),
        n.shared().reload(bad).unwrap_err().to_string()
    );
}
