//! A single-threaded replay loop for profiling the per-packet path with callgrind or
//! perf: `cargo build --release -p runtime --example hotloop` then
//! `valgrind --tool=callgrind target/release/examples/hotloop 8192 2000000`.

use conntrack::Timestamp;
use runtime::bench::traffic::{prepare, FrameMix};

fn main() {
    let mut args = std::env::args().skip(1);
    let flows: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8192);
    let n: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    let prep = prepare(flows, FrameMix::Fixed(64), 1000, 1);
    let mut w = prep.shared.worker(0);
    let mut buf = prep.bytes.clone();
    let now = Timestamp::from_nanos(prep.warm_at + 1);
    let t0 = std::time::Instant::now();
    let mut fwd = 0u64;
    for i in 0..n {
        let p = prep.packets[i % prep.packets.len()];
        let (o, h) = (p.off as usize, p.hdr as usize);
        buf[o..o + h].copy_from_slice(&prep.bytes[o..o + h]);
        if w.process(now, p.dir, &mut buf[o..o + p.len as usize]) == engine::Verdict::Forward {
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
