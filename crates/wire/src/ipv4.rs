//! IPv4 headers (RFC 791).
//!
//! `new_checked` validates version, IHL and total length once; after that no
//! accessor or setter panics, whatever the bytes hold or the setters write
//! (variable regions — options, payload — are clamped to the buffer). This
//! module must never allocate, and never trust `total_len` beyond the buffer.

use core::net::Ipv4Addr;

use crate::checksum;
use crate::{be16, byte, clamp, clamp_mut, put16, put8, Error, IpProtocol, Result};

/// Byte offsets of the IPv4 header fields.
pub mod field {
    use core::ops::Range;
    /// Version (high nibble) and IHL (low nibble, in 32-bit words).
    pub const VER_IHL: usize = 0;
    /// DSCP (high 6 bits) and ECN (low 2 bits).
    pub const DSCP_ECN: usize = 1;
    /// Total length of the datagram, header included.
    pub const LENGTH: Range<usize> = 2..4;
    /// Identification.
    pub const IDENT: Range<usize> = 4..6;
    /// Flags (3 bits) and fragment offset (13 bits, in 8-byte units).
    pub const FLG_OFF: Range<usize> = 6..8;
    /// Time to live.
    pub const TTL: usize = 8;
    /// Protocol of the payload.
    pub const PROTOCOL: usize = 9;
    /// Header checksum.
    pub const CHECKSUM: Range<usize> = 10..12;
    /// Source address.
    pub const SRC_ADDR: Range<usize> = 12..16;
    /// Destination address.
    pub const DST_ADDR: Range<usize> = 16..20;
    /// Length of a header without options.
    pub const HEADER_LEN: usize = 20;
}

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1FFF;

/// A read (and, with `AsMut`, write) view over an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps a buffer without checking it (accessors return zeros past its end).
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Checks everything but `total_len <= buffer len`.
    #[inline]
    fn check_header(&self) -> Result<()> {
        let data = self.buffer.as_ref();
        if data.len() < field::HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 4 {
            return Err(Error::BadVersion);
        }
        let hl = self.header_len();
        if hl < field::HEADER_LEN || hl > data.len() {
            return Err(Error::BadHeaderLen);
        }
        if usize::from(self.total_len()) < hl {
            return Err(Error::BadLength);
        }
        Ok(())
    }

    /// Wraps a received packet: version 4, 5 <= IHL, header within the
    /// buffer, header <= total length <= buffer (bytes past `total_len` are
    /// link-layer padding and ignored).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_header()?;
        if usize::from(p.total_len()) > p.buffer.as_ref().len() {
            return Err(Error::BadLength);
        }
        Ok(p)
    }

    /// Wraps the packet quoted in an ICMP error: as `new_checked`, but
    /// `total_len` may exceed the buffer since the quote is truncated.
    #[inline]
    pub fn new_checked_embedded(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_header()?;
        Ok(p)
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// IP version (4 for a checked packet).
    #[inline]
    pub fn version(&self) -> u8 {
        byte(self.buffer.as_ref(), field::VER_IHL) >> 4
    }

    /// Header length in bytes (IHL * 4), options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(byte(self.buffer.as_ref(), field::VER_IHL) & 0x0F) * 4
    }

    /// The DSCP/ECN byte (formerly TOS).
    #[inline]
    pub fn dscp_ecn(&self) -> u8 {
        byte(self.buffer.as_ref(), field::DSCP_ECN)
    }

    /// Total length of the datagram in bytes, header included.
    #[inline]
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// Identification field.
    #[inline]
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT.start)
    }

    /// Don't Fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF.start) & FLAG_DF != 0
    }

    /// More Fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF.start) & FLAG_MF != 0
    }

    /// Fragment offset in bytes (the 13-bit field times 8).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (be16(self.buffer.as_ref(), field::FLG_OFF.start) & OFFSET_MASK) << 3
    }

    /// Is this a fragment (MF set or a non-zero offset)?
    #[inline]
    pub fn is_fragment(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF.start) & (FLAG_MF | OFFSET_MASK) != 0
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        byte(self.buffer.as_ref(), field::TTL)
    }

    /// Protocol of the payload.
    #[inline]
    pub fn protocol(&self) -> IpProtocol {
        IpProtocol::from(byte(self.buffer.as_ref(), field::PROTOCOL))
    }

    /// Header checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// Source address as raw bytes.
    #[inline]
    pub fn src_bytes(&self) -> [u8; 4] {
        addr(self.buffer.as_ref(), field::SRC_ADDR.start)
    }

    /// Destination address as raw bytes.
    #[inline]
    pub fn dst_bytes(&self) -> [u8; 4] {
        addr(self.buffer.as_ref(), field::DST_ADDR.start)
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.src_bytes())
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.dst_bytes())
    }

    /// The whole header, options included (clamped to the buffer).
    #[inline]
    pub fn header(&self) -> &[u8] {
        clamp(self.buffer.as_ref(), 0, self.header_len())
    }

    /// The options (bytes 20..header_len), empty when IHL is 5.
    #[inline]
    pub fn options(&self) -> &[u8] {
        clamp(self.buffer.as_ref(), field::HEADER_LEN, self.header_len())
    }

    /// The payload: `header_len..min(total_len, buffer len)`.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let end = usize::from(self.total_len());
        clamp(self.buffer.as_ref(), self.header_len(), end)
    }

    /// Does the header checksum verify?
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::fold(checksum::sum(self.header())) == 0xFFFF
    }
}

/// Reads an IPv4 address at `off` (zeros past the end).
#[inline]
fn addr(data: &[u8], off: usize) -> [u8; 4] {
    match data.get(off..off + 4) {
        Some(&[a, b, c, d]) => [a, b, c, d],
        _ => [0; 4],
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets the version nibble (for building a header).
    #[inline]
    pub fn set_version(&mut self, version: u8) {
        let d = self.buffer.as_mut();
        let v = byte(d, field::VER_IHL);
        put8(d, field::VER_IHL, (v & 0x0F) | (version << 4));
    }

    /// Sets the header length in bytes (rounded down to 32-bit words, max 60).
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        let d = self.buffer.as_mut();
        let v = byte(d, field::VER_IHL);
        let ihl = (len / 4).min(15) as u8;
        put8(d, field::VER_IHL, (v & 0xF0) | ihl);
    }

    /// Sets the DSCP/ECN byte.
    #[inline]
    pub fn set_dscp_ecn(&mut self, v: u8) {
        put8(self.buffer.as_mut(), field::DSCP_ECN, v);
    }

    /// Sets the total length.
    #[inline]
    pub fn set_total_len(&mut self, len: u16) {
        put16(self.buffer.as_mut(), field::LENGTH.start, len);
    }

    /// Sets the identification.
    #[inline]
    pub fn set_ident(&mut self, ident: u16) {
        put16(self.buffer.as_mut(), field::IDENT.start, ident);
    }

    /// Sets DF, MF and the fragment offset (in bytes; the low 3 bits are dropped).
    #[inline]
    pub fn set_flags_and_offset(&mut self, df: bool, mf: bool, offset_bytes: u16) {
        let mut v = (offset_bytes >> 3) & OFFSET_MASK;
        if df {
            v |= FLAG_DF;
        }
        if mf {
            v |= FLAG_MF;
        }
        put16(self.buffer.as_mut(), field::FLG_OFF.start, v);
    }

    /// Sets the time to live.
    #[inline]
    pub fn set_ttl(&mut self, ttl: u8) {
        put8(self.buffer.as_mut(), field::TTL, ttl);
    }

    /// Sets the payload protocol.
    #[inline]
    pub fn set_protocol(&mut self, p: IpProtocol) {
        put8(self.buffer.as_mut(), field::PROTOCOL, p.into());
    }

    /// Sets the header checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM.start, c);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        if let Some(d) = self.buffer.as_mut().get_mut(field::SRC_ADDR) {
            d.copy_from_slice(&a.octets());
        }
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        if let Some(d) = self.buffer.as_mut().get_mut(field::DST_ADDR) {
            d.copy_from_slice(&a.octets());
        }
    }

    /// Recomputes and writes the header checksum.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.header());
        self.set_checksum(c);
    }

    /// The whole header, mutably (clamped to the buffer).
    #[inline]
    pub fn header_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        clamp_mut(self.buffer.as_mut(), 0, hl)
    }

    /// The payload, mutably: `header_len..min(total_len, buffer len)`.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, end) = (self.header_len(), usize::from(self.total_len()));
        clamp_mut(self.buffer.as_mut(), hl, end)
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Ipv4Packet<T> {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A UDP datagram 192.168.0.1 -> 192.168.0.199, total length 0x73, DF,
    // TTL 64, checksum 0xb861 (the classic worked example); payload zeros.
    fn classic() -> [u8; 0x73] {
        let mut b = [0u8; 0x73];
        b[..20].copy_from_slice(&[
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ]);
        b
    }

    #[test]
    fn parse_classic() {
        let b = classic();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.dscp_ecn(), 0);
        assert_eq!(p.total_len(), 0x73);
        assert_eq!(p.ident(), 0);
        assert!(p.dont_frag());
        assert!(!p.more_frags());
        assert_eq!(p.frag_offset(), 0);
        assert!(!p.is_fragment());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), IpProtocol::Udp);
        assert_eq!(p.checksum(), 0xb861);
        assert_eq!(p.src_addr(), Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(192, 168, 0, 199));
        assert_eq!(p.src_bytes(), [192, 168, 0, 1]);
        assert_eq!(p.options(), &[] as &[u8]);
        assert_eq!(p.payload().len(), 0x73 - 20);
        assert!(p.verify_checksum());
    }

    #[test]
    fn fill_checksum_reproduces_known_value() {
        let mut b = classic();
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.set_checksum(0);
        assert!(!p.verify_checksum());
        p.fill_checksum();
        assert_eq!(p.checksum(), 0xb861);
    }

    #[test]
    fn ethernet_padding_ignored() {
        // A 20-byte header with 2 payload bytes in a 46-byte minimum frame body.
        let mut b = [0u8; 46];
        b[..22].copy_from_slice(&[
            0x45, 0, 0, 22, 0x12, 0x34, 0, 0, 1, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0xaa, 0xbb,
        ]);
        b[30] = 0xff; // padding garbage
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum();
        assert_eq!(p.payload(), &[0xaa, 0xbb]);
        assert_eq!(p.payload_mut().len(), 2);
        assert!(p.verify_checksum());
    }

    #[test]
    fn options_skipped_for_every_ihl() {
        for ihl in 6..=15usize {
            let hl = ihl * 4;
            let mut b = [0u8; 80];
            b[0] = 0x40 | ihl as u8;
            b[3] = (hl + 4) as u8;
            b[9] = 6;
            b[20..hl].fill(0x01); // NOP options
            b[hl..hl + 4].copy_from_slice(&[1, 2, 3, 4]);
            let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
            p.fill_checksum();
            assert_eq!(p.header_len(), hl);
            assert_eq!(p.options().len(), hl - 20);
            assert_eq!(p.payload(), &[1, 2, 3, 4]);
            assert!(p.verify_checksum());
            // The checksum covers the options.
            b[21] ^= 0xff;
            assert!(!Ipv4Packet::new_checked(&b[..]).unwrap().verify_checksum());
        }
    }

    #[test]
    fn malformed() {
        let b = classic();
        // Bad version.
        let mut v = b;
        v[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&v[..]).err(),
            Some(Error::BadVersion)
        );
        // IHL below 5.
        for ihl in 0..5u8 {
            let mut v = b;
            v[0] = 0x40 | ihl;
            assert_eq!(
                Ipv4Packet::new_checked(&v[..]).err(),
                Some(Error::BadHeaderLen)
            );
        }
        // IHL past the buffer.
        let mut v = [0u8; 24];
        v[..20].copy_from_slice(&b[..20]);
        v[0] = 0x47;
        v[3] = 24;
        assert_eq!(
            Ipv4Packet::new_checked(&v[..]).err(),
            Some(Error::BadHeaderLen)
        );
        // total_len past the buffer, and below the header.
        assert_eq!(
            Ipv4Packet::new_checked(&b[..0x72]).err(),
            Some(Error::BadLength)
        );
        let mut v = b;
        v[3] = 19;
        assert_eq!(
            Ipv4Packet::new_checked(&v[..]).err(),
            Some(Error::BadLength)
        );
        // Truncated.
        for n in 0..20 {
            assert_eq!(
                Ipv4Packet::new_checked(&b[..n]).err(),
                Some(Error::Truncated)
            );
        }
    }

    #[test]
    fn embedded_accepts_truncated_quote() {
        let b = classic();
        let q = &b[..28];
        assert!(Ipv4Packet::new_checked(q).is_err());
        let p = Ipv4Packet::new_checked_embedded(q).unwrap();
        assert_eq!(p.total_len(), 0x73);
        assert_eq!(p.payload().len(), 8);
        let mut v = b;
        v[3] = 10;
        assert_eq!(
            Ipv4Packet::new_checked_embedded(&v[..28]).err(),
            Some(Error::BadLength)
        );
    }

    #[test]
    fn emit_round_trip() {
        let mut b = [0u8; 28];
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        p.set_version(4);
        p.set_header_len(20);
        p.set_dscp_ecn(0xb8);
        p.set_total_len(28);
        p.set_ident(0xbeef);
        p.set_flags_and_offset(false, true, 1480);
        p.set_ttl(63);
        p.set_protocol(IpProtocol::Icmp);
        p.set_src_addr(Ipv4Addr::new(198, 51, 100, 7));
        p.set_dst_addr(Ipv4Addr::new(203, 0, 113, 9));
        p.fill_checksum();
        p.payload_mut().copy_from_slice(&[8, 0, 0, 0, 0, 0, 0, 0]);
        p.header_mut()[1] = 0xb8;
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.dscp_ecn(), 0xb8);
        assert_eq!(p.total_len(), 28);
        assert_eq!(p.ident(), 0xbeef);
        assert!(!p.dont_frag());
        assert!(p.more_frags());
        assert_eq!(p.frag_offset(), 1480);
        assert!(p.is_fragment());
        assert_eq!(p.ttl(), 63);
        assert_eq!(p.protocol(), IpProtocol::Icmp);
        assert_eq!(p.src_addr(), Ipv4Addr::new(198, 51, 100, 7));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(203, 0, 113, 9));
        assert!(p.verify_checksum());
        assert_eq!(p.payload()[0], 8);
    }

    #[test]
    fn setters_cannot_make_accessors_panic() {
        let mut b = classic();
        let mut p = Ipv4Packet::new_checked_embedded(&mut b[..24]).unwrap();
        p.set_header_len(60);
        p.set_total_len(u16::MAX);
        assert_eq!(p.header_len(), 60);
        assert_eq!(p.options().len(), 4);
        assert_eq!(p.header().len(), 24);
        assert_eq!(p.payload(), &[] as &[u8]);
        assert_eq!(p.payload_mut().len(), 0);
        p.fill_checksum();
        assert!(p.verify_checksum());
    }
}
