//! Stateless IP/ICMP translation as a gateway mode (SIIT, RFC 7915), and the CLAT of
//! 464XLAT (RFC 6877) built on it.
//!
//! Every IPv4 packet becomes an IPv6 packet and every IPv6 packet an IPv4 packet; no state
//! is kept. Addresses are mapped by an Explicit Address Mapping table (RFC 7757, longest
//! match first) and otherwise by embedding in / extracting from a Pref64 (RFC 6052):
//!
//! - IPv4 -> IPv6: an address covered by an EAM entry gets that entry's IPv6 prefix and
//!   its own suffix; any other address is embedded in the Pref64 (refused under the
//!   Well-Known Prefix when it is not global, RFC 6052 §3.1).
//! - IPv6 -> IPv4: the reverse; an address under neither is dropped
//!   (`no_address_mapping`), except the source of an ICMPv6 error, which may be given the
//!   RFC 6791 address configured for that purpose (an IPv6 router with no IPv4 address).
//!
//! A CLAT (RFC 6877 §6.3) is this translator with one EAM entry (the host's or LAN's
//! private IPv4 prefix <-> the CLAT IPv6 prefix) and the provider's NAT64 prefix (PLAT)
//! as the Pref64: see [`SiitConfig::clat`]. TAYGA's `map` lines are EAM entries too.
//!
//! The header work is `xlat::siit`'s; this module only chooses addresses. Never panics,
//! never allocates on the packet path.

use std::net::{Ipv4Addr, Ipv6Addr};

use conntrack::Timestamp;
use xlat::icmp_reply::IcmpReason;
use xlat::siit::{ipv4_to_ipv6, ipv6_to_ipv4, SiitDrop, SiitVerdict};

use crate::config::ConfigError;
use crate::mode::reply::Responder;
use crate::mode::{fragment, Egress, Family, Frame, Mode, ModeWorker};
use crate::{Counters, Direction, DropReason, Emit};

/// Which stateless mode a [`Siit`] is (the same translator, named as configured).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SiitKind {
    /// `[siit]`: a stateless translator (RFC 7915).
    Siit,
    /// `[clat]`: the customer side of 464XLAT (RFC 6877).
    Clat,
}

/// A stateless translator: the shared configuration ([`Mode`]) and one thread's worker
/// ([`ModeWorker`]; each worker is a copy with its own counters).
#[derive(Clone, Debug)]
pub struct Siit {
    cfg: SiitConfig,
    /// `cfg` with no IPv4 next-hop limit: translates an IPv6 packet that is then cut into
    /// IPv4 fragments for the real one.
    unbounded4: SiitConfig,
    kind: SiitKind,
    counters: Counters,
    responder: Responder,
}

impl Siit {
    /// A translator; the configuration is validated.
    pub fn new(cfg: SiitConfig, kind: SiitKind) -> Result<Self, ConfigError> {
        cfg.validate()?;
        // Longest IPv4 prefix first, so `find` is a longest match. (IPv6 sides do not
        // overlap, and their lengths follow the IPv4 ones.)
        let mut cfg = cfg;
        cfg.eam.sort_by_key(|e| std::cmp::Reverse(e.ipv4.len()));
        let mut unbounded4 = cfg.clone();
        unbounded4.options.ipv4_mtu = u32::from(u16::MAX);
        Ok(Siit {
            cfg,
            unbounded4,
            kind,
            counters: Counters::default(),
            responder: Responder::default(),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &SiitConfig {
        &self.cfg
    }

    /// Counters (`forwarded`, drops by reason, `icmp_errors_translated`).
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Translates the IP packet `buf[start..start + len]` to the other family, with no
    /// ICMP errors and no fragmentation (a packet that would get either is dropped): the
    /// translation alone. An IPv4 packet needs [`crate::HEADROOM`] bytes in front of `start`.
    pub fn translate(&mut self, buf: &mut [u8], start: usize, len: usize) -> Emit {
        match self.xlat(buf, start, len) {
            Ok((start, len)) => {
                self.counters.forwarded += 1;
                Emit::Forward { start, len }
            }
            Err(r) => {
                self.counters.drop(r.reason);
                Emit::Drop(r.reason)
            }
        }
    }

    /// One packet to the other family, by its version nibble.
    #[inline]
    fn xlat(
        &mut self,
        buf: &mut [u8],
        start: usize,
        len: usize,
    ) -> Result<(usize, usize), Refusal> {
        let (r, icmp_error) = match buf.get(start).map(|b| b >> 4) {
            Some(4) => v4_to_v6(&self.cfg, buf, start, len)?,
            Some(6) => v6_to_v4(&self.cfg, buf, start, len)?,
            Some(_) => return Err(DropReason::Malformed.into()),
            None => return Err(DropReason::Truncated.into()),
        };
        if icmp_error {
            self.counters.icmp_errors_translated += 1;
        }
        Ok(r)
    }
}

impl ModeWorker for Siit {
    /// Translates the packet in `frame` to the other family. A packet whose TTL / Hop
    /// Limit runs out, or that is too big for the other side with DF set or over IPv6, is
    /// answered with an ICMP error (RFC 7915 §4, §5); an IPv4 packet without DF too big
    /// for the IPv6 side is cut into fragments, each translated (RFC 7915 §4.1).
    fn process(
        &mut self,
        now: Timestamp,
        dir: Direction,
        frame: &mut Frame<'_>,
        egress: &Egress,
    ) -> Emit {
        match self.xlat(frame.buf, frame.start, frame.len) {
            Ok((start, len)) => {
                self.counters.forwarded += 1;
                Emit::Forward { start, len }
            }
            Err(r)
                if r.reason == DropReason::NeedsFragmentation
                    && Family::of(frame.packet()) == Some(Family::V6) =>
            {
                self.fragment_for_ipv4(now, dir, frame, egress)
            }
            Err(r) if r.reason == DropReason::NeedsFragmentation => {
                let cfg = &self.cfg;
                let mut pieces = 0;
                let mtu = cfg.options.ipv6_fragment_mtu();
                let cut = fragment::cut_for_ipv6(frame, mtu, |b, s, l| {
                    pieces += 1;
                    let (r, _) = v4_to_v6(cfg, b, s, l).map_err(|r| r.reason)?;
                    Ok(r)
                });
                count_cut(&mut self.counters, cut, pieces)
            }
            Err(r) => self.responder.refuse(
                now,
                dir,
                frame,
                egress,
                &mut self.counters,
                r.reason,
                r.icmp,
            ),
        }
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }
}

impl Siit {
    /// An IPv6 packet whose IPv4 translation has DF clear and is too big for the IPv4
    /// next hop: translated whole, then cut into IPv4 fragments (RFC 7915 §5.1.1, DF
    /// cleared "allowing this packet to be further fragmented"). One that cannot be cut
    /// into the output is answered with Packet Too Big 1280 (a sender at that MTU sends
    /// pieces that can), never dropped silently.
    #[inline(never)]
    fn fragment_for_ipv4(
        &mut self,
        now: Timestamp,
        dir: Direction,
        frame: &mut Frame<'_>,
        egress: &Egress,
    ) -> Emit {
        let mtu = self.cfg.options.ipv4_mtu;
        let too_big = Some(IcmpReason::TooBig { mtu: 1280 });
        let reason = DropReason::NeedsFragmentation;
        if !fragment::ipv4_cut_fits(frame.packet(), mtu) {
            let c = &mut self.counters;
            return self
                .responder
                .refuse(now, dir, frame, egress, c, reason, too_big);
        }
        match v6_to_v4(&self.unbounded4, frame.buf, frame.start, frame.len) {
            Ok(((start, len), icmp_error)) => {
                if icmp_error {
                    self.counters.icmp_errors_translated += 1;
                }
                match fragment::cut_for_ipv4(frame, start, len, mtu) {
                    Ok((e, pieces)) => {
                        self.counters.fragmented += 1;
                        self.counters.forwarded += pieces;
                        e
                    }
                    Err(r) => {
                        self.counters.drop(r);
                        Emit::Drop(r)
                    }
                }
            }
            // Refused before any rewrite (an IPv4 packet over 65535 bytes): answered.
            Err(r) if r.reason == reason => {
                let c = &mut self.counters;
                self.responder
                    .refuse(now, dir, frame, egress, c, reason, too_big)
            }
            Err(r) => {
                let c = &mut self.counters;
                self.responder
                    .refuse(now, dir, frame, egress, c, r.reason, r.icmp)
            }
        }
    }
}

impl Mode for Siit {
    type Worker = Siit;

    fn name(&self) -> &'static str {
        match self.kind {
            SiitKind::Siit => "siit",
            SiitKind::Clat => "clat",
        }
    }

    fn families(&self) -> [Family; 2] {
        [Family::V4, Family::V6]
    }

    fn in_place(&self) -> bool {
        false
    }

    fn worker(&self, _id: usize) -> Siit {
        Siit {
            counters: Counters::default(),
            ..self.clone()
        }
    }

    fn reaper(&self) -> Option<Box<dyn crate::mode::Reaper>> {
        None
    }

    /// The IPv4 side is the inside: an IPv4 packet travels outbound.
    fn classify(&self, pkt: &[u8]) -> Direction {
        match Family::of(pkt) {
            Some(Family::V4) => Direction::Outbound,
            _ => Direction::Inbound,
        }
    }

    fn session_count(&self) -> usize {
        0
    }
}

/// The outcome of cutting a packet into translated fragments, counted: the packet as
/// `fragmented` and each of its `pieces` as forwarded, or the drop.
fn count_cut(counters: &mut Counters, cut: Result<Emit, DropReason>, pieces: u64) -> Emit {
    match cut {
        Ok(e) => {
            counters.fragmented += 1;
            counters.forwarded += pieces;
            counters.fragments_translated += pieces;
            e
        }
        Err(r) => {
            counters.drop(r);
            Emit::Drop(r)
        }
    }
}

/// Why a translation refused a packet, and the ICMP error its sender is owed, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The counted reason.
    pub reason: DropReason,
    /// The error owed.
    pub icmp: Option<IcmpReason>,
}

impl Refusal {
    /// The same reason with no ICMP error: the packet can no longer be quoted as it
    /// arrived (a rewrite happened before the refusal).
    pub fn unanswered(self) -> Self {
        Refusal { icmp: None, ..self }
    }
}

impl From<DropReason> for Refusal {
    fn from(reason: DropReason) -> Self {
        Refusal { reason, icmp: None }
    }
}

impl From<SiitDrop> for Refusal {
    fn from(d: SiitDrop) -> Self {
        refusal(d)
    }
}

/// Why SIIT refused a packet, and the ICMP error RFC 7915 owes its sender for it.
fn refusal(d: SiitDrop) -> Refusal {
    let icmp = match d {
        // RFC 7915 §4.1/§5.1: the TTL / Hop Limit runs out at the translator.
        SiitDrop::TtlExpired => Some(IcmpReason::TimeExceeded),
        // RFC 7915 §4.1: DF set and too big: Fragmentation Needed with the MTU as the IPv4
        // sender counts it.
        SiitDrop::FragmentNeeded { mtu } => Some(IcmpReason::TooBig {
            mtu: u32::from(mtu),
        }),
        // RFC 7915 §5.1: too big for IPv4: Packet Too Big with the MTU as the IPv6 sender
        // counts it.
        SiitDrop::PacketTooBig { mtu } => Some(IcmpReason::TooBig { mtu }),
        _ => None,
    };
    Refusal {
        reason: d.into(),
        icmp,
    }
}

/// IPv4 -> IPv6 with `cfg`'s addresses: where the packet now lies, and whether it is a
/// translated ICMP error.
fn v4_to_v6(
    cfg: &SiitConfig,
    buf: &mut [u8],
    start: usize,
    len: usize,
) -> Result<((usize, usize), bool), Refusal> {
    let hdr = buf.get(start..start + 20).ok_or(DropReason::Truncated)?;
    let src = Ipv4Addr::new(hdr[12], hdr[13], hdr[14], hdr[15]);
    let dst = Ipv4Addr::new(hdr[16], hdr[17], hdr[18], hdr[19]);
    let is_icmp_error = hdr[9] == 1 && icmp4_is_error(buf, start);
    let src6 = cfg.map4(src).ok_or(DropReason::NoAddressMapping)?;
    let dst6 = cfg.map4(dst).ok_or(DropReason::NoAddressMapping)?;
    let inner = |a: Ipv4Addr, b: Ipv4Addr| Some((cfg.map4(a)?, cfg.map4(b)?));
    match ipv4_to_ipv6(buf, start, len, src6, dst6, &inner, &cfg.options) {
        SiitVerdict::Forward { start, len } => Ok(((start, len), is_icmp_error)),
        SiitVerdict::Drop(d) => Err(d.into()),
    }
}

/// IPv6 -> IPv4 with `cfg`'s addresses (see [`v4_to_v6`]).
fn v6_to_v4(
    cfg: &SiitConfig,
    buf: &mut [u8],
    start: usize,
    len: usize,
) -> Result<((usize, usize), bool), Refusal> {
    let hdr = buf.get(start..start + 40).ok_or(DropReason::Truncated)?;
    let src = ipv6_at(hdr, 8);
    let dst = ipv6_at(hdr, 24);
    let is_icmp_error = hdr[6] == 58 && buf.get(start + 40).is_some_and(|t| *t < 128);
    let src4 = match cfg.map6(src) {
        Some(a) => a,
        // RFC 6791: an ICMPv6 error from a router without an IPv4 address.
        None if is_icmp_error => cfg.icmp_error_source.ok_or(DropReason::NoAddressMapping)?,
        None => return Err(DropReason::NoAddressMapping.into()),
    };
    let dst4 = cfg.map6(dst).ok_or(DropReason::NoAddressMapping)?;
    let inner = |a: Ipv6Addr, b: Ipv6Addr| Some((cfg.map6(a)?, cfg.map6(b)?));
    match ipv6_to_ipv4(buf, start, len, src4, dst4, &inner, &cfg.options) {
        SiitVerdict::Forward { start, len } => Ok(((start, len), is_icmp_error)),
        SiitVerdict::Drop(d) => Err(d.into()),
    }
}

/// The IPv6 address at `off` in `b` (16 bytes must be there).
#[inline]
pub(crate) fn ipv6_at(b: &[u8], off: usize) -> Ipv6Addr {
    let mut a = [0u8; 16];
    if let Some(s) = b.get(off..off + 16) {
        a.copy_from_slice(s);
    }
    Ipv6Addr::from(a)
}

/// Whether the IPv4 packet at `start` carries an ICMPv4 error (types 3, 11, 12).
#[inline]
pub(crate) fn icmp4_is_error(buf: &[u8], start: usize) -> bool {
    let ihl = buf.get(start).map_or(0, |b| usize::from(b & 0x0f) * 4);
    matches!(buf.get(start + ihl), Some(3 | 11 | 12))
}

pub mod config;
#[cfg(test)]
mod tests;

pub use config::{Eam, EamError, SiitConfig};
