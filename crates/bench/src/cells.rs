//! The benchmark cells that are not a plain replay: rule lookups, connection setup and
//! teardown, table capacity, per-core share, SYN flood.

use std::net::Ipv4Addr;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use conntrack::Timestamp;
use engine::nat44::Nat44Shared;
use engine::{Direction, DropReason, Mode, ModeWorker};

use super::run::Driver;
use super::traffic::{build, config, prepare, FrameMix, Rng};
use super::BenchOptions;
use crate::balance::FlowBalancer;
use crate::rss::{Rss, Spread, ToeplitzKey};

/// Lookups per second of `f` over `addrs`, for about `d`.
pub fn lookups_per_sec<T>(addrs: &[Ipv4Addr], d: Duration, f: impl Fn(Ipv4Addr) -> T) -> f64 {
    if addrs.is_empty() {
        return 0.0;
    }
    let t0 = Instant::now();
    let (mut n, mut at) = (0u64, 0usize);
    while t0.elapsed() < d {
        for _ in 0..256 {
            std::hint::black_box(f(std::hint::black_box(addrs[at])));
            at = if at + 1 == addrs.len() { 0 } else { at + 1 };
        }
        n += 256;
    }
    n as f64 / t0.elapsed().as_secs_f64()
}

/// Connection setup/teardown and capacity figures.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Connections {
    /// New sessions per second, one worker (every packet a new flow).
    pub setup_per_sec_1: f64,
    /// New sessions per second, all workers.
    pub setup_per_sec_n: f64,
    /// Workers used for `setup_per_sec_n`.
    pub workers: usize,
    /// Sessions deleted per second by the reaper (unlink, binding and port release).
    pub teardown_per_sec: f64,
    /// Table bytes per session at capacity (both records + index + one binding).
    pub bytes_per_session: usize,
    /// Sessions filled for the capacity test.
    pub filled: usize,
    /// Resident memory growth per filled session, measured.
    pub rss_bytes_per_session: f64,
    /// Sessions fitting in 24 GiB at `bytes_per_session`.
    pub fit_in_24gib: u64,
}

/// `n` TCP SYNs from inside hosts (64 flows per host from `base_host` up) to one server.
pub(crate) fn syn_packets(n: usize, base_host: u32) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let host = Ipv4Addr::from(base_host + (i / 64) as u32);
            let mut v = Vec::with_capacity(40);
            build(
                &mut v,
                true,
                (host, 1024 + (i % 64) as u16 * 911),
                (Ipv4Addr::new(198, 51, 100, 7), 443),
                40,
            );
            v[33] = 0x02; // SYN
                          // The TCP checksum covers the flags: recompute it.
            v[36] = 0;
            v[37] = 0;
            let c = !wire::checksum::fold(wire::checksum::combine(
                wire::checksum::pseudo_header_v4(host.octets(), [198, 51, 100, 7], 6, 20),
                wire::checksum::sum(&v[20..40]),
            ));
            v[36..38].copy_from_slice(&c.to_be_bytes());
            v
        })
        .collect()
}

/// Every packet a new flow, on `workers` threads at once; returns sessions per second.
fn setup_rate(shared: &Arc<Nat44Shared>, pkts: &mut [Vec<u8>], workers: usize) -> f64 {
    let barrier = Arc::new(Barrier::new(workers));
    let chunk = pkts.len().div_ceil(workers);
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let times: Vec<f64> = std::thread::scope(|s| {
        pkts.chunks_mut(chunk)
            .enumerate()
            .map(|(id, part)| {
                let (shared, barrier) = (Arc::clone(shared), Arc::clone(&barrier));
                let core = cores.get(id % cores.len().max(1)).copied();
                s.spawn(move || {
                    if let Some(c) = core {
                        core_affinity::set_for_current(c);
                    }
                    let mut w = Mode::worker(&shared, id);
                    let mut driver = Driver::new();
                    barrier.wait();
                    let t0 = Instant::now();
                    let now = Timestamp::from_secs(1000);
                    for (i, p) in part.iter_mut().enumerate() {
                        std::hint::black_box(driver.process_all(
                            &mut w,
                            now,
                            Direction::Outbound,
                            p,
                        ));
                        if i % 32 == 31 {
                            w.quiescent();
                        }
                    }
                    w.offline();
                    t0.elapsed().as_secs_f64()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap_or(f64::INFINITY))
            .collect()
    });
    let slowest = times.into_iter().fold(0.0f64, f64::max);
    Mode::session_count(shared) as f64 / slowest
}

fn resident_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Setup rate (1 and N workers), teardown rate, and a capacity fill.
pub fn connections(opts: &BenchOptions) -> Connections {
    let n = if opts.quick { 100_000 } else { 500_000 };
    let mut c = Connections {
        workers: opts.max_workers,
        ..Connections::default()
    };
    let base = u32::from(Ipv4Addr::new(10, 64, 0, 1));
    let mut rates = [0.0; 2];
    for (k, workers) in [1, opts.max_workers].into_iter().enumerate() {
        let shared = Nat44Shared::new(config(1, n + 1024), workers).expect("valid");
        let mut pkts = syn_packets(n, base);
        rates[k] = setup_rate(&shared, &mut pkts, workers);
        if k == 0 {
            // Teardown: everything expires at once; one reaper pass unlinks it all.
            let Some(mut reaper) = Mode::reaper(&shared) else {
                continue;
            };
            let later = Timestamp::from_secs(1000 + 100_000);
            let t0 = Instant::now();
            reaper.handle_timeout(later);
            let secs = t0.elapsed().as_secs_f64();
            c.teardown_per_sec = reaper.counters().sessions_expired as f64 / secs;
            c.bytes_per_session = shared.bytes_per_session();
        }
    }
    c.setup_per_sec_1 = rates[0];
    c.setup_per_sec_n = rates[1];
    c.fit_in_24gib = (24u64 << 30) / c.bytes_per_session.max(1) as u64;
    // Capacity: fill a big table and watch resident memory.
    let fill = if opts.quick { 200_000 } else { 10_000_000 };
    let before = resident_bytes().unwrap_or(0);
    let shared = Nat44Shared::new(config(1, fill), 1).expect("valid");
    let mut w = Mode::worker(&shared, 0);
    let mut driver = Driver::new();
    let mut p = Vec::with_capacity(64);
    let now = Timestamp::from_secs(1000);
    let mut made = 0;
    for i in 0..fill {
        p.clear();
        let host = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 0, 0, 1)) + (i / 16) as u32);
        build(
            &mut p,
            false,
            (host, 2000 + (i % 16) as u16),
            (Ipv4Addr::new(192, 0, 2, 1), 53),
            46,
        );
        if driver
            .process_all(&mut w, now, Direction::Outbound, &mut p)
            .is_forward()
        {
            made += 1;
        }
        if i.is_multiple_of(32) {
            w.quiescent();
        }
    }
    let after = resident_bytes().unwrap_or(0);
    c.filled = made;
    c.rss_bytes_per_session = after.saturating_sub(before) as f64 / made.max(1) as f64;
    c
}

/// Per-core share of one family's 32 flows.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ShareRow {
    /// "IPv4" or "IPv6".
    pub family: String,
    /// Workers.
    pub workers: usize,
    /// max/min packets per worker with Toeplitz RSS.
    pub rss_ratio: f64,
    /// max/min packets per worker with flow-aware placement.
    pub balanced_ratio: f64,
    /// Packets per worker with RSS.
    pub rss_per_worker: Vec<u64>,
}

fn udp6(src: [u8; 16], sport: u16, dst: [u8; 16]) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0, 0, 8, 17, 64];
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&[1, 0xbb, 0, 8, 0, 0]);
    p
}

/// 32 flows of each family (clients in one /24 or one /64 with sequential host parts and
/// random ephemeral ports, one server), 1000 packets each, over 4 and 8 workers.
pub fn share() -> Vec<ShareRow> {
    let mut rng = Rng(0x032F_10A5);
    let ports: Vec<u16> = (0..32)
        .map(|_| 32768 + (rng.next_u64() % 28232) as u16)
        .collect();
    let v4: Vec<Vec<u8>> = (0..32)
        .map(|i| {
            let mut v = Vec::new();
            build(
                &mut v,
                false,
                (Ipv4Addr::new(10, 0, 0, i as u8 + 1), ports[i]),
                (Ipv4Addr::new(192, 0, 2, 10), 443),
                28,
            );
            v
        })
        .collect();
    let v6: Vec<Vec<u8>> = (0..32)
        .map(|i| {
            let mut src = [0u8; 16];
            src[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
            src[15] = i as u8 + 1;
            let mut dst = [0u8; 16];
            dst[..6].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0xff, 0xff]);
            dst[15] = 0x10;
            udp6(src, ports[i], dst)
        })
        .collect();
    let mut rows = Vec::new();
    for (family, flows) in [("IPv4", &v4), ("IPv6", &v6)] {
        for workers in [4, 8] {
            let rss = Rss::new(&ToeplitzKey::MICROSOFT, workers);
            let mut bal = FlowBalancer::new(Rss::new(&ToeplitzKey::MICROSOFT, workers), 1024);
            let (mut a, mut b) = (Spread::new(workers), Spread::new(workers));
            for _ in 0..1000 {
                for f in flows.iter() {
                    a.add(rss.queue_of(f), 1);
                    b.add(bal.queue_of(f), 1);
                }
            }
            rows.push(ShareRow {
                family: family.into(),
                workers,
                rss_ratio: a.ratio(),
                balanced_ratio: b.ratio(),
                rss_per_worker: a.per_queue.clone(),
            });
        }
    }
    rows
}

/// Established traffic interleaved 1:1 with a flood of new TCP SYNs from inside hosts,
/// on a table that the flood fills.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SynFlood {
    /// Established packets sent.
    pub established_sent: u64,
    /// Established packets forwarded (should be all of them).
    pub established_forwarded: u64,
    /// Flood SYNs sent.
    pub flood_sent: u64,
    /// Flood SYNs that got a session before the table filled.
    pub flood_admitted: u64,
    /// Flood SYNs dropped with `table_full`.
    pub flood_table_full: u64,
    /// Mixed stream, million packets per second, one worker.
    pub mpps: f64,
}

/// Runs the SYN-flood cell for about `d` (at most `flood` distinct SYNs, at least 20000).
pub fn syn_flood(d: Duration, flood: usize) -> SynFlood {
    let prep = prepare(8192, FrameMix::Fixed(64), 1, 1);
    let mut w = Mode::worker(&prep.shared, 0);
    let mut driver = Driver::new();
    let flood = syn_packets(flood.max(20_000), u32::from(Ipv4Addr::new(10, 128, 0, 1)));
    let mut r = SynFlood::default();
    let mut buf = prep.bytes.clone();
    let mut fbuf = Vec::with_capacity(64);
    let t0 = Instant::now();
    let now = Timestamp::from_nanos(prep.warm_at + 1_000_000);
    let before = w.counters().dropped(DropReason::TableFull);
    let mut i = 0usize;
    while t0.elapsed() < d || r.flood_sent < 20_000 {
        let p = prep.packets[i % prep.packets.len()];
        let (o, h) = (p.off as usize, p.hdr as usize);
        buf[o..o + h].copy_from_slice(&prep.bytes[o..o + h]);
        r.established_sent += 1;
        if driver
            .process(&mut w, now, p.dir, &mut buf, o, p.len as usize)
            .is_forward()
        {
            r.established_forwarded += 1;
        }
        fbuf.clear();
        fbuf.extend_from_slice(&flood[i % flood.len()]);
        r.flood_sent += 1;
        if driver
            .process_all(&mut w, now, Direction::Outbound, &mut fbuf)
            .is_forward()
        {
            r.flood_admitted += 1;
        }
        i += 1;
        if i.is_multiple_of(32) {
            w.quiescent();
        }
        if r.flood_sent >= flood.len() as u64 {
            break;
        }
    }
    r.flood_table_full = w.counters().dropped(DropReason::TableFull) - before;
    r.mpps = (r.established_sent + r.flood_sent) as f64 / t0.elapsed().as_secs_f64() / 1e6;
    r
}

/// One row of the ILA table: SIR -> ILA translation rate with a number of mappings.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct IlaRow {
    /// Mappings in the table.
    pub mappings: usize,
    /// Million packets per second, one worker, 64-byte frames (IPv6/UDP), AdjustTransport.
    pub mpps: f64,
    /// Packets that did not translate (must be 0).
    pub failed: u64,
}

/// SIR -> ILA on one worker for `mappings` mappings: IPv6/UDP packets to 65536 distinct
/// identifiers (or fewer), delivered into a small ring, adjust-transport checksums.
pub fn ila(mappings: usize, d: Duration) -> IlaRow {
    use engine::ila::{IlaConfig, IlaMode, IlaRouter, UnmappedAction};
    use xlat::ila::{CsumMode, IdentFormat};
    const SIR: u64 = 0x3333_0000_0000_0001;
    let router = IlaRouter::new(
        IlaConfig {
            sir_prefix: SIR,
            csum: CsumMode::AdjustTransport,
            format: IdentFormat::Luid,
            unmapped: UnmappedAction::Drop,
        },
        mappings + 16,
    )
    .expect("valid ILA config");
    let mut rng = Rng(0x11A);
    let ids: Vec<u64> = (0..mappings)
        .map(|_| rng.next_u64() & 0x1FFF_FFFF_FFFF_FFFF | 1)
        .collect();
    for (i, id) in ids.iter().enumerate() {
        let _ = router.table().insert(*id, 0x2001_0000_0087_0000 | i as u64);
    }
    // 64-byte frames: IPv6 (40) + UDP (8) + 2 bytes of payload = 50 bytes of IP.
    let n = ids.len().clamp(1, 65_536);
    let step = (ids.len() / n).max(1);
    let mut wire = Vec::with_capacity(n * 50);
    for k in 0..n {
        let id = ids.get(k * step).copied().unwrap_or(1);
        let mut p = vec![0u8; 50];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&10u16.to_be_bytes());
        p[6] = 17;
        p[7] = 64;
        p[8..16].copy_from_slice(&0x2001_0db8_0000_0001u64.to_be_bytes());
        p[16..24].copy_from_slice(&(k as u64 + 1).to_be_bytes());
        p[24..32].copy_from_slice(&SIR.to_be_bytes());
        p[32..40].copy_from_slice(&id.to_be_bytes());
        p[40..42].copy_from_slice(&40000u16.to_be_bytes());
        p[42..44].copy_from_slice(&443u16.to_be_bytes());
        p[44..46].copy_from_slice(&10u16.to_be_bytes());
        let src: [u8; 16] = p[8..24].try_into().expect("16 bytes");
        let dst: [u8; 16] = p[24..40].try_into().expect("16 bytes");
        let c = !wire::checksum::fold(wire::checksum::combine(
            wire::checksum::pseudo_header_v6(&src, &dst, 17, 10),
            wire::checksum::sum(&p[40..50]),
        ));
        p[46..48].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
        wire.extend_from_slice(&p);
    }
    let mode = IlaMode {
        router,
        qsbr: conntrack::Qsbr::new(1),
    };
    let mut w = mode.worker(0);
    let mut driver = Driver::new();
    let now = Timestamp::from_secs(1);
    let mut ring = vec![0u8; 512 * 64];
    let t0 = Instant::now();
    let (mut done, mut failed, mut at) = (0u64, 0u64, 0usize);
    while t0.elapsed() < d {
        for _ in 0..1024 {
            let slot = (done as usize % 512) * 64;
            ring[slot..slot + 50].copy_from_slice(&wire[at * 50..at * 50 + 50]);
            if !driver
                .process(&mut w, now, Direction::Outbound, &mut ring, slot, 50)
                .is_forward()
            {
                failed += 1;
            }
            done += 1;
            at = if at + 1 == n { 0 } else { at + 1 };
        }
        w.quiescent();
    }
    w.offline();
    IlaRow {
        mappings,
        mpps: done as f64 / t0.elapsed().as_secs_f64() / 1e6,
        failed,
    }
}

/// Stateless SIIT (RFC 7915) translation rates, one worker, 64-byte frames.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SiitRow {
    /// IPv4 -> IPv6, million packets per second (RFC 6052 addresses computed per packet).
    pub v4_to_v6_mpps: f64,
    /// IPv6 -> IPv4.
    pub v6_to_v4_mpps: f64,
    /// Packets that did not translate (must be 0).
    pub failed: u64,
}

/// Runs both SIIT directions for about `d` each over 1024 distinct UDP flows.
///
/// A lower layer on purpose: `xlat::siit` alone (RFC 6052 addresses computed per packet),
/// not a mode; the CLAT row of the NAT64 table measures the `[clat]` mode around it.
pub fn siit(d: Duration) -> SiitRow {
    use std::net::Ipv6Addr;
    use xlat::rfc6052::Pref64;
    use xlat::siit::{ipv4_to_ipv6, ipv6_to_ipv4, SiitOptions, SiitVerdict};
    let pref: Pref64 = "2001:db8:64::/96".parse().expect("literal prefix");
    let opts = SiitOptions {
        translate_udp_zero_csum: true,
        ..SiitOptions::default()
    };
    const HEADROOM: usize = 64;
    const SLOT: usize = 192;
    let mut row = SiitRow::default();
    // IPv4 -> IPv6: 46-byte IPv4/UDP packets (64-byte Ethernet frames).
    let v4: Vec<Vec<u8>> = (0..1024u32)
        .map(|i| {
            let mut v = Vec::new();
            build(
                &mut v,
                false,
                (Ipv4Addr::from(0xC633_6400 | (i & 0xff)), 443),
                (Ipv4Addr::from(0xC000_0200 | (i >> 8)), 40000 + i as u16),
                46,
            );
            v
        })
        .collect();
    let mut ring = vec![0u8; 512 * SLOT];
    let no_inner = |_: Ipv4Addr, _: Ipv4Addr| None;
    let (mut done, mut at, t0) = (0u64, 0usize, Instant::now());
    while t0.elapsed() < d {
        for _ in 0..1024 {
            let slot = (done as usize % 512) * SLOT;
            let p = &v4[at];
            ring[slot + HEADROOM..slot + HEADROOM + p.len()].copy_from_slice(p);
            let (s4, d4) = (
                Ipv4Addr::new(p[12], p[13], p[14], p[15]),
                Ipv4Addr::new(p[16], p[17], p[18], p[19]),
            );
            let v = ipv4_to_ipv6(
                &mut ring[slot..slot + SLOT],
                HEADROOM,
                p.len(),
                pref.embed(s4),
                pref.embed(d4),
                &no_inner,
                &opts,
            );
            if !matches!(v, SiitVerdict::Forward { .. }) {
                row.failed += 1;
            }
            done += 1;
            at = (at + 1) % v4.len();
        }
    }
    row.v4_to_v6_mpps = done as f64 / t0.elapsed().as_secs_f64() / 1e6;
    // IPv6 -> IPv4: the same flows as 66-byte IPv6/UDP packets.
    let v6: Vec<Vec<u8>> = (0..1024u32)
        .map(|i| {
            let src = pref.embed(Ipv4Addr::from(0xC000_0200 | (i >> 8)));
            let dst = pref.embed(Ipv4Addr::from(0xC633_6400 | (i & 0xff)));
            let mut p = vec![0u8; 58];
            p[0] = 0x60;
            p[4..6].copy_from_slice(&18u16.to_be_bytes());
            p[6] = 17;
            p[7] = 64;
            p[8..24].copy_from_slice(&src.octets());
            p[24..40].copy_from_slice(&dst.octets());
            p[40..42].copy_from_slice(&(40000 + i as u16).to_be_bytes());
            p[42..44].copy_from_slice(&443u16.to_be_bytes());
            p[44..46].copy_from_slice(&18u16.to_be_bytes());
            let c = !wire::checksum::fold(wire::checksum::combine(
                wire::checksum::pseudo_header_v6(&src.octets(), &dst.octets(), 17, 18),
                wire::checksum::sum(&p[40..58]),
            ));
            p[46..48].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
            p
        })
        .collect();
    let no_inner6 = |_: Ipv6Addr, _: Ipv6Addr| None;
    let idents = engine::ipid::Ipv4Idents::new();
    let (mut done, mut at, t0) = (0u64, 0usize, Instant::now());
    while t0.elapsed() < d {
        for _ in 0..1024 {
            let slot = (done as usize % 512) * SLOT;
            let p = &v6[at];
            ring[slot + HEADROOM..slot + HEADROOM + p.len()].copy_from_slice(p);
            let s6 = Ipv6Addr::from(<[u8; 16]>::try_from(&p[8..24]).expect("16 bytes"));
            let d6 = Ipv6Addr::from(<[u8; 16]>::try_from(&p[24..40]).expect("16 bytes"));
            let (Some(s4), Some(d4)) = (pref.extract(s6), pref.extract(d6)) else {
                row.failed += 1;
                continue;
            };
            let v = ipv6_to_ipv4(
                &mut ring[slot..slot + SLOT],
                HEADROOM,
                p.len(),
                s4,
                d4,
                &no_inner6,
                &idents,
                &opts,
            );
            if !matches!(v, SiitVerdict::Forward { .. }) {
                row.failed += 1;
            }
            done += 1;
            at = (at + 1) % v6.len();
        }
    }
    row.v6_to_v4_mpps = done as f64 / t0.elapsed().as_secs_f64() / 1e6;
    row
}
