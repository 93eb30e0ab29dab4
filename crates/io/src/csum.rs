//! Completing the partial TCP/UDP checksums of frames a sender offloaded, for every
//! backend.
//!
//! A sender on the other end of a veth with tx checksum offload on (the default) hands
//! over `CHECKSUM_PARTIAL` skbs: the TCP/UDP checksum field holds only the folded
//! pseudo-header sum, to be finished by a NIC that does not exist. Forwarded as is, the
//! receiver drops every such segment (`TcpInCsumErrors`), so TCP through the gateway never
//! gets past its SYN. Without a virtio-net header we do not get `csum_start`/`csum_offset`,
//! so we find the transport header ourselves: Ethernet with at most one 802.1Q/802.1ad
//! tag, then an unfragmented IPv4 datagram or an IPv6 packet with TCP/UDP as the first
//! header, and compute the whole checksum over the segment. Two ways to know a frame is
//! partial:
//!
//! * AF_PACKET is told (`TP_STATUS_CSUMNOTREADY`, [`RxMeta::csum_not_ready`]):
//!   [`complete`] / [`complete_checksum`] compute the checksum unconditionally.
//! * AF_XDP is not: XDP_REDIRECT copies the bytes and loses the skb's state (veth has no
//!   rx-checksum metadata kfunc: `veth_xdp_rx_hash`, `_timestamp`, `_vlan_tag` only).
//!   [`complete_if_partial`] recognises it from the bytes: the field equals the folded
//!   pseudo-header sum (one comparison, no pass over the payload) and the segment does
//!   not verify. Only then is the payload summed, once, and the checksum written. A frame
//!   with a complete checksum that happens to equal its pseudo-header sum still verifies
//!   and is left alone, so the only frames this can "repair" by mistake are frames
//!   already corrupted on the wire whose checksum field is exactly their pseudo-header
//!   sum.
//!
//! Parsing goes through the `wire` crate's bounds-checked views, so no input makes this
//! module panic (a proptest below holds it to that). It never allocates and never looks
//! at anything but the headers it needs and the segment it sums.

use wire::checksum::{combine, fold, pseudo_header_v4, pseudo_header_v6, sum};
use wire::{EtherType, EthernetFrame, IpProtocol, Ipv4Packet, Ipv6Packet, TcpPacket, UdpPacket};

use crate::port::RxMeta;

/// A frame's TCP segment or UDP datagram and what its checksum covers.
struct Segment<'a> {
    /// The segment (TCP: the IP payload; UDP: as long as its length field says).
    bytes: &'a mut [u8],
    /// Offset of the checksum field in `bytes` (TCP 16, UDP 6).
    field: usize,
    /// The pseudo-header's partial sum.
    pseudo: u32,
    /// UDP: a computed 0 is sent as 0xFFFF (RFC 768).
    udp: bool,
}

impl Segment<'_> {
    /// The checksum field as it is now.
    fn field(&self) -> Option<u16> {
        let b = self.bytes.get(self.field..self.field + 2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    }

    /// Writes `c` (the complemented sum) into the checksum field.
    fn write(&mut self, c: u16) -> bool {
        let c = if self.udp && c == 0 { 0xFFFF } else { c };
        match self.bytes.get_mut(self.field..self.field + 2) {
            Some(f) => {
                f.copy_from_slice(&c.to_be_bytes());
                true
            }
            None => false,
        }
    }
}

/// Finds the TCP/UDP segment of `frame`: Ethernet (one tag at most), then IPv4 (not a
/// fragment) or IPv6 with TCP/UDP as the next header, all of it present.
fn segment(frame: &mut [u8]) -> Option<Segment<'_>> {
    let eth = EthernetFrame::new_checked(&frame[..]).ok()?;
    let (ethertype, l3) = (eth.ethertype(), eth.header_len());
    let ip = frame.get_mut(l3..)?;
    let (proto, l4, pseudo_of): (IpProtocol, &mut [u8], Pseudo) = match ethertype {
        EtherType::Ipv4 => {
            let p = Ipv4Packet::new_checked(&ip[..]).ok()?;
            if p.is_fragment() {
                return None;
            }
            let (src, dst, proto) = (p.src_bytes(), p.dst_bytes(), p.protocol());
            let (hl, total) = (p.header_len(), usize::from(p.total_len()));
            (proto, ip.get_mut(hl..total)?, Pseudo::V4(src, dst))
        }
        EtherType::Ipv6 => {
            let p = Ipv6Packet::new_checked(&ip[..]).ok()?;
            let (src, dst, proto) = (p.src_bytes(), p.dst_bytes(), p.next_header());
            let end = 40 + usize::from(p.payload_len());
            (proto, ip.get_mut(40..end)?, Pseudo::V6(src, dst))
        }
        _ => return None,
    };
    let (bytes, field, udp) = match proto {
        IpProtocol::Tcp => {
            TcpPacket::new_checked(&l4[..]).ok()?;
            (l4, 16, false)
        }
        IpProtocol::Udp => {
            let len = usize::from(UdpPacket::new_checked(&l4[..]).ok()?.len());
            (l4.get_mut(..len)?, 6, true)
        }
        _ => return None,
    };
    let pseudo = pseudo_of.sum(u8::from(proto), bytes.len())?;
    Some(Segment {
        bytes,
        field,
        pseudo,
        udp,
    })
}

/// The addresses of the pseudo-header, by family.
enum Pseudo {
    V4([u8; 4], [u8; 4]),
    V6([u8; 16], [u8; 16]),
}

impl Pseudo {
    /// The pseudo-header's partial sum for a segment of `len` bytes of `proto`.
    fn sum(&self, proto: u8, len: usize) -> Option<u32> {
        Some(match self {
            Pseudo::V4(s, d) => pseudo_header_v4(*s, *d, proto, u16::try_from(len).ok()?),
            Pseudo::V6(s, d) => pseudo_header_v6(s, d, proto, u32::try_from(len).ok()?),
        })
    }
}

/// Equal in ones' complement arithmetic (0x0000 and 0xFFFF are both zero).
fn ones_eq(a: u16, b: u16) -> bool {
    a == b || (a | b == 0xFFFF && (a == 0 || b == 0))
}

/// Computes and writes the TCP/UDP checksum of `frame`, known to be partial (whatever
/// the field holds now). Returns false, leaving the frame alone, when it has no TCP/UDP
/// segment this module can find (not IP, a fragment, IPv6 extension headers, truncated,
/// malformed). GSO super-frames are completed like any other; segmenting them is the
/// caller's business.
pub fn complete(frame: &mut [u8]) -> bool {
    let Some(mut s) = segment(frame) else {
        return false;
    };
    if !s.write(0) {
        return false;
    }
    let c = !fold(combine(s.pseudo, sum(s.bytes)));
    s.write(c)
}

/// Completes the TCP/UDP checksum of `frame` if it is a partial one, recognised from the
/// bytes (see the module doc). Returns true when it wrote a checksum.
pub fn complete_if_partial(frame: &mut [u8]) -> bool {
    let Some(mut s) = segment(frame) else {
        return false;
    };
    // The cheap test first: a complete checksum almost never equals this. A UDP zero is
    // "no checksum" (IPv4) or the translator's to refuse (IPv6), never a partial sum (a
    // sender's pseudo-header sum folds to 0xFFFF at worst, never 0).
    let Some(field) = s.field() else {
        return false;
    };
    if (s.udp && field == 0) || !ones_eq(field, fold(s.pseudo)) {
        return false;
    }
    // The field stands in for the pseudo-header, so the sum over the segment as it lies
    // is what the sender's NIC would have summed.
    let over_segment = fold(sum(s.bytes));
    if fold(combine(s.pseudo, u32::from(over_segment))) == 0xFFFF {
        // It verifies: a complete checksum that equals the pseudo-header sum.
        return false;
    }
    s.write(!over_segment)
}

/// Makes the transport checksum of `frame` complete if `meta.csum_not_ready`.
///
/// Returns true when the frame needs no more work: it was not partial, or its TCP/UDP
/// checksum has now been computed and written. Returns false when it was partial and
/// could not be completed (truncated, not IPv4/IPv6 TCP/UDP, a fragment, IPv6 extension
/// headers, malformed); the caller should drop such a frame.
pub fn complete_checksum(frame: &mut [u8], meta: &RxMeta) -> bool {
    if !meta.csum_not_ready {
        return true;
    }
    if meta.truncated || frame.len() < meta.len {
        return false;
    }
    complete(frame)
}

#[cfg(test)]
mod tests;
