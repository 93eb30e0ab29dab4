//! The translation modes a gateway (live or offline) can run, behind one per-worker face:
//! `process(now, dir, buf, start, len) -> Emit`.
//!
//! - NAT44: translates in place; the packet never moves.
//! - SIIT / CLAT: stateless IPv4 <-> IPv6; the packet moves in its buffer (the caller leaves
//!   [`engine::HEADROOM`] in front of it).
//! - NAT64: stateful IPv6 -> IPv4 (and back), with hairpinning between IPv6 hosts.
//!
//! A mode is a value, not a branch buried in a worker: the live gateway and the offline
//! replay build a [`ModeShared`] from a [`ModeConfig`] and give each worker a [`Pipeline`].

use std::sync::Arc;

use conntrack::{Qsbr, QsbrHandle, Timestamp};
use engine::config::{ConfigError, Nat44Config};
use engine::ila::{IlaDir, IlaRouter, IlaSettings, IlaWorker};
use engine::nat44::{Nat44Reaper, Nat44Shared, Nat44Worker};
use engine::nat64::{Nat64Config, Nat64Reaper, Nat64Shared, Nat64Worker};
use engine::siit::{Siit, SiitConfig};
use engine::{Counters, Direction, Emit, Verdict};

/// What a gateway translates, as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModeConfig {
    /// NAT44 (NAPT).
    Nat44(Nat44Config),
    /// Stateless IPv4/IPv6 translation (RFC 7915; Pref64 and explicit address mappings).
    Siit(SiitConfig),
    /// The customer side of 464XLAT (RFC 6877): stateless, the host's IPv4 to the CLAT
    /// prefix and everything else through the provider's NAT64 prefix.
    Clat(SiitConfig),
    /// Stateful NAT64 (RFC 6146): IPv6 hosts inside, an IPv4 pool outside.
    Nat64(Nat64Config),
    /// An ILA router: SIR -> ILA for packets from the inside (the hosts), ILA -> SIR for
    /// packets from the outside (the ILA network).
    Ila(IlaSettings),
}

impl ModeConfig {
    /// Lowers the translator's IPv4 / IPv6 next-hop MTUs to the links' (never below the
    /// IPv6 minimum of 1280) and returns the MTUs in force, for the IPv4 <-> IPv6 modes.
    pub fn clamp_mtus(&mut self, ipv4_link: u32, ipv6_link: u32) -> Option<(u32, u32)> {
        let o = match self {
            ModeConfig::Siit(c) | ModeConfig::Clat(c) => &mut c.options,
            ModeConfig::Nat64(c) => &mut c.options,
            ModeConfig::Nat44(_) | ModeConfig::Ila(_) => return None,
        };
        o.ipv4_mtu = o.ipv4_mtu.min(ipv4_link).max(68);
        o.ipv6_mtu = o.ipv6_mtu.min(ipv6_link).max(1280);
        Some((o.ipv4_mtu, o.ipv6_mtu))
    }

    /// The mode's name as operators write it (`nat44`, `siit`, `clat`, `nat64`).
    pub fn name(&self) -> &'static str {
        match self {
            ModeConfig::Nat44(_) => "nat44",
            ModeConfig::Siit(_) => "siit",
            ModeConfig::Clat(_) => "clat",
            ModeConfig::Nat64(_) => "nat64",
            ModeConfig::Ila(_) => "ila",
        }
    }
}

/// Why a mode could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ModeError {
    /// NAT44 or NAT64 validation.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// SIIT/CLAT validation.
    #[error("{0}")]
    Siit(String),
    /// ILA settings.
    #[error("{0}")]
    Ila(String),
}

/// The state every worker of a mode shares.
#[derive(Debug)]
pub enum ModeShared {
    /// NAT44 tables.
    Nat44(Arc<Nat44Shared>),
    /// A stateless translator (each worker gets a copy).
    Siit(Box<Siit>),
    /// NAT64 tables.
    Nat64(Arc<Nat64Shared>),
    /// The ILA mapping table, and the QSBR domain its workers report to (a removed
    /// mapping's slot is reused only after every worker has passed a quiescent point).
    Ila(Arc<IlaRouter>, Arc<Qsbr>),
}

impl ModeShared {
    /// Builds the shared state for `workers` threads.
    pub fn new(cfg: &ModeConfig, workers: usize) -> Result<Self, ModeError> {
        Ok(match cfg {
            ModeConfig::Nat44(c) => ModeShared::Nat44(Nat44Shared::new(c.clone(), workers)?),
            ModeConfig::Siit(c) | ModeConfig::Clat(c) => {
                ModeShared::Siit(Box::new(Siit::new(c.clone()).map_err(ModeError::Siit)?))
            }
            ModeConfig::Nat64(c) => ModeShared::Nat64(Nat64Shared::new(c.clone(), workers)?),
            ModeConfig::Ila(c) => ModeShared::Ila(
                c.router().map_err(|e| ModeError::Ila(e.to_string()))?,
                Qsbr::new(workers.max(1)),
            ),
        })
    }

    /// The pipeline of worker `id`.
    pub fn worker(&self, id: usize) -> Pipeline {
        match self {
            ModeShared::Nat44(s) => Pipeline::Nat44(s.worker(id)),
            ModeShared::Siit(s) => Pipeline::Siit(s.clone()),
            ModeShared::Nat64(s) => Pipeline::Nat64(s.worker(id)),
            ModeShared::Ila(r, q) => Pipeline::Ila {
                worker: r.worker(),
                qsbr: q.handle(id),
                counters: Counters::default(),
            },
        }
    }

    /// The reaper, for stateful modes.
    pub fn reaper(&self) -> Option<Reaper> {
        match self {
            ModeShared::Nat44(s) => Some(Reaper::Nat44(s.reaper())),
            ModeShared::Siit(_) => None,
            ModeShared::Nat64(s) => Some(Reaper::Nat64(s.reaper())),
            ModeShared::Ila(r, q) => Some(Reaper::Ila(Arc::clone(r), Arc::clone(q))),
        }
    }

    /// Live sessions (0 for stateless modes).
    pub fn session_count(&self) -> usize {
        match self {
            ModeShared::Nat44(s) => s.session_count(),
            ModeShared::Siit(_) => 0,
            ModeShared::Nat64(s) => s.session_count(),
            ModeShared::Ila(r, _) => r.table().len(),
        }
    }
}

/// A stateful mode's reaper.
#[derive(Debug)]
pub enum Reaper {
    /// NAT44's.
    Nat44(Nat44Reaper),
    /// NAT64's.
    Nat64(Nat64Reaper),
    /// ILA: frees removed mappings' slots after their grace period.
    Ila(Arc<IlaRouter>, Arc<Qsbr>),
}

impl Reaper {
    /// One pass (expire, release, reclaim).
    pub fn handle_timeout(&mut self, now: Timestamp) {
        match self {
            Reaper::Nat44(r) => r.handle_timeout(now),
            Reaper::Nat64(r) => r.handle_timeout(now),
            Reaper::Ila(r, q) => {
                r.table().reclaim(q);
            }
        }
    }

    /// When the next pass is due.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        match self {
            Reaper::Nat44(r) => r.poll_timeout(),
            Reaper::Nat64(r) => r.poll_timeout(),
            Reaper::Ila(..) => None,
        }
    }

    /// The reaper's own counters (expiries).
    pub fn counters(&self) -> &Counters {
        static NONE: Counters = Counters::new();
        match self {
            Reaper::Nat44(r) => r.counters(),
            Reaper::Nat64(r) => r.counters(),
            Reaper::Ila(..) => &NONE,
        }
    }
}

/// NAT44 on `buf[start..start + len]`, in place (a complete packet or one an offload left
/// unfinished).
#[inline]
fn nat44(
    w: &mut Nat44Worker,
    now: Timestamp,
    dir: Direction,
    buf: &mut [u8],
    start: usize,
    len: usize,
    offload: engine::Offload,
) -> Emit {
    let Some(pkt) = buf.get_mut(start..start.saturating_add(len)) else {
        return Emit::Drop(engine::DropReason::Truncated);
    };
    match w.process_offloaded(now, dir, pkt, offload) {
        Verdict::Forward => Emit::Forward { start, len },
        Verdict::Drop(r) => Emit::Drop(r),
    }
}

/// One worker's translator.
#[derive(Debug)]
pub enum Pipeline {
    /// NAT44.
    Nat44(Nat44Worker),
    /// Stateless translation.
    Siit(Box<Siit>),
    /// NAT64.
    Nat64(Nat64Worker),
    /// ILA.
    Ila {
        /// The translator.
        worker: IlaWorker,
        /// This worker's QSBR handle.
        qsbr: QsbrHandle,
        /// Forwarded and dropped packets in the engine's terms (the worker's own
        /// `IlaCounters` say more).
        counters: Counters,
    },
}

impl Pipeline {
    /// Translates the IP packet `buf[start..start + len]` that arrived travelling `dir`
    /// (outbound = received on the inside interface).
    #[inline]
    pub fn process(
        &mut self,
        now: Timestamp,
        dir: Direction,
        buf: &mut [u8],
        start: usize,
        len: usize,
    ) -> Emit {
        match self {
            Pipeline::Nat44(w) => nat44(w, now, dir, buf, start, len, engine::Offload::None),
            Pipeline::Siit(s) => s.process(buf, start, len),
            Pipeline::Nat64(w) => w.process(now, dir, buf, start, len),
            Pipeline::Ila {
                worker, counters, ..
            } => {
                let Some(pkt) = buf.get_mut(start..start.saturating_add(len)) else {
                    counters.drop(engine::DropReason::Truncated);
                    return Emit::Drop(engine::DropReason::Truncated);
                };
                let d = match dir {
                    Direction::Outbound => IlaDir::SirToIla,
                    Direction::Inbound => IlaDir::IlaToSir,
                };
                match worker.process(pkt, d) {
                    Verdict::Forward => {
                        counters.forwarded += 1;
                        Emit::Forward { start, len }
                    }
                    Verdict::Drop(r) => {
                        counters.drop(r);
                        Emit::Drop(r)
                    }
                }
            }
        }
    }

    /// Like [`process`](Self::process) for a frame a receive offload left unfinished
    /// (GSO super-packet or partial checksum; see `Nat44Worker::process_offloaded`).
    /// Only NAT44 translates such frames; other modes drop them as `malformed` (the
    /// gateway passes offloaded frames only to NAT44).
    #[inline]
    pub fn process_offloaded(
        &mut self,
        now: Timestamp,
        dir: Direction,
        buf: &mut [u8],
        start: usize,
        len: usize,
        offload: engine::Offload,
    ) -> Emit {
        match self {
            Pipeline::Nat44(w) => nat44(w, now, dir, buf, start, len, offload),
            other if offload == engine::Offload::None => other.process(now, dir, buf, start, len),
            _ => Emit::Drop(engine::DropReason::Malformed),
        }
    }

    /// This worker's counters.
    pub fn counters(&self) -> &Counters {
        match self {
            Pipeline::Nat44(w) => w.counters(),
            Pipeline::Siit(s) => s.counters(),
            Pipeline::Nat64(w) => w.counters(),
            Pipeline::Ila { counters, .. } => counters,
        }
    }

    /// A quiescent point (between batches).
    #[inline]
    pub fn quiescent(&self) {
        match self {
            Pipeline::Nat44(w) => w.quiescent(),
            Pipeline::Siit(_) => {}
            Pipeline::Nat64(w) => w.quiescent(),
            Pipeline::Ila { qsbr, .. } => qsbr.quiescent(),
        }
    }

    /// Idle: holds no references.
    pub fn offline(&self) {
        match self {
            Pipeline::Nat44(w) => w.offline(),
            Pipeline::Siit(_) => {}
            Pipeline::Nat64(w) => w.offline(),
            Pipeline::Ila { qsbr, .. } => qsbr.offline(),
        }
    }
}
