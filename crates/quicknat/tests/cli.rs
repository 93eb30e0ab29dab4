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

// -- routing integration (issue 13) --
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
