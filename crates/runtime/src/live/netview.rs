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

/// The control thread: follows the kernel's routes and neighbours until `stop`,
/// republishing the view when they change, and probes neighbours the workers asked for
/// (at most once a second each).
pub(crate) fn follow(
    nl: &mut Netlink,
    events: &mut Netlink,
    links: &[Link; 2],
    published: &Published,
    probes: &mpsc::Receiver<(u32, IpAddr)>,
    stop: &AtomicBool,
    log: &(dyn Fn(String) + Sync),
) {
    let mut last_probe: HashMap<(u32, IpAddr), Instant> = HashMap::new();
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
        while let Ok((ifindex, addr)) = probes.try_recv() {
            let due = last_probe
                .get(&(ifindex, addr))
                .is_none_or(|t| t.elapsed() > Duration::from_secs(1));
            if due {
                last_probe.insert((ifindex, addr), Instant::now());
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
