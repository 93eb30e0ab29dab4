//! Opening the ports of every worker on the chosen backend — AF_XDP, falling back to
//! AF_PACKET (saying why) where it is unavailable — and the host setup around them:
//! offloads (GSO pass-through on AF_PACKET, or turned off) and, for AF_PACKET, the
//! nftables ingress table that keeps the kernel from also routing every packet (or, with
//! the fast path, its tc program, attached first: it decides how the sockets are bound).

use std::net::{Ipv4Addr, Ipv6Addr};

use io::afpacket::{AfPacketConfig, PacketPort};
use io::afxdp::{AfXdp, AfXdpConfig};
use io::host::rxhash::RxHashCheck;
use io::host::{self, ForwardGuard, HostState, IngressFilter, OffloadSettings, Offloads};
use io::tcfast::TcFastPath;

use super::netview::Link;
use super::placement::Placement;
use super::{Backend, GatewayConfig, LiveError};

/// The ports of every worker (inside, outside), by backend.
pub(crate) enum Opened {
    /// AF_XDP: one socket per worker and interface (worker i on queue i).
    Xdp(Vec<[AfXdp; 2]>),
    /// AF_PACKET: a ring and a transmit socket per worker and interface, spread by
    /// PACKET_FANOUT as the placement says; with the fast path, its tc program on each
    /// interface (which owns the kernel bypass then, and lives as long as the ports).
    Packet(
        Vec<[PacketPort; 2]>,
        Option<Box<[TcFastPath; 2]>>,
        Placement,
    ),
}

impl Opened {
    /// How operators read the backend in the log.
    pub fn describe(&self) -> &'static str {
        match self {
            Opened::Xdp(_) => "AF_XDP (copy mode)",
            Opened::Packet(..) => "AF_PACKET TPACKET_V3",
        }
    }

    /// How the workers share the traffic.
    pub fn placement(&self) -> Placement {
        match self {
            Opened::Xdp(ports) => Placement::queues(ports.len()),
            Opened::Packet(_, _, p) => p.clone(),
        }
    }
}

/// What stays changed on the host while the gateway runs: the forward guard, the ingress
/// table, the offloads turned off (their previous settings, to restore) and the state
/// file that records them for a restart after a crash. Undone by
/// [`undo`](HostSetup::undo) (or on drop, silently).
pub(crate) struct HostSetup {
    /// Kept until the very end: the kernel routes nothing untranslated from the gateway's
    /// interfaces before the gateway is gone.
    guard: Option<ForwardGuard>,
    filter: Option<IngressFilter>,
    /// The offloads' settings to put back (those changed).
    restore: Vec<OffloadSettings>,
    /// The offloads' settings before the ports were opened.
    original: Vec<OffloadSettings>,
    state: Option<HostState>,
    /// Per interface, the NIC's receive hash fields as found and as changed (put back on
    /// undo).
    rx_hash: Vec<(String, RxHashCheck)>,
}

impl HostSetup {
    /// Puts the receive hash fields back, removes the table, puts the offloads back as
    /// they were and removes the state file (kept if an offload could not be restored,
    /// for the next start to retry). What it did, for the log.
    pub fn undo(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        for (ifname, check) in std::mem::take(&mut self.rx_hash) {
            let changed = check.changed();
            if changed.is_empty() {
                continue;
            }
            match check.restore(&ifname)[..] {
                [] => lines.push(format!(
                    "receive hash: restored on {ifname} ({})",
                    changed.join(", ")
                )),
                ref failed => lines.push(format!(
                    "warning: receive hash on {ifname} not restored: {}",
                    failed.join("; ")
                )),
            }
        }
        if let Some(f) = self.filter.take() {
            let t = f.table().to_owned();
            match f.remove() {
                Ok(_) => lines.push(format!("kernel bypass: nftables table {t} removed")),
                Err(e) => lines.push(format!("warning: nftables table {t} not removed: {e}")),
            }
        }
        let mut failed = false;
        for o in std::mem::take(&mut self.restore) {
            match o.restore() {
                Ok(()) => lines.push(format!(
                    "offloads: restored on {} ({})",
                    o.ifname,
                    describe(&o)
                )),
                Err(e) => {
                    failed = true;
                    lines.push(format!(
                        "warning: offloads on {} not restored: {e}",
                        o.ifname
                    ));
                }
            }
        }
        if let Some(g) = self.guard.take() {
            let t = g.table().to_owned();
            let dropped = g.dropped().ok().flatten().unwrap_or_default();
            match g.remove() {
                Ok(_) => lines.push(format!(
                    "forward guard: nftables table inet {t} removed ({} packets it dropped; the kernel routes these interfaces' traffic as before the gateway started)",
                    dropped.packets
                )),
                Err(e) => lines.push(format!("warning: nftables table inet {t} not removed: {e}")),
            }
        }
        // Dropped (file removed) unless something could not be undone.
        if let (Some(s), true) = (self.state.take(), failed) {
            s.keep();
        }
        lines
    }
}

impl Drop for HostSetup {
    fn drop(&mut self) {
        self.undo();
    }
}

/// `tx=on tso=off ...` for the log.
fn describe(o: &OffloadSettings) -> String {
    let words: Vec<String> = o
        .features
        .iter()
        .map(|(f, on)| format!("{f} {}", if *on { "on" } else { "off" }))
        .collect();
    words.join(", ")
}

/// Whether opening AF_XDP failed because something else holds the interface (EBUSY: an
/// XDP program attached by a link, a queue bound to another socket). Falling back to
/// AF_PACKET then would run a second data path beside it.
fn busy(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::ResourceBusy
        || e.to_string().contains("Device or resource busy")
}

/// Opens every worker's ports on `links` for a mode translating IP version `fams[i]` on
/// link `i`; `gso`: pass GSO super-packets through on AF_PACKET (the mode keeps header
/// sizes). Logs what it chose and why.
pub(crate) fn open_ports(
    gw: &GatewayConfig,
    links: &[Link; 2],
    fams: [u8; 2],
    local: (&[Ipv4Addr], &[Ipv6Addr]),
    gso: bool,
    fast_entries: u32,
    log: &(dyn Fn(String) + Sync),
) -> Result<Opened, LiveError> {
    if gw.backend == Backend::AfXdp {
        // One socket per worker on each interface, worker i on queue i, all fed by one
        // steering program per interface.
        let queues: Vec<u32> = (0..gw.workers as u32).collect();
        let open = |l: &Link, fam: u8| {
            let mut cfg = AfXdpConfig::new(l.name.clone());
            cfg.local_v4 = local.0.to_vec();
            cfg.local_v6 = local.1.to_vec();
            cfg.steer = io::afxdp::Steer {
                ipv4: fam == 4,
                ipv6: fam == 6,
            };
            cfg.fast_path_entries = fast_entries;
            AfXdp::open_queues(&cfg, &queues).or_else(|e| {
                // XDP fast path: "auto" goes on without it.
                if fast_entries == 0 || gw.xdp_fast_path != super::FastPathSwitch::Auto {
                    return Err(e);
                }
                log(format!(
                    "xdp fast path: off (unavailable on {}: {e})",
                    l.name
                ));
                cfg.fast_path_entries = 0;
                AfXdp::open_queues(&cfg, &queues)
            })
        };
        match (open(&links[0], fams[0]), open(&links[1], fams[1])) {
            (Ok(a), Ok(b)) => {
                log(format!(
                    "offloads (AF_XDP): partial TCP/UDP checksums from senders with tx checksum offload (veth peers) are completed in software (csum_completed); a veth peer's TSO is off while XDP is attached to {} and {}, so its kernel segments before sending; GRO/LRO super-packets cannot reach an AF_XDP socket",
                    links[0].name, links[1].name
                ));
                return Ok(Opened::Xdp(
                    a.into_iter().zip(b).map(|(a, b)| [a, b]).collect(),
                ));
            }
            (Err(e), _) | (_, Err(e)) if busy(&e) => {
                return Err(LiveError::Io {
                    what: "AF_XDP",
                    source: std::io::Error::new(
                        e.kind(),
                        format!("{e}: another program holds the interface's XDP hook or queue; quicknat does not run beside it"),
                    ),
                })
            }
            (Err(e), _) | (_, Err(e)) => log(format!(
                "warning: AF_XDP unavailable ({e}); falling back to AF_PACKET"
            )),
        }
    }
    // The fast path's tc program first: with it, the sockets are bound to the IP version
    // translated on their link, so they see what the program leaves them (fastpath_tc).
    let hooks = super::fastpath_tc::attach(gw, links, fams, local, log)?;
    let fanout = |base: u16| (gw.workers > 1).then(|| base.wrapping_add(std::process::id() as u16));
    let placement = match gw.placement {
        super::PlacementSwitch::Flows => {
            Placement::packet(gw.workers, gw.xdp_fast_path_entries, log)
        }
        super::PlacementSwitch::Hash => Placement::hash(gw.workers),
    };
    let mut ports = Vec::with_capacity(gw.workers);
    for _ in 0..gw.workers {
        let open = |l: &Link, base: u16, fam: u8| {
            let mut cfg = AfPacketConfig::new(l.name.clone());
            cfg.fanout = fanout(base);
            cfg.placement = placement.program();
            cfg.ignore_outgoing = true;
            cfg.vnet_hdr = gso;
            cfg.ip_version = hooks.is_some().then_some(fam);
            PacketPort::open(&cfg).map_err(|source| LiveError::Interface {
                name: l.name.clone(),
                source,
            })
        };
        ports.push([
            open(&links[0], 0x5100, fams[0])?,
            open(&links[1], 0x5200, fams[1])?,
        ]);
    }
    Ok(Opened::Packet(ports, hooks.map(Box::new), placement))
}

/// Before any port is opened (an XDP program changes a veth's features): takes the
/// host state of these interfaces (refusing to run beside a live gateway on them),
/// installs the forward guard for the IP version translated on each (`fams`; replacing,
/// with no gap, the one a gateway that did not exit cleanly left), undoes the rest of
/// what such a gateway left (its offloads, its ingress table) and reads the offloads'
/// settings as they are. Logs every step.
pub(crate) fn host_prepare(
    links: &[Link; 2],
    fams: [u8; 2],
    log: &(dyn Fn(String) + Sync),
) -> Result<HostSetup, LiveError> {
    let (inside, outside) = (&links[0].name, &links[1].name);
    let names = [inside.as_str(), outside.as_str()];
    if links[0].index == links[1].index {
        return Err(LiveError::Interface {
            name: outside.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "the same interface as the inside one, {inside} (index {}): a gateway needs two",
                    links[0].index
                ),
            ),
        });
    }
    let mut state = match HostState::acquire(&[
        (inside.as_str(), links[0].index),
        (outside.as_str(), links[1].index),
    ]) {
        Ok(s) => Some(s),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            return Err(LiveError::Io {
                what: "host state",
                source: e,
            })
        }
        Err(e) => {
            log(format!("warning: no state file in {} ({e}): after a crash, a restart will not know the offloads' previous settings", host::STATE_DIR));
            None
        }
    };
    if state.is_some() {
        let gone = host::prune_stale(
            std::path::Path::new(host::STATE_DIR),
            &host::live_netns_inodes(),
        );
        if !gone.is_empty() {
            let names: Vec<String> = gone.iter().map(|p| p.display().to_string()).collect();
            log(format!(
                "recovery: removed {} files of gateways whose network namespace is gone: {}",
                gone.len(),
                names.join(", ")
            ));
        }
    }
    if let Some(s) = &mut state {
        let left = s.leftover();
        if let Some(pid) = s.left_by() {
            log(format!(
                "recovery: the gateway pid {pid} on {inside} and {outside} did not exit cleanly ({}); undoing what it left",
                s.path().display()
            ));
        }
        for o in left {
            match o.restore() {
                Ok(()) => log(format!(
                    "recovery: offloads on {} restored ({})",
                    o.ifname,
                    describe(&o)
                )),
                Err(e) => log(format!(
                    "warning: recovery: offloads on {} not restored: {e}",
                    o.ifname
                )),
            }
        }
    }
    let table = host::table_name(&names);
    let guard = forward_guard(&table, [(inside, fams[0]), (outside, fams[1])], log)?;
    // Only while holding the interfaces' locks: then no live gateway owns a program there.
    for l in links.iter().filter(|_| state.is_some()) {
        for r in host::detach_leftover_programs(&l.name, l.index) {
            match r {
                Ok(what) => log(format!(
                    "recovery: detached {what} a gateway that did not exit cleanly left"
                )),
                Err(e) => log(format!("warning: recovery: {e}")),
            }
        }
    }
    match host::remove_table(&table) {
        Ok(true) => log(format!("recovery: removed the nftables table {table} a gateway that did not exit cleanly left (it dropped transit traffic)")),
        Ok(false) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => log(format!("warning: nftables table {table}: {e}")),
    }
    let mut original = Vec::new();
    for l in links {
        match OffloadSettings::read(&l.name) {
            Ok(o) => original.push(o),
            Err(e) => log(format!(
                "warning: offloads on {} cannot be restored on exit ({e})",
                l.name
            )),
        }
    }
    Ok(HostSetup {
        guard,
        filter: None,
        restore: Vec::new(),
        original,
        rx_hash: Vec::new(),
        state,
    })
}

/// Installs the forward guard `table` on `ifaces` and says so (with what a leftover one
/// dropped while no gateway ran). Where it cannot be installed: an error if the kernel
/// forwards a family translated here (a crash would leak untranslated traffic), else a
/// warning.
fn forward_guard(
    table: &str,
    ifaces: [(&str, u8); 2],
    log: &(dyn Fn(String) + Sync),
) -> Result<Option<ForwardGuard>, LiveError> {
    match ForwardGuard::install(table, &ifaces) {
        Ok((g, leftover)) => {
            if let Some(d) = leftover {
                log(format!(
                    "recovery: the forward guard inet {table} a gateway that did not exit cleanly left dropped {} untranslated packets ({} bytes) the kernel would have routed while no gateway ran",
                    d.packets, d.bytes
                ));
            }
            let [(i, fi), (o, fo)] = ifaces;
            log(format!(
                "forward guard: nftables table inet {table} drops what the kernel would route from IPv{fi} on {i} and IPv{fo} on {o} (kept if the gateway dies, so nothing leaves untranslated; removed on a clean stop)"
            ));
            Ok(Some(g))
        }
        Err(e) => {
            let forwarding: Vec<&str> = ifaces
                .iter()
                .filter_map(|&(_, fam)| {
                    let key = if fam == 6 {
                        "net.ipv6.conf.all.forwarding"
                    } else {
                        "net.ipv4.ip_forward"
                    };
                    crate::preflight::sysctl_on(key).then_some(key)
                })
                .collect();
            if forwarding.is_empty() {
                log(format!(
                    "warning: forward guard not installed ({e}); harmless while kernel forwarding stays off"
                ));
                Ok(None)
            } else {
                Err(LiveError::Io {
                    what: "forward guard",
                    source: std::io::Error::other(format!(
                        "{e}; the kernel forwards ({}=1), so without the guard a crash would let it route the inside's traffic out untranslated: install nftables or turn forwarding off",
                        forwarding.join("=1, ")
                    )),
                })
            }
        }
    }
}

/// Sets the host up around the opened ports: offloads, and for AF_PACKET the kernel
/// bypass table (unless the tc fast path's program keeps transit frames from the kernel
/// itself). Logs every step.
#[allow(clippy::too_many_arguments)]
pub(crate) fn host_setup(
    host: &mut HostSetup,
    gw: &GatewayConfig,
    opened: &Opened,
    links: &[Link; 2],
    fams: [u8; 2],
    local: (&[Ipv4Addr], &[Ipv6Addr]),
    gso: bool,
    log: &(dyn Fn(String) + Sync),
) {
    let (inside, outside) = (&links[0].name, &links[1].name);
    if gso {
        log(format!(
            "offloads: GSO/GRO super-packets and partial checksums pass through with virtio-net headers on {inside} and {outside} (offloads left on; set gso = false to turn them off instead)"
        ));
    } else if gw.offloads_off {
        // quicknat translates whole frames: a receive offload that merges them (GRO, LRO)
        // would hand it 64 KB super-packets it cannot send on. Turn them off and say so,
        // after writing down how they were (restored on exit, or by the next start).
        host.restore = std::mem::take(&mut host.original);
        if let Some(s) = &mut host.state {
            if let Err(e) = s.record(&host.restore) {
                log(format!("warning: {}: {e}", s.path().display()));
            }
        }
        for l in links {
            match host::offloads_off(&l.name) {
                Offloads::Off => {}
                Offloads::Partly(why) => log(format!("note: ethtool -K {}: {why}", l.name)),
                Offloads::Untouched(e) => log(format!(
                    "warning: offloads left on {} (ethtool: {e}); super-packets will be dropped as oversize",
                    l.name
                )),
            }
        }
        log(format!(
            "offloads: gro, lro, tso, gso and tx checksumming turned off on {inside} and {outside} (set offloads_off = false to keep them)"
        ));
    }
    let filter = if gw.kernel_bypass && matches!(opened, Opened::Packet(_, Some(_), _)) {
        // A table at netdev ingress would drop the frames before the protocol-bound
        // sockets see them: the tc program keeps them from the kernel instead.
        log(format!(
            "kernel bypass: the tc fast path's program marks transit IPv{} on {inside} and IPv{} on {outside} PACKET_OTHERHOST after deciding them (ip_rcv drops them first thing; the engine's sockets, bound to those IP versions, still receive them; ARP, neighbour discovery, link-local, multicast and traffic to {:?} {:?} still reach the kernel)",
            fams[0], fams[1], local.0, local.1
        ));
        None
    } else if gw.kernel_bypass && matches!(opened, Opened::Packet(..)) {
        match IngressFilter::install(&[(inside, fams[0]), (outside, fams[1])], local.0, local.1) {
            Ok(f) => {
                log(format!(
                    "kernel bypass: nftables netdev ingress table {} drops transit IPv{} on {inside} and IPv{} on {outside} after quicknat's AF_PACKET copy (the kernel would only drop it later; ARP, neighbour discovery, link-local, multicast and traffic to {:?} {:?} still reach the kernel)",
                    f.table(), fams[0], fams[1], local.0, local.1
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
    host.filter = filter;
    host.rx_hash = links
        .iter()
        .map(|l| {
            let check = host::rxhash::check(&l.name, gw.rx_hash_ports);
            log(rx_hash_line(&l.name, &check));
            (l.name.clone(), check)
        })
        .collect();
}

impl HostSetup {
    /// `status`'s `rx_hash` object: per interface, `{"supported": false, "why"}` or
    /// `{"supported": true, "flows": {"tcp6": {"before", "now", "error"}, ...}}` (fields
    /// as `ethtool` letters: s, d IP source and destination, f, n source and destination
    /// port).
    pub(crate) fn rx_hash_json(&self) -> serde_json::Value {
        let mut o = serde_json::Map::new();
        for (ifname, check) in &self.rx_hash {
            let v = match check {
                RxHashCheck::Unsupported(why) => {
                    serde_json::json!({"supported": false, "why": why})
                }
                RxHashCheck::Flows(flows) => {
                    let f: serde_json::Map<String, serde_json::Value> = flows
                        .iter()
                        .map(|h| {
                            (
                                h.flow.to_string(),
                                serde_json::json!({"before": h.before, "now": h.now, "error": h.error}),
                            )
                        })
                        .collect();
                    serde_json::json!({"supported": true, "flows": f})
                }
            };
            o.insert(ifname.clone(), v);
        }
        serde_json::Value::Object(o)
    }
}

/// The log line of one interface's receive hash check.
fn rx_hash_line(ifname: &str, check: &RxHashCheck) -> String {
    if let RxHashCheck::Unsupported(why) = check {
        return format!("receive hash: {ifname} has no receive hash settings ({why}); its driver places flows on queues as it does");
    }
    let (changed, lacking) = (check.changed(), check.lacking());
    match (changed.is_empty(), lacking.is_empty()) {
        (true, true) => format!("receive hash: {ifname} hashes TCP and UDP over IPv4 and IPv6 by addresses and ports"),
        (false, true) => format!(
            "receive hash: {ifname} now hashes by addresses and ports ({}; put back at exit)",
            changed.join(", ")
        ),
        _ => format!(
            "warning: receive hash: {ifname} hashes {} without ports: flows between one pair of addresses land on one queue and one core{}",
            lacking.join(", "),
            if changed.is_empty() { String::new() } else { format!(" (changed: {})", changed.join(", ")) }
        ),
    }
}
