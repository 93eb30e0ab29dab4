//! SCTP through NAT44 with its ports (RFC 9260), as netfilter's SCTP NAT does: sessions
//! keyed by ports in a port space of SCTP's own, the CRC32c moved with a changed port
//! (never repaired when it arrived wrong), ICMP errors about SCTP translated back, and
//! SCTP in IP fragments refused: its CRC covers the whole packet, which the NAT never
//! holds.

use std::net::{Ipv4Addr, SocketAddrV4};

use conntrack::Timestamp;

use super::config::PortForward;
use super::tests::{config, IN_A, IN_B, PUB, SRV};
use super::Nat44;
use crate::config::L4Proto;
use crate::testpkt::{fragment_v4, ipv4, ports, sctp, v4_addrs};
use crate::verdict::{Direction::*, DropReason};
use crate::{Direction, Emit};

const SCTP: u8 = 132;
/// An INIT chunk (type 1, length 20: initiate tag, a_rwnd, streams, initial TSN).
const INIT: [u8; 20] = [
    1, 0, 0, 20, 0x12, 0x34, 0x56, 0x78, 0, 1, 0, 0, 0, 10, 0, 10, 0, 0, 0, 1,
];
/// A DATA chunk with four bytes of user data.
const DATA: [u8; 20] = [
    0, 3, 0, 20, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, b'p', b'i', b'n', b'g',
];

fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

fn packet(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16, chunk: &[u8]) -> Vec<u8> {
    ipv4(SCTP, src, dst, 64, &sctp(sport, dport, 0x0a0b_0c0d, chunk))
}

/// Whether the SCTP packet in IPv4 packet `p` carries the CRC32c its bytes call for.
fn crc_ok(p: &[u8]) -> bool {
    let l4 = &p[20..];
    wire::sctp::checksum(l4) == wire::sctp::stored_checksum(l4)
}

/// The packet as it leaves (IPv4 header checksum checked), or why it did not.
fn go(n: &mut Nat44, now: u64, dir: Direction, p: &[u8]) -> Result<Vec<u8>, DropReason> {
    let mut b = p.to_vec();
    match n.process(t(now), dir, &mut b) {
        Emit::Forward { start, len } => {
            let out = b[start..start + len].to_vec();
            assert_eq!(
                wire::checksum::checksum(&out[..20]),
                0,
                "IPv4 header checksum"
            );
            assert_eq!(out[24..28], p[24..28], "the verification tag kept");
            assert_eq!(out[32..], p[32..], "the chunks kept");
            Ok(out)
        }
        e => Err(e.drop_reason().expect("a packet not sent has a reason")),
    }
}

#[test]
fn an_association_goes_out_and_back_with_its_ports_and_crc() {
    let mut n = Nat44::new(config()).unwrap();
    let out = go(&mut n, 1, Outbound, &packet(IN_A, 5000, SRV, 38412, &INIT)).unwrap();
    assert_eq!(v4_addrs(&out), (PUB, SRV));
    let (public, dport) = ports(&out);
    assert_eq!(dport, 38412);
    assert!(crc_ok(&out), "CRC32c after the NAT: {out:02x?}");
    // The answer to the public port reaches the host's own port, CRC right.
    let back = go(&mut n, 2, Inbound, &packet(SRV, 38412, PUB, public, &INIT)).unwrap();
    assert_eq!(v4_addrs(&back), (SRV, IN_A));
    assert_eq!(ports(&back), (38412, 5000));
    assert!(crc_ok(&back));
    let again = go(&mut n, 3, Outbound, &packet(IN_A, 5000, SRV, 38412, &DATA)).unwrap();
    assert_eq!(ports(&again), (public, 38412), "the same session");
    assert_eq!(n.session_count(), 1);
}

/// SCTP has ports, so two inside hosts reach one server through one public address at
/// once (an address-only protocol lets only one), each on its own public port.
#[test]
fn two_hosts_share_the_public_address_to_one_server() {
    let mut n = Nat44::new(config()).unwrap();
    let a = go(&mut n, 1, Outbound, &packet(IN_A, 5000, SRV, 2905, &INIT)).unwrap();
    let b = go(&mut n, 1, Outbound, &packet(IN_B, 5000, SRV, 2905, &INIT)).unwrap();
    let (pa, pb) = (ports(&a).0, ports(&b).0);
    assert_ne!(pa, pb);
    assert!(
        crc_ok(&a) && crc_ok(&b),
        "B's port changed, its CRC with it"
    );
    for (public, host) in [(pa, IN_A), (pb, IN_B)] {
        let r = go(&mut n, 2, Inbound, &packet(SRV, 2905, PUB, public, &DATA)).unwrap();
        assert_eq!((v4_addrs(&r).1, ports(&r).1), (host, 5000));
        assert!(crc_ok(&r));
    }
}

/// A packet that arrived with a wrong CRC32c leaves with one wrong by the same bits: the
/// receiver drops it as it would have, the NAT never vouches for it.
#[test]
fn a_wrong_crc_is_carried_through_not_repaired() {
    let mut n = Nat44::new(config()).unwrap();
    // A holds public port 5000: B's 5000 gets another.
    go(&mut n, 1, Outbound, &packet(IN_A, 5000, SRV, 38412, &INIT)).unwrap();
    let mut p = packet(IN_B, 5000, SRV, 38412, &INIT);
    p[20 + 8] ^= 0x01;
    let out = go(&mut n, 1, Outbound, &p).unwrap();
    assert_ne!(
        ports(&out).0,
        5000,
        "the port changed (else the test shows nothing)"
    );
    let l4 = &out[20..];
    let err = wire::sctp::checksum(l4).unwrap() ^ wire::sctp::stored_checksum(l4).unwrap();
    assert_eq!(err, 1);
}

#[test]
fn unsolicited_inbound_finds_no_mapping_but_a_forward_publishes_a_service() {
    let mut cfg = config();
    let server = Ipv4Addr::new(10, 0, 0, 20);
    cfg.port_forwards.push(PortForward {
        protocol: L4Proto::Sctp,
        public: SocketAddrV4::new(PUB, 3868),
        inside: SocketAddrV4::new(server, 3868),
    });
    let mut n = Nat44::new(cfg).unwrap();
    assert_eq!(
        go(&mut n, 1, Inbound, &packet(SRV, 40000, PUB, 4000, &INIT)),
        Err(DropReason::NoMapping)
    );
    let r = go(&mut n, 1, Inbound, &packet(SRV, 40000, PUB, 3868, &INIT)).unwrap();
    assert_eq!((v4_addrs(&r), ports(&r)), ((SRV, server), (40000, 3868)));
    let a = go(
        &mut n,
        2,
        Outbound,
        &packet(server, 3868, SRV, 40000, &INIT),
    )
    .unwrap();
    assert_eq!((v4_addrs(&a), ports(&a)), ((PUB, SRV), (3868, 40000)));
    // TCP's port 3868 is not forwarded by an SCTP forward: it is another port space.
    let mut tcp = crate::testpkt::tcp(40000, 3868, 0x02);
    let mut syn = ipv4(6, SRV, PUB, 64, &tcp);
    crate::testpkt::fill_l4_csum(&mut syn);
    tcp.clear();
    assert!(!n.process(t(3), Inbound, &mut syn).is_forward());
}

/// Idle longer than `[timeouts] sctp` (210 s), the association's session is gone.
#[test]
fn the_session_expires_after_the_sctp_timeout() {
    let mut n = Nat44::new(config()).unwrap();
    let out = go(&mut n, 0, Outbound, &packet(IN_A, 5000, SRV, 38412, &INIT)).unwrap();
    let public = ports(&out).0;
    assert!(go(
        &mut n,
        209,
        Inbound,
        &packet(SRV, 38412, PUB, public, &DATA)
    )
    .is_ok());
    assert_eq!(
        go(
            &mut n,
            209 + 211,
            Inbound,
            &packet(SRV, 38412, PUB, public, &DATA)
        ),
        Err(DropReason::NoMapping)
    );
}

/// RFC 5508 §7: an ICMP error about an SCTP packet reaches its sender with the quoted
/// packet's addresses and ports as the sender sent them.
#[test]
fn an_icmp_error_about_an_sctp_packet_reaches_its_sender() {
    let mut n = Nat44::new(config()).unwrap();
    let sent = go(&mut n, 1, Outbound, &packet(IN_A, 5000, SRV, 38412, &INIT)).unwrap();
    let router = Ipv4Addr::new(192, 0, 2, 254);
    let mut icmp = vec![3, 1, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&sent[..20 + 12]);
    let c = wire::checksum::checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let mut e = ipv4(1, router, PUB, 64, &icmp);
    assert!(n.process(t(2), Inbound, &mut e).is_forward());
    assert_eq!(v4_addrs(&e), (router, IN_A));
    assert_eq!(wire::checksum::checksum(&e[20..]), 0, "ICMP checksum");
    let quote = &e[28..];
    assert_eq!(v4_addrs(quote), (IN_A, SRV));
    assert_eq!(ports(quote), (5000, 38412));
    assert_eq!(
        quote[24..32],
        sent[24..32],
        "the verification tag and CRC as sent"
    );
}

/// SCTP in IP fragments is refused at its first fragment (`fragment`): a changed port
/// would change a CRC32c over bytes the NAT never holds.
#[test]
fn sctp_in_ip_fragments_is_refused() {
    let mut n = Nat44::new(config()).unwrap();
    let big = packet(IN_A, 5000, SRV, 38412, &[0u8; 200]);
    let frags = fragment_v4(&big, 7, &[96]);
    assert_eq!(
        go(&mut n, 1, Outbound, &frags[0]),
        Err(DropReason::Fragment)
    );
    assert_eq!(n.session_count(), 0);
}

/// Shorter than the 12-byte common header is no SCTP packet.
#[test]
fn a_cut_common_header_is_malformed() {
    let mut n = Nat44::new(config()).unwrap();
    let p = ipv4(SCTP, IN_A, SRV, 64, &[0x13, 0x88, 0x96, 0x0c, 0, 0, 0, 0]);
    assert_eq!(go(&mut n, 1, Outbound, &p), Err(DropReason::Malformed));
}
