//! pcapng capture files (draft-ietf-opsawg-pcapng, Wireshark's default format): a
//! streaming reader and a writer.
//!
//! A file is a sequence of blocks, each `type`, `total length`, body, `total length`
//! again, padded to 32 bits. The reader understands:
//!
//! - Section Header Blocks (`0x0A0D0D0A`), in either byte order (the byte-order magic
//!   `0x1A2B3C4D` decides), and any number of sections one after the other: each new
//!   section starts a new list of interfaces and may change the byte order;
//! - Interface Description Blocks (1): the link type of each interface and its
//!   timestamp resolution (`if_tsresol`, decimal or binary) and offset (`if_tsoffset`);
//! - Enhanced Packet Blocks (6), Simple Packet Blocks (3, interface 0, no timestamp) and
//!   the obsolete Packet Blocks (2);
//! - every other block (name resolution, statistics, decryption secrets, custom…) is
//!   skipped without being buffered.
//!
//! The writer writes one little-endian section whose interfaces use nanosecond
//! timestamps (`if_tsresol` = 9) and Enhanced Packet Blocks.
//!
//! Contract (as [`crate::pcap`]): no input, however corrupt, makes the reader panic or
//! buffer more than [`MAX_BLOCK_LEN`] bytes; a corrupt or truncated file is reported as
//! a [`PcapError`] naming the block and its byte offset. This module moves bytes only:
//! it never parses the frames it carries.

use std::io::{self, Read, Write};

use crate::pcap::{read_full, LinkType, PcapError, MAX_RECORD_LEN};

/// Largest block the reader buffers (a packet block of [`MAX_RECORD_LEN`] bytes with
/// options, or a header block with its options); larger unknown blocks are skipped
/// unbuffered, larger known ones are an error.
pub const MAX_BLOCK_LEN: u32 = MAX_RECORD_LEN + 64 * 1024;

/// Block type of a Section Header Block (a palindrome: the same in both byte orders).
pub const SHB: u32 = 0x0A0D_0D0A;
/// Block type of an Interface Description Block.
pub const IDB: u32 = 1;
/// Block type of the obsolete Packet Block.
pub const OPB: u32 = 2;
/// Block type of a Simple Packet Block.
pub const SPB: u32 = 3;
/// Block type of an Enhanced Packet Block.
pub const EPB: u32 = 6;
/// The byte-order magic of a Section Header Block, as written by its creator.
pub const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;

/// Option code that ends an option list.
const OPT_END: u16 = 0;
/// IDB option: timestamp resolution.
const IF_TSRESOL: u16 = 9;
/// IDB option: seconds added to every timestamp of the interface.
const IF_TSOFFSET: u16 = 14;
/// SHB option: the application that wrote the section.
const SHB_USERAPPL: u16 = 4;

/// Nanoseconds per second.
const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Interfaces accepted per section (an IDB is 20 bytes, so a hostile file could
/// otherwise grow the list without bound).
pub const MAX_INTERFACES: usize = 65_536;

/// One captured frame, borrowed from the reader's internal buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcapngRecord<'a> {
    /// Capture time in nanoseconds since the Unix epoch (0 for a Simple Packet Block).
    pub ts_nanos: u64,
    /// Length of the frame on the wire (may exceed `data.len()` if it was cut).
    pub orig_len: u32,
    /// Index of the interface in its section.
    pub interface: u32,
    /// Link type of that interface.
    pub link_type: LinkType,
    /// The captured bytes.
    pub data: &'a [u8],
}

/// An interface described by an IDB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interface {
    /// Its link type.
    pub link_type: LinkType,
    /// Its snapshot length (0: none).
    pub snaplen: u32,
    /// Timestamp resolution: `(binary, exponent)`, a unit of 10^-exp or 2^-exp seconds.
    pub tsresol: (bool, u8),
    /// Seconds added to every timestamp.
    pub tsoffset: i64,
}

impl Interface {
    /// A timestamp in this interface's units, in nanoseconds since the epoch
    /// (saturating at the ends of `u64`).
    fn nanos(&self, ts: u64) -> u64 {
        let ts = u128::from(ts);
        let (binary, exp) = self.tsresol;
        let n = if binary {
            if exp >= 128 {
                0
            } else {
                (ts.saturating_mul(NANOS_PER_SEC)) >> exp
            }
        } else if exp <= 9 {
            ts.saturating_mul(10u128.pow(9 - u32::from(exp)))
        } else {
            10u128.checked_pow(u32::from(exp) - 9).map_or(0, |d| ts / d)
        };
        let off = i128::from(self.tsoffset) * NANOS_PER_SEC as i128;
        let n = (n as i128).saturating_add(off).max(0);
        u64::try_from(n).unwrap_or(u64::MAX)
    }
}

/// Byte order of a section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endian {
    Little,
    Big,
}

impl Endian {
    fn u16(self, b: &[u8], at: usize) -> u16 {
        let mut a = [0u8; 2];
        if let Some(s) = b.get(at..at + 2) {
            a.copy_from_slice(s);
        }
        match self {
            Endian::Little => u16::from_le_bytes(a),
            Endian::Big => u16::from_be_bytes(a),
        }
    }
    fn u32(self, b: &[u8], at: usize) -> u32 {
        let mut a = [0u8; 4];
        if let Some(s) = b.get(at..at + 4) {
            a.copy_from_slice(s);
        }
        match self {
            Endian::Little => u32::from_le_bytes(a),
            Endian::Big => u32::from_be_bytes(a),
        }
    }
    fn u64(self, b: &[u8], at: usize) -> u64 {
        let mut a = [0u8; 8];
        if let Some(s) = b.get(at..at + 8) {
            a.copy_from_slice(s);
        }
        match self {
            Endian::Little => u64::from_le_bytes(a),
            Endian::Big => u64::from_be_bytes(a),
        }
    }
}

/// Rounds `n` up to a multiple of 4.
fn pad4(n: usize) -> usize {
    n.div_ceil(4) * 4
}

/// Streaming reader of a pcapng file.
#[derive(Debug)]
pub struct PcapngReader<R: Read> {
    /// Source of bytes.
    inner: R,
    /// Byte order of the current section.
    endian: Endian,
    /// The interfaces of the current section, by index.
    interfaces: Vec<Interface>,
    /// Index of the current section (0 = the first).
    section: u64,
    /// Index of the next block, for error messages.
    block: u64,
    /// Byte offset of the next block.
    offset: u64,
    /// Reused buffer for block bodies; grows to the largest block read.
    buf: Vec<u8>,
    /// Where the packet data of the last packet block lies in `buf`.
    data: (usize, usize),
}

impl<R: Read> PcapngReader<R> {
    /// Reads the first Section Header Block.
    pub fn new(mut inner: R) -> Result<Self, PcapError> {
        let mut magic = [0u8; 4];
        let got = read_full(&mut inner, &mut magic)?;
        if got < 4 {
            return Err(PcapError::Malformed {
                offset: 0,
                message: format!("file has {got} bytes, too short for a pcapng header"),
            });
        }
        Self::after_type(u32::from_le_bytes(magic), inner)
    }

    /// Reads the first Section Header Block whose type field (read as little-endian)
    /// was `block_type` (already taken from `inner`).
    pub fn after_type(block_type: u32, inner: R) -> Result<Self, PcapError> {
        if block_type != SHB {
            return Err(PcapError::BadMagic(block_type));
        }
        let mut r = Self {
            inner,
            endian: Endian::Little,
            interfaces: Vec::new(),
            section: 0,
            block: 0,
            offset: 0,
            buf: Vec::new(),
            data: (0, 0),
        };
        r.section_header()?;
        Ok(r)
    }

    /// The interfaces of the current section.
    pub fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    /// Index of the current section (0 for the first).
    pub fn section(&self) -> u64 {
        self.section
    }

    fn malformed(&self, message: impl Into<String>) -> PcapError {
        PcapError::Malformed {
            offset: self.offset,
            message: format!("block {}: {}", self.block, message.into()),
        }
    }

    /// Reads a Section Header Block whose type field was already consumed.
    fn section_header(&mut self) -> Result<(), PcapError> {
        // Block total length (4) and byte-order magic (4).
        let mut head = [0u8; 8];
        if read_full(&mut self.inner, &mut head)? < 8 {
            return Err(self.truncated());
        }
        self.section_rest(
            [head[0], head[1], head[2], head[3]],
            [head[4], head[5], head[6], head[7]],
        )
    }

    fn truncated(&self) -> PcapError {
        PcapError::Malformed {
            offset: self.offset,
            message: format!("block {} is truncated (file ends inside it)", self.block),
        }
    }

    /// Reads `n` bytes into the start of the buffer or reports a truncated block.
    fn fill(&mut self, n: usize) -> Result<(), PcapError> {
        if self.buf.len() < n {
            self.buf.resize(n, 0);
        }
        if read_full(&mut self.inner, &mut self.buf[..n])? < n {
            return Err(self.truncated());
        }
        Ok(())
    }

    /// Discards `n` bytes without buffering them.
    fn skip(&mut self, n: u64) -> Result<(), PcapError> {
        let got = io::copy(&mut (&mut self.inner).take(n), &mut io::sink())?;
        if got < n {
            return Err(self.truncated());
        }
        Ok(())
    }

    fn advance(&mut self, total: u32) {
        self.block += 1;
        self.offset += u64::from(total);
    }

    /// Reads up to and including the next packet; `Ok(None)` at a clean end of file.
    ///
    /// The returned data borrows an internal buffer that is reused, so no allocation
    /// happens per packet once it has grown to the largest block.
    pub fn next_record(&mut self) -> Result<Option<PcapngRecord<'_>>, PcapError> {
        loop {
            let mut head = [0u8; 8];
            match read_full(&mut self.inner, &mut head)? {
                0 => return Ok(None),
                8 => {}
                _ => return Err(self.truncated()),
            }
            let block_type = self.endian.u32(&head, 0);
            if u32::from_le_bytes([head[0], head[1], head[2], head[3]]) == SHB {
                // A new section, possibly in the other byte order: its length is read
                // once the byte-order magic is known.
                let mut rest = [0u8; 4];
                if read_full(&mut self.inner, &mut rest)? < 4 {
                    return Err(self.truncated());
                }
                self.section_rest([head[4], head[5], head[6], head[7]], rest)?;
                continue;
            }
            let total = self.endian.u32(&head, 4);
            if total < 12 || !total.is_multiple_of(4) {
                return Err(self.malformed(format!(
                    "type {block_type:#x}: total length {total} is not a multiple of 4 of at least 12"
                )));
            }
            let known = matches!(block_type, IDB | OPB | SPB | EPB);
            if !known {
                self.skip(u64::from(total) - 8)?;
                self.advance(total);
                continue;
            }
            if total > MAX_BLOCK_LEN {
                return Err(self.malformed(format!(
                    "type {block_type:#x}: total length {total} exceeds the {MAX_BLOCK_LEN} byte maximum"
                )));
            }
            let body = total as usize - 12;
            self.fill(body + 4)?;
            let trailer = self.endian.u32(&self.buf, body);
            if trailer != total {
                return Err(self.malformed(format!(
                    "type {block_type:#x}: trailing length {trailer} differs from the leading {total}"
                )));
            }
            let rec = match block_type {
                IDB => {
                    self.interface(body)?;
                    None
                }
                EPB => Some(self.enhanced(body)?),
                SPB => Some(self.simple(body)?),
                _ => Some(self.obsolete(body)?),
            };
            self.advance(total);
            if let Some((interface, ts_nanos, orig_len)) = rec {
                let link_type = self
                    .interfaces
                    .get(interface as usize)
                    .map_or(LinkType::Other(u32::MAX), |i| i.link_type);
                let (start, len) = self.data;
                return Ok(Some(PcapngRecord {
                    ts_nanos,
                    orig_len,
                    interface,
                    link_type,
                    data: &self.buf[start..start + len],
                }));
            }
        }
    }

    /// The rest of a Section Header Block after its type: `len` is its total length
    /// field and `magic` its byte-order magic, both as read.
    fn section_rest(&mut self, len: [u8; 4], magic: [u8; 4]) -> Result<(), PcapError> {
        let endian = match u32::from_le_bytes(magic) {
            BYTE_ORDER_MAGIC => Endian::Little,
            m if m.swap_bytes() == BYTE_ORDER_MAGIC => Endian::Big,
            m => {
                return Err(
                    self.malformed(format!("section header: bad byte-order magic {m:#010x}"))
                )
            }
        };
        let total = endian.u32(&len, 0);
        // Type, length, magic, versions (4), section length (8), trailing length.
        if !(28..=MAX_BLOCK_LEN).contains(&total) || !total.is_multiple_of(4) {
            return Err(self.malformed(format!(
                "section header: total length {total} is not a multiple of 4 between 28 and {MAX_BLOCK_LEN}"
            )));
        }
        // The rest: versions, section length, options, trailing length.
        let rest = total as usize - 12;
        self.fill(rest)?;
        let major = endian.u16(&self.buf, 0);
        if major != 1 {
            return Err(self.malformed(format!(
                "section header: major version {major} (only 1 is defined)"
            )));
        }
        let trailer = endian.u32(&self.buf, rest - 4);
        if trailer != total {
            return Err(self.malformed(format!(
                "section header: trailing length {trailer} differs from the leading {total}"
            )));
        }
        self.endian = endian;
        if self.block > 0 {
            self.section += 1;
        }
        self.interfaces.clear();
        self.advance(total);
        Ok(())
    }

    /// An Interface Description Block of `body` bytes in the buffer.
    fn interface(&mut self, body: usize) -> Result<(), PcapError> {
        if body < 8 {
            return Err(self.malformed(format!(
                "interface description: body of {body} bytes, at least 8 needed"
            )));
        }
        if self.interfaces.len() >= MAX_INTERFACES {
            return Err(self.malformed(format!(
                "more than {MAX_INTERFACES} interfaces in one section"
            )));
        }
        let e = self.endian;
        let mut iface = Interface {
            link_type: LinkType::from(u32::from(e.u16(&self.buf, 0))),
            snaplen: e.u32(&self.buf, 4),
            tsresol: (false, 6),
            tsoffset: 0,
        };
        let mut at = 8;
        while at + 4 <= body {
            let code = e.u16(&self.buf, at);
            let len = usize::from(e.u16(&self.buf, at + 2));
            let value = at + 4;
            if code == OPT_END {
                break;
            }
            if value + len > body {
                return Err(self.malformed(format!(
                    "interface description: option {code} of {len} bytes runs past the block"
                )));
            }
            match (code, len) {
                (IF_TSRESOL, 1) => {
                    let v = self.buf[value];
                    iface.tsresol = (v & 0x80 != 0, v & 0x7f);
                }
                (IF_TSOFFSET, 8) => iface.tsoffset = e.u64(&self.buf, value) as i64,
                _ => {}
            }
            at = value + pad4(len);
        }
        self.interfaces.push(iface);
        Ok(())
    }

    /// The interface `id` of the current section, or an error naming the block.
    fn iface(&self, id: u32, what: &str) -> Result<Interface, PcapError> {
        self.interfaces.get(id as usize).copied().ok_or_else(|| {
            self.malformed(format!(
                "{what} on interface {id}, but the section describes {}",
                self.interfaces.len()
            ))
        })
    }

    /// Checks a packet's captured length against the block and stores where its data is.
    fn packet_data(
        &mut self,
        what: &str,
        start: usize,
        caplen: u32,
        body: usize,
    ) -> Result<(), PcapError> {
        if caplen > MAX_RECORD_LEN || start + caplen as usize > body {
            return Err(self.malformed(format!(
                "{what}: captured length {caplen} runs past the block ({} bytes of data)",
                body.saturating_sub(start)
            )));
        }
        self.data = (start, caplen as usize);
        Ok(())
    }

    /// An Enhanced Packet Block: (interface, timestamp, original length).
    fn enhanced(&mut self, body: usize) -> Result<(u32, u64, u32), PcapError> {
        const WHAT: &str = "enhanced packet";
        if body < 20 {
            return Err(self.malformed(format!("{WHAT}: body of {body} bytes, at least 20 needed")));
        }
        let e = self.endian;
        let id = e.u32(&self.buf, 0);
        let ts = (u64::from(e.u32(&self.buf, 4)) << 32) | u64::from(e.u32(&self.buf, 8));
        let caplen = e.u32(&self.buf, 12);
        let orig = e.u32(&self.buf, 16);
        let iface = self.iface(id, WHAT)?;
        self.packet_data(WHAT, 20, caplen, body)?;
        Ok((id, iface.nanos(ts), orig))
    }

    /// An obsolete Packet Block: (interface, timestamp, original length).
    fn obsolete(&mut self, body: usize) -> Result<(u32, u64, u32), PcapError> {
        const WHAT: &str = "packet";
        if body < 20 {
            return Err(self.malformed(format!("{WHAT}: body of {body} bytes, at least 20 needed")));
        }
        let e = self.endian;
        let id = u32::from(e.u16(&self.buf, 0));
        let ts = (u64::from(e.u32(&self.buf, 4)) << 32) | u64::from(e.u32(&self.buf, 8));
        let caplen = e.u32(&self.buf, 12);
        let orig = e.u32(&self.buf, 16);
        let iface = self.iface(id, WHAT)?;
        self.packet_data(WHAT, 20, caplen, body)?;
        Ok((id, iface.nanos(ts), orig))
    }

    /// A Simple Packet Block (interface 0, no timestamp): (0, 0, original length).
    fn simple(&mut self, body: usize) -> Result<(u32, u64, u32), PcapError> {
        const WHAT: &str = "simple packet";
        if body < 4 {
            return Err(self.malformed(format!("{WHAT}: body of {body} bytes, at least 4 needed")));
        }
        let orig = self.endian.u32(&self.buf, 0);
        let iface = self.iface(0, WHAT)?;
        // The captured length is the original one cut at the snaplen and the block.
        let mut caplen = orig.min(u32::try_from(body - 4).unwrap_or(u32::MAX));
        if iface.snaplen != 0 {
            caplen = caplen.min(iface.snaplen);
        }
        self.packet_data(WHAT, 4, caplen, body)?;
        Ok((0, 0, orig))
    }
}

/// Writer of a little-endian pcapng file: one section, interfaces added as needed, each
/// with nanosecond timestamps; packets as Enhanced Packet Blocks.
#[derive(Debug)]
pub struct PcapngWriter<W: Write> {
    /// Destination of bytes.
    inner: W,
    /// Link types of the interfaces written so far, by index.
    interfaces: Vec<LinkType>,
    /// Index of the next packet, for error messages.
    record: u64,
}

impl<W: Write> PcapngWriter<W> {
    /// Writes the Section Header Block (version 1.0, section length unknown, written by
    /// quicknat).
    pub fn new(mut inner: W) -> Result<Self, PcapError> {
        let appl = b"quicknat";
        let opts = 4 + pad4(appl.len()) + 4;
        let total = (28 + opts) as u32;
        let mut b = Vec::with_capacity(total as usize);
        b.extend_from_slice(&SHB.to_le_bytes());
        b.extend_from_slice(&total.to_le_bytes());
        b.extend_from_slice(&BYTE_ORDER_MAGIC.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&(-1i64).to_le_bytes());
        push_option(&mut b, SHB_USERAPPL, appl);
        b.extend_from_slice(&[0; 4]); // opt_endofopt
        b.extend_from_slice(&total.to_le_bytes());
        inner.write_all(&b)?;
        Ok(Self {
            inner,
            interfaces: Vec::new(),
            record: 0,
        })
    }

    /// The index of an interface of `link` type, described (IDB written) on first use.
    pub fn interface(&mut self, link: LinkType) -> Result<u32, PcapError> {
        if let Some(i) = self.interfaces.iter().position(|&l| l == link) {
            return Ok(i as u32);
        }
        let link16 = u16::try_from(link.number()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("pcapng: link type {} does not fit 16 bits", link.number()),
            )
        })?;
        // linktype, reserved, snaplen, if_tsresol (4 + 4 padded), opt_endofopt.
        let total: u32 = 12 + 8 + 8 + 4;
        let mut b = Vec::with_capacity(total as usize);
        b.extend_from_slice(&IDB.to_le_bytes());
        b.extend_from_slice(&total.to_le_bytes());
        b.extend_from_slice(&link16.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&crate::pcap::WRITER_SNAPLEN.to_le_bytes());
        push_option(&mut b, IF_TSRESOL, &[9]);
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&total.to_le_bytes());
        self.inner.write_all(&b)?;
        self.interfaces.push(link);
        Ok(self.interfaces.len() as u32 - 1)
    }

    /// Appends one frame of `link` type captured at `ts_nanos` (nanoseconds since the
    /// epoch), cut at [`crate::pcap::WRITER_SNAPLEN`] with its full length kept.
    pub fn write(&mut self, link: LinkType, ts_nanos: u64, data: &[u8]) -> Result<(), PcapError> {
        let id = self.interface(link)?;
        let orig = u32::try_from(data.len()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "pcapng record {}: frame of {} bytes is too long for the format",
                    self.record,
                    data.len()
                ),
            )
        })?;
        let caplen = orig.min(crate::pcap::WRITER_SNAPLEN);
        let padded = pad4(caplen as usize);
        let total = (12 + 20 + padded) as u32;
        let mut hdr = [0u8; 28];
        hdr[0..4].copy_from_slice(&EPB.to_le_bytes());
        hdr[4..8].copy_from_slice(&total.to_le_bytes());
        hdr[8..12].copy_from_slice(&id.to_le_bytes());
        hdr[12..16].copy_from_slice(&((ts_nanos >> 32) as u32).to_le_bytes());
        hdr[16..20].copy_from_slice(&(ts_nanos as u32).to_le_bytes());
        hdr[20..24].copy_from_slice(&caplen.to_le_bytes());
        hdr[24..28].copy_from_slice(&orig.to_le_bytes());
        self.inner.write_all(&hdr)?;
        self.inner.write_all(&data[..caplen as usize])?;
        self.inner
            .write_all(&[0u8; 3][..padded - caplen as usize])?;
        self.inner.write_all(&total.to_le_bytes())?;
        self.record += 1;
        Ok(())
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(mut self) -> Result<W, PcapError> {
        self.inner.flush()?;
        Ok(self.inner)
    }
}

/// Appends an option (code, length, value padded to 32 bits) in little-endian.
fn push_option(b: &mut Vec<u8>, code: u16, value: &[u8]) {
    b.extend_from_slice(&code.to_le_bytes());
    b.extend_from_slice(&(value.len() as u16).to_le_bytes());
    b.extend_from_slice(value);
    b.resize(b.len() + pad4(value.len()) - value.len(), 0);
}

#[cfg(test)]
mod tests;
