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

/// An ICMP/ICMPv6 echo (type `ty`) with identifier `id`.
pub fn echo(ty: u8, id: u16, seq: u16) -> Vec<u8> {
    let mut e = vec![ty, 0, 0, 0];
    e.extend_from_slice(&id.to_be_bytes());
    e.extend_from_slice(&seq.to_be_bytes());
    e.extend_from_slice(b"ping");
    e
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
