//! Stateless IP/ICMP translation between IPv4 and IPv6 (SIIT, RFC 7915): the header
//! rewrite under NAT64 and 464XLAT.
//!
//! Both directions work in place, in the caller's buffer. IPv4 -> IPv6 grows the packet,
//! so the IPv6 header is written into headroom in front of the IPv4 payload; IPv6 -> IPv4
//! shrinks it, so the IPv4 header is written just in front of the IPv6 upper-layer data.
//! The payload is never copied on the normal path; only an ICMPv4 error whose buffer has
//! too little headroom for its two grown headers has its quoted data moved.
//!
//! Addresses are the caller's business: it passes the translated outer addresses (RFC
//! 6052 embedding, an EAM table or a NAT64 binding) and a closure for the addresses of the
//! packet quoted in an ICMP error. This module decides nothing about sessions.
//!
//! Transport checksums are updated incrementally (RFC 1624) so an end-to-end checksum
//! that was wrong stays wrong; only ICMP error messages, whose bodies are rewritten, get a
//! full recompute (after their received checksum has been verified).
//!
//! This module must never panic on any input (any bytes, any `start`/`len`, any
//! headroom), never allocate, and never use `unsafe`. A packet it cannot translate is
//! dropped with a [`SiitDrop`] reason; where RFC 7915 wants an ICMP error sent back, the
//! reason carries what the caller needs to build it.

mod ext;
mod v4_to_v6;
mod v6_to_v4;

#[cfg(test)]
mod tests;

use core::net::{Ipv4Addr, Ipv6Addr};

use wire::checksum::{combine, fold};

use crate::csum::Delta;

pub use v4_to_v6::{ipv4_precheck, ipv4_to_ipv6};
pub use v6_to_v4::ipv6_to_ipv4;

/// Where the Identification of an IPv4 packet translated from IPv6 comes from, when RFC
/// 6864 wants it unique: a packet without a Fragment header that leaves with DF clear (a
/// non-atomic datagram). The translator itself keeps no state; the caller's source does.
///
/// RFC 6864 §4.2: "The IPv4 ID field MUST NOT be used for purposes other than
/// fragmentation and reassembly" and sources of non-atomic datagrams "MUST NOT repeat the
/// ID value within one MSL for a given source address/destination address/protocol
/// tuple" (as far as 16 bits allow): a source is a counter per tuple, not a function of
/// the packet's bytes (two datagrams that start alike would share an ID, and a reassembling
/// host could splice their fragments).
pub trait IdentSource {
    /// The Identification of the next non-atomic datagram from `src` to `dst` carrying
    /// `proto` (the IPv4 protocol number, ICMP = 1).
    fn next_ident(&self, src: Ipv4Addr, dst: Ipv4Addr, proto: u8) -> u16;
}

/// The knobs RFC 7915 asks a translator to offer.
///
/// Two kinds of MTU (RFC 7915 §4.1): the *next-hop* MTUs (`ipv6_mtu`, `ipv4_mtu`) of the
/// links the translated packets leave by, which bound packets sent with DF and the MTU
/// reported in Fragmentation Needed / Packet Too Big; and `lowest_ipv6_mtu`, the smallest
/// MTU of the IPv6 paths, to which IPv4 packets without DF are fragmented.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiitOptions {
    /// MTU of the IPv6 next hop (at least 1280). The gateway lowers it to its IPv6 link's
    /// MTU; the default, 65535, leaves the link's MTU in force.
    pub ipv6_mtu: u32,
    /// MTU of the IPv4 next hop. The gateway lowers it to its IPv4 link's MTU; the
    /// default, 65535, leaves the link's MTU in force.
    pub ipv4_mtu: u32,
    /// RFC 7915 §4.1 "lowest-ipv6-mtu" (default 1280): an IPv4 packet without DF whose
    /// translation would be bigger is fragmented so that each IPv6 fragment fits it.
    pub lowest_ipv6_mtu: u32,
    /// RFC 7915 §4.5: compute a checksum for an unfragmented IPv4 UDP packet sent with
    /// checksum 0 (otherwise such packets are dropped with [`SiitDrop::UdpZeroChecksum`]).
    pub translate_udp_zero_csum: bool,
    /// Decrement TTL / Hop Limit (the translator is a router); off when the caller does it.
    pub decrement_ttl: bool,
    /// RFC 8200 §8.1 / RFC 6935: an IPv6 UDP packet with checksum 0 is illegal; compute the
    /// IPv4 UDP checksum for an unfragmented one (otherwise such packets are dropped with
    /// [`SiitDrop::Ipv6UdpZeroChecksum`]). The IPv6 -> IPv4 mirror of
    /// `translate_udp_zero_csum`.
    pub compute_ipv6_udp_zero_csum: bool,
    /// RFC 7915 §4.1/§5.1: copy TOS <-> Traffic Class (true) or always write zero (false).
    /// `traffic_class` / `tos`, when set, take precedence.
    pub tos_to_traffic_class: bool,
    /// RFC 7915 §4.1: write this IPv6 Traffic Class instead of the IPv4 TOS.
    pub traffic_class: Option<u8>,
    /// RFC 7915 §5.1: write this IPv4 TOS instead of the IPv6 Traffic Class.
    pub tos: Option<u8>,
    /// RFC 7915 §5.1: how DF is set on an IPv4 packet translated from one without a
    /// Fragment header.
    pub df: DfPolicy,
}

impl SiitOptions {
    /// The largest IPv6 packet an IPv4 packet without DF may become before it has to be
    /// fragmented: `lowest_ipv6_mtu`, but never more than the next hop takes.
    #[inline]
    pub fn ipv6_fragment_mtu(&self) -> u32 {
        self.lowest_ipv6_mtu.min(self.ipv6_mtu)
    }
}

impl Default for SiitOptions {
    /// Next-hop MTUs left to the links, lowest IPv6 MTU 1280, zero-checksum UDP dropped
    /// (both families), TTL decremented, TOS copied, DF by RFC 7915's 1260-byte rule.
    fn default() -> Self {
        SiitOptions {
            ipv6_mtu: 65535,
            ipv4_mtu: 65535,
            lowest_ipv6_mtu: 1280,
            translate_udp_zero_csum: false,
            decrement_ttl: true,
            compute_ipv6_udp_zero_csum: false,
            tos_to_traffic_class: true,
            traffic_class: None,
            tos: None,
            df: DfPolicy::Rfc,
        }
    }
}

/// The DF flag of an IPv4 packet translated from an IPv6 packet without a Fragment header
/// (one with a Fragment header always gets DF clear, RFC 7915 §5.1.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DfPolicy {
    /// RFC 7915 §5.1: "If the size of the translated IPv4 packet is less than or equal to
    /// 1260 bytes, it is set to zero; otherwise, it is set to one."
    #[default]
    Rfc,
    /// Always clear: IPv4 routers may fragment every translated packet, and the translator
    /// fragments what its IPv4 next hop does not take instead of answering Packet Too Big.
    Clear,
    /// Always set (as RFC 6145 §5.1 did): IPv4 path MTU discovery for every packet.
    Set,
}

impl DfPolicy {
    /// The name operators write (`rfc`, `clear`, `set`).
    pub fn as_str(self) -> &'static str {
        match self {
            DfPolicy::Rfc => "rfc",
            DfPolicy::Clear => "clear",
            DfPolicy::Set => "set",
        }
    }
}

/// What to do with the packet after translation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SiitVerdict {
    /// Send `buf[start..start + len]`, the translated packet.
    Forward {
        /// Offset of the translated IP header in the buffer.
        start: usize,
        /// Length of the translated packet.
        len: usize,
    },
    /// Do not send anything; the buffer content is unspecified.
    Drop(SiitDrop),
}

/// Why a packet was not translated.
///
/// Where a variant says "answer", the caller may send that ICMP error, but never about an
/// ICMP error message (RFC 7915 §4.4: "unless the discarded packet is itself an ICMPv4
/// error message"; §5.4 likewise for ICMPv6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SiitDrop {
    /// `start..start + len` is outside the buffer, or shorter than the headers it announces.
    Truncated,
    /// Bad version, header length, header checksum, options or ICMP checksum.
    Malformed,
    /// A protocol the translator refuses: ICMPv6 inside IPv4, ICMPv4 inside IPv6, an
    /// extension header after the IPv6 Fragment header (RFC 7915 §5.1.1: "SHOULD be
    /// dropped").
    UnsupportedProtocol,
    /// An ICMP type/code the RFC's table drops, or an ICMP error whose pointer or quoted
    /// addresses have no translation.
    IcmpDropped,
    /// TTL / Hop Limit would reach zero: answer ICMPv4 Time Exceeded / ICMPv6 Hop Limit
    /// Exceeded.
    TtlExpired,
    /// IPv4 -> IPv6, DF set, the IPv6 packet would exceed the next-hop `ipv6_mtu`:
    /// answer ICMPv4 Fragmentation Needed (type 3 code 4) carrying `mtu`.
    FragmentNeeded {
        /// Next-hop MTU to report, as the IPv4 sender counts it (`ipv6_mtu` - 20).
        mtu: u16,
    },
    /// IPv6 -> IPv4 with DF to be set, the IPv4 packet would exceed `ipv4_mtu`: answer
    /// ICMPv6 Packet Too Big carrying `mtu`.
    PacketTooBig {
        /// MTU to report, as the IPv6 sender counts it (`ipv4_mtu` + 20, at least 1280).
        mtu: u32,
    },
    /// The packet may be fragmented but is too big: IPv4 -> IPv6 without DF, bigger than
    /// [`SiitOptions::ipv6_fragment_mtu`] (RFC 7915 §4.1: "SHOULD be fragmented"), or
    /// IPv6 -> IPv4 with DF to be clear, bigger than `ipv4_mtu`. One packet in, one out:
    /// the caller fragments it (`crate::fragment`), or drops it with this reason.
    NeedsFragmentation,
    /// An ICMP message that is a fragment: its checksum cannot be translated (RFC 7915
    /// §1.2: "Fragmented ICMP/ICMPv6 packets will not be translated").
    FragmentedIcmp,
    /// IPv4 UDP with checksum 0 that may not or cannot be given one (RFC 7915 §4.5).
    UdpZeroChecksum,
    /// IPv6 UDP with checksum 0 (illegal outside RFC 6935 tunnels, RFC 8200 §8.1) that may
    /// not or cannot be given one (see `compute_ipv6_udp_zero_csum`).
    Ipv6UdpZeroChecksum,
    /// An unexpired IPv4 LSRR/SSRR option (answer ICMPv4 type 3 code 5), or an IPv6
    /// Routing header with Segments Left != 0 (answer ICMPv6 Parameter Problem code 0).
    SourceRouted {
        /// IPv6 only: the Parameter Problem pointer, the offset of Segments Left.
        pointer: Option<u32>,
    },
    /// The packet quoted in an ICMP error is itself an ICMP error (RFC 7915 §4.3: "drop
    /// the packet if it contains more embedded headers").
    IcmpErrorAboutError,
    /// An ICMP error whose quoted packet is too short for its IP header (or extension
    /// headers) or is no IP header of the error's family: nothing to translate it by.
    /// Never answered, being an ICMP error itself (RFC 7915 §4.4, §5.4).
    IcmpErrorMalformed,
    /// The buffer has too little room around the packet for the translated headers.
    NoHeadroom,
}

impl SiitDrop {
    /// A short, stable, lower-case name (also the metric label).
    pub fn as_str(&self) -> &'static str {
        match self {
            SiitDrop::Truncated => "truncated",
            SiitDrop::Malformed => "malformed",
            SiitDrop::UnsupportedProtocol => "unsupported_protocol",
            SiitDrop::IcmpDropped => "icmp_dropped",
            SiitDrop::TtlExpired => "ttl_expired",
            SiitDrop::FragmentNeeded { .. } => "fragment_needed",
            SiitDrop::PacketTooBig { .. } => "packet_too_big",
            SiitDrop::NeedsFragmentation => "needs_fragmentation",
            SiitDrop::FragmentedIcmp => "fragmented_icmp",
            SiitDrop::UdpZeroChecksum => "udp_zero_checksum",
            SiitDrop::Ipv6UdpZeroChecksum => "ipv6_udp_zero_checksum",
            SiitDrop::SourceRouted { .. } => "source_routed",
            SiitDrop::IcmpErrorAboutError => "icmp_error_about_error",
            SiitDrop::IcmpErrorMalformed => "icmp_error_malformed",
            SiitDrop::NoHeadroom => "no_headroom",
        }
    }
}

/// The result type of the internal steps: `(start, len)` of the translated packet.
type Step = Result<(usize, usize), SiitDrop>;

/// Turns an internal step into the public verdict.
#[inline]
fn verdict(step: Step) -> SiitVerdict {
    match step {
        Ok((start, len)) => SiitVerdict::Forward { start, len },
        Err(d) => SiitVerdict::Drop(d),
    }
}

/// Maps a `wire` parse error to a drop reason.
#[inline]
fn parse_err(e: wire::Error) -> SiitDrop {
    match e {
        wire::Error::Truncated => SiitDrop::Truncated,
        _ => SiitDrop::Malformed,
    }
}

/// Maps why the packet quoted in an ICMP error could not be read: a short or damaged
/// quote is the error's fault ([`SiitDrop::IcmpErrorMalformed`]); other refusals stand.
#[inline]
fn quote_err(d: SiitDrop) -> SiitDrop {
    match d {
        SiitDrop::Truncated | SiitDrop::Malformed => SiitDrop::IcmpErrorMalformed,
        d => d,
    }
}

/// `start..start + len` as a range inside `buf`, if it is one.
#[inline]
fn packet_range(buf: &[u8], start: usize, len: usize) -> Result<(usize, usize), SiitDrop> {
    match start.checked_add(len) {
        Some(end) if end <= buf.len() => Ok((start, end)),
        _ => Err(SiitDrop::Truncated),
    }
}

/// The forwarded TTL / Hop Limit.
///
/// RFC 7915 §4.1: "As part of decrementing the TTL or Hop Limit, the translator (as any
/// router) MUST check for zero and send the ICMPv4 "TTL Exceeded" or ICMPv6 "Hop Limit
/// Exceeded" error."
#[inline]
fn forwarded_ttl(ttl: u8, opts: &SiitOptions) -> Result<u8, SiitDrop> {
    if !opts.decrement_ttl {
        return Ok(ttl);
    }
    if ttl <= 1 {
        return Err(SiitDrop::TtlExpired);
    }
    Ok(ttl - 1)
}

/// The checksum delta of replacing IPv4 pseudo-header addresses by IPv6 ones (or back).
///
/// TCP, UDP: protocol and upper-layer length are the same number in both pseudo-headers
/// (a 16-bit length summed as a 32-bit one adds the same), so only addresses change.
#[inline]
fn addr_delta(v4: (Ipv4Addr, Ipv4Addr), v6: (Ipv6Addr, Ipv6Addr), to_v6: bool) -> Delta {
    let s4 = fold(addr_sum32(v4.0) + addr_sum32(v4.1));
    let s6 = fold(combine(addr_sum128(v6.0), addr_sum128(v6.1)));
    let mut d = Delta::ZERO;
    if to_v6 {
        d.word(s4, s6);
    } else {
        d.word(s6, s4);
    }
    d
}

/// The ones'-complement partial sum of an IPv4 address's two 16-bit words.
#[inline]
fn addr_sum32(a: Ipv4Addr) -> u32 {
    let v = u32::from(a);
    (v >> 16) + (v & 0xffff)
}

/// The partial sum of an IPv6 address's eight 16-bit words, without going through bytes.
#[inline]
fn addr_sum128(a: Ipv6Addr) -> u32 {
    let v = u128::from(a);
    // Add the four 32-bit lanes in 64 bits, then the 16-bit halves: no carry is lost.
    let lanes = (v as u32 as u64)
        + ((v >> 32) as u32 as u64)
        + ((v >> 64) as u32 as u64)
        + ((v >> 96) as u32 as u64);
    let words = (lanes & 0xffff) + ((lanes >> 16) & 0xffff) + (lanes >> 32);
    words as u32
}

/// The partial sum of the ICMPv6 pseudo-header (RFC 4443 §2.3), folded to 16 bits.
#[inline]
fn icmp6_pseudo(src: Ipv6Addr, dst: Ipv6Addr, len: u32) -> u16 {
    fold(wire::checksum::pseudo_header_v6(
        &src.octets(),
        &dst.octets(),
        58,
        len,
    ))
}

/// Which ICMPv4 types are errors (RFC 792; RFC 1122 §3.2.2: no error about an error).
#[inline]
fn is_icmp4_error(ty: u8) -> bool {
    matches!(ty, 3 | 4 | 5 | 11 | 12)
}

/// IPv4 protocol / IPv6 next header numbers used here.
mod proto {
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ICMPV6: u8 = 58;
    pub const HOP_BY_HOP: u8 = 0;
    pub const ROUTING: u8 = 43;
    pub const FRAGMENT: u8 = 44;
    pub const AH: u8 = 51;
    pub const DST_OPTS: u8 = 60;
}

/// What the IPv6 Fragment header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Frag {
    /// Fragment offset in bytes.
    offset: u16,
    /// M flag.
    more: bool,
    /// Identification (32 bits).
    ident: u32,
}

/// The end of an IPv6 extension-header chain, walked by RFC 7915 §5.1's rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Chain {
    /// The first next-header value that is not HbH / Routing / Fragment / DestOpts.
    proto: u8,
    /// Offset of the upper-layer data from the IPv6 header.
    upper: usize,
    /// The Fragment header, if any.
    frag: Option<Frag>,
}

/// How many extension headers the walk follows before giving up.
const MAX_EXT_HEADERS: usize = 8;

/// Walks the IPv6 extension headers of `pkt` (a slice already clamped to the packet).
///
/// Unlike [`wire::Ipv6Packet::upper_layer`], this stops at AH (RFC 7915 §5.1 translates
/// only Hop-by-Hop, Routing, Fragment and Destination Options: "For the first 'next
/// header' that does not match one of the cases above, its Next Header value ... is
/// copied to the protocol field"), checks every Routing header (not only the last) and
/// refuses extension headers after the Fragment header. `outer` enables the Segments Left
/// check (a quoted packet in an ICMP error is translated whatever its routing header).
fn walk_chain(pkt: &[u8], outer: bool) -> Result<Chain, SiitDrop> {
    let mut nh = pkt.get(6).copied().ok_or(SiitDrop::Truncated)?;
    let mut off = wire::ipv6::field::HEADER_LEN;
    let mut frag: Option<Frag> = None;
    for _ in 0..=MAX_EXT_HEADERS {
        match nh {
            proto::HOP_BY_HOP | proto::ROUTING | proto::DST_OPTS | proto::FRAGMENT | proto::AH
                if frag.is_some() =>
            {
                // RFC 7915 §5.1.1: "If the Next Header field of the Fragment Header is an
                // extension header (except ESP, but including the Authentication Header
                // (AH)), then the packet SHOULD be dropped and logged."
                return Err(SiitDrop::UnsupportedProtocol);
            }
            proto::HOP_BY_HOP | proto::ROUTING | proto::DST_OPTS => {
                if nh == proto::HOP_BY_HOP && off != wire::ipv6::field::HEADER_LEN {
                    return Err(SiitDrop::Malformed);
                }
                let hdr = pkt.get(off..off + 8).ok_or(SiitDrop::Truncated)?;
                let len = (usize::from(hdr[1]) + 1) * 8;
                // RFC 7915 §5.1: "If a Routing header with a non-zero Segments Left field
                // is present, then the packet MUST NOT be translated, and an ICMPv6
                // "parameter problem/erroneous header field encountered" (Type 4, Code 0)
                // error message, with the Pointer field indicating the first byte of the
                // Segments Left field, SHOULD be returned to the sender."
                if outer && nh == proto::ROUTING && hdr[3] != 0 {
                    return Err(SiitDrop::SourceRouted {
                        pointer: Some(off as u32 + 3),
                    });
                }
                if off + len > pkt.len() {
                    return Err(SiitDrop::Truncated);
                }
                nh = hdr[0];
                off += len;
            }
            proto::FRAGMENT => {
                let hdr = pkt.get(off..off + 8).ok_or(SiitDrop::Truncated)?;
                let off_flags = u16::from_be_bytes([hdr[2], hdr[3]]);
                frag = Some(Frag {
                    offset: off_flags & !0x7,
                    more: off_flags & 1 != 0,
                    ident: u32::from_be_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]),
                });
                nh = hdr[0];
                off += 8;
            }
            _ => {
                return Ok(Chain {
                    proto: nh,
                    upper: off,
                    frag,
                })
            }
        }
    }
    Err(SiitDrop::Malformed)
}

/// Why an IPv4 options walk stopped.
///
/// RFC 7915 §4.1: "If IPv4 options are present in the IPv4 packet, they MUST be ignored
/// (i.e., there is no attempt to translate the options), except that, if an unexpired
/// source route option (LSRR or SSRR) is present, then the packet MUST instead be
/// discarded, and an ICMPv4 "Destination Unreachable, Source Route Failed" (Type 3, Code
/// 5) error message SHOULD be returned to the sender."
fn check_v4_options(opts: &[u8]) -> Result<(), SiitDrop> {
    const EOL: u8 = 0;
    const NOP: u8 = 1;
    const LSRR: u8 = 131;
    const SSRR: u8 = 137;
    let mut i = 0;
    while let Some(&kind) = opts.get(i) {
        match kind {
            EOL => break,
            NOP => i += 1,
            _ => {
                let len = usize::from(opts.get(i + 1).copied().ok_or(SiitDrop::Malformed)?);
                if len < 2 || i + len > opts.len() {
                    return Err(SiitDrop::Malformed);
                }
                if kind == LSRR || kind == SSRR {
                    // RFC 791: "If the pointer is greater than the length, the source
                    // route is empty" (expired); otherwise it still names a next hop.
                    let ptr = usize::from(opts.get(i + 2).copied().ok_or(SiitDrop::Malformed)?);
                    if len < 3 {
                        return Err(SiitDrop::Malformed);
                    }
                    if ptr <= len {
                        return Err(SiitDrop::SourceRouted { pointer: None });
                    }
                }
                i += len;
            }
        }
    }
    Ok(())
}
