//! IPv6 -> IPv4 (RFC 7915 §5): the IPv4 header is written just in front of the IPv6
//! upper-layer data; the fixed header and the skipped extension headers fall away.

use core::net::{Ipv4Addr, Ipv6Addr};

use wire::{Icmpv4Packet, Icmpv6Packet, IpProtocol, Ipv4Packet, Ipv6Packet, UdpPacket};

use super::{
    addr_delta, ext, forwarded_ttl, icmp6_pseudo, packet_range, parse_err, proto, quote_err,
    verdict, walk_chain, Chain, DfPolicy, Frag, IdentSource, SiitDrop, SiitOptions, SiitVerdict,
    Step,
};
use crate::csum::{get16, put16, Delta};
use crate::icmp_map::{self, Adjust, IcmpAction};

/// IPv4 header length without options (RFC 7915 §5.1: "Internet Header Length: 5 (no
/// IPv4 options)").
const V4_HDR: usize = 20;
/// Fixed IPv6 header length.
const V6_HDR: usize = 40;
/// ICMP header length (type, code, checksum, 32-bit rest).
const ICMP_HDR: usize = 8;
/// Above this IPv4 size DF is set (RFC 7915 §5: 1280 - 20).
const DF_THRESHOLD: usize = 1260;
/// RFC 1812 §4.3.2.3: an ICMPv4 error "SHOULD contain as much of the original datagram as
/// possible without the length of the ICMP datagram exceeding 576 bytes".
const ICMP4_ERROR_MAX: usize = 576;

/// Translates the IPv6 packet `buf[start..start + len]` into IPv4 (RFC 7915 §5).
///
/// The IPv4 packet ends where the IPv6 payload ends (bytes past the IPv6 Payload Length
/// are ignored) and starts 20 bytes plus the skipped extension headers after `start`; an
/// ICMPv6 error, whose quoted header shrinks too, starts later still. No headroom is
/// needed. Always use the returned `start`.
///
/// `src4`/`dst4` are the translated outer addresses; `inner` maps the addresses of the
/// packet quoted in an ICMPv6 error (`None` drops the error); `ids` gives the
/// Identification of a packet that leaves with DF clear and had no Fragment header.
#[allow(clippy::too_many_arguments)]
pub fn ipv6_to_ipv4(
    buf: &mut [u8],
    start: usize,
    len: usize,
    src4: Ipv4Addr,
    dst4: Ipv4Addr,
    inner: &dyn Fn(Ipv6Addr, Ipv6Addr) -> Option<(Ipv4Addr, Ipv4Addr)>,
    ids: &dyn IdentSource,
    opts: &SiitOptions,
) -> SiitVerdict {
    verdict(translate(buf, start, len, (src4, dst4), inner, ids, opts))
}

/// The IPv6 header fields the translation needs, read before any byte is overwritten.
#[derive(Clone, Copy, Debug)]
struct V6Hdr {
    tc: u8,
    payload_len: usize,
    hop: u8,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    chain: Chain,
}

impl V6Hdr {
    /// Reads the fixed header of `p` and walks its extension headers.
    fn read(p: &Ipv6Packet<&[u8]>, outer: bool) -> Result<Self, SiitDrop> {
        let data: &[u8] = p.as_ref();
        let end = (V6_HDR + usize::from(p.payload_len())).min(data.len());
        let chain = walk_chain(&data[..end], outer)?;
        Ok(V6Hdr {
            tc: p.traffic_class(),
            payload_len: usize::from(p.payload_len()),
            hop: p.hop_limit(),
            src: p.src_addr(),
            dst: p.dst_addr(),
            chain,
        })
    }

    /// The IPv4 TOS.
    ///
    /// RFC 7915 §5.1: "Type of Service (TOS): By default, copied from the IPv6 Traffic
    /// Class (all 8 bits). ... An implementation of a translator SHOULD provide the ability
    /// to ignore the IPv6 traffic class and always set the IPv4 TOS Octet to a specified
    /// value" (`tos = N`; zero with `tos_to_traffic_class` off).
    fn tos(&self, opts: &SiitOptions) -> u8 {
        if let Some(tos) = opts.tos {
            tos
        } else if opts.tos_to_traffic_class {
            self.tc
        } else {
            0
        }
    }

    /// Bytes of upper-layer data the header announces (extension headers excluded).
    ///
    /// RFC 7915 §5.1.1: "the Total Length MUST be set to Payload Length value from IPv6
    /// header, minus length of extension headers up to Fragmentation Header, minus 8 for
    /// the Fragment Header, plus the size of the IPv4 header."
    fn upper_len(&self) -> usize {
        (V6_HDR + self.payload_len).saturating_sub(self.chain.upper)
    }
}

/// An IPv4 header to write.
#[derive(Clone, Copy, Debug)]
struct V4Out {
    tos: u8,
    total: usize,
    ident: u16,
    df: bool,
    mf: bool,
    offset: u16,
    ttl: u8,
    proto: u8,
    addrs: (Ipv4Addr, Ipv4Addr),
}

/// Identification, DF, MF and offset of the IPv4 packet whose DF, when it has no Fragment
/// header, is `df` ([`sets_df`] or [`outer_df`]); `fresh` gives the Identification of a
/// non-atomic one (called only then).
#[inline]
fn frag_fields(
    frag: Option<Frag>,
    df: bool,
    fresh: impl FnOnce() -> u16,
) -> (u16, bool, bool, u16) {
    match frag {
        // RFC 7915 §5.1.1: "Identification: Copied from the low-order 16 bits in the
        // Identification field in the Fragment Header. Flags: The IPv4 More Fragments (MF)
        // flag is copied from the M flag in the IPv6 Fragment Header. The IPv4 Don't
        // Fragment (DF) flag is cleared (set to zero), allowing this packet to be further
        // fragmented by IPv4 routers. Fragment Offset: Copied from the Fragment Offset
        // field of the IPv6 Fragment Header."
        Some(f) => (f.ident as u16, false, f.more, f.offset),
        // RFC 7915 §5.1: "Flags: The More Fragments flag is set to zero. The Don't
        // Fragment (DF) flag is set as follows: If the size of the translated IPv4 packet
        // is less than or equal to 1260 bytes, it is set to zero; otherwise, it is set to
        // one." and "Identification: Set according to a Fragment Identification algorithm
        // as discussed in [RFC6864]." RFC 6864 §4.1: an atomic datagram (DF set, not a
        // fragment) may carry any ID ("Originating sources MAY set the IPv4 ID field of
        // atomic datagrams to any value"), so it gets 0; a non-atomic one the next ID of
        // its (source, destination, protocol) from the caller's `IdentSource` (§4.2).
        None if df => (0, true, false, 0),
        None => (fresh(), false, false, 0),
    }
}

/// Whether the translated packet gets DF (see [`frag_fields`]): known before any byte is
/// rewritten, so the MTU check refuses a packet as it arrived (the ICMP error owed for it
/// quotes it).
fn sets_df(frag: Option<Frag>, total: usize) -> bool {
    frag.is_none() && total > DF_THRESHOLD
}

/// DF of an outer (not quoted) translated packet under the operator's [`DfPolicy`]: the
/// RFC 7915 §5.1 rule of [`sets_df`] by default; a Fragment header always means clear.
fn outer_df(frag: Option<Frag>, total: usize, opts: &SiitOptions) -> bool {
    match opts.df {
        DfPolicy::Rfc => sets_df(frag, total),
        DfPolicy::Clear => false,
        DfPolicy::Set => frag.is_none(),
    }
}

/// Writes an IPv4 header (IHL 5) at `at`, checksum included.
fn write_v4(buf: &mut [u8], at: usize, h: &V4Out) -> Result<(), SiitDrop> {
    let total = u16::try_from(h.total).map_err(|_| SiitDrop::NeedsFragmentation)?;
    let hdr = buf.get_mut(at..at + V4_HDR).ok_or(SiitDrop::NoHeadroom)?;
    let mut p = Ipv4Packet::new_unchecked(hdr);
    p.set_version(4);
    p.set_header_len(V4_HDR);
    p.set_dscp_ecn(h.tos);
    p.set_total_len(total);
    p.set_ident(h.ident);
    p.set_flags_and_offset(h.df, h.mf, h.offset);
    p.set_ttl(h.ttl);
    p.set_protocol(IpProtocol::from(h.proto));
    p.set_src_addr(h.addrs.0);
    p.set_dst_addr(h.addrs.1);
    // RFC 7915 §5.1: "Header Checksum: Computed once the IPv4 header has been created."
    p.fill_checksum();
    Ok(())
}

/// Refuses an IPv4 packet bigger than the IPv4 next hop takes.
///
/// RFC 7915 §1.4: "the translator MUST send a Packet Too Big error message or fragment the
/// packet when the packet size exceeds the MTU of the next-hop interface." With DF to be
/// set, the IPv6 sender is told the MTU as it counts it (RFC 7915 §5.2's "MTU_of_IPv4_
/// nexthop + 20"), never below the IPv6 minimum of 1280 (RFC 8200 §5: it would not go
/// lower; at 1280 its packets become IPv4 packets of at most 1260 bytes, DF clear). With
/// DF clear (a Fragment header, RFC 7915 §5.1.1: "allowing this packet to be further
/// fragmented"), the caller fragments the IPv4 packet.
fn check_mtu(total: usize, df: bool, opts: &SiitOptions) -> Result<(), SiitDrop> {
    if total as u64 <= u64::from(opts.ipv4_mtu) && total <= usize::from(u16::MAX) {
        return Ok(());
    }
    if df {
        let mtu = opts
            .ipv4_mtu
            .min(u32::from(u16::MAX))
            .saturating_add((V6_HDR - V4_HDR) as u32)
            .max(1280);
        return Err(SiitDrop::PacketTooBig { mtu });
    }
    Err(SiitDrop::NeedsFragmentation)
}

/// The whole IPv6 -> IPv4 translation.
#[allow(clippy::too_many_arguments)]
fn translate(
    buf: &mut [u8],
    start: usize,
    len: usize,
    addrs4: (Ipv4Addr, Ipv4Addr),
    inner: &dyn Fn(Ipv6Addr, Ipv6Addr) -> Option<(Ipv4Addr, Ipv4Addr)>,
    ids: &dyn IdentSource,
    opts: &SiitOptions,
) -> Step {
    let (start, end) = packet_range(buf, start, len)?;
    let pkt = Ipv6Packet::new_checked(&buf[start..end]).map_err(parse_err)?;
    let h = V6Hdr::read(&pkt, true)?;
    // RFC 7915 §5.1: "Time to Live: Time To Live is derived from Hop Limit value in IPv6
    // header. Since the translator is a router, as part of forwarding the packet it needs
    // to decrement either the IPv6 Hop Limit (before the translation) or the IPv4 TTL
    // (after the translation)."
    let ttl = forwarded_ttl(h.hop, opts)?;
    let up = start + h.chain.upper;
    let up_end = start + V6_HDR + h.payload_len;

    // RFC 7915 §5.1: "Protocol: ... ICMPv6 (58) is changed to ICMPv4 (1), and the payload
    // is translated as discussed in Section 5.2. The IPv6 headers HOPOPT (0), IPv6-Route
    // (43), and IPv6-Opts (60) are skipped over during processing ... For the first 'next
    // header' that does not match one of the cases above, its Next Header value ... is
    // copied to the protocol field in the IPv4 header."
    match h.chain.proto {
        proto::ICMPV6 => return icmp(buf, up, up_end, &h, ttl, addrs4, inner, ids, opts),
        // ICMPv4 carried in IPv6 would keep a checksum meant for ICMPv6's rules.
        proto::ICMP => return Err(SiitDrop::UnsupportedProtocol),
        _ => {}
    }

    // Refuse before rewriting anything: the ICMP error owed quotes the packet as it came.
    let total = V4_HDR + (up_end - up);
    let df = outer_df(h.chain.frag, total, opts);
    check_mtu(total, df, opts)?;

    // RFC 7915 §5.5: "Translators MUST do this [update the transport checksum] for TCP,
    // UDP, and ICMP." A non-first fragment carries no transport header.
    if h.chain.frag.is_none_or(|f| f.offset == 0) {
        let l4 = &mut buf[up..up_end];
        let d = addr_delta(addrs4, (h.src, h.dst), false);
        match h.chain.proto {
            proto::TCP => {
                let c = get16(l4, 16).ok_or(SiitDrop::Truncated)?;
                put16(l4, 16, d.apply(c));
            }
            proto::UDP => udp(l4, h.chain.frag, addrs4, d, opts)?,
            _ => {}
        }
    }

    let (ident, df, mf, offset) = frag_fields(h.chain.frag, df, || {
        ids.next_ident(addrs4.0, addrs4.1, h.chain.proto)
    });
    let at = up - V4_HDR;
    let out = V4Out {
        tos: h.tos(opts),
        total,
        ident,
        df,
        mf,
        offset,
        ttl,
        proto: h.chain.proto,
        addrs: addrs4,
    };
    write_v4(buf, at, &out)?;
    Ok((at, total))
}

/// Updates the UDP checksum of the first (or only) fragment `l4` for the IPv4 addresses,
/// or refuses (or, if allowed, computes) a zero checksum.
///
/// RFC 8200 §8.1: "IPv6 receivers must discard UDP packets containing a zero checksum",
/// except for the tunnels of RFC 6935. A zero checksum means "none" in IPv4, so passing
/// it on would launder an illegal packet; it is dropped by default, the mirror of RFC
/// 7915 §4.5's rule for IPv4 UDP without a checksum. With `compute_ipv6_udp_zero_csum`
/// the IPv4 checksum is computed over the whole datagram, which only an unfragmented
/// packet (an atomic fragment included) holds.
fn udp(
    l4: &mut [u8],
    frag: Option<Frag>,
    addrs4: (Ipv4Addr, Ipv4Addr),
    d: Delta,
    opts: &SiitOptions,
) -> Result<(), SiitDrop> {
    let c = get16(l4, 6).ok_or(SiitDrop::Truncated)?;
    if c != 0 {
        put16(l4, 6, d.apply_udp4(c));
        return Ok(());
    }
    let whole = frag.is_none_or(|f| f.offset == 0 && !f.more);
    if !whole || !opts.compute_ipv6_udp_zero_csum {
        return Err(SiitDrop::Ipv6UdpZeroChecksum);
    }
    let ulen = usize::from(get16(l4, 4).ok_or(SiitDrop::Truncated)?);
    let dgram = l4.get_mut(..ulen).filter(|_| ulen >= 8);
    let dgram = dgram.ok_or(SiitDrop::Malformed)?;
    UdpPacket::new_unchecked(dgram).fill_checksum_v4(addrs4.0.octets(), addrs4.1.octets());
    Ok(())
}

/// ICMPv6 -> ICMPv4 (RFC 7915 §5.2, §5.3).
#[allow(clippy::too_many_arguments)]
fn icmp(
    buf: &mut [u8],
    up: usize,
    up_end: usize,
    h: &V6Hdr,
    ttl: u8,
    addrs4: (Ipv4Addr, Ipv4Addr),
    inner: &dyn Fn(Ipv6Addr, Ipv6Addr) -> Option<(Ipv4Addr, Ipv4Addr)>,
    ids: &dyn IdentSource,
    opts: &SiitOptions,
) -> Step {
    // RFC 7915 §1.2: "Fragmented ICMP/ICMPv6 packets will not be translated by IP/ICMP
    // translators." (An atomic fragment, offset 0 and M clear, is whole.)
    if h.chain.frag.is_some_and(|f| f.offset != 0 || f.more) {
        return Err(SiitDrop::FragmentedIcmp);
    }
    let msg = Icmpv6Packet::new_checked(&buf[up..up_end]).map_err(parse_err)?;
    let (ty, code) = (u8::from(msg.msg_type()), msg.msg_code());
    // RFC 7915 §5.2: "all ICMP packets MUST have the Type translated"; the table says
    // which are translated and which are silently dropped.
    let out = match icmp_map::icmp6_to_4(ty, code) {
        IcmpAction::Translate(o) => o,
        IcmpAction::Drop => return Err(SiitDrop::IcmpDropped),
    };
    if msg.is_error() {
        return icmp_error(buf, up, up_end, h, ttl, addrs4, out, inner, ids, opts);
    }

    // An informational message (echo): same length, new type, pseudo-header removed.
    // RFC 7915 §5.2: "ICMPv6 messages MUST have their ICMPv4 checksum field be updated as
    // part of the translation since ICMPv6 (unlike ICMPv4) includes a pseudo-header in the
    // checksum just like UDP and TCP." Done incrementally.
    let icmp_len = up_end - up;
    let total = V4_HDR + icmp_len;
    let df = outer_df(h.chain.frag, total, opts);
    check_mtu(total, df, opts)?;
    let mut d = Delta::ZERO;
    d.word(
        u16::from_be_bytes([ty, code]),
        u16::from_be_bytes([out.msg_type, out.code]),
    );
    d.word(icmp6_pseudo(h.src, h.dst, icmp_len as u32), 0);
    let c = d.apply(msg.checksum());
    let l4 = &mut buf[up..up_end];
    l4[0] = out.msg_type;
    l4[1] = out.code;
    let c = crate::csum::icmp4_checksum(c, l4);
    put16(l4, 2, c);

    let (ident, df, mf, offset) = frag_fields(h.chain.frag, df, || {
        ids.next_ident(addrs4.0, addrs4.1, proto::ICMP)
    });
    let at = up - V4_HDR;
    let o = V4Out {
        tos: h.tos(opts),
        total,
        ident,
        df,
        mf,
        offset,
        ttl,
        proto: proto::ICMP,
        addrs: addrs4,
    };
    write_v4(buf, at, &o)?;
    Ok((at, total))
}

/// ICMPv6 error -> ICMPv4 error, quoted packet translated (RFC 7915 §5.3).
#[allow(clippy::too_many_arguments)]
fn icmp_error(
    buf: &mut [u8],
    up: usize,
    up_end: usize,
    h: &V6Hdr,
    ttl: u8,
    addrs4: (Ipv4Addr, Ipv4Addr),
    out: icmp_map::Icmp4Out,
    inner: &dyn Fn(Ipv6Addr, Ipv6Addr) -> Option<(Ipv4Addr, Ipv4Addr)>,
    ids: &dyn IdentSource,
    opts: &SiitOptions,
) -> Step {
    let msg = Icmpv6Packet::new_unchecked(&buf[up..up_end]);
    // The body is rewritten and the checksum recomputed: verify the received one first.
    if !msg.verify_checksum(&h.src.octets(), &h.dst.octets()) {
        return Err(SiitDrop::Malformed);
    }
    let quote = msg.data();
    // RFC 4884: Destination Unreachable and Time Exceeded may carry an extension after the
    // original datagram, whose length (64-bit words) is octet 4.
    let found = match buf.get(up) {
        Some(1 | 3) => ext::find(
            buf.get(up + 4).copied().unwrap_or(0),
            8,
            quote.len(),
            V6_HDR,
        ),
        _ => None,
    };
    let quote = match found {
        Some(f) => quote.get(..f.original).unwrap_or(quote),
        None => quote,
    };
    let ip = Ipv6Packet::new_checked_embedded(quote).map_err(|e| quote_err(parse_err(e)))?;
    // The quoted packet's Routing header is not the translator's concern (outer = false).
    let q = V6Hdr::read(&ip, false).map_err(quote_err)?;
    let qaddrs4 = inner(q.src, q.dst).ok_or(SiitDrop::IcmpDropped)?;

    let rest: u32 = match out.adjust {
        Adjust::None => 0,
        // RFC 7915 §5.2: "The MTU field MUST be adjusted for the difference between the
        // IPv4 and IPv6 header sizes, taking into account whether or not the packet in
        // error includes a Fragment Header, i.e., minimum(advertised MTU-20,
        // MTU_of_IPv4_nexthop, (MTU_of_IPv6_nexthop)-20)."
        Adjust::Mtu => {
            let frag = if q.chain.frag.is_some() { 8 } else { 0 };
            let ptb = msg.mtu().saturating_sub(frag);
            u32::from(icmp_map::mtu_6_to_4(ptb, opts.ipv4_mtu, opts.ipv6_mtu))
        }
        // RFC 7915 §5.2: "the Pointer field MUST be updated", per Figure 6; unlisted
        // pointers: "silently drop the packet".
        Adjust::Pointer => {
            let p = icmp_map::pointer_6_to_4(msg.pointer()).ok_or(SiitDrop::IcmpDropped)?;
            u32::from(p) << 24
        }
        Adjust::SetPointer(p) => p.min(255) << 24,
    };

    // The quoted upper-layer data stays where it is; the three headers are written in
    // front of it (they are 48 bytes, it is preceded by at least 88).
    let q_up = up + ICMP_HDR + q.chain.upper;
    // With an extension, the quote ends with the datagram (its zero padding is not data).
    let q_end = match found {
        Some(f) => up + ICMP_HDR + f.original.min(V6_HDR + q.payload_len),
        None => up_end,
    };
    let q_avail = q_end.saturating_sub(q_up);
    // ICMPv4 Destination Unreachable, Time Exceeded and Parameter Problem have a length
    // attribute (RFC 4884).
    let carry = found.filter(|_| matches!(out.msg_type, 3 | 11 | 12));
    let q_first = q.chain.frag.is_none_or(|f| f.offset == 0);
    let mut q_icmp4 = None;
    let q_proto = match q.chain.proto {
        proto::ICMPV6 => {
            if q_first && q_avail >= 1 {
                let ity = buf[q_up];
                let icode = if q_avail >= 2 { buf[q_up + 1] } else { 0 };
                // RFC 7915 §5.3: "This process MUST stop at the first embedded header and
                // drop the packet if it contains more embedded headers."
                if ity < 128 {
                    return Err(SiitDrop::IcmpErrorAboutError);
                }
                match icmp_map::icmp6_to_4(ity, icode) {
                    IcmpAction::Translate(o) => q_icmp4 = Some((ity, icode, o)),
                    IcmpAction::Drop => return Err(SiitDrop::IcmpDropped),
                }
            }
            proto::ICMP
        }
        proto::ICMP => return Err(SiitDrop::UnsupportedProtocol),
        p => p,
    };
    let cap = ICMP4_ERROR_MAX.min(opts.ipv4_mtu as usize);
    // The error fits 576 bytes (and the IPv4 MTU) with the extension kept: the datagram
    // is cut, padded to 32 bits (at least 128 bytes) and the extension moved behind it.
    // With an extension the translated datagram field starts where the received one did
    // (so a padded field never needs room past the packet): the quoted data moves left.
    // Without one, the data stays and only headers are written in front of it.
    let ext_q_at = up + ICMP_HDR;
    let e = carry.map(|f| f.ext);
    let room = buf.len().saturating_sub(ext_q_at);
    let fit = ext::fit(
        q_avail,
        V4_HDR,
        e,
        4,
        cap.saturating_sub(V4_HDR + ICMP_HDR),
        room,
    );
    let keep = fit.keep;
    let (q_at, data_at) = match fit.field {
        Some(_) => (ext_q_at, ext_q_at + V4_HDR),
        None => (q_up.checked_sub(V4_HDR).ok_or(SiitDrop::Malformed)?, q_up),
    };
    let at = q_at
        .checked_sub(V4_HDR + ICMP_HDR)
        .ok_or(SiitDrop::Malformed)?;
    let mut ext_len = 0;
    if let (Some(f), Some(field)) = (carry, fit.field) {
        // Data first (it moves left, away from the extension), then the extension, then
        // the padding between them.
        buf.copy_within(q_up..q_up + keep, data_at);
        let src = up + ICMP_HDR + f.original;
        buf.copy_within(src..src + f.ext, q_at + field);
        buf[data_at + keep..q_at + field].fill(0);
        ext_len = f.ext;
    }

    // RFC 7915 §5.3: "The ICMP error messages containing the packet in error MUST be
    // translated just like a normal IP packet (except that the TTL/Hop Limit value of the
    // inner IPv4/IPv6 packet are not decremented)." The quoted transport checksum follows
    // the quoted addresses, where the quote still holds it.
    if q_first {
        let qd = &mut buf[data_at..data_at + keep];
        let d = addr_delta(qaddrs4, (q.src, q.dst), false);
        match q.chain.proto {
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
            proto::ICMPV6 => {
                if let Some((ity, icode, o)) = q_icmp4 {
                    let mut d = Delta::ZERO;
                    d.word(
                        u16::from_be_bytes([ity, icode]),
                        u16::from_be_bytes([o.msg_type, o.code]),
                    );
                    d.word(icmp6_pseudo(q.src, q.dst, q.upper_len() as u32), 0);
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

    // The quoted header: lengths as the original said, Hop Limit copied as TTL. It is
    // no datagram sent, so it takes no fresh Identification: without a Fragment header
    // (whose identification it keeps) the original IPv4 one is unknown, and it says 0.
    let q_total = (V4_HDR + q.upper_len()).min(usize::from(u16::MAX));
    let (ident, df, mf, offset) = frag_fields(q.chain.frag, sets_df(q.chain.frag, q_total), || 0);
    let q_out = V4Out {
        tos: q.tos(opts),
        total: q_total,
        ident,
        df,
        mf,
        offset,
        ttl: q.hop,
        proto: q_proto,
        addrs: qaddrs4,
    };
    write_v4(buf, at + V4_HDR + ICMP_HDR, &q_out)?;

    let icmp_at = at + V4_HDR;
    let icmp_len = match fit.field {
        Some(field) => ICMP_HDR + field + ext_len,
        None => ICMP_HDR + V4_HDR + keep,
    };
    let m = &mut buf[icmp_at..icmp_at + icmp_len];
    m[0] = out.msg_type;
    m[1] = out.code;
    m[4..8].copy_from_slice(&rest.to_be_bytes());
    // RFC 7915 §5.2: the length attribute "MUST be adjusted accordingly": octet 5, the
    // padded datagram field in 32-bit words (RFC 4884); zero without an extension.
    if let Some(field) = fit.field {
        m[5] = u8::try_from(field / 4).unwrap_or(u8::MAX);
    }
    Icmpv4Packet::new_unchecked(&mut *m).fill_checksum();

    let total = V4_HDR + icmp_len;
    // RFC 7915 §5.1.1: an error carried in an atomic fragment (the only kind `icmp` lets
    // through) takes its Identification from the Fragment header like any other packet;
    // without one, DF follows the operator's policy.
    let (ident, df, mf, offset) =
        frag_fields(h.chain.frag, outer_df(h.chain.frag, total, opts), || {
            ids.next_ident(addrs4.0, addrs4.1, proto::ICMP)
        });
    let o = V4Out {
        tos: h.tos(opts),
        total,
        ident,
        df,
        mf,
        offset,
        ttl,
        proto: proto::ICMP,
        addrs: addrs4,
    };
    write_v4(buf, at, &o)?;
    Ok((at, total))
}
