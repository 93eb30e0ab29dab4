//! Timed replay of prepared traffic through N worker threads (pinned to cores when
//! possible), with the reaper running beside them as it would in production.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use conntrack::Timestamp;
use engine::{Direction, Egress, Emit, Frame, Mode, ModeWorker, Output, HEADROOM};

use super::traffic::{verify, Prepared};
use crate::balance::FlowBalancer;
use crate::rss::{Rss, ToeplitzKey};

/// Packets per batch (the unit between quiescent points and clock reads).
pub const BATCH: usize = 32;
/// Receive-ring slots per worker (packets are delivered into them in turn).
const RING_SLOTS: usize = 512;
/// Bytes per ring slot (a full 1518-byte frame fits).
const SLOT_BYTES: usize = 2048;
/// One packet in this many is fully verified during the run.
pub const VERIFY_EVERY: usize = 1024;

/// What the runtime hands a mode's worker besides the packet: the place for packets the
/// mode originates (ICMP errors, fragments) and the links, here without MTUs or addresses
/// (no ICMP errors, nothing too big), as in the timed replay. For the cells that feed a
/// worker packets one at a time from their own buffers.
#[derive(Debug, Default)]
pub struct Driver {
    out: Output,
    egress: Egress,
}

impl Driver {
    /// A driver with an empty output and [`Egress::default`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The packet `buf[start..start + len]` through `w`, as the runtime hands it over:
    /// [`ModeWorker::process`] on a [`Frame`].
    #[inline]
    pub fn process<W: ModeWorker>(
        &mut self,
        w: &mut W,
        now: Timestamp,
        dir: Direction,
        buf: &mut [u8],
        start: usize,
        len: usize,
    ) -> Emit {
        let mut f = Frame::new(buf, start, len, &mut self.out);
        w.process(now, dir, &mut f, &self.egress)
    }

    /// The whole of `pkt` (an IP packet at offset 0, for modes that keep its size).
    #[inline]
    pub fn process_all<W: ModeWorker>(
        &mut self,
        w: &mut W,
        now: Timestamp,
        dir: Direction,
        pkt: &mut [u8],
    ) -> Emit {
        let len = pkt.len();
        self.process(w, now, dir, pkt, 0, len)
    }
}

/// How packets are spread over workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dispatch {
    /// Toeplitz RSS, like a NIC with one queue per worker.
    Rss,
    /// Flow-aware least-loaded placement.
    Balanced,
}

/// What one timed run measured.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Measurement {
    /// Packets processed.
    pub packets: u64,
    /// Of which forwarded.
    pub forwarded: u64,
    /// Wall time, seconds.
    pub seconds: f64,
    /// Million packets per second, all workers.
    pub mpps: f64,
    /// Frame bytes processed per second, in Gbit/s (FCS included).
    pub gbps: f64,
    /// Average frame size.
    pub avg_frame: f64,
    /// Packets handled by each worker.
    pub per_worker: Vec<u64>,
    /// Sampled packets whose translation or checksums were wrong (must be 0).
    pub verify_failures: u64,
    /// Sampled packets verified.
    pub verified: u64,
}

/// One worker's totals: packets, forwarded, frame bytes, verify failures, verified.
type WorkerTotals = (u64, u64, u64, u64, u64);

/// Splits packet indices over workers (only packets travelling `only`, when given).
pub fn assign<M>(
    prep: &Prepared<M>,
    workers: usize,
    dispatch: Dispatch,
    only: Option<Direction>,
) -> Vec<Vec<u32>> {
    let mut out = vec![Vec::new(); workers.max(1)];
    let rss = Rss::new(&ToeplitzKey::MICROSOFT, workers.max(1));
    let mut bal = FlowBalancer::new(Rss::new(&ToeplitzKey::MICROSOFT, workers.max(1)), 1 << 22);
    for (i, p) in prep.packets.iter().enumerate() {
        if only.is_some_and(|d| d != p.dir) {
            continue;
        }
        let bytes = &prep.bytes[p.off as usize..p.off as usize + p.len as usize];
        let q = match dispatch {
            Dispatch::Rss => rss.queue_of(bytes),
            Dispatch::Balanced => bal.queue_of(bytes),
        };
        out[q].push(i as u32);
    }
    out
}

/// Replays `prep` for `duration` on `workers` threads.
pub fn measure<M: Mode>(
    prep: &Prepared<M>,
    workers: usize,
    dispatch: Dispatch,
    duration: Duration,
) -> Measurement {
    measure_only(prep, workers, dispatch, duration, None)
}

/// Replays the packets of `prep` travelling `only` (all of them: `None`) for `duration`
/// on `workers` threads.
pub fn measure_only<M: Mode>(
    prep: &Prepared<M>,
    workers: usize,
    dispatch: Dispatch,
    duration: Duration,
    only: Option<Direction>,
) -> Measurement {
    let parts = assign(prep, workers, dispatch, only);
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(parts.len() + 1));
    let base = Instant::now();
    let clock = move || Timestamp::from_nanos(prep.warm_at + base.elapsed().as_nanos() as u64);
    let (results, seconds): (Vec<WorkerTotals>, f64) = std::thread::scope(|s| {
        let handles: Vec<_> = parts
            .iter()
            .enumerate()
            .map(|(id, idx)| {
                let (stop, barrier) = (Arc::clone(&stop), Arc::clone(&barrier));
                let core = cores.get(id % cores.len().max(1)).copied();
                let shared = &prep.shared;
                s.spawn(move || {
                    if let Some(c) = core {
                        core_affinity::set_for_current(c);
                    }
                    // The worker's packets, laid out in its replay order: the "wire".
                    let mut wire = Vec::new();
                    let mut local = Vec::with_capacity(idx.len());
                    for &i in idx {
                        let p = prep.packets[i as usize];
                        let off = wire.len();
                        wire.extend_from_slice(
                            &prep.bytes[p.off as usize..p.off as usize + p.len as usize],
                        );
                        local.push((off, p));
                    }
                    // A receive ring, as a NIC would fill: each packet is delivered into the
                    // next slot (after the engine's headroom when the mode grows headers).
                    // Only the bytes the engine reads or writes (headers) are copied, except
                    // for the sampled packets, which are delivered whole and verified. The
                    // engine is driven as the runtime drives it: the mode's worker, a frame,
                    // links without MTUs or addresses (no ICMP errors, nothing too big).
                    let head = if shared.in_place() { 0 } else { HEADROOM };
                    let mut ring = vec![0u8; RING_SLOTS * SLOT_BYTES];
                    let mut w = shared.worker(id);
                    let mut extra = Output::new();
                    let egress = Egress::default();
                    let (mut n, mut fwd, mut bytes, mut bad, mut checked) =
                        (0u64, 0u64, 0u64, 0u64, 0u64);
                    barrier.wait();
                    if local.is_empty() {
                        return (0, 0, 0, 0, 0);
                    }
                    let mut at = 0usize;
                    'run: loop {
                        for _ in 0..64 {
                            let now = clock();
                            // A batch as a NIC ring delivers it: every packet in its slot
                            // first, each shown to the mode (`ModeWorker::prefetch`, as the
                            // live worker does), then each processed.
                            let first = n;
                            let from = at;
                            for k in 0..BATCH {
                                let (off, p) = local[at];
                                let slot = ((first as usize + k) % RING_SLOTS) * SLOT_BYTES;
                                let sample = (first as usize + k).is_multiple_of(VERIFY_EVERY);
                                let copy = if sample {
                                    p.len as usize
                                } else {
                                    (p.hdr as usize).min(p.len as usize)
                                };
                                ring[slot + head..slot + head + copy]
                                    .copy_from_slice(&wire[off..off + copy]);
                                w.prefetch(p.dir, &ring[slot + head..slot + head + p.len as usize]);
                                at += 1;
                                if at == local.len() {
                                    at = 0;
                                }
                            }
                            at = from;
                            for _ in 0..BATCH {
                                let (_, p) = local[at];
                                let slot = (n as usize % RING_SLOTS) * SLOT_BYTES;
                                let sample = (n as usize).is_multiple_of(VERIFY_EVERY);
                                let buf = &mut ring[slot..slot + SLOT_BYTES];
                                let mut f = Frame::new(buf, head, p.len as usize, &mut extra);
                                let out = match w.process(now, p.dir, &mut f, &egress) {
                                    Emit::Forward { start, len } => Some((start, len)),
                                    _ => None,
                                };
                                if out.is_some() {
                                    fwd += 1;
                                }
                                if sample {
                                    checked += 1;
                                    let ok = out.is_some_and(|(s, l)| {
                                        verify(&buf[s..s + l], &p, prep.v6_of)
                                    });
                                    if !ok {
                                        bad += 1;
                                    }
                                }
                                bytes += u64::from(p.frame);
                                n += 1;
                                at += 1;
                                if at == local.len() {
                                    at = 0;
                                }
                            }
                            w.quiescent();
                        }
                        if stop.load(Ordering::Relaxed) {
                            break 'run;
                        }
                    }
                    w.offline();
                    (n, fwd, bytes, bad, checked)
                })
            })
            .collect();
        // The reaper, as in production: a sweep a second.
        let reaper = {
            let (stop, shared) = (Arc::clone(&stop), &prep.shared);
            s.spawn(move || {
                let Some(mut reap) = shared.reaper() else {
                    return;
                };
                while !stop.load(Ordering::Relaxed) {
                    reap.handle_timeout(clock());
                    let t = Instant::now();
                    while t.elapsed() < Duration::from_secs(1) && !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            })
        };
        barrier.wait();
        let t0 = Instant::now();
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        let r: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect();
        let _ = reaper.join();
        (r, t0.elapsed().as_secs_f64())
    });
    let workers_r = &results;
    let packets: u64 = workers_r.iter().map(|r| r.0).sum();
    let bytes: u64 = workers_r.iter().map(|r| r.2).sum();
    Measurement {
        packets,
        forwarded: workers_r.iter().map(|r| r.1).sum(),
        seconds,
        mpps: packets as f64 / seconds / 1e6,
        gbps: bytes as f64 * 8.0 / seconds / 1e9,
        avg_frame: if packets > 0 {
            bytes as f64 / packets as f64
        } else {
            0.0
        },
        per_worker: workers_r.iter().map(|r| r.0).collect(),
        verify_failures: workers_r.iter().map(|r| r.3).sum(),
        verified: workers_r.iter().map(|r| r.4).sum(),
    }
}
