//! The crate-wide contract, tested from outside: once `new_checked` (or
//! `new_checked_embedded`) has accepted a buffer, no accessor, setter or
//! `upper_layer` walk panics, whatever the bytes; and checksums filled by the
//! views verify.
//!
//! Every view is exercised on (a) every prefix of a valid packet, (b) random
//! bytes, (c) random bytes behind a plausible header, (d) random IPv6
//! extension chains, (e) whole Ethernet frames parsed down to layer 4 and
//! into ICMP quotes, the way the engine will.

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use wire::*;

// ---------------------------------------------------------------- exercisers

fn exercise_ethernet(buf: &[u8]) {
    let Ok(f) = EthernetFrame::new_checked(buf) else {
        return;
    };
    let _ = (
        f.dst_addr(),
        f.src_addr(),
        f.vlan_id(),
        f.ethertype(),
        f.is_tagged(),
    );
    assert!(f.header_len() + f.payload().len() <= buf.len());
    let mut v = buf.to_vec();
    let mut f = EthernetFrame::new_checked(&mut v[..]).unwrap();
    f.set_dst_addr([1; 6]);
    f.set_src_addr([2; 6]);
    f.payload_mut().iter_mut().for_each(|b| *b ^= 0xff);
    for t in [EtherType::Vlan, EtherType::Ipv6, EtherType::Unknown(0x88a8)] {
        f.set_ethertype(t);
        let _ = (
            f.vlan_id(),
            f.ethertype(),
            f.header_len(),
            f.payload().len(),
        );
        let _ = f.payload_mut().len();
    }
    let _ = f.into_inner();
}

fn ipv4_getters<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) {
    let _ = (
        p.version(),
        p.header_len(),
        p.dscp_ecn(),
        p.total_len(),
        p.ident(),
    );
    let _ = (
        p.dont_frag(),
        p.more_frags(),
        p.frag_offset(),
        p.is_fragment(),
    );
    let _ = (
        p.ttl(),
        p.protocol(),
        p.checksum(),
        p.src_addr(),
        p.dst_addr(),
    );
    let _ = (
        p.src_bytes(),
        p.dst_bytes(),
        p.options(),
        p.header(),
        p.payload(),
    );
    let _ = p.verify_checksum();
}

fn exercise_ipv4(buf: &[u8], embedded: bool) {
    let p = if embedded {
        Ipv4Packet::new_checked_embedded(buf)
    } else {
        Ipv4Packet::new_checked(buf)
    };
    let Ok(p) = p else { return };
    ipv4_getters(&p);
    assert!(p.header_len() >= 20 && p.header_len() <= buf.len());
    assert!(p.header_len() + p.payload().len() <= buf.len());
    if !embedded {
        assert_eq!(
            p.header_len() + p.payload().len(),
            usize::from(p.total_len())
        );
    }
    let mut v = buf.to_vec();
    let mut p = Ipv4Packet::new_unchecked(&mut v[..]);
    p.set_ttl(1);
    p.set_ident(2);
    p.set_dscp_ecn(3);
    p.set_flags_and_offset(true, true, 0xFFFF);
    p.set_protocol(IpProtocol::Unknown(200));
    p.set_src_addr(Ipv4Addr::BROADCAST);
    p.set_dst_addr(Ipv4Addr::LOCALHOST);
    p.fill_checksum();
    assert!(p.verify_checksum());
    p.set_checksum(0);
    let _ = (p.payload_mut().len(), p.header_mut().len());
    for (hl, tl) in [(60, u16::MAX), (0, 0), (24, 1)] {
        p.set_header_len(hl);
        p.set_total_len(tl);
        ipv4_getters(&p);
        p.fill_checksum();
        let _ = (p.payload_mut().len(), p.header_mut().len());
    }
    p.set_version(9);
    ipv4_getters(&p);
}

fn ipv6_getters<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) {
    let _ = (
        p.version(),
        p.traffic_class(),
        p.flow_label(),
        p.payload_len(),
    );
    let _ = (p.next_header(), p.hop_limit(), p.src_addr(), p.dst_addr());
    let _ = (p.src_bytes(), p.dst_bytes(), p.payload());
    if let Ok(up) = p.upper_layer() {
        assert!(up.offset >= 40 && up.offset <= p.as_ref().len());
        assert!(up.offset <= 40 + usize::from(p.payload_len()));
        if let Some(f) = up.fragment {
            assert!(f.header_offset + 8 <= up.offset);
        }
    }
}

fn exercise_ipv6(buf: &[u8], embedded: bool) {
    let p = if embedded {
        Ipv6Packet::new_checked_embedded(buf)
    } else {
        Ipv6Packet::new_checked(buf)
    };
    let Ok(p) = p else { return };
    ipv6_getters(&p);
    assert!(40 + p.payload().len() <= buf.len());
    let mut v = buf.to_vec();
    let mut p = Ipv6Packet::new_unchecked(&mut v[..]);
    p.set_traffic_class(0xff);
    p.set_flow_label(u32::MAX);
    p.set_hop_limit(0);
    p.set_src_addr(Ipv6Addr::LOCALHOST);
    p.set_dst_addr(Ipv6Addr::UNSPECIFIED);
    p.payload_mut()
        .iter_mut()
        .for_each(|b| *b = b.wrapping_add(1));
    for nh in [0u8, 43, 44, 51, 59, 60, 6] {
        p.set_next_header(IpProtocol::from(nh));
        p.set_payload_len(u16::MAX);
        ipv6_getters(&p);
        let _ = p.payload_mut().len();
    }
    p.set_version(4);
    ipv6_getters(&p);
}

fn tcp_getters<T: AsRef<[u8]>>(p: &TcpPacket<T>) {
    let _ = (p.src_port(), p.dst_port(), p.seq_number(), p.ack_number());
    let _ = (
        p.header_len(),
        p.flags(),
        p.syn(),
        p.ack(),
        p.fin(),
        p.rst(),
        p.psh(),
    );
    let _ = (
        p.window_len(),
        p.checksum(),
        p.urgent_at(),
        p.options(),
        p.payload(),
    );
    let _ = p.verify_checksum_v4([1; 4], [2; 4]);
    let _ = p.verify_checksum_v6(&[1; 16], &[2; 16]);
}

fn exercise_tcp(buf: &[u8]) {
    let Ok(p) = TcpPacket::new_checked(buf) else {
        return;
    };
    tcp_getters(&p);
    assert_eq!(p.header_len() + p.payload().len(), buf.len());
    let mut v = buf.to_vec();
    let mut p = TcpPacket::new_unchecked(&mut v[..]);
    p.set_src_port(1);
    p.set_dst_port(2);
    p.set_seq_number(3);
    p.set_ack_number(4);
    p.set_flags(0xff);
    p.set_window_len(5);
    p.set_urgent_at(6);
    p.fill_checksum_v4([1; 4], [2; 4]);
    assert!(p.verify_checksum_v4([1; 4], [2; 4]));
    p.fill_checksum_v6(&[1; 16], &[2; 16]);
    assert!(p.verify_checksum_v6(&[1; 16], &[2; 16]));
    p.set_checksum(0);
    for hl in [60, 0, 21] {
        p.set_header_len(hl);
        tcp_getters(&p);
        let _ = (p.options_mut().len(), p.payload_mut().len());
    }
}

fn udp_getters<T: AsRef<[u8]>>(p: &UdpPacket<T>) {
    let _ = (
        p.src_port(),
        p.dst_port(),
        p.len(),
        p.checksum(),
        p.payload(),
    );
    let _ = p.verify_checksum_v4([1; 4], [2; 4]);
    let _ = p.verify_checksum_v6(&[1; 16], &[2; 16]);
}

fn exercise_udp(buf: &[u8]) {
    let Ok(p) = UdpPacket::new_checked(buf) else {
        return;
    };
    udp_getters(&p);
    assert_eq!(8 + p.payload().len(), usize::from(p.len()));
    let mut v = buf.to_vec();
    let mut p = UdpPacket::new_unchecked(&mut v[..]);
    p.set_src_port(1);
    p.set_dst_port(2);
    p.fill_checksum_v4([1; 4], [2; 4]);
    assert!(p.verify_checksum_v4([1; 4], [2; 4]));
    assert_ne!(p.checksum(), 0);
    p.fill_checksum_v6(&[1; 16], &[2; 16]);
    assert!(p.verify_checksum_v6(&[1; 16], &[2; 16]));
    p.set_checksum(0);
    for l in [u16::MAX, 0, 9] {
        p.set_len(l);
        udp_getters(&p);
        p.fill_checksum_v4([1; 4], [2; 4]);
        p.fill_checksum_v6(&[1; 16], &[2; 16]);
        let _ = p.payload_mut().len();
    }
}

fn exercise_icmpv4(buf: &[u8]) {
    let Ok(p) = Icmpv4Packet::new_checked(buf) else {
        return;
    };
    let _ = (
        p.msg_type(),
        p.msg_code(),
        p.checksum(),
        p.echo_ident(),
        p.echo_seq_no(),
    );
    let _ = (
        p.rest_of_header(),
        p.pointer(),
        p.mtu(),
        p.is_error(),
        p.is_query(),
    );
    let _ = p.verify_checksum();
    assert_eq!(8 + p.data().len(), buf.len());
    if p.is_error() {
        exercise_ipv4(p.data(), true);
    }
    let mut v = buf.to_vec();
    let mut p = Icmpv4Packet::new_unchecked(&mut v[..]);
    p.set_msg_type(Icmpv4Type::Unknown(77));
    p.set_msg_code(1);
    p.set_echo_ident(2);
    p.set_echo_seq_no(3);
    p.set_rest_of_header(4);
    p.set_pointer(5);
    p.set_mtu(6);
    p.data_mut().iter_mut().for_each(|b| *b = !*b);
    p.fill_checksum();
    assert!(p.verify_checksum());
    p.set_checksum(1);
}

fn exercise_icmpv6(buf: &[u8]) {
    let Ok(p) = Icmpv6Packet::new_checked(buf) else {
        return;
    };
    let _ = (
        p.msg_type(),
        p.msg_code(),
        p.checksum(),
        p.echo_ident(),
        p.echo_seq_no(),
    );
    let _ = (
        p.rest_of_header(),
        p.pointer(),
        p.mtu(),
        p.is_error(),
        p.is_query(),
    );
    let _ = p.verify_checksum(&[1; 16], &[2; 16]);
    assert_eq!(8 + p.data().len(), buf.len());
    if p.is_error() {
        exercise_ipv6(p.data(), true);
    }
    let mut v = buf.to_vec();
    let mut p = Icmpv6Packet::new_unchecked(&mut v[..]);
    p.set_msg_type(Icmpv6Type::Unknown(200));
    p.set_msg_code(1);
    p.set_echo_ident(2);
    p.set_echo_seq_no(3);
    p.set_rest_of_header(4);
    p.set_pointer(5);
    p.set_mtu(6);
    p.data_mut().iter_mut().for_each(|b| *b = !*b);
    p.fill_checksum(&[1; 16], &[2; 16]);
    assert!(p.verify_checksum(&[1; 16], &[2; 16]));
    p.set_checksum(1);
}

/// Every view, on the same bytes.
fn exercise_all(buf: &[u8]) {
    exercise_ethernet(buf);
    exercise_ipv4(buf, false);
    exercise_ipv4(buf, true);
    exercise_ipv6(buf, false);
    exercise_ipv6(buf, true);
    exercise_tcp(buf);
    exercise_udp(buf);
    exercise_icmpv4(buf);
    exercise_icmpv6(buf);
}

/// Layer 4 of an IP packet, by protocol.
fn exercise_l4(proto: IpProtocol, l4: &[u8]) {
    match proto {
        IpProtocol::Tcp => exercise_tcp(l4),
        IpProtocol::Udp => exercise_udp(l4),
        IpProtocol::Icmp => exercise_icmpv4(l4),
        IpProtocol::Icmpv6 => exercise_icmpv6(l4),
        _ => {}
    }
}

/// Parses a frame down the stack the way the engine will.
fn parse_stack(frame: &[u8]) {
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return;
    };
    match eth.ethertype() {
        EtherType::Ipv4 => {
            if let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) {
                exercise_l4(ip.protocol(), ip.payload());
            }
        }
        EtherType::Ipv6 => {
            if let Ok(ip) = Ipv6Packet::new_checked(eth.payload()) {
                if let Ok(up) = ip.upper_layer() {
                    let end = 40 + usize::from(ip.payload_len());
                    exercise_l4(up.protocol, &ip.as_ref()[up.offset..end]);
                }
            }
        }
        _ => {}
    }
}

// ------------------------------------------------------------ valid packets

fn ipv4_udp() -> Vec<u8> {
    let mut v = vec![
        0x46, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 1, 1, 1, 0,
    ];
    v.extend_from_slice(&[0x30, 0x39, 0, 53, 0, 12, 0, 0, b'p', b'i', b'n', b'g']);
    let n = v.len() as u16;
    let mut p = Ipv4Packet::new_unchecked(&mut v[..]);
    p.set_total_len(n);
    p.fill_checksum();
    UdpPacket::new_unchecked(p.payload_mut()).fill_checksum_v4([10, 0, 0, 1], [10, 0, 0, 2]);
    v
}

fn ipv6_frag_tcp() -> Vec<u8> {
    let mut v = vec![0x60, 0, 0, 0, 0, 0, 60, 64];
    v.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    v.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    v.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0]); // Destination Options
    v.extend_from_slice(&[6, 0, 0, 1, 0, 0, 0, 42]); // Fragment, first, M
    v.extend_from_slice(&[
        0, 80, 0x9c, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 1, 0, 0, 0, 0, 0,
    ]);
    let n = (v.len() - 40) as u16;
    Ipv6Packet::new_unchecked(&mut v[..]).set_payload_len(n);
    v
}

fn icmpv4_error() -> Vec<u8> {
    let mut v = vec![11, 0, 0, 0, 0, 0, 0, 0];
    v.extend_from_slice(&ipv4_udp()[..32]);
    Icmpv4Packet::new_unchecked(&mut v[..]).fill_checksum();
    v
}

fn icmpv6_error() -> Vec<u8> {
    let mut v = vec![1, 4, 0, 0, 0, 0, 0, 0];
    v.extend_from_slice(&ipv6_frag_tcp()[..60]);
    Icmpv6Packet::new_unchecked(&mut v[..]).fill_checksum(&[3; 16], &[4; 16]);
    v
}

fn frame(ethertype: u16, payload: &[u8], tagged: bool) -> Vec<u8> {
    let mut v = vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
    if tagged {
        v.extend_from_slice(&[0x81, 0x00, 0x00, 0x2a]);
    }
    v.extend_from_slice(&ethertype.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

fn samples() -> Vec<Vec<u8>> {
    vec![
        ipv4_udp(),
        ipv6_frag_tcp(),
        icmpv4_error(),
        icmpv6_error(),
        frame(0x0800, &ipv4_udp(), false),
        frame(0x86dd, &ipv6_frag_tcp(), true),
        ipv4_udp()[24..].to_vec(),
        ipv6_frag_tcp()[56..].to_vec(),
    ]
}

#[test]
fn sample_packets_are_valid() {
    let v4 = ipv4_udp();
    let p = Ipv4Packet::new_checked(&v4[..]).unwrap();
    assert!(p.verify_checksum());
    let u = UdpPacket::new_checked(p.payload()).unwrap();
    assert!(u.verify_checksum_v4(p.src_bytes(), p.dst_bytes()));
    let v6 = ipv6_frag_tcp();
    let p = Ipv6Packet::new_checked(&v6[..]).unwrap();
    let up = p.upper_layer().unwrap();
    assert_eq!((up.protocol, up.offset), (IpProtocol::Tcp, 56));
    assert!(up.fragment.unwrap().more);
    assert!(Icmpv4Packet::new_checked(&icmpv4_error()[..])
        .unwrap()
        .verify_checksum());
    let e6 = icmpv6_error();
    assert!(Icmpv6Packet::new_checked(&e6[..])
        .unwrap()
        .verify_checksum(&[3; 16], &[4; 16]));
}

#[test]
fn every_prefix_of_every_sample() {
    for s in samples() {
        for n in 0..=s.len() {
            exercise_all(&s[..n]);
            parse_stack(&s[..n]);
        }
    }
}

#[test]
fn every_single_byte_corruption_of_every_sample() {
    for s in samples() {
        for i in 0..s.len() {
            for x in [0x00, 0x01, 0x0f, 0x45, 0x60, 0x80, 0xff] {
                let mut v = s.clone();
                v[i] = x;
                exercise_all(&v);
                parse_stack(&v);
            }
        }
    }
}

// ---------------------------------------------------------------- proptests

/// A random IPv6 extension chain: (next-header kind, length byte, fragment word).
fn ipv6_with_chain(
    chain: &[(u8, u8, u16)],
    last: u8,
    tail: &[u8],
    cut: usize,
    fix_len: bool,
) -> Vec<u8> {
    let first = chain.first().map_or(last, |c| c.0);
    let mut v = vec![0x60, 0, 0, 0, 0, 0, first, 64];
    v.extend_from_slice(&[0u8; 32]);
    for (i, &(_, len, frag)) in chain.iter().enumerate() {
        let kind = chain[i].0;
        let next = chain.get(i + 1).map_or(last, |c| c.0);
        let size = match kind {
            44 => 8,
            51 => (usize::from(len) + 2) * 4,
            _ => (usize::from(len) + 1) * 8,
        };
        let start = v.len();
        v.resize(start + size, 0);
        v[start] = next;
        v[start + 1] = len;
        v[start + 2..start + 4].copy_from_slice(&frag.to_be_bytes());
    }
    v.extend_from_slice(tail);
    if fix_len {
        let n = (v.len() - 40) as u16;
        Ipv6Packet::new_unchecked(&mut v[..]).set_payload_len(n);
    }
    v.truncate(cut.max(40).min(v.len()));
    v
}

fn ext_kind() -> impl Strategy<Value = u8> {
    prop_oneof![Just(0u8), Just(43), Just(44), Just(51), Just(60)]
}

fn last_kind() -> impl Strategy<Value = u8> {
    prop_oneof![
        Just(6u8),
        Just(17),
        Just(58),
        Just(59),
        Just(50),
        any::<u8>()
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        exercise_all(&data);
        parse_stack(&data);
    }

    #[test]
    fn random_bytes_behind_a_valid_header(
        which in 0usize..8,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        tail in proptest::collection::vec(any::<u8>(), 0..200),
        cut in any::<usize>(),
    ) {
        let samples = samples();
        let s = &samples[which];
        // Keep the header, replace what follows, flip a few header bytes.
        let keep = s.len().min(if which >= 4 { 38 } else { 24 });
        let mut v = s[..keep].to_vec();
        v.extend_from_slice(&tail);
        for (pos, x) in flips {
            let i = pos % v.len();
            v[i] = x;
        }
        v.truncate(cut % (v.len() + 1));
        exercise_all(&v);
        parse_stack(&v);
    }

    #[test]
    fn random_ipv6_extension_chains(
        chain in proptest::collection::vec((ext_kind(), 0u8..4, any::<u16>()), 0..11),
        last in last_kind(),
        tail in proptest::collection::vec(any::<u8>(), 0..40),
        cut in any::<usize>(),
        fix_len in any::<bool>(),
    ) {
        let v = ipv6_with_chain(&chain, last, &tail, cut, fix_len);
        exercise_ipv6(&v, false);
        exercise_ipv6(&v, true);
        let p = Ipv6Packet::new_checked_embedded(&v[..]).unwrap();
        let r = p.upper_layer();
        let hbh_late = chain.iter().skip(1).any(|c| c.0 == 0);
        if chain.len() > 8 && !hbh_late && r.is_ok() {
            // Only a non-first fragment may stop the walk early.
            prop_assert!(r.unwrap().fragment.is_some_and(|f| f.offset != 0));
        }
        if let Ok(up) = r {
            prop_assert!(up.offset <= v.len());
        }
        let mut icmp = vec![2, 0, 0, 0, 0, 0, 5, 0];
        icmp.extend_from_slice(&v);
        exercise_icmpv6(&icmp);
    }

    #[test]
    fn filled_checksums_verify(
        payload in proptest::collection::vec(any::<u8>(), 0..300),
        src4 in any::<[u8; 4]>(), dst4 in any::<[u8; 4]>(),
        src6 in any::<[u8; 16]>(), dst6 in any::<[u8; 16]>(),
        ports in any::<(u16, u16)>(), ident in any::<u16>(), doff in 5u8..16,
    ) {
        // TCP, with options so the header length varies.
        let hl = usize::from(doff) * 4;
        let mut t = vec![0u8; hl + payload.len()];
        t[hl..].copy_from_slice(&payload);
        let mut p = TcpPacket::new_unchecked(&mut t[..]);
        p.set_header_len(hl);
        p.set_src_port(ports.0);
        p.set_dst_port(ports.1);
        p.fill_checksum_v4(src4, dst4);
        let p = TcpPacket::new_checked(&t[..]).unwrap();
        prop_assert!(p.verify_checksum_v4(src4, dst4));
        let mut p = TcpPacket::new_checked(&mut t[..]).unwrap();
        p.fill_checksum_v6(&src6, &dst6);
        prop_assert!(p.verify_checksum_v6(&src6, &dst6));

        // UDP over both families: never a zero checksum.
        let mut u = vec![0u8; 8 + payload.len()];
        u[8..].copy_from_slice(&payload);
        let mut p = UdpPacket::new_unchecked(&mut u[..]);
        p.set_len((8 + payload.len()) as u16);
        p.set_src_port(ports.0);
        p.set_dst_port(ports.1);
        p.fill_checksum_v4(src4, dst4);
        prop_assert_ne!(p.checksum(), 0);
        prop_assert!(UdpPacket::new_checked(&u[..]).unwrap().verify_checksum_v4(src4, dst4));
        let mut p = UdpPacket::new_checked(&mut u[..]).unwrap();
        p.fill_checksum_v6(&src6, &dst6);
        prop_assert_ne!(p.checksum(), 0);
        prop_assert!(p.verify_checksum_v6(&src6, &dst6));

        // ICMPv4 echo and ICMPv6 echo.
        let mut i4 = vec![8u8, 0, 0, 0, 0, 0, 0, 0];
        i4.extend_from_slice(&payload);
        let mut p = Icmpv4Packet::new_checked(&mut i4[..]).unwrap();
        p.set_echo_ident(ident);
        p.fill_checksum();
        prop_assert!(p.verify_checksum());
        prop_assert_eq!(checksum::checksum(&i4), 0);
        let mut i6 = vec![128u8, 0, 0, 0, 0, 0, 0, 0];
        i6.extend_from_slice(&payload);
        let mut p = Icmpv6Packet::new_checked(&mut i6[..]).unwrap();
        p.set_echo_ident(ident);
        p.fill_checksum(&src6, &dst6);
        prop_assert!(p.verify_checksum(&src6, &dst6));

        // IPv4 header with options.
        let mut h = vec![0u8; hl];
        h[..hl].iter_mut().zip(payload.iter().cycle()).for_each(|(b, p)| *b = *p);
        let mut p = Ipv4Packet::new_unchecked(&mut h[..]);
        p.set_version(4);
        p.set_header_len(hl);
        p.set_total_len(hl as u16);
        p.fill_checksum();
        let p = Ipv4Packet::new_checked(&h[..]).unwrap();
        prop_assert!(p.verify_checksum());
    }

    #[test]
    fn nat44_rewrite_incremental_equals_fill(
        payload in proptest::collection::vec(any::<u8>(), 0..100),
        src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(), new_src in any::<[u8; 4]>(),
        sport in any::<u16>(), new_sport in any::<u16>(), udp in any::<bool>(),
    ) {
        // Rewrite (src, sport) as NAT44 does, updating the L4 checksum with
        // RFC 1624; it must equal a full recomputation.
        let mut seg = vec![0u8; 20 + payload.len()];
        seg[20..].copy_from_slice(&payload);
        if udp {
            let mut p = UdpPacket::new_unchecked(&mut seg[..]);
            p.set_len((20 + payload.len()) as u16);
            p.set_src_port(sport);
            p.fill_checksum_v4(src, dst);
            let c = checksum::udp4_update(p.checksum(), |c| {
                checksum::update16(checksum::update32(c, src, new_src), sport, new_sport)
            });
            p.set_src_port(new_sport);
            p.set_checksum(c);
            prop_assert!(p.verify_checksum_v4(new_src, dst));
            prop_assert_ne!(p.checksum(), 0);
        } else {
            let mut p = TcpPacket::new_unchecked(&mut seg[..]);
            p.set_header_len(20);
            p.set_src_port(sport);
            p.fill_checksum_v4(src, dst);
            let c = checksum::update16(checksum::update32(p.checksum(), src, new_src), sport, new_sport);
            p.set_src_port(new_sport);
            p.set_checksum(c);
            prop_assert!(p.verify_checksum_v4(new_src, dst));
            let mut full = seg.clone();
            TcpPacket::new_unchecked(&mut full[..]).fill_checksum_v4(new_src, dst);
            prop_assert_eq!(full, seg);
        }
    }
}
