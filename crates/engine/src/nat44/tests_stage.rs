//! The staged batch (`stage`) is a hint: a worker shown every packet of a batch before
//! processing it decides exactly what a worker shown nothing decides — new flows made
//! inside the batch, replies to them later in the same batch, drops, garbage, more packets
//! than the stage holds, sessions expiring between batches.

use std::net::Ipv4Addr;

use conntrack::Timestamp;

use super::tests::config;
use super::Nat44Shared;
use crate::mode::{Egress, Frame, ModeWorker, Output};
use crate::testpkt::{fill_l4_csum, ipv4, tcp, udp};
use crate::verdict::Direction::{self, *};

/// A deterministic mixed workload: outbound TCP SYNs and UDP from 40 inside hosts, the
/// servers' replies to the public endpoints they were given, unsolicited and malformed
/// packets. Replies are addressed to the ports the reference worker assigned.
fn packet(i: usize, public_ports: &[u16]) -> (Direction, Vec<u8>) {
    let host = Ipv4Addr::new(10, 0, 0, 2 + (i % 40) as u8);
    let srv = Ipv4Addr::new(198, 51, 100, 2 + (i % 3) as u8);
    let sport = 1000 + (i % 97) as u16;
    match i % 7 {
        0 | 1 => {
            let mut p = ipv4(6, host, srv, 64, &tcp(sport, 80, 0x02));
            fill_l4_csum(&mut p);
            (Outbound, p)
        }
        2 | 3 => {
            let mut p = ipv4(17, host, srv, 64, &udp(sport, 53, b"q"));
            fill_l4_csum(&mut p);
            (Outbound, p)
        }
        4 | 5 => {
            let port = public_ports
                .get(i % public_ports.len().max(1))
                .copied()
                .unwrap_or(4000);
            let pub_ip = Ipv4Addr::new(203, 0, 113, 1);
            let mut p = ipv4(17, srv, pub_ip, 64, &udp(53, port, b"a"));
            fill_l4_csum(&mut p);
            (Inbound, p)
        }
        _ => (Inbound, vec![0x45; 10 + i % 50]),
    }
}

/// Runs `n` packets in batches of `batch` through `w`, staged or not, at `now`; returns
/// every decision and every packet as it left.
fn run(
    w: &mut impl ModeWorker,
    staged: bool,
    now: Timestamp,
    n: usize,
    batch: usize,
    ports: &[u16],
) -> Vec<(String, Vec<u8>)> {
    let (mut out, egress) = (Output::new(), Egress::default());
    let mut seen = Vec::new();
    let mut i = 0;
    while i < n {
        let pkts: Vec<_> = (i..(i + batch).min(n)).map(|k| packet(k, ports)).collect();
        w.begin_batch();
        if staged {
            for (dir, p) in &pkts {
                w.prefetch(*dir, p);
            }
        }
        for (dir, mut p) in pkts {
            let len = p.len();
            let mut f = Frame::new(&mut p, 0, len, &mut out);
            let e = w.process(now, dir, &mut f, &egress);
            seen.push((format!("{e:?}"), p));
        }
        w.quiescent();
        i += batch;
    }
    seen
}

/// What is compared between two instances: the decision and, for a forwarded packet,
/// where it goes (the public ports each instance picks are its own random choice).
fn decisions(seen: &[(String, Vec<u8>)]) -> Vec<String> {
    seen.iter()
        .map(|(e, p)| match (e.starts_with("Forward"), p.get(12..24)) {
            (true, Some(h)) => {
                format!("{e} from {:?} to {:?} {:?}", &h[0..4], &h[4..8], &h[10..12])
            }
            _ => e.clone(),
        })
        .collect()
}

/// The public ports an instance gave the forwarded UDP packets of a pass, in order.
fn udp_ports(seen: &[(String, Vec<u8>)]) -> Vec<u16> {
    seen.iter()
        .filter(|(e, p)| e.starts_with("Forward") && p.get(9) == Some(&17))
        .filter_map(|(_, p)| p.get(20..22).map(|b| u16::from_be_bytes([b[0], b[1]])))
        .collect()
}

#[test]
fn a_staged_batch_decides_exactly_what_an_unstaged_one_does() {
    let plain = Nat44Shared::new(config(), 1).unwrap();
    let staged = Nat44Shared::new(config(), 1).unwrap();
    let (mut a, mut b) = (plain.worker(0), staged.worker(0));
    // This test's table fits in any cache: stage it anyway, every packet.
    b.stage_always();
    let t0 = Timestamp::from_secs(10);
    let first_a = run(&mut a, false, t0, 300, 32, &[]);
    let first_b = run(&mut b, true, t0, 300, 32, &[]);
    assert_eq!(decisions(&first_a), decisions(&first_b));
    // Each instance's replies go to the ports it handed out.
    let (ports_a, ports_b) = (udp_ports(&first_a), udp_ports(&first_b));
    assert!(ports_a.len() > 20 && ports_a.len() == ports_b.len());
    // Replies and new flows mixed, in batches larger than the stage, then past the UDP
    // timeout (sessions expire on the packet that finds them idle).
    for (s, batch) in [(20, 80), (30, 7), (10_000, 64)] {
        let now = Timestamp::from_secs(s);
        let x = decisions(&run(&mut a, false, now, 700, batch, &ports_a));
        let y = decisions(&run(&mut b, true, now, 700, batch, &ports_b));
        assert!(x == y, "at {s} s, batches of {batch}: the decisions differ");
        assert!(x.iter().any(|e| e.starts_with("Forward")));
        assert!(x.iter().any(|e| e.starts_with("Drop")));
    }
    assert_eq!(a.counters(), b.counters());
    assert!(a.counters().forwarded > 500, "{:?}", a.counters().forwarded);
}
