//! The stateless translator as a gateway mode: address choice (EAM, Pref64, RFC 6791),
//! CLAT round trips, drops by reason, no panic on any bytes.

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use xlat::rfc6052::Pref64;

use super::*;
use crate::testpkt::*;
use crate::HEADROOM;

const NSP: &str = "2001:db8:64::/96";

fn siit() -> Siit {
    Siit::new(
        SiitConfig {
            pref64: Some(NSP.parse().unwrap()),
            eam: vec![Eam::new(
                "192.168.255.10/32".parse().unwrap(),
                "2001:db8:1::10/128".parse().unwrap(),
            )
            .unwrap()],
            icmp_error_source: Some(Ipv4Addr::new(192, 0, 0, 8).into()),
            ..SiitConfig::default()
        },
        SiitKind::Siit,
    )
    .unwrap()
}

fn run(s: &mut Siit, pkt: &[u8]) -> Result<Vec<u8>, DropReason> {
    let mut b = with_room(pkt, HEADROOM);
    match s.translate(&mut b, HEADROOM, pkt.len()) {
        Emit::Forward { start, len } => Ok(b[start..start + len].to_vec()),
        Emit::Drop(r) => Err(r),
        e => panic!("stateless translation alone only forwards or drops: {e:?}"),
    }
}

fn v4_udp(src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
    let mut p = ipv4(UDP, src, dst, 64, &udp(5000, 53, b"query"));
    fill_l4_csum(&mut p);
    p
}

fn v6_udp(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
    let mut p = ipv6(UDP, src, dst, 64, &udp(53, 5000, b"answer"));
    fill_l4_csum(&mut p);
    p
}

#[test]
fn eam_wins_and_pref64_embeds_the_rest() {
    let mut s = siit();
    let out = run(
        &mut s,
        &v4_udp(
            Ipv4Addr::new(198, 51, 100, 7),
            Ipv4Addr::new(192, 168, 255, 10),
        ),
    )
    .unwrap();
    assert_eq!(out[0] >> 4, 6);
    assert_eq!(
        v6_addrs(&out),
        (
            "2001:db8:64::c633:6407".parse().unwrap(),
            "2001:db8:1::10".parse().unwrap()
        )
    );
    assert_eq!(out[7], 63, "hop limit = TTL - 1");
    assert_checksums(&out);
    // And back.
    let back = run(&mut s, &v6_udp(v6_addrs(&out).1, v6_addrs(&out).0)).unwrap();
    assert_eq!(
        v4_addrs(&back),
        (
            Ipv4Addr::new(192, 168, 255, 10),
            Ipv4Addr::new(198, 51, 100, 7)
        )
    );
    assert_checksums(&back);
    assert_eq!(s.counters().forwarded, 2);
}

#[test]
fn unmapped_addresses_are_dropped_with_a_reason() {
    let mut s = siit();
    let stray: Ipv6Addr = "2001:db8:99::1".parse().unwrap();
    let r = run(
        &mut s,
        &v6_udp(stray, "2001:db8:64::c633:6407".parse().unwrap()),
    );
    assert_eq!(r, Err(DropReason::NoAddressMapping));
    assert_eq!(s.counters().dropped(DropReason::NoAddressMapping), 1);
}

#[test]
fn wkp_refuses_non_global_ipv4() {
    let mut s = Siit::new(
        SiitConfig {
            pref64: Some(Pref64::WELL_KNOWN),
            eam: vec![],
            ..SiitConfig::default()
        },
        SiitKind::Siit,
    )
    .unwrap();
    let r = run(
        &mut s,
        &v4_udp(Ipv4Addr::new(10, 1, 1, 1), Ipv4Addr::new(8, 8, 8, 8)),
    );
    assert_eq!(r, Err(DropReason::NoAddressMapping));
    let ok = run(
        &mut s,
        &v4_udp(Ipv4Addr::new(9, 9, 9, 9), Ipv4Addr::new(8, 8, 8, 8)),
    )
    .unwrap();
    assert_eq!(
        v6_addrs(&ok).1,
        "64:ff9b::808:808".parse::<Ipv6Addr>().unwrap()
    );
}

#[test]
fn icmpv6_error_from_unmapped_router_uses_rfc6791_source() {
    let mut s = siit();
    let host: Ipv6Addr = "2001:db8:1::10".parse().unwrap();
    let server: Ipv6Addr = "2001:db8:64::c633:6407".parse().unwrap();
    let router: Ipv6Addr = "2001:db8:99::1".parse().unwrap();
    // The quoted packet: host -> server UDP, as it left the host.
    let quoted = v6_udp(host, server);
    let mut body = vec![1, 4, 0, 0, 0, 0, 0, 0]; // destination unreachable, port unreachable
    body.extend_from_slice(&quoted);
    let mut err = ipv6(ICMP6, router, host, 64, &body);
    fill_l4_csum(&mut err);
    let out = run(&mut s, &err).unwrap();
    assert_eq!(
        v4_addrs(&out),
        (
            Ipv4Addr::new(192, 0, 0, 8),
            Ipv4Addr::new(192, 168, 255, 10)
        )
    );
    assert_eq!((out[20], out[21]), (3, 3), "port unreachable");
    // The quoted packet was translated too.
    assert_eq!(
        v4_addrs(&out[28..]),
        (
            Ipv4Addr::new(192, 168, 255, 10),
            Ipv4Addr::new(198, 51, 100, 7)
        )
    );
    assert_checksums(&out);
    assert_eq!(s.counters().icmp_errors_translated, 1);
}

#[test]
fn clat_round_trip() {
    // RFC 6877: the host's private 192.0.0.2 <-> the CLAT prefix, the rest via the PLAT.
    let mut clat = Siit::new(
        SiitConfig::clat(
            "192.0.0.0/29".parse().unwrap(),
            "2001:db8:aaaa::/125".parse().unwrap(),
            NSP.parse().unwrap(),
        )
        .unwrap(),
        SiitKind::Clat,
    )
    .unwrap();
    let out = run(
        &mut clat,
        &v4_udp(Ipv4Addr::new(192, 0, 0, 2), Ipv4Addr::new(198, 51, 100, 7)),
    )
    .unwrap();
    assert_eq!(
        v6_addrs(&out),
        (
            "2001:db8:aaaa::2".parse().unwrap(),
            "2001:db8:64::c633:6407".parse().unwrap()
        )
    );
    assert_checksums(&out);
}

#[test]
fn eam_suffix_lengths_must_match_and_entries_must_not_overlap() {
    assert!(Eam::new(
        "10.0.0.0/24".parse().unwrap(),
        "2001:db8::/64".parse().unwrap()
    )
    .is_err());
    let e = |a: &str, b: &str| Eam::new(a.parse().unwrap(), b.parse().unwrap()).unwrap();
    let cfg = SiitConfig {
        pref64: None,
        eam: vec![
            e("10.0.0.0/24", "2001:db8::/120"),
            e("10.0.0.128/25", "2001:db8:1::/121"),
        ],
        ..SiitConfig::default()
    };
    assert!(cfg.validate().unwrap_err().message.contains("overlaps"));
}

proptest! {
    #[test]
    fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200), v6 in any::<bool>()) {
        let mut s = siit();
        let mut pkt = bytes;
        if let Some(b) = pkt.first_mut() {
            *b = (*b & 0x0f) | if v6 { 0x60 } else { 0x40 };
        }
        let _ = run(&mut s, &pkt);
    }

    #[test]
    fn eam_maps_every_address_of_its_prefix_both_ways(n in 0u32..256) {
        let e = Eam::new("10.1.2.0/24".parse().unwrap(), "2001:db8:5::/120".parse().unwrap()).unwrap();
        let a = Ipv4Addr::from(0x0a01_0200 | n);
        prop_assert_eq!(e.map_v6(e.map_v4(a)), a);
    }
}

// Live reload.

/// A reload publishes the new EAM table; a worker takes it at its next batch, translates
/// with it from then on, and a refused configuration leaves the one in force.
#[test]
fn a_reload_changes_the_eam_table_of_running_workers() {
    let shared = siit();
    let mut w = shared.worker(0);
    let to_eam = |w: &mut Siit| {
        let out = run(
            w,
            &v4_udp(
                Ipv4Addr::new(198, 51, 100, 7),
                Ipv4Addr::new(192, 168, 255, 10),
            ),
        )
        .unwrap();
        v6_addrs(&out).1
    };
    let before: Ipv6Addr = "2001:db8:1::10".parse().unwrap();
    assert_eq!(to_eam(&mut w), before);
    let old = shared.config().clone();
    let mut new = old.clone();
    new.eam = vec![Eam::new(
        "192.168.255.10/32".parse().unwrap(),
        "2001:db8:2::99/128".parse().unwrap(),
    )
    .unwrap()];
    let report = shared.reload(&old, &new).unwrap();
    assert_eq!(report.to_string(), "eam: 1 → 1 entries");
    // Not before the worker's next batch ...
    assert_eq!(to_eam(&mut w), before);
    w.begin_batch();
    // ... and from then on, for it and for a worker made later.
    let after: Ipv6Addr = "2001:db8:2::99".parse().unwrap();
    assert_eq!(to_eam(&mut w), after);
    let mut late = shared.worker(1);
    late.begin_batch();
    assert_eq!(to_eam(&mut late), after);
    // A configuration that does not validate is refused; the one in force stays.
    let bad = SiitConfig {
        pref64: None,
        eam: Vec::new(),
        ..new.clone()
    };
    assert!(shared.reload(&new, &bad).is_err());
    w.begin_batch();
    assert_eq!(to_eam(&mut w), after);
    // The same file again: nothing to report.
    assert_eq!(shared.reload(&new, &new).unwrap().to_string(), "no change");
    // A prefix change is reported as the operator writes prefixes.
    let moved = SiitConfig {
        pref64: Some("2001:db8:46::/96".parse().unwrap()),
        ..new.clone()
    };
    let report = shared.reload(&new, &moved).unwrap().to_string();
    let was = new.pref64.as_ref().unwrap().to_string();
    assert_eq!(report, format!("pref64 {was} → 2001:db8:46::/96"));
}
