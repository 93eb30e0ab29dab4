//! `quicknat-lab lab --topology cluster`: N quicknat NAT44 gateways between two BIRD
//! routers, one failed on purpose.
//!
//! ```text
//!                         ┌─ gw1 (quicknat + BIRD) ─┐
//! hosts ── rin (BIRD) ─ bri ─ gw2 ─────────────── bro ─ rout (BIRD) ── srv
//! 100.64.0.0/22   10.1.0.0/24 └─ gw3 ───────────────┘ 10.2.0.0/24    198.51.100.2
//! ```
//!
//! Each side is one bridge (a switch): a gateway's death is then invisible to the routers'
//! links, as behind a real switch, so the routers learn it from BGP (a withdrawal when
//! quicknat dies: its routes vanish with its TUN device) or from BFD (100 ms × 3 when the
//! gateway's links go down). The inside router sends each subscriber to its slice's
//! gateway by policy routing ([`bird`]); the slices come from rendezvous hashing with
//! bounded loads ([`slices`]). Deterministic NAT (`[nat44.deterministic]`, the same on
//! every gateway) makes the backup's mapping for a subscriber the one the primary used; the
//! dynamic arm gives each gateway an ordinary pool of its primary blocks' addresses, so a
//! survivor must allocate new mappings.
//!
//! Cells (each on a freshly built cluster): deterministic and dynamic NAT, each with the
//! first gateway killed by SIGKILL of quicknat and by its links set down. In each: the
//! subscribers' spread over the gateways (one datagram from each of 1,000 subscribers,
//! counted per gateway link at the outside router) before and after; 1 kHz UDP streams and
//! long-lived TCP connections from subscribers of every slice through the failure
//! (`flows`: the server records each flow's public endpoints and gaps); and, before the
//! failure of the first cell, the aggregate throughput of all gateways vs one.

mod bird;
mod report;
pub mod slices;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::{chrono_like_date, exe, run, stop_child, stop_flag, temp_path, Lab};
use crate::flows::{ClientReport, ServerReport};
use crate::probe::now_ms;
pub use report::{ClusterReport, Failover, Throughput};
use slices::Plan;

/// The subscribers.
pub const INSIDE: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 0);
/// Their prefix length.
pub const INSIDE_LEN: u8 = 22;
/// The public prefix the gateways share.
pub const OUTSIDE: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 0);
/// Its length.
pub const OUTSIDE_LEN: u8 = 24;
/// Subscribers that send (of the 1,024 addresses).
pub const SUBSCRIBERS: u32 = 1000;
/// The inside router's address on the gateways' inside bridge.
pub const RIN_BR: &str = "10.1.0.1";
/// The outside router's address on the gateways' outside bridge.
pub const ROUT_BR: &str = "10.2.0.1";
/// The server.
pub const SERVER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
const UDP_PORT: u16 = 9000;
/// Datagrams per second of each UDP flow.
pub const PROBE_PPS: u32 = 1000;
const TCP_PORT: u16 = 9001;
const SPREAD_PORT_BEFORE: u16 = 9100;
const SPREAD_PORT_AFTER: u16 = 9101;
const GEN_PORT: u16 = 9200;

/// Gateway `g`'s inside address.
pub fn gw_in_addr(g: usize) -> String {
    format!("10.1.0.{}", 11 + g)
}
/// Gateway `g`'s outside address.
pub fn gw_out_addr(g: usize) -> String {
    format!("10.2.0.{}", 11 + g)
}

/// What to run.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// Gateways (2 or 3).
    pub gateways: usize,
    /// quicknat backend on every gateway.
    pub backend: String,
    /// The quicknat binary.
    pub quicknat: PathBuf,
    /// The short form (CI): 2 s before, 4 s after the failure, fewer flows.
    pub short: bool,
    /// Seconds per throughput measurement.
    pub seconds: u64,
    /// Alternating throughput rounds.
    pub rounds: usize,
    /// Offered rate per gateway's subscriber set in the throughput cell, packets/s.
    pub gateway_pps: u64,
    /// Cells to run: det-kill, det-down, det-drain, dyn-kill, dyn-down, throughput (empty:
    /// all).
    pub cells: Vec<String>,
}

impl ClusterOptions {
    fn runs(&self, cell: &str) -> bool {
        self.cells.is_empty() || self.cells.iter().any(|c| c == cell)
    }
    /// (seconds before the failure, seconds after it).
    fn window(&self) -> (f64, f64) {
        if self.short {
            (2.0, 4.0)
        } else {
            (3.0, 6.0)
        }
    }
    /// (UDP flows, TCP connections) per slice.
    fn per_slice(&self) -> (usize, usize) {
        if self.short {
            (3, 1)
        } else {
            (4, 2)
        }
    }
}

/// Deterministic (RFC 7422) or dynamic NAT on the gateways.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NatMode {
    /// `[nat44.deterministic]`, the same on every gateway.
    Deterministic,
    /// `[[nat44.rule]]` with a pool of the gateway's primary blocks.
    Dynamic,
}

/// How the victim gateway fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Event {
    /// SIGKILL of its quicknat (BIRD stays up; quicknat's routes vanish with its TUN).
    Sigkill,
    /// Its inside and outside links set down (BFD must notice).
    LinkDown,
    /// `quicknat drain --stop`: its routes withdrawn, the traffic moved, then stopped.
    Drain,
}

/// Gateway `g`'s quicknat configuration.
fn quicknat_config(plan: &Plan, g: usize, mode: NatMode, backend: &str, sock: &Path) -> String {
    let (primary, standby) = plan.announced(g);
    let list = |v: &[Ipv4Addr]| {
        v.iter()
            .map(|a| format!("\"{a}/32\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let nat = match mode {
        NatMode::Deterministic => format!(
            "[nat44.deterministic]\ninside = \"{INSIDE}/{INSIDE_LEN}\"\noutside = \"{OUTSIDE}/{OUTSIDE_LEN}\"\n"
        ),
        NatMode::Dynamic => format!(
            "[[nat44.rule]]\ninside = \"{INSIDE}/{INSIDE_LEN}\"\npool = [{}]\n",
            list(&primary)
        ),
    };
    format!(
        "[gateway]\ninside = \"g-in\"\noutside = \"g-out\"\nbackend = \"{backend}\"\nworkers = 1\nstats_interval = 1\ncontrol_socket = \"{}\"\n\n\
         [nat44]\n{nat}\n\
         [routing]\nannounce = [\"0.0.0.0/0\", {}]\nstandby = [{}]\nstandby_metric = {}\ntable = {}\nhealth_interval = \"100ms\"\n",
        sock.display(),
        list(&primary),
        list(&standby),
        bird::STANDBY_METRIC,
        bird::ROUTING_TABLE,
    )
}

/// A temporary directory for configurations and logs, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new() -> Result<Self> {
        let d = temp_path("cluster");
        std::fs::create_dir_all(&d)?;
        Ok(Dir(d))
    }
    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    fn write(&self, name: &str, text: &str) -> Result<PathBuf> {
        let p = self.file(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
        Ok(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A built cluster: namespaces (hosts, rin, gw1..gwN, rout, srv) and the gateways' quicknat.
struct Cluster {
    lab: Lab,
    n: usize,
    quicknat: Vec<Option<Child>>,
    birds: Vec<Child>,
    dir: Dir,
}

impl Cluster {
    fn hosts(&self) -> &str {
        self.lab.at(0)
    }
    fn rin(&self) -> &str {
        self.lab.at(1)
    }
    fn gw(&self, g: usize) -> &str {
        self.lab.at(2 + g)
    }
    fn rout(&self) -> &str {
        self.lab.at(2 + self.n)
    }
    fn srv(&self) -> &str {
        self.lab.at(3 + self.n)
    }
    /// Gateway `g`'s control socket.
    fn sock(&self, g: usize) -> PathBuf {
        self.dir.file(&format!("gw{}.sock", g + 1))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in self.quicknat.drain(..).flatten() {
            stop_child(c);
        }
        for mut b in self.birds.drain(..) {
            let _ = b.kill();
            let _ = b.wait();
        }
    }
}

/// `ip -batch` of `cmds` in `ns`.
fn ip_batch(lab: &Lab, dir: &Dir, ns: &str, cmds: &str) -> Result<()> {
    let p = dir.write("batch.ip", cmds)?;
    lab.ns(ns, &["ip", "-batch", &p.to_string_lossy()])
        .map(drop)
}

/// `nft -f` of `rules` in `ns`.
fn nft(lab: &Lab, dir: &Dir, ns: &str, rules: &str) -> Result<()> {
    let p = dir.write("rules.nft", rules)?;
    lab.ns(ns, &["nft", "-f", &p.to_string_lossy()]).map(drop)
}

/// Starts BIRD in `ns` with `conf`, in the foreground as the lab's child (stopped and
/// reaped with the cluster).
fn start_bird(c: &mut Cluster, ns: &str, role: &str, conf: &str) -> Result<()> {
    let cfg = c.dir.write(&format!("{role}.conf"), conf)?;
    let sock = c.dir.file(&format!("{role}.ctl"));
    let pid = c.dir.file(&format!("{role}.pid"));
    // Parse the configuration first, so a mistake fails here with BIRD's message.
    c.lab
        .ns(ns, &["bird", "-p", "-c", &cfg.to_string_lossy()])
        .with_context(|| format!("BIRD's configuration for {role}"))?;
    let child = Command::new("ip")
        .args(["netns", "exec", ns, "bird", "-f", "-c"])
        .arg(&cfg)
        .arg("-s")
        .arg(&sock)
        .arg("-P")
        .arg(&pid)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting BIRD in {role}"))?;
    c.birds.push(child);
    Ok(())
}

/// Starts gateway `g`'s quicknat (stderr to a log file in the run's directory).
fn start_quicknat(c: &Cluster, bin: &Path, g: usize, cfg: &Path) -> Result<Child> {
    let log = std::fs::File::create(c.dir.file(&format!("quicknat-gw{}.log", g + 1)))?;
    let child = Command::new("ip")
        .args(["netns", "exec", c.gw(g)])
        .arg(bin)
        .args(["run", "--config"])
        .arg(cfg)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting quicknat in gw{}", g + 1))?;
    Ok(child)
}

fn quicknat_log(c: &Cluster, g: usize) -> String {
    std::fs::read_to_string(c.dir.file(&format!("quicknat-gw{}.log", g + 1))).unwrap_or_default()
}

/// Polls `ok` every 20 ms until it holds or `limit` passes; the time it took.
fn poll(
    c: &Cluster,
    limit: Duration,
    what: &str,
    mut ok: impl FnMut() -> bool,
) -> Result<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        c.lab.check_stop()?;
        if ok() {
            return Ok(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("{what}: not within {} s", limit.as_secs())
}

/// Builds the cluster, starts BIRD everywhere and quicknat on every gateway, and waits until
/// every slice and every public block is routed to its primary.
fn build(
    stop: &Arc<AtomicBool>,
    o: &ClusterOptions,
    plan: &Plan,
    mode: NatMode,
) -> Result<Cluster> {
    let n = o.gateways;
    let mut roles = vec!["cl-hosts".to_string(), "cl-rin".to_string()];
    roles.extend((1..=n).map(|g| format!("cl-gw{g}")));
    roles.extend(["cl-rout".to_string(), "cl-srv".to_string()]);
    let roles: Vec<&str> = roles.iter().map(String::as_str).collect();
    let lab = Lab::new(&roles, Arc::clone(stop))?;
    let mut c = Cluster {
        lab,
        n,
        quicknat: Vec::new(),
        birds: Vec::new(),
        dir: Dir::new()?,
    };
    let (hosts, rin, rout, srv) = (
        c.hosts().to_string(),
        c.rin().to_string(),
        c.rout().to_string(),
        c.srv().to_string(),
    );
    let lab = &c.lab;
    lab.veth(&hosts, "h0", &rin, "r-h")?;
    lab.veth(&rout, "r-s", &srv, "s0")?;
    // The subscribers: 1,024 addresses on one link.
    let mut b = String::from("addr add 10.3.0.2/24 dev h0\nroute add default via 10.3.0.1\n");
    for i in 0..(1u32 << (32 - INSIDE_LEN)) {
        b.push_str(&format!(
            "addr add {}/32 dev h0\n",
            Ipv4Addr::from(u32::from(INSIDE) + i)
        ));
    }
    ip_batch(lab, &c.dir, &hosts, &b)?;
    ip_batch(
        lab,
        &c.dir,
        &rin,
        &format!(
            "addr add 10.3.0.1/24 dev r-h\nroute add {INSIDE}/{INSIDE_LEN} via 10.3.0.2\n\
             link add name bri type bridge\nlink set dev bri up\naddr add {RIN_BR}/24 dev bri\n"
        ),
    )?;
    ip_batch(
        lab,
        &c.dir,
        &rout,
        &format!(
            "addr add 198.51.100.1/24 dev r-s\nlink add name bro type bridge\nlink set dev bro up\naddr add {ROUT_BR}/24 dev bro\n"
        ),
    )?;
    ip_batch(
        lab,
        &c.dir,
        &srv,
        "addr add 198.51.100.2/24 dev s0\nroute add default via 198.51.100.1\n",
    )?;
    for ns in [&rin, &rout] {
        lab.sysctl(ns, "net.ipv4.ip_forward=1")?;
        lab.sysctl(ns, "net.ipv4.conf.all.rp_filter=0")?;
        lab.sysctl(ns, "net.ipv4.conf.default.rp_filter=0")?;
    }
    let mut offload = vec![
        (hosts.clone(), "h0".to_string()),
        (rin.clone(), "r-h".into()),
    ];
    offload.push((rout.clone(), "r-s".into()));
    offload.push((srv.clone(), "s0".into()));
    for g in 0..n {
        let gw = c.gw(g).to_string();
        let (gi, go) = (format!("gi{}", g + 1), format!("go{}", g + 1));
        lab.veth(&gw, "g-in", &rin, &gi)?;
        lab.veth(&gw, "g-out", &rout, &go)?;
        // Unknown-unicast flooding stays on, as on a default switch: when a gateway's port
        // goes down the bridge forgets its MAC and floods its frames to the survivors,
        // which drop them as not addressed to them (counted `not_for_us`; a veth has no
        // MAC filter, so quicknat checks the destination itself).
        ip_batch(
            lab,
            &c.dir,
            &rin,
            &format!("link set dev {gi} master bri\n"),
        )?;
        ip_batch(
            lab,
            &c.dir,
            &rout,
            &format!("link set dev {go} master bro\n"),
        )?;
        ip_batch(
            lab,
            &c.dir,
            &gw,
            &format!(
                "addr add {}/24 dev g-in\naddr add {}/24 dev g-out\n\
                 route add {INSIDE}/{INSIDE_LEN} via {RIN_BR}\nroute add default via {ROUT_BR}\n",
                gw_in_addr(g),
                gw_out_addr(g)
            ),
        )?;
        // The gateway's kernel never forwards: a gateway without quicknat is a black hole.
        lab.sysctl(&gw, "net.ipv4.ip_forward=0")?;
        lab.sysctl(&gw, "net.ipv4.conf.all.rp_filter=0")?;
        offload.extend([
            (gw.clone(), "g-in".to_string()),
            (gw.clone(), "g-out".into()),
            (rin.clone(), gi),
            (rout.clone(), go),
        ]);
    }
    let offload: Vec<(&str, &str)> = offload
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    lab.offloads(&offload, false);
    // Policy routing on the inside router: each block's subscribers look up their slice.
    let mut rules = String::new();
    for blk in &plan.blocks {
        rules.push_str(&format!(
            "rule add from {}/{} lookup {} pref {}\n",
            blk.inside,
            blk.inside_len,
            bird::slice_table(blk.slice),
            1000 + blk.id
        ));
    }
    ip_batch(lab, &c.dir, &rin, &rules)?;
    // Per-gateway subscriber counters at the outside router: the spread datagrams' public
    // endpoints (one per subscriber, in either NAT mode), by the bridge port they came in
    // on, as sets, so a datagram sent twice counts once.
    let mut t = String::from("table netdev qncl {\n");
    for g in 0..n {
        for port in [SPREAD_PORT_BEFORE, SPREAD_PORT_AFTER] {
            t.push_str(&format!(
                "  set s{g}_{port} {{ type ipv4_addr . inet_service; flags dynamic; size 65535; }}\n"
            ));
        }
        t.push_str(&format!(
            "  chain go{g} {{\n    type filter hook ingress device \"go{}\" priority 0;\n",
            g + 1
        ));
        for port in [SPREAD_PORT_BEFORE, SPREAD_PORT_AFTER] {
            t.push_str(&format!(
                "    meta protocol ip udp dport {port} add @s{g}_{port} {{ ip saddr . udp sport }}\n"
            ));
        }
        t.push_str("  }\n");
    }
    t.push_str("}\n");
    nft(lab, &c.dir, &rout, &t)?;
    // The throughput cell's sink: dropped at the server's ingress, costing nothing.
    nft(
        lab,
        &c.dir,
        &srv,
        &format!("table netdev qnsink {{\n  chain in {{\n    type filter hook ingress device \"s0\" priority 0;\n    udp dport {GEN_PORT} counter drop\n  }}\n}}\n"),
    )?;
    let log = |role: &str| {
        c.dir
            .file(&format!("bird-{role}.log"))
            .to_string_lossy()
            .into_owned()
    };
    let (rin_conf, rout_conf) = (
        bird::inside_router(plan, &log("rin")),
        bird::outside_router(plan, &log("rout")),
    );
    let gw_confs: Vec<String> = (0..n)
        .map(|g| bird::gateway(plan, g, &log(&format!("gw{}", g + 1))))
        .collect();
    start_bird(&mut c, &rin, "rin", &rin_conf)?;
    start_bird(&mut c, &rout, "rout", &rout_conf)?;
    for (g, conf) in gw_confs.iter().enumerate() {
        let gw = c.gw(g).to_string();
        start_bird(&mut c, &gw, &format!("gw{}", g + 1), conf)?;
    }
    for g in 0..n {
        let cfg = c.dir.write(
            &format!("gw{}.toml", g + 1),
            &quicknat_config(plan, g, mode, &o.backend, &c.sock(g)),
        )?;
        let child = start_quicknat(&c, &o.quicknat, g, &cfg)?;
        c.quicknat.push(Some(child));
    }
    converge(&mut c, plan, &[])?;
    Ok(c)
}

/// Next hop of every slice table on the inside router and of every public /32 on the
/// outside router: (slices, blocks), gateway indexes (`None`: no route).
fn routes(c: &Cluster, plan: &Plan) -> (Vec<Option<usize>>, Vec<Option<usize>>) {
    let gw_of = |hop: &str, f: fn(usize) -> String| (0..c.n).find(|&g| f(g) == hop);
    let slices = (0..plan.slices.len())
        .map(|s| {
            let t = bird::slice_table(s).to_string();
            let out = c
                .lab
                .ns(
                    c.rin(),
                    &["ip", "-4", "route", "show", "table", &t, "default"],
                )
                .unwrap_or_default();
            let hop = out.split_whitespace().skip_while(|w| *w != "via").nth(1)?;
            gw_of(hop, gw_in_addr)
        })
        .collect();
    let out = c
        .lab
        .ns(c.rout(), &["ip", "-4", "route", "show", "proto", "bird"])
        .unwrap_or_default();
    let mut by_public = std::collections::HashMap::new();
    for line in out.lines() {
        let mut w = line.split_whitespace();
        let Some(dst) = w.next() else { continue };
        let Some(hop) = w.skip_while(|x| *x != "via").nth(1) else {
            continue;
        };
        by_public.insert(
            dst.trim_end_matches("/32").to_string(),
            gw_of(hop, gw_out_addr),
        );
    }
    let blocks = plan
        .blocks
        .iter()
        .map(|b| by_public.get(&b.public.to_string()).copied().flatten())
        .collect();
    (slices, blocks)
}

/// Waits until both routers route every slice and block to its gateway with `dead` down.
fn converge(c: &mut Cluster, plan: &Plan, dead: &[usize]) -> Result<Duration> {
    let want_slices: Vec<Option<usize>> = plan
        .slices
        .iter()
        .map(|&(p, b)| [p, b].into_iter().find(|g| !dead.contains(g)))
        .collect();
    let want_blocks: Vec<Option<usize>> = plan
        .blocks
        .iter()
        .map(|b| {
            [b.primary, b.backup]
                .into_iter()
                .find(|g| !dead.contains(g))
        })
        .collect();
    let mut last = (Vec::new(), Vec::new());
    let r = poll(c, Duration::from_secs(40), "routes converged", || {
        last = routes(c, plan);
        last.0 == want_slices && last.1 == want_blocks
    });
    if r.is_err() {
        for (g, q) in c.quicknat.iter_mut().enumerate() {
            if let Some(q) = q {
                if let Ok(Some(st)) = q.try_wait() {
                    bail!(
                        "quicknat in gw{} exited ({st}): {}",
                        g + 1,
                        quicknat_log(c, g).trim()
                    );
                }
            }
        }
        let ok_s = last
            .0
            .iter()
            .zip(&want_slices)
            .filter(|(a, b)| a == b)
            .count();
        let ok_b = last
            .1
            .iter()
            .zip(&want_blocks)
            .filter(|(a, b)| a == b)
            .count();
        return r.with_context(|| {
            format!(
                "{ok_s} of {} slices and {ok_b} of {} blocks routed as planned",
                want_slices.len(),
                want_blocks.len()
            )
        });
    }
    r
}

/// Subscribers counted per gateway by the outside router's sets for `port`: every
/// subscriber sends one datagram, twice (a datagram lost on a loaded machine is not a
/// subscriber missing), and each gateway's set holds the public endpoints it sent.
fn spread(c: &Cluster, port: u16) -> Result<Vec<u64>> {
    let exe = exe()?;
    let dst = SocketAddrV4::new(SERVER, port).to_string();
    let count = SUBSCRIBERS.to_string();
    let first = INSIDE.to_string();
    for _ in 0..2 {
        c.lab.ns(
            c.hosts(),
            &[
                &exe, "flows", "spread", "--dst", &dst, "--first", &first, "--count", &count,
            ],
        )?;
    }
    // Until every subscriber is counted (or 3 s: one still missing is reported so).
    let mut per = vec![0u64; c.n];
    let _ = poll(c, Duration::from_secs(3), "spread counted", || {
        per = spread_counts(c, port);
        per.iter().sum::<u64>() >= u64::from(SUBSCRIBERS)
    });
    Ok(per)
}

fn spread_counts(c: &Cluster, port: u16) -> Vec<u64> {
    (0..c.n)
        .map(|g| {
            let out = c
                .lab
                .ns(
                    c.rout(),
                    &[
                        "nft",
                        "-j",
                        "list",
                        "set",
                        "netdev",
                        "qncl",
                        &format!("s{g}_{port}"),
                    ],
                )
                .unwrap_or_default();
            let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
            v["nftables"]
                .as_array()
                .and_then(|a| a.iter().find_map(|x| x["set"]["elem"].as_array()))
                .map_or(0, |e| e.len() as u64)
        })
        .collect()
}

/// The flows' source addresses: per slice, the first address of its first blocks (UDP),
/// the second address of the same blocks (TCP).
fn flow_sources(plan: &Plan, per_slice: (usize, usize)) -> (Vec<Ipv4Addr>, Vec<Ipv4Addr>) {
    let (mut udp, mut tcp) = (Vec::new(), Vec::new());
    for s in 0..plan.slices.len() {
        let blocks: Vec<_> = plan.blocks.iter().filter(|b| b.slice == s).collect();
        for (i, b) in blocks.iter().enumerate() {
            if i < per_slice.0 {
                udp.push(b.inside);
            }
            if i < per_slice.1 {
                tcp.push(Ipv4Addr::from(u32::from(b.inside) + 1));
            }
        }
    }
    (udp, tcp)
}

/// Fails gateway `victim` by `event` (`quicknat`: the binary, for a drain); the moment,
/// ms since the epoch.
fn fail(c: &mut Cluster, victim: usize, event: Event, quicknat: &Path) -> Result<f64> {
    match event {
        Event::Drain => {
            let at = now_ms();
            let sock = c.sock(victim);
            run(Command::new(quicknat).args([
                "drain",
                "--stop",
                "--quiet",
                "1",
                "--timeout",
                "30",
                "--socket",
                &sock.to_string_lossy(),
            ]))?;
            if let Some(mut child) = c.quicknat[victim].take() {
                let _ = child.wait();
            }
            Ok(at)
        }
        Event::Sigkill => {
            let child = c.quicknat[victim].take().context("the victim's quicknat")?;
            let pid = child.id().to_string();
            let at = now_ms();
            run(Command::new("kill").args(["-KILL", &pid]))?;
            let mut child = child;
            let _ = child.wait();
            Ok(at)
        }
        Event::LinkDown => {
            let at = now_ms();
            ip_batch(
                &c.lab,
                &c.dir,
                c.gw(victim),
                "link set g-in down\nlink set g-out down\n",
            )?;
            Ok(at)
        }
    }
}

/// Waits for a child and parses its stdout as JSON.
fn json_of<T: serde::de::DeserializeOwned>(c: Child, what: &str) -> Result<T> {
    let out = c
        .wait_with_output()
        .with_context(|| format!("waiting for {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout)
        .with_context(|| format!("{what}: {}", String::from_utf8_lossy(&out.stdout).trim()))
}

/// One failover cell on a fresh cluster.
fn failover_cell(
    stop: &Arc<AtomicBool>,
    o: &ClusterOptions,
    plan: &Plan,
    mode: NatMode,
    event: Event,
    throughput: Option<&mut Vec<Throughput>>,
) -> Result<Failover> {
    let mut c = build(stop, o, plan, mode)?;
    if let Some(t) = throughput {
        for round in 0..o.rounds {
            eprintln!(
                "lab cluster: throughput round {} of {}",
                round + 1,
                o.rounds
            );
            t.push(throughput_round(&c, o, plan)?);
        }
    }
    let victim = 0;
    let spread_before = spread(&c, SPREAD_PORT_BEFORE)?;
    let (udp, tcp) = flow_sources(plan, o.per_slice());
    let exe = exe()?;
    let server = c.lab.spawn(
        c.srv(),
        &[
            &exe,
            "flows",
            "server",
            "--udp",
            &SocketAddrV4::new(SERVER, UDP_PORT).to_string(),
            "--tcp",
            &SocketAddrV4::new(SERVER, TCP_PORT).to_string(),
            "--gap-ms",
            "3",
        ],
    )?;
    let (before, after) = o.window();
    let list = |v: &[Ipv4Addr]| {
        v.iter()
            .map(Ipv4Addr::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    let (udp_list, tcp_list) = (list(&udp), list(&tcp));
    let secs = (before + after).to_string();
    // The server listens before the first datagram: poll for its socket.
    let srv_ns = c.srv().to_string();
    poll(&c, Duration::from_secs(5), "flows server listening", || {
        c.lab
            .ns(
                &srv_ns,
                &["ss", "-Hln", "sport", "=", &format!(":{TCP_PORT}")],
            )
            .is_ok_and(|s| !s.trim().is_empty())
    })?;
    let client = c.lab.spawn(
        c.hosts(),
        &[
            &exe,
            "flows",
            "client",
            "--udp-dst",
            &SocketAddrV4::new(SERVER, UDP_PORT).to_string(),
            "--tcp-dst",
            &SocketAddrV4::new(SERVER, TCP_PORT).to_string(),
            "--udp",
            &udp_list,
            "--tcp",
            &tcp_list,
            "--pps",
            &PROBE_PPS.to_string(),
            "--seconds",
            &secs,
        ],
    )?;
    // The failure happens at a fixed point of the traffic's schedule.
    std::thread::sleep(Duration::from_secs_f64(before));
    let event_ms = fail(&mut c, victim, event, &o.quicknat)?;
    let client: ClientReport = json_of(client, "flows client")?;
    // Datagrams in flight arrive within milliseconds; then the server reports.
    std::thread::sleep(Duration::from_millis(300));
    let _ = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    let server: ServerReport = json_of(server, "flows server")?;
    let reconverged = converge(&mut c, plan, &[victim]).is_ok();
    let spread_after = spread(&c, SPREAD_PORT_AFTER)?;
    // The gateways log their counters every second (stats_interval = 1), and converging
    // and the second spread took longer than that since the failure: the logs' last stats
    // lines count what the failure brought (not_for_us: the bridge's flooding).
    let logs = (0..c.n).map(|g| quicknat_log(&c, g)).collect();
    Ok(report::failover(
        plan,
        mode,
        event,
        victim,
        event_ms,
        &udp,
        &tcp,
        &client,
        &server,
        spread_before,
        spread_after,
        reconverged,
        logs,
    ))
}

/// One throughput round: the generator from one subscriber of each gateway's primaries at
/// `gateway_pps`, all gateways at once; then only the first gateway's subscribers at the
/// same per-gateway rate... and at the aggregate rate (through one gateway).
fn throughput_round(c: &Cluster, o: &ClusterOptions, plan: &Plan) -> Result<Throughput> {
    let srcs: Vec<Ipv4Addr> = (0..c.n)
        .map(|g| {
            plan.blocks
                .iter()
                .find(|b| b.primary == g)
                .map(|b| Ipv4Addr::from(u32::from(b.inside) + 2))
                .context("a gateway with no primary block")
        })
        .collect::<Result<_>>()?;
    let all = offer(c, o, &srcs, o.gateway_pps)?;
    let one = offer(c, o, &srcs[..1], o.gateway_pps * c.n as u64)?;
    Ok(Throughput {
        offered_all_pps: all.0,
        delivered_all_pps: all.1,
        offered_one_pps: one.0,
        delivered_one_pps: one.1,
    })
}

/// Offers `pps` from each source at once (`quicknat-lab gen`, 64 source ports each); the
/// (offered, delivered) rates, delivered counted at the server's ingress.
fn offer(c: &Cluster, o: &ClusterOptions, srcs: &[Ipv4Addr], pps: u64) -> Result<(f64, f64)> {
    let exe = exe()?;
    let dst = SocketAddrV4::new(SERVER, GEN_PORT).to_string();
    let before = c.lab.counter(c.srv(), "s0", "rx_packets");
    let t0 = Instant::now();
    let secs = o.seconds.to_string();
    let rate = pps.to_string();
    let gens: Vec<Child> = srcs
        .iter()
        .map(|s| {
            let s = s.to_string();
            c.lab.spawn(
                c.hosts(),
                &[
                    &exe,
                    "gen",
                    "--dst",
                    &dst,
                    "--src",
                    &s,
                    "--flows",
                    "64",
                    "--pps",
                    &rate,
                    "--seconds",
                    &secs,
                    "--json",
                ],
            )
        })
        .collect::<Result<_>>()?;
    let mut offered = 0.0;
    for g in gens {
        let v: serde_json::Value = json_of(g, "gen")?;
        offered += v["pps"].as_f64().unwrap_or(0.0);
    }
    std::thread::sleep(Duration::from_millis(200));
    let got = c
        .lab
        .counter(c.srv(), "s0", "rx_packets")
        .saturating_sub(before) as f64;
    let _ = t0;
    Ok((offered, got / o.seconds as f64))
}

/// Fails naming the Debian packages when a tool is missing.
fn require_tools() -> Result<()> {
    for (tool, pkg) in [
        ("bird", "bird2"),
        ("ip", "iproute2"),
        ("nft", "nftables"),
        ("ethtool", "ethtool"),
        ("ss", "iproute2"),
    ] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            bail!("`{tool}` is missing: apt-get install {pkg}");
        }
    }
    Ok(())
}

/// Runs the cluster lab.
pub fn run_cluster(o: &ClusterOptions) -> Result<ClusterReport> {
    require_tools()?;
    anyhow::ensure!((2..=3).contains(&o.gateways), "--gateways must be 2 or 3");
    for cell in &o.cells {
        anyhow::ensure!(
            [
                "det-kill",
                "det-down",
                "det-drain",
                "dyn-kill",
                "dyn-down",
                "throughput"
            ]
            .contains(&cell.as_str()),
            "--cells: unknown cell {cell:?} (det-kill, det-down, det-drain, dyn-kill, dyn-down, \
             throughput)"
        );
    }
    let stop = stop_flag()?;
    let names: Vec<String> = (1..=o.gateways).map(|g| format!("gw{g}")).collect();
    let plan = Plan::new(INSIDE, INSIDE_LEN, OUTSIDE, OUTSIDE_LEN, &names)?;
    let mut throughput = Vec::new();
    let mut cells = Vec::new();
    let mut want_throughput = o.runs("throughput");
    for (name, mode, event) in [
        ("det-kill", NatMode::Deterministic, Event::Sigkill),
        ("det-down", NatMode::Deterministic, Event::LinkDown),
        ("det-drain", NatMode::Deterministic, Event::Drain),
        ("dyn-kill", NatMode::Dynamic, Event::Sigkill),
        ("dyn-down", NatMode::Dynamic, Event::LinkDown),
    ] {
        if !o.runs(name) {
            continue;
        }
        eprintln!("lab cluster: {name}");
        let t = if want_throughput {
            want_throughput = false;
            Some(&mut throughput)
        } else {
            None
        };
        cells.push(
            failover_cell(&stop, o, &plan, mode, event, t)
                .with_context(|| format!("cell {name}"))?,
        );
    }
    if want_throughput {
        // `--cells throughput` alone: a deterministic cluster for it, no failure.
        eprintln!("lab cluster: throughput");
        let c = build(&stop, o, &plan, NatMode::Deterministic)?;
        for round in 0..o.rounds {
            eprintln!(
                "lab cluster: throughput round {} of {}",
                round + 1,
                o.rounds
            );
            throughput.push(throughput_round(&c, o, &plan)?);
        }
    }
    Ok(report::report(
        o,
        &plan,
        chrono_like_date(),
        cells,
        throughput,
    ))
}
