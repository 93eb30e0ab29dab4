//! Compiles the AF_XDP steering program (`bpf/xdp_steer.c`), the AF_PACKET backend's
//! tc fast path (`bpf/tc_fast.c`) and its fanout program (`bpf/fanout.c`) with clang and
//! leaves the objects in `OUT_DIR/<name>.o` for `include_bytes!`.
//!
//! Without clang the object is an empty file: the crate still builds, and
//! `afxdp::AfXdp::open` then fails with a clear error so callers fall back to
//! AF_PACKET. A clang that is present but fails to compile the program is a
//! bug in the program, and fails the build.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let srcs = ["bpf/xdp_steer.c", "bpf/tc_fast.c", "bpf/fanout.c"];
    for src in srcs {
        println!("cargo:rerun-if-changed={src}");
    }
    println!("cargo:rerun-if-changed=bpf/common.h");
    println!("cargo:rerun-if-changed=bpf/fast_path.h");
    println!("cargo:rerun-if-changed=bpf/fast_path_ila.h");
    println!("cargo:rerun-if-changed=bpf/local.h");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-env-changed=PATH");
    let dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let obj = |src: &str| dir.join(src.trim_start_matches("bpf/").replace(".c", ".o"));
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    let have_clang = Command::new(&clang)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_clang {
        // Rerun once clang appears (e.g. installed by scripts/test.sh after a first build
        // without it): a path that does not exist keeps the script stale until it does.
        if !clang.contains('/') {
            for dir in env::split_paths(&env::var_os("PATH").unwrap_or_default()) {
                println!("cargo:rerun-if-changed={}", dir.join(&clang).display());
            }
        } else {
            println!("cargo:rerun-if-changed={clang}");
        }
        println!(
            "cargo:warning=clang not found: AF_XDP support is disabled \
             (install clang and rebuild; quicknat falls back to AF_PACKET)"
        );
        for src in srcs {
            std::fs::write(obj(src), b"").expect("write an empty object");
        }
        return;
    }
    for src in srcs {
        // The fanout program takes its turn with an atomic fetch-and-add (BPF v3, Linux
        // 5.12); the others keep the oldest instruction set.
        let cpu = if src.ends_with("fanout.c") {
            "-mcpu=v3"
        } else {
            "-mcpu=generic"
        };
        let status = Command::new(&clang)
            .args(["-O2", "-g", "-target", "bpf", cpu, "-c", src, "-o"])
            .arg(obj(src))
            .status()
            .expect("run clang");
        assert!(status.success(), "clang failed to compile {src}");
    }
}
