//! Every IP protocol through NAT44: the ones without ports (GRE, ESP and any other but
//! TCP, UDP, ICMP and SCTP) are translated by address only, in sessions of
//! (inside host, remote host, protocol), as netfilter's generic tracker and VPP's
//! unknown-protocol sessions do: one inside host at a time holds a (public address,
//! remote, protocol); replies find it; nothing comes in unasked but to a static 1:1 host.

use std::net::Ipv4Addr;
use std::time::Duration;

use conntrack::Timestamp;

use super::config::StaticNat;
use super::tests::{config, IN_A, IN_B, PUB, SRV};
use super::Nat44;
use crate::testpkt::{ipv4, v4_addrs};
use crate::verdict::{Direction::*, DropReason};
use crate::{Direction, Emit};

const SRV2: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 3);
const GRE: u8 = 47;
const ESP: u8 = 50;

fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

/// An ESP packet (SPI, sequence number, opaque bytes).
fn esp(src: Ipv4Addr, dst: Ipv4Addr, spi: u32) -> Vec<u8> {
    let mut l4 = spi.to_be_bytes().to_vec();
    l4.extend_from_slice(&[0, 0, 0, 1]);
    l4.extend_from_slice(&[0xa5; 40]);
    ipv4(ESP, src, dst, 64, &l4)
}

/// The packet as it leaves, or why it did not.
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
            assert_eq!(out[9], p[9], "protocol kept");
            assert_eq!(out[20..], p[20..], "the transport bytes untouched");
            assert_eq!(out[8], p[8] - 1, "TTL");
            Ok(out)
        }
        e => Err(e.drop_reason().expect("a packet not sent has a reason")),
    }
}

#[test]
fn esp_out_and_back_by_address_only() {
    let mut n = Nat44::new(config()).unwrap();
    let out = go(&mut n, 1, Outbound, &esp(IN_A, SRV, 0x1000)).unwrap();
    assert_eq!(v4_addrs(&out), (PUB, SRV));
    let back = go(&mut n, 2, Inbound, &esp(SRV, PUB, 0x2000)).unwrap();
    assert_eq!(v4_addrs(&back), (SRV, IN_A));
    assert_eq!(n.session_count(), 1);
    assert_eq!(n.shared().binding_count(), 1);
}

/// One inside host at a time holds (public address, remote, protocol): a second host
/// sharing the public address is refused for that remote, served for another, and the
/// answers of each remote reach the host that talks to it.
#[test]
fn one_host_per_public_address_remote_and_protocol() {
    let mut n = Nat44::new(config()).unwrap();
    go(&mut n, 1, Outbound, &esp(IN_A, SRV, 1)).unwrap();
    assert_eq!(
        go(&mut n, 1, Outbound, &esp(IN_B, SRV, 2)),
        Err(DropReason::AddressOnlyInUse)
    );
    let b = go(&mut n, 1, Outbound, &esp(IN_B, SRV2, 2)).unwrap();
    assert_eq!(v4_addrs(&b), (PUB, SRV2));
    // Another protocol to the same remote is another session.
    let gre = ipv4(GRE, IN_B, SRV, 64, &[0, 0, 0x88, 0x0b, 0, 0, 0, 9]);
    assert_eq!(
        v4_addrs(&go(&mut n, 1, Outbound, &gre).unwrap()),
        (PUB, SRV)
    );
    let mut to = |src| v4_addrs(&go(&mut n, 2, Inbound, &esp(src, PUB, 7)).unwrap()).1;
    assert_eq!((to(SRV), to(SRV2)), (IN_A, IN_B));
    let back = go(&mut n, 2, Inbound, &ipv4(GRE, SRV, PUB, 64, &[0; 8])).unwrap();
    assert_eq!(v4_addrs(&back).1, IN_B);
    assert_eq!(n.counters().dropped(DropReason::AddressOnlyInUse), 1);
}

/// A session of its own expires after `[timeouts] other`; then the other host may take
/// the (public address, remote, protocol).
#[test]
fn the_other_timeout_frees_it_for_the_next_host() {
    let mut cfg = config();
    cfg.timeouts.other = Duration::from_secs(30);
    let mut n = Nat44::new(cfg).unwrap();
    go(&mut n, 1, Outbound, &esp(IN_A, SRV, 1)).unwrap();
    go(&mut n, 20, Inbound, &esp(SRV, PUB, 1)).unwrap();
    assert_eq!(
        go(&mut n, 49, Outbound, &esp(IN_B, SRV, 2)),
        Err(DropReason::AddressOnlyInUse),
        "refreshed at 20 s: alive until 50 s"
    );
    n.handle_timeout(t(51));
    assert_eq!(n.session_count(), 0);
    let b = go(&mut n, 51, Outbound, &esp(IN_B, SRV, 2)).unwrap();
    assert_eq!(v4_addrs(&b), (PUB, SRV));
    assert_eq!(
        v4_addrs(&go(&mut n, 52, Inbound, &esp(SRV, PUB, 3)).unwrap()).1,
        IN_B
    );
}

/// Nothing comes in unasked through a dynamic mapping; a static 1:1 host is reachable by
/// every protocol, its address kept both ways.
#[test]
fn unsolicited_inbound_reaches_only_a_static_host() {
    let mut cfg = config();
    let public_c = Ipv4Addr::new(203, 0, 113, 9);
    let in_c = Ipv4Addr::new(10, 0, 0, 9);
    cfg.static_nat.push(StaticNat {
        inside: in_c,
        public: public_c,
    });
    let mut n = Nat44::new(cfg).unwrap();
    go(&mut n, 1, Outbound, &esp(IN_A, SRV, 1)).unwrap();
    assert_eq!(
        go(&mut n, 1, Inbound, &esp(SRV2, PUB, 1)),
        Err(DropReason::NoMapping),
        "another remote to A's public address"
    );
    // A GRE header (no key), protocol type IPv4.
    let gre = |src, dst| ipv4(GRE, src, dst, 64, &[0, 0, 0x08, 0, 0x45, 0, 0, 20]);
    let c = go(&mut n, 1, Inbound, &gre(SRV2, public_c)).unwrap();
    assert_eq!(v4_addrs(&c), (SRV2, in_c));
    let back = go(&mut n, 2, Outbound, &gre(in_c, SRV2)).unwrap();
    assert_eq!(v4_addrs(&back), (public_c, SRV2));
}

/// RFC 5508 §7 for an address-only flow: an ICMP error about A's ESP packet, from a
/// router on the way, reaches A with the quoted packet as A sent it.
#[test]
fn an_icmp_error_about_an_esp_packet_reaches_its_sender() {
    let mut n = Nat44::new(config()).unwrap();
    let sent = go(&mut n, 1, Outbound, &esp(IN_A, SRV, 1)).unwrap();
    let router = Ipv4Addr::new(192, 0, 2, 254);
    let mut icmp = vec![3, 1, 0, 0, 0, 0, 0, 0]; // host unreachable
    icmp.extend_from_slice(&sent[..28]);
    let c = wire::checksum::checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let mut e = ipv4(1, router, PUB, 64, &icmp);
    let v = n.process(t(2), Inbound, &mut e);
    assert!(v.is_forward(), "{v:?}");
    assert_eq!(v4_addrs(&e), (router, IN_A));
    assert_eq!(wire::checksum::checksum(&e[20..]), 0, "ICMP checksum");
    let quote = &e[28..];
    assert_eq!(v4_addrs(quote), (IN_A, SRV));
    assert_eq!(
        wire::checksum::checksum(&quote[..20]),
        0,
        "quoted header checksum"
    );
    assert_eq!(quote[20..28], sent[20..28], "the quoted ESP bytes");
}
