//! IPv6 headers (RFC 8200) and the walk over the extension-header chain.
//!
//! `new_checked` validates the fixed header and the payload length once;
//! after that no accessor or setter panics, whatever the bytes hold. The
//! chain walk is bounded ([`MAX_EXTENSION_HEADERS`]) and bounds-checked. This
//! module must never allocate, and never follow an extension header past the
//! bytes that are present.

use core::net::Ipv6Addr;

use crate::{be16, be32, byte, clamp, clamp_mut, put16, put32, put8, Error, IpProtocol, Result};

/// Byte offsets of the IPv6 header fields.
pub mod field {
    use core::ops::Range;
    /// Version (4 bits), traffic class (8 bits), flow label (20 bits).
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    /// Payload length (everything after the fixed header).
    pub const LENGTH: Range<usize> = 4..6;
    /// Next header.
    pub const NXT_HDR: usize = 6;
    /// Hop limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source address.
    pub const SRC_ADDR: Range<usize> = 8..24;
    /// Destination address.
    pub const DST_ADDR: Range<usize> = 24..40;
    /// Length of the fixed header.
    pub const HEADER_LEN: usize = 40;
}

/// How many extension headers `upper_layer` follows before giving up.
pub const MAX_EXTENSION_HEADERS: usize = 8;

/// What a Fragment header says (RFC 8200 §4.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv6Fragment {
    /// Offset of the Fragment header from the start of the IPv6 header.
    pub header_offset: usize,
    /// Fragment offset in bytes (the 13-bit field times 8).
    pub offset: u16,
    /// More Fragments flag.
    pub more: bool,
    /// Identification.
    pub ident: u32,
}

/// The end of the extension-header chain, as found by [`Ipv6Packet::upper_layer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv6Upper {
    /// The upper-layer protocol (or `Ipv6NoNxt`, `Esp`, or an unknown number).
    pub protocol: IpProtocol,
    /// Offset of the upper-layer header from the start of the IPv6 header
    /// (for a non-first fragment: of the fragment data).
    pub offset: usize,
    /// The Fragment header, if one was found.
    pub fragment: Option<Ipv6Fragment>,
    /// Segments Left of the last Routing header, 0 if none.
    pub routing_segments_left: u8,
}

/// A read (and, with `AsMut`, write) view over an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps a buffer without checking it (accessors return zeros past its end).
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Checks the length and version of the fixed header.
    #[inline]
    fn check_header(&self) -> Result<()> {
        if self.buffer.as_ref().len() < field::HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 6 {
            return Err(Error::BadVersion);
        }
        Ok(())
    }

    /// Wraps a received packet: version 6, 40 + payload length <= buffer
    /// (bytes past that are link-layer padding and ignored).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_header()?;
        if field::HEADER_LEN + usize::from(p.payload_len()) > p.buffer.as_ref().len() {
            return Err(Error::BadLength);
        }
        Ok(p)
    }

    /// Wraps the packet quoted in an ICMPv6 error: the payload length may
    /// exceed the buffer since the quote is truncated.
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

    /// IP version (6 for a checked packet).
    #[inline]
    pub fn version(&self) -> u8 {
        byte(self.buffer.as_ref(), 0) >> 4
    }

    /// Traffic class (DSCP and ECN).
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (be16(self.buffer.as_ref(), 0) >> 4) as u8
    }

    /// Flow label (20 bits).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VER_TC_FLOW.start) & 0x000F_FFFF
    }

    /// Payload length: bytes after the fixed header, extension headers included.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// Next header of the fixed header.
    #[inline]
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol::from(byte(self.buffer.as_ref(), field::NXT_HDR))
    }

    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        byte(self.buffer.as_ref(), field::HOP_LIMIT)
    }

    /// Source address as raw bytes.
    #[inline]
    pub fn src_bytes(&self) -> [u8; 16] {
        addr(self.buffer.as_ref(), field::SRC_ADDR.start)
    }

    /// Destination address as raw bytes.
    #[inline]
    pub fn dst_bytes(&self) -> [u8; 16] {
        addr(self.buffer.as_ref(), field::DST_ADDR.start)
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.src_bytes())
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.dst_bytes())
    }

    /// End of the packet: `min(40 + payload_len, buffer len)`.
    #[inline]
    fn end(&self) -> usize {
        (field::HEADER_LEN + usize::from(self.payload_len())).min(self.buffer.as_ref().len())
    }

    /// The payload (extension headers included): `40..min(40 + payload_len, buffer len)`.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        clamp(self.buffer.as_ref(), field::HEADER_LEN, self.end())
    }

    /// Walks the extension headers to the upper-layer protocol.
    ///
    /// Follows Hop-by-Hop (0, only directly after the fixed header, RFC 8200
    /// §4.1), Routing (43), Fragment (44, at most one), Destination Options
    /// (60) and AH (51, length `(len + 2) * 4`, RFC 4302) — at most
    /// [`MAX_EXTENSION_HEADERS`] of them. Stops at anything else (including
    /// No Next Header 59 and ESP 50) and after a non-first fragment, whose
    /// bytes are data, not headers. A header running past the packet gives
    /// `Truncated`; a chain too long or malformed gives `ExtensionChain`.
    #[inline]
    pub fn upper_layer(&self) -> Result<Ipv6Upper> {
        let data = self.buffer.as_ref();
        let end = self.end();
        let mut nh = byte(data, field::NXT_HDR);
        let mut off = field::HEADER_LEN;
        let mut fragment = None;
        let mut routing_segments_left = 0;
        let mut count = 0;
        loop {
            if !matches!(nh, 0 | 43 | 44 | 51 | 60) {
                return Ok(Ipv6Upper {
                    protocol: IpProtocol::from(nh),
                    offset: off,
                    fragment,
                    routing_segments_left,
                });
            }
            if count == MAX_EXTENSION_HEADERS || (nh == 0 && count != 0) {
                return Err(Error::ExtensionChain);
            }
            count += 1;
            let hdr = clamp(data, off, end);
            if hdr.len() < 8 {
                // Every extension header is at least 8 bytes long.
                return Err(Error::Truncated);
            }
            let len = match nh {
                44 => 8,
                51 => (usize::from(hdr[1]) + 2) * 4,
                _ => (usize::from(hdr[1]) + 1) * 8,
            };
            if len > hdr.len() {
                return Err(Error::Truncated);
            }
            let next = hdr[0];
            match nh {
                43 => routing_segments_left = hdr[3],
                44 => {
                    if fragment.is_some() {
                        return Err(Error::ExtensionChain);
                    }
                    let off_flags = u16::from_be_bytes([hdr[2], hdr[3]]);
                    let frag = Ipv6Fragment {
                        header_offset: off,
                        offset: off_flags & !0x7,
                        more: off_flags & 1 != 0,
                        ident: u32::from_be_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]),
                    };
                    fragment = Some(frag);
                    if frag.offset != 0 {
                        return Ok(Ipv6Upper {
                            protocol: IpProtocol::from(next),
                            offset: off + len,
                            fragment,
                            routing_segments_left,
                        });
                    }
                }
                _ => {}
            }
            nh = next;
            off += len;
        }
    }
}

/// Reads an IPv6 address at `off` (zeros past the end).
#[inline]
fn addr(data: &[u8], off: usize) -> [u8; 16] {
    let mut out = [0u8; 16];
    if let Some(s) = data.get(off..off + 16) {
        out.copy_from_slice(s);
    }
    out
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets the version nibble (for building a header).
    #[inline]
    pub fn set_version(&mut self, version: u8) {
        let d = self.buffer.as_mut();
        let v = byte(d, 0);
        put8(d, 0, (v & 0x0F) | (version << 4));
    }

    /// Sets the traffic class.
    #[inline]
    pub fn set_traffic_class(&mut self, tc: u8) {
        let d = self.buffer.as_mut();
        let v = be16(d, 0);
        put16(d, 0, (v & 0xF00F) | (u16::from(tc) << 4));
    }

    /// Sets the flow label (the low 20 bits of `label`).
    #[inline]
    pub fn set_flow_label(&mut self, label: u32) {
        let d = self.buffer.as_mut();
        let v = be32(d, 0);
        put32(d, 0, (v & 0xFFF0_0000) | (label & 0x000F_FFFF));
    }

    /// Sets the payload length.
    #[inline]
    pub fn set_payload_len(&mut self, len: u16) {
        put16(self.buffer.as_mut(), field::LENGTH.start, len);
    }

    /// Sets the next header of the fixed header.
    #[inline]
    pub fn set_next_header(&mut self, p: IpProtocol) {
        put8(self.buffer.as_mut(), field::NXT_HDR, p.into());
    }

    /// Sets the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, h: u8) {
        put8(self.buffer.as_mut(), field::HOP_LIMIT, h);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        if let Some(d) = self.buffer.as_mut().get_mut(field::SRC_ADDR) {
            d.copy_from_slice(&a.octets());
        }
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        if let Some(d) = self.buffer.as_mut().get_mut(field::DST_ADDR) {
            d.copy_from_slice(&a.octets());
        }
    }

    /// The payload, mutably: `40..min(40 + payload_len, buffer len)`.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.end();
        clamp_mut(self.buffer.as_mut(), field::HEADER_LEN, end)
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Ipv6Packet<T> {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const DST: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

    /// A fixed header (tc 0xb8, flow 0x12345, hop limit 64) followed by `rest`.
    fn packet(next: u8, rest: &[u8]) -> Vec<u8> {
        let mut v = vec![0x6b, 0x81, 0x23, 0x45, 0, 0, next, 64];
        v[4..6].copy_from_slice(&(rest.len() as u16).to_be_bytes());
        v.extend_from_slice(&SRC);
        v.extend_from_slice(&DST);
        v.extend_from_slice(rest);
        v
    }

    // A UDP header 1234 -> 53, length 8, checksum 0 (content is irrelevant here).
    const UDP: [u8; 8] = [0x04, 0xd2, 0x00, 0x35, 0x00, 0x08, 0x00, 0x00];

    #[test]
    fn parse_fixed_header() {
        let b = packet(17, &UDP);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xb8);
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.payload_len(), 8);
        assert_eq!(p.next_header(), IpProtocol::Udp);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "2001:db8::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.src_bytes(), SRC);
        assert_eq!(p.dst_bytes(), DST);
        assert_eq!(p.payload(), &UDP);
        let up = p.upper_layer().unwrap();
        assert_eq!(up.protocol, IpProtocol::Udp);
        assert_eq!(up.offset, 40);
        assert_eq!(up.fragment, None);
        assert_eq!(up.routing_segments_left, 0);
    }

    #[test]
    fn malformed() {
        let b = packet(17, &UDP);
        for n in 0..40 {
            assert_eq!(
                Ipv6Packet::new_checked(&b[..n]).err(),
                Some(Error::Truncated)
            );
        }
        for n in 40..48 {
            assert_eq!(
                Ipv6Packet::new_checked(&b[..n]).err(),
                Some(Error::BadLength)
            );
            let p = Ipv6Packet::new_checked_embedded(&b[..n]).unwrap();
            assert_eq!(p.payload().len(), n - 40);
        }
        let mut v = b.clone();
        v[0] = 0x45;
        assert_eq!(
            Ipv6Packet::new_checked(&v[..]).err(),
            Some(Error::BadVersion)
        );
        // Padding past the payload length is ignored.
        let mut v = b.clone();
        v.extend_from_slice(&[0xff; 6]);
        assert_eq!(Ipv6Packet::new_checked(&v[..]).unwrap().payload(), &UDP);
    }

    #[test]
    fn hop_by_hop() {
        // HBH: next UDP, len 0, PadN of 4 bytes (01 04 00 00 00 00).
        let mut rest = vec![17, 0, 0x01, 0x04, 0, 0, 0, 0];
        rest.extend_from_slice(&UDP);
        let b = packet(0, &rest);
        let up = Ipv6Packet::new_checked(&b[..])
            .unwrap()
            .upper_layer()
            .unwrap();
        assert_eq!((up.protocol, up.offset), (IpProtocol::Udp, 48));
    }

    #[test]
    fn hop_by_hop_not_first_is_rejected() {
        let rest = [0, 0, 1, 4, 0, 0, 0, 0, 17, 0, 1, 4, 0, 0, 0, 0];
        let b = packet(60, &rest);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper_layer(), Err(Error::ExtensionChain));
    }

    #[test]
    fn routing_header() {
        // Type 4 (SRH)-like header, len 2 (24 bytes), segments left 1, next TCP.
        let mut rest = vec![6, 2, 4, 1, 0, 0, 0, 0];
        rest.extend_from_slice(&[0xaa; 16]);
        rest.extend_from_slice(&[0; 20]);
        let b = packet(43, &rest);
        let up = Ipv6Packet::new_checked(&b[..])
            .unwrap()
            .upper_layer()
            .unwrap();
        assert_eq!(up.protocol, IpProtocol::Tcp);
        assert_eq!(up.offset, 64);
        assert_eq!(up.routing_segments_left, 1);
    }

    #[test]
    fn fragment_headers() {
        // First fragment: offset 0, M=1, ident 0xdeadbeef, next ICMPv6.
        let mut rest = vec![58, 0, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef];
        rest.extend_from_slice(&[128, 0, 0, 0, 0, 1, 0, 1]);
        let b = packet(44, &rest);
        let up = Ipv6Packet::new_checked(&b[..])
            .unwrap()
            .upper_layer()
            .unwrap();
        assert_eq!(up.protocol, IpProtocol::Icmpv6);
        assert_eq!(up.offset, 48);
        let f = Ipv6Fragment {
            header_offset: 40,
            offset: 0,
            more: true,
            ident: 0xdeadbeef,
        };
        assert_eq!(up.fragment, Some(f));
        // Non-first fragment: offset 1448 (181 * 8), last; data looks like a
        // header (next 0) but must not be walked.
        let rest = [58, 0, 0x05, 0xa8, 0, 0, 0, 7, 0, 0, 0, 0];
        let b = packet(44, &rest);
        let up = Ipv6Packet::new_checked(&b[..])
            .unwrap()
            .upper_layer()
            .unwrap();
        assert_eq!(up.protocol, IpProtocol::Icmpv6);
        assert_eq!(up.offset, 48);
        let f = Ipv6Fragment {
            header_offset: 40,
            offset: 1448,
            more: false,
            ident: 7,
        };
        assert_eq!(up.fragment, Some(f));
        // Two fragment headers.
        let rest = [44, 0, 0, 1, 0, 0, 0, 1, 17, 0, 0, 1, 0, 0, 0, 1];
        let b = packet(44, &rest);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper_layer(), Err(Error::ExtensionChain));
    }

    #[test]
    fn destination_options_and_ah() {
        // DestOpts (len 0) -> AH (payload len 4: (4+2)*4 = 24 bytes) -> TCP.
        let mut rest = vec![51, 0, 1, 4, 0, 0, 0, 0];
        rest.extend_from_slice(&[6, 4, 0, 0, 0, 0, 0x01, 0x00, 0, 0, 0, 1]);
        rest.extend_from_slice(&[0x5a; 12]); // ICV
        rest.extend_from_slice(&[0; 20]);
        let b = packet(60, &rest);
        let up = Ipv6Packet::new_checked(&b[..])
            .unwrap()
            .upper_layer()
            .unwrap();
        assert_eq!((up.protocol, up.offset), (IpProtocol::Tcp, 40 + 8 + 24));
    }

    #[test]
    fn no_next_header_and_esp() {
        let b = packet(59, &[]);
        let up = Ipv6Packet::new_checked(&b[..])
            .unwrap()
            .upper_layer()
            .unwrap();
        assert_eq!((up.protocol, up.offset), (IpProtocol::Ipv6NoNxt, 40));
        let b = packet(60, &[50, 0, 1, 4, 0, 0, 0, 0, 0, 0, 0, 1]);
        let up = Ipv6Packet::new_checked(&b[..])
            .unwrap()
            .upper_layer()
            .unwrap();
        assert_eq!((up.protocol, up.offset), (IpProtocol::Esp, 48));
    }

    #[test]
    fn chain_limits() {
        // Nine Destination Options headers in a row: one too many.
        let mut rest = Vec::new();
        for i in 0..9 {
            rest.extend_from_slice(&[if i == 8 { 17 } else { 60 }, 0, 1, 4, 0, 0, 0, 0]);
        }
        let b = packet(60, &rest);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper_layer(), Err(Error::ExtensionChain));
        // Exactly eight is fine.
        let b = packet(60, &rest[8..]);
        let up = Ipv6Packet::new_checked(&b[..])
            .unwrap()
            .upper_layer()
            .unwrap();
        assert_eq!((up.protocol, up.offset), (IpProtocol::Udp, 40 + 64));
    }

    #[test]
    fn truncated_chain() {
        // DestOpts claims 16 bytes, only 8 present.
        let b = packet(60, &[17, 1, 1, 4, 0, 0, 0, 0]);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper_layer(), Err(Error::Truncated));
        // A fragment header cut short in a quote.
        let b = packet(44, &[17, 0, 0, 1, 0, 0, 0, 1]);
        for n in 40..48 {
            let p = Ipv6Packet::new_checked_embedded(&b[..n]).unwrap();
            assert_eq!(p.upper_layer(), Err(Error::Truncated));
        }
        // payload_len shorter than the buffer bounds the walk too.
        let mut b = packet(60, &[17, 0, 1, 4, 0, 0, 0, 0]);
        b[5] = 4;
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper_layer(), Err(Error::Truncated));
    }

    #[test]
    fn emit_round_trip() {
        let mut b = [0u8; 48];
        let mut p = Ipv6Packet::new_unchecked(&mut b[..]);
        p.set_version(6);
        p.set_traffic_class(0x2e);
        p.set_flow_label(0xfffff);
        p.set_flow_label(0xabcde);
        p.set_payload_len(8);
        p.set_next_header(IpProtocol::Udp);
        p.set_hop_limit(255);
        p.set_src_addr(Ipv6Addr::from(SRC));
        p.set_dst_addr(Ipv6Addr::from(DST));
        p.payload_mut().copy_from_slice(&UDP);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0x2e);
        assert_eq!(p.flow_label(), 0xabcde);
        assert_eq!(p.next_header(), IpProtocol::Udp);
        assert_eq!(p.hop_limit(), 255);
        assert_eq!(p.src_bytes(), SRC);
        assert_eq!(p.dst_bytes(), DST);
        assert_eq!(p.payload(), &UDP);
        assert_eq!(&b[..8], &[0x62, 0xea, 0xbc, 0xde, 0, 8, 17, 255]);
    }
}
