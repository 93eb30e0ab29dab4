//! The benchmark's tables, as text for people and JSON for tracking.

use std::fmt;

use serde::Serialize;

use super::cells::{Connections, IlaRow, ShareRow, SiitRow, SynFlood};
use super::run::Measurement;
use super::traffic::FrameMix;
use super::BenchOptions;

/// One row of the frame-size table.
#[derive(Clone, Debug, Serialize)]
pub struct FrameRow {
    /// "64", ..., "IMIX".
    pub frame: String,
    /// Average frame bytes.
    pub avg_frame: f64,
    /// Million packets per second (one worker).
    pub mpps: f64,
    /// Gbit/s of frames.
    pub gbps: f64,
    /// Percent of 10/40/100 GbE line rate (20 bytes of preamble and gap per frame counted).
    pub line_rate_pct: [f64; 3],
}

/// One row of the flows table.
#[derive(Clone, Debug, Serialize)]
pub struct FlowRow {
    /// Flows.
    pub flows: usize,
    /// Million packets per second (one worker, 64 B).
    pub mpps: f64,
    /// Table memory reserved, MiB.
    pub table_mib: f64,
}

/// One row of the rules table.
#[derive(Clone, Debug, Serialize)]
pub struct RuleRow {
    /// Rules.
    pub rules: usize,
    /// Engine Mpps on established traffic (one worker, 8192 flows, 64 B).
    pub mpps: f64,
    /// Distinct prefix lengths (hash probes on a miss).
    pub probes: usize,
    /// Hashed rule lookups per second (millions).
    pub hashed_mlookups: f64,
    /// Linear-scan lookups per second (millions).
    pub linear_mlookups: f64,
}

/// The target for NAT64 on one core, 64-byte frames, in memory (Mpps).
pub const NAT64_TARGET_MPPS: f64 = 15.0;

/// One row of the NAT64 table (64 B frames, established UDP flows).
#[derive(Clone, Debug, Serialize)]
pub struct Nat64Row {
    /// Flows (sessions established before timing).
    pub flows: usize,
    /// Workers.
    pub workers: usize,
    /// IPv6 -> IPv4 (outbound, from the IPv6 hosts), million packets per second.
    pub v6_to_v4_mpps: f64,
    /// IPv4 -> IPv6 (inbound replies), million packets per second.
    pub v4_to_v6_mpps: f64,
    /// Packets not forwarded, all rounds (must be 0).
    pub dropped: u64,
    /// Sampled outputs verified by full checksum recompute and endpoint.
    pub verified: u64,
    /// Of which wrong (must be 0).
    pub verify_failures: u64,
}

/// The CLAT row (stateless, EAM + PLAT Pref64; 64 B frames).
#[derive(Clone, Debug, Serialize)]
pub struct ClatRow {
    /// Flows.
    pub flows: usize,
    /// IPv4 -> IPv6 (the host's packets out), million packets per second.
    pub v4_to_v6_mpps: f64,
    /// IPv6 -> IPv4 (replies in), million packets per second.
    pub v6_to_v4_mpps: f64,
    /// Packets not forwarded (must be 0).
    pub dropped: u64,
    /// Sampled outputs verified.
    pub verified: u64,
    /// Of which wrong (must be 0).
    pub verify_failures: u64,
}

/// Machine and date the figures came from.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// UTC date, YYYY-MM-DD.
    pub date: String,
    /// CPU model.
    pub cpu: String,
    /// Logical cores.
    pub cores: usize,
    /// Kernel release.
    pub kernel: String,
}

/// Everything `quicknat bench` measured.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// Where and when.
    pub machine: Machine,
    /// Quick (smoke) run?
    pub quick: bool,
    /// Seconds per timed cell.
    pub cell_seconds: f64,
    /// Frame-size table.
    pub frames: Vec<FrameRow>,
    /// Median Mpps with 1..=N workers (64 B, 8192 flows).
    pub cores: Vec<f64>,
    /// Flows table.
    pub flows: Vec<FlowRow>,
    /// Rules table.
    pub rules: Vec<RuleRow>,
    /// Setup, teardown, capacity.
    pub connections: Connections,
    /// Per-core share.
    pub share: Vec<ShareRow>,
    /// SYN flood.
    pub syn_flood: Option<SynFlood>,
    /// ILA SIR -> ILA translation.
    pub ila: Vec<IlaRow>,
    /// Stateless SIIT translation.
    pub siit: Option<SiitRow>,
    /// Stateful NAT64 (engine::nat64) by flows and workers.
    pub nat64: Vec<Nat64Row>,
    /// The target the NAT64 1-worker rows are held to (Mpps).
    pub nat64_target_mpps: f64,
    /// CLAT (engine::siit::Siit with one EAM entry).
    pub clat: Option<ClatRow>,
    /// Sampled outputs verified (checksums by full recompute, translated endpoint).
    pub verified: u64,
    /// Of which wrong (must be 0).
    pub verify_failures: u64,
}

fn civil_date(days: i64) -> (i64, u32, u32) {
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

impl Machine {
    /// This machine, now (also the header of `--csit`'s report).
    pub fn here() -> Self {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let (y, m, d) = civil_date((secs / 86_400) as i64);
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|s| s.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        Self {
            date: format!("{y:04}-{m:02}-{d:02}"),
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map_or_else(|_| "unknown".into(), |s| s.trim().into()),
        }
    }
}

impl BenchReport {
    pub(super) fn new(opts: &BenchOptions) -> Self {
        Self {
            machine: Machine::here(),
            quick: opts.quick,
            cell_seconds: opts.seconds,
            frames: Vec::new(),
            cores: Vec::new(),
            flows: Vec::new(),
            rules: Vec::new(),
            connections: Connections::default(),
            share: Vec::new(),
            syn_flood: None,
            ila: Vec::new(),
            siit: None,
            nat64: Vec::new(),
            nat64_target_mpps: NAT64_TARGET_MPPS,
            clat: None,
            verified: 0,
            verify_failures: 0,
        }
    }

    pub(super) fn absorb(&mut self, m: &Measurement) {
        self.verified += m.verified;
        self.verify_failures += m.verify_failures;
    }

    pub(super) fn add_nat64(&mut self, rows: Vec<Nat64Row>, clat: ClatRow) {
        for r in &rows {
            self.verified += r.verified;
            self.verify_failures += r.verify_failures;
        }
        self.verified += clat.verified;
        self.verify_failures += clat.verify_failures;
        self.nat64 = rows;
        self.clat = Some(clat);
    }

    pub(super) fn add_frame(&mut self, mix: FrameMix, m: &Measurement) {
        self.absorb(m);
        let wire_bits = m.mpps * 1e6 * (m.avg_frame + 20.0) * 8.0;
        self.frames.push(FrameRow {
            frame: mix.label(),
            avg_frame: m.avg_frame,
            mpps: m.mpps,
            gbps: m.gbps,
            line_rate_pct: [10e9, 40e9, 100e9].map(|rate| 100.0 * wire_bits / rate),
        });
    }

    pub(super) fn add_flows(&mut self, flows: usize, m: &Measurement, table_bytes: usize) {
        self.absorb(m);
        self.flows.push(FlowRow {
            flows,
            mpps: m.mpps,
            table_mib: table_bytes as f64 / (1 << 20) as f64,
        });
    }

    pub(super) fn add_rules(
        &mut self,
        rules: usize,
        m: &Measurement,
        hashed: f64,
        linear: f64,
        probes: usize,
    ) {
        self.absorb(m);
        self.rules.push(RuleRow {
            rules,
            mpps: m.mpps,
            probes,
            hashed_mlookups: hashed / 1e6,
            linear_mlookups: linear / 1e6,
        });
    }

    /// JSON for tracking.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.machine;
        writeln!(
            f,
            "quicknat bench — {} — {} ({} cores), Linux {}{}",
            m.date,
            m.cpu,
            m.cores,
            m.kernel,
            if self.quick { " — QUICK run" } else { "" }
        )?;
        writeln!(f, "NAT44, in memory; every packet parsed, looked up, rewritten, checksummed; {:.1} s per cell\n", self.cell_seconds)?;
        writeln!(
            f,
            "Frame size (1 worker, 8192 flows, 1000 rules, TCP+UDP both directions)"
        )?;
        writeln!(
            f,
            "  {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "frame", "Mpps", "Gbit/s", "%10GbE", "%40GbE", "%100GbE"
        )?;
        for r in &self.frames {
            writeln!(
                f,
                "  {:>6} {:>8.2} {:>8.2} {:>8.1} {:>8.1} {:>8.1}",
                r.frame, r.mpps, r.gbps, r.line_rate_pct[0], r.line_rate_pct[1], r.line_rate_pct[2]
            )?;
        }
        writeln!(
            f,
            "\nCores (64 B, 8192 flows; median of rounds, worker counts alternating)"
        )?;
        writeln!(f, "  {:>6} {:>8} {:>8}", "cores", "Mpps", "speed-up")?;
        let base = self.cores.first().copied().unwrap_or(0.0);
        for (i, mpps) in self.cores.iter().enumerate() {
            writeln!(
                f,
                "  {:>6} {:>8.2} {:>7.2}x",
                i + 1,
                mpps,
                if base > 0.0 { mpps / base } else { 0.0 }
            )?;
        }
        writeln!(f, "\nFlows (1 worker, 64 B)")?;
        writeln!(f, "  {:>8} {:>8} {:>10}", "flows", "Mpps", "table MiB")?;
        for r in &self.flows {
            writeln!(f, "  {:>8} {:>8.2} {:>10.1}", r.flows, r.mpps, r.table_mib)?;
        }
        writeln!(
            f,
            "\nRules (1 worker, 8192 flows, 64 B; rule lookups: hashed vs linear scan)"
        )?;
        writeln!(
            f,
            "  {:>7} {:>8} {:>7} {:>14} {:>14} {:>9}",
            "rules", "Mpps", "probes", "hashed M/s", "linear M/s", "ratio"
        )?;
        let base = self.rules.first().map_or(0.0, |r| r.mpps);
        for r in &self.rules {
            writeln!(
                f,
                "  {:>7} {:>8.2} {:>7} {:>14.2} {:>14.4} {:>8.0}x   ({:+.1}% Mpps vs 1 rule)",
                r.rules,
                r.mpps,
                r.probes,
                r.hashed_mlookups,
                r.linear_mlookups,
                r.hashed_mlookups / r.linear_mlookups.max(1e-12),
                if base > 0.0 {
                    100.0 * (r.mpps - base) / base
                } else {
                    0.0
                }
            )?;
        }
        let c = &self.connections;
        writeln!(f, "\nConnections (RFC 9693 measures for stateful NAT)")?;
        writeln!(
            f,
            "  setup, 1 worker        {:>12.0} sessions/s",
            c.setup_per_sec_1
        )?;
        writeln!(
            f,
            "  setup, {} workers       {:>12.0} sessions/s",
            c.workers, c.setup_per_sec_n
        )?;
        writeln!(
            f,
            "  teardown (reaper)      {:>12.0} sessions/s",
            c.teardown_per_sec
        )?;
        writeln!(
            f,
            "  table bytes/session    {:>12}   (both records + index + binding, at capacity)",
            c.bytes_per_session
        )?;
        writeln!(
            f,
            "  filled {:>9} sessions: {:.0} resident bytes/session measured",
            c.filled, c.rss_bytes_per_session
        )?;
        writeln!(f, "  sessions in 24 GiB     {:>12}", c.fit_in_24gib)?;
        writeln!(
            f,
            "\nPer-core share of packets, 32 flows (max/min; 1.00 is perfect)"
        )?;
        writeln!(
            f,
            "  {:>6} {:>8} {:>10} {:>10}",
            "family", "workers", "RSS", "balanced"
        )?;
        for r in &self.share {
            writeln!(
                f,
                "  {:>6} {:>8} {:>10.2} {:>10.2}",
                r.family, r.workers, r.rss_ratio, r.balanced_ratio
            )?;
        }
        if let Some(s) = &self.syn_flood {
            writeln!(f, "\nSYN flood (1 worker; established packets interleaved 1:1 with new-flow SYNs; table fills)")?;
            writeln!(
                f,
                "  established forwarded {}/{} ({:.3}%); flood: {} admitted, {} dropped table_full; {:.2} Mpps mixed",
                s.established_forwarded,
                s.established_sent,
                100.0 * s.established_forwarded as f64 / s.established_sent.max(1) as f64,
                s.flood_admitted,
                s.flood_table_full,
                s.mpps
            )?;
        }
        if let Some(x) = &self.siit {
            writeln!(
                f,
                "\nSIIT, stateless RFC 7915 (1 worker, 64 B frames, RFC 6052 /96 addresses)"
            )?;
            writeln!(
                f,
                "  IPv4 -> IPv6 {:.2} Mpps, IPv6 -> IPv4 {:.2} Mpps, failed {}",
                x.v4_to_v6_mpps, x.v6_to_v4_mpps, x.failed
            )?;
        }
        if !self.nat64.is_empty() {
            writeln!(
                f,
                "\nNAT64, stateful RFC 6146 (64 B frames: IPv6/UDP 50 B out, IPv4/UDP 46 B replies; established; median of rounds)"
            )?;
            writeln!(
                f,
                "  {:>8} {:>7} {:>10} {:>10} {:>8} {:>8} {:>14}  target",
                "flows",
                "workers",
                "6->4 Mpps",
                "4->6 Mpps",
                "speed-up",
                "dropped",
                "verified/wrong",
            )?;
            let one = |flows: usize| {
                self.nat64
                    .iter()
                    .find(|r| r.flows == flows && r.workers == 1)
                    .map_or(0.0, |r| r.v6_to_v4_mpps + r.v4_to_v6_mpps)
            };
            for r in &self.nat64 {
                let base = one(r.flows);
                let speedup = if base > 0.0 {
                    format!("{:.2}x", (r.v6_to_v4_mpps + r.v4_to_v6_mpps) / base)
                } else {
                    "-".into()
                };
                let target = if r.workers == 1 {
                    let t = self.nat64_target_mpps;
                    let mark = |x: f64| if x >= t { "met" } else { "below" };
                    format!(
                        "≥{t:.0} Mpps: 6->4 {:.0}% ({}), 4->6 {:.0}% ({})",
                        100.0 * r.v6_to_v4_mpps / t,
                        mark(r.v6_to_v4_mpps),
                        100.0 * r.v4_to_v6_mpps / t,
                        mark(r.v4_to_v6_mpps)
                    )
                } else {
                    String::new()
                };
                writeln!(
                    f,
                    "  {:>8} {:>7} {:>10.2} {:>10.2} {:>8} {:>8} {:>14}  {}",
                    r.flows,
                    r.workers,
                    r.v6_to_v4_mpps,
                    r.v4_to_v6_mpps,
                    speedup,
                    r.dropped,
                    format!("{}/{}", r.verified, r.verify_failures),
                    target
                )?;
            }
        }
        if let Some(c) = &self.clat {
            writeln!(
                f,
                "\nCLAT, stateless RFC 6877 (engine::siit::Siit, EAM 10/8 + PLAT /96; 1 worker, {} flows, 64 B frames)",
                c.flows
            )?;
            writeln!(
                f,
                "  IPv4 -> IPv6 {:.2} Mpps, IPv6 -> IPv4 {:.2} Mpps, dropped {}, verified/wrong {}/{}",
                c.v4_to_v6_mpps, c.v6_to_v4_mpps, c.dropped, c.verified, c.verify_failures
            )?;
        }
        if !self.ila.is_empty() {
            writeln!(
                f,
                "\nILA, SIR -> ILA (1 worker, 64 B IPv6/UDP, adjust-transport checksums)"
            )?;
            writeln!(f, "  {:>9} {:>8} {:>8}", "mappings", "Mpps", "failed")?;
            for r in &self.ila {
                writeln!(f, "  {:>9} {:>8.2} {:>8}", r.mappings, r.mpps, r.failed)?;
            }
        }
        write!(
            f,
            "\nVerified {} sampled outputs by full recompute: {} wrong",
            self.verified, self.verify_failures
        )
    }
}
