//! ICMP for IPv4 (RFC 792; RFC 1191 next-hop MTU).
//!
//! `new_checked` validates the 8-byte header once; after that no accessor or
//! setter panics, whatever the bytes hold. The checksum covers the whole
//! buffer given, which must be exactly the message. This module must never
//! allocate, and never parse the quoted packet of an error itself (use
//! `Ipv4Packet::new_checked_embedded` on [`Icmpv4Packet::data`]).

use crate::checksum;
use crate::{be16, be32, byte, clamp, clamp_mut, put16, put32, put8, Error, Result};

/// Byte offsets of the ICMPv4 header fields.
pub mod field {
    use core::ops::Range;
    /// Message type.
    pub const TYPE: usize = 0;
    /// Message code.
    pub const CODE: usize = 1;
    /// Checksum over the whole message.
    pub const CHECKSUM: Range<usize> = 2..4;
    /// Echo / timestamp / info / address-mask identifier.
    pub const ECHO_IDENT: Range<usize> = 4..6;
    /// Echo / timestamp / info / address-mask sequence number.
    pub const ECHO_SEQNO: Range<usize> = 6..8;
    /// Parameter Problem pointer.
    pub const POINTER: usize = 4;
    /// Next-hop MTU of "fragmentation needed" (RFC 1191).
    pub const MTU: Range<usize> = 6..8;
    /// The 32-bit rest of the header.
    pub const REST_OF_HEADER: Range<usize> = 4..8;
    /// Length of the header; data follows.
    pub const HEADER_LEN: usize = 8;
}

/// An ICMPv4 message type; `Unknown` keeps every other value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Icmpv4Type {
    /// Echo Reply (0).
    EchoReply,
    /// Destination Unreachable (3).
    DstUnreachable,
    /// Source Quench (4, deprecated).
    SourceQuench,
    /// Redirect (5).
    Redirect,
    /// Echo Request (8).
    EchoRequest,
    /// Router Advertisement (9).
    RouterAdvert,
    /// Router Solicitation (10).
    RouterSolicit,
    /// Time Exceeded (11).
    TimeExceeded,
    /// Parameter Problem (12).
    ParamProblem,
    /// Timestamp (13).
    Timestamp,
    /// Timestamp Reply (14).
    TimestampReply,
    /// Any other type.
    Unknown(u8),
}

impl From<u8> for Icmpv4Type {
    #[inline]
    fn from(v: u8) -> Self {
        match v {
            0 => Icmpv4Type::EchoReply,
            3 => Icmpv4Type::DstUnreachable,
            4 => Icmpv4Type::SourceQuench,
            5 => Icmpv4Type::Redirect,
            8 => Icmpv4Type::EchoRequest,
            9 => Icmpv4Type::RouterAdvert,
            10 => Icmpv4Type::RouterSolicit,
            11 => Icmpv4Type::TimeExceeded,
            12 => Icmpv4Type::ParamProblem,
            13 => Icmpv4Type::Timestamp,
            14 => Icmpv4Type::TimestampReply,
            other => Icmpv4Type::Unknown(other),
        }
    }
}

impl From<Icmpv4Type> for u8 {
    #[inline]
    fn from(t: Icmpv4Type) -> u8 {
        match t {
            Icmpv4Type::EchoReply => 0,
            Icmpv4Type::DstUnreachable => 3,
            Icmpv4Type::SourceQuench => 4,
            Icmpv4Type::Redirect => 5,
            Icmpv4Type::EchoRequest => 8,
            Icmpv4Type::RouterAdvert => 9,
            Icmpv4Type::RouterSolicit => 10,
            Icmpv4Type::TimeExceeded => 11,
            Icmpv4Type::ParamProblem => 12,
            Icmpv4Type::Timestamp => 13,
            Icmpv4Type::TimestampReply => 14,
            Icmpv4Type::Unknown(other) => other,
        }
    }
}

/// A read (and, with `AsMut`, write) view over an ICMPv4 message.
#[derive(Debug, Clone)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    /// Wraps a buffer without checking it (accessors return zeros past its end).
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Icmpv4Packet { buffer }
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
    pub fn msg_type(&self) -> Icmpv4Type {
        Icmpv4Type::from(byte(self.buffer.as_ref(), field::TYPE))
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

    /// Identifier of a query (echo, timestamp, info, address mask).
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ECHO_IDENT.start)
    }

    /// Sequence number of a query.
    #[inline]
    pub fn echo_seq_no(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ECHO_SEQNO.start)
    }

    /// The 32-bit rest of the header (bytes 4..8).
    #[inline]
    pub fn rest_of_header(&self) -> u32 {
        be32(self.buffer.as_ref(), field::REST_OF_HEADER.start)
    }

    /// Parameter Problem pointer (byte 4): the octet where the error was found.
    #[inline]
    pub fn pointer(&self) -> u8 {
        byte(self.buffer.as_ref(), field::POINTER)
    }

    /// Next-hop MTU of Destination Unreachable / Fragmentation Needed (RFC 1191).
    #[inline]
    pub fn mtu(&self) -> u16 {
        be16(self.buffer.as_ref(), field::MTU.start)
    }

    /// The data after the 8-byte header (for errors: the quoted packet).
    #[inline]
    pub fn data(&self) -> &[u8] {
        let d = self.buffer.as_ref();
        clamp(d, field::HEADER_LEN, d.len())
    }

    /// Is this an error message (types 3, 4, 5, 11, 12), quoting a packet?
    #[inline]
    pub fn is_error(&self) -> bool {
        matches!(byte(self.buffer.as_ref(), field::TYPE), 3 | 4 | 5 | 11 | 12)
    }

    /// Is this a query or its reply, carrying an identifier a NAT must map?
    ///
    /// Echo (8/0), Timestamp (13/14), Information (15/16) and Address Mask
    /// (17/18) all put an identifier at bytes 4..6 (RFC 792, RFC 950; the
    /// NAT behaviour is RFC 5508 §3.1).
    #[inline]
    pub fn is_query(&self) -> bool {
        matches!(byte(self.buffer.as_ref(), field::TYPE), 0 | 8 | 13..=18)
    }

    /// Does the checksum over the whole buffer verify?
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::fold(checksum::sum(self.buffer.as_ref())) == 0xFFFF
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    /// Sets the message type.
    #[inline]
    pub fn set_msg_type(&mut self, t: Icmpv4Type) {
        put8(self.buffer.as_mut(), field::TYPE, t.into());
    }

    /// Sets the message code.
    #[inline]
    pub fn set_msg_code(&mut self, code: u8) {
        put8(self.buffer.as_mut(), field::CODE, code);
    }

    /// Sets the query identifier.
    #[inline]
    pub fn set_echo_ident(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::ECHO_IDENT.start, v);
    }

    /// Sets the query sequence number.
    #[inline]
    pub fn set_echo_seq_no(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::ECHO_SEQNO.start, v);
    }

    /// Sets the 32-bit rest of the header.
    #[inline]
    pub fn set_rest_of_header(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::REST_OF_HEADER.start, v);
    }

    /// Sets the Parameter Problem pointer.
    #[inline]
    pub fn set_pointer(&mut self, v: u8) {
        put8(self.buffer.as_mut(), field::POINTER, v);
    }

    /// Sets the next-hop MTU (RFC 1191).
    #[inline]
    pub fn set_mtu(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::MTU.start, v);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM.start, c);
    }

    /// Computes and writes the checksum over the whole buffer.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
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

impl<T: AsRef<[u8]>> AsRef<[u8]> for Icmpv4Packet<T> {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{hex, IpProtocol, Ipv4Packet};

    /// A Windows-style echo request, ident 0x1234, seq 1, 32 bytes
    /// "abcdefghijklmnopqrstuvwabcdefghi"; checksum 0x3b27 (independent oracle).
    fn echo() -> Vec<u8> {
        let mut v = hex("0800 3b27 1234 0001");
        v.extend_from_slice(b"abcdefghijklmnopqrstuvwabcdefghi");
        v
    }

    #[test]
    fn parse_echo_request() {
        let b = echo();
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.msg_type(), Icmpv4Type::EchoRequest);
        assert_eq!(p.msg_code(), 0);
        assert_eq!(p.checksum(), 0x3b27);
        assert_eq!(p.echo_ident(), 0x1234);
        assert_eq!(p.echo_seq_no(), 1);
        assert_eq!(p.rest_of_header(), 0x1234_0001);
        assert_eq!(p.data().len(), 32);
        assert!(p.is_query() && !p.is_error());
        assert!(p.verify_checksum());
    }

    #[test]
    fn fill_reproduces_known_value() {
        let mut b = echo();
        let mut p = Icmpv4Packet::new_checked(&mut b[..]).unwrap();
        p.set_checksum(0);
        assert!(!p.verify_checksum());
        p.fill_checksum();
        assert_eq!(p.checksum(), 0x3b27);
    }

    #[test]
    fn frag_needed_error_quotes_a_packet() {
        // Dest unreachable / fragmentation needed, MTU 1400, quoting an IPv4
        // header (total length 1500, so the quote is truncated) + 8 bytes.
        let mut b = hex("0304 0000 0000 0578
             4500 05dc 0001 4000 4006 0000 0a00 0001 5db8 d822
             ad21 0050 1234 5678");
        let mut p = Icmpv4Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert!(p.is_error() && !p.is_query());
        assert_eq!(p.msg_type(), Icmpv4Type::DstUnreachable);
        assert_eq!((p.msg_code(), p.mtu()), (4, 1400));
        let inner = Ipv4Packet::new_checked_embedded(p.data()).unwrap();
        assert_eq!(inner.protocol(), IpProtocol::Tcp);
        assert_eq!(inner.payload().len(), 8);
        assert!(Ipv4Packet::new_checked(p.data()).is_err());
    }

    #[test]
    fn classification_of_every_type() {
        for t in 0..=255u8 {
            let b = [t, 0, 0, 0, 0, 0, 0, 0];
            let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
            assert_eq!(p.is_error(), [3, 4, 5, 11, 12].contains(&t), "{t}");
            assert_eq!(
                p.is_query(),
                [0, 8, 13, 14, 15, 16, 17, 18].contains(&t),
                "{t}"
            );
            assert_eq!(u8::from(Icmpv4Type::from(t)), t);
        }
    }

    #[test]
    fn malformed() {
        let b = echo();
        for n in 0..8 {
            assert_eq!(
                Icmpv4Packet::new_checked(&b[..n]).err(),
                Some(Error::Truncated)
            );
        }
        let p = Icmpv4Packet::new_checked(&b[..8]).unwrap();
        assert_eq!(p.data(), &[] as &[u8]);
    }

    #[test]
    fn emit_round_trip() {
        let mut b = [0u8; 12];
        let mut p = Icmpv4Packet::new_unchecked(&mut b[..]);
        p.set_msg_type(Icmpv4Type::EchoReply);
        p.set_msg_code(0);
        p.set_echo_ident(0xabcd);
        p.set_echo_seq_no(7);
        p.data_mut().copy_from_slice(b"pong");
        p.fill_checksum();
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.msg_type(), Icmpv4Type::EchoReply);
        assert_eq!((p.echo_ident(), p.echo_seq_no()), (0xabcd, 7));
        assert_eq!(p.data(), b"pong");
        assert!(p.verify_checksum());
        let mut b2 = b;
        let mut p = Icmpv4Packet::new_checked(&mut b2[..]).unwrap();
        p.set_rest_of_header(0x0000_05dc);
        assert_eq!(p.mtu(), 1500);
        p.set_pointer(9);
        p.set_mtu(576);
        assert_eq!((p.pointer(), p.mtu()), (9, 576));
        // Identifier rewrite by incremental update (NAT44 query mapping).
        let mut b3 = b;
        let mut p = Icmpv4Packet::new_checked(&mut b3[..]).unwrap();
        p.set_checksum(checksum::update16(p.checksum(), 0xabcd, 0x0101));
        p.set_echo_ident(0x0101);
        assert!(p.verify_checksum());
    }
}
