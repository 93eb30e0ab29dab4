//! IPv4 -> IPv6 (RFC 7915 §4): the IPv6 header is written in front of the IPv4 payload,
//! in the headroom the IPv4 header (and the caller) left.

use core::net::{Ipv4Addr, Ipv6Addr};

use wire::checksum::{fold, sum};
use wire::{Icmpv4Packet, Icmpv6Packet, IpProtocol, Ipv4Packet, Ipv6Packet, UdpPacket};

use super::{
    addr_delta, check_v4_options, ext, forwarded_ttl, icmp6_pseudo, is_icmp4_error, packet_range,
    parse_err, proto, quote_err, verdict, SiitDrop, SiitOptions, SiitVerdict, Step,
};
use crate::csum::{get16, put16, Delta};
use crate::icmp_map::{self, Adjust, IcmpAction};

/// Fixed IPv6 header length.
const V6_HDR: usize = 40;
/// IPv6 Fragment header length.
const FRAG_HDR: usize = 8;
/// ICMP header length (type, code, checksum, 32-bit rest).
const ICMP_HDR: usize = 8;
/// RFC 8200 §5: the IPv6 minimum link MTU, the size an ICMPv6 error must fit in.
const IPV6_MIN_MTU: usize = 1280;

/// Translates the IPv4 packet `buf[start..start + len]` into IPv6 (RFC 7915 §4).
///
/// The IPv6 packet ends where the IPv4 payload ends and starts `40 - IHL*4` bytes before
/// `start` (48 - IHL*4 with a Fragment header): leave at least 28 bytes of headroom. An
/// ICMPv4 error grows twice (outer and quoted header); it is written as early as the
/// headroom allows and, when that is not enough, its quoted data is moved towards the end
/// of `buf` (or truncated to what fits). Always use the returned `start`.
///
/// `src6`/`dst6` are the translated outer addresses; `inner` maps the addresses of the
/// packet quoted in an ICMPv4 error (`None` drops the error).
pub fn ipv4_to_ipv6(
    buf: &mut [u8],
    start: usize,
    len: usize,
    src6: Ipv6Addr,
    dst6: Ipv6Addr,
    inner: &dyn Fn(Ipv4Addr, Ipv4Addr) -> Option<(Ipv6Addr, Ipv6Addr)>,
    opts: &SiitOptions,
) -> SiitVerdict {
    verdict(translate(buf, start, len, (src6, dst6), inner, opts))
}

/// The IPv4 header fields the translation needs, read before any byte is overwritten.
#[derive(Clone, Copy, Debug)]
struct V4Hdr {
    ihl: usize,
    total: usize,
    tos: u8,
    ident: u16,
    df: bool,
    mf: bool,
    frag_offset: u16,
    ttl: u8,
    proto: u8,
    src: Ipv4Addr,
    dst: Ipv4Addr,
}

impl V4Hdr {
    /// Reads the fields of a checked header.
    fn read(p: &Ipv4Packet<&[u8]>) -> Self {
        V4Hdr {
            ihl: p.header_len(),
            total: usize::from(p.total_len()),
            tos: p.dscp_ecn(),
            ident: p.ident(),
            df: p.dont_frag(),
            mf: p.more_frags(),
            frag_offset: p.frag_offset(),
            ttl: p.ttl(),
            proto: u8::from(p.protocol()),
            src: p.src_addr(),
            dst: p.dst_addr(),
        }
    }

    /// Is this a fragment (MF set or a non-zero offset)?
    fn is_fragment(&self) -> bool {
        self.mf || self.frag_offset != 0
    }

    /// The Fragment header length the IPv6 packet needs.
    ///
    /// RFC 7915 §4: "As a result, an IPv6 Fragment Header is only included if the IPv4
    /// packet is already fragmented." and "When the IPv4 sender does not set the DF bit,
    /// the translator MUST NOT include the Fragment Header for the non-fragmented IPv6
    /// packets."
    fn frag_len(&self) -> usize {
        if self.is_fragment() {
            FRAG_HDR
        } else {
            0
        }
    }

    /// The IPv6 Traffic Class.
    ///
    /// RFC 7915 §4.1: "Traffic Class: By default, copied from the IP Type Of Service (TOS)
    /// octet. ... An implementation of a translator SHOULD support an administratively
    /// configurable option to ignore the IPv4 TOS and always set the IPv6 traffic class
    /// (TC) to zero." (`copy_tos = false`; `traffic_class = N` sets another value.)
    fn traffic_class(&self, opts: &SiitOptions) -> u8 {
        if let Some(tc) = opts.traffic_class {
            tc
        } else if opts.tos_to_traffic_class {
            self.tos
        } else {
            0
        }
    }
}

/// Writes a fixed IPv6 header (and, with `frag`, a Fragment header after it) at `at`.
#[allow(clippy::too_many_arguments)]
fn write_v6(
    buf: &mut [u8],
    at: usize,
    tc: u8,
    payload_len: usize,
    next: u8,
    hop: u8,
    addrs: (Ipv6Addr, Ipv6Addr),
    frag: Option<&V4Hdr>,
) -> Result<(), SiitDrop> {
    let frag_len = if frag.is_some() { FRAG_HDR } else { 0 };
    let hdr = buf
        .get_mut(at..at + V6_HDR + frag_len)
        .ok_or(SiitDrop::NoHeadroom)?;
    let payload_len = u16::try_from(payload_len).map_err(|_| SiitDrop::NeedsFragmentation)?;
    let (h6, fh) = hdr.split_at_mut(V6_HDR);
    let mut p = Ipv6Packet::new_unchecked(h6);
    // RFC 7915 §4.1: "Version: 6", "Flow Label: 0 (all zero bits)", "Payload Length:
    // Total length value from the IPv4 header, minus the size of the IPv4 header and IPv4
    // options, if present." (plus 8 with a Fragment header), "Hop Limit: The hop limit is
    // derived from the TTL value in the IPv4 header."
    p.set_version(6);
    p.set_traffic_class(tc);
    p.set_flow_label(0);
    p.set_payload_len(payload_len);
    p.set_hop_limit(hop);
    p.set_src_addr(addrs.0);
    p.set_dst_addr(addrs.1);
    match frag {
        None => p.set_next_header(IpProtocol::from(next)),
        Some(h) => {
            // RFC 7915 §4.1, Fragment header: "Next Header: For ICMPv4 (1), it is changed
            // to ICMPv6 (58); otherwise, the protocol field MUST be copied from the IPv4
            // header. Fragment Offset: Copied from the Fragment Offset field of the IPv4
            // header. M flag: Copied from the More Fragments (MF) flag of the IPv4 header.
            // Identification: The low-order 16 bits copied from the Identification field in
            // the IPv4 header. The high-order 16 bits set to zero."
            p.set_next_header(IpProtocol::Ipv6Frag);
            fh[0] = next;
            fh[1] = 0;
            let off_m = (h.frag_offset & !0x7) | u16::from(h.mf);
            fh[2..4].copy_from_slice(&off_m.to_be_bytes());
            fh[4..8].copy_from_slice(&u32::from(h.ident).to_be_bytes());
        }
    }
    Ok(())
}

/// The whole IPv4 -> IPv6 translation.
fn translate(
    buf: &mut [u8],
    start: usize,
    len: usize,
    addrs6: (Ipv6Addr, Ipv6Addr),
    inner: &dyn Fn(Ipv4Addr, Ipv4Addr) -> Option<(Ipv6Addr, Ipv6Addr)>,
    opts: &SiitOptions,
) -> Step {
    let (start, end) = packet_range(buf, start, len)?;
    let pkt = Ipv4Packet::new_checked(&buf[start..end]).map_err(parse_err)?;
    // A router verifies the header checksum (RFC 1812 §5.2.2); IPv6 has none, so a
    // corrupted header would otherwise be laundered into a valid-looking packet.
    if !pkt.verify_checksum() {
        return Err(SiitDrop::Malformed);
    }
    check_v4_options(pkt.options())?;
    let h = V4Hdr::read(&pkt);
    let hop = forwarded_ttl(h.ttl, opts)?;
    let pay = start + h.ihl;
    let pay_end = start + h.total;

    let next = match h.proto {
        // RFC 7915 §4.1: "Next Header: For ICMPv4 (1), it is changed to ICMPv6 (58)".
        proto::ICMP => return icmp(buf, pay, pay_end, &h, hop, addrs6, inner, opts),
        // ICMPv6 carried in IPv4 would need a pseudo-header checksum it never had.
        proto::ICMPV6 => return Err(SiitDrop::UnsupportedProtocol),
        // "otherwise, the protocol field MUST be copied from the IPv4 header."
        p => p,
    };

    let frag_len = h.frag_len();
    let payload6 = h.total - h.ihl + frag_len;
    check_mtu(&h, V6_HDR + payload6, opts)?;

    // RFC 7915 §4.5: "Translators MUST do this [update the checksum] for TCP and ICMP
    // packets and for UDP packets that contain a UDP checksum". A non-first fragment
    // carries no transport header: its data is left alone.
    if h.frag_offset == 0 {
        let l4 = &mut buf[pay..pay_end];
        match next {
            proto::TCP => {
                let c = get16(l4, 16).ok_or(SiitDrop::Truncated)?;
                let d = addr_delta((h.src, h.dst), addrs6, true);
                put16(l4, 16, d.apply(c));
            }
            proto::UDP => udp(l4, &h, addrs6, opts)?,
            _ => {}
        }
    }

    let out = pay
        .checked_sub(V6_HDR + frag_len)
        .ok_or(SiitDrop::NoHeadroom)?;
    let frag = if frag_len != 0 { Some(&h) } else { None };
    write_v6(
        buf,
        out,
        h.traffic_class(opts),
        payload6,
        next,
        hop,
        addrs6,
        frag,
    )?;
    Ok((out, V6_HDR + payload6))
}

/// The checks of RFC 7915 §4.1 that owe an IPv4 packet's sender an ICMP error, made on
/// the packet as it arrived: an unexpired source route (Source Route Failed), the TTL
/// running out (Time Exceeded), and the IPv6 packet not fitting (Fragmentation Needed
/// with DF set, fragmentation without; see `check_mtu`). A stateful translator runs them
/// before its own rewrite (NAT64 rewrites the destination
/// first), so that the error quotes what the sender sent; [`ipv4_to_ipv6`] makes the
/// same checks. ICMP errors are left to the translation (their quote is cut to fit, and
/// no error is ever sent about one).
pub fn ipv4_precheck(pkt: &[u8], opts: &SiitOptions) -> Result<(), SiitDrop> {
    let p = Ipv4Packet::new_checked(pkt).map_err(parse_err)?;
    // An unexpired source route owes Source Route Failed (RFC 7915 §4.1), too.
    check_v4_options(p.options())?;
    let h = V4Hdr::read(&p);
    forwarded_ttl(h.ttl, opts)?;
    if h.proto == proto::ICMP
        && (h.frag_offset != 0 || matches!(p.payload().first(), Some(3 | 11 | 12)))
    {
        return Ok(());
    }
    check_mtu(&h, V6_HDR + h.total - h.ihl + h.frag_len(), opts)
}

/// Refuses an IPv6 packet of `len6` bytes bigger than the translator may send.
///
/// RFC 7915 §4.1 holds the two cases to two different MTUs. With DF set, the next hop's:
/// "If the DF bit is set and the MTU of the next-hop interface is less than the total
/// length value of the IPv4 packet plus 20, the translator MUST send an ICMPv4
/// "Fragmentation Needed" error message to the IPv4 source address." With DF clear, the
/// configured lowest IPv6 MTU: "If the DF flag is not set and the IPv4 packet will result
/// in an IPv6 packet larger than a user-defined length (hereinafter referred to as
/// "lowest-ipv6-mtu" and defaulting to 1280 bytes), the packet SHOULD be fragmented"
/// (done by the caller; never beyond the next hop's MTU either).
fn check_mtu(h: &V4Hdr, len6: usize, opts: &SiitOptions) -> Result<(), SiitDrop> {
    let limit = if h.df {
        opts.ipv6_mtu
    } else {
        opts.ipv6_fragment_mtu()
    };
    if len6 as u64 <= u64::from(limit) && len6 - V6_HDR <= usize::from(u16::MAX) {
        return Ok(());
    }
    if h.df {
        // The largest IPv4 packet (IHL 5) that fits the next hop, as its sender counts it:
        // next-hop IPv6 MTU - 20 (- 8 more for the Fragment header of a fragment).
        let room = opts
            .ipv6_mtu
            .min(u32::from(u16::MAX))
            .saturating_sub((V6_HDR - 20 + h.frag_len()) as u32);
        let mtu = u16::try_from(room).unwrap_or(u16::MAX);
        return Err(SiitDrop::FragmentNeeded { mtu });
    }
    Err(SiitDrop::NeedsFragmentation)
}

/// Updates (or creates) the UDP checksum of the first (or only) fragment `l4`.
///
/// RFC 7915 §4.5: "For UDP packets that do not contain a UDP checksum (i.e., the UDP
/// checksum field is zero), the translator SHOULD provide a configuration function to
/// allow: 1. Dropping the packet ... 2. Calculating an IPv6 checksum and forwarding the
/// packet" and "A stateless translator cannot compute the UDP checksum of fragmented
/// packets, so when a stateless translator receives the first fragment of a fragmented
/// UDP IPv4 packet and the checksum field is zero, the translator SHOULD drop the packet".
fn udp(
    l4: &mut [u8],
    h: &V4Hdr,
    addrs6: (Ipv6Addr, Ipv6Addr),
    opts: &SiitOptions,
) -> Result<(), SiitDrop> {
    let c = get16(l4, 6).ok_or(SiitDrop::Truncated)?;
    if c != 0 {
        let d = addr_delta((h.src, h.dst), addrs6, true);
        // A result of 0 must go out as 0xFFFF (RFC 8200 §8.1).
        put16(l4, 6, d.apply_udp4(c));
        return Ok(());
    }
    if h.is_fragment() || !opts.translate_udp_zero_csum {
        return Err(SiitDrop::UdpZeroChecksum);
    }
    let ulen = usize::from(get16(l4, 4).ok_or(SiitDrop::Truncated)?);
    let dgram = l4.get_mut(..ulen).filter(|_| ulen >= 8);
    let dgram = dgram.ok_or(SiitDrop::Malformed)?;
    UdpPacket::new_unchecked(dgram).fill_checksum_v6(&addrs6.0.octets(), &addrs6.1.octets());
    Ok(())
}

/// ICMPv4 -> ICMPv6 (RFC 7915 §4.2, §4.3).
#[allow(clippy::too_many_arguments)]
fn icmp(
    buf: &mut [u8],
    pay: usize,
    pay_end: usize,
    h: &V4Hdr,
    hop: u8,
    addrs6: (Ipv6Addr, Ipv6Addr),
    inner: &dyn Fn(Ipv4Addr, Ipv4Addr) -> Option<(Ipv6Addr, Ipv6Addr)>,
    opts: &SiitOptions,
) -> Step {
    // RFC 7915 §1.2: "Fragmented ICMP/ICMPv6 packets will not be translated by IP/ICMP
    // translators." (The pseudo-header needs the whole message's length.)
    if h.is_fragment() {
        return Err(SiitDrop::FragmentedIcmp);
    }
    let msg = Icmpv4Packet::new_checked(&buf[pay..pay_end]).map_err(parse_err)?;
    let (ty, code) = (u8::from(msg.msg_type()), msg.msg_code());
    // RFC 7915 §4.2: "all ICMPv4 packets MUST have the Type translated"; the table says
    // which are translated and which are silently dropped.
    let out = match icmp_map::icmp4_to_6(ty, code) {
        IcmpAction::Translate(o) => o,
        IcmpAction::Drop => return Err(SiitDrop::IcmpDropped),
    };
    if is_icmp4_error(ty) {
        return icmp_error(buf, pay, pay_end, h, hop, addrs6, out, inner, opts);
    }

    // An informational message (echo): same length, new type, pseudo-header added.
    // RFC 7915 §4.2: "All ICMPv4 messages that are to be translated require that the
    // ICMPv6 checksum field be calculated as part of the translation since ICMPv6, unlike
    // ICMPv4, has a pseudo-header checksum just like UDP and TCP." Done incrementally, so a
    // corrupted echo stays detectably corrupted.
    let icmp_len = pay_end - pay;
    check_mtu(h, V6_HDR + icmp_len, opts)?;
    let mut d = Delta::ZERO;
    d.word(
        u16::from_be_bytes([ty, code]),
        u16::from_be_bytes([out.msg_type, out.code]),
    );
    d.word(0, icmp6_pseudo(addrs6.0, addrs6.1, icmp_len as u32));
    let c = d.apply(msg.checksum());
    let l4 = &mut buf[pay..pay_end];
    l4[0] = out.msg_type;
    l4[1] = out.code;
    put16(l4, 2, c);
    let at = pay.checked_sub(V6_HDR).ok_or(SiitDrop::NoHeadroom)?;
    let tc = h.traffic_class(opts);
    write_v6(buf, at, tc, icmp_len, proto::ICMPV6, hop, addrs6, None)?;
    Ok((at, V6_HDR + icmp_len))
}

/// ICMPv4 error -> ICMPv6 error, quoted packet translated (RFC 7915 §4.3).
#[allow(clippy::too_many_arguments)]
fn icmp_error(
    buf: &mut [u8],
    pay: usize,
    pay_end: usize,
    h: &V4Hdr,
    hop: u8,
    addrs6: (Ipv6Addr, Ipv6Addr),
    out: icmp_map::Icmp6Out,
    inner: &dyn Fn(Ipv4Addr, Ipv4Addr) -> Option<(Ipv6Addr, Ipv6Addr)>,
    opts: &SiitOptions,
) -> Step {
    let msg_bytes = &buf[pay..pay_end];
    // The body is rewritten and the checksum recomputed: verify the received one first,
    // so that a corrupted error is not made to look valid.
    if fold(sum(msg_bytes)) != 0xFFFF {
        return Err(SiitDrop::Malformed);
    }
    let msg = Icmpv4Packet::new_unchecked(msg_bytes);
    let quote = msg.data();
    // RFC 4884: Destination Unreachable, Time Exceeded and Parameter Problem may carry an
    // extension after the original datagram, whose length (32-bit words) is octet 5.
    let found = match msg_bytes.first() {
        Some(3 | 11 | 12) => ext::find(msg_bytes.get(5).copied().unwrap_or(0), 4, quote.len(), 20),
        _ => None,
    };
    let quote = match found {
        Some(f) => quote.get(..f.original).unwrap_or(quote),
        None => quote,
    };
    let ip = Ipv4Packet::new_checked_embedded(quote).map_err(|e| quote_err(parse_err(e)))?;
    let q = V4Hdr::read(&ip);
    // RFC 7915 §4.1: "Note when translating ICMPv4 Error Messages into ICMPv6, the
    // "illegal" source address will be translated for the purpose of trouble shooting."
    // Which mapping applies is the caller's business.
    let qaddrs6 = inner(q.src, q.dst).ok_or(SiitDrop::IcmpDropped)?;

    let rest: u32 = match out.adjust {
        Adjust::None => 0,
        // RFC 7915 §4.2: "The MTU field MUST be adjusted for the difference between the
        // IPv4 and IPv6 header sizes, i.e., minimum(advertised MTU+20,
        // MTU_of_IPv6_nexthop, (MTU_of_IPv4_nexthop)+20)."
        Adjust::Mtu => {
            let total = u16::try_from(q.total).unwrap_or(u16::MAX);
            icmp_map::mtu_4_to_6(msg.mtu(), opts.ipv4_mtu, opts.ipv6_mtu, total)
        }
        // RFC 7915 §4.2: "Parameter Problem (Type 12): ... the Pointer field MUST be
        // updated", per Figure 3; unlisted pointers: "silently drop the packet".
        Adjust::Pointer => {
            u32::from(icmp_map::pointer_4_to_6(msg.pointer()).ok_or(SiitDrop::IcmpDropped)?)
        }
        Adjust::SetPointer(p) => p,
    };

    // The quoted transport data, which stays byte for byte (bar checksum and ICMP type).
    let q_data = pay + ICMP_HDR + q.ihl;
    // With an extension, the quote ends with the datagram (its zero padding is not data).
    let q_end = match found {
        Some(f) => pay + ICMP_HDR + f.original.min(q.total),
        None => pay_end,
    };
    let q_avail = q_end.saturating_sub(q_data);
    // Only ICMPv6 Destination Unreachable and Time Exceeded have a length attribute (RFC
    // 4884); a Packet Too Big or Parameter Problem made from the error cannot carry one.
    let carry = found.filter(|_| matches!(out.msg_type, 1 | 3));
    let mut q_icmp6 = None;
    let q_next = match q.proto {
        proto::ICMP => {
            if q.frag_offset == 0 {
                if let Some(&ity) = buf.get(q_data).filter(|_| q_avail >= 1) {
                    let icode = if q_avail >= 2 { buf[q_data + 1] } else { 0 };
                    // RFC 7915 §4.3: "This process MUST stop at the first embedded header
                    // and drop the packet if it contains more embedded headers."
                    if is_icmp4_error(ity) {
                        return Err(SiitDrop::IcmpErrorAboutError);
                    }
                    match icmp_map::icmp4_to_6(ity, icode) {
                        IcmpAction::Translate(o) => q_icmp6 = Some((ity, icode, o)),
                        IcmpAction::Drop => return Err(SiitDrop::IcmpDropped),
                    }
                }
            }
            proto::ICMPV6
        }
        proto::ICMPV6 => return Err(SiitDrop::UnsupportedProtocol),
        p => p,
    };

    // RFC 7915 §4.3 via RFC 4443 §2.4(c): the ICMPv6 error must not exceed the minimum
    // IPv6 MTU, so the quote is truncated to fit 1280 bytes (with the extension kept).
    let q_frag = q.frag_len();
    let q_hdr = V6_HDR + q_frag;
    let hdrs = V6_HDR + ICMP_HDR + q_hdr;
    let (at, data_at) = if q_data >= hdrs {
        (q_data - hdrs, q_data)
    } else if buf.len() >= hdrs {
        // Too little headroom for both grown headers: the quoted data moves to the right.
        (0, hdrs)
    } else {
        return Err(SiitDrop::NoHeadroom);
    };
    let q_at = data_at - q_hdr;
    let cap = IPV6_MIN_MTU - V6_HDR - ICMP_HDR;
    let e = carry.map(|f| f.ext);
    let fit = ext::fit(q_avail, q_hdr, e, 8, cap, buf.len() - q_at);
    let keep = fit.keep;
    // The extension first (its place may be where quoted data lies now), then the data,
    // then the zero padding between them.
    let mut ext_len = 0;
    if let (Some(f), Some(field)) = (carry, fit.field) {
        let src = pay + ICMP_HDR + f.original;
        buf.copy_within(src..src + f.ext, q_at + field);
        ext_len = f.ext;
    }
    if data_at != q_data {
        buf.copy_within(q_data..q_data + keep, data_at);
    }
    if let Some(field) = fit.field {
        buf[data_at + keep..q_at + field].fill(0);
    }

    // RFC 7915 §4.3: "The ICMP error messages containing the packet in error MUST be
    // translated just like a normal IP packet (except the TTL value of the inner IPv4/IPv6
    // packet)." So the quoted transport checksum follows the quoted addresses, where the
    // quote still holds it (incrementally: the quote is usually incomplete).
    if q.frag_offset == 0 {
        let qd = &mut buf[data_at..data_at + keep];
        let d = addr_delta((q.src, q.dst), qaddrs6, true);
        match q.proto {
            proto::TCP => {
                if let Some(c) = get16(qd, 16) {
                    put16(qd, 16, d.apply(c));
                }
            }
            proto::UDP => {
                if let Some(c) = get16(qd, 6) {
                    put16(qd, 6, d.apply_udp4(c));
                }
            }
            proto::ICMP => {
                if let Some((ity, icode, o)) = q_icmp6 {
                    let mut d = Delta::ZERO;
                    d.word(
                        u16::from_be_bytes([ity, icode]),
                        u16::from_be_bytes([o.msg_type, o.code]),
                    );
                    let qlen = (q.total - q.ihl) as u32;
                    d.word(0, icmp6_pseudo(qaddrs6.0, qaddrs6.1, qlen));
                    if let Some(c) = get16(qd, 2) {
                        put16(qd, 2, d.apply(c));
                    }
                    if let Some(b) = qd.get_mut(0) {
                        *b = o.msg_type;
                    }
                    if let Some(b) = qd.get_mut(1) {
                        *b = o.code;
                    }
                }
            }
            _ => {}
        }
    }

    let icmp_len = match fit.field {
        Some(field) => ICMP_HDR + field + ext_len,
        None => ICMP_HDR + q_hdr + keep,
    };
    let tc = h.traffic_class(opts);
    write_v6(buf, at, tc, icmp_len, proto::ICMPV6, hop, addrs6, None)?;
    // The quoted header: TTL copied, not decremented; lengths as the original said.
    let q_tc = q.traffic_class(opts);
    let q_payload = q.total - q.ihl + q_frag;
    let q_frag_hdr = if q_frag != 0 { Some(&q) } else { None };
    let q_at = at + V6_HDR + ICMP_HDR;
    let q_payload = q_payload.min(usize::from(u16::MAX));
    write_v6(
        buf, q_at, q_tc, q_payload, q_next, q.ttl, qaddrs6, q_frag_hdr,
    )?;
    let icmp_at = at + V6_HDR;
    let m = buf
        .get_mut(icmp_at..icmp_at + icmp_len)
        .ok_or(SiitDrop::NoHeadroom)?;
    m[0] = out.msg_type;
    m[1] = out.code;
    m[4..8].copy_from_slice(&rest.to_be_bytes());
    // RFC 7915 §4.2: "the ICMPv6 Extension length attribute MUST be adjusted accordingly":
    // octet 4, the padded datagram field in 64-bit words (RFC 4884); zero without one.
    if let Some(field) = fit.field {
        m[4] = u8::try_from(field / 8).unwrap_or(u8::MAX);
    }
    Icmpv6Packet::new_unchecked(m).fill_checksum(&addrs6.0.octets(), &addrs6.1.octets());
    Ok((at, V6_HDR + icmp_len))
}
