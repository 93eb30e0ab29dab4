//! `quicknat trace`: the next packets matching a filter through a running gateway, each
//! with what became of it, printed as they pass (see `runtime::trace`).

use std::io::Write;
use std::net::IpAddr;
use std::time::Duration;

use clap::Args;
use serde_json::{json, Value};

use crate::ctl::{request_each, CtlOpts};

/// Which packets a trace takes (`quicknat trace`, `quicknat translate --trace`).
#[derive(Debug, Args, Default)]
pub struct TraceFilterArgs {
    /// Only this protocol (tcp, udp, icmp, sctp, or a number), before or after translation.
    #[arg(long)]
    pub proto: Option<String>,
    /// Only packets with this address as source or destination, before or after
    /// translation.
    #[arg(long, value_name = "ADDR")]
    pub host: Option<IpAddr>,
    /// Only packets with this port (or ICMP identifier), before or after translation.
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
    /// Only packets arriving on the outside (`in`) or the inside (`out`).
    #[arg(long, value_parser = ["in", "out"])]
    pub direction: Option<String>,
    /// Only packets dropped for this reason (see `quicknat stats`).
    #[arg(long, value_name = "REASON")]
    pub drop_reason: Option<String>,
}

impl TraceFilterArgs {
    /// The request's `match` object.
    fn json(&self) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                m.insert(k.to_owned(), v);
            }
        };
        put("proto", self.proto.clone().map(Value::from));
        put("host", self.host.map(|h| h.to_string().into()));
        put("port", self.port.map(Value::from));
        put("direction", self.direction.clone().map(Value::from));
        put("drop_reason", self.drop_reason.clone().map(Value::from));
        m
    }

    /// The filter, checked as the gateway checks it (`translate --trace`).
    pub fn filter(&self) -> anyhow::Result<runtime::trace::TraceFilter> {
        runtime::trace::TraceFilter::from_json(&Value::Object(self.json()))
            .map_err(anyhow::Error::msg)
    }
}

/// `quicknat trace`'s filter and bounds.
#[derive(Debug, Args)]
pub struct TraceArgs {
    #[command(flatten)]
    pub filter: TraceFilterArgs,
    /// Stop after this many packets.
    #[arg(long, short = 'n', default_value_t = 10)]
    pub count: u64,
    /// Stop after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub timeout: u64,
    #[command(flatten)]
    pub opts: CtlOpts,
}

/// The request line.
pub fn request_of(a: &TraceArgs) -> Value {
    json!({"v": 1, "cmd": "trace", "match": a.filter.json(), "count": a.count,
           "timeout_ms": a.timeout.saturating_mul(1000)})
}

/// Arms the trace and prints each packet as the gateway sends it, then a summary.
pub fn run(a: &TraceArgs) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout();
    let json = a.opts.json;
    let wait = Duration::from_secs(a.timeout.saturating_add(10));
    let last = request_each(&a.opts.socket, &request_of(a), wait, &mut |line| {
        if json {
            writeln!(stdout, "{line}")?;
        } else {
            let r: Value = serde_json::from_str(line)?;
            write!(stdout, "{}", runtime::trace::text(&r))?;
        }
        stdout.flush()?;
        Ok(())
    })?;
    if json {
        writeln!(stdout, "{last}")?;
    } else {
        writeln!(stdout, "{}", summary(&last))?;
    }
    Ok(())
}

/// The end line for a terminal: how many were traced, and what the fast path moved.
fn summary(last: &Value) -> String {
    let mut s = format!(
        "{} packets traced{}",
        last["count"],
        if last["complete"].as_bool() == Some(true) {
            ""
        } else {
            " (timed out before the count)"
        }
    );
    if let Some(n) = last["fast_path_packets"].as_u64() {
        s.push_str(&format!(
            "; meanwhile the fast path forwarded {n} packets of established flows, which no \
             worker sees (sessions --json lists their flows)"
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: TraceArgs,
    }

    #[test]
    fn the_request_carries_only_what_was_given() {
        let c = Cli::parse_from(["t", "--host", "10.0.0.2", "--proto", "udp", "-n", "3"]);
        assert_eq!(
            request_of(&c.a),
            json!({"v":1,"cmd":"trace","match":{"proto":"udp","host":"10.0.0.2"},
                   "count":3,"timeout_ms":10000})
        );
        assert!(Cli::try_parse_from(["t", "--direction", "sideways"]).is_err());
    }

    #[test]
    fn the_summary_is_honest_about_the_fast_path() {
        let s = summary(&json!({"count":2,"complete":false,"fast_path_packets":40}));
        assert!(
            s.starts_with("2 packets traced (timed out before the count)"),
            "{s}"
        );
        assert!(s.contains("fast path forwarded 40 packets"), "{s}");
        assert_eq!(
            summary(&json!({"count":1,"complete":true,"fast_path_packets":null})),
            "1 packets traced"
        );
    }
}
