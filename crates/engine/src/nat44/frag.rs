//! Fragment tracking (RFC 4787 REQ-14, RFC 6146 §3.4/§3.5): only the first fragment of
//! a datagram carries the ports, so the NAT remembers what it did to it and does the same
//! to the address fields of the fragments that follow.
//!
//! A first fragment (offset 0, MF set) is translated through its session exactly like a
//! whole packet (the transport checksum covers the whole datagram, but an incremental
//! update for the changed addresses and ports in the first fragment's checksum field is
//! still exact). Then the datagram's key as it arrived — (source, destination, protocol,
//! IPv4 identification) — is filed here with the addresses it left with and the
//! direction it came from. A non-first fragment (offset > 0) finds that record and gets
//! the same addresses, its TTL and header checksum; it has no transport header to touch.
//!
//! What this table never does:
//! - **Buffer.** The engine answers one packet with one verdict. A non-first fragment
//!   that arrives before its first fragment is dropped (`fragment_out_of_order`): RFC
//!   4787 REQ-14 lets a NAT hold such fragments, but holding them would need a second
//!   output path (a `poll_transmit`) through every runtime for a case that the sender's
//!   retransmission (TCP) or the application's retry (UDP) already recovers from, and
//!   path MTU discovery keeps rare. The drop is counted, so it is visible.
//! - **Grow without bound.** The table holds at most `max_fragment_records` records
//!   (`Nat44Config`). A new first fragment finding its shard full first drops the records
//!   there that have expired; if none has, the *new* datagram is refused
//!   (`fragment_table_full`): datagrams already in flight are never evicted to make room
//!   for a flood. Records live `fragment_timeout` (3 s by default) and go as soon as every
//!   byte of their datagram has been forwarded (the last fragment gives the length), so
//!   under normal traffic the table holds only datagrams in transit.
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
//! public hash (FxHash, as here before) anyone could aim their fragments at one shard and
//! fill it, refusing everyone else's datagrams there with `fragment_table_full`.

use std::hash::{BuildHasher, RandomState};
use std::net::Ipv4Addr;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use conntrack::Timestamp;

use crate::verdict::{Direction, DropReason};

/// A map hashed with SipHash-1-3 under its own secret random key (see the module doc).
type KeyedMap<K, V> = hashbrown::HashMap<K, V, RandomState>;

/// How long a fragment record lives after its first fragment (default of
/// `Nat44Config::fragment_timeout`): fragments of one datagram travel together, so a few
/// seconds is generous (Linux waits 30 s to *reassemble*; a NAT that only remembers a
/// rewrite can afford to forget sooner and keep the table small).
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

#[derive(Clone, Copy, Debug)]
struct Record {
    to: FragRewrite,
    dir: Direction,
    expires: Timestamp,
    /// Payload bytes of this datagram forwarded so far.
    seen: u32,
    /// The datagram's payload length, once its last fragment (MF clear) has been seen.
    end: Option<u32>,
}

#[derive(Debug, Default)]
struct Shard {
    map: KeyedMap<FragKey, Record>,
    /// No record in this shard expires before this (a lower bound: a full shard is
    /// swept only when something may have expired).
    earliest: Option<Timestamp>,
}

impl Shard {
    fn sweep(&mut self, now: Timestamp) -> usize {
        let before = self.map.len();
        self.map.retain(|_, r| r.expires > now);
        self.earliest = self.map.values().map(|r| r.expires).min();
        before - self.map.len()
    }
}

/// A non-first fragment's place in its datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Fragment offset in bytes.
    pub offset: u32,
    /// Payload bytes this fragment carries.
    pub len: u32,
    /// More Fragments flag.
    pub more: bool,
}

/// The shared fragment table (see the module doc).
#[derive(Debug)]
pub struct FragTable {
    shards: Box<[Mutex<Shard>]>,
    /// The secret key that picks a datagram's shard.
    shard_key: RandomState,
    per_shard: usize,
    timeout: Duration,
}

impl FragTable {
    /// A table for at most `capacity` datagrams at once, records living `timeout`.
    pub fn new(capacity: usize, timeout: Duration) -> Self {
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

    /// Files the rewrite of a first fragment (`len` payload bytes) that arrived from
    /// `dir`. A record with the same key is replaced: the identification was reused, or
    /// the first fragment came twice.
    pub fn insert(
        &self,
        now: Timestamp,
        key: FragKey,
        to: FragRewrite,
        dir: Direction,
        len: u32,
    ) -> Result<(), DropReason> {
        let mut s = self.shard(&key);
        if s.map.len() >= self.per_shard && !s.map.contains_key(&key) {
            if s.earliest.is_some_and(|e| e <= now) {
                s.sweep(now);
            }
            if s.map.len() >= self.per_shard {
                return Err(DropReason::FragmentTableFull);
            }
        }
        let expires = now + self.timeout;
        s.map.insert(
            key,
            Record {
                to,
                dir,
                expires,
                seen: len,
                end: None,
            },
        );
        s.earliest = Some(s.earliest.map_or(expires, |e| e.min(expires)));
        Ok(())
    }

    /// The rewrite for a non-first fragment of datagram `key` arriving from `dir`. Counts
    /// its bytes; the record goes once the whole datagram has passed.
    pub fn lookup(
        &self,
        now: Timestamp,
        key: &FragKey,
        dir: Direction,
        piece: Piece,
    ) -> Result<FragRewrite, DropReason> {
        let mut s = self.shard(key);
        let Some(r) = s.map.get_mut(key) else {
            return Err(DropReason::FragmentOutOfOrder);
        };
        if r.expires <= now {
            s.map.remove(key);
            return Err(DropReason::FragmentOutOfOrder);
        }
        if r.dir != dir {
            return Err(DropReason::WrongDirection);
        }
        let to = r.to;
        r.seen = r.seen.saturating_add(piece.len);
        if !piece.more {
            r.end = Some(piece.offset.saturating_add(piece.len));
        }
        // A duplicated fragment may end the record early; the fragments still missing
        // are then dropped as out of order, as they would be after a loss.
        if r.end.is_some_and(|end| r.seen >= end) {
            s.map.remove(key);
        }
        Ok(to)
    }

    /// Drops every expired record; returns how many went. The reaper calls this.
    pub fn sweep(&self, now: Timestamp) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let mut s = s.lock().unwrap_or_else(PoisonError::into_inner);
                if s.earliest.is_some_and(|e| e <= now) {
                    s.sweep(now)
                } else {
                    0
                }
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
    /// (key, record, a control byte) with room for growth (up to twice).
    pub fn bytes_for(capacity: usize) -> usize {
        let entry = std::mem::size_of::<FragKey>() + std::mem::size_of::<Record>() + 1;
        capacity.saturating_mul(entry).saturating_mul(2)
            + MAX_SHARDS * std::mem::size_of::<Mutex<Shard>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ident: u16) -> FragKey {
        FragKey {
            src: Ipv4Addr::new(10, 0, 0, 2),
            dst: Ipv4Addr::new(198, 51, 100, 2),
            proto: 17,
            ident,
        }
    }

    const TO: FragRewrite = FragRewrite {
        src: Ipv4Addr::new(203, 0, 113, 1),
        dst: Ipv4Addr::new(198, 51, 100, 2),
    };

    fn piece(offset: u32, len: u32, more: bool) -> Piece {
        Piece { offset, len, more }
    }

    #[test]
    fn record_goes_when_the_datagram_is_complete() {
        let t = FragTable::new(16, FRAGMENT_TIMEOUT);
        let now = Timestamp::from_secs(1);
        t.insert(now, key(1), TO, Direction::Outbound, 1480)
            .unwrap();
        assert_eq!(
            t.lookup(now, &key(1), Direction::Outbound, piece(2960, 100, false)),
            Ok(TO)
        );
        assert_eq!(t.len(), 1, "the middle fragment is still due");
        assert_eq!(
            t.lookup(now, &key(1), Direction::Outbound, piece(1480, 1480, true)),
            Ok(TO)
        );
        assert!(t.is_empty());
        assert_eq!(
            t.lookup(now, &key(1), Direction::Outbound, piece(1480, 8, true)),
            Err(DropReason::FragmentOutOfOrder)
        );
    }

    #[test]
    fn wrong_direction_and_expiry() {
        let t = FragTable::new(16, Duration::from_secs(2));
        t.insert(Timestamp::ZERO, key(1), TO, Direction::Outbound, 8)
            .unwrap();
        assert_eq!(
            t.lookup(
                Timestamp::ZERO,
                &key(1),
                Direction::Inbound,
                piece(8, 8, true)
            ),
            Err(DropReason::WrongDirection)
        );
        assert_eq!(
            t.lookup(
                Timestamp::from_secs(2),
                &key(1),
                Direction::Outbound,
                piece(8, 8, true)
            ),
            Err(DropReason::FragmentOutOfOrder)
        );
        t.insert(Timestamp::ZERO, key(2), TO, Direction::Outbound, 8)
            .unwrap();
        assert_eq!(t.sweep(Timestamp::from_secs(1)), 0);
        assert_eq!(t.sweep(Timestamp::from_secs(2)), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn a_full_table_refuses_new_datagrams_until_records_expire() {
        let t = FragTable::new(4, Duration::from_secs(2));
        for i in 0..4 {
            t.insert(Timestamp::ZERO, key(i), TO, Direction::Outbound, 8)
                .unwrap();
        }
        assert_eq!(
            t.insert(Timestamp::ZERO, key(9), TO, Direction::Outbound, 8),
            Err(DropReason::FragmentTableFull)
        );
        // The same key again replaces its record; nothing in flight is evicted.
        t.insert(Timestamp::ZERO, key(3), TO, Direction::Outbound, 8)
            .unwrap();
        assert_eq!(t.len(), 4);
        t.insert(Timestamp::from_secs(2), key(9), TO, Direction::Outbound, 8)
            .unwrap();
        assert_eq!(t.len(), 1, "the expired records made room");
    }

    #[test]
    fn shards_split_the_capacity() {
        let t = FragTable::new(MAX_FRAGMENT_RECORDS, FRAGMENT_TIMEOUT);
        assert_eq!(t.shards.len(), MAX_SHARDS);
        assert_eq!(t.per_shard * MAX_SHARDS, MAX_FRAGMENT_RECORDS);
        assert_eq!(FragTable::new(0, FRAGMENT_TIMEOUT).shards.len(), 1);
        assert_eq!(FragTable::new(200, FRAGMENT_TIMEOUT).shards.len(), 2);
    }

    /// Datagrams crafted to share one shard under a public unkeyed hash (FxHash, the
    /// attacker's model) spread over the shards: twice a shard's capacity of them are all
    /// admitted, where a table sharded by that hash would refuse half with
    /// `fragment_table_full`.
    #[test]
    fn fragments_crafted_for_one_shard_spread_out() {
        use rustc_hash::FxHasher;
        use std::hash::{Hash, Hasher};
        let t = FragTable::new(MAX_FRAGMENT_RECORDS, FRAGMENT_TIMEOUT);
        let old_shard = |k: &FragKey| {
            let mut h = FxHasher::default();
            Hash::hash(k, &mut h);
            (h.finish() >> 32) as usize & (MAX_SHARDS - 1)
        };
        let crafted: Vec<FragKey> = (0..u32::MAX)
            .map(|i| FragKey {
                src: Ipv4Addr::from(0xC633_6400 | (i >> 16)),
                dst: Ipv4Addr::new(203, 0, 113, 1),
                proto: 17,
                ident: i as u16,
            })
            .filter(|k| old_shard(k) == 0)
            .take(2 * t.per_shard)
            .collect();
        let to = FragRewrite {
            src: Ipv4Addr::new(198, 51, 100, 9),
            dst: Ipv4Addr::new(10, 0, 0, 9),
        };
        let now = Timestamp::from_secs(1);
        for k in &crafted {
            assert_eq!(
                t.insert(now, *k, to, Direction::Inbound, 8),
                Ok(()),
                "{k:?}"
            );
        }
    }
}
