//! The fast path for the stateless translator, SIIT and CLAT, where the rewrite fits in
//! the program: flows the translator translated, copied into
//! the program's `fast_46` and `fast_64` maps — the same maps, rewrites and program as
//! NAT64's, with the ports unchanged and the families on the other sides (IPv4 inside:
//! `fast_46` in the inside interface's map, `fast_64` in the outside one's).
//!
//! SIIT keeps no state, so the offload learns flows from the workers
//! (`engine::siit::offload`): a worker hints each direction of a TCP or UDP flow at its
//! second packet, with the tuple it arrived with and the one it left with, and the sync
//! ([`XdpFastPath::siit_sync`], every 5 ms on its own thread) installs that direction
//! with the next hop the routes and neighbours give for the translated destination and
//! the translator's options in force. Each entry is the engine's own translation of the
//! flow, so the program's bytes are the engine's.
//!
//! The copy stays true:
//! - a reload publishes a new configuration generation: every entry is taken out at the
//!   next sync, and hints of an older generation are dropped (the addresses or options
//!   may have changed);
//! - routes or neighbours change: an entry whose next hop moved is replaced, one whose
//!   next hop is gone is taken out (its packets go back to the engine, which hints again);
//! - an entry idle for `[gateway] xdp_fast_path_idle` (by the program's last-seen stamp;
//!   30 s unless configured) is taken out, so the table holds the flows that carry
//!   traffic; a full table refuses (`refused_full`) and the flow stays with the engine.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use conntrack::Timestamp;
use engine::siit::offload::{FlowHint, FlowHints, FlowKey};
use engine::siit::Siit;
use io::afxdp::fast_path::{FastFlow, FlowTuple, FlowTuple6, NextHop};

use super::fastpath::{Kind, XdpFastPath};

/// How often the sync runs (hints wait at most this long), and how often it walks the
/// entries (generation, next hops, idle ones).
pub(crate) const SYNC_EVERY: Duration = Duration::from_millis(5);
const WALK_EVERY: Duration = Duration::from_secs(1);

/// Most hints one sync installs (a map update is a syscall): 51,200 a second at most, so
/// a flood of two-packet flows costs this thread a bounded share of a core. The rest wait
/// for the next sync, and past [`MAX_WAITING`] the workers' queue fills and they hint
/// again later; meanwhile those flows stay with the engine.
const INSTALLS_PER_SYNC: usize = 256;
const MAX_WAITING: usize = 4096;

/// One offloaded direction of a flow.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FlowInstalled {
    /// As it leaves (the other family).
    to: FlowKey,
    hop: NextHop,
    /// The network view version the MACs came from.
    version: u64,
    /// When it was last known active (installed, hinted, or by the program's stamp).
    seen: Timestamp,
}

/// The sync's own state between runs (the thread's).
#[derive(Debug, Default)]
pub(crate) struct SiitSync {
    /// Hints drained from the workers, not installed yet (oldest first).
    waiting: Vec<FlowHint>,
    /// The configuration generation the entries were made by.
    generation: u64,
    next_walk: Option<Timestamp>,
}

/// The program's key of the flow `k` arriving (`None`: families mixed, not TCP/UDP).
fn fast_flow(k: &FlowKey) -> Option<FastFlow> {
    match (k.src, k.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => Some(FastFlow::V4To6(FlowTuple {
            proto: k.proto,
            src,
            sport: k.sport,
            dst,
            dport: k.dport,
        })),
        (IpAddr::V6(src), IpAddr::V6(dst)) => Some(FastFlow::V6To4(FlowTuple6 {
            proto: k.proto,
            src,
            sport: k.sport,
            dst,
            dport: k.dport,
        })),
        _ => None,
    }
}

impl XdpFastPath {
    fn siit(&self) -> Option<(&Siit, &FlowHints)> {
        match &self.kind {
            Kind::Siit(s, h) => Some((s, h)),
            _ => None,
        }
    }

    fn flow_lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<FastFlow, FlowInstalled>> {
        self.by_flow.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The link flows of `from`'s family arrive on: IPv4 inside (0), IPv6 outside (1).
    fn siit_ingress(from: &FastFlow) -> usize {
        match from {
            FastFlow::V4To6(_) => 0,
            _ => 1,
        }
    }

    /// Takes the installed entry of `from` out of its map.
    fn flow_uninstall(&self, from: &FastFlow) {
        let side = Self::siit_ingress(from);
        self.maps[side].remove(from);
        self.flows_in[side].fetch_sub(1, Ordering::Relaxed);
        self.removed.fetch_add(1, Ordering::Relaxed);
    }

    /// Writes the entry of `from` leaving as `to` by `hop` under `opts`; whether the map
    /// took it.
    fn flow_install(
        &self,
        opts: &xlat::siit::SiitOptions,
        from: &FastFlow,
        to: &FlowKey,
        hop: NextHop,
    ) -> bool {
        let map = &self.maps[Self::siit_ingress(from)];
        // `to` as the program names a tuple of its family (`fast_flow`); the IPv6 side is
        // the outside (link 1).
        let r = match (from, fast_flow(to)) {
            (FastFlow::V4To6(f), Some(FastFlow::V6To4(to6))) => {
                map.insert_46(f, &self.rewrite46(opts, to6, hop, 1))
            }
            (FastFlow::V6To4(f), Some(FastFlow::V4To6(to4))) => {
                map.insert_64(f, &self.rewrite64(opts, to4, hop, 1))
            }
            _ => return false,
        };
        if r.is_err() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        r.is_ok()
    }

    /// When the program last forwarded a packet of `from`, on the engine's clock.
    fn flow_stamp(&self, from: &FastFlow) -> Option<Timestamp> {
        let ns = self.maps[Self::siit_ingress(from)]
            .last_seen_ns(from)
            .filter(|ns| *ns > 0)?;
        u64::try_from(i128::from(ns) + self.offset)
            .ok()
            .map(Timestamp::from_nanos)
    }

    /// Takes every entry out when a reload published a new configuration generation, then
    /// installs the flows the workers hinted; every [`WALK_EVERY`], also walks the entries
    /// (next hops that changed, idle flows). A no-op for other modes.
    pub(crate) fn siit_sync(&self, st: &mut SiitSync, now: Timestamp) {
        let Some((siit, hints)) = self.siit() else {
            return;
        };
        let (generation, cfg) = siit.in_force();
        let mut by = self.flow_lock();
        if generation != st.generation {
            // A reload: whatever the old configuration translated is the engine's again.
            for from in by.keys() {
                self.flow_uninstall(from);
            }
            by.clear();
            st.generation = generation;
        }
        let version = self.published.version();
        let view = self.published.current();
        if st.waiting.len() < MAX_WAITING {
            hints.drain(&mut st.waiting);
        }
        let now_n = st.waiting.len().min(INSTALLS_PER_SYNC);
        for h in st.waiting.drain(..now_n) {
            if h.generation != generation {
                continue;
            }
            let Some(from) = fast_flow(&h.from) else {
                continue;
            };
            if let Some(i) = by.get_mut(&from) {
                // Installed: a packet the program leaves to the engine (SYN, FIN, ...).
                i.seen = i.seen.max(now);
                continue;
            }
            // A flow direction is in the map of the link it arrives on; each map holds
            // `max_sessions`.
            let side = Self::siit_ingress(&from);
            if self.flows_in[side].load(Ordering::Relaxed) >= self.max_sessions() {
                self.refused_full.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let Some(hop) = self.hop(&view, side, h.to.dst) else {
                continue;
            };
            if self.flow_install(&cfg.options, &from, &h.to, hop) {
                let to = h.to;
                let seen = now;
                by.insert(
                    from,
                    FlowInstalled {
                        to,
                        hop,
                        version,
                        seen,
                    },
                );
                self.flows_in[side].fetch_add(1, Ordering::Relaxed);
                self.installed.fetch_add(1, Ordering::Relaxed);
            }
        }
        if st.next_walk.is_some_and(|t| now < t) {
            return;
        }
        st.next_walk = Some(now + WALK_EVERY);
        by.retain(|from, i| {
            if i.version != version {
                let hop = self.hop(&view, Self::siit_ingress(from), i.to.dst);
                if hop != Some(i.hop) {
                    // The program's stamp first: the new entry starts without one.
                    if let Some(t) = self.flow_stamp(from) {
                        i.seen = i.seen.max(t);
                    }
                    // Written over in place (one update); taken out when the next hop is
                    // gone or the map refuses.
                    let Some(hop) =
                        hop.filter(|h| self.flow_install(&cfg.options, from, &i.to, *h))
                    else {
                        self.flow_uninstall(from);
                        return false;
                    };
                    self.removed.fetch_add(1, Ordering::Relaxed);
                    self.installed.fetch_add(1, Ordering::Relaxed);
                    i.hop = hop;
                }
                i.version = version;
            }
            if now.saturating_since(i.seen) < self.flow_idle {
                return true;
            }
            // One map read per entry and idle period, not per walk.
            if let Some(t) = self.flow_stamp(from) {
                i.seen = i.seen.max(t);
            }
            let keep = now.saturating_since(i.seen) < self.flow_idle;
            if !keep {
                self.flow_uninstall(from);
            }
            keep
        });
    }

    /// Flows offloaded now (each direction one): status and metrics read the counts
    /// without waiting for a sync that holds the table (a reload's flush of many entries
    /// takes a while).
    pub(super) fn flows(&self) -> usize {
        self.flows_in
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .sum()
    }
}
