//! The session table: records, reaping, races, TCP observation and early drop.
use super::*;
use crate::tuple::{Endpoint, Proto};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

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
            side: Record::Original
        }
    );
    assert_eq!(t.revised(o), Some(n.revised));
    let r = t.lookup(&n.revised.reversed()).unwrap();
    assert_eq!(r.side, Record::Reply);
    assert_eq!(t.revised(r), Some(n.initial.reversed()));
    assert_eq!(t.flags(id), FROM_INSIDE);
    assert_eq!(t.binding(id), Some(7));
    assert!(matches!(
        t.insert(&n, Timestamp::ZERO),
        Err(InsertError::Exists(_))
    ));
    assert_eq!(t.len(), 1);
}

/// `INBOUND_SEEN`: kept from the insert, set by the first inbound hit, never by a hit
/// on the original record alone, and reported in the view (not in `flags`), never
/// disturbing the other flags or the TCP state.
#[test]
fn inbound_seen_is_set_once_and_kept() {
    let t = SessionTable::new(4);
    let n = new(1000, 2000);
    let id = t.insert(&n, Timestamp::from_secs(1)).unwrap();
    let seen = |t: &SessionTable| t.view(id).unwrap().flags & INBOUND_SEEN != 0;
    t.hit(&n.initial).unwrap().touch(Timestamp::from_secs(2));
    assert!(!seen(&t), "outbound packets alone");
    t.hit(&n.revised.reversed()).unwrap().note_inbound();
    assert!(seen(&t));
    t.hit(&n.revised.reversed()).unwrap().note_inbound();
    assert_eq!(t.view(id).unwrap().flags, FROM_INSIDE | INBOUND_SEEN);
    assert_eq!(
        t.flags(id),
        FROM_INSIDE,
        "flags() keeps to the direction flags"
    );
    let m = NewSession {
        flags: INBOUND_SEEN,
        ..new(1001, 2001)
    };
    let id = t.insert(&m, Timestamp::from_secs(1)).unwrap();
    assert_eq!(
        t.view(id).unwrap().flags,
        INBOUND_SEEN,
        "made by an inbound packet"
    );
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
        side: Record::Original,
    };
    let r = RecordRef {
        session: id,
        side: Record::Reply,
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
        side: Record::Original,
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
        side: Record::Reply,
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

// -- insert at the live limit evicts (conntrack's early_drop at insert) --

/// At the live limit an insert evicts one unconfirmed session and gets in at once; the
/// evicted one stops counting as live at once, holds its slot until the reaper unlinked
/// and freed it; the slot bound keeps a physical reserve; with no victim left (all
/// confirmed) the insert is refused.
#[test]
fn insert_at_the_live_limit_evicts_an_unconfirmed_session() {
    use crate::tcp::flags::*;
    let t = SessionTable::new(8);
    let room = Room { live: 4, slots: 6 };
    let unconfirmed = |v: &SessionView| !v.tcp.is_confirmed();
    let mut evicted = vec![];
    for p in 0..4 {
        t.insert_room(&tcp_new(p), Timestamp::ZERO, room).unwrap();
    }
    // Confirm port 0's connection: never a victim.
    let o = t.lookup(&tcp_new(0).initial).unwrap();
    let r = t.lookup(&tcp_new(0).revised.reversed()).unwrap();
    t.observe_tcp(o, &seg(SYN, 1, 0)).unwrap();
    t.observe_tcp(r, &seg(SYN | ACK, 9, 2)).unwrap();
    t.observe_tcp(o, &seg(ACK, 2, 10)).unwrap();
    assert_eq!(
        t.insert_room(&tcp_new(4), Timestamp::ZERO, room),
        Err(InsertError::Full),
        "insert_room alone refuses at the live limit"
    );
    let id = t
        .insert_evicting(
            &tcp_new(4),
            Timestamp::ZERO,
            room,
            8,
            unconfirmed,
            |id, _| evicted.push(id),
        )
        .unwrap();
    assert!(t.is_live(id));
    assert_eq!(evicted.len(), 1);
    assert_ne!(evicted[0], o.session);
    assert_eq!((t.live_count(), t.dead_pending(), t.occupied()), (4, 1, 5));
    // Again: one more victim, now at the slot bound (6): the next one is refused even
    // though victims exist, as dead slots are not free yet.
    t.insert_evicting(
        &tcp_new(5),
        Timestamp::ZERO,
        room,
        8,
        unconfirmed,
        |id, _| evicted.push(id),
    )
    .unwrap();
    assert_eq!((t.live_count(), t.occupied()), (4, 6));
    assert_eq!(
        t.insert_evicting(
            &tcp_new(6),
            Timestamp::ZERO,
            room,
            8,
            unconfirmed,
            |_, _| { panic!("no eviction at the slot bound") }
        ),
        Err(InsertError::Full)
    );
    // The reaper unlinks the queued victims (the full walk is not needed) and frees them.
    assert!(t.has_queued());
    let mut scratch = vec![];
    let mut unlinked = vec![];
    t.reap_queued(&mut scratch, |id, _| unlinked.push(id));
    assert_eq!(unlinked, evicted);
    assert!(!t.has_queued());
    for id in &evicted {
        assert!(t.lookup(&t.view(*id).unwrap().initial).is_none());
        t.free(*id);
    }
    assert_eq!((t.live_count(), t.dead_pending(), t.occupied()), (4, 0, 4));
    // Evict until only the confirmed session is left as a possible victim... and beyond.
    for p in 6..9 {
        t.insert_evicting(
            &tcp_new(p),
            Timestamp::ZERO,
            room,
            8,
            unconfirmed,
            |id, _| evicted.push(id),
        )
        .unwrap();
        t.reap_queued(&mut scratch, |id, _| t.free(id));
    }
    // Now: 0 (confirmed) and three unconfirmed; confirm them all.
    let open: Vec<_> = t.live().filter(|v| !v.tcp.is_confirmed()).collect();
    assert_eq!(open.len(), 3);
    for v in open {
        let o = t.lookup(&v.initial).unwrap();
        let r = t.lookup(&v.revised.reversed()).unwrap();
        t.observe_tcp(o, &seg(SYN, 1, 0)).unwrap();
        t.observe_tcp(r, &seg(SYN | ACK, 9, 2)).unwrap();
        t.observe_tcp(o, &seg(ACK, 2, 10)).unwrap();
    }
    assert_eq!(
        t.insert_evicting(
            &tcp_new(9),
            Timestamp::ZERO,
            room,
            8,
            unconfirmed,
            |_, _| { panic!("an established session is never evicted") }
        ),
        Err(InsertError::Full)
    );
    assert!(t.is_live(o.session));
    assert_eq!(t.len(), 4);
}

/// A session withdrawn by its own insert (its original record lost a race) is counted
/// dead once, and freeing it brings the live and dead counts back.
#[test]
fn dead_pending_counts_each_dead_session_once() {
    let t = SessionTable::new(8);
    let a = t.insert(&new(1, 1), Timestamp::ZERO).unwrap();
    assert!(t.mark_dead(a));
    assert!(!t.mark_dead(a), "marked once");
    assert_eq!((t.live_count(), t.dead_pending()), (0, 1));
    let mut n = 0;
    t.reap(
        |_| false,
        |id, _, _| {
            n += 1;
            t.free(id)
        },
    );
    assert_eq!(
        (n, t.live_count(), t.dead_pending(), t.occupied()),
        (1, 0, 0, 0)
    );
}

// Creation time, for the age in listings.
#[test]
fn age_counts_from_the_insert_rounded_up_never_down_and_survives_clock_wrap() {
    let t = SessionTable::new(16);
    let born = Timestamp::from_nanos(5_700_000_000);
    let id = t.insert(&new(1000, 2000), born).unwrap();
    // Packets refresh the last-seen time, never the creation time.
    let r = t.lookup(&new(1000, 2000).initial).unwrap();
    t.touch(r, Timestamp::from_secs(8));
    let now = Timestamp::from_nanos(9_200_000_000);
    let age = t.age(id, now).unwrap();
    // True age 3.5 s; the creation second is rounded down: 4.2 s, within a second above.
    assert_eq!(age, Duration::from_millis(4200));
    let idle = now.saturating_since(t.view(id).unwrap().last_seen());
    assert!(
        age >= now.saturating_since(born) && age >= idle,
        "{age:?} {idle:?}"
    );
    // The walk hands the same age over, with the session.
    let mut seen = Vec::new();
    t.walk_live_aged(now, |i, v, a| {
        seen.push((i, v.binding, a));
        true
    });
    assert_eq!(seen, vec![(id, 7, age)]);

    // A session created just before the clock's seconds pass 2^32 ages correctly after.
    let w = SessionTable::new(4);
    let before = Timestamp::from_nanos((u64::from(u32::MAX)) * 1_000_000_000 + 500_000_000);
    let id = w.insert(&new(1, 2), before).unwrap();
    let after = Timestamp::from_secs(u64::from(u32::MAX) + 4);
    // True age 3.5 s (seconds 2^32 - 1 + 0.5 to 2^32 + 3).
    assert_eq!(w.age(id, after), Some(Duration::from_secs(4)));
}

#[test]
fn a_reused_slot_ages_from_its_new_session() {
    let t = SessionTable::new(1);
    let id = t
        .insert(&new(1000, 2000), Timestamp::from_secs(10))
        .unwrap();
    t.reap(|_| true, |_, _, _| {});
    t.free(id);
    assert!(t.walk_live_aged(Timestamp::from_secs(20), |_, _, _| true) == 0);
    let id2 = t
        .insert(&new(1001, 2001), Timestamp::from_secs(50))
        .unwrap();
    assert_eq!(id2, id, "one slot: reused");
    assert_eq!(
        t.age(id2, Timestamp::from_secs(53)),
        Some(Duration::from_secs(3))
    );
    let (v, age) = t.snapshot_live_aged(id2, Timestamp::from_secs(53)).unwrap();
    assert_eq!(
        (v.initial, age),
        (new(1001, 2001).initial, Duration::from_secs(3))
    );
}
