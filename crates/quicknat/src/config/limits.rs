//! Per-subscriber limits (`max_sessions_per_host`, `max_ports_per_host`) of `[nat44]` and
//! `[nat64]`, read and bounded here so that both sections say the same thing the same way.

use toml::Spanned;

use super::{ConfigFileError, Source};

/// Most ports one host could hold in one protocol.
const MAX_PORTS: u64 = 65536;

/// The limits written in `[section]`, each checked (`None`: not written, keep the
/// default); an error names the field and its line.
pub(super) fn host_limits(
    src: &Source<'_>,
    sessions: &Option<Spanned<u64>>,
    ports: &Option<Spanned<u64>>,
    section: &str,
) -> Result<(Option<u32>, Option<u32>), ConfigFileError> {
    let check = |v: &Option<Spanned<u64>>, field: &str, max: u64| {
        v.as_ref()
            .map(|m| {
                u32::try_from(*m.get_ref())
                    .ok()
                    .filter(|n| u64::from(*n) <= max)
                    .ok_or_else(|| {
                        src.error(
                            Some(m.span()),
                            format!("{section}.{field}"),
                            format!("{}: must be between 0 (unlimited) and {max}", m.get_ref()),
                        )
                    })
            })
            .transpose()
    };
    Ok((
        check(sessions, "max_sessions_per_host", u64::from(u32::MAX))?,
        check(ports, "max_ports_per_host", MAX_PORTS)?,
    ))
}
