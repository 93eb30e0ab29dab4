//! The runtime is where packet I/O meets the engine: it owns the clock, finds the layer-3
//! header in each frame, knows which interface a frame came in on, hands the packet to
//! the mode's worker and transmits what the worker decided. The live gateway (`live`),
//! the capture replay (`offline`) and the control socket live here.

pub mod control;
pub mod cpucache;
pub mod link;
pub mod live;
pub mod metrics;
pub mod natlog;
pub mod offline;
pub mod reload;
pub mod trace;

pub use link::l3_offset;
// Running as a service: start-up checks and systemd's readiness protocol.
pub mod preflight;
pub mod sdnotify;
// Routing integration.
pub mod routing;
