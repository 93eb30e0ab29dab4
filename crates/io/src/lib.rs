//! Packet I/O backends for quicknat.
//!
//! An io backend moves frames (plain byte buffers) between the outside world
//! and the runtime: a capture file today, rings and devices later. Backends
//! never know what NAT is: they do not parse IP, keep sessions or look at
//! configuration. The runtime is the one place where io and the engine meet.

pub mod afpacket;
pub mod afxdp;
pub mod csum;
pub mod gen;
pub mod host;
pub mod mem;
pub mod netlink;
pub mod pcap;
pub mod port;
pub mod rawip;
mod sys;
#[cfg(test)]
mod testnet;
pub mod vnet;

pub use port::{Port, PortStats, Rx, RxMeta};
pub use vnet::VnetHdr;
