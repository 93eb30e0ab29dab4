//! Connection tracking for the NAT engines, shared by all worker threads without locks:
//! connection records, bindings, port pools, the TCP state that decides when a session
//! expires, and the reclamation scheme that lets one reaper thread delete safely.
//!
//! Quick NAT's design: for each new flow an *original* and a *reply* record are installed
//! together, each holding the initial and revised tuple and a last-seen timestamp that every
//! hit refreshes. A reply packet finds its reply record directly; nothing is searched twice.
//!
//! This crate never reads a clock: every operation that depends on time takes a
//! [`Timestamp`]. It never touches packet bytes either: the engine parses, this crate
//! remembers. It uses no `unsafe`: shared state lives in atomics, slots are reused only
//! after a QSBR grace period.

pub mod chain;
pub mod host_table;
pub mod ila_table;
pub mod key;
pub mod pool;
pub mod qsbr;
pub mod reftable;
// The session table (and its TCP state) stays on std's atomics: the loom models (`--cfg
// loom`) cover the chain index, slab, reftable and QSBR it is built from.
#[cfg(not(loom))]
pub mod session;
pub mod siphash;
pub mod slab;
pub mod subscriber;
mod sync;
#[cfg(not(loom))]
pub mod tcp;
mod time;
mod tuple;

#[cfg(all(test, loom))]
mod loom_tests;

pub use key::Key;
pub use pool::{Allocated, Block, BlockStats, PoolError, PortPool};
pub use qsbr::{Qsbr, QsbrHandle};
pub use reftable::{RefInsertError, RefTable};
#[cfg(not(loom))]
pub use session::{
    Hit, InsertError, NewSession, Record, RecordRef, Room, SessionId, SessionTable, SessionView,
    Staged,
};
pub use siphash::SipKey;
pub use subscriber::{Counted, Refused, Subscribers};
#[cfg(not(loom))]
pub use tcp::{Reject as TcpReject, Segment as TcpSegment, TcpState};
pub use time::Timestamp;
pub use tuple::{Endpoint, Proto, Tuple};
