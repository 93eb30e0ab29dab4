//! The cluster lab's traffic, run inside its namespaces as `quicknat-lab flows ...`:
//!
//! - `flows server`: the outside server. A UDP socket records, per flow (an id in each
//!   datagram), how many datagrams came, from which public endpoints (in order), and every
//!   gap between arrivals longer than `--gap-ms`; a TCP listener echoes every connection and
//!   records its public endpoint. It prints one JSON report when told to stop (SIGTERM) or
//!   at `--seconds`.
//! - `flows client`: the subscribers. One UDP flow per `--udp` source address, each sending
//!   sequence-numbered datagrams at `--pps` on one paced schedule; one TCP connection per
//!   `--tcp` source address writing 8 bytes every 10 ms and reading the echo back. Prints
//!   per flow what was sent, and per connection the last echo and the first error.
//! - `flows spread`: one datagram from each of `--count` consecutive source addresses, so
//!   per-gateway packet counters count subscribers.
//!
//! Wall-clock times are milliseconds since the Unix epoch ([`crate::probe::now_ms`]): the
//! one clock the lab and every process in its namespaces share. Lab equipment only.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::probe::now_ms;

/// Marks the lab's datagrams ("qncl").
const MAGIC: u32 = 0x716e_636c;
/// Sequence numbers the server tracks per flow (an hour at 1 kHz).
const MAX_SEQ: u64 = 1 << 22;
/// The UDP source port of every client flow.
pub const CLIENT_PORT: u16 = 33_000;

/// Arguments of `quicknat-lab flows`.
#[derive(Debug, Args)]
pub struct FlowsArgs {
    #[command(subcommand)]
    mode: FlowsMode,
}

#[derive(Debug, Subcommand)]
enum FlowsMode {
    /// The outside server: records UDP flows and echoes TCP connections.
    Server {
        /// UDP address to listen on.
        #[arg(long, value_name = "IP:PORT")]
        udp: SocketAddrV4,
        /// TCP address to listen on (echo).
        #[arg(long, value_name = "IP:PORT")]
        tcp: SocketAddrV4,
        /// Record gaps between a flow's arrivals longer than this, ms.
        #[arg(long, default_value_t = 10.0)]
        gap_ms: f64,
        /// Seconds at most (SIGTERM ends it earlier).
        #[arg(long, default_value_t = 600.0)]
        seconds: f64,
    },
    /// The subscribers: UDP flows and TCP connections.
    Client {
        /// UDP destination.
        #[arg(long, value_name = "IP:PORT")]
        udp_dst: SocketAddrV4,
        /// TCP destination.
        #[arg(long, value_name = "IP:PORT")]
        tcp_dst: SocketAddrV4,
        /// Source addresses of the UDP flows (comma-separated; flow id = position).
        #[arg(long, value_delimiter = ',')]
        udp: Vec<Ipv4Addr>,
        /// Source addresses of the TCP connections (comma-separated; id = position).
        #[arg(long, value_delimiter = ',')]
        tcp: Vec<Ipv4Addr>,
        /// Datagrams per second per UDP flow.
        #[arg(long, default_value_t = 1000)]
        pps: u32,
        /// Seconds.
        #[arg(long)]
        seconds: f64,
    },
    /// One datagram from each of `count` consecutive source addresses.
    Spread {
        /// Destination.
        #[arg(long, value_name = "IP:PORT")]
        dst: SocketAddrV4,
        /// The first source address.
        #[arg(long)]
        first: Ipv4Addr,
        /// How many.
        #[arg(long)]
        count: u32,
        /// Datagrams per second.
        #[arg(long, default_value_t = 5000)]
        pps: u32,
    },
}

/// One public endpoint a flow arrived from, in order of first appearance.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Seen {
    /// The source endpoint the server saw (the gateway's public address and port).
    pub from: String,
    /// Datagrams from it.
    pub count: u64,
    /// First arrival, ms since the epoch.
    pub first_ms: f64,
}

/// The server's record of one UDP flow.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct UdpFlow {
    /// Flow id (the client's position).
    pub id: u32,
    /// Distinct datagrams received (by sequence number).
    pub received: u64,
    /// Datagrams received again (a sequence number already seen).
    pub duplicates: u64,
    /// Sequence numbers seen (a bitmap; not reported).
    #[serde(skip)]
    pub seen: Vec<u64>,
    /// Endpoints in order of first appearance.
    pub endpoints: Vec<Seen>,
    /// Gaps between arrivals longer than the threshold: (last before, first after), ms.
    pub gaps: Vec<(f64, f64)>,
    /// Last arrival, ms.
    pub last_ms: f64,
    /// Runs of sequence numbers never received, before the last one received: (first
    /// missing, how many). By the sender's schedule, so a receiver that was late to read
    /// (a loaded machine) shows no hole.
    pub holes: Vec<(u64, u64)>,
}

impl UdpFlow {
    /// Fills `holes` from the sequence numbers seen.
    fn find_holes(&mut self) {
        let Some(last) = (0..self.seen.len() as u64 * 64)
            .rev()
            .find(|&q| self.seen[(q / 64) as usize] & (1 << (q % 64)) != 0)
        else {
            return;
        };
        let mut q = 0;
        while q < last {
            if self.seen[(q / 64) as usize] & (1 << (q % 64)) == 0 {
                let start = q;
                while q < last && self.seen[(q / 64) as usize] & (1 << (q % 64)) == 0 {
                    q += 1;
                }
                self.holes.push((start, q - start));
            }
            q += 1;
        }
    }
}

/// The server's record of one TCP connection.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct TcpConn {
    /// Connection id (the client's position, its first 4 bytes).
    pub id: u32,
    /// The public endpoint it came from.
    pub from: String,
    /// Bytes echoed.
    pub bytes: u64,
}

/// `flows server`'s report.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ServerReport {
    /// UDP flows by id.
    pub udp: Vec<UdpFlow>,
    /// TCP connections in order of acceptance.
    pub tcp: Vec<TcpConn>,
}

/// The client's record of one TCP connection.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct TcpClient {
    /// Connected at all.
    pub connected: bool,
    /// Bytes echoed back.
    pub echoed: u64,
    /// Last echo, ms.
    pub last_echo_ms: f64,
    /// The first error (reset, end of stream), if any.
    pub error: Option<String>,
    /// When it happened, ms.
    pub error_ms: f64,
}

/// `flows client`'s report.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ClientReport {
    /// Datagrams due per UDP flow (sent, or refused by the socket after an ICMP error).
    pub sent: Vec<u64>,
    /// TCP connections.
    pub tcp: Vec<TcpClient>,
    /// When sending began and ended, ms.
    pub start_ms: f64,
    /// See `start_ms`.
    pub end_ms: f64,
}

/// `quicknat-lab flows`.
pub fn run(a: &FlowsArgs) -> anyhow::Result<()> {
    let stop = crate::topology::stop_flag()?;
    let json = match &a.mode {
        FlowsMode::Server {
            udp,
            tcp,
            gap_ms,
            seconds,
        } => serde_json::to_string(&server(*udp, *tcp, *gap_ms, *seconds, &stop)?)?,
        FlowsMode::Client {
            udp_dst,
            tcp_dst,
            udp,
            tcp,
            pps,
            seconds,
        } => serde_json::to_string(&client(
            *udp_dst, *tcp_dst, udp, tcp, *pps, *seconds, &stop,
        )?)?,
        FlowsMode::Spread {
            dst,
            first,
            count,
            pps,
        } => {
            let sent = spread(*dst, *first, *count, *pps)?;
            format!("{{\"sent\":{sent}}}")
        }
    };
    println!("{json}");
    Ok(())
}

fn server(
    udp: SocketAddrV4,
    tcp: SocketAddrV4,
    gap_ms: f64,
    seconds: f64,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<ServerReport> {
    let sock = UdpSocket::bind(udp).with_context(|| format!("binding {udp}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(50)))?;
    let _ = socket2::SockRef::from(&sock).set_recv_buffer_size(8 << 20);
    let listener = TcpListener::bind(tcp).with_context(|| format!("binding {tcp}"))?;
    listener.set_nonblocking(true)?;
    let conns: Arc<Mutex<Vec<TcpConn>>> = Arc::default();
    let acceptor = {
        let (conns, stop) = (Arc::clone(&conns), Arc::clone(stop));
        std::thread::spawn(move || accept_loop(&listener, &conns, &stop))
    };
    let deadline = Instant::now() + Duration::from_secs_f64(seconds.clamp(0.1, 86_400.0));
    let mut flows: HashMap<u32, UdpFlow> = HashMap::new();
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        let Ok((n, from)) = sock.recv_from(&mut buf) else {
            continue;
        };
        if n < 16 || u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) != MAGIC {
            continue;
        }
        let id = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
        let t = now_ms();
        let f = flows.entry(id).or_insert_with(|| UdpFlow {
            id,
            ..UdpFlow::default()
        });
        let seq = u64::from_be_bytes([
            buf[8], buf[9], buf[10], buf[11], buf[12], buf[13], buf[14], buf[15],
        ]);
        if seq >= MAX_SEQ {
            continue;
        }
        let (word, bit) = ((seq / 64) as usize, 1u64 << (seq % 64));
        if f.seen.len() <= word {
            f.seen.resize(word + 1, 0);
        }
        if f.seen[word] & bit != 0 {
            f.duplicates += 1;
            continue;
        }
        f.seen[word] |= bit;
        if f.received > 0 && t - f.last_ms > gap_ms {
            f.gaps.push((f.last_ms, t));
        }
        f.received += 1;
        f.last_ms = t;
        let from = from.to_string();
        match f.endpoints.iter_mut().find(|s| s.from == from) {
            Some(s) => s.count += 1,
            None => f.endpoints.push(Seen {
                from,
                count: 1,
                first_ms: t,
            }),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = acceptor.join();
    let mut udp: Vec<UdpFlow> = flows.into_values().collect();
    for f in &mut udp {
        f.find_holes();
    }
    udp.sort_by_key(|f| f.id);
    let tcp = conns.lock().map(|c| c.clone()).unwrap_or_default();
    Ok(ServerReport { udp, tcp })
}

fn accept_loop(listener: &TcpListener, conns: &Arc<Mutex<Vec<TcpConn>>>, stop: &Arc<AtomicBool>) {
    let mut echoers = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((s, peer)) => {
                let (conns, stop) = (Arc::clone(conns), Arc::clone(stop));
                echoers.push(std::thread::spawn(move || echo(s, peer, &conns, &stop)));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    for e in echoers {
        let _ = e.join();
    }
}

/// Echoes one connection, recording its id, endpoint and bytes.
fn echo(mut s: TcpStream, peer: SocketAddr, conns: &Mutex<Vec<TcpConn>>, stop: &AtomicBool) {
    let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
    let _ = s.set_nodelay(true);
    let mut id = [0u8; 4];
    let t = Instant::now();
    let mut got = 0;
    while got < 4 && t.elapsed() < Duration::from_secs(5) && !stop.load(Ordering::Relaxed) {
        match s.read(&mut id[got..]) {
            Ok(0) => return,
            Ok(n) => got += n,
            Err(_) => continue,
        }
    }
    let idx = {
        let Ok(mut c) = conns.lock() else { return };
        c.push(TcpConn {
            id: u32::from_be_bytes(id),
            from: peer.to_string(),
            bytes: 0,
        });
        c.len() - 1
    };
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if s.write_all(&buf[..n]).is_err() {
                    break;
                }
                if let Ok(mut c) = conns.lock() {
                    c[idx].bytes += n as u64;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
}

fn bound_udp(src: Ipv4Addr, port: u16, dst: SocketAddrV4) -> anyhow::Result<UdpSocket> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)?;
    s.set_reuse_address(true)?;
    s.bind(&SocketAddr::V4(SocketAddrV4::new(src, port)).into())
        .with_context(|| format!("binding {src}:{port}"))?;
    s.connect(&SocketAddr::V4(dst).into())?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

fn datagram(id: u32, seq: u64) -> [u8; 16] {
    let mut d = [0u8; 16];
    d[..4].copy_from_slice(&MAGIC.to_be_bytes());
    d[4..8].copy_from_slice(&id.to_be_bytes());
    d[8..].copy_from_slice(&seq.to_be_bytes());
    d
}

fn client(
    udp_dst: SocketAddrV4,
    tcp_dst: SocketAddrV4,
    udp: &[Ipv4Addr],
    tcp: &[Ipv4Addr],
    pps: u32,
    seconds: f64,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<ClientReport> {
    anyhow::ensure!((1..=100_000).contains(&pps), "--pps must be 1..=100000");
    let duration = Duration::from_secs_f64(seconds.clamp(0.1, 86_400.0));
    let socks: Vec<UdpSocket> = udp
        .iter()
        .map(|&a| bound_udp(a, CLIENT_PORT, udp_dst))
        .collect::<anyhow::Result<_>>()?;
    let start_ms = now_ms();
    let t0 = Instant::now();
    let tcps: Vec<_> = tcp
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let stop = Arc::clone(stop);
            std::thread::spawn(move || tcp_stream(i as u32, a, tcp_dst, t0 + duration, &stop))
        })
        .collect();
    let mut sent = vec![0u64; socks.len()];
    let period = Duration::from_secs_f64(1.0 / f64::from(pps));
    let mut tick = 0u64;
    while !stop.load(Ordering::Relaxed) && t0.elapsed() < duration {
        let due = t0 + period.mul_f64(tick as f64);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        // Every datagram due counts as sent: a connected socket's send fails after an ICMP
        // error (a router's host unreachable during the outage), and that datagram is lost.
        for (i, s) in socks.iter().enumerate() {
            let _ = s.send(&datagram(i as u32, tick));
            sent[i] += 1;
        }
        tick += 1;
    }
    let end_ms = now_ms();
    let tcp = tcps
        .into_iter()
        .map(|h| h.join().unwrap_or_default())
        .collect();
    Ok(ClientReport {
        sent,
        tcp,
        start_ms,
        end_ms,
    })
}

/// One long-lived connection: its id, then 8 bytes every 10 ms, reading the echo.
fn tcp_stream(
    id: u32,
    src: Ipv4Addr,
    dst: SocketAddrV4,
    until: Instant,
    stop: &AtomicBool,
) -> TcpClient {
    let mut r = TcpClient::default();
    let fail = |r: &mut TcpClient, e: String| {
        r.error = Some(e);
        r.error_ms = now_ms();
    };
    let s = (|| -> std::io::Result<TcpStream> {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        s.bind(&SocketAddr::V4(SocketAddrV4::new(src, 0)).into())?;
        s.connect_timeout(&SocketAddr::V4(dst).into(), Duration::from_secs(3))?;
        Ok(s.into())
    })();
    let mut s = match s {
        Ok(s) => s,
        Err(e) => {
            fail(&mut r, format!("connect: {e}"));
            return r;
        }
    };
    r.connected = true;
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(Duration::from_millis(5)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
    if let Err(e) = s.write_all(&id.to_be_bytes()) {
        fail(&mut r, format!("write: {e}"));
        return r;
    }
    let mut next = Instant::now();
    let mut n = 0u64;
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) && Instant::now() < until {
        if Instant::now() >= next {
            n += 1;
            if let Err(e) = s.write_all(&n.to_be_bytes()) {
                fail(&mut r, format!("write: {e}"));
                return r;
            }
            next += Duration::from_millis(10);
        }
        match s.read(&mut buf) {
            Ok(0) => {
                fail(&mut r, "closed by the peer".into());
                return r;
            }
            Ok(k) => {
                r.echoed += k as u64;
                r.last_echo_ms = now_ms();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => {
                fail(&mut r, format!("read: {e}"));
                return r;
            }
        }
    }
    r
}

fn spread(dst: SocketAddrV4, first: Ipv4Addr, count: u32, pps: u32) -> anyhow::Result<u32> {
    anyhow::ensure!(pps > 0, "--pps must be at least 1");
    let period = Duration::from_secs_f64(1.0 / f64::from(pps));
    let t0 = Instant::now();
    let mut sent = 0;
    for i in 0..count {
        let due = t0 + period.mul_f64(f64::from(i));
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        let src = Ipv4Addr::from(u32::from(first) + i);
        let s = bound_udp(src, CLIENT_PORT + 1, dst)?;
        if s.send(&datagram(i, 0)).is_ok() {
            sent += 1;
        }
    }
    Ok(sent)
}
