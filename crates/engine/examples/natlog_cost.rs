//! The cost of NAT event logging on the data path, for callgrind: a fixed NAT44 workload
//! (100 subscribers x 10 UDP flows, 10 packets out and 10 back per flow, then every
//! session expired by the reaper) with event logging off or on.
//!
//!     valgrind --tool=callgrind --toggle-collect='*natlog_cost::workload*' \
//!         target/release/examples/natlog_cost off|on
//!
//! Prints the packets and the events recorded (events per 1,000 sessions).

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
const FLOWS: u16 = 10;
const PACKETS: u16 = 10;

#[inline(never)]
fn workload(n: &mut Nat44) -> u64 {
    let srv = Ipv4Addr::new(198, 51, 100, 2);
    let mut packets = 0;
    for round in 0..PACKETS {
        let now = Timestamp::from_secs(1 + u64::from(round));
        for h in 0..HOSTS {
            let host = Ipv4Addr::new(10, 0, 0, h + 1);
            for f in 0..FLOWS {
                let mut p = udp(host, 10_000 + f, srv, 53);
                n.process(now, Direction::Outbound, &mut p);
                // The answer, to the public endpoint the request left from.
                let (pubaddr, pubport) = (
                    Ipv4Addr::new(p[12], p[13], p[14], p[15]),
                    u16::from_be_bytes([p[20], p[21]]),
                );
                let mut r = udp(srv, 53, pubaddr, pubport);
                n.process(now, Direction::Inbound, &mut r);
                packets += 2;
            }
        }
    }
    n.handle_timeout(Timestamp::from_secs(1000));
    n.handle_timeout(Timestamp::from_secs(1001));
    packets
}

fn main() {
    let on = std::env::args().nth(1).as_deref() == Some("on");
    let cfg = Nat44Config {
        rules: vec![DynamicRule {
            inside: "10.0.0.0/24".parse().unwrap(),
            pool: vec!["203.0.113.0/30".parse().unwrap()],
            ports: PortRange::new(1024, 65535).unwrap(),
        }],
        ..Nat44Config::default()
    };
    let mut n = Nat44::new(cfg).unwrap();
    let log = on.then(|| {
        let mask = EventClass::ALL
            .into_iter()
            .fold(EventMask::NONE, EventMask::with);
        let log = Arc::new(EventLog::new(mask, 1, 1 << 14));
        assert!(n.shared().attach_events(Arc::clone(&log)));
        log
    });
    let packets = workload(&mut n);
    let mut events = 0;
    if let Some(l) = &log {
        for r in l.rings() {
            events += r.drain(|_| {});
        }
    }
    let sessions = u64::from(HOSTS) * u64::from(FLOWS);
    println!(
        "packets={packets} sessions={sessions} events={events} events_per_1000_sessions={} dropped={}",
        events as u64 * 1000 / sessions,
        log.map_or(0, |l| l.dropped())
    );
}
