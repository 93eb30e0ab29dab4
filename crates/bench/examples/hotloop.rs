//! A single-threaded replay loop for profiling the per-packet path with callgrind or
//! perf: `cargo build --release -p bench --example hotloop` then
//! `valgrind --tool=callgrind target/release/examples/hotloop 8192 2000000 [MODE]`, where
//! MODE is `nat44` (default), `nat64`, `nat64-out`, `nat64-in` or `clat` (the `bench`
//! workloads; `-out`/`-in` replay one direction only), or `nat44-batch` / `nat44-staged`
//! (NAT44 in batches of 32, without / with the staged batch's prefetch hints).

use bench::nat64::{prepare_clat, prepare_nat64};
use bench::traffic::{prepare, FrameMix, Prepared};
use conntrack::Timestamp;
use engine::{Direction, Egress, Frame, Mode, ModeWorker, Output, HEADROOM};

/// Replays `n` packets of `prep` (those travelling `only`, or all) through one worker of
/// the mode; each packet's headers are restored from the pristine copy first, as the
/// benchmark does.
fn replay<M: Mode>(prep: &Prepared<M>, n: usize, only: Option<Direction>) {
    let pkts: Vec<_> = prep
        .packets
        .iter()
        .filter(|p| only.is_none_or(|d| d == p.dir))
        .copied()
        .collect();
    let mut w = prep.shared.worker(0);
    let head = if prep.shared.in_place() { 0 } else { HEADROOM };
    let (mut out, egress) = (Output::new(), Egress::default());
    let mut buf = vec![0u8; 2048];
    let now = Timestamp::from_nanos(prep.warm_at + 1);
    let t0 = std::time::Instant::now();
    let mut fwd = 0u64;
    for i in 0..n {
        let p = pkts[i % pkts.len()];
        let (o, h) = (p.off as usize, p.hdr as usize);
        buf[head..head + h].copy_from_slice(&prep.bytes[o..o + h]);
        let mut f = Frame::new(&mut buf, head, p.len as usize, &mut out);
        if w.process(now, p.dir, &mut f, &egress).is_forward() {
            fwd += 1;
        }
        if i % 32 == 31 {
            w.quiescent();
        }
    }
    let s = t0.elapsed().as_secs_f64();
    println!(
        "{n} packets, {fwd} forwarded, {:.2} Mpps",
        n as f64 / s / 1e6
    );
}

/// Replays `n` packets of `prep` in batches of 32 as a receive ring delivers them: every
/// packet's headers into its own buffer first and, when `staged`, each shown to the
/// worker (`ModeWorker::prefetch`); then each processed. `nat44-batch` and `nat44-staged`
/// differ only in the hints, so their instruction counts (callgrind) give the staging's
/// own cost per packet.
fn replay_batched<M: Mode>(prep: &Prepared<M>, n: usize, staged: bool) {
    const B: usize = 32;
    let pkts = &prep.packets;
    let mut w = prep.shared.worker(0);
    let head = if prep.shared.in_place() { 0 } else { HEADROOM };
    let (mut out, egress) = (Output::new(), Egress::default());
    let mut bufs = vec![vec![0u8; 2048]; B];
    let now = Timestamp::from_nanos(prep.warm_at + 1);
    let t0 = std::time::Instant::now();
    let mut fwd = 0u64;
    let mut i = 0;
    while i < n {
        for (k, buf) in bufs.iter_mut().enumerate() {
            let p = pkts[(i + k) % pkts.len()];
            let (o, h) = (p.off as usize, p.hdr as usize);
            buf[head..head + h].copy_from_slice(&prep.bytes[o..o + h]);
            if staged {
                w.prefetch(p.dir, &buf[head..head + p.len as usize]);
            }
        }
        for (k, buf) in bufs.iter_mut().enumerate() {
            let p = pkts[(i + k) % pkts.len()];
            let mut f = Frame::new(buf, head, p.len as usize, &mut out);
            if w.process(now, p.dir, &mut f, &egress).is_forward() {
                fwd += 1;
            }
        }
        w.quiescent();
        i += B;
    }
    let s = t0.elapsed().as_secs_f64();
    println!(
        "{i} packets, {fwd} forwarded, {:.2} Mpps",
        i as f64 / s / 1e6
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let flows: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8192);
    let n: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    match args.next().as_deref().unwrap_or("nat44") {
        "nat64" => replay(&prepare_nat64(flows, 1), n, None),
        "nat64-out" => replay(&prepare_nat64(flows, 1), n, Some(Direction::Outbound)),
        "nat64-in" => replay(&prepare_nat64(flows, 1), n, Some(Direction::Inbound)),
        "clat" => replay(&prepare_clat(flows), n, None),
        "nat44-batch" => replay_batched(&prepare(flows, FrameMix::Fixed(64), 1000, 1), n, false),
        "nat44-staged" => replay_batched(&prepare(flows, FrameMix::Fixed(64), 1000, 1), n, true),
        _ => replay(&prepare(flows, FrameMix::Fixed(64), 1000, 1), n, None),
    }
}
