//! Where the IP packet starts in a frame of a given link type.

use io::pcap::LinkType;
use wire::{EtherType, EthernetFrame};

/// Where the layer-3 packet starts in a frame of `link` type, or `None` for frames that
/// carry no IP (ARP, unknown link types): those are not the gateway's business.
pub fn l3_offset(link: LinkType, frame: &[u8]) -> Option<usize> {
    match link {
        LinkType::Ethernet => {
            let eth = EthernetFrame::new_checked(frame).ok()?;
            match eth.ethertype() {
                EtherType::Ipv4 | EtherType::Ipv6 => Some(eth.header_len()),
                _ => None,
            }
        }
        LinkType::Raw | LinkType::Ipv4 | LinkType::Ipv6 => Some(0),
        LinkType::LinuxSll => {
            let proto = frame.get(14..16)?;
            matches!(u16::from_be_bytes([proto[0], proto[1]]), 0x0800 | 0x86dd).then_some(16)
        }
        LinkType::Other(_) => None,
    }
}

/// Whether a frame of `link` type was sent to a link-layer broadcast or multicast address
/// (the Ethernet destination's I/G bit; a Linux cooked capture's packet type 1 or 2). No
/// ICMP error answers such a packet (RFC 1812 §4.3.2.7, RFC 4443 §2.4).
pub fn link_group(link: LinkType, frame: &[u8]) -> bool {
    match link {
        LinkType::Ethernet => frame.first().is_some_and(|b| b & 1 == 1),
        LinkType::LinuxSll => frame
            .get(0..2)
            .is_some_and(|t| matches!(u16::from_be_bytes([t[0], t[1]]), 1 | 2)),
        _ => false,
    }
}
