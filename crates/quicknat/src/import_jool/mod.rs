//! `quicknat import jool FILE`: Jool's atomic configuration (the JSON file of
//! `jool file handle` and `jool_siit file handle`) turned into a quicknat TOML file.
//!
//! A NAT64 instance becomes `[nat64]` (pool6, pool4, static BIB entries, timeouts,
//! filtering), a SIIT instance `[siit]` (pool6, EAMT, the RFC 6791 pool). Nothing is
//! dropped silently: every Jool setting without an equivalent, and every key this
//! importer does not know, is listed at the top of the output (`# not imported: ...`)
//! and on stderr; settings that map only approximately are listed too
//! (`# approximate: ...`), and those quicknat always behaves like as `# built in: ...`.
//! The output is loaded with quicknat's own loader before it is written, so what the
//! importer hands out is a configuration quicknat accepts. Errors name the file and the
//! JSON path (`jool.json: eamt[2].ipv4 prefix: ...`, entries counted from 1).

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use engine::config::PortRange;
use engine::siit::Eam;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use xlat::prefix::{Ipv4Prefix, Ipv6Prefix};
use xlat::rfc6052::Pref64;

/// Arguments of `quicknat import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    #[command(subcommand)]
    what: ImportWhat,
}

/// What to import.
#[derive(Debug, Subcommand)]
enum ImportWhat {
    /// Convert Jool's atomic configuration (the JSON of `jool file handle` or
    /// `jool_siit file handle`, one SIIT or NAT64 instance) into a quicknat TOML file.
    /// Every Jool setting without an equivalent is listed at the top of the output and
    /// on stderr.
    Jool(JoolArgs),
}

/// Arguments of `quicknat import jool`.
#[derive(Debug, Args)]
pub struct JoolArgs {
    /// Jool's atomic configuration (JSON).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The kind of Jool instance: `nat64` (the `jool` command) or `siit` (`jool_siit`).
    /// Default: told from the file (pool4 and bib are NAT64's, eamt and denylist4
    /// SIIT's).
    #[arg(long, value_enum, value_name = "MODE")]
    mode: Option<JoolMode>,
    /// [gateway] inside: the interface facing the IPv6 hosts (NAT64) or the IPv4 side
    /// (SIIT). Default: a placeholder, eth0.
    #[arg(long, value_name = "IF")]
    inside: Option<String>,
    /// [gateway] outside: the interface facing the IPv4 Internet (NAT64) or the IPv6
    /// side (SIIT). Default: a placeholder, eth1.
    #[arg(long, value_name = "IF")]
    outside: Option<String>,
    /// NAT64: the pool4 addresses (prefix or address; repeat for more) when the file has
    /// no pool4 (Jool then masks with the node's own addresses, quicknat needs a pool).
    #[arg(long = "pool4", value_name = "PREFIX")]
    pool4: Vec<String>,
    /// Write the TOML to this file instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    output: Option<PathBuf>,
}

/// The two kinds of Jool instance the atomic configuration describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum JoolMode {
    /// Stateful NAT64 (`jool`).
    Nat64,
    /// SIIT (`jool_siit`).
    Siit,
}

/// Runs `quicknat import ...`.
pub fn run(args: &ImportArgs) -> anyhow::Result<()> {
    let ImportWhat::Jool(a) = &args.what;
    let bytes =
        std::fs::read(&a.file).with_context(|| format!("cannot read {}", a.file.display()))?;
    let origin = a.file.display().to_string();
    let text = String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("{origin}: not UTF-8 text"))?;
    let opts = Options {
        mode: a.mode,
        inside: a.inside.clone(),
        outside: a.outside.clone(),
        pool4: a.pool4.clone(),
    };
    let out = import(&text, &origin, &opts)?;
    for n in &out.notes {
        if n.kind != NoteKind::BuiltIn {
            eprintln!("{origin}: {}", n.line());
        }
    }
    let count = |k: NoteKind| out.notes.iter().filter(|n| n.kind == k).count();
    let kind = match out.mode {
        JoolMode::Nat64 => "NAT64",
        JoolMode::Siit => "SIIT",
    };
    match (count(NoteKind::NotImported), count(NoteKind::Approximate)) {
        (0, 0) => eprintln!("{origin}: Jool {kind} instance converted, every setting carried over"),
        (n, a) => eprintln!(
            "{origin}: Jool {kind} instance converted: {n} settings not imported, {a} \
             approximate (listed at the top of the output)"
        ),
    }
    match &a.output {
        Some(path) => {
            std::fs::write(path, &out.toml)
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("{origin}: wrote {}", path.display());
        }
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(out.toml.as_bytes())?;
            stdout.flush()?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The importer.

/// What the command line adds to the file.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The instance kind; `None`: told from the file.
    pub mode: Option<JoolMode>,
    /// `[gateway] inside`; `None`: a placeholder.
    pub inside: Option<String>,
    /// `[gateway] outside`; `None`: a placeholder.
    pub outside: Option<String>,
    /// NAT64 pool4 for a file without one.
    pub pool4: Vec<String>,
}

/// The converted configuration and what did not convert exactly.
#[derive(Debug)]
pub struct Imported {
    /// The quicknat TOML, notes at the top; loads with quicknat's loader.
    pub toml: String,
    /// Every setting not imported, imported approximately or built in.
    pub notes: Vec<Note>,
    /// The instance kind.
    pub mode: JoolMode,
}

/// How a Jool setting fared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoteKind {
    /// No equivalent in quicknat (or unknown): left out.
    NotImported,
    /// Imported, but quicknat behaves somewhat differently.
    Approximate,
    /// quicknat always behaves as this value asks: nothing to write.
    BuiltIn,
    /// What `quicknat check-config` warns about the converted file.
    Warning,
}

/// One setting that did not map one to one.
#[derive(Clone, Debug)]
pub struct Note {
    /// Which.
    pub kind: NoteKind,
    /// The JSON path (`global.f-args`), or what the note is about.
    pub path: String,
    /// The value, as JSON, when the note is about one.
    pub value: Option<String>,
    /// Why.
    pub why: String,
}

impl Note {
    /// `not imported: global.f-args = 11 (no equivalent: ...)`.
    pub fn line(&self) -> String {
        let kind = match self.kind {
            NoteKind::NotImported => "not imported",
            NoteKind::Approximate => "approximate",
            NoteKind::BuiltIn => "built in",
            NoteKind::Warning => return format!("check-config warns: {}", self.why),
        };
        match &self.value {
            Some(v) => format!("{kind}: {} = {v} ({})", self.path, self.why),
            None => format!("{kind}: {} ({})", self.path, self.why),
        }
    }
}

/// A refused input: the file, the JSON path and why.
#[derive(Debug)]
pub struct ImportError(String);

impl std::fmt::Display for ImportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ImportError {}

/// Jool's default MTU plateaus (RFC 1191), which quicknat uses, fixed.
const DEFAULT_PLATEAUS: [u64; 11] = [
    65535, 32000, 17914, 8166, 4352, 2002, 1492, 1006, 508, 296, 68,
];

/// Jool's pool4 port range when an entry gives none.
const JOOL_DEFAULT_PORTS: (u16, u16) = (61001, 65535);

/// Converts the atomic configuration `text` (named `origin` in messages).
pub fn import(text: &str, origin: &str, opts: &Options) -> Result<Imported, ImportError> {
    let root: Json = serde_json::from_str(text)
        .map_err(|e| ImportError(format!("{origin}: not valid JSON: {e}")))?;
    let mut cx = Cx {
        origin,
        notes: Vec::new(),
    };
    let file = cx.top(&root)?;
    let mode = cx.mode(&file, opts.mode)?;
    let globals = cx.globals(&file, mode)?;
    let body = match mode {
        JoolMode::Nat64 => cx.nat64(&file, &globals, opts)?,
        JoolMode::Siit => cx.siit(&file, &globals)?,
    };
    let toml = cx.finish(&file, mode, opts, &body)?;
    Ok(Imported {
        toml,
        notes: cx.notes,
        mode,
    })
}

// ---------------------------------------------------------------------------------------
// JSON: a tree that keeps the order of keys and refuses duplicates (Jool refuses them,
// and a map would silently keep only the last).

/// A JSON value.
#[derive(Clone, Debug, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Num(serde_json::Number),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Num(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Num(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        serde_json::Number::from_f64(v)
            .map(Json::Num)
            .ok_or_else(|| E::custom("a number that is not finite"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut v = Vec::new();
        while let Some(e) = seq.next_element()? {
            v.push(e);
        }
        Ok(Json::Arr(v))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut v: Vec<(String, Json)> = Vec::new();
        while let Some((k, e)) = map.next_entry::<String, Json>()? {
            // Jool compares tag names ignoring case; "comment" may repeat.
            if !k.eq_ignore_ascii_case("comment")
                && v.iter().any(|(o, _)| o.eq_ignore_ascii_case(&k))
            {
                return Err(de::Error::custom(format!(
                    "key {} appears twice in one object",
                    quote(&k)
                )));
            }
            v.push((k, e));
        }
        Ok(Json::Obj(v))
    }
}

impl Json {
    /// What kind of value, for messages.
    fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Num(_) => "a number",
            Json::Str(_) => "a string",
            Json::Arr(_) => "an array",
            Json::Obj(_) => "an object",
        }
    }
}

/// A string as a JSON string literal (escaped: never a line break).
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"?\"".to_owned())
}

/// A value as compact JSON on one line, long ones cut.
fn show(v: &Json) -> String {
    fn write(v: &Json, out: &mut String) {
        match v {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Num(n) => out.push_str(&n.to_string()),
            Json::Str(s) => out.push_str(&quote(s)),
            Json::Arr(a) => {
                out.push('[');
                for (i, e) in a.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write(e, out);
                    if out.len() > 200 {
                        break;
                    }
                }
                out.push(']');
            }
            Json::Obj(o) => {
                out.push('{');
                for (i, (k, e)) in o.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&quote(k));
                    out.push_str(": ");
                    write(e, out);
                    if out.len() > 200 {
                        break;
                    }
                }
                out.push('}');
            }
        }
    }
    let mut s = String::new();
    write(v, &mut s);
    const MAX: usize = 100;
    if s.chars().count() > MAX {
        let cut: String = s.chars().take(MAX).collect();
        format!("{cut}...")
    } else {
        s
    }
}

/// A key as a path element: as written when plain, JSON-quoted otherwise.
fn key_name(k: &str) -> String {
    if !k.is_empty()
        && k.len() <= 64
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ' '))
    {
        k.to_owned()
    } else {
        quote(k)
    }
}

// ---------------------------------------------------------------------------------------
// The walk.

/// The top level of the file, its parts found.
#[derive(Default)]
struct File<'j> {
    instance: Option<&'j str>,
    framework: Option<&'j str>,
    global: Option<(&'j str, &'j [(String, Json)])>,
    eamt: Option<(&'j str, &'j [Json])>,
    denylist: Option<(&'j str, &'j [Json])>,
    pool4: Option<(&'j str, &'j [Json])>,
    bib: Option<(&'j str, &'j [Json])>,
    /// Jool 3's top-level RFC 6791 pool.
    pool6791: Option<(&'j str, &'j [Json])>,
    /// Jool 3's top-level pool6.
    pool6: Option<(&'j str, &'j Json)>,
}

/// The global settings quicknat has, as read.
#[derive(Default)]
struct Globals {
    pool6: Option<Pref64OrNull>,
    lowest_ipv6_mtu: Option<u64>,
    zeroize_traffic_class: Option<bool>,
    override_tos: Option<bool>,
    tos: Option<(u8, String)>,
    // SIIT
    amend_udp_checksum_zero: Option<bool>,
    eam_hairpin: Option<&'static str>,
    rfc6791v4: Option<Vec<Ipv4Prefix>>,
    // NAT64
    address_dependent_filtering: Option<bool>,
    drop_icmpv6_info: Option<bool>,
    drop_externally_initiated_tcp: Option<bool>,
    max_simultaneous_opens: Option<u64>,
    udp_timeout: Option<u64>,
    tcp_est_timeout: Option<u64>,
    tcp_trans_timeout: Option<u64>,
    icmp_timeout: Option<u64>,
    logging_bib: bool,
    logging_session: bool,
}

/// A static BIB entry quicknat takes (TCP or UDP).
struct Binding {
    /// `"TCP"` or `"UDP"`.
    proto: &'static str,
    public: (Ipv4Addr, u16),
    inside: (Ipv6Addr, u16),
    /// Where in the file.
    path: String,
}

/// pool6 as written: a prefix, or null (unset).
#[derive(Clone, Copy)]
enum Pref64OrNull {
    Prefix(Pref64),
    Null,
}

/// The walk's state: the notes so far.
struct Cx<'a> {
    origin: &'a str,
    notes: Vec<Note>,
}

/// SIIT's own.
const SIIT_GLOBALS: &[&str] = &[
    "amend-udp-checksum-zero",
    "eam-hairpin-mode",
    "randomize-rfc6791-addresses",
    "rfc6791v6-prefix",
    "rfc6791v4-prefix",
    "pool6791v4",
    "mapt",
];
/// NAT64's own.
const NAT64_GLOBALS: &[&str] = &[
    "address-dependent-filtering",
    "drop-by-addr",
    "drop-icmpv6-info",
    "drop-externally-initiated-tcp",
    "source-icmpv6-errors-better",
    "f-args",
    "handle-rst-during-fin-rcv",
    "tcp-est-timeout",
    "tcp-trans-timeout",
    "udp-timeout",
    "icmp-timeout",
    "logging-bib",
    "logging-session",
    "maximum-simultaneous-opens",
    "ss-enabled",
    "ss-flush-asap",
    "ss-flush-deadline",
    "ss-capacity",
    "ss-max-payload",
    "ss-max-sessions-per-packet",
];

impl<'a> Cx<'a> {
    fn err(&self, path: &str, msg: impl std::fmt::Display) -> ImportError {
        ImportError(format!("{}: {path}: {msg}", self.origin))
    }

    fn note(&mut self, kind: NoteKind, path: &str, value: Option<&Json>, why: impl Into<String>) {
        self.notes.push(Note {
            kind,
            path: path.to_owned(),
            value: value.map(show),
            why: why.into(),
        });
    }

    fn not_imported(&mut self, path: &str, value: &Json, why: impl Into<String>) {
        self.note(NoteKind::NotImported, path, Some(value), why);
    }

    fn approx(&mut self, path: &str, value: Option<&Json>, why: impl Into<String>) {
        self.note(NoteKind::Approximate, path, value, why);
    }

    fn built_in(&mut self, path: &str, value: &Json, why: impl Into<String>) {
        self.note(NoteKind::BuiltIn, path, Some(value), why);
    }

    // -- typed access, each error naming the path --

    fn wrong(&self, path: &str, v: &Json, want: &str) -> ImportError {
        self.err(path, format!("{} is {}, not {want}", show(v), v.kind()))
    }

    fn string<'j>(&self, path: &str, v: &'j Json) -> Result<&'j str, ImportError> {
        match v {
            Json::Str(s) => Ok(s),
            _ => Err(self.wrong(path, v, "a string")),
        }
    }

    fn boolean(&self, path: &str, v: &Json) -> Result<bool, ImportError> {
        match v {
            Json::Bool(b) => Ok(*b),
            _ => Err(self.wrong(path, v, "true or false")),
        }
    }

    fn uint(&self, path: &str, v: &Json, max: u64) -> Result<u64, ImportError> {
        let n = match v {
            Json::Num(n) => n.as_u64(),
            _ => return Err(self.wrong(path, v, &format!("an integer (0-{max})"))),
        };
        match n {
            Some(n) if n <= max => Ok(n),
            _ => Err(self.err(
                path,
                format!("{} is not an integer between 0 and {max}", show(v)),
            )),
        }
    }

    fn object<'j>(&self, path: &str, v: &'j Json) -> Result<&'j [(String, Json)], ImportError> {
        match v {
            Json::Obj(o) => Ok(o),
            _ => Err(self.wrong(path, v, "an object")),
        }
    }

    fn array<'j>(&self, path: &str, v: &'j Json) -> Result<&'j [Json], ImportError> {
        match v {
            Json::Arr(a) => Ok(a),
            _ => Err(self.wrong(path, v, "an array")),
        }
    }

    fn prefix4(&self, path: &str, v: &Json) -> Result<Ipv4Prefix, ImportError> {
        let s = self.string(path, v)?;
        s.trim()
            .parse::<Ipv4Prefix>()
            .map_err(|e| self.err(path, format!("{} is not an IPv4 prefix: {e}", quote(s))))
    }

    fn prefix6(&self, path: &str, v: &Json) -> Result<Ipv6Prefix, ImportError> {
        let s = self.string(path, v)?;
        s.trim()
            .parse::<Ipv6Prefix>()
            .map_err(|e| self.err(path, format!("{} is not an IPv6 prefix: {e}", quote(s))))
    }

    fn pref64(&self, path: &str, v: &Json) -> Result<Pref64OrNull, ImportError> {
        if *v == Json::Null {
            return Ok(Pref64OrNull::Null);
        }
        let s = self.string(path, v)?;
        s.trim()
            .parse::<Pref64>()
            .map(Pref64OrNull::Prefix)
            .map_err(|e| self.err(path, format!("{} is not an RFC 6052 prefix: {e}", quote(s))))
    }

    /// A Jool time, `[[HH:]MM:]SS[.mmm]`, in whole seconds (rounded up, noted).
    fn timeout(&mut self, path: &str, v: &Json) -> Result<u64, ImportError> {
        let s = self.string(path, v)?;
        let ms = parse_jool_time(s).map_err(|why| {
            self.err(
                path,
                format!("{} is not a time as [[HH:]MM:]SS[.mmm]: {why}", quote(s)),
            )
        })?;
        if ms == 0 {
            return Err(self.err(
                path,
                format!("{} is zero: every session would expire at once", quote(s)),
            ));
        }
        let secs = ms.div_ceil(1000);
        if ms % 1000 != 0 {
            self.approx(
                path,
                Some(v),
                format!("quicknat's timeouts are whole seconds: {secs}"),
            );
        }
        Ok(secs)
    }

    // -- the top level --

    fn top<'j>(&mut self, root: &'j Json) -> Result<File<'j>, ImportError> {
        let obj = self.object("the top level", root)?;
        let mut f = File::default();
        for (k, v) in obj {
            let path = key_name(k);
            match k.to_ascii_lowercase().as_str() {
                "comment" => {}
                "instance" => f.instance = Some(self.string(&path, v)?),
                "framework" => {
                    let s = self.string(&path, v)?;
                    if !s.eq_ignore_ascii_case("netfilter") && !s.eq_ignore_ascii_case("iptables") {
                        return Err(self.err(
                            &path,
                            format!("{} is not \"netfilter\" or \"iptables\"", quote(s)),
                        ));
                    }
                    f.framework = Some(s);
                }
                "global" => f.global = Some((k, self.object(&path, v)?)),
                "eamt" => f.eamt = Some((k, self.array(&path, v)?)),
                "denylist4" | "blacklist4" | "blacklist" => {
                    if f.denylist.is_some() {
                        return Err(self.err(&path, "a second denylist4"));
                    }
                    f.denylist = Some((k, self.array(&path, v)?));
                }
                "pool4" => f.pool4 = Some((k, self.array(&path, v)?)),
                "bib" => f.bib = Some((k, self.array(&path, v)?)),
                "pool6791" => f.pool6791 = Some((k, self.array(&path, v)?)),
                "pool6" => f.pool6 = Some((k, v)),
                _ => self.not_imported(&path, v, "unknown to Jool's atomic configuration"),
            }
        }
        Ok(f)
    }

    /// NAT64 or SIIT: as asked, else told from the file.
    fn mode(&self, f: &File<'_>, asked: Option<JoolMode>) -> Result<JoolMode, ImportError> {
        if let Some(m) = asked {
            return Ok(m);
        }
        let global_keys: Vec<String> = f
            .global
            .map(|(_, g)| g.iter().map(|(k, _)| k.to_ascii_lowercase()).collect())
            .unwrap_or_default();
        let mut nat64: Vec<String> = Vec::new();
        let mut siit: Vec<String> = Vec::new();
        for (name, present) in [("pool4", f.pool4.is_some()), ("bib", f.bib.is_some())] {
            if present {
                nat64.push(name.to_owned());
            }
        }
        for (name, present) in [
            ("eamt", f.eamt.is_some()),
            ("denylist4", f.denylist.is_some()),
            ("pool6791", f.pool6791.is_some()),
        ] {
            if present {
                siit.push(name.to_owned());
            }
        }
        for k in &global_keys {
            if NAT64_GLOBALS.contains(&k.as_str()) {
                nat64.push(format!("global.{k}"));
            } else if SIIT_GLOBALS.contains(&k.as_str()) {
                siit.push(format!("global.{k}"));
            }
        }
        match (nat64.first(), siit.first()) {
            (Some(_), None) => Ok(JoolMode::Nat64),
            (None, Some(_)) => Ok(JoolMode::Siit),
            (Some(n), Some(s)) => Err(ImportError(format!(
                "{}: the file has NAT64 settings ({n}) and SIIT settings ({s}): say which \
                 instance it is with --mode nat64 (jool) or --mode siit (jool_siit)",
                self.origin
            ))),
            (None, None) => Err(ImportError(format!(
                "{}: nothing in the file tells a NAT64 instance from a SIIT one: say which \
                 with --mode nat64 (jool) or --mode siit (jool_siit)",
                self.origin
            ))),
        }
    }

    /// The `global` object (and Jool 3's top-level pool6 and pool6791).
    fn globals(&mut self, f: &File<'_>, mode: JoolMode) -> Result<Globals, ImportError> {
        let mut g = Globals::default();
        if let Some((k, v)) = f.pool6 {
            g.pool6 = Some(self.pref64(&key_name(k), v)?);
        }
        if let Some((k, list)) = f.pool6791 {
            let mut prefixes = Vec::new();
            for (i, e) in list.iter().enumerate() {
                prefixes.push(self.prefix4(&format!("{}[{}]", key_name(k), i + 1), e)?);
            }
            if mode == JoolMode::Siit {
                g.rfc6791v4 = Some(prefixes);
            } else {
                self.not_imported(
                    &key_name(k),
                    &Json::Arr(list.to_vec()),
                    "a SIIT setting: a NAT64 instance has no RFC 6791 pool",
                );
            }
        }
        let Some((gname, entries)) = f.global else {
            return Ok(g);
        };
        let gname = key_name(gname);
        let mut tos_value: Option<(&Json, String)> = None;
        for (k, v) in entries {
            let lower = k.to_ascii_lowercase();
            let path = format!("{gname}.{}", key_name(k));
            let name = lower.as_str();
            if name == "comment" {
                continue;
            }
            let other_mode = match mode {
                JoolMode::Nat64 => SIIT_GLOBALS.contains(&name),
                JoolMode::Siit => NAT64_GLOBALS.contains(&name),
            };
            if other_mode {
                let (this, that) = match mode {
                    JoolMode::Nat64 => ("NAT64", "SIIT"),
                    JoolMode::Siit => ("SIIT", "NAT64"),
                };
                self.not_imported(
                    &path,
                    v,
                    format!("a {that} setting: Jool refuses it in a {this} instance"),
                );
                continue;
            }
            match name {
                "pool6" => {
                    if g.pool6.is_some() {
                        return Err(self.err(&path, "pool6 is given twice"));
                    }
                    g.pool6 = Some(self.pref64(&path, v)?);
                }
                "manually-enabled" => {
                    if self.boolean(&path, v)? {
                        self.built_in(&path, v, "quicknat translates while it runs");
                    } else {
                        self.not_imported(
                            &path,
                            v,
                            "Jool's instance is paused; quicknat has no paused state: \
                             keep the service stopped instead",
                        );
                    }
                }
                "lowest-ipv6-mtu" => {
                    let n = self.uint(&path, v, u64::from(u32::MAX))?;
                    if !(1280..=65535).contains(&n) {
                        return Err(self.err(
                            &path,
                            format!("{n}: quicknat's lowest_ipv6_mtu is 1280 to 65535"),
                        ));
                    }
                    g.lowest_ipv6_mtu = Some(n);
                }
                "logging-debug" => {
                    if self.boolean(&path, v)? {
                        self.not_imported(
                            &path,
                            v,
                            "no per-packet log: `quicknat translate` shows what the gateway \
                             does with given packets, `quicknat stats` why it drops them",
                        );
                    } else {
                        self.built_in(&path, v, "quicknat logs no packets");
                    }
                }
                "zeroize-traffic-class" => {
                    g.zeroize_traffic_class = Some(self.boolean(&path, v)?);
                }
                "override-tos" => g.override_tos = Some(self.boolean(&path, v)?),
                "tos" => {
                    let n = self.uint(&path, v, 255)? as u8;
                    g.tos = Some((n, path.clone()));
                    tos_value = Some((v, path.clone()));
                }
                "mtu-plateaus" => {
                    let list = self.array(&path, v)?;
                    let mut got = Vec::with_capacity(list.len());
                    for (i, e) in list.iter().enumerate() {
                        got.push(self.uint(&format!("{path}[{}]", i + 1), e, 65535)?);
                    }
                    got.sort_unstable_by(|a, b| b.cmp(a));
                    got.dedup();
                    if got == DEFAULT_PLATEAUS {
                        self.built_in(
                            &path,
                            v,
                            "quicknat uses RFC 1191's plateaus, Jool's default",
                        );
                    } else {
                        self.not_imported(
                            &path,
                            v,
                            "no setting: quicknat uses RFC 1191's plateaus (Jool's default)",
                        );
                    }
                }
                // -- SIIT --
                "amend-udp-checksum-zero" => {
                    g.amend_udp_checksum_zero = Some(self.boolean(&path, v)?);
                }
                "eam-hairpin-mode" => {
                    let s = self.string(&path, v)?;
                    g.eam_hairpin = Some(match s.to_ascii_lowercase().as_str() {
                        "off" | "none" | "disabled" => "off",
                        "simple" => "simple",
                        "intrinsic" => "intrinsic",
                        _ => {
                            return Err(self.err(
                                &path,
                                format!("{} is not \"off\", \"simple\" or \"intrinsic\"", quote(s)),
                            ))
                        }
                    });
                }
                "randomize-rfc6791-addresses" => {
                    self.boolean(&path, v)?;
                    self.not_imported(
                        &path,
                        v,
                        "no setting: quicknat picks the RFC 6791 address by a hash of the \
                         router's address, so one router always gets the same one",
                    );
                }
                "rfc6791v6-prefix" => {
                    if *v == Json::Null {
                        self.built_in(&path, v, "unset");
                    } else {
                        self.prefix6(&path, v)?;
                        self.not_imported(
                            &path,
                            v,
                            "no equivalent: quicknat sources its ICMPv6 errors from the \
                             interface's address",
                        );
                    }
                }
                "rfc6791v4-prefix" | "pool6791v4" => {
                    if g.rfc6791v4.is_some() {
                        return Err(self.err(&path, "a second RFC 6791 pool"));
                    }
                    if *v != Json::Null {
                        g.rfc6791v4 = Some(vec![self.prefix4(&path, v)?]);
                        self.approx(
                            &path,
                            Some(v),
                            "siit.icmp_error_source: quicknat uses it for translated ICMPv6 \
                             errors from unmapped routers, and for its own ICMPv4 errors only \
                             on a link without an IPv4 address",
                        );
                    } else {
                        self.approx(
                            &path,
                            Some(v),
                            "unset: Jool then uses the node's own addresses; quicknat drops \
                             translated ICMPv6 errors from routers without an IPv4 mapping",
                        );
                    }
                }
                "mapt" => self.not_imported(&path, v, "MAP-T has no equivalent in quicknat"),
                // -- NAT64 --
                "address-dependent-filtering" | "drop-by-addr" => {
                    g.address_dependent_filtering = Some(self.boolean(&path, v)?);
                }
                "drop-icmpv6-info" => g.drop_icmpv6_info = Some(self.boolean(&path, v)?),
                "drop-externally-initiated-tcp" => {
                    g.drop_externally_initiated_tcp = Some(self.boolean(&path, v)?);
                }
                "maximum-simultaneous-opens" => {
                    let n = self.uint(&path, v, u64::from(u32::MAX))?;
                    if n > 4096 {
                        self.approx(&path, Some(v), "quicknat holds at most 4096: 4096");
                    }
                    g.max_simultaneous_opens = Some(n.min(4096));
                }
                "source-icmpv6-errors-better" => {
                    if self.boolean(&path, v)? {
                        self.built_in(
                            &path,
                            v,
                            "quicknat sources a translated ICMP error from the router's own \
                             address",
                        );
                    } else {
                        self.not_imported(&path, v, "no setting: quicknat always behaves as true");
                    }
                }
                "handle-rst-during-fin-rcv" => {
                    if self.boolean(&path, v)? {
                        self.built_in(
                            &path,
                            v,
                            "every in-window RST moves a session to tcp_closed",
                        );
                    } else {
                        self.not_imported(&path, v, "no setting: quicknat always behaves as true");
                    }
                }
                "f-args" => {
                    self.uint(&path, v, 255)?;
                    self.not_imported(
                        &path,
                        v,
                        "no equivalent: quicknat pairs each IPv6 host with one pool4 address \
                         and keeps its source port when free",
                    );
                }
                "udp-timeout" => g.udp_timeout = Some(self.timeout(&path, v)?),
                "tcp-est-timeout" => {
                    g.tcp_est_timeout = Some(self.timeout(&path, v)?);
                    self.approx(
                        &path,
                        Some(v),
                        "nat64.timeouts.tcp_established: Jool probes an idle connection \
                         before dropping it, quicknat lets the session expire",
                    );
                }
                "tcp-trans-timeout" => {
                    g.tcp_trans_timeout = Some(self.timeout(&path, v)?);
                    self.approx(
                        &path,
                        Some(v),
                        "nat64.timeouts.tcp_transitory: quicknat times handshakes \
                         (tcp_syn_sent, tcp_syn_recv) and closed sessions (tcp_closed) \
                         separately, with their defaults",
                    );
                }
                "icmp-timeout" => g.icmp_timeout = Some(self.timeout(&path, v)?),
                "logging-bib" => {
                    g.logging_bib = self.boolean(&path, v)?;
                    self.logging_note(&path, v, g.logging_bib, "binding");
                }
                "logging-session" => {
                    g.logging_session = self.boolean(&path, v)?;
                    self.logging_note(&path, v, g.logging_session, "session");
                }
                "ss-enabled" if *v == Json::Bool(false) => {
                    self.built_in(&path, v, "quicknat does not synchronise sessions");
                }
                s if s.starts_with("ss-") => self.not_imported(
                    &path,
                    v,
                    "no equivalent: quicknat does not synchronise sessions between gateways",
                ),
                _ => self.not_imported(&path, v, "unknown to this importer"),
            }
        }
        // TOS: written only when override-tos is on (with Jool's default tos, 0, when
        // the file gives none).
        if let Some((v, path)) = tos_value {
            if g.override_tos != Some(true) {
                self.not_imported(&path, v, "no effect in Jool: override-tos is not true");
                g.tos = None;
            }
        } else if g.override_tos == Some(true) {
            g.tos = Some((0, format!("{gname}.tos")));
        }
        Ok(g)
    }

    fn logging_note(&mut self, path: &str, v: &Json, on: bool, class: &str) {
        if on {
            self.approx(
                path,
                Some(v),
                format!(
                    "[logging] events = [\"{class}\"]: quicknat sends RFC 8158 events to a \
                     syslog receiver or IPFIX collector, not to the kernel log; the \
                     [logging] table below is commented out until you give one"
                ),
            );
        } else {
            self.built_in(path, v, "quicknat logs no NAT events unless [logging] asks");
        }
    }

    // -- NAT64 --

    fn nat64(&mut self, f: &File<'_>, g: &Globals, opts: &Options) -> Result<String, ImportError> {
        let pref64 = match g.pool6 {
            Some(Pref64OrNull::Prefix(p)) => p,
            Some(Pref64OrNull::Null) => {
                return Err(self.err("global.pool6", "null: a NAT64 instance needs pool6"))
            }
            None => {
                return Err(self.err(
                    "global.pool6",
                    "missing: a NAT64 instance needs pool6 (Jool's --pool6)",
                ))
            }
        };
        if pref64.is_well_known() {
            self.approx(
                "global.pool6",
                Some(&Json::Str(pref64.to_string())),
                "with the Well-Known Prefix quicknat refuses non-global IPv4 destinations \
                 (RFC 6052 §3.1); a network-specific prefix reaches private IPv4 space",
            );
        }
        for (k, list) in [f.eamt, f.denylist].into_iter().flatten() {
            self.not_imported(
                &key_name(k),
                &Json::Arr(list.to_vec()),
                "a SIIT table: Jool refuses it in a NAT64 instance",
            );
        }
        let (pool4, ports) = self.pool4(f, opts)?;
        let statics = self.bib(f, &pool4)?;
        let mut s = String::new();
        let _ = writeln!(s, "[nat64]");
        let _ = writeln!(s, "pref64 = \"{pref64}\"");
        let list: Vec<String> = pool4.iter().map(|p| format!("\"{p}\"")).collect();
        let _ = writeln!(s, "pool4 = [{}]", list.join(", "));
        if let Some(p) = ports {
            let _ = writeln!(s, "ports = \"{}-{}\"", p.first, p.last);
        }
        if let Some(a) = g.address_dependent_filtering {
            let _ = writeln!(
                s,
                "filtering = \"{}\"",
                if a {
                    "address-dependent"
                } else {
                    "endpoint-independent"
                }
            );
        }
        if let Some(n) = g.max_simultaneous_opens {
            let _ = writeln!(s, "max_simultaneous_opens = {n}");
        }
        if let Some(b) = g.drop_icmpv6_info {
            let _ = writeln!(s, "drop_icmpv6_info = {b}");
        }
        if let Some(b) = g.drop_externally_initiated_tcp {
            let _ = writeln!(s, "drop_externally_initiated_tcp = {b}");
        }
        let timeouts = [
            ("udp", g.udp_timeout),
            ("tcp_established", g.tcp_est_timeout),
            ("tcp_transitory", g.tcp_trans_timeout),
            ("icmp", g.icmp_timeout),
        ];
        if timeouts.iter().any(|(_, t)| t.is_some()) {
            let _ = writeln!(s, "\n[nat64.timeouts]");
            for (name, t) in timeouts {
                if let Some(t) = t {
                    let _ = writeln!(s, "{name} = {t}");
                }
            }
        }
        let _ = writeln!(s, "\n[nat64.options]");
        let _ = writeln!(
            s,
            "# Jool's NAT64 always computes the checksum of IPv4 UDP datagrams that have none."
        );
        let _ = writeln!(s, "udp_zero_checksum = \"compute\"");
        self.approx(
            "nat64.options.udp_zero_checksum = \"compute\"",
            None,
            "Jool's NAT64 computes zero UDP checksums also of fragmented datagrams, which it \
             reassembles; quicknat does not reassemble and drops those",
        );
        self.options(&mut s, g);
        for b in &statics {
            let _ = writeln!(s, "\n[[nat64.static]]");
            let _ = writeln!(s, "protocol = \"{}\"", b.proto.to_ascii_lowercase());
            let _ = writeln!(s, "public = \"{}:{}\"", b.public.0, b.public.1);
            let _ = writeln!(s, "inside = \"[{}]:{}\"", b.inside.0, b.inside.1);
        }
        let mut events = Vec::new();
        if g.logging_bib {
            events.push("\"binding\"");
        }
        if g.logging_session {
            events.push("\"session\"");
        }
        if !events.is_empty() {
            let _ = writeln!(
                s,
                "\n# Jool logged to the kernel log; quicknat sends NAT events to a syslog\n\
                 # receiver or an IPFIX collector. Uncomment and give one:\n\
                 # [logging]\n\
                 # events = [{}]\n\
                 # syslog = \"192.0.2.10:514\"\n\
                 # ipfix = \"192.0.2.10:4739\"",
                events.join(", ")
            );
        }
        Ok(s)
    }

    /// pool4: the prefixes, every protocol's, and one port range.
    fn pool4(
        &mut self,
        f: &File<'_>,
        opts: &Options,
    ) -> Result<(Vec<Ipv4Prefix>, Option<PortRange>), ImportError> {
        let entries = f.pool4.map(|(_, e)| e).unwrap_or_default();
        let pname = f
            .pool4
            .map_or_else(|| "pool4".to_owned(), |(k, _)| key_name(k));
        if !opts.pool4.is_empty() {
            if !entries.is_empty() {
                return Err(ImportError(format!(
                    "{}: --pool4 is for a file without pool4, and this one has {} entries",
                    self.origin,
                    entries.len()
                )));
            }
            let mut out = Vec::new();
            for p in &opts.pool4 {
                let prefix = p.trim().parse::<Ipv4Prefix>().map_err(|e| {
                    ImportError(format!("--pool4 {}: not an IPv4 prefix: {e}", quote(p)))
                })?;
                out.push(prefix);
            }
            self.approx(
                &pname,
                None,
                "none in the file: Jool masks with the node's own addresses on ports \
                 61001-65535; pool4 comes from --pool4, with quicknat's port range",
            );
            return Ok((merge_prefixes(out), None));
        }
        if entries.is_empty() {
            return Err(self.err(
                &pname,
                "empty: Jool then masks with the node's own addresses, but quicknat needs \
                 pool4 addresses routed to the gateway: give them with --pool4 PREFIX",
            ));
        }
        // (protocol, prefix, first, last)
        let mut got: Vec<(&'static str, Ipv4Prefix, u16, u16)> = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let path = format!("{pname}[{}]", i + 1);
            let obj = self.object(&path, e)?;
            let mut proto = None;
            let mut prefix = None;
            let mut range = None;
            for (k, v) in obj {
                let kp = format!("{path}.{}", key_name(k));
                match k.to_ascii_lowercase().as_str() {
                    "comment" => {}
                    "protocol" => proto = Some(self.protocol(&kp, v)?),
                    "prefix" => prefix = Some(self.prefix4(&kp, v)?),
                    "port range" => {
                        let s = self.string(&kp, v)?;
                        range = Some(parse_port_range(s).map_err(|why| {
                            self.err(&kp, format!("{} is not a port range: {why}", quote(s)))
                        })?);
                    }
                    "mark" => {
                        if self.uint(&kp, v, u64::from(u32::MAX))? == 0 {
                            self.built_in(&kp, v, "no mark: the pool serves all traffic");
                        } else {
                            self.not_imported(
                                &kp,
                                v,
                                "no equivalent: quicknat has one pool4 for all traffic, \
                                 not one per packet mark; its prefix is in pool4",
                            );
                        }
                    }
                    "max-iterations" => match v {
                        Json::Str(s) if s == "auto" => {
                            self.built_in(&kp, v, "quicknat bounds its own port search");
                        }
                        Json::Str(s) if s == "infinity" => {
                            self.not_imported(
                                &kp,
                                v,
                                "no equivalent: quicknat bounds its own port search",
                            );
                        }
                        Json::Num(_) => {
                            self.uint(&kp, v, u64::from(u32::MAX))?;
                            self.not_imported(
                                &kp,
                                v,
                                "no equivalent: quicknat bounds its own port search",
                            );
                        }
                        _ => return Err(self.wrong(&kp, v, "a number, \"auto\" or \"infinity\"")),
                    },
                    _ => self.not_imported(&kp, v, "unknown to Jool's pool4 entries"),
                }
            }
            let proto =
                proto.ok_or_else(|| self.err(&path, "no \"protocol\" (TCP, UDP or ICMP)"))?;
            let prefix = prefix.ok_or_else(|| self.err(&path, "no \"prefix\""))?;
            let (first, last) = range.unwrap_or(JOOL_DEFAULT_PORTS);
            got.push((proto, prefix, first, last));
        }
        // Ports: one range for every protocol and address.
        let first = got.iter().map(|g| g.2).min().unwrap_or(1);
        let last = got.iter().map(|g| g.3).max().unwrap_or(65535);
        let same = got.iter().all(|g| (g.2, g.3) == (got[0].2, got[0].3));
        let mut first_q = first;
        if first == 0 {
            first_q = 1;
            self.approx(
                &pname,
                None,
                "port 0 is never handed out by quicknat: the range starts at 1",
            );
        }
        let ports = PortRange::new(first_q, last.max(first_q))
            .map_err(|e| self.err(&pname, format!("no port range quicknat takes: {e}")))?;
        if !same {
            let each: Vec<String> = got
                .iter()
                .map(|(p, x, a, b)| format!("{p} {x} {a}-{b}"))
                .collect();
            self.approx(
                &pname,
                None,
                format!(
                    "quicknat has one port range for every protocol and address, so ports = \
                     \"{}-{}\" covers Jool's ranges: {}",
                    ports.first,
                    ports.last,
                    each.join(", ")
                ),
            );
        }
        // Addresses: every protocol uses them all.
        let all: Vec<Ipv4Prefix> = merge_prefixes(got.iter().map(|g| g.1).collect());
        let mut missing = Vec::new();
        let mut partial = Vec::new();
        for proto in ["TCP", "UDP", "ICMP"] {
            let mine = merge_prefixes(got.iter().filter(|g| g.0 == proto).map(|g| g.1).collect());
            if mine.is_empty() {
                missing.push(proto);
            } else if mine != all {
                partial.push(proto);
            }
        }
        if !missing.is_empty() {
            self.approx(
                &pname,
                None,
                format!(
                    "no entry for {}: Jool does not translate it, quicknat translates every \
                     protocol with all of pool4",
                    missing.join(", ")
                ),
            );
        }
        if !partial.is_empty() {
            self.approx(
                &pname,
                None,
                format!(
                    "{} had only some of the addresses in Jool; quicknat uses all of pool4 \
                     for every protocol",
                    partial.join(", ")
                ),
            );
        }
        Ok((all, Some(ports)))
    }

    fn protocol(&self, path: &str, v: &Json) -> Result<&'static str, ImportError> {
        let s = self.string(path, v)?;
        match s.to_ascii_uppercase().as_str() {
            "TCP" => Ok("TCP"),
            "UDP" => Ok("UDP"),
            "ICMP" => Ok("ICMP"),
            _ => Err(self.err(path, format!("{} is not TCP, UDP or ICMP", quote(s)))),
        }
    }

    /// The static TCP and UDP BIB entries.
    fn bib(&mut self, f: &File<'_>, pool4: &[Ipv4Prefix]) -> Result<Vec<Binding>, ImportError> {
        let Some((bname, entries)) = f.bib else {
            return Ok(Vec::new());
        };
        let bname = key_name(bname);
        let mut out: Vec<Binding> = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let path = format!("{bname}[{}]", i + 1);
            let obj = self.object(&path, e)?;
            let mut proto = None;
            let mut v6 = None;
            let mut v4 = None;
            for (k, v) in obj {
                let kp = format!("{path}.{}", key_name(k));
                match k.to_ascii_lowercase().as_str() {
                    "comment" => {}
                    "protocol" => proto = Some(self.protocol(&kp, v)?),
                    "ipv6 address" => {
                        let s = self.string(&kp, v)?;
                        v6 = Some(parse_taddr::<Ipv6Addr>(s).ok_or_else(|| {
                            self.err(&kp, format!("{} is not IPV6#PORT", quote(s)))
                        })?);
                    }
                    "ipv4 address" => {
                        let s = self.string(&kp, v)?;
                        v4 = Some(parse_taddr::<Ipv4Addr>(s).ok_or_else(|| {
                            self.err(&kp, format!("{} is not IPV4#PORT", quote(s)))
                        })?);
                    }
                    _ => self.not_imported(&kp, v, "unknown to Jool's BIB entries"),
                }
            }
            let proto =
                proto.ok_or_else(|| self.err(&path, "no \"protocol\" (TCP, UDP or ICMP)"))?;
            let v6 = v6.ok_or_else(|| self.err(&path, "no \"ipv6 address\""))?;
            let v4 = v4.ok_or_else(|| self.err(&path, "no \"ipv4 address\""))?;
            if proto == "ICMP" {
                self.not_imported(
                    &path,
                    e,
                    "no equivalent: quicknat's static bindings are TCP or UDP",
                );
                continue;
            }
            if !pool4.iter().any(|p| p.contains(v4.0)) {
                return Err(self.err(
                    &format!("{path}.ipv4 address"),
                    format!(
                        "{} is not in pool4: a static binding uses a pool4 address",
                        v4.0
                    ),
                ));
            }
            if v4.1 == 0 || v6.1 == 0 {
                return Err(self.err(&path, "port 0 cannot be bound"));
            }
            if let Some(other) = out
                .iter()
                .find(|b| b.proto == proto && (b.public == v4 || b.inside == v6))
            {
                return Err(self.err(
                    &path,
                    format!("binds an endpoint {} already binds", other.path),
                ));
            }
            out.push(Binding {
                proto,
                public: v4,
                inside: v6,
                path,
            });
        }
        Ok(out)
    }

    // -- SIIT --

    fn siit(&mut self, f: &File<'_>, g: &Globals) -> Result<String, ImportError> {
        for (k, list) in [f.pool4, f.bib].into_iter().flatten() {
            self.not_imported(
                &key_name(k),
                &Json::Arr(list.to_vec()),
                "a NAT64 table: Jool refuses it in a SIIT instance",
            );
        }
        let pref64 = match g.pool6 {
            Some(Pref64OrNull::Prefix(p)) => Some(p),
            _ => None,
        };
        let mut eams: Vec<(Eam, String)> = Vec::new();
        if let Some((ename, entries)) = f.eamt {
            let ename = key_name(ename);
            for (i, e) in entries.iter().enumerate() {
                let path = format!("{ename}[{}]", i + 1);
                let obj = self.object(&path, e)?;
                let mut v4 = None;
                let mut v6 = None;
                for (k, v) in obj {
                    let kp = format!("{path}.{}", key_name(k));
                    match k.to_ascii_lowercase().as_str() {
                        "comment" => {}
                        "ipv4 prefix" => v4 = Some(self.prefix4(&kp, v)?),
                        "ipv6 prefix" => v6 = Some(self.prefix6(&kp, v)?),
                        _ => self.not_imported(&kp, v, "unknown to Jool's EAMT entries"),
                    }
                }
                let v4 = v4.ok_or_else(|| self.err(&path, "no \"ipv4 prefix\""))?;
                let v6 = v6.ok_or_else(|| self.err(&path, "no \"ipv6 prefix\""))?;
                let eam = Eam::new(v4, v6).map_err(|_| {
                    self.err(
                        &path,
                        format!(
                            "{v4} and {v6} have suffixes of different lengths ({} and {} bits)",
                            32 - u32::from(v4.len()),
                            128 - u32::from(v6.len())
                        ),
                    )
                })?;
                for (other, opath) in &eams {
                    if other.ipv4.overlaps(&eam.ipv4) || other.ipv6.overlaps(&eam.ipv6) {
                        return Err(self.err(
                            &path,
                            format!(
                                "{v4} <-> {v6} overlaps {opath} ({} <-> {}): quicknat refuses \
                                 overlapping EAM entries (Jool takes them with --force)",
                                other.ipv4, other.ipv6
                            ),
                        ));
                    }
                }
                if let Some(p) = pref64 {
                    if eam.ipv6.overlaps(&p.as_prefix()) {
                        return Err(self.err(
                            &path,
                            format!("{v6} overlaps pool6 {p}: quicknat refuses that"),
                        ));
                    }
                }
                eams.push((eam, path));
            }
        }
        if let Some((dname, entries)) = f.denylist {
            let dname = key_name(dname);
            for (i, e) in entries.iter().enumerate() {
                let path = format!("{dname}[{}]", i + 1);
                self.prefix4(&path, e)?;
                self.not_imported(
                    &path,
                    e,
                    "no equivalent: quicknat translates every address pool6 covers; filter \
                     these before the gateway",
                );
            }
        }
        if pref64.is_none() && eams.is_empty() {
            return Err(ImportError(format!(
                "{}: neither global.pool6 nor an eamt entry: the SIIT instance translates no \
                 address, and quicknat refuses such a [siit]",
                self.origin
            )));
        }
        let mut s = String::new();
        let _ = writeln!(s, "[siit]");
        if let Some(p) = pref64 {
            let _ = writeln!(s, "pref64 = \"{p}\"");
        }
        if let Some(pool) = &g.rfc6791v4 {
            let list: Vec<String> = pool
                .iter()
                .map(|p| format!("\"{}\"", pool_entry(p)))
                .collect();
            if list.len() == 1 {
                let _ = writeln!(s, "icmp_error_source = {}", list[0]);
            } else if !list.is_empty() {
                let _ = writeln!(s, "icmp_error_source = [{}]", list.join(", "));
            }
        }
        if let Some(h) = g.eam_hairpin {
            let _ = writeln!(s, "eam_hairpin = \"{h}\"");
        }
        for (e, _) in &eams {
            let _ = writeln!(s, "\n[[siit.eam]]");
            let _ = writeln!(s, "ipv4 = \"{}\"", e.ipv4);
            let _ = writeln!(s, "ipv6 = \"{}\"", e.ipv6);
        }
        let mut opts = String::new();
        if g.amend_udp_checksum_zero == Some(true) {
            let _ = writeln!(opts, "udp_zero_checksum = \"compute\"");
        }
        self.options(&mut opts, g);
        if !opts.is_empty() {
            let _ = write!(s, "\n[siit.options]\n{opts}");
        }
        Ok(s)
    }

    /// The translator settings both modes share, as `[MODE.options]` lines.
    fn options(&mut self, s: &mut String, g: &Globals) {
        if let Some(m) = g.lowest_ipv6_mtu {
            let _ = writeln!(s, "lowest_ipv6_mtu = {m}");
        }
        if g.zeroize_traffic_class == Some(true) {
            let _ = writeln!(s, "traffic_class = 0");
        }
        if let Some((t, _)) = &g.tos {
            let _ = writeln!(s, "tos = {t}");
        }
    }

    /// The header, `[gateway]` and the body, loaded with quicknat's loader.
    fn finish(
        &mut self,
        f: &File<'_>,
        mode: JoolMode,
        opts: &Options,
        body: &str,
    ) -> Result<String, ImportError> {
        if let Some(fw) = f.framework {
            let v = Json::Str(fw.to_owned());
            if fw.eq_ignore_ascii_case("iptables") {
                self.approx(
                    "framework",
                    Some(&v),
                    "Jool translated only what iptables rules sent it; quicknat translates \
                     every packet of its interface pair",
                );
            } else {
                self.built_in(
                    "framework",
                    &v,
                    "quicknat translates every packet of its interface pair",
                );
            }
        }
        let (inside_side, outside_side) = match mode {
            JoolMode::Nat64 => ("the IPv6 hosts", "the IPv4 Internet"),
            JoolMode::Siit => ("the IPv4 side", "the IPv6 side"),
        };
        let kind = match mode {
            JoolMode::Nat64 => "NAT64",
            JoolMode::Siit => "SIIT",
        };
        let mut rest = String::new();
        let _ = writeln!(rest, "[gateway]");
        if opts.inside.is_none() || opts.outside.is_none() {
            let _ = writeln!(
                rest,
                "# Jool's file names no interfaces: edit the placeholders (or give --inside and\n\
                 # --outside to quicknat import jool)."
            );
        }
        let inside = opts.inside.clone().unwrap_or_else(|| "eth0".to_owned());
        let outside = opts.outside.clone().unwrap_or_else(|| "eth1".to_owned());
        let _ = writeln!(
            rest,
            "inside = {}    # faces {inside_side}",
            toml::Value::String(inside)
        );
        let _ = writeln!(
            rest,
            "outside = {}   # faces {outside_side}",
            toml::Value::String(outside)
        );
        let _ = write!(rest, "\n{body}");
        // What quicknat makes of it: refused here rather than at check-config.
        const ORIGIN: &str = "imported";
        let config =
            quicknat::config::load_str_on(&rest, ORIGIN, &Default::default()).map_err(|e| {
                ImportError(format!(
                    "{}: quicknat refuses the converted configuration: {e}",
                    self.origin
                ))
            })?;
        for warning in &config.warnings {
            // "imported:12: nat64.timeouts.udp = ..." without the place in the body.
            let w = warning.strip_prefix(ORIGIN).unwrap_or(warning);
            let w = w.strip_prefix(':').unwrap_or(w);
            let w = w.trim_start_matches(|c: char| c.is_ascii_digit());
            let w = w.strip_prefix(':').unwrap_or(w).trim_start();
            self.note(NoteKind::Warning, "check-config", None, w);
        }
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# quicknat configuration imported by `quicknat import jool` from {}",
            comment_safe(self.origin)
        );
        let _ = writeln!(
            s,
            "# (Jool {kind} instance {}). Check it with `quicknat check-config --config FILE`.",
            f.instance
                .map_or_else(|| "without a name".to_owned(), quote)
        );
        if !self.notes.is_empty() {
            let _ = writeln!(s, "#");
            for kind in [
                NoteKind::NotImported,
                NoteKind::Approximate,
                NoteKind::Warning,
                NoteKind::BuiltIn,
            ] {
                for n in self.notes.iter().filter(|n| n.kind == kind) {
                    s.push_str(&comment_lines(&n.line()));
                }
            }
        }
        let _ = write!(s, "\n{rest}");
        Ok(s)
    }
}

/// A comment's text on one line.
fn comment_safe(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// `text` as TOML comment lines of about 90 columns, continuations indented.
fn comment_lines(text: &str) -> String {
    const WIDTH: usize = 90;
    let mut out = String::new();
    let mut line = String::from("#");
    for word in comment_safe(text).split(' ').filter(|w| !w.is_empty()) {
        if line.len() > 4 && line.len() + 1 + word.len() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = String::from("#  ");
        }
        line.push(' ');
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

/// An RFC 6791 pool entry: an address for a /32.
fn pool_entry(p: &Ipv4Prefix) -> String {
    if p.len() == 32 {
        p.addr().to_string()
    } else {
        p.to_string()
    }
}

/// Distinct prefixes in order, those inside another left out (CIDR prefixes either nest
/// or do not meet).
fn merge_prefixes(v: Vec<Ipv4Prefix>) -> Vec<Ipv4Prefix> {
    let mut out: Vec<Ipv4Prefix> = Vec::new();
    for p in v {
        if out.iter().any(|q| q.overlaps(&p) && q.len() <= p.len()) {
            continue;
        }
        out.retain(|q| !(q.overlaps(&p) && p.len() <= q.len()));
        out.push(p);
    }
    out
}

/// Jool's `[[HH:]MM:]SS[.mmm]` in milliseconds.
fn parse_jool_time(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (main, frac) = match s.split_once('.') {
        Some((m, f)) => (m, Some(f)),
        None => (s, None),
    };
    let parts: Vec<&str> = main.split(':').collect();
    if parts.len() > 3 {
        return Err("more than three fields".into());
    }
    let mut secs: u64 = 0;
    for p in &parts {
        if p.is_empty() || p.len() > 12 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("{} is not a number", quote(p)));
        }
        let n: u64 = p
            .parse()
            .map_err(|_| format!("{} is not a number", quote(p)))?;
        secs = secs
            .checked_mul(60)
            .and_then(|x| x.checked_add(n))
            .ok_or("too large")?;
    }
    let ms = match frac {
        None => 0,
        Some(f) if !f.is_empty() && f.len() <= 3 && f.bytes().all(|b| b.is_ascii_digit()) => {
            let n: u64 = f.parse().map_err(|_| "bad milliseconds")?;
            n * 10u64.pow(3 - f.len() as u32)
        }
        Some(_) => return Err("milliseconds are one to three digits".into()),
    };
    secs.checked_mul(1000)
        .and_then(|x| x.checked_add(ms))
        .ok_or_else(|| "too large".into())
}

/// Jool's port range: `FIRST-LAST` or one port.
fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    let port = |x: &str| {
        x.trim()
            .parse::<u16>()
            .map_err(|_| format!("{} is not a port (0-65535)", quote(x.trim())))
    };
    let (a, b) = match s.split_once('-') {
        Some((a, b)) => (port(a)?, port(b)?),
        None => {
            let p = port(s)?;
            (p, p)
        }
    };
    if a > b {
        return Err(format!("{a} is after {b}"));
    }
    Ok((a, b))
}

/// Jool's transport address, `ADDRESS#PORT`.
fn parse_taddr<A: std::str::FromStr>(s: &str) -> Option<(A, u16)> {
    let (a, p) = s.trim().rsplit_once('#')?;
    Some((a.trim().parse().ok()?, p.trim().parse().ok()?))
}

#[cfg(test)]
mod tests;
