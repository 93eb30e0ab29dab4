//! `[nat44] reload_drain`: what a live reload does with the sessions
//! on a public address it removed.

use engine::config::ReloadDrain;
use toml::Spanned;

use super::{ConfigFileError, Source};

/// Parses `reload_drain = "expire" | "immediate"` (default "expire").
pub(super) fn reload_drain(
    src: &Source<'_>,
    raw: &Option<Spanned<String>>,
) -> Result<ReloadDrain, ConfigFileError> {
    let Some(v) = raw else {
        return Ok(ReloadDrain::default());
    };
    match v.get_ref().as_str() {
        "expire" => Ok(ReloadDrain::Expire),
        "immediate" => Ok(ReloadDrain::Immediate),
        _ => Err(src.bad_value(
            v,
            "nat44.reload_drain".into(),
            "must be \"expire\" (sessions on a removed address live until they time out) or \"immediate\" (ended by the next reaper pass)".into(),
        )),
    }
}
