//! `quicknat sessions clear`: the control thread names the sessions, the reaper's next
//! pass ends them as it ends expired ones (bindings unlinked, ports held back then
//! free), and the rest carry on.

use std::net::IpAddr;
use std::time::Duration;

use conntrack::{Proto, Timestamp};

use super::clear::ClearError;
use super::tests::{config, IN_A, IN_B, SRV};
use super::Nat44;
use crate::introspect::{Introspect, SessionFilter};
use crate::testpkt::{fill_l4_csum, ipv4, udp, UDP};
use crate::verdict::Direction::*;

fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

fn send(n: &mut Nat44, now: u64, src: std::net::Ipv4Addr, sport: u16) {
    let mut p = ipv4(UDP, src, SRV, 64, &udp(sport, 53, b"q"));
    fill_l4_csum(&mut p);
    assert!(n.process(t(now), Outbound, &mut p).is_forward());
}

fn inside(a: std::net::Ipv4Addr) -> SessionFilter {
    SessionFilter {
        inside: Some(IpAddr::V4(a)),
        ..SessionFilter::default()
    }
}

#[test]
fn a_dry_run_counts_and_changes_nothing() {
    let mut n = Nat44::new(config()).unwrap();
    send(&mut n, 1, IN_A, 5000);
    send(&mut n, 1, IN_A, 5001);
    send(&mut n, 1, IN_B, 5000);
    let sh = n.shared().clone();
    assert_eq!(sh.clear_sessions(t(2), &inside(IN_A), true), Ok(2));
    assert_eq!(n.session_count(), 3);
}

#[test]
fn the_reaper_ends_the_named_sessions_and_frees_their_bindings() {
    let mut n = Nat44::new(config()).unwrap();
    send(&mut n, 1, IN_A, 5000);
    send(&mut n, 1, IN_A, 5001);
    send(&mut n, 1, IN_B, 5002);
    let sh = n.shared().clone();
    let mut reaper = sh.reaper();
    let asker = std::thread::spawn(move || sh.clear_sessions(t(2), &inside(IN_A), false));
    // The reaper's passes, until the request has been taken and answered.
    while !asker.is_finished() {
        reaper.handle_timeout(t(2));
        std::thread::yield_now();
    }
    assert_eq!(asker.join().unwrap(), Ok(2));
    assert_eq!(n.session_count(), 1, "B's session carries on");
    assert_eq!(n.binding_count(), 1);
    let taken = n.shared().pool_usage()[0].taken[Proto::Udp.index()];
    // A's flows were never answered: their ports go straight back (an answered one's
    // would wait out port_reuse_hold, as at expiry).
    assert_eq!(taken, 1, "B's port in use, A's back in the pool");
    // B's session still translates; A starts afresh.
    send(&mut n, 3, IN_B, 5002);
    send(&mut n, 3, IN_A, 5000);
    assert_eq!(n.session_count(), 2);
}

#[test]
fn without_a_reaper_the_request_says_so() {
    let mut n = Nat44::new(config()).unwrap();
    send(&mut n, 1, IN_A, 5000);
    let got = n.shared().end_sessions(
        t(2),
        &inside(IN_A),
        &super::census::Plain,
        false,
        Duration::from_millis(50),
    );
    assert_eq!(got, Err(ClearError::NoReaper(Duration::from_millis(50))));
    assert_eq!(n.session_count(), 1);
}
