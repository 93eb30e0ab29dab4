//! `quicknat-bench`: the in-memory benchmark of quicknat's engine. Prints tables or JSON;
//! fails when a sampled output does not verify.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

/// Measure the NAT44 engine in memory: frame sizes, cores, flows, rules, connection
/// setup/teardown, table memory, per-core share, SYN flood (and NAT64, CLAT, SIIT, ILA).
#[derive(Debug, Parser)]
#[command(name = "quicknat-bench", version, about)]
struct Cli {
    /// Short cells and small tables (a smoke run, seconds instead of minutes).
    #[arg(long)]
    quick: bool,
    /// Print the report as JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Highest worker count for the cores table (default: every core).
    #[arg(long, value_name = "N")]
    workers: Option<usize>,
    /// Seconds per timed cell (default 2, quick 0.2).
    #[arg(long, value_name = "S")]
    seconds: Option<f64>,
    /// Repetitions of the cores table; medians are reported (default 3, quick 1).
    #[arg(long, value_name = "N")]
    rounds: Option<usize>,
    /// Only the control-API measurement: a worker forwarding beside a lister streaming
    /// this many sessions as JSON lines (alternating windows; e.g. 1000000).
    #[arg(long, value_name = "SESSIONS")]
    listing: Option<usize>,
    // -- instructions per packet --
    /// Only the instruction counts: instructions per packet of each mode's fast path and
    /// first packet, under `valgrind --tool=callgrind` (deterministic; a release build).
    #[arg(long)]
    icount: bool,
    /// With --icount: compare with this baseline file and fail when a figure grew more
    /// than 5% (skipped when the baseline's rustc differs from this build's).
    #[arg(long, value_name = "FILE", requires = "icount")]
    baseline: Option<std::path::PathBuf>,
    /// With --icount --baseline: write the figures measured now to the baseline file.
    #[arg(long, requires = "baseline")]
    update: bool,
    /// With --icount: only these workloads (comma-separated names, e.g. nat44-out,ila-in).
    #[arg(long, value_name = "NAMES", value_delimiter = ',', requires = "icount")]
    only: Option<Vec<String>>,
    /// The measured child of --icount (one workload, NAME:PACKETS; run under callgrind).
    #[arg(long = "icount-child", value_name = "NAME:PACKETS", hide = true)]
    icount_child: Option<String>,
    /// Only the flows cells (NAT44, 1 worker, 64 B) for these flow counts, alternating
    /// within each round, medians over `--rounds` (default 5) and ratios to the first
    /// count (e.g. 8192,1048576).
    #[arg(long, value_name = "N,M,...", value_delimiter = ',')]
    flows: Option<Vec<usize>>,
    // -- CSIT profiles and plots --
    /// Only the CSIT NAT44ed profiles: TPUT (Mpps on established sessions) and CPS
    /// (connections set up and torn down per second), UDP and TCP, 4k..4M sessions at 63
    /// ports per inside address and sharing ratio 1024, one core (quick: 4k..64k).
    #[arg(long)]
    csit: bool,
    /// With --csit: also the 16M scale (skipped when memory does not allow).
    #[arg(long, requires = "csit")]
    full: bool,
    /// With --csit: only these scales (comma-separated CSIT names: 4k,16k,64k,256k,1M,4M,16M).
    #[arg(long, value_name = "NAMES", value_delimiter = ',', requires = "csit")]
    scales: Option<Vec<String>>,
    /// Write SVG charts of what was measured into this directory (created if missing).
    #[arg(long, value_name = "DIR")]
    plot: Option<std::path::PathBuf>,
}

fn main() -> ExitCode {
    match run(&Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the benchmark and prints tables or JSON.
fn run(cli: &Cli) -> anyhow::Result<()> {
    // Instructions per packet.
    if let Some(spec) = &cli.icount_child {
        println!(
            "{}",
            bench::icount::child(spec).map_err(anyhow::Error::msg)?
        );
        return Ok(());
    }
    if cli.icount {
        let args = bench::icount::IcountArgs {
            json: cli.json,
            baseline: cli.baseline.clone(),
            update: cli.update,
            only: cli.only.clone(),
        };
        let passed = bench::icount::main(&args).map_err(anyhow::Error::msg)?;
        anyhow::ensure!(
            passed,
            "instructions per packet grew more than 5% (table above)"
        );
        return Ok(());
    }
    // CSIT profiles.
    if cli.csit {
        return csit(cli);
    }
    let mut opts = bench::BenchOptions::new(cli.quick);
    if let Some(w) = cli.workers {
        anyhow::ensure!(
            (1..=256).contains(&w),
            "--workers must be between 1 and 256"
        );
        opts.max_workers = w;
    }
    if let Some(s) = cli.seconds {
        anyhow::ensure!(s > 0.0 && s <= 600.0, "--seconds must be between 0 and 600");
        opts.seconds = s;
    }
    if let Some(r) = cli.rounds {
        anyhow::ensure!((1..=100).contains(&r), "--rounds must be between 1 and 100");
        opts.rounds = r;
    }
    if let Some(n) = cli.listing {
        anyhow::ensure!(
            (1..=16_000_000).contains(&n),
            "--listing must be between 1 and 16000000"
        );
        let window = Duration::from_secs_f64(cli.seconds.unwrap_or(2.0));
        print!(
            "{}",
            bench::listing::run(n, cli.rounds.unwrap_or(5), window)
        );
        return Ok(());
    }
    if let Some(flows) = &cli.flows {
        anyhow::ensure!(
            flows.iter().all(|n| (1..=16_000_000).contains(n)),
            "--flows counts must be between 1 and 16000000"
        );
        let rows = bench::flows::run(flows, cli.rounds.unwrap_or(5), opts.cell());
        if cli.json {
            println!("{}", serde_json::to_string(&rows)?);
        } else {
            print!("{}", bench::flows::table(&rows));
        }
        let bad: u64 = rows.iter().map(|r| r.verify_failures).sum();
        anyhow::ensure!(bad == 0, "{bad} sampled outputs failed verification");
        return Ok(());
    }
    let report = bench::run_all(&opts);
    if cli.json {
        println!("{}", report.to_json());
    } else {
        println!("{report}");
    }
    if let Some(dir) = &cli.plot {
        for f in bench::plot::bench(dir, &report)? {
            eprintln!("bench: wrote {}", f.display());
        }
    }
    anyhow::ensure!(
        report.verify_failures == 0,
        "{} sampled outputs failed verification",
        report.verify_failures
    );
    Ok(())
}

/// `--csit`: the CSIT NAT44ed profiles, as a table or JSON, and their plots.
fn csit(cli: &Cli) -> anyhow::Result<()> {
    use bench::csit::{CsitOptions, Scale};
    let mut opts = CsitOptions::new(cli.quick, cli.full);
    if let Some(names) = &cli.scales {
        opts.scales = names
            .iter()
            .map(|n| {
                Scale::named(n).ok_or_else(|| anyhow::anyhow!("--scales: unknown scale {n:?}"))
            })
            .collect::<anyhow::Result<_>>()?;
    }
    if let Some(r) = cli.rounds {
        anyhow::ensure!((1..=100).contains(&r), "--rounds must be between 1 and 100");
        opts.rounds = r;
    }
    if let Some(s) = cli.seconds {
        anyhow::ensure!(s > 0.0 && s <= 600.0, "--seconds must be between 0 and 600");
        opts.cell = Duration::from_secs_f64(s);
    }
    let rows = bench::csit::run(&opts);
    let machine = bench::Machine::here();
    if cli.json {
        println!(
            "{}",
            serde_json::json!({ "machine": machine, "profile": "csit-nat44ed", "rows": rows })
        );
    } else {
        println!(
            "{} ({}, {} cores, {})",
            machine.date, machine.cpu, machine.cores, machine.kernel
        );
        print!("{}", bench::csit::table(&rows));
    }
    if let Some(dir) = &cli.plot {
        for f in bench::plot::csit(dir, &rows)? {
            eprintln!("bench: wrote {}", f.display());
        }
    }
    let bad: u64 = rows.iter().map(|r| r.failures).sum();
    anyhow::ensure!(bad == 0, "{bad} CSIT failures (column fail)");
    Ok(())
}
