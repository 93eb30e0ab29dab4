//! NAT64's live reload: pool4 and timeouts change under a running session, which
//! survives; translator settings are refused and stay.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use super::*;
use crate::testpkt::*;
use crate::HEADROOM;

const HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x10);

/// One UDP datagram from HOST:sport to 198.51.100.7 at `now`: the IPv4 source it left
/// with, or the drop.
fn send(n: &mut Nat64, now: u64, sport: u16) -> Result<Ipv4Addr, DropReason> {
    let dst: Ipv6Addr = "2001:db8:64::c633:6407".parse().unwrap();
    let mut p = ipv6(UDP, HOST, dst, 64, &udp(sport, 53, b"q"));
    fill_l4_csum(&mut p);
    let len = p.len();
    let mut b = with_room(&p, HEADROOM);
    match n.process(
        Timestamp::from_secs(now),
        Direction::Outbound,
        &mut b,
        HEADROOM,
        len,
    ) {
        Emit::Forward { start, .. } => Ok(Ipv4Addr::new(
            b[start + 12],
            b[start + 13],
            b[start + 14],
            b[start + 15],
        )),
        e => Err(e.drop_reason().unwrap_or(DropReason::NoRule)),
    }
}

fn config(pool4: &[&str], udp: u64) -> Nat64Config {
    let mut c = Nat64Config {
        pref64: "2001:db8:64::/96".parse().unwrap(),
        pool4: pool4.iter().map(|p| p.parse().unwrap()).collect(),
        ..Nat64Config::default()
    };
    c.timeouts.udp = Duration::from_secs(udp);
    c
}

#[test]
fn a_session_survives_a_pool4_and_timeout_reload_and_the_timeout_applies() {
    let start = config(&["203.0.113.1/32"], 300);
    let mut n = Nat64::new(start.clone()).unwrap();
    let public = send(&mut n, 1, 4000).unwrap();
    let next = config(&["203.0.113.1/32", "198.51.100.0/30"], 60);
    let report = n.shared().reload(&start, &next).unwrap().to_string();
    assert!(report.contains("pool4 + 198.51.100.0/30"), "{report}");
    assert!(report.contains("udp 300 s → 60 s"), "{report}");
    assert_eq!(
        send(&mut n, 2, 4000),
        Ok(public),
        "same session, same address"
    );
    assert_eq!(n.shared().session_count(), 1);
    n.handle_timeout(Timestamp::from_secs(63));
    assert_eq!(
        n.shared().session_count(),
        0,
        "udp 60 s applies to the existing session"
    );
}

#[test]
fn translator_changes_are_refused_and_the_policy_stays() {
    let start = config(&["203.0.113.1/32"], 300);
    let n = Nat64::new(start.clone()).unwrap();
    let mut next = config(&["198.51.100.0/30"], 300);
    next.pref64 = "64:ff9b::/96".parse().unwrap();
    let e = n.shared().reload(&start, &next).unwrap_err().to_string();
    assert!(e.contains("pref64") && e.contains("restart"), "{e}");
    let mut n = n;
    assert_eq!(send(&mut n, 1, 4000), Ok(Ipv4Addr::new(203, 0, 113, 1)));
}
