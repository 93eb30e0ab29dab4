//! Per-subscriber limits behind NAT64 (issue 14 finding 3): the subscriber is one IPv6
//! host (/128); its limit does not touch another host, not even in the same /64.

use std::net::Ipv6Addr;

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

#[test]
fn one_ipv6_host_is_limited_its_neighbour_is_not() {
    let mut n = Nat64::new(Nat64Config {
        pref64: "2001:db8:64::/96".parse().unwrap(),
        pool4: vec!["203.0.113.1/32".parse().unwrap()],
        max_ports_per_host: 100,
        port_preservation: false,
        ..Nat64Config::default()
    })
    .unwrap();
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
