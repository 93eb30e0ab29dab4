//! Hand an IPv4 packet to the kernel to route and send (a raw socket with IP_HDRINCL).
//!
//! The live gateway transmits Ethernet frames itself once it knows the next hop's MAC.
//! Until the kernel has resolved that neighbour, the gateway gives the packet to the
//! kernel instead: the kernel routes it, resolves the neighbour (ARP) and sends it, and
//! the neighbour table then has the entry for the next packets. Correct, slower, rare.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// A raw IPv4 socket that sends complete IPv4 packets (header included).
#[derive(Debug)]
pub struct RawIpv4 {
    sock: Socket,
    sent: u64,
    failed: u64,
}

impl RawIpv4 {
    /// Opens the socket (needs CAP_NET_RAW).
    pub fn open() -> io::Result<Self> {
        let sock = Socket::new(
            Domain::IPV4,
            Type::RAW,
            Some(Protocol::from(libc::IPPROTO_RAW)),
        )
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("raw IPv4 socket (needs root / CAP_NET_RAW): {e}"),
            )
        })?;
        sock.set_header_included_v4(true)?;
        sock.set_nonblocking(true)?;
        Ok(Self {
            sock,
            sent: 0,
            failed: 0,
        })
    }

    /// Sends one IPv4 packet (`pkt` starts at the IPv4 header); the kernel routes it by
    /// its destination. Failures (no route, full queue) are counted, not returned.
    pub fn send(&mut self, pkt: &[u8]) {
        let Some(d) = pkt.get(16..20) else {
            self.failed += 1;
            return;
        };
        let dst = SockAddr::from(SocketAddrV4::new(Ipv4Addr::new(d[0], d[1], d[2], d[3]), 0));
        match self.sock.send_to(pkt, &dst) {
            Ok(_) => self.sent += 1,
            Err(_) => self.failed += 1,
        }
    }

    /// Packets handed to the kernel.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Packets the kernel refused.
    pub fn failed(&self) -> u64 {
        self.failed
    }
}
