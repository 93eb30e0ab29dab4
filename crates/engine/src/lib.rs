//! The stateful translation modes of quicknat, sans-I/O.
//!
//! The engine never opens a socket or reads a clock: a caller hands it a packet, the
//! direction it travelled and the current time, and gets a [`Verdict`] back. This is what
//! lets the same code run under a pcap replay, a live worker and a deterministic test.

pub mod config;
pub mod ila;
pub mod nat44;
pub mod nat64;
pub mod siit;
mod stats;
#[cfg(test)]
mod testpkt;
mod verdict;

pub use stats::Counters;
pub use verdict::{Direction, DropReason, Emit, Offload, Verdict, HEADROOM};
