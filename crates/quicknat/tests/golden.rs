//! Golden tests: committed captures (made by scripts/gen_golden.py with scapy) go through
//! `quicknat translate`, each with the configuration its scenario assumes; the output must
//! equal, packet by packet, the expected capture that scapy built independently (the
//! translated packets, the fragments the gateway cuts and the ICMP errors it sends), every
//! output checksum must verify under scapy, and the report must count what happened.

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

/// Runs scenario `name` with the configuration file `config` (in tests/golden); returns
/// the translate report (stdout) and the output path.
fn run(name: &str, config: &str) -> (String, PathBuf) {
    let dir = root().join("tests/golden");
    let out = std::env::temp_dir().join(format!(
        "quicknat-golden-{}-{name}.pcap",
        std::process::id()
    ));
    let o = Command::new(env!("CARGO_BIN_EXE_quicknat"))
        .arg("translate")
        .arg("--config")
        .arg(dir.join(config))
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

/// The number on the report line labelled `label` (a counter such as `icmp errors sent`
/// or a drop reason such as `ttl_expired`); 0 when there is no such line (drop reasons
/// that never happened are not listed).
fn count(report: &str, label: &str) -> u64 {
    report
        .lines()
        .find_map(|l| {
            let rest = l.trim_start().strip_prefix(label)?;
            rest.starts_with(char::is_whitespace)
                .then(|| rest.trim().parse().ok())
                .flatten()
        })
        .unwrap_or(0)
}

/// Runs scenario `name` with `config`, checks its output (byte for byte, then under scapy)
/// and that the report counts each `(label, n)` of `counts`.
fn check(name: &str, config: &str, counts: &[(&str, u64)]) {
    let (report, out) = run(name, config);
    verify_with_scapy(&out);
    let _ = std::fs::remove_file(out);
    for &(label, n) in counts {
        assert_eq!(count(&report, label), n, "{name}: {label} in:\n{report}");
    }
}

#[test]
fn count_reads_whole_labels() {
    let report = "forwarded         4\ndropped           3\n  ttl_expired            2\n  \
                  too_big                1\nicmp errors sent  6\nfragmented        0\n\
                  icmp errors xlat  5\nfragments xlat    7";
    assert_eq!(count(report, "icmp errors sent"), 6);
    assert_eq!(count(report, "icmp errors xlat"), 5);
    assert_eq!(count(report, "fragmented"), 0);
    assert_eq!(count(report, "ttl_expired"), 2);
    assert_eq!(count(report, "fragment_needed"), 0);
    assert_eq!(count(report, "icmp errors"), 0, "a label is matched whole");
}

macro_rules! golden {
    ($($name:ident),*) => {$(
        #[test]
        fn $name() {
            check(stringify!($name), "nat44.toml", &[]);
        }
    )*};
}

// NAT44 without a [gateway] table: the gateway sends nothing of its own.
golden!(tcp, udp, icmp_echo, icmp_error, hairpin, fragments);

/// SCTP with its ports (its CRC32c as scapy computes it), ESP and GRE by address only,
/// SCTP in IP fragments refused (`scenario_other_protocols`).
#[test]
fn other_protocols() {
    check(
        "other_protocols",
        "nat44.toml",
        &[
            ("forwarded", 8),
            ("fragment", 1),
            // The second fragment, whose first was refused: held until the capture ends.
            ("fragment_held", 1),
        ],
    );
}

/// PPTP: two clients of one call id reach one server under public call ids 256 and
/// 257, the control messages and GRE as scapy's PPTP layers build them
/// (`scenario_pptp`).
#[test]
fn pptp() {
    check("pptp", "nat44.toml", &[("forwarded", 12)]);
}

/// Fragments last first, out and back: the later ones held, then sent right after the
/// first, in arrival order, behind its link header (`scenario_fragments_reordered`).
#[test]
fn fragments_reordered() {
    check(
        "fragments_reordered",
        "nat44.toml",
        &[("forwarded", 6), ("fragment_held", 4)],
    );
}

#[test]
fn drops() {
    check(
        "drops",
        "nat44.toml",
        &[
            ("truncated", 1),
            ("malformed", 1),
            // Held for a first fragment that never comes (still held at the capture's end).
            ("fragment_held", 1),
            // Counted, but unanswered: nat44.toml gives the gateway no address.
            ("ttl_expired", 1),
            ("no_mapping", 1),
            ("icmp errors sent", 0),
            ("forwarded", 2),
        ],
    );
}

/// NAT44 with the gateway's addresses and link MTUs: Time Exceeded both ways,
/// Fragmentation Needed with either link's MTU, a too big packet without DF dropped, and
/// the packets no router answers (see scripts/gen_golden.py, `scenario_nat44_gateway`).
#[test]
fn nat44_gateway() {
    check(
        "nat44_gateway",
        "nat44_gateway.toml",
        &[
            ("forwarded", 4),
            ("dropped", 13),
            // 2 answered TTL 1 packets, the echo request and the first fragment; 6 not.
            ("ttl_expired", 10),
            // The packet to a multicast group: the host's, as live (RFC 1122 §3.2.2).
            ("for the host (skipped)", 1),
            ("fragment_needed", 2),
            ("too_big", 1),
            ("icmp errors sent", 6),
            ("fragmented", 0),
        ],
    );
}

/// SIIT: translator fragments (RFC 7915 §4.1), Fragmentation Needed, Packet Too Big and
/// Time Exceeded in the sender's family (`scenario_siit_gateway`).
#[test]
fn siit_gateway() {
    check(
        "siit_gateway",
        "siit_gateway.toml",
        &[
            // 3 whole packets, 3 + 2 + 2 cut pieces, a sender's last fragment, the 1400-byte
            // IPv6 -> IPv4 packet and 2 IPv6 fragments.
            ("forwarded", 14),
            ("fragmented", 3),
            ("dropped", 6),
            ("ttl_expired", 4),
            ("fragment_needed", 1),
            ("packet_too_big", 1),
            ("icmp errors sent", 4),
        ],
    );
}

/// NAT64: the same across the stateful translator, the session opened from the inside
/// first (`scenario_nat64_gateway`).
#[test]
fn nat64_gateway() {
    check(
        "nat64_gateway",
        "nat64_gateway.toml",
        &[
            // The UDP flow's and the SCTP association's.
            ("sessions created", 2),
            // 6 whole packets and 3 cut pieces.
            ("forwarded", 9),
            ("fragmented", 1),
            ("fragments xlat", 3),
            ("dropped", 4),
            ("ttl_expired", 2),
            ("fragment_needed", 1),
            ("packet_too_big", 1),
            ("icmp errors sent", 4),
        ],
    );
}

/// SIIT: the errors for refused packets (RFC 7915 §4.1, §4.4, §5.1, §5.4), the
/// translator's ICMPv4 errors from its RFC 6791 source, and EAM hairpinning (RFC 7757 §4)
/// (`scenario_siit_errors`).
#[test]
fn siit_errors() {
    check(
        "siit_errors",
        "siit_errors.toml",
        &[
            // The expired source route and the two hairpinned packets.
            ("forwarded", 3),
            ("hairpinned", 2),
            ("dropped", 6),
            ("source_routed", 2),
            ("ttl_expired", 1),
            ("unsupported_protocol", 1),
            ("no_address_mapping", 2),
            ("icmp errors sent", 5),
        ],
    );
}

/// SIIT with RFC 7915's two MTUs, next hops left to the links (`scenario_siit_mtu`): DF
/// held to the 1500-byte IPv6 link, no DF to lowest-ipv6-mtu 1280, Fragmentation Needed
/// 1261 becoming Packet Too Big 1281, and IPv6 fragments cut for the 1400-byte IPv4 link.
#[test]
fn siit_mtu() {
    check(
        "siit_mtu",
        "siit_mtu.toml",
        &[
            // 2 whole packets, 2 IPv6 pieces, the translated error, 2 + 2 + 1 IPv4 pieces.
            ("forwarded", 10),
            ("fragmented", 3),
            ("icmp errors xlat", 1),
            ("dropped", 1),
            ("fragment_needed", 1),
            ("icmp errors sent", 1),
            ("needs_fragmentation", 0),
        ],
    );
}

/// SIIT with `eam_hairpin = "simple"`: every EAM destination hairpins, an ordinary IPv4
/// one does not (`scenario_siit_hairpin_simple`).
#[test]
fn siit_hairpin_simple() {
    check(
        "siit_hairpin_simple",
        "siit_hairpin_simple.toml",
        &[("forwarded", 3), ("hairpinned", 2), ("dropped", 0)],
    );
}

/// NAT64 with the two MTUs, next hops left to the links (`scenario_nat64_mtu`).
#[test]
fn nat64_mtu() {
    check(
        "nat64_mtu",
        "nat64_mtu.toml",
        &[
            ("sessions created", 1),
            // 2 whole packets, 2 IPv6 pieces, the translated error, 2 + 2 + 1 IPv4 pieces.
            ("forwarded", 10),
            ("fragmented", 3),
            ("icmp errors xlat", 1),
            ("dropped", 0),
            ("icmp errors sent", 0),
        ],
    );
}
