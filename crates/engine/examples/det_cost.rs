//! What a new flow costs under deterministic NAT (RFC 7422) against a dynamic rule, for
//! callgrind and for README's "Deterministic NAT" figures: 2,000 first packets from 100
//! subscribers (20 flows each), each making a binding and a session.
//!
//!     valgrind --tool=callgrind --toggle-collect='*det_cost::new_flows*' \
//!         target/release/examples/det_cost det|dynamic
//!
//! Instructions per new flow = Ir / 2000.

mod common;

use std::net::Ipv4Addr;

use conntrack::Timestamp;
use engine::config::PortRange;
use engine::nat44::deterministic::Deterministic;
use engine::nat44::{DynamicRule, Nat44, Nat44Config};
use engine::Direction;

use common::udp;

const HOSTS: u8 = 100;

fn host(h: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, h + 1)
}

/// 100 subscribers of a /24 over four public addresses, either way.
fn gateway(det: bool) -> Nat44 {
    let cfg = if det {
        Nat44Config {
            deterministic: Some(Deterministic {
                inside: "10.0.0.0/24".parse().unwrap(),
                outside: "203.0.113.0/30".parse().unwrap(),
                ports_per_subscriber: None,
            }),
            ..Nat44Config::default()
        }
    } else {
        Nat44Config {
            rules: vec![DynamicRule {
                inside: "10.0.0.0/24".parse().unwrap(),
                pool: vec!["203.0.113.0/30".parse().unwrap()],
                ports: PortRange::new(1024, 65535).unwrap(),
            }],
            ..Nat44Config::default()
        }
    };
    Nat44::new(cfg).unwrap()
}

/// 2,000 new flows, first packets only (timed by callgrind).
#[inline(never)]
fn new_flows(n: &mut Nat44) -> u64 {
    let srv = Ipv4Addr::new(198, 51, 100, 2);
    let now = Timestamp::from_secs(1);
    let mut forwarded = 0;
    for f in 0..20u16 {
        for h in 0..HOSTS {
            let mut p = udp(host(h), 20_000 + f, srv, 53);
            forwarded += u64::from(
                n.process(now, Direction::Outbound, &mut p)
                    .drop_reason()
                    .is_none(),
            );
        }
    }
    forwarded
}

fn main() {
    let det = std::env::args().nth(1).as_deref() == Some("det");
    let mut n = gateway(det);
    // Warm every public address's per-address state as a running gateway has it.
    for h in 0..HOSTS {
        let mut w = udp(host(h), 1, Ipv4Addr::new(198, 51, 100, 2), 53);
        n.process(Timestamp::from_secs(0), Direction::Outbound, &mut w);
    }
    let ok = new_flows(&mut n);
    println!("new_flows={ok} det={det}");
}
