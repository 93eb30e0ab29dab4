//! Session offload (issue 15 item 2): an outside muscle — the XDP fast path — forwards
//! some sessions' packets without the engine, and the engine stays the brain. The
//! reaper shows the offload every live session on each walk (so it can take the ones
//! that became established, off the per-packet path) and takes the offload's last-seen
//! time into account before expiring one; whoever ends a session tells the offload
//! first, before the session's binding and port are released, so a stale rewrite never
//! outlives the mapping it was made from.
//!
//! Off by default: with no offload attached each hook is one load and one branch.

use std::sync::Arc;

use conntrack::{SessionView, Timestamp};

use super::Nat44Shared;

/// What carries sessions' packets outside the engine (the runtime's XDP fast path).
pub trait SessionOffload: Send + Sync + std::fmt::Debug {
    /// The reaper's walk visits live session `v` at `now`: offload it if it qualifies,
    /// and return when the offload last forwarded one of its packets (None: not
    /// offloaded, or never). The reaper refreshes the session with a later time.
    fn visit(&self, v: &SessionView, now: Timestamp) -> Option<Timestamp>;
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

    /// The reaper's view of `v`'s last activity: the engine's, or the offload's when
    /// later, in which case the session is refreshed with it (so a worker's inline
    /// expiry check agrees).
    pub(super) fn last_seen_offloaded(&self, v: &SessionView, now: Timestamp) -> Timestamp {
        let seen = v.last_seen();
        let Some(o) = self.offload() else {
            return seen;
        };
        match o.visit(v, now) {
            Some(t) if t > seen => {
                let t = t.min(now);
                if let Some(h) = self.sessions.hit(&v.initial) {
                    h.touch(t);
                    // Its segments went by unseen: their sequence numbers with them.
                    if v.initial.proto == conntrack::Proto::Tcp {
                        h.forget_sequence();
                    }
                }
                t
            }
            _ => seen,
        }
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
        visited: Mutex<usize>,
        removed: Mutex<Vec<SessionView>>,
    }

    impl SessionOffload for Recorder {
        fn visit(&self, _v: &SessionView, _now: Timestamp) -> Option<Timestamp> {
            *self.visited.lock().unwrap() += 1;
            *self.seen.lock().unwrap()
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
}
