//! Where NAT44 (and NAT64, built on it) records its RFC 8158 events: binding and session
//! create/delete, pool exhaustion, per-subscriber limits. Off the per-packet path: only a
//! new flow, a removed binding or session or a refusal gets here, and with no event log
//! attached (the default) each hook is one load and one branch.
//!
//! Never blocks, never allocates: an event is pushed into the producer's own ring
//! ([`crate::events`]), dropped and counted when the ring is full.

use std::sync::Arc;

use conntrack::session::FROM_INSIDE;
use conntrack::{Endpoint, Proto, Timestamp, Tuple};

use super::Nat44Shared;
use crate::events::{proto_number, Event, EventClass, EventKind, EventLog, Quota, Throttled};
use crate::verdict::DropReason;

/// Who records an event and when: a worker's id (or [`crate::events::REAPER`]) and the
/// time passed in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Origin {
    pub ring: usize,
    pub now: Timestamp,
}

impl Nat44Shared {
    /// Attaches the event log the workers and the reaper record into (once, before
    /// traffic: a second call is refused and returns false).
    pub fn attach_events(&self, log: Arc<EventLog>) -> bool {
        self.events.set(log).is_ok()
    }

    /// The attached event log, if any.
    pub fn events(&self) -> Option<&Arc<EventLog>> {
        self.events.get()
    }

    /// The log, if it records `c`.
    #[inline]
    fn log_for(&self, c: EventClass) -> Option<&EventLog> {
        self.events.get().map(|l| &**l).filter(|l| l.wants(c))
    }

    /// An event about inside host `inside` (NAT64: its id, resolved to the IPv6 host).
    fn event(&self, nat44: EventKind, nat64: EventKind, at: Origin, inside: Endpoint) -> Event {
        let v6 = self.inside_hosts.as_ref().and_then(|h| h.ipv6(inside.addr));
        let mut e = Event::new(if v6.is_some() { nat64 } else { nat44 }, at.now);
        e.inside = (inside.addr, inside.port);
        e.inside6 = v6;
        e
    }

    /// A binding (BIB entry) was made or removed.
    #[inline]
    pub(super) fn log_binding(
        &self,
        at: Origin,
        created: bool,
        proto: Proto,
        inside: Endpoint,
        public: Endpoint,
    ) {
        let Some(log) = self.log_for(EventClass::Binding) else {
            return;
        };
        // Deterministic NAT: the mapping is the log (RFC 7422 §1); no binding events.
        if self.det.is_some_and(|d| d.contains_public(public.addr)) {
            return;
        }
        let (k44, k64) = if created {
            (EventKind::Nat44BibCreate, EventKind::Nat64BibCreate)
        } else {
            (EventKind::Nat44BibDelete, EventKind::Nat64BibDelete)
        };
        let mut e = self.event(k44, k64, at, inside);
        e.proto = proto_number(proto, inside.port);
        e.public = (public.addr, public.port);
        log.record(at.ring, &e);
    }

    /// The limit a port refusal for `host` hit, for its quota event: with PBA on and the
    /// host under `max_ports_per_host`, its blocks' ports (`blocks_per_subscriber` x
    /// `port_block_size`). Refusals only.
    #[cold]
    pub(super) fn refused_port_limit(
        &self,
        why: DropReason,
        proto: Proto,
        host: std::net::Ipv4Addr,
    ) -> u32 {
        if let Some(d) = self.det.filter(|d| d.contains_inside(host)) {
            return u32::from(d.ports_per_subscriber());
        }
        let c = &self.cfg;
        let ports = c.max_ports_per_host;
        if why != DropReason::SubscriberLimit || c.port_block_size == 0 {
            return ports;
        }
        if ports != 0 && self.host_count(conntrack::Counted::Ports(proto), host) >= ports {
            return ports;
        }
        u32::from(c.blocks_per_subscriber) * u32::from(c.port_block_size)
    }

    /// A port block (PBA) was taken or released: one event per block, with its range.
    pub(super) fn log_block(&self, at: Origin, taken: bool, b: &conntrack::Block) {
        let Some(log) = self.log_for(EventClass::Block) else {
            return;
        };
        let kind = if taken {
            EventKind::PortBlockAllocate
        } else {
            EventKind::PortBlockRelease
        };
        let mut e = self.event(kind, kind, at, Endpoint::new(b.host, 0));
        // A block serves every protocol: no protocolIdentifier (RFC 8158 §4.1.10).
        e.public = (b.addr, 0);
        e.block = (b.first, b.len);
        log.record(at.ring, &e);
    }

    /// A session was installed or is gone.
    #[inline]
    pub(super) fn log_session(
        &self,
        at: Origin,
        created: bool,
        flags: u32,
        initial: &Tuple,
        revised: &Tuple,
    ) {
        let Some(log) = self.log_for(EventClass::Session) else {
            return;
        };
        // From the inside: inside -> remote becomes public -> remote. From the outside:
        // remote -> public becomes remote -> inside.
        let (inside, public, remote) = if flags & FROM_INSIDE != 0 {
            (initial.src, revised.src, initial.dst)
        } else {
            (revised.dst, initial.dst, initial.src)
        };
        let (k44, k64) = if created {
            (EventKind::Nat44SessionCreate, EventKind::Nat64SessionCreate)
        } else {
            (EventKind::Nat44SessionDelete, EventKind::Nat64SessionDelete)
        };
        let mut e = self.event(k44, k64, at, inside);
        e.proto = proto_number(initial.proto, initial.src.port);
        e.public = (public.addr, public.port);
        e.remote = (remote.addr, remote.port);
        log.record(at.ring, &e);
    }

    /// A new flow from `inside` was refused for `why`: pool exhausted, table full or a
    /// subscriber limit of `limit` (RFC 8158 natEvent 3/10/11).
    #[cold]
    pub(super) fn log_refusal(
        &self,
        at: Origin,
        why: DropReason,
        proto: Proto,
        inside: Endpoint,
        limit: u32,
    ) {
        let Some(log) = self.log_for(EventClass::Limits) else {
            return;
        };
        let throttled = match why {
            DropReason::PoolExhausted => Some(Throttled::PoolExhausted),
            DropReason::TableFull => Some(Throttled::TableFull),
            _ => None,
        };
        if throttled.is_some_and(|t| !log.first_in_second(t, at.now)) {
            return;
        }
        let mut e = match why {
            DropReason::PoolExhausted => {
                // Ports exhausted when the rule's pool has one address (its ports are
                // what ran out), addresses exhausted when it has several.
                let rule = self
                    .rules
                    .lookup(inside.addr)
                    .and_then(|r| self.cfg.rules.get(r as usize));
                let addresses: u64 = rule.map_or(0, |r| r.pool.iter().map(|p| p.size()).sum());
                let kind = if addresses > 1 {
                    EventKind::AddressesExhausted
                } else {
                    EventKind::PortsExhausted
                };
                let mut e = Event::new(kind, at.now);
                if let Some(p) = rule.and_then(|r| r.pool.first()) {
                    e.public = (p.nth(0), 0);
                }
                e
            }
            DropReason::SubscriberLimit => {
                let mut e = Event::new(EventKind::QuotaExceeded, at.now);
                e.quota = Some((Quota::EntriesPerUser, limit));
                e
            }
            DropReason::TableFull => {
                let mut e = Event::new(EventKind::QuotaExceeded, at.now);
                e.quota = Some((
                    Quota::SessionEntries,
                    u32::try_from(self.cfg.max_sessions).unwrap_or(u32::MAX),
                ));
                e
            }
            _ => return,
        };
        e.inside = (inside.addr, inside.port);
        e.inside6 = self.inside_hosts.as_ref().and_then(|h| h.ipv6(inside.addr));
        e.proto = proto_number(proto, inside.port);
        log.record(at.ring, &e);
    }
}
