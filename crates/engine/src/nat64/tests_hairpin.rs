//! A hairpinned packet is processed as an incoming IPv4 packet after its first
//! translation (RFC 6146 §3.8): an unsolicited TCP SYN from one IPv6 host to a pool4
//! endpoint is held for a simultaneous open exactly like one from outside (RFC 6146
//! §3.5.2.2, RFC 5382 REQ-4), and the Port Unreachable owed after the hold goes back to
//! the IPv6 sender as ICMPv6, never out of the IPv4 side.

use super::tests::{config, embed, poll, run, syn4, t, HOST_A, HOST_B, POOL, SRV4};
use super::*;
use crate::config::Filtering;
use crate::testpkt::*;

/// An IPv6 TCP segment with `flags` from `src` to the pool4 endpoint `POOL:dport`.
fn tcp6(src: Ipv6Addr, sport: u16, dst: Ipv6Addr, dport: u16, flags: u8) -> Vec<u8> {
    let mut p = ipv6(TCP, src, dst, 64, &tcp(sport, dport, flags));
    fill_l4_csum(&mut p);
    p
}

fn hairpin_syn(sport: u16, dport: u16) -> Vec<u8> {
    tcp6(HOST_A, sport, embed(POOL), dport, 0x02)
}

/// An unsolicited IPv4 SYN from `SRV4:sport` to `POOL:5000`.
fn syn_from_outside(n: &mut Nat64, now: u64, sport: u16) -> Result<(), DropReason> {
    run(n, now, Direction::Inbound, &syn4(SRV4, sport, 5000)).map(|_| ())
}

fn out6(n: &mut Nat64, now: u64, pkt: &[u8]) -> Result<(Vec<u8>, bool), DropReason> {
    run(n, now, Direction::Outbound, pkt)
}

/// An unsolicited hairpinned SYN is held: nothing leaves at once, nothing before 6 s;
/// then exactly one ICMPv6 Destination Unreachable / Port Unreachable (type 1 code 4,
/// RFC 7915 §4.2's translation of ICMPv4 type 3 code 3) goes to the IPv6 sender, from
/// the Pref64 address of the pool4 address the SYN was sent to, quoting the SYN as the
/// host sent it (RFC 4443 §3.1).
#[test]
fn unsolicited_hairpinned_syn_is_held_then_answered_in_icmpv6() {
    let mut n = Nat64::new(config()).unwrap();
    let syn = hairpin_syn(5000, 5001);
    assert_eq!(out6(&mut n, 1, &syn), Err(DropReason::SynHeld));
    assert_eq!(n.poll_due_timeout(), Some(t(7)), "due 6 s after it came");
    assert!(poll(&mut n, 6_999).is_empty(), "not before 6 s");
    let got = poll(&mut n, 7_000);
    assert_eq!(got.len(), 1);
    let e = &got[0];
    assert_eq!(e[0] >> 4, 6, "to the IPv6 side, not onto the IPv4 link");
    assert_eq!((e[6], e[40], e[41]), (ICMP6, 1, 4), "Port Unreachable");
    assert_eq!(v6_addrs(e), (embed(POOL), HOST_A));
    assert_checksums(e);
    let quote = &e[48..];
    assert_eq!(quote.len(), syn.len(), "the whole SYN is quoted");
    assert_eq!(v6_addrs(quote), (HOST_A, embed(POOL)));
    assert_eq!(quote[6], TCP);
    assert_eq!(
        &quote[40..],
        &syn[40..],
        "its TCP header as sent, checksum and all"
    );
    assert!(poll(&mut n, 8_000).is_empty(), "exactly once");
    assert!(poll(&mut n, 60_000).is_empty());
    let c = n.counters();
    assert_eq!(c.dropped(DropReason::SynHeld), 1);
    assert_eq!(c.icmp_errors_sent, 1);
}

/// Simultaneous open round the hairpin: A's SYN to B's pool4 endpoint arrives first (no
/// binding there yet, or one whose address-dependent filter refuses A) and is held;
/// B's SYN to A's pool4 endpoint then releases it silently and is hairpinned to A, whose
/// SYN-ACK reaches B. No error is ever sent.
#[test]
fn hairpinned_simultaneous_open_drops_the_held_syn_silently() {
    for filtering in [Filtering::EndpointIndependent, Filtering::AddressDependent] {
        let mut n = Nat64::new(Nat64Config {
            filtering,
            ..config()
        })
        .unwrap();
        if filtering == Filtering::AddressDependent {
            // B's binding exists (to a server); its filter refuses A.
            let srv = embed(SRV4);
            let (o, _) = out6(&mut n, 0, &tcp6(HOST_B, 5001, srv, 80, 0x02)).unwrap();
            assert_eq!((v4_addrs(&o).0, ports(&o).0), (POOL, 5001));
        }
        assert_eq!(
            out6(&mut n, 1, &hairpin_syn(5000, 5001)),
            Err(DropReason::SynHeld)
        );
        let (b, hairpin) = out6(&mut n, 2, &tcp6(HOST_B, 5001, embed(POOL), 5000, 0x02)).unwrap();
        assert!(hairpin);
        assert_eq!(
            (v6_addrs(&b), ports(&b)),
            ((embed(POOL), HOST_A), (5001, 5000))
        );
        assert_eq!(n.poll_due_timeout(), None, "released");
        assert!(
            poll(&mut n, 20_000).is_empty(),
            "the held SYN went silently"
        );
        let synack = tcp6(HOST_A, 5000, embed(POOL), 5001, 0x12);
        let (a, hairpin) = out6(&mut n, 3, &synack).unwrap();
        assert!(hairpin);
        assert_eq!(
            (v6_addrs(&a), ports(&a)),
            ((embed(POOL), HOST_B), (5000, 5001))
        );
        assert_eq!(n.counters().icmp_errors_sent, 0);
    }
}

/// `drop_externally_initiated_tcp` drops a hairpinned unsolicited SYN at once, counted,
/// with no answer ever, as it does one from outside.
#[test]
fn drop_externally_initiated_tcp_drops_a_hairpinned_syn_at_once() {
    let mut n = Nat64::new(Nat64Config {
        drop_externally_initiated_tcp: true,
        ..config()
    })
    .unwrap();
    assert_eq!(
        out6(&mut n, 1, &hairpin_syn(5000, 5001)),
        Err(DropReason::NoMapping)
    );
    assert_eq!(n.poll_due_timeout(), None);
    assert!(poll(&mut n, 10_000).is_empty());
    let c = n.counters();
    assert_eq!(c.dropped(DropReason::NoMapping), 1);
    assert_eq!(c.icmp_errors_sent, 0);
}

/// Hairpinned and outside SYNs share one store of `max_simultaneous_opens`: a
/// retransmission is not held twice, one over the limit is `syn_hold_full`, and after
/// the hold each held SYN is answered on its own side.
#[test]
fn hairpinned_syns_count_against_max_simultaneous_opens() {
    let mut n = Nat64::new(Nat64Config {
        max_simultaneous_opens: 2,
        ..config()
    })
    .unwrap();
    use DropReason::{SynHeld, SynHoldFull};
    assert_eq!(syn_from_outside(&mut n, 1, 1000), Err(SynHeld));
    let r: Vec<_> = [2000, 2000, 2001]
        .iter()
        .map(|p| out6(&mut n, 1, &hairpin_syn(*p, 5001)).map(|_| ()))
        .collect();
    assert_eq!(r, vec![Err(SynHeld), Err(SynHeld), Err(SynHoldFull)]);
    let got = poll(&mut n, 7_000);
    let families: Vec<u8> = got.iter().map(|p| p[0] >> 4).collect();
    assert_eq!(families.len(), 2, "one answer per held SYN");
    assert!(families.contains(&4) && families.contains(&6));
    let c = n.counters();
    assert_eq!((c.dropped(SynHeld), c.dropped(SynHoldFull)), (3, 1));
}
