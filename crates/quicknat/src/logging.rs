//! Logs through `tracing`: levels, a filter, human text or JSON, and
//! journald-friendly output.
//!
//! The runtime tells its story as lines (`runtime::live::run`'s `log` closure, kept as it
//! is); [`emit`] gives each line its level and a few structured fields, and the subscriber
//! set up by [`init`] decides what is shown and how:
//!
//! - the filter is `QUICKNAT_LOG`, else `RUST_LOG` (an operator's one-off override wins),
//!   else the configuration's `[gateway] log_level`, else `info` — `EnvFilter` syntax
//!   (`warn`, `quicknat=debug`, ...);
//! - the format is `[gateway] log_format`: `"text"` (default) or `"json"` (one object a
//!   line: `timestamp`, `level`, `fields.message` and the fields below);
//! - under systemd (`JOURNAL_STREAM` set: stderr goes to the journal) no timestamp of our
//!   own (journald stamps every line itself) and each line starts with its syslog
//!   priority, `<4>` for a warning (sd-daemon(3)), which journald takes as the entry's
//!   PRIORITY and strips. Colours only on a terminal.
//!
//! Lines keep their text verbatim (a `warning: ...` line still says so) so log scrapers and
//! the end-to-end tests that read them keep working; the level comes on top.

use std::fmt;
use std::io::IsTerminal;

use tracing::Level;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human text, one line per event (the default).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    /// The format a `log_format` value names.
    pub fn parse(s: &str) -> Option<LogFormat> {
        match s {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// The logging settings of a configuration (`[gateway] log_level`, `log_format`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogSettings {
    /// A level or an `EnvFilter` directive string; `None`: `info`.
    pub level: Option<String>,
    /// Text or JSON.
    pub format: LogFormat,
}

/// The filter used when neither the environment nor the configuration names one.
pub const DEFAULT_FILTER: &str = "info";

/// Whether `s` is a filter `EnvFilter` accepts (`info`, `warn,quicknat=debug`, ...).
pub fn valid_filter(s: &str) -> Result<(), String> {
    tracing_subscriber::EnvFilter::builder()
        .parse(s)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The filter in force: `QUICKNAT_LOG`, else `RUST_LOG`, else the configuration's, else
/// [`DEFAULT_FILTER`]. `env` looks a variable up (the process environment, or a fixture).
pub fn choose_filter(settings: &LogSettings, env: &dyn Fn(&str) -> Option<String>) -> String {
    ["QUICKNAT_LOG", "RUST_LOG"]
        .iter()
        .find_map(|k| env(k).filter(|v| !v.trim().is_empty()))
        .or_else(|| settings.level.clone())
        .unwrap_or_else(|| DEFAULT_FILTER.to_owned())
}

/// Whether stderr goes to the journal: systemd sets `JOURNAL_STREAM` for a service whose
/// output it connects to journald, and journald stamps each line, so we add no time.
pub fn under_journal(env: &dyn Fn(&str) -> Option<String>) -> bool {
    env("JOURNAL_STREAM").is_some_and(|v| !v.is_empty())
}

/// Sets up the process's subscriber (once; a second call does nothing). Writes to stderr.
pub fn init(settings: &LogSettings) {
    let env = |k: &str| std::env::var(k).ok();
    let filter_text = choose_filter(settings, &env);
    // A bad filter from the environment must not leave the gateway mute: say so, use info.
    let (filter, bad) = match tracing_subscriber::EnvFilter::builder().parse(&filter_text) {
        Ok(f) => (f, None),
        Err(e) => (
            tracing_subscriber::EnvFilter::new(DEFAULT_FILTER),
            Some(format!(
                "log filter \"{filter_text}\" not understood ({e}); using \"{DEFAULT_FILTER}\""
            )),
        ),
    };
    let journal = under_journal(&env);
    let ansi = std::io::stderr().is_terminal() && !journal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(ansi);
    let result = match (settings.format, journal) {
        (LogFormat::Json, true) => builder
            .event_format(JournalPriority(
                tracing_subscriber::fmt::format()
                    .json()
                    .without_time()
                    .with_target(false)
                    .flatten_event(true),
            ))
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .try_init(),
        (LogFormat::Json, false) => builder.json().flatten_event(true).try_init(),
        (LogFormat::Text, true) => builder
            .event_format(JournalPriority(
                tracing_subscriber::fmt::format()
                    .without_time()
                    .with_target(false)
                    .with_ansi(false),
            ))
            .try_init(),
        (LogFormat::Text, false) => builder.try_init(),
    };
    if result.is_ok() {
        if let Some(b) = bad {
            tracing::warn!("warning: {b}");
        }
    }
}

/// The syslog priority journald reads from a `<N>` line prefix (sd-daemon(3)) for a level:
/// `journalctl -p warning` then shows quicknat's warnings and errors only.
pub fn journal_priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

/// An event format that puts the journald priority prefix before the inner format's line.
struct JournalPriority<F>(F);

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for JournalPriority<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        write!(writer, "<{}>", journal_priority(event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

/// The level a runtime line deserves: `warning:` (after an optional gateway tag) is a
/// warning, `error:` an error, everything else (start-up facts, counters, changes) info.
pub fn level_of(line: &str) -> Level {
    let body = untagged(line);
    if body.starts_with("warning:") {
        Level::WARN
    } else if body.starts_with("error:") {
        Level::ERROR
    } else {
        Level::INFO
    }
}

/// What kind of event a runtime line is, as a structured field (`event=`): cheap to
/// derive from the line's first word, and what a JSON log consumer filters on.
pub fn event_of(line: &str) -> &'static str {
    let body = untagged(line);
    let body = body.strip_prefix("warning: ").unwrap_or(body);
    let word = body.split([':', ' ', '.']).next().unwrap_or("");
    match word {
        "stats" => "stats",
        "quicknat" => "started",
        "stopped" => "stopped",
        "privileges" => "privileges",
        "control" => "control",
        "reload" => "reload",
        "offloads" | "ethtool" => "offloads",
        "nftables" | "kernel_bypass" => "kernel_bypass",
        "preflight" => "preflight",
        _ if level_of(line) == Level::WARN => "warning",
        _ => "message",
    }
}

/// A line without the gateway tag (`FILE: `) that several gateways' lines start with.
fn untagged(line: &str) -> &str {
    // A tag is the configuration path followed by ": " and ends before the first word of
    // the line proper; the known first words decide where it ends.
    for marker in ["warning:", "error:"] {
        if let Some(i) = line.find(marker) {
            if i == 0 || line[..i].ends_with(": ") {
                return &line[i..];
            }
        }
    }
    line
}

/// Emits one runtime line through tracing, at [`level_of`] it, with `event` and, when
/// several gateways share the process, `gateway` (its configuration file) as fields.
pub fn emit(gateway: &str, line: &str) {
    let event = event_of(line);
    macro_rules! at {
        ($lvl:expr) => {
            if gateway.is_empty() {
                tracing::event!($lvl, event, "{line}")
            } else {
                tracing::event!($lvl, event, gateway, "{gateway}: {line}")
            }
        };
    }
    match level_of(line) {
        Level::ERROR => at!(Level::ERROR),
        Level::WARN => at!(Level::WARN),
        _ => at!(Level::INFO),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn the_environment_wins_over_the_configuration_and_info_is_the_default() {
        let cfg = LogSettings {
            level: Some("warn".into()),
            format: LogFormat::Text,
        };
        assert_eq!(choose_filter(&cfg, &env_of(&[])), "warn");
        assert_eq!(
            choose_filter(&cfg, &env_of(&[("RUST_LOG", "debug")])),
            "debug"
        );
        assert_eq!(
            choose_filter(
                &cfg,
                &env_of(&[("RUST_LOG", "debug"), ("QUICKNAT_LOG", "error")])
            ),
            "error"
        );
        assert_eq!(choose_filter(&cfg, &env_of(&[("RUST_LOG", " ")])), "warn");
        assert_eq!(
            choose_filter(&LogSettings::default(), &env_of(&[])),
            DEFAULT_FILTER
        );
    }

    #[test]
    fn journald_is_told_by_journal_stream() {
        assert!(under_journal(&env_of(&[("JOURNAL_STREAM", "8:12345")])));
        assert!(!under_journal(&env_of(&[])));
        assert!(!under_journal(&env_of(&[("JOURNAL_STREAM", "")])));
    }

    #[test]
    fn warnings_are_warnings_with_or_without_a_gateway_tag() {
        assert_eq!(level_of("warning: privileges not dropped"), Level::WARN);
        assert_eq!(level_of("/etc/a.toml: warning: x"), Level::WARN);
        assert_eq!(level_of("stats: rx in=1 out=2"), Level::INFO);
        assert_eq!(level_of("a line that mentions warning: later"), Level::INFO);
        assert_eq!(level_of("error: gone"), Level::ERROR);
    }

    #[test]
    fn lines_get_their_event_kind() {
        assert_eq!(event_of("stats: rx in=1"), "stats");
        assert_eq!(event_of("quicknat: nat44 (IPv4 inside"), "started");
        assert_eq!(event_of("stopped. stats: rx"), "stopped");
        assert_eq!(event_of("warning: control: refused uid 65534"), "control");
        assert_eq!(event_of("warning: something new"), "warning");
        assert_eq!(event_of("reload (SIGHUP): ILA mappings"), "reload");
        assert_eq!(event_of("anything else"), "message");
    }

    #[test]
    fn journald_priorities_follow_the_levels() {
        assert_eq!(journal_priority(&Level::ERROR), 3);
        assert_eq!(journal_priority(&Level::WARN), 4);
        assert_eq!(journal_priority(&Level::INFO), 6);
        assert_eq!(journal_priority(&Level::DEBUG), 7);
    }

    #[test]
    fn filters_are_checked() {
        assert!(valid_filter("info").is_ok());
        assert!(valid_filter("warn,quicknat=debug").is_ok());
        assert!(valid_filter("info,[{{{").is_err());
        assert_eq!(LogFormat::parse("json"), Some(LogFormat::Json));
        assert_eq!(LogFormat::parse("xml"), None);
    }
}
