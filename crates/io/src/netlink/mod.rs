//! rtnetlink for the live gateway: IPv4 and IPv6 routes, the neighbour (ARP
//! and ND) tables and interface facts (index, MAC, MTU, addresses).
//!
//! The gateway transmits Ethernet frames itself, so it must know the next
//! hop's MAC. It follows the kernel's routes and neighbour table instead of
//! keeping its own: the kernel keeps answering and sending ARP and neighbour
//! solicitations, and [`Netlink::probe_neighbor`] / [`Netlink::probe_neighbor6`]
//! ask it to resolve an address on demand.
//! [`RouteTable`] and [`NeighborCache`] are the data path's immutable-ish
//! views, rebuilt or updated from dumps and [`Event`]s.
//!
//! Both families share one code path: [`Route`] and [`Neighbor`] are generic
//! over the address type (IPv4 by default; [`Route6`], [`Neighbor6`] for
//! IPv6), and the parser and prefix match are written once over `Family`.
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
use std::fmt::Debug;
use std::hash::Hash;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::BitAnd;

mod parse;
// Announced routes.
mod devroute;
pub use devroute::{DevRoute, PROTO_QUICKNAT, TABLE_ANNOUNCE};
mod socket;
mod xdp;
pub use xdp::XdpAttachMode;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_ipv6;

pub use parse::ParseError;
pub use socket::{if_index, if_ipv4_addrs, if_ipv6_addrs, if_mac, if_mtu, Netlink};

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

/// An address family this module speaks: implemented by [`Ipv4Addr`] and [`Ipv6Addr`].
trait Family: Copy + Eq + Hash + Debug + Into<IpAddr> {
    /// AF_INET / AF_INET6 as the one-byte family field of ndmsg/rtmsg/ifaddrmsg.
    const AF: u8;
    /// Address length in bits, the longest valid prefix.
    const BITS: u8;
    /// The all-zeros address (the network of a default route).
    const UNSPECIFIED: Self;
    /// The address as a host-order integer, for prefix matching.
    type Bits: Copy + Eq + Hash + Debug + BitAnd<Output = Self::Bits>;
    /// The address as [`Family::Bits`].
    fn bits(self) -> Self::Bits;
    /// The netmask of a prefix length 0..=BITS (longer lengths clamp to BITS).
    fn mask(prefix_len: u8) -> Self::Bits;
    /// The address from exactly BITS/8 network-order bytes.
    fn from_octets(b: &[u8]) -> Option<Self>;
}

impl Family for Ipv4Addr {
    const AF: u8 = parse::sys::AF_INET;
    const BITS: u8 = 32;
    const UNSPECIFIED: Self = Ipv4Addr::UNSPECIFIED;
    type Bits = u32;
    fn bits(self) -> u32 {
        u32::from(self)
    }
    fn mask(prefix_len: u8) -> u32 {
        mask(prefix_len)
    }
    fn from_octets(b: &[u8]) -> Option<Self> {
        <[u8; 4]>::try_from(b).ok().map(Ipv4Addr::from)
    }
}

impl Family for Ipv6Addr {
    const AF: u8 = parse::sys::AF_INET6;
    const BITS: u8 = 128;
    const UNSPECIFIED: Self = Ipv6Addr::UNSPECIFIED;
    type Bits = u128;
    fn bits(self) -> u128 {
        u128::from(self)
    }
    fn mask(prefix_len: u8) -> u128 {
        u128::MAX
            .checked_shl(128 - u32::from(prefix_len.min(128)))
            .unwrap_or(0)
    }
    fn from_octets(b: &[u8]) -> Option<Self> {
        <[u8; 16]>::try_from(b).ok().map(Ipv6Addr::from)
    }
}

/// One neighbour entry: ARP for `Neighbor` (IPv4), ND for [`Neighbor6`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Neighbor<A = Ipv4Addr> {
    /// Interface the entry belongs to.
    pub ifindex: u32,
    /// The neighbour's IP address.
    pub addr: A,
    /// Its link-layer address, when known and 6 bytes long.
    pub mac: Option<[u8; 6]>,
    /// `NUD_*` state bits, see [`nud`].
    pub state: u16,
}

/// One IPv6 neighbour (ND) entry.
pub type Neighbor6 = Neighbor<Ipv6Addr>;

impl<A> Neighbor<A> {
    /// True when frames may be sent to `mac` now: a valid state and a MAC.
    pub fn is_usable(&self) -> bool {
        const VALID: u16 =
            nud::REACHABLE | nud::STALE | nud::DELAY | nud::PROBE | nud::PERMANENT | nud::NOARP;
        self.state & VALID != 0 && self.mac.is_some()
    }
}

/// One route as the kernel reports it: IPv4 for `Route`, IPv6 for [`Route6`].
///
/// Blackhole, unreachable and prohibit routes have no output interface and
/// show `ifindex == 0` (IPv6 reports them on `lo`; the parser clears that);
/// for a multipath route the first next hop is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route<A = Ipv4Addr> {
    /// Destination network (host bits zero).
    pub dst: A,
    /// Destination prefix length, 0..=32 (IPv4) or 0..=128 (IPv6).
    pub prefix_len: u8,
    /// Next-hop router, `None` for an on-link route.
    pub gateway: Option<A>,
    /// Output interface, 0 when the route has none.
    pub ifindex: u32,
    /// Preferred source address for locally sent packets.
    pub prefsrc: Option<A>,
    /// Routing table id (254 main, 255 local).
    pub table: u32,
}

/// One IPv6 route.
pub type Route6 = Route<Ipv6Addr>;

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
    /// An IPv6 neighbour was created or changed state (RTM_NEWNEIGH).
    Neighbor6Added(Neighbor6),
    /// An IPv6 neighbour was deleted (RTM_DELNEIGH).
    Neighbor6Removed(Neighbor6),
    /// An IPv6 route was added or replaced (RTM_NEWROUTE).
    Route6Added(Route6),
    /// An IPv6 route was deleted (RTM_DELROUTE).
    Route6Removed(Route6),
}

/// Whether `e` from [`Netlink::recv_events`] means events were lost
/// (ENOBUFS: the socket's buffer overran): the caller must dump again.
pub fn is_events_lost(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOBUFS)
}

/// Where a matched route sends a packet; `ifindex == 0` means "no route" (blackhole etc.).
#[derive(Debug, Clone, Copy)]
struct Hop<A> {
    ifindex: u32,
    gateway: Option<A>,
}

/// Host-order netmask for an IPv4 prefix length 0..=32.
fn mask(prefix_len: u8) -> u32 {
    u32::MAX
        .checked_shl(32 - u32::from(prefix_len.min(32)))
        .unwrap_or(0)
}

/// The routes of one prefix length: network -> hop.
type Level<A> = HashMap<<A as Family>::Bits, Hop<A>>;

/// Longest-prefix match over one family's main-table routes.
#[derive(Debug, Clone)]
struct Lpm<A: Family> {
    /// One map per prefix length present, longest first: (mask, routes).
    levels: Vec<(A::Bits, Level<A>)>,
    len: usize,
}

impl<A: Family> Default for Lpm<A> {
    fn default() -> Self {
        Lpm {
            levels: Vec::new(),
            len: 0,
        }
    }
}

impl<A: Family> Lpm<A> {
    fn new(routes: &[Route<A>]) -> Self {
        let mut by_len: Vec<Level<A>> = vec![HashMap::new(); usize::from(A::BITS) + 1];
        let mut len = 0;
        for r in routes
            .iter()
            .filter(|r| r.table == RT_TABLE_MAIN && r.prefix_len <= A::BITS)
        {
            let net = r.dst.bits() & A::mask(r.prefix_len);
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
        let levels = (0..=A::BITS)
            .rev()
            .zip(by_len.into_iter().rev())
            .filter(|(_, m)| !m.is_empty())
            .map(|(l, m)| (A::mask(l), m))
            .collect();
        Lpm { levels, len }
    }

    fn lookup(&self, dst: A) -> Option<(u32, A)> {
        let d = dst.bits();
        let hop = self
            .levels
            .iter()
            .find_map(|(m, routes)| routes.get(&(d & *m)))?;
        (hop.ifindex != 0).then(|| (hop.ifindex, hop.gateway.unwrap_or(dst)))
    }
}

/// Longest-prefix match over the main table's routes, both families, for the data path.
///
/// Immutable: rebuild it (from a fresh [`Netlink::dump_routes`] and
/// [`Netlink::dump_routes6`]) on route events.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    v4: Lpm<Ipv4Addr>,
    v6: Lpm<Ipv6Addr>,
}

impl RouteTable {
    /// Builds the table from the IPv4 routes of table 254 (main); it has no IPv6 routes
    /// until [`RouteTable::with_ipv6`].
    ///
    /// For one prefix the first route wins (the kernel dumps the lowest
    /// metric first). Routes without an interface (blackhole, unreachable,
    /// prohibit) match but give no next hop, as in the kernel.
    pub fn new(routes: &[Route]) -> Self {
        RouteTable {
            v4: Lpm::new(routes),
            v6: Lpm::default(),
        }
    }

    /// The table with its IPv6 routes replaced by those of `routes` in table 254, by
    /// the same rules as [`RouteTable::new`].
    pub fn with_ipv6(self, routes: &[Route6]) -> Self {
        RouteTable {
            v6: Lpm::new(routes),
            ..self
        }
    }

    /// The output interface and next hop (the gateway, or `dst` itself on-link) for `dst`.
    pub fn lookup(&self, dst: Ipv4Addr) -> Option<(u32, Ipv4Addr)> {
        self.v4.lookup(dst)
    }

    /// The output interface and next hop (the gateway, or `dst` itself on-link) for IPv6 `dst`.
    pub fn lookup6(&self, dst: Ipv6Addr) -> Option<(u32, Ipv6Addr)> {
        self.v6.lookup(dst)
    }

    /// Number of distinct prefixes in the table, both families.
    pub fn len(&self) -> usize {
        self.v4.len + self.v6.len
    }

    /// True when the table has no route at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The usable neighbour entries of both families, as the data path sees them.
#[derive(Debug, Clone, Default)]
pub struct NeighborCache {
    macs: HashMap<(u32, IpAddr), [u8; 6]>,
}

impl NeighborCache {
    /// Builds the cache from an IPv4 dump, keeping only usable entries.
    pub fn from_dump(n: &[Neighbor]) -> Self {
        let mut cache = NeighborCache::default();
        n.iter().for_each(|nb| cache.update(nb));
        cache
    }

    /// The cache with the usable entries of an IPv6 dump added.
    pub fn with_ipv6(mut self, n: &[Neighbor6]) -> Self {
        n.iter().for_each(|nb| self.update(nb));
        self
    }

    fn update<A: Family>(&mut self, n: &Neighbor<A>) {
        let key = (n.ifindex, n.addr.into());
        match n.mac.filter(|_| n.is_usable()) {
            Some(mac) => self.macs.insert(key, mac),
            None => self.macs.remove(&key),
        };
    }

    fn remove<A: Family>(&mut self, n: &Neighbor<A>) {
        self.macs.remove(&(n.ifindex, n.addr.into()));
    }

    /// Applies one event: an entry that became unusable (FAILED, INCOMPLETE) or was removed is dropped.
    pub fn apply(&mut self, e: &Event) {
        match e {
            Event::NeighborAdded(n) => self.update(n),
            Event::NeighborRemoved(n) => self.remove(n),
            Event::Neighbor6Added(n) => self.update(n),
            Event::Neighbor6Removed(n) => self.remove(n),
            Event::RouteAdded(_)
            | Event::RouteRemoved(_)
            | Event::Route6Added(_)
            | Event::Route6Removed(_) => {}
        }
    }

    /// The MAC of `addr` on `ifindex`, if usable.
    pub fn get(&self, ifindex: u32, addr: Ipv4Addr) -> Option<[u8; 6]> {
        self.macs.get(&(ifindex, IpAddr::V4(addr))).copied()
    }

    /// The MAC of IPv6 `addr` on `ifindex`, if usable.
    pub fn get6(&self, ifindex: u32, addr: Ipv6Addr) -> Option<[u8; 6]> {
        self.macs.get(&(ifindex, IpAddr::V6(addr))).copied()
    }

    /// Number of usable entries, both families.
    pub fn len(&self) -> usize {
        self.macs.len()
    }

    /// True when no entry is usable.
    pub fn is_empty(&self) -> bool {
        self.macs.is_empty()
    }
}

// -- The parser's whole surface over one datagram, for the fuzzers ----------------------

/// What one message of a datagram from the kernel was read as by [`parse_datagram`].
#[derive(Debug)]
pub enum Parsed {
    /// An event (an RTM_NEW*/RTM_DEL* route or neighbour message).
    Event(Event),
    /// The body read as an IPv4 route of a dump answer.
    Route(Route),
    /// As an IPv6 route.
    Route6(Route6),
    /// As an IPv4 neighbour.
    Neighbor(Neighbor),
    /// As an IPv6 neighbour.
    Neighbor6(Neighbor6),
    /// As an interface's IPv4 address: `(ifindex, address, prefix length)`.
    Addr(u32, Ipv4Addr, u8),
    /// As an interface's IPv6 address.
    Addr6(u32, Ipv6Addr, u8),
    /// An NLMSG_ERROR or NLMSG_DONE carrying an error.
    Error(io::Error),
    /// A parser refused the message.
    Malformed(ParseError),
}

/// Reads the datagram `buf` with every parser of this module, as [`Netlink`] reads what
/// the kernel sends: each message as an event, its body as the route, neighbour and
/// interface address a dump answer carries (both families), and as an error or done
/// message. For the fuzzers (`fuzz/`) and tests; the same bounds-checked code as the
/// live path, so it never panics on any bytes.
pub fn parse_datagram(buf: &[u8]) -> Vec<Parsed> {
    let mut out = Vec::new();
    for m in parse::Messages::new(buf) {
        let m = match m {
            Ok(m) => m,
            Err(e) => {
                out.push(Parsed::Malformed(e));
                break;
            }
        };
        let b = m.body;
        match parse::parse_event(&m) {
            Ok(Some(e)) => out.push(Parsed::Event(e)),
            Ok(None) => {}
            Err(e) => out.push(Parsed::Malformed(e)),
        }
        let mut push = |r: Result<Option<Parsed>, ParseError>| match r {
            Ok(Some(p)) => out.push(p),
            Ok(None) => {}
            Err(e) => out.push(Parsed::Malformed(e)),
        };
        push(parse::parse_route::<Ipv4Addr>(b).map(|r| r.map(Parsed::Route)));
        push(parse::parse_route::<Ipv6Addr>(b).map(|r| r.map(Parsed::Route6)));
        push(parse::parse_neighbor::<Ipv4Addr>(b).map(|r| r.map(Parsed::Neighbor)));
        push(parse::parse_neighbor::<Ipv6Addr>(b).map(|r| r.map(Parsed::Neighbor6)));
        push(parse::parse_ifaddr::<Ipv4Addr>(b).map(|r| r.map(|(i, a, l)| Parsed::Addr(i, a, l))));
        push(parse::parse_ifaddr::<Ipv6Addr>(b).map(|r| r.map(|(i, a, l)| Parsed::Addr6(i, a, l))));
        let errors = [
            (parse::sys::NLMSG_ERROR, parse::check_error(b)),
            (parse::sys::NLMSG_DONE, parse::check_done(b)),
        ];
        for (ty, r) in errors {
            if let (true, Err(e)) = (m.ty == ty, r) {
                out.push(Parsed::Error(e));
            }
        }
    }
    out
}
