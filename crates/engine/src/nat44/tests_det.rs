//! Deterministic NAT (RFC 7422) in the engine: a subscriber's flows leave from its own
//! computed address and range, at the port the documented rule gives (so the config
//! alone reconstructs what the engine assigned, and two nodes agree); a full range is a
//! `subscriber_limit` drop for that subscriber only; replies, filtering, hairpins and
//! mid-stream TCP pick-up work as for dynamic rules; no binding events; restart-only.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

use conntrack::{Proto, Timestamp};
use proptest::prelude::*;

use super::config::{DynamicRule, Nat44Config};
use super::deterministic::{DetMap, DetRange, Deterministic};
use super::Nat44;
use crate::config::{ConfigItem, PortRange};
use crate::events::{EventClass, EventKind, EventLog, EventMask};
use crate::testpkt::{echo, fill_l4_csum, ipv4, ports, sctp, tcp, udp, v4_addrs, TCP, UDP};
use crate::verdict::{Direction::*, DropReason};
use crate::Emit;

const SRV: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);

fn t(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

fn det(inside: &str, outside: &str, pps: Option<u32>) -> Deterministic {
    Deterministic {
        inside: inside.parse().unwrap(),
        outside: outside.parse().unwrap(),
        ports_per_subscriber: pps,
    }
}

fn cfg(d: Deterministic) -> Nat44Config {
    Nat44Config {
        deterministic: Some(d),
        ..Nat44Config::default()
    }
}

/// A worked example: 100.64.0.0/22 behind 203.0.113.0/28, R = 64, 1008 ports each.
fn example() -> Deterministic {
    det("100.64.0.0/22", "203.0.113.0/28", None)
}

fn packet(proto: Proto, src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16) -> Vec<u8> {
    let mut p = match proto {
        Proto::Udp => ipv4(UDP, src, dst, 64, &udp(sport, dport, b"q")),
        // An ACK: mid-stream as far as the NAT knows (picked up like a SYN's flow).
        Proto::Tcp => ipv4(TCP, src, dst, 64, &tcp(sport, dport, 0x10)),
        Proto::Icmp => ipv4(1, src, dst, 64, &echo(8, sport, 1)),
        // GRE: address only.
        Proto::Other => ipv4(47, src, dst, 64, &[0, 0, 0x08, 0]),
        // Its CRC32c filled already.
        Proto::Sctp => return ipv4(132, src, dst, 64, &sctp(sport, dport, 1, &[])),
    };
    fill_l4_csum(&mut p);
    p
}

/// Sends the answer to a UDP packet that left from public endpoint `to`.
fn answer(n: &mut Nat44, now: u64, to: (Ipv4Addr, u16)) {
    let mut p = packet(Proto::Udp, SRV, 53, to.0, to.1);
    assert!(matches!(
        n.process(t(now), Inbound, &mut p),
        Emit::Forward { .. }
    ));
}

/// Sends one packet out; the public endpoint it left from, or the drop reason.
fn out(
    n: &mut Nat44,
    now: u64,
    proto: Proto,
    src: Ipv4Addr,
    sport: u16,
) -> Result<(Ipv4Addr, u16), DropReason> {
    let mut p = packet(proto, src, sport, SRV, 53);
    match n.process(t(now), Outbound, &mut p) {
        Emit::Forward { .. } => Ok((v4_addrs(&p).0, ports(&p).0)),
        e => Err(e.drop_reason().unwrap()),
    }
}

/// The oracle: what the README says the engine picks, from the configuration alone and
/// the ports already in use: `first + (inside_port mod pps)`, then upward, wrapping
/// inside the range.
#[derive(Default)]
struct Oracle {
    taken: HashSet<(Proto, Ipv4Addr, u16)>,
    bound: HashMap<(Proto, Ipv4Addr, u16), (Ipv4Addr, u16)>,
}

impl Oracle {
    fn pick(
        &mut self,
        m: &DetMap,
        proto: Proto,
        inside: Ipv4Addr,
        port: u16,
    ) -> Option<(Ipv4Addr, u16)> {
        if let Some(b) = self.bound.get(&(proto, inside, port)) {
            return Some(*b);
        }
        let r: DetRange = m.forward(inside)?;
        let start = m.first_choice(&r, port);
        let len = u32::from(r.len);
        let off = u32::from(start - r.first);
        let p = (0..len)
            .map(|k| (u32::from(r.first) + (off + k) % len) as u16)
            .find(|p| !self.taken.contains(&(proto, r.public, *p)))?;
        self.taken.insert((proto, r.public, p));
        self.bound.insert((proto, inside, port), (r.public, p));
        Some((r.public, p))
    }
}

fn proto_of(i: u8) -> Proto {
    match i % 3 {
        0 => Proto::Udp,
        1 => Proto::Tcp,
        _ => Proto::Icmp,
    }
}

#[test]
fn a_subscriber_leaves_from_its_range_at_the_documented_port_and_replies_return() {
    let mut n = Nat44::new(cfg(example())).unwrap();
    let m = *n.shared().deterministic().unwrap();
    let a = Ipv4Addr::new(100, 64, 0, 65);
    let r = m.forward(a).unwrap();
    assert_eq!((r.public, r.first), (Ipv4Addr::new(203, 0, 113, 1), 2032));
    // Port 40000: 40000 mod 1008 = 688, so 2032 + 688.
    let got = out(&mut n, 1, Proto::Udp, a, 40000).unwrap();
    assert_eq!(got, (r.public, 2032 + 688));
    // A second flow whose first choice is taken goes to the next port up.
    let got2 = out(&mut n, 1, Proto::Udp, a, 40000 + 1008).unwrap();
    assert_eq!(got2, (r.public, 2032 + 689));
    // The same inside endpoint keeps its mapping (endpoint-independent).
    assert_eq!(out(&mut n, 2, Proto::Udp, a, 40000).unwrap(), got);
    // The reply reaches the subscriber.
    let mut reply = packet(Proto::Udp, SRV, 53, got.0, got.1);
    assert_eq!(n.process(t(2), Inbound, &mut reply).drop_reason(), None);
    assert_eq!((v4_addrs(&reply).1, ports(&reply).1), (a, 40000));
    // Unsolicited to a det endpoint with no binding: no mapping, as for dynamic NAT.
    let mut stray = packet(Proto::Udp, SRV, 53, r.public, 3000);
    assert_eq!(
        n.process(t(2), Inbound, &mut stray).drop_reason(),
        Some(DropReason::NoMapping)
    );
    // Outside the prefix: no rule.
    assert_eq!(
        out(&mut n, 2, Proto::Udp, Ipv4Addr::new(100, 64, 4, 1), 1),
        Err(DropReason::NoRule)
    );
    assert!(n.is_inside(a) && n.is_public(Ipv4Addr::new(203, 0, 113, 15)));
    assert!(!n.is_public(Ipv4Addr::new(203, 0, 113, 16)));
}

/// A full range is a `subscriber_limit` drop, counted; the subscriber beside it on the
/// same public address, and the same subscriber in another protocol, are unaffected; a
/// port comes back after the reuse hold.
#[test]
fn a_full_range_is_a_subscriber_limit_drop_for_that_subscriber_only() {
    let mut c = cfg(det("100.64.0.0/30", "203.0.113.7/32", Some(4)));
    c.port_reuse_hold = std::time::Duration::from_secs(10);
    let mut n = Nat44::new(c).unwrap();
    let (a, b) = (Ipv4Addr::new(100, 64, 0, 0), Ipv4Addr::new(100, 64, 0, 1));
    let mut got = HashSet::new();
    for p in 0..4 {
        let (addr, port) = out(&mut n, 1, Proto::Udp, a, 5000 + p).unwrap();
        assert_eq!(addr, Ipv4Addr::new(203, 0, 113, 7));
        assert!((1024..1028).contains(&port), "{port}");
        // Answered, so the port waits out the hold when the flow ends.
        answer(&mut n, 1, (addr, port));
        got.insert(port);
    }
    assert_eq!(got.len(), 4);
    assert_eq!(
        out(&mut n, 1, Proto::Udp, a, 6000),
        Err(DropReason::SubscriberLimit)
    );
    assert_eq!(
        out(&mut n, 1, Proto::Udp, a, 6001),
        Err(DropReason::SubscriberLimit)
    );
    assert_eq!(n.counters().dropped(DropReason::SubscriberLimit), 2);
    let (_, pb) = out(&mut n, 1, Proto::Udp, b, 6000).unwrap();
    assert!((1028..1032).contains(&pb));
    assert!(out(&mut n, 1, Proto::Icmp, a, 77).is_ok());
    // The flows expire (UDP 300 s), the ports are held 10 s, then free again.
    n.handle_timeout(t(400));
    assert_eq!(
        out(&mut n, 401, Proto::Udp, a, 6000),
        Err(DropReason::SubscriberLimit)
    );
    n.handle_timeout(t(411));
    let sport = 6001;
    let (_, p) = out(&mut n, 412, Proto::Udp, a, sport).unwrap();
    assert_eq!(p, 1024 + sport % 4);
    // Counters never drift: every port counted was given back.
    n.handle_timeout(t(2000));
    assert_eq!(
        n.shared()
            .host_count_total(conntrack::Counted::Ports(Proto::Udp)),
        0
    );
}

/// The range is the per-subscriber port limit, whatever `max_ports_per_host` says.
#[test]
fn max_ports_per_host_does_not_cut_a_range() {
    let mut c = cfg(det("100.64.0.0/30", "203.0.113.7/32", Some(20)));
    c.max_ports_per_host = 5;
    let mut n = Nat44::new(c).unwrap();
    for p in 0..20 {
        out(&mut n, 1, Proto::Udp, Ipv4Addr::new(100, 64, 0, 2), 100 + p).unwrap();
    }
    assert_eq!(
        out(&mut n, 1, Proto::Udp, Ipv4Addr::new(100, 64, 0, 2), 1),
        Err(DropReason::SubscriberLimit)
    );
}

/// Mid-stream TCP pick-up (what a node taking over relies on): node A saw the SYN, node
/// B sees only later segments of the same connection and gives them the same public
/// endpoint.
#[test]
fn a_second_node_picks_up_mid_stream_tcp_on_the_same_public_endpoint() {
    let mut a = Nat44::new(cfg(example())).unwrap();
    let mut b = Nat44::new(cfg(example())).unwrap();
    let host = Ipv4Addr::new(100, 64, 2, 9);
    let mut syn = ipv4(TCP, host, SRV, 64, &tcp(51000, 443, 0x02));
    fill_l4_csum(&mut syn);
    assert_eq!(a.process(t(1), Outbound, &mut syn).drop_reason(), None);
    let on_a = (v4_addrs(&syn).0, ports(&syn).0);
    let mut ack = ipv4(TCP, host, SRV, 64, &tcp(51000, 443, 0x10));
    fill_l4_csum(&mut ack);
    assert_eq!(b.process(t(50), Outbound, &mut ack).drop_reason(), None);
    assert_eq!((v4_addrs(&ack).0, ports(&ack).0), on_a);
    // The server's answer through B reaches the host.
    let mut back = ipv4(TCP, SRV, on_a.0, 64, &tcp(443, on_a.1, 0x10));
    fill_l4_csum(&mut back);
    assert_eq!(b.process(t(50), Inbound, &mut back).drop_reason(), None);
    assert_eq!((v4_addrs(&back).1, ports(&back).1), (host, 51000));
}

/// Two deterministic subscribers reach each other through their public endpoints.
#[test]
fn hairpin_between_deterministic_subscribers() {
    let mut n = Nat44::new(cfg(example())).unwrap();
    let (a, b) = (Ipv4Addr::new(100, 64, 0, 1), Ipv4Addr::new(100, 64, 1, 1));
    let (pa, pb) = (
        out(&mut n, 1, Proto::Udp, a, 7000).unwrap(),
        out(&mut n, 1, Proto::Udp, b, 7000).unwrap(),
    );
    let mut p = packet(Proto::Udp, a, 7000, pb.0, pb.1);
    assert_eq!(n.process(t(2), Outbound, &mut p).drop_reason(), None);
    assert_eq!((v4_addrs(&p), ports(&p)), ((pa.0, b), (pa.1, 7000)));
}

/// Dynamic rules for other prefixes work beside it; with binding events on, the
/// deterministic bindings send none and the dynamic ones do.
#[test]
fn dynamic_rules_beside_it_and_no_binding_events_for_it() {
    let mut c = cfg(example());
    c.rules.push(DynamicRule {
        inside: "10.0.0.0/24".parse().unwrap(),
        pool: vec!["192.0.2.1/32".parse().unwrap()],
        ports: PortRange::default(),
    });
    let mut n = Nat44::new(c).unwrap();
    let log = Arc::new(EventLog::new(
        EventMask::NONE.with(EventClass::Binding),
        1,
        64,
    ));
    assert!(n.shared().attach_events(Arc::clone(&log)));
    let d = out(&mut n, 1, Proto::Udp, Ipv4Addr::new(100, 64, 0, 3), 9).unwrap();
    assert_eq!(d.0, Ipv4Addr::new(203, 0, 113, 0));
    let x = out(&mut n, 1, Proto::Udp, Ipv4Addr::new(10, 0, 0, 3), 9).unwrap();
    assert_eq!(x.0, Ipv4Addr::new(192, 0, 2, 1));
    n.handle_timeout(t(1000));
    n.handle_timeout(t(2000));
    let mut kinds = Vec::new();
    for r in log.rings() {
        r.drain(|e| kinds.push((e.kind, e.public.0)));
    }
    let dynamic = Ipv4Addr::new(192, 0, 2, 1);
    assert_eq!(
        kinds,
        vec![
            (EventKind::Nat44BibCreate, dynamic),
            (EventKind::Nat44BibDelete, dynamic)
        ]
    );
}

#[test]
fn overlaps_are_refused_naming_the_field() {
    let with_rule = |inside: &str, pool: &str| {
        let mut c = cfg(example());
        c.rules.push(DynamicRule {
            inside: inside.parse().unwrap(),
            pool: vec![pool.parse().unwrap()],
            ports: PortRange::default(),
        });
        c.validate().unwrap_err()
    };
    let e = with_rule("100.64.0.0/24", "192.0.2.1/32");
    assert_eq!(e.item, ConfigItem::Table("deterministic", "inside"));
    let e = with_rule("10.0.0.0/24", "203.0.113.8/29");
    assert_eq!(e.item, ConfigItem::Table("deterministic", "outside"));
    let mut c = cfg(example());
    c.static_nat.push(super::StaticNat {
        inside: "10.1.1.1".parse().unwrap(),
        public: "203.0.113.3".parse().unwrap(),
    });
    assert_eq!(
        c.validate().unwrap_err().item,
        ConfigItem::Entry("static", 0, "public")
    );
    let mut c = cfg(example());
    c.port_forwards.push(super::PortForward {
        protocol: crate::config::L4Proto::Tcp,
        public: "203.0.113.3:80".parse().unwrap(),
        inside: "10.1.1.1:80".parse().unwrap(),
    });
    assert_eq!(
        c.validate().unwrap_err().item,
        ConfigItem::Entry("forward", 0, "public")
    );
    // Deterministic NAT alone is a whole configuration.
    assert!(cfg(example()).validate().is_ok());
    let e = cfg(det("100.64.0.0/22", "203.0.113.0/28", Some(2000)))
        .validate()
        .unwrap_err();
    assert_eq!(
        e.item,
        ConfigItem::Table("deterministic", "ports_per_subscriber")
    );
}

/// Reload: the deterministic settings are restart-only; other changes (a rule added)
/// keep the deterministic subscribers where they were.
#[test]
fn reload_refuses_a_change_and_keeps_the_mapping_otherwise() {
    let mut n = Nat44::new(cfg(example())).unwrap();
    let a = Ipv4Addr::new(100, 64, 0, 200);
    let before = out(&mut n, 1, Proto::Udp, a, 1234).unwrap();
    let e = n
        .shared()
        .reload(cfg(det("100.64.0.0/22", "203.0.113.0/28", Some(500))))
        .unwrap_err();
    assert_eq!(e.item, ConfigItem::Field("deterministic"));
    assert!(e.message.contains("restart"), "{e}");
    let mut c = cfg(example());
    c.rules.push(DynamicRule {
        inside: "10.0.0.0/24".parse().unwrap(),
        pool: vec!["192.0.2.1/32".parse().unwrap()],
        ports: PortRange::default(),
    });
    n.shared().reload(c).unwrap();
    assert_eq!(out(&mut n, 2, Proto::Udp, a, 1234).unwrap(), before);
    // A new flow after the reload: its documented port (taken ports are the pool's own).
    let r = n
        .shared()
        .current()
        .deterministic()
        .unwrap()
        .forward(a)
        .unwrap();
    assert_eq!(
        out(&mut n, 2, Proto::Udp, a, 1235).unwrap(),
        (r.public, r.first + 1235 % 1008)
    );
    assert_eq!(
        out(&mut n, 2, Proto::Udp, Ipv4Addr::new(10, 0, 0, 1), 5)
            .unwrap()
            .0,
        Ipv4Addr::new(192, 0, 2, 1)
    );
}

/// A flow's public endpoint, or why it was refused.
type Outcome = Result<(Ipv4Addr, u16), DropReason>;

/// Two workers of one engine opening flows for the same subscribers at once, a core kept
/// busy beside them: no public endpoint is handed out twice, each lies in its
/// subscriber's range, and a full range refuses (`subscriber_limit`) rather than spill.
#[test]
fn two_workers_never_share_a_port_and_stay_in_range() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let d = det("100.64.0.0/22", "203.0.113.0/30", Some(40)); // R = 256, 40 ports each
    let shared = super::Nat44Shared::new(cfg(d), 2).unwrap();
    let m = *shared.deterministic().unwrap();
    let stop = AtomicBool::new(false);
    let hosts: Vec<Ipv4Addr> = (0..4).map(|i| m.inside().nth(i * 300)).collect();
    let results: Vec<Vec<(Ipv4Addr, Outcome)>> = std::thread::scope(|s| {
        let busy = s.spawn(|| {
            let mut x = 1u64;
            while !stop.load(Ordering::Relaxed) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            x
        });
        let hs: Vec<_> = (0..2u16)
            .map(|id| {
                let (shared, hosts) = (&shared, &hosts);
                s.spawn(move || {
                    let mut w = shared.worker(usize::from(id));
                    let mut got = Vec::new();
                    // 30 flows per host per worker: 60 asked of a 40-port range.
                    for k in 0..30u16 {
                        for &h in hosts {
                            let mut p = packet(Proto::Udp, h, 1000 + id * 100 + k, SRV, 53);
                            let e = match w.process_packet(t(1), Outbound, &mut p) {
                                Emit::Forward { .. } => Ok((v4_addrs(&p).0, ports(&p).0)),
                                e => Err(e.drop_reason().unwrap()),
                            };
                            got.push((h, e));
                        }
                        w.quiescent();
                    }
                    got
                })
            })
            .collect();
        let r = hs.into_iter().map(|h| h.join().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        busy.join().unwrap();
        r
    });
    let mut seen = HashSet::new();
    let mut per_host: HashMap<Ipv4Addr, usize> = HashMap::new();
    for (h, e) in results.into_iter().flatten() {
        match e {
            Ok(ep) => {
                let r = m.forward(h).unwrap();
                assert!(
                    ep.0 == r.public && r.contains(ep.1),
                    "{h} got {ep:?}, range {r:?}"
                );
                assert!(seen.insert(ep), "{ep:?} handed out twice");
                *per_host.entry(h).or_default() += 1;
            }
            Err(r) => assert_eq!(r, DropReason::SubscriberLimit),
        }
    }
    // Every host got exactly its 40 ports, the other 20 flows refused.
    assert_eq!(per_host.len(), 4);
    assert!(per_host.values().all(|&n| n == 40), "{per_host:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Reconstruction from the configuration alone equals what the engine assigned, for
    /// any sequence of flows (collisions included: few ports per subscriber); two engines
    /// given the same flows choose the same endpoints; every endpoint lies in its
    /// subscriber's range.
    #[test]
    fn the_config_alone_reconstructs_every_assignment_and_two_nodes_agree(
        shape in 0usize..3,
        flows in proptest::collection::vec((any::<u16>(), any::<u16>(), any::<u8>()), 1..300),
    ) {
        let d = [
            det("100.64.0.0/28", "203.0.113.0/28", Some(16)),  // R = 1
            det("100.64.0.0/22", "203.0.113.0/30", Some(8)),   // R = 256
            det("100.64.0.0/20", "203.0.113.0/30", None),      // R = 1024, 63 ports
        ][shape];
        let mut a = Nat44::new(cfg(d)).unwrap();
        let mut b = Nat44::new(cfg(d)).unwrap();
        let m = DetMap::new(&d).unwrap();
        let mut oracle = Oracle::default();
        let hosts = m.inside().size();
        for (h, port, pr) in flows {
            // Few hosts, so that ranges fill and the probing is exercised.
            let host = m.inside().nth(u64::from(h) % hosts.min(6));
            let proto = proto_of(pr);
            let port = if proto == Proto::Icmp { port } else { port.max(1) };
            let ea = out(&mut a, 1, proto, host, port);
            let eb = out(&mut b, 1, proto, host, port);
            prop_assert_eq!(ea, eb);
            match oracle.pick(&m, proto, host, port) {
                Some(e) => {
                    prop_assert_eq!(ea, Ok(e));
                    let r = m.forward(host).unwrap();
                    prop_assert!(e.0 == r.public && r.contains(e.1));
                    prop_assert_eq!(m.reverse(e.0, e.1), Some(host));
                }
                None => prop_assert_eq!(ea, Err(DropReason::SubscriberLimit)),
            }
        }
    }
}
