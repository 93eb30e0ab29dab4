//! Quiescent-state-based reclamation (QSBR): when may a slot that the reaper unlinked be
//! handed out again?
//!
//! Workers poll in batches; between two batches a worker holds no reference into the
//! tables. It says so by calling [`QsbrHandle::quiescent`]. The reaper stamps what it
//! unlinks with the epoch it then advances to; a slot stamped `e` may be reused once every
//! online worker has announced a quiescent state in epoch `e` or later. Workers that go
//! idle say [`QsbrHandle::offline`] so they never hold reclamation back.
//!
//! Coming back online is the delicate step: while a worker is offline the reaper counts it
//! as being in the current epoch, so the epoch it announces must be one read *after* its
//! announcement is visible, or the reaper may free what the worker is about to read (see
//! [`QsbrHandle::quiescent`]).
//!
//! Cost on the packet path: one load of the global epoch, one load and one store of the
//! worker's own slot per batch, no read-modify-write; a fence only when coming online.

use crate::sync::{fence, AtomicU64, Ordering};
use std::sync::Arc;

/// An epoch value meaning "this worker holds no references at all".
const OFFLINE: u64 = u64::MAX;

#[repr(align(64))]
#[derive(Debug)]
struct Padded(AtomicU64);

/// The shared epoch state.
#[derive(Debug)]
pub struct Qsbr {
    global: AtomicU64,
    workers: Box<[Padded]>,
}

impl Qsbr {
    /// State for `workers` worker threads (all start offline).
    pub fn new(workers: usize) -> Arc<Self> {
        Arc::new(Self {
            global: AtomicU64::new(1),
            workers: (0..workers.max(1))
                .map(|_| Padded(AtomicU64::new(OFFLINE)))
                .collect(),
        })
    }

    /// Number of worker slots.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// A worker's handle (one per worker thread; `id < workers()`).
    pub fn handle(self: &Arc<Self>, id: usize) -> QsbrHandle {
        let h = QsbrHandle {
            qsbr: Arc::clone(self),
            id: id % self.workers.len(),
        };
        h.quiescent();
        h
    }

    /// Advances the global epoch; returns the stamp for what was unlinked before the call.
    pub fn advance(&self) -> u64 {
        self.global.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Every stamp `<=` this value is safe to reclaim.
    pub fn safe_epoch(&self) -> u64 {
        // Pairs with the fence in `quiescent` (coming online): whatever this walk reads,
        // either it sees the worker's announcement, or the worker's re-read of the
        // global epoch sees the advance made before this call (see there).
        fence(Ordering::SeqCst);
        let now = self.global.load(Ordering::SeqCst);
        self.workers
            .iter()
            .map(|w| w.0.load(Ordering::SeqCst))
            .map(|e| if e == OFFLINE { now } else { e })
            .min()
            .unwrap_or(now)
    }
}

/// One worker's side of QSBR.
#[derive(Debug)]
pub struct QsbrHandle {
    qsbr: Arc<Qsbr>,
    id: usize,
}

impl QsbrHandle {
    /// Announces that this worker holds no reference into the tables right now.
    ///
    /// Coming back online, the epoch `g` read first may be stale: the reaper may have
    /// unlinked a node, advanced past `g` and, seeing this worker offline (= "now"), freed
    /// the node, all before the store below is visible; and nothing then orders the
    /// worker's later reads after the unlink, so it could still reach the freed node. So
    /// when the previous value was OFFLINE: store `g`, a SeqCst fence, and re-read the
    /// global epoch. Against the fence at the start of [`Qsbr::safe_epoch`] (after the
    /// reaper's advance), one of the two fences comes first in the single SeqCst order:
    /// - ours first: the reaper's walk sees our store (`g` or later), so it waits for us;
    /// - the reaper's first: our re-read sees its advance (an acquire of the SeqCst RMW
    ///   that followed the unlink), so every node it could free was unlinked before our
    ///   next read, and we announce that newer epoch.
    ///
    /// An online worker's stale `g` is harmless: the reaper then sees an epoch no newer
    /// than the truth and waits longer.
    #[inline]
    pub fn quiescent(&self) {
        let slot = &self.qsbr.workers[self.id].0;
        let g = self.qsbr.global.load(Ordering::SeqCst);
        // Only this thread writes its slot: a relaxed load reads its own last store.
        let was_offline = slot.load(Ordering::Relaxed) == OFFLINE;
        slot.store(g, Ordering::SeqCst);
        if was_offline {
            fence(Ordering::SeqCst);
            let now = self.qsbr.global.load(Ordering::SeqCst);
            if now != g {
                slot.store(now, Ordering::SeqCst);
            }
        }
    }

    /// Announces that this worker will hold no reference until its next `quiescent()`.
    pub fn offline(&self) {
        self.qsbr.workers[self.id]
            .0
            .store(OFFLINE, Ordering::SeqCst);
    }

    /// The worker's id.
    pub fn id(&self) -> usize {
        self.id
    }
}

impl Drop for QsbrHandle {
    fn drop(&mut self) {
        self.offline();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reclamation_waits_for_every_online_worker() {
        let q = Qsbr::new(2);
        let a = q.handle(0);
        let b = q.handle(1);
        let stamp = q.advance();
        assert!(
            q.safe_epoch() < stamp,
            "nobody has passed a quiescent point yet"
        );
        a.quiescent();
        assert!(q.safe_epoch() < stamp);
        b.offline();
        assert!(
            q.safe_epoch() >= stamp,
            "offline workers do not hold reclamation back"
        );
        b.quiescent();
        assert!(q.safe_epoch() >= stamp);
        drop(a);
        drop(b);
        assert!(q.safe_epoch() >= q.advance() - 1);
    }
}
