//! What quicknat's fuzzers check, as plain functions over bytes: one per target, named
//! in [`TARGETS`]. The libFuzzer binaries (`fuzz/targets`, built by `scripts/fuzz.sh`)
//! and the corpus replay test (`tests/corpus.rs`, run by `cargo test`) call the same
//! [`run`], so a crash the fuzzer finds is a failing test once its input is in
//! `fuzz/corpus/<target>/`.
//!
//! Every check panics with a message saying what broke; a panic is what the fuzzer
//! reports. Nothing here runs on the data path.

pub mod modes;
pub mod packet;
pub mod parsers;
pub mod seq;
pub mod views;

/// The configuration file parser of the `quicknat` binary (its library half).
pub use quicknat::config as qconfig;

use modes::Kind;
use seq::Stateful;

/// Every fuzz target, by name (the name of its binary and of its corpus directory).
pub const TARGETS: &[&str] = &[
    "wire",
    "translate_nat44",
    "translate_nat64",
    "translate_siit",
    "translate_clat",
    "translate_ila",
    "sequence_nat44",
    "sequence_nat64",
    "config",
    "pcap",
    "netlink",
];

/// Runs the checks of `target` on `data`; panics on a finding. Unknown names panic too.
pub fn run(target: &str, data: &[u8]) {
    match target {
        "wire" => views::check(data),
        "translate_nat44" => modes::check(Kind::Nat44, data),
        "translate_nat64" => modes::check(Kind::Nat64, data),
        "translate_siit" => modes::check(Kind::Siit, data),
        "translate_clat" => modes::check(Kind::Clat, data),
        "translate_ila" => modes::check(Kind::Ila, data),
        "sequence_nat44" => seq::check(Stateful::Nat44, data),
        "sequence_nat64" => seq::check(Stateful::Nat64, data),
        "config" => parsers::config(data),
        "pcap" => parsers::pcap(data),
        "netlink" => parsers::netlink(data),
        other => panic!("no fuzz target {other:?} (see TARGETS)"),
    }
}
