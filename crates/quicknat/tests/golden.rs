//! Golden tests: committed captures (made by scripts/gen_golden.py with scapy) go through
//! `quicknat translate`; the output must equal, packet by packet, the expected capture
//! that scapy built independently, and every output checksum must verify under scapy.

use std::path::{Path, PathBuf};
use std::process::Command;

use io::pcap::PcapReader;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn records(path: &Path) -> Vec<(u64, Vec<u8>)> {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut r = PcapReader::new(std::io::BufReader::new(f)).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        out.push((rec.ts_nanos, rec.data.to_vec()));
    }
    out
}

/// Runs one scenario; returns the translate report (stdout) and the output path.
fn run(name: &str) -> (String, PathBuf) {
    let dir = root().join("tests/golden");
    let out = std::env::temp_dir().join(format!(
        "quicknat-golden-{}-{name}.pcap",
        std::process::id()
    ));
    let o = Command::new(env!("CARGO_BIN_EXE_quicknat"))
        .arg("translate")
        .arg("--config")
        .arg(dir.join("nat44.toml"))
        .arg(dir.join(format!("{name}.in.pcap")))
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{name}: translate failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let got = records(&out);
    let want = records(&dir.join(format!("{name}.expected.pcap")));
    for (i, (g, w)) in got.iter().zip(want.iter()).enumerate() {
        assert_eq!(g.0, w.0, "{name}: packet {i}: timestamp");
        if g.1 != w.1 {
            let at =
                g.1.iter()
                    .zip(w.1.iter())
                    .position(|(a, b)| a != b)
                    .unwrap_or(g.1.len().min(w.1.len()));
            panic!(
                "{name}: packet {i} differs from byte {at}\n got  {:02x?}\n want {:02x?}",
                g.1, w.1
            );
        }
    }
    assert_eq!(got.len(), want.len(), "{name}: packet count");
    (String::from_utf8_lossy(&o.stdout).into_owned(), out)
}

fn verify_with_scapy(path: &Path) {
    if std::env::var_os("QUICKNAT_SKIP_SCAPY").is_some() {
        eprintln!(
            "QUICKNAT_SKIP_SCAPY set: not verifying {} with scapy",
            path.display()
        );
        return;
    }
    let o = Command::new("python3")
        .arg(root().join("scripts/verify_checksums.py"))
        .arg(path)
        .output()
        .expect(
            "python3 is needed for the independent checksum check (scripts/test.sh installs scapy)",
        );
    assert!(
        o.status.success(),
        "scapy checksum verification failed for {}:\n{}{}",
        path.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn count(report: &str, label: &str) -> u64 {
    report
        .lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(label))
                .then(|| w.last().and_then(|n| n.parse().ok()))
                .flatten()
        })
        .unwrap_or(0)
}

macro_rules! golden {
    ($($name:ident),*) => {$(
        #[test]
        fn $name() {
            let (_, out) = run(stringify!($name));
            verify_with_scapy(&out);
            let _ = std::fs::remove_file(out);
        }
    )*};
}

golden!(tcp, udp, icmp_echo, icmp_error, hairpin, fragments);

#[test]
fn drops() {
    let (report, out) = run("drops");
    verify_with_scapy(&out);
    let _ = std::fs::remove_file(out);
    for reason in [
        "truncated",
        "malformed",
        "fragment_out_of_order",
        "ttl_expired",
        "no_mapping",
    ] {
        assert_eq!(
            count(&report, reason),
            1,
            "drop reason {reason} in:\n{report}"
        );
    }
    assert_eq!(count(&report, "forwarded"), 2);
}
