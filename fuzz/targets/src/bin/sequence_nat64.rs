//! libFuzzer target `sequence_nat64`: the checks of `quicknat_fuzz::run("sequence_nat64", ..)`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quicknat_fuzz::run("sequence_nat64", data));
