//! `quicknat-bench --flows N,M,...`: only the flows cells (NAT44, 1 worker, 64 B), the
//! flow counts alternating within each round, medians over the rounds, and each count's
//! rate as a ratio to the first's — the engine's memory-speed figure (1M flows against 8k
//! in the same run).

use std::fmt::Write as _;
use std::time::Duration;

use crate::run::{measure, Dispatch};
use crate::stats::median;
use crate::traffic::{prepare, FrameMix};

/// One flow count's figures.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FlowsRow {
    /// Flows (each both directions, half TCP, half UDP).
    pub flows: usize,
    /// Mpps of each round, in order.
    pub mpps: Vec<f64>,
    /// Their median.
    pub median_mpps: f64,
    /// The median as a ratio to the first row's.
    pub ratio_to_first: f64,
    /// Sampled outputs that failed verification (must be 0).
    pub verify_failures: u64,
}

/// Measures `flows` (rules: 1000, as the main tables) for `rounds` rounds of `cell` each.
pub fn run(flows: &[usize], rounds: usize, cell: Duration) -> Vec<FlowsRow> {
    let preps: Vec<_> = flows
        .iter()
        .map(|&f| {
            eprintln!("bench: preparing {f} flows");
            prepare(f, FrameMix::Fixed(64), 1000, 1)
        })
        .collect();
    let mut mpps = vec![Vec::new(); flows.len()];
    let mut bad = vec![0u64; flows.len()];
    for r in 0..rounds {
        eprintln!("bench: flows round {}/{rounds}", r + 1);
        for (i, prep) in preps.iter().enumerate() {
            let m = measure(prep, 1, Dispatch::Rss, cell);
            mpps[i].push(m.mpps);
            bad[i] += m.verify_failures;
        }
    }
    let first = mpps.first().map_or(0.0, |v| median(v.clone()));
    flows
        .iter()
        .zip(mpps)
        .zip(bad)
        .map(|((&f, v), b)| {
            let m = median(v.clone());
            FlowsRow {
                flows: f,
                mpps: v,
                median_mpps: m,
                ratio_to_first: if first > 0.0 { m / first } else { 0.0 },
                verify_failures: b,
            }
        })
        .collect()
}

/// The rows as a table.
pub fn table(rows: &[FlowsRow]) -> String {
    let mut s = String::from("flows       median Mpps  ratio  rounds (Mpps)\n");
    for r in rows {
        let each: Vec<String> = r.mpps.iter().map(|m| format!("{m:.2}")).collect();
        let _ = writeln!(
            s,
            "{:<11} {:>11.2}  {:>5.2}  {}",
            r.flows,
            r.median_mpps,
            r.ratio_to_first,
            each.join(" ")
        );
    }
    s
}
