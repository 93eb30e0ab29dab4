//! Every mode through the one worker face: the ICMP errors the gateway owes and the
//! fragments it cuts are decided and built by the engine, from the `Egress` passed in.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use conntrack::Timestamp;
use wire::checksum::checksum;

use super::*;
use crate::any;
use crate::ila::{CsumMode, IdentFormat, IlaConfig, IlaRouter, UnmappedAction};
use crate::nat44::Nat44Shared;
use crate::nat44::{DynamicRule, Nat44Config};
use crate::nat64::{Nat64Config, Nat64Shared, Nat64Worker};
use crate::siit::{Siit, SiitConfig, SiitKind};
use crate::testpkt::*;

const GW4_IN: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const GW4_OUT: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const GW6_IN: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
const GW6_OUT: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1);
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const SERVER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
const HOST6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x10);

fn egress(mtu_in: Option<u32>, mtu_out: Option<u32>) -> Egress {
    Egress {
        links: [
            Link {
                mtu: mtu_in,
                addr4: Some(GW4_IN),
                addr6: Some(GW6_IN),
            },
            Link {
                mtu: mtu_out,
                addr4: Some(GW4_OUT),
                addr6: Some(GW6_OUT),
            },
        ],
    }
}

fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

/// Runs `pkt` through `w`; returns the verdict, the forwarded bytes (if any) and the
/// output packets.
fn run<W: ModeWorker>(
    w: &mut W,
    now: Timestamp,
    dir: Direction,
    pkt: &[u8],
    eg: &Egress,
) -> (Emit, Vec<u8>, Vec<Vec<u8>>) {
    let mut buf = with_room(pkt, HEADROOM);
    let mut out = Output::new();
    let mut f = Frame::new(&mut buf, HEADROOM, pkt.len(), &mut out);
    let e = w.process(now, dir, &mut f, eg);
    let fwd = match e {
        Emit::Forward { start, len } | Emit::Hairpin { start, len } => {
            buf[start..start + len].to_vec()
        }
        _ => Vec::new(),
    };
    let extra = match e {
        Emit::Reply(_) | Emit::Fragments => out.packets().map(<[u8]>::to_vec).collect(),
        _ => Vec::new(),
    };
    (e, fwd, extra)
}

fn udp4(src: Ipv4Addr, dst: Ipv4Addr, ttl: u8, payload: usize, df: bool) -> Vec<u8> {
    let mut p = ipv4(UDP, src, dst, ttl, &udp(5000, 53, &vec![0x5a; payload]));
    if !df {
        p[6] = 0;
        p[10..12].fill(0);
        let c = checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
    }
    fill_l4_csum(&mut p);
    p
}

fn udp6(src: Ipv6Addr, dst: Ipv6Addr, hop: u8, payload: usize) -> Vec<u8> {
    let mut p = ipv6(UDP, src, dst, hop, &udp(5000, 53, &vec![0x6b; payload]));
    fill_l4_csum(&mut p);
    p
}

fn nat44() -> Arc<Nat44Shared> {
    let cfg = Nat44Config {
        rules: vec![DynamicRule {
            inside: "10.0.0.0/24".parse().unwrap(),
            pool: vec!["203.0.113.1/32".parse().unwrap()],
            ports: crate::config::PortRange::default(),
        }],
        ..Nat44Config::default()
    };
    Nat44Shared::new(cfg, 1).unwrap()
}

#[test]
fn nat44_ttl_exhausted_is_answered_from_the_inside_address() {
    let m = nat44();
    let mut w = m.worker(0);
    let pkt = udp4(CLIENT, SERVER, 1, 10, true);
    let (e, _, out) = run(&mut w, t(1), Direction::Outbound, &pkt, &egress(None, None));
    assert_eq!(e, Emit::Reply(DropReason::TtlExpired));
    assert_eq!(out.len(), 1);
    let err = &out[0];
    assert_eq!(v4_addrs(err), (GW4_IN, CLIENT));
    assert_eq!((err[20], err[21]), (11, 0), "Time Exceeded in transit");
    assert_eq!(&err[28..], &pkt[..], "the packet as it arrived");
    assert_checksums(err);
    let c = ModeWorker::counters(&w);
    assert_eq!(
        (c.dropped(DropReason::TtlExpired), c.icmp_errors_sent),
        (1, 1)
    );
}

#[test]
fn nat44_too_big_for_the_outside_link() {
    let m = nat44();
    let mut w = m.worker(0);
    let eg = egress(Some(1500), Some(1400));
    let fits = udp4(CLIENT, SERVER, 64, 1400 - 28, true);
    assert!(run(&mut w, t(1), Direction::Outbound, &fits, &eg)
        .0
        .is_forward());
    let big = udp4(CLIENT, SERVER, 64, 1401 - 28, true);
    let (e, _, out) = run(&mut w, t(1), Direction::Outbound, &big, &eg);
    assert_eq!(e, Emit::Reply(DropReason::FragmentNeeded));
    assert_eq!((out[0][20], out[0][21]), (3, 4), "Fragmentation Needed");
    assert_eq!(
        u16::from_be_bytes([out[0][26], out[0][27]]),
        1400,
        "next-hop MTU"
    );
    assert_eq!(
        v4_addrs(&out[0]).1,
        CLIENT,
        "to the inside sender, untranslated"
    );
    assert_eq!(v4_addrs(&out[0][28..]), (CLIENT, SERVER), "quoted as sent");
    let no_df = udp4(CLIENT, SERVER, 64, 1401 - 28, false);
    let (e, _, _) = run(&mut w, t(1), Direction::Outbound, &no_df, &eg);
    assert_eq!(e, Emit::Drop(DropReason::TooBig));
    // Without an MTU (a replay with none configured) nothing is too big.
    assert!(
        run(&mut w, t(1), Direction::Outbound, &big, &egress(None, None))
            .0
            .is_forward()
    );
}

#[test]
fn icmp_errors_are_rate_limited_on_the_time_passed_in() {
    let m = nat44();
    let mut w = m.worker(0);
    let pkt = udp4(CLIENT, SERVER, 1, 10, true);
    let eg = egress(None, None);
    let sent = (0..300)
        .filter(|_| {
            run(&mut w, t(5), Direction::Outbound, &pkt, &eg).0
                == Emit::Reply(DropReason::TtlExpired)
        })
        .count();
    // One sender: its own budget (the global one is larger).
    let per_source = crate::config::IcmpRate::default().per_source;
    assert_eq!(sent, per_source as usize);
    let c = ModeWorker::counters(&w);
    assert_eq!(c.icmp_errors_limited_source, 300 - u64::from(per_source));
    assert_eq!(
        run(&mut w, t(6), Direction::Outbound, &pkt, &eg).0,
        Emit::Reply(DropReason::TtlExpired),
        "a second later the bucket has refilled"
    );
}

/// Next-hop MTUs as the gateway would have lowered them: a 1280-byte IPv6 link and a
/// 1500-byte IPv4 one.
fn links_1280_1500() -> xlat::siit::SiitOptions {
    xlat::siit::SiitOptions {
        ipv6_mtu: 1280,
        ipv4_mtu: 1500,
        ..xlat::siit::SiitOptions::default()
    }
}

fn siit() -> Siit {
    siit_with(links_1280_1500())
}

fn siit_with(options: xlat::siit::SiitOptions) -> Siit {
    Siit::new(
        SiitConfig {
            pref64: Some("2001:db8:46::/96".parse().unwrap()),
            eam: vec![],
            options,
            ..SiitConfig::default()
        },
        SiitKind::Siit,
    )
    .unwrap()
}

#[test]
fn siit_cuts_a_big_ipv4_packet_without_df_into_fitting_fragments() {
    let m = siit();
    let mut w = m.worker(0);
    let pkt = udp4(Ipv4Addr::new(192, 0, 2, 1), SERVER, 64, 3000, false);
    let (e, _, frags) = run(&mut w, t(1), Direction::Outbound, &pkt, &egress(None, None));
    assert_eq!(e, Emit::Fragments);
    assert_eq!(frags.len(), 3);
    for f in &frags {
        assert!(f.len() <= 1280, "each fragment fits the IPv6 minimum MTU");
    }
    let whole = reassemble_v6(&frags);
    assert_eq!(&whole[48..], &pkt[28..], "the payload arrives whole");
    assert_checksums(&whole);
    let c = ModeWorker::counters(&w);
    assert_eq!((c.fragmented, c.forwarded), (1, 3));
}

#[test]
fn siit_answers_too_big_in_the_senders_family_with_the_mtu_it_counts() {
    let m = siit();
    let mut w = m.worker(0);
    let eg = egress(None, None);
    // IPv4 with DF, 1281 bytes: 1301 as IPv6, over the 1280-byte next hop.
    let v4 = udp4(Ipv4Addr::new(192, 0, 2, 1), SERVER, 64, 1281 - 28, true);
    let (e, _, out) = run(&mut w, t(1), Direction::Outbound, &v4, &eg);
    assert_eq!(e, Emit::Reply(DropReason::FragmentNeeded));
    assert_eq!(v4_addrs(&out[0]), (GW4_IN, Ipv4Addr::new(192, 0, 2, 1)));
    assert_eq!(u16::from_be_bytes([out[0][26], out[0][27]]), 1260);
    // IPv6 over the 1500-byte IPv4 next hop: Packet Too Big with 1520.
    let src6: Ipv6Addr = "2001:db8:46::c000:201".parse().unwrap();
    let dst6: Ipv6Addr = "2001:db8:46::c633:6402".parse().unwrap();
    let v6 = udp6(src6, dst6, 64, 1600);
    let (e, _, out) = run(&mut w, t(1), Direction::Inbound, &v6, &eg);
    assert_eq!(e, Emit::Reply(DropReason::PacketTooBig));
    assert_eq!(v6_addrs(&out[0]), (GW6_OUT, src6));
    assert_eq!(out[0][40], 2, "Packet Too Big");
    assert_eq!(
        u32::from_be_bytes([out[0][44], out[0][45], out[0][46], out[0][47]]),
        1520
    );
    assert_checksums(&out[0]);
    // Hop limit 1.
    let (e, _, out) = run(
        &mut w,
        t(1),
        Direction::Inbound,
        &udp6(src6, dst6, 1, 10),
        &eg,
    );
    assert_eq!(e, Emit::Reply(DropReason::TtlExpired));
    assert_eq!((out[0][40], out[0][41]), (3, 0), "Hop Limit Exceeded");
}

fn nat64() -> Arc<Nat64Shared> {
    nat64_with(links_1280_1500())
}

fn nat64_with(options: xlat::siit::SiitOptions) -> Arc<Nat64Shared> {
    Nat64Shared::new(
        Nat64Config {
            pref64: "2001:db8:64::/96".parse().unwrap(),
            pool4: vec!["203.0.113.1/32".parse().unwrap()],
            options,
            ..Nat64Config::default()
        },
        1,
    )
    .unwrap()
}

fn srv6() -> Ipv6Addr {
    "2001:db8:64::c633:6402".parse().unwrap()
}

/// Opens a UDP session HOST6:5000 -> SERVER:53 and returns the public port.
fn open_nat64(w: &mut Nat64Worker) -> u16 {
    let out6 = udp6(HOST6, srv6(), 64, 10);
    let (e, fwd, _) = run(w, t(1), Direction::Outbound, &out6, &egress(None, None));
    assert!(e.is_forward(), "{e:?}");
    ports(&fwd).0
}

fn reply4(public: u16, ttl: u8, payload: usize, df: bool) -> Vec<u8> {
    let mut p = ipv4(
        UDP,
        SERVER,
        Ipv4Addr::new(203, 0, 113, 1),
        ttl,
        &udp(53, public, &vec![7; payload]),
    );
    if !df {
        p[6] = 0;
        p[10..12].fill(0);
        let c = checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
    }
    fill_l4_csum(&mut p);
    p
}

#[test]
fn nat64_answers_the_ipv4_sender_quoting_what_it_sent() {
    let m = nat64();
    let mut w = m.worker(0);
    let public = open_nat64(&mut w);
    let eg = egress(None, None);
    for (ttl, size, why) in [
        (1, 10, DropReason::TtlExpired),
        (64, 1300, DropReason::FragmentNeeded),
    ] {
        let pkt = reply4(public, ttl, size, true);
        let (e, _, out) = run(&mut w, t(2), Direction::Inbound, &pkt, &eg);
        assert_eq!(e, Emit::Reply(why));
        assert_eq!(v4_addrs(&out[0]), (GW4_OUT, SERVER));
        let quote = &out[0][28..];
        assert_eq!(quote, &pkt[..quote.len()], "quoted before NAT44 rewrote it");
    }
}

#[test]
fn nat64_cuts_a_big_ipv4_answer_into_fragments_for_the_ipv6_host() {
    let m = nat64();
    let mut w = m.worker(0);
    let public = open_nat64(&mut w);
    let pkt = reply4(public, 64, 1400, false);
    let (e, _, frags) = run(&mut w, t(2), Direction::Inbound, &pkt, &egress(None, None));
    assert_eq!(e, Emit::Fragments);
    assert_eq!(frags.len(), 2);
    let whole = reassemble_v6(&frags);
    assert_eq!(v6_addrs(&whole), (embed(SERVER), HOST6));
    assert_eq!(ports(&whole), (53, 5000));
    assert_checksums(&whole);
    assert_eq!(ModeWorker::counters(&w).fragmented, 1);
}

#[test]
fn nat64_packet_too_big_for_the_ipv4_side() {
    let m = nat64();
    let mut w = m.worker(0);
    open_nat64(&mut w);
    // The fast path (an established flow) answers too, and leaves the packet as it came.
    let big = udp6(HOST6, srv6(), 64, 1600);
    let (e, _, out) = run(&mut w, t(2), Direction::Outbound, &big, &egress(None, None));
    assert_eq!(e, Emit::Reply(DropReason::PacketTooBig));
    assert_eq!(v6_addrs(&out[0]), (GW6_IN, HOST6));
    assert_eq!(&out[0][48..], &big[..1280 - 48]);
}

fn embed(a: Ipv4Addr) -> Ipv6Addr {
    let p: xlat::rfc6052::Pref64 = "2001:db8:64::/96".parse().unwrap();
    p.embed(a)
}

#[test]
fn ila_packet_too_big_for_the_next_hop() {
    let router = IlaRouter::new(
        IlaConfig {
            sir_prefix: 0x2001_0db8_0001_0000,
            csum: CsumMode::AdjustTransport,
            format: IdentFormat::Luid,
            unmapped: UnmappedAction::Forward,
        },
        16,
    )
    .unwrap();
    let m = crate::ila::IlaMode {
        router,
        qsbr: conntrack::Qsbr::new(1),
    };
    let mut w = m.worker(0);
    let pkt = udp6(GW6_IN, HOST6, 64, 1400);
    let eg = egress(Some(1400), Some(1400));
    let (e, _, out) = run(&mut w, t(1), Direction::Outbound, &pkt, &eg);
    assert_eq!(e, Emit::Reply(DropReason::PacketTooBig));
    assert_eq!(out[0][40], 2);
    assert_eq!(m.classify(&pkt), Direction::Outbound, "to the SIR prefix");
    let small = udp6(GW6_IN, HOST6, 64, 100);
    assert!(run(&mut w, t(1), Direction::Outbound, &small, &eg)
        .0
        .is_forward());
}

/// ILA forwards as a router (Linux's ILA translates in the forwarding path): Hop Limit
/// decremented on every forwarded packet, translated or not; a packet whose Hop Limit
/// runs out is answered with Time Exceeded (RFC 4443 §3.3) from the arrival link.
#[test]
fn ila_decrements_the_hop_limit_and_answers_time_exceeded() {
    let router = IlaRouter::new(
        IlaConfig {
            sir_prefix: 0x2001_0db8_0001_0000,
            csum: CsumMode::AdjustTransport,
            format: IdentFormat::Luid,
            unmapped: UnmappedAction::Forward,
        },
        16,
    )
    .unwrap();
    router.table().insert(0x10, 0x2001_0db8_00aa_0000).unwrap();
    let m = crate::ila::IlaMode {
        router,
        qsbr: conntrack::Qsbr::new(1),
    };
    let mut w = m.worker(0);
    let eg = egress(None, None);
    // Translated (identifier ::10 is mapped) and not (::11 is not: forwarded as is).
    let other = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x11);
    for (dst, translated) in [(HOST6, true), (other, false)] {
        let pkt = udp6(GW6_OUT, dst, 64, 100);
        let (e, fwd, _) = run(&mut w, t(1), Direction::Outbound, &pkt, &eg);
        assert!(e.is_forward(), "{e:?}");
        assert_eq!(fwd[7], 63, "hop limit");
        assert_eq!(fwd[24..32] != pkt[24..32], translated);
        assert_checksums(&fwd);
        let pkt = udp6(GW6_OUT, dst, 2, 100);
        assert_eq!(run(&mut w, t(1), Direction::Outbound, &pkt, &eg).1[7], 1);
    }
    let pkt = udp6(GW6_OUT, HOST6, 1, 100);
    let (e, _, out) = run(&mut w, t(2), Direction::Outbound, &pkt, &eg);
    assert_eq!(e, Emit::Reply(DropReason::TtlExpired));
    let err = &out[0];
    assert_eq!(v6_addrs(err), (GW6_IN, GW6_OUT));
    assert_eq!(
        (err[40], err[41]),
        (3, 0),
        "Time Exceeded, hop limit exceeded in transit"
    );
    assert_eq!(&err[48..], &pkt[..], "the packet as it arrived");
    assert_checksums(err);
    assert_eq!(ModeWorker::counters(&w).dropped(DropReason::TtlExpired), 1);
}

#[test]
fn any_mode_visits_the_configured_mode() {
    let cfg = nat44().config().clone();
    let m = any::AnyMode::new(&any::ModeConfig::Nat44(cfg), 2).unwrap();
    assert_eq!(m.name(), "nat44");
    assert_eq!(m.session_count(), 0);
    assert!(m.reaper().is_some());
}

// NAT64: the RFC 7915 errors for packets it will not translate.

#[test]
fn nat64_answers_source_routes_in_both_families_unless_turned_off() {
    let eg = egress(None, None);
    // IPv6 with a Routing header, Segments Left 1 (RFC 8200 §4.4 layout, routing type 2).
    let plain = udp6(HOST6, srv6(), 64, 10);
    let mut l = vec![UDP, 2, 2, 1, 0, 0, 0, 0];
    l.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]);
    l.extend_from_slice(&plain[40..]);
    let routed = ipv6(43, HOST6, srv6(), 64, &l);
    let m = nat64();
    let mut w = m.worker(0);
    let (e, _, out) = run(&mut w, t(1), Direction::Outbound, &routed, &eg);
    assert_eq!(e, Emit::Reply(DropReason::SourceRouted));
    // RFC 7915 §5.1: Parameter Problem code 0, pointer at Segments Left (40 + 3).
    assert_eq!((out[0][40], out[0][41]), (4, 0));
    assert_eq!(&out[0][44..48], &43u32.to_be_bytes());
    assert_eq!(v6_addrs(&out[0]), (GW6_IN, HOST6));
    assert_eq!(&out[0][48..], &routed[..]);
    assert_checksums(&out[0]);
    // IPv4 with an unexpired loose source route (RFC 791: type 131, length 7, pointer 4).
    let public = open_nat64(&mut w);
    let r = reply4(public, 64, 10, true);
    let mut lsrr = r[..20].to_vec();
    lsrr[0] = 0x47;
    lsrr.extend_from_slice(&[131, 7, 4, 192, 0, 2, 9, 1]);
    lsrr.extend_from_slice(&r[20..]);
    let n = lsrr.len() as u16;
    lsrr[2..4].copy_from_slice(&n.to_be_bytes());
    lsrr[10..12].fill(0);
    let c = checksum(&lsrr[..28]);
    lsrr[10..12].copy_from_slice(&c.to_be_bytes());
    let (e, _, out) = run(&mut w, t(2), Direction::Inbound, &lsrr, &eg);
    assert_eq!(e, Emit::Reply(DropReason::SourceRouted));
    // RFC 7915 §4.1: Destination Unreachable, Source Route Failed (Type 3, Code 5).
    assert_eq!((out[0][20], out[0][21]), (3, 5));
    assert_eq!(v4_addrs(&out[0]), (GW4_OUT, SERVER));
    assert_eq!(&out[0][28..], &lsrr[..], "quoted as it arrived");
    assert_eq!(checksum(&out[0][20..]), 0);
    // `icmp_errors = false`.
    let off = Nat64Shared::new(
        Nat64Config {
            pref64: "2001:db8:64::/96".parse().unwrap(),
            pool4: vec!["203.0.113.1/32".parse().unwrap()],
            icmp_errors: false,
            ..Nat64Config::default()
        },
        1,
    )
    .unwrap();
    let mut w = off.worker(0);
    let (e, _, _) = run(&mut w, t(1), Direction::Outbound, &routed, &eg);
    assert_eq!(e, Emit::Drop(DropReason::SourceRouted));
    let (e, _, _) = run(
        &mut w,
        t(1),
        Direction::Outbound,
        &udp6(HOST6, srv6(), 1, 10),
        &eg,
    );
    assert_eq!(e, Emit::Drop(DropReason::TtlExpired));
    assert_eq!(ModeWorker::counters(&w).icmp_errors_sent, 0);
}
mod mtu;

// ICMP error budget.

/// Outbound UDP from inside host `10.0.<a>.<b>`, Hop Limit `ttl`, `payload` bytes, DF.
fn from_host(i: u16, ttl: u8, payload: usize) -> Vec<u8> {
    let [a, b] = i.to_be_bytes();
    udp4(Ipv4Addr::new(10, 0, a, b), SERVER, ttl, payload, true)
}

fn nat44_16() -> Arc<Nat44Shared> {
    let cfg = Nat44Config {
        rules: vec![DynamicRule {
            inside: "10.0.0.0/16".parse().unwrap(),
            pool: vec!["203.0.113.1/32".parse().unwrap()],
            ports: crate::config::PortRange::default(),
        }],
        ..Nat44Config::default()
    };
    Nat44Shared::new(cfg, 1).unwrap()
}

/// A host flooding TTL=1 traffic (traceroute gone wild, or an attack) gets its own
/// share of Time Exceeded and no more; another host's Fragmentation Needed still goes
/// out at once, and so does the flooder's own: path-MTU discovery keeps working. With one
/// global 200/s bucket the flood would spend it and both would go unanswered.
#[test]
fn a_time_exceeded_flood_does_not_starve_fragmentation_needed() {
    let m = nat44_16();
    let mut w = m.worker(0);
    let eg = egress(Some(1500), Some(1400));
    let flood = from_host(2, 1, 10);
    let te = (0..1000)
        .filter(|_| {
            run(&mut w, t(5), Direction::Outbound, &flood, &eg).0
                == Emit::Reply(DropReason::TtlExpired)
        })
        .count();
    assert_eq!(te, crate::config::IcmpRate::default().per_source as usize);
    for host in [3, 2] {
        let big = from_host(host, 64, 1401 - 28);
        let (e, _, out) = run(&mut w, t(5), Direction::Outbound, &big, &eg);
        assert_eq!(e, Emit::Reply(DropReason::FragmentNeeded), "host {host}");
        assert_eq!((out[0][20], out[0][21]), (3, 4));
    }
    // Another host's Time Exceeded is not starved either (its own bucket).
    assert_eq!(
        run(&mut w, t(5), Direction::Outbound, &from_host(4, 1, 10), &eg).0,
        Emit::Reply(DropReason::TtlExpired)
    );
}

/// The worker's cap holds over many senders: 1000 hosts sending one TTL=1 packet each
/// in the same instant get 200 Time Exceeded (the global rate) in all, the rest counted;
/// Fragmentation Needed has a global budget of its own.
#[test]
fn the_global_cap_holds_over_many_senders() {
    let m = nat44_16();
    let mut w = m.worker(0);
    let eg = egress(Some(1500), Some(1400));
    let rate = crate::config::IcmpRate::default();
    let te = (0..1000u16)
        .filter(|i| {
            run(
                &mut w,
                t(5),
                Direction::Outbound,
                &from_host(i + 2, 1, 10),
                &eg,
            )
            .0 == Emit::Reply(DropReason::TtlExpired)
        })
        .count();
    assert_eq!(te, rate.global as usize);
    let c = ModeWorker::counters(&w);
    assert_eq!(
        c.icmp_errors_limited + c.icmp_errors_limited_source,
        1000 - u64::from(rate.global)
    );
    assert!(c.icmp_errors_limited >= 1000 - 2 * u64::from(rate.global));
    let ptb = (0..1000u16)
        .filter(|i| {
            run(
                &mut w,
                t(5),
                Direction::Outbound,
                &from_host(i + 2, 64, 1401 - 28),
                &eg,
            )
            .0 == Emit::Reply(DropReason::FragmentNeeded)
        })
        .count();
    assert_eq!(ptb, rate.global as usize, "a budget of its own, capped too");
    // A second later both have refilled.
    assert_eq!(
        run(&mut w, t(6), Direction::Outbound, &from_host(2, 1, 10), &eg).0,
        Emit::Reply(DropReason::TtlExpired)
    );
}

/// The rates are the configuration's, and 0 sends none.
#[test]
fn the_icmp_rate_is_configurable() {
    let cfg = |global, per_source| Nat44Config {
        rules: vec![DynamicRule {
            inside: "10.0.0.0/16".parse().unwrap(),
            pool: vec!["203.0.113.1/32".parse().unwrap()],
            ports: crate::config::PortRange::default(),
        }],
        icmp_rate: crate::config::IcmpRate { global, per_source },
        ..Nat44Config::default()
    };
    let eg = egress(None, None);
    for (global, per_source, one, many) in [(200, 5, 5, 200), (50, 1000, 50, 50), (0, 10, 0, 0)] {
        let m = Nat44Shared::new(cfg(global, per_source), 1).unwrap();
        let mut w = m.worker(0);
        let sent = |w: &mut crate::nat44::Nat44Worker, hosts: u16, now| {
            (0..300u16)
                .filter(|i| {
                    run(
                        w,
                        t(now),
                        Direction::Outbound,
                        &from_host(2 + i % hosts, 1, 10),
                        &eg,
                    )
                    .0 == Emit::Reply(DropReason::TtlExpired)
                })
                .count()
        };
        assert_eq!(sent(&mut w, 1, 5), one, "one sender, {global}/{per_source}");
        assert_eq!(
            sent(&mut w, 300, 10),
            many,
            "300 senders, {global}/{per_source}"
        );
    }
}

/// Across NAT64: an IPv6 host flooding Hop Limit 1 does not stop Packet Too Big for
/// another IPv6 host (path-MTU discovery through the translator), nor for itself.
#[test]
fn nat64_packet_too_big_survives_a_hop_limit_flood() {
    let m = nat64();
    let mut w = m.worker(0);
    let eg = egress(Some(1500), Some(1400));
    let flooder: Ipv6Addr = "2001:db8:1::66".parse().unwrap();
    let flood = udp6(flooder, srv6(), 1, 10);
    let te = (0..1000)
        .filter(|_| {
            matches!(
                run(&mut w, t(2), Direction::Outbound, &flood, &eg).0,
                Emit::Reply(_)
            )
        })
        .count();
    assert_eq!(te, crate::config::IcmpRate::default().per_source as usize);
    for host in [HOST6, flooder] {
        let big = udp6(host, srv6(), 64, 1500);
        let (e, _, out) = run(&mut w, t(2), Direction::Outbound, &big, &eg);
        assert!(matches!(e, Emit::Reply(_)), "{host}: {e:?}");
        assert_eq!(out[0][40], 2, "{host}: ICMPv6 Packet Too Big");
    }
}

/// ILA's Time Exceeded / Packet Too Big follow the router's ICMP error budget
/// (`[ila] icmp_error_rate_per_source`): one sender past its budget gets no more errors
/// that second, each refusal counted, and another sender still does.
#[test]
fn ila_icmp_errors_follow_the_configured_budget() {
    let router = IlaRouter::with_icmp_rate(
        IlaConfig {
            sir_prefix: 0x2001_0db8_0001_0000,
            csum: CsumMode::AdjustTransport,
            format: IdentFormat::Luid,
            unmapped: UnmappedAction::Forward,
        },
        16,
        crate::config::IcmpRate {
            global: 100,
            per_source: 2,
        },
    )
    .unwrap();
    let m = crate::ila::IlaMode {
        router,
        qsbr: conntrack::Qsbr::new(1),
    };
    let mut w = m.worker(0);
    let eg = egress(None, None);
    let pkt = udp6(GW6_OUT, HOST6, 1, 100);
    let replies = (0..5)
        .filter(|_| {
            let (e, _, _) = run(&mut w, t(2), Direction::Outbound, &pkt, &eg);
            e == Emit::Reply(DropReason::TtlExpired)
        })
        .count();
    assert_eq!(replies, 2, "two errors a second to one sender");
    let c = ModeWorker::counters(&w);
    assert_eq!(c.icmp_errors_limited_source, 3);
    assert_eq!(c.dropped(DropReason::TtlExpired), 5, "every packet counted");
    let other = udp6(GW6_IN, HOST6, 1, 100);
    let (e, _, _) = run(&mut w, t(2), Direction::Inbound, &other, &eg);
    assert_eq!(e, Emit::Reply(DropReason::TtlExpired), "another sender");
}
