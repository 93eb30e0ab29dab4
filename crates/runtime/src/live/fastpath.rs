//! The XDP fast path's brain-side half: which NAT44 or NAT64 sessions
//! the steering program forwards by itself, installed and removed on the engine's word
//! (ILA's mappings: `fastpath_ila`, SIIT's and CLAT's flows: `fastpath_siit`, on the same
//! maps and counters).
//!
//! The engine stays the brain: its reaper shows this offload every live session on
//! each walk (every 200 ms, off the per-packet path: no worker ever waits on a map
//! update), and, between walks, each session a worker hinted as it forwarded one of its
//! packets (within the reaper's next drain, 1-10 ms: `engine::nat44`'s offload hints), and
//! a session that is established — TCP in `ESTABLISHED`, UDP once its
//! reply record was refreshed after its original (a reply seen) — gets one entry per
//! direction in the map of the interface that direction arrives on: the header fields
//! it leaves with, the egress interface, and the next hop's MAC from the same
//! neighbour table the AF_XDP transmit path uses. Hairpinned sessions, sessions whose
//! next hop is not resolved yet or leaves by the interface the packet came in on stay
//! on the slow path. A TCP session leaving `ESTABLISHED` (a FIN or RST, which the
//! program always leaves to the engine) is taken out at the next walk; a session that
//! ends for any reason is taken out by `remove` before its binding is released. The
//! table is bounded: when it is full a session is refused (`refused_full`) and stays
//! on the slow path.
//!
//! NAT64 sessions (NAT64 runs on NAT44's table, keyed by host ids) are offloaded the
//! same way when the inside opened them: the IPv6 direction in the inside interface's
//! `fast_64` (host address and port, server's Pref64 address -> pool address and port,
//! server), the IPv4 one in the outside interface's `fast_46`, with the header
//! translation's options in force at install (TOS / traffic class, DF, TTL, MTUs).
//!
//! Last-seen: the program stamps CLOCK_MONOTONIC; the walk converts it to the engine's
//! clock and the reaper refreshes the session with it, so an active fast-path flow
//! never expires.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use conntrack::session::{ALG, HAIRPIN};
use conntrack::tcp::ConnState;
use std::net::IpAddr;

use conntrack::{Proto, SessionView, Timestamp, Tuple};
use engine::nat44::{SessionOffload, Visit};
use engine::nat64::Nat64Shared;
use io::afxdp::fast_path::{
    monotonic_ns, ByteRule, DfRule, FastFlow, FastKind, FastPath, FastRewrite, FlowTuple,
    FlowTuple6, NextHop, Rewrite46, Rewrite64, PROTO_TCP, PROTO_UDP,
};
use xlat::siit::{DfPolicy, SiitOptions};
type FxHashMap<K, V> = std::collections::HashMap<K, V>;

use super::netview::{Link, NetView, Published};

/// How stale the engine's last-seen time of an offloaded session gets before the walk
/// reads the program's stamps (the shortest idle timeout, ICMP's, is 60 s by default).
const STAMP_READ_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// A session's two entries: (link it arrives on, flow) per direction.
type Dirs = [(usize, FastFlow); 2];

/// The flows one session installed.
#[derive(Clone, Copy, Debug)]
struct Installed {
    dirs: Dirs,
    /// Where each direction leaves (in `dirs`' order).
    hops: [NextHop; 2],
    /// The network view version the MACs came from.
    version: u64,
}

/// What the fast path did, for the stats line, `quicknat stats` and the tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FastPathCounters {
    /// Packets the XDP program forwarded itself.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Sessions offloaded now.
    pub sessions: u64,
    /// Sessions offloaded so far.
    pub installed: u64,
    /// Sessions taken out so far.
    pub removed: u64,
    /// Offers refused because the table was full (an established session that does not
    /// fit is offered again at every walk, and counted each time).
    pub refused_full: u64,
    /// Map updates the kernel refused.
    pub errors: u64,
    // -- per direction and misses --
    /// Packets forwarded by the program per direction: [outbound (arrived inside),
    /// inbound (arrived outside)].
    pub dir_packets: [u64; 2],
    /// Their bytes (Ethernet frames), per direction.
    pub dir_bytes: [u64; 2],
    /// Packets the program looked up and did not find (sent to the AF_XDP socket: a flow
    /// not offloaded, or not yet), both interfaces: IPv4 TCP/UDP, NAT64, SIIT and CLAT also
    /// IPv6 TCP/UDP, ILA IPv6 TCP/UDP/ICMPv6.
    pub misses: u64,
}

/// What the sessions are.
pub(super) enum Kind {
    Nat44,
    /// NAT64 over its NAT44 table: the instance gives the IPv6 ends and the options.
    Nat64(Arc<Nat64Shared>),
    /// ILA: no sessions, the router's mappings (`fastpath_ila`).
    Ila(Arc<engine::ila::IlaRouter>),
    /// SIIT or CLAT: no sessions, the flows the workers hint (`fastpath_siit`): the
    /// translator (its configuration in force) and the hints' queue.
    Siit(
        Box<engine::siit::Siit>,
        Arc<engine::siit::offload::FlowHints>,
    ),
}

/// The offload: both interfaces' maps and what was installed in them.
pub(crate) struct XdpFastPath {
    pub(super) kind: Kind,
    /// Per link (inside, outside): the map of flows arriving there.
    pub(super) maps: [Arc<FastPath>; 2],
    links: [Link; 2],
    pub(super) mtus: [u32; 2],
    pub(super) published: Arc<Published>,
    decrement_ttl: bool,
    /// Sessions the maps hold at most (two entries each; ILA mappings: one in each map;
    /// SIIT/CLAT flow directions: this many in each map, the one of the link each arrives
    /// on).
    max_sessions: usize,
    /// Engine clock minus CLOCK_MONOTONIC, in ns.
    pub(super) offset: i128,
    by_session: Mutex<FxHashMap<Tuple, Installed>>,
    /// ILA: the mappings offloaded, by identifier.
    pub(super) by_ident: Mutex<FxHashMap<u64, super::fastpath_ila::IlaInstalled>>,
    /// SIIT and CLAT: the flow directions offloaded, by their arriving tuple.
    pub(super) by_flow: Mutex<FxHashMap<FastFlow, super::fastpath_siit::FlowInstalled>>,
    /// SIIT and CLAT: the flow directions in each link's map (inside, outside), counted as
    /// they are installed and taken out; read without `by_flow`'s lock.
    pub(super) flows_in: [std::sync::atomic::AtomicUsize; 2],
    /// ILA: the network view version the last sync saw.
    pub(super) ila_synced: AtomicU64,
    pub(super) installed: AtomicU64,
    pub(super) removed: AtomicU64,
    pub(super) refused_full: AtomicU64,
    pub(super) errors: AtomicU64,
    /// SIIT and CLAT: how long a flow direction the program forwarded nothing of stays.
    pub(super) flow_idle: std::time::Duration,
}

impl std::fmt::Debug for XdpFastPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpFastPath")
            .field("max_sessions", &self.max_sessions)
            .finish_non_exhaustive()
    }
}

fn flow(t: &Tuple) -> Option<FlowTuple> {
    let proto = match t.proto {
        Proto::Tcp => PROTO_TCP,
        Proto::Udp => PROTO_UDP,
        _ => return None,
    };
    Some(FlowTuple {
        proto,
        src: t.src.addr,
        sport: t.src.port,
        dst: t.dst.addr,
        dport: t.dst.port,
    })
}

/// An MTU as the program's 16-bit field holds it.
pub(super) fn mtu16(m: u32) -> u16 {
    m.min(u32::from(u16::MAX)) as u16
}

/// The TOS or traffic class the translation writes, as xlat::siit decides it: the value
/// configured, else the other header's (`tos_to_traffic_class`), else zero.
fn byte_rule(fixed: Option<u8>, copy: bool) -> ByteRule {
    match (fixed, copy) {
        (Some(v), _) => ByteRule::Fixed(v),
        (None, true) => ByteRule::Copy,
        (None, false) => ByteRule::Fixed(0),
    }
}

/// Whether the engine considers `v` established: TCP in `ESTABLISHED`; UDP with its
/// reply record refreshed after its original one (an answer came back).
fn established(v: &SessionView) -> bool {
    match v.initial.proto {
        Proto::Tcp => v.tcp.state() == ConnState::Established,
        Proto::Udp => v.seen[1] > v.seen[0],
        _ => false,
    }
}

impl XdpFastPath {
    /// Over the interfaces' maps `maps` (inside, outside), redirecting to `links`,
    /// holding packets to `mtus`; `now` is the engine's clock at this instant.
    fn new(
        kind: Kind,
        maps: [Arc<FastPath>; 2],
        links: [Link; 2],
        mtus: [u32; 2],
        published: Arc<Published>,
        decrement_ttl: bool,
        now: Timestamp,
    ) -> std::io::Result<Self> {
        let ifindexes = [links[0].index, links[1].index];
        let fast_kind = match kind {
            Kind::Nat44 => FastKind::Nat44,
            Kind::Nat64(_) | Kind::Siit(..) => FastKind::Nat64,
            Kind::Ila(_) => FastKind::Ila,
        };
        for m in &maps {
            m.set_ports(ifindexes)?;
            m.enable(fast_kind)?;
        }
        // A session may put both its entries in one map; an ILA mapping puts one in each,
        // a SIIT flow's direction one in one.
        let per_map = maps[0].capacity().min(maps[1].capacity());
        let max_sessions = match kind {
            Kind::Ila(_) | Kind::Siit(..) => per_map,
            _ => (per_map / 2).max(1),
        } as usize;
        Ok(XdpFastPath {
            kind,
            maps,
            links,
            mtus,
            published,
            decrement_ttl,
            max_sessions,
            offset: i128::from(now.as_nanos()) - i128::from(monotonic_ns()),
            by_session: Mutex::new(FxHashMap::new()),
            by_ident: Mutex::new(FxHashMap::new()),
            by_flow: Mutex::new(FxHashMap::new()),
            flows_in: Default::default(),
            ila_synced: AtomicU64::new(u64::MAX),
            installed: AtomicU64::new(0),
            removed: AtomicU64::new(0),
            refused_full: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            flow_idle: super::config::XDP_FAST_PATH_IDLE,
        })
    }

    /// The counters now (the program's summed over CPUs and interfaces).
    pub fn counters(&self) -> FastPathCounters {
        let (mut dir_packets, mut dir_bytes, mut misses) = ([0; 2], [0; 2], 0);
        for (i, m) in self.maps.iter().enumerate() {
            let s = m.stats();
            dir_packets[i] = s.packets;
            dir_bytes[i] = s.bytes;
            misses += s.misses;
        }
        FastPathCounters {
            packets: dir_packets[0] + dir_packets[1],
            bytes: dir_bytes[0] + dir_bytes[1],
            dir_packets,
            dir_bytes,
            misses,
            sessions: (self.lock().len() + self.ila_lock().len() + self.flows()) as u64,
            installed: self.installed.load(Ordering::Relaxed),
            removed: self.removed.load(Ordering::Relaxed),
            refused_full: self.refused_full.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }

    /// Whether this offloads ILA mappings (attached to the control state, not a table).
    pub(crate) fn is_ila(&self) -> bool {
        matches!(self.kind, Kind::Ila(_))
    }

    /// Whether this offloads the flows a stateless translator hints (kept by
    /// `siit_sync` on a thread of its own).
    pub(crate) fn is_siit(&self) -> bool {
        matches!(self.kind, Kind::Siit(..))
    }

    /// The most sessions (ILA: mappings) offloaded at once.
    pub(super) fn max_sessions(&self) -> usize {
        self.max_sessions
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FxHashMap<Tuple, Installed>> {
        self.by_session.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next hop of packets arriving on link `ingress` for `dst`: by the other link, to
    /// the neighbour the routes give (`None`: another link, or not resolved yet).
    pub(super) fn hop(&self, view: &NetView, ingress: usize, dst: IpAddr) -> Option<NextHop> {
        let egress = 1 - ingress;
        let dst_mac = match dst {
            IpAddr::V4(a) => {
                let (ifindex, hop) = view.routes.lookup(a)?;
                (self.links[egress].index == ifindex).then_some(())?;
                view.neighbors.get(ifindex, hop)?
            }
            IpAddr::V6(a) => {
                let (ifindex, hop) = view.routes.lookup6(a)?;
                (self.links[egress].index == ifindex).then_some(())?;
                view.neighbors.get6(ifindex, hop)?
            }
        };
        Some(NextHop {
            egress: egress as u32,
            dst_mac,
            src_mac: self.links[egress].mac,
        })
    }

    /// The rewrite of IPv4 packets leaving as `to` by `hop`.
    fn rewrite(&self, to: FlowTuple, hop: NextHop) -> FastRewrite {
        FastRewrite {
            to,
            hop,
            decrement_ttl: self.decrement_ttl,
            mtu: mtu16(self.passing_mtu()),
        }
    }

    /// The longest IP packet that may pass both ways unchanged in size: the worker drops
    /// one longer than the link it *arrives* on (`oversize`) and refuses one longer than
    /// the link it leaves by (an ICMP error is owed), so the program takes neither.
    pub(super) fn passing_mtu(&self) -> u32 {
        self.mtus[0].min(self.mtus[1])
    }

    /// Where `v`'s two directions leave now (original first, as `Installed::dirs`);
    /// `None` while one is not offloadable (no route by the other link, no neighbour).
    fn hops(&self, v: &SessionView, view: &NetView) -> Option<[NextHop; 2]> {
        match &self.kind {
            Kind::Nat44 => {
                let first = if v.flags & conntrack::session::FROM_INSIDE != 0 {
                    0
                } else {
                    1
                };
                Some([
                    self.hop(view, first, IpAddr::V4(v.revised.dst.addr))?,
                    self.hop(view, 1 - first, IpAddr::V4(v.initial.src.addr))?,
                ])
            }
            Kind::Nat64(nat) => {
                let (host6, _) = nat.session_ends6(&v.initial)?;
                Some([
                    self.hop(view, 0, IpAddr::V4(v.revised.dst.addr))?,
                    self.hop(view, 1, IpAddr::V6(host6))?,
                ])
            }
            Kind::Ila(_) | Kind::Siit(..) => None,
        }
    }

    /// Installs both directions of `v`; whether it is offloaded now.
    fn install(&self, v: &SessionView, by: &mut FxHashMap<Tuple, Installed>) -> bool {
        let version = self.published.version();
        let view = self.published.current();
        let Some(hops) = self.hops(v, &view) else {
            return false;
        };
        let dirs = match &self.kind {
            Kind::Nat44 => self.install44(v, hops),
            Kind::Nat64(nat) => self.install64(nat, v, hops),
            Kind::Ila(_) | Kind::Siit(..) => Err(None),
        };
        match dirs {
            Ok(dirs) => {
                by.insert(
                    v.initial,
                    Installed {
                        dirs,
                        hops,
                        version,
                    },
                );
                true
            }
            Err(Some(dirs)) => {
                // Refused by the kernel half-way: neither direction stays.
                self.errors.fetch_add(1, Ordering::Relaxed);
                for (l, f) in &dirs {
                    self.maps[*l].remove(f);
                }
                false
            }
            Err(None) => false,
        }
    }

    /// NAT44: both directions in `fast_v4`. `Err(None)`: not offloadable now;
    /// `Err(Some(dirs))`: a map refused an entry.
    fn install44(&self, v: &SessionView, hops: [NextHop; 2]) -> Result<Dirs, Option<Dirs>> {
        let (Some(orig), Some(orig_to)) = (flow(&v.initial), flow(&v.revised)) else {
            return Err(None);
        };
        let (Some(reply), Some(reply_to)) =
            (flow(&v.revised.reversed()), flow(&v.initial.reversed()))
        else {
            return Err(None);
        };
        let from_inside = v.flags & conntrack::session::FROM_INSIDE != 0;
        let first = if from_inside { 0 } else { 1 };
        let (r0, r1) = (
            self.rewrite(orig_to, hops[0]),
            self.rewrite(reply_to, hops[1]),
        );
        let dirs = [
            (first, FastFlow::V4(orig)),
            (1 - first, FastFlow::V4(reply)),
        ];
        for ((link, from), r) in [(first, orig), (1 - first, reply)].iter().zip([r0, r1]) {
            if self.maps[*link].insert(from, &r).is_err() {
                return Err(Some(dirs));
            }
        }
        Ok(dirs)
    }

    /// NAT64 (a session the inside opened): the IPv6 direction in the inside map's
    /// `fast_64`, the IPv4 one in the outside map's `fast_46`.
    fn install64(
        &self,
        nat: &Nat64Shared,
        v: &SessionView,
        [out, back]: [NextHop; 2],
    ) -> Result<Dirs, Option<Dirs>> {
        let (Some(orig), Some(orig_to)) = (flow(&v.initial), flow(&v.revised)) else {
            return Err(None);
        };
        let Some((host6, server6)) = nat.session_ends6(&v.initial) else {
            return Err(None);
        };
        let opts = nat.options();
        // Inside: host:port -> server6:dport arrives, leaves as pool:pport -> server:dport.
        let from6 = FlowTuple6 {
            proto: orig.proto,
            src: host6,
            sport: orig.sport,
            dst: server6,
            dport: orig.dport,
        };
        // Outside: server:dport -> pool:pport arrives, leaves as server6:dport -> host:port.
        let from4 = FlowTuple {
            proto: orig.proto,
            src: orig_to.dst,
            sport: orig_to.dport,
            dst: orig_to.src,
            dport: orig_to.sport,
        };
        let to6 = FlowTuple6 {
            proto: orig.proto,
            src: server6,
            sport: orig_to.dport,
            dst: host6,
            dport: orig.sport,
        };
        // The IPv6 side is the inside (link 0).
        let r64 = self.rewrite64(opts, orig_to, out, 0);
        let r46 = self.rewrite46(opts, to6, back, 0);
        let dirs = [(0, FastFlow::V6To4(from6)), (1, FastFlow::V4To6(from4))];
        if self.maps[0].insert_64(&from6, &r64).is_err()
            || self.maps[1].insert_46(&from4, &r46).is_err()
        {
            return Err(Some(dirs));
        }
        Ok(dirs)
    }

    /// The rewrite of IPv6 packets leaving as the IPv4 `to` by `hop` under the
    /// translator's options `opts`, the IPv6 side being link `v6` (NAT64: the inside;
    /// SIIT and CLAT: the outside).
    pub(super) fn rewrite64(
        &self,
        opts: &SiitOptions,
        to: FlowTuple,
        hop: NextHop,
        v6: usize,
    ) -> Rewrite64 {
        Rewrite64 {
            to,
            hop,
            decrement_ttl: opts.decrement_ttl,
            tos: byte_rule(opts.tos, opts.tos_to_traffic_class),
            df: match opts.df {
                DfPolicy::Rfc => DfRule::Rfc,
                DfPolicy::Clear => DfRule::Clear,
                DfPolicy::Set => DfRule::Set,
            },
            // IPv4 length = IPv6 length - 20: within the IPv4 link and `ipv4_mtu`, and
            // arriving within the IPv6 link (else the worker drops it as oversize).
            mtu: mtu16(
                opts.ipv4_mtu
                    .min(self.mtus[1 - v6])
                    .min(self.mtus[v6].saturating_sub(20)),
            ),
        }
    }

    /// The rewrite of IPv4 packets leaving as the IPv6 `to` by `hop` (as `rewrite64`).
    pub(super) fn rewrite46(
        &self,
        opts: &SiitOptions,
        to: FlowTuple6,
        hop: NextHop,
        v6: usize,
    ) -> Rewrite46 {
        // IPv6 length = IPv4 length + 20, the IPv4 packet within the IPv4 link.
        let v4_link = self.mtus[1 - v6] + 20;
        Rewrite46 {
            to,
            hop,
            decrement_ttl: opts.decrement_ttl,
            tc: byte_rule(opts.traffic_class, opts.tos_to_traffic_class),
            mtu_df: mtu16(opts.ipv6_mtu.min(self.mtus[v6]).min(v4_link)),
            mtu_nodf: mtu16(opts.ipv6_fragment_mtu().min(self.mtus[v6]).min(v4_link)),
        }
    }

    fn uninstall(&self, i: &Installed) {
        for (link, from) in &i.dirs {
            self.maps[*link].remove(from);
        }
        self.removed.fetch_add(1, Ordering::Relaxed);
    }

    /// The later of the two directions' last-seen stamps, on the engine's clock.
    fn last_seen(&self, i: &Installed) -> Option<Timestamp> {
        let ns = i
            .dirs
            .iter()
            .filter_map(|(link, from)| self.maps[*link].last_seen_ns(from))
            .max()
            .filter(|ns| *ns > 0)?;
        let t = i128::from(ns) + self.offset;
        u64::try_from(t).ok().map(Timestamp::from_nanos)
    }
}

impl SessionOffload for XdpFastPath {
    fn visit(&self, v: &SessionView, now: Timestamp) -> Visit {
        // A gateway reading the payload (PPTP's control channel) must see every packet.
        if v.flags & (HAIRPIN | ALG) != 0 {
            return Visit::default();
        }
        let mut by = self.lock();
        if let Some(i) = by.get(&v.initial).copied() {
            // Two map lookups (syscalls) per session: only once the engine's own time is
            // STAMP_READ_AFTER old (every timeout is longer), not on every 200 ms walk.
            let seen = if now.saturating_since(v.last_seen()) >= STAMP_READ_AFTER {
                self.last_seen(&i)
            } else {
                None
            };
            if !established(v) && v.initial.proto == Proto::Tcp {
                // A FIN or RST went through the engine: the rest of the connection too.
                by.remove(&v.initial);
                self.uninstall(&i);
            } else if i.version != self.published.version() {
                // Routes or neighbours changed. Most changes (any neighbour's state, a
                // route elsewhere) leave this session's next hops as they were: then only
                // the version is taken, no map is touched. Otherwise the entries are
                // replaced, or left to the slow path when a next hop is gone.
                let version = self.published.version();
                let view = self.published.current();
                if self.hops(v, &view) == Some(i.hops) {
                    if let Some(e) = by.get_mut(&v.initial) {
                        e.version = version;
                    }
                } else {
                    by.remove(&v.initial);
                    self.uninstall(&i);
                    let installed = self.install(v, &mut by);
                    if installed {
                        self.installed.fetch_add(1, Ordering::Relaxed);
                    }
                    return Visit {
                        seen,
                        installed,
                        ..Visit::default()
                    };
                }
            }
            return Visit {
                seen,
                ..Visit::default()
            };
        }
        if !established(v) {
            // Its next packet through the engine hints it again.
            return Visit {
                pending: true,
                ..Visit::default()
            };
        }
        if by.len() >= self.max_sessions {
            self.refused_full.fetch_add(1, Ordering::Relaxed);
            return Visit::default();
        }
        let installed = self.install(v, &mut by);
        if installed {
            self.installed.fetch_add(1, Ordering::Relaxed);
        }
        Visit {
            installed,
            ..Visit::default()
        }
    }

    fn remove(&self, v: &SessionView) {
        let mut by = self.lock();
        if let Some(i) = by.remove(&v.initial) {
            self.uninstall(&i);
        }
    }
}

/// Whether the AF_XDP ports load their XDP program with the fast path's maps: always with
/// `xdp_fast_path = "on"`, never with `"off"`; with `"auto"` unless an interface is a
/// veth. A veth drops the frames XDP redirects into it, silently, unless its peer runs
/// NAPI (GRO or an XDP program of its own), and the peer is out of the gateway's sight
/// (often in another namespace); the tc fast path of AF_PACKET has no such condition.
pub(crate) fn xdp_wanted(
    gw: &super::GatewayConfig,
    links: &[Link; 2],
    log: &dyn Fn(String),
) -> bool {
    use super::FastPathSwitch;
    match gw.xdp_fast_path {
        FastPathSwitch::Off => false,
        FastPathSwitch::On => true,
        FastPathSwitch::Auto => match links
            .iter()
            .find(|l| io::host::driver(&l.name).is_ok_and(|d| d == "veth"))
        {
            Some(l) => {
                log(format!(
                    "xdp fast path: off ({} is a veth, whose peer drops XDP-redirected frames \
                     unless it runs NAPI; xdp_fast_path = \"on\" when it does, or backend = \
                     \"af_packet\" for the tc fast path)",
                    l.name
                ));
                false
            }
            None => true,
        },
    }
}

/// Builds the offload over the AF_XDP ports' maps and attaches it to the NAT44 tables,
/// when `[gateway] xdp_fast_path` asks for it and it can be had ("auto": logged and off
/// otherwise; "on": a start-up error).
#[allow(clippy::too_many_arguments)]
pub(crate) fn attach(
    gw: &super::GatewayConfig,
    opened: &super::open::Opened,
    shared: &engine::any::AnyMode,
    links: &[Link; 2],
    mtus: [u32; 2],
    published: &Arc<Published>,
    now: Timestamp,
    log: &(dyn Fn(String) + Sync),
) -> Result<Option<Arc<XdpFastPath>>, super::LiveError> {
    use super::FastPathSwitch;
    if gw.xdp_fast_path == FastPathSwitch::Off {
        return Ok(None);
    }
    let refuse = |why: String| -> Result<Option<Arc<XdpFastPath>>, super::LiveError> {
        if gw.xdp_fast_path == FastPathSwitch::On {
            return Err(super::LiveError::Io {
                what: "xdp fast path (xdp_fast_path = \"on\")",
                source: std::io::Error::other(why),
            });
        }
        log(format!("xdp fast path: off ({why})"));
        Ok(None)
    };
    let (kind, table, decrement_ttl, what) = match shared {
        engine::any::AnyMode::Nat44(nat) => (
            Kind::Nat44,
            Some(Arc::clone(nat)),
            nat.config().decrement_ttl,
            "established NAT44 TCP/UDP flows",
        ),
        engine::any::AnyMode::Nat64(nat) => (
            Kind::Nat64(Arc::clone(nat)),
            Some(Arc::clone(nat.nat44())),
            nat.options().decrement_ttl,
            "established NAT64 TCP/UDP flows",
        ),
        // The mappings are attached by the caller, to the control state that edits them.
        engine::any::AnyMode::Ila(ila) => (
            Kind::Ila(Arc::clone(&ila.router)),
            None,
            true,
            "ILA mappings (TCP/UDP/ICMPv6)",
        ),
        // The flows are taken up by `siit_sync`, on a thread of the caller's; the workers
        // hint only once the offload is sure to run (below).
        engine::any::AnyMode::Siit(siit) => (
            Kind::Siit(Box::new(siit.clone()), Arc::default()),
            None,
            siit.config().options.decrement_ttl,
            "SIIT/CLAT TCP/UDP flows",
        ),
    };
    // The hook: the AF_XDP ports' XDP program, or on AF_PACKET a tc program of its own
    // (io::tcfast) in front of receive sockets bound to the translated IP versions.
    let (a, b, hook) = match opened {
        super::open::Opened::Xdp(ports) => {
            let Some(first) = ports.first() else {
                return refuse("no port".into());
            };
            // Loaded without it: `xdp_wanted` or the ports' fallback said why already.
            let (Some(a), Some(b)) = (first[0].fast_path(), first[1].fast_path()) else {
                return Ok(None);
            };
            if gw.xdp_fast_path == FastPathSwitch::Auto
                && !(first[0].native_mode() && first[1].native_mode())
            {
                return refuse("the XDP program runs in generic (skb) mode".into());
            }
            (a, b, "XDP")
        }
        // The tc program was attached before the sockets were opened (fastpath_tc), or
        // could not be, which open_ports has said already.
        super::open::Opened::Packet(_, Some(h), _) => {
            (h[0].fast_path(), h[1].fast_path(), "tc ingress")
        }
        super::open::Opened::Packet(_, None, _) => return Ok(None),
    };
    let fast = XdpFastPath::new(
        kind,
        [a, b],
        links.clone(),
        mtus,
        Arc::clone(published),
        decrement_ttl,
        now,
    );
    let fast = match fast {
        Ok(mut f) => {
            f.flow_idle = gw.xdp_fast_path_idle;
            Arc::new(f)
        }
        Err(e) => return refuse(format!("devmap: {e}")),
    };
    if let Some(table) = table {
        if !table.attach_offload(Arc::clone(&fast) as Arc<dyn SessionOffload>) {
            return refuse("an offload is attached already".into());
        }
    }
    if let Kind::Siit(siit, hints) = &fast.kind {
        if !siit.attach_offload(Arc::clone(hints)) {
            return refuse("an offload is attached already".into());
        }
    }
    let (unit, when) = match fast.kind {
        Kind::Ila(_) => ("mappings", "as their next hops resolve".to_string()),
        Kind::Siit(..) => (
            "flow directions on each interface",
            format!(
                "each at its second packet through the engine, within {} ms; taken out after {} s idle",
                super::fastpath_siit::SYNC_EVERY.as_millis(),
                fast.flow_idle.as_secs()
            ),
        ),
        _ => (
            "sessions",
            "the reaper offloads them within 10 ms of their being established".to_string(),
        ),
    };
    log(format!(
        "xdp fast path: on for {what} between {} and {} at the {hook} hook (at most {} {unit}; {when})",
        links[0].name, links[1].name, fast.max_sessions
    ));
    Ok(Some(fast))
}
