//! A pool's addresses as sorted ranges, and per-address state allocated on first use.
//!
//! A pool of sixteen /8s has 2^28 addresses; expanding them into a list, a set and one
//! record each cost tens of gigabytes before a single packet passed. Here the addresses
//! are a handful of ranges found by binary search, and the per-address state lives in
//! 64-address chunks, allocated lock-free (`OnceLock`) the first time one of their
//! addresses hands out a port, behind a top level of at most [`MAX_TOP`] entries. What a
//! pool costs is then a few kilobytes plus what its in-use addresses need.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Addresses per lazily allocated chunk.
pub(super) const CHUNK: u64 = 64;
/// Most entries of the top level (each covers a power-of-two number of chunks).
pub(super) const MAX_TOP: u64 = 16384;

/// Sorted, disjoint, merged address ranges, indexed `0..len()` in address order.
#[derive(Debug)]
pub(super) struct AddrSet {
    /// `(first, last)`, inclusive, host order.
    ranges: Box<[(u32, u32)]>,
    /// Index of each range's first address.
    before: Box<[u64]>,
    len: u64,
}

impl AddrSet {
    /// The union of `ranges` (`(first, last)` inclusive, any order, may overlap).
    pub(super) fn new(mut ranges: Vec<(u32, u32)>) -> Self {
        ranges.retain(|r| r.0 <= r.1);
        ranges.sort_unstable();
        let mut merged: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match merged.last_mut() {
                Some(m) if u64::from(r.0) <= u64::from(m.1) + 1 => m.1 = m.1.max(r.1),
                _ => merged.push(r),
            }
        }
        let mut len = 0u64;
        let before = merged
            .iter()
            .map(|r| {
                let b = len;
                len += u64::from(r.1 - r.0) + 1;
                b
            })
            .collect();
        Self {
            ranges: merged.into_boxed_slice(),
            before,
            len,
        }
    }

    /// Number of addresses.
    pub(super) fn len(&self) -> u64 {
        self.len
    }

    /// The index of `addr`, if it is in the set.
    #[inline]
    pub(super) fn index_of(&self, addr: Ipv4Addr) -> Option<u64> {
        let a = u32::from(addr);
        let k = self.ranges.partition_point(|r| r.0 <= a).checked_sub(1)?;
        let (first, last) = self.ranges[k];
        (a <= last).then(|| self.before[k] + u64::from(a - first))
    }

    /// The address at index `i`.
    #[inline]
    pub(super) fn nth(&self, i: u64) -> Option<Ipv4Addr> {
        let k = self.before.partition_point(|&b| b <= i).checked_sub(1)?;
        let (first, last) = self.ranges[k];
        let off = i - self.before[k];
        (off <= u64::from(last - first)).then(|| Ipv4Addr::from(first + off as u32))
    }

    /// The ranges, `(first, last)` inclusive, in order.
    pub(super) fn ranges(&self) -> impl Iterator<Item = (Ipv4Addr, Ipv4Addr)> + '_ {
        self.ranges
            .iter()
            .map(|&(a, b)| (Ipv4Addr::from(a), Ipv4Addr::from(b)))
    }

    /// Heap bytes held.
    pub(super) fn bytes(&self) -> usize {
        self.ranges.len() * (std::mem::size_of::<(u32, u32)>() + std::mem::size_of::<u64>())
    }
}

type Chunk<T> = Box<[T]>;
type Block<T> = Box<[OnceLock<Chunk<T>>]>;

/// `len` values of `T`, each chunk of [`CHUNK`] allocated (default values) on first use.
#[derive(Debug)]
pub(super) struct Lazy<T> {
    top: Box<[OnceLock<Block<T>>]>,
    /// Chunks per top-level entry (a power of two).
    block: u64,
    len: u64,
    /// Heap bytes allocated so far.
    bytes: AtomicUsize,
}

impl<T: Default> Lazy<T> {
    /// Room for `len` values; nothing but the top level is allocated yet.
    pub(super) fn new(len: u64) -> Self {
        let chunks = len.div_ceil(CHUNK);
        let block = chunks.div_ceil(MAX_TOP).max(1).next_power_of_two();
        let top: Box<[OnceLock<Block<T>>]> = (0..chunks.div_ceil(block))
            .map(|_| OnceLock::new())
            .collect();
        let bytes = std::mem::size_of_val(&*top);
        Self {
            top,
            block,
            len,
            bytes: AtomicUsize::new(bytes),
        }
    }

    /// Heap bytes of the top level alone for `len` values (what [`new`](Self::new) costs).
    pub(super) fn base_bytes(len: u64) -> usize {
        let chunks = len.div_ceil(CHUNK);
        let block = chunks.div_ceil(MAX_TOP).max(1).next_power_of_two();
        chunks.div_ceil(block) as usize * std::mem::size_of::<OnceLock<Block<T>>>()
    }

    /// Heap bytes one in-use value costs at most (its chunk and its block, both
    /// allocated for it alone).
    pub(super) fn worst_bytes_per_value(len: u64) -> usize {
        let chunks = len.div_ceil(CHUNK);
        let block = chunks.div_ceil(MAX_TOP).max(1).next_power_of_two();
        CHUNK as usize * std::mem::size_of::<T>()
            + block as usize * std::mem::size_of::<OnceLock<Chunk<T>>>()
    }

    /// The value at `i` if its chunk exists (never allocates).
    #[inline]
    pub(super) fn get(&self, i: u64) -> Option<&T> {
        if i >= self.len {
            return None;
        }
        let c = i / CHUNK;
        let block = self.top.get((c / self.block) as usize)?.get()?;
        let chunk = block.get((c % self.block) as usize)?.get()?;
        chunk.get((i % CHUNK) as usize)
    }

    /// The value at `i`, allocating its chunk (and block) on first use.
    #[inline]
    pub(super) fn get_or_init(&self, i: u64) -> Option<&T> {
        if i >= self.len {
            return None;
        }
        let c = i / CHUNK;
        let block = self.top.get((c / self.block) as usize)?.get_or_init(|| {
            let b: Block<T> = (0..self.block).map(|_| OnceLock::new()).collect();
            self.bytes
                .fetch_add(std::mem::size_of_val(&*b), Ordering::Relaxed);
            b
        });
        let chunk = block.get((c % self.block) as usize)?.get_or_init(|| {
            let ch: Chunk<T> = (0..CHUNK).map(|_| T::default()).collect();
            self.bytes
                .fetch_add(std::mem::size_of_val(&*ch), Ordering::Relaxed);
            ch
        });
        chunk.get((i % CHUNK) as usize)
    }

    /// Heap bytes allocated so far (top level, blocks and chunks; not what `T` owns).
    pub(super) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_index_both_ways() {
        let a = |s: &str| u32::from(s.parse::<Ipv4Addr>().unwrap());
        let s = AddrSet::new(vec![
            (a("10.0.1.0"), a("10.0.1.255")),
            (a("10.0.0.0"), a("10.0.0.255")), // adjacent: merged
            (a("10.0.0.10"), a("10.0.0.20")), // inside: merged
            (a("192.0.2.1"), a("192.0.2.1")),
        ]);
        assert_eq!(s.len(), 513);
        assert_eq!(s.ranges().count(), 2);
        for i in 0..s.len() {
            let addr = s.nth(i).unwrap();
            assert_eq!(s.index_of(addr), Some(i), "{addr}");
        }
        assert_eq!(s.nth(513), None);
        assert_eq!(s.index_of("10.0.2.0".parse().unwrap()), None);
        assert_eq!(s.index_of("9.255.255.255".parse().unwrap()), None);
        assert_eq!(AddrSet::new(Vec::new()).nth(0), None);
        let whole = AddrSet::new(vec![(0, u32::MAX)]);
        assert_eq!(whole.len(), 1 << 32);
        assert_eq!(whole.nth((1 << 32) - 1), Some(Ipv4Addr::BROADCAST));
    }

    #[test]
    fn lazy_allocates_only_what_is_touched() {
        let l: Lazy<u64> = Lazy::new(1 << 28);
        let base = l.bytes();
        assert!(base <= MAX_TOP as usize * 24, "top level {base} bytes");
        assert!(l.get(12345).is_none());
        assert!(l.get_or_init(12345).is_some());
        assert!(l.get(12345).is_some());
        assert!(l.get(12345 + CHUNK).is_none(), "next chunk not allocated");
        assert!(l.bytes() - base <= Lazy::<u64>::worst_bytes_per_value(1 << 28));
        assert!(l.get_or_init(1 << 28).is_none());
        assert_eq!(Lazy::<u64>::base_bytes(1 << 28), base);
    }
}
