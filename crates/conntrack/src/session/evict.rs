//! Early drop and eviction at insert (conntrack's `early_drop`): victims are marked dead
//! (any thread), stop counting as live at once, and, when evicted at insert, are queued
//! for the reaper's prompt unlink ([`SessionTable::reap_queued`]).

use std::sync::atomic::Ordering;

use super::{InsertError, NewSession, Room, SessionId, SessionTable, SessionView, View};
use super::{ALIVE, DEAD, LIFECYCLE};
use crate::time::Timestamp;

impl SessionTable {
    /// Early drop (conntrack's `early_drop`): scans at most `scan` slots from where the
    /// last scan stopped and marks dead up to `max` live sessions for which `victim`
    /// says so, handing each to `on_dropped` (the caller releases what it held, exactly
    /// as for [`mark_dead`](Self::mark_dead)). The reaper unlinks and frees them as any
    /// dead session. Any thread may call it. Returns how many were dropped.
    pub fn early_drop(
        &self,
        scan: usize,
        max: usize,
        victim: impl FnMut(&SessionView) -> bool,
        on_dropped: impl FnMut(SessionId, SessionView),
    ) -> usize {
        self.drop_victims(scan, max, false, victim, on_dropped)
    }

    /// Early drop as [`early_drop`](Self::early_drop), the victims also queued for the
    /// reaper's prompt [`reap_queued`](Self::reap_queued) (their slots come back within
    /// a grace period instead of at the next full sweep).
    pub fn evict(
        &self,
        scan: usize,
        max: usize,
        victim: impl FnMut(&SessionView) -> bool,
        on_evicted: impl FnMut(SessionId, SessionView),
    ) -> usize {
        self.drop_victims(scan, max, true, victim, on_evicted)
    }

    /// Inserts as [`insert_room`](Self::insert_room); at the live bound (`room.live`),
    /// first evicts one session for which `victim` says so, among `scan` slots from the
    /// shared cursor (as [`evict`](Self::evict): `on_evicted` releases what it held), and
    /// takes a physically free slot: conntrack's `early_drop` at insert, so a new entry
    /// gets in while any victim exists. Refused (`Full`) when no victim is found, or when
    /// `room.slots` or the capacity bound (dead slots not yet freed count there).
    pub fn insert_evicting(
        &self,
        new: &NewSession,
        now: Timestamp,
        room: Room,
        scan: usize,
        mut victim: impl FnMut(&SessionView) -> bool,
        mut on_evicted: impl FnMut(SessionId, SessionView),
    ) -> Result<SessionId, InsertError> {
        // One eviction, and a couple more if other workers race for the room it made.
        for _ in 0..3 {
            match self.insert_room(new, now, room) {
                Err(InsertError::Full)
                    if self.live_count() >= room.live
                        && self.occupied() < room.slots.min(self.capacity()) =>
                {
                    if self.drop_victims(scan, 1, true, &mut victim, &mut on_evicted) == 0 {
                        return Err(InsertError::Full);
                    }
                }
                r => return r,
            }
        }
        Err(InsertError::Full)
    }

    /// Unlinks the sessions [`evict`](Self::evict) queued that are still dead (a queued
    /// one the full walk took already is skipped), parks them and hands each to
    /// `on_removed`; the caller frees each with [`free`](Self::free) after a QSBR grace
    /// period, as for [`reap`](Self::reap). The reaper only (never with `reap` at once).
    /// `scratch` (the reaper's, emptied) is swapped with the queue, so neither side
    /// allocates once both have grown to the eviction rate.
    pub fn reap_queued(
        &self,
        scratch: &mut Vec<u32>,
        mut on_removed: impl FnMut(SessionId, SessionView),
    ) {
        scratch.clear();
        if self.victims_queued.load(Ordering::Acquire) == 0 {
            return;
        }
        {
            let mut q = self.victims.lock().unwrap_or_else(|e| e.into_inner());
            self.victims_queued.store(0, Ordering::Release);
            std::mem::swap(&mut *q, scratch);
        }
        let view = View(&self.slab);
        for &id in scratch.iter() {
            let Some(s) = self.slab.get(id) else { continue };
            if s.state.load(Ordering::Acquire) & LIFECYCLE != DEAD {
                continue;
            }
            let Some(v) = self.view(SessionId(id)) else {
                continue;
            };
            self.index.remove(&view, id << 1, s.key(0));
            self.index.remove(&view, (id << 1) | 1, s.key(1));
            s.state.store(LIFECYCLE, Ordering::Release);
            on_removed(SessionId(id), v);
        }
    }

    /// Whether evicted sessions wait for [`reap_queued`](Self::reap_queued).
    pub fn has_queued(&self) -> bool {
        self.victims_queued.load(Ordering::Acquire) != 0
    }

    /// Early drop's scan; `queue`: hand the victims to the reaper's queue too.
    fn drop_victims(
        &self,
        scan: usize,
        max: usize,
        queue: bool,
        mut victim: impl FnMut(&SessionView) -> bool,
        mut on_dropped: impl FnMut(SessionId, SessionView),
    ) -> usize {
        let hw = self.slab.high_water();
        if hw == 0 || max == 0 {
            return 0;
        }
        let scan = scan.min(hw as usize) as u32;
        let start = self.drop_cursor.fetch_add(scan, Ordering::Relaxed) % hw;
        // One victim: the one seen last longest ago among the scanned (a connection
        // opened a moment ago is the last to go: it is the one about to complete).
        if max == 1 {
            let mut oldest: Option<(u32, u32, SessionView)> = None;
            for i in 0..scan {
                let id = (start + i) % hw;
                let Some((st, v)) = self.candidate(id, &mut victim) else {
                    continue;
                };
                if oldest.is_none_or(|(_, _, o)| v.last_seen() < o.last_seen()) {
                    oldest = Some((id, st, v));
                }
            }
            return match oldest {
                Some((id, st, v)) if self.mark_dead_unchanged(id, st) => {
                    self.dropped(SessionId(id), v, queue, &mut on_dropped);
                    1
                }
                _ => 0,
            };
        }
        let mut dropped = 0;
        for i in 0..scan {
            let id = (start + i) % hw;
            let Some((st, v)) = self.candidate(id, &mut victim) else {
                continue;
            };
            if self.mark_dead_unchanged(id, st) {
                self.dropped(SessionId(id), v, queue, &mut on_dropped);
                dropped += 1;
                if dropped == max {
                    break;
                }
            }
        }
        dropped
    }

    /// A live session `victim` accepts, with the state word its view was taken under.
    fn candidate(
        &self,
        id: u32,
        victim: &mut impl FnMut(&SessionView) -> bool,
    ) -> Option<(u32, SessionView)> {
        let st = self.slab.get(id)?.state.load(Ordering::Acquire);
        if st & LIFECYCLE != ALIVE {
            return None;
        }
        let v = self.view(SessionId(id))?;
        victim(&v).then_some((st, v))
    }

    /// Marks a session dead only if its state word is still `st` (what the victim test
    /// saw): a handshake completing meanwhile saves it.
    fn mark_dead_unchanged(&self, id: u32, st: u32) -> bool {
        let Some(s) = self.slab.get(id) else {
            return false;
        };
        let ok = s
            .state
            .compare_exchange(
                st,
                (st & !LIFECYCLE) | DEAD,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if ok {
            self.dead_pending.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// Queues a victim for the reaper if asked and hands it to `on_dropped`.
    fn dropped(
        &self,
        id: SessionId,
        v: SessionView,
        queue: bool,
        on_dropped: &mut impl FnMut(SessionId, SessionView),
    ) {
        if queue {
            let mut q = self.victims.lock().unwrap_or_else(|e| e.into_inner());
            q.push(id.0);
            self.victims_queued.store(q.len(), Ordering::Release);
        }
        on_dropped(id, v);
    }
}
