//! Unsolicited inbound TCP SYNs held for a simultaneous open (RFC 5382 REQ-4, RFC 6146
//! §3.5.2.2), shared by every worker of one NAT44 (or NAT64) instance.
//!
//! RFC 5382 REQ-4: "A NAT MUST NOT respond to an unsolicited inbound SYN packet for at
//! least 6 seconds after the packet is received. If during this interval the NAT receives
//! and translates an outbound SYN for the connection the NAT MUST silently drop the
//! original unsolicited inbound SYN packet. Otherwise, the NAT SHOULD send an ICMP Port
//! Unreachable error (Type 3, Code 3) for the original SYN". RFC 6146 §3.5.2.2 asks the
//! same of a NAT64 for a SYN with no BIB entry or one its filtering refuses.
//!
//! The store is bounded (`max_simultaneous_opens` SYNs, each kept up to the 548 bytes an
//! ICMPv4 error quotes) and allocated once: holding, releasing and expiring never
//! allocate. It sits behind a mutex taken only on those rare events; the packet path
//! reads one atomic counter to learn that nothing is held.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use conntrack::{Timestamp, Tuple};

/// How long an unsolicited SYN is held (RFC 5382 REQ-4, RFC 6146 §3.5.2.2: 6 s).
pub const SYN_HOLD: Duration = Duration::from_secs(6);
/// Held SYNs at most by default (Jool's `maximum-simultaneous-opens`).
pub const MAX_SIMULTANEOUS_OPENS: usize = 10;
/// The largest `max_simultaneous_opens` accepted (the store is allocated up front).
pub const MAX_SIMULTANEOUS_OPENS_LIMIT: usize = 4096;
/// Bytes kept of a held SYN: what an ICMPv4 error quotes at most (576 - 28, RFC 1812
/// §4.3.2.3).
const HELD_BYTES: usize = 548;

/// One held SYN.
struct Held {
    /// Its tuple as it arrived (remote -> public endpoint).
    tuple: Tuple,
    /// When it is answered.
    until: Timestamp,
    /// Bytes kept.
    len: usize,
    bytes: [u8; HELD_BYTES],
}

/// What [`HeldSyns::hold`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    /// Held until the 6 s pass or an outbound SYN releases it.
    Held,
    /// A SYN of that tuple is held already (a retransmission): this one is dropped.
    Again,
    /// The store is full: dropped.
    Full,
}

/// The held SYNs of one instance.
pub(crate) struct HeldSyns {
    cap: usize,
    /// How many are held: the packet path's lock-free "nothing to do" check.
    count: AtomicUsize,
    /// The earliest deadline in nanoseconds (`u64::MAX`: none).
    next: AtomicU64,
    slots: Mutex<Vec<Held>>,
}

impl std::fmt::Debug for HeldSyns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldSyns")
            .field("cap", &self.cap)
            .field("count", &self.count.load(Ordering::Relaxed))
            .finish()
    }
}

impl HeldSyns {
    /// A store for `cap` SYNs (0: none is ever held).
    pub fn new(cap: usize) -> Self {
        HeldSyns {
            cap,
            count: AtomicUsize::new(0),
            next: AtomicU64::new(u64::MAX),
            slots: Mutex::new(Vec::with_capacity(cap)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Held>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Republishes the count and the earliest deadline after a change.
    fn publish(&self, slots: &[Held]) {
        let next = slots
            .iter()
            .map(|h| h.until.as_nanos())
            .min()
            .unwrap_or(u64::MAX);
        self.next.store(next, Ordering::Relaxed);
        self.count.store(slots.len(), Ordering::Release);
    }

    /// Holds the SYN `pkt` (tuple `t`, arrived at `now`).
    pub fn hold(&self, now: Timestamp, t: &Tuple, pkt: &[u8]) -> Hold {
        let mut slots = self.lock();
        if slots.iter().any(|h| h.tuple == *t) {
            return Hold::Again;
        }
        if slots.len() >= self.cap {
            return Hold::Full;
        }
        let len = pkt.len().min(HELD_BYTES);
        let mut bytes = [0u8; HELD_BYTES];
        bytes[..len].copy_from_slice(&pkt[..len]);
        slots.push(Held {
            tuple: *t,
            until: now + SYN_HOLD,
            len,
            bytes,
        });
        self.publish(&slots);
        Hold::Held
    }

    /// An outbound SYN was translated to `t` (public endpoint -> remote): the SYN held
    /// for the reverse tuple, if any, is dropped silently. Whether one was.
    #[inline]
    pub fn release(&self, t: &Tuple) -> bool {
        if self.count.load(Ordering::Acquire) == 0 {
            return false;
        }
        let reply = t.reversed();
        let mut slots = self.lock();
        let Some(i) = slots.iter().position(|h| h.tuple == reply) else {
            return false;
        };
        slots.swap_remove(i);
        self.publish(&slots);
        true
    }

    /// When the next held SYN is due (`None`: none is held).
    #[inline]
    pub fn next_expiry(&self) -> Option<Timestamp> {
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        match self.next.load(Ordering::Relaxed) {
            u64::MAX => None,
            n => Some(Timestamp::from_nanos(n)),
        }
    }

    /// Removes every SYN due at `now`, handing each (the bytes kept of it) to `answer`.
    pub fn expire(&self, now: Timestamp, mut answer: impl FnMut(&[u8])) {
        if self.next_expiry().is_none_or(|t| t > now) {
            return;
        }
        let mut slots = self.lock();
        let mut i = 0;
        while i < slots.len() {
            if slots[i].until <= now {
                let h = slots.swap_remove(i);
                answer(&h.bytes[..h.len]);
            } else {
                i += 1;
            }
        }
        self.publish(&slots);
    }

    /// How many are held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }
}

// Memory estimate.
impl HeldSyns {
    /// Bytes a store for `cap` SYNs holds (reserved up front).
    pub fn bytes_for(cap: usize) -> usize {
        cap.saturating_mul(std::mem::size_of::<Held>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use conntrack::{Endpoint, Proto};
    use std::net::Ipv4Addr;

    fn tuple(port: u16) -> Tuple {
        Tuple::new(
            Proto::Tcp,
            Endpoint::new(Ipv4Addr::new(198, 51, 100, 2), port),
            Endpoint::new(Ipv4Addr::new(203, 0, 113, 1), 5000),
        )
    }

    #[test]
    fn held_until_six_seconds_bounded_and_released_by_the_reverse_tuple() {
        let h = HeldSyns::new(2);
        let t0 = Timestamp::from_secs(10);
        assert_eq!(h.hold(t0, &tuple(1), &[1; 600]), Hold::Held);
        assert_eq!(h.hold(t0, &tuple(1), &[1; 60]), Hold::Again);
        assert_eq!(
            h.hold(Timestamp::from_secs(11), &tuple(2), &[2; 60]),
            Hold::Held
        );
        assert_eq!(h.hold(t0, &tuple(3), &[3; 60]), Hold::Full);
        assert_eq!(h.next_expiry(), Some(Timestamp::from_secs(16)));
        assert!(h.release(&tuple(2).reversed()));
        assert!(!h.release(&tuple(2).reversed()));
        let mut got = Vec::new();
        h.expire(Timestamp::from_secs(15), |p| got.push(p.to_vec()));
        assert!(got.is_empty(), "not before 6 s");
        h.expire(Timestamp::from_secs(16), |p| got.push(p.to_vec()));
        assert_eq!(
            got,
            vec![vec![1u8; HELD_BYTES]],
            "kept up to what a quote holds"
        );
        assert_eq!((h.len(), h.next_expiry()), (0, None));
        assert_eq!(HeldSyns::new(0).hold(t0, &tuple(1), &[0; 40]), Hold::Full);
    }
}
