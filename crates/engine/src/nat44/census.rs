//! NAT44's answers to the control socket (see [`crate::introspect`]): sessions, bindings,
//! pool usage and the census, read from the lock-free tables without writing to them.
//! NAT64 reuses them with its own view of the inside addresses ([`Addressing`]).

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use conntrack::session::FROM_INSIDE;
use conntrack::{Endpoint, Proto, SessionView, Timestamp};

use super::{key_ep, key_proto, Nat44Shared};
use crate::introspect::{
    BindingInfo, Census, Introspect, PoolAddrUsage, SessionFilter, SessionInfo,
};

/// Pools up to this many addresses list every address in `pool` (idle ones too); larger
/// ones list the addresses with a binding.
const LIST_EVERY_ADDR: u64 = 4096;

/// How a mode's IPv4 inside "addresses" and remotes look to an operator.
pub(crate) trait Addressing {
    /// The inside host behind IPv4 `a` (NAT44: `a`; NAT64: the host id's IPv6 host).
    fn inside(&self, a: Ipv4Addr) -> Option<IpAddr>;
    /// Remote IPv4 `a` as the inside host addresses it (NAT64: Pref64-embedded).
    fn remote(&self, a: Ipv4Addr) -> IpAddr;
    /// Whether the inside host opened session `v`.
    fn opened_inside(&self, v: &SessionView) -> bool {
        v.flags & FROM_INSIDE != 0
    }
}

/// NAT44: addresses are what they are.
pub(crate) struct Plain;

impl Addressing for Plain {
    fn inside(&self, a: Ipv4Addr) -> Option<IpAddr> {
        Some(IpAddr::V4(a))
    }
    fn remote(&self, a: Ipv4Addr) -> IpAddr {
        IpAddr::V4(a)
    }
}

fn sa(a: IpAddr, port: u16) -> SocketAddr {
    SocketAddr::new(a, port)
}

fn v4(e: Endpoint) -> SocketAddr {
    sa(IpAddr::V4(e.addr), e.port)
}

impl Nat44Shared {
    /// One session as an operator reads it (`None` if its inside host is gone).
    pub(crate) fn session_info(
        &self,
        v: &SessionView,
        age: Duration,
        now: Timestamp,
        addr: &dyn Addressing,
    ) -> Option<SessionInfo> {
        let from_inside = addr.opened_inside(v);
        let (inside, public, remote, remote_inside) = if from_inside {
            (v.initial.src, v.revised.src, v.revised.dst, v.initial.dst)
        } else {
            (v.revised.dst, v.initial.dst, v.initial.src, v.revised.src)
        };
        let last = v.last_seen();
        let proto = v.initial.proto;
        Some(SessionInfo {
            proto,
            inside: sa(addr.inside(inside.addr)?, inside.port),
            public: v4(public),
            remote: v4(remote),
            remote_inside: sa(addr.remote(remote_inside.addr), remote_inside.port),
            from_inside,
            tcp: (proto == Proto::Tcp).then(|| v.tcp.state()),
            idle: now.saturating_since(last),
            expires_in: (last + self.timeout(proto, v.tcp)).saturating_since(now),
            age,
        })
    }

    pub(crate) fn list_sessions(
        &self,
        now: Timestamp,
        filter: &SessionFilter,
        addr: &dyn Addressing,
        visit: &mut dyn FnMut(&SessionInfo) -> bool,
    ) -> usize {
        self.matching_sessions(now, filter, addr, &mut |_, s| visit(s))
    }

    /// The live sessions passing `filter`, each with its view, to `visit` until it
    /// returns `false`; how many were handed over. Reads without writing or locking.
    pub(crate) fn matching_sessions(
        &self,
        now: Timestamp,
        filter: &SessionFilter,
        addr: &dyn Addressing,
        visit: &mut dyn FnMut(&SessionView, &SessionInfo) -> bool,
    ) -> usize {
        let mut n = 0;
        self.sessions.walk_live_aged(now, |_, v, age| {
            // Cheap test first: the protocol needs no address translation.
            if filter.proto.is_some_and(|p| p != v.initial.proto) {
                return true;
            }
            match self.session_info(v, age, now, addr) {
                Some(s) if filter.matches(&s) => {
                    n += 1;
                    visit(v, &s)
                }
                _ => true,
            }
        });
        n
    }

    pub(crate) fn list_bindings(
        &self,
        addr: &dyn Addressing,
        visit: &mut dyn FnMut(&BindingInfo) -> bool,
    ) -> usize {
        let mut n = 0;
        self.bindings.walk_live(|_, e| {
            let inside = key_ep(e.key_a);
            let Some(host) = addr.inside(inside.addr) else {
                return true;
            };
            n += 1;
            visit(&BindingInfo {
                proto: key_proto(e.key_a),
                inside: sa(host, inside.port),
                public: v4(key_ep(e.key_b)),
                sessions: e.refs,
                is_static: e.is_static,
            })
        });
        n
    }

    pub(crate) fn pool_usage_of(&self) -> Vec<PoolAddrUsage> {
        // Per public address: bindings and the distinct inside hosts holding them.
        let mut seen: BTreeMap<Ipv4Addr, (u32, HashSet<Ipv4Addr>)> = BTreeMap::new();
        self.bindings.walk_live(|_, e| {
            let public = key_ep(e.key_b).addr;
            let s = seen.entry(public).or_default();
            s.0 += 1;
            s.1.insert(key_ep(e.key_a).addr);
            true
        });
        let mut addrs: BTreeMap<Ipv4Addr, usize> = BTreeMap::new();
        for (i, pool) in self.pools.iter().enumerate() {
            if pool.addr_count() <= LIST_EVERY_ADDR {
                for (first, last) in pool.addr_ranges() {
                    for a in u32::from(first)..=u32::from(last) {
                        addrs.entry(Ipv4Addr::from(a)).or_insert(i);
                    }
                }
            }
        }
        for a in seen.keys() {
            if let Some(i) = self.pools.iter().position(|p| p.contains_addr(*a)) {
                addrs.entry(*a).or_insert(i);
            }
        }
        addrs
            .into_iter()
            .map(|(a, i)| {
                let pool = &self.pools[i];
                let (bindings, hosts) = seen.get(&a).map_or((0, 0), |s| (s.0, s.1.len() as u32));
                PoolAddrUsage {
                    addr: a,
                    ports_per_proto: pool.ports_per_addr(),
                    taken: Proto::ALL.map(|p| pool.taken(a, p)),
                    bindings,
                    subscribers: hosts,
                    blocks_held: pool.held_blocks(a).len() as u32,
                }
            })
            .collect()
    }

    pub(crate) fn census_of(&self) -> Census {
        let mut c = Census {
            capacity: self.sessions.capacity() as u64,
            dead_pending: self.sessions.dead_pending() as u64,
            ..Census::default()
        };
        self.sessions.walk_live(|_, v| {
            c.count(v.initial.proto, v.tcp);
            true
        });
        c.bindings = self.bindings.walk_live(|_, _| true) as u64;
        for p in &self.pools {
            let b = p.block_stats();
            c.blocks.taken += b.taken;
            c.blocks.released += b.released;
            c.blocks.limit_refused += b.limit_refused;
            c.blocks.exhausted += b.exhausted;
        }
        c
    }
}

impl Introspect for std::sync::Arc<Nat44Shared> {
    fn sessions(
        &self,
        now: Timestamp,
        filter: &SessionFilter,
        visit: &mut dyn FnMut(&SessionInfo) -> bool,
    ) -> usize {
        self.list_sessions(now, filter, &Plain, visit)
    }
    fn clear_sessions(
        &self,
        now: Timestamp,
        filter: &SessionFilter,
        dry_run: bool,
    ) -> Result<usize, super::clear::ClearError> {
        let wait = super::clear::CLEAR_WAIT;
        self.end_sessions(now, filter, &Plain, dry_run, wait)
    }
    fn bindings(&self, visit: &mut dyn FnMut(&BindingInfo) -> bool) -> usize {
        self.list_bindings(&Plain, visit)
    }
    // The pools of the generation in force (a reload may have replaced them).
    fn pool_usage(&self) -> Vec<PoolAddrUsage> {
        self.current().pool_usage_of()
    }
    fn census(&self) -> Census {
        self.current().census_of()
    }
}
