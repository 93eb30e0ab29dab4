//! libFuzzer target `translate_clat`: the checks of `quicknat_fuzz::run("translate_clat", ..)`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quicknat_fuzz::run("translate_clat", data));
