//! `[gateway] xdp_fast_path`, `xdp_fast_path_entries` and `xdp_fast_path_idle`: the fast path for established NAT44 and NAT64 flows, SIIT/CLAT flows and ILA
//! mappings (the XDP hook on AF_XDP, tc ingress on AF_PACKET), read and checked here.

use std::time::Duration;

use runtime::live::{FastPathSwitch, XDP_FAST_PATH_ENTRIES, XDP_FAST_PATH_IDLE};
use toml::Spanned;

use super::{ConfigFileError, Source};

/// The switch: `"auto"` (default), `"on"` or `"off"`.
pub(super) fn switch(
    src: &Source<'_>,
    v: &Option<Spanned<String>>,
) -> Result<FastPathSwitch, ConfigFileError> {
    src.choice(
        v,
        "gateway.xdp_fast_path",
        &[
            ("auto", FastPathSwitch::Auto),
            ("on", FastPathSwitch::On),
            ("off", FastPathSwitch::Off),
        ],
    )
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

/// SIIT/CLAT: the seconds a flow direction the program forwarded nothing of stays in the
/// map, 1 to 86,400.
pub(super) fn idle(
    src: &Source<'_>,
    v: &Option<Spanned<u64>>,
) -> Result<Duration, ConfigFileError> {
    match v {
        None => Ok(XDP_FAST_PATH_IDLE),
        Some(n) if (1..=86_400).contains(n.get_ref()) => Ok(Duration::from_secs(*n.get_ref())),
        Some(n) => Err(src.error(
            Some(n.span()),
            "gateway.xdp_fast_path_idle",
            format!("{}: must be between 1 and 86400 seconds", n.get_ref()),
        )),
    }
}
