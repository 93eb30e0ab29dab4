//! The compiler and profile this benchmark is built with, for `quicknat-bench --icount`:
//! instruction counts depend on codegen, so a baseline is only comparable with a build
//! by the same rustc (`QUICKNAT_BENCH_RUSTC`) at the same optimisation level
//! (`QUICKNAT_BENCH_OPT_LEVEL`, `QUICKNAT_BENCH_PROFILE`).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = Command::new(&rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=QUICKNAT_BENCH_RUSTC={version}");
    for (var, name) in [
        ("OPT_LEVEL", "QUICKNAT_BENCH_OPT_LEVEL"),
        ("PROFILE", "QUICKNAT_BENCH_PROFILE"),
    ] {
        let v = std::env::var(var).unwrap_or_else(|_| "unknown".into());
        println!("cargo:rustc-env={name}={v}");
    }
}
