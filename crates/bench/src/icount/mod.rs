//! Instructions per packet: a deterministic cost figure for each mode's fast path
//! (`quicknat-bench --icount`), and the regression check against a committed baseline
//! (`--baseline FILE`, `scripts/icount_check.sh`).
//!
//! Timings on shared VMs vary 10-25% from run to run; the number of instructions a packet
//! executes does not. Each [workload](workloads) runs in a child process of this binary
//! under `valgrind --tool=callgrind`, which counts only inside the measured loop
//! (`--collect-atstart=no --toggle-collect=*icount_measured_loop*`), twice: with `n1` and
//! `n2` packets. The figure is `(I2 - I1) / (n2 - n1)`, so the set-up and the loop's
//! entry and exit cancel. The child fixes its hash and port keys
//! ([`conntrack::siphash::predictable_keys_for_benchmarks`]) and uses a fixed clock and
//! packet order, so two runs execute the same instructions.
//!
//! The counts depend on codegen: a baseline only compares with a release build by the
//! same rustc (recorded in it; another rustc makes the check skip, not fail), and to a
//! lesser degree with the C library's `memcpy` variant, which it picks by CPU.

pub mod workloads;

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use workloads::{packet_counts, workload, Workload, KEY_SEED, WORKLOADS};

/// A figure may grow this much over the baseline before the check fails (5%).
pub const GROW_LIMIT: f64 = 1.05;
/// A figure that shrank below this ratio asks for a new baseline.
pub const SHRINK_NOTE: f64 = 0.95;
/// The option that runs one workload in the measured child: `--icount-child NAME:N`.
pub const CHILD_FLAG: &str = "--icount-child";

/// The rustc that compiled this binary (`rustc --version`).
pub fn rustc_version() -> &'static str {
    env!("QUICKNAT_BENCH_RUSTC")
}

/// The optimisation level and profile this binary was built with (`3 release`).
pub fn build_profile() -> String {
    format!(
        "opt-level {} ({})",
        env!("QUICKNAT_BENCH_OPT_LEVEL"),
        env!("QUICKNAT_BENCH_PROFILE")
    )
}

/// Instructions per packet of every workload, and what they were measured with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IcountReport {
    /// The compiler of the measured binary: counts compare only under the same one.
    pub rustc: String,
    /// Its optimisation level and profile.
    pub build: String,
    /// `valgrind --version`.
    pub valgrind: String,
    /// The CPU (the C library picks its `memcpy` by CPU features).
    pub cpu: String,
    /// How the figures are made.
    pub method: String,
    /// One row per workload.
    pub rows: Vec<IcountRow>,
}

/// One workload's figure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IcountRow {
    /// The workload's name.
    pub workload: String,
    /// What one packet of it is.
    pub what: String,
    /// Instructions per packet: `(I2 - I1) / (n2 - n1)`.
    pub instructions_per_packet: f64,
    /// The packet counts of the two runs (`n1`, `n2`).
    pub packets: [u64; 2],
    /// The instructions callgrind counted in the measured loop of each run.
    pub instructions: [u64; 2],
}

impl IcountReport {
    /// The row of `workload`.
    pub fn row(&self, workload: &str) -> Option<&IcountRow> {
        self.rows.iter().find(|r| r.workload == workload)
    }

    /// Pretty JSON (the baseline file's format).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

impl fmt::Display for IcountReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Instructions per packet (callgrind, {}, {}; {})",
            self.rustc, self.build, self.valgrind
        )?;
        writeln!(f, "{:<11} {:>10}  what", "workload", "instr/pkt")?;
        for r in &self.rows {
            writeln!(
                f,
                "{:<11} {:>10.1}  {}",
                r.workload, r.instructions_per_packet, r.what
            )?;
        }
        Ok(())
    }
}

/// The measured child (`--icount-child NAME:N`): fixes the keys, builds the workload and
/// sends `N` packets through it; the line it returns says how many were forwarded.
pub fn child(spec: &str) -> Result<String, String> {
    // First, before anything draws a key.
    if !conntrack::siphash::predictable_keys_for_benchmarks(KEY_SEED) {
        return Err("a key was drawn before the workload could fix them".into());
    }
    let (name, n) = spec
        .split_once(':')
        .ok_or_else(|| format!("{CHILD_FLAG} wants NAME:PACKETS, not {spec:?}"))?;
    let w = workload(name).ok_or_else(|| format!("no workload {name:?}"))?;
    let n: usize = n
        .parse()
        .map_err(|_| format!("{CHILD_FLAG}: {n:?} is not a packet count"))?;
    let fwd = workloads::run(w, n)?;
    if fwd != n as u64 {
        return Err(format!(
            "{name}: {fwd} of {n} packets forwarded (the figure would measure drops)"
        ));
    }
    Ok(format!("forwarded {fwd}"))
}

/// First line of a command's output, or "unknown".
fn first_line(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "unknown".into())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The events callgrind counted (`totals:`, else `summary:`) in an output file.
pub fn parse_totals(text: &str) -> Option<u64> {
    let find = |tag: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(tag))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    find("totals:").or_else(|| find("summary:"))
}

/// Runs `exe --icount-child NAME:n` under callgrind; returns the instructions counted in
/// the measured loop.
fn callgrind(exe: &Path, dir: &Path, w: Workload, n: usize) -> Result<u64, String> {
    let out = dir.join(format!("{}-{n}.callgrind", w.name));
    let run = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg("--collect-atstart=no")
        .arg("--toggle-collect=*icount_measured_loop*")
        .arg("--dump-instr=no")
        .arg("--dump-line=no")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg("-q")
        .arg(exe)
        .arg(CHILD_FLAG)
        .arg(format!("{}:{n}", w.name))
        .output()
        .map_err(|e| format!("valgrind: {e} (install valgrind)"))?;
    let stdout = String::from_utf8_lossy(&run.stdout);
    if !run.status.success() || !stdout.contains(&format!("forwarded {n}")) {
        return Err(format!(
            "{} with {n} packets under callgrind: {}{}",
            w.name,
            run.status,
            String::from_utf8_lossy(&run.stderr)
        ));
    }
    let text = std::fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let total = parse_totals(&text).ok_or_else(|| format!("{}: no totals", out.display()))?;
    if total == 0 {
        return Err(format!(
            "{}: callgrind counted nothing (was the measured loop inlined or renamed?)",
            w.name
        ));
    }
    Ok(total)
}

/// Measures the workloads named in `only` (all: `None`) with `exe` as the child, up to
/// `jobs` valgrind processes at a time. Progress goes to stderr.
pub fn measure(exe: &Path, only: Option<&[String]>, jobs: usize) -> Result<IcountReport, String> {
    if env!("QUICKNAT_BENCH_OPT_LEVEL") == "0" {
        return Err(
            "instruction counts of an unoptimised build mean nothing: build with --release".into(),
        );
    }
    let chosen: Vec<Workload> = match only {
        None => WORKLOADS.to_vec(),
        Some(names) => names
            .iter()
            .map(|n| workload(n).ok_or_else(|| format!("no workload {n:?}")))
            .collect::<Result<_, _>>()?,
    };
    let dir = std::env::temp_dir().join(format!("quicknat-icount-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Two runs per workload, in any order, on `jobs` threads.
    let runs: Vec<(Workload, usize)> = chosen
        .iter()
        .flat_map(|&w| {
            let (n1, n2) = packet_counts(w);
            [(w, n1), (w, n2)]
        })
        .collect();
    let results: Mutex<Vec<Option<Result<u64, String>>>> = Mutex::new(vec![None; runs.len()]);
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, runs.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(w, n)) = runs.get(i) else { break };
                eprintln!("icount: {} with {n} packets", w.name);
                let r = callgrind(exe, &dir, w, n);
                if let Ok(mut all) = results.lock() {
                    all[i] = Some(r);
                }
            });
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
    let results = results
        .into_inner()
        .map_err(|_| "a run panicked".to_owned())?;
    let mut counts = results.into_iter();
    let mut rows = Vec::new();
    for w in chosen {
        let (n1, n2) = packet_counts(w);
        let mut take = || counts.next().flatten().unwrap_or(Err("not run".into()));
        let (i1, i2) = (take()?, take()?);
        rows.push(IcountRow {
            workload: w.name.into(),
            what: w.what.into(),
            instructions_per_packet: (i2 as f64 - i1 as f64) / (n2 - n1) as f64,
            packets: [n1 as u64, n2 as u64],
            instructions: [i1, i2],
        });
    }
    Ok(IcountReport {
        rustc: rustc_version().into(),
        build: build_profile(),
        valgrind: first_line("valgrind", &["--version"]),
        cpu: cpu_model(),
        method: "callgrind Ir inside the measured loop, (I2 - I1) / (n2 - n1); keys fixed, \
                 one thread, fixed clock; per packet: the copy into the receive buffer and \
                 the worker's process(), per 32: begin_batch and quiescent"
            .into(),
        rows,
    })
}

/// Why a baseline cannot be compared with this build (`None`: it can).
pub fn skip_reason(base: &IcountReport) -> Option<String> {
    (base.rustc != rustc_version()).then(|| {
        format!(
            "icount check skipped: the baseline was measured with {:?}, this build uses {:?} \
             (instruction counts depend on codegen); `scripts/icount_check.sh --update` \
             records a baseline for this compiler",
            base.rustc,
            rustc_version()
        )
    })
}

/// One workload against the baseline.
#[derive(Clone, Debug, PartialEq)]
pub struct CmpRow {
    /// The workload.
    pub workload: String,
    /// Baseline figure (`None`: a workload the baseline does not have).
    pub base: Option<f64>,
    /// Figure now.
    pub now: f64,
}

impl CmpRow {
    /// now / baseline.
    pub fn ratio(&self) -> Option<f64> {
        self.base.filter(|b| *b > 0.0).map(|b| self.now / b)
    }
}

/// The figures now against a baseline.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// One row per workload measured.
    pub rows: Vec<CmpRow>,
    /// Baseline workloads not measured now.
    pub missing: Vec<String>,
}

impl Comparison {
    /// Compares `now` with `base`.
    pub fn new(base: &IcountReport, now: &IcountReport) -> Self {
        let rows = now
            .rows
            .iter()
            .map(|r| CmpRow {
                workload: r.workload.clone(),
                base: base.row(&r.workload).map(|b| b.instructions_per_packet),
                now: r.instructions_per_packet,
            })
            .collect();
        let missing = base
            .rows
            .iter()
            .filter(|b| now.row(&b.workload).is_none())
            .map(|b| b.workload.clone())
            .collect();
        Comparison { rows, missing }
    }

    /// The workloads that grew more than [`GROW_LIMIT`].
    pub fn grown(&self) -> Vec<&CmpRow> {
        self.rows
            .iter()
            .filter(|r| r.ratio().is_some_and(|x| x > GROW_LIMIT))
            .collect()
    }

    /// The workloads that shrank below [`SHRINK_NOTE`].
    pub fn shrunk(&self) -> Vec<&CmpRow> {
        self.rows
            .iter()
            .filter(|r| r.ratio().is_some_and(|x| x < SHRINK_NOTE))
            .collect()
    }

    /// Whether the check passes (nothing grew more than 5%).
    pub fn passes(&self) -> bool {
        self.grown().is_empty()
    }
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<11} {:>10} {:>10} {:>7}",
            "workload", "baseline", "now", "ratio"
        )?;
        for r in &self.rows {
            let (base, ratio) = match (r.base, r.ratio()) {
                (Some(b), Some(x)) => (format!("{b:.1}"), format!("{x:.3}")),
                _ => ("-".into(), "new".into()),
            };
            let flag = match r.ratio() {
                Some(x) if x > GROW_LIMIT => "  GREW",
                Some(x) if x < SHRINK_NOTE => "  shrank",
                _ => "",
            };
            writeln!(
                f,
                "{:<11} {:>10} {:>10.1} {:>7}{flag}",
                r.workload, base, r.now, ratio
            )?;
        }
        for r in self.grown() {
            let pct = (r.ratio().unwrap_or(1.0) - 1.0) * 100.0;
            writeln!(
                f,
                "FAIL: {} grew {pct:.1}% (limit {:.0}%): find the change that added the \
                 instructions, or, if it is worth them, update the baseline \
                 (scripts/icount_check.sh --update) and say why in the commit",
                r.workload,
                (GROW_LIMIT - 1.0) * 100.0
            )?;
        }
        for r in self.shrunk() {
            let pct = (1.0 - r.ratio().unwrap_or(1.0)) * 100.0;
            writeln!(
                f,
                "note: {} shrank {pct:.1}%: update the baseline (scripts/icount_check.sh \
                 --update) so the gain is kept",
                r.workload
            )?;
        }
        for r in self.rows.iter().filter(|r| r.base.is_none()) {
            writeln!(
                f,
                "note: {} is not in the baseline (scripts/icount_check.sh --update adds it)",
                r.workload
            )?;
        }
        for m in &self.missing {
            writeln!(f, "note: baseline workload {m} was not measured")?;
        }
        Ok(())
    }
}

/// What `quicknat-bench --icount` was asked.
#[derive(Clone, Debug, Default)]
pub struct IcountArgs {
    /// Print JSON instead of a table.
    pub json: bool,
    /// Compare with (or, with `update`, write) this baseline.
    pub baseline: Option<PathBuf>,
    /// Write the figures to `baseline`.
    pub update: bool,
    /// Only these workloads.
    pub only: Option<Vec<String>>,
}

/// `quicknat-bench --icount`: measures, prints, and compares with or updates the
/// baseline. `Ok(false)`: the check failed (a figure grew more than 5%).
pub fn main(args: &IcountArgs) -> Result<bool, String> {
    let base = match (&args.baseline, args.update) {
        (Some(p), false) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            let base: IcountReport =
                serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?;
            if let Some(why) = skip_reason(&base) {
                println!("{why}");
                return Ok(true);
            }
            Some(base)
        }
        (None, true) => return Err("--update needs --baseline FILE".into()),
        _ => None,
    };
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let now = measure(&exe, args.only.as_deref(), jobs)?;
    if args.json {
        println!("{}", now.to_json());
    } else {
        print!("{now}");
    }
    if let (Some(p), true) = (&args.baseline, args.update) {
        std::fs::write(p, now.to_json() + "\n").map_err(|e| format!("{}: {e}", p.display()))?;
        println!("icount: baseline written to {}", p.display());
        return Ok(true);
    }
    let Some(base) = base else {
        return Ok(true);
    };
    let mut cmp = Comparison::new(&base, &now);
    if args.only.is_some() {
        cmp.missing.clear();
    }
    println!("\nagainst the baseline ({}):", base.rustc);
    print!("{cmp}");
    Ok(cmp.passes())
}

#[cfg(test)]
mod tests;
