//! The ILA stage of a worker: look the destination identifier up in the shared
//! [`IlaTable`] and swap SIR prefix <-> locator with [`xlat::ila`]
//! (draft-herbert-intarea-ila; Linux `Documentation/networking/ila.rst`).
//!
//! On an ILA interface this stage runs FIRST in a worker's pipeline, before any
//! demultiplexing (socket/session lookup, NAT): the Linux ILA work measured that
//! translating before demultiplexing cost 3.4% of transactions per second, while doing
//! it after cost 14.5%. It is stateless per packet: one lock-free lookup, one rewrite.
//!
//! Packets from the hosts (inside, [`Direction::Outbound`]) go SIR -> ILA; packets from the
//! ILA network (outside, [`Direction::Inbound`]) go ILA -> SIR.
//!
//! ILA -> SIR requires the packet's destination locator to equal the
//! mapping's locator (else `not_matched`), the check `xlat::ila::ila_to_sir` makes. With a
//! checksum-neutral mode the ILA identifier on the wire differs from the SIR identifier
//! the table is keyed by (C-bit and low 16 bits); the SIR identifier is then recovered by
//! running the reverse translation on a 40-byte copy of the header before the lookup.
//!
//! Drops are counted per [`IlaDrop`] reason in [`IlaCounters`]; the [`Emit`] carries the
//! closest engine [`DropReason`] (see [`IlaDrop::drop_reason`]), counted in the engine's
//! [`Counters`] too. Must never panic, allocate or block on the packet path, and leaves a
//! dropped packet untouched.

use std::net::Ipv6Addr;
use std::sync::Arc;

use conntrack::ila_table::IlaTable;
use conntrack::{Qsbr, QsbrHandle, Timestamp};
use wire::ipv6::field;
use xlat::ila::{ila_to_sir, sir_to_ila, IlaError, IlaMapping, Locator, SirPrefix};

use crate::config::IcmpRate;
use crate::mode::reply::{fits, owed, Responder};
use crate::mode::{Egress, Emit, Family, Frame, Mode, ModeWorker};
use crate::{Counters, Direction, DropReason, Offload};

pub mod config;
#[cfg(test)]
mod tests;

mod partial;

/// The big-endian 16-bit word at `at`.
fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

pub use config::{Addr64, Addr64Error, IlaSettings, IlaSettingsError};
/// The checksum mode and identifier format of [`IlaConfig`], from `xlat::ila`.
pub use xlat::ila::{CsumMode, IdentFormat};

/// What to do with a packet whose identifier has no mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnmappedAction {
    /// Pass it on untouched.
    Forward,
    /// Drop it (counted as `unmapped`).
    Drop,
}

/// Configuration of one ILA router (shared by all mappings of its table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IlaConfig {
    /// The SIR prefix: upper 64 bits of the addresses applications use.
    pub sir_prefix: u64,
    /// Checksum handling (Linux `csum-mode`).
    pub csum: CsumMode,
    /// Identifier format (Linux `ident-type`).
    pub format: IdentFormat,
    /// What to do with identifiers that have no mapping.
    pub unmapped: UnmappedAction,
}

macro_rules! ila_drops {
    ($( $(#[$doc:meta])* $name:ident => $label:literal, $field:ident, )*) => {
        /// Why the ILA stage dropped a packet. `as_str()` is also the metric label.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum IlaDrop {
            $( $(#[$doc])* $name, )*
        }

        impl IlaDrop {
            /// Every reason, in declaration order.
            pub const ALL: &'static [IlaDrop] = &[$(IlaDrop::$name,)*];

            /// The stable, snake_case label used in summaries and metrics.
            pub const fn as_str(self) -> &'static str {
                match self { $(IlaDrop::$name => $label,)* }
            }
        }

        /// Counters of one ILA worker (summed across workers by the runtime).
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct IlaCounters {
            /// Packets translated.
            pub translated: u64,
            /// Unmapped packets passed on untouched (`UnmappedAction::Forward`).
            pub unmapped_forwarded: u64,
            /// Packets from the hosts to non-SIR destinations, passed on untouched.
            pub not_ila_forwarded: u64,
            $( $(#[$doc])* pub $field: u64, )*
        }

        impl IlaCounters {
            /// How many packets were dropped for `reason`.
            pub fn dropped(&self, reason: IlaDrop) -> u64 {
                match reason { $(IlaDrop::$name => self.$field,)* }
            }

            fn count(&mut self, reason: IlaDrop) {
                match reason { $(IlaDrop::$name => self.$field += 1,)* }
            }

            /// Adds another set of counters into this one.
            pub fn merge(&mut self, other: &IlaCounters) {
                self.translated += other.translated;
                self.unmapped_forwarded += other.unmapped_forwarded;
                self.not_ila_forwarded += other.not_ila_forwarded;
                $( self.$field += other.$field; )*
            }
        }
    };
}

ila_drops! {
    /// No mapping for the destination identifier (`UnmappedAction::Drop`).
    Unmapped => "ila_unmapped", unmapped,
    /// The version nibble is not 6.
    NotIpv6 => "ila_not_ipv6", not_ipv6,
    /// Shorter than its IPv6 header, payload length or transport header say.
    Truncated => "ila_truncated", truncated,
    /// A malformed extension-header chain (or one adj-transport cannot keep right, such as
    /// a transport after a Mobility or HIP header: see `xlat::ila`).
    Malformed => "ila_malformed", malformed,
    /// Checksum-neutral mapping impossible for this identifier (see `xlat::ila`).
    CsumUnsupported => "ila_csum_unsupported", csum_unsupported,
    /// The destination's upper 64 bits are not the SIR prefix (SIR -> ILA) or not the
    /// mapping's locator (ILA -> SIR).
    NotMatched => "ila_not_matched", not_matched,
}

impl IlaDrop {
    /// The engine-wide reason carried by [`Emit::Drop`] (the ILA counters keep the
    /// precise one): unmapped is `no_mapping`, not-matched `locator_mismatch`, truncated
    /// is `truncated`, everything else `malformed`.
    pub const fn drop_reason(self) -> DropReason {
        match self {
            IlaDrop::Unmapped => DropReason::NoMapping,
            IlaDrop::NotMatched => DropReason::LocatorMismatch,
            IlaDrop::Truncated => DropReason::Truncated,
            IlaDrop::NotIpv6 | IlaDrop::Malformed | IlaDrop::CsumUnsupported => {
                DropReason::Malformed
            }
        }
    }

    const fn from_xlat(e: IlaError) -> Self {
        match e {
            IlaError::Truncated => IlaDrop::Truncated,
            IlaError::NotIpv6 => IlaDrop::NotIpv6,
            IlaError::NotMatched => IlaDrop::NotMatched,
            IlaError::Malformed => IlaDrop::Malformed,
            IlaError::CsumNeutralUnsupported => IlaDrop::CsumUnsupported,
        }
    }

    const fn from_wire(e: wire::Error) -> Self {
        match e {
            wire::Error::Truncated | wire::Error::BadLength => IlaDrop::Truncated,
            wire::Error::BadVersion => IlaDrop::NotIpv6,
            wire::Error::BadHeaderLen | wire::Error::ExtensionChain => IlaDrop::Malformed,
        }
    }
}

impl std::fmt::Display for IlaDrop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A configuration that cannot work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IlaConfigError {
    /// `csum-mode neutral-map` needs `ident-type use-format` (it sets the C-bit).
    #[error("ila config: csum mode neutral-map needs ident format use-format (for the C-bit)")]
    NeutralMapNeedsFormat,
}

/// What a packet the stage did not drop became.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IlaOutcome {
    /// Rewritten in place.
    Translated,
    /// No mapping; passed on untouched.
    Unmapped,
    /// From the hosts, but not to the SIR prefix: ordinary IPv6, passed on untouched
    /// (like Linux's route-based ILA, which translates only what matches its route).
    NotIla,
}

/// The shared half: the mapping table and the configuration (one per ILA interface,
/// behind an `Arc`). The control side edits [`table`](Self::table) while workers run.
#[derive(Debug)]
pub struct IlaRouter {
    table: IlaTable,
    config: IlaConfig,
    /// The ICMP errors (Time Exceeded, Packet Too Big) each worker sends at most.
    icmp_rate: IcmpRate,
}

impl IlaRouter {
    /// A router with room for `capacity` mappings.
    pub fn new(config: IlaConfig, capacity: usize) -> Result<Arc<Self>, IlaConfigError> {
        if config.csum == CsumMode::NeutralMap && config.format != IdentFormat::UseFormat {
            return Err(IlaConfigError::NeutralMapNeedsFormat);
        }
        Self::with_icmp_rate(config, capacity, IcmpRate::default())
    }

    /// A router as [`new`](Self::new) whose workers send at most `icmp_rate` ICMP errors
    /// (in all and to one sender, per worker, as NAT44's and NAT64's).
    pub fn with_icmp_rate(
        config: IlaConfig,
        capacity: usize,
        icmp_rate: IcmpRate,
    ) -> Result<Arc<Self>, IlaConfigError> {
        if config.csum == CsumMode::NeutralMap && config.format != IdentFormat::UseFormat {
            return Err(IlaConfigError::NeutralMapNeedsFormat);
        }
        Ok(Arc::new(Self {
            table: IlaTable::new(capacity),
            config,
            icmp_rate,
        }))
    }

    /// The ICMP error budget of each worker.
    pub fn icmp_rate(&self) -> IcmpRate {
        self.icmp_rate
    }

    /// The identifier -> locator table (control side: insert, set_locator, remove,
    /// reclaim with the workers' `Qsbr`).
    pub fn table(&self) -> &IlaTable {
        &self.table
    }

    /// The configuration.
    pub fn config(&self) -> &IlaConfig {
        &self.config
    }

    /// A worker's stage (one per worker thread). The worker must announce quiescent
    /// states between batches on the `Qsbr` given to [`IlaTable::reclaim`] (see
    /// [`IlaMode`], whose workers do).
    pub fn worker(self: &Arc<Self>) -> IlaWorker {
        IlaWorker {
            router: Arc::clone(self),
            counters: IlaCounters::default(),
            engine: Counters::default(),
            qsbr: None,
            responder: Responder::new(self.icmp_rate),
        }
    }

    /// The two destinations one mapping translates between, as a packet carries them:
    /// the SIR address (SIR prefix | identifier) and the ILA address the stage rewrites it
    /// to (locator | the identifier as the checksum mode leaves it), or `None` when the
    /// stage refuses this identifier (checksum-neutral mapping impossible) or would not
    /// bring the ILA address back to the same SIR one. For the XDP fast path, which
    /// rewrites whole destinations (`runtime::live::fastpath_ila`).
    pub fn addresses(&self, identifier: u64, locator: u64) -> Option<(Ipv6Addr, Ipv6Addr)> {
        let sir = Ipv6Addr::from(u128::from(self.config.sir_prefix) << 64 | u128::from(identifier));
        let m = self.mapping(locator);
        // A bare header (no next header): the modes that adjust the transport checksum
        // find none, the others rewrite only the address.
        let header = |dst: Ipv6Addr| {
            let mut h = [0u8; field::HEADER_LEN];
            h[0] = 0x60;
            h[field::NXT_HDR] = 59;
            h[field::HOP_LIMIT] = 64;
            h[field::DST_ADDR].copy_from_slice(&dst.octets());
            h
        };
        let dst = |h: &[u8; field::HEADER_LEN]| {
            let mut a = [0u8; 16];
            a.copy_from_slice(&h[field::DST_ADDR]);
            Ipv6Addr::from(a)
        };
        let mut h = header(sir);
        sir_to_ila(&mut h, &m).ok()?;
        let ila = dst(&h);
        ila_to_sir(&mut h, &m).ok()?;
        (dst(&h) == sir).then_some((sir, ila))
    }

    fn mapping(&self, locator: u64) -> IlaMapping {
        IlaMapping {
            sir: SirPrefix(self.config.sir_prefix),
            locator: Locator(locator),
            csum: self.config.csum,
            format: self.config.format,
        }
    }
}

/// One worker's ILA stage: owns its counters, shares the router.
#[derive(Debug)]
pub struct IlaWorker {
    router: Arc<IlaRouter>,
    counters: IlaCounters,
    /// Forwarded and dropped packets in the engine's terms (`counters` says more).
    engine: Counters,
    /// This worker's handle on the table's QSBR domain (workers of an [`IlaMode`]).
    qsbr: Option<QsbrHandle>,
    /// Packet Too Big for packets over the next hop's MTU.
    responder: Responder,
}

/// The ILA mode: the router (table and configuration) and the QSBR domain its workers
/// report to (a removed mapping's slot is reused only after every worker has passed a
/// quiescent point).
#[derive(Debug)]
pub struct IlaMode {
    /// The mapping table and configuration, edited by the control side while workers run.
    pub router: Arc<IlaRouter>,
    /// The workers' QSBR domain.
    pub qsbr: Arc<Qsbr>,
}

/// The upper and lower 64 bits of the destination address (`pkt` is at least 40 bytes).
fn dst_halves(pkt: &[u8]) -> Option<(u64, u64)> {
    let upper = pkt.get(field::DST_ADDR.start..field::DST_ADDR.start + 8)?;
    let lower = pkt.get(field::DST_ADDR.start + 8..field::DST_ADDR.end)?;
    Some((
        u64::from_be_bytes(upper.try_into().ok()?),
        u64::from_be_bytes(lower.try_into().ok()?),
    ))
}

impl IlaWorker {
    /// This worker's counters.
    pub fn counters(&self) -> &IlaCounters {
        &self.counters
    }

    /// Translates one IPv6 packet (`pkt` starts at the IPv6 header) in place: SIR -> ILA
    /// travelling `Outbound` (from the hosts), ILA -> SIR `Inbound`. No next-hop MTU.
    pub fn process_packet(&mut self, pkt: &mut [u8], dir: Direction) -> Emit {
        match self.process_detailed(pkt, dir) {
            Ok(_) => {
                self.engine.forwarded += 1;
                Emit::Forward {
                    start: 0,
                    len: pkt.len(),
                }
            }
            Err(d) => {
                self.engine.drop(d.drop_reason());
                Emit::Drop(d.drop_reason())
            }
        }
    }

    /// [`process_packet`](Self::process_packet) with the precise outcome or drop reason
    /// (counted in the ILA counters either way).
    pub fn process_detailed(
        &mut self,
        pkt: &mut [u8],
        dir: Direction,
    ) -> Result<IlaOutcome, IlaDrop> {
        let r = self.translate(pkt, dir);
        match r {
            Ok(IlaOutcome::Translated) => self.counters.translated += 1,
            Ok(IlaOutcome::Unmapped) => self.counters.unmapped_forwarded += 1,
            Ok(IlaOutcome::NotIla) => self.counters.not_ila_forwarded += 1,
            Err(d) => self.counters.count(d),
        }
        r
    }

    fn translate(&self, pkt: &mut [u8], dir: Direction) -> Result<IlaOutcome, IlaDrop> {
        let router = &*self.router;
        wire::Ipv6Packet::new_checked(&*pkt).map_err(IlaDrop::from_wire)?;
        let (upper, ident) = dst_halves(pkt).ok_or(IlaDrop::Truncated)?;
        match dir {
            Direction::Outbound => {
                if upper != router.config.sir_prefix {
                    return Ok(IlaOutcome::NotIla);
                }
                let Some(locator) = router.table.lookup(ident) else {
                    return self.unmapped();
                };
                sir_to_ila(pkt, &router.mapping(locator)).map_err(IlaDrop::from_xlat)?;
            }
            Direction::Inbound => {
                // The mapping as it would be if `upper` were the right locator.
                let guess = router.mapping(upper);
                let sir_ident = match router.config.csum {
                    CsumMode::NoAction | CsumMode::AdjustTransport => ident,
                    CsumMode::NeutralMap | CsumMode::NeutralMapAuto => sir_identifier(pkt, &guess)?,
                };
                let Some(locator) = router.table.lookup(sir_ident) else {
                    return self.unmapped();
                };
                if locator != upper {
                    return Err(IlaDrop::NotMatched);
                }
                ila_to_sir(pkt, &guess).map_err(IlaDrop::from_xlat)?;
            }
        }
        Ok(IlaOutcome::Translated)
    }

    fn unmapped(&self) -> Result<IlaOutcome, IlaDrop> {
        match self.router.config.unmapped {
            UnmappedAction::Forward => Ok(IlaOutcome::Unmapped),
            UnmappedAction::Drop => Err(IlaDrop::Unmapped),
        }
    }
}

impl ModeWorker for IlaWorker {
    /// Translates the IPv6 packet in `frame` in place and forwards it as a router does:
    /// Hop Limit decremented (RFC 8200 §3), as Linux's ILA, which translates in the
    /// forwarding path (`net/ipv6/ila/`, then `ip6_forward`), leaves it. A packet whose
    /// Hop Limit runs out here is answered with Time Exceeded (RFC 4443 §3.3), one too big
    /// for the link it leaves by with Packet Too Big (§3.2), in that order (`ip6_forward`).
    fn process(
        &mut self,
        now: Timestamp,
        dir: Direction,
        frame: &mut Frame<'_>,
        egress: &Egress,
    ) -> Emit {
        if frame.offload != Offload::None {
            return self.process_offloaded(now, dir, frame, egress);
        }
        self.process_whole(now, dir, frame, egress)
    }

    fn counters(&self) -> &Counters {
        &self.engine
    }

    fn quiescent(&self) {
        if let Some(q) = &self.qsbr {
            q.quiescent();
        }
    }

    fn offline(&self) {
        if let Some(q) = &self.qsbr {
            q.offline();
        }
    }
}

impl IlaWorker {
    /// [`ModeWorker::process`] for a packet whose checksums are final.
    #[inline(always)]
    fn process_whole(
        &mut self,
        now: Timestamp,
        dir: Direction,
        frame: &mut Frame<'_>,
        egress: &Egress,
    ) -> Emit {
        let mtu = egress.leaving_mtu(dir, frame.offload);
        let pkt = frame.packet();
        let checked = match (pkt.first().map(|b| b >> 4), pkt.get(field::HOP_LIMIT)) {
            (Some(6), Some(&hop)) if hop <= 1 => Err(DropReason::TtlExpired),
            _ => fits(pkt, mtu),
        };
        if let Err(r) = checked {
            let icmp = owed(r, mtu);
            return self
                .responder
                .refuse(now, dir, frame, egress, &mut self.engine, r, icmp);
        }
        match self.process_packet(frame.packet_mut(), dir) {
            Emit::Forward { .. } => {
                // The Hop Limit is in no checksum (RFC 8200 §8.1 pseudo-header).
                if let Some(hop) = frame.packet_mut().get_mut(field::HOP_LIMIT) {
                    *hop = hop.saturating_sub(1);
                }
                Emit::Forward {
                    start: frame.start,
                    len: frame.len,
                }
            }
            e => e,
        }
    }

    /// A packet with a partial transport checksum (GSO or checksum offload passed through
    /// on AF_PACKET): translated as any other, then the change the translation made to
    /// the checksum field is redone under the partial rule.
    #[cold]
    #[inline(never)]
    fn process_offloaded(
        &mut self,
        now: Timestamp,
        dir: Direction,
        frame: &mut Frame<'_>,
        egress: &Egress,
    ) -> Emit {
        let partial =
            partial::csum_at(frame.packet()).and_then(|at| Some((at, be16(frame.packet(), at)?)));
        let e = self.process_whole(now, dir, frame, egress);
        if let (Emit::Forward { .. }, Some((at, p))) = (&e, partial) {
            let pkt = frame.packet_mut();
            if let Some(c) = be16(pkt, at) {
                let v = partial::redo_as_partial(p, c);
                pkt[at..at + 2].copy_from_slice(&v.to_be_bytes());
            }
        }
        e
    }
}

impl Mode for IlaMode {
    type Worker = IlaWorker;

    fn name(&self) -> &'static str {
        "ila"
    }

    fn families(&self) -> [Family; 2] {
        [Family::V6, Family::V6]
    }

    fn in_place(&self) -> bool {
        true
    }

    fn worker(&self, id: usize) -> IlaWorker {
        IlaWorker {
            qsbr: Some(self.qsbr.handle(id)),
            ..self.router.worker()
        }
    }

    /// Frees removed mappings' slots once every worker has passed a quiescent point.
    fn reaper(&self) -> Option<Box<dyn crate::mode::Reaper>> {
        Some(Box::new(IlaReaper {
            router: Arc::clone(&self.router),
            qsbr: Arc::clone(&self.qsbr),
            counters: Counters::default(),
        }))
    }

    /// A packet to the SIR prefix comes from the hosts (SIR -> ILA); any other comes from
    /// the ILA network (ILA -> SIR).
    fn classify(&self, pkt: &[u8]) -> Direction {
        match dst_halves(pkt) {
            Some((upper, _))
                if Family::of(pkt) == Some(Family::V6)
                    && upper == self.router.config.sir_prefix =>
            {
                Direction::Outbound
            }
            _ => Direction::Inbound,
        }
    }

    fn session_count(&self) -> usize {
        self.router.table().len()
    }
}

/// ILA's reaper: reclaims removed mappings' slots after their grace period.
#[derive(Debug)]
struct IlaReaper {
    router: Arc<IlaRouter>,
    qsbr: Arc<Qsbr>,
    counters: Counters,
}

impl crate::mode::Reaper for IlaReaper {
    fn poll_timeout(&self) -> Option<Timestamp> {
        None
    }

    fn handle_timeout(&mut self, _now: Timestamp) {
        self.router.table().reclaim(&self.qsbr);
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }
}

/// The SIR identifier a checksum-neutral ILA packet was sent with: the reverse
/// translation run on a copy of the fixed header, with no payload (neutral modes never
/// look past the addresses).
fn sir_identifier(pkt: &[u8], m: &IlaMapping) -> Result<u64, IlaDrop> {
    let mut hdr = [0u8; field::HEADER_LEN];
    hdr.copy_from_slice(pkt.get(..field::HEADER_LEN).ok_or(IlaDrop::Truncated)?);
    hdr[field::LENGTH].fill(0);
    hdr[field::NXT_HDR] = 59; // No Next Header
    ila_to_sir(&mut hdr, m).map_err(IlaDrop::from_xlat)?;
    dst_halves(&hdr).map(|(_, i)| i).ok_or(IlaDrop::Truncated)
}
