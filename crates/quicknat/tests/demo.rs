//! The README's first command on the bundled capture (`examples/traffic.pcap`, made by
//! `scripts/gen_sample.py`): a real round trip, replies from the outside translated back
//! to the inside hosts, and the same packets from the capture as pcapng.

use std::path::{Path, PathBuf};
use std::process::Command;

use io::capture::{CaptureReader, Format};
use io::pcapng::PcapngWriter;

fn demo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/traffic.pcap")
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("quicknat-demo-{}-{name}", std::process::id()))
}

/// Runs `quicknat translate IN OUT` with the built-in configuration; returns stdout.
fn translate(input: &Path, output: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_quicknat"))
        .arg("translate")
        .arg(input)
        .arg(output)
        .output()
        .expect("run quicknat");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "translate failed: {stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every frame of a capture: (format, link type, timestamp, bytes).
type Frames = (Format, Vec<(io::pcap::LinkType, u64, Vec<u8>)>);

fn frames(path: &Path) -> Frames {
    let mut r = CaptureReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_record().unwrap() {
        v.push((p.link_type, p.ts_nanos, p.data.to_vec()));
    }
    (r.format(), v)
}

/// IPv4 (source, destination) of an Ethernet frame carrying IPv4.
fn addrs(frame: &[u8]) -> Option<([u8; 4], [u8; 4])> {
    if frame.get(12..14)? != [0x08, 0x00] {
        return None;
    }
    let ip = frame.get(14..34)?;
    Some((ip[12..16].try_into().ok()?, ip[16..20].try_into().ok()?))
}

#[test]
fn the_demo_capture_round_trips() {
    let out = tmp("out.pcap");
    let stdout = translate(&demo(), &out);
    assert!(
        stdout.contains("inside→outside    24 translated, 0 dropped\n"),
        "{stdout}"
    );
    assert!(
        stdout
            .contains("outside→inside    24 translated back, 4 dropped (no_mapping 1, syn_held 3)"),
        "{stdout}"
    );
    let (format, written) = frames(&out);
    let _ = std::fs::remove_file(&out);
    assert_eq!(format, Format::Pcap);
    // The server's three answers reach each of the eight inside hosts, from the server.
    let mut per_host = [0u32; 9];
    for (_, _, f) in &written {
        if let Some((src, [10, 0, 0, h])) = addrs(f) {
            assert_eq!(src, [198, 51, 100, 2]);
            per_host[usize::from(h).min(8)] += 1;
        }
    }
    assert_eq!(
        per_host,
        [0, 3, 3, 3, 3, 3, 3, 3, 3],
        "replies per inside host"
    );
    // And nothing from the inside leaves with an inside address.
    for (_, _, f) in &written {
        if let Some(([10, 0, 0, _], dst)) = addrs(f) {
            panic!("an inside source leaked to {dst:?}");
        }
    }
}

#[test]
fn the_demo_as_pcapng_gives_the_same_packets_as_pcapng() {
    let (_, input) = frames(&demo());
    let ng_in = tmp("in.pcapng");
    let mut w = PcapngWriter::new(std::fs::File::create(&ng_in).unwrap()).unwrap();
    for (link, ts, data) in &input {
        w.write(*link, *ts, data).unwrap();
    }
    w.into_inner().unwrap();
    let (out, ng_out) = (tmp("same.pcap"), tmp("same.pcapng"));
    let a = translate(&demo(), &out);
    let b = translate(&ng_in, &ng_out);
    assert_eq!(a, b, "the summaries differ");
    let (fa, pa) = frames(&out);
    let (fb, pb) = frames(&ng_out);
    for p in [&ng_in, &out, &ng_out] {
        let _ = std::fs::remove_file(p);
    }
    assert_eq!((fa, fb), (Format::Pcap, Format::Pcapng));
    assert_eq!(pa.len(), 51);
    assert_eq!(pa, pb);
}
