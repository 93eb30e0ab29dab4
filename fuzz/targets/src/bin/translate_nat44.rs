//! libFuzzer target `translate_nat44`: the checks of `quicknat_fuzz::run("translate_nat44", ..)`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quicknat_fuzz::run("translate_nat44", data));
