//! The parsers of what the gateway reads besides packets: the configuration file, pcap
//! captures and rtnetlink datagrams.

use std::io::Cursor;

use io::capture::{CaptureReader, CaptureWriter, Format};
use io::netlink::{parse_datagram, Parsed};
use io::pcap::LinkType;

/// Arbitrary text as a configuration file: loaded, or refused with an error that names
/// the file and a line of it (or, for something missing, the field). Never a panic.
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match crate::qconfig::load_str_on(&text, "fuzz.toml", &crate::qconfig::Machine::default()) {
        Ok(cfg) => {
            let _ = (cfg.mode.name(), cfg.mode.families(), cfg.warnings.len());
            if let Some(g) = &cfg.gateway {
                let _ = g.egress();
            }
        }
        Err(e) => {
            assert_eq!(e.origin, "fuzz.toml");
            assert!(!e.message.is_empty(), "an error without a message: {e:?}");
            let lines = text.lines().count().max(1);
            match e.line {
                Some(l) => assert!(
                    (1..=lines + 1).contains(&l),
                    "error at line {l} of a {lines}-line file: {e}"
                ),
                // Something missing has no line: it is named by its field instead.
                None => assert!(
                    e.field.as_ref().is_some_and(|f| !f.is_empty()),
                    "a refused configuration with neither line nor field: {e}"
                ),
            }
            let shown = e.to_string();
            assert!(shown.starts_with("fuzz.toml:"), "{shown}");
        }
    }
}

/// Records read from a capture: `(link type, timestamp, bytes)`.
type Records = Vec<(LinkType, u64, Vec<u8>)>;

/// A capture read as `quicknat translate` reads it: (format, the pcap file's link type,
/// nanosecond timestamps, records, read to a clean end).
fn read_all(data: &[u8]) -> Option<(Format, Option<LinkType>, bool, Records, bool)> {
    let mut r = CaptureReader::new(Cursor::new(data)).ok()?;
    let mut recs = Vec::new();
    let mut clean = true;
    for _ in 0..10_000 {
        match r.next_record() {
            Ok(Some(rec)) => {
                assert!(
                    rec.data.len() <= data.len(),
                    "a record longer than the file"
                );
                recs.push((rec.link_type, rec.ts_nanos, rec.data.to_vec()));
            }
            Ok(None) => break,
            Err(e) => {
                // A malformed pcapng block names where it starts, inside the file.
                if let io::pcap::PcapError::Malformed { offset, .. } = e {
                    assert!(
                        offset <= data.len() as u64,
                        "error offset {offset} past the end"
                    );
                }
                clean = false;
                break;
            }
        }
    }
    Some((r.format(), r.link_type(), r.is_nanosecond(), recs, clean))
}

/// Arbitrary bytes as a capture, pcap or pcapng: read to the end or to an error, never a
/// panic; what was read, written back in the same format, reads back the same.
pub fn pcap(data: &[u8]) {
    let Some((format, link, nanos, recs, _)) = read_all(data) else {
        return;
    };
    let file_link = link.unwrap_or(LinkType::Raw);
    let mut w =
        CaptureWriter::new(Vec::new(), format, file_link, nanos).expect("writing to memory");
    let mut written = Vec::new();
    for (l, ts, bytes) in &recs {
        // A timestamp past 2106 cannot be written in pcap (nor a link type past 16 bits
        // in pcapng): refused, not mangled.
        if w.write(*l, *ts, bytes).is_ok() {
            written.push((*l, *ts, bytes.clone()));
        }
    }
    let file = w.into_inner().expect("writing to memory");
    let (format2, link2, nanos2, again, clean) = read_all(&file).expect("our own file reads");
    assert!(clean, "a file the writer wrote does not read to its end");
    assert_eq!((format2, link2), (format, link));
    if format == Format::Pcap {
        assert_eq!(nanos2, nanos);
    }
    assert_eq!(again, written, "records written then read back differ");
}

/// Arbitrary bytes as an rtnetlink datagram: every parser, never a panic, and what it
/// returns is well formed.
pub fn netlink(data: &[u8]) {
    for p in parse_datagram(data) {
        match p {
            Parsed::Route(r) => assert!(r.prefix_len <= 32, "{r:?}"),
            Parsed::Route6(r) => assert!(r.prefix_len <= 128, "{r:?}"),
            Parsed::Addr(_, _, l) => assert!(l <= 32),
            Parsed::Addr6(_, _, l) => assert!(l <= 128),
            Parsed::Event(e) => {
                let mut n = io::netlink::NeighborCache::from_dump(&[]);
                n.apply(&e);
            }
            Parsed::Neighbor(n) => {
                let _ = n.is_usable();
            }
            Parsed::Neighbor6(_) | Parsed::Error(_) | Parsed::Malformed(_) => {}
        }
    }
}
