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
use engine::{Counters, Direction, Emit};
use io::afpacket::{AfPacket, AfPacketConfig, AfPacketTx, RxMeta, VnetHdr};
use io::afxdp::{AfXdp, AfXdpConfig};
use io::netlink::{self, NeighborCache, Netlink, RouteTable};
use io::rawip::{RawIpv4, RawIpv6};

use crate::pipeline::{ModeConfig, ModeError, ModeShared, Pipeline};

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
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The translation mode's configuration was refused.
    #[error("configuration: {0}")]
    Mode(#[from] ModeError),
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
    /// ICMP errors sent back (time exceeded, fragmentation needed / packet too big).
    pub icmp_sent: u64,
    /// Packets too big for the next hop, without DF (fragmentation is not implemented).
    pub too_big: u64,
    /// GSO super-packets passed through (virtio-net headers; the kernel segments them).
    pub gso: u64,
    /// IPv4 packets without DF too big for the IPv6 side, cut into fragments and
    /// translated one by one (RFC 7915 §4.1; the engine counts them `needs_fragmentation`).
    pub fragmented: u64,
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
        self.icmp_sent += o.icmp_sent;
        self.too_big += o.too_big;
        self.gso += o.gso;
        self.fragmented += o.fragmented;
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

/// The IP version a mode translates on each side (inside, outside); the other family is
/// left to the kernel there.
fn families(mode: &ModeConfig) -> [u8; 2] {
    match mode {
        ModeConfig::Nat44(_) => [4, 4],
        ModeConfig::Nat64(_) => [6, 4],
        ModeConfig::Siit(_) | ModeConfig::Clat(_) => [4, 6],
        ModeConfig::Ila(_) => [6, 6],
    }
}

/// Whether a mode keeps packet size (translates in the receive ring).
fn in_place(mode: &ModeConfig) -> bool {
    matches!(mode, ModeConfig::Nat44(_) | ModeConfig::Ila(_))
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
    let fams = families(&mode);
    let mut mode = mode;
    let link_mtu = |fam: u8| {
        let l = if fams[0] == fam { &inside } else { &outside };
        l.mtu as u32
    };
    let xlat_mtus = mode.clamp_mtus(link_mtu(4), link_mtu(6));
    let shared = ModeShared::new(&mode, gw.workers)?;
    let in_place = in_place(&mode);
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
        ModeShared::Ila(router, qsbr) => Some(Arc::new(crate::control::ControlState::new(
            Arc::clone(router),
            reload,
            Some(Arc::clone(qsbr)),
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
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        for (id, ports) in socks.into_iter().enumerate() {
            let ctx = WorkerCtx {
                worker: shared.worker(id),
                families: fams,
                in_place,
                scratch: vec![0u8; SCRATCH],
                xlat_mtus,
                icmp_tokens: IcmpBudget::new(),
                raw6: Arc::clone(&raw6),
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
        io.too_big,
        io.icmp_sent,
        io.gso,
        io.fragmented,
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

struct WorkerCtx {
    worker: Pipeline,
    /// IP version translated on the inside / outside.
    families: [u8; 2],
    /// Translate in the receive ring (NAT44, ILA) or in `scratch` (IPv4 <-> IPv6).
    in_place: bool,
    /// Translation buffer with headroom for growing headers.
    scratch: Vec<u8>,
    /// The IPv4 / IPv6 MTUs the translator checks against (IPv4 <-> IPv6 modes).
    xlat_mtus: Option<(u32, u32)>,
    /// Rate limit of the ICMP errors this worker sends.
    icmp_tokens: IcmpBudget,
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
                    family: self.families[side],
                    in_place: self.in_place,
                    scratch: &mut self.scratch,
                    xlat_mtus: self.xlat_mtus,
                    icmp_tokens: &mut self.icmp_tokens,
                    raw6: &self.raw6,
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
                                Some(Out::Many(out, rs)) => {
                                    for r in rs {
                                        let ok = tx[out].send(&handler.scratch[r]).is_ok();
                                        handler.sent(out, ok);
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
                                // (a NAT64 hairpin, an ICMP error): copy it into the
                                // received frame's UMEM chunk and send that.
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
                                // Fragments leave by the other side (a translated packet
                                // never hairpins to the family it came from).
                                Some(Out::Many(out, rs)) => {
                                    for r in rs {
                                        let ok =
                                            out != side && other.send(&handler.scratch[r]).is_ok();
                                        handler.sent(out, ok);
                                    }
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
                    self.io.csum_completed = xsk.iter().map(AfXdp::csum_completed).sum();
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

/// Bytes of a worker's translation buffer: one 64 KB packet with headroom, or the
/// translated fragments of one (a 64 KB IPv4 packet cut for a 1280-byte IPv6 MTU).
const SCRATCH: usize = 160 * 1024;

/// Where a handled frame goes.
enum Out {
    /// The received frame, rewritten in place, leaves by this interface (behind this
    /// virtio-net header, when the frame came with one).
    InPlace(usize, Option<VnetHdr>),
    /// The translated frame in the worker's scratch buffer (this range) leaves by this
    /// interface.
    Scratch(usize, std::ops::Range<usize>),
    /// Several translated frames in the scratch buffer (the fragments of one packet).
    Many(usize, Vec<std::ops::Range<usize>>),
}

/// A token bucket for the ICMP errors a worker sends (RFC 1812 §4.3.2.8, RFC 4443 §2.4 (f)):
/// 200 per second with bursts of 200.
struct IcmpBudget {
    tokens: f64,
    last: Instant,
}

impl IcmpBudget {
    const RATE: f64 = 200.0;

    fn new() -> Self {
        IcmpBudget {
            tokens: Self::RATE,
            last: Instant::now(),
        }
    }

    fn take(&mut self) -> bool {
        let now = Instant::now();
        let dt = now.duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + dt * Self::RATE).min(Self::RATE);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

struct FrameHandler<'a> {
    worker: &'a mut Pipeline,
    xlat_mtus: Option<(u32, u32)>,
    icmp_tokens: &'a mut IcmpBudget,
    /// The IP version the mode translates on this side.
    family: u8,
    in_place: bool,
    scratch: &'a mut Vec<u8>,
    raw6: &'a Mutex<RawIpv6>,
    links: &'a [Link; 2],
    view: &'a NetView,
    probe: &'a mpsc::Sender<(u32, IpAddr)>,
    raw: &'a Mutex<RawIpv4>,
    io: &'a mut IoCounters,
    now: Timestamp,
    side: usize,
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

/// The length of the IP packet `p` by its header (the frame may carry link padding).
fn ip_len(p: &[u8]) -> usize {
    let l = if p[0] >> 4 == 6 {
        40 + usize::from(u16::from_be_bytes([p[4], p[5]]))
    } else {
        usize::from(u16::from_be_bytes([p[2], p[3]]))
    };
    l.min(p.len())
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

impl FrameHandler<'_> {
    /// Counts a transmission the caller made.
    fn sent(&mut self, out: usize, ok: bool) {
        if ok {
            self.io.tx[out] += 1;
        } else {
            self.io.tx_dropped += 1;
        }
    }

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

    /// Handles one received frame; returns where the translated frame goes, or `None`
    /// when it is dropped, left to the kernel or already handed to it.
    fn frame(&mut self, frame: &mut [u8], meta: &RxMeta, dir: Direction) -> Option<Out> {
        self.io.rx[self.side] += 1;
        let Some(l3) = crate::step::l3_offset(io::pcap::LinkType::Ethernet, frame) else {
            self.io.to_kernel += 1; // ARP and friends: the kernel's business
            return None;
        };
        let pkt = &frame[l3..];
        let version = pkt.first().map_or(0, |b| b >> 4);
        let min = if version == 6 { 40 } else { 20 };
        if version != self.family || pkt.len() < min || self.for_kernel(ip_dst(pkt)) {
            self.io.to_kernel += 1;
            return None;
        }
        let vnet = meta.vnet.filter(|v| v.is_gso() || v.needs_csum());
        let offload = match vnet {
            Some(v) if v.is_gso() => engine::Offload::Gso,
            Some(_) => engine::Offload::PartialCsum,
            None => engine::Offload::None,
        };
        if offload != engine::Offload::Gso && meta.len > self.links[self.side].mtu + l3 {
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
            match self
                .worker
                .process_offloaded(self.now, dir, frame, l3, len, offload)
            {
                Emit::Forward { .. } | Emit::Hairpin { .. } => {}
                // Counted by the engine with its reason; some are answered.
                Emit::Drop(r) => return self.answer(r, &frame[l3..]),
            }
            let (out, mac) = self.next_hop(&frame[l3..])?;
            let mtu = self.links[out].mtu;
            let hdr = match meta.vnet {
                // A super-packet: its segments must fit the next hop; TCP is a byte stream,
                // so the kernel may cut it at a smaller size.
                Some(v) if v.is_gso() => {
                    Some(fit_segments(v.for_forward(), &frame[l3..], l3, mtu)?)
                }
                Some(v) => Some(v.for_forward()),
                None => None,
            };
            if hdr.is_none_or(|v| !v.is_gso()) && ip_len(&frame[l3..]) > mtu {
                return self.too_big(&frame[l3..], mtu);
            }
            frame[0..6].copy_from_slice(&mac);
            frame[6..12].copy_from_slice(&self.links[out].mac);
            if hdr.is_some_and(|v| v.is_gso()) {
                self.io.gso += 1;
            }
            return Some(Out::InPlace(out, hdr));
        }
        // The headers change size: translate in the scratch buffer, behind headroom.
        let h = engine::HEADROOM;
        let n = len.min(self.scratch.len() - h - 64);
        self.scratch[h..h + n].copy_from_slice(&frame[l3..l3 + n]);
        let (start, len) = match self.worker.process(self.now, dir, self.scratch, h, n) {
            Emit::Forward { start, len } | Emit::Hairpin { start, len } => (start, len),
            Emit::Drop(engine::DropReason::NeedsFragmentation) => {
                return self.fragment(dir, &frame[l3..l3 + n]);
            }
            Emit::Drop(r) => return self.answer(r, &frame[l3..l3 + n]),
        };
        let (out, frame) = self.scratch_frame(start, len)?;
        Some(Out::Scratch(out, frame))
    }

    /// Routes the IP packet at `scratch[at..at + len]` and writes its Ethernet header in
    /// the 14 bytes before it: the interface it leaves by and the frame's range. `None`
    /// when it is not sent from here (no route, handed to the kernel, too big: counted).
    fn scratch_frame(&mut self, at: usize, len: usize) -> Option<(usize, std::ops::Range<usize>)> {
        let scratch = std::mem::take(self.scratch);
        let hop = scratch.get(at..at + len).and_then(|pkt| self.next_hop(pkt));
        *self.scratch = scratch;
        let (out, mac) = hop?;
        if at < 14 || len > self.links[out].mtu {
            self.io.oversize += 1;
            return None;
        }
        let ethertype: u16 = if self.scratch[at] >> 4 == 6 {
            0x86dd
        } else {
            0x0800
        };
        let eth = &mut self.scratch[at - 14..at];
        eth[0..6].copy_from_slice(&mac);
        eth[6..12].copy_from_slice(&self.links[out].mac);
        eth[12..14].copy_from_slice(&ethertype.to_be_bytes());
        Some((out, at - 14..at + len))
    }

    /// RFC 7915 §4.1: an IPv4 packet without DF, too big for the IPv6 side once
    /// translated, is cut into IPv4 fragments that each translate to an IPv6 fragment
    /// fitting the IPv6 MTU; every fragment goes through the pipeline on its own.
    fn fragment(&mut self, dir: Direction, orig: &[u8]) -> Option<Out> {
        let (_, v6_mtu) = self.xlat_mtus?;
        // IPv6 header and Fragment header replace the 20-byte IPv4 header.
        let max_data = (v6_mtu as usize).checked_sub(48)?;
        let slot = engine::HEADROOM + v6_mtu as usize + 64;
        let h = engine::HEADROOM;
        let mut ranges = Vec::new();
        let mut out = None;
        for (i, (off, len, more)) in xlat::fragment::plan(orig, max_data).enumerate() {
            let base = i * slot;
            let Some(buf) = self.scratch.get_mut(base..base + slot) else {
                self.io.oversize += 1; // more fragments than the buffer holds
                return None;
            };
            let n = xlat::fragment::write(orig, off, len, more, &mut buf[h..])?;
            let (start, flen) = match self.worker.process(self.now, dir, buf, h, n) {
                Emit::Forward { start, len } | Emit::Hairpin { start, len } => (start, len),
                Emit::Drop(_) => return None,
            };
            // Each fragment asks for its next hop: while the neighbour is unresolved the
            // kernel takes every fragment (and resolves it), none is lost.
            if let Some((o, frame)) = self.scratch_frame(base + start, flen) {
                out = Some(o);
                ranges.push(frame);
            }
        }
        self.io.fragmented += 1;
        Some(Out::Many(out?, ranges))
    }

    /// Answers a dropped packet with the ICMP error its drop reason calls for (time
    /// exceeded; fragmentation needed / packet too big with the translator's MTU), in the
    /// family of the packet as it arrived, from this interface's address.
    fn answer(&mut self, r: engine::DropReason, orig: &[u8]) -> Option<Out> {
        use engine::DropReason as D;
        use xlat::icmp_reply::IcmpReason;
        let why = match (r, self.xlat_mtus) {
            (D::TtlExpired, _) => IcmpReason::TimeExceeded,
            // IPv6 -> IPv4 too big: the IPv6 sender counts 20 bytes more.
            (D::PacketTooBig, Some((v4, _))) => IcmpReason::TooBig { mtu: v4 + 20 },
            // IPv4 -> IPv6 with DF too big: the IPv4 sender counts 20 bytes less.
            (D::FragmentNeeded, Some((_, v6))) => IcmpReason::TooBig {
                mtu: v6.saturating_sub(20),
            },
            _ => return None,
        };
        self.icmp(orig, why)
    }

    /// A packet too big for the next hop's MTU: ICMP error when DF is set (always for
    /// IPv6), else dropped and counted (no fragmentation).
    fn too_big(&mut self, pkt: &[u8], mtu: usize) -> Option<Out> {
        let df = pkt[0] >> 4 == 6 || pkt.get(6).is_some_and(|b| b & 0x40 != 0);
        if !df {
            self.io.too_big += 1;
            return None;
        }
        self.icmp(
            pkt,
            xlat::icmp_reply::IcmpReason::TooBig { mtu: mtu as u32 },
        )
    }

    /// Builds the ICMP error about `orig` in the scratch buffer and routes it back.
    fn icmp(&mut self, orig: &[u8], why: xlat::icmp_reply::IcmpReason) -> Option<Out> {
        if !self.icmp_tokens.take() {
            return None;
        }
        // `orig` lies in the receive buffer, never in `scratch`.
        let n = if orig[0] >> 4 == 6 {
            let src = self.view.addr6[self.side]?;
            xlat::icmp_reply::icmpv6_error(&mut self.scratch[14..], src, orig, why)?
        } else {
            let src = self.view.addr4[self.side]?;
            xlat::icmp_reply::icmpv4_error(&mut self.scratch[14..], src, orig, why)?
        };
        let (out, frame) = self.scratch_frame(14, n)?;
        self.io.icmp_sent += 1;
        Some(Out::Scratch(out, frame))
    }

    /// The interface and next-hop MAC for the translated packet `pkt`. When the route
    /// is missing or leaves by neither interface, counts `no_route`; when the neighbour
    /// is not resolved yet, hands the packet to the kernel (which resolves it) and asks
    /// the control thread to probe it for the packets that follow.
    fn next_hop(&mut self, pkt: &[u8]) -> Option<(usize, [u8; 6])> {
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
            self.io.no_route += 1;
            return None;
        };
        let Some(out) = self.links.iter().position(|l| l.index == ifindex) else {
            self.io.no_route += 1;
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
        self.io.via_kernel += 1;
        None
    }
}
