//! Prometheus metrics of a live gateway: `[gateway] metrics = "127.0.0.1:9464"` starts a
//! small HTTP/1.1 listener thread serving `GET /metrics` in the OpenMetrics text format
//! (which Prometheus asks for first and also accepts as its text format), built with the
//! `prometheus-client` crate.
//!
//! Three steps, each testable alone:
//! - [`Sources`]: what a running gateway exposes (the workers' counter snapshots, the
//!   mode's shared state, the reaper's lag, the event counters), read into a
//! - [`Sample`]: plain values at one instant (no locks held, nothing shared), turned by
//! - [`collect`] into a `prometheus_client` registry, encoded by [`render`].
//!
//! Adding a gauge family from a new struct (for example the engine's census of sessions
//! by protocol and TCP state) is a field on [`Sample`], one line in [`Sources::sample`]
//! and a function in `collect.rs` called from [`collect`].
//!
//! What this module must never do: block a worker or touch packets. Workers publish
//! their snapshots with `try_lock` twice a second; a scrape holds each snapshot's lock
//! only to copy it. The listener serves one client at a time, with requests capped at
//! [`MAX_REQUEST`] bytes and reads and writes bounded by [`IO_TIMEOUT`].

mod collect;
mod http;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use engine::any::AnyMode;
use engine::Counters;
use engine::TableOccupancy;

use crate::live::IoCounters;

pub use collect::{collect, render};
pub use http::{MetricsListener, CONTENT_TYPE, IO_TIMEOUT, MAX_REQUEST};

/// How late the reaper's full passes run against their schedule, written by the reaper
/// thread and read by a scrape.
#[derive(Debug, Default)]
pub struct ReaperLag {
    /// Nanoseconds the last pass started after it was due.
    last_ns: AtomicU64,
    /// The largest such lag since start.
    max_ns: AtomicU64,
    /// Full passes run.
    passes: AtomicU64,
}

impl ReaperLag {
    /// Records a pass that started `lag` after it was due.
    pub fn record(&self, lag: Duration) {
        let ns = lag.as_nanos().min(u64::MAX as u128) as u64;
        self.last_ns.store(ns, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
        self.passes.fetch_add(1, Ordering::Relaxed);
    }

    /// (last lag, largest lag, passes).
    pub fn load(&self) -> (Duration, Duration, u64) {
        (
            Duration::from_nanos(self.last_ns.load(Ordering::Relaxed)),
            Duration::from_nanos(self.max_ns.load(Ordering::Relaxed)),
            self.passes.load(Ordering::Relaxed),
        )
    }
}

/// What does not change while the gateway runs: exported as `quicknat_build_info` and
/// `quicknat_process_start_time_seconds`.
#[derive(Clone, Debug, PartialEq)]
pub struct BuildInfo {
    /// quicknat's version.
    pub version: &'static str,
    /// The I/O backend in use (`af_xdp` or `af_packet`).
    pub backend: &'static str,
    /// The translation mode (`nat44`, `nat64`, `siit`, `clat`, `ila`).
    pub mode: &'static str,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time: f64,
}

impl BuildInfo {
    /// This build's version, the backend and mode given, started now.
    pub fn now(backend: &'static str, mode: &'static str) -> Self {
        BuildInfo {
            version: env!("CARGO_PKG_VERSION"),
            backend,
            mode,
            start_time: unix_seconds(SystemTime::now()),
        }
    }
}

/// Seconds since the Unix epoch (0 before it).
fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Everything a scrape reads, at one instant: plain values.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    /// Each worker's counters as last published (engine, I/O), in worker order.
    pub workers: Vec<(Counters, IoCounters)>,
    /// The reaper's own counters (expiries), added to the workers' in the totals.
    pub reaper: Counters,
    /// Live sessions (mappings for ILA).
    pub sessions: u64,
    /// The session table's occupancy (stateful modes).
    pub occupancy: Option<TableOccupancy>,
    /// The reaper's lag: last, largest, passes (modes with a reaper).
    pub reaper_lag: Option<(Duration, Duration, u64)>,
    /// NAT event log records sent and dropped.
    pub events: (u64, u64),
    /// Version, backend, mode, start time.
    pub build: Option<BuildInfo>,
    /// Sessions by protocol and TCP state, and bindings (stateful modes; one walk of the
    /// table per scrape, read-only: see `engine::introspect`).
    pub census: Option<engine::introspect::Census>,
    /// Use of each public pool address (NAT44, NAT64).
    pub pool: Vec<engine::introspect::PoolAddrUsage>,
}

impl Sample {
    /// The engine's and I/O counters summed over the workers (and the reaper).
    pub fn totals(&self) -> (Counters, IoCounters) {
        let mut e = self.reaper.clone();
        let mut io = IoCounters::default();
        for (we, wio) in &self.workers {
            e.merge(we);
            io.merge(wio);
        }
        (e, io)
    }
}

/// What a running gateway exposes, by reference (see [`Sources::sample`]).
pub(crate) struct Sources<'a> {
    pub snapshots: &'a [crate::live::Snapshot],
    pub mode: &'a AnyMode,
    pub reaper_lag: Option<&'a ReaperLag>,
    pub reaper_counters: Option<&'a std::sync::Mutex<Counters>>,
    /// The NAT event exporter's counters (`None`: event logging off).
    pub events: Option<&'a crate::natlog::ExportCounters>,
    pub build: &'a BuildInfo,
}

impl Sources<'_> {
    /// Copies every value out; each snapshot's lock is held only for its copy.
    pub fn sample(&self) -> Sample {
        let workers = self
            .snapshots
            .iter()
            .map(|s| s.lock().map(|g| g.clone()).unwrap_or_default())
            .collect();
        let occupancy = self.mode.occupancy();
        // O(1) from the table's counters where there is one; a walk for ILA's mappings.
        let sessions = occupancy.map_or_else(|| self.mode.session_count(), |o| o.live);
        Sample {
            workers,
            reaper: self
                .reaper_counters
                .and_then(|c| c.lock().ok().map(|g| g.clone()))
                .unwrap_or_default(),
            sessions: sessions as u64,
            occupancy,
            // A mode without a reaper never records a pass: no lag to show.
            reaper_lag: self
                .reaper_lag
                .map(ReaperLag::load)
                .filter(|(_, _, passes)| *passes > 0),
            events: self.events.map_or((0, 0), |c| {
                (
                    c.events_sent.load(Ordering::Relaxed),
                    c.events_dropped.load(Ordering::Relaxed),
                )
            }),
            build: Some(self.build.clone()),
            census: occupancy.map(|_| self.mode.census()),
            pool: self.mode.pool_usage(),
        }
    }
}
