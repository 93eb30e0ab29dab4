//! `quicknat-lab lab`: builds network namespaces joined by veth and measures quicknat
//! against a reference on the same topology, in the same run, alternating per round. One
//! file per topology; this file holds what they share (namespaces, processes, iperf3, the
//! UDP generator and sink, the CPU soaker, signals, medians). Namespaces and the processes
//! in them are removed at the end, on error, and on Ctrl-C.
//!
//! Two programs run in the namespaces: the product, `quicknat run` (the binary named by
//! `--quicknat`, see [`quicknat_binary`]), and this program's own `gen`, `soak` and `rr`
//! subcommands ([`exe`]).
//!
//! - [`nat44`]: quicknat NAT44 vs the kernel's nftables NAT.
//! - [`nat64`]: quicknat NAT64 vs TAYGA.
//! - [`ila`]: TCP request/response directly (kernel forwarding) vs through quicknat ILA.
//! - [`attack`]: quicknat NAT44 vs the kernel's NAT under hostile and greedy traffic.
//! - [`cluster`]: 2-3 quicknat gateways behind BIRD routers, one failed on purpose.
//! - [`xdpfast`]: the NAT44 and NAT64 labs' arm with quicknat's XDP fast path on.

pub mod attack;
pub mod cluster;
pub(crate) mod cpu;
pub mod floor;
pub mod ila;
pub mod nat44;
pub mod nat64;
/// `--plot DIR`: the NAT44 lab's ratios as an SVG bar chart.
pub mod plot;
pub mod spread;
pub(crate) mod xdpfast;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

pub use nat44::{run_lab, LabOptions};

/// The gateway core the data plane runs on (RPS steers the kernel's receive work there,
/// the gateway process is pinned there); the generator runs on core 0.
pub(crate) const GW_CORE: usize = 1;

/// A set of network namespaces named `qn-lab-ROLE-PID`, deleted (with every process in
/// them) on drop.
pub(crate) struct Lab {
    names: Vec<String>,
    pub(crate) stop: Arc<AtomicBool>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in &self.names {
            if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            }
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Runs `cmd`; its stdout, or an error with its stderr.
pub(crate) fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Fails naming the Debian packages when one of `tools` is not on the PATH.
pub(crate) fn require(tools: &[&str]) -> Result<()> {
    for tool in tools {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            bail!(
                "`{tool}` is missing: apt-get install iproute2 iperf3 nftables ethtool util-linux tayga"
            );
        }
    }
    Ok(())
}

/// A flag set by SIGINT and SIGTERM.
pub(crate) fn stop_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("installing signal handlers")?;
    }
    Ok(stop)
}

/// This program's path, for running its subcommands (`gen`, `soak`, `rr`) in the namespaces.
pub(crate) fn exe() -> Result<String> {
    Ok(std::env::current_exe()
        .context("finding this program's path")?
        .to_string_lossy()
        .into_owned())
}

/// The product binary the lab runs as the gateway (`quicknat run`): `given`, or else the
/// `quicknat` next to this program (cargo builds both into the same target directory).
/// Fails naming the path and how to build it when there is no executable file there.
pub(crate) fn quicknat_binary(given: Option<PathBuf>) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = match given {
        Some(p) => p,
        None => std::env::current_exe()
            .context("finding this program's path")?
            .with_file_name("quicknat"),
    };
    let executable =
        std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if !executable {
        bail!(
            "no quicknat binary at {} (the lab runs `quicknat run` as the gateway): build it with \
             `cargo build --release -p quicknat` (same target directory as quicknat-lab), or name it \
             with --quicknat PATH",
            path.display()
        );
    }
    // Absolute, so it runs the same from inside `ip netns exec` whatever the caller's path.
    std::fs::canonicalize(&path).with_context(|| format!("resolving {}", path.display()))
}

/// A temporary file path for this run.
pub(crate) fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("quicknat-lab-{}-{name}", std::process::id()))
}

impl Lab {
    /// Creates one namespace per role (`roles[i]` is [`Lab::at`]`(i)`).
    pub(crate) fn new(roles: &[&str], stop: Arc<AtomicBool>) -> Result<Self> {
        let id = std::process::id();
        let mut lab = Lab {
            names: Vec::new(),
            stop,
        };
        for role in roles {
            let ns = format!("qn-lab-{role}-{id}");
            run(Command::new("ip").args(["netns", "add", &ns]))?;
            lab.names.push(ns);
            lab.ns(
                lab.names.last().map_or("", String::as_str),
                &["ip", "link", "set", "lo", "up"],
            )?;
        }
        Ok(lab)
    }

    /// The namespace of role `i`.
    pub(crate) fn at(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// Three-namespace topologies: client, gateway, server.
    pub(crate) fn cli(&self) -> &str {
        self.at(0)
    }
    pub(crate) fn gw(&self) -> &str {
        self.at(1)
    }
    pub(crate) fn srv(&self) -> &str {
        self.at(2)
    }

    /// Fails when SIGINT or SIGTERM arrived.
    pub(crate) fn check_stop(&self) -> Result<()> {
        if self.stop.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        Ok(())
    }

    /// Runs `args` in `ns`; its stdout.
    pub(crate) fn ns(&self, ns: &str, args: &[&str]) -> Result<String> {
        run(Command::new("ip").args(["netns", "exec", ns]).args(args))
    }

    /// Runs the shell command `sh` in `ns`.
    pub(crate) fn sh(&self, ns: &str, sh: &str) -> Result<String> {
        self.ns(ns, &["sh", "-c", sh])
    }

    /// Starts `args` in `ns` (stdout and stderr piped).
    pub(crate) fn spawn(&self, ns: &str, args: &[&str]) -> Result<Child> {
        Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {args:?} in {ns}"))
    }

    /// A veth pair `a_if` in `a_ns` <-> `b_if` in `b_ns`, both up.
    pub(crate) fn veth(&self, a_ns: &str, a_if: &str, b_ns: &str, b_if: &str) -> Result<()> {
        run(Command::new("ip").args([
            "link", "add", a_if, "netns", a_ns, "type", "veth", "peer", "name", b_if, "netns", b_ns,
        ]))?;
        self.ns(a_ns, &["ip", "link", "set", a_if, "up"])?;
        self.ns(b_ns, &["ip", "link", "set", b_if, "up"])?;
        Ok(())
    }

    /// `ip addr add ADDR dev DEV` in `ns` (IPv6 without duplicate address detection).
    pub(crate) fn addr(&self, ns: &str, dev: &str, addr: &str) -> Result<()> {
        let mut args = vec!["ip", "addr", "add", addr, "dev", dev];
        if addr.contains(':') {
            args.push("nodad");
        }
        self.ns(ns, &args).map(drop)
    }

    /// `ip route add ROUTE...` in `ns`.
    pub(crate) fn route(&self, ns: &str, route: &[&str]) -> Result<()> {
        let mut args = vec!["ip", "route", "add"];
        args.extend_from_slice(route);
        self.ns(ns, &args).map(drop)
    }

    /// Sets the sysctl `key=value` in `ns`.
    pub(crate) fn sysctl(&self, ns: &str, kv: &str) -> Result<()> {
        self.ns(ns, &["sysctl", "-q", "-w", kv]).map(drop)
    }

    /// Steers the kernel's receive work for frames entering `devs` of `ns` to `core`.
    pub(crate) fn rps(&self, ns: &str, devs: &[&str], core: usize) {
        let mask = format!("{:x}", 1u32 << core);
        for dev in devs {
            let _ = self.sh(
                ns,
                &format!("echo {mask} > /sys/class/net/{dev}/queues/rx-0/rps_cpus"),
            );
        }
    }

    /// Segmentation and receive offloads on or off on each `(namespace, device)`.
    pub(crate) fn offloads(&self, devs: &[(&str, &str)], on: bool) {
        let v = if on { "on" } else { "off" };
        for (ns, dev) in devs {
            let _ = self.ns(
                ns,
                &["ethtool", "-K", dev, "tx", v, "tso", v, "gso", v, "gro", v],
            );
        }
    }

    /// A statistics counter of `dev` in `ns` (`tx_packets`, ...).
    pub(crate) fn counter(&self, ns: &str, dev: &str, what: &str) -> u64 {
        self.ns(
            ns,
            &["cat", &format!("/sys/class/net/{dev}/statistics/{what}")],
        )
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
    }

    /// Starts `QUICKNAT run --config CFG` in `ns` (`quicknat` the product binary, from
    /// [`quicknat_binary`]), pinned to `core`, and gives it time to open its sockets. Fails
    /// with its stderr when it exits at once.
    pub(crate) fn start_quicknat(
        &self,
        quicknat: &Path,
        ns: &str,
        core: usize,
        cfg: &Path,
    ) -> Result<Child> {
        let mut child = self.spawn(
            ns,
            &[
                "taskset",
                "-c",
                &core.to_string(),
                &quicknat.to_string_lossy(),
                "run",
                "--config",
                &cfg.to_string_lossy(),
            ],
        )?;
        std::thread::sleep(Duration::from_millis(700));
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            bail!("quicknat in {ns} exited ({status}): {}", err.trim());
        }
        Ok(child)
    }

    /// Installs a netdev ingress drop on `dev` of `ns`: a sink that costs nothing.
    pub(crate) fn sink_on(&self, ns: &str, dev: &str) -> Result<()> {
        self.ns(ns, &["nft", "add", "table", "netdev", "qnsink"])?;
        self.ns(
            ns,
            &[
                "nft",
                "add",
                "chain",
                "netdev",
                "qnsink",
                "in",
                &format!(
                    "{{ type filter hook ingress device \"{dev}\" priority 0; policy drop; }}"
                ),
            ],
        )
        .map(drop)
    }

    /// Removes [`Lab::sink_on`]'s table.
    pub(crate) fn sink_off(&self, ns: &str) -> Result<()> {
        self.ns(ns, &["nft", "delete", "table", "netdev", "qnsink"])
            .map(drop)
    }
}

/// quicknat configuration files, one per backend, removed on drop.
pub(crate) struct Configs(pub(crate) Vec<(String, PathBuf)>);

impl Configs {
    /// For the three-namespace topologies: `[gateway]` on g-in (inside) and g-out
    /// (outside), one worker, the fast path off (the `af_xdp` and `af_packet` arms measure
    /// the engine's path; `xdpfast` and `tcfast` are the fast path's arms), then `mode`
    /// (the translation's tables).
    pub(crate) fn gateway(topology: &str, backends: &[String], mode: &str) -> Result<Self> {
        let mut c = Configs(Vec::new());
        for b in backends {
            let path = temp_path(&format!("{topology}-{b}.toml"));
            std::fs::write(
                &path,
                format!("[gateway]\ninside = \"g-in\"\noutside = \"g-out\"\nbackend = \"{b}\"\nworkers = 1\nstats_interval = 3600\nxdp_fast_path = \"off\"\n\n{mode}"),
            )?;
            c.0.push((b.clone(), path));
        }
        Ok(c)
    }
}

impl Drop for Configs {
    fn drop(&mut self) {
        for (_, path) in &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Runs `one(arm)` for every arm in every round, alternating within each round: first the
/// reference (`None`), then quicknat backend `Some(i)` for `i < backends`. Returns the
/// reference's results and each backend's, in round order. `name` labels the progress lines.
pub(crate) fn alternate<T>(
    lab: &Lab,
    topology: &str,
    rounds: usize,
    backends: usize,
    name: impl Fn(Option<usize>) -> String,
    mut one: impl FnMut(Option<usize>) -> Result<T>,
) -> Result<(Vec<T>, Vec<Vec<T>>)> {
    let mut reference = Vec::new();
    let mut quicknat: Vec<Vec<T>> = (0..backends).map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for arm in std::iter::once(None).chain((0..backends).map(Some)) {
            lab.check_stop()?;
            eprintln!(
                "lab {topology}: round {} of {rounds}: {}",
                round + 1,
                name(arm)
            );
            let r = one(arm)?;
            match arm {
                Some(i) => quicknat[i].push(r),
                None => reference.push(r),
            }
        }
    }
    Ok((reference, quicknat))
}

/// Stops a process with SIGTERM, then SIGKILL after 5 s; its last stderr line (quicknat's
/// closing counters).
pub(crate) fn stop_child(mut c: Child) -> String {
    let _ = Command::new("kill")
        .args(["-TERM", &c.id().to_string()])
        .status();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        if let Ok(Some(_)) = c.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if !matches!(c.try_wait(), Ok(Some(_))) {
        let _ = c.kill();
        let _ = c.wait();
    }
    let mut err = String::new();
    if let Some(mut e) = c.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    err.lines().last().unwrap_or_default().to_string()
}

/// iperf3 from the client namespace to `target`, the server bound to `bind` in the server
/// namespace; Gbit/s received (0 when the path stalls).
pub(crate) fn iperf(
    lab: &Lab,
    bind: &str,
    target: &str,
    streams: u32,
    seconds: u64,
) -> Result<f64> {
    let mut server = lab.spawn(lab.srv(), &["iperf3", "-s", "-1", "-B", bind])?;
    std::thread::sleep(Duration::from_millis(300));
    // A path that stalls (e.g. GSO frames dropped) must not hang the lab: bound the client.
    let limit = (seconds + 10).to_string();
    let out = lab.ns(
        lab.cli(),
        &[
            "timeout",
            &limit,
            "iperf3",
            "-c",
            target,
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

/// Offers small UDP datagrams (64 flows, 18-byte payload) to `dst` from the client
/// namespace for `seconds`, counting what leaves the gateway by `out_dev`; returns
/// (offered pps, forwarded pps, gateway core CPU ns per forwarded packet). The CPU figure
/// comes from a SCHED_IDLE soaker on the gateway core (when `idle_rate` > 0): the share of
/// its idle-core rate it lost is the share the gateway used (the kernel's per-CPU tick
/// accounting proved unreliable on these VMs). `src_port`: the flows' first source port
/// (the same flows as a warm-up, e.g. the XDP fast path's), else ephemeral ports.
pub(crate) fn udp_small(
    lab: &Lab,
    dst: &str,
    out_dev: &str,
    pps: Option<u64>,
    seconds: u64,
    idle_rate: f64,
    src_port: Option<u16>,
) -> Result<(f64, f64, f64)> {
    let exe = exe()?;
    let before_fwd = lab.counter(lab.gw(), out_dev, "tx_packets");
    let soaker = if idle_rate > 0.0 {
        Some(soak_on(GW_CORE, seconds)?)
    } else {
        None
    };
    let t0 = Instant::now();
    let secs = seconds.to_string();
    let mut args = vec![
        "taskset",
        "-c",
        "0",
        exe.as_str(),
        "gen",
        "--dst",
        dst,
        "--flows",
        "64",
        "--payload",
        "18",
        "--seconds",
        &secs,
    ];
    let rate;
    if let Some(p) = pps {
        rate = p.to_string();
        args.extend(["--pps", rate.as_str()]);
    }
    let port = src_port.map(|p| p.to_string());
    if let Some(p) = &port {
        args.extend(["--src-port", p.as_str()]);
    }
    args.push("--json");
    let out = lab.ns(lab.cli(), &args)?;
    let elapsed = t0.elapsed().as_secs_f64();
    let fwd = lab
        .counter(lab.gw(), out_dev, "tx_packets")
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
pub(crate) fn soak_on(core: usize, seconds: u64) -> Result<Child> {
    Command::new("chrt")
        .args([
            "-i",
            "0",
            "taskset",
            "-c",
            &core.to_string(),
            &exe()?,
            "soak",
            "--seconds",
            &seconds.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the CPU soaker (chrt, taskset)")
}

/// The soaker's iterations per second.
pub(crate) fn soak_rate(child: Child) -> f64 {
    child
        .wait_with_output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(0.0)
}

/// The median of `v` (the upper one of an even count; 0 when empty): the benchmark's own
/// rule, so lab and benchmark medians mean the same thing.
pub(crate) use bench::stats::median;

/// The median of `f` over `rs`.
pub(crate) fn med<T>(rs: &[T], f: impl Fn(&T) -> f64) -> f64 {
    median(rs.iter().map(f).collect())
}

/// `a / b` as "1.23x", or "-" when `b` is 0.
pub(crate) fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}x", a / b)
    } else {
        "-".into()
    }
}

/// UTC date and kernel release, for report headers.
pub(crate) fn chrono_like_date() -> String {
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
