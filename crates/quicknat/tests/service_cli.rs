//! What the binary says about itself and how `run` starts — the man
//! page documents every subcommand, completions and `--version` are generated from the
//! CLI, `run` refuses to start on the built-in example, and the Debian package metadata
//! names files that exist.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn quicknat(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quicknat"))
        .args(args)
        .output()
        .expect("run quicknat")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The subcommands `quicknat --help` lists (its "Commands:" block), without `help`.
fn subcommands() -> Vec<String> {
    let help = text(&quicknat(&["--help"]).stdout);
    let block = help
        .split("Commands:")
        .nth(1)
        .expect("a Commands: block")
        .split("\n\n")
        .next()
        .unwrap()
        .to_owned();
    block
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|c| c != "help")
        .collect()
}

#[test]
fn the_man_page_documents_every_subcommand() {
    let subs = subcommands();
    assert!(subs.len() >= 6, "{subs:?}");
    for want in ["run", "translate", "check-config", "completions", "man"] {
        assert!(subs.iter().any(|s| s == want), "{want} in {subs:?}");
    }
    let out = quicknat(&["man"]);
    assert!(out.status.success());
    let man = text(&out.stdout);
    assert!(
        man.starts_with(".ie") || man.starts_with(".TH"),
        "roff: {}",
        &man[..80]
    );
    for s in &subs {
        // roff escapes '-' as '\-'.
        let heading = format!(".SH \"QUICKNAT {}\"", s.to_uppercase());
        assert!(
            man.contains(&heading),
            "no section {heading} in the man page"
        );
        let name = s.replace('-', "\\-");
        assert!(
            man.contains(&format!("quicknat\\-{name}")),
            "{s} not listed"
        );
    }
    assert!(
        man.contains("QUICKNAT_LOG"),
        "the environment is documented"
    );
}

#[test]
fn completions_know_the_subcommands() {
    let subs = subcommands();
    for shell in ["bash", "zsh", "fish"] {
        let out = quicknat(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        for s in &subs {
            assert!(script.contains(s.as_str()), "{shell} completion lacks {s}");
        }
    }
    assert!(!quicknat(&["completions", "cmd.exe"]).status.success());
}

#[test]
fn version_names_commit_and_backends() {
    let out = quicknat(&["--version"]);
    assert!(out.status.success());
    let v = text(&out.stdout);
    assert!(
        v.starts_with(&format!("quicknat {}\n", env!("CARGO_PKG_VERSION"))),
        "{v}"
    );
    assert!(v.contains("commit: "), "{v}");
    assert!(v.contains("backends: af_packet"), "{v}");
    assert!(v.contains("\nfast paths: "), "{v}");
    // Whichever way the XDP program went, the line says it and how to fix it.
    assert!(
        v.contains("af_xdp (XDP program built with clang)")
            || v.contains("af_xdp NOT built (no clang"),
        "{v}"
    );
}

#[test]
fn run_without_a_config_refuses_and_says_why() {
    let out = quicknat(&["run", "--inside", "in0", "--outside", "out0"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("error: run needs --config FILE"), "{err}");
    assert!(
        err.contains("203.0.113.0/28 is a documentation prefix"),
        "{err}"
    );
    // translate and check-config keep the built-in example (README's first command).
    let out = quicknat(&["check-config"]);
    assert!(out.status.success());
    assert!(text(&out.stderr).contains("using built-in config examples/nat44.toml"));
}

#[test]
fn a_bad_log_setting_names_file_line_and_field() {
    let dir = std::env::temp_dir().join(format!("qn-logcfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gw.toml");
    std::fs::write(
        &path,
        "[gateway]\ninside = \"a\"\noutside = \"b\"\nlog_format = \"xml\"\n",
    )
    .unwrap();
    let out = quicknat(&["check-config", "--config", path.to_str().unwrap()]);
    let err = text(&out.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("gw.toml:4: gateway.log_format: \"xml\": expected \"text\" or \"json\""),
        "{err}"
    );
}

/// `[package.metadata.deb]` assets: every source is a file of the repository or one that
/// scripts/gen_docs.sh or cargo writes (so `scripts/deb.sh` cannot miss one).
#[test]
fn debian_package_assets_exist() {
    let krate = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(krate.join("Cargo.toml")).unwrap();
    let table: toml::Table = manifest.parse().unwrap();
    let deb = &table["package"]["metadata"]["deb"];
    let assets = deb["assets"].as_array().expect("assets");
    let gen = std::fs::read_to_string(krate.join("../../scripts/gen_docs.sh")).unwrap();
    let mut seen = Vec::new();
    for a in assets {
        let a = a.as_array().expect("[source, dest, mode]");
        let (src, dest) = (a[0].as_str().unwrap(), a[1].as_str().unwrap());
        seen.push(dest.to_owned());
        if src.starts_with("target/release/") {
            continue; // cargo-deb builds it
        }
        let rel = src.trim_start_matches("../../");
        if rel.starts_with("packaging/generated/") {
            let file = Path::new(rel).file_name().unwrap().to_str().unwrap();
            assert!(
                gen.contains(file),
                "{src} is not written by scripts/gen_docs.sh"
            );
            continue;
        }
        if let Some(dir) = rel.strip_suffix("/**/*") {
            // The book, which scripts/deb.sh builds from its sources before packaging.
            let deb_sh = std::fs::read_to_string(krate.join("../../scripts/deb.sh")).unwrap();
            let built = dir
                .strip_suffix("/book")
                .is_some_and(|src| deb_sh.contains(&format!("mdbook build {src}")));
            assert!(built, "{src} is not built by scripts/deb.sh");
            continue;
        }
        let path: PathBuf = krate.join(src);
        assert!(path.is_file(), "{src} (for {dest}) does not exist");
    }
    for want in [
        "usr/bin/",
        "lib/systemd/system/quicknat.service",
        "usr/share/man/man1/quicknat.1",
        "etc/quicknat/quicknat.toml",
        "usr/share/doc/quicknat/examples/",
        "usr/share/bash-completion/completions/quicknat",
    ] {
        assert!(
            seen.iter().any(|d| d.starts_with(want)),
            "nothing installed to {want}: {seen:?}"
        );
    }
    // Every example configuration of the repository (quicknat's TOML files and the
    // configs of the programs beside it, e.g. BIRD for a cluster) is shipped, under the
    // same relative path.
    let examples = krate.join("../../examples");
    let mut want = Vec::new();
    let mut dirs = vec![examples.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "toml" || x == "conf") {
                want.push(p.strip_prefix(&examples).unwrap().to_owned());
            }
        }
    }
    assert!(want.len() >= 6, "{want:?}");
    for rel in want {
        let dest = format!("usr/share/doc/quicknat/examples/{}", rel.display());
        assert!(
            seen.contains(&dest),
            "examples/{} is not in the package: add it to [package.metadata.deb] assets",
            rel.display()
        );
    }
    // The default configuration the unit starts with is valid as shipped.
    let default = krate.join("../../packaging/quicknat.toml");
    let out = quicknat(&["check-config", "--config", default.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let conffiles = deb["conf-files"].as_array().expect("conf-files");
    assert!(conffiles
        .iter()
        .any(|c| c.as_str() == Some("/etc/quicknat/quicknat.toml")));
}
