//! The NAT64 configuration (RFC 6146) and its validation. NAT64 runs on NAT44's tables
//! (see the module above), so its configuration is checked as the NAT44 configuration it
//! becomes, with every item named as NAT64's own section names it.

use std::net::{Ipv4Addr, SocketAddrV4, SocketAddrV6};
use std::time::Duration;

use xlat::prefix::Ipv4Prefix;
use xlat::rfc6052::Pref64;
use xlat::siit::SiitOptions;

use crate::config::{
    ConfigError, ConfigItem, ConfigWarning, Filtering, IcmpRate, L4Proto, PortRange, Timeouts,
};
use crate::nat44::{DynamicRule, Nat44Config, PortForward};

/// A static binding: an IPv6 server reachable at a public IPv4 address and port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nat64Static {
    /// TCP or UDP.
    pub protocol: L4Proto,
    /// The public IPv4 transport address (inside the pool).
    pub public: SocketAddrV4,
    /// The IPv6 server.
    pub inside: SocketAddrV6,
}

/// A NAT64 instance's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nat64Config {
    /// The prefix IPv4 destinations are embedded in (RFC 6052).
    pub pref64: Pref64,
    /// The public IPv4 pool (pool4).
    pub pool4: Vec<Ipv4Prefix>,
    /// Ports (and ICMP identifiers) of the pool.
    pub ports: PortRange,
    /// Static bindings.
    pub static_bindings: Vec<Nat64Static>,
    /// Session idle timeouts (RFC 6146 §4: UDP ≥ 2 min default 5, TCP established
    /// ≥ 2 h 4 min, transitory 4 min, ICMP 60 s).
    pub timeouts: Timeouts,
    /// Inbound filtering (RFC 6146 §3.5.1: endpoint-independent or address-dependent).
    pub filtering: Filtering,
    /// IPv6 hosts may reach each other through pool addresses.
    pub hairpinning: bool,
    /// How long a released pool port is held back.
    pub port_reuse_hold: Duration,
    /// Upper bound on live sessions (and on IPv6 hosts).
    pub max_sessions: usize,
    /// RFC 7915 knobs.
    pub options: SiitOptions,
    /// How long a fragmented datagram's translation is remembered for its later fragments.
    pub fragment_timeout: Duration,
    /// Fragmented datagrams in flight at most.
    pub max_fragment_records: usize,
    /// Bytes of later fragments held at most while they wait for their first.
    pub fragment_hold_bytes: usize,
    /// Unsolicited inbound TCP SYNs held at once for a simultaneous open (RFC 6146
    /// §3.5.2.2); more are dropped (`syn_hold_full`).
    pub max_simultaneous_opens: usize,
    /// RFC 6146 §3.5.2.2: drop unsolicited inbound SYNs at once instead of holding them.
    pub drop_externally_initiated_tcp: bool,
    /// RFC 6146 §3.5.3: drop ICMPv6 informational messages from the inside (echo, the
    /// only ones translated) instead of translating them.
    pub drop_icmpv6_info: bool,
    // Gateway-originated ICMP errors.
    /// RFC 7915 §4.4 / §5.4: whether the translator sends the ICMP errors it owes the
    /// sender of a packet it refuses (on by default).
    pub icmp_errors: bool,
    // ICMP error budget.
    /// ICMP errors a worker sends about refused packets, in all and to one sender.
    pub icmp_rate: IcmpRate,
    // Per-subscriber limits (RFC 6888 REQ-4/REQ-5); `subscriber_prefix_len` says which IPv6
    // sources make one subscriber.
    /// Sessions one IPv6 host may open (0: unlimited); see [`Nat44Config::max_sessions_per_host`].
    pub max_sessions_per_host: u32,
    /// Pool ports one IPv6 host may hold per protocol (0: unlimited).
    pub max_ports_per_host: u32,
    /// Keep the IPv6 host's source port when it is free in pool4's range (else RFC 6056
    /// randomised).
    pub port_preservation: bool,
    /// The per-host limits count IPv6 sources by this prefix length: 64 (default: an IPv6
    /// subscriber is given a /64, RFC 6888 §3, RFC 7857), 1-64, or 128 (each address).
    pub subscriber_prefix_len: u8,
    // Port-block allocation.
    /// Ports per block (0: off); see [`Nat44Config::port_block_size`].
    pub port_block_size: u16,
    /// Blocks per subscriber; see [`Nat44Config::blocks_per_subscriber`].
    pub blocks_per_subscriber: u16,
}

impl Default for Nat64Config {
    fn default() -> Self {
        let n = Nat44Config::default();
        Nat64Config {
            pref64: Pref64::WELL_KNOWN,
            pool4: Vec::new(),
            ports: PortRange::default(),
            static_bindings: Vec::new(),
            timeouts: n.timeouts,
            filtering: Filtering::EndpointIndependent,
            hairpinning: true,
            port_reuse_hold: n.port_reuse_hold,
            max_sessions: n.max_sessions,
            options: SiitOptions::default(),
            fragment_timeout: n.fragment_timeout,
            max_fragment_records: n.max_fragment_records,
            fragment_hold_bytes: n.fragment_hold_bytes,
            max_simultaneous_opens: n.max_simultaneous_opens,
            drop_externally_initiated_tcp: n.drop_externally_initiated_tcp,
            drop_icmpv6_info: false,
            icmp_errors: true,
            icmp_rate: IcmpRate::default(),
            max_sessions_per_host: n.max_sessions_per_host,
            max_ports_per_host: n.max_ports_per_host,
            port_preservation: n.port_preservation,
            subscriber_prefix_len: 64,
            port_block_size: n.port_block_size,
            blocks_per_subscriber: n.blocks_per_subscriber,
        }
    }
}

impl Nat64Config {
    /// The NAT44 configuration NAT64 runs on: one dynamic rule from the host-id network
    /// to pool4, and a port forward per static binding to the host id `host_of(i)` of its
    /// IPv6 server.
    pub(super) fn nat44(&self, host_of: impl Fn(usize) -> Ipv4Addr) -> Nat44Config {
        let host_net = Ipv4Prefix::new(Ipv4Addr::from(conntrack::host_table::HOST_NET), 4)
            .unwrap_or_else(|_| unreachable!("HOST_NET is a /4 network address"));
        Nat44Config {
            rules: vec![DynamicRule {
                inside: host_net,
                pool: self.pool4.clone(),
                ports: self.ports,
            }],
            static_nat: Vec::new(),
            port_forwards: self
                .static_bindings
                .iter()
                .enumerate()
                .map(|(i, s)| PortForward {
                    protocol: s.protocol,
                    public: s.public,
                    inside: SocketAddrV4::new(host_of(i), s.inside.port()),
                })
                .collect(),
            timeouts: self.timeouts,
            filtering: self.filtering,
            hairpinning: self.hairpinning,
            port_preservation: self.port_preservation,
            port_reuse_hold: self.port_reuse_hold,
            max_sessions: self.max_sessions,
            // SIIT decrements the TTL / hop limit once.
            decrement_ttl: false,
            fragment_timeout: self.fragment_timeout,
            max_fragment_records: self.max_fragment_records,
            fragment_hold_bytes: self.fragment_hold_bytes,
            max_simultaneous_opens: self.max_simultaneous_opens,
            drop_externally_initiated_tcp: self.drop_externally_initiated_tcp,
            // PPTP's GRE is IPv4's: an IPv6 client's calls go by address only.
            pptp: false,
            icmp_rate: self.icmp_rate,
            max_sessions_per_host: self.max_sessions_per_host,
            max_ports_per_host: self.max_ports_per_host,
            // Live reload: sessions on a pool4 address a reload removed expire.
            reload_drain: crate::config::ReloadDrain::Expire,
            port_block_size: self.port_block_size,
            blocks_per_subscriber: self.blocks_per_subscriber,
            // Deterministic NAT is a NAT44 option only.
            deterministic: None,
        }
    }

    /// Checks the configuration as a whole (pool4, static bindings inside it and not
    /// repeated, timeouts) without building any table. Returns warnings (timeouts below
    /// RFC 6146's minimums) on success.
    pub fn validate(&self) -> Result<Vec<ConfigWarning>, ConfigError> {
        if !matches!(self.subscriber_prefix_len, 1..=64 | 128) {
            return Err(ConfigError::new(
                ConfigItem::Field("subscriber_prefix_len"),
                format!(
                    "{}: must be 1 to 64 (a subscriber's prefix) or 128 (each address)",
                    self.subscriber_prefix_len
                ),
            ));
        }
        if self.pool4.is_empty() {
            return Err(ConfigError::new(
                ConfigItem::Field("pool4"),
                "pool4 is empty: NAT64 needs public IPv4 addresses",
            ));
        }
        if self.max_sessions > conntrack::host_table::MAX_HOSTS {
            return Err(ConfigError::new(
                ConfigItem::Field("max_sessions"),
                format!(
                    "{}: at most {} (one host id each in 240.0.0.0/4)",
                    self.max_sessions,
                    conntrack::host_table::MAX_HOSTS
                ),
            ));
        }
        // pool4 as sorted ranges, searched by bisection (not one scan per binding).
        let mut ranges: Vec<(u32, u64)> = self
            .pool4
            .iter()
            .map(|p| {
                (
                    u32::from(p.addr()),
                    u64::from(u32::from(p.addr())) + p.size() - 1,
                )
            })
            .collect();
        ranges.sort_unstable();
        // The furthest address reached by the ranges starting at or before each one: an
        // address is in pool4 when the ranges starting at or before it reach it.
        let mut reach = 0u64;
        for r in &mut ranges {
            reach = reach.max(r.1);
            r.1 = reach;
        }
        let in_pool4 = |ip: Ipv4Addr| {
            let ip = u32::from(ip);
            let i = ranges.partition_point(|&(first, _)| first <= ip);
            i.checked_sub(1)
                .is_some_and(|i| u64::from(ip) <= ranges[i].1)
        };
        for (i, s) in self.static_bindings.iter().enumerate() {
            if !in_pool4(*s.public.ip()) {
                return Err(ConfigError::new(
                    ConfigItem::Entry("static", i, "public"),
                    format!(
                        "{} is not in pool4: a static binding uses a pool4 address",
                        s.public.ip()
                    ),
                ));
            }
        }
        // Stand-in host ids, one per IPv6 server (the same server, the same id), as the
        // host table would give them.
        let servers: Vec<_> = self
            .static_bindings
            .iter()
            .map(|s| *s.inside.ip())
            .collect();
        let base = conntrack::host_table::HOST_NET;
        let firsts = crate::nat44::config::earlier_repeats(servers.iter().copied());
        let nat = self.nat44(|i| Ipv4Addr::from(base + 1 + firsts[i].unwrap_or(i) as u32));
        let warnings = nat.validate().map_err(from_nat44)?;
        Ok(warnings
            .into_iter()
            .map(|w| ConfigWarning {
                item: item_from_nat44(w.item),
                message: w.message,
            })
            .collect())
    }
}

/// A NAT44 configuration error of the NAT44 configuration NAT64 runs on, named as NAT64's
/// section names the item.
pub(super) fn from_nat44(e: ConfigError) -> ConfigError {
    ConfigError {
        item: item_from_nat44(e.item),
        message: e.message,
    }
}

fn item_from_nat44(item: ConfigItem) -> ConfigItem {
    match item {
        ConfigItem::Entry("rule", _, "ports") => ConfigItem::Field("ports"),
        ConfigItem::Entry("rule", _, _) => ConfigItem::Field("pool4"),
        ConfigItem::Entry("forward", i, f) => ConfigItem::Entry("static", i, f),
        other => other,
    }
}

// Memory estimate.
impl Nat64Config {
    /// The most memory the tables of this configuration hold when full: NAT44's tables it
    /// runs on and the IPv6 host table (call after [`validate`](Self::validate)).
    pub fn memory(&self) -> crate::config::MemoryEstimate {
        let mut m = self
            .nat44(|_| Ipv4Addr::UNSPECIFIED)
            .memory()
            .map_items(item_from_nat44);
        m.add(
            "ipv6 hosts",
            ConfigItem::Field("max_sessions"),
            conntrack::host_table::HostTable::bytes_for(self.max_sessions),
        );
        m
    }
}
