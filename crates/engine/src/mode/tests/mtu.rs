//! The two MTUs of RFC 7915 §4.1 through the modes (DF: next hop; no DF: lowest IPv6
//! MTU), and IPv4 fragmentation of what leaves the IPv6 -> IPv4 side with DF clear
//! (RFC 7915 §5.1.1), on the fast and the full paths.

use xlat::siit::{DfPolicy, SiitOptions};

use super::*;

/// Both links 1500, lowest IPv6 MTU 1280 (the defaults on an Ethernet gateway).
fn links1500() -> SiitOptions {
    SiitOptions {
        ipv6_mtu: 1500,
        ipv4_mtu: 1500,
        ..SiitOptions::default()
    }
}

fn siit_src6() -> Ipv6Addr {
    "2001:db8:46::c000:201".parse().unwrap()
}

fn siit_dst6() -> Ipv6Addr {
    "2001:db8:46::c633:6402".parse().unwrap()
}

/// Runs every packet of `pkts` through `w` travelling `dir`; returns every IPv4 packet
/// sent on (forwarded or cut), in order.
fn run_all<W: ModeWorker>(
    w: &mut W,
    dir: Direction,
    pkts: &[Vec<u8>],
    eg: &Egress,
) -> Vec<Vec<u8>> {
    let mut sent = Vec::new();
    for p in pkts {
        let (e, fwd, extra) = run(w, t(2), dir, p, eg);
        match e {
            Emit::Forward { .. } => sent.push(fwd),
            Emit::Fragments => sent.extend(extra),
            e => panic!("not sent on: {e:?}"),
        }
    }
    sent
}

/// Fragment offset (bytes) and MF of an IPv4 packet.
fn off_mf(p: &[u8]) -> (usize, bool) {
    let w = u16::from_be_bytes([p[6], p[7]]);
    (usize::from(w & 0x1fff) * 8, w & 0x2000 != 0)
}

#[test]
fn siit_passes_a_1328_byte_df_packet_on_1500_links_and_cuts_it_without_df() {
    let mut w = siit_with(links1500());
    let eg = egress(Some(1500), Some(1500));
    // RFC 7915 §4.1: with DF, only the next hop's MTU counts: 1328 + 20 <= 1500.
    let df = udp4(Ipv4Addr::new(192, 0, 2, 1), SERVER, 64, 1328 - 28, true);
    let (e, fwd, _) = run(&mut w, t(1), Direction::Outbound, &df, &eg);
    assert_eq!(
        e,
        Emit::Forward {
            start: HEADROOM - 20,
            len: 1348
        }
    );
    assert_eq!(fwd[6], UDP, "no Fragment header");
    assert_checksums(&fwd);
    // Without DF, the lowest IPv6 MTU (1280) counts: cut, each fragment fitting it.
    let no_df = udp4(Ipv4Addr::new(192, 0, 2, 1), SERVER, 64, 1328 - 28, false);
    let (e, _, frags) = run(&mut w, t(1), Direction::Outbound, &no_df, &eg);
    assert_eq!(e, Emit::Fragments);
    assert_eq!(frags.len(), 2);
    assert!(frags.iter().all(|f| f.len() <= 1280));
    let whole = reassemble_v6(&frags);
    assert_eq!(&whole[48..], &no_df[28..]);
    assert_checksums(&whole);
}

#[test]
fn siit_cuts_ipv6_fragments_too_big_for_the_ipv4_next_hop() {
    let mut w = siit_with(SiitOptions {
        ipv4_mtu: 1400,
        ..links1500()
    });
    let eg = egress(Some(1400), Some(1500));
    // A 3008-byte UDP datagram in IPv6 fragments of 1448, 1448 and 112 data bytes.
    let whole6 = udp6(siit_src6(), siit_dst6(), 64, 3000);
    let frags6 = fragment_v6(&whole6, 0x0001_beef, &[1448, 1448]);
    let sent = run_all(&mut w, Direction::Inbound, &frags6, &eg);
    // Each of the first two becomes a 1468-byte IPv4 fragment, over 1400: cut into data
    // pieces of 1376 (1400 - 20, a multiple of 8) and 72; the last fits as it is.
    assert_eq!(sent.len(), 5);
    let offs: Vec<(usize, bool)> = sent.iter().map(|p| off_mf(p)).collect();
    assert_eq!(
        offs,
        [
            (0, true),
            (1376, true),
            (1448, true),
            (2824, true),
            (2896, false)
        ],
        "offsets relative to each original fragment's, MF kept but on the very last"
    );
    for p in &sent {
        assert!(p.len() <= 1400);
        assert_eq!(p[6] & 0x40, 0, "DF clear");
        assert_eq!(
            &p[4..6],
            &[0xbe, 0xef],
            "the IPv6 identification's low 16 bits"
        );
    }
    let whole4 = reassemble_v4(&sent);
    assert_eq!(v4_addrs(&whole4), (Ipv4Addr::new(192, 0, 2, 1), SERVER));
    assert_eq!(&whole4[28..], &whole6[48..], "the datagram arrives whole");
    assert_checksums(&whole4);
    let c = ModeWorker::counters(&w);
    assert_eq!((c.fragmented, c.forwarded), (2, 5));
    assert_eq!(c.dropped(DropReason::NeedsFragmentation), 0);
}

#[test]
fn siit_with_df_always_clear_cuts_instead_of_answering_packet_too_big() {
    let opts = SiitOptions {
        ipv4_mtu: 1400,
        df: DfPolicy::Clear,
        ..links1500()
    };
    let mut w = siit_with(opts);
    let eg = egress(Some(1400), Some(1500));
    let whole6 = udp6(siit_src6(), siit_dst6(), 64, 1600);
    let sent = run_all(
        &mut w,
        Direction::Inbound,
        std::slice::from_ref(&whole6),
        &eg,
    );
    assert_eq!(sent.len(), 2);
    let whole4 = reassemble_v4(&sent);
    assert_eq!(&whole4[28..], &whole6[48..]);
    assert_checksums(&whole4);
    // With the RFC rule (DF set above 1260 bytes) the same packet gets Packet Too Big.
    let mut w = siit_with(SiitOptions {
        df: DfPolicy::Rfc,
        ..opts
    });
    let (e, _, out) = run(&mut w, t(1), Direction::Inbound, &whole6, &eg);
    assert_eq!(e, Emit::Reply(DropReason::PacketTooBig));
    assert_eq!(
        u32::from_be_bytes([out[0][44], out[0][45], out[0][46], out[0][47]]),
        1420
    );
}

#[test]
fn siit_answers_what_it_cannot_cut_never_silently() {
    // A 68-byte IPv4 next hop carries 48 data bytes a piece: a 3208-byte datagram would
    // take 67 pieces, more than one output holds. Packet Too Big 1280 (a sender at 1280
    // sends what can be cut), from the gateway, quoting the packet as it came.
    let mut w = siit_with(SiitOptions {
        ipv4_mtu: 68,
        df: DfPolicy::Clear,
        ..links1500()
    });
    let eg = egress(Some(68), Some(1500));
    let big = udp6(siit_src6(), siit_dst6(), 64, 3200);
    let (e, _, out) = run(&mut w, t(1), Direction::Inbound, &big, &eg);
    assert_eq!(e, Emit::Reply(DropReason::NeedsFragmentation));
    assert_eq!(v6_addrs(&out[0]), (GW6_OUT, siit_src6()));
    assert_eq!(out[0][40], 2, "Packet Too Big");
    assert_eq!(
        u32::from_be_bytes([out[0][44], out[0][45], out[0][46], out[0][47]]),
        1280
    );
    assert_eq!(&out[0][48..], &big[..1280 - 48]);
    // At 1280 it is cut: 1232 data bytes in 26 pieces.
    let ok = udp6(siit_src6(), siit_dst6(), 64, 1232 - 8);
    let sent = run_all(&mut w, Direction::Inbound, std::slice::from_ref(&ok), &eg);
    assert_eq!(sent.len(), 26);
    assert_eq!(&reassemble_v4(&sent)[28..], &ok[48..]);
}

#[test]
fn nat64_cuts_an_ipv6_fragment_too_big_for_the_ipv4_side_on_the_full_path() {
    let m = nat64_with(SiitOptions {
        ipv4_mtu: 1400,
        ..links1500()
    });
    let mut w = m.worker(0);
    let eg = egress(Some(1500), Some(1400));
    let whole6 = udp6(HOST6, srv6(), 64, 3000);
    let frags6 = fragment_v6(&whole6, 0x0002_0bad, &[1448, 1448]);
    let sent = run_all(&mut w, Direction::Outbound, &frags6, &eg);
    assert_eq!(sent.len(), 5);
    assert!(sent.iter().all(|p| p.len() <= 1400));
    let whole4 = reassemble_v4(&sent);
    let public = ports(&whole4).0;
    assert_eq!(v4_addrs(&whole4), (Ipv4Addr::new(203, 0, 113, 1), SERVER));
    assert_eq!(ports(&whole4), (public, 53));
    assert_eq!(&whole4[28..], &whole6[48..]);
    assert_checksums(&whole4);
    let c = ModeWorker::counters(&w);
    assert_eq!((c.fragmented, c.forwarded), (2, 5));
}

#[test]
fn nat64_fast_paths_hold_df_to_the_next_hop_and_the_rest_to_the_lowest_mtu() {
    let m = nat64_with(SiitOptions {
        ipv4_mtu: 1400,
        df: DfPolicy::Clear,
        ..links1500()
    });
    let mut w = m.worker(0);
    let eg = egress(Some(1500), Some(1400));
    let public = open_nat64(&mut w);
    // Inbound, DF set, 1328 bytes: 1348 as IPv6 fits the 1500-byte next hop.
    let df = reply4(public, 64, 1300, true);
    let (e, fwd, _) = run(&mut w, t(2), Direction::Inbound, &df, &eg);
    assert!(e.is_forward(), "{e:?}");
    assert_eq!(fwd.len(), 1348);
    // Without DF: cut for the lowest IPv6 MTU.
    let no_df = reply4(public, 64, 1300, false);
    let (e, _, frags) = run(&mut w, t(2), Direction::Inbound, &no_df, &eg);
    assert_eq!(e, Emit::Fragments);
    assert!(frags.iter().all(|f| f.len() <= 1280));
    // Outbound on the established flow, DF always clear: 1628 bytes as IPv4 is cut for
    // the 1400-byte IPv4 next hop instead of a Packet Too Big.
    let big = udp6(HOST6, srv6(), 64, 1600);
    let sent = run_all(&mut w, Direction::Outbound, std::slice::from_ref(&big), &eg);
    assert_eq!(sent.len(), 2);
    let whole4 = reassemble_v4(&sent);
    assert_eq!(ports(&whole4), (public, 53));
    assert_eq!(&whole4[28..], &big[48..]);
    assert_checksums(&whole4);
}
