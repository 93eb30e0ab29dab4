//! Flow placement ([`FlowPlacement`]) on a live fanout group: frames sent from namespace
//! b's afp1 arrive at two members on afp0, and the program decides which.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::*;

const FLOWS: u16 = 32;
const PER_FLOW: u16 = 3;

/// An Ethernet frame B -> A: IPv4 (version 4) or IPv6 (6) carrying UDP from `sport` to
/// port 9, or an IPv4 fragment (`frag`: offset in 8-byte units and the more-fragments
/// bit) of datagram 0x4242.
fn frame(version: u8, sport: u16, frag: Option<(u16, bool)>) -> Vec<u8> {
    let mut udp = vec![0u8; 16];
    udp[0..2].copy_from_slice(&sport.to_be_bytes());
    udp[2..4].copy_from_slice(&9u16.to_be_bytes());
    udp[4..6].copy_from_slice(&16u16.to_be_bytes());
    let mut f = Vec::new();
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&MAC_B);
    if version == 4 {
        let mut v4 = testnet::eth_ipv4(MAC_A, MAC_B, IP_B, IP_A, 17, &udp);
        if let Some((off, more)) = frag {
            let field = off | if more { 0x2000 } else { 0 };
            v4[14 + 4..14 + 6].copy_from_slice(&0x4242u16.to_be_bytes());
            v4[14 + 6..14 + 8].copy_from_slice(&field.to_be_bytes());
            if off > 0 {
                v4[34..38].copy_from_slice(&[0xee; 4]); // not a UDP header
            }
        }
        return v4;
    }
    f.extend_from_slice(&[0x86, 0xdd]);
    f.extend_from_slice(&[0x60, 0, 0, 0, 0, 16, 17, 64]);
    f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    f.extend_from_slice(&udp);
    f
}

/// (IP version, source port) of a frame [`frame`] built, and whether it is a fragment.
fn flow_of(frame: &[u8]) -> Option<(u8, u16, bool)> {
    match u16::from_be_bytes([frame[12], frame[13]]) {
        0x0800 if frame.len() >= 38 => {
            let frag = u16::from_be_bytes([frame[20], frame[21]]) & 0x3fff != 0;
            Some((4, u16::from_be_bytes([frame[34], frame[35]]), frag))
        }
        0x86dd if frame.len() >= 58 => Some((6, u16::from_be_bytes([frame[54], frame[55]]), false)),
        _ => None,
    }
}

/// The program for two workers with a table of `flows`, or `None` (test skipped) in a
/// build without clang.
fn load(flows: u32) -> Option<Arc<FlowPlacement>> {
    match FlowPlacement::load(2, flows) {
        Ok(p) => Some(Arc::new(p)),
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
            eprintln!("skipped: {e}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// Two members of fanout group `group` on afp0, placed by `p` (in namespace a).
fn members(group: u16, p: Arc<FlowPlacement>) -> [AfPacket; 2] {
    let cfg = AfPacketConfig {
        fanout: Some(group),
        placement: Some(p),
        block_size: 64 << 10,
        block_count: 4,
        ..AfPacketConfig::new("afp0")
    };
    [
        AfPacket::open(&cfg).expect("first member"),
        AfPacket::open(&cfg).expect("second member"),
    ]
}

/// Receives on both members until `n` frames of ours (`flow_of`, source port >= 40000)
/// arrived or 5 s passed: each member's.
fn receive(rings: &mut [AfPacket; 2], n: usize) -> [Vec<(u8, u16, bool)>; 2] {
    let mut seen: [Vec<(u8, u16, bool)>; 2] = [Vec::new(), Vec::new()];
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end && seen[0].len() + seen[1].len() < n {
        for (ring, s) in rings.iter_mut().zip(seen.iter_mut()) {
            ring.recv_batch(Duration::from_millis(5), |frame, _| {
                s.extend(flow_of(frame).filter(|f| f.1 >= 40000));
            })
            .unwrap();
        }
    }
    seen
}

#[test]
fn placed_flows_are_spread_evenly_per_ip_version_and_never_split() {
    let Some(lab) = lab("place") else { return };
    let Some(placement) = load(1024) else { return };
    let (ready_tx, ready_rx) = mpsc::channel();
    let total = usize::from(FLOWS * PER_FLOW) * 2 + 2;
    let p = Arc::clone(&placement);
    let gw = spawn_in(&lab.a, move || {
        let mut rings = members(43, p);
        ready_tx.send(()).unwrap();
        receive(&mut rings, total)
    });
    ready_rx.recv().expect("rx thread died");
    join(spawn_in(&lab.b, || {
        let mut tx = AfPacketTx::open("afp1").expect("tx afp1");
        // IPv4 and IPv6 flows alternately, each flow's packets apart.
        for _ in 0..PER_FLOW {
            for i in 0..FLOWS {
                for v in [4, 6] {
                    tx.send(&frame(v, 40000 + i, None)).unwrap();
                }
                tx.flush().unwrap();
            }
        }
        // A datagram in two fragments, the second without ports.
        tx.send(&frame(4, 50000, Some((0, true)))).unwrap();
        tx.send(&frame(4, 50000, Some((1, false)))).unwrap();
        tx.flush().unwrap();
    }));
    let seen = join(gw);
    assert_eq!(seen[0].len() + seen[1].len(), total, "every frame once");
    let mut member_of: BTreeMap<(u8, u16), BTreeSet<usize>> = BTreeMap::new();
    for (m, frames) in seen.iter().enumerate() {
        for &(v, port, frag) in frames {
            if !frag {
                member_of.entry((v, port)).or_default().insert(m);
            }
        }
    }
    assert!(
        member_of.values().all(|m| m.len() == 1),
        "a flow stays on one member: {member_of:?}"
    );
    let frags: Vec<usize> = (0..2).filter(|&m| seen[m].iter().any(|f| f.2)).collect();
    assert_eq!(frags.len(), 1, "both fragments on one member");
    for v in [4u8, 6] {
        let per: Vec<usize> = (0..2)
            .map(|m| {
                member_of
                    .iter()
                    .filter(|(k, ms)| k.0 == v && ms.contains(&m))
                    .count()
            })
            .collect();
        eprintln!("IPv{v}: {per:?} flows per member");
        let (max, min) = (per.iter().max().unwrap(), per.iter().min().unwrap());
        assert!(
            *min > 0 && *max as f64 / *min as f64 <= 1.2,
            "IPv{v} flows spread {per:?}"
        );
    }
    let counted = placement.flows_per_worker();
    // The fragments' datagram is one more IPv4 flow (keyed by addresses alone).
    assert_eq!(
        counted[0].iter().sum::<u64>(),
        u64::from(FLOWS) + 1,
        "{counted:?}"
    );
    assert_eq!(
        counted[1].iter().sum::<u64>(),
        u64::from(FLOWS),
        "{counted:?}"
    );
}

#[test]
fn a_full_table_places_by_hash_and_a_sweep_forgets_idle_flows() {
    let Some(lab) = lab("pfull") else { return };
    let Some(placement) = load(4) else { return };
    let (ready_tx, ready_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<usize>();
    let p = Arc::clone(&placement);
    // Receives `n` frames of ours per round, as `go` says; returns each round's frames.
    let gw = spawn_in(&lab.a, move || {
        let mut rings = members(44, p);
        ready_tx.send(()).unwrap();
        let mut rounds = Vec::new();
        while let Ok(n) = go_rx.recv() {
            rounds
                .push(receive(&mut rings, n).map(|v| v.iter().map(|f| f.1).collect::<Vec<u16>>()));
        }
        rounds
    });
    ready_rx.recv().expect("rx thread died");
    let send = |ports: std::ops::Range<u16>| {
        join(spawn_in(&lab.b, move || {
            let mut tx = AfPacketTx::open("afp1").expect("tx afp1");
            for _ in 0..2 {
                for p in ports.clone() {
                    tx.send(&frame(4, p, None)).unwrap();
                }
                tx.flush().unwrap();
            }
        }))
    };
    // Eight flows into a table of four: four placed in turn, four by hash (their two
    // packets each counted).
    go_tx.send(16).unwrap();
    send(40000..40008);
    assert_eq!(placement.overflowed(), 8);
    assert_eq!(placement.flows_per_worker()[0], vec![2, 2]);
    // Two sweeps with no traffic: the four placed flows are forgotten.
    assert_eq!(
        placement.sweep().unwrap(),
        (0, 4),
        "seen in the epoch just ended"
    );
    assert_eq!(placement.sweep().unwrap(), (4, 0), "idle for a whole epoch");
    // Room again: four new flows are placed in turn, none by hash.
    go_tx.send(8).unwrap();
    send(41000..41004);
    assert_eq!(placement.overflowed(), 8);
    assert_eq!(placement.flows_per_worker()[0], vec![4, 4]);
    drop(go_tx);
    let rounds = join(gw);
    for (r, seen) in rounds.iter().enumerate() {
        for port in seen[0].iter() {
            assert!(
                !seen[1].contains(port),
                "round {r}: flow {port} on both members"
            );
        }
    }
    assert_eq!(rounds[0][0].len() + rounds[0][1].len(), 16, "{rounds:?}");
}
