//! NAT64 behaviour: packets built by hand, checked field by field, every checksum
//! recomputed from scratch.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

use proptest::prelude::*;

use super::*;
use crate::testpkt::*;
use crate::HEADROOM;

pub(super) const HOST_A: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x10);
pub(super) const HOST_B: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x11);
pub(super) const SRV4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
pub(super) const POOL: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);

fn srv6() -> Ipv6Addr {
    "2001:db8:64::c633:6407".parse().unwrap()
}

pub(super) fn embed(a: Ipv4Addr) -> Ipv6Addr {
    let p: Pref64 = "2001:db8:64::/96".parse().unwrap();
    p.embed(a)
}

pub(super) fn config() -> Nat64Config {
    Nat64Config {
        pref64: "2001:db8:64::/96".parse().unwrap(),
        pool4: vec!["203.0.113.1/32".parse().unwrap()],
        ..Nat64Config::default()
    }
}

pub(super) fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

/// Runs one packet; returns the emitted bytes and whether it was a hairpin.
pub(super) fn run(
    n: &mut Nat64,
    now: u64,
    dir: Direction,
    pkt: &[u8],
) -> Result<(Vec<u8>, bool), DropReason> {
    let mut b = with_room(pkt, HEADROOM);
    let (p, hairpin) = match n.process(t(now), dir, &mut b, HEADROOM, pkt.len()) {
        Emit::Forward { start, len } => (b[start..start + len].to_vec(), false),
        Emit::Hairpin { start, len } => (b[start..start + len].to_vec(), true),
        e => return Err(e.drop_reason().expect("no output but the packet")),
    };
    assert_no_host_id(&p);
    Ok((p, hairpin))
}

/// Every packet a NAT64 test sees leave is held to this: no IPv4 address field, outer or
/// in an ICMP error's quote, and no IPv4 address embedded in a Pref64 IPv6 address, lies
/// in 240.0.0.0/4, the host ids that must never reach the wire.
pub(super) fn assert_no_host_id(p: &[u8]) {
    let v4 = |a: &[u8]| Ipv4Addr::new(a[0], a[1], a[2], a[3]);
    let pref: Pref64 = "2001:db8:64::/96".parse().unwrap();
    let check6 = |a: &[u8]| {
        let a = Ipv6Addr::from(<[u8; 16]>::try_from(a).unwrap());
        if let Some(x) = pref.extract(a) {
            assert!(!HostTable::is_host_id(x), "host id {x} embedded in {a}");
        }
    };
    match p.first().map(|b| b >> 4) {
        Some(4) if p.len() >= 20 => {
            for a in [&p[12..16], &p[16..20]] {
                assert!(
                    !HostTable::is_host_id(v4(a)),
                    "host id {} on the wire",
                    v4(a)
                );
            }
            let ihl = usize::from(p[0] & 15) * 4;
            let is_error = p[9] == ICMP && p.get(ihl).is_some_and(|t| matches!(t, 3 | 11 | 12));
            if let Some(q) = p.get(ihl + 8..ihl + 28).filter(|_| is_error) {
                for a in [&q[12..16], &q[16..20]] {
                    assert!(!HostTable::is_host_id(v4(a)), "host id {} quoted", v4(a));
                }
            }
        }
        Some(6) if p.len() >= 40 => {
            check6(&p[8..24]);
            check6(&p[24..40]);
            if p[6] == ICMP6 && p.get(40).is_some_and(|t| *t < 128) {
                if let Some(q) = p.get(48..88) {
                    check6(&q[8..24]);
                    check6(&q[24..40]);
                }
            }
        }
        _ => {}
    }
}

fn out(n: &mut Nat64, now: u64, pkt: &[u8]) -> Result<Vec<u8>, DropReason> {
    run(n, now, Direction::Outbound, pkt).map(|(p, hairpin)| {
        assert!(!hairpin);
        p
    })
}

fn inb(n: &mut Nat64, now: u64, pkt: &[u8]) -> Result<Vec<u8>, DropReason> {
    run(n, now, Direction::Inbound, pkt).map(|(p, _)| p)
}

fn udp6(src: Ipv6Addr, sport: u16, dst: Ipv6Addr, dport: u16) -> Vec<u8> {
    let mut p = ipv6(UDP, src, dst, 64, &udp(sport, dport, b"hello nat64"));
    fill_l4_csum(&mut p);
    p
}

fn udp4(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16) -> Vec<u8> {
    let mut p = ipv4(UDP, src, dst, 64, &udp(sport, dport, b"hello back"));
    fill_l4_csum(&mut p);
    p
}

#[test]
fn udp_out_and_back() {
    let mut n = Nat64::new(config()).unwrap();
    let o = out(&mut n, 1, &udp6(HOST_A, 5000, srv6(), 53)).unwrap();
    assert_eq!(o[0] >> 4, 4);
    assert_eq!(v4_addrs(&o), (POOL, SRV4));
    assert_eq!(ports(&o), (5000, 53), "port preserved");
    assert_eq!(o[8], 63, "TTL = hop limit - 1");
    assert_checksums(&o);

    let r = inb(&mut n, 2, &udp4(SRV4, 53, POOL, 5000)).unwrap();
    assert_eq!(r[0] >> 4, 6);
    assert_eq!(v6_addrs(&r), (srv6(), HOST_A));
    assert_eq!(ports(&r), (53, 5000));
    assert_checksums(&r);
    assert_eq!(n.shared().session_count(), 1);
    assert_eq!(n.shared().host_count(), 1);
    let s = n.shared().sessions();
    assert_eq!(
        s,
        vec![(
            SocketAddrV6::new(HOST_A, 5000, 0, 0),
            SocketAddrV4::new(POOL, 5000),
            SocketAddrV4::new(SRV4, 53)
        )]
    );
}

#[test]
fn unsolicited_inbound_and_unmapped_destinations_are_dropped() {
    let mut n = Nat64::new(config()).unwrap();
    assert_eq!(
        inb(&mut n, 1, &udp4(SRV4, 53, POOL, 5000)),
        Err(DropReason::NoMapping)
    );
    let stray: Ipv6Addr = "2001:db8:99::1".parse().unwrap();
    assert_eq!(
        out(&mut n, 1, &udp6(HOST_A, 5000, stray, 53)),
        Err(DropReason::NoAddressMapping)
    );
    // A Pref64 address embedding a host id (240.0.0.0/4) is no server.
    assert_eq!(
        out(
            &mut n,
            1,
            &udp6(HOST_A, 5000, embed(Ipv4Addr::new(240, 0, 0, 1)), 53)
        ),
        Err(DropReason::NoAddressMapping)
    );
    let c = n.counters();
    assert_eq!(c.dropped(DropReason::NoMapping), 1);
    assert_eq!(c.dropped(DropReason::NoAddressMapping), 2);
    assert_eq!(c.forwarded, 0);
}

#[test]
fn two_hosts_same_port_get_distinct_public_endpoints_and_mapping_is_endpoint_independent() {
    let mut n = Nat64::new(config()).unwrap();
    let a = out(&mut n, 1, &udp6(HOST_A, 5000, srv6(), 53)).unwrap();
    let b = out(&mut n, 1, &udp6(HOST_B, 5000, srv6(), 53)).unwrap();
    assert_ne!(ports(&a).0, ports(&b).0);
    let other = embed(Ipv4Addr::new(198, 51, 100, 8));
    let a2 = out(&mut n, 1, &udp6(HOST_A, 5000, other, 53)).unwrap();
    assert_eq!(
        ports(&a2).0,
        ports(&a).0,
        "EIM: same public port to any server"
    );
    // Replies reach the right host.
    let rb = inb(&mut n, 2, &udp4(SRV4, 53, POOL, ports(&b).0)).unwrap();
    assert_eq!(v6_addrs(&rb).1, HOST_B);
    assert_eq!(ports(&rb).1, 5000);
}

#[test]
fn tcp_and_icmp_echo() {
    let mut n = Nat64::new(config()).unwrap();
    let mut syn = ipv6(TCP, HOST_A, srv6(), 64, &tcp(40000, 80, 0x02));
    fill_l4_csum(&mut syn);
    let o = out(&mut n, 1, &syn).unwrap();
    assert_eq!((o[9], v4_addrs(&o).0), (TCP, POOL));
    assert_checksums(&o);
    let mut synack = ipv4(TCP, SRV4, POOL, 60, &tcp(80, ports(&o).0, 0x12));
    fill_l4_csum(&mut synack);
    let r = inb(&mut n, 1, &synack).unwrap();
    assert_eq!(v6_addrs(&r), (srv6(), HOST_A));
    assert_eq!(r[7], 59);
    assert_checksums(&r);

    let mut ping = ipv6(ICMP6, HOST_A, srv6(), 64, &echo(128, 0x77, 1));
    fill_l4_csum(&mut ping);
    let o = out(&mut n, 2, &ping).unwrap();
    assert_eq!((o[9], o[20]), (ICMP, 8), "ICMPv4 echo request");
    assert_checksums(&o);
    let id = ports(&o).0;
    let mut pong = ipv4(ICMP, SRV4, POOL, 60, &echo(0, id, 1));
    fill_l4_csum(&mut pong);
    let r = inb(&mut n, 2, &pong).unwrap();
    assert_eq!((r[6], r[40]), (ICMP6, 129), "ICMPv6 echo reply");
    assert_eq!(ports(&r).0, 0x77, "identifier restored");
    assert_checksums(&r);
}

#[test]
fn icmpv4_error_reaches_the_ipv6_host_with_its_quote_translated() {
    let mut n = Nat64::new(config()).unwrap();
    let o = out(&mut n, 1, &udp6(HOST_A, 5000, srv6(), 53)).unwrap();
    // The server says port unreachable, quoting what it received.
    let mut body = vec![3, 3, 0, 0, 0, 0, 0, 0];
    body.extend_from_slice(&o);
    let mut err = ipv4(ICMP, SRV4, POOL, 60, &body);
    fill_l4_csum(&mut err);
    let r = inb(&mut n, 2, &err).unwrap();
    assert_eq!(
        (r[6], r[40], r[41]),
        (ICMP6, 1, 4),
        "ICMPv6 port unreachable"
    );
    assert_eq!(v6_addrs(&r), (srv6(), HOST_A));
    let quote = &r[48..];
    assert_eq!(
        v6_addrs(quote),
        (HOST_A, srv6()),
        "quote as the host sent it"
    );
    assert_eq!(ports(quote), (5000, 53));
    assert_checksums(&r);
    assert_eq!(n.counters().icmp_errors_translated, 1);
}

#[test]
fn icmpv6_error_from_the_host_reaches_the_ipv4_server() {
    let mut n = Nat64::new(config()).unwrap();
    let o = out(&mut n, 1, &udp6(HOST_A, 5000, srv6(), 53)).unwrap();
    let reply = inb(&mut n, 2, &udp4(SRV4, 53, POOL, ports(&o).0)).unwrap();
    // The host answers the reply with ICMPv6 port unreachable quoting it.
    let mut body = vec![1, 4, 0, 0, 0, 0, 0, 0];
    body.extend_from_slice(&reply);
    let mut err = ipv6(ICMP6, HOST_A, srv6(), 64, &body);
    fill_l4_csum(&mut err);
    let e = out(&mut n, 3, &err).unwrap();
    assert_eq!((e[9], e[20], e[21]), (ICMP, 3, 3));
    assert_eq!(v4_addrs(&e), (POOL, SRV4));
    assert_eq!(v4_addrs(&e[28..]), (SRV4, POOL), "quote in public terms");
    assert_eq!(ports(&e[28..]), (53, ports(&o).0));
    assert_checksums(&e);
}

#[test]
fn hairpin_between_two_ipv6_hosts() {
    let mut n = Nat64::new(config()).unwrap();
    // B talks to a server first, so it has a public endpoint.
    let b = out(&mut n, 1, &udp6(HOST_B, 6000, srv6(), 53)).unwrap();
    let b_pub = ports(&b).0;
    // A reaches B at B's public endpoint, written as a Pref64 address.
    let (h, hairpin) = run(
        &mut n,
        2,
        Direction::Outbound,
        &udp6(HOST_A, 5000, embed(POOL), b_pub),
    )
    .unwrap();
    assert!(hairpin);
    assert_eq!(h[0] >> 4, 6);
    assert_eq!(v6_addrs(&h), (embed(POOL), HOST_B));
    assert_eq!(ports(&h).1, 6000);
    assert_eq!(h[7], 63, "one hop, one decrement");
    assert_checksums(&h);
    assert_eq!(n.counters().hairpinned, 1);
}

/// A static binding publishes a server: reachable from any IPv4 client under every
/// filtering behaviour (filtering is about dynamic bindings), also from a second client
/// after the server has answered the first.
#[test]
fn static_binding_makes_an_ipv6_server_reachable() {
    for filtering in [
        crate::config::Filtering::EndpointIndependent,
        crate::config::Filtering::AddressDependent,
    ] {
        let mut cfg = config();
        cfg.filtering = filtering;
        cfg.static_bindings.push(Nat64Static {
            protocol: crate::config::L4Proto::Tcp,
            public: SocketAddrV4::new(POOL, 8080),
            inside: SocketAddrV6::new(HOST_B, 80, 0, 0),
        });
        let mut n = Nat64::new(cfg).unwrap();
        let client = Ipv4Addr::new(198, 51, 100, 50);
        let mut syn = ipv4(TCP, client, POOL, 60, &tcp(33000, 8080, 0x02));
        fill_l4_csum(&mut syn);
        let r = inb(&mut n, 1, &syn).unwrap();
        assert_eq!(v6_addrs(&r), (embed(client), HOST_B));
        assert_eq!(ports(&r), (33000, 80));
        assert_checksums(&r);
        // The server's answer goes back out from the public endpoint.
        let mut synack = ipv6(TCP, HOST_B, embed(client), 64, &tcp(80, 33000, 0x12));
        fill_l4_csum(&mut synack);
        let o = out(&mut n, 1, &synack).unwrap();
        assert_eq!(v4_addrs(&o), (POOL, client));
        assert_eq!(ports(&o), (8080, 33000));
        // A client the server has never sent to is let in too.
        let other = Ipv4Addr::new(192, 0, 2, 77);
        let mut syn = ipv4(TCP, other, POOL, 60, &tcp(41000, 8080, 0x02));
        fill_l4_csum(&mut syn);
        let r = inb(&mut n, 2, &syn).unwrap_or_else(|e| panic!("{filtering:?}: {e:?}"));
        assert_eq!(v6_addrs(&r), (embed(other), HOST_B));
        // The pinned host outlives every sweep.
        n.handle_timeout(t(100_000));
        n.handle_timeout(t(100_100));
        assert_eq!(n.shared().host_count(), 1);
    }
}

#[test]
fn idle_hosts_bindings_and_sessions_all_go() {
    let mut n = Nat64::new(config()).unwrap();
    for (i, h) in [HOST_A, HOST_B].into_iter().enumerate() {
        out(&mut n, 1, &udp6(h, 5000 + i as u16, srv6(), 53)).unwrap();
    }
    assert_eq!(n.shared().host_count(), 2);
    n.handle_timeout(t(200));
    assert_eq!(n.shared().host_count(), 2, "sessions alive: hosts stay");
    n.handle_timeout(t(302)); // UDP 300 s: sessions and bindings go
    assert_eq!(n.shared().session_count(), 0);
    assert_eq!(n.shared().binding_count(), 0);
    n.handle_timeout(t(302 + HOST_GRACE.as_secs() + 1));
    assert_eq!(n.shared().host_count(), 0);
    // Malformed traffic that allocated a host id and nothing else is collected too.
    let mut junk = udp6(HOST_A, 1, srv6(), 2);
    junk[4..6].copy_from_slice(&1000u16.to_be_bytes()); // payload length past the end
    assert!(out(&mut n, 400, &junk).is_err());
    n.handle_timeout(t(400 + HOST_GRACE.as_secs() + 1));
    n.handle_timeout(t(400 + HOST_GRACE.as_secs() + 2));
    assert_eq!(n.shared().host_count(), 0);
    // And a new flow works afterwards.
    assert!(out(&mut n, 500, &udp6(HOST_A, 5000, srv6(), 53)).is_ok());
}

#[test]
fn ttl_exhausted_is_dropped_with_its_reason() {
    let mut n = Nat64::new(config()).unwrap();
    let mut p = udp6(HOST_A, 5000, srv6(), 53);
    p[7] = 1;
    assert_eq!(out(&mut n, 1, &p), Err(DropReason::TtlExpired));
}

proptest! {
    #[test]
    fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..160), inbound in any::<bool>()) {
        let mut n = Nat64::new(config()).unwrap();
        let _ = out(&mut n, 1, &udp6(HOST_A, 5000, srv6(), 53));
        let mut pkt = bytes;
        if let Some(b) = pkt.first_mut() {
            *b = (*b & 0x0f) | if inbound { 0x40 } else { 0x60 };
        }
        let dir = if inbound { Direction::Inbound } else { Direction::Outbound };
        let _ = run(&mut n, 2, dir, &pkt);
    }

    /// Random hosts and ports: every reply comes back to the host and port that sent.
    #[test]
    fn replies_restore_the_inside_endpoint(hosts in proptest::collection::vec((any::<u16>(), 1024u16..65535), 1..20)) {
        let mut n = Nat64::new(config()).unwrap();
        for (h, port) in hosts {
            let host = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 1, h);
            let o = out(&mut n, 1, &udp6(host, port, srv6(), 53)).unwrap();
            assert_checksums(&o);
            let r = inb(&mut n, 1, &udp4(SRV4, 53, POOL, ports(&o).0)).unwrap();
            prop_assert_eq!(v6_addrs(&r).1, host);
            prop_assert_eq!(ports(&r).1, port);
            assert_checksums(&r);
        }
    }
}

/// The established-flow path (one SIIT pass and a port patch) produces exactly what the
/// full path (SIIT to the host id, then NAT44) produced for the flow's first packet, in
/// both directions, also when the public port differs from the inside one.
#[test]
fn fast_path_equals_the_full_path() {
    let mut n = Nat64::new(config()).unwrap();
    // A takes port 5000 first, so B's 5000 is mapped to another public port.
    out(&mut n, 1, &udp6(HOST_A, 5000, srv6(), 53)).unwrap();
    for (host, proto) in [(HOST_B, UDP), (HOST_B, TCP)] {
        let mut pkt = if proto == UDP {
            udp6(host, 5000, srv6(), 53)
        } else {
            let mut p = ipv6(TCP, host, srv6(), 64, &tcp(5000, 80, 0x02));
            fill_l4_csum(&mut p);
            p
        };
        // The IPv4 identification is the translator's choice per packet (RFC 7915 §5.1);
        // compare everything else.
        let no_id = |mut p: Vec<u8>| {
            assert_checksums(&p);
            p[4..6].fill(0);
            p[10..12].fill(0);
            p
        };
        let first = out(&mut n, 2, &pkt).unwrap();
        let second = out(&mut n, 3, &pkt).unwrap();
        assert_eq!(
            no_id(first),
            no_id(second.clone()),
            "outbound, proto {proto}"
        );
        if proto == UDP {
            assert_ne!(
                ports(&second).0,
                5000,
                "public port differs from the inside one"
            );
        }
        assert_checksums(&second);
        let public = ports(&second).0;
        let (sp, dp) = if proto == UDP {
            (53, public)
        } else {
            (80, public)
        };
        let mut reply = if proto == UDP {
            udp4(SRV4, sp, POOL, dp)
        } else {
            let mut r = ipv4(TCP, SRV4, POOL, 60, &tcp(sp, dp, 0x12));
            fill_l4_csum(&mut r);
            r
        };
        let r1 = inb(&mut n, 4, &reply).unwrap();
        let r2 = inb(&mut n, 5, &reply).unwrap();
        assert_eq!(r1, r2, "inbound, proto {proto}");
        assert_eq!(v6_addrs(&r2).1, host);
        assert_eq!(ports(&r2).1, 5000);
        assert_checksums(&r2);
        pkt.clear();
        reply.clear();
    }
}

/// A UDP datagram of `n` payload bytes over IPv6 or IPv4, checksum filled.
fn big_udp6(src: Ipv6Addr, sport: u16, dst: Ipv6Addr, dport: u16, n: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..n).map(|i| (i * 13 + 1) as u8).collect();
    let mut p = ipv6(UDP, src, dst, 64, &udp(sport, dport, &payload));
    fill_l4_csum(&mut p);
    p
}

fn big_udp4(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16, n: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..n).map(|i| (i * 5 + 2) as u8).collect();
    let mut p = ipv4(UDP, src, dst, 64, &udp(sport, dport, &payload));
    fill_l4_csum(&mut p);
    p
}

/// RFC 6146 §3.4/§3.5 with RFC 7915's fragment translation: IPv6 fragments from the
/// inside leave as IPv4 fragments from the pool (SIIT turns the Fragment header into
/// the IPv4 fields, NAT44's fragment records give the later ones their addresses), and
/// IPv4 fragments of the reply come back as IPv6 fragments to the host.
#[test]
fn ipv6_fragments_out_and_ipv4_fragments_back() {
    let mut n = Nat64::new(config()).unwrap();
    let d = big_udp6(HOST_A, 5000, srv6(), 53, 3000);
    let frags = fragment_v6(&d, 0x0001_2345, &[1232, 1232]);
    assert_eq!(frags.len(), 3);
    let outs: Vec<Vec<u8>> = frags.iter().map(|f| out(&mut n, 1, f).unwrap()).collect();
    for o in &outs {
        assert_eq!(o[0], 0x45);
        assert_eq!(v4_addrs(o), (POOL, SRV4));
        assert_eq!(
            u16::from_be_bytes([o[4], o[5]]),
            0x2345,
            "low 16 bits of the id"
        );
        assert_eq!(o[8], 63);
    }
    let whole = reassemble_v4(&outs);
    assert_checksums(&whole);
    assert_eq!(ports(&whole), (5000, 53));
    assert_eq!(whole[28..], d[48..], "payload");

    // The reply in IPv4 fragments, the last before the middle one.
    let r = big_udp4(SRV4, 53, POOL, 5000, 2600);
    let mut rf = fragment_v4(&r, 0x7777, &[1000, 1000]);
    rf.swap(1, 2);
    let back: Vec<Vec<u8>> = rf.iter().map(|f| inb(&mut n, 2, f).unwrap()).collect();
    for b in &back {
        assert_eq!(b[0] >> 4, 6);
        assert_eq!(v6_addrs(b), (srv6(), HOST_A));
        assert_eq!(b[47], 0x77, "identification carried");
    }
    let whole = reassemble_v6(&back);
    assert_checksums(&whole);
    assert_eq!(ports(&whole), (53, 5000));
    assert_eq!(n.counters().fragments_translated, 6);
    assert_eq!(n.shared().nat.fragment_count(), 0);
}

/// Sends `frags` travelling `dir` in the order `order`; returns what left, each
/// fragment's own translation followed by what the worker sends after it (`poll`).
fn in_order(n: &mut Nat64, dir: Direction, frags: &[Vec<u8>], order: &[usize]) -> Vec<Vec<u8>> {
    let mut sent = Vec::new();
    for &i in order {
        match run(n, 2, dir, &frags[i]) {
            Ok((p, _)) => sent.push(p),
            Err(r) => assert_eq!(r, DropReason::FragmentHeld, "fragment {i} of {order:?}"),
        }
        sent.extend(poll(n, 2));
    }
    sent
}

/// RFC 6146 §3.4/§3.5: fragments in any order, both ways. The later ones wait for the
/// first (held by NAT44, which sees them as IPv4), then follow it translated, the IPv6
/// ones with their hop limit taken once like the first's.
#[test]
fn fragments_before_their_first_are_held_and_follow_it_both_ways() {
    let mut n = Nat64::new(config()).unwrap();
    let d = big_udp6(HOST_A, 5000, srv6(), 53, 2400);
    let frags = fragment_v6(&d, 7, &[800, 800]);
    let outs = in_order(&mut n, Direction::Outbound, &frags, &[2, 1, 0]);
    assert_eq!(outs.len(), 3);
    let whole = reassemble_v4(&outs);
    assert_eq!(v4_addrs(&whole), (POOL, SRV4));
    assert_checksums(&whole);
    assert_eq!(whole[28..], d[48..], "payload");

    let r = big_udp4(SRV4, 53, POOL, ports(&whole).0, 2400);
    let rf = fragment_v4(&r, 8, &[800, 800]);
    let back = in_order(&mut n, Direction::Inbound, &rf, &[1, 2, 0]);
    assert_eq!(back.len(), 3);
    for b in &back {
        assert_eq!(b[0] >> 4, 6);
        assert_eq!(v6_addrs(b), (srv6(), HOST_A));
        assert_eq!(b[7], r[8] - 1, "hop limit one less than the TTL");
    }
    let whole = reassemble_v6(&back);
    assert_checksums(&whole);
    assert_eq!(ports(&whole), (53, 5000));
    assert_eq!(n.counters().dropped(DropReason::FragmentHeld), 4);
    assert_eq!(n.counters().forwarded, 6);
    assert_eq!(n.shared().nat.fragment_count(), 0);
}

#[test]
fn ipv6_later_fragment_before_the_first_is_dropped_when_nothing_may_be_held() {
    let mut n = Nat64::new(Nat64Config {
        fragment_hold_bytes: 0,
        ..config()
    })
    .unwrap();
    let frags = fragment_v6(&big_udp6(HOST_A, 5000, srv6(), 53, 2000), 7, &[1000]);
    assert_eq!(
        out(&mut n, 1, &frags[1]),
        Err(DropReason::FragmentOutOfOrder)
    );
    let inbound = fragment_v4(&big_udp4(SRV4, 53, POOL, 5000, 2000), 8, &[1000]);
    assert_eq!(
        inb(&mut n, 1, &inbound[1]),
        Err(DropReason::FragmentOutOfOrder)
    );
    assert_eq!(n.counters().dropped(DropReason::FragmentOutOfOrder), 2);
    // Then in order: through.
    for f in &frags {
        out(&mut n, 2, f).unwrap();
    }
}

/// Hairpinned fragments: host A to host B's public endpoint, back out as IPv6 fragments,
/// in order and in reverse (the later ones held, then hairpinned after the first with
/// the hop limit taken once).
#[test]
fn hairpinned_fragments() {
    let mut n = Nat64::new(config()).unwrap();
    // B opens 5001 first so A can reach it at POOL:5001.
    out(&mut n, 1, &udp6(HOST_B, 5001, srv6(), 53)).unwrap();
    for (ident, order) in [(99, [0, 1]), (100, [1, 0])] {
        let d = big_udp6(HOST_A, 5000, embed(POOL), 5001, 2000);
        let frags = fragment_v6(&d, ident, &[1000]);
        let back = in_order(&mut n, Direction::Outbound, &frags, &order);
        assert_eq!(back.len(), 2);
        for b in &back {
            assert_eq!(b[7], d[7] - 1, "hop limit taken once");
        }
        let whole = reassemble_v6(&back);
        assert_eq!(v6_addrs(&whole), (embed(POOL), HOST_B));
        assert_checksums(&whole);
    }
}

/// A hairpin never crosses the IPv4 link nor leaves by another IPv6 link than the one it
/// came in on: neither a low `ipv4_mtu` nor `lowest_ipv6_mtu` refuses or cuts it — a
/// 1400-byte datagram (DF in IPv4 terms) and 1480-byte fragments (no DF) are hairpinned
/// whole, where the same sizes to an IPv4 server are answered with Packet Too Big.
#[test]
fn hairpins_are_not_held_to_the_mtus_of_other_links() {
    let mut cfg = config();
    cfg.options.ipv4_mtu = 1300;
    let mut n = Nat64::new(cfg).unwrap();
    out(&mut n, 1, &udp6(HOST_B, 5001, srv6(), 53)).unwrap();
    let whole = big_udp6(HOST_A, 5000, embed(POOL), 5001, 1352);
    let (h, hairpin) = run(&mut n, 2, Direction::Outbound, &whole).unwrap();
    assert!(hairpin);
    assert_eq!(h.len(), whole.len());
    assert_checksums(&h);
    let d = big_udp6(HOST_A, 5002, embed(POOL), 5001, 2900);
    let frags = fragment_v6(&d, 77, &[1432]);
    assert!(frags[0].len() > 1280);
    let mut back = Vec::new();
    for f in &frags {
        let (p, hairpin) = run(&mut n, 3, Direction::Outbound, f).unwrap();
        assert!(hairpin);
        assert_eq!(p.len(), f.len(), "not cut");
        back.push(p);
    }
    assert_checksums(&reassemble_v6(&back));
    // The same whole datagram to an IPv4 server: too big for its 1300-byte link.
    let big = big_udp6(HOST_A, 5003, srv6(), 53, 1352);
    assert_eq!(out(&mut n, 4, &big), Err(DropReason::PacketTooBig));
}

/// IPv6 UDP with checksum zero (illegal, RFC 8200 §8.1) is dropped with its own reason on
/// the full path (a new flow) and on the one-pass fast path (an established flow), and
/// given a correct IPv4 checksum on both when `compute_ipv6_udp_zero_csum` is set.
#[test]
fn ipv6_udp_zero_checksum_dropped_on_both_paths_or_computed() {
    let zero = |sport: u16| {
        let mut p = udp6(HOST_A, sport, srv6(), 53);
        p[46] = 0;
        p[47] = 0;
        p
    };
    let mut n = Nat64::new(config()).unwrap();
    // Full path: no session yet.
    assert_eq!(
        out(&mut n, 1, &zero(5000)),
        Err(DropReason::Ipv6UdpZeroChecksum)
    );
    // Fast path: the flow is established by a packet with a checksum.
    out(&mut n, 1, &udp6(HOST_A, 5001, srv6(), 53)).unwrap();
    assert_eq!(
        out(&mut n, 2, &zero(5001)),
        Err(DropReason::Ipv6UdpZeroChecksum)
    );
    assert_eq!(n.counters().dropped(DropReason::Ipv6UdpZeroChecksum), 2);

    let mut cfg = config();
    cfg.options.compute_ipv6_udp_zero_csum = true;
    let mut n = Nat64::new(cfg).unwrap();
    for (now, sport) in [(1, 6000), (2, 6000)] {
        let o = out(&mut n, now, &zero(sport)).unwrap();
        assert_eq!(v4_addrs(&o), (POOL, SRV4));
        assert_ne!(&o[26..28], &[0, 0], "a checksum was computed");
        assert_checksums(&o);
    }
    assert_eq!(n.counters().forwarded, 2);
}

/// An RFC 4884 extension structure (version 2, one MPLS object) with its checksum.
fn rfc4884_ext() -> Vec<u8> {
    let mut e = vec![0x20, 0, 0, 0, 0, 8, 1, 1, 0x03, 0xe8, 0x11, 0x01];
    let c = wire::checksum::checksum(&e);
    e[2..4].copy_from_slice(&c.to_be_bytes());
    e
}

/// `quote` zero-padded to 128 bytes (RFC 4884's minimum original datagram field).
fn field128(quote: &[u8]) -> Vec<u8> {
    let mut f = quote.to_vec();
    f.resize(128, 0);
    f
}

/// RFC 7915 §4.2 / §5.2 through NAT64's stateful path: an ICMP error with an RFC 4884
/// extension about a session's packet keeps its extension, with the length attribute
/// rewritten for the translated quote, in both directions.
#[test]
fn icmp_errors_keep_rfc4884_extensions_through_nat64() {
    let mut n = Nat64::new(config()).unwrap();
    let o = out(&mut n, 1, &udp6(HOST_A, 5000, srv6(), 53)).unwrap();
    let ext = rfc4884_ext();
    // A router on the IPv4 side: Time Exceeded, length 32 words (128 bytes).
    let mut body = vec![11, 0, 0, 0, 0, 32, 0, 0];
    body.extend_from_slice(&field128(&o));
    body.extend_from_slice(&ext);
    let mut err = ipv4(ICMP, SRV4, POOL, 60, &body);
    fill_l4_csum(&mut err);
    let r = inb(&mut n, 2, &err).unwrap();
    assert_eq!((r[6], r[40], r[41]), (ICMP6, 3, 0));
    // 40 + 19 bytes of translated quote, padded to 128: 16 64-bit words.
    assert_eq!(r[44], 16);
    assert_eq!(&r[48 + 128..], &ext[..]);
    assert!(r[48 + 59..48 + 128].iter().all(|&b| b == 0));
    assert_eq!(v6_addrs(&r[48..]), (HOST_A, srv6()));
    assert_checksums(&r);

    // The host answers a reply with Destination Unreachable (port), 16 64-bit words.
    let reply = inb(&mut n, 3, &udp4(SRV4, 53, POOL, ports(&o).0)).unwrap();
    let mut body = vec![1, 4, 0, 0, 16, 0, 0, 0];
    body.extend_from_slice(&field128(&reply));
    body.extend_from_slice(&ext);
    let mut err = ipv6(ICMP6, HOST_A, srv6(), 64, &body);
    fill_l4_csum(&mut err);
    let e = out(&mut n, 4, &err).unwrap();
    assert_eq!((e[9], e[20], e[21]), (ICMP, 3, 3));
    // 20 + 18 bytes of translated quote, padded to 128: 32 32-bit words at octet 5.
    assert_eq!((e[24], e[25]), (0, 32));
    assert_eq!(&e[28 + 128..], &ext[..]);
    assert_eq!(v4_addrs(&e[28..]), (SRV4, POOL), "quote in public terms");
    assert_checksums(&e);
}

/// RFC 6146 §3.5.3, RFC 6791: an ICMPv6 error from an IPv6 router about a packet of a
/// session leaves from the session's pool4 address, never from a host id, and hairpinned
/// from the pool address under Pref64, never the router's raw IPv6 source.
#[test]
fn icmpv6_error_from_a_router_leaves_from_a_pool4_address() {
    let router: Ipv6Addr = "2001:db8:1::1".parse().unwrap();
    let mut n = Nat64::new(config()).unwrap();
    let o = out(&mut n, 1, &udp6(HOST_A, 5000, srv6(), 53)).unwrap();
    let reply = inb(&mut n, 2, &udp4(SRV4, 53, POOL, ports(&o).0)).unwrap();
    // RFC 4443 §3.1: Destination Unreachable, address unreachable (code 3), quoting it.
    let mut body = vec![1, 3, 0, 0, 0, 0, 0, 0];
    body.extend_from_slice(&reply);
    let mut err = ipv6(ICMP6, router, srv6(), 64, &body);
    fill_l4_csum(&mut err);
    let e = out(&mut n, 3, &err).unwrap();
    assert_eq!((e[9], e[20], e[21]), (ICMP, 3, 1), "host unreachable");
    assert_eq!(
        v4_addrs(&e),
        (POOL, SRV4),
        "from the session's pool4 address"
    );
    assert_eq!(v4_addrs(&e[28..]), (SRV4, POOL));
    assert_checksums(&e);
    assert_eq!(n.shared().host_count(), 1, "the router got no host id");

    // Hairpinned: B reaches A at A's public endpoint; the router refuses B's packet to A.
    let (h, hairpin) = run(
        &mut n,
        4,
        Direction::Outbound,
        &udp6(HOST_B, 6000, embed(POOL), ports(&o).0),
    )
    .unwrap();
    assert!(hairpin);
    let mut body = vec![1, 3, 0, 0, 0, 0, 0, 0];
    body.extend_from_slice(&h);
    let mut err = ipv6(ICMP6, router, embed(POOL), 64, &body);
    fill_l4_csum(&mut err);
    let (e, hairpin) = run(&mut n, 5, Direction::Outbound, &err).unwrap();
    assert!(hairpin);
    assert_eq!(
        (e[6], e[40], e[41]),
        (ICMP6, 1, 0),
        "RFC 7915 §4.2: code 1 -> 0"
    );
    assert_eq!(
        v6_addrs(&e),
        (embed(POOL), HOST_B),
        "from the pool address, not the router"
    );
    assert_eq!(
        v6_addrs(&e[48..]),
        (HOST_B, embed(POOL)),
        "B's packet quoted"
    );
    assert_checksums(&e);
}

/// RFC 6146 §3.5.3: an ICMPv4 echo request to the pool address and identifier of an
/// existing ICMP binding reaches the IPv6 host as an ICMPv6 echo request with its own
/// identifier, and the host's echo reply leaves with the public one; with address-dependent
/// filtering only from an address the host has queried.
#[test]
fn inbound_echo_request_through_an_icmp_binding() {
    for filtering in [
        crate::config::Filtering::EndpointIndependent,
        crate::config::Filtering::AddressDependent,
    ] {
        let mut n = Nat64::new(Nat64Config {
            filtering,
            ..config()
        })
        .unwrap();
        let mut ping = ipv6(ICMP6, HOST_A, srv6(), 64, &echo(128, 0x77, 1));
        fill_l4_csum(&mut ping);
        let id = ports(&out(&mut n, 1, &ping).unwrap()).0;

        let mut req = ipv4(ICMP, SRV4, POOL, 60, &echo(8, id, 9));
        fill_l4_csum(&mut req);
        let r = inb(&mut n, 2, &req).unwrap();
        assert_eq!((r[6], r[40]), (ICMP6, 128), "ICMPv6 echo request");
        assert_eq!(v6_addrs(&r), (srv6(), HOST_A));
        assert_eq!(
            u16::from_be_bytes([r[44], r[45]]),
            0x77,
            "host's identifier"
        );
        assert_checksums(&r);

        let mut pong = ipv6(ICMP6, HOST_A, srv6(), 64, &echo(129, 0x77, 9));
        fill_l4_csum(&mut pong);
        let o = out(&mut n, 3, &pong).unwrap();
        assert_eq!((o[9], o[20]), (ICMP, 0), "ICMPv4 echo reply");
        assert_eq!(v4_addrs(&o), (POOL, SRV4));
        assert_eq!(u16::from_be_bytes([o[24], o[25]]), id, "public identifier");
        assert_checksums(&o);

        // No binding for the identifier: no mapping.
        let mut stray = ipv4(ICMP, SRV4, POOL, 60, &echo(8, id.wrapping_add(1), 1));
        fill_l4_csum(&mut stray);
        assert_eq!(inb(&mut n, 4, &stray), Err(DropReason::NoMapping));
        // Another address: allowed only by endpoint-independent filtering.
        let other = Ipv4Addr::new(198, 51, 100, 99);
        let mut req = ipv4(ICMP, other, POOL, 60, &echo(8, id, 1));
        fill_l4_csum(&mut req);
        let got = inb(&mut n, 5, &req).map(|r| v6_addrs(&r).1);
        match filtering {
            crate::config::Filtering::AddressDependent => {
                assert_eq!(got, Err(DropReason::Filtered))
            }
            _ => assert_eq!(got, Ok(HOST_A)),
        }
    }
}

/// What the NAT64 sends at `now` with no packet arriving, each packet held to the
/// host-id scan.
pub(super) fn poll(n: &mut Nat64, now_ms: u64) -> Vec<Vec<u8>> {
    let mut o = crate::mode::Output::new();
    n.poll(Timestamp::from_nanos(now_ms * 1_000_000), &mut o);
    o.packets()
        .map(|p| {
            assert_no_host_id(p);
            p.to_vec()
        })
        .collect()
}

pub(super) fn syn4(src: Ipv4Addr, sport: u16, dport: u16) -> Vec<u8> {
    let mut p = ipv4(TCP, src, POOL, 60, &tcp(sport, dport, 0x02));
    fill_l4_csum(&mut p);
    p
}

/// RFC 6146 §3.5.2.2, RFC 5382 REQ-4: an unsolicited inbound SYN is held and not answered
/// for 6 s; then, with no outbound SYN for its connection, it is answered exactly once with
/// ICMPv4 Port Unreachable (type 3 code 3) from the pool address it was sent to, quoting
/// the SYN as it arrived.
#[test]
fn unsolicited_syn_is_answered_with_port_unreachable_after_six_seconds() {
    let mut n = Nat64::new(config()).unwrap();
    let syn = syn4(SRV4, 33000, 5000);
    assert_eq!(inb(&mut n, 1, &syn), Err(DropReason::SynHeld));
    assert_eq!(n.poll_due_timeout(), Some(t(7)), "due 6 s after it arrived");
    assert!(poll(&mut n, 6_999).is_empty(), "not before 6 s");
    let got = poll(&mut n, 7_000);
    assert_eq!(got.len(), 1);
    let e = &got[0];
    assert_eq!((e[9], e[20], e[21]), (ICMP, 3, 3), "Port Unreachable");
    assert_eq!(
        v4_addrs(e),
        (POOL, SRV4),
        "from the address the SYN was sent to"
    );
    assert_eq!(&e[28..], &syn[..], "quotes the SYN as it arrived");
    assert_checksums(e);
    assert!(poll(&mut n, 8_000).is_empty(), "exactly once");
    assert!(poll(&mut n, 60_000).is_empty());
    let c = n.counters();
    assert_eq!(c.dropped(DropReason::SynHeld), 1);
    assert_eq!(c.icmp_errors_sent, 1);
    assert_eq!(n.shared().session_count(), 0);
}

/// RFC 5382 REQ-4 / RFC 6146 §3.5.2.2, simultaneous open: the peer's SYN arrives first
/// (no binding yet, or one whose address-dependent filter refuses the peer), then the
/// host's SYN for the same connection: the host's SYN makes the session, the held SYN is
/// dropped silently (no Port Unreachable ever), and the peer's next segment passes.
#[test]
fn simultaneous_open_succeeds_and_the_held_syn_goes_silently() {
    for filtering in [
        crate::config::Filtering::EndpointIndependent,
        crate::config::Filtering::AddressDependent,
    ] {
        let mut n = Nat64::new(Nat64Config {
            filtering,
            ..config()
        })
        .unwrap();
        let peer = Ipv4Addr::new(198, 51, 100, 9);
        if filtering == crate::config::Filtering::AddressDependent {
            // A's binding exists (to another server); the filter refuses the peer.
            let mut s = ipv6(TCP, HOST_A, srv6(), 64, &tcp(5000, 80, 0x02));
            fill_l4_csum(&mut s);
            assert_eq!(ports(&out(&mut n, 0, &s).unwrap()).0, 5000);
        }
        assert_eq!(
            inb(&mut n, 1, &syn4(peer, 4000, 5000)),
            Err(DropReason::SynHeld)
        );
        let mut syn = ipv6(TCP, HOST_A, embed(peer), 64, &tcp(5000, 4000, 0x02));
        fill_l4_csum(&mut syn);
        let o = out(&mut n, 2, &syn).unwrap();
        assert_eq!((v4_addrs(&o), ports(&o)), ((POOL, peer), (5000, 4000)));
        assert!(
            poll(&mut n, 20_000).is_empty(),
            "the held SYN went silently"
        );
        assert_eq!(n.poll_due_timeout(), None);
        // The peer, in SYN-SENT, answers the host's SYN with a SYN-ACK: it passes.
        let mut synack = ipv4(TCP, peer, POOL, 60, &tcp(4000, 5000, 0x12));
        fill_l4_csum(&mut synack);
        let r = inb(&mut n, 3, &synack).unwrap();
        assert_eq!(
            (v6_addrs(&r), ports(&r)),
            ((embed(peer), HOST_A), (4000, 5000))
        );
        assert_eq!(n.counters().icmp_errors_sent, 0);
    }
}

/// At most `max_simultaneous_opens` SYNs are held (more: `syn_hold_full`), a
/// retransmitted SYN is not held twice, and `drop_externally_initiated_tcp` drops them
/// at once with no answer ever.
#[test]
fn held_syns_are_bounded_and_can_be_refused() {
    let mut n = Nat64::new(Nat64Config {
        max_simultaneous_opens: 2,
        ..config()
    })
    .unwrap();
    let r: Vec<_> = [1000, 1001, 1000, 1002]
        .iter()
        .map(|p| inb(&mut n, 1, &syn4(SRV4, *p, 5000)))
        .collect();
    use DropReason::{SynHeld, SynHoldFull};
    assert_eq!(
        r,
        vec![Err(SynHeld), Err(SynHeld), Err(SynHeld), Err(SynHoldFull)]
    );
    assert_eq!(poll(&mut n, 7_000).len(), 2, "one answer per held SYN");

    let mut n = Nat64::new(Nat64Config {
        drop_externally_initiated_tcp: true,
        ..config()
    })
    .unwrap();
    assert_eq!(
        inb(&mut n, 1, &syn4(SRV4, 1000, 5000)),
        Err(DropReason::NoMapping)
    );
    assert!(poll(&mut n, 10_000).is_empty());
    // Not a SYN (an ACK, a SYN-ACK): never held.
    let mut n = Nat64::new(config()).unwrap();
    let mut ack = ipv4(TCP, SRV4, POOL, 60, &tcp(1000, 5000, 0x12));
    fill_l4_csum(&mut ack);
    assert_eq!(inb(&mut n, 1, &ack), Err(DropReason::NoMapping));
}

/// RFC 6146 §3.5.3 `drop_icmpv6_info`: ICMPv6 echo from the inside is dropped with its
/// reason; ICMPv6 errors still pass.
#[test]
fn drop_icmpv6_info_drops_echo_but_not_errors() {
    let mut n = Nat64::new(Nat64Config {
        drop_icmpv6_info: true,
        ..config()
    })
    .unwrap();
    let mut ping = ipv6(ICMP6, HOST_A, srv6(), 64, &echo(128, 0x77, 1));
    fill_l4_csum(&mut ping);
    assert_eq!(out(&mut n, 1, &ping), Err(DropReason::Icmpv6InfoFiltered));
    let o = out(&mut n, 1, &udp6(HOST_A, 5000, srv6(), 53)).unwrap();
    let reply = inb(&mut n, 2, &udp4(SRV4, 53, POOL, ports(&o).0)).unwrap();
    let mut body = vec![1, 4, 0, 0, 0, 0, 0, 0];
    body.extend_from_slice(&reply);
    let mut err = ipv6(ICMP6, HOST_A, srv6(), 64, &body);
    fill_l4_csum(&mut err);
    assert!(out(&mut n, 3, &err).is_ok());
}

/// Every IP protocol through NAT64: ESP and GRE (no ports) by address only, the pool4
/// address out, the IPv6 host back, their bytes untouched (RFC 6146 §3.5 translates
/// TCP, UDP and ICMP; like netfilter and VPP, the rest go through address-only sessions).
#[test]
fn esp_and_gre_out_and_back_by_address_only() {
    let mut n = Nat64::new(config()).unwrap();
    for proto in [50u8, 47] {
        let body: Vec<u8> = (0..48u8).collect();
        let out = out(&mut n, 1, &ipv6(proto, HOST_A, srv6(), 64, &body)).unwrap();
        assert_eq!((out[0] >> 4, out[9]), (4, proto));
        assert_eq!(v4_addrs(&out), (POOL, SRV4));
        assert_eq!(out[20..], body[..], "untouched");
        let back = inb(&mut n, 2, &ipv4(proto, SRV4, POOL, 64, &body)).unwrap();
        assert_eq!((back[0] >> 4, back[6]), (6, proto));
        assert_eq!(v6_addrs(&back), (srv6(), HOST_A));
        assert_eq!(back[40..], body[..]);
    }
}

/// SCTP through NAT64 with its ports: SIIT leaves the CRC32c alone (it covers no
/// addresses), NAT44 moves it with a changed port; two IPv6 hosts on one source port
/// share the pool4 address, each answered on its own port with a right CRC.
#[test]
fn sctp_out_and_back_with_ports_and_crc() {
    let mut n = Nat64::new(config()).unwrap();
    let crc_ok = |l4: &[u8]| wire::sctp::checksum(l4) == wire::sctp::stored_checksum(l4);
    let init = [
        1, 0, 0, 20, 0, 0, 0, 9, 0, 1, 0, 0, 0, 10, 0, 10, 0, 0, 0, 1,
    ];
    let host_b: Ipv6Addr = "2001:db8:1::3".parse().unwrap();
    let mut public = Vec::new();
    for host in [HOST_A, host_b] {
        let p = ipv6(132, host, srv6(), 64, &sctp(5000, 3868, 7, &init));
        let o = out(&mut n, 1, &p).unwrap();
        assert_eq!((o[0] >> 4, o[9]), (4, 132));
        assert_eq!(v4_addrs(&o), (POOL, SRV4));
        assert_eq!(ports(&o).1, 3868);
        assert!(crc_ok(&o[20..]), "{o:02x?}");
        public.push(ports(&o).0);
    }
    assert_ne!(public[0], public[1]);
    for (host, port) in [HOST_A, host_b].into_iter().zip(public) {
        let r = ipv4(132, SRV4, POOL, 64, &sctp(3868, port, 9, &init));
        let b = inb(&mut n, 2, &r).unwrap();
        assert_eq!((b[0] >> 4, b[6]), (6, 132));
        assert_eq!(v6_addrs(&b), (srv6(), host));
        assert_eq!(ports(&b), (3868, 5000));
        assert!(crc_ok(&b[40..]));
    }
}
