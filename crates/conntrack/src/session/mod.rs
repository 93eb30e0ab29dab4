//! The session table shared by all workers: each session is one cache line holding the
//! original and the reply connection record (initial tuple as key, revised tuple derived
//! from the other record's key, last-seen time per record), found through a lock-free
//! chained index (see [`crate::chain`]).
//!
//! Quick NAT's rule "install the original and the reply record together" holds: the reply
//! record is inserted first and is the arbiter (if its tuple exists, another worker made
//! this session and the new one is dropped unpublished), then the original record.
//!
//! Workers look up, refresh timestamps, update TCP state and may mark a session dead. Only
//! the reaper unlinks sessions and, after a QSBR grace period, frees their slots.
//!
//! TCP sequence state (see [`crate::tcp`]) does not fit the slot's cache line: it lives in
//! a parallel array indexed by session id, 16 bytes a session, reserved in chunks as the
//! slab's are and touched only by TCP packets.
//!
//! Early drop: [`SessionTable::early_drop`] marks unconfirmed sessions dead (any thread
//! may), so that the reaper reclaims them first when the table fills; see
//! [`SessionTable::insert_within`] for the headroom kept for inside users.
//!
//! Live count and eviction (conntrack's `early_drop` at insert): a session marked dead
//! stops counting against limits at once (`dead_pending`), although its slot comes back
//! only after the reaper unlinked it and a grace period passed.
//! [`SessionTable::insert_evicting`] at the live limit marks one unconfirmed session dead
//! and takes a physically free slot instead, so a new entry always gets in while any
//! victim exists; the victims are queued for the reaper ([`SessionTable::reap_queued`])
//! so their slots come back within a tick, not a full sweep.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::chain::{ChainIndex, Nodes, Refused};
use crate::key::Key;
use crate::slab::{Slab, Slot};
use crate::tcp::{Reject, Segment, SeqDir, TcpState};
use crate::time::Timestamp;
use crate::tuple::Tuple;

/// Which of a session's two records a packet matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Record {
    /// The record keyed by the tuple of the packet that created the session.
    Original,
    /// The record keyed by the tuple replies arrive with.
    Reply,
}

impl Record {
    #[inline]
    fn index(self) -> usize {
        match self {
            Record::Original => 0,
            Record::Reply => 1,
        }
    }
}

/// Index of a session slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SessionId(pub u32);

/// A session and which of its records matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRef {
    /// The session.
    pub session: SessionId,
    /// The record that matched.
    pub side: Record,
}

// Lifecycle, in the low two bits of `state`.
const FREE: u32 = 0;
const ALIVE: u32 = 1;
const DEAD: u32 = 2;
const LIFECYCLE: u32 = 3;
/// The original record's packets come from the inside.
pub const FROM_INSIDE: u32 = 1 << 2;
/// Both ends are inside hosts talking through a public address.
pub const HAIRPIN: u32 = 1 << 3;
/// A worker has asked the offload to look at this session ([`Hit::hint_once`]); cleared
/// by whoever takes the hint ([`SessionTable::clear_hint`]), so a later packet can ask
/// again. Not part of [`SessionView::flags`].
pub const OFFLOAD_HINTED: u32 = 1 << 4;
/// A packet has come in from the outside on this session: set at insert for a session an
/// inbound packet created, else by the first inbound packet ([`Hit::note_inbound`]). A
/// port whose sessions never had one has no late packets to keep from a new owner.
pub const INBOUND_SEEN: u32 = 1 << 5;
/// An application-level gateway reads (and may rewrite) this session's payload: every
/// one of its packets must take the engine, never an offload.
pub const ALG: u32 = 1 << 6;
/// The flags a session keeps from its insert (see [`NewSession::flags`]).
const KEPT: u32 = FROM_INSIDE | HAIRPIN | INBOUND_SEEN | ALG;
const TCP_SHIFT: u32 = 8;
const TCP_MASK: u32 = (1 << crate::tcp::BITS) - 1;
const _: () = assert!(TCP_SHIFT + crate::tcp::BITS <= 32);
/// Sessions per chunk of the sequence array (as the slab's chunks).
const SEQ_CHUNK_BITS: u32 = 16;

/// Per-session TCP sequence state, one packed [`SeqDir`] per record's direction.
type SeqPair = [AtomicU64; 2];

/// How stale a record's last-seen time may get before a hit rewrites it.
pub const TOUCH_GRANULARITY: std::time::Duration = std::time::Duration::from_millis(50);

/// One session: both records in one cache line.
#[derive(Debug)]
#[repr(align(64))]
pub struct SessionSlot {
    /// Keys: [original record's initial tuple, reply record's initial tuple].
    keys: [[AtomicU64; 2]; 2],
    /// Last-seen time per record, in nanoseconds.
    seen: [AtomicU64; 2],
    /// Chain links per record (links[0] also chains free slots).
    links: [AtomicU32; 2],
    /// Lifecycle, flags and TCP state.
    state: AtomicU32,
    /// The binding (or other owner reference) the session holds.
    binding: AtomicU32,
}

impl Slot for SessionSlot {
    fn empty() -> Self {
        Self {
            keys: [
                [AtomicU64::new(0), AtomicU64::new(0)],
                [AtomicU64::new(0), AtomicU64::new(0)],
            ],
            seen: [AtomicU64::new(0), AtomicU64::new(0)],
            links: [AtomicU32::new(0), AtomicU32::new(0)],
            state: AtomicU32::new(FREE),
            binding: AtomicU32::new(0),
        }
    }
    fn free_link(&self) -> &AtomicU32 {
        &self.links[0]
    }
}

impl SessionSlot {
    #[inline]
    fn key(&self, side: usize) -> Key {
        Key(
            self.keys[side][0].load(Ordering::Acquire),
            self.keys[side][1].load(Ordering::Acquire),
        )
    }
}

/// What a new session is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewSession {
    /// The original record's initial tuple (the creating packet as it arrived).
    pub initial: Tuple,
    /// The original record's revised tuple (the creating packet after translation).
    pub revised: Tuple,
    /// The binding id the session holds a reference on.
    pub binding: u32,
    /// `FROM_INSIDE`, `HAIRPIN`, `INBOUND_SEEN`, `ALG`.
    pub flags: u32,
}

/// A snapshot of a live session, for the reaper and for inspection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionView {
    /// Original record's initial tuple.
    pub initial: Tuple,
    /// Original record's revised tuple.
    pub revised: Tuple,
    /// Last-seen time of the original and the reply record.
    pub seen: [Timestamp; 2],
    /// The binding it holds.
    pub binding: u32,
    /// `FROM_INSIDE` / `HAIRPIN` / `INBOUND_SEEN` / `ALG` flags.
    pub flags: u32,
    /// TCP state.
    pub tcp: TcpState,
}

impl SessionView {
    /// The later of the two records' last-seen times.
    pub fn last_seen(&self) -> Timestamp {
        self.seen[0].max(self.seen[1])
    }
}

/// Why a session was not installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertError {
    /// The table is at capacity.
    Full,
    /// A live session with one of the keys exists (another worker won): the record of
    /// that session which the new session's original tuple matches.
    Exists(RecordRef),
}

struct View<'a>(&'a Slab<SessionSlot>);

impl Nodes for View<'_> {
    #[inline]
    fn key(&self, n: u32) -> Key {
        self.0
            .get(n >> 1)
            .map_or(Key(0, 0), |s| s.key((n & 1) as usize))
    }
    #[inline]
    fn live(&self, n: u32) -> bool {
        self.0
            .get(n >> 1)
            .is_some_and(|s| s.state.load(Ordering::Acquire) & LIFECYCLE == ALIVE)
    }
    #[inline]
    fn link(&self, n: u32) -> Option<&AtomicU32> {
        self.0.get(n >> 1).map(|s| &s.links[(n & 1) as usize])
    }
    #[inline]
    fn probe(&self, n: u32, key: Key) -> Option<(bool, u32)> {
        let s = self.0.get(n >> 1)?;
        let side = (n & 1) as usize;
        let next = s.links[side].load(Ordering::Acquire);
        let hit = s.keys[side][0].load(Ordering::Acquire) == key.0
            && s.keys[side][1].load(Ordering::Acquire) == key.1
            && s.state.load(Ordering::Acquire) & LIFECYCLE == ALIVE;
        Some((hit, next))
    }
}

/// A looked-up record with its session's slot in hand: the per-packet operations go
/// through this so the slot is located once per packet.
#[derive(Clone, Copy, Debug)]
pub struct Hit<'a> {
    slot: &'a SessionSlot,
    /// The table, for the TCP sequence words (looked up only by TCP packets).
    table: &'a SessionTable,
    /// Which session and record.
    pub r: RecordRef,
}

impl Hit<'_> {
    /// Later last-seen time of the two records, TCP state, protocol.
    #[inline]
    pub fn activity(&self) -> (Timestamp, TcpState, crate::tuple::Proto) {
        let s = self.slot;
        let seen = s.seen[0]
            .load(Ordering::Relaxed)
            .max(s.seen[1].load(Ordering::Relaxed));
        let st = s.state.load(Ordering::Acquire);
        let proto = crate::tuple::Proto::from_index(s.keys[0][1].load(Ordering::Relaxed) & 0xff);
        (
            Timestamp::from_nanos(seen),
            TcpState::from_bits(st >> TCP_SHIFT),
            proto,
        )
    }

    /// `FROM_INSIDE` / `HAIRPIN` / `ALG` flags.
    #[inline]
    pub fn flags(&self) -> u32 {
        self.slot.state.load(Ordering::Acquire) & (FROM_INSIDE | HAIRPIN | ALG)
    }

    /// The tuple the packet must be rewritten to.
    #[inline]
    pub fn revised(&self) -> Tuple {
        self.slot.key(1 - self.r.side.index()).reversed().tuple()
    }

    /// The record's initial tuple.
    #[inline]
    pub fn initial(&self) -> Tuple {
        self.slot.key(self.r.side.index()).tuple()
    }

    /// Refreshes the record's timestamp (see [`SessionTable::touch`]).
    #[inline]
    pub fn touch(&self, now: Timestamp) {
        touch_slot(self.slot, self.r.side, now);
    }

    /// [`touch`](Self::touch) for a packet that came from the outside (`inbound`) or not:
    /// an inbound one also records [`INBOUND_SEEN`] ([`note_inbound`](Self::note_inbound)).
    #[inline]
    pub fn touch_from(&self, now: Timestamp, inbound: bool) {
        self.touch(now);
        if inbound {
            self.note_inbound();
        }
    }

    /// Forgets both directions' TCP sequence words, as Linux's flowtable marks a
    /// connection it offloads `IP_CT_TCP_FLAG_BE_LIBERAL`: packets forwarded elsewhere
    /// (an XDP fast path) move sequence numbers this table never sees, and an RST
    /// checked against stale words would be refused. The next segments seen rebuild them.
    pub fn forget_sequence(&self) {
        if let Some(w) = self.table.seq_of(self.r.session.0) {
            w[0].store(0, Ordering::Relaxed);
            w[1].store(0, Ordering::Relaxed);
        }
    }

    /// Sets the session's [`OFFLOAD_HINTED`] flag: true when this call did (so its caller
    /// queues the one hint), false when it was set already. A plain load first, so a
    /// session already hinted costs no write.
    #[inline]
    pub fn hint_once(&self) -> bool {
        self.slot.state.load(Ordering::Relaxed) & OFFLOAD_HINTED == 0
            && self.slot.state.fetch_or(OFFLOAD_HINTED, Ordering::AcqRel) & OFFLOAD_HINTED == 0
    }

    /// Records that an inbound packet used the session ([`INBOUND_SEEN`]). A plain load
    /// first: only the session's first inbound packet writes.
    #[inline]
    pub fn note_inbound(&self) {
        if self.slot.state.load(Ordering::Relaxed) & INBOUND_SEEN == 0 {
            self.slot.state.fetch_or(INBOUND_SEEN, Ordering::AcqRel);
        }
    }

    /// Feeds a TCP segment into the session's state (see [`crate::tcp::track`]); `Err`:
    /// the segment must be dropped, nothing changed.
    #[inline]
    pub fn observe_tcp(&self, seg: &Segment) -> Result<(), Reject> {
        observe_slot(
            self.slot,
            self.table.seq_of(self.r.session.0),
            self.r.side,
            seg,
        )
    }
}

#[inline]
fn touch_slot(s: &SessionSlot, side: Record, now: Timestamp) {
    let seen = &s.seen[side.index()];
    if now.as_nanos().saturating_sub(seen.load(Ordering::Relaxed))
        > TOUCH_GRANULARITY.as_nanos() as u64
    {
        seen.store(now.as_nanos(), Ordering::Relaxed);
    }
}

/// Applies one segment: the sequence words are written only when they change (a data
/// segment moves its direction's end), the state word only on a transition (CAS). The
/// sequence words are plain load/store: two workers racing on one direction of one
/// connection can lose an update, which only leaves the window a little behind (as
/// conntrack's own loose tracking tolerates); the state word is never lost.
#[inline]
fn observe_slot(
    s: &SessionSlot,
    seq: Option<&SeqPair>,
    side: Record,
    seg: &Segment,
) -> Result<(), Reject> {
    let mut cur = s.state.load(Ordering::Acquire);
    let (si, ri) = (side.index(), 1 - side.index());
    let st = TcpState::from_bits(cur >> TCP_SHIFT);
    if crate::tcp::only_advances(st, seg) {
        // Established data or ACK: only the sender's sequence words move.
        if let Some(w) = seq {
            let old = w[si].load(Ordering::Relaxed);
            let mut d = SeqDir::unpack(old);
            d.advance(seg, st.window_shift(side));
            let new = d.pack();
            if new != old {
                w[si].store(new, Ordering::Relaxed);
            }
        }
        return Ok(());
    }
    let mut dirs = [SeqDir::default(); 2];
    let words = seq.map(|w| {
        let p = [w[0].load(Ordering::Relaxed), w[1].load(Ordering::Relaxed)];
        dirs = [SeqDir::unpack(p[0]), SeqDir::unpack(p[1])];
        p
    });
    let before = dirs;
    let mut t = TcpState::from_bits(cur >> TCP_SHIFT);
    crate::tcp::track(&mut t, &mut dirs, side, seg)?;
    if let (Some(w), Some(p)) = (seq, words) {
        let packed = dirs[si].pack();
        if packed != p[si] {
            w[si].store(packed, Ordering::Relaxed);
        }
        debug_assert_eq!(dirs[ri].pack(), p[ri]);
    }
    loop {
        let new = (cur & !(TCP_MASK << TCP_SHIFT)) | (t.bits() << TCP_SHIFT);
        if new == cur {
            return Ok(());
        }
        match s
            .state
            .compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return Ok(()),
            Err(now) => {
                // Another worker moved the state (the other direction's segment): replay
                // this segment's transition on what it wrote, with the same window view
                // (the RST check passed on it, so it passes again).
                cur = now;
                t = TcpState::from_bits(cur >> TCP_SHIFT);
                let mut d = before;
                let _ = crate::tcp::track(&mut t, &mut d, side, seg);
            }
        }
    }
}

/// All sessions.
#[derive(Debug)]
pub struct SessionTable {
    slab: Slab<SessionSlot>,
    index: ChainIndex,
    /// TCP sequence state per session, in chunks reserved on first use.
    seq: Box<[OnceLock<Box<[SeqPair]>>]>,
    /// Slots taken (live, dead or waiting for their grace period).
    occupied: AtomicUsize,
    /// Of those, sessions marked dead and not yet freed: `occupied - dead_pending` is the
    /// live count limits compare with.
    dead_pending: AtomicUsize,
    /// Where the next [`early_drop`](Self::early_drop) scan starts.
    drop_cursor: AtomicU32,
    /// Sessions early drop marked dead, for the reaper to unlink promptly (slow path only:
    /// touched when a session is evicted, never by a packet that finds its session).
    victims: Mutex<Vec<u32>>,
    /// Whether `victims` may be non-empty (read without the lock).
    victims_queued: AtomicUsize,
    /// Creation second per session (see `session/age.rs`), in chunks reserved on first use.
    born: age::BornChunks,
}

/// Bounds for an insert (see [`SessionTable::insert_room`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Room {
    /// The most live sessions (dead ones waiting to be freed do not count).
    pub live: usize,
    /// The most slots taken, live or dead: keeps a physical reserve for other inserts.
    pub slots: usize,
}

impl Room {
    /// No bound but the table's capacity.
    pub const ANY: Room = Room {
        live: usize::MAX,
        slots: usize::MAX,
    };
}

impl SessionTable {
    /// Room for `capacity` sessions (two records each).
    pub fn new(capacity: usize) -> Self {
        let slab = Slab::new(capacity);
        let chunks = slab.capacity().div_ceil(1 << SEQ_CHUNK_BITS);
        let born = age::born_chunks(slab.capacity());
        Self {
            slab,
            index: ChainIndex::new(capacity.saturating_mul(2)),
            seq: (0..chunks).map(|_| OnceLock::new()).collect(),
            occupied: AtomicUsize::new(0),
            dead_pending: AtomicUsize::new(0),
            drop_cursor: AtomicU32::new(0),
            victims: Mutex::new(Vec::new()),
            victims_queued: AtomicUsize::new(0),
            born,
        }
    }

    /// The sequence words of a session, if its chunk was reserved.
    #[inline]
    fn seq_of(&self, id: u32) -> Option<&SeqPair> {
        let chunk = self.seq.get((id >> SEQ_CHUNK_BITS) as usize)?.get()?;
        chunk.get(id as usize & ((1 << SEQ_CHUNK_BITS) - 1))
    }

    /// The sequence words of a new session, its chunk reserved if needed.
    fn seq_for_insert(&self, id: u32) -> Option<&SeqPair> {
        let c = (id >> SEQ_CHUNK_BITS) as usize;
        let start = c << SEQ_CHUNK_BITS;
        let len = (1usize << SEQ_CHUNK_BITS).min(self.slab.capacity().saturating_sub(start));
        let chunk = self.seq.get(c)?.get_or_init(|| {
            (0..len)
                .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
                .collect()
        });
        chunk.get(id as usize & ((1 << SEQ_CHUNK_BITS) - 1))
    }

    /// Slots taken now (live, dead, or unlinked and waiting to be freed): O(1).
    pub fn occupied(&self) -> usize {
        self.occupied.load(Ordering::Relaxed)
    }

    /// Sessions counted live now (slots taken less those marked dead and not yet
    /// freed): O(1), what limits compare with.
    pub fn live_count(&self) -> usize {
        let dead = self.dead_pending.load(Ordering::Relaxed);
        self.occupied.load(Ordering::Relaxed).saturating_sub(dead)
    }

    /// Sessions marked dead whose slots are not yet free.
    pub fn dead_pending(&self) -> usize {
        self.dead_pending.load(Ordering::Relaxed)
    }

    /// Maximum sessions.
    pub fn capacity(&self) -> usize {
        self.slab.capacity()
    }

    /// Bytes per session at full capacity: the slot plus its share of the bucket array.
    pub fn bytes_per_session(&self) -> usize {
        std::mem::size_of::<SessionSlot>()
            + std::mem::size_of::<SeqPair>()
            + std::mem::size_of::<AtomicU32>() // creation second (see `age`)
            + self.index.bytes() / self.slab.capacity().max(1)
    }

    /// Bytes reserved so far.
    pub fn bytes(&self) -> usize {
        let seq: usize = self
            .seq
            .iter()
            .filter_map(|c| c.get())
            .map(|c| c.len() * std::mem::size_of::<SeqPair>())
            .sum();
        self.slab.reserved_bytes() + self.index.bytes() + seq + self.born_bytes()
    }

    /// Finds the live record whose initial tuple is `key`.
    #[inline]
    pub fn lookup(&self, key: &Tuple) -> Option<RecordRef> {
        self.lookup_key(Key::of(key))
    }

    /// Finds the live record for `key`, with its slot in hand.
    // Always inlined: the established-flow lookup of every NAT44 and NAT64 packet. Left to
    // LLVM, whether it is inlined into NAT44's worker changed with unrelated edits to NAT64
    // (measured: NAT44 10-15% slower in quicknat-bench when it was not).
    #[inline(always)]
    pub fn hit(&self, key: &Tuple) -> Option<Hit<'_>> {
        let r = self.lookup_key(Key::of(key))?;
        Some(Hit {
            slot: self.slab.get(r.session.0)?,
            table: self,
            r,
        })
    }

    /// The hit for a known record.
    #[inline]
    pub fn hit_of(&self, r: RecordRef) -> Option<Hit<'_>> {
        Some(Hit {
            slot: self.slab.get(r.session.0)?,
            table: self,
            r,
        })
    }

    /// Finds the live record filed under a packed key.
    #[inline]
    pub fn lookup_key(&self, key: Key) -> Option<RecordRef> {
        self.index.find(&View(&self.slab), key).map(|n| RecordRef {
            session: SessionId(n >> 1),
            side: if n & 1 == 0 {
                Record::Original
            } else {
                Record::Reply
            },
        })
    }

    /// The tuple a packet matching `r` must be rewritten to: the other record's key, reversed.
    #[inline]
    pub fn revised(&self, r: RecordRef) -> Option<Tuple> {
        let s = self.slab.get(r.session.0)?;
        Some(s.key(1 - r.side.index()).reversed().tuple())
    }

    /// The record's initial tuple.
    #[inline]
    pub fn initial(&self, r: RecordRef) -> Option<Tuple> {
        Some(self.slab.get(r.session.0)?.key(r.side.index()).tuple())
    }

    /// `FROM_INSIDE`/`HAIRPIN`/`ALG` flags of a session.
    #[inline]
    pub fn flags(&self, id: SessionId) -> u32 {
        self.slab.get(id.0).map_or(0, |s| {
            s.state.load(Ordering::Acquire) & (FROM_INSIDE | HAIRPIN | ALG)
        })
    }

    /// The binding a session holds.
    #[inline]
    pub fn binding(&self, id: SessionId) -> Option<u32> {
        self.slab
            .get(id.0)
            .map(|s| s.binding.load(Ordering::Acquire))
    }

    /// Refreshes the record's timestamp. The store happens only when the stored time is
    /// more than [`TOUCH_GRANULARITY`] old: a busy session's cache line is then written a
    /// few times a second instead of once per packet, so the workers handling its two
    /// directions do not bounce the line between their cores. Expiry is measured in
    /// seconds, so a timestamp up to 50 ms stale changes nothing.
    #[inline]
    pub fn touch(&self, r: RecordRef, now: Timestamp) {
        if let Some(s) = self.slab.get(r.session.0) {
            touch_slot(s, r.side, now);
        }
    }

    /// Feeds a TCP segment into the session's state (see [`Hit::observe_tcp`]).
    #[inline]
    pub fn observe_tcp(&self, r: RecordRef, seg: &Segment) -> Result<(), Reject> {
        match self.slab.get(r.session.0) {
            Some(s) => observe_slot(s, self.seq_of(r.session.0), r.side, seg),
            None => Ok(()),
        }
    }

    /// What expiry needs, from the session's one cache line: the later last-seen time,
    /// the TCP state and the protocol.
    #[inline]
    pub fn activity(&self, id: SessionId) -> Option<(Timestamp, TcpState, crate::tuple::Proto)> {
        let s = self.slab.get(id.0)?;
        let seen = s.seen[0]
            .load(Ordering::Relaxed)
            .max(s.seen[1].load(Ordering::Relaxed));
        let st = s.state.load(Ordering::Acquire);
        Some((
            Timestamp::from_nanos(seen),
            TcpState::from_bits(st >> TCP_SHIFT),
            s.key(0).tuple().proto,
        ))
    }

    /// A snapshot of a session (live or not).
    pub fn view(&self, id: SessionId) -> Option<SessionView> {
        let s = self.slab.get(id.0)?;
        let st = s.state.load(Ordering::Acquire);
        let orig = s.key(0);
        Some(SessionView {
            initial: orig.tuple(),
            revised: s.key(1).reversed().tuple(),
            seen: [
                Timestamp::from_nanos(s.seen[0].load(Ordering::Relaxed)),
                Timestamp::from_nanos(s.seen[1].load(Ordering::Relaxed)),
            ],
            binding: s.binding.load(Ordering::Acquire),
            flags: st & KEPT,
            tcp: TcpState::from_bits(st >> TCP_SHIFT),
        })
    }

    /// Clears session `id`'s [`OFFLOAD_HINTED`] flag: its next packet may hint again.
    pub fn clear_hint(&self, id: SessionId) {
        if let Some(s) = self.slab.get(id.0) {
            s.state.fetch_and(!OFFLOAD_HINTED, Ordering::AcqRel);
        }
    }

    /// Whether the session is live.
    pub fn is_live(&self, id: SessionId) -> bool {
        self.slab
            .get(id.0)
            .is_some_and(|s| s.state.load(Ordering::Acquire) & LIFECYCLE == ALIVE)
    }

    /// Installs both records. The reply record goes first and arbitrates races.
    pub fn insert(&self, new: &NewSession, now: Timestamp) -> Result<SessionId, InsertError> {
        self.insert_within(new, now, usize::MAX)
    }

    /// Like [`insert`](Self::insert), refused (`Full`) when `limit` sessions or more are
    /// live already (dead ones waiting to be freed do not count): the engine keeps the
    /// last part of the table for sessions its inside users open, so a flood of sessions
    /// opened from the outside cannot take it all.
    pub fn insert_within(
        &self,
        new: &NewSession,
        now: Timestamp,
        limit: usize,
    ) -> Result<SessionId, InsertError> {
        self.insert_room(
            new,
            now,
            Room {
                live: limit,
                slots: usize::MAX,
            },
        )
    }

    /// Like [`insert`](Self::insert), refused (`Full`) when `room.live` sessions are live
    /// or `room.slots` slots are taken (live or dead) already.
    pub fn insert_room(
        &self,
        new: &NewSession,
        now: Timestamp,
        room: Room,
    ) -> Result<SessionId, InsertError> {
        if self.live_count() >= room.live || self.occupied() >= room.slots {
            return Err(InsertError::Full);
        }
        let id = self.slab.alloc().ok_or(InsertError::Full)?;
        self.occupied.fetch_add(1, Ordering::Relaxed);
        let Some(s) = self.slab.get(id) else {
            self.give_back(id);
            return Err(InsertError::Full);
        };
        if new.initial.proto == crate::tuple::Proto::Tcp {
            // Fresh sequence state, before the session is published.
            match self.seq_for_insert(id) {
                Some(w) => {
                    w[0].store(0, Ordering::Relaxed);
                    w[1].store(0, Ordering::Relaxed);
                }
                None => {
                    self.give_back(id);
                    return Err(InsertError::Full);
                }
            }
        }
        // Creation time, before the session is published (read only by listings).
        if !self.stamp_born(id, now) {
            self.give_back(id);
            return Err(InsertError::Full);
        }
        let ko = Key::of(&new.initial);
        let kr = Key::of(&new.revised.reversed());
        for (side, k) in [(0, ko), (1, kr)] {
            s.keys[side][0].store(k.0, Ordering::Relaxed);
            s.keys[side][1].store(k.1, Ordering::Relaxed);
            s.seen[side].store(now.as_nanos(), Ordering::Relaxed);
        }
        s.binding.store(new.binding, Ordering::Relaxed);
        let state = ALIVE | (new.flags & KEPT);
        s.state.store(state, Ordering::Release);
        let view = View(&self.slab);
        let found = |n: u32| RecordRef {
            session: SessionId(n >> 1),
            side: if n & 1 == 0 {
                Record::Original
            } else {
                Record::Reply
            },
        };
        // Never published: hand the slot straight back, unless the reaper's walk already
        // claimed it (then the reaper frees it).
        let unpublished = |err| {
            if s.state
                .compare_exchange(state, FREE, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.give_back(id);
            }
            Err(err)
        };
        if ko == kr {
            return unpublished(InsertError::Exists(RecordRef {
                session: SessionId(id),
                side: Record::Original,
            }));
        }
        match self.index.insert(&view, (id << 1) | 1, kr) {
            Ok(()) => {}
            // The winner filed our reply tuple; our original tuple is its other record.
            Err(Refused::Exists(m)) => return unpublished(InsertError::Exists(found(m ^ 1))),
            // A bucket at its chain bound counts as full (see `chain`).
            Err(Refused::ChainFull) => return unpublished(InsertError::Full),
        }
        if let Err(e) = self.index.insert(&view, id << 1, ko) {
            // The reply record is published: withdraw the session, the reaper unlinks it
            // (counted dead once, whoever marks it).
            self.mark_dead(SessionId(id));
            return Err(match e {
                Refused::Exists(m) => InsertError::Exists(found(m)),
                Refused::ChainFull => InsertError::Full,
            });
        }
        Ok(SessionId(id))
    }

    /// Marks a live session dead (any thread); the reaper unlinks it. True if this call did.
    pub fn mark_dead(&self, id: SessionId) -> bool {
        let Some(s) = self.slab.get(id.0) else {
            return false;
        };
        let mut cur = s.state.load(Ordering::Acquire);
        while cur & LIFECYCLE == ALIVE {
            match s.state.compare_exchange_weak(
                cur,
                (cur & !LIFECYCLE) | DEAD,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.dead_pending.fetch_add(1, Ordering::Relaxed);
                    return true;
                }
                Err(now) => cur = now,
            }
        }
        false
    }

    /// The reaper's walk: every live session for which `expired` says so, and every
    /// session already marked dead, is unlinked and handed to `on_removed`, with `true`
    /// when this walk marked it dead (whoever marks a session dead releases what it
    /// held). The caller frees each id with [`free`](Self::free) after a QSBR grace period.
    pub fn reap(
        &self,
        mut expired: impl FnMut(&SessionView) -> bool,
        mut on_removed: impl FnMut(SessionId, SessionView, bool),
    ) {
        let view = View(&self.slab);
        for id in 0..self.slab.high_water() {
            let Some(s) = self.slab.get(id) else { continue };
            let st = s.state.load(Ordering::Acquire);
            let Some(v) = (match st & LIFECYCLE {
                ALIVE | DEAD => self.view(SessionId(id)),
                _ => None,
            }) else {
                continue;
            };
            let marked_here = st & LIFECYCLE == ALIVE;
            if marked_here && !(expired(&v) && self.mark_dead(SessionId(id))) {
                continue;
            }
            // Dead: unlink both records, then park the slot (lifecycle 3) until freed.
            self.index.remove(&view, id << 1, s.key(0));
            self.index.remove(&view, (id << 1) | 1, s.key(1));
            s.state.store(LIFECYCLE, Ordering::Release);
            on_removed(SessionId(id), v, marked_here);
        }
    }

    /// Returns a reaped slot once no worker can reach it.
    pub fn free(&self, id: SessionId) {
        if let Some(s) = self.slab.get(id.0) {
            s.state.store(FREE, Ordering::Release);
        }
        // Every reaped session was marked dead (and counted) once.
        self.dead_pending.fetch_sub(1, Ordering::Relaxed);
        self.give_back(id.0);
    }

    /// A slot back to the slab, and out of the count.
    fn give_back(&self, id: u32) {
        self.slab.free(id);
        self.occupied.fetch_sub(1, Ordering::Relaxed);
    }

    /// Number of live sessions (a walk: for reports and tests, not the packet path).
    pub fn len(&self) -> usize {
        (0..self.slab.high_water())
            .filter(|i| self.is_live(SessionId(*i)))
            .count()
    }

    /// Whether no session is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Snapshots of every live session.
    pub fn live(&self) -> impl Iterator<Item = SessionView> + '_ {
        (0..self.slab.high_water())
            .filter(|i| self.is_live(SessionId(*i)))
            .filter_map(|i| self.view(SessionId(i)))
    }
}

// Staged lookups: prefetch hints for a batch, never a result.
/// A packet's place in a staged batch: the bucket its key is filed under (stage 1), then
/// the node its chain started with (stage 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Staged(u32);

impl Staged {
    /// Nothing staged (a packet the stage could not read a key from).
    pub const NONE: Staged = Staged(u32::MAX);
}

impl SessionTable {
    /// Stage 1 of a batch: hashes `key` (a packed tuple, [`Key::of`]) and starts loading
    /// its bucket.
    #[inline(always)]
    pub fn prefetch_bucket(&self, key: Key) -> Staged {
        let b = self.index.prefetch_bucket(key);
        u32::try_from(b).map_or(Staged::NONE, Staged)
    }

    /// Stage 2: once the bucket has arrived, starts loading the session line its chain
    /// starts with (and, for TCP, the session's sequence words), so that the lookup and
    /// the translation after it find them in cache; returns that first node for
    /// [`prefetch_next`](Self::prefetch_next). A hint only: it decides nothing.
    #[inline(always)]
    pub fn prefetch_session(&self, at: Staged, tcp: bool) -> Staged {
        if at == Staged::NONE {
            return Staged::NONE;
        }
        let Some(n) = self.index.first_in(at.0 as usize) else {
            return Staged::NONE;
        };
        let id = n >> 1;
        if let Some(s) = self.slab.get(id) {
            prefetch::read(s);
        }
        if tcp {
            if let Some(w) = self.seq_of(id) {
                prefetch::read(w);
            }
        }
        Staged(n)
    }

    /// Stage 3: once the first node's session line has arrived (`first`, what
    /// [`prefetch_session`](Self::prefetch_session) returned), if that node is not filed
    /// under `key`, starts loading the next node's line (and sequence words): the second
    /// place in a chain, where a quarter of the hits of a half-full index are.
    #[inline(always)]
    pub fn prefetch_next(&self, first: Staged, key: Key, tcp: bool) {
        if first == Staged::NONE {
            return;
        }
        let n = first.0;
        let Some(s) = self.slab.get(n >> 1) else {
            return;
        };
        let side = (n & 1) as usize;
        if s.key(side) == key {
            return;
        }
        let Some(next) = s.links[side].load(Ordering::Relaxed).checked_sub(1) else {
            return;
        };
        let id = next >> 1;
        if let Some(s) = self.slab.get(id) {
            prefetch::read(s);
        }
        if tcp {
            if let Some(w) = self.seq_of(id) {
                prefetch::read(w);
            }
        }
    }
}

// Capacity bound and memory estimate.
impl SessionTable {
    /// The most sessions a table can index: its index nodes are `slot * 2 + side`, stored
    /// plus one in a `u32` link.
    pub const MAX_CAPACITY: usize = (1 << 31) - 1;

    /// Bytes a table for `capacity` sessions holds when full (slots and bucket array).
    pub fn bytes_for(capacity: usize) -> usize {
        Slab::<SessionSlot>::bytes_for(capacity)
            .saturating_add(ChainIndex::bytes_for(capacity.saturating_mul(2)))
            // Creation seconds (see `session/age.rs`).
            .saturating_add(capacity.saturating_mul(std::mem::size_of::<AtomicU32>()))
    }
}

mod evict;

// -- read-only walks for the control socket --
mod walk;

// Creation time per session, for the age in listings.
mod age;

#[cfg(test)]
mod tests;
