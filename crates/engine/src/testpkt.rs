//! Test packets built by hand (independent of the views and translators under test), and
//! checks that recompute every checksum from scratch.

use std::net::{Ipv4Addr, Ipv6Addr};

use wire::checksum::{checksum, combine, fold, pseudo_header_v4, pseudo_header_v6, sum};

pub const UDP: u8 = 17;
pub const TCP: u8 = 6;
pub const ICMP: u8 = 1;
pub const ICMP6: u8 = 58;

/// An IPv4 header (DF set, TTL `ttl`) in front of `l4`, header checksum filled.
pub fn ipv4(proto: u8, src: Ipv4Addr, dst: Ipv4Addr, ttl: u8, l4: &[u8]) -> Vec<u8> {
    let len = 20 + l4.len();
    let mut p = vec![
        0x45,
        0,
        (len >> 8) as u8,
        len as u8,
        0x12,
        0x34,
        0x40,
        0,
        ttl,
        proto,
        0,
        0,
    ];
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    let c = checksum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(l4);
    p
}

/// An IPv6 header (hop limit `hop`) in front of `l4`.
pub fn ipv6(next: u8, src: Ipv6Addr, dst: Ipv6Addr, hop: u8, l4: &[u8]) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    p.push(next);
    p.push(hop);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(l4);
    p
}

/// A UDP header and payload (checksum zero: fill with [`fill_l4_csum`]).
pub fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = vec![0u8; 8];
    u[0..2].copy_from_slice(&sport.to_be_bytes());
    u[2..4].copy_from_slice(&dport.to_be_bytes());
    u[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(payload);
    u
}

/// A 20-byte TCP header with `flags` (checksum zero: fill with [`fill_l4_csum`]).
pub fn tcp(sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[4..8].copy_from_slice(&1000u32.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = flags;
    t[14..16].copy_from_slice(&65535u16.to_be_bytes());
    t
}

/// A whole IPv4 TCP segment, checksums filled: sequence and acknowledgement numbers
/// given, window 1000, `len` bytes of payload (the TCP-tracking tests' packet).
#[allow(clippy::too_many_arguments)] // a packet spelled out field by field
pub fn tcp_segment(
    src: Ipv4Addr,
    sport: u16,
    dst: Ipv4Addr,
    dport: u16,
    flags: u8,
    seq: u32,
    ack: u32,
    len: usize,
) -> Vec<u8> {
    let mut h = tcp(sport, dport, flags);
    h[4..8].copy_from_slice(&seq.to_be_bytes());
    h[8..12].copy_from_slice(&ack.to_be_bytes());
    h[14..16].copy_from_slice(&1000u16.to_be_bytes());
    h.extend(std::iter::repeat_n(0x61, len));
    let mut p = ipv4(TCP, src, dst, 64, &h);
    fill_l4_csum(&mut p);
    p
}

/// An ICMP/ICMPv6 echo (type `ty`) with identifier `id`.
pub fn echo(ty: u8, id: u16, seq: u16) -> Vec<u8> {
    let mut e = vec![ty, 0, 0, 0];
    e.extend_from_slice(&id.to_be_bytes());
    e.extend_from_slice(&seq.to_be_bytes());
    e.extend_from_slice(b"ping");
    e
}

/// An SCTP packet: the common header (ports, verification tag) and `chunks`, its CRC32c
/// filled (RFC 9260 Appendix A: over the whole packet, stored least significant byte
/// first).
pub fn sctp(sport: u16, dport: u16, vtag: u32, chunks: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(12 + chunks.len());
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&vtag.to_be_bytes());
    p.extend_from_slice(&[0; 4]);
    p.extend_from_slice(chunks);
    let c = wire::sctp::crc32c(&p);
    p[8..12].copy_from_slice(&c.to_le_bytes());
    p
}

/// Fills the transport checksum of the IPv4 or IPv6 packet `p` (no extension headers).
pub fn fill_l4_csum(p: &mut [u8]) {
    let (l4, proto) = l4_of(p);
    let off = csum_offset(proto);
    p[l4 + off..l4 + off + 2].copy_from_slice(&[0, 0]);
    let c = !fold(combine(pseudo(p, proto), sum(&p[l4..])));
    let c = if c == 0 && proto == UDP { 0xffff } else { c };
    p[l4 + off..l4 + off + 2].copy_from_slice(&c.to_be_bytes());
}

fn l4_of(p: &[u8]) -> (usize, u8) {
    if p[0] >> 4 == 4 {
        (usize::from(p[0] & 15) * 4, p[9])
    } else {
        (40, p[6])
    }
}

fn csum_offset(proto: u8) -> usize {
    match proto {
        TCP => 16,
        UDP => 6,
        _ => 2,
    }
}

fn pseudo(p: &[u8], proto: u8) -> u32 {
    let (l4, _) = l4_of(p);
    let len = p.len() - l4;
    if p[0] >> 4 == 4 {
        if proto == ICMP {
            return 0;
        }
        let s: [u8; 4] = p[12..16].try_into().unwrap();
        let d: [u8; 4] = p[16..20].try_into().unwrap();
        pseudo_header_v4(s, d, proto, len as u16)
    } else {
        let s: [u8; 16] = p[8..24].try_into().unwrap();
        let d: [u8; 16] = p[24..40].try_into().unwrap();
        pseudo_header_v6(&s, &d, proto, len as u32)
    }
}

/// Asserts that the IPv4 header checksum (for IPv4) and the transport checksum of `p` are
/// right, computed from scratch.
pub fn assert_checksums(p: &[u8]) {
    if p[0] >> 4 == 4 {
        assert_eq!(checksum(&p[..20]), 0, "IPv4 header checksum");
    }
    let (l4, proto) = l4_of(p);
    if proto == UDP && p[l4 + 6..l4 + 8] == [0, 0] {
        return;
    }
    assert_eq!(
        fold(combine(pseudo(p, proto), sum(&p[l4..]))),
        0xffff,
        "transport checksum of proto {proto}"
    );
}

/// Copies `pkt` into a buffer with `head` bytes of headroom and 64 of tailroom.
pub fn with_room(pkt: &[u8], head: usize) -> Vec<u8> {
    let mut b = vec![0u8; head];
    b.extend_from_slice(pkt);
    b.extend_from_slice(&[0u8; 64]);
    b
}

/// The IPv4 source and destination of `p`.
pub fn v4_addrs(p: &[u8]) -> (Ipv4Addr, Ipv4Addr) {
    (
        Ipv4Addr::new(p[12], p[13], p[14], p[15]),
        Ipv4Addr::new(p[16], p[17], p[18], p[19]),
    )
}

/// The IPv6 source and destination of `p`.
pub fn v6_addrs(p: &[u8]) -> (Ipv6Addr, Ipv6Addr) {
    let a: [u8; 16] = p[8..24].try_into().unwrap();
    let b: [u8; 16] = p[24..40].try_into().unwrap();
    (a.into(), b.into())
}

/// Source and destination ports (or the echo identifier twice) of `p`.
pub fn ports(p: &[u8]) -> (u16, u16) {
    let (l4, proto) = l4_of(p);
    let at = |o: usize| u16::from_be_bytes([p[l4 + o], p[l4 + o + 1]]);
    match proto {
        ICMP | ICMP6 => (at(4), at(4)),
        _ => (at(0), at(2)),
    }
}

/// The pieces `sizes` cut a payload of `n` bytes into: (start, end, more fragments).
/// Every piece but the last must be a multiple of 8 bytes; the rest goes in a last piece.
fn cut(n: usize, sizes: &[usize]) -> Vec<(usize, usize, bool)> {
    let mut out = Vec::new();
    let mut off = 0usize;
    for len in sizes.iter().chain(std::iter::once(&usize::MAX)) {
        let end = off.saturating_add(*len).min(n);
        let more = end < n;
        assert!(
            !more || (end - off).is_multiple_of(8),
            "pieces are multiples of 8"
        );
        out.push((off, end, more));
        off = end;
        if !more {
            break;
        }
    }
    out
}

/// Joins fragment payloads given as (offset, more fragments, bytes), in any order:
/// checks that they cover the datagram exactly once, ending with the one MF clear.
fn join(mut pieces: Vec<(usize, bool, &[u8])>) -> Vec<u8> {
    pieces.sort_by_key(|p| p.0);
    let mut payload = Vec::new();
    for (off, _, bytes) in &pieces {
        assert_eq!(*off, payload.len(), "contiguous, no overlap");
        payload.extend_from_slice(bytes);
    }
    assert!(pieces.last().is_some_and(|p| !p.1), "last has MF clear");
    payload
}

/// Cuts the IPv4 packet `whole` (20-byte header) into fragments with identification
/// `ident` (pieces as for [`cut`]). Each fragment's header is written by hand, checksum
/// filled.
pub fn fragment_v4(whole: &[u8], ident: u16, sizes: &[usize]) -> Vec<Vec<u8>> {
    let payload = &whole[20..];
    cut(payload.len(), sizes)
        .into_iter()
        .map(|(off, end, more)| {
            let mut f = whole[..20].to_vec();
            f[2..4].copy_from_slice(&((20 + end - off) as u16).to_be_bytes());
            f[4..6].copy_from_slice(&ident.to_be_bytes());
            let fo = (off / 8) as u16 | if more { 0x2000 } else { 0 };
            f[6..8].copy_from_slice(&fo.to_be_bytes());
            f[10..12].copy_from_slice(&[0, 0]);
            let c = checksum(&f);
            f[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&payload[off..end]);
            f
        })
        .collect()
}

/// Reassembles IPv4 fragments (any order): checks each header checksum and that they
/// agree on addresses, protocol and identification; returns the whole datagram (a
/// 20-byte header, DF clear, checksum filled).
pub fn reassemble_v4(frags: &[Vec<u8>]) -> Vec<u8> {
    let first = &frags[0];
    let pieces = frags
        .iter()
        .map(|f| {
            assert_eq!(checksum(&f[..20]), 0, "fragment header checksum");
            assert_eq!(f[4..6], first[4..6], "identification");
            assert_eq!(f[9], first[9], "protocol");
            assert_eq!(f[12..20], first[12..20], "addresses");
            let fo = u16::from_be_bytes([f[6], f[7]]);
            let total = usize::from(u16::from_be_bytes([f[2], f[3]]));
            (
                usize::from(fo & 0x1fff) * 8,
                fo & 0x2000 != 0,
                &f[20..total],
            )
        })
        .collect();
    let payload = join(pieces);
    let mut w = first[..20].to_vec();
    w[2..4].copy_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    w[6..8].copy_from_slice(&[0, 0]);
    w[10..12].copy_from_slice(&[0, 0]);
    let c = checksum(&w);
    w[10..12].copy_from_slice(&c.to_be_bytes());
    w.extend_from_slice(&payload);
    w
}

/// Cuts the IPv6 packet `whole` (no extension headers) into fragments with a Fragment
/// header (identification `ident`, pieces as for [`cut`]).
pub fn fragment_v6(whole: &[u8], ident: u32, sizes: &[usize]) -> Vec<Vec<u8>> {
    let next = whole[6];
    let payload = &whole[40..];
    cut(payload.len(), sizes)
        .into_iter()
        .map(|(off, end, more)| {
            let mut f = whole[..40].to_vec();
            f[4..6].copy_from_slice(&((8 + end - off) as u16).to_be_bytes());
            f[6] = 44;
            f.extend_from_slice(&[next, 0]);
            f.extend_from_slice(&((off as u16) | u16::from(more)).to_be_bytes());
            f.extend_from_slice(&ident.to_be_bytes());
            f.extend_from_slice(&payload[off..end]);
            f
        })
        .collect()
}

/// Reassembles IPv6 fragments (each: fixed header + Fragment header + data, any order)
/// into the whole packet without the Fragment header.
pub fn reassemble_v6(frags: &[Vec<u8>]) -> Vec<u8> {
    let first = &frags[0];
    let pieces = frags
        .iter()
        .map(|f| {
            assert_eq!(f[6], 44, "a Fragment header");
            assert_eq!(f[8..40], first[8..40], "addresses");
            assert_eq!(f[40], first[40], "next header");
            assert_eq!(f[44..48], first[44..48], "identification");
            let fo = u16::from_be_bytes([f[42], f[43]]);
            let plen = usize::from(u16::from_be_bytes([f[4], f[5]]));
            (usize::from(fo & !7), fo & 1 != 0, &f[48..40 + plen])
        })
        .collect();
    let payload = join(pieces);
    let mut w = first[..40].to_vec();
    w[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
    w[6] = first[40];
    w.extend_from_slice(&payload);
    w
}
