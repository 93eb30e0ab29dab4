//! Completing the partial transport checksums of offloaded frames.
//!
//! A frame sent through veth with checksum offload on reaches a packet
//! socket as `CHECKSUM_PARTIAL` (`TP_STATUS_CSUMNOTREADY`): its TCP or UDP
//! checksum field holds only the pseudo-header sum, to be finished by a NIC
//! that does not exist. Forwarded as is, the receiver drops it. Without
//! `PACKET_VNET_HDR` we do not get `csum_start`/`csum_offset`, so we find the
//! transport header ourselves (IPv4, or IPv6 with TCP/UDP as the first
//! header) and compute the whole checksum over the segment.

use wire::{EtherType, EthernetFrame, IpProtocol, Ipv4Packet, Ipv6Packet, TcpPacket, UdpPacket};

use super::RxMeta;

/// Makes the transport checksum of `frame` complete if `meta.csum_not_ready`.
///
/// Returns true when the frame needs no more work: it was not partial, or
/// its TCP/UDP checksum has now been computed and written. Returns false
/// when it was partial and could not be completed (truncated, not IPv4/IPv6
/// TCP/UDP, a fragment, IPv6 extension headers, malformed); the caller
/// should drop such a frame. GSO super-frames (`meta.len` above the MTU) are
/// completed like any other; segmenting them is the caller's business.
pub fn complete_checksum(frame: &mut [u8], meta: &RxMeta) -> bool {
    if !meta.csum_not_ready {
        return true;
    }
    if meta.truncated || frame.len() < meta.len {
        return false;
    }
    let Ok(mut eth) = EthernetFrame::new_checked(&mut frame[..]) else {
        return false;
    };
    match eth.ethertype() {
        EtherType::Ipv4 => complete_v4(eth.payload_mut()),
        EtherType::Ipv6 => complete_v6(eth.payload_mut()),
        _ => false,
    }
}

/// IPv4: TCP or UDP in an unfragmented datagram.
fn complete_v4(ip: &mut [u8]) -> bool {
    let Ok(mut p) = Ipv4Packet::new_checked(ip) else {
        return false;
    };
    if p.is_fragment() {
        return false;
    }
    let (src, dst, proto) = (p.src_bytes(), p.dst_bytes(), p.protocol());
    let seg = p.payload_mut();
    match proto {
        IpProtocol::Tcp => match TcpPacket::new_checked(seg) {
            Ok(mut t) => {
                t.fill_checksum_v4(src, dst);
                true
            }
            Err(_) => false,
        },
        IpProtocol::Udp => match UdpPacket::new_checked(seg) {
            Ok(mut u) => {
                u.fill_checksum_v4(src, dst);
                true
            }
            Err(_) => false,
        },
        _ => false,
    }
}

/// IPv6: TCP or UDP directly after the fixed header.
fn complete_v6(ip: &mut [u8]) -> bool {
    let Ok(mut p) = Ipv6Packet::new_checked(ip) else {
        return false;
    };
    let (src, dst, proto) = (p.src_bytes(), p.dst_bytes(), p.next_header());
    let seg = p.payload_mut();
    match proto {
        IpProtocol::Tcp => match TcpPacket::new_checked(seg) {
            Ok(mut t) => {
                t.fill_checksum_v6(&src, &dst);
                true
            }
            Err(_) => false,
        },
        IpProtocol::Udp => match UdpPacket::new_checked(seg) {
            Ok(mut u) => {
                u.fill_checksum_v6(&src, &dst);
                true
            }
            Err(_) => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::checksum;

    /// Ethernet + IPv4 + UDP("hello") with the checksum as veth offload leaves it:
    /// the folded pseudo-header sum, not complemented.
    fn partial_udp4() -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + 5];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip = &mut f[14..34];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&33u16.to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[10, 0, 0, 2]);
        ip[16..20].copy_from_slice(&[10, 0, 0, 1]);
        let c = checksum::checksum(ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let udp = &mut f[34..];
        udp[0..2].copy_from_slice(&4000u16.to_be_bytes());
        udp[2..4].copy_from_slice(&5000u16.to_be_bytes());
        udp[4..6].copy_from_slice(&13u16.to_be_bytes());
        udp[8..].copy_from_slice(b"hello");
        let ph = checksum::fold(checksum::pseudo_header_v4(
            [10, 0, 0, 2],
            [10, 0, 0, 1],
            17,
            13,
        ));
        udp[6..8].copy_from_slice(&ph.to_be_bytes());
        f
    }

    fn meta(len: usize, partial: bool) -> RxMeta {
        RxMeta {
            len,
            snaplen: len,
            csum_not_ready: partial,
            ..RxMeta::default()
        }
    }

    #[test]
    fn completes_partial_udp4() {
        let mut f = partial_udp4();
        let m = meta(f.len(), true);
        assert!(!UdpPacket::new_checked(&f[34..])
            .unwrap()
            .verify_checksum_v4([10, 0, 0, 2], [10, 0, 0, 1]));
        assert!(complete_checksum(&mut f, &m));
        assert!(UdpPacket::new_checked(&f[34..])
            .unwrap()
            .verify_checksum_v4([10, 0, 0, 2], [10, 0, 0, 1]));
    }

    #[test]
    fn leaves_ready_frames_alone_and_refuses_what_it_cannot_fix() {
        let mut f = partial_udp4();
        let orig = f.clone();
        let m = meta(f.len(), false);
        assert!(complete_checksum(&mut f, &m));
        assert_eq!(f, orig);
        // Truncated capture.
        let mut m = meta(f.len() + 100, true);
        m.snaplen = f.len();
        m.truncated = true;
        assert!(!complete_checksum(&mut f, &m));
        // Fragment.
        let mut g = orig.clone();
        g[14 + 6] = 0x20; // MF
        let m = meta(g.len(), true);
        assert!(!complete_checksum(&mut g, &m));
        // Not IP, and garbage of every length: false, no panic.
        let mut arp = orig.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let m = meta(arp.len(), true);
        assert!(!complete_checksum(&mut arp, &m));
        for n in 0..orig.len() {
            let mut h = orig[..n].to_vec();
            let _ = complete_checksum(&mut h, &meta(n, true));
        }
    }
}
