//! Stateless header rewrites. Given a packet and the tuple it must carry, rewrite the
//! addresses, ports or ICMP identifiers in place and keep every checksum right with
//! incremental updates (RFC 1624), never a full recompute on the fast path.
//!
//! This crate decides nothing: which tuple a packet gets is the engine's business. It
//! never allocates on the packet path and never panics: a slice too short for the offsets
//! it is given is reported as `false` and left untouched. It also holds the address types
//! configurations name (`prefix`, `rfc6052`), whose text parsing may allocate an error.

pub mod csum;
pub mod fragment;
pub mod icmp_map;
pub mod icmp_reply;
pub mod ila;
pub mod nat44;
pub mod prefix;
pub mod rfc6052;
pub mod siit;
