//! GSO/GRO pass-through for the modes that change header sizes or do not handle partial
//! checksums themselves (NAT64, SIIT, CLAT; ILA's partial checksums).
//!
//! A super-packet (a GRO'd frame, or one a local sender handed over unsegmented) arrives
//! behind a virtio-net header. The mode never sees it whole: [`present`] shrinks the
//! packet's declared lengths to **one segment** (the first `gso_size` bytes of payload,
//! 20 bytes less when IPv4 becomes IPv6 so that the IPv6 segments are the size the IPv4
//! ones were), so the mode's own checks (its MTUs, DF rules, Fragmentation Needed /
//! Packet Too Big) apply to each segment exactly as they would to the packets the kernel
//! will cut. The bytes after that segment stay where they are, after the payload the
//! translator leaves in place; [`finish`] then restores the lengths on the translated
//! packet, writes the transport checksum as the partial (pseudo-header only) sum the
//! kernel completes per segment, and returns the virtio-net header for it: `gso_type`
//! in the new family, `csum_start`/`hdr_len` at the new transport header. [`fit_mtu`]
//! finally lowers a TCP `gso_size` to the egress link (TCP is a byte stream: cutting it
//! finer is allowed) and refuses a UDP one whose datagrams would not fit (their
//! boundaries are the sender's). A frame that cannot pass is dropped and counted
//! (`gso_refused`), never sent oversized.
//!
//! Sans-I/O: plain functions over byte slices and [`VnetHdr`]s.

use io::vnet::GsoType;
use io::VnetHdr;
use wire::checksum::{combine, fold, pseudo_header_v4, pseudo_header_v6};

/// IPv6 minimum MTU (RFC 8200 §5): an IPv4 packet without DF must fit it as IPv6 (the
/// default `lowest_ipv6_mtu`); its segments are cut to fit it rather than fragmented.
const IPV6_MIN_MTU: usize = 1280;

/// Why a frame with offload work cannot be passed through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GsoRefusal {
    /// A GSO type other than TCP or UDP_L4 (legacy UFO, tunnels), or one that does not
    /// match the packet's family and protocol.
    Type,
    /// The partial checksum is not the transport header's (after IPv6 extension headers,
    /// in a tunnel) or the header is inconsistent.
    Layout,
    /// The translated packet is not where or what it should be.
    Translated,
    /// UDP datagrams that would not fit the egress MTU (they cannot be cut finer), or
    /// not even the headers fit.
    TooBig,
}

/// What [`present`] changed, for [`finish`] to undo on the translated packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Presented {
    /// The IP length handed to the mode (one segment).
    pub len: usize,
    /// Payload bytes held back behind it (0 when the frame is one segment or less).
    pub extra: usize,
    /// Payload bytes per segment after translation (the new `gso_size`); 0 without GSO.
    pub seg: u16,
    /// TCP (else UDP).
    pub tcp: bool,
}

/// The network header length, transport protocol and transport header length of the
/// IPv4 or IPv6 packet `pkt` (no IPv6 extension headers), or `None`.
fn layout(pkt: &[u8]) -> Option<(usize, u8, usize)> {
    let (l4, proto) = match pkt.first()? >> 4 {
        4 => (usize::from(pkt[0] & 0x0f) * 4, *pkt.get(9)?),
        6 => (40, *pkt.get(6)?),
        _ => return None,
    };
    let l4_hdr = match proto {
        6 => usize::from(pkt.get(l4 + 12)? >> 4) * 4,
        17 => 8,
        _ => return None,
    };
    (l4 >= 20 && l4_hdr >= 8 && l4 + l4_hdr <= pkt.len()).then_some((l4, proto, l4_hdr))
}

/// The IP packet's declared length (IPv4 total length, IPv6 40 + payload length).
pub(crate) fn ip_len(pkt: &[u8]) -> Option<usize> {
    let v = usize::from(u16::from_be_bytes([*pkt.get(2)?, *pkt.get(3)?]));
    let w = usize::from(u16::from_be_bytes([*pkt.get(4)?, *pkt.get(5)?]));
    match pkt.first()? >> 4 {
        4 => Some(v),
        6 => Some(40 + w),
        _ => None,
    }
}

/// Writes the packet's declared length (`len` bytes in all) and, for UDP, the datagram
/// length; IPv4's header checksum follows the change (RFC 1624), so a header the kernel
/// verified stays verifiable and a corrupted one stays wrong.
fn set_len(pkt: &mut [u8], len: usize, l4: usize, proto: u8) -> Option<()> {
    let (at, v) = match pkt.first()? >> 4 {
        4 => (2, u16::try_from(len).ok()?),
        _ => (4, u16::try_from(len.checked_sub(40)?).ok()?),
    };
    let old = u16::from_be_bytes([*pkt.get(at)?, *pkt.get(at + 1)?]);
    pkt.get_mut(at..at + 2)?.copy_from_slice(&v.to_be_bytes());
    if pkt[0] >> 4 == 4 {
        let c = u16::from_be_bytes([*pkt.get(10)?, pkt[11]]);
        let c = wire::checksum::update16(c, old, v);
        pkt[10..12].copy_from_slice(&c.to_be_bytes());
    }
    if proto == 17 {
        let ulen = u16::try_from(len.checked_sub(l4)?).ok()?;
        pkt.get_mut(l4 + 4..l4 + 6)?
            .copy_from_slice(&ulen.to_be_bytes());
    }
    Some(())
}

/// Prepares the IP packet `pkt` (exactly its declared length, at offset `l3` of its
/// frame), received behind `v` (GSO and/or a partial checksum), for a mode that
/// translates it (`to_v6`: IPv4 becomes IPv6). Returns what to hand the mode.
pub(crate) fn present(
    pkt: &mut [u8],
    v: &VnetHdr,
    l3: usize,
    to_v6: bool,
) -> Result<Presented, GsoRefusal> {
    let (l4, proto, l4_hdr) = layout(pkt).ok_or(GsoRefusal::Layout)?;
    let tcp = proto == 6;
    // The partial checksum must be the transport header's own.
    let csum_at = if tcp { 16 } else { 6 };
    if !v.needs_csum()
        || usize::from(v.csum_start) != l3 + l4
        || usize::from(v.csum_offset) != csum_at
        || ip_len(pkt) != Some(pkt.len())
    {
        return Err(GsoRefusal::Layout);
    }
    let len = pkt.len();
    if !v.is_gso() {
        return Ok(Presented {
            len,
            extra: 0,
            seg: 0,
            tcp,
        });
    }
    let v4 = pkt[0] >> 4 == 4;
    match (v.gso_type, v4, tcp) {
        (GsoType::TcpV4, true, true) | (GsoType::TcpV6, false, true) => {}
        (GsoType::UdpL4, _, false) => {}
        _ => return Err(GsoRefusal::Type),
    }
    let mut seg = usize::from(v.gso_size);
    if tcp && to_v6 {
        // Same IPv6 segment size as the IPv4 one; without DF, small enough that the
        // translator need not fragment (RFC 7915 §4.1's lowest IPv6 MTU, at least 1280).
        seg = seg.saturating_sub(20);
        if v4 && pkt[6] & 0x40 == 0 {
            seg = seg.min(IPV6_MIN_MTU.saturating_sub(40 + l4_hdr));
        }
    }
    if seg == 0 {
        return Err(GsoRefusal::TooBig);
    }
    let first = (l4 + l4_hdr + seg).min(len);
    let extra = len - first;
    if extra > 0 {
        set_len(pkt, first, l4, proto).ok_or(GsoRefusal::Layout)?;
    }
    Ok(Presented {
        len: first,
        extra,
        seg: u16::try_from(seg).map_err(|_| GsoRefusal::Layout)?,
        tcp,
    })
}

/// Puts the translated packet back together: `buf[start..start + len]` is the mode's
/// output for the [`present`]ed packet; the `p.extra` bytes after it are the rest of the
/// payload. Restores the lengths, writes the partial transport checksum and returns the
/// packet's full length and its virtio-net header (`l3`: offset of the IP header in the
/// frame that will be sent; `gso_size` still to be fitted to the egress, [`fit_mtu`]).
pub(crate) fn finish(
    buf: &mut [u8],
    start: usize,
    len: usize,
    rx: &VnetHdr,
    p: &Presented,
    l3: usize,
) -> Result<(usize, VnetHdr), GsoRefusal> {
    let total = len.checked_add(p.extra).ok_or(GsoRefusal::Translated)?;
    let pkt = buf
        .get_mut(start..start.saturating_add(total))
        .filter(|b| b.len() == total)
        .ok_or(GsoRefusal::Translated)?;
    if ip_len(pkt) != Some(len) {
        return Err(GsoRefusal::Translated);
    }
    let (l4, proto, l4_hdr) = layout(&pkt[..len]).ok_or(GsoRefusal::Translated)?;
    if (proto == 6) != p.tcp {
        return Err(GsoRefusal::Translated);
    }
    if p.extra > 0 {
        set_len(pkt, total, l4, proto).ok_or(GsoRefusal::Translated)?;
    }
    // The partial checksum, as Linux leaves it (`~csum_tcpudp_magic()`): the folded
    // pseudo-header sum over the whole transport length, not complemented.
    let l4_len = total - l4;
    let v4 = pkt[0] >> 4 == 4;
    let pseudo = if v4 {
        let a = |i: usize| [pkt[i], pkt[i + 1], pkt[i + 2], pkt[i + 3]];
        let l = u16::try_from(l4_len).map_err(|_| GsoRefusal::Translated)?;
        pseudo_header_v4(a(12), a(16), proto, l)
    } else {
        let a = |i: usize| -> [u8; 16] { pkt[i..i + 16].try_into().unwrap_or([0; 16]) };
        pseudo_header_v6(&a(8), &a(24), proto, l4_len as u32)
    };
    let csum_at = if p.tcp { 16 } else { 6 };
    let partial = fold(combine(pseudo, 0));
    pkt[l4 + csum_at..l4 + csum_at + 2].copy_from_slice(&partial.to_be_bytes());
    let gso_type = match (rx.is_gso(), p.tcp, v4) {
        (false, ..) => GsoType::None,
        (true, true, true) => GsoType::TcpV4,
        (true, true, false) => GsoType::TcpV6,
        (true, false, _) => GsoType::UdpL4,
    };
    let at = |n: usize| u16::try_from(l3 + n).map_err(|_| GsoRefusal::Translated);
    Ok((
        total,
        VnetHdr {
            flags: rx.for_forward().flags,
            gso_type,
            gso_ecn: rx.gso_ecn && gso_type != GsoType::None,
            hdr_len: at(l4 + l4_hdr)?,
            gso_size: if gso_type == GsoType::None { 0 } else { p.seg },
            csum_start: at(l4)?,
            csum_offset: csum_at as u16,
        },
    ))
}

/// The header `v` (for a frame whose IP header is at `l3`) with segments that fit `mtu`:
/// a TCP `gso_size` lowered to the room the headers leave; UDP datagrams that do not fit
/// are refused (their boundaries are the sender's).
pub(crate) fn fit_mtu(mut v: VnetHdr, l3: usize, mtu: usize) -> Result<VnetHdr, GsoRefusal> {
    if !v.is_gso() {
        return Ok(v);
    }
    let headers = usize::from(v.hdr_len)
        .checked_sub(l3)
        .ok_or(GsoRefusal::Translated)?;
    let room = mtu.checked_sub(headers).filter(|&r| r > 0);
    let room = room.ok_or(GsoRefusal::TooBig)?;
    if usize::from(v.gso_size) > room {
        if v.gso_type == GsoType::UdpL4 {
            return Err(GsoRefusal::TooBig);
        }
        v.gso_size = u16::try_from(room).map_err(|_| GsoRefusal::TooBig)?;
    }
    Ok(v)
}
