//! IPv6 tests: the parser on kernel-shaped byte vectors and random bytes, the
//! data-path views for IPv6 (next to IPv4 in the same table and cache), and the
//! real kernel's IPv6 routes, ND entries, addresses and events in namespaces.

use super::parse::*;
use super::tests::{events_until, ip_in, longest_match, parse_mutated, Netns, MAC2};
use super::*;
use proptest::prelude::*;
use std::process::Command;
use std::time::Duration;

/// `fd00:9::<last>`: the test link's prefix.
const fn lan(last: u16) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 9, 0, 0, 0, 0, 0, last)
}

/// `2001:db8:<net>:<sub>::<last>`.
const fn doc(net: u16, sub: u16, last: u16) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, net, sub, 0, 0, 0, last)
}

const LL2: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2);

fn route6(dst: Ipv6Addr, prefix_len: u8, gateway: Option<Ipv6Addr>, ifindex: u32) -> Route6 {
    Route {
        dst,
        prefix_len,
        gateway,
        ifindex,
        prefsrc: None,
        table: RT_TABLE_MAIN,
    }
}

fn one_msg(bytes: &[u8]) -> NlMsg<'_> {
    let mut m = Messages::new(bytes);
    let msg = m.next().expect("one message").expect("well formed");
    assert!(m.next().is_none(), "exactly one message");
    msg
}

// --- parser -------------------------------------------------------------------

/// RTM_NEWROUTE for `2001:db8:1::/48 via fe80::2 dev 3 proto boot metric 1024 pref
/// medium`, laid out as the kernel sends it (little-endian host).
#[cfg(target_endian = "little")]
const ROUTE6_MSG: [u8; 100] = [
    100, 0, 0, 0, 24, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // nlmsghdr: len 100, RTM_NEWROUTE
    10, 48, 0, 0, 254, 3, 0, 1, 0, 0, 0, 0, // rtmsg: AF_INET6 /48 main boot universe unicast
    8, 0, 15, 0, 254, 0, 0, 0, // RTA_TABLE 254
    20, 0, 1, 0, 0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // RTA_DST
    8, 0, 6, 0, 0, 4, 0, 0, // RTA_PRIORITY 1024
    20, 0, 5, 0, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, // RTA_GATEWAY fe80::2
    8, 0, 4, 0, 3, 0, 0, 0, // RTA_OIF 3
    5, 0, 20, 0, 0, 0, 0, 0, // RTA_PREF medium, padded
];

/// RTM_NEWNEIGH for `fe80::2 dev 3 lladdr 02:00:00:00:00:02 router REACHABLE`.
#[cfg(target_endian = "little")]
const NEIGH6_MSG: [u8; 88] = [
    88, 0, 0, 0, 28, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // nlmsghdr: len 88, RTM_NEWNEIGH
    10, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0x80, 1, // ndmsg: AF_INET6 dev 3 REACHABLE NTF_ROUTER
    20, 0, 1, 0, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, // NDA_DST
    10, 0, 2, 0, 2, 0, 0, 0, 0, 2, 0, 0, // NDA_LLADDR, padded
    20, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // NDA_CACHEINFO
    8, 0, 4, 0, 1, 0, 0, 0, // NDA_PROBES 1
];

#[test]
fn constants_match_libc_v6() {
    assert_eq!(i32::from(sys::AF_INET6), libc::AF_INET6);
    assert_eq!(sys::RTNLGRP_IPV6_ROUTE, libc::RTNLGRP_IPV6_ROUTE);
    assert_eq!(sys::RTN_BLACKHOLE, libc::RTN_BLACKHOLE);
    assert_eq!(sys::RTN_UNREACHABLE, libc::RTN_UNREACHABLE);
    assert_eq!(sys::RTN_PROHIBIT, libc::RTN_PROHIBIT);
}

#[cfg(target_endian = "little")]
#[test]
fn parses_kernel_ipv6_route_and_neighbor_bytes() {
    let msg = one_msg(&ROUTE6_MSG);
    let r = parse_route::<Ipv6Addr>(msg.body).unwrap().unwrap();
    assert_eq!(r, route6(doc(1, 0, 0), 48, Some(LL2), 3));
    assert_eq!(parse_route::<Ipv4Addr>(msg.body).unwrap(), None);
    assert_eq!(parse_event(&msg).unwrap(), Some(Event::Route6Added(r)));

    let msg = one_msg(&NEIGH6_MSG);
    let n = parse_neighbor::<Ipv6Addr>(msg.body).unwrap().unwrap();
    let want = Neighbor {
        ifindex: 3,
        addr: LL2,
        mac: Some(MAC2),
        state: nud::REACHABLE,
    };
    assert_eq!(n, want);
    assert!(n.is_usable());
    assert_eq!(parse_neighbor::<Ipv4Addr>(msg.body).unwrap(), None);
    assert_eq!(parse_event(&msg).unwrap(), Some(Event::Neighbor6Added(n)));

    // The same bodies as deletions.
    for (bytes, ty) in [
        (&ROUTE6_MSG[..], sys::RTM_DELROUTE),
        (&NEIGH6_MSG[..], sys::RTM_DELNEIGH),
    ] {
        let mut del = bytes.to_vec();
        del[4..6].copy_from_slice(&ty.to_ne_bytes());
        let e = parse_event(&one_msg(&del)).unwrap();
        assert!(
            matches!(
                e,
                Some(Event::Route6Removed(_) | Event::Neighbor6Removed(_))
            ),
            "{e:?}"
        );
    }
}

fn rtmsg6(dst_len: u8, rtm_type: u8) -> Vec<u8> {
    vec![
        sys::AF_INET6,
        dst_len,
        0,
        0,
        254,
        3,
        0,
        rtm_type,
        0,
        0,
        0,
        0,
    ]
}

#[test]
fn ipv6_blackhole_on_lo_has_no_interface() {
    for ty in [sys::RTN_BLACKHOLE, sys::RTN_UNREACHABLE, sys::RTN_PROHIBIT] {
        let bytes = MsgBuilder::new(sys::RTM_NEWROUTE, 0, 0)
            .body(&rtmsg6(48, ty))
            .attr(sys::RTA_DST, &doc(3, 0, 0).octets())
            .attr(sys::RTA_OIF, &1u32.to_ne_bytes())
            .finish();
        let r = parse_route::<Ipv6Addr>(one_msg(&bytes).body)
            .unwrap()
            .unwrap();
        assert_eq!(r, route6(doc(3, 0, 0), 48, None, 0), "type {ty}");
    }
}

#[test]
fn parses_ipv6_multipath_default_and_ifaddr() {
    let mut hop = Vec::new();
    hop.extend_from_slice(&28u16.to_ne_bytes());
    hop.extend_from_slice(&[0, 0]);
    hop.extend_from_slice(&5u32.to_ne_bytes());
    hop.extend_from_slice(&20u16.to_ne_bytes());
    hop.extend_from_slice(&sys::RTA_GATEWAY.to_ne_bytes());
    hop.extend_from_slice(&LL2.octets());
    let bytes = MsgBuilder::new(sys::RTM_NEWROUTE, 0, 0)
        .body(&rtmsg6(0, 1))
        .attr(sys::RTA_MULTIPATH, &hop)
        .finish();
    let r = parse_route::<Ipv6Addr>(one_msg(&bytes).body)
        .unwrap()
        .unwrap();
    assert_eq!(r, route6(Ipv6Addr::UNSPECIFIED, 0, Some(LL2), 5));

    // IPv6 addresses come as IFA_ADDRESS alone.
    let mut fixed = vec![sys::AF_INET6, 64, 0, 0];
    fixed.extend_from_slice(&4u32.to_ne_bytes());
    let bytes = MsgBuilder::new(sys::RTM_NEWADDR, 0, 0)
        .body(&fixed)
        .attr(sys::IFA_ADDRESS, &lan(1).octets())
        .finish();
    let body = one_msg(&bytes).body;
    assert_eq!(
        parse_ifaddr::<Ipv6Addr>(body).unwrap(),
        Some((4, lan(1), 64))
    );
    assert_eq!(parse_ifaddr::<Ipv4Addr>(body).unwrap(), None);
}

#[test]
fn malformed_ipv6_messages_are_errors() {
    assert!(matches!(
        parse_route::<Ipv6Addr>(&rtmsg6(129, 1)),
        Err(ParseError::BadPrefixLen {
            len: 129,
            max: 128,
            ..
        })
    ));
    assert!(parse_route::<Ipv6Addr>(&rtmsg6(128, 1)).is_ok());
    // An IPv4-sized address in an IPv6 message.
    let mut body = rtmsg6(48, 1);
    body.extend_from_slice(&[8, 0, 1, 0, 10, 9, 0, 0]);
    assert!(matches!(
        parse_route::<Ipv6Addr>(&body),
        Err(ParseError::BadAttrSize {
            len: 4,
            need: 16,
            ..
        })
    ));
    let mut body = vec![sys::AF_INET6, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0];
    body.extend_from_slice(&[8, 0, 1, 0, 10, 9, 0, 0]);
    assert!(matches!(
        parse_neighbor::<Ipv6Addr>(&body),
        Err(ParseError::BadAttrSize { need: 16, .. })
    ));
    let mut fixed = vec![sys::AF_INET6, 200, 0, 0];
    fixed.extend_from_slice(&4u32.to_ne_bytes());
    let e = parse_ifaddr::<Ipv6Addr>(&fixed).unwrap_err();
    assert!(e.to_string().contains("longer than 128"), "{e}");
}

proptest! {
    #[test]
    fn random_bytes_never_panic_v6(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        // The same bytes as an IPv6 body (family byte forced) and as they are.
        let mut v6 = bytes.clone();
        if let Some(b) = v6.first_mut() {
            *b = sys::AF_INET6;
        }
        for b in [&bytes, &v6] {
            let _ = parse_neighbor::<Ipv6Addr>(b);
            let _ = parse_route::<Ipv6Addr>(b);
            let _ = parse_ifaddr::<Ipv6Addr>(b);
            let _ = parse_first_nexthop::<Ipv6Addr>(b);
        }
        for m in Messages::new(&bytes).flatten() {
            let _ = parse_event(&m);
            let _ = parse_ifaddr::<Ipv6Addr>(m.body);
        }
    }

    #[test]
    fn mutated_ipv6_messages_never_panic(
        pos in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in any::<usize>(),
    ) {
        let mut dgram = MsgBuilder::new(sys::RTM_NEWNEIGH, 0, 0)
            .body(&[sys::AF_INET6, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0])
            .attr(sys::NDA_DST, &LL2.octets())
            .attr(sys::NDA_LLADDR, &MAC2)
            .finish();
        let mut hop = vec![28, 0, 0, 0, 5, 0, 0, 0, 20, 0, 5, 0];
        hop.extend_from_slice(&LL2.octets());
        dgram.extend(
            MsgBuilder::new(sys::RTM_NEWROUTE, 0, 0)
                .body(&rtmsg6(48, 1))
                .attr(sys::RTA_DST, &doc(1, 0, 0).octets())
                .attr(sys::RTA_MULTIPATH, &hop)
                .finish(),
        );
        parse_mutated(dgram, &pos, cut);
    }

    #[test]
    fn route_table_v6_matches_a_linear_scan(
        routes in proptest::collection::vec((any::<u128>(), 0u8..=128, 1u32..4), 0..20),
        // Destinations near the routes' networks, so long prefixes match too.
        pick in any::<usize>(),
        noise in any::<u128>(),
        noise_bits in 0u32..=128,
    ) {
        let m = <Ipv6Addr as Family>::mask;
        let routes: Vec<Route6> = routes
            .into_iter()
            .map(|(d, l, i)| route6(Ipv6Addr::from(d & m(l)), l, None, i))
            .collect();
        let base = routes.get(pick % routes.len().max(1)).map_or(0, |r| u128::from(r.dst));
        let dst = base ^ noise.checked_shr(noise_bits).unwrap_or(0);
        let table = RouteTable::new(&[]).with_ipv6(&routes);
        let best = longest_match(&routes, |r| dst & m(r.prefix_len) == u128::from(r.dst));
        let dst = Ipv6Addr::from(dst);
        prop_assert_eq!(table.lookup6(dst), best.map(|r| (r.ifindex, dst)));
    }
}

// --- data-path views without a kernel -------------------------------------------

#[test]
fn route_table_holds_both_families() {
    let v4 = [Route {
        dst: Ipv4Addr::new(10, 9, 0, 0),
        prefix_len: 24,
        gateway: None,
        ifindex: 1,
        prefsrc: None,
        table: RT_TABLE_MAIN,
    }];
    let v6 = [
        route6(Ipv6Addr::UNSPECIFIED, 0, Some(lan(0xfe)), 1),
        route6(lan(0), 64, None, 1),
        route6(doc(1, 0, 0), 48, Some(lan(2)), 1),
        route6(doc(1, 5, 0), 64, None, 2),
        route6(doc(2, 0, 0), 48, Some(LL2), 2),
        route6(doc(3, 0, 0), 48, None, 0), // blackhole
        Route {
            table: RT_TABLE_LOCAL,
            ..route6(lan(1), 128, None, 9)
        },
        route6(doc(1, 0, 0), 48, Some(lan(99)), 4), // higher metric: ignored
    ];
    let t = RouteTable::new(&v4).with_ipv6(&v6);
    assert_eq!(t.len(), 1 + 6);
    assert_eq!(
        t.lookup(Ipv4Addr::new(10, 9, 0, 7)),
        Some((1, Ipv4Addr::new(10, 9, 0, 7)))
    );
    assert_eq!(t.lookup6(doc(1, 0, 7)), Some((1, lan(2))), "via a gateway");
    assert_eq!(
        t.lookup6(doc(1, 5, 7)),
        Some((2, doc(1, 5, 7))),
        "on-link, longer prefix"
    );
    assert_eq!(
        t.lookup6(doc(2, 0, 1)),
        Some((2, LL2)),
        "link-local gateway"
    );
    assert_eq!(t.lookup6(lan(42)), Some((1, lan(42))), "connected");
    assert_eq!(t.lookup6(lan(1)), Some((1, lan(1))), "local table ignored");
    assert_eq!(t.lookup6(doc(3, 0, 1)), None, "blackhole beats the default");
    assert_eq!(
        t.lookup6(doc(9, 0, 1)),
        Some((1, lan(0xfe))),
        "default route"
    );
    // IPv4 alone: no IPv6 routes, and the IPv4-mapped form is not an IPv4 lookup.
    let t4 = RouteTable::new(&v4);
    assert_eq!(t4.lookup6(doc(1, 0, 7)), None);
    assert_eq!(
        t4.lookup6(Ipv4Addr::new(10, 9, 0, 7).to_ipv6_mapped()),
        None
    );
    assert!(RouteTable::new(&[]).with_ipv6(&[]).is_empty());
}

#[test]
fn neighbor_cache_keeps_families_apart() {
    let n6 = |addr, state| Neighbor {
        ifindex: 2,
        addr,
        mac: Some(MAC2),
        state,
    };
    let v4 = Neighbor {
        ifindex: 2,
        addr: Ipv4Addr::new(10, 9, 0, 2),
        mac: Some([2, 0, 0, 0, 0, 4]),
        state: nud::REACHABLE,
    };
    let mut c = NeighborCache::from_dump(&[v4])
        .with_ipv6(&[n6(lan(2), nud::REACHABLE), n6(lan(3), nud::INCOMPLETE)]);
    assert_eq!(c.len(), 2);
    assert_eq!(c.get6(2, lan(2)), Some(MAC2));
    assert_eq!(c.get6(3, lan(2)), None, "keyed by interface too");
    assert_eq!(c.get(2, v4.addr), Some([2, 0, 0, 0, 0, 4]));
    assert_eq!(c.get6(2, v4.addr.to_ipv6_mapped()), None);
    c.apply(&Event::Neighbor6Added(n6(lan(3), nud::STALE)));
    assert_eq!(c.get6(2, lan(3)), Some(MAC2));
    c.apply(&Event::Neighbor6Added(n6(lan(2), nud::FAILED)));
    assert_eq!(c.get6(2, lan(2)), None, "FAILED evicts");
    c.apply(&Event::Neighbor6Removed(n6(lan(3), nud::STALE)));
    c.apply(&Event::Route6Added(route6(lan(0), 64, None, 2)));
    assert_eq!(c.len(), 1, "only the IPv4 entry is left");
}

// --- the real kernel, in throwaway namespaces -------------------------------------

#[test]
fn kernel_dumps_ipv6_routes_neighbors_and_addrs() {
    let Some(ns) = Netns::new("dump6") else {
        return;
    };
    ns.ip("link set lo up");
    ns.ip("link add vethA type veth peer name vethB");
    ns.ip("link set vethA address 02:00:00:00:00:01 up");
    ns.ip("link set vethB up");
    ns.ip("addr add 10.9.0.1/24 dev vethA");
    ns.ip("-6 addr add fd00:9::1/64 dev vethA nodad");
    ns.ip("-6 neigh add fd00:9::2 lladdr 02:00:00:00:00:02 dev vethA nud permanent");
    ns.ip("-6 route add 2001:db8:1::/48 via fd00:9::2");
    ns.ip("-6 route add 2001:db8:1:5::/64 dev vethA");
    ns.ip("-6 route add 2001:db8:2::/48 via fe80::2 dev vethA");
    ns.ip("-6 route add blackhole 2001:db8:3::/48");
    ns.ip("-6 route add default via fd00:9::fe");

    let (idx, routes, routes6, neighbors6, addrs6, all_addrs6) = ns.run(|| {
        let idx = if_index("vethA").unwrap();
        let mut nl = Netlink::open().unwrap();
        (
            idx,
            nl.dump_routes().unwrap(),
            nl.dump_routes6().unwrap(),
            nl.dump_neighbors6().unwrap(),
            if_ipv6_addrs(idx).unwrap(),
            nl.dump_ipv6_addrs().unwrap(),
        )
    });
    assert!(
        routes.iter().all(|r| r.prefix_len <= 32),
        "IPv4 dump stays IPv4"
    );
    let via = route6(doc(1, 0, 0), 48, Some(lan(2)), idx);
    let blackhole = route6(doc(3, 0, 0), 48, None, 0);
    for r in [via, blackhole] {
        assert!(
            routes6.iter().any(|x| Route {
                prefsrc: None,
                ..*x
            } == r),
            "{r:?} not in {routes6:#?}"
        );
    }
    assert!(
        routes6
            .iter()
            .any(|r| r.table == RT_TABLE_LOCAL && r.dst == lan(1)),
        "own address in the local table: {routes6:#?}"
    );

    let t = RouteTable::new(&routes).with_ipv6(&routes6);
    assert_eq!(t.lookup6(doc(1, 0, 7)), Some((idx, lan(2))), "via gateway");
    assert_eq!(
        t.lookup6(doc(1, 5, 7)),
        Some((idx, doc(1, 5, 7))),
        "on-link"
    );
    assert_eq!(
        t.lookup6(doc(2, 0, 1)),
        Some((idx, LL2)),
        "link-local gateway"
    );
    assert_eq!(t.lookup6(lan(42)), Some((idx, lan(42))), "connected prefix");
    assert_eq!(t.lookup6(doc(3, 0, 1)), None, "blackhole");
    assert_eq!(
        t.lookup6(doc(9, 0, 1)),
        Some((idx, lan(0xfe))),
        "default route"
    );
    let v4 = Ipv4Addr::new(10, 9, 0, 5);
    assert_eq!(t.lookup(v4), Some((idx, v4)), "IPv4 in the same table");

    let n = Neighbor {
        ifindex: idx,
        addr: lan(2),
        mac: Some(MAC2),
        state: nud::PERMANENT,
    };
    assert!(neighbors6.contains(&n), "{neighbors6:?}");
    let cache = NeighborCache::default().with_ipv6(&neighbors6);
    assert_eq!(cache.get6(idx, lan(2)), Some(MAC2));

    assert!(addrs6.contains(&(lan(1), 64)), "{addrs6:?}");
    assert!(
        addrs6
            .iter()
            .any(|(a, l)| a.segments()[0] == 0xfe80 && *l == 64),
        "link-local address: {addrs6:?}"
    );
    assert!(
        all_addrs6.contains(&(1, Ipv6Addr::LOCALHOST, 128)),
        "lo's ::1: {all_addrs6:?}"
    );
}

#[test]
fn kernel_ipv6_events_probes_and_ping() {
    let Some((ns, peer)) = Netns::linked_pair("ev6") else {
        return;
    };
    ns.ip("-6 addr add fd00:9::1/64 dev vethA nodad");
    peer.ip("-6 addr add fd00:9::3/64 dev vethB nodad");
    peer.ip("-6 addr add fd00:9::4/64 dev vethB nodad");
    let ns_name = ns.name.clone();
    const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 3];

    let r = ns.run(move || {
        let ip_n = |args: &str| ip_in(&ns_name, args);
        let idx = if_index("vethA").unwrap();
        let mut sub = Netlink::subscribe().unwrap();
        let mut req = Netlink::open().unwrap();
        let secs = Duration::from_secs;

        ip_n("-6 neigh replace fd00:9::2 lladdr 02:00:00:00:00:02 dev vethA");
        let (_, neigh_added) = events_until(
            &mut sub,
            secs(5),
            |e| matches!(e, Event::Neighbor6Added(n) if n.addr == lan(2) && n.mac == Some(MAC2)),
        );
        ip_n("-6 route add 2001:db8:1::/48 via fd00:9::2");
        let (_, route_added) = events_until(&mut sub, secs(5), |e| {
            matches!(e, Event::Route6Added(r) if r.dst == doc(1, 0, 0) && r.prefix_len == 48
                && r.gateway == Some(lan(2)) && r.ifindex == idx && r.table == RT_TABLE_MAIN)
        });
        ip_n("-6 neigh del fd00:9::2 dev vethA");
        let (_, neigh_removed) = events_until(
            &mut sub,
            secs(5),
            |e| matches!(e, Event::Neighbor6Removed(n) if n.addr == lan(2)),
        );
        ip_n("-6 route del 2001:db8:1::/48");
        let (_, route_removed) = events_until(
            &mut sub,
            secs(5),
            |e| matches!(e, Event::Route6Removed(r) if r.dst == doc(1, 0, 0)),
        );

        // ping6 makes the kernel resolve the peer; the cache learns it from events.
        let mut cache = NeighborCache::default().with_ipv6(&req.dump_neighbors6().unwrap());
        let pinged = Command::new("ping")
            .args(["-6", "-c1", "-W2", "fd00:9::4"])
            .output()
            .is_ok_and(|o| o.status.success());
        let (ping_events, learned) = events_until(
            &mut sub,
            secs(5),
            |e| matches!(e, Event::Neighbor6Added(n) if n.addr == lan(4) && n.is_usable()),
        );
        ping_events.iter().for_each(|e| cache.apply(e));
        let cached = cache.get6(idx, lan(4));

        // A probe of a live peer: ND runs and the entry becomes usable with its MAC.
        req.probe_neighbor6(idx, lan(3)).unwrap();
        let (probe_events, resolved) = events_until(
            &mut sub,
            secs(5),
            |e| matches!(e, Event::Neighbor6Added(n) if n.addr == lan(3) && n.is_usable()),
        );
        let live = req
            .dump_neighbors6()
            .unwrap()
            .into_iter()
            .find(|n| n.addr == lan(3));
        // Nobody home: the probe leaves an INCOMPLETE entry without a MAC.
        req.probe_neighbor6(idx, lan(0x99)).unwrap();
        let dead = req
            .dump_neighbors6()
            .unwrap()
            .into_iter()
            .find(|n| n.addr == lan(0x99));
        let bad_index = req.probe_neighbor6(9999, lan(3)).unwrap_err();
        (
            [neigh_added, route_added, neigh_removed, route_removed],
            (pinged, learned, cached, ping_events),
            (resolved, probe_events, live, dead),
            bad_index,
        )
    });
    let (seen, (pinged, learned, cached, ping_events), probe, bad_index) = r;
    assert_eq!(
        seen, [true; 4],
        "neigh add, route add, neigh del, route del events"
    );
    assert!(pinged, "ping -6 fd00:9::4 answered");
    assert!(learned, "neighbour learned after ping: {ping_events:?}");
    assert_eq!(cached, Some(PEER_MAC));
    let (resolved, probe_events, live, dead) = probe;
    assert!(resolved, "probe of a live peer resolved: {probe_events:?}");
    let live = live.expect("resolved neighbour in the dump");
    assert_eq!(live.mac, Some(PEER_MAC));
    assert!(live.is_usable(), "{live:?}");
    let dead = dead.expect("probe creates an entry for an unanswered address");
    assert_eq!((dead.state, dead.mac), (nud::INCOMPLETE, None), "{dead:?}");
    assert_eq!(bad_index.raw_os_error(), Some(libc::ENODEV), "{bad_index}");
}
