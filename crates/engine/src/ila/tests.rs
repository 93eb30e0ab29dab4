//! ILA stage tests: the ila.rst example through the engine, unmapped handling, mapping
//! changes between packets, random bytes, and SIR -> ILA -> SIR round trips.

use super::*;
use proptest::prelude::*;
use wire::checksum::{combine, fold, pseudo_header_v6, sum};

const SRC: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// ila.rst: SIR prefix 3333:0:0:1, locator 2001:0:87:0, identifier 2000:0:1:87.
const RST_SIR: u64 = 0x3333_0000_0000_0001;
const RST_LOC: u64 = 0x2001_0000_0087_0000;
const RST_IDENT: u64 = 0x2000_0000_0001_0087;

fn addr(upper: u64, lower: u64) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..8].copy_from_slice(&upper.to_be_bytes());
    a[8..].copy_from_slice(&lower.to_be_bytes());
    a
}

/// An IPv6 packet to `dst` carrying `proto` (6 TCP, 17 UDP, 58 ICMPv6) with `payload`
/// and a valid transport checksum.
fn packet(proto: u8, dst: [u8; 16], payload: &[u8]) -> Vec<u8> {
    let mut l4 = match proto {
        6 => {
            let mut h = vec![0x30, 0x39, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02];
            h.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
            h
        }
        17 => {
            let len = (8 + payload.len()) as u16;
            let mut h = vec![0x12, 0x34, 0x16, 0x2e];
            h.extend_from_slice(&len.to_be_bytes());
            h.extend_from_slice(&[0, 0]);
            h
        }
        _ => vec![128, 0, 0, 0, 0x12, 0x34, 0, 1],
    };
    l4.extend_from_slice(payload);
    let at = match proto {
        6 => 16,
        17 => 6,
        _ => 2,
    };
    let c = !fold(combine(
        pseudo_header_v6(&SRC, &dst, proto, l4.len() as u32),
        sum(&l4),
    ));
    let c = if proto == 17 && c == 0 { 0xFFFF } else { c };
    l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    p.extend_from_slice(&[proto, 64]);
    p.extend_from_slice(&SRC);
    p.extend_from_slice(&dst);
    p.extend_from_slice(&l4);
    p
}

fn l4_valid(p: &[u8], proto: u8) -> bool {
    let src: [u8; 16] = p[8..24].try_into().unwrap();
    let dst: [u8; 16] = p[24..40].try_into().unwrap();
    fold(combine(
        pseudo_header_v6(&src, &dst, proto, (p.len() - 40) as u32),
        sum(&p[40..]),
    )) == 0xFFFF
}

fn router(csum: CsumMode, format: IdentFormat, unmapped: UnmappedAction) -> Arc<IlaRouter> {
    IlaRouter::new(
        IlaConfig {
            sir_prefix: RST_SIR,
            csum,
            format,
            unmapped,
        },
        64,
    )
    .unwrap()
}

#[test]
fn ila_rst_example_through_the_engine() {
    for (csum, format) in [
        (CsumMode::AdjustTransport, IdentFormat::Luid),
        (CsumMode::NoAction, IdentFormat::Luid),
        (CsumMode::NeutralMap, IdentFormat::UseFormat),
        (CsumMode::NeutralMapAuto, IdentFormat::Luid),
    ] {
        let r = router(csum, format, UnmappedAction::Drop);
        r.table().insert(RST_IDENT, RST_LOC).unwrap();
        let mut w = r.worker();
        let orig = packet(17, addr(RST_SIR, RST_IDENT), b"hello");
        let mut p = orig.clone();
        assert_eq!(
            w.process_packet(&mut p, Direction::Outbound).drop_reason(),
            None
        );
        let expect_ident = match csum {
            // ila.rst: 2001:0:87:0:2000:0:1:87
            CsumMode::AdjustTransport | CsumMode::NoAction => RST_IDENT,
            // ila.rst, neutral-map use-format: 2001:0:87:0:3000:0:1:333
            CsumMode::NeutralMap => 0x3000_0000_0001_0333,
            CsumMode::NeutralMapAuto => p[32..40].try_into().map(u64::from_be_bytes).unwrap(),
        };
        assert_eq!(p[24..40], addr(RST_LOC, expect_ident), "{csum:?}");
        assert_eq!(l4_valid(&p, 17), csum != CsumMode::NoAction, "{csum:?}");
        // The receiving side translates back.
        assert_eq!(
            w.process_packet(&mut p, Direction::Inbound).drop_reason(),
            None
        );
        assert_eq!(p, orig, "{csum:?}");
        assert_eq!(w.counters().translated, 2);
    }
}

#[test]
fn unmapped_forward_vs_drop_is_counted() {
    for action in [UnmappedAction::Forward, UnmappedAction::Drop] {
        let r = router(CsumMode::AdjustTransport, IdentFormat::Luid, action);
        let mut w = r.worker();
        let orig = packet(6, addr(RST_SIR, RST_IDENT), b"x");
        let mut p = orig.clone();
        let v = w.process_packet(&mut p, Direction::Outbound);
        let mut q = packet(6, addr(RST_LOC, RST_IDENT), b"x");
        let v2 = w.process_packet(&mut q, Direction::Inbound);
        assert_eq!(p, orig, "untouched either way");
        match action {
            UnmappedAction::Forward => {
                assert_eq!((v.drop_reason(), v2.drop_reason()), (None, None));
                assert_eq!(w.counters().unmapped_forwarded, 2);
                assert_eq!(w.counters().unmapped, 0);
            }
            UnmappedAction::Drop => {
                let d = Emit::Drop(DropReason::NoMapping);
                assert_eq!((v, v2), (d, d));
                assert_eq!(w.counters().dropped(IlaDrop::Unmapped), 2);
                assert_eq!(w.counters().unmapped_forwarded, 0);
            }
        }
        assert_eq!(w.counters().translated, 0);
    }
}

#[test]
fn drop_reasons_are_counted() {
    let r = router(
        CsumMode::AdjustTransport,
        IdentFormat::Luid,
        UnmappedAction::Forward,
    );
    r.table().insert(RST_IDENT, RST_LOC).unwrap();
    let mut w = r.worker();
    // Not to the SIR prefix: ordinary IPv6, passed on untouched.
    let mut p = packet(17, addr(0xfd00_0000_0000_0000, RST_IDENT), b"a");
    let orig = p.clone();
    assert_eq!(
        w.process_detailed(&mut p, Direction::Outbound),
        Ok(IlaOutcome::NotIla)
    );
    assert_eq!(p, orig);
    assert_eq!(w.counters().not_ila_forwarded, 1);
    // ILA packet with another locator than the mapping's.
    let mut p = packet(17, addr(0x2001_0000_0087_0001, RST_IDENT), b"a");
    let orig = p.clone();
    assert_eq!(
        w.process_detailed(&mut p, Direction::Inbound),
        Err(IlaDrop::NotMatched)
    );
    assert_eq!(p, orig);
    let mut p = packet(17, addr(RST_SIR, RST_IDENT), b"a");
    p[0] = 0x45;
    assert_eq!(
        w.process_detailed(&mut p, Direction::Outbound),
        Err(IlaDrop::NotIpv6)
    );
    let mut p = packet(17, addr(RST_SIR, RST_IDENT), b"a");
    p.truncate(30);
    assert_eq!(
        w.process_packet(&mut p, Direction::Outbound),
        Emit::Drop(DropReason::Truncated)
    );
    let c = w.counters();
    assert_eq!((c.not_matched, c.not_ipv6, c.truncated), (1, 1, 1));
    let mut all = IlaCounters::default();
    all.merge(c);
    all.merge(c);
    assert_eq!(all.not_matched, 2);
    let mut labels: Vec<_> = IlaDrop::ALL.iter().map(|d| d.as_str()).collect();
    labels.sort();
    labels.dedup();
    assert_eq!(labels.len(), IlaDrop::ALL.len());
}

/// adj-transport behind a Mobility Header (RFC 6275 §6.1, next header 135): its own
/// pseudo-header checksum follows the locator; a transport after it (which RFC 6275 does
/// not define) and a header cut short are counted drops, the packet untouched.
#[test]
fn mobility_header_through_the_engine() {
    let r = router(
        CsumMode::AdjustTransport,
        IdentFormat::Luid,
        UnmappedAction::Drop,
    );
    r.table().insert(RST_IDENT, RST_LOC).unwrap();
    let mut w = r.worker();
    let dst = addr(RST_SIR, RST_IDENT);
    let mh = |payload_proto: u8| {
        // Binding Update: Payload Proto, Header Len 1, MH Type 5, checksum at 4.
        let mut h = vec![
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
        ];
        let c = !fold(combine(pseudo_header_v6(&SRC, &dst, 135, 16), sum(&h)));
        h[4..6].copy_from_slice(&c.to_be_bytes());
        let mut p = vec![0x60, 0, 0, 0, 0, 16, 135, 64];
        p.extend_from_slice(&SRC);
        p.extend_from_slice(&dst);
        p.extend(h);
        p
    };
    let mut p = mh(59);
    assert_eq!(
        w.process_packet(&mut p, Direction::Outbound).drop_reason(),
        None
    );
    assert_eq!(p[24..40], addr(RST_LOC, RST_IDENT));
    assert!(l4_valid(&p, 135), "Mobility Header checksum stale");
    let orig = mh(6);
    let mut p = orig.clone();
    assert_eq!(
        w.process_packet(&mut p, Direction::Outbound),
        Emit::Drop(DropReason::Malformed)
    );
    assert_eq!(p, orig);
    let mut p = mh(59);
    p[41] = 3; // Header Len 3: 32 octets claimed, 16 present
    let orig = p.clone();
    assert_eq!(
        w.process_packet(&mut p, Direction::Outbound),
        Emit::Drop(DropReason::Truncated)
    );
    assert_eq!(p, orig);
    let c = w.counters();
    assert_eq!((c.translated, c.malformed, c.truncated), (1, 1, 1));
}

#[test]
fn neutral_map_needs_use_format() {
    let cfg = IlaConfig {
        sir_prefix: RST_SIR,
        csum: CsumMode::NeutralMap,
        format: IdentFormat::Luid,
        unmapped: UnmappedAction::Drop,
    };
    assert_eq!(
        IlaRouter::new(cfg, 4).unwrap_err(),
        IlaConfigError::NeutralMapNeedsFormat
    );
}

#[test]
fn mapping_change_between_packets_takes_effect() {
    let r = router(
        CsumMode::AdjustTransport,
        IdentFormat::Luid,
        UnmappedAction::Drop,
    );
    r.table().insert(RST_IDENT, RST_LOC).unwrap();
    let mut w = r.worker();
    let mut p = packet(17, addr(RST_SIR, RST_IDENT), b"one");
    assert_eq!(
        w.process_packet(&mut p, Direction::Outbound).drop_reason(),
        None
    );
    assert_eq!(p[24..32], RST_LOC.to_be_bytes());
    let moved = 0x2001_0000_0099_0000;
    assert!(r.table().set_locator(RST_IDENT, moved));
    let mut p = packet(17, addr(RST_SIR, RST_IDENT), b"two");
    assert_eq!(
        w.process_packet(&mut p, Direction::Outbound).drop_reason(),
        None
    );
    assert_eq!(p[24..32], moved.to_be_bytes());
    assert!(l4_valid(&p, 17));
    // A packet still addressed to the old locator no longer matches.
    let mut old = packet(17, addr(RST_LOC, RST_IDENT), b"late");
    assert_eq!(
        w.process_detailed(&mut old, Direction::Inbound),
        Err(IlaDrop::NotMatched)
    );
    assert!(r.table().remove(RST_IDENT));
    let mut p = packet(17, addr(RST_SIR, RST_IDENT), b"three");
    assert_eq!(
        w.process_detailed(&mut p, Direction::Outbound),
        Err(IlaDrop::Unmapped)
    );
}

fn csum_mode() -> impl Strategy<Value = (CsumMode, IdentFormat)> {
    prop_oneof![
        Just((CsumMode::AdjustTransport, IdentFormat::Luid)),
        Just((CsumMode::AdjustTransport, IdentFormat::UseFormat)),
        Just((CsumMode::NeutralMap, IdentFormat::UseFormat)),
        Just((CsumMode::NeutralMapAuto, IdentFormat::Luid)),
        Just((CsumMode::NoAction, IdentFormat::Luid)),
    ]
}

proptest! {
    #[test]
    fn random_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..120),
        v6 in any::<bool>(),
        (csum, format) in csum_mode(),
        ident in any::<u64>(),
        loc in any::<u64>(),
    ) {
        let r = router(csum, format, UnmappedAction::Drop);
        r.table().insert(ident, loc).unwrap();
        let mut w = r.worker();
        let mut b = bytes.clone();
        if v6 && b.len() >= 40 {
            b[0] = 0x60 | (b[0] & 0x0f);
            let len = (b.len() - 40) as u16;
            b[4..6].copy_from_slice(&len.to_be_bytes());
            b[32..40].copy_from_slice(&ident.to_be_bytes());
        }
        for dir in [Direction::Outbound, Direction::Inbound] {
            let mut p = b.clone();
            if !w.process_packet(&mut p, dir).is_forward() {
                prop_assert_eq!(&p, &b, "a dropped packet is untouched");
            }
        }
    }

    #[test]
    fn sir_to_ila_to_sir_restores_bytes(
        (csum, format) in csum_mode(),
        idents in proptest::collection::vec(any::<u64>(), 1..8),
        pick in any::<prop::sample::Index>(),
        loc in any::<u64>(),
        proto in prop_oneof![Just(6u8), Just(17u8), Just(58u8)],
        payload in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        prop_assume!(loc != RST_SIR);
        let r = router(csum, format, UnmappedAction::Drop);
        // Neutral modes refuse SIR identifiers with the C-bit set (use-format) or ending
        // in :ffff (see xlat::ila); keep identifiers they can carry.
        let fix = |i: u64| {
            let i = if (i as u16) == 0xFFFF { i & !1 } else { i };
            if format == IdentFormat::UseFormat { i & !xlat::ila::Identifier::C_BIT } else { i }
        };
        let idents: Vec<u64> = idents.into_iter().map(fix).collect();
        for (k, i) in idents.iter().enumerate() {
            // Others mapped elsewhere, so a wrong lookup shows.
            let l = if k % 2 == 0 { loc } else { loc ^ 0x0100_0000 };
            let _ = r.table().insert(*i, l);
        }
        let ident = *pick.get(&idents);
        let want_loc = r.table().lookup(ident).unwrap();
        let mut w = r.worker();
        let orig = packet(proto, addr(RST_SIR, ident), &payload);
        let mut p = orig.clone();
        prop_assert_eq!(w.process_packet(&mut p, Direction::Outbound).drop_reason(), None);
        prop_assert_eq!(&p[24..32], &want_loc.to_be_bytes()[..]);
        if csum != CsumMode::NoAction {
            prop_assert!(l4_valid(&p, proto), "checksum valid on the wire");
        }
        prop_assert_eq!(w.process_packet(&mut p, Direction::Inbound).drop_reason(), None);
        prop_assert_eq!(p, orig);
    }
}

/// Neutral-map router receiving an ILA packet whose identifier has the C bit clear
/// (draft-herbert-intarea-ila, checksum-neutral mapping; fuzz corpus input
/// `translate_ila/regress-neutral-map-no-c-bit`). The C bit clear says the sender's side
/// did not map checksum-neutrally: a no-action peer sent it, its transport checksum
/// computed over the SIR address (wrong in transit, right once translated back). The
/// router swaps the locator and leaves the checksum alone, as Linux
/// (`ila_update_ipv6_locator`), so the receiver sees a valid checksum; adjusting it (or
/// refusing the packet) would break that peer.
#[test]
fn neutral_map_receives_a_no_action_peers_packet_with_a_valid_checksum() {
    // The peer: a no-action router (quicknat's own, as Linux's ILA_CSUM_NO_ACTION).
    let peer = router(CsumMode::NoAction, IdentFormat::Luid, UnmappedAction::Drop);
    peer.table().insert(RST_IDENT, RST_LOC).unwrap();
    // The receiving side: neutral-map.
    let here = router(
        CsumMode::NeutralMap,
        IdentFormat::UseFormat,
        UnmappedAction::Drop,
    );
    here.table().insert(RST_IDENT, RST_LOC).unwrap();
    for proto in [6, 17, 58] {
        let orig = packet(proto, addr(RST_SIR, RST_IDENT), b"no c bit");
        let mut p = orig.clone();
        assert_eq!(
            peer.worker()
                .process_packet(&mut p, Direction::Outbound)
                .drop_reason(),
            None
        );
        assert_eq!(p[32] & 0x10, 0, "the no-action peer sets no C bit");
        assert!(!l4_valid(&p, proto), "wrong in transit, by design");
        let mut w = here.worker();
        assert_eq!(
            w.process_packet(&mut p, Direction::Inbound).drop_reason(),
            None
        );
        assert_eq!(
            p, orig,
            "{proto}: back to the SIR address, checksum untouched"
        );
        assert!(
            l4_valid(&p, proto),
            "{proto}: the receiver's checksum verifies"
        );
        assert_eq!(w.counters().translated, 1);
    }
}

/// `addresses` gives the destinations the stage itself writes: a packet to the SIR
/// address leaves to the ILA address and comes back to the SIR one, in every checksum
/// mode (the fast path keys its maps by these); an identifier the neutral modes refuse
/// has none.
#[test]
fn addresses_are_the_stages_own() {
    for (csum, format) in [
        (CsumMode::NoAction, IdentFormat::Luid),
        (CsumMode::AdjustTransport, IdentFormat::Luid),
        (CsumMode::NeutralMap, IdentFormat::UseFormat),
        (CsumMode::NeutralMapAuto, IdentFormat::Luid),
    ] {
        let r = router(csum, format, UnmappedAction::Drop);
        r.table().insert(RST_IDENT, RST_LOC).unwrap();
        let (sir, ila) = r.addresses(RST_IDENT, RST_LOC).unwrap();
        assert_eq!(sir.octets(), addr(RST_SIR, RST_IDENT), "{csum:?}");
        assert_eq!(ila.octets()[..8], RST_LOC.to_be_bytes(), "{csum:?}");
        let mut w = r.worker();
        let mut p = packet(17, sir.octets(), b"payload");
        assert!(w.process_detailed(&mut p, Direction::Outbound).is_ok());
        assert_eq!(p[24..40], ila.octets(), "{csum:?}");
        assert!(w.process_detailed(&mut p, Direction::Inbound).is_ok());
        assert_eq!(p[24..40], sir.octets(), "{csum:?}");
        // 0xFFFF in the adjustment word cannot come back under a neutral mode.
        let refused = r.addresses(RST_IDENT | 0xFFFF, RST_LOC);
        match csum {
            CsumMode::NeutralMap | CsumMode::NeutralMapAuto => assert_eq!(refused, None),
            _ => assert!(refused.is_some()),
        }
    }
}
