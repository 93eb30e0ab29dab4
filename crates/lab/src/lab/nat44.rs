//! `quicknat-lab lab --topology nat44`: builds client, gateway and server network namespaces
//! joined by veth, and measures quicknat NAT44 and the kernel's own NAT (nftables) on the same topology, in
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
//!
//! "Offloads on" with AF_XDP: while XDP is attached to g-in/g-out the kernel keeps the
//! veth peers' TSO off (`tcp-segmentation-offload: off [fixed]` on c0 and s0, whether
//! `ethtool -K` runs before or after quicknat starts), so their stacks segment in software
//! and no super-packet reaches the gateway; their tx checksum offload stays on, and the
//! AF_XDP backend completes those partial checksums (`csum_completed`). The kernel NAT
//! runs keep TSO end to end, hence the gap in that row.

use std::process::Child;
use std::sync::Arc;

use anyhow::Result;

use super::{
    alternate, chrono_like_date, iperf, med, require, soak_on, soak_rate, stop_child, stop_flag,
    udp_small, Configs, Lab, GW_CORE,
};

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
    /// The quicknat binary run as the gateway.
    pub quicknat: std::path::PathBuf,
}

const PUBLIC: &str = "203.0.113.1";
const SERVER: &str = "198.51.100.2";

/// The gateway's interfaces, each with its namespace.
fn devs(lab: &Lab) -> [(&str, &str); 4] {
    [
        (lab.cli(), "c0"),
        (lab.gw(), "g-in"),
        (lab.gw(), "g-out"),
        (lab.srv(), "s0"),
    ]
}

fn build(stop: Arc<std::sync::atomic::AtomicBool>) -> Result<Lab> {
    let lab = Lab::new(&["cli", "gw", "srv"], stop)?;
    lab.veth(lab.cli(), "c0", lab.gw(), "g-in")?;
    lab.veth(lab.srv(), "s0", lab.gw(), "g-out")?;
    lab.addr(lab.cli(), "c0", "10.0.0.2/24")?;
    lab.addr(lab.gw(), "g-in", "10.0.0.1/24")?;
    lab.addr(lab.gw(), "g-out", "198.51.100.1/24")?;
    lab.addr(lab.srv(), "s0", "198.51.100.2/24")?;
    lab.route(lab.cli(), &["default", "via", "10.0.0.1"])?;
    lab.route(lab.srv(), &["203.0.113.0/24", "via", "198.51.100.1"])?;
    // The kernel's receive work for frames entering the gateway runs on GW_CORE.
    lab.rps(lab.gw(), &["g-in", "g-out"], GW_CORE);
    Ok(lab)
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

/// The kernel's NAT, or quicknat (`bin`) with configuration `quicknat`.
fn start_mode(
    lab: &Lab,
    bin: &std::path::Path,
    quicknat: Option<&std::path::Path>,
) -> Result<Mode> {
    if let Some(cfg) = quicknat {
        lab.sysctl(lab.gw(), "net.ipv4.ip_forward=0")?;
        Ok(Mode::Quicknat(lab.start_quicknat(
            bin,
            lab.gw(),
            GW_CORE,
            cfg,
        )?))
    } else {
        lab.sysctl(lab.gw(), "net.ipv4.ip_forward=1")?;
        lab.ns(lab.gw(), &["nft", "add", "table", "ip", "qnlab"])?;
        lab.ns(
            lab.gw(),
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
            lab.gw(),
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
            lab.ns(lab.gw(), &["nft", "delete", "table", "ip", "qnlab"])?;
            lab.sysctl(lab.gw(), "net.ipv4.ip_forward=0")?;
        }
        Mode::Quicknat(c) => {
            stop_child(c);
        }
    }
    // Let conntrack/sessions from this mode not leak into the next.
    let _ = lab.sh(
        lab.gw(),
        "command -v conntrack >/dev/null && conntrack -F || true",
    );
    Ok(())
}

fn measure(lab: &Lab, opts: &LabOptions) -> Result<ModeResult> {
    let s = opts.seconds;
    let mut r = ModeResult::default();
    lab.offloads(&devs(lab), false);
    r.tcp1_off = iperf(lab, SERVER, SERVER, 1, s)?;
    r.tcp4_off = iperf(lab, SERVER, SERVER, 4, s)?;
    if opts.offloads_on {
        lab.offloads(&devs(lab), true);
        r.tcp1_on = Some(iperf(lab, SERVER, SERVER, 1, s).unwrap_or(0.0));
        lab.offloads(&devs(lab), false);
    }
    // Capacity: the server drops at ingress so the sink costs nothing.
    lab.sink_on(lab.srv(), "s0")?;
    let dst = format!("{SERVER}:9");
    let (offered, fwd, _) = udp_small(lab, &dst, "g-out", None, s, 0.0)?;
    r.udp64_offered_pps = offered;
    r.udp64_capacity_pps = fwd;
    // The soaker's rate on an idle gateway core, measured now (same mode, no traffic).
    let idle = soak_rate(soak_on(GW_CORE, 1)?);
    let (_, fwd, cpu) = udp_small(lab, &dst, "g-out", Some(opts.fixed_pps), s, idle)?;
    r.fixed_forwarded_pps = fwd;
    r.cpu_ns_per_packet = cpu;
    lab.sink_off(lab.srv())?;
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
    require(&["ip", "iperf3", "nft", "ethtool", "taskset"])?;
    let lab = build(stop_flag()?)?;
    let configs = Configs::gateway(
        "nat44",
        &opts.backends,
        "[nat44]\n[[nat44.rule]]\ninside = \"10.0.0.0/24\"\npool = [\"203.0.113.1/32\"]\n",
    )?;
    let cfgs = &configs.0;
    // The kernel first, then each quicknat backend: alternating within every round.
    let result = alternate(
        &lab,
        "nat44",
        opts.rounds,
        cfgs.len(),
        |arm| {
            arm.map_or("kernel nftables NAT".to_string(), |i| {
                format!("quicknat {}", cfgs[i].0)
            })
        },
        |arm| {
            let mode = start_mode(&lab, &opts.quicknat, arm.map(|i| cfgs[i].1.as_path()))?;
            let r = measure(&lab, opts);
            stop_mode(&lab, mode)?;
            r
        },
    );
    drop(lab);
    let (k, q) = result?;
    let when = chrono_like_date();
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
