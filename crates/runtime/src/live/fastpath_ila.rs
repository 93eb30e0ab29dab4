//! The XDP fast path for ILA, where the rewrite fits in XDP: the router's mappings,
//! copied into the steering program's `fast_ila` maps.
//!
//! ILA is stateless, so there is nothing to wait for: a mapping is offloaded as soon as
//! a next hop is known. Each mapping gives up to two entries, keyed by the whole
//! destination a packet arrives with: in the inside interface's map, the SIR address ->
//! the ILA address (leaving outside, to the route's neighbour for it); in the outside
//! interface's map, the ILA address -> the SIR address (leaving inside, to the host).
//! Each direction stands alone: a router usually forwards only one direction of a
//! mapping (its own hosts' mappings inbound, the others' outbound), and the direction
//! whose route does not leave by the other interface, or whose neighbour is not resolved
//! yet, stays with the engine. The
//! addresses are the engine's own ([`IlaRouter::addresses`]: the translation run on a bare
//! header), so the program's rewrite is the stage's byte for byte in every checksum mode.
//!
//! The control side keeps the copy true ([`MappingOffload`]): before `ila set`, `ila del`
//! or a reload removes or changes a mapping, its entries are taken out; after each change
//! the copy is synced with the table, under the same lock. The runtime also syncs on a
//! timer, for next hops that were not resolved yet and routes or neighbours that changed
//! (only entries whose next hop changed are replaced).

use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::Ordering;

use engine::ila::{CsumMode, IlaRouter};
use io::afxdp::fast_path::{FastFlow, IlaRewrite, NextHop};

use super::fastpath::{mtu16, Kind, XdpFastPath};
use crate::control::MappingOffload;

/// One offloaded mapping.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IlaInstalled {
    locator: u64,
    /// The SIR address (inside map's key) and the ILA address (outside map's key).
    addrs: [Ipv6Addr; 2],
    /// Where each leaves: [outbound (to the ILA address), inbound (to the SIR address)];
    /// `None`: that direction is the engine's.
    hops: [Option<NextHop>; 2],
    /// The network view version the MACs came from.
    version: u64,
}

impl XdpFastPath {
    pub(super) fn ila_lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, IlaInstalled>> {
        self.by_ident.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn router(&self) -> Option<&IlaRouter> {
        match &self.kind {
            Kind::Ila(r) => Some(r),
            _ => None,
        }
    }

    fn ila_uninstall(&self, i: &IlaInstalled) {
        self.maps[0].remove(&FastFlow::Ila(i.addrs[0]));
        self.maps[1].remove(&FastFlow::Ila(i.addrs[1]));
        self.removed.fetch_add(1, Ordering::Relaxed);
    }

    /// What `(identifier, locator)` should be offloaded as now; `None`: not offloadable
    /// (refused by the checksum mode, or neither next hop by the other link and resolved).
    fn ila_wanted(
        &self,
        router: &IlaRouter,
        identifier: u64,
        locator: u64,
        view: &super::netview::NetView,
        version: u64,
    ) -> Option<IlaInstalled> {
        let (sir, ila) = router.addresses(identifier, locator)?;
        let hops = [
            self.hop(view, 0, IpAddr::V6(ila)),
            self.hop(view, 1, IpAddr::V6(sir)),
        ];
        if hops == [None, None] {
            return None;
        }
        Some(IlaInstalled {
            locator,
            addrs: [sir, ila],
            hops,
            version,
        })
    }

    /// Writes the entries of `w`; false (and none left) when a map refuses one.
    fn ila_install(&self, router: &IlaRouter, w: &IlaInstalled) -> bool {
        let adjust = router.config().csum == CsumMode::AdjustTransport;
        let rewrite = |to: Ipv6Addr, hop: NextHop| IlaRewrite {
            to,
            adjust,
            hop,
            mtu: mtu16(self.passing_mtu()),
        };
        let [sir, ila] = w.addrs;
        // Inside: SIR -> ILA; outside: ILA -> SIR.
        let entries = [(sir, ila), (ila, sir)];
        let ok = (0..2).all(|d| match w.hops[d] {
            Some(hop) => {
                let (from, to) = entries[d];
                self.maps[d].insert_ila(from, &rewrite(to, hop)).is_ok()
            }
            None => true,
        });
        if !ok {
            self.errors.fetch_add(1, Ordering::Relaxed);
            self.maps[0].remove(&FastFlow::Ila(sir));
            self.maps[1].remove(&FastFlow::Ila(ila));
        }
        ok
    }
}

impl MappingOffload for XdpFastPath {
    fn forget(&self, identifier: u64) {
        if let Some(i) = self.ila_lock().remove(&identifier) {
            self.ila_uninstall(&i);
        }
    }

    fn stale(&self) -> bool {
        self.ila_synced.load(Ordering::Relaxed) != self.published.version()
    }

    fn sync(&self, mappings: &[(u64, u64)]) {
        let Some(router) = self.router() else {
            return;
        };
        let version = self.published.version();
        self.ila_synced.store(version, Ordering::Relaxed);
        let view = self.published.current();
        let mut by = self.ila_lock();
        // Mappings the table no longer holds, or holds with another locator (the control
        // side forgets those first; this is the safety net).
        let want: std::collections::HashMap<u64, u64> = mappings.iter().copied().collect();
        by.retain(|id, i| {
            let keep = want.get(id) == Some(&i.locator);
            if !keep {
                self.ila_uninstall(i);
            }
            keep
        });
        for &(id, locator) in mappings {
            if by.get(&id).is_some_and(|i| i.version == version) {
                continue;
            }
            let wanted = self.ila_wanted(router, id, locator, &view, version);
            if let Some(have) = by.get_mut(&id) {
                // The view changed: keep the entries when the next hops did not.
                if wanted.is_some_and(|w| w.hops == have.hops) {
                    have.version = version;
                    continue;
                }
                if let Some(old) = by.remove(&id) {
                    self.ila_uninstall(&old);
                }
            }
            let Some(w) = wanted else {
                continue;
            };
            if by.len() >= self.max_sessions() {
                self.refused_full.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if self.ila_install(router, &w) {
                by.insert(id, w);
                self.installed.fetch_add(1, Ordering::Relaxed);
            } else {
                // Refused by the kernel: the timer's next sync tries again.
                self.ila_synced.store(u64::MAX, Ordering::Relaxed);
            }
        }
    }
}
