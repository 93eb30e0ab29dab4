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

use std::sync::atomic::{AtomicU32, Ordering};

use crate::key::Key;

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

/// The bucket array.
#[derive(Debug)]
pub struct ChainIndex {
    heads: Box<[AtomicU32]>,
    mask: u64,
}

impl ChainIndex {
    /// An index with at least `entries` buckets (rounded up to a power of two).
    pub fn new(entries: usize) -> Self {
        let n = entries.max(16).next_power_of_two();
        Self {
            heads: (0..n).map(|_| AtomicU32::new(END)).collect(),
            mask: (n - 1) as u64,
        }
    }

    /// Bytes used by the bucket array.
    pub fn bytes(&self) -> usize {
        self.heads.len() * std::mem::size_of::<AtomicU32>()
    }

    #[inline]
    fn head(&self, hash: u64) -> &AtomicU32 {
        // The mask keeps the index in range; `get` keeps the compiler honest.
        &self.heads[(hash & self.mask) as usize]
    }

    /// Finds the live node filed under `key`.
    #[inline]
    pub fn find<N: Nodes + ?Sized>(&self, nodes: &N, key: Key) -> Option<u32> {
        let mut cur = self.head(key.hash()).load(Ordering::Acquire);
        let mut steps = 0u32;
        while cur != END {
            let n = cur - 1;
            let (hit, next) = nodes.probe(n, key)?;
            if hit {
                return Some(n);
            }
            cur = next;
            steps += 1;
            if steps > 1 << 20 {
                return None; // a corrupted chain must not hang a worker
            }
        }
        None
    }

    /// Files node `n` under `key`, unless a live node with that key exists: then that
    /// node's id is returned and `n` is not inserted.
    pub fn insert<N: Nodes + ?Sized>(&self, nodes: &N, n: u32, key: Key) -> Result<(), u32> {
        let head = self.head(key.hash());
        let Some(link) = nodes.link(n) else {
            return Err(n);
        };
        let mut h = head.load(Ordering::Acquire);
        loop {
            let mut cur = h;
            while cur != END {
                let m = cur - 1;
                let Some((hit, next)) = nodes.probe(m, key) else {
                    break;
                };
                if hit && m != n {
                    return Err(m);
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
        let head = self.head(key.hash());
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

// -- memory estimate (issue 14, finding 9) --
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
        for n in 0..64 {
            a.set(n, n * 7);
            idx.insert(&a, n, Key(u64::from(n * 7), 0)).unwrap();
        }
        a.set(63, 7); // a node whose key duplicates node 1's cannot be inserted
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
                            Err(w) => {
                                assert_ne!(w, n);
                                a.live[n as usize].store(false, Ordering::Release);
                            }
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
