//! Flow offload for the stateless translator: the runtime's fast path (XDP or tc) may
//! translate a SIIT or CLAT flow's TCP/UDP packets itself, and the translator stays the
//! brain.
//!
//! SIIT keeps no state, so there is no session to offload: what the fast path learns is
//! a *flow* the translator has just translated — the 5-tuple a packet arrived with and
//! the one it left with (ports unchanged, addresses as the EAM table or the Pref64 gave
//! them) — one entry per direction. A worker hints a flow at its second packet in the
//! same direction (a one-packet exchange, a DNS query, is never worth a map entry), and
//! again at most once a second while its packets keep reaching the engine (the fast
//! path leaves it some: SYN/FIN/RST, hop limit 1, oversize, fragments). Each hint carries
//! the configuration generation that translated the packet: the runtime drops a hint of
//! an older one, and flushes what it installed when a reload publishes a new one.
//!
//! Off by default: with no offload attached each packet pays one branch.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use conntrack::Timestamp;

/// Most hints waiting for the runtime's next drain; past it a worker drops its hint (the
/// flow's next packet hints again).
const MAX_HINTS: usize = 4096;

/// Slots of a worker's filter of recently seen flows (a power of two).
const RECENT_SLOTS: usize = 4096;

/// A flow hinted is hinted again, while its packets reach the engine, this often at most.
const REHINT_NS: u64 = 1_000_000_000;

const TCP: u8 = 6;
const UDP: u8 = 17;

/// One direction of a TCP or UDP flow, as a packet's headers give it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// 6 (TCP) or 17 (UDP).
    pub proto: u8,
    /// Source address (both addresses are of one family).
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

impl FlowKey {
    /// The flow of the unfragmented TCP or UDP packet `pkt` (an IPv4 header of any
    /// length, an IPv6 header followed directly by TCP or UDP); `None` for anything else.
    pub fn of(pkt: &[u8]) -> Option<FlowKey> {
        let (proto, src, dst, l4) = match pkt.first()? >> 4 {
            4 => {
                let h = pkt.get(..20)?;
                // More fragments or an offset: not a whole datagram.
                if u16::from_be_bytes([h[6], h[7]]) & 0x3fff != 0 {
                    return None;
                }
                let ihl = usize::from(h[0] & 0x0f) * 4;
                let src = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
                let dst = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
                (h[9], IpAddr::V4(src), IpAddr::V4(dst), ihl.max(20))
            }
            6 => {
                let h = pkt.get(..40)?;
                let a = |at: usize| {
                    let mut o = [0u8; 16];
                    o.copy_from_slice(&h[at..at + 16]);
                    IpAddr::V6(Ipv6Addr::from(o))
                };
                (h[6], a(8), a(24), 40)
            }
            _ => return None,
        };
        if proto != TCP && proto != UDP {
            return None;
        }
        let p = pkt.get(l4..l4 + 4)?;
        Some(FlowKey {
            proto,
            src,
            dst,
            sport: u16::from_be_bytes([p[0], p[1]]),
            dport: u16::from_be_bytes([p[2], p[3]]),
        })
    }

    /// A cheap 64-bit hash (for a worker's filter, not a table an attacker fills).
    fn hash(&self) -> u64 {
        let fold = |a: &IpAddr| match a {
            IpAddr::V4(a) => u64::from(u32::from(*a)),
            IpAddr::V6(a) => {
                let v = u128::from(*a);
                (v as u64) ^ ((v >> 64) as u64).rotate_left(17)
            }
        };
        let mut h = fold(&self.src).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= fold(&self.dst).rotate_left(29);
        h ^= u64::from(self.sport) << 40 | u64::from(self.dport) << 8 | u64::from(self.proto);
        h = (h ^ (h >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^ (h >> 29)
    }
}

/// A flow the translator translated: as it arrived, as it left, and by which
/// configuration generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowHint {
    /// The packet's flow as it arrived.
    pub from: FlowKey,
    /// As it left (the other family; the same ports).
    pub to: FlowKey,
    /// The configuration generation that translated it.
    pub generation: u64,
}

/// The hints the workers queued, waiting for the runtime's drain; shared by every
/// worker.
#[derive(Debug, Default)]
pub struct FlowHints {
    queue: Mutex<Vec<FlowHint>>,
    pending: AtomicBool,
    /// The queue is full: a worker learns it from this load, without the lock.
    full: AtomicBool,
}

/// How a push went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Push {
    Queued,
    /// Another worker (or the drain) held the queue this instant.
    Busy,
    /// The queue is full: the runtime is behind.
    Full,
}

impl FlowHints {
    /// Queues `h` (never blocks).
    fn push(&self, h: FlowHint) -> Push {
        if self.full.load(Ordering::Relaxed) {
            return Push::Full;
        }
        let Ok(mut q) = self.queue.try_lock() else {
            return Push::Busy;
        };
        if q.len() >= MAX_HINTS {
            self.full.store(true, Ordering::Relaxed);
            return Push::Full;
        }
        q.push(h);
        self.pending.store(true, Ordering::Release);
        Push::Queued
    }

    /// Moves every queued hint to `out` (one load when none waits).
    pub fn drain(&self, out: &mut Vec<FlowHint>) {
        if !self.pending.swap(false, Ordering::AcqRel) {
            return;
        }
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        out.append(&mut q);
        self.full.store(false, Ordering::Relaxed);
    }
}

/// One slot of a worker's filter: a flow's hash and when it was seen or hinted.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    hash: u64,
    /// When the flow was first seen (`hinted` false) or last hinted; 0: an empty slot.
    at: u64,
    hinted: bool,
}

/// One worker's side: the queue, and the flows it saw lately (a direct-mapped filter: a
/// collision only costs a hint later or sooner). A slot's flow, seen once and not hinted
/// yet, keeps the slot for a second against newcomers: with many more flows than slots
/// (all of them back from the fast path at once after a reload), each slot still sees a
/// flow through to its second packet instead of losing it to the next flow every time.
#[derive(Clone, Debug)]
pub(super) struct Hinter {
    hints: Arc<FlowHints>,
    recent: Box<[Slot]>,
}

impl Hinter {
    pub(super) fn new(hints: Arc<FlowHints>) -> Self {
        Hinter {
            hints,
            recent: vec![Slot::default(); RECENT_SLOTS].into_boxed_slice(),
        }
    }

    /// Whether `from`, seen at `now`, is to be hinted (its second packet, or a second
    /// since its last hint); records the sighting.
    pub(super) fn wanted(&mut self, from: &FlowKey, now: Timestamp) -> bool {
        let hash = from.hash();
        let now = now.as_nanos();
        let s = &mut self.recent[(hash as usize) & (RECENT_SLOTS - 1)];
        if s.hash != hash || s.at == 0 {
            let fresh = s.at != 0 && !s.hinted && now.saturating_sub(s.at) < REHINT_NS;
            if !fresh {
                *s = Slot {
                    hash,
                    at: now.max(1),
                    hinted: false,
                };
            }
            return false;
        }
        if s.hinted && now.saturating_sub(s.at) < REHINT_NS {
            return false;
        }
        s.hinted = true;
        s.at = now;
        true
    }

    /// Queues the hint. When the queue was busy this instant the flow's next packet
    /// hints again; when it is full (the runtime is behind) the flow waits its second, as
    /// after a hint, so a backlog never costs the workers a lock per packet.
    pub(super) fn hint(&mut self, h: FlowHint) {
        if self.hints.push(h) == Push::Busy {
            let hash = h.from.hash();
            self.recent[(hash as usize) & (RECENT_SLOTS - 1)].hinted = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4_udp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[9] = UDP;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p
    }

    #[test]
    fn the_flow_of_a_packet_is_read_from_its_headers_and_only_whole_tcp_udp_count() {
        let p = v4_udp([10, 0, 0, 1], [10, 0, 0, 2], 4000, 53);
        let k = FlowKey::of(&p).unwrap();
        assert_eq!(k.src, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!((k.proto, k.sport, k.dport), (UDP, 4000, 53));
        // A fragment (MF), ICMP, a truncated header, an IPv6 extension header: none.
        let mut f = p.clone();
        f[6] = 0x20;
        assert_eq!(FlowKey::of(&f), None);
        let mut icmp = p.clone();
        icmp[9] = 1;
        assert_eq!(FlowKey::of(&icmp), None);
        assert_eq!(FlowKey::of(&p[..22]), None);
        assert_eq!(FlowKey::of(&[]), None);
        let mut v6 = vec![0u8; 48];
        v6[0] = 0x60;
        v6[6] = TCP;
        v6[23] = 1;
        v6[39] = 2;
        v6[40..42].copy_from_slice(&443u16.to_be_bytes());
        v6[42..44].copy_from_slice(&5555u16.to_be_bytes());
        let k6 = FlowKey::of(&v6).unwrap();
        assert_eq!((k6.proto, k6.sport, k6.dport), (TCP, 443, 5555));
        assert_eq!(k6.dst, IpAddr::V6(Ipv6Addr::from(2u128)));
        v6[6] = 60;
        assert_eq!(FlowKey::of(&v6), None);
    }

    #[test]
    fn a_flow_is_hinted_at_its_second_packet_then_at_most_once_a_second() {
        let hints = Arc::new(FlowHints::default());
        let mut w = Hinter::new(Arc::clone(&hints));
        let k = FlowKey::of(&v4_udp([10, 0, 0, 1], [10, 0, 0, 2], 4000, 53)).unwrap();
        let t = |ms: u64| Timestamp::from_nanos(1_000_000_000 + ms * 1_000_000);
        assert!(!w.wanted(&k, t(0)), "a first packet is not hinted");
        assert!(w.wanted(&k, t(1)), "the second is");
        assert!(!w.wanted(&k, t(2)));
        assert!(!w.wanted(&k, t(999)));
        assert!(w.wanted(&k, t(1001)), "a second later, again");
        // Another flow in the same slot takes it once `k` was hinted; `k` then waits while
        // the newcomer, seen once, keeps the slot for its second packet.
        let mut other = k;
        while other.hash() & (RECENT_SLOTS as u64 - 1) != k.hash() & (RECENT_SLOTS as u64 - 1)
            || other == k
        {
            other.sport = other.sport.wrapping_add(1);
        }
        assert!(!w.wanted(&other, t(1002)));
        assert!(!w.wanted(&k, t(1003)), "the newcomer keeps the slot");
        assert!(
            w.wanted(&other, t(1004)),
            "and is hinted at its second packet"
        );
        assert!(!w.wanted(&k, t(1005)), "then gives way");
        assert!(w.wanted(&k, t(1006)));
        // A newcomer seen once gives way after a second.
        assert!(!w.wanted(&other, t(1007)));
        assert!(!w.wanted(&k, t(1500)));
        assert!(!w.wanted(&k, t(2008)), "stale: k takes the slot back");
        assert!(w.wanted(&k, t(2009)));
    }

    #[test]
    fn hints_are_drained_in_order_and_a_full_queue_refuses_without_losing_the_flow() {
        let hints = Arc::new(FlowHints::default());
        let mut w = Hinter::new(Arc::clone(&hints));
        let k = FlowKey::of(&v4_udp([10, 0, 0, 1], [10, 0, 0, 2], 4000, 53)).unwrap();
        let h = |g| FlowHint {
            from: k,
            to: k,
            generation: g,
        };
        let mut out = Vec::new();
        hints.drain(&mut out);
        assert!(out.is_empty());
        for g in 0..MAX_HINTS as u64 {
            assert_eq!(hints.push(h(g)), Push::Queued);
        }
        // Full: refused without the lock, and the flow waits its second as if hinted.
        let t = |ms: u64| Timestamp::from_nanos(1_000_000_000 + ms * 1_000_000);
        assert_eq!(hints.push(h(1)), Push::Full);
        assert!(hints.full.load(Ordering::Relaxed));
        assert!(!w.wanted(&k, t(0)));
        assert!(w.wanted(&k, t(1)));
        w.hint(h(9999));
        assert!(!w.wanted(&k, t(2)), "full: no retry at the next packet");
        assert!(w.wanted(&k, t(1002)), "a second later");
        hints.drain(&mut out);
        assert_eq!(out.len(), MAX_HINTS);
        assert_eq!(out[0].generation, 0);
        assert_eq!(out[MAX_HINTS - 1].generation, MAX_HINTS as u64 - 1);
        out.clear();
        hints.drain(&mut out);
        assert!(out.is_empty(), "drained once");
        assert_eq!(hints.push(h(7)), Push::Queued, "no longer full");
        // Busy (the lock held elsewhere): the next packet hints again.
        assert!(!w.wanted(&k, t(1003)));
        {
            let _held = hints.queue.lock().unwrap();
            w.hint(h(9998));
        }
        assert!(w.wanted(&k, t(1004)), "busy: hinted again at once");
    }
}
