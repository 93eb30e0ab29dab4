//! Packet I/O backends for quicknat.
//!
//! An io backend moves frames (plain byte buffers) between the outside world
//! and the runtime. Backends never know what NAT is: they do not keep
//! sessions or look at configuration, and parse frames only as far as
//! completing a sender's partial checksum needs. The runtime is the one place
//! where io and the engine meet.
//!
//! * [`Port`] (`port.rs`): the one interface a worker sees of a link —
//!   batched receive with frames lent in place, [`Rx::Back`] to send one back
//!   out of the same port, `send` / `flush` / `wait` / `stats`. Implemented by
//!   [`afpacket::PacketPort`] (TPACKET_V3 ring + `sendmmsg`), [`afxdp::AfXdp`]
//!   (AF_XDP copy mode) and [`mem::MemPort`] (in memory, for tests).
//! * [`csum`]: completing partial TCP/UDP checksums, for every backend;
//!   [`vnet`]: the virtio-net header ports with GSO pass-through carry.
//! * [`host`]: host setup around the ports' interfaces (ethtool offloads, the
//!   nftables ingress table) and the process's standing (root, open-file limit,
//!   network namespace); [`privs`]: giving up privileges after set-up, Unix socket
//!   peers and private Unix sockets.
//! * [`udp`]: batched UDP on a connected socket (`sendmmsg` / `recvmmsg`), for the
//!   lab's traffic generator.
//! * [`tcfast`]: the fast path at the tc ingress hook for the AF_PACKET backend (the
//!   XDP fast path's maps, a GSO super-packet forwarded as it is).
//! * [`pcap`] files, [`netlink`] (routes, neighbours), [`rawip`] (handing
//!   packets to the kernel), and the unsafe edge in `sys.rs` (one `Mmap`,
//!   socket options), each `unsafe` block with its `// SAFETY:` line.

pub mod afpacket;
pub mod afxdp;
pub mod announce;
pub mod capture;
pub mod csum;
pub mod host;
pub mod mem;
pub mod netlink;
pub mod pcap;
pub mod pcapng;
pub mod port;
pub mod privs;
pub mod rawip;
mod sys;
pub mod tcfast;
#[cfg(test)]
mod testnet;
pub mod udp;
pub mod vnet;

pub use port::{Port, PortStats, Rx, RxMeta};
pub use vnet::VnetHdr;
