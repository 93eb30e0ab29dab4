//! The file's shape as serde sees it: strings and integers with their byte spans.
//!
//! Nothing here interprets a value (that is `super::convert`'s job); these types only
//! reject unknown keys and wrong TOML types, and remember where every value was written.

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    /// The `[nat44]` table. Not `Spanned`: toml 0.8 cannot give a span to a table only
    /// implied by its sub-tables (`[nat44.deterministic]` or `[nat44.timeouts]` with no
    /// `[nat44]` line failed with "expected a borrowed string"; toml-rs/toml#798).
    pub nat44: Option<RawNat44>,
    /// The `[gateway]` table (live operation).
    pub gateway: Option<Spanned<RawGateway>>,
    /// The `[siit]` table (stateless IPv4/IPv6 translation).
    pub siit: Option<Spanned<super::modes::RawSiit>>,
    /// The `[clat]` table (464XLAT customer side).
    pub clat: Option<Spanned<super::modes::RawClat>>,
    /// The `[nat64]` table (stateful NAT64).
    pub nat64: Option<Spanned<super::modes::RawNat64>>,
    /// The `[ila]` table (read by `super::ila`).
    pub ila: Option<Spanned<super::ila::RawIla>>,
    /// The `[logging]` table (NAT event logging, read by `super::natlog`).
    pub logging: Option<Spanned<super::natlog::RawLogging>>,
    // -- routing integration --
    /// The `[routing]` table (announced prefixes, read by `super::routing`).
    pub routing: Option<Spanned<super::routing::RawRouting>>,
}

/// The `[gateway]` table: which interfaces a live gateway uses, and how.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGateway {
    /// Interface facing the inside network.
    pub inside: Spanned<String>,
    /// Interface facing the outside.
    pub outside: Spanned<String>,
    /// `"af_packet"` or `"af_xdp"`.
    pub backend: Option<Spanned<String>>,
    /// Worker threads.
    pub workers: Option<Spanned<u64>>,
    /// `"flows"` or `"hash"`: how AF_PACKET's workers share the flows.
    pub placement: Option<Spanned<String>>,
    /// `"ports"` or `"leave"`: whether to add the ports to the NIC's receive hash.
    pub rx_hash: Option<Spanned<String>>,
    /// Spin instead of sleeping when idle.
    pub busy_poll: Option<bool>,
    /// Seconds between counter log lines.
    pub stats_interval: Option<Spanned<u64>>,
    /// Drop transit IPv4 at the kernel's ingress hook after quicknat's copy.
    pub kernel_bypass: Option<bool>,
    /// Turn offloads off on the interfaces at start-up.
    pub offloads_off: Option<bool>,
    /// Path of the local control socket (ILA mapping updates).
    pub control_socket: Option<String>,
    /// Group whose members may use the control socket besides root.
    pub control_group: Option<Spanned<String>>,
    /// GSO/GRO pass-through with virtio-net headers (AF_PACKET, NAT44).
    pub gso: Option<bool>,
    /// The gateway's own addresses on the inside link (sources of its ICMP errors there).
    pub inside_addresses: Option<Vec<Spanned<String>>>,
    /// The gateway's own addresses on the outside link.
    pub outside_addresses: Option<Vec<Spanned<String>>>,
    /// MTU of the inside link (live: at most the interface's).
    pub inside_mtu: Option<Spanned<u64>>,
    /// MTU of the outside link.
    pub outside_mtu: Option<Spanned<u64>>,
    // -- metrics --
    /// Address of the Prometheus metrics listener (`"127.0.0.1:9464"`); off when absent.
    pub metrics: Option<Spanned<String>>,
    // Logging.
    /// Log level or filter (`EnvFilter` syntax); `QUICKNAT_LOG`/`RUST_LOG` override it.
    pub log_level: Option<Spanned<String>>,
    /// `"text"` or `"json"`.
    pub log_format: Option<Spanned<String>>,
    // -- XDP fast path --
    /// `"auto"`, `"on"` or `"off"` (default).
    pub xdp_fast_path: Option<Spanned<String>>,
    /// Flow directions the fast path's map holds per interface.
    pub xdp_fast_path_entries: Option<Spanned<u64>>,
    /// Seconds an idle SIIT/CLAT flow direction stays in the fast path's map.
    pub xdp_fast_path_idle: Option<Spanned<u64>>,
    // -- CPUs --
    /// The workers' CPUs, a Linux CPU list.
    pub cpus: Option<Spanned<String>>,
    /// The reaper's CPU.
    pub reaper_cpu: Option<Spanned<u64>>,
}

/// The `[nat44]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNat44 {
    /// `"endpoint-independent"`, `"address-dependent"` or `"address-and-port-dependent"`.
    pub filtering: Option<Spanned<String>>,
    /// Hairpinning on or off.
    pub hairpinning: Option<bool>,
    /// Port preservation on or off.
    pub port_preservation: Option<bool>,
    /// Seconds a released port is held back.
    pub port_reuse_hold: Option<Spanned<u64>>,
    /// Upper bound on live sessions.
    pub max_sessions: Option<Spanned<u64>>,
    /// TTL decrement on or off.
    pub decrement_ttl: Option<bool>,
    /// Seconds a fragmented datagram's translation is remembered for its later fragments.
    pub fragment_timeout: Option<Spanned<u64>>,
    /// Fragmented datagrams in flight at most.
    pub max_fragment_records: Option<Spanned<u64>>,
    /// Bytes of fragments held at most while they wait for their first.
    pub fragment_hold_bytes: Option<Spanned<u64>>,
    /// The `[nat44.timeouts]` table.
    pub timeouts: Option<Spanned<RawTimeouts>>,
    /// `[[nat44.rule]]` tables.
    #[serde(default)]
    pub rule: Vec<Spanned<RawRule>>,
    /// `[[nat44.static]]` tables.
    #[serde(default, rename = "static")]
    pub static_nat: Vec<Spanned<RawStatic>>,
    /// `[[nat44.forward]]` tables.
    #[serde(default)]
    pub forward: Vec<Spanned<RawForward>>,
    /// Unsolicited inbound TCP SYNs held at once (RFC 5382 REQ-4).
    pub max_simultaneous_opens: Option<Spanned<u64>>,
    /// Drop unsolicited inbound TCP SYNs instead of holding them.
    pub drop_externally_initiated_tcp: Option<bool>,
    /// Read PPTP control connections and translate their calls' GRE by call id.
    pub pptp: Option<bool>,
    // -- ICMP error budget --
    /// ICMP errors per second a worker sends at most, in all.
    pub icmp_error_rate: Option<Spanned<u64>>,
    /// ICMP errors per second a worker sends at most to one sender.
    pub icmp_error_rate_per_source: Option<Spanned<u64>>,
    /// Sessions one inside host may open (0: unlimited).
    pub max_sessions_per_host: Option<Spanned<u64>>,
    /// Public ports one inside host may hold per protocol (0: unlimited).
    pub max_ports_per_host: Option<Spanned<u64>>,
    // -- live reload --
    /// Sessions on a public address a reload removed: "expire" or "immediate".
    pub reload_drain: Option<Spanned<String>>,
    // -- port-block allocation --
    /// Ports per block (0: off).
    pub port_block_size: Option<Spanned<u64>>,
    /// Blocks one subscriber may hold per pool address (each serves every protocol).
    pub blocks_per_subscriber: Option<Spanned<u64>>,
    // -- deterministic NAT --
    /// The `[nat44.deterministic]` table (RFC 7422).
    pub deterministic: Option<Spanned<super::deterministic::RawDeterministic>>,
}

/// The `[nat44.timeouts]` table, in seconds.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTimeouts {
    /// UDP idle timeout.
    pub udp: Option<Spanned<u64>>,
    /// TCP established idle timeout.
    pub tcp_established: Option<Spanned<u64>>,
    /// TCP transitory timeout.
    pub tcp_transitory: Option<Spanned<u64>>,
    /// TCP timeout after a RST.
    pub tcp_closed: Option<Spanned<u64>>,
    /// TCP timeout with only a SYN seen.
    pub tcp_syn_sent: Option<Spanned<u64>>,
    /// TCP timeout with the SYN-ACK seen, handshake not complete.
    pub tcp_syn_recv: Option<Spanned<u64>>,
    /// ICMP query timeout.
    pub icmp: Option<Spanned<u64>>,
    /// SCTP association idle timeout.
    pub sctp: Option<Spanned<u64>>,
    /// Timeout of every other protocol (address only).
    pub other: Option<Spanned<u64>>,
}

/// One `[[nat44.rule]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRule {
    /// Inside prefix.
    pub inside: Spanned<String>,
    /// Public pool: one string or a list of strings.
    pub pool: Spanned<Pool>,
    /// Port range such as `"1024-65535"`.
    pub ports: Option<Spanned<String>>,
}

/// One `[[nat44.static]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStatic {
    /// Inside address.
    pub inside: Spanned<String>,
    /// Public address.
    pub public: Spanned<String>,
}

/// One `[[nat44.forward]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawForward {
    /// `"tcp"`, `"udp"` or `"sctp"`.
    pub protocol: Spanned<String>,
    /// Public `address:port`.
    pub public: Spanned<String>,
    /// Inside `address:port`.
    pub inside: Spanned<String>,
}

/// A pool written as one string or as a list of strings (each with its own span).
#[derive(Debug)]
pub(super) enum Pool {
    /// `pool = "203.0.113.0/28"`: the outer span locates it.
    One(String),
    /// `pool = ["203.0.113.0/28", "198.51.100.7"]`.
    Many(Vec<Spanned<String>>),
}

impl<'de> Deserialize<'de> for Pool {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct PoolVisitor;
        impl<'de> Visitor<'de> for PoolVisitor {
            type Value = Pool;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a prefix string or a list of prefix strings")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Pool, E> {
                Ok(Pool::One(v.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Pool, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<Spanned<String>>()? {
                    items.push(item);
                }
                Ok(Pool::Many(items))
            }
        }
        d.deserialize_any(PoolVisitor)
    }
}
