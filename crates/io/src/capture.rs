//! A capture file of either format, told apart by its first four bytes: classic pcap
//! ([`crate::pcap`]) or pcapng ([`crate::pcapng`]). What `quicknat translate` reads and
//! writes: a pcapng input gives a pcapng output (its interfaces may differ in link
//! type, which a pcap file cannot say), a pcap input a pcap output.

use std::io::{self, Read, Write};

use crate::pcap::{read_full, LinkType, PcapError, PcapReader, PcapWriter};
use crate::pcapng::{PcapngReader, PcapngWriter, SHB};

/// The two capture formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Classic libpcap (tcpdump's).
    Pcap,
    /// pcapng (Wireshark's default).
    Pcapng,
}

/// One captured frame, borrowed from the reader's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureRecord<'a> {
    /// Capture time in nanoseconds since the Unix epoch.
    pub ts_nanos: u64,
    /// Length of the frame on the wire (may exceed `data.len()` if it was cut).
    pub orig_len: u32,
    /// Link type of the frame (of the file for pcap, of its interface for pcapng).
    pub link_type: LinkType,
    /// The captured bytes.
    pub data: &'a [u8],
}

/// A streaming reader of either format.
#[derive(Debug)]
pub enum CaptureReader<R: Read> {
    /// A classic pcap file.
    Pcap(PcapReader<R>),
    /// A pcapng file.
    Pcapng(PcapngReader<R>),
}

impl<R: Read> CaptureReader<R> {
    /// Reads the file's header, deciding the format by its first four bytes.
    pub fn new(mut inner: R) -> Result<Self, PcapError> {
        let mut magic = [0u8; 4];
        let got = read_full(&mut inner, &mut magic)?;
        if got == 4 && u32::from_le_bytes(magic) == SHB {
            return Ok(Self::Pcapng(PcapngReader::after_type(SHB, inner)?));
        }
        Ok(Self::Pcap(PcapReader::after_prefix(&magic[..got], inner)?))
    }

    /// The file's format.
    pub fn format(&self) -> Format {
        match self {
            Self::Pcap(_) => Format::Pcap,
            Self::Pcapng(_) => Format::Pcapng,
        }
    }

    /// The link type of every frame, for a pcap file (`None` for pcapng: per interface).
    pub fn link_type(&self) -> Option<LinkType> {
        match self {
            Self::Pcap(r) => Some(r.link_type()),
            Self::Pcapng(_) => None,
        }
    }

    /// Whether timestamps are finer than microseconds (pcapng: written in nanoseconds).
    pub fn is_nanosecond(&self) -> bool {
        match self {
            Self::Pcap(r) => r.is_nanosecond(),
            Self::Pcapng(_) => true,
        }
    }

    /// Reads the next frame; `Ok(None)` at a clean end of file.
    pub fn next_record(&mut self) -> Result<Option<CaptureRecord<'_>>, PcapError> {
        Ok(match self {
            Self::Pcap(r) => {
                let link_type = r.link_type();
                r.next_record()?.map(|p| CaptureRecord {
                    ts_nanos: p.ts_nanos,
                    orig_len: p.orig_len,
                    link_type,
                    data: p.data,
                })
            }
            Self::Pcapng(r) => r.next_record()?.map(|p| CaptureRecord {
                ts_nanos: p.ts_nanos,
                orig_len: p.orig_len,
                link_type: p.link_type,
                data: p.data,
            }),
        })
    }
}

/// A writer of either format.
#[derive(Debug)]
pub enum CaptureWriter<W: Write> {
    /// A classic pcap file of one link type.
    Pcap(PcapWriter<W>, LinkType),
    /// A pcapng file, one interface per link type written.
    Pcapng(PcapngWriter<W>),
}

impl<W: Write> CaptureWriter<W> {
    /// Starts a file of `format`; `link` and `nanosecond` are the pcap file's link type
    /// and timestamp resolution (pcapng: per interface as written, nanoseconds).
    pub fn new(
        inner: W,
        format: Format,
        link: LinkType,
        nanosecond: bool,
    ) -> Result<Self, PcapError> {
        Ok(match format {
            Format::Pcap => Self::Pcap(PcapWriter::new(inner, link, nanosecond)?, link),
            Format::Pcapng => Self::Pcapng(PcapngWriter::new(inner)?),
        })
    }

    /// Appends one frame of `link` type (a pcap file takes only its own link type).
    pub fn write(&mut self, link: LinkType, ts_nanos: u64, data: &[u8]) -> Result<(), PcapError> {
        match self {
            Self::Pcap(w, own) => {
                if link != *own {
                    return Err(PcapError::Io(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("pcap: a {link:?} frame in a {own:?} file (one link type per pcap file)"),
                    )));
                }
                w.write(ts_nanos, data)
            }
            Self::Pcapng(w) => w.write(link, ts_nanos, data),
        }
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(self) -> Result<W, PcapError> {
        match self {
            Self::Pcap(w, _) => w.into_inner(),
            Self::Pcapng(w) => w.into_inner(),
        }
    }
}
