//! `quicknat-lab gen`: a small-packet UDP traffic generator and a counting sink, for the lab.
//!
//! [`run`] offers UDP datagrams (64-byte Ethernet frames with the default 18-byte
//! payload over IPv4; 84-byte over IPv6) to one IPv4 or IPv6 destination from `flows` distinct source ports: one connected
//! UDP socket per flow, bound to `src_ip:0` so the kernel picks each ephemeral
//! port. Datagrams leave in `sendmmsg` batches, one socket per call, cycling the
//! sockets round robin between calls. An optional token bucket paces the batches.
//! `recv_count` is the matching sink: it counts what arrives (`recvmmsg`); only the
//! tests use it (the lab's sinks drop at ingress with nftables, which costs nothing).
//! The batched calls are `io::udp`'s, the open-file limit and the tests' namespace
//! entry `io::host`'s: this crate has no `unsafe` of its own.
//!
//! This module is lab equipment: it never parses packets, knows nothing of NAT and must
//! never be used on the data path.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ::io::host;
use ::io::udp::SendBatch;
use socket2::{Domain, Protocol, Socket, Type};

/// Most flows (sockets, source ports) one generator opens.
pub const MAX_FLOWS: u16 = 4096;
/// Largest UDP payload over IPv4 (65535 - 20 - 8).
pub const MAX_PAYLOAD: usize = 65_507;
/// Largest `sendmmsg` batch (the kernel's UIO_MAXIOV).
pub const MAX_BATCH: usize = ::io::udp::MAX_BATCH;
/// The payload that makes 64-byte Ethernet frames (14 + 20 + 8 + 18 + 4 FCS).
pub const PAYLOAD_64B_FRAME: usize = 18;
/// The default `sendmmsg` batch.
pub const DEFAULT_BATCH: usize = 64;
/// Below this rate the pacer sleeps between batches; at or above it, it spins and yields.
const SLEEP_BELOW_PPS: u64 = 50_000;

/// What to send, where, how fast and for how long.
#[derive(Debug, Clone)]
pub struct GenConfig {
    /// Destination address and port (IPv4 or IPv6).
    pub dst: SocketAddr,
    /// Local address to bind the sockets to, of the destination's family (`None`: any,
    /// the kernel chooses).
    pub src_ip: Option<IpAddr>,
    /// Distinct source ports (one socket each), 1..=4096, used round robin.
    pub flows: u16,
    /// Bytes of UDP payload; 18 gives 64-byte Ethernet frames.
    pub payload: usize,
    /// Offered rate in packets per second (`None`: as fast as possible).
    pub rate_pps: Option<u64>,
    /// How long to send.
    pub duration: Duration,
    /// Datagrams per `sendmmsg` call, 1..=1024.
    pub batch: usize,
    /// The first source port: flow `i` sends from `src_port + i`, so two runs send on the
    /// same flows (the NAT44 lab's XDP fast-path arm warms them up first). `None`: the
    /// kernel picks ephemeral ports.
    pub src_port: Option<u16>,
}

impl GenConfig {
    /// A one-flow, 64-byte-frame, unpaced, one-second configuration towards `dst`.
    pub fn new(dst: impl Into<SocketAddr>) -> GenConfig {
        GenConfig {
            dst: dst.into(),
            src_ip: None,
            flows: 1,
            payload: PAYLOAD_64B_FRAME,
            rate_pps: None,
            duration: Duration::from_secs(1),
            batch: DEFAULT_BATCH,
            src_port: None,
        }
    }

    /// Checks every field's range; the message names the field and its limits.
    pub fn validate(&self) -> io::Result<()> {
        let bad = |msg: String| Err(io::Error::new(io::ErrorKind::InvalidInput, msg));
        if self.dst.ip().is_unspecified() || self.dst.port() == 0 {
            return bad(format!(
                "gen: destination {} must have an address and a non-zero port",
                self.dst
            ));
        }
        if let Some(p) = self.src_port {
            if p == 0 || u32::from(p) + u32::from(self.flows) > 65_536 {
                return bad(format!(
                    "gen: source ports {p}..{p}+{} must lie in 1..=65535",
                    self.flows
                ));
            }
        }
        if !(1..=MAX_FLOWS).contains(&self.flows) {
            return bad(format!(
                "gen: flows {} out of range 1..={MAX_FLOWS}",
                self.flows
            ));
        }
        if self.payload > MAX_PAYLOAD {
            return bad(format!(
                "gen: payload {} bytes exceeds {MAX_PAYLOAD}",
                self.payload
            ));
        }
        if !(1..=MAX_BATCH).contains(&self.batch) {
            return bad(format!(
                "gen: batch {} out of range 1..={MAX_BATCH}",
                self.batch
            ));
        }
        if self
            .src_ip
            .is_some_and(|s| s.is_ipv4() != self.dst.is_ipv4())
        {
            return bad(format!(
                "gen: source {:?} and destination {} are of different IP versions",
                self.src_ip, self.dst
            ));
        }
        if self.rate_pps == Some(0) {
            return bad("gen: rate must be at least 1 packet per second".to_owned());
        }
        Ok(())
    }
}

/// What a generator run did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GenReport {
    /// Datagrams the kernel accepted.
    pub sent: u64,
    /// Datagrams offered but refused (ENOBUFS, EAGAIN, ECONNREFUSED, ...).
    pub failed: u64,
    /// Wall-clock seconds from the first send to the end.
    pub seconds: f64,
    /// `sent / seconds`.
    pub pps: f64,
}

impl std::fmt::Display for GenReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "sent {} failed {} in {:.3} s: {:.0} pps",
            self.sent, self.failed, self.seconds, self.pps
        )
    }
}

impl GenReport {
    /// The report as one JSON object.
    pub fn to_json(self) -> String {
        format!(
            "{{\"sent\":{},\"failed\":{},\"seconds\":{:.6},\"pps\":{:.1}}}",
            self.sent, self.failed, self.seconds, self.pps
        )
    }
}

/// A token bucket checked once per batch. Time is an argument, so it is testable.
#[derive(Debug)]
pub(crate) struct Pacer {
    rate: f64,
    tokens: f64,
    /// Tokens never exceed this, so a stall does not turn into a burst.
    depth: f64,
    /// Tokens a batch waits for: about 1 ms of traffic, 1..=batch.
    want: f64,
    last: Instant,
}

impl Pacer {
    pub(crate) fn new(rate_pps: u64, batch: usize, now: Instant) -> Pacer {
        let rate = rate_pps as f64;
        let want = (rate / 1000.0).clamp(1.0, batch as f64).floor();
        Pacer {
            rate,
            tokens: want,
            depth: batch as f64,
            want,
            last: now,
        }
    }

    /// How many datagrams may go now (0: wait [`Pacer::wait_time`] first), at most `batch`.
    pub(crate) fn grant(&mut self, now: Instant, batch: usize) -> usize {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + self.rate * dt).min(self.depth);
        self.last = now;
        if self.tokens >= self.want {
            (self.tokens as usize).min(batch)
        } else {
            0
        }
    }

    /// Time until `want` tokens are available.
    pub(crate) fn wait_time(&self) -> Duration {
        Duration::from_secs_f64(((self.want - self.tokens) / self.rate).max(0.0))
    }

    pub(crate) fn consume(&mut self, n: usize) {
        self.tokens -= n as f64;
    }
}

/// Errors that mean "this datagram was not sent", not "the generator is broken":
/// full buffers, queue drops, ICMP errors reported back, a firewall drop (EPERM).
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::EAGAIN
                | libc::ENOBUFS
                | libc::ENOMEM
                | libc::ECONNREFUSED
                | libc::EHOSTUNREACH
                | libc::ENETUNREACH
                | libc::EPERM
        )
    )
}

/// One UDP socket bound to `src:port` (0: an ephemeral port) and connected to `dst`,
/// non-blocking.
fn flow_socket(src: IpAddr, port: u16, dst: SocketAddr) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(dst), Type::DGRAM, Some(Protocol::UDP))?;
    let local = SocketAddr::new(src, port);
    s.bind(&local.into())
        .map_err(|e| io::Error::new(e.kind(), format!("gen: bind {local}: {e}")))?;
    s.connect(&dst.into())
        .map_err(|e| io::Error::new(e.kind(), format!("gen: connect to {dst}: {e}")))?;
    s.set_nonblocking(true)?;
    Ok(s)
}

/// Sends per `cfg` until `cfg.duration` passes or `stop` is set, then reports.
///
/// Opens `cfg.flows` sockets (raising the soft open-file limit if that needs it).
/// Refused datagrams are counted as `failed`; only setup errors and unexpected send
/// errors (EBADF, EINVAL, EMSGSIZE, ...) end the run with an error.
pub fn run(cfg: &GenConfig, stop: &AtomicBool) -> io::Result<GenReport> {
    cfg.validate()?;
    host::raise_open_file_limit(u64::from(cfg.flows) + 64)?;
    let src = cfg.src_ip.unwrap_or(if cfg.dst.is_ipv4() {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    });
    let socks = (0..cfg.flows)
        .map(|i| {
            let port = cfg.src_port.map_or(0, |p| p + i);
            flow_socket(src, port, cfg.dst).map_err(|e| match e.raw_os_error() {
                Some(libc::EMFILE | libc::ENFILE) => io::Error::new(
                    e.kind(),
                    format!(
                        "gen: flow socket {} of {}: {e} (raise `ulimit -n` or use fewer flows)",
                        i + 1,
                        cfg.flows
                    ),
                ),
                _ => e,
            })
        })
        .collect::<io::Result<Vec<_>>>()?;

    let payload: Vec<u8> = b"quicknat-gen "
        .iter()
        .cycle()
        .take(cfg.payload)
        .copied()
        .collect();
    let mut batch = SendBatch::new(&payload, cfg.batch);

    let (mut sent, mut failed) = (0u64, 0u64);
    let start = Instant::now();
    let deadline = start.checked_add(cfg.duration);
    let mut pacer = cfg.rate_pps.map(|r| Pacer::new(r, cfg.batch, start));
    let sleepy = cfg.rate_pps.is_some_and(|r| r < SLEEP_BELOW_PPS);
    let mut next = 0usize;
    loop {
        let now = Instant::now();
        if stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| now >= d) {
            break;
        }
        let k = match pacer.as_mut() {
            None => cfg.batch,
            Some(p) => match p.grant(now, cfg.batch) {
                0 => {
                    let wait = p.wait_time();
                    if sleepy {
                        let left = deadline.map_or(wait, |d| d.saturating_duration_since(now));
                        std::thread::sleep(wait.min(left));
                    } else {
                        std::thread::yield_now();
                    }
                    continue;
                }
                k => k,
            },
        };
        let sock = &socks[next];
        next = (next + 1) % socks.len();
        match batch.send(sock, k) {
            Ok(n) => {
                sent += n as u64;
                failed += (k - n) as u64;
            }
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) if is_transient(&e) => {
                failed += k as u64;
                if pacer.is_none() {
                    std::thread::yield_now();
                }
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("gen: sendmmsg to {}: {e}", cfg.dst),
                ))
            }
        }
        if let Some(p) = pacer.as_mut() {
            p.consume(k);
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let pps = if seconds > 0.0 {
        sent as f64 / seconds
    } else {
        0.0
    };
    Ok(GenReport {
        sent,
        failed,
        seconds,
        pps,
    })
}

/// Answers every datagram received on `bind` with itself, for `duration` or until `stop`;
/// returns how many it answered. The NAT44 lab's XDP fast-path arm runs it at the server
/// while warming up its flows: a UDP session is established (and offloaded) once a reply
/// came back. One datagram per call: warm-up rates are low.
pub fn udp_echo(bind: SocketAddr, duration: Duration, stop: &AtomicBool) -> io::Result<u64> {
    let s = std::net::UdpSocket::bind(bind)
        .map_err(|e| io::Error::new(e.kind(), format!("gen: bind echo {bind}: {e}")))?;
    s.set_read_timeout(Some(Duration::from_millis(20)))?;
    let deadline = Instant::now() + duration;
    let mut buf = [0u8; 2048];
    let mut answered = 0u64;
    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        match s.recv_from(&mut buf) {
            Ok((n, from)) => {
                if s.send_to(&buf[..n], from).is_ok() {
                    answered += 1;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("gen: echo on {bind}: {e}"),
                ))
            }
        }
    }
    Ok(answered)
}

/// Binds a UDP socket to `bind` and counts datagrams received for `duration`.
///
/// Datagrams are read in `recvmmsg` batches into small buffers (longer ones are
/// truncated; each still counts once).
#[cfg(test)]
pub fn recv_count(bind: std::net::SocketAddrV4, duration: Duration) -> io::Result<u64> {
    const BATCH: usize = 64;
    const BUF: usize = 256;
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    // A deep queue absorbs bursts; capped by net.core.rmem_max, which is fine.
    let _ = s.set_recv_buffer_size(4 << 20);
    s.bind(&SocketAddr::V4(bind).into())
        .map_err(|e| io::Error::new(e.kind(), format!("gen: bind sink {bind}: {e}")))?;
    s.set_read_timeout(Some(Duration::from_millis(20)))?;

    let mut batch = ::io::udp::RecvBatch::new(BATCH, BUF);
    let deadline = Instant::now() + duration;
    let mut count = 0u64;
    while Instant::now() < deadline {
        match batch.recv(&s) {
            Ok(n) => count += n as u64,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EINTR)) => {}
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("gen: recvmmsg on {bind}: {e}"),
                ))
            }
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddrV4;
    use std::thread;

    #[test]
    fn pacer_grants_about_a_millisecond_per_batch_and_keeps_the_rate() {
        let t0 = Instant::now();
        let mut p = Pacer::new(20_000, 64, t0);
        assert_eq!(p.grant(t0, 64), 20, "starts with one batch of credit");
        p.consume(20);
        assert_eq!(p.grant(t0 + Duration::from_micros(500), 64), 0);
        let w = p.wait_time();
        assert!(w > Duration::from_micros(400) && w <= Duration::from_micros(500));
        // Simulate one second at 1.1 ms steps (sleep overshoot): the rate holds.
        let mut sent = 20usize;
        let mut t = t0 + Duration::from_micros(500);
        while t < t0 + Duration::from_secs(1) {
            t += Duration::from_micros(1100);
            let k = p.grant(t, 64);
            p.consume(k);
            sent += k;
        }
        assert!((20_000..=20_100).contains(&sent), "sent {sent}");
        // A long stall refills to the bucket depth only, not a burst.
        assert_eq!(p.grant(t + Duration::from_secs(5), 64), 64);
        // Slow rates send single datagrams.
        let mut slow = Pacer::new(10, 64, t0);
        assert_eq!(slow.grant(t0, 64), 1);
    }

    /// With `src_port`, flow `i` sends from `src_port + i` (two runs use the same flows), and
    /// the echo answers each datagram to where it came from.
    #[test]
    fn fixed_source_ports_and_the_echo() {
        let stop = AtomicBool::new(false);
        let echo_addr: SocketAddr = "127.0.0.1:47911".parse().unwrap();
        let got = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let at = got.local_addr().unwrap();
        let flows = 3u16;
        let base = 47920u16;
        // The ports are free, and out of range ones are refused.
        let cfg = GenConfig {
            flows,
            src_port: Some(base),
            src_ip: Some("127.0.0.1".parse().unwrap()),
            rate_pps: Some(300),
            duration: Duration::from_millis(300),
            ..GenConfig::new(at)
        };
        assert!(GenConfig {
            src_port: Some(65_535),
            ..cfg.clone()
        }
        .validate()
        .is_err());
        assert!(GenConfig {
            src_port: Some(0),
            ..cfg.clone()
        }
        .validate()
        .is_err());
        got.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let r = run(&cfg, &stop).unwrap();
        assert!(r.sent > 0);
        let mut seen = std::collections::BTreeSet::new();
        let mut buf = [0u8; 64];
        while let Ok((_, from)) = got.recv_from(&mut buf) {
            seen.insert(from.port());
            if seen.len() == usize::from(flows) {
                break;
            }
        }
        assert_eq!(seen, (base..base + flows).collect());
        // The echo: a datagram comes back to its sender.
        let h = thread::spawn(move || {
            udp_echo(echo_addr, Duration::from_secs(3), &AtomicBool::new(false))
        });
        let c = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        c.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut back = None;
        while back.is_none() && Instant::now() < deadline {
            c.send_to(b"ping", echo_addr).unwrap();
            back = c.recv_from(&mut buf).ok().map(|(n, _)| buf[..n].to_vec());
        }
        assert_eq!(back.as_deref(), Some(&b"ping"[..]));
        assert!(h.join().unwrap().unwrap() >= 1);
    }

    #[test]
    fn gen_config_ranges_are_checked() {
        let dst = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9);
        assert!(GenConfig::new(dst).validate().is_ok());
        let bad = [
            GenConfig {
                flows: 0,
                ..GenConfig::new(dst)
            },
            GenConfig {
                flows: MAX_FLOWS + 1,
                ..GenConfig::new(dst)
            },
            GenConfig {
                batch: 0,
                ..GenConfig::new(dst)
            },
            GenConfig {
                payload: MAX_PAYLOAD + 1,
                ..GenConfig::new(dst)
            },
            GenConfig {
                rate_pps: Some(0),
                ..GenConfig::new(dst)
            },
            GenConfig::new(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)),
            GenConfig::new(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 9)),
        ];
        for c in bad {
            let e = c.validate().unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{c:?}");
            assert!(e.to_string().starts_with("gen: "), "{e}");
        }
    }

    /// A network namespace of our own (the lab's: `qn-lab-gen-PID`, `lo` up), deleted on drop.
    struct Netns {
        lab: crate::topology::Lab,
    }

    impl Netns {
        /// Creates the namespace, or None (test skipped) when not root / no `ip`.
        fn new() -> Option<Netns> {
            if !host::is_root() || crate::topology::require(&["ip"]).is_err() {
                eprintln!("skipping gen live test: needs root and iproute2");
                return None;
            }
            let stop = std::sync::Arc::new(AtomicBool::new(false));
            let lab = crate::topology::Lab::new(&["gen"], stop).expect("creating the namespace");
            Some(Netns { lab })
        }

        /// Runs `f` in a new thread inside the namespace (the thread's `setns`; the lab
        /// itself only runs programs there, with `ip netns exec`).
        fn spawn<T: Send + 'static>(
            &self,
            f: impl FnOnce() -> T + Send + 'static,
        ) -> thread::JoinHandle<T> {
            let name = self.lab.at(0).to_owned();
            thread::spawn(move || {
                host::enter_netns(&name).unwrap_or_else(|e| panic!("{e}"));
                f()
            })
        }
    }

    /// Joins a test thread, re-raising its panic with the original message.
    fn join<T>(h: thread::JoinHandle<T>) -> T {
        h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
    }

    /// Sink and generator on `lo` in the namespace: paced run, then an unpaced one.
    fn sink_and_gen(ns: &Netns, port: u16, cfg: GenConfig, sink_for: Duration) -> (GenReport, u64) {
        let sink = ns.spawn(move || {
            recv_count(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port), sink_for).expect("sink")
        });
        thread::sleep(Duration::from_millis(200)); // let the sink bind first
        let stop = AtomicBool::new(false);
        let report = join(ns.spawn(move || run(&cfg, &stop).expect("gen")));
        (report, join(sink))
    }

    #[test]
    fn gen_paced_and_unpaced_on_loopback() {
        let Some(ns) = Netns::new() else { return };
        let dst = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9999);

        let paced = GenConfig {
            flows: 8,
            rate_pps: Some(20_000),
            duration: Duration::from_secs(1),
            ..GenConfig::new(dst)
        };
        let (r, received) = sink_and_gen(&ns, 9999, paced, Duration::from_millis(1600));
        eprintln!("paced 20 kpps, 8 flows: {r}; received {received}");
        assert!((18_000..=22_000).contains(&r.sent), "{r}");
        assert!(
            received * 10 >= r.sent * 9,
            "received {received} of {}",
            r.sent
        );
        assert!(r.failed * 100 <= r.sent, "{r}");
        assert!((0.95..1.2).contains(&r.seconds), "{r}");

        let unpaced = GenConfig {
            flows: 8,
            duration: Duration::from_millis(500),
            dst: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9998).into(),
            ..GenConfig::new(dst)
        };
        let (r, received) = sink_and_gen(&ns, 9998, unpaced, Duration::from_millis(1000));
        eprintln!("unpaced, 8 flows, 18-byte payload: {r}; received {received}");
        assert!(r.sent > 0 && r.pps > 0.0, "{r}");
    }

    #[test]
    fn gen_stops_when_asked() {
        let dst = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9);
        let cfg = GenConfig {
            duration: Duration::from_secs(60),
            rate_pps: Some(1000),
            ..GenConfig::new(dst)
        };
        let stop = AtomicBool::new(true);
        let t = Instant::now();
        let r = run(&cfg, &stop).expect("gen");
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_eq!(r.sent + r.failed, 0, "{r}");
    }
}
