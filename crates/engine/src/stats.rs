//! Counters: every forwarded packet, every drop by reason, session churn.

use crate::verdict::DropReason;

/// Plain counters owned by one engine instance (summed across workers by the runtime).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counters {
    /// Packets translated and forwarded.
    pub forwarded: u64,
    /// Drops, indexed by `DropReason as usize`.
    pub drops: [u64; DropReason::COUNT],
    /// Sessions (original + reply record pairs) created.
    pub sessions_created: u64,
    /// Sessions removed by expiry.
    pub sessions_expired: u64,
    /// Unconfirmed TCP sessions (handshake not completed) reclaimed because the table
    /// was nearly full (early drop, as Linux conntrack's `early_drop`).
    pub sessions_early_dropped: u64,
    /// Bindings (public address/port mappings) created.
    pub bindings_created: u64,
    /// Released public ports given back before their reuse hold had passed, to make room
    /// in a pool's full hold (see `conntrack::pool::hold`).
    pub port_holds_cut_short: u64,
    /// Released public ports given back at once, without the reuse hold: no packet ever
    /// came in through their binding, so none can arrive late.
    pub ports_released_unheld: u64,
    /// ICMP errors whose quoted packet was translated.
    pub icmp_errors_translated: u64,
    /// Packets that went through the hairpin path.
    pub hairpinned: u64,
    /// Fragments translated (first and later ones; also counted in `forwarded`): IPv4
    /// ones through NAT44, and SIIT's in either family, its own cuts included.
    pub fragments_translated: u64,
    /// ICMP errors the gateway sent about packets it refused (Time Exceeded,
    /// Fragmentation Needed, Packet Too Big).
    pub icmp_errors_sent: u64,
    /// Packets cut into fragments for the IPv6 side (RFC 7915 §4.1); each fragment is
    /// counted in `forwarded`.
    pub fragmented: u64,
    // ICMP error budget.
    /// ICMP errors owed but not sent: the sender's own budget was spent.
    pub icmp_errors_limited_source: u64,
    /// ICMP errors owed but not sent: the worker's budget was spent.
    pub icmp_errors_limited: u64,
}

// By hand: `Default` is derived for arrays of at most 32 elements, and the drop table
// grows past that.
impl Default for Counters {
    fn default() -> Self {
        Self::new()
    }
}

impl Counters {
    /// All zero (usable in a `static`).
    pub const fn new() -> Self {
        Counters {
            forwarded: 0,
            drops: [0; DropReason::COUNT],
            sessions_created: 0,
            sessions_expired: 0,
            sessions_early_dropped: 0,
            bindings_created: 0,
            port_holds_cut_short: 0,
            ports_released_unheld: 0,
            icmp_errors_translated: 0,
            hairpinned: 0,
            fragments_translated: 0,
            icmp_errors_sent: 0,
            fragmented: 0,
            icmp_errors_limited_source: 0,
            icmp_errors_limited: 0,
        }
    }

    /// Counts one drop.
    #[inline]
    pub fn drop(&mut self, reason: DropReason) {
        self.drops[reason as usize] += 1;
    }

    /// An ICMP error already counted sent was dropped after all, for `reason`, before it
    /// left (its translation on the way to the sender failed).
    pub(crate) fn error_unsent(&mut self, reason: DropReason) {
        self.icmp_errors_sent = self.icmp_errors_sent.saturating_sub(1);
        self.drop(reason);
    }

    /// How many packets were dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize]
    }

    /// Total drops over all reasons.
    pub fn total_dropped(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Non-zero drop counts with their labels, in declaration order.
    pub fn drop_summary(&self) -> Vec<(&'static str, u64)> {
        DropReason::ALL
            .iter()
            .map(|r| (r.as_str(), self.dropped(*r)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// Adds another set of counters into this one.
    pub fn merge(&mut self, other: &Counters) {
        self.forwarded += other.forwarded;
        for (a, b) in self.drops.iter_mut().zip(other.drops.iter()) {
            *a += b;
        }
        self.sessions_created += other.sessions_created;
        self.sessions_expired += other.sessions_expired;
        self.sessions_early_dropped += other.sessions_early_dropped;
        self.bindings_created += other.bindings_created;
        self.port_holds_cut_short += other.port_holds_cut_short;
        self.ports_released_unheld += other.ports_released_unheld;
        self.icmp_errors_translated += other.icmp_errors_translated;
        self.hairpinned += other.hairpinned;
        self.fragments_translated += other.fragments_translated;
        self.icmp_errors_sent += other.icmp_errors_sent;
        self.fragmented += other.fragmented;
        self.icmp_errors_limited_source += other.icmp_errors_limited_source;
        self.icmp_errors_limited += other.icmp_errors_limited;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_array_holds_every_reason() {
        assert_eq!(DropReason::ALL.len(), Counters::default().drops.len());
    }
}

/// How full a mode's session table is: O(1) counters, safe to read while workers run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableOccupancy {
    /// Sessions the table holds at most.
    pub capacity: usize,
    /// Sessions live now (what limits compare with).
    pub live: usize,
    /// Sessions marked dead whose slots wait for the reaper (grace period).
    pub dead_pending: usize,
}
