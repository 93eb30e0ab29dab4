//! Per-subscriber counters (RFC 6888 REQ-4/REQ-5): how many sessions and how
//! many public ports of each protocol one inside host holds, so that one greedy host
//! cannot take a pool address's ports or the session table from everyone else.
//!
//! Shared by all workers without locks. One table per counted kind; each slot is one
//! `AtomicU64` packing a 32-bit fingerprint of the subscriber (a keyed SipHash, never
//! zero) and its 32-bit count, so claiming a slot, counting and freeing it are each a
//! single compare-and-swap:
//!
//! - a subscriber lives in two windows of [`WINDOW`] slots (a cache line each) picked
//!   by the keyed hash (two choices: a window overflows only when both are full); an
//!   outsider cannot aim many subscribers at one window;
//! - `acquire` adds one to the subscriber's slot, or claims an empty slot of the window
//!   with a count of one; it refuses when the sum of the subscriber's slots in the
//!   window has reached the limit (two workers may each claim a slot for a new
//!   subscriber at once: the sum is still right, the limit may be passed by at most
//!   the number of racing workers);
//! - `release` takes one off; the slot whose count would reach zero becomes empty (0)
//!   in the same compare-and-swap, so a slot is never "claimed with nothing in it" and
//!   nothing needs sweeping.
//!
//! The counts never drift as long as every successful `acquire` is matched by one
//! `release` (the engine releases exactly once per session and per binding).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::siphash::SipKey;
use crate::tuple::Proto;

/// Slots per window (8 words: one cache line); a subscriber has two windows.
pub const WINDOW: usize = 8;

/// What is counted per subscriber.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// Live sessions.
    Sessions,
    /// Public ports (dynamic bindings) of one protocol.
    Ports(Proto),
}

impl Counted {
    #[inline]
    fn index(self) -> usize {
        match self {
            Counted::Sessions => 0,
            Counted::Ports(p) => 1 + p.index(),
        }
    }
}

/// Why a subscriber's count was not raised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The subscriber holds `limit` already.
    Limit,
    /// Every slot of the subscriber's window is held by other subscribers.
    Full,
}

/// The counters of every subscriber, for every [`Counted`] kind.
#[derive(Debug)]
pub struct Subscribers {
    key: SipKey,
    /// Slots per table minus one (a power of two minus one).
    mask: usize,
    tables: [Box<[AtomicU64]>; 1 + Proto::COUNT],
}

impl Subscribers {
    /// Room for about `subscribers` subscribers per kind (rounded up to a power of two,
    /// at least one window), with a random key.
    pub fn new(subscribers: usize) -> Self {
        Self::with_key(subscribers, SipKey::random())
    }

    /// Like [`new`](Self::new) with a fixed key (tests).
    pub fn with_key(subscribers: usize, key: SipKey) -> Self {
        let slots = subscribers.clamp(WINDOW, 1 << 30).next_power_of_two();
        let table = || (0..slots).map(|_| AtomicU64::new(0)).collect();
        Self {
            key,
            mask: slots - 1,
            tables: std::array::from_fn(|_| table()),
        }
    }

    /// Heap bytes held.
    pub fn bytes(&self) -> usize {
        (self.mask + 1) * 8 * self.tables.len()
    }

    /// The two windows (first slots) and the fingerprint of `subscriber`.
    #[inline]
    fn place(&self, subscriber: u64) -> ([usize; 2], u64) {
        let h = self.key.hash2(subscriber, 0x7375_6273);
        let at = |x: u64| (x as usize) & self.mask & !(WINDOW - 1);
        let fp = (h >> 32) | 1;
        ([at(h), at(h.rotate_right(16))], fp)
    }

    /// The two windows `subscriber` may use in `what`'s table (the second empty when the
    /// table has only one window).
    #[inline]
    fn windows(&self, what: Counted, bases: [usize; 2]) -> [&[AtomicU64]; 2] {
        let t = &self.tables[what.index()];
        let w = |b: usize| t.get(b..b + WINDOW).unwrap_or(&[]);
        [
            w(bases[0]),
            if bases[1] == bases[0] {
                &[]
            } else {
                w(bases[1])
            },
        ]
    }

    /// The slots `subscriber` may use in `what`'s table, first window then second.
    #[inline]
    fn slots(&self, what: Counted, bases: [usize; 2]) -> impl Iterator<Item = &AtomicU64> {
        let [a, b] = self.windows(what, bases);
        a.iter().chain(b.iter())
    }

    /// Adds one to `subscriber`'s count of `what` unless it holds `limit` already
    /// (`limit` 0: no limit, but still counted).
    #[inline]
    pub fn acquire(&self, what: Counted, subscriber: u64, limit: u32) -> Result<(), Refused> {
        const COUNT: u64 = 0xffff_ffff;
        let (bases, fp) = self.place(subscriber);
        let limit = if limit == 0 { COUNT } else { u64::from(limit) };
        let wins = self.windows(what, bases);
        loop {
            // The subscriber's total and first slot; per window, free slots and the first
            // one: a new subscriber goes to the emptier window (two choices keep the
            // windows even).
            let mut total = 0u64;
            let mut mine: Option<(&AtomicU64, u64)> = None;
            let mut free = [0u32; 2];
            let mut first_free: [Option<&AtomicU64>; 2] = [None, None];
            for (w, win) in wins.iter().enumerate() {
                for s in win.iter() {
                    let v = s.load(Ordering::Acquire);
                    if v == 0 {
                        free[w] += 1;
                        if first_free[w].is_none() {
                            first_free[w] = Some(s);
                        }
                    } else if v >> 32 == fp {
                        total += v & COUNT;
                        if mine.is_none() {
                            mine = Some((s, v));
                        }
                    }
                }
            }
            if total >= limit {
                return Err(Refused::Limit);
            }
            let (slot, from, to) = match mine {
                Some((s, v)) if v & COUNT < COUNT => (s, v, v + 1),
                _ => {
                    let w = usize::from(free[1] > free[0]);
                    match first_free[w] {
                        Some(s) => (s, 0, fp << 32 | 1),
                        None => return Err(Refused::Full),
                    }
                }
            };
            if slot
                .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Ok(());
            }
        }
    }

    /// Takes one off `subscriber`'s count of `what`. False if it had none (a caller bug:
    /// nothing is changed).
    #[inline]
    pub fn release(&self, what: Counted, subscriber: u64) -> bool {
        let (bases, fp) = self.place(subscriber);
        'retry: loop {
            for s in self.slots(what, bases) {
                let v = s.load(Ordering::Acquire);
                if v != 0 && v >> 32 == fp {
                    let to = if v & 0xffff_ffff <= 1 { 0 } else { v - 1 };
                    if s.compare_exchange(v, to, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        return true;
                    }
                    continue 'retry;
                }
            }
            return false;
        }
    }

    /// `subscriber`'s count of `what`.
    pub fn count(&self, what: Counted, subscriber: u64) -> u32 {
        let (bases, fp) = self.place(subscriber);
        self.slots(what, bases)
            .map(|s| s.load(Ordering::Acquire))
            .filter(|v| *v != 0 && v >> 32 == fp)
            .map(|v| (v & 0xffff_ffff) as u32)
            .fold(0u32, u32::saturating_add)
    }

    /// The sum of every subscriber's count of `what` (zero once everything is released).
    pub fn total(&self, what: Counted) -> u64 {
        self.tables[what.index()]
            .iter()
            .map(|s| s.load(Ordering::Acquire) & 0xffff_ffff)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Arc;

    const S: Counted = Counted::Sessions;

    #[test]
    fn limit_is_per_subscriber_and_release_frees() {
        let t = Subscribers::new(64);
        for _ in 0..3 {
            t.acquire(S, 1, 3).unwrap();
        }
        assert_eq!(t.acquire(S, 1, 3), Err(Refused::Limit));
        assert_eq!(t.count(S, 1), 3);
        t.acquire(S, 2, 3).unwrap();
        t.acquire(Counted::Ports(Proto::Udp), 1, 3).unwrap();
        assert!(t.release(S, 1));
        t.acquire(S, 1, 3).unwrap();
        for s in [1, 1, 1, 2] {
            assert!(t.release(S, s));
        }
        assert!(!t.release(S, 2), "nothing left to release");
        assert_eq!(t.total(S), 0);
        assert_eq!(t.acquire(S, 9, 0), Ok(()), "0: unlimited");
    }

    #[test]
    fn a_full_window_refuses_rather_than_miscounting() {
        // One window only: eight subscribers fill it.
        let t = Subscribers::with_key(WINDOW, SipKey::fixed(1, 2));
        for s in 0..WINDOW as u64 {
            t.acquire(S, s, 10).unwrap();
        }
        assert_eq!(t.acquire(S, 100, 10), Err(Refused::Full));
        assert!(t.release(S, 3));
        t.acquire(S, 100, 10).unwrap();
        assert_eq!(t.count(S, 100), 1);
    }

    /// Two windows: a table sized for n subscribers takes n/2 of them with no refusal
    /// and 3/4 n with almost none (any key: 20 keys tried here), each with its own count.
    #[test]
    fn a_table_takes_as_many_subscribers_as_it_was_sized_for() {
        let n = 1u64 << 14;
        let mut worst = [0usize; 2];
        for k in 0..20 {
            let t = Subscribers::with_key(n as usize, SipKey::fixed(k, !k));
            let mut refused = [0usize; 2];
            for s in 0..n * 3 / 4 {
                if t.acquire(S, s, 1).is_err() {
                    refused[usize::from(s >= n / 2)] += 1;
                }
            }
            assert_eq!(t.count(S, 77), 1);
            assert_eq!(t.acquire(S, 77, 1), Err(Refused::Limit));
            worst = [worst[0].max(refused[0]), worst[1].max(refused[1])];
        }
        assert_eq!(worst[0], 0, "refused below 1/2 load");
        assert!(
            worst[1] <= 16,
            "{} of {} refused up to 3/4 load",
            worst[1],
            n / 4
        );
    }

    /// Four threads acquire and release for overlapping subscribers at once (run with a
    /// core kept busy beside them): every count ends at zero, and no subscriber ever
    /// held more than the limit plus the racing threads.
    #[test]
    fn counts_never_drift_under_concurrency() {
        let t = Arc::new(Subscribers::new(256));
        let hs: Vec<_> = (0..4u64)
            .map(|w| {
                let t = Arc::clone(&t);
                std::thread::spawn(move || {
                    let mut held = Vec::new();
                    let mut x = w.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                    for _ in 0..50_000 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let sub = x % 40;
                        if x & 0x300 != 0 || held.is_empty() {
                            if t.acquire(S, sub, 100).is_ok() {
                                held.push(sub);
                            }
                        } else {
                            let i = (x >> 20) as usize % held.len();
                            assert!(t.release(S, held.swap_remove(i)));
                        }
                        assert!(t.count(S, sub) <= 104);
                    }
                    for s in held {
                        assert!(t.release(S, s));
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(t.total(S), 0);
    }

    proptest! {
        /// Any sequence: a count is what was acquired minus released, never above the
        /// limit, and zero everywhere at the end.
        #[test]
        fn model(ops in proptest::collection::vec((any::<bool>(), 0u64..20), 1..400)) {
            let t = Subscribers::new(16);
            let mut model = [0u32; 20];
            for (acq, s) in ops {
                if acq {
                    match t.acquire(S, s, 5) {
                        Ok(()) => model[s as usize] += 1,
                        Err(Refused::Limit) => prop_assert_eq!(model[s as usize], 5),
                        Err(Refused::Full) => prop_assert_eq!(model[s as usize], 0),
                    }
                } else {
                    prop_assert_eq!(t.release(S, s), model[s as usize] > 0);
                    model[s as usize] = model[s as usize].saturating_sub(1);
                }
                prop_assert_eq!(t.count(S, s), model[s as usize]);
            }
            for s in 0..20u64 {
                for _ in 0..model[s as usize] {
                    prop_assert!(t.release(S, s));
                }
            }
            prop_assert_eq!(t.total(S), 0);
        }
    }
}
