//! libFuzzer target `config`: the checks of `quicknat_fuzz::run("config", ..)`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quicknat_fuzz::run("config", data));
