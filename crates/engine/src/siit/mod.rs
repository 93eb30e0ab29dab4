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
//!   (`no_address_mapping`), except the source of an ICMPv6 error, which may be given an
//!   address of the RFC 6791 pool configured for that purpose (an IPv6 router with no
//!   IPv4 address).
//! - An IPv6 packet for another IPv6 node's EAM address hairpins (RFC 7757 §4): it is
//!   translated to IPv4, then straight back to IPv6 and sent out of the IPv6 side again
//!   ([`EamHairpin`]).
//!
//! A packet refused is answered, where RFC 7915 §4.1-§4.4 / §5.1-§5.4 ask for it and
//! `icmp_errors` is on, with an ICMP error in its own family (rate limited, never about an
//! ICMP error): Time Exceeded, Fragmentation Needed / Packet Too Big, Source Route Failed,
//! Parameter Problem (a Routing header with Segments Left), and otherwise Communication
//! Administratively Prohibited (§4.4, §5.4), e.g. for an address with no mapping. An ICMPv4
//! error comes from the RFC 6791 pool when one is configured, else from the gateway's
//! inside IPv4 address (`[gateway] inside_addresses`).
//!
//! A CLAT (RFC 6877 §6.3) is this translator with one EAM entry (the host's or LAN's
//! private IPv4 prefix <-> the CLAT IPv6 prefix) and the provider's NAT64 prefix (PLAT)
//! as the Pref64: see [`SiitConfig::clat`]. TAYGA's `map` lines are EAM entries too.
//!
//! The header work is `xlat::siit`'s; this module only chooses addresses. Never panics,
//! never allocates on the packet path.

use std::cell::Cell;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use conntrack::Timestamp;
use xlat::icmp_reply::IcmpReason;
use xlat::siit::{ipv4_to_ipv6, ipv6_to_ipv4, SiitDrop, SiitOptions, SiitVerdict};

use crate::config::ConfigError;
use crate::ipid::Ipv4Idents;
use crate::mode::reply::Responder;
use crate::mode::{fragment, Egress, Family, Frame, Mode, ModeWorker, Side};
use crate::reload::{PolicyCell, ReloadReport};
use crate::{Counters, Direction, DropReason, Emit};
use offload::{FlowHint, FlowHints, FlowKey, Hinter};

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
    /// The configuration in force for this worker (a reload's generation once picked up).
    cfg: Arc<SiitConfig>,
    kind: SiitKind,
    counters: Counters,
    responder: Responder,
    /// Where reloads publish new configurations (shared by the instance and its workers),
    /// and the generation this copy runs.
    cell: Arc<PolicyCell<SiitConfig>>,
    generation: u64,
    // Flow offload (see the `offload` module).
    /// Where the runtime's fast path takes hints, once attached (shared by every copy).
    offload: Arc<std::sync::OnceLock<Arc<FlowHints>>>,
    /// This worker's side of it, taken up at a batch's start once attached.
    hinter: Option<Hinter>,
    /// The IPv4 Identification counters (shared by every copy; kept across reloads).
    idents: Arc<Ipv4Idents>,
}

impl Siit {
    /// A translator; the configuration is validated.
    pub fn new(cfg: SiitConfig, kind: SiitKind) -> Result<Self, ConfigError> {
        cfg.validate()?;
        // Longest IPv4 prefix first, so `find` is a longest match. (IPv6 sides do not
        // overlap, and their lengths follow the IPv4 ones.)
        let cfg = Self::prepared(cfg);
        Ok(Siit {
            responder: Responder::enabled(cfg.icmp_errors, cfg.icmp_rate),
            cfg: Arc::new(cfg),
            kind,
            counters: Counters::default(),
            cell: Arc::default(),
            generation: 0,
            offload: Arc::default(),
            hinter: None,
            idents: Arc::default(),
        })
    }

    // Flow offload.

    /// Attaches a flow offload (the runtime's fast path, once it is sure to run): from
    /// their next batch the workers hint the flows they translate to `hints`. False when
    /// one is attached already.
    pub fn attach_offload(&self, hints: Arc<FlowHints>) -> bool {
        self.offload.set(hints).is_ok()
    }

    /// The configuration generation in force and its configuration (the one this value
    /// was built with until a reload publishes another), read together.
    pub fn in_force(&self) -> (u64, Arc<SiitConfig>) {
        let (g, latest) = self.cell.current();
        (g, latest.unwrap_or_else(|| Arc::clone(&self.cfg)))
    }

    /// With an offload attached: hints the flow `from` of a packet just translated to
    /// `out` (the packet as it leaves), when the worker's filter wants it.
    #[inline]
    fn offer(&mut self, now: Timestamp, from: FlowKey, out: &[u8]) {
        let generation = self.generation;
        let Some(h) = self.hinter.as_mut() else {
            return;
        };
        if !h.wanted(&from, now) {
            return;
        }
        if let Some(to) = FlowKey::of(out) {
            h.hint(FlowHint {
                from,
                to,
                generation,
            });
        }
    }

    /// `cfg` with its EAM entries longest IPv4 prefix first, so `find` is a longest match.
    /// (IPv6 sides do not overlap, and their lengths follow the IPv4 ones.)
    fn prepared(mut cfg: SiitConfig) -> SiitConfig {
        cfg.eam.sort_by_key(|e| std::cmp::Reverse(e.ipv4.len()));
        cfg
    }

    // Live reload: the translator's whole configuration, one generation.

    /// Validates `new` and publishes it for every worker (each takes it at its next
    /// batch); reports what changed. `old` is the configuration in force. A worker
    /// translating meanwhile uses one generation or the next for a packet, never a mix.
    pub fn reload(&self, old: &SiitConfig, new: &SiitConfig) -> Result<ReloadReport, ConfigError> {
        self.reload_as(old, new, crate::reload::ReloadAction::Apply)
    }

    /// [`reload`](Self::reload), or with `ReloadAction::Preview` its checks and report
    /// only.
    pub fn reload_as(
        &self,
        old: &SiitConfig,
        new: &SiitConfig,
        action: crate::reload::ReloadAction,
    ) -> Result<ReloadReport, ConfigError> {
        new.validate()?;
        let mut report = ReloadReport::default();
        report.compare_shown("pref64", &old.pref64, &new.pref64);
        if old.eam != new.eam {
            report.push(format!(
                "eam: {} → {} entries",
                old.eam.len(),
                new.eam.len()
            ));
        }
        report.compare_shown(
            "icmp_error_source",
            &old.icmp_error_source,
            &new.icmp_error_source,
        );
        report.compare("options", &old.options, &new.options);
        report.compare("icmp_errors", &old.icmp_errors, &new.icmp_errors);
        report.compare("eam_hairpin", &old.eam_hairpin, &new.eam_hairpin);
        report.compare("icmp_rate", &old.icmp_rate, &new.icmp_rate);
        if old != new && action == crate::reload::ReloadAction::Apply {
            let _serial = self.cell.serialise();
            self.cell.publish(Arc::new(Self::prepared(new.clone())));
        }
        Ok(report)
    }

    /// Picks up the configuration a reload published, if any and the cell is free at once
    /// (one atomic load when nothing changed).
    #[inline]
    fn refresh_if_stale(&mut self) {
        if self.cell.generation() == self.generation {
            return;
        }
        if let Some((g, latest)) = self.cell.try_latest() {
            if let Some(next) = latest {
                if (next.icmp_errors, next.icmp_rate) != (self.cfg.icmp_errors, self.cfg.icmp_rate)
                {
                    self.responder = Responder::enabled(next.icmp_errors, next.icmp_rate);
                }
                self.cfg = next;
            }
            self.generation = g;
        }
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
        match self.xlat(buf, start, len, false) {
            Ok(done) => self.count_sent(done),
            Err(r) => {
                self.counters.drop(r.reason);
                Emit::Drop(r.reason)
            }
        }
    }

    /// One packet to the other family, by its version nibble (and, for an EAM hairpin,
    /// back again); `unbounded4`: an IPv6 packet with no IPv4 next-hop limit (it is cut
    /// for the real one afterwards).
    #[inline]
    fn xlat(
        &mut self,
        buf: &mut [u8],
        start: usize,
        len: usize,
        unbounded4: bool,
    ) -> Result<Done, Refusal> {
        let (r, icmp_error, hairpin) = match buf.get(start).map(|b| b >> 4) {
            Some(4) => {
                let (r, e) = v4_to_v6(&self.cfg, buf, start, len)?;
                (r, e, false)
            }
            Some(6) => v6_to_v4(&self.cfg, &self.idents, buf, start, len, unbounded4)?,
            Some(_) => return Err(DropReason::Malformed.into()),
            None => return Err(DropReason::Truncated.into()),
        };
        if icmp_error {
            self.counters.icmp_errors_translated += 1;
        }
        let (start, len) = if hairpin {
            // The packet is rewritten: a refusal now cannot quote it.
            hairpin_back(&self.cfg, buf, r.0, r.1).map_err(Refusal::unanswered)?
        } else {
            r
        };
        if is_fragment(buf.get(start..).unwrap_or(&[])) {
            self.counters.fragments_translated += 1;
        }
        Ok(Done {
            start,
            len,
            hairpin,
        })
    }

    /// Counts a translated packet and says where it goes.
    #[inline]
    fn count_sent(&mut self, d: Done) -> Emit {
        self.counters.forwarded += 1;
        let (start, len) = (d.start, d.len);
        if d.hairpin {
            self.counters.hairpinned += 1;
            Emit::Hairpin { start, len }
        } else {
            Emit::Forward { start, len }
        }
    }

    /// The links as the responder sees them. The ICMPv4 errors the translator originates
    /// are a router's (RFC 7915 §1.4, RFC 1812 §4.3.2.4): they come from the address of
    /// the link they leave by. Only a link without an IPv4 address borrows one of the RFC
    /// 6791 pool's, picked by the refused packet's addresses (the pool is for translated
    /// errors of IPv6 routers without an IPv4 form).
    fn error_egress(&self, frame: &Frame<'_>, egress: &Egress) -> Egress {
        let mut e = *egress;
        let pkt = frame.packet();
        if e.links[Side::Inside as usize].addr4.is_some() {
            return e;
        }
        if let (Some(pool), Some(Family::V4), Some(h)) = (
            &self.cfg.icmp_error_source,
            Family::of(pkt),
            pkt.get(12..20),
        ) {
            let key = u64::from_be_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]);
            e.links[Side::Inside as usize].addr4 = Some(pool.pick(key));
        }
        e
    }
}

/// Whether the packet is link traffic or addressed to the gateway itself (neighbour
/// discovery, link-local addresses, the gateway's own address on the link it arrived by):
/// the live runtime hands such packets to the host's stack before the translator sees
/// them, so a refusal of one (in a capture replay) is counted but never answered.
fn for_the_host(pkt: &[u8], dir: Direction, egress: &Egress) -> bool {
    let link = egress.link(dir.arrives_on());
    match Family::of(pkt) {
        Some(Family::V4) if pkt.len() >= 20 => {
            let src = Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15]);
            let dst = Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]);
            link.addr4 == Some(dst) || src.is_link_local() || dst.is_link_local()
        }
        Some(Family::V6) if pkt.len() >= 40 => {
            let (src, dst) = (ipv6_at(pkt, 8), ipv6_at(pkt, 24));
            let link_local = |a: Ipv6Addr| a.segments()[0] & 0xffc0 == 0xfe80;
            link.addr6 == Some(dst) || link_local(src) || link_local(dst)
        }
        _ => false,
    }
}

/// A packet translated: where it now lies and whether it goes back out of the side it
/// came in on (an EAM hairpin).
#[derive(Clone, Copy, Debug)]
struct Done {
    start: usize,
    len: usize,
    hairpin: bool,
}

impl ModeWorker for Siit {
    fn begin_batch(&mut self) {
        self.refresh_if_stale();
        if self.hinter.is_none() {
            if let Some(h) = self.offload.get() {
                self.hinter = Some(Hinter::new(Arc::clone(h)));
            }
        }
    }

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
        // A flow the fast path may take: read before the header is rewritten.
        let from = match self.hinter {
            Some(_) => FlowKey::of(frame.packet()),
            None => None,
        };
        match self.xlat(frame.buf, frame.start, frame.len, false) {
            Ok(done) => {
                if let (Some(from), false) = (from, done.hairpin) {
                    let out = frame.buf.get(done.start..done.start + done.len);
                    self.offer(now, from, out.unwrap_or(&[]));
                }
                self.count_sent(done)
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
            Err(r) => {
                let r = if r.icmp.is_some() && for_the_host(frame.packet(), dir, egress) {
                    r.unanswered()
                } else {
                    r
                };
                let egress = match r.icmp {
                    Some(_) => self.error_egress(frame, egress),
                    None => *egress,
                };
                self.responder.refuse(
                    now,
                    dir,
                    frame,
                    &egress,
                    &mut self.counters,
                    r.reason,
                    r.icmp,
                )
            }
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
        match self.xlat(frame.buf, frame.start, frame.len, true) {
            // Back to the IPv6 side (RFC 7757 §4): the IPv4 next hop is not used.
            Ok(done) if done.hairpin => self.count_sent(done),
            Ok(Done { start, len, .. }) => match fragment::cut_for_ipv4(frame, start, len, mtu) {
                Ok((e, pieces)) => {
                    self.counters.fragmented += 1;
                    self.counters.forwarded += pieces;
                    e
                }
                Err(r) => {
                    self.counters.drop(r);
                    Emit::Drop(r)
                }
            },
            // Refused before any rewrite (an IPv4 packet over 65535 bytes: answered with
            // Packet Too Big 1280), or for its own reason.
            Err(r) => {
                let icmp = if r.reason == reason { too_big } else { r.icmp };
                let c = &mut self.counters;
                self.responder
                    .refuse(now, dir, frame, egress, c, r.reason, icmp)
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
            // Each worker its own filter, taken up at its first batch.
            hinter: None,
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
        // RFC 7915 §4.1: an unexpired LSRR/SSRR: "the packet MUST instead be discarded, and
        // an ICMPv4 "Destination Unreachable, Source Route Failed" (Type 3, Code 5) error
        // message SHOULD be returned to the sender."
        SiitDrop::SourceRouted { pointer: None } => Some(IcmpReason::SourceRouteFailed),
        // RFC 7915 §5.1: a Routing header with Segments Left != 0: "an ICMPv6 "parameter
        // problem/erroneous header field encountered" (Type 4, Code 0) error message, with
        // the Pointer field indicating the first byte of the Segments Left field, SHOULD be
        // returned to the sender."
        SiitDrop::SourceRouted {
            pointer: Some(pointer),
        } => Some(IcmpReason::ParameterProblem { pointer }),
        // RFC 7915 §4.4 / §5.4: any other packet discarded is answered with Communication
        // Administratively Prohibited: here a protocol the translator will not carry
        // (ICMPv6 in IPv4, an extension header after the Fragment header, §5.1.1: "SHOULD
        // be dropped and logged") and a UDP datagram without checksum it may not give one
        // (§4.5), nor an IPv6 one sent without (illegal, RFC 8200 §8.1). ICMP messages the
        // §4.2/§5.2 tables "silently drop", damaged packets and the translator's own limits
        // are not answered. Nor is an ICMP error however it is refused (about an error,
        // its quote unreadable): §4.4 "unless the discarded packet is itself an ICMPv4
        // error message", §5.4 likewise, RFC 1812 §4.3.2.7 for any router.
        SiitDrop::UnsupportedProtocol
        | SiitDrop::UdpZeroChecksum
        | SiitDrop::Ipv6UdpZeroChecksum => Some(IcmpReason::AdminProhibited),
        SiitDrop::Truncated
        | SiitDrop::Malformed
        | SiitDrop::IcmpDropped
        | SiitDrop::NeedsFragmentation
        | SiitDrop::FragmentedIcmp
        | SiitDrop::IcmpErrorAboutError
        | SiitDrop::IcmpErrorMalformed
        | SiitDrop::NoHeadroom => None,
    };
    Refusal {
        reason: d.into(),
        icmp,
    }
}

/// An address with no mapping. RFC 7915 §4.4 / §5.4: a discarded packet is answered with
/// Destination Unreachable, Communication Administratively Prohibited ("unless otherwise
/// specified"; §4.1 and §5.1 specify nothing else for an untranslatable address). RFC 6052
/// §3.1's refusal of a non-global IPv4 address under the Well-Known Prefix is such a
/// policy too. (Sources RFC 1812 §4.3.2.7 / RFC 4443 §2.4 (e) forbid answering, e.g.
/// `::1` or multicast, which RFC 7915 §5.1 wants "silently" dropped, are never answered.)
fn unmapped() -> Refusal {
    Refusal {
        reason: DropReason::NoAddressMapping,
        icmp: Some(IcmpReason::AdminProhibited),
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
    let src6 = cfg.map4(src).ok_or_else(unmapped)?;
    let dst6 = cfg.map4(dst).ok_or_else(unmapped)?;
    let inner = |a: Ipv4Addr, b: Ipv4Addr| Some((cfg.map4(a)?, cfg.map4(b)?));
    match ipv4_to_ipv6(buf, start, len, src6, dst6, &inner, &cfg.options) {
        SiitVerdict::Forward { start, len } => Ok(((start, len), is_icmp_error)),
        SiitVerdict::Drop(d) => Err(d.into()),
    }
}

/// IPv6 -> IPv4 with `cfg`'s addresses (see [`v4_to_v6`]), and whether the packet is an
/// EAM hairpin by `cfg.eam_hairpin` (to be translated back with [`hairpin_back`]).
#[allow(clippy::type_complexity)]
fn v6_to_v4(
    cfg: &SiitConfig,
    ids: &Ipv4Idents,
    buf: &mut [u8],
    start: usize,
    len: usize,
    unbounded4: bool,
) -> Result<((usize, usize), bool, bool), Refusal> {
    let hdr = buf.get(start..start + 40).ok_or(DropReason::Truncated)?;
    let src = ipv6_at(hdr, 8);
    let dst = ipv6_at(hdr, 24);
    let is_icmp_error = icmp6_type(buf, start).is_some_and(|t| t < 128);
    let src4 = match cfg.map6(src) {
        Some(a) => a,
        // RFC 6791: an ICMPv6 error from a router without an IPv4 address gets one of the
        // pool's, the same for every error of that router.
        None if is_icmp_error => match &cfg.icmp_error_source {
            Some(pool) => {
                let k = u128::from(src);
                pool.pick((k as u64) ^ ((k >> 64) as u64))
            }
            None => return Err(DropReason::NoAddressMapping.into()),
        },
        None => return Err(unmapped()),
    };
    let (dst4, dst_by_eam) = cfg.map6_how(dst).ok_or_else(unmapped)?;
    // RFC 7757 §4 (intrinsic): an ICMPv6 error hairpins when the packet it quotes came
    // from the Pref64 address of an EAM entry's IPv4 address.
    let quoted_hairpin = Cell::new(false);
    let inner = |a: Ipv6Addr, b: Ipv6Addr| {
        let (a4, a_by_eam) = cfg.map6_how(a)?;
        if !a_by_eam && cfg.eam_covers4(a4) {
            quoted_hairpin.set(true);
        }
        Some((a4, cfg.map6(b)?))
    };
    let to_eam_node = match cfg.eam_hairpin {
        EamHairpin::Off => false,
        // Every packet whose IPv4 destination belongs to an IPv6 node of the EAM table.
        EamHairpin::Simple => cfg.eam_covers4(dst4),
        // Only a destination that came out of the Pref64 into an EAM entry's IPv4 prefix
        // (not an ICMPv6 error: see below).
        EamHairpin::Intrinsic => !is_icmp_error && !dst_by_eam && cfg.eam_covers4(dst4),
    };
    // A hairpin goes back out of the IPv6 link it came in on, which it fitted: the IPv4
    // next hop's MTU (and so DF) has no say; nor for a packet cut for it afterwards.
    let unbounded;
    let opts = if unbounded4 || to_eam_node {
        unbounded = SiitOptions {
            ipv4_mtu: u32::from(u16::MAX),
            ..cfg.options
        };
        &unbounded
    } else {
        &cfg.options
    };
    let r = match ipv6_to_ipv4(buf, start, len, src4, dst4, &inner, ids, opts) {
        SiitVerdict::Forward { start, len } => (start, len),
        SiitVerdict::Drop(d) => return Err(d.into()),
    };
    // Intrinsic: an ICMPv6 error hairpins when it is about a packet from such an address.
    let hairpin = to_eam_node
        || (cfg.eam_hairpin == EamHairpin::Intrinsic && is_icmp_error && quoted_hairpin.get());
    Ok((r, is_icmp_error, hairpin))
}

/// The second half of an EAM hairpin (RFC 7757 §4): the IPv4 packet `v6_to_v4` made,
/// back to IPv6 for the IPv6 side. The IPv4 source (the sender's EAM address) is written in
/// the Pref64, not mapped back by the EAM, so the receiver answers through the translator
/// the way it was reached; likewise the destination quoted in an ICMP error. An ICMP error
/// keeps its EAM source unless it is the quoted destination (the node reporting about a
/// packet it was sent). The TTL was decremented once already, and the packet leaves by the
/// link it came in on, which it fitted.
fn hairpin_back(
    cfg: &SiitConfig,
    buf: &mut [u8],
    start: usize,
    len: usize,
) -> Result<(usize, usize), Refusal> {
    let hdr = buf.get(start..start + 20).ok_or(DropReason::Truncated)?;
    let src = Ipv4Addr::new(hdr[12], hdr[13], hdr[14], hdr[15]);
    let dst = Ipv4Addr::new(hdr[16], hdr[17], hdr[18], hdr[19]);
    let src_by_pref64 = if hdr[9] == 1 && icmp4_is_error(buf, start) {
        // The quoted packet's destination, after the ICMP header (8 bytes).
        let q = start + usize::from(hdr[0] & 0x0f) * 4 + 8;
        buf.get(q + 16..q + 20) == Some(&src.octets()[..])
    } else {
        true
    };
    let src6 = if src_by_pref64 {
        cfg.map4_pref64(src)
    } else {
        cfg.map4(src)
    };
    let src6 = src6.ok_or(DropReason::NoAddressMapping)?;
    let dst6 = cfg.map4(dst).ok_or(DropReason::NoAddressMapping)?;
    let inner = |a: Ipv4Addr, b: Ipv4Addr| Some((cfg.map4(a)?, cfg.map4_pref64(b)?));
    let opts = SiitOptions {
        decrement_ttl: false,
        ipv6_mtu: u32::MAX,
        ..cfg.options
    };
    match ipv4_to_ipv6(buf, start, len, src6, dst6, &inner, &opts) {
        SiitVerdict::Forward { start, len } => Ok((start, len)),
        SiitVerdict::Drop(d) => Err(d.into()),
    }
}

/// Whether the translated packet `p` is a fragment: IPv4 with MF or an offset, IPv6 with
/// a Fragment header (a translated fragment carries it first, RFC 7915 §4.1).
#[inline]
fn is_fragment(p: &[u8]) -> bool {
    match p.first().map(|b| b >> 4) {
        Some(4) => p.get(6..8).is_some_and(|f| (f[0] & 0x3f) | f[1] != 0),
        Some(6) => p.get(6) == Some(&44),
        _ => false,
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

/// The ICMPv6 type of the IPv6 packet at `start` when ICMPv6 follows its fixed header
/// (errors are below 128, informational messages 128 and up, RFC 4443 §2.1).
#[inline]
pub(crate) fn icmp6_type(buf: &[u8], start: usize) -> Option<u8> {
    (buf.get(start + 6) == Some(&58))
        .then(|| buf.get(start + 40).copied())
        .flatten()
}

pub mod config;
pub mod offload;
#[cfg(test)]
mod tests;

pub use config::{Eam, EamError, EamHairpin, Rfc6791Pool, SiitConfig};
#[cfg(test)]
mod tests_errors;
#[cfg(test)]
mod tests_offload;
