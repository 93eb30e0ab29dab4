//! libFuzzer target `translate_ila`: the checks of `quicknat_fuzz::run("translate_ila", ..)`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quicknat_fuzz::run("translate_ila", data));
