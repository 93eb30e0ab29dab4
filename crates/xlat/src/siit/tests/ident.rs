//! RFC 7915 §5.1 / RFC 6864: the IPv4 Identification of packets translated from IPv6
//! without a Fragment header. Non-atomic ones (DF clear) take the next ID of their
//! (source, destination, protocol) from the caller's [`IdentSource`]; atomic ones (DF set)
//! and fragments do not ask it.

use super::*;

/// IPv6 -> IPv4 of `pkt` with the Identifications of `ids`.
fn run_with(pkt: &[u8], ids: &Seq, o: &SiitOptions) -> Vec<u8> {
    let mut buf = pkt.to_vec();
    match ipv6_to_ipv4(&mut buf, 0, pkt.len(), S4, D4, &inner64, ids, o) {
        SiitVerdict::Forward { start, len } => buf[start..start + len].to_vec(),
        SiitVerdict::Drop(d) => panic!("{d:?}"),
    }
}

fn ident(out: &[u8]) -> u16 {
    Ipv4Packet::new_checked(out).unwrap().ident()
}

/// A small UDP packet (DF clear) whose first bytes are the same every time.
fn same_start() -> Vec<u8> {
    let (_, s6v) = seg_pair(17, &udp(4000, 53, b"the same first 32 bytes, twice.."));
    ipv6(0, 17, 64, s6(), d6(), &s6v)
}

/// Two datagrams that start alike, between the same addresses, get different IDs: the
/// second is the next of the tuple's counter (RFC 6864 §4.2: no repeat within an MSL).
#[test]
fn identical_datagrams_get_different_ids() {
    let ids = Seq::default();
    let pkt = same_start();
    let (a, b) = (run_with(&pkt, &ids, &opts()), run_with(&pkt, &ids, &opts()));
    assert!(!Ipv4Packet::new_checked(&a[..]).unwrap().dont_frag());
    assert_eq!((ident(&a), ident(&b)), (FIRST_ID, FIRST_ID + 1));
    assert_eq!(a[..4], b[..4]);
    assert_eq!(a[6..10], b[6..10]);
    assert_eq!(a[20..], b[20..], "only the ID and header checksum differ");
    assert!(Ipv4Packet::new_checked(&b[..]).unwrap().verify_checksum());
    // The source is asked about the translated tuple.
    assert_eq!(ids.asked.get(), Some((S4, D4, 17)));
}

/// An echo request and an ICMPv6 error are asked for as ICMP (protocol 1).
#[test]
fn icmp_is_asked_for_as_protocol_1() {
    let ids = Seq::default();
    let mut m6 = echo(128, 7, 1, b"ping");
    fill6(&mut m6, 58, s6(), d6());
    let out = run_with(&ipv6(0, 58, 64, s6(), d6(), &m6), &ids, &opts());
    assert_eq!(ident(&out), FIRST_ID);
    assert_eq!(ids.asked.get(), Some((S4, D4, 1)));

    let (_, q6) = quoted_udp(b"probe");
    let mut e6 = icmp_err(1, 4, 0, &q6);
    fill6(&mut e6, 58, s6(), d6());
    let out = run_with(&ipv6(0, 58, 64, s6(), d6(), &e6), &ids, &opts());
    assert_eq!(ident(&out), FIRST_ID + 1);
    assert_eq!(ids.asked.get(), Some((S4, D4, 1)));
    // The quoted header is no datagram sent: it takes no ID of its own (it says 0).
    assert_eq!(ident(&out[28..]), 0);
    assert_eq!(ids.next.get(), FIRST_ID + 2, "asked once per error");
}

/// RFC 6864 §4.1: an atomic datagram (DF set) may carry any ID; it gets 0 and uses up
/// no number of the tuple's counter.
#[test]
fn atomic_datagrams_take_no_id() {
    let ids = Seq::default();
    let (_, s6v) = seg_pair(17, &udp(4000, 53, &[7; 1300]));
    let out = run_with(&ipv6(0, 17, 64, s6(), d6(), &s6v), &ids, &opts());
    let v4 = Ipv4Packet::new_checked(&out[..]).unwrap();
    assert!(v4.dont_frag(), "over 1260 bytes: DF");
    assert_eq!(v4.ident(), 0);
    let always = SiitOptions {
        df: DfPolicy::Set,
        ..opts()
    };
    assert_eq!(ident(&run_with(&same_start(), &ids, &always)), 0);
    assert_eq!(ids.asked.get(), None);
}

/// RFC 7915 §5.1.1: the fragments of one IPv6 datagram keep its identification (low 16
/// bits): one datagram, one ID, and the source is not asked.
#[test]
fn fragments_keep_the_fragment_id() {
    let ids = Seq::default();
    let (_, s6v) = seg_pair(17, &udp(4000, 53, &[9; 64]));
    for (off, more, data) in [(0u16, true, &s6v[..48]), (48, false, &s6v[48..])] {
        let mut rest = frag6(17, off, more, 0x0bad_cafe);
        rest.extend_from_slice(data);
        let out = run_with(&ipv6(0, 44, 64, s6(), d6(), &rest), &ids, &opts());
        assert_eq!(ident(&out), 0xcafe);
    }
    assert_eq!(ids.asked.get(), None);
}
