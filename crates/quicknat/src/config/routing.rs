//! The `[routing]` table: the prefixes this gateway announces to the routing
//! daemon beside it while it forwards.
//!
//! ```toml
//! [routing]
//! announce = ["0.0.0.0/0", "203.0.113.0/29"]  # primary prefixes (metric 100); empty/absent: off
//! standby = ["203.0.113.8/29"]                 # announced with standby_metric
//! standby_metric = 1000                        # > 100, the primaries' metric
//! table = 250                                  # kernel table (not used for forwarding)
//! protocol = 250                               # rtm_protocol of the routes
//! device = "qn-announce"                       # the TUN device (one per gateway)
//! health_interval = "100ms"                    # "10ms" to "10s"
//! ```
//!
//! Read and bounded here; an error names the file, line and `routing.<field>`.

use std::net::IpAddr;
use std::time::Duration;

use runtime::routing::{Prefix, RoutingConfig, PRIMARY_METRIC};
use serde::Deserialize;
use toml::Spanned;

use super::{ConfigFileError, Source};

/// The `[routing]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRouting {
    /// Primary prefixes.
    pub announce: Option<Vec<Spanned<String>>>,
    /// Standby prefixes.
    pub standby: Option<Vec<Spanned<String>>>,
    /// The standby routes' metric.
    pub standby_metric: Option<Spanned<u64>>,
    /// Kernel routing table.
    pub table: Option<Spanned<u64>>,
    /// rtm_protocol.
    pub protocol: Option<Spanned<u64>>,
    /// TUN device name.
    pub device: Option<Spanned<String>>,
    /// Time between health checks ("100ms", "1s").
    pub health_interval: Option<Spanned<String>>,
}

/// Tables a route of ours must never go to: unspec, default, main, local.
const RESERVED_TABLES: [u64; 4] = [0, 253, 254, 255];

/// Protocols that are not ours to use: the kernel's own (unspec, redirect, kernel, boot,
/// static) and BIRD's (12), whose kernel protocol treats routes of its protocol as its
/// own and deletes those it does not know.
const RESERVED_PROTOCOLS: [u64; 6] = [0, 1, 2, 3, 4, 12];

/// `[routing]` into the announcer's settings.
pub(super) fn convert(
    src: &Source<'_>,
    raw: &RawRouting,
) -> Result<RoutingConfig, ConfigFileError> {
    let mut c = RoutingConfig {
        announce: prefixes(src, &raw.announce, "routing.announce")?,
        standby: prefixes(src, &raw.standby, "routing.standby")?,
        ..RoutingConfig::default()
    };
    for (i, v) in raw.standby.iter().flatten().enumerate() {
        if c.announce.contains(&c.standby[i]) {
            return Err(src.bad_value(
                v,
                format!("routing.standby[{}]", i + 1),
                "also in routing.announce: a prefix is either primary or standby".into(),
            ));
        }
    }
    if let Some(m) = &raw.standby_metric {
        let v = *m.get_ref();
        if v <= u64::from(PRIMARY_METRIC) || v > u64::from(u32::MAX) {
            return Err(src.error(
                Some(m.span()),
                "routing.standby_metric",
                format!("{v}: must be above {PRIMARY_METRIC} (the primary routes' metric) and at most {}", u32::MAX),
            ));
        }
        c.standby_metric = v as u32;
    }
    if let Some(t) = &raw.table {
        let v = *t.get_ref();
        if RESERVED_TABLES.contains(&v) || v > u64::from(u32::MAX) {
            return Err(src.error(
                Some(t.span()),
                "routing.table",
                format!("{v}: must be 1 to {} and not 253 (default), 254 (main) or 255 (local): the table must be one the kernel does not forward by", u32::MAX),
            ));
        }
        c.table = v as u32;
    }
    if let Some(p) = &raw.protocol {
        let v = *p.get_ref();
        if RESERVED_PROTOCOLS.contains(&v) || v > 255 {
            return Err(src.error(
                Some(p.span()),
                "routing.protocol",
                format!("{v}: must be 5 to 255, not 12 (BIRD's own: BIRD would delete the routes as stale)"),
            ));
        }
        c.protocol = v as u8;
    }
    if let Some(d) = &raw.device {
        let n = d.get_ref();
        if n.is_empty() || n.len() > 15 || n.contains(['/', ' ', '\0']) {
            return Err(src.bad_value(
                d,
                "routing.device".into(),
                "not a Linux interface name (1-15 characters, no '/' or space)".into(),
            ));
        }
        c.device = n.clone();
    }
    if let Some(h) = &raw.health_interval {
        c.health_interval = interval(h.get_ref()).ok_or_else(|| {
            src.bad_value(
                h,
                "routing.health_interval".into(),
                "expected a duration from \"10ms\" to \"10s\" (e.g. \"100ms\", \"1s\")".into(),
            )
        })?;
    }
    Ok(c)
}

/// A list of prefixes, each with host bits zero and written once.
fn prefixes(
    src: &Source<'_>,
    list: &Option<Vec<Spanned<String>>>,
    field: &str,
) -> Result<Vec<Prefix>, ConfigFileError> {
    let mut out: Vec<Prefix> = Vec::new();
    for (i, v) in list.iter().flatten().enumerate() {
        let bad = |why: String| src.bad_value(v, format!("{field}[{}]", i + 1), why);
        let p = prefix(v.get_ref()).map_err(bad)?;
        if out.contains(&p) {
            return Err(bad("written twice".into()));
        }
        out.push(p);
    }
    Ok(out)
}

/// `ADDRESS/LEN`, IPv4 or IPv6, host bits zero.
fn prefix(s: &str) -> Result<Prefix, String> {
    let (a, l) = s
        .split_once('/')
        .ok_or("expected ADDRESS/LENGTH (e.g. \"203.0.113.0/29\" or \"2001:db8::/32\")")?;
    let addr: IpAddr = a
        .parse()
        .map_err(|_| format!("{a:?} is not an IPv4 or IPv6 address"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len: u8 = l
        .parse()
        .ok()
        .filter(|l| *l <= max)
        .ok_or(format!("prefix length {l:?}: expected 0 to {max}"))?;
    let masked = match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::from((u32::from(a) & m).to_be_bytes())
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::from((u128::from(a) & m).to_be_bytes())
        }
    };
    if masked != addr {
        return Err(format!("host bits set: the prefix is {masked}/{len}"));
    }
    Ok(Prefix { addr, len })
}

/// "100ms", "2s", "1.5s": from 10 ms to 10 s.
fn interval(s: &str) -> Option<Duration> {
    let s = s.trim();
    let d = if let Some(ms) = s.strip_suffix("ms") {
        Duration::from_millis(ms.trim().parse().ok()?)
    } else {
        let secs: f64 = s.strip_suffix('s')?.trim().parse().ok()?;
        if !secs.is_finite() || secs < 0.0 {
            return None;
        }
        Duration::try_from_secs_f64(secs).ok()?
    };
    (Duration::from_millis(10)..=Duration::from_secs(10))
        .contains(&d)
        .then_some(d)
}
