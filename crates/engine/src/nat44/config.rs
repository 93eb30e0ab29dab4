//! The NAT44 configuration as plain Rust values, and its semantic validation: no
//! overlapping inside prefixes or pools, static mappings outside dynamic pools, sane
//! timeouts. Never reads files.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use xlat::prefix::Ipv4Prefix;

use crate::config::{
    ConfigError, ConfigItem, ConfigWarning, Filtering, L4Proto, PortRange, Timeouts,
};

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
    /// Unsolicited inbound TCP SYNs held at once for a simultaneous open (RFC 5382 REQ-4,
    /// RFC 6146 §3.5.2.2); more are dropped (`syn_hold_full`).
    pub max_simultaneous_opens: usize,
    /// RFC 6146 §3.5.2.2: drop unsolicited inbound SYNs at once instead of holding them.
    pub drop_externally_initiated_tcp: bool,

    // Per-subscriber limits (RFC 6888 REQ-3/REQ-4): one inside host (one IPv6 host
    // behind NAT64) never takes the table or a pool address from the others.
    /// Sessions an inside host may open (0: unlimited). Counted for flows started from
    /// the inside; flows to its port forwards are not its doing and are not counted.
    pub max_sessions_per_host: u32,
    /// Public ports (dynamic bindings) an inside host may hold per protocol (0:
    /// unlimited).
    pub max_ports_per_host: u32,
}

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
            max_simultaneous_opens: crate::nat44::held::MAX_SIMULTANEOUS_OPENS,
            drop_externally_initiated_tcp: false,
            max_sessions_per_host: MAX_SESSIONS_PER_HOST,
            max_ports_per_host: MAX_PORTS_PER_HOST,
        }
    }
}

impl Nat44Config {
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
        if self.rules.is_empty() && self.static_nat.is_empty() && self.port_forwards.is_empty() {
            return Err(ConfigError::new(
                Field("rule"),
                "no NAT rule, static mapping or port forward: nothing would be translated",
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
        let in_pool = |ip: Ipv4Addr| {
            self.rules
                .iter()
                .position(|r| r.pool.iter().any(|p| p.contains(ip)))
        };
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
            for (j, o) in self.static_nat.iter().enumerate().take(i) {
                if o.inside == s.inside {
                    return Err(ConfigError::new(
                        Entry("static", i, "inside"),
                        format!("{} is already mapped by static mapping {}", s.inside, j + 1),
                    ));
                }
                if o.public == s.public {
                    return Err(ConfigError::new(
                        Entry("static", i, "public"),
                        format!("{} is already used by static mapping {}", s.public, j + 1),
                    ));
                }
            }
        }
        for (i, f) in self.port_forwards.iter().enumerate() {
            if f.public.port() == 0 || f.inside.port() == 0 {
                return Err(ConfigError::new(
                    Entry("forward", i, "public"),
                    "port 0 cannot be forwarded",
                ));
            }
            if self.static_nat.iter().any(|s| s.public == *f.public.ip()) {
                return Err(ConfigError::new(
                    Entry("forward", i, "public"),
                    format!(
                        "{} is a static 1:1 address; all its ports already belong to that mapping",
                        f.public.ip()
                    ),
                ));
            }
            for (j, o) in self.port_forwards.iter().enumerate().take(i) {
                if o.protocol == f.protocol && o.public == f.public {
                    return Err(ConfigError::new(
                        Entry("forward", i, "public"),
                        format!("{} is already forwarded by forward {}", f.public, j + 1),
                    ));
                }
                if o.protocol == f.protocol && o.inside == f.inside {
                    return Err(ConfigError::new(
                        Entry("forward", i, "inside"),
                        format!("{} is already the target of forward {}", f.inside, j + 1),
                    ));
                }
            }
        }
        let t = &self.timeouts;
        for (name, d) in [
            ("udp", t.udp),
            ("tcp_established", t.tcp_established),
            ("tcp_transitory", t.tcp_transitory),
            ("tcp_closed", t.tcp_closed),
            ("icmp", t.icmp),
        ] {
            if d.is_zero() {
                return Err(ConfigError::new(
                    Table("timeouts", name),
                    "a timeout of 0 would expire every session at once",
                ));
            }
        }
        if self.max_sessions == 0 {
            return Err(ConfigError::new(
                Field("max_sessions"),
                "must be at least 1",
            ));
        }
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
