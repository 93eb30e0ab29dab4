//! `[gateway] metrics`: the address of the Prometheus metrics listener, read
//! and checked here; off when not written.

use std::net::SocketAddr;

use toml::Spanned;

use super::{ConfigFileError, Source};

/// The listener's address, or `None` (off). An IP address and a port from 1 to 65535
/// (`"127.0.0.1:9464"`, `"[::1]:9464"`); an error names the field and its line.
pub(super) fn listen_addr(
    src: &Source<'_>,
    v: &Option<Spanned<String>>,
) -> Result<Option<SocketAddr>, ConfigFileError> {
    let Some(v) = v else { return Ok(None) };
    let addr: SocketAddr = v.get_ref().parse().map_err(|_| {
        src.bad_value(
            v,
            "gateway.metrics".into(),
            "not an IP address and port (e.g. \"127.0.0.1:9464\" or \"[::1]:9464\")".into(),
        )
    })?;
    if addr.port() == 0 {
        return Err(src.bad_value(
            v,
            "gateway.metrics".into(),
            "port 0: Prometheus needs a fixed port to scrape (9464 is the usual one)".into(),
        ));
    }
    Ok(Some(addr))
}
