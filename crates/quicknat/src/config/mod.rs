//! The quicknat configuration file: TOML text in, a validated mode configuration
//! ([`engine::any::ModeConfig`]) and the `[gateway]` settings out.
//!
//! Every error names the file, the 1-based line and the field path (for example
//! `gw.toml:14: nat44.rule[2].pool: ...`) so an operator can fix it without guessing.
//! Unknown keys are errors: a typo must never be silently ignored. This module only
//! reads text; it never touches packets or the network, and never panics on bad input.

pub mod ila;
mod limits;
// -- port-block allocation --
mod blocks;
mod cpus;
pub use cpus::CpuMask;
pub mod effective;
mod fastpath;
mod locate;
mod logcfg;
mod metrics;
mod modes;
mod natlog;
mod raw;
pub mod reference;
mod reload;
// -- routing integration --
mod routing;
#[cfg(test)]
mod tests;
// -- deterministic NAT --
mod deterministic;

use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use engine::config::{
    ConfigError, ConfigItem, ConfigWarning, Filtering, L4Proto, PortRange, Timeouts,
};
use engine::nat44::{DynamicRule, Nat44Config, PortForward, StaticNat};
use toml::Spanned;

use raw::{Pool, RawFile, RawNat44};

/// The example configuration shipped in the repository, used when no `--config` is given.
pub const DEFAULT_CONFIG: &str = include_str!("../../../../examples/nat44.toml");

/// How [`DEFAULT_CONFIG`] is named in messages.
pub const DEFAULT_CONFIG_ORIGIN: &str = "examples/nat44.toml (built in)";

/// A loaded and validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// What the gateway does: NAT44 (the `[nat44]` table, the default), or the section
    /// of another translation mode.
    pub mode: engine::any::ModeConfig,
    /// The live gateway's interfaces and threads (`[gateway]`), if the file has them.
    pub gateway: Option<runtime::live::GatewayConfig>,
    /// Things that are allowed but unwise (timeouts below RFC minimums), each with its location.
    pub warnings: Vec<String>,
    /// The most memory the mode's tables hold when full.
    pub memory: engine::config::MemoryEstimate,
    /// `[gateway] log_level` and `log_format` (defaults without them).
    pub logging: crate::logging::LogSettings,
    /// NAT event logging (`[logging]`); off by default.
    pub natlog: runtime::natlog::NatLogConfig,
    // -- routing integration --
    /// `[routing]`: prefixes announced while healthy; off by default.
    pub routing: runtime::routing::RoutingConfig,
}

// -- the machine a configuration must fit --

/// What a configuration is held against besides its own rules: the machine it is to run
/// on, read by the caller (the binary's edge) and passed in, so loading stays a pure
/// function of its inputs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Machine {
    /// Bytes of memory available (`/proc/meminfo` MemAvailable); `None`: not checked.
    pub mem_available: Option<u64>,
    /// The CPUs the process may run on; `None`: not checked.
    pub cpus: Option<cpus::CpuMask>,
}

impl Machine {
    /// The machine as `/proc/meminfo`'s text describes it (MemAvailable, in kB).
    pub fn from_meminfo(text: &str) -> Machine {
        let mem_available = text.lines().find_map(|l| {
            let rest = l.strip_prefix("MemAvailable:")?.trim();
            let kb = rest.strip_suffix("kB").unwrap_or(rest).trim();
            kb.parse::<u64>().ok().map(|kb| kb.saturating_mul(1024))
        });
        Machine {
            mem_available,
            cpus: None,
        }
    }
}

impl Config {
    /// The NAT44 settings, when NAT44 is the mode.
    #[cfg(test)]
    pub fn nat44(&self) -> Option<&Nat44Config> {
        match &self.mode {
            engine::any::ModeConfig::Nat44(n) => Some(n),
            _ => None,
        }
    }

    /// The ILA router and its mappings (`[ila]`), if the file has them.
    pub fn ila(&self) -> Option<&engine::ila::IlaSettings> {
        match &self.mode {
            engine::any::ModeConfig::Ila(s) => Some(s),
            _ => None,
        }
    }
}

/// Why a configuration file was rejected, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigFileError {
    /// The file name (or other origin) as shown to the operator.
    pub origin: String,
    /// The 1-based line at fault, when known.
    pub line: Option<usize>,
    /// The field path at fault (`nat44.rule[2].pool`), when known.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.origin)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigFileError {}

/// Reads, parses and validates the configuration file at `path`.
pub fn load_file(path: &Path) -> Result<Config, ConfigFileError> {
    load_file_on(path, &Machine::default())
}

/// [`load_file`], also refusing a configuration whose tables cannot fit `machine`.
pub fn load_file_on(path: &Path, machine: &Machine) -> Result<Config, ConfigFileError> {
    let origin = path.display().to_string();
    let bytes = read_file(path)?;
    let text = std::str::from_utf8(&bytes).map_err(|e| ConfigFileError {
        origin: origin.clone(),
        line: None,
        field: None,
        message: format!("cannot read the configuration file: not UTF-8 ({e})"),
    })?;
    load_str_on(text, &origin, machine)
}

/// The largest configuration file quicknat reads (start, `check-config`, reload): 128 MiB,
/// room for about 1.8 million ILA mappings or EAM entries at ~70 bytes each. Parsing
/// takes several times a file's size in memory, so a larger one is refused before it is
/// read rather than taking the gateway's memory with it.
pub const MAX_FILE_BYTES: u64 = 128 << 20;

/// The bytes of the configuration file at `path`, refused (naming the file and its size)
/// when larger than [`MAX_FILE_BYTES`]; never reads more than that, even from a file that
/// grows or a device with no size.
pub fn read_file(path: &Path) -> Result<Vec<u8>, ConfigFileError> {
    use std::io::Read;
    let refuse = |message: String| ConfigFileError {
        origin: path.display().to_string(),
        line: None,
        field: None,
        message,
    };
    let file = std::fs::File::open(path)
        .map_err(|e| refuse(format!("cannot read the configuration file: {e}")))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| refuse(format!("cannot read the configuration file: {e}")))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(refuse(format!(
            "the configuration file is larger than {} MiB, the most quicknat reads",
            MAX_FILE_BYTES >> 20
        )));
    }
    Ok(bytes)
}

/// Parses and validates configuration `text`; `origin` is shown as the file name in errors.
/// (Tests: the binary always holds a configuration against its machine.)
#[cfg(test)]
pub fn load_str(text: &str, origin: &str) -> Result<Config, ConfigFileError> {
    load_str_on(text, origin, &Machine::default())
}

/// [`load_str`], also refusing a configuration whose tables cannot fit `machine`
/// (and warning when they would take more than half its memory).
pub fn load_str_on(text: &str, origin: &str, machine: &Machine) -> Result<Config, ConfigFileError> {
    let src = Source { text, origin };
    let file: RawFile = toml::from_str(text).map_err(|e| src.toml_error(&e))?;
    let gateway = file
        .gateway
        .as_ref()
        .map(|g| convert_gateway(&src, g.get_ref()))
        .transpose()?;
    let ila = file
        .ila
        .as_ref()
        .map(|i| ila::convert(&src, i))
        .transpose()?;
    let mode = convert_mode(&src, &file, ila.as_ref())?;
    let logging = logcfg::convert(&src, file.gateway.as_ref().map(Spanned::get_ref))?;
    let raw = file.nat44.unwrap_or_default();
    let nat44 = convert(&src, &raw)?;
    // Another mode's section stands alone (and `convert_mode` refused it next to [nat44]).
    let (mode, mut warnings) = match mode {
        Some(m) => m,
        None => {
            let warnings = nat44
                .validate()
                .map_err(|e| src.item_error("nat44", e))?
                .into_iter()
                .map(|w| src.warning("nat44", w))
                .collect();
            (engine::any::ModeConfig::Nat44(nat44), warnings)
        }
    };
    if let (Some(raw), Some(gw)) = (&file.gateway, &gateway) {
        cpus::check(&src, raw.get_ref(), gw, machine.cpus, &mut warnings)?;
    }
    let memory = mode.memory();
    if let Some(available) = machine.mem_available {
        let section = mode_section(&mode);
        match engine::config::check_memory(&memory, available) {
            Err(e) => return Err(src.item_error(section, e)),
            Ok(Some(w)) => warnings.push(src.warning(section, w)),
            Ok(None) => {}
        }
    }
    // NAT event logging: `[logging]`, carried by the gateway too.
    let natlog = file
        .logging
        .as_ref()
        .map(|l| natlog::convert(&src, l.get_ref()))
        .transpose()?
        .unwrap_or_default();
    // -- routing integration --
    let routing = file
        .routing
        .as_ref()
        .map(|r| routing::convert(&src, r.get_ref()))
        .transpose()?
        .unwrap_or_default();
    let mut gateway = gateway;
    if let Some(g) = &mut gateway {
        g.natlog = natlog.clone();
        g.routing = routing.clone();
    }
    Ok(Config {
        mode,
        gateway,
        warnings,
        memory,
        logging,
        natlog,
        routing,
    })
}

/// The table a mode's settings are written in.
fn mode_section(mode: &engine::any::ModeConfig) -> &'static str {
    use engine::any::ModeConfig;
    match mode {
        ModeConfig::Nat44(_) => "nat44",
        ModeConfig::Siit(_) => "siit",
        ModeConfig::Clat(_) => "clat",
        ModeConfig::Nat64(_) => "nat64",
        ModeConfig::Ila(_) => "ila",
    }
}

/// The translation mode named by a non-NAT44 section, if any, with its warnings; one mode
/// per file.
fn convert_mode(
    src: &Source<'_>,
    file: &RawFile,
    ila: Option<&engine::ila::IlaSettings>,
) -> Result<Option<(engine::any::ModeConfig, Vec<String>)>, ConfigFileError> {
    use engine::any::ModeConfig;
    let mut found: Vec<(&str, std::ops::Range<usize>)> = Vec::new();
    // First when present, so never the one reported: its span is not needed (nor known).
    if file.nat44.is_some() {
        found.push(("nat44", 0..0));
    }
    let mut mode = None;
    if let Some(s) = &file.siit {
        found.push(("siit", s.span()));
        mode = Some((ModeConfig::Siit(modes::convert_siit(src, s)?), Vec::new()));
    }
    if let Some(c) = &file.clat {
        found.push(("clat", c.span()));
        mode = Some((ModeConfig::Clat(modes::convert_clat(src, c)?), Vec::new()));
    }
    if let Some(n) = &file.nat64 {
        found.push(("nat64", n.span()));
        let (c, warnings) = modes::convert_nat64(src, n)?;
        mode = Some((ModeConfig::Nat64(c), warnings));
    }
    if let (Some(i), Some(settings)) = (&file.ila, ila) {
        found.push(("ila", i.span()));
        mode = Some((ModeConfig::Ila(settings.clone()), Vec::new()));
    }
    if found.len() > 1 {
        let names: Vec<String> = found.iter().map(|(n, _)| format!("[{n}]")).collect();
        let (name, span) = found[1].clone();
        return Err(src.error(
            Some(span),
            name,
            format!(
                "one translation mode per configuration file, found {} (run one quicknat per interface pair)",
                names.join(" and ")
            ),
        ));
    }
    Ok(mode)
}

/// The `[gateway]` table into runtime values.
fn convert_gateway(
    src: &Source<'_>,
    g: &raw::RawGateway,
) -> Result<runtime::live::GatewayConfig, ConfigFileError> {
    use runtime::live::{Backend, GatewayConfig, PlacementSwitch};
    let name = |v: &Spanned<String>, field: &str| {
        let n = v.get_ref();
        if n.is_empty() || n.len() > 15 || n.contains(['/', ' ']) {
            Err(src.bad_value(
                v,
                format!("gateway.{field}"),
                "not a Linux interface name (1-15 characters, no '/' or space)".into(),
            ))
        } else {
            Ok(n.clone())
        }
    };
    let inside = name(&g.inside, "inside")?;
    let outside = name(&g.outside, "outside")?;
    if inside == outside {
        return Err(src.bad_value(
            &g.outside,
            "gateway.outside".into(),
            "the outside interface must differ from the inside one".into(),
        ));
    }
    let backend = src.choice(
        &g.backend,
        "gateway.backend",
        &[("af_packet", Backend::AfPacket), ("af_xdp", Backend::AfXdp)],
    )?;
    let placement = src.choice(
        &g.placement,
        "gateway.placement",
        &[
            ("flows", PlacementSwitch::Flows),
            ("hash", PlacementSwitch::Hash),
        ],
    )?;
    let rx_hash_ports = src.choice(
        &g.rx_hash,
        "gateway.rx_hash",
        &[("ports", true), ("leave", false)],
    )?;
    let workers = match &g.workers {
        Some(w) if !(1..=64).contains(w.get_ref()) => {
            return Err(src.error(
                Some(w.span()),
                "gateway.workers",
                format!("{} workers: must be between 1 and 64", w.get_ref()),
            ))
        }
        Some(w) => *w.get_ref() as usize,
        None => 1,
    };
    let stats_interval = match &g.stats_interval {
        Some(s) if *s.get_ref() == 0 || *s.get_ref() > 86_400 => {
            return Err(src.error(
                Some(s.span()),
                "gateway.stats_interval",
                "must be between 1 and 86400 seconds",
            ))
        }
        Some(s) => std::time::Duration::from_secs(*s.get_ref()),
        None => std::time::Duration::from_secs(10),
    };
    // A group name or number: no ':' (the /etc/group separator), no space, not empty.
    let control_group = match &g.control_group {
        Some(v) if v.get_ref().is_empty() || v.get_ref().contains([':', ' ', '\n']) => {
            return Err(src.bad_value(
                v,
                "gateway.control_group".into(),
                "not a group name or number".into(),
            ))
        }
        Some(v) => Some(v.get_ref().clone()),
        None => None,
    };
    Ok(GatewayConfig {
        inside,
        outside,
        control_group,
        backend,
        workers,
        placement,
        rx_hash_ports,
        busy_poll: g.busy_poll.unwrap_or(false),
        kernel_bypass: g.kernel_bypass.unwrap_or(true),
        offloads_off: g.offloads_off.unwrap_or(true),
        control_socket: g.control_socket.as_ref().map(|p| p.into()),
        gso: g.gso.unwrap_or(true),
        stats_interval,
        addresses: [
            addresses(src, &g.inside_addresses, "gateway.inside_addresses")?,
            addresses(src, &g.outside_addresses, "gateway.outside_addresses")?,
        ],
        mtu: [
            link_mtu(src, &g.inside_mtu, "gateway.inside_mtu")?,
            link_mtu(src, &g.outside_mtu, "gateway.outside_mtu")?,
        ],
        // -- metrics --
        metrics: metrics::listen_addr(src, &g.metrics)?,
        // Set from `[logging]` by `load_str_on`.
        natlog: runtime::natlog::NatLogConfig::default(),
        // -- XDP fast path --
        xdp_fast_path: fastpath::switch(src, &g.xdp_fast_path)?,
        xdp_fast_path_entries: fastpath::entries(src, &g.xdp_fast_path_entries)?,
        xdp_fast_path_idle: fastpath::idle(src, &g.xdp_fast_path_idle)?,
        // Set from `[routing]` by `load_str_on`.
        routing: runtime::routing::RoutingConfig::default(),
        // -- CPUs --
        cpus: cpus::list(src, &g.cpus)?,
        reaper_cpu: g.reaper_cpu.as_ref().map(|c| *c.get_ref() as usize),
    })
}

/// A `[gateway]` address list: IPv4 and IPv6 addresses, at most one of each family
/// (the first of a family is the source of the gateway's ICMP errors on that link).
fn addresses(
    src: &Source<'_>,
    list: &Option<Vec<Spanned<String>>>,
    field: &str,
) -> Result<Vec<std::net::IpAddr>, ConfigFileError> {
    let mut out: Vec<std::net::IpAddr> = Vec::new();
    for (i, v) in list.iter().flatten().enumerate() {
        let a: std::net::IpAddr = v.get_ref().parse().map_err(|_| {
            src.bad_value(
                v,
                format!("{field}[{}]", i + 1),
                "not an IPv4 or IPv6 address".into(),
            )
        })?;
        if a.is_unspecified() || a.is_multicast() {
            return Err(src.bad_value(
                v,
                format!("{field}[{}]", i + 1),
                "must be a unicast address of the gateway".into(),
            ));
        }
        if out.iter().any(|b| b.is_ipv4() == a.is_ipv4()) {
            return Err(src.bad_value(
                v,
                format!("{field}[{}]", i + 1),
                "one address per family: ICMP errors come from one source".into(),
            ));
        }
        out.push(a);
    }
    Ok(out)
}

/// A `[gateway]` link MTU: 68 (the IPv4 minimum) to 65535.
fn link_mtu(
    src: &Source<'_>,
    v: &Option<Spanned<u64>>,
    field: &str,
) -> Result<Option<u32>, ConfigFileError> {
    match v {
        Some(m) if !(68..=65_535).contains(m.get_ref()) => Err(src.error(
            Some(m.span()),
            field,
            format!("{}: an MTU must be between 68 and 65535", m.get_ref()),
        )),
        Some(m) => Ok(Some(*m.get_ref() as u32)),
        None => Ok(None),
    }
}

/// The text being loaded and its name, for building errors.
struct Source<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Source<'_> {
    /// An error at `span` (if known) about `field`.
    fn error(
        &self,
        span: Option<Range<usize>>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigFileError {
        ConfigFileError {
            origin: self.origin.to_owned(),
            line: span.map(|s| locate::line_of(self.text, s.start)),
            field: Some(field.into()),
            message: message.into(),
        }
    }

    /// A syntax or type error reported by the TOML parser.
    fn toml_error(&self, e: &toml::de::Error) -> ConfigFileError {
        let offset = e.span().map(|s| s.start);
        ConfigFileError {
            origin: self.origin.to_owned(),
            line: offset.map(|o| locate::line_of(self.text, o)),
            field: offset.and_then(|o| locate::path_at(self.text, o)),
            // toml's messages may span lines ("invalid table header\nexpected `.`"); keep one.
            message: Some(
                e.message()
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .collect::<Vec<_>>()
                    .join(": "),
            )
            .filter(|m| !m.is_empty())
            // toml says nothing about some characters (a control character in a
            // comment): name the one at fault.
            .unwrap_or_else(|| {
                match offset.and_then(|o| self.text.get(o..)?.chars().next()) {
                    Some(c) => format!(
                        "character {c:?} (U+{:04X}) is not allowed here",
                        u32::from(c)
                    ),
                    None => "not valid TOML".to_owned(),
                }
            }),
        }
    }

    /// A value that does not parse: `"value": why`.
    /// One of a string setting's `choices` (`(value, meaning)`, the first the default when
    /// the setting is absent), or an error naming the field and every value it takes.
    fn choice<T: Copy>(
        &self,
        v: &Option<Spanned<String>>,
        field: &str,
        choices: &[(&str, T)],
    ) -> Result<T, ConfigFileError> {
        let Some(v) = v else {
            return Ok(choices[0].1);
        };
        if let Some((_, t)) = choices.iter().find(|(name, _)| name == v.get_ref()) {
            return Ok(*t);
        }
        let names: Vec<String> = choices.iter().map(|(n, _)| format!("\"{n}\"")).collect();
        let expected = match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => names.join(""),
        };
        Err(self.bad_value(v, field.into(), format!("expected {expected}")))
    }

    fn bad_value(&self, v: &Spanned<String>, field: String, why: String) -> ConfigFileError {
        self.error(Some(v.span()), field, format!("\"{}\": {why}", v.get_ref()))
    }

    /// An engine error about `e.item` of the `[section]` table, at the line of the field
    /// (or of the deepest entry or table holding it, when the field was not written).
    fn item_error(&self, section: &str, e: ConfigError) -> ConfigFileError {
        let (path, span) = self.locate_item(section, e.item);
        self.error(span, path, e.message)
    }

    /// A warning about `field`, written at `span`, as `file:line: field message`.
    fn warning_at(&self, span: Range<usize>, field: &str, message: String) -> String {
        let line = locate::line_of(self.text, span.start);
        format!("{}:{line}: {field} {message}", self.origin)
    }

    /// An engine warning about `w.item` of `[section]`, as `file:line: path message`.
    fn warning(&self, section: &str, w: ConfigWarning) -> String {
        let (path, span) = self.locate_item(section, w.item);
        match span {
            Some(s) => format!(
                "{}:{}: {path} {}",
                self.origin,
                locate::line_of(self.text, s.start),
                w.message
            ),
            None => format!("{}: {path} {}", self.origin, w.message),
        }
    }

    /// The field path (`nat44.rule[2].pool`) of `item` in `[section]`, and its span.
    fn locate_item(&self, section: &str, item: ConfigItem) -> (String, Option<Range<usize>>) {
        use locate::Seg::{Index, Key};
        let path: Vec<locate::Seg<'_>> = match item {
            ConfigItem::Entry(list, i, field) => {
                vec![Key(section), Key(list), Index(i), Key(field)]
            }
            ConfigItem::Table(t, field) => vec![Key(section), Key(t), Key(field)],
            ConfigItem::Field(field) => vec![Key(section), Key(field)],
        };
        let name = match item {
            ConfigItem::Field("") => section.to_owned(),
            other => format!("{section}.{other}"),
        };
        (name, locate::span_of(self.text, &path))
    }
}

/// `fragment_timeout` (1-60 s) and `max_fragment_records` (1-2^24) of `section`, checked.
fn fragment_limits(
    src: &Source<'_>,
    timeout: &Option<Spanned<u64>>,
    records: &Option<Spanned<u64>>,
    section: &str,
) -> Result<(Option<Duration>, Option<usize>), ConfigFileError> {
    let t = match timeout {
        Some(t) if !(1..=60).contains(t.get_ref()) => {
            return Err(src.error(
                Some(t.span()),
                format!("{section}.fragment_timeout"),
                format!("{} s: must be between 1 and 60 seconds", t.get_ref()),
            ))
        }
        Some(t) => Some(Duration::from_secs(*t.get_ref())),
        None => None,
    };
    let m = match records {
        Some(m) if !(1..=1 << 24).contains(m.get_ref()) => {
            return Err(src.error(
                Some(m.span()),
                format!("{section}.max_fragment_records"),
                format!("{}: must be between 1 and 16777216", m.get_ref()),
            ))
        }
        Some(m) => Some(*m.get_ref() as usize),
        None => None,
    };
    Ok((t, m))
}

// -- ICMP error budget --

/// `icmp_error_rate` and `icmp_error_rate_per_source` of `section` (each 0 to
/// [`engine::config::IcmpRate::MAX`] a second), the defaults where not written.
fn icmp_rate(
    src: &Source<'_>,
    global: &Option<Spanned<u64>>,
    per_source: &Option<Spanned<u64>>,
    section: &str,
) -> Result<engine::config::IcmpRate, ConfigFileError> {
    use engine::config::IcmpRate;
    let mut rate = IcmpRate::default();
    for (v, name, to) in [
        (global, "icmp_error_rate", &mut rate.global),
        (
            per_source,
            "icmp_error_rate_per_source",
            &mut rate.per_source,
        ),
    ] {
        if let Some(v) = v {
            *to = u32::try_from(*v.get_ref())
                .ok()
                .filter(|r| *r <= IcmpRate::MAX)
                .ok_or_else(|| {
                    src.error(
                        Some(v.span()),
                        format!("{section}.{name}"),
                        format!(
                            "{}: must be between 0 (none) and {} errors a second",
                            v.get_ref(),
                            IcmpRate::MAX
                        ),
                    )
                })?;
        }
    }
    Ok(rate)
}

/// `max_simultaneous_opens` as written (saturated: the engine refuses what is too large,
/// naming the field), else `default`.
fn count_or(v: &Option<Spanned<u64>>, default: usize) -> usize {
    v.as_ref().map_or(default, |m| {
        usize::try_from(*m.get_ref()).unwrap_or(usize::MAX)
    })
}

/// The timeouts written in `t`, the others from `defaults`.
fn timeouts(t: &raw::RawTimeouts, defaults: Timeouts) -> Timeouts {
    let secs = |v: &Option<Spanned<u64>>, default: Duration| {
        v.as_ref()
            .map_or(default, |s| Duration::from_secs(*s.get_ref()))
    };
    Timeouts {
        udp: secs(&t.udp, defaults.udp),
        tcp_established: secs(&t.tcp_established, defaults.tcp_established),
        tcp_transitory: secs(&t.tcp_transitory, defaults.tcp_transitory),
        tcp_closed: secs(&t.tcp_closed, defaults.tcp_closed),
        tcp_syn_sent: secs(&t.tcp_syn_sent, defaults.tcp_syn_sent),
        tcp_syn_recv: secs(&t.tcp_syn_recv, defaults.tcp_syn_recv),
        icmp: secs(&t.icmp, defaults.icmp),
        sctp: secs(&t.sctp, defaults.sctp),
        other: secs(&t.other, defaults.other),
    }
}

/// The IPv4 prefixes of a pool written as one string or a list, each error at its entry.
fn pool_prefixes(
    src: &Source<'_>,
    pool: &Spanned<Pool>,
    field: &str,
) -> Result<Vec<xlat::prefix::Ipv4Prefix>, ConfigFileError> {
    let entries: Vec<(&str, Range<usize>)> = match pool.get_ref() {
        Pool::One(s) => vec![(s.as_str(), pool.span())],
        Pool::Many(v) => v.iter().map(|s| (s.get_ref().as_str(), s.span())).collect(),
    };
    let mut out = Vec::with_capacity(entries.len());
    for (s, span) in entries {
        let p = s
            .parse()
            .map_err(|why| src.error(Some(span), field, format!("\"{s}\": {why}")))?;
        out.push(p);
    }
    Ok(out)
}

/// Turns the raw strings and integers into engine values, naming the field of any bad one.
fn convert(src: &Source<'_>, raw: &RawNat44) -> Result<Nat44Config, ConfigFileError> {
    let mut c = Nat44Config::default();
    if let Some(f) = &raw.filtering {
        c.filtering = match f.get_ref().as_str() {
            "endpoint-independent" => Filtering::EndpointIndependent,
            "address-dependent" => Filtering::AddressDependent,
            "address-and-port-dependent" => Filtering::AddressAndPortDependent,
            _ => {
                return Err(src.bad_value(
                    f,
                    "nat44.filtering".into(),
                    "must be \"endpoint-independent\", \"address-dependent\" or \
                     \"address-and-port-dependent\""
                        .into(),
                ))
            }
        };
    }
    c.hairpinning = raw.hairpinning.unwrap_or(c.hairpinning);
    c.port_preservation = raw.port_preservation.unwrap_or(c.port_preservation);
    c.decrement_ttl = raw.decrement_ttl.unwrap_or(c.decrement_ttl);
    let (t, m) = fragment_limits(
        src,
        &raw.fragment_timeout,
        &raw.max_fragment_records,
        "nat44",
    )?;
    c.fragment_timeout = t.unwrap_or(c.fragment_timeout);
    c.max_fragment_records = m.unwrap_or(c.max_fragment_records);
    // Unsolicited inbound SYNs (RFC 5382 REQ-4).
    // Its bound is the engine's (`Nat44Config::validate`), located like any engine error.
    c.max_simultaneous_opens = count_or(&raw.max_simultaneous_opens, c.max_simultaneous_opens);
    c.fragment_hold_bytes = count_or(&raw.fragment_hold_bytes, c.fragment_hold_bytes);
    c.drop_externally_initiated_tcp = raw
        .drop_externally_initiated_tcp
        .unwrap_or(c.drop_externally_initiated_tcp);
    c.pptp = raw.pptp.unwrap_or(c.pptp);
    if let Some(h) = &raw.port_reuse_hold {
        c.port_reuse_hold = Duration::from_secs(*h.get_ref());
    }
    c.icmp_rate = icmp_rate(
        src,
        &raw.icmp_error_rate,
        &raw.icmp_error_rate_per_source,
        "nat44",
    )?;
    if let Some(m) = &raw.max_sessions {
        c.max_sessions = usize::try_from(*m.get_ref()).map_err(|_| {
            src.error(
                Some(m.span()),
                "nat44.max_sessions",
                format!("{} is too large for this machine", m.get_ref()),
            )
        })?;
    }
    if let Some(t) = &raw.timeouts {
        c.timeouts = timeouts(t.get_ref(), c.timeouts);
    }
    // Per-subscriber limits (RFC 6888 REQ-4/REQ-5).
    let (s, p) = limits::host_limits(
        src,
        &raw.max_sessions_per_host,
        &raw.max_ports_per_host,
        "nat44",
    )?;
    c.max_sessions_per_host = s.unwrap_or(c.max_sessions_per_host);
    c.max_ports_per_host = p.unwrap_or(c.max_ports_per_host);
    // Live reload.
    c.reload_drain = reload::reload_drain(src, &raw.reload_drain)?;
    // Port-block allocation.
    let (size, per) = blocks::port_blocks(
        src,
        &raw.port_block_size,
        &raw.blocks_per_subscriber,
        "nat44",
    )?;
    c.port_block_size = size.unwrap_or(c.port_block_size);
    c.blocks_per_subscriber = per.unwrap_or(c.blocks_per_subscriber);
    // Deterministic NAT.
    c.deterministic = deterministic::convert(src, &raw.deterministic)?;
    for (i, r) in raw.rule.iter().enumerate() {
        let r = r.get_ref();
        let field = |f: &str| format!("nat44.rule[{}].{f}", i + 1);
        let inside = r
            .inside
            .get_ref()
            .parse()
            .map_err(|why: xlat::prefix::PrefixError| {
                src.bad_value(&r.inside, field("inside"), why.to_string())
            })?;
        let pool = pool_prefixes(src, &r.pool, &field("pool"))?;
        let ports = match &r.ports {
            Some(p) => p
                .get_ref()
                .parse::<PortRange>()
                .map_err(|why| src.bad_value(p, field("ports"), why.to_string()))?,
            None => PortRange::default(),
        };
        c.rules.push(DynamicRule {
            inside,
            pool,
            ports,
        });
    }
    for (i, s) in raw.static_nat.iter().enumerate() {
        let s = s.get_ref();
        let field = |f: &str| format!("nat44.static[{}].{f}", i + 1);
        let addr = |v: &Spanned<String>, f: &str| {
            v.get_ref().trim().parse::<Ipv4Addr>().map_err(|_| {
                src.bad_value(v, field(f), "not an IPv4 address (like 192.0.2.100)".into())
            })
        };
        c.static_nat.push(StaticNat {
            inside: addr(&s.inside, "inside")?,
            public: addr(&s.public, "public")?,
        });
    }
    for (i, f) in raw.forward.iter().enumerate() {
        let f = f.get_ref();
        let field = |name: &str| format!("nat44.forward[{}].{name}", i + 1);
        let protocol = L4Proto::from_name(f.protocol.get_ref()).ok_or_else(|| {
            src.bad_value(
                &f.protocol,
                field("protocol"),
                "must be \"tcp\", \"udp\" or \"sctp\"".into(),
            )
        })?;
        let sock = |v: &Spanned<String>, name: &str| {
            v.get_ref().trim().parse::<SocketAddrV4>().map_err(|_| {
                src.bad_value(
                    v,
                    field(name),
                    "not an IPv4 address and port (like 203.0.113.1:8080)".into(),
                )
            })
        };
        c.port_forwards.push(PortForward {
            protocol,
            public: sock(&f.public, "public")?,
            inside: sock(&f.inside, "inside")?,
        });
    }
    Ok(c)
}
