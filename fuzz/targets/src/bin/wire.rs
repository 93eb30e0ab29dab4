//! libFuzzer target `wire`: the checks of `quicknat_fuzz::run("wire", ..)`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quicknat_fuzz::run("wire", data));
