//! The one shape every translation mode has: a shared half ([`Mode`]) that hands out one
//! [`ModeWorker`] per data-plane thread, and a worker that decides, for one packet, every
//! packet the gateway sends because of it ([`Emit`]).
//!
//! ```text
//!  runtime ──Frame──► ModeWorker::process(now, dir, frame, egress) ──► Emit
//!                        │ translate in frame.buf                       Forward / Hairpin: frame.buf[start..start + len]
//!                        │ or answer / cut into frame.out               Reply / Fragments: frame.out's packets
//!                        ▼                                              Drop(reason): nothing (counted)
//! ```
//!
//! The engine decides; the runtime only transmits. An ICMP error the gateway owes (Time
//! Exceeded, Fragmentation Needed, Packet Too Big) is built by the step that decided it
//! ([`reply`]), from the addresses and MTUs the runtime passes in ([`Egress`]) and rate
//! limited by the `now` passed in; an IPv4 packet without DF too big for the IPv6 side is
//! cut and each fragment translated ([`fragment`], RFC 7915 §4.1), and an IPv6 packet
//! whose IPv4 translation has DF clear and is too big for the IPv4 next hop is translated
//! and cut in IPv4 (RFC 7915 §5.1.1). So a pcap replay emits exactly what the live
//! gateway transmits.
//!
//! A mode never reads a clock, never does I/O and never panics on packet bytes.

pub mod fragment;
mod output;
pub mod reply;
#[cfg(test)]
mod tests;

use std::net::{Ipv4Addr, Ipv6Addr};

use conntrack::Timestamp;

use crate::{Counters, Direction, DropReason, Offload};

pub use output::Output;

/// Bytes a buffer must leave free in front of a packet handed to a mode: IPv4 -> IPv6
/// grows the header by 20 bytes (28 with a Fragment header), and an ICMP error is built in
/// front of the packet it quotes, with room for a link header before that.
pub const HEADROOM: usize = 64;

/// Which interface of the gateway: the one facing the inside network or the outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// Facing the inside (private) network.
    Inside = 0,
    /// Facing the outside.
    Outside = 1,
}

impl Side {
    /// The other interface.
    #[inline]
    pub fn other(self) -> Side {
        match self {
            Side::Inside => Side::Outside,
            Side::Outside => Side::Inside,
        }
    }

    /// The direction of a packet received on this side.
    #[inline]
    pub fn arriving(self) -> Direction {
        match self {
            Side::Inside => Direction::Outbound,
            Side::Outside => Direction::Inbound,
        }
    }
}

impl Direction {
    /// The side a packet travelling this way arrives on.
    #[inline]
    pub fn arrives_on(self) -> Side {
        match self {
            Direction::Outbound => Side::Inside,
            Direction::Inbound => Side::Outside,
        }
    }

    /// The side a packet travelling this way leaves by (unless it hairpins).
    #[inline]
    pub fn leaves_by(self) -> Side {
        self.arrives_on().other()
    }
}

/// An IP version a mode translates on one side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl Family {
    /// The family of the IP packet `pkt` by its version nibble.
    #[inline]
    pub fn of(pkt: &[u8]) -> Option<Family> {
        match pkt.first().map(|b| b >> 4) {
            Some(4) => Some(Family::V4),
            Some(6) => Some(Family::V6),
            _ => None,
        }
    }

    /// 4 or 6.
    pub fn version(self) -> u8 {
        match self {
            Family::V4 => 4,
            Family::V6 => 6,
        }
    }
}

/// What a mode knows of one of the gateway's links.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Link {
    /// The link MTU: the largest IP packet that leaves by it (`None`: not limited, as in a
    /// capture replay without one configured).
    pub mtu: Option<u32>,
    /// The gateway's IPv4 address on the link: the source of the ICMPv4 errors it sends
    /// out of it (`None`: it sends none there).
    pub addr4: Option<Ipv4Addr>,
    /// The gateway's IPv6 address on the link: the source of its ICMPv6 errors there.
    pub addr6: Option<Ipv6Addr>,
}

/// The outside world as a mode needs it: the two links, indexed by [`Side`]. The live
/// runtime fills it from the interfaces (and the configuration); a capture replay from the
/// configuration alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Egress {
    /// Inside and outside link.
    pub links: [Link; 2],
}

impl Egress {
    /// The link on `side`.
    #[inline]
    pub fn link(&self, side: Side) -> &Link {
        &self.links[side as usize]
    }

    /// The MTU a packet travelling `dir` is held to where it leaves (`None`: no limit, or
    /// a GSO super-packet, whose segments the runtime sizes for the link).
    #[inline]
    pub fn leaving_mtu(&self, dir: Direction, offload: Offload) -> Option<u32> {
        match offload {
            Offload::Gso => None,
            _ => self.link(dir.leaves_by()).mtu,
        }
    }
}

/// One packet handed to a mode, and the place for packets the mode originates because of
/// it. `buf[start..start + len]` is the IP packet (link padding after the IP length may be
/// included); a mode that grows headers needs [`HEADROOM`] bytes in front of `start`.
#[derive(Debug)]
pub struct Frame<'a> {
    /// The buffer holding the packet.
    pub buf: &'a mut [u8],
    /// Offset of the IP header.
    pub start: usize,
    /// Bytes from `start` handed in.
    pub len: usize,
    /// What a receive offload left unfinished in the packet.
    pub offload: Offload,
    /// The packet arrived in a link-layer broadcast or multicast frame. No ICMP error is
    /// sent about it (RFC 1812 §4.3.2.7; RFC 4443 §2.4 (e.3, e.4), which still allows an
    /// IPv6 Packet Too Big).
    pub link_group: bool,
    /// Where ICMP errors and fragments go (cleared by the mode when it writes any).
    pub out: &'a mut Output,
}

impl<'a> Frame<'a> {
    /// A complete packet at `buf[start..start + len]`.
    pub fn new(buf: &'a mut [u8], start: usize, len: usize, out: &'a mut Output) -> Self {
        Frame {
            buf,
            start,
            len,
            offload: Offload::None,
            link_group: false,
            out,
        }
    }

    /// The packet's bytes (empty when `start`/`len` lie outside the buffer).
    #[inline]
    pub fn packet(&self) -> &[u8] {
        self.buf
            .get(self.start..self.start.saturating_add(self.len))
            .unwrap_or(&[])
    }

    /// The packet's bytes, mutable (empty when `start`/`len` lie outside the buffer).
    #[inline]
    pub fn packet_mut(&mut self) -> &mut [u8] {
        let end = self.start.saturating_add(self.len);
        self.buf.get_mut(self.start..end).unwrap_or(&mut [])
    }
}

/// What the gateway sends because of one packet. Counted by the mode either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Emit {
    /// Send `frame.buf[start..start + len]` out of the other side.
    Forward {
        /// Offset of the IP header.
        start: usize,
        /// Packet length.
        len: usize,
    },
    /// Send `frame.buf[start..start + len]` back out of the side it came in on
    /// (hairpinning between two inside hosts).
    Hairpin {
        /// Offset of the IP header.
        start: usize,
        /// Packet length.
        len: usize,
    },
    /// The packet is dropped for the reason, and its sender is answered with the ICMP
    /// error in `frame.out` (its only packet), which leaves by the side the packet came in on.
    Reply(DropReason),
    /// The packet was cut into fragments, each translated (or translated, then cut):
    /// `frame.out`'s packets, in order, leave by the other side (RFC 7915 §4.1, §5.1.1).
    Fragments,
    /// Nothing is sent; the reason is counted.
    Drop(DropReason),
}

impl Emit {
    /// Whether the packet itself is sent on (forwarded or hairpinned).
    #[inline]
    pub fn is_forward(&self) -> bool {
        matches!(self, Emit::Forward { .. } | Emit::Hairpin { .. })
    }

    /// Why the packet was not sent on (`Reply` and `Drop`), if it was not.
    #[inline]
    pub fn drop_reason(&self) -> Option<DropReason> {
        match *self {
            Emit::Reply(r) | Emit::Drop(r) => Some(r),
            _ => None,
        }
    }
}

/// One data-plane thread's translator (owned by its thread: `Send`, no borrowed state).
pub trait ModeWorker: Send + 'static {
    /// Decides what the gateway sends because of the packet in `frame`, which arrived
    /// travelling `dir` (outbound: received on the inside). Never panics on any bytes.
    fn process(
        &mut self,
        now: Timestamp,
        dir: Direction,
        frame: &mut Frame<'_>,
        egress: &Egress,
    ) -> Emit;

    /// Packets the mode originates with no packet arriving, because time passed (a held
    /// TCP SYN answered after 6 s, RFC 5382 REQ-4): written into `out` (cleared first),
    /// each to be routed by its destination; returns how many. The runtime calls it
    /// between batches with the batch's `now`; the default has nothing to send.
    fn poll(&mut self, _now: Timestamp, _egress: &Egress, _out: &mut Output) -> usize {
        0
    }

    /// When [`poll`](Self::poll) next has something to send (`None`: nothing pending).
    fn poll_timeout(&self) -> Option<Timestamp> {
        None
    }

    /// This worker's counters.
    fn counters(&self) -> &Counters;

    /// A quiescent point: call between batches, never with a packet half processed.
    fn quiescent(&self) {}

    /// Idle: holds no references into shared tables (before sleeping).
    fn offline(&self) {}

    /// The start of a batch: a mode whose policy reloads live picks up the generation
    /// in force here (one atomic load; see `crate::reload`).
    fn begin_batch(&mut self) {}

    /// Look-ahead for a batch: the runtime may call this with every packet of a received
    /// batch (the IP packet, as `process` will see it, travelling `dir`), in order, before
    /// it processes the first of them; the mode starts loading what those packets will need
    /// (index buckets, then session lines) so that their DRAM misses overlap instead of
    /// following each other. A hint: it never changes what `process` decides, and a packet
    /// hinted but never processed (or the reverse) only wastes the hint. The default does
    /// nothing.
    #[inline]
    fn prefetch(&mut self, _dir: Direction, _pkt: &[u8]) {}
}

/// Expiry work a stateful mode needs done beside its workers (one thread).
pub trait Reaper: Send {
    /// When [`handle_timeout`](Self::handle_timeout) should next run.
    fn poll_timeout(&self) -> Option<Timestamp>;
    /// One pass: expire, release, reclaim.
    fn handle_timeout(&mut self, now: Timestamp);
    /// Between passes: reclaim what the workers evicted at a full table (cheap when there
    /// is nothing). True while anything is still waiting: call again within a
    /// millisecond or so.
    fn drain(&mut self, _now: Timestamp) -> bool {
        false
    }
    /// The reaper's own counters (expiries).
    fn counters(&self) -> &Counters;
}

/// The shared half of a mode: its tables and configuration, handing out workers.
pub trait Mode: Send + Sync {
    /// A worker's type.
    type Worker: ModeWorker;
    /// The mode's name as operators write it (`nat44`, `nat64`, `siit`, `clat`, `ila`).
    fn name(&self) -> &'static str;
    /// The IP version the mode translates on the inside and on the outside (the other
    /// family is left to the host there).
    fn families(&self) -> [Family; 2];
    /// Whether packets keep their size (translated where they lie, no headroom needed).
    fn in_place(&self) -> bool;
    /// The worker of thread `id` (`0..workers`).
    fn worker(&self, id: usize) -> Self::Worker;
    /// The reaper, for a mode with state to expire.
    fn reaper(&self) -> Option<Box<dyn Reaper>>;
    /// Which way a packet from a capture travels, judged from its bytes and the
    /// configuration (a live gateway knows by the interface instead).
    fn classify(&self, pkt: &[u8]) -> Direction;
    /// Live sessions, or mappings for ILA (a walk: for reports, not the packet path).
    fn session_count(&self) -> usize;
}
