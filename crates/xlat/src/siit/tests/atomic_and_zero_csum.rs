//! RFC 7915 §5.1.1 (the IPv4 Identification of a packet with an IPv6 Fragment header,
//! atomic fragments included, outer and quoted) and IPv6 UDP with checksum zero (RFC 8200
//! §8.1), IPv6 -> IPv4.

use super::*;

fn compute() -> SiitOptions {
    SiitOptions {
        compute_ipv6_udp_zero_csum: true,
        ..opts()
    }
}

/// A UDP segment with checksum 0, as an IPv6 sender must not send it.
fn zero_udp(payload: &[u8]) -> Vec<u8> {
    udp(4000, 53, payload)
}

#[test]
fn ipv6_udp_zero_checksum_is_dropped_by_default() {
    let seg = zero_udp(b"no checksum in IPv6");
    let pkt = ipv6(0, 17, 9, s6(), d6(), &seg);
    assert!(!SiitOptions::default().compute_ipv6_udp_zero_csum);
    assert_eq!(run64(&pkt, &opts()), Err(SiitDrop::Ipv6UdpZeroChecksum));
    assert_eq!(
        SiitDrop::Ipv6UdpZeroChecksum.as_str(),
        "ipv6_udp_zero_checksum"
    );
    // The same with a checksum translates (the check is only about zero).
    let (_, s6v) = seg_pair(17, &seg);
    assert!(run64(&ipv6(0, 17, 9, s6(), d6(), &s6v), &opts()).is_ok());
}

#[test]
fn ipv6_udp_zero_checksum_computed_when_asked() {
    let seg = zero_udp(b"fill me in");
    let (s4, _) = seg_pair(17, &seg);
    let out = run64(&ipv6(0, 17, 9, s6(), d6(), &seg), &compute()).unwrap();
    let v4 = Ipv4Packet::new_checked(&out[..]).unwrap();
    let mut h = h4(17);
    h.tos = 0;
    h.df = false;
    h.id = FIRST_ID;
    h.ttl = 8;
    // Exactly the IPv4 packet with the checksum an IPv4 sender would have computed.
    assert_eq!(out, ipv4(h, &[], &s4));
    let u = UdpPacket::new_checked(v4.payload()).unwrap();
    assert_ne!(u.checksum(), 0);
    assert!(u.verify_checksum_v4(S4.octets(), D4.octets()));
}

#[test]
fn ipv6_udp_zero_checksum_in_fragments() {
    let seg = zero_udp(&[0x5a; 64]);
    // A first fragment cannot be given a checksum (the rest of the datagram is elsewhere).
    let mut rest = frag6(17, 0, true, 0x0001_0002);
    rest.extend_from_slice(&seg[..48]);
    let first = ipv6(0, 44, 9, s6(), d6(), &rest);
    assert_eq!(
        run64(&first, &compute()),
        Err(SiitDrop::Ipv6UdpZeroChecksum)
    );
    assert_eq!(run64(&first, &opts()), Err(SiitDrop::Ipv6UdpZeroChecksum));
    // An atomic fragment is the whole datagram: computed when asked, dropped otherwise.
    let mut rest = frag6(17, 0, false, 0x0001_0002);
    rest.extend_from_slice(&seg);
    let atomic = ipv6(0, 44, 9, s6(), d6(), &rest);
    assert_eq!(run64(&atomic, &opts()), Err(SiitDrop::Ipv6UdpZeroChecksum));
    let out = run64(&atomic, &compute()).unwrap();
    let v4 = Ipv4Packet::new_checked(&out[..]).unwrap();
    assert_eq!(v4.ident(), 0x0002);
    assert!(UdpPacket::new_checked(v4.payload())
        .unwrap()
        .verify_checksum_v4(S4.octets(), D4.octets()));
    // A later fragment carries no checksum field: it passes untouched.
    let mut rest = frag6(17, 48, false, 0x0001_0002);
    rest.extend_from_slice(&seg[48..]);
    let out = run64(&ipv6(0, 44, 9, s6(), d6(), &rest), &opts()).unwrap();
    assert_eq!(&out[20..], &seg[48..]);
}

/// RFC 7915 §5.1.1: "Identification: Copied from the low-order 16 bits in the
/// Identification field in the Fragment Header. ... The IPv4 Don't Fragment (DF) flag is
/// cleared", for an atomic fragment (offset 0, M clear) like any other.
#[test]
fn atomic_fragment_identification_outer() {
    // Small and large (over 1260 bytes, where a packet without Fragment header gets DF).
    for size in [16usize, 1400] {
        let (s4, s6v) = seg_pair(17, &udp(7, 8, &vec![0x11; size]));
        let mut rest = frag6(17, 0, false, 0xCAFE_BEEF);
        rest.extend_from_slice(&s6v);
        let out = run64(&ipv6(0x10, 44, 9, s6(), d6(), &rest), &opts()).unwrap();
        let mut h = h4(17);
        h.tos = 0x10;
        h.id = 0xBEEF;
        h.df = false;
        h.ttl = 8;
        assert_eq!(out, ipv4(h, &[], &s4), "size {size}");
    }
    // An echo request in an atomic fragment.
    let mut m6 = echo(128, 1, 2, b"atomic ping");
    fill6(&mut m6, 58, s6(), d6());
    let mut rest = frag6(58, 0, false, 0x0000_4321);
    rest.extend_from_slice(&m6);
    let out = run64(&ipv6(0, 44, 9, s6(), d6(), &rest), &opts()).unwrap();
    let v4 = Ipv4Packet::new_checked(&out[..]).unwrap();
    assert_eq!(
        (v4.ident(), v4.dont_frag(), v4.more_frags()),
        (0x4321, false, false)
    );
    assert!(Icmpv4Packet::new_checked(v4.payload())
        .unwrap()
        .verify_checksum());
}

/// The ICMPv6 error itself in an atomic fragment, and an error quoting a packet that
/// carried one: both IPv4 headers take the Identification from their Fragment header.
#[test]
fn atomic_fragment_identification_icmp_error_outer_and_quoted() {
    // The quoted packet: D4's host (as d6) sent UDP to s6 in an atomic fragment.
    let seg = udp(5353, 33434, b"quoted");
    let mut q6seg = seg.clone();
    fill6(&mut q6seg, 17, d6(), s6());
    let mut qrest = frag6(17, 0, false, 0x7777_ABCD);
    qrest.extend_from_slice(&q6seg);
    let q6 = ipv6(0, 44, 3, d6(), s6(), &qrest);
    let mut m6 = icmp_err(1, 4, 0, &q6);
    fill6(&mut m6, 58, s6(), d6());
    let mut rest = frag6(58, 0, false, 0x0102_0304);
    rest.extend_from_slice(&m6);
    let out = run64(&ipv6(0, 44, 64, s6(), d6(), &rest), &opts()).unwrap();

    let v4 = Ipv4Packet::new_checked(&out[..]).unwrap();
    assert!(v4.verify_checksum());
    assert_eq!(
        (v4.ident(), v4.dont_frag(), v4.more_frags()),
        (0x0304, false, false)
    );
    let icmp = Icmpv4Packet::new_checked(v4.payload()).unwrap();
    assert!(icmp.verify_checksum());
    assert_eq!((out[20], out[21]), (3, 3));
    let q = Ipv4Packet::new_checked(&out[28..]).unwrap();
    assert!(q.verify_checksum());
    assert_eq!(
        (q.ident(), q.dont_frag(), q.more_frags()),
        (0xABCD, false, false)
    );
    assert_eq!(q.frag_offset(), 0);
    assert_eq!((q.src_addr(), q.dst_addr()), (D4, S4));
    // The Fragment header is gone from the quote: Total Length is the IPv4 datagram's.
    assert_eq!(usize::from(q.total_len()), 20 + seg.len());
    assert!(UdpPacket::new_checked(&out[48..])
        .unwrap()
        .verify_checksum_v4(D4.octets(), S4.octets()));
}
