//! The XDP fast path's brain-side half (issue 15 item 2): which NAT44 sessions the
//! steering program forwards by itself, installed and removed on the engine's word.
//!
//! The engine stays the brain: its reaper shows this offload every live session on
//! each walk (every 200 ms, off the per-packet path: no worker ever waits on a map
//! update), and a session that is established — TCP in `ESTABLISHED`, UDP once its
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
//! Last-seen: the program stamps CLOCK_MONOTONIC; the walk converts it to the engine's
//! clock and the reaper refreshes the session with it, so an active fast-path flow
//! never expires.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use conntrack::session::HAIRPIN;
use conntrack::tcp::ConnState;
use conntrack::{Proto, SessionView, Timestamp, Tuple};
use engine::nat44::SessionOffload;
use io::afxdp::fast_path::{monotonic_ns, FastPath, FastRewrite, FlowTuple, PROTO_TCP, PROTO_UDP};
type FxHashMap<K, V> = std::collections::HashMap<K, V>;

use super::netview::{Link, NetView, Published};

/// How stale the engine's last-seen time of an offloaded session gets before the walk
/// reads the program's stamps (the shortest idle timeout, ICMP's, is 60 s by default).
const STAMP_READ_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// The flows one session installed: (link it arrives on, tuple) per direction.
#[derive(Clone, Copy, Debug)]
struct Installed {
    dirs: [(usize, FlowTuple); 2],
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
    // -- per direction and misses (issue 15, fastlab) --
    /// Packets forwarded by the program per direction: [outbound (arrived inside),
    /// inbound (arrived outside)].
    pub dir_packets: [u64; 2],
    /// Their bytes (Ethernet frames), per direction.
    pub dir_bytes: [u64; 2],
    /// IPv4 TCP/UDP packets the program looked up and did not find (sent to the AF_XDP
    /// socket: a flow not offloaded, or not yet), both interfaces.
    pub misses: u64,
}

/// The offload: both interfaces' maps and what was installed in them.
pub(crate) struct XdpFastPath {
    /// Per link (inside, outside): the map of flows arriving there.
    maps: [Arc<FastPath>; 2],
    links: [Link; 2],
    mtus: [u32; 2],
    published: Arc<Published>,
    decrement_ttl: bool,
    /// Sessions the maps hold at most (two entries each).
    max_sessions: usize,
    /// Engine clock minus CLOCK_MONOTONIC, in ns.
    offset: i128,
    by_session: Mutex<FxHashMap<Tuple, Installed>>,
    installed: AtomicU64,
    removed: AtomicU64,
    refused_full: AtomicU64,
    errors: AtomicU64,
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
    pub fn new(
        maps: [Arc<FastPath>; 2],
        links: [Link; 2],
        mtus: [u32; 2],
        published: Arc<Published>,
        decrement_ttl: bool,
        now: Timestamp,
    ) -> std::io::Result<Self> {
        let ifindexes = [links[0].index, links[1].index];
        for m in &maps {
            m.set_ports(ifindexes)?;
        }
        let max_sessions = (maps[0].capacity().min(maps[1].capacity()) / 2).max(1) as usize;
        Ok(XdpFastPath {
            maps,
            links,
            mtus,
            published,
            decrement_ttl,
            max_sessions,
            offset: i128::from(now.as_nanos()) - i128::from(monotonic_ns()),
            by_session: Mutex::new(FxHashMap::new()),
            installed: AtomicU64::new(0),
            removed: AtomicU64::new(0),
            refused_full: AtomicU64::new(0),
            errors: AtomicU64::new(0),
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
            sessions: self.lock().len() as u64,
            installed: self.installed.load(Ordering::Relaxed),
            removed: self.removed.load(Ordering::Relaxed),
            refused_full: self.refused_full.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FxHashMap<Tuple, Installed>> {
        self.by_session.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The rewrite of packets arriving on link `ingress` as `from`, leaving as `to`: by
    /// the other link, to the next hop the routes and neighbours give for `to.dst`.
    fn rewrite(&self, view: &NetView, ingress: usize, to: FlowTuple) -> Option<FastRewrite> {
        let (ifindex, hop) = view.routes.lookup(to.dst)?;
        let egress = 1 - ingress;
        if self.links[egress].index != ifindex {
            return None;
        }
        let dst_mac = view.neighbors.get(ifindex, hop)?;
        Some(FastRewrite {
            to,
            egress: egress as u32,
            dst_mac,
            src_mac: self.links[egress].mac,
            decrement_ttl: self.decrement_ttl,
            mtu: self.mtus[egress].min(u32::from(u16::MAX)) as u16,
        })
    }

    /// Installs both directions of `v`; whether it is offloaded now.
    fn install(&self, v: &SessionView, by: &mut FxHashMap<Tuple, Installed>) -> bool {
        let (Some(orig), Some(orig_to)) = (flow(&v.initial), flow(&v.revised)) else {
            return false;
        };
        let (Some(reply), Some(reply_to)) =
            (flow(&v.revised.reversed()), flow(&v.initial.reversed()))
        else {
            return false;
        };
        let from_inside = v.flags & conntrack::session::FROM_INSIDE != 0;
        let first = if from_inside { 0 } else { 1 };
        let version = self.published.version();
        let view = self.published.current();
        let (Some(r0), Some(r1)) = (
            self.rewrite(&view, first, orig_to),
            self.rewrite(&view, 1 - first, reply_to),
        ) else {
            return false;
        };
        let dirs = [(first, orig), (1 - first, reply)];
        for ((link, from), r) in dirs.iter().zip([r0, r1]) {
            if self.maps[*link].insert(from, &r).is_err() {
                self.errors.fetch_add(1, Ordering::Relaxed);
                for (l, f) in &dirs {
                    self.maps[*l].remove(f);
                }
                return false;
            }
        }
        by.insert(v.initial, Installed { dirs, version });
        true
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
    fn visit(&self, v: &SessionView, now: Timestamp) -> Option<Timestamp> {
        if v.flags & HAIRPIN != 0 {
            return None;
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
                // Routes or neighbours changed: take the MACs again (or leave it to the
                // slow path when the next hop is gone).
                by.remove(&v.initial);
                self.uninstall(&i);
                if self.install(v, &mut by) {
                    self.installed.fetch_add(1, Ordering::Relaxed);
                }
            }
            return seen;
        }
        if !established(v) {
            return None;
        }
        if by.len() >= self.max_sessions {
            self.refused_full.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if self.install(v, &mut by) {
            self.installed.fetch_add(1, Ordering::Relaxed);
        }
        None
    }

    fn remove(&self, v: &SessionView) {
        let mut by = self.lock();
        if let Some(i) = by.remove(&v.initial) {
            self.uninstall(&i);
        }
    }
}

/// Builds the offload over the AF_XDP ports' maps and attaches it to the NAT44 tables,
/// when `[gateway] xdp_fast_path` asks for it and it can be had ("auto": logged and off
/// otherwise; "on": a start-up error).
#[allow(clippy::too_many_arguments)]
pub(crate) fn attach(
    gw: &super::GatewayConfig,
    opened: &super::open::Opened,
    shared: &engine::mode::any::AnyMode,
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
    let engine::mode::any::AnyMode::Nat44(nat) = shared else {
        return refuse("NAT44 only in this version".into());
    };
    let super::open::Opened::Xdp(ports) = opened else {
        return refuse("the AF_XDP backend is not in use".into());
    };
    let Some(first) = ports.first() else {
        return refuse("no port".into());
    };
    let (Some(a), Some(b)) = (first[0].fast_path(), first[1].fast_path()) else {
        return refuse("the XDP program was loaded without it".into());
    };
    if gw.xdp_fast_path == FastPathSwitch::Auto
        && !(first[0].native_mode() && first[1].native_mode())
    {
        return refuse("the XDP program runs in generic (skb) mode".into());
    }
    let fast = XdpFastPath::new(
        [a, b],
        links.clone(),
        mtus,
        Arc::clone(published),
        nat.config().decrement_ttl,
        now,
    );
    let fast = match fast {
        Ok(f) => Arc::new(f),
        Err(e) => return refuse(format!("devmap: {e}")),
    };
    if !nat.attach_offload(Arc::clone(&fast) as Arc<dyn SessionOffload>) {
        return refuse("an offload is attached already".into());
    }
    log(format!(
        "xdp fast path: on for established NAT44 TCP/UDP flows between {} and {} (at most {} sessions; the reaper offloads them within 200 ms)",
        links[0].name, links[1].name, fast.max_sessions
    ));
    Ok(Some(fast))
}
