//! Tests of the port pool.

use super::*;
use proptest::prelude::*;
use std::collections::HashSet;
use std::sync::Arc;

fn ep(host: u8, port: u16) -> Endpoint {
    Endpoint::new(Ipv4Addr::new(10, 0, 0, host), port)
}

fn pool(n: u8, first: u16, last: u16) -> PortPool {
    PortPool::new(
        (1..=n).map(|i| Ipv4Addr::new(203, 0, 113, i)).collect(),
        first,
        last,
        Duration::from_secs(120),
        2,
    )
}

#[test]
fn preserves_port_when_free_and_in_range() {
    let p = pool(1, 1024, 65535);
    assert_eq!(
        p.allocate(Proto::Udp, ep(2, 5000), true, 0).unwrap().port,
        5000
    );
    let second = p.allocate(Proto::Udp, ep(3, 5000), true, 0).unwrap();
    assert_ne!(second.port, 5000, "taken port is not handed out twice");
    assert_eq!(
        p.allocate(Proto::Tcp, ep(3, 5000), true, 1).unwrap().port,
        5000,
        "TCP has its own space"
    );
    let low = p.allocate(Proto::Udp, ep(2, 53), true, 1).unwrap();
    assert!(low.port >= 1024, "outside the range is never preserved");
}

#[test]
fn paired_pooling_keeps_a_host_on_one_address_and_spreads_hosts() {
    let p = pool(8, 1024, 65535);
    let a = p.allocate(Proto::Udp, ep(2, 1), false, 0).unwrap().addr;
    for port in 2..200 {
        assert_eq!(
            p.allocate(Proto::Tcp, ep(2, port), false, (port % 2) as usize)
                .unwrap()
                .addr,
            a
        );
    }
    assert_eq!(p.paired_addr(Ipv4Addr::new(10, 0, 0, 2)), Some(a));
    let used: HashSet<_> = (0..=255)
        .map(|h| p.paired_addr(Ipv4Addr::new(10, 0, 0, h)).unwrap())
        .collect();
    assert_eq!(used.len(), 8, "256 hosts use all 8 addresses");
}

#[test]
fn exhaustion_and_hold_before_reuse() {
    let p = pool(1, 2000, 2003);
    let got: Vec<_> = (0..4)
        .map(|i| {
            p.allocate(Proto::Udp, ep(2, 3000 + i), false, i as usize)
                .unwrap()
        })
        .collect();
    let ports: HashSet<_> = got.iter().map(|e| e.port).collect();
    assert_eq!(ports.len(), 4);
    assert_eq!(
        p.allocate(Proto::Udp, ep(2, 4000), false, 0),
        Err(PoolError::PairedAddressFull)
    );
    let t0 = Timestamp::from_secs(100);
    p.release(Proto::Udp, got[1], t0);
    p.handle_timeout(t0 + Duration::from_secs(119));
    assert!(
        p.allocate(Proto::Udp, ep(2, 4000), false, 0).is_err(),
        "held back for 120 s"
    );
    // The hold's clock counts 1/4096ths of it: the port comes back at most two late.
    let ready = p.poll_timeout().unwrap();
    let hold = Duration::from_secs(120);
    assert!(
        ready >= t0 + hold && ready <= t0 + hold + hold / 2048,
        "{ready:?}"
    );
    assert_eq!(p.handle_timeout(ready), 1);
    assert_eq!(
        p.allocate(Proto::Udp, ep(2, 4000), false, 1).unwrap().port,
        got[1].port
    );
}

/// The hold keeps at most its capacity: past it, each release gives the oldest held port
/// back early (and says so), the others keep their order, every protocol and address
/// included, and the pool's memory stops growing once the ring is allocated.
#[test]
fn a_full_hold_gives_back_its_oldest_port_early() {
    let p = pool(2, 2000, 2009).with_hold_capacity(4);
    assert_eq!(p.hold_capacity(), 4);
    // Ten hosts; paired pooling spreads them over both addresses.
    let got: Vec<(Proto, Endpoint)> = (0..10u8)
        .map(|i| {
            let proto = [Proto::Tcp, Proto::Udp, Proto::Icmp][usize::from(i % 3)];
            (proto, p.allocate(proto, ep(i, 5000), false, 0).unwrap())
        })
        .collect();
    let t0 = Timestamp::from_secs(10);
    let mut cut = 0;
    let mut bytes = Vec::new();
    for (i, (proto, e)) in got.iter().enumerate() {
        cut += usize::from(p.release(*proto, *e, t0 + Duration::from_secs(i as u64)));
        assert!(p.cooling_len() <= 4);
        bytes.push(p.bytes());
    }
    assert_eq!(cut, 6, "ten releases into a hold of four");
    assert!(bytes.windows(2).all(|w| w[0] == w[1]), "{bytes:?}");
    // The six oldest are free again (`reserve` takes a free port), the four newest held.
    for (i, (proto, e)) in got.iter().enumerate() {
        assert_eq!(p.reserve(*proto, *e), i < 6, "port {i}: {e}");
    }
}

/// The ring is sized by the smaller of the bound asked for and the pool's ports ×
/// protocols, and the estimate's figure is what the ring takes once allocated.
#[test]
fn the_hold_capacity_is_the_bound_or_the_pool_whichever_is_smaller() {
    assert_eq!(PortPool::hold_capacity_for(1, 64, 20_000), 64 * 5);
    assert_eq!(PortPool::hold_capacity_for(256, 64_512, 20_000), 20_000);
    let whole = (1u64 << 32) * 65_535 * 5;
    assert_eq!(
        PortPool::hold_capacity_for(1 << 32, 65_535, usize::MAX) as u64,
        whole,
        "every port of the largest pool, under 2^50"
    );
    let p = pool(1, 1024, 1087).with_hold_capacity(1 << 20);
    assert_eq!(p.hold_capacity(), 64 * 5);
    let before = p.bytes();
    let e = p.allocate(Proto::Udp, ep(1, 1), false, 0).unwrap();
    let after_alloc = p.bytes();
    p.release(Proto::Udp, e, Timestamp::from_secs(1));
    assert_eq!(
        p.bytes() - after_alloc,
        PortPool::hold_bytes_for(1, 64, 1 << 20),
        "the ring, allocated at the first release"
    );
    assert_eq!(PortPool::hold_bytes_for(1, 64, 1 << 20), 64 * 5 * 8);
    assert!(after_alloc >= before);
}

#[test]
fn reserve_takes_port_out_of_circulation() {
    let p = pool(1, 1024, 1024);
    assert!(p.reserve(
        Proto::Tcp,
        Endpoint::new(Ipv4Addr::new(203, 0, 113, 1), 1024)
    ));
    assert!(!p.reserve(
        Proto::Tcp,
        Endpoint::new(Ipv4Addr::new(203, 0, 113, 1), 1024)
    ));
    assert!(p.allocate(Proto::Tcp, ep(2, 1024), true, 0).is_err());
    assert!(!p.reserve(
        Proto::Tcp,
        Endpoint::new(Ipv4Addr::new(198, 51, 100, 1), 1024)
    ));
}

/// Two threads allocate every port of a range at once: each port exactly once.
#[test]
fn concurrent_allocation_never_doubles() {
    let p = Arc::new(pool(1, 10000, 19999));
    let hs: Vec<_> = (0..2)
        .map(|w| {
            let p = Arc::clone(&p);
            std::thread::spawn(move || {
                let mut got = Vec::new();
                for i in 0..6000u16 {
                    if let Ok(e) = p.allocate(Proto::Udp, ep(2, i), i % 3 == 0, w) {
                        got.push(e.port);
                    }
                }
                got
            })
        })
        .collect();
    let mut all = HashSet::new();
    for h in hs {
        for port in h.join().unwrap() {
            assert!(all.insert(port), "port {port} handed out twice");
        }
    }
    assert_eq!(all.len(), 10000, "every port used, none stranded");
    assert_eq!(p.taken(Ipv4Addr::new(203, 0, 113, 1), Proto::Udp), 10000);
}

proptest! {
    /// Under any sequence of allocations and releases, no endpoint is live twice.
    #[test]
    fn never_doubled(ops in proptest::collection::vec((any::<bool>(), 0u8..6, any::<u16>(), any::<bool>()), 1..300)) {
        let p = pool(2, 60000, 60063);
        let mut live: Vec<Endpoint> = Vec::new();
        let mut now = Timestamp::ZERO;
        for (alloc, host, port, preserve) in ops {
            now = now + Duration::from_secs(7);
            p.handle_timeout(now);
            if alloc || live.is_empty() {
                if let Ok(e) = p.allocate(Proto::Udp, ep(host, port), preserve, port as usize) {
                    prop_assert!(!live.contains(&e), "{} handed out twice", e);
                    prop_assert!((60000..=60063).contains(&e.port));
                    prop_assert_eq!(Some(e.addr), p.paired_addr(Ipv4Addr::new(10, 0, 0, host)));
                    live.push(e);
                }
            } else {
                let e = live.remove(port as usize % live.len());
                p.release(Proto::Udp, e, now);
            }
        }
    }
}

/// Ports handed out to one host for inside ports `from..from + n`, by worker 0.
fn sequence(p: &PortPool, from: u16, n: u16) -> Vec<u16> {
    (from..from + n)
        .map(|i| p.allocate(Proto::Udp, ep(2, i), false, 0).unwrap().port)
        .collect()
}

/// RFC 6056: the ports one host gets depend on a secret, and are not a linear scan.
#[test]
fn ports_are_keyed_and_not_sequential() {
    let mk = |k| pool(1, 1024, 65535).with_key(SipKey::fixed(k, 7));
    let (a, b, a2) = (
        sequence(&mk(1), 1000, 200),
        sequence(&mk(2), 1000, 200),
        sequence(&mk(1), 1000, 200),
    );
    assert_eq!(a, a2, "a fixed key reproduces its sequence");
    let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
    assert!(same < 5, "different keys, different ports ({same} equal)");
    for s in [&a, &b] {
        let steps = s
            .windows(2)
            .filter(|w| w[1] == w[0].wrapping_add(1))
            .count();
        assert!(
            steps < 10,
            "{steps} of 199 successive ports are +1: a linear scan"
        );
        // Spread over the worker's half of the range, not bunched at its start.
        let lo = s.iter().filter(|&&p| p < 1024 + 32256 / 2).count();
        assert!((40..160).contains(&lo), "{lo} of 200 in the lower quarter");
    }
    // The same inside endpoint asking again (its first binding expired) gets another port.
    let p = mk(3);
    let first = p.allocate(Proto::Udp, ep(2, 5000), false, 0).unwrap();
    let again = p.allocate(Proto::Udp, ep(2, 5000), false, 0).unwrap();
    assert_ne!(
        first, again,
        "RFC 6056 algorithm 4: table[index] moved the start"
    );
}

/// Randomised start or not, the search finds the one free port left, from any worker.
#[test]
fn finds_the_last_free_port_from_every_worker() {
    let p = PortPool::new(
        vec![Ipv4Addr::new(203, 0, 113, 1)],
        2000,
        2999,
        Duration::ZERO,
        4,
    );
    let all: Vec<Endpoint> = (0..1000)
        .map(|i| p.allocate(Proto::Tcp, ep(2, i), false, i as usize).unwrap())
        .collect();
    assert!(p.allocate(Proto::Tcp, ep(2, 9999), false, 0).is_err());
    for (k, victim) in [0usize, 999, 500, 321].into_iter().enumerate() {
        p.give_back_now(Proto::Tcp, all[victim]);
        let got = p.allocate(Proto::Tcp, ep(3, k as u16), false, k).unwrap();
        assert_eq!(got, all[victim], "worker {k} found the only free port");
    }
}

/// Sixteen /8 pools: built at once, in little memory, and still hands out ports.
#[test]
fn huge_pool_costs_what_is_used() {
    let ranges: Vec<_> = (0..16u8)
        .map(|i| {
            (
                Ipv4Addr::new(100 + i, 0, 0, 0),
                Ipv4Addr::new(100 + i, 255, 255, 255),
            )
        })
        .collect();
    let t = std::time::Instant::now();
    let p = PortPool::from_ranges(ranges, 1024, 65535, Duration::from_secs(120), 4);
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "built in {:?}",
        t.elapsed()
    );
    assert_eq!(p.addr_count(), 16 << 24);
    let (base, per_addr) = PortPool::bytes_estimate(16 << 24, 4);
    assert!(p.bytes() <= base + 1024, "{} bytes before use", p.bytes());
    assert!(base < 512 << 10, "{base} bytes for 2^28 addresses");
    for h in 0..100u8 {
        let e = p.allocate(Proto::Tcp, ep(h, 40000), true, 0).unwrap();
        assert!(p.contains_addr(e.addr) && e.port == 40000);
        assert_eq!(Some(e.addr), p.paired_addr(Ipv4Addr::new(10, 0, 0, h)));
    }
    assert!(
        p.bytes() <= base + 100 * per_addr + 1024,
        "{} bytes after 100 hosts",
        p.bytes()
    );
    assert!(p.contains_addr(Ipv4Addr::new(115, 255, 255, 255)));
    assert!(!p.contains_addr(Ipv4Addr::new(116, 0, 0, 0)));
}
