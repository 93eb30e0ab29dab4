//! Session offload: an outside muscle — the XDP fast path — forwards some sessions' packets
//! without the engine, and the engine stays the brain. The reaper shows the offload every
//! live session on each walk (so it can take the ones that became established, off the
//! per-packet path) and takes the offload's last-seen time into account before expiring
//! one; whoever ends a session tells the offload first, before the session's binding and
//! port are released, so a stale rewrite never outlives the mapping it was made from.
//!
//! A session need not wait for the walk (every 200 ms; at 20 Gbit/s that is up to 500 MB
//! of one new flow through the engine, ~5% of a 3 s transfer): a worker that forwards a
//! packet of a session through the engine while an offload is attached hints it once
//! ([`Nat44Shared::hint_offload`]), and the reaper's drain (every 1-10 ms) shows the
//! hinted sessions to the offload at once ([`Nat44Shared::offer_hinted`]). One that is not
//! established yet ([`Visit::pending`]) may hint again with its next packet.
//!
//! Off by default: with no offload attached each hook is one load and one branch.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use conntrack::{Hit, SessionId, SessionView, Timestamp};

use super::Nat44Shared;

/// What the offload answers for a session the reaper's walk showed it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Visit {
    /// When it last forwarded one of the session's packets (None: not offloaded, or
    /// never). The reaper refreshes the session with a later time.
    pub seen: Option<Timestamp>,
    /// It took the session (its entries) just now: from here on its packets pass the
    /// engine unseen, so a TCP session's sequence words are forgotten at once (else a
    /// legitimate RST could be refused as out of a window the engine stopped following).
    pub installed: bool,
    /// Not taken because it is not established yet: worth showing again when its next
    /// packet passes the engine (its hint is cleared, see [`Nat44Shared::hint_offload`]).
    pub pending: bool,
}

/// Most hints waiting for the reaper; past it a worker drops its hint (the walk still
/// comes, and the session's next packet hints again).
const MAX_HINTS: usize = 4096;

/// Sessions the workers hinted, waiting for the reaper's next drain; shared by every
/// policy generation.
#[derive(Debug, Default)]
pub(super) struct Hints {
    ids: Mutex<Vec<u32>>,
    pending: AtomicBool,
}

/// What carries sessions' packets outside the engine (the runtime's XDP fast path).
pub trait SessionOffload: Send + Sync + std::fmt::Debug {
    /// The reaper's walk visits live session `v` at `now`: offload it if it qualifies,
    /// and say when the offload last forwarded one of its packets.
    fn visit(&self, v: &SessionView, now: Timestamp) -> Visit;
    /// Session `v` ends (expired, reset and timed out, evicted, drained): stop
    /// forwarding it. Called before its binding is released.
    fn remove(&self, v: &SessionView);
}

impl Nat44Shared {
    /// Attaches the offload the reaper and the session release report to (once, before
    /// traffic: a second call is refused and returns false).
    pub fn attach_offload(&self, o: Arc<dyn SessionOffload>) -> bool {
        self.offload.set(o).is_ok()
    }

    /// The attached offload, if any.
    #[inline]
    pub(super) fn offload(&self) -> Option<&dyn SessionOffload> {
        self.offload.get().map(|o| &**o)
    }

    /// A worker forwarded a packet of session `h` through the engine: with an offload
    /// attached, the session is queued for the reaper's next drain, once (its
    /// `OFFLOAD_HINTED` flag). Never blocks: when the queue is busy or full the flag is
    /// cleared again, and a later packet hints.
    #[inline]
    pub(super) fn hint_offload(&self, h: &Hit<'_>) {
        if self.offload().is_none() || !h.hint_once() {
            return;
        }
        let queued = match self.hints.ids.try_lock() {
            Ok(mut q) if q.len() < MAX_HINTS => {
                q.push(h.r.session.0);
                true
            }
            _ => false,
        };
        if queued {
            self.hints.pending.store(true, Ordering::Release);
        } else {
            self.sessions.clear_hint(h.r.session);
        }
    }

    /// Whether hints wait for [`Nat44Shared::offer_hinted`].
    pub(super) fn has_hints(&self) -> bool {
        self.hints.pending.load(Ordering::Acquire)
    }

    /// The reaper: shows every hinted session that is still live to the offload
    /// (installing the established ones, see [`Nat44Shared::last_seen_offloaded`]);
    /// `scratch`: the queue's swap buffer.
    pub(super) fn offer_hinted(&self, now: Timestamp, scratch: &mut Vec<u32>) {
        if !self.hints.pending.swap(false, Ordering::AcqRel) {
            return;
        }
        {
            let mut q = self.hints.ids.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::swap(&mut *q, scratch);
        }
        for id in scratch.drain(..).map(SessionId) {
            if !self.sessions.is_live(id) {
                continue;
            }
            let Some(v) = self.sessions.view(id) else {
                continue;
            };
            if self.show_offload(&v, now).1.pending {
                self.sessions.clear_hint(id);
            }
        }
    }

    /// The reaper's view of `v`'s last activity: the engine's, or the offload's when
    /// later, in which case the session is refreshed with it (so a worker's inline
    /// expiry check agrees).
    pub(super) fn last_seen_offloaded(&self, v: &SessionView, now: Timestamp) -> Timestamp {
        self.show_offload(v, now).0
    }

    /// Shows the offload session `v`: (its last activity, as
    /// [`Nat44Shared::last_seen_offloaded`] says, and the offload's answer).
    fn show_offload(&self, v: &SessionView, now: Timestamp) -> (Timestamp, Visit) {
        let seen = v.last_seen();
        let Some(o) = self.offload() else {
            return (seen, Visit::default());
        };
        let visit = o.visit(v, now);
        let tcp = v.initial.proto == conntrack::Proto::Tcp;
        if visit.installed && tcp {
            if let Some(h) = self.sessions.hit(&v.initial) {
                h.forget_sequence();
            }
        }
        let last = match visit.seen {
            Some(t) if t > seen => {
                let t = t.min(now);
                if let Some(h) = self.sessions.hit(&v.initial) {
                    h.touch(t);
                    // Its segments went by unseen: their sequence numbers with them.
                    if tcp {
                        h.forget_sequence();
                    }
                }
                t
            }
            _ => seen,
        };
        (last, visit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nat44::tests::{config, IN_A, SRV};
    use crate::nat44::Nat44;
    use crate::verdict::Direction;
    use std::sync::Mutex;
    use std::time::Duration;

    /// Records visits and removals; reports `seen` as its last-seen time.
    #[derive(Debug, Default)]
    struct Recorder {
        seen: Mutex<Option<Timestamp>>,
        /// What `visit` answers for `installed`.
        installs: Mutex<bool>,
        /// What `visit` answers for `pending`.
        pending: Mutex<bool>,
        visited: Mutex<usize>,
        removed: Mutex<Vec<SessionView>>,
    }

    impl SessionOffload for Recorder {
        fn visit(&self, _v: &SessionView, _now: Timestamp) -> Visit {
            *self.visited.lock().unwrap() += 1;
            Visit {
                seen: *self.seen.lock().unwrap(),
                installed: *self.installs.lock().unwrap(),
                pending: *self.pending.lock().unwrap(),
            }
        }
        fn remove(&self, v: &SessionView) {
            self.removed.lock().unwrap().push(*v);
        }
    }

    /// An offloaded flow the engine no longer sees is kept alive by the offload's
    /// last-seen time, and removed from the offload when it finally expires.
    #[test]
    fn the_reaper_keeps_offloaded_sessions_and_removes_expired_ones_first() {
        let mut nat = Nat44::new(config()).unwrap();
        let rec = Arc::new(Recorder::default());
        assert!(nat.shared().attach_offload(rec.clone()));
        let t0 = Timestamp::from_secs(10);
        let mut p = crate::testpkt::ipv4(17, IN_A, SRV, 64, &[0x9c, 0x40, 0, 53, 0, 8, 0, 0]);
        assert!(nat.process(t0, Direction::Outbound, &mut p).is_forward());
        let timeout = Duration::from_secs(300);
        // The offload forwarded packets until just before the engine's timeout ran out.
        *rec.seen.lock().unwrap() = Some(t0 + (timeout - Duration::from_secs(1)));
        nat.handle_timeout(t0 + timeout + Duration::from_millis(10));
        assert_eq!(
            nat.session_count(),
            1,
            "kept alive by the offload's last-seen"
        );
        assert!(*rec.visited.lock().unwrap() > 0);
        assert!(rec.removed.lock().unwrap().is_empty());
        // Nothing more forwarded: it expires, and the offload is told.
        nat.handle_timeout(t0 + timeout * 2 + Duration::from_secs(1));
        assert_eq!(nat.session_count(), 0);
        assert_eq!(rec.removed.lock().unwrap().len(), 1);
        assert_eq!(rec.removed.lock().unwrap()[0].initial.src.addr, IN_A);
    }

    /// A session is shown to the offload at the reaper's next drain after one of its
    /// packets (the first one too) passed the engine, not at the next walk; one not established yet
    /// (`pending`) hints again with its next packet, one taken does not.
    #[test]
    fn a_hinted_session_is_shown_at_the_next_drain() {
        let mut nat = Nat44::new(config()).unwrap();
        let rec = Arc::new(Recorder::default());
        assert!(nat.shared().attach_offload(rec.clone()));
        let t = Timestamp::from_secs(10);
        let udp = || crate::testpkt::ipv4(17, IN_A, SRV, 64, &[0x9c, 0x40, 0, 53, 0, 8, 0, 0]);
        let visited = || *rec.visited.lock().unwrap();
        let send =
            |nat: &mut Nat44| assert!(nat.process(t, Direction::Outbound, &mut udp()).is_forward());
        // Not established yet: shown, and its next packet hints again.
        *rec.pending.lock().unwrap() = true;
        send(&mut nat);
        nat.drain(t);
        assert_eq!(visited(), 1);
        send(&mut nat);
        send(&mut nat);
        assert!(!nat.drain(t), "nothing left waiting");
        assert_eq!(visited(), 2, "one hint for both packets");
        // Taken: no more hints (the walk still visits it).
        *rec.pending.lock().unwrap() = false;
        *rec.installs.lock().unwrap() = true;
        send(&mut nat);
        nat.drain(t);
        assert_eq!(visited(), 3);
        send(&mut nat);
        nat.drain(t);
        assert_eq!(visited(), 3);
        // Without an offload attached nothing is queued.
        let mut plain = Nat44::new(config()).unwrap();
        send(&mut plain);
        send(&mut plain);
        assert!(!plain.shared().has_hints());
    }

    /// A TCP session the offload takes forgets its sequence words at once: its segments
    /// pass the engine unseen from then on, so a legitimate RST far past the window the
    /// engine last saw is forwarded, not refused as out of window.
    #[test]
    fn an_offloaded_tcp_session_forgets_its_window_at_install() {
        use crate::testpkt::tcp_segment as seg;
        use crate::verdict::DropReason;
        use crate::Emit;
        const SYN: u8 = 0x02;
        const SYNACK: u8 = 0x12;
        const ACK: u8 = 0x10;
        const RST: u8 = 0x04;
        for installs in [false, true] {
            let mut nat = Nat44::new(config()).unwrap();
            let rec = Arc::new(Recorder::default());
            *rec.installs.lock().unwrap() = installs;
            assert!(nat.shared().attach_offload(rec.clone()));
            let t = Timestamp::from_secs(1);
            let mut p = seg(IN_A, 1111, SRV, 80, SYN, 100, 0, 0);
            assert!(nat.process(t, Direction::Outbound, &mut p).is_forward());
            let public = crate::testpkt::ports(&p).0;
            let pub_a = crate::nat44::tests::PUB;
            let mut p = seg(SRV, 80, pub_a, public, SYNACK, 5000, 101, 0);
            assert!(nat.process(t, Direction::Inbound, &mut p).is_forward());
            let mut p = seg(IN_A, 1111, SRV, 80, ACK, 101, 5001, 0);
            assert!(nat.process(t, Direction::Outbound, &mut p).is_forward());
            // The reaper's walk shows the offload the session.
            nat.handle_timeout(t + Duration::from_millis(200));
            assert!(*rec.visited.lock().unwrap() > 0);
            // The server sent 1 MB through the offload; its RST is at 5001 + 1_000_000.
            let mut p = seg(SRV, 80, pub_a, public, RST, 5001 + 1_000_000, 0, 0);
            let e = nat.process(t + Duration::from_secs(1), Direction::Inbound, &mut p);
            if installs {
                assert!(e.is_forward(), "{e:?}");
            } else {
                assert_eq!(e, Emit::Drop(DropReason::TcpRstOutOfWindow));
            }
        }
    }
}
