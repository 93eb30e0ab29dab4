use super::*;

fn key(ident: u16) -> FragKey {
    FragKey {
        src: Ipv4Addr::new(10, 0, 0, 2),
        dst: Ipv4Addr::new(198, 51, 100, 2),
        proto: 17,
        ident,
    }
}

const TO: FragRewrite = FragRewrite {
    src: Ipv4Addr::new(203, 0, 113, 1),
    dst: Ipv4Addr::new(198, 51, 100, 2),
};

const OUT: Direction = Direction::Outbound;

fn piece(offset: u32, len: u32, more: bool) -> Piece {
    Piece { offset, len, more }
}

/// A later fragment's bytes: a 20-byte header and `len` bytes of payload.
fn bytes(len: u32) -> Vec<u8> {
    vec![0x45; 20 + len as usize]
}

/// `t.later` for fragment `p` of datagram `k` arriving from `dir` (a header and
/// `p.len` bytes).
fn arrive(
    t: &FragTable,
    now: Timestamp,
    k: FragKey,
    dir: Direction,
    p: Piece,
    may_hold: bool,
    c: &mut Counters,
) -> Result<Later, DropReason> {
    let packet = bytes(p.len);
    let f = Arrival {
        key: k,
        dir,
        piece: p,
        packet: &packet,
        ihl: 20,
        may_hold,
    };
    t.later(now, &f, c)
}

/// `t.later` for an outbound fragment of datagram `k` that may be held.
fn later(
    t: &FragTable,
    now: Timestamp,
    k: u16,
    p: Piece,
    c: &mut Counters,
) -> Result<Later, DropReason> {
    arrive(t, now, key(k), OUT, p, true, c)
}

fn table(capacity: usize, timeout: Duration) -> FragTable {
    FragTable::new(capacity, timeout, FRAGMENT_HOLD_BYTES)
}

#[test]
fn record_goes_when_the_datagram_is_complete() {
    let t = table(16, FRAGMENT_TIMEOUT);
    let c = &mut Counters::default();
    let now = Timestamp::from_secs(1);
    assert!(t
        .first(now, key(1), TO, OUT, piece(0, 1480, true), c)
        .unwrap()
        .is_empty());
    assert_eq!(
        later(&t, now, 1, piece(2960, 100, false), c),
        Ok(Later::Rewrite(TO))
    );
    assert_eq!(t.len(), 1, "the middle fragment is still due");
    assert_eq!(
        later(&t, now, 1, piece(1480, 1480, true), c),
        Ok(Later::Rewrite(TO))
    );
    assert!(t.is_empty());
}

#[test]
fn later_fragments_before_the_first_are_held_then_handed_over_in_arrival_order() {
    let t = table(16, FRAGMENT_TIMEOUT);
    let c = &mut Counters::default();
    let now = Timestamp::from_secs(1);
    assert_eq!(
        later(&t, now, 1, piece(2960, 100, false), c),
        Ok(Later::Held)
    );
    assert_eq!(
        later(&t, now, 1, piece(1480, 1480, true), c),
        Ok(Later::Held)
    );
    assert_eq!(
        later(&t, now, 1, piece(1480, 1480, true), c),
        Ok(Later::Held),
        "a copy"
    );
    assert_eq!(t.held_bytes(), 2 * 20 + 1580 + 2 * hold::OVERHEAD);
    let held = t
        .first(now, key(1), TO, OUT, piece(0, 1480, true), c)
        .unwrap();
    let lens: Vec<usize> = held.iter().map(|h| h.bytes.len()).collect();
    assert_eq!(lens, [120, 1500]);
    assert!(t.is_empty(), "the datagram is complete");
    assert_eq!(t.held_bytes(), 0);
    assert_eq!(c.total_dropped(), 0);
}

#[test]
fn a_held_datagram_whose_first_never_comes_expires_counted() {
    let t = table(16, Duration::from_secs(2));
    let c = &mut Counters::default();
    later(&t, Timestamp::ZERO, 1, piece(8, 8, true), c).unwrap();
    later(&t, Timestamp::ZERO, 1, piece(16, 8, false), c).unwrap();
    assert_eq!(t.sweep(Timestamp::from_secs(1), c), 0);
    assert_eq!(t.sweep(Timestamp::from_secs(2), c), 1);
    assert_eq!(c.dropped(DropReason::FragmentExpired), 2);
    assert_eq!(t.held_bytes(), 0);
    // Found expired by a fragment before the sweep: the same.
    later(&t, Timestamp::ZERO, 2, piece(8, 8, true), c).unwrap();
    assert_eq!(
        later(&t, Timestamp::from_secs(5), 2, piece(16, 8, true), c),
        Ok(Later::Held)
    );
    assert_eq!(c.dropped(DropReason::FragmentExpired), 3);
}

#[test]
fn wrong_direction_and_expiry() {
    let t = table(16, Duration::from_secs(2));
    let c = &mut Counters::default();
    t.first(Timestamp::ZERO, key(1), TO, OUT, piece(0, 8, true), c)
        .unwrap();
    let p = piece(8, 8, true);
    assert_eq!(
        arrive(&t, Timestamp::ZERO, key(1), Direction::Inbound, p, true, c),
        Err(DropReason::WrongDirection)
    );
    assert_eq!(
        arrive(&t, Timestamp::from_secs(2), key(1), OUT, p, false, c),
        Err(DropReason::FragmentOutOfOrder),
        "expired, and not to be held"
    );
    t.first(Timestamp::ZERO, key(2), TO, OUT, piece(0, 8, true), c)
        .unwrap();
    assert_eq!(t.sweep(Timestamp::from_secs(1), c), 0);
    assert_eq!(t.sweep(Timestamp::from_secs(2), c), 1);
    assert!(t.is_empty());
}

#[test]
fn an_overlap_refuses_the_datagram_and_what_it_held() {
    let t = table(16, FRAGMENT_TIMEOUT);
    let c = &mut Counters::default();
    let now = Timestamp::from_secs(1);
    later(&t, now, 1, piece(16, 16, true), c).unwrap();
    later(&t, now, 1, piece(32, 16, true), c).unwrap();
    assert_eq!(
        later(&t, now, 1, piece(24, 16, true), c),
        Err(DropReason::FragmentOverlap)
    );
    assert_eq!(c.dropped(DropReason::FragmentOverlap), 2, "both held ones");
    assert_eq!(t.held_bytes(), 0);
    assert_eq!(
        later(&t, now, 1, piece(48, 8, false), c),
        Err(DropReason::FragmentOverlap)
    );
    assert_eq!(
        t.first(now, key(1), TO, OUT, piece(0, 16, true), c)
            .unwrap_err(),
        DropReason::FragmentOverlap
    );
    // A first fragment reaching into a held one, after it passed.
    later(&t, now, 2, piece(16, 16, true), c).unwrap();
    assert_eq!(
        t.first(now, key(2), TO, OUT, piece(0, 24, true), c)
            .unwrap_err(),
        DropReason::FragmentOverlap
    );
    // A later one reaching back into the first.
    t.first(now, key(3), TO, OUT, piece(0, 24, true), c)
        .unwrap();
    assert_eq!(
        later(&t, now, 3, piece(16, 16, true), c),
        Err(DropReason::FragmentOverlap)
    );
    assert_eq!(
        later(&t, now, 3, piece(24, 16, false), c),
        Err(DropReason::FragmentOverlap)
    );
}

#[test]
fn a_tcp_fragment_inside_the_tcp_header_is_refused() {
    let t = table(16, FRAGMENT_TIMEOUT);
    let c = &mut Counters::default();
    let tcp = FragKey { proto: 6, ..key(1) };
    let p = piece(8, 64, true);
    let got = arrive(&t, Timestamp::ZERO, tcp, OUT, p, true, c);
    assert_eq!(got, Err(DropReason::FragmentOverlap));
    t.first(Timestamp::ZERO, tcp, TO, OUT, piece(0, 8, true), c)
        .unwrap();
    let got = arrive(&t, Timestamp::ZERO, tcp, OUT, p, true, c);
    assert_eq!(got, Err(DropReason::FragmentOverlap));
}

#[test]
fn the_hold_is_bounded_per_source_and_in_total() {
    let t = FragTable::new(1024, FRAGMENT_TIMEOUT, 256 * 1024);
    let c = &mut Counters::default();
    let now = Timestamp::ZERO;
    let mut held = 0;
    for i in 0..1000 {
        match later(&t, now, i, piece(1480, 1480, true), c) {
            Ok(Later::Held) => held += 1,
            Err(DropReason::FragmentHoldFull) => break,
            other => panic!("{other:?}"),
        }
    }
    assert!(
        held > 0 && t.held_bytes() <= 256 * 1024,
        "{held} {}",
        t.held_bytes()
    );
    assert_eq!(t.held_bytes(), held * (1500 + hold::OVERHEAD));
    assert_eq!(
        t.first(now, key(0), TO, OUT, piece(0, 1480, true), c)
            .unwrap()
            .len(),
        1,
        "a held datagram still completes"
    );
}

#[test]
fn waiting_records_fill_at_most_half_a_shard() {
    let t = FragTable::new(4, FRAGMENT_TIMEOUT, FRAGMENT_HOLD_BYTES);
    let c = &mut Counters::default();
    let now = Timestamp::ZERO;
    later(&t, now, 1, piece(8, 8, true), c).unwrap();
    later(&t, now, 2, piece(8, 8, true), c).unwrap();
    // A third pushes the oldest waiting one out.
    assert_eq!(later(&t, now, 3, piece(8, 8, true), c), Ok(Later::Held));
    assert_eq!(c.dropped(DropReason::FragmentHoldFull), 1);
    assert!(t
        .first(now, key(1), TO, OUT, piece(0, 8, true), c)
        .unwrap()
        .is_empty());
    t.first(now, key(4), TO, OUT, piece(0, 8, true), c).unwrap();
    assert_eq!(t.len(), 4, "datagrams in order still had room");
    assert_eq!(
        t.first(now, key(3), TO, OUT, piece(0, 8, true), c)
            .unwrap()
            .len(),
        1
    );
}

/// A flood of orphan fragments from many sources fills the whole hold (the default 4 MiB,
/// some 2,700 of them), and then keeps pushing its own oldest out: a reordered datagram
/// arriving in the middle of it still waits long enough for its first fragment, which
/// releases it. (Eviction goes shard by shard, oldest first in each: the datagram goes
/// only once the older ones of its shard, some 40 here, are gone.)
#[test]
fn a_reordered_datagram_survives_a_flood_of_orphans() {
    let t = FragTable::new(MAX_FRAGMENT_RECORDS, FRAGMENT_TIMEOUT, FRAGMENT_HOLD_BYTES);
    let c = &mut Counters::default();
    let now = Timestamp::from_secs(1);
    let orphan = |i: u32, c: &mut Counters| {
        let k = FragKey {
            src: Ipv4Addr::from(0x0a00_0000 | (i % 4096)),
            ident: (i / 4096) as u16,
            ..key(0)
        };
        arrive(&t, now, k, OUT, piece(1480, 1480, true), true, c)
    };
    for i in 0..8_000 {
        assert_eq!(orphan(i, c), Ok(Later::Held), "{i}");
    }
    assert!(t.held_bytes() <= FRAGMENT_HOLD_BYTES);
    assert!(
        c.dropped(DropReason::FragmentHoldFull) > 5_000,
        "the flood pushed itself out"
    );
    // A legitimate datagram's later fragment, then more orphans, then its first.
    assert_eq!(
        later(&t, now, 7, piece(1480, 100, false), c),
        Ok(Later::Held)
    );
    for i in 8_000..8_400 {
        orphan(i, c).unwrap();
    }
    let held = t
        .first(now, key(7), TO, OUT, piece(0, 1480, true), c)
        .unwrap();
    assert_eq!(held.len(), 1, "still held when its first came");
    assert!(t.held_bytes() <= FRAGMENT_HOLD_BYTES);
}

#[test]
fn with_no_hold_a_later_fragment_first_is_out_of_order() {
    let t = FragTable::new(16, FRAGMENT_TIMEOUT, 0);
    let c = &mut Counters::default();
    assert_eq!(
        later(&t, Timestamp::ZERO, 1, piece(8, 8, true), c),
        Err(DropReason::FragmentOutOfOrder)
    );
}

#[test]
fn a_full_table_refuses_new_datagrams_until_records_expire() {
    let t = table(4, Duration::from_secs(2));
    let c = &mut Counters::default();
    let first = |now, k| {
        t.first(
            now,
            key(k),
            TO,
            OUT,
            piece(0, 8, true),
            &mut Counters::default(),
        )
    };
    for i in 0..4 {
        first(Timestamp::ZERO, i).unwrap();
    }
    assert_eq!(
        first(Timestamp::ZERO, 9).unwrap_err(),
        DropReason::FragmentTableFull
    );
    // The same key again (a copy of its first fragment) keeps its record.
    first(Timestamp::ZERO, 3).unwrap();
    assert_eq!(t.len(), 4);
    first(Timestamp::from_secs(2), 9).unwrap();
    assert_eq!(t.len(), 1, "the expired records made room");
    assert_eq!(c.total_dropped(), 0);
}

#[test]
fn shards_split_the_capacity() {
    let t = table(MAX_FRAGMENT_RECORDS, FRAGMENT_TIMEOUT);
    assert_eq!(t.shards.len(), MAX_SHARDS);
    assert_eq!(t.per_shard * MAX_SHARDS, MAX_FRAGMENT_RECORDS);
    assert_eq!(table(0, FRAGMENT_TIMEOUT).shards.len(), 1);
    assert_eq!(table(200, FRAGMENT_TIMEOUT).shards.len(), 2);
}

/// Datagrams crafted to share one shard under a public unkeyed hash (FxHash, the
/// attacker's model) spread over the shards: twice a shard's capacity of them are all
/// admitted, where a table sharded by that hash would refuse half with
/// `fragment_table_full`.
#[test]
fn fragments_crafted_for_one_shard_spread_out() {
    use rustc_hash::FxHasher;
    use std::hash::{Hash, Hasher};
    let t = table(MAX_FRAGMENT_RECORDS, FRAGMENT_TIMEOUT);
    let old_shard = |k: &FragKey| {
        let mut h = FxHasher::default();
        Hash::hash(k, &mut h);
        (h.finish() >> 32) as usize & (MAX_SHARDS - 1)
    };
    let crafted: Vec<FragKey> = (0..u32::MAX)
        .map(|i| FragKey {
            src: Ipv4Addr::from(0xC633_6400 | (i >> 16)),
            dst: Ipv4Addr::new(203, 0, 113, 1),
            proto: 17,
            ident: i as u16,
        })
        .filter(|k| old_shard(k) == 0)
        .take(2 * t.per_shard)
        .collect();
    let to = FragRewrite {
        src: Ipv4Addr::new(198, 51, 100, 9),
        dst: Ipv4Addr::new(10, 0, 0, 9),
    };
    let now = Timestamp::from_secs(1);
    let c = &mut Counters::default();
    for k in &crafted {
        let p = piece(0, 8, true);
        assert!(
            t.first(now, *k, to, Direction::Inbound, p, c).is_ok(),
            "{k:?}"
        );
    }
}
