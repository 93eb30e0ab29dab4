//! The effective configuration (`quicknat check-config --effective`): every key of a
//! valid file with the value in force, the defaults filled in from the configuration
//! reference ([`super::reference::SECTIONS`]), as TOML in the reference's order — the same
//! text for the same configuration however it was written, so two hosts' files can be
//! diffed. Loading the output gives the same configuration as the input (tested).
//!
//! Which sections are written: those the file has; the mode in force (`[nat44]` when no
//! other mode's section is present); and, under a written section, each sub-table whose
//! absence means its defaults (timeouts, options). A sub-table whose presence turns
//! something on (`[nat44.deterministic]`, with required keys) and the optional top-level
//! tables (`[gateway]`, `[logging]`, `[routing]`) only when written. A key whose absence
//! has no value of its own (for example "the link's MTU") is written as a comment saying
//! what its absence means.

use std::fmt::Write;

use toml::{Table, Value};

use super::reference::{Default, Section, SECTIONS};

/// The top-level tables that are translation modes: the first one present is in force.
const MODES: [&str; 5] = ["nat64", "siit", "clat", "ila", "nat44"];

/// The effective configuration of `text`, which must be a valid configuration (checked
/// by the loader first): `origin` names it in the header comment.
pub fn effective(text: &str, origin: &str) -> Result<String, toml::de::Error> {
    let file: Table = toml::from_str(text)?;
    let mode = MODES
        .iter()
        .find(|m| file.contains_key(**m))
        .copied()
        .unwrap_or("nat44");
    let mut out = format!(
        "# The effective configuration of {origin}: every key with the value in force,\n\
         # defaults filled in (quicknat check-config --effective).\n"
    );
    for s in SECTIONS {
        match lookup(&file, s.name) {
            Some(Value::Array(entries)) if s.array => {
                for e in entries {
                    if let Value::Table(t) = e {
                        section(&mut out, s, Some(t));
                    }
                }
            }
            Some(Value::Table(t)) if !s.array => section(&mut out, s, Some(t)),
            None if !s.array && implied(&file, s, mode) => section(&mut out, s, None),
            _ => {}
        }
    }
    Ok(out)
}

/// The value at dotted `path` of `file`.
fn lookup<'a>(file: &'a Table, path: &str) -> Option<&'a Value> {
    let mut parts = path.split('.');
    let mut v = file.get(parts.next()?)?;
    for p in parts {
        v = v.as_table()?.get(p)?;
    }
    Some(v)
}

/// Whether an unwritten (non-array) section `s` is in force with its defaults: the mode in
/// force, or a sub-table without required keys of a section that is in force.
fn implied(file: &Table, s: &Section, mode: &str) -> bool {
    match s.name.rsplit_once('.') {
        None => s.name == mode,
        Some((parent, _)) => {
            let parent_in_force =
                lookup(file, parent).is_some() || (!parent.contains('.') && parent == mode);
            parent_in_force
                && !s
                    .keys
                    .iter()
                    .any(|k| matches!(k.default, Default::Required))
        }
    }
}

/// Writes section `s`: each of its keys, from `written` or its default.
fn section(out: &mut String, s: &Section, written: Option<&Table>) {
    let _ = writeln!(out, "\n{}", s.header());
    for k in s.keys {
        match (written.and_then(|t| t.get(k.name)), k.default) {
            (Some(v), _) => {
                let _ = writeln!(out, "{} = {v}", k.name);
            }
            (None, Default::Value(d)) => {
                let _ = writeln!(out, "{} = {d}", k.name);
            }
            (None, Default::Absent(what)) => {
                let _ = writeln!(out, "# {}: not set ({what})", k.name);
            }
            // A valid file has every required key; none to write otherwise.
            (None, Default::Required) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;

    /// Every file the repository ships, and one per reference section's smallest example.
    fn files() -> Vec<(String, String)> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut v = Vec::new();
        for dir in ["examples", "examples/cluster", "packaging"] {
            for e in std::fs::read_dir(root.join(dir)).unwrap() {
                let p = e.unwrap().path();
                if p.extension().is_some_and(|x| x == "toml") {
                    v.push((
                        p.display().to_string(),
                        std::fs::read_to_string(&p).unwrap(),
                    ));
                }
            }
        }
        for s in SECTIONS {
            for k in s.keys {
                v.push((
                    format!("{}.{}", s.name, k.name),
                    s.base.replace('@', &format!("{} = {}", k.name, k.example)),
                ));
            }
        }
        v
    }

    /// What a loaded configuration sets up, for comparing two files.
    fn settings(text: &str, origin: &str) -> String {
        let c = load_str(text, origin).unwrap_or_else(|e| panic!("{origin}: {e}\n{text}"));
        format!(
            "{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
            c.mode, c.gateway, c.natlog, c.routing, c.logging
        )
    }

    #[test]
    fn the_effective_file_loads_to_the_same_configuration() {
        let mut n = 0;
        for (origin, text) in files() {
            if load_str(&text, &origin).is_err() {
                continue; // a reference example that needs more than its section's base
            }
            let eff = effective(&text, &origin).unwrap();
            assert_eq!(
                settings(&eff, &origin),
                settings(&text, &origin),
                "{origin}:\n{eff}"
            );
            // Its own effective form is itself: nothing left to fill in.
            assert_eq!(effective(&eff, &origin).unwrap(), eff, "{origin}");
            n += 1;
        }
        assert!(n > 100, "only {n} files checked");
    }

    #[test]
    fn defaults_are_filled_in_and_the_order_is_the_references() {
        let a = "[[nat44.rule]]\ninside = \"10.0.0.0/24\"\npool = \"203.0.113.0/28\"\n\
                 [nat44.timeouts]\nudp = 120\n[nat44]\nhairpinning = false\n";
        let b = "[nat44]\nhairpinning = false\n[nat44.timeouts]\nudp = 120\n\
                 [[nat44.rule]]\npool = \"203.0.113.0/28\"\ninside = \"10.0.0.0/24\"\n";
        let eff = effective(a, "f").unwrap();
        assert_eq!(eff, effective(b, "f").unwrap());
        assert!(
            eff.contains("\n[nat44]\n") && eff.contains("hairpinning = false\n"),
            "{eff}"
        );
        assert!(
            eff.contains("\n[nat44.timeouts]\n") && eff.contains("udp = 120\n"),
            "{eff}"
        );
        // An unwritten key of a written section and of an implied one: its default.
        assert!(eff.contains("tcp_established = 7440\n"), "{eff}");
        assert!(eff.contains("max_sessions = "), "{eff}");
        // Nothing that was not written and would turn something on.
        assert!(
            !eff.contains("[gateway]") && !eff.contains("deterministic"),
            "{eff}"
        );
        assert!(eff.find("[nat44]") < eff.find("[nat44.timeouts]"));
        assert!(eff.find("[nat44.timeouts]") < eff.find("[[nat44.rule]]"));
    }

    #[test]
    fn another_mode_brings_its_own_sections_not_nat44s() {
        let eff = effective("[nat64]\npool4 = [\"203.0.113.1/32\"]\n", "f").unwrap();
        assert!(
            eff.contains("\n[nat64]\n") && eff.contains("\n[nat64.timeouts]\n"),
            "{eff}"
        );
        assert!(eff.contains("pref64 = \"64:ff9b::/96\""), "{eff}");
        assert!(!eff.contains("[nat44"), "{eff}");
    }
}
