//! `AdjustTransport` behind the Mobility (RFC 6275 §6.1), HIP (RFC 7401 §5.1) and Shim6
//! (RFC 5533 §5.1, §5.2) headers: headers built by hand from the RFCs' figures, every
//! checksum recomputed from scratch after the swap.

use super::*;
use proptest::prelude::*;
use wire::checksum::{checksum, combine, pseudo_header_v6};

const SRC: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
/// ila.rst: SIR prefix 3333:0:0:1, locator 2001:0:87:0, identifier 2000:0:1:87.
const SIR: u64 = 0x3333_0000_0000_0001;
const LOC: u64 = 0x2001_0000_0087_0000;
const SIR_DST: [u8; 16] = [0x33, 0x33, 0, 0, 0, 0, 0, 1, 0x20, 0, 0, 0, 0, 1, 0, 0x87];
const MH: u8 = 135;
const HIP: u8 = 139;
const SHIM6: u8 = 140;

fn adjust() -> IlaMapping {
    IlaMapping {
        sir: SirPrefix(SIR),
        locator: Locator(LOC),
        csum: CsumMode::AdjustTransport,
        format: IdentFormat::Luid,
    }
}

/// An IPv6 packet from SRC to `dst`: `first` as the fixed header's next header, then
/// `rest` (extension headers and what they carry).
fn packet(first: u8, dst: [u8; 16], rest: &[u8]) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(rest.len() as u16).to_be_bytes());
    p.extend_from_slice(&[first, 64]);
    p.extend_from_slice(&SRC);
    p.extend_from_slice(&dst);
    p.extend_from_slice(rest);
    p
}

/// RFC 8200 §8.1 checksum over the packet's own addresses and `p[at..]` as protocol
/// `proto`, whatever the checksum field holds: 0xFFFF when the field is right.
fn verify(p: &[u8], at: usize, proto: u8, src: [u8; 16], dst: [u8; 16]) -> u16 {
    fold(combine(
        pseudo_header_v6(&src, &dst, proto, (p.len() - at) as u32),
        sum(&p[at..]),
    ))
}

fn addrs(p: &[u8]) -> ([u8; 16], [u8; 16]) {
    (p[8..24].try_into().unwrap(), p[24..40].try_into().unwrap())
}

/// Fills the 16-bit checksum at `p[at + csum_at]` for protocol `proto` over `p[at..]`.
fn fill(p: &mut [u8], at: usize, csum_at: usize, proto: u8, src: [u8; 16], dst: [u8; 16]) {
    p[at + csum_at..at + csum_at + 2].copy_from_slice(&[0, 0]);
    let c = !verify(p, at, proto, src, dst);
    p[at + csum_at..at + csum_at + 2].copy_from_slice(&c.to_be_bytes());
}

/// RFC 6275 §6.1.7 Binding Update: Payload Proto 59, Header Len 1 (16 octets), MH Type 5,
/// checksum, sequence, flags, lifetime, and a PadN option to the 8-octet boundary.
fn binding_update(payload_proto: u8) -> Vec<u8> {
    vec![
        payload_proto,
        1,
        5,
        0,
        0,
        0,
        0x12,
        0x34,
        0x80,
        0,
        0,
        0x10,
        1,
        2,
        0,
        0,
    ]
}

/// RFC 7401 §5.1 fixed HIP header (an I1, §5.3.1): Next Header, Header Length 4 (40
/// octets), packet type 1, version 2, checksum, controls, sender's and receiver's HITs.
fn hip_i1(next: u8, len: u8) -> Vec<u8> {
    let mut h = vec![next, len, 1, 0x21, 0, 0, 0, 0];
    h.extend((0..32).map(|i| 0x20 + i as u8));
    h.resize((usize::from(len) + 1) * 8, 0);
    h
}

/// The translation in both directions: checksum at `at + csum_at` for `proto` verifies
/// against the locator after SIR -> ILA, and the packet comes back byte for byte.
fn round_trip(mut p: Vec<u8>, at: usize, proto: u8) {
    let orig = p.clone();
    let (src, dst) = addrs(&p);
    assert_eq!(verify(&p, at, proto, src, dst), 0xFFFF, "built wrong");
    sir_to_ila(&mut p, &adjust()).unwrap();
    let (_, ila) = addrs(&p);
    assert_eq!(ila[..8], LOC.to_be_bytes());
    assert_eq!(
        verify(&p, at, proto, src, ila),
        0xFFFF,
        "stale checksum after SIR -> ILA"
    );
    ila_to_sir(&mut p, &adjust()).unwrap();
    assert_eq!(p, orig);
}

#[test]
fn mobility_header_checksum_follows_the_locator() {
    // Directly after the IPv6 header, and behind a Destination Options header (where a
    // Home Address option would be, RFC 6275 §6.3).
    let mut p = packet(MH, SIR_DST, &binding_update(59));
    let (s, d) = addrs(&p);
    fill(&mut p, 40, 4, MH, s, d);
    round_trip(p, 40, MH);
    let mut rest = vec![MH, 0, 1, 4, 0, 0, 0, 0];
    rest.extend(binding_update(59));
    let mut p = packet(60, SIR_DST, &rest);
    fill(&mut p, 48, 4, MH, s, d);
    round_trip(p, 48, MH);
}

#[test]
fn hip_checksum_follows_the_locator() {
    let mut p = packet(HIP, SIR_DST, &hip_i1(59, 4));
    let (s, d) = addrs(&p);
    fill(&mut p, 40, 4, HIP, s, d);
    round_trip(p.clone(), 40, HIP);
    // With parameters after the fixed header (Header Length 6: 56 octets).
    let mut p = packet(HIP, SIR_DST, &hip_i1(59, 6));
    fill(&mut p, 40, 4, HIP, s, d);
    round_trip(p, 40, HIP);
}

/// RFC 5533 §5.1: behind the Payload Extension Header the ULP's checksum covers the ULIDs
/// (the receiver puts them back in the IPv6 header before the ULP sees it), which ILA does
/// not change: TCP and UDP there keep their checksum, and it still verifies over the
/// ULIDs; the Shim6 header (no checksum) is untouched.
#[test]
fn shim6_payload_keeps_the_ulp_checksum_over_the_ulids() {
    let ulid_src = [0xfd; 16];
    let ulid_dst = [0xfe; 16];
    for (proto, csum_at, l4) in [
        (
            17u8,
            6usize,
            vec![
                0x12, 0x34, 0x16, 0x2e, 0, 13, 0, 0, b'h', b'e', b'l', b'l', b'o',
            ],
        ),
        (6, 16, {
            let mut t = vec![0u8; 20];
            t[0..4].copy_from_slice(&[0x04, 0xd2, 0x00, 0x50]);
            t[12] = 0x50;
            t[13] = 0x02;
            t
        }),
    ] {
        // Next Header, Hdr Ext Len 0, P = 1 and a 47-bit Receiver Context Tag.
        let mut rest = vec![proto, 0, 0x80, 0, 0x12, 0x34, 0x56, 0x78];
        rest.extend(&l4);
        let mut p = packet(SHIM6, SIR_DST, &rest);
        fill(&mut p, 48, csum_at, proto, ulid_src, ulid_dst);
        let orig = p.clone();
        sir_to_ila(&mut p, &adjust()).unwrap();
        assert_eq!(p[40..], orig[40..], "proto {proto}");
        assert_eq!(verify(&p, 48, proto, ulid_src, ulid_dst), 0xFFFF);
        ila_to_sir(&mut p, &adjust()).unwrap();
        assert_eq!(p, orig);
    }
}

/// RFC 5533 §5.2: a control message's checksum has no pseudo-header, so the swap leaves
/// it right without touching it.
#[test]
fn shim6_control_checksum_needs_nothing() {
    // Next Header 59, Hdr Ext Len 1, P = 0 and type 66 (Keepalive), version 0,
    // checksum, receiver context tag, padding.
    let mut h = vec![59, 1, 66, 0, 0, 0, 0, 0, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0];
    let c = checksum(&h);
    h[4..6].copy_from_slice(&c.to_be_bytes());
    let mut p = packet(SHIM6, SIR_DST, &h);
    sir_to_ila(&mut p, &adjust()).unwrap();
    assert_eq!(p[40..], h[..]);
    assert_eq!(checksum(&p[40..]), 0);
}

/// What the RFCs do not define after these headers, and chains cut short, are refused
/// (the packet untouched): never a stale checksum on the wire.
#[test]
fn undefined_or_truncated_chains_are_refused_untouched() {
    let udp = [0x12, 0x34, 0x16, 0x2e, 0, 8, 0x55, 0x55];
    let cases: Vec<(Vec<u8>, u8, IlaError)> = vec![
        // A transport after a Mobility Header: RFC 6275 defines only 59.
        (
            {
                let mut r = binding_update(17);
                r.extend(udp);
                r
            },
            MH,
            IlaError::Malformed,
        ),
        // After HIP: RFC 7401 defines only 59.
        (
            {
                let mut r = hip_i1(17, 4);
                r.extend(udp);
                r
            },
            HIP,
            IlaError::Malformed,
        ),
        // A HIP header shorter than its fixed 40 octets.
        (hip_i1(59, 2), HIP, IlaError::Malformed),
        // A Shim6 control message followed by a transport.
        (
            {
                let mut r = vec![17, 0, 66, 0, 0, 0, 0, 0];
                r.extend(udp);
                r
            },
            SHIM6,
            IlaError::Malformed,
        ),
        // Header Len says 24 octets, 16 are there.
        (
            {
                let mut r = binding_update(59);
                r[1] = 2;
                r
            },
            MH,
            IlaError::Truncated,
        ),
        (hip_i1(59, 4)[..32].to_vec(), HIP, IlaError::Truncated),
        // Not even the first 8 octets.
        (binding_update(59)[..6].to_vec(), MH, IlaError::Truncated),
        (vec![59, 0, 0x80, 0], SHIM6, IlaError::Truncated),
    ];
    for (rest, first, want) in cases {
        let mut p = packet(first, SIR_DST, &rest);
        let orig = p.clone();
        assert_eq!(
            sir_to_ila(&mut p, &adjust()),
            Err(want),
            "{first}: {rest:02x?}"
        );
        assert_eq!(p, orig);
    }
}

proptest! {
    /// Any bytes behind a Mobility, HIP or Shim6 header (behind a Destination Options
    /// header or not): no panic; a refusal leaves the packet untouched; a Mobility or HIP
    /// header with a right checksum that is translated still has a right checksum.
    #[test]
    fn identity_headers_never_panic_nor_go_stale(
        proto in prop_oneof![Just(MH), Just(HIP), Just(SHIM6)],
        opts in any::<bool>(),
        mut body in proptest::collection::vec(any::<u8>(), 0..96),
        next in prop_oneof![Just(59u8), Just(6u8), Just(17u8), any::<u8>()],
        len in 0u8..12,
    ) {
        if body.len() >= 2 {
            body[0] = next;
            body[1] = len;
        }
        let at = if opts { 48 } else { 40 };
        let mut rest = if opts { vec![proto, 0, 1, 4, 0, 0, 0, 0] } else { vec![] };
        rest.extend(&body);
        let mut p = packet(if opts { 60 } else { proto }, SIR_DST, &rest);
        let (s, d) = addrs(&p);
        let own = proto != SHIM6 && body.len() >= 6;
        if own {
            fill(&mut p, at, 4, proto, s, d);
        }
        let orig = p.clone();
        match sir_to_ila(&mut p, &adjust()) {
            Ok(()) => {
                if own {
                    let (_, ila) = addrs(&p);
                    prop_assert_eq!(verify(&p, at, proto, s, ila), 0xFFFF);
                }
                let mut back = p.clone();
                ila_to_sir(&mut back, &adjust()).unwrap();
                prop_assert_eq!(back, orig);
            }
            Err(_) => prop_assert_eq!(p, orig),
        }
    }
}
