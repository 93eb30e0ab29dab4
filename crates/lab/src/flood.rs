//! `quicknat-lab flood`: the attack lab's raw-frame generator, and the attacker's model of
//! an unkeyed session hash.
//!
//! The generator writes whole Ethernet frames on one interface through an AF_PACKET socket
//! (`io::afpacket::AfPacketTx`: `sendmmsg` batches), so it can forge what a socket cannot:
//! spoofed sources, and flows that no local socket owns. Three patterns:
//!
//! - [`Pattern::SpoofedSyn`]: TCP SYNs to one destination from random sources in a prefix
//!   and random ports (a spoofed SYN flood at a port forward);
//! - [`Pattern::Tuples`]: TCP SYNs to one destination from a fixed list of (source, port),
//!   replayed round robin (crafted hash collisions, or the same number of random tuples);
//! - [`Pattern::Greedy`]: one source opening new flows as fast as it can, random source
//!   ports to random destinations and ports in a prefix, UDP and TCP SYN alternating.
//!
//! [`old_key_hash`] is an unkeyed multiply-xorshift hash with public constants over
//! conntrack's packed TCP key ([`old_key`]), in a session index sized as conntrack sizes
//! it ([`old_bucket_mask`]): the attacker's model, against which it computes collisions
//! offline ([`find_collisions`]). Crafted tuples collide only in a gateway that hashes
//! this way; against a keyed hash they spread like random ones. The lab measures whatever
//! binary it is given.
//!
//! Lab equipment only: it never runs on the data path, and it sends only into the lab's
//! own namespaces.

use std::io;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ::io::afpacket::AfPacketTx;

/// Frames built per step, unpaced (the socket sends them in `sendmmsg` batches of its own);
/// a paced step sends at most this many and flushes them at once.
const BATCH: usize = 64;

/// A fixed-rate flood's schedule against a monotonic clock: packet `i` (from 0) is due
/// `i / rate` seconds after the start. The generator sends in steps of about a millisecond
/// of traffic (`batch`, 1..=[`BATCH`] frames, one `sendmmsg`) and sleeps until the next
/// step is due, so an oversleep is made up at the next step (the schedule is absolute, not
/// a sleep per packet) and no core spins waiting. If the generator falls more than
/// `max_lag` packets behind (it was descheduled), the schedule slips: the excess is skipped,
/// not sent in one burst, and the rate achieved (`sent / seconds`) shows the shortfall.
/// Never ahead of schedule: after any step, packets counted <= `rate x elapsed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    rate: u64,
    batch: u64,
    max_lag: u64,
}

/// What a paced generator does now ([`Schedule::step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Send `n` frames now; first count `skipped` as gone (the schedule slipped by them).
    Send {
        /// Frames to send now, at most one batch.
        n: usize,
        /// Frames the generator fell behind by beyond `max_lag`, never to be sent.
        skipped: u64,
    },
    /// Nothing is due before this time since the start: sleep until then.
    WaitUntil(Duration),
}

impl Schedule {
    /// `rate` frames per second (at least 1), at most `max_batch` frames per step.
    pub fn new(rate: u64, max_batch: usize) -> Schedule {
        let rate = rate.max(1);
        let batch = (rate / 1000).clamp(1, max_batch.max(1) as u64);
        Schedule {
            rate,
            batch,
            // 5 ms of traffic, and never less than a few steps.
            max_lag: (rate / 200).max(4 * batch),
        }
    }

    /// Frames due by `elapsed` since the start: `floor(rate x elapsed)`.
    pub fn due_by(&self, elapsed: Duration) -> u64 {
        let due = u128::from(self.rate).saturating_mul(elapsed.as_nanos()) / 1_000_000_000;
        u64::try_from(due).unwrap_or(u64::MAX)
    }

    /// The earliest time since the start by which `count` frames are due (`ceil(count /
    /// rate)`, in nanoseconds).
    pub fn due_at(&self, count: u64) -> Duration {
        let ns = (u128::from(count) * 1_000_000_000).div_ceil(u128::from(self.rate));
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// What to do `elapsed` after the start with `counted` frames sent or skipped so far:
    /// send a batch once a whole one is due, else wait until it is.
    pub fn step(&self, elapsed: Duration, counted: u64) -> Step {
        let owed = self.due_by(elapsed).saturating_sub(counted);
        if owed < self.batch {
            return Step::WaitUntil(self.due_at(counted.saturating_add(self.batch)));
        }
        let skipped = owed.saturating_sub(self.max_lag);
        Step::Send {
            n: (owed - skipped).min(self.batch) as usize,
            skipped,
        }
    }
}

/// What the frames look like.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// TCP SYNs to `dst` from random addresses in `src_net` and random ports 1024-65535.
    SpoofedSyn {
        /// Destination address and port.
        dst: (Ipv4Addr, u16),
        /// Sources are drawn from this prefix.
        src_net: (Ipv4Addr, u8),
    },
    /// TCP SYNs to `dst` from these (address, port) sources, round robin.
    Tuples {
        /// Destination address and port.
        dst: (Ipv4Addr, u16),
        /// The sources, replayed in order.
        srcs: Vec<(Ipv4Addr, u16)>,
    },
    /// New flows from `src`: random source ports 1024-65535 to random addresses in
    /// `dst_net` and random ports, UDP and TCP SYN alternating.
    Greedy {
        /// The one source address.
        src: Ipv4Addr,
        /// Destinations are drawn from this prefix.
        dst_net: (Ipv4Addr, u8),
    },
}

/// What a flood run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FloodReport {
    /// Frames the kernel accepted.
    pub sent: u64,
    /// Frames refused (full queues).
    pub dropped: u64,
    /// Paced only: frames the schedule skipped because the generator fell too far behind
    /// (it was descheduled), never sent.
    #[serde(default)]
    pub skipped: u64,
    /// Seconds sending.
    pub seconds: f64,
    /// `sent / seconds`.
    pub pps: f64,
}

/// xorshift64*: fast and good enough for forged header fields.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is replaced).
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    /// The next 64 random bits.
    #[inline]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// A random address in `net` (an address and prefix length).
fn in_net(net: (Ipv4Addr, u8), r: u64) -> Ipv4Addr {
    let host_bits = 32 - u32::from(net.1.min(32));
    let mask = if host_bits == 32 {
        u32::MAX
    } else {
        (1u32 << host_bits) - 1
    };
    Ipv4Addr::from((u32::from(net.0) & !mask) | (r as u32 & mask))
}

/// A random port in 1024..=65535.
fn port(r: u64) -> u16 {
    1024 + (r % 64_512) as u16
}

/// The RFC 1071 sum of `data` folded into `acc` (not complemented).
fn sum16(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [b] = chunks.remainder() {
        acc += u32::from(*b) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// Writes an Ethernet + IPv4 + (TCP SYN | UDP) frame into `buf`; returns its length.
/// `tcp`: a 20-byte SYN with sequence number `seq`; else UDP with an 18-byte payload.
#[allow(clippy::too_many_arguments)]
pub fn build_frame(
    buf: &mut [u8; 64],
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
    tcp: bool,
    seq: u32,
    ip_id: u16,
) -> usize {
    let l4_len: usize = if tcp { 20 } else { 8 + 18 };
    let total = 20 + l4_len;
    buf.fill(0);
    buf[0..6].copy_from_slice(&dst_mac);
    buf[6..12].copy_from_slice(&src_mac);
    buf[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = 14;
    buf[ip] = 0x45;
    buf[ip + 2..ip + 4].copy_from_slice(&(total as u16).to_be_bytes());
    buf[ip + 4..ip + 6].copy_from_slice(&ip_id.to_be_bytes());
    buf[ip + 6] = 0x40; // DF
    buf[ip + 8] = 64;
    buf[ip + 9] = if tcp { 6 } else { 17 };
    buf[ip + 12..ip + 16].copy_from_slice(&src.0.octets());
    buf[ip + 16..ip + 20].copy_from_slice(&dst.0.octets());
    let c = fold(sum16(0, &buf[ip..ip + 20]));
    buf[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
    let l4 = ip + 20;
    buf[l4..l4 + 2].copy_from_slice(&src.1.to_be_bytes());
    buf[l4 + 2..l4 + 4].copy_from_slice(&dst.1.to_be_bytes());
    let csum_at = if tcp {
        buf[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
        buf[l4 + 12] = 5 << 4;
        buf[l4 + 13] = 0x02; // SYN
        buf[l4 + 14..l4 + 16].copy_from_slice(&64_240u16.to_be_bytes());
        l4 + 16
    } else {
        buf[l4 + 4..l4 + 6].copy_from_slice(&(l4_len as u16).to_be_bytes());
        for (i, b) in buf[l4 + 8..l4 + l4_len].iter_mut().enumerate() {
            *b = b"quicknat-attack-lab"[i];
        }
        l4 + 6
    };
    // Pseudo-header: addresses, protocol, L4 length.
    let mut acc = sum16(0, &buf[ip + 12..ip + 20]);
    acc += u32::from(buf[ip + 9]) + l4_len as u32;
    let c = fold(sum16(acc, &buf[l4..l4 + l4_len]));
    let c = if !tcp && c == 0 { 0xffff } else { c };
    buf[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
    14 + total
}

/// Everything one run needs.
#[derive(Clone, Debug)]
pub struct FloodConfig {
    /// Interface to send on (in the caller's namespace).
    pub dev: String,
    /// Destination MAC (the gateway's interface).
    pub dst_mac: [u8; 6],
    /// Source MAC (ours).
    pub src_mac: [u8; 6],
    /// The frames.
    pub pattern: Pattern,
    /// Frames per second (`None`: as fast as possible).
    pub pps: Option<u64>,
    /// How long.
    pub duration: Duration,
    /// Random seed.
    pub seed: u64,
}

/// Sends per `cfg` until its duration passes or `stop` is set.
pub fn run(cfg: &FloodConfig, stop: &AtomicBool) -> io::Result<FloodReport> {
    if let Pattern::Tuples { srcs, .. } = &cfg.pattern {
        if srcs.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "flood: no tuples to replay",
            ));
        }
    }
    let mut tx = AfPacketTx::open(&cfg.dev)?;
    let mut rng = Rng::new(cfg.seed);
    let mut frame = [0u8; 64];
    let mut next_tuple = 0usize;
    let mut n = 0u64;
    let start = Instant::now();
    let deadline = start + cfg.duration;
    let schedule = cfg.pps.map(|r| Schedule::new(r, BATCH));
    // Frames sent or skipped against the schedule.
    let mut counted = 0u64;
    let mut skipped_total = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let k = match schedule.map(|s| s.step(now - start, counted)) {
            None => BATCH,
            Some(Step::WaitUntil(at)) => {
                // A sleep, never a spin: the generator's core stays idle between steps.
                std::thread::sleep((start + at).min(deadline).saturating_duration_since(now));
                continue;
            }
            Some(Step::Send { n, skipped }) => {
                counted += skipped + n as u64;
                skipped_total += skipped;
                n
            }
        };
        for _ in 0..k {
            let r = rng.next();
            let r2 = rng.next();
            let (src, dst, tcp) = match &cfg.pattern {
                Pattern::SpoofedSyn { dst, src_net } => {
                    ((in_net(*src_net, r), port(r >> 32)), *dst, true)
                }
                Pattern::Tuples { dst, srcs } => {
                    let s = srcs[next_tuple];
                    next_tuple = (next_tuple + 1) % srcs.len();
                    (s, *dst, true)
                }
                Pattern::Greedy { src, dst_net } => (
                    (*src, port(r)),
                    (in_net(*dst_net, r >> 16), port(r2)),
                    n.is_multiple_of(2),
                ),
            };
            let len = build_frame(
                &mut frame,
                cfg.dst_mac,
                cfg.src_mac,
                src,
                dst,
                tcp,
                (r2 >> 32) as u32,
                r2 as u16,
            );
            tx.send(&frame[..len])?;
            n += 1;
        }
        if schedule.is_some() {
            // The step leaves now, not when the socket's own batch fills.
            tx.flush()?;
        }
    }
    tx.flush()?;
    let seconds = start.elapsed().as_secs_f64();
    Ok(FloodReport {
        sent: tx.sent(),
        dropped: tx.dropped(),
        skipped: skipped_total,
        seconds,
        pps: if seconds > 0.0 {
            tx.sent() as f64 / seconds
        } else {
            0.0
        },
    })
}

/// conntrack's key packing: a TCP tuple packed into two words
/// (`w0 = src << 32 | dst`, `w1 = sport << 48 | dport << 32 | proto`, TCP = 0).
pub fn old_key(src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16)) -> (u64, u64) {
    let w0 = (u64::from(u32::from(src.0)) << 32) | u64::from(u32::from(dst.0));
    let w1 = (u64::from(src.1) << 48) | (u64::from(dst.1) << 32);
    (w0, w1)
}

/// An unkeyed hash of the packed key with public constants: the attacker's model.
#[inline]
pub fn old_key_hash(k: (u64, u64)) -> u64 {
    let mut h = k.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ k.1.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    h ^= h >> 31;
    h = h.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    h ^ (h >> 29)
}

/// The bucket mask of the session index for `max_sessions` (`SessionTable::new` makes
/// `ChainIndex::new(2 * capacity)`: at least 16 buckets, rounded up to a power of two).
pub fn old_bucket_mask(max_sessions: usize) -> u64 {
    (max_sessions.saturating_mul(2).max(16).next_power_of_two() - 1) as u64
}

/// `count` distinct sources in `src_net` (ports 1024-65535) whose TCP tuples to `dst` all
/// land in one bucket of an unkeyed session index sized for `max_sessions`: a brute-force
/// search (about `count x buckets` hash evaluations).
pub fn find_collisions(
    dst: (Ipv4Addr, u16),
    src_net: (Ipv4Addr, u8),
    max_sessions: usize,
    count: usize,
) -> Vec<(Ipv4Addr, u16)> {
    let mask = old_bucket_mask(max_sessions);
    let host_bits = 32 - u32::from(src_net.1.min(32));
    let base = u32::from(src_net.0) & !(((1u64 << host_bits) - 1) as u32);
    let hosts = 1u64 << host_bits;
    let target = old_key_hash(old_key((Ipv4Addr::from(base), 1024), dst)) & mask;
    let mut out = Vec::with_capacity(count);
    'ports: for sport in 1024..=u16::MAX {
        for h in 0..hosts {
            let src = Ipv4Addr::from(base.wrapping_add(h as u32));
            if old_key_hash(old_key((src, sport), dst)) & mask == target {
                out.push((src, sport));
                if out.len() == count {
                    break 'ports;
                }
            }
        }
    }
    out
}

/// `count` random distinct sources in `src_net` (ports 1024-65535).
pub fn random_tuples(src_net: (Ipv4Addr, u8), count: usize, seed: u64) -> Vec<(Ipv4Addr, u16)> {
    let mut rng = Rng::new(seed);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let r = rng.next();
        let t = (in_net(src_net, r), port(r >> 32));
        if seen.insert(t) {
            out.push(t);
        }
    }
    out
}

/// Parses "A.B.C.D/LEN".
pub fn parse_net(s: &str) -> anyhow::Result<(Ipv4Addr, u8)> {
    let (a, l) = s
        .split_once('/')
        .ok_or_else(|| anyhow::anyhow!("{s:?}: expected ADDRESS/LENGTH"))?;
    let len: u8 = l
        .parse()
        .ok()
        .filter(|l| *l <= 32)
        .ok_or_else(|| anyhow::anyhow!("{s:?}: prefix length must be 0-32"))?;
    Ok((
        a.parse()
            .map_err(|_| anyhow::anyhow!("{s:?}: not an IPv4 address"))?,
        len,
    ))
}

/// Parses "aa:bb:cc:dd:ee:ff".
pub fn parse_mac(s: &str) -> anyhow::Result<[u8; 6]> {
    let mut mac = [0u8; 6];
    let parts: Vec<&str> = s.trim().split(':').collect();
    anyhow::ensure!(parts.len() == 6, "{s:?}: not a MAC address");
    for (m, p) in mac.iter_mut().zip(parts) {
        *m = u8::from_str_radix(p, 16).map_err(|_| anyhow::anyhow!("{s:?}: not a MAC address"))?;
    }
    Ok(mac)
}

/// Parses "A.B.C.D:PORT".
pub fn parse_endpoint(s: &str) -> anyhow::Result<(Ipv4Addr, u16)> {
    let a: std::net::SocketAddrV4 = s
        .parse()
        .map_err(|_| anyhow::anyhow!("{s:?}: expected IPv4:PORT"))?;
    Ok((*a.ip(), a.port()))
}

/// Reads a tuples file: one "A.B.C.D:PORT" per line.
pub fn read_tuples(path: &std::path::Path) -> anyhow::Result<Vec<(Ipv4Addr, u16)>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| parse_endpoint(l.trim()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An independent check of a frame: every checksum sums to 0xffff over its range.
    fn verify(frame: &[u8]) {
        let ip = &frame[14..34];
        assert_eq!(fold(sum16(0, ip)), 0, "IPv4 header checksum");
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        assert_eq!(frame.len(), 14 + total);
        let l4 = &frame[34..14 + total];
        let mut acc = sum16(0, &ip[12..20]);
        acc += u32::from(ip[9]) + l4.len() as u32;
        assert_eq!(fold(sum16(acc, l4)), 0, "L4 checksum");
    }

    #[test]
    fn frames_carry_valid_checksums_and_the_fields_asked_for() {
        let mut rng = Rng::new(7);
        let mut buf = [0u8; 64];
        for i in 0..1000 {
            let r = rng.next();
            let src = (in_net(("10.128.0.0".parse().unwrap(), 9), r), port(r >> 32));
            let dst = ("203.0.113.1".parse().unwrap(), 8080);
            let tcp = i % 2 == 0;
            let n = build_frame(&mut buf, [2; 6], [4; 6], src, dst, tcp, r as u32, i as u16);
            assert_eq!(n, if tcp { 54 } else { 60 });
            verify(&buf[..n]);
            assert_eq!(&buf[26..30], &src.0.octets());
            assert_eq!(u16::from_be_bytes([buf[34], buf[35]]), src.1);
            assert_eq!(u16::from_be_bytes([buf[36], buf[37]]), 8080);
            assert!(src.0.octets()[0] == 10 && src.0.octets()[1] >= 128);
            if tcp {
                assert_eq!(buf[47], 0x02, "SYN only");
            }
        }
    }

    #[test]
    fn collisions_share_one_bucket_and_are_distinct() {
        let dst = ("203.0.113.1".parse().unwrap(), 8080);
        let net = ("10.128.0.0".parse().unwrap(), 9);
        let found = find_collisions(dst, net, 4096, 64);
        assert_eq!(found.len(), 64);
        let mask = old_bucket_mask(4096);
        assert_eq!(mask, 8191);
        let b = old_key_hash(old_key(found[0], dst)) & mask;
        for t in &found {
            assert_eq!(old_key_hash(old_key(*t, dst)) & mask, b);
        }
        let set: std::collections::HashSet<_> = found.iter().collect();
        assert_eq!(set.len(), found.len());
        // Random tuples spread: far fewer than 64 in any one bucket.
        let random = random_tuples(net, 64, 3);
        let mut buckets = std::collections::HashMap::new();
        for t in &random {
            *buckets
                .entry(old_key_hash(old_key(*t, dst)) & mask)
                .or_insert(0) += 1;
        }
        assert!(buckets.values().all(|&c| c < 4), "{buckets:?}");
    }

    #[test]
    fn old_hash_is_mains_key_hash() {
        // A fixed vector of the model: the packed key of
        // TCP 10.128.0.1:1024 -> 203.0.113.1:8080 and its hash.
        let k = old_key(
            ("10.128.0.1".parse().unwrap(), 1024),
            ("203.0.113.1".parse().unwrap(), 8080),
        );
        assert_eq!(k, (0x0A80_0001_CB00_7101, 0x0400_1F90_0000_0000));
        assert_eq!(old_key_hash(k), OLD_HASH_VECTOR);
    }

    /// See `old_hash_is_mains_key_hash`.
    const OLD_HASH_VECTOR: u64 = 0x4d82_0b1e_b138_c531;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn schedule_sends_a_batch_once_a_whole_one_is_due() {
        // 80 kpps: steps of 64 frames (under 1 ms of traffic), one every 800 us.
        let s = Schedule::new(80_000, BATCH);
        assert_eq!(s.batch, 64);
        let us = Duration::from_micros;
        assert_eq!(s.step(Duration::ZERO, 0), Step::WaitUntil(us(800)));
        assert_eq!(s.step(us(799), 0), Step::WaitUntil(us(800)));
        assert_eq!(s.step(us(800), 0), Step::Send { n: 64, skipped: 0 });
        assert_eq!(s.step(us(800), 64), Step::WaitUntil(us(1600)));
        // A late wake-up (2 ms in, 160 due, 64 sent): a batch now, then another at once.
        assert_eq!(s.step(2 * MS, 64), Step::Send { n: 64, skipped: 0 });
        assert_eq!(s.step(2 * MS, 128), Step::WaitUntil(us(2400)));
        // Low rates send one frame per step; high ones at most BATCH.
        let slow = Schedule::new(100, BATCH);
        assert_eq!(slow.batch, 1);
        assert_eq!(slow.step(Duration::ZERO, 0), Step::WaitUntil(10 * MS));
        assert_eq!(slow.step(10 * MS, 0), Step::Send { n: 1, skipped: 0 });
        assert_eq!(Schedule::new(5_000_000, BATCH).batch, BATCH as u64);
    }

    #[test]
    fn schedule_due_times_are_exact_inverses() {
        for rate in [1, 3, 100, 7_919, 80_000, 1_000_003] {
            let s = Schedule::new(rate, BATCH);
            for count in [1, 2, 63, 64, 1000, 123_457] {
                let at = s.due_at(count);
                assert!(s.due_by(at) >= count, "rate {rate} count {count}");
                assert!(
                    s.due_by(at - Duration::from_nanos(1)) < count,
                    "rate {rate} count {count}: due_at is the earliest"
                );
            }
            assert_eq!(s.due_by(Duration::from_secs(3)), 3 * rate);
        }
        // Extremes saturate instead of overflowing.
        let s = Schedule::new(u64::MAX, BATCH);
        assert_eq!(s.due_by(Duration::MAX), u64::MAX);
        assert!(s.step(Duration::MAX, 0) != Step::WaitUntil(Duration::ZERO));
        let s = Schedule::new(0, 0);
        assert_eq!(s.batch, 1);
        assert_eq!(
            s.step(Duration::ZERO, u64::MAX),
            Step::WaitUntil(Duration::from_nanos(u64::MAX))
        );
    }

    /// Runs `s` for `secs` on a simulated clock where every sleep overshoots by `late` and
    /// every send takes `send` per frame; returns (frames sent, frames skipped).
    fn simulate(s: Schedule, secs: u64, late: Duration, send: Duration) -> (u64, u64) {
        let end = Duration::from_secs(secs);
        let (mut t, mut sent, mut skipped) = (Duration::ZERO, 0u64, 0u64);
        while t < end {
            match s.step(t, sent + skipped) {
                Step::WaitUntil(at) => {
                    assert!(at > t, "a wait always moves time on (no spinning)");
                    t = at + late;
                }
                Step::Send { n, skipped: k } => {
                    assert!(n >= 1 && n as u64 <= s.batch);
                    skipped += k;
                    sent += n as u64;
                    assert!(sent + skipped <= s.due_by(t), "never ahead of schedule");
                    t += send * n as u32;
                }
            }
        }
        (sent, skipped)
    }

    #[test]
    fn schedule_holds_the_rate_when_every_sleep_oversleeps() {
        // 80 kpps for 2 s; each sleep 150 us late (timer slack and a busy machine), 1 us
        // to build and send a frame: the absolute schedule makes up every oversleep.
        let s = Schedule::new(80_000, BATCH);
        let (sent, skipped) = simulate(s, 2, Duration::from_micros(150), Duration::from_micros(1));
        assert_eq!(skipped, 0);
        assert!((160_000 - 64..=160_000).contains(&sent), "{sent}");
        // A generator too slow for the rate (2 us a frame: 500 kpps at most, asked 800)
        // sends as fast as it can; the schedule slips instead of piling up a debt.
        let s = Schedule::new(800_000, BATCH);
        let (sent, skipped) = simulate(s, 1, Duration::ZERO, Duration::from_micros(2));
        assert!((499_000..=500_064).contains(&sent), "{sent}");
        assert!(skipped > 250_000, "{skipped}");
    }

    #[test]
    fn schedule_slips_after_a_stall_instead_of_bursting() {
        // 80 kpps: max lag 5 ms of traffic (400 frames). A 100 ms stall: 8000 due, 0 sent.
        let s = Schedule::new(80_000, BATCH);
        let t = 100 * MS;
        let Step::Send { n, skipped } = s.step(t, 0) else {
            panic!("a batch is due")
        };
        assert_eq!((n, skipped), (64, 8000 - 400));
        // What is sent back to back before the next wait is at most the lag allowed.
        let mut counted = skipped + n as u64;
        let mut burst = n as u64;
        while let Step::Send { n, skipped } = s.step(t, counted) {
            assert_eq!(skipped, 0);
            counted += n as u64;
            burst += n as u64;
        }
        assert!((400 - 64..=400).contains(&burst), "{burst}");
    }

    #[test]
    fn parsers() {
        assert_eq!(
            parse_net("10.128.0.0/9").unwrap(),
            ("10.128.0.0".parse().unwrap(), 9)
        );
        assert!(parse_net("10.0.0.0/33").is_err());
        assert_eq!(parse_mac("02:00:00:00:00:0a").unwrap(), [2, 0, 0, 0, 0, 10]);
        assert!(parse_mac("02:00").is_err());
        assert_eq!(
            parse_endpoint("203.0.113.1:8080").unwrap(),
            ("203.0.113.1".parse().unwrap(), 8080)
        );
    }
}
