//! Connection tracking for the NAT engines: connection records, bindings, port pools and
//! the TCP state that decides when a session expires.
//!
//! Quick NAT's design: for each new flow an *original* and a *reply* record are installed
//! together, each holding the initial and revised tuple and a last-seen timestamp that every
//! hit refreshes. A reply packet finds its reply record directly; nothing is searched twice.
//!
//! This crate never reads a clock: every operation that depends on time takes a
//! [`Timestamp`]. It never touches packet bytes either: the engine parses, this crate
//! remembers.

pub mod binding;
pub mod pool;
pub mod session;
pub mod tcp;
mod time;
mod tuple;

pub use binding::{Binding, BindingId, BindingTable};
pub use pool::{PoolError, PortPool};
pub use session::{Record, RecordRef, Session, SessionId, SessionTable, Side};
pub use tcp::TcpState;
pub use time::Timestamp;
pub use tuple::{Endpoint, Proto, Tuple};
