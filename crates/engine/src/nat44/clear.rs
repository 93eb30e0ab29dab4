//! Ending sessions on an operator's request (`quicknat sessions clear`). The control
//! thread picks them with the same walk and filter as `sessions` (reading only); the
//! reaper ends them on its next pass exactly as it ends timed-out ones: marked dead,
//! their binding references and permits released, NAT events logged from the reaper's
//! own ring, and a binding left without sessions unlinked and its port given back to
//! the pool (after `port_reuse_hold`). Only the reaper writes the reaper's ring, so the
//! control thread never ends a session itself.

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use conntrack::{SessionView, Timestamp, Tuple};

use super::census::Addressing;
use super::Nat44Shared;
use crate::introspect::SessionFilter;

/// How long a request waits for the reaper's pass (it runs every few hundred
/// milliseconds while the gateway runs).
pub const CLEAR_WAIT: Duration = Duration::from_secs(5);

/// Sessions to end, named by their initial tuple (a slot freed and taken again in
/// between holds another tuple, and is left alone), and where to say how many ended.
#[derive(Debug)]
pub(crate) struct ClearJob {
    tuples: HashSet<Tuple>,
    done: mpsc::SyncSender<usize>,
}

/// The requests waiting for the reaper.
#[derive(Debug, Default)]
pub(crate) struct Clears(Mutex<Vec<ClearJob>>);

impl Clears {
    fn submit(&self, tuples: HashSet<Tuple>) -> mpsc::Receiver<usize> {
        let (done, rx) = mpsc::sync_channel(1);
        let mut q = self.0.lock().unwrap_or_else(|e| e.into_inner());
        q.push(ClearJob { tuples, done });
        rx
    }

    /// The waiting requests' tuples, merged (`None`: none waits), and the requests, to
    /// be told with [`ClearPass::finish`].
    pub(crate) fn take(&self) -> Option<ClearPass> {
        let jobs = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        (!jobs.is_empty()).then(|| ClearPass {
            ended: vec![Cell::new(0); jobs.len()],
            jobs,
        })
    }
}

/// One reaper pass's share of the requests.
#[derive(Debug)]
pub(crate) struct ClearPass {
    jobs: Vec<ClearJob>,
    ended: Vec<Cell<usize>>,
}

impl ClearPass {
    /// Whether a request names `v`.
    pub(crate) fn wants(&self, v: &SessionView) -> bool {
        self.jobs.iter().any(|j| j.tuples.contains(&v.initial))
    }

    /// `v` was ended by this pass: counted for every request that named it.
    pub(crate) fn ended(&self, v: &SessionView) {
        for (j, n) in self.jobs.iter().zip(&self.ended) {
            if j.tuples.contains(&v.initial) {
                n.set(n.get() + 1);
            }
        }
    }

    /// Tells each request how many of its sessions this pass ended (a request whose
    /// asker stopped waiting is dropped).
    pub(crate) fn finish(self) {
        for (j, n) in self.jobs.into_iter().zip(self.ended) {
            let _ = j.done.try_send(n.get());
        }
    }
}

/// Why sessions were not cleared.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ClearError {
    /// The reaper did not take the request in time (it runs only in a live gateway).
    #[error("the reaper did not end the sessions within {0:?} (is the gateway running?)")]
    NoReaper(Duration),
}

impl Nat44Shared {
    /// The live sessions passing `filter` (as `sessions` lists them); unless `dry_run`,
    /// ended by the reaper's next pass, waited for at most `wait`. Returns how many
    /// matched (`dry_run`) or were ended (a session may end by itself in between).
    pub(crate) fn end_sessions(
        &self,
        now: Timestamp,
        filter: &SessionFilter,
        addr: &dyn Addressing,
        dry_run: bool,
        wait: Duration,
    ) -> Result<usize, ClearError> {
        let mut tuples = HashSet::new();
        let n = self.matching_sessions(now, filter, addr, &mut |v, _| {
            if !dry_run {
                tuples.insert(v.initial);
            }
            true
        });
        if dry_run || n == 0 {
            return Ok(n);
        }
        self.clears
            .submit(tuples)
            .recv_timeout(wait)
            .map_err(|_| ClearError::NoReaper(wait))
    }
}
