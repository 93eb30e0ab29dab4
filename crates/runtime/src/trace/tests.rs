//! The trace's packet reader, filter and records, from packets and counters built here.

use std::net::IpAddr;

use super::*;

fn v4_udp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
    let mut p = vec![0x45, 0, 0, 30, 0, 0, 0x40, 0, 64, 17, 0, 0];
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&[0, 10, 0, 0, b'h', b'i']);
    p
}

#[test]
fn packets_are_read_as_far_as_they_go_and_never_past() {
    let p = Packet::parse(&v4_udp([10, 0, 0, 2], 40000, [198, 51, 100, 2], 7)).unwrap();
    assert_eq!(
        p.describe(),
        "udp 10.0.0.2:40000 > 198.51.100.2:7 (30 bytes)"
    );
    // An ICMPv6 echo request behind a first Fragment header.
    let mut v6 = vec![0x60, 0, 0, 0, 0, 16, 44, 64];
    v6.extend_from_slice(
        &"2001:db8::2"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    v6.extend_from_slice(
        &"64:ff9b::c633:6402"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    v6.extend_from_slice(&[58, 0, 0, 1, 0, 0, 0, 9]); // fragment header, offset 0, M=1
    v6.extend_from_slice(&[128, 0, 0, 0, 0x12, 0x34, 0, 1]);
    let p = Packet::parse(&v6).unwrap();
    assert_eq!(
        p.describe(),
        "icmpv6 2001:db8::2 > 64:ff9b::c633:6402 type 128 code 0 id 4660 (56 bytes)"
    );
    // A later IPv4 fragment has no ports to read.
    let mut later = v4_udp([10, 0, 0, 2], 1, [198, 51, 100, 2], 2);
    later[6..8].copy_from_slice(&[0, 10]);
    let p = Packet::parse(&later).unwrap();
    assert_eq!(p.ports, None);
    assert!(p.describe().contains("(later fragment)"));
    // Every truncation: an answer or None, never a panic.
    let full = v4_udp([10, 0, 0, 2], 40000, [198, 51, 100, 2], 7);
    for n in 0..full.len() {
        let _ = Packet::parse(&full[..n]);
    }
    for n in 0..v6.len() {
        let _ = Packet::parse(&v6[..n]);
    }
    assert!(Packet::parse(&[0x20; 40]).is_none(), "not IP");
}

#[test]
fn the_filter_matches_before_or_after_translation() {
    let before = Packet::parse(&v4_udp([10, 0, 0, 2], 40000, [198, 51, 100, 2], 7)).unwrap();
    let after = Packet::parse(&v4_udp([203, 0, 113, 1], 1024, [198, 51, 100, 2], 7)).unwrap();
    let public: IpAddr = "203.0.113.1".parse().unwrap();
    let f = |f: TraceFilter| f.matches(0, &before, Some(&after), None);
    assert!(f(TraceFilter::default()));
    assert!(f(TraceFilter {
        host: Some(public),
        ..Default::default()
    }));
    assert!(f(TraceFilter {
        port: Some(1024),
        ..Default::default()
    }));
    assert!(f(TraceFilter {
        proto: Some("udp".into()),
        direction: Some("out".into()),
        ..Default::default()
    }));
    assert!(!f(TraceFilter {
        direction: Some("in".into()),
        ..Default::default()
    }));
    assert!(!f(TraceFilter {
        proto: Some("tcp".into()),
        ..Default::default()
    }));
    assert!(!f(TraceFilter {
        drop_reason: Some(DropReason::NoMapping),
        ..Default::default()
    }));
    assert!(TraceFilter {
        drop_reason: Some(DropReason::NoMapping),
        ..Default::default()
    }
    .matches(1, &before, None, Some(DropReason::NoMapping)));
    assert!(!before.has_host(public), "only after translation");
}

#[test]
fn a_record_tells_the_steps_the_counters_took() {
    let before = Packet::parse(&v4_udp([10, 0, 0, 2], 40000, [198, 51, 100, 2], 7)).unwrap();
    let after = Packet::parse(&v4_udp([203, 0, 113, 1], 1024, [198, 51, 100, 2], 7)).unwrap();
    let (mut e, io) = (Counters::default(), IoCounters::default());
    let a = Snapshot::of(&e, &io);
    e.forwarded += 1;
    e.sessions_created += 1;
    e.bindings_created += 1;
    let b = Snapshot::of(&e, &io);
    let at = Seen {
        worker: Some(1),
        side: 0,
        links: ["g-in", "g-out"],
        sent: &[1],
        stateful: true,
    };
    let r = record(&at, &before, Some(&after), &a, &b);
    assert_eq!(r.dropped, None);
    let steps: Vec<&str> = r.json["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(steps[0], "received on the inside (g-in)");
    assert_eq!(steps[1], "session created");
    assert!(steps[2].starts_with("binding created"));
    assert_eq!(
        steps[3],
        "translated to udp 203.0.113.1:1024 > 198.51.100.2:7 (30 bytes)"
    );
    assert_eq!(steps[4], "sent on the outside (g-out)");
    assert_eq!(r.json["verdict"], "forwarded");
    // The next packet of the flow finds the session; a refused one says why.
    let a = Snapshot::of(&e, &io);
    e.forwarded += 1;
    let r = record(&at, &before, Some(&after), &a, &Snapshot::of(&e, &io));
    assert_eq!(r.json["steps"][1], "session found");
    let a = Snapshot::of(&e, &io);
    e.drop(DropReason::NoMapping);
    let at = Seen {
        side: 1,
        sent: &[],
        ..at
    };
    let r = record(&at, &after, None, &a, &Snapshot::of(&e, &io));
    assert_eq!(r.dropped, Some(DropReason::NoMapping));
    assert_eq!(r.json["verdict"], "dropped");
    assert_eq!(r.json["drop_reason"], "no_mapping");
    assert!(
        text(&r.json).contains("  - dropped: no_mapping ("),
        "{}",
        text(&r.json)
    );
}

#[test]
fn a_trace_takes_its_count_then_disarms_and_refuses_a_second() {
    let t = Tracer::default();
    assert!(!t.armed());
    let rx = t.arm(TraceFilter::default(), 2).unwrap();
    assert!(t.armed());
    assert!(t
        .arm(TraceFilter::default(), 1)
        .unwrap_err()
        .contains("already running"));
    let p = Packet::parse(&v4_udp([10, 0, 0, 2], 1, [198, 51, 100, 2], 2)).unwrap();
    for i in 0..3 {
        if t.wants(0, &p, None, None) {
            t.offer(serde_json::json!(i));
        }
    }
    assert!(!t.armed(), "disarmed after its count");
    assert_eq!(
        rx.try_iter().collect::<Vec<_>>(),
        [serde_json::json!(0), serde_json::json!(1)]
    );
    t.disarm();
    assert!(t.arm(TraceFilter::default(), 1).is_ok());
}

proptest::proptest! {
    /// Untrusted bytes: any packet gives an answer or None, never a panic, and what it
    /// reads stays within the bytes (its length is theirs).
    #[test]
    fn any_bytes_parse_without_panicking(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..128)) {
        if let Some(p) = Packet::parse(&bytes) {
            proptest::prop_assert_eq!(p.len, bytes.len());
            let _ = p.describe();
        }
    }
}
