//! Hand an IP packet to the kernel to route and send: raw sockets that take the whole
//! packet, header included (IPv4 with IP_HDRINCL, IPv6 with IPPROTO_RAW).
//!
//! The live gateway transmits Ethernet frames itself once it knows the next hop's MAC.
//! Until the kernel has resolved that neighbour, the gateway gives the packet to the
//! kernel instead: the kernel routes it, resolves the neighbour (ARP or neighbour
//! discovery) and sends it, and the neighbour table then has the entry for the next
//! packets. Correct, slower, rare.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// The socket and counters both families share.
#[derive(Debug)]
struct RawIp {
    sock: Socket,
    sent: u64,
    failed: u64,
}

impl RawIp {
    /// Opens a non-blocking raw socket of `domain` with protocol IPPROTO_RAW.
    fn open(domain: Domain, what: &str) -> io::Result<Self> {
        let sock = Socket::new(domain, Type::RAW, Some(Protocol::from(libc::IPPROTO_RAW)))
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("raw {what} socket (needs root / CAP_NET_RAW): {e}"),
                )
            })?;
        sock.set_nonblocking(true)?;
        Ok(Self {
            sock,
            sent: 0,
            failed: 0,
        })
    }

    /// Sends `pkt` to `dst` (`None`: the packet was too short to have one), counting the outcome.
    fn send(&mut self, pkt: &[u8], dst: Option<SockAddr>) {
        match dst.map(|d| self.sock.send_to(pkt, &d)) {
            Some(Ok(_)) => self.sent += 1,
            _ => self.failed += 1,
        }
    }
}

/// A raw IPv4 socket that sends complete IPv4 packets (header included).
#[derive(Debug)]
pub struct RawIpv4 {
    raw: RawIp,
}

impl RawIpv4 {
    /// Opens the socket (needs CAP_NET_RAW).
    pub fn open() -> io::Result<Self> {
        let raw = RawIp::open(Domain::IPV4, "IPv4")?;
        raw.sock.set_header_included_v4(true)?;
        Ok(Self { raw })
    }

    /// Sends one IPv4 packet (`pkt` starts at the IPv4 header); the kernel routes it by
    /// its destination. Failures (no route, full queue) are counted, not returned.
    pub fn send(&mut self, pkt: &[u8]) {
        let dst = pkt
            .get(16..20)
            .and_then(|d| <[u8; 4]>::try_from(d).ok())
            .map(|d| SockAddr::from(SocketAddrV4::new(Ipv4Addr::from(d), 0)));
        self.raw.send(pkt, dst);
    }

    /// Packets handed to the kernel.
    pub fn sent(&self) -> u64 {
        self.raw.sent
    }

    /// Packets the kernel refused.
    pub fn failed(&self) -> u64 {
        self.raw.failed
    }
}

/// A raw IPv6 socket that sends complete IPv6 packets (header included).
///
/// Linux treats an AF_INET6 socket with protocol IPPROTO_RAW as header-included
/// (as if IPV6_HDRINCL were set): the packet goes out as given, and the kernel
/// routes it by the destination passed to `sendto`, which [`RawIpv6::send`]
/// takes from the packet's own header. A link-local destination has no scope
/// here and is refused (counted as failed); the gateway forwards to global
/// destinations, whatever its next hop is.
#[derive(Debug)]
pub struct RawIpv6 {
    raw: RawIp,
}

impl RawIpv6 {
    /// Opens the socket (needs CAP_NET_RAW).
    pub fn open() -> io::Result<Self> {
        Ok(Self {
            raw: RawIp::open(Domain::IPV6, "IPv6")?,
        })
    }

    /// Sends one IPv6 packet (`pkt` starts at the IPv6 header); the kernel routes it by
    /// its destination. Failures (too short, no route, full queue) are counted, not returned.
    pub fn send(&mut self, pkt: &[u8]) {
        // RFC 8200 §3: the destination address is bytes 24..40 of the fixed header.
        let dst = pkt
            .get(24..40)
            .and_then(|d| <[u8; 16]>::try_from(d).ok())
            .map(|d| SockAddr::from(SocketAddrV6::new(Ipv6Addr::from(d), 0, 0, 0)));
        self.raw.send(pkt, dst);
    }

    /// Packets handed to the kernel.
    pub fn sent(&self) -> u64 {
        self.raw.sent
    }

    /// Packets the kernel refused.
    pub fn failed(&self) -> u64 {
        self.raw.failed
    }
}

#[cfg(test)]
mod tests;
