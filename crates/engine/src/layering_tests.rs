//! The engine's layers point one way: the modes (`nat44`, `nat64`, `siit`, `ila`) build on
//! the shared modules (`mode`, `reload`, `stats`, `verdict`, `config`), and only the
//! dispatcher (`any`) sees every mode. A shared module that named a mode (or the
//! dispatcher) would make a cycle: this test reads their sources and refuses one.

/// The shared modules' sources, by path.
const SHARED: [(&str, &str); 8] = [
    ("mode/mod.rs", include_str!("mode/mod.rs")),
    ("mode/reply.rs", include_str!("mode/reply.rs")),
    ("mode/output.rs", include_str!("mode/output.rs")),
    ("mode/fragment.rs", include_str!("mode/fragment.rs")),
    ("reload.rs", include_str!("reload.rs")),
    ("stats.rs", include_str!("stats.rs")),
    ("verdict.rs", include_str!("verdict.rs")),
    ("config.rs", include_str!("config.rs")),
];

const ABOVE: [&str; 5] = [
    "crate::any",
    "crate::nat44",
    "crate::nat64",
    "crate::siit",
    "crate::ila",
];

#[test]
fn shared_modules_name_no_mode_and_not_the_dispatcher() {
    let mut found = Vec::new();
    for (path, text) in SHARED {
        // Code only: the tests at the end of a file and comments may name anything.
        let code = text.split("#[cfg(test)]").next().unwrap_or(text);
        for (n, line) in code.lines().enumerate() {
            let l = line.trim_start();
            if l.starts_with("//") {
                continue;
            }
            for above in ABOVE {
                if l.contains(above) {
                    found.push(format!("{path}:{}: {}", n + 1, l));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "shared modules reaching up:\n{}",
        found.join("\n")
    );
}
