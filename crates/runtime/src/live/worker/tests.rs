//! The worker against the in-memory port and a network view built by hand: no sockets,
//! no root, no threads. The same `Worker<P, W>` the live gateway runs on AF_XDP and
//! AF_PACKET, stepped one receive pass at a time.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};

use conntrack::Timestamp;
use engine::nat44::{DynamicRule, Nat44Config, Nat44Shared};
use engine::siit::{Siit, SiitConfig, SiitKind};
use engine::Mode;
use io::mem::{MemHandle, MemPort};
use wire::checksum::{checksum, combine, fold, pseudo_header_v4, sum};

use super::*;
use crate::live::forward::tests::{
    links_and_view, Recorder, CLIENT_MAC, IN_MAC, OUT_MAC, SERVER_MAC,
};

const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const SERVER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
const POOL: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);

/// A worker of `mode` between two in-memory ports: the worker, the inside and outside
/// ports' handles, the network view it forwards with, and what it handed to the kernel.
fn rig<M: Mode>(
    mode: &M,
    mtus: [u32; 2],
) -> (
    Worker<MemPort, M::Worker>,
    [MemHandle; 2],
    NetView,
    Arc<Recorder>,
) {
    let (links, view) = links_and_view();
    let (a, ha) = MemPort::new();
    let (b, hb) = MemPort::new();
    let rec = Arc::new(Recorder::default());
    let setup = WorkerSetup {
        families: mode.families().map(engine::mode::Family::version),
        in_place: mode.in_place(),
        mtus,
        addresses: [Vec::new(), Vec::new()],
        links,
        published: Arc::new(Published::default()),
        handoff: Arc::clone(&rec) as Arc<dyn Handoff>,
        snapshot: Arc::new(Mutex::new(Default::default())),
        busy_poll: false,
        tracer: Default::default(),
        id: 0,
        stateful: true,
    };
    (
        Worker::new(mode.worker(0), [a, b], setup),
        [ha, hb],
        view,
        rec,
    )
}

fn step<P: Port, W: ModeWorker>(w: &mut Worker<P, W>, view: &NetView, secs: u64) -> usize {
    let egress = w.egress(view);
    w.step(Timestamp::from_secs(secs), view, &egress)
}

/// An Ethernet frame `dst_mac <- src_mac` carrying `ip`.
fn eth(dst_mac: [u8; 6], src_mac: [u8; 6], ip: &[u8]) -> Vec<u8> {
    let mut f = dst_mac.to_vec();
    f.extend_from_slice(&src_mac);
    let ethertype: u16 = if ip[0] >> 4 == 6 { 0x86dd } else { 0x0800 };
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(ip);
    f
}

/// IPv4/UDP `src:sport -> dst:dport` with `payload` bytes, DF as given, checksums right.
fn udp4(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, ttl: u8, payload: usize, df: bool) -> Vec<u8> {
    let total = 28 + payload;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[4..6].copy_from_slice(&0x4242u16.to_be_bytes());
    p[6] = if df { 0x40 } else { 0 };
    p[8] = ttl;
    p[9] = 17;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&53u16.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
    p[28..].fill(0x77);
    let ph = pseudo_header_v4(src.octets(), dst.octets(), 17, (8 + payload) as u16);
    let c = !fold(combine(ph, sum(&p[20..])));
    p[26..28].copy_from_slice(&c.to_be_bytes());
    p
}

fn nat44() -> Arc<Nat44Shared> {
    let cfg = Nat44Config {
        rules: vec![DynamicRule {
            inside: "10.0.0.0/24".parse().unwrap(),
            pool: vec!["203.0.113.1/32".parse().unwrap()],
            ports: engine::config::PortRange::default(),
        }],
        ..Nat44Config::default()
    };
    Nat44Shared::new(cfg, 1).unwrap()
}

#[test]
fn nat44_frames_cross_both_ways_with_the_next_hops_addresses() {
    let m = nat44();
    let (mut w, [inside, outside], view, _) = rig(&m, [1500, 1500]);
    inside.inject(&eth(
        IN_MAC,
        CLIENT_MAC,
        &udp4(CLIENT, 5000, SERVER, 64, 10, true),
    ));
    assert_eq!(step(&mut w, &view, 1), 1);
    let sent = outside.take_sent();
    assert_eq!(sent.len(), 1, "one frame out of the outside port");
    let f = &sent[0];
    assert_eq!((&f[..6], &f[6..12]), (&SERVER_MAC[..], &OUT_MAC[..]));
    assert_eq!(&f[14 + 12..14 + 16], &POOL.octets(), "source translated");
    assert_eq!(f[14 + 8], 63, "TTL decremented");
    let public_port = u16::from_be_bytes([f[34], f[35]]);
    // The answer comes back to the client.
    let mut back = udp4(SERVER, 53, POOL, 64, 10, true);
    back[20..22].copy_from_slice(&53u16.to_be_bytes());
    back[22..24].copy_from_slice(&public_port.to_be_bytes());
    outside.inject(&eth(OUT_MAC, SERVER_MAC, &back));
    assert_eq!(step(&mut w, &view, 2), 1);
    let sent = inside.take_sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(&sent[0][..6], &CLIENT_MAC);
    assert_eq!(
        &sent[0][14 + 16..14 + 20],
        &CLIENT.octets(),
        "back to the client"
    );
    assert!(outside.sent().is_empty());
}

#[test]
fn an_icmp_error_the_engine_owes_goes_back_out_of_the_arrival_port() {
    let m = nat44();
    let (mut w, [inside, outside], view, _) = rig(&m, [1500, 1400]);
    // TTL 1: Time Exceeded from the inside address (the view's), back to the client.
    let ttl1 = udp4(CLIENT, 5000, SERVER, 1, 10, true);
    inside.inject(&eth(IN_MAC, CLIENT_MAC, &ttl1));
    step(&mut w, &view, 1);
    // Too big for the outside link (MTU 1400) with DF: Fragmentation Needed, MTU 1400.
    let big = udp4(CLIENT, 5001, SERVER, 64, 1400, true);
    inside.inject(&eth(IN_MAC, CLIENT_MAC, &big));
    step(&mut w, &view, 1);
    let sent = inside.take_sent();
    assert_eq!(sent.len(), 2, "both answered, back on the inside");
    assert!(outside.sent().is_empty(), "neither forwarded");
    for (f, (ty, code)) in sent.iter().zip([(11, 0), (3, 4)]) {
        assert_eq!(&f[..6], &CLIENT_MAC);
        assert_eq!(
            &f[14 + 12..14 + 16],
            &[10, 0, 0, 1],
            "from the gateway's inside address"
        );
        assert_eq!(&f[14 + 16..14 + 20], &CLIENT.octets());
        assert_eq!((f[34], f[35]), (ty, code));
    }
    assert_eq!(u16::from_be_bytes([sent[1][40], sent[1][41]]), 1400);
    w.publish_counters(true);
    let g = w.setup.snapshot.lock().unwrap();
    assert_eq!(g.0.icmp_errors_sent, 2);
    assert_eq!(g.1.tx[0], 2);
}

/// RFC 1812 §4.3.2.7: a packet that came as a link-layer broadcast or multicast is not
/// answered with an ICMP error (here TTL 1), only counted.
#[test]
fn no_icmp_error_about_a_link_layer_broadcast_or_multicast_frame() {
    let m = nat44();
    let (mut w, [inside, outside], view, _) = rig(&m, [1500, 1500]);
    let ttl1 = udp4(CLIENT, 5000, SERVER, 1, 10, true);
    inside.inject(&eth([0xff; 6], CLIENT_MAC, &ttl1));
    inside.inject(&eth([0x01, 0x00, 0x5e, 0, 0, 1], CLIENT_MAC, &ttl1));
    step(&mut w, &view, 1);
    assert!(inside.sent().is_empty(), "not answered");
    assert!(outside.sent().is_empty(), "not forwarded");
    // The same packet to the gateway's own MAC is answered.
    inside.inject(&eth(IN_MAC, CLIENT_MAC, &ttl1));
    step(&mut w, &view, 1);
    assert_eq!(inside.take_sent().len(), 1);
    w.publish_counters(true);
    let g = w.setup.snapshot.lock().unwrap();
    assert_eq!(g.0.icmp_errors_sent, 1);
    assert_eq!(g.0.dropped(engine::DropReason::TtlExpired), 3);
}

#[test]
fn frames_not_for_the_mode_are_left_to_the_kernel() {
    let m = nat44();
    let (mut w, [inside, outside], view, _) = rig(&m, [1500, 1500]);
    let mut arp = eth([0xff; 6], CLIENT_MAC, &[0u8; 28]);
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    inside.inject(&arp);
    inside.inject(&eth(
        IN_MAC,
        CLIENT_MAC,
        &udp4(CLIENT, 5000, Ipv4Addr::new(10, 0, 0, 1), 64, 4, true),
    ));
    let mut v6 = vec![0u8; 48];
    v6[0] = 0x60;
    inside.inject(&eth(IN_MAC, CLIENT_MAC, &v6));
    assert_eq!(step(&mut w, &view, 1), 3);
    assert!(inside.sent().is_empty() && outside.sent().is_empty());
    assert_eq!(w.io.to_kernel, 3);
}

#[test]
fn an_unresolved_next_hop_hands_the_packet_to_the_kernel() {
    let m = nat44();
    let (mut w, [inside, outside], view, rec) = rig(&m, [1500, 1500]);
    let to = Ipv4Addr::new(198, 51, 100, 3); // on-link, no neighbour entry
    inside.inject(&eth(
        IN_MAC,
        CLIENT_MAC,
        &udp4(CLIENT, 5000, to, 64, 10, true),
    ));
    step(&mut w, &view, 1);
    assert!(outside.sent().is_empty());
    let handed = rec.0.lock().unwrap();
    assert_eq!(handed.len(), 1);
    assert_eq!(
        &handed[0].0[12..16],
        &POOL.octets(),
        "translated before the hand-off"
    );
    assert_eq!(handed[0].2, IpAddr::V4(to));
    assert_eq!(w.io.via_kernel, 1);
}

#[test]
fn a_stateless_translator_cuts_and_forwards_fragments_out_of_the_other_port() {
    let cfg = SiitConfig {
        pref64: Some("2001:db8:46::/96".parse().unwrap()),
        eam: vec![],
        ..SiitConfig::default()
    };
    let m = Siit::new(cfg, SiitKind::Siit).unwrap();
    let (mut w, [inside, outside], mut view, _) = rig(&m, [1500, 1500]);
    // An IPv6 route and neighbour for the translated destination, on the outside.
    let dst6: Ipv6Addr = "2001:db8:46::c633:6402".parse().unwrap();
    view.routes = io::netlink::RouteTable::new(&[]).with_ipv6(&[io::netlink::Route {
        dst: "2001:db8:46::".parse().unwrap(),
        prefix_len: 96,
        gateway: None,
        ifindex: 20,
        prefsrc: None,
        table: 254,
    }]);
    view.neighbors =
        io::netlink::NeighborCache::from_dump(&[]).with_ipv6(&[io::netlink::Neighbor {
            ifindex: 20,
            addr: dst6,
            mac: Some(SERVER_MAC),
            state: io::netlink::nud::REACHABLE,
        }]);
    // 1428 bytes fit the 1500-byte inside link; as IPv6 (1448) not the 1280 minimum.
    let big = udp4(Ipv4Addr::new(192, 0, 2, 1), 5000, SERVER, 64, 1400, false);
    inside.inject(&eth(IN_MAC, CLIENT_MAC, &big[..]));
    step(&mut w, &view, 1);
    let sent = outside.take_sent();
    assert_eq!(
        sent.len(),
        2,
        "1408 bytes of data in 1232-byte pieces: {:?} {:?}",
        w.io,
        w.mode.counters().drop_summary()
    );
    for f in &sent {
        assert_eq!(&f[..6], &SERVER_MAC);
        assert_eq!(&f[12..14], &[0x86, 0xdd]);
        assert_eq!(f[14 + 6], 44, "a Fragment header");
        assert!(f.len() - 14 <= 1280);
    }
    assert!(inside.sent().is_empty());
}

/// RFC 5382 REQ-4 on the live worker: an unsolicited SYN from the outside is held; the
/// receive pass 6 s later, with nothing received, sends its Port Unreachable out of the
/// outside port to the server's next hop, once.
#[test]
fn a_held_syn_is_answered_by_a_later_pass_with_nothing_received() {
    let m = nat44();
    let (mut w, [inside, outside], view, _) = rig(&m, [1500, 1500]);
    let mut syn = vec![0u8; 40];
    syn[..12].copy_from_slice(&[0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0]);
    syn[12..16].copy_from_slice(&SERVER.octets());
    syn[16..20].copy_from_slice(&POOL.octets());
    syn[20..24].copy_from_slice(&[0x03, 0xe8, 0x13, 0x88]); // 1000 -> 5000
    syn[32..34].copy_from_slice(&[0x50, 0x02]);
    let c = checksum(&syn[..20]);
    syn[10..12].copy_from_slice(&c.to_be_bytes());
    let ph = pseudo_header_v4(SERVER.octets(), POOL.octets(), 6, 20);
    let c = !fold(combine(ph, sum(&syn[20..])));
    syn[36..38].copy_from_slice(&c.to_be_bytes());
    outside.inject(&eth(OUT_MAC, SERVER_MAC, &syn));
    assert_eq!(step(&mut w, &view, 1), 1);
    assert_eq!(step(&mut w, &view, 6), 0);
    assert!(
        outside.sent().is_empty() && inside.sent().is_empty(),
        "held"
    );
    assert_eq!(step(&mut w, &view, 7), 0);
    let sent = outside.take_sent();
    assert_eq!(sent.len(), 1);
    let f = &sent[0];
    assert_eq!((&f[..6], &f[6..12]), (&SERVER_MAC[..], &OUT_MAC[..]));
    assert_eq!(&f[14 + 12..14 + 20], &[203, 0, 113, 1, 198, 51, 100, 2]);
    assert_eq!((f[14 + 9], f[34], f[35]), (1, 3, 3), "Port Unreachable");
    assert_eq!(&f[14 + 28..], &syn[..], "quoting the SYN");
    assert_eq!(step(&mut w, &view, 8), 0);
    assert!(
        outside.sent().is_empty() && inside.sent().is_empty(),
        "once"
    );
}

// -- byte counters --
#[test]
fn bytes_are_counted_per_interface_as_received_and_sent() {
    let m = nat44();
    let (mut w, [inside, outside], view, _) = rig(&m, [1500, 1500]);
    let a = eth(
        IN_MAC,
        CLIENT_MAC,
        &udp4(CLIENT, 5000, SERVER, 64, 10, true),
    );
    let b = eth(
        IN_MAC,
        CLIENT_MAC,
        &udp4(CLIENT, 5001, SERVER, 64, 300, true),
    );
    inside.inject(&a);
    inside.inject(&b);
    assert_eq!(step(&mut w, &view, 1), 2);
    let sent: usize = outside.take_sent().iter().map(Vec::len).sum();
    assert_eq!(sent, a.len() + b.len(), "NAT44 keeps frame sizes");
    assert_eq!(w.io.rx, [2, 0]);
    assert_eq!(w.io.rx_bytes, [(a.len() + b.len()) as u64, 0]);
    assert_eq!((w.io.tx, w.io.tx_bytes), ([0, 2], [0, sent as u64]));
}
