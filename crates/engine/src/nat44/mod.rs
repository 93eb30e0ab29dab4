//! NAT44 (NAPT) in the design of the Quick NAT paper, sans-I/O, on many cores.
//!
//! A packet is looked up by its tuple in the session table. A hit on either record of a
//! session rewrites the packet to that record's revised tuple and refreshes the record's
//! timestamp. A miss from the inside finds the rule (hashed prefix search), the binding
//! (endpoint-independent mapping, paired pooling) and installs the original and reply
//! records together. A miss from the outside is let in only through an existing binding
//! (subject to the filtering behaviour), a static 1:1 mapping or a port forward.
//!
//! The pieces:
//! - [`Nat44Shared`]: configuration, rules, pools and the tables, shared by all threads.
//! - [`Nat44Worker`]: one per data-plane thread; `process(now, dir, packet)`. Lock-free.
//! - [`Nat44Reaper`]: one per engine; expires sessions, returns ports after the hold,
//!   reclaims slots after a QSBR grace period. `poll_timeout()` / `handle_timeout(now)`.
//! - [`Nat44`]: a worker and the reaper in one value, for single-threaded use (pcap
//!   replay, tests).
//!
//! Never reads a clock, never does I/O: time comes in as a [`Timestamp`].

pub(crate) mod census;
pub mod clear;
pub mod config;
pub mod deterministic;
pub mod frag;
pub(crate) mod held;
mod limits;
mod natlog;
mod offload;
mod parse;
pub mod pptp;
mod reaper;
mod reload;
pub mod rules;
mod stage;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_clear;
#[cfg(test)]
mod tests_det;
#[cfg(test)]
mod tests_evict;
#[cfg(test)]
mod tests_flood;
#[cfg(test)]
mod tests_frag;
#[cfg(test)]
mod tests_hairpin;
#[cfg(test)]
mod tests_hold;
#[cfg(test)]
mod tests_limits;
#[cfg(test)]
mod tests_mt;
#[cfg(test)]
mod tests_natlog;
#[cfg(test)]
mod tests_other;
#[cfg(test)]
mod tests_pba;
#[cfg(test)]
mod tests_pptp;
#[cfg(test)]
mod tests_reload;
#[cfg(test)]
mod tests_sctp;
#[cfg(test)]
mod tests_stage;
#[cfg(test)]
mod tests_tcp;
mod worker;

pub use offload::{SessionOffload, Visit};
pub use stage::{set_private_cache, PRIVATE_CACHE};

use std::hash::BuildHasherDefault;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use conntrack::tcp::TcpPhase;
use conntrack::{
    Endpoint, PortPool, Proto, Qsbr, RefTable, SessionTable, TcpState, Timestamp, Tuple,
};
use hashbrown::{HashMap, HashSet};
use rustc_hash::FxHasher;

use crate::config::{ConfigError, Timeouts};
use crate::mode::{Emit, Family, Mode};
use crate::stats::Counters;
use crate::verdict::Direction;
pub use crate::verdict::Offload;
pub use config::{DynamicRule, Nat44Config, PortForward, StaticNat};
pub use config::{MAX_FRAGMENT_RECORDS_LIMIT, MAX_SESSIONS, POOL_BYTES_PER_ADDRESS_IN_USE};
pub use frag::{
    FRAGMENT_HOLD_BYTES, FRAGMENT_HOLD_BYTES_LIMIT, FRAGMENT_TIMEOUT, MAX_FRAGMENT_RECORDS,
};
pub use held::{MAX_SIMULTANEOUS_OPENS, MAX_SIMULTANEOUS_OPENS_LIMIT, SYN_HOLD};
pub use reaper::Nat44Reaper;
use rules::RuleTable;
pub use worker::Nat44Worker;

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;
type FxSet<K> = HashSet<K, BuildHasherDefault<FxHasher>>;

/// How often the reaper walks the tables when driven by `poll_timeout` (a session may
/// outlive its timeout by this much when no packet touches it; a packet that finds an
/// expired session expires it first).
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Everything the threads of one NAT44 instance share.
#[derive(Debug)]
///
/// One value per policy generation (see `reload`): the configuration, rules, pools and
/// mappings are this generation's; the tables behind `Arc`s are shared by every
/// generation, so a reload swaps the policy and keeps every session and binding.
pub struct Nat44Shared {
    cfg: Nat44Config,
    rules: RuleTable,
    pools: Vec<Arc<PortPool>>,
    static_by_inside: FxMap<Ipv4Addr, Ipv4Addr>,
    static_by_public: FxMap<Ipv4Addr, Ipv4Addr>,
    forward_inside: FxSet<Ipv4Addr>,
    /// The addresses the NAT answers for from outside besides its pools' (statics,
    /// forwards).
    public_hosts: FxSet<Ipv4Addr>,
    /// Every pool's addresses (the deterministic prefix's too) as sorted, merged ranges:
    /// `is_public` on each new flow is a binary search, not a walk over every rule's pool
    /// (with 1000 rules that walk was 82% of a new NAT44 flow's instructions).
    pool_ranges: Vec<(u32, u32)>,
    pub(crate) sessions: Arc<SessionTable>,
    /// key A: inside endpoint, key B: public endpoint; refs: sessions; user: rule + 1
    /// (the rule of the generation that made it: see [`Nat44Shared::pool_of`]).
    bindings: Arc<RefTable>,
    /// Address-dependent filtering permits: key A: binding id << 32 | remote address.
    permits: Arc<RefTable>,
    /// Whether `permits` was sized for address-dependent filtering (at start).
    permits_on: bool,
    qsbr: Arc<Qsbr>,
    /// Told when a binding starts or stops using an inside address (NAT64 host ids).
    inside_hosts: Option<Arc<dyn InsideHosts>>,
    /// First fragments' rewrites, for the fragments that follow (`frag`).
    frags: Arc<frag::FragTable>,
    /// Sessions and ports per inside host (None when both limits are 0).
    subscribers: Option<Arc<conntrack::Subscribers>>,
    /// Unsolicited inbound SYNs held for a simultaneous open (`held`).
    held: Arc<held::HeldSyns>,
    /// RFC 8158 events, when logging is on (`natlog`; attached once, before traffic),
    /// shared by every policy generation.
    events: Arc<std::sync::OnceLock<Arc<crate::events::EventLog>>>,
    /// The session offload (XDP fast path), when attached (`offload`; once, before
    /// traffic), shared by every policy generation.
    offload: Arc<std::sync::OnceLock<Arc<dyn SessionOffload>>>,
    /// Sessions the workers hinted to the offload (`offload`), shared likewise.
    hints: Arc<offload::Hints>,
    /// Operators' requests to end sessions, for the reaper (`clear`).
    clears: Arc<clear::Clears>,
    /// Inside clients' PPTP calls (`pptp`), shared by every policy generation.
    pptp: Arc<pptp::PptpCalls>,
    /// Where the generations of this instance's policy are published (`reload`).
    cell: Arc<crate::reload::PolicyCell<Nat44Shared>>,
    /// Public address ranges a reload removed, whose sessions the reaper ends at once
    /// under [`ReloadDrain::Immediate`](crate::config::ReloadDrain) (empty otherwise).
    drained: Vec<(Ipv4Addr, Ipv4Addr)>,
    /// Deterministic NAT (`deterministic`): its mapping; its prefix is the rule table's
    /// entry and its pool the entry of `pools` right after the dynamic rules'.
    det: Option<deterministic::DetMap>,
}

/// Inside "addresses" that stand for something larger, such as the 32-bit ids NAT64 gives
/// its IPv6 hosts: told when a binding starts and stops using one, so that whatever backs
/// the id lives exactly as long as the bindings that use it.
pub trait InsideHosts: Send + Sync + std::fmt::Debug {
    /// A binding for `inside` is about to be made; `false` refuses it (the id is going).
    fn acquire(&self, inside: Ipv4Addr) -> bool;
    /// A binding for `inside` was not made after all, or has been removed.
    fn release(&self, inside: Ipv4Addr, now: Timestamp);
    /// The IPv6 host id `inside` stands for (NAT64), for event logs; `None`: a plain
    /// IPv4 host.
    fn ipv6(&self, _inside: Ipv4Addr) -> Option<std::net::Ipv6Addr> {
        None
    }
    /// The subscriber `inside` belongs to, as the per-subscriber limits count it (default:
    /// `inside` itself; NAT64: the IPv6 prefix behind the host id). Called when a session
    /// or port is counted and when it is released: must give the same key both times.
    fn subscriber(&self, inside: Ipv4Addr) -> u64 {
        u64::from(u32::from(inside))
    }
}

/// The pool of dynamic rule `r`: its ranges, never expanded (a /8 costs what its used
/// addresses cost); its reuse hold bounded by `max_sessions` (one binding per session at
/// most, see [`PortPool::with_hold_capacity`]).
fn dynamic_pool(r: &DynamicRule, cfg: &Nat44Config, workers: usize) -> Arc<PortPool> {
    let ranges = r
        .pool
        .iter()
        .map(|p| (p.nth(0), p.nth(p.size() - 1)))
        .collect();
    Arc::new(
        PortPool::from_ranges(
            ranges,
            r.ports.first,
            r.ports.last,
            cfg.port_reuse_hold,
            workers,
        )
        .with_blocks(cfg.port_block_size, cfg.blocks_per_subscriber)
        .with_hold_capacity(cfg.max_sessions),
    )
}

/// Packs a protocol and endpoint into a binding key.
#[inline]
pub(crate) fn ep_key(proto: Proto, e: Endpoint) -> u64 {
    (proto as u64) << 48 | u64::from(u32::from(e.addr)) << 16 | u64::from(e.port)
}

/// Unpacks a binding key's endpoint.
#[inline]
pub(crate) fn key_ep(k: u64) -> Endpoint {
    Endpoint::new(Ipv4Addr::from((k >> 16) as u32), k as u16)
}

/// Unpacks a binding key's protocol.
#[inline]
pub(crate) fn key_proto(k: u64) -> Proto {
    match (k >> 48) as u8 {
        0 => Proto::Tcp,
        1 => Proto::Udp,
        _ => Proto::Icmp,
    }
}

impl Nat44Shared {
    /// Validates `cfg` and builds the shared state for `workers` worker threads.
    pub fn new(cfg: Nat44Config, workers: usize) -> Result<Arc<Self>, ConfigError> {
        Self::with_inside_hosts(cfg, workers, None)
    }

    /// Like [`new`](Self::new), telling `hosts` when bindings start and stop using an
    /// inside address.
    pub fn with_inside_hosts(
        cfg: Nat44Config,
        workers: usize,
        hosts: Option<Arc<dyn InsideHosts>>,
    ) -> Result<Arc<Self>, ConfigError> {
        cfg.validate()?;
        let workers = workers.max(1);
        let det = cfg
            .deterministic
            .as_ref()
            .map(deterministic::DetMap::new)
            .transpose()?;
        let rules = RuleTable::new(rules_and_det(&cfg));
        let public_hosts = FxSet::default();
        let mut pools: Vec<Arc<PortPool>> = cfg
            .rules
            .iter()
            .map(|r| dynamic_pool(r, &cfg, workers))
            .collect();
        if let Some(m) = &det {
            pools.push(deterministic::det_pool(m, &cfg, workers));
        }
        let cap = cfg.max_sessions;
        let shared = Nat44Shared {
            rules,
            pools,
            static_by_inside: static_by_inside(&cfg),
            static_by_public: static_by_public(&cfg),
            forward_inside: forward_inside(&cfg),
            public_hosts,
            pool_ranges: pool_ranges(&cfg),
            sessions: Arc::new(SessionTable::new(cap)),
            // Every session holds at most one binding and one permit; forwards are extra
            // (room for as many again as configured at start, for forwards added live).
            // The session bindings never take that extra room: see `binding_room`.
            bindings: Arc::new(RefTable::new(cap + 2 * cfg.port_forwards.len() + 64)),
            permits: Arc::new(RefTable::new(
                if cfg.filtering == crate::config::Filtering::AddressDependent {
                    cap
                } else {
                    1
                },
            )),
            permits_on: cfg.filtering == crate::config::Filtering::AddressDependent,
            qsbr: Qsbr::new(workers),
            inside_hosts: hosts,
            frags: Arc::new(frag::FragTable::new(
                cfg.max_fragment_records,
                cfg.fragment_timeout,
                cfg.fragment_hold_bytes,
            )),
            // Every counted host holds a session: room for as many hosts as sessions.
            subscribers: (cfg.max_sessions_per_host != 0 || cfg.max_ports_per_host != 0)
                .then(|| Arc::new(conntrack::Subscribers::new(cap))),
            held: Arc::new(held::HeldSyns::new(if cfg.drop_externally_initiated_tcp {
                0
            } else {
                cfg.max_simultaneous_opens
            })),
            events: Arc::default(),
            offload: Arc::default(),
            hints: Arc::default(),
            clears: Arc::default(),
            pptp: Arc::default(),
            cell: Arc::default(),
            drained: Vec::new(),
            det,
            cfg,
        };
        let mut shared = shared;
        shared
            .public_hosts
            .extend(shared.static_by_public.keys().copied());
        for f in &shared.cfg.port_forwards {
            let proto = f.protocol.proto();
            let public = Endpoint::new(*f.public.ip(), f.public.port());
            for pool in &shared.pools {
                pool.reserve(proto, public);
            }
            shared.public_hosts.insert(public.addr);
            let inside = Endpoint::new(*f.inside.ip(), f.inside.port());
            // Validation refused duplicates, so this cannot collide.
            let _ = shared.bindings.insert(
                ep_key(proto, inside),
                ep_key(proto, public),
                true,
                0,
                true,
                0,
            );
        }
        Ok(Arc::new(shared))
    }

    /// The configuration in force.
    pub fn config(&self) -> &Nat44Config {
        &self.cfg
    }

    /// Number of worker slots this instance was built for.
    pub fn workers(&self) -> usize {
        self.qsbr.workers()
    }

    /// A worker handle for thread `id` (`0..workers()`).
    pub fn worker(self: &Arc<Self>, id: usize) -> Nat44Worker {
        Nat44Worker::new(Arc::clone(self), id)
    }

    /// The reaper (one per instance).
    pub fn reaper(self: &Arc<Self>) -> Nat44Reaper {
        Nat44Reaper::new(Arc::clone(self))
    }

    /// Whether `addr` is an inside address by the configuration (covered by a rule, a
    /// static mapping or a forward's target): the side a packet from it comes from.
    #[inline]
    pub fn is_inside(&self, addr: Ipv4Addr) -> bool {
        self.rules.lookup(addr).is_some()
            || self.static_by_inside.contains_key(&addr)
            || self.forward_inside.contains(&addr)
    }

    /// Whether `addr` is one of the NAT's public addresses.
    #[inline]
    pub fn is_public(&self, addr: Ipv4Addr) -> bool {
        let a = u32::from(addr);
        let i = self.pool_ranges.partition_point(|&(_, last)| last < a);
        self.pool_ranges
            .get(i)
            .is_some_and(|&(first, _)| first <= a)
            || self.public_hosts.contains(&addr)
    }

    /// The QSBR domain the workers announce quiescent states to (for tables that live
    /// beside this instance's, such as NAT64's hosts).
    pub fn qsbr(&self) -> &Arc<Qsbr> {
        &self.qsbr
    }

    /// Live sessions (a walk over the table: for reports, not the packet path).
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// Fragmented datagrams being tracked (a walk over the fragment table's shards).
    pub fn fragment_count(&self) -> usize {
        self.frags.len()
    }

    /// Bytes of later fragments held for their first now (`frag`).
    pub fn fragments_held_bytes(&self) -> usize {
        self.frags.held_bytes()
    }

    /// Live bindings, port forwards included (a walk).
    pub fn binding_count(&self) -> usize {
        self.bindings.live()
    }

    /// Snapshots of the live sessions.
    pub fn sessions(&self) -> Vec<conntrack::SessionView> {
        self.sessions.live().collect()
    }

    /// Table memory per session at full capacity: the session (both records) with its
    /// index share, plus one binding with its index share.
    pub fn bytes_per_session(&self) -> usize {
        self.sessions.bytes_per_session() + self.bindings.bytes_per_entry()
    }

    /// Table memory reserved now.
    pub fn table_bytes(&self) -> usize {
        self.sessions.bytes() + self.bindings.bytes() + self.permits.bytes()
    }

    /// The idle timeout of a session in its state.
    #[inline]
    fn timeout(&self, proto: Proto, tcp: TcpState) -> Duration {
        timeout_of(&self.cfg.timeouts, proto, tcp)
    }
}

#[inline]
fn timeout_of(t: &Timeouts, proto: Proto, tcp: TcpState) -> Duration {
    match proto {
        Proto::Udp => t.udp,
        Proto::Icmp => t.icmp,
        Proto::Sctp => t.sctp,
        Proto::Other => t.other,
        Proto::Tcp => match tcp.phase() {
            TcpPhase::SynSent => t.tcp_syn_sent,
            TcpPhase::SynRecv => t.tcp_syn_recv,
            TcpPhase::Established => t.tcp_established,
            TcpPhase::Closing => t.tcp_transitory,
            TcpPhase::Closed => t.tcp_closed,
        },
    }
}

impl Mode for Arc<Nat44Shared> {
    type Worker = Nat44Worker;

    fn name(&self) -> &'static str {
        "nat44"
    }

    fn families(&self) -> [Family; 2] {
        [Family::V4, Family::V4]
    }

    fn in_place(&self) -> bool {
        true
    }

    fn worker(&self, id: usize) -> Nat44Worker {
        Nat44Shared::worker(self, id)
    }

    fn reaper(&self) -> Option<Box<dyn crate::mode::Reaper>> {
        Some(Box::new(Nat44Shared::reaper(self)))
    }

    /// A source covered by a rule, a static mapping or a forward target is the inside;
    /// anything else (other families included: they are dropped either way) the outside.
    fn classify(&self, pkt: &[u8]) -> Direction {
        match pkt.get(12..16) {
            Some(s)
                if pkt[0] >> 4 == 4
                    && self.current().is_inside([s[0], s[1], s[2], s[3]].into()) =>
            {
                Direction::Outbound
            }
            _ => Direction::Inbound,
        }
    }

    fn session_count(&self) -> usize {
        Nat44Shared::session_count(self)
    }
}

/// One worker and the reaper together: the single-threaded face of the engine.
#[derive(Debug)]
pub struct Nat44 {
    shared: Arc<Nat44Shared>,
    worker: Nat44Worker,
    reaper: Nat44Reaper,
}

impl Nat44 {
    /// Builds a single-threaded engine; the configuration is validated first.
    pub fn new(cfg: Nat44Config) -> Result<Self, ConfigError> {
        let shared = Nat44Shared::new(cfg, 1)?;
        Ok(Self {
            worker: shared.worker(0),
            reaper: shared.reaper(),
            shared,
        })
    }

    /// The shared state.
    pub fn shared(&self) -> &Arc<Nat44Shared> {
        &self.shared
    }

    /// The configuration in force.
    pub fn config(&self) -> &Nat44Config {
        self.shared.config()
    }

    /// Counters since start (worker and reaper).
    pub fn counters(&self) -> Counters {
        let mut c = self.worker.counters().clone();
        c.merge(self.reaper.counters());
        c
    }

    /// Live sessions.
    pub fn session_count(&self) -> usize {
        self.shared.session_count()
    }

    /// Live bindings (including port forwards).
    pub fn binding_count(&self) -> usize {
        self.shared.binding_count()
    }

    /// Snapshots of the live sessions.
    pub fn sessions(&self) -> Vec<conntrack::SessionView> {
        self.shared.sessions()
    }

    /// Whether `addr` is an inside address by the configuration.
    pub fn is_inside(&self, addr: Ipv4Addr) -> bool {
        self.shared.is_inside(addr)
    }

    /// Whether `addr` is one of the NAT's public addresses.
    pub fn is_public(&self, addr: Ipv4Addr) -> bool {
        self.shared.is_public(addr)
    }

    /// Translates one IPv4 packet in place (see [`Nat44Worker::process_packet`]).
    pub fn process(&mut self, now: Timestamp, dir: Direction, pkt: &mut [u8]) -> Emit {
        self.worker.refresh_if_stale();
        let v = self.worker.process_packet(now, dir, pkt);
        self.worker.quiescent();
        v
    }

    /// What the engine sends at `now` with no packet arriving (held SYNs answered, see
    /// [`crate::ModeWorker::poll`]), written into `out` (cleared first); how many.
    pub fn poll(&mut self, now: Timestamp, out: &mut crate::mode::Output) -> usize {
        self.worker.poll_due(now, out)
    }

    /// When [`poll`](Self::poll) next has something to send.
    pub fn poll_due_timeout(&self) -> Option<Timestamp> {
        self.worker.due_timeout()
    }

    /// When [`handle_timeout`](Self::handle_timeout) should next run.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.reaper.poll_timeout()
    }

    /// Runs the reaper now.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.reaper.handle_timeout(now);
    }

    /// Runs the reaper's drain now (what a live reaper does every millisecond or so while
    /// evicted sessions wait): true while anything is still waiting.
    pub fn drain(&mut self, now: Timestamp) -> bool {
        self.reaper.drain(now)
    }
}

/// A packet's tuple as the rewrite wants it.
#[inline]
fn rewrite_of(t: &Tuple) -> xlat::nat44::Rewrite {
    xlat::nat44::Rewrite {
        src: t.src.addr,
        sport: t.src.port,
        dst: t.dst.addr,
        dport: t.dst.port,
    }
}

// The bound on the bindings sessions make.
impl Nat44Shared {
    /// Slots of `bindings` a new session's binding (dynamic, or static 1:1 on demand) may
    /// find taken and still be made: the session capacity plus this generation's port
    /// forwards, as the table was sized before live reload. The table's extra room (for
    /// forwards added live) is never theirs: otherwise a new flow gets a binding and a
    /// port while the session table is full, and its refused session then early-drops
    /// unconfirmed sessions (`install`), established flows still awaiting a reply among
    /// them, for every flow refused; at this bound it is refused at the binding, with
    /// nothing taken and nothing evicted.
    #[inline]
    pub(super) fn binding_room(&self) -> usize {
        self.cfg.max_sessions + self.cfg.port_forwards.len()
    }
}

// Table occupancy for metrics.
impl Nat44Shared {
    /// The session table's capacity, live and dead-pending counts (O(1)).
    pub fn occupancy(&self) -> crate::TableOccupancy {
        crate::TableOccupancy {
            capacity: self.sessions.capacity(),
            live: self.sessions.live_count(),
            dead_pending: self.sessions.dead_pending(),
        }
    }
}

// The lookups a configuration's static mappings and forwards give: built at start and
// by each reload (`reload.rs`), from the configuration of that generation.

/// Static 1:1 mappings by inside address.
fn static_by_inside(cfg: &Nat44Config) -> FxMap<Ipv4Addr, Ipv4Addr> {
    cfg.static_nat
        .iter()
        .map(|s| (s.inside, s.public))
        .collect()
}

/// Static 1:1 mappings by public address.
fn static_by_public(cfg: &Nat44Config) -> FxMap<Ipv4Addr, Ipv4Addr> {
    cfg.static_nat
        .iter()
        .map(|s| (s.public, s.inside))
        .collect()
}

/// The inside hosts port forwards lead to.
fn forward_inside(cfg: &Nat44Config) -> FxSet<Ipv4Addr> {
    cfg.port_forwards.iter().map(|f| *f.inside.ip()).collect()
}

/// The inside prefixes of the rule table: the dynamic rules', then the deterministic
/// prefix (its index is the number of dynamic rules).
fn rules_and_det(cfg: &Nat44Config) -> impl Iterator<Item = &xlat::prefix::Ipv4Prefix> {
    cfg.rules
        .iter()
        .map(|r| &r.inside)
        .chain(cfg.deterministic.as_ref().map(|d| &d.inside))
}

/// The pools' addresses (dynamic rules' and the deterministic prefix) as sorted ranges,
/// overlapping or adjacent ones merged: what [`Nat44Shared::is_public`] searches.
fn pool_ranges(cfg: &Nat44Config) -> Vec<(u32, u32)> {
    let mut r: Vec<(u32, u32)> = cfg
        .rules
        .iter()
        .flat_map(|r| &r.pool)
        .chain(cfg.deterministic.as_ref().map(|d| &d.outside))
        .map(|p| (u32::from(p.nth(0)), u32::from(p.nth(p.size() - 1))))
        .collect();
    r.sort_unstable();
    let mut merged: Vec<(u32, u32)> = Vec::with_capacity(r.len());
    for (first, last) in r {
        match merged.last_mut() {
            Some(m) if first <= m.1.saturating_add(1) => m.1 = m.1.max(last),
            _ => merged.push((first, last)),
        }
    }
    merged
}

#[cfg(test)]
mod pool_ranges_tests {
    use super::*;

    #[test]
    fn pool_ranges_are_sorted_and_merged_and_searched() {
        let c = |s: &str| -> xlat::prefix::Ipv4Prefix { s.parse().unwrap() };
        let mut cfg = Nat44Config::default();
        for (inside, pools) in [
            ("10.0.0.0/24", vec!["198.51.100.8/29", "198.51.100.0/29"]),
            ("10.0.1.0/24", vec!["203.0.113.5/32"]),
            ("10.0.2.0/24", vec!["198.51.100.16/30"]),
        ] {
            cfg.rules.push(DynamicRule {
                inside: c(inside),
                pool: pools.into_iter().map(c).collect(),
                ports: crate::config::PortRange {
                    first: 1024,
                    last: 65535,
                },
            });
        }
        let r = pool_ranges(&cfg);
        let ip = |s: &str| u32::from(s.parse::<Ipv4Addr>().unwrap());
        assert_eq!(
            r,
            vec![
                (ip("198.51.100.0"), ip("198.51.100.19")),
                (ip("203.0.113.5"), ip("203.0.113.5"))
            ]
        );
        let n = Nat44Shared::new(cfg, 1).unwrap();
        for (a, want) in [
            ("198.51.100.0", true),
            ("198.51.100.15", true),
            ("198.51.100.19", true),
            ("198.51.100.20", false),
            ("203.0.113.4", false),
            ("203.0.113.5", true),
            ("203.0.113.6", false),
            ("0.0.0.0", false),
            ("255.255.255.255", false),
        ] {
            assert_eq!(n.is_public(a.parse().unwrap()), want, "{a}");
        }
    }
}
