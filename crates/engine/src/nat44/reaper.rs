//! The reaper: one per NAT44 instance, run by a dedicated thread (or inline by a
//! single-threaded caller). It walks the tables, deletes timed-out original+reply record
//! pairs, drops bindings whose last session went, returns their ports to the pool after
//! the reuse hold (at once when no packet ever came in through the binding: see
//! [`release_port`]), and frees slots once a QSBR grace period has passed.
//!
//! Between sweeps, [`Nat44Reaper::drain`] reclaims what the workers evicted at a full
//! table (unlink, grace period, free): called every millisecond or so while there is
//! any, it gives the slots back before a flood of new sessions fills the room kept for
//! dead ones (see [`outside_room`]).

use std::sync::Arc;

use conntrack::{Proto, Room, SessionId, SessionView, Timestamp};

use super::natlog::Origin;
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
    /// Sessions in `limbo` (what `drain` waits to free).
    drained: usize,
    /// The eviction queue's swap buffer.
    scratch: Vec<u32>,
    /// The offload hints' swap buffer.
    hinted: Vec<u32>,
}

impl Nat44Reaper {
    pub(super) fn new(shared: Arc<Nat44Shared>) -> Self {
        Self {
            shared,
            limbo: Vec::new(),
            next_sweep: None,
            counters: Counters::default(),
            drained: 0,
            scratch: Vec::new(),
            hinted: Vec::new(),
        }
    }

    /// Between sweeps: shows the offload the sessions the workers hinted (see
    /// `offload`), unlinks the sessions the workers evicted, frees what has passed its
    /// grace period. Cheap when there is nothing (two atomic loads). Returns whether
    /// anything is still waiting (call again within a millisecond or so).
    pub fn drain(&mut self, now: Timestamp) -> bool {
        if self.shared.has_hints() {
            self.shared.current().offer_hinted(now, &mut self.hinted);
        }
        if !self.shared.sessions.has_queued() && self.drained == 0 {
            return self.shared.has_hints();
        }
        let sh = self.shared.current();
        self.unlink_evicted(&sh);
        self.free_safe(&sh);
        sh.sessions.has_queued() || self.drained > 0 || sh.has_hints()
    }

    /// Unlinks the evicted sessions (released by whoever evicted them) into `limbo`,
    /// stamped with one epoch advanced after the unlinks.
    fn unlink_evicted(&mut self, sh: &Nat44Shared) {
        let start = self.limbo.len();
        let limbo = &mut self.limbo;
        sh.sessions.reap_queued(&mut self.scratch, |id, _| {
            limbo.push((0, Slot::Session(id.0)))
        });
        let n = self.limbo.len() - start;
        if n > 0 {
            let stamp = sh.qsbr.advance();
            for e in &mut self.limbo[start..] {
                e.0 = stamp;
            }
            self.drained += n;
        }
    }

    /// Frees every slot in `limbo` whose grace period has passed.
    fn free_safe(&mut self, sh: &Nat44Shared) {
        if self.limbo.is_empty() {
            return;
        }
        let safe = sh.qsbr.safe_epoch();
        let mut sessions_left = 0;
        self.limbo.retain(|(stamp, slot)| {
            if *stamp > safe {
                sessions_left += usize::from(matches!(slot, Slot::Session(_)));
                return true;
            }
            match *slot {
                Slot::Session(i) => sh.sessions.free(SessionId(i)),
                Slot::Binding(i) => sh.bindings.free(i),
                Slot::Permit(i) => sh.permits.free(i),
            }
            false
        });
        self.drained = sessions_left;
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
        // The policy in force (a reload may have published a newer one): its timeouts,
        // its pools for the ports freed, its drained addresses.
        let sh = self.shared.current();
        // What the workers evicted first, so the walk sees only the rest.
        self.unlink_evicted(&sh);
        // Early drop, before the walk so that the walk unlinks what it marks. Dead
        // sessions (not yet freed) do not count as live.
        let cap = sh.sessions.capacity();
        let taken = sh.sessions.live_count();
        if taken >= early_drop_threshold(cap) {
            let target = taken - early_drop_target(cap);
            let at = Origin {
                ring: crate::events::REAPER,
                now,
            };
            early_drop(&sh, &mut self.counters, at, usize::MAX, target);
        }
        let mut unlinked = Vec::new();
        // Sessions an operator asked to end (`quicknat sessions clear`) end as expired ones.
        let clears = sh.clears.take();
        sh.sessions.reap(
            |v| {
                sh.last_seen_offloaded(v, now) + sh.timeout(v.initial.proto, v.tcp) <= now
                    || sh.drained(v)
                    || clears.as_ref().is_some_and(|c| c.wants(v))
            },
            |id, v, marked_here| {
                if !marked_here {
                    // A worker ended it (and told the offload) while the walk may have
                    // been offering it: tell the offload again, idempotently, so no
                    // entry installed in between outlives the session.
                    if let Some(o) = sh.offload() {
                        o.remove(&v);
                    }
                }
                if marked_here {
                    release_session(
                        &sh,
                        &v,
                        Origin {
                            ring: crate::events::REAPER,
                            now,
                        },
                    );
                    self.counters.sessions_expired += 1;
                    if let Some(c) = &clears {
                        c.ended(&v);
                    }
                }
                unlinked.push(Slot::Session(id.0));
            },
        );
        sh.bindings.reap(|id, b| {
            let at = Origin {
                ring: crate::events::REAPER,
                now,
            };
            let proto = key_proto(b.key_a);
            sh.log_binding(at, false, proto, key_ep(b.key_a), key_ep(b.key_b));
            if let Some(h) = &sh.inside_hosts {
                h.release(key_ep(b.key_a).addr, now);
            }
            if !b.is_static && b.user > 0 {
                if let Some(pool) = sh.pool_of(b.user, key_ep(b.key_b).addr) {
                    release_port(&sh, pool, &b, at, &mut self.counters);
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
        // Their bindings and permits are unlinked above, in the same pass.
        if let Some(c) = clears {
            c.finish();
        }
        if !unlinked.is_empty() {
            let stamp = sh.qsbr.advance();
            self.drained += unlinked
                .iter()
                .filter(|s| matches!(s, Slot::Session(_)))
                .count();
            self.limbo.extend(unlinked.into_iter().map(|s| (stamp, s)));
        }
        self.free_safe(&sh);
        let at = Origin {
            ring: crate::events::REAPER,
            now,
        };
        for p in &sh.pools {
            // PBA: a block whose last port came back is released, and logged.
            p.handle_timeout_blocks(now, |b| sh.log_block(at, false, &b));
        }
        sh.frags.sweep(now, &mut self.counters);
        sh.pptp.expire(now, sh.cfg.timeouts.other);
        self.next_sweep = Some(now + SWEEP_INTERVAL);
    }
}

/// Gives back the port of dynamic binding `b`, just reaped. The reuse hold keeps late
/// packets of the binding's flows from a new owner of the port; a binding none of whose
/// sessions ever let a packet in (the bindings' mark, set from `INBOUND_SEEN` when a
/// session ends) has no such packets to wait for: every session it had went idle past
/// its timeout unanswered, or was evicted unanswered. Its port goes back at once, so a
/// flood of unanswered flows (spoofed inside sources) cannot hold a small pool's every
/// port for the whole hold. Blocks (PBA) a port frees are logged; a hold cut short to
/// make room, and a port given back unheld, are counted.
fn release_port(
    sh: &Nat44Shared,
    pool: &conntrack::PortPool,
    b: &conntrack::reftable::EntryView,
    at: Origin,
    counters: &mut Counters,
) {
    let (proto, public) = (key_proto(b.key_a), key_ep(b.key_b));
    if b.marked {
        if pool.release_blocks(proto, public, at.now, |blk| sh.log_block(at, false, &blk)) {
            counters.port_holds_cut_short += 1;
        }
    } else {
        if let Some(blk) = pool.give_back_now(proto, public) {
            sh.log_block(at, false, &blk);
        }
        counters.ports_released_unheld += 1;
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

/// What sessions opened from the outside may take: 3/4 of the table live, and 7/8 of its
/// slots counting the dead ones not yet reclaimed. So the table splits as
/// - 3/4: outside-opened sessions, live (at that bound a new one evicts an unconfirmed
///   one, as conntrack's `early_drop`, and gets in);
/// - 1/8: room for the evicted ones while the reaper reclaims them (a tick, plus a grace
///   period): 32,768 slots of a 262,144 table, 33 ms of a 1 Mpps flood;
/// - 1/8: never taken by outside-opened sessions, live or dead: the inside users' share,
///   so a spoofed SYN flood at a port forward never locks them out.
pub(super) fn outside_room(cap: usize) -> Room {
    Room {
        live: (cap - cap / 4).max(1),
        slots: (cap - cap / 8).max(1),
    }
}

/// Whether early drop may take a session: TCP whose handshake never completed (never an
/// established one).
pub(super) fn is_victim(v: &SessionView) -> bool {
    v.initial.proto == Proto::Tcp && !v.tcp.is_confirmed()
}

/// Marks dead up to `max` victims (see [`is_victim`]) among `scan` slots and queues them
/// for [`Nat44Reaper::drain`], releasing what each held and counting it in
/// `sessions_early_dropped`. Any thread.
pub(super) fn evict(
    sh: &Nat44Shared,
    counters: &mut Counters,
    at: Origin,
    scan: usize,
    max: usize,
) {
    sh.sessions.evict(scan, max, is_victim, |_, v| {
        release_session(sh, &v, at);
        counters.sessions_early_dropped += 1;
    });
}

/// Slots a worker scans for victims when an insert finds the table full.
pub(super) const EARLY_DROP_SCAN: usize = 32;
/// Victims a worker takes per full insert.
pub(super) const EARLY_DROP_MAX: usize = 4;

/// Marks dead up to `max` unconfirmed TCP sessions (handshake never completed; never an
/// established one) among `scan` slots, releasing what each held and counting it in
/// `sessions_early_dropped`. Any thread; the reaper's walk unlinks and frees them.
pub(super) fn early_drop(
    sh: &Nat44Shared,
    counters: &mut Counters,
    at: Origin,
    scan: usize,
    max: usize,
) {
    sh.sessions.early_drop(scan, max, is_victim, |_, v| {
        release_session(sh, &v, at);
        counters.sessions_early_dropped += 1;
    });
}

impl crate::mode::Reaper for Nat44Reaper {
    fn poll_timeout(&self) -> Option<Timestamp> {
        Nat44Reaper::poll_timeout(self)
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        Nat44Reaper::handle_timeout(self, now);
    }

    fn drain(&mut self, now: Timestamp) -> bool {
        Nat44Reaper::drain(self, now)
    }

    fn counters(&self) -> &Counters {
        Nat44Reaper::counters(self)
    }
}
