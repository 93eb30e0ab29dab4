//! The CSIT profiles at their smallest scale: bindings as the methodology says, every
//! session set up, established traffic forwarded and verified, every connection of a CPS
//! round completed and torn down.

use super::*;

#[test]
fn scales_follow_csit_bindings() {
    for s in Scale::ALL {
        assert_eq!(s.sessions(), s.inside * 63, "{s:?}");
        // One outside address serves at most 1024 hosts x 63 ports = its 64,512 ports.
        assert!(s.inside <= s.outside * SHARING_RATIO, "{s:?}");
        assert!(s.sessions() <= s.outside * 64_512, "{s:?}");
        assert_eq!(s.pool().len(), 32 - s.outside.trailing_zeros() as u8);
    }
    assert_eq!(Scale::named("16m").map(Scale::sessions), Some(16_515_072));
    let big = Scale::named("16M").expect("listed");
    assert_eq!(big.host(0), Ipv4Addr::new(172, 16, 0, 0));
    assert_eq!(big.host(262_143), Ipv4Addr::new(172, 19, 255, 255));
    let small = Scale::ALL[0];
    assert_eq!(small.inside_of(64), (Ipv4Addr::new(192, 168, 0, 1), 1025));
}

#[test]
fn tput_sets_up_every_session_and_verifies() {
    for proto in [Proto::Udp, Proto::Tcp] {
        let opts = CsitOptions {
            scales: vec![Scale::ALL[0]],
            rounds: 1,
            cell: Duration::from_millis(50),
            measures: vec![Measure::Tput],
        };
        let row = tput_row(Scale::ALL[0], proto, &opts);
        assert_eq!(row.established, 4032, "{row:?}");
        assert_eq!(row.failures, 0, "{row:?}");
        assert!(row.median > 0.0, "{row:?}");
    }
}

#[test]
fn cps_completes_and_tears_down_every_connection() {
    for proto in [Proto::Udp, Proto::Tcp] {
        let rs = cps(Scale::ALL[0], proto, 2);
        assert_eq!(rs.len(), 2);
        for r in &rs {
            assert_eq!(r.completed, 4032, "{proto:?} {r:?}");
            assert_eq!(r.expired, 4032, "{proto:?} {r:?}");
            assert_eq!(r.left, 0, "{proto:?} {r:?}");
            assert!(r.worker > 0.0 && r.reaper > 0.0);
        }
    }
}

/// A full outside address: 1024 hosts x 63 ports fill 64,512 ports of one address.
#[test]
fn one_outside_address_takes_all_64512_sessions() {
    // Twice: the second round finds every port given back by the first's teardown.
    let rs = cps(Scale::ALL[2], Proto::Udp, 2);
    for r in &rs {
        assert_eq!(r.completed, 64_512, "{r:?}");
        assert_eq!(r.left, 0, "{r:?}");
    }
}

#[test]
fn tcp_packets_carry_valid_checksums() {
    let mut p = Vec::new();
    packet(
        &mut p,
        Proto::Tcp,
        (Ipv4Addr::new(192, 168, 0, 1), 1024),
        SERVER,
        (SYN, CISN, 0),
    );
    assert_eq!(p.len(), 46);
    assert_eq!(p[33], SYN);
    let pkt = Pkt {
        off: 0,
        len: 46,
        frame: 64,
        hdr: 40,
        dir: Direction::Outbound,
        expect: (Ipv4Addr::new(192, 168, 0, 1), 1024),
    };
    assert!(crate::traffic::verify(&p, &pkt, None));
}
