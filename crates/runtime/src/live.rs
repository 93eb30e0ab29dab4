//! The live gateway: `quicknat run`. Workers receive Ethernet frames on the inside and
//! outside interfaces, translate them in place in the receive ring, pick the next hop
//! from the kernel's routes and neighbour table, and transmit. The kernel keeps its own
//! job: ARP, the interfaces' own addresses, management traffic.
//!
//! Threads: one worker per core (PACKET_FANOUT spreads flows), the reaper, and a control
//! thread that follows the kernel's routes and neighbours over rtnetlink and publishes
//! snapshots the workers pick up between batches (no lock on the packet path).

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use conntrack::Timestamp;
use engine::config::Nat44Config;
use engine::nat44::{Nat44Shared, Nat44Worker};
use engine::{Counters, Direction, Verdict};
use io::afpacket::{AfPacket, AfPacketConfig, AfPacketTx, RxMeta};
use io::afxdp::{AfXdp, AfXdpConfig};
use io::netlink::{self, NeighborCache, Netlink, RouteTable};
use io::rawip::RawIpv4;

/// Which packet I/O backend carries the frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// AF_PACKET with TPACKET_V3 receive rings (works on any interface).
    AfPacket,
    /// AF_XDP in copy mode (falls back to AF_PACKET with a warning where unavailable).
    AfXdp,
}

/// The `[gateway]` settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayConfig {
    /// Interface facing the inside network.
    pub inside: String,
    /// Interface facing the outside.
    pub outside: String,
    /// I/O backend.
    pub backend: Backend,
    /// Worker threads.
    pub workers: usize,
    /// Spin instead of sleeping when idle.
    pub busy_poll: bool,
    /// Time between counter log lines.
    pub stats_interval: Duration,
    /// Drop transit IPv4 at the kernel's ingress hook once quicknat has its copy.
    pub kernel_bypass: bool,
    /// Turn receive/segmentation offloads off on both interfaces at start-up.
    pub offloads_off: bool,
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The NAT configuration was refused.
    #[error("configuration: {0}")]
    Config(#[from] engine::config::ConfigError),
    /// An interface is missing or unusable.
    #[error("interface {name}: {source}")]
    Interface {
        /// The interface.
        name: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// Netlink, sockets or threads failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// What the system said.
        source: std::io::Error,
    },
}

/// Counters of the I/O side of one worker (the engine's are separate).
#[derive(Clone, Debug, Default)]
pub struct IoCounters {
    /// Frames received on the inside / outside interface.
    pub rx: [u64; 2],
    /// Frames transmitted on the inside / outside interface.
    pub tx: [u64; 2],
    /// Frames left to the kernel: not IPv4 (ARP, IPv6), or for the gateway's own addresses.
    pub to_kernel: u64,
    /// Translated packets handed to the kernel because the next hop's MAC was unknown.
    pub via_kernel: u64,
    /// Translated packets with no route out of either interface.
    pub no_route: u64,
    /// Frames larger than the MTU (GSO/GRO super-packets): dropped, see the log hint.
    pub oversize: u64,
    /// Partial checksums (offload) completed in software.
    pub csum_completed: u64,
    /// Frames the transmit queue refused.
    pub tx_dropped: u64,
}

impl IoCounters {
    fn merge(&mut self, o: &IoCounters) {
        for i in 0..2 {
            self.rx[i] += o.rx[i];
            self.tx[i] += o.tx[i];
        }
        self.to_kernel += o.to_kernel;
        self.via_kernel += o.via_kernel;
        self.no_route += o.no_route;
        self.oversize += o.oversize;
        self.csum_completed += o.csum_completed;
        self.tx_dropped += o.tx_dropped;
    }
}

/// An interface as the data path needs it.
#[derive(Clone, Debug)]
struct Link {
    name: String,
    index: u32,
    mac: [u8; 6],
    mtu: usize,
}

impl Link {
    fn lookup(name: &str) -> Result<Self, LiveError> {
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
#[derive(Debug, Default)]
struct NetView {
    routes: Option<RouteTable>,
    neighbors: Option<NeighborCache>,
    /// The gateway's own addresses: traffic to them is the kernel's.
    local: HashSet<Ipv4Addr>,
}

/// Published snapshots: workers check `version` (one load) per batch and take the new
/// snapshot only when it changed.
#[derive(Debug, Default)]
struct Published {
    version: AtomicU64,
    view: Mutex<Arc<NetView>>,
}

impl Published {
    fn publish(&self, v: NetView) {
        if let Ok(mut g) = self.view.lock() {
            *g = Arc::new(v);
        }
        self.version.fetch_add(1, Ordering::Release);
    }

    fn current(&self) -> Arc<NetView> {
        self.view.lock().map(|g| Arc::clone(&g)).unwrap_or_default()
    }
}

fn read_net(inside: &Link, outside: &Link, nl: &mut Netlink) -> std::io::Result<NetView> {
    let routes = nl.dump_routes()?;
    let neigh = nl.dump_neighbors()?;
    let mut local = HashSet::new();
    for l in [inside, outside] {
        for (a, _) in netlink::if_ipv4_addrs(l.index)? {
            local.insert(a);
        }
    }
    Ok(NetView {
        routes: Some(RouteTable::new(&routes)),
        neighbors: Some(NeighborCache::from_dump(&neigh)),
        local,
    })
}

/// An nftables netdev ingress table that drops transit IPv4 after AF_PACKET has taken its
/// copy (packet taps run before the ingress hook), so the kernel does not also route and
/// discard every packet quicknat forwards. Removed on drop.
#[derive(Debug)]
struct IngressFilter {
    table: String,
}

impl IngressFilter {
    fn install(ifaces: &[&str], local: &[Ipv4Addr]) -> std::io::Result<Self> {
        let table = format!("quicknat_{}", std::process::id());
        let nft = |args: &[&str]| -> std::io::Result<()> {
            let out = std::process::Command::new("nft").args(args).output()?;
            if out.status.success() {
                Ok(())
            } else {
                Err(std::io::Error::other(format!(
                    "nft {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                )))
            }
        };
        nft(&["add", "table", "netdev", &table])?;
        let f = IngressFilter { table };
        let mut keep: Vec<String> = local.iter().map(Ipv4Addr::to_string).collect();
        keep.push("255.255.255.255".into());
        keep.push("224.0.0.0/4".into());
        let set = format!("{{ {} }}", keep.join(", "));
        for (i, dev) in ifaces.iter().enumerate() {
            let chain = format!("in{i}");
            nft(&[
                "add",
                "chain",
                "netdev",
                &f.table,
                &chain,
                &format!("{{ type filter hook ingress device \"{dev}\" priority -500; }}"),
            ])?;
            nft(&[
                "add", "rule", "netdev", &f.table, &chain, "meta", "protocol", "ip", "ip", "daddr",
                "!=", &set, "drop",
            ])?;
        }
        Ok(f)
    }
}

impl Drop for IngressFilter {
    fn drop(&mut self) {
        let _ = std::process::Command::new("nft")
            .args(["delete", "table", "netdev", &self.table])
            .output();
    }
}

/// The summary `run` returns at shutdown.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Engine counters, all workers and the reaper.
    pub engine: Counters,
    /// I/O counters, all workers.
    pub io: IoCounters,
    /// Sessions live at shutdown.
    pub sessions: usize,
}

/// Runs the gateway until `stop` is set. `log` receives one line per event worth telling
/// an operator (start-up facts, periodic counters, warnings).
pub fn run(
    nat: Nat44Config,
    gw: &GatewayConfig,
    stop: Arc<AtomicBool>,
    log: &(dyn Fn(String) + Sync),
) -> Result<Summary, LiveError> {
    let inside = Link::lookup(&gw.inside)?;
    let outside = Link::lookup(&gw.outside)?;
    let shared = Nat44Shared::new(nat, gw.workers)?;
    let mut nl = Netlink::open().map_err(|source| LiveError::Io {
        what: "rtnetlink",
        source,
    })?;
    let published = Arc::new(Published::default());
    published.publish(
        read_net(&inside, &outside, &mut nl).map_err(|source| LiveError::Io {
            what: "reading routes and neighbours",
            source,
        })?,
    );
    let events = Netlink::subscribe().map_err(|source| LiveError::Io {
        what: "rtnetlink subscription",
        source,
    })?;
    // Open every socket before starting threads, so start-up errors are reported here.
    let fanout = |base: u16| {
        if gw.workers > 1 {
            Some(base.wrapping_add(std::process::id() as u16))
        } else {
            None
        }
    };
    let local: Vec<Ipv4Addr> = published.current().local.iter().copied().collect();
    let mut use_xdp = gw.backend == Backend::AfXdp;
    let mut socks: Vec<Ports> = Vec::new();
    if use_xdp {
        for id in 0..gw.workers {
            let open = |l: &Link| {
                let mut cfg = AfXdpConfig::new(l.name.clone());
                cfg.queue = id as u32;
                cfg.local_v4 = local.clone();
                AfXdp::open(&cfg)
            };
            match (open(&inside), open(&outside)) {
                (Ok(a), Ok(b)) => socks.push(Ports::Xdp([a, b])),
                (Err(e), _) | (_, Err(e)) => {
                    log(format!(
                        "warning: AF_XDP unavailable ({e}); falling back to AF_PACKET"
                    ));
                    socks.clear();
                    use_xdp = false;
                    break;
                }
            }
        }
    }
    if !use_xdp {
        for _ in 0..gw.workers {
            let open = |l: &Link, base: u16| {
                let mut cfg = AfPacketConfig::new(l.name.clone());
                cfg.fanout = fanout(base);
                cfg.ignore_outgoing = true;
                AfPacket::open(&cfg).map_err(|source| LiveError::Interface {
                    name: l.name.clone(),
                    source,
                })
            };
            let tx = |l: &Link| {
                AfPacketTx::open(&l.name).map_err(|source| LiveError::Interface {
                    name: l.name.clone(),
                    source,
                })
            };
            socks.push(Ports::Packet {
                rx: [open(&inside, 0x5100)?, open(&outside, 0x5200)?],
                tx: [tx(&inside)?, tx(&outside)?],
            });
        }
    }
    if gw.offloads_off {
        // quicknat translates whole frames: a receive offload that merges them (GRO, LRO)
        // would hand it 64 KB super-packets it cannot send on. Turn them off and say so.
        for l in [&inside, &outside] {
            let out = std::process::Command::new("ethtool")
                .args([
                    "-K", &l.name, "gro", "off", "lro", "off", "tso", "off", "gso", "off", "tx",
                    "off",
                ])
                .output();
            match out {
                Ok(o) if o.status.success() || o.stderr.is_empty() => {}
                Ok(o) => log(format!("note: ethtool -K {}: {}", l.name, String::from_utf8_lossy(&o.stderr).trim())),
                Err(e) => log(format!("warning: offloads left on {} (ethtool: {e}); super-packets will be dropped as oversize", l.name)),
            }
        }
        log(format!(
            "offloads: gro, lro, tso, gso and tx checksumming turned off on {} and {} (set offloads_off = false to keep them)",
            inside.name, outside.name
        ));
    }
    let _filter = if gw.kernel_bypass && !use_xdp {
        match IngressFilter::install(&[&inside.name, &outside.name], &local) {
            Ok(f) => {
                log(format!(
                    "kernel bypass: nftables netdev ingress table {} drops transit IPv4 on {} and {} after quicknat's AF_PACKET copy (the kernel would only drop it later; ARP, IPv6 and traffic to {:?} still reach the kernel)",
                    f.table, inside.name, outside.name, local
                ));
                Some(f)
            }
            Err(e) => {
                log(format!("warning: kernel bypass filter not installed ({e}); the kernel also processes every transit packet"));
                None
            }
        }
    } else {
        None
    };
    let raw = RawIpv4::open().map_err(|source| LiveError::Io {
        what: "raw IPv4 socket",
        source,
    })?;
    log(format!(
        "quicknat: NAT44 on inside {} (index {}, mtu {}) and outside {} (index {}, mtu {}), {} worker(s), {}{}",
        inside.name,
        inside.index,
        inside.mtu,
        outside.name,
        outside.index,
        outside.mtu,
        gw.workers,
        if use_xdp { "AF_XDP (copy mode)" } else { "AF_PACKET TPACKET_V3" },
        if gw.busy_poll { ", busy polling" } else { "" }
    ));
    let base = Instant::now();
    let clock = move || Timestamp::from_nanos(base.elapsed().as_nanos() as u64 + 1_000_000_000);
    let (probe_tx, probe_rx) = mpsc::channel::<(u32, Ipv4Addr)>();
    let snapshots: Vec<Arc<Mutex<(Counters, IoCounters)>>> =
        (0..gw.workers).map(|_| Arc::default()).collect();
    let raw = Arc::new(Mutex::new(raw));
    let links = [inside.clone(), outside.clone()];
    std::thread::scope(|s| -> Result<(), LiveError> {
        // Control: follow the kernel's routes and neighbours; resolve neighbours on request.
        {
            let (stop, published, links) =
                (Arc::clone(&stop), Arc::clone(&published), links.clone());
            let mut events = events;
            s.spawn(move || {
                control(
                    &mut nl,
                    &mut events,
                    &links,
                    &published,
                    &probe_rx,
                    &stop,
                    log,
                )
            });
        }
        // Reaper.
        {
            let (stop, shared) = (Arc::clone(&stop), Arc::clone(&shared));
            s.spawn(move || {
                let mut r = shared.reaper();
                while !stop.load(Ordering::Relaxed) {
                    r.handle_timeout(clock());
                    std::thread::sleep(Duration::from_millis(200));
                }
            });
        }
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        for (id, ports) in socks.into_iter().enumerate() {
            let ctx = WorkerCtx {
                worker: shared.worker(id),
                ports,
                links: links.clone(),
                published: Arc::clone(&published),
                probe: probe_tx.clone(),
                raw: Arc::clone(&raw),
                snapshot: Arc::clone(&snapshots[id]),
                io: IoCounters::default(),
                busy_poll: gw.busy_poll,
            };
            let stop = Arc::clone(&stop);
            let core = cores.get(id % cores.len().max(1)).copied();
            s.spawn(move || {
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                ctx.run(&stop, &clock);
            });
        }
        // Periodic counters until stopped.
        let mut last = Instant::now();
        let mut warned_oversize = false;
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
            if last.elapsed() >= gw.stats_interval {
                last = Instant::now();
                let (e, io) = totals(&snapshots);
                log(stats_line(&e, &io, shared.session_count()));
                if io.oversize > 0 && !warned_oversize {
                    warned_oversize = true;
                    log(format!("warning: {} frames larger than the MTU arrived (GRO/GSO super-packets); turn offloads off on {} and {}: ethtool -K IF gro off tso off gso off", io.oversize, inside.name, outside.name));
                }
            }
        }
        Ok(())
    })?;
    let (engine, io) = totals(&snapshots);
    Ok(Summary {
        engine,
        io,
        sessions: shared.session_count(),
    })
}

fn totals(snapshots: &[Arc<Mutex<(Counters, IoCounters)>>]) -> (Counters, IoCounters) {
    let (mut e, mut io) = (Counters::default(), IoCounters::default());
    for s in snapshots {
        if let Ok(g) = s.lock() {
            e.merge(&g.0);
            io.merge(&g.1);
        }
    }
    (e, io)
}

/// One line of counters for the log.
pub fn stats_line(e: &Counters, io: &IoCounters, sessions: usize) -> String {
    let drops: Vec<String> = e
        .drop_summary()
        .iter()
        .map(|(r, n)| format!("{r}={n}"))
        .collect();
    format!(
        "stats: rx in={} out={} tx in={} out={} forwarded={} sessions={} to_kernel={} via_kernel={} no_route={} oversize={} csum_completed={} tx_dropped={} drops[{}]",
        io.rx[0],
        io.rx[1],
        io.tx[0],
        io.tx[1],
        e.forwarded,
        sessions,
        io.to_kernel,
        io.via_kernel,
        io.no_route,
        io.oversize,
        io.csum_completed,
        io.tx_dropped,
        drops.join(" ")
    )
}

fn control(
    nl: &mut Netlink,
    events: &mut Netlink,
    links: &[Link; 2],
    published: &Published,
    probes: &mpsc::Receiver<(u32, Ipv4Addr)>,
    stop: &AtomicBool,
    log: &(dyn Fn(String) + Sync),
) {
    let mut last_probe: HashMap<(u32, Ipv4Addr), Instant> = HashMap::new();
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
                let _ = nl.probe_neighbor(ifindex, addr);
            }
        }
        if changed {
            match read_net(&links[0], &links[1], nl) {
                Ok(v) => published.publish(v),
                Err(e) => log(format!("warning: reading routes and neighbours: {e}")),
            }
        }
    }
}

/// One worker's packet I/O on both interfaces (index 0 inside, 1 outside).
// One value per worker, built once and never moved on the packet path: size is irrelevant.
#[allow(clippy::large_enum_variant)]
enum Ports {
    /// AF_PACKET: receive rings and transmit sockets.
    Packet {
        rx: [AfPacket; 2],
        tx: [AfPacketTx; 2],
    },
    /// AF_XDP: one socket per interface, receiving and transmitting.
    Xdp([AfXdp; 2]),
}

struct WorkerCtx {
    worker: Nat44Worker,
    ports: Ports,
    links: [Link; 2],
    published: Arc<Published>,
    probe: mpsc::Sender<(u32, Ipv4Addr)>,
    raw: Arc<Mutex<RawIpv4>>,
    snapshot: Arc<Mutex<(Counters, IoCounters)>>,
    io: IoCounters,
    busy_poll: bool,
}

impl WorkerCtx {
    fn run(mut self, stop: &AtomicBool, clock: &dyn Fn() -> Timestamp) {
        let mut view = self.published.current();
        let mut version = self.published.version.load(Ordering::Acquire);
        let mut last_snapshot = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let v = self.published.version.load(Ordering::Acquire);
            if v != version {
                version = v;
                view = self.published.current();
            }
            let now = clock();
            let mut seen = 0;
            for side in 0..2 {
                let dir = if side == 0 {
                    Direction::Outbound
                } else {
                    Direction::Inbound
                };
                let mut handler = FrameHandler {
                    worker: &mut self.worker,
                    links: &self.links,
                    view: &view,
                    probe: &self.probe,
                    raw: &self.raw,
                    io: &mut self.io,
                    now,
                    side,
                };
                let got = match &mut self.ports {
                    Ports::Packet { rx, tx } => {
                        rx[side].recv_batch(Duration::ZERO, |frame, meta| {
                            if let Some(out) = handler.frame(frame, meta, dir) {
                                let ok = tx[out].send(frame).is_ok();
                                handler.sent(out, ok);
                            }
                        })
                    }
                    Ports::Xdp(xsk) => {
                        let (a, b) = xsk.split_at_mut(1);
                        let (me, other) = if side == 0 {
                            (&mut a[0], &mut b[0])
                        } else {
                            (&mut b[0], &mut a[0])
                        };
                        me.recv_batch(Duration::ZERO, |frame| {
                            let meta = RxMeta::whole(frame.len());
                            match handler.frame(frame, &meta, dir) {
                                // Hairpin: back out of the interface it came in on, no copy.
                                Some(out) if out == side => {
                                    handler.sent(out, true);
                                    Some(frame.len())
                                }
                                Some(out) => {
                                    let ok = other.send(frame).is_ok();
                                    handler.sent(out, ok);
                                    None
                                }
                                None => None,
                            }
                        })
                    }
                };
                match got {
                    Ok(n) => seen += n,
                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            }
            match &mut self.ports {
                Ports::Packet { tx, .. } => {
                    for t in tx.iter_mut() {
                        let _ = t.flush();
                    }
                    self.io.tx_dropped = tx.iter().map(AfPacketTx::dropped).sum();
                }
                Ports::Xdp(xsk) => {
                    for x in xsk.iter_mut() {
                        let _ = x.flush();
                    }
                }
            }
            self.worker.quiescent();
            if last_snapshot.elapsed() > Duration::from_millis(500) {
                last_snapshot = Instant::now();
                if let Ok(mut g) = self.snapshot.try_lock() {
                    *g = (self.worker.counters().clone(), self.io.clone());
                }
            }
            if seen == 0 && !self.busy_poll {
                // Idle: hold no references while waiting, then wait on both rings.
                self.worker.offline();
                let _ = match &self.ports {
                    Ports::Packet { rx, .. } => {
                        io::afpacket::wait_readable(&[&rx[0], &rx[1]], Duration::from_millis(50))
                    }
                    Ports::Xdp(x) => {
                        io::afxdp::wait_readable(&[&x[0], &x[1]], Duration::from_millis(50))
                    }
                };
                self.worker.quiescent();
            }
        }
        if let Ok(mut g) = self.snapshot.lock() {
            *g = (self.worker.counters().clone(), self.io.clone());
        }
        self.worker.offline();
    }
}

struct FrameHandler<'a> {
    worker: &'a mut Nat44Worker,
    links: &'a [Link; 2],
    view: &'a NetView,
    probe: &'a mpsc::Sender<(u32, Ipv4Addr)>,
    raw: &'a Mutex<RawIpv4>,
    io: &'a mut IoCounters,
    now: Timestamp,
    side: usize,
}

impl FrameHandler<'_> {
    /// Counts a transmission the caller made.
    fn sent(&mut self, out: usize, ok: bool) {
        if ok {
            self.io.tx[out] += 1;
        } else {
            self.io.tx_dropped += 1;
        }
    }

    /// Handles one received frame; returns the interface (0 inside, 1 outside) the
    /// rewritten frame must leave by, or `None` when it is dropped, left to the kernel or
    /// already handed to it.
    fn frame(&mut self, frame: &mut [u8], meta: &RxMeta, dir: Direction) -> Option<usize> {
        self.io.rx[self.side] += 1;
        let Some(l3) = crate::step::l3_offset(io::pcap::LinkType::Ethernet, frame) else {
            self.io.to_kernel += 1; // ARP and friends: the kernel's business
            return None;
        };
        let pkt = &frame[l3..];
        if pkt.first().map(|b| b >> 4) != Some(4) || pkt.len() < 20 {
            self.io.to_kernel += 1;
            return None;
        }
        let dst = Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]);
        if self.view.local.contains(&dst) {
            self.io.to_kernel += 1; // management traffic to the gateway itself
            return None;
        }
        if meta.len > self.links[self.side].mtu + l3 {
            self.io.oversize += 1;
            return None;
        }
        if meta.csum_not_ready && io::afpacket::complete_checksum(frame, meta) {
            self.io.csum_completed += 1;
        }
        if self.worker.process(self.now, dir, &mut frame[l3..]) != Verdict::Forward {
            return None; // counted by the engine with its reason
        }
        let pkt = &frame[l3..];
        let dst = Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]);
        let Some((ifindex, next_hop)) = self.view.routes.as_ref().and_then(|r| r.lookup(dst))
        else {
            self.io.no_route += 1;
            return None;
        };
        let Some(out) = self.links.iter().position(|l| l.index == ifindex) else {
            self.io.no_route += 1;
            return None;
        };
        match self
            .view
            .neighbors
            .as_ref()
            .and_then(|n| n.get(ifindex, next_hop))
        {
            Some(mac) => {
                frame[0..6].copy_from_slice(&mac);
                frame[6..12].copy_from_slice(&self.links[out].mac);
                Some(out)
            }
            None => {
                // Unknown next hop: let the kernel route and resolve it this time, and ask
                // it to resolve the neighbour for the packets that follow.
                let _ = self.probe.send((ifindex, next_hop));
                if let Ok(mut raw) = self.raw.lock() {
                    raw.send(&frame[l3..]);
                }
                self.io.via_kernel += 1;
                None
            }
        }
    }
}
