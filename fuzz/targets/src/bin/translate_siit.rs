//! libFuzzer target `translate_siit`: the checks of `quicknat_fuzz::run("translate_siit", ..)`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quicknat_fuzz::run("translate_siit", data));
