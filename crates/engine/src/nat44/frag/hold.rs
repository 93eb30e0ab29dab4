//! The memory later fragments may hold while they wait for their first (virtual
//! reassembly), bounded in total and per source: a flood of fragments whose first never
//! comes fills at most its sources' shares, then at most the whole budget, and only
//! until `fragment_timeout` passes. Datagrams whose fragments arrive in order never hold
//! anything, so such a flood only ever delays reordered datagrams.

use std::hash::RandomState;
use std::net::Ipv4Addr;
use std::sync::{Mutex, PoisonError};

/// A map hashed with SipHash-1-3 under its own secret random key (the keys are senders'
/// addresses).
type KeyedMap<K, V> = hashbrown::HashMap<K, V, RandomState>;

/// Default of `fragment_hold_bytes`: what Linux allows its IPv4 reassembly per network
/// namespace (`net.ipv4.ipfrag_high_thresh`, 4 MiB).
pub const FRAGMENT_HOLD_BYTES: usize = 4 << 20;

/// The largest `fragment_hold_bytes` accepted.
pub const FRAGMENT_HOLD_BYTES_LIMIT: usize = 1 << 30;

/// What one held fragment costs beyond its bytes: its boxed slice, its place in its
/// datagram's list, and the allocator's rounding.
pub const OVERHEAD: usize = 64;

/// The share of the budget one source may hold: a sixteenth, but never less than one
/// whole 64 KiB datagram (when the budget allows one).
fn per_source(total: usize) -> usize {
    (total / 16).max(total.min(64 * 1024 + 64 * OVERHEAD))
}

/// Why [`Budget::take`] took nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spent {
    /// The source's share is spent.
    Source,
    /// The whole budget is spent.
    Total,
}

/// Bytes held, in total and per source.
#[derive(Debug)]
pub struct Budget {
    total: usize,
    per_source: usize,
    used: Mutex<Used>,
}

#[derive(Debug, Default)]
struct Used {
    all: usize,
    by_source: KeyedMap<Ipv4Addr, usize>,
}

impl Budget {
    /// A budget of `total` bytes (0: nothing is ever held).
    pub fn new(total: usize) -> Self {
        Budget {
            total,
            per_source: per_source(total),
            used: Mutex::new(Used::default()),
        }
    }

    /// Whether anything may ever be held.
    pub fn holds(&self) -> bool {
        self.total > 0
    }

    /// Takes `bytes` for a fragment from `src`; nothing is taken when the source's share
    /// or the total would be exceeded.
    pub fn take(&self, src: Ipv4Addr, bytes: usize) -> Result<(), Spent> {
        let mut u = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = u.by_source.get(&src).copied().unwrap_or(0);
        if mine + bytes > self.per_source {
            return Err(Spent::Source);
        }
        if u.all + bytes > self.total {
            return Err(Spent::Total);
        }
        u.all += bytes;
        *u.by_source.entry(src).or_insert(0) += bytes;
        Ok(())
    }

    /// Gives back `bytes` taken for `src`.
    pub fn give(&self, src: Ipv4Addr, bytes: usize) {
        let mut u = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        u.all = u.all.saturating_sub(bytes);
        if let Some(m) = u.by_source.get_mut(&src) {
            *m = m.saturating_sub(bytes);
            if *m == 0 {
                u.by_source.remove(&src);
            }
        }
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.lock().unwrap_or_else(PoisonError::into_inner).all
    }

    /// The most memory a budget of `total` bytes stands for: the bytes, and the map of
    /// sources holding them (at most one source per held fragment).
    pub fn bytes_for(total: usize) -> usize {
        let sources = total / (OVERHEAD + 8);
        total + sources.saturating_mul(std::mem::size_of::<(Ipv4Addr, usize)>() + 1) * 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const B: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

    #[test]
    fn one_source_gets_its_share_the_rest_stays_for_the_others() {
        let b = Budget::new(16 << 20);
        assert_eq!(b.per_source, 1 << 20);
        assert_eq!(b.take(A, 1 << 20), Ok(()));
        assert_eq!(b.take(A, 1), Err(Spent::Source), "A's share is spent");
        assert_eq!(b.take(B, 1000), Ok(()));
        b.give(A, 1 << 20);
        assert_eq!(b.take(A, 1), Ok(()));
        assert_eq!(b.used(), 1001);
    }

    #[test]
    fn a_small_budget_lets_one_source_hold_a_whole_datagram_and_never_more_than_all() {
        let b = Budget::new(256 * 1024);
        assert_eq!(b.take(A, 65_535 + 64 * OVERHEAD), Ok(()));
        let b = Budget::new(10_000);
        assert_eq!(b.take(A, 10_001), Err(Spent::Source));
        assert_eq!(b.take(A, 10_000), Ok(()));
        assert_eq!(b.take(B, 1), Err(Spent::Total), "the total is spent");
        assert!(!Budget::new(0).holds());
    }
}
