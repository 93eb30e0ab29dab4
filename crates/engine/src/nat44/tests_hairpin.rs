//! Hairpinning under each filtering behaviour (RFC 4787 §5, §6 REQ-9; RFC 5128 §3.3,
//! §3.4): two hosts behind the same NAT learn each other's public endpoints from a
//! rendezvous server, then punch a hole through the hairpin — A to B, B to A, A to B.
//! A hairpinned packet is an outbound packet from its sender's mapping and an inbound
//! packet to its destination's mapping, filtered there like one from an outside peer.

use std::net::Ipv4Addr;

use conntrack::Timestamp;
use proptest::prelude::*;

use super::tests::{config, IN_A, IN_B, PUB, SRV};
use super::Nat44;
use crate::config::Filtering;
use crate::testpkt::{
    assert_checksums, fill_l4_csum, ipv4, ports, tcp, udp, v4_addrs, ICMP, TCP, UDP,
};
use crate::verdict::{Direction::*, DropReason};
use crate::{Direction, Emit};

const ALL: [Filtering; 3] = [
    Filtering::EndpointIndependent,
    Filtering::AddressDependent,
    Filtering::AddressAndPortDependent,
];

type Ep = (Ipv4Addr, u16);

fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

fn datagram(from: Ep, to: Ep, ttl: u8) -> Vec<u8> {
    let mut p = ipv4(UDP, from.0, to.0, ttl, &udp(from.1, to.1, b"punch"));
    fill_l4_csum(&mut p);
    p
}

/// Sends a UDP datagram; the packet as it leaves the NAT, or why it did not.
fn send(n: &mut Nat44, now: u64, dir: Direction, from: Ep, to: Ep) -> Result<Vec<u8>, DropReason> {
    let mut p = datagram(from, to, 64);
    match n.process(t(now), dir, &mut p) {
        Emit::Forward { start, len } => {
            let p = p[start..start + len].to_vec();
            assert_checksums(&p);
            Ok(p)
        }
        e => Err(e
            .drop_reason()
            .expect("a packet not forwarded has a reason")),
    }
}

fn endpoints(p: &[u8]) -> (Ep, Ep) {
    let ((s, d), (sp, dp)) = (v4_addrs(p), ports(p));
    ((s, sp), (d, dp))
}

/// A and B each ask the rendezvous server (RFC 5128 §3.3 "S") for their public endpoint,
/// as STUN does: the server sees, and tells them, the mapped addresses.
fn rendezvous(f: Filtering) -> (Nat44, Ep, Ep) {
    let mut cfg = config();
    cfg.filtering = f;
    let mut n = Nat44::new(cfg).unwrap();
    let a = send(&mut n, 1, Outbound, (IN_A, 4000), (SRV, 3478)).unwrap();
    let b = send(&mut n, 1, Outbound, (IN_B, 5000), (SRV, 3478)).unwrap();
    let (a_pub, b_pub) = (endpoints(&a).0, endpoints(&b).0);
    assert_eq!((a_pub.0, b_pub.0), (PUB, PUB));
    assert_ne!(a_pub, b_pub);
    (n, a_pub, b_pub)
}

/// The punch in every filtering mode: which of A->B, B->A, A->B pass, and what each host
/// sees — the other's public endpoint as source (REQ-9), its own inside endpoint as
/// destination.
#[test]
fn hole_punch_through_the_hairpin() {
    for f in ALL {
        let (mut n, a_pub, b_pub) = rendezvous(f);
        let (a_in, b_in) = ((IN_A, 4000), (IN_B, 5000));
        let first = send(&mut n, 2, Outbound, a_in, b_pub);
        match f {
            // B's mapping takes packets from anyone.
            Filtering::EndpointIndependent => {
                assert_eq!(endpoints(&first.unwrap()), (a_pub, b_in), "{f:?}")
            }
            // B has sent nothing to A's address (or endpoint) yet.
            _ => assert_eq!(first, Err(DropReason::Filtered), "{f:?}"),
        }
        // B answers to A's public endpoint: A's first packet opened A's filter for it.
        let back = send(&mut n, 3, Outbound, b_in, a_pub).unwrap();
        assert_eq!(endpoints(&back), (b_pub, a_in), "{f:?}: B->A as A sees it");
        // And now B's filter is open to A, too.
        let again = send(&mut n, 4, Outbound, a_in, b_pub).unwrap();
        assert_eq!(endpoints(&again), (a_pub, b_in), "{f:?}: A->B as B sees it");
        let c = n.counters();
        let filtered = u64::from(f != Filtering::EndpointIndependent);
        assert_eq!(c.dropped(DropReason::Filtered), filtered, "{f:?}");
        assert_eq!(c.hairpinned, 3 - filtered, "{f:?}");
        // The exchange goes on both ways, and the server still reaches both.
        assert!(send(&mut n, 5, Outbound, b_in, a_pub).is_ok(), "{f:?}");
        assert!(
            send(&mut n, 5, Inbound, (SRV, 3478), a_pub).is_ok(),
            "{f:?}"
        );
        assert!(
            send(&mut n, 5, Inbound, (SRV, 3478), b_pub).is_ok(),
            "{f:?}"
        );
    }
}

/// B punches first: the mirror image, same outcome.
#[test]
fn hole_punch_either_side_first() {
    for f in ALL {
        let (mut n, a_pub, b_pub) = rendezvous(f);
        let (a_in, b_in) = ((IN_A, 4000), (IN_B, 5000));
        let first = send(&mut n, 2, Outbound, b_in, a_pub);
        assert_eq!(
            first.is_ok(),
            f == Filtering::EndpointIndependent,
            "{f:?}: {first:?}"
        );
        let p = send(&mut n, 3, Outbound, a_in, b_pub).unwrap();
        assert_eq!(endpoints(&p), (a_pub, b_in), "{f:?}");
        let p = send(&mut n, 4, Outbound, b_in, a_pub).unwrap();
        assert_eq!(endpoints(&p), (b_pub, a_in), "{f:?}");
    }
}

/// Address-and-port-dependent filtering stays port-exact through the hairpin: A's packet
/// to B's public endpoint opens A's filter to that endpoint only, not to B's other
/// mappings on the same address (RFC 4787 §5 "Address and Port-Dependent Filtering").
#[test]
fn port_dependent_filter_is_exact_through_the_hairpin() {
    let (mut n, a_pub, b_pub) = rendezvous(Filtering::AddressAndPortDependent);
    let (a_in, b_in) = ((IN_A, 4000), (IN_B, 5000));
    assert_eq!(
        send(&mut n, 2, Outbound, a_in, b_pub),
        Err(DropReason::Filtered)
    );
    // B from another inside port: another mapping, which A has not sent to.
    let other = (IN_B, 5001);
    send(&mut n, 2, Outbound, other, (SRV, 3478)).unwrap();
    assert_eq!(
        send(&mut n, 3, Outbound, other, a_pub),
        Err(DropReason::Filtered)
    );
    // The punched one passes.
    assert!(send(&mut n, 3, Outbound, b_in, a_pub).is_ok());
    // Address-dependent filtering lets the other mapping through: A sent to B's address.
    let (mut n, a_pub, b_pub) = rendezvous(Filtering::AddressDependent);
    assert!(send(&mut n, 2, Outbound, a_in, b_pub).is_err());
    send(&mut n, 2, Outbound, other, (SRV, 3478)).unwrap();
    assert!(send(&mut n, 3, Outbound, other, a_pub).is_ok());
}

/// The hairpinned packet is routed once: its TTL drops by one, not two; a TTL of 1 is
/// refused on the first pass, before any state is made.
#[test]
fn hairpin_decrements_the_ttl_once() {
    let (mut n, _, b_pub) = rendezvous(Filtering::EndpointIndependent);
    let mut p = datagram((IN_A, 4000), b_pub, 2);
    assert!(n.process(t(2), Outbound, &mut p).is_forward());
    assert_eq!(p[8], 1);
    assert_checksums(&p);
    let before = n.session_count();
    let mut p = datagram((IN_A, 4001), b_pub, 1);
    assert_eq!(
        n.process(t(2), Outbound, &mut p).drop_reason(),
        Some(DropReason::TtlExpired)
    );
    assert_eq!(n.session_count(), before);
}

/// Only the NAT itself sends from its public endpoints: a packet arriving from outside
/// with such a source does not ride the hairpin's records, nor makes new ones.
#[test]
fn outside_packet_from_a_public_endpoint_is_refused() {
    for f in ALL {
        let (mut n, a_pub, b_pub) = rendezvous(f);
        send(&mut n, 2, Outbound, (IN_A, 4000), b_pub).ok();
        send(&mut n, 3, Outbound, (IN_B, 5000), a_pub).unwrap();
        // The very tuple the hairpin's return pass uses, but from the wire.
        assert_eq!(
            send(&mut n, 4, Inbound, b_pub, a_pub),
            Err(DropReason::WrongDirection),
            "{f:?}"
        );
        assert_eq!(
            send(&mut n, 4, Inbound, (PUB, 9), a_pub),
            Err(DropReason::WrongDirection),
            "{f:?}"
        );
    }
}

/// An ICMP error from B about a hairpinned packet reaches A, rewritten on both passes:
/// from B's public address, quoting what A sent (RFC 5508 §7).
#[test]
fn icmp_error_rides_the_hairpin_back() {
    let (mut n, a_pub, b_pub) = rendezvous(Filtering::AddressAndPortDependent);
    let (a_in, b_in) = ((IN_A, 4000), (IN_B, 5000));
    send(&mut n, 2, Outbound, a_in, b_pub).ok();
    send(&mut n, 3, Outbound, b_in, a_pub).unwrap();
    let seen_by_b = send(&mut n, 4, Outbound, a_in, b_pub).unwrap();
    // B's port unreachable about the datagram it got.
    let mut m = vec![3, 3, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(&seen_by_b[..28]);
    let c = wire::checksum::checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    let mut e = ipv4(1, IN_B, a_pub.0, 64, &m);
    let v = n.process(t(5), Outbound, &mut e);
    assert!(v.is_forward(), "{v:?}");
    assert_eq!(v4_addrs(&e), (PUB, IN_A));
    assert_eq!(wire::checksum::checksum(&e[20..]), 0);
    let quoted = &e[28..];
    assert_eq!(endpoints(quoted), (a_in, b_pub));
    assert_eq!(wire::checksum::checksum(&quoted[..20]), 0);
}

proptest! {
    /// Any sequence of packets among two inside hosts and an outside one, in any filtering
    /// mode, never panics, never forwards with a bad checksum, and never delivers to an
    /// inside host a packet whose source is an inside address.
    #[test]
    fn hairpin_sequences_are_sound(
        f in 0usize..3,
        steps in proptest::collection::vec((0u8..4, 0u8..4, 0u16..3), 1..40),
    ) {
        let (mut n, a_pub, b_pub) = rendezvous(ALL[f]);
        let eps = [(IN_A, 4000), (IN_B, 5000), a_pub, b_pub];
        for (i, (s, d, dp)) in steps.into_iter().enumerate() {
            let (from, to) = (eps[usize::from(s)], eps[usize::from(d)]);
            let to = (to.0, to.1 + dp);
            let dir = if from.0 == PUB { Inbound } else { Outbound };
            if let Ok(p) = send(&mut n, 2 + i as u64, dir, from, to) {
                let (s, d) = endpoints(&p);
                if d.0 == IN_A || d.0 == IN_B {
                    prop_assert_eq!(s.0, if dir == Outbound { PUB } else { from.0 });
                }
            }
        }
    }
}

/// A TCP segment with `flags`.
fn segment(from: Ep, to: Ep, flags: u8) -> Vec<u8> {
    let mut p = ipv4(TCP, from.0, to.0, 64, &tcp(from.1, to.1, flags));
    fill_l4_csum(&mut p);
    p
}

/// What the NAT sends with no packet arriving at `s` seconds.
fn polled(n: &mut Nat44, s: u64) -> Vec<Vec<u8>> {
    let mut out = crate::mode::Output::new();
    n.poll(t(s), &mut out);
    out.packets().map(<[u8]>::to_vec).collect()
}

/// RFC 5382 REQ-4 through the hairpin (RFC 4787 REQ-9: the return pass is an inbound
/// packet): an unsolicited SYN from A to a public endpoint no binding holds is held 6 s,
/// then answered with Port Unreachable, which makes the hairpin back to A from the
/// endpoint A sent to; nothing leaves before, nothing twice.
#[test]
fn an_unsolicited_hairpinned_syn_is_held_then_answered_through_the_hairpin() {
    let mut n = Nat44::new(config()).unwrap();
    let syn = segment((IN_A, 4000), (PUB, 6000), 0x02);
    let mut p = syn.clone();
    assert_eq!(
        n.process(t(1), Outbound, &mut p),
        Emit::Drop(DropReason::SynHeld)
    );
    assert_eq!(n.poll_due_timeout(), Some(t(7)));
    assert!(polled(&mut n, 6).is_empty(), "not before 6 s");
    let got = polled(&mut n, 7);
    assert_eq!(got.len(), 1);
    let e = &got[0];
    assert_eq!((e[9], e[20], e[21]), (ICMP, 3, 3), "Port Unreachable");
    assert_eq!(
        v4_addrs(e),
        (PUB, IN_A),
        "from the endpoint A sent to, to A"
    );
    assert_checksums(e);
    let quote = &e[28..];
    assert_eq!(ports(quote), (4000, 6000), "the SYN as A sent it");
    assert_eq!(v4_addrs(quote), (IN_A, PUB));
    assert!(polled(&mut n, 8).is_empty(), "exactly once");
}

/// A simultaneous open through the hairpin: under port-dependent filtering A's SYN to
/// B's public endpoint is unsolicited there and held; B's SYN to A's public endpoint
/// then releases it silently and itself reaches A.
#[test]
fn a_hairpinned_simultaneous_open_drops_the_held_syn_silently() {
    let mut cfg = config();
    cfg.filtering = Filtering::AddressAndPortDependent;
    let mut n = Nat44::new(cfg).unwrap();
    // B's public endpoint, as a rendezvous server would have told A.
    let mut p = segment((IN_B, 5000), (SRV, 80), 0x02);
    assert!(n.process(t(1), Outbound, &mut p).is_forward());
    let b_pub = endpoints(&p).0;
    let mut s = segment((IN_A, 4000), b_pub, 0x02);
    assert_eq!(
        n.process(t(2), Outbound, &mut s),
        Emit::Drop(DropReason::SynHeld)
    );
    // A's public endpoint: its port kept (port preservation).
    let a_pub = (PUB, 4000);
    let mut s = segment((IN_B, 5000), a_pub, 0x02);
    let e = n.process(t(3), Outbound, &mut s);
    let Emit::Forward { start, len } = e else {
        panic!("B's SYN reaches A: {e:?}");
    };
    assert_eq!(endpoints(&s[start..start + len]), (b_pub, (IN_A, 4000)));
    assert!(polled(&mut n, 9).is_empty(), "the held SYN went silently");
    assert_eq!(n.poll_due_timeout(), None);
}
