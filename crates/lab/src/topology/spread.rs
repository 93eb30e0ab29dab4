//! `quicknat-lab lab --topology spread`: how evenly two workers share few flows, per IP
//! version, on the NAT64 lab's topology ([`super::nat64`]).
//!
//! The client sends 32 UDP flows (fixed source ports, the same rate each) over IPv6 to
//! the IPv4 server, which echoes them: the gateway's workers receive 32 IPv6 flows on the
//! inside and their 32 IPv4 replies on the outside. Per worker, the frames each side
//! received in the cell (`quicknat stats`: `rx_inside` is IPv6, `rx_outside` IPv4) give
//! the spread of each version: the busiest worker's frames over the idlest's (1.00 is
//! even; `inf` is a worker that got none). Arms, alternating per round, quicknat NAT64 on
//! AF_PACKET with two workers and the fast path off (every frame reaches a worker):
//! - `flows` (the default placement): the fanout program gives new flows to the workers
//!   in turn, per IP version;
//! - `hash` (`[gateway] placement = "hash"`): the kernel's flow hash.
//!
//! Both arms also report the flows the program counted per worker (`flows` only) from
//! `quicknat status`, and a capacity cell (64 flows of 64-byte UDP, unpaced, the
//! generator on core 0) shows what the placement costs per packet.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;

use super::{chrono_like_date, exe, med, require, run, stop_child, temp_path, Lab};

/// Flows per IP version.
pub const FLOWS: u16 = 32;
/// Workers of the gateway.
pub const WORKERS: usize = 2;
/// Datagrams per second over all flows (100 per flow: far below what a worker handles,
/// so no frame is lost and the spread is the placement's).
const PPS: u64 = 100 * FLOWS as u64;
/// The client's first source port (flow i sends from SRC_PORT + i).
const SRC_PORT: u16 = 42_000;
const SOCKET: &str = "/run/quicknat-lab-spread.sock";

/// What to run.
#[derive(Clone, Debug)]
pub struct SpreadOptions {
    /// Seconds per cell.
    pub seconds: u64,
    /// Alternating rounds (medians reported).
    pub rounds: usize,
    /// The quicknat binary run as the gateway.
    pub quicknat: PathBuf,
}

/// One arm's figures in one round, or their medians.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SpreadResult {
    /// IPv6 frames each worker received (the inside).
    pub ipv6_frames: Vec<u64>,
    /// IPv4 frames each worker received (the outside).
    pub ipv4_frames: Vec<u64>,
    /// Busiest worker's IPv6 frames over the idlest's (`None`: a worker got none).
    pub ipv6_spread: Option<f64>,
    /// The same for IPv4.
    pub ipv4_spread: Option<f64>,
    /// `status`'s placement object at the end of the cell.
    pub placement: Value,
    /// The capacity cell: 64-byte IPv6 UDP from 64 flows, unpaced, translated and sent
    /// out of the IPv4 side per second (the server drops at ingress): what the placement
    /// costs per packet, if anything.
    pub capacity_pps: f64,
}

/// The report.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SpreadReport {
    /// UTC date and kernel.
    pub when: String,
    /// Seconds per cell.
    pub seconds: u64,
    /// Rounds.
    pub rounds: usize,
    /// Flows per IP version.
    pub flows: u16,
    /// Workers.
    pub workers: usize,
    /// Per arm, in the order they ran.
    pub arms: Vec<SpreadArm>,
}

/// One arm's rounds and medians.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SpreadArm {
    /// `[gateway] placement`: "flows" or "hash".
    pub placement: String,
    /// Each round's figures.
    pub rounds: Vec<SpreadResult>,
    /// The medians of the spreads (the frames and placement of the last round).
    pub median: SpreadResult,
}

/// Busiest over idlest (`None` when one got nothing).
fn spread(v: &[u64]) -> Option<f64> {
    let (lo, hi) = (*v.iter().min()?, *v.iter().max()?);
    (lo > 0).then(|| hi as f64 / lo as f64)
}

fn config(placement: &str) -> String {
    format!(
        "[gateway]\ninside = \"g-in\"\noutside = \"g-out\"\nbackend = \"af_packet\"\nworkers = {WORKERS}\nplacement = \"{placement}\"\nxdp_fast_path = \"off\"\nstats_interval = 3600\ncontrol_socket = \"{SOCKET}\"\n\n{}",
        super::nat64::Xlat::Nat64.mode()
    )
}

/// `quicknat VERB --json` on the lab gateway's socket, parsed.
fn ask(quicknat: &Path, verb: &str) -> Result<Value> {
    let out = run(std::process::Command::new(quicknat).args([verb, "--json", "--socket", SOCKET]))?;
    let last = out.lines().last().unwrap_or_default();
    serde_json::from_str(last).with_context(|| format!("quicknat {verb}: {}", out.trim()))
}

/// Per worker, (IPv6 frames, IPv4 frames) received so far.
fn frames(quicknat: &Path) -> Result<Vec<(u64, u64)>> {
    let v = ask(quicknat, "stats")?;
    let workers = v["stats"]["workers"]
        .as_array()
        .context("quicknat stats: no workers")?;
    Ok(workers
        .iter()
        .map(|w| {
            let io = &w["io"];
            (
                io["rx_inside"].as_u64().unwrap_or(0),
                io["rx_outside"].as_u64().unwrap_or(0),
            )
        })
        .collect())
}

/// Starts quicknat in the gateway namespace and waits (up to 5 s) until its control
/// socket answers.
fn start(lab: &Lab, quicknat: &Path, cfg: &Path) -> Result<Child> {
    let bin = quicknat.to_string_lossy();
    let mut child = lab.spawn(lab.gw(), &[&bin, "run", "--config", &cfg.to_string_lossy()])?;
    let answered = super::floor::await_cond(
        std::slice::from_mut(&mut child),
        "quicknat's control socket",
        || ask(quicknat, "status").is_ok(),
    );
    match answered {
        Ok(()) => Ok(child),
        Err(e) => {
            let _ = stop_child(child);
            Err(e)
        }
    }
}

/// One cell: the 32 flows for `seconds`, echoed; the frames each worker got meanwhile.
fn cell(lab: &Lab, quicknat: &Path, seconds: u64) -> Result<SpreadResult> {
    let exe = exe()?;
    let before = frames(quicknat)?;
    let mut echo = lab.spawn(
        lab.srv(),
        &[
            &exe,
            "echo",
            "--listen",
            "198.51.100.2:7",
            "--seconds",
            &(seconds + 10).to_string(),
        ],
    )?;
    let dst = format!("[{}]:7", super::nat64::SERVER6);
    let sent = lab.ns(
        lab.cli(),
        &[
            &exe,
            "gen",
            "--dst",
            &dst,
            "--flows",
            &FLOWS.to_string(),
            "--src-port",
            &SRC_PORT.to_string(),
            "--pps",
            &PPS.to_string(),
            "--seconds",
            &seconds.to_string(),
            "--json",
        ],
    );
    // The last echoes on their way back.
    std::thread::sleep(Duration::from_millis(300));
    let _ = echo.kill();
    let _ = echo.wait();
    sent?;
    let after = frames(quicknat)?;
    anyhow::ensure!(
        after.len() == WORKERS && before.len() == WORKERS,
        "quicknat stats: {} workers, not {WORKERS}",
        after.len()
    );
    let d: Vec<(u64, u64)> = after
        .iter()
        .zip(&before)
        .map(|(a, b)| (a.0.saturating_sub(b.0), a.1.saturating_sub(b.1)))
        .collect();
    let ipv6_frames: Vec<u64> = d.iter().map(|x| x.0).collect();
    let ipv4_frames: Vec<u64> = d.iter().map(|x| x.1).collect();
    let placement = ask(quicknat, "status")?["status"]["placement"].clone();
    lab.sink_on(lab.srv(), "s0")?;
    let capacity = super::udp_small(lab, &dst, "g-out", None, seconds, 0.0, None);
    lab.sink_off(lab.srv())?;
    Ok(SpreadResult {
        capacity_pps: capacity?.1,
        ipv6_spread: spread(&ipv6_frames),
        ipv4_spread: spread(&ipv4_frames),
        ipv6_frames,
        ipv4_frames,
        placement,
    })
}

/// The medians of the spreads over rounds (a round without one, `None`, counts as
/// infinite); the frames and placement of the last round.
fn combine(rs: &[SpreadResult]) -> SpreadResult {
    let m = |f: fn(&SpreadResult) -> Option<f64>| {
        let v = med(rs, |r| f(r).unwrap_or(f64::INFINITY));
        v.is_finite().then_some(v)
    };
    let last = rs.last().cloned().unwrap_or_default();
    SpreadResult {
        capacity_pps: med(rs, |r| r.capacity_pps),
        ipv6_spread: m(|r| r.ipv6_spread),
        ipv4_spread: m(|r| r.ipv4_spread),
        ..last
    }
}

/// Runs the spread lab.
pub fn run_spread(opts: &SpreadOptions) -> Result<SpreadReport> {
    require(&["ip", "ethtool", "nft", "taskset"])?;
    let lab = super::nat64::build()?;
    lab.offloads(&super::nat64::devs(&lab), false);
    let arms = ["flows", "hash"];
    let cfgs: Vec<PathBuf> = arms
        .iter()
        .map(|a| {
            let p = temp_path(&format!("spread-{a}.toml"));
            std::fs::write(&p, config(a)).map(|()| p)
        })
        .collect::<std::io::Result<_>>()?;
    let mut results: Vec<Vec<SpreadResult>> = arms.iter().map(|_| Vec::new()).collect();
    let outcome = (|| -> Result<()> {
        for round in 0..opts.rounds {
            for (i, arm) in arms.iter().enumerate() {
                lab.check_stop()?;
                eprintln!(
                    "lab spread: round {} of {}: placement {arm}",
                    round + 1,
                    opts.rounds
                );
                let qn = start(&lab, &opts.quicknat, &cfgs[i])?;
                let r = cell(&lab, &opts.quicknat, opts.seconds);
                eprintln!("lab spread: quicknat {}", stop_child(qn));
                results[i].push(r?);
            }
        }
        Ok(())
    })();
    for p in &cfgs {
        let _ = std::fs::remove_file(p);
    }
    drop(lab);
    outcome?;
    Ok(SpreadReport {
        when: chrono_like_date(),
        seconds: opts.seconds,
        rounds: opts.rounds,
        flows: FLOWS,
        workers: WORKERS,
        arms: arms
            .iter()
            .zip(results)
            .map(|(a, rs)| SpreadArm {
                placement: a.to_string(),
                median: combine(&rs),
                rounds: rs,
            })
            .collect(),
    })
}

impl std::fmt::Display for SpreadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "quicknat lab spread — {} — {} IPv6 + {} IPv4 UDP flows over {} AF_PACKET workers (NAT64, fast path off), median of {} alternating rounds, {} s each",
            self.when, self.flows, self.flows, self.workers, self.rounds, self.seconds
        )?;
        let s = |v: Option<f64>| v.map_or("inf".to_string(), |x| format!("{x:.2}"));
        let list = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
        writeln!(
            f,
            "{:<10} {:>12} {:>12} {:>24} {:>24} {:>14}",
            "placement",
            "IPv6 max/min",
            "IPv4 max/min",
            "IPv6 frames per worker",
            "IPv4 frames per worker",
            "capacity pps"
        )?;
        for a in &self.arms {
            let (arm, m) = (&a.placement, &a.median);
            writeln!(
                f,
                "{arm:<10} {:>12} {:>12} {:>24} {:>24} {:>14.0}",
                s(m.ipv6_spread),
                s(m.ipv4_spread),
                list(&m.ipv6_frames),
                list(&m.ipv4_frames),
                m.capacity_pps
            )?;
        }
        if let [a, b] = &self.arms[..] {
            writeln!(
                f,
                "capacity {} / {}: {}",
                a.placement,
                b.placement,
                super::ratio(a.median.capacity_pps, b.median.capacity_pps)
            )?;
        }
        writeln!(
            f,
            "(frames: the last round's; max/min and capacity: the medians over rounds)"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_busiest_over_idlest_and_none_for_an_idle_worker() {
        assert_eq!(spread(&[160, 160]), Some(1.0));
        assert_eq!(spread(&[170, 150]), Some(170.0 / 150.0));
        assert_eq!(spread(&[0, 320]), None);
        assert_eq!(spread(&[]), None);
    }

    #[test]
    fn a_round_with_an_idle_worker_counts_as_the_worst_in_the_median() {
        let r = |s: Option<f64>| SpreadResult {
            ipv6_spread: s,
            ipv4_spread: Some(1.0),
            ..SpreadResult::default()
        };
        let m = combine(&[r(Some(1.0)), r(None), r(None)]);
        assert_eq!(m.ipv6_spread, None);
        let m = combine(&[r(Some(1.0)), r(Some(1.1)), r(None)]);
        assert_eq!(m.ipv6_spread, Some(1.1));
    }

    #[test]
    fn the_arms_differ_only_in_placement() {
        let (a, b) = (config("flows"), config("hash"));
        assert_eq!(a.replace("\"flows\"", "\"hash\""), b);
        assert!(a.contains("workers = 2") && a.contains("xdp_fast_path = \"off\""));
    }
}
