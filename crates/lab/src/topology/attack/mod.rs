//! `quicknat-lab lab --topology attack`: quicknat NAT44 and the kernel's nftables NAT on the
//! nat44 topology, alternating per round, under hostile and greedy traffic:
//!
//! - **SYN flood at a port forward**: spoofed TCP SYNs from random sources in 10.128.0.0/9
//!   to 203.0.113.1:8080 (quicknat `[[nat44.forward]]`, the kernel's `dnat`), as fast as the
//!   raw-frame generator goes (`quicknat-lab flood`, AF_PACKET `sendmmsg`, core 0) or paced
//!   at `--flood-pps` so both face the same load, while a
//!   legitimate outside client (198.51.100.2) opens connections to the forward one after
//!   another (1 s each, one byte echoed) and an established inside->outside iperf3 flow
//!   runs. Reported: the legitimate success rate, the iperf3 throughput in the second before
//!   the flood and during it, the flood rate offered and the SYN rate reaching the inside
//!   server (an nftables counter at the server's ingress).
//! - **Greedy inside host**: 10.0.0.3 opens new flows (random source ports to random
//!   destinations in 192.0.2.0/24, UDP and TCP SYN alternating) as fast as the generator
//!   goes; after it has run for a while, 50 other inside hosts (10.0.0.100-149) each open
//!   one TCP connection to the server. Reported: how many of the 50 got through. The kernel
//!   is also run with the best-practice per-host limit (`ct count over N`).
//! - **Hash collisions vs random tuples**: SYNs to the forward from N sources that all fall
//!   in one bucket of an *unkeyed* session hash (the attacker's model,
//!   [`crate::flood::old_key_hash`]), against N random sources, replayed at the same fixed
//!   rate, alternating, several pairs; the gateway's own CPU time per forwarded packet
//!   (quicknat's threads from `/proc/<pid>/task/*/schedstat` plus every core's softirq
//!   time, see `cpu.rs`), medians and the ratio. The inside server's ingress drops them so only the gateway costs.
//! - **Link flap and SIGKILL + restart**: a 1 kHz UDP probe stream with sequence numbers,
//!   inside -> outside; the gateway's outside link goes down and up, then (quicknat only)
//!   quicknat is killed with SIGKILL and started again at once. Reported: time from the
//!   event (link up; the kill) to the first probe through, and probes lost.
//!
//! Every cell runs on a freshly built topology (namespaces `qn-lab-atk-*-PID`), so no state
//! (sessions, conntrack entries, a table left by a killed gateway) leaks from one cell into
//! the next. Tables are sized the same: quicknat's `max_sessions` is set to the kernel's
//! `nf_conntrack_max` (the global value: on this kernel it cannot be changed inside a
//! namespace, and the lab does not change the host's). Each measure has a goal; the lab
//! reports what it measures beside them and never decides a pass.
//!
//! ```text
//! cli (10.0.0.2, .3, .20, .100-149) ==c0|g-in== gw (10.0.0.1 | 198.51.100.1) ==g-out|s0== srv (198.51.100.2)
//! ```

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};

use super::{
    chrono_like_date, exe, med, require, run, stop_child, stop_flag, temp_path, Lab, GW_CORE,
};
use crate::flood::{find_collisions, random_tuples, FloodReport};
use crate::probe::{ConnectReport, Outage};

mod cells;
mod report;

use cells::{collision_cell, flood_cell, greedy_cell, recovery_cell, Tuples};
use report::rows;
pub use report::{ArmRound, AttackReport, FloodCpu};

const PUBLIC: &str = "203.0.113.1";
const FORWARD: &str = "203.0.113.1:8080";
const INSIDE_SERVER: &str = "10.0.0.20";
const SERVER: &str = "198.51.100.2";
/// Where the spoofed sources come from (never one of the lab's own addresses).
const SPOOFED_NET: &str = "10.128.0.0/9";
const GREEDY_HOST: &str = "10.0.0.3";
const GREEDY_DSTS: &str = "192.0.2.0/24";
const POLITE_FIRST: &str = "10.0.0.100";
/// The other inside hosts of the greedy-host cell.
pub const POLITE_HOSTS: u32 = 50;
const PROBE_PORT: u16 = 7001;
const ECHO_PORT: u16 = 7000;

/// What to run.
#[derive(Clone, Debug)]
pub struct AttackOptions {
    /// Seconds of SYN flood (60 in the full form).
    pub seconds: u64,
    /// Alternating rounds (medians reported).
    pub rounds: usize,
    /// quicknat backends, each against the same kernel runs.
    pub backends: Vec<String>,
    /// The quicknat binary run as the gateway.
    pub quicknat: PathBuf,
    /// Session table size for both (`None`: the kernel's `nf_conntrack_max`).
    pub max_sessions: Option<usize>,
    /// Crafted colliding tuples (and as many random ones).
    pub collisions: usize,
    /// Fixed offered rate of the collision cells, packets per second.
    pub collision_pps: u64,
    /// The kernel's best-practice per-host limit (`ct count over N`); 0: not run.
    pub host_limit: u32,
    /// The SYN flood's fixed rate, packets per second (`None`: as fast as the generator goes).
    pub flood_pps: Option<u64>,
    /// The short form (CI): shorter cells, no `ct count` run.
    pub short: bool,
    /// Cells to run (`flood`, `greedy`, `collisions`, `recovery`); empty: all.
    pub cells: Vec<String>,
}

impl AttackOptions {
    /// Whether the cell `name` runs.
    fn runs(&self, name: &str) -> bool {
        self.cells.is_empty() || self.cells.iter().any(|c| c == name)
    }
    fn greedy_fill(&self) -> f64 {
        if self.short {
            1.0
        } else {
            (self.seconds as f64).clamp(1.0, 10.0)
        }
    }
    /// Random/crafted pairs of collision runs, alternating (medians reported).
    fn collision_pairs(&self) -> usize {
        if self.short {
            2
        } else {
            3
        }
    }
    fn collision_seconds(&self) -> u64 {
        if self.short {
            1
        } else {
            self.seconds.clamp(1, 5)
        }
    }
    /// (before the event, window after it), seconds.
    fn probe_window(&self) -> (f64, f64) {
        if self.short {
            (0.5, 2.0)
        } else {
            (1.0, 5.0)
        }
    }
}

/// A quicknat arm's gateway configuration.
fn config(backend: &str, max_sessions: usize) -> String {
    format!(
        "[gateway]\ninside = \"g-in\"\noutside = \"g-out\"\nbackend = \"{backend}\"\nworkers = 1\nstats_interval = 3600\n\n\
         [nat44]\nmax_sessions = {max_sessions}\n\n\
         [[nat44.rule]]\ninside = \"10.0.0.0/24\"\npool = [\"{PUBLIC}/32\"]\n\n\
         [[nat44.forward]]\nprotocol = \"tcp\"\npublic = \"{FORWARD}\"\ninside = \"{INSIDE_SERVER}:80\"\n"
    )
}

/// The kernel's NAT on the same topology: forwarding on, `snat` out of g-out, `dnat` for the
/// forward.
const KERNEL_NAT: &str = r#"table ip qnlab {
  chain pre {
    type nat hook prerouting priority -100;
    iifname "g-out" ip daddr 203.0.113.1 tcp dport 8080 dnat to 10.0.0.20:80
  }
  chain post {
    type nat hook postrouting priority 100;
    oifname "g-out" snat to 203.0.113.1
  }
}
"#;

/// The kernel's best-practice per-host limit (nftables wiki, "connlimit").
fn kernel_host_limit(n: u32) -> String {
    format!(
        "table ip qnlimit {{\n  set hosts {{ type ipv4_addr; flags dynamic; size 65535; }}\n  chain hostlimit {{\n    type filter hook forward priority 0;\n    iifname \"g-in\" ct state new add @hosts {{ ip saddr ct count over {n} }} counter drop\n  }}\n}}\n"
    )
}

/// `nft -f` of `rules` in `ns`.
fn nft(lab: &Lab, ns: &str, rules: &str) -> Result<()> {
    let path = temp_path("attack.nft");
    std::fs::write(&path, rules)?;
    let r = lab.ns(ns, &["nft", "-f", &path.to_string_lossy()]);
    let _ = std::fs::remove_file(&path);
    r.map(drop)
}

/// `ip -batch` of `cmds` in `ns`.
fn ip_batch(lab: &Lab, ns: &str, cmds: &str) -> Result<()> {
    let path = temp_path("attack.ip");
    std::fs::write(&path, cmds)?;
    let r = lab.ns(ns, &["ip", "-batch", &path.to_string_lossy()]);
    let _ = std::fs::remove_file(&path);
    r.map(drop)
}

fn mac(lab: &Lab, ns: &str, dev: &str) -> Result<String> {
    Ok(lab
        .ns(ns, &["cat", &format!("/sys/class/net/{dev}/address")])?
        .trim()
        .to_string())
}

/// The topology, fresh for every cell.
fn build(stop: &Arc<AtomicBool>) -> Result<Lab> {
    let lab = Lab::new(&["atk-cli", "atk-gw", "atk-srv"], Arc::clone(stop))?;
    let (cli, gw, srv) = (lab.cli(), lab.gw(), lab.srv());
    lab.veth(cli, "c0", gw, "g-in")?;
    lab.veth(srv, "s0", gw, "g-out")?;
    ip_batch(
        &lab,
        cli,
        "addr add 10.0.0.2/24 dev c0\naddr add 10.0.0.3/24 dev c0\naddr add 10.0.0.20/24 dev c0\n\
         route add default via 10.0.0.1\n",
    )?;
    ip_batch(
        &lab,
        gw,
        "addr add 10.0.0.1/24 dev g-in\naddr add 198.51.100.1/24 dev g-out\n\
         route add default via 198.51.100.2\n",
    )?;
    ip_batch(
        &lab,
        srv,
        "addr add 198.51.100.2/24 dev s0\nroute add 203.0.113.0/24 via 198.51.100.1\n",
    )?;
    // Replies to spoofed sources leave by the default route; nothing checks their source.
    lab.sysctl(gw, "net.ipv4.conf.all.rp_filter=0")?;
    lab.sysctl(gw, "net.ipv4.ip_forward=0")?;
    // Neighbours fixed, so a flood never starves address resolution (the same for both).
    let (c0, gin, gout, s0) = (
        mac(&lab, cli, "c0")?,
        mac(&lab, gw, "g-in")?,
        mac(&lab, gw, "g-out")?,
        mac(&lab, srv, "s0")?,
    );
    ip_batch(
        &lab,
        gw,
        &format!(
            "neigh replace {INSIDE_SERVER} lladdr {c0} dev g-in nud permanent\n\
             neigh replace 10.0.0.2 lladdr {c0} dev g-in nud permanent\n\
             neigh replace {SERVER} lladdr {s0} dev g-out nud permanent\n"
        ),
    )?;
    ip_batch(
        &lab,
        cli,
        &format!("neigh replace 10.0.0.1 lladdr {gin} dev c0 nud permanent\n"),
    )?;
    ip_batch(
        &lab,
        srv,
        &format!("neigh replace 198.51.100.1 lladdr {gout} dev s0 nud permanent\n"),
    )?;
    // The outside sink: what the gateway sends to the "Internet" (SYN-ACKs to spoofed
    // sources, the greedy host's flows) is dropped at the server's ingress, costing nothing.
    nft(
        &lab,
        srv,
        "table netdev qnsink {\n  chain in {\n    type filter hook ingress device \"s0\" priority 0;\n    meta protocol ip ip daddr != 198.51.100.2 drop\n  }\n}\n",
    )?;
    lab.rps(gw, &["g-in", "g-out"], GW_CORE);
    lab.offloads(
        &[(cli, "c0"), (gw, "g-in"), (gw, "g-out"), (srv, "s0")],
        false,
    );
    Ok(lab)
}

/// A running arm: the kernel's NAT or quicknat.
enum Mode {
    Kernel,
    Quicknat(Child),
}

fn start(lab: &Lab, bin: &Path, cfg: Option<&Path>) -> Result<Mode> {
    match cfg {
        Some(cfg) => Ok(Mode::Quicknat(lab.start_quicknat(
            bin,
            lab.gw(),
            GW_CORE,
            cfg,
        )?)),
        None => {
            lab.sysctl(lab.gw(), "net.ipv4.ip_forward=1")?;
            nft(lab, lab.gw(), KERNEL_NAT)?;
            Ok(Mode::Kernel)
        }
    }
}

/// quicknat's process id (`None`: the kernel's NAT).
fn pid_of(m: &Mode) -> Option<u32> {
    match m {
        Mode::Quicknat(c) => Some(c.id()),
        Mode::Kernel => None,
    }
}

/// Stops the arm; quicknat's closing counter line.
fn stop_mode(m: Mode) -> String {
    match m {
        Mode::Kernel => String::new(),
        Mode::Quicknat(c) => stop_child(c),
    }
}

/// Waits for a child and parses its stdout as JSON.
fn json_of<T: serde::de::DeserializeOwned>(c: Child, what: &str) -> Result<T> {
    let out = c
        .wait_with_output()
        .with_context(|| format!("waiting for {what}"))?;
    if !out.status.success() {
        anyhow::bail!(
            "{what} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout)
        .with_context(|| format!("{what}: {}", String::from_utf8_lossy(&out.stdout).trim()))
}

/// Starts `quicknat-lab flood` in `ns` on `dev` (core 0) towards `peer_mac`.
fn spawn_flood(lab: &Lab, ns: &str, dev: &str, peer_mac: &str, args: &[&str]) -> Result<Child> {
    let exe = exe()?;
    let src_mac = mac(lab, ns, dev)?;
    let mut a = vec![
        "taskset",
        "-c",
        "0",
        &exe,
        "flood",
        "--dev",
        dev,
        "--dst-mac",
        peer_mac,
        "--src-mac",
        &src_mac,
    ];
    a.extend_from_slice(args);
    lab.spawn(ns, &a)
}

/// A packet counter at the inside server's ingress (netdev, so it counts before the
/// server's stack): SYNs to the forward target; `drop` makes it the sink as well.
fn inside_counter(lab: &Lab, drop: bool) -> Result<()> {
    nft(
        lab,
        lab.cli(),
        &format!(
            "table netdev qnatk {{\n  chain in {{\n    type filter hook ingress device \"c0\" priority 0;\n    ip daddr {INSIDE_SERVER} tcp dport 80 tcp flags & (syn | ack) == syn counter{}\n  }}\n}}\n",
            if drop { " drop" } else { "" }
        ),
    )
}

fn inside_count(lab: &Lab) -> u64 {
    lab.ns(lab.cli(), &["nft", "list", "table", "netdev", "qnatk"])
        .ok()
        .and_then(|t| {
            let i = t.find("packets ")?;
            t[i + 8..].split_whitespace().next()?.parse().ok()
        })
        .unwrap_or(0)
}

/// One arm's whole round: every cell on its own fresh topology.
fn arm_round(
    stop: &Arc<AtomicBool>,
    o: &AttackOptions,
    cfg: Option<&Path>,
    files: &Tuples,
) -> Result<ArmRound> {
    let mut r = ArmRound::default();
    let bin = o.quicknat.as_path();
    if o.runs("flood") {
        let lab = build(stop)?;
        let m = start(&lab, bin, cfg)?;
        let pid = pid_of(&m);
        let res = flood_cell(&lab, o, pid, &mut r);
        r.quicknat_stats.push(stop_mode(m));
        r.quicknat_stats_cells.push("flood".into());
        res?;
    }
    if o.runs("greedy") {
        let lab = build(stop)?;
        let m = start(&lab, bin, cfg)?;
        let res = greedy_cell(&lab, o, None);
        r.quicknat_stats.push(stop_mode(m));
        r.quicknat_stats_cells.push("greedy".into());
        (r.greedy_others, r.greedy) = res?;
    }
    if cfg.is_none() && o.host_limit > 0 && !o.short && o.runs("greedy") {
        let lab = build(stop)?;
        let m = start(&lab, bin, cfg)?;
        let res = greedy_cell(&lab, o, Some(o.host_limit));
        stop_mode(m);
        r.greedy_others_ct_count = Some(res?.0);
    }
    if o.runs("collisions") {
        let lab = build(stop)?;
        let m = start(&lab, bin, cfg)?;
        let pid = pid_of(&m);
        let res = collision_cell(&lab, o, files, pid, &mut r);
        r.quicknat_stats.push(stop_mode(m));
        r.quicknat_stats_cells.push("collisions".into());
        res?;
    }
    if o.runs("recovery") {
        let lab = build(stop)?;
        let m = start(&lab, bin, cfg)?;
        let m = recovery_cell(&lab, o, m, bin, cfg, &mut r)?;
        stop_mode(m);
    }
    // The kernel's arm has no counter lines.
    let cells = std::mem::take(&mut r.quicknat_stats_cells);
    let (stats, cells): (Vec<String>, Vec<String>) = std::mem::take(&mut r.quicknat_stats)
        .into_iter()
        .zip(cells)
        .filter(|(s, _)| !s.is_empty())
        .unzip();
    (r.quicknat_stats, r.quicknat_stats_cells) = (stats, cells);
    Ok(r)
}

/// The kernel's `nf_conntrack_max` in a lab namespace, and whether setting it there works.
fn kernel_table(stop: &Arc<AtomicBool>, want: Option<usize>) -> Result<(usize, String)> {
    let lab = Lab::new(&["atk-probe"], Arc::clone(stop))?;
    let ns = lab.at(0);
    let read = |lab: &Lab| -> usize {
        lab.ns(ns, &["sysctl", "-n", "net.netfilter.nf_conntrack_max"])
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    let global = read(&lab);
    let Some(w) = want else {
        return Ok((
            global,
            format!("{global} (global; max_sessions set to match)"),
        ));
    };
    let set = lab
        .sysctl(ns, &format!("net.netfilter.nf_conntrack_max={w}"))
        .is_ok();
    let now = read(&lab);
    Ok((
        w,
        if set && now == w {
            format!("{now} (set in the gateway namespace)")
        } else {
            format!("{now} (global; not settable in a namespace here, so not {w})")
        },
    ))
}

/// Runs the attack lab.
pub fn run_attack(o: &AttackOptions) -> Result<AttackReport> {
    require(&[
        "ip", "iperf3", "nft", "ethtool", "taskset", "chrt", "timeout",
    ])?;
    let stop = stop_flag()?;
    let (max_sessions, kernel_conntrack_max) = kernel_table(&stop, o.max_sessions)?;
    anyhow::ensure!(max_sessions > 0, "could not read nf_conntrack_max");
    let t0 = Instant::now();
    let dst = (PUBLIC.parse()?, 8080);
    let net = crate::flood::parse_net(SPOOFED_NET)?;
    let crafted = find_collisions(dst, net, max_sessions, o.collisions);
    let collision_search_s = t0.elapsed().as_secs_f64();
    anyhow::ensure!(
        crafted.len() == o.collisions,
        "found only {} colliding tuples",
        crafted.len()
    );
    let random = random_tuples(net, o.collisions, 0x5eed);
    let files = Tuples {
        crafted: temp_path("crafted.tuples"),
        random: temp_path("random.tuples"),
    };
    let write = |p: &Path, t: &[(std::net::Ipv4Addr, u16)]| {
        std::fs::write(
            p,
            t.iter()
                .map(|(a, p)| format!("{a}:{p}\n"))
                .collect::<String>(),
        )
    };
    write(&files.crafted, &crafted)?;
    write(&files.random, &random)?;
    let configs: Vec<(String, PathBuf)> = o
        .backends
        .iter()
        .map(|b| {
            let p = temp_path(&format!("attack-{b}.toml"));
            std::fs::write(&p, config(b, max_sessions)).map(|()| (b.clone(), p))
        })
        .collect::<std::io::Result<_>>()?;
    let cfgs = super::Configs(configs);
    let mut kernel = Vec::new();
    let mut quicknat: Vec<Vec<ArmRound>> = cfgs.0.iter().map(|_| Vec::new()).collect();
    for round in 0..o.rounds {
        for arm in std::iter::once(None).chain((0..cfgs.0.len()).map(Some)) {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                anyhow::bail!("interrupted");
            }
            let name = arm.map_or("kernel nftables NAT".to_string(), |i| {
                format!("quicknat {}", cfgs.0[i].0)
            });
            eprintln!("lab attack: round {} of {}: {name}", round + 1, o.rounds);
            let r = arm_round(&stop, o, arm.map(|i| cfgs.0[i].1.as_path()), &files)
                .with_context(|| format!("{name}, round {}", round + 1))?;
            match arm {
                Some(i) => quicknat[i].push(r),
                None => kernel.push(r),
            }
        }
    }
    let mut arms: Vec<(String, Vec<ArmRound>)> = cfgs
        .0
        .iter()
        .map(|(b, _)| format!("quicknat {b}"))
        .zip(quicknat)
        .collect();
    arms.push(("kernel NAT".to_string(), kernel));
    Ok(AttackReport {
        when: chrono_like_date(),
        seconds: o.seconds,
        rounds: o.rounds,
        short: o.short,
        max_sessions,
        kernel_conntrack_max,
        collisions: o.collisions,
        collision_search_s,
        collision_pps: o.collision_pps,
        host_limit: if o.short { 0 } else { o.host_limit },
        flood_pps: o.flood_pps,
        arms: arms.iter().map(|(n, _)| n.clone()).collect(),
        rows: rows(&arms, o),
        raw: arms,
    })
}
