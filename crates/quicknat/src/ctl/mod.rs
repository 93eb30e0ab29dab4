//! `quicknat sessions|bindings|pool|stats|status|reload`: the client of the control
//! API (`runtime::control::api`, JSON lines on the control socket). Sends one request,
//! prints the answer as a table, or with `--json` the raw JSON lines (for `jq`). An
//! error answer (or a refusal) becomes a failed exit with the gateway's message.

use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use serde_json::{json, Value};

/// Options every control verb takes.
#[derive(Debug, Args)]
pub struct CtlOpts {
    /// The running gateway's control socket.
    #[arg(long, value_name = "PATH", default_value = runtime::control::DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Print the raw JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Filters of `quicknat sessions` and `quicknat sessions clear`.
#[derive(Debug, Args, Default)]
pub struct FilterArgs {
    /// Only this protocol (tcp, udp, icmp, sctp, other).
    #[arg(long)]
    pub proto: Option<String>,
    /// Only sessions of this inside host (NAT64: its IPv6 address).
    #[arg(long, value_name = "ADDR")]
    pub inside: Option<IpAddr>,
    /// Only this inside port (or ICMP identifier).
    #[arg(long, value_name = "PORT")]
    pub inside_port: Option<u16>,
    /// Only this public address.
    #[arg(long, value_name = "ADDR")]
    pub public: Option<IpAddr>,
    /// Only this public port.
    #[arg(long, value_name = "PORT")]
    pub public_port: Option<u16>,
    /// Only this remote address (IPv4, or NAT64's Pref64 form).
    #[arg(long, value_name = "ADDR")]
    pub remote: Option<IpAddr>,
    /// Only this remote port.
    #[arg(long, value_name = "PORT")]
    pub remote_port: Option<u16>,
}

impl FilterArgs {
    /// The request's `filter` object (`None`: no filter given).
    fn json(&self) -> Option<Value> {
        let mut filter = serde_json::Map::new();
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                filter.insert(k.to_owned(), v);
            }
        };
        put("proto", self.proto.clone().map(Value::from));
        put("inside", self.inside.map(|x| x.to_string().into()));
        put("inside_port", self.inside_port.map(Value::from));
        put("public", self.public.map(|x| x.to_string().into()));
        put("public_port", self.public_port.map(Value::from));
        put("remote", self.remote.map(|x| x.to_string().into()));
        put("remote_port", self.remote_port.map(Value::from));
        (!filter.is_empty()).then_some(Value::Object(filter))
    }
}

/// `quicknat sessions`: the filters and a bound.
#[derive(Debug, Args, Default)]
pub struct SessionArgs {
    #[command(flatten)]
    pub filter: FilterArgs,
    /// At most this many sessions.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
}

/// `quicknat sessions clear`: which sessions to end.
#[derive(Debug, Args, Default)]
pub struct ClearArgs {
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Every session (needed when no filter is given).
    #[arg(long)]
    pub all: bool,
    /// Only count the sessions that would end.
    #[arg(long)]
    pub dry_run: bool,
}

/// Which verb.
#[derive(Debug)]
pub enum Verb {
    /// `sessions`
    Sessions(SessionArgs),
    /// `sessions clear` (`dry_run` set: the count it asks first)
    ClearSessions(ClearArgs),
    /// `bindings`
    Bindings,
    /// `pool`
    Pool,
    /// `stats`
    Stats,
    /// `status`
    Status,
    /// `reload` (`true`: `--dry-run`)
    Reload(bool),
    /// `census`
    Census,
}

/// The request line of `verb`.
pub fn request_of(verb: &Verb) -> Value {
    match verb {
        Verb::Sessions(a) => {
            let mut r = json!({"v": 1, "cmd": "sessions"});
            if let Some(f) = a.filter.json() {
                r["filter"] = f;
            }
            if let Some(l) = a.limit {
                r["limit"] = l.into();
            }
            r
        }
        Verb::ClearSessions(a) => {
            let mut r = json!({"v": 1, "cmd": "clear_sessions", "dry_run": a.dry_run});
            if let Some(f) = a.filter.json() {
                r["filter"] = f;
            }
            r
        }
        Verb::Bindings => json!({"v": 1, "cmd": "bindings"}),
        Verb::Pool => json!({"v": 1, "cmd": "pool"}),
        Verb::Stats => json!({"v": 1, "cmd": "stats"}),
        Verb::Status => json!({"v": 1, "cmd": "status"}),
        Verb::Reload(false) => json!({"v": 1, "cmd": "reload"}),
        Verb::Reload(true) => json!({"v": 1, "cmd": "reload", "dry_run": true}),
        Verb::Census => json!({"v": 1, "cmd": "census"}),
    }
}

/// Sends `req` to the socket at `path`; returns the answer's lines: the items of a
/// streaming answer, then the final line (the one with `"v"`). A refusal or error is an
/// `Err` with the gateway's message.
pub fn request(path: &Path, req: &Value) -> anyhow::Result<(Vec<String>, Value)> {
    let mut items = Vec::new();
    let last = request_each(path, req, Duration::from_secs(60), &mut |l| {
        items.push(l.to_owned());
        Ok(())
    })?;
    Ok((items, last))
}

/// [`request`], handing each item line to `item` as it arrives (a trace streams them),
/// waiting at most `wait` for any one line; returns the final line.
pub fn request_each(
    path: &Path,
    req: &Value,
    wait: Duration,
    item: &mut dyn FnMut(&str) -> anyhow::Result<()>,
) -> anyhow::Result<Value> {
    let stream = UnixStream::connect(path).with_context(|| {
        format!(
            "cannot reach the control socket {} (is quicknat running? --socket PATH)",
            path.display()
        )
    })?;
    stream.set_read_timeout(Some(wait))?;
    let mut writer = stream.try_clone()?;
    writer.write_all(format!("{req}\n").as_bytes())?;
    let mut reader = BufReader::new(stream);
    loop {
        let mut l = String::new();
        if reader.read_line(&mut l)? == 0 {
            bail!("the gateway closed the control connection without finishing its answer");
        }
        let line = l.trim_end();
        // A refusal is answered before any request is read, in the text protocol.
        if let Some(e) = line.strip_prefix("error ") {
            bail!("{e}");
        }
        let v: Value = serde_json::from_str(line)
            .with_context(|| format!("the gateway answered a line that is not JSON: {line:?}"))?;
        if v.get("v").is_some() {
            if v["ok"] != Value::Bool(true) {
                bail!("{}", v["error"].as_str().unwrap_or("error"));
            }
            return Ok(v);
        }
        item(line)?;
    }
}

/// Runs `verb`: asks, prints. `sessions clear` asks twice: how many match (printed),
/// then to end them.
pub fn run(verb: &Verb, opts: &CtlOpts) -> anyhow::Result<()> {
    if let Verb::ClearSessions(a) = verb {
        if a.filter.json().is_none() && !a.all {
            bail!(
                "name the sessions to clear with a filter (--inside, --public, --remote, \
                 --proto, ports), or --all for every session"
            );
        }
        if !a.dry_run {
            let mut ask = request_of(verb);
            ask["dry_run"] = true.into();
            let (_, count) = request(&opts.socket, &ask)?;
            let n = &count["clear_sessions"]["sessions"];
            if !opts.json {
                println!("{n} sessions match");
            }
        }
    }
    let (items, last) = request(&opts.socket, &request_of(verb))?;
    let out = if opts.json {
        let mut s = String::new();
        for i in &items {
            s.push_str(i);
            s.push('\n');
        }
        s.push_str(&last.to_string());
        s.push('\n');
        s
    } else {
        let items: Vec<Value> = items
            .iter()
            .map(|l| serde_json::from_str(l))
            .collect::<Result<_, _>>()?;
        table(verb, &items, &last)
    };
    std::io::stdout().write_all(out.as_bytes())?;
    Ok(())
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        v => v.to_string(),
    }
}

/// Columns padded to their widest cell.
fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(String::len)
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The readable form of an answer.
pub fn table(verb: &Verb, items: &[Value], last: &Value) -> String {
    let count = last["count"].as_u64().unwrap_or(items.len() as u64);
    match verb {
        Verb::ClearSessions(a) => {
            let n = s(&last["clear_sessions"]["sessions"]);
            if a.dry_run {
                format!("{n} sessions would be cleared\n")
            } else {
                format!("{n} sessions cleared\n")
            }
        }
        Verb::Sessions(_) => {
            let mut rows = vec![[
                "PROTO", "INSIDE", "PUBLIC", "REMOTE", "ORIGIN", "STATE", "AGE", "IDLE", "EXPIRES",
            ]
            .map(String::from)
            .to_vec()];
            for i in items {
                rows.push(vec![
                    s(&i["proto"]),
                    s(&i["inside"]),
                    s(&i["public"]),
                    if i["remote_inside"] != i["remote"] {
                        format!("{} ({})", s(&i["remote"]), s(&i["remote_inside"]))
                    } else {
                        s(&i["remote"])
                    },
                    s(&i["origin"]),
                    s(&i["state"]),
                    secs(&i["age_ms"]),
                    secs(&i["idle_ms"]),
                    secs(&i["expires_in_ms"]),
                ]);
            }
            format!("{}{count} sessions\n", columns(&rows))
        }
        Verb::Bindings if items.first().is_some_and(|i| i.get("identifier").is_some()) => {
            let mut rows = vec![vec!["IDENTIFIER".to_owned(), "LOCATOR".to_owned()]];
            rows.extend(
                items
                    .iter()
                    .map(|i| vec![s(&i["identifier"]), s(&i["locator"])]),
            );
            format!("{}{count} mappings\n", columns(&rows))
        }
        Verb::Bindings => {
            let mut rows = vec![["PROTO", "INSIDE", "PUBLIC", "SESSIONS", "STATIC"]
                .map(String::from)
                .to_vec()];
            rows.extend(items.iter().map(|i| {
                vec![
                    s(&i["proto"]),
                    s(&i["inside"]),
                    s(&i["public"]),
                    s(&i["sessions"]),
                    if i["static"] == Value::Bool(true) {
                        "yes"
                    } else {
                        "no"
                    }
                    .into(),
                ]
            }));
            format!("{}{count} bindings\n", columns(&rows))
        }
        Verb::Pool => {
            let mut rows = vec![[
                "ADDRESS",
                "TCP",
                "UDP",
                "ICMP",
                "SCTP",
                "OTHER",
                "PORTS/PROTO",
                "BINDINGS",
                "SUBSCRIBERS",
                "BLOCKS",
            ]
            .map(String::from)
            .to_vec()];
            rows.extend(items.iter().map(|i| {
                vec![
                    s(&i["addr"]),
                    s(&i["taken"]["tcp"]),
                    s(&i["taken"]["udp"]),
                    s(&i["taken"]["icmp"]),
                    s(&i["taken"]["sctp"]),
                    s(&i["taken"]["other"]),
                    s(&i["ports_per_proto"]),
                    s(&i["bindings"]),
                    s(&i["subscribers"]),
                    s(&i["blocks_held"]),
                ]
            }));
            format!("{}{count} addresses\n", columns(&rows))
        }
        Verb::Stats => stats_table(&last["stats"]),
        Verb::Status => {
            let st = &last["status"];
            let link =
                |l: &Value| format!("{} (index {}, mtu {})", s(&l["name"]), l["index"], l["mtu"]);
            let config = match &st["config"] {
                Value::Null => "none (built-in example)".to_owned(),
                c => format!("{} (sha256 {})", s(&c["path"]), s(&c["sha256"])),
            };
            let mut rows = vec![
                vec!["mode".into(), s(&st["mode"])],
                vec!["inside".into(), link(&st["inside"])],
                vec!["outside".into(), link(&st["outside"])],
                vec![
                    "backend".into(),
                    format!("{} ({})", s(&st["backend"]), s(&st["backend_why"])),
                ],
                vec!["workers".into(), s(&st["workers"])],
                vec!["placement".into(), placement_row(&st["placement"])],
                vec!["receive hash".into(), rx_hash_row(&st["rx_hash"])],
                vec!["cpus".into(), cpus_row(&st["cpus"])],
                vec!["uptime".into(), format!("{} s", st["uptime_s"])],
                vec!["sessions".into(), s(&st["sessions"])],
                vec!["config".into(), config],
                vec!["version".into(), s(&st["version"])],
                vec!["pid".into(), s(&st["pid"])],
            ];
            // Deterministic NAT.
            let d = &st["deterministic"];
            if d.is_object() {
                rows.push(vec![
                    "deterministic".into(),
                    format!(
                        "{} -> {}, sharing ratio {}, {} ports per subscriber",
                        s(&d["inside"]),
                        s(&d["outside"]),
                        d["ratio"],
                        d["ports_per_subscriber"]
                    ),
                ]);
            }
            // -- XDP fast path: on or off, and why --
            if let Some(f) = st["xdp_fast_path"].as_object() {
                let on = if f["on"].as_bool() == Some(true) {
                    "on"
                } else {
                    "off"
                };
                rows.push(vec![
                    "xdp fast path".into(),
                    format!(
                        "{on} (xdp_fast_path = {}: {})",
                        s(&f["switch"]),
                        s(&f["why"])
                    ),
                ]);
            }
            // -- routing integration --
            if let Some(r) = st["routing"].as_object() {
                let yes = if r["announced"].as_bool() == Some(true) {
                    "yes"
                } else {
                    "no"
                };
                rows.push(vec![
                    "announced".into(),
                    format!("{yes}, {}", s(&r["reason"])),
                ]);
                let prefixes: Vec<String> = r["prefixes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(s)
                    .collect();
                rows.push(vec![
                    "routes".into(),
                    format!(
                        "{} on {} ({} announced, {} withdrawn since start)",
                        prefixes.join(", "),
                        s(&r["device"]),
                        r["announcements"],
                        r["withdrawals"]
                    ),
                ]);
            }
            columns(&rows)
        }
        Verb::Census => {
            let c = &last["census"];
            let mut rows = vec![
                vec!["capacity".into(), s(&c["capacity"])],
                vec!["live".into(), s(&c["live"])],
                vec!["dead_pending".into(), s(&c["dead_pending"])],
                vec!["bindings".into(), s(&c["bindings"])],
            ];
            if let Some(p) = c["by_proto"].as_object() {
                rows.extend(p.iter().map(|(k, v)| vec![k.clone(), s(v)]));
            }
            if let Some(t) = c["tcp"].as_object() {
                rows.extend(
                    t.iter()
                        .filter(|(_, v)| v.as_u64() != Some(0))
                        .map(|(k, v)| vec![format!("tcp {k}"), s(v)]),
                );
            }
            columns(&rows)
        }
        Verb::Reload(_) => format!("{}\n", s(&last["reload"])),
    }
}

/// `status`'s placement row: how the workers share the traffic, and (flows placed) the
/// flows each worker got per IP version, e.g. `flows: ipv4 16,16 ipv6 16,16 (why)`.
fn placement_row(p: &Value) -> String {
    if p.is_null() {
        return "-".into();
    }
    let list = |v: &Value| {
        v.as_array().map_or_else(String::new, |a| {
            a.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
    };
    let f = &p["flows_per_worker"];
    let mut counts = if f.is_object() {
        format!(" ipv4 {} ipv6 {}", list(&f["ipv4"]), list(&f["ipv6"]))
    } else {
        String::new()
    };
    if let Some(n) = p["hashed_packets"].as_u64().filter(|n| *n > 0) {
        counts.push_str(&format!(", {n} packets by hash (flow table full)"));
    }
    format!("{}:{counts} ({})", s(&p["how"]), s(&p["why"]))
}

/// `status`'s receive hash row: per interface, the NIC's hash fields per flow type
/// (`g-out tcp4 sdfn udp4 sdfn tcp6 sdfn udp6 sd (why)`), or that it has none.
fn rx_hash_row(r: &Value) -> String {
    let Some(ifaces) = r.as_object() else {
        return "-".into();
    };
    let parts: Vec<String> = ifaces
        .iter()
        .map(|(name, v)| match v["flows"].as_object() {
            Some(flows) if v["supported"] == Value::Bool(true) => {
                let flows: Vec<String> = flows.iter().map(|(f, h)| flow_hash(f, h)).collect();
                format!("{name}: {}", flows.join(", "))
            }
            _ => format!("{name}: not read ({})", s(&v["why"])),
        })
        .collect();
    parts.join("; ")
}

/// One flow type of the receive hash row: `tcp6 sdfn (was sd)`, `udp6 none (why)`.
fn flow_hash(flow: &str, h: &Value) -> String {
    let letters = |v: &Value| match s(v) {
        l if l.is_empty() => "none".to_owned(),
        l => l,
    };
    let (before, now) = (letters(&h["before"]), letters(&h["now"]));
    let changed = if before != now {
        format!(" (was {before})")
    } else {
        String::new()
    };
    let err = h["error"]
        .as_str()
        .map_or(String::new(), |e| format!(" ({e})"));
    format!("{flow} {now}{changed}{err}")
}

/// `status`'s CPUs: `workers 0,1 (gateway.cpus), reaper 0`, then any interrupt warning.
fn cpus_row(c: &Value) -> String {
    if !c.is_object() {
        return "-".into();
    }
    let list = |v: &Value| {
        v.as_array().map_or_else(String::new, |a| {
            a.iter().map(s).collect::<Vec<_>>().join(",")
        })
    };
    let mut out = format!(
        "workers {} ({}), reaper {}",
        list(&c["workers"]),
        if c["configured"].as_bool() == Some(true) {
            "gateway.cpus"
        } else {
            "the first CPUs allowed"
        },
        c["reaper"]
            .as_u64()
            .map_or("not pinned".into(), |r| r.to_string())
    );
    for w in c["irq_warnings"].as_array().into_iter().flatten() {
        out.push_str("; warning: ");
        out.push_str(&s(w));
    }
    out
}

fn secs(ms: &Value) -> String {
    ms.as_u64().map_or_else(
        || "-".into(),
        |m| format!("{}.{:01}s", m / 1000, (m % 1000) / 100),
    )
}

/// `stats`: every counter, total then per worker and the reaper's (`REAPER`: expiries,
/// its early drops, ports given back); drops with their explanation.
fn stats_table(st: &Value) -> String {
    let workers = st["workers"].as_array().cloned().unwrap_or_default();
    let reaper = st["reaper"].as_object();
    let mut head = vec!["COUNTER".to_owned(), "TOTAL".to_owned()];
    head.extend((0..workers.len()).map(|i| format!("W{i}")));
    if reaper.is_some() {
        head.push("REAPER".to_owned());
    }
    let mut rows = vec![head];
    for part in ["engine", "io"] {
        if let Some(m) = st["total"][part].as_object() {
            for (k, v) in m.iter().filter(|(k, _)| *k != "drops") {
                let mut r = vec![format!("{part}.{k}"), s(v)];
                r.extend(workers.iter().map(|w| s(&w[part][k])));
                if let Some(re) = reaper {
                    r.push(if part == "engine" {
                        s(&re[k])
                    } else {
                        "-".into()
                    });
                }
                rows.push(r);
            }
        }
    }
    let mut out = columns(&rows);
    out.push_str("\ndrops:\n");
    let mut rows = vec![];
    if let Some(m) = st["total"]["engine"]["drops"].as_object() {
        for (k, v) in m {
            let mut r = vec![k.clone(), s(v)];
            r.extend(workers.iter().map(|w| s(&w["engine"]["drops"][k])));
            if let Some(re) = reaper {
                r.push(s(&re["drops"][k]));
            }
            r.push(s(&st["drop_reasons"][k]));
            rows.push(r);
        }
    }
    out.push_str(&columns(&rows));
    // -- XDP fast path: its own entry, not a worker --
    if let Some(m) = st["xdp_fast_path"].as_object() {
        out.push_str("\nxdp fast path:\n");
        let rows: Vec<Vec<String>> = m.iter().map(|(k, v)| vec![k.clone(), s(v)]).collect();
        out.push_str(&columns(&rows));
    }
    out
}

#[cfg(test)]
mod tests;
