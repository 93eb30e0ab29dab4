//! End-to-end tests of the `quicknat` binary: exit codes and the messages an operator sees.

use std::path::PathBuf;
use std::process::{Command, Output};

/// A file in the temp directory, unique to this test process, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, contents: &str) -> Self {
        let path = std::env::temp_dir().join(format!("quicknat-cli-{}-{name}", std::process::id()));
        std::fs::write(&path, contents).expect("write temp file");
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn quicknat(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quicknat"))
        .args(args)
        .output()
        .expect("run quicknat")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn example_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/nat44.toml")
}

#[test]
fn check_config_accepts_the_example() {
    let example = example_path();
    let out = quicknat(&["check-config", "--config", example.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert!(stdout.contains("valid"), "{stdout}");
    assert!(
        stdout.contains("rule 1: 10.0.0.0/24 -> pool 203.0.113.0/28"),
        "{stdout}"
    );
    assert!(stdout.contains("endpoint-independent"), "{stdout}");
}

#[test]
fn check_config_defaults_to_the_built_in_example() {
    let out = quicknat(&["check-config"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stderr).contains("using built-in config examples/nat44.toml"));
}

#[test]
fn check_config_reports_file_line_and_field() {
    let bad = TempFile::new(
        "bad.toml",
        "[nat44]\n\n[[nat44.rule]]\ninside = \"10.0.0.0/24\"\npool = \"203.0.113.0/33\"\n",
    );
    let out = quicknat(&["check-config", "--config", bad.0.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    let want = format!("error: {}:5: nat44.rule[1].pool: ", bad.0.display());
    assert!(stderr.starts_with(&want), "{stderr}");
    assert!(
        stderr.contains("prefix length /33 is longer than 32"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one-line error: {stderr}");
}

#[test]
fn check_config_prints_warnings() {
    let cfg = TempFile::new(
        "warn.toml",
        "[nat44]\n[nat44.timeouts]\nudp = 30\n[[nat44.rule]]\ninside = \"10.0.0.0/24\"\npool = \"203.0.113.0/28\"\n",
    );
    let out = quicknat(&["check-config", "--config", cfg.0.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "stderr: {stderr}");
    assert!(
        stderr.contains(":3: nat44.timeouts.udp = 30 s is below"),
        "{stderr}"
    );
}

#[test]
fn missing_config_file_is_a_clear_error() {
    let path = std::env::temp_dir().join("quicknat-cli-no-such-config.toml");
    let out = quicknat(&["check-config", "--config", path.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(
        stderr.contains("cannot read the configuration file"),
        "{stderr}"
    );
}

#[test]
fn translate_with_missing_input_fails_cleanly() {
    let dir = std::env::temp_dir();
    let input = dir.join(format!("quicknat-cli-{}-missing.pcap", std::process::id()));
    let output = TempFile::new("out.pcap", "");
    let out = quicknat(&[
        "translate",
        input.to_str().unwrap(),
        output.0.to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(
        stderr.contains("using built-in config examples/nat44.toml"),
        "{stderr}"
    );
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line: {stderr}"));
    assert!(error.contains(input.to_str().unwrap()), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn several_gateways_are_checked_before_any_starts() {
    let example = example_path();
    let out = quicknat(&[
        "run",
        "--config",
        example.to_str().unwrap(),
        "--config",
        "/nonexistent/quicknat-second.toml",
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("/nonexistent/quicknat-second.toml"), "{err}");
    let out = quicknat(&[
        "run",
        "--config",
        example.to_str().unwrap(),
        "--config",
        example.to_str().unwrap(),
        "--inside",
        "eth9",
    ]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--inside/--outside name one interface pair"));
}

// -- deterministic NAT --

fn det_example() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/deterministic.toml")
        .to_str()
        .unwrap()
        .to_owned()
}

/// `det forward` and `det reverse` answer from the file alone, as text and JSON, and are
/// each other's inverse; addresses outside the prefixes are clear errors (exit 1).
#[test]
fn det_forward_and_reverse_answer_offline() {
    let cfg = det_example();
    let out = quicknat(&["det", "forward", "--config", &cfg, "100.64.0.65"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "100.64.0.65 -> 203.0.113.1 ports 2032-3039 (1008 ports; sharing ratio 64)"
    );
    let out = quicknat(&[
        "det",
        "forward",
        "--config",
        &cfg,
        "100.64.3.1",
        "--port",
        "5000",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["public"], "203.0.113.12");
    assert_eq!(v["port"], 1024 + 1008 + 5000 % 1008);
    let port = v["port"].as_u64().unwrap().to_string();
    let out = quicknat(&[
        "det",
        "reverse",
        "--config",
        &cfg,
        "203.0.113.12",
        &port,
        "--json",
    ]);
    let back: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(back["inside"], "100.64.3.1");
    for (args, want) in [
        (
            vec!["forward", "10.0.0.1"],
            "not in the deterministic inside prefix 100.64.0.0/22",
        ),
        (
            vec!["reverse", "198.51.100.1", "2000"],
            "not in the deterministic outside prefix",
        ),
        (vec!["reverse", "203.0.113.1", "80"], "below 1024"),
    ] {
        let mut a = vec!["det"];
        a.extend(&args[..1]);
        a.extend(["--config", cfg.as_str()]);
        a.extend(&args[1..]);
        let out = quicknat(&a);
        assert_eq!(out.status.code(), Some(1), "{a:?}");
        assert!(
            text(&out.stderr).contains(want),
            "{a:?}: {}",
            text(&out.stderr)
        );
    }
    // A configuration without the table says so.
    let out = quicknat(&[
        "det",
        "forward",
        "--config",
        example_path().to_str().unwrap(),
        "10.0.0.1",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no [nat44.deterministic] table"));
    // check-config prints the mapping's shape.
    let out = quicknat(&["check-config", "--config", &cfg]);
    assert!(text(&out.stdout).contains(
        "deterministic: 100.64.0.0/22 -> 203.0.113.0/28, sharing ratio 64, 1008 ports per subscriber"
    ));
}

// -- routing integration --
#[test]
fn two_gateways_announcing_on_one_device_are_refused_before_any_starts() {
    let gw = |n: u32| {
        format!(
            "[gateway]\ninside = \"in{n}\"\noutside = \"out{n}\"\ncontrol_socket = \"/tmp/qn-cli-route-{n}-{}.sock\"\n\n[nat44]\n[[nat44.rule]]\ninside = \"10.{n}.0.0/24\"\npool = [\"203.0.113.{n}/32\"]\n\n[routing]\nannounce = [\"203.0.113.{n}/32\"]\n",
            std::process::id()
        )
    };
    let (a, b) = (
        TempFile::new("route-a.toml", &gw(1)),
        TempFile::new("route-b.toml", &gw(2)),
    );
    let out = quicknat(&[
        "run",
        "--config",
        a.0.to_str().unwrap(),
        "--config",
        b.0.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("would both announce on the device qn-announce")
            && err.contains("give each [routing] its own device"),
        "{err}"
    );
}
