//! Classic libpcap capture files: a streaming reader and a writer.
//!
//! The format is the original `tcpdump` one (pcapng: [`crate::pcapng`]; either: [`crate::capture`]): a 24-byte global
//! header followed by records, each a 16-byte record header and the captured
//! bytes. The reader accepts both byte orders and both magics (microsecond
//! `0xa1b2c3d4`, nanosecond `0xa1b23c4d`); the writer always writes
//! little-endian with snaplen 262144.
//!
//! Contract: no input, however corrupt, makes the reader panic or allocate
//! more than [`MAX_RECORD_LEN`] bytes for a record. A corrupt or truncated file
//! is reported as a [`PcapError`] naming the record and its byte offset.
//! This module moves bytes only: it never parses the frames it carries.

use std::io::{self, Read, Write};

use thiserror::Error;

/// Largest captured length accepted for one record (256 KiB, tcpdump's maximum snaplen).
pub const MAX_RECORD_LEN: u32 = 256 * 1024;

/// Snaplen written into the global header of files made by [`PcapWriter`].
pub const WRITER_SNAPLEN: u32 = 262_144;

/// Size of the global (file) header in bytes.
const GLOBAL_HEADER_LEN: usize = 24;

/// Size of a record header in bytes.
const RECORD_HEADER_LEN: usize = 16;

/// Magic number of a microsecond-resolution file, as written by its creator.
const MAGIC_MICROS: u32 = 0xa1b2_c3d4;

/// Magic number of a nanosecond-resolution file, as written by its creator.
const MAGIC_NANOS: u32 = 0xa1b2_3c4d;

/// Nanoseconds per second.
const NANOS_PER_SEC: u64 = 1_000_000_000;

/// Byte offsets inside the global header and the record header.
mod field {
    /// Global header: magic number.
    pub const MAGIC: usize = 0;
    /// Global header: major version (2).
    pub const VERSION_MAJOR: usize = 4;
    /// Global header: minor version (4).
    pub const VERSION_MINOR: usize = 6;
    /// Global header: GMT to local correction (always 0 in practice).
    pub const THISZONE: usize = 8;
    /// Global header: timestamp accuracy (always 0 in practice).
    pub const SIGFIGS: usize = 12;
    /// Global header: snapshot length.
    pub const SNAPLEN: usize = 16;
    /// Global header: link-layer header type.
    pub const NETWORK: usize = 20;

    /// Record header: timestamp seconds.
    pub const TS_SEC: usize = 0;
    /// Record header: timestamp microseconds or nanoseconds.
    pub const TS_FRAC: usize = 4;
    /// Record header: number of bytes captured and stored in the file.
    pub const INCL_LEN: usize = 8;
    /// Record header: length of the packet on the wire.
    pub const ORIG_LEN: usize = 12;
}

/// Link-layer header type of every frame in a file (tcpdump.org `LINKTYPE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// `LINKTYPE_ETHERNET` (1): IEEE 802.3 Ethernet frames.
    Ethernet,
    /// `LINKTYPE_RAW` (101): raw IPv4 or IPv6 packets, no link header.
    Raw,
    /// `LINKTYPE_IPV4` (228): raw IPv4 packets.
    Ipv4,
    /// `LINKTYPE_IPV6` (229): raw IPv6 packets.
    Ipv6,
    /// `LINKTYPE_LINUX_SLL` (113): Linux "cooked" capture header.
    LinuxSll,
    /// Any other link type, kept by number so nothing is lost.
    Other(u32),
}

impl LinkType {
    /// The `LINKTYPE_*` number written in a file's global header.
    pub fn number(self) -> u32 {
        match self {
            LinkType::Ethernet => 1,
            LinkType::Raw => 101,
            LinkType::LinuxSll => 113,
            LinkType::Ipv4 => 228,
            LinkType::Ipv6 => 229,
            LinkType::Other(n) => n,
        }
    }
}

impl From<u32> for LinkType {
    fn from(n: u32) -> Self {
        match n {
            1 => LinkType::Ethernet,
            101 => LinkType::Raw,
            113 => LinkType::LinuxSll,
            228 => LinkType::Ipv4,
            229 => LinkType::Ipv6,
            other => LinkType::Other(other),
        }
    }
}

/// Everything that can go wrong reading or writing a pcap file.
#[derive(Debug, Error)]
pub enum PcapError {
    /// The underlying reader or writer failed (this includes a file shorter than its 24-byte header).
    #[error("pcap: I/O error: {0}")]
    Io(#[from] io::Error),
    /// The file does not start with a classic pcap magic number.
    #[error("pcap: header at byte offset 0: bad magic number {0:#010x} (neither a classic pcap nor a pcapng file)")]
    BadMagic(u32),
    /// A pcapng block is malformed (see [`crate::pcapng`]).
    #[error("pcapng: at byte offset {offset}: {message}")]
    Malformed {
        /// Byte offset in the file where the block starts.
        offset: u64,
        /// What is wrong, naming the block.
        message: String,
    },
    /// A record header or body ends before its declared length.
    #[error(
        "pcap: record {record} starting at byte offset {offset} is truncated (file ends inside it)"
    )]
    Truncated {
        /// Zero-based index of the record.
        record: u64,
        /// Byte offset in the file where the record header starts.
        offset: u64,
    },
    /// A record claims more captured bytes than any sane capture holds.
    #[error("pcap: record {record}: captured length {len} exceeds the {max} byte maximum (corrupt file)", max = MAX_RECORD_LEN)]
    RecordTooLarge {
        /// Zero-based index of the record.
        record: u64,
        /// Captured length claimed by its record header.
        len: u32,
    },
}

/// One captured frame, borrowed from the reader's internal buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcapRecord<'a> {
    /// Capture time in nanoseconds since the Unix epoch.
    pub ts_nanos: u64,
    /// Length of the frame on the wire (may exceed `data.len()` if it was cut at snaplen).
    pub orig_len: u32,
    /// The captured bytes.
    pub data: &'a [u8],
}

/// Byte order of a file, decided by its magic number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endian {
    /// Little-endian fields.
    Little,
    /// Big-endian fields.
    Big,
}

impl Endian {
    /// Reads a `u32` at `at` from a header buffer of known size.
    fn u32(self, buf: &[u8], at: usize) -> u32 {
        let mut b = [0u8; 4];
        // The callers pass fixed-size header arrays and constant offsets that fit.
        if let Some(src) = buf.get(at..at + 4) {
            b.copy_from_slice(src);
        }
        match self {
            Endian::Little => u32::from_le_bytes(b),
            Endian::Big => u32::from_be_bytes(b),
        }
    }
}

/// Reads `buf.len()` bytes unless the stream ends first; returns how many were read.
pub(crate) fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Streaming reader of a classic pcap file.
#[derive(Debug)]
pub struct PcapReader<R: Read> {
    /// Source of bytes.
    inner: R,
    /// Byte order of the file's headers.
    endian: Endian,
    /// Whether the fractional timestamp is in nanoseconds (else microseconds).
    nanosecond: bool,
    /// Link type from the global header.
    link_type: LinkType,
    /// Snaplen from the global header.
    snaplen: u32,
    /// Index of the next record to read.
    record: u64,
    /// Byte offset of the next record header.
    offset: u64,
    /// Reused buffer for record bodies; grows to the largest record seen.
    buf: Vec<u8>,
}

impl<R: Read> PcapReader<R> {
    /// Reads the global header; accepts both byte orders and both magics.
    pub fn new(inner: R) -> Result<Self, PcapError> {
        Self::after_prefix(&[], inner)
    }

    /// Reads the global header whose first bytes, `prefix`, were already taken from
    /// `inner` (to tell pcap from pcapng, [`crate::capture`]).
    pub fn after_prefix(prefix: &[u8], mut inner: R) -> Result<Self, PcapError> {
        let mut hdr = [0u8; GLOBAL_HEADER_LEN];
        let n = prefix.len().min(GLOBAL_HEADER_LEN);
        hdr[..n].copy_from_slice(&prefix[..n]);
        let got = n + read_full(&mut inner, &mut hdr[n..])?;
        if got < GLOBAL_HEADER_LEN {
            return Err(PcapError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("global header truncated: file has {got} of {GLOBAL_HEADER_LEN} bytes"),
            )));
        }
        let magic_le = Endian::Little.u32(&hdr, field::MAGIC);
        let (endian, nanosecond) = match magic_le {
            MAGIC_MICROS => (Endian::Little, false),
            MAGIC_NANOS => (Endian::Little, true),
            m if m.swap_bytes() == MAGIC_MICROS => (Endian::Big, false),
            m if m.swap_bytes() == MAGIC_NANOS => (Endian::Big, true),
            m => return Err(PcapError::BadMagic(m)),
        };
        Ok(Self {
            inner,
            endian,
            nanosecond,
            link_type: LinkType::from(endian.u32(&hdr, field::NETWORK)),
            snaplen: endian.u32(&hdr, field::SNAPLEN),
            record: 0,
            offset: GLOBAL_HEADER_LEN as u64,
            buf: Vec::new(),
        })
    }

    /// Link-layer type of every frame in the file.
    pub fn link_type(&self) -> LinkType {
        self.link_type
    }

    /// Snapshot length declared in the global header.
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    /// Whether the file stores nanosecond (rather than microsecond) timestamps.
    pub fn is_nanosecond(&self) -> bool {
        self.nanosecond
    }

    /// Reads the next record; `Ok(None)` at a clean end of file.
    ///
    /// The returned data borrows an internal buffer that is reused, so no
    /// allocation happens per packet once it has grown to the largest record.
    pub fn next_record(&mut self) -> Result<Option<PcapRecord<'_>>, PcapError> {
        let record = self.record;
        let offset = self.offset;
        let mut hdr = [0u8; RECORD_HEADER_LEN];
        match read_full(&mut self.inner, &mut hdr)? {
            0 => return Ok(None),
            RECORD_HEADER_LEN => {}
            _ => return Err(PcapError::Truncated { record, offset }),
        }
        let e = self.endian;
        let ts_sec = u64::from(e.u32(&hdr, field::TS_SEC));
        let ts_frac = u64::from(e.u32(&hdr, field::TS_FRAC));
        let incl_len = e.u32(&hdr, field::INCL_LEN);
        let orig_len = e.u32(&hdr, field::ORIG_LEN);
        if incl_len > MAX_RECORD_LEN {
            return Err(PcapError::RecordTooLarge {
                record,
                len: incl_len,
            });
        }
        // Bounded by MAX_RECORD_LEN above, so this fits in usize.
        let len = incl_len as usize;
        if self.buf.len() < len {
            self.buf.resize(len, 0);
        }
        let body = &mut self.buf[..len];
        if read_full(&mut self.inner, body)? < len {
            return Err(PcapError::Truncated { record, offset });
        }
        self.record += 1;
        self.offset += (RECORD_HEADER_LEN + len) as u64;
        // ts_sec <= u32::MAX, so ts_sec * 1e9 + ts_frac * 1000 cannot overflow u64.
        let frac_nanos = if self.nanosecond {
            ts_frac
        } else {
            ts_frac * 1000
        };
        Ok(Some(PcapRecord {
            ts_nanos: ts_sec * NANOS_PER_SEC + frac_nanos,
            orig_len,
            data: &self.buf[..len],
        }))
    }
}

/// Writer of a classic little-endian pcap file.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    /// Destination of bytes.
    inner: W,
    /// Whether timestamps are written in nanoseconds (else microseconds).
    nanosecond: bool,
    /// Index of the next record to write, for error messages.
    record: u64,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the global header (little-endian, snaplen 262144).
    pub fn new(mut inner: W, link_type: LinkType, nanosecond: bool) -> Result<Self, PcapError> {
        let magic = if nanosecond {
            MAGIC_NANOS
        } else {
            MAGIC_MICROS
        };
        let mut hdr = [0u8; GLOBAL_HEADER_LEN];
        hdr[field::MAGIC..field::MAGIC + 4].copy_from_slice(&magic.to_le_bytes());
        hdr[field::VERSION_MAJOR..field::VERSION_MAJOR + 2].copy_from_slice(&2u16.to_le_bytes());
        hdr[field::VERSION_MINOR..field::VERSION_MINOR + 2].copy_from_slice(&4u16.to_le_bytes());
        hdr[field::THISZONE..field::THISZONE + 4].copy_from_slice(&0i32.to_le_bytes());
        hdr[field::SIGFIGS..field::SIGFIGS + 4].copy_from_slice(&0u32.to_le_bytes());
        hdr[field::SNAPLEN..field::SNAPLEN + 4].copy_from_slice(&WRITER_SNAPLEN.to_le_bytes());
        hdr[field::NETWORK..field::NETWORK + 4].copy_from_slice(&link_type.number().to_le_bytes());
        inner.write_all(&hdr)?;
        Ok(Self {
            inner,
            nanosecond,
            record: 0,
        })
    }

    /// Appends one frame captured at `ts_nanos` (nanoseconds since the Unix epoch).
    ///
    /// Frames longer than the snaplen are cut to it, with the full length kept
    /// as the original length. In a microsecond file the timestamp is
    /// truncated to whole microseconds.
    pub fn write(&mut self, ts_nanos: u64, data: &[u8]) -> Result<(), PcapError> {
        let ts_sec = u32::try_from(ts_nanos / NANOS_PER_SEC).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "pcap record {}: timestamp {ts_nanos} ns is past the year 2106 limit of the format",
                    self.record
                ),
            )
        })?;
        let sub = ts_nanos % NANOS_PER_SEC;
        // Both values are below 1e9, so they fit in u32.
        let ts_frac = if self.nanosecond { sub } else { sub / 1000 } as u32;
        let orig_len = u32::try_from(data.len()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "pcap record {}: frame of {} bytes is too long for the format",
                    self.record,
                    data.len()
                ),
            )
        })?;
        let incl_len = orig_len.min(WRITER_SNAPLEN);
        let mut hdr = [0u8; RECORD_HEADER_LEN];
        hdr[field::TS_SEC..field::TS_SEC + 4].copy_from_slice(&ts_sec.to_le_bytes());
        hdr[field::TS_FRAC..field::TS_FRAC + 4].copy_from_slice(&ts_frac.to_le_bytes());
        hdr[field::INCL_LEN..field::INCL_LEN + 4].copy_from_slice(&incl_len.to_le_bytes());
        hdr[field::ORIG_LEN..field::ORIG_LEN + 4].copy_from_slice(&orig_len.to_le_bytes());
        self.inner.write_all(&hdr)?;
        self.inner.write_all(&data[..incl_len as usize])?;
        self.record += 1;
        Ok(())
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> Result<(), PcapError> {
        self.inner.flush()?;
        Ok(())
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(mut self) -> Result<W, PcapError> {
        self.inner.flush()?;
        Ok(self.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Builds a list of (timestamp, frame) pairs with varied lengths and contents.
    fn sample_records(n: usize, nanosecond: bool) -> Vec<(u64, Vec<u8>)> {
        (0..n)
            .map(|i| {
                let mut ts = 1_700_000_000 * NANOS_PER_SEC + (i as u64) * 1_234_567_000;
                if nanosecond {
                    ts += (i as u64 * 7) % 1000;
                }
                let data: Vec<u8> = (0..(i * 37) % 1600).map(|b| (b * 31 + i) as u8).collect();
                (ts, data)
            })
            .collect()
    }

    /// Writes `records` into an in-memory pcap file.
    fn write_file(records: &[(u64, Vec<u8>)], link: LinkType, nanosecond: bool) -> Vec<u8> {
        let mut w = PcapWriter::new(Vec::new(), link, nanosecond).unwrap();
        for (ts, data) in records {
            w.write(*ts, data).unwrap();
        }
        w.into_inner().unwrap()
    }

    /// Reads every record of `bytes`, copying them out.
    fn read_all(bytes: &[u8]) -> Result<Vec<(u64, u32, Vec<u8>)>, PcapError> {
        let mut r = PcapReader::new(bytes)?;
        let mut out = Vec::new();
        while let Some(rec) = r.next_record()? {
            out.push((rec.ts_nanos, rec.orig_len, rec.data.to_vec()));
        }
        Ok(out)
    }

    fn round_trip(nanosecond: bool) {
        let records = sample_records(50, nanosecond);
        let bytes = write_file(&records, LinkType::Ethernet, nanosecond);
        let mut r = PcapReader::new(&bytes[..]).unwrap();
        assert_eq!(r.link_type(), LinkType::Ethernet);
        assert_eq!(r.snaplen(), WRITER_SNAPLEN);
        assert_eq!(r.is_nanosecond(), nanosecond);
        for (ts, data) in &records {
            let rec = r.next_record().unwrap().unwrap();
            assert_eq!(rec.ts_nanos, *ts);
            assert_eq!(rec.orig_len as usize, data.len());
            assert_eq!(rec.data, &data[..]);
        }
        assert!(r.next_record().unwrap().is_none());
        // EOF is sticky and clean.
        assert!(r.next_record().unwrap().is_none());
    }

    #[test]
    fn round_trip_microsecond() {
        round_trip(false);
    }

    #[test]
    fn round_trip_nanosecond() {
        round_trip(true);
    }

    #[test]
    fn global_header_bytes() {
        let bytes = write_file(&[], LinkType::Raw, false);
        assert_eq!(
            bytes,
            [
                0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 101, 0, 0,
                0
            ]
        );
        let nano = write_file(&[], LinkType::Ethernet, true);
        assert_eq!(&nano[..4], &[0x4d, 0x3c, 0xb2, 0xa1]);
    }

    #[test]
    fn microsecond_writer_truncates_sub_microseconds() {
        let bytes = write_file(&[(1_500_000_999, vec![1, 2, 3])], LinkType::Ethernet, false);
        let got = read_all(&bytes).unwrap();
        assert_eq!(got, vec![(1_500_000_000, 3, vec![1, 2, 3])]);
    }

    #[test]
    fn reads_big_endian_files() {
        for (magic, nanosecond) in [(MAGIC_MICROS, false), (MAGIC_NANOS, true)] {
            let mut f = Vec::new();
            f.extend_from_slice(&magic.to_be_bytes());
            f.extend_from_slice(&2u16.to_be_bytes());
            f.extend_from_slice(&4u16.to_be_bytes());
            f.extend_from_slice(&0u32.to_be_bytes());
            f.extend_from_slice(&0u32.to_be_bytes());
            f.extend_from_slice(&65535u32.to_be_bytes());
            f.extend_from_slice(&228u32.to_be_bytes());
            // One record: 4 bytes captured of a 60-byte packet.
            f.extend_from_slice(&1_700_000_000u32.to_be_bytes());
            f.extend_from_slice(&123_456u32.to_be_bytes());
            f.extend_from_slice(&4u32.to_be_bytes());
            f.extend_from_slice(&60u32.to_be_bytes());
            f.extend_from_slice(&[0x45, 0, 0, 60]);
            let mut r = PcapReader::new(&f[..]).unwrap();
            assert_eq!(r.link_type(), LinkType::Ipv4);
            assert_eq!(r.snaplen(), 65535);
            let rec = r.next_record().unwrap().unwrap();
            let frac = if nanosecond { 123_456 } else { 123_456_000 };
            assert_eq!(rec.ts_nanos, 1_700_000_000 * NANOS_PER_SEC + frac);
            assert_eq!(rec.orig_len, 60);
            assert_eq!(rec.data, &[0x45, 0, 0, 60]);
            assert!(r.next_record().unwrap().is_none());
        }
    }

    #[test]
    fn bad_magic_is_rejected() {
        let mut f = write_file(&[], LinkType::Ethernet, false);
        f[..4].copy_from_slice(&0x0a0d_0d0au32.to_le_bytes()); // pcapng section header
        match PcapReader::new(&f[..]) {
            Err(PcapError::BadMagic(0x0a0d_0d0a)) => {}
            other => panic!("expected BadMagic, got {other:?}"),
        }
    }

    #[test]
    fn oversized_record_is_an_error_not_an_allocation() {
        let mut f = write_file(&[(0, vec![0; 10])], LinkType::Ethernet, false);
        let at = GLOBAL_HEADER_LEN + field::INCL_LEN;
        f[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut r = PcapReader::new(&f[..]).unwrap();
        match r.next_record() {
            Err(PcapError::RecordTooLarge {
                record: 0,
                len: u32::MAX,
            }) => {}
            other => panic!("expected RecordTooLarge, got {other:?}"),
        }
    }

    #[test]
    fn writer_cuts_frames_at_snaplen() {
        let big = vec![0xab; WRITER_SNAPLEN as usize + 100];
        let bytes = write_file(&[(0, big.clone())], LinkType::Ethernet, false);
        let got = read_all(&bytes).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1 as usize, big.len());
        assert_eq!(got[0].2, &big[..WRITER_SNAPLEN as usize]);
    }

    #[test]
    fn truncation_at_every_length_errors_cleanly() {
        let records = sample_records(4, false);
        let bytes = write_file(&records, LinkType::Ethernet, false);
        // File offsets where each record starts, and where the file ends.
        let mut starts = vec![GLOBAL_HEADER_LEN];
        for (_, data) in &records {
            starts.push(starts.last().unwrap() + RECORD_HEADER_LEN + data.len());
        }
        assert_eq!(*starts.last().unwrap(), bytes.len());
        for cut in 0..=bytes.len() {
            let prefix = &bytes[..cut];
            let mut r = match PcapReader::new(prefix) {
                Ok(r) => r,
                Err(PcapError::Io(e)) => {
                    assert!(cut < GLOBAL_HEADER_LEN, "cut {cut}: {e}");
                    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
                    continue;
                }
                Err(e) => panic!("cut {cut}: unexpected {e}"),
            };
            // Complete records come back intact before the error.
            let complete = starts.iter().skip(1).filter(|&&end| end <= cut).count();
            for (ts, data) in records.iter().take(complete) {
                let rec = r.next_record().unwrap().unwrap();
                assert_eq!((rec.ts_nanos, rec.data), (*ts, &data[..]));
            }
            match r.next_record() {
                Ok(None) => assert!(starts.contains(&cut), "cut {cut}: clean EOF mid-record"),
                Err(PcapError::Truncated { record, offset }) => {
                    assert_eq!(record, complete as u64, "cut {cut}");
                    assert_eq!(offset, starts[complete] as u64, "cut {cut}");
                    let msg = PcapError::Truncated { record, offset }.to_string();
                    assert!(msg.contains(&format!("record {record}")), "{msg}");
                    assert!(msg.contains(&format!("offset {offset}")), "{msg}");
                }
                other => panic!("cut {cut}: unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn link_type_numbers_round_trip() {
        for n in [0, 1, 101, 113, 228, 229, 276, u32::MAX] {
            assert_eq!(LinkType::from(n).number(), n);
        }
        assert_eq!(LinkType::from(1), LinkType::Ethernet);
        assert_eq!(LinkType::from(147), LinkType::Other(147));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(mut r) = PcapReader::new(&bytes[..]) {
                let mut n = 0;
                while let Ok(Some(rec)) = r.next_record() {
                    prop_assert!(rec.data.len() <= MAX_RECORD_LEN as usize);
                    n += 1;
                    prop_assert!(n <= bytes.len());
                }
            }
        }

        #[test]
        fn valid_header_then_random_bytes_never_panic(
            magic in prop_oneof![
                Just(MAGIC_MICROS.to_le_bytes()),
                Just(MAGIC_MICROS.to_be_bytes()),
                Just(MAGIC_NANOS.to_le_bytes()),
                Just(MAGIC_NANOS.to_be_bytes()),
            ],
            rest in proptest::collection::vec(any::<u8>(), 0..1024),
        ) {
            let mut bytes = magic.to_vec();
            bytes.extend_from_slice(&rest);
            if let Ok(mut r) = PcapReader::new(&bytes[..]) {
                while let Ok(Some(rec)) = r.next_record() {
                    prop_assert!(rec.data.len() <= MAX_RECORD_LEN as usize);
                }
            }
        }

        #[test]
        fn write_then_read_is_identity(
            frames in proptest::collection::vec(
                (any::<u32>(), 0u64..NANOS_PER_SEC, proptest::collection::vec(any::<u8>(), 0..200)),
                0..20,
            ),
            nanosecond in any::<bool>(),
        ) {
            let records: Vec<(u64, Vec<u8>)> = frames
                .into_iter()
                .map(|(s, f, d)| {
                    let f = if nanosecond { f } else { f / 1000 * 1000 };
                    (u64::from(s) * NANOS_PER_SEC + f, d)
                })
                .collect();
            let bytes = write_file(&records, LinkType::Ethernet, nanosecond);
            let got = read_all(&bytes).unwrap();
            prop_assert_eq!(got.len(), records.len());
            for ((ts, orig, data), (ets, edata)) in got.iter().zip(&records) {
                prop_assert_eq!(ts, ets);
                prop_assert_eq!(*orig as usize, edata.len());
                prop_assert_eq!(data, edata);
            }
        }
    }
}
