//! RFC 8158 events from NAT44 and NAT64: every binding and session made is logged once
//! when made and once when removed, with the endpoints the packets carried; refusals are
//! logged as exhaustion or quota events; nothing is recorded with logging off.

use std::net::Ipv4Addr;
use std::sync::Arc;

use conntrack::Timestamp;

use super::tests::{config, IN_A, IN_B, PUB, SRV};
use super::Nat44;
use crate::events::{Event, EventClass, EventKind, EventLog, EventMask, Quota};
use crate::testpkt::{ipv4, ports, udp, v4_addrs};
use crate::verdict::Direction::*;
use crate::Emit;

fn all() -> EventMask {
    EventClass::ALL
        .into_iter()
        .fold(EventMask::NONE, EventMask::with)
}

fn attach(n: &Nat44, mask: EventMask) -> Arc<EventLog> {
    let log = Arc::new(EventLog::new(mask, 1, 1024));
    assert!(n.shared().attach_events(Arc::clone(&log)));
    log
}

fn drain(log: &EventLog) -> Vec<Event> {
    let mut v = Vec::new();
    for r in log.rings() {
        r.drain(|e| v.push(e));
    }
    v
}

fn send(n: &mut Nat44, s: u64, src: Ipv4Addr, sport: u16) -> Option<(Ipv4Addr, u16)> {
    let mut p = ipv4(17, src, SRV, 64, &udp(sport, 53, b"q"));
    crate::testpkt::fill_l4_csum(&mut p);
    match n.process(Timestamp::from_secs(s), Outbound, &mut p) {
        Emit::Forward { .. } => Some((v4_addrs(&p).0, ports(&p).0)),
        _ => None,
    }
}

#[test]
fn every_binding_and_session_is_logged_when_made_and_when_removed() {
    let mut n = Nat44::new(config()).unwrap();
    let log = attach(&n, all());
    let mut public = Vec::new();
    for (i, host) in [IN_A, IN_B].into_iter().enumerate() {
        for p in 0..5u16 {
            public.push((
                host,
                5000 + p,
                send(&mut n, 1 + i as u64, host, 5000 + p).unwrap(),
            ));
        }
    }
    let made = drain(&log);
    assert_eq!(made.len(), 20, "{made:?}");
    for (host, port, (paddr, pport)) in &public {
        let of = |k: EventKind| {
            made.iter()
                .filter(|e| e.kind == k && e.inside == (*host, *port))
                .collect::<Vec<_>>()
        };
        let (b, s) = (
            of(EventKind::Nat44BibCreate),
            of(EventKind::Nat44SessionCreate),
        );
        assert_eq!((b.len(), s.len()), (1, 1));
        assert_eq!(b[0].public, (*paddr, *pport));
        assert_eq!(b[0].proto, 17);
        assert_eq!(s[0].public, (*paddr, *pport));
        assert_eq!(s[0].remote, (SRV, 53));
        assert!(s[0].time == Timestamp::from_secs(1) || s[0].time == Timestamp::from_secs(2));
    }
    // Sessions expire (UDP: 300 s), then bindings go with their last session.
    n.handle_timeout(Timestamp::from_secs(1000));
    n.handle_timeout(Timestamp::from_secs(1001));
    let gone = drain(&log);
    let count = |k: EventKind| gone.iter().filter(|e| e.kind == k).count();
    assert_eq!(count(EventKind::Nat44SessionDelete), 10, "{gone:?}");
    assert_eq!(count(EventKind::Nat44BibDelete), 10, "{gone:?}");
    for (host, port, pub_ep) in &public {
        assert!(gone.iter().any(|e| e.kind == EventKind::Nat44BibDelete
            && e.inside == (*host, *port)
            && e.public == *pub_ep));
    }
    assert_eq!(log.dropped(), 0);
}

#[test]
fn only_the_classes_asked_for_are_logged() {
    let mut n = Nat44::new(config()).unwrap();
    let log = attach(&n, EventMask::NONE.with(EventClass::Binding));
    send(&mut n, 1, IN_A, 1).unwrap();
    send(&mut n, 1, IN_A, 1).unwrap();
    let ev = drain(&log);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].kind, EventKind::Nat44BibCreate);
    assert_eq!(ev[0].public.0, PUB);
}

#[test]
fn a_subscriber_over_its_port_limit_is_a_quota_exceeded_event() {
    let mut n = Nat44::new(super::config::Nat44Config {
        max_ports_per_host: 3,
        ..config()
    })
    .unwrap();
    let log = attach(&n, EventMask::NONE.with(EventClass::Limits));
    for p in 0..3 {
        send(&mut n, 1, IN_A, 100 + p).unwrap();
    }
    assert!(send(&mut n, 1, IN_A, 200).is_none());
    let ev = drain(&log);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].kind, EventKind::QuotaExceeded);
    assert_eq!(ev[0].quota, Some((Quota::EntriesPerUser, 3)));
    assert_eq!(ev[0].inside, (IN_A, 200));
}

#[test]
fn an_exhausted_single_address_pool_is_a_ports_exhausted_event() {
    let mut cfg = config();
    cfg.rules[0].ports = crate::config::PortRange::new(2000, 2001).unwrap();
    cfg.max_ports_per_host = 0;
    cfg.port_preservation = false;
    let mut n = Nat44::new(cfg).unwrap();
    let log = attach(&n, all());
    send(&mut n, 1, IN_A, 1).unwrap();
    send(&mut n, 1, IN_A, 2).unwrap();
    assert!(send(&mut n, 1, IN_A, 3).is_none());
    let ev = drain(&log);
    let ex: Vec<_> = ev
        .iter()
        .filter(|e| e.kind == EventKind::PortsExhausted)
        .collect();
    assert_eq!(ex.len(), 1, "{ev:?}");
    assert_eq!(ex[0].public.0, PUB);
    // While the pool stays exhausted: once a second, not once a packet.
    for p in 10..20 {
        assert!(send(&mut n, 1, IN_A, p).is_none());
    }
    assert!(drain(&log).is_empty());
    assert!(send(&mut n, 2, IN_A, 30).is_none());
    let again = drain(&log);
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].kind, EventKind::PortsExhausted);
}

#[test]
fn with_no_log_attached_nothing_changes() {
    let mut n = Nat44::new(config()).unwrap();
    assert!(n.shared().events().is_none());
    send(&mut n, 1, IN_A, 1).unwrap();
    // A second attach is refused: workers may already hold the first.
    attach(&n, all());
    assert!(!n
        .shared()
        .attach_events(Arc::new(EventLog::new(all(), 1, 8))));
}

#[test]
fn nat64_events_name_the_ipv6_host() {
    use crate::nat64::{Nat64, Nat64Config};
    use std::net::Ipv6Addr;
    let cfg = Nat64Config {
        pref64: "2001:db8:64::/96".parse().unwrap(),
        pool4: vec!["203.0.113.1/32".parse().unwrap()],
        ..Nat64Config::default()
    };
    let mut n = Nat64::new(cfg).unwrap();
    let log = Arc::new(EventLog::new(all(), 1, 64));
    assert!(n.shared().nat44().attach_events(Arc::clone(&log)));
    let host: Ipv6Addr = "2001:db8::5".parse().unwrap();
    let srv: Ipv6Addr = "2001:db8:64::c633:6402".parse().unwrap();
    let mut p = crate::testpkt::ipv6(17, host, srv, 64, &udp(4444, 53, b"q"));
    crate::testpkt::fill_l4_csum(&mut p);
    let mut b = crate::testpkt::with_room(&p, crate::HEADROOM);
    let len = p.len();
    let e = n.process(
        Timestamp::from_secs(1),
        Outbound,
        &mut b,
        crate::HEADROOM,
        len,
    );
    assert!(matches!(e, Emit::Forward { .. }), "{e:?}");
    let ev = drain(&log);
    let kinds: Vec<_> = ev.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [EventKind::Nat64BibCreate, EventKind::Nat64SessionCreate]
    );
    for e in &ev {
        assert_eq!(e.inside6, Some(host));
        assert_eq!(e.inside.1, 4444);
        assert_eq!(e.public.0, PUB);
    }
    assert_eq!(ev[1].remote, (Ipv4Addr::new(198, 51, 100, 2), 53));
    n.handle_timeout(Timestamp::from_secs(1000));
    n.handle_timeout(Timestamp::from_secs(1001));
    let kinds: Vec<_> = drain(&log).iter().map(|e| e.kind).collect();
    assert!(kinds.contains(&EventKind::Nat64SessionDelete), "{kinds:?}");
    assert!(kinds.contains(&EventKind::Nat64BibDelete), "{kinds:?}");
}
