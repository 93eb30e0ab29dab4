//! TCP segment headers (RFC 9293).
//!
//! `new_checked` validates the data offset once; after that no accessor or
//! setter panics, whatever the bytes hold. The checksum helpers cover the
//! whole buffer given, which must be exactly the segment. This module must
//! never allocate, and never track connection state (that is conntrack's).

use crate::checksum;
use crate::{be16, be32, byte, clamp, clamp_mut, put16, put32, put8, Error, Result};

/// Byte offsets of the TCP header fields.
pub mod field {
    use core::ops::Range;
    /// Source port.
    pub const SRC_PORT: Range<usize> = 0..2;
    /// Destination port.
    pub const DST_PORT: Range<usize> = 2..4;
    /// Sequence number.
    pub const SEQ_NUM: Range<usize> = 4..8;
    /// Acknowledgment number.
    pub const ACK_NUM: Range<usize> = 8..12;
    /// Data offset (high nibble, in 32-bit words) and reserved bits.
    pub const DATA_OFFSET: usize = 12;
    /// The eight flag bits CWR ECE URG ACK PSH RST SYN FIN.
    pub const FLAGS: usize = 13;
    /// Window size.
    pub const WINDOW: Range<usize> = 14..16;
    /// Checksum.
    pub const CHECKSUM: Range<usize> = 16..18;
    /// Urgent pointer.
    pub const URGENT: Range<usize> = 18..20;
    /// Length of a header without options.
    pub const HEADER_LEN: usize = 20;
}

/// TCP flag bits, as in the byte returned by [`TcpPacket::flags`].
pub mod flags {
    /// No more data from sender.
    pub const FIN: u8 = 0x01;
    /// Synchronize sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push function.
    pub const PSH: u8 = 0x08;
    /// Acknowledgment field is significant.
    pub const ACK: u8 = 0x10;
    /// Urgent pointer field is significant.
    pub const URG: u8 = 0x20;
    /// ECN-Echo.
    pub const ECE: u8 = 0x40;
    /// Congestion Window Reduced.
    pub const CWR: u8 = 0x80;
}

/// IANA protocol number of TCP, for the pseudo-header.
const PROTOCOL: u8 = 6;

/// A read (and, with `AsMut`, write) view over a TCP segment.
#[derive(Debug, Clone)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Wraps a buffer without checking it (accessors return zeros past its end).
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
    }

    /// Wraps a segment: at least 20 bytes, 5 <= data offset, header within the buffer.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        let len = p.buffer.as_ref().len();
        if len < field::HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = p.header_len();
        if hl < field::HEADER_LEN || hl > len {
            return Err(Error::BadHeaderLen);
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

    /// Sequence number.
    #[inline]
    pub fn seq_number(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SEQ_NUM.start)
    }

    /// Acknowledgment number.
    #[inline]
    pub fn ack_number(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ACK_NUM.start)
    }

    /// Header length in bytes (data offset * 4), options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(byte(self.buffer.as_ref(), field::DATA_OFFSET) >> 4) * 4
    }

    /// The low eight flag bits (see [`flags`]).
    #[inline]
    pub fn flags(&self) -> u8 {
        byte(self.buffer.as_ref(), field::FLAGS)
    }

    /// SYN flag.
    #[inline]
    pub fn syn(&self) -> bool {
        self.flags() & flags::SYN != 0
    }

    /// ACK flag.
    #[inline]
    pub fn ack(&self) -> bool {
        self.flags() & flags::ACK != 0
    }

    /// FIN flag.
    #[inline]
    pub fn fin(&self) -> bool {
        self.flags() & flags::FIN != 0
    }

    /// RST flag.
    #[inline]
    pub fn rst(&self) -> bool {
        self.flags() & flags::RST != 0
    }

    /// PSH flag.
    #[inline]
    pub fn psh(&self) -> bool {
        self.flags() & flags::PSH != 0
    }

    /// Window size (unscaled).
    #[inline]
    pub fn window_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WINDOW.start)
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// Urgent pointer.
    #[inline]
    pub fn urgent_at(&self) -> u16 {
        be16(self.buffer.as_ref(), field::URGENT.start)
    }

    /// The options (bytes 20..header_len).
    #[inline]
    pub fn options(&self) -> &[u8] {
        clamp(self.buffer.as_ref(), field::HEADER_LEN, self.header_len())
    }

    /// The data after the header (to the end of the buffer).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        clamp(data, self.header_len(), data.len())
    }

    /// Does the checksum verify over an IPv4 pseudo-header and the whole buffer?
    #[inline]
    pub fn verify_checksum_v4(&self, src: [u8; 4], dst: [u8; 4]) -> bool {
        let data = self.buffer.as_ref();
        let ph = checksum::pseudo_header_v4(src, dst, PROTOCOL, data.len() as u16);
        checksum::fold(checksum::combine(ph, checksum::sum(data))) == 0xFFFF
    }

    /// Does the checksum verify over an IPv6 pseudo-header and the whole buffer?
    #[inline]
    pub fn verify_checksum_v6(&self, src: &[u8; 16], dst: &[u8; 16]) -> bool {
        let data = self.buffer.as_ref();
        let ph = checksum::pseudo_header_v6(src, dst, PROTOCOL, data.len() as u32);
        checksum::fold(checksum::combine(ph, checksum::sum(data))) == 0xFFFF
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
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

    /// Sets the sequence number.
    #[inline]
    pub fn set_seq_number(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::SEQ_NUM.start, v);
    }

    /// Sets the acknowledgment number.
    #[inline]
    pub fn set_ack_number(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::ACK_NUM.start, v);
    }

    /// Sets the header length in bytes (rounded down to 32-bit words, max 60).
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        let d = self.buffer.as_mut();
        let low = byte(d, field::DATA_OFFSET) & 0x0F;
        put8(
            d,
            field::DATA_OFFSET,
            (((len / 4).min(15) as u8) << 4) | low,
        );
    }

    /// Sets the eight flag bits.
    #[inline]
    pub fn set_flags(&mut self, f: u8) {
        put8(self.buffer.as_mut(), field::FLAGS, f);
    }

    /// Sets the window size.
    #[inline]
    pub fn set_window_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::WINDOW.start, v);
    }

    /// Sets the urgent pointer.
    #[inline]
    pub fn set_urgent_at(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::URGENT.start, v);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM.start, c);
    }

    /// Computes and writes the checksum with an IPv4 pseudo-header.
    #[inline]
    pub fn fill_checksum_v4(&mut self, src: [u8; 4], dst: [u8; 4]) {
        self.set_checksum(0);
        let data = self.buffer.as_ref();
        let ph = checksum::pseudo_header_v4(src, dst, PROTOCOL, data.len() as u16);
        let c = !checksum::fold(checksum::combine(ph, checksum::sum(data)));
        self.set_checksum(c);
    }

    /// Computes and writes the checksum with an IPv6 pseudo-header.
    #[inline]
    pub fn fill_checksum_v6(&mut self, src: &[u8; 16], dst: &[u8; 16]) {
        self.set_checksum(0);
        let data = self.buffer.as_ref();
        let ph = checksum::pseudo_header_v6(src, dst, PROTOCOL, data.len() as u32);
        let c = !checksum::fold(checksum::combine(ph, checksum::sum(data)));
        self.set_checksum(c);
    }

    /// The options, mutably (e.g. for MSS clamping).
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        clamp_mut(self.buffer.as_mut(), field::HEADER_LEN, hl)
    }

    /// The data after the header, mutably.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        let data = self.buffer.as_mut();
        let end = data.len();
        clamp_mut(data, hl, end)
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for TcpPacket<T> {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;

    const SRC4: [u8; 4] = [10, 0, 0, 1];
    const DST4: [u8; 4] = [93, 184, 216, 34];
    const SRC6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const DST6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

    /// A SYN 10.0.0.1:44321 -> 93.184.216.34:80 with MSS, SACK-permitted,
    /// timestamps, NOP and window scale; checksum 0xe4e1 (independent oracle).
    fn syn() -> Vec<u8> {
        let mut v = hex("ad21 0050 1234 5678 0000 0000 a002 faf0 0000 0000
             0204 05b4 0402 080a 0000 1234 0000 0000 0103 0307");
        v[16..18].copy_from_slice(&[0xe4, 0xe1]);
        v
    }

    /// 2001:db8::1:443 -> 2001:db8::2:51000, PSH|ACK, "hello, world\n"
    /// (odd length); checksum 0x3f08 (independent oracle).
    fn psh6() -> Vec<u8> {
        let mut v = hex("01bb c738 0000 0001 0000 0002 5018 0200 0000 0000");
        v.extend_from_slice(b"hello, world\n");
        v[16..18].copy_from_slice(&[0x3f, 0x08]);
        v
    }

    #[test]
    fn parse_syn() {
        let b = syn();
        let p = TcpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.src_port(), 44321);
        assert_eq!(p.dst_port(), 80);
        assert_eq!(p.seq_number(), 0x12345678);
        assert_eq!(p.ack_number(), 0);
        assert_eq!(p.header_len(), 40);
        assert_eq!(p.flags(), flags::SYN);
        assert!(p.syn() && !p.ack() && !p.fin() && !p.rst() && !p.psh());
        assert_eq!(p.window_len(), 64240);
        assert_eq!(p.checksum(), 0xe4e1);
        assert_eq!(p.urgent_at(), 0);
        assert_eq!(p.options().len(), 20);
        assert_eq!(&p.options()[..4], &[2, 4, 0x05, 0xb4]);
        assert_eq!(p.payload(), &[] as &[u8]);
        assert!(p.verify_checksum_v4(SRC4, DST4));
        assert!(!p.verify_checksum_v4(SRC4, [93, 184, 216, 35]));
    }

    #[test]
    fn parse_v6_with_payload() {
        let b = psh6();
        let p = TcpPacket::new_checked(&b[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port()), (443, 51000));
        assert!(p.psh() && p.ack());
        assert_eq!(p.payload(), b"hello, world\n");
        assert!(p.verify_checksum_v6(&SRC6, &DST6));
        assert!(!p.verify_checksum_v6(&DST6, &DST6));
    }

    #[test]
    fn fill_reproduces_known_values() {
        let mut b = syn();
        let mut p = TcpPacket::new_checked(&mut b[..]).unwrap();
        p.set_checksum(0xdead);
        p.fill_checksum_v4(SRC4, DST4);
        assert_eq!(p.checksum(), 0xe4e1);
        let mut b = psh6();
        let mut p = TcpPacket::new_checked(&mut b[..]).unwrap();
        p.fill_checksum_v6(&SRC6, &DST6);
        assert_eq!(p.checksum(), 0x3f08);
    }

    #[test]
    fn nat_rewrite_with_incremental_update() {
        // Rewrite the source address and port as NAT44 does; the RFC 1624
        // update must equal a full recomputation.
        let mut b = syn();
        let new_src = [203, 0, 113, 5];
        let mut p = TcpPacket::new_checked(&mut b[..]).unwrap();
        let c = checksum::update32(p.checksum(), SRC4, new_src);
        let c = checksum::update16(c, p.src_port(), 61000);
        p.set_src_port(61000);
        p.set_checksum(c);
        assert!(p.verify_checksum_v4(new_src, DST4));
        let mut full = b.clone();
        TcpPacket::new_unchecked(&mut full[..]).fill_checksum_v4(new_src, DST4);
        assert_eq!(full, b);
    }

    #[test]
    fn malformed() {
        let b = syn();
        for n in 0..20 {
            assert_eq!(
                TcpPacket::new_checked(&b[..n]).err(),
                Some(Error::Truncated)
            );
        }
        for n in 20..40 {
            assert_eq!(
                TcpPacket::new_checked(&b[..n]).err(),
                Some(Error::BadHeaderLen)
            );
        }
        for doff in 0..5u8 {
            let mut v = b.clone();
            v[12] = doff << 4;
            assert_eq!(
                TcpPacket::new_checked(&v[..]).err(),
                Some(Error::BadHeaderLen)
            );
        }
    }

    #[test]
    fn emit_round_trip() {
        let mut b = [0u8; 24];
        let mut p = TcpPacket::new_unchecked(&mut b[..]);
        p.set_src_port(1);
        p.set_dst_port(2);
        p.set_seq_number(3);
        p.set_ack_number(4);
        p.set_header_len(20);
        p.set_flags(flags::FIN | flags::ACK | flags::RST);
        p.set_window_len(5);
        p.set_urgent_at(6);
        p.payload_mut().copy_from_slice(b"data");
        assert_eq!(p.options_mut().len(), 0);
        p.fill_checksum_v4(SRC4, DST4);
        let p = TcpPacket::new_checked(&b[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port()), (1, 2));
        assert_eq!((p.seq_number(), p.ack_number()), (3, 4));
        assert!(p.fin() && p.ack() && p.rst() && !p.syn());
        assert_eq!((p.window_len(), p.urgent_at()), (5, 6));
        assert_eq!(p.payload(), b"data");
        assert!(p.verify_checksum_v4(SRC4, DST4));
    }

    #[test]
    fn header_len_change_never_panics() {
        let mut b = [0u8; 20];
        let mut p = TcpPacket::new_unchecked(&mut b[..]);
        p.set_header_len(60);
        assert_eq!(p.options().len(), 0);
        assert_eq!(p.payload().len(), 0);
        assert_eq!(p.options_mut().len(), 0);
        assert_eq!(p.payload_mut().len(), 0);
    }
}
