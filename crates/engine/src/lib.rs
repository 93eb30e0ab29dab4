//! The stateful translation modes of quicknat, sans-I/O.
//!
//! The engine never opens a socket or reads a clock: a caller hands it a packet, the
//! direction it travelled and the current time, and gets back what the gateway sends
//! ([`Emit`]): every mode has the one shape of [`mode`]. This is what lets the same code
//! run under a pcap replay, a live worker and a deterministic test.

pub mod any;
pub mod config;
pub mod events;
pub mod ila;
pub mod introspect;
pub mod ipid;
#[cfg(test)]
mod layering_tests;
pub mod mode;
pub mod nat44;
pub mod nat64;
pub mod reload;
pub mod siit;
mod stats;
#[cfg(test)]
mod testpkt;
mod verdict;

pub use mode::{Egress, Emit, Frame, Mode, ModeWorker, Output, Side, HEADROOM};
pub use stats::{Counters, TableOccupancy};
pub use verdict::{Direction, DropReason, Offload};
