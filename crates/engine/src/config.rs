//! The NAT44 configuration as plain Rust values, and its semantic validation.
//!
//! The TOML layer (in the `quicknat` binary) parses text into these types and maps a
//! [`ConfigError`] back to the file, line and field it came from. This module never
//! reads files: it only checks that a configuration makes sense (no overlapping inside
//! prefixes, static mappings outside dynamic pools, sane timeouts, ...).

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::str::FromStr;
use std::time::Duration;

/// An IPv4 prefix such as `10.0.0.0/24`; host bits are always zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv4Prefix {
    addr: Ipv4Addr,
    len: u8,
}

impl Ipv4Prefix {
    /// Builds a prefix; rejects a length over 32 and set host bits.
    pub fn new(addr: Ipv4Addr, len: u8) -> Result<Self, String> {
        if len > 32 {
            return Err(format!("prefix length /{len} is longer than 32"));
        }
        let masked = u32::from(addr) & mask(len);
        if masked != u32::from(addr) {
            return Err(format!(
                "{addr}/{len} has host bits set (did you mean {}/{len}?)",
                Ipv4Addr::from(masked)
            ));
        }
        Ok(Self { addr, len })
    }

    /// The network address.
    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    /// The prefix length in bits (0..=32).
    pub fn len(&self) -> u8 {
        self.len
    }

    /// True for `0.0.0.0/0`-style prefixes covering nothing; never: a prefix always covers at least one address.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The netmask as a host-order integer.
    pub fn mask(&self) -> u32 {
        mask(self.len)
    }

    /// Whether `ip` lies inside this prefix.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & self.mask() == u32::from(self.addr)
    }

    /// Whether the two prefixes share any address.
    pub fn overlaps(&self, other: &Ipv4Prefix) -> bool {
        let l = self.len.min(other.len);
        u32::from(self.addr) & mask(l) == u32::from(other.addr) & mask(l)
    }

    /// Number of addresses covered (1 for a /32, 2^32 for /0).
    pub fn size(&self) -> u64 {
        1u64 << (32 - u32::from(self.len))
    }

    /// The `i`-th address of the prefix (no bounds check beyond wrapping inside the prefix).
    pub fn nth(&self, i: u64) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.addr).wrapping_add((i % self.size()) as u32))
    }
}

/// Host-order netmask for a prefix length.
pub fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    }
}

impl fmt::Display for Ipv4Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl FromStr for Ipv4Prefix {
    type Err = String;
    /// Parses `a.b.c.d/len`, or a bare address as a /32.
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: Ipv4Addr = a
            .trim()
            .parse()
            .map_err(|_| format!("\"{a}\" is not an IPv4 address"))?;
        let len = match l {
            Some(l) => l
                .trim()
                .parse::<u8>()
                .map_err(|_| format!("\"{l}\" is not a prefix length (0-32)"))?,
            None => 32,
        };
        Ipv4Prefix::new(addr, len)
    }
}

/// An IPv6 prefix such as `2001:db8::/32`; host bits are always zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv6Prefix {
    addr: Ipv6Addr,
    len: u8,
}

impl Ipv6Prefix {
    /// Builds a prefix; rejects a length over 128 and set host bits.
    pub fn new(addr: Ipv6Addr, len: u8) -> Result<Self, String> {
        if len > 128 {
            return Err(format!("prefix length /{len} is longer than 128"));
        }
        let masked = u128::from(addr) & mask6(len);
        if masked != u128::from(addr) {
            return Err(format!(
                "{addr}/{len} has host bits set (did you mean {}/{len}?)",
                Ipv6Addr::from(masked)
            ));
        }
        Ok(Self { addr, len })
    }

    /// The network address.
    pub fn addr(&self) -> Ipv6Addr {
        self.addr
    }

    /// The prefix length in bits (0..=128).
    #[allow(clippy::len_without_is_empty)] // a prefix length, not a collection
    pub fn len(&self) -> u8 {
        self.len
    }

    /// Whether `ip` lies inside this prefix.
    pub fn contains(&self, ip: Ipv6Addr) -> bool {
        u128::from(ip) & mask6(self.len) == u128::from(self.addr)
    }

    /// Whether the two prefixes share any address.
    pub fn overlaps(&self, other: &Ipv6Prefix) -> bool {
        let l = self.len.min(other.len);
        u128::from(self.addr) & mask6(l) == u128::from(other.addr) & mask6(l)
    }
}

/// Host-order IPv6 netmask for a prefix length.
pub fn mask6(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len.min(128)))
    }
}

impl fmt::Display for Ipv6Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl FromStr for Ipv6Prefix {
    type Err = String;
    /// Parses `addr/len`, or a bare address as a /128.
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: Ipv6Addr = a
            .trim()
            .parse()
            .map_err(|_| format!("\"{a}\" is not an IPv6 address"))?;
        let len = match l {
            Some(l) => l
                .trim()
                .parse::<u8>()
                .map_err(|_| format!("\"{l}\" is not a prefix length (0-128)"))?,
            None => 128,
        };
        Ipv6Prefix::new(addr, len)
    }
}

/// An inclusive range of ports (or ICMP identifiers), `first..=last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// First port of the range.
    pub first: u16,
    /// Last port of the range (inclusive).
    pub last: u16,
}

impl PortRange {
    /// Builds a range; `first` must not exceed `last`, and port 0 is never handed out.
    pub fn new(first: u16, last: u16) -> Result<Self, String> {
        if first == 0 {
            return Err("port 0 cannot be handed out; start the range at 1 or above".into());
        }
        if first > last {
            return Err(format!("range {first}-{last} is empty (first > last)"));
        }
        Ok(Self { first, last })
    }

    /// Number of ports in the range.
    pub fn count(&self) -> u32 {
        u32::from(self.last) - u32::from(self.first) + 1
    }

    /// Whether `port` is inside the range.
    pub fn contains(&self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }
}

impl Default for PortRange {
    fn default() -> Self {
        Self {
            first: 1024,
            last: 65535,
        }
    }
}

impl FromStr for PortRange {
    type Err = String;
    /// Parses `first-last` or a single port.
    fn from_str(s: &str) -> Result<Self, String> {
        let p = |x: &str| {
            x.trim()
                .parse::<u16>()
                .map_err(|_| format!("\"{x}\" is not a port number (1-65535)"))
        };
        match s.split_once('-') {
            Some((a, b)) => PortRange::new(p(a)?, p(b)?),
            None => {
                let v = p(s)?;
                PortRange::new(v, v)
            }
        }
    }
}

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

/// Transport protocols a port forward can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum L4Proto {
    /// TCP (6).
    Tcp,
    /// UDP (17).
    Udp,
}

impl L4Proto {
    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            L4Proto::Tcp => 6,
            L4Proto::Udp => 17,
        }
    }
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

/// Filtering behaviour for inbound packets to an existing mapping (RFC 4787 §5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Filtering {
    /// Any outside host may send to a mapped public address and port.
    #[default]
    EndpointIndependent,
    /// Only outside hosts (addresses) the inside endpoint has sent to.
    AddressDependent,
    /// Only outside addresses and ports the inside endpoint has sent to.
    AddressAndPortDependent,
}

/// Session idle timeouts. Defaults follow RFC 4787 REQ-5, RFC 5382 REQ-5, RFC 5508 REQ-1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// UDP session idle timeout (RFC 4787: at least 120 s; default 300 s).
    pub udp: Duration,
    /// TCP established idle timeout (RFC 5382: at least 2 h 4 min).
    pub tcp_established: Duration,
    /// TCP transitory (SYN sent, FIN seen, TIME_WAIT) timeout (RFC 5382: 4 min).
    pub tcp_transitory: Duration,
    /// TCP after a RST: the connection is gone, expire fast.
    pub tcp_closed: Duration,
    /// ICMP query (echo) timeout (RFC 5508: at least 60 s).
    pub icmp: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            udp: Duration::from_secs(300),
            tcp_established: Duration::from_secs(7440),
            tcp_transitory: Duration::from_secs(240),
            tcp_closed: Duration::from_secs(10),
            icmp: Duration::from_secs(60),
        }
    }
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
}

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
        }
    }
}

/// Which part of the configuration a [`ConfigError`] is about, so the file layer can
/// point at the right line. Indexes count from 0 in the order the items were given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigItem {
    /// A field of dynamic rule `n`.
    Rule(usize, &'static str),
    /// A field of static 1:1 mapping `n`.
    StaticNat(usize, &'static str),
    /// A field of port forward `n`.
    PortForward(usize, &'static str),
    /// A field of the timeouts table.
    Timeouts(&'static str),
    /// A top-level field.
    Global(&'static str),
}

/// A semantic configuration error: what is wrong and with which item.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{item:?}: {message}")]
pub struct ConfigError {
    /// The item (and field) at fault.
    pub item: ConfigItem,
    /// Why it is wrong, in words an operator understands.
    pub message: String,
}

fn err(item: ConfigItem, message: impl Into<String>) -> ConfigError {
    ConfigError {
        item,
        message: message.into(),
    }
}

impl Nat44Config {
    /// Checks the configuration as a whole. Returns warnings (RFC minimums not met) on success.
    pub fn validate(&self) -> Result<Vec<String>, ConfigError> {
        use ConfigItem::*;
        if self.rules.is_empty() && self.static_nat.is_empty() && self.port_forwards.is_empty() {
            return Err(err(
                Global("rule"),
                "no NAT rule, static mapping or port forward: nothing would be translated",
            ));
        }
        // Checked in O(n log n) so that configurations with 100k rules load quickly.
        let mut seen_inside = std::collections::HashMap::with_capacity(self.rules.len());
        let mut pools: Vec<(u32, u64, usize, Ipv4Prefix)> = Vec::new(); // (first, last, rule, prefix)
        for (i, r) in self.rules.iter().enumerate() {
            if r.pool.is_empty() {
                return Err(err(Rule(i, "pool"), "the pool is empty"));
            }
            if let Some(j) = seen_inside.insert(r.inside, i) {
                return Err(err(
                    Rule(i, "inside"),
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
                    return Err(err(
                        Rule(i, "pool"),
                        format!("pool {p} is larger than a /8"),
                    ));
                }
                if r.inside.overlaps(p) {
                    return Err(err(
                        Rule(i, "pool"),
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
                    return Err(err(Rule(i, "pool"), msg));
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
                return Err(err(
                    StaticNat(i, "public"),
                    format!(
                        "public address {} lies in the dynamic pool of rule {}",
                        s.public,
                        r + 1
                    ),
                ));
            }
            for (j, o) in self.static_nat.iter().enumerate().take(i) {
                if o.inside == s.inside {
                    return Err(err(
                        StaticNat(i, "inside"),
                        format!("{} is already mapped by static mapping {}", s.inside, j + 1),
                    ));
                }
                if o.public == s.public {
                    return Err(err(
                        StaticNat(i, "public"),
                        format!("{} is already used by static mapping {}", s.public, j + 1),
                    ));
                }
            }
        }
        for (i, f) in self.port_forwards.iter().enumerate() {
            if f.public.port() == 0 || f.inside.port() == 0 {
                return Err(err(PortForward(i, "public"), "port 0 cannot be forwarded"));
            }
            if self.static_nat.iter().any(|s| s.public == *f.public.ip()) {
                return Err(err(
                    PortForward(i, "public"),
                    format!(
                        "{} is a static 1:1 address; all its ports already belong to that mapping",
                        f.public.ip()
                    ),
                ));
            }
            for (j, o) in self.port_forwards.iter().enumerate().take(i) {
                if o.protocol == f.protocol && o.public == f.public {
                    return Err(err(
                        PortForward(i, "public"),
                        format!("{} is already forwarded by forward {}", f.public, j + 1),
                    ));
                }
                if o.protocol == f.protocol && o.inside == f.inside {
                    return Err(err(
                        PortForward(i, "inside"),
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
                return Err(err(
                    Timeouts(name),
                    "a timeout of 0 would expire every session at once",
                ));
            }
        }
        if self.max_sessions == 0 {
            return Err(err(Global("max_sessions"), "must be at least 1"));
        }
        let mut warnings = Vec::new();
        let mut below = |name: &str, d: Duration, min: u64, rfc: &str| {
            if d < Duration::from_secs(min) {
                warnings.push(format!(
                    "timeouts.{name} = {} s is below the {min} s that {rfc} requires",
                    d.as_secs()
                ));
            }
        };
        below("udp", t.udp, 120, "RFC 4787 REQ-5");
        below("tcp_established", t.tcp_established, 7440, "RFC 5382 REQ-5");
        below("tcp_transitory", t.tcp_transitory, 240, "RFC 5382 REQ-5");
        below("icmp", t.icmp, 60, "RFC 5508 REQ-1");
        Ok(warnings)
    }
}
