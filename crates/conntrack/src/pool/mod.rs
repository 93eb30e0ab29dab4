//! Public address and port pools for dynamic NAPT, shared by all workers without locks.
//!
//! - **Paired pooling** (RFC 4787 REQ-2), stateless: an inside host's public address is
//!   `pool[hash(host) mod |pool|]`, the same on every core and for as long as the pool
//!   is unchanged. A host whose address has no free port is refused rather than moved to
//!   another address, which is what "paired" promises its peers.
//! - **No port handed out twice**: one bit per (address, protocol, port), taken with an
//!   atomic fetch-or; whoever sets the bit owns the port.
//! - **Unpredictable ports** (RFC 6056 §3.3.4, algorithm 4 "double-hash"): the search
//!   starts at `F(inside endpoint) + table[G(inside endpoint)]`, `F` and `G` keyed with a
//!   per-process secret ([`SipKey`]) and `table` a small per-worker array of counters
//!   bumped at each allocation; the first free port from there is taken. An outsider who
//!   sees one binding's port learns nothing about the next one's.
//! - **Per-worker slices**: each worker starts its search in its own slice of the range
//!   and bumps only its own counters, so workers do not contend on the same cache lines;
//!   any worker may still use any free port, so an uneven load never strands free ports.
//! - **Reuse hold** ([`hold`]): a released port stays taken for `hold` (default 120 s)
//!   so late packets of the old flow never reach a new owner. Releases come from the
//!   reaper. The held ports are a ring of fixed capacity
//!   ([`with_hold_capacity`](PortPool::with_hold_capacity)): a full ring gives its
//!   oldest port back early rather than grow with the rate at which flows end.
//! - **Port preservation** when asked and the inside port is free and in range.
//! - **Memory follows use** ([`sparse`]): the addresses are ranges, and an address's
//!   bitmaps are allocated the first time it hands out a port.

mod blocks;
mod deterministic;
mod hold;
mod sparse;

pub use blocks::{Allocated, Block, BlockStats, MAX_BLOCKS_PER_SUBSCRIBER};

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::siphash::SipKey;
use crate::time::Timestamp;
use crate::tuple::{Endpoint, Proto};
use hold::HoldQueue;
use sparse::{AddrSet, Lazy};

const WORDS: usize = 65536 / 64;
/// Counters per worker in the double-hash table (RFC 6056 §3.3.4 `TABLE_LENGTH`).
const TABLE: usize = 64;
/// Most ports a pool holds at once unless told otherwise
/// ([`PortPool::with_hold_capacity`]).
pub const DEFAULT_HOLD_CAPACITY: usize = 1 << 16;

/// Why no public port could be handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolError {
    /// The host's paired address has no free port in this protocol.
    PairedAddressFull,
    /// The pool has no address.
    Empty,
    /// Port-block allocation: the subscriber's blocks are full and it holds its
    /// `blocks_per_subscriber` already.
    BlockLimit,
}

#[derive(Debug, Default)]
struct AddrPorts {
    bits: [OnceLock<Box<[AtomicU64]>>; Proto::COUNT],
    taken: [AtomicU32; Proto::COUNT],
}

impl AddrPorts {
    /// The protocol's bitmap, allocated on first use (`bytes` counts it).
    #[inline]
    fn bits(&self, proto: Proto, bytes: &AtomicUsize) -> &[AtomicU64] {
        self.bits[proto.index()].get_or_init(|| {
            bytes.fetch_add(WORDS * 8, Ordering::Relaxed);
            (0..WORDS).map(|_| AtomicU64::new(0)).collect()
        })
    }

    /// Sets the port's bit; true if this call took it.
    #[inline]
    fn take(&self, proto: Proto, port: u16, bytes: &AtomicUsize) -> bool {
        let bit = 1u64 << (port % 64);
        let was = self.bits(proto, bytes)[port as usize / 64].fetch_or(bit, Ordering::AcqRel);
        if was & bit == 0 {
            self.taken[proto.index()].fetch_add(1, Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    fn give_back(&self, proto: Proto, port: u16) {
        // A bitmap never allocated has no port to give back.
        let Some(bits) = self.bits[proto.index()].get() else {
            return;
        };
        let bit = 1u64 << (port % 64);
        let was = bits[port as usize / 64].fetch_and(!bit, Ordering::AcqRel);
        if was & bit != 0 {
            self.taken[proto.index()].fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The pool of one dynamic rule: its public addresses and port range.
#[derive(Debug)]
pub struct PortPool {
    addrs: AddrSet,
    ports: Lazy<AddrPorts>,
    /// Bytes of the bitmaps allocated so far.
    bitmap_bytes: AtomicUsize,
    first: u16,
    last: u16,
    workers: u32,
    key: SipKey,
    /// RFC 6056 algorithm 4's `table`, one row of [`TABLE`] per worker.
    table: Box<[AtomicU32]>,
    /// Released ports waiting out the hold, oldest first (touched by the reaper only).
    held: Mutex<HoldQueue>,
    /// Port-block allocation ([`blocks`]), when on.
    blocks: Option<blocks::Blocks>,
}

impl PortPool {
    /// A pool over `addrs` (any order, duplicates ignored), handing out ports
    /// `first..=last`, holding released ports for `hold`, searched by `workers` workers.
    pub fn new(
        addrs: Vec<Ipv4Addr>,
        first: u16,
        last: u16,
        hold: Duration,
        workers: usize,
    ) -> Self {
        Self::from_ranges(
            addrs.into_iter().map(|a| (a, a)).collect(),
            first,
            last,
            hold,
            workers,
        )
    }

    /// A pool over the address ranges `(first, last)` (inclusive, any order, may
    /// overlap): what it costs does not grow with the ranges' size
    /// ([`bytes_estimate`](Self::bytes_estimate)). Ports are chosen with a fresh random
    /// key; see [`with_key`](Self::with_key).
    pub fn from_ranges(
        ranges: Vec<(Ipv4Addr, Ipv4Addr)>,
        first: u16,
        last: u16,
        hold: Duration,
        workers: usize,
    ) -> Self {
        let addrs = AddrSet::new(
            ranges
                .into_iter()
                .map(|(a, b)| (u32::from(a), u32::from(b)))
                .collect(),
        );
        let first = first.max(1);
        let last = last.max(first);
        let workers = workers.clamp(1, 1024) as u32;
        let capacity = Self::hold_capacity_for(
            addrs.len(),
            u32::from(last) - u32::from(first) + 1,
            DEFAULT_HOLD_CAPACITY,
        );
        Self {
            ports: Lazy::new(addrs.len()),
            addrs,
            bitmap_bytes: AtomicUsize::new(0),
            first,
            last,
            workers,
            key: SipKey::random(),
            table: (0..workers as usize * TABLE)
                .map(|_| AtomicU32::new(0))
                .collect(),
            held: Mutex::new(HoldQueue::new(hold, capacity)),
            blocks: None,
        }
    }

    /// The same pool choosing ports with `key` (tests and reproducible replays; the
    /// default is a random key per pool). Call before the first allocation.
    pub fn with_key(mut self, key: SipKey) -> Self {
        self.key = key;
        self
    }

    /// Heap bytes a pool over `addrs` addresses costs when built, and at most per
    /// address that hands out ports in one protocol (each further protocol adds a
    /// bitmap, [`BITMAP_BYTES`](Self::BITMAP_BYTES)), for `workers` workers.
    pub fn bytes_estimate(addrs: u64, workers: usize) -> (usize, usize) {
        let base = Lazy::<AddrPorts>::base_bytes(addrs)
            + workers.clamp(1, 1024) * TABLE * 4
            + std::mem::size_of::<Self>();
        (
            base,
            Lazy::<AddrPorts>::worst_bytes_per_value(addrs) + Self::BITMAP_BYTES,
        )
    }

    /// Bytes of one address's bitmap for one protocol.
    pub const BITMAP_BYTES: usize = WORDS * 8;

    /// The same pool holding at most `min(max_bindings, ports × protocols)` released
    /// ports at once (`ports`: every address's range), where `max_bindings` bounds the
    /// live dynamic bindings (the engine passes `max_sessions`: each binding holds a
    /// session). A port enters the hold when its binding ends, and a binding lasts at
    /// least its first session's idle timeout; while every timeout is at least the hold
    /// (the defaults but ICMP's and SYN_RECV's, 60 s), the ports entering the hold within any one hold were
    /// all bound when it began, so this bound cuts no hold short. Only bindings ending
    /// faster than that (a flood) fill it; then the oldest held port goes back early.
    /// More than the pool's ports × protocols can never be held. Call before the first
    /// release; the ring is allocated then ([`hold_bytes_for`](Self::hold_bytes_for)).
    pub fn with_hold_capacity(self, max_bindings: usize) -> Self {
        let capacity =
            Self::hold_capacity_for(self.addrs.len(), self.ports_per_addr(), max_bindings);
        if let Ok(mut q) = self.held.lock() {
            q.set_capacity(capacity);
        }
        self
    }

    /// The most ports a pool of `addrs` addresses, `ports_per_addr` ports each, holds
    /// for `max_bindings` (see [`with_hold_capacity`](Self::with_hold_capacity)).
    pub fn hold_capacity_for(addrs: u64, ports_per_addr: u32, max_bindings: usize) -> usize {
        let ports = addrs
            .saturating_mul(u64::from(ports_per_addr))
            .saturating_mul(Proto::COUNT as u64);
        usize::try_from(ports).map_or(max_bindings, |p| p.min(max_bindings))
    }

    /// Heap bytes of that hold's ring once a port was released.
    pub fn hold_bytes_for(addrs: u64, ports_per_addr: u32, max_bindings: usize) -> usize {
        Self::hold_capacity_for(addrs, ports_per_addr, max_bindings)
            .saturating_mul(hold::ENTRY_BYTES)
    }

    /// The most ports held at once.
    pub fn hold_capacity(&self) -> usize {
        self.held.lock().map_or(0, |q| q.capacity())
    }

    /// Heap bytes this pool holds now (ranges, counters, per-address state, bitmaps,
    /// the reuse hold's ring).
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.addrs.bytes()
            + self.table.len() * 4
            + self.ports.bytes()
            + self.bitmap_bytes.load(Ordering::Relaxed)
            + self.block_bytes()
            + self.held.lock().map_or(0, |q| q.bytes())
    }

    /// Number of addresses in the pool.
    pub fn addr_count(&self) -> u64 {
        self.addrs.len()
    }

    /// The pool's addresses as sorted, disjoint ranges `(first, last)`, inclusive.
    pub fn addr_ranges(&self) -> impl Iterator<Item = (Ipv4Addr, Ipv4Addr)> + '_ {
        self.addrs.ranges()
    }

    /// Ports per address and protocol.
    pub fn ports_per_addr(&self) -> u32 {
        u32::from(self.last) - u32::from(self.first) + 1
    }

    /// Whether `addr` is one of the pool's addresses.
    #[inline]
    pub fn contains_addr(&self, addr: Ipv4Addr) -> bool {
        self.addrs.index_of(addr).is_some()
    }

    /// The public address an inside host is paired with.
    #[inline]
    pub fn paired_addr(&self, host: Ipv4Addr) -> Option<Ipv4Addr> {
        self.paired_index(host).and_then(|i| self.addrs.nth(i))
    }

    #[inline]
    fn paired_index(&self, host: Ipv4Addr) -> Option<u64> {
        let n = self.addrs.len();
        if n == 0 {
            return None;
        }
        // Unkeyed on purpose: the pairing is stable across restarts and the same in
        // every replay; it picks an address, not a port an attacker could aim at.
        let h = u64::from(u32::from(host)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        Some(((h >> 32) * n) >> 32) // n <= 2^32: no overflow
    }

    /// Ports taken (in use or held back) on `addr` for `proto`.
    pub fn taken(&self, addr: Ipv4Addr, proto: Proto) -> u32 {
        self.addrs
            .index_of(addr)
            .and_then(|i| self.ports.get(i))
            .map_or(0, |ap| ap.taken[proto.index()].load(Ordering::Relaxed))
    }

    /// Marks a port permanently taken (a port forward inside the pool). False if it is not
    /// in the pool's addresses or range, or already taken.
    pub fn reserve(&self, proto: Proto, public: Endpoint) -> bool {
        if !(self.first..=self.last).contains(&public.port) {
            return false;
        }
        match self
            .addrs
            .index_of(public.addr)
            .and_then(|i| self.ports.get_or_init(i))
        {
            Some(ap) => ap.take(proto, public.port, &self.bitmap_bytes),
            None => false,
        }
    }

    /// Hands out a public endpoint for `inside` on the host's paired address. `worker`
    /// selects the slice of the range where the search starts.
    pub fn allocate(
        &self,
        proto: Proto,
        inside: Endpoint,
        preserve_port: bool,
        worker: usize,
    ) -> Result<Endpoint, PoolError> {
        let ai = self.paired_index(inside.addr).ok_or(PoolError::Empty)?;
        let (Some(addr), Some(ap)) = (self.addrs.nth(ai), self.ports.get_or_init(ai)) else {
            return Err(PoolError::Empty);
        };
        let count = self.ports_per_addr();
        if ap.taken[proto.index()].load(Ordering::Relaxed) >= count {
            return Err(PoolError::PairedAddressFull);
        }
        if preserve_port
            && (self.first..=self.last).contains(&inside.port)
            && ap.take(proto, inside.port, &self.bitmap_bytes)
        {
            return Ok(Endpoint::new(addr, inside.port));
        }
        let start = self.search_start(proto, inside, worker, count);
        let bits = ap.bits(proto, &self.bitmap_bytes);
        let (first, last) = (u32::from(self.first), u32::from(self.last));
        let mut p = first + start;
        let mut scanned = 0u32;
        while scanned < count {
            let word = bits[p as usize / 64].load(Ordering::Relaxed);
            let free = !word >> (p % 64);
            let in_word = 64 - p % 64;
            if free != 0 {
                let cand = p + free.trailing_zeros();
                let skip = free.trailing_zeros();
                if cand <= last && skip < in_word {
                    if ap.take(proto, cand as u16, &self.bitmap_bytes) {
                        return Ok(Endpoint::new(addr, cand as u16));
                    }
                    // Lost a race for this bit: look again from the same place.
                    continue;
                }
            }
            let step = in_word.min(last + 1 - p);
            scanned += step;
            p += step;
            if p > last {
                p = first;
            }
        }
        Err(PoolError::PairedAddressFull)
    }

    /// Where the search for `inside`'s port starts, as an offset into the range.
    ///
    /// RFC 6056 §3.3.4 (algorithm 4, "double-hash port selection"):
    /// `offset = F(local_IP, remote_IP, remote_port, secret_key1)`,
    /// `index = G(local_IP, remote_IP, remote_port, secret_key2)`,
    /// `next_ephemeral = min_ephemeral + (offset + table[index]) % num_ephemeral`,
    /// `table[index]` incremented. A NAT's mapping is endpoint-independent (RFC 4787
    /// REQ-1), so the "connection id" hashed is the inside endpoint and protocol; `F` and
    /// `G` are the two halves of one keyed SipHash. The start falls in this worker's
    /// slice and the table row is this worker's, so workers never share a counter.
    #[inline]
    fn search_start(&self, proto: Proto, inside: Endpoint, worker: usize, count: u32) -> u32 {
        let w = worker as u32 % self.workers;
        let slice = (count / self.workers).max(1);
        let id = u64::from(u32::from(inside.addr)) << 24
            | u64::from(inside.port) << 8
            | proto.index() as u64;
        let h = self
            .key
            .hash2(id, u64::from(self.first) << 16 | u64::from(self.last));
        let (offset, index) = (h as u32, (h >> 32) as usize % TABLE);
        let bump = self
            .table
            .get(w as usize * TABLE + index)
            .map_or(0, |c| c.fetch_add(1, Ordering::Relaxed));
        (w * slice + offset.wrapping_add(bump) % slice) % count
    }

    /// Gives back at once, without the hold, a port no late packet can be on its way to:
    /// one never published (its binding lost a race), or one whose binding never let a
    /// packet in. With PBA on, returns the block it emptied, if any.
    pub fn give_back_now(&self, proto: Proto, public: Endpoint) -> Option<Block> {
        let ai = self.addrs.index_of(public.addr)?;
        let ap = self.ports.get(ai)?;
        self.give_back_port(ai, ap, proto, public.port)
    }

    /// Gives a port back: it becomes free again `hold` after `now` (reaper only). Returns
    /// whether the hold was full and its oldest port went back early to make room.
    pub fn release(&self, proto: Proto, public: Endpoint, now: Timestamp) -> bool {
        self.release_blocks(proto, public, now, |_| {})
    }

    /// Like [`release`](Self::release), calling `released` with each block (PBA) whose
    /// last port a release freed (a hold that passed or was cut short).
    pub fn release_blocks(
        &self,
        proto: Proto,
        public: Endpoint,
        now: Timestamp,
        mut released: impl FnMut(Block),
    ) -> bool {
        let Some(ai) = self.addrs.index_of(public.addr) else {
            return false;
        };
        if !(self.first..=self.last).contains(&public.port) {
            // Not one this pool handed out (nothing is): no hold to keep.
            if let Some(b) = self.give_back_now(proto, public) {
                released(b);
            }
            return false;
        }
        let Ok(mut q) = self.held.lock() else {
            return false;
        };
        q.push(
            now,
            self.hold_id(ai, proto, public.port),
            self.freeing(released),
        )
    }

    /// A port's number in the ring: address index, port and protocol in under 50 bits
    /// (2^32 addresses × 2^16 ports × 4).
    fn hold_id(&self, ai: u64, proto: Proto, port: u16) -> u64 {
        let slot = ai * u64::from(self.ports_per_addr()) + u64::from(port - self.first);
        let id = slot * Proto::COUNT as u64 + proto.index() as u64;
        debug_assert!(id <= hold::MAX_ID);
        id
    }

    /// Gives back the port numbered `id` by [`hold_id`](Self::hold_id), calling
    /// `released` with the block it emptied (PBA).
    fn freeing<'a>(&'a self, mut released: impl FnMut(Block) + 'a) -> impl FnMut(u64) + 'a {
        move |id| {
            let proto = Proto::from_index(id % Proto::COUNT as u64);
            let slot = id / Proto::COUNT as u64;
            let ppa = u64::from(self.ports_per_addr());
            let (ai, port) = (slot / ppa, self.first + (slot % ppa) as u16);
            if let Some(b) = self
                .ports
                .get(ai)
                .and_then(|ap| self.give_back_port(ai, ap, proto, port))
            {
                released(b);
            }
        }
    }

    /// When the next held-back port becomes free.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.held.lock().ok()?.next_ready()
    }

    /// Frees every port whose hold has passed. Returns how many.
    pub fn handle_timeout(&self, now: Timestamp) -> usize {
        self.handle_timeout_blocks(now, |_| {})
    }

    /// Like [`handle_timeout`](Self::handle_timeout), calling `released` with each block
    /// (PBA) whose last port this freed.
    pub fn handle_timeout_blocks(&self, now: Timestamp, released: impl FnMut(Block)) -> usize {
        let Ok(mut q) = self.held.lock() else {
            return 0;
        };
        q.pop_due(now, self.freeing(released))
    }

    /// Number of ports waiting out the reuse hold.
    pub fn cooling_len(&self) -> usize {
        self.held.lock().map_or(0, |q| q.len())
    }
}

#[cfg(test)]
mod tests;
