//! `quicknat lab`: builds client, gateway and server network namespaces joined by veth,
//! and measures quicknat and the kernel's own NAT (nftables) on the same topology, in
//! the same run, alternating: TCP throughput (iperf3, 1 and 4 streams, offloads off and
//! on), 64-byte UDP capacity of one gateway core, and the gateway core's CPU per packet
//! at a fixed offered load. Namespaces are removed at the end, on error, and on Ctrl-C.
//!
//! ```text
//! cli (10.0.0.2) ==c0|g-in== gw (10.0.0.1 | 198.51.100.1) ==g-out|s0== srv (198.51.100.2)
//! ```
//! The server routes 203.0.113.0/24 (the NAT's public address) to the gateway. In the
//! quicknat runs the gateway kernel does not forward (ip_forward=0); in the kernel runs it
//! forwards and nftables translates to the same public address.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use runtime::bench::median;

/// What to run.
#[derive(Clone, Debug)]
pub struct LabOptions {
    /// Seconds per measurement.
    pub seconds: u64,
    /// Alternating rounds (medians reported).
    pub rounds: usize,
    /// Offered load for the CPU-per-packet cell.
    pub fixed_pps: u64,
    /// Also measure TCP with offloads on.
    pub offloads_on: bool,
    /// quicknat backends to measure, each against the same kernel runs ("af_xdp", "af_packet").
    pub backends: Vec<String>,
}

const PUBLIC: &str = "203.0.113.1";
const SERVER: &str = "198.51.100.2";
/// The gateway core the data plane runs on (RPS steers the kernel's receive work there,
/// quicknat's worker is pinned there); the generator runs on core 0.
const GW_CORE: usize = 1;

struct Lab {
    cli: String,
    gw: String,
    srv: String,
    stop: Arc<AtomicBool>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in [&self.cli, &self.gw, &self.srv] {
            if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            }
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Lab {
    fn ns(&self, ns: &str, args: &[&str]) -> Result<String> {
        run(Command::new("ip").args(["netns", "exec", ns]).args(args))
    }

    fn spawn(&self, ns: &str, args: &[&str]) -> Result<Child> {
        Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {args:?} in {ns}"))
    }

    fn build(stop: Arc<AtomicBool>) -> Result<Self> {
        let id = std::process::id();
        let lab = Lab {
            cli: format!("qn-lab-cli-{id}"),
            gw: format!("qn-lab-gw-{id}"),
            srv: format!("qn-lab-srv-{id}"),
            stop,
        };
        for ns in [&lab.cli, &lab.gw, &lab.srv] {
            run(Command::new("ip").args(["netns", "add", ns]))?;
        }
        run(Command::new("ip").args([
            "link", "add", "c0", "netns", &lab.cli, "type", "veth", "peer", "name", "g-in",
            "netns", &lab.gw,
        ]))?;
        run(Command::new("ip").args([
            "link", "add", "s0", "netns", &lab.srv, "type", "veth", "peer", "name", "g-out",
            "netns", &lab.gw,
        ]))?;
        lab.ns(&lab.cli, &["ip", "addr", "add", "10.0.0.2/24", "dev", "c0"])?;
        lab.ns(
            &lab.gw,
            &["ip", "addr", "add", "10.0.0.1/24", "dev", "g-in"],
        )?;
        lab.ns(
            &lab.gw,
            &["ip", "addr", "add", "198.51.100.1/24", "dev", "g-out"],
        )?;
        lab.ns(
            &lab.srv,
            &["ip", "addr", "add", "198.51.100.2/24", "dev", "s0"],
        )?;
        for (ns, devs) in [
            (&lab.cli, &["c0", "lo"][..]),
            (&lab.gw, &["g-in", "g-out", "lo"][..]),
            (&lab.srv, &["s0", "lo"][..]),
        ] {
            for d in devs {
                lab.ns(ns, &["ip", "link", "set", d, "up"])?;
            }
        }
        lab.ns(
            &lab.cli,
            &["ip", "route", "add", "default", "via", "10.0.0.1"],
        )?;
        lab.ns(
            &lab.srv,
            &[
                "ip",
                "route",
                "add",
                "203.0.113.0/24",
                "via",
                "198.51.100.1",
            ],
        )?;
        // The kernel's receive work for frames entering the gateway runs on GW_CORE.
        let mask = format!("{:x}", 1u32 << GW_CORE);
        for dev in ["g-in", "g-out"] {
            let _ = lab.ns(
                &lab.gw,
                &[
                    "sh",
                    "-c",
                    &format!("echo {mask} > /sys/class/net/{dev}/queues/rx-0/rps_cpus"),
                ],
            );
        }
        Ok(lab)
    }

    fn offloads(&self, on: bool) {
        let v = if on { "on" } else { "off" };
        for (ns, dev) in [
            (&self.cli, "c0"),
            (&self.gw, "g-in"),
            (&self.gw, "g-out"),
            (&self.srv, "s0"),
        ] {
            let _ = self.ns(
                ns,
                &["ethtool", "-K", dev, "tx", v, "tso", v, "gso", v, "gro", v],
            );
        }
    }

    fn counter(&self, ns: &str, dev: &str, what: &str) -> u64 {
        self.ns(
            ns,
            &["cat", &format!("/sys/class/net/{dev}/statistics/{what}")],
        )
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
    }
}

/// Spins for `d`, returning loop iterations per second (the `soak` subcommand).
pub fn soak(d: Duration) -> f64 {
    let t0 = Instant::now();
    let mut n = 0u64;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    while t0.elapsed() < d {
        for _ in 0..4096 {
            x = std::hint::black_box(x.rotate_left(7) ^ 0x1234_5678);
        }
        n += 4096;
    }
    n as f64 / t0.elapsed().as_secs_f64()
}

/// Starts a soaker on `core` at SCHED_IDLE priority: it only gets what nothing else wants.
fn soak_on(core: usize, seconds: u64) -> Result<Child> {
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();
    Command::new("chrt")
        .args([
            "-i",
            "0",
            "taskset",
            "-c",
            &core.to_string(),
            &exe,
            "soak",
            "--seconds",
            &seconds.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the CPU soaker (chrt, taskset)")
}

fn soak_rate(child: Child) -> f64 {
    child
        .wait_with_output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(0.0)
}

/// One mode's measurements.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ModeResult {
    /// iperf3, 1 stream, offloads off (Gbit/s).
    pub tcp1_off: f64,
    /// iperf3, 4 streams, offloads off.
    pub tcp4_off: f64,
    /// iperf3, 1 stream, offloads on.
    pub tcp1_on: Option<f64>,
    /// Gateway capacity: 64-byte UDP packets forwarded per second (server drops at ingress).
    pub udp64_capacity_pps: f64,
    /// Packets the generator offered per second in that cell.
    pub udp64_offered_pps: f64,
    /// Gateway core CPU per forwarded packet at the fixed load (nanoseconds), from a
    /// SCHED_IDLE soaker's lost rate.
    pub cpu_ns_per_packet: f64,
    /// Packets forwarded per second at the fixed load.
    pub fixed_forwarded_pps: f64,
}

enum Mode {
    Kernel,
    Quicknat(Child),
}

fn start_mode(lab: &Lab, quicknat: Option<&std::path::Path>) -> Result<Mode> {
    if let Some(cfg) = quicknat {
        lab.ns(&lab.gw, &["sysctl", "-q", "-w", "net.ipv4.ip_forward=0"])?;
        let exe = std::env::current_exe().context("finding the quicknat binary")?;
        let exe = exe.to_string_lossy().into_owned();
        let child = lab.spawn(
            &lab.gw,
            &[
                "taskset",
                "-c",
                &GW_CORE.to_string(),
                &exe,
                "run",
                "--config",
                &cfg.to_string_lossy(),
            ],
        )?;
        std::thread::sleep(Duration::from_millis(700));
        Ok(Mode::Quicknat(child))
    } else {
        lab.ns(&lab.gw, &["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])?;
        lab.ns(&lab.gw, &["nft", "add", "table", "ip", "qnlab"])?;
        lab.ns(
            &lab.gw,
            &[
                "nft",
                "add",
                "chain",
                "ip",
                "qnlab",
                "post",
                "{ type nat hook postrouting priority 100; }",
            ],
        )?;
        lab.ns(
            &lab.gw,
            &[
                "nft", "add", "rule", "ip", "qnlab", "post", "oifname", "g-out", "snat", "to",
                PUBLIC,
            ],
        )?;
        Ok(Mode::Kernel)
    }
}

fn stop_mode(lab: &Lab, m: Mode) -> Result<()> {
    match m {
        Mode::Kernel => {
            lab.ns(&lab.gw, &["nft", "delete", "table", "ip", "qnlab"])?;
            lab.ns(&lab.gw, &["sysctl", "-q", "-w", "net.ipv4.ip_forward=0"])?;
        }
        Mode::Quicknat(mut c) => {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = c.try_wait() {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
        }
    }
    // Let conntrack/sessions from this mode not leak into the next.
    let _ = lab.ns(
        &lab.gw,
        &[
            "sh",
            "-c",
            "command -v conntrack >/dev/null && conntrack -F || true",
        ],
    );
    Ok(())
}

fn iperf(lab: &Lab, streams: u32, seconds: u64) -> Result<f64> {
    let mut server = lab.spawn(&lab.srv, &["iperf3", "-s", "-1", "-B", SERVER])?;
    std::thread::sleep(Duration::from_millis(300));
    // A path that stalls (e.g. GSO frames dropped) must not hang the lab: bound the client.
    let limit = (seconds + 10).to_string();
    let out = lab.ns(
        &lab.cli,
        &[
            "timeout",
            &limit,
            "iperf3",
            "-c",
            SERVER,
            "-t",
            &seconds.to_string(),
            "-P",
            &streams.to_string(),
            "-J",
            "--connect-timeout",
            "3000",
        ],
    );
    let _ = server.kill();
    let _ = server.wait();
    let Ok(out) = out else { return Ok(0.0) };
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    Ok(v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0)
        / 1e9)
}

/// Offers 64-byte UDP (64 flows) for `seconds`; returns (offered pps, forwarded pps, gateway
/// core CPU ns per forwarded packet). The CPU figure comes from a SCHED_IDLE soaker on the
/// gateway core: the share of its idle-core rate it lost is the share the gateway used
/// (the kernel's per-CPU tick accounting proved unreliable on these VMs).
fn udp64(lab: &Lab, pps: Option<u64>, seconds: u64, idle_rate: f64) -> Result<(f64, f64, f64)> {
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();
    let before_fwd = lab.counter(&lab.gw, "g-out", "tx_packets");
    let soaker = if idle_rate > 0.0 {
        Some(soak_on(GW_CORE, seconds)?)
    } else {
        None
    };
    let t0 = Instant::now();
    let mut args = vec![
        "taskset",
        "-c",
        "0",
        exe.as_str(),
        "gen",
        "--dst",
        "198.51.100.2:9",
        "--flows",
        "64",
        "--payload",
        "18",
        "--seconds",
    ];
    let secs = seconds.to_string();
    args.push(&secs);
    let rate;
    if let Some(p) = pps {
        rate = p.to_string();
        args.extend(["--pps", rate.as_str()]);
    }
    args.push("--json");
    let out = lab.ns(&lab.cli, &args)?;
    let elapsed = t0.elapsed().as_secs_f64();
    let fwd = lab
        .counter(&lab.gw, "g-out", "tx_packets")
        .saturating_sub(before_fwd) as f64;
    let busy = soaker
        .map(|c| (1.0 - soak_rate(c) / idle_rate).clamp(0.0, 1.0))
        .unwrap_or(0.0);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_default();
    let offered = v["pps"].as_f64().unwrap_or(0.0);
    let fwd_pps = fwd / elapsed;
    Ok((
        offered,
        fwd_pps,
        if fwd_pps > 0.0 {
            busy * 1e9 / fwd_pps
        } else {
            0.0
        },
    ))
}

fn measure(lab: &Lab, opts: &LabOptions) -> Result<ModeResult> {
    let s = opts.seconds;
    let mut r = ModeResult::default();
    lab.offloads(false);
    r.tcp1_off = iperf(lab, 1, s)?;
    r.tcp4_off = iperf(lab, 4, s)?;
    if opts.offloads_on {
        lab.offloads(true);
        r.tcp1_on = Some(iperf(lab, 1, s).unwrap_or(0.0));
        lab.offloads(false);
    }
    // Capacity: the server drops at ingress so the sink costs nothing.
    lab.ns(&lab.srv, &["nft", "add", "table", "netdev", "qnsink"])?;
    lab.ns(
        &lab.srv,
        &[
            "nft",
            "add",
            "chain",
            "netdev",
            "qnsink",
            "in",
            "{ type filter hook ingress device \"s0\" priority 0; policy drop; }",
        ],
    )?;
    let (offered, fwd, _) = udp64(lab, None, s, 0.0)?;
    r.udp64_offered_pps = offered;
    r.udp64_capacity_pps = fwd;
    // The soaker's rate on an idle gateway core, measured now (same mode, no traffic).
    let idle = soak_rate(soak_on(GW_CORE, 1)?);
    let (_, fwd, cpu) = udp64(lab, Some(opts.fixed_pps), s, idle)?;
    r.fixed_forwarded_pps = fwd;
    r.cpu_ns_per_packet = cpu;
    lab.ns(&lab.srv, &["nft", "delete", "table", "netdev", "qnsink"])?;
    Ok(r)
}

/// The lab's report: medians per mode.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct LabReport {
    /// UTC date and kernel.
    pub when: String,
    /// Seconds per measurement and rounds.
    pub seconds: u64,
    /// Rounds.
    pub rounds: usize,
    /// Fixed offered load for the CPU cell.
    pub fixed_pps: u64,
    /// quicknat per backend, medians.
    pub quicknat: Vec<(String, ModeResult)>,
    /// Kernel nftables NAT, medians.
    pub kernel: ModeResult,
}

fn med(rs: &[ModeResult], f: impl Fn(&ModeResult) -> f64) -> f64 {
    median(rs.iter().map(f).collect())
}

fn combine(rs: &[ModeResult]) -> ModeResult {
    ModeResult {
        tcp1_off: med(rs, |r| r.tcp1_off),
        tcp4_off: med(rs, |r| r.tcp4_off),
        tcp1_on: rs
            .first()
            .and_then(|r| r.tcp1_on)
            .map(|_| med(rs, |r| r.tcp1_on.unwrap_or(0.0))),
        udp64_capacity_pps: med(rs, |r| r.udp64_capacity_pps),
        udp64_offered_pps: med(rs, |r| r.udp64_offered_pps),
        cpu_ns_per_packet: med(rs, |r| r.cpu_ns_per_packet),
        fixed_forwarded_pps: med(rs, |r| r.fixed_forwarded_pps),
    }
}

impl std::fmt::Display for LabReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let k = &self.kernel;
        writeln!(
            f,
            "quicknat lab — {} — median of {} alternating rounds, {} s each",
            self.when, self.rounds, self.seconds
        )?;
        write!(f, "{:<44}", "measure")?;
        for (b, _) in &self.quicknat {
            write!(f, " {:>14}", format!("quicknat {b}"))?;
        }
        write!(f, " {:>12}", "kernel NAT")?;
        for (b, _) in &self.quicknat {
            write!(f, " {:>12}", format!("{b}/kernel"))?;
        }
        writeln!(f)?;
        let mut row = |name: &str, get: &dyn Fn(&ModeResult) -> Option<f64>| -> std::fmt::Result {
            let Some(kv) = get(k) else { return Ok(()) };
            write!(f, "{name:<44}")?;
            for (_, q) in &self.quicknat {
                write!(f, " {:>14.2}", get(q).unwrap_or(0.0))?;
            }
            write!(f, " {kv:>12.2}")?;
            for (_, q) in &self.quicknat {
                let v = get(q).unwrap_or(0.0);
                write!(
                    f,
                    " {:>12}",
                    if kv > 0.0 {
                        format!("{:.2}x", v / kv)
                    } else {
                        "-".into()
                    }
                )?;
            }
            writeln!(f)
        };
        row("TCP 1 stream, offloads off (Gbit/s)", &|r| Some(r.tcp1_off))?;
        row("TCP 4 streams, offloads off (Gbit/s)", &|r| {
            Some(r.tcp4_off)
        })?;
        row("TCP 1 stream, offloads on (Gbit/s)", &|r| r.tcp1_on)?;
        row("64 B UDP capacity, 1 gateway core (Mpps)", &|r| {
            Some(r.udp64_capacity_pps / 1e6)
        })?;
        row("  offered by the generator (Mpps)", &|r| {
            Some(r.udp64_offered_pps / 1e6)
        })?;
        row(
            &format!(
                "gateway core CPU per packet at {} kpps (ns)",
                self.fixed_pps / 1000
            ),
            &|r| Some(r.cpu_ns_per_packet),
        )?;
        row("  forwarded at that load (kpps)", &|r| {
            Some(r.fixed_forwarded_pps / 1e3)
        })
    }
}

/// Runs the lab. `quick` shortens everything for a smoke run.
pub fn run_lab(opts: &LabOptions) -> Result<LabReport> {
    for tool in ["ip", "iperf3", "nft", "ethtool", "taskset"] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            bail!(
                "`{tool}` is missing: apt-get install iproute2 iperf3 nftables ethtool util-linux"
            );
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("installing signal handlers")?;
    }
    let lab = Lab::build(Arc::clone(&stop))?;
    let cfgs: Vec<(String, PathBuf)> = opts
        .backends
        .iter()
        .map(|b| {
            (
                b.clone(),
                std::env::temp_dir().join(format!("quicknat-lab-{}-{b}.toml", std::process::id())),
            )
        })
        .collect();
    for (b, path) in &cfgs {
        std::fs::write(
            path,
            format!("[gateway]\ninside = \"g-in\"\noutside = \"g-out\"\nbackend = \"{b}\"\nworkers = 1\nstats_interval = 3600\n\n[nat44]\n[[nat44.rule]]\ninside = \"10.0.0.0/24\"\npool = [\"203.0.113.1/32\"]\n"),
        )?;
    }
    let mut q: Vec<Vec<ModeResult>> = vec![Vec::new(); cfgs.len()];
    let mut k = Vec::new();
    let result = (|| -> Result<()> {
        for round in 0..opts.rounds {
            // The kernel first, then each quicknat backend: alternating within every round.
            for which in std::iter::once(None).chain((0..cfgs.len()).map(Some)) {
                if lab.stop.load(Ordering::Relaxed) {
                    bail!("interrupted");
                }
                let name = which.map_or("kernel nftables NAT".to_string(), |i| {
                    format!("quicknat {}", cfgs[i].0)
                });
                eprintln!("lab: round {} of {}: {name}", round + 1, opts.rounds);
                let mode = start_mode(&lab, which.map(|i| cfgs[i].1.as_path()))?;
                let r = measure(&lab, opts);
                stop_mode(&lab, mode)?;
                match which {
                    Some(i) => q[i].push(r?),
                    None => k.push(r?),
                }
            }
        }
        Ok(())
    })();
    for (_, path) in &cfgs {
        let _ = std::fs::remove_file(path);
    }
    drop(lab);
    result?;
    let mut when = String::new();
    let _ = write!(when, "{}", chrono_like_date());
    Ok(LabReport {
        when,
        seconds: opts.seconds,
        rounds: opts.rounds,
        fixed_pps: opts.fixed_pps,
        quicknat: cfgs
            .iter()
            .map(|(b, _)| b.clone())
            .zip(q.iter().map(|r| combine(r)))
            .collect(),
        kernel: combine(&k),
    })
}

fn chrono_like_date() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{} — Linux {}",
        out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default(),
        kernel.trim()
    )
}
