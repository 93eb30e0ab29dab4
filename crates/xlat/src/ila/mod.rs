//! Identifier-locator addressing (ILA, draft-herbert-intarea-ila; Linux
//! `Documentation/networking/ila.rst`, `net/ipv6/ila/ila_common.c`): the per-packet
//! swap of the upper 64 bits of an IPv6 destination address between a SIR prefix
//! (what applications see) and a locator (what the network routes on), with the
//! transport checksum kept right in one of the four Linux `csum-mode`s.
//!
//! An address is `upper 64 bits | identifier (lower 64 bits)`. [`sir_to_ila`] replaces
//! the SIR prefix by the locator; [`ila_to_sir`] does the reverse and restores the
//! identifier exactly as it was sent. Both are stateless and sans-I/O: the mapping table
//! that picks an [`IlaMapping`] for a packet lives in the engine.
//!
//! This module must never allocate, panic or use `unsafe`, whatever the bytes hold, and
//! a packet it refuses (any `Err`) is left byte for byte untouched: every check happens
//! before the first write.
//!
//! # Checksum arithmetic, and where it is not byte-exact
//!
//! Every change is a ones'-complement difference of 16-bit words (RFC 1624). In
//! ones'-complement arithmetic 0x0000 and 0xFFFF are the same value (zero), so a map
//! `x -> x + d` (d not zero) sends both to the same word and no reverse can tell them
//! apart. Where that could break the SIR -> ILA -> SIR byte round trip:
//!
//! * Neutral modes, the 16-bit adjustment word of the identifier: a result that is zero
//!   is written as 0x0000 (Linux, whose `~csum_fold` yields 0xFFFF, would turn a SIR
//!   identifier ending in `:0` into one ending in `:ffff` on the way back; writing 0x0000
//!   keeps `:0` exact). The one word that cannot come back is then 0xFFFF: [`sir_to_ila`]
//!   refuses such an identifier with [`IlaError::CsumNeutralUnsupported`] whenever the
//!   adjustment is not zero. [`ila_to_sir`] accepts 0xFFFF (what a Linux peer sends for
//!   a zero result) and reads it as zero.
//! * `AdjustTransport`, the transport checksum: RFC 1624 eqn. 3 round-trips every
//!   checksum except 0xFFFF, which comes back as 0x0000. A TCP or ICMPv6 checksum is
//!   never 0xFFFF when valid (the pseudo-header makes the summed data non-zero, so the
//!   complement of its sum is at most 0xFFFE). For UDP, 0xFFFF is how a computed zero is
//!   sent, and the RFC 768 rule (a computed 0 is sent as 0xFFFF; 0 on the wire means no
//!   checksum and is left alone) makes that case exact as well.

use core::fmt;

use wire::checksum::{fold, sum};
use wire::ipv6::field;
use wire::{IpProtocol, Ipv6Packet};

use crate::csum::{get16, put16, Delta};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_identity;

/// Offset of the destination address's upper 64 bits (SIR prefix or locator).
const DST_UPPER: usize = field::DST_ADDR.start;
/// Offset of the destination identifier (the address's lower 64 bits).
const DST_IDENT: usize = field::DST_ADDR.start + 8;

/// A 64-bit locator: the upper half of an ILA address, routed by the network.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Locator(pub u64);

/// A 64-bit identifier: the lower half of both SIR and ILA addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Identifier(pub u64);

/// A 64-bit SIR prefix: the upper half of the addresses applications use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SirPrefix(pub u64);

/// Checksum handling mode (Linux `csum-mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CsumMode {
    /// `no-action`: only the address changes; the transport checksum is wrong on the wire
    /// until the ILA -> SIR translation puts the SIR prefix back.
    NoAction,
    /// `adj-transport`: the TCP, UDP or ICMPv6 checksum is updated for the new address.
    AdjustTransport,
    /// `neutral-map`: the low 16 bits of the identifier absorb the change and the C-bit
    /// says so (Linux `ila_csum_do_neutral_fmt`); needs [`IdentFormat::UseFormat`].
    NeutralMap,
    /// `neutral-map-auto`: the low 16 bits of the identifier absorb the change, with no
    /// C-bit; both ends must be configured with it (Linux `ila_csum_do_neutral_nofmt`).
    NeutralMapAuto,
}

/// Identifier format (Linux `ident-type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IdentFormat {
    /// `luid`: an unstructured 64-bit locally unique identifier (no type field, no C-bit).
    Luid,
    /// `use-format`: the top 3 bits are the [`IdentType`] and bit 60 is the C-bit.
    UseFormat,
}

/// The identifier type field of a formatted identifier (ila.rst "Identifier types").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IdentType {
    /// 0: interface identifier.
    Iid,
    /// 1: locally unique identifier.
    Luid,
    /// 2: virtual networking identifier for an IPv4 address.
    VirtV4,
    /// 3: virtual networking identifier for an IPv6 unicast address.
    VirtUniV6,
    /// 4: virtual networking identifier for an IPv6 multicast address.
    VirtMultiV6,
    /// 5: non-local address identifier.
    NonLocal,
    /// 6 or 7: reserved (the value is kept).
    Reserved(u8),
}

impl IdentType {
    /// Decodes a 3-bit type field (higher bits of `v` are ignored).
    #[inline]
    pub const fn from_bits(v: u8) -> Self {
        match v & 0x7 {
            0 => IdentType::Iid,
            1 => IdentType::Luid,
            2 => IdentType::VirtV4,
            3 => IdentType::VirtUniV6,
            4 => IdentType::VirtMultiV6,
            5 => IdentType::NonLocal,
            r => IdentType::Reserved(r),
        }
    }

    /// The 3-bit value of the type field.
    #[inline]
    pub const fn bits(self) -> u8 {
        match self {
            IdentType::Iid => 0,
            IdentType::Luid => 1,
            IdentType::VirtV4 => 2,
            IdentType::VirtUniV6 => 3,
            IdentType::VirtMultiV6 => 4,
            IdentType::NonLocal => 5,
            IdentType::Reserved(r) => r & 0x7,
        }
    }
}

impl Identifier {
    /// The C-bit (checksum-neutral flag): bit 60, right after the 3-bit type field
    /// (Linux `ila.h`: `type:3, csum_neutral:1` in the first byte, big-endian order).
    pub const C_BIT: u64 = 1 << 60;
    /// Bit position of the 3-bit type field (bits 63..61).
    pub const TYPE_SHIFT: u32 = 61;
    /// The bits below the type field and the C-bit.
    pub const VALUE_MASK: u64 = Self::C_BIT - 1;

    /// Builds a formatted identifier from a type, a C-bit and the low 60 bits of `value`.
    #[inline]
    pub const fn from_format(ty: IdentType, c_bit: bool, value: u64) -> Self {
        let c = if c_bit { Self::C_BIT } else { 0 };
        Identifier(((ty.bits() as u64) << Self::TYPE_SHIFT) | c | (value & Self::VALUE_MASK))
    }

    /// The type field (meaningful under [`IdentFormat::UseFormat`]).
    #[inline]
    pub const fn ident_type(self) -> IdentType {
        IdentType::from_bits((self.0 >> Self::TYPE_SHIFT) as u8)
    }

    /// Whether the C-bit is set (meaningful under [`IdentFormat::UseFormat`]).
    #[inline]
    pub const fn csum_neutral(self) -> bool {
        self.0 & Self::C_BIT != 0
    }

    /// The low 60 bits: the identifier proper once type and C-bit are taken off.
    #[inline]
    pub const fn value(self) -> u64 {
        self.0 & Self::VALUE_MASK
    }

    /// The low 16 bits, where checksum-neutral mapping writes its adjustment.
    #[inline]
    pub const fn adjustment(self) -> u16 {
        self.0 as u16
    }
}

/// One mapping: which SIR prefix becomes which locator, and how checksums are handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IlaMapping {
    /// The SIR prefix (upper 64 bits of the SIR destination).
    pub sir: SirPrefix,
    /// The locator (upper 64 bits of the ILA destination).
    pub locator: Locator,
    /// How the transport checksum is kept right.
    pub csum: CsumMode,
    /// Whether identifiers carry a type field and C-bit.
    pub format: IdentFormat,
}

impl IlaMapping {
    /// Checks the configuration once (the per-packet functions check it again):
    /// `NeutralMap` needs a C-bit, hence `UseFormat`.
    pub const fn check(&self) -> Result<(), IlaError> {
        match (self.csum, self.format) {
            (CsumMode::NeutralMap, IdentFormat::Luid) => Err(IlaError::CsumNeutralUnsupported),
            _ => Ok(()),
        }
    }
}

/// Why a packet was not translated (it is left untouched).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IlaError {
    /// Shorter than the IPv6 header, a payload length past the buffer, or a transport
    /// header cut short before its checksum field.
    Truncated,
    /// The version nibble is not 6.
    NotIpv6,
    /// The destination's upper 64 bits are not the expected SIR prefix (SIR -> ILA) or
    /// locator (ILA -> SIR).
    NotMatched,
    /// The extension-header chain is malformed or too long, or a Mobility, HIP or Shim6
    /// control header is followed by what its RFC does not define, so no checksum could be
    /// kept right (`AdjustTransport` only).
    Malformed,
    /// Checksum-neutral mapping cannot be applied: `NeutralMap` without `UseFormat`, a
    /// SIR identifier with the C-bit already set, or a SIR identifier whose low 16 bits
    /// are 0xFFFF (which could not be restored exactly; see the module doc).
    CsumNeutralUnsupported,
}

impl IlaError {
    /// A short, stable, lower-case name (also a metric label).
    #[inline]
    pub const fn as_str(&self) -> &'static str {
        match self {
            IlaError::Truncated => "ila_truncated",
            IlaError::NotIpv6 => "ila_not_ipv6",
            IlaError::NotMatched => "ila_not_matched",
            IlaError::Malformed => "ila_malformed",
            IlaError::CsumNeutralUnsupported => "ila_csum_neutral_unsupported",
        }
    }

    /// Maps a `wire` parse error.
    #[inline]
    fn from_wire(e: wire::Error) -> Self {
        match e {
            wire::Error::Truncated | wire::Error::BadLength => IlaError::Truncated,
            wire::Error::BadVersion => IlaError::NotIpv6,
            wire::Error::BadHeaderLen | wire::Error::ExtensionChain => IlaError::Malformed,
        }
    }
}

impl fmt::Display for IlaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IlaError::Truncated => {
                "ila: packet truncated (IPv6 header, payload or transport header)"
            }
            IlaError::NotIpv6 => "ila: not an IPv6 packet",
            IlaError::NotMatched => {
                "ila: destination's upper 64 bits are not the mapping's SIR prefix / locator"
            }
            IlaError::Malformed => "ila: malformed IPv6 extension-header chain",
            IlaError::CsumNeutralUnsupported => {
                "ila: checksum-neutral mapping not possible for this mapping or identifier"
            }
        })
    }
}

impl std::error::Error for IlaError {}

/// SIR -> ILA: rewrites the destination's upper 64 bits from `m.sir` to `m.locator`,
/// keeping checksums per `m.csum`. `pkt` starts at the IPv6 header.
#[inline]
pub fn sir_to_ila(pkt: &mut [u8], m: &IlaMapping) -> Result<(), IlaError> {
    translate(pkt, m, Way::SirToIla)
}

/// ILA -> SIR: rewrites the destination's upper 64 bits from `m.locator` back to `m.sir`
/// and restores the identifier exactly as sent. `pkt` starts at the IPv6 header.
#[inline]
pub fn ila_to_sir(pkt: &mut [u8], m: &IlaMapping) -> Result<(), IlaError> {
    translate(pkt, m, Way::IlaToSir)
}

/// Direction of a translation (Linux: the `sir2ila` flag).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    SirToIla,
    IlaToSir,
}

/// Linux `ila_update_ipv6_locator`: compute every change first, then write.
fn translate(pkt: &mut [u8], m: &IlaMapping, way: Way) -> Result<(), IlaError> {
    let (from, to) = match way {
        Way::SirToIla => (m.sir.0, m.locator.0),
        Way::IlaToSir => (m.locator.0, m.sir.0),
    };
    let ip = Ipv6Packet::new_checked(&*pkt).map_err(IlaError::from_wire)?;
    let dst = ip.dst_bytes();
    let (upper, lower) = dst.split_at(8);
    let mut upper8 = [0u8; 8];
    upper8.copy_from_slice(upper);
    let mut lower8 = [0u8; 8];
    lower8.copy_from_slice(lower);
    if u64::from_be_bytes(upper8) != from {
        return Err(IlaError::NotMatched);
    }
    let ident = Identifier(u64::from_be_bytes(lower8));

    let mut new_ident = ident;
    let mut transport = None;
    match m.csum {
        CsumMode::NoAction => {}
        CsumMode::AdjustTransport => transport = transport_fix(&ip, from, to)?,
        CsumMode::NeutralMap => {
            if m.format != IdentFormat::UseFormat {
                return Err(IlaError::CsumNeutralUnsupported);
            }
            match (way, ident.csum_neutral()) {
                // Linux WARNs here ("Checksum flag should never be set in a formatted SIR
                // address") and swaps the locator without any adjustment; we refuse.
                (Way::SirToIla, true) => return Err(IlaError::CsumNeutralUnsupported),
                // Linux: "ILA to SIR translation and C-bit isn't set so we're good."
                (Way::IlaToSir, false) => {}
                _ => new_ident = neutral(ident, from, to, true, way)?,
            }
        }
        CsumMode::NeutralMapAuto => new_ident = neutral(ident, from, to, false, way)?,
    }

    // Nothing can fail past this point: new_checked proved the 40-byte header is
    // there and transport_fix proved the checksum field is.
    if let Some(d) = pkt.get_mut(DST_UPPER..DST_IDENT) {
        d.copy_from_slice(&to.to_be_bytes());
    }
    if let Some(d) = pkt.get_mut(DST_IDENT..field::DST_ADDR.end) {
        d.copy_from_slice(&new_ident.0.to_be_bytes());
    }
    if let Some((off, csum)) = transport {
        put16(pkt, off, csum);
    }
    Ok(())
}

/// Ones'-complement partial sum of a 64-bit value's four 16-bit words.
#[inline]
fn sum64(v: u64) -> u16 {
    fold(sum(&v.to_be_bytes()))
}

/// Checksum-neutral mapping (Linux `ila_csum_do_neutral_fmt` with `c_bit`, else
/// `ila_csum_do_neutral_nofmt`): the identifier's low 16 bits absorb the change of the
/// upper 64 bits (and of the C-bit, which is flipped), so the address's ones'-complement
/// sum, hence every pseudo-header checksum, is unchanged.
fn neutral(
    ident: Identifier,
    from: u64,
    to: u64,
    c_bit: bool,
    way: Way,
) -> Result<Identifier, IlaError> {
    // The address sum changes by to - from; the adjustment must add from - to.
    // (Linux: compute_csum_diff8(p->locator, iaddr->loc) = ~to + from.)
    let mut comp = u32::from(sum64(from)) + u32::from(!sum64(to));
    let mut id = ident.0;
    if c_bit {
        // The C-bit is 0x1000 in the identifier's first word. Clearing it (ILA -> SIR)
        // lowers the sum by 0x1000, so add it back; setting it (SIR -> ILA) raises the
        // sum, so add its negation ~0x1000. (Linux: fval = CSUM_NEUTRAL_FLAG or
        // ~CSUM_NEUTRAL_FLAG = htonl(0x10000000) or its complement.)
        comp += if ident.csum_neutral() {
            0x1000
        } else {
            u32::from(!0x1000u16)
        };
        id ^= Identifier::C_BIT;
    }
    let comp = fold(comp);
    if comp == 0 || comp == 0xFFFF {
        // Nothing to absorb: leave the word as it is (exact for 0x0000 and 0xFFFF alike).
        return Ok(Identifier(id));
    }
    let adjust = ident.adjustment();
    if way == Way::SirToIla && adjust == 0xFFFF {
        // 0xFFFF and 0x0000 would both map to `comp`; only 0x0000 comes back.
        return Err(IlaError::CsumNeutralUnsupported);
    }
    let mut new = fold(u32::from(adjust) + u32::from(comp));
    if new == 0xFFFF {
        // Zero is written as 0x0000, so the reverse restores an identifier ending in :0.
        new = 0;
    }
    Ok(Identifier((id & !0xFFFF) | u64::from(new)))
}

/// IPv6 next-header numbers of the identity/mobility headers that
/// [`Ipv6Packet::upper_layer`] leaves to the caller, each with the usual extension-header
/// length byte ((Hdr Ext Len + 1) * 8 octets).
mod shim {
    /// Mobility Header (RFC 6275 §6.1).
    pub const MOBILITY: u8 = 135;
    /// Host Identity Protocol (RFC 7401 §5.1).
    pub const HIP: u8 = 139;
    /// Shim6 (RFC 5533 §5.1).
    pub const SHIM6: u8 = 140;
    /// IPv6 No Next Header.
    pub const NO_NEXT: u8 = 59;
}

/// `AdjustTransport` behind a Mobility, HIP or Shim6 header at `off` (`fragment`: the
/// packet is a first fragment, so the header may go on in the next fragment): the
/// checksum to adjust, `None` when none depends on the destination, or a refusal when
/// the header is cut short or what follows it is not defined (never a stale checksum).
fn identity_header(
    buf: &[u8],
    off: usize,
    end: usize,
    proto: u8,
    fragment: bool,
) -> Result<Option<usize>, IlaError> {
    // Next Header (or Payload Proto), Hdr Ext Len: the first two octets of all three.
    let head = buf.get(off..off + 2).filter(|_| off + 8 <= end);
    let (next, len) = head.map(|h| (h[0], h[1])).ok_or(IlaError::Truncated)?;
    let total = (usize::from(len) + 1) * 8;
    if !fragment && off + total > end {
        return Err(IlaError::Truncated);
    }
    match proto {
        // RFC 6275 §6.1: "the checksum of the Mobility Header ... calculated from the octet
        // string consisting of a 'pseudo-header' followed by the entire Mobility Header"
        // (RFC 8200 §8.1's, Next Header 135), at offset 4. "Payload Proto ... SHOULD set
        // ... to IPPROTO_NONE (59)": nothing else is defined after it.
        shim::MOBILITY => match next {
            shim::NO_NEXT => Ok(Some(off + 4)),
            _ => Err(IlaError::Malformed),
        },
        // RFC 7401 §5.1: fixed header of 40 octets (Header Length >= 4), checksum at
        // offset 4 over the RFC 8200 pseudo-header (§5.1.1: "it MUST be recomputed on
        // HIP-aware NAT devices"); "this document does not describe processing for Next
        // Header values other than decimal 59".
        shim::HIP => match (next, len) {
            (shim::NO_NEXT, 4..) => Ok(Some(off + 4)),
            _ => Err(IlaError::Malformed),
        },
        // RFC 5533 §5.1, the Payload Extension Header (P bit set): it carries a ULP packet
        // whose receiver replaces the addresses in the IPv6 header by the ULIDs before the
        // ULP sees it, so the ULP's checksum covers the ULIDs, not the locator ILA swaps:
        // nothing to adjust. §5.2, a control message (P clear): its checksum has no
        // pseudo-header ("there is no pseudo-header checksum part"); Next Header is 59.
        shim::SHIM6 => {
            let p_bit = buf.get(off + 2).is_some_and(|b| b & 0x80 != 0);
            match (p_bit, next) {
                (true, _) | (false, shim::NO_NEXT) => Ok(None),
                (false, _) => Err(IlaError::Malformed),
            }
        }
        _ => Ok(None),
    }
}

/// `AdjustTransport`: where the transport checksum is and what it becomes, or `None` when
/// there is nothing to adjust.
///
/// Linux looks only at the fixed header's next header; this walks the extension chain
/// (Hop-by-Hop, Routing, Fragment, Destination Options, AH) with
/// [`Ipv6Packet::upper_layer`], then the Mobility, HIP and Shim6 headers with
/// [`identity_header`] (Mobility and HIP carry a pseudo-header checksum of their own). It
/// skips non-first fragments (no transport header) and packets whose Routing header has
/// segments left (RFC 8200 §8.1: the pseudo-header then uses the final destination from
/// the Routing header, which ILA does not change).
fn transport_fix(
    ip: &Ipv6Packet<&[u8]>,
    from: u64,
    to: u64,
) -> Result<Option<(usize, u16)>, IlaError> {
    let up = ip.upper_layer().map_err(IlaError::from_wire)?;
    if up.fragment.is_some_and(|f| f.offset != 0) || up.routing_segments_left != 0 {
        return Ok(None);
    }
    let end = field::HEADER_LEN + usize::from(ip.payload_len());
    let buf: &[u8] = ip.as_ref();
    // (minimum header length, checksum offset, UDP zero rule)
    let (hdr_len, csum_at, udp) = match up.protocol {
        IpProtocol::Tcp => (20, 16, false),
        IpProtocol::Udp => (8, 6, true),
        IpProtocol::Icmpv6 => (4, 2, false),
        IpProtocol::Unknown(p @ (shim::MOBILITY | shim::HIP | shim::SHIM6)) => {
            match identity_header(buf, up.offset, end, p, up.fragment.is_some())? {
                Some(at) => (8, at - up.offset, false),
                None => return Ok(None),
            }
        }
        _ => return Ok(None),
    };
    if up.offset + hdr_len > end {
        return Err(IlaError::Truncated);
    }
    let off = up.offset + csum_at;
    let old = get16(buf, off).ok_or(IlaError::Truncated)?;
    if udp && old == 0 {
        // No checksum sent (RFC 6935/6936 tunnels); Linux leaves it too.
        return Ok(None);
    }
    let mut delta = Delta::ZERO;
    let (f, t) = (from.to_be_bytes(), to.to_be_bytes());
    for i in (0..8).step_by(2) {
        delta.word(
            u16::from_be_bytes([f[i], f[i + 1]]),
            u16::from_be_bytes([t[i], t[i + 1]]),
        );
    }
    let mut new = delta.apply(old);
    if udp && new == 0 {
        // RFC 768 / RFC 8200 §8.1: a computed zero is sent as 0xFFFF (Linux CSUM_MANGLED_0).
        new = 0xFFFF;
    }
    Ok(Some((off, new)))
}
