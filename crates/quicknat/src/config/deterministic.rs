//! `[nat44.deterministic]`: deterministic NAT (RFC 7422), read here; its
//! checks (ratio, ports per subscriber, overlaps) are the engine's, located like any
//! other engine error (`nat44.deterministic.FIELD`, at its line).

use serde::Deserialize;
use toml::Spanned;

use engine::nat44::deterministic::Deterministic;

use super::{ConfigFileError, Source};

/// The `[nat44.deterministic]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDeterministic {
    /// The subscribers' prefix (each address one subscriber).
    pub inside: Spanned<String>,
    /// The public prefix they share.
    pub outside: Spanned<String>,
    /// Ports per subscriber (default: 64512 / sharing ratio).
    pub ports_per_subscriber: Option<Spanned<u64>>,
}

/// The settings written, their prefixes parsed; `None` when the table is absent.
pub(super) fn convert(
    src: &Source<'_>,
    raw: &Option<Spanned<RawDeterministic>>,
) -> Result<Option<Deterministic>, ConfigFileError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let d = raw.get_ref();
    let prefix = |v: &Spanned<String>, field: &str| {
        v.get_ref()
            .trim()
            .parse()
            .map_err(|why: xlat::prefix::PrefixError| {
                src.bad_value(v, format!("nat44.deterministic.{field}"), why.to_string())
            })
    };
    let ports_per_subscriber = d
        .ports_per_subscriber
        .as_ref()
        .map(|p| {
            u32::try_from(*p.get_ref()).map_err(|_| {
                src.error(
                    Some(p.span()),
                    "nat44.deterministic.ports_per_subscriber",
                    format!("{}: must be between 1 and 64512", p.get_ref()),
                )
            })
        })
        .transpose()?;
    Ok(Some(Deterministic {
        inside: prefix(&d.inside, "inside")?,
        outside: prefix(&d.outside, "outside")?,
        ports_per_subscriber,
    }))
}
