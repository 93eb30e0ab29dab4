//! NAT64 reuses NAT44's session table, so its TCP tracking follows: checked here through
//! both of NAT64's paths (the fast path refuses what the tracker refuses and the full path
//! counts it).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

use super::*;
use crate::testpkt::*;
use crate::HEADROOM;

const HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x10);
const SRV4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
const POOL: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);

fn srv6() -> Ipv6Addr {
    "2001:db8:64::c633:6407".parse().unwrap()
}

fn config() -> Nat64Config {
    Nat64Config {
        pref64: "2001:db8:64::/96".parse().unwrap(),
        pool4: vec!["203.0.113.1/32".parse().unwrap()],
        ..Nat64Config::default()
    }
}

fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

/// A TCP header with sequence numbers, window 1000, `len` payload bytes.
fn tcp_seg(sport: u16, dport: u16, flags: u8, seq: u32, ack: u32, len: usize) -> Vec<u8> {
    let mut h = tcp(sport, dport, flags);
    h[4..8].copy_from_slice(&seq.to_be_bytes());
    h[8..12].copy_from_slice(&ack.to_be_bytes());
    h[14..16].copy_from_slice(&1000u16.to_be_bytes());
    h.extend(std::iter::repeat_n(0x62, len));
    h
}

fn v6(src: Ipv6Addr, dst: Ipv6Addr, l4: &[u8]) -> Vec<u8> {
    let mut p = ipv6(TCP, src, dst, 64, l4);
    fill_l4_csum(&mut p);
    p
}

fn v4(src: Ipv4Addr, dst: Ipv4Addr, l4: &[u8]) -> Vec<u8> {
    let mut p = ipv4(TCP, src, dst, 60, l4);
    fill_l4_csum(&mut p);
    p
}

fn run(n: &mut Nat64, now: u64, dir: Direction, pkt: &[u8]) -> Result<Vec<u8>, DropReason> {
    let mut b = with_room(pkt, HEADROOM);
    match n.process(t(now), dir, &mut b, HEADROOM, pkt.len()) {
        Emit::Forward { start, len } => Ok(b[start..start + len].to_vec()),
        e => Err(e.drop_reason().expect("a drop")),
    }
}

/// A v6 client's handshake to SRV4:80 (ISNs 100 and 5000); the public port.
fn handshake(n: &mut Nat64, now: u64) -> u16 {
    let o = run(
        n,
        now,
        Direction::Outbound,
        &v6(HOST, srv6(), &tcp_seg(40000, 80, 0x02, 100, 0, 0)),
    )
    .unwrap();
    let public = ports(&o).0;
    let synack = v4(SRV4, POOL, &tcp_seg(80, public, 0x12, 5000, 101, 0));
    run(n, now, Direction::Inbound, &synack).unwrap();
    let ack = v6(HOST, srv6(), &tcp_seg(40000, 80, 0x10, 101, 5001, 0));
    run(n, now, Direction::Outbound, &ack).unwrap();
    public
}

/// A spoofed SYN at a static binding (NAT64's port forward), answered by the IPv6
/// server's SYN-ACK, lives on tcp_syn_recv (60 s), not the established 7440 s.
#[test]
fn spoofed_syn_at_a_static_binding_lives_on_syn_recv() {
    let mut cfg = config();
    cfg.static_bindings.push(Nat64Static {
        protocol: crate::config::L4Proto::Tcp,
        public: SocketAddrV4::new(POOL, 8080),
        inside: SocketAddrV6::new(HOST, 80, 0, 0),
    });
    let mut n = Nat64::new(cfg).unwrap();
    let spoofer = Ipv4Addr::new(192, 0, 2, 66);
    let embedded: Ipv6Addr = {
        let p: Pref64 = "2001:db8:64::/96".parse().unwrap();
        p.embed(spoofer)
    };
    run(
        &mut n,
        0,
        Direction::Inbound,
        &v4(spoofer, POOL, &tcp_seg(33000, 8080, 0x02, 7, 0, 0)),
    )
    .unwrap();
    let synack = v6(HOST, embedded, &tcp_seg(80, 33000, 0x12, 9000, 8, 0));
    run(&mut n, 0, Direction::Outbound, &synack).unwrap();
    run(&mut n, 5, Direction::Outbound, &synack).unwrap();
    n.handle_timeout(t(5 + 59));
    assert_eq!(n.shared().session_count(), 1);
    n.handle_timeout(t(5 + 61));
    assert_eq!(n.shared().session_count(), 0, "reaped after tcp_syn_recv");
}

/// An off-path RST from the IPv4 side is dropped and counted (the fast path refuses it,
/// the full path counts it) and the session lives on; an in-window one closes it.
#[test]
fn off_path_rst_dropped_in_window_rst_closes() {
    let mut n = Nat64::new(config()).unwrap();
    let p = handshake(&mut n, 0);
    // Data both ways on the fast paths.
    run(
        &mut n,
        1,
        Direction::Inbound,
        &v4(SRV4, POOL, &tcp_seg(80, p, 0x10, 5001, 101, 300)),
    )
    .unwrap();
    run(
        &mut n,
        1,
        Direction::Outbound,
        &v6(HOST, srv6(), &tcp_seg(40000, 80, 0x10, 101, 5301, 50)),
    )
    .unwrap();
    for guess in [1u32, 5301 + 5000, 0x9000_0000] {
        let rst = v4(SRV4, POOL, &tcp_seg(80, p, 0x04, guess, 0, 0));
        assert_eq!(
            run(&mut n, 2, Direction::Inbound, &rst),
            Err(DropReason::TcpRstOutOfWindow)
        );
    }
    let rst6 = v6(HOST, srv6(), &tcp_seg(40000, 80, 0x04, 77_777, 0, 0));
    assert_eq!(
        run(&mut n, 2, Direction::Outbound, &rst6),
        Err(DropReason::TcpRstOutOfWindow)
    );
    assert_eq!(n.counters().dropped(DropReason::TcpRstOutOfWindow), 4);
    n.handle_timeout(t(7000));
    assert_eq!(n.shared().session_count(), 1, "still established");
    let rst = v4(SRV4, POOL, &tcp_seg(80, p, 0x04, 5301, 0, 0));
    let r = run(&mut n, 7001, Direction::Inbound, &rst).unwrap();
    assert_eq!(r[40 + 13] & 0x04, 0x04, "the RST reaches the host");
    n.handle_timeout(t(7001 + 239));
    assert_eq!(
        n.shared().session_count(),
        1,
        "kept tcp_closed (RFC 7857 §2.2)"
    );
    n.handle_timeout(t(7001 + 241));
    assert_eq!(n.shared().session_count(), 0);
}
