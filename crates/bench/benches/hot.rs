//! Micro-benchmarks of the per-packet hot path, bottom-up: what one packet costs in each
//! room it passes through, so a regression points at the room that caused it.
//!
//! Groups (every benchmark reports `Throughput::Elements`: packets, lookups or inserts):
//!
//! - `parse`: `Ipv4Packet::new_checked` + `verify_checksum` + `UdpPacket`/`TcpPacket`
//!   `new_checked` + reading both ports, on a 46-byte IPv4 packet (a minimum 64-byte
//!   Ethernet frame). The fixed cost every packet pays before any state is consulted.
//! - `checksum`: a full RFC 1071 sum over 20 bytes (an IPv4 header) and 1480 bytes (a full
//!   MTU payload), against the RFC 1624 incremental update (`xlat::csum::Delta`) that the
//!   fast path uses instead for an address + port rewrite; then the whole
//!   `xlat::nat44::rewrite` on a 46-byte UDP packet. That one restores the packet from a
//!   template each iteration (the rewrite is not idempotent once TTL is decremented), so
//!   `copy_46` measures the restore alone: subtract it.
//! - `session_table`: `conntrack::SessionTable` lookups at 8192 sessions (fits in L2/L3)
//!   and 1 048 576 sessions (DRAM), hits walked with an odd stride so consecutive lookups
//!   touch unrelated cache lines, and misses (a tuple no session has). `insert` fills a
//!   1M-capacity table from empty to full, 10 000 inserts per timed batch (table creation
//!   untimed), so the figure averages over every fill level. `threads/{1,2}` runs the same
//!   hit walk on one and on two threads at once and reports wall time per lookup of all
//!   threads together: lookups write nothing shared, so two threads should take about
//!   half the time per lookup (on this 2-core machine, minus whatever else is running).
//! - `rules`: the hashed longest-prefix rule search (`RuleTable`, one probe per distinct
//!   prefix length) at 1 to 100 000 random rules inside 10.0.0.0/8, against the linear
//!   scan it replaced (`linear_lookup`, few samples at 100 000). Paid once per new flow.
//! - `engine`: the NAT44 mode end to end, driven as the runtime drives it (`Mode::worker`,
//!   then `ModeWorker::process` on a `Frame` with `Egress::default()`: links without MTUs
//!   or addresses), on 8192 established UDP flows, outbound and the inbound replies,
//!   packets restored from templates each iteration (subtract `checksum/copy_46`). `now`
//!   is fixed, so `touch` finds the timestamp unchanged and stores nothing: the figure is
//!   the read-only steady state of a flow within one batch.
//!   `engine/fragments_3`: one flow's datagram in three fragments, per fragment (the
//!   fragment table's insert, two lookups and the removal, uncontended locks).
//!
//! Only `engine` goes through the mode trait. `parse`, `checksum`, `session_table` and
//! `rules` measure a lower layer on purpose (wire views, checksums and `xlat::nat44`,
//! `conntrack::SessionTable`, the rule table against its linear reference), so that a
//! regression in the end-to-end figure can be traced to the layer that caused it.
//!
//! Run: `cargo bench -p bench --bench hot -- --warm-up-time 1 --measurement-time 2`
//! (add a filter such as `session_table` to run one group).

use std::collections::HashSet;
use std::hint::black_box;
use std::net::Ipv4Addr;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use conntrack::session::FROM_INSIDE;
use conntrack::{Endpoint, NewSession, Proto, SessionTable, Timestamp, Tuple};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use engine::config::PortRange;
use engine::nat44::rules::{linear_lookup, RuleTable};
use engine::nat44::{DynamicRule, Nat44Config, Nat44Shared};
use engine::{Direction, Egress, Frame, Mode, ModeWorker, Output};
use wire::ip::IpProtocol;
use wire::{Ipv4Packet, TcpPacket, UdpPacket};
use xlat::csum::Delta;
use xlat::nat44::{L4Kind, Rewrite};
use xlat::prefix::{mask, Ipv4Prefix};

/// IPv4 bytes of a minimum Ethernet frame: 64 - 14 (header) - 4 (FCS).
const PKT_LEN: usize = 46;
/// An odd stride: walking a power-of-two table with it visits every entry, out of order.
const STRIDE: usize = 7919;

/// A tiny deterministic generator (xorshift64), so runs are comparable.
struct XorShift(u64);

impl XorShift {
    fn next_u32(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 32) as u32
    }
}

// ---- packet building ----

/// A 46-byte IPv4 packet carrying UDP (18 bytes of payload) or TCP (6 bytes), with valid
/// IPv4 and transport checksums.
fn packet(proto: IpProtocol, src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16) -> [u8; 46] {
    let mut buf = [0u8; PKT_LEN];
    for (i, b) in buf.iter_mut().enumerate().skip(20) {
        *b = i as u8;
    }
    let mut ip = Ipv4Packet::new_unchecked(&mut buf[..]);
    ip.set_version(4);
    ip.set_header_len(20);
    ip.set_total_len(PKT_LEN as u16);
    ip.set_ident(0x1234);
    ip.set_flags_and_offset(true, false, 0);
    ip.set_ttl(64);
    ip.set_protocol(proto);
    ip.set_src_addr(src);
    ip.set_dst_addr(dst);
    ip.fill_checksum();
    let l4 = ip.payload_mut();
    match proto {
        IpProtocol::Tcp => {
            let mut tcp = TcpPacket::new_unchecked(l4);
            tcp.set_src_port(sport);
            tcp.set_dst_port(dport);
            tcp.set_seq_number(0x0102_0304);
            tcp.set_ack_number(0x0506_0708);
            tcp.set_header_len(20);
            tcp.set_flags(wire::tcp::flags::ACK);
            tcp.set_window_len(65535);
            tcp.set_urgent_at(0);
            tcp.fill_checksum_v4(src.octets(), dst.octets());
        }
        _ => {
            let mut udp = UdpPacket::new_unchecked(l4);
            udp.set_src_port(sport);
            udp.set_dst_port(dport);
            udp.set_len((PKT_LEN - 20) as u16);
            udp.fill_checksum_v4(src.octets(), dst.octets());
        }
    }
    buf
}

fn udp(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16) -> [u8; 46] {
    packet(IpProtocol::Udp, src, sport, dst, dport)
}

/// Addresses and ports of a UDP packet (the packets here are our own, so `unwrap` is fine).
fn udp_endpoints(pkt: &[u8]) -> (Ipv4Addr, u16, Ipv4Addr, u16) {
    let ip = Ipv4Packet::new_checked(pkt).unwrap();
    let u = UdpPacket::new_checked(ip.payload()).unwrap();
    (ip.src_addr(), u.src_port(), ip.dst_addr(), u.dst_port())
}

// ---- parse ----

#[inline]
fn parse_udp(pkt: &[u8]) -> Option<(u16, u16)> {
    let ip = Ipv4Packet::new_checked(pkt).ok()?;
    if !ip.verify_checksum() {
        return None;
    }
    let u = UdpPacket::new_checked(ip.payload()).ok()?;
    Some((u.src_port(), u.dst_port()))
}

#[inline]
fn parse_tcp(pkt: &[u8]) -> Option<(u16, u16)> {
    let ip = Ipv4Packet::new_checked(pkt).ok()?;
    if !ip.verify_checksum() {
        return None;
    }
    let t = TcpPacket::new_checked(ip.payload()).ok()?;
    Some((t.src_port(), t.dst_port()))
}

fn bench_parse(c: &mut Criterion) {
    let src = Ipv4Addr::new(10, 0, 0, 2);
    let dst = Ipv4Addr::new(198, 51, 100, 2);
    let u = udp(src, 40000, dst, 53);
    let t = packet(IpProtocol::Tcp, src, 40000, dst, 443);
    assert_eq!(parse_udp(&u), Some((40000, 53)));
    assert_eq!(parse_tcp(&t), Some((40000, 443)));

    let mut g = c.benchmark_group("parse");
    g.throughput(Throughput::Elements(1));
    g.bench_function("udp_46", |b| b.iter(|| parse_udp(black_box(&u[..]))));
    g.bench_function("tcp_46", |b| b.iter(|| parse_tcp(black_box(&t[..]))));
    g.finish();
}

// ---- checksum ----

fn bench_checksum(c: &mut Criterion) {
    let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
    let big: Vec<u8> = (0..1480).map(|_| rng.next_u32() as u8).collect();
    let src = Ipv4Addr::new(10, 0, 0, 2);
    let dst = Ipv4Addr::new(198, 51, 100, 2);
    let template = udp(src, 40000, dst, 53);
    let to = Rewrite {
        src: Ipv4Addr::new(203, 0, 113, 7),
        sport: 1025,
        dst,
        dport: 53,
    };
    {
        // The rewrite must succeed and leave checksums a full recompute agrees with.
        let mut p = template;
        assert!(xlat::nat44::rewrite(&mut p, 20, L4Kind::Udp, &to, true));
        let ip = Ipv4Packet::new_checked(&p[..]).unwrap();
        assert!(ip.verify_checksum());
        let u = UdpPacket::new_checked(ip.payload()).unwrap();
        assert!(u.verify_checksum_v4(ip.src_bytes(), ip.dst_bytes()));
    }

    let mut g = c.benchmark_group("checksum");
    g.throughput(Throughput::Elements(1));
    g.bench_function("full_20", |b| {
        b.iter(|| wire::checksum::checksum(black_box(&template[..20])))
    });
    g.bench_function("full_1480", |b| {
        b.iter(|| wire::checksum::checksum(black_box(&big[..])))
    });
    g.bench_function("delta_addr_port", |b| {
        // Source address and port rewritten: the IPv4 header checksum absorbs the address,
        // the UDP checksum the address (pseudo-header) and the port.
        let old_addr = src.octets();
        let new_addr = to.src.octets();
        b.iter(|| {
            let (old_addr, new_addr) = black_box((old_addr, new_addr));
            let (ip_csum, udp_csum) = black_box((0x1c46u16, 0xb1e6u16));
            let mut ip = Delta::ZERO;
            ip.addr(old_addr, new_addr);
            let mut l4 = ip;
            l4.word(black_box(40000), black_box(1025));
            (ip.apply(ip_csum), l4.apply_udp4(udp_csum))
        })
    });
    let mut pkt = template;
    g.bench_function("copy_46", |b| {
        b.iter(|| {
            pkt.copy_from_slice(black_box(&template));
            black_box(&mut pkt);
        })
    });
    g.bench_function("rewrite_46", |b| {
        b.iter(|| {
            pkt.copy_from_slice(black_box(&template));
            xlat::nat44::rewrite(black_box(&mut pkt), 20, L4Kind::Udp, black_box(&to), true)
        })
    });
    g.finish();
}

// ---- session table ----

/// The `i`-th distinct UDP session: inside 10.x.y.z:sport to a server, revised to a public
/// address and port (distinct for every `i < 2^24`).
fn session(i: u32) -> NewSession {
    let inside = Endpoint::new(Ipv4Addr::from(0x0A00_0000 | i), 40000 + (i % 1000) as u16);
    let server = Endpoint::new(Ipv4Addr::new(198, 51, 100, 1 + (i % 200) as u8), 443);
    let public = Endpoint::new(Ipv4Addr::new(203, 0, 113, i as u8), 1024 + (i >> 8) as u16);
    NewSession {
        initial: Tuple::new(Proto::Udp, inside, server),
        revised: Tuple::new(Proto::Udp, public, server),
        binding: 0,
        flags: FROM_INSIDE,
    }
}

/// A table with `n` sessions, and the initial tuples it was filled with.
fn filled_table(n: usize) -> (SessionTable, Vec<Tuple>) {
    let table = SessionTable::new(n);
    let tuples: Vec<Tuple> = (0..n as u32)
        .map(|i| {
            let s = session(i);
            table.insert(&s, Timestamp::ZERO).expect("distinct tuples");
            s.initial
        })
        .collect();
    (table, tuples)
}

/// `iters` hit lookups walking `tuples` with the stride from `start`; the hit count.
#[inline]
fn walk(table: &SessionTable, tuples: &[Tuple], mut at: usize, iters: u64) -> u64 {
    let m = tuples.len() - 1;
    let mut hits = 0;
    for _ in 0..iters {
        hits += u64::from(table.lookup(&tuples[at]).is_some());
        at = (at + STRIDE) & m;
    }
    hits
}

/// Wall time for `threads` threads each doing `iters` lookups at once, divided by the
/// thread count: criterion's time per iteration is then time per lookup, all threads
/// together.
fn parallel_lookups(
    table: &SessionTable,
    tuples: &[Tuple],
    threads: usize,
    iters: u64,
) -> Duration {
    let start_line = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let start_line = &start_line;
                s.spawn(move || {
                    start_line.wait();
                    walk(table, tuples, t * tuples.len() / threads, iters)
                })
            })
            .collect();
        start_line.wait();
        let t0 = Instant::now();
        for w in workers {
            assert_eq!(w.join().unwrap(), iters);
        }
        t0.elapsed() / threads as u32
    })
}

fn bench_session_table(c: &mut Criterion) {
    let mut g = c.benchmark_group("session_table");
    g.throughput(Throughput::Elements(1));
    for n in [8192usize, 1 << 20] {
        let (table, tuples) = filled_table(n);
        assert_eq!(table.len(), n);
        let m = n - 1;
        let mut at = 0usize;
        g.bench_with_input(BenchmarkId::new("lookup_hit", n), &n, |b, _| {
            b.iter(|| {
                let r = table.lookup(black_box(&tuples[at]));
                at = (at + STRIDE) & m;
                debug_assert!(r.is_some());
                r
            })
        });
        // The same tuples towards another server port: same address bits, no session.
        let misses: Vec<Tuple> = tuples
            .iter()
            .map(|t| {
                let mut t = *t;
                t.dst.port = 444;
                t
            })
            .collect();
        assert!(table.lookup(&misses[0]).is_none());
        g.bench_with_input(BenchmarkId::new("lookup_miss", n), &n, |b, _| {
            b.iter(|| {
                let r = table.lookup(black_box(&misses[at]));
                at = (at + STRIDE) & m;
                r
            })
        });
        for threads in [1usize, 2] {
            let id = BenchmarkId::new(format!("lookup_hit_threads_{threads}"), n);
            g.bench_with_input(id, &n, |b, _| {
                b.iter_custom(|iters| parallel_lookups(&table, &tuples, threads, iters))
            });
        }
    }

    // Insert: fill a 1M-capacity table 10k sessions per timed batch; when it is full, start
    // again with a fresh one (untimed). The sessions are precomputed.
    const CAP: usize = 1 << 20;
    const BATCH: usize = 10_000;
    let sessions: Vec<NewSession> = (0..CAP as u32).map(session).collect();
    let mut table = SessionTable::new(CAP);
    let mut next = 0usize;
    g.throughput(Throughput::Elements(BATCH as u64));
    g.sample_size(30);
    g.bench_function("insert_fill_1M_x10k", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                if next + BATCH > CAP {
                    table = SessionTable::new(CAP);
                    next = 0;
                }
                let batch = &sessions[next..next + BATCH];
                let t0 = Instant::now();
                for s in batch {
                    black_box(table.insert(black_box(s), Timestamp::ZERO)).unwrap();
                }
                total += t0.elapsed();
                next += BATCH;
            }
            total
        })
    });
    g.finish();
}

// ---- rules ----

/// `n` distinct random prefixes of length 8..=32 inside 10.0.0.0/8.
fn random_prefixes(n: usize, rng: &mut XorShift) -> Vec<Ipv4Prefix> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let len = (rng.next_u32() % 25 + 8) as u8;
        let addr = (0x0A00_0000 | (rng.next_u32() & 0x00FF_FFFF)) & mask(len);
        let p = Ipv4Prefix::new(Ipv4Addr::from(addr), len).unwrap();
        if seen.insert(p) {
            out.push(p);
        }
    }
    out
}

fn bench_rules(c: &mut Criterion) {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut g = c.benchmark_group("rules");
    g.throughput(Throughput::Elements(1));
    for n in [1usize, 1_000, 10_000, 100_000] {
        let prefixes = random_prefixes(n, &mut rng);
        let table = RuleTable::new(&prefixes);
        // Addresses drawn from inside the rules: every lookup finds a rule.
        let probes: Vec<Ipv4Addr> = (0..4096)
            .map(|_| {
                let p = prefixes[rng.next_u32() as usize % prefixes.len()];
                p.nth(u64::from(rng.next_u32()))
            })
            .collect();
        for ip in probes.iter().take(64) {
            assert_eq!(table.lookup(*ip), linear_lookup(&prefixes, *ip));
            assert!(table.lookup(*ip).is_some());
        }
        let mut at = 0usize;
        g.sample_size(100);
        g.bench_with_input(BenchmarkId::new("hashed", n), &n, |b, _| {
            b.iter(|| {
                let r = table.lookup(black_box(probes[at]));
                at = (at + 1) & 4095;
                r
            })
        });
        if n >= 1_000 {
            if n >= 100_000 {
                g.sample_size(10);
            }
            g.bench_with_input(BenchmarkId::new("linear", n), &n, |b, _| {
                b.iter(|| {
                    let r = linear_lookup(black_box(&prefixes), black_box(probes[at]));
                    at = (at + 1) & 4095;
                    r
                })
            });
        }
    }
    g.finish();
}

// ---- engine ----

fn bench_engine(c: &mut Criterion) {
    const FLOWS: usize = 8192;
    let shared = Nat44Shared::new(
        Nat44Config {
            rules: vec![DynamicRule {
                inside: "10.0.0.0/8".parse().unwrap(),
                pool: vec!["203.0.113.0/24".parse().unwrap()],
                ports: PortRange::new(1024, 65535).unwrap(),
            }],
            ..Default::default()
        },
        1,
    )
    .unwrap();
    let now = Timestamp::from_secs(1);
    // One worker, fed as the runtime feeds it: a frame over the packet, an output for what
    // the mode originates, links without MTUs or addresses.
    let mut w = Mode::worker(&shared, 0);
    let (mut out, egress) = (Output::new(), Egress::default());
    let mut process = |dir: Direction, pkt: &mut [u8]| {
        let len = pkt.len();
        w.process(now, dir, &mut Frame::new(pkt, 0, len, &mut out), &egress)
    };

    // Outbound templates, one per flow; translating each once installs its session.
    let outbound: Vec<[u8; 46]> = (0..FLOWS as u32)
        .map(|i| {
            udp(
                Ipv4Addr::from(0x0A00_0000 | (i + 1)),
                10_000 + (i % 50_000) as u16,
                Ipv4Addr::new(198, 51, 100, 1 + (i % 200) as u8),
                53,
            )
        })
        .collect();
    // Replies: the translated packet with addresses and ports swapped, checksums refilled.
    let inbound: Vec<[u8; 46]> = outbound
        .iter()
        .map(|t| {
            let mut p = *t;
            assert_eq!(process(Direction::Outbound, &mut p).drop_reason(), None);
            let (src, sport, dst, dport) = udp_endpoints(&p);
            udp(dst, dport, src, sport)
        })
        .collect();
    assert_eq!(Mode::session_count(&shared), FLOWS);
    for (o, i) in outbound.iter().zip(&inbound) {
        let mut p = *i;
        assert_eq!(process(Direction::Inbound, &mut p).drop_reason(), None);
        let (_, _, dst, dport) = udp_endpoints(&p);
        let (src, sport, _, _) = udp_endpoints(o);
        assert_eq!(
            (dst, dport),
            (src, sport),
            "the reply reaches the inside host"
        );
    }

    let mut g = c.benchmark_group("engine");
    g.throughput(Throughput::Elements(1));
    let mut pkt = [0u8; PKT_LEN];
    for (name, dir, templates) in [
        ("outbound_established", Direction::Outbound, &outbound),
        ("inbound_reply", Direction::Inbound, &inbound),
    ] {
        let mut at = 0usize;
        g.bench_function(name, |b| {
            b.iter(|| {
                pkt.copy_from_slice(&templates[at]);
                at = (at + STRIDE) & (FLOWS - 1);
                process(dir, black_box(&mut pkt))
            })
        });
    }
    // The slow path: one established flow's datagram in three fragments (8 + 8 + 10
    // bytes of UDP), first to last: a record filed, found twice, removed. Per fragment.
    let frags: Vec<Vec<u8>> = [(0usize, 8usize, true), (8, 16, true), (16, 26, false)]
        .iter()
        .map(|&(from, to, more)| {
            let mut f = outbound[0][..20].to_vec();
            f.extend_from_slice(&outbound[0][20 + from..20 + to]);
            let mut ip = Ipv4Packet::new_unchecked(&mut f[..]);
            ip.set_total_len((20 + to - from) as u16);
            ip.set_flags_and_offset(false, more, from as u16);
            ip.fill_checksum();
            f
        })
        .collect();
    g.throughput(Throughput::Elements(3));
    let mut buf = [0u8; 64];
    g.bench_function("fragments_3", |b| {
        b.iter(|| {
            for f in &frags {
                let p = &mut buf[..f.len()];
                p.copy_from_slice(f);
                assert_eq!(
                    process(Direction::Outbound, black_box(p)).drop_reason(),
                    None
                );
            }
        })
    });
    g.finish();
    assert_eq!(
        Mode::session_count(&shared),
        FLOWS,
        "no flow was created or lost"
    );
    assert_eq!(shared.fragment_count(), 0, "every datagram completed");
}

criterion_group!(
    benches,
    bench_parse,
    bench_checksum,
    bench_session_table,
    bench_rules,
    bench_engine
);
criterion_main!(benches);
