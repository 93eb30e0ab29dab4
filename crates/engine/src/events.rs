//! NAT events (RFC 8158) as the engine records them, sans-I/O and off the data path.
//!
//! Carriers must answer "who had public address A, port P at time T": every binding and
//! session the NAT makes or removes, every exhausted pool and every subscriber limit hit
//! becomes one fixed-size [`Event`], pushed into a bounded single-producer ring of its own
//! per worker (and one for the reaper). A thread of the runtime drains the rings and
//! exports (IPFIX, syslog); the engine never does I/O.
//!
//! What this module must never do: block, allocate or lock when pushing. A full ring
//! drops the event and counts it (`events_dropped`): a slow collector costs log lines,
//! never packets. No `unsafe`: a slot is a handful of `AtomicU64` words, published by the
//! producer's release store of the tail and read back after the consumer's acquire load.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};

use conntrack::{Proto, Timestamp};

/// RFC 8158 §4 Table 2 (the IANA natEvent registry): the natEvent values. 1 and 2 are
/// RFC 5102's historic "NAT translation create/delete"; 14/15 (address binding) and 18
/// (threshold reached) are not produced here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EventKind {
    /// NAT44 session create (4).
    Nat44SessionCreate = 4,
    /// NAT44 session delete (5).
    Nat44SessionDelete = 5,
    /// NAT addresses exhausted (3).
    AddressesExhausted = 3,
    /// NAT64 session create (6).
    Nat64SessionCreate = 6,
    /// NAT64 session delete (7).
    Nat64SessionDelete = 7,
    /// NAT44 BIB create (8).
    Nat44BibCreate = 8,
    /// NAT44 BIB delete (9).
    Nat44BibDelete = 9,
    /// NAT64 BIB create (10).
    Nat64BibCreate = 10,
    /// NAT64 BIB delete (11).
    Nat64BibDelete = 11,
    /// NAT ports exhausted (12).
    PortsExhausted = 12,
    /// Quota exceeded (13): a per-subscriber limit refused a session or a port.
    QuotaExceeded = 13,
    /// Port block allocation (16).
    PortBlockAllocate = 16,
    /// Port block de-allocation (17).
    PortBlockRelease = 17,
}

impl EventKind {
    /// Every kind, for tests and decoders.
    pub const ALL: [EventKind; 13] = [
        EventKind::Nat44SessionCreate,
        EventKind::Nat44SessionDelete,
        EventKind::AddressesExhausted,
        EventKind::Nat64SessionCreate,
        EventKind::Nat64SessionDelete,
        EventKind::Nat44BibCreate,
        EventKind::Nat44BibDelete,
        EventKind::Nat64BibCreate,
        EventKind::Nat64BibDelete,
        EventKind::PortsExhausted,
        EventKind::QuotaExceeded,
        EventKind::PortBlockAllocate,
        EventKind::PortBlockRelease,
    ];

    /// The kind of natEvent value `v`.
    pub fn from_u8(v: u8) -> Option<EventKind> {
        Self::ALL.into_iter().find(|k| *k as u8 == v)
    }

    /// The granularity class that turns this kind on.
    pub fn class(self) -> EventClass {
        use EventKind::*;
        match self {
            Nat44SessionCreate | Nat44SessionDelete | Nat64SessionCreate | Nat64SessionDelete => {
                EventClass::Session
            }
            Nat44BibCreate | Nat44BibDelete | Nat64BibCreate | Nat64BibDelete => {
                EventClass::Binding
            }
            PortBlockAllocate | PortBlockRelease => EventClass::Block,
            AddressesExhausted | PortsExhausted | QuotaExceeded => EventClass::Limits,
        }
    }

    /// A stable lower-case name (syslog MSGID, logs).
    pub fn as_str(self) -> &'static str {
        use EventKind::*;
        match self {
            Nat44SessionCreate => "nat44-session-create",
            Nat44SessionDelete => "nat44-session-delete",
            AddressesExhausted => "addresses-exhausted",
            Nat64SessionCreate => "nat64-session-create",
            Nat64SessionDelete => "nat64-session-delete",
            Nat44BibCreate => "nat44-bib-create",
            Nat44BibDelete => "nat44-bib-delete",
            Nat64BibCreate => "nat64-bib-create",
            Nat64BibDelete => "nat64-bib-delete",
            PortsExhausted => "ports-exhausted",
            QuotaExceeded => "quota-exceeded",
            PortBlockAllocate => "port-block-allocate",
            PortBlockRelease => "port-block-release",
        }
    }

    /// Whether the event is about an IPv6 host (NAT64).
    pub fn is_nat64(self) -> bool {
        use EventKind::*;
        matches!(
            self,
            Nat64SessionCreate | Nat64SessionDelete | Nat64BibCreate | Nat64BibDelete
        )
    }
}

/// RFC 8158 §4 Table 4: natQuotaExceededEvent values quicknat reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Quota {
    /// Maximum session entries (1): the session table is full.
    SessionEntries = 1,
    /// Maximum entries per user (3): `max_sessions_per_host` / `max_ports_per_host`.
    EntriesPerUser = 3,
}

/// Which events are recorded (`[logging] events`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EventClass {
    /// Binding (BIB) create/delete: one per inside endpoint's mapping (the classic
    /// "who had A:P" record).
    Binding = 1,
    /// Session create/delete, with the remote endpoint (destination logging).
    Session = 2,
    /// Port-block allocate/release.
    Block = 4,
    /// Address and port exhaustion, quota exceeded.
    Limits = 8,
}

impl EventClass {
    /// Every class.
    pub const ALL: [EventClass; 4] = [
        EventClass::Binding,
        EventClass::Session,
        EventClass::Block,
        EventClass::Limits,
    ];

    /// The name written in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            EventClass::Binding => "binding",
            EventClass::Session => "session",
            EventClass::Block => "block",
            EventClass::Limits => "limits",
        }
    }

    /// The class named `s` in the configuration.
    pub fn parse(s: &str) -> Option<EventClass> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// A set of [`EventClass`]es; empty (the default) records nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EventMask(pub u8);

impl EventMask {
    /// Nothing.
    pub const NONE: EventMask = EventMask(0);

    /// With `c` added.
    pub fn with(self, c: EventClass) -> EventMask {
        EventMask(self.0 | c as u8)
    }

    /// Whether `c` is in the set.
    #[inline]
    pub fn has(self, c: EventClass) -> bool {
        self.0 & c as u8 != 0
    }
}

/// One NAT event: a fixed-size value, copied into a ring slot as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// When, on the engine's clock (the exporter maps it to wall-clock time).
    pub time: Timestamp,
    /// IP protocol number (6, 17, 1), 0 where none applies.
    pub proto: u8,
    /// The inside endpoint (NAT64: the host's 32-bit id; see `inside6`).
    pub inside: (Ipv4Addr, u16),
    /// NAT64: the IPv6 host the id stands for.
    pub inside6: Option<Ipv6Addr>,
    /// The public (post-NAT) endpoint.
    pub public: (Ipv4Addr, u16),
    /// The remote endpoint (sessions only).
    pub remote: (Ipv4Addr, u16),
    /// Port block: first port and number of ports.
    pub block: (u16, u16),
    /// Quota exceeded: which (natQuotaExceededEvent) and the limit.
    pub quota: Option<(Quota, u32)>,
}

impl Event {
    /// An event of `kind` at `time` with every field empty.
    pub fn new(kind: EventKind, time: Timestamp) -> Event {
        Event {
            kind,
            time,
            proto: 0,
            inside: (Ipv4Addr::UNSPECIFIED, 0),
            inside6: None,
            public: (Ipv4Addr::UNSPECIFIED, 0),
            remote: (Ipv4Addr::UNSPECIFIED, 0),
            block: (0, 0),
            quota: None,
        }
    }

    const WORDS: usize = 6;

    fn pack(&self) -> [u64; Self::WORDS] {
        let ep = |(a, p): (Ipv4Addr, u16)| u64::from(u32::from(a)) << 16 | u64::from(p);
        let (q, limit) = match self.quota {
            Some((q, l)) => (q as u64, l),
            None => (0, 0),
        };
        [
            self.kind as u64
                | u64::from(self.proto) << 8
                | u64::from(self.block.0) << 16
                | u64::from(self.block.1) << 32
                | q << 48
                | u64::from(self.inside6.is_some()) << 56,
            self.time.as_nanos(),
            ep(self.inside) | u64::from(limit >> 16) << 48,
            ep(self.public) | u64::from(limit & 0xffff) << 48,
            ep(self.remote),
            0,
        ]
    }

    fn unpack(w: &[u64; Self::WORDS], v6: u128) -> Option<Event> {
        let kind = EventKind::from_u8(w[0] as u8)?;
        let ep = |x: u64| (Ipv4Addr::from((x >> 16) as u32), x as u16);
        let q = (w[0] >> 48) as u8;
        let limit = ((w[2] >> 48) as u32) << 16 | (w[3] >> 48) as u32;
        Some(Event {
            kind,
            time: Timestamp::from_nanos(w[1]),
            proto: (w[0] >> 8) as u8,
            inside: ep(w[2] & 0xffff_ffff_ffff),
            inside6: (w[0] >> 56 & 1 == 1).then(|| Ipv6Addr::from(v6)),
            public: ep(w[3] & 0xffff_ffff_ffff),
            remote: ep(w[4]),
            block: ((w[0] >> 16) as u16, (w[0] >> 32) as u16),
            quota: match q {
                1 => Some((Quota::SessionEntries, limit)),
                3 => Some((Quota::EntriesPerUser, limit)),
                _ => None,
            },
        })
    }
}

/// Words per ring slot: the packed event and the IPv6 host (two words).
const SLOT_WORDS: usize = Event::WORDS + 2;

/// A bounded single-producer single-consumer ring of events: the producer (one worker,
/// or the reaper) never blocks and never allocates; when full, the event is dropped and
/// counted.
#[derive(Debug)]
pub struct EventRing {
    slots: Box<[[AtomicU64; SLOT_WORDS]]>,
    /// Next slot the consumer reads (only the consumer stores it).
    head: AtomicU64,
    /// Next slot the producer writes (only the producer stores it).
    tail: AtomicU64,
    /// Events dropped because the ring was full.
    dropped: AtomicU64,
}

impl EventRing {
    /// A ring of `capacity` events (rounded up to a power of two, at least 2).
    pub fn new(capacity: usize) -> EventRing {
        let cap = capacity.max(2).next_power_of_two();
        EventRing {
            slots: (0..cap).map(|_| Default::default()).collect(),
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    /// Pushes `e`; false (and counted) when the ring is full. Call from one thread only.
    #[inline]
    pub fn push(&self, e: &Event) -> bool {
        let tail = self.tail.load(Ordering::Relaxed);
        let head = self.head.load(Ordering::Acquire);
        let cap = self.slots.len() as u64;
        if tail.wrapping_sub(head) >= cap {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let slot = &self.slots[(tail & (cap - 1)) as usize];
        let w = e.pack();
        let v6 = e.inside6.map_or(0, u128::from);
        for (s, v) in slot.iter().zip(w) {
            s.store(v, Ordering::Relaxed);
        }
        slot[Event::WORDS].store((v6 >> 64) as u64, Ordering::Relaxed);
        slot[Event::WORDS + 1].store(v6 as u64, Ordering::Relaxed);
        self.tail.store(tail.wrapping_add(1), Ordering::Release);
        true
    }

    /// Pops every event waiting into `f`, oldest first; returns how many. Call from one
    /// thread only (the exporter).
    pub fn drain(&self, mut f: impl FnMut(Event)) -> usize {
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Acquire);
        let cap = self.slots.len() as u64;
        let mut n = 0;
        let mut i = head;
        while i != tail {
            let slot = &self.slots[(i & (cap - 1)) as usize];
            let mut w = [0u64; Event::WORDS];
            for (d, s) in w.iter_mut().zip(slot.iter()) {
                *d = s.load(Ordering::Relaxed);
            }
            let v6 = u128::from(slot[Event::WORDS].load(Ordering::Relaxed)) << 64
                | u128::from(slot[Event::WORDS + 1].load(Ordering::Relaxed));
            if let Some(e) = Event::unpack(&w, v6) {
                f(e);
                n += 1;
            }
            i = i.wrapping_add(1);
        }
        self.head.store(tail, Ordering::Release);
        n
    }

    /// Events dropped so far because the ring was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Slots in the ring.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
}

/// Default ring size per producer: at 50,000 new sessions a second per worker and an
/// exporter draining every 10 ms, a quarter full.
pub const RING_CAPACITY: usize = 2048;

/// The rings of one NAT instance: one per worker, one for the reaper, and what is
/// recorded.
#[derive(Debug)]
pub struct EventLog {
    mask: EventMask,
    rings: Box<[EventRing]>,
    /// Per pool-wide event kind ([`Throttled`]): engine time (ns + 1) of the last one
    /// recorded, 0 for never.
    throttle: [AtomicU64; 2],
}

/// Pool-wide events recorded at most once a second (every refused packet would repeat
/// them while the pool or table stays exhausted, crowding out the events that name
/// someone); quota events naming a subscriber are not throttled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Throttled {
    /// Addresses or ports exhausted.
    PoolExhausted = 0,
    /// Session table full.
    TableFull = 1,
}

impl EventLog {
    /// Rings for `workers` workers and the reaper, each of `capacity` events, recording
    /// the classes in `mask`.
    pub fn new(mask: EventMask, workers: usize, capacity: usize) -> EventLog {
        EventLog {
            mask,
            rings: (0..workers.max(1) + 1)
                .map(|_| EventRing::new(capacity))
                .collect(),
            throttle: Default::default(),
        }
    }

    /// Whether a `what` event at `now` is the first in a second (any producer); false:
    /// leave it out.
    pub fn first_in_second(&self, what: Throttled, now: Timestamp) -> bool {
        let a = &self.throttle[what as usize];
        let t = now.as_nanos().saturating_add(1);
        let last = a.load(Ordering::Relaxed);
        if last != 0 && t.saturating_sub(last) < 1_000_000_000 {
            return false;
        }
        a.compare_exchange(last, t, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// What is recorded.
    #[inline]
    pub fn mask(&self) -> EventMask {
        self.mask
    }

    /// Whether events of `c` are recorded.
    #[inline]
    pub fn wants(&self, c: EventClass) -> bool {
        self.mask.has(c)
    }

    /// The ring producer `id` pushes to: worker `id`, or the reaper for [`REAPER`] (or
    /// any id past the workers').
    #[inline]
    pub fn ring(&self, id: usize) -> &EventRing {
        let last = self.rings.len() - 1;
        &self.rings[id.min(last)]
    }

    /// Records `e` from producer `id` if its class is wanted.
    #[inline]
    pub fn record(&self, id: usize, e: &Event) {
        if self.wants(e.kind.class()) {
            self.ring(id).push(e);
        }
    }

    /// Every ring (the exporter drains them all).
    pub fn rings(&self) -> &[EventRing] {
        &self.rings
    }

    /// Events dropped over every ring.
    pub fn dropped(&self) -> u64 {
        self.rings.iter().map(EventRing::dropped).sum()
    }
}

/// The producer id of the reaper (its ring is the last).
pub const REAPER: usize = usize::MAX;

/// The IP protocol number of a tracked protocol; `port`, the inside (or public) port of
/// its tuple, gives it for [`Proto::Other`]: an address-only tuple carries the protocol
/// number as both ports, a PPTP call's GRE its public call id, never below 256
/// (`nat44::pptp`).
#[inline]
pub fn proto_number(p: Proto, port: u16) -> u8 {
    match p {
        Proto::Tcp => 6,
        Proto::Udp => 17,
        Proto::Icmp => 1,
        Proto::Sctp => 132,
        Proto::Other => u8::try_from(port).unwrap_or(47),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ev(i: u16) -> Event {
        let mut e = Event::new(EventKind::Nat44SessionCreate, Timestamp::from_nanos(7));
        e.proto = 17;
        e.inside = (Ipv4Addr::new(10, 0, 0, 1), i);
        e.public = (Ipv4Addr::new(192, 0, 2, 1), 40000u16.wrapping_add(i));
        e.remote = (Ipv4Addr::new(198, 51, 100, 9), 53);
        e
    }

    #[test]
    fn a_full_ring_drops_and_counts_never_overwrites() {
        let r = EventRing::new(4);
        for i in 0..6 {
            assert_eq!(r.push(&ev(i)), i < 4);
        }
        assert_eq!(r.dropped(), 2);
        let mut got = Vec::new();
        assert_eq!(r.drain(|e| got.push(e.inside.1)), 4);
        assert_eq!(got, [0, 1, 2, 3]);
        // Room again after the drain.
        assert!(r.push(&ev(9)));
        assert_eq!(r.drain(|_| {}), 1);
    }

    #[test]
    fn classes_not_wanted_are_not_recorded() {
        let log = EventLog::new(EventMask::NONE.with(EventClass::Binding), 1, 8);
        log.record(0, &ev(1));
        let mut b = ev(2);
        b.kind = EventKind::Nat44BibCreate;
        log.record(REAPER, &b);
        assert_eq!(log.ring(0).drain(|_| {}), 0);
        assert_eq!(log.ring(REAPER).drain(|_| {}), 1);
    }

    #[test]
    fn one_producer_one_consumer_lose_nothing_but_what_is_counted() {
        const N: u32 = 20_000;
        let r = std::sync::Arc::new(EventRing::new(64));
        let p = std::sync::Arc::clone(&r);
        let producer = std::thread::spawn(move || {
            for i in 0..N {
                p.push(&ev(i as u16));
            }
        });
        let mut seen = 0u64;
        let mut last: Option<u16> = None;
        let mut check = |e: Event| {
            // In order, never torn: the public port was written with the inside port.
            assert_eq!(e.public.1, 40000u16.wrapping_add(e.inside.1));
            assert!(
                last.is_none_or(|l| e.inside.1 > l),
                "{last:?} then {}",
                e.inside.1
            );
            last = Some(e.inside.1);
            seen += 1;
        };
        while !producer.is_finished() {
            r.drain(&mut check);
        }
        producer.join().unwrap();
        r.drain(&mut check);
        // Every event pushed was either delivered or counted as dropped.
        assert_eq!(seen + r.dropped(), u64::from(N));
        assert!(seen >= 64);
    }

    proptest! {
        #[test]
        fn events_survive_the_ring(kind in 0usize..13, proto: u8, a: u32, p: u16, b: u32, q: u16,
                                   c: u32, r: u16, v6: Option<u128>, bs: u16, bn: u16,
                                   quota in 0u8..3, limit: u32, t: u64) {
            let e = Event {
                kind: EventKind::ALL[kind],
                time: Timestamp::from_nanos(t),
                proto,
                inside: (Ipv4Addr::from(a), p),
                inside6: v6.map(Ipv6Addr::from),
                public: (Ipv4Addr::from(b), q),
                remote: (Ipv4Addr::from(c), r),
                block: (bs, bn),
                quota: match quota { 1 => Some((Quota::SessionEntries, limit)),
                                     2 => Some((Quota::EntriesPerUser, limit)), _ => None },
            };
            let ring = EventRing::new(2);
            prop_assert!(ring.push(&e));
            let mut out = None;
            ring.drain(|x| out = Some(x));
            prop_assert_eq!(out, Some(e));
        }
    }
}
