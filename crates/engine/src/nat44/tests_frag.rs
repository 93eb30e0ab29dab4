//! Fragments through NAT44 (RFC 4787 REQ-14): datagrams cut by hand, the translated
//! fragments reassembled by the test and the transport checksum of the whole datagram
//! recomputed from scratch.

use std::net::Ipv4Addr;
use std::time::Duration;

use conntrack::Timestamp;
use proptest::prelude::*;

use super::config::{Nat44Config, StaticNat};
use super::tests::{IN_A, IN_B, PUB, SRV};
use super::{Nat44, Nat44Shared};
use crate::testpkt::*;
use crate::verdict::{Direction::*, DropReason};
use crate::Direction;

const PUB_B: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 9);

/// NAT44's test configuration, with B mapped 1:1 to its own public address so that a
/// fragment given A's record instead of B's shows in its source address.
fn config() -> Nat44Config {
    let mut c = super::tests::config();
    c.static_nat.push(StaticNat {
        inside: IN_B,
        public: PUB_B,
    });
    c
}

fn t(ms: u64) -> Timestamp {
    Timestamp::from_nanos(ms * 1_000_000)
}

/// A UDP datagram with `n` bytes of payload, checksum filled.
fn udp_datagram(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16, n: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
    let mut p = ipv4(UDP, src, dst, 64, &udp(sport, dport, &payload));
    fill_l4_csum(&mut p);
    p
}

fn run(n: &mut Nat44, now: Timestamp, dir: Direction, p: &[u8]) -> Result<Vec<u8>, DropReason> {
    let mut b = p.to_vec();
    match n.process(now, dir, &mut b).drop_reason() {
        None => Ok(b),
        Some(r) => Err(r),
    }
}

/// Every fragment forwarded; returns them in the order sent.
fn all(n: &mut Nat44, now: Timestamp, dir: Direction, frags: &[Vec<u8>]) -> Vec<Vec<u8>> {
    frags
        .iter()
        .map(|f| run(n, now, dir, f).expect("fragment forwarded"))
        .collect()
}

/// What a translated fragment must still carry from the one that came in: length,
/// identification, flags and offset, protocol, payload; TTL one less.
fn same_fragment(out: &[u8], inp: &[u8]) {
    assert_eq!(out.len(), inp.len());
    assert_eq!(
        out[2..8],
        inp[2..8],
        "length, identification, flags, offset"
    );
    assert_eq!(out[8], inp[8] - 1, "TTL decremented");
    assert_eq!(out[9], inp[9]);
    assert_eq!(checksum_of(&out[..20]), 0, "header checksum");
}

fn checksum_of(h: &[u8]) -> u16 {
    wire::checksum::checksum(h)
}

#[test]
fn udp_in_three_fragments_out_and_the_reply_back_in_three() {
    let mut n = Nat44::new(config()).unwrap();
    let d = udp_datagram(IN_A, 5000, SRV, 53, 3000);
    let frags = fragment_v4(&d, 0x4242, &[1480, 1480]);
    assert_eq!(frags.len(), 3);
    let outs = all(&mut n, t(0), Outbound, &frags);
    for (o, i) in outs.iter().zip(&frags) {
        same_fragment(o, i);
        assert_eq!(v4_addrs(o), (PUB, SRV));
    }
    let whole = reassemble_v4(&outs);
    assert_checksums(&whole);
    assert_eq!(ports(&whole), (5000, 53), "port preserved");
    assert_eq!(whole[28..], d[28..], "payload untouched");
    assert_eq!(n.counters().fragments_translated, 3);
    assert_eq!(n.shared().fragment_count(), 0, "the datagram completed");

    // The reply, cut differently and sent last piece first after the first fragment.
    let r = udp_datagram(SRV, 53, PUB, 5000, 2500);
    let mut rf = fragment_v4(&r, 0x0007, &[800, 1200]);
    rf.swap(1, 2);
    let back = all(&mut n, t(5), Inbound, &rf);
    for (o, i) in back.iter().zip(&rf) {
        same_fragment(o, i);
        assert_eq!(v4_addrs(o), (SRV, IN_A));
    }
    let whole = reassemble_v4(&back);
    assert_checksums(&whole);
    assert_eq!(ports(&whole), (53, 5000));
    assert_eq!(n.counters().fragments_translated, 6);
    assert_eq!(n.counters().forwarded, 6);
    assert_eq!(n.session_count(), 1);
}

/// Sends `frags` in the order `order` at `now`; returns what left: each fragment
/// forwarded, then what the worker sends after it (`poll`), in that order.
fn in_order(
    n: &mut Nat44,
    now: Timestamp,
    dir: Direction,
    frags: &[Vec<u8>],
    order: &[usize],
) -> Vec<Vec<u8>> {
    let mut out = crate::mode::Output::new();
    let mut sent = Vec::new();
    for &i in order {
        match run(n, now, dir, &frags[i]) {
            Ok(p) => sent.push(p),
            Err(r) => assert_eq!(r, DropReason::FragmentHeld, "fragment {i} of {order:?}"),
        }
        n.poll(now, &mut out);
        sent.extend(out.packets().map(<[u8]>::to_vec));
    }
    sent
}

#[test]
fn later_fragments_before_their_first_are_held_and_follow_it_out_in_any_order() {
    let mut n = Nat44::new(config()).unwrap();
    let d = udp_datagram(IN_A, 5000, SRV, 53, 3000);
    let frags = fragment_v4(&d, 9, &[800, 800, 800]);
    let outs = in_order(&mut n, t(0), Outbound, &frags, &[3, 1, 2, 0]);
    assert_eq!(outs.len(), 4);
    assert_eq!(outs[0].len(), frags[0].len(), "the first goes first");
    // The rest, as they arrived, each still a fragment of its own.
    for (o, i) in outs[1..].iter().zip([3, 1, 2]) {
        same_fragment(o, &frags[i]);
    }
    let whole = reassemble_v4(&outs);
    assert_eq!(v4_addrs(&whole), (PUB, SRV));
    assert_checksums(&whole);
    let c = n.counters();
    assert_eq!((c.forwarded, c.fragments_translated), (4, 4));
    assert_eq!(c.dropped(DropReason::FragmentHeld), 3);
    assert_eq!(n.shared().fragment_count(), 0, "complete: the record went");
    assert_eq!(n.poll_due_timeout(), None);

    // The answer, shuffled, back in.
    let r = udp_datagram(SRV, 53, PUB, ports(&whole).0, 2500);
    let rf = fragment_v4(&r, 10, &[600, 600, 600]);
    let back = in_order(&mut n, t(1), Inbound, &rf, &[2, 3, 0, 1]);
    assert_eq!(back.len(), 4);
    let whole = reassemble_v4(&back);
    assert_eq!(v4_addrs(&whole), (SRV, IN_A));
    assert_eq!(ports(&whole), (53, 5000));
    assert_checksums(&whole);
}

#[test]
fn held_fragments_whose_first_never_comes_expire_counted_and_nothing_is_sent() {
    let mut cfg = config();
    cfg.fragment_timeout = Duration::from_secs(2);
    let mut n = Nat44::new(cfg).unwrap();
    let frags = fragment_v4(&udp_datagram(IN_A, 5000, SRV, 53, 2000), 9, &[1000]);
    assert_eq!(
        run(&mut n, t(0), Outbound, &frags[1]),
        Err(DropReason::FragmentHeld)
    );
    assert_eq!(
        n.session_count(),
        0,
        "a later fragment never makes a session"
    );
    assert!(n.shared().fragments_held_bytes() > 0);
    n.handle_timeout(t(1000));
    n.handle_timeout(t(2500));
    assert_eq!(n.shared().fragment_count(), 0);
    assert_eq!(n.shared().fragments_held_bytes(), 0);
    let expired = n.counters().dropped(DropReason::FragmentExpired);
    assert_eq!(expired, 1);
    // The first fragment after that passes alone; the resent rest follows it.
    let outs = in_order(&mut n, t(3000), Outbound, &frags, &[0, 1]);
    assert_checksums(&reassemble_v4(&outs));
}

#[test]
fn with_no_hold_a_later_fragment_before_its_first_is_dropped() {
    let mut cfg = config();
    cfg.fragment_hold_bytes = 0;
    let mut n = Nat44::new(cfg).unwrap();
    let frags = fragment_v4(&udp_datagram(IN_A, 5000, SRV, 53, 2000), 9, &[1000]);
    assert_eq!(
        run(&mut n, t(0), Outbound, &frags[1]),
        Err(DropReason::FragmentOutOfOrder)
    );
    assert_eq!(n.counters().dropped(DropReason::FragmentOutOfOrder), 1);
}

#[test]
fn overlapping_fragments_refuse_the_datagram_counted() {
    let mut n = Nat44::new(config()).unwrap();
    let d = udp_datagram(IN_A, 5000, SRV, 53, 2000);
    let frags = fragment_v4(&d, 9, &[1000]);
    let other = fragment_v4(&d, 9, &[504]);
    assert_eq!(
        run(&mut n, t(0), Outbound, &frags[1]),
        Err(DropReason::FragmentHeld)
    );
    // Offset 504 overlaps the held fragment at 1000.
    assert_eq!(
        run(&mut n, t(0), Outbound, &other[1]),
        Err(DropReason::FragmentOverlap)
    );
    assert_eq!(
        run(&mut n, t(0), Outbound, &frags[0]),
        Err(DropReason::FragmentOverlap)
    );
    let c = n.counters();
    assert_eq!(
        c.dropped(DropReason::FragmentOverlap),
        3,
        "two arrived, one held"
    );
    assert_eq!(n.shared().fragments_held_bytes(), 0);
}

#[test]
fn a_hairpinned_datagram_in_reverse_order_reaches_the_other_inside_host() {
    let mut n = Nat44::new(config()).unwrap();
    let d = udp_datagram(IN_A, 5000, PUB_B, 7000, 2000);
    let frags = fragment_v4(&d, 9, &[800, 800]);
    let outs = in_order(&mut n, t(0), Outbound, &frags, &[2, 1, 0]);
    assert_eq!(outs.len(), 3);
    let whole = reassemble_v4(&outs);
    assert_eq!(v4_addrs(&whole), (PUB, IN_B));
    assert_eq!(ports(&whole).1, 7000);
    assert_checksums(&whole);
}

#[test]
fn records_expire_and_the_reaper_sweeps_them() {
    let mut cfg = config();
    cfg.fragment_timeout = Duration::from_secs(2);
    let mut n = Nat44::new(cfg).unwrap();
    let a = fragment_v4(&udp_datagram(IN_A, 5000, SRV, 53, 2000), 1, &[1000]);
    let b = fragment_v4(&udp_datagram(IN_A, 5000, SRV, 53, 2000), 2, &[1000]);
    run(&mut n, t(0), Outbound, &a[0]).unwrap();
    run(&mut n, t(0), Outbound, &b[0]).unwrap();
    assert_eq!(n.shared().fragment_count(), 2);
    run(&mut n, t(1999), Outbound, &a[1]).unwrap();
    assert_eq!(
        run(&mut n, t(2000), Outbound, &b[1]),
        Err(DropReason::FragmentHeld),
        "expired: held for a first fragment again"
    );
    let c = fragment_v4(&udp_datagram(IN_A, 5000, SRV, 53, 2000), 3, &[1000]);
    run(&mut n, t(2500), Outbound, &c[0]).unwrap();
    n.handle_timeout(t(3000));
    assert_eq!(
        n.shared().fragment_count(),
        2,
        "only the young records are left"
    );
    n.handle_timeout(t(4500));
    assert_eq!(n.shared().fragment_count(), 0);
}

#[test]
fn a_full_table_refuses_new_datagrams_not_the_ones_in_flight() {
    let mut cfg = config();
    cfg.max_fragment_records = 2;
    let mut n = Nat44::new(cfg).unwrap();
    let d: Vec<_> = (0..3u16)
        .map(|i| fragment_v4(&udp_datagram(IN_A, 5000, SRV, 53, 1200), i, &[600]))
        .collect();
    run(&mut n, t(0), Outbound, &d[0][0]).unwrap();
    run(&mut n, t(0), Outbound, &d[1][0]).unwrap();
    assert_eq!(
        run(&mut n, t(0), Outbound, &d[2][0]),
        Err(DropReason::FragmentTableFull)
    );
    assert_eq!(n.counters().dropped(DropReason::FragmentTableFull), 1);
    run(&mut n, t(1), Outbound, &d[0][1]).unwrap();
    run(&mut n, t(1), Outbound, &d[1][1]).unwrap();
    // Both completed: room again.
    let outs = all(&mut n, t(2), Outbound, &d[2]);
    assert_checksums(&reassemble_v4(&outs));
}

#[test]
fn large_ping_in_fragments_both_ways() {
    let mut n = Nat44::new(config()).unwrap();
    let mut m = echo(8, 0x1234, 1);
    m.extend_from_slice(&[0x5a; 2000]);
    let c = checksum_of(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    let req = ipv4(ICMP, IN_A, SRV, 64, &m);
    let outs = all(&mut n, t(0), Outbound, &fragment_v4(&req, 77, &[1480]));
    let whole = reassemble_v4(&outs);
    assert_eq!(v4_addrs(&whole), (PUB, SRV));
    assert_checksums(&whole);
    let id = ports(&whole).0;

    let mut m = echo(0, id, 1);
    m.extend_from_slice(&[0xa5; 2000]);
    let c = checksum_of(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    let rep = ipv4(ICMP, SRV, PUB, 64, &m);
    let back = all(&mut n, t(1), Inbound, &fragment_v4(&rep, 78, &[1480]));
    let whole = reassemble_v4(&back);
    assert_eq!(v4_addrs(&whole), (SRV, IN_A));
    assert_eq!(ports(&whole).0, 0x1234, "identifier restored");
    assert_checksums(&whole);
}

#[test]
fn untrackable_fragments_keep_the_fragment_reason() {
    let mut n = Nat44::new(config()).unwrap();
    // A TCP first fragment holding 8 bytes of its header (RFC 1858 tiny fragment).
    let mut seg = tcp(5000, 80, 0x02);
    seg.extend_from_slice(&[0; 16]);
    let mut p = ipv4(TCP, IN_A, SRV, 64, &seg);
    fill_l4_csum(&mut p);
    let f = fragment_v4(&p, 5, &[8]);
    assert_eq!(
        run(&mut n, t(0), Outbound, &f[0]),
        Err(DropReason::Fragment)
    );
    // A fragmented ICMP error.
    let mut e = vec![3, 4, 0, 0, 0, 0, 5, 0xdc];
    e.extend_from_slice(&[0; 64]);
    let f = fragment_v4(&ipv4(ICMP, IN_A, SRV, 64, &e), 7, &[32]);
    assert_eq!(
        run(&mut n, t(0), Outbound, &f[0]),
        Err(DropReason::Fragment)
    );
    assert_eq!(n.counters().dropped(DropReason::Fragment), 2);
    assert_eq!(n.session_count(), 0);
}

/// A protocol without ports (GRE) in fragments, the later one first: translated by
/// address like a whole packet, the later fragment held for the first.
#[test]
fn address_only_fragments_follow_their_first() {
    let mut n = Nat44::new(config()).unwrap();
    let g = fragment_v4(&ipv4(47, IN_A, SRV, 64, &[7; 64]), 6, &[32]);
    let outs = in_order(&mut n, t(0), Outbound, &g, &[1, 0]);
    assert_eq!(outs.len(), 2);
    let whole = reassemble_v4(&outs);
    assert_eq!(v4_addrs(&whole), (PUB, SRV));
    assert_eq!(whole[9], 47);
    assert_eq!(whole[20..], [7; 64], "the GRE bytes untouched");
}

#[test]
fn tcp_fragments_follow_their_session() {
    let mut n = Nat44::new(config()).unwrap();
    let mut seg = tcp(40000, 80, 0x18);
    seg.extend_from_slice(&[1; 1500]);
    let mut p = ipv4(TCP, IN_A, SRV, 64, &seg);
    fill_l4_csum(&mut p);
    let outs = all(&mut n, t(0), Outbound, &fragment_v4(&p, 11, &[1000]));
    let whole = reassemble_v4(&outs);
    assert_eq!(v4_addrs(&whole), (PUB, SRV));
    assert_checksums(&whole);
}

#[test]
fn a_later_fragment_from_the_wrong_side_is_refused() {
    let mut n = Nat44::new(config()).unwrap();
    let f = fragment_v4(&udp_datagram(IN_A, 5000, SRV, 53, 2000), 9, &[1000]);
    run(&mut n, t(0), Outbound, &f[0]).unwrap();
    assert_eq!(
        run(&mut n, t(0), Inbound, &f[1]),
        Err(DropReason::WrongDirection)
    );
    run(&mut n, t(0), Outbound, &f[1]).unwrap();
}

/// An ICMP error quoting a first fragment the NAT sent finds its session like any other
/// (the quote holds the ports).
#[test]
fn icmp_error_quoting_a_first_fragment_is_translated() {
    let mut n = Nat44::new(config()).unwrap();
    let f = fragment_v4(&udp_datagram(IN_A, 5000, SRV, 53, 2000), 9, &[1000]);
    let sent = run(&mut n, t(0), Outbound, &f[0]).unwrap();
    let mut e = vec![11, 0, 0, 0, 0, 0, 0, 0];
    e.extend_from_slice(&sent[..28]);
    let c = checksum_of(&e);
    e[2..4].copy_from_slice(&c.to_be_bytes());
    let err = ipv4(ICMP, Ipv4Addr::new(198, 51, 100, 254), PUB, 64, &e);
    let back = run(&mut n, t(1), Inbound, &err).unwrap();
    assert_eq!(v4_addrs(&back).1, IN_A);
    assert_eq!(v4_addrs(&back[28..]), (IN_A, SRV), "quote restored");
    assert_eq!(u16::from_be_bytes([back[48], back[49]]), 5000);
    assert_eq!(checksum_of(&back[20..]), 0, "ICMP checksum");
    assert_eq!(checksum_of(&back[..20]), 0);
}

/// Two workers: the first fragment on one, the rest on the other.
#[test]
fn fragments_of_one_datagram_on_two_workers() {
    let shared = Nat44Shared::new(config(), 2).unwrap();
    let (mut w0, mut w1) = (shared.worker(0), shared.worker(1));
    let d = udp_datagram(IN_A, 5000, SRV, 53, 3000);
    let mut frags = fragment_v4(&d, 0x99, &[1000, 1000]);
    assert_eq!(
        w0.process_packet(t(0), Outbound, &mut frags[0])
            .drop_reason(),
        None
    );
    assert_eq!(
        w1.process_packet(t(0), Outbound, &mut frags[2])
            .drop_reason(),
        None
    );
    assert_eq!(
        w1.process_packet(t(0), Outbound, &mut frags[1])
            .drop_reason(),
        None
    );
    assert_checksums(&reassemble_v4(&frags));
    assert_eq!(v4_addrs(&frags[1]), (PUB, SRV));
}

/// One step of a random fragment sequence: (datagram, fragment index, direction).
fn step() -> impl Strategy<Value = (usize, usize, bool, u8)> {
    (0usize..4, 0usize..3, any::<bool>(), 0u8..20)
}

proptest! {
    /// Random interleavings, duplicates, losses, reordering and late arrivals of the
    /// fragments of four datagrams (two hosts with the same identification): never a
    /// panic, and every fragment forwarded carries exactly its datagram's addresses.
    #[test]
    fn random_fragment_sequences(steps in proptest::collection::vec(step(), 1..60)) {
        let mut n = Nat44::new(config()).unwrap();
        // Outbound from A and B with the same identification, and the replies.
        let out_a = fragment_v4(&udp_datagram(IN_A, 5000, SRV, 53, 2000), 1, &[800, 800]);
        let out_b = fragment_v4(&udp_datagram(IN_B, 5000, SRV, 53, 2000), 1, &[800, 800]);
        let in_a = fragment_v4(&udp_datagram(SRV, 53, PUB, 5000, 2000), 1, &[800, 800]);
        let in_b = fragment_v4(&udp_datagram(SRV, 53, PUB_B, 5000, 2000), 1, &[800, 800]);
        let sets = [
            (&out_a, Outbound, (PUB, SRV)),
            (&out_b, Outbound, (PUB_B, SRV)),
            (&in_a, Inbound, (SRV, IN_A)),
            (&in_b, Inbound, (SRV, IN_B)),
        ];
        let mut ms = 0;
        for (d, i, wrong_side, edit) in steps {
            let (frags, dir, want) = sets[d];
            let dir = if wrong_side && edit % 5 == 0 {
                match dir { Outbound => Inbound, Inbound => Outbound }
            } else {
                dir
            };
            let mut p = frags[i].clone();
            if edit == 19 {
                p[6] ^= 0x20; // flip MF: a broken header is dropped, never mistranslated
            }
            ms += u64::from(edit) * 100;
            if n.process(t(ms), dir, &mut p).is_forward() {
                prop_assert_eq!(v4_addrs(&p), want);
                prop_assert_eq!(checksum_of(&p[..20]), 0);
            }
            // Held fragments released by a first: the same addresses as their datagram.
            let mut out = crate::mode::Output::new();
            n.poll(t(ms), &mut out);
            for p in out.packets() {
                let theirs: Vec<_> = sets
                    .iter()
                    .filter(|s| s.0.iter().any(|f| f[2..8] == p[2..8] && f[20..] == p[20..]))
                    .map(|s| s.2)
                    .collect();
                prop_assert!(theirs.contains(&v4_addrs(p)), "{:?} not one of {:?}", v4_addrs(p), theirs);
                prop_assert_eq!(checksum_of(&p[..20]), 0);
            }
            if ms > 10_000 {
                n.handle_timeout(t(ms));
            }
        }
    }

    /// RFC 4787 REQ-14: the fragments of a datagram in any order all leave, translated,
    /// and the receiver reassembles the translated datagram.
    #[test]
    fn fragments_in_any_order_all_leave(
        len in 1000usize..6000,
        cuts in 1usize..6,
        order in Just(()).prop_perturb(|_, mut rng| {
            let mut v: Vec<usize> = (0..8).collect();
            for i in (1..v.len()).rev() {
                v.swap(i, (rng.next_u32() as usize) % (i + 1));
            }
            v
        }),
    ) {
        let mut n = Nat44::new(config()).unwrap();
        let size = (len / (cuts + 1)).next_multiple_of(8);
        let frags = fragment_v4(&udp_datagram(IN_A, 5000, SRV, 53, len), 3, &vec![size; cuts]);
        let order: Vec<usize> = order.into_iter().filter(|&i| i < frags.len()).collect();
        let outs = in_order(&mut n, t(0), Outbound, &frags, &order);
        prop_assert_eq!(outs.len(), frags.len());
        let whole = reassemble_v4(&outs);
        prop_assert_eq!(v4_addrs(&whole), (PUB, SRV));
        assert_checksums(&whole);
        prop_assert_eq!(n.shared().fragment_count(), 0);
        prop_assert_eq!(n.shared().fragments_held_bytes(), 0);
    }
}
