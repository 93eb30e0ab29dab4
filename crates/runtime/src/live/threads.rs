//! The gateway's threads, each named for its job, so that `top -H`, `ps -L -o comm`,
//! `perf report --sort comm` and `/proc/PID/task/*/comm` tell an operator which one is
//! busy (a worker, the reaper, the exporter) instead of showing "quicknat" for all of them.
//! Linux keeps the first 15 bytes of a name; every name here fits.
//!
//! A thread that cannot be started (the system is out of threads or memory) stops the
//! gateway instead of panicking: [`Spawner::spawn`] raises `stop`, so the threads already
//! running wind down, and keeps the first failure for [`Spawner::failure`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread::Scope;
use std::time::{Duration, Instant};

/// The routes-and-neighbours follower ([`super::netview::follow`]).
pub(crate) const NETVIEW: &str = "qn-netview";
/// The session reaper (expiry, the evicted-session drain, the fast path's offers).
pub(crate) const REAPER: &str = "qn-reaper";
/// The ILA fast path's periodic sync.
pub(crate) const ILA_SYNC: &str = "qn-ila-sync";
/// SIIT/CLAT: installs the flows the workers hint in the fast path's maps.
pub(crate) const SIIT_SYNC: &str = "qn-siit-sync";
/// The AF_PACKET flow placement's sweeper (forgets idle flows).
pub(crate) const PLACEMENT: &str = "qn-placement";
/// The `/metrics` listener.
pub(crate) const METRICS: &str = "qn-metrics";
/// The NAT event exporter (RFC 8158).
pub(crate) const NATLOG: &str = "qn-natlog";
/// The exporter's periodic counters line.
pub(crate) const NATLOG_STATS: &str = "qn-natlog-stats";
/// The route announcer's health loop.
pub(crate) const ROUTING: &str = "qn-routing";
/// The control socket's listener ([`crate::control`]).
pub(crate) const CONTROL: &str = "qn-control";
/// One connected control client's thread.
pub(crate) const CONTROL_CLIENT: &str = "qn-ctl-client";

/// Calls `f` every `interval` until `stop` is raised (looked at every 100 ms, so a
/// periodic thread ends promptly): the loop of the gateway's periodic threads.
pub(crate) fn every(stop: &AtomicBool, interval: Duration, mut f: impl FnMut()) {
    let mut last = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if last.elapsed() >= interval {
            last = Instant::now();
            f();
        }
    }
}

/// Worker `id`'s thread name: `qn-worker-<id>`.
pub(crate) fn worker(id: usize) -> String {
    format!("qn-worker-{id}")
}

/// Starts named threads in one scope; see the module's documentation.
pub(crate) struct Spawner<'scope, 'env, 'a> {
    scope: &'scope Scope<'scope, 'env>,
    stop: &'a AtomicBool,
    failed: Mutex<Option<(String, std::io::Error)>>,
}

impl<'scope, 'env, 'a> Spawner<'scope, 'env, 'a> {
    /// A spawner for `scope` that raises `stop` when a thread cannot be started.
    pub(crate) fn new(scope: &'scope Scope<'scope, 'env>, stop: &'a AtomicBool) -> Self {
        Spawner {
            scope,
            stop,
            failed: Mutex::new(None),
        }
    }

    /// Runs `f` on a new thread called `name`; on failure, raises `stop` and keeps the
    /// error (the first one) for [`Spawner::failure`].
    pub(crate) fn spawn(&self, name: impl Into<String>, f: impl FnOnce() + Send + 'scope) {
        self.start(std::thread::Builder::new(), name.into(), f);
    }

    fn start(&self, builder: std::thread::Builder, name: String, f: impl FnOnce() + Send + 'scope) {
        let started = builder.name(name.clone()).spawn_scoped(self.scope, f);
        if let Err(e) = started {
            self.stop.store(true, Ordering::Relaxed);
            let mut first = self.failed.lock().unwrap_or_else(|p| p.into_inner());
            first.get_or_insert((name, e));
        }
    }

    /// The first thread that could not be started, and why.
    pub(crate) fn failure(self) -> Option<(String, std::io::Error)> {
        self.failed.into_inner().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the kernel shows for a thread: its `comm`.
    fn comm() -> String {
        std::fs::read_to_string("/proc/thread-self/comm")
            .unwrap()
            .trim_end()
            .to_string()
    }

    #[test]
    fn threads_carry_their_names_and_every_name_fits_the_kernels_15_bytes() {
        let stop = AtomicBool::new(false);
        let names = [
            NETVIEW,
            REAPER,
            ILA_SYNC,
            SIIT_SYNC,
            METRICS,
            NATLOG,
            NATLOG_STATS,
            ROUTING,
            CONTROL,
            CONTROL_CLIENT,
            &worker(0),
            &worker(63),
        ]
        .map(str::to_string);
        let seen = Mutex::new(Vec::new());
        let failure = std::thread::scope(|s| {
            let sp = Spawner::new(s, &stop);
            for n in &names {
                let seen = &seen;
                sp.spawn(n.clone(), move || seen.lock().unwrap().push(comm()));
            }
            sp.failure()
        });
        assert!(failure.is_none());
        assert!(!stop.load(Ordering::Relaxed));
        let mut seen = seen.into_inner().unwrap();
        let mut want = names.to_vec();
        seen.sort();
        want.sort();
        // Linux truncates a longer name to 15 bytes: equal means none was cut.
        assert_eq!(seen, want);
    }

    #[test]
    fn a_thread_that_cannot_start_raises_stop_and_is_reported() {
        let stop = AtomicBool::new(false);
        // A stack larger than the address space: pthread_create's mmap fails (EAGAIN),
        // whatever the overcommit policy.
        let huge = std::thread::Builder::new().stack_size(1 << 62);
        let failure = std::thread::scope(|s| {
            let sp = Spawner::new(s, &stop);
            sp.start(huge, "qn-too-big".into(), || {});
            sp.spawn(REAPER, || {});
            sp.failure()
        });
        let (name, e) = failure.expect("the thread that did not start is reported");
        assert_eq!(name, "qn-too-big");
        assert!(e.raw_os_error().is_some(), "{e}");
        assert!(stop.load(Ordering::Relaxed));
    }
}
