//! libFuzzer target `translate_nat64`: the checks of `quicknat_fuzz::run("translate_nat64", ..)`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quicknat_fuzz::run("translate_nat64", data));
