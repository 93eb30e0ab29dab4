//! The ILA mapping table: identifier -> locator, shared by every worker without locks
//! (Linux `net/ipv6/ila/ila_xlat.c` keeps the same thing in an rhashtable under RCU).
//!
//! Built like [`crate::reftable`]: entries live in a [`Slab`], found through a
//! [`ChainIndex`], and a removed entry's slot is reused only after a [`Qsbr`] grace period.
//!
//! - **Workers** call [`IlaTable::lookup`]: a lock-free chain walk and one atomic load.
//! - **The control side** calls [`insert`](IlaTable::insert),
//!   [`set_locator`](IlaTable::set_locator), [`remove`](IlaTable::remove) and
//!   [`reclaim`](IlaTable::reclaim) while traffic flows. These are serialised by an
//!   internal mutex that workers never touch, so the chain index's single-remover rule
//!   holds by construction, whichever thread makes the call.
//! - **A locator change is one atomic store of a `u64`**: a packet translated during an
//!   update sees the old locator or the new one, never a mix of the two.
//!
//! Keyed by the 64-bit identifier alone. Linux can also key on the expected incoming
//! locator (`locator_match`), so one identifier may map differently per source locator;
//! that is not supported yet (one mapping per identifier).
//!
//! Reclamation: [`remove`](IlaTable::remove) unlinks at once (a worker that finds the
//! entry afterwards is refused), but its slot waits in a limbo list. The control thread
//! (or the runtime's reaper tick) calls [`reclaim`](IlaTable::reclaim) with the [`Qsbr`]
//! the workers announce their quiescent states to; slots are freed once every online
//! worker has passed a quiescent point since the removal. A table nobody reclaims only
//! leaks removed slots, it never frees one too early.
//!
//! This module uses no `unsafe` and never blocks a worker.

use crate::sync::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::fmt;
use std::sync::{Mutex, MutexGuard};

use crate::chain::{ChainIndex, Nodes, Refused};
use crate::key::Key;
use crate::qsbr::Qsbr;
use crate::slab::{Slab, Slot};

/// Slot state: free or being initialised (never matched by a lookup).
const FREE: u32 = 0;
/// Slot state: a published mapping.
const LIVE: u32 = 1;
/// Slot state: removed, waiting in limbo for its grace period.
const REMOVED: u32 = 2;

/// Second key word: tags ILA identifiers (one table per index, so any constant does).
const TAG: u64 = 0x11a;

/// One slot: an identifier and its locator.
#[derive(Debug)]
pub struct Mapping {
    identifier: AtomicU64,
    locator: AtomicU64,
    link: AtomicU32,
    state: AtomicU32,
}

impl Slot for Mapping {
    fn empty() -> Self {
        Self {
            identifier: AtomicU64::new(0),
            locator: AtomicU64::new(0),
            link: AtomicU32::new(0),
            state: AtomicU32::new(FREE),
        }
    }
    fn free_link(&self) -> &AtomicU32 {
        // Only used while the slot is free: unlinked and past its grace period.
        &self.link
    }
}

/// A snapshot of one mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IlaEntry {
    /// The identifier (lower 64 bits of the SIR address).
    pub identifier: u64,
    /// The locator it maps to (upper 64 bits of the ILA address).
    pub locator: u64,
}

/// Why an insert did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IlaTableError {
    /// A mapping for this identifier exists (use `set_locator` to change it).
    Exists {
        /// The identifier asked for.
        identifier: u64,
    },
    /// Every slot is in use (or waiting in limbo for a `reclaim`).
    Full {
        /// The table's capacity.
        capacity: usize,
    },
}

impl fmt::Display for IlaTableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IlaTableError::Exists { identifier } => write!(
                f,
                "ila table: identifier {identifier:#018x}: a mapping already exists"
            ),
            IlaTableError::Full { capacity } => write!(
                f,
                "ila table: full ({capacity} mappings, including removed ones not yet reclaimed)"
            ),
        }
    }
}

impl std::error::Error for IlaTableError {}

struct View<'a>(&'a Slab<Mapping>);

impl Nodes for View<'_> {
    #[inline]
    fn key(&self, n: u32) -> Key {
        match self.0.get(n) {
            Some(m) => Key(m.identifier.load(Ordering::Acquire), TAG),
            None => Key(0, 0),
        }
    }
    #[inline]
    fn live(&self, n: u32) -> bool {
        self.0
            .get(n)
            .is_some_and(|m| m.state.load(Ordering::Acquire) == LIVE)
    }
    #[inline]
    fn link(&self, n: u32) -> Option<&AtomicU32> {
        self.0.get(n).map(|m| &m.link)
    }
}

/// What only the control side touches, under the mutex.
#[derive(Debug, Default)]
struct Control {
    /// Removed slots not yet stamped with an epoch.
    pending: Vec<u32>,
    /// Stamped slots waiting for their grace period: (epoch stamp, slot).
    limbo: Vec<(u64, u32)>,
}

/// Identifier -> locator mappings, read by workers without locks.
#[derive(Debug)]
pub struct IlaTable {
    slab: Slab<Mapping>,
    index: ChainIndex,
    len: AtomicUsize,
    control: Mutex<Control>,
}

impl IlaTable {
    /// Room for `capacity` mappings (removed ones count until reclaimed).
    pub fn new(capacity: usize) -> Self {
        Self {
            slab: Slab::new(capacity),
            index: ChainIndex::new(capacity),
            len: AtomicUsize::new(0),
            control: Mutex::new(Control::default()),
        }
    }

    /// Maximum number of mappings.
    pub fn capacity(&self) -> usize {
        self.slab.capacity()
    }

    /// Mappings currently published.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Whether no mapping is published.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn control(&self) -> MutexGuard<'_, Control> {
        // A panic while holding the lock leaves `Control` consistent (plain Vec pushes).
        self.control.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[inline]
    fn find(&self, identifier: u64) -> Option<&Mapping> {
        let n = self.index.find(&View(&self.slab), Key(identifier, TAG))?;
        self.slab.get(n)
    }

    /// The locator for `identifier` (workers; lock-free). One atomic load: the value is
    /// the locator before or after any concurrent `set_locator`, never a mix.
    #[inline]
    pub fn lookup(&self, identifier: u64) -> Option<u64> {
        self.find(identifier)
            .map(|m| m.locator.load(Ordering::Acquire))
    }

    /// Adds a mapping (control side).
    pub fn insert(&self, identifier: u64, locator: u64) -> Result<(), IlaTableError> {
        let _guard = self.control();
        if self.find(identifier).is_some() {
            return Err(IlaTableError::Exists { identifier });
        }
        let full = IlaTableError::Full {
            capacity: self.capacity(),
        };
        let id = self.slab.alloc().ok_or(full)?;
        let Some(m) = self.slab.get(id) else {
            return Err(full);
        };
        m.identifier.store(identifier, Ordering::Relaxed);
        m.locator.store(locator, Ordering::Relaxed);
        // Published by the Release store and then the index's CAS on the bucket head.
        m.state.store(LIVE, Ordering::Release);
        if let Err(refused) = self
            .index
            .insert(&View(&self.slab), id, Key(identifier, TAG))
        {
            // `Exists` cannot happen while inserts are serialised (`ChainFull` only with a
            // known hash key), but never leak the slot: it was not linked, so no worker
            // can see it.
            m.state.store(FREE, Ordering::Release);
            self.slab.free(id);
            return Err(match refused {
                Refused::Exists(_) => IlaTableError::Exists { identifier },
                Refused::ChainFull => full,
            });
        }
        self.len.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Changes the locator of an existing mapping with one atomic store (control side).
    /// Returns whether the identifier was mapped.
    pub fn set_locator(&self, identifier: u64, locator: u64) -> bool {
        let _guard = self.control();
        match self.find(identifier) {
            Some(m) => {
                m.locator.store(locator, Ordering::Release);
                true
            }
            None => false,
        }
    }

    /// Removes a mapping (control side): workers stop finding it at once; its slot is
    /// freed by a later [`reclaim`](Self::reclaim). Returns whether it was mapped.
    pub fn remove(&self, identifier: u64) -> bool {
        let mut ctl = self.control();
        let view = View(&self.slab);
        let Some(n) = self.index.find(&view, Key(identifier, TAG)) else {
            return false;
        };
        let Some(m) = self.slab.get(n) else {
            return false;
        };
        // Not live first: a worker already on the chain skips it from now on.
        m.state.store(REMOVED, Ordering::Release);
        self.index.remove(&view, n, Key(identifier, TAG));
        ctl.pending.push(n);
        self.len.fetch_sub(1, Ordering::AcqRel);
        true
    }

    /// Frees removed slots that no worker can still reach; returns how many were freed.
    /// Called by the control thread (after removals, and periodically, e.g. from the
    /// runtime's reaper tick) with the `Qsbr` every worker reading this table reports to.
    pub fn reclaim(&self, qsbr: &Qsbr) -> usize {
        let mut ctl = self.control();
        if !ctl.pending.is_empty() {
            // Stamping after the unlink is conservative: a worker that announces an epoch
            // >= stamp read the global epoch after this advance, hence after the unlink.
            let stamp = qsbr.advance();
            let pending = std::mem::take(&mut ctl.pending);
            ctl.limbo.extend(pending.into_iter().map(|n| (stamp, n)));
        }
        let safe = qsbr.safe_epoch();
        let before = ctl.limbo.len();
        ctl.limbo.retain(|&(stamp, n)| {
            if stamp > safe {
                return true;
            }
            if let Some(m) = self.slab.get(n) {
                m.state.store(FREE, Ordering::Release);
            }
            self.slab.free(n);
            false
        });
        before - ctl.limbo.len()
    }

    /// Removed slots still waiting for a grace period.
    pub fn limbo_len(&self) -> usize {
        let ctl = self.control();
        ctl.pending.len() + ctl.limbo.len()
    }

    /// A walk over the published mappings, each a snapshot (for listings and reports;
    /// mappings changed during the walk may or may not show up).
    pub fn iter(&self) -> impl Iterator<Item = IlaEntry> + '_ {
        (0..self.slab.high_water())
            .filter_map(|n| self.slab.get(n))
            .filter(|m| m.state.load(Ordering::Acquire) == LIVE)
            .map(|m| IlaEntry {
                identifier: m.identifier.load(Ordering::Acquire),
                locator: m.locator.load(Ordering::Acquire),
            })
    }
}

// Memory estimate.
impl IlaTable {
    /// Bytes a table for `capacity` mappings holds when full (slots, bucket array and the
    /// reclaim list at its longest).
    pub fn bytes_for(capacity: usize) -> usize {
        Slab::<Mapping>::bytes_for(capacity)
            .saturating_add(ChainIndex::bytes_for(capacity))
            .saturating_add(capacity.saturating_mul(std::mem::size_of::<(u64, u32)>()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn insert_lookup_update_remove() {
        let t = IlaTable::new(8);
        assert!(t.is_empty());
        t.insert(0x2000_0000_0001_0087, 0x2001_0000_0087_0000)
            .unwrap();
        assert_eq!(
            t.insert(0x2000_0000_0001_0087, 1),
            Err(IlaTableError::Exists {
                identifier: 0x2000_0000_0001_0087
            })
        );
        assert_eq!(t.lookup(0x2000_0000_0001_0087), Some(0x2001_0000_0087_0000));
        assert_eq!(t.lookup(0x2000_0000_0002_0087), None);
        assert!(t.set_locator(0x2000_0000_0001_0087, 0x2001_0000_0087_0001));
        assert!(!t.set_locator(7, 1));
        assert_eq!(t.lookup(0x2000_0000_0001_0087), Some(0x2001_0000_0087_0001));
        assert_eq!(t.len(), 1);
        assert_eq!(
            t.iter().collect::<Vec<_>>(),
            vec![IlaEntry {
                identifier: 0x2000_0000_0001_0087,
                locator: 0x2001_0000_0087_0001
            }]
        );
        assert!(t.remove(0x2000_0000_0001_0087));
        assert!(!t.remove(0x2000_0000_0001_0087));
        assert_eq!(t.lookup(0x2000_0000_0001_0087), None);
        assert_eq!(t.len(), 0);
        assert_eq!(t.iter().count(), 0);
        assert_eq!(t.limbo_len(), 1);
        // Re-adding the identifier after a removal works before reclamation too.
        t.insert(0x2000_0000_0001_0087, 5).unwrap();
        assert_eq!(t.lookup(0x2000_0000_0001_0087), Some(5));
    }

    #[test]
    fn full_until_reclaimed_after_grace_period() {
        let t = IlaTable::new(3);
        for i in 0..3 {
            t.insert(i, 100 + i).unwrap();
        }
        assert_eq!(t.insert(9, 9), Err(IlaTableError::Full { capacity: 3 }));
        assert!(t.remove(1));
        assert_eq!(
            t.insert(9, 9),
            Err(IlaTableError::Full { capacity: 3 }),
            "a removed slot is not reused before its grace period"
        );
        let q = Qsbr::new(1);
        let worker = q.handle(0);
        assert_eq!(
            t.reclaim(&q),
            0,
            "the worker has not passed a quiescent point"
        );
        worker.quiescent();
        assert_eq!(t.reclaim(&q), 1);
        assert_eq!(t.limbo_len(), 0);
        t.insert(9, 9).unwrap();
        assert_eq!(t.lookup(9), Some(9));
        assert_eq!(t.lookup(0), Some(100));
        assert_eq!(t.lookup(2), Some(102));
        assert_eq!(t.lookup(1), None);
        assert!(IlaTableError::Full { capacity: 3 }
            .to_string()
            .contains('3'));
    }

    #[test]
    fn many_identifiers_collide_in_small_index() {
        let t = IlaTable::new(1000);
        for i in 0..1000u64 {
            t.insert(i << 16, i).unwrap();
        }
        for i in (0..1000u64).step_by(3) {
            assert!(t.remove(i << 16));
        }
        for i in 0..1000u64 {
            let want = (i % 3 != 0).then_some(i);
            assert_eq!(t.lookup(i << 16), want, "identifier {i}");
        }
        let listed: HashMap<u64, u64> = t.iter().map(|e| (e.identifier, e.locator)).collect();
        assert_eq!(listed.len(), t.len());
        assert_eq!(t.len(), 666);
    }

    /// One thread flips a mapping between two locators as fast as it can while readers
    /// check that every read is exactly one of the two.
    #[test]
    fn updates_are_never_torn() {
        const A: u64 = 0x2001_0000_0087_0000;
        const B: u64 = 0xdead_beef_cafe_f00d; // differs from A in every 16-bit word
        let t = Arc::new(IlaTable::new(16));
        t.insert(42, A).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicU64::new(0));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (t, stop, reads) = (Arc::clone(&t), Arc::clone(&stop), Arc::clone(&reads));
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match t.lookup(42) {
                            Some(A) | Some(B) => {}
                            other => panic!("torn or lost read: {other:x?}"),
                        }
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        // Keep updating until the readers have done plenty of reads concurrently (however
        // long a starved reader takes; a reader that stopped on a failed assertion ends
        // it, and the join reports why).
        let mut i = 0u64;
        while (i < 100_000 || reads.load(Ordering::Relaxed) < 300_000)
            && !readers.iter().any(|r| r.is_finished())
        {
            assert!(t.set_locator(42, if i & 1 == 0 { B } else { A }));
            i += 1;
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
    }

    /// Readers look up while the control thread updates, removes, reclaims and re-adds:
    /// a stable mapping is always found with one of its two locators, a removed one is
    /// gone from the moment `remove` returns, and slots recycle under QSBR.
    #[test]
    fn readers_during_updates_removals_and_reuse() {
        const STABLE: u64 = 64;
        const CHURN: u64 = 64;
        let loc = |i: u64, v: u64| (i << 32) | v;
        // Room for every churned slot even if a reader is slow to pass a quiescent point.
        let t = Arc::new(IlaTable::new((STABLE + CHURN) as usize + 2048));
        let q = Qsbr::new(3);
        for i in 0..STABLE + CHURN {
            t.insert(i, loc(i, 0)).unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        // Identifier the control thread has removed for good; readers must never see it.
        let gone = Arc::new(AtomicU64::new(u64::MAX));
        // Sweeps each reader has finished: the end waits on every reader, not a total a
        // fast pair could make alone while a descheduled third never started.
        let sweeps: Arc<Vec<AtomicU64>> = Arc::new((0..3).map(|_| AtomicU64::new(0)).collect());
        let readers: Vec<_> = (0..3)
            .map(|w| {
                let (t, stop, gone) = (Arc::clone(&t), Arc::clone(&stop), Arc::clone(&gone));
                let sweeps = Arc::clone(&sweeps);
                let h = q.handle(w);
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let g = gone.load(Ordering::Acquire);
                        for i in 0..STABLE + CHURN {
                            match t.lookup(i) {
                                Some(l) => {
                                    assert_eq!(l >> 32, i, "locator of another mapping");
                                    assert!(l & 0xffff_ffff <= 1, "torn locator {l:x}");
                                    assert_ne!(i, g, "removed mapping still found");
                                }
                                None => assert!(i >= STABLE, "stable mapping {i} lost"),
                            }
                        }
                        n += 1;
                        sweeps[w].fetch_add(1, Ordering::Release);
                        h.quiescent();
                    }
                    n
                })
            })
            .collect();
        for round in 0..2000u64 {
            for i in 0..STABLE {
                t.set_locator(i, loc(i, round % 2));
            }
            let c = STABLE + round % CHURN;
            assert!(t.remove(c));
            t.reclaim(&q);
            if round + 1 == 2000 {
                gone.store(c, Ordering::Release);
            } else {
                t.insert(c, loc(c, round % 2)).unwrap();
            }
        }
        // Let every reader make two full sweeps with the final removal published (the
        // first may have begun before it). An event, not a time: a starved reader is
        // waited for however long it takes; one that stopped (a failed assertion) ends
        // the wait, and its join below reports why.
        let seen: Vec<u64> = sweeps.iter().map(|s| s.load(Ordering::Acquire)).collect();
        for ((s, seen), r) in sweeps.iter().zip(seen).zip(&readers) {
            while s.load(Ordering::Acquire) < seen + 2 && !r.is_finished() {
                std::thread::yield_now();
            }
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() >= 2);
        }
        assert_eq!(t.len() as u64, STABLE + CHURN - 1);
        for _ in 0..3 {
            t.reclaim(&q);
        }
        assert_eq!(t.limbo_len(), 0, "all readers went offline");
    }
}
