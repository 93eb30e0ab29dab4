//! RFC 4884 extensions through the translator (RFC 7915 §4.2 / §5.2): the expected
//! messages are built here octet by octet from RFC 4884's layout (length attribute, zero
//! padding to the word and to 128 octets, extension structure behind) and compared whole.

use super::*;

/// An RFC 4884 §7 extension structure: version 2 header with its checksum, then one MPLS
/// label stack object (RFC 4950: class 1, c-type 1) per label.
fn ext_structure(labels: &[u32]) -> Vec<u8> {
    let mut v = vec![0x20, 0, 0, 0];
    for l in labels {
        v.extend_from_slice(&[0, 8, 1, 1]);
        v.extend_from_slice(&l.to_be_bytes());
    }
    let c = naive(&[&v]);
    v[2..4].copy_from_slice(&c.to_be_bytes());
    v
}

/// `quote` zero-padded to a multiple of `word` and at least 128 octets.
fn pad(quote: &[u8], word: usize) -> Vec<u8> {
    let mut v = quote.to_vec();
    while !v.len().is_multiple_of(word) || v.len() < 128 {
        v.push(0);
    }
    v
}

/// The ICMPv4 error (type, code) about `q4` with `ext` appended and the length attribute
/// set (octet 5, 32-bit words); `rest` holds the other octets of the second word.
fn icmp4_with_ext(ty: u8, code: u8, rest: u32, q4: &[u8], ext: &[u8]) -> Vec<u8> {
    let field = pad(q4, 4);
    let rest = rest | ((field.len() / 4) as u32) << 16;
    let mut m = icmp_err(ty, code, rest, &[field, ext.to_vec()].concat());
    fill(&mut m, 1, None);
    m
}

/// The ICMPv6 error about `q6` with `ext` appended (length attribute at octet 4, 64-bit
/// words), checksummed for `src` -> `dst`.
fn icmp6_with_ext(
    ty: u8,
    code: u8,
    q6: &[u8],
    ext: &[u8],
    src: Ipv6Addr,
    dst: Ipv6Addr,
) -> Vec<u8> {
    let field = pad(q6, 8);
    let rest = ((field.len() / 8) as u32) << 24;
    let mut m = icmp_err(ty, code, rest, &[field, ext.to_vec()].concat());
    fill6(&mut m, 58, src, dst);
    m
}

#[test]
fn icmp4_time_exceeded_with_extension_to_icmp6() {
    let ext = ext_structure(&[0x0001_2340, 0x0005_6781]);
    // 100-byte datagram -> 128-byte field (32 words); 120 bytes translated -> 128 (16).
    // 229 -> 232 (58 words, 3 octets of padding); 249 translated -> 256 (32 words).
    for payload in [72usize, 201, 200] {
        let (q4, q6) = quoted_udp(&vec![0x42; payload]);
        let m4 = icmp4_with_ext(11, 0, 0, &q4, &ext);
        assert_eq!(m4[5] as usize * 4, pad(&q4, 4).len());
        let out = run46(&ipv4(h4(1), &[], &m4), HEAD, &opts()).unwrap();
        let m6 = icmp6_with_ext(3, 0, &q6, &ext, s6(), d6());
        assert_eq!(
            out,
            ipv6(0xB8, 58, 63, s6(), d6(), &m6),
            "payload {payload}"
        );
        assert_eq!(usize::from(out[44]) * 8, pad(&q6, 8).len());
        let v6 = Ipv6Packet::new_checked(&out[..]).unwrap();
        assert!(Icmpv6Packet::new_checked(v6.payload())
            .unwrap()
            .verify_checksum(&s6().octets(), &d6().octets()));
    }
    // Destination Unreachable (port) carries it too: ICMPv6 1/4.
    let (q4, q6) = quoted_udp(b"closed port");
    let out = run46(
        &ipv4(h4(1), &[], &icmp4_with_ext(3, 3, 0, &q4, &ext)),
        HEAD,
        &opts(),
    )
    .unwrap();
    let m6 = icmp6_with_ext(1, 4, &q6, &ext, s6(), d6());
    assert_eq!(out, ipv6(0xB8, 58, 63, s6(), d6(), &m6));
    // With only the promised 28 bytes of headroom (the quote moves) the result is the
    // same message.
    let out28 = run46(
        &ipv4(h4(1), &[], &icmp4_with_ext(3, 3, 0, &q4, &ext)),
        28,
        &opts(),
    )
    .unwrap();
    assert_eq!(out28, out);
}

#[test]
fn icmp6_errors_with_extension_to_icmp4() {
    let ext = ext_structure(&[0x00AB_C001]);
    for (ty6, code6, ty4, code4) in [(1u8, 4u8, 3u8, 3u8), (3, 0, 11, 0), (1, 0, 3, 1)] {
        for payload in [10usize, 93, 300] {
            let (q4, q6) = quoted_udp(&vec![0x24; payload]);
            let m6 = icmp6_with_ext(ty6, code6, &q6, &ext, s6(), d6());
            let out = run64(&ipv6(0, 58, 64, s6(), d6(), &m6), &opts()).unwrap();
            let v4 = Ipv4Packet::new_checked(&out[..]).unwrap();
            assert!(v4.verify_checksum());
            let icmp = Icmpv4Packet::new_checked(v4.payload()).unwrap();
            assert!(icmp.verify_checksum());
            assert_eq!((out[20], out[21]), (ty4, code4));
            // Octet 5: the padded IPv4 datagram in 32-bit words; the rest of the word 0.
            let field = pad(&q4, 4).len();
            assert_eq!(
                (out[24], usize::from(out[25]) * 4, out[26], out[27]),
                (0, field, 0, 0)
            );
            // The quoted IPv4 datagram (ID 0: no Fragment header), zero padding, then the
            // extension unchanged, and nothing else.
            let mut want_q = q4.clone();
            want_q[4..6].copy_from_slice(&[0, 0]);
            want_q[6] &= !0x40;
            want_q[10] = 0;
            want_q[11] = 0;
            let c = naive(&[&want_q[..20]]);
            want_q[10..12].copy_from_slice(&c.to_be_bytes());
            assert_eq!(
                &out[28..28 + field],
                &pad(&want_q, 4)[..],
                "payload {payload}"
            );
            assert_eq!(&out[28 + field..], &ext[..]);
            assert_eq!(out.len(), 28 + field + ext.len());
        }
    }
}

/// RFC 4443 §2.4(c) and RFC 1812 §4.3.2.3: the translated error fits 1280 (IPv6) or 576
/// (IPv4) octets; the datagram is cut, the extension kept whole.
#[test]
fn truncated_to_the_minimum_mtu_with_the_extension_kept() {
    // 4 -> 6: a 1020-byte datagram (255 words, the most the attribute can say) and a
    // 196-byte extension: 48 + 1040 + 196 > 1280, so the field is cut to 1032 bytes (129
    // words, the most in 64-bit words that leaves room) and the error is 1276 bytes.
    let ext = ext_structure(&[7; 24]);
    assert_eq!(ext.len(), 196);
    let (q4, _) = quoted_udp(&[0x33; 992]);
    assert_eq!(q4.len(), 1020);
    let out = run46(
        &ipv4(h4(1), &[], &icmp4_with_ext(11, 0, 0, &q4, &ext)),
        HEAD,
        &opts(),
    )
    .unwrap();
    assert_eq!(out.len(), 1276);
    assert_eq!((out[40], out[44]), (3, 129));
    assert_eq!(&out[1276 - 196..], &ext[..]);
    // The quoted header still tells the original length; the UDP data is cut.
    assert_eq!(u16::from_be_bytes([out[52], out[53]]), 1000);
    assert!(out[96..1276 - 196].iter().all(|&b| b == 0x33));
    let v6 = Ipv6Packet::new_checked(&out[..]).unwrap();
    assert!(Icmpv6Packet::new_checked(v6.payload())
        .unwrap()
        .verify_checksum(&s6().octets(), &d6().octets()));

    // 6 -> 4: a 648-byte datagram and a 44-byte extension: the field is cut to 504 bytes
    // (126 words) so that 28 + 504 + 44 = 576.
    let ext = ext_structure(&[9; 5]);
    assert_eq!(ext.len(), 44);
    let (_, q6) = quoted_udp(&[0x44; 600]);
    let m6 = icmp6_with_ext(1, 4, &q6, &ext, s6(), d6());
    let out = run64(&ipv6(0, 58, 64, s6(), d6(), &m6), &opts()).unwrap();
    assert_eq!(out.len(), 576);
    assert_eq!((out[20], out[25]), (3, 126));
    assert_eq!(&out[576 - 44..], &ext[..]);
    assert!(out[56..576 - 44].iter().all(|&b| b == 0x44));
    assert!(Icmpv4Packet::new_checked(&out[20..])
        .unwrap()
        .verify_checksum());
    // An IPv4 MTU below 576 bounds it too.
    let small = SiitOptions {
        ipv4_mtu: 300,
        ..opts()
    };
    let out = run64(&ipv6(0, 58, 64, s6(), d6(), &m6), &small).unwrap();
    assert_eq!(out.len(), 300);
    assert_eq!(usize::from(out[25]) * 4, 300 - 28 - 44);
    assert_eq!(&out[300 - 44..], &ext[..]);
}

/// A length attribute that makes no sense (past the message, no room for the extension
/// header, shorter than the quoted IP header) is treated as no extension: the whole data
/// is quoted, as for a length of zero, and the length goes out as zero.
#[test]
fn nonsensical_lengths_are_no_extension() {
    let ext = ext_structure(&[1]);
    let (q4, _) = quoted_udp(&[5; 100]);
    let body = [pad(&q4, 4), ext.clone()].concat();
    let as_zero = |attr: u8| {
        let mut m = icmp_err(11, 0, u32::from(attr) << 16, &body);
        fill(&mut m, 1, None);
        run46(&ipv4(h4(1), &[], &m), HEAD, &opts())
    };
    let plain = as_zero(0).unwrap();
    assert_eq!(plain[44..48], [0, 0, 0, 0]);
    // No byte left after the field; past the message; too short for an IPv4 header.
    let words = body.len() / 4;
    for attr in [words as u8, 255, 1, 4] {
        assert_eq!(as_zero(attr).unwrap(), plain, "attribute {attr}");
    }
    // Just room for the extension header: 4 bytes of extension, carried (136 bytes of
    // datagram: the 128-byte quote, the header and checksum of the real extension).
    let out = as_zero(words as u8 - 1).unwrap();
    assert_eq!(out[44], 19);
    assert_eq!(&out[48 + 152..], &ext[8..]);

    let (_, q6) = quoted_udp(&[6; 100]);
    let body = [pad(&q6, 8), ext.clone()].concat();
    let run = |attr: u8| {
        let mut m = icmp_err(1, 4, u32::from(attr) << 24, &body);
        fill6(&mut m, 58, s6(), d6());
        run64(&ipv6(0, 58, 64, s6(), d6(), &m), &opts())
    };
    let plain = run(0).unwrap();
    assert_eq!(plain[24..28], [0, 0, 0, 0]);
    // Past the message (164 bytes: 21 words would be 168), far past, too short for an
    // IPv6 header.
    let words = body.len().div_ceil(8);
    for attr in [words as u8, 255, 1, 4] {
        let out = run(attr).unwrap();
        // Each run has a fresh ID source, so the outer IDs are the same too.
        assert_eq!(out, plain, "attribute {attr}");
    }
}

/// ICMPv4 Fragmentation Needed and Parameter Problem become ICMPv6 messages without a
/// length attribute (Packet Too Big, Parameter Problem): the extension cannot be
/// announced, so it is left out and the quote ends with the datagram.
#[test]
fn extension_left_out_where_the_translation_has_no_length() {
    let ext = ext_structure(&[2, 3]);
    let (q4, q6) = quoted_udp(b"too big");
    for (ty, code, rest, t6) in [(3u8, 4u8, 1400u32, 2u8), (12, 0, 8 << 24, 4), (3, 2, 0, 4)] {
        let m4 = icmp4_with_ext(ty, code, rest, &q4, &ext);
        let out = run46(&ipv4(h4(1), &[], &m4), HEAD, &opts()).unwrap();
        assert_eq!(out[40], t6);
        assert_eq!(&out[48..], &q6[..], "{ty}/{code}: the datagram only");
        let v6 = Ipv6Packet::new_checked(&out[..]).unwrap();
        assert!(Icmpv6Packet::new_checked(v6.payload())
            .unwrap()
            .verify_checksum(&s6().octets(), &d6().octets()));
    }
}

/// A length of zero stays as before RFC 4884: everything after the header is the quote.
#[test]
fn zero_length_keeps_the_old_behaviour() {
    let (q4, q6) = quoted_udp(b"plain");
    let mut m4 = icmp_err(11, 0, 0, &q4);
    fill(&mut m4, 1, None);
    let out = run46(&ipv4(h4(1), &[], &m4), HEAD, &opts()).unwrap();
    let mut m6 = icmp_err(3, 0, 0, &q6);
    fill6(&mut m6, 58, s6(), d6());
    assert_eq!(out, ipv6(0xB8, 58, 63, s6(), d6(), &m6));
}

proptest! {
    /// Any quote size, extension size and length attribute, both directions: no panic; a
    /// forwarded error has valid checksums, fits the minimum MTU, and either announces no
    /// extension or carries the received extension byte for byte right after its padded
    /// datagram field.
    #[test]
    fn extensions_never_panic_and_stay_valid(
        payload in 0usize..1100, objs in 0usize..70, attr in any::<u8>(), exact in any::<bool>(),
        head in prop_oneof![Just(28usize), Just(64usize)], v4 in any::<bool>(), te in any::<bool>(),
    ) {
        let labels: Vec<u32> = (0..objs as u32).collect();
        let ext = ext_structure(&labels);
        let (q4, q6) = quoted_udp(&vec![0x77; payload]);
        if v4 {
            let field = pad(&q4, 4);
            // Announced: the attribute tells the real field (it can: at most 255 words).
            let announced = exact && field.len() / 4 <= 255;
            let a = if announced { (field.len() / 4) as u8 } else { attr };
            let ty = if te { 11 } else { 3 };
            let mut m = icmp_err(ty, if te { 0 } else { 3 }, u32::from(a) << 16, &[field, ext.clone()].concat());
            fill(&mut m, 1, None);
            let pkt = ipv4(h4(1), &[], &m);
            if pkt.len() > 65535 { return Ok(()); }
            if let Ok(out) = run46(&pkt, head, &opts()) {
                prop_assert!(out.len() <= 1280);
                let v6 = Ipv6Packet::new_checked(&out[..]).unwrap();
                prop_assert_eq!(usize::from(v6.payload_len()) + 40, out.len());
                prop_assert!(Icmpv6Packet::new_checked(v6.payload()).unwrap()
                    .verify_checksum(&s6().octets(), &d6().octets()));
                let f = usize::from(out[44]) * 8;
                if f != 0 {
                    prop_assert!(f >= 128);
                    // What the length attribute announced as the extension, unchanged.
                    prop_assert_eq!(&out[48 + f..], &m[8 + usize::from(a) * 4..]);
                } else {
                    // An announced extension this small always fits beside the quote.
                    prop_assert!(!announced);
                }
            }
        } else {
            let field = pad(&q6, 8);
            let announced = exact && field.len() / 8 <= 255;
            let a = if announced { (field.len() / 8) as u8 } else { attr };
            let ty = if te { 3 } else { 1 };
            let mut m = icmp_err(ty, 0, u32::from(a) << 24, &[field, ext.clone()].concat());
            fill6(&mut m, 58, s6(), d6());
            let pkt = ipv6(0, 58, 64, s6(), d6(), &m);
            if let Ok(out) = run64(&pkt, &opts()) {
                prop_assert!(out.len() <= 576);
                let v = Ipv4Packet::new_checked(&out[..]).unwrap();
                prop_assert!(v.verify_checksum());
                prop_assert_eq!(usize::from(v.total_len()), out.len());
                prop_assert!(Icmpv4Packet::new_checked(v.payload()).unwrap().verify_checksum());
                let f = usize::from(out[25]) * 4;
                if f != 0 {
                    prop_assert!(f >= 128);
                    prop_assert_eq!(&out[28 + f..], &m[8 + usize::from(a) * 8..]);
                } else {
                    // Left out only when it cannot fit beside a 128-byte field in 576.
                    prop_assert!(!announced || ext.len() > 576 - 28 - 128);
                }
            }
        }
    }
}
