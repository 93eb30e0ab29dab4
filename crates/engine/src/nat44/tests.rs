//! NAT44 behaviour tests: packets built by hand, checked field by field, every checksum
//! recomputed from scratch after translation.

use std::net::{Ipv4Addr, SocketAddrV4};

use conntrack::Timestamp;
use proptest::prelude::*;
use wire::checksum::{checksum, combine, fold, pseudo_header_v4, sum};

use super::config::{DynamicRule, Nat44Config, PortForward, StaticNat};
use super::Nat44;
use crate::config::{Filtering, L4Proto, PortRange};
use crate::testpkt::ipv4;
use crate::verdict::{Direction::*, DropReason};
use crate::Emit;

pub(super) const IN_A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
pub(super) const IN_B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 3);
pub(super) const SRV: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
const SRV2: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 3);
pub(super) const PUB: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);

pub(super) fn config() -> Nat44Config {
    Nat44Config {
        rules: vec![DynamicRule {
            inside: "10.0.0.0/24".parse().unwrap(),
            pool: vec!["203.0.113.1/32".parse().unwrap()],
            ports: PortRange::new(1024, 65535).unwrap(),
        }],
        ..Nat44Config::default()
    }
}

fn nat(cfg: Nat44Config) -> Nat44 {
    Nat44::new(cfg).unwrap()
}

fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

// ---- packet building (by hand, independent of the views under test) ----

fn l4_csum(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, l4: &[u8]) -> u16 {
    !fold(combine(
        pseudo_header_v4(src.octets(), dst.octets(), proto, l4.len() as u16),
        sum(l4),
    ))
}

fn udp(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16) -> Vec<u8> {
    let mut u = vec![0u8; 8];
    u.extend_from_slice(b"hello nat");
    u[0..2].copy_from_slice(&sport.to_be_bytes());
    u[2..4].copy_from_slice(&dport.to_be_bytes());
    let l = u.len() as u16;
    u[4..6].copy_from_slice(&l.to_be_bytes());
    let c = l4_csum(src, dst, 17, &u);
    u[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
    ipv4(17, src, dst, 64, &u)
}

fn tcp(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16, flags: u8) -> Vec<u8> {
    let mut h = vec![0u8; 20];
    h[0..2].copy_from_slice(&sport.to_be_bytes());
    h[2..4].copy_from_slice(&dport.to_be_bytes());
    h[4..8].copy_from_slice(&1000u32.to_be_bytes());
    h[12] = 0x50;
    h[13] = flags;
    h[14..16].copy_from_slice(&65535u16.to_be_bytes());
    h.extend_from_slice(b"data");
    let c = l4_csum(src, dst, 6, &h);
    h[16..18].copy_from_slice(&c.to_be_bytes());
    ipv4(6, src, dst, 64, &h)
}

fn echo(src: Ipv4Addr, dst: Ipv4Addr, ty: u8, id: u16) -> Vec<u8> {
    let mut m = vec![ty, 0, 0, 0, (id >> 8) as u8, id as u8, 0, 1];
    m.extend_from_slice(&[0xab; 32]);
    let c = checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    ipv4(1, src, dst, 64, &m)
}

/// An ICMP error from `from` to `to` quoting `quoted` (whole or cut to `quote_len`).
fn icmp_error(
    from: Ipv4Addr,
    to: Ipv4Addr,
    ty: u8,
    code: u8,
    quoted: &[u8],
    quote_len: usize,
) -> Vec<u8> {
    let mut m = vec![ty, code, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(&quoted[..quote_len.min(quoted.len())]);
    let c = checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    ipv4(1, from, to, 64, &m)
}

fn src(p: &[u8]) -> (Ipv4Addr, u16) {
    (
        Ipv4Addr::new(p[12], p[13], p[14], p[15]),
        u16::from_be_bytes([p[20], p[21]]),
    )
}

fn dst(p: &[u8]) -> (Ipv4Addr, u16) {
    (
        Ipv4Addr::new(p[16], p[17], p[18], p[19]),
        u16::from_be_bytes([p[22], p[23]]),
    )
}

/// Every checksum in the packet verifies (IPv4 header, TCP/UDP with pseudo-header, ICMP;
/// for ICMP errors also the quoted IPv4 header).
fn checksums_ok(p: &[u8]) -> bool {
    let ihl = usize::from(p[0] & 0xf) * 4;
    if checksum(&p[..ihl]) != 0 {
        return false;
    }
    let (s, d) = (
        Ipv4Addr::new(p[12], p[13], p[14], p[15]),
        Ipv4Addr::new(p[16], p[17], p[18], p[19]),
    );
    let l4 = &p[ihl..];
    match p[9] {
        6 => l4_csum(s, d, 6, l4) == 0,
        17 => u16::from_be_bytes([l4[6], l4[7]]) == 0 || l4_csum(s, d, 17, l4) == 0,
        1 => {
            let ok = checksum(l4) == 0;
            if matches!(l4[0], 3 | 11) {
                let q = &l4[8..];
                let qihl = usize::from(q[0] & 0xf) * 4;
                ok && checksum(&q[..qihl]) == 0
            } else {
                ok
            }
        }
        _ => true,
    }
}

fn fwd(n: &mut Nat44, now: Timestamp, dir: crate::Direction, mut p: Vec<u8>) -> Vec<u8> {
    let v = n.process(now, dir, &mut p);
    assert_eq!(v.drop_reason(), None, "packet was not forwarded");
    assert!(checksums_ok(&p), "bad checksum after translation: {p:02x?}");
    p
}

fn dropped(n: &mut Nat44, now: Timestamp, dir: crate::Direction, mut p: Vec<u8>) -> DropReason {
    match n.process(now, dir, &mut p) {
        Emit::Drop(r) => r,
        v => panic!("expected a drop, got {v:?}"),
    }
}

// ---- tests ----

#[test]
fn outbound_udp_is_translated_and_reply_comes_back() {
    let mut n = nat(config());
    let out = fwd(&mut n, t(1), Outbound, udp(IN_A, 5000, SRV, 53));
    assert_eq!(src(&out), (PUB, 5000), "port preserved");
    assert_eq!(dst(&out), (SRV, 53));
    assert_eq!(out[8], 63, "TTL decremented");
    let back = fwd(&mut n, t(2), Inbound, udp(SRV, 53, PUB, 5000));
    assert_eq!(dst(&back), (IN_A, 5000));
    assert_eq!(src(&back), (SRV, 53));
    assert_eq!(n.session_count(), 1);
    assert_eq!(n.counters().forwarded, 2);
}

#[test]
fn endpoint_independent_mapping_and_paired_pooling() {
    let mut cfg = config();
    cfg.rules[0].pool = vec!["203.0.113.0/28".parse().unwrap()];
    let mut n = nat(cfg);
    let a = src(&fwd(&mut n, t(1), Outbound, udp(IN_A, 5000, SRV, 53)));
    let b = src(&fwd(&mut n, t(1), Outbound, udp(IN_A, 5000, SRV2, 53)));
    assert_eq!(
        a, b,
        "same inside endpoint, same mapping whatever the destination"
    );
    let c = src(&fwd(&mut n, t(1), Outbound, tcp(IN_A, 6000, SRV, 80, 0x02)));
    let e = src(&fwd(&mut n, t(1), Outbound, echo(IN_A, SRV, 8, 77)));
    assert_eq!(a.0, c.0, "paired: one public address per inside host");
    assert_eq!(a.0, e.0);
    assert_eq!(n.binding_count(), 3);
}

#[test]
fn port_taken_by_another_host_is_not_shared() {
    let mut n = nat(config());
    let a = src(&fwd(&mut n, t(1), Outbound, udp(IN_A, 5000, SRV, 53)));
    let b = src(&fwd(&mut n, t(1), Outbound, udp(IN_B, 5000, SRV, 53)));
    assert_ne!(a, b);
    let back = fwd(&mut n, t(2), Inbound, udp(SRV, 53, PUB, b.1));
    assert_eq!(dst(&back), (IN_B, 5000));
}

#[test]
fn filtering_behaviours() {
    for (f, from_other_addr, from_other_port) in [
        (Filtering::EndpointIndependent, true, true),
        (Filtering::AddressDependent, false, true),
        (Filtering::AddressAndPortDependent, false, false),
    ] {
        let mut cfg = config();
        cfg.filtering = f;
        let mut n = nat(cfg);
        fwd(&mut n, t(1), Outbound, udp(IN_A, 5000, SRV, 53));
        let mut p = udp(SRV2, 53, PUB, 5000);
        let v = n.process(t(2), Inbound, &mut p);
        assert_eq!(v.is_forward(), from_other_addr, "{f:?}: other address");
        let mut p = udp(SRV, 54, PUB, 5000);
        let v = n.process(t(2), Inbound, &mut p);
        assert_eq!(
            v.is_forward(),
            from_other_port,
            "{f:?}: same address, other port"
        );
        if !from_other_addr {
            assert!(n.counters().dropped(DropReason::Filtered) >= 1);
        }
    }
}

#[test]
fn unsolicited_inbound_is_dropped() {
    let mut n = nat(config());
    assert_eq!(
        dropped(&mut n, t(1), Inbound, udp(SRV, 53, PUB, 7777)),
        DropReason::NoMapping
    );
    assert_eq!(
        dropped(
            &mut n,
            t(1),
            Outbound,
            udp(Ipv4Addr::new(10, 9, 0, 1), 1, SRV, 53)
        ),
        DropReason::NoRule
    );
}

#[test]
fn spoofed_inside_source_from_outside_is_refused() {
    let mut n = nat(config());
    fwd(&mut n, t(1), Outbound, udp(IN_A, 5000, SRV, 53));
    // The same tuple as the original record, but arriving on the outside.
    assert_eq!(
        dropped(&mut n, t(1), Inbound, udp(IN_A, 5000, SRV, 53)),
        DropReason::WrongDirection
    );
}

#[test]
fn port_forward_and_hairpin() {
    let mut cfg = config();
    cfg.port_forwards.push(PortForward {
        protocol: L4Proto::Tcp,
        public: SocketAddrV4::new(PUB, 8080),
        inside: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 20), 80),
    });
    let mut n = nat(cfg);
    let srv_in = Ipv4Addr::new(10, 0, 0, 20);
    // From outside.
    let p = fwd(&mut n, t(1), Inbound, tcp(SRV, 41000, PUB, 8080, 0x02));
    assert_eq!((src(&p), dst(&p)), ((SRV, 41000), (srv_in, 80)));
    let r = fwd(&mut n, t(1), Outbound, tcp(srv_in, 80, SRV, 41000, 0x12));
    assert_eq!((src(&r), dst(&r)), ((PUB, 8080), (SRV, 41000)));
    // Hairpin: an inside host through the public address.
    let p = fwd(&mut n, t(2), Outbound, tcp(IN_B, 50000, PUB, 8080, 0x02));
    assert_eq!((src(&p), dst(&p)), ((PUB, 50000), (srv_in, 80)));
    let r = fwd(&mut n, t(2), Outbound, tcp(srv_in, 80, PUB, 50000, 0x12));
    assert_eq!((src(&r), dst(&r)), ((PUB, 8080), (IN_B, 50000)));
    assert_eq!(n.counters().hairpinned, 2);
    // A forwarded public port is never handed out dynamically.
    let d = src(&fwd(&mut n, t(3), Outbound, tcp(IN_A, 8080, SRV, 80, 0x02)));
    assert_ne!(d, (PUB, 8080));
}

/// A port forward publishes a service: every filtering behaviour lets any remote reach it
/// (filtering is about dynamic mappings, RFC 4787 §5), from outside and through a hairpin.
#[test]
fn port_forward_is_open_to_any_remote_under_every_filtering() {
    let srv_in = Ipv4Addr::new(10, 0, 0, 20);
    for filtering in [
        Filtering::EndpointIndependent,
        Filtering::AddressDependent,
        Filtering::AddressAndPortDependent,
    ] {
        let mut cfg = config();
        cfg.filtering = filtering;
        cfg.port_forwards.push(PortForward {
            protocol: L4Proto::Tcp,
            public: SocketAddrV4::new(PUB, 8080),
            inside: SocketAddrV4::new(srv_in, 80),
        });
        let mut n = nat(cfg);
        let p = fwd(&mut n, t(1), Inbound, tcp(SRV, 41000, PUB, 8080, 0x02));
        assert_eq!(dst(&p), (srv_in, 80), "{filtering:?}");
        let p = fwd(&mut n, t(2), Outbound, tcp(IN_B, 50000, PUB, 8080, 0x02));
        assert_eq!(dst(&p), (srv_in, 80), "{filtering:?}: hairpin");
    }
}

#[test]
fn hairpin_can_be_disabled() {
    let mut cfg = config();
    cfg.hairpinning = false;
    let mut n = nat(cfg);
    fwd(&mut n, t(1), Outbound, udp(IN_A, 5000, SRV, 53));
    assert_eq!(
        dropped(&mut n, t(1), Outbound, udp(IN_B, 6000, PUB, 5000)),
        DropReason::HairpinDisabled
    );
}

#[test]
fn static_one_to_one() {
    let mut cfg = config();
    let inside = Ipv4Addr::new(10, 0, 1, 5);
    let public = Ipv4Addr::new(192, 0, 2, 5);
    cfg.static_nat.push(StaticNat { inside, public });
    let mut n = nat(cfg);
    let p = fwd(&mut n, t(1), Inbound, tcp(SRV, 40000, public, 22, 0x02));
    assert_eq!(dst(&p), (inside, 22));
    let r = fwd(&mut n, t(1), Outbound, tcp(inside, 22, SRV, 40000, 0x12));
    assert_eq!(src(&r), (public, 22));
    let o = fwd(&mut n, t(2), Outbound, udp(inside, 123, SRV, 123));
    assert_eq!(src(&o), (public, 123), "static 1:1 keeps the port");
}

#[test]
fn icmp_echo_identifier_is_translated() {
    let mut n = nat(config());
    fwd(&mut n, t(1), Outbound, udp(IN_B, 4660, SRV, 9)); // takes public port 4660 for UDP only
    let o = fwd(&mut n, t(1), Outbound, echo(IN_A, SRV, 8, 4660));
    let id = u16::from_be_bytes([o[24], o[25]]);
    assert_eq!(id, 4660, "ICMP has its own identifier space");
    let r = fwd(&mut n, t(2), Inbound, echo(SRV, PUB, 0, id));
    assert_eq!(Ipv4Addr::new(r[16], r[17], r[18], r[19]), IN_A);
    assert_eq!(u16::from_be_bytes([r[24], r[25]]), 4660);
    let o2 = fwd(&mut n, t(3), Outbound, echo(IN_B, SRV, 8, 4660));
    assert_ne!(
        u16::from_be_bytes([o2[24], o2[25]]),
        4660,
        "second host gets another id"
    );
}

/// RFC 5508 §3.1 / RFC 6146 §3.5.3: an echo request from the outside to the public
/// address and identifier of an existing ICMP binding reaches the inside host with its
/// own identifier, and its echo reply leaves with the public one.
#[test]
fn inbound_echo_request_through_an_icmp_binding() {
    let mut n = nat(config());
    fwd(&mut n, t(1), Outbound, udp(IN_B, 4660, SRV, 9));
    fwd(&mut n, t(1), Outbound, echo(IN_B, SRV, 8, 4660)); // B's ICMP takes id 4660
    let o = fwd(&mut n, t(1), Outbound, echo(IN_A, SRV, 8, 4660));
    let id = u16::from_be_bytes([o[24], o[25]]);
    assert_ne!(id, 4660);
    let r = fwd(&mut n, t(2), Inbound, echo(SRV, PUB, 8, id));
    assert_eq!(
        (r[20], Ipv4Addr::new(r[16], r[17], r[18], r[19])),
        (8, IN_A)
    );
    assert_eq!(
        u16::from_be_bytes([r[24], r[25]]),
        4660,
        "A's own identifier"
    );
    assert!(checksums_ok(&r));
    let o = fwd(&mut n, t(3), Outbound, echo(IN_A, SRV, 0, 4660));
    assert_eq!((o[20], src(&o).0), (0, PUB));
    assert_eq!(u16::from_be_bytes([o[24], o[25]]), id, "public identifier");
    assert!(checksums_ok(&o));
    let mut stray = echo(SRV, PUB, 8, 999);
    assert_eq!(
        n.process(t(4), Inbound, &mut stray),
        Emit::Drop(DropReason::NoMapping)
    );
}

#[test]
fn inbound_icmp_error_reaches_the_inside_host() {
    let mut n = nat(config());
    n.process(t(1), Outbound, &mut udp(IN_B, 40001, SRV, 9)); // B takes 40001 first
    let out = fwd(&mut n, t(1), Outbound, udp(IN_A, 40001, SRV, 9999));
    let pport = src(&out).1;
    assert_ne!(pport, 40001);
    for quote_len in [28, out.len()] {
        let err = icmp_error(SRV, PUB, 3, 3, &out, quote_len);
        let e = fwd(&mut n, t(2), Inbound, err);
        assert_eq!(
            Ipv4Addr::new(e[16], e[17], e[18], e[19]),
            IN_A,
            "outer destination"
        );
        let q = &e[28..];
        assert_eq!(
            Ipv4Addr::new(q[12], q[13], q[14], q[15]),
            IN_A,
            "quoted source"
        );
        assert_eq!(
            u16::from_be_bytes([q[20], q[21]]),
            40001,
            "quoted source port"
        );
        if quote_len == out.len() {
            // The whole datagram is quoted: its UDP checksum must verify again.
            assert_eq!(l4_csum(IN_A, SRV, 17, &q[20..]), 0);
        }
    }
    // A router's time-exceeded (source is not the session's peer).
    let router = Ipv4Addr::new(198, 51, 100, 254);
    let e = fwd(
        &mut n,
        t(3),
        Inbound,
        icmp_error(router, PUB, 11, 0, &out, 28),
    );
    assert_eq!(src(&e).0, router);
    assert_eq!(n.counters().icmp_errors_translated, 3);
    // An error quoting a flow the NAT never saw.
    let stray = udp(PUB, 1111, SRV, 9);
    assert_eq!(
        dropped(
            &mut n,
            t(3),
            Inbound,
            icmp_error(SRV, PUB, 3, 3, &stray, 28)
        ),
        DropReason::IcmpErrorNoSession
    );
}

#[test]
fn outbound_icmp_error_about_inbound_packet() {
    let mut n = nat(config());
    fwd(&mut n, t(1), Outbound, udp(IN_A, 7000, SRV, 53));
    let inb = fwd(&mut n, t(2), Inbound, udp(SRV, 53, PUB, 7000)); // as IN_A received it
    let e = fwd(
        &mut n,
        t(3),
        Outbound,
        icmp_error(IN_A, SRV, 3, 3, &inb, inb.len()),
    );
    assert_eq!(src(&e).0, PUB, "outer source is the public address");
    let q = &e[28..];
    assert_eq!(
        Ipv4Addr::new(q[16], q[17], q[18], q[19]),
        PUB,
        "quoted destination"
    );
    assert_eq!(u16::from_be_bytes([q[22], q[23]]), 7000);
}

#[test]
fn expired_udp_port_is_held_back_before_reuse() {
    let mut n = nat(config());
    fwd(&mut n, t(0), Outbound, udp(IN_A, 5000, SRV, 53));
    // Answered: a late answer could follow, so the port waits out the hold.
    fwd(&mut n, t(1), Inbound, udp(SRV, 53, PUB, 5000));
    assert!(n.poll_timeout().is_some());
    n.handle_timeout(t(301));
    assert_eq!(n.session_count(), 0);
    assert_eq!(n.binding_count(), 0);
    // Another host wants 5000 within the hold: it gets a different port.
    let b = src(&fwd(&mut n, t(400), Outbound, udp(IN_B, 5000, SRV, 53)));
    assert_ne!(b.1, 5000);
    n.handle_timeout(t(422));
    let c = src(&fwd(
        &mut n,
        t(422),
        Outbound,
        udp(Ipv4Addr::new(10, 0, 0, 9), 5000, SRV, 53),
    ));
    assert_eq!(c.1, 5000, "free again after 120 s");
    // The old flow's late reply cannot reach the new owner through the old session.
    assert_eq!(n.session_count(), 2);
}

#[test]
fn a_packet_finding_an_expired_session_starts_afresh() {
    let mut n = nat(config());
    fwd(&mut n, t(0), Outbound, udp(IN_A, 5000, SRV, 53));
    // No sweep ran; the reply arrives after the timeout: the session is dead.
    assert_eq!(
        dropped(&mut n, t(301), Inbound, udp(SRV, 53, PUB, 5000)),
        DropReason::NoMapping
    );
    assert_eq!(n.session_count(), 0);
}

#[test]
fn table_full_refuses_new_flows_but_keeps_established() {
    let mut cfg = config();
    cfg.max_sessions = 2;
    let mut n = nat(cfg);
    fwd(&mut n, t(0), Outbound, udp(IN_A, 1, SRV, 53));
    fwd(&mut n, t(0), Outbound, udp(IN_A, 2, SRV, 53));
    assert_eq!(
        dropped(&mut n, t(0), Outbound, udp(IN_A, 3, SRV, 53)),
        DropReason::TableFull
    );
    let p1 = src(&fwd(&mut n, t(1), Outbound, udp(IN_A, 1, SRV, 53)));
    fwd(&mut n, t(1), Inbound, udp(SRV, 53, PUB, p1.1));
    assert_eq!(n.counters().dropped(DropReason::TableFull), 1);
}

#[test]
fn pool_exhaustion_never_evicts() {
    let mut cfg = config();
    cfg.rules[0].ports = PortRange::new(2000, 2001).unwrap();
    let mut n = nat(cfg);
    let a = src(&fwd(&mut n, t(0), Outbound, udp(IN_A, 1, SRV, 53)));
    let b = src(&fwd(&mut n, t(0), Outbound, udp(IN_B, 1, SRV, 53)));
    assert_eq!(
        dropped(&mut n, t(0), Outbound, udp(IN_A, 2, SRV, 53)),
        DropReason::PoolExhausted
    );
    fwd(&mut n, t(1), Inbound, udp(SRV, 53, PUB, a.1));
    fwd(&mut n, t(1), Inbound, udp(SRV, 53, PUB, b.1));
}

#[test]
fn malformed_and_unsupported_packets_are_dropped_with_a_reason() {
    let mut n = nat(config());
    let good = udp(IN_A, 5000, SRV, 53);
    assert_eq!(
        dropped(&mut n, t(0), Outbound, good[..15].to_vec()),
        DropReason::Truncated
    );
    let mut long = good.clone();
    long[3] += 40; // total length beyond the frame
    assert!(matches!(
        dropped(&mut n, t(0), Outbound, long),
        DropReason::Truncated | DropReason::Malformed
    ));
    let mut ihl = good.clone();
    ihl[0] = 0x44;
    assert_eq!(dropped(&mut n, t(0), Outbound, ihl), DropReason::Malformed);
    let mut csum = good.clone();
    csum[10] ^= 1;
    assert_eq!(
        dropped(&mut n, t(0), Outbound, csum),
        DropReason::BadIpChecksum
    );
    let mut ttl = udp(IN_A, 5000, SRV, 53);
    ttl[8] = 1;
    let c = {
        ttl[10] = 0;
        ttl[11] = 0;
        checksum(&ttl[..20])
    };
    ttl[10..12].copy_from_slice(&c.to_be_bytes());
    assert_eq!(dropped(&mut n, t(0), Outbound, ttl), DropReason::TtlExpired);
    let mut frag = good.clone();
    frag[6] = 0x00;
    frag[7] = 0x10; // offset 128 bytes
    frag[10] = 0;
    frag[11] = 0;
    let c = checksum(&frag[..20]);
    frag[10..12].copy_from_slice(&c.to_be_bytes());
    assert_eq!(
        dropped(&mut n, t(0), Outbound, frag),
        DropReason::FragmentHeld
    );
    let mut v6 = vec![0x60u8; 48];
    v6[4] = 0;
    v6[5] = 8;
    assert_eq!(dropped(&mut n, t(0), Outbound, v6), DropReason::NotIpv4);
    let redirect = {
        let mut m = vec![5u8, 0, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(&good[..28]);
        ipv4(1, SRV, PUB, 64, &m)
    };
    assert_eq!(
        dropped(&mut n, t(0), Inbound, redirect),
        DropReason::UnsupportedIcmp
    );
    assert_eq!(n.session_count(), 0, "no drop left state behind");
    assert_eq!(n.counters().forwarded, 0);
}

#[test]
fn link_padding_beyond_total_length_is_left_alone() {
    let mut n = nat(config());
    let mut p = udp(IN_A, 5000, SRV, 53);
    let len = p.len();
    p.extend_from_slice(&[0xee; 6]);
    assert_eq!(n.process(t(0), Outbound, &mut p).drop_reason(), None);
    assert!(checksums_ok(&p[..len]));
    assert_eq!(&p[len..], &[0xee; 6]);
}

proptest! {
    /// Reply traffic run back through the engine gets the original inside addresses and
    /// ports back, for any mix of inside hosts, ports and servers.
    #[test]
    fn replies_restore_the_original_endpoints(flows in proptest::collection::vec((1u8..250, 1u16.., any::<u32>(), 1u16.., 0u8..3), 1..60)) {
        let mut cfg = config();
        cfg.rules[0].pool = vec!["203.0.113.0/29".parse().unwrap()];
        let mut n = nat(cfg);
        for (host, sport, server, dport, kind) in flows {
            let inside = Ipv4Addr::new(10, 0, 0, host);
            let server = Ipv4Addr::from(0xC000_0000 | (server & 0x00FF_FFFF)); // 192.x.y.z, never ours
            let mut out = match kind { 0 => udp(inside, sport, server, dport), 1 => tcp(inside, sport, server, dport, 0x02), _ => echo(inside, server, 8, sport) };
            prop_assert_eq!(n.process(t(1), Outbound, &mut out).drop_reason(), None);
            prop_assert!(checksums_ok(&out));
            let (pa, mut pp) = src(&out);
            if kind == 2 { pp = u16::from_be_bytes([out[24], out[25]]); }
            let mut back = match kind { 0 => udp(server, dport, pa, pp), 1 => tcp(server, dport, pa, pp, 0x12), _ => echo(server, pa, 0, pp) };
            prop_assert_eq!(n.process(t(2), Inbound, &mut back).drop_reason(), None);
            prop_assert!(checksums_ok(&back));
            prop_assert_eq!(Ipv4Addr::new(back[16], back[17], back[18], back[19]), inside);
            let port = if kind == 2 { u16::from_be_bytes([back[24], back[25]]) } else { dst(&back).1 };
            prop_assert_eq!(port, sport);
        }
    }

    /// No input of any shape makes `process` panic, in either direction.
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
        let mut n = nat(config());
        let mut a = bytes.clone();
        let _ = n.process(t(0), Outbound, &mut a);
        let mut b = bytes;
        let _ = n.process(t(0), Inbound, &mut b);
    }

    /// Valid packets with random corruption (including inside ICMP quotes) never panic,
    /// and anything forwarded still carries a valid IPv4 header checksum.
    #[test]
    fn corrupted_packets_never_panic(kind in 0u8..5, edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6), cut in any::<usize>()) {
        let mut n = nat(config());
        let out = fwd(&mut n, t(0), Outbound, udp(IN_A, 40001, SRV, 9999));
        let mut p = match kind {
            0 => udp(IN_A, 5000, SRV, 53),
            1 => tcp(SRV, 80, PUB, 40001, 0x12),
            2 => icmp_error(SRV, PUB, 3, 3, &out, out.len()),
            3 => echo(SRV, PUB, 0, 40001),
            _ => icmp_error(IN_A, SRV, 11, 0, &out, 28),
        };
        for (at, v) in edits { let i = at % p.len(); p[i] = v; }
        p.truncate(cut % (p.len() + 1));
        for dir in [Outbound, Inbound] {
            let mut q = p.clone();
            if n.process(t(1), dir, &mut q).is_forward() {
                let ihl = usize::from(q[0] & 0xf) * 4;
                prop_assert_eq!(checksum(&q[..ihl]), 0);
            }
        }
    }
}

#[test]
fn many_flows_then_everything_expires_and_ports_return() {
    let mut cfg = config();
    cfg.rules[0].ports = PortRange::new(1024, 1024 + 999).unwrap();
    let mut n = nat(cfg);
    for i in 0..1000u32 {
        let host = Ipv4Addr::new(10, 0, 0, (i % 200) as u8 + 1);
        fwd(
            &mut n,
            t(0),
            Outbound,
            udp(host, 20000 + (i / 200) as u16, SRV, 53),
        );
    }
    assert_eq!(n.session_count(), 1000);
    assert_eq!(
        dropped(&mut n, t(0), Outbound, udp(IN_A, 9, SRV, 53)),
        DropReason::PoolExhausted
    );
    n.handle_timeout(t(301));
    assert_eq!(n.session_count(), 0);
    n.handle_timeout(t(301 + 120));
    for i in 0..1000u32 {
        let host = Ipv4Addr::new(10, 0, 0, (i % 200) as u8 + 1);
        fwd(
            &mut n,
            t(500),
            Outbound,
            udp(host, 30000 + (i / 200) as u16, SRV, 53),
        );
    }
    assert_eq!(n.session_count(), 1000, "every port came back to the pool");
    assert!(n.poll_timeout().is_some());
}

/// RFC 5382 REQ-4: an unsolicited inbound SYN is held 6 s, then answered exactly once
/// with ICMP Port Unreachable from the public address it was sent to, quoting it.
#[test]
fn unsolicited_syn_is_answered_with_port_unreachable_after_six_seconds() {
    let mut n = nat(config());
    let syn = tcp(SRV, 33000, PUB, 5000, 0x02);
    assert_eq!(
        n.process(t(1), Inbound, &mut syn.clone()),
        Emit::Drop(DropReason::SynHeld)
    );
    let mut out = crate::mode::Output::new();
    let at = |ms: u64| Timestamp::from_nanos(ms * 1_000_000);
    assert_eq!(n.poll_due_timeout(), Some(t(7)));
    assert_eq!(n.poll(at(6_999), &mut out), 0, "not before 6 s");
    assert_eq!(n.poll(at(7_000), &mut out), 1);
    let e = out.packets().next().unwrap().to_vec();
    assert_eq!((e[9], e[20], e[21]), (1, 3, 3), "Port Unreachable");
    assert_eq!((src(&e).0, dst(&e).0), (PUB, SRV));
    assert_eq!(&e[28..], &syn[..], "the SYN as it arrived");
    assert!(checksums_ok(&e));
    assert_eq!(n.poll(at(8_000), &mut out), 0, "exactly once");
    assert_eq!(n.counters().icmp_errors_sent, 1);
}

/// RFC 5382 REQ-4 simultaneous open, with no binding and with an address-dependent
/// filter that refuses the peer: the inside host's SYN makes the session, the held SYN
/// goes silently, the peer's SYN-ACK passes.
#[test]
fn simultaneous_open_succeeds() {
    for filtering in [Filtering::EndpointIndependent, Filtering::AddressDependent] {
        let mut n = nat(Nat44Config {
            filtering,
            ..config()
        });
        if filtering == Filtering::AddressDependent {
            fwd(&mut n, t(0), Outbound, tcp(IN_A, 5000, SRV2, 80, 0x02));
        }
        let mut syn = tcp(SRV, 4000, PUB, 5000, 0x02);
        assert_eq!(
            n.process(t(1), Inbound, &mut syn),
            Emit::Drop(DropReason::SynHeld)
        );
        let o = fwd(&mut n, t(2), Outbound, tcp(IN_A, 5000, SRV, 4000, 0x02));
        assert_eq!(src(&o), (PUB, 5000));
        let mut out = crate::mode::Output::new();
        assert_eq!(n.poll(t(30), &mut out), 0, "the held SYN went silently");
        let r = fwd(&mut n, t(3), Inbound, tcp(SRV, 4000, PUB, 5000, 0x12));
        assert_eq!(dst(&r), (IN_A, 5000));
        assert_eq!(n.counters().icmp_errors_sent, 0);
    }
}

/// At most `max_simultaneous_opens` held; `drop_externally_initiated_tcp` holds none.
#[test]
fn held_syns_are_bounded_and_can_be_refused() {
    let mut n = nat(Nat44Config {
        max_simultaneous_opens: 1,
        ..config()
    });
    let mut a = tcp(SRV, 1000, PUB, 5000, 0x02);
    let mut b = tcp(SRV, 1001, PUB, 5000, 0x02);
    assert_eq!(
        n.process(t(1), Inbound, &mut a),
        Emit::Drop(DropReason::SynHeld)
    );
    assert_eq!(
        n.process(t(1), Inbound, &mut b),
        Emit::Drop(DropReason::SynHoldFull)
    );
    let mut n = nat(Nat44Config {
        drop_externally_initiated_tcp: true,
        ..config()
    });
    let mut a = tcp(SRV, 1000, PUB, 5000, 0x02);
    assert_eq!(
        n.process(t(1), Inbound, &mut a),
        Emit::Drop(DropReason::NoMapping)
    );
    assert_eq!(n.poll(t(10), &mut crate::mode::Output::new()), 0);
    let mut cfg = config();
    cfg.max_simultaneous_opens = 1_000_000;
    assert!(
        Nat44::new(cfg).is_err(),
        "bounded by the configuration check"
    );
}

// Table occupancy for metrics.
#[test]
fn occupancy_follows_sessions_created_and_expired_without_a_walk() {
    let mut cfg = config();
    cfg.max_sessions = 8;
    let mut n = nat(cfg);
    let o = n.shared.occupancy();
    assert_eq!((o.capacity, o.live, o.dead_pending), (8, 0, 0));
    fwd(&mut n, t(0), Outbound, udp(IN_A, 5000, SRV, 53));
    fwd(&mut n, t(0), Outbound, udp(IN_B, 5000, SRV, 53));
    assert_eq!(n.shared.occupancy().live, 2);
    assert_eq!(n.shared.occupancy().live, n.session_count());
    n.handle_timeout(t(301));
    let o = n.shared.occupancy();
    assert_eq!(o.live, 0, "{o:?}");
    assert_eq!(o.live, n.session_count());
}
