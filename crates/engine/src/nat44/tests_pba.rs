//! Port-block allocation through the engine: one RFC 8158 event per block (natEvent
//! 16/17) whose range holds every port its subscriber's bindings got, released only once
//! the last binding is gone and its port has waited out the hold; the block limit is a
//! counted `subscriber_limit` drop; the block settings are restart-only.

use std::net::Ipv4Addr;
use std::sync::Arc;

use conntrack::Timestamp;

use super::config::Nat44Config;
use super::tests::{config, IN_A, IN_B, PUB, SRV};
use super::Nat44;
use crate::events::{Event, EventClass, EventKind, EventLog, EventMask};
use crate::testpkt::{ipv4, ports, udp, v4_addrs};
use crate::verdict::{Direction::*, DropReason};
use crate::Emit;

fn pba(size: u16, per: u16) -> Nat44Config {
    Nat44Config {
        port_block_size: size,
        blocks_per_subscriber: per,
        ..config()
    }
}

fn blocks_log(n: &Nat44) -> Arc<EventLog> {
    let log = Arc::new(EventLog::new(
        EventMask::NONE.with(EventClass::Block),
        1,
        1024,
    ));
    assert!(n.shared().attach_events(Arc::clone(&log)));
    log
}

fn drain(log: &EventLog) -> Vec<Event> {
    let mut v = Vec::new();
    for r in log.rings() {
        r.drain(|e| v.push(e));
    }
    v
}

fn send(n: &mut Nat44, s: u64, src: Ipv4Addr, sport: u16) -> Result<(Ipv4Addr, u16), DropReason> {
    let mut p = ipv4(17, src, SRV, 64, &udp(sport, 53, b"q"));
    crate::testpkt::fill_l4_csum(&mut p);
    let e = n.process(Timestamp::from_secs(s), Outbound, &mut p);
    match e {
        Emit::Forward { .. } => Ok((v4_addrs(&p).0, ports(&p).0)),
        other => Err(other.drop_reason().unwrap_or(DropReason::NoRule)),
    }
}

#[test]
fn one_event_per_block_whose_range_holds_its_subscribers_ports() {
    let mut n = Nat44::new(pba(16, 4)).unwrap();
    let log = blocks_log(&n);
    let mut got = Vec::new();
    for p in 0..20u16 {
        got.push((IN_A, send(&mut n, 1, IN_A, 6000 + p).unwrap()));
    }
    for p in 0..5u16 {
        got.push((IN_B, send(&mut n, 1, IN_B, 6000 + p).unwrap()));
    }
    // Answered flows: their ports wait out the hold when they end.
    for (_, (addr, port)) in &got {
        let mut p = ipv4(17, SRV, *addr, 64, &udp(53, *port, b"a"));
        crate::testpkt::fill_l4_csum(&mut p);
        let e = n.process(Timestamp::from_secs(1), Inbound, &mut p);
        assert!(matches!(e, Emit::Forward { .. }), "{e:?}");
    }
    let made = drain(&log);
    assert_eq!(
        made.len(),
        3,
        "two blocks for 20 ports, one for 5: {made:?}"
    );
    for e in &made {
        assert_eq!(
            (e.kind, e.proto, e.public.0, e.block.1),
            (EventKind::PortBlockAllocate, 0, PUB, 16)
        );
    }
    for (host, (addr, port)) in &got {
        assert_eq!(*addr, PUB);
        let holds = made
            .iter()
            .filter(|e| e.inside.0 == *host && (e.block.0..e.block.0 + e.block.1).contains(port))
            .count();
        assert_eq!(holds, 1, "{host}:{port} in {made:?}");
    }
    // Sessions expire (UDP 300 s) and their bindings go: the ports wait out the
    // 120 s hold, and only then the blocks are released.
    n.handle_timeout(Timestamp::from_secs(1000));
    n.handle_timeout(Timestamp::from_secs(1001));
    assert!(drain(&log).is_empty(), "released before the hold");
    n.handle_timeout(Timestamp::from_secs(1200));
    let gone = drain(&log);
    assert_eq!(gone.len(), 3, "{gone:?}");
    for e in &made {
        assert!(gone.iter().any(|g| g.kind == EventKind::PortBlockRelease
            && (g.block, g.public, g.inside.0) == (e.block, e.public, e.inside.0)));
    }
    assert_eq!(log.dropped(), 0);
}

#[test]
fn a_subscriber_past_its_blocks_is_a_counted_subscriber_limit_drop() {
    let mut n = Nat44::new(pba(8, 2)).unwrap();
    for p in 0..16u16 {
        send(&mut n, 1, IN_A, 100 + p).unwrap();
    }
    let log = Arc::new(EventLog::new(
        EventMask::NONE.with(EventClass::Limits),
        1,
        64,
    ));
    assert!(n.shared().attach_events(Arc::clone(&log)));
    assert_eq!(send(&mut n, 1, IN_A, 200), Err(DropReason::SubscriberLimit));
    assert_eq!(n.counters().dropped(DropReason::SubscriberLimit), 1);
    // A quota event naming the blocks' ports as the limit (2 x 8).
    let ev = drain(&log);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].kind, EventKind::QuotaExceeded);
    assert_eq!(ev[0].quota.map(|q| q.1), Some(16));
    // Its existing flows and other subscribers go on.
    send(&mut n, 2, IN_A, 100).unwrap();
    send(&mut n, 2, IN_B, 100).unwrap();
}

#[test]
fn block_settings_are_refused_on_reload_and_bad_values_by_name() {
    let n = Nat44::new(pba(64, 4)).unwrap();
    let e = n.shared().reload(pba(128, 4)).unwrap_err().to_string();
    assert!(
        e.contains("port_block_size") && e.contains("restart"),
        "{e}"
    );
    let e = n.shared().reload(pba(64, 8)).unwrap_err().to_string();
    assert!(e.contains("blocks_per_subscriber"), "{e}");
    for (size, per, field) in [(4, 4, "port_block_size"), (64, 0, "blocks_per_subscriber")] {
        let e = pba(size, per).validate().unwrap_err();
        assert_eq!(e.item, crate::config::ConfigItem::Field(field));
    }
}

/// NAT64 runs on the same core: an IPv6 subscriber is its /64, so two hosts of one /64
/// share its blocks, and the block events name the IPv6 host that opened each block.
#[test]
fn nat64_hosts_of_one_prefix_share_their_subscribers_blocks() {
    use crate::nat64::{Nat64, Nat64Config};
    use std::net::Ipv6Addr;
    let cfg = Nat64Config {
        pref64: "2001:db8:64::/96".parse().unwrap(),
        pool4: vec!["203.0.113.1/32".parse().unwrap()],
        port_block_size: 16,
        ..Nat64Config::default()
    };
    let mut n = Nat64::new(cfg).unwrap();
    let log = Arc::new(EventLog::new(
        EventMask::NONE.with(EventClass::Block),
        1,
        64,
    ));
    assert!(n.shared().nat44().attach_events(Arc::clone(&log)));
    let hosts: [Ipv6Addr; 2] = [
        "2001:db8::5".parse().unwrap(),
        "2001:db8::6".parse().unwrap(),
    ];
    let srv: Ipv6Addr = "2001:db8:64::c633:6402".parse().unwrap();
    let mut public = Vec::new();
    for host in hosts {
        for sport in 0..10u16 {
            let mut p = crate::testpkt::ipv6(17, host, srv, 64, &udp(4000 + sport, 53, b"q"));
            crate::testpkt::fill_l4_csum(&mut p);
            let mut b = crate::testpkt::with_room(&p, crate::HEADROOM);
            let len = p.len();
            let e = n.process(
                Timestamp::from_secs(1),
                Outbound,
                &mut b,
                crate::HEADROOM,
                len,
            );
            let Emit::Forward { start, len } = e else {
                panic!("{e:?}");
            };
            public.push(ports(&b[start..start + len]).0);
        }
    }
    let ev = drain(&log);
    assert_eq!(ev.len(), 2, "20 ports of one /64: two blocks of 16: {ev:?}");
    assert_eq!(ev[0].inside6, Some(hosts[0]));
    for e in &ev {
        assert_eq!(
            (e.kind, e.public.0, e.block.1),
            (EventKind::PortBlockAllocate, PUB, 16)
        );
        assert!(e.inside6.is_some_and(|h| hosts.contains(&h)), "{e:?}");
    }
    for port in public {
        assert!(
            ev.iter()
                .any(|e| (e.block.0..e.block.0 + 16).contains(&port)),
            "{port} outside {ev:?}"
        );
    }
}

/// A reload that replaces the pool (203.0.113.1 -> 203.0.113.1 and .9) gives the new pool
/// the live bindings' ports with their blocks: with 8 blocks per address, other
/// subscribers fill the 7 others on 203.0.113.1 and are then refused, never given the
/// live subscriber's block.
#[test]
fn a_reloaded_pool_keeps_live_blocks_for_their_subscribers() {
    let small = || {
        let mut c = pba(16, 4);
        c.rules[0].ports = crate::config::PortRange::new(1024, 1024 + 8 * 16 - 1).unwrap();
        c
    };
    let mut n = Nat44::new(small()).unwrap();
    let a_ports: Vec<_> = (0..5u16)
        .map(|p| send(&mut n, 1, IN_A, 7000 + p).unwrap())
        .collect();
    let block = |port: u16| (port - 1024) / 16;
    let a_block = block(a_ports[0].1);
    assert!(a_ports
        .iter()
        .all(|(a, p)| *a == PUB && block(*p) == a_block));
    let mut next = small();
    next.rules[0].pool.push("203.0.113.9/32".parse().unwrap());
    n.shared().reload(next).unwrap();
    // IN_A's flows go on; one flow from each of 200 other hosts.
    for (i, p) in (0..5u16).enumerate() {
        assert_eq!(send(&mut n, 2, IN_A, 7000 + p), Ok(a_ports[i]));
    }
    let mut on_pub = std::collections::HashSet::new();
    let mut refused = 0;
    for h in 3..=202u32 {
        let host = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 0, 0, 0)) + h);
        match send(&mut n, 2, host, 100) {
            Ok((addr, port)) if addr == PUB => {
                assert_ne!(block(port), a_block, "{host} got {port} in IN_A's block");
                on_pub.insert(block(port));
            }
            Ok(_) => {}
            Err(e) => {
                assert_eq!(e, DropReason::PoolExhausted);
                refused += 1;
            }
        }
    }
    assert_eq!(on_pub.len(), 7, "every other block of 203.0.113.1 taken");
    assert!(refused > 0);
}
