//! NAT44 rewrites: a packet's addresses and ports (or ICMP identifier) set to a revised
//! tuple, and an ICMP error's outer addresses and quoted packet set to match the session
//! the quote belongs to (RFC 5508 §7: the NAT MUST translate the embedded packet too).
//!
//! Offsets are relative to the start of the IPv4 header. Callers have parsed and
//! validated the headers; these functions still refuse (return false, change nothing
//! observable beyond what was already written) rather than panic on a short slice.

use std::net::Ipv4Addr;

use crate::csum::{get16, set16, set_addr, Delta};

/// IPv4 header offsets used here.
mod ip {
    pub const TTL: usize = 8;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
}

/// How the transport header carries the flow's ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4Kind {
    /// TCP: ports at 0 and 2, checksum at 16 (pseudo-header covered).
    Tcp,
    /// UDP: ports at 0 and 2, checksum at 6 (pseudo-header covered, zero means none).
    Udp,
    /// ICMP query: identifier at 4, checksum at 2 (no pseudo-header). The identifier is
    /// the source "port" of a request and the destination "port" of a reply.
    IcmpQuery,
    /// SCTP: ports at 0 and 2, a CRC32c at 8 over the whole packet and no pseudo-header
    /// (`wire::sctp`): a new port moves it, a new address does not.
    Sctp,
    /// Any other protocol (GRE, ESP, ...), translated by address only: its header is
    /// never touched (none of these checksums covers the IP addresses: GRE's covers its
    /// own header and data, ESP is integrity-protected end to end without the outer
    /// addresses).
    AddressOnly,
}

/// Addresses and ports a packet must carry after translation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rewrite {
    /// New source address.
    pub src: Ipv4Addr,
    /// New source port (ICMP: the identifier).
    pub sport: u16,
    /// New destination address.
    pub dst: Ipv4Addr,
    /// New destination port (ignored for ICMP).
    pub dport: u16,
}

/// ICMPv4 query replies (echo, timestamp, information, address mask replies).
#[inline]
fn is_icmp_reply(msg_type: u8) -> bool {
    matches!(msg_type, 0 | 14 | 16 | 18)
}

/// Rewrites one transport header's ports/identifier and checksum, given the pseudo-header
/// delta caused by the address change. `avail` bounds what is present (quotes are short).
fn rewrite_l4(l4: &mut [u8], kind: L4Kind, sport: u16, dport: u16, addr_delta: Delta) -> Delta {
    // Returns the delta of every word changed inside `l4` (ports, ids and the transport
    // checksum itself), for a covering checksum (an ICMP error's) to absorb.
    let mut changed = Delta::ZERO;
    match kind {
        L4Kind::Tcp | L4Kind::Udp => {
            let mut d = addr_delta;
            let mut ports = Delta::ZERO;
            set16(l4, 0, sport, &mut ports);
            set16(l4, 2, dport, &mut ports);
            d.add(ports);
            changed.add(ports);
            let off = if kind == L4Kind::Tcp { 16 } else { 6 };
            if let Some(c) = get16(l4, off) {
                let new = if kind == L4Kind::Udp {
                    d.apply_udp4(c)
                } else {
                    d.apply(c)
                };
                set16(l4, off, new, &mut changed);
            }
        }
        L4Kind::IcmpQuery => {
            let mut id = Delta::ZERO;
            let new = if l4.first().is_some_and(|t| is_icmp_reply(*t)) {
                dport
            } else {
                sport
            };
            set16(l4, 4, new, &mut id);
            changed.add(id);
            if let Some(c) = get16(l4, 2) {
                let c = crate::csum::icmp4_checksum(id.apply(c), l4);
                set16(l4, 2, c, &mut changed);
            }
        }
        // The ports only: a quote is cut short, so its CRC32c cannot be recomputed (a
        // stack reading an ICMP error checks the quoted verification tag, not the CRC).
        // A whole packet's is moved by `rewrite_other`.
        L4Kind::Sctp => {
            set16(l4, 0, sport, &mut changed);
            set16(l4, 2, dport, &mut changed);
        }
        L4Kind::AddressOnly => {}
    }
    changed
}

/// The common case with one bounds check up front: a 20-byte IPv4 header followed by a
/// full TCP (20 bytes) or UDP (8 bytes) header. Returns false (nothing written) when the
/// packet is not of that shape.
#[inline]
fn rewrite_fast(pkt: &mut [u8], kind: L4Kind, to: &Rewrite, decrement_ttl: bool) -> bool {
    let need = match kind {
        L4Kind::Tcp => 40,
        L4Kind::Udp => 28,
        L4Kind::IcmpQuery | L4Kind::Sctp | L4Kind::AddressOnly => return false,
    };
    if pkt.len() < need {
        return false;
    }
    let (ip, l4) = pkt.split_at_mut(20);
    let Ok(ip) = <&mut [u8; 20]>::try_from(ip) else {
        return false;
    };
    rewrite_headers(ip, &mut l4[..need - 20], kind, to, decrement_ttl)
}

#[inline(always)]
fn rewrite_headers(
    ip: &mut [u8; 20],
    l4: &mut [u8],
    kind: L4Kind,
    to: &Rewrite,
    decrement_ttl: bool,
) -> bool {
    let rd32 = |b: &[u8; 20], o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let (old_src, old_dst) = (rd32(ip, 12), rd32(ip, 16));
    let (new_src, new_dst) = (u32::from(to.src), u32::from(to.dst));
    let mut pseudo = Delta::ZERO;
    pseudo.word32(old_src, new_src);
    pseudo.word32(old_dst, new_dst);
    ip[12..16].copy_from_slice(&new_src.to_be_bytes());
    ip[16..20].copy_from_slice(&new_dst.to_be_bytes());
    let mut ip_delta = pseudo;
    if decrement_ttl {
        let w = u16::from_be_bytes([ip[8], ip[9]]);
        let nw = w.wrapping_sub(0x0100);
        ip_delta.word(w, nw);
        ip[8] = (nw >> 8) as u8;
    }
    let c = u16::from_be_bytes([ip[10], ip[11]]);
    ip[10..12].copy_from_slice(&ip_delta.apply(c).to_be_bytes());
    if l4.len() < 8 {
        return false;
    }
    // Both ports as one 32-bit word: one load, one store, one delta term.
    let old_ports = u32::from_be_bytes([l4[0], l4[1], l4[2], l4[3]]);
    let new_ports = (u32::from(to.sport) << 16) | u32::from(to.dport);
    let mut d = pseudo;
    d.word32(old_ports, new_ports);
    l4[0..4].copy_from_slice(&new_ports.to_be_bytes());
    match kind {
        L4Kind::Tcp if l4.len() >= 18 => {
            let c = u16::from_be_bytes([l4[16], l4[17]]);
            l4[16..18].copy_from_slice(&d.apply(c).to_be_bytes());
        }
        L4Kind::Udp => {
            let c = u16::from_be_bytes([l4[6], l4[7]]);
            l4[6..8].copy_from_slice(&d.apply_udp4(c).to_be_bytes());
        }
        _ => {}
    }
    true
}

/// Writes an IPv4 header's addresses and (when asked) decrements its TTL. Returns the
/// pseudo-header delta (the addresses alone, for a transport checksum) and the header
/// delta (addresses and TTL, for the IPv4 header checksum). The checksum field itself
/// is left to the caller, which updates or recomputes it.
fn set_ip_addrs_ttl(
    pkt: &mut [u8],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    decrement_ttl: bool,
) -> (Delta, Delta) {
    let mut pseudo = Delta::ZERO;
    set_addr(pkt, ip::SRC, src.octets(), &mut pseudo);
    set_addr(pkt, ip::DST, dst.octets(), &mut pseudo);
    let mut header = pseudo;
    if decrement_ttl {
        if let Some(w) = get16(pkt, ip::TTL) {
            set16(pkt, ip::TTL, w.wrapping_sub(0x0100), &mut header);
        }
    }
    (pseudo, header)
}

/// Sets the packet's source and destination addresses and ports to `to`, updates the IPv4
/// header checksum and the transport checksum incrementally, and decrements the TTL when
/// asked. `l4_off` is the transport header's offset (the IPv4 header length).
///
/// The caller guarantees TTL > 1 when `decrement_ttl` is set.
#[inline]
pub fn rewrite(
    pkt: &mut [u8],
    l4_off: usize,
    kind: L4Kind,
    to: &Rewrite,
    decrement_ttl: bool,
) -> bool {
    if l4_off == 20 && rewrite_fast(pkt, kind, to, decrement_ttl) {
        return true;
    }
    rewrite_other(pkt, l4_off, kind, to, decrement_ttl)
}

/// Every shape but the common one (header options, ICMP queries, a short transport
/// header), out of line so the common case inlines into its caller.
#[inline(never)]
fn rewrite_other(
    pkt: &mut [u8],
    l4_off: usize,
    kind: L4Kind,
    to: &Rewrite,
    decrement_ttl: bool,
) -> bool {
    if pkt.len() < l4_off.max(20) {
        return false;
    }
    let (pseudo, ip_delta) = set_ip_addrs_ttl(pkt, to.src, to.dst, decrement_ttl);
    if let Some(c) = get16(pkt, ip::CHECKSUM) {
        crate::csum::put16(pkt, ip::CHECKSUM, ip_delta.apply(c));
    }
    let (_, l4) = pkt.split_at_mut(l4_off);
    if kind == L4Kind::Sctp {
        // `pkt` is the whole packet (callers cut link padding off and never pass a first
        // fragment as SCTP): the CRC32c moves with the ports.
        return wire::sctp::set_ports(l4, to.sport, to.dport);
    }
    let addr_delta = if kind == L4Kind::IcmpQuery {
        Delta::ZERO
    } else {
        pseudo
    };
    rewrite_l4(l4, kind, to.sport, to.dport, addr_delta);
    true
}

/// Like [`rewrite`] for a packet whose transport checksum field holds only the
/// pseudo-header sum (Linux's CHECKSUM_PARTIAL, e.g. a GSO super-packet from veth or
/// virtio): the field is moved by the address change alone, *not* complemented, because
/// whoever completes the checksum later sums the transport header (new ports included)
/// onto it. The IPv4 header checksum is recomputed in full: a GSO super-packet's may be
/// stale, and every segment gets a fresh one anyway.
pub fn rewrite_partial(
    pkt: &mut [u8],
    l4_off: usize,
    kind: L4Kind,
    to: &Rewrite,
    decrement_ttl: bool,
) -> bool {
    if matches!(kind, L4Kind::IcmpQuery | L4Kind::Sctp | L4Kind::AddressOnly) {
        return rewrite(pkt, l4_off, kind, to, decrement_ttl);
    }
    if l4_off < 20 || pkt.len() < l4_off + if kind == L4Kind::Tcp { 18 } else { 8 } {
        return false;
    }
    let (pseudo, _) = set_ip_addrs_ttl(pkt, to.src, to.dst, decrement_ttl);
    crate::csum::put16(pkt, ip::CHECKSUM, 0);
    let c = wire::checksum::checksum(&pkt[..l4_off]);
    crate::csum::put16(pkt, ip::CHECKSUM, c);
    let (_, l4) = pkt.split_at_mut(l4_off);
    let mut ports = Delta::ZERO;
    set16(l4, 0, to.sport, &mut ports);
    set16(l4, 2, to.dport, &mut ports);
    let off = if kind == L4Kind::Tcp { 16 } else { 6 };
    if let Some(c) = get16(l4, off) {
        crate::csum::put16(l4, off, pseudo.apply_partial(c));
    }
    true
}

/// What an ICMP error must look like after translation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcmpErrorRewrite {
    /// Offset of the outer ICMP header (the outer IPv4 header length).
    pub icmp_off: usize,
    /// New outer source address.
    pub outer_src: Ipv4Addr,
    /// New outer destination address.
    pub outer_dst: Ipv4Addr,
    /// Length of the quoted IPv4 header.
    pub quote_ihl: usize,
    /// Where the quoted packet's ports live.
    pub quote_kind: L4Kind,
    /// Addresses and ports the quoted packet must carry.
    pub quote_to: Rewrite,
}

/// Rewrites an ICMP error (RFC 5508 §7): the outer source and/or destination address,
/// the quoted packet's addresses and ports set to `quote_to`, the quoted IPv4 checksum and
/// (when present in the quote) the quoted transport checksum updated, and the ICMP
/// checksum updated for everything that changed inside the message.
///
/// `icmp_off` is the outer ICMP header's offset; the quote's IPv4 header starts 8 bytes
/// later and its transport header `quote_ihl` bytes after that. `pkt` must end where the
/// outer packet ends (its total length).
pub fn rewrite_icmp_error(pkt: &mut [u8], e: &IcmpErrorRewrite, decrement_ttl: bool) -> bool {
    let IcmpErrorRewrite {
        icmp_off,
        outer_src,
        outer_dst,
        quote_ihl,
        quote_kind,
        ref quote_to,
    } = *e;
    let q_off = icmp_off + 8;
    let ql4_off = q_off + quote_ihl;
    if pkt.len() < ql4_off || quote_ihl < 20 || icmp_off < 20 {
        return false;
    }
    // Outer header.
    let (_, outer) = set_ip_addrs_ttl(pkt, outer_src, outer_dst, decrement_ttl);
    if let Some(c) = get16(pkt, ip::CHECKSUM) {
        crate::csum::put16(pkt, ip::CHECKSUM, outer.apply(c));
    }
    // Everything below lies inside the ICMP message: collect its changes in `inner`.
    let mut inner = Delta::ZERO;
    let (head, quote) = pkt.split_at_mut(q_off);
    let mut q_ip = Delta::ZERO;
    set_addr(quote, ip::SRC, quote_to.src.octets(), &mut q_ip);
    set_addr(quote, ip::DST, quote_to.dst.octets(), &mut q_ip);
    inner.add(q_ip);
    if let Some(c) = get16(quote, ip::CHECKSUM) {
        set16(quote, ip::CHECKSUM, q_ip.apply(c), &mut inner);
    }
    let (_, ql4) = quote.split_at_mut(quote_ihl);
    let pseudo = if quote_kind == L4Kind::IcmpQuery {
        Delta::ZERO
    } else {
        q_ip
    };
    inner.add(rewrite_l4(
        ql4,
        quote_kind,
        quote_to.sport,
        quote_to.dport,
        pseudo,
    ));
    let icmp = &mut head[icmp_off..];
    if let Some(c) = get16(icmp, 2) {
        crate::csum::put16(icmp, 2, inner.apply(c));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::checksum::{checksum, combine, fold, pseudo_header_v4, sum};

    /// An IPv4/TCP packet as a CHECKSUM_PARTIAL offload leaves it: the TCP checksum field
    /// holds the folded pseudo-header sum.
    fn partial_tcp(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 60, 0, 1, 0x40, 0, 64, 6, 0, 0];
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        let c = checksum(&p);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        let mut t = vec![
            0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0,
        ];
        t.extend_from_slice(b"payload of twenty b.");
        let ps = fold(pseudo_header_v4(src, dst, 6, t.len() as u16));
        t[16..18].copy_from_slice(&ps.to_be_bytes());
        p.extend_from_slice(&t);
        p
    }

    /// What the NIC or the kernel's segmentation does later: sum the segment (with the
    /// partial field in it) and store the complement.
    fn complete(p: &mut [u8]) {
        let s = !fold(sum(&p[20..]));
        p[36..38].copy_from_slice(&s.to_be_bytes());
    }

    #[test]
    fn partial_checksum_survives_translation_and_completes_right() {
        let mut p = partial_tcp([10, 0, 0, 2], [198, 51, 100, 2]);
        let to = Rewrite {
            src: Ipv4Addr::new(203, 0, 113, 1),
            sport: 61000,
            dst: Ipv4Addr::new(198, 51, 100, 2),
            dport: 80,
        };
        assert!(rewrite_partial(&mut p, 20, L4Kind::Tcp, &to, true));
        assert_eq!(checksum(&p[..20]), 0, "IPv4 header checksum recomputed");
        assert_eq!(p[8], 63);
        // Still partial: the field is the pseudo-header sum of the new addresses.
        let want = fold(pseudo_header_v4([203, 0, 113, 1], [198, 51, 100, 2], 6, 40));
        assert_eq!(u16::from_be_bytes([p[36], p[37]]), want);
        complete(&mut p);
        let full = fold(combine(
            pseudo_header_v4([203, 0, 113, 1], [198, 51, 100, 2], 6, 40),
            sum(&p[20..]),
        ));
        assert_eq!(
            full, 0xffff,
            "completed checksum verifies against the new addresses and ports"
        );
    }
}
