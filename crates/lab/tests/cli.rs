//! End-to-end tests of the `quicknat-lab` binary that need no root: what an operator sees
//! when the product binary is missing or an option is wrong, and the tools' output shapes.

use std::process::{Command, Output};

fn lab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quicknat-lab"))
        .args(args)
        .output()
        .expect("run quicknat-lab")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn lab_names_the_missing_quicknat_binary_and_how_to_build_it() {
    let missing = std::env::temp_dir().join(format!(
        "quicknat-lab-cli-{}-no-quicknat",
        std::process::id()
    ));
    for topology in ["nat44", "nat64", "ila"] {
        let out = lab(&[
            "lab",
            "--topology",
            topology,
            "--quicknat",
            missing.to_str().unwrap(),
        ]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{topology}: {stderr}");
        assert!(
            stderr.starts_with("error: no quicknat binary at "),
            "{stderr}"
        );
        assert!(stderr.contains(missing.to_str().unwrap()), "{stderr}");
        assert!(
            stderr.contains("cargo build --release -p quicknat"),
            "{stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "one-line error: {stderr}");
    }
}

#[test]
fn lab_checks_its_options_before_looking_for_quicknat() {
    let out = lab(&[
        "lab",
        "--rounds",
        "0",
        "--quicknat",
        "/nonexistent/quicknat",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--rounds must be between 1 and 50"),
        "{stderr}"
    );
}

#[test]
fn lab_checks_the_flood_rate() {
    for (args, want) in [
        (
            &["--topology", "attack", "--flood-pps", "0"][..],
            "--flood-pps must be between 100 and 10000000",
        ),
        (
            &["--topology", "nat44", "--flood-pps", "80000"][..],
            "--flood-pps applies to --topology attack only",
        ),
    ] {
        let mut a = vec!["lab"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["--quicknat", "/nonexistent/quicknat"]);
        let out = lab(&a);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}

#[test]
fn lab_takes_the_xdpfast_arm_for_nat44_nat64_siit_and_ila_only() {
    // nat44, nat64, siit and ila accept it: the next check is the product binary's.
    for topology in ["nat44", "nat64", "siit", "ila"] {
        let out = lab(&[
            "lab",
            "--topology",
            topology,
            "--backends",
            "af_xdp,xdpfast",
            "--quicknat",
            "/nonexistent/quicknat",
        ]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{topology}: {stderr}");
        assert!(
            stderr.starts_with("error: no quicknat binary at "),
            "{topology}: {stderr}"
        );
    }
    let out = lab(&[
        "lab",
        "--topology",
        "attack",
        "--backends",
        "xdpfast",
        "--quicknat",
        "/nonexistent/quicknat",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("unknown backend \"xdpfast\"")
            && stderr.contains("xdpfast with --topology nat44, nat64, siit or ila"),
        "{stderr}"
    );
}

#[test]
fn gen_rejects_a_destination_without_a_port() {
    let out = lab(&["gen", "--dst", "198.51.100.2"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--dst \"198.51.100.2\": not an address and port"));
}

#[test]
fn gen_reports_json_on_loopback() {
    // Port 9 (discard) on loopback: whether anything listens or not, the report has its shape.
    let out = lab(&[
        "gen",
        "--dst",
        "127.0.0.1:9",
        "--pps",
        "1000",
        "--seconds",
        "0.2",
        "--json",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    for key in ["sent", "failed", "seconds", "pps"] {
        assert!(v[key].is_number(), "{key} in {stdout}");
    }
}

#[test]
fn soak_prints_its_loop_rate() {
    let out = lab(&["soak", "--seconds", "0.05"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let rate: f64 = text(&out.stdout).trim().parse().expect("a number");
    assert!(rate > 0.0);
}

#[test]
fn lab_takes_the_tcfast_arm_for_every_translating_topology() {
    // Its stderr when run with `--backends backends` on `topology` and no quicknat binary:
    // it must exit 1, past the backend check or at it.
    let stderr = |topology: &str, backends: &str| {
        let out = lab(&[
            "lab",
            "--topology",
            topology,
            "--backends",
            backends,
            "--quicknat",
            "/nonexistent/quicknat",
        ]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{topology}: {stderr}");
        stderr
    };
    for topology in ["nat44", "nat64", "siit", "ila"] {
        let e = stderr(topology, "af_packet,tcfast");
        assert!(
            e.starts_with("error: no quicknat binary at "),
            "{topology}: {e}"
        );
    }
    for topology in ["attack", "cluster"] {
        let e = stderr(topology, "tcfast");
        assert!(
            e.contains("unknown backend \"tcfast\"")
                && e.contains("tcfast with nat44, nat64, siit or ila"),
            "{topology}: {e}"
        );
    }
}
