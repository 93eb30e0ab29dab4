//! The errors a stateless translator itself sends about packets it refuses (RFC 7915
//! §4.1-§4.4, §5.1-§5.4), their source (the RFC 6791 pool or the gateway's address), the
//! switch that turns them off, and EAM hairpinning (RFC 7757 §4). Packets are built by
//! hand from the RFCs' field layouts; every error is checked field by field.

use std::net::{Ipv4Addr, Ipv6Addr};

use conntrack::Timestamp;
use wire::checksum::checksum;

use super::*;
use crate::mode::{Link, Output};
use crate::testpkt::*;
use crate::HEADROOM;

const GW4_IN: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 254);
const GW6_OUT: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1);
/// An IPv4 host (embedded in the Pref64 on the IPv6 side).
pub(super) const H4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
/// An IPv6 node with an EAM entry (192.0.2.0/24 <-> 2001:db8:aaaa::/120).
pub(super) const A4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub(super) const B4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

pub(super) fn a6() -> Ipv6Addr {
    "2001:db8:aaaa::1".parse().unwrap()
}
pub(super) fn b6() -> Ipv6Addr {
    "2001:db8:aaaa::2".parse().unwrap()
}
/// `a` in the Pref64 2001:db8:46::/96.
pub(super) fn p64(a: Ipv4Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::new(
        0x2001,
        0xdb8,
        0x46,
        0,
        0,
        0,
        u16::from_be_bytes([o[0], o[1]]),
        u16::from_be_bytes([o[2], o[3]]),
    )
}

pub(super) fn config() -> SiitConfig {
    SiitConfig {
        pref64: Some("2001:db8:46::/96".parse().unwrap()),
        eam: vec![Eam::new(
            "192.0.2.0/24".parse().unwrap(),
            "2001:db8:aaaa::/120".parse().unwrap(),
        )
        .unwrap()],
        ..SiitConfig::default()
    }
}

pub(super) fn egress() -> Egress {
    let l = |a4, a6| Link {
        mtu: None,
        addr4: Some(a4),
        addr6: Some(a6),
    };
    Egress {
        links: [
            l(GW4_IN, "fd00::1".parse().unwrap()),
            l(Ipv4Addr::new(203, 0, 113, 1), GW6_OUT),
        ],
    }
}

/// Runs `pkt` through a worker of `cfg`: the verdict, the packet sent on (forwarded or
/// hairpinned) and the gateway's own packets.
pub(super) fn go(w: &mut Siit, pkt: &[u8]) -> (Emit, Vec<u8>, Vec<Vec<u8>>) {
    go_by(w, pkt, &egress())
}

/// [`go`] with the links `links`.
fn go_by(w: &mut Siit, pkt: &[u8], links: &Egress) -> (Emit, Vec<u8>, Vec<Vec<u8>>) {
    let mut buf = with_room(pkt, HEADROOM);
    let mut out = Output::new();
    let mut f = Frame::new(&mut buf, HEADROOM, pkt.len(), &mut out);
    let dir = w.classify(pkt);
    let e = w.process(Timestamp::from_secs(1), dir, &mut f, links);
    let sent = match e {
        Emit::Forward { start, len } | Emit::Hairpin { start, len } => {
            buf[start..start + len].to_vec()
        }
        _ => Vec::new(),
    };
    let own = out.packets().map(<[u8]>::to_vec).collect();
    (e, sent, own)
}

pub(super) fn worker(cfg: SiitConfig) -> Siit {
    Siit::new(cfg, SiitKind::Siit).unwrap().worker(0)
}

pub(super) fn udp4(src: Ipv4Addr, dst: Ipv4Addr, ttl: u8) -> Vec<u8> {
    let mut p = ipv4(UDP, src, dst, ttl, &udp(5000, 53, b"query"));
    fill_l4_csum(&mut p);
    p
}

pub(super) fn udp6(src: Ipv6Addr, dst: Ipv6Addr, hop: u8) -> Vec<u8> {
    let mut p = ipv6(UDP, src, dst, hop, &udp(5000, 53, b"query"));
    fill_l4_csum(&mut p);
    p
}

/// An IPv4 UDP packet with a loose source route (RFC 791 §3.1: type 131, length 7, pointer
/// `ptr`, one route address), padded with a NOP to IHL 7.
fn lsrr4(ptr: u8) -> Vec<u8> {
    let inner = udp4(Ipv4Addr::new(198, 51, 100, 9), H4, 64);
    let mut p = inner[..20].to_vec();
    p[0] = 0x47;
    p.extend_from_slice(&[131, 7, ptr, 203, 0, 113, 9, 1]);
    p.extend_from_slice(&inner[20..]);
    let len = p.len() as u16;
    p[2..4].copy_from_slice(&len.to_be_bytes());
    p[10..12].fill(0);
    let c = checksum(&p[..28]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p
}

/// An IPv6 UDP packet behind a Routing header (RFC 8200 §4.4: next header, hdr ext len 2,
/// routing type 2, `segments_left`, 4 reserved bytes, one address).
fn routed6(segments_left: u8) -> Vec<u8> {
    let plain = udp6(p64(A4), p64(H4), 64);
    let mut rh = vec![UDP, 2, 2, segments_left, 0, 0, 0, 0];
    rh.extend_from_slice(&"2001:db8:9::9".parse::<Ipv6Addr>().unwrap().octets());
    let mut l = rh;
    l.extend_from_slice(&plain[40..]);
    let mut p = ipv6(43, p64(A4), p64(H4), 64, &l);
    // The UDP checksum does not cover the Routing header: copied as computed.
    let n = p.len();
    p[n - 13 + 6..n - 13 + 8].copy_from_slice(&plain[46..48]);
    p
}

/// The ICMPv4 error `e`: type, code, the 4 bytes after the checksum, with its checksums
/// verified and its quote compared with `quoted`.
fn icmp4_fields(e: &[u8], quoted: &[u8]) -> (u8, u8, [u8; 4]) {
    assert_eq!(e[0], 0x45);
    assert_eq!(e[9], ICMP);
    assert_eq!(checksum(&e[..20]), 0, "IPv4 header checksum");
    assert_eq!(checksum(&e[20..]), 0, "ICMPv4 checksum");
    assert_eq!(&e[28..], quoted, "quotes the packet as it arrived");
    (e[20], e[21], [e[24], e[25], e[26], e[27]])
}

fn icmp6_fields(e: &[u8], quoted: &[u8]) -> (u8, u8, u32) {
    assert_eq!(e[0] >> 4, 6);
    assert_eq!(e[6], ICMP6);
    assert_checksums(e);
    assert_eq!(&e[48..], quoted, "quotes the packet as it arrived");
    (
        e[40],
        e[41],
        u32::from_be_bytes([e[44], e[45], e[46], e[47]]),
    )
}

#[test]
fn unexpired_source_route_gets_source_route_failed() {
    let mut w = worker(config());
    let pkt = lsrr4(4);
    let (e, sent, own) = go(&mut w, &pkt);
    assert_eq!(e, Emit::Reply(DropReason::SourceRouted));
    assert!(sent.is_empty(), "not translated");
    assert_eq!(own.len(), 1);
    // RFC 7915 §4.1: "Destination Unreachable, Source Route Failed" (Type 3, Code 5).
    assert_eq!(icmp4_fields(&own[0], &pkt), (3, 5, [0; 4]));
    assert_eq!(
        v4_addrs(&own[0]),
        (GW4_IN, Ipv4Addr::new(198, 51, 100, 9)),
        "from the gateway's inside address, to the sender"
    );
    assert_eq!(ModeWorker::counters(&w).icmp_errors_sent, 1);
    // Expired (RFC 791: "If the pointer is greater than the length, the source route is
    // empty"): options are ignored and the packet is translated.
    let (e, sent, _) = go(&mut w, &lsrr4(8));
    assert!(matches!(e, Emit::Forward { .. }), "{e:?}");
    assert_eq!(sent[0] >> 4, 6);
}

#[test]
fn routing_header_with_segments_left_gets_parameter_problem_at_segments_left() {
    let mut w = worker(config());
    let pkt = routed6(1);
    let (e, _, own) = go(&mut w, &pkt);
    assert_eq!(e, Emit::Reply(DropReason::SourceRouted));
    // RFC 7915 §5.1: Type 4, Code 0, "the Pointer field indicating the first byte of the
    // Segments Left field": 40 (IPv6 header) + 3.
    assert_eq!(icmp6_fields(&own[0], &pkt), (4, 0, 43));
    assert_eq!(v6_addrs(&own[0]), (GW6_OUT, p64(A4)));
    assert_eq!(pkt[43], 1, "the byte pointed at is Segments Left");
    // Segments Left 0: the Routing header is translated away.
    let (e, sent, own) = go(&mut w, &routed6(0));
    assert!(matches!(e, Emit::Forward { .. }), "{e:?}");
    assert!(own.is_empty());
    assert_eq!(v4_addrs(&sent), (A4, H4));
}

#[test]
fn untranslatable_destination_gets_administratively_prohibited() {
    // EAM only: an IPv4 destination outside every entry has no IPv6 address.
    let mut cfg = config();
    cfg.pref64 = None;
    let mut w = worker(cfg);
    let pkt = udp4(H4, Ipv4Addr::new(203, 0, 113, 50), 64);
    let (e, _, own) = go(&mut w, &udp4(A4, Ipv4Addr::new(203, 0, 113, 50), 64));
    assert_eq!(e, Emit::Reply(DropReason::NoAddressMapping));
    // RFC 7915 §4.4: Type 3, Code 13.
    let (e2, _, own2) = go(&mut w, &pkt);
    assert_eq!(e2, Emit::Reply(DropReason::NoAddressMapping));
    assert_eq!(icmp4_fields(&own2[0], &pkt), (3, 13, [0; 4]));
    assert_eq!(v4_addrs(&own2[0]), (GW4_IN, H4));
    assert_eq!(own.len(), 1);
    // IPv6: a destination neither in an EAM entry nor in the Pref64.
    let mut w = worker(config());
    let pkt = udp6(a6(), "2001:db8:77::1".parse().unwrap(), 64);
    let (e, _, own) = go(&mut w, &pkt);
    assert_eq!(e, Emit::Reply(DropReason::NoAddressMapping));
    // RFC 7915 §5.4: Type 1, Code 1.
    assert_eq!(icmp6_fields(&own[0], &pkt), (1, 1, 0));
    assert_eq!(v6_addrs(&own[0]), (GW6_OUT, a6()));
}

#[test]
fn refused_protocol_and_zero_udp_checksum_get_administratively_prohibited() {
    let mut w = worker(config());
    // ICMPv6 inside IPv4 (protocol 58).
    let pkt = ipv4(ICMP6, H4, A4, 64, &echo(128, 1, 1));
    let (e, _, own) = go(&mut w, &pkt);
    assert_eq!(e, Emit::Reply(DropReason::UnsupportedProtocol));
    assert_eq!(icmp4_fields(&own[0], &pkt), (3, 13, [0; 4]));
    // IPv4 UDP without checksum, dropped by default (RFC 7915 §4.5).
    let pkt = ipv4(UDP, H4, A4, 64, &udp(5000, 53, b"query"));
    let (e, _, own) = go(&mut w, &pkt);
    assert_eq!(e, Emit::Reply(DropReason::UdpZeroChecksum));
    assert_eq!(icmp4_fields(&own[0], &pkt), (3, 13, [0; 4]));
}

#[test]
fn time_exceeded_in_both_families() {
    let mut w = worker(config());
    let pkt = udp4(H4, A4, 1);
    let (e, _, own) = go(&mut w, &pkt);
    assert_eq!(e, Emit::Reply(DropReason::TtlExpired));
    assert_eq!(icmp4_fields(&own[0], &pkt), (11, 0, [0; 4]));
    let pkt = udp6(a6(), p64(H4), 1);
    let (e, _, own) = go(&mut w, &pkt);
    assert_eq!(e, Emit::Reply(DropReason::TtlExpired));
    assert_eq!(icmp6_fields(&own[0], &pkt), (3, 0, 0));
}

#[test]
fn never_an_error_about_an_icmp_error_and_none_when_turned_off() {
    let mut cfg = config();
    cfg.pref64 = None;
    let mut w = worker(cfg);
    // An ICMPv4 Destination Unreachable for a destination with no mapping.
    let quoted = udp4(Ipv4Addr::new(203, 0, 113, 50), H4, 64);
    let mut l4 = vec![3, 1, 0, 0, 0, 0, 0, 0];
    l4.extend_from_slice(&quoted[..28]);
    let c = checksum(&l4);
    l4[2..4].copy_from_slice(&c.to_be_bytes());
    let err = ipv4(ICMP, H4, Ipv4Addr::new(203, 0, 113, 50), 64, &l4);
    let (e, _, own) = go(&mut w, &err);
    assert_eq!(e, Emit::Drop(DropReason::NoAddressMapping));
    assert!(own.is_empty());
    // `icmp_errors = false`: refused and counted, never answered.
    let mut cfg = config();
    cfg.icmp_errors = false;
    let mut w = worker(cfg);
    let (e, _, own) = go(&mut w, &lsrr4(4));
    assert_eq!(e, Emit::Drop(DropReason::SourceRouted));
    assert!(own.is_empty());
    let c = ModeWorker::counters(&w);
    assert_eq!(
        (c.dropped(DropReason::SourceRouted), c.icmp_errors_sent),
        (1, 0)
    );
}

/// RFC 6864 §4.2: identical datagrams between the same addresses, translated by two
/// workers of one translator, take successive IDs of their tuple's shared counter.
#[test]
fn identical_datagrams_take_successive_ids_across_workers() {
    let siit = worker(config());
    let (mut w1, mut w2) = (Mode::worker(&siit, 0), Mode::worker(&siit, 1));
    let pkt = udp6(a6(), p64(H4), 64);
    let id = |w: &mut Siit| {
        let (e, sent, _) = go(w, &pkt);
        assert!(matches!(e, Emit::Forward { .. }), "{e:?}");
        assert_eq!(sent[6] & 0x40, 0, "DF clear: a non-atomic datagram");
        u16::from_be_bytes([sent[4], sent[5]])
    };
    let ids = [id(&mut w1), id(&mut w2), id(&mut w1)];
    assert_eq!(ids[1], ids[0].wrapping_add(1));
    assert_eq!(ids[2], ids[0].wrapping_add(2));
}

/// An ICMPv4 error too short to hold the header it quotes cannot be translated; it is an
/// ICMP error, so it is refused without an answer (RFC 7915 §4.4, RFC 1812 §4.3.2.7), and
/// counted by its own reason, not as a plain truncated packet.
#[test]
fn icmp_error_with_a_short_quote_is_counted_not_answered() {
    let mut w = worker(config());
    let quoted = udp4(A4, H4, 64);
    let mut l4 = vec![3, 3, 0, 0, 0, 0, 0, 0];
    l4.extend_from_slice(&quoted[..12]);
    let c = checksum(&l4);
    l4[2..4].copy_from_slice(&c.to_be_bytes());
    let err = ipv4(ICMP, H4, A4, 64, &l4);
    let (e, _, own) = go(&mut w, &err);
    assert_eq!(e, Emit::Drop(DropReason::IcmpErrorMalformed));
    assert!(own.is_empty());
    let c = ModeWorker::counters(&w);
    assert_eq!(
        (
            c.dropped(DropReason::IcmpErrorMalformed),
            c.icmp_errors_sent
        ),
        (1, 0)
    );
}

#[test]
fn errors_are_rate_limited() {
    let mut w = worker(config());
    let pkt = udp4(H4, A4, 1);
    let replies = (0..300)
        .filter(|_| matches!(go(&mut w, &pkt).0, Emit::Reply(_)))
        .count();
    assert_eq!(
        replies,
        crate::config::IcmpRate::default().per_source as usize,
        "one sender: its own budget"
    );
    assert_eq!(
        ModeWorker::counters(&w).dropped(DropReason::TtlExpired),
        300,
        "every refusal counted"
    );
}

/// RFC 7915 §1.4, RFC 1812 §4.3.2.4: the errors the translator originates are a
/// router's, from the address of the link they leave by, even with an RFC 6791 pool
/// configured; the pool still sources translated errors of unmapped IPv6 routers.
#[test]
fn the_translators_own_icmpv4_errors_come_from_the_link_address_not_the_pool() {
    let pool = Rfc6791Pool::new(vec!["203.0.113.64/30".parse().unwrap()]).unwrap();
    let mut cfg = config();
    cfg.icmp_error_source = Some(pool.clone());
    let mut w = worker(cfg);
    let sender = Ipv4Addr::new(198, 51, 100, 7);
    let (e, _, own) = go(&mut w, &udp4(sender, A4, 1));
    assert_eq!(e, Emit::Reply(DropReason::TtlExpired));
    assert_eq!(v4_addrs(&own[0]), (GW4_IN, sender));
}

/// A link without an IPv4 address borrows the pool's for the errors the translator
/// originates there.
#[test]
fn rfc6791_pool_sources_the_translators_icmpv4_errors_on_a_link_without_an_address() {
    let pool: Rfc6791Pool = Rfc6791Pool::new(vec![
        "203.0.113.64/30".parse().unwrap(),
        "203.0.113.200".parse().unwrap(),
    ])
    .unwrap();
    let mut cfg = config();
    cfg.icmp_error_source = Some(pool.clone());
    let mut w = worker(cfg);
    let mut links = egress();
    links.links[0].addr4 = None;
    let in_pool = |a: Ipv4Addr| pool.prefixes().iter().any(|p| p.contains(a));
    let mut seen = std::collections::BTreeSet::new();
    for i in 1..=40u8 {
        let sender = Ipv4Addr::new(198, 51, 100, i);
        let (e, _, own) = go_by(&mut w, &udp4(sender, A4, 1), &links);
        assert_eq!(e, Emit::Reply(DropReason::TtlExpired));
        let (src, dst) = v4_addrs(&own[0]);
        assert!(in_pool(src), "{src} from the pool");
        assert_eq!(dst, sender);
        // The same flow always gets the same address (a replay answers as live did).
        let (_, _, again) = go_by(&mut w, &udp4(sender, A4, 1), &links);
        assert_eq!(v4_addrs(&again[0]).0, src);
        seen.insert(src);
    }
    assert_eq!(seen.len(), 5, "spread over the whole pool: {seen:?}");
}

#[test]
fn rfc6791_pool_sources_translated_icmpv6_errors_of_unmapped_routers() {
    let pool = Rfc6791Pool::new(vec!["203.0.113.64/29".parse().unwrap()]).unwrap();
    let mut cfg = config();
    cfg.icmp_error_source = Some(pool.clone());
    let mut w = worker(cfg);
    let quoted = udp6(a6(), p64(H4), 3);
    let error_from = |router: Ipv6Addr| {
        let mut l4 = vec![3, 0, 0, 0, 0, 0, 0, 0];
        l4.extend_from_slice(&quoted);
        let mut p = ipv6(ICMP6, router, a6(), 64, &l4);
        fill_l4_csum(&mut p);
        p
    };
    let mut seen = std::collections::BTreeSet::new();
    for i in 1..=16u16 {
        let router = Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, i);
        let (e, sent, _) = go(&mut w, &error_from(router));
        assert!(matches!(e, Emit::Forward { .. }), "{e:?}");
        let src = v4_addrs(&sent).0;
        assert!(pool.prefixes()[0].contains(src), "{src}");
        let (_, again, _) = go(&mut w, &error_from(router));
        assert_eq!(v4_addrs(&again).0, src, "one address per router");
        seen.insert(src);
    }
    assert!(seen.len() >= 4, "routers spread over the pool: {seen:?}");
}

#[test]
fn pool_parses_and_prints_as_configured() {
    let one = Rfc6791Pool::from(Ipv4Addr::new(192, 0, 0, 8));
    assert_eq!(one.to_string(), "192.0.0.8");
    assert_eq!(one.pick(12345), Ipv4Addr::new(192, 0, 0, 8));
    assert!(Rfc6791Pool::new(vec![]).is_none());
}

// ---- EAM hairpinning (RFC 7757 §4) ----

#[test]
fn intrinsic_hairpin_goes_back_out_of_the_ipv6_side() {
    let mut w = worker(config());
    assert_eq!(w.config().eam_hairpin, EamHairpin::Intrinsic, "the default");
    // A (2001:db8:aaaa::1, EAM 192.0.2.1) reaches B at B's IPv4 address in the Pref64.
    let pkt = udp6(a6(), p64(B4), 64);
    let (e, h, own) = go(&mut w, &pkt);
    assert!(matches!(e, Emit::Hairpin { .. }), "{e:?}");
    assert!(own.is_empty());
    assert_eq!(h[0] >> 4, 6);
    assert_eq!(
        v6_addrs(&h),
        (p64(A4), b6()),
        "B sees A in the Pref64, and answers through the translator"
    );
    assert_eq!(h[7], 63, "one hop, one decrement");
    assert_eq!(&h[48..], &pkt[48..], "the payload unchanged");
    assert_checksums(&h);
    assert_eq!(ports(&h), (5000, 53));
    // B's answer to A's Pref64 address hairpins the same way.
    let (e, h, _) = go(&mut w, &udp6(b6(), p64(A4), 64));
    assert!(matches!(e, Emit::Hairpin { .. }), "{e:?}");
    assert_eq!(v6_addrs(&h), (p64(B4), a6()));
    assert_checksums(&h);
    let c = ModeWorker::counters(&w);
    assert_eq!((c.hairpinned, c.forwarded), (2, 2));
}

/// A hairpin never crosses the IPv4 link: a DF-sized packet bigger than the IPv4 next hop
/// goes back out of the IPv6 side whole, not answered with Packet Too Big.
#[test]
fn a_hairpin_is_not_held_to_the_ipv4_next_hop() {
    let mut cfg = config();
    cfg.options.ipv4_mtu = 1300;
    let mut w = worker(cfg);
    let mut big = ipv6(UDP, a6(), p64(B4), 64, &udp(5000, 53, &[7u8; 1400]));
    fill_l4_csum(&mut big);
    let (e, h, own) = go(&mut w, &big);
    assert!(matches!(e, Emit::Hairpin { .. }), "{e:?}");
    assert!(own.is_empty(), "no Packet Too Big");
    assert_eq!(h.len(), big.len());
    assert_checksums(&h);
    // To an ordinary IPv4 host the same packet is too big (RFC 7915 §5.1: DF above 1260).
    let mut out = ipv6(UDP, a6(), p64(H4), 64, &udp(5000, 53, &[7u8; 1400]));
    fill_l4_csum(&mut out);
    let (e, _, own) = go(&mut w, &out);
    assert_eq!(e, Emit::Reply(DropReason::PacketTooBig));
    assert_eq!((own[0][40], own[0][41]), (2, 0));
}

#[test]
fn intrinsic_hairpin_of_an_icmpv6_error_about_a_hairpinned_packet() {
    let mut w = worker(config());
    // B answers A's hairpinned packet (from A's Pref64 address) with Port Unreachable.
    let quoted = udp6(p64(A4), b6(), 63);
    let mut l4 = vec![1, 4, 0, 0, 0, 0, 0, 0];
    l4.extend_from_slice(&quoted);
    let mut err = ipv6(ICMP6, b6(), p64(A4), 64, &l4);
    fill_l4_csum(&mut err);
    let (e, h, _) = go(&mut w, &err);
    assert!(matches!(e, Emit::Hairpin { .. }), "{e:?}");
    assert_eq!(v6_addrs(&h), (p64(B4), a6()), "from B as A knows it");
    assert_eq!((h[40], h[41]), (1, 4), "still Port Unreachable");
    assert_eq!(
        v6_addrs(&h[48..]),
        (a6(), p64(B4)),
        "quotes the packet as A sent it"
    );
    assert_checksums(&h);
}

#[test]
fn simple_hairpins_every_eam_destination_intrinsic_only_pref64_ones() {
    // A packet to B's own IPv6 address that reaches the translator: its IPv4 destination
    // is B's EAM address, but it did not come out of the Pref64.
    let pkt = udp6(a6(), b6(), 64);
    let mut intrinsic = worker(config());
    let (e, sent, _) = go(&mut intrinsic, &pkt);
    assert!(matches!(e, Emit::Forward { .. }), "{e:?}");
    assert_eq!(v4_addrs(&sent), (A4, B4), "leaves on the IPv4 side");
    let mut cfg = config();
    cfg.eam_hairpin = EamHairpin::Simple;
    let mut simple = worker(cfg);
    let (e, h, _) = go(&mut simple, &pkt);
    assert!(matches!(e, Emit::Hairpin { .. }), "{e:?}");
    assert_eq!(v6_addrs(&h), (p64(A4), b6()));
    assert_checksums(&h);
    // Both hairpin the usual case.
    let (e, h, _) = go(&mut simple, &udp6(a6(), p64(B4), 64));
    assert!(matches!(e, Emit::Hairpin { .. }), "{e:?}");
    assert_eq!(v6_addrs(&h), (p64(A4), b6()));
}

#[test]
fn hairpin_off_sends_it_to_the_ipv4_side() {
    let mut cfg = config();
    cfg.eam_hairpin = EamHairpin::Off;
    let mut w = worker(cfg);
    let (e, sent, _) = go(&mut w, &udp6(a6(), p64(B4), 64));
    assert!(matches!(e, Emit::Forward { .. }), "{e:?}");
    assert_eq!(v4_addrs(&sent), (A4, B4));
    assert_checksums(&sent);
    // And an IPv6 packet to an ordinary IPv4 host never hairpins.
    let mut w = worker(config());
    let (e, sent, _) = go(&mut w, &udp6(a6(), p64(H4), 64));
    assert!(matches!(e, Emit::Forward { .. }), "{e:?}");
    assert_eq!(v4_addrs(&sent), (A4, H4));
}

#[test]
fn link_traffic_and_traffic_for_the_gateway_is_never_answered() {
    // Live, the runtime hands these to the host's stack; a replay only counts them.
    let mut w = worker(config());
    for pkt in [
        udp6(a6(), GW6_OUT, 64),
        udp6(
            "fe80::1".parse().unwrap(),
            "2001:db8:77::1".parse().unwrap(),
            255,
        ),
        udp6(a6(), "fe80::2".parse().unwrap(), 255),
    ] {
        let (e, _, own) = go(&mut w, &pkt);
        assert_eq!(e, Emit::Drop(DropReason::NoAddressMapping));
        assert!(own.is_empty());
    }
    let mut cfg = config();
    cfg.pref64 = None;
    let mut w = worker(cfg);
    let (e, _, _) = go(&mut w, &udp4(H4, GW4_IN, 64));
    assert_eq!(e, Emit::Drop(DropReason::NoAddressMapping));
    let (e, _, _) = go(&mut w, &udp4(Ipv4Addr::new(169, 254, 0, 9), A4, 64));
    assert_eq!(e, Emit::Drop(DropReason::NoAddressMapping));
}

/// Fragments through SIIT are counted as such, in both families (`fragments xlat`).
#[test]
fn translated_fragments_are_counted_both_ways() {
    let mut w = worker(config());
    // An IPv4 first fragment (MF) and a later one (offset 8 bytes, no MF).
    let mut first = udp4(H4, A4, 64);
    first[6] = 0x20;
    first[10..12].fill(0);
    let c = checksum(&first[..20]);
    first[10..12].copy_from_slice(&c.to_be_bytes());
    let mut later = ipv4(UDP, H4, A4, 64, &[9u8; 16]);
    later[6..8].copy_from_slice(&1u16.to_be_bytes());
    later[10..12].fill(0);
    let c = checksum(&later[..20]);
    later[10..12].copy_from_slice(&c.to_be_bytes());
    for p in [&first, &later] {
        let (e, out, _) = go(&mut w, p);
        assert!(matches!(e, Emit::Forward { .. }), "{e:?}");
        assert_eq!(out[6], 44, "a Fragment header");
    }
    // And an IPv6 fragment the other way.
    let whole = udp6(a6(), p64(H4), 64);
    let frag = fragment_v6(&whole, 5, &[8]);
    let (e, out, _) = go(&mut w, &frag[0]);
    assert!(matches!(e, Emit::Forward { .. }), "{e:?}");
    assert_eq!(out[6] & 0x20, 0x20, "MF");
    let (e, _, _) = go(&mut w, &udp4(H4, A4, 64));
    assert!(matches!(e, Emit::Forward { .. }));
    let c = ModeWorker::counters(&w);
    assert_eq!((c.fragments_translated, c.forwarded), (3, 4));
}
