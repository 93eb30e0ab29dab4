//! The session table: records, reaping, races, TCP observation and early drop.
use super::*;
use crate::tuple::{Endpoint, Proto};
use std::net::Ipv4Addr;
use std::sync::Arc;

fn ep(a: [u8; 4], p: u16) -> Endpoint {
    Endpoint::new(Ipv4Addr::from(a), p)
}

fn new(inside_port: u16, public_port: u16) -> NewSession {
    NewSession {
        initial: Tuple::new(
            Proto::Udp,
            ep([10, 0, 0, 2], inside_port),
            ep([198, 51, 100, 2], 53),
        ),
        revised: Tuple::new(
            Proto::Udp,
            ep([203, 0, 113, 1], public_port),
            ep([198, 51, 100, 2], 53),
        ),
        binding: 7,
        flags: FROM_INSIDE,
    }
}

#[test]
fn both_records_found_and_revised_tuples_derived() {
    let t = SessionTable::new(16);
    let n = new(1000, 2000);
    let id = t.insert(&n, Timestamp::from_secs(1)).unwrap();
    let o = t.lookup(&n.initial).unwrap();
    assert_eq!(
        o,
        RecordRef {
            session: id,
            side: Side::Original
        }
    );
    assert_eq!(t.revised(o), Some(n.revised));
    let r = t.lookup(&n.revised.reversed()).unwrap();
    assert_eq!(r.side, Side::Reply);
    assert_eq!(t.revised(r), Some(n.initial.reversed()));
    assert_eq!(t.flags(id), FROM_INSIDE);
    assert_eq!(t.binding(id), Some(7));
    assert!(matches!(
        t.insert(&n, Timestamp::ZERO),
        Err(InsertError::Exists(_))
    ));
    assert_eq!(t.len(), 1);
}

#[test]
fn reap_unlinks_and_free_recycles() {
    let t = SessionTable::new(4);
    let ids: Vec<_> = (0..4)
        .map(|p| {
            t.insert(&new(p, p), Timestamp::from_secs(u64::from(p)))
                .unwrap()
        })
        .collect();
    assert_eq!(
        t.insert(&new(9, 9), Timestamp::ZERO),
        Err(InsertError::Full)
    );
    let mut gone = vec![];
    t.reap(
        |v| v.last_seen() < Timestamp::from_secs(2),
        |id, _, here| {
            assert!(here);
            gone.push(id)
        },
    );
    assert_eq!(gone, ids[..2]);
    assert!(t.lookup(&new(0, 0).initial).is_none());
    assert_eq!(
        t.insert(&new(9, 9), Timestamp::ZERO),
        Err(InsertError::Full),
        "not freed before the grace period"
    );
    for id in gone {
        t.free(id);
    }
    assert!(t.insert(&new(9, 9), Timestamp::ZERO).is_ok());
    assert!(t.mark_dead(ids[3]));
    t.reap(
        |_| false,
        |id, _, here| {
            assert_eq!(id, ids[3]);
            assert!(!here, "marked dead by the caller, not the walk");
        },
    );
    assert_eq!(t.len(), 2);
}

fn tcp_new(inside_port: u16) -> NewSession {
    let mut n = new(inside_port, inside_port);
    n.initial.proto = Proto::Tcp;
    n.revised.proto = Proto::Tcp;
    n
}

fn seg(flags: u8, seq: u32, ack: u32) -> Segment {
    Segment {
        flags,
        seq,
        ack,
        window: 1000,
        ..Segment::default()
    }
}

/// The table applies the tracker to the slot's state word and the sequence array; a
/// refused RST leaves both as they were.
#[test]
fn observe_through_the_table_and_rst_refusal() {
    use crate::tcp::{flags::*, ConnState};
    let t = SessionTable::new(8);
    let id = t.insert(&tcp_new(1), Timestamp::ZERO).unwrap();
    let o = RecordRef {
        session: id,
        side: Side::Original,
    };
    let r = RecordRef {
        session: id,
        side: Side::Reply,
    };
    t.observe_tcp(o, &seg(SYN, 100, 0)).unwrap();
    t.observe_tcp(r, &seg(SYN | ACK, 5000, 101)).unwrap();
    assert_eq!(t.view(id).unwrap().tcp.state(), ConnState::SynRecv);
    t.observe_tcp(o, &seg(ACK, 101, 5001)).unwrap();
    assert_eq!(t.view(id).unwrap().tcp.state(), ConnState::Established);
    let before = t.view(id).unwrap();
    assert_eq!(
        t.observe_tcp(r, &seg(RST, 99_999, 0)),
        Err(Reject::RstOutOfWindow)
    );
    assert_eq!(t.view(id).unwrap(), before);
    t.observe_tcp(r, &seg(RST, 5001, 0)).unwrap();
    assert_eq!(t.view(id).unwrap().tcp.state(), ConnState::Close);
    assert_eq!(t.occupied(), 1);
}

/// A slot reused by a new TCP session starts with fresh sequence state.
#[test]
fn reused_slot_has_fresh_sequence_state() {
    use crate::tcp::flags::*;
    let t = SessionTable::new(1);
    let id = t.insert(&tcp_new(1), Timestamp::ZERO).unwrap();
    let o = RecordRef {
        session: id,
        side: Side::Original,
    };
    t.observe_tcp(o, &seg(SYN, 100, 0)).unwrap();
    assert!(t.mark_dead(id));
    t.reap(|_| false, |_, _, _| {});
    t.free(id);
    assert_eq!(t.occupied(), 0);
    let id2 = t.insert(&tcp_new(2), Timestamp::ZERO).unwrap();
    assert_eq!(id2, id);
    // A RST from the reply side with no sequence seen from either side is accepted
    // only because nothing was seen: the old session's state did not leak.
    let r = RecordRef {
        session: id2,
        side: Side::Reply,
    };
    assert_eq!(t.observe_tcp(r, &seg(RST, 1, 0)), Ok(()));
}

#[test]
fn insert_within_keeps_headroom_and_early_drop_takes_only_victims() {
    use crate::tcp::flags::*;
    let t = SessionTable::new(8);
    for p in 0..6 {
        t.insert_within(&tcp_new(p), Timestamp::ZERO, 6).unwrap();
    }
    assert_eq!(
        t.insert_within(&tcp_new(6), Timestamp::ZERO, 6),
        Err(InsertError::Full)
    );
    assert!(
        t.insert(&tcp_new(6), Timestamp::ZERO).is_ok(),
        "headroom for others"
    );
    assert_eq!(t.occupied(), 7);
    // Confirm session of port 0; then drop everything unconfirmed, two at a time.
    let o = t.lookup(&tcp_new(0).initial).unwrap();
    let r = t.lookup(&tcp_new(0).revised.reversed()).unwrap();
    t.observe_tcp(o, &seg(SYN, 1, 0)).unwrap();
    t.observe_tcp(r, &seg(SYN | ACK, 9, 2)).unwrap();
    t.observe_tcp(o, &seg(ACK, 2, 10)).unwrap();
    let mut dropped = vec![];
    let victim = |v: &SessionView| !v.tcp.is_confirmed();
    while t.early_drop(100, 2, victim, |id, _| dropped.push(id)) > 0 {}
    assert_eq!(dropped.len(), 6);
    assert!(!dropped.contains(&o.session));
    assert!(t.is_live(o.session));
    assert_eq!(t.len(), 1);
    let mut reaped = 0;
    t.reap(
        |_| false,
        |_, _, here| {
            assert!(!here);
            reaped += 1
        },
    );
    assert_eq!(reaped, 6);
}

/// Two threads create the same sessions at the same moment: one wins each, the other
/// is pointed at the winner; no record is installed twice.
#[test]
fn racing_creators_agree() {
    let t = Arc::new(SessionTable::new(10_000));
    let hs: Vec<_> = (0..2)
        .map(|_| {
            let t = Arc::clone(&t);
            std::thread::spawn(move || {
                (0..3000)
                    .filter(|p| t.insert(&new(*p, *p), Timestamp::ZERO).is_ok())
                    .count()
            })
        })
        .collect();
    let wins: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(wins, 3000);
    assert_eq!(t.len(), 3000);
}
