//! The completer's tests: a frame known to be partial (AF_PACKET's ring flag), a frame
//! recognised as partial from its bytes (AF_XDP), both entry points checked against each
//! other and against `wire`'s verification, and proptests that no input panics.

use proptest::prelude::*;
use wire::checksum::{self, checksum};

use super::*;

const TCP: u8 = 6;
const UDP: u8 = 17;
const SRC4: [u8; 4] = [10, 0, 0, 2];
const DST4: [u8; 4] = [198, 51, 100, 2];
const SRC6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
const DST6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

/// Ethernet + IPv4 + UDP("hello") with the checksum as veth offload leaves it:
/// the folded pseudo-header sum, not complemented (from `afpacket/csum.rs`).
fn partial_udp4() -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + 8 + 5];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&33u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 0, 0, 2]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 1]);
    let c = checksum::checksum(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let udp = &mut f[34..];
    udp[0..2].copy_from_slice(&4000u16.to_be_bytes());
    udp[2..4].copy_from_slice(&5000u16.to_be_bytes());
    udp[4..6].copy_from_slice(&13u16.to_be_bytes());
    udp[8..].copy_from_slice(b"hello");
    let ph = checksum::fold(checksum::pseudo_header_v4(
        [10, 0, 0, 2],
        [10, 0, 0, 1],
        17,
        13,
    ));
    udp[6..8].copy_from_slice(&ph.to_be_bytes());
    f
}

fn meta(len: usize, partial: bool) -> RxMeta {
    RxMeta {
        len,
        snaplen: len,
        csum_not_ready: partial,
        ..RxMeta::default()
    }
}

/// An optional tag (TPID) in front of the ethertype, as `vlan` says.
fn ethernet(vlan: Option<u16>, ethertype: [u8; 2]) -> Vec<u8> {
    let mut f = vec![0u8; 12];
    if let Some(tpid) = vlan {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&[0x00, 0x07]);
    }
    f.extend_from_slice(&ethertype);
    f
}

/// The TCP or UDP segment carrying `payload`, with the checksum field set from the
/// pseudo-header sum `ph`: partial (the folded sum) or complete.
fn l4(proto: u8, payload: &[u8], ph: u32, partial: bool) -> Vec<u8> {
    let hdr = if proto == TCP { 20 } else { 8 };
    let mut l4 = vec![0u8; hdr];
    l4[0..2].copy_from_slice(&40000u16.to_be_bytes());
    l4[2..4].copy_from_slice(&5201u16.to_be_bytes());
    if proto == TCP {
        l4[12] = 0x50;
        l4[13] = 0x18;
    } else {
        l4[4..6].copy_from_slice(&((hdr + payload.len()) as u16).to_be_bytes());
    }
    l4.extend_from_slice(payload);
    let at = if proto == TCP { 16 } else { 6 };
    let c = if partial {
        fold(ph)
    } else {
        let c = !fold(combine(ph, sum(&l4)));
        if proto == UDP && c == 0 {
            0xFFFF
        } else {
            c
        }
    };
    l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
    l4
}

/// Ethernet + IPv4 + TCP or UDP with `payload`; `partial` leaves the checksum as a
/// sender with checksum offload does (from `afxdp/csum.rs`, with any tag).
fn frame_v4(proto: u8, payload: &[u8], partial: bool, vlan: Option<u16>) -> Vec<u8> {
    let l4_len = if proto == TCP { 20 } else { 8 } + payload.len();
    let mut f = ethernet(vlan, [0x08, 0x00]);
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((20 + l4_len) as u16).to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = proto;
    ip[12..16].copy_from_slice(&SRC4);
    ip[16..20].copy_from_slice(&DST4);
    let c = checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let ph = pseudo_header_v4(SRC4, DST4, proto, l4_len as u16);
    f.extend_from_slice(&l4(proto, payload, ph, partial));
    f
}

/// Ethernet + IPv6 + TCP or UDP with `payload`.
fn frame_v6(proto: u8, payload: &[u8], partial: bool, vlan: Option<u16>) -> Vec<u8> {
    let l4_len = if proto == TCP { 20 } else { 8 } + payload.len();
    let mut f = ethernet(vlan, [0x86, 0xDD]);
    let mut ip = [0u8; 40];
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
    ip[6] = proto;
    ip[7] = 64;
    ip[8..24].copy_from_slice(&SRC6);
    ip[24..40].copy_from_slice(&DST6);
    f.extend_from_slice(&ip);
    let ph = pseudo_header_v6(&SRC6, &DST6, proto, l4_len as u32);
    f.extend_from_slice(&l4(proto, payload, ph, partial));
    f
}

fn verifies_v4(f: &[u8], l3: usize) -> bool {
    let l4 = &f[l3 + 20..];
    let ph = pseudo_header_v4(SRC4, DST4, f[l3 + 9], l4.len() as u16);
    fold(combine(ph, sum(l4))) == 0xFFFF
}

/// Whether the frame's transport checksum verifies, by `wire`'s own views.
fn verifies(f: &[u8]) -> bool {
    let eth = EthernetFrame::new_checked(f).unwrap();
    let ip = &f[eth.header_len()..];
    match eth.ethertype() {
        EtherType::Ipv4 => {
            let p = Ipv4Packet::new_checked(ip).unwrap();
            let (s, d) = (p.src_bytes(), p.dst_bytes());
            match p.protocol() {
                IpProtocol::Tcp => TcpPacket::new_checked(p.payload())
                    .unwrap()
                    .verify_checksum_v4(s, d),
                _ => UdpPacket::new_checked(p.payload())
                    .unwrap()
                    .verify_checksum_v4(s, d),
            }
        }
        _ => {
            let p = Ipv6Packet::new_checked(ip).unwrap();
            let (s, d) = (p.src_bytes(), p.dst_bytes());
            match p.next_header() {
                IpProtocol::Tcp => TcpPacket::new_checked(p.payload())
                    .unwrap()
                    .verify_checksum_v6(&s, &d),
                _ => UdpPacket::new_checked(p.payload())
                    .unwrap()
                    .verify_checksum_v6(&s, &d),
            }
        }
    }
}

// ---- the frame is known to be partial (ring flag) ----

#[test]
fn completes_partial_udp4() {
    let mut f = partial_udp4();
    let m = meta(f.len(), true);
    assert!(!UdpPacket::new_checked(&f[34..])
        .unwrap()
        .verify_checksum_v4([10, 0, 0, 2], [10, 0, 0, 1]));
    assert!(complete_checksum(&mut f, &m));
    assert!(UdpPacket::new_checked(&f[34..])
        .unwrap()
        .verify_checksum_v4([10, 0, 0, 2], [10, 0, 0, 1]));
}

#[test]
fn leaves_ready_frames_alone_and_refuses_what_it_cannot_fix() {
    let mut f = partial_udp4();
    let orig = f.clone();
    let m = meta(f.len(), false);
    assert!(complete_checksum(&mut f, &m));
    assert_eq!(f, orig);
    // Truncated capture.
    let mut m = meta(f.len() + 100, true);
    m.snaplen = f.len();
    m.truncated = true;
    assert!(!complete_checksum(&mut f, &m));
    // Fragment.
    let mut g = orig.clone();
    g[14 + 6] = 0x20; // MF
    let m = meta(g.len(), true);
    assert!(!complete_checksum(&mut g, &m));
    // Not IP, and garbage of every length: false, no panic.
    let mut arp = orig.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    let m = meta(arp.len(), true);
    assert!(!complete_checksum(&mut arp, &m));
    for n in 0..orig.len() {
        let mut h = orig[..n].to_vec();
        let _ = complete_checksum(&mut h, &meta(n, true));
    }
}

// ---- partial, recognised from the bytes ----

/// A UDP datagram without a checksum (field 0) whose pseudo-header sum folds to 0xFFFF
/// (ones'-complement equal to 0) is not taken for a partial one: "no checksum" stays, as
/// the XDP fast path leaves it (found in review).
#[test]
fn a_udp_zero_checksum_is_never_completed() {
    let mut f = partial_udp4();
    // Pick the destination's last word so that the pseudo-header sum folds to 0xFFFF.
    let base = checksum::fold(checksum::pseudo_header_v4(
        [10, 0, 0, 2],
        [10, 0, 0, 0],
        17,
        13,
    ));
    let last = 0xFFFFu16 - base;
    f[14 + 18..14 + 20].copy_from_slice(&last.to_be_bytes());
    let dst = [10, 0, f[14 + 18], f[14 + 19]];
    assert_eq!(
        checksum::fold(checksum::pseudo_header_v4([10, 0, 0, 2], dst, 17, 13)),
        0xFFFF
    );
    f[34 + 6..34 + 8].copy_from_slice(&[0, 0]);
    let orig = f.clone();
    assert!(!complete_if_partial(&mut f));
    assert_eq!(f, orig);
}

#[test]
fn completes_partial_tcp_and_udp_v4_with_and_without_vlan() {
    for proto in [TCP, UDP] {
        for vlan in [None, Some(0x8100), Some(0x88A8)] {
            let l3 = if vlan.is_some() { 18 } else { 14 };
            let mut f = frame_v4(proto, b"some payload, odd length", true, vlan);
            assert!(!verifies_v4(&f, l3));
            assert!(complete_if_partial(&mut f), "proto {proto} vlan {vlan:?}");
            assert!(verifies_v4(&f, l3), "proto {proto} vlan {vlan:?}");
            // Complete now: a second pass leaves it alone.
            let done = f.clone();
            assert!(!complete_if_partial(&mut f));
            assert_eq!(f, done);
        }
    }
}

#[test]
fn completes_partial_tcp_v6() {
    let payload = [0xA5u8; 1000];
    let mut f = frame_v6(TCP, &payload, true, None);
    assert!(complete_if_partial(&mut f));
    let ph = pseudo_header_v6(&SRC6, &DST6, TCP, 20 + payload.len() as u32);
    assert_eq!(fold(combine(ph, sum(&f[54..]))), 0xFFFF);
}

#[test]
fn leaves_complete_and_unrelated_frames_alone() {
    for proto in [TCP, UDP] {
        let mut f = frame_v4(proto, b"already complete", false, None);
        let orig = f.clone();
        assert!(!complete_if_partial(&mut f));
        assert_eq!(f, orig);
    }
    // A fragment, ARP, and every truncation: untouched, no panic.
    let partial = frame_v4(UDP, b"0123456789", true, None);
    let mut frag = partial.clone();
    frag[14 + 6] = 0x20; // MF
    assert!(!complete_if_partial(&mut frag));
    let mut arp = partial.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    assert!(!complete_if_partial(&mut arp));
    for n in 0..partial.len() {
        let mut h = partial[..n].to_vec();
        assert!(!complete_if_partial(&mut h), "truncated to {n}");
    }
    // Ethernet padding after the datagram is not summed.
    let mut padded = frame_v4(UDP, b"x", true, None);
    padded.extend_from_slice(&[0xEE; 20]);
    assert!(complete_if_partial(&mut padded));
    assert!(verifies_v4(&padded[..padded.len() - 20], 14));
}

// ---- both entry points, every family and tag ----

#[test]
fn both_ways_write_the_checksum_a_full_computation_gives() {
    for build in [frame_v4, frame_v6] {
        for proto in [TCP, UDP] {
            for vlan in [None, Some(0x8100), Some(0x88A8)] {
                let want = build(proto, b"the quick brown fox", false, vlan);
                let partial = build(proto, b"the quick brown fox", true, vlan);
                assert!(verifies(&want) && !verifies(&partial));
                let (mut a, mut b) = (partial.clone(), partial.clone());
                assert!(complete(&mut a));
                assert!(complete_if_partial(&mut b));
                assert_eq!((&a, &b), (&want, &want), "proto {proto} vlan {vlan:?}");
                // `complete` on a complete frame rewrites the same checksum.
                assert!(complete(&mut a));
                assert_eq!(a, want);
            }
        }
    }
}

#[test]
fn what_neither_way_completes() {
    // IPv6 with an extension header first (hop-by-hop), ICMP, QinQ (two tags).
    let mut ext = frame_v6(UDP, b"x", true, None);
    ext[14 + 6] = 0;
    let mut icmp = frame_v4(UDP, b"x", true, None);
    icmp[14 + 9] = 1;
    let mut qinq = ethernet(Some(0x88A8), [0x81, 0x00]);
    qinq.extend_from_slice(&[0, 7, 0x08, 0x00]);
    qinq.extend_from_slice(&frame_v4(UDP, b"x", true, None)[14..]);
    // A UDP length field past the datagram.
    let mut ulen = frame_v4(UDP, b"x", true, None);
    ulen[14 + 20 + 4..14 + 20 + 6].copy_from_slice(&100u16.to_be_bytes());
    for mut f in [ext, icmp, qinq, ulen] {
        let orig = f.clone();
        assert!(!complete(&mut f));
        assert!(!complete_if_partial(&mut f));
        assert_eq!(f, orig);
    }
}

#[test]
fn a_udp_sum_of_zero_is_sent_as_all_ones() {
    // Search a payload whose complete UDP checksum computes to 0 (RFC 768: sent as 0xFFFF).
    let zero = (0..=u16::MAX)
        .map(|v| v.to_be_bytes())
        .find(|p| {
            let f = frame_v4(UDP, p, false, None);
            let l4 = &f[34..];
            let ph = pseudo_header_v4(SRC4, DST4, UDP, l4.len() as u16);
            let mut z = l4.to_vec();
            z[6..8].copy_from_slice(&[0, 0]);
            !fold(combine(ph, sum(&z))) == 0
        })
        .expect("some payload sums to zero");
    let mut f = frame_v4(UDP, &zero, true, None);
    assert!(complete(&mut f));
    assert_eq!(&f[40..42], &[0xFF, 0xFF]);
    assert!(verifies(&f));
}

proptest! {
    #[test]
    fn random_bytes_never_panic(
        mut bytes in proptest::collection::vec(any::<u8>(), 0..200),
        partial in any::<bool>(),
        len in 0usize..300,
    ) {
        let _ = complete(&mut bytes.clone());
        let _ = complete_if_partial(&mut bytes.clone());
        let _ = complete_checksum(&mut bytes, &meta(len, partial));
    }

    #[test]
    fn mutated_frames_never_panic(
        v6 in any::<bool>(),
        udp in any::<bool>(),
        payload in proptest::collection::vec(any::<u8>(), 0..64),
        edits in proptest::collection::vec((0usize..200, any::<u8>()), 1..6),
        cut in 0usize..200,
    ) {
        let proto = if udp { UDP } else { TCP };
        let mut f = if v6 { frame_v6(proto, &payload, true, None) } else {
            frame_v4(proto, &payload, true, None)
        };
        for (at, v) in edits {
            if let Some(b) = f.get_mut(at) {
                *b = v;
            }
        }
        f.truncate(f.len().min(cut.max(1) + 40));
        let _ = complete(&mut f.clone());
        let _ = complete_if_partial(&mut f);
    }

    #[test]
    fn partial_frames_complete_the_same_both_ways(
        v6 in any::<bool>(),
        udp in any::<bool>(),
        tag in prop_oneof![Just(None), Just(Some(0x8100u16)), Just(Some(0x88A8u16))],
        payload in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let proto = if udp { UDP } else { TCP };
        let build = if v6 { frame_v6 } else { frame_v4 };
        let want = build(proto, &payload, false, tag);
        let partial = build(proto, &payload, true, tag);
        let (mut a, mut b) = (partial.clone(), partial.clone());
        prop_assert!(complete(&mut a));
        prop_assert_eq!(&a, &want);
        // A partial frame whose field happens to verify already is left alone (rare).
        if complete_if_partial(&mut b) {
            prop_assert_eq!(&b, &want);
        } else {
            prop_assert!(verifies(&partial));
        }
        prop_assert!(verifies(&a));
    }
}
