//! Zero-copy views over packet bytes, and Internet checksums.
//!
//! Every protocol lives in its own module and follows the same contract, in
//! the style of smoltcp's `wire`:
//!
//! * a view (`Ipv4Packet<T>`, `TcpPacket<T>`, ...) wraps a byte buffer
//!   `T: AsRef<[u8]>`; setters exist only when `T: AsMut<[u8]>`;
//! * field offsets live in one `pub mod field` per protocol;
//! * `new_checked` validates the lengths once; after it has returned `Ok`,
//!   **no accessor and no setter panics on any input**, whatever the bytes
//!   say and whatever the setters have written since (variable-length
//!   regions are clamped to the buffer). `new_unchecked` skips the checks;
//!   it still never panics, but a field past the end of the buffer reads as
//!   zero and a write to it is dropped, so use it only to build packets in
//!   a buffer you sized yourself.
//!
//! This crate must never allocate, read a clock, perform I/O or use
//! `unsafe`: it is the leaf every other crate of quicknat builds on, and the
//! fuzzers call it with arbitrary bytes.
#![forbid(unsafe_code)]

pub mod checksum;
pub mod ethernet;
pub mod icmpv4;
pub mod icmpv6;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod sctp;
pub mod tcp;
pub mod udp;

pub use ethernet::{EtherType, EthernetFrame};
pub use icmpv4::{Icmpv4Packet, Icmpv4Type};
pub use icmpv6::{Icmpv6Packet, Icmpv6Type};
pub use ip::IpProtocol;
pub use ipv4::Ipv4Packet;
pub use ipv6::{Ipv6Fragment, Ipv6Packet, Ipv6Upper};
pub use tcp::TcpPacket;
pub use udp::UdpPacket;

/// Why a buffer was refused by a `new_checked` constructor or a header walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The buffer is shorter than the fixed header (or a header it announces).
    Truncated,
    /// The IP version nibble is not the one this view parses.
    BadVersion,
    /// A header-length field is below the minimum or past the buffer.
    BadHeaderLen,
    /// A total/payload length field is inconsistent with the buffer.
    BadLength,
    /// The IPv6 extension-header chain is too long or malformed.
    ExtensionChain,
}

impl Error {
    /// A short, stable, lower-case name for the error (also a metric label).
    #[inline]
    pub fn as_str(&self) -> &'static str {
        match self {
            Error::Truncated => "truncated",
            Error::BadVersion => "bad_version",
            Error::BadHeaderLen => "bad_header_len",
            Error::BadLength => "bad_length",
            Error::ExtensionChain => "extension_chain",
        }
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let what = match self {
            Error::Truncated => "packet truncated: buffer shorter than the header",
            Error::BadVersion => "bad IP version",
            Error::BadHeaderLen => "bad header length field",
            Error::BadLength => "length field inconsistent with the buffer",
            Error::ExtensionChain => "IPv6 extension-header chain too long or malformed",
        };
        f.write_str(what)
    }
}

impl std::error::Error for Error {}

/// The result type of every fallible function of this crate.
pub type Result<T> = core::result::Result<T, Error>;

/// Reads a big-endian `u16` at `off`; 0 if out of bounds (never panics).
#[inline]
pub(crate) fn be16(buf: &[u8], off: usize) -> u16 {
    match buf.get(off..off.wrapping_add(2)) {
        Some(&[a, b]) => u16::from_be_bytes([a, b]),
        _ => 0,
    }
}

/// Reads a big-endian `u32` at `off`; 0 if out of bounds (never panics).
#[inline]
pub(crate) fn be32(buf: &[u8], off: usize) -> u32 {
    match buf.get(off..off.wrapping_add(4)) {
        Some(&[a, b, c, d]) => u32::from_be_bytes([a, b, c, d]),
        _ => 0,
    }
}

/// Writes a big-endian `u16` at `off`; does nothing if out of bounds.
#[inline]
pub(crate) fn put16(buf: &mut [u8], off: usize, v: u16) {
    if let Some(dst) = buf.get_mut(off..off.wrapping_add(2)) {
        dst.copy_from_slice(&v.to_be_bytes());
    }
}

/// Writes a big-endian `u32` at `off`; does nothing if out of bounds.
#[inline]
pub(crate) fn put32(buf: &mut [u8], off: usize, v: u32) {
    if let Some(dst) = buf.get_mut(off..off.wrapping_add(4)) {
        dst.copy_from_slice(&v.to_be_bytes());
    }
}

/// Reads one byte at `off`; 0 if out of bounds.
#[inline]
pub(crate) fn byte(buf: &[u8], off: usize) -> u8 {
    buf.get(off).copied().unwrap_or(0)
}

/// Writes one byte at `off`; does nothing if out of bounds.
#[inline]
pub(crate) fn put8(buf: &mut [u8], off: usize, v: u8) {
    if let Some(b) = buf.get_mut(off) {
        *b = v;
    }
}

/// `buf[start..end]`, with both ends clamped to the buffer (never panics).
#[inline]
pub(crate) fn clamp(buf: &[u8], start: usize, end: usize) -> &[u8] {
    let end = end.min(buf.len());
    let start = start.min(end);
    &buf[start..end]
}

/// Mutable twin of [`clamp`].
#[inline]
pub(crate) fn clamp_mut(buf: &mut [u8], start: usize, end: usize) -> &mut [u8] {
    let end = end.min(buf.len());
    let start = start.min(end);
    &mut buf[start..end]
}

/// Decodes a hex string (whitespace allowed) for the byte-vector tests.
#[cfg(test)]
pub(crate) fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(core::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_names_and_display() {
        let all = [
            Error::Truncated,
            Error::BadVersion,
            Error::BadHeaderLen,
            Error::BadLength,
            Error::ExtensionChain,
        ];
        for e in all {
            assert!(!e.as_str().is_empty());
            assert!(!format!("{e}").is_empty());
        }
    }

    #[test]
    fn helpers_never_panic() {
        let b = [1u8, 2, 3];
        assert_eq!(be16(&b, 1), 0x0203);
        assert_eq!(be16(&b, 2), 0);
        assert_eq!(be16(&b, usize::MAX), 0);
        assert_eq!(be32(&b, 0), 0);
        assert_eq!(clamp(&b, 5, 1), &[] as &[u8]);
        assert_eq!(clamp(&b, 1, 99), &[2, 3]);
    }
}
