//! The wire views (`crates/wire`) on arbitrary bytes: once `new_checked` accepts a
//! buffer, every accessor stays inside it, what a setter writes its getter reads back,
//! and a filled checksum verifies both by the view and by an independent RFC 1071 sum.

use std::net::{Ipv4Addr, Ipv6Addr};

use wire::checksum;
use wire::{
    EtherType, EthernetFrame, Icmpv4Packet, Icmpv4Type, Icmpv6Packet, Icmpv6Type, IpProtocol,
    Ipv4Packet, Ipv6Packet, TcpPacket, UdpPacket,
};

/// Addresses taken from the input's first bytes (so the sums vary with it).
fn addrs(data: &[u8]) -> ([u8; 4], [u8; 4], [u8; 16], [u8; 16]) {
    let mut b = [0u8; 40];
    for (d, s) in b.iter_mut().zip(data.iter().rev()) {
        *d = *s;
    }
    let s4 = [b[0], b[1], b[2], b[3]];
    let d4 = [b[4], b[5], b[6], b[7]];
    let mut s6 = [0u8; 16];
    let mut d6 = [0u8; 16];
    s6.copy_from_slice(&b[8..24]);
    d6.copy_from_slice(&b[24..40]);
    (s4, d4, s6, d6)
}

/// Whether the bytes sum (with the pseudo-header `ph`) to a valid Internet checksum,
/// computed without `wire::checksum`.
fn sums_to_ones(ph: &[&[u8]], data: &[u8]) -> bool {
    let mut s: u64 = 0;
    for part in ph.iter().chain(std::iter::once(&data)) {
        for c in part.chunks(2) {
            s += u64::from(c[0]) << 8 | u64::from(*c.get(1).unwrap_or(&0));
        }
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s == 0xffff
}

/// Runs every view over `data` (and over `data` with its first byte made a plausible
/// version nibble, so the IP views get past it).
pub fn check(data: &[u8]) {
    ethernet(data);
    let mut v = data.to_vec();
    if let Some(b) = v.first_mut() {
        *b = 0x40 | (*b & 0x0f).max(5);
    }
    ipv4(&v);
    if let Some(b) = v.first_mut() {
        *b = 0x60 | (*b & 0x0f);
    }
    ipv6(&v);
    ipv4(data);
    ipv6(data);
    let (s4, d4, s6, d6) = addrs(data);
    udp(data, s4, d4, &s6, &d6);
    tcp(data, s4, d4, &s6, &d6);
    icmpv4(data);
    icmpv6(data, &s6, &d6);
    incremental(data);
}

fn ethernet(data: &[u8]) {
    let Ok(f) = EthernetFrame::new_checked(data) else {
        return;
    };
    let (hl, payload) = (f.header_len(), f.payload());
    assert!(hl == 14 || hl == 18);
    assert_eq!(f.is_tagged(), hl == 18);
    assert_eq!(f.vlan_id().is_some(), f.is_tagged());
    assert_eq!(
        payload,
        &data[hl..],
        "ethernet payload is what follows the header"
    );
    let _ = (f.dst_addr(), f.src_addr(), f.ethertype());
    let mut v = data.to_vec();
    let mut f = EthernetFrame::new_checked(&mut v[..]).expect("accepted once");
    f.set_dst_addr([1, 2, 3, 4, 5, 6]);
    f.set_src_addr([7, 8, 9, 10, 11, 12]);
    assert_eq!(f.dst_addr(), [1, 2, 3, 4, 5, 6]);
    assert_eq!(f.src_addr(), [7, 8, 9, 10, 11, 12]);
    if !f.is_tagged() {
        for t in [EtherType::Ipv4, EtherType::Ipv6, EtherType::Arp] {
            f.set_ethertype(t);
            assert_eq!(f.ethertype(), t, "ethertype set then read");
        }
    }
    let _ = f.payload_mut().len();
}

fn ipv4(data: &[u8]) {
    for embedded in [false, true] {
        let p = if embedded {
            Ipv4Packet::new_checked_embedded(data)
        } else {
            Ipv4Packet::new_checked(data)
        };
        let Ok(p) = p else { continue };
        let hl = p.header_len();
        assert!((20..=60).contains(&hl) && hl <= data.len());
        assert_eq!(p.header(), &data[..hl]);
        assert_eq!(p.options(), &data[20..hl]);
        assert!(hl + p.payload().len() <= data.len());
        assert_eq!(p.payload(), &data[hl..hl + p.payload().len()]);
        if !embedded {
            assert_eq!(hl + p.payload().len(), usize::from(p.total_len()));
        }
        assert_eq!(p.src_addr(), Ipv4Addr::from(p.src_bytes()));
        assert_eq!(p.is_fragment(), p.more_frags() || p.frag_offset() != 0);
        assert_eq!(
            p.verify_checksum(),
            sums_to_ones(&[], p.header()),
            "IPv4 header checksum: the view and RFC 1071 disagree"
        );
        let _ = (p.version(), p.dscp_ecn(), p.ident(), p.ttl(), p.checksum());

        let mut v = data.to_vec();
        let mut q = Ipv4Packet::new_unchecked(&mut v[..]);
        let b = |i: usize| data.get(i).copied().unwrap_or(0x5a);
        let (ttl, ident, tos) = (b(1), u16::from_be_bytes([b(2), b(3)]), b(4));
        let off = u16::from_be_bytes([b(5), b(6)]) & 0x1fff;
        let (df, mf) = (b(7) & 1 == 1, b(7) & 2 == 2);
        q.set_ttl(ttl);
        q.set_ident(ident);
        q.set_dscp_ecn(tos);
        q.set_flags_and_offset(df, mf, off << 3);
        q.set_protocol(IpProtocol::from(b(8)));
        q.set_src_addr(Ipv4Addr::new(b(9), 1, 2, 3));
        q.set_dst_addr(Ipv4Addr::new(4, 5, 6, b(10)));
        assert_eq!(
            (q.ttl(), q.ident(), q.dscp_ecn(), q.frag_offset()),
            (ttl, ident, tos, off << 3)
        );
        assert_eq!((q.dont_frag(), q.more_frags()), (df, mf));
        assert_eq!(u8::from(q.protocol()), b(8));
        assert_eq!(q.src_addr(), Ipv4Addr::new(b(9), 1, 2, 3));
        assert_eq!(q.dst_addr(), Ipv4Addr::new(4, 5, 6, b(10)));
        q.fill_checksum();
        assert!(q.verify_checksum(), "a filled IPv4 checksum verifies");
        assert!(sums_to_ones(&[], q.header()), "and by RFC 1071");
        // The setters touched no byte outside the header.
        assert_eq!(&v[hl..], &data[hl..]);
    }
}

fn ipv6(data: &[u8]) {
    for embedded in [false, true] {
        let p = if embedded {
            Ipv6Packet::new_checked_embedded(data)
        } else {
            Ipv6Packet::new_checked(data)
        };
        let Ok(p) = p else { continue };
        let payload = p.payload();
        assert!(40 + payload.len() <= data.len());
        assert_eq!(payload, &data[40..40 + payload.len()]);
        if !embedded {
            assert_eq!(payload.len(), usize::from(p.payload_len()));
        }
        if let Ok(up) = p.upper_layer() {
            assert!(
                up.offset >= 40 && up.offset <= 40 + payload.len(),
                "upper layer at {} outside the packet",
                up.offset
            );
            if let Some(f) = up.fragment {
                assert!(f.header_offset >= 40 && f.header_offset + 8 <= 40 + payload.len());
            }
        }
        assert_eq!(p.dst_addr(), Ipv6Addr::from(p.dst_bytes()));
        let _ = (
            p.traffic_class(),
            p.flow_label(),
            p.next_header(),
            p.hop_limit(),
        );

        let mut v = data.to_vec();
        let mut q = Ipv6Packet::new_unchecked(&mut v[..]);
        let b = |i: usize| data.get(i).copied().unwrap_or(0xa5);
        let flow = u32::from_be_bytes([0, b(1), b(2), b(3)]) & 0xf_ffff;
        q.set_traffic_class(b(4));
        q.set_flow_label(flow);
        q.set_hop_limit(b(5));
        q.set_next_header(IpProtocol::from(b(6)));
        q.set_src_addr(Ipv6Addr::from([b(7); 16]));
        q.set_dst_addr(Ipv6Addr::from([b(8); 16]));
        assert_eq!(
            (q.traffic_class(), q.flow_label(), q.hop_limit()),
            (b(4), flow, b(5))
        );
        assert_eq!(
            q.version(),
            6,
            "traffic class and flow label keep the version"
        );
        assert_eq!(u8::from(q.next_header()), b(6));
        assert_eq!(q.src_bytes(), [b(7); 16]);
        assert_eq!(q.dst_bytes(), [b(8); 16]);
        assert_eq!(&v[40..], &data[40..]);
    }
}

fn udp(data: &[u8], s4: [u8; 4], d4: [u8; 4], s6: &[u8; 16], d6: &[u8; 16]) {
    let Ok(u) = UdpPacket::new_checked(data) else {
        return;
    };
    let len = usize::from(u.len());
    assert!((8..=data.len()).contains(&len));
    assert_eq!(
        u.payload(),
        &data[8..len],
        "UDP payload ends at its length field"
    );
    let _ = (u.src_port(), u.dst_port(), u.checksum());
    let mut v = data.to_vec();
    let mut u = UdpPacket::new_checked(&mut v[..]).expect("accepted once");
    u.set_src_port(0x1234);
    u.set_dst_port(0x4321);
    assert_eq!((u.src_port(), u.dst_port()), (0x1234, 0x4321));
    u.fill_checksum_v4(s4, d4);
    assert!(u.verify_checksum_v4(s4, d4));
    assert_ne!(
        u.checksum(),
        0,
        "RFC 768: a computed zero is sent as 0xffff"
    );
    let l = (len as u16).to_be_bytes();
    assert!(sums_to_ones(&[&s4, &d4, &[0, 17], &l], &v[..len]));
    let mut u = UdpPacket::new_checked(&mut v[..]).expect("accepted once");
    u.fill_checksum_v6(s6, d6);
    assert!(u.verify_checksum_v6(s6, d6));
    let l = (len as u32).to_be_bytes();
    assert!(sums_to_ones(&[s6, d6, &l, &[0, 0, 0, 17]], &v[..len]));
}

fn tcp(data: &[u8], s4: [u8; 4], d4: [u8; 4], s6: &[u8; 16], d6: &[u8; 16]) {
    let Ok(t) = TcpPacket::new_checked(data) else {
        return;
    };
    let hl = t.header_len();
    assert!((20..=60).contains(&hl) && hl <= data.len());
    assert_eq!(t.options(), &data[20..hl]);
    assert_eq!(t.payload(), &data[hl..]);
    assert_eq!(t.syn(), t.flags() & 0x02 != 0);
    let _ = (
        t.seq_number(),
        t.ack_number(),
        t.window_len(),
        t.urgent_at(),
    );
    let mut v = data.to_vec();
    let mut t = TcpPacket::new_checked(&mut v[..]).expect("accepted once");
    let b = |i: usize| data.get(i).copied().unwrap_or(0x77);
    let seq = u32::from_be_bytes([b(0), b(1), b(2), b(3)]);
    t.set_seq_number(seq);
    t.set_ack_number(!seq);
    t.set_flags(b(4));
    t.set_window_len(u16::from(b(5)) << 8);
    t.set_src_port(7);
    t.set_dst_port(8);
    assert_eq!((t.seq_number(), t.ack_number()), (seq, !seq));
    assert_eq!(t.flags(), b(4));
    assert_eq!(t.header_len(), hl, "flags keep the data offset");
    assert_eq!((t.src_port(), t.dst_port()), (7, 8));
    t.fill_checksum_v4(s4, d4);
    assert!(t.verify_checksum_v4(s4, d4));
    let l = (v.len() as u16).to_be_bytes();
    if v.len() <= usize::from(u16::MAX) {
        assert!(sums_to_ones(&[&s4, &d4, &[0, 6], &l], &v));
    }
    let mut t = TcpPacket::new_checked(&mut v[..]).expect("accepted once");
    t.fill_checksum_v6(s6, d6);
    assert!(t.verify_checksum_v6(s6, d6));
    let l = (v.len() as u32).to_be_bytes();
    assert!(sums_to_ones(&[s6, d6, &l, &[0, 0, 0, 6]], &v));
}

fn icmpv4(data: &[u8]) {
    let Ok(i) = Icmpv4Packet::new_checked(data) else {
        return;
    };
    assert_eq!(i.data(), &data[8..]);
    assert_eq!(i.verify_checksum(), sums_to_ones(&[], data));
    assert!(!(i.is_error() && i.is_query()));
    let _ = (
        i.msg_type(),
        i.msg_code(),
        i.echo_ident(),
        i.mtu(),
        i.pointer(),
    );
    let mut v = data.to_vec();
    let mut i = Icmpv4Packet::new_checked(&mut v[..]).expect("accepted once");
    let t = Icmpv4Type::from(data[0] ^ 0x08);
    i.set_msg_type(t);
    i.set_msg_code(data[1]);
    i.set_echo_ident(0xbeef);
    i.set_echo_seq_no(0x0102);
    assert_eq!((i.msg_type(), i.msg_code()), (t, data[1]));
    assert_eq!((i.echo_ident(), i.echo_seq_no()), (0xbeef, 0x0102));
    assert_eq!(i.rest_of_header(), 0xbeef_0102);
    i.fill_checksum();
    assert!(i.verify_checksum());
    assert!(sums_to_ones(&[], &v));
}

fn icmpv6(data: &[u8], s6: &[u8; 16], d6: &[u8; 16]) {
    let Ok(i) = Icmpv6Packet::new_checked(data) else {
        return;
    };
    assert_eq!(i.data(), &data[8..]);
    assert!(!(i.is_error() && i.is_query()));
    let _ = (
        i.msg_type(),
        i.msg_code(),
        i.mtu(),
        i.pointer(),
        i.checksum(),
    );
    let mut v = data.to_vec();
    let mut i = Icmpv6Packet::new_checked(&mut v[..]).expect("accepted once");
    let t = Icmpv6Type::from(data[0] ^ 0x80);
    i.set_msg_type(t);
    i.set_mtu(0x0001_0500);
    assert_eq!(i.msg_type(), t);
    assert_eq!((i.mtu(), i.pointer()), (0x0001_0500, 0x0001_0500));
    i.fill_checksum(s6, d6);
    assert!(i.verify_checksum(s6, d6));
    let l = (v.len() as u32).to_be_bytes();
    if v.len() <= usize::from(u16::MAX) {
        assert!(sums_to_ones(&[s6, d6, &l, &[0, 0, 0, 58]], &v));
    }
}

/// RFC 1624's incremental updates agree with a full recompute: change 16 bits (and
/// 32, and a byte run) of a checksummed buffer both ways.
fn incremental(data: &[u8]) {
    if data.len() < 8 {
        return;
    }
    let mut v = data.to_vec();
    v[0] = 0;
    v[1] = 0;
    let c = checksum::checksum(&v);
    v[0..2].copy_from_slice(&c.to_be_bytes());
    let full = |v: &[u8]| {
        let mut w = v.to_vec();
        w[0] = 0;
        w[1] = 0;
        checksum::checksum(&w)
    };
    let (old16, new16) = (
        u16::from_be_bytes([v[2], v[3]]),
        u16::from_be_bytes([v[3], v[2]]) ^ 0x5555,
    );
    v[2..4].copy_from_slice(&new16.to_be_bytes());
    let inc = checksum::update16(c, old16, new16);
    let oracle = full(&v);
    // 0x0000 and 0xffff are the same one's-complement value: accept either spelling.
    assert!(
        inc == oracle || (inc | oracle) == 0xffff && (inc & oracle) == 0,
        "update16 {inc:#06x} != recompute {oracle:#06x}"
    );
    let c = oracle;
    let old32 = [v[4], v[5], v[6], v[7]];
    let new32 = [v[7] ^ 0xa5, v[6], v[5], v[4] ^ 0x0f];
    v[4..8].copy_from_slice(&new32);
    let inc = checksum::update32(c, old32, new32);
    let oracle = full(&v);
    assert!(
        inc == oracle || (inc | oracle) == 0xffff && (inc & oracle) == 0,
        "update32 {inc:#06x} != recompute {oracle:#06x}"
    );
}
