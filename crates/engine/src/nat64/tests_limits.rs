//! Per-subscriber limits behind NAT64: the subscriber is the IPv6 prefix of
//! `subscriber_prefix_len` bits, a /64 by default (an IPv6 subscriber is given a prefix:
//! RFC 6888 §3, RFC 7857), so addresses of one /64 share its limit and another /64 is
//! another subscriber; with 128 each address is its own.

use std::net::Ipv6Addr;

use conntrack::Counted;

use super::*;
use crate::testpkt::*;
use crate::HEADROOM;

const HOST_A: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x10);
const HOST_B: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x11);

fn send(n: &mut Nat64, src: Ipv6Addr, sport: u16) -> Option<DropReason> {
    let dst: Ipv6Addr = "2001:db8:64::c633:6407".parse().unwrap();
    let mut p = ipv6(UDP, src, dst, 64, &udp(sport, 53, b"q"));
    fill_l4_csum(&mut p);
    let len = p.len();
    let mut b = with_room(&p, HEADROOM);
    n.process(
        Timestamp::from_secs(1),
        Direction::Outbound,
        &mut b,
        HEADROOM,
        len,
    )
    .drop_reason()
}

/// A host in another /64.
const HOST_C: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 0x10);

fn limited(prefix_len: u8) -> Nat64 {
    Nat64::new(Nat64Config {
        pref64: "2001:db8:64::/96".parse().unwrap(),
        pool4: vec!["203.0.113.1/32".parse().unwrap()],
        max_ports_per_host: 100,
        port_preservation: false,
        subscriber_prefix_len: prefix_len,
        ..Nat64Config::default()
    })
    .unwrap()
}

/// Default /64: HOST_A and HOST_B (one /64) share 100 ports; the limit refuses the /64's
/// 101st, keeps its existing flows, and leaves HOST_C's /64 alone. Every port comes back
/// when the bindings go (the counts are released under the same key they were taken).
#[test]
fn one_ipv6_subscriber_is_its_64_and_is_limited_together() {
    let mut n = limited(64);
    for port in 0..50 {
        assert_eq!(send(&mut n, HOST_A, 10_000 + port), None);
        assert_eq!(send(&mut n, HOST_B, 10_000 + port), None);
    }
    for h in [HOST_A, HOST_B] {
        assert_eq!(send(&mut n, h, 20_000), Some(DropReason::SubscriberLimit));
    }
    assert_eq!(send(&mut n, HOST_A, 10_000), None, "existing flows go on");
    assert_eq!(send(&mut n, HOST_C, 20_000), None, "another /64");
    let nat = &n.shared().nat;
    assert_eq!(nat.host_count_total(Counted::Ports(Proto::Udp)), 101);
    // Everything idles out (UDP 300 s) and the reaper runs: nothing stays counted.
    for s in [400, 401, 402, 700, 701, 702] {
        n.handle_timeout(Timestamp::from_secs(s));
        // The worker passes a quiescent point between passes (a junk packet, dropped).
        let mut junk = [0u8; 20];
        let _ = n.process(
            Timestamp::from_secs(s),
            Direction::Outbound,
            &mut junk,
            0,
            20,
        );
    }
    assert_eq!(
        n.shared().nat.host_count_total(Counted::Ports(Proto::Udp)),
        0
    );
    assert_eq!(n.shared().nat.host_count_total(Counted::Sessions), 0);
}

/// `subscriber_prefix_len = 128`: each address is its own subscriber.
#[test]
fn with_128_one_ipv6_host_is_limited_its_neighbour_is_not() {
    let mut n = limited(128);
    for port in 0..100 {
        assert_eq!(send(&mut n, HOST_A, 10_000 + port), None);
    }
    assert_eq!(
        send(&mut n, HOST_A, 20_000),
        Some(DropReason::SubscriberLimit)
    );
    assert_eq!(
        send(&mut n, HOST_A, 10_000),
        None,
        "its existing flow goes on"
    );
    assert_eq!(
        send(&mut n, HOST_B, 20_000),
        None,
        "the next /128 is another host"
    );
}

#[test]
fn a_prefix_length_that_cannot_name_a_subscriber_is_refused() {
    for bad in [0u8, 65, 96, 127, 129] {
        let e = Nat64::new(Nat64Config {
            pool4: vec!["203.0.113.1/32".parse().unwrap()],
            subscriber_prefix_len: bad,
            ..Nat64Config::default()
        })
        .expect_err("refused");
        assert!(e.to_string().contains("subscriber_prefix_len"), "{e}");
    }
}
