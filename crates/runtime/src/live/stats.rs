//! What a live gateway counts besides the engine: frames in and out per link, frames left
//! to the kernel, next hops missing, offload work; the counter line of the log.

use std::sync::{Arc, Mutex};

use engine::Counters;

/// Counters of the I/O side of one worker (the engine's are separate).
#[derive(Clone, Debug, Default)]
pub struct IoCounters {
    /// Frames received on the inside / outside interface.
    pub rx: [u64; 2],
    /// Frames transmitted on the inside / outside interface.
    pub tx: [u64; 2],
    /// Frames left to the kernel: ARP and neighbour discovery, link-local and multicast,
    /// the gateway's own addresses, and families the mode does not translate on that side.
    pub to_kernel: u64,
    /// Translated packets handed to the kernel because the next hop's MAC was unknown.
    pub via_kernel: u64,
    /// Requests to resolve a next hop skipped because the probe queue was full (the
    /// packet still went to the kernel, which resolves the neighbour itself).
    pub probe_skipped: u64,
    /// Translated packets with no route out of either interface.
    pub no_route: u64,
    /// Frames larger than the MTU (GSO/GRO super-packets): dropped, see the log hint.
    pub oversize: u64,
    /// Partial checksums (offload) completed in software.
    pub csum_completed: u64,
    /// Frames the transmit queue refused.
    pub tx_dropped: u64,
    /// GSO super-packets passed through (virtio-net headers; the kernel segments them).
    pub gso: u64,
    /// Frames with offload work (GSO, partial checksum) that could not pass through: an
    /// unsupported GSO type or layout, or UDP segments too big for the egress. Dropped,
    /// never sent oversized.
    pub gso_refused: u64,
    /// Bytes received on the inside / outside interface (Ethernet frames as received).
    pub rx_bytes: [u64; 2],
    /// Bytes transmitted on the inside / outside interface (Ethernet frames as sent).
    pub tx_bytes: [u64; 2],
    /// Counter snapshots this worker published (about two a second, idle or not): its
    /// heartbeat, which the routing health check reads to tell a stuck worker.
    pub heartbeats: u64,
    /// Frames addressed to another host's MAC (a bridge flooding unknown unicast, a
    /// promiscuous port): dropped by the port, never translated (its addressee does).
    pub not_for_us: u64,
}

impl IoCounters {
    /// Counts a transmission of `len` bytes on interface `out` (or its failure).
    #[inline]
    pub(crate) fn count_sent(&mut self, out: usize, ok: bool, len: usize) {
        if ok {
            self.tx[out] += 1;
            self.tx_bytes[out] += len as u64;
        } else {
            self.tx_dropped += 1;
        }
    }

    pub(crate) fn merge(&mut self, o: &IoCounters) {
        for i in 0..2 {
            self.rx[i] += o.rx[i];
            self.tx[i] += o.tx[i];
            self.rx_bytes[i] += o.rx_bytes[i];
            self.tx_bytes[i] += o.tx_bytes[i];
        }
        self.to_kernel += o.to_kernel;
        self.via_kernel += o.via_kernel;
        self.probe_skipped += o.probe_skipped;
        self.no_route += o.no_route;
        self.oversize += o.oversize;
        self.csum_completed += o.csum_completed;
        self.tx_dropped += o.tx_dropped;
        self.gso += o.gso;
        self.gso_refused += o.gso_refused;
        self.heartbeats += o.heartbeats;
        self.not_for_us += o.not_for_us;
    }
}

/// The summary `run` returns at shutdown.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Engine counters, all workers and the reaper.
    pub engine: Counters,
    /// I/O counters, all workers.
    pub io: IoCounters,
    /// Sessions live at shutdown.
    pub sessions: usize,
}

/// One worker's counters as last published (the engine's and the I/O side's).
pub(crate) type Snapshot = Arc<Mutex<(Counters, IoCounters)>>;

/// The sum of every worker's snapshot and the reaper's counters (sessions expired, early
/// drops, ports given back).
pub(crate) fn totals(snapshots: &[Snapshot], reaper: &Mutex<Counters>) -> (Counters, IoCounters) {
    let (mut e, mut io) = (Counters::default(), IoCounters::default());
    for s in snapshots {
        if let Ok(g) = s.lock() {
            e.merge(&g.0);
            io.merge(&g.1);
        }
    }
    if let Ok(r) = reaper.lock() {
        e.merge(&r);
    }
    (e, io)
}

/// One line of counters for the log.
pub fn stats_line(e: &Counters, io: &IoCounters, sessions: usize) -> String {
    let drops: Vec<String> = e
        .drop_summary()
        .iter()
        .map(|(r, n)| format!("{r}={n}"))
        .collect();
    format!(
        "stats: rx in={} out={} tx in={} out={} forwarded={} sessions={} to_kernel={} via_kernel={} probe_skipped={} no_route={} oversize={} too_big={} icmp_sent={} gso={} gso_refused={} fragmented={} csum_completed={} tx_dropped={} drops[{}] early_dropped={}",
        io.rx[0],
        io.rx[1],
        io.tx[0],
        io.tx[1],
        e.forwarded,
        sessions,
        io.to_kernel,
        io.via_kernel,
        io.probe_skipped,
        io.no_route,
        io.oversize,
        e.dropped(engine::DropReason::TooBig),
        e.icmp_errors_sent,
        io.gso,
        io.gso_refused,
        e.fragmented,
        io.csum_completed,
        io.tx_dropped,
        drops.join(" "),
        // Half-open TCP sessions evicted for new ones at a full table.
        e.sessions_early_dropped
    ) + &not_for_us_suffix(io)
}

/// How evenly the workers shared the frames of one interval: each worker's count (frames
/// received on both interfaces, cumulative) now and at the interval's start. Keeps the
/// counts for the next interval and returns ` worker_rx=a,b,... worker_spread=S`: the
/// frames each worker received in the interval, and the busiest worker's over the
/// idlest's (1.00: even; `inf`: a worker received nothing while another did; `-`: no
/// frames at all).
pub(crate) fn worker_spread(snapshots: &[Snapshot], last: &mut Vec<u64>) -> String {
    let now: Vec<u64> = snapshots
        .iter()
        .map(|s| s.lock().map_or(0, |g| g.1.rx[0] + g.1.rx[1]))
        .collect();
    let deltas: Vec<u64> = now
        .iter()
        .enumerate()
        .map(|(i, n)| n.saturating_sub(last.get(i).copied().unwrap_or(0)))
        .collect();
    *last = now;
    let each: Vec<String> = deltas.iter().map(u64::to_string).collect();
    format!(
        " worker_rx={} worker_spread={}",
        each.join(","),
        spread(&deltas)
    )
}

/// The largest of `counts` over the smallest, to two places (see [`worker_spread`]).
fn spread(counts: &[u64]) -> String {
    let (min, max) = (counts.iter().min(), counts.iter().max());
    match (min, max) {
        (_, None | Some(0)) => "-".to_string(),
        (Some(0), _) => "inf".to_string(),
        (Some(&lo), Some(&hi)) => format!("{:.2}", hi as f64 / lo as f64),
        (None, _) => "-".to_string(),
    }
}

/// ` not_for_us=N` when frames for another host were dropped, else nothing.
fn not_for_us_suffix(io: &IoCounters) -> String {
    if io.not_for_us == 0 {
        return String::new();
    }
    format!(" not_for_us={}", io.not_for_us)
}

#[cfg(test)]
mod tests_early_drop {
    use super::*;

    /// Each interval's frames per worker, and the busiest over the idlest.
    #[test]
    fn the_workers_spread_over_one_interval() {
        let snap = |rx: [u64; 2]| -> Snapshot {
            let io = IoCounters {
                rx,
                ..IoCounters::default()
            };
            Arc::new(Mutex::new((Counters::default(), io)))
        };
        let workers = [snap([0, 0]), snap([0, 0])];
        let mut last = Vec::new();
        assert_eq!(
            worker_spread(&workers, &mut last),
            " worker_rx=0,0 worker_spread=-"
        );
        workers[0].lock().unwrap().1.rx = [100, 50];
        workers[1].lock().unwrap().1.rx = [60, 40];
        assert_eq!(
            worker_spread(&workers, &mut last),
            " worker_rx=150,100 worker_spread=1.50"
        );
        // The next interval counts from there: only worker 1 received.
        workers[1].lock().unwrap().1.rx = [70, 40];
        assert_eq!(
            worker_spread(&workers, &mut last),
            " worker_rx=0,10 worker_spread=inf"
        );
        assert_eq!(spread(&[7]), "1.00");
    }

    /// The early-drop count closes the stats line (appended last so the fields before it
    /// keep their places for whoever parses them).
    #[test]
    fn stats_line_ends_with_the_early_dropped_sessions() {
        let e = Counters {
            sessions_early_dropped: 4242,
            ..Counters::default()
        };
        let line = stats_line(&e, &IoCounters::default(), 7);
        assert!(line.ends_with(" early_dropped=4242"), "{line}");
        let c = Counters::default();
        assert!(stats_line(&c, &IoCounters::default(), 0).ends_with(" early_dropped=0"));
    }
}
