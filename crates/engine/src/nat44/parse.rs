//! From IPv4 bytes to what the NAT needs to know: the flow tuple and where its ports
//! live, or the quoted flow of an ICMP error. Every malformed input maps to a
//! [`DropReason`]; nothing here panics or allocates.

use conntrack::{Endpoint, Proto, Tuple};
use wire::{Icmpv4Packet, Icmpv4Type, IpProtocol, Ipv4Packet, TcpPacket, UdpPacket};
use xlat::nat44::L4Kind;

use super::frag::{FragKey, Piece};
use crate::verdict::DropReason;

/// A packet the NAT can translate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// TCP, UDP or an ICMP query: translate by its own tuple.
    Flow(Flow),
    /// An ICMP error: translate by the flow it quotes.
    IcmpError(IcmpError),
    /// The first fragment of a datagram (offset 0, MF set; TCP, UDP or an ICMP query):
    /// translate by its own tuple like a whole packet, then remember the rewrite under
    /// the datagram's identification.
    FirstFragment(Flow, u16),
    /// A later fragment (offset > 0): translate by its datagram's record.
    Fragment(Fragment),
}

/// A non-first fragment: no transport header, only its datagram's key and its place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragment {
    /// The datagram it belongs to, as it arrived.
    pub key: FragKey,
    /// Its place in the datagram.
    pub piece: Piece,
    /// IPv4 header length.
    pub ihl: usize,
    /// TTL as received.
    pub ttl: u8,
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
    /// What a receive offload left unfinished (set by the worker, not the parser).
    pub offload: crate::verdict::Offload,
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
        IpProtocol::Sctp => Some((Proto::Sctp, L4Kind::Sctp, p16(0)?, p16(2)?)),
        IpProtocol::Icmp => {
            let t = Icmpv4Type::from(*l4.first()?);
            if !matches!(t, Icmpv4Type::EchoRequest | Icmpv4Type::EchoReply) {
                return None;
            }
            let (sp, dp) = icmp_ports(t, p16(4)?);
            Some((Proto::Icmp, L4Kind::IcmpQuery, sp, dp))
        }
        p => Some(address_only(p)),
    }
}

/// An SCTP packet's ports: its common header must be whole.
fn sctp_ports(payload: &[u8]) -> Result<(u16, u16), DropReason> {
    let h = payload
        .get(..wire::sctp::field::HEADER_LEN)
        .ok_or(DropReason::Malformed)?;
    Ok((
        u16::from_be_bytes([h[0], h[1]]),
        u16::from_be_bytes([h[2], h[3]]),
    ))
}

/// Any other protocol is translated by address only: its tuple carries the protocol
/// number as both "ports", so that one tuple names one (inside host, remote host,
/// protocol) and its reply the reverse, as netfilter's generic tracker and VPP's
/// unknown-protocol sessions key them.
#[inline]
fn address_only(p: IpProtocol) -> (Proto, L4Kind, u16, u16) {
    let n = u16::from(u8::from(p));
    (Proto::Other, L4Kind::AddressOnly, n, n)
}

/// The common case read straight from the bytes: a 20-byte IPv4 header (checksum right,
/// not a fragment) carrying a well-formed TCP or UDP header. Anything else returns `None`
/// and takes the full parse, which also names the reason for a drop. When this returns
/// a flow, it is exactly the flow the full parse returns (a test holds it to that).
#[inline]
pub(super) fn parse_fast(pkt: &[u8], verify_ip: bool) -> Option<Flow> {
    let h: &[u8; 28] = pkt.first_chunk::<28>()?;
    if h[0] != 0x45 || h[6] & 0x3f != 0 || h[7] != 0 {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
    if total > pkt.len() || total < 28 {
        return None;
    }
    if verify_ip && wire::checksum::fold(wire::checksum::sum(&h[..20])) != 0xffff {
        return None;
    }
    let src = std::net::Ipv4Addr::new(h[12], h[13], h[14], h[15]);
    let dst = std::net::Ipv4Addr::new(h[16], h[17], h[18], h[19]);
    let sp = u16::from_be_bytes([h[20], h[21]]);
    let dp = u16::from_be_bytes([h[22], h[23]]);
    let (proto, kind, tcp_flags) = match h[9] {
        6 => {
            let t = pkt.get(32..34)?;
            let doff = usize::from(t[0] >> 4) * 4;
            if total < 40 || doff < 20 || doff > total - 20 {
                return None;
            }
            (Proto::Tcp, L4Kind::Tcp, t[1])
        }
        17 => {
            let len = usize::from(u16::from_be_bytes([h[24], h[25]]));
            if len < 8 || len > total - 20 {
                return None;
            }
            (Proto::Udp, L4Kind::Udp, 0)
        }
        _ => return None,
    };
    Some(Flow {
        tuple: Tuple::new(proto, Endpoint::new(src, sp), Endpoint::new(dst, dp)),
        l4_off: 20,
        kind,
        tcp_flags,
        total_len: total,
        ttl: h[8],
        offload: crate::verdict::Offload::None,
    })
}

/// Classifies an IPv4 packet; `verify_ip` is false only for GSO super-packets, whose IPv4
/// header checksum is recomputed for every segment when the kernel splits them.
#[inline]
pub fn parse_with(pkt: &[u8], verify_ip: bool) -> Result<Parsed, DropReason> {
    if let Some(f) = parse_fast(pkt, verify_ip) {
        return Ok(Parsed::Flow(f));
    }
    parse_full(pkt, verify_ip)
}

/// The full parse through the `wire` views: every shape, every drop reason.
pub fn parse_full(pkt: &[u8], verify_ip: bool) -> Result<Parsed, DropReason> {
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
    if verify_ip && !ip.verify_checksum() {
        return Err(DropReason::BadIpChecksum);
    }
    if ip.is_fragment() {
        return parse_fragment(&ip);
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
                offload: crate::verdict::Offload::None,
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
                offload: crate::verdict::Offload::None,
            }))
        }
        IpProtocol::Sctp => {
            let (sp, dp) = sctp_ports(payload)?;
            Ok(Parsed::Flow(Flow {
                tuple: tuple(Proto::Sctp, sp, dp),
                l4_off,
                kind: L4Kind::Sctp,
                tcp_flags: 0,
                total_len,
                ttl,
                offload: crate::verdict::Offload::None,
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
                        offload: crate::verdict::Offload::None,
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
        p => {
            let (proto, kind, sp, dp) = address_only(p);
            Ok(Parsed::Flow(Flow {
                tuple: tuple(proto, sp, dp),
                l4_off,
                kind,
                tcp_flags: 0,
                total_len,
                ttl,
                offload: crate::verdict::Offload::None,
            }))
        }
    }
}

/// A fragment (the header is valid, its checksum checked). The first must hold the whole
/// transport header of a protocol with ports (RFC 1858: a TCP header split across
/// fragments is an attack, not a packet); ICMP errors in fragments are not tracked.
fn parse_fragment(ip: &Ipv4Packet<&[u8]>) -> Result<Parsed, DropReason> {
    let proto = ip.protocol();
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let l4_off = ip.header_len();
    let total_len = usize::from(ip.total_len());
    let ttl = ip.ttl();
    if ip.frag_offset() != 0 {
        return Ok(Parsed::Fragment(Fragment {
            key: FragKey {
                src,
                dst,
                proto: u8::from(proto),
                ident: ip.ident(),
            },
            piece: Piece {
                offset: u32::from(ip.frag_offset()),
                len: total_len.saturating_sub(l4_off) as u32,
                more: ip.more_frags(),
            },
            ihl: l4_off,
            ttl,
        }));
    }
    let payload = ip.payload();
    // An ICMP error in fragments is not translated either (its quote would need the
    // whole message for the checksum), nor SCTP: its CRC32c covers the whole packet,
    // which a first fragment's new ports would change and the NAT never holds (SCTP
    // endpoints fragment at their own layer, RFC 9260 §7.3, rather than IP's).
    if proto == IpProtocol::Sctp {
        return Err(DropReason::Fragment);
    }
    let (proto, kind, sp, dp) = ports(proto, payload).ok_or(DropReason::Fragment)?;
    let tcp_flags = match kind {
        L4Kind::Tcp => TcpPacket::new_checked(payload)
            .map_err(|_| DropReason::Fragment)?
            .flags(),
        L4Kind::Udp if payload.len() < 8 => return Err(DropReason::Fragment),
        _ => 0,
    };
    Ok(Parsed::FirstFragment(
        Flow {
            tuple: Tuple::new(proto, Endpoint::new(src, sp), Endpoint::new(dst, dp)),
            l4_off,
            kind,
            tcp_flags,
            total_len,
            ttl,
            offload: crate::verdict::Offload::None,
        },
        ip.ident(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(tcp: bool) -> Vec<u8> {
        let mut p = vec![
            0x45,
            0,
            0,
            40,
            0,
            1,
            0x40,
            0,
            64,
            if tcp { 6 } else { 17 },
            0,
            0,
            10,
            0,
            0,
            2,
            198,
            51,
            100,
            2,
        ];
        p.extend_from_slice(&[
            0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x12, 0xff, 0xff, 0, 0, 0, 0,
        ]);
        if !tcp {
            p[24] = 0;
            p[25] = 20;
        }
        let c = wire::checksum::checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p
    }

    proptest! {
        /// Whenever the fast path answers, it answers exactly as the full parse does.
        #[test]
        fn fast_path_agrees_with_full_parse(tcp in any::<bool>(), edits in proptest::collection::vec((0usize..40, any::<u8>()), 0..4), cut in 0usize..41, fix_csum in any::<bool>()) {
            let mut p = sample(tcp);
            for (at, v) in edits { p[at] = v; }
            if fix_csum {
                p[10] = 0;
                p[11] = 0;
                let c = wire::checksum::checksum(&p[..20]);
                p[10..12].copy_from_slice(&c.to_be_bytes());
            }
            p.truncate(cut);
            if let Some(f) = parse_fast(&p, true) {
                prop_assert_eq!(parse_full(&p, true), Ok(Parsed::Flow(f)));
            }
        }
    }

    #[test]
    fn fast_path_takes_the_common_packets() {
        assert!(parse_fast(&sample(true), true).is_some());
        assert!(parse_fast(&sample(false), true).is_some());
    }
}
