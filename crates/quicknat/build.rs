//! The git commit for `quicknat --version` (`QUICKNAT_GIT_COMMIT`
//! from the environment wins, for builds outside a git checkout, e.g. a source package).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=QUICKNAT_GIT_COMMIT");
    let commit = std::env::var("QUICKNAT_GIT_COMMIT").ok().or_else(|| {
        // Rebuild when HEAD moves: HEAD itself, and the branch it points at.
        for path in ["HEAD", "packed-refs"] {
            if let Some(p) = git(&["rev-parse", "--git-path", path]) {
                println!("cargo:rerun-if-changed={p}");
            }
        }
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            if let Some(p) = git(&["rev-parse", "--git-path", &r]) {
                println!("cargo:rerun-if-changed={p}");
            }
        }
        git(&["rev-parse", "--short=12", "HEAD"])
    });
    if let Some(c) = commit {
        println!("cargo:rustc-env=QUICKNAT_GIT_COMMIT={c}");
    }
}
