//! Fixed-capacity slot storage shared by all workers: slots are handed out by index, with
//! no lock. Freed slots go back on a lock-free stack (Treiber, with a tag against ABA)
//! once the reaper knows no worker can still see them (see [`crate::qsbr`]).
//!
//! Memory is reserved in chunks on first use, so a table sized for ten million sessions
//! costs nothing until the sessions arrive.

use crate::sync::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

/// What a slab slot must provide: a fresh value and a link word for the free stack
/// (a slot's link is only used while the slot is free).
pub trait Slot: Send + Sync {
    /// A new, empty slot.
    fn empty() -> Self;
    /// The word used to chain free slots.
    fn free_link(&self) -> &AtomicU32;
}

#[cfg(not(loom))]
const CHUNK_BITS: u32 = 16;
/// Tiny chunks under the loom models: every slot is an object loom tracks.
#[cfg(loom)]
const CHUNK_BITS: u32 = 3;
const CHUNK: usize = 1 << CHUNK_BITS;
const NIL: u32 = u32::MAX;

/// A slab of `T` with lock-free allocation.
#[derive(Debug)]
pub struct Slab<T> {
    chunks: Box<[OnceLock<Box<[T]>>]>,
    capacity: u32,
    /// Never-used slots start here.
    bump: AtomicU32,
    /// Free stack head: tag (high 32 bits) | index (low 32 bits, NIL when empty).
    free: AtomicU64,
}

impl<T: Slot> Slab<T> {
    /// A slab of at most `capacity` slots.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.clamp(1, (u32::MAX - 1) as usize) as u32;
        let chunks = (capacity as usize).div_ceil(CHUNK);
        Self {
            chunks: (0..chunks).map(|_| OnceLock::new()).collect(),
            capacity,
            bump: AtomicU32::new(0),
            free: AtomicU64::new(u64::from(NIL)),
        }
    }

    /// Maximum number of slots.
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// Slots handed out at least once (the reaper walks `0..high_water()`).
    pub fn high_water(&self) -> u32 {
        self.bump.load(Ordering::Acquire).min(self.capacity)
    }

    /// Bytes reserved so far.
    pub fn reserved_bytes(&self) -> usize {
        self.chunks
            .iter()
            .filter_map(|c| c.get())
            .map(|c| c.len())
            .sum::<usize>()
            * std::mem::size_of::<T>()
    }

    /// The slot at `idx`, if it was ever handed out.
    #[inline]
    pub fn get(&self, idx: u32) -> Option<&T> {
        if idx >= self.capacity {
            return None;
        }
        let chunk = self.chunks.get((idx >> CHUNK_BITS) as usize)?.get()?;
        chunk.get(idx as usize & (CHUNK - 1))
    }

    /// Takes a free slot, or `None` when the slab is full.
    pub fn alloc(&self) -> Option<u32> {
        // Reuse a freed slot first.
        let mut head = self.free.load(Ordering::Acquire);
        loop {
            let idx = head as u32;
            if idx == NIL {
                break;
            }
            let next = self
                .get(idx)
                .map_or(NIL, |s| s.free_link().load(Ordering::Acquire));
            let new = ((head >> 32).wrapping_add(1) << 32) | u64::from(next);
            match self
                .free
                .compare_exchange_weak(head, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(idx),
                Err(h) => head = h,
            }
        }
        // Then a never-used one.
        let idx = self.bump.fetch_add(1, Ordering::AcqRel);
        if idx >= self.capacity {
            self.bump.store(self.capacity, Ordering::Release);
            return None;
        }
        let start = idx as usize & !(CHUNK - 1);
        let len = CHUNK.min(self.capacity as usize - start);
        self.chunks[(idx >> CHUNK_BITS) as usize]
            .get_or_init(|| (0..len).map(|_| T::empty()).collect());
        Some(idx)
    }

    /// Returns a slot that no worker can still reach.
    pub fn free(&self, idx: u32) {
        let Some(slot) = self.get(idx) else { return };
        let mut head = self.free.load(Ordering::Acquire);
        loop {
            slot.free_link().store(head as u32, Ordering::Release);
            let new = ((head >> 32).wrapping_add(1) << 32) | u64::from(idx);
            match self
                .free
                .compare_exchange_weak(head, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }
}

// Memory estimate.
impl<T: Slot> Slab<T> {
    /// Bytes a slab of `capacity` slots reserves when every slot has been used (chunks are
    /// reserved on first use; this is the most it grows to).
    pub fn bytes_for(capacity: usize) -> usize {
        let capacity = capacity.clamp(1, (u32::MAX - 1) as usize);
        let chunks = capacity.div_ceil(CHUNK);
        capacity.saturating_mul(std::mem::size_of::<T>())
            + chunks * std::mem::size_of::<OnceLock<Box<[T]>>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::Arc;

    #[derive(Debug)]
    struct S(AtomicU32);
    impl Slot for S {
        fn empty() -> Self {
            S(AtomicU32::new(0))
        }
        fn free_link(&self) -> &AtomicU32 {
            &self.0
        }
    }

    #[test]
    fn capacity_is_enforced_and_freed_slots_return() {
        let s: Slab<S> = Slab::new(3);
        let a: Vec<_> = (0..3).map(|_| s.alloc().unwrap()).collect();
        assert_eq!(s.alloc(), None);
        s.free(a[1]);
        assert_eq!(s.alloc(), Some(a[1]));
        assert_eq!(s.alloc(), None);
        assert!(s.get(7).is_none());
    }

    #[test]
    fn concurrent_alloc_free_never_hands_a_slot_out_twice() {
        let s: Arc<Slab<S>> = Arc::new(Slab::new(1000));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = Arc::clone(&s);
                std::thread::spawn(move || {
                    let mut mine = Vec::new();
                    for round in 0..2000 {
                        if let Some(i) = s.alloc() {
                            mine.push(i);
                        }
                        if round % 3 == 0 {
                            if let Some(i) = mine.pop() {
                                s.free(i);
                            }
                        }
                    }
                    mine
                })
            })
            .collect();
        let mut all = HashSet::new();
        for t in threads {
            for i in t.join().unwrap() {
                assert!(all.insert(i), "slot {i} held by two threads");
            }
        }
    }
}
