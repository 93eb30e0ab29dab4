//! Session age: when each session was created, kept in a parallel array beside the slots
//! (the slot is one full cache line), as the TCP sequence words are.
//!
//! Written once, by the insert that creates the session (the cold new-flow path), before
//! the session is published; read only by the control socket's listing. A packet of an
//! established flow never touches it. The unit is the whole second of the table's clock
//! (the `now` every call is handed), truncated to 32 bits: the age is the wrapping
//! difference, right for any clock origin and for sessions younger than 136 years. The
//! creation second is rounded down, so a listed age is never less than the true age (nor
//! than the idle time) and at most one second more.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use super::{SessionId, SessionTable, SessionView, ALIVE, LIFECYCLE};
use crate::time::Timestamp;

/// Sessions per chunk of the creation-time array (as the slab's chunks).
pub(super) const BORN_CHUNK_BITS: u32 = 16;

const NANOS: u64 = 1_000_000_000;

/// The creation-time array: whole seconds per session, chunks reserved on first use.
pub(super) type BornChunks = Box<[OnceLock<Box<[AtomicU32]>>]>;

/// An empty array for a table of `capacity` slots.
pub(super) fn born_chunks(capacity: usize) -> BornChunks {
    (0..capacity.div_ceil(1 << BORN_CHUNK_BITS))
        .map(|_| OnceLock::new())
        .collect()
}

/// `now` in the array's unit (whole seconds, low 32 bits).
#[inline]
fn secs(now: Timestamp) -> u32 {
    (now.as_nanos() / NANOS) as u32
}

impl SessionTable {
    /// The creation word of session `id`, if its chunk was reserved.
    #[inline]
    fn born_of(&self, id: u32) -> Option<&AtomicU32> {
        let chunk = self.born.get((id >> BORN_CHUNK_BITS) as usize)?.get()?;
        chunk.get(id as usize & ((1 << BORN_CHUNK_BITS) - 1))
    }

    /// Records that session `id` is created at `now` (its chunk reserved if needed: once
    /// per 65,536 slots, on the new-flow path). False: no room (cannot happen for an id the
    /// slab handed out).
    pub(super) fn stamp_born(&self, id: u32, now: Timestamp) -> bool {
        let c = (id >> BORN_CHUNK_BITS) as usize;
        let start = c << BORN_CHUNK_BITS;
        let len = (1usize << BORN_CHUNK_BITS).min(self.slab.capacity().saturating_sub(start));
        let Some(chunk) = self.born.get(c) else {
            return false;
        };
        let chunk = chunk.get_or_init(|| (0..len).map(|_| AtomicU32::new(0)).collect());
        match chunk.get(id as usize & ((1 << BORN_CHUNK_BITS) - 1)) {
            Some(w) => {
                w.store(secs(now), Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// Bytes the creation-time array holds so far.
    pub(super) fn born_bytes(&self) -> usize {
        self.born
            .iter()
            .filter_map(|c| c.get())
            .map(|c| c.len() * std::mem::size_of::<AtomicU32>())
            .sum()
    }

    /// How long ago session `id` was created, seen at `now` (at most a second more than
    /// the truth, never less; see the module doc). `None` for a slot never used.
    pub fn age(&self, id: SessionId, now: Timestamp) -> Option<Duration> {
        let born = self.born_of(id.0)?.load(Ordering::Relaxed);
        let whole = u64::from(secs(now).wrapping_sub(born));
        Some(Duration::from_nanos(whole * NANOS + now.as_nanos() % NANOS))
    }

    /// Like [`snapshot_live`](Self::snapshot_live), with the session's age at `now`, read
    /// between the snapshot's two reads so that a slot reused meanwhile is skipped.
    pub fn snapshot_live_aged(
        &self,
        id: SessionId,
        now: Timestamp,
    ) -> Option<(SessionView, Duration)> {
        let s = self.slab.get(id.0)?;
        if s.state.load(Ordering::Acquire) & LIFECYCLE != ALIVE {
            return None;
        }
        let first = self.view(id)?;
        let age = self.age(id, now)?;
        let again = self.view(id)?;
        let same = first.initial == again.initial
            && first.revised == again.revised
            && first.binding == again.binding
            && first.flags == again.flags;
        (same && s.state.load(Ordering::Acquire) & LIFECYCLE == ALIVE).then_some((again, age))
    }

    /// [`walk_live`](Self::walk_live) with each session's age at `now`.
    pub fn walk_live_aged(
        &self,
        now: Timestamp,
        mut visit: impl FnMut(SessionId, &SessionView, Duration) -> bool,
    ) -> usize {
        let mut n = 0;
        for id in 0..self.slot_bound() {
            if let Some((v, age)) = self.snapshot_live_aged(SessionId(id), now) {
                n += 1;
                if !visit(SessionId(id), &v, age) {
                    break;
                }
            }
        }
        n
    }
}
