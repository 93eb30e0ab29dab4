//! The NAT44 lab's floor arms, so quicknat's figures can be read against the floor of
//! each way of forwarding: on the same topology and in the same alternating run as
//! quicknat and the kernel's nftables NAT,
//!
//! - **kernel forwarding** (no NAT): `ip_forward=1`, nothing else;
//! - **kernel NAT with an nftables flowtable** (`flowtable ... hook ingress devices = {g-in,
//!   g-out}` + `flow add @ft`): the kernel's own software fast path for established flows.
//!   Probed first ([`flowtable_supported`]): a kernel built without `NF_FLOW_TABLE` (this
//!   project's VMs) rejects it, and the arm is reported unavailable with the kernel's answer;
//! - **minimal XDP forwarder**: `bpf/xdp_fwd.c`, XDP_REDIRECT through a devmap, MACs
//!   rewritten to the next hop (the floor of an XDP fast path);
//! - **minimal tc forwarder**: the same router in `bpf/xdp_fwd.c`'s `tc_fwd` at the tc
//!   ingress hook (`bpf_redirect` of the skb, GSO super-packets as they are): the floor of
//!   the fast path at the tc hook (quicknat `tcfast`, AF_PACKET), and on veth the cheaper
//!   hook of the two (no XDP buffer to build from the skb, the peer's TSO stays on);
//! - **minimal AF_XDP / AF_PACKET forwarders**: quicknat's own ports and batching without
//!   the engine (`quicknat-lab fwd`, see crates/lab/src/fwd): the floor of each of
//!   quicknat's I/O models.
//!
//! The gateway's CPU is read, for every arm alike ([`udp_cell`]), as the gateway core's busy
//! time ([`CoreBusy`]: `/proc/stat`'s idle column, which NO_HZ measures rather than
//! samples) plus every other core's softirq time. Those other cores carry the generator,
//! which never lets them idle, so their ticks run and the softirq column samples them
//! without bias. That is where an XDP program on a veth runs (the receive NAPI runs on the
//! *sending* core), so reading the gateway core alone would call an XDP forwarder free.
//! quicknat and the forwarders are pinned to the gateway core and RPS steers the kernel's
//! receive work there. The machine's rates in the second before the cell (no lab traffic:
//! other jobs) are subtracted. The gateway core is not read by its softirq column: a
//! lightly loaded core wakes from idle, runs its softirq and sleeps again with no tick
//! running, so that column misses most of its work and makes lightly loaded arms look
//! cheap.
//!
//! **Capacity is measured as a cost, not as a rate** ([`UdpCell::capacity_pps`]): on a
//! 2-vCPU VM the generator and the gateway share the machine (and on veth the XDP arms'
//! work runs on the generator's core), so any generator is the bottleneck of some arm. The
//! capacity of one gateway core is derived from the gateway's CPU per packet with the
//! generator unpaced (1 s / cost): that does not depend on how fast the generator went, and
//! the table shows the generator's rate next to it.

use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::cpu::GatewaySample;
use super::{exe, stop_child, Lab, GW_CORE};

/// The NAT's public address (kernel NAT and flowtable SNAT to it; quicknat's pool).
pub(crate) const PUBLIC: &str = "203.0.113.1";

/// One arm of the NAT44 lab.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arm {
    /// The kernel's nftables NAT (the reference).
    KernelNat,
    /// The kernel's NAT with an nftables flowtable.
    Flowtable,
    /// Kernel forwarding, no NAT.
    KernelFwd,
    /// The minimal XDP forwarder.
    XdpFwd,
    /// The same minimal forwarder at the tc ingress hook.
    TcFwd,
    /// The minimal forwarder on quicknat's AF_XDP port.
    AfXdpFwd,
    /// The minimal forwarder on quicknat's AF_PACKET port.
    AfPacketFwd,
    /// quicknat on this backend ("af_xdp", "af_packet").
    Quicknat(String),
}

impl Arm {
    /// How the report names it.
    pub fn name(&self) -> String {
        match self {
            Arm::KernelNat => "kernel NAT".into(),
            Arm::Flowtable => "kernel NAT+flowtable".into(),
            Arm::KernelFwd => "kernel forwarding".into(),
            Arm::XdpFwd => "XDP fwd".into(),
            Arm::TcFwd => "tc fwd".into(),
            Arm::AfXdpFwd => "AF_XDP fwd".into(),
            Arm::AfPacketFwd => "AF_PACKET fwd".into(),
            Arm::Quicknat(b) => format!("quicknat {b}"),
        }
    }

    /// The floor of quicknat's I/O model `backend`: the same port and batching, no NAT.
    pub fn floor_of(backend: &str) -> Option<Arm> {
        match backend {
            "af_xdp" => Some(Arm::AfXdpFwd),
            "af_packet" => Some(Arm::AfPacketFwd),
            // The XDP fast path's floor: XDP_REDIRECT through a devmap, no NAT.
            super::xdpfast::BACKEND => Some(Arm::XdpFwd),
            // At the tc hook: the same minimal forwarder there.
            super::xdpfast::TC_BACKEND => Some(Arm::TcFwd),
            _ => None,
        }
    }

    /// Whether TCP with offloads on is measured: not through the XDP forwarder, which
    /// would forward a veth peer's partial checksums as they are (the frames carry no
    /// marker in XDP; LAB-NOTES), so TCP stalls by design there.
    pub fn offloads_on_applies(&self) -> bool {
        *self != Arm::XdpFwd
    }
}

/// A started arm; [`stop`] undoes it.
pub(crate) struct Running {
    /// The gateway process whose threads are charged (quicknat, a forwarder).
    pub(crate) pid: Option<u32>,
    procs: Vec<Child>,
    nft_table: bool,
}

impl Running {
    /// A kernel arm (nothing to charge but softirq), `nft_table`: `ip qnlab` to delete.
    pub(crate) fn kernel(nft_table: bool) -> Self {
        Running {
            pid: None,
            procs: Vec::new(),
            nft_table,
        }
    }

    /// Charged to `pid`; `procs` stopped (last first) by [`stop`].
    pub(crate) fn with(pid: u32, procs: Vec<Child>) -> Self {
        Running {
            pid: Some(pid),
            procs,
            nft_table: false,
        }
    }

    /// quicknat started by the caller.
    pub(crate) fn process(c: Child) -> Self {
        Running {
            pid: Some(c.id()),
            procs: vec![c],
            nft_table: false,
        }
    }
}

/// Whether the kernel takes an nftables flowtable on the gateway's veths: `Ok(())`, or the
/// kernel's answer. Probed with a table of its own in the gateway namespace, removed at
/// once.
pub fn flowtable_supported(lab: &Lab) -> Result<(), String> {
    let r = run_nft(
        lab,
        lab.gw(),
        "table ip qnprobe {\n flowtable ft { hook ingress priority 0; devices = { g-in, g-out }; }\n}\n",
    );
    let _ = lab.ns(lab.gw(), &["nft", "delete", "table", "ip", "qnprobe"]);
    r.map_err(|e| {
        let text = format!("{e:#}");
        let line = text.lines().find(|l| l.contains("Error")).unwrap_or(&text);
        // "/dev/stdin:2:13-14: Error: Could not process rule: No such file or directory"
        line.split_once("Error: ")
            .map_or(line, |(_, m)| m)
            .trim()
            .to_string()
    })
}

/// `nft -f -` in `ns` with `script` on stdin.
fn run_nft(_lab: &Lab, ns: &str, script: &str) -> Result<()> {
    use std::io::Write;
    let mut c = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("running nft")?;
    c.stdin
        .take()
        .context("nft stdin")?
        .write_all(script.as_bytes())?;
    let out = c.wait_with_output()?;
    if !out.status.success() {
        bail!("nft: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Starts a kernel or forwarder arm (quicknat is started by the caller).
pub(crate) fn start(lab: &Lab, arm: &Arm) -> Result<Running> {
    match arm {
        Arm::KernelNat | Arm::Flowtable => {
            lab.sysctl(lab.gw(), "net.ipv4.ip_forward=1")?;
            let ft = if *arm == Arm::Flowtable {
                " flowtable ft { hook ingress priority 0; devices = { g-in, g-out }; }\n \
                 chain fwd { type filter hook forward priority 0; meta l4proto { tcp, udp } flow add @ft; }\n"
            } else {
                ""
            };
            run_nft(
                lab,
                lab.gw(),
                &format!(
                    "table ip qnlab {{\n{ft} chain post {{ type nat hook postrouting priority 100; oifname \"g-out\" snat to {PUBLIC}; }}\n}}\n"
                ),
            )?;
            Ok(Running::kernel(true))
        }
        Arm::KernelFwd => {
            lab.sysctl(lab.gw(), "net.ipv4.ip_forward=1")?;
            Ok(Running::kernel(false))
        }
        Arm::XdpFwd => {
            lab.sysctl(lab.gw(), "net.ipv4.ip_forward=0")?;
            let exe = exe()?;
            let mut procs = Vec::new();
            // The veth peers that receive redirected frames need an XDP program.
            for (ns, dev) in [(lab.cli(), "c0"), (lab.srv(), "s0")] {
                procs
                    .push(lab.spawn(ns, &[&exe, "fwd", "--backend", "xdp-pass", "--inside", dev])?);
                await_xdp(lab, ns, dev, &mut procs)?;
            }
            let fwd = spawn_fwd(lab, "xdp")?;
            let pid = fwd.id();
            procs.push(fwd);
            for dev in ["g-in", "g-out"] {
                await_xdp(lab, lab.gw(), dev, &mut procs)?;
            }
            Ok(Running {
                pid: Some(pid),
                procs,
                nft_table: false,
            })
        }
        Arm::TcFwd => {
            lab.sysctl(lab.gw(), "net.ipv4.ip_forward=0")?;
            let fwd = spawn_fwd(lab, "tc")?;
            let pid = fwd.id();
            let mut procs = vec![fwd];
            // TCX links are not listed by `tc filter`; the forwarder's own link fds are.
            await_cond(&mut procs, "tc_fwd's TCX links on g-in and g-out", || {
                tcx_links(pid) >= 2
            })?;
            Ok(Running {
                pid: Some(pid),
                procs,
                nft_table: false,
            })
        }
        Arm::AfXdpFwd | Arm::AfPacketFwd => {
            lab.sysctl(lab.gw(), "net.ipv4.ip_forward=0")?;
            let xdp = *arm == Arm::AfXdpFwd;
            let fwd = spawn_fwd(lab, if xdp { "af_xdp" } else { "af_packet" })?;
            let pid = fwd.id();
            let mut procs = vec![fwd];
            if xdp {
                for dev in ["g-in", "g-out"] {
                    await_xdp(lab, lab.gw(), dev, &mut procs)?;
                }
            } else {
                let table = io::host::table_name(&["g-in", "g-out"]);
                await_cond(
                    &mut procs,
                    "the AF_PACKET forwarder's ingress table",
                    || {
                        lab.ns(lab.gw(), &["nft", "list", "tables"])
                            .is_ok_and(|t| t.contains(&table))
                    },
                )?;
            }
            Ok(Running {
                pid: Some(pid),
                procs,
                nft_table: false,
            })
        }
        Arm::Quicknat(_) => bail!("quicknat arms are started by the NAT44 lab"),
    }
}

/// `quicknat-lab fwd --backend B` in the gateway namespace, pinned to the gateway core.
fn spawn_fwd(lab: &Lab, backend: &str) -> Result<Child> {
    let mac = |ns: &str, dev: &str| -> Result<String> {
        Ok(lab
            .ns(ns, &["cat", &format!("/sys/class/net/{dev}/address")])?
            .trim()
            .to_string())
    };
    let (c0, s0) = (mac(lab.cli(), "c0")?, mac(lab.srv(), "s0")?);
    lab.spawn(
        lab.gw(),
        &[
            "taskset",
            "-c",
            &GW_CORE.to_string(),
            &exe()?,
            "fwd",
            "--backend",
            backend,
            "--inside",
            "g-in",
            "--outside",
            "g-out",
            "--inside-peer",
            &c0,
            "--outside-peer",
            &s0,
        ],
    )
}

/// Polls (5 s deadline) until `ok`; fails with the stderr of a process in `procs` that
/// exited, or on the deadline.
pub(crate) fn await_cond(procs: &mut [Child], what: &str, ok: impl Fn() -> bool) -> Result<()> {
    let t = Instant::now();
    loop {
        if ok() {
            return Ok(());
        }
        for p in procs.iter_mut() {
            if let Ok(Some(status)) = p.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = p.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                bail!(
                    "waiting for {what}: a process it needs exited ({status}): {}",
                    err.trim()
                );
            }
        }
        if t.elapsed() > Duration::from_secs(5) {
            bail!("{what}: not there after 5 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How many TCX links process `pid` holds (its fds' `link_type: tcx` in fdinfo).
fn tcx_links(pid: u32) -> usize {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return 0;
    };
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .filter(|t| {
            t.lines()
                .any(|l| l.starts_with("link_type:") && l.ends_with("tcx"))
        })
        .count()
}

/// Waits until `dev` in `ns` has an XDP program attached.
pub(crate) fn await_xdp(lab: &Lab, ns: &str, dev: &str, procs: &mut [Child]) -> Result<()> {
    await_cond(procs, &format!("XDP on {dev}"), || {
        lab.ns(ns, &["ip", "link", "show", "dev", dev])
            .is_ok_and(|s| s.contains(" xdp"))
    })
}

/// Undoes [`start`] (and stops quicknat).
pub(crate) fn stop(lab: &Lab, r: Running) -> Result<()> {
    for p in r.procs.into_iter().rev() {
        stop_child(p);
    }
    if r.nft_table {
        lab.ns(lab.gw(), &["nft", "delete", "table", "ip", "qnlab"])?;
    }
    lab.sysctl(lab.gw(), "net.ipv4.ip_forward=0")?;
    Ok(())
}

/// The server's sink: a netdev ingress chain on `s0` that counts and drops.
pub(crate) fn sink_on(lab: &Lab) -> Result<()> {
    run_nft(
        lab,
        lab.srv(),
        "table netdev qnfloor {\n chain in { type filter hook ingress device \"s0\" priority 0; counter drop; }\n}\n",
    )
}

/// Removes [`sink_on`]'s table.
pub(crate) fn sink_off(lab: &Lab) -> Result<()> {
    lab.ns(lab.srv(), &["nft", "delete", "table", "netdev", "qnfloor"])
        .map(drop)
}

/// Packets the sink has counted.
fn sink_count(lab: &Lab) -> u64 {
    lab.ns(lab.srv(), &["nft", "list", "table", "netdev", "qnfloor"])
        .ok()
        .and_then(|s| {
            let mut w = s.split_whitespace();
            w.find(|x| *x == "packets")?;
            w.next()?.parse().ok()
        })
        .unwrap_or(0)
}

/// Every core of the machine (`cpuN` lines of /proc/stat).
pub(crate) fn all_cores() -> Vec<usize> {
    std::fs::read_to_string("/proc/stat")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            l.split_whitespace()
                .next()?
                .strip_prefix("cpu")?
                .parse()
                .ok()
        })
        .collect()
}

/// One UDP cell: 64-byte datagrams, 64 flows, from the client to the server's sink.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct UdpCell {
    /// Packets per second the generator offered.
    pub offered_pps: f64,
    /// Packets per second that reached the server's sink.
    pub forwarded_pps: f64,
    /// The gateway's CPU per forwarded packet (ns): [`UdpCell::core_ns`] +
    /// [`UdpCell::other_cores_ns`] ([`udp_cell`] says why those two).
    pub cpu_ns: f64,
    /// Of which its process's threads (ns per packet).
    pub threads_ns: f64,
    /// Of which the kernel's work: the rest (ns per packet).
    pub softirq_ns: f64,
    /// Of which the `ksoftirqd` threads (ns per packet; see `CpuSample::ksoftirqd_until`).
    pub ksoftirqd_ns: f64,
    /// Of which the gateway core's busy time (ns per packet, precise: [`CoreBusy`]).
    pub core_ns: f64,
    /// Of which the other cores' softirq time (ns per packet, tick-sampled on cores that
    /// never idle): an XDP program on a veth runs on the sending core, and RPS's IPIs to
    /// wake the gateway core are sent from there.
    pub other_cores_ns: f64,
    /// Function-call IPIs the gateway core took per forwarded packet: RPS waking it.
    pub ipis_per_packet: f64,
}

impl UdpCell {
    /// Packets per second one core would forward at this cost (0 when not measured).
    pub fn capacity_pps(&self) -> f64 {
        if self.cpu_ns > 0.0 {
            1e9 / self.cpu_ns
        } else {
            0.0
        }
    }
}

/// Offers 64-byte UDP to the server at `pps` (`None`: unpaced) for `seconds` and charges
/// the gateway's CPU (`pid`: its process, pinned to [`GW_CORE`]) to the packets that
/// reached the sink (on). `src_port`: the flows' first source port (the same flows as a
/// warm-up), else ephemeral.
///
/// The gateway's CPU is a [`GatewaySample`]: [`GW_CORE`]'s busy time, precise, plus the
/// other cores' softirq, where the generator spins (paced) or sends flat out (unpaced). The
/// machine's rates in the second before (1 s, no lab traffic: other jobs) are subtracted.
pub(crate) fn udp_cell(
    lab: &Lab,
    pid: Option<u32>,
    dst: &str,
    pps: Option<u64>,
    seconds: u64,
    src_port: Option<u16>,
) -> Result<UdpCell> {
    // Other jobs on this machine, with no lab traffic.
    let idle0 = GatewaySample::take(None);
    let t_idle = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let idle = idle0.until(&GatewaySample::take(None));
    let idle_secs = t_idle.elapsed().as_secs_f64();

    let exe = exe()?;
    let secs = seconds.to_string();
    let rate = pps.map(|p| p.to_string());
    let mut args = vec![
        "taskset",
        "-c",
        "0",
        &exe,
        "gen",
        "--dst",
        dst,
        "--flows",
        "64",
        "--payload",
        "18",
        "--seconds",
        &secs,
        "--json",
    ];
    if let Some(r) = &rate {
        args.extend(["--pps", r.as_str()]);
    }
    let port = src_port.map(|p| p.to_string());
    if let Some(p) = &port {
        args.extend(["--src-port", p.as_str()]);
    }
    let sink0 = sink_count(lab);
    let at0 = GatewaySample::take(pid);
    let t0 = Instant::now();
    let out = lab.ns(lab.cli(), &args)?;
    // Frames still in flight reach the sink within a few ms.
    std::thread::sleep(Duration::from_millis(50));
    let elapsed = t0.elapsed().as_secs_f64();
    let spent = at0
        .until(&GatewaySample::take(pid))
        .less_idle(elapsed, &idle, idle_secs);
    let fwd = sink_count(lab).saturating_sub(sink0) as f64;
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_default();
    let per = |ns: f64| if fwd > 0.0 { ns / fwd } else { 0.0 };
    Ok(UdpCell {
        offered_pps: v["pps"].as_f64().unwrap_or(0.0),
        forwarded_pps: fwd / elapsed,
        cpu_ns: per(spent.total()),
        threads_ns: per(spent.threads),
        softirq_ns: per(spent.total() - spent.threads),
        ksoftirqd_ns: per(spent.ksoftirqd),
        core_ns: per(spent.core),
        other_cores_ns: per(spent.others),
        ipis_per_packet: per(spent.ipis),
    })
}
