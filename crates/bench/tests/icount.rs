//! `quicknat-bench --icount` end to end, under valgrind (installed by scripts/test.sh; a
//! missing valgrind fails these tests, never skips them): two runs count the same
//! instructions, a figure grown more than 5% fails the check, and a baseline from another
//! rustc makes it skip.

use std::path::PathBuf;
use std::process::{Command, Output};

use bench::icount::IcountReport;

const BENCH: &str = env!("CARGO_BIN_EXE_quicknat-bench");

fn bench(args: &[&str]) -> Output {
    assert!(
        Command::new("valgrind").arg("--version").output().is_ok(),
        "valgrind is needed (apt-get install valgrind; scripts/test.sh installs it)"
    );
    Command::new(BENCH)
        .args(args)
        .output()
        .expect("quicknat-bench runs")
}

fn measure(only: &str) -> IcountReport {
    let out = bench(&["--icount", "--json", "--only", only]);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("JSON report")
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("icount-test-{}-{name}.json", std::process::id()))
}

/// Two runs of a replay and of a session-create workload count exactly the same
/// instructions (keys, clock and order are fixed in the measured child).
#[test]
fn two_runs_count_the_same_instructions() {
    let a = measure("nat44-in,nat64-new");
    let b = measure("nat44-in,nat64-new");
    assert_eq!(a.rows.len(), 2);
    for (x, y) in a.rows.iter().zip(&b.rows) {
        assert_eq!(x.instructions, y.instructions, "{}", x.workload);
        assert!(x.instructions[1] > x.instructions[0], "{x:?}");
        assert!(x.instructions_per_packet > 100.0, "{x:?}");
    }
}

/// The check against a baseline whose figure is 10% lower than now fails, naming the
/// workload; against the figures measured now it passes.
#[test]
fn a_figure_grown_more_than_five_percent_fails_the_check() {
    let now = measure("ila-out");
    let path = temp("grown");
    let mut base = now.clone();
    base.rows[0].instructions_per_packet /= 1.10;
    std::fs::write(&path, base.to_json()).expect("write baseline");
    let out = bench(&[
        "--icount",
        "--only",
        "ila-out",
        "--baseline",
        path.to_str().expect("utf-8 path"),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("FAIL: ila-out grew 10.0%"), "{text}");

    std::fs::write(&path, now.to_json()).expect("write baseline");
    let out = bench(&[
        "--icount",
        "--only",
        "ila-out",
        "--baseline",
        path.to_str().expect("utf-8 path"),
    ]);
    let _ = std::fs::remove_file(&path);
    assert!(out.status.success(), "{out:?}");
}

/// A baseline measured by another rustc: the check says why it skips and passes.
#[test]
fn a_baseline_from_another_rustc_skips() {
    let path = temp("rustc");
    let mut base = measure("ila-in");
    base.rustc = "rustc 1.0.0 (a55dd71d5 2015-05-15)".into();
    std::fs::write(&path, base.to_json()).expect("write baseline");
    let out = bench(&["--icount", "--baseline", path.to_str().expect("utf-8 path")]);
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("icount check skipped"), "{text}");
    assert!(text.contains("rustc 1.0.0"), "{text}");
}

/// Predictable keys are for this benchmark only: no source file of the product (any crate
/// but `bench`, and `conntrack` where it is defined and tested) calls the function.
#[test]
fn only_the_benchmark_fixes_the_keys() {
    fn walk(dir: &std::path::Path, hits: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir)
            .expect("readable source tree")
            .flatten()
        {
            let p = e.path();
            if p.is_dir() {
                walk(&p, hits);
            } else if p.extension().is_some_and(|x| x == "rs")
                && std::fs::read_to_string(&p)
                    .is_ok_and(|s| s.contains("predictable_keys_for_benchmarks"))
            {
                hits.push(p);
            }
        }
    }
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates/");
    let mut hits = Vec::new();
    walk(crates, &mut hits);
    let outside: Vec<_> = hits
        .iter()
        .filter(|p| {
            let rel = p.strip_prefix(crates).expect("under crates/");
            !(rel.starts_with("bench") || rel.starts_with("conntrack"))
        })
        .collect();
    assert!(outside.is_empty(), "{outside:?}");
    assert!(hits.len() >= 2, "the walk found the callers: {hits:?}");
}
