//! Fragments in any order (RFC 4787 REQ-14, RFC 6146 §3.4/§3.5): only the first fragment
//! of a datagram carries the ports, so the NAT remembers what it did to it and does the
//! same to the address fields of the fragments of that datagram, whenever they come.
//!
//! A first fragment (offset 0, MF set) is translated through its session exactly like a
//! whole packet (the transport checksum covers the whole datagram, but an incremental
//! update for the changed addresses and ports in the first fragment's checksum field is
//! still exact). Then the datagram's key as it arrived — (source, destination, protocol,
//! IPv4 identification) — is filed here with the addresses it left with and the
//! direction it came from. A later fragment (offset > 0) finds that record and gets the
//! same addresses, its TTL and header checksum; it has no transport header to touch.
//!
//! **Virtual reassembly.** A later fragment that arrives before its first is held here
//! (a copy of its bytes, `fragment_held`) in a record of its datagram. When the first
//! fragment comes, the held ones are handed to the worker that translated it, which
//! sends them, translated, right after it (through `ModeWorker::poll`), each still a
//! fragment: the datagram is never reassembled into one packet, its receiver does that.
//! A datagram whose first fragment does not come within `fragment_timeout` (3 s; Linux
//! waits 30 s to reassemble, Jool and VPP hold 2 s) loses its held fragments
//! (`fragment_expired`), as a reassembling host would lose them. This is what VPP's
//! virtual reassembly and netfilter's defragmentation (which reassembles) give a
//! reordered datagram, without a NAT ever building a 64 KiB packet.
//!
//! **What is refused**, for every datagram, counted:
//! - a fragment overlapping another of its datagram (RFC 5722 for IPv6, which NAT64 sees
//!   here as IPv4; RFC 1858/RFC 3128 for IPv4, where overlaps are the classic way to
//!   rewrite a transport header behind a filter): the datagram is refused for the rest of
//!   its record's life, held fragments included (`fragment_overlap`). An exact copy of
//!   a fragment already seen is no overlap: sent again once translated, dropped while
//!   held (`fragment_held`);
//! - a later TCP fragment starting inside the TCP header (RFC 3128, `fragment_overlap`);
//!   a first fragment too short for its transport header is refused by the parser
//!   (`fragment`);
//! - a datagram of more than [`MAX_PIECES`] fragments (`fragment_too_many`).
//!
//! **Bounds.** The table holds at most `max_fragment_records` datagrams. A new first
//! fragment finding its shard full first drops the records there that have expired; if
//! none has, the *new* datagram is refused (`fragment_table_full`): datagrams already in
//! flight are never evicted to make room for a flood. Records of datagrams whose first
//! has not come may fill at most half of a shard, so a flood of orphan fragments never
//! blocks datagrams that arrive in order. Held bytes are bounded by
//! `fragment_hold_bytes` (4 MiB) in total and a sixteenth of it per source ([`hold`]):
//! a source past its share is refused (`fragment_hold_full`); when the whole hold (or a
//! shard's half) is spent, the datagrams that have waited longest make room, their held
//! fragments counted `fragment_hold_full`. A datagram's fragments arrive within moments
//! of each other, so the oldest waiting is the least likely to be completed: a flood of
//! orphan fragments pushes out its own. The order is kept per shard, so a reordered
//! datagram in the middle of a flood waits until the flood has put as many fragments into
//! its shard as older datagrams wait there (some 40 with the default hold full; measured
//! in the fragment-hold report): fragments that arrive back to back get through any
//! flood, ones spread over milliseconds may not under a fast one. Records go when their
//! datagram is complete or `fragment_timeout` after their first fragment (after their
//! first held one, while waiting).
//!
//! Concurrency: fragments of one datagram may reach different workers (RSS usually hashes
//! fragments by addresses alone, but nothing here relies on it). The table is split into
//! up to 64 shards by a hash of the key, each a `Mutex` over a small hash map. This is the
//! slow path — only fragments take a lock, whole packets never look at the table — and a
//! lock held for one map operation is cheaper and simpler than a lock-free table whose
//! records must be rewritten in place (a reused IPv4 identification replaces a record).
//! The lock-free session table (`conntrack::SessionTable`) stays untouched.
//!
//! Hashing: every field of the key comes from the sender, so both the shard choice and the
//! maps inside the shards hash with SipHash-1-3 under secret random keys (the standard
//! library's `RandomState`, seeded by the OS), one for the shards and one per map. With a
//! public hash anyone could aim their fragments at one shard and fill it, refusing
//! everyone else's datagrams there with `fragment_table_full`.

pub mod hold;
mod pieces;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::hash::{BuildHasher, RandomState};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Duration;

use conntrack::Timestamp;

use crate::stats::Counters;
use crate::verdict::{Direction, DropReason};
use hold::{Budget, Spent};
pub use hold::{FRAGMENT_HOLD_BYTES, FRAGMENT_HOLD_BYTES_LIMIT};
use pieces::{Fit, Pieces};
pub use pieces::{Piece, MAX_PIECES};

/// A map hashed with SipHash-1-3 under its own secret random key (see the module doc).
type KeyedMap<K, V> = hashbrown::HashMap<K, V, RandomState>;

/// How long a fragment record lives (default of `Nat44Config::fragment_timeout`): after
/// a datagram's first fragment, for the later ones; after its first held fragment, for
/// the first.
pub const FRAGMENT_TIMEOUT: Duration = Duration::from_secs(3);

/// Default cap on datagrams tracked at once (`Nat44Config::max_fragment_records`).
pub const MAX_FRAGMENT_RECORDS: usize = 16 * 1024;

/// The most shards the table is split into.
const MAX_SHARDS: usize = 64;
/// Fewest records per shard before the table uses more than one shard.
const MIN_PER_SHARD: usize = 64;

/// A datagram as it arrived at the NAT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FragKey {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// IP protocol number.
    pub proto: u8,
    /// IPv4 identification.
    pub ident: u16,
}

/// What the first fragment was translated to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragRewrite {
    /// Source address after translation.
    pub src: Ipv4Addr,
    /// Destination address after translation.
    pub dst: Ipv4Addr,
}

/// A later fragment held for its first: the packet as it arrived.
#[derive(Debug)]
pub struct Held {
    /// The IPv4 packet.
    pub bytes: Box<[u8]>,
    /// Its header length.
    pub ihl: usize,
}

impl Held {
    fn cost(&self) -> usize {
        self.bytes.len() + hold::OVERHEAD
    }
}

/// A later fragment (offset > 0) as it arrived.
#[derive(Clone, Copy, Debug)]
pub struct Arrival<'a> {
    /// Its datagram.
    pub key: FragKey,
    /// The side it came from.
    pub dir: Direction,
    /// Its place in the datagram.
    pub piece: Piece,
    /// The IPv4 packet.
    pub packet: &'a [u8],
    /// Its header length.
    pub ihl: usize,
    /// Whether it may be held for its first fragment (not on a hairpin's return pass,
    /// whose first fragment made its pass just before).
    pub may_hold: bool,
}

impl Arrival<'_> {
    fn held(&self) -> Held {
        Held {
            bytes: self.packet.into(),
            ihl: self.ihl,
        }
    }
}

/// What a later fragment gets ([`FragTable::later`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Later {
    /// Its datagram's first fragment passed: rewrite it to these addresses.
    Rewrite(FragRewrite),
    /// Held until the first fragment comes (a copy kept; drop this one, counted
    /// `fragment_held`).
    Held,
}

#[derive(Debug)]
enum State {
    /// The first fragment passed: what every later one gets.
    Translated(FragRewrite),
    /// Later fragments held for the first, in arrival order.
    Waiting(Vec<Held>),
    /// An overlap was seen: every fragment of the datagram is dropped (RFC 5722).
    Refused,
}

#[derive(Debug)]
struct Record {
    state: State,
    dir: Direction,
    expires: Timestamp,
    pieces: Pieces,
}

#[derive(Debug, Default)]
struct Shard {
    map: KeyedMap<FragKey, Record>,
    /// Records in [`State::Waiting`].
    waiting: usize,
    /// The keys of the records that started waiting, oldest first (some may have stopped
    /// waiting since: skipped when met, dropped when the queue is compacted).
    order: VecDeque<FragKey>,
    /// No record in this shard expires before this (a lower bound: a full shard is
    /// swept only when something may have expired).
    earliest: Option<Timestamp>,
}

/// The shared fragment table (see the module doc).
#[derive(Debug)]
pub struct FragTable {
    shards: Box<[Mutex<Shard>]>,
    /// The secret key that picks a datagram's shard.
    shard_key: RandomState,
    per_shard: usize,
    timeout: Duration,
    budget: Budget,
    /// Where the next search of the other shards for a datagram to push out starts.
    evict_from: AtomicUsize,
}

impl FragTable {
    /// A table for at most `capacity` datagrams at once, records living `timeout`, at
    /// most `hold_bytes` of fragments held for their first (0: a later fragment before
    /// its first is dropped, `fragment_out_of_order`).
    pub fn new(capacity: usize, timeout: Duration, hold_bytes: usize) -> Self {
        let shards = (capacity / MIN_PER_SHARD).clamp(1, MAX_SHARDS);
        let shards = if shards.is_power_of_two() {
            shards
        } else {
            shards.next_power_of_two() / 2
        };
        Self {
            shards: (0..shards).map(|_| Mutex::new(Shard::default())).collect(),
            shard_key: RandomState::new(),
            per_shard: capacity.div_ceil(shards),
            timeout,
            budget: Budget::new(hold_bytes),
            evict_from: AtomicUsize::new(0),
        }
    }

    #[inline]
    fn shard(&self, k: &FragKey) -> MutexGuard<'_, Shard> {
        let i = (self.shard_key.hash_one(k) >> 32) as usize & (self.shards.len() - 1);
        // A panic never happens while a shard is locked (no call below can panic), but
        // if one did, the map is still consistent: go on with it.
        self.shards[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Files the rewrite of a first fragment (`piece`: offset 0) that arrived from `dir`
    /// and was translated to `to`. Returns the later fragments held for it, to be sent
    /// after it, rewritten to `to`. A record of a datagram already translated is
    /// replaced (the identification was reused) unless this is a copy of its first
    /// fragment. Held fragments refused with the datagram are counted in `drops`.
    pub fn first(
        &self,
        now: Timestamp,
        key: FragKey,
        to: FragRewrite,
        dir: Direction,
        piece: Piece,
        drops: &mut Counters,
    ) -> Result<Vec<Held>, DropReason> {
        let mut s = self.shard(&key);
        let found = match s.map.get(&key) {
            Some(r) if r.expires > now && r.dir == dir => match r.state {
                State::Refused => return Err(DropReason::FragmentOverlap),
                State::Waiting(_) => return self.release(&mut s, key, to, piece, drops),
                State::Translated(_) => r.pieces.fit(piece) == Ok(Fit::Copy),
            },
            _ => false,
        };
        if found {
            return Ok(Vec::new()); // a copy of the first fragment
        }
        // No record, an expired one, the identification reused, or a datagram of that
        // key from the other side: the new datagram starts a new record.
        let expired = s.map.get(&key).is_some_and(|r| r.expires <= now);
        let why = if expired {
            DropReason::FragmentExpired
        } else {
            DropReason::WrongDirection
        };
        self.remove(&mut s, &key, why, drops);
        if s.map.len() >= self.per_shard {
            self.sweep_shard(&mut s, now, drops);
            if s.map.len() >= self.per_shard {
                return Err(DropReason::FragmentTableFull);
            }
        }
        let mut pieces = Pieces::default();
        pieces.add(piece)?;
        self.file(&mut s, now, key, dir, State::Translated(to), pieces);
        Ok(Vec::new())
    }

    /// The first fragment of a datagram whose later fragments are held: they go to the
    /// caller, the record now gives the first's rewrite to the rest.
    fn release(
        &self,
        s: &mut Shard,
        key: FragKey,
        to: FragRewrite,
        piece: Piece,
        drops: &mut Counters,
    ) -> Result<Vec<Held>, DropReason> {
        let r = s.map.get_mut(&key).expect("looked up by the caller");
        if let Err(why) = r.pieces.add(piece) {
            self.refuse(s, &key, why, drops);
            return Err(why);
        }
        let State::Waiting(held) = std::mem::replace(&mut r.state, State::Translated(to)) else {
            return Ok(Vec::new());
        };
        let done = r.pieces.complete();
        s.waiting -= 1;
        for h in &held {
            self.budget.give(key.src, h.cost());
        }
        if done {
            s.map.remove(&key);
        }
        Ok(held)
    }

    /// What later fragment `f` gets. Counts its bytes; the record goes once the whole
    /// datagram has passed. With no record or one still waiting for its first fragment,
    /// the fragment is held when it may be (and the bounds allow), else dropped
    /// (`fragment_out_of_order`).
    pub fn later(
        &self,
        now: Timestamp,
        f: &Arrival<'_>,
        drops: &mut Counters,
    ) -> Result<Later, DropReason> {
        let key = &f.key;
        let mut s = self.shard(key);
        if s.map.get(key).is_some_and(|r| r.expires <= now) {
            self.remove(&mut s, key, DropReason::FragmentExpired, drops);
        }
        let Some(r) = s.map.get_mut(key) else {
            return self.hold_new(&mut s, now, f, drops);
        };
        if r.dir != f.dir {
            return Err(DropReason::WrongDirection);
        }
        let fit = match r.state {
            State::Refused => return Err(DropReason::FragmentOverlap),
            _ if f.piece.in_transport_header(key.proto) => Err(DropReason::FragmentOverlap),
            _ => r.pieces.fit(f.piece),
        };
        let fit = match fit {
            Ok(fit) => fit,
            Err(why) => {
                self.refuse(&mut s, key, why, drops);
                return Err(why);
            }
        };
        match &mut r.state {
            State::Translated(to) => {
                let to = *to;
                if fit == Fit::New {
                    r.pieces.push(f.piece);
                }
                if r.pieces.complete() {
                    s.map.remove(key);
                }
                Ok(Later::Rewrite(to))
            }
            // A copy of a fragment held already: that one will be sent.
            State::Waiting(_) if fit == Fit::Copy => Ok(Later::Held),
            State::Waiting(_) if !f.may_hold => Err(DropReason::FragmentOutOfOrder),
            State::Waiting(_) => {
                let h = f.held();
                self.take_room(&mut s, key.src, h.cost(), Some(key), drops)?;
                let Some(Record {
                    state: State::Waiting(held),
                    pieces,
                    ..
                }) = s.map.get_mut(key)
                else {
                    // Not reached: `take_room` keeps this datagram.
                    self.budget.give(key.src, h.cost());
                    return Err(DropReason::FragmentHoldFull);
                };
                held.push(h);
                pieces.push(f.piece);
                Ok(Later::Held)
            }
            State::Refused => Err(DropReason::FragmentOverlap),
        }
    }

    /// A later fragment of a datagram not seen before: held in a new waiting record.
    fn hold_new(
        &self,
        s: &mut Shard,
        now: Timestamp,
        f: &Arrival<'_>,
        drops: &mut Counters,
    ) -> Result<Later, DropReason> {
        if !f.may_hold || !self.budget.holds() {
            return Err(DropReason::FragmentOutOfOrder);
        }
        if f.piece.in_transport_header(f.key.proto) {
            return Err(DropReason::FragmentOverlap);
        }
        let room = self.waiting_room();
        while s.waiting >= room || s.map.len() >= self.per_shard {
            if !self.evict_oldest(s, None, drops) {
                return Err(DropReason::FragmentHoldFull);
            }
        }
        let h = f.held();
        self.take_room(s, f.key.src, h.cost(), None, drops)?;
        let mut pieces = Pieces::default();
        let _ = pieces.add(f.piece); // the first piece of an empty list always fits
        s.waiting += 1;
        if s.order.len() >= 2 * room + 16 {
            let map = &s.map;
            s.order.retain(|k| {
                map.get(k)
                    .is_some_and(|r| matches!(r.state, State::Waiting(_)))
            });
        }
        s.order.push_back(f.key);
        self.file(s, now, f.key, f.dir, State::Waiting(vec![h]), pieces);
        Ok(Later::Held)
    }

    /// Datagrams waiting for their first fragment in one shard at most: half of it, so
    /// that orphan fragments never take the room of datagrams that arrive in order.
    fn waiting_room(&self) -> usize {
        (self.per_shard / 2).max(1)
    }

    /// Takes `cost` bytes of the hold for a fragment from `src`. When the whole hold is
    /// spent, the datagrams that have waited longest in this shard (other than `keep`)
    /// make room: a datagram's fragments arrive within moments of each other, so the
    /// oldest waiting is the least likely to see its first fragment, and a flood of
    /// orphan fragments pushes out its own before a reordered datagram's. A source
    /// past its own share is refused.
    fn take_room(
        &self,
        s: &mut Shard,
        src: Ipv4Addr,
        cost: usize,
        keep: Option<&FragKey>,
        drops: &mut Counters,
    ) -> Result<(), DropReason> {
        loop {
            match self.budget.take(src, cost) {
                Ok(()) => return Ok(()),
                Err(Spent::Total)
                    if self.evict_oldest(s, keep, drops) || self.evict_elsewhere(drops) => {}
                Err(_) => return Err(DropReason::FragmentHoldFull),
            }
        }
    }

    /// [`evict_oldest`](Self::evict_oldest) in the first other shard, from a rotating
    /// start, that has a datagram waiting and is not locked this instant (the caller's
    /// own is: it is skipped, and no two threads ever wait for each other's shard).
    fn evict_elsewhere(&self, drops: &mut Counters) -> bool {
        let n = self.shards.len();
        let start = self.evict_from.fetch_add(1, Ordering::Relaxed);
        (0..n).any(|i| {
            let other = match self.shards[(start + i) % n].try_lock() {
                Ok(g) => g,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => return false,
            };
            let mut other = other;
            self.evict_oldest(&mut other, None, drops)
        })
    }

    /// Drops the datagram that has waited longest in this shard (never `keep`), its held
    /// fragments counted `fragment_hold_full`; false when none waits.
    fn evict_oldest(&self, s: &mut Shard, keep: Option<&FragKey>, drops: &mut Counters) -> bool {
        let mut kept = None;
        let mut evicted = false;
        while let Some(k) = s.order.pop_front() {
            if Some(&k) == keep {
                kept = Some(k);
                continue;
            }
            if s.map
                .get(&k)
                .is_some_and(|r| matches!(r.state, State::Waiting(_)))
            {
                self.remove(s, &k, DropReason::FragmentHoldFull, drops);
                evicted = true;
                break;
            }
        }
        if let Some(k) = kept {
            s.order.push_front(k);
        }
        evicted
    }

    fn file(
        &self,
        s: &mut Shard,
        now: Timestamp,
        key: FragKey,
        dir: Direction,
        state: State,
        pieces: Pieces,
    ) {
        let expires = now + self.timeout;
        s.map.insert(
            key,
            Record {
                state,
                dir,
                expires,
                pieces,
            },
        );
        s.earliest = Some(s.earliest.map_or(expires, |e| e.min(expires)));
    }

    /// The datagram `key` is refused for the rest of its record's life; what it held is
    /// dropped for `why`.
    fn refuse(&self, s: &mut Shard, key: &FragKey, why: DropReason, drops: &mut Counters) {
        if let Some(r) = s.map.get_mut(key) {
            let was = std::mem::replace(&mut r.state, State::Refused);
            self.discard(s, key.src, was, why, drops);
        }
    }

    /// Removes the record of `key`, if any; what it held is dropped for `why`.
    fn remove(&self, s: &mut Shard, key: &FragKey, why: DropReason, drops: &mut Counters) {
        if let Some(r) = s.map.remove(key) {
            self.discard(s, key.src, r.state, why, drops);
        }
    }

    /// Gives back what a record in `state` held (from `src`), counting each dropped.
    fn discard(
        &self,
        s: &mut Shard,
        src: Ipv4Addr,
        state: State,
        why: DropReason,
        drops: &mut Counters,
    ) {
        if let State::Waiting(held) = state {
            s.waiting -= 1;
            for h in held {
                self.budget.give(src, h.cost());
                drops.drop(why);
            }
        }
    }

    /// Drops the expired records of one shard.
    fn sweep_shard(&self, s: &mut Shard, now: Timestamp, drops: &mut Counters) -> usize {
        if s.earliest.is_none_or(|e| e > now) {
            return 0;
        }
        let gone: Vec<FragKey> = s
            .map
            .iter()
            .filter(|(_, r)| r.expires <= now)
            .map(|(k, _)| *k)
            .collect();
        for k in &gone {
            self.remove(s, k, DropReason::FragmentExpired, drops);
        }
        s.earliest = s.map.values().map(|r| r.expires).min();
        gone.len()
    }

    /// Drops every expired record (held fragments counted `fragment_expired` in
    /// `drops`); returns how many went. The reaper calls this.
    pub fn sweep(&self, now: Timestamp, drops: &mut Counters) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let mut s = s.lock().unwrap_or_else(PoisonError::into_inner);
                self.sweep_shard(&mut s, now, drops)
            })
            .sum()
    }

    /// Records held (a walk over the shards: for reports and tests).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).map.len())
            .sum()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of fragments held for their first now (with their bookkeeping).
    pub fn held_bytes(&self) -> usize {
        self.budget.used()
    }
}

/// Sets a non-first fragment's addresses to `to`, decrements its TTL when asked and
/// recomputes its header checksum (the header was verified on the way in). `ihl` is the
/// header length the parser validated. Returns false, writing nothing, on a short slice.
pub fn rewrite_fragment(pkt: &mut [u8], ihl: usize, to: FragRewrite, decrement_ttl: bool) -> bool {
    let Some(h) = pkt.get_mut(..ihl) else {
        return false;
    };
    if ihl < 20 {
        return false;
    }
    h[12..16].copy_from_slice(&to.src.octets());
    h[16..20].copy_from_slice(&to.dst.octets());
    if decrement_ttl {
        h[8] = h[8].saturating_sub(1);
    }
    h[10..12].copy_from_slice(&[0, 0]);
    let c = wire::checksum::checksum(h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    true
}

// Memory estimate.
impl FragTable {
    /// Bytes a table for `capacity` datagrams holds when full: the hash maps' entries
    /// (key, record, a control byte) with room for growth (up to twice), each record's
    /// list of fragments at its longest (the held fragments are `hold::Budget`'s).
    pub fn bytes_for(capacity: usize) -> usize {
        let entry = std::mem::size_of::<FragKey>() + std::mem::size_of::<Record>() + 1;
        let pieces = MAX_PIECES * std::mem::size_of::<(u16, u16)>();
        capacity.saturating_mul(entry).saturating_mul(2)
            + capacity.saturating_mul(pieces)
            + MAX_SHARDS * std::mem::size_of::<Mutex<Shard>>()
    }
}
