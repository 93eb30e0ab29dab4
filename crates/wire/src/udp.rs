//! UDP datagram headers (RFC 768; IPv6 rules in RFC 8200 §8.1).
//!
//! `new_checked` validates the length field once; after that no accessor or
//! setter panics, whatever the bytes hold. The checksum covers the datagram
//! as the length field defines it (bytes past it are ignored). This module
//! must never allocate, and never emit a zero checksum (0 means "none" on
//! IPv4 and is invalid on IPv6).

use crate::checksum;
use crate::{be16, clamp, clamp_mut, put16, Error, Result};

/// Byte offsets of the UDP header fields.
pub mod field {
    use core::ops::Range;
    /// Source port.
    pub const SRC_PORT: Range<usize> = 0..2;
    /// Destination port.
    pub const DST_PORT: Range<usize> = 2..4;
    /// Length of the datagram, header included.
    pub const LENGTH: Range<usize> = 4..6;
    /// Checksum (0 = none, IPv4 only).
    pub const CHECKSUM: Range<usize> = 6..8;
    /// Length of the header.
    pub const HEADER_LEN: usize = 8;
}

/// IANA protocol number of UDP, for the pseudo-header.
const PROTOCOL: u8 = 17;

/// A read (and, with `AsMut`, write) view over a UDP datagram.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps a buffer without checking it (accessors return zeros past its end).
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// Wraps a datagram: at least 8 bytes, 8 <= length field <= buffer len.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        let len = p.buffer.as_ref().len();
        if len < field::HEADER_LEN {
            return Err(Error::Truncated);
        }
        let l = usize::from(p.len());
        if l < field::HEADER_LEN || l > len {
            return Err(Error::BadLength);
        }
        Ok(p)
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT.start)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT.start)
    }

    /// Length field: the datagram's length in bytes, header included.
    #[inline]
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// Checksum field (0 = none on IPv4).
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// The datagram as the length field defines it (clamped to the buffer).
    #[inline]
    fn datagram(&self) -> &[u8] {
        clamp(self.buffer.as_ref(), 0, usize::from(self.len()))
    }

    /// The payload: bytes `8..len`.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        clamp(
            self.buffer.as_ref(),
            field::HEADER_LEN,
            usize::from(self.len()),
        )
    }

    /// Ones'-complement sum over the pseudo-header and the datagram, folded.
    #[inline]
    fn folded_v4(&self, src: [u8; 4], dst: [u8; 4]) -> u16 {
        let ph = checksum::pseudo_header_v4(src, dst, PROTOCOL, self.len());
        checksum::fold(checksum::combine(ph, checksum::sum(self.datagram())))
    }

    /// Ones'-complement sum over the IPv6 pseudo-header and the datagram, folded.
    #[inline]
    fn folded_v6(&self, src: &[u8; 16], dst: &[u8; 16]) -> u16 {
        let ph = checksum::pseudo_header_v6(src, dst, PROTOCOL, u32::from(self.len()));
        checksum::fold(checksum::combine(ph, checksum::sum(self.datagram())))
    }

    /// Does the checksum verify over an IPv4 pseudo-header? (0 = none: true.)
    #[inline]
    pub fn verify_checksum_v4(&self, src: [u8; 4], dst: [u8; 4]) -> bool {
        self.checksum() == 0 || self.folded_v4(src, dst) == 0xFFFF
    }

    /// Does the checksum verify over an IPv6 pseudo-header? (0 is invalid, RFC 8200 §8.1.)
    #[inline]
    pub fn verify_checksum_v6(&self, src: &[u8; 16], dst: &[u8; 16]) -> bool {
        self.checksum() != 0 && self.folded_v6(src, dst) == 0xFFFF
    }
}

/// RFC 768: a computed checksum of 0 is transmitted as all ones.
#[inline]
fn never_zero(c: u16) -> u16 {
    if c == 0 {
        0xFFFF
    } else {
        c
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, port: u16) {
        put16(self.buffer.as_mut(), field::SRC_PORT.start, port);
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, port: u16) {
        put16(self.buffer.as_mut(), field::DST_PORT.start, port);
    }

    /// Sets the length field.
    #[inline]
    pub fn set_len(&mut self, len: u16) {
        put16(self.buffer.as_mut(), field::LENGTH.start, len);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM.start, c);
    }

    /// Computes and writes the checksum with an IPv4 pseudo-header (0 sent as 0xFFFF).
    #[inline]
    pub fn fill_checksum_v4(&mut self, src: [u8; 4], dst: [u8; 4]) {
        self.set_checksum(0);
        let c = never_zero(!self.folded_v4(src, dst));
        self.set_checksum(c);
    }

    /// Computes and writes the checksum with an IPv6 pseudo-header (0 sent as 0xFFFF).
    #[inline]
    pub fn fill_checksum_v6(&mut self, src: &[u8; 16], dst: &[u8; 16]) {
        self.set_checksum(0);
        let c = never_zero(!self.folded_v6(src, dst));
        self.set_checksum(c);
    }

    /// The payload, mutably: bytes `8..len`.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.len());
        clamp_mut(self.buffer.as_mut(), field::HEADER_LEN, end)
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for UdpPacket<T> {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;

    const SRC4: [u8; 4] = [192, 168, 0, 1];
    const DST4: [u8; 4] = [8, 8, 8, 8];
    const SRC6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const DST6: [u8; 16] = [
        0x20, 0x01, 0x48, 0x60, 0x48, 0x60, 0, 0, 0, 0, 0, 0, 0, 0, 0x88, 0x88,
    ];

    /// A DNS query for example.com A, 192.168.0.1:53000 -> 8.8.8.8:53, 37
    /// bytes (odd); checksum 0xe471 over IPv4, 0x4e27 from 2001:db8::1 to
    /// 2001:4860:4860::8888 (independent oracle).
    fn dns() -> Vec<u8> {
        hex("cf08 0035 0025 e471 abcd 0100 0001 0000 0000 0000
             0765 7861 6d70 6c65 0363 6f6d 0000 0100 01")
    }

    #[test]
    fn parse_dns_query() {
        let b = dns();
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.src_port(), 53000);
        assert_eq!(p.dst_port(), 53);
        assert_eq!(p.len(), 37);
        assert_eq!(p.checksum(), 0xe471);
        assert_eq!(p.payload().len(), 29);
        assert_eq!(&p.payload()[..2], &[0xab, 0xcd]);
        assert!(p.verify_checksum_v4(SRC4, DST4));
        assert!(!p.verify_checksum_v4(SRC4, [8, 8, 4, 4]));
    }

    #[test]
    fn v6_checksum_and_zero_rules() {
        let mut b = dns();
        let mut p = UdpPacket::new_checked(&mut b[..]).unwrap();
        p.fill_checksum_v6(&SRC6, &DST6);
        assert_eq!(p.checksum(), 0x4e27);
        assert!(p.verify_checksum_v6(&SRC6, &DST6));
        p.set_checksum(0);
        assert!(
            !p.verify_checksum_v6(&SRC6, &DST6),
            "zero is invalid on IPv6"
        );
        assert!(p.verify_checksum_v4(SRC4, DST4), "zero means none on IPv4");
        p.fill_checksum_v4(SRC4, DST4);
        assert_eq!(p.checksum(), 0xe471);
    }

    #[test]
    fn computed_zero_is_sent_as_ffff() {
        // Choose a payload word so that the checksum comes out as 0.
        let mut b = [0u8; 10];
        let mut p = UdpPacket::new_unchecked(&mut b[..]);
        p.set_len(10);
        p.fill_checksum_v4(SRC4, DST4);
        let c = p.checksum();
        // Adding the checksum value as payload makes the folded sum 0xFFFF.
        p.payload_mut().copy_from_slice(&c.to_be_bytes());
        p.fill_checksum_v4(SRC4, DST4);
        assert_eq!(p.checksum(), 0xFFFF);
        assert!(p.verify_checksum_v4(SRC4, DST4));
    }

    #[test]
    fn trailing_bytes_past_length_are_ignored() {
        let mut b = dns();
        b.extend_from_slice(&[0x55; 9]);
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload().len(), 29);
        assert!(p.verify_checksum_v4(SRC4, DST4));
    }

    #[test]
    fn malformed() {
        let b = dns();
        for n in 0..8 {
            assert_eq!(
                UdpPacket::new_checked(&b[..n]).err(),
                Some(Error::Truncated)
            );
        }
        for n in 8..37 {
            assert_eq!(
                UdpPacket::new_checked(&b[..n]).err(),
                Some(Error::BadLength)
            );
        }
        for l in 0..8u8 {
            let mut v = b.clone();
            v[4..6].copy_from_slice(&[0, l]);
            assert_eq!(UdpPacket::new_checked(&v[..]).err(), Some(Error::BadLength));
        }
    }

    #[test]
    fn emit_round_trip() {
        let mut b = [0u8; 12];
        let mut p = UdpPacket::new_unchecked(&mut b[..]);
        p.set_src_port(5353);
        p.set_dst_port(5353);
        p.set_len(12);
        p.payload_mut().copy_from_slice(b"ping");
        p.fill_checksum_v4(SRC4, DST4);
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (5353, 5353, 12));
        assert_eq!(p.payload(), b"ping");
        assert!(p.verify_checksum_v4(SRC4, DST4));
        // A NAT port rewrite through the RFC 768 zero rule.
        let mut b2 = b;
        let mut p = UdpPacket::new_checked(&mut b2[..]).unwrap();
        let c = checksum::udp4_update(p.checksum(), |c| checksum::update16(c, 5353, 40000));
        p.set_src_port(40000);
        p.set_checksum(c);
        assert!(p.verify_checksum_v4(SRC4, DST4));
    }

    #[test]
    fn length_change_never_panics() {
        let mut b = [0u8; 8];
        let mut p = UdpPacket::new_unchecked(&mut b[..]);
        p.set_len(u16::MAX);
        assert_eq!(p.payload().len(), 0);
        assert_eq!(p.payload_mut().len(), 0);
        p.fill_checksum_v4(SRC4, DST4);
        p.fill_checksum_v6(&SRC6, &DST6);
        let _ = p.verify_checksum_v6(&SRC6, &DST6);
    }
}
