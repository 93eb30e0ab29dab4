//! Software RSS (receive-side scaling): the Toeplitz hash NICs use, their indirection
//! table, and the step that picks a worker for a raw IP packet.
//!
//! When input arrives on one queue (a pcap, a single-queue interface, the in-memory
//! benchmark) flows can be spread over worker threads with this module, so that a flow
//! always lands on the same worker, exactly as a multi-queue NIC would do it. Only the
//! benchmark dispatches this way, so the module lives in the bench crate: the live
//! gateway's workers get their flows from the NIC's queues (AF_XDP) or from its fanout
//! program (AF_PACKET, `io::afpacket::FlowPlacement`), which places flows in the kernel.
//!
//! This module must never panic on packet bytes, never allocate on the per-packet path
//! (only [`Toeplitz::new`], [`Indirection::new`] and [`Spread::new`] allocate), and
//! never look past the transport ports: it hashes addresses and ports, nothing else.
//!
//! # Toeplitz
//!
//! Microsoft's RSS hash: for every set bit `j` of the input (most significant bit of
//! byte 0 first), XOR in the 32-bit window of the key starting at bit `j`. The input is
//! source address, destination address, source port, destination port (12 bytes for
//! IPv4 with ports, 36 for IPv6 with ports). [`Toeplitz`] precomputes, for each input
//! byte position and byte value, the XOR of the windows of its set bits, so hashing is
//! one table lookup per input byte (36 tables of 256 `u32`, 36 KiB).
//!
//! # Evenness with few flows ([`QueueMap`])
//!
//! With 32 flows, max/min <= 1.2 over 4 or 8 queues means *exactly* 8 or 4 flows per
//! queue (9/7 and 5/4 are already over), so no stateless per-packet map reaches it for
//! arbitrary flow sets: independent random throws of 32 flows give a median max/min of
//! 2.0 over 4 queues and 6.0 over 8, with an empty queue in about 11% of flow sets.
//! Evenness with few flows needs flow-aware placement (assigning flows, not hashing
//! packets), which is not this module's job. With 10,000 flows both maps are within
//! 1.1 over 4 queues and within 1.2 (and a chi-square test at p = 0.001) over 8.
//!
//! Toeplitz is linear over GF(2): `h(a ^ b) = h(a) ^ h(b)`. A NIC takes the low bits of
//! the hash ([`QueueMap::LowBits`]), so flows that differ only in a few input bits
//! (sequential clients, sequential source ports) map to a coset of low-bit patterns:
//! when the key windows of those bits are independent in the low bits, an aligned block
//! of 2^k flows spreads *perfectly*, better than random. [`QueueMap::Mixed`] runs the
//! hash through the MurmurHash3 finalizer (a bijection on `u32`) first, which destroys
//! that structure: every pattern then spreads like random throws, no better, no worse.
//! Measured for 32 TCP flows to one server (`spread_of_32_flows_report`, Microsoft
//! key, max/min for the fixed instance; IPv4 and IPv6 gave the same numbers):
//!
//! | pattern (IPv4 / IPv6)                          | LowBits 4q / 8q | Mixed 4q / 8q |
//! |------------------------------------------------|-----------------|---------------|
//! | 10.0.0.1..=32 / 2001:db8::1..=32, sport 40000+i| 1.29 / 1.67     | ~2 / ~6       |
//! | same clients, random ephemeral sports          | ~2 / ~6         | ~2 / ~6       |
//! | one client, sports 40000..=40031               | 1.00 / 1.00     | ~2 / ~6       |
//! | IPv6 SLAAC random IIDs in a /64, random sports | ~2 / ~6         | ~2 / ~6       |
//!
//! ("~" is the median over 1000 random servers; 1..=32 is not an aligned block, hence
//! 9/7 and 5/3.) So the finalizer does not fix a low-bit bias in these patterns — with
//! the Microsoft key there was none, and IPv6 spread exactly as IPv4 did — and it makes
//! structured patterns worse. `LowBits` is the default (and what the hardware would
//! do); `Mixed` is there for keys whose windows are rank-deficient in the low bits,
//! where it turns a degenerate spread into a random one. It cannot separate flows whose
//! hashes are equal: with [`ToeplitzKey::SYMMETRIC`] (period 16 bits) client 10.0.0.i
//! with source port 40000+i puts all 32 flows on one queue under either map.

use core::fmt;

use wire::{IpProtocol, Ipv4Packet, Ipv6Packet};

/// Largest input the hash takes: two IPv6 addresses and two ports.
pub const MAX_INPUT_LEN: usize = 36;

/// A 40-byte Toeplitz key (40 bytes cover the 36 input bytes of IPv6 with ports).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ToeplitzKey([u8; 40]);

impl ToeplitzKey {
    /// The default key of Microsoft's "Verifying the RSS Hash Calculation" suite, used
    /// by most NIC drivers.
    pub const MICROSOFT: ToeplitzKey = ToeplitzKey([
        0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f,
        0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
        0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
    ]);

    /// `0x6d5a` repeated (Woo & Park, "Scalable TCP Session Monitoring with Symmetric
    /// RSS"): the key repeats every 16 bits, so `hash(a→b) == hash(b→a)` and both
    /// directions of a flow land on the same queue.
    pub const SYMMETRIC: ToeplitzKey = ToeplitzKey(repeat_6d5a());

    /// A key from its 40 bytes.
    #[inline]
    pub const fn new(bytes: [u8; 40]) -> Self {
        ToeplitzKey(bytes)
    }

    /// The key's bytes.
    #[inline]
    pub const fn bytes(&self) -> &[u8; 40] {
        &self.0
    }
}

/// `[0x6d, 0x5a]` twenty times.
const fn repeat_6d5a() -> [u8; 40] {
    let mut out = [0x5a; 40];
    let mut i = 0;
    while i < 40 {
        out[i] = 0x6d;
        i += 2;
    }
    out
}

/// The Toeplitz hash with a precomputed per-byte lookup table.
#[derive(Clone)]
pub struct Toeplitz {
    key: ToeplitzKey,
    /// `table[i][v]`: the hash contribution of byte value `v` at input position `i`.
    table: Vec<[u32; 256]>,
}

impl fmt::Debug for Toeplitz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Toeplitz")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Toeplitz {
    /// Precomputes the lookup tables for `key` (36 KiB; done once, not per packet).
    pub fn new(key: &ToeplitzKey) -> Self {
        let k = &key.0;
        // The 32-bit key window starting at bit `j` (bit 0 = MSB of key byte 0).
        let window = |j: usize| -> u32 {
            let byte = j / 8;
            let mut w: u64 = 0;
            for n in 0..5 {
                w = (w << 8) | u64::from(k.get(byte + n).copied().unwrap_or(0));
            }
            // 40 bits loaded; drop the `j % 8` leading bits, keep the next 32.
            ((w << (j % 8)) >> 8) as u32
        };
        let mut table = vec![[0u32; 256]; MAX_INPUT_LEN];
        for (i, row) in table.iter_mut().enumerate() {
            let bits: [u32; 8] = core::array::from_fn(|b| window(8 * i + b));
            for (v, slot) in row.iter_mut().enumerate() {
                *slot = bits
                    .iter()
                    .enumerate()
                    .filter(|&(b, _)| v & (0x80 >> b) != 0)
                    .fold(0, |acc, (_, w)| acc ^ w);
            }
        }
        Toeplitz { key: *key, table }
    }

    /// The key the tables were built from.
    #[inline]
    pub fn key(&self) -> &ToeplitzKey {
        &self.key
    }

    /// Hashes `input` (at most [`MAX_INPUT_LEN`] bytes are used; the rest is ignored).
    #[inline]
    pub fn hash(&self, input: &[u8]) -> u32 {
        input
            .iter()
            .zip(self.table.iter())
            .fold(0, |h, (&b, row)| h ^ row[usize::from(b)])
    }

    /// IPv4 with ports: `src | dst | sport | dport`, the NIC's input order.
    #[inline]
    pub fn hash_v4(&self, src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> u32 {
        let [s0, s1, s2, s3] = src;
        let [d0, d1, d2, d3] = dst;
        let [p0, p1] = sport.to_be_bytes();
        let [q0, q1] = dport.to_be_bytes();
        self.hash(&[s0, s1, s2, s3, d0, d1, d2, d3, p0, p1, q0, q1])
    }

    /// IPv6 with ports: `src | dst | sport | dport` (36 bytes).
    #[inline]
    pub fn hash_v6(&self, src: &[u8; 16], dst: &[u8; 16], sport: u16, dport: u16) -> u32 {
        let [p0, p1] = sport.to_be_bytes();
        let [q0, q1] = dport.to_be_bytes();
        let mut h = self.hash_v6_addrs(src, dst);
        for (row, b) in self.table.iter().skip(32).zip([p0, p1, q0, q1]) {
            h ^= row[usize::from(b)];
        }
        h
    }

    /// IPv4 addresses only (the 2-tuple NICs use for fragments and non-TCP/UDP).
    #[inline]
    pub fn hash_v4_addrs(&self, src: [u8; 4], dst: [u8; 4]) -> u32 {
        let [s0, s1, s2, s3] = src;
        let [d0, d1, d2, d3] = dst;
        self.hash(&[s0, s1, s2, s3, d0, d1, d2, d3])
    }

    /// IPv6 addresses only (32 bytes).
    #[inline]
    pub fn hash_v6_addrs(&self, src: &[u8; 16], dst: &[u8; 16]) -> u32 {
        self.hash(src)
            ^ self
                .table
                .iter()
                .skip(16)
                .zip(dst)
                .fold(0, |h, (row, &b)| h ^ row[usize::from(b)])
    }
}

/// The NIC's indirection table: hash -> queue (worker).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Indirection {
    /// Queue per entry; the length is a power of two.
    table: Vec<u16>,
    queues: usize,
}

impl Indirection {
    /// Entries in a table made by [`Indirection::new`] (as most NICs have).
    pub const DEFAULT_ENTRIES: usize = 128;

    /// A 128-entry table filled round-robin over `queues` (clamped to 1..=65536).
    pub fn new(queues: usize) -> Self {
        Self::with_size(queues, Self::DEFAULT_ENTRIES)
    }

    /// A table of `entries` (rounded up to a power of two, 1..=65536) filled round-robin
    /// over `queues` (clamped to 1..=65536). Queues beyond `entries` get no traffic.
    pub fn with_size(queues: usize, entries: usize) -> Self {
        let queues = queues.clamp(1, 1 << 16);
        let entries = entries.clamp(1, 1 << 16).next_power_of_two();
        let table = (0..entries)
            .map(|i| u16::try_from(i % queues).unwrap_or(0))
            .collect();
        Indirection { table, queues }
    }

    /// The queue for `hash`: `table[hash & (len - 1)]`, the low bits, as NICs do.
    #[inline]
    pub fn queue(&self, hash: u32) -> usize {
        let mask = self.table.len().wrapping_sub(1);
        self.table
            .get(hash as usize & mask)
            .map_or(0, |&q| usize::from(q))
    }

    /// How many queues the table spreads over.
    #[inline]
    pub fn queues(&self) -> usize {
        self.queues
    }

    /// How many entries the table has.
    #[inline]
    pub fn entries(&self) -> usize {
        self.table.len()
    }
}

/// How the hash is turned into an indirection-table index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum QueueMap {
    /// The low bits of the Toeplitz hash, as NICs do (same queue as the hardware would
    /// pick with the same key and table).
    #[default]
    LowBits,
    /// The MurmurHash3 32-bit finalizer on the hash first: removes Toeplitz's linear
    /// structure, so every address pattern spreads like random throws.
    Mixed,
}

impl QueueMap {
    /// The value whose low bits index the indirection table.
    #[inline]
    pub fn apply(self, hash: u32) -> u32 {
        match self {
            QueueMap::LowBits => hash,
            QueueMap::Mixed => fmix32(hash),
        }
    }
}

/// MurmurHash3's `fmix32`: a bijection on `u32` with full avalanche.
#[inline]
const fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// Picks a worker for a raw IP packet (IPv4 or IPv6, no link header).
///
/// TCP and UDP hash the 4-tuple; fragments (IPv4 MF or offset, any IPv6 Fragment
/// header — so all fragments of a datagram stay together), ICMP, a transport header
/// cut short, a malformed IPv6 extension chain and every other protocol hash the
/// 2-tuple, as NICs do. Never panics; packets with no parsable IP header go to queue 0.
#[derive(Clone, Debug)]
pub struct Rss {
    toeplitz: Toeplitz,
    table: Indirection,
    map: QueueMap,
}

impl Rss {
    /// NIC-like RSS over `queues` workers: `key`, 128-entry table, [`QueueMap::LowBits`].
    pub fn new(key: &ToeplitzKey, queues: usize) -> Self {
        Self::new_with(key, queues, QueueMap::LowBits)
    }

    /// RSS over `queues` workers with the chosen [`QueueMap`].
    pub fn new_with(key: &ToeplitzKey, queues: usize, map: QueueMap) -> Self {
        Rss {
            toeplitz: Toeplitz::new(key),
            table: Indirection::new(queues),
            map,
        }
    }

    /// The worker for `ip_packet`; 0 when it has no parsable IP header.
    #[inline]
    pub fn queue_of(&self, ip_packet: &[u8]) -> usize {
        self.hash_of(ip_packet).map_or(0, |h| self.queue_of_hash(h))
    }

    /// The worker for a Toeplitz hash already computed (e.g. reported by the NIC).
    #[inline]
    pub fn queue_of_hash(&self, hash: u32) -> usize {
        self.table.queue(self.map.apply(hash))
    }

    /// The Toeplitz hash of `ip_packet` (before the [`QueueMap`]), as a NIC with the
    /// same key would report it; `None` when it has no parsable IP header.
    pub fn hash_of(&self, ip_packet: &[u8]) -> Option<u32> {
        match ip_packet.first().map(|b| b >> 4) {
            Some(4) => {
                let p = Ipv4Packet::new_checked(ip_packet).ok()?;
                let (src, dst) = (p.src_bytes(), p.dst_bytes());
                let ports = match p.protocol() {
                    IpProtocol::Tcp | IpProtocol::Udp if !p.is_fragment() => ports(p.payload()),
                    _ => None,
                };
                Some(match ports {
                    Some((sp, dp)) => self.toeplitz.hash_v4(src, dst, sp, dp),
                    None => self.toeplitz.hash_v4_addrs(src, dst),
                })
            }
            Some(6) => {
                let p = Ipv6Packet::new_checked(ip_packet).ok()?;
                let (src, dst) = (p.src_bytes(), p.dst_bytes());
                let ports = match p.upper_layer() {
                    Ok(up) if up.fragment.is_none() => match up.protocol {
                        IpProtocol::Tcp | IpProtocol::Udp => {
                            ports(ip_packet.get(up.offset..).unwrap_or(&[]))
                        }
                        _ => None,
                    },
                    _ => None,
                };
                Some(match ports {
                    Some((sp, dp)) => self.toeplitz.hash_v6(&src, &dst, sp, dp),
                    None => self.toeplitz.hash_v6_addrs(&src, &dst),
                })
            }
            _ => None,
        }
    }

    /// How many workers packets are spread over.
    #[inline]
    pub fn queues(&self) -> usize {
        self.table.queues()
    }

    /// The queue map in use.
    #[inline]
    pub fn map(&self) -> QueueMap {
        self.map
    }
}

/// Source and destination port: the first four bytes of a TCP or UDP header.
#[inline]
fn ports(l4: &[u8]) -> Option<(u16, u16)> {
    match l4.get(..4) {
        Some(&[a, b, c, d]) => Some((u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d]))),
        _ => None,
    }
}

/// How evenly items spread over queues.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spread {
    /// Items counted per queue.
    pub per_queue: Vec<u64>,
}

impl Spread {
    /// Zero counts for `queues` queues.
    pub fn new(queues: usize) -> Self {
        Spread {
            per_queue: vec![0; queues],
        }
    }

    /// Counts `n` items on `queue` (a queue out of range is ignored).
    #[inline]
    pub fn add(&mut self, queue: usize, n: u64) {
        if let Some(c) = self.per_queue.get_mut(queue) {
            *c = c.saturating_add(n);
        }
    }

    /// The fewest items on any queue (0 with no queues).
    pub fn min(&self) -> u64 {
        self.per_queue.iter().copied().min().unwrap_or(0)
    }

    /// The most items on any queue (0 with no queues).
    pub fn max(&self) -> u64 {
        self.per_queue.iter().copied().max().unwrap_or(0)
    }

    /// `max / min`; `f64::INFINITY` if some queue got nothing (or there are no queues).
    pub fn ratio(&self) -> f64 {
        match self.min() {
            0 => f64::INFINITY,
            min => self.max() as f64 / min as f64,
        }
    }

    /// All items counted.
    pub fn total(&self) -> u64 {
        self.per_queue.iter().fold(0, |a, &c| a.saturating_add(c))
    }
}

#[cfg(test)]
mod tests;
