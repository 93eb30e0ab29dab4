//! libFuzzer target `netlink`: the checks of `quicknat_fuzz::run("netlink", ..)`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quicknat_fuzz::run("netlink", data));
