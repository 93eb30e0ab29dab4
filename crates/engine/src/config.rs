//! What every mode's configuration is made of, and how a configuration error says where
//! it is: the NAT vocabulary several modes share (port ranges, transport protocols,
//! filtering, session timeouts), [`ConfigError`] and [`ConfigWarning`] with the
//! [`ConfigItem`] they are about. Each mode's own configuration lives next to the mode
//! (`nat44::config`, `nat64::config`, `siit::config`, `ila::config`); prefix types are
//! `xlat::prefix`'s.
//!
//! The TOML layer (in the `quicknat` binary) parses text into these types and maps a
//! [`ConfigItem`] back to the file, line and field it came from. This module never reads
//! files.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

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
    pub fn new(first: u16, last: u16) -> Result<Self, PortRangeError> {
        if first == 0 {
            return Err(PortRangeError::PortZero);
        }
        if first > last {
            return Err(PortRangeError::Empty { first, last });
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
    type Err = PortRangeError;
    /// Parses `first-last` or a single port.
    fn from_str(s: &str) -> Result<Self, PortRangeError> {
        let p = |x: &str| {
            x.trim()
                .parse::<u16>()
                .map_err(|_| PortRangeError::BadPort(x.to_owned()))
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

/// Why a port range was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PortRangeError {
    /// Port 0 is never handed out.
    #[error("port 0 cannot be handed out; start the range at 1 or above")]
    PortZero,
    /// The first port is after the last.
    #[error("range {first}-{last} is empty (first > last)")]
    Empty {
        /// First port given.
        first: u16,
        /// Last port given.
        last: u16,
    },
    /// Not a port number (the text refused).
    #[error("\"{0}\" is not a port number (1-65535)")]
    BadPort(String),
}

/// Transport protocols a port forward (or a static NAT64 binding) can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum L4Proto {
    /// TCP (6).
    Tcp,
    /// UDP (17).
    Udp,
    /// SCTP (132).
    Sctp,
}

impl L4Proto {
    /// Every one, in the order the configuration reference lists them.
    pub const ALL: [L4Proto; 3] = [L4Proto::Tcp, L4Proto::Udp, L4Proto::Sctp];

    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            L4Proto::Tcp => 6,
            L4Proto::Udp => 17,
            L4Proto::Sctp => 132,
        }
    }

    /// The tracked protocol (port space) its sessions belong to.
    pub fn proto(self) -> conntrack::Proto {
        match self {
            L4Proto::Tcp => conntrack::Proto::Tcp,
            L4Proto::Udp => conntrack::Proto::Udp,
            L4Proto::Sctp => conntrack::Proto::Sctp,
        }
    }

    /// Its name in the configuration: `tcp`, `udp` or `sctp`.
    pub fn name(self) -> &'static str {
        self.proto().as_str()
    }

    /// The protocol a configuration names.
    pub fn from_name(s: &str) -> Option<L4Proto> {
        L4Proto::ALL.into_iter().find(|p| p.name() == s)
    }
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
    /// TCP transitory (FIN seen from both sides, TIME_WAIT) timeout (RFC 5382: 4 min).
    pub tcp_transitory: Duration,
    /// TCP after an in-window RST (RFC 7857 §2.2: "the NAT SHOULD wait for 4 minutes
    /// before deleting the session").
    pub tcp_closed: Duration,
    /// TCP with only a SYN seen (or picked up mid-stream, one side only): Linux
    /// conntrack's SYN_SENT, 120 s; at most the 4 min transitory timeout.
    pub tcp_syn_sent: Duration,
    /// TCP with the SYN-ACK seen but not the ACK completing the handshake (what a
    /// spoofed SYN at a port forward leaves): conntrack's SYN_RECV, 60 s.
    pub tcp_syn_recv: Duration,
    /// ICMP query (echo) timeout (RFC 5508: at least 60 s).
    pub icmp: Duration,
    /// SCTP association idle timeout: Linux conntrack's ESTABLISHED, 210 s (seven of
    /// an idle association's heartbeats, sent every 30 s by default, RFC 9260 §8.3).
    pub sctp: Duration,
    /// Every other protocol, translated by address only (GRE, ESP, ...): Linux
    /// conntrack's generic timeout, 600 s.
    pub other: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            udp: Duration::from_secs(300),
            tcp_established: Duration::from_secs(7440),
            tcp_transitory: Duration::from_secs(240),
            tcp_closed: Duration::from_secs(240),
            tcp_syn_sent: Duration::from_secs(120),
            tcp_syn_recv: Duration::from_secs(60),
            icmp: Duration::from_secs(60),
            sctp: Duration::from_secs(210),
            other: Duration::from_secs(600),
        }
    }
}

/// How many ICMP errors about refused packets a worker sends (RFC 1812 §4.3.2.8, RFC 4443
/// §2.4 (f)): at most `global` a second in all, and at most `per_source` a second to any
/// one sender (a keyed hash of its address picks its bucket in a small fixed table, so a
/// flood from one host never uses up everyone's budget). Packet Too Big / Fragmentation
/// Needed draw on buckets of their own of the same sizes, so Time Exceeded floods never
/// starve path-MTU discovery. A rate of 0 sends none of that kind. Bursts as large as the
/// rate are allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcmpRate {
    /// Errors per second at most, over all senders.
    pub global: u32,
    /// Errors per second at most to one sender.
    pub per_source: u32,
}

impl IcmpRate {
    /// The largest rate accepted for either figure.
    pub const MAX: u32 = 1_000_000;
    /// No errors at all.
    pub const OFF: IcmpRate = IcmpRate {
        global: 0,
        per_source: 0,
    };
}

impl Default for IcmpRate {
    /// 200 a second per worker in all, 20 a second to one sender.
    fn default() -> Self {
        IcmpRate {
            global: 200,
            per_source: 20,
        }
    }
}

/// One table of a configuration and the most memory it can hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPart {
    /// What it is (`sessions`, `bindings`, ...).
    pub what: &'static str,
    /// The setting that sizes it.
    pub item: ConfigItem,
    /// Bytes when full.
    pub bytes: u64,
}

/// What the tables a configuration sets up can grow to when full: the figure to hold
/// against the machine's memory before anything is allocated ([`check_memory`]).
/// Per-worker buffers (tens of KiB each) are left out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryEstimate {
    /// The tables, in the order added.
    pub parts: Vec<MemoryPart>,
}

impl MemoryEstimate {
    /// Adds `bytes` of `what`, sized by `item`.
    pub fn add(&mut self, what: &'static str, item: ConfigItem, bytes: usize) {
        self.parts.push(MemoryPart {
            what,
            item,
            bytes: bytes as u64,
        });
    }

    /// Bytes in all (saturating).
    pub fn total(&self) -> u64 {
        self.parts
            .iter()
            .fold(0u64, |a, p| a.saturating_add(p.bytes))
    }

    /// The largest part: the setting to lower first.
    pub fn largest(&self) -> Option<&MemoryPart> {
        self.parts.iter().max_by_key(|p| p.bytes)
    }

    /// The parts with each item renamed by `f` (a mode built on another's tables names
    /// them as its own section does).
    pub fn map_items(mut self, f: impl Fn(ConfigItem) -> ConfigItem) -> Self {
        for p in &mut self.parts {
            p.item = f(p.item);
        }
        self
    }
}

/// `bytes` for people: `512 B`, `3.2 MiB`, `24.0 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

impl fmt::Display for MemoryEstimate {
    /// `1.2 GiB (sessions 1.0 GiB, bindings 192.0 MiB, ...)`, parts of 1 MiB or more.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", human_bytes(self.total()))?;
        let mut parts: Vec<&MemoryPart> =
            self.parts.iter().filter(|p| p.bytes >= 1 << 20).collect();
        parts.sort_by_key(|p| std::cmp::Reverse(p.bytes));
        if !parts.is_empty() {
            let list: Vec<String> = parts
                .iter()
                .map(|p| format!("{} {}", p.what, human_bytes(p.bytes)))
                .collect();
            write!(f, " ({})", list.join(", "))?;
        }
        Ok(())
    }
}

/// Holds `estimate` against `available` bytes (the machine's MemAvailable, read by the
/// caller): an error about the largest part when the tables could not fit, a warning
/// when they would take more than half of it. A pure function: the caller reads the
/// machine.
pub fn check_memory(
    estimate: &MemoryEstimate,
    available: u64,
) -> Result<Option<ConfigWarning>, ConfigError> {
    let total = estimate.total();
    let Some(largest) = estimate.largest() else {
        return Ok(None);
    };
    if total > available {
        return Err(ConfigError::new(
            largest.item,
            format!(
                "the tables this configuration sets up can grow to {estimate}, more than \
                 the {} of memory available: lower {} ({} takes the most)",
                human_bytes(available),
                largest.item,
                largest.what
            ),
        ));
    }
    if total > available / 2 {
        return Ok(Some(ConfigWarning {
            item: largest.item,
            message: format!(
                "makes the tables grow to {estimate} when full, more than half the {} of \
                 memory available",
                human_bytes(available)
            ),
        }));
    }
    Ok(None)
}

/// Which part of a mode's configuration a [`ConfigError`] or [`ConfigWarning`] is about,
/// named as the configuration file names it, so the file layer can point at the line.
/// Indexes count from 0 in the order the entries were given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigItem {
    /// Field `.2` of entry `.1` of the list `.0` (`rule`, `static`, `forward`, `eam`,
    /// `mapping`); an empty field names the whole entry.
    Entry(&'static str, usize, &'static str),
    /// Field `.1` of the sub-table `.0` (`timeouts`).
    Table(&'static str, &'static str),
    /// A field of the mode's own table; an empty field names the table itself.
    Field(&'static str),
}

impl fmt::Display for ConfigItem {
    /// The field path inside the mode's table, entries counted from 1: `rule[2].pool`,
    /// `timeouts.udp`, `max_sessions`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ConfigItem::Entry(list, i, "") => write!(f, "{list}[{}]", i + 1),
            ConfigItem::Entry(list, i, field) => write!(f, "{list}[{}].{field}", i + 1),
            ConfigItem::Table(t, field) => write!(f, "{t}.{field}"),
            ConfigItem::Field(field) => f.write_str(field),
        }
    }
}

/// A semantic configuration error: what is wrong and with which item. One type for every
/// mode, so every error can name its file, line and field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{item}: {message}")]
pub struct ConfigError {
    /// The item (and field) at fault.
    pub item: ConfigItem,
    /// Why it is wrong, in words an operator understands.
    pub message: String,
}

impl ConfigError {
    /// An error about `item`.
    pub fn new(item: ConfigItem, message: impl Into<String>) -> Self {
        ConfigError {
            item,
            message: message.into(),
        }
    }
}

/// Something allowed but unwise (a timeout below its RFC minimum), and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigWarning {
    /// The item concerned.
    pub item: ConfigItem,
    /// What is unwise about it.
    pub message: String,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.item, self.message)
    }
}

/// What a reload does with the sessions on a public address it removed (the address left
/// every pool, static mapping and port forward). Either way the address is never handed
/// out again and the ports its bindings free return nowhere.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReloadDrain {
    /// Kept until they expire by their timeouts (traffic on them keeps flowing); no new
    /// session is made on the address. Conntrack's and Jool's behaviour.
    #[default]
    Expire,
    /// Ended by the reaper's next pass (within a second): the address is gone at once.
    Immediate,
}
