//! The control API: versioned JSON lines on the control socket, for every mode.
//!
//! A request line that starts with `{` is a JSON request; any other line is one of the
//! ILA text verbs (`super`). Every request names the protocol version (`"v":1`) and a
//! command; every answer is one JSON object per line:
//!
//! ```text
//! > {"v":1,"cmd":"census"}
//! < {"v":1,"ok":true,"census":{"capacity":65536,"live":3,"dead_pending":0,"by_proto":{"tcp":1,"udp":2,"icmp":0},"tcp":{"established":1,...},"bindings":3}}
//! > {"v":1,"cmd":"sessions","filter":{"proto":"udp","inside":"10.0.0.2"},"limit":100}
//! < {"proto":"udp","inside":"10.0.0.2:40001","public":"198.51.100.1:40001","remote":"203.0.113.5:7","remote_inside":"203.0.113.5:7","origin":"inside","state":null,"idle_ms":120,"expires_in_ms":299880}
//! < {"v":1,"ok":true,"end":"sessions","count":1}
//! > {"v":1,"cmd":"nope"}
//! < {"v":1,"ok":false,"error":"unknown cmd \"nope\"; expected one of: sessions, bindings, pool, census, stats, status, reload"}
//! ```
//!
//! Commands:
//! - `sessions` (streaming): live sessions, filtered by `filter` (`proto`, `inside`,
//!   `inside_port`, `public`, `public_port`, `remote`, `remote_port`; all optional, all
//!   must match) and capped at `limit`. Each session: inside, public and remote endpoints
//!   (`remote_inside`: the remote as the inside host addresses it, NAT64's Pref64
//!   address), who opened it (`origin`), TCP state, idle time and time to expiry. (The age
//!   of a session is not kept: its slot is exactly one cache line, the data path's.)
//! - `bindings` (streaming): NAT44/NAT64 bindings (protocol, inside, public, sessions,
//!   static); in ILA mode the mappings (`identifier`, `locator`).
//! - `pool` (streaming): per public address, ports taken per protocol, bindings and
//!   subscribers (distinct inside hosts).
//! - `census`: sessions by protocol and TCP state, capacity, live, dead waiting.
//! - `stats`: every engine and I/O counter and every drop reason, per worker and total,
//!   and each drop reason's one-line explanation.
//! - `status`: mode, interfaces, backend in use and why, workers, uptime, configuration
//!   file and the SHA-256 of its bytes, version.
//! - `reload`: calls the gateway's reload hook ([`ReloadHook`]), answers its message.
//!
//! Streaming answers are one object per item (without `"v"`), then an end line
//! `{"v":1,"ok":true,"end":CMD,"count":N}`; a client reads until a line with `"v"`.
//! Errors are `{"v":1,"ok":false,"error":"..."}`, always before any item. A request with
//! another version is refused (`unsupported version`), so a future `"v":2` client learns
//! it speaks to an older gateway. Lines are capped at [`super::MAX_LINE`] bytes.
//!
//! The listings walk the engine's lock-free tables ([`engine::introspect`]) on the
//! client's thread, writing as they go: the workers never wait for a listing, and a
//! client that stops reading only stalls its own thread (until the write timeout).

use std::io::{self, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use conntrack::{Proto, Timestamp};
use engine::any::AnyMode;
use engine::introspect::{tcp_state_name, SessionFilter, SessionInfo, TCP_STATES};
use engine::reload::ReloadAction;
use engine::{Counters, DropReason};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::live::IoCounters;

/// The protocol version this gateway speaks.
pub const VERSION: u64 = 1;

/// The reload the `reload` command triggers (see [`crate::reload::ReloadHook`]); `None`
/// in [`ApiState`] answers "reload not supported".
pub use crate::reload::ReloadHook;

/// Every worker's counters now: (engine, I/O) per worker.
pub type CountersFn = Box<dyn Fn() -> Vec<(Counters, IoCounters)> + Send + Sync>;

/// Reads the reaper's counters (sessions expired, early drops, ports given back).
pub type ReaperFn = Box<dyn Fn() -> Counters + Send + Sync>;

/// The workers' clock, as the engine sees it.
pub type ClockFn = Box<dyn Fn() -> Timestamp + Send + Sync>;

/// One interface as `status` reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkFacts {
    /// Name.
    pub name: String,
    /// Interface index.
    pub index: u32,
    /// MTU.
    pub mtu: u32,
}

/// What `status` reports, fixed at start-up (the configuration's hash: at the last reload).
#[derive(Clone, Debug)]
pub struct GatewayFacts {
    /// The mode's name.
    pub mode: &'static str,
    /// Inside and outside interfaces.
    pub links: [LinkFacts; 2],
    /// The backend in use (`Opened::describe`).
    pub backend: String,
    /// Why that one (configured, or the fallback's reason).
    pub backend_why: String,
    /// Worker threads.
    pub workers: usize,
    /// When the gateway started.
    pub started: Instant,
    /// The configuration file, if any; a reload that applies updates its hash.
    pub config: Option<Arc<std::sync::Mutex<ConfigSource>>>,
    /// Where the threads run, and the warnings about workers on CPUs that take the
    /// interfaces' interrupts.
    pub cpus: Option<(crate::live::cpus::CpuPlan, Vec<String>)>,
    /// How the workers share the traffic.
    pub placement: Option<crate::live::Placement>,
    /// The NIC's receive hash fields per interface, as found and as changed.
    pub rx_hash: Option<Value>,
}

/// The configuration file a gateway was started with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigSource {
    /// Its path as given.
    pub path: PathBuf,
    /// SHA-256 of the bytes in force (read at start-up or by the last reload that applied),
    /// lower-case hex (what `sha256sum` prints).
    pub sha256: String,
}

/// What the binary hands the live gateway for the control API.
#[derive(Default)]
pub struct ApiOptions {
    /// The configuration file, for `status`.
    pub config: Option<ConfigSource>,
    /// The reload hook (`None`: ILA's mapping reload in ILA mode, else "not supported").
    pub reload: Option<ReloadHook>,
    /// The socket path is the default one, not configured: if it cannot be bound (another
    /// gateway has it) a mode other than ILA runs on without it, with a warning.
    pub default_socket: bool,
}

impl std::fmt::Debug for ApiOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiOptions")
            .field("config", &self.config)
            .field("reload", &self.reload.is_some())
            .field("default_socket", &self.default_socket)
            .finish()
    }
}

/// What the JSON commands read: the mode's tables, the counters, the start-up facts.
pub struct ApiState {
    /// The mode's shared state.
    pub mode: Arc<AnyMode>,
    /// The workers' clock.
    pub clock: ClockFn,
    /// The workers' counters.
    pub counters: CountersFn,
    /// The reaper's counters (`None`: a mode without a reaper).
    pub reaper: Option<ReaperFn>,
    /// Start-up facts.
    pub facts: GatewayFacts,
    /// The reload hook, if reloading is supported.
    pub reload: Option<ReloadHook>,
    /// The route announcer's state (`None`: no `[routing]`).
    pub routing: Option<Arc<crate::routing::RouteStatus>>,
    /// The XDP fast path's state and counters (`None`: a gateway that never has one, e.g.
    /// offline).
    pub fast_path: Option<Arc<crate::live::FastPathStatus>>,
    /// The packet trace the workers fill (`None`: no workers to trace, e.g. offline).
    pub tracer: Option<Arc<crate::trace::Tracer>>,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("mode", &self.mode.name())
            .field("facts", &self.facts)
            .field("reload", &self.reload.is_some())
            .finish()
    }
}

/// A parsed JSON request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiRequest {
    /// Live sessions.
    Sessions {
        /// Which.
        filter: SessionFilter,
        /// At most this many.
        limit: Option<u64>,
    },
    /// End the live sessions passing `filter` as the reaper ends expired ones (their
    /// bindings and ports released); with `dry_run`, only count them.
    ClearSessions {
        /// Which.
        filter: SessionFilter,
        /// Count only.
        dry_run: bool,
    },
    /// Trace the next packets matching `filter` (see [`crate::trace`]): at most `count`,
    /// for at most `timeout`.
    Trace {
        /// Which packets.
        filter: crate::trace::TraceFilter,
        /// At most this many.
        count: usize,
        /// For at most this long.
        timeout: Duration,
    },
    /// Withdraw the announced routes and keep them withdrawn (`cancel`: announce again
    /// while healthy); answered once the announcer has acted.
    Drain {
        /// Undo a drain.
        cancel: bool,
    },
    /// Bindings (ILA: mappings).
    Bindings {
        /// At most this many.
        limit: Option<u64>,
    },
    /// Pool usage per public address.
    Pool,
    /// Counts over the tables.
    Census,
    /// Counters.
    Stats,
    /// Start-up facts and uptime.
    Status,
    /// Run the reload hook; with `dry_run`, only say what it would change or why it
    /// would refuse.
    Reload {
        /// Check and report only.
        dry_run: bool,
    },
}

impl ApiRequest {
    /// The command's name.
    pub fn cmd(&self) -> &'static str {
        match self {
            ApiRequest::Sessions { .. } => "sessions",
            ApiRequest::ClearSessions { .. } => "clear_sessions",
            ApiRequest::Trace { .. } => "trace",
            ApiRequest::Drain { .. } => "drain",
            ApiRequest::Bindings { .. } => "bindings",
            ApiRequest::Pool => "pool",
            ApiRequest::Census => "census",
            ApiRequest::Stats => "stats",
            ApiRequest::Status => "status",
            ApiRequest::Reload { .. } => "reload",
        }
    }
}

const COMMANDS: &str = "sessions, clear_sessions, bindings, pool, census, stats, status, reload";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequest {
    v: Value,
    cmd: String,
    #[serde(default)]
    filter: Option<RawFilter>,
    #[serde(default)]
    limit: Option<u64>,
    #[serde(default)]
    dry_run: Option<bool>,
    #[serde(default, rename = "match")]
    trace_match: Option<RawTraceMatch>,
    #[serde(default)]
    count: Option<u64>,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default)]
    cancel: Option<bool>,
}

/// A trace's `match` object.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawTraceMatch {
    proto: Option<String>,
    host: Option<IpAddr>,
    port: Option<u16>,
    direction: Option<String>,
    drop_reason: Option<String>,
}

impl crate::trace::TraceFilter {
    /// A trace's `match` object, checked as the control API checks it.
    pub fn from_json(v: &Value) -> Result<Self, String> {
        RawTraceMatch::deserialize(v)
            .map_err(|e| format!("bad trace filter: {e}"))?
            .parse()
    }
}

/// How long `drain` waits for the announcer to withdraw (or, cancelled, announce).
pub const DRAIN_WAIT: Duration = Duration::from_secs(5);

/// The most packets one trace takes, and the longest it runs.
pub const TRACE_MAX_COUNT: u64 = 10_000;
/// The longest a trace runs.
pub const TRACE_MAX_TIMEOUT: Duration = Duration::from_secs(300);

impl RawTraceMatch {
    fn parse(self) -> Result<crate::trace::TraceFilter, String> {
        let proto = self.proto.map(|p| p.to_ascii_lowercase());
        if let Some(p) = &proto {
            if !matches!(p.as_str(), "tcp" | "udp" | "icmp" | "icmpv6" | "sctp")
                && p.parse::<u8>().is_err()
            {
                return Err(format!(
                    "unknown proto \"{p}\" (tcp, udp, icmp, sctp or a protocol number)"
                ));
            }
        }
        if let Some(d) = &self.direction {
            if d != "in" && d != "out" {
                return Err(format!("direction \"{d}\": expected \"in\" or \"out\""));
            }
        }
        let drop_reason = self
            .drop_reason
            .map(|r| {
                DropReason::ALL
                    .iter()
                    .copied()
                    .find(|x| x.as_str() == r)
                    .ok_or_else(|| format!("unknown drop reason \"{r}\""))
            })
            .transpose()?;
        Ok(crate::trace::TraceFilter {
            proto,
            host: self.host,
            port: self.port,
            direction: self.direction,
            drop_reason,
        })
    }
}

impl RawFilter {
    fn parse(self) -> Result<SessionFilter, String> {
        Ok(SessionFilter {
            proto: self.proto.as_deref().map(parse_proto).transpose()?,
            inside: self.inside,
            inside_port: self.inside_port,
            public: self.public,
            public_port: self.public_port,
            remote: self.remote,
            remote_port: self.remote_port,
        })
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFilter {
    proto: Option<String>,
    inside: Option<IpAddr>,
    inside_port: Option<u16>,
    public: Option<IpAddr>,
    public_port: Option<u16>,
    remote: Option<IpAddr>,
    remote_port: Option<u16>,
}

/// A protocol name (`tcp`, `udp`, `icmp`, `sctp`, `other`; `icmpv6` for `icmp`).
pub fn parse_proto(s: &str) -> Result<Proto, String> {
    let s = s.to_ascii_lowercase();
    let name = if s == "icmpv6" { "icmp" } else { s.as_str() };
    Proto::ALL
        .into_iter()
        .find(|p| p.as_str() == name)
        .ok_or_else(|| format!("unknown proto \"{s}\"; expected tcp, udp, icmp, sctp or other"))
}

/// `{"tcp": .., "udp": .., ...}`: one count per tracked protocol.
fn per_proto<T: Copy + Into<Value>>(counts: &[T; Proto::COUNT]) -> Value {
    Value::Object(
        Proto::ALL
            .iter()
            .map(|p| (p.as_str().to_owned(), counts[p.index()].into()))
            .collect(),
    )
}

/// Parses one JSON request line.
pub fn parse(line: &str) -> Result<ApiRequest, String> {
    let raw: RawRequest =
        serde_json::from_str(line.trim()).map_err(|e| format!("bad request: {e}"))?;
    if raw.v.as_u64() != Some(VERSION) {
        return Err(format!(
            "unsupported version {}; this gateway speaks v{VERSION}",
            raw.v
        ));
    }
    let no_filter = |what: &str| -> Result<(), String> {
        if raw.filter.is_some() {
            return Err(format!(
                "\"filter\" applies to sessions and clear_sessions, not {what}"
            ));
        }
        Ok(())
    };
    if raw.dry_run.is_some() && !matches!(raw.cmd.as_str(), "clear_sessions" | "reload") {
        return Err(format!(
            "\"dry_run\" applies to clear_sessions and reload, not {}",
            raw.cmd
        ));
    }
    if (raw.trace_match.is_some() || raw.count.is_some() || raw.timeout_ms.is_some())
        && raw.cmd != "trace"
    {
        return Err(format!(
            "\"match\", \"count\" and \"timeout_ms\" apply to trace, not {}",
            raw.cmd
        ));
    }
    if raw.cancel.is_some() && raw.cmd != "drain" {
        return Err(format!("\"cancel\" applies to drain, not {}", raw.cmd));
    }
    let req = match raw.cmd.as_str() {
        "sessions" => ApiRequest::Sessions {
            filter: raw.filter.unwrap_or_default().parse()?,
            limit: raw.limit,
        },
        "clear_sessions" => {
            if raw.limit.is_some() {
                return Err(
                    "\"limit\" applies to sessions and bindings, not clear_sessions".into(),
                );
            }
            ApiRequest::ClearSessions {
                filter: raw.filter.unwrap_or_default().parse()?,
                dry_run: raw.dry_run.unwrap_or(false),
            }
        }
        "trace" => {
            no_filter("trace")?;
            let count = raw.count.unwrap_or(10);
            if !(1..=TRACE_MAX_COUNT).contains(&count) {
                return Err(format!("count {count}: between 1 and {TRACE_MAX_COUNT}"));
            }
            let timeout = Duration::from_millis(raw.timeout_ms.unwrap_or(10_000));
            if timeout.is_zero() || timeout > TRACE_MAX_TIMEOUT {
                return Err(format!(
                    "timeout_ms {}: between 1 and {}",
                    timeout.as_millis(),
                    TRACE_MAX_TIMEOUT.as_millis()
                ));
            }
            ApiRequest::Trace {
                filter: raw.trace_match.unwrap_or_default().parse()?,
                count: count as usize,
                timeout,
            }
        }
        "drain" => {
            no_filter("drain")?;
            ApiRequest::Drain {
                cancel: raw.cancel.unwrap_or(false),
            }
        }
        "bindings" => {
            no_filter("bindings")?;
            ApiRequest::Bindings { limit: raw.limit }
        }
        other => {
            no_filter(other)?;
            if raw.limit.is_some() {
                return Err(format!(
                    "\"limit\" applies to sessions and bindings, not {other}"
                ));
            }
            match other {
                "pool" => ApiRequest::Pool,
                "census" => ApiRequest::Census,
                "stats" => ApiRequest::Stats,
                "status" => ApiRequest::Status,
                "reload" => ApiRequest::Reload {
                    dry_run: raw.dry_run.unwrap_or(false),
                },
                _ => {
                    return Err(format!(
                        "unknown cmd \"{other}\"; expected one of: {COMMANDS}"
                    ))
                }
            }
        }
    };
    Ok(req)
}

/// The error line for `msg`.
pub fn error_line(msg: &str) -> String {
    let mut s = json!({"v": VERSION, "ok": false, "error": msg}).to_string();
    s.push('\n');
    s
}

fn ok_line(key: &str, value: Value) -> String {
    let mut m = Map::new();
    m.insert("v".into(), VERSION.into());
    m.insert("ok".into(), true.into());
    m.insert(key.into(), value);
    let mut s = Value::Object(m).to_string();
    s.push('\n');
    s
}

fn end_line(cmd: &str, count: u64) -> String {
    let mut s = json!({"v": VERSION, "ok": true, "end": cmd, "count": count}).to_string();
    s.push('\n');
    s
}

/// Writes session `s` as one JSON line into `buf` (cleared first): by hand, so that a
/// listing of a million sessions costs no allocation per session.
pub fn session_line(s: &SessionInfo, buf: &mut String) {
    use std::fmt::Write as _;
    buf.clear();
    // Addresses, ports and names never need JSON escaping.
    let _ = write!(
        buf,
        "{{\"proto\":\"{}\",\"inside\":\"{}\",\"public\":\"{}\",\"remote\":\"{}\",\"remote_inside\":\"{}\",\"origin\":\"{}\",\"state\":",
        s.proto.as_str(),
        s.inside,
        s.public,
        s.remote,
        s.remote_inside,
        if s.from_inside { "inside" } else { "outside" },
    );
    match s.tcp {
        Some(t) => {
            let _ = write!(buf, "\"{}\"", tcp_state_name(t));
        }
        None => buf.push_str("null"),
    }
    let _ = writeln!(
        buf,
        ",\"idle_ms\":{},\"expires_in_ms\":{},\"age_ms\":{}}}",
        s.idle.as_millis(),
        s.expires_in.as_millis(),
        s.age.as_millis()
    );
}

/// Every engine counter (drops by reason, every reason) as a JSON object.
pub fn engine_json(c: &Counters) -> Value {
    let drops: Map<String, Value> = DropReason::ALL
        .iter()
        .map(|r| (r.as_str().to_owned(), c.dropped(*r).into()))
        .collect();
    json!({
        "forwarded": c.forwarded,
        "dropped": c.total_dropped(),
        "sessions_created": c.sessions_created,
        "sessions_expired": c.sessions_expired,
        "sessions_early_dropped": c.sessions_early_dropped,
        "bindings_created": c.bindings_created,
        "port_holds_cut_short": c.port_holds_cut_short,
        "ports_released_unheld": c.ports_released_unheld,
        "icmp_errors_translated": c.icmp_errors_translated,
        "hairpinned": c.hairpinned,
        "fragments_translated": c.fragments_translated,
        "icmp_errors_sent": c.icmp_errors_sent,
        "fragmented": c.fragmented,
        "icmp_errors_limited_source": c.icmp_errors_limited_source,
        "icmp_errors_limited": c.icmp_errors_limited,
        "drops": drops,
    })
}

/// Every I/O counter as a JSON object.
pub fn io_json(io: &IoCounters) -> Value {
    json!({
        "rx_inside": io.rx[0],
        "rx_outside": io.rx[1],
        "tx_inside": io.tx[0],
        "tx_outside": io.tx[1],
        "to_kernel": io.to_kernel,
        "via_kernel": io.via_kernel,
        "probe_skipped": io.probe_skipped,
        "no_route": io.no_route,
        "oversize": io.oversize,
        "csum_completed": io.csum_completed,
        "tx_dropped": io.tx_dropped,
        "gso": io.gso,
        "not_for_us": io.not_for_us,
        "gso_refused": io.gso_refused,
    })
}

/// The `stats` object for per-worker counters and the reaper's (in the total, and on
/// their own under `reaper`).
pub fn stats_json(workers: &[(Counters, IoCounters)], reaper: Option<&Counters>) -> Value {
    let (mut e, mut io) = (Counters::default(), IoCounters::default());
    for (we, wio) in workers {
        e.merge(we);
        io.merge(wio);
    }
    if let Some(r) = reaper {
        e.merge(r);
    }
    let explain: Map<String, Value> = DropReason::ALL
        .iter()
        .map(|r| (r.as_str().to_owned(), r.explain().into()))
        .collect();
    json!({
        "total": {"engine": engine_json(&e), "io": io_json(&io)},
        "workers": workers
            .iter()
            .map(|(e, io)| json!({"engine": engine_json(e), "io": io_json(io)}))
            .collect::<Vec<_>>(),
        "reaper": reaper.map_or(Value::Null, engine_json),
        "drop_reasons": explain,
    })
}

/// The `census` object.
pub fn census_json(c: &engine::introspect::Census) -> Value {
    let tcp: Map<String, Value> = TCP_STATES
        .iter()
        .map(|s| (tcp_state_name(*s).to_owned(), c.tcp[*s as usize].into()))
        .collect();
    json!({
        "capacity": c.capacity,
        "live": c.live,
        "dead_pending": c.dead_pending,
        "by_proto": per_proto(&c.by_proto),
        "tcp": tcp,
        "bindings": c.bindings,
        "port_blocks": {
            "taken": c.blocks.taken,
            "released": c.blocks.released,
            "limit_refused": c.blocks.limit_refused,
            "exhausted": c.blocks.exhausted,
        },
    })
}

impl ApiState {
    /// Answers `line` (a JSON request) on `out`; `stop` ends a long listing early.
    /// Returns the request's command when it parsed (for the log).
    pub fn handle(
        &self,
        line: &str,
        out: &mut dyn Write,
        stop: &AtomicBool,
    ) -> io::Result<Result<ApiRequest, String>> {
        let req = match parse(line) {
            Ok(r) => r,
            Err(e) => {
                out.write_all(error_line(&e).as_bytes())?;
                return Ok(Err(e));
            }
        };
        self.answer(&req, out, stop)?;
        Ok(Ok(req))
    }

    /// Answers a parsed request on `out`.
    pub fn answer(
        &self,
        req: &ApiRequest,
        out: &mut dyn Write,
        stop: &AtomicBool,
    ) -> io::Result<()> {
        match req {
            ApiRequest::Sessions { filter, limit } => {
                let now = (self.clock)();
                let limit = limit.unwrap_or(u64::MAX);
                let mut buf = String::with_capacity(256);
                let (mut n, mut err) = (0u64, None);
                if limit > 0 {
                    self.mode.sessions(now, filter, &mut |s| {
                        session_line(s, &mut buf);
                        if let Err(e) = out.write_all(buf.as_bytes()) {
                            err = Some(e);
                            return false;
                        }
                        n += 1;
                        n < limit && !stop.load(Ordering::Relaxed)
                    });
                }
                if let Some(e) = err {
                    return Err(e);
                }
                out.write_all(end_line("sessions", n).as_bytes())
            }
            ApiRequest::ClearSessions { filter, dry_run } => {
                let now = (self.clock)();
                let line = match self.mode.clear_sessions(now, filter, *dry_run) {
                    Ok(n) => ok_line("clear_sessions", json!({"dry_run": dry_run, "sessions": n})),
                    Err(e) => error_line(&format!("clear_sessions: {e}")),
                };
                out.write_all(line.as_bytes())
            }
            ApiRequest::Trace {
                filter,
                count,
                timeout,
            } => self.trace(filter, *count, *timeout, out, stop),
            ApiRequest::Drain { cancel } => {
                let line = match &self.routing {
                    None => error_line(
                        "drain: this gateway announces no routes ([routing]); move its traffic \
                         by other means",
                    ),
                    Some(r) => {
                        r.set_draining(!cancel);
                        // The announcer acts within its health interval.
                        let deadline = Instant::now() + DRAIN_WAIT;
                        while r.announced() != *cancel
                            && Instant::now() < deadline
                            && !stop.load(Ordering::Relaxed)
                        {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        ok_line("drain", r.json())
                    }
                };
                out.write_all(line.as_bytes())
            }
            ApiRequest::Bindings { limit } => {
                let limit = limit.unwrap_or(u64::MAX);
                let mut n = 0u64;
                if let AnyMode::Ila(_) = &*self.mode {
                    for (id, loc) in self.mode.ila_mappings() {
                        if n >= limit {
                            break;
                        }
                        let line = json!({
                            "identifier": engine::ila::Addr64(id).to_string(),
                            "locator": engine::ila::Addr64(loc).to_string(),
                        });
                        writeln!(out, "{line}")?;
                        n += 1;
                    }
                } else if limit > 0 {
                    let mut err = None;
                    self.mode.bindings(&mut |b| {
                        let line = json!({
                            "proto": b.proto.as_str(),
                            "inside": b.inside.to_string(),
                            "public": b.public.to_string(),
                            "sessions": b.sessions,
                            "static": b.is_static,
                        });
                        if let Err(e) = writeln!(out, "{line}") {
                            err = Some(e);
                            return false;
                        }
                        n += 1;
                        n < limit && !stop.load(Ordering::Relaxed)
                    });
                    if let Some(e) = err {
                        return Err(e);
                    }
                }
                out.write_all(end_line("bindings", n).as_bytes())
            }
            ApiRequest::Pool => {
                let usage = self.mode.pool_usage();
                for u in &usage {
                    let line = json!({
                        "addr": u.addr.to_string(),
                        "ports_per_proto": u.ports_per_proto,
                        "taken": per_proto(&u.taken),
                        "bindings": u.bindings,
                        "subscribers": u.subscribers,
                        "blocks_held": u.blocks_held,
                    });
                    writeln!(out, "{line}")?;
                }
                out.write_all(end_line("pool", usage.len() as u64).as_bytes())
            }
            ApiRequest::Census => {
                let c = self.mode.census();
                out.write_all(ok_line("census", census_json(&c)).as_bytes())
            }
            ApiRequest::Stats => {
                let workers = (self.counters)();
                let reaper = self.reaper.as_ref().map(|f| f());
                let mut v = stats_json(&workers, reaper.as_ref());
                // The XDP fast path: its own entry, not a worker.
                v["xdp_fast_path"] = self
                    .fast_path
                    .as_ref()
                    .map_or(Value::Null, |f| f.stats_json());
                out.write_all(ok_line("stats", v).as_bytes())
            }
            ApiRequest::Status => out.write_all(ok_line("status", self.status_json()).as_bytes()),
            ApiRequest::Reload { dry_run } => {
                let action = if *dry_run {
                    ReloadAction::Preview
                } else {
                    ReloadAction::Apply
                };
                let line = match &self.reload {
                    None => error_line("reload not supported"),
                    Some(hook) => match hook(action) {
                        Ok(msg) => ok_line("reload", msg.into()),
                        Err(e) => error_line(&format!("reload: {e}")),
                    },
                };
                out.write_all(line.as_bytes())
            }
        }
    }

    /// Streams the records of the next `count` packets matching `filter`, each as it comes,
    /// until `count`, `timeout`, the client leaving or `stop`; then the end line with how
    /// many packets the fast path forwarded meanwhile (which no worker saw).
    fn trace(
        &self,
        filter: &crate::trace::TraceFilter,
        count: usize,
        timeout: Duration,
        out: &mut dyn Write,
        stop: &AtomicBool,
    ) -> io::Result<()> {
        let Some(tracer) = &self.tracer else {
            return out
                .write_all(error_line("trace: this gateway has no workers to trace").as_bytes());
        };
        let fast = || {
            self.fast_path
                .as_ref()
                .and_then(|f| f.counters())
                .map(|c| c.packets)
        };
        let rx = match tracer.arm(filter.clone(), count) {
            Ok(rx) => rx,
            Err(e) => return out.write_all(error_line(&format!("trace: {e}")).as_bytes()),
        };
        let fast_before = fast();
        let deadline = Instant::now() + timeout;
        let (mut n, mut result) = (0usize, Ok(()));
        while n < count && !stop.load(Ordering::Relaxed) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match rx.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(r) => {
                    n += 1;
                    result = out
                        .write_all(format!("{r}\n").as_bytes())
                        .and_then(|()| out.flush());
                    if result.is_err() {
                        break;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        tracer.disarm();
        result?;
        let fast_path = match (fast_before, fast()) {
            (Some(a), Some(b)) => json!(b.saturating_sub(a)),
            _ => Value::Null,
        };
        let end = json!({
            "v": VERSION, "ok": true, "end": "trace", "count": n,
            "complete": n == count,
            "fast_path_packets": fast_path,
        });
        out.write_all(format!("{end}\n").as_bytes())
    }

    fn status_json(&self) -> Value {
        let f = &self.facts;
        let link = |l: &LinkFacts| json!({"name": l.name, "index": l.index, "mtu": l.mtu});
        json!({
            "mode": f.mode,
            "inside": link(&f.links[0]),
            "outside": link(&f.links[1]),
            "backend": f.backend,
            "backend_why": f.backend_why,
            "workers": f.workers,
            "placement": f.placement.as_ref().map(|p| p.status_json()),
            "rx_hash": f.rx_hash,
            "cpus": f.cpus.as_ref().map(|(p, warnings)| json!({
                "workers": p.workers,
                "reaper": p.reaper,
                "configured": p.configured,
                "irq_warnings": warnings,
            })),
            "uptime_s": f.started.elapsed().as_secs(),
            "config": f.config.as_ref().map(|c| {
                let c = c.lock().unwrap_or_else(|e| e.into_inner());
                json!({"path": c.path.display().to_string(), "sha256": c.sha256})
            }),
            "version": env!("CARGO_PKG_VERSION"),
            "pid": std::process::id(),
            "sessions": self.mode.census().live,
            "reload": self.reload.is_some(),
            // Deterministic NAT.
            "deterministic": self.mode.deterministic().map(|m| json!({
                "inside": m.inside().to_string(),
                "outside": m.outside().to_string(),
                "ratio": m.ratio(),
                "ports_per_subscriber": m.ports_per_subscriber(),
            })),
            "routing": self.routing.as_ref().map(|r| r.json()),
            // The XDP fast path: on or off, and why.
            "xdp_fast_path": self.fast_path.as_ref().map(|f| f.status_json()),
        })
    }
}

/// How long a write to a client may block before the client is dropped (it stopped
/// reading): bounds what a stuck client holds (its thread, one of `MAX_CLIENTS`).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests;
