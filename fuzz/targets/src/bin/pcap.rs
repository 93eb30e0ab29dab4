//! libFuzzer target `pcap`: the checks of `quicknat_fuzz::run("pcap", ..)`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quicknat_fuzz::run("pcap", data));
