//! The baseline comparison and the callgrind output parser.

use super::*;

fn report(rustc: &str, rows: &[(&str, f64)]) -> IcountReport {
    IcountReport {
        rustc: rustc.into(),
        build: "opt-level 3 (release)".into(),
        valgrind: "valgrind-3.19.0".into(),
        cpu: "test".into(),
        method: "test".into(),
        rows: rows
            .iter()
            .map(|&(w, x)| IcountRow {
                workload: w.into(),
                what: String::new(),
                instructions_per_packet: x,
                packets: [1024, 3072],
                instructions: [0, 0],
            })
            .collect(),
    }
}

/// More than 5% growth fails and is named; 5% exactly passes; a shrink of more than 5%
/// passes with a note asking for a new baseline.
#[test]
fn growth_over_five_percent_fails_and_shrink_is_noted() {
    let base = report("r", &[("a", 100.0), ("b", 200.0), ("c", 300.0)]);
    let now = report("r", &[("a", 105.0), ("b", 210.2), ("c", 280.0)]);
    let cmp = Comparison::new(&base, &now);
    assert!(!cmp.passes());
    let grown: Vec<_> = cmp.grown().iter().map(|r| r.workload.as_str()).collect();
    assert_eq!(grown, ["b"]);
    let shrunk: Vec<_> = cmp.shrunk().iter().map(|r| r.workload.as_str()).collect();
    assert_eq!(shrunk, ["c"]);
    let text = cmp.to_string();
    assert!(text.contains("FAIL: b grew 5.1%"), "{text}");
    assert!(text.contains("note: c shrank 6.7%"), "{text}");
    assert!(text.contains("--update"), "{text}");
    // The table: baseline, now and ratio of each.
    assert!(
        text.lines()
            .any(|l| l.starts_with("a ") && l.contains("100.0") && l.contains("1.050")),
        "{text}"
    );

    let same = Comparison::new(&base, &base);
    assert!(same.passes() && same.shrunk().is_empty());
}

/// A workload the baseline lacks is reported, not failed; one measured no more is noted.
#[test]
fn new_and_missing_workloads_are_notes() {
    let base = report("r", &[("a", 100.0), ("gone", 50.0)]);
    let now = report("r", &[("a", 100.0), ("fresh", 70.0)]);
    let cmp = Comparison::new(&base, &now);
    assert!(cmp.passes());
    let text = cmp.to_string();
    assert!(text.contains("fresh is not in the baseline"), "{text}");
    assert!(
        text.contains("baseline workload gone was not measured"),
        "{text}"
    );
}

/// A baseline from another rustc skips the check, saying so; the same rustc compares.
#[test]
fn another_rustc_skips_with_a_message() {
    let other = report("rustc 0.0.1 (old)", &[]);
    let why = skip_reason(&other).expect("skipped");
    assert!(
        why.contains("skipped") && why.contains("rustc 0.0.1"),
        "{why}"
    );
    assert!(skip_reason(&report(rustc_version(), &[])).is_none());
}

/// The baseline file round-trips through its JSON.
#[test]
fn report_round_trips_through_json() {
    let r = report("r", &[("a", 123.25)]);
    let back: IcountReport = serde_json::from_str(&r.to_json()).expect("parses");
    assert_eq!(back, r);
}

/// callgrind's output: `totals:` wins, `summary:` otherwise, nothing without either.
#[test]
fn parses_callgrind_totals() {
    let out = "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nsummary: 4242\n\ntotals: 4243\n";
    assert_eq!(parse_totals(out), Some(4243));
    assert_eq!(parse_totals("events: Ir\nsummary: 17\n"), Some(17));
    assert_eq!(parse_totals("events: Ir\n"), None);
}

/// The committed baseline parses, names every workload, and was made by a release build.
#[test]
fn committed_baseline_covers_every_workload() {
    let text = include_str!("../../icount-baseline.json");
    let base: IcountReport = serde_json::from_str(text).expect("baseline parses");
    for w in WORKLOADS {
        let r = base
            .row(w.name)
            .unwrap_or_else(|| panic!("{} missing", w.name));
        assert!(r.instructions_per_packet > 0.0, "{r:?}");
        let (n1, n2) = packet_counts(w);
        assert_eq!(r.packets, [n1 as u64, n2 as u64], "{}", w.name);
    }
    assert!(base.build.starts_with("opt-level 3"), "{}", base.build);
}
