//! One checker for every packet the gateway puts on the wire, written independently of
//! `wire::checksum` (a plain RFC 1071 sum, 16 bits at a time), and the helpers the
//! targets use to build inputs: fill an input's checksums, swap it into its reply.

use std::net::Ipv4Addr;

use wire::{IpProtocol, Ipv4Packet, Ipv6Packet};

/// The one's-complement sum of `data` (RFC 1071), odd byte padded with zero, unfolded.
fn sum(data: &[u8]) -> u64 {
    data.chunks(2)
        .map(|c| u64::from(c[0]) << 8 | u64::from(*c.get(1).unwrap_or(&0)))
        .sum()
}

/// Folds a sum to 16 bits.
fn fold(mut s: u64) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// Whether `parts` (pseudo-header pieces, then the segment) sum to 0xffff: a valid
/// Internet checksum.
fn verifies(parts: &[&[u8]]) -> bool {
    fold(parts.iter().map(|p| sum(p)).sum()) == 0xffff
}

/// A packet in hex for a failure message (the first 96 bytes).
pub fn hex(p: &[u8]) -> String {
    let mut s: String = p.iter().take(96).map(|b| format!("{b:02x}")).collect();
    if p.len() > 96 {
        s.push_str(&format!("... ({} bytes)", p.len()));
    }
    s
}

/// The bytes of the IP packet `pkt` up to its length field (without link padding).
pub fn ip_bytes(pkt: &[u8]) -> &[u8] {
    let n = match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= 4 => usize::from(u16::from_be_bytes([pkt[2], pkt[3]])),
        Some(6) if pkt.len() >= 6 => 40 + usize::from(u16::from_be_bytes([pkt[4], pkt[5]])),
        _ => pkt.len(),
    };
    &pkt[..n.min(pkt.len())]
}

/// 240.0.0.0/4: NAT64's host ids live there; none may leave the gateway.
pub fn is_internal(a: [u8; 4]) -> bool {
    a[0] >> 4 == 0xf && a != [255; 4]
}

/// Whether the four bytes `a` occur anywhere in `input`.
fn occurs(input: &[u8], a: [u8; 4]) -> bool {
    input.windows(4).any(|w| w == a)
}

/// The bytes a layer-4 checksum covers: a UDP datagram's own length (trailing bytes
/// are not its), everything else's whole payload. `None`: a UDP length field that does
/// not fit (not checked: the datagram is malformed).
fn segment(proto: u8, payload: &[u8]) -> Option<&[u8]> {
    if proto != 17 {
        return Some(payload);
    }
    let l = usize::from(u16::from_be_bytes([*payload.get(4)?, *payload.get(5)?]));
    (l >= 8).then(|| payload.get(..l)).flatten()
}

/// What [`check_emitted`] may assume about the packet that caused the emission.
#[derive(Clone, Copy, Debug)]
pub struct Origin<'a> {
    /// The packet handed to the mode.
    pub input: &'a [u8],
    /// Whether its checksums were valid (filled by [`fill_checksums`]): then the
    /// emitted packet's must be too.
    pub valid: bool,
    /// The mode's Pref64 when a /96: the IPv4 address embedded in an IPv6 address under
    /// it is checked like an IPv4 address.
    pub pref96: Option<[u8; 12]>,
}

/// Checks one IP packet the gateway sends: it parses, its length fields agree with its
/// size, its IPv4 header checksum verifies, its TCP/UDP/ICMP checksum verifies when the
/// input's did and the packet is not a fragment (whose checksum covers the datagram),
/// and it carries no 240.0.0.0/4 address the input did not (NAT64 host ids), neither in
/// its header nor in the header an ICMP error quotes.
pub fn check_emitted(pkt: &[u8], origin: Origin<'_>, what: &str) {
    match pkt.first().map(|b| b >> 4) {
        Some(4) => check_v4(pkt, origin, what),
        Some(6) => check_v6(pkt, origin, what),
        v => panic!("{what}: emitted packet of IP version {v:?}: {}", hex(pkt)),
    }
}

fn check_v4(pkt: &[u8], origin: Origin<'_>, what: &str) {
    let p = Ipv4Packet::new_checked(pkt).unwrap_or_else(|e| {
        panic!(
            "{what}: emitted IPv4 packet does not parse ({e}): {}",
            hex(pkt)
        )
    });
    // What follows the total length is link padding (as received).
    assert!(
        usize::from(p.total_len()) <= pkt.len(),
        "{what}: total length field past the bytes sent"
    );
    assert!(
        verifies(&[p.header()]),
        "{what}: bad IPv4 header checksum: {}",
        hex(pkt)
    );
    for a in [p.src_bytes(), p.dst_bytes()] {
        assert!(
            !is_internal(a) || occurs(origin.input, a),
            "{what}: internal address {} on the wire: {}",
            Ipv4Addr::from(a),
            hex(pkt)
        );
    }
    if p.is_fragment() {
        return;
    }
    let (src, dst, payload) = (p.src_bytes(), p.dst_bytes(), p.payload());
    match p.protocol() {
        IpProtocol::Icmp => {
            if origin.valid {
                assert!(
                    verifies(&[payload]),
                    "{what}: bad ICMPv4 checksum: {}",
                    hex(pkt)
                );
            }
            // An error quotes the packet it is about: no internal address in it either.
            if matches!(payload.first(), Some(3 | 4 | 5 | 11 | 12)) {
                if let Some(q) = payload.get(8..28) {
                    for a in [&q[12..16], &q[16..20]] {
                        let a = [a[0], a[1], a[2], a[3]];
                        assert!(
                            !is_internal(a) || occurs(origin.input, a),
                            "{what}: internal address {} quoted: {}",
                            Ipv4Addr::from(a),
                            hex(pkt)
                        );
                    }
                }
            }
        }
        IpProtocol::Tcp | IpProtocol::Udp if origin.valid => {
            let proto = u8::from(p.protocol());
            // RFC 768: an IPv4 UDP checksum of zero means "none".
            if proto == 17 && payload.get(6..8) == Some(&[0, 0]) {
                return;
            }
            let Some(seg) = segment(proto, payload) else {
                return;
            };
            let len = (seg.len() as u16).to_be_bytes();
            assert!(
                verifies(&[&src, &dst, &[0, proto], &len, seg]),
                "{what}: bad {:?} checksum: {}",
                p.protocol(),
                hex(pkt)
            );
        }
        _ => {}
    }
}

fn check_v6(pkt: &[u8], origin: Origin<'_>, what: &str) {
    let p = Ipv6Packet::new_checked(pkt).unwrap_or_else(|e| {
        panic!(
            "{what}: emitted IPv6 packet does not parse ({e}): {}",
            hex(pkt)
        )
    });
    assert!(
        usize::from(p.payload_len()) + 40 <= pkt.len(),
        "{what}: payload length field past the bytes sent"
    );
    let pkt = &pkt[..usize::from(p.payload_len()) + 40];
    if let Some(pref) = origin.pref96 {
        for a in [p.src_bytes(), p.dst_bytes()] {
            let v4 = [a[12], a[13], a[14], a[15]];
            assert!(
                a[..12] != pref || !is_internal(v4) || occurs(origin.input, v4),
                "{what}: internal address {} embedded in {}: {}",
                Ipv4Addr::from(v4),
                std::net::Ipv6Addr::from(a),
                hex(pkt)
            );
        }
    }
    let Ok(up) = p.upper_layer() else { return };
    if up.fragment.is_some_and(|f| f.offset != 0 || f.more) || !origin.valid {
        return;
    }
    let proto = u8::from(up.protocol);
    let Some(seg) = segment(proto, pkt.get(up.offset..).unwrap_or(&[])) else {
        return;
    };
    if matches!(proto, 6 | 17 | 58) {
        let len = (seg.len() as u32).to_be_bytes();
        assert!(
            verifies(&[&p.src_bytes(), &p.dst_bytes(), &len, &[0, 0, 0, proto], seg]),
            "{what}: bad checksum of next header {proto}: {}",
            hex(pkt)
        );
        // RFC 8200 §8.1: IPv6 UDP must carry a checksum.
        if proto == 17 {
            assert_ne!(
                seg.get(6..8),
                Some(&[0u8, 0][..]),
                "{what}: IPv6 UDP zero checksum"
            );
        }
    }
}

/// Fills the IPv4 header checksum and the TCP/UDP/ICMP checksum of the IP packet `pkt`
/// (of a first or only fragment, over what the packet holds) with the wire views' own
/// fillers. Returns whether a transport checksum was filled: only then may the packets
/// the gateway emits because of it be held to valid checksums (a truncated segment or
/// another protocol carries none it could keep valid).
pub fn fill_checksums(pkt: &mut [u8]) -> bool {
    match pkt.first().map(|b| b >> 4) {
        Some(4) => {
            let Ok(mut p) = Ipv4Packet::new_checked(&mut *pkt) else {
                return false;
            };
            p.fill_checksum();
            if p.frag_offset() != 0 {
                return false;
            }
            let (src, dst, proto) = (p.src_bytes(), p.dst_bytes(), p.protocol());
            let payload = p.payload_mut();
            match proto {
                IpProtocol::Tcp => wire::TcpPacket::new_checked(payload)
                    .map(|mut t| t.fill_checksum_v4(src, dst))
                    .is_ok(),
                IpProtocol::Udp => wire::UdpPacket::new_checked(payload)
                    .map(|mut u| u.fill_checksum_v4(src, dst))
                    .is_ok(),
                IpProtocol::Icmp => wire::Icmpv4Packet::new_checked(payload)
                    .map(|mut i| i.fill_checksum())
                    .is_ok(),
                _ => false,
            }
        }
        Some(6) => {
            let Ok(p) = Ipv6Packet::new_checked(&*pkt) else {
                return false;
            };
            let (src, dst) = (p.src_bytes(), p.dst_bytes());
            let end = 40 + usize::from(p.payload_len());
            let Ok(up) = p.upper_layer() else {
                return false;
            };
            // A Routing header with segments left: the pseudo-header's destination is the
            // final one in that header (RFC 8200 §8.1), which the fillers below do not
            // know, and which no translation changes (xlat::ila leaves the checksum).
            // Behind AH: RFC 7915 §5.1 translates no further than AH (its number becomes
            // the IPv4 protocol, what follows is carried as it is), so no translator keeps
            // a checksum behind it right (nor the AH's own ICV: the addresses changed).
            if up.fragment.is_some_and(|f| f.offset != 0)
                || up.routing_segments_left != 0
                || behind_ah(pkt)
            {
                return false;
            }
            let Some(seg) = pkt.get_mut(up.offset..end) else {
                return false;
            };
            match up.protocol {
                IpProtocol::Tcp => wire::TcpPacket::new_checked(seg)
                    .map(|mut t| t.fill_checksum_v6(&src, &dst))
                    .is_ok(),
                IpProtocol::Udp => wire::UdpPacket::new_checked(seg)
                    .map(|mut u| u.fill_checksum_v6(&src, &dst))
                    .is_ok(),
                IpProtocol::Icmpv6 => wire::Icmpv6Packet::new_checked(seg)
                    .map(|mut i| i.fill_checksum(&src, &dst))
                    .is_ok(),
                _ => false,
            }
        }
        _ => false,
    }
}

/// Whether the IPv6 packet `pkt` has an Authentication Header in its extension chain
/// (Hop-by-Hop, Routing, Destination Options and Fragment headers walked up to it).
fn behind_ah(pkt: &[u8]) -> bool {
    let (mut nh, mut off) = (pkt.get(6).copied(), 40usize);
    for _ in 0..16 {
        match nh {
            Some(51) => return true,
            Some(0 | 43 | 60) => {
                let Some(len) = pkt.get(off + 1) else {
                    return false;
                };
                nh = pkt.get(off).copied();
                off += (usize::from(*len) + 1) * 8;
            }
            Some(44) => {
                nh = pkt.get(off).copied();
                off += 8;
            }
            _ => return false,
        }
    }
    false
}

/// The layer-4 header of an unfragmented IP packet without IPv6 extension headers:
/// `(offset, protocol number)`.
pub fn l4(pkt: &[u8]) -> Option<(usize, u8)> {
    let pkt = ip_bytes(pkt);
    match pkt.first()? >> 4 {
        4 => {
            let p = Ipv4Packet::new_checked(pkt).ok()?;
            (!p.is_fragment()).then(|| (p.header_len(), u8::from(p.protocol())))
        }
        6 => {
            let p = Ipv6Packet::new_checked(pkt).ok()?;
            let nh = u8::from(p.next_header());
            matches!(nh, 6 | 17 | 58).then_some((40, nh))
        }
        _ => None,
    }
}

/// Turns the packet into its reply in place: addresses swapped, TCP/UDP ports swapped,
/// an ICMP echo request made a reply (and back); checksums stay valid (the swaps keep
/// the one's-complement sums, the echo type change is refilled).
pub fn make_reply(pkt: &mut [u8]) {
    let (a, b, w) = match pkt.first().map(|b| b >> 4) {
        Some(4) => (12, 16, 4),
        Some(6) => (8, 24, 16),
        _ => return,
    };
    if pkt.len() < b + w {
        return;
    }
    for i in 0..w {
        pkt.swap(a + i, b + i);
    }
    let Some((off, proto)) = l4(pkt) else { return };
    match proto {
        6 | 17 if pkt.len() >= off + 4 => {
            for i in 0..2 {
                pkt.swap(off + i, off + 2 + i);
            }
        }
        1 | 58 => {
            if let Some(t) = pkt.get_mut(off) {
                *t = match *t {
                    8 => 0,
                    0 => 8,
                    128 => 129,
                    129 => 128,
                    x => x,
                };
            }
            fill_checksums(pkt);
        }
        _ => {}
    }
}
