//! IPv6 hosts behind a NAT64, each given a 32-bit id so that the NAT44 machinery (session
//! records packed in two words, bindings, port pools, the reaper) serves NAT64 unchanged:
//! a NAT64 session's inside endpoint is `(host id, port)` instead of `(IPv4 address, port)`.
//!
//! Built like [`crate::reftable`]: entries in a [`Slab`], found by their 128-bit address
//! through a [`ChainIndex`] (an IPv6 address is exactly one [`Key`]), reference-counted by
//! the bindings that use them. Workers intern and look up without locks; one thread (the
//! reaper) claims entries whose count has been zero for a while (compare-and-swap 0 ->
//! DEAD, so a worker can never revive an entry being removed) and frees their slots after
//! a QSBR grace period.
//!
//! Ids map to IPv4-shaped values in 240.0.0.0/4 ([`HOST_NET`]), a block no real IPv4
//! destination may use, so a host id can never be mistaken for an outside address.

use crate::sync::{AtomicU32, AtomicU64, Ordering};
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::chain::{ChainIndex, Nodes, Refused};
use crate::key::Key;
use crate::slab::{Slab, Slot};
use crate::Timestamp;

/// The IPv4-shaped block host ids live in (240.0.0.0/4).
pub const HOST_NET: u32 = 0xF000_0000;
/// Mask of [`HOST_NET`].
const HOST_MASK: u32 = 0xF000_0000;
/// Most hosts a table can hold (ids must fit below the /4).
pub const MAX_HOSTS: usize = (1 << 28) - 2;

/// Reference count meaning "claimed by the reaper, or not in use".
const DEAD: u32 = u32::MAX;

/// One slot.
#[derive(Debug)]
pub struct Host {
    hi: AtomicU64,
    lo: AtomicU64,
    link: AtomicU32,
    refs: AtomicU32,
    /// When the count last dropped to zero or the entry was made (nanoseconds).
    idle_since: AtomicU64,
}

impl Slot for Host {
    fn empty() -> Self {
        Host {
            hi: AtomicU64::new(0),
            lo: AtomicU64::new(0),
            link: AtomicU32::new(0),
            refs: AtomicU32::new(DEAD),
            idle_since: AtomicU64::new(0),
        }
    }
    fn free_link(&self) -> &AtomicU32 {
        &self.link
    }
}

struct View<'a>(&'a Slab<Host>);

impl Nodes for View<'_> {
    #[inline]
    fn key(&self, n: u32) -> Key {
        self.0.get(n).map_or(Key(0, 0), |h| {
            Key(h.hi.load(Ordering::Acquire), h.lo.load(Ordering::Acquire))
        })
    }
    #[inline]
    fn live(&self, n: u32) -> bool {
        self.0
            .get(n)
            .is_some_and(|h| h.refs.load(Ordering::Acquire) != DEAD)
    }
    #[inline]
    fn link(&self, n: u32) -> Option<&AtomicU32> {
        self.0.get(n).map(|h| &h.link)
    }
}

#[inline]
fn key_of(a: Ipv6Addr) -> Key {
    let v = u128::from(a);
    Key((v >> 64) as u64, v as u64)
}

/// The table is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostTableFull;

/// IPv6 host <-> 32-bit id.
#[derive(Debug)]
pub struct HostTable {
    slab: Slab<Host>,
    index: ChainIndex,
}

impl HostTable {
    /// Room for `capacity` hosts (at most [`MAX_HOSTS`]).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.clamp(1, MAX_HOSTS);
        HostTable {
            slab: Slab::new(capacity),
            index: ChainIndex::new(capacity),
        }
    }

    /// Whether `a` is a host id (lies in [`HOST_NET`]).
    #[inline]
    pub fn is_host_id(a: Ipv4Addr) -> bool {
        u32::from(a) & HOST_MASK == HOST_NET
    }

    /// The IPv4-shaped form of slot `id`.
    #[inline]
    pub fn id_addr(id: u32) -> Ipv4Addr {
        Ipv4Addr::from(HOST_NET | (id + 1))
    }

    /// The slot of an IPv4-shaped host id.
    #[inline]
    fn slot_of(a: Ipv4Addr) -> Option<u32> {
        let v = u32::from(a);
        (v & HOST_MASK == HOST_NET && v & !HOST_MASK != 0).then(|| (v & !HOST_MASK) - 1)
    }

    /// The live host id of `a`, if it has one.
    #[inline]
    pub fn find(&self, a: Ipv6Addr) -> Option<Ipv4Addr> {
        self.index
            .find(&View(&self.slab), key_of(a))
            .map(Self::id_addr)
    }

    /// The id of `a`, made if it has none.
    pub fn intern(&self, a: Ipv6Addr, now: Timestamp) -> Result<Ipv4Addr, HostTableFull> {
        let key = key_of(a);
        let view = View(&self.slab);
        for _ in 0..4 {
            if let Some(n) = self.index.find(&view, key) {
                return Ok(Self::id_addr(n));
            }
            let n = self.slab.alloc().ok_or(HostTableFull)?;
            let Some(h) = self.slab.get(n) else {
                return Err(HostTableFull);
            };
            h.hi.store(key.0, Ordering::Relaxed);
            h.lo.store(key.1, Ordering::Relaxed);
            h.idle_since.store(now.as_nanos(), Ordering::Relaxed);
            h.refs.store(0, Ordering::Release);
            match self.index.insert(&view, n, key) {
                Ok(()) => return Ok(Self::id_addr(n)),
                Err(refused) => {
                    // Another worker filed the same host first (or the chain is full);
                    // this slot was never reachable, so it goes straight back.
                    h.refs.store(DEAD, Ordering::Release);
                    self.slab.free(n);
                    if refused == Refused::ChainFull {
                        return Err(HostTableFull);
                    }
                }
            }
        }
        Err(HostTableFull)
    }

    /// Interns `a` with a reference that is never dropped (static bindings).
    pub fn pin(&self, a: Ipv6Addr, now: Timestamp) -> Result<Ipv4Addr, HostTableFull> {
        let id = self.intern(a, now)?;
        if self.try_ref(id) {
            Ok(id)
        } else {
            Err(HostTableFull)
        }
    }

    /// The IPv6 address behind host id `id` (also while a claimed entry waits for its
    /// grace period, so a packet already in flight completes).
    #[inline]
    pub fn addr(&self, id: Ipv4Addr) -> Option<Ipv6Addr> {
        let n = Self::slot_of(id)?;
        if n >= self.slab.high_water() {
            return None;
        }
        let h = self.slab.get(n)?;
        let v = (u128::from(h.hi.load(Ordering::Acquire)) << 64)
            | u128::from(h.lo.load(Ordering::Acquire));
        Some(Ipv6Addr::from(v))
    }

    /// Takes a reference on host `id`; refused once the reaper has claimed it.
    pub fn try_ref(&self, id: Ipv4Addr) -> bool {
        let Some(h) = Self::slot_of(id).and_then(|n| self.slab.get(n)) else {
            return false;
        };
        let mut cur = h.refs.load(Ordering::Acquire);
        loop {
            if cur == DEAD || cur == DEAD - 1 {
                return false;
            }
            match h
                .refs
                .compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(c) => cur = c,
            }
        }
    }

    /// Drops a reference taken by [`try_ref`](Self::try_ref).
    pub fn unref(&self, id: Ipv4Addr, now: Timestamp) {
        let Some(h) = Self::slot_of(id).and_then(|n| self.slab.get(n)) else {
            return;
        };
        let mut cur = h.refs.load(Ordering::Acquire);
        loop {
            if cur == 0 || cur == DEAD {
                return; // unbalanced: never underflow into DEAD
            }
            if cur == 1 {
                h.idle_since.store(now.as_nanos(), Ordering::Release);
            }
            match h
                .refs
                .compare_exchange_weak(cur, cur - 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(c) => cur = c,
            }
        }
    }

    /// References held on `id` (for tests and reports).
    pub fn refs(&self, id: Ipv4Addr) -> Option<u32> {
        let h = Self::slot_of(id).and_then(|n| self.slab.get(n))?;
        match h.refs.load(Ordering::Acquire) {
            DEAD => None,
            r => Some(r),
        }
    }

    /// Reaper only: claims and unlinks every entry unreferenced since before
    /// `now - idle`, calling `on_removed` with its slot; free each slot with
    /// [`free`](Self::free) after a QSBR grace period.
    pub fn reap(&self, now: Timestamp, idle: std::time::Duration, mut on_removed: impl FnMut(u32)) {
        let view = View(&self.slab);
        let idle = idle.as_nanos() as u64;
        for n in 0..self.slab.high_water() {
            let Some(h) = self.slab.get(n) else { continue };
            if h.refs.load(Ordering::Acquire) != 0
                || h.idle_since.load(Ordering::Acquire).saturating_add(idle) > now.as_nanos()
            {
                continue;
            }
            if h.refs
                .compare_exchange(0, DEAD, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                continue;
            }
            let key = Key(h.hi.load(Ordering::Acquire), h.lo.load(Ordering::Acquire));
            self.index.remove(&view, n, key);
            on_removed(n);
        }
    }

    /// Returns a reaped slot to the free list (after its grace period).
    pub fn free(&self, n: u32) {
        self.slab.free(n);
    }

    /// Live hosts (a walk).
    pub fn len(&self) -> usize {
        (0..self.slab.high_water())
            .filter_map(|n| self.slab.get(n))
            .filter(|h| h.refs.load(Ordering::Acquire) != DEAD)
            .count()
    }

    /// Whether no host is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// Memory estimate.
impl HostTable {
    /// Bytes a table for `capacity` hosts holds when full (slots and bucket array).
    pub fn bytes_for(capacity: usize) -> usize {
        let capacity = capacity.clamp(1, MAX_HOSTS);
        Slab::<Host>::bytes_for(capacity).saturating_add(ChainIndex::bytes_for(capacity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn a(n: u16) -> Ipv6Addr {
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, n)
    }

    #[test]
    fn intern_is_stable_and_ids_are_in_240_slash_4() {
        let t = HostTable::new(16);
        let now = Timestamp::from_secs(1);
        let x = t.intern(a(1), now).unwrap();
        let y = t.intern(a(2), now).unwrap();
        assert_ne!(x, y);
        assert_eq!(t.intern(a(1), now).unwrap(), x);
        assert!(HostTable::is_host_id(x) && HostTable::is_host_id(y));
        assert_eq!(t.addr(x), Some(a(1)));
        assert_eq!(t.find(a(2)), Some(y));
        assert_eq!(t.addr(Ipv4Addr::new(198, 51, 100, 1)), None);
    }

    #[test]
    fn referenced_hosts_survive_and_idle_ones_go_after_the_grace() {
        let t = HostTable::new(16);
        let x = t.intern(a(1), Timestamp::from_secs(1)).unwrap();
        let y = t.intern(a(2), Timestamp::from_secs(1)).unwrap();
        assert!(t.try_ref(x));
        let mut gone = Vec::new();
        t.reap(Timestamp::from_secs(5), Duration::from_secs(10), |n| {
            gone.push(n)
        });
        assert!(gone.is_empty(), "inside the grace period nothing goes");
        t.reap(Timestamp::from_secs(20), Duration::from_secs(10), |n| {
            gone.push(n)
        });
        assert_eq!(gone.len(), 1, "only the unreferenced host goes");
        assert_eq!(t.find(a(2)), None);
        assert!(!t.try_ref(y), "a claimed entry is never revived");
        assert_eq!(t.find(a(1)), Some(x));
        t.unref(x, Timestamp::from_secs(30));
        t.reap(Timestamp::from_secs(35), Duration::from_secs(10), |n| {
            gone.push(n)
        });
        assert_eq!(gone.len(), 1, "the grace counts from the last release");
        t.reap(Timestamp::from_secs(41), Duration::from_secs(10), |n| {
            gone.push(n)
        });
        assert_eq!(gone.len(), 2);
        for n in gone {
            t.free(n);
        }
        assert!(t.is_empty());
        // Freed slots are reused.
        t.intern(a(3), Timestamp::from_secs(50)).unwrap();
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn full_table_refuses() {
        let t = HostTable::new(2);
        let now = Timestamp::from_secs(1);
        t.intern(a(1), now).unwrap();
        t.intern(a(2), now).unwrap();
        assert_eq!(t.intern(a(3), now), Err(HostTableFull));
        assert!(t.intern(a(1), now).is_ok(), "existing hosts still resolve");
    }

    #[test]
    fn racing_workers_agree_on_one_id_per_host() {
        let t = Arc::new(HostTable::new(4096));
        let ids: Vec<Vec<Ipv4Addr>> = (0..4)
            .map(|_| {
                let t = Arc::clone(&t);
                std::thread::spawn(move || {
                    (0..1000)
                        .map(|i| t.intern(a(i), Timestamp::from_secs(1)).unwrap())
                        .collect()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        for w in &ids[1..] {
            assert_eq!(w, &ids[0]);
        }
        assert_eq!(t.len(), 1000);
    }
}
