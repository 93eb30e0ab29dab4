//! The attack lab's cells: each runs on a fresh topology with one arm (the kernel's NAT or
//! quicknat) and fills its part of an [`ArmRound`].

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;

use super::*;
use crate::probe::{now_ms, Arrivals};
use crate::topology::cpu::GatewaySample;

/// The SYN flood cell.
pub(super) fn flood_cell(
    lab: &Lab,
    o: &AttackOptions,
    pid: Option<u32>,
    r: &mut ArmRound,
) -> Result<()> {
    let exe = exe()?;
    let s = o.seconds;
    let _echo = lab.spawn(
        lab.cli(),
        &[
            &exe,
            "rr",
            "server",
            "--listen",
            &format!("{INSIDE_SERVER}:80"),
            "--seconds",
            &(s + 60).to_string(),
        ],
    )?;
    inside_counter(lab, false)?;
    let mut iperf_srv = lab.spawn(lab.srv(), &["iperf3", "-s", "-1", "-B", SERVER])?;
    std::thread::sleep(Duration::from_millis(300));
    let iperf = lab.spawn(
        lab.cli(),
        &[
            "timeout",
            &(s + 20).to_string(),
            "iperf3",
            "-c",
            SERVER,
            "-t",
            &(s + 1).to_string(),
            "-i",
            "1",
            "-J",
            "--connect-timeout",
            "3000",
        ],
    )?;
    // The flow is established and has run one reporting interval before the flood starts.
    std::thread::sleep(Duration::from_secs(1));
    let gout = mac(lab, lab.gw(), "g-out")?;
    let seconds = s.to_string();
    let mut args = vec![
        "--pattern",
        "spoofed-syn",
        "--dst",
        FORWARD,
        "--src-net",
        SPOOFED_NET,
        "--seconds",
        &seconds,
    ];
    let pps = o.flood_pps.map(|r| r.to_string());
    if let Some(pps) = &pps {
        args.extend(["--pps", pps]);
    }
    let rx0 = lab.counter(lab.gw(), "g-out", "rx_packets");
    let tx0 = lab.counter(lab.gw(), "g-in", "tx_packets");
    let cpu0 = GatewaySample::take(pid);
    let t0 = Instant::now();
    let flood = spawn_flood(lab, lab.srv(), "s0", &gout, &args)?;
    let legit = lab.spawn(
        lab.srv(),
        &[
            &exe,
            "probe",
            "connect",
            "--dst",
            FORWARD,
            "--seconds",
            &s.to_string(),
            "--timeout-ms",
            "1000",
        ],
    )?;
    r.flood = json_of(flood, "the SYN flood generator")?;
    let secs = t0.elapsed().as_secs_f64().max(1e-3);
    let spent = cpu0.until(&GatewaySample::take(pid));
    let rate = |now: u64, before: u64| now.saturating_sub(before) as f64 / secs;
    r.flood_cpu = FloodCpu {
        threads_pct: spent.threads / secs / 1e7,
        softirq_pct: (spent.total() - spent.threads) / secs / 1e7,
        outside_rx_pps: rate(lab.counter(lab.gw(), "g-out", "rx_packets"), rx0),
        inside_tx_pps: rate(lab.counter(lab.gw(), "g-in", "tx_packets"), tx0),
    };
    let reaching = inside_count(lab);
    r.legit = json_of(legit, "the legitimate client")?;
    r.flood_reaching_pps =
        reaching.saturating_sub(r.legit.attempts) as f64 / r.flood.seconds.max(1e-3);
    let out = iperf.wait_with_output()?;
    let _ = iperf_srv.kill();
    let _ = iperf_srv.wait();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let bps: Vec<f64> = v["intervals"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|i| i["sum"]["bits_per_second"].as_f64().unwrap_or(0.0) / 1e9)
                .collect()
        })
        .unwrap_or_default();
    r.tcp_before_gbps = bps.first().copied().unwrap_or(0.0);
    let during = &bps[bps.len().min(1)..];
    r.tcp_during_gbps = if during.is_empty() {
        0.0
    } else {
        during.iter().sum::<f64>() / during.len() as f64
    };
    Ok(())
}

/// The greedy-host cell; `limit`: the kernel's `ct count over N` rule installed.
pub(super) fn greedy_cell(
    lab: &Lab,
    o: &AttackOptions,
    limit: Option<u32>,
) -> Result<(ConnectReport, FloodReport)> {
    let exe = exe()?;
    if let Some(n) = limit {
        nft(lab, lab.gw(), &kernel_host_limit(n))?;
    }
    let first: std::net::Ipv4Addr = POLITE_FIRST.parse()?;
    let mut cmds = String::new();
    for i in 0..POLITE_HOSTS {
        cmds.push_str(&format!(
            "addr add {}/24 dev c0\n",
            std::net::Ipv4Addr::from(u32::from(first) + i)
        ));
    }
    ip_batch(lab, lab.cli(), &cmds)?;
    let fill = o.greedy_fill();
    let timeout_ms = 3000u64;
    let _echo = lab.spawn(
        lab.srv(),
        &[
            &exe,
            "rr",
            "server",
            "--listen",
            &format!("{SERVER}:{ECHO_PORT}"),
            "--seconds",
            &(fill as u64 + 60).to_string(),
        ],
    )?;
    let gin = mac(lab, lab.gw(), "g-in")?;
    let greedy = spawn_flood(
        lab,
        lab.cli(),
        "c0",
        &gin,
        &[
            "--pattern",
            "greedy",
            "--src",
            GREEDY_HOST,
            "--dst-net",
            GREEDY_DSTS,
            "--seconds",
            &format!("{:.1}", fill + timeout_ms as f64 / 1e3 + 0.5),
        ],
    )?;
    // The greedy host has the table and the ports to itself for `fill` seconds first.
    std::thread::sleep(Duration::from_secs_f64(fill));
    let others = json_of(
        lab.spawn(
            lab.cli(),
            &[
                &exe,
                "probe",
                "hosts",
                "--dst",
                &format!("{SERVER}:{ECHO_PORT}"),
                "--first",
                POLITE_FIRST,
                "--count",
                &POLITE_HOSTS.to_string(),
                "--timeout-ms",
                &timeout_ms.to_string(),
            ],
        )?,
        "the 50 inside hosts",
    )?;
    let g = json_of(greedy, "the greedy generator")?;
    Ok((others, g))
}

/// Least gateway CPU time one collision measurement counts (ns): 10 of `/proc/stat`'s
/// 10 ms units: over too short a run the coarse counters can read 0 ns per packet (see
/// [`GatewaySample`]). The generator runs again, and the runs add up, until this much is
/// counted.
const MIN_CPU_NS: u64 = 100_000_000;
/// Most generator runs one collision measurement takes to count [`MIN_CPU_NS`].
const MAX_COLLISION_RUNS: usize = 4;

/// One collision measurement: (gateway CPU ns per forwarded packet, forwarded pps) while
/// `tuples` are replayed at the fixed rate. The CPU is the gateway's own ([`GatewaySample`]:
/// its core's busy time, where quicknat (`pid`) is pinned, plus the other cores' softirq),
/// over the generator's runs (one, or more until [`MIN_CPU_NS`] is counted).
fn collision_run(
    lab: &Lab,
    o: &AttackOptions,
    tuples: &Path,
    pid: Option<u32>,
) -> Result<(f64, f64)> {
    let secs = o.collision_seconds();
    let gout = mac(lab, lab.gw(), "g-out")?;
    let (mut ns, mut fwd, mut elapsed) = (0u64, 0u64, 0f64);
    for _ in 0..MAX_COLLISION_RUNS {
        let gen = spawn_flood(
            lab,
            lab.srv(),
            "s0",
            &gout,
            &[
                "--pattern",
                "tuples",
                "--dst",
                FORWARD,
                "--tuples",
                &tuples.to_string_lossy(),
                "--pps",
                &o.collision_pps.to_string(),
                "--seconds",
                &secs.to_string(),
            ],
        )?;
        // Sampled from the generator's start to its end (its own set-up is not the gateway's).
        let before = lab.counter(lab.gw(), "g-in", "tx_packets");
        let cpu0 = GatewaySample::take(pid);
        let t0 = Instant::now();
        let f: FloodReport = json_of(gen, "the collision generator")?;
        elapsed += t0.elapsed().as_secs_f64();
        let spent = cpu0.until(&GatewaySample::take(pid));
        fwd += lab
            .counter(lab.gw(), "g-in", "tx_packets")
            .saturating_sub(before);
        anyhow::ensure!(f.sent > 0, "the collision generator sent nothing");
        ns += spent.total() as u64;
        if ns >= MIN_CPU_NS {
            break;
        }
    }
    Ok((
        if fwd > 0 { ns as f64 / fwd as f64 } else { 0.0 },
        fwd as f64 / elapsed.max(1e-3),
    ))
}

/// The collision cell: random and crafted tuples alternating (`o.collision_pairs()` pairs,
/// random first: its sessions spread over the table and barely touch the crafted bucket),
/// the median of each. `pid`: quicknat's process (`None` for the kernel's NAT).
pub(super) fn collision_cell(
    lab: &Lab,
    o: &AttackOptions,
    files: &Tuples,
    pid: Option<u32>,
    r: &mut ArmRound,
) -> Result<()> {
    inside_counter(lab, true)?;
    let (mut random, mut crafted) = (Vec::new(), Vec::new());
    for _ in 0..o.collision_pairs() {
        random.push(collision_run(lab, o, &files.random, pid)?);
        crafted.push(collision_run(lab, o, &files.crafted, pid)?);
    }
    r.random_ns = med(&random, |x| x.0);
    r.random_fwd_pps = med(&random, |x| x.1);
    r.crafted_ns = med(&crafted, |x| x.0);
    r.crafted_fwd_pps = med(&crafted, |x| x.1);
    Ok(())
}

/// A 1 kHz probe stream inside -> outside around `event`, which returns the event's time
/// (ms since the epoch) and a note.
fn probe_around(
    lab: &Lab,
    o: &AttackOptions,
    event: impl FnOnce() -> Result<f64>,
) -> Result<Outage> {
    let exe = exe()?;
    let (pre, window) = o.probe_window();
    let listen = format!("{SERVER}:{PROBE_PORT}");
    let recv = lab.spawn(
        lab.srv(),
        &[
            &exe,
            "probe",
            "recv",
            "--listen",
            &listen,
            "--seconds",
            &format!("{:.1}", pre + window + 1.5),
        ],
    )?;
    std::thread::sleep(Duration::from_millis(200));
    let send = lab.spawn(
        lab.cli(),
        &[
            &exe,
            "probe",
            "send",
            "--dst",
            &listen,
            "--pps",
            "1000",
            "--seconds",
            &format!("{:.1}", pre + window),
        ],
    )?;
    std::thread::sleep(Duration::from_secs_f64(pre));
    let at = event();
    let sent: serde_json::Value = json_of(send, "the probe sender")?;
    let arrivals: Arrivals = json_of(recv, "the probe receiver")?;
    let at = at?;
    Ok(arrivals.outage(sent["sent"].as_u64().unwrap_or(0), at))
}

/// What a dead gateway left behind in its namespace: nftables tables and XDP programs.
fn leftovers(lab: &Lab) -> String {
    let tables = lab
        .ns(lab.gw(), &["nft", "list", "tables"])
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.contains("qnlab"))
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(", ");
    let xdp = lab
        .ns(lab.gw(), &["ip", "-o", "link", "show"])
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("xdp"))
        .filter_map(|l| l.split(':').nth(1).map(|s| s.trim().to_string()))
        .collect::<Vec<_>>()
        .join(", ");
    format!("nft tables [{}], XDP attached on [{}]", tables, xdp)
}

/// The flap and (quicknat) SIGKILL + restart cell. Returns the gateway now running.
pub(super) fn recovery_cell(
    lab: &Lab,
    o: &AttackOptions,
    mode: Mode,
    bin: &Path,
    cfg: Option<&Path>,
    r: &mut ArmRound,
) -> Result<Mode> {
    r.flap = probe_around(lab, o, || {
        lab.ns(lab.gw(), &["ip", "link", "set", "g-out", "down"])?;
        lab.ns(lab.gw(), &["ip", "link", "set", "g-out", "up"])?;
        Ok(now_ms())
    })?;
    let (Mode::Quicknat(child), Some(cfg)) = (mode, cfg) else {
        return Ok(Mode::Kernel);
    };
    let mut restarted = None;
    let mut note = String::new();
    let outage = probe_around(lab, o, || {
        let pid = child.id().to_string();
        run(std::process::Command::new("kill").args(["-KILL", &pid]))?;
        let at = now_ms();
        let mut child = child;
        let _ = child.wait();
        note = format!("after SIGKILL: {}", leftovers(lab));
        match lab.start_quicknat(bin, lab.gw(), GW_CORE, cfg) {
            Ok(c) => restarted = Some(c),
            Err(e) => note.push_str(&format!("; restart failed: {e:#}")),
        }
        Ok(at)
    })?;
    r.restart = Some(outage);
    r.restart_note = note;
    Ok(restarted.map_or(Mode::Kernel, Mode::Quicknat))
}

/// The crafted and random tuple files, shared by every round.
pub(super) struct Tuples {
    pub(super) crafted: PathBuf,
    pub(super) random: PathBuf,
}

impl Drop for Tuples {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.crafted);
        let _ = std::fs::remove_file(&self.random);
    }
}
