//! Whether the gateway forwards: the decision behind announcing or withdrawing, pure
//! (inputs passed in, time passed in) so every case is tested without a network.
//!
//! Unhealthy when
//! - the inside or outside interface is not operationally up (`IFF_UP` and
//!   `IFF_RUNNING`: set down, carrier lost, a veth's peer down) — a router would keep
//!   sending traffic that cannot leave;
//! - a worker published no counters for [`WORKER_STALL`]: workers publish a heartbeat
//!   with their counters about twice a second even when idle (they wake every 50 ms),
//!   so a silent worker is stuck (a loop, a lock, a dead thread) and its share of the
//!   traffic is lost. No per-packet work: the heartbeat is counted per publication.

use std::time::{Duration, Instant};

/// How long a worker may publish no heartbeat before the gateway counts as not
/// forwarding: four missed half-second publications.
pub const WORKER_STALL: Duration = Duration::from_secs(2);

/// Why the gateway does not forward.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unhealthy {
    /// An interface is down (or could not be read).
    LinkDown {
        /// "inside" or "outside".
        side: &'static str,
        /// The interface.
        name: String,
        /// What was seen ("down", or the error).
        what: String,
    },
    /// A worker stopped publishing its heartbeat.
    WorkerStalled {
        /// The worker.
        id: usize,
        /// For how long.
        silent: Duration,
    },
    /// An operator asked to move the traffic away (`quicknat drain`).
    Draining,
}

impl std::fmt::Display for Unhealthy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unhealthy::LinkDown { side, name, what } => {
                write!(f, "{side} interface {name} {what}")
            }
            Unhealthy::WorkerStalled { id, silent } => write!(
                f,
                "worker {id} made no progress for {:.1} s",
                silent.as_secs_f64()
            ),
            Unhealthy::Draining => write!(f, "draining (quicknat drain)"),
        }
    }
}

/// The health check's memory: each worker's last heartbeat and when it changed.
#[derive(Debug)]
pub struct Health {
    beats: Vec<(u64, Instant)>,
    stall_after: Duration,
}

impl Health {
    /// A check of `workers` workers, started at `now` (a worker has [`WORKER_STALL`]
    /// from then to publish its first heartbeat).
    pub fn new(workers: usize, now: Instant) -> Health {
        Health {
            beats: vec![(0, now); workers],
            stall_after: WORKER_STALL,
        }
    }

    /// The same with another stall limit (tests).
    pub fn with_stall_after(mut self, d: Duration) -> Health {
        self.stall_after = d;
        self
    }

    /// The verdict at `now`, given the links' state (inside, outside: name and whether
    /// operationally up, or the error reading it) and each worker's heartbeat count.
    /// The first problem found is the reason; links first (the likelier operator cause).
    pub fn check(
        &mut self,
        now: Instant,
        links: [(&str, Result<bool, String>); 2],
        beats: &[u64],
    ) -> Result<(), Unhealthy> {
        let mut verdict = Ok(());
        for (side, (name, up)) in ["inside", "outside"].into_iter().zip(links) {
            let what = match up {
                Ok(true) => continue,
                Ok(false) => "down".to_owned(),
                Err(e) => format!("unreadable ({e})"),
            };
            if verdict.is_ok() {
                verdict = Err(Unhealthy::LinkDown {
                    side,
                    name: name.to_owned(),
                    what,
                });
            }
        }
        // Every worker's heartbeat is followed even when a link is down, so a worker's
        // silence is timed from its last beat, not from when the link came back.
        for (id, (seen, &beat)) in self.beats.iter_mut().zip(beats).enumerate() {
            if beat != seen.0 {
                *seen = (beat, now);
            } else {
                let silent = now.saturating_duration_since(seen.1);
                if silent >= self.stall_after && verdict.is_ok() {
                    verdict = Err(Unhealthy::WorkerStalled { id, silent });
                }
            }
        }
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UP: [(&str, Result<bool, String>); 2] = [("in0", Ok(true)), ("out0", Ok(true))];

    #[test]
    fn links_up_and_workers_beating_is_healthy() {
        let t0 = Instant::now();
        let mut h = Health::new(2, t0);
        for i in 1..10u64 {
            let now = t0 + Duration::from_millis(500 * i);
            assert_eq!(h.check(now, UP, &[i, i]), Ok(()));
        }
    }

    #[test]
    fn a_link_down_is_unhealthy_and_named() {
        let t0 = Instant::now();
        let mut h = Health::new(1, t0);
        let down = [("in0", Ok(true)), ("out0", Ok(false))];
        let e = h.check(t0, down, &[0]).unwrap_err();
        assert_eq!(e.to_string(), "outside interface out0 down");
        let gone = [
            ("in0", Err("no such device".to_owned())),
            ("out0", Ok(false)),
        ];
        let e = h.check(t0, gone, &[0]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "inside interface in0 unreadable (no such device)"
        );
        assert_eq!(h.check(t0, UP, &[0]), Ok(()), "up again: healthy again");
    }

    #[test]
    fn a_silent_worker_is_unhealthy_after_the_stall_limit_and_healthy_once_it_beats() {
        let t0 = Instant::now();
        let mut h = Health::new(2, t0);
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(h.check(at(500), UP, &[1, 1]), Ok(()));
        // Worker 1 goes silent at 500 ms; worker 0 keeps beating.
        assert_eq!(h.check(at(2_400), UP, &[5, 1]), Ok(()), "1.9 s: not yet");
        let e = h.check(at(2_500), UP, &[6, 1]).unwrap_err();
        assert_eq!(
            e,
            Unhealthy::WorkerStalled {
                id: 1,
                silent: Duration::from_secs(2)
            }
        );
        assert_eq!(e.to_string(), "worker 1 made no progress for 2.0 s");
        assert_eq!(h.check(at(2_600), UP, &[7, 2]), Ok(()), "it beat again");
    }

    #[test]
    fn a_worker_that_never_beats_is_stalled_the_stall_limit_after_start() {
        let t0 = Instant::now();
        let mut h = Health::new(1, t0).with_stall_after(Duration::from_millis(300));
        assert_eq!(h.check(t0 + Duration::from_millis(200), UP, &[0]), Ok(()));
        assert!(h.check(t0 + Duration::from_millis(300), UP, &[0]).is_err());
    }

    #[test]
    fn a_link_down_is_the_reason_given_before_a_stall() {
        let t0 = Instant::now();
        let mut h = Health::new(1, t0);
        let down = [("in0", Ok(false)), ("out0", Ok(true))];
        let e = h
            .check(t0 + Duration::from_secs(5), down, &[0])
            .unwrap_err();
        assert!(
            matches!(e, Unhealthy::LinkDown { side: "inside", .. }),
            "{e}"
        );
    }
}
