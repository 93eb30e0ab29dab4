//! The network view: the gateway's two links and what the workers read about the
//! kernel's network state (routes, neighbours, the gateway's own addresses), and the
//! control thread that follows it over rtnetlink and publishes snapshots the workers
//! pick up between batches (one atomic load per batch, no lock on the packet path).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use io::netlink::{self, NeighborCache, Netlink, RouteTable};

use super::LiveError;

/// An interface as the data path needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Link {
    pub name: String,
    pub index: u32,
    pub mac: [u8; 6],
    pub mtu: usize,
}

impl Link {
    /// Reads `name`'s index, MAC and MTU from the kernel.
    pub fn lookup(name: &str) -> Result<Self, LiveError> {
        let err = |source| LiveError::Interface {
            name: name.to_owned(),
            source,
        };
        Ok(Self {
            name: name.to_owned(),
            index: netlink::if_index(name).map_err(err)?,
            mac: netlink::if_mac(name).map_err(err)?,
            mtu: netlink::if_mtu(name).map_err(err)? as usize,
        })
    }
}

/// What the workers read about the kernel's network state.
#[derive(Debug)]
pub(crate) struct NetView {
    pub routes: RouteTable,
    pub neighbors: NeighborCache,
    /// The gateway's own addresses: traffic to them is the kernel's.
    /// (A few addresses: a short list scans faster per packet than a hashed set.)
    pub local: Vec<Ipv4Addr>,
    /// The gateway's own IPv6 addresses.
    pub local6: Vec<Ipv6Addr>,
    /// Per interface (inside, outside): the address ICMP errors are sent from.
    pub addr4: [Option<Ipv4Addr>; 2],
    /// Per interface: the global IPv6 address ICMPv6 errors are sent from (a link-local
    /// one when there is no global one).
    pub addr6: [Option<Ipv6Addr>; 2],
}

impl Default for NetView {
    fn default() -> Self {
        NetView {
            routes: RouteTable::new(&[]),
            neighbors: NeighborCache::from_dump(&[]),
            local: Vec::new(),
            local6: Vec::new(),
            addr4: [None; 2],
            addr6: [None; 2],
        }
    }
}

impl NetView {
    /// Reads routes, neighbours and the links' addresses from the kernel.
    pub fn read(links: &[Link; 2], nl: &mut Netlink) -> std::io::Result<NetView> {
        let routes = RouteTable::new(&nl.dump_routes()?).with_ipv6(&nl.dump_routes6()?);
        let neighbors =
            NeighborCache::from_dump(&nl.dump_neighbors()?).with_ipv6(&nl.dump_neighbors6()?);
        let mut v = NetView {
            routes,
            neighbors,
            ..NetView::default()
        };
        for (i, l) in links.iter().enumerate() {
            for (a, _) in netlink::if_ipv4_addrs(l.index)? {
                if !v.local.contains(&a) {
                    v.local.push(a);
                }
                v.addr4[i] = v.addr4[i].or(Some(a));
            }
            for (a, _) in netlink::if_ipv6_addrs(l.index)? {
                if !v.local6.contains(&a) {
                    v.local6.push(a);
                }
                v.addr6[i] = prefer_global(v.addr6[i], a);
            }
        }
        Ok(v)
    }
}

/// The address ICMPv6 errors come from: the first global address, else the first
/// link-local one (it serves on-link senders).
fn prefer_global(have: Option<Ipv6Addr>, new: Ipv6Addr) -> Option<Ipv6Addr> {
    match have {
        Some(h) if !h.is_unicast_link_local() || new.is_unicast_link_local() => Some(h),
        _ => Some(new),
    }
}

/// Published snapshots: workers check `version` (one load) per batch and take the new
/// snapshot only when it changed.
#[derive(Debug, Default)]
pub(crate) struct Published {
    version: AtomicU64,
    view: Mutex<Arc<NetView>>,
}

impl Published {
    /// Makes `v` the current view.
    pub fn publish(&self, v: NetView) {
        if let Ok(mut g) = self.view.lock() {
            *g = Arc::new(v);
        }
        self.version.fetch_add(1, Ordering::Release);
    }

    /// The current view.
    pub fn current(&self) -> Arc<NetView> {
        self.view.lock().map(|g| Arc::clone(&g)).unwrap_or_default()
    }

    /// How many views have been published (changes when a new one is).
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }
}

/// Which neighbour probes the control thread sends: at most one a `interval` per next
/// hop, remembering at most `cap` next hops, each for `memory` (older entries are pruned
/// as time passes; while the map is full of recent ones, a new next hop is not probed
/// and counted in `skipped` — the kernel resolves it anyway from the packet handed to
/// it). Time is passed in.
#[derive(Debug)]
pub(crate) struct ProbeLimiter {
    last: HashMap<(u32, IpAddr), Instant>,
    cap: usize,
    interval: Duration,
    memory: Duration,
    last_prune: Option<Instant>,
    /// Requests refused because the map was full.
    pub skipped: u64,
}

impl ProbeLimiter {
    /// At most `cap` next hops, each probed at most once per `interval`, remembered for
    /// `memory` (at least `interval`).
    pub fn new(cap: usize, interval: Duration, memory: Duration) -> Self {
        ProbeLimiter {
            last: HashMap::with_capacity(cap.min(1024)),
            cap,
            interval,
            memory: memory.max(interval),
            last_prune: None,
            skipped: 0,
        }
    }

    /// Whether a probe for `hop` is due at `now` (and if so, records it).
    pub fn due(&mut self, hop: (u32, IpAddr), now: Instant) -> bool {
        // Prune at most once per interval: a scan of at most `cap` entries.
        if self
            .last_prune
            .is_none_or(|t| now.saturating_duration_since(t) >= self.interval)
        {
            self.last_prune = Some(now);
            let memory = self.memory;
            self.last
                .retain(|_, t| now.saturating_duration_since(*t) < memory);
        }
        let full = self.last.len() >= self.cap;
        match self.last.get_mut(&hop) {
            Some(t) if now.saturating_duration_since(*t) < self.interval => false,
            Some(t) => {
                *t = now;
                true
            }
            None if full => {
                self.skipped += 1;
                false
            }
            None => {
                self.last.insert(hop, now);
                true
            }
        }
    }

    /// Next hops remembered.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.last.len()
    }
}

/// The control thread: follows the kernel's routes and neighbours until `stop`,
/// republishing the view when they change, and probes neighbours the workers asked for
/// (at most once a second each, see [`ProbeLimiter`]).
pub(crate) fn follow(
    nl: &mut Netlink,
    events: &mut Netlink,
    links: &[Link; 2],
    published: &Published,
    probes: &mpsc::Receiver<(u32, IpAddr)>,
    stop: &AtomicBool,
    log: &(dyn Fn(String) + Sync),
) {
    let mut limiter = ProbeLimiter::new(
        super::forward::MAX_PROBED,
        Duration::from_secs(1),
        super::forward::PROBE_MEMORY,
    );
    while !stop.load(Ordering::Relaxed) {
        let changed = match events.recv_events(Duration::from_millis(100)) {
            Ok(ev) => !ev.is_empty(),
            Err(e) => {
                // ENOBUFS and friends: we may have missed events; re-read everything.
                log(format!(
                    "warning: rtnetlink events: {e}; re-reading routes and neighbours"
                ));
                std::thread::sleep(Duration::from_millis(100));
                true
            }
        };
        let now = Instant::now();
        while let Ok((ifindex, addr)) = probes.try_recv() {
            if limiter.due((ifindex, addr), now) {
                let _ = match addr {
                    IpAddr::V4(a) => nl.probe_neighbor(ifindex, a),
                    IpAddr::V6(a) => nl.probe_neighbor6(ifindex, a),
                };
            }
        }
        if changed {
            match NetView::read(links, nl) {
                Ok(v) => published.publish(v),
                Err(e) => log(format!("warning: reading routes and neighbours: {e}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_global_ipv6_address_is_preferred_for_errors() {
        let ll: Ipv6Addr = "fe80::1".parse().unwrap();
        let g: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let g2: Ipv6Addr = "2001:db8::2".parse().unwrap();
        assert_eq!(prefer_global(None, ll), Some(ll));
        assert_eq!(prefer_global(Some(ll), g), Some(g));
        assert_eq!(prefer_global(Some(g), ll), Some(g));
        assert_eq!(prefer_global(Some(g), g2), Some(g), "the first global one");
    }

    #[test]
    fn probes_are_rate_limited_capped_and_forgotten() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let hop = |i: u32| (7, IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)));
        let mut l = ProbeLimiter::new(3, s(1), s(10));
        assert!(l.due(hop(1), t0));
        assert!(
            !l.due(hop(1), t0 + Duration::from_millis(500)),
            "once a second"
        );
        assert!(l.due(hop(1), t0 + s(1)));
        assert!(l.due(hop(2), t0 + s(1)));
        assert!(l.due(hop(3), t0 + s(1)));
        // Full of recent next hops: a new one is skipped and counted, old ones still due.
        assert!(!l.due(hop(4), t0 + s(2)));
        assert_eq!((l.len(), l.skipped), (3, 1));
        assert!(l.due(hop(2), t0 + s(2)));
        // Entries not probed for `memory` are pruned; the map never grows past the cap.
        for i in 10..10_000 {
            l.due(hop(i), t0 + s(3));
            assert!(l.len() <= 3);
        }
        assert!(
            l.due(hop(4), t0 + Duration::from_millis(11_500)),
            "hops 1 and 3 (probed at 1 s) forgotten by now"
        );
        assert_eq!(l.len(), 2, "hop 2 (probed at 2 s) and hop 4");
        assert!(l.due(hop(5), t0 + s(100)));
        assert_eq!(l.len(), 1);
    }

    #[test]
    fn published_views_are_versioned() {
        let p = Published::default();
        let v0 = p.version();
        let v = NetView {
            local: vec![Ipv4Addr::new(10, 0, 0, 1)],
            ..NetView::default()
        };
        p.publish(v);
        assert_ne!(p.version(), v0);
        assert_eq!(p.current().local, vec![Ipv4Addr::new(10, 0, 0, 1)]);
    }
}
