//! A lock-free table of reference-counted entries found by one or two 64-bit keys: the
//! bindings (inside endpoint <-> public endpoint, RFC 6146's BIB) and the
//! address-dependent-filtering permits are both built on it.
//!
//! An entry lives while its count is above zero or it is static. Workers take references
//! with a compare-and-swap that fails once the reaper has claimed an unused entry
//! (count 0 -> DEAD), so a worker never revives an entry the reaper is removing. The
//! first key's insert is the arbiter when two workers create the same entry at once.
//!
//! When the second key loses, the entry is already published under the first, and a
//! worker may have found it there and taken a reference. The insert withdraws it by
//! setting the WITHDRAWN flag (from then on nobody finds it or takes a reference) and a
//! compare-and-swap of its own count to DEAD. If that exchange loses to a reference taken
//! just before, the holder keeps a live entry: the insert drops only its own references,
//! and the reaper collects the entry once the holders have let go. A reference is never
//! wiped.

use crate::sync::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::chain::{ChainIndex, Nodes, Refused};
use crate::key::Key;
use crate::slab::{Slab, Slot};

/// Reference count meaning "claimed by the reaper, or not in use".
const DEAD: u32 = u32::MAX;
/// A count that a reference may never reach (`try_ref` refuses it: no overflow into DEAD).
const SATURATED: u32 = DEAD - 1;
/// `meta` flag: never expires.
const STATIC: u32 = 1 << 31;
/// `meta` flag: the second key is indexed.
const INDEXED_B: u32 = 1 << 30;
/// `meta` flag: the slot holds an entry (meta is never 0 while it does).
const IN_USE: u32 = 1 << 29;
/// `meta` flag: withdrawn by its insert (second key lost): not found, not referenceable,
/// collected by the reaper once unreferenced, static or not.
const WITHDRAWN: u32 = 1 << 28;
/// `meta` flag: set by [`RefTable::mark`], for the caller's use (NAT44: a packet came in
/// through the binding); a new entry starts without it.
const MARKED: u32 = 1 << 27;
const USER: u32 = (1 << 27) - 1;

/// One slot.
#[derive(Debug)]
pub struct Entry {
    key_a: AtomicU64,
    key_b: AtomicU64,
    links: [AtomicU32; 2],
    refs: AtomicU32,
    meta: AtomicU32,
}

impl Entry {
    /// Live: not claimed, not withdrawn, and either static or holding a reference. A
    /// dynamic entry that dropped to zero references is gone for the workers; the reaper
    /// collects it.
    #[inline]
    fn is_live(&self) -> bool {
        match self.refs.load(Ordering::Acquire) {
            DEAD => false,
            r => {
                let meta = self.meta.load(Ordering::Acquire);
                meta & WITHDRAWN == 0 && (r != 0 || meta & STATIC != 0)
            }
        }
    }
}

impl Slot for Entry {
    fn empty() -> Self {
        Self {
            key_a: AtomicU64::new(0),
            key_b: AtomicU64::new(0),
            links: [AtomicU32::new(0), AtomicU32::new(0)],
            refs: AtomicU32::new(DEAD),
            meta: AtomicU32::new(0),
        }
    }
    fn free_link(&self) -> &AtomicU32 {
        &self.links[0]
    }
}

/// A snapshot of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryView {
    /// First key.
    pub key_a: u64,
    /// Second key.
    pub key_b: u64,
    /// References (sessions) held.
    pub refs: u32,
    /// Static entries never expire.
    pub is_static: bool,
    /// The caller's 27-bit value (e.g. rule index + 1).
    pub user: u32,
    /// Whether [`RefTable::mark`] was called on it.
    pub marked: bool,
}

/// Why an insert did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefInsertError {
    /// No free slot.
    Full,
    /// A live entry already has the first key: its id.
    ExistsA(u32),
    /// A live entry already has the second key: its id (the new entry was published under
    /// the first key and withdrawn; the reaper collects it). The id is the new entry's own
    /// when the second key's chain was full ([`crate::chain::MAX_CHAIN`]).
    ExistsB(u32),
}

struct View<'a>(&'a Slab<Entry>);

impl Nodes for View<'_> {
    #[inline]
    fn key(&self, n: u32) -> Key {
        match self.0.get(n >> 1) {
            Some(e) if n & 1 == 0 => Key(e.key_a.load(Ordering::Acquire), 1),
            Some(e) => Key(e.key_b.load(Ordering::Acquire), 2),
            None => Key(0, 0),
        }
    }
    #[inline]
    fn live(&self, n: u32) -> bool {
        self.0.get(n >> 1).is_some_and(Entry::is_live)
    }
    #[inline]
    fn link(&self, n: u32) -> Option<&AtomicU32> {
        self.0.get(n >> 1).map(|e| &e.links[(n & 1) as usize])
    }
}

/// The table.
#[derive(Debug)]
pub struct RefTable {
    slab: Slab<Entry>,
    index: ChainIndex,
    /// Slots taken (live, unreferenced or claimed, until freed): what
    /// [`insert_within`](Self::insert_within) bounds.
    taken: AtomicUsize,
}

impl RefTable {
    /// Room for `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        Self {
            slab: Slab::new(capacity),
            index: ChainIndex::new(capacity.saturating_mul(2)),
            taken: AtomicUsize::new(0),
        }
    }

    /// Bytes reserved (slots in use so far plus the bucket array).
    pub fn bytes(&self) -> usize {
        self.slab.reserved_bytes() + self.index.bytes()
    }

    /// Bytes per entry at full capacity.
    pub fn bytes_per_entry(&self) -> usize {
        std::mem::size_of::<Entry>() + self.index.bytes() / self.slab.capacity().max(1)
    }

    /// The live entry with first key `a`.
    #[inline]
    pub fn find_a(&self, a: u64) -> Option<u32> {
        self.index
            .find(&View(&self.slab), Key(a, 1))
            .map(|n| n >> 1)
    }

    /// The live entry with second key `b` (only entries inserted with `index_b`).
    #[inline]
    pub fn find_b(&self, b: u64) -> Option<u32> {
        self.index
            .find(&View(&self.slab), Key(b, 2))
            .map(|n| n >> 1)
    }

    /// A snapshot of entry `id`.
    #[inline]
    pub fn get(&self, id: u32) -> Option<EntryView> {
        let e = self.slab.get(id)?;
        let meta = e.meta.load(Ordering::Acquire);
        Some(EntryView {
            key_a: e.key_a.load(Ordering::Acquire),
            key_b: e.key_b.load(Ordering::Acquire),
            refs: e.refs.load(Ordering::Acquire),
            is_static: meta & STATIC != 0,
            user: meta & USER,
            marked: meta & MARKED != 0,
        })
    }

    /// Marks entry `id` (see [`EntryView::marked`]); call while holding a reference, so
    /// the mark is in place before the reaper can claim the entry. A plain load first:
    /// an entry marked already costs no write.
    pub fn mark(&self, id: u32) {
        if let Some(e) = self.slab.get(id) {
            if e.meta.load(Ordering::Relaxed) & MARKED == 0 {
                e.meta.fetch_or(MARKED, Ordering::AcqRel);
            }
        }
    }

    /// Takes a reference unless the entry is gone (claimed by the reaper, or dynamic and
    /// without references).
    #[inline]
    pub fn try_ref(&self, id: u32) -> bool {
        let Some(e) = self.slab.get(id) else {
            return false;
        };
        let meta = e.meta.load(Ordering::Acquire);
        let is_static = meta & STATIC != 0;
        if meta & WITHDRAWN != 0 {
            return false;
        }
        let mut r = e.refs.load(Ordering::Acquire);
        loop {
            if r == DEAD || r == SATURATED || (r == 0 && !is_static) {
                return false;
            }
            match e
                .refs
                .compare_exchange_weak(r, r + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(now) => r = now,
            }
        }
    }

    /// Drops a reference; returns the count left.
    pub fn unref(&self, id: u32) -> u32 {
        let Some(e) = self.slab.get(id) else { return 0 };
        let mut r = e.refs.load(Ordering::Acquire);
        loop {
            if r == 0 || r == DEAD {
                return 0;
            }
            match e
                .refs
                .compare_exchange_weak(r, r - 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return r - 1,
                Err(now) => r = now,
            }
        }
    }

    /// Adds an entry holding `refs` references. The first key is the arbiter: if a live
    /// entry has it, nothing is inserted and that entry's id is returned.
    pub fn insert(
        &self,
        a: u64,
        b: u64,
        index_b: bool,
        refs: u32,
        is_static: bool,
        user: u32,
    ) -> Result<u32, RefInsertError> {
        self.insert_within(a, b, index_b, refs, is_static, user, usize::MAX)
    }

    /// [`insert`](Self::insert), refused (`Full`) while `max_taken` slots or more are
    /// taken (live entries, and unreferenced or claimed ones until they are freed): a
    /// bound below the capacity keeps the rest for other entries (O(1); may overshoot by
    /// the inserts racing with it).
    #[allow(clippy::too_many_arguments)]
    pub fn insert_within(
        &self,
        a: u64,
        b: u64,
        index_b: bool,
        refs: u32,
        is_static: bool,
        user: u32,
        max_taken: usize,
    ) -> Result<u32, RefInsertError> {
        if self.taken() >= max_taken {
            return Err(RefInsertError::Full);
        }
        let id = self.slab.alloc().ok_or(RefInsertError::Full)?;
        self.taken.fetch_add(1, Ordering::Relaxed);
        let Some(e) = self.slab.get(id) else {
            return Err(RefInsertError::Full);
        };
        e.key_a.store(a, Ordering::Relaxed);
        e.key_b.store(b, Ordering::Relaxed);
        // A dynamic entry starts with at least one reference, so the reaper cannot claim it
        // before it is published. `meta` is written last: a non-zero meta tells the reaper
        // the slot is initialised.
        let refs = if is_static { refs } else { refs.max(1) };
        let refs = refs.min(SATURATED - 1);
        e.refs.store(refs, Ordering::Relaxed);
        let meta = IN_USE
            | (user & USER)
            | if is_static { STATIC } else { 0 }
            | if index_b { INDEXED_B } else { 0 };
        e.meta.store(meta, Ordering::Release);
        let view = View(&self.slab);
        if let Err(refused) = self.index.insert(&view, id << 1, Key(a, 1)) {
            // Never published. Whoever clears `meta` disposes of the slot: us, unless the
            // reaper's walk got there first.
            e.refs.store(DEAD, Ordering::Release);
            if e.meta
                .compare_exchange(meta, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.free(id);
            }
            return Err(match refused {
                Refused::Exists(m) => RefInsertError::ExistsA(m >> 1),
                Refused::ChainFull => RefInsertError::Full,
            });
        }
        if index_b {
            if let Err(refused) = self.index.insert(&view, (id << 1) | 1, Key(b, 2)) {
                // Published under key A: withdraw it (see the module doc); the reaper
                // unlinks it.
                self.withdraw(e, refs);
                // Published and withdrawn either way, so both are `ExistsB` (a caller's
                // clean-up differs for "never published"): a full chain names the new
                // entry itself.
                return Err(RefInsertError::ExistsB(match refused {
                    Refused::Exists(m) => m >> 1,
                    Refused::ChainFull => id,
                }));
            }
        }
        Ok(id)
    }

    /// Withdraws an entry published under its first key only, holding `own` references of
    /// the insert's: flagged WITHDRAWN first (no new finds or references), then the count
    /// goes `own -> DEAD` by compare-and-swap. If a worker took a reference before the
    /// flag, the exchange fails and only the insert's own references are dropped: the
    /// holder's stays valid, and the reaper collects the entry when the count reaches 0.
    fn withdraw(&self, e: &Entry, own: u32) {
        e.meta.fetch_or(WITHDRAWN, Ordering::AcqRel);
        let mut r = e.refs.load(Ordering::Acquire);
        loop {
            if r == DEAD {
                return; // claimed by the reaper (a withdrawn entry with no references)
            }
            // Ours alone: dead at once. Shared: drop only ours (the holders' stay).
            let new = if r <= own { DEAD } else { r - own };
            match e
                .refs
                .compare_exchange(r, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(now) => r = now,
            }
        }
    }

    /// The reaper's walk: claims every unused non-static entry (and every withdrawn one),
    /// unlinks it and hands it to `on_removed` with its id. The caller must `free` each id
    /// after a QSBR grace period.
    pub fn reap(&self, mut on_removed: impl FnMut(u32, EntryView)) {
        let view = View(&self.slab);
        for id in 0..self.slab.high_water() {
            let Some(e) = self.slab.get(id) else { continue };
            let meta = e.meta.load(Ordering::Acquire);
            if meta == 0 {
                continue; // free or already unlinked
            }
            let claimed = (meta & STATIC == 0 || meta & WITHDRAWN != 0)
                && e.refs
                    .compare_exchange(0, DEAD, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok();
            if !(claimed || e.refs.load(Ordering::Acquire) == DEAD) {
                continue;
            }
            let Some(v) = self.get(id) else { continue };
            // Clearing `meta` claims the slot's disposal (an inserter that lost its race
            // may be trying to do the same).
            if e.meta
                .compare_exchange(meta, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                continue;
            }
            self.index.remove(&view, id << 1, Key(v.key_a, 1));
            if meta & INDEXED_B != 0 {
                self.index.remove(&view, (id << 1) | 1, Key(v.key_b, 2));
            }
            on_removed(id, v);
        }
    }

    /// Returns a reaped slot once no worker can reach it.
    pub fn free(&self, id: u32) {
        if self.slab.get(id).is_none() {
            return;
        }
        self.taken.fetch_sub(1, Ordering::Relaxed);
        self.slab.free(id);
    }

    /// Slots taken: live entries, and unreferenced or claimed ones until they are freed
    /// (O(1)).
    pub fn taken(&self) -> usize {
        self.taken.load(Ordering::Relaxed)
    }

    /// Live entries (a walk; for reports and tests).
    pub fn live(&self) -> usize {
        (0..self.slab.high_water())
            .filter_map(|id| self.slab.get(id))
            .filter(|e| e.meta.load(Ordering::Acquire) != 0 && e.is_live())
            .count()
    }
}

// -- read-only walk for the control socket (see `session/walk.rs` for the reasoning) --
impl RefTable {
    /// Hands every live entry to `visit` as a consistent snapshot (read twice, live before
    /// and after, both reads equal; a slot reused meanwhile is skipped), until it returns
    /// `false`. Never writes: runs beside the workers and the reaper.
    pub fn walk_live(&self, mut visit: impl FnMut(u32, &EntryView) -> bool) -> usize {
        let mut n = 0;
        for id in 0..self.slab.high_water() {
            let Some(e) = self.slab.get(id) else { continue };
            if e.meta.load(Ordering::Acquire) == 0 || !e.is_live() {
                continue;
            }
            let (Some(a), Some(b)) = (self.get(id), self.get(id)) else {
                continue;
            };
            if a.key_a != b.key_a || a.key_b != b.key_b || !e.is_live() {
                continue;
            }
            n += 1;
            if !visit(id, &b) {
                break;
            }
        }
        n
    }
}

// Capacity bound and memory estimate.
impl RefTable {
    /// The most entries a table can index: its index nodes are `slot * 2 + key`, stored
    /// plus one in a `u32` link.
    pub const MAX_CAPACITY: usize = (1 << 31) - 1;

    /// Bytes a table for `capacity` entries holds when full (slots and bucket array).
    pub fn bytes_for(capacity: usize) -> usize {
        Slab::<Entry>::bytes_for(capacity)
            .saturating_add(ChainIndex::bytes_for(capacity.saturating_mul(2)))
    }
}

// Live reload.
impl RefTable {
    /// Snapshots of the live entries with their ids (a walk; for a reload, reports and
    /// tests, not the packet path).
    pub fn live_entries(&self) -> impl Iterator<Item = (u32, EntryView)> + '_ {
        (0..self.slab.high_water()).filter_map(move |id| {
            let e = self.slab.get(id)?;
            if e.meta.load(Ordering::Acquire) == 0 || !e.is_live() {
                return None;
            }
            self.get(id).map(|v| (id, v))
        })
    }

    /// Makes static entry `id` an ordinary one (a port forward removed by a reload): it
    /// lives on while references are held and the reaper collects it when the last goes.
    /// Returns whether it was static.
    pub fn unpin(&self, id: u32) -> bool {
        let Some(e) = self.slab.get(id) else {
            return false;
        };
        e.meta.fetch_and(!STATIC, Ordering::AcqRel) & STATIC != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn lifecycle() {
        let t = RefTable::new(8);
        let id = t.insert(10, 20, true, 1, false, 5).unwrap();
        assert_eq!(t.find_a(10), Some(id));
        assert_eq!(t.find_b(20), Some(id));
        assert_eq!(
            t.insert(10, 21, true, 1, false, 0),
            Err(RefInsertError::ExistsA(id))
        );
        assert_eq!(
            t.insert(11, 20, true, 1, false, 0),
            Err(RefInsertError::ExistsB(id))
        );
        assert!(t.try_ref(id));
        assert_eq!(t.unref(id), 1);
        let mut reaped = vec![];
        t.reap(|i, _| reaped.push(i));
        assert_eq!(
            reaped.len(),
            1,
            "only the withdrawn entry (11, 20) was reaped"
        );
        assert_eq!(t.unref(id), 0);
        t.reap(|i, v| {
            assert_eq!(i, id);
            assert_eq!(v.user, 5);
        });
        assert!(!t.try_ref(id), "claimed entries cannot be revived");
        assert_eq!(t.find_a(10), None);
        assert_eq!(t.live(), 0);
    }

    /// A mark made while a reference is held is what the reaper's view shows; a new entry
    /// in the same slot starts unmarked; the user value keeps its bits.
    #[test]
    fn a_mark_reaches_the_reaper_and_not_the_next_entry() {
        let t = RefTable::new(1);
        let id = t.insert(10, 20, true, 1, false, USER).unwrap();
        assert!(!t.get(id).unwrap().marked);
        t.mark(id);
        t.mark(id);
        assert_eq!(t.get(id).map(|v| (v.marked, v.user)), Some((true, USER)));
        t.unref(id);
        let mut seen = Vec::new();
        t.reap(|_, v| seen.push(v.marked));
        assert_eq!(seen, vec![true]);
        t.free(id);
        let again = t.insert(11, 21, true, 1, false, 1).unwrap();
        assert_eq!(again, id, "the one slot, reused");
        assert!(!t.get(again).unwrap().marked);
    }

    #[test]
    fn insert_within_bounds_the_slots_taken() {
        let t = RefTable::new(4);
        let a = t.insert_within(1, 101, true, 1, false, 0, 2).unwrap();
        // A lost race gives its slot back: not counted.
        assert_eq!(
            t.insert_within(1, 102, true, 1, false, 0, 2),
            Err(RefInsertError::ExistsA(a))
        );
        assert_eq!(t.taken(), 1);
        t.insert_within(2, 102, true, 1, false, 0, 2).unwrap();
        assert_eq!(t.taken(), 2);
        // Refused at the bound with room left in the table, which others still get.
        assert_eq!(
            t.insert_within(3, 103, true, 1, false, 0, 2),
            Err(RefInsertError::Full)
        );
        t.insert(4, 104, true, 0, true, 0).unwrap();
        assert_eq!(t.taken(), 3);
        // An unreferenced entry counts until its slot is freed.
        assert_eq!(t.unref(a), 0);
        let mut reaped = vec![];
        t.reap(|i, _| reaped.push(i));
        assert_eq!(reaped, vec![a]);
        assert_eq!(t.taken(), 3);
        t.free(a);
        assert_eq!(t.taken(), 2);
        t.insert_within(3, 103, true, 1, false, 0, 3).unwrap();
    }

    #[test]
    fn static_entries_never_reaped() {
        let t = RefTable::new(4);
        let id = t.insert(1, 2, true, 0, true, 0).unwrap();
        t.reap(|_, _| panic!("static entry reaped"));
        assert_eq!(t.find_b(2), Some(id));
    }

    /// Workers take and drop references while the reaper claims unused entries: a worker
    /// either gets a live entry or is refused; a claimed entry is never revived.
    #[test]
    fn references_race_with_the_reaper() {
        let t = Arc::new(RefTable::new(64));
        let id = t.insert(7, 0, false, 0, false, 0).unwrap();
        let worker = {
            let t = Arc::clone(&t);
            std::thread::spawn(move || {
                let mut got = 0;
                for _ in 0..100_000 {
                    if t.try_ref(id) {
                        got += 1;
                        assert_ne!(t.get(id).unwrap().refs, DEAD);
                        t.unref(id);
                    }
                }
                // Drop the creator's reference: from now on the reaper may claim it.
                t.unref(id);
                got
            })
        };
        let mut reaped = 0;
        for _ in 0..1000 {
            t.reap(|_, _| reaped += 1);
        }
        let got = worker.join().unwrap();
        t.reap(|_, _| reaped += 1);
        assert_eq!(
            reaped, 1,
            "claimed exactly once, and only after the last reference"
        );
        assert!(!t.try_ref(id), "a claimed entry is never revived");
        assert_eq!(got, 100_000, "while referenced it was never claimed");
    }
}
