//! The IPv6 translators under the same replay as NAT44: stateful NAT64 (RFC 6146,
//! `engine::nat64`) and the CLAT of 464XLAT (RFC 6877, `engine::siit::Siit` with one EAM
//! entry). Traffic is UDP in 64-byte frames: IPv6 packets of 50 bytes (40 + 8 + 2 bytes of
//! payload, the smallest that fills a minimum frame) and IPv4 packets of 46.
//!
//! NAT64: IPv6 hosts `2001:db8:1::/96` + the NAT44 benchmark's inside address (`10.x.y.z`,
//! 16 flows per host) talk to the NAT44 benchmark's IPv4 servers embedded in
//! `2001:db8:64::/96`, through the pool `203.0.113.0/24`. Each flow's first packet goes
//! through the engine before timing (so the sessions are established and the public
//! endpoint known); the replies are addressed to it.
//!
//! CLAT: the same inside IPv4 hosts in `10.0.0.0/8`, mapped by EAM to
//! `2001:db8:c1a7::a00:0/104`, the servers through the PLAT prefix `2001:db8:64::/96`.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use conntrack::Timestamp;
use engine::nat64::{Nat64Config, Nat64Shared};
use engine::siit::{Siit, SiitConfig, SiitKind};
use engine::{Direction, Emit, Mode, HEADROOM};
use wire::checksum::{combine, fold, pseudo_header_v6, sum};
use xlat::prefix::{Ipv4Prefix, Ipv6Prefix};
use xlat::rfc6052::Pref64;

use super::report::{ClatRow, Nat64Row};
use super::run::{measure_only, Dispatch, Driver, Measurement};
use super::traffic::{build, inside_of, server_of, shuffle, Pkt, Prepared};
use super::{median, BenchOptions};

/// IPv4 bytes of a 64-byte frame (Ethernet header 14 and FCS 4 off).
const V4_LEN: usize = 46;
/// IPv6 bytes of a 64-byte frame: 40 + UDP 8 + 2 bytes of payload.
const V6_LEN: usize = 50;
/// The frame both carry.
const FRAME: u16 = 64;

/// The Pref64 (NAT64) and PLAT (CLAT) prefix: network-specific, so documentation IPv4
/// servers may be embedded (the Well-Known Prefix refuses non-global ones).
fn pref64() -> Pref64 {
    "2001:db8:64::/96".parse().expect("literal prefix")
}

/// The NAT64 benchmark's IPv6 host standing for inside address `a`.
pub fn nat64_host(a: Ipv4Addr) -> Ipv6Addr {
    Ipv6Addr::from(0x2001_0db8_0001_0000_0000_0000_0000_0000u128 | u128::from(u32::from(a)))
}

/// The CLAT address of inside host `a` (10.0.0.0/8 <-> 2001:db8:c1a7::a00:0/104).
pub fn clat_host(a: Ipv4Addr) -> Ipv6Addr {
    Ipv6Addr::from(0x2001_0db8_c1a7_0000_0000_0000_0000_0000u128 | u128::from(u32::from(a)))
}

/// Writes an IPv6 + UDP packet of `ip_len` bytes into `out`, checksum valid; returns the
/// header bytes (48).
pub fn build6(
    out: &mut Vec<u8>,
    src: (Ipv6Addr, u16),
    dst: (Ipv6Addr, u16),
    ip_len: usize,
) -> usize {
    let start = out.len();
    let ip_len = ip_len.max(48);
    out.resize(start + ip_len, 0);
    let p = &mut out[start..];
    let plen = (ip_len - 40) as u16;
    p[0] = 0x60;
    p[4..6].copy_from_slice(&plen.to_be_bytes());
    p[6] = 17;
    p[7] = 64;
    p[8..24].copy_from_slice(&src.0.octets());
    p[24..40].copy_from_slice(&dst.0.octets());
    for (k, b) in p[48..].iter_mut().enumerate() {
        *b = k as u8;
    }
    p[40..42].copy_from_slice(&src.1.to_be_bytes());
    p[42..44].copy_from_slice(&dst.1.to_be_bytes());
    p[44..46].copy_from_slice(&plen.to_be_bytes());
    let c = !fold(combine(
        pseudo_header_v6(&src.0.octets(), &dst.0.octets(), 17, u32::from(plen)),
        sum(&p[40..]),
    ));
    p[46..48].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
    48
}

fn push(
    packets: &mut Vec<Pkt>,
    bytes: &mut Vec<u8>,
    dir: Direction,
    expect: (Ipv4Addr, u16),
    make: impl FnOnce(&mut Vec<u8>) -> usize,
) {
    let off = bytes.len();
    let hdr = make(bytes);
    packets.push(Pkt {
        off: off as u32,
        len: (bytes.len() - off) as u16,
        frame: FRAME,
        hdr: hdr as u8,
        dir,
        expect,
    });
}

/// NAT64 with `flows` established UDP flows: an IPv6 packet out (`Outbound`, 6->4) and an
/// IPv4 reply in (`Inbound`, 4->6) for each, shuffled. `workers` sizes the worker slots.
pub fn prepare_nat64(flows: usize, workers: usize) -> Prepared<Arc<Nat64Shared>> {
    let cfg = Nat64Config {
        pref64: pref64(),
        pool4: vec!["203.0.113.0/24".parse().expect("literal prefix")],
        max_sessions: flows + flows / 4 + 1024,
        ..Nat64Config::default()
    };
    let shared = Nat64Shared::new(cfg, workers).expect("benchmark config is valid");
    let pref = pref64();
    let mut warm = Mode::worker(&shared, 0);
    let mut driver = Driver::new();
    let warm_at = Timestamp::from_secs(1000).as_nanos();
    let mut bytes = Vec::with_capacity(flows * (V4_LEN + V6_LEN));
    let mut packets = Vec::with_capacity(flows * 2);
    let mut scratch = vec![0u8; HEADROOM + 128];
    let mut first = Vec::with_capacity(V6_LEN);
    for i in 0..flows {
        let (inside, server) = (inside_of(i), server_of(i));
        let host = (nat64_host(inside.0), inside.1);
        let srv6 = (pref.embed(server.0), server.1);
        // Learn the public endpoint by translating the flow's first packet.
        first.clear();
        build6(&mut first, host, srv6, V6_LEN);
        scratch[HEADROOM..HEADROOM + V6_LEN].copy_from_slice(&first);
        let now = Timestamp::from_nanos(warm_at);
        let Emit::Forward { start: s, .. } = driver.process(
            &mut warm,
            now,
            Direction::Outbound,
            &mut scratch,
            HEADROOM,
            V6_LEN,
        ) else {
            continue; // counted in the engine; the flow just does not take part
        };
        let o = &scratch[s..];
        let public = (
            Ipv4Addr::new(o[12], o[13], o[14], o[15]),
            u16::from_be_bytes([o[20], o[21]]),
        );
        push(&mut packets, &mut bytes, Direction::Outbound, public, |b| {
            build6(b, host, srv6, V6_LEN)
        });
        push(&mut packets, &mut bytes, Direction::Inbound, inside, |b| {
            build(b, false, server, public, V4_LEN)
        });
    }
    warm.quiescent();
    warm.offline();
    shuffle(&mut packets);
    Prepared {
        shared,
        packets,
        bytes,
        warm_at,
        v6_of: Some(nat64_host),
    }
}

/// CLAT with `flows` UDP flows: the host's IPv4 packet out (`Outbound`, 4->6, EAM source,
/// PLAT-embedded destination) and the IPv6 reply in (`Inbound`, 6->4), shuffled.
pub fn prepare_clat(flows: usize) -> Prepared<Siit> {
    let cfg = SiitConfig::clat(
        Ipv4Prefix::new(Ipv4Addr::new(10, 0, 0, 0), 8).expect("literal prefix"),
        Ipv6Prefix::new(clat_host(Ipv4Addr::new(10, 0, 0, 0)), 104).expect("literal prefix"),
        pref64(),
    )
    .expect("CLAT config is valid");
    let siit = Siit::new(cfg, SiitKind::Clat).expect("CLAT config is valid");
    let pref = pref64();
    let mut bytes = Vec::with_capacity(flows * (V4_LEN + V6_LEN));
    let mut packets = Vec::with_capacity(flows * 2);
    for i in 0..flows {
        let (inside, server) = (inside_of(i), server_of(i));
        push(&mut packets, &mut bytes, Direction::Outbound, inside, |b| {
            build(b, false, inside, server, V4_LEN)
        });
        let (host6, srv6) = (
            (clat_host(inside.0), inside.1),
            (pref.embed(server.0), server.1),
        );
        push(&mut packets, &mut bytes, Direction::Inbound, inside, |b| {
            build6(b, srv6, host6, V6_LEN)
        });
    }
    shuffle(&mut packets);
    Prepared {
        shared: siit,
        packets,
        bytes,
        warm_at: 0,
        v6_of: Some(clat_host),
    }
}

/// Medians of one engine's two directions over rounds, and the verification totals.
#[derive(Default)]
struct Cells {
    out: Vec<f64>,
    inb: Vec<f64>,
    dropped: u64,
    verified: u64,
    wrong: u64,
}

impl Cells {
    fn add(&mut self, dir: Direction, m: &Measurement) {
        match dir {
            Direction::Outbound => self.out.push(m.mpps),
            Direction::Inbound => self.inb.push(m.mpps),
        }
        self.dropped += m.packets - m.forwarded;
        self.verified += m.verified;
        self.wrong += m.verify_failures;
    }

    /// Both directions of `prep` on `workers` threads, one after the other.
    fn round<M: engine::Mode>(&mut self, prep: &Prepared<M>, workers: usize, cell: Duration) {
        for dir in [Direction::Outbound, Direction::Inbound] {
            let m = measure_only(prep, workers, Dispatch::Rss, cell, Some(dir));
            self.add(dir, &m);
        }
    }
}

/// The NAT64 table: 8192 flows on 1 and `opts.max_workers` workers (alternating), then
/// `big` flows on 1 worker; each direction measured on its own, medians of `opts.rounds`.
pub fn nat64_rows(opts: &BenchOptions, big: usize) -> Vec<Nat64Row> {
    let cell = opts.cell();
    let multi = opts.max_workers.max(1);
    let mut rows = Vec::new();
    for (flows, counts) in [
        (8192, if multi > 1 { vec![1, multi] } else { vec![1] }),
        (big, vec![1]),
    ] {
        let prep = prepare_nat64(flows, multi);
        let mut cells: Vec<Cells> = counts.iter().map(|_| Cells::default()).collect();
        for _ in 0..opts.rounds.max(1) {
            for (c, &workers) in cells.iter_mut().zip(&counts) {
                c.round(&prep, workers, cell);
            }
        }
        for (c, workers) in cells.into_iter().zip(counts) {
            rows.push(Nat64Row {
                flows: prep.packets.len() / 2,
                workers,
                v6_to_v4_mpps: median(c.out),
                v4_to_v6_mpps: median(c.inb),
                dropped: c.dropped,
                verified: c.verified,
                verify_failures: c.wrong,
            });
        }
    }
    rows
}

/// The CLAT row: 8192 flows, 1 worker, each direction on its own, medians of
/// `opts.rounds`.
pub fn clat_row(opts: &BenchOptions) -> ClatRow {
    let prep = prepare_clat(8192);
    let mut c = Cells::default();
    for _ in 0..opts.rounds.max(1) {
        c.round(&prep, 1, opts.cell());
    }
    ClatRow {
        flows: prep.packets.len() / 2,
        v4_to_v6_mpps: median(c.out),
        v6_to_v4_mpps: median(c.inb),
        dropped: c.dropped,
        verified: c.verified,
        verify_failures: c.wrong,
    }
}
