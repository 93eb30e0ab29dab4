//! rtnetlink for the live gateway: IPv4 routes, the neighbour (ARP) table and
//! interface facts (index, MAC, MTU, addresses).
//!
//! The gateway transmits Ethernet frames itself, so it must know the next
//! hop's MAC. It follows the kernel's routes and neighbour table instead of
//! keeping its own: the kernel keeps answering and sending ARP, and
//! [`Netlink::probe_neighbor`] asks it to resolve an address on demand.
//! [`RouteTable`] and [`NeighborCache`] are the data path's immutable-ish
//! views, rebuilt or updated from dumps and [`Event`]s.
//!
//! Contract: messages from the kernel are parsed with bounds-checked code
//! only. No length read from a message is trusted: a malformed or truncated
//! message gives an [`io::Error`] of kind `InvalidData`, never a panic. This
//! module never looks at packets and never changes the kernel's routes or
//! addresses; the only write it makes is the neighbour probe.
//!
//! Layout: `parse` (message views and builder, no syscalls), `socket` (the
//! netlink socket and interface ioctls, all the `unsafe`), and here the
//! public types and the data path's views.

use std::collections::HashMap;
use std::io;
use std::net::Ipv4Addr;

mod parse;
mod socket;
#[cfg(test)]
mod tests;

pub use parse::ParseError;
pub use socket::{if_index, if_ipv4_addrs, if_mac, if_mtu, Netlink};

/// Neighbour states (`NUD_*` from `<linux/neighbour.h>`), the bits of [`Neighbor::state`].
pub mod nud {
    /// No state yet (an entry just created).
    pub const NONE: u16 = 0x00;
    /// Resolution in progress: solicitations sent, no answer yet.
    pub const INCOMPLETE: u16 = 0x01;
    /// Confirmed recently.
    pub const REACHABLE: u16 = 0x02;
    /// Valid but unconfirmed; used, and re-confirmed on use.
    pub const STALE: u16 = 0x04;
    /// Waiting a little for upper-layer confirmation before probing.
    pub const DELAY: u16 = 0x08;
    /// Being re-probed (unicast).
    pub const PROBE: u16 = 0x10;
    /// Resolution failed.
    pub const FAILED: u16 = 0x20;
    /// Needs no resolution (e.g. point-to-point devices).
    pub const NOARP: u16 = 0x40;
    /// Configured by hand; never expires.
    pub const PERMANENT: u16 = 0x80;
}

/// The kernel's main routing table (`RT_TABLE_MAIN`).
pub const RT_TABLE_MAIN: u32 = 254;
/// The kernel's local table of own and broadcast addresses (`RT_TABLE_LOCAL`).
pub const RT_TABLE_LOCAL: u32 = 255;

/// One IPv4 neighbour (ARP) entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Neighbor {
    /// Interface the entry belongs to.
    pub ifindex: u32,
    /// The neighbour's IPv4 address.
    pub addr: Ipv4Addr,
    /// Its link-layer address, when known and 6 bytes long.
    pub mac: Option<[u8; 6]>,
    /// `NUD_*` state bits, see [`nud`].
    pub state: u16,
}

impl Neighbor {
    /// True when frames may be sent to `mac` now: a valid state and a MAC.
    pub fn is_usable(&self) -> bool {
        const VALID: u16 =
            nud::REACHABLE | nud::STALE | nud::DELAY | nud::PROBE | nud::PERMANENT | nud::NOARP;
        self.state & VALID != 0 && self.mac.is_some()
    }
}

/// One IPv4 route as the kernel reports it.
///
/// Blackhole, unreachable and prohibit routes have no output interface and
/// show `ifindex == 0`; for a multipath route the first next hop is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route {
    /// Destination network (host bits zero).
    pub dst: Ipv4Addr,
    /// Destination prefix length, 0..=32.
    pub prefix_len: u8,
    /// Next-hop router, `None` for an on-link route.
    pub gateway: Option<Ipv4Addr>,
    /// Output interface, 0 when the route has none.
    pub ifindex: u32,
    /// Preferred source address for locally sent packets.
    pub prefsrc: Option<Ipv4Addr>,
    /// Routing table id (254 main, 255 local).
    pub table: u32,
}

/// A change the kernel announced on a [`Netlink::subscribe`] socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// A neighbour was created or changed state (RTM_NEWNEIGH).
    NeighborAdded(Neighbor),
    /// A neighbour was deleted (RTM_DELNEIGH).
    NeighborRemoved(Neighbor),
    /// A route was added or replaced (RTM_NEWROUTE).
    RouteAdded(Route),
    /// A route was deleted (RTM_DELROUTE).
    RouteRemoved(Route),
}

/// Whether `e` from [`Netlink::recv_events`] means events were lost
/// (ENOBUFS: the socket's buffer overran): the caller must dump again.
pub fn is_events_lost(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOBUFS)
}

/// Where a matched route sends a packet; `ifindex == 0` means "no route" (blackhole etc.).
#[derive(Debug, Clone, Copy)]
struct Hop {
    ifindex: u32,
    gateway: Option<Ipv4Addr>,
}

/// Longest-prefix match over the main table's routes, for the data path.
///
/// Immutable: rebuild it (from a fresh [`Netlink::dump_routes`]) on route events.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    /// One map per prefix length present, longest first: (mask, network -> hop).
    levels: Vec<(u32, HashMap<u32, Hop>)>,
    len: usize,
}

/// Host-order netmask for a prefix length 0..=32.
fn mask(prefix_len: u8) -> u32 {
    u32::MAX
        .checked_shl(32 - u32::from(prefix_len.min(32)))
        .unwrap_or(0)
}

impl RouteTable {
    /// Builds the table from the routes of table 254 (main).
    ///
    /// For one prefix the first route wins (the kernel dumps the lowest
    /// metric first). Routes without an interface (blackhole, unreachable,
    /// prohibit) match but give no next hop, as in the kernel.
    pub fn new(routes: &[Route]) -> Self {
        let mut by_len: Vec<HashMap<u32, Hop>> = vec![HashMap::new(); 33];
        let mut len = 0;
        for r in routes
            .iter()
            .filter(|r| r.table == RT_TABLE_MAIN && r.prefix_len <= 32)
        {
            let net = u32::from(r.dst) & mask(r.prefix_len);
            let hop = Hop {
                ifindex: r.ifindex,
                gateway: r.gateway,
            };
            if let std::collections::hash_map::Entry::Vacant(v) =
                by_len[usize::from(r.prefix_len)].entry(net)
            {
                v.insert(hop);
                len += 1;
            }
        }
        let levels = (0..=32u8)
            .rev()
            .zip(by_len.into_iter().rev())
            .filter(|(_, m)| !m.is_empty())
            .map(|(l, m)| (mask(l), m))
            .collect();
        RouteTable { levels, len }
    }

    /// The output interface and next hop (the gateway, or `dst` itself on-link) for `dst`.
    pub fn lookup(&self, dst: Ipv4Addr) -> Option<(u32, Ipv4Addr)> {
        let d = u32::from(dst);
        let hop = self
            .levels
            .iter()
            .find_map(|(m, routes)| routes.get(&(d & m)))?;
        (hop.ifindex != 0).then(|| (hop.ifindex, hop.gateway.unwrap_or(dst)))
    }

    /// Number of distinct prefixes in the table.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the table has no route at all.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The usable neighbour entries, as the data path sees them.
#[derive(Debug, Clone, Default)]
pub struct NeighborCache {
    macs: HashMap<(u32, Ipv4Addr), [u8; 6]>,
}

impl NeighborCache {
    /// Builds the cache from a dump, keeping only usable entries.
    pub fn from_dump(n: &[Neighbor]) -> Self {
        let mut cache = NeighborCache::default();
        for nb in n {
            cache.update(nb);
        }
        cache
    }

    fn update(&mut self, n: &Neighbor) {
        match n.mac.filter(|_| n.is_usable()) {
            Some(mac) => self.macs.insert((n.ifindex, n.addr), mac),
            None => self.macs.remove(&(n.ifindex, n.addr)),
        };
    }

    /// Applies one event: an entry that became unusable (FAILED, INCOMPLETE) or was removed is dropped.
    pub fn apply(&mut self, e: &Event) {
        match e {
            Event::NeighborAdded(n) => self.update(n),
            Event::NeighborRemoved(n) => {
                self.macs.remove(&(n.ifindex, n.addr));
            }
            Event::RouteAdded(_) | Event::RouteRemoved(_) => {}
        }
    }

    /// The MAC of `addr` on `ifindex`, if usable.
    pub fn get(&self, ifindex: u32, addr: Ipv4Addr) -> Option<[u8; 6]> {
        self.macs.get(&(ifindex, addr)).copied()
    }

    /// Number of usable entries.
    pub fn len(&self) -> usize {
        self.macs.len()
    }

    /// True when no entry is usable.
    pub fn is_empty(&self) -> bool {
        self.macs.is_empty()
    }
}
