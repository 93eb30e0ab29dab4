//! Introspection of a running gateway's state, for the control socket (and the metrics):
//! live sessions, bindings, pool usage per public address, and a census of the tables.
//!
//! Everything here reads the lock-free tables the way the reaper does — a walk over the
//! slab, each slot read as a consistent snapshot (`conntrack::session` `snapshot_live`) —
//! and writes nothing: a listing of a full table never locks a worker out or slows a
//! lookup beyond sharing cache lines. Each answer is plain data (`SessionInfo`,
//! `BindingInfo`, `PoolAddrUsage`, `Census`), cheap to copy and to turn into JSON or
//! gauges. Time is passed in (`now`, the workers' clock), as everywhere in the engine.
//!
//! Costs: [`Census`] and [`PoolAddrUsage`] walk the tables once (O(slots ever used), a few
//! milliseconds per million sessions, no allocation per session); the session and binding
//! listings hand each entry to a visitor, which may stop the walk by returning `false`.
//!
//! Per mode: NAT44 and NAT64 answer everything (NAT64's inside endpoints are the IPv6
//! hosts, its remotes also shown as the IPv6 hosts see them); SIIT and CLAT are
//! stateless: no sessions, no bindings, an empty census; ILA has no sessions, its
//! mappings are listed by [`crate::any::AnyMode::ila_mappings`].

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use conntrack::tcp::ConnState;
use conntrack::{Proto, TcpState};

/// One live session: both records seen as endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionInfo {
    /// Transport protocol (ICMP: the ports are the query identifier).
    pub proto: Proto,
    /// The inside host's endpoint (NAT64: its IPv6 address).
    pub inside: SocketAddr,
    /// The public endpoint it is translated to.
    pub public: SocketAddr,
    /// The remote endpoint, as the outside sees it.
    pub remote: SocketAddr,
    /// The remote endpoint as the inside host addresses it (NAT64: the Pref64 address;
    /// NAT44: the same as `remote`, or the other host's inside endpoint when hairpinned).
    pub remote_inside: SocketAddr,
    /// Whether the inside host opened it (else: from outside, through a binding, a
    /// static mapping or a port forward).
    pub from_inside: bool,
    /// TCP state (`None` for UDP and ICMP).
    pub tcp: Option<ConnState>,
    /// Time since the last packet of either record.
    pub idle: Duration,
    /// Time until it expires unless a packet comes (zero: the reaper's next pass).
    pub expires_in: Duration,
    /// Time since the session was created (rounded up to the creation's whole second of
    /// the workers' clock: never less than the truth or than `idle`, at most 1 s more).
    pub age: Duration,
}

/// The TCP state's name as operators read it (`conntrack -L` spelling, lower case).
pub fn tcp_state_name(s: ConnState) -> &'static str {
    match s {
        ConnState::None => "none",
        ConnState::SynSent => "syn_sent",
        ConnState::SynRecv => "syn_recv",
        ConnState::Established => "established",
        ConnState::FinWait => "fin_wait",
        ConnState::TimeWait => "time_wait",
        ConnState::Close => "close",
        ConnState::PickedUp => "picked_up",
    }
}

/// Every TCP state, in [`Census::tcp`] order (index = `ConnState as usize`).
pub const TCP_STATES: [ConnState; 8] = [
    ConnState::None,
    ConnState::SynSent,
    ConnState::SynRecv,
    ConnState::Established,
    ConnState::FinWait,
    ConnState::TimeWait,
    ConnState::Close,
    ConnState::PickedUp,
];

/// Which sessions to list: every set field must match (all `None`: everything).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionFilter {
    /// Protocol.
    pub proto: Option<Proto>,
    /// Inside host address.
    pub inside: Option<IpAddr>,
    /// Inside port (or ICMP identifier).
    pub inside_port: Option<u16>,
    /// Public address.
    pub public: Option<IpAddr>,
    /// Public port.
    pub public_port: Option<u16>,
    /// Remote address (as the outside sees it, or as the inside addresses it).
    pub remote: Option<IpAddr>,
    /// Remote port.
    pub remote_port: Option<u16>,
}

impl SessionFilter {
    /// Whether `s` passes.
    pub fn matches(&self, s: &SessionInfo) -> bool {
        fn eq<T: PartialEq>(want: Option<T>, have: T) -> bool {
            want.is_none_or(|w| w == have)
        }
        eq(self.proto, s.proto)
            && eq(self.inside, s.inside.ip())
            && eq(self.inside_port, s.inside.port())
            && eq(self.public, s.public.ip())
            && eq(self.public_port, s.public.port())
            && self
                .remote
                .is_none_or(|r| r == s.remote.ip() || r == s.remote_inside.ip())
            && self.remote_port.is_none_or(|p| p == s.remote.port())
    }
}

/// One binding (mapping): an inside endpoint and the public endpoint it goes out as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BindingInfo {
    /// Transport protocol.
    pub proto: Proto,
    /// The inside endpoint (NAT64: the IPv6 host's).
    pub inside: SocketAddr,
    /// The public endpoint.
    pub public: SocketAddr,
    /// Sessions holding it.
    pub sessions: u32,
    /// A port forward or static binding (never expires).
    pub is_static: bool,
}

/// Use of one public address of a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolAddrUsage {
    /// The public address.
    pub addr: Ipv4Addr,
    /// Ports per protocol the pool hands out on it.
    pub ports_per_proto: u32,
    /// Ports taken per protocol (in use or held back after use), `Proto::index` order.
    pub taken: [u32; Proto::COUNT],
    /// Bindings on it.
    pub bindings: u32,
    /// Distinct inside hosts (subscribers) with a binding on it.
    pub subscribers: u32,
    /// Port blocks held on it (port-block allocation; 0 when off).
    pub blocks_held: u32,
}

/// Counts over the tables.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// The session table's capacity (ILA: the mapping table's).
    pub capacity: u64,
    /// Live sessions (ILA: mappings), counted by the walk.
    pub live: u64,
    /// Sessions marked dead whose slots wait for a grace period.
    pub dead_pending: u64,
    /// Live sessions per protocol, `Proto::index` order.
    pub by_proto: [u64; Proto::COUNT],
    /// Live TCP sessions per state, [`TCP_STATES`] order.
    pub tcp: [u64; 8],
    /// Live bindings (port forwards included).
    pub bindings: u64,
    /// Port-block allocation's counters over the pools in force (all 0 when off).
    pub blocks: conntrack::pool::BlockStats,
}

impl Census {
    /// Counts one session.
    pub(crate) fn count(&mut self, proto: Proto, tcp: TcpState) {
        self.live += 1;
        self.by_proto[proto.index()] += 1;
        if proto == Proto::Tcp {
            self.tcp[tcp.state() as usize] += 1;
        }
    }
}

/// What the stateful modes answer (NAT44 and NAT64 implement it).
pub(crate) trait Introspect {
    /// Live sessions passing `filter` to `visit` until it returns `false`; how many were
    /// handed over.
    fn sessions(
        &self,
        now: conntrack::Timestamp,
        filter: &SessionFilter,
        visit: &mut dyn FnMut(&SessionInfo) -> bool,
    ) -> usize;
    /// Ends the live sessions passing `filter` as the reaper ends expired ones (see
    /// `nat44::clear`); with `dry_run`, only counts them.
    fn clear_sessions(
        &self,
        now: conntrack::Timestamp,
        filter: &SessionFilter,
        dry_run: bool,
    ) -> Result<usize, crate::nat44::clear::ClearError>;
    /// Live bindings to `visit` until it returns `false`.
    fn bindings(&self, visit: &mut dyn FnMut(&BindingInfo) -> bool) -> usize;
    /// Use of the pools' addresses that have anything taken or bound.
    fn pool_usage(&self) -> Vec<PoolAddrUsage>;
    /// Counts over the tables.
    fn census(&self) -> Census;
}

#[cfg(test)]
mod tests;
