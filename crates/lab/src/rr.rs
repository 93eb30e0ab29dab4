//! `quicknat-lab rr`: a TCP request/response load tool for the ILA lab, in the manner of
//! netperf TCP_RR with many instances: N connections, each with exactly one fixed-size
//! request in flight; the report gives transactions per second and latency percentiles.
//!
//! Why not sockperf: Debian's sockperf 3.7 keeps 200 connections open with a feed file
//! (`-f`), but its ping-pong client has one message in flight across all of them (22k
//! transactions/s at a 43 us round trip on loopback: throughput x latency = 1), so it
//! cannot measure 200 concurrent transactions.
//!
//! The server echoes whatever it reads; the client times each write-request /
//! read-full-response pair. One thread per connection (blocking sockets, Nagle off), like
//! one netperf process per instance; latencies go into a log-linear histogram (under 2%
//! error), one per thread, merged at the end. Only for lab use: it never sends to an
//! address the operator did not name and always stops after `--seconds`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Subcommand};

/// Arguments of `quicknat-lab rr`.
#[derive(Debug, Args)]
pub struct RrArgs {
    #[command(subcommand)]
    mode: RrMode,
}

/// Server or client.
#[derive(Debug, Subcommand)]
enum RrMode {
    /// Echo every byte received on every accepted connection.
    Server {
        /// Address and port to listen on (IPv4 or [IPv6]:port).
        #[arg(long, value_name = "ADDR:PORT")]
        listen: SocketAddr,
        /// Stop after this many seconds (default: until killed).
        #[arg(long, value_name = "S")]
        seconds: Option<f64>,
    },
    /// Open N connections, keep one request in flight on each, report.
    Client {
        /// Server address and port.
        #[arg(long, value_name = "ADDR:PORT")]
        connect: SocketAddr,
        /// Concurrent connections.
        #[arg(long, value_name = "N", default_value_t = 200)]
        conns: usize,
        /// Request and response size in bytes.
        #[arg(long, value_name = "BYTES", default_value_t = 1)]
        size: usize,
        /// Measurement time in seconds.
        #[arg(long, value_name = "S", default_value_t = 10.0)]
        seconds: f64,
        /// Print JSON instead of one line.
        #[arg(long)]
        json: bool,
    },
}

/// Latency histogram: 32 linear sub-buckets per power of two of nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max_ns: u64,
    sum_ns: u128,
}

/// log2 of the sub-buckets per power of two.
const SUB_BITS: u32 = 5;

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: vec![0; ((64 - SUB_BITS + 1) << SUB_BITS) as usize],
            total: 0,
            max_ns: 0,
            sum_ns: 0,
        }
    }
}

impl Histogram {
    fn index(ns: u64) -> usize {
        if ns < 1 << SUB_BITS {
            return ns as usize;
        }
        let shift = 63 - ns.leading_zeros() - SUB_BITS;
        (((shift + 1) << SUB_BITS) as usize) + ((ns >> shift) as usize - (1 << SUB_BITS))
    }

    /// The smallest value of bucket `i`.
    fn low(i: usize) -> u64 {
        let (group, sub) = ((i >> SUB_BITS) as u32, (i & ((1 << SUB_BITS) - 1)) as u64);
        if group == 0 {
            sub
        } else {
            ((1 << SUB_BITS) + sub) << (group - 1)
        }
    }

    /// Counts one latency.
    pub fn record(&mut self, ns: u64) {
        self.counts[Self::index(ns)] += 1;
        self.total += 1;
        self.max_ns = self.max_ns.max(ns);
        self.sum_ns += u128::from(ns);
    }

    /// Adds `other`'s counts.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.max_ns = self.max_ns.max(other.max_ns);
        self.sum_ns += other.sum_ns;
    }

    /// Values counted.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The `p`-th percentile (0-100) in nanoseconds: the middle of the bucket holding it
    /// (0 when empty).
    pub fn percentile(&self, p: f64) -> u64 {
        let rank = ((p / 100.0) * self.total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if c > 0 && seen >= rank {
                let (lo, hi) = (Self::low(i), Self::low(i + 1));
                return (lo + (hi - lo) / 2).min(self.max_ns);
            }
        }
        0
    }

    /// Mean in nanoseconds.
    pub fn mean(&self) -> u64 {
        if self.total == 0 {
            0
        } else {
            (self.sum_ns / u128::from(self.total)) as u64
        }
    }
}

/// What a client run measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RrReport {
    /// Connections.
    pub conns: usize,
    /// Request/response size in bytes.
    pub size: usize,
    /// Measured seconds.
    pub seconds: f64,
    /// Completed transactions.
    pub transactions: u64,
    /// Transactions per second.
    pub tps: f64,
    /// Latency percentiles and mean, microseconds.
    pub p50_us: f64,
    /// 90th percentile, microseconds.
    pub p90_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// Mean, microseconds.
    pub mean_us: f64,
    /// Connections that failed mid-run.
    pub errors: usize,
}

impl std::fmt::Display for RrReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rr: {} conns x {} B, {:.1} s: {} transactions, {:.0} tps; latency us p50 {:.1} \
             p90 {:.1} p99 {:.1} mean {:.1}; {} connection errors",
            self.conns,
            self.size,
            self.seconds,
            self.transactions,
            self.tps,
            self.p50_us,
            self.p90_us,
            self.p99_us,
            self.mean_us,
            self.errors
        )
    }
}

/// Echoes on every connection accepted on `listener` until `stop` is set.
pub fn serve(listener: TcpListener, stop: &Arc<AtomicBool>) -> anyhow::Result<()> {
    listener.set_nonblocking(true)?;
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((conn, _)) => {
                let stop = Arc::clone(stop);
                std::thread::spawn(move || echo(conn, &stop));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e).context("accept"),
        }
    }
    Ok(())
}

fn echo(mut conn: TcpStream, stop: &AtomicBool) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_nodelay(true);
    let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = [0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        match conn.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if conn.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    }
}

/// Runs `conns` connections to `server` for `seconds`, one `size`-byte request in flight
/// on each, and merges what they measured.
pub fn client(
    server: SocketAddr,
    conns: usize,
    size: usize,
    seconds: f64,
) -> anyhow::Result<RrReport> {
    let mut streams = Vec::with_capacity(conns);
    for i in 0..conns {
        let s = TcpStream::connect_timeout(&server, Duration::from_secs(5))
            .with_context(|| format!("connection {} of {conns} to {server}", i + 1))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        streams.push(s);
    }
    let start_line = Arc::new(Barrier::new(conns + 1));
    let threads: Vec<_> = streams
        .into_iter()
        .map(|mut s| {
            let start_line = Arc::clone(&start_line);
            std::thread::spawn(move || {
                let mut h = Histogram::default();
                let req = vec![0x5a_u8; size];
                let mut resp = vec![0u8; size];
                start_line.wait();
                let end = Instant::now() + Duration::from_secs_f64(seconds);
                loop {
                    let t0 = Instant::now();
                    if t0 >= end {
                        return (h, false);
                    }
                    if s.write_all(&req)
                        .and_then(|()| s.read_exact(&mut resp))
                        .is_err()
                    {
                        return (h, true);
                    }
                    h.record(t0.elapsed().as_nanos() as u64);
                }
            })
        })
        .collect();
    start_line.wait();
    let started = Instant::now();
    let mut all = Histogram::default();
    let mut errors = 0;
    for t in threads {
        let (h, failed) = t
            .join()
            .map_err(|_| anyhow::anyhow!("a client thread panicked"))?;
        all.merge(&h);
        errors += usize::from(failed);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let us = |ns: u64| ns as f64 / 1000.0;
    Ok(RrReport {
        conns,
        size,
        seconds: elapsed,
        transactions: all.total(),
        tps: all.total() as f64 / elapsed,
        p50_us: us(all.percentile(50.0)),
        p90_us: us(all.percentile(90.0)),
        p99_us: us(all.percentile(99.0)),
        mean_us: us(all.mean()),
        errors,
    })
}

/// `quicknat-lab rr server|client`.
pub fn run(args: &RrArgs) -> anyhow::Result<()> {
    match args.mode {
        RrMode::Server { listen, seconds } => {
            let listener =
                TcpListener::bind(listen).with_context(|| format!("listen on {listen}"))?;
            let stop = Arc::new(AtomicBool::new(false));
            for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
                signal_hook::flag::register(sig, Arc::clone(&stop))?;
            }
            if let Some(s) = seconds {
                anyhow::ensure!(s.is_finite() && s > 0.0, "--seconds must be positive");
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_secs_f64(s));
                    stop.store(true, Ordering::Relaxed);
                });
            }
            serve(listener, &stop)
        }
        RrMode::Client {
            connect,
            conns,
            size,
            seconds,
            json,
        } => {
            anyhow::ensure!(
                (1..=10_000).contains(&conns),
                "--conns must be between 1 and 10000"
            );
            anyhow::ensure!(
                (1..=65_536).contains(&size),
                "--size must be between 1 and 65536"
            );
            anyhow::ensure!(
                seconds.is_finite() && seconds > 0.0 && seconds <= 3600.0,
                "--seconds must be between 0 and 3600"
            );
            let report = client(connect, conns, size, seconds)?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                println!("{report}");
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_contiguous_and_tight() {
        for i in 0..((64 - SUB_BITS) << SUB_BITS) as usize {
            assert_eq!(Histogram::index(Histogram::low(i)), i, "bucket {i}");
            assert_eq!(
                Histogram::index(Histogram::low(i + 1) - 1),
                i,
                "end of bucket {i}"
            );
            let (lo, hi) = (Histogram::low(i), Histogram::low(i + 1));
            assert!(hi - lo == 1 || (hi - lo) * 32 <= lo, "bucket {i} too wide");
        }
        assert!(Histogram::index(u64::MAX) < Histogram::default().counts.len());
    }

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut h = Histogram::default();
        for v in 1..=10_000u64 {
            h.record(v * 1000); // 1 us .. 10 ms
        }
        let mut other = Histogram::default();
        other.record(1);
        h.merge(&other);
        assert_eq!(h.total(), 10_001);
        for (p, want) in [
            (50.0, 5_000_000.0),
            (90.0, 9_000_000.0),
            (99.0, 9_900_000.0),
        ] {
            let got = h.percentile(p) as f64;
            assert!((got - want).abs() / want < 0.02, "p{p}: {got} vs {want}");
        }
        assert_eq!(h.percentile(100.0), 10_000_000);
        assert_eq!(Histogram::default().percentile(50.0), 0);
    }

    #[test]
    fn loopback_run_completes_transactions() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let server = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || serve(listener, &stop))
        };
        let r = client(addr, 4, 32, 0.3).unwrap();
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap().unwrap();
        assert_eq!((r.conns, r.errors), (4, 0));
        assert!(r.transactions > 100, "{r}");
        assert!(
            r.p50_us > 0.0 && r.p50_us <= r.p90_us && r.p90_us <= r.p99_us,
            "{r}"
        );
    }
}
