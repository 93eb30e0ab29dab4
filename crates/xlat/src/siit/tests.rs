//! SIIT tests: expected packets are built field by field here, with a naive checksum of
//! their own, and compared byte for byte; `wire` views then re-verify every checksum.

use core::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use wire::{Icmpv4Packet, Icmpv6Packet, Ipv4Packet, Ipv6Packet, TcpPacket, UdpPacket};

use super::*;

mod atomic_and_zero_csum;
mod ident;
mod rfc4884;

const S4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const D4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);

/// RFC 6052 /96 with the well-known prefix 64:ff9b::/96.
fn map4(a: Ipv4Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::new(
        0x64,
        0xff9b,
        0,
        0,
        0,
        0,
        u16::from_be_bytes([o[0], o[1]]),
        u16::from_be_bytes([o[2], o[3]]),
    )
}

/// The inverse of [`map4`] (any address: the low 32 bits).
fn map6(a: Ipv6Addr) -> Ipv4Addr {
    let o = a.octets();
    Ipv4Addr::new(o[12], o[13], o[14], o[15])
}

fn inner46(s: Ipv4Addr, d: Ipv4Addr) -> Option<(Ipv6Addr, Ipv6Addr)> {
    Some((map4(s), map4(d)))
}

fn inner64(s: Ipv6Addr, d: Ipv6Addr) -> Option<(Ipv4Addr, Ipv4Addr)> {
    Some((map6(s), map6(d)))
}

/// An [`IdentSource`] for tests: one counter from `FIRST_ID` for every tuple, and the
/// tuple last asked about.
#[derive(Debug)]
struct Seq {
    next: core::cell::Cell<u16>,
    asked: core::cell::Cell<Option<(Ipv4Addr, Ipv4Addr, u8)>>,
}

/// The first Identification a fresh [`Seq`] gives.
const FIRST_ID: u16 = 0x1d00;

impl Default for Seq {
    fn default() -> Self {
        Seq {
            next: core::cell::Cell::new(FIRST_ID),
            asked: core::cell::Cell::new(None),
        }
    }
}

impl IdentSource for Seq {
    fn next_ident(&self, src: Ipv4Addr, dst: Ipv4Addr, proto: u8) -> u16 {
        self.asked.set(Some((src, dst, proto)));
        let id = self.next.get();
        self.next.set(id.wrapping_add(1));
        id
    }
}

fn s6() -> Ipv6Addr {
    map4(S4)
}

fn d6() -> Ipv6Addr {
    map4(D4)
}

fn opts() -> SiitOptions {
    SiitOptions {
        ipv6_mtu: 1500,
        ipv4_mtu: 1500,
        translate_udp_zero_csum: true,
        decrement_ttl: true,
        compute_ipv6_udp_zero_csum: false,
        tos_to_traffic_class: true,
        ..SiitOptions::default()
    }
}

/// Naive RFC 1071 checksum over the concatenation of `parts` (all but the last even).
fn naive(parts: &[&[u8]]) -> u16 {
    let bytes: Vec<u8> = parts.concat();
    let mut s: u32 = 0;
    for ch in bytes.chunks(2) {
        let w = if ch.len() == 2 {
            u16::from_be_bytes([ch[0], ch[1]])
        } else {
            u16::from_be_bytes([ch[0], 0])
        };
        s += u32::from(w);
        s = (s & 0xFFFF) + (s >> 16);
    }
    !(s as u16)
}

fn ph4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: usize) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&src.octets());
    v.extend_from_slice(&dst.octets());
    v.extend_from_slice(&[0, proto]);
    v.extend_from_slice(&(len as u16).to_be_bytes());
    v
}

fn ph6(src: Ipv6Addr, dst: Ipv6Addr, proto: u8, len: usize) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&src.octets());
    v.extend_from_slice(&dst.octets());
    v.extend_from_slice(&(len as u32).to_be_bytes());
    v.extend_from_slice(&[0, 0, 0, proto]);
    v
}

/// Where a transport checksum lives, by protocol.
fn csum_off(proto: u8) -> Option<usize> {
    match proto {
        6 => Some(16),
        17 => Some(6),
        1 | 58 => Some(2),
        _ => None,
    }
}

/// Fills the checksum of a transport segment / ICMP message for the given pseudo-header
/// (`None`: ICMPv4, no pseudo-header).
fn fill(seg: &mut [u8], proto: u8, ph: Option<Vec<u8>>) {
    let off = csum_off(proto).unwrap();
    seg[off] = 0;
    seg[off + 1] = 0;
    let mut c = match ph {
        Some(ph) => naive(&[&ph, seg]),
        None => naive(&[seg]),
    };
    if proto == 17 && c == 0 {
        c = 0xFFFF;
    }
    seg[off..off + 2].copy_from_slice(&c.to_be_bytes());
}

/// [`fill`] with the IPv6 pseudo-header of `seg` itself.
fn fill6(seg: &mut [u8], proto: u8, src: Ipv6Addr, dst: Ipv6Addr) {
    let ph = ph6(src, dst, proto, seg.len());
    fill(seg, proto, Some(ph));
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&sport.to_be_bytes());
    v.extend_from_slice(&dport.to_be_bytes());
    v.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    v.extend_from_slice(&[0, 0]);
    v.extend_from_slice(payload);
    v
}

fn tcp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&sport.to_be_bytes());
    v.extend_from_slice(&dport.to_be_bytes());
    v.extend_from_slice(&0x0102_0304u32.to_be_bytes()); // seq
    v.extend_from_slice(&0x0A0B_0C0Du32.to_be_bytes()); // ack
    v.extend_from_slice(&[0x50, 0x18, 0xFF, 0xFF, 0, 0, 0, 0]); // off, PSH|ACK, win, csum, urg
    v.extend_from_slice(payload);
    v
}

fn echo(ty: u8, id: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![ty, 0, 0, 0];
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(&seq.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// An ICMP error header + body (checksum left zero).
fn icmp_err(ty: u8, code: u8, rest: u32, body: &[u8]) -> Vec<u8> {
    let mut v = vec![ty, code, 0, 0];
    v.extend_from_slice(&rest.to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// IPv4 header fields of a test packet.
#[derive(Clone, Copy)]
struct H4 {
    tos: u8,
    id: u16,
    df: bool,
    mf: bool,
    off: u16,
    ttl: u8,
    proto: u8,
    src: Ipv4Addr,
    dst: Ipv4Addr,
}

fn h4(proto: u8) -> H4 {
    H4 {
        tos: 0xB8,
        id: 0x1234,
        df: true,
        mf: false,
        off: 0,
        ttl: 64,
        proto,
        src: S4,
        dst: D4,
    }
}

fn ipv4(h: H4, options: &[u8], payload: &[u8]) -> Vec<u8> {
    let ihl = 20 + options.len();
    assert_eq!(ihl % 4, 0);
    let total = ihl + payload.len();
    let mut v = vec![0x40 | (ihl / 4) as u8, h.tos];
    v.extend_from_slice(&(total as u16).to_be_bytes());
    v.extend_from_slice(&h.id.to_be_bytes());
    let flags = (u16::from(h.df) << 14) | (u16::from(h.mf) << 13) | (h.off / 8);
    v.extend_from_slice(&flags.to_be_bytes());
    v.extend_from_slice(&[h.ttl, h.proto, 0, 0]);
    v.extend_from_slice(&h.src.octets());
    v.extend_from_slice(&h.dst.octets());
    v.extend_from_slice(options);
    let c = naive(&[&v]);
    v[10..12].copy_from_slice(&c.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

fn ipv6(tc: u8, nh: u8, hop: u8, src: Ipv6Addr, dst: Ipv6Addr, rest: &[u8]) -> Vec<u8> {
    let first = (6u32 << 28) | (u32::from(tc) << 20);
    let mut v = first.to_be_bytes().to_vec();
    v.extend_from_slice(&(rest.len() as u16).to_be_bytes());
    v.extend_from_slice(&[nh, hop]);
    v.extend_from_slice(&src.octets());
    v.extend_from_slice(&dst.octets());
    v.extend_from_slice(rest);
    v
}

fn frag6(nh: u8, off: u16, more: bool, ident: u32) -> Vec<u8> {
    let mut v = vec![nh, 0];
    v.extend_from_slice(&(off | u16::from(more)).to_be_bytes());
    v.extend_from_slice(&ident.to_be_bytes());
    v
}

const HEAD: usize = 64;

/// Runs IPv4 -> IPv6 on `pkt` placed after `head` bytes (and 32 bytes of tail).
fn run46(pkt: &[u8], head: usize, o: &SiitOptions) -> Result<Vec<u8>, SiitDrop> {
    let mut buf = vec![0xEE; head];
    buf.extend_from_slice(pkt);
    buf.extend_from_slice(&[0xEE; 32]);
    match ipv4_to_ipv6(&mut buf, head, pkt.len(), s6(), d6(), &inner46, o) {
        SiitVerdict::Forward { start, len } => Ok(buf[start..start + len].to_vec()),
        SiitVerdict::Drop(d) => Err(d),
    }
}

/// Runs IPv6 -> IPv4 on `pkt`.
fn run64(pkt: &[u8], o: &SiitOptions) -> Result<Vec<u8>, SiitDrop> {
    let mut buf = pkt.to_vec();
    match ipv6_to_ipv4(&mut buf, 0, pkt.len(), S4, D4, &inner64, &Seq::default(), o) {
        SiitVerdict::Forward { start, len } => Ok(buf[start..start + len].to_vec()),
        SiitVerdict::Drop(d) => Err(d),
    }
}

/// A v4 transport segment with its v4 checksum, and the same with its v6 checksum.
fn seg_pair(proto: u8, seg: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut a = seg.to_vec();
    fill(&mut a, proto, Some(ph4(S4, D4, proto, seg.len())));
    let mut b = seg.to_vec();
    fill(&mut b, proto, Some(ph6(s6(), d6(), proto, seg.len())));
    (a, b)
}

#[test]
fn udp_and_tcp_4to6_every_field() {
    for (proto, seg) in [
        (17u8, udp(5353, 53, b"hello, world")),
        (6, tcp(40000, 443, b"GET / HTTP/1.1\r\n")),
    ] {
        let (s4, s6v) = seg_pair(proto, &seg);
        let pkt = ipv4(h4(proto), &[], &s4);
        let out = run46(&pkt, HEAD, &opts()).unwrap();
        // Version 6, TC = TOS, flow 0, payload = total - IHL, NH = protocol, hop = TTL - 1.
        let want = ipv6(0xB8, proto, 63, s6(), d6(), &s6v);
        assert_eq!(out, want, "proto {proto}");
        let v6 = Ipv6Packet::new_checked(&out[..]).unwrap();
        let ok = match proto {
            6 => TcpPacket::new_checked(v6.payload())
                .unwrap()
                .verify_checksum_v6(&s6().octets(), &d6().octets()),
            _ => UdpPacket::new_checked(v6.payload())
                .unwrap()
                .verify_checksum_v6(&s6().octets(), &d6().octets()),
        };
        assert!(ok);
    }
}

#[test]
fn udp_and_tcp_6to4_every_field() {
    for (proto, seg) in [
        (17u8, udp(53, 5353, &[7u8; 1300])),
        (6, tcp(443, 40000, &[9u8; 1300])),
        (17, udp(53, 5353, b"small")),
    ] {
        let (s4, s6v) = seg_pair(proto, &seg);
        let pkt = ipv6(0x28, proto, 10, s6(), d6(), &s6v);
        let out = run64(&pkt, &opts()).unwrap();
        let total = 20 + seg.len();
        let big = total > 1260;
        let v4 = Ipv4Packet::new_checked(&out[..]).unwrap();
        assert!(v4.verify_checksum());
        // DF set above 1260 bytes (then ID 0), clear at or below (then the source's first).
        let h = H4 {
            tos: 0x28,
            id: if big { 0 } else { FIRST_ID },
            df: big,
            mf: false,
            off: 0,
            ttl: 9,
            proto,
            src: S4,
            dst: D4,
        };
        assert_eq!(out, ipv4(h, &[], &s4), "proto {proto} len {total}");
        let ok = match proto {
            6 => TcpPacket::new_checked(v4.payload())
                .unwrap()
                .verify_checksum_v4(S4.octets(), D4.octets()),
            _ => UdpPacket::new_checked(v4.payload())
                .unwrap()
                .verify_checksum_v4(S4.octets(), D4.octets()),
        };
        assert!(ok);
    }
}

#[test]
fn extension_headers_skipped_and_routing_checked() {
    let (s4, s6v) = seg_pair(17, &udp(1, 2, b"x"));
    // Hop-by-Hop (8 bytes, PadN) then Routing with Segments Left 0 then UDP.
    let mut rest = vec![43, 0, 1, 4, 0, 0, 0, 0];
    rest.extend_from_slice(&[17, 0, 0, 0, 0, 0, 0, 0]);
    rest.extend_from_slice(&s6v);
    let pkt = ipv6(0, 0, 10, s6(), d6(), &rest);
    let out = run64(&pkt, &opts()).unwrap();
    assert_eq!(&out[20..], &s4[..]);
    assert_eq!(
        usize::from(u16::from_be_bytes([out[2], out[3]])),
        20 + s4.len()
    );
    assert_eq!(out[9], 17);
    // Segments Left 2: not translated, pointer at the Segments Left byte (40 + 8 + 3).
    rest[11] = 2;
    let pkt = ipv6(0, 0, 10, s6(), d6(), &rest);
    assert_eq!(
        run64(&pkt, &opts()),
        Err(SiitDrop::SourceRouted { pointer: Some(51) })
    );
}

#[test]
fn ttl_one_expires_both_ways() {
    let (s4, s6v) = seg_pair(17, &udp(1, 2, b"x"));
    let mut h = h4(17);
    h.ttl = 1;
    assert_eq!(
        run46(&ipv4(h, &[], &s4), HEAD, &opts()),
        Err(SiitDrop::TtlExpired)
    );
    let pkt6 = ipv6(0, 17, 1, s6(), d6(), &s6v);
    assert_eq!(run64(&pkt6, &opts()), Err(SiitDrop::TtlExpired));
    // Not decrementing: copied as is.
    let o = SiitOptions {
        decrement_ttl: false,
        ..opts()
    };
    assert_eq!(run46(&ipv4(h, &[], &s4), HEAD, &o).unwrap()[7], 1);
    assert_eq!(run64(&pkt6, &o).unwrap()[8], 1);
}

#[test]
fn ipv4_options_ignored_but_source_route_drops() {
    let (s4, s6v) = seg_pair(17, &udp(1, 2, b"opt"));
    // LSRR with one address left (pointer 4 <= length 7), then EOL.
    let lsrr = [131, 7, 4, 203, 0, 113, 1, 0];
    assert_eq!(
        run46(&ipv4(h4(17), &lsrr, &s4), HEAD, &opts()),
        Err(SiitDrop::SourceRouted { pointer: None })
    );
    // Expired LSRR (pointer 8 > length 7), NOPs, record route: all ignored.
    let expired = [131, 7, 8, 203, 0, 113, 1, 1, 7, 3, 4, 0];
    let out = run46(&ipv4(h4(17), &expired, &s4), HEAD, &opts()).unwrap();
    assert_eq!(out, ipv6(0xB8, 17, 63, s6(), d6(), &s6v));
}

#[test]
fn udp_zero_checksum() {
    let seg = udp(1000, 2000, b"no checksum");
    let pkt = ipv4(h4(17), &[], &seg);
    let out = run46(&pkt, HEAD, &opts()).unwrap();
    let (_, want) = seg_pair(17, &seg);
    assert_eq!(&out[40..], &want[..]);
    let off = SiitOptions {
        translate_udp_zero_csum: false,
        ..opts()
    };
    assert_eq!(run46(&pkt, HEAD, &off), Err(SiitDrop::UdpZeroChecksum));
    // A first fragment cannot be given a checksum: dropped even when enabled.
    let mut h = h4(17);
    h.df = false;
    h.mf = true;
    let frag = ipv4(h, &[], &seg);
    assert_eq!(run46(&frag, HEAD, &opts()), Err(SiitDrop::UdpZeroChecksum));
}

#[test]
fn icmp_echo_both_ways() {
    for (t4, t6) in [(8u8, 128u8), (0, 129)] {
        let mut m4 = echo(t4, 0x4242, 7, b"ping payload");
        fill(&mut m4, 1, None);
        let mut m6 = echo(t6, 0x4242, 7, b"ping payload");
        fill6(&mut m6, 58, s6(), d6());
        let out = run46(&ipv4(h4(1), &[], &m4), HEAD, &opts()).unwrap();
        assert_eq!(out, ipv6(0xB8, 58, 63, s6(), d6(), &m6));
        let v6 = Ipv6Packet::new_checked(&out[..]).unwrap();
        assert!(Icmpv6Packet::new_checked(v6.payload())
            .unwrap()
            .verify_checksum(&s6().octets(), &d6().octets()));

        let back = run64(&ipv6(0xB8, 58, 64, s6(), d6(), &m6), &opts()).unwrap();
        assert_eq!(&back[20..], &m4[..]);
        assert_eq!(back[9], 1);
        let v4 = Ipv4Packet::new_checked(&back[..]).unwrap();
        assert!(v4.verify_checksum());
        assert!(Icmpv4Packet::new_checked(v4.payload())
            .unwrap()
            .verify_checksum());
    }
    // Not in the table (e.g. ICMPv4 timestamp, ICMPv6 neighbour solicitation): dropped.
    let mut ts = echo(13, 1, 1, &[0; 12]);
    fill(&mut ts, 1, None);
    assert_eq!(
        run46(&ipv4(h4(1), &[], &ts), HEAD, &opts()),
        Err(SiitDrop::IcmpDropped)
    );
}

#[test]
fn fragments_4to6_and_6to4() {
    // First fragment: MF, offset 0, ID 0xABCD -> Fragment header, 28 bytes of growth.
    let (s4, s6v) = seg_pair(17, &udp(1, 2, &[3u8; 64]));
    let mut h = h4(17);
    h.df = false;
    h.mf = true;
    h.id = 0xABCD;
    let out = run46(&ipv4(h, &[], &s4[..48]), HEAD, &opts()).unwrap();
    let mut rest = frag6(17, 0, true, 0xABCD);
    // The checksum covers the whole datagram; it changes with the addresses all the same.
    rest.extend_from_slice(&s6v[..48]);
    assert_eq!(out, ipv6(0xB8, 44, 63, s6(), d6(), &rest));

    // Last fragment: offset 48, no MF; data untouched.
    h.mf = false;
    h.off = 48;
    let out = run46(&ipv4(h, &[], &s4[48..]), HEAD, &opts()).unwrap();
    let mut rest = frag6(17, 48, false, 0xABCD);
    rest.extend_from_slice(&s4[48..]);
    assert_eq!(out, ipv6(0xB8, 44, 63, s6(), d6(), &rest));

    // IPv6 fragment -> IPv4: ID = low 16 bits, DF clear, MF copied, offset copied.
    let mut rest = frag6(17, 0, true, 0x1234_5678);
    rest.extend_from_slice(&s6v[..48]);
    let out = run64(&ipv6(0, 44, 5, s6(), d6(), &rest), &opts()).unwrap();
    let mut h = h4(17);
    h.tos = 0;
    h.id = 0x5678;
    h.df = false;
    h.mf = true;
    h.ttl = 4;
    assert_eq!(out, ipv4(h, &[], &s4[..48]));
    let mut rest = frag6(17, 48, false, 0x1234_5678);
    rest.extend_from_slice(&s6v[48..]);
    let out = run64(&ipv6(0, 44, 5, s6(), d6(), &rest), &opts()).unwrap();
    h.mf = false;
    h.off = 48;
    assert_eq!(out, ipv4(h, &[], &s6v[48..]));
    // An extension header after the Fragment header: dropped (RFC 7915 §5.1.1).
    let mut rest = frag6(60, 0, true, 1);
    rest.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
    assert_eq!(
        run64(&ipv6(0, 44, 5, s6(), d6(), &rest), &opts()),
        Err(SiitDrop::UnsupportedProtocol)
    );
}

#[test]
fn too_big_for_the_next_hop() {
    let (s4, _) = seg_pair(17, &udp(1, 2, &[0u8; 1300]));
    let o = SiitOptions {
        ipv6_mtu: 1280,
        ..opts()
    };
    // 20 + 1308 -> 1348 > 1280: DF set -> Fragmentation Needed with 1280 - 20.
    assert_eq!(
        run46(&ipv4(h4(17), &[], &s4), HEAD, &o),
        Err(SiitDrop::FragmentNeeded { mtu: 1260 })
    );
    let mut h = h4(17);
    h.df = false;
    assert_eq!(
        run46(&ipv4(h, &[], &s4), HEAD, &o),
        Err(SiitDrop::NeedsFragmentation)
    );
    let (_, s6v) = seg_pair(17, &udp(1, 2, &[0u8; 1400]));
    let o = SiitOptions {
        ipv4_mtu: 1400,
        ..opts()
    };
    assert_eq!(
        run64(&ipv6(0, 17, 9, s6(), d6(), &s6v), &o),
        Err(SiitDrop::PacketTooBig { mtu: 1420 })
    );
}

/// An IPv4 UDP packet as an IPv4 host sent it (D4 -> S4), and its IPv6 translation.
fn quoted_udp(payload: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let seg = udp(5353, 33434, payload);
    let mut q4 = seg.clone();
    fill(&mut q4, 17, Some(ph4(D4, S4, 17, seg.len())));
    let mut q6 = seg;
    fill6(&mut q6, 17, d6(), s6());
    let mut h = h4(17);
    h.src = D4;
    h.dst = S4;
    h.ttl = 3;
    h.tos = 0;
    (ipv4(h, &[], &q4), ipv6(0, 17, 3, d6(), s6(), &q6))
}

#[test]
fn icmp4_port_unreachable_to_icmp6() {
    let (q4, q6) = quoted_udp(b"probe");
    let mut m4 = icmp_err(3, 3, 0, &q4);
    fill(&mut m4, 1, None);
    let mut h = h4(1);
    h.tos = 0xC0;
    let out = run46(&ipv4(h, &[], &m4), HEAD, &opts()).unwrap();
    let mut m6 = icmp_err(1, 4, 0, &q6);
    fill6(&mut m6, 58, s6(), d6());
    assert_eq!(out, ipv6(0xC0, 58, 63, s6(), d6(), &m6));
    // The quoted UDP checksum verifies for the quoted IPv6 addresses (the quote is whole).
    let inner = Ipv6Packet::new_checked(&out[48..]).unwrap();
    assert!(UdpPacket::new_checked(inner.payload())
        .unwrap()
        .verify_checksum_v6(&d6().octets(), &s6().octets()));

    // With only the 28 bytes of headroom the API promises, it still works.
    assert_eq!(run46(&ipv4(h, &[], &m4), 28, &opts()).unwrap(), out);
}

#[test]
fn icmp_errors_mtu_and_pointer() {
    let (q4, q6) = quoted_udp(b"big");
    // Fragmentation Needed, MTU 1480 -> Packet Too Big, min(1480 + 20, 1500, 1500 + 20).
    let mut m4 = icmp_err(3, 4, 1480, &q4);
    fill(&mut m4, 1, None);
    let out = run46(&ipv4(h4(1), &[], &m4), HEAD, &opts()).unwrap();
    assert_eq!((out[40], out[41]), (2, 0));
    assert_eq!(
        u32::from_be_bytes([out[44], out[45], out[46], out[47]]),
        1500
    );
    // Parameter Problem pointing at TTL (8) -> pointer at Hop Limit (7).
    let mut m4 = icmp_err(12, 0, 8 << 24, &q4);
    fill(&mut m4, 1, None);
    let out = run46(&ipv4(h4(1), &[], &m4), HEAD, &opts()).unwrap();
    assert_eq!((out[40], out[41]), (4, 0));
    assert_eq!(u32::from_be_bytes([out[44], out[45], out[46], out[47]]), 7);
    // Pointing at the Identification (4): no IPv6 equivalent, silently dropped.
    let mut m4 = icmp_err(12, 0, 4 << 24, &q4);
    fill(&mut m4, 1, None);
    assert_eq!(
        run46(&ipv4(h4(1), &[], &m4), HEAD, &opts()),
        Err(SiitDrop::IcmpDropped)
    );

    // IPv6 -> IPv4: Packet Too Big 1400 -> Fragmentation Needed 1380.
    let mut m6 = icmp_err(2, 0, 1400, &q6);
    fill6(&mut m6, 58, s6(), d6());
    let out = run64(&ipv6(0, 58, 64, s6(), d6(), &m6), &opts()).unwrap();
    assert_eq!((out[20], out[21]), (3, 4));
    assert_eq!(
        u32::from_be_bytes([out[24], out[25], out[26], out[27]]),
        1380
    );
    // Parameter Problem pointer 7 (Hop Limit) -> 8 (TTL).
    let mut m6 = icmp_err(4, 0, 7, &q6);
    fill6(&mut m6, 58, s6(), d6());
    let out = run64(&ipv6(0, 58, 64, s6(), d6(), &m6), &opts()).unwrap();
    assert_eq!((out[20], out[21], out[24]), (12, 0, 8));
}

#[test]
fn icmp6_port_unreachable_to_icmp4() {
    let (q4, q6) = quoted_udp(b"probe");
    let mut m6 = icmp_err(1, 4, 0, &q6);
    fill6(&mut m6, 58, s6(), d6());
    let out = run64(&ipv6(0x20, 58, 64, s6(), d6(), &m6), &opts()).unwrap();
    let v4 = Ipv4Packet::new_checked(&out[..]).unwrap();
    assert!(v4.verify_checksum());
    // The quoted IPv4 header: DF clear (<= 1260), without a Fragment header: ID 0.
    let inner = Ipv4Packet::new_checked(&out[28..]).unwrap();
    let mut q4 = q4;
    q4[4..6].copy_from_slice(&[0, 0]);
    q4[6] &= !0x40;
    q4[10] = 0;
    q4[11] = 0;
    let c = naive(&[&q4[..20]]);
    q4[10..12].copy_from_slice(&c.to_be_bytes());
    let mut m4 = icmp_err(3, 3, 0, &q4);
    fill(&mut m4, 1, None);
    let mut h = h4(1);
    h.tos = 0x20;
    h.id = FIRST_ID;
    h.df = false;
    h.ttl = 63;
    assert_eq!(out, ipv4(h, &[], &m4));
    assert!(UdpPacket::new_checked(inner.payload())
        .unwrap()
        .verify_checksum_v4(D4.octets(), S4.octets()));
}

#[test]
fn icmp_error_truncation_and_error_about_error() {
    // ICMPv4 error of 1500 bytes -> ICMPv6 error of exactly 1280 bytes.
    let (q4, _) = quoted_udp(&[1u8; 1444]);
    let mut m4 = icmp_err(3, 3, 0, &q4);
    fill(&mut m4, 1, None);
    let pkt = ipv4(h4(1), &[], &m4);
    assert_eq!(pkt.len(), 1500);
    let out = run46(&pkt, HEAD, &opts()).unwrap();
    assert_eq!(out.len(), 1280);
    let v6 = Ipv6Packet::new_checked(&out[..]).unwrap();
    assert!(Icmpv6Packet::new_checked(v6.payload())
        .unwrap()
        .verify_checksum(&s6().octets(), &d6().octets()));
    // The quoted header still says how long the original was.
    assert_eq!(u16::from_be_bytes([out[52], out[53]]), 1452);
    // Same with the minimum headroom (the quote is moved, or cut to what fits).
    let out28 = run46(&pkt, 28, &opts()).unwrap();
    assert!(out28.len() <= 1280);
    assert_eq!(
        &out28[..88],
        &{
            let mut o = out[..88].to_vec();
            o[4..6].copy_from_slice(&out28[4..6]);
            o[42..44].copy_from_slice(&out28[42..44]);
            o
        }[..]
    );

    // IPv6 -> IPv4 errors are cut to 576 bytes (RFC 1812).
    let (_, q6) = quoted_udp(&[1u8; 1100]);
    let mut m6 = icmp_err(1, 4, 0, &q6);
    fill6(&mut m6, 58, s6(), d6());
    let out = run64(&ipv6(0, 58, 64, s6(), d6(), &m6), &opts()).unwrap();
    assert_eq!(out.len(), 576);
    assert!(Icmpv4Packet::new_checked(&out[20..])
        .unwrap()
        .verify_checksum());

    // An error quoting an error: dropped.
    let (q4, _) = quoted_udp(b"x");
    let mut e1 = icmp_err(3, 1, 0, &q4);
    fill(&mut e1, 1, None);
    let mut h = h4(1);
    h.src = D4;
    h.dst = S4;
    let mut m4 = icmp_err(3, 3, 0, &ipv4(h, &[], &e1));
    fill(&mut m4, 1, None);
    assert_eq!(
        run46(&ipv4(h4(1), &[], &m4), HEAD, &opts()),
        Err(SiitDrop::IcmpErrorAboutError)
    );
    // A corrupted ICMP error checksum: not laundered.
    let mut bad = icmp_err(3, 3, 0, &q4);
    fill(&mut bad, 1, None);
    bad[30] ^= 1;
    assert_eq!(
        run46(&ipv4(h4(1), &[], &bad), HEAD, &opts()),
        Err(SiitDrop::Malformed)
    );
}

/// An ICMP error whose quote is too short for the quoted IP header (or is none) cannot be
/// translated: refused by its own reason, which the caller never answers (RFC 7915 §4.4:
/// "unless the discarded packet is itself an ICMPv4 error message").
#[test]
fn icmp_error_with_an_unreadable_quote() {
    let (q4, q6) = quoted_udp(b"cut short");
    // ICMPv4: 12 bytes of the quoted header, none at all, an IHL the quote does not hold,
    // and a quote that is no IPv4 header.
    let mut long_ihl = q4.clone();
    long_ihl[0] = 0x4f;
    let mut not_v4 = q4.clone();
    not_v4[0] = 0x65;
    for quote in [&q4[..12], &[][..], &long_ihl[..28], &not_v4[..]] {
        let mut m4 = icmp_err(3, 3, 0, quote);
        fill(&mut m4, 1, None);
        let got = run46(&ipv4(h4(1), &[], &m4), HEAD, &opts());
        assert_eq!(got, Err(SiitDrop::IcmpErrorMalformed), "{quote:02x?}");
    }
    // ICMPv6: 30 bytes of the quoted IPv6 header, and a Hop-by-Hop header cut short.
    let mut hbh = q6[..40].to_vec();
    hbh[6] = 0;
    hbh.extend_from_slice(&[17, 1, 0, 0]);
    for quote in [&q6[..30], &hbh[..]] {
        let mut m6 = icmp_err(1, 4, 0, quote);
        fill6(&mut m6, 58, s6(), d6());
        let got = run64(&ipv6(0, 58, 64, s6(), d6(), &m6), &opts());
        assert_eq!(got, Err(SiitDrop::IcmpErrorMalformed), "{quote:02x?}");
    }
    assert_eq!(
        SiitDrop::IcmpErrorMalformed.as_str(),
        "icmp_error_malformed"
    );
}

/// 4 -> 6 -> 4 with RFC 6052 addresses. What the RFC changes: TTL (decremented twice),
/// DF (RFC 7915 §5.1: clear at <= 1260 bytes), Identification (the source's next when DF
/// is clear, 0 when set), the header checksum (recomputed over those), IPv4 options (dropped).
/// Everything else comes back bit for bit, transport checksums included.
fn round_trip(h: H4, payload: &[u8]) {
    let pkt = ipv4(h, &[], payload);
    let o = opts();
    let v6 = run46(&pkt, HEAD, &o).unwrap();
    let mut buf = v6.clone();
    let (s4, d4) = (map6(s6()), map6(d6()));
    let back = match ipv6_to_ipv4(&mut buf, 0, v6.len(), s4, d4, &inner64, &Seq::default(), &o) {
        SiitVerdict::Forward { start, len } => buf[start..start + len].to_vec(),
        SiitVerdict::Drop(d) => panic!("{d:?}"),
    };
    let v4 = Ipv4Packet::new_checked(&back[..]).unwrap();
    assert!(v4.verify_checksum());
    let frag = h.mf || h.off != 0;
    let mut want = h;
    want.ttl = h.ttl - 2;
    if !frag {
        want.df = pkt.len() > 1260;
        want.id = if want.df { 0 } else { FIRST_ID };
    } else {
        want.df = false; // DF of a fragment is not carried by the Fragment header.
    }
    assert_eq!(back, ipv4(want, &[], payload));
}

#[test]
fn round_trips() {
    let (u, _) = seg_pair(17, &udp(1, 2, b"round trip"));
    let (t, _) = seg_pair(6, &tcp(3, 4, &[5u8; 1400]));
    let mut e = echo(8, 9, 10, b"echo");
    fill(&mut e, 1, None);
    round_trip(h4(17), &u);
    round_trip(h4(6), &t);
    round_trip(h4(1), &e);
    let mut h = h4(17);
    h.df = false;
    h.mf = true;
    h.id = 0xBEEF;
    round_trip(h, &u[..16]);
}

#[test]
fn drop_names_are_distinct() {
    let all = [
        SiitDrop::Truncated,
        SiitDrop::Malformed,
        SiitDrop::UnsupportedProtocol,
        SiitDrop::IcmpDropped,
        SiitDrop::TtlExpired,
        SiitDrop::FragmentNeeded { mtu: 0 },
        SiitDrop::PacketTooBig { mtu: 0 },
        SiitDrop::NeedsFragmentation,
        SiitDrop::FragmentedIcmp,
        SiitDrop::UdpZeroChecksum,
        SiitDrop::Ipv6UdpZeroChecksum,
        SiitDrop::SourceRouted { pointer: None },
        SiitDrop::IcmpErrorAboutError,
        SiitDrop::NoHeadroom,
    ];
    let mut names: Vec<_> = all.iter().map(|d| d.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), all.len());
}

proptest! {
    /// Any bytes, any start/len (in or out of bounds), both directions: no panic.
    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200),
                                start in 0usize..220, len in 0usize..220,
                                v4 in any::<bool>()) {
        let mut buf = data.clone();
        let o = opts();
        if v4 {
            if let Some(b) = buf.get_mut(start) { *b = 0x45; }
            let _ = ipv4_to_ipv6(&mut buf, start, len, s6(), d6(), &inner46, &o);
        } else {
            if let Some(b) = buf.get_mut(start) { *b = 0x60; }
            let _ = ipv6_to_ipv4(&mut buf, start, len, S4, D4, &inner64, &Seq::default(), &o);
        }
    }

    /// Valid packets (ICMP errors, fragments, extension headers) with random bytes
    /// changed, any headroom: no panic, and a forwarded packet lies inside the buffer.
    #[test]
    fn mutated_packets_never_panic(head in 0usize..80, edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
                                   which in 0usize..4, cut in 0usize..40, fix in any::<bool>()) {
        let (q4, q6) = quoted_udp(b"mutate me");
        let mut p4 = icmp_err(if which == 0 { 12 } else { 3 }, 4, 0x0800_0000, &q4);
        let mut p6 = icmp_err(if which == 1 { 4 } else { 2 }, 0, 1400, &q6);
        for (at, v) in &edits {
            let i = at % p4.len();
            p4[i] = *v;
            let j = at % p6.len();
            p6[j] = *v;
        }
        // Checksums made valid after the edits, so the edits reach the quoted packet.
        if fix {
            fill(&mut p4, 1, None);
            fill6(&mut p6, 58, s6(), d6());
        }
        let mut h = h4(1);
        h.mf = which == 3;
        let pkt4 = ipv4(h, &[], &p4);
        let pkt6 = ipv6(0, 58, 64, s6(), d6(), &p6);
        for (pkt, v4) in [(pkt4, true), (pkt6, false)] {
            let len = pkt.len().saturating_sub(cut);
            let mut buf = vec![0u8; head];
            buf.extend_from_slice(&pkt);
            let o = opts();
            let v = if v4 {
                ipv4_to_ipv6(&mut buf, head, len, s6(), d6(), &inner46, &o)
            } else {
                ipv6_to_ipv4(&mut buf, head, len, S4, D4, &inner64, &Seq::default(), &o)
            };
            if let SiitVerdict::Forward { start, len } = v {
                prop_assert!(start + len <= buf.len());
            }
        }
    }

    /// Random UDP/TCP packets: 4 -> 6 -> 4 restores everything but what the RFC changes.
    #[test]
    fn round_trip_random(proto in prop_oneof![Just(6u8), Just(17u8)], tos in any::<u8>(),
                         ttl in 3u8.., payload in proptest::collection::vec(any::<u8>(), 0..1400),
                         ports in any::<(u16, u16)>()) {
        let seg = if proto == 6 { tcp(ports.0, ports.1, &payload) } else { udp(ports.0, ports.1, &payload) };
        let (s, _) = seg_pair(proto, &seg);
        let mut h = h4(proto);
        h.tos = tos;
        h.ttl = ttl;
        round_trip(h, &s);
    }
}

proptest! {
    /// The word-lane address sums equal the byte-wise RFC 1071 sums, folded.
    #[test]
    fn address_sums_match_rfc1071(a in any::<u128>(), b in any::<u32>()) {
        let six = Ipv6Addr::from(a);
        let four = Ipv4Addr::from(b);
        prop_assert_eq!(
            wire::checksum::fold(super::addr_sum128(six)),
            wire::checksum::fold(wire::checksum::sum(&six.octets()))
        );
        prop_assert_eq!(
            wire::checksum::fold(super::addr_sum32(four)),
            wire::checksum::fold(wire::checksum::sum(&four.octets()))
        );
    }
}

proptest! {
    /// A refusal that owes the sender an ICMP error (TTL, too big, to be fragmented)
    /// leaves the packet exactly as it arrived, in both directions, so the error can
    /// quote it; and `ipv4_precheck` refuses an IPv4 packet for the same reason the
    /// translation does.
    #[test]
    fn refusals_owing_an_error_leave_the_packet_as_it_arrived(
        proto in prop_oneof![Just(6u8), Just(17u8)], ttl in 0u8..4, df in any::<bool>(),
        size in 0usize..1600, mtu4 in 600u32..1600, mtu6 in 1280u32..1600,
        lowest in 1280u32..1600, df_policy in 0u8..3,
    ) {
        let payload = vec![0xa5u8; size];
        let seg = if proto == 6 { tcp(1, 2, &payload) } else { udp(1, 2, &payload) };
        let (s4, s6_) = seg_pair(proto, &seg);
        let df_policy = [DfPolicy::Rfc, DfPolicy::Clear, DfPolicy::Set][usize::from(df_policy)];
        let o = SiitOptions {
            ipv4_mtu: mtu4, ipv6_mtu: mtu6, lowest_ipv6_mtu: lowest, df: df_policy, ..opts()
        };
        let mut h = h4(proto);
        h.ttl = ttl;
        h.df = df;
        let p4 = ipv4(h, &[], &s4);
        let p6 = ipv6(0, proto, ttl, s6(), d6(), &s6_);
        let owing = |v: &SiitVerdict| matches!(v, SiitVerdict::Drop(
            SiitDrop::TtlExpired | SiitDrop::FragmentNeeded { .. }
                | SiitDrop::PacketTooBig { .. } | SiitDrop::NeedsFragmentation));
        let mut b4 = [vec![0u8; 64], p4.clone()].concat();
        let v = ipv4_to_ipv6(&mut b4, 64, p4.len(), s6(), d6(), &inner46, &o);
        let pre = ipv4_precheck(&p4, &o);
        if owing(&v) {
            prop_assert_eq!(&b4[64..], &p4[..]);
            prop_assert_eq!(SiitVerdict::Drop(pre.unwrap_err()), v);
        } else {
            prop_assert_eq!(pre, Ok(()));
        }
        let mut b6 = [vec![0u8; 64], p6.clone()].concat();
        let v = ipv6_to_ipv4(&mut b6, 64, p6.len(), S4, D4, &inner64, &Seq::default(), &o);
        if owing(&v) {
            prop_assert_eq!(&b6[64..], &p6[..]);
        }
    }
}

mod mtu;
