//! The session table: original and reply connection records, installed and removed
//! together, found by one hash lookup on the packet's tuple.
//!
//! Single-owner today (one engine instance per table); the multi-core work replaces the
//! index with a lock-free one behind the same operations.

use std::hash::BuildHasherDefault;

use hashbrown::HashMap;
use rustc_hash::FxHasher;

use crate::binding::BindingId;
use crate::tcp::TcpState;
use crate::time::Timestamp;
use crate::tuple::Tuple;

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// Which of a session's two records a packet matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The record keyed by the tuple of the packet that created the session.
    Original,
    /// The record keyed by the tuple replies arrive with.
    Reply,
}

/// Index of a session in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SessionId(u32);

impl SessionId {
    /// The slot number.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One connection record: the tuple a packet arrives with, what it is rewritten to, and
/// when a packet last hit it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// The tuple as the packet arrives (the lookup key).
    pub initial: Tuple,
    /// The tuple after translation.
    pub revised: Tuple,
    /// Refreshed on every hit.
    pub last_seen: Timestamp,
}

/// A session: both records plus what the two share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Session {
    /// Record for packets in the creating direction.
    pub original: Record,
    /// Record for replies; its initial tuple is the original's revised tuple reversed.
    pub reply: Record,
    /// The binding (public address and port) this session uses.
    pub binding: BindingId,
    /// TCP tracking (unused for UDP and ICMP).
    pub tcp: TcpState,
    /// Whether the original record's packets come from the inside (the reply record's then
    /// come from outside, unless the session is hairpinned).
    pub original_from_inside: bool,
    /// Both ends are inside hosts talking through a public address.
    pub hairpin: bool,
}

impl Session {
    /// The record on `side`.
    #[inline]
    pub fn record(&self, side: Side) -> &Record {
        match side {
            Side::Original => &self.original,
            Side::Reply => &self.reply,
        }
    }

    /// The record on `side`, mutably.
    #[inline]
    pub fn record_mut(&mut self, side: Side) -> &mut Record {
        match side {
            Side::Original => &mut self.original,
            Side::Reply => &mut self.reply,
        }
    }

    /// The later of the two records' last-seen times.
    #[inline]
    pub fn last_seen(&self) -> Timestamp {
        self.original.last_seen.max(self.reply.last_seen)
    }
}

/// What a lookup found: which session, and which of its records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRef {
    /// The session.
    pub session: SessionId,
    /// The record that matched.
    pub side: Side,
}

/// All live sessions, indexed by both records' initial tuples.
#[derive(Debug, Default)]
pub struct SessionTable {
    index: FxMap<Tuple, RecordRef>,
    slots: Vec<Option<Session>>,
    free: Vec<u32>,
    live: usize,
}

/// Why an insert failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertError {
    /// A record with one of the two keys already exists.
    Exists,
}

impl SessionTable {
    /// An empty table with room for `capacity` sessions before it grows.
    pub fn with_capacity(capacity: usize) -> Self {
        let mut index = FxMap::default();
        index.reserve(capacity.min(1 << 22) * 2);
        Self {
            index,
            slots: Vec::with_capacity(capacity.min(1 << 22)),
            free: Vec::new(),
            live: 0,
        }
    }

    /// Number of live sessions.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether the table holds no session.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Finds the record whose initial tuple is `key`.
    #[inline]
    pub fn lookup(&self, key: &Tuple) -> Option<RecordRef> {
        self.index.get(key).copied()
    }

    /// The session behind an id.
    #[inline]
    pub fn get(&self, id: SessionId) -> Option<&Session> {
        self.slots.get(id.index()).and_then(|s| s.as_ref())
    }

    /// The session behind an id, mutably.
    #[inline]
    pub fn get_mut(&mut self, id: SessionId) -> Option<&mut Session> {
        self.slots.get_mut(id.index()).and_then(|s| s.as_mut())
    }

    /// Installs both records of `session` at once; neither is installed if either key exists.
    pub fn insert(&mut self, session: Session) -> Result<SessionId, InsertError> {
        let ok = session.original.initial;
        let rk = session.reply.initial;
        if ok == rk || self.index.contains_key(&ok) || self.index.contains_key(&rk) {
            return Err(InsertError::Exists);
        }
        let id = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(session);
                SessionId(i)
            }
            None => {
                self.slots.push(Some(session));
                SessionId((self.slots.len() - 1) as u32)
            }
        };
        self.index.insert(
            ok,
            RecordRef {
                session: id,
                side: Side::Original,
            },
        );
        self.index.insert(
            rk,
            RecordRef {
                session: id,
                side: Side::Reply,
            },
        );
        self.live += 1;
        Ok(id)
    }

    /// Removes a session and both its records; returns it.
    pub fn remove(&mut self, id: SessionId) -> Option<Session> {
        let s = self.slots.get_mut(id.index())?.take()?;
        self.index.remove(&s.original.initial);
        self.index.remove(&s.reply.initial);
        self.free.push(id.0);
        self.live -= 1;
        Some(s)
    }

    /// Removes every session for which `expired` returns true, handing each to `on_removed`.
    /// This is the reaper's walk over the table.
    pub fn reap(
        &mut self,
        mut expired: impl FnMut(&Session) -> bool,
        mut on_removed: impl FnMut(Session),
    ) {
        for i in 0..self.slots.len() {
            let dead = matches!(&self.slots[i], Some(s) if expired(s));
            if dead {
                if let Some(s) = self.remove(SessionId(i as u32)) {
                    on_removed(s);
                }
            }
        }
    }

    /// Iterates over live sessions.
    pub fn iter(&self) -> impl Iterator<Item = (SessionId, &Session)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (SessionId(i as u32), s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuple::{Endpoint, Proto};
    use std::net::Ipv4Addr;

    fn ep(a: [u8; 4], p: u16) -> Endpoint {
        Endpoint::new(Ipv4Addr::from(a), p)
    }

    fn session(inside_port: u16) -> Session {
        let orig = Tuple::new(
            Proto::Udp,
            ep([10, 0, 0, 2], inside_port),
            ep([198, 51, 100, 2], 53),
        );
        let revised = Tuple::new(
            Proto::Udp,
            ep([203, 0, 113, 1], inside_port),
            ep([198, 51, 100, 2], 53),
        );
        Session {
            original: Record {
                initial: orig,
                revised,
                last_seen: Timestamp::ZERO,
            },
            reply: Record {
                initial: revised.reversed(),
                revised: orig.reversed(),
                last_seen: Timestamp::ZERO,
            },
            binding: BindingId::from_index(0),
            tcp: TcpState::default(),
            original_from_inside: true,
            hairpin: false,
        }
    }

    #[test]
    fn both_records_installed_and_removed_together() {
        let mut t = SessionTable::default();
        let s = session(1000);
        let id = t.insert(s).unwrap();
        assert_eq!(
            t.lookup(&s.original.initial),
            Some(RecordRef {
                session: id,
                side: Side::Original
            })
        );
        assert_eq!(
            t.lookup(&s.reply.initial),
            Some(RecordRef {
                session: id,
                side: Side::Reply
            })
        );
        assert_eq!(t.insert(s), Err(InsertError::Exists));
        assert_eq!(t.len(), 1);
        t.remove(id).unwrap();
        assert!(t.lookup(&s.original.initial).is_none());
        assert!(t.lookup(&s.reply.initial).is_none());
        assert!(t.is_empty());
        // The slot is reused.
        assert_eq!(t.insert(session(1001)).unwrap(), id);
    }

    #[test]
    fn reap_removes_only_expired() {
        let mut t = SessionTable::default();
        for p in 0..10 {
            let mut s = session(2000 + p);
            s.original.last_seen = Timestamp::from_secs(u64::from(p));
            t.insert(s).unwrap();
        }
        let mut removed = 0;
        t.reap(
            |s| s.last_seen() < Timestamp::from_secs(5),
            |_| removed += 1,
        );
        assert_eq!(removed, 5);
        assert_eq!(t.len(), 5);
        assert_eq!(t.iter().count(), 5);
    }
}
