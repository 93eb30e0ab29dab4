//! Tests: the parser on hand-built and random bytes, the data-path views
//! without a kernel, and the real kernel inside throwaway network namespaces.

use super::parse::*;
use super::*;
use proptest::prelude::*;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;
use std::time::Instant;

const A: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
pub(super) const MAC2: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn ndmsg(ifindex: u32, state: u16) -> Vec<u8> {
    let mut b = vec![sys::AF_INET, 0, 0, 0];
    b.extend_from_slice(&ifindex.to_ne_bytes());
    b.extend_from_slice(&state.to_ne_bytes());
    b.extend_from_slice(&[0, 0]);
    b
}

fn rtmsg(dst_len: u8, table: u8) -> Vec<u8> {
    vec![sys::AF_INET, dst_len, 0, 0, table, 3, 0, 1, 0, 0, 0, 0]
}

fn neigh_msg(ty: u16, addr: Ipv4Addr, mac: &[u8], state: u16) -> Vec<u8> {
    MsgBuilder::new(ty, 0, 0)
        .body(&ndmsg(3, state))
        .attr(sys::NDA_DST, &addr.octets())
        .attr(sys::NDA_LLADDR, mac)
        .finish()
}

fn route(dst: [u8; 4], prefix_len: u8, gateway: Option<[u8; 4]>, ifindex: u32) -> Route {
    Route {
        dst: dst.into(),
        prefix_len,
        gateway: gateway.map(Ipv4Addr::from),
        ifindex,
        prefsrc: None,
        table: RT_TABLE_MAIN,
    }
}

// --- parser ---------------------------------------------------------------

#[test]
fn constants_match_libc() {
    assert_eq!(sys::RTM_NEWNEIGH, libc::RTM_NEWNEIGH);
    assert_eq!(sys::RTM_DELROUTE, libc::RTM_DELROUTE);
    assert_eq!(sys::RTM_GETADDR, libc::RTM_GETADDR);
    assert_eq!(sys::NLMSG_ERROR as libc::c_int, libc::NLMSG_ERROR);
    assert_eq!(sys::NLMSG_DONE as libc::c_int, libc::NLMSG_DONE);
    assert_eq!(sys::NLM_F_DUMP as libc::c_int, libc::NLM_F_DUMP);
    assert_eq!(sys::NLM_F_DUMP_INTR as libc::c_int, libc::NLM_F_DUMP_INTR);
    assert_eq!(sys::RTNLGRP_NEIGH, libc::RTNLGRP_NEIGH);
    assert_eq!(sys::RTNLGRP_IPV4_ROUTE, libc::RTNLGRP_IPV4_ROUTE);
    assert_eq!(sys::RTA_TABLE, libc::RTA_TABLE);
    assert_eq!(sys::RTA_MULTIPATH, libc::RTA_MULTIPATH);
    assert_eq!(sys::NTF_USE, libc::NTF_USE);
    assert_eq!(sys::SOL_NETLINK, libc::SOL_NETLINK);
    assert_eq!(nud::PERMANENT, libc::NUD_PERMANENT);
    assert_eq!(nud::NOARP, libc::NUD_NOARP);
    assert_eq!(i32::from(sys::AF_INET), libc::AF_INET);
}

#[test]
fn parses_a_neighbor_message() {
    let bytes = neigh_msg(sys::RTM_NEWNEIGH, A, &MAC2, nud::REACHABLE);
    let msgs: Vec<_> = Messages::new(&bytes).collect::<Result<_, _>>().unwrap();
    assert_eq!(msgs.len(), 1);
    let n = parse_neighbor::<Ipv4Addr>(msgs[0].body).unwrap().unwrap();
    assert_eq!(
        n,
        Neighbor {
            ifindex: 3,
            addr: A,
            mac: Some(MAC2),
            state: nud::REACHABLE
        }
    );
    assert!(n.is_usable());
    assert_eq!(
        parse_event(&msgs[0]).unwrap(),
        Some(Event::NeighborAdded(n)),
        "RTM_NEWNEIGH is an added neighbour"
    );
}

#[test]
fn neighbor_without_6_byte_mac_or_valid_state_is_unusable() {
    let bytes = neigh_msg(sys::RTM_NEWNEIGH, A, &[], nud::REACHABLE);
    let n = parse_neighbor::<Ipv4Addr>(Messages::new(&bytes).next().unwrap().unwrap().body)
        .unwrap()
        .unwrap();
    assert_eq!(n.mac, None);
    assert!(!n.is_usable());
    let incomplete = Neighbor {
        mac: Some(MAC2),
        state: nud::INCOMPLETE,
        ..n
    };
    assert!(!incomplete.is_usable());
    let failed = Neighbor {
        state: nud::FAILED,
        ..incomplete
    };
    assert!(!failed.is_usable());
    for s in [
        nud::STALE,
        nud::DELAY,
        nud::PROBE,
        nud::PERMANENT,
        nud::NOARP,
    ] {
        assert!(
            Neighbor {
                state: s,
                ..incomplete
            }
            .is_usable(),
            "state {s:#x}"
        );
    }
}

#[test]
fn non_ipv4_messages_are_skipped() {
    let mut body = ndmsg(1, nud::REACHABLE);
    body[0] = 10; // AF_INET6
    assert_eq!(parse_neighbor::<Ipv4Addr>(&body).unwrap(), None);
    let mut body = rtmsg(64, 254);
    body[0] = 10;
    assert_eq!(parse_route::<Ipv4Addr>(&body).unwrap(), None);
}

#[test]
fn parses_a_route_with_table_attribute_and_multipath() {
    let bytes = MsgBuilder::new(sys::RTM_NEWROUTE, 0, 0)
        .body(&rtmsg(24, 252))
        .attr(sys::RTA_TABLE, &1000u32.to_ne_bytes())
        .attr(sys::RTA_DST, &[198, 51, 100, 0])
        .attr(sys::RTA_GATEWAY, &[10, 9, 0, 2])
        .attr(sys::RTA_OIF, &7u32.to_ne_bytes())
        .attr(sys::RTA_PREFSRC, &[10, 9, 0, 1])
        .finish();
    let msg = Messages::new(&bytes).next().unwrap().unwrap();
    let r = parse_route::<Ipv4Addr>(msg.body).unwrap().unwrap();
    assert_eq!(
        r,
        Route {
            dst: Ipv4Addr::new(198, 51, 100, 0),
            prefix_len: 24,
            gateway: Some(Ipv4Addr::new(10, 9, 0, 2)),
            ifindex: 7,
            prefsrc: Some(A),
            table: 1000,
        }
    );

    // A multipath default route: no RTA_OIF, the first rtnexthop is used.
    let mut hop = Vec::new();
    hop.extend_from_slice(&16u16.to_ne_bytes());
    hop.extend_from_slice(&[0, 0]);
    hop.extend_from_slice(&5u32.to_ne_bytes());
    hop.extend_from_slice(&8u16.to_ne_bytes());
    hop.extend_from_slice(&sys::RTA_GATEWAY.to_ne_bytes());
    hop.extend_from_slice(&[192, 0, 2, 1]);
    let bytes = MsgBuilder::new(sys::RTM_NEWROUTE, 0, 0)
        .body(&rtmsg(0, 254))
        .attr(sys::RTA_MULTIPATH, &hop)
        .finish();
    let r = parse_route::<Ipv4Addr>(Messages::new(&bytes).next().unwrap().unwrap().body)
        .unwrap()
        .unwrap();
    assert_eq!(
        (r.ifindex, r.gateway),
        (5, Some(Ipv4Addr::new(192, 0, 2, 1)))
    );
    assert_eq!(r.dst, Ipv4Addr::UNSPECIFIED);
}

#[test]
fn parses_ifaddr_preferring_local() {
    let mut fixed = vec![sys::AF_INET, 24, 0, 0];
    fixed.extend_from_slice(&4u32.to_ne_bytes());
    let bytes = MsgBuilder::new(sys::RTM_NEWADDR, 0, 0)
        .body(&fixed)
        .attr(sys::IFA_ADDRESS, &[10, 9, 0, 254])
        .attr(sys::IFA_LOCAL, &A.octets())
        .finish();
    let msg = Messages::new(&bytes).next().unwrap().unwrap();
    assert_eq!(
        parse_ifaddr::<Ipv4Addr>(msg.body).unwrap(),
        Some((4, A, 24))
    );
}

#[test]
fn iterates_a_multi_part_datagram() {
    let mut dgram = neigh_msg(sys::RTM_NEWNEIGH, A, &MAC2, nud::STALE);
    dgram.extend(neigh_msg(
        sys::RTM_DELNEIGH,
        Ipv4Addr::new(10, 9, 0, 3),
        &MAC2,
        nud::STALE,
    ));
    dgram.extend(
        MsgBuilder::new(sys::NLMSG_DONE, 2, 0)
            .body(&0i32.to_ne_bytes())
            .finish(),
    );
    let types: Vec<u16> = Messages::new(&dgram).map(|m| m.unwrap().ty).collect();
    assert_eq!(
        types,
        [sys::RTM_NEWNEIGH, sys::RTM_DELNEIGH, sys::NLMSG_DONE]
    );
    let events: Vec<_> = Messages::new(&dgram)
        .filter_map(|m| parse_event(&m.unwrap()).unwrap())
        .collect();
    assert!(matches!(
        events[..],
        [Event::NeighborAdded(_), Event::NeighborRemoved(_)]
    ));
}

#[test]
fn error_and_done_carry_errno() {
    assert!(check_error(&0i32.to_ne_bytes()).is_ok());
    let e = check_error(&(-libc::ENOENT).to_ne_bytes()).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    let e = check_error(&i32::MIN.to_ne_bytes()).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(i32::MAX));
    assert_eq!(
        check_error(&[0, 0]).unwrap_err().kind(),
        io::ErrorKind::InvalidData
    );
    assert!(check_done(&[]).is_ok());
    assert!(check_done(&0i32.to_ne_bytes()).is_ok());
    let e = check_done(&(-libc::EINTR).to_ne_bytes()).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINTR));
    assert!(is_events_lost(&io::Error::from_raw_os_error(libc::ENOBUFS)));
    assert!(!is_events_lost(&io::Error::from_raw_os_error(libc::ENOENT)));
}

#[test]
fn malformed_lengths_are_errors() {
    let good = neigh_msg(sys::RTM_NEWNEIGH, A, &MAC2, nud::STALE);
    // nlmsg_len past the datagram, below the header, and a truncated header.
    for (bytes, what) in [
        (good[..good.len() - 1].to_vec(), "len past end"),
        ([&8u32.to_ne_bytes()[..], &good[4..]].concat(), "len < 16"),
        (good[..10].to_vec(), "short header"),
    ] {
        let r: Result<Vec<_>, _> = Messages::new(&bytes).collect();
        assert!(r.is_err(), "{what}");
    }
    // An attribute claiming more bytes than there are; one shorter than its header.
    let mut body = ndmsg(1, nud::STALE);
    body.extend_from_slice(&[200, 0, 1, 0, 10, 9, 0, 1]);
    assert!(matches!(
        parse_neighbor::<Ipv4Addr>(&body),
        Err(ParseError::BadAttrLength {
            offset: 0,
            len: 200,
            ..
        })
    ));
    let mut body = ndmsg(1, nud::STALE);
    body.extend_from_slice(&[2, 0, 1, 0]);
    assert!(parse_neighbor::<Ipv4Addr>(&body).is_err());
    // A 3-byte NDA_DST and a /33 route.
    let mut body = ndmsg(1, nud::STALE);
    body.extend_from_slice(&[7, 0, 1, 0, 10, 9, 0, 0]);
    assert!(matches!(
        parse_neighbor::<Ipv4Addr>(&body),
        Err(ParseError::BadAttrSize { len: 3, .. })
    ));
    assert!(matches!(
        parse_route::<Ipv4Addr>(&rtmsg(33, 254)),
        Err(ParseError::BadPrefixLen { len: 33, .. })
    ));
    assert!(matches!(
        parse_route::<Ipv4Addr>(&[2, 0]),
        Err(ParseError::ShortBody { .. })
    ));
    let e: io::Error = ParseError::ShortBody {
        what: "rtmsg",
        len: 2,
        need: 12,
    }
    .into();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("rtmsg"), "{e}");
}

/// Overwrites bytes of `dgram` at `pos` (wrapped), cuts it at `cut` (wrapped), and
/// parses every message as events: nothing may panic.
pub(super) fn parse_mutated(mut dgram: Vec<u8>, pos: &[(usize, u8)], cut: usize) {
    for &(p, v) in pos {
        let i = p % dgram.len();
        dgram[i] = v;
    }
    dgram.truncate(cut % (dgram.len() + 1));
    for m in Messages::new(&dgram) {
        match m {
            Ok(m) => {
                let _ = parse_event(&m);
            }
            Err(e) => {
                let _ = io::Error::from(e).to_string();
            }
        }
    }
}

/// The oracle for prefix matching: of the routes that `matches`, the longest prefix
/// (the first listed among equals).
pub(super) fn longest_match<A>(
    routes: &[Route<A>],
    matches: impl Fn(&Route<A>) -> bool,
) -> Option<&Route<A>> {
    routes
        .iter()
        .filter(|r| matches(r))
        .fold(None, |b, r| match b {
            Some(b) if b.prefix_len >= r.prefix_len => Some(b),
            _ => Some(r),
        })
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        for m in Messages::new(&bytes).flatten() {
            let _ = parse_event(&m);
            let _ = parse_ifaddr::<Ipv4Addr>(m.body);
            let _ = check_error(m.body);
            let _ = check_done(m.body);
        }
        let _ = parse_neighbor::<Ipv4Addr>(&bytes);
        let _ = parse_route::<Ipv4Addr>(&bytes);
        let _ = parse_ifaddr::<Ipv4Addr>(&bytes);
        let _ = parse_first_nexthop::<Ipv4Addr>(&bytes);
        let _ = Attrs::new(&bytes).count();
    }

    #[test]
    fn mutated_messages_never_panic(
        pos in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in any::<usize>(),
    ) {
        let mut dgram = neigh_msg(sys::RTM_NEWNEIGH, A, &MAC2, nud::STALE);
        dgram.extend(
            MsgBuilder::new(sys::RTM_NEWROUTE, 0, 0)
                .body(&rtmsg(24, 254))
                .attr(sys::RTA_DST, &[198, 51, 100, 0])
                .attr(sys::RTA_MULTIPATH, &[16, 0, 0, 0, 5, 0, 0, 0, 8, 0, 5, 0, 192, 0, 2, 1])
                .finish(),
        );
        parse_mutated(dgram, &pos, cut);
    }

    #[test]
    fn route_table_matches_a_linear_scan(
        routes in proptest::collection::vec((any::<u32>(), 0u8..=32, 1u32..4), 0..20),
        dst in any::<u32>(),
    ) {
        let routes: Vec<Route> = routes
            .into_iter()
            .map(|(d, l, i)| route((d & mask(l)).to_be_bytes(), l, None, i))
            .collect();
        let table = RouteTable::new(&routes);
        let best = longest_match(&routes, |r| dst & mask(r.prefix_len) == u32::from(r.dst));
        let dst = Ipv4Addr::from(dst);
        prop_assert_eq!(table.lookup(dst), best.map(|r| (r.ifindex, dst)));
    }
}

// --- data-path views without a kernel ----------------------------------------

#[test]
fn route_table_longest_prefix_match() {
    let routes = [
        route([0, 0, 0, 0], 0, Some([10, 9, 0, 254]), 1),
        route([10, 9, 0, 0], 24, None, 1),
        route([198, 51, 100, 0], 24, Some([10, 9, 0, 2]), 1),
        route([198, 51, 100, 128], 25, Some([10, 9, 0, 3]), 2),
        route([198, 51, 100, 200], 32, None, 3),
        route([203, 0, 113, 0], 24, None, 0), // blackhole: no interface
        Route {
            table: RT_TABLE_LOCAL,
            ..route([192, 0, 2, 1], 32, None, 9)
        },
        route([198, 51, 100, 0], 24, Some([10, 9, 0, 99]), 4), // higher metric: ignored
    ];
    let t = RouteTable::new(&routes);
    assert_eq!(t.len(), 6);
    let ip = Ipv4Addr::new;
    assert_eq!(t.lookup(ip(198, 51, 100, 7)), Some((1, ip(10, 9, 0, 2))));
    assert_eq!(t.lookup(ip(198, 51, 100, 129)), Some((2, ip(10, 9, 0, 3))));
    assert_eq!(
        t.lookup(ip(198, 51, 100, 200)),
        Some((3, ip(198, 51, 100, 200)))
    );
    assert_eq!(t.lookup(ip(10, 9, 0, 5)), Some((1, ip(10, 9, 0, 5))));
    assert_eq!(
        t.lookup(ip(192, 0, 2, 1)),
        Some((1, ip(10, 9, 0, 254))),
        "local table ignored"
    );
    assert_eq!(
        t.lookup(ip(203, 0, 113, 9)),
        None,
        "blackhole beats the default route"
    );
    assert_eq!(RouteTable::new(&routes[1..3]).lookup(ip(8, 8, 8, 8)), None);
    assert!(RouteTable::new(&[]).is_empty());
}

#[test]
fn neighbor_cache_follows_events() {
    let n = |addr: [u8; 4], state| Neighbor {
        ifindex: 2,
        addr: addr.into(),
        mac: Some(MAC2),
        state,
    };
    let mut c = NeighborCache::from_dump(&[
        n([10, 9, 0, 2], nud::REACHABLE),
        n([10, 9, 0, 3], nud::FAILED),
    ]);
    assert_eq!(c.len(), 1);
    assert_eq!(c.get(2, Ipv4Addr::new(10, 9, 0, 2)), Some(MAC2));
    assert_eq!(
        c.get(3, Ipv4Addr::new(10, 9, 0, 2)),
        None,
        "keyed by interface too"
    );
    c.apply(&Event::NeighborAdded(n([10, 9, 0, 3], nud::STALE)));
    assert_eq!(c.len(), 2);
    c.apply(&Event::NeighborAdded(n([10, 9, 0, 2], nud::FAILED)));
    assert_eq!(c.get(2, Ipv4Addr::new(10, 9, 0, 2)), None, "FAILED evicts");
    c.apply(&Event::NeighborRemoved(n([10, 9, 0, 3], nud::STALE)));
    c.apply(&Event::RouteAdded(route([0; 4], 0, None, 2)));
    assert!(c.is_empty());
}

// --- the real kernel, in throwaway namespaces -----------------------------------

/// A network namespace that exists for the guard's lifetime (`ip netns del` on drop).
pub(super) struct Netns {
    pub(super) name: String,
}

impl Netns {
    /// Creates `qn-nl-<pid>-<tag>`; `None` (test skipped) when not root.
    pub(super) fn new(tag: &str) -> Option<Self> {
        if !crate::host::is_root() {
            eprintln!("skipped: kernel netlink tests need root");
            return None;
        }
        let name = format!("qn-nl-{}-{tag}", std::process::id());
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        run_ip(&["netns", "add", &name]);
        Some(Netns { name })
    }

    /// Runs `ip -n NAME ARGS...`, panicking with ip's stderr on failure.
    pub(super) fn ip(&self, args: &str) {
        ip_in(&self.name, args);
    }

    /// Two namespaces joined by a veth: `vethA` (up) in the first, `vethB`
    /// (MAC 02:00:00:00:00:03, up) in the second; `None` when not root.
    pub(super) fn linked_pair(tag: &str) -> Option<(Self, Self)> {
        let ns = Netns::new(tag)?;
        let peer = Netns::new(&format!("{tag}peer"))?;
        ns.ip(&format!(
            "link add vethA type veth peer name vethB netns {}",
            peer.name
        ));
        ns.ip("link set vethA up");
        peer.ip("link set vethB address 02:00:00:00:00:03 up");
        Some((ns, peer))
    }

    /// Runs `f` on a thread that has joined this namespace; re-raises its panic.
    pub(super) fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        crate::testnet::join(crate::testnet::spawn_in(&self.name, f))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Runs `ip -n NS ARGS...` (ARGS split on whitespace), panicking with ip's stderr on failure.
pub(super) fn ip_in(ns: &str, args: &str) {
    let mut full = vec!["-n", ns];
    full.extend(args.split_whitespace());
    run_ip(&full);
}

fn run_ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Receives events until `pred` matches one or `limit` passes; returns all seen.
pub(super) fn events_until(
    nl: &mut Netlink,
    limit: Duration,
    pred: impl Fn(&Event) -> bool,
) -> (Vec<Event>, bool) {
    let end = Instant::now() + limit;
    let mut seen = Vec::new();
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        let batch = nl.recv_events(left).expect("recv_events");
        let hit = batch.iter().any(&pred);
        seen.extend(batch);
        if hit {
            return (seen, true);
        }
    }
    (seen, false)
}

#[test]
fn kernel_dumps_routes_neighbors_and_interface_facts() {
    let Some(ns) = Netns::new("dump") else { return };
    ns.ip("link add vethA type veth peer name vethB");
    ns.ip("link set vethA address 02:00:00:00:00:01 mtu 1400 up");
    ns.ip("link set vethB up");
    ns.ip("addr add 10.9.0.1/24 dev vethA");
    ns.ip("neigh add 10.9.0.2 lladdr 02:00:00:00:00:02 dev vethA nud permanent");
    ns.ip("route add 198.51.100.0/24 via 10.9.0.2");
    ns.ip("route add blackhole 203.0.113.0/24");

    let (idx, neighbors, routes, addrs, mac, mtu, lo_mac, missing) = ns.run(|| {
        let idx = if_index("vethA").unwrap();
        let mut nl = Netlink::open().unwrap();
        let neighbors = nl.dump_neighbors().unwrap();
        let routes = nl.dump_routes().unwrap();
        (
            idx,
            neighbors,
            routes,
            if_ipv4_addrs(idx).unwrap(),
            if_mac("vethA").unwrap(),
            if_mtu("vethA").unwrap(),
            if_mac("lo").unwrap_err(),
            if_index("nope0").unwrap_err(),
        )
    });
    let ip = Ipv4Addr::new;
    let n = Neighbor {
        ifindex: idx,
        addr: ip(10, 9, 0, 2),
        mac: Some(MAC2),
        state: nud::PERMANENT,
    };
    assert!(neighbors.contains(&n), "{neighbors:?}");
    assert_eq!(
        NeighborCache::from_dump(&neighbors).get(idx, ip(10, 9, 0, 2)),
        Some(MAC2)
    );

    let via = Route {
        gateway: Some(ip(10, 9, 0, 2)),
        ..route([198, 51, 100, 0], 24, None, idx)
    };
    let connected = Route {
        prefsrc: Some(A),
        ..route([10, 9, 0, 0], 24, None, idx)
    };
    let local = Route {
        prefsrc: Some(A),
        table: RT_TABLE_LOCAL,
        ..route([10, 9, 0, 1], 32, None, idx)
    };
    let blackhole = route([203, 0, 113, 0], 24, None, 0);
    for r in [via, connected, local, blackhole] {
        assert!(routes.contains(&r), "{r:?} not in {routes:#?}");
    }
    let table = RouteTable::new(&routes);
    assert_eq!(
        table.lookup(ip(198, 51, 100, 7)),
        Some((idx, ip(10, 9, 0, 2)))
    );
    assert_eq!(table.lookup(ip(10, 9, 0, 5)), Some((idx, ip(10, 9, 0, 5))));
    assert_eq!(table.lookup(ip(203, 0, 113, 1)), None);
    assert_eq!(
        table.lookup(ip(192, 0, 2, 1)),
        None,
        "no default route in a fresh namespace"
    );

    assert_eq!(addrs, [(A, 24)]);
    assert_eq!(mac, [2, 0, 0, 0, 0, 1]);
    assert_eq!(mtu, 1400);
    assert_eq!(lo_mac.kind(), io::ErrorKind::Unsupported, "{lo_mac}");
    assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    assert!(
        missing.to_string().contains("no such interface: nope0"),
        "{missing}"
    );
    assert_eq!(
        if_index("").unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    assert_eq!(
        if_index("a-name-far-too-long").unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
}

#[test]
fn kernel_events_and_neighbor_probes() {
    let Some((ns, peer)) = Netns::linked_pair("ev") else {
        return;
    };
    ns.ip("addr add 10.9.0.1/24 dev vethA");
    peer.ip("addr add 10.9.0.3/24 dev vethB");
    let ns_name = ns.name.clone();

    let r = ns.run(move || {
        let ip_n = |args: &str| ip_in(&ns_name, args);
        let idx = if_index("vethA").unwrap();
        let mut sub = Netlink::subscribe().unwrap();
        let mut req = Netlink::open().unwrap();
        let secs = Duration::from_secs;

        ip_n("neigh add 10.9.0.2 lladdr 02:00:00:00:00:02 dev vethA nud permanent");
        let (_, neigh_added) = events_until(&mut sub, secs(5), |e| {
            matches!(e, Event::NeighborAdded(n) if n.addr == Ipv4Addr::new(10, 9, 0, 2) && n.mac == Some(MAC2))
        });
        ip_n("route add 203.0.113.0/24 via 10.9.0.2");
        let (_, route_added) = events_until(&mut sub, secs(5), |e| {
            matches!(e, Event::RouteAdded(r) if r.dst == Ipv4Addr::new(203, 0, 113, 0)
                && r.gateway == Some(Ipv4Addr::new(10, 9, 0, 2)) && r.table == RT_TABLE_MAIN)
        });
        ip_n("neigh del 10.9.0.2 dev vethA");
        let (_, neigh_removed) = events_until(&mut sub, secs(5), |e| {
            matches!(e, Event::NeighborRemoved(n) if n.addr == Ipv4Addr::new(10, 9, 0, 2))
        });
        // Deleting the neighbour did not take the route with it; deleting the route does.
        ip_n("route del 203.0.113.0/24");
        let (_, route_removed) = events_until(&mut sub, secs(5), |e| {
            matches!(e, Event::RouteRemoved(r) if r.dst == Ipv4Addr::new(203, 0, 113, 0))
        });

        // A live peer: the kernel ARPs and the entry becomes REACHABLE with its MAC.
        let live = Ipv4Addr::new(10, 9, 0, 3);
        req.probe_neighbor(idx, live).unwrap();
        let (live_events, resolved) = events_until(&mut sub, secs(5), |e| {
            matches!(e, Event::NeighborAdded(n) if n.addr == live && n.is_usable())
        });
        let live_dump = req.dump_neighbors().unwrap().into_iter().find(|n| n.addr == live);

        // Nobody home: INCOMPLETE at once, FAILED after the solicitations time out.
        let dead = Ipv4Addr::new(10, 9, 0, 99);
        req.probe_neighbor(idx, dead).unwrap();
        let dead_dump = req.dump_neighbors().unwrap().into_iter().find(|n| n.addr == dead);
        let (dead_events, failed) = events_until(&mut sub, secs(8), |e| {
            matches!(e, Event::NeighborAdded(n) if n.addr == dead && n.state == nud::FAILED)
        });
        let bad_index = req.probe_neighbor(9999, dead).unwrap_err();
        (
            [neigh_added, route_added, neigh_removed, route_removed, resolved, failed],
            live_events,
            live_dump,
            dead_dump,
            dead_events,
            bad_index,
        )
    });
    let (seen, live_events, live_dump, dead_dump, dead_events, bad_index) = r;
    assert_eq!(
        seen[..4],
        [true; 4],
        "neigh add, route add, neigh del, route del events"
    );
    assert!(seen[4], "probe of a live peer resolved: {live_events:?}");
    let live_dump = live_dump.expect("resolved neighbour in the dump");
    assert_eq!(live_dump.mac, Some([2, 0, 0, 0, 0, 3]));
    assert!(live_dump.is_usable(), "{live_dump:?}");
    let dead_dump = dead_dump.expect("probe creates an entry for an unanswered address");
    assert_eq!(dead_dump.state, nud::INCOMPLETE, "{dead_dump:?}");
    assert_eq!(dead_dump.mac, None);
    assert!(seen[5], "unanswered probe ends FAILED: {dead_events:?}");
    assert_eq!(bad_index.raw_os_error(), Some(libc::ENODEV), "{bad_index}");
}

#[test]
fn kernel_event_overrun_reports_events_lost() {
    let Some(ns) = Netns::new("nobufs") else {
        return;
    };
    ns.ip("link add vethA type veth peer name vethB");
    ns.ip("addr add 10.9.0.1/24 dev vethA");
    ns.ip("link set vethA up");
    let ns_name = ns.name.clone();
    let (first, after) = ns.run(move || {
        let mut sub = Netlink::subscribe().unwrap();
        // The kernel rounds the buffer up to its minimum (a few KiB).
        let tiny: libc::c_int = 1;
        // SAFETY: `tiny` is a live c_int and we pass its size; the fd is open.
        let r = unsafe {
            libc::setsockopt(
                sub.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&tiny as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0);
        let mut batch = Command::new("ip")
            .args(["-n", &ns_name, "-batch", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = batch.stdin.take().unwrap();
        for i in 1..=200 {
            writeln!(
                stdin,
                "neigh add 10.9.0.{} lladdr 02:00:00:00:01:{:02x} dev vethA",
                i + 20,
                i % 256
            )
            .unwrap();
        }
        drop(stdin);
        assert!(batch.wait().unwrap().success());
        let first = sub.recv_events(Duration::from_secs(1));
        // After the overrun the socket keeps working (and a dump recovers the state).
        let after = sub.recv_events(Duration::from_millis(100)).map(|e| e.len());
        let dumped = Netlink::open().unwrap().dump_neighbors().unwrap().len();
        assert!(dumped >= 200, "{dumped}");
        (first, after)
    });
    let e = first.expect_err("200 events into a minimal buffer must overrun");
    assert!(is_events_lost(&e), "{e}");
    assert!(after.is_ok(), "{after:?}");
}
