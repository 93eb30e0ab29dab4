//! Flow offload hints (`offload`): what a worker tells the runtime's fast path about the
//! flows it translates, and what it keeps to itself.

use std::net::IpAddr;
use std::sync::Arc;

use super::offload::{FlowHint, FlowKey};
use super::tests_errors::{a6, b6, config, go, p64, udp4, udp6, A4, B4, H4};
use super::*;

fn drained(h: &offload::FlowHints) -> Vec<FlowHint> {
    let mut out = Vec::new();
    h.drain(&mut out);
    out
}

fn key(src: IpAddr, dst: IpAddr) -> FlowKey {
    FlowKey {
        proto: 17,
        src,
        dst,
        sport: 5000,
        dport: 53,
    }
}

#[test]
fn a_flow_is_hinted_at_its_second_packet_with_both_tuples_as_translated() {
    let shared = Siit::new(config(), SiitKind::Siit).unwrap();
    let hints = Arc::new(offload::FlowHints::default());
    assert!(shared.attach_offload(Arc::clone(&hints)));
    assert!(!shared.attach_offload(Arc::default()), "one offload");
    let mut w = shared.worker(0);
    // Not taken up before a batch starts.
    let pkt = udp4(H4, A4, 64);
    for _ in 0..2 {
        assert!(matches!(go(&mut w, &pkt).0, Emit::Forward { .. }));
    }
    assert!(drained(&hints).is_empty());
    w.begin_batch();
    go(&mut w, &pkt);
    assert!(drained(&hints).is_empty(), "a first packet is not hinted");
    let (_, out, _) = go(&mut w, &pkt);
    let h = drained(&hints);
    assert_eq!(
        h,
        vec![FlowHint {
            from: key(H4.into(), A4.into()),
            to: key(p64(H4).into(), a6().into()),
            generation: 0,
        }]
    );
    assert_eq!(FlowKey::of(&out), Some(h[0].to), "as the packet left");
    // The other direction is a flow of its own (IPv6 -> IPv4).
    let back = udp6(a6(), p64(H4), 64);
    go(&mut w, &back);
    go(&mut w, &back);
    assert_eq!(
        drained(&hints),
        vec![FlowHint {
            from: key(a6().into(), p64(H4).into()),
            to: key(A4.into(), H4.into()),
            generation: 0,
        }]
    );
}

#[test]
fn hairpins_refusals_and_non_tcp_udp_are_never_hinted() {
    let shared = Siit::new(config(), SiitKind::Siit).unwrap();
    let hints = Arc::new(offload::FlowHints::default());
    assert!(shared.attach_offload(Arc::clone(&hints)));
    let mut w = shared.worker(0);
    w.begin_batch();
    // An EAM hairpin (goes back out of the IPv6 side: not a crossing the program makes).
    let hairpin = udp6(a6(), p64(B4), 64);
    // No mapping for the IPv6 source; TTL 1 (Time Exceeded).
    let unmapped = udp6("2001:db8:9::1".parse().unwrap(), p64(H4), 64);
    let expiring = udp4(H4, A4, 1);
    for pkt in [&hairpin, &unmapped, &expiring] {
        for _ in 0..3 {
            go(&mut w, pkt);
        }
    }
    assert!(drained(&hints).is_empty());
    // A hairpin both ways is still translated as before.
    assert!(matches!(
        go(&mut w, &udp6(b6(), p64(A4), 64)).0,
        Emit::Hairpin { .. }
    ));
}

#[test]
fn a_hint_carries_the_generation_that_translated_it() {
    let shared = Siit::new(config(), SiitKind::Siit).unwrap();
    let hints = Arc::new(offload::FlowHints::default());
    assert!(shared.attach_offload(Arc::clone(&hints)));
    let mut w = shared.worker(0);
    w.begin_batch();
    let (g, cfg) = shared.in_force();
    assert_eq!((g, &*cfg), (0, shared.config()));
    let mut next = config();
    next.options.ipv4_mtu = 1400;
    shared.reload(&config(), &next).unwrap();
    let (g, cfg) = shared.in_force();
    assert_eq!((g, cfg.options.ipv4_mtu), (1, 1400));
    w.begin_batch();
    let pkt = udp4(H4, A4, 64);
    go(&mut w, &pkt);
    go(&mut w, &pkt);
    let h = drained(&hints);
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].generation, 1);
}
