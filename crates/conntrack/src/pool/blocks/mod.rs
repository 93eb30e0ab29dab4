//! Port-block allocation (PBA, RFC 7422 "deterministic/bulk port allocation" in its
//! bulk form; RFC 8158 natEvent 16/17): a subscriber's ports come from blocks of
//! `size` consecutive ports on its paired address, so the carrier logs one event per
//! block instead of one per binding.
//!
//! - A pool address's range `first..=last` is cut into `count = ports / size` blocks;
//!   the remainder at the top of the range is not handed out while PBA is on.
//! - A block is the subscriber's in every protocol (TCP, UDP, ICMP ids): RFC 8158's
//!   port-block record carries no protocol, so a range must name one subscriber.
//! - A new binding takes a free port inside one of its subscriber's blocks, the search
//!   starting at a keyed-hash offset within the block (RFC 6056 spirit); the inside
//!   port is kept only when it lies in one of the subscriber's blocks and is free.
//! - When every block it holds is full, the subscriber gets a further block, picked at
//!   random among the address's free blocks, up to `per_subscriber` blocks
//!   ([`PoolError::BlockLimit`]); no free block: [`PoolError::PairedAddressFull`].
//! - A block is released when its last port comes back, that is after the port-reuse
//!   hold of its last binding ([`PortPool::handle_timeout_blocks`]).
//!
//! Locking: one mutex per address, taken only when a binding is made or its
//! port comes back, never per packet; the port bits stay the pool's atomic bitmap, so a
//! port forward reserved inside a block is simply never handed out. Memory per address,
//! allocated on its first block: the block states (21 bytes per block)
//! and a subscriber map sized for one subscriber per block, so it never grows after.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::sparse::Lazy;
use super::{AddrPorts, PoolError, PortPool};
use crate::tuple::{Endpoint, Proto};

/// No block (end of a subscriber's list).
const NIL: u16 = u16::MAX;

/// Largest `per_subscriber` accepted.
pub const MAX_BLOCKS_PER_SUBSCRIBER: u16 = 1024;

/// A port block taken or released: what an RFC 8158 port-block event reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// The pool address the block is on.
    pub addr: Ipv4Addr,
    /// First port of the block.
    pub first: u16,
    /// Ports in the block.
    pub len: u16,
    /// The subscriber holding it (the key the caller passed).
    pub subscriber: u64,
    /// The inside host whose binding took the block.
    pub host: Ipv4Addr,
}

impl Block {
    /// The last port of the block.
    pub fn last(&self) -> u16 {
        self.first + (self.len - 1)
    }
}

/// A fresh binding's public endpoint, and the block it opened if it needed one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocated {
    /// The public endpoint.
    pub public: Endpoint,
    /// The block taken for it, if it was the subscriber's first port there.
    pub block: Option<Block>,
}

/// Block counters of a pool (cumulative, all addresses and protocols).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockStats {
    /// Blocks taken so far.
    pub taken: u64,
    /// Blocks released so far.
    pub released: u64,
    /// New bindings refused because their subscriber held `per_subscriber` full blocks.
    pub limit_refused: u64,
    /// New bindings refused because the paired address had no free block.
    pub exhausted: u64,
}

/// One address's blocks (under its mutex).
#[derive(Debug)]
struct Map {
    /// Holder of each block (meaningful while `held`).
    owner: Box<[u64]>,
    /// Inside host that opened it.
    host: Box<[u32]>,
    /// Ports of the block in use or waiting out the hold, all protocols.
    used: Box<[u32]>,
    held: Box<[bool]>,
    /// Next block of the same holder, or [`NIL`].
    next: Box<[u16]>,
    /// Holder -> (first block, blocks held).
    subs: HashMap<u64, (u16, u16)>,
    /// Blocks nobody holds.
    free: Vec<u16>,
    /// Bumped at each search (the RFC 6056 counter).
    bump: u64,
}

impl Map {
    fn new(count: u16) -> Self {
        let n = usize::from(count);
        Self {
            owner: vec![0; n].into(),
            host: vec![0; n].into(),
            used: vec![0; n].into(),
            held: vec![false; n].into(),
            next: vec![NIL; n].into(),
            // At most one holder per block: never grows after this.
            subs: HashMap::with_capacity(n),
            free: (0..count).rev().collect(),
            bump: 0,
        }
    }

    fn bytes(count: u16) -> usize {
        let n = usize::from(count);
        n * (8 + 4 + 4 + 1 + 2 + 2) + n * 8 / 7 * (8 + 4 + 1)
    }

    /// Unlinks block `b` from its holder and frees it.
    fn release(&mut self, b: u16) {
        let bi = usize::from(b);
        let sub = self.owner[bi];
        if let Some(&(head, n)) = self.subs.get(&sub) {
            let new_head = if head == b {
                self.next[bi]
            } else {
                let mut at = head;
                while at != NIL {
                    let nx = self.next[usize::from(at)];
                    if nx == b {
                        self.next[usize::from(at)] = self.next[bi];
                        break;
                    }
                    at = nx;
                }
                head
            };
            if n <= 1 {
                self.subs.remove(&sub);
            } else {
                self.subs.insert(sub, (new_head, n - 1));
            }
        }
        self.held[bi] = false;
        self.next[bi] = NIL;
        self.used[bi] = 0;
        self.free.push(b);
    }
}

#[derive(Debug, Default)]
struct AddrBlocks {
    map: Mutex<Option<Map>>,
}

/// The block state of a pool with PBA on.
#[derive(Debug)]
pub(super) struct Blocks {
    size: u16,
    per_sub: u16,
    count: u16,
    sets: Lazy<AddrBlocks>,
    bytes: AtomicUsize,
    taken: AtomicU64,
    released: AtomicU64,
    limit_refused: AtomicU64,
    exhausted: AtomicU64,
}

impl Blocks {
    pub(super) fn new(addrs: u64, ports: u32, size: u16, per_sub: u16) -> Self {
        let size = size.max(1);
        Self {
            size,
            per_sub: per_sub.clamp(1, MAX_BLOCKS_PER_SUBSCRIBER),
            count: (ports / u32::from(size)).min(u32::from(NIL - 1)) as u16,
            sets: Lazy::new(addrs),
            bytes: AtomicUsize::new(0),
            taken: AtomicU64::new(0),
            released: AtomicU64::new(0),
            limit_refused: AtomicU64::new(0),
            exhausted: AtomicU64::new(0),
        }
    }

    fn bytes(&self) -> usize {
        self.sets.bytes() + self.bytes.load(Ordering::Relaxed)
    }
}

/// The first free port of `bits` in `lo..lo+len`, searching from `lo+start` and wrapping.
fn free_in(bits: &[AtomicU64], lo: u32, len: u32, start: u32) -> Option<u16> {
    let mut off = start % len;
    let mut scanned = 0u32;
    while scanned < len {
        let p = lo + off;
        let word = bits.get(p as usize / 64)?.load(Ordering::Relaxed);
        let free = !word >> (p % 64);
        let in_word = (64 - p % 64).min(len - off);
        if free != 0 && free.trailing_zeros() < in_word {
            return u16::try_from(p + free.trailing_zeros()).ok();
        }
        scanned += in_word;
        off += in_word;
        if off >= len {
            off = 0;
        }
    }
    None
}

impl PortPool {
    /// The same pool handing out ports in blocks of `size` ports, at most `per_subscriber`
    /// blocks per subscriber and address (`size` 0: off). Call before the first allocation.
    pub fn with_blocks(mut self, size: u16, per_subscriber: u16) -> Self {
        self.blocks = (size > 0).then(|| {
            Blocks::new(
                self.addrs.len(),
                self.ports_per_addr(),
                size,
                per_subscriber,
            )
        });
        self
    }

    /// Ports per block (0: PBA off).
    pub fn block_size(&self) -> u16 {
        self.blocks.as_ref().map_or(0, |b| b.size)
    }

    /// Blocks per address and protocol (0: PBA off).
    pub fn blocks_per_addr(&self) -> u16 {
        self.blocks.as_ref().map_or(0, |b| b.count)
    }

    /// Block counters (all zero with PBA off).
    pub fn block_stats(&self) -> BlockStats {
        self.blocks
            .as_ref()
            .map_or(BlockStats::default(), |b| BlockStats {
                taken: b.taken.load(Ordering::Relaxed),
                released: b.released.load(Ordering::Relaxed),
                limit_refused: b.limit_refused.load(Ordering::Relaxed),
                exhausted: b.exhausted.load(Ordering::Relaxed),
            })
    }

    /// Heap bytes of the block state (0 with PBA off).
    pub(super) fn block_bytes(&self) -> usize {
        self.blocks.as_ref().map_or(0, Blocks::bytes)
    }

    /// The blocks `subscriber` holds on `addr`, as `(first, last)` port pairs.
    pub fn blocks_of(&self, addr: Ipv4Addr, subscriber: u64) -> Vec<(u16, u16)> {
        let mut out = Vec::new();
        self.with_map(addr, |m, first, size| {
            if let Some(&(mut at, _)) = m.subs.get(&subscriber) {
                while at != NIL {
                    let lo = first + u32::from(at) * u32::from(size);
                    out.push((lo as u16, (lo + u32::from(size) - 1) as u16));
                    at = m.next[usize::from(at)];
                }
            }
        });
        out
    }

    /// Every held block on `addr`: `(first port, holder, ports used in all protocols)`.
    pub fn held_blocks(&self, addr: Ipv4Addr) -> Vec<(u16, u64, u32)> {
        let mut out = Vec::new();
        self.with_map(addr, |m, first, size| {
            for b in 0..m.held.len() {
                if m.held[b] {
                    let lo = first + b as u32 * u32::from(size);
                    out.push((lo as u16, m.owner[b], m.used[b]));
                }
            }
        });
        out
    }

    fn with_map(&self, addr: Ipv4Addr, f: impl FnOnce(&Map, u32, u16)) {
        let Some(bl) = &self.blocks else { return };
        let Some(set) = self.addrs.index_of(addr).and_then(|i| bl.sets.get(i)) else {
            return;
        };
        if let Ok(g) = set.map.lock() {
            if let Some(m) = g.as_ref() {
                f(m, u32::from(self.first), bl.size);
            }
        }
    }

    /// Hands out a public endpoint for `inside`, whose ports are counted against
    /// `subscriber`: with PBA off, [`allocate`](Self::allocate); with PBA on, a port in one
    /// of the subscriber's blocks on the paired address, taking a new block if needed.
    #[inline]
    pub fn allocate_for(
        &self,
        proto: Proto,
        inside: Endpoint,
        subscriber: u64,
        preserve_port: bool,
        worker: usize,
    ) -> Result<Allocated, PoolError> {
        match &self.blocks {
            None => self
                .allocate(proto, inside, preserve_port, worker)
                .map(|public| Allocated {
                    public,
                    block: None,
                }),
            Some(bl) => self.allocate_in_block(bl, proto, inside, subscriber, preserve_port),
        }
    }

    fn allocate_in_block(
        &self,
        bl: &Blocks,
        proto: Proto,
        inside: Endpoint,
        subscriber: u64,
        preserve_port: bool,
    ) -> Result<Allocated, PoolError> {
        let ai = self.paired_index(inside.addr).ok_or(PoolError::Empty)?;
        let (Some(addr), Some(ap), Some(set)) = (
            self.addrs.nth(ai),
            self.ports.get_or_init(ai),
            bl.sets.get_or_init(ai),
        ) else {
            return Err(PoolError::Empty);
        };
        if bl.count == 0 {
            return Err(PoolError::PairedAddressFull);
        }
        let Ok(mut guard) = set.map.lock() else {
            return Err(PoolError::PairedAddressFull);
        };
        let m = guard.get_or_insert_with(|| {
            bl.bytes.fetch_add(Map::bytes(bl.count), Ordering::Relaxed);
            Map::new(bl.count)
        });
        let bits = ap.bits(proto, &self.bitmap_bytes);
        let (first, size) = (u32::from(self.first), u32::from(bl.size));
        let block_of = |port: u16| (u32::from(port).wrapping_sub(first) / size) as usize;
        let id = u64::from(u32::from(inside.addr)) << 24
            | u64::from(inside.port) << 8
            | proto.index() as u64;
        m.bump = m.bump.wrapping_add(1);
        let h = self.key.hash2(id, m.bump ^ 0x7062_6100_0000_0000);
        let take_in = |m: &mut Map, b: u16| -> Option<u16> {
            let lo = first + u32::from(b) * size;
            if preserve_port
                && block_of(inside.port) == usize::from(b)
                && u32::from(inside.port) >= first
                && ap.take(proto, inside.port, &self.bitmap_bytes)
            {
                m.used[usize::from(b)] += 1;
                return Some(inside.port);
            }
            // A lost race (a port forward reserved meanwhile) looks again.
            for _ in 0..4 {
                let p = free_in(bits, lo, size, (h as u32) % size)?;
                if ap.take(proto, p, &self.bitmap_bytes) {
                    m.used[usize::from(b)] += 1;
                    return Some(p);
                }
            }
            None
        };
        // The subscriber's blocks first (`used` counts every protocol: only the bitmap
        // says whether this one has a free port in `proto`).
        let (head, held) = m.subs.get(&subscriber).copied().unwrap_or((NIL, 0));
        let mut at = head;
        while at != NIL {
            if let Some(p) = take_in(m, at) {
                return Ok(Allocated {
                    public: Endpoint::new(addr, p),
                    block: None,
                });
            }
            at = m.next[usize::from(at)];
        }
        if held >= bl.per_sub {
            bl.limit_refused.fetch_add(1, Ordering::Relaxed);
            return Err(PoolError::BlockLimit);
        }
        // A new block, chosen at random among the free ones.
        if m.free.is_empty() {
            bl.exhausted.fetch_add(1, Ordering::Relaxed);
            return Err(PoolError::PairedAddressFull);
        }
        let i = ((h >> 32) % m.free.len() as u64) as usize;
        let b = m.free.swap_remove(i);
        let bi = usize::from(b);
        m.held[bi] = true;
        m.owner[bi] = subscriber;
        m.host[bi] = u32::from(inside.addr);
        m.used[bi] = 0;
        m.next[bi] = head;
        m.subs.insert(subscriber, (b, held + 1));
        let Some(p) = take_in(m, b) else {
            // Every port of it is a port forward: give it back and say full.
            m.release(b);
            bl.exhausted.fetch_add(1, Ordering::Relaxed);
            return Err(PoolError::PairedAddressFull);
        };
        bl.taken.fetch_add(1, Ordering::Relaxed);
        Ok(Allocated {
            public: Endpoint::new(addr, p),
            block: Some(self.block_at(bl, addr, m, b)),
        })
    }

    fn block_at(&self, bl: &Blocks, addr: Ipv4Addr, m: &Map, b: u16) -> Block {
        let bi = usize::from(b);
        Block {
            addr,
            first: (u32::from(self.first) + u32::from(b) * u32::from(bl.size)) as u16,
            len: bl.size,
            subscriber: m.owner[bi],
            host: Ipv4Addr::from(m.host[bi]),
        }
    }

    /// Frees port `port` of address `ai` and, with PBA on, counts it out of its block:
    /// the block released when it was its last port.
    pub(super) fn give_back_port(
        &self,
        ai: u64,
        ap: &AddrPorts,
        proto: Proto,
        port: u16,
    ) -> Option<Block> {
        ap.give_back(proto, port);
        let bl = self.blocks.as_ref()?;
        let set = bl.sets.get(ai)?;
        let mut g = set.map.lock().ok()?;
        let m = g.as_mut()?;
        let b = (u32::from(port).checked_sub(u32::from(self.first))? / u32::from(bl.size)) as u16;
        let bi = usize::from(b);
        if bi >= m.held.len() || !m.held[bi] || m.used[bi] == 0 {
            return None;
        }
        m.used[bi] -= 1;
        if m.used[bi] > 0 {
            return None;
        }
        let block = self.block_at(bl, self.addrs.nth(ai)?, m, b);
        m.release(b);
        bl.released.fetch_add(1, Ordering::Relaxed);
        Some(block)
    }

    /// Takes `public` for a live binding of `subscriber` (host `host`) in a pool built by a
    /// reload, with its block: the block becomes the subscriber's if nobody holds it.
    /// False if the port was taken already or its block is another subscriber's (the
    /// port is still marked taken, outside PBA's accounting).
    pub fn adopt(&self, proto: Proto, public: Endpoint, subscriber: u64, host: Ipv4Addr) -> bool {
        if !self.reserve(proto, public) {
            return false;
        }
        let Some(bl) = &self.blocks else { return true };
        let Some(ai) = self.addrs.index_of(public.addr) else {
            return false;
        };
        let Some(Ok(mut g)) = bl.sets.get_or_init(ai).map(|s| s.map.lock()) else {
            return false;
        };
        let m = g.get_or_insert_with(|| {
            bl.bytes.fetch_add(Map::bytes(bl.count), Ordering::Relaxed);
            Map::new(bl.count)
        });
        let b = ((u32::from(public.port) - u32::from(self.first)) / u32::from(bl.size)) as u16;
        let bi = usize::from(b);
        if bi >= m.held.len() {
            return false;
        }
        if m.held[bi] {
            if m.owner[bi] != subscriber {
                return false;
            }
            m.used[bi] += 1;
            return true;
        }
        if let Some(i) = m.free.iter().position(|&f| f == b) {
            m.free.swap_remove(i);
        }
        let (head, held) = m.subs.get(&subscriber).copied().unwrap_or((NIL, 0));
        m.held[bi] = true;
        m.owner[bi] = subscriber;
        m.host[bi] = u32::from(host);
        m.used[bi] = 1;
        m.next[bi] = head;
        m.subs.insert(subscriber, (b, held + 1));
        bl.taken.fetch_add(1, Ordering::Relaxed);
        true
    }
}

#[cfg(test)]
mod tests;
