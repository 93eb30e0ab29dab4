//! A lock-free hash index over slab slots: an array of bucket heads, each the start of a
//! singly linked chain of nodes (slot-derived ids) threaded through link words that the
//! nodes own.
//!
//! - **Lookups** walk a chain with acquire loads: no lock, no write.
//! - **Inserts** prepend with one compare-and-swap on the bucket head after checking the
//!   chain for a live node with the same key. Every insert into a bucket goes through
//!   that head, so two workers racing to insert the same key end with exactly one winner:
//!   the loser's CAS fails, it rescans, finds the winner and reports it.
//! - **Removals** are done by one thread only (the reaper). Inserts never touch an
//!   existing node's link, so the reaper can unlink a node in the middle of a chain with a
//!   plain store; unlinking the head is a CAS that races only with inserts.
//! - A removed node is reachable by workers already walking past it; its slot must not be
//!   reused before every worker has passed a quiescent point ([`crate::qsbr`]).
//! - **Buckets** are chosen by a hash drawn from a strongly universal family under a
//!   secret per-process key ([`crate::key`]: multiply-add-shift; the bucket is the hash's
//!   top bits, as its proof requires), so traffic cannot aim its flows at one chain.
//! - **Chains are bounded** at [`MAX_CHAIN`] nodes, in case the key ever leaks: an insert
//!   that finds its chain that long is refused ([`Refused::ChainFull`]; the tables report it
//!   as full, a counted drop), so no walk is ever longer than that. Every index has at least
//!   as many buckets as nodes, so honest chains average below 2 nodes (a random function
//!   would make a chain of 32 an `e^-1 / 32!` event; the universal family's proof bounds
//!   the tail less tightly, see [`crate::key`]'s limits): the bound is not meant to refuse
//!   honest traffic, it caps what a known or learnt key could cost (32 node visits).

use crate::sync::{AtomicU32, Ordering};

use crate::key::{HashKey, Key};

/// The node storage behind an index: key, liveness and link of each node.
pub trait Nodes {
    /// The key node `n` is filed under.
    fn key(&self, n: u32) -> Key;
    /// Whether node `n` is live (dead nodes are skipped and never block an insert).
    fn live(&self, n: u32) -> bool;
    /// The link word of node `n`.
    fn link(&self, n: u32) -> Option<&AtomicU32>;

    /// One step of a chain walk: whether node `n` is live and filed under `key`, and the
    /// link to the next node. Implementations override this to touch the node once.
    #[inline]
    fn probe(&self, n: u32, key: Key) -> Option<(bool, u32)> {
        let next = self.link(n)?.load(Ordering::Acquire);
        Some((self.key(n) == key && self.live(n), next))
    }
}

/// Link value meaning "end of chain"; node ids are stored plus one.
const END: u32 = 0;

/// The most nodes a chain holds (see the module doc): inserts beyond it are refused, and
/// no walk goes further.
pub const MAX_CHAIN: u32 = 32;

/// Why [`ChainIndex::insert`] did not file a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// A live node with the same key exists: its id.
    Exists(u32),
    /// The bucket's chain already holds [`MAX_CHAIN`] nodes.
    ChainFull,
}

/// The bucket array.
#[derive(Debug)]
pub struct ChainIndex {
    heads: Box<[AtomicU32]>,
    /// `64 - log2(buckets)`: a bucket is the hash's top bits (see [`crate::key`]).
    shift: u32,
    key: HashKey,
}

impl ChainIndex {
    /// An index with at least `entries` buckets (rounded up to a power of two), hashing
    /// with this process's secret key.
    pub fn new(entries: usize) -> Self {
        Self::with_key(entries, HashKey::process())
    }

    /// An index hashing with `key` (tests and reproducible benchmarks).
    pub fn with_key(entries: usize, key: HashKey) -> Self {
        let n = entries.max(16).next_power_of_two();
        Self {
            heads: (0..n).map(|_| AtomicU32::new(END)).collect(),
            shift: 64 - n.trailing_zeros(),
            key,
        }
    }

    /// Number of buckets.
    pub fn buckets(&self) -> usize {
        self.heads.len()
    }

    /// The longest chain, in nodes (a walk over every bucket: for tests and reports).
    pub fn longest_chain<N: Nodes + ?Sized>(&self, nodes: &N) -> u32 {
        self.heads
            .iter()
            .map(|h| {
                let (mut cur, mut len) = (h.load(Ordering::Acquire), 0u32);
                while cur != END && len <= MAX_CHAIN {
                    len += 1;
                    cur = nodes
                        .link(cur - 1)
                        .map_or(END, |l| l.load(Ordering::Acquire));
                }
                len
            })
            .max()
            .unwrap_or(0)
    }

    /// Bytes used by the bucket array.
    pub fn bytes(&self) -> usize {
        self.heads.len() * std::mem::size_of::<AtomicU32>()
    }

    /// The bucket `key` is filed under: the top `log2(buckets)` bits of its hash.
    #[inline(always)]
    pub fn bucket(&self, key: Key) -> usize {
        // At least 16 buckets, so the shift is at most 60; the result is below the
        // bucket count, and indexing checks it anyway.
        (key.hash(&self.key) >> self.shift) as usize
    }

    #[inline(always)]
    fn head(&self, key: Key) -> &AtomicU32 {
        &self.heads[self.bucket(key)]
    }

    /// Finds the live node filed under `key`.
    // Always inlined: every packet's session lookup. With SipHash rounds in it LLVM does
    // not inline it into NAT44's worker on its own (measured: 8% fewer Mpps out of line).
    #[inline(always)]
    pub fn find<N: Nodes + ?Sized>(&self, nodes: &N, key: Key) -> Option<u32> {
        let mut cur = self.head(key).load(Ordering::Acquire);
        // Chains never exceed MAX_CHAIN (inserts are refused past it); the count also
        // keeps a corrupted chain from hanging a worker.
        for _ in 0..=MAX_CHAIN {
            if cur == END {
                return None;
            }
            let n = cur - 1;
            let (hit, next) = nodes.probe(n, key)?;
            if hit {
                return Some(n);
            }
            cur = next;
        }
        None
    }

    /// Files node `n` under `key`, unless a live node with that key exists (then that
    /// node's id is returned and `n` is not inserted) or the chain is full.
    pub fn insert<N: Nodes + ?Sized>(&self, nodes: &N, n: u32, key: Key) -> Result<(), Refused> {
        let head = self.head(key);
        let Some(link) = nodes.link(n) else {
            return Err(Refused::Exists(n));
        };
        let mut h = head.load(Ordering::Acquire);
        loop {
            let mut cur = h;
            let mut len = 0u32;
            while cur != END {
                let m = cur - 1;
                let Some((hit, next)) = nodes.probe(m, key) else {
                    break;
                };
                if hit && m != n {
                    return Err(Refused::Exists(m));
                }
                len += 1;
                if len >= MAX_CHAIN {
                    // The CAS below links onto exactly the chain walked here (the head is
                    // unchanged), so refusing at MAX_CHAIN keeps every chain within it.
                    return Err(Refused::ChainFull);
                }
                cur = next;
            }
            link.store(h, Ordering::Relaxed);
            match head.compare_exchange(h, n + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(()),
                Err(now) => h = now,
            }
        }
    }

    /// Unlinks node `n` filed under `key`. Only one thread may remove (the reaper).
    /// Returns whether the node was found.
    pub fn remove<N: Nodes + ?Sized>(&self, nodes: &N, n: u32, key: Key) -> bool {
        let head = self.head(key);
        let Some(link) = nodes.link(n) else {
            return false;
        };
        loop {
            let h = head.load(Ordering::Acquire);
            if h == n + 1 {
                let next = link.load(Ordering::Acquire);
                if head
                    .compare_exchange(h, next, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return true;
                }
                continue; // an insert prepended: `n` is now inside the chain
            }
            let mut cur = h;
            while cur != END {
                let Some(prev_link) = nodes.link(cur - 1) else {
                    return false;
                };
                let next = prev_link.load(Ordering::Acquire);
                if next == n + 1 {
                    prev_link.store(link.load(Ordering::Acquire), Ordering::Release);
                    return true;
                }
                cur = next;
            }
            return false;
        }
    }
}

// Staged lookups: hints for a batch, never a result.
impl ChainIndex {
    /// Starts loading the bucket `key` is filed under and returns it, for
    /// [`first_in`](Self::first_in) once the line has arrived (a staged batch hashes every
    /// key first, so the DRAM misses of a batch overlap instead of following each other).
    #[inline(always)]
    pub fn prefetch_bucket(&self, key: Key) -> usize {
        let b = self.bucket(key);
        prefetch::read_at(&self.heads, b);
        b
    }

    /// The first node of bucket `b`'s chain now, if any (a hint: by the time the caller
    /// looks, the chain may have changed; [`find`](Self::find) decides).
    #[inline(always)]
    pub fn first_in(&self, b: usize) -> Option<u32> {
        let h = self.heads.get(b)?.load(Ordering::Relaxed);
        h.checked_sub(1)
    }
}

// Memory estimate.
impl ChainIndex {
    /// Bytes of the bucket array [`new`](Self::new)`(entries)` allocates (saturating: a
    /// size no machine has says so rather than wrapping).
    pub fn bytes_for(entries: usize) -> usize {
        entries
            .max(16)
            .checked_next_power_of_two()
            .map_or(usize::MAX, |n| {
                n.saturating_mul(std::mem::size_of::<AtomicU32>())
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    struct Arena {
        keys: Vec<(AtomicU32, AtomicU32)>,
        live: Vec<AtomicBool>,
        links: Vec<AtomicU32>,
    }

    impl Arena {
        fn new(n: usize) -> Self {
            Self {
                keys: (0..n)
                    .map(|_| (AtomicU32::new(0), AtomicU32::new(0)))
                    .collect(),
                live: (0..n).map(|_| AtomicBool::new(false)).collect(),
                links: (0..n).map(|_| AtomicU32::new(0)).collect(),
            }
        }
        fn set(&self, n: u32, k: u32) {
            self.keys[n as usize].0.store(k, Ordering::Relaxed);
            self.live[n as usize].store(true, Ordering::Release);
        }
    }

    impl Nodes for Arena {
        fn key(&self, n: u32) -> Key {
            Key(
                u64::from(self.keys[n as usize].0.load(Ordering::Acquire)),
                0,
            )
        }
        fn live(&self, n: u32) -> bool {
            self.live[n as usize].load(Ordering::Acquire)
        }
        fn link(&self, n: u32) -> Option<&AtomicU32> {
            self.links.get(n as usize)
        }
    }

    #[test]
    fn insert_find_remove_in_one_small_table() {
        let a = Arena::new(64);
        let idx = ChainIndex::new(1); // 16 buckets: plenty of collisions
        for n in 0..63 {
            a.set(n, n * 7);
            idx.insert(&a, n, Key(u64::from(n * 7), 0)).unwrap();
        }
        // A node whose key duplicates node 1's cannot be inserted: the winner is named.
        // (Setting a filed node's key in place instead would corrupt the chain it is on:
        // under some process keys 63·7 and 7 share a bucket, and node 63 would shadow node 1.)
        a.set(63, 7);
        assert_eq!(idx.insert(&a, 63, Key(7, 0)), Err(Refused::Exists(1)));
        for n in 0..63u32 {
            assert_eq!(idx.find(&a, Key(u64::from(n * 7), 0)), Some(n));
        }
        for n in (0..63u32).step_by(2) {
            assert!(idx.remove(&a, n, Key(u64::from(n * 7), 0)));
        }
        for n in 0..63u32 {
            assert_eq!(
                idx.find(&a, Key(u64::from(n * 7), 0)).is_some(),
                n % 2 == 1,
                "node {n}"
            );
        }
    }

    /// Many threads insert the same keys at once: for every key exactly one insert wins,
    /// and every loser is told who won.
    #[test]
    fn racing_inserts_of_one_key_have_one_winner() {
        const KEYS: u32 = 500;
        const THREADS: u32 = 4;
        let a = Arc::new(Arena::new((KEYS * THREADS) as usize));
        let idx = Arc::new(ChainIndex::new(64));
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (a, idx) = (Arc::clone(&a), Arc::clone(&idx));
                std::thread::spawn(move || {
                    let mut wins = Vec::new();
                    for k in 0..KEYS {
                        let n = t * KEYS + k;
                        a.set(n, k + 1);
                        match idx.insert(&*a, n, Key(u64::from(k + 1), 0)) {
                            Ok(()) => wins.push(k),
                            Err(Refused::Exists(w)) => {
                                assert_ne!(w, n);
                                a.live[n as usize].store(false, Ordering::Release);
                            }
                            Err(Refused::ChainFull) => panic!("chain full"),
                        }
                    }
                    wins
                })
            })
            .collect();
        let mut winners = vec![0u32; KEYS as usize];
        for h in handles {
            for k in h.join().unwrap() {
                winners[k as usize] += 1;
            }
        }
        assert!(winners.iter().all(|w| *w == 1), "{winners:?}");
        for k in 0..KEYS {
            assert!(idx.find(&*a, Key(u64::from(k + 1), 0)).is_some());
        }
    }
}
