//! `[gateway] xdp_fast_path` and `xdp_fast_path_entries` (issue 15 item 2): the XDP fast
//! path for established NAT44 and NAT64 flows and ILA mappings on the AF_XDP backend, read and
//! checked here.

use runtime::live::{FastPathSwitch, XDP_FAST_PATH_ENTRIES};
use toml::Spanned;

use super::{ConfigFileError, Source};

/// The switch: `"off"` (default), `"auto"` or `"on"`.
pub(super) fn switch(
    src: &Source<'_>,
    v: &Option<Spanned<String>>,
) -> Result<FastPathSwitch, ConfigFileError> {
    match v.as_ref().map(|s| s.get_ref().as_str()) {
        None | Some("off") => Ok(FastPathSwitch::Off),
        Some("auto") => Ok(FastPathSwitch::Auto),
        Some("on") => Ok(FastPathSwitch::On),
        Some(_) => Err(src.bad_value(
            v.as_ref().expect("matched Some"),
            "gateway.xdp_fast_path".into(),
            "expected \"auto\", \"on\" or \"off\"".into(),
        )),
    }
}

/// The map size in flow directions (two per session): 2 to 16,777,216.
pub(super) fn entries(src: &Source<'_>, v: &Option<Spanned<u64>>) -> Result<u32, ConfigFileError> {
    match v {
        None => Ok(XDP_FAST_PATH_ENTRIES),
        Some(n) if (2..=1 << 24).contains(n.get_ref()) => Ok(*n.get_ref() as u32),
        Some(n) => Err(src.error(
            Some(n.span()),
            "gateway.xdp_fast_path_entries",
            format!(
                "{}: must be between 2 and 16777216 (two per offloaded session)",
                n.get_ref()
            ),
        )),
    }
}
