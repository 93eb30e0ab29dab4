//! `quicknat-lab lab --topology nat44`: builds client, gateway and server network namespaces
//! joined by veth, and measures quicknat NAT44, the kernel's own NAT (nftables) and the
//! floors ([`super::floor`]: kernel forwarding, the kernel's NAT with a flowtable, minimal
//! XDP, AF_XDP and AF_PACKET forwarders) on the same topology, in the same run,
//! alternating: TCP throughput (iperf3, 1 and 4 streams, offloads off and on), 64-byte UDP
//! capacity of one gateway core (derived from the gateway's CPU per packet, see
//! [`super::floor`]), and the gateway's CPU per packet at a fixed offered load. Each
//! quicknat figure is reported as a ratio to the kernel NAT, to the flowtable and to the
//! floor of its own I/O model. Namespaces are removed at the end, on error, and on Ctrl-C.
//!
//! ```text
//! cli (10.0.0.2) ==c0|g-in== gw (10.0.0.1 | 198.51.100.1) ==g-out|s0== srv (198.51.100.2)
//! ```
//! The server routes 203.0.113.0/24 (the NAT's public address) and 10.0.0.0/24 (for the
//! arms without NAT) to the gateway. In the quicknat and user-space/XDP forwarder runs the
//! gateway kernel does not forward (ip_forward=0); in the kernel runs it forwards (and
//! nftables translates to the same public address).
//!
//! "Offloads on" with AF_XDP: while XDP is attached to g-in/g-out the kernel keeps the
//! veth peers' TSO off (`tcp-segmentation-offload: off [fixed]` on c0 and s0, whether
//! `ethtool -K` runs before or after quicknat starts), so their stacks segment in software
//! and no super-packet reaches the gateway; their tx checksum offload stays on, and the
//! AF_XDP backend completes those partial checksums (`csum_completed`). The kernel NAT
//! runs keep TSO end to end, hence the gap in that row.

use std::sync::Arc;

use anyhow::Result;

use super::floor::{self, Arm, Running, UdpCell};
use super::{chrono_like_date, iperf, med, require, stop_flag, xdpfast, Configs, Lab, GW_CORE};

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
    /// Also run the floor arms (kernel forwarding, flowtable, XDP/AF_XDP/AF_PACKET
    /// forwarders).
    pub floors: bool,
}

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
    // The arms without NAT: the server answers the client's own address.
    lab.route(lab.srv(), &["10.0.0.0/24", "via", "198.51.100.1"])?;
    // The kernel's receive work for frames entering the gateway runs on GW_CORE.
    lab.rps(lab.gw(), &["g-in", "g-out"], GW_CORE);
    Ok(lab)
}

/// One arm's measurements.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ModeResult {
    /// iperf3, 1 stream, offloads off (Gbit/s).
    pub tcp1_off: f64,
    /// iperf3, 4 streams, offloads off.
    pub tcp4_off: f64,
    /// iperf3, 1 stream, offloads on (not measured: `None`).
    pub tcp1_on: Option<f64>,
    /// 64-byte UDP, generator unpaced: its rate, what reached the sink, and the gateway's
    /// CPU per packet (whose inverse is the capacity of one core).
    pub unpaced: UdpCell,
    /// 64-byte UDP at the fixed offered load.
    pub fixed: UdpCell,
    /// The XDP fast-path arm: the share of each cell's packets the XDP program forwarded
    /// (the rest reached the AF_XDP socket); `None` for the other arms.
    pub fast_share: Option<FastShare>,
}

/// Per cell, the fraction (0..1) of the gateway's packets the XDP fast path forwarded.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct FastShare {
    /// TCP 1 stream, offloads off.
    pub tcp1_off: f64,
    /// TCP 4 streams, offloads off.
    pub tcp4_off: f64,
    /// TCP 1 stream, offloads on (0 when not measured).
    pub tcp1_on: f64,
    /// 64-byte UDP unpaced.
    pub unpaced: f64,
    /// 64-byte UDP at the fixed load.
    pub fixed: f64,
}

impl ModeResult {
    /// Packets per second one gateway core forwards at the measured cost.
    pub fn capacity_pps(&self) -> f64 {
        self.unpaced.capacity_pps()
    }
}

fn measure(lab: &Lab, opts: &LabOptions, arm: &Arm, run: &Running) -> Result<ModeResult> {
    let s = opts.seconds;
    let mut r = ModeResult::default();
    // The XDP fast-path arm: its counters around each cell (outside the CPU windows).
    let fast = matches!(arm, Arm::Quicknat(b) if xdpfast::is_fast(b));
    let mut share = FastShare::default();
    let snap = || -> Result<Option<xdpfast::FastSnap>> {
        fast.then(|| xdpfast::snap(&opts.quicknat)).transpose()
    };
    let share_of = |a: Option<xdpfast::FastSnap>, b: Option<xdpfast::FastSnap>| {
        a.zip(b).map_or(0.0, |(a, b)| a.share_until(&b))
    };
    lab.offloads(&devs(lab), false);
    let a = snap()?;
    r.tcp1_off = iperf(lab, SERVER, SERVER, 1, s)?;
    let b = snap()?;
    r.tcp4_off = iperf(lab, SERVER, SERVER, 4, s)?;
    let c = snap()?;
    (share.tcp1_off, share.tcp4_off) = (share_of(a, b), share_of(b, c));
    if opts.offloads_on && arm.offloads_on_applies() {
        lab.offloads(&devs(lab), true);
        let a = snap()?;
        r.tcp1_on = Some(iperf(lab, SERVER, SERVER, 1, s).unwrap_or(0.0));
        share.tcp1_on = share_of(a, snap()?);
        lab.offloads(&devs(lab), false);
    }
    let dst = format!("{SERVER}:9");
    // The fast path takes a UDP flow once a reply was seen: establish the cells' flows.
    let src_port = if fast {
        let n = xdpfast::warm_up(lab, &opts.quicknat, &dst, &dst, 1)?;
        eprintln!(
            "lab nat44: {}: {n} UDP sessions offloaded before the cells",
            arm.name()
        );
        Some(xdpfast::SRC_PORT)
    } else {
        None
    };
    // The server counts and drops at ingress, so the sink costs (almost) nothing.
    floor::sink_on(lab)?;
    let cells = (|| {
        let a = snap()?;
        let u = floor::udp_cell(lab, run.pid, &dst, None, s, src_port)?;
        let b = snap()?;
        let f = floor::udp_cell(lab, run.pid, &dst, Some(opts.fixed_pps), s, src_port)?;
        let c = snap()?;
        Ok::<_, anyhow::Error>((u, f, share_of(a, b), share_of(b, c)))
    })();
    floor::sink_off(lab)?;
    (r.unpaced, r.fixed, share.unpaced, share.fixed) = cells?;
    r.fast_share = fast.then_some(share);
    Ok(r)
}

/// One arm's medians.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ArmReport {
    /// The arm's name ("kernel NAT", "quicknat af_xdp", ...).
    pub arm: String,
    /// Medians over the rounds.
    pub median: ModeResult,
    /// Every round.
    pub rounds: Vec<ModeResult>,
}

/// quicknat's figures over another arm's.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Ratio {
    /// "quicknat af_xdp".
    pub quicknat: String,
    /// The arm compared with, and why: "kernel NAT", "flowtable", "I/O floor (AF_XDP fwd)".
    pub versus: String,
    /// That arm's name.
    pub versus_arm: String,
    /// TCP 1 stream offloads off: quicknat / it (higher is better).
    pub tcp1_off: Option<f64>,
    /// TCP 1 stream offloads on.
    pub tcp1_on: Option<f64>,
    /// 64-byte capacity of one core: quicknat / it.
    pub capacity: Option<f64>,
    /// CPU per packet at the fixed load: quicknat / it (lower is better).
    pub cpu_per_packet: Option<f64>,
}

/// The lab's report: medians per arm and quicknat's ratios.
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
    /// Every arm measured, in the order they ran each round.
    pub arms: Vec<ArmReport>,
    /// Arms that could not run here, with the reason (e.g. no flowtable in this kernel).
    pub unavailable: Vec<(String, String)>,
    /// quicknat's figures over the kernel NAT, the flowtable and its I/O floor.
    pub ratios: Vec<Ratio>,
}

fn combine(rs: &[ModeResult]) -> ModeResult {
    let cell = |f: &dyn Fn(&ModeResult) -> &UdpCell| UdpCell {
        offered_pps: med(rs, |r| f(r).offered_pps),
        forwarded_pps: med(rs, |r| f(r).forwarded_pps),
        cpu_ns: med(rs, |r| f(r).cpu_ns),
        threads_ns: med(rs, |r| f(r).threads_ns),
        softirq_ns: med(rs, |r| f(r).softirq_ns),
        ksoftirqd_ns: med(rs, |r| f(r).ksoftirqd_ns),
        core_ns: med(rs, |r| f(r).core_ns),
        other_cores_ns: med(rs, |r| f(r).other_cores_ns),
        ipis_per_packet: med(rs, |r| f(r).ipis_per_packet),
    };
    ModeResult {
        tcp1_off: med(rs, |r| r.tcp1_off),
        tcp4_off: med(rs, |r| r.tcp4_off),
        tcp1_on: rs
            .first()
            .and_then(|r| r.tcp1_on)
            .map(|_| med(rs, |r| r.tcp1_on.unwrap_or(0.0))),
        unpaced: cell(&|r| &r.unpaced),
        fixed: cell(&|r| &r.fixed),
        fast_share: rs.first().and_then(|r| r.fast_share).map(|_| {
            let sh =
                |f: &dyn Fn(&FastShare) -> f64| med(rs, |r| r.fast_share.as_ref().map_or(0.0, f));
            FastShare {
                tcp1_off: sh(&|x| x.tcp1_off),
                tcp4_off: sh(&|x| x.tcp4_off),
                tcp1_on: sh(&|x| x.tcp1_on),
                unpaced: sh(&|x| x.unpaced),
                fixed: sh(&|x| x.fixed),
            }
        }),
    }
}

/// `a / b` when both are measured and `b` > 0.
fn over(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// quicknat's ratios to the kernel NAT, the flowtable and its I/O floor (an arm not run
/// gives a ratio row of `None`s, so the row is there and says what is missing).
fn ratios(arms: &[ArmReport]) -> Vec<Ratio> {
    let find = |name: &str| arms.iter().find(|a| a.arm == name).map(|a| &a.median);
    let mut out = Vec::new();
    for q in arms.iter().filter(|a| a.arm.starts_with("quicknat ")) {
        let backend = q.arm.trim_start_matches("quicknat ");
        let mut versus = vec![
            ("kernel NAT".to_string(), Arm::KernelNat.name()),
            ("flowtable".to_string(), Arm::Flowtable.name()),
        ];
        if let Some(f) = Arm::floor_of(backend) {
            versus.push((format!("I/O floor ({})", f.name()), f.name()));
        }
        for (why, name) in versus {
            let o = find(&name);
            let m = &q.median;
            out.push(Ratio {
                quicknat: q.arm.clone(),
                versus: why,
                versus_arm: name.clone(),
                tcp1_off: over(Some(m.tcp1_off), o.map(|o| o.tcp1_off)),
                tcp1_on: over(m.tcp1_on, o.and_then(|o| o.tcp1_on)),
                capacity: over(Some(m.capacity_pps()), o.map(|o| o.capacity_pps())),
                cpu_per_packet: over(Some(m.fixed.cpu_ns), o.map(|o| o.fixed.cpu_ns)),
            });
        }
    }
    out
}

impl std::fmt::Display for LabReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "quicknat lab — {} — median of {} alternating rounds, {} s each",
            self.when, self.rounds, self.seconds
        )?;
        let w = 46;
        write!(f, "{:<w$}", "measure")?;
        for a in &self.arms {
            write!(f, " {:>20}", a.arm)?;
        }
        writeln!(f)?;
        let mut row = |name: &str, get: &dyn Fn(&ModeResult) -> Option<f64>| -> std::fmt::Result {
            write!(f, "{name:<w$}")?;
            for a in &self.arms {
                match get(&a.median) {
                    Some(v) => write!(f, " {v:>20.2}")?,
                    None => write!(f, " {:>20}", "-")?,
                }
            }
            writeln!(f)
        };
        row("TCP 1 stream, offloads off (Gbit/s)", &|r| Some(r.tcp1_off))?;
        row("TCP 4 streams, offloads off (Gbit/s)", &|r| {
            Some(r.tcp4_off)
        })?;
        row("TCP 1 stream, offloads on (Gbit/s)", &|r| r.tcp1_on)?;
        row("64 B capacity of 1 core, from CPU/pkt (Mpps)", &|r| {
            Some(r.capacity_pps() / 1e6)
        })?;
        row("  unpaced: gateway CPU per packet (ns)", &|r| {
            Some(r.unpaced.cpu_ns)
        })?;
        row("    of which the gateway core, busy (ns)", &|r| {
            Some(r.unpaced.core_ns)
        })?;
        row("    of which the other cores' softirq (ns)", &|r| {
            Some(r.unpaced.other_cores_ns)
        })?;
        row("  unpaced: offered by the generator (Mpps)", &|r| {
            Some(r.unpaced.offered_pps / 1e6)
        })?;
        row("  unpaced: reached the server (Mpps)", &|r| {
            Some(r.unpaced.forwarded_pps / 1e6)
        })?;
        row(
            &format!(
                "gateway CPU per packet at {} kpps (ns)",
                self.fixed_pps / 1000
            ),
            &|r| Some(r.fixed.cpu_ns),
        )?;
        row("  of which the gateway core, busy (ns)", &|r| {
            Some(r.fixed.core_ns)
        })?;
        row("  of which the other cores' softirq (ns)", &|r| {
            Some(r.fixed.other_cores_ns)
        })?;
        row("  IPIs that woke the gateway core, per packet", &|r| {
            Some(r.fixed.ipis_per_packet)
        })?;
        row("  of which the gateway's threads (ns)", &|r| {
            Some(r.fixed.threads_ns)
        })?;
        row("  of which the kernel (ns)", &|r| Some(r.fixed.softirq_ns))?;
        row("    of which ksoftirqd (ns)", &|r| {
            Some(r.fixed.ksoftirqd_ns)
        })?;
        row("  reached the server at that load (kpps)", &|r| {
            Some(r.fixed.forwarded_pps / 1e3)
        })?;
        // The XDP fast-path arm: how much of each cell really went through XDP (%).
        row("fast path share: TCP 1 stream off (%)", &|r| {
            r.fast_share.map(|x| x.tcp1_off * 100.0)
        })?;
        row("fast path share: TCP 4 streams off (%)", &|r| {
            r.fast_share.map(|x| x.tcp4_off * 100.0)
        })?;
        row("fast path share: TCP 1 stream on (%)", &|r| {
            r.fast_share
                .filter(|_| r.tcp1_on.is_some())
                .map(|x| x.tcp1_on * 100.0)
        })?;
        row("fast path share: 64 B unpaced (%)", &|r| {
            r.fast_share.map(|x| x.unpaced * 100.0)
        })?;
        row("fast path share: 64 B fixed load (%)", &|r| {
            r.fast_share.map(|x| x.fixed * 100.0)
        })?;
        for (arm, why) in &self.unavailable {
            writeln!(f, "not run: {arm}: {why}")?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "{:<52} {:>10} {:>10} {:>10} {:>10}",
            "ratio (quicknat / arm)", "TCP1 off", "TCP1 on", "capacity", "CPU/pkt"
        )?;
        let x = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}x"));
        for r in &self.ratios {
            writeln!(
                f,
                "{:<52} {:>10} {:>10} {:>10} {:>10}",
                format!("{} vs {}", r.quicknat, r.versus),
                x(r.tcp1_off),
                x(r.tcp1_on),
                x(r.capacity),
                x(r.cpu_per_packet)
            )?;
        }
        Ok(())
    }
}

/// The arms of one round, in the order they run: the kernel's NAT first, then the floors
/// (those available), then each quicknat backend. `unavailable` gets the floors that
/// cannot run here, with the reason.
fn arms(lab: &Lab, opts: &LabOptions, unavailable: &mut Vec<(String, String)>) -> Vec<Arm> {
    let mut arms = vec![Arm::KernelNat];
    if opts.floors {
        match floor::flowtable_supported(lab) {
            Ok(()) => arms.push(Arm::Flowtable),
            Err(why) => unavailable.push((
                Arm::Flowtable.name(),
                format!("this kernel takes no nftables flowtable ({why}; CONFIG_NF_FLOW_TABLE)"),
            )),
        }
        arms.push(Arm::KernelFwd);
        if crate::fwd::xdp::built_with_bpf() {
            arms.push(Arm::XdpFwd);
            arms.push(Arm::TcFwd);
        } else {
            unavailable.push((Arm::XdpFwd.name(), "built without clang".into()));
        }
        for b in &opts.backends {
            // The XDP fast path's floor is the XDP forwarder, there already.
            arms.extend(Arm::floor_of(b).filter(|f| !arms.contains(f)));
        }
    }
    arms.extend(opts.backends.iter().map(|b| Arm::Quicknat(b.clone())));
    arms
}

/// The NAT44 tables every quicknat arm runs.
fn nat44_mode() -> String {
    format!(
        "[nat44]\n[[nat44.rule]]\ninside = \"10.0.0.0/24\"\npool = [\"{}/32\"]\n",
        floor::PUBLIC
    )
}

/// Runs the lab.
pub fn run_lab(opts: &LabOptions) -> Result<LabReport> {
    require(&["ip", "iperf3", "nft", "ethtool", "taskset"])?;
    let lab = build(stop_flag()?)?;
    let configs = Configs::gateway("nat44", &opts.backends, &nat44_mode())?;
    // The XDP fast-path arm's own configuration (AF_XDP, xdp_fast_path = "on").
    let mut configs = configs;
    for c in configs.0.iter_mut().filter(|(b, _)| xdpfast::is_fast(b)) {
        std::fs::write(&c.1, xdpfast::config_for(&c.0, &nat44_mode()))?;
    }
    let cfgs = &configs.0;
    let mut unavailable = Vec::new();
    let arms = arms(&lab, opts, &mut unavailable);
    let mut results: Vec<Vec<ModeResult>> = arms.iter().map(|_| Vec::new()).collect();
    let one = |arm: &Arm| -> Result<ModeResult> {
        let running = match arm {
            Arm::Quicknat(b) => {
                let cfg = cfgs
                    .iter()
                    .find(|(c, _)| c == b)
                    .map(|(_, p)| p.clone())
                    .unwrap_or_default();
                if xdpfast::is_fast(b) {
                    xdpfast::start_arm(&lab, &opts.quicknat, &cfg, b == xdpfast::BACKEND)?
                } else {
                    lab.sysctl(lab.gw(), "net.ipv4.ip_forward=0")?;
                    Running::process(lab.start_quicknat(&opts.quicknat, lab.gw(), GW_CORE, &cfg)?)
                }
            }
            a => floor::start(&lab, a)?,
        };
        let r = measure(&lab, opts, arm, &running);
        floor::stop(&lab, running)?;
        // Conntrack entries of this arm must not leak into the next.
        let _ = lab.sh(
            lab.gw(),
            "command -v conntrack >/dev/null && conntrack -F || true",
        );
        r
    };
    let mut run_all = || -> Result<()> {
        for round in 0..opts.rounds {
            for (i, arm) in arms.iter().enumerate() {
                lab.check_stop()?;
                eprintln!(
                    "lab nat44: round {} of {}: {}",
                    round + 1,
                    opts.rounds,
                    arm.name()
                );
                results[i].push(one(arm)?);
            }
        }
        Ok(())
    };
    let result = run_all();
    drop(lab);
    result?;
    let arms: Vec<ArmReport> = arms
        .iter()
        .zip(results)
        .map(|(a, rs)| ArmReport {
            arm: a.name(),
            median: combine(&rs),
            rounds: rs,
        })
        .collect();
    Ok(LabReport {
        when: chrono_like_date(),
        seconds: opts.seconds,
        rounds: opts.rounds,
        fixed_pps: opts.fixed_pps,
        ratios: ratios(&arms),
        arms,
        unavailable,
    })
}
