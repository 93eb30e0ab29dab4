//! The NAT44 configuration as plain Rust values, and its semantic validation: no
//! overlapping inside prefixes or pools, static mappings outside dynamic pools, sane
//! timeouts. Never reads files.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use xlat::prefix::Ipv4Prefix;

use crate::config::{
    ConfigError, ConfigItem, ConfigWarning, Filtering, IcmpRate, L4Proto, MemoryEstimate,
    PortRange, Timeouts,
};

/// The longest `tcp_syn_sent` / `tcp_syn_recv` accepted: the 4-minute transitory timeout
/// of RFC 5382 REQ-5 (RFC 7857 §2.2).
pub const MAX_HALF_OPEN: Duration = Duration::from_secs(240);

/// A dynamic NAPT rule: hosts in `inside` share the addresses of `pool`, ports `ports`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DynamicRule {
    /// Inside (private) prefix whose hosts this rule translates.
    pub inside: Ipv4Prefix,
    /// Public addresses (one or more prefixes) handed out to those hosts.
    pub pool: Vec<Ipv4Prefix>,
    /// Ports (and ICMP identifiers) handed out on each public address.
    pub ports: PortRange,
}

/// A static 1:1 mapping: one inside address is always seen as one public address, ports kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaticNat {
    /// Inside address.
    pub inside: Ipv4Addr,
    /// Public address (must not lie in a dynamic pool).
    pub public: Ipv4Addr,
}

/// A port forward (static binding): `public` is always translated to `inside`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortForward {
    /// TCP or UDP.
    pub protocol: L4Proto,
    /// Public address and port that outside hosts connect to.
    pub public: SocketAddrV4,
    /// Inside server address and port.
    pub inside: SocketAddrV4,
}

/// The whole NAT44 configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nat44Config {
    /// Dynamic NAPT rules, searched by longest inside prefix.
    pub rules: Vec<DynamicRule>,
    /// Static 1:1 mappings.
    pub static_nat: Vec<StaticNat>,
    /// Port forwards (static bindings).
    pub port_forwards: Vec<PortForward>,
    /// Idle timeouts.
    pub timeouts: Timeouts,
    /// Inbound filtering behaviour.
    pub filtering: Filtering,
    /// Allow inside hosts to reach each other through public addresses.
    pub hairpinning: bool,
    /// Keep the inside source port when it is free and inside the rule's range.
    pub port_preservation: bool,
    /// How long a released public port is held back before reuse (RFC 6888 suggests 120 s).
    pub port_reuse_hold: Duration,
    /// Upper bound on live sessions; new flows beyond it are dropped (established ones continue).
    pub max_sessions: usize,
    /// Decrement TTL like a router (drop with `TtlExpired` when it would reach zero).
    pub decrement_ttl: bool,
    /// How long the rewrite of a fragmented datagram's first fragment is remembered for
    /// the fragments that follow it (`nat44::frag`).
    pub fragment_timeout: Duration,
    /// Upper bound on fragmented datagrams tracked at once; new ones beyond it are
    /// dropped (`fragment_table_full`).
    pub max_fragment_records: usize,
    /// Bytes of later fragments held at most while they wait for their datagram's first
    /// fragment (`nat44::frag`; a sixteenth of it per source). 0: a later fragment that
    /// arrives before its first is dropped (`fragment_out_of_order`).
    pub fragment_hold_bytes: usize,
    /// Unsolicited inbound TCP SYNs held at once for a simultaneous open (RFC 5382 REQ-4,
    /// RFC 6146 §3.5.2.2); more are dropped (`syn_hold_full`).
    pub max_simultaneous_opens: usize,
    /// RFC 6146 §3.5.2.2: drop unsolicited inbound SYNs at once instead of holding them.
    pub drop_externally_initiated_tcp: bool,
    /// PPTP (RFC 2637) through the NAT: inside clients' control connections to port 1723
    /// are read and their calls' GRE translated by call id (`nat44::pptp`); off, PPTP's
    /// GRE goes by address only like any other GRE.
    pub pptp: bool,
    // ICMP error budget.
    /// ICMP errors a worker sends about refused packets, in all and to one sender.
    pub icmp_rate: IcmpRate,

    // Per-subscriber limits (RFC 6888 REQ-4/REQ-5): one inside host (one IPv6 host
    // behind NAT64) never takes the table or a pool address from the others.
    /// Sessions an inside host may open (0: unlimited). Counted for flows started from
    /// the inside; flows to its port forwards are not its doing and are not counted.
    pub max_sessions_per_host: u32,
    /// Public ports (dynamic bindings) an inside host may hold per protocol (0:
    /// unlimited).
    pub max_ports_per_host: u32,

    // Live reload.
    /// What a reload does with sessions on a public address it removed.
    pub reload_drain: crate::config::ReloadDrain,

    // Port-block allocation.
    /// Ports per block when a subscriber's ports come from blocks (RFC 7422 bulk port
    /// allocation; one NAT event per block); 0: off, ports one by one.
    pub port_block_size: u16,
    /// Blocks one subscriber may hold per pool address with PBA on (a block serves every protocol); more
    /// is a `subscriber_limit` drop.
    pub blocks_per_subscriber: u16,

    // Deterministic NAT.
    /// `[nat44.deterministic]`: subscribers of one prefix mapped to computed public
    /// addresses and port ranges (RFC 7422, `nat44::deterministic`); restart-only.
    pub deterministic: Option<crate::nat44::deterministic::Deterministic>,
}

/// Smallest `port_block_size` accepted (besides 0, off).
pub const MIN_PORT_BLOCK_SIZE: u16 = 8;
/// Default of [`Nat44Config::blocks_per_subscriber`].
pub const BLOCKS_PER_SUBSCRIBER: u16 = 4;

/// Default of [`Nat44Config::max_sessions_per_host`]: VPP's `max_translations_per_user`
/// default (10240), rounded; far above what one household's devices open at once.
pub const MAX_SESSIONS_PER_HOST: u32 = 10_000;
/// Default of [`Nat44Config::max_ports_per_host`]: 1/16 of a pool address's 64,512 ports,
/// so one host leaves fifteen sixteenths of its paired address to the hosts sharing it;
/// within the 512-4096 port blocks CGNs commonly give a subscriber.
pub const MAX_PORTS_PER_HOST: u32 = 4_096;

impl Default for Nat44Config {
    fn default() -> Self {
        Self {
            rules: Vec::new(),
            static_nat: Vec::new(),
            port_forwards: Vec::new(),
            timeouts: Timeouts::default(),
            filtering: Filtering::default(),
            hairpinning: true,
            port_preservation: true,
            port_reuse_hold: Duration::from_secs(120),
            max_sessions: 1 << 20,
            decrement_ttl: true,
            fragment_timeout: crate::nat44::FRAGMENT_TIMEOUT,
            max_fragment_records: crate::nat44::MAX_FRAGMENT_RECORDS,
            fragment_hold_bytes: crate::nat44::FRAGMENT_HOLD_BYTES,
            max_simultaneous_opens: crate::nat44::held::MAX_SIMULTANEOUS_OPENS,
            drop_externally_initiated_tcp: false,
            pptp: true,
            icmp_rate: IcmpRate::default(),
            max_sessions_per_host: MAX_SESSIONS_PER_HOST,
            max_ports_per_host: MAX_PORTS_PER_HOST,
            reload_drain: crate::config::ReloadDrain::Expire,
            port_block_size: 0,
            blocks_per_subscriber: BLOCKS_PER_SUBSCRIBER,
            deterministic: None,
        }
    }
}

impl Nat44Config {
    /// Port-block allocation: a block size of 0 or [`MIN_PORT_BLOCK_SIZE`] up to every
    /// dynamic rule's port range, 1 to 1024 blocks per subscriber.
    fn validate_blocks(&self) -> Result<(), ConfigError> {
        use ConfigItem::{Entry, Field};
        let size = self.port_block_size;
        if size == 0 {
            return Ok(());
        }
        if size < MIN_PORT_BLOCK_SIZE {
            return Err(ConfigError::new(
                Field("port_block_size"),
                format!("{size}: must be 0 (off) or at least {MIN_PORT_BLOCK_SIZE}"),
            ));
        }
        let most = conntrack::pool::MAX_BLOCKS_PER_SUBSCRIBER;
        if !(1..=most).contains(&self.blocks_per_subscriber) {
            return Err(ConfigError::new(
                Field("blocks_per_subscriber"),
                format!(
                    "{}: must be between 1 and {most}",
                    self.blocks_per_subscriber
                ),
            ));
        }
        for (i, r) in self.rules.iter().enumerate() {
            let ports = u32::from(r.ports.last) - u32::from(r.ports.first.max(1)) + 1;
            if u32::from(size) > ports {
                return Err(ConfigError::new(
                    Entry("rule", i, "ports"),
                    format!("{ports} ports: fewer than one port block of {size}"),
                ));
            }
        }
        Ok(())
    }

    /// Checks the configuration as a whole. Returns warnings (RFC minimums not met) on success.
    pub fn validate(&self) -> Result<Vec<ConfigWarning>, ConfigError> {
        use ConfigItem::{Entry, Field, Table};
        if self.max_simultaneous_opens > crate::nat44::held::MAX_SIMULTANEOUS_OPENS_LIMIT {
            return Err(ConfigError::new(
                Field("max_simultaneous_opens"),
                format!(
                    "{}: must be between 0 and {}",
                    self.max_simultaneous_opens,
                    crate::nat44::held::MAX_SIMULTANEOUS_OPENS_LIMIT
                ),
            ));
        }
        self.validate_blocks()?;
        self.validate_deterministic()?;
        if self.rules.is_empty()
            && self.static_nat.is_empty()
            && self.port_forwards.is_empty()
            && self.deterministic.is_none()
        {
            return Err(ConfigError::new(
                Field("rule"),
                "no NAT rule, static mapping, port forward or deterministic prefix: nothing \
                 would be translated",
            ));
        }
        // Checked in O(n log n) so that configurations with 100k rules load quickly.
        let mut seen_inside = std::collections::HashMap::with_capacity(self.rules.len());
        let mut pools: Vec<(u32, u64, usize, Ipv4Prefix)> = Vec::new(); // (first, last, rule, prefix)
        for (i, r) in self.rules.iter().enumerate() {
            if r.pool.is_empty() {
                return Err(ConfigError::new(
                    Entry("rule", i, "pool"),
                    "the pool is empty",
                ));
            }
            if let Some(j) = seen_inside.insert(r.inside, i) {
                return Err(ConfigError::new(
                    Entry("rule", i, "inside"),
                    format!(
                        "inside prefix {} is already used by rule {}",
                        r.inside,
                        j + 1
                    ),
                ));
            }
            for p in &r.pool {
                let first = u32::from(p.addr());
                pools.push((first, u64::from(first) + p.size() - 1, i, *p));
            }
            for p in &r.pool {
                if p.len() < 8 {
                    return Err(ConfigError::new(
                        Entry("rule", i, "pool"),
                        format!("pool {p} is larger than a /8"),
                    ));
                }
                if r.inside.overlaps(p) {
                    return Err(ConfigError::new(
                        Entry("rule", i, "pool"),
                        format!("pool {p} overlaps the inside prefix {}", r.inside),
                    ));
                }
            }
        }
        pools.sort_unstable();
        // Furthest-reaching pool so far: (last address, rule, prefix).
        let mut reach: Option<(u64, usize, Ipv4Prefix)> = None;
        for &(first, last, rule, prefix) in &pools {
            if let Some((end, other, other_prefix)) = reach {
                if u64::from(first) <= end {
                    let ((i, p), (j, q)) = if rule >= other {
                        ((rule, prefix), (other, other_prefix))
                    } else {
                        ((other, other_prefix), (rule, prefix))
                    };
                    let msg = if i == j {
                        format!("pool prefix {p} is listed twice or overlaps another")
                    } else {
                        format!("pool {p} overlaps pool {q} of rule {}", j + 1)
                    };
                    return Err(ConfigError::new(Entry("rule", i, "pool"), msg));
                }
            }
            if reach.is_none_or(|(end, _, _)| last > end) {
                reach = Some((last, rule, prefix));
            }
        }
        // Which rule's pool holds `ip`: the pools are disjoint (checked above) and sorted,
        // so the one starting at or before `ip` nearest to it is the only candidate.
        let in_pool = |ip: Ipv4Addr| {
            let ip = u32::from(ip);
            let i = pools.partition_point(|&(first, ..)| first <= ip);
            i.checked_sub(1)
                .map(|i| pools[i])
                .filter(|&(_, last, ..)| u64::from(ip) <= last)
                .map(|(_, _, rule, _)| rule)
        };
        // Repeats are found by sorting (n log n, not n² pairs): each error names the
        // earliest entry it repeats, as a pairwise scan would.
        let static_inside = earlier_repeats(self.static_nat.iter().map(|s| s.inside));
        let static_public = earlier_repeats(self.static_nat.iter().map(|s| s.public));
        for (i, s) in self.static_nat.iter().enumerate() {
            if let Some(r) = in_pool(s.public) {
                return Err(ConfigError::new(
                    Entry("static", i, "public"),
                    format!(
                        "public address {} lies in the dynamic pool of rule {}",
                        s.public,
                        r + 1
                    ),
                ));
            }
            if let Some(j) = static_inside[i] {
                return Err(ConfigError::new(
                    Entry("static", i, "inside"),
                    format!("{} is already mapped by static mapping {}", s.inside, j + 1),
                ));
            }
            if let Some(j) = static_public[i] {
                return Err(ConfigError::new(
                    Entry("static", i, "public"),
                    format!("{} is already used by static mapping {}", s.public, j + 1),
                ));
            }
        }
        let mut static_publics: Vec<Ipv4Addr> = self.static_nat.iter().map(|s| s.public).collect();
        static_publics.sort_unstable();
        let fwd_public = earlier_repeats(
            self.port_forwards
                .iter()
                .map(|f| (f.protocol.number(), f.public)),
        );
        let fwd_inside = earlier_repeats(
            self.port_forwards
                .iter()
                .map(|f| (f.protocol.number(), f.inside)),
        );
        for (i, f) in self.port_forwards.iter().enumerate() {
            if f.public.port() == 0 || f.inside.port() == 0 {
                return Err(ConfigError::new(
                    Entry("forward", i, "public"),
                    "port 0 cannot be forwarded",
                ));
            }
            if static_publics.binary_search(f.public.ip()).is_ok() {
                return Err(ConfigError::new(
                    Entry("forward", i, "public"),
                    format!(
                        "{} is a static 1:1 address; all its ports already belong to that mapping",
                        f.public.ip()
                    ),
                ));
            }
            if let Some(j) = fwd_public[i] {
                return Err(ConfigError::new(
                    Entry("forward", i, "public"),
                    format!("{} is already forwarded by forward {}", f.public, j + 1),
                ));
            }
            if let Some(j) = fwd_inside[i] {
                return Err(ConfigError::new(
                    Entry("forward", i, "inside"),
                    format!("{} is already the target of forward {}", f.inside, j + 1),
                ));
            }
        }
        let t = &self.timeouts;
        for (name, d) in [
            ("udp", t.udp),
            ("tcp_established", t.tcp_established),
            ("tcp_transitory", t.tcp_transitory),
            ("tcp_closed", t.tcp_closed),
            ("tcp_syn_sent", t.tcp_syn_sent),
            ("tcp_syn_recv", t.tcp_syn_recv),
            ("icmp", t.icmp),
            ("sctp", t.sctp),
            ("other", t.other),
        ] {
            if d.is_zero() {
                return Err(ConfigError::new(
                    Table("timeouts", name),
                    "a timeout of 0 would expire every session at once",
                ));
            }
        }
        // Half-open TCP is transitory (RFC 5382 §5, RFC 7857 §2.2): at most 4 minutes,
        // or a spoofed SYN flood pins the table for longer.
        for (name, d) in [
            ("tcp_syn_sent", t.tcp_syn_sent),
            ("tcp_syn_recv", t.tcp_syn_recv),
        ] {
            if d > MAX_HALF_OPEN {
                return Err(ConfigError::new(
                    Table("timeouts", name),
                    format!(
                        "= {} s: a half-open TCP session may wait at most {} s (the RFC 5382 \
                         transitory timeout); longer lets spoofed SYNs pin the table",
                        d.as_secs(),
                        MAX_HALF_OPEN.as_secs()
                    ),
                ));
            }
        }
        if self.max_sessions == 0 {
            return Err(ConfigError::new(
                Field("max_sessions"),
                "must be at least 1",
            ));
        }
        self.check_sizes()?;
        let mut warnings = Vec::new();
        let mut below = |name: &'static str, d: Duration, min: u64, rfc: &str| {
            if d < Duration::from_secs(min) {
                warnings.push(ConfigWarning {
                    item: Table("timeouts", name),
                    message: format!(
                        "= {} s is below the {min} s that {rfc} requires",
                        d.as_secs()
                    ),
                });
            }
        };
        below("udp", t.udp, 120, "RFC 4787 REQ-5");
        below("tcp_established", t.tcp_established, 7440, "RFC 5382 REQ-5");
        below("tcp_transitory", t.tcp_transitory, 240, "RFC 5382 REQ-5");
        below("icmp", t.icmp, 60, "RFC 5508 REQ-1");
        Ok(warnings)
    }
}

// O(n log n) validation, size bounds and memory estimate.

/// For each of `keys`, the index of the first earlier one equal to it (`None`: the first
/// of its kind). By sorting and one sweep: n log n, and cache-friendly on long lists.
pub(crate) fn earlier_repeats<K: Ord + Copy>(keys: impl Iterator<Item = K>) -> Vec<Option<usize>> {
    let mut sorted: Vec<(K, usize)> = keys.enumerate().map(|(i, k)| (k, i)).collect();
    sorted.sort_unstable();
    let mut out = vec![None; sorted.len()];
    let mut first = 0;
    for w in 1..sorted.len() {
        if sorted[w].0 == sorted[w - 1].0 {
            out[sorted[w].1] = Some(sorted[first].1);
        } else {
            first = w;
        }
    }
    out
}

/// The most sessions a NAT44 (or NAT64) instance can index: 32-bit slot ids in the session
/// and binding tables.
pub const MAX_SESSIONS: usize = conntrack::session::SessionTable::MAX_CAPACITY;

/// The most fragmented datagrams tracked at once.
pub const MAX_FRAGMENT_RECORDS_LIMIT: usize = 1 << 24;

/// What one public address in use can cost in the port pool: a bitmap of 65,536 ports for
/// each of TCP, UDP, ICMP and the address-only protocols (8 KiB each, reserved on first
/// use) and its bookkeeping.
/// Counted per address *in use* (at most one per inside host, by paired pooling, and
/// one per session), not per address of the pool: the pool's cost proportional to its
/// size is the port pool's own matter (`conntrack::pool`).
pub const POOL_BYTES_PER_ADDRESS_IN_USE: usize = 4 * 8192 + 128;

impl Nat44Config {
    /// Refuses sizes the tables cannot index (the session and binding tables' 32-bit ids,
    /// the fragment table's bound) before anything is allocated.
    fn check_sizes(&self) -> Result<(), ConfigError> {
        use ConfigItem::Field;
        let bindings_max = conntrack::reftable::RefTable::MAX_CAPACITY;
        let max = MAX_SESSIONS.min(bindings_max.saturating_sub(self.port_forwards.len()));
        if self.max_sessions > max {
            return Err(ConfigError::new(
                Field("max_sessions"),
                format!(
                    "{}: at most {max} (the session table indexes its slots with 32-bit ids)",
                    self.max_sessions
                ),
            ));
        }
        if self.max_fragment_records > MAX_FRAGMENT_RECORDS_LIMIT {
            return Err(ConfigError::new(
                Field("max_fragment_records"),
                format!(
                    "{}: must be between 1 and {MAX_FRAGMENT_RECORDS_LIMIT}",
                    self.max_fragment_records
                ),
            ));
        }
        if self.fragment_hold_bytes > crate::nat44::FRAGMENT_HOLD_BYTES_LIMIT {
            return Err(ConfigError::new(
                Field("fragment_hold_bytes"),
                format!(
                    "{}: at most {}",
                    self.fragment_hold_bytes,
                    crate::nat44::FRAGMENT_HOLD_BYTES_LIMIT
                ),
            ));
        }
        Ok(())
    }

    /// The most memory the tables of this configuration hold when full (call after
    /// [`validate`](Self::validate): sizes are taken as given).
    pub fn memory(&self) -> MemoryEstimate {
        use conntrack::reftable::RefTable;
        use conntrack::session::SessionTable;
        use ConfigItem::{Entry, Field};
        let cap = self.max_sessions;
        let mut m = MemoryEstimate::default();
        m.add(
            "sessions",
            Field("max_sessions"),
            SessionTable::bytes_for(cap),
        );
        m.add(
            "bindings",
            Field("max_sessions"),
            RefTable::bytes_for(cap.saturating_add(self.port_forwards.len())),
        );
        if self.filtering == Filtering::AddressDependent {
            m.add(
                "filter permits",
                Field("max_sessions"),
                RefTable::bytes_for(cap),
            );
        }
        m.add(
            "fragment records",
            Field("max_fragment_records"),
            crate::nat44::frag::FragTable::bytes_for(self.max_fragment_records),
        );
        m.add(
            "held fragments",
            Field("fragment_hold_bytes"),
            crate::nat44::frag::hold::Budget::bytes_for(self.fragment_hold_bytes),
        );
        m.add(
            "held SYNs",
            Field("max_simultaneous_opens"),
            crate::nat44::held::HeldSyns::bytes_for(self.max_simultaneous_opens),
        );
        for (i, r) in self.rules.iter().enumerate() {
            let addrs: u64 = r.pool.iter().map(|p| p.size()).sum();
            let in_use = addrs.min(r.inside.size()).min(cap as u64);
            m.add(
                "pool ports",
                Entry("rule", i, "pool"),
                usize::try_from(in_use)
                    .unwrap_or(usize::MAX)
                    .saturating_mul(POOL_BYTES_PER_ADDRESS_IN_USE),
            );
            let ports = u32::from(r.ports.last) - u32::from(r.ports.first.max(1)) + 1;
            port_hold(&mut m, Entry("rule", i, "pool"), addrs, ports, cap);
        }
        let statics = self.static_nat.len() * 2 + self.port_forwards.len() * 2;
        m.add("static mappings", Field("static"), statics * 64);
        self.deterministic_memory(&mut m);
        m
    }
}

/// The reuse hold of a pool of `addrs` addresses and `ports` ports each: a ring of
/// `min(max_sessions, ports × protocols)` released ports
/// (`conntrack::PortPool::with_hold_capacity`), named after whichever bounds it.
pub(super) fn port_hold(
    m: &mut MemoryEstimate,
    pool: ConfigItem,
    addrs: u64,
    ports: u32,
    max_sessions: usize,
) {
    use conntrack::PortPool;
    let by_sessions = PortPool::hold_capacity_for(addrs, ports, max_sessions) == max_sessions;
    m.add(
        "port hold",
        if by_sessions {
            ConfigItem::Field("max_sessions")
        } else {
            pool
        },
        PortPool::hold_bytes_for(addrs, ports, max_sessions),
    );
}

#[cfg(test)]
mod size_tests {
    use super::*;
    use crate::nat44::Nat44Shared;
    use crate::nat64::{Nat64Config, Nat64Shared};

    fn one_rule(max_sessions: usize) -> Nat44Config {
        Nat44Config {
            rules: vec![DynamicRule {
                inside: "10.0.0.0/24".parse().unwrap(),
                pool: vec!["203.0.113.1/32".parse().unwrap()],
                ports: PortRange::default(),
            }],
            max_sessions,
            ..Nat44Config::default()
        }
    }

    /// Sizes the tables cannot index (`max_sessions = 2^63-1` would index out of bounds in
    /// chain.rs, 2^62 overflow a capacity, 10^12 abort the process on allocation) are
    /// refused when the engine is built, naming the field, before anything is allocated;
    /// the largest indexable size is accepted by validation.
    #[test]
    fn sizes_the_tables_cannot_index_are_refused_before_allocating() {
        for n in [
            usize::MAX,
            i64::MAX as usize,
            1 << 62,
            1_000_000_000_000,
            MAX_SESSIONS + 1,
        ] {
            let e = Nat44Shared::new(one_rule(n), 1).unwrap_err();
            assert_eq!(e.item, ConfigItem::Field("max_sessions"), "{n}");
            assert!(e.message.contains("at most 2147483647"), "{e}");
            let e = Nat64Shared::new(
                Nat64Config {
                    pool4: vec!["203.0.113.1/32".parse().unwrap()],
                    max_sessions: n,
                    ..Nat64Config::default()
                },
                1,
            )
            .unwrap_err();
            assert_eq!(e.item, ConfigItem::Field("max_sessions"), "{n}");
        }
        assert!(one_rule(MAX_SESSIONS).validate().is_ok());
        let mut c = one_rule(1000);
        c.max_fragment_records = MAX_FRAGMENT_RECORDS_LIMIT + 1;
        assert_eq!(
            c.validate().unwrap_err().item,
            ConfigItem::Field("max_fragment_records")
        );
    }

    /// The estimate follows the tables' own figures: a built table's bucket array and
    /// slots at full capacity are what `bytes_for` says, and the parts name the settings
    /// that size them.
    #[test]
    fn the_memory_estimate_is_the_tables_own() {
        use conntrack::session::SessionTable;
        // A built table's bucket array is what the estimate counts for it.
        let t = SessionTable::new(100_000);
        let buckets = conntrack::chain::ChainIndex::bytes_for(200_000);
        assert_eq!(t.bytes(), buckets, "nothing but the buckets before use");
        assert!(SessionTable::bytes_for(100_000) > buckets + 100_000 * 32);
        let m = one_rule(1 << 20).memory();
        let sessions = m.parts.iter().find(|p| p.what == "sessions").unwrap();
        assert_eq!(sessions.item, ConfigItem::Field("max_sessions"));
        assert_eq!(sessions.bytes, SessionTable::bytes_for(1 << 20) as u64);
        assert_eq!(m.largest().unwrap().what, "sessions");
        // What max_sessions sizes grows with it, about linearly.
        let scaled = |m: crate::config::MemoryEstimate| -> u64 {
            let of_sessions =
                |p: &&crate::config::MemoryPart| p.item == ConfigItem::Field("max_sessions");
            m.parts.iter().filter(of_sessions).map(|p| p.bytes).sum()
        };
        let (small, big) = (scaled(m.clone()), scaled(one_rule(1 << 24).memory()));
        assert!(big > 15 * small && big < 17 * small, "{big} vs {small}");
        // Pool ports: one address in use per inside host at most (a /24 behind a /16).
        let mut c = one_rule(1 << 20);
        c.rules[0].pool = vec!["198.51.0.0/16".parse().unwrap()];
        let pool = c
            .memory()
            .parts
            .into_iter()
            .find(|p| p.what == "pool ports")
            .unwrap();
        assert_eq!(pool.bytes, 256 * POOL_BYTES_PER_ADDRESS_IN_USE as u64);
        assert_eq!(pool.item, ConfigItem::Entry("rule", 0, "pool"));
        // The reuse hold: 8 bytes a port, max_sessions of them, or every port of a small
        // pool (one address: 64,512 ports × 5 protocols), named after what bounds it.
        let hold = |c: &Nat44Config| {
            c.memory()
                .parts
                .into_iter()
                .find(|p| p.what == "port hold")
                .map(|p| (p.item, p.bytes))
        };
        assert_eq!(hold(&c), Some((ConfigItem::Field("max_sessions"), 8 << 20)));
        assert_eq!(
            hold(&one_rule(1 << 20)),
            Some((ConfigItem::Entry("rule", 0, "pool"), 64_512 * 5 * 8))
        );
    }

    #[test]
    fn check_memory_refuses_past_the_machine_and_warns_past_half() {
        use crate::config::{check_memory, MemoryEstimate};
        let mut m = MemoryEstimate::default();
        m.add("sessions", ConfigItem::Field("max_sessions"), 600);
        m.add(
            "fragment records",
            ConfigItem::Field("max_fragment_records"),
            300,
        );
        assert_eq!(m.total(), 900);
        let e = check_memory(&m, 899).unwrap_err();
        assert_eq!(e.item, ConfigItem::Field("max_sessions"));
        assert!(
            e.message
                .contains("lower max_sessions (sessions takes the most)"),
            "{e}"
        );
        let w = check_memory(&m, 1000).unwrap().unwrap();
        assert_eq!(w.item, ConfigItem::Field("max_sessions"));
        assert!(w.message.contains("more than half"), "{}", w.message);
        assert_eq!(check_memory(&m, 1800), Ok(None));
        assert_eq!(check_memory(&MemoryEstimate::default(), 0), Ok(None));
    }
}
