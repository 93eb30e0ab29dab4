//! PPTP through NAT44 (RFC 2637, `pptp`): two inside clients that picked the same call
//! id reach one server, each call's GRE finds its own client, the control messages are
//! rewritten with their TCP checksums right, and a call ends when the server says so.

use std::net::Ipv4Addr;

use conntrack::Timestamp;
use proptest::prelude::*;

use super::pptp::{self, FIRST_PUBLIC_ID, MAX_CALLS, PPTP_PORT};
use super::tests::{config, IN_A, IN_B, PUB, SRV};
use super::Nat44;
use crate::testpkt::{assert_checksums, ipv4, ports, tcp_segment, v4_addrs};
use crate::verdict::{Direction::*, DropReason};
use crate::{Direction, Emit};

const GRE: u8 = 47;
const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const PSH_ACK: u8 = 0x18;

fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

/// A PPTP control message of `kind` with `call_id` at 12 and `peer` at 14, of its
/// type's length (RFC 2637 §2), result code 1 where it has one.
fn message(kind: u16, call_id: u16, peer: u16) -> Vec<u8> {
    let len = match kind {
        7 => 168,
        8 => 32,
        10 | 15 => 24,
        11 => 28,
        13 => 148,
        14 => 40,
        _ => 16,
    };
    message_of(kind, len, call_id, peer)
}

/// A PPTP control message of `kind` and length `len`.
fn message_of(kind: u16, len: u16, call_id: u16, peer: u16) -> Vec<u8> {
    let mut m = vec![0u8; usize::from(len)];
    m[0..2].copy_from_slice(&len.to_be_bytes());
    m[2..4].copy_from_slice(&1u16.to_be_bytes());
    m[4..8].copy_from_slice(&0x1a2b_3c4du32.to_be_bytes());
    m[8..10].copy_from_slice(&kind.to_be_bytes());
    m[12..14].copy_from_slice(&call_id.to_be_bytes());
    m[14..16].copy_from_slice(&peer.to_be_bytes());
    if len > 16 {
        m[16] = 1; // result code: connected
    }
    m
}

/// A client's control connection to SRV through PUB, as the worker describes it.
fn control(inside: Ipv4Addr) -> pptp::Control {
    pptp::Control {
        inside,
        public: PUB,
        pac: SRV,
        served: false,
    }
}

/// A TCP segment carrying `data`, checksums filled.
fn segment(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut p = tcp_segment(src, sport, dst, dport, PSH_ACK, 2000, 3000, data.len());
    let l4 = 20 + 20;
    p[l4..].copy_from_slice(data);
    crate::testpkt::fill_l4_csum(&mut p);
    p
}

/// An enhanced GRE packet (version 1, key present: payload length and call id).
fn gre(src: Ipv4Addr, dst: Ipv4Addr, call_id: u16, data: &[u8]) -> Vec<u8> {
    let mut l4 = vec![0x20, 0x01, 0x88, 0x0b];
    l4.extend_from_slice(&(data.len() as u16).to_be_bytes());
    l4.extend_from_slice(&call_id.to_be_bytes());
    l4.extend_from_slice(data);
    ipv4(GRE, src, dst, 64, &l4)
}

fn call_id_of_gre(p: &[u8]) -> u16 {
    u16::from_be_bytes([p[26], p[27]])
}

fn field(p: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([p[40 + off], p[41 + off]])
}

fn go(n: &mut Nat44, now: u64, dir: Direction, p: &[u8]) -> Result<Vec<u8>, DropReason> {
    let mut b = p.to_vec();
    match n.process(t(now), dir, &mut b) {
        Emit::Forward { start, len } => Ok(b[start..start + len].to_vec()),
        e => Err(e.drop_reason().expect("a packet not sent has a reason")),
    }
}

/// A client's control connection, opened: the public port it left by.
fn connect(n: &mut Nat44, inside: Ipv4Addr, sport: u16) -> u16 {
    let syn = tcp_segment(inside, sport, SRV, PPTP_PORT, SYN, 1999, 0, 0);
    let out = go(n, 1, Outbound, &syn).unwrap();
    let public_port = ports(&out).0;
    let synack = tcp_segment(SRV, PPTP_PORT, PUB, public_port, SYN | ACK, 2999, 2000, 0);
    go(n, 1, Inbound, &synack).unwrap();
    public_port
}

/// A client opens a call with id `pns_id`, the server answers with its `pac_id`: the id
/// the server saw, and the reply as the client got it.
fn open_call(
    n: &mut Nat44,
    inside: Ipv4Addr,
    sport: u16,
    public_port: u16,
    pns_id: u16,
    pac_id: u16,
) -> u16 {
    let req = segment(inside, sport, SRV, PPTP_PORT, &message(7, pns_id, 0));
    let out = go(n, 2, Outbound, &req).unwrap();
    assert_checksums(&out);
    let public_id = field(&out, 12);
    let reply = segment(
        SRV,
        PPTP_PORT,
        PUB,
        public_port,
        &message(8, pac_id, public_id),
    );
    let back = go(n, 2, Inbound, &reply).unwrap();
    assert_checksums(&back);
    assert_eq!(v4_addrs(&back), (SRV, inside));
    assert_eq!(field(&back, 12), pac_id, "the server's own id kept");
    assert_eq!(field(&back, 14), pns_id, "the client's id given back");
    public_id
}

/// Two clients, one call id (1, as Linux's PPTP client picks): the server sees two
/// public call ids, and each call's GRE goes to and comes from its own client.
#[test]
fn two_clients_with_one_call_id_each_get_their_own_call() {
    let mut n = Nat44::new(config()).unwrap();
    let (pa, pb) = (connect(&mut n, IN_A, 40001), connect(&mut n, IN_B, 40002));
    let id_a = open_call(&mut n, IN_A, 40001, pa, 1, 500);
    let id_b = open_call(&mut n, IN_B, 40002, pb, 1, 501);
    assert_ne!(id_a, id_b);
    assert!(id_a >= FIRST_PUBLIC_ID && id_b >= FIRST_PUBLIC_ID);

    for (inside, pac_id) in [(IN_A, 500), (IN_B, 501)] {
        let out = go(&mut n, 3, Outbound, &gre(inside, SRV, pac_id, b"lcp")).unwrap();
        assert_eq!(v4_addrs(&out), (PUB, SRV));
        assert_eq!(call_id_of_gre(&out), pac_id, "the server's id untouched");
        assert_eq!(out[28..], *b"lcp");
    }
    for (public_id, inside) in [(id_b, IN_B), (id_a, IN_A)] {
        let back = go(&mut n, 3, Inbound, &gre(SRV, PUB, public_id, b"ack")).unwrap();
        assert_eq!(v4_addrs(&back), (SRV, inside));
        assert_eq!(call_id_of_gre(&back), 1, "the client's own id");
        assert_eq!(wire::checksum::checksum(&back[..20]), 0);
    }
    assert_eq!(n.session_count(), 4, "two control connections, two calls");
}

/// The server may send its GRE before the client's first: the call's session is made
/// from the control channel's knowledge.
#[test]
fn the_server_may_speak_first() {
    let mut n = Nat44::new(config()).unwrap();
    let pa = connect(&mut n, IN_A, 40001);
    let id = open_call(&mut n, IN_A, 40001, pa, 7, 900);
    let back = go(&mut n, 3, Inbound, &gre(SRV, PUB, id, b"lcp")).unwrap();
    assert_eq!(v4_addrs(&back), (SRV, IN_A));
    assert_eq!(call_id_of_gre(&back), 7);
    let out = go(&mut n, 3, Outbound, &gre(IN_A, SRV, 900, b"ack")).unwrap();
    assert_eq!(v4_addrs(&out), (PUB, SRV));
    assert_eq!(n.session_count(), 2);
}

/// A retransmitted request keeps its call's public id; Call-Clear-Request carries it
/// too; Call-Disconnect-Notify ends the call, and its GRE is no longer let in.
#[test]
fn a_call_from_request_to_disconnect() {
    let mut n = Nat44::new(config()).unwrap();
    let pa = connect(&mut n, IN_A, 40001);
    let id = open_call(&mut n, IN_A, 40001, pa, 3, 77);
    let again = segment(IN_A, 40001, SRV, PPTP_PORT, &message(7, 3, 0));
    assert_eq!(field(&go(&mut n, 4, Outbound, &again).unwrap(), 12), id);
    go(&mut n, 4, Outbound, &gre(IN_A, SRV, 77, b"x")).unwrap();

    let clear = segment(IN_A, 40001, SRV, PPTP_PORT, &message(12, 3, 0));
    let out = go(&mut n, 5, Outbound, &clear).unwrap();
    assert_checksums(&out);
    assert_eq!(field(&out, 12), id);
    let notify = segment(SRV, PPTP_PORT, PUB, pa, &message(13, 77, 0));
    let back = go(&mut n, 5, Inbound, &notify).unwrap();
    assert_eq!(field(&back, 12), 77);
    assert_eq!(n.shared().pptp.len(), 0);
    assert_eq!(
        go(&mut n, 6, Inbound, &gre(SRV, PUB, id, b"late")),
        Err(DropReason::NoMapping)
    );
}

/// With `pptp` off, PPTP's GRE goes by address only: the second client's call to the
/// same server is refused, and the control messages pass untouched.
#[test]
fn off_it_is_address_only() {
    let mut n = Nat44::new(super::Nat44Config {
        pptp: false,
        ..config()
    })
    .unwrap();
    let pa = connect(&mut n, IN_A, 40001);
    let req = segment(IN_A, 40001, SRV, PPTP_PORT, &message(7, 1, 0));
    assert_eq!(field(&go(&mut n, 2, Outbound, &req).unwrap(), 12), 1);
    let reply = segment(SRV, PPTP_PORT, PUB, pa, &message(8, 500, 1));
    assert_eq!(field(&go(&mut n, 2, Inbound, &reply).unwrap(), 14), 1);
    go(&mut n, 3, Outbound, &gre(IN_A, SRV, 500, b"a")).unwrap();
    assert_eq!(
        go(&mut n, 3, Outbound, &gre(IN_B, SRV, 501, b"b")),
        Err(DropReason::AddressOnlyInUse)
    );
}

/// Two messages in one segment are both read; GRE version 0 (a plain tunnel) and a
/// call id no call has go by address only.
#[test]
fn two_messages_in_a_segment_and_other_gre() {
    let mut n = Nat44::new(config()).unwrap();
    connect(&mut n, IN_B, 40002);
    let mut two = message(7, 1, 0);
    two.extend(message(7, 2, 0));
    let out = go(
        &mut n,
        2,
        Outbound,
        &segment(IN_B, 40002, SRV, PPTP_PORT, &two),
    )
    .unwrap();
    assert_checksums(&out);
    let (a, b) = (field(&out, 12), field(&out, 168 + 12));
    assert!(a >= FIRST_PUBLIC_ID && b >= FIRST_PUBLIC_ID && a != b);
    assert_eq!(n.shared().pptp.len(), 2);
    // A version-0 GRE packet with a key: address only, its key untouched.
    let mut v0 = gre(IN_A, SRV, 1, b"ip");
    v0[21] = 0;
    let out = go(&mut n, 3, Outbound, &v0).unwrap();
    assert_eq!((v4_addrs(&out), call_id_of_gre(&out)), ((PUB, SRV), 1));
}

/// An ICMP error from a router on the way about a call's outbound GRE (Fragmentation
/// Needed: the tunnel's path MTU) reaches the call's client, not the other client on
/// the same public address, with the quote as that client sent it.
#[test]
fn an_icmp_error_about_a_calls_gre_reaches_its_client() {
    let mut n = Nat44::new(config()).unwrap();
    let (pa, pb) = (connect(&mut n, IN_A, 40001), connect(&mut n, IN_B, 40002));
    open_call(&mut n, IN_A, 40001, pa, 1, 500);
    open_call(&mut n, IN_B, 40002, pb, 1, 501);
    go(&mut n, 3, Outbound, &gre(IN_A, SRV, 500, b"a")).unwrap();
    let sent = go(&mut n, 3, Outbound, &gre(IN_B, SRV, 501, b"b")).unwrap();
    let router = Ipv4Addr::new(192, 0, 2, 254);
    let mut icmp = vec![3, 4, 0, 0, 0, 0, 0x05, 0x78]; // fragmentation needed, MTU 1400
    icmp.extend_from_slice(&sent[..28]);
    let c = wire::checksum::checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let back = go(&mut n, 4, Inbound, &ipv4(1, router, PUB, 64, &icmp)).unwrap();
    assert_eq!(v4_addrs(&back), (router, IN_B));
    assert_eq!(wire::checksum::checksum(&back[20..]), 0, "ICMP checksum");
    assert_eq!(v4_addrs(&back[28..]), (IN_B, SRV), "the quote as B sent it");
    assert_eq!(back[48..56], sent[20..28], "the quoted GRE header");
}

/// A server answering one call again and again with new ids of its own never grows the
/// table: the call's GRE goes by the last id it named.
#[test]
fn a_server_repeating_its_answer_grows_nothing() {
    let calls = pptp::PptpCalls::default();
    let c = control(IN_A);
    let mut req = message(7, 1, 0);
    calls.control(c, Outbound, &mut req, t(1)).unwrap();
    let public_id = u16::from_be_bytes([req[12], req[13]]);
    for pac_id in 0..1000u16 {
        let mut reply = message(8, pac_id, public_id);
        calls.control(c, Inbound, &mut reply, t(1)).unwrap();
    }
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls.outbound(IN_A, SRV, 999, t(2)).map(|g| g.public_id),
        Some(public_id)
    );
    assert_eq!(calls.outbound(IN_A, SRV, 998, t(2)), None);
    assert_eq!(calls.pac_ids(), 1);
}

/// A PPTP server inside, behind a port forward of 1723: its control connection from an
/// outside client is read too, its messages untouched (the server keeps its own ids
/// unique), and the client's GRE reaches the server even before the server's first.
#[test]
fn a_server_inside_behind_a_port_forward() {
    let server = Ipv4Addr::new(10, 0, 0, 20);
    let mut cfg = config();
    cfg.port_forwards.push(super::PortForward {
        protocol: crate::config::L4Proto::Tcp,
        public: std::net::SocketAddrV4::new(PUB, PPTP_PORT),
        inside: std::net::SocketAddrV4::new(server, PPTP_PORT),
    });
    let mut n = Nat44::new(cfg).unwrap();
    let syn = tcp_segment(SRV, 50000, PUB, PPTP_PORT, SYN, 1999, 0, 0);
    assert_eq!(
        v4_addrs(&go(&mut n, 1, Inbound, &syn).unwrap()),
        (SRV, server)
    );
    let synack = tcp_segment(server, PPTP_PORT, SRV, 50000, SYN | ACK, 2999, 2000, 0);
    go(&mut n, 1, Outbound, &synack).unwrap();
    // GRE from the client before any control message: nothing lets it in yet.
    assert_eq!(
        go(&mut n, 2, Inbound, &gre(SRV, PUB, 9000, b"early")),
        Err(DropReason::NoMapping)
    );
    let req = segment(SRV, 50000, PUB, PPTP_PORT, &message(7, 5, 0));
    let inside = go(&mut n, 2, Inbound, &req).unwrap();
    assert_eq!(field(&inside, 12), 5, "the client's id untouched");
    let reply = segment(server, PPTP_PORT, SRV, 50000, &message(8, 9000, 5));
    let out = go(&mut n, 2, Outbound, &reply).unwrap();
    assert_eq!((field(&out, 12), field(&out, 14)), (9000, 5), "untouched");
    assert_checksums(&out);
    // The client speaks first on the call: its GRE (the server's id) reaches the server.
    let back = go(&mut n, 3, Inbound, &gre(SRV, PUB, 9000, b"lcp")).unwrap();
    assert_eq!(v4_addrs(&back), (SRV, server));
    assert_eq!(call_id_of_gre(&back), 9000);
    let out = go(&mut n, 3, Outbound, &gre(server, SRV, 5, b"ack")).unwrap();
    assert_eq!((v4_addrs(&out), call_id_of_gre(&out)), ((PUB, SRV), 5));
    assert_eq!(n.session_count(), 2, "the control connection and the GRE");
}

/// A call's public id is free again when the call ends, while its GRE session lives on:
/// another client's new call under that id, with the server reusing its own id, gets
/// its own GRE, not the old client.
#[test]
fn a_public_id_given_again_carries_the_new_clients_gre() {
    let mut n = Nat44::new(config()).unwrap();
    let (pa, pb) = (connect(&mut n, IN_A, 40001), connect(&mut n, IN_B, 40002));
    let id = open_call(&mut n, IN_A, 40001, pa, 1, 500);
    go(&mut n, 3, Outbound, &gre(IN_A, SRV, 500, b"a")).unwrap();
    let notify = segment(SRV, PPTP_PORT, PUB, pa, &message_of(13, 148, 500, 0));
    go(&mut n, 4, Inbound, &notify).unwrap();
    assert_eq!(
        open_call(&mut n, IN_B, 40002, pb, 1, 500),
        id,
        "the id given again"
    );
    let back = go(&mut n, 5, Inbound, &gre(SRV, PUB, id, b"to b")).unwrap();
    assert_eq!(v4_addrs(&back), (SRV, IN_B));
    let out = go(&mut n, 5, Outbound, &gre(IN_B, SRV, 500, b"from b")).unwrap();
    assert_eq!(v4_addrs(&out), (PUB, SRV));
}

/// A call's GRE cut into IP fragments: the first fragment goes by the call (the other
/// client's GRE holds the address-only session), the later one follows it.
#[test]
fn a_calls_gre_in_fragments() {
    let mut n = Nat44::new(config()).unwrap();
    let (pa, pb) = (connect(&mut n, IN_A, 40001), connect(&mut n, IN_B, 40002));
    let id_a = open_call(&mut n, IN_A, 40001, pa, 1, 500);
    let id_b = open_call(&mut n, IN_B, 40002, pb, 1, 501);
    go(&mut n, 3, Outbound, &gre(IN_A, SRV, 500, b"a")).unwrap();
    let big = gre(SRV, PUB, id_b, &[0x5a; 400]);
    let frags = crate::testpkt::fragment_v4(&big, 0x4242, &[200, 216]);
    let first = go(&mut n, 4, Inbound, &frags[0]).unwrap();
    assert_eq!(v4_addrs(&first), (SRV, IN_B));
    assert_eq!(call_id_of_gre(&first), 1);
    let second = go(&mut n, 4, Inbound, &frags[1]).unwrap();
    assert_eq!(v4_addrs(&second), (SRV, IN_B));
    let _ = id_a;
}

/// A refused Outgoing-Call-Reply (result code other than 1) ends the call; a message
/// shorter than its type's length is left alone.
#[test]
fn a_refused_call_ends_and_short_messages_are_left_alone() {
    let calls = pptp::PptpCalls::default();
    let c = control(IN_A);
    let mut req = message_of(7, 168, 1, 0);
    calls.control(c, Outbound, &mut req, t(1)).unwrap();
    let id = u16::from_be_bytes([req[12], req[13]]);
    let mut refused = message_of(8, 32, 600, id);
    refused[16] = 2; // general error
    calls.control(c, Inbound, &mut refused, t(1)).unwrap();
    assert_eq!(
        u16::from_be_bytes([refused[14], refused[15]]),
        1,
        "still given back"
    );
    assert!(calls.is_empty());
    // An Outgoing-Call-Request of 16 bytes: not a call.
    let mut short = message_of(7, 16, 1, 0);
    calls.control(c, Outbound, &mut short, t(1)).unwrap();
    assert!(calls.is_empty());
    assert_eq!(u16::from_be_bytes([short[12], short[13]]), 1);
}

/// One inside host holds at most `MAX_CALLS_PER_HOST` calls; another host still gets in.
#[test]
fn one_host_cannot_take_the_whole_table() {
    let calls = pptp::PptpCalls::default();
    let c = control;
    for i in 0..pptp::MAX_CALLS_PER_HOST as u16 {
        calls
            .control(c(IN_A), Outbound, &mut message(7, i, 0), t(1))
            .unwrap();
    }
    let mut more = message(7, 9999, 0);
    assert_eq!(
        calls.control(c(IN_A), Outbound, &mut more, t(1)),
        Err(DropReason::PptpCallsFull)
    );
    assert!(calls
        .control(c(IN_B), Outbound, &mut message(7, 1, 0), t(1))
        .is_ok());
}

/// The call table is bounded: the call past `MAX_CALLS` refuses its segment, named.
#[test]
fn the_call_table_is_bounded() {
    let calls = pptp::PptpCalls::default();
    // Spread over hosts, each below its own bound.
    let per_host = pptp::MAX_CALLS_PER_HOST as usize;
    let c = |i: usize| control(Ipv4Addr::new(10, 1, (i / per_host) as u8, 1));
    for i in 0..MAX_CALLS {
        let mut m = message(7, i as u16, 0);
        calls.control(c(i), Outbound, &mut m, t(1)).unwrap();
    }
    let c = c(MAX_CALLS);
    let mut m = message(7, u16::MAX, 0);
    assert_eq!(
        calls.control(c, Outbound, &mut m, t(1)),
        Err(DropReason::PptpCallsFull)
    );
    // Idle calls are forgotten after the timeout, and there is room again.
    calls.expire(t(700), std::time::Duration::from_secs(600));
    assert!(calls.is_empty());
    assert!(calls.control(c, Outbound, &mut m, t(700)).is_ok());
}

proptest! {
    /// Any bytes as a control connection's data, either way: no panic, nothing written
    /// but the 16-bit call id fields (the length is kept), and the checksum difference
    /// returned is exactly what changed.
    #[test]
    fn control_reads_any_bytes(data in proptest::collection::vec(any::<u8>(), 0..200),
                               outbound in any::<bool>(), kinds in any::<u16>()) {
        let calls = pptp::PptpCalls::default();
        let c = control(IN_A);
        let dir = if outbound { Outbound } else { Inbound };
        // Half the time a well-formed header in front, so the message paths run.
        let mut bytes = if kinds % 2 == 0 { message(kinds % 16, kinds, kinds) } else { Vec::new() };
        bytes.extend(data);
        let before = bytes.clone();
        if let Ok(delta) = calls.control(c, dir, &mut bytes, t(1)) {
            prop_assert_eq!(bytes.len(), before.len());
            let sum = |b: &[u8]| wire::checksum::checksum(b);
            prop_assert_eq!(delta.apply(sum(&before)) , sum(&bytes));
        }
    }

    /// Any sequence of well-formed messages, either way, from two clients: the server ids
    /// filed never outnumber the calls, and every call's GRE finds the call it names.
    #[test]
    fn the_tables_agree_after_any_messages(
        msgs in proptest::collection::vec((any::<bool>(), any::<bool>(), 0u16..16, 0u16..8, 250u16..262), 0..60)
    ) {
        let calls = pptp::PptpCalls::default();
        for (outbound, second, kind, id, peer) in msgs {
            let c = control(if second { IN_B } else { IN_A });
            let dir = if outbound { Outbound } else { Inbound };
            let mut m = message(kind, id, peer);
            calls.control(c, dir, &mut m, t(1)).unwrap();
            prop_assert!(calls.pac_ids() <= calls.len());
            prop_assert!(calls.index_sizes().iter().all(|&n| n <= calls.len()));
        }
        for inside in [IN_A, IN_B] {
            for pac_id in 0..8 {
                if let Some(g) = calls.outbound(inside, SRV, pac_id, t(2)) {
                    prop_assert_eq!(g.inside, inside);
                    prop_assert_eq!(g.pac_id, pac_id);
                    let back = calls.inbound(PUB, SRV, g.public_id, t(2));
                    prop_assert_eq!(back, Some(g));
                    // An error quoting that id never names a call of another id (one
                    // call of it when the server gave one id to two clients' calls).
                    if let Some(id) = calls.quoted(PUB, SRV, pac_id) {
                        let q = calls.inbound(PUB, SRV, id, t(2));
                        prop_assert_eq!(q.map(|q| q.pac_id), Some(pac_id));
                    }
                }
            }
        }
    }

    /// Any bytes as GRE: a call id only from a version-1 header with a key, for PPP.
    #[test]
    fn gre_call_id_of_any_bytes(b in proptest::collection::vec(any::<u8>(), 0..16)) {
        if let Some(id) = pptp::gre_call_id(&b) {
            prop_assert!(b[0] & 0x20 != 0 && b[1] & 7 == 1 && b[2..4] == [0x88, 0x0b]);
            prop_assert_eq!(id, u16::from_be_bytes([b[6], b[7]]));
        }
    }
}
