//! Port-block allocation: blocks never overlap, every port lies in its subscriber's
//! blocks, a block is released only when empty and after the hold, limits are counted,
//! and concurrent workers leak nothing.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::siphash::SipKey;
use crate::time::Timestamp;

const U: Proto = Proto::Udp;
const HOLD: Duration = Duration::from_secs(120);

fn pool(addrs: u8, first: u16, last: u16, size: u16, per: u16) -> PortPool {
    PortPool::new(
        (1..=addrs)
            .map(|i| Ipv4Addr::new(198, 51, 100, i))
            .collect(),
        first,
        last,
        HOLD,
        2,
    )
    .with_key(SipKey::fixed(7, 9))
    .with_blocks(size, per)
}

fn host(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x0a00_0000 + i)
}

fn t(s: u64) -> Timestamp {
    Timestamp::from_nanos(s * 1_000_000_000)
}

#[test]
fn ports_lie_in_their_subscribers_disjoint_blocks() {
    let p = pool(1, 1024, 65535, 64, 4);
    assert_eq!(p.blocks_per_addr(), 1008);
    let mut ports: HashMap<u32, Vec<u16>> = HashMap::new();
    let mut events = 0;
    for round in 0..40u32 {
        for h in 0..100u32 {
            if round >= 10 + h % 30 {
                continue; // 10..40 bindings per subscriber
            }
            let a = p
                .allocate_for(
                    U,
                    Endpoint::new(host(h), 40000 + round as u16),
                    u64::from(h),
                    true,
                    0,
                )
                .unwrap();
            events += usize::from(a.block.is_some());
            if let Some(b) = a.block {
                assert_eq!((b.subscriber, b.host, b.len), (u64::from(h), host(h), 64));
                assert!((b.first..=b.last()).contains(&a.public.port));
            }
            ports.entry(h).or_default().push(a.public.port);
        }
    }
    let addr = Ipv4Addr::new(198, 51, 100, 1);
    let mut seen = HashSet::new();
    for (h, ps) in &ports {
        let blocks = p.blocks_of(addr, u64::from(*h));
        assert!(!blocks.is_empty() && blocks.len() <= 4);
        for b in &blocks {
            assert!(seen.insert(b.0), "block {b:?} held twice");
            assert_eq!(b.1 - b.0, 63);
            assert_eq!((b.0 - 1024) % 64, 0);
        }
        for port in ps {
            assert!(
                blocks.iter().any(|b| (b.0..=b.1).contains(port)),
                "{port} outside {blocks:?}"
            );
        }
        // Fewer than 64 bindings: one block.
        assert_eq!(blocks.len(), ps.len().div_ceil(64));
    }
    assert_eq!(events, seen.len());
    assert_eq!(p.block_stats().taken as usize, seen.len());
    let all: HashSet<u16> = ports.values().flatten().copied().collect();
    assert_eq!(
        all.len(),
        ports.values().map(Vec::len).sum::<usize>(),
        "a port handed out twice"
    );
}

#[test]
fn the_per_subscriber_block_limit_refuses_and_is_counted() {
    let p = pool(1, 1024, 65535, 16, 2);
    for i in 0..32u16 {
        p.allocate_for(U, Endpoint::new(host(1), i), 1, false, 0)
            .unwrap();
    }
    assert_eq!(
        p.allocate_for(U, Endpoint::new(host(1), 99), 1, false, 0),
        Err(PoolError::BlockLimit)
    );
    assert_eq!(p.block_stats().limit_refused, 1);
    // A block serves every protocol (RFC 8158's block record names none): TCP ports
    // come from the same two blocks, and no more.
    let blocks = p.blocks_of(Ipv4Addr::new(198, 51, 100, 1), 1);
    for i in 0..32u16 {
        let a = p
            .allocate_for(Proto::Tcp, Endpoint::new(host(1), i), 1, false, 0)
            .unwrap();
        assert!(a.block.is_none());
        assert!(blocks.iter().any(|b| (b.0..=b.1).contains(&a.public.port)));
    }
    assert_eq!(
        p.allocate_for(Proto::Tcp, Endpoint::new(host(1), 99), 1, false, 0),
        Err(PoolError::BlockLimit)
    );
    // Another subscriber has blocks of its own.
    p.allocate_for(U, Endpoint::new(host(2), 99), 2, false, 0)
        .unwrap();
}

#[test]
fn no_free_block_is_exhaustion_and_the_remainder_is_never_used() {
    // 4 blocks of 64 and 10 ports of remainder.
    let p = pool(1, 1024, 1024 + 4 * 64 + 9, 64, 4);
    assert_eq!(p.blocks_per_addr(), 4);
    for h in 0..4 {
        let a = p
            .allocate_for(U, Endpoint::new(host(h), 5), u64::from(h), false, 0)
            .unwrap();
        assert!(a.public.port < 1024 + 256);
    }
    assert_eq!(
        p.allocate_for(U, Endpoint::new(host(9), 5), 9, false, 0),
        Err(PoolError::PairedAddressFull)
    );
    assert_eq!(p.block_stats().exhausted, 1);
    // A subscriber fills its block; its next binding cannot get a second one.
    for i in 1..64 {
        let a = p
            .allocate_for(U, Endpoint::new(host(0), i), 0, false, 0)
            .unwrap();
        assert!(a.public.port < 1024 + 256);
    }
    assert_eq!(
        p.allocate_for(U, Endpoint::new(host(0), 100), 0, false, 0),
        Err(PoolError::PairedAddressFull)
    );
}

#[test]
fn port_preservation_only_inside_the_subscribers_block() {
    let p = pool(1, 1024, 65535, 64, 4);
    let a = p
        .allocate_for(U, Endpoint::new(host(1), 5000), 1, true, 0)
        .unwrap();
    let b = a.block.unwrap();
    let inside = b.first + 3;
    let c = p
        .allocate_for(U, Endpoint::new(host(1), inside), 1, true, 0)
        .unwrap();
    assert_eq!(c.public.port, inside, "preserved inside its block");
    let outside = if b.first >= 2000 { 1500 } else { 60000 };
    let d = p
        .allocate_for(U, Endpoint::new(host(1), outside), 1, true, 0)
        .unwrap();
    assert!((b.first..=b.last()).contains(&d.public.port));
}

/// A hold cut short to make room frees the port's block like a hold that passed: the
/// block is handed to the caller (to log) from the release that cut it.
#[test]
fn a_hold_cut_short_releases_the_block_it_empties() {
    let p = pool(1, 1024, 65535, 64, 4).with_hold_capacity(1);
    let a = p
        .allocate_for(U, Endpoint::new(host(1), 1), 1, false, 0)
        .unwrap();
    let b = p
        .allocate_for(U, Endpoint::new(host(2), 1), 2, false, 0)
        .unwrap();
    let mut freed = Vec::new();
    assert!(!p.release_blocks(U, a.public, t(1), |x| freed.push(x)));
    assert!(freed.is_empty(), "held");
    assert!(p.release_blocks(U, b.public, t(2), |x| freed.push(x)));
    assert_eq!(
        freed,
        vec![a.block.unwrap()],
        "a's hold cut short, its block freed"
    );
}

#[test]
fn a_block_is_released_when_empty_and_after_the_hold() {
    let p = pool(1, 1024, 65535, 64, 4);
    let addr = Ipv4Addr::new(198, 51, 100, 1);
    let got: Vec<_> = (0..3)
        .map(|i| {
            p.allocate_for(U, Endpoint::new(host(1), i), 1, false, 0)
                .unwrap()
        })
        .collect();
    let block = got[0].block.unwrap();
    assert!(got[1].block.is_none() && got[2].block.is_none());
    p.release(U, got[0].public, t(10));
    p.release(U, got[1].public, t(20));
    let mut freed = Vec::new();
    p.handle_timeout_blocks(t(200), |b| freed.push(b));
    assert!(freed.is_empty(), "one port still in use");
    assert_eq!(p.blocks_of(addr, 1).len(), 1);
    p.release(U, got[2].public, t(300));
    p.handle_timeout_blocks(t(300) + (HOLD - Duration::from_nanos(1)), |b| freed.push(b));
    assert!(freed.is_empty(), "last port still held back");
    // At most two of the hold's 1/4096ths late.
    p.handle_timeout_blocks(t(300) + HOLD + HOLD / 2048, |b| freed.push(b));
    assert_eq!(freed, vec![block]);
    assert!(p.blocks_of(addr, 1).is_empty());
    assert_eq!(p.taken(addr, U), 0);
    let s = p.block_stats();
    assert_eq!((s.taken, s.released), (1, 1));
    // A binding that lost a race gives its port back at once, emptying its block.
    let a = p
        .allocate_for(U, Endpoint::new(host(2), 1), 2, false, 0)
        .unwrap();
    assert_eq!(p.give_back_now(U, a.public), a.block);
}

#[test]
fn a_reloaded_pool_adopts_live_ports_with_their_blocks() {
    let old = pool(1, 1024, 65535, 64, 4);
    let a = old
        .allocate_for(U, Endpoint::new(host(1), 1), 1, false, 0)
        .unwrap();
    let fresh = pool(1, 1024, 65535, 64, 4);
    assert!(fresh.adopt(U, a.public, 1, host(1)));
    assert!(!fresh.adopt(
        U,
        Endpoint::new(a.public.addr, a.public.port ^ 1),
        2,
        host(2)
    ));
    let b = fresh
        .allocate_for(U, Endpoint::new(host(1), 2), 1, false, 0)
        .unwrap();
    assert!(b.block.is_none(), "the adopted block serves its subscriber");
    let blk = a.block.unwrap();
    assert!((blk.first..=blk.last()).contains(&b.public.port));
}

/// Four workers allocate and release for 50 subscribers at once while a fifth thread keeps
/// a core busy, and held ports come back as they run (a reaper pass every 16 steps): at the end every block taken was
/// released and no port is left taken.
#[test]
fn concurrent_workers_leak_no_block() {
    // A 1 µs hold: blocks empty, are released and taken again all through the run, while
    // the other workers allocate in them.
    let p = Arc::new(
        PortPool::new(
            vec![
                Ipv4Addr::new(198, 51, 100, 1),
                Ipv4Addr::new(198, 51, 100, 2),
            ],
            1024,
            1024 + 64 * 64 - 1,
            Duration::from_micros(1),
            4,
        )
        .with_blocks(16, 3),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let busy = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut x = 1u64;
            while !stop.load(Ordering::Relaxed) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            x
        })
    };
    let workers: Vec<_> = (0..4u64)
        .map(|w| {
            let p = Arc::clone(&p);
            std::thread::spawn(move || {
                let mut held = Vec::new();
                let mut x = (w + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let mut now = 0u64;
                for _ in 0..20_000 {
                    // splitmix64: every bit of the draw is mixed.
                    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
                    let mut z = x;
                    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                    let x = z ^ (z >> 31);
                    now += 1;
                    let sub = (x % 50) as u32;
                    if x & 0x100 != 0 || held.is_empty() {
                        let inside = Endpoint::new(host(sub), (x >> 16) as u16);
                        let proto = if x & 0x1000 != 0 { Proto::Tcp } else { U };
                        let got = p.allocate_for(proto, inside, u64::from(sub), false, w as usize);
                        if let Ok(a) = got {
                            // In use: its block is its subscriber's whatever the others do.
                            let mine = p.blocks_of(a.public.addr, u64::from(sub));
                            assert!(mine.iter().any(|b| (b.0..=b.1).contains(&a.public.port)));
                            held.push((proto, a.public));
                        }
                    } else {
                        let i = (x >> 20) as usize % held.len();
                        let (proto, e) = held.swap_remove(i);
                        p.release(proto, e, Timestamp::from_nanos(now * 1000));
                    }
                    // A reaper's pass (the reaper thread alone may be starved on a
                    // loaded machine): held ports come back while the others allocate.
                    if now.is_multiple_of(16) {
                        p.handle_timeout(t(1_000_000));
                    }
                }
                for (proto, e) in held {
                    p.release(proto, e, Timestamp::from_nanos(now * 1000));
                }
            })
        })
        .collect();
    for h in workers {
        h.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    busy.join().unwrap();
    p.handle_timeout(t(1_000_000));
    let s = p.block_stats();
    // More blocks taken than exist: they were released and taken again during the run.
    assert!(s.taken > 2 * 256, "{s:?}");
    assert_eq!(s.taken, s.released, "{s:?}");
    for i in 1..=2 {
        let a = Ipv4Addr::new(198, 51, 100, i);
        assert!(p.held_blocks(a).is_empty());
        assert_eq!((p.taken(a, U), p.taken(a, Proto::Tcp)), (0, 0));
    }
}
