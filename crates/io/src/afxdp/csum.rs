//! Recognising and completing partial transport checksums in received frames.
//!
//! A sender on the other end of a veth with tx checksum offload on (the default)
//! hands over `CHECKSUM_PARTIAL` skbs: the TCP/UDP checksum field holds only the
//! folded pseudo-header sum, to be finished by a NIC that does not exist. The
//! kernel's own forwarding keeps that state in the skb and finishes the sum when
//! needed; XDP_REDIRECT into an AF_XDP socket copies the bytes and loses it (veth
//! has no rx-checksum metadata kfunc: `veth_xdp_rx_hash`, `_timestamp`, `_vlan_tag`
//! only). Forwarded as is, the receiver drops every such segment
//! (`TcpInCsumErrors`), so TCP through the gateway never gets past its SYN.
//!
//! Without the skb's `csum_start`/`csum_offset` we recognise the state from the
//! bytes: the field equals the folded pseudo-header sum (one comparison, no pass
//! over the payload) and the segment does not verify. Only then is the payload
//! summed, once, and the checksum written. A frame with a complete checksum that
//! happens to equal its pseudo-header sum still verifies and is left alone, so the
//! only frames this can "repair" by mistake are frames already corrupted on the
//! wire whose checksum field is exactly their pseudo-header sum.

use wire::checksum::{combine, fold, pseudo_header_v4, pseudo_header_v6, sum};

const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86DD;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88A8;
const TCP: u8 = 6;
const UDP: u8 = 17;

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Equal in ones' complement arithmetic (0x0000 and 0xFFFF are both zero).
fn ones_eq(a: u16, b: u16) -> bool {
    a == b || (a | b == 0xFFFF && (a == 0 || b == 0))
}

/// Completes the TCP/UDP checksum of `frame` (Ethernet, optionally one VLAN tag,
/// then IPv4, or IPv6 with TCP/UDP as the first header) when it is a partial one.
/// Returns true when it wrote a checksum.
pub(crate) fn complete_if_partial(frame: &mut [u8]) -> bool {
    let Some(mut ethertype) = be16(frame, 12) else {
        return false;
    };
    let mut l3 = 14;
    if ethertype == ETH_P_8021Q || ethertype == ETH_P_8021AD {
        let Some(t) = be16(frame, 16) else {
            return false;
        };
        ethertype = t;
        l3 = 18;
    }
    let l3 = l3.min(frame.len());
    let ip = &mut frame[l3..];
    let (pseudo_of, l4) = match ethertype {
        ETH_P_IP => {
            let Some(&vihl) = ip.first() else {
                return false;
            };
            let ihl = usize::from(vihl & 0x0F) * 4;
            let total = usize::from(be16(ip, 2).unwrap_or(0));
            // Version 4, a sane header, the whole datagram present, not a fragment.
            if vihl >> 4 != 4 || ihl < 20 || total < ihl || total > ip.len() {
                return false;
            }
            if be16(ip, 6).unwrap_or(0) & 0x3FFF != 0 {
                return false;
            }
            let proto = ip[9];
            let (src, dst) = (
                [ip[12], ip[13], ip[14], ip[15]],
                [ip[16], ip[17], ip[18], ip[19]],
            );
            let len = total - ihl;
            let Ok(len16) = u16::try_from(len) else {
                return false;
            };
            (
                (proto, pseudo_header_v4(src, dst, proto, len16)),
                &mut ip[ihl..total],
            )
        }
        ETH_P_IPV6 => {
            if ip.len() < 40 || ip[0] >> 4 != 6 {
                return false;
            }
            let len = usize::from(be16(ip, 4).unwrap_or(0));
            if 40 + len > ip.len() {
                return false;
            }
            let proto = ip[6];
            let mut src = [0u8; 16];
            let mut dst = [0u8; 16];
            src.copy_from_slice(&ip[8..24]);
            dst.copy_from_slice(&ip[24..40]);
            (
                (proto, pseudo_header_v6(&src, &dst, proto, len as u32)),
                &mut ip[40..40 + len],
            )
        }
        _ => return false,
    };
    let (proto, pseudo) = pseudo_of;
    let at = match proto {
        TCP if l4.len() >= 20 => 16,
        UDP if l4.len() >= 8 => 6,
        _ => return false,
    };
    let field = u16::from_be_bytes([l4[at], l4[at + 1]]);
    // The cheap test first: a complete checksum almost never equals this.
    if !ones_eq(field, fold(pseudo)) {
        return false;
    }
    // `field` stands in for the pseudo-header, so the sum over the segment as it lies
    // is what the sender's NIC would have summed.
    let over_segment = fold(sum(l4));
    if fold(combine(pseudo, u32::from(over_segment))) == 0xFFFF {
        // It verifies: a complete checksum that equals the pseudo-header sum.
        return false;
    }
    let mut c = !over_segment;
    if proto == UDP && c == 0 {
        c = 0xFFFF;
    }
    l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::checksum::checksum;

    /// Ethernet + IPv4 + TCP or UDP with `payload`; `partial` leaves the checksum as a
    /// sender with checksum offload does (the folded pseudo-header sum).
    fn frame_v4(proto: u8, payload: &[u8], partial: bool, vlan: bool) -> Vec<u8> {
        let l4_hdr = if proto == TCP { 20 } else { 8 };
        let l4_len = l4_hdr + payload.len();
        let mut f = vec![0u8; 12];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let l3 = f.len();
        f.resize(l3 + 20 + l4_len, 0);
        let ip = &mut f[l3..l3 + 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((20 + l4_len) as u16).to_be_bytes());
        ip[6] = 0x40; // DF
        ip[8] = 64;
        ip[9] = proto;
        ip[12..16].copy_from_slice(&[10, 0, 0, 2]);
        ip[16..20].copy_from_slice(&[198, 51, 100, 2]);
        let c = checksum(ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let l4 = &mut f[l3 + 20..];
        l4[0..2].copy_from_slice(&40000u16.to_be_bytes());
        l4[2..4].copy_from_slice(&5201u16.to_be_bytes());
        if proto == TCP {
            l4[12] = 0x50;
            l4[13] = 0x18;
        } else {
            l4[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
        }
        l4[l4_hdr..].copy_from_slice(payload);
        let ph = pseudo_header_v4([10, 0, 0, 2], [198, 51, 100, 2], proto, l4_len as u16);
        let at = if proto == TCP { 16 } else { 6 };
        let c = if partial {
            fold(ph)
        } else {
            !fold(combine(ph, sum(l4)))
        };
        l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
        f
    }

    fn verifies_v4(f: &[u8], l3: usize) -> bool {
        let l4 = &f[l3 + 20..];
        let ph = pseudo_header_v4([10, 0, 0, 2], [198, 51, 100, 2], f[l3 + 9], l4.len() as u16);
        fold(combine(ph, sum(l4))) == 0xFFFF
    }

    #[test]
    fn completes_partial_tcp_and_udp_v4_with_and_without_vlan() {
        for proto in [TCP, UDP] {
            for vlan in [false, true] {
                let l3 = if vlan { 18 } else { 14 };
                let mut f = frame_v4(proto, b"some payload, odd length", true, vlan);
                assert!(!verifies_v4(&f, l3));
                assert!(complete_if_partial(&mut f), "proto {proto} vlan {vlan}");
                assert!(verifies_v4(&f, l3), "proto {proto} vlan {vlan}");
                // Complete now: a second pass leaves it alone.
                let done = f.clone();
                assert!(!complete_if_partial(&mut f));
                assert_eq!(f, done);
            }
        }
    }

    #[test]
    fn completes_partial_tcp_v6() {
        let payload = [0xA5u8; 1000];
        let (src, dst) = (
            [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
        );
        let l4_len = 20 + payload.len();
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x86, 0xDD]);
        let mut ip = vec![0u8; 40];
        ip[0] = 0x60;
        ip[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
        ip[6] = TCP;
        ip[7] = 64;
        ip[8..24].copy_from_slice(&src);
        ip[24..40].copy_from_slice(&dst);
        f.extend_from_slice(&ip);
        let mut l4 = vec![0u8; 20];
        l4[12] = 0x50;
        l4.extend_from_slice(&payload);
        let ph = pseudo_header_v6(&src, &dst, TCP, l4_len as u32);
        l4[16..18].copy_from_slice(&fold(ph).to_be_bytes());
        f.extend_from_slice(&l4);
        assert!(complete_if_partial(&mut f));
        assert_eq!(fold(combine(ph, sum(&f[54..]))), 0xFFFF);
    }

    #[test]
    fn leaves_complete_and_unrelated_frames_alone() {
        for proto in [TCP, UDP] {
            let mut f = frame_v4(proto, b"already complete", false, false);
            let orig = f.clone();
            assert!(!complete_if_partial(&mut f));
            assert_eq!(f, orig);
        }
        // A fragment, ARP, and every truncation: untouched, no panic.
        let partial = frame_v4(UDP, b"0123456789", true, false);
        let mut frag = partial.clone();
        frag[14 + 6] = 0x20; // MF
        assert!(!complete_if_partial(&mut frag));
        let mut arp = partial.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(!complete_if_partial(&mut arp));
        for n in 0..partial.len() {
            let mut h = partial[..n].to_vec();
            assert!(!complete_if_partial(&mut h), "truncated to {n}");
        }
        // Ethernet padding after the datagram is not summed.
        let mut padded = frame_v4(UDP, b"x", true, false);
        padded.extend_from_slice(&[0xEE; 20]);
        assert!(complete_if_partial(&mut padded));
        assert!(verifies_v4(&padded[..padded.len() - 20], 14));
    }
}
