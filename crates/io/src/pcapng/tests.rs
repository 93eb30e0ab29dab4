//! pcapng byte vectors built from draft-ietf-opsawg-pcapng (block layouts of §4, options
//! of §3.5 and §4.2), in both byte orders.

use super::*;
use crate::capture::{CaptureReader, CaptureWriter, Format};
use proptest::prelude::*;

/// Builds blocks in one byte order.
#[derive(Clone, Copy)]
struct B {
    big: bool,
}

impl B {
    fn u16(self, v: u16) -> [u8; 2] {
        if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }
    fn u32(self, v: u32) -> [u8; 4] {
        if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }
    /// A block: type, total length, `body` padded to 32 bits, total length.
    fn block(self, ty: u32, body: &[u8]) -> Vec<u8> {
        let padded = pad4(body.len());
        let total = (12 + padded) as u32;
        let mut b = Vec::new();
        b.extend_from_slice(&self.u32(ty));
        b.extend_from_slice(&self.u32(total));
        b.extend_from_slice(body);
        b.resize(8 + padded, 0);
        b.extend_from_slice(&self.u32(total));
        b
    }
    fn option(self, code: u16, value: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&self.u16(code));
        b.extend_from_slice(&self.u16(value.len() as u16));
        b.extend_from_slice(value);
        b.resize(4 + pad4(value.len()), 0);
        b
    }
    fn shb(self, options: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&self.u32(BYTE_ORDER_MAGIC));
        body.extend_from_slice(&self.u16(1));
        body.extend_from_slice(&self.u16(0));
        body.extend_from_slice(&[0xff; 8]); // section length: unknown (-1)
        body.extend_from_slice(options);
        self.block(SHB, &body)
    }
    fn idb(self, link: u16, snaplen: u32, options: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&self.u16(link));
        body.extend_from_slice(&self.u16(0));
        body.extend_from_slice(&self.u32(snaplen));
        body.extend_from_slice(options);
        if !options.is_empty() {
            body.extend_from_slice(&[0; 4]); // opt_endofopt
        }
        self.block(IDB, &body)
    }
    fn epb(self, iface: u32, ts: u64, data: &[u8], orig: u32) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&self.u32(iface));
        body.extend_from_slice(&self.u32((ts >> 32) as u32));
        body.extend_from_slice(&self.u32(ts as u32));
        body.extend_from_slice(&self.u32(data.len() as u32));
        body.extend_from_slice(&self.u32(orig));
        body.extend_from_slice(data);
        body.resize(20 + pad4(data.len()), 0);
        // An epb_flags option (code 2, 4 bytes) after the data, as dumpcap writes.
        body.extend_from_slice(&self.option(2, &self.u32(1)));
        body.extend_from_slice(&[0; 4]);
        self.block(EPB, &body)
    }
    fn spb(self, data: &[u8], orig: u32) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&self.u32(orig));
        body.extend_from_slice(data);
        self.block(SPB, &body)
    }
}

const LE: B = B { big: false };
const BE: B = B { big: true };

/// Every record of `bytes`: (interface, link, ts, orig, data), or the first error.
#[allow(clippy::type_complexity)]
fn read_all(bytes: &[u8]) -> Result<Vec<(u32, LinkType, u64, u32, Vec<u8>)>, PcapError> {
    let mut r = PcapngReader::new(bytes)?;
    let mut out = Vec::new();
    while let Some(p) = r.next_record()? {
        out.push((
            p.interface,
            p.link_type,
            p.ts_nanos,
            p.orig_len,
            p.data.to_vec(),
        ));
    }
    Ok(out)
}

const T0: u64 = 1_700_000_000;

#[test]
fn enhanced_packets_in_both_byte_orders_with_default_microseconds() {
    for b in [LE, BE] {
        let mut f = b.shb(&b.option(4, b"test"));
        f.extend(b.idb(1, 65535, &[]));
        f.extend(b.epb(0, T0 * 1_000_000 + 123_456, &[1, 2, 3, 4, 5], 60));
        f.extend(b.epb(0, T0 * 1_000_000 + 123_457, &[6; 8], 8));
        let got = read_all(&f).unwrap();
        let ts = T0 * 1_000_000_000 + 123_456_000;
        assert_eq!(
            got,
            vec![
                (0, LinkType::Ethernet, ts, 60, vec![1, 2, 3, 4, 5]),
                (0, LinkType::Ethernet, ts + 1000, 8, vec![6; 8]),
            ],
            "big-endian: {}",
            b.big
        );
    }
}

#[test]
fn link_type_and_resolution_per_interface() {
    let b = LE;
    let mut f = b.shb(&[]);
    f.extend(b.idb(1, 0, &b.option(IF_TSRESOL, &[9]))); // Ethernet, nanoseconds
    f.extend(b.idb(101, 0, &b.option(IF_TSRESOL, &[0x80 | 10]))); // raw IP, 2^-10 s
    let mut opts = b.option(IF_TSRESOL, &[3]); // IPv4, milliseconds, offset 100 s
    opts.extend(b.option(IF_TSOFFSET, &100u64.to_le_bytes()));
    f.extend(b.idb(228, 0, &opts));
    f.extend(b.epb(1, T0 * 1024 + 512, &[0x45], 20));
    f.extend(b.epb(0, T0 * 1_000_000_000 + 7, &[0xaa; 14], 14));
    f.extend(b.epb(2, T0 * 1000 + 250, &[0x45, 0], 20));
    let got = read_all(&f).unwrap();
    assert_eq!(got[0].0..got[0].1.number(), 1..101);
    assert_eq!(got[0].2, T0 * 1_000_000_000 + 500_000_000);
    assert_eq!(
        (got[1].1, got[1].2),
        (LinkType::Ethernet, T0 * 1_000_000_000 + 7)
    );
    assert_eq!(got[2].1, LinkType::Ipv4);
    assert_eq!(got[2].2, (T0 + 100) * 1_000_000_000 + 250_000_000);
}

#[test]
fn simple_packets_take_interface_zero_cut_at_its_snaplen() {
    let b = BE;
    let mut f = b.shb(&[]);
    f.extend(b.idb(101, 4, &[]));
    f.extend(b.spb(&[0x45, 0, 0, 20, 0, 0], 20)); // 6 bytes stored, snaplen 4
    f.extend(b.spb(&[0x60, 0], 2));
    let got = read_all(&f).unwrap();
    assert_eq!(
        got,
        vec![
            (0, LinkType::Raw, 0, 20, vec![0x45, 0, 0, 20]),
            (0, LinkType::Raw, 0, 2, vec![0x60, 0]),
        ]
    );
}

#[test]
fn unknown_blocks_are_skipped_and_sections_restart_interfaces_and_byte_order() {
    let mut f = LE.shb(&[]);
    f.extend(LE.idb(1, 0, &[]));
    f.extend(LE.block(4, &[0; 40])); // Name Resolution Block
    f.extend(LE.block(5, &[0; 24])); // Interface Statistics Block
    f.extend(LE.block(0x0BAD, &[0xee; 13])); // Custom block type
    f.extend(LE.epb(0, 5, &[1], 1));
    // Second section, big-endian, whose interface 0 is raw IP.
    f.extend(BE.shb(&[]));
    f.extend(BE.idb(101, 0, &[]));
    f.extend(BE.block(0x0000_000a, &[1, 2, 3, 4])); // Decryption Secrets Block
    f.extend(BE.epb(0, 6, &[2], 1));
    let mut r = PcapngReader::new(&f[..]).unwrap();
    let p = r.next_record().unwrap().unwrap();
    assert_eq!((p.link_type, p.data), (LinkType::Ethernet, &[1u8][..]));
    assert_eq!(r.section(), 0);
    let p = r.next_record().unwrap().unwrap();
    assert_eq!(
        (p.link_type, p.ts_nanos, p.data),
        (LinkType::Raw, 6000, &[2u8][..])
    );
    assert_eq!(r.section(), 1);
    assert_eq!(r.interfaces().len(), 1);
    assert!(r.next_record().unwrap().is_none());
}

#[test]
fn obsolete_packet_blocks_are_read() {
    let b = LE;
    let mut f = b.shb(&[]);
    f.extend(b.idb(1, 0, &[]));
    let mut body = Vec::new();
    body.extend_from_slice(&0u16.to_le_bytes());
    body.extend_from_slice(&0u16.to_le_bytes()); // drops count
    body.extend_from_slice(&0u32.to_le_bytes());
    body.extend_from_slice(&9u32.to_le_bytes());
    body.extend_from_slice(&3u32.to_le_bytes());
    body.extend_from_slice(&3u32.to_le_bytes());
    body.extend_from_slice(&[7, 8, 9]);
    f.extend(b.block(OPB, &body));
    assert_eq!(
        read_all(&f).unwrap(),
        vec![(0, LinkType::Ethernet, 9000, 3, vec![7, 8, 9])]
    );
}

/// The error of reading `f` to its end: its message must name `offset`.
fn error_at(f: &[u8], offset: u64, what: &str) {
    match read_all(f) {
        Err(e @ PcapError::Malformed { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(&format!("byte offset {offset}")), "{msg}");
            assert!(msg.contains(what), "{msg} (wanted {what:?})");
        }
        other => panic!("expected a malformed-block error at {offset}, got {other:?}"),
    }
}

#[test]
fn malformed_blocks_are_errors_naming_their_offset() {
    let b = LE;
    let shb = b.shb(&[]);
    let idb = b.idb(1, 0, &[]);
    let at = (shb.len() + idb.len()) as u64;
    let mut head = shb.clone();
    head.extend(&idb);

    // A packet on an interface the section never described.
    let mut f = head.clone();
    f.extend(b.epb(3, 0, &[1], 1));
    error_at(&f, at, "interface 3");

    // A captured length past the block.
    let mut f = head.clone();
    let mut epb = b.epb(0, 0, &[1, 2, 3, 4], 4);
    epb[20..24].copy_from_slice(&1000u32.to_le_bytes());
    f.extend(epb);
    error_at(&f, at, "captured length 1000");

    // Trailing length unlike the leading one.
    let mut f = head.clone();
    let mut epb = b.epb(0, 0, &[1, 2, 3, 4], 4);
    let n = epb.len();
    epb[n - 4..].copy_from_slice(&8u32.to_le_bytes());
    f.extend(epb);
    error_at(&f, at, "trailing length 8");

    // A length not a multiple of 4, and a huge one.
    for (len, what) in [(13u32, "total length 13"), (u32::MAX - 3, "exceeds")] {
        let mut f = head.clone();
        let mut epb = b.epb(0, 0, &[1], 1);
        epb[4..8].copy_from_slice(&len.to_le_bytes());
        f.extend(epb);
        error_at(&f, at, what);
    }

    // A packet before any interface.
    let mut f = shb.clone();
    f.extend(b.spb(&[1], 1));
    error_at(&f, shb.len() as u64, "simple packet on interface 0");

    // A section header with a bad byte-order magic, or a major version 2.
    let mut f = shb.clone();
    f[8] ^= 0xff;
    error_at(&f, 0, "byte-order magic");
    let mut f = head.clone();
    let mut shb2 = b.shb(&[]);
    shb2[12] = 2;
    f.extend(shb2);
    error_at(&f, at, "major version 2");

    // An IDB option running past the block.
    let mut f = shb.clone();
    let mut idb = b.idb(1, 0, &b.option(IF_TSRESOL, &[9]));
    idb[18..20].copy_from_slice(&200u16.to_le_bytes());
    f.extend(idb);
    error_at(&f, shb.len() as u64, "option 9 of 200 bytes");
}

#[test]
fn truncation_at_every_length_is_an_error_or_a_clean_end() {
    let b = BE;
    let mut f = b.shb(&[]);
    let shb_end = f.len();
    f.extend(b.idb(1, 0, &b.option(IF_TSRESOL, &[9])));
    let mut ends = vec![f.len()];
    for i in 0..3u8 {
        f.extend(b.epb(0, u64::from(i), &vec![i; 13 + usize::from(i)], 99));
        ends.push(f.len());
    }
    for cut in 0..f.len() {
        let prefix = &f[..cut];
        let mut r = match PcapngReader::new(prefix) {
            Ok(r) => r,
            Err(PcapError::Malformed { offset: 0, .. }) => continue,
            Err(e) => panic!("cut {cut}: {e}"),
        };
        let mut n = 0;
        loop {
            match r.next_record() {
                Ok(Some(_)) => n += 1,
                Ok(None) => {
                    assert!(
                        cut == shb_end || ends.contains(&cut),
                        "cut {cut}: clean end inside a block"
                    );
                    break;
                }
                Err(PcapError::Malformed { offset, message }) => {
                    let start = if cut < ends[0] { shb_end } else { ends[n] };
                    assert_eq!(offset, start as u64, "cut {cut}");
                    assert!(message.contains("truncated"), "{message}");
                    break;
                }
                Err(e) => panic!("cut {cut}: {e}"),
            }
        }
        assert_eq!(
            n,
            ends.iter().filter(|&&e| e <= cut).count().saturating_sub(1),
            "cut {cut}"
        );
    }
}

#[test]
fn writer_output_reads_back_with_one_interface_per_link_type() {
    let mut w = PcapngWriter::new(Vec::new()).unwrap();
    w.write(LinkType::Ethernet, 1_700_000_000_123_456_789, &[1, 2, 3])
        .unwrap();
    w.write(LinkType::Raw, 5, &[0x45; 21]).unwrap();
    w.write(LinkType::Ethernet, 6, &[]).unwrap();
    let bytes = w.into_inner().unwrap();
    assert_eq!(bytes.len() % 4, 0);
    assert_eq!(&bytes[..4], &SHB.to_le_bytes());
    let got = read_all(&bytes).unwrap();
    assert_eq!(
        got,
        vec![
            (
                0,
                LinkType::Ethernet,
                1_700_000_000_123_456_789,
                3,
                vec![1, 2, 3]
            ),
            (1, LinkType::Raw, 5, 21, vec![0x45; 21]),
            (0, LinkType::Ethernet, 6, 0, vec![]),
        ]
    );
}

#[test]
fn capture_reader_tells_the_formats_apart() {
    let mut w = CaptureWriter::new(Vec::new(), Format::Pcapng, LinkType::Raw, true).unwrap();
    w.write(LinkType::Raw, 42, &[0x45, 1]).unwrap();
    let ng = w.into_inner().unwrap();
    let mut w = CaptureWriter::new(Vec::new(), Format::Pcap, LinkType::Raw, true).unwrap();
    w.write(LinkType::Raw, 42, &[0x45, 1]).unwrap();
    assert!(w.write(LinkType::Ethernet, 42, &[0x45, 1]).is_err());
    let classic = w.into_inner().unwrap();
    for (bytes, format) in [(ng, Format::Pcapng), (classic, Format::Pcap)] {
        let mut r = CaptureReader::new(&bytes[..]).unwrap();
        assert_eq!(r.format(), format);
        let p = r.next_record().unwrap().unwrap();
        assert_eq!(
            (p.link_type, p.ts_nanos, p.data),
            (LinkType::Raw, 42, &[0x45u8, 1][..])
        );
        assert!(r.next_record().unwrap().is_none());
    }
    // Short and foreign files are errors, not panics.
    for bad in [
        &b""[..],
        b"\x0a\x0d",
        b"\x0a\x0d\x0d\x0a",
        b"GIF89a........................",
    ] {
        assert!(CaptureReader::new(bad).is_err());
    }
}

proptest! {
    #[test]
    fn random_blocks_never_panic(
        big in any::<bool>(),
        rest in proptest::collection::vec(any::<u8>(), 0..1024),
    ) {
        let b = B { big };
        let mut f = b.shb(&[]);
        f.extend(b.idb(1, 0, &[]));
        f.extend_from_slice(&rest);
        if let Ok(mut r) = PcapngReader::new(&f[..]) {
            let mut n = 0;
            while let Ok(Some(p)) = r.next_record() {
                prop_assert!(p.data.len() <= MAX_RECORD_LEN as usize);
                n += 1;
                prop_assert!(n <= f.len());
            }
        }
    }

    #[test]
    fn write_then_read_is_identity(
        frames in proptest::collection::vec(
            (any::<u64>(), any::<bool>(), proptest::collection::vec(any::<u8>(), 0..100)),
            0..20,
        ),
    ) {
        let mut w = PcapngWriter::new(Vec::new()).unwrap();
        for (ts, raw, data) in &frames {
            let link = if *raw { LinkType::Raw } else { LinkType::Ethernet };
            w.write(link, *ts, data).unwrap();
        }
        let bytes = w.into_inner().unwrap();
        let got = read_all(&bytes).unwrap();
        prop_assert_eq!(got.len(), frames.len());
        for (g, (ts, raw, data)) in got.iter().zip(&frames) {
            let link = if *raw { LinkType::Raw } else { LinkType::Ethernet };
            prop_assert_eq!((g.1, g.2, &g.4), (link, *ts, data));
        }
    }
}
