//! The `[logging]` table: NAT event logging (RFC 8158 over IPFIX, RFC 5424 syslog).
//!
//! ```toml
//! [logging]
//! events = ["binding", "session", "limits"]   # what to record; empty/absent: off
//! ipfix = "192.0.2.9:4739"                    # IPFIX collector (UDP)
//! syslog = "192.0.2.9:514"                    # syslog receiver (UDP)
//! ```
//!
//! Read and bounded here; an error names the file, line and `logging.<field>`.

use std::net::SocketAddr;
use std::time::Duration;

use engine::events::{EventClass, EventMask};
use runtime::natlog::NatLogConfig;
use serde::Deserialize;
use toml::Spanned;

use super::{ConfigFileError, Source};

/// The `[logging]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLogging {
    /// Event classes: "binding", "session", "block", "limits".
    pub events: Option<Spanned<Vec<Spanned<String>>>>,
    /// IPFIX collector `address:port`.
    pub ipfix: Option<Spanned<String>>,
    /// syslog receiver `address:port`.
    pub syslog: Option<Spanned<String>>,
    /// Seconds between IPFIX template re-sends.
    pub template_refresh: Option<Spanned<u64>>,
    /// IPFIX messages between template re-sends (0: by time only).
    pub template_refresh_messages: Option<Spanned<u64>>,
    /// IPFIX observation domain id.
    pub observation_domain: Option<Spanned<u64>>,
    /// Largest IPFIX message in bytes.
    pub max_message: Option<Spanned<u64>>,
    /// syslog facility (0-23).
    pub syslog_facility: Option<Spanned<u64>>,
    /// syslog severity (0-7).
    pub syslog_severity: Option<Spanned<u64>>,
    /// Events each worker's queue holds.
    pub queue: Option<Spanned<u64>>,
}

/// `[logging]` into the exporter's settings.
pub(super) fn convert(src: &Source<'_>, raw: &RawLogging) -> Result<NatLogConfig, ConfigFileError> {
    let mut c = NatLogConfig::default();
    if let Some(list) = &raw.events {
        for v in list.get_ref() {
            let class = EventClass::parse(v.get_ref()).ok_or_else(|| {
                src.bad_value(
                    v,
                    "logging.events".into(),
                    "expected \"binding\", \"session\", \"block\" or \"limits\"".into(),
                )
            })?;
            c.events = c.events.with(class);
        }
    }
    let addr = |v: &Option<Spanned<String>>, field: &str| {
        v.as_ref()
            .map(|s| {
                s.get_ref().parse::<SocketAddr>().map_err(|_| {
                    src.bad_value(
                        s,
                        format!("logging.{field}"),
                        "expected address:port (e.g. \"192.0.2.9:4739\", \"[2001:db8::9]:4739\")"
                            .into(),
                    )
                })
            })
            .transpose()
    };
    c.ipfix = addr(&raw.ipfix, "ipfix")?;
    c.syslog = addr(&raw.syslog, "syslog")?;
    let num = |v: &Option<Spanned<u64>>, field: &str, min: u64, max: u64| {
        v.as_ref()
            .map(|n| {
                let x = *n.get_ref();
                if (min..=max).contains(&x) {
                    Ok(x)
                } else {
                    Err(src.error(
                        Some(n.span()),
                        format!("logging.{field}"),
                        format!("{x}: must be between {min} and {max}"),
                    ))
                }
            })
            .transpose()
    };
    if let Some(s) = num(&raw.template_refresh, "template_refresh", 1, 86_400)? {
        c.template_refresh = Duration::from_secs(s);
    }
    if let Some(n) = num(
        &raw.template_refresh_messages,
        "template_refresh_messages",
        0,
        1 << 20,
    )? {
        c.template_refresh_messages = n as u32;
    }
    if let Some(n) = num(
        &raw.observation_domain,
        "observation_domain",
        0,
        u64::from(u32::MAX),
    )? {
        c.observation_domain = n as u32;
    }
    if let Some(n) = num(&raw.max_message, "max_message", 512, 65_507)? {
        c.max_message = n as usize;
    }
    if let Some(n) = num(&raw.syslog_facility, "syslog_facility", 0, 23)? {
        c.syslog_facility = n as u8;
    }
    if let Some(n) = num(&raw.syslog_severity, "syslog_severity", 0, 7)? {
        c.syslog_severity = n as u8;
    }
    if let Some(n) = num(&raw.queue, "queue", 16, 1 << 20)? {
        c.queue = n as usize;
    }
    if c.events != EventMask::NONE && c.ipfix.is_none() && c.syslog.is_none() {
        let span = raw.events.as_ref().map(|e| e.span());
        return Err(src.error(
            span,
            "logging.events",
            "events are recorded but sent nowhere: set logging.ipfix and/or logging.syslog",
        ));
    }
    Ok(c)
}
