//! The introspection walks against real traffic through the engine: exact endpoints, TCP
//! state, timers, filters, bindings, pool usage, census; NAT64's IPv6 view; and a lister
//! running beside a worker that creates and expires sessions as fast as it can.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use conntrack::tcp::ConnState;
use conntrack::{Proto, Timestamp};

use super::*;
use crate::any::AnyMode;
use crate::config::PortRange;
use crate::nat44::{DynamicRule, Nat44, Nat44Config, Nat44Shared};
use crate::nat64::{Nat64, Nat64Config};
use crate::testpkt::{echo, fill_l4_csum, ipv4, ipv6, tcp_segment, udp, with_room, ICMP, UDP};
use crate::{Direction, Emit, HEADROOM};

const SERVER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
const SYN: u8 = 0x02;
const ACK: u8 = 0x10;

fn nat44_cfg() -> Nat44Config {
    Nat44Config {
        rules: vec![DynamicRule {
            inside: "10.0.0.0/24".parse().unwrap(),
            pool: vec!["203.0.113.0/30".parse().unwrap()],
            ports: PortRange::new(1024, 65535).unwrap(),
        }],
        ..Nat44Config::default()
    }
}

fn udp4(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16) -> Vec<u8> {
    let mut p = ipv4(UDP, src, dst, 64, &udp(sport, dport, b"hi"));
    fill_l4_csum(&mut p);
    p
}

fn src_of(p: &[u8]) -> SocketAddr {
    SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(p[12], p[13], p[14], p[15])),
        u16::from_be_bytes([p[20], p[21]]),
    )
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn list(m: &AnyMode, now: Timestamp, f: SessionFilter) -> Vec<SessionInfo> {
    let mut v = Vec::new();
    let n = m.sessions(now, &f, &mut |s| {
        v.push(*s);
        true
    });
    assert_eq!(n, v.len());
    v.sort_by_key(|s| (s.proto, s.inside));
    v
}

/// Three UDP flows from two hosts and one TCP connection through its handshake, then
/// every answer checked against what was sent.
#[test]
fn nat44_sessions_bindings_pool_and_census_match_the_traffic() {
    let mut nat = Nat44::new(nat44_cfg()).unwrap();
    let t0 = Timestamp::from_secs(100);
    let h2 = Ipv4Addr::new(10, 0, 0, 2);
    let h3 = Ipv4Addr::new(10, 0, 0, 3);
    let mut public = Vec::new();
    for (h, port) in [(h2, 40001), (h2, 40002), (h3, 40003)] {
        let mut p = udp4(h, port, SERVER, 7);
        assert_eq!(
            nat.process(t0, Direction::Outbound, &mut p).drop_reason(),
            None
        );
        public.push(src_of(&p));
    }
    // TCP: SYN out, SYN-ACK in, ACK out: established.
    let mut syn = tcp_segment(h3, 5555, SERVER, 80, SYN, 1000, 0, 0);
    assert_eq!(
        nat.process(t0, Direction::Outbound, &mut syn).drop_reason(),
        None
    );
    let tpub = src_of(&syn);
    let IpAddr::V4(tpub_ip) = tpub.ip() else {
        unreachable!()
    };
    let mut synack = tcp_segment(SERVER, 80, tpub_ip, tpub.port(), SYN | ACK, 5000, 1001, 0);
    assert_eq!(
        nat.process(t0, Direction::Inbound, &mut synack)
            .drop_reason(),
        None
    );
    let mut ack = tcp_segment(h3, 5555, SERVER, 80, ACK, 1001, 5001, 0);
    assert_eq!(
        nat.process(t0, Direction::Outbound, &mut ack).drop_reason(),
        None
    );

    let m = AnyMode::Nat44(Arc::clone(nat.shared()));
    let now = t0 + Duration::from_secs(10);
    let all = list(&m, now, SessionFilter::default());
    assert_eq!(all.len(), 4, "{all:?}");
    let tcp = &all[0];
    assert_eq!(
        (tcp.proto, tcp.inside, tcp.public, tcp.remote, tcp.tcp),
        (
            Proto::Tcp,
            sa("10.0.0.3:5555"),
            tpub,
            sa("198.51.100.7:80"),
            Some(ConnState::Established)
        )
    );
    assert!(tcp.from_inside);
    assert_eq!(tcp.idle, Duration::from_secs(10));
    assert_eq!(tcp.age, Duration::from_secs(10), "created at t0, 10 s ago");
    let established = nat.config().timeouts.tcp_established;
    assert_eq!(tcp.expires_in, established - Duration::from_secs(10));
    let udps: Vec<_> = all[1..]
        .iter()
        .map(|s| (s.proto, s.inside, s.public, s.remote, s.tcp))
        .collect();
    assert_eq!(
        udps,
        vec![
            (
                Proto::Udp,
                sa("10.0.0.2:40001"),
                public[0],
                sa("198.51.100.7:7"),
                None
            ),
            (
                Proto::Udp,
                sa("10.0.0.2:40002"),
                public[1],
                sa("198.51.100.7:7"),
                None
            ),
            (
                Proto::Udp,
                sa("10.0.0.3:40003"),
                public[2],
                sa("198.51.100.7:7"),
                None
            ),
        ]
    );
    assert_eq!(all[1].remote_inside, all[1].remote);
    let udp_t = nat.config().timeouts.udp;
    assert_eq!(all[1].expires_in, udp_t - Duration::from_secs(10));

    // Filters narrow, and every field combines.
    let only = |f: SessionFilter| {
        list(&m, now, f)
            .iter()
            .map(|s| s.inside)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        only(SessionFilter {
            proto: Some(Proto::Tcp),
            ..Default::default()
        }),
        vec![sa("10.0.0.3:5555")]
    );
    assert_eq!(
        only(SessionFilter {
            inside: Some(h2.into()),
            ..Default::default()
        }),
        vec![sa("10.0.0.2:40001"), sa("10.0.0.2:40002")]
    );
    assert_eq!(
        only(SessionFilter {
            inside: Some(h2.into()),
            inside_port: Some(40002),
            ..Default::default()
        }),
        vec![sa("10.0.0.2:40002")]
    );
    assert_eq!(
        only(SessionFilter {
            public: Some(public[2].ip()),
            public_port: Some(public[2].port()),
            ..Default::default()
        }),
        vec![sa("10.0.0.3:40003")]
    );
    assert_eq!(
        only(SessionFilter {
            remote_port: Some(80),
            ..Default::default()
        }),
        vec![sa("10.0.0.3:5555")]
    );
    assert_eq!(
        only(SessionFilter {
            remote: Some(SERVER.into()),
            ..Default::default()
        })
        .len(),
        4
    );
    assert!(only(SessionFilter {
        remote: Some(Ipv4Addr::new(1, 1, 1, 1).into()),
        ..Default::default()
    })
    .is_empty());
    assert!(only(SessionFilter {
        proto: Some(Proto::Icmp),
        ..Default::default()
    })
    .is_empty());
    // A visitor that says stop gets no more.
    let mut seen = 0;
    m.sessions(now, &SessionFilter::default(), &mut |_| {
        seen += 1;
        false
    });
    assert_eq!(seen, 1);

    // Bindings: one per inside endpoint, each with its session.
    let mut b = Vec::new();
    m.bindings(&mut |x| {
        b.push((x.proto, x.inside, x.public, x.sessions, x.is_static));
        true
    });
    b.sort();
    assert_eq!(
        b,
        vec![
            (Proto::Tcp, sa("10.0.0.3:5555"), tpub, 1, false),
            (Proto::Udp, sa("10.0.0.2:40001"), public[0], 1, false),
            (Proto::Udp, sa("10.0.0.2:40002"), public[1], 1, false),
            (Proto::Udp, sa("10.0.0.3:40003"), public[2], 1, false),
        ]
    );

    // Pool: the /30's four addresses listed; ports taken where the bindings are.
    let pool = m.pool_usage();
    assert_eq!(pool.len(), 4);
    let total = |f: &dyn Fn(&PoolAddrUsage) -> u32| pool.iter().map(f).sum::<u32>();
    assert_eq!(total(&|u| u.taken[Proto::Udp.index()]), 3);
    assert_eq!(total(&|u| u.taken[Proto::Tcp.index()]), 1);
    assert_eq!(total(&|u| u.bindings), 4);
    // Paired pooling: each host on one address; two hosts, two subscribers in all.
    assert_eq!(total(&|u| u.subscribers), 2);
    assert!(pool.iter().all(|u| u.ports_per_proto == 65535 - 1024 + 1));
    let h2_addr = public[0].ip();
    let u = pool.iter().find(|u| IpAddr::V4(u.addr) == h2_addr).unwrap();
    assert_eq!((u.taken[Proto::Udp.index()], u.subscribers), (2, 1));

    // Census.
    let c = m.census();
    assert_eq!((c.live, c.dead_pending, c.bindings), (4, 0, 4));
    assert_eq!(c.by_proto, [1, 3, 0, 0, 0]);
    assert_eq!(c.tcp[ConnState::Established as usize], 1);
    assert_eq!(c.tcp.iter().sum::<u64>(), 1);
    assert_eq!(c.capacity as usize, nat.config().max_sessions);

    // Expired sessions leave the listing once the reaper ran.
    nat.handle_timeout(t0 + udp_t + Duration::from_secs(1));
    let left = list(
        &m,
        t0 + udp_t + Duration::from_secs(1),
        SessionFilter::default(),
    );
    assert_eq!(
        left.iter().map(|s| s.proto).collect::<Vec<_>>(),
        vec![Proto::Tcp]
    );
}

/// NAT64: the inside is the IPv6 host, the remote shown both ways; SIIT has nothing.
#[test]
fn nat64_shows_the_ipv6_hosts_and_siit_has_no_state() {
    let pref: xlat::rfc6052::Pref64 = "2001:db8:64::/96".parse().unwrap();
    let mut n = Nat64::new(Nat64Config {
        pref64: pref,
        pool4: vec!["203.0.113.1/32".parse().unwrap()],
        ..Nat64Config::default()
    })
    .unwrap();
    let host: Ipv6Addr = "2001:db8:1::5".parse().unwrap();
    let mut u = udp(3333, 53, b"q");
    let mut p = ipv6(UDP, host, pref.embed(SERVER), 64, &u);
    fill_l4_csum(&mut p);
    let mut b = with_room(&p, HEADROOM);
    let t0 = Timestamp::from_secs(5);
    let Emit::Forward { start, .. } = n.process(t0, Direction::Outbound, &mut b, HEADROOM, p.len())
    else {
        panic!("not forwarded")
    };
    let public = src_of(&b[start..]);
    // An ICMP echo too.
    u = echo(128, 77, 1);
    let mut p = ipv6(58, host, pref.embed(SERVER), 64, &u);
    fill_l4_csum(&mut p);
    let mut b = with_room(&p, HEADROOM);
    assert_eq!(
        n.process(t0, Direction::Outbound, &mut b, HEADROOM, p.len())
            .drop_reason(),
        None
    );

    let m = AnyMode::Nat64(Arc::clone(n.shared()));
    let all = list(&m, t0, SessionFilter::default());
    assert_eq!(all.len(), 2, "{all:?}");
    let s = all.iter().find(|s| s.proto == Proto::Udp).unwrap();
    assert_eq!(s.inside, SocketAddr::new(host.into(), 3333));
    assert_eq!(s.public, public);
    assert_eq!(s.remote, sa("198.51.100.7:53"));
    assert_eq!(
        s.remote_inside,
        SocketAddr::new(pref.embed(SERVER).into(), 53)
    );
    let i = all.iter().find(|s| s.proto == Proto::Icmp).unwrap();
    assert_eq!(i.inside, SocketAddr::new(host.into(), 77));
    // Filters take the IPv6 host and either form of the remote.
    let f = SessionFilter {
        inside: Some(host.into()),
        proto: Some(Proto::Udp),
        ..Default::default()
    };
    assert_eq!(list(&m, t0, f).len(), 1);
    let f = SessionFilter {
        remote: Some(pref.embed(SERVER).into()),
        ..Default::default()
    };
    assert_eq!(list(&m, t0, f).len(), 2);
    let mut b = Vec::new();
    m.bindings(&mut |x| {
        b.push(x.inside);
        true
    });
    b.sort();
    assert_eq!(
        b,
        vec![
            SocketAddr::new(host.into(), 77),
            SocketAddr::new(host.into(), 3333)
        ]
    );
    let c = m.census();
    assert_eq!((c.live, c.by_proto), (2, [0, 1, 1, 0, 0]));
    let pool = m.pool_usage();
    assert_eq!(pool.len(), 1);
    assert_eq!(
        (pool[0].taken[Proto::Udp.index()], pool[0].subscribers),
        (1, 1)
    );

    let siit = AnyMode::new(
        &crate::any::ModeConfig::Siit(crate::siit::SiitConfig {
            pref64: Some(pref),
            ..Default::default()
        }),
        1,
    )
    .unwrap();
    assert_eq!(
        siit.sessions(t0, &SessionFilter::default(), &mut |_| true),
        0
    );
    assert_eq!(siit.census(), Census::default());
    assert!(siit.pool_usage().is_empty());
    let _ = ICMP;
}

/// A worker creating and a reaper expiring sessions as fast as they can (slots freed and
/// reused all the time), while a lister walks the table again and again: every session it
/// sees is whole (its remote port is tied to its inside endpoint, so a snapshot mixing two
/// sessions would break the tie), and every walk ends.
#[test]
fn a_listing_beside_churn_never_sees_torn_sessions_and_terminates() {
    let mut cfg = nat44_cfg();
    cfg.timeouts.udp = Duration::from_secs(2);
    cfg.max_sessions = 4096;
    let shared = Nat44Shared::new(cfg, 2).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // remote port = f(inside host, inside port): a torn record pair breaks it.
    let tie = |host: u8, port: u16| 1 + (u16::from(host).wrapping_mul(31) ^ port) % 60000;
    let churn = {
        let shared = Arc::clone(&shared);
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut w = shared.worker(0);
            let mut r = shared.reaper();
            let (mut i, mut created) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) || created < 20_000 {
                let now = Timestamp::from_nanos(i * 1_000_000);
                let host = 2 + (i % 200) as u8;
                let port = 1024 + (i % 50_000) as u16;
                let mut p = udp4(Ipv4Addr::new(10, 0, 0, host), port, SERVER, tie(host, port));
                if w.process_packet(now, Direction::Outbound, &mut p)
                    .drop_reason()
                    .is_none()
                {
                    created += 1;
                }
                if i % 64 == 0 {
                    w.quiescent();
                    r.handle_timeout(now);
                }
                i += 1;
            }
            created
        })
    };
    // A core kept busy beside them.
    let busy = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut x = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        })
    };
    let m = AnyMode::Nat44(Arc::clone(&shared));
    let (mut walks, mut listed) = (0, 0u64);
    while !churn.is_finished() {
        let mut n = 0;
        m.sessions(Timestamp::ZERO, &SessionFilter::default(), &mut |s| {
            let (IpAddr::V4(h), IpAddr::V4(_)) = (s.inside.ip(), s.public.ip()) else {
                panic!("not IPv4: {s:?}")
            };
            assert_eq!(h.octets()[..3], [10, 0, 0], "{s:?}");
            assert_eq!(
                s.remote.port(),
                tie(h.octets()[3], s.inside.port()),
                "torn: {s:?}"
            );
            assert_eq!(s.remote.ip(), IpAddr::V4(SERVER), "{s:?}");
            n += 1;
            true
        });
        assert!(n <= 4096);
        listed += n as u64;
        walks += 1;
        // Enough walks that met sessions (or a bound, should the worker stall): stop.
        if walks >= 200 && listed > 0 || walks >= 100_000 {
            stop.store(true, Ordering::Relaxed);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let created = churn.join().unwrap();
    busy.join().unwrap();
    assert!(created >= 20_000, "the worker made {created} sessions");
    assert!(listed > 0, "the lister saw sessions");
    assert!(walks >= 200, "{walks} walks");
}

// Age counts from the session's creation, not its last packet.
#[test]
fn nat44_session_age_counts_from_creation_and_idle_from_the_last_packet() {
    let mut nat = Nat44::new(nat44_cfg()).unwrap();
    let t0 = Timestamp::from_nanos(100_300_000_000); // 100.3 s
    let h2 = Ipv4Addr::new(10, 0, 0, 2);
    for t in [t0, t0 + Duration::from_secs(7)] {
        let mut p = udp4(h2, 40001, SERVER, 7);
        assert_eq!(
            nat.process(t, Direction::Outbound, &mut p).drop_reason(),
            None
        );
    }
    let m = AnyMode::Nat44(Arc::clone(nat.shared()));
    let now = t0 + Duration::from_millis(9_500);
    let all = list(&m, now, SessionFilter::default());
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].idle, Duration::from_millis(2_500));
    // True age 9.5 s; the creation second is rounded down (100 s): 9.8 s.
    assert_eq!(all[0].age, Duration::from_millis(9_800));
}
