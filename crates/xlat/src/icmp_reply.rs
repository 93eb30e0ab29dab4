//! ICMP errors a gateway sends about a packet it could not forward: Time Exceeded when the
//! TTL / Hop Limit runs out, and Fragmentation Needed / Packet Too Big when the packet is
//! too big for the next hop (the signal path MTU discovery depends on, RFC 1191 / RFC
//! 8201; RFC 7915 §4 and §5 ask a translator to send them in the sender's family), and
//! the errors RFC 7915 §4.1, §4.4, §5.1 and §5.4 owe a packet a translator refuses
//! (Source Route Failed, Parameter Problem, Communication Administratively Prohibited).
//!
//! The rules every router follows (RFC 1812 §4.3.2.7, RFC 4443 §2.4 (e)) are applied here,
//! so a caller cannot get them wrong: no error about an ICMP error, about a non-first IPv4
//! fragment, or about a packet whose source does not name one host (IPv4: network 0,
//! loopback, multicast, Class E and broadcast; IPv6: unspecified, multicast, loopback). The quote is as much of the packet as fits in 576 bytes (IPv4, RFC 1812
//! §4.3.2.3) or 1280 bytes (IPv6, RFC 4443 §2.4 (c)).
//!
//! Pure functions over byte slices: never panic, never allocate.

use core::net::{Ipv4Addr, Ipv6Addr};

use wire::checksum::{checksum, combine, fold, pseudo_header_v6, sum};

/// The largest ICMPv4 error datagram (RFC 1812 §4.3.2.3).
const V4_MAX: usize = 576;
/// The largest ICMPv6 error datagram (RFC 4443 §2.4 (c): the IPv6 minimum MTU).
const V6_MAX: usize = 1280;

/// What to say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IcmpReason {
    /// TTL / Hop Limit exceeded in transit.
    TimeExceeded,
    /// Too big for the next hop, whose MTU is given (in the family of the error).
    TooBig {
        /// The next-hop MTU to report.
        mtu: u32,
    },
    /// Destination Unreachable, Port Unreachable (ICMPv4 type 3 code 3, ICMPv6 type 1
    /// code 4): e.g. a NAT's answer to an unsolicited SYN (RFC 5382 REQ-4).
    PortUnreachable,
    /// IPv4 only: Destination Unreachable, Source Route Failed (type 3 code 5), for an
    /// unexpired LSRR/SSRR option (RFC 7915 §4.1). An IPv6 packet is never answered so.
    SourceRouteFailed,
    /// Parameter Problem pointing at byte `pointer` of the packet: ICMPv6 type 4 code 0
    /// "erroneous header field encountered" (RFC 4443 §3.4; RFC 7915 §5.1 for a Routing
    /// header with Segments Left != 0), ICMPv4 type 12 code 0 (RFC 792; a pointer past
    /// byte 255 cannot be said in IPv4 and is not answered).
    ParameterProblem {
        /// Offset of the offending byte from the start of the IP header.
        pointer: u32,
    },
    /// Destination Unreachable, Communication Administratively Prohibited: ICMPv4 type 3
    /// code 13, ICMPv6 type 1 code 1. RFC 7915 §4.4: "The ICMPv4 message, if sent, has a
    /// Type of 3 (Destination Unreachable) and a Code of 13 (Communication
    /// Administratively Prohibited), unless otherwise specified in this document"; §5.4
    /// likewise "a Type of 1 (Destination Unreachable) and a Code of 1 (Communication with
    /// Destination Administratively Prohibited)".
    AdminProhibited,
}

/// Whether an IPv4 packet may be answered with an ICMP error at all.
fn v4_answerable(p: &[u8]) -> Option<usize> {
    if p.len() < 20 || p[0] >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(p[0] & 0x0f) * 4;
    if ihl < 20 || p.len() < ihl {
        return None;
    }
    let frag_offset = u16::from_be_bytes([p[6], p[7]]) & 0x1fff;
    if frag_offset != 0 {
        return None;
    }
    let src = Ipv4Addr::new(p[12], p[13], p[14], p[15]);
    let dst = Ipv4Addr::new(p[16], p[17], p[18], p[19]);
    // RFC 1812 §4.3.2.7: not about "a packet whose source address has a network prefix of
    // zero or is an invalid source address" (§5.3.7: network 0, network 127, multicast,
    // Class E, which holds the limited broadcast), nor "a packet destined to an IP
    // broadcast or IP multicast address".
    if src.octets()[0] == 0
        || src.is_loopback()
        || src.is_multicast()
        || src.octets()[0] >= 240
        || dst.is_multicast()
        || dst.is_broadcast()
    {
        return None;
    }
    // An ICMP error (or a packet too short to tell) is never answered.
    if p[9] == 1 && !matches!(p.get(ihl), Some(0 | 8 | 13 | 14 | 15 | 16 | 17 | 18)) {
        return None;
    }
    Some(ihl)
}

/// Writes an ICMPv4 error about the IPv4 packet `orig` into `out`, from `src`, and returns
/// its length, or `None` when no error may be sent (or `out` is too small for even the
/// headers and 8 bytes of quote).
pub fn icmpv4_error(out: &mut [u8], src: Ipv4Addr, orig: &[u8], why: IcmpReason) -> Option<usize> {
    let ihl = v4_answerable(orig)?;
    let total = usize::from(u16::from_be_bytes([orig[2], orig[3]])).clamp(ihl, orig.len());
    let quote = total.min(V4_MAX - 28).min(out.len().checked_sub(28)?);
    if quote < ihl + 8.min(total - ihl) {
        return None;
    }
    let (ty, code, rest) = match why {
        IcmpReason::TimeExceeded => (11u8, 0u8, [0u8; 4]),
        IcmpReason::TooBig { mtu } => {
            let m = (mtu.min(0xffff) as u16).to_be_bytes();
            (3, 4, [0, 0, m[0], m[1]])
        }
        IcmpReason::PortUnreachable => (3, 3, [0; 4]),
        IcmpReason::SourceRouteFailed => (3, 5, [0; 4]),
        IcmpReason::ParameterProblem { pointer } => (12, 0, [u8::try_from(pointer).ok()?, 0, 0, 0]),
        IcmpReason::AdminProhibited => (3, 13, [0; 4]),
    };
    let len = 28 + quote;
    let dst = [orig[12], orig[13], orig[14], orig[15]];
    let ip = &mut out[..20];
    ip.copy_from_slice(&[
        0x45, 0xc0, // TOS: internetwork control, as routers send errors
        0, 0, 0, 0, 0x40, 0, // id 0, DF (an error need not be fragmented)
        64, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ]);
    ip[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    ip[12..16].copy_from_slice(&src.octets());
    ip[16..20].copy_from_slice(&dst);
    let c = checksum(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    out[20..28].copy_from_slice(&[ty, code, 0, 0, rest[0], rest[1], rest[2], rest[3]]);
    out[28..len].copy_from_slice(&orig[..quote]);
    let c = checksum(&out[20..len]);
    out[22..24].copy_from_slice(&c.to_be_bytes());
    Some(len)
}

/// Whether an IPv6 packet may be answered with an ICMPv6 error at all.
fn v6_answerable(p: &[u8]) -> bool {
    if p.len() < 40 || p[0] >> 4 != 6 {
        return false;
    }
    let mut s = [0u8; 16];
    s.copy_from_slice(&p[8..24]);
    let src = Ipv6Addr::from(s);
    if src.is_unspecified() || src.is_multicast() || src.is_loopback() {
        return false;
    }
    // RFC 4443 §2.4 (e.3): not to a multicast destination (except Packet Too Big, which
    // the callers here never send to multicast traffic they do not forward anyway).
    if p[24] == 0xff {
        return false;
    }
    // An ICMPv6 error is never answered (only the plain header is looked at: an error
    // behind extension headers is rare enough to be answered, which is harmless).
    !(p[6] == 58 && p.get(40).is_none_or(|t| *t < 128))
}

/// Writes an ICMPv6 error about the IPv6 packet `orig` into `out`, from `src`, and returns
/// its length, or `None` when no error may be sent.
pub fn icmpv6_error(out: &mut [u8], src: Ipv6Addr, orig: &[u8], why: IcmpReason) -> Option<usize> {
    if !v6_answerable(orig) {
        return None;
    }
    let total = (40 + usize::from(u16::from_be_bytes([orig[4], orig[5]]))).min(orig.len());
    let quote = total.min(V6_MAX - 48).min(out.len().checked_sub(48)?);
    if quote < 48.min(total) {
        return None;
    }
    let (ty, code, rest) = match why {
        IcmpReason::TimeExceeded => (3u8, 0u8, [0u8; 4]),
        IcmpReason::TooBig { mtu } => (2, 0, mtu.max(1280).to_be_bytes()),
        IcmpReason::PortUnreachable => (1, 4, [0; 4]),
        IcmpReason::SourceRouteFailed => return None,
        IcmpReason::ParameterProblem { pointer } => (4, 0, pointer.to_be_bytes()),
        IcmpReason::AdminProhibited => (1, 1, [0; 4]),
    };
    let len = 48 + quote;
    let mut dst = [0u8; 16];
    dst.copy_from_slice(&orig[8..24]);
    let ip = &mut out[..40];
    ip[..8].copy_from_slice(&[0x60, 0, 0, 0, 0, 0, 58, 64]);
    ip[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
    ip[8..24].copy_from_slice(&src.octets());
    ip[24..40].copy_from_slice(&dst);
    out[40..48].copy_from_slice(&[ty, code, 0, 0, rest[0], rest[1], rest[2], rest[3]]);
    out[48..len].copy_from_slice(&orig[..quote]);
    let ph = pseudo_header_v6(&src.octets(), &dst, 58, (len - 40) as u32);
    let c = !fold(combine(ph, sum(&out[40..len])));
    out[42..44].copy_from_slice(&c.to_be_bytes());
    Some(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v4_udp(src: [u8; 4], ttl: u8, payload: usize) -> Vec<u8> {
        let total = 28 + payload;
        let mut p = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            1,
            0x40,
            0,
            ttl,
            17,
            0,
            0,
        ];
        p.extend_from_slice(&src);
        p.extend_from_slice(&[198, 51, 100, 7]);
        p.extend_from_slice(&[0x13, 0x88, 0, 53, 0, (8 + payload) as u8, 0, 0]);
        p.resize(total, 0xab);
        let c = checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p
    }

    fn v6_udp(payload: usize) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0, 0, 0, 17, 1];
        p[4..6].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
        p.extend_from_slice(&"2001:db8:1::10".parse::<Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(
            &"2001:db8:64::c633:6407"
                .parse::<Ipv6Addr>()
                .unwrap()
                .octets(),
        );
        p.extend_from_slice(&[0x13, 0x88, 0, 53, 0, 0, 0, 0]);
        p.resize(48 + payload, 0xcd);
        p
    }

    #[test]
    fn time_exceeded_v4_quotes_the_packet_and_checks_out() {
        let orig = v4_udp([10, 0, 0, 2], 1, 20);
        let mut out = [0u8; 1500];
        let n = icmpv4_error(
            &mut out,
            Ipv4Addr::new(10, 0, 0, 1),
            &orig,
            IcmpReason::TimeExceeded,
        )
        .unwrap();
        assert_eq!(n, 28 + orig.len());
        assert_eq!(checksum(&out[..20]), 0);
        assert_eq!(checksum(&out[20..n]), 0);
        assert_eq!((out[20], out[21]), (11, 0));
        assert_eq!(&out[16..20], &[10, 0, 0, 2], "back to the sender");
        assert_eq!(&out[28..n], &orig[..]);
    }

    #[test]
    fn frag_needed_v4_caps_the_quote_at_576() {
        let orig = v4_udp([10, 0, 0, 2], 64, 1400);
        let mut out = [0u8; 1500];
        let n = icmpv4_error(
            &mut out,
            Ipv4Addr::new(10, 0, 0, 1),
            &orig,
            IcmpReason::TooBig { mtu: 1280 },
        )
        .unwrap();
        assert_eq!(n, 576);
        assert_eq!(
            (out[20], out[21], u16::from_be_bytes([out[26], out[27]])),
            (3, 4, 1280)
        );
        assert_eq!(checksum(&out[20..n]), 0);
    }

    #[test]
    fn packet_too_big_v6() {
        let orig = v6_udp(1400);
        let mut out = [0u8; 2000];
        let src: Ipv6Addr = "2001:db8:1::1".parse().unwrap();
        let n = icmpv6_error(&mut out, src, &orig, IcmpReason::TooBig { mtu: 1320 }).unwrap();
        assert_eq!(n, 1280);
        assert_eq!((out[40], out[41]), (2, 0));
        assert_eq!(
            u32::from_be_bytes([out[44], out[45], out[46], out[47]]),
            1320
        );
        let ph = pseudo_header_v6(
            &src.octets(),
            &orig[8..24].try_into().unwrap(),
            58,
            (n - 40) as u32,
        );
        assert_eq!(fold(combine(ph, sum(&out[40..n]))), 0xffff);
    }

    #[test]
    fn never_about_errors_fragments_or_odd_sources() {
        let mut out = [0u8; 1500];
        let me = Ipv4Addr::new(10, 0, 0, 1);
        let mut frag = v4_udp([10, 0, 0, 2], 1, 20);
        frag[7] = 1; // offset 8
        assert_eq!(
            icmpv4_error(&mut out, me, &frag, IcmpReason::TimeExceeded),
            None
        );
        // Sources that name no single host (RFC 1812 §4.3.2.7, §5.3.7): broadcast, Class
        // E, network 0, loopback, multicast.
        for src in [
            [255, 255, 255, 255],
            [240, 0, 0, 1],
            [0, 1, 2, 3],
            [127, 0, 0, 1],
            [224, 0, 0, 9],
        ] {
            let p = v4_udp(src, 1, 20);
            assert_eq!(
                icmpv4_error(&mut out, me, &p, IcmpReason::TimeExceeded),
                None,
                "source {src:?}"
            );
        }
        assert!(icmpv4_error(
            &mut out,
            me,
            &v4_udp([1, 0, 0, 1], 1, 20),
            IcmpReason::TimeExceeded
        )
        .is_some());
        let mut err = v4_udp([10, 0, 0, 2], 1, 20);
        err[9] = 1;
        err[20] = 3; // destination unreachable
        assert_eq!(
            icmpv4_error(&mut out, me, &err, IcmpReason::TimeExceeded),
            None
        );
        let mut echo = v4_udp([10, 0, 0, 2], 1, 20);
        echo[9] = 1;
        echo[20] = 8;
        assert!(icmpv4_error(&mut out, me, &echo, IcmpReason::TimeExceeded).is_some());
        let mut e6 = v6_udp(20);
        e6[6] = 58;
        e6[40] = 1;
        assert_eq!(
            icmpv6_error(&mut out, Ipv6Addr::LOCALHOST, &e6, IcmpReason::TimeExceeded),
            None
        );
    }

    #[test]
    fn refusal_errors_carry_the_rfc_types_and_codes() {
        let me4 = Ipv4Addr::new(192, 0, 2, 1);
        let me6: Ipv6Addr = "2001:db8:ff::1".parse().unwrap();
        let orig4 = v4_udp([10, 0, 0, 2], 64, 20);
        let orig6 = v6_udp(20);
        let mut out = [0u8; 1500];
        // RFC 7915 §4.1: Destination Unreachable, Source Route Failed (Type 3, Code 5).
        let n = icmpv4_error(&mut out, me4, &orig4, IcmpReason::SourceRouteFailed).unwrap();
        assert_eq!((out[20], out[21]), (3, 5));
        assert_eq!(&out[24..28], &[0; 4], "unused");
        assert_eq!(checksum(&out[20..n]), 0);
        assert_eq!(&out[28..n], &orig4[..]);
        // RFC 7915 §4.4: Type 3, Code 13.
        icmpv4_error(&mut out, me4, &orig4, IcmpReason::AdminProhibited).unwrap();
        assert_eq!((out[20], out[21]), (3, 13));
        // RFC 792: Parameter Problem, the pointer in the first byte after the checksum.
        let n = icmpv4_error(
            &mut out,
            me4,
            &orig4,
            IcmpReason::ParameterProblem { pointer: 22 },
        )
        .unwrap();
        assert_eq!((out[20], out[21], out[24]), (12, 0, 22));
        assert_eq!(checksum(&out[20..n]), 0);
        assert_eq!(
            icmpv4_error(
                &mut out,
                me4,
                &orig4,
                IcmpReason::ParameterProblem { pointer: 256 }
            ),
            None,
            "an IPv4 pointer is one byte"
        );
        // RFC 7915 §5.1: Parameter Problem code 0 pointing at Segments Left (a 32-bit
        // pointer, RFC 4443 §3.4).
        let n = icmpv6_error(
            &mut out,
            me6,
            &orig6,
            IcmpReason::ParameterProblem { pointer: 43 },
        )
        .unwrap();
        assert_eq!((out[40], out[41]), (4, 0));
        assert_eq!(u32::from_be_bytes([out[44], out[45], out[46], out[47]]), 43);
        let ph = pseudo_header_v6(
            &me6.octets(),
            &orig6[8..24].try_into().unwrap(),
            58,
            (n - 40) as u32,
        );
        assert_eq!(fold(combine(ph, sum(&out[40..n]))), 0xffff);
        assert_eq!(&out[48..n], &orig6[..]);
        // RFC 7915 §5.4: Type 1, Code 1.
        icmpv6_error(&mut out, me6, &orig6, IcmpReason::AdminProhibited).unwrap();
        assert_eq!((out[40], out[41]), (1, 1));
        assert_eq!(&out[44..48], &[0; 4], "unused");
        assert_eq!(
            icmpv6_error(&mut out, me6, &orig6, IcmpReason::SourceRouteFailed),
            None,
            "an IPv4 code only"
        );
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..700), out_len in 0usize..1400, v6 in any::<bool>()) {
            let mut out = vec![0u8; out_len];
            let mut p = bytes;
            if let Some(b) = p.first_mut() {
                *b = (*b & 0x0f) | if v6 { 0x60 } else { 0x40 };
            }
            let _ = icmpv4_error(&mut out, Ipv4Addr::new(10, 0, 0, 1), &p, IcmpReason::TimeExceeded);
            let _ = icmpv6_error(&mut out, Ipv6Addr::LOCALHOST, &p, IcmpReason::TooBig { mtu: 1300 });
        }
    }
}
