//! What one greedy inside host and an oversized configuration can take from everyone
//! else: pools that cost what is used, per-subscriber limits.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use conntrack::{Counted, Proto, Timestamp};

use super::config::{DynamicRule, Nat44Config};
use super::tests::{IN_A, IN_B, SRV};
use super::Nat44;
use crate::config::PortRange;
use crate::testpkt::{assert_checksums, fill_l4_csum, ipv4, ports, tcp, udp, v4_addrs, TCP, UDP};
use crate::verdict::{Direction::*, DropReason};

fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

fn udp_from(src: Ipv4Addr, sport: u16) -> Vec<u8> {
    let mut p = ipv4(UDP, src, SRV, 64, &udp(sport, 53, b"q"));
    fill_l4_csum(&mut p);
    p
}

/// Sixteen /8 pools pass check-config, and the gateway starts at once and translates: it
/// never expands their 2^28 addresses into a list, a set and a bitmap record each, which
/// would run it out of memory.
#[test]
fn sixteen_slash8_pools_build_at_once_and_translate() {
    let cfg = Nat44Config {
        rules: vec![DynamicRule {
            inside: "10.0.0.0/8".parse().unwrap(),
            pool: (0..16)
                .map(|i| format!("{}.0.0.0/8", 100 + i).parse().unwrap())
                .collect(),
            ports: PortRange::new(1024, 65535).unwrap(),
        }],
        ..Nat44Config::default()
    };
    let started = Instant::now();
    let mut n = Nat44::new(cfg).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "built in {:?}",
        started.elapsed()
    );
    let pools_bytes: usize = n.shared().pools.iter().map(|p| p.bytes()).sum();
    assert!(pools_bytes < 1 << 20, "pools hold {pools_bytes} bytes");
    let mut p = udp_from(IN_A, 5000);
    assert_eq!(n.process(t(1), Outbound, &mut p).drop_reason(), None);
    assert_checksums(&p);
    let (from, _) = v4_addrs(&p);
    assert!(
        (100..116).contains(&from.octets()[0]),
        "{from} is a pool address"
    );
    assert!(n.is_public(from) && n.is_public(Ipv4Addr::new(115, 1, 2, 3)));
    assert!(!n.is_public(Ipv4Addr::new(116, 0, 0, 1)));
    // The reply comes back to the inside host.
    let mut r = ipv4(UDP, SRV, from, 64, &udp(53, ports(&p).0, b"a"));
    fill_l4_csum(&mut r);
    assert_eq!(n.process(t(2), Inbound, &mut r).drop_reason(), None);
    assert_eq!(v4_addrs(&r).1, IN_A);
}

fn one_address(max_sessions_per_host: u32, max_ports_per_host: u32) -> Nat44Config {
    Nat44Config {
        rules: vec![DynamicRule {
            inside: "10.0.0.0/16".parse().unwrap(),
            pool: vec!["203.0.113.1/32".parse().unwrap()],
            ports: PortRange::new(1024, 65535).unwrap(),
        }],
        max_sessions_per_host,
        max_ports_per_host,
        ..Nat44Config::default()
    }
}

/// RFC 6888 REQ-4: one greedy host opens flows from every source port while 50 other
/// hosts, paired with the same public address, open one each. Unlimited, the greedy host
/// would take all 64,512 ports and the 50 get `pool_exhausted`; with the default limit it
/// stops at 4096 ports (`subscriber_limit`), its existing flows keep working, and all 50
/// others get through.
#[test]
fn a_greedy_host_leaves_ports_for_fifty_others() {
    let mut n = Nat44::new(Nat44Config {
        max_sessions_per_host: 0, // the port limit is the one under test
        ..one_address(0, super::config::MAX_PORTS_PER_HOST)
    })
    .unwrap();
    let mut first = None;
    let mut refused = 0;
    for port in 1..=65535u16 {
        let mut p = udp_from(IN_A, port);
        match n.process(t(1), Outbound, &mut p).drop_reason() {
            None => {
                first = first.or(Some(ports(&p).0));
            }
            Some(DropReason::SubscriberLimit) => refused += 1,
            Some(other) => panic!("greedy flow {port}: {other:?}"),
        }
    }
    let limit = super::config::MAX_PORTS_PER_HOST;
    assert_eq!(refused, 65535 - limit, "the greedy host got {limit} ports");
    let c = n.counters();
    assert_eq!(c.dropped(DropReason::SubscriberLimit), u64::from(refused));
    assert_eq!(
        n.shared().host_count(Counted::Ports(Proto::Udp), IN_A),
        limit
    );
    for h in 0..50u8 {
        let mut p = udp_from(Ipv4Addr::new(10, 0, 1, h + 1), 40000);
        assert_eq!(
            n.process(t(2), Outbound, &mut p).drop_reason(),
            None,
            "other host {h} refused"
        );
    }
    // The greedy host's existing flows still work both ways; TCP is a separate budget.
    let mut again = udp_from(IN_A, 1);
    assert_eq!(n.process(t(3), Outbound, &mut again).drop_reason(), None);
    let mut reply = ipv4(
        UDP,
        SRV,
        v4_addrs(&again).0,
        64,
        &udp(53, first.unwrap(), b"a"),
    );
    fill_l4_csum(&mut reply);
    assert_eq!(n.process(t(3), Inbound, &mut reply).drop_reason(), None);
    assert_eq!(v4_addrs(&reply).1, IN_A);
    let mut syn = ipv4(TCP, IN_A, SRV, 64, &tcp(5555, 80, 0x02));
    fill_l4_csum(&mut syn);
    assert_eq!(n.process(t(3), Outbound, &mut syn).drop_reason(), None);
}

/// `max_ports_per_host = 0` turns the limit off: nothing stops the greedy host (and the
/// others are refused), which is what the test above guards against.
#[test]
fn zero_means_unlimited() {
    let mut n = Nat44::new(one_address(0, 0)).unwrap();
    for port in 1..=64512u16 {
        let mut p = udp_from(IN_A, port);
        assert_eq!(n.process(t(1), Outbound, &mut p).drop_reason(), None);
    }
    let mut p = udp_from(IN_B, 40000);
    assert_eq!(
        n.process(t(2), Outbound, &mut p).drop_reason(),
        Some(DropReason::PoolExhausted)
    );
}

/// RFC 6888 REQ-5: sessions per host. One source port to many servers is one port but
/// many sessions; the 11th is refused, another host is not, and once the host's sessions
/// expire it may open new ones (the count went back to zero).
#[test]
fn sessions_per_host_are_limited_and_come_back() {
    let mut n = Nat44::new(one_address(10, 0)).unwrap();
    let to = |i: u8| {
        let mut p = ipv4(
            UDP,
            IN_A,
            Ipv4Addr::new(198, 51, 100, i),
            64,
            &udp(7000, 53, b"q"),
        );
        fill_l4_csum(&mut p);
        p
    };
    for i in 1..=10 {
        assert_eq!(n.process(t(1), Outbound, &mut to(i)).drop_reason(), None);
    }
    assert_eq!(
        n.process(t(1), Outbound, &mut to(11)).drop_reason(),
        Some(DropReason::SubscriberLimit)
    );
    assert_eq!(n.shared().host_count(Counted::Sessions, IN_A), 10);
    // Existing sessions continue; another host is not affected.
    assert_eq!(n.process(t(2), Outbound, &mut to(3)).drop_reason(), None);
    let mut b = udp_from(IN_B, 7000);
    assert_eq!(n.process(t(2), Outbound, &mut b).drop_reason(), None);
    // Everything idles out (UDP 300 s by default); the reaper gives the counts back.
    n.handle_timeout(t(1000));
    n.handle_timeout(t(1001));
    assert_eq!(n.session_count(), 0);
    for what in [Counted::Sessions, Counted::Ports(Proto::Udp)] {
        assert_eq!(n.shared().host_count_total(what), 0, "{what:?}");
    }
    assert_eq!(
        n.process(t(1002), Outbound, &mut to(11)).drop_reason(),
        None
    );
}

/// Hairpinned and refused flows are counted once or not at all: after a mix of
/// outcomes (limit hits, pool exhaustion, hairpins) and a full expiry, every count is 0.
#[test]
fn counts_return_to_zero_after_any_mix_of_outcomes() {
    let mut cfg = one_address(5, 3);
    cfg.rules[0].ports = PortRange::new(2000, 2007).unwrap();
    let mut n = Nat44::new(cfg).unwrap();
    let mut forwarded = 0;
    for i in 0..400u32 {
        let host = Ipv4Addr::new(10, 0, 0, (i % 7) as u8 + 1);
        let dst = if i % 5 == 0 {
            Ipv4Addr::new(203, 0, 113, 1) // a hairpin to the pool address
        } else {
            Ipv4Addr::new(198, 51, 100, (i % 4) as u8 + 1)
        };
        let mut p = ipv4(UDP, host, dst, 64, &udp(3000 + (i % 6) as u16, 2000, b"x"));
        fill_l4_csum(&mut p);
        if n.process(t(u64::from(i / 40)), Outbound, &mut p)
            .is_forward()
        {
            forwarded += 1;
        }
        if i % 100 == 99 {
            n.handle_timeout(t(u64::from(i / 40) + 400));
        }
    }
    let c = n.counters();
    assert!(forwarded > 0 && c.dropped(DropReason::SubscriberLimit) > 0);
    n.handle_timeout(t(10_000));
    n.handle_timeout(t(10_001));
    assert_eq!(n.session_count(), 0);
    for what in [Counted::Sessions, Counted::Ports(Proto::Udp)] {
        assert_eq!(n.shared().host_count_total(what), 0, "{what:?} drifted");
    }
}
