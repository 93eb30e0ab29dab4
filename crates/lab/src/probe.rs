//! The attack lab's measuring tools, run inside the lab's namespaces as `quicknat-lab
//! probe ...`:
//!
//! - `probe send` / `probe recv`: a steady UDP stream with sequence numbers (1 kHz by
//!   default) and its receiver, which reports each arrival's sequence number and wall-clock
//!   time (milliseconds since the Unix epoch: the one clock every process on the machine
//!   shares), so the lab can find the gap around a link flap or a gateway restart;
//! - `probe connect`: a legitimate client opening TCP connections one after another, each
//!   with a timeout, and echoing one byte over it;
//! - `probe hosts`: N inside hosts (consecutive source addresses), each opening one TCP
//!   connection at the same moment.
//!
//! A connection counts as a success only when a byte went through it and came back (the
//! servers are `quicknat-lab rr server`, which echo). Lab equipment only.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::{Args, Subcommand};

/// Arguments of `quicknat-lab probe`.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    #[command(subcommand)]
    mode: ProbeMode,
}

#[derive(Debug, Subcommand)]
enum ProbeMode {
    /// Send UDP datagrams carrying a sequence number at a steady rate.
    Send {
        /// Destination.
        #[arg(long, value_name = "IP:PORT")]
        dst: SocketAddrV4,
        /// Datagrams per second.
        #[arg(long, default_value_t = 1000)]
        pps: u32,
        /// Seconds.
        #[arg(long)]
        seconds: f64,
    },
    /// Receive the stream; print each arrival (sequence number, ms since the epoch).
    Recv {
        /// Address and port to listen on.
        #[arg(long, value_name = "IP:PORT")]
        listen: SocketAddrV4,
        /// Seconds.
        #[arg(long)]
        seconds: f64,
    },
    /// Open TCP connections one after another; report attempts and successes.
    Connect {
        /// Server.
        #[arg(long, value_name = "IP:PORT")]
        dst: SocketAddrV4,
        /// Seconds to keep trying.
        #[arg(long)]
        seconds: f64,
        /// Time allowed for each connection (connect plus one echoed byte), ms.
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
        /// Start a connection every this many ms (or right after the last one ends).
        #[arg(long, default_value_t = 20)]
        interval_ms: u64,
    },
    /// Open one TCP connection from each of `count` consecutive source addresses at once.
    Hosts {
        /// Server.
        #[arg(long, value_name = "IP:PORT")]
        dst: SocketAddrV4,
        /// The first source address.
        #[arg(long)]
        first: Ipv4Addr,
        /// How many hosts.
        #[arg(long)]
        count: u32,
        /// Time allowed for each connection (connect plus one echoed byte), ms.
        #[arg(long, default_value_t = 3000)]
        timeout_ms: u64,
    },
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// What `probe connect` and `probe hosts` report.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ConnectReport {
    /// Connections tried.
    pub attempts: u64,
    /// Connections that carried a byte there and back.
    pub ok: u64,
}

/// One connection: connect, send a byte, read it back, all within `timeout`.
fn one_connection(src: Option<Ipv4Addr>, dst: SocketAddrV4, timeout: Duration) -> bool {
    let t0 = Instant::now();
    let attempt = || -> std::io::Result<()> {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        if let Some(a) = src {
            s.bind(&SocketAddr::V4(SocketAddrV4::new(a, 0)).into())?;
        }
        s.connect_timeout(&SocketAddr::V4(dst).into(), timeout)?;
        let mut c: TcpStream = s.into();
        let left = timeout
            .saturating_sub(t0.elapsed())
            .max(Duration::from_millis(1));
        c.set_read_timeout(Some(left))?;
        c.set_nodelay(true)?;
        c.write_all(b"q")?;
        let mut b = [0u8; 1];
        c.read_exact(&mut b)?;
        Ok(())
    };
    attempt().is_ok() && t0.elapsed() <= timeout + Duration::from_millis(50)
}

/// `probe connect`.
fn connect_loop(
    dst: SocketAddrV4,
    seconds: f64,
    timeout: Duration,
    interval: Duration,
) -> ConnectReport {
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(seconds);
    let mut r = ConnectReport::default();
    let mut next = start;
    while Instant::now() < end {
        r.attempts += 1;
        if one_connection(None, dst, timeout) {
            r.ok += 1;
        }
        next += interval;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    r
}

/// `probe hosts`.
fn hosts(dst: SocketAddrV4, first: Ipv4Addr, count: u32, timeout: Duration) -> ConnectReport {
    let threads: Vec<_> = (0..count)
        .map(|i| {
            let src = Ipv4Addr::from(u32::from(first).wrapping_add(i));
            std::thread::spawn(move || one_connection(Some(src), dst, timeout))
        })
        .collect();
    let ok = threads
        .into_iter()
        .map(|t| t.join().unwrap_or(false))
        .filter(|ok| *ok)
        .count() as u64;
    ConnectReport {
        attempts: u64::from(count),
        ok,
    }
}

/// What `probe recv` reports.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Arrivals {
    /// (sequence number, ms since the epoch) per datagram, in arrival order.
    pub arrivals: Vec<(u64, f64)>,
}

/// What the lab makes of a probe run around one event.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Outage {
    /// Datagrams sent.
    pub sent: u64,
    /// Distinct datagrams received.
    pub received: u64,
    /// `sent - received`.
    pub lost: u64,
    /// Longest time between two consecutive arrivals, ms.
    pub longest_gap_ms: f64,
    /// From the event to the first arrival after it, ms (`None`: nothing arrived after it).
    pub recovered_after_ms: Option<f64>,
}

impl Arrivals {
    /// The outage around `event_ms`, given how many datagrams were `sent`.
    pub fn outage(&self, sent: u64, event_ms: f64) -> Outage {
        let mut seqs: Vec<u64> = self.arrivals.iter().map(|a| a.0).collect();
        seqs.sort_unstable();
        seqs.dedup();
        let received = seqs.len() as u64;
        let longest_gap_ms = self
            .arrivals
            .windows(2)
            .map(|w| w[1].1 - w[0].1)
            .fold(0.0, f64::max);
        let recovered_after_ms = self
            .arrivals
            .iter()
            .find(|a| a.1 >= event_ms)
            .map(|a| a.1 - event_ms);
        Outage {
            sent,
            received,
            lost: sent.saturating_sub(received),
            longest_gap_ms,
            recovered_after_ms,
        }
    }
}

fn send(dst: SocketAddrV4, pps: u32, seconds: f64) -> anyhow::Result<u64> {
    anyhow::ensure!((1..=100_000).contains(&pps), "--pps must be 1-100000");
    let s = UdpSocket::bind("0.0.0.0:0")?;
    s.connect(dst)?;
    s.set_nonblocking(true)?;
    let start = Instant::now();
    let period = Duration::from_secs_f64(1.0 / f64::from(pps));
    let n = (seconds * f64::from(pps)).round() as u64;
    for seq in 0..n {
        let at = start + period * seq as u32;
        let now = Instant::now();
        if at > now {
            std::thread::sleep(at - now);
        }
        // A send refused (e.g. the route is gone for a moment) is a datagram lost.
        let _ = s.send(&seq.to_be_bytes());
    }
    Ok(n)
}

fn recv(listen: SocketAddrV4, seconds: f64) -> anyhow::Result<Arrivals> {
    let s = UdpSocket::bind(listen).with_context(|| format!("binding {listen}"))?;
    s.set_read_timeout(Some(Duration::from_millis(20)))?;
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut a = Arrivals::default();
    let mut buf = [0u8; 64];
    while Instant::now() < end {
        match s.recv(&mut buf) {
            Ok(8) => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&buf[..8]);
                a.arrivals.push((u64::from_be_bytes(b), now_ms()));
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e).context("probe recv"),
        }
    }
    Ok(a)
}

/// `quicknat-lab probe ...`: prints one JSON line.
pub fn run(args: &ProbeArgs) -> anyhow::Result<()> {
    let secs_ok = |s: f64| s.is_finite() && s > 0.0 && s <= 3600.0;
    match args.mode {
        ProbeMode::Send { dst, pps, seconds } => {
            anyhow::ensure!(secs_ok(seconds), "--seconds must be between 0 and 3600");
            let sent = send(dst, pps, seconds)?;
            println!("{{\"sent\":{sent}}}");
        }
        ProbeMode::Recv { listen, seconds } => {
            anyhow::ensure!(secs_ok(seconds), "--seconds must be between 0 and 3600");
            println!("{}", serde_json::to_string(&recv(listen, seconds)?)?);
        }
        ProbeMode::Connect {
            dst,
            seconds,
            timeout_ms,
            interval_ms,
        } => {
            anyhow::ensure!(secs_ok(seconds), "--seconds must be between 0 and 3600");
            let r = connect_loop(
                dst,
                seconds,
                Duration::from_millis(timeout_ms.clamp(1, 60_000)),
                Duration::from_millis(interval_ms.min(60_000)),
            );
            println!("{}", serde_json::to_string(&r)?);
        }
        ProbeMode::Hosts {
            dst,
            first,
            count,
            timeout_ms,
        } => {
            anyhow::ensure!((1..=1000).contains(&count), "--count must be 1-1000");
            let r = hosts(
                dst,
                first,
                count,
                Duration::from_millis(timeout_ms.clamp(1, 60_000)),
            );
            println!("{}", serde_json::to_string(&r)?);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outage_counts_the_gap_and_the_recovery() {
        // 1 kHz, seq 0..=99 arrive, 100..=349 are lost (250 ms), 350..=499 arrive.
        let arrivals = (0..100u64)
            .chain(350..500)
            .map(|s| (s, 1_000.0 + s as f64))
            .collect();
        let a = Arrivals { arrivals };
        let o = a.outage(500, 1_200.0);
        assert_eq!((o.sent, o.received, o.lost), (500, 250, 250));
        assert_eq!(o.longest_gap_ms, 251.0);
        assert_eq!(o.recovered_after_ms, Some(150.0));
        // Duplicates count once; nothing after the event: no recovery.
        let a = Arrivals {
            arrivals: vec![(1, 1.0), (1, 2.0), (2, 3.0)],
        };
        let o = a.outage(10, 5.0);
        assert_eq!((o.received, o.lost, o.recovered_after_ms), (2, 8, None));
    }

    #[test]
    fn connections_succeed_only_with_an_echo() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let SocketAddr::V4(addr) = l.local_addr().unwrap() else {
            unreachable!()
        };
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let server = {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || crate::rr::serve(l, &stop))
        };
        let r = hosts(addr, Ipv4Addr::LOCALHOST, 3, Duration::from_secs(5));
        assert_eq!(r, ConnectReport { attempts: 3, ok: 3 });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        server.join().unwrap().unwrap();
        // A listener that never answers: the byte never comes back.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let SocketAddr::V4(addr) = silent.local_addr().unwrap() else {
            unreachable!()
        };
        assert!(!one_connection(None, addr, Duration::from_millis(200)));
    }
}
