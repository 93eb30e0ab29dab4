//! What port-block allocation (PBA) saves in NAT events and costs per new flow, for
//! callgrind and for README's "Port-block allocation" figures.
//!
//! A churning NAT44 mix: 100 subscribers, each opening 10-50 UDP flows per wave (new
//! source ports each wave), a wave every 200 s for 12 waves; sessions expire (300 s),
//! their ports wait out the 120 s hold, the reaper runs every 10 s. Without PBA the
//! operator logs bindings (`binding` class: one event per binding made and removed); with
//! PBA it logs blocks (`block` class).
//!
//!     pba_cost events BLOCK_SIZE        # 0 = PBA off
//!     valgrind --tool=callgrind --toggle-collect='*pba_cost::new_flows*' \
//!         target/release/examples/pba_cost flows BLOCK_SIZE
//!
//! `flows` times only new flows (2,000 first packets from 100 subscribers, each one
//! making a binding and a session): instructions per new flow = Ir / 2000.

mod common;

use std::net::Ipv4Addr;
use std::sync::Arc;

use conntrack::Timestamp;
use engine::config::PortRange;
use engine::events::{EventClass, EventLog, EventMask};
use engine::nat44::{DynamicRule, Nat44, Nat44Config};
use engine::Direction;

use common::udp;

const HOSTS: u8 = 100;
const WAVES: u64 = 12;

fn host(h: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, h + 1)
}

/// Flows subscriber `h` opens per wave: 10 to 50.
fn flows_of(h: u8, wave: u64) -> u16 {
    10 + ((u64::from(h) * 7 + wave * 13) % 41) as u16
}

fn gateway(block: u16) -> Nat44 {
    let cfg = Nat44Config {
        rules: vec![DynamicRule {
            inside: "10.0.0.0/24".parse().unwrap(),
            pool: vec!["203.0.113.0/30".parse().unwrap()],
            ports: PortRange::new(1024, 65535).unwrap(),
        }],
        port_block_size: block,
        blocks_per_subscriber: 8,
        ..Nat44Config::default()
    };
    Nat44::new(cfg).unwrap()
}

/// The churning mix; returns (sessions, packets, refused).
fn churn(n: &mut Nat44) -> (u64, u64, u64) {
    let srv = Ipv4Addr::new(198, 51, 100, 2);
    let (mut sessions, mut packets, mut refused) = (0, 0, 0);
    let mut t = 1u64;
    for wave in 0..WAVES {
        let now = Timestamp::from_secs(t);
        for h in 0..HOSTS {
            for f in 0..flows_of(h, wave) {
                let mut p = udp(host(h), 10_000 + (wave as u16) * 64 + f, srv, 53);
                let e = n.process(now, Direction::Outbound, &mut p);
                packets += 1;
                if e.drop_reason().is_some() {
                    refused += 1;
                    continue;
                }
                sessions += 1;
                let (a, port) = (
                    Ipv4Addr::new(p[12], p[13], p[14], p[15]),
                    u16::from_be_bytes([p[20], p[21]]),
                );
                let mut r = udp(srv, 53, a, port);
                n.process(now, Direction::Inbound, &mut r);
                packets += 1;
            }
        }
        for _ in 0..20 {
            t += 10;
            n.handle_timeout(Timestamp::from_secs(t));
        }
    }
    // Everything expires and waits out the hold.
    for _ in 0..60 {
        t += 10;
        n.handle_timeout(Timestamp::from_secs(t));
    }
    (sessions, packets, refused)
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
    let what = std::env::args().nth(1).unwrap_or_default();
    let block: u16 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut n = gateway(block);
    if what == "flows" {
        // Warm the pool's per-address state as a running gateway has it.
        let mut w = udp(host(0), 1, Ipv4Addr::new(198, 51, 100, 2), 53);
        n.process(Timestamp::from_secs(0), Direction::Outbound, &mut w);
        let ok = new_flows(&mut n);
        println!("new_flows={ok} block={block}");
        return;
    }
    let class = if block == 0 {
        EventClass::Binding
    } else {
        EventClass::Block
    };
    let log = Arc::new(EventLog::new(EventMask::NONE.with(class), 1, 1 << 16));
    assert!(n.shared().attach_events(Arc::clone(&log)));
    let (sessions, packets, refused) = churn(&mut n);
    let mut events = 0;
    for r in log.rings() {
        events += r.drain(|_| {});
    }
    println!(
        "block={block} class={} sessions={sessions} packets={packets} refused={refused} events={events} events_per_1000_sessions={:.1} dropped={}",
        class.as_str(),
        events as f64 * 1000.0 / sessions as f64,
        log.dropped()
    );
}
