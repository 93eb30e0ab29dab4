//! `quicknat-bench --csit`: NAT44 profiles that follow FD.io CSIT's NAT44ed methodology,
//! so quicknat's rows can be put next to VPP's published per-core results.
//!
//! CSIT's NAT44 bindings (methodology, "NAT44 Prefix Bindings" and "NAT44 Session
//! Scale"): 63 ports per inside address and a sharing ratio of 1024 inside addresses per
//! outside address, so one outside address serves exactly 1024 x 63 = 64,512 sessions
//! (its whole non-reserved port range 1024-65535). Inside hosts come from 192.168.0.0/16
//! (up to 65,536 hosts) or 172.16.0.0/12 (more); every session goes to one server, so the
//! translation is endpoint-dependent work on a single destination.
//!
//! Two measures, both on one worker (one core), driven the way the runtime drives the
//! engine ([`Mode::worker`], [`ModeWorker::process`], the reaper from [`Mode::reaper`]):
//!
//! * **TPUT** (CSIT's `tput` tests): established sessions, 64-byte frames (UDP; TCP after
//!   a full handshake in the warm-up), both directions, replayed through the same timed
//!   receive-ring loop as the other tables ([`crate::run::measure`]). Mpps per core.
//! * **CPS** (CSIT's `cps` tests): every connection new, set up and torn down. UDP: a
//!   request out and its reply in, then expiry; TCP: SYN, SYN-ACK, ACK, FIN, ACK, FIN,
//!   ACK (7 packets of 64 B), then expiry of the closed session. The figure is
//!   connections / (worker time + reaper time) on one core; the generator's own cost
//!   (writing each packet's addresses and checksums) is measured in the same round with
//!   the engine left out and taken off.
//!
//! No NIC: the engine alone, packets already in memory. CSIT's figures include the NIC,
//! the driver and VPP's graph around its NAT nodes, on other CPUs (see README).

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use conntrack::Timestamp;
use engine::config::PortRange;
use engine::nat44::{DynamicRule, Nat44Config, Nat44Shared};
use engine::{Direction, Mode, ModeWorker};
use wire::checksum::{checksum, combine, fold, pseudo_header_v4, sum};
use xlat::prefix::Ipv4Prefix;

use crate::run::{measure, Dispatch, Driver};
use crate::stats::median;
use crate::traffic::{build, shuffle, Pkt, Prepared};

/// Ports per inside address (CSIT: 63).
pub const PORTS_PER_INSIDE: usize = 63;
/// Inside addresses per outside address (CSIT: 1024).
pub const SHARING_RATIO: usize = 1024;
/// The first inside source port of each host.
const FIRST_PORT: u16 = 1024;
/// The one server every session goes to (CSIT's traffic has one destination too).
pub const SERVER: (Ipv4Addr, u16) = (Ipv4Addr::new(20, 0, 0, 1), 8080);
/// IP length of a 64-byte frame (14 bytes of Ethernet header and 4 of FCS less).
const IP64: usize = 46;

/// One of CSIT's session scales: `inside` hosts of 63 ports on `outside` addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Scale {
    /// CSIT's name for it ("4k", ..., "16M").
    pub label: &'static str,
    /// Inside addresses (hosts).
    pub inside: usize,
    /// Outside (public) addresses.
    pub outside: usize,
}

impl Scale {
    /// Sessions: inside addresses x 63.
    pub fn sessions(self) -> usize {
        self.inside * PORTS_PER_INSIDE
    }

    /// CSIT's scales, 4k to 16M sessions (h64-p63-s4032 ... h262144-p63-s16515072).
    pub const ALL: [Scale; 7] = [
        Scale::new("4k", 64, 1),
        Scale::new("16k", 256, 1),
        Scale::new("64k", 1024, 1),
        Scale::new("256k", 4096, 4),
        Scale::new("1M", 16_384, 16),
        Scale::new("4M", 65_536, 64),
        Scale::new("16M", 262_144, 256),
    ];

    const fn new(label: &'static str, inside: usize, outside: usize) -> Self {
        Self {
            label,
            inside,
            outside,
        }
    }

    /// CSIT's scale named `label` ("4k", "1M", ...; case-insensitive).
    pub fn named(label: &str) -> Option<Scale> {
        Self::ALL
            .into_iter()
            .find(|s| s.label.eq_ignore_ascii_case(label))
    }

    /// Inside host `h`: 192.168.0.0/16 up to 65,536 hosts, 172.16.0.0/12 beyond.
    pub fn host(self, h: usize) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.inside_prefix().addr()) + h as u32)
    }

    /// The inside prefix the hosts come from.
    pub fn inside_prefix(self) -> Ipv4Prefix {
        if self.inside <= 65_536 {
            Ipv4Prefix::new(Ipv4Addr::new(192, 168, 0, 0), 16).expect("literal")
        } else {
            Ipv4Prefix::new(Ipv4Addr::new(172, 16, 0, 0), 12).expect("literal")
        }
    }

    /// The outside pool: `outside` addresses from 198.18.0.0 (RFC 2544's range).
    pub fn pool(self) -> Ipv4Prefix {
        let len = 32 - self.outside.next_power_of_two().trailing_zeros() as u8;
        Ipv4Prefix::new(Ipv4Addr::new(198, 18, 0, 0), len).expect("aligned")
    }

    /// Session `i`'s inside endpoint: host `i / 63`, port 1024 + `i % 63`.
    pub fn inside_of(self, i: usize) -> (Ipv4Addr, u16) {
        (
            self.host(i / PORTS_PER_INSIDE),
            FIRST_PORT + (i % PORTS_PER_INSIDE) as u16,
        )
    }

    /// The NAT44 configuration: one rule, inside prefix to the pool, ports 1024-65535,
    /// room for every session.
    pub fn config(self) -> Nat44Config {
        Nat44Config {
            rules: vec![DynamicRule {
                inside: self.inside_prefix(),
                pool: vec![self.pool()],
                ports: PortRange::default(),
            }],
            max_sessions: self.sessions() + self.sessions() / 8 + 1024,
            ..Nat44Config::default()
        }
    }
}

/// UDP or TCP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// UDP: CPS is a request and its reply.
    Udp,
    /// TCP: CPS is a handshake and a FIN exchange.
    Tcp,
}

impl Proto {
    /// "udp" or "tcp".
    pub fn name(self) -> &'static str {
        match self {
            Proto::Udp => "udp",
            Proto::Tcp => "tcp",
        }
    }
}

/// TPUT (established sessions, Mpps) or CPS (connections per second).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Measure {
    /// Throughput on established sessions.
    Tput,
    /// Connections set up and torn down per second.
    Cps,
}

/// TCP flag bits.
const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
/// Client and server initial sequence numbers.
const CISN: u32 = 1_000;
const SISN: u32 = 5_000;

/// Writes a 64-byte-frame packet into `out` (cleared first): UDP, or TCP with `flags`,
/// `seq` and `ack`. Every checksum valid.
pub fn packet(
    out: &mut Vec<u8>,
    proto: Proto,
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
    tcp: (u8, u32, u32),
) {
    out.clear();
    build(out, proto == Proto::Tcp, src, dst, IP64);
    if proto == Proto::Udp {
        return;
    }
    let (flags, seq, ack) = tcp;
    let seg = &mut out[20..];
    seg[4..8].copy_from_slice(&seq.to_be_bytes());
    seg[8..12].copy_from_slice(&ack.to_be_bytes());
    seg[13] = flags;
    seg[16] = 0;
    seg[17] = 0;
    let c = !fold(combine(
        pseudo_header_v4(src.0.octets(), dst.0.octets(), 6, (IP64 - 20) as u16),
        sum(seg),
    ));
    seg[16..18].copy_from_slice(&c.to_be_bytes());
    debug_assert_eq!(checksum(&out[..20]), 0);
}

/// The source endpoint of a translated outbound packet.
fn source_of(p: &[u8]) -> (Ipv4Addr, u16) {
    (
        Ipv4Addr::new(p[12], p[13], p[14], p[15]),
        u16::from_be_bytes([p[20], p[21]]),
    )
}

/// One connection's packets, in order: direction, and (flags, seq, ack) for TCP.
fn script(proto: Proto) -> &'static [(Direction, (u8, u32, u32))] {
    use Direction::{Inbound as I, Outbound as O};
    match proto {
        Proto::Udp => &[(O, (0, 0, 0)), (I, (0, 0, 0))],
        Proto::Tcp => &[
            (O, (SYN, CISN, 0)),
            (I, (SYN | ACK, SISN, CISN + 1)),
            (O, (ACK, CISN + 1, SISN + 1)),
            (O, (FIN | ACK, CISN + 1, SISN + 1)),
            (I, (ACK, SISN + 1, CISN + 2)),
            (I, (FIN | ACK, SISN + 1, CISN + 2)),
            (O, (ACK, CISN + 2, SISN + 2)),
        ],
    }
}

/// The engine and the established traffic of a TPUT cell: every session set up as CSIT's
/// ramp-up does (TCP: the full handshake), then one 64-byte packet each way per session,
/// shuffled. Sessions that could not be set up are left out (and counted by the caller
/// from `packets.len()`).
pub fn prepare_tput(scale: Scale, proto: Proto) -> Prepared {
    let shared = Nat44Shared::new(scale.config(), 1).expect("CSIT config is valid");
    let mut w = Mode::worker(&shared, 0);
    let mut driver = Driver::new();
    let warm_at = Timestamp::from_secs(1000).as_nanos();
    let now = Timestamp::from_nanos(warm_at);
    let n = scale.sessions();
    let mut bytes = Vec::with_capacity(n * 2 * IP64);
    let mut packets = Vec::with_capacity(n * 2);
    let mut p = Vec::with_capacity(64);
    let handshake = &script(proto)[..if proto == Proto::Tcp { 3 } else { 1 }];
    for i in 0..n {
        let inside = scale.inside_of(i);
        let mut public = None;
        let mut ok = true;
        for &(dir, tcp) in handshake {
            match (dir, public) {
                (Direction::Outbound, _) => packet(&mut p, proto, inside, SERVER, tcp),
                (Direction::Inbound, Some(pb)) => packet(&mut p, proto, SERVER, pb, tcp),
                (Direction::Inbound, None) => ok = false,
            }
            if !ok || !driver.process_all(&mut w, now, dir, &mut p).is_forward() {
                ok = false;
                break;
            }
            if public.is_none() {
                public = Some(source_of(&p));
            }
        }
        if i % 32 == 31 {
            w.quiescent();
        }
        let Some(public) = public.filter(|_| ok) else {
            continue;
        };
        // Established: data in both directions (TCP: in window, acknowledging).
        for (dir, src, dst, tcp, expect) in [
            (
                Direction::Outbound,
                inside,
                SERVER,
                (ACK, CISN + 1, SISN + 1),
                public,
            ),
            (
                Direction::Inbound,
                SERVER,
                public,
                (ACK, SISN + 1, CISN + 1),
                inside,
            ),
        ] {
            packet(&mut p, proto, src, dst, tcp);
            let off = bytes.len();
            bytes.extend_from_slice(&p);
            packets.push(Pkt {
                off: off as u32,
                len: IP64 as u16,
                frame: 64,
                hdr: if proto == Proto::Tcp { 40 } else { 28 },
                dir,
                expect,
            });
        }
    }
    w.quiescent();
    w.offline();
    shuffle(&mut packets);
    Prepared {
        shared,
        packets,
        bytes,
        warm_at,
        v6_of: None,
    }
}

/// One CPS round's figures.
#[derive(Clone, Copy, Debug, Default)]
struct CpsRound {
    /// Connections whose every packet was forwarded.
    completed: usize,
    /// Seconds in the engine's worker (generator's share taken off).
    worker: f64,
    /// Seconds in the reaper's pass that removed them.
    reaper: f64,
    /// Seconds the generator alone took (writing the packets).
    generator: f64,
    /// Sessions left after the reaper's pass (must be 0).
    left: usize,
    /// Sessions the reaper's pass expired.
    expired: usize,
}

/// Runs every connection of `scale` once through `w` at `now` (or, `engine` false, only
/// writes the packets, for the generator's share). Returns connections completed.
fn cps_pass<W: ModeWorker>(
    w: &mut W,
    driver: &mut Driver,
    scale: Scale,
    proto: Proto,
    now: Timestamp,
    engine: bool,
) -> usize {
    let mut p = Vec::with_capacity(64);
    let steps = script(proto);
    // Without the engine, replies go to a stand-in public endpoint (the same work).
    let stand_in = (scale.pool().addr(), 40_000);
    let mut completed = 0;
    for i in 0..scale.sessions() {
        let inside = scale.inside_of(i);
        let mut public = if engine { None } else { Some(stand_in) };
        let mut ok = true;
        for &(dir, tcp) in steps {
            match dir {
                Direction::Outbound => packet(&mut p, proto, inside, SERVER, tcp),
                Direction::Inbound => {
                    let Some(pb) = public else {
                        ok = false;
                        break;
                    };
                    packet(&mut p, proto, SERVER, pb, tcp);
                }
            }
            if engine {
                if !driver.process_all(w, now, dir, &mut p).is_forward() {
                    ok = false;
                    break;
                }
                if public.is_none() {
                    public = Some(source_of(&p));
                }
            } else {
                std::hint::black_box(&mut p);
            }
        }
        completed += usize::from(ok);
        if i % 32 == 31 {
            w.quiescent();
        }
    }
    w.quiescent();
    completed
}

/// `rounds` CPS rounds of `scale`: each round sets up and tears down every connection
/// once, at a clock 10,000 s after the previous round's (expired sessions and held
/// ports from the round before are gone by then).
fn cps(scale: Scale, proto: Proto, rounds: usize) -> Vec<CpsRound> {
    let shared = Nat44Shared::new(scale.config(), 1).expect("CSIT config is valid");
    let mut w = Mode::worker(&shared, 0);
    let Some(mut reaper) = Mode::reaper(&shared) else {
        return Vec::new();
    };
    let mut driver = Driver::new();
    let mut out = Vec::with_capacity(rounds);
    for r in 0..rounds {
        let now = Timestamp::from_secs(1000 + 10_000 * r as u64);
        let t0 = Instant::now();
        cps_pass(&mut w, &mut driver, scale, proto, now, false);
        let generator = t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let completed = cps_pass(&mut w, &mut driver, scale, proto, now, true);
        let worker = (t0.elapsed().as_secs_f64() - generator).max(1e-9);
        // Teardown: past every timeout the closed (or answered) sessions have.
        let before = reaper.counters().sessions_expired;
        let later = Timestamp::from_secs(1000 + 10_000 * r as u64 + 5_000);
        let t0 = Instant::now();
        reaper.handle_timeout(later);
        w.quiescent();
        // The pass after the ports' hold (`port_reuse_hold`, 120 s): it gives the ports
        // back to the pool and frees the slots the first pass unlinked (their grace
        // period has passed), as the once-a-second sweeps of a live gateway would have
        // long before the next round. Without it the next round finds every port held.
        reaper.handle_timeout(Timestamp::from_secs(
            1000 + 10_000 * r as u64 + 5_000 + 1_000,
        ));
        let deadline = Instant::now() + Duration::from_secs(5);
        while reaper.drain(later) && Instant::now() < deadline {
            w.quiescent();
        }
        let reaper_s = t0.elapsed().as_secs_f64();
        let expired = (reaper.counters().sessions_expired - before) as usize;
        out.push(CpsRound {
            completed,
            worker,
            reaper: reaper_s,
            generator,
            left: Mode::session_count(&shared),
            expired,
        });
    }
    w.offline();
    out
}

/// One row of the CSIT table.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CsitRow {
    /// "tput" or "cps".
    pub measure: Measure,
    /// "udp" or "tcp".
    pub proto: Proto,
    /// CSIT's scale name.
    pub scale: &'static str,
    /// Sessions of the scale (inside addresses x 63).
    pub sessions: usize,
    /// Inside addresses.
    pub inside_addresses: usize,
    /// Outside addresses.
    pub outside_addresses: usize,
    /// Sessions actually set up (TPUT: before timing; CPS: connections completed per
    /// round, the smallest round's).
    pub established: usize,
    /// TPUT: Mpps of each round; CPS: connections per second of each round.
    pub rounds: Vec<f64>,
    /// Their median (TPUT: Mpps per core; CPS: connections per second per core).
    pub median: f64,
    /// CPS: the reaper's share of the time (0 for TPUT).
    pub reaper_share: f64,
    /// CPS: the generator's time as a share of the engine's (taken off; 0 for TPUT).
    pub generator_share: f64,
    /// TPUT: sampled outputs that failed verification or packets not forwarded; CPS:
    /// sessions left after the reaper's pass, or completed but not expired. Must be 0.
    pub failures: u64,
    /// Table memory reserved, MiB.
    pub table_mib: f64,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct CsitOptions {
    /// The scales.
    pub scales: Vec<Scale>,
    /// Rounds per cell (medians reported).
    pub rounds: usize,
    /// Seconds per TPUT round.
    pub cell: Duration,
    /// Which measures.
    pub measures: Vec<Measure>,
}

impl CsitOptions {
    /// Defaults: 4k to 4M (16M with `full`, when memory allows), 3 rounds of 2 s; quick:
    /// 4k to 64k, 1 round of 0.2 s.
    pub fn new(quick: bool, full: bool) -> Self {
        let n = if quick {
            3
        } else if full {
            7
        } else {
            6
        };
        Self {
            scales: Scale::ALL[..n].to_vec(),
            rounds: if quick { 1 } else { 3 },
            cell: Duration::from_secs_f64(if quick { 0.2 } else { 2.0 }),
            measures: vec![Measure::Tput, Measure::Cps],
        }
    }
}

/// Estimated peak memory of a scale's cells, bytes: the table at capacity and, for TPUT,
/// the replay's packets (stored, then copied per worker with their descriptors).
pub fn estimate_bytes(scale: Scale) -> u64 {
    let shared = Nat44Shared::new(Scale::ALL[0].config(), 1).expect("valid");
    let per_session = shared.bytes_per_session() as u64;
    let cfg = scale.config();
    let table = cfg.max_sessions as u64 * per_session;
    let per_packet = (IP64 + 2 * std::mem::size_of::<Pkt>() + 8 + IP64) as u64;
    table + 2 * scale.sessions() as u64 * per_packet
}

/// Available memory (`MemAvailable`), bytes, when the kernel says.
pub fn available_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Runs the cells: for each scale, TPUT (UDP, TCP) then CPS (UDP, TCP). A scale whose
/// estimate exceeds 70% of available memory is skipped with a note on stderr.
pub fn run(opts: &CsitOptions) -> Vec<CsitRow> {
    let mut rows = Vec::new();
    for &scale in &opts.scales {
        let need = estimate_bytes(scale);
        if let Some(avail) = available_bytes() {
            if need > avail / 10 * 7 {
                eprintln!(
                    "csit: skipping {} ({} sessions): needs about {} MiB, {} MiB available",
                    scale.label,
                    scale.sessions(),
                    need >> 20,
                    avail >> 20
                );
                continue;
            }
        }
        for proto in [Proto::Udp, Proto::Tcp] {
            if opts.measures.contains(&Measure::Tput) {
                eprintln!("csit: tput {} {}", proto.name(), scale.label);
                rows.push(tput_row(scale, proto, opts));
            }
        }
        for proto in [Proto::Udp, Proto::Tcp] {
            if opts.measures.contains(&Measure::Cps) {
                eprintln!("csit: cps {} {}", proto.name(), scale.label);
                rows.push(cps_row(scale, proto, opts.rounds));
            }
        }
    }
    rows
}

fn tput_row(scale: Scale, proto: Proto, opts: &CsitOptions) -> CsitRow {
    let prep = prepare_tput(scale, proto);
    let mut mpps = Vec::new();
    let mut bad = 0;
    for _ in 0..opts.rounds.max(1) {
        let m = measure(&prep, 1, Dispatch::Rss, opts.cell);
        // Established traffic is always forwarded: anything else is a failure too.
        bad += m.verify_failures + (m.packets - m.forwarded);
        mpps.push(m.mpps);
    }
    CsitRow {
        measure: Measure::Tput,
        proto,
        scale: scale.label,
        sessions: scale.sessions(),
        inside_addresses: scale.inside,
        outside_addresses: scale.outside,
        established: prep.packets.len() / 2,
        median: median(mpps.clone()),
        rounds: mpps,
        reaper_share: 0.0,
        generator_share: 0.0,
        failures: bad,
        table_mib: prep.shared.table_bytes() as f64 / (1 << 20) as f64,
    }
}

fn cps_row(scale: Scale, proto: Proto, rounds: usize) -> CsitRow {
    let rs = cps(scale, proto, rounds.max(1));
    let rate: Vec<f64> = rs
        .iter()
        .map(|r| r.completed as f64 / (r.worker + r.reaper))
        .collect();
    let total = |f: fn(&CpsRound) -> f64| rs.iter().map(f).sum::<f64>();
    let engine = total(|r| r.worker + r.reaper);
    let table = Nat44Shared::new(scale.config(), 1)
        .map(|s| s.table_bytes())
        .unwrap_or(0);
    CsitRow {
        measure: Measure::Cps,
        proto,
        scale: scale.label,
        sessions: scale.sessions(),
        inside_addresses: scale.inside,
        outside_addresses: scale.outside,
        established: rs.iter().map(|r| r.completed).min().unwrap_or(0),
        median: median(rate.clone()),
        rounds: rate,
        reaper_share: total(|r| r.reaper) / engine.max(1e-9),
        generator_share: total(|r| r.generator) / engine.max(1e-9),
        failures: rs
            .iter()
            .map(|r| (r.left + r.completed.saturating_sub(r.expired)) as u64)
            .sum(),
        table_mib: table as f64 / (1 << 20) as f64,
    }
}

/// The rows as a table.
pub fn table(rows: &[CsitRow]) -> String {
    use std::fmt::Write as _;
    let mut s = String::from(
        "CSIT NAT44ed profiles (63 ports per inside address, sharing ratio 1024), 1 core, engine in memory, 64 B frames\n\
         test  proto scale  sessions   in-addrs out  set up     median        rounds                        fail table MiB\n",
    );
    for r in rows {
        let (fig, each): (String, Vec<String>) = match r.measure {
            Measure::Tput => (
                format!("{:.2} Mpps", r.median),
                r.rounds.iter().map(|m| format!("{m:.2}")).collect(),
            ),
            Measure::Cps => (
                format!("{:.0} k/s", r.median / 1e3),
                r.rounds
                    .iter()
                    .map(|m| format!("{:.0}k", m / 1e3))
                    .collect(),
            ),
        };
        let _ = writeln!(
            s,
            "{:<5} {:<5} {:<6} {:<10} {:<8} {:<4} {:<10} {:<13} {:<29} {:<4} {:.1}",
            match r.measure {
                Measure::Tput => "tput",
                Measure::Cps => "cps",
            },
            r.proto.name(),
            r.scale,
            r.sessions,
            r.inside_addresses,
            r.outside_addresses,
            r.established,
            fig,
            each.join(" "),
            r.failures,
            r.table_mib
        );
    }
    s
}

#[cfg(test)]
mod tests;
