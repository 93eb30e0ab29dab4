//! The runtime is where packet I/O meets the engine: it owns the clock, finds the layer-3
//! header in each frame, decides the direction from the configuration, and hands the
//! packet to the engine. Today: offline pcap replay. Live workers, RSS dispatch and the
//! reaper thread come next and reuse the same per-frame step.

pub mod balance;
pub mod bench;
pub mod control;
pub mod live;
pub mod offline;
pub mod pipeline;
pub mod rss;
mod step;

pub use step::{l3_offset, Nat44Step, StepOutcome};
