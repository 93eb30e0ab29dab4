//! Ethernet II frames, with at most one 802.1Q / 802.1ad VLAN tag.
//!
//! `new_checked` validates the length once (14 bytes, 18 when tagged); after
//! that no accessor or setter panics, whatever the bytes hold. This module
//! must never allocate, and never look past the first tag (QinQ stacks are
//! reported as the inner ethertype `Vlan`, i.e. not IP, and left alone).

use crate::{be16, clamp, clamp_mut, put16, Error, Result};

/// Byte offsets of the Ethernet header fields.
pub mod field {
    use core::ops::Range;
    /// Destination MAC address.
    pub const DST: Range<usize> = 0..6;
    /// Source MAC address.
    pub const SRC: Range<usize> = 6..12;
    /// EtherType, or the TPID 0x8100 / 0x88a8 of a VLAN tag.
    pub const ETHERTYPE: Range<usize> = 12..14;
    /// Tag control information (PCP, DEI, VLAN id) of the VLAN tag.
    pub const VLAN_TCI: Range<usize> = 14..16;
    /// The inner EtherType after a VLAN tag.
    pub const INNER_ETHERTYPE: Range<usize> = 16..18;
    /// Length of an untagged header.
    pub const HEADER_LEN: usize = 14;
    /// Length of a header with one VLAN tag.
    pub const VLAN_HEADER_LEN: usize = 18;
}

/// An EtherType value; `Unknown` keeps every other value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EtherType {
    /// IPv4 (0x0800).
    Ipv4,
    /// IPv6 (0x86DD).
    Ipv6,
    /// ARP (0x0806).
    Arp,
    /// A VLAN tag: 802.1Q (0x8100) or 802.1ad (0x88A8, converts back as 0x8100).
    Vlan,
    /// Any other value.
    Unknown(u16),
}

impl From<u16> for EtherType {
    #[inline]
    fn from(v: u16) -> Self {
        match v {
            0x0800 => EtherType::Ipv4,
            0x86DD => EtherType::Ipv6,
            0x0806 => EtherType::Arp,
            0x8100 | 0x88A8 => EtherType::Vlan,
            other => EtherType::Unknown(other),
        }
    }
}

impl From<EtherType> for u16 {
    #[inline]
    fn from(t: EtherType) -> u16 {
        match t {
            EtherType::Ipv4 => 0x0800,
            EtherType::Ipv6 => 0x86DD,
            EtherType::Arp => 0x0806,
            EtherType::Vlan => 0x8100,
            EtherType::Unknown(other) => other,
        }
    }
}

/// Is this raw EtherType a VLAN tag protocol identifier?
#[inline]
fn is_tpid(v: u16) -> bool {
    v == 0x8100 || v == 0x88A8
}

/// A read (and, with `AsMut`, write) view over an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps a buffer without checking it (accessors return zeros past its end).
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wraps a buffer, checking it holds the whole header (tag included).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let frame = Self::new_unchecked(buffer);
        let len = frame.buffer.as_ref().len();
        if len < field::HEADER_LEN || len < frame.header_len() {
            return Err(Error::Truncated);
        }
        Ok(frame)
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination MAC address.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 6] {
        mac(self.buffer.as_ref(), field::DST.start)
    }

    /// Source MAC address.
    #[inline]
    pub fn src_addr(&self) -> [u8; 6] {
        mac(self.buffer.as_ref(), field::SRC.start)
    }

    /// Is the frame VLAN-tagged (TPID 0x8100 or 0x88A8)?
    #[inline]
    pub fn is_tagged(&self) -> bool {
        is_tpid(be16(self.buffer.as_ref(), field::ETHERTYPE.start))
    }

    /// The 12-bit VLAN id of the (outer) tag, if the frame is tagged.
    #[inline]
    pub fn vlan_id(&self) -> Option<u16> {
        if self.is_tagged() {
            Some(be16(self.buffer.as_ref(), field::VLAN_TCI.start) & 0x0FFF)
        } else {
            None
        }
    }

    /// The EtherType of the payload (the inner one after a VLAN tag).
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        let data = self.buffer.as_ref();
        let off = if self.is_tagged() {
            field::INNER_ETHERTYPE.start
        } else {
            field::ETHERTYPE.start
        };
        EtherType::from(be16(data, off))
    }

    /// Header length: 14, or 18 with a VLAN tag.
    #[inline]
    pub fn header_len(&self) -> usize {
        if self.is_tagged() {
            field::VLAN_HEADER_LEN
        } else {
            field::HEADER_LEN
        }
    }

    /// The bytes after the header (IP packet plus any trailing padding).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        clamp(data, self.header_len(), data.len())
    }
}

/// Reads a MAC address at `off` (zeros past the end).
#[inline]
fn mac(data: &[u8], off: usize) -> [u8; 6] {
    let mut out = [0u8; 6];
    if let Some(s) = data.get(off..off + 6) {
        out.copy_from_slice(s);
    }
    out
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC address.
    #[inline]
    pub fn set_dst_addr(&mut self, addr: [u8; 6]) {
        if let Some(d) = self.buffer.as_mut().get_mut(field::DST) {
            d.copy_from_slice(&addr);
        }
    }

    /// Sets the source MAC address.
    #[inline]
    pub fn set_src_addr(&mut self, addr: [u8; 6]) {
        if let Some(d) = self.buffer.as_mut().get_mut(field::SRC) {
            d.copy_from_slice(&addr);
        }
    }

    /// Sets the payload EtherType (the inner one when tagged), e.g. for 4<->6.
    #[inline]
    pub fn set_ethertype(&mut self, ty: EtherType) {
        let off = if self.is_tagged() {
            field::INNER_ETHERTYPE.start
        } else {
            field::ETHERTYPE.start
        };
        put16(self.buffer.as_mut(), off, ty.into());
    }

    /// The bytes after the header, mutably.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        let data = self.buffer.as_mut();
        let end = data.len();
        clamp_mut(data, start, end)
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for EthernetFrame<T> {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // dst 00:11:22:33:44:55, src 66:77:88:99:aa:bb, IPv4, 4 payload bytes.
    const UNTAGGED: [u8; 18] = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0x08, 0x00, 0xde,
        0xad, 0xbe, 0xef,
    ];
    // Same, tagged 802.1Q PCP 5 VLAN 100 carrying IPv6.
    const TAGGED: [u8; 20] = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0x81, 0x00, 0xa0,
        0x64, 0x86, 0xdd, 0x60, 0x00,
    ];

    #[test]
    fn parse_untagged() {
        let f = EthernetFrame::new_checked(&UNTAGGED[..]).unwrap();
        assert_eq!(f.dst_addr(), [0x00, 0x11, 0x22, 0x33, 0x44, 0x55]);
        assert_eq!(f.src_addr(), [0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb]);
        assert_eq!(f.vlan_id(), None);
        assert_eq!(f.ethertype(), EtherType::Ipv4);
        assert_eq!(f.header_len(), 14);
        assert_eq!(f.payload(), &[0xde, 0xad, 0xbe, 0xef]);
    }

    #[test]
    fn parse_tagged() {
        let f = EthernetFrame::new_checked(&TAGGED[..]).unwrap();
        assert_eq!(f.vlan_id(), Some(100));
        assert_eq!(f.ethertype(), EtherType::Ipv6);
        assert_eq!(f.header_len(), 18);
        assert_eq!(f.payload(), &[0x60, 0x00]);
        let mut qinq = TAGGED;
        qinq[12..14].copy_from_slice(&[0x88, 0xa8]);
        let f = EthernetFrame::new_checked(&qinq[..]).unwrap();
        assert_eq!(f.vlan_id(), Some(100));
    }

    #[test]
    fn truncated() {
        for n in 0..14 {
            assert_eq!(
                EthernetFrame::new_checked(&UNTAGGED[..n]).err(),
                Some(Error::Truncated)
            );
        }
        assert!(EthernetFrame::new_checked(&UNTAGGED[..14]).is_ok());
        for n in 0..18 {
            assert!(EthernetFrame::new_checked(&TAGGED[..n]).is_err());
        }
        assert!(EthernetFrame::new_checked(&TAGGED[..18]).is_ok());
    }

    #[test]
    fn emit_round_trip() {
        let mut buf = UNTAGGED;
        let mut f = EthernetFrame::new_checked(&mut buf[..]).unwrap();
        f.set_dst_addr([1, 2, 3, 4, 5, 6]);
        f.set_src_addr([7, 8, 9, 10, 11, 12]);
        f.set_ethertype(EtherType::Ipv6);
        f.payload_mut()[0] = 0x11;
        let f = EthernetFrame::new_checked(&buf[..]).unwrap();
        assert_eq!(f.dst_addr(), [1, 2, 3, 4, 5, 6]);
        assert_eq!(f.src_addr(), [7, 8, 9, 10, 11, 12]);
        assert_eq!(f.ethertype(), EtherType::Ipv6);
        assert_eq!(f.payload()[0], 0x11);

        let mut buf = TAGGED;
        let mut f = EthernetFrame::new_checked(&mut buf[..]).unwrap();
        f.set_ethertype(EtherType::Ipv4);
        assert_eq!(f.vlan_id(), Some(100));
        assert_eq!(&buf[16..18], &[0x08, 0x00]);
    }

    #[test]
    fn tagging_an_untagged_frame_later_does_not_panic() {
        let mut buf = [0u8; 14];
        let mut f = EthernetFrame::new_checked(&mut buf[..]).unwrap();
        f.set_ethertype(EtherType::Vlan);
        assert_eq!(f.header_len(), 18);
        assert_eq!(f.payload(), &[] as &[u8]);
        assert_eq!(f.payload_mut(), &mut [] as &mut [u8]);
        assert_eq!(f.vlan_id(), Some(0));
        assert_eq!(f.ethertype(), EtherType::Unknown(0));
    }

    #[test]
    fn ethertype_round_trip() {
        for v in [0x0800u16, 0x86dd, 0x0806, 0x8100, 0x1234] {
            assert_eq!(u16::from(EtherType::from(v)), v);
        }
        assert_eq!(EtherType::from(0x88a8), EtherType::Vlan);
    }
}
