//! Compiles the lab's minimal XDP forwarder (`bpf/xdp_fwd.c`) with clang into
//! `OUT_DIR/xdp_fwd.o` for `include_bytes!`, the way crates/io/build.rs compiles the
//! product's steering program.
//!
//! Without clang the object is an empty file: the lab still builds, and its XDP floor arm
//! reports itself unavailable (saying why) while the other arms run. A clang that is
//! present but fails to compile the program fails the build.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "bpf/xdp_fwd.c";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-env-changed=PATH");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("xdp_fwd.o");
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    let have_clang = Command::new(&clang)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_clang {
        if !clang.contains('/') {
            for dir in env::split_paths(&env::var_os("PATH").unwrap_or_default()) {
                println!("cargo:rerun-if-changed={}", dir.join(&clang).display());
            }
        } else {
            println!("cargo:rerun-if-changed={clang}");
        }
        println!("cargo:warning=clang not found: the lab's XDP floor arm is disabled");
        std::fs::write(&out, b"").expect("write empty xdp_fwd.o");
        return;
    }
    let status = Command::new(&clang)
        .args(["-O2", "-g", "-target", "bpf", "-c", src, "-o"])
        .arg(&out)
        .status()
        .expect("run clang");
    assert!(status.success(), "clang failed to compile {src}");
}
