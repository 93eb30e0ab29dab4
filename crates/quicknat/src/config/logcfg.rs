//! The `[gateway]` logging keys, `log_level` and `log_format`.

use super::raw::RawGateway;
use super::{ConfigFileError, Source};
use crate::logging::{self, LogFormat, LogSettings};

/// The logging settings of a `[gateway]` table (the defaults without one).
pub(super) fn convert(
    src: &Source<'_>,
    g: Option<&RawGateway>,
) -> Result<LogSettings, ConfigFileError> {
    let Some(g) = g else {
        return Ok(LogSettings::default());
    };
    let level = match &g.log_level {
        Some(v) => {
            logging::valid_filter(v.get_ref()).map_err(|e| {
                src.bad_value(
                    v,
                    "gateway.log_level".into(),
                    format!("not a level (error, warn, info, debug, trace) or filter: {e}"),
                )
            })?;
            Some(v.get_ref().clone())
        }
        None => None,
    };
    let format = match &g.log_format {
        Some(v) => LogFormat::parse(v.get_ref()).ok_or_else(|| {
            src.bad_value(
                v,
                "gateway.log_format".into(),
                "expected \"text\" or \"json\"".into(),
            )
        })?,
        None => LogFormat::Text,
    };
    Ok(LogSettings { level, format })
}
