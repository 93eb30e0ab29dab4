//! The reaper: one per NAT44 instance, run by a dedicated thread (or inline by a
//! single-threaded caller). It walks the tables, deletes timed-out original+reply record
//! pairs, drops bindings whose last session went, returns their ports to the pool after
//! the reuse hold, and frees slots once a QSBR grace period has passed.

use std::sync::Arc;

use conntrack::{Proto, SessionId, Timestamp};

use super::worker::release_session;
use super::{key_ep, key_proto, Nat44Shared, SWEEP_INTERVAL};
use crate::stats::Counters;

#[derive(Clone, Copy, Debug)]
enum Slot {
    Session(u32),
    Binding(u32),
    Permit(u32),
}

/// The reaper's state.
#[derive(Debug)]
pub struct Nat44Reaper {
    shared: Arc<Nat44Shared>,
    /// Unlinked slots waiting for their grace period: (epoch stamp, slot).
    limbo: Vec<(u64, Slot)>,
    next_sweep: Option<Timestamp>,
    counters: Counters,
}

impl Nat44Reaper {
    pub(super) fn new(shared: Arc<Nat44Shared>) -> Self {
        Self {
            shared,
            limbo: Vec::new(),
            next_sweep: None,
            counters: Counters::default(),
        }
    }

    /// The reaper's counters (`sessions_expired`).
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Slots waiting for a grace period.
    pub fn limbo_len(&self) -> usize {
        self.limbo.len()
    }

    /// When [`handle_timeout`](Self::handle_timeout) should next run.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let sweep = self.next_sweep.unwrap_or(Timestamp::ZERO);
        let pools = self
            .shared
            .pools
            .iter()
            .filter_map(|p| p.poll_timeout())
            .min();
        Some(pools.map_or(sweep, |p| p.min(sweep)))
    }

    /// One pass: early-drop unconfirmed TCP sessions if the table is nearly full, expire
    /// idle sessions, drop unused bindings and permits, release ports whose hold has
    /// passed, reclaim slots no worker can reach.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        let sh = Arc::clone(&self.shared);
        // Early drop, before the walk so that the walk unlinks what it marks. Slots
        // already unlinked and waiting for their grace period are as good as free.
        let cap = sh.sessions.capacity();
        let waiting = self
            .limbo
            .iter()
            .filter(|(_, s)| matches!(s, Slot::Session(_)))
            .count();
        let taken = sh.sessions.occupied().saturating_sub(waiting);
        if taken >= early_drop_threshold(cap) {
            let target = taken - early_drop_target(cap);
            early_drop(&sh, &mut self.counters, usize::MAX, target);
        }
        let mut unlinked = Vec::new();
        sh.sessions.reap(
            |v| v.last_seen() + sh.timeout(v.initial.proto, v.tcp) <= now,
            |id, v, marked_here| {
                if marked_here {
                    release_session(&sh, &v);
                    self.counters.sessions_expired += 1;
                }
                unlinked.push(Slot::Session(id.0));
            },
        );
        sh.bindings.reap(|id, b| {
            if let Some(h) = &sh.inside_hosts {
                h.release(key_ep(b.key_a).addr, now);
            }
            if !b.is_static && b.user > 0 {
                if let Some(pool) = sh.pools.get(b.user as usize - 1) {
                    pool.release(key_proto(b.key_a), key_ep(b.key_b), now);
                }
                // Counted when its port was taken (`outbound_binding`).
                sh.release_host(
                    conntrack::Counted::Ports(key_proto(b.key_a)),
                    key_ep(b.key_a).addr,
                );
            }
            unlinked.push(Slot::Binding(id));
        });
        sh.permits.reap(|id, _| unlinked.push(Slot::Permit(id)));
        if !unlinked.is_empty() {
            let stamp = sh.qsbr.advance();
            self.limbo.extend(unlinked.into_iter().map(|s| (stamp, s)));
        }
        let safe = sh.qsbr.safe_epoch();
        self.limbo.retain(|(stamp, slot)| {
            if *stamp > safe {
                return true;
            }
            match *slot {
                Slot::Session(i) => sh.sessions.free(SessionId(i)),
                Slot::Binding(i) => sh.bindings.free(i),
                Slot::Permit(i) => sh.permits.free(i),
            }
            false
        });
        for p in &sh.pools {
            p.handle_timeout(now);
        }
        sh.frags.sweep(now);
        self.next_sweep = Some(now + SWEEP_INTERVAL);
    }
}

/// Early drop starts when this many slots are taken: 7/8 of the table (Linux conntrack
/// drops early only when the table is full; starting before leaves room for a burst).
pub(super) fn early_drop_threshold(cap: usize) -> usize {
    cap - cap / 8
}

/// What a reaper's early drop brings the table down to: 3/4 of it.
pub(super) fn early_drop_target(cap: usize) -> usize {
    cap - cap / 4
}

/// The most slots sessions opened from the outside may take (7/8 of the table): the
/// last eighth is kept for sessions the inside users open, so that a spoofed SYN flood
/// at a port forward never locks them out.
pub(super) fn outside_limit(cap: usize) -> usize {
    early_drop_threshold(cap).max(1)
}

/// Slots a worker scans for victims when an insert finds the table full.
pub(super) const EARLY_DROP_SCAN: usize = 32;
/// Victims a worker takes per full insert.
pub(super) const EARLY_DROP_MAX: usize = 4;

/// Marks dead up to `max` unconfirmed TCP sessions (handshake never completed; never an
/// established one) among `scan` slots, releasing what each held and counting it in
/// `sessions_early_dropped`. Any thread; the reaper's walk unlinks and frees them.
pub(super) fn early_drop(sh: &Nat44Shared, counters: &mut Counters, scan: usize, max: usize) {
    sh.sessions.early_drop(
        scan,
        max,
        |v| v.initial.proto == Proto::Tcp && !v.tcp.is_confirmed(),
        |_, v| {
            release_session(sh, &v);
            counters.sessions_early_dropped += 1;
        },
    );
}

impl crate::mode::Reaper for Nat44Reaper {
    fn poll_timeout(&self) -> Option<Timestamp> {
        Nat44Reaper::poll_timeout(self)
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        Nat44Reaper::handle_timeout(self, now);
    }

    fn counters(&self) -> &Counters {
        Nat44Reaper::counters(self)
    }
}
