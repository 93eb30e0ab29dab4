//! Flow identity: the 5-tuple as seen on the wire.

use std::fmt;
use std::net::Ipv4Addr;

/// The transport protocols the NAT tracks. ICMP queries use their identifier as both ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Proto {
    /// TCP.
    Tcp = 0,
    /// UDP.
    Udp = 1,
    /// ICMP query (echo); ports are the identifier.
    Icmp = 2,
    /// SCTP (RFC 9260): ports like TCP's and UDP's, in a port space of its own.
    Sctp = 3,
    /// Any other IP protocol (GRE, ESP, ...), translated by address only: both "ports"
    /// of its tuple are its IP protocol number.
    Other = 4,
}

impl Proto {
    /// Number of tracked protocols (port spaces).
    pub const COUNT: usize = 5;

    /// Every tracked protocol, in index order.
    pub const ALL: [Proto; Proto::COUNT] = [
        Proto::Tcp,
        Proto::Udp,
        Proto::Icmp,
        Proto::Sctp,
        Proto::Other,
    ];

    /// The protocol of index `i` ([`index`](Self::index)); past the last, [`Proto::Other`].
    #[inline]
    pub fn from_index(i: u64) -> Proto {
        match i {
            0 => Proto::Tcp,
            1 => Proto::Udp,
            2 => Proto::Icmp,
            3 => Proto::Sctp,
            _ => Proto::Other,
        }
    }

    /// Index of the protocol's port space.
    #[inline]
    pub fn index(self) -> usize {
        self as usize
    }

    /// The protocol's label.
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
            Proto::Icmp => "icmp",
            Proto::Sctp => "sctp",
            Proto::Other => "other",
        }
    }
}

/// An address and port (or ICMP identifier).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    /// IPv4 address.
    pub addr: Ipv4Addr,
    /// Port or ICMP identifier.
    pub port: u16,
}

impl Endpoint {
    /// Builds an endpoint.
    #[inline]
    pub const fn new(addr: Ipv4Addr, port: u16) -> Self {
        Self { addr, port }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.addr, self.port)
    }
}

/// A flow's 5-tuple in the direction a packet travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tuple {
    /// Protocol (port space).
    pub proto: Proto,
    /// Source address and port.
    pub src: Endpoint,
    /// Destination address and port.
    pub dst: Endpoint,
}

impl Tuple {
    /// Builds a tuple.
    #[inline]
    pub const fn new(proto: Proto, src: Endpoint, dst: Endpoint) -> Self {
        Self { proto, src, dst }
    }

    /// The same flow seen from the other side.
    #[inline]
    pub fn reversed(&self) -> Tuple {
        Tuple {
            proto: self.proto,
            src: self.dst,
            dst: self.src,
        }
    }
}

impl fmt::Display for Tuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} -> {}", self.proto.as_str(), self.src, self.dst)
    }
}
