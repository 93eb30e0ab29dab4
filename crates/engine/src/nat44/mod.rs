//! NAT44 (NAPT) in the design of the Quick NAT paper, sans-I/O.
//!
//! A packet is looked up by its tuple in the session table. A hit on either record of a
//! session rewrites the packet to that record's revised tuple and refreshes the record's
//! timestamp. A miss from the inside finds the rule (hashed prefix search), the binding
//! (endpoint-independent mapping, paired pooling) and installs the original and reply
//! records together. A miss from the outside is let in only through an existing binding
//! (subject to the filtering behaviour), a static 1:1 mapping or a port forward.
//!
//! Never reads a clock, never does I/O: time comes in as a [`Timestamp`].

mod parse;
pub mod rules;
#[cfg(test)]
mod tests;

use std::hash::BuildHasherDefault;
use std::net::Ipv4Addr;
use std::time::Duration;

use conntrack::tcp::TcpPhase;
use conntrack::{
    Binding, BindingId, BindingTable, Endpoint, PoolError, PortPool, Proto, Record, RecordRef,
    Session, SessionTable, Side, TcpState, Timestamp, Tuple,
};
use hashbrown::{HashMap, HashSet};
use rustc_hash::FxHasher;
use xlat::nat44::{rewrite, rewrite_icmp_error, IcmpErrorRewrite, Rewrite};

use crate::config::{ConfigError, Filtering, Nat44Config};
use crate::stats::Counters;
use crate::verdict::{Direction, DropReason, Verdict};
use parse::{parse, Flow, IcmpError, Parsed};
use rules::RuleTable;

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;
type FxSet<K> = HashSet<K, BuildHasherDefault<FxHasher>>;

/// How often the reaper walks the table (sessions may outlive their timeout by this much
/// when no packet touches them; a packet that finds an expired session expires it first).
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// The NAT44 engine: rules, pools, bindings, sessions and counters.
#[derive(Debug)]
pub struct Nat44 {
    cfg: Nat44Config,
    rules: RuleTable,
    pools: Vec<PortPool>,
    static_by_inside: FxMap<Ipv4Addr, Ipv4Addr>,
    static_by_public: FxMap<Ipv4Addr, Ipv4Addr>,
    /// Every address the NAT answers for from outside (pools, statics, forwards).
    public_hosts: FxSet<Ipv4Addr>,
    sessions: SessionTable,
    bindings: BindingTable,
    /// Address-dependent filtering: (binding, remote address) -> sessions.
    adf: FxMap<(BindingId, Ipv4Addr), u32>,
    counters: Counters,
    next_sweep: Option<Timestamp>,
}

impl Nat44 {
    /// Builds an engine; the configuration is validated first.
    pub fn new(cfg: Nat44Config) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let rules = RuleTable::new(cfg.rules.iter().map(|r| &r.inside));
        let mut public_hosts = FxSet::default();
        let pools: Vec<PortPool> = cfg
            .rules
            .iter()
            .map(|r| {
                let mut addrs: Vec<Ipv4Addr> = r
                    .pool
                    .iter()
                    .flat_map(|p| (0..p.size()).map(|i| p.nth(i)))
                    .collect();
                addrs.sort_unstable();
                addrs.dedup();
                public_hosts.extend(addrs.iter().copied());
                PortPool::new(addrs, r.ports.first, r.ports.last, cfg.port_reuse_hold)
            })
            .collect();
        let mut nat = Nat44 {
            rules,
            pools,
            static_by_inside: cfg
                .static_nat
                .iter()
                .map(|s| (s.inside, s.public))
                .collect(),
            static_by_public: cfg
                .static_nat
                .iter()
                .map(|s| (s.public, s.inside))
                .collect(),
            public_hosts,
            sessions: SessionTable::with_capacity(cfg.max_sessions.min(1 << 16)),
            bindings: BindingTable::default(),
            adf: FxMap::default(),
            counters: Counters::default(),
            next_sweep: None,
            cfg,
        };
        nat.public_hosts
            .extend(nat.static_by_public.keys().copied());
        for f in nat.cfg.port_forwards.clone() {
            let proto = match f.protocol {
                crate::config::L4Proto::Tcp => Proto::Tcp,
                crate::config::L4Proto::Udp => Proto::Udp,
            };
            let public = Endpoint::new(*f.public.ip(), f.public.port());
            for pool in &mut nat.pools {
                pool.reserve(proto, public);
            }
            nat.public_hosts.insert(public.addr);
            // Validation refused duplicates, so this cannot collide.
            let _ = nat.bindings.insert(Binding {
                proto,
                inside: Endpoint::new(*f.inside.ip(), f.inside.port()),
                public,
                sessions: 0,
                is_static: true,
                rule: None,
            });
        }
        Ok(nat)
    }

    /// The configuration in force.
    pub fn config(&self) -> &Nat44Config {
        &self.cfg
    }

    /// Counters since start.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Live sessions.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// Live bindings (including port forwards).
    pub fn binding_count(&self) -> usize {
        self.bindings.len()
    }

    /// Iterates over live sessions (for inspection and tests).
    pub fn sessions(&self) -> impl Iterator<Item = &Session> {
        self.sessions.iter().map(|(_, s)| s)
    }

    /// Whether `addr` is an inside address by the configuration (covered by a rule, a
    /// static mapping or a forward's target): the side a packet from it comes from.
    pub fn is_inside(&self, addr: Ipv4Addr) -> bool {
        self.rules.lookup(addr).is_some()
            || self.static_by_inside.contains_key(&addr)
            || self
                .cfg
                .port_forwards
                .iter()
                .any(|f| *f.inside.ip() == addr)
    }

    /// Whether `addr` is one of the NAT's public addresses.
    pub fn is_public(&self, addr: Ipv4Addr) -> bool {
        self.public_hosts.contains(&addr)
    }

    /// Translates one IPv4 packet in place. `pkt` starts at the IPv4 header; bytes after
    /// the IPv4 total length (link padding) are left alone.
    pub fn process(&mut self, now: Timestamp, dir: Direction, pkt: &mut [u8]) -> Verdict {
        match self.process_inner(now, dir, pkt) {
            Ok(()) => {
                self.counters.forwarded += 1;
                Verdict::Forward
            }
            Err(r) => {
                self.counters.drop(r);
                Verdict::Drop(r)
            }
        }
    }

    fn process_inner(
        &mut self,
        now: Timestamp,
        dir: Direction,
        pkt: &mut [u8],
    ) -> Result<(), DropReason> {
        let parsed = parse(pkt)?;
        let ttl = match parsed {
            Parsed::Flow(f) => f.ttl,
            Parsed::IcmpError(e) => e.ttl,
        };
        if self.cfg.decrement_ttl && ttl <= 1 {
            return Err(DropReason::TtlExpired);
        }
        match parsed {
            Parsed::Flow(f) => self.flow(now, dir, f, pkt),
            Parsed::IcmpError(e) => self.icmp_error(now, dir, e, pkt),
        }
    }

    fn flow(
        &mut self,
        now: Timestamp,
        dir: Direction,
        f: Flow,
        pkt: &mut [u8],
    ) -> Result<(), DropReason> {
        let hit = match self.sessions.lookup(&f.tuple) {
            Some(r) if self.expired(r, now) => {
                self.expire(r.session, now);
                None
            }
            other => other,
        };
        let r = match hit {
            Some(r) => r,
            None => match dir {
                Direction::Outbound => self.new_outbound(now, &f.tuple)?,
                Direction::Inbound => self.new_inbound(now, &f.tuple)?,
            },
        };
        let s = self
            .sessions
            .get_mut(r.session)
            .ok_or(DropReason::NoMapping)?;
        if side_direction(s, r.side) != dir {
            return Err(DropReason::WrongDirection);
        }
        if f.kind == xlat::nat44::L4Kind::Tcp {
            s.tcp.observe(r.side, f.tcp_flags);
        }
        if s.hairpin {
            self.counters.hairpinned += 1;
        }
        let rec = s.record_mut(r.side);
        rec.last_seen = now;
        let to = rewrite_of(&rec.revised);
        let end = f.total_len.min(pkt.len());
        rewrite(
            &mut pkt[..end],
            f.l4_off,
            f.kind,
            &to,
            self.cfg.decrement_ttl,
        );
        Ok(())
    }

    fn icmp_error(
        &mut self,
        now: Timestamp,
        dir: Direction,
        e: IcmpError,
        pkt: &mut [u8],
    ) -> Result<(), DropReason> {
        // The quote is a packet this NAT forwarded; its reverse is the tuple of the record
        // the error travels along (RFC 5508 §7).
        let r = self
            .sessions
            .lookup(&e.quoted.reversed())
            .filter(|r| !self.expired(*r, now))
            .ok_or(DropReason::IcmpErrorNoSession)?;
        let s = self
            .sessions
            .get(r.session)
            .ok_or(DropReason::IcmpErrorNoSession)?;
        if side_direction(s, r.side) != dir {
            return Err(DropReason::WrongDirection);
        }
        let rec = s.record(r.side);
        if e.outer_dst != rec.initial.dst.addr {
            return Err(DropReason::IcmpErrorNoSession);
        }
        let outer_src = if e.outer_src == rec.initial.src.addr {
            rec.revised.src.addr
        } else {
            e.outer_src
        };
        let quote_to = rewrite_of(&rec.revised.reversed());
        let end = e.total_len.min(pkt.len());
        // RFC 5508 REQ-?: an ICMP error does not refresh the session (no timestamp update).
        let how = IcmpErrorRewrite {
            icmp_off: e.icmp_off,
            outer_src,
            outer_dst: rec.revised.dst.addr,
            quote_ihl: e.quote_ihl,
            quote_kind: e.quote_kind,
            quote_to,
        };
        if !rewrite_icmp_error(&mut pkt[..end], &how, self.cfg.decrement_ttl) {
            return Err(DropReason::IcmpErrorMalformed);
        }
        self.counters.icmp_errors_translated += 1;
        Ok(())
    }

    /// A new flow from the inside: find or make the binding, then install both records.
    fn new_outbound(&mut self, now: Timestamp, t: &Tuple) -> Result<RecordRef, DropReason> {
        if self.sessions.len() >= self.cfg.max_sessions {
            return Err(DropReason::TableFull);
        }
        let hairpin = self.is_public(t.dst.addr);
        // Resolve the destination first so a refused hairpin allocates nothing.
        let dst = if hairpin {
            if !self.cfg.hairpinning {
                return Err(DropReason::HairpinDisabled);
            }
            let (target, _) = self
                .inbound_target(t.proto, t.dst)
                .ok_or(DropReason::NoMapping)?;
            target
        } else {
            t.dst
        };
        let bid = self.outbound_binding(t.proto, t.src)?;
        let public = self
            .bindings
            .get(bid)
            .map(|b| b.public)
            .ok_or(DropReason::NoMapping)?;
        if hairpin {
            if let Some(b) = self.bindings.find_public(t.proto, t.dst) {
                if !self.filter_allows(b, public) {
                    self.release_if_unused(bid, now);
                    return Err(DropReason::Filtered);
                }
            }
        }
        let revised = Tuple::new(t.proto, public, dst);
        self.install(now, *t, revised, bid, true, hairpin)
    }

    /// A new flow from the outside to a public endpoint.
    fn new_inbound(&mut self, now: Timestamp, t: &Tuple) -> Result<RecordRef, DropReason> {
        if self.sessions.len() >= self.cfg.max_sessions {
            return Err(DropReason::TableFull);
        }
        let (inside, existing) = self
            .inbound_target(t.proto, t.dst)
            .ok_or(DropReason::NoMapping)?;
        let bid = match existing {
            Some(b) => {
                if !self.filter_allows(b, t.src) {
                    return Err(DropReason::Filtered);
                }
                b
            }
            // Static 1:1: the binding is made on demand, port kept.
            None => self
                .bindings
                .insert(Binding {
                    proto: t.proto,
                    inside,
                    public: t.dst,
                    sessions: 0,
                    is_static: false,
                    rule: None,
                })
                .map_err(|_| DropReason::NoMapping)?,
        };
        let revised = Tuple::new(t.proto, t.src, inside);
        self.install(now, *t, revised, bid, false, false)
    }

    /// Where a packet to public endpoint `dst` goes: the inside endpoint, and the binding
    /// if one exists (a static 1:1 address may not have one yet).
    fn inbound_target(&self, proto: Proto, dst: Endpoint) -> Option<(Endpoint, Option<BindingId>)> {
        if let Some(b) = self.bindings.find_public(proto, dst) {
            return self.bindings.get(b).map(|x| (x.inside, Some(b)));
        }
        self.static_by_public
            .get(&dst.addr)
            .map(|inside| (Endpoint::new(*inside, dst.port), None))
    }

    /// The binding an inside endpoint uses: existing, static 1:1, or newly allocated from
    /// its rule's pool (endpoint-independent mapping, paired pooling).
    fn outbound_binding(
        &mut self,
        proto: Proto,
        inside: Endpoint,
    ) -> Result<BindingId, DropReason> {
        if let Some(b) = self.bindings.find_inside(proto, inside) {
            return Ok(b);
        }
        let (public, rule) = if let Some(p) = self.static_by_inside.get(&inside.addr) {
            (Endpoint::new(*p, inside.port), None)
        } else {
            let rule = self.rules.lookup(inside.addr).ok_or(DropReason::NoRule)?;
            let pool = &mut self.pools[rule as usize];
            let e = pool
                .allocate(proto, inside, self.cfg.port_preservation)
                .map_err(|e| match e {
                    PoolError::PairedAddressFull | PoolError::Exhausted => {
                        DropReason::PoolExhausted
                    }
                })?;
            self.counters.bindings_created += 1;
            (e, Some(rule))
        };
        self.bindings
            .insert(Binding {
                proto,
                inside,
                public,
                sessions: 0,
                is_static: false,
                rule,
            })
            .map_err(|_| DropReason::PoolExhausted)
    }

    fn filter_allows(&self, b: BindingId, remote: Endpoint) -> bool {
        match self.cfg.filtering {
            Filtering::EndpointIndependent => true,
            Filtering::AddressDependent => self.adf.contains_key(&(b, remote.addr)),
            // An allowed packet would have matched its session's reply record directly.
            Filtering::AddressAndPortDependent => self.bindings.get(b).is_some_and(|x| x.is_static),
        }
    }

    fn install(
        &mut self,
        now: Timestamp,
        initial: Tuple,
        revised: Tuple,
        bid: BindingId,
        from_inside: bool,
        hairpin: bool,
    ) -> Result<RecordRef, DropReason> {
        let session = Session {
            original: Record {
                initial,
                revised,
                last_seen: now,
            },
            reply: Record {
                initial: revised.reversed(),
                revised: initial.reversed(),
                last_seen: now,
            },
            binding: bid,
            tcp: TcpState::default(),
            original_from_inside: from_inside,
            hairpin,
        };
        let id = match self.sessions.insert(session) {
            Ok(id) => id,
            Err(_) => {
                self.release_if_unused(bid, now);
                return Err(DropReason::NoMapping);
            }
        };
        if let Some(b) = self.bindings.get_mut(bid) {
            b.sessions += 1;
        }
        if self.cfg.filtering == Filtering::AddressDependent {
            // The remote end of the session, as the binding's owner sees it.
            let remote = if from_inside {
                revised.dst.addr
            } else {
                initial.src.addr
            };
            *self.adf.entry((bid, remote)).or_insert(0) += 1;
        }
        self.counters.sessions_created += 1;
        self.next_sweep.get_or_insert(now + SWEEP_INTERVAL);
        Ok(RecordRef {
            session: id,
            side: Side::Original,
        })
    }

    fn timeout(&self, s: &Session) -> Duration {
        timeout_of(&self.cfg.timeouts, s)
    }

    fn expired(&self, r: RecordRef, now: Timestamp) -> bool {
        self.sessions
            .get(r.session)
            .is_some_and(|s| s.last_seen() + self.timeout(s) <= now)
    }

    fn expire(&mut self, id: conntrack::SessionId, now: Timestamp) {
        if let Some(s) = self.sessions.remove(id) {
            self.retire(s, now);
        }
    }

    /// Undoes what a session held: its binding reference, its filtering entry, and the
    /// binding itself (and its port, after the hold) when it was the last session.
    fn retire(&mut self, s: Session, now: Timestamp) {
        self.counters.sessions_expired += 1;
        if self.cfg.filtering == Filtering::AddressDependent {
            let remote = if s.original_from_inside {
                s.original.revised.dst.addr
            } else {
                s.original.initial.src.addr
            };
            if let Some(n) = self.adf.get_mut(&(s.binding, remote)) {
                *n -= 1;
                if *n == 0 {
                    self.adf.remove(&(s.binding, remote));
                }
            }
        }
        if let Some(b) = self.bindings.get_mut(s.binding) {
            b.sessions = b.sessions.saturating_sub(1);
        }
        self.release_if_unused(s.binding, now);
    }

    fn release_if_unused(&mut self, bid: BindingId, now: Timestamp) {
        let Some(b) = self.bindings.get(bid).copied() else {
            return;
        };
        if b.sessions > 0 || b.is_static {
            return;
        }
        self.bindings.remove(bid);
        if let Some(rule) = b.rule {
            if let Some(pool) = self.pools.get_mut(rule as usize) {
                pool.release(b.proto, b.public, b.inside.addr, now);
            }
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next run, if anything can expire.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let pools = self.pools.iter().filter_map(|p| p.poll_timeout()).min();
        match (self.next_sweep.filter(|_| !self.sessions.is_empty()), pools) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Expires idle sessions (returning bindings and ports to their pools) and frees ports
    /// whose reuse hold has passed. The reaper's work; a dedicated thread can drive it.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        if self.next_sweep.is_some_and(|t| t <= now) {
            let mut dead = Vec::new();
            let timeouts = self.cfg.timeouts;
            self.sessions.reap(
                |s| s.last_seen() + timeout_of(&timeouts, s) <= now,
                |s| dead.push(s),
            );
            for s in dead {
                self.retire(s, now);
            }
            self.next_sweep = Some(now + SWEEP_INTERVAL);
        }
        for p in &mut self.pools {
            p.handle_timeout(now);
        }
    }
}

fn timeout_of(t: &crate::config::Timeouts, s: &Session) -> Duration {
    match s.original.initial.proto {
        Proto::Udp => t.udp,
        Proto::Icmp => t.icmp,
        Proto::Tcp => match s.tcp.phase() {
            TcpPhase::Opening | TcpPhase::Closing => t.tcp_transitory,
            TcpPhase::Established => t.tcp_established,
            TcpPhase::Closed => t.tcp_closed,
        },
    }
}

/// The direction packets matching `side` of `s` legitimately travel.
#[inline]
fn side_direction(s: &Session, side: Side) -> Direction {
    let orig = if s.original_from_inside {
        Direction::Outbound
    } else {
        Direction::Inbound
    };
    match side {
        Side::Original => orig,
        Side::Reply if s.hairpin => Direction::Outbound,
        Side::Reply => match orig {
            Direction::Outbound => Direction::Inbound,
            Direction::Inbound => Direction::Outbound,
        },
    }
}

#[inline]
fn rewrite_of(t: &Tuple) -> Rewrite {
    Rewrite {
        src: t.src.addr,
        sport: t.src.port,
        dst: t.dst.addr,
        dport: t.dst.port,
    }
}
