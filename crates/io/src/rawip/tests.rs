//! The raw sockets against the real kernel: a packet sent in one namespace must arrive,
//! routed and with its neighbour resolved by the kernel, at a UDP socket in another.

use super::*;
use crate::testnet::{self, Namespaces};
use std::net::UdpSocket;
use std::sync::mpsc;
use std::time::Duration;

const SRC: Ipv6Addr = Ipv6Addr::new(0xfd00, 7, 0, 0, 0, 0, 0, 1);
const DST: Ipv6Addr = Ipv6Addr::new(0xfd00, 7, 0, 0, 0, 0, 0, 2);

/// An IPv6/UDP packet from `src`:4444 to `dst`:5555 with a correct UDP checksum.
fn udp6(src: Ipv6Addr, dst: Ipv6Addr, payload: &[u8]) -> Vec<u8> {
    use wire::checksum::{combine, fold, pseudo_header_v6, sum};
    let udp_len = 8 + payload.len() as u16;
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&udp_len.to_be_bytes());
    p.extend_from_slice(&[17, 64]); // next header UDP, hop limit
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&4444u16.to_be_bytes());
    p.extend_from_slice(&5555u16.to_be_bytes());
    p.extend_from_slice(&udp_len.to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    let pseudo = pseudo_header_v6(&src.octets(), &dst.octets(), 17, u32::from(udp_len));
    let csum = !fold(combine(pseudo, sum(&p[40..])));
    // RFC 8200 §8.1: a computed zero is sent as 0xffff.
    let csum = if csum == 0 { 0xffff } else { csum };
    p[46..48].copy_from_slice(&csum.to_be_bytes());
    p
}

#[test]
fn raw_ipv6_packet_reaches_a_peer_namespace() {
    if !crate::host::is_root() || !testnet::has_iproute2() {
        eprintln!("skipped: needs root and iproute2");
        return;
    }
    let pid = std::process::id();
    let (a, b) = (format!("qn-raw6a-{pid}"), format!("qn-raw6b-{pid}"));
    let _ns = Namespaces::create(&[a.clone(), b.clone()]);
    for args in [
        &[
            "-n", &a, "link", "add", "r6a", "type", "veth", "peer", "name", "r6b", "netns", &b,
        ][..],
        &[
            "-n",
            &a,
            "addr",
            "add",
            "fd00:7::1/64",
            "dev",
            "r6a",
            "nodad",
        ],
        &[
            "-n",
            &b,
            "addr",
            "add",
            "fd00:7::2/64",
            "dev",
            "r6b",
            "nodad",
        ],
        &["-n", &a, "link", "set", "r6a", "up"],
        &["-n", &b, "link", "set", "r6b", "up"],
    ] {
        assert!(testnet::ip(args), "ip {args:?}");
    }

    let (ready_tx, ready_rx) = mpsc::channel();
    let receiver = testnet::spawn_in(&b, move || {
        let sock = UdpSocket::bind((DST, 5555)).expect("bind in peer");
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        ready_tx.send(()).unwrap();
        let mut buf = [0u8; 64];
        let (n, from) = sock
            .recv_from(&mut buf)
            .expect("packet from the raw socket");
        (buf[..n].to_vec(), from)
    });
    ready_rx.recv().unwrap();
    let (sent, failed) = testnet::join(testnet::spawn_in(&a, || {
        let mut raw = RawIpv6::open().unwrap();
        raw.send(&udp6(SRC, DST, b"hello6"));
        // Too short to hold a destination, and a destination without a route.
        raw.send(&[0x60; 20]);
        let nowhere = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
        raw.send(&udp6(SRC, nowhere, b"lost"));
        (raw.sent(), raw.failed())
    }));
    let (payload, from) = testnet::join(receiver);
    assert_eq!(payload, b"hello6");
    assert_eq!(from, std::net::SocketAddr::from((SRC, 4444)));
    assert_eq!((sent, failed), (1, 2));
}
