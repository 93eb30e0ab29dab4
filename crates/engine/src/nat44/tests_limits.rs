//! What one greedy inside host and an oversized configuration can take from everyone
//! else: pools that cost what is used, per-subscriber limits.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use conntrack::Timestamp;

use super::config::{DynamicRule, Nat44Config};
use super::tests::{IN_A, SRV};
use super::Nat44;
use crate::config::PortRange;
use crate::testpkt::{assert_checksums, fill_l4_csum, ipv4, ports, udp, v4_addrs, UDP};
use crate::verdict::Direction::*;

fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

fn udp_from(src: Ipv4Addr, sport: u16) -> Vec<u8> {
    let mut p = ipv4(UDP, src, SRV, 64, &udp(sport, 53, b"q"));
    fill_l4_csum(&mut p);
    p
}

/// Issue 14 finding 9: sixteen /8 pools passed check-config, then the gateway expanded
/// 2^28 addresses into a list, a set and a bitmap record each and ran out of memory.
/// Now it starts at once and translates.
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
