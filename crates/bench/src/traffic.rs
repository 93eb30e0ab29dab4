//! Benchmark traffic: realistic NAT44 packets in both directions, built once, replayed
//! many times. Outbound packets come from inside hosts; inbound packets are the servers'
//! replies addressed to the public endpoints the engine actually assigned (learned by
//! sending each flow's first packet through the engine before timing starts).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use conntrack::Timestamp;
use engine::config::PortRange;
use engine::nat44::Nat44Shared;
use engine::nat44::{DynamicRule, Nat44Config};
use engine::{Direction, Mode};
use wire::checksum::{checksum, combine, fold, pseudo_header_v4, pseudo_header_v6, sum};
use xlat::prefix::Ipv4Prefix;

use super::run::Driver;

/// Frame sizes on the wire, FCS included (RFC 2544 style).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum FrameMix {
    /// Every frame this many bytes (64..=1518).
    Fixed(usize),
    /// Simple IMIX: 64, 594 and 1518-byte frames in the ratio 7:4:1.
    Imix,
}

impl FrameMix {
    /// The frame size of packet number `i`.
    pub fn size(self, i: usize) -> usize {
        match self {
            FrameMix::Fixed(n) => n.clamp(64, 1518),
            FrameMix::Imix => match i % 12 {
                0..=6 => 64,
                7..=10 => 594,
                _ => 1518,
            },
        }
    }

    /// Label for tables.
    pub fn label(self) -> String {
        match self {
            FrameMix::Fixed(n) => n.to_string(),
            FrameMix::Imix => "IMIX".into(),
        }
    }
}

/// Where a packet stands in the replay buffer and what its translation must give.
#[derive(Clone, Copy, Debug)]
pub struct Pkt {
    /// Offset of the IP packet in the byte store.
    pub off: u32,
    /// IP length.
    pub len: u16,
    /// Frame length on the wire (FCS included).
    pub frame: u16,
    /// Bytes the engine may rewrite (IP + transport header): restored before each replay.
    pub hdr: u8,
    /// Direction.
    pub dir: Direction,
    /// The endpoint the translation must produce: outbound the source, inbound the
    /// destination. When the output is IPv6, the address is [`Prepared::v6_of`] this one.
    pub expect: (Ipv4Addr, u16),
}

/// A prepared engine with traffic for it.
pub struct Prepared<E = Arc<Nat44Shared>> {
    /// The engine instance (sessions for every flow already installed).
    pub shared: E,
    /// Packet descriptors, in replay order.
    pub packets: Vec<Pkt>,
    /// Pristine packet bytes.
    pub bytes: Vec<u8>,
    /// The clock value (ns) the warm-up used; replay clocks start after it.
    pub warm_at: u64,
    /// For engines that emit IPv6: the IPv6 address an expected IPv4 address stands for
    /// (NAT64: the IPv6 host; CLAT: the host's CLAT address). `None`: IPv4 out only.
    pub v6_of: Option<fn(Ipv4Addr) -> Ipv6Addr>,
}

/// A tiny deterministic generator (xorshift64*).
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// The inside endpoint of flow `i`: hosts 10.x.y.z with 16 flows per host.
pub fn inside_of(i: usize) -> (Ipv4Addr, u16) {
    let host = (i / 16) as u32 + 1;
    (
        Ipv4Addr::from(0x0A00_0000 | (host & 0x00FF_FFFF)),
        20000 + (i % 16) as u16 * 7,
    )
}

/// The server of flow `i` (outside, never one of ours).
pub fn server_of(i: usize) -> (Ipv4Addr, u16) {
    let s = (i as u32).wrapping_mul(2_654_435_761);
    let addr = if s & 1 == 0 {
        Ipv4Addr::new(198, 51, 100, (s >> 8) as u8)
    } else {
        Ipv4Addr::new(192, 0, 2, (s >> 8) as u8)
    };
    (addr, [80, 443, 53, 123][(s >> 16) as usize % 4])
}

/// Writes an IPv4 + TCP (ACK) or UDP packet of `ip_len` bytes into `out`, checksums valid.
pub fn build(
    out: &mut Vec<u8>,
    tcp: bool,
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
    ip_len: usize,
) -> usize {
    let start = out.len();
    let l4 = if tcp { 20 } else { 8 };
    let ip_len = ip_len.max(20 + l4);
    out.resize(start + ip_len, 0);
    let p = &mut out[start..];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
    p[6] = 0x40;
    p[8] = 64;
    p[9] = if tcp { 6 } else { 17 };
    p[12..16].copy_from_slice(&src.0.octets());
    p[16..20].copy_from_slice(&dst.0.octets());
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    for (k, b) in p[20 + l4..].iter_mut().enumerate() {
        *b = k as u8;
    }
    let seg = &mut p[20..];
    seg[0..2].copy_from_slice(&src.1.to_be_bytes());
    seg[2..4].copy_from_slice(&dst.1.to_be_bytes());
    if tcp {
        seg[4..8].copy_from_slice(&1_000_000u32.to_be_bytes());
        seg[8..12].copy_from_slice(&2_000_000u32.to_be_bytes());
        seg[12] = 0x50;
        seg[13] = 0x10; // ACK: established traffic
        seg[14..16].copy_from_slice(&64240u16.to_be_bytes());
    } else {
        seg[4..6].copy_from_slice(&((ip_len - 20) as u16).to_be_bytes());
    }
    let csum_at = if tcp { 16 } else { 6 };
    let proto = if tcp { 6 } else { 17 };
    let c = !fold(combine(
        pseudo_header_v4(src.0.octets(), dst.0.octets(), proto, (ip_len - 20) as u16),
        sum(seg),
    ));
    let c = if c == 0 && !tcp { 0xffff } else { c };
    seg[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
    20 + l4
}

/// The NAT44 configuration for a benchmark with `rules` rules: one rule covering the
/// flows. hosts (10.0.0.0/8 -> 203.0.113.0/24) plus
/// `rules - 1` more specific ones inside 10.0.0.0/8 with their own one-address pools.
pub fn config(rules: usize, max_sessions: usize) -> Nat44Config {
    let mut rng = Rng(0x0005_EED0_F4A7);
    let mut seen = std::collections::HashSet::new();
    let mut list = vec![DynamicRule {
        inside: "10.0.0.0/8".parse().expect("literal"),
        pool: vec!["203.0.113.0/24".parse().expect("literal")],
        ports: PortRange::default(),
    }];
    seen.insert(list[0].inside);
    let mut k = 0u32;
    while list.len() < rules {
        let len = 12 + (rng.next_u64() % 19) as u8; // /12 .. /30
        let addr = 0x0A00_0000 | (rng.next_u64() as u32 & 0x00FF_FFFF);
        let inside =
            Ipv4Prefix::new(Ipv4Addr::from(addr & xlat::prefix::mask(len)), len).expect("masked");
        if !seen.insert(inside) {
            continue;
        }
        // One pool address each, from 100.64.0.0/10 (4M addresses).
        let pool = Ipv4Prefix::new(Ipv4Addr::from(0x6440_0000 + k), 32).expect("host prefix");
        k += 1;
        list.push(DynamicRule {
            inside,
            pool: vec![pool],
            ports: PortRange::default(),
        });
    }
    Nat44Config {
        rules: list,
        max_sessions,
        ..Nat44Config::default()
    }
}

/// Builds the engine and the traffic: `flows` flows (half TCP, half UDP), one outbound
/// and one inbound packet each, shuffled. `workers` sizes the engine's worker slots.
pub fn prepare(flows: usize, frames: FrameMix, rules: usize, workers: usize) -> Prepared {
    let shared = Nat44Shared::new(config(rules, flows + flows / 4 + 1024), workers)
        .expect("benchmark config is valid");
    let mut warm = Mode::worker(&shared, 0);
    let mut driver = Driver::new();
    let warm_at = Timestamp::from_secs(1000).as_nanos();
    let mut bytes = Vec::with_capacity(flows * 2 * 64);
    let mut packets = Vec::with_capacity(flows * 2);
    let mut scratch = Vec::with_capacity(1600);
    // One warm-up packet from `src` to `dst` through the engine (left in `scratch`);
    // whether it was forwarded.
    let mut warm_up = |scratch: &mut Vec<u8>, dir, tcp, src, dst| {
        scratch.clear();
        build(scratch, tcp, src, dst, 46);
        driver
            .process_all(&mut warm, Timestamp::from_nanos(warm_at), dir, scratch)
            .is_forward()
    };
    for i in 0..flows {
        let tcp = i % 2 == 0;
        let (inside, server) = (inside_of(i), server_of(i));
        let size = frames.size(2 * i);
        // Learn the public endpoint by translating the flow's first packet.
        if !warm_up(&mut scratch, Direction::Outbound, tcp, inside, server) {
            continue; // counted in the engine; the flow just does not take part
        }
        let public = (
            Ipv4Addr::new(scratch[12], scratch[13], scratch[14], scratch[15]),
            u16::from_be_bytes([scratch[20], scratch[21]]),
        );
        // And one reply, so the flow is established before timing starts: a TCP
        // session seen only outbound stays "picked up" and every segment would run the
        // connection-tracking state machine instead of the established path.
        if !warm_up(&mut scratch, Direction::Inbound, tcp, server, public) {
            continue;
        }
        for (dir, src, dst, size, expect) in [
            (Direction::Outbound, inside, server, size, public),
            (
                Direction::Inbound,
                server,
                public,
                frames.size(2 * i + 1),
                inside,
            ),
        ] {
            let off = bytes.len();
            let ip_len = size - 18; // Ethernet header (14) and FCS (4)
            let hdr = build(&mut bytes, tcp, src, dst, ip_len);
            packets.push(Pkt {
                off: off as u32,
                len: ip_len as u16,
                frame: size as u16,
                hdr: hdr as u8,
                dir,
                expect,
            });
        }
    }
    warm.quiescent();
    shuffle(&mut packets);
    Prepared {
        shared,
        packets,
        bytes,
        warm_at,
        v6_of: None,
    }
}

/// Shuffles the replay order (the same deterministic shuffle for every workload).
pub fn shuffle(packets: &mut [Pkt]) {
    let mut rng = Rng(0xB0A7);
    for i in (1..packets.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        packets.swap(i, j);
    }
}

/// Checks a translated packet (IPv4, or IPv6 when `v6_of` says what to expect): every
/// checksum by full recompute, and the endpoint.
pub fn verify(p: &[u8], pkt: &Pkt, v6_of: Option<fn(Ipv4Addr) -> Ipv6Addr>) -> bool {
    match p.first().map(|b| b >> 4) {
        Some(4) => verify4(p, pkt),
        Some(6) => v6_of.is_some_and(|f| verify6(p, pkt, f)),
        _ => false,
    }
}

/// An IPv6 packet with UDP or TCP straight after the fixed header: the payload length,
/// the transport checksum, and the endpoint (`v6_of` of the expected one).
fn verify6(p: &[u8], pkt: &Pkt, v6_of: fn(Ipv4Addr) -> Ipv6Addr) -> bool {
    if p.len() < 48 || usize::from(u16::from_be_bytes([p[4], p[5]])) != p.len() - 40 {
        return false;
    }
    let nh = p[6];
    if nh != 6 && nh != 17 {
        return false;
    }
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src.copy_from_slice(&p[8..24]);
    dst.copy_from_slice(&p[24..40]);
    let seg = &p[40..];
    if fold(combine(
        pseudo_header_v6(&src, &dst, nh, seg.len() as u32),
        sum(seg),
    )) != 0xffff
    {
        return false;
    }
    let got = match pkt.dir {
        Direction::Outbound => (Ipv6Addr::from(src), u16::from_be_bytes([seg[0], seg[1]])),
        Direction::Inbound => (Ipv6Addr::from(dst), u16::from_be_bytes([seg[2], seg[3]])),
    };
    got == (v6_of(pkt.expect.0), pkt.expect.1)
}

fn verify4(p: &[u8], pkt: &Pkt) -> bool {
    let ihl = usize::from(p[0] & 0x0f) * 4;
    if p.len() < ihl + 8 || checksum(&p[..ihl]) != 0 {
        return false;
    }
    let src = [p[12], p[13], p[14], p[15]];
    let dst = [p[16], p[17], p[18], p[19]];
    let seg = &p[ihl..];
    if fold(combine(
        pseudo_header_v4(src, dst, p[9], seg.len() as u16),
        sum(seg),
    )) != 0xffff
    {
        return false;
    }
    let got = match pkt.dir {
        Direction::Outbound => (Ipv4Addr::from(src), u16::from_be_bytes([seg[0], seg[1]])),
        Direction::Inbound => (Ipv4Addr::from(dst), u16::from_be_bytes([seg[2], seg[3]])),
    };
    got == pkt.expect
}
