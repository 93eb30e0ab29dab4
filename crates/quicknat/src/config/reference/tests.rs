//! The reference table held to the code: the parser's fields, the defaults, the examples
//! and the reload path; and the committed pages held to the table.

use std::collections::BTreeSet;

use serde::de::{self, Deserialize, Visitor};

use super::{Default, Reload, Section, SECTIONS};
use crate::config::{load_str, Config};

/// A deserializer that answers nothing but records the field names a struct asks for:
/// serde's derive passes them to `deserialize_struct`.
struct FieldsProbe;

#[derive(Debug)]
enum Probe {
    Fields(&'static [&'static str]),
    /// Anything but a struct.
    Other,
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for Probe {}

impl de::Error for Probe {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Probe::Other
    }
}

impl<'de> de::Deserializer<'de> for FieldsProbe {
    type Error = Probe;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Probe> {
        Err(Probe::Other)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Probe> {
        Err(Probe::Fields(fields))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The keys struct `T` accepts, as its derive declares them.
fn fields_of<'de, T: Deserialize<'de>>() -> BTreeSet<&'static str> {
    match T::deserialize(FieldsProbe) {
        Err(Probe::Fields(f)) => f.iter().copied().collect(),
        other => panic!("not a struct: {:?}", other.map(|_| ())),
    }
}

/// The fields the parser accepts in the section named `name`.
fn parser_fields(name: &str) -> BTreeSet<&'static str> {
    use crate::config::{deterministic, ila, modes, natlog, raw, routing};
    match name {
        "" => fields_of::<raw::RawFile>(),
        "gateway" => fields_of::<raw::RawGateway>(),
        "nat44" => fields_of::<raw::RawNat44>(),
        "nat44.timeouts" | "nat64.timeouts" => fields_of::<raw::RawTimeouts>(),
        "nat44.rule" => fields_of::<raw::RawRule>(),
        "nat44.static" => fields_of::<raw::RawStatic>(),
        "nat44.forward" => fields_of::<raw::RawForward>(),
        "nat44.deterministic" => fields_of::<deterministic::RawDeterministic>(),
        "nat64" => fields_of::<modes::RawNat64>(),
        "nat64.static" => fields_of::<modes::RawNat64Static>(),
        "nat64.options" | "siit.options" | "clat.options" => fields_of::<modes::RawXlatOptions>(),
        "siit" => fields_of::<modes::RawSiit>(),
        "siit.eam" => fields_of::<modes::RawEam>(),
        "clat" => fields_of::<modes::RawClat>(),
        "ila" => fields_of::<ila::RawIla>(),
        "ila.mapping" => fields_of::<ila::RawMapping>(),
        "logging" => fields_of::<natlog::RawLogging>(),
        "routing" => fields_of::<routing::RawRouting>(),
        other => panic!("section [{other}] has no parser struct in this test"),
    }
}

/// What the reference lists under `name`: its keys and its sub-sections' last names.
fn documented(name: &str) -> BTreeSet<&'static str> {
    let mut out = BTreeSet::new();
    for s in SECTIONS {
        if s.name == name {
            out.extend(s.keys.iter().map(|k| k.name));
        }
        let parent = s.name.rsplit_once('.').map_or("", |(p, _)| p);
        if parent == name {
            out.insert(s.name.rsplit('.').next().unwrap_or(s.name));
        }
    }
    out
}

#[test]
fn every_key_the_parser_accepts_is_documented_and_nothing_else() {
    let mut names: Vec<&str> = SECTIONS.iter().map(|s| s.name).collect();
    names.push("");
    for name in names {
        assert_eq!(
            documented(name),
            parser_fields(name),
            "[{name}]: the reference and the parser disagree"
        );
    }
}

/// `s.base` with `key = value` on its `@` line, or with `key`'s line there removed when
/// `value` is `None` (a key the base writes is replaced, not repeated).
fn with_key(s: &Section, key: &str, value: Option<&str>) -> String {
    let mut out = String::new();
    let mut in_section = false;
    let header = s.header();
    for line in s.base.lines() {
        if line.starts_with('[') {
            in_section = line == header;
        }
        if line == "@" {
            if let Some(v) = value {
                out.push_str(&format!("{key} = {v}\n"));
            }
            continue;
        }
        let written = line.split_once('=').is_some_and(|(k, _)| k.trim() == key);
        if in_section && written {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn load(text: &str) -> Config {
    load_str(text, "test.toml").unwrap_or_else(|e| panic!("{e}\n--- file ---\n{text}"))
}

/// Everything a configuration sets up, warnings (with their line numbers) aside.
fn settings(c: &Config) -> String {
    format!(
        "{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
        c.mode, c.gateway, c.logging, c.natlog, c.routing
    )
}

#[test]
fn every_base_loads() {
    for s in SECTIONS {
        load(&with_key(s, "", None));
    }
}

#[test]
fn a_key_written_at_its_stated_default_changes_nothing() {
    let mut wrong = Vec::new();
    for s in SECTIONS {
        for k in s.keys {
            let Default::Value(v) = k.default else {
                continue;
            };
            let absent = settings(&load(&with_key(s, k.name, None)));
            match load_str(&with_key(s, k.name, Some(v)), "test.toml") {
                Ok(c) if settings(&c) == absent => {}
                Ok(_) => wrong.push(format!(
                    "{}.{} = {v}: not the parser's default",
                    s.name, k.name
                )),
                Err(e) => wrong.push(format!("{}.{} = {v}: {e}", s.name, k.name)),
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_example_loads_and_a_reload_treats_it_as_documented() {
    let mut wrong = Vec::new();
    for s in SECTIONS {
        for k in s.keys {
            let what = format!("{}.{} = {}", s.name, k.name, k.example);
            if let Err(why) = example_holds(s, k) {
                wrong.push(format!("{what}: {why}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// `k.example` loads, differs from the base, and a reload from the base to it does what
/// the reference says.
fn example_holds(s: &Section, k: &super::Key) -> Result<(), String> {
    let old = load(&with_key(s, "", None));
    let new =
        load_str(&with_key(s, k.name, Some(k.example)), "test.toml").map_err(|e| e.to_string())?;
    if settings(&old) == settings(&new) {
        return Err("the example changes nothing".into());
    }
    match (s.name, k.reload_in(s)) {
        // The runtime refuses any change to the gateway's settings (`[logging]` and
        // `[routing]` are carried in them), naming it.
        ("gateway" | "logging" | "routing", Reload::Restart) if old.gateway == new.gateway => {
            Err("marked restart, but a reload would not see it".into())
        }
        ("gateway" | "logging" | "routing", Reload::Restart) => Ok(()),
        (_, Reload::Start) if old.gateway != new.gateway || old.mode != new.mode => {
            Err("marked start only, but a reload sees it".into())
        }
        (_, Reload::Start) => Ok(()),
        ("gateway" | "logging" | "routing", Reload::Live) => {
            Err("marked live, but the runtime reloads no gateway setting".into())
        }
        (_, reload) => {
            let mode = engine::any::AnyMode::new(&old.mode, 1).map_err(|e| e.to_string())?;
            match (reload, mode.reload(&old.mode, &new.mode)) {
                (Reload::Live, Err(e)) => Err(format!("marked live, refused: {e}")),
                (Reload::Restart, Ok(r)) => Err(format!("marked restart, applied: {r}")),
                _ => Ok(()),
            }
        }
    }
}

/// The committed file at `path` (from the repository root) is `generated`; with
/// `QUICKNAT_BLESS=1` it is written instead.
pub(crate) fn check_generated(path: &str, generated: &str) {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path);
    if std::env::var_os("QUICKNAT_BLESS").is_some() {
        std::fs::write(&full, generated).unwrap_or_else(|e| panic!("{path}: {e}"));
        return;
    }
    let committed = std::fs::read_to_string(&full).unwrap_or_default();
    assert!(
        committed == generated,
        "{path} differs from what the code generates: run \
         `QUICKNAT_BLESS=1 cargo test -p quicknat reference` and commit it"
    );
}

#[test]
fn reference_page_is_the_generated_one() {
    check_generated("docs/src/reference/config.md", &super::markdown());
}

#[test]
fn man_page_escapes_every_line() {
    let page = super::man_page("0.1.0");
    for line in page.lines() {
        assert!(!line.starts_with('\''), "{line}");
        if let Some(rest) = line.strip_prefix('.') {
            let macro_name = rest.split_whitespace().next().unwrap_or("");
            assert!(
                ["TH", "SH", "PP", "TP", "B", "br", "BR"].contains(&macro_name),
                "not a macro the page means: {line}"
            );
        }
    }
    assert!(page.contains(".B max_sessions\n"));
}
