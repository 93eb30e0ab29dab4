//! Read-only walks over the session table for inspection (the control socket's session
//! listing and census): never a lock, never a write, so a walk of a full table runs beside
//! the workers without holding any of them up.
//!
//! Consistency without QSBR: a walker is not one of the workers the reaper waits for, so a
//! slot it reads may be unlinked, freed and reused by a new session while it reads. The
//! slots live in one fixed array (never unmapped), so a read is always memory-safe; what
//! could go wrong is a *torn* snapshot (the original record of one session with the reply
//! record of the next). [`SessionTable::snapshot_live`] reads the slot twice, its state
//! before and after each read, and keeps the snapshot only when the session was live
//! throughout and both reads agree, as a sequence lock's reader does: a reuse in between
//! changes the keys (or the state) and the entry is skipped. Like `conntrack -L`, a walk
//! sees each session that lives throughout it exactly once; a session created or removed
//! during the walk may or may not be listed.

use std::sync::atomic::Ordering;

use super::{SessionId, SessionTable, SessionView, ALIVE, LIFECYCLE};

impl SessionTable {
    /// Slots ever used (the walk bound): a walk over `0..slot_bound()` sees every session.
    pub fn slot_bound(&self) -> u32 {
        self.slab.high_water()
    }

    /// A consistent snapshot of session `id` if it is live (see the module doc), else
    /// `None`.
    pub fn snapshot_live(&self, id: SessionId) -> Option<SessionView> {
        let s = self.slab.get(id.0)?;
        if s.state.load(Ordering::Acquire) & LIFECYCLE != ALIVE {
            return None;
        }
        let first = self.view(id)?;
        let again = self.view(id)?;
        let same = first.initial == again.initial
            && first.revised == again.revised
            && first.binding == again.binding
            && first.flags == again.flags;
        (same && s.state.load(Ordering::Acquire) & LIFECYCLE == ALIVE).then_some(again)
    }

    /// Hands every live session to `visit` (consistent snapshots, see the module doc),
    /// in slot order, until it returns `false`. Returns how many were handed over.
    pub fn walk_live(&self, mut visit: impl FnMut(SessionId, &SessionView) -> bool) -> usize {
        let mut n = 0;
        for id in 0..self.slot_bound() {
            if let Some(v) = self.snapshot_live(SessionId(id)) {
                n += 1;
                if !visit(SessionId(id), &v) {
                    break;
                }
            }
        }
        n
    }
}
