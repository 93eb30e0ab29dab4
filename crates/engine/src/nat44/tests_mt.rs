//! Many threads on one NAT44 instance: racing creators agree, nothing leaks under churn.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use conntrack::Timestamp;
use wire::checksum::{checksum, combine, fold, pseudo_header_v4, sum};

use super::config::{DynamicRule, Nat44Config};
use super::Nat44Shared;
use crate::config::PortRange;
use crate::verdict::Direction;

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

fn cfg(ports: (u16, u16), max_sessions: usize) -> Nat44Config {
    Nat44Config {
        rules: vec![DynamicRule {
            inside: "10.0.0.0/16".parse().unwrap(),
            pool: vec!["203.0.113.0/30".parse().unwrap()],
            ports: PortRange::new(ports.0, ports.1).unwrap(),
        }],
        max_sessions,
        ..Nat44Config::default()
    }
}

const SERVER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);

/// Every thread sends the first packet of the same 2000 flows at the same moment. Each
/// flow must end with one session and one mapping that every thread agrees on, and no
/// public endpoint may serve two inside endpoints.
#[test]
fn racing_workers_agree_on_every_flow() {
    const THREADS: usize = 4;
    const FLOWS: u16 = 2000;
    let shared = Nat44Shared::new(cfg((1024, 65535), 100_000), THREADS).unwrap();
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|id| {
            let mut w = shared.worker(id);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                let mut seen = HashMap::new();
                // Each thread walks the flows in a different order to maximise collisions.
                for i in 0..FLOWS {
                    let f = (i.wrapping_mul(7 + 2 * id as u16)) % FLOWS;
                    let inside = Ipv4Addr::new(10, 0, (f / 250) as u8, (f % 250) as u8 + 1);
                    let mut p = udp(inside, 20000 + f % 7, SERVER, 53);
                    assert_eq!(
                        w.process_packet(Timestamp::from_secs(1), Direction::Outbound, &mut p)
                            .drop_reason(),
                        None
                    );
                    let public = (
                        Ipv4Addr::new(p[12], p[13], p[14], p[15]),
                        u16::from_be_bytes([p[20], p[21]]),
                    );
                    seen.insert((inside, 20000 + f % 7), public);
                    w.quiescent();
                }
                seen
            })
        })
        .collect();
    let maps: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for m in &maps[1..] {
        assert_eq!(m, &maps[0], "all workers translate every flow the same way");
    }
    let publics: HashSet<_> = maps[0].values().collect();
    assert_eq!(
        publics.len(),
        maps[0].len(),
        "no public endpoint serves two inside endpoints"
    );
    assert_eq!(shared.session_count(), FLOWS as usize);
    assert_eq!(shared.binding_count(), FLOWS as usize);
    // Per-host counts: each flow counted once, whichever worker won its race.
    assert_eq!(
        shared.host_count_total(conntrack::Counted::Sessions),
        u64::from(FLOWS)
    );
    assert_eq!(
        shared.host_count_total(conntrack::Counted::Ports(conntrack::Proto::Udp)),
        u64::from(FLOWS)
    );
    // Replies through another worker reach the right inside endpoint.
    let mut w = shared.worker(1);
    for ((inside, port), (pa, pp)) in &maps[0] {
        let mut r = udp(SERVER, 53, *pa, *pp);
        assert_eq!(
            w.process_packet(Timestamp::from_secs(2), Direction::Inbound, &mut r)
                .drop_reason(),
            None
        );
        assert_eq!(
            (
                Ipv4Addr::new(r[16], r[17], r[18], r[19]),
                u16::from_be_bytes([r[22], r[23]])
            ),
            (*inside, *port)
        );
    }
}

/// Workers churn through short-lived flows while the reaper thread expires them on a
/// shared fake clock, with a port range small enough to be reused many times. At the end
/// every session, binding and port must be back: nothing lost, nothing leaked.
#[test]
fn churn_with_a_reaper_thread_leaks_nothing() {
    const THREADS: usize = 2;
    let mut c = cfg((40000, 40255), 4096);
    c.timeouts.udp = Duration::from_secs(2);
    c.port_reuse_hold = Duration::from_secs(1);
    let shared = Nat44Shared::new(c, THREADS).unwrap();
    let clock = Arc::new(AtomicU64::new(Timestamp::from_secs(10).as_nanos()));
    let stop = Arc::new(AtomicBool::new(false));
    let reaper = {
        let (mut r, clock, stop) = (shared.reaper(), Arc::clone(&clock), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                r.handle_timeout(Timestamp::from_nanos(clock.load(Ordering::Acquire)));
                std::thread::yield_now();
            }
            r
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|id| {
            let mut w = shared.worker(id);
            let clock = Arc::clone(&clock);
            std::thread::spawn(move || {
                let mut forwarded = 0u64;
                for round in 0..30_000u32 {
                    let now = if id == 0 && round % 500 == 0 {
                        // Thread 0 moves time on: 100 ms a step.
                        clock.fetch_add(100_000_000, Ordering::AcqRel) + 100_000_000
                    } else {
                        clock.load(Ordering::Acquire)
                    };
                    // 512 flows, each idle long enough now and then to expire and come back.
                    let f = (round * 7 + id as u32 * 13) % 512;
                    let host = Ipv4Addr::new(10, 0, 0, (f % 64) as u8 + 1);
                    let mut p = udp(host, 1000 + (f / 64) as u16, SERVER, 53);
                    if w.process_packet(Timestamp::from_nanos(now), Direction::Outbound, &mut p)
                        .is_forward()
                    {
                        forwarded += 1;
                    }
                    if round % 32 == 0 {
                        w.quiescent();
                    }
                }
                w.offline();
                (forwarded, w.counters().clone())
            })
        })
        .collect();
    let mut forwarded = 0;
    for h in workers {
        let (f, _) = h.join().unwrap();
        forwarded += f;
    }
    stop.store(true, Ordering::Release);
    let mut reaper = reaper.join().unwrap();
    assert!(
        forwarded > 50_000,
        "most packets got through ({forwarded} of 60000)"
    );
    // Let everything expire and every hold pass, then sweep twice (grace period).
    let end = Timestamp::from_nanos(clock.load(Ordering::Acquire)) + Duration::from_secs(60);
    reaper.handle_timeout(end);
    reaper.handle_timeout(end + Duration::from_secs(5));
    assert_eq!(shared.session_count(), 0, "sessions left behind");
    assert_eq!(shared.binding_count(), 0, "bindings left behind");
    assert_eq!(reaper.limbo_len(), 0, "slots never reclaimed");
    for what in [
        conntrack::Counted::Sessions,
        conntrack::Counted::Ports(conntrack::Proto::Udp),
    ] {
        assert_eq!(
            shared.host_count_total(what),
            0,
            "{what:?} per host drifted"
        );
    }
    let (lo, hi) = shared.pools[0].addr_ranges().next().unwrap();
    for a in (u32::from(lo)..=u32::from(hi)).map(std::net::Ipv4Addr::from) {
        for proto in [conntrack::Proto::Udp, conntrack::Proto::Tcp] {
            assert_eq!(
                shared.pools[0].taken(a, proto),
                0,
                "ports of {a} never returned"
            );
        }
    }
    assert!(reaper.counters().sessions_expired > 0);
}

// Eviction at a full table under concurrency.

/// A TCP segment without payload ([`crate::testpkt::tcp_segment`]).
fn tcp(
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

/// One worker floods spoofed SYNs at a port forward of a 4096-session table (each
/// answered by the server), the other completes legitimate outside handshakes and inside
/// connections, while the reaper thread drains the evicted and sweeps. Every session
/// that completed its handshake is still there and established (never evicted); after
/// everything expires, every session ended exactly once (created = early-dropped +
/// expired) and nothing leaks: sessions, slots, bindings, subscriber counts.
#[test]
fn evicting_workers_and_a_draining_reaper_leak_nothing() {
    use crate::verdict::Direction::{Inbound, Outbound};
    const SYN: u8 = 0x02;
    const SYNACK: u8 = 0x12;
    const ACK: u8 = 0x10;
    let web = Ipv4Addr::new(10, 0, 0, 80);
    let public = Ipv4Addr::new(203, 0, 113, 1);
    let client = Ipv4Addr::new(192, 0, 2, 7);
    let mut c = cfg((40000, 65535), 4096);
    c.port_forwards.push(super::config::PortForward {
        protocol: crate::config::L4Proto::Tcp,
        public: std::net::SocketAddrV4::new(public, 80),
        inside: std::net::SocketAddrV4::new(web, 80),
    });
    let shared = Nat44Shared::new(c, 2).unwrap();
    let bindings_at_rest = shared.binding_count();
    let now = Timestamp::from_secs(10);
    let stop = Arc::new(AtomicBool::new(false));
    let reaper = {
        let (mut r, stop) = (shared.reaper(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut i = 0u32;
            while !stop.load(Ordering::Acquire) {
                if i.is_multiple_of(64) {
                    r.handle_timeout(now);
                }
                r.drain(now);
                i += 1;
                std::thread::yield_now();
            }
            r
        })
    };
    let flood = {
        let mut w = shared.worker(0);
        std::thread::spawn(move || {
            for i in 0..40_000u32 {
                let src = Ipv4Addr::from(0xc612_0000 + i);
                let mut p = tcp(src, 1024, public, 80, SYN, i, 0);
                if w.process_packet(now, Inbound, &mut p).is_forward() {
                    let mut p = tcp(web, 80, src, 1024, SYNACK, 9, i + 1);
                    w.process_packet(now, Outbound, &mut p);
                }
                if i % 32 == 0 {
                    w.quiescent();
                }
            }
            w.offline();
            w.counters().clone()
        })
    };
    let legit = {
        let mut w = shared.worker(1);
        std::thread::spawn(move || {
            let mut done = vec![];
            for i in 0..2_000u16 {
                let cport = 10_000 + i;
                // A refused SYN is retried, as a client does.
                for _ in 0..50 {
                    let mut p = tcp(client, cport, public, 80, SYN, 100, 0);
                    if w.process_packet(now, Inbound, &mut p).is_forward() {
                        break;
                    }
                    w.quiescent();
                    std::thread::yield_now();
                }
                let ok = w
                    .process_packet(
                        now,
                        Inbound,
                        &mut tcp(client, cport, public, 80, SYN, 100, 0),
                    )
                    .is_forward()
                    && w.process_packet(
                        now,
                        Outbound,
                        &mut tcp(web, 80, client, cport, SYNACK, 5000, 101),
                    )
                    .is_forward()
                    && w.process_packet(
                        now,
                        Inbound,
                        &mut tcp(client, cport, public, 80, ACK, 101, 5001),
                    )
                    .is_forward();
                if ok {
                    done.push(cport);
                }
                // An inside connection now and then (they count in the outside's bounds
                // too: the room for dead slots shrinks by as many).
                if i % 64 == 0 {
                    let host = Ipv4Addr::new(10, 0, 1, (i / 64) as u8 + 1);
                    let mut p = tcp(host, 5000, SERVER, 443, SYN, 1, 0);
                    if w.process_packet(now, Outbound, &mut p).is_forward() {
                        let port = u16::from_be_bytes([p[20], p[21]]);
                        let mut p = tcp(SERVER, 443, public, port, SYNACK, 9, 2);
                        w.process_packet(now, Inbound, &mut p);
                    }
                }
                w.quiescent();
            }
            w.offline();
            (done, w.counters().clone())
        })
    };
    let flood_counters = flood.join().unwrap();
    let (done, legit_counters) = legit.join().unwrap();
    stop.store(true, Ordering::Release);
    let mut reaper = reaper.join().unwrap();
    // How many got through depends on the scheduler (the reaper must drain as fast as
    // the flood evicts); that none of those is evicted does not.
    assert!(!done.is_empty(), "{legit_counters:?}");
    let live = shared.sessions.live().collect::<Vec<_>>();
    for cport in &done {
        // The session its SYN made; or, when the flood evicted that one while it was
        // still unconfirmed (between the SYN and the SYN ACK: a loaded machine widens
        // that window), the one the server's SYN ACK made in its place, which the ACK
        // then confirmed.
        let ep = conntrack::Endpoint::new(client, *cport);
        let s = live
            .iter()
            .find(|v| v.initial.src == ep || v.initial.dst == ep)
            .unwrap_or_else(|| panic!("connection from {cport} evicted"));
        assert!(s.tcp.is_confirmed());
    }
    // Everything expires; sweeps and drains bring every slot back.
    let end = now + Duration::from_secs(20_000);
    reaper.handle_timeout(end);
    reaper.drain(end);
    reaper.handle_timeout(end + Duration::from_secs(5));
    assert_eq!(shared.session_count(), 0, "sessions left behind");
    assert_eq!(shared.sessions.occupied(), 0, "slots never freed");
    assert_eq!(shared.sessions.dead_pending(), 0);
    assert_eq!(reaper.limbo_len(), 0, "slots never reclaimed");
    assert_eq!(
        shared.binding_count(),
        bindings_at_rest,
        "bindings left behind"
    );
    for what in [
        conntrack::Counted::Sessions,
        conntrack::Counted::Ports(conntrack::Proto::Tcp),
    ] {
        assert_eq!(
            shared.host_count_total(what),
            0,
            "{what:?} per host drifted"
        );
    }
    let mut k = flood_counters;
    k.merge(&legit_counters);
    k.merge(reaper.counters());
    assert!(k.sessions_early_dropped > 0);
    assert_eq!(
        k.sessions_created,
        k.sessions_early_dropped + k.sessions_expired,
        "every session ended exactly once: {k:?}"
    );
}
