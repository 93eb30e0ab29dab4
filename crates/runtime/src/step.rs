//! One frame through NAT44: find the IPv4 header behind the link header, choose the
//! direction by the configuration (is the source an inside address?), run the engine.

use conntrack::Timestamp;
use engine::nat44::Nat44;
use engine::{Direction, Verdict};
use io::pcap::LinkType;
use wire::{EtherType, EthernetFrame};

/// Where the layer-3 packet starts in a frame of `link` type, or `None` for frames that
/// carry no IP (ARP, unknown link types): those are not the NAT's business.
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

/// What happened to one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepOutcome {
    /// Not an IP frame: left to the host (ARP and friends); never given to the engine.
    NotIp,
    /// The engine's verdict, and the direction the frame was judged to travel.
    Engine(Direction, Verdict),
}

/// NAT44 with the step that turns frames into engine calls and keeps the reaper on time.
#[derive(Debug)]
pub struct Nat44Step {
    /// The engine.
    pub nat: Nat44,
}

impl Nat44Step {
    /// Wraps an engine.
    pub fn new(nat: Nat44) -> Self {
        Self { nat }
    }

    /// Runs the reaper if it is due, then translates one frame in place.
    pub fn frame(&mut self, now: Timestamp, link: LinkType, frame: &mut [u8]) -> StepOutcome {
        if self.nat.poll_timeout().is_some_and(|t| t <= now) {
            self.nat.handle_timeout(now);
        }
        let Some(off) = l3_offset(link, frame) else {
            return StepOutcome::NotIp;
        };
        let pkt = &mut frame[off..];
        // Direction from the configuration: a source inside a rule, static mapping or
        // forward target is the inside. Unparseable packets go in as inbound and are
        // dropped with their reason either way.
        let dir = match pkt.get(12..16) {
            Some(s) if pkt[0] >> 4 == 4 && self.nat.is_inside([s[0], s[1], s[2], s[3]].into()) => {
                Direction::Outbound
            }
            _ => Direction::Inbound,
        };
        StepOutcome::Engine(dir, self.nat.process(now, dir, pkt))
    }
}
