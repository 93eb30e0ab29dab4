//! The reuse hold's queue: released ports, oldest first, in a ring whose capacity is set
//! when the pool is made (and allocated at the first release), so what the hold can cost
//! follows from the configuration and never from the rate at which flows end.
//!
//! A full ring makes room by giving its oldest port back before its hold has passed (the
//! caller counts it). A port is never in the ring twice: it stays taken while held.
//!
//! An entry is one `u64`: the port's number in its pool (address index, port, protocol:
//! under 2^50 for any pool, see `PortPool::hold_id`) above a 14-bit release time. The
//! time counts ticks of 1/4096 of the hold (at least 1 ns), so the hold is at most 4096
//! ticks and a port comes back between `hold` and `hold` plus two ticks (59 ms of a
//! 120 s hold) after its release. Fourteen bits are enough because the ring never spans more
//! than a hold and a tick: each push first gives back every port whose hold has passed,
//! so every entry lies within 2^14 ticks of the newest, whose full tick the ring keeps.

use std::time::Duration;

use crate::time::Timestamp;

/// Bits of an entry's release tick.
const TICK_BITS: u32 = 14;
const TICK_MASK: u64 = (1 << TICK_BITS) - 1;
/// Ticks in a hold (the tick's length is the hold over this, rounded up).
const TICKS_PER_HOLD: u64 = 4096;
/// The largest port number an entry can carry.
pub(super) const MAX_ID: u64 = u64::MAX >> TICK_BITS;

/// Bytes one held port costs.
pub(super) const ENTRY_BYTES: usize = std::mem::size_of::<u64>();

/// Released ports waiting out the hold, oldest first, at most `capacity` of them.
#[derive(Debug)]
pub(super) struct HoldQueue {
    /// The ring; empty until the first push.
    ring: Box<[u64]>,
    capacity: usize,
    /// Index of the oldest entry.
    head: usize,
    len: usize,
    /// The newest entry's release tick, in full.
    newest: u64,
    /// Nanoseconds per tick.
    tick_ns: u64,
    /// The hold in ticks (at most [`TICKS_PER_HOLD`]).
    hold_ticks: u64,
}

impl HoldQueue {
    /// A queue holding ports for `hold`, at most `capacity` at once. Allocates nothing.
    pub(super) fn new(hold: Duration, capacity: usize) -> Self {
        let hold_ns = u64::try_from(hold.as_nanos()).unwrap_or(u64::MAX);
        let tick_ns = hold_ns.div_ceil(TICKS_PER_HOLD).max(1);
        Self {
            ring: Box::default(),
            capacity,
            head: 0,
            len: 0,
            newest: 0,
            tick_ns,
            hold_ticks: hold_ns.div_ceil(tick_ns),
        }
    }

    /// Holds at most `capacity` ports from now on; call while nothing is held (a pool
    /// being built).
    pub(super) fn set_capacity(&mut self, capacity: usize) {
        debug_assert_eq!(self.len, 0);
        if self.len == 0 {
            self.capacity = capacity;
            self.ring = Box::default();
            self.head = 0;
        }
    }

    /// The most ports held at once.
    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Ports held now.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Heap bytes allocated (the whole ring once a port was released).
    pub(super) fn bytes(&self) -> usize {
        self.ring.len() * ENTRY_BYTES
    }

    /// Holds port `id` (at most [`MAX_ID`]) released at `now`. First hands every port
    /// whose hold has passed to `give_back`, then, if the ring is still full, the oldest
    /// one, its hold cut short. Returns whether a hold was cut short (with a capacity of
    /// 0, `id` itself is given back at once, and that counts).
    pub(super) fn push(&mut self, now: Timestamp, id: u64, mut give_back: impl FnMut(u64)) -> bool {
        debug_assert!(id <= MAX_ID);
        if self.capacity == 0 {
            give_back(id);
            return true;
        }
        if self.ring.is_empty() {
            self.ring = vec![0; self.capacity].into_boxed_slice();
        }
        self.pop_due(now, &mut give_back);
        let cut = self.len == self.capacity;
        if cut {
            if let Some(oldest) = self.pop_front() {
                give_back(oldest >> TICK_BITS);
            }
        }
        // Rounded up, so the hold is never shorter; never before the newest (a clock
        // stepping back holds longer instead of breaking the order).
        let tick = now.as_nanos().div_ceil(self.tick_ns).max(self.newest);
        self.newest = tick;
        let at = (self.head + self.len) % self.capacity;
        self.ring[at] = id << TICK_BITS | (tick & TICK_MASK);
        self.len += 1;
        cut
    }

    /// Hands every port whose hold has passed at `now` to `give_back`, oldest first.
    /// Returns how many.
    pub(super) fn pop_due(&mut self, now: Timestamp, mut give_back: impl FnMut(u64)) -> usize {
        let now_tick = now.as_nanos() / self.tick_ns;
        let mut n = 0;
        while let Some(tick) = self.front_tick() {
            if tick.saturating_add(self.hold_ticks) > now_tick {
                break;
            }
            if let Some(e) = self.pop_front() {
                give_back(e >> TICK_BITS);
                n += 1;
            }
        }
        n
    }

    /// When the oldest held port's hold passes.
    pub(super) fn next_ready(&self) -> Option<Timestamp> {
        let tick = self.front_tick()?.saturating_add(self.hold_ticks);
        Some(Timestamp::from_nanos(tick.saturating_mul(self.tick_ns)))
    }

    /// The oldest entry's release tick, in full (see the module doc).
    fn front_tick(&self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let low = self.ring[self.head] & TICK_MASK;
        Some(self.newest - (self.newest.wrapping_sub(low) & TICK_MASK))
    }

    fn pop_front(&mut self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let e = self.ring[self.head];
        self.head = (self.head + 1) % self.capacity;
        self.len -= 1;
        Some(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOLD: Duration = Duration::from_secs(120);

    fn secs(s: u64) -> Timestamp {
        Timestamp::from_secs(s)
    }

    fn drain(q: &mut HoldQueue, now: Timestamp) -> Vec<u64> {
        let mut out = Vec::new();
        q.pop_due(now, |id| out.push(id));
        out
    }

    #[test]
    fn a_port_comes_back_after_the_hold_and_not_before() {
        let mut q = HoldQueue::new(HOLD, 8);
        let t = Timestamp::from_nanos(1_234_567_891);
        assert!(!q.push(t, 42, |_| panic!("nothing due")));
        let ready = q.next_ready().unwrap();
        assert!(ready >= t + HOLD, "{ready:?}");
        assert!(
            ready.as_nanos() - (t + HOLD).as_nanos() < 2 * (HOLD.as_nanos() as u64).div_ceil(4096),
            "at most two ticks late: {ready:?}"
        );
        assert!(drain(&mut q, Timestamp::from_nanos(ready.as_nanos() - 1)).is_empty());
        assert_eq!(drain(&mut q, ready), vec![42]);
        assert_eq!((q.len(), q.next_ready()), (0, None));
    }

    /// At capacity, each new port pushes the oldest out early (counted by the caller),
    /// the rest keep their order, and the ring never grows past its capacity.
    #[test]
    fn a_full_queue_gives_the_oldest_back_early_and_keeps_the_order() {
        let mut q = HoldQueue::new(HOLD, 4);
        let mut early = Vec::new();
        let mut cut = 0;
        for id in 0..10u64 {
            cut += usize::from(q.push(secs(id), id, |x| early.push(x)));
            assert!(q.len() <= 4);
            assert_eq!(q.bytes(), 4 * ENTRY_BYTES, "allocated once, at capacity");
        }
        assert_eq!(cut, 6);
        assert_eq!(early, vec![0, 1, 2, 3, 4, 5], "oldest first");
        assert_eq!(drain(&mut q, secs(200)), vec![6, 7, 8, 9]);
    }

    #[test]
    fn capacity_zero_gives_every_port_back_at_once() {
        let mut q = HoldQueue::new(HOLD, 0);
        let mut back = Vec::new();
        assert!(q.push(secs(1), 7, |x| back.push(x)));
        assert_eq!((back, q.len(), q.bytes()), (vec![7], 0, 0));
    }

    /// Days of releases, a few per second of a 1 s hold: the 14-bit ticks wrap many
    /// times and every port still comes back after its hold, in order.
    #[test]
    fn ticks_wrap_without_losing_the_order_or_the_hold() {
        let hold = Duration::from_secs(1);
        let mut q = HoldQueue::new(hold, 16);
        let mut back = Vec::new();
        let mut released = std::collections::HashMap::new();
        let step = 300_000_000u64; // 0.3 s
        for i in 0..1_000_000u64 {
            let now = Timestamp::from_nanos(i * step);
            q.push(now, i, |id| back.push((id, now)));
            released.insert(i, now);
            assert!(q.len() <= 4, "a hold spans at most four releases");
        }
        for (id, at) in back {
            let hold_end = released[&id] + hold;
            assert!(
                at >= hold_end,
                "port {id} back at {at:?}, hold ends {hold_end:?}"
            );
        }
    }

    /// A clock jump far past every hold (a replay's gap), then more releases: the ports
    /// from before the jump come back at the next push, none is stuck.
    #[test]
    fn a_jump_in_time_frees_everything_due() {
        let mut q = HoldQueue::new(HOLD, 8);
        for id in 0..3 {
            q.push(secs(id), id, |_| {});
        }
        let mut back = Vec::new();
        q.push(secs(10_000_000), 9, |x| back.push(x));
        assert_eq!(back, vec![0, 1, 2]);
        assert!(q.next_ready().unwrap() >= secs(10_000_000) + HOLD);
    }

    #[test]
    fn a_clock_stepping_back_holds_longer_never_shorter() {
        let mut q = HoldQueue::new(HOLD, 8);
        q.push(secs(100), 1, |_| {});
        q.push(secs(50), 2, |_| {});
        assert!(drain(&mut q, secs(220)).is_empty());
        assert_eq!(drain(&mut q, secs(221)), vec![1, 2]);
    }
}
