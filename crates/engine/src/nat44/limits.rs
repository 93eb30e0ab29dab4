//! Per-subscriber limits (RFC 6888 REQ-4: "A CGN MUST support limiting the number of
//! external ports (or, equivalently, "identifiers" for ICMP) that are assigned per
//! subscriber"; REQ-5: "A CGN SHOULD support limiting the amount of state memory
//! allocated per mapping and per subscriber"). The subscriber is the inside IPv4 address;
//! behind NAT64 it is the IPv6 prefix of `subscriber_prefix_len` bits (a /64 by default:
//! RFC 6888 §3 and RFC 7857 count a subscriber, and an IPv6 subscriber gets a prefix, not
//! an address) that the host id's address falls in ([`super::InsideHosts::subscriber`]).
//!
//! A session is counted when a flow from the inside makes one and released exactly once,
//! by whoever marks it dead (`release_session`); a port when a dynamic binding takes one
//! from a pool and released when the reaper removes that binding. The counters are
//! `conntrack::Subscribers`: lock-free, shared by every worker.

use std::net::Ipv4Addr;

use conntrack::{Counted, Refused};

use super::Nat44Shared;
use crate::verdict::DropReason;

impl Nat44Shared {
    /// The key `host` is counted under: its subscriber (see [`super::InsideHosts::subscriber`]).
    #[inline]
    pub(super) fn subscriber_of(&self, host: Ipv4Addr) -> u64 {
        match &self.inside_hosts {
            Some(h) => h.subscriber(host),
            None => u64::from(u32::from(host)),
        }
    }

    /// Counts one more `what` for inside host `host`, or says why not.
    #[inline]
    pub(super) fn acquire_host(&self, what: Counted, host: Ipv4Addr) -> Result<(), DropReason> {
        let Some(s) = &self.subscribers else {
            return Ok(());
        };
        let limit = match what {
            Counted::Sessions => self.cfg.max_sessions_per_host,
            Counted::Ports(_) => self.cfg.max_ports_per_host,
        };
        s.acquire(what, self.subscriber_of(host), limit)
            .map_err(|e| match e {
                Refused::Limit => DropReason::SubscriberLimit,
                // The counters are sized like the session table: it is as good as full.
                Refused::Full => DropReason::TableFull,
            })
    }

    /// Counts one more `what` for `host` with no limit (deterministic NAT: its port range
    /// is the limit); refused only when the counters are full.
    #[inline]
    pub(super) fn acquire_host_unlimited(
        &self,
        what: Counted,
        host: Ipv4Addr,
    ) -> Result<(), DropReason> {
        let Some(s) = &self.subscribers else {
            return Ok(());
        };
        s.acquire(what, self.subscriber_of(host), 0)
            .map_err(|_| DropReason::TableFull)
    }

    /// Undoes one [`acquire_host`](Self::acquire_host).
    #[inline]
    pub(super) fn release_host(&self, what: Counted, host: Ipv4Addr) {
        if let Some(s) = &self.subscribers {
            s.release(what, self.subscriber_of(host));
        }
    }

    /// How many `what` inside host `host` holds (0 when limits are off).
    pub fn host_count(&self, what: Counted, host: Ipv4Addr) -> u32 {
        self.subscribers
            .as_ref()
            .map_or(0, |s| s.count(what, self.subscriber_of(host)))
    }

    /// The sum of every host's count of `what`: zero once every session and binding is
    /// gone (the counters never drift).
    pub fn host_count_total(&self, what: Counted) -> u64 {
        self.subscribers.as_ref().map_or(0, |s| s.total(what))
    }
}
