//! From IPv4 bytes to what the NAT needs to know: the flow tuple and where its ports
//! live, or the quoted flow of an ICMP error. Every malformed input maps to a
//! [`DropReason`]; nothing here panics or allocates.

use conntrack::{Endpoint, Proto, Tuple};
use wire::{Icmpv4Packet, Icmpv4Type, IpProtocol, Ipv4Packet, TcpPacket, UdpPacket};
use xlat::nat44::L4Kind;

use crate::verdict::DropReason;

/// A packet the NAT can translate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// TCP, UDP or an ICMP query: translate by its own tuple.
    Flow(Flow),
    /// An ICMP error: translate by the flow it quotes.
    IcmpError(IcmpError),
}

/// A TCP, UDP or ICMP query packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow {
    /// The tuple as the packet carries it.
    pub tuple: Tuple,
    /// Offset of the transport header (= IPv4 header length).
    pub l4_off: usize,
    /// Where the ports live.
    pub kind: L4Kind,
    /// TCP flags (0 otherwise).
    pub tcp_flags: u8,
    /// IPv4 total length: bytes beyond it are link padding.
    pub total_len: usize,
    /// TTL as received.
    pub ttl: u8,
}

/// An ICMP error and the flow it quotes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcmpError {
    /// Outer source address.
    pub outer_src: std::net::Ipv4Addr,
    /// Outer destination address.
    pub outer_dst: std::net::Ipv4Addr,
    /// Offset of the ICMP header.
    pub icmp_off: usize,
    /// The quoted packet's tuple, as it was sent.
    pub quoted: Tuple,
    /// The quoted IPv4 header's length.
    pub quote_ihl: usize,
    /// Where the quoted ports live.
    pub quote_kind: L4Kind,
    /// Outer total length.
    pub total_len: usize,
    /// Outer TTL.
    pub ttl: u8,
}

fn wire_reason(e: wire::Error) -> DropReason {
    match e {
        wire::Error::Truncated => DropReason::Truncated,
        _ => DropReason::Malformed,
    }
}

/// An ICMP query's identifier belongs to the side that asked: a request carries it as
/// its source "port", a reply as its destination "port" (the other is 0). This makes a
/// reply's tuple the exact reverse of its request's, as for TCP and UDP.
#[inline]
fn icmp_ports(t: Icmpv4Type, id: u16) -> (u16, u16) {
    match t {
        Icmpv4Type::EchoReply => (0, id),
        _ => (id, 0),
    }
}

/// Reads the ports (or identifier) of a transport header that may be cut short.
fn ports(proto: IpProtocol, l4: &[u8]) -> Option<(Proto, L4Kind, u16, u16)> {
    let p16 = |o: usize| l4.get(o..o + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    match proto {
        IpProtocol::Tcp => Some((Proto::Tcp, L4Kind::Tcp, p16(0)?, p16(2)?)),
        IpProtocol::Udp => Some((Proto::Udp, L4Kind::Udp, p16(0)?, p16(2)?)),
        IpProtocol::Icmp => {
            let t = Icmpv4Type::from(*l4.first()?);
            if !matches!(t, Icmpv4Type::EchoRequest | Icmpv4Type::EchoReply) {
                return None;
            }
            let (sp, dp) = icmp_ports(t, p16(4)?);
            Some((Proto::Icmp, L4Kind::IcmpQuery, sp, dp))
        }
        _ => None,
    }
}

/// Classifies an IPv4 packet. `verify_ip_checksum` checks the header checksum as a router must.
pub fn parse(pkt: &[u8]) -> Result<Parsed, DropReason> {
    if pkt.first().map(|b| b >> 4) == Some(6) {
        return Err(DropReason::NotIpv4);
    }
    let ip = Ipv4Packet::new_checked(pkt).map_err(|e| match e {
        wire::Error::BadVersion => DropReason::NotIpv4,
        // A total length beyond the bytes received: the packet was cut short.
        wire::Error::BadLength
            if pkt
                .get(2..4)
                .is_some_and(|l| usize::from(u16::from_be_bytes([l[0], l[1]])) > pkt.len()) =>
        {
            DropReason::Truncated
        }
        e => wire_reason(e),
    })?;
    if !ip.verify_checksum() {
        return Err(DropReason::BadIpChecksum);
    }
    if ip.is_fragment() {
        return Err(DropReason::Fragment);
    }
    let l4_off = ip.header_len();
    let total_len = usize::from(ip.total_len());
    let ttl = ip.ttl();
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let payload = ip.payload();
    let tuple = |proto, sp, dp| Tuple::new(proto, Endpoint::new(src, sp), Endpoint::new(dst, dp));
    match ip.protocol() {
        IpProtocol::Tcp => {
            let tcp = TcpPacket::new_checked(payload).map_err(wire_reason)?;
            Ok(Parsed::Flow(Flow {
                tuple: tuple(Proto::Tcp, tcp.src_port(), tcp.dst_port()),
                l4_off,
                kind: L4Kind::Tcp,
                tcp_flags: tcp.flags(),
                total_len,
                ttl,
            }))
        }
        IpProtocol::Udp => {
            let udp = UdpPacket::new_checked(payload).map_err(wire_reason)?;
            Ok(Parsed::Flow(Flow {
                tuple: tuple(Proto::Udp, udp.src_port(), udp.dst_port()),
                l4_off,
                kind: L4Kind::Udp,
                tcp_flags: 0,
                total_len,
                ttl,
            }))
        }
        IpProtocol::Icmp => {
            let icmp = Icmpv4Packet::new_checked(payload).map_err(wire_reason)?;
            match icmp.msg_type() {
                t @ (Icmpv4Type::EchoRequest | Icmpv4Type::EchoReply) => {
                    let (sp, dp) = icmp_ports(t, icmp.echo_ident());
                    Ok(Parsed::Flow(Flow {
                        tuple: tuple(Proto::Icmp, sp, dp),
                        l4_off,
                        kind: L4Kind::IcmpQuery,
                        tcp_flags: 0,
                        total_len,
                        ttl,
                    }))
                }
                Icmpv4Type::DstUnreachable
                | Icmpv4Type::TimeExceeded
                | Icmpv4Type::ParamProblem
                | Icmpv4Type::SourceQuench => {
                    let quote = Ipv4Packet::new_checked_embedded(icmp.data())
                        .map_err(|_| DropReason::IcmpErrorMalformed)?;
                    if quote.is_fragment() && quote.frag_offset() != 0 {
                        return Err(DropReason::IcmpErrorMalformed);
                    }
                    let (proto, quote_kind, sp, dp) = match quote.protocol() {
                        // RFC 5508 REQ-?: never translate (nor generate) errors about errors.
                        IpProtocol::Icmp
                            if quote.payload().first().is_some_and(|t| {
                                !matches!(
                                    Icmpv4Type::from(*t),
                                    Icmpv4Type::EchoRequest | Icmpv4Type::EchoReply
                                )
                            }) =>
                        {
                            return Err(DropReason::UnsupportedIcmp)
                        }
                        p => ports(p, quote.payload()).ok_or(DropReason::IcmpErrorMalformed)?,
                    };
                    Ok(Parsed::IcmpError(IcmpError {
                        outer_src: src,
                        outer_dst: dst,
                        icmp_off: l4_off,
                        quoted: Tuple::new(
                            proto,
                            Endpoint::new(quote.src_addr(), sp),
                            Endpoint::new(quote.dst_addr(), dp),
                        ),
                        quote_ihl: quote.header_len(),
                        quote_kind,
                        total_len,
                        ttl,
                    }))
                }
                _ => Err(DropReason::UnsupportedIcmp),
            }
        }
        _ => Err(DropReason::UnsupportedProtocol),
    }
}
