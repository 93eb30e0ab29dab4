//! ICMP for IPv6 (RFC 4443; Neighbor Discovery types from RFC 4861).
//!
//! `new_checked` validates the 8-byte header once; after that no accessor or
//! setter panics, whatever the bytes hold. The checksum covers an IPv6
//! pseudo-header and the whole buffer given, which must be exactly the
//! message. This module must never allocate, and never parse the quoted
//! packet of an error itself (use `Ipv6Packet::new_checked_embedded`).

use crate::checksum;
use crate::{be16, be32, byte, clamp, clamp_mut, put16, put32, put8, Error, Result};

/// Byte offsets of the ICMPv6 header fields.
pub mod field {
    use core::ops::Range;
    /// Message type.
    pub const TYPE: usize = 0;
    /// Message code.
    pub const CODE: usize = 1;
    /// Checksum over the pseudo-header and the whole message.
    pub const CHECKSUM: Range<usize> = 2..4;
    /// Echo identifier.
    pub const ECHO_IDENT: Range<usize> = 4..6;
    /// Echo sequence number.
    pub const ECHO_SEQNO: Range<usize> = 6..8;
    /// Packet Too Big MTU / Parameter Problem pointer (32 bits).
    pub const REST_OF_HEADER: Range<usize> = 4..8;
    /// Length of the header; data follows.
    pub const HEADER_LEN: usize = 8;
}

/// IANA next-header number of ICMPv6, for the pseudo-header.
const PROTOCOL: u8 = 58;

/// An ICMPv6 message type; `Unknown` keeps every other value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Icmpv6Type {
    /// Destination Unreachable (1).
    DstUnreachable,
    /// Packet Too Big (2).
    PacketTooBig,
    /// Time Exceeded (3).
    TimeExceeded,
    /// Parameter Problem (4).
    ParamProblem,
    /// Echo Request (128).
    EchoRequest,
    /// Echo Reply (129).
    EchoReply,
    /// Router Solicitation (133).
    RouterSolicit,
    /// Router Advertisement (134).
    RouterAdvert,
    /// Neighbor Solicitation (135).
    NeighborSolicit,
    /// Neighbor Advertisement (136).
    NeighborAdvert,
    /// Redirect (137).
    Redirect,
    /// Any other type.
    Unknown(u8),
}

impl From<u8> for Icmpv6Type {
    #[inline]
    fn from(v: u8) -> Self {
        match v {
            1 => Icmpv6Type::DstUnreachable,
            2 => Icmpv6Type::PacketTooBig,
            3 => Icmpv6Type::TimeExceeded,
            4 => Icmpv6Type::ParamProblem,
            128 => Icmpv6Type::EchoRequest,
            129 => Icmpv6Type::EchoReply,
            133 => Icmpv6Type::RouterSolicit,
            134 => Icmpv6Type::RouterAdvert,
            135 => Icmpv6Type::NeighborSolicit,
            136 => Icmpv6Type::NeighborAdvert,
            137 => Icmpv6Type::Redirect,
            other => Icmpv6Type::Unknown(other),
        }
    }
}

impl From<Icmpv6Type> for u8 {
    #[inline]
    fn from(t: Icmpv6Type) -> u8 {
        match t {
            Icmpv6Type::DstUnreachable => 1,
            Icmpv6Type::PacketTooBig => 2,
            Icmpv6Type::TimeExceeded => 3,
            Icmpv6Type::ParamProblem => 4,
            Icmpv6Type::EchoRequest => 128,
            Icmpv6Type::EchoReply => 129,
            Icmpv6Type::RouterSolicit => 133,
            Icmpv6Type::RouterAdvert => 134,
            Icmpv6Type::NeighborSolicit => 135,
            Icmpv6Type::NeighborAdvert => 136,
            Icmpv6Type::Redirect => 137,
            Icmpv6Type::Unknown(other) => other,
        }
    }
}

/// A read (and, with `AsMut`, write) view over an ICMPv6 message.
#[derive(Debug, Clone)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// Wraps a buffer without checking it (accessors return zeros past its end).
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Icmpv6Packet { buffer }
    }

    /// Wraps a message of at least 8 bytes.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        if p.buffer.as_ref().len() < field::HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(p)
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Message type.
    #[inline]
    pub fn msg_type(&self) -> Icmpv6Type {
        Icmpv6Type::from(byte(self.buffer.as_ref(), field::TYPE))
    }

    /// Message code.
    #[inline]
    pub fn msg_code(&self) -> u8 {
        byte(self.buffer.as_ref(), field::CODE)
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// Echo identifier.
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ECHO_IDENT.start)
    }

    /// Echo sequence number.
    #[inline]
    pub fn echo_seq_no(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ECHO_SEQNO.start)
    }

    /// The 32-bit rest of the header (bytes 4..8).
    #[inline]
    pub fn rest_of_header(&self) -> u32 {
        be32(self.buffer.as_ref(), field::REST_OF_HEADER.start)
    }

    /// MTU of a Packet Too Big message (RFC 4443 §3.2).
    #[inline]
    pub fn mtu(&self) -> u32 {
        self.rest_of_header()
    }

    /// Pointer of a Parameter Problem message (RFC 4443 §3.4).
    #[inline]
    pub fn pointer(&self) -> u32 {
        self.rest_of_header()
    }

    /// The data after the 8-byte header (for errors: the quoted packet).
    #[inline]
    pub fn data(&self) -> &[u8] {
        let d = self.buffer.as_ref();
        clamp(d, field::HEADER_LEN, d.len())
    }

    /// Is this an error message (type < 128, RFC 4443 §2.1)?
    #[inline]
    pub fn is_error(&self) -> bool {
        byte(self.buffer.as_ref(), field::TYPE) < 128
    }

    /// Is this an Echo Request or Reply, carrying an identifier a NAT must map?
    #[inline]
    pub fn is_query(&self) -> bool {
        matches!(byte(self.buffer.as_ref(), field::TYPE), 128 | 129)
    }

    /// Does the checksum verify over the IPv6 pseudo-header and the whole buffer?
    #[inline]
    pub fn verify_checksum(&self, src: &[u8; 16], dst: &[u8; 16]) -> bool {
        let data = self.buffer.as_ref();
        let ph = checksum::pseudo_header_v6(src, dst, PROTOCOL, data.len() as u32);
        checksum::fold(checksum::combine(ph, checksum::sum(data))) == 0xFFFF
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    /// Sets the message type.
    #[inline]
    pub fn set_msg_type(&mut self, t: Icmpv6Type) {
        put8(self.buffer.as_mut(), field::TYPE, t.into());
    }

    /// Sets the message code.
    #[inline]
    pub fn set_msg_code(&mut self, code: u8) {
        put8(self.buffer.as_mut(), field::CODE, code);
    }

    /// Sets the echo identifier.
    #[inline]
    pub fn set_echo_ident(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::ECHO_IDENT.start, v);
    }

    /// Sets the echo sequence number.
    #[inline]
    pub fn set_echo_seq_no(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::ECHO_SEQNO.start, v);
    }

    /// Sets the 32-bit rest of the header.
    #[inline]
    pub fn set_rest_of_header(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::REST_OF_HEADER.start, v);
    }

    /// Sets the Packet Too Big MTU.
    #[inline]
    pub fn set_mtu(&mut self, v: u32) {
        self.set_rest_of_header(v);
    }

    /// Sets the Parameter Problem pointer.
    #[inline]
    pub fn set_pointer(&mut self, v: u32) {
        self.set_rest_of_header(v);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM.start, c);
    }

    /// Computes and writes the checksum over the pseudo-header and the whole buffer.
    #[inline]
    pub fn fill_checksum(&mut self, src: &[u8; 16], dst: &[u8; 16]) {
        self.set_checksum(0);
        let data = self.buffer.as_ref();
        let ph = checksum::pseudo_header_v6(src, dst, PROTOCOL, data.len() as u32);
        let c = !checksum::fold(checksum::combine(ph, checksum::sum(data)));
        self.set_checksum(c);
    }

    /// The data after the header, mutably.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let d = self.buffer.as_mut();
        let end = d.len();
        clamp_mut(d, field::HEADER_LEN, end)
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Icmpv6Packet<T> {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{hex, IpProtocol, Ipv6Packet};

    const SRC: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const DST: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

    /// Echo request 2001:db8::1 -> 2001:db8::2, ident 0x1234, seq 1,
    /// "abcdefgh"; checksum 0x8075 (independent oracle).
    fn echo() -> Vec<u8> {
        hex("8000 8075 1234 0001 6162 6364 6566 6768")
    }

    #[test]
    fn parse_echo_request() {
        let b = echo();
        let p = Icmpv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.msg_type(), Icmpv6Type::EchoRequest);
        assert_eq!(p.msg_code(), 0);
        assert_eq!(p.checksum(), 0x8075);
        assert_eq!((p.echo_ident(), p.echo_seq_no()), (0x1234, 1));
        assert_eq!(p.rest_of_header(), 0x1234_0001);
        assert_eq!(p.data(), b"abcdefgh");
        assert!(!p.is_error() && p.is_query());
        assert!(p.verify_checksum(&SRC, &DST));
        assert!(!p.verify_checksum(&DST, &SRC.map(|b| b ^ 1)));
    }

    #[test]
    fn fill_reproduces_known_value() {
        let mut b = echo();
        let mut p = Icmpv6Packet::new_checked(&mut b[..]).unwrap();
        p.set_checksum(0x1111);
        p.fill_checksum(&SRC, &DST);
        assert_eq!(p.checksum(), 0x8075);
    }

    #[test]
    fn packet_too_big_quotes_a_packet() {
        // PTB, MTU 1280, quoting an IPv6 header (payload length 1400 > quote)
        // with a Fragment header and 8 bytes of UDP.
        let mut b = hex("0200 0000 0000 0500");
        let mut inner = hex("6000 0000 0578 2c40");
        inner.extend_from_slice(&SRC);
        inner.extend_from_slice(&DST);
        inner.extend_from_slice(&hex("1100 0001 0000 0009 04d2 0035 0570 0000"));
        b.extend_from_slice(&inner);
        let mut p = Icmpv6Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum(&DST, &SRC);
        assert!(p.verify_checksum(&DST, &SRC));
        assert!(p.is_error() && !p.is_query());
        assert_eq!(p.msg_type(), Icmpv6Type::PacketTooBig);
        assert_eq!(p.mtu(), 1280);
        let q = Ipv6Packet::new_checked_embedded(p.data()).unwrap();
        let up = q.upper_layer().unwrap();
        assert_eq!((up.protocol, up.offset), (IpProtocol::Udp, 48));
        assert_eq!(up.fragment.map(|f| (f.more, f.ident)), Some((true, 9)));
    }

    #[test]
    fn type_round_trip_and_classes() {
        for t in 0..=255u8 {
            assert_eq!(u8::from(Icmpv6Type::from(t)), t);
            let b = [t, 0, 0, 0, 0, 0, 0, 0];
            let p = Icmpv6Packet::new_checked(&b[..]).unwrap();
            assert_eq!(p.is_error(), t < 128);
            assert_eq!(p.is_query(), t == 128 || t == 129);
        }
        assert_eq!(Icmpv6Type::from(135), Icmpv6Type::NeighborSolicit);
    }

    #[test]
    fn malformed() {
        let b = echo();
        for n in 0..8 {
            assert_eq!(
                Icmpv6Packet::new_checked(&b[..n]).err(),
                Some(Error::Truncated)
            );
        }
    }

    #[test]
    fn emit_round_trip() {
        let mut b = [0u8; 12];
        let mut p = Icmpv6Packet::new_unchecked(&mut b[..]);
        p.set_msg_type(Icmpv6Type::ParamProblem);
        p.set_msg_code(0);
        p.set_pointer(6);
        p.data_mut().copy_from_slice(&[0x60, 0, 0, 0]);
        p.fill_checksum(&SRC, &DST);
        let p = Icmpv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.msg_type(), Icmpv6Type::ParamProblem);
        assert_eq!(p.pointer(), 6);
        assert!(p.verify_checksum(&SRC, &DST));
        let mut b2 = b;
        let mut p = Icmpv6Packet::new_checked(&mut b2[..]).unwrap();
        p.set_mtu(1500);
        p.set_echo_ident(1);
        p.set_echo_seq_no(2);
        assert_eq!(p.rest_of_header(), 0x0001_0002);
        // An address change (NAT66/NPT) through update_bytes on the pseudo-header.
        let mut b3 = b;
        let mut p = Icmpv6Packet::new_checked(&mut b3[..]).unwrap();
        let new_src = [0xfd; 16];
        p.set_checksum(checksum::update_bytes(p.checksum(), &SRC, &new_src));
        assert!(p.verify_checksum(&new_src, &DST));
    }
}
