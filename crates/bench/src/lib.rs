//! quicknat's benchmarks: the in-memory benchmark (`quicknat-bench`) and, beside it, the
//! criterion micro-benchmarks (`benches/hot.rs`) and a profiling loop
//! (`examples/hotloop.rs`).
//!
//! The in-memory benchmark builds realistic traffic (both directions, TCP and UDP, a given
//! number of flows and frame-size mix), runs it through the real engine on N worker
//! threads with the reaper beside them, verifies a sample of outputs by full checksum
//! recompute, and reports the tables operators ask for: frame size, cores, flows, rules,
//! connection setup/teardown, table memory, per-core share, and behaviour under a SYN
//! flood. No network: it measures the engine, not the I/O.
//!
//! The engine is driven as the runtime drives it: [`Mode::worker`](engine::Mode::worker)
//! hands out a worker, [`ModeWorker::process`](engine::ModeWorker::process) decides each
//! packet, handed in as a [`Frame`](engine::Frame) with `Egress::default()` (links without
//! MTUs or addresses). The only engine calls that bypass the trait are cells that measure a
//! lower layer on purpose (the rule table's hashed vs linear lookup, `xlat::siit` alone);
//! each says so where it does.
//!
//! Every figure is measured on the machine it runs on; nothing here is a constant.

pub mod balance;
mod cells;
/// `--csit`: NAT44 profiles after FD.io CSIT's NAT44ed methodology.
pub mod csit;
/// `--flows`: the flows cells alone, alternating, medians and ratios.
pub mod flows;
/// Hash flooding: SYNs crafted against an unkeyed session hash vs random ones.
pub mod hashflood;
/// Instructions per packet under callgrind, and the check against the committed baseline.
pub mod icount;
pub mod listing;
pub mod nat64;
/// `--plot DIR`: SVG charts of the bench, CSIT and lab figures.
pub mod plot;
mod report;
pub mod rss;
mod run;
pub mod stats;
pub mod traffic;

use std::time::Duration;

use engine::nat44::rules::{linear_lookup, RuleTable};
pub use report::{BenchReport, Machine};
pub use run::{measure, measure_only, Dispatch, Driver, Measurement};
pub use stats::median;
use traffic::{prepare, FrameMix};

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Short cells and small tables (for CI smoke runs): seconds instead of minutes.
    pub quick: bool,
    /// Highest worker count for the cores table (default: the machine's cores).
    pub max_workers: usize,
    /// Seconds per timed cell.
    pub seconds: f64,
    /// Repetitions of the cores table (alternating worker counts; medians reported).
    pub rounds: usize,
}

impl BenchOptions {
    /// Defaults: every core, 2 s per cell, 3 rounds; `quick`: 0.2 s, 1 round, small tables.
    pub fn new(quick: bool) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self {
            quick,
            max_workers: cores,
            seconds: if quick { 0.2 } else { 2.0 },
            rounds: if quick { 1 } else { 3 },
        }
    }

    /// The duration of one timed cell.
    pub fn cell(&self) -> Duration {
        Duration::from_secs_f64(self.seconds.max(0.05))
    }
}

/// Runs every table. Progress goes to stderr.
pub fn run_all(opts: &BenchOptions) -> BenchReport {
    let mut r = BenchReport::new(opts);
    let cell = opts.cell();
    let flows_main = 8192;
    let rules_main = 1000;

    eprintln!("bench: frame sizes (1 worker, {flows_main} flows, {rules_main} rules)");
    for mix in [
        FrameMix::Fixed(64),
        FrameMix::Fixed(78),
        FrameMix::Fixed(594),
        FrameMix::Fixed(1518),
        FrameMix::Imix,
    ] {
        let prep = prepare(flows_main, mix, rules_main, 1);
        let m = measure(&prep, 1, Dispatch::Rss, cell);
        r.add_frame(mix, &m);
    }

    eprintln!(
        "bench: cores 1..{} ({} rounds, alternating)",
        opts.max_workers, opts.rounds
    );
    let prep = prepare(
        flows_main,
        FrameMix::Fixed(64),
        rules_main,
        opts.max_workers,
    );
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); opts.max_workers];
    for _ in 0..opts.rounds {
        for w in 1..=opts.max_workers {
            let m = measure(&prep, w, Dispatch::Rss, cell);
            r.absorb(&m);
            per[w - 1].push(m.mpps);
        }
    }
    r.cores = per.into_iter().map(median).collect();
    drop(prep);

    let big = if opts.quick { 131_072 } else { 1_048_576 };
    eprintln!("bench: flows 1, 32, 8192, {big} (1 worker, 64 B)");
    for flows in [1, 32, 8192, big] {
        let prep = prepare(flows, FrameMix::Fixed(64), rules_main, 1);
        let m = measure(&prep, 1, Dispatch::Rss, cell);
        r.add_flows(flows, &m, prep.shared.table_bytes());
    }

    let rule_counts: &[usize] = if opts.quick {
        &[1, 1000, 10_000]
    } else {
        &[1, 1000, 10_000, 100_000]
    };
    eprintln!(
        "bench: rules {rule_counts:?} (1 worker, 8192 flows, 64 B; lookups hashed vs linear)"
    );
    for &rules in rule_counts {
        let prep = prepare(flows_main, FrameMix::Fixed(64), rules, 1);
        let m = measure(&prep, 1, Dispatch::Rss, cell);
        // A lower layer on purpose: the rule table's hashed search against a linear
        // scan, without the rest of the engine around it.
        let cfg = prep.shared.config();
        let prefixes: Vec<_> = cfg.rules.iter().map(|x| x.inside).collect();
        let table = RuleTable::new(prefixes.iter());
        let addrs: Vec<_> = (0..flows_main).map(|i| traffic::inside_of(i).0).collect();
        let hashed = cells::lookups_per_sec(&addrs, cell, |a| table.lookup(a));
        let linear = cells::lookups_per_sec(&addrs, cell / 4, |a| linear_lookup(&prefixes, a));
        r.add_rules(rules, &m, hashed, linear, table.probes());
    }

    eprintln!("bench: connection setup, teardown and table capacity");
    r.connections = cells::connections(opts);

    eprintln!("bench: per-core share of 32 flows (IPv4, IPv6)");
    r.share = cells::share();

    let ila_counts: &[usize] = if opts.quick {
        &[1000, 100_000]
    } else {
        &[1000, 100_000, 1_000_000]
    };
    eprintln!("bench: ILA SIR->ILA with {ila_counts:?} mappings (1 worker, 64 B)");
    r.ila = ila_counts.iter().map(|&m| cells::ila(m, cell)).collect();

    eprintln!("bench: stateless SIIT (RFC 7915) both directions (1 worker, 64 B)");
    r.siit = Some(cells::siit(cell));

    let multi = opts.max_workers.max(1);
    eprintln!(
        "bench: NAT64 8192 flows on 1 and {multi} workers, {big} flows on 1 (64 B, {} rounds); CLAT 8192 flows",
        opts.rounds
    );
    let rows = nat64::nat64_rows(opts, big);
    let clat = nat64::clat_row(opts);
    r.add_nat64(rows, clat);

    eprintln!("bench: established traffic under a SYN flood");
    r.syn_flood = Some(cells::syn_flood(cell, 400_000));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::Direction;

    /// Two workers replay a small mixed-size workload: every packet is forwarded, the
    /// sampled outputs verify, and both workers get work.
    #[test]
    fn replay_on_two_workers_verifies_clean() {
        let prep = prepare(512, FrameMix::Imix, 10, 2);
        let m = measure(&prep, 2, Dispatch::Rss, Duration::from_millis(150));
        assert!(m.packets > 1000, "{m:?}");
        assert_eq!(
            m.forwarded, m.packets,
            "established traffic is always forwarded"
        );
        assert!(m.verified > 0);
        assert_eq!(m.verify_failures, 0);
        assert!(m.per_worker.iter().all(|n| *n > 0));
    }

    #[test]
    fn balanced_dispatch_spreads_32_flows_exactly() {
        for row in cells::share() {
            assert!((row.balanced_ratio - 1.0).abs() < 1e-9, "{row:?}");
        }
    }

    /// Every SIIT benchmark packet translates, both ways.
    #[test]
    fn siit_cell_translates_everything() {
        let row = cells::siit(Duration::from_millis(20));
        assert_eq!(row.failed, 0);
        assert!(row.v4_to_v6_mpps > 0.0 && row.v6_to_v4_mpps > 0.0);
    }

    /// NAT64 and CLAT replay: every packet of both directions is forwarded, sampled
    /// outputs (IPv4 and IPv6) verify, and two workers both get work.
    #[test]
    fn nat64_and_clat_replay_verifies_clean() {
        let prep = nat64::prepare_nat64(512, 2);
        assert_eq!(prep.packets.len(), 1024, "every flow was established");
        for (workers, dir) in [(1, Direction::Outbound), (2, Direction::Inbound)] {
            let m = measure_only(
                &prep,
                workers,
                Dispatch::Rss,
                Duration::from_millis(100),
                Some(dir),
            );
            assert!(m.packets > 1000, "{m:?}");
            assert_eq!(m.forwarded, m.packets, "{dir:?}");
            assert!(m.verified > 0);
            assert_eq!(m.verify_failures, 0, "{dir:?}");
            assert!(m.per_worker.iter().all(|n| *n > 0));
        }
        let clat = nat64::prepare_clat(512);
        let m = measure(&clat, 1, Dispatch::Rss, Duration::from_millis(100));
        assert_eq!(m.forwarded, m.packets);
        assert!(m.verified > 0);
        assert_eq!(m.verify_failures, 0);
    }

    /// A wrong translation is caught: an IPv6 output checked against the wrong host.
    #[test]
    fn verify_catches_a_wrong_ipv6_endpoint() {
        let prep = nat64::prepare_nat64(4, 1);
        let p = prep.packets[0];
        let bytes = &prep.bytes[p.off as usize..p.off as usize + p.len as usize];
        // A pristine outbound IPv6 packet is not the IPv4 the engine must produce, and an
        // inbound IPv4 reply is not the expected IPv6 one.
        assert!(!traffic::verify(bytes, &p, prep.v6_of));
    }

    /// Every ILA benchmark packet translates (a mapping exists for each identifier).
    #[test]
    fn ila_cell_translates_everything() {
        let row = cells::ila(1000, Duration::from_millis(20));
        assert_eq!(row.failed, 0);
        assert!(row.mpps > 0.0);
    }

    /// New flows beyond the table's capacity are refused; established ones never are.
    #[test]
    fn syn_flood_never_starves_established_traffic() {
        let s = cells::syn_flood(Duration::from_millis(20), 20_000);
        assert_eq!(s.established_forwarded, s.established_sent);
        assert!(s.flood_table_full > 0, "{s:?}");
        assert!(s.flood_admitted > 0);
    }
}
