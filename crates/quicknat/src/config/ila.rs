//! The `[ila]` table: SIR prefix, checksum mode, identifier format, unmapped action and
//! the `[[ila.mapping]]` identifier -> locator list, into an [`engine::ila::IlaSettings`].
//!
//! Identifiers and locators use the notation of Linux `ip ila add loc_match ID loc LOC`:
//! four 16-bit hex groups (`2001:0:87:0`). Like the rest of the configuration, every
//! error names the line and field (`gw.toml:14: ila.mapping[2].locator: ...`).

use std::collections::HashMap;
use std::net::Ipv6Addr;

use engine::ila::{Addr64, CsumMode, IdentFormat, IlaConfig, IlaSettings, UnmappedAction};
use serde::Deserialize;
use toml::Spanned;

use super::{locate, ConfigFileError, Source};

/// Default room in the mapping table.
pub const DEFAULT_MAX_MAPPINGS: u64 = 65_536;

/// Largest accepted `max_mappings` (the table is allocated up front).
const MAX_MAX_MAPPINGS: u64 = 1 << 24;

/// The `[ila]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIla {
    /// IPv6 /64 such as `"3333:0:0:1::/64"`.
    sir_prefix: Spanned<String>,
    /// `"no-action"`, `"adjust-transport"`, `"neutral-map"` or `"neutral-map-auto"`.
    csum_mode: Option<Spanned<String>>,
    /// `"luid"` or `"use-format"`.
    ident_type: Option<Spanned<String>>,
    /// `"forward"` or `"drop"`.
    unmapped: Option<Spanned<String>>,
    /// Room in the mapping table.
    max_mappings: Option<Spanned<u64>>,
    /// `[[ila.mapping]]` tables.
    #[serde(default)]
    mapping: Vec<Spanned<RawMapping>>,
    // -- ICMP error budget, as NAT44's and NAT64's --
    /// Time Exceeded / Packet Too Big per second a worker sends at most, in all.
    icmp_error_rate: Option<Spanned<u64>>,
    /// ... and to one sender.
    icmp_error_rate_per_source: Option<Spanned<u64>>,
}

/// One `[[ila.mapping]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMapping {
    /// 64-bit identifier, `"0:0:1:2"`.
    identifier: Spanned<String>,
    /// 64-bit locator, `"2001:0:87:0"`.
    locator: Spanned<String>,
}

/// Picks the value of `v` among `choices` (`(name, value)`), or names them all.
fn choose<T: Copy>(
    src: &Source<'_>,
    v: &Option<Spanned<String>>,
    field: &str,
    choices: &[(&str, T)],
    default: T,
) -> Result<T, ConfigFileError> {
    let Some(v) = v else { return Ok(default) };
    choices
        .iter()
        .find(|(name, _)| *name == v.get_ref())
        .map(|&(_, value)| value)
        .ok_or_else(|| {
            let names: Vec<String> = choices.iter().map(|(n, _)| format!("\"{n}\"")).collect();
            src.bad_value(
                v,
                format!("ila.{field}"),
                format!("must be one of {}", names.join(", ")),
            )
        })
}

/// The SIR prefix: an IPv6 /64 with nothing set in its lower 64 bits.
fn sir_prefix(src: &Source<'_>, v: &Spanned<String>) -> Result<u64, ConfigFileError> {
    let bad = |why: &str| src.bad_value(v, "ila.sir_prefix".into(), why.into());
    let (addr, len) = v
        .get_ref()
        .trim()
        .split_once('/')
        .ok_or_else(|| bad("not an IPv6 /64 prefix (like 3333:0:0:1::/64)"))?;
    let addr: Ipv6Addr = addr
        .parse()
        .map_err(|_| bad("not an IPv6 /64 prefix (like 3333:0:0:1::/64)"))?;
    if len != "64" {
        return Err(bad("the SIR prefix must be a /64"));
    }
    let bits = u128::from(addr);
    if bits as u64 != 0 {
        return Err(bad(
            "bits set after the /64 (the identifier part must be zero)",
        ));
    }
    Ok((bits >> 64) as u64)
}

/// `[ila]` into engine settings, checking every mapping.
pub(super) fn convert(
    src: &Source<'_>,
    raw: &Spanned<RawIla>,
) -> Result<IlaSettings, ConfigFileError> {
    let r = raw.get_ref();
    let csum = choose(
        src,
        &r.csum_mode,
        "csum_mode",
        &[
            ("no-action", CsumMode::NoAction),
            ("adjust-transport", CsumMode::AdjustTransport),
            ("adj-transport", CsumMode::AdjustTransport),
            ("neutral-map", CsumMode::NeutralMap),
            ("neutral-map-auto", CsumMode::NeutralMapAuto),
        ],
        CsumMode::AdjustTransport,
    )?;
    let format = choose(
        src,
        &r.ident_type,
        "ident_type",
        &[
            ("luid", IdentFormat::Luid),
            ("use-format", IdentFormat::UseFormat),
        ],
        IdentFormat::Luid,
    )?;
    if csum == CsumMode::NeutralMap && format != IdentFormat::UseFormat {
        let span = r.csum_mode.as_ref().map(Spanned::span);
        return Err(src.error(
            span,
            "ila.csum_mode",
            "\"neutral-map\" sets the C-bit, so it needs ident_type = \"use-format\" \
             (or use \"neutral-map-auto\")",
        ));
    }
    let unmapped = choose(
        src,
        &r.unmapped,
        "unmapped",
        &[
            ("forward", UnmappedAction::Forward),
            ("drop", UnmappedAction::Drop),
        ],
        UnmappedAction::Forward,
    )?;
    let capacity = match &r.max_mappings {
        Some(m) if !(1..=MAX_MAX_MAPPINGS).contains(m.get_ref()) => {
            return Err(src.error(
                Some(m.span()),
                "ila.max_mappings",
                format!("{}: must be between 1 and {MAX_MAX_MAPPINGS}", m.get_ref()),
            ))
        }
        Some(m) => *m.get_ref(),
        None => DEFAULT_MAX_MAPPINGS,
    };
    let config = IlaConfig {
        sir_prefix: sir_prefix(src, &r.sir_prefix)?,
        csum,
        format,
        unmapped,
    };
    let mut seen: HashMap<u64, usize> = HashMap::new();
    let mut mappings = Vec::with_capacity(r.mapping.len());
    for (i, m) in r.mapping.iter().enumerate() {
        let m = m.get_ref();
        let field = |f: &str| format!("ila.mapping[{}].{f}", i + 1);
        let value = |v: &Spanned<String>, f: &str| {
            v.get_ref()
                .parse::<Addr64>()
                .map(|a| a.0)
                .map_err(|why| src.error(Some(v.span()), field(f), why.to_string()))
        };
        let identifier = value(&m.identifier, "identifier")?;
        let locator = value(&m.locator, "locator")?;
        if let Some(&first) = seen.get(&identifier) {
            let line = locate::line_of(src.text, r.mapping[first].span().start);
            return Err(src.error(
                Some(m.identifier.span()),
                field("identifier"),
                format!(
                    "\"{}\": already mapped by ila.mapping[{}] (line {line}); one locator per identifier",
                    m.identifier.get_ref(),
                    first + 1
                ),
            ));
        }
        seen.insert(identifier, i);
        mappings.push((identifier, locator));
    }
    if mappings.len() as u64 > capacity {
        let span = r.max_mappings.as_ref().map_or(raw.span(), Spanned::span);
        return Err(src.error(
            Some(span),
            "ila.max_mappings",
            format!(
                "{capacity} is fewer than the {} mappings listed",
                mappings.len()
            ),
        ));
    }
    let icmp_rate = super::icmp_rate(
        src,
        &r.icmp_error_rate,
        &r.icmp_error_rate_per_source,
        "ila",
    )?;
    Ok(IlaSettings {
        config,
        capacity: capacity as usize,
        mappings,
        icmp_rate,
    })
}

/// A short description of the `[ila]` settings, for `quicknat check-config`.
pub fn summary(s: &IlaSettings) -> String {
    let c = &s.config;
    let csum = match c.csum {
        CsumMode::NoAction => "no-action",
        CsumMode::AdjustTransport => "adjust-transport",
        CsumMode::NeutralMap => "neutral-map",
        CsumMode::NeutralMapAuto => "neutral-map-auto",
    };
    let format = match c.format {
        IdentFormat::Luid => "luid",
        IdentFormat::UseFormat => "use-format",
    };
    let unmapped = match c.unmapped {
        UnmappedAction::Forward => "forward",
        UnmappedAction::Drop => "drop",
    };
    let mut out = format!(
        "ila: sir prefix {}/64; csum mode {csum}; ident type {format}; unmapped {unmapped}; \
         {} of {} mappings\n",
        Ipv6Addr::from(u128::from(c.sir_prefix) << 64),
        s.mappings.len(),
        s.capacity
    );
    for (i, &(id, loc)) in s.mappings.iter().enumerate() {
        out.push_str(&format!(
            "ila mapping {}: {} -> {}\n",
            i + 1,
            Addr64(id),
            Addr64(loc)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::load_str;
    use super::*;

    /// A NAT44 configuration, for "no [ila] section".
    const NAT44: &str = r#"[nat44]
[[nat44.rule]]
inside = "10.0.0.0/24"
pool = "203.0.113.0/28"
"#;

    /// A valid `[ila]` table (ila.rst's example values), to which tests add mistakes.
    const BASE: &str = r#"# ILA router
[ila]
sir_prefix = "3333:0:0:1::/64"
csum_mode = "neutral-map"
ident_type = "use-format"
unmapped = "drop"
max_mappings = 16

[[ila.mapping]]
identifier = "2000:0:1:87"
locator = "2001:0:87:0"

[[ila.mapping]]
identifier = "0:0:1:2"
locator = "2001:0:88:0"
"#;

    /// Loads `text` expecting an error at the line holding `needle`, on `field`.
    fn expect_err(text: &str, needle: &str, field: &str, message: &str) {
        let e = load_str(text, "gw.toml").expect_err("config should be rejected");
        let line = text.lines().position(|l| l.contains(needle)).unwrap() + 1;
        assert_eq!(e.line, Some(line), "line of {e}");
        assert_eq!(e.field.as_deref(), Some(field), "field of {e}");
        assert!(e.message.contains(message), "message of {e}");
        assert!(
            e.to_string()
                .starts_with(&format!("gw.toml:{line}: {field}: ")),
            "{e}"
        );
    }

    #[test]
    fn every_field_is_read() {
        let c = load_str(BASE, "gw.toml").unwrap();
        let ila = c.ila().cloned().expect("[ila] read");
        assert_eq!(
            ila.config,
            IlaConfig {
                sir_prefix: 0x3333_0000_0000_0001,
                csum: CsumMode::NeutralMap,
                format: IdentFormat::UseFormat,
                unmapped: UnmappedAction::Drop,
            }
        );
        assert_eq!(ila.capacity, 16);
        assert_eq!(
            ila.mappings,
            vec![
                (0x2000_0000_0001_0087, 0x2001_0000_0087_0000),
                (0x0000_0000_0001_0002, 0x2001_0000_0088_0000)
            ]
        );
        ila.router().expect("settings build a router");
        assert_eq!(
            summary(&ila),
            "ila: sir prefix 3333:0:0:1::/64; csum mode neutral-map; ident type use-format; \
             unmapped drop; 2 of 16 mappings\n\
             ila mapping 1: 2000:0:1:87 -> 2001:0:87:0\n\
             ila mapping 2: 0:0:1:2 -> 2001:0:88:0\n"
        );
    }

    #[test]
    fn defaults_and_no_section() {
        assert!(load_str(NAT44, "gw.toml").unwrap().ila().is_none());
        let text = "[ila]\nsir_prefix = \"3333:0:0:1::/64\"\n".to_owned();
        let c = load_str(&text, "gw.toml").unwrap();
        let ila = c.ila().cloned().unwrap();
        assert_eq!(ila.config.csum, CsumMode::AdjustTransport);
        assert_eq!(ila.config.format, IdentFormat::Luid);
        assert_eq!(ila.config.unmapped, UnmappedAction::Forward);
        assert_eq!(ila.capacity as u64, DEFAULT_MAX_MAPPINGS);
        assert!(ila.mappings.is_empty());
    }

    #[test]
    fn bad_mappings_are_named() {
        let t = BASE.replace("\"2001:0:88:0\"", "\"2001:0:88\"");
        expect_err(&t, "2001:0:88", "ila.mapping[2].locator", "3 groups");
        let t = BASE.replace("\"0:0:1:2\"", "\"0:0:1:2g\"");
        expect_err(
            &t,
            "0:0:1:2g",
            "ila.mapping[2].identifier",
            "not 1-4 hex digits",
        );
        let t = BASE.replace("\"0:0:1:2\"", "\"2000::1:87\"");
        expect_err(&t, "2000::1:87", "ila.mapping[2].identifier", "hex digits");
        let t = BASE.replace("\"0:0:1:2\"", "\"2000:0000:1:0087\"");
        expect_err(
            &t,
            "2000:0000:1:0087",
            "ila.mapping[2].identifier",
            "already mapped by ila.mapping[1] (line 9)",
        );
        let t = format!("{BASE}\n[[ila.mapping]]\nidentifier = \"1:1:1:1\"\n");
        let e = load_str(&t, "gw.toml").unwrap_err();
        assert!(e.message.contains("missing field `locator`"), "{e}");
        let t = format!("{BASE}\n[[ila.mapping]]\nidentifier = \"1:1:1:1\"\nlocator = \"1:1:1:1\"\nloc_match = \"1:1:1:1\"\n");
        let e = load_str(&t, "gw.toml").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("ila.mapping[3].loc_match"), "{e}");
        assert!(e.message.contains("unknown field"), "{e}");
    }

    #[test]
    fn bad_settings_are_named() {
        let t = BASE.replace("ident_type = \"use-format\"", "ident_type = \"luid\"");
        expect_err(
            &t,
            "csum_mode",
            "ila.csum_mode",
            "needs ident_type = \"use-format\"",
        );
        let t = BASE.replace("\"neutral-map\"", "\"neutral\"");
        expect_err(
            &t,
            "csum_mode",
            "ila.csum_mode",
            "must be one of \"no-action\"",
        );
        let t = BASE.replace("\"drop\"", "\"reject\"");
        expect_err(&t, "unmapped", "ila.unmapped", "\"forward\", \"drop\"");
        let t = BASE.replace("\"use-format\"", "\"iid\"");
        expect_err(
            &t,
            "ident_type",
            "ila.ident_type",
            "\"luid\", \"use-format\"",
        );
        for (prefix, why) in [
            ("3333:0:0:1::/48", "must be a /64"),
            ("3333:0:0:1::5/64", "bits set after the /64"),
            ("3333:0:0:1::", "not an IPv6 /64"),
            ("10.0.0.0/64", "not an IPv6 /64"),
        ] {
            let t = BASE.replace("3333:0:0:1::/64", prefix);
            expect_err(&t, "sir_prefix", "ila.sir_prefix", why);
        }
        let t = BASE.replace("max_mappings = 16", "max_mappings = 1");
        expect_err(
            &t,
            "max_mappings",
            "ila.max_mappings",
            "fewer than the 2 mappings",
        );
        let t = BASE.replace("max_mappings = 16", "max_mappings = 0");
        expect_err(&t, "max_mappings", "ila.max_mappings", "between 1 and");
        let t = BASE.replace("unmapped = \"drop\"", "unmaped = \"drop\"");
        expect_err(&t, "unmaped", "ila.unmaped", "unknown field");
    }

    /// `[ila] icmp_error_rate` / `icmp_error_rate_per_source`: read, defaulted and bounded
    /// as NAT44's and NAT64's.
    #[test]
    fn icmp_error_rates_are_read_and_bounded() {
        use engine::config::IcmpRate;
        let ila = load_str(BASE, "gw.toml").unwrap().ila().cloned().unwrap();
        assert_eq!(ila.icmp_rate, IcmpRate::default());
        let t = BASE.replace(
            "max_mappings = 16",
            "max_mappings = 16\nicmp_error_rate = 50\nicmp_error_rate_per_source = 0",
        );
        let ila = load_str(&t, "gw.toml").unwrap().ila().cloned().unwrap();
        assert_eq!(
            ila.icmp_rate,
            IcmpRate {
                global: 50,
                per_source: 0
            }
        );
        assert_eq!(ila.router().unwrap().icmp_rate(), ila.icmp_rate);
        expect_err(
            &t.replace("= 50", "= 1000001"),
            "icmp_error_rate =",
            "ila.icmp_error_rate",
            "between 0 (none) and 1000000",
        );
    }
}
