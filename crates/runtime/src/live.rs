//! The live gateway: `quicknat run`. Workers receive Ethernet frames on the inside and
//! outside interfaces, translate them with the configured mode ([`crate::pipeline`]: NAT44,
//! NAT64, SIIT/CLAT or ILA), pick the next hop from the kernel's routes and neighbour table
//! (IPv4 and IPv6), and transmit. NAT44 and ILA translate in place in the receive ring;
//! the IPv4 <-> IPv6 modes translate into a per-worker buffer with headroom (the headers
//! change size) and transmit from there. The kernel keeps its own job: ARP and neighbour
//! discovery, the interfaces' own addresses, link-local and multicast traffic, and every
//! family a mode does not translate on that side.
//!
//! Threads: one worker per core (PACKET_FANOUT spreads flows), the reaper, and a control
//! thread that follows the kernel's routes and neighbours over rtnetlink and publishes
//! snapshots the workers pick up between batches (no lock on the packet path).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use conntrack::Timestamp;
use engine::config::ConfigError;
use engine::mode::any::{AnyMode, ModeConfig, ModeVisitor};
use engine::mode::{Family, Link as EgressLink};
use engine::{Counters, Direction, Egress, Emit, Frame, Mode, ModeWorker, Output};
use io::afpacket::{AfPacket, AfPacketConfig, AfPacketTx, RxMeta, VnetHdr};
use io::afxdp::{AfXdp, AfXdpConfig};
use io::netlink::{self, NeighborCache, Netlink, RouteTable};
use io::rawip::{RawIpv4, RawIpv6};

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
    /// The local control socket (ILA mapping updates), if any.
    pub control_socket: Option<std::path::PathBuf>,
    /// AF_PACKET + NAT44: pass GSO/GRO super-packets and partial checksums through with
    /// virtio-net headers (offloads stay on) instead of turning offloads off.
    pub gso: bool,
    /// Per link (inside, outside): the addresses the gateway sends its ICMP errors from
    /// there, overriding the interface's (and the only ones a capture replay knows).
    pub addresses: [Vec<IpAddr>; 2],
    /// Per link: an MTU below the interface's to hold packets to (and the only MTU a
    /// capture replay knows).
    pub mtu: [Option<u32>; 2],
}

impl GatewayConfig {
    /// The defaults for a gateway between `inside` and `outside`: AF_PACKET, one worker,
    /// counters every 10 s, kernel bypass, GSO pass-through, offloads off otherwise.
    pub fn new(inside: String, outside: String) -> Self {
        GatewayConfig {
            inside,
            outside,
            backend: Backend::AfPacket,
            workers: 1,
            busy_poll: false,
            stats_interval: Duration::from_secs(10),
            kernel_bypass: true,
            offloads_off: true,
            control_socket: None,
            gso: true,
            addresses: [Vec::new(), Vec::new()],
            mtu: [None, None],
        }
    }

    /// The links as the engine sees them from the configuration alone (a capture replay):
    /// the configured MTUs and, per family, the first configured address.
    pub fn egress(&self) -> Egress {
        let mut e = Egress::default();
        for (i, l) in e.links.iter_mut().enumerate() {
            l.mtu = self.mtu[i];
            l.addr4 = self.addresses[i].iter().find_map(|a| match a {
                IpAddr::V4(a) => Some(*a),
                IpAddr::V6(_) => None,
            });
            l.addr6 = self.addresses[i].iter().find_map(|a| match a {
                IpAddr::V6(a) => Some(*a),
                IpAddr::V4(_) => None,
            });
        }
        e
    }
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The translation mode's configuration was refused.
    #[error("configuration: {0}")]
    Mode(#[from] ConfigError),
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
    /// Frames left to the kernel: ARP and neighbour discovery, link-local and multicast,
    /// the gateway's own addresses, and families the mode does not translate on that side.
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
    /// GSO super-packets passed through (virtio-net headers; the kernel segments them).
    pub gso: u64,
}

impl IoCounters {
    /// Counts a transmission on interface `out` (or its failure).
    fn count_sent(&mut self, out: usize, ok: bool) {
        if ok {
            self.tx[out] += 1;
        } else {
            self.tx_dropped += 1;
        }
    }

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
        self.gso += o.gso;
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
    /// (A few addresses: a short list scans faster per packet than a hashed set.)
    local: Vec<Ipv4Addr>,
    /// The gateway's own IPv6 addresses.
    local6: Vec<Ipv6Addr>,
    /// Per interface (inside, outside): the address ICMP errors are sent from.
    addr4: [Option<Ipv4Addr>; 2],
    /// Per interface: the global IPv6 address ICMPv6 errors are sent from.
    addr6: [Option<Ipv6Addr>; 2],
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
    let routes = RouteTable::new(&nl.dump_routes()?).with_ipv6(&nl.dump_routes6()?);
    let neigh = NeighborCache::from_dump(&nl.dump_neighbors()?).with_ipv6(&nl.dump_neighbors6()?);
    let mut local = Vec::new();
    let mut local6 = Vec::new();
    let (mut addr4, mut addr6) = ([None; 2], [None; 2]);
    for (i, l) in [inside, outside].into_iter().enumerate() {
        for (a, _) in netlink::if_ipv4_addrs(l.index)? {
            if !local.contains(&a) {
                local.push(a);
            }
            addr4[i] = addr4[i].or(Some(a));
        }
        for (a, _) in netlink::if_ipv6_addrs(l.index)? {
            if !local6.contains(&a) {
                local6.push(a);
            }
            // A global address is preferred; a link-local one serves on-link senders.
            let global = (a.segments()[0] & 0xffc0) != 0xfe80;
            if global || addr6[i].is_none() {
                addr6[i] = if global {
                    addr6[i]
                        .filter(|x: &Ipv6Addr| (x.segments()[0] & 0xffc0) != 0xfe80)
                        .or(Some(a))
                } else {
                    Some(a)
                };
            }
        }
    }
    Ok(NetView {
        routes: Some(routes),
        neighbors: Some(neigh),
        local,
        local6,
        addr4,
        addr6,
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
    /// `ifaces`: each device with the IP version quicknat translates on it.
    fn install(
        ifaces: &[(&str, u8)],
        local: &[Ipv4Addr],
        local6: &[Ipv6Addr],
    ) -> std::io::Result<Self> {
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
        let mut keep6: Vec<String> = local6.iter().map(Ipv6Addr::to_string).collect();
        keep6.push("fe80::/10".into());
        keep6.push("ff00::/8".into());
        let set6 = format!("{{ {} }}", keep6.join(", "));
        for (i, (dev, family)) in ifaces.iter().enumerate() {
            let chain = format!("in{i}");
            nft(&[
                "add",
                "chain",
                "netdev",
                &f.table,
                &chain,
                &format!("{{ type filter hook ingress device \"{dev}\" priority -500; }}"),
            ])?;
            if *family == 4 {
                nft(&[
                    "add", "rule", "netdev", &f.table, &chain, "meta", "protocol", "ip", "ip",
                    "daddr", "!=", &set, "drop",
                ])?;
            } else {
                nft(&[
                    "add", "rule", "netdev", &f.table, &chain, "meta", "protocol", "ip6", "ip6",
                    "daddr", "!=", &set6, "drop",
                ])?;
            }
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
    mode: ModeConfig,
    gw: &GatewayConfig,
    stop: Arc<AtomicBool>,
    reload: Option<crate::control::ReloadFn>,
    reload_signal: Option<Arc<AtomicBool>>,
    log: &(dyn Fn(String) + Sync),
) -> Result<Summary, LiveError> {
    let inside = Link::lookup(&gw.inside)?;
    let outside = Link::lookup(&gw.outside)?;
    let fams = mode.families().map(Family::version);
    let mut mode = mode;
    let link_mtu = |fam: u8| {
        let l = if fams[0] == fam { &inside } else { &outside };
        l.mtu as u32
    };
    mode.clamp_mtus(link_mtu(4), link_mtu(6));
    let shared = AnyMode::new(&mode, gw.workers)?;
    // The links' MTUs, lowered by the configuration where it says so.
    let mtus = [&inside, &outside].map(|l| l.mtu as u32);
    let mtus = [0, 1].map(|i| gw.mtu[i].map_or(mtus[i], |m| m.min(mtus[i])));
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
    let local = published.current().local.clone();
    let local6 = published.current().local6.clone();
    let mut use_xdp = gw.backend == Backend::AfXdp;
    let mut socks: Vec<Ports> = Vec::new();
    if use_xdp {
        // One socket per worker on each interface, worker i on queue i, all fed by one
        // steering program per interface.
        let queues: Vec<u32> = (0..gw.workers as u32).collect();
        let open = |l: &Link, fam: u8| {
            let mut cfg = AfXdpConfig::new(l.name.clone());
            cfg.local_v4 = local.clone();
            cfg.local_v6 = local6.clone();
            cfg.steer = io::afxdp::Steer {
                ipv4: fam == 4,
                ipv6: fam == 6,
            };
            AfXdp::open_queues(&cfg, &queues)
        };
        match (open(&inside, fams[0]), open(&outside, fams[1])) {
            (Ok(a), Ok(b)) => {
                socks.extend(a.into_iter().zip(b).map(|(a, b)| Ports::Xdp([a, b])));
            }
            (Err(e), _) | (_, Err(e)) => {
                log(format!(
                    "warning: AF_XDP unavailable ({e}); falling back to AF_PACKET"
                ));
                use_xdp = false;
            }
        }
    }
    if use_xdp {
        log(format!(
            "offloads (AF_XDP): partial TCP/UDP checksums from senders with tx checksum offload (veth peers) are completed in software (csum_completed); a veth peer's TSO is off while XDP is attached to {} and {}, so its kernel segments before sending; GRO/LRO super-packets cannot reach an AF_XDP socket",
            inside.name, outside.name
        ));
    }
    // GSO pass-through: NAT44 keeps header sizes, so a super-packet's virtio-net header
    // stays valid after translation and the kernel segments it on transmit.
    let vnet = gw.gso && !use_xdp && matches!(mode, ModeConfig::Nat44(_));
    if !use_xdp {
        for _ in 0..gw.workers {
            let open = |l: &Link, base: u16| {
                let mut cfg = AfPacketConfig::new(l.name.clone());
                cfg.fanout = fanout(base);
                cfg.ignore_outgoing = true;
                cfg.vnet_hdr = vnet;
                AfPacket::open(&cfg).map_err(|source| LiveError::Interface {
                    name: l.name.clone(),
                    source,
                })
            };
            let tx = |l: &Link| {
                let t = if vnet {
                    AfPacketTx::open_vnet(&l.name)
                } else {
                    AfPacketTx::open(&l.name)
                };
                t.map_err(|source| LiveError::Interface {
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
    if vnet {
        log(format!(
            "offloads: GSO/GRO super-packets and partial checksums pass through with virtio-net headers on {} and {} (offloads left on; set gso = false to turn them off instead)",
            inside.name, outside.name
        ));
    } else if gw.offloads_off {
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
        match IngressFilter::install(
            &[(&inside.name, fams[0]), (&outside.name, fams[1])],
            &local,
            &local6,
        ) {
            Ok(f) => {
                log(format!(
                    "kernel bypass: nftables netdev ingress table {} drops transit IPv{} on {} and IPv{} on {} after quicknat's AF_PACKET copy (the kernel would only drop it later; ARP, neighbour discovery, link-local, multicast and traffic to {:?} {:?} still reach the kernel)",
                    f.table, fams[0], inside.name, fams[1], outside.name, local, local6
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
    let raw6 = RawIpv6::open().map_err(|source| LiveError::Io {
        what: "raw IPv6 socket",
        source,
    })?;
    // ILA: mappings change at run time, from the control socket and on SIGHUP.
    let control_state = match &shared {
        AnyMode::Ila(ila) => Some(Arc::new(crate::control::ControlState::new(
            Arc::clone(&ila.router),
            reload,
            Some(Arc::clone(&ila.qsbr)),
        ))),
        _ => None,
    };
    let _control = match (&control_state, &gw.control_socket) {
        (Some(state), Some(path)) => {
            let h = crate::control::serve(path, Arc::clone(state), Arc::clone(&stop)).map_err(
                |source| LiveError::Io {
                    what: "control socket",
                    source,
                },
            )?;
            log(format!(
                "control: ILA mappings on {} (quicknat ila list|add|set|del|reload --socket {})",
                path.display(),
                path.display()
            ));
            Some(h)
        }
        _ => None,
    };
    log(format!(
        "quicknat: {} (IPv{} inside, IPv{} outside) on inside {} (index {}, mtu {}) and outside {} (index {}, mtu {}), {} worker(s), {}{}",
        mode.name(),
        fams[0],
        fams[1],
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
    let (probe_tx, probe_rx) = mpsc::channel::<(u32, IpAddr)>();
    let snapshots: Vec<Arc<Mutex<(Counters, IoCounters)>>> =
        (0..gw.workers).map(|_| Arc::default()).collect();
    let raw = Arc::new(Mutex::new(raw));
    let raw6 = Arc::new(Mutex::new(raw6));
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
            let (stop, shared) = (Arc::clone(&stop), &shared);
            if let Some(mut r) = shared.reaper() {
                s.spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        r.handle_timeout(clock());
                        std::thread::sleep(Duration::from_millis(200));
                    }
                });
            }
        }
        let in_place = mode_in_place(&shared);
        let envs = socks
            .into_iter()
            .enumerate()
            .map(|(id, ports)| WorkerEnv {
                families: fams,
                in_place,
                scratch: vec![0u8; SCRATCH],
                out: Output::new(),
                out_routes: Vec::with_capacity(64),
                mtus,
                addresses: gw.addresses.clone(),
                raw6: Arc::clone(&raw6),
                ports,
                links: links.clone(),
                published: Arc::clone(&published),
                probe: probe_tx.clone(),
                raw: Arc::clone(&raw),
                snapshot: Arc::clone(&snapshots[id]),
                io: IoCounters::default(),
                busy_poll: gw.busy_poll,
            })
            .collect();
        shared.visit(SpawnWorkers {
            scope: s,
            envs,
            stop: Arc::clone(&stop),
            clock,
        });
        // Periodic counters until stopped; SIGHUP re-reads the ILA mappings.
        let mut last = Instant::now();
        let mut warned_oversize = false;
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
            if let (Some(state), Some(hup)) = (&control_state, &reload_signal) {
                if hup.swap(false, Ordering::Relaxed) {
                    match state.reload() {
                        Ok(summary) => log(format!("reload (SIGHUP): ILA mappings {summary}")),
                        Err(e) => log(format!("warning: reload (SIGHUP) refused: {e}")),
                    }
                }
            }
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
        "stats: rx in={} out={} tx in={} out={} forwarded={} sessions={} to_kernel={} via_kernel={} no_route={} oversize={} too_big={} icmp_sent={} gso={} fragmented={} csum_completed={} tx_dropped={} drops[{}]",
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
        e.dropped(engine::DropReason::TooBig),
        e.icmp_errors_sent,
        io.gso,
        e.fragmented,
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

/// Everything a worker thread owns but its mode worker.
struct WorkerEnv {
    /// IP version translated on the inside / outside.
    families: [u8; 2],
    /// Translate in the receive ring (NAT44, ILA) or in `scratch` (IPv4 <-> IPv6).
    in_place: bool,
    /// Translation buffer with headroom for growing headers.
    scratch: Vec<u8>,
    /// ICMP errors and fragments the mode writes.
    out: Output,
    /// Where each of `out`'s packets leaves: (interface, packet index in `out`).
    out_routes: Vec<(usize, usize)>,
    /// Per link: the MTU packets are held to.
    mtus: [u32; 2],
    /// Per link: configured ICMP error source addresses (else the interface's).
    addresses: [Vec<IpAddr>; 2],
    raw6: Arc<Mutex<RawIpv6>>,
    ports: Ports,
    links: [Link; 2],
    published: Arc<Published>,
    probe: mpsc::Sender<(u32, IpAddr)>,
    raw: Arc<Mutex<RawIpv4>>,
    snapshot: Arc<Mutex<(Counters, IoCounters)>>,
    io: IoCounters,
    busy_poll: bool,
}

/// Whether the mode translates where the packet lies (no headroom needed).
fn mode_in_place(mode: &AnyMode) -> bool {
    struct InPlace;
    impl ModeVisitor for InPlace {
        type Output = bool;
        fn visit<M: Mode>(self, m: &M) -> bool {
            m.in_place()
        }
    }
    mode.visit(InPlace)
}

/// Spawns one worker thread per [`WorkerEnv`], each with its mode worker.
struct SpawnWorkers<'scope, 'env, C> {
    scope: &'scope std::thread::Scope<'scope, 'env>,
    envs: Vec<WorkerEnv>,
    stop: Arc<AtomicBool>,
    clock: C,
}

impl<'scope, C> ModeVisitor for SpawnWorkers<'scope, '_, C>
where
    C: Fn() -> Timestamp + Copy + Send + 'scope,
{
    type Output = ();

    fn visit<M: Mode>(self, mode: &M) {
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        for (id, env) in self.envs.into_iter().enumerate() {
            let ctx = WorkerCtx {
                worker: mode.worker(id),
                env,
            };
            let (stop, clock) = (Arc::clone(&self.stop), self.clock);
            let core = cores.get(id % cores.len().max(1)).copied();
            self.scope.spawn(move || {
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                ctx.run(&stop, &clock);
            });
        }
    }
}

struct WorkerCtx<W> {
    worker: W,
    env: WorkerEnv,
}

impl<W: ModeWorker> WorkerCtx<W> {
    /// The links as the engine sees them: MTUs, and the addresses ICMP errors come from
    /// (configured, else the interface's).
    fn egress(env: &WorkerEnv, view: &NetView) -> Egress {
        let mut e = Egress::default();
        for (i, l) in e.links.iter_mut().enumerate() {
            let conf = &env.addresses[i];
            *l = EgressLink {
                mtu: Some(env.mtus[i]),
                addr4: conf
                    .iter()
                    .find_map(|a| match a {
                        IpAddr::V4(a) => Some(*a),
                        IpAddr::V6(_) => None,
                    })
                    .or(view.addr4[i]),
                addr6: conf
                    .iter()
                    .find_map(|a| match a {
                        IpAddr::V6(a) => Some(*a),
                        IpAddr::V4(_) => None,
                    })
                    .or(view.addr6[i]),
            };
        }
        e
    }

    fn run(mut self, stop: &AtomicBool, clock: &dyn Fn() -> Timestamp) {
        let env = &mut self.env;
        let mut view = env.published.current();
        let mut egress = Self::egress(env, &view);
        let mut version = env.published.version.load(Ordering::Acquire);
        let mut last_snapshot = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let v = env.published.version.load(Ordering::Acquire);
            if v != version {
                version = v;
                view = env.published.current();
                egress = Self::egress(env, &view);
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
                    family: env.families[side],
                    in_place: env.in_place,
                    scratch: &mut env.scratch,
                    out: &mut env.out,
                    out_routes: &mut env.out_routes,
                    egress: &egress,
                    fwd: Forwarding {
                        raw6: &env.raw6,
                        links: &env.links,
                        view: &view,
                        probe: &env.probe,
                        raw: &env.raw,
                    },
                    io: &mut env.io,
                    now,
                    side,
                };
                let got = match &mut env.ports {
                    Ports::Packet { rx, tx } => {
                        rx[side].recv_batch(Duration::ZERO, |frame, meta| {
                            match handler.frame(frame, meta, dir) {
                                Some(Out::InPlace(out, None)) => {
                                    let ok = tx[out].send(frame).is_ok();
                                    handler.sent(out, ok);
                                }
                                Some(Out::InPlace(out, Some(v))) => {
                                    let ok = tx[out].send_vnet(&v, frame).is_ok();
                                    handler.sent(out, ok);
                                }
                                Some(Out::Scratch(out, r)) => {
                                    let ok = tx[out].send(&handler.scratch[r]).is_ok();
                                    handler.sent(out, ok);
                                }
                                Some(Out::Extra) => {
                                    for &(out, i) in handler.out_routes.iter() {
                                        let ok = handler
                                            .out
                                            .framed_mut(i, 14)
                                            .is_some_and(|f| tx[out].send(f).is_ok());
                                        handler.io.count_sent(out, ok);
                                    }
                                }
                                None => {}
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
                        me.recv_batch_room(Duration::ZERO, |chunk, len| {
                            let meta = RxMeta::whole(len);
                            let (frame, _) = chunk.split_at_mut(len);
                            match handler.frame(frame, &meta, dir) {
                                // Hairpin: back out of the interface it came in on, no copy.
                                Some(Out::InPlace(out, _)) if out == side => {
                                    handler.sent(out, true);
                                    Some(frame.len())
                                }
                                Some(Out::InPlace(out, _)) => {
                                    let ok = other.send(frame).is_ok();
                                    handler.sent(out, ok);
                                    None
                                }
                                // Back out of the same interface from the scratch buffer
                                // (a NAT64 hairpin): copy it into the received frame's UMEM
                                // chunk and send that.
                                Some(Out::Scratch(out, r)) if out == side => {
                                    let n = r.len();
                                    let fits = n <= chunk.len();
                                    if fits {
                                        chunk[..n].copy_from_slice(&handler.scratch[r]);
                                    }
                                    handler.sent(out, fits);
                                    fits.then_some(n)
                                }
                                Some(Out::Scratch(out, r)) => {
                                    let ok = other.send(&handler.scratch[r]).is_ok();
                                    handler.sent(out, ok);
                                    None
                                }
                                // ICMP errors (back the same way, in the received chunk)
                                // and fragments (on by the other interface).
                                Some(Out::Extra) => {
                                    let mut back = None;
                                    for &(out, i) in handler.out_routes.iter() {
                                        let Some(f) = handler.out.framed_mut(i, 14) else {
                                            continue;
                                        };
                                        let ok = if out != side {
                                            other.send(f).is_ok()
                                        } else if back.is_none() && f.len() <= chunk.len() {
                                            chunk[..f.len()].copy_from_slice(f);
                                            back = Some(f.len());
                                            true
                                        } else {
                                            false
                                        };
                                        handler.io.count_sent(out, ok);
                                    }
                                    back
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
            match &mut env.ports {
                Ports::Packet { tx, .. } => {
                    for t in tx.iter_mut() {
                        let _ = t.flush();
                    }
                    env.io.tx_dropped = tx.iter().map(AfPacketTx::dropped).sum();
                }
                Ports::Xdp(xsk) => {
                    for x in xsk.iter_mut() {
                        let _ = x.flush();
                    }
                    env.io.csum_completed = xsk.iter().map(AfXdp::csum_completed).sum();
                }
            }
            self.worker.quiescent();
            if last_snapshot.elapsed() > Duration::from_millis(500) {
                last_snapshot = Instant::now();
                if let Ok(mut g) = env.snapshot.try_lock() {
                    *g = (self.worker.counters().clone(), env.io.clone());
                }
            }
            if seen == 0 && !env.busy_poll {
                // Idle: hold no references while waiting, then wait on both rings.
                self.worker.offline();
                let _ = match &env.ports {
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
        if let Ok(mut g) = env.snapshot.lock() {
            *g = (self.worker.counters().clone(), env.io.clone());
        }
        self.worker.offline();
    }
}

/// Bytes of a worker's translation buffer: one 64 KB packet with headroom.
const SCRATCH: usize = engine::HEADROOM + 65_536 + 64;

/// Where a handled frame goes.
enum Out {
    /// The received frame, rewritten in place, leaves by this interface (behind this
    /// virtio-net header, when the frame came with one).
    InPlace(usize, Option<VnetHdr>),
    /// The translated frame in the worker's scratch buffer (this range) leaves by this
    /// interface.
    Scratch(usize, std::ops::Range<usize>),
    /// The packets the mode wrote to its output (an ICMP error, fragments), framed and
    /// routed in `out_routes`.
    Extra,
}

struct FrameHandler<'a, W> {
    worker: &'a mut W,
    /// The IP version the mode translates on this side.
    family: u8,
    in_place: bool,
    scratch: &'a mut Vec<u8>,
    out: &'a mut Output,
    /// Where each of `out`'s packets leaves: (interface, packet index in `out`).
    out_routes: &'a mut Vec<(usize, usize)>,
    egress: &'a Egress,
    fwd: Forwarding<'a>,
    io: &'a mut IoCounters,
    now: Timestamp,
    side: usize,
}

/// What choosing a next hop needs: the links, the kernel's routes and neighbours, and
/// the ways to hand a packet to the kernel.
struct Forwarding<'a> {
    raw6: &'a Mutex<RawIpv6>,
    links: &'a [Link; 2],
    view: &'a NetView,
    probe: &'a mpsc::Sender<(u32, IpAddr)>,
    raw: &'a Mutex<RawIpv4>,
}

/// A GSO header whose segments fit `mtu`: `gso_size` lowered to the room left after the
/// network and transport headers of the super-packet `pkt` (at offset `l3` of its frame).
fn fit_segments(mut v: VnetHdr, pkt: &[u8], l3: usize, mtu: usize) -> Option<VnetHdr> {
    let l4 = usize::from(v.csum_start).checked_sub(l3)?;
    let l4_hdr = match pkt.get(l4 + 12) {
        // TCP: data offset; UDP: 8.
        Some(b) if v.csum_offset == 16 => usize::from(b >> 4) * 4,
        _ => 8,
    };
    let room = mtu.checked_sub(l4 + l4_hdr)?;
    if usize::from(v.gso_size) > room {
        v.gso_size = u16::try_from(room).ok()?;
    }
    Some(v)
}

/// The destination of the IP packet `p` (IPv4 or IPv6; the caller checked the length).
fn ip_dst(p: &[u8]) -> IpAddr {
    if p[0] >> 4 == 4 {
        IpAddr::V4(Ipv4Addr::new(p[16], p[17], p[18], p[19]))
    } else {
        let mut a = [0u8; 16];
        a.copy_from_slice(&p[24..40]);
        IpAddr::V6(Ipv6Addr::from(a))
    }
}

impl<W: ModeWorker> FrameHandler<'_, W> {
    /// Counts a transmission the caller made.
    fn sent(&mut self, out: usize, ok: bool) {
        self.io.count_sent(out, ok);
    }

    /// Handles one received frame; returns where the translated frame goes, or `None`
    /// when it is dropped, left to the kernel or already handed to it.
    fn frame(&mut self, frame: &mut [u8], meta: &RxMeta, dir: Direction) -> Option<Out> {
        self.io.rx[self.side] += 1;
        let Some(l3) = crate::link::l3_offset(io::pcap::LinkType::Ethernet, frame) else {
            self.io.to_kernel += 1; // ARP and friends: the kernel's business
            return None;
        };
        let pkt = &frame[l3..];
        let version = pkt.first().map_or(0, |b| b >> 4);
        let min = if version == 6 { 40 } else { 20 };
        if version != self.family || pkt.len() < min || self.fwd.for_kernel(ip_dst(pkt)) {
            self.io.to_kernel += 1;
            return None;
        }
        let vnet = meta.vnet.filter(|v| v.is_gso() || v.needs_csum());
        let offload = match vnet {
            Some(v) if v.is_gso() => engine::Offload::Gso,
            Some(_) => engine::Offload::PartialCsum,
            None => engine::Offload::None,
        };
        if offload != engine::Offload::Gso && meta.len > self.fwd.links[self.side].mtu + l3 {
            self.io.oversize += 1;
            return None;
        }
        if meta.vnet.is_none()
            && meta.csum_not_ready
            && io::afpacket::complete_checksum(frame, meta)
        {
            self.io.csum_completed += 1;
        }
        let len = frame.len() - l3;
        if self.in_place {
            let mut f = Frame {
                buf: frame,
                start: l3,
                len,
                offload,
                out: self.out,
            };
            match self.worker.process(self.now, dir, &mut f, self.egress) {
                Emit::Forward { .. } | Emit::Hairpin { .. } => {}
                Emit::Reply(_) | Emit::Fragments => return self.route_out(),
                Emit::Drop(_) => return None, // counted by the engine with its reason
            }
            let (out, mac) = self.fwd.next_hop(&frame[l3..], self.io)?;
            let mtu = self.fwd.links[out].mtu;
            let hdr = match meta.vnet {
                // A super-packet: its segments must fit the next hop; TCP is a byte stream,
                // so the kernel may cut it at a smaller size.
                Some(v) if v.is_gso() => {
                    Some(fit_segments(v.for_forward(), &frame[l3..], l3, mtu)?)
                }
                Some(v) => Some(v.for_forward()),
                None => None,
            };
            frame[0..6].copy_from_slice(&mac);
            frame[6..12].copy_from_slice(&self.fwd.links[out].mac);
            if hdr.is_some_and(|v| v.is_gso()) {
                self.io.gso += 1;
            }
            return Some(Out::InPlace(out, hdr));
        }
        // The headers change size: translate in the scratch buffer, behind headroom.
        let h = engine::HEADROOM;
        let n = len.min(self.scratch.len() - h - 64);
        self.scratch[h..h + n].copy_from_slice(&frame[l3..l3 + n]);
        let mut f = Frame::new(self.scratch, h, n, self.out);
        let (start, len) = match self.worker.process(self.now, dir, &mut f, self.egress) {
            Emit::Forward { start, len } | Emit::Hairpin { start, len } => (start, len),
            Emit::Reply(_) | Emit::Fragments => return self.route_out(),
            Emit::Drop(_) => return None,
        };
        let (out, frame) = self.scratch_frame(start, len)?;
        Some(Out::Scratch(out, frame))
    }

    /// Routes the packets the mode wrote to its output (an ICMP error, fragments) and
    /// writes their Ethernet headers in front of them.
    fn route_out(&mut self) -> Option<Out> {
        self.out_routes.clear();
        for i in 0..self.out.len() {
            let Some(framed) = self.out.framed_mut(i, 14) else {
                continue;
            };
            let Some((out, mac)) = self.fwd.next_hop(&framed[14..], self.io) else {
                continue;
            };
            if framed.len() - 14 > self.fwd.links[out].mtu {
                self.io.oversize += 1;
                continue;
            }
            self.fwd.write_eth(framed, out, mac);
            self.out_routes.push((out, i));
        }
        (!self.out_routes.is_empty()).then_some(Out::Extra)
    }

    /// Routes the IP packet at `scratch[at..at + len]` and writes its Ethernet header in
    /// the 14 bytes before it: the interface it leaves by and the frame's range. `None`
    /// when it is not sent from here (no route, handed to the kernel, too big: counted).
    fn scratch_frame(&mut self, at: usize, len: usize) -> Option<(usize, std::ops::Range<usize>)> {
        let framed = self.scratch.get_mut(at.checked_sub(14)?..at + len)?;
        let (out, mac) = self.fwd.next_hop(&framed[14..], self.io)?;
        if len > self.fwd.links[out].mtu {
            self.io.oversize += 1;
            return None;
        }
        self.fwd.write_eth(framed, out, mac);
        Some((out, at - 14..at + len))
    }
}

impl Forwarding<'_> {
    /// Whether a packet to `dst` is the kernel's: the gateway's own addresses, and
    /// link-local, multicast and broadcast destinations (neighbour discovery, routing
    /// protocols).
    fn for_kernel(&self, dst: IpAddr) -> bool {
        match dst {
            IpAddr::V4(a) => self.view.local.contains(&a) || a.is_broadcast() || a.is_multicast(),
            IpAddr::V6(a) => {
                self.view.local6.contains(&a)
                    || a.is_multicast()
                    || (a.segments()[0] & 0xffc0) == 0xfe80
            }
        }
    }

    /// Writes the Ethernet header in the first 14 bytes of `framed` for leaving by `out`.
    fn write_eth(&self, framed: &mut [u8], out: usize, mac: [u8; 6]) {
        let ethertype: u16 = if framed[14] >> 4 == 6 { 0x86dd } else { 0x0800 };
        framed[0..6].copy_from_slice(&mac);
        framed[6..12].copy_from_slice(&self.links[out].mac);
        framed[12..14].copy_from_slice(&ethertype.to_be_bytes());
    }

    /// The interface and next-hop MAC for the translated packet `pkt`. When the route
    /// is missing or leaves by neither interface, counts `no_route`; when the neighbour
    /// is not resolved yet, hands the packet to the kernel (which resolves it) and asks
    /// the control thread to probe it for the packets that follow.
    fn next_hop(&self, pkt: &[u8], io: &mut IoCounters) -> Option<(usize, [u8; 6])> {
        let dst = ip_dst(pkt);
        let routes = self.view.routes.as_ref();
        let hop = match dst {
            IpAddr::V4(a) => routes
                .and_then(|r| r.lookup(a))
                .map(|(i, h)| (i, IpAddr::V4(h))),
            IpAddr::V6(a) => routes
                .and_then(|r| r.lookup6(a))
                .map(|(i, h)| (i, IpAddr::V6(h))),
        };
        let Some((ifindex, next_hop)) = hop else {
            io.no_route += 1;
            return None;
        };
        let Some(out) = self.links.iter().position(|l| l.index == ifindex) else {
            io.no_route += 1;
            return None;
        };
        let neigh = self.view.neighbors.as_ref();
        let mac = match next_hop {
            IpAddr::V4(h) => neigh.and_then(|n| n.get(ifindex, h)),
            IpAddr::V6(h) => neigh.and_then(|n| n.get6(ifindex, h)),
        };
        if let Some(mac) = mac {
            return Some((out, mac));
        }
        // Unknown next hop: let the kernel route and resolve it this time, and ask it to
        // resolve the neighbour for the packets that follow.
        let _ = self.probe.send((ifindex, next_hop));
        match next_hop {
            IpAddr::V4(_) => {
                if let Ok(mut raw) = self.raw.lock() {
                    raw.send(pkt);
                }
            }
            IpAddr::V6(_) => {
                if let Ok(mut raw) = self.raw6.lock() {
                    raw.send(pkt);
                }
            }
        }
        io.via_kernel += 1;
        None
    }
}
