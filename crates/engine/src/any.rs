//! Every mode behind one value: [`ModeConfig`] (what the configuration asks for) builds an
//! [`AnyMode`] (the shared state), and [`AnyMode::visit`] hands the concrete mode to code
//! that is generic over [`Mode`] — the live runtime, the capture replay and the benchmark
//! — so each runs monomorphised per mode and no caller matches on the variant. Adding a
//! mode is one variant here, its config, and its `Mode`/`ModeWorker` implementations.

use std::sync::Arc;

use conntrack::Qsbr;

use crate::config::{ConfigError, ConfigItem};
use crate::ila::{IlaMode, IlaSettings};
use crate::introspect::{
    BindingInfo, Census, Introspect, PoolAddrUsage, SessionFilter, SessionInfo,
};
use crate::mode::{Family, Mode};
use crate::nat44::Nat44Config;
use crate::nat44::Nat44Shared;
use crate::nat64::{Nat64Config, Nat64Shared};
use crate::reload::{refuse_restart_only, ReloadAction, ReloadReport};
use crate::siit::{Siit, SiitConfig, SiitKind};
use crate::TableOccupancy;

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
    /// The lowest IPv6 MTU (RFC 7915 §4.1) stays as configured: it is a property of the
    /// IPv6 paths, not of the link.
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

    /// The mode's name as operators write it (`nat44`, `siit`, `clat`, `nat64`, `ila`).
    pub fn name(&self) -> &'static str {
        match self {
            ModeConfig::Nat44(_) => "nat44",
            ModeConfig::Siit(_) => "siit",
            ModeConfig::Clat(_) => "clat",
            ModeConfig::Nat64(_) => "nat64",
            ModeConfig::Ila(_) => "ila",
        }
    }

    /// The IP version the mode translates on the inside and the outside.
    pub fn families(&self) -> [Family; 2] {
        match self {
            ModeConfig::Nat44(_) => [Family::V4, Family::V4],
            ModeConfig::Nat64(_) => [Family::V6, Family::V4],
            ModeConfig::Siit(_) | ModeConfig::Clat(_) => [Family::V4, Family::V6],
            ModeConfig::Ila(_) => [Family::V6, Family::V6],
        }
    }
}

/// Code generic over the mode, run by [`AnyMode::visit`] with the concrete one.
pub trait ModeVisitor {
    /// What the visit returns.
    type Output;
    /// Runs with the mode.
    fn visit<M: Mode>(self, mode: &M) -> Self::Output;
}

/// The shared state of the configured mode (one value per gateway, built once: the size
/// of the stateless translator's variant does not matter).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum AnyMode {
    /// NAT44 tables.
    Nat44(Arc<Nat44Shared>),
    /// A stateless translator (SIIT or CLAT; each worker gets a copy).
    Siit(Siit),
    /// NAT64 tables.
    Nat64(Arc<Nat64Shared>),
    /// The ILA mapping table and its workers' QSBR domain.
    Ila(IlaMode),
}

impl AnyMode {
    /// Builds the shared state of `cfg` for `workers` threads.
    pub fn new(cfg: &ModeConfig, workers: usize) -> Result<Self, ConfigError> {
        Ok(match cfg {
            ModeConfig::Nat44(c) => AnyMode::Nat44(Nat44Shared::new(c.clone(), workers)?),
            ModeConfig::Siit(c) => AnyMode::Siit(Siit::new(c.clone(), SiitKind::Siit)?),
            ModeConfig::Clat(c) => AnyMode::Siit(Siit::new(c.clone(), SiitKind::Clat)?),
            ModeConfig::Nat64(c) => AnyMode::Nat64(Nat64Shared::new(c.clone(), workers)?),
            ModeConfig::Ila(c) => {
                c.validate()?;
                AnyMode::Ila(IlaMode {
                    router: c.router().map_err(|e| {
                        ConfigError::new(ConfigItem::Field("mapping"), e.to_string())
                    })?,
                    qsbr: Qsbr::new(workers.max(1)),
                })
            }
        })
    }

    /// Runs `v` with the concrete mode.
    pub fn visit<V: ModeVisitor>(&self, v: V) -> V::Output {
        match self {
            AnyMode::Nat44(m) => v.visit(m),
            AnyMode::Siit(m) => v.visit(m),
            AnyMode::Nat64(m) => v.visit(m),
            AnyMode::Ila(m) => v.visit(m),
        }
    }

    /// The mode's name.
    pub fn name(&self) -> &'static str {
        struct Name;
        impl ModeVisitor for Name {
            type Output = &'static str;
            fn visit<M: Mode>(self, m: &M) -> &'static str {
                m.name()
            }
        }
        self.visit(Name)
    }

    /// Live sessions (mappings for ILA; 0 for the stateless modes).
    pub fn session_count(&self) -> usize {
        struct Count;
        impl ModeVisitor for Count {
            type Output = usize;
            fn visit<M: Mode>(self, m: &M) -> usize {
                m.session_count()
            }
        }
        self.visit(Count)
    }

    /// The reaper, for a mode with state to expire.
    pub fn reaper(&self) -> Option<Box<dyn crate::mode::Reaper>> {
        struct R;
        impl ModeVisitor for R {
            type Output = Option<Box<dyn crate::mode::Reaper>>;
            fn visit<M: Mode>(self, m: &M) -> Self::Output {
                m.reaper()
            }
        }
        self.visit(R)
    }
}

// Memory estimate.
impl ModeConfig {
    /// The most memory the tables of this configuration hold when full, part by part,
    /// each with the setting that sizes it (see [`crate::config::check_memory`]).
    pub fn memory(&self) -> crate::config::MemoryEstimate {
        use crate::config::{ConfigItem, MemoryEstimate};
        match self {
            ModeConfig::Nat44(c) => c.memory(),
            ModeConfig::Nat64(c) => c.memory(),
            ModeConfig::Siit(c) | ModeConfig::Clat(c) => {
                let mut m = MemoryEstimate::default();
                // The EAM table and its two lookup indexes.
                m.add(
                    "eam",
                    ConfigItem::Field("eam"),
                    c.eam
                        .len()
                        .saturating_mul(3 * std::mem::size_of::<crate::siit::Eam>()),
                );
                m
            }
            ModeConfig::Ila(s) => {
                let mut m = MemoryEstimate::default();
                m.add(
                    "ila mappings",
                    ConfigItem::Field("max_mappings"),
                    conntrack::ila_table::IlaTable::bytes_for(s.capacity),
                );
                m
            }
        }
    }
}

// Table occupancy for metrics.
impl AnyMode {
    /// The session table's occupancy, for the stateful modes (NAT44, NAT64); `None` for
    /// the stateless ones and ILA. O(1): no walk.
    pub fn occupancy(&self) -> Option<TableOccupancy> {
        match self {
            AnyMode::Nat44(m) => Some(m.occupancy()),
            AnyMode::Nat64(m) => Some(m.occupancy()),
            AnyMode::Siit(_) | AnyMode::Ila(_) => None,
        }
    }
}

// NAT event logging (RFC 8158).
impl AnyMode {
    /// A fresh event log for this mode's `workers` workers and its reaper, attached to
    /// its tables: `None` for the stateless modes and ILA (nothing to log) or when `mask`
    /// is empty (logging off costs nothing).
    pub fn attach_event_log(
        &self,
        mask: crate::events::EventMask,
        workers: usize,
        capacity: usize,
    ) -> Option<Arc<crate::events::EventLog>> {
        if mask == crate::events::EventMask::NONE {
            return None;
        }
        let nat = match self {
            AnyMode::Nat44(n) => n,
            AnyMode::Nat64(n) => n.nat44(),
            AnyMode::Siit(_) | AnyMode::Ila(_) => return None,
        };
        let log = Arc::new(crate::events::EventLog::new(mask, workers, capacity));
        nat.attach_events(Arc::clone(&log)).then_some(log)
    }
}

// -- introspection for the control socket (see `crate::introspect`) --
impl AnyMode {
    /// Live sessions passing `filter`, each handed to `visit` until it returns `false`;
    /// returns how many were handed over. Reads the tables without writing or locking
    /// (the workers go on). SIIT/CLAT and ILA have none.
    pub fn sessions(
        &self,
        now: conntrack::Timestamp,
        filter: &SessionFilter,
        visit: &mut dyn FnMut(&SessionInfo) -> bool,
    ) -> usize {
        match self {
            AnyMode::Nat44(m) => m.sessions(now, filter, visit),
            AnyMode::Nat64(m) => m.sessions(now, filter, visit),
            AnyMode::Siit(_) | AnyMode::Ila(_) => 0,
        }
    }

    /// Ends the live sessions passing `filter` as the reaper ends expired ones, waiting
    /// for its next pass; with `dry_run`, only counts them. SIIT/CLAT and ILA have none.
    pub fn clear_sessions(
        &self,
        now: conntrack::Timestamp,
        filter: &SessionFilter,
        dry_run: bool,
    ) -> Result<usize, crate::nat44::clear::ClearError> {
        match self {
            AnyMode::Nat44(m) => m.clear_sessions(now, filter, dry_run),
            AnyMode::Nat64(m) => m.clear_sessions(now, filter, dry_run),
            AnyMode::Siit(_) | AnyMode::Ila(_) => Ok(0),
        }
    }

    /// Live bindings, each handed to `visit` until it returns `false`. SIIT/CLAT and ILA
    /// have none (ILA: [`ila_mappings`](Self::ila_mappings)).
    pub fn bindings(&self, visit: &mut dyn FnMut(&BindingInfo) -> bool) -> usize {
        match self {
            AnyMode::Nat44(m) => m.bindings(visit),
            AnyMode::Nat64(m) => m.bindings(visit),
            AnyMode::Siit(_) | AnyMode::Ila(_) => 0,
        }
    }

    /// The ILA mappings `(identifier, locator)`, sorted by identifier (empty for the
    /// other modes).
    pub fn ila_mappings(&self) -> Vec<(u64, u64)> {
        match self {
            AnyMode::Ila(m) => {
                let mut v: Vec<_> = m
                    .router
                    .table()
                    .iter()
                    .map(|e| (e.identifier, e.locator))
                    .collect();
                v.sort_unstable();
                v
            }
            _ => Vec::new(),
        }
    }

    /// Use of each public pool address (NAT44, NAT64; empty otherwise).
    pub fn pool_usage(&self) -> Vec<PoolAddrUsage> {
        match self {
            AnyMode::Nat44(m) => m.pool_usage(),
            AnyMode::Nat64(m) => m.pool_usage(),
            AnyMode::Siit(_) | AnyMode::Ila(_) => Vec::new(),
        }
    }

    /// Counts over the tables (ILA: the mappings as `live`, the table's capacity).
    pub fn census(&self) -> Census {
        match self {
            AnyMode::Nat44(m) => m.census(),
            AnyMode::Nat64(m) => m.census(),
            AnyMode::Siit(_) => Census::default(),
            AnyMode::Ila(m) => {
                let t = m.router.table();
                Census {
                    capacity: t.capacity() as u64,
                    live: t.len() as u64,
                    ..Census::default()
                }
            }
        }
    }
}

// Live reload (see `crate::reload`).
impl AnyMode {
    /// Applies `new` live over `old` (the configuration this instance runs), or refuses
    /// with the reason, keeping `old` in force. NAT44 and NAT64 change their policy live
    /// (see `nat44::reload`, `nat64::reload`), SIIT/CLAT their whole translator
    /// configuration ([`crate::siit::Siit::reload`]); ILA's settings other than its
    /// mappings (which the runtime's control state reloads) need a restart.
    pub fn reload(&self, old: &ModeConfig, new: &ModeConfig) -> Result<ReloadReport, ConfigError> {
        self.reload_as(old, new, ReloadAction::Apply)
    }

    /// What [`reload`](Self::reload) would change, or why it would refuse, with nothing
    /// changed.
    pub fn preview_reload(
        &self,
        old: &ModeConfig,
        new: &ModeConfig,
    ) -> Result<ReloadReport, ConfigError> {
        self.reload_as(old, new, ReloadAction::Preview)
    }

    fn reload_as(
        &self,
        old: &ModeConfig,
        new: &ModeConfig,
        action: ReloadAction,
    ) -> Result<ReloadReport, ConfigError> {
        match (self, old, new) {
            (AnyMode::Nat44(s), ModeConfig::Nat44(_), ModeConfig::Nat44(n)) => {
                s.reload_as(n.clone(), action)
            }
            (AnyMode::Nat64(s), ModeConfig::Nat64(o), ModeConfig::Nat64(n)) => {
                s.reload_as(o, n, action)
            }
            (AnyMode::Siit(s), ModeConfig::Siit(o), ModeConfig::Siit(n))
            | (AnyMode::Siit(s), ModeConfig::Clat(o), ModeConfig::Clat(n)) => {
                s.reload_as(o, n, action)
            }
            (_, o, n) if o.name() != n.name() => Err(ConfigError::new(
                ConfigItem::Field("mode"),
                format!(
                    "cannot change live from {} to {} (restart needed)",
                    o.name(),
                    n.name()
                ),
            )),
            (AnyMode::Ila(_), ModeConfig::Ila(o), ModeConfig::Ila(n)) => {
                refuse_restart_only(&[
                    ("max_mappings", o.capacity != n.capacity),
                    ("ila settings other than the mappings", o.config != n.config),
                    ("icmp_error_rate", o.icmp_rate != n.icmp_rate),
                ])?;
                Ok(ReloadReport::default())
            }
            (_, o, n) if o == n => Ok(ReloadReport::default()),
            (_, o, _) => Err(ConfigError::new(
                ConfigItem::Field(o.name()),
                format!("{} settings cannot change live (restart needed)", o.name()),
            )),
        }
    }
}
