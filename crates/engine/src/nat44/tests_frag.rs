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

#[test]
fn a_later_fragment_before_the_first_is_dropped_and_counted() {
    let mut n = Nat44::new(config()).unwrap();
    let frags = fragment_v4(&udp_datagram(IN_A, 5000, SRV, 53, 2000), 9, &[1000]);
    assert_eq!(
        run(&mut n, t(0), Outbound, &frags[1]),
        Err(DropReason::FragmentOutOfOrder)
    );
    assert_eq!(n.counters().dropped(DropReason::FragmentOutOfOrder), 1);
    assert_eq!(
        n.session_count(),
        0,
        "a later fragment never makes a session"
    );
    // The first fragment still passes, and so does the retransmitted rest.
    let outs = all(&mut n, t(1), Outbound, &frags);
    assert_checksums(&reassemble_v4(&outs));
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
        Err(DropReason::FragmentOutOfOrder),
        "expired"
    );
    let c = fragment_v4(&udp_datagram(IN_A, 5000, SRV, 53, 2000), 3, &[1000]);
    run(&mut n, t(2500), Outbound, &c[0]).unwrap();
    n.handle_timeout(t(3000));
    assert_eq!(
        n.shared().fragment_count(),
        1,
        "only the young record is left"
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
    // A protocol without ports (GRE).
    let g = fragment_v4(&ipv4(47, IN_A, SRV, 64, &[0; 64]), 6, &[32]);
    assert_eq!(
        run(&mut n, t(0), Outbound, &g[0]),
        Err(DropReason::Fragment)
    );
    assert_eq!(
        run(&mut n, t(0), Outbound, &g[1]),
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
    assert_eq!(n.counters().dropped(DropReason::Fragment), 4);
    assert_eq!(n.session_count(), 0);
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
        }
    }
}
