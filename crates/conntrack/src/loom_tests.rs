//! Model-checked tests of the tables' lock-free protocols (loom): every interleaving of
//! the threads below, and every value a weak-memory load may return, explored without a
//! preemption bound (the models are small: all seven take well under a second). Built
//! only with `--cfg loom`, which swaps the tables' atomics for loom's (`crate::sync`):
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p conntrack --release loom_` (see scripts/test.sh).
//!
//! What each model holds the code to:
//! - two inserts of one key: exactly one wins, the other is told who;
//! - an insert that loses (first key, or second key after publishing the first) racing the
//!   reaper's walk: the slot is disposed of exactly once, a static entry never;
//! - a reference taken while an insert withdraws its entry is never wiped;
//! - a reference racing the reaper's claim: whoever holds one keeps the entry alive;
//! - QSBR: a worker coming back online never reads a node the reaper freed.

use std::sync::Arc;

use loom::thread;

use crate::qsbr::Qsbr;
use crate::reftable::{RefInsertError, RefTable};
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// Explores `f` under loom, exhaustively (no preemption bound).
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = None;
    b.check(f);
}

/// Two workers create the same binding at once: one entry, one winner.
#[test]
fn loom_racing_inserts_of_one_key_have_one_winner() {
    model(|| {
        let t = Arc::new(RefTable::new(4));
        let hs: Vec<_> = (0..2u64)
            .map(|i| {
                let t = Arc::clone(&t);
                thread::spawn(move || t.insert(10, 20 + i, false, 1, false, 0))
            })
            .collect();
        let r: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        let wins: Vec<u32> = r.iter().filter_map(|x| x.ok()).collect();
        assert_eq!(wins.len(), 1, "{r:?}");
        assert!(r.contains(&Err(RefInsertError::ExistsA(wins[0]))), "{r:?}");
        assert_eq!(t.find_a(10), Some(wins[0]));
    });
}

/// After a race, every slot is accounted for exactly once: with room for `free_slots`
/// more entries, exactly that many inserts succeed (a slot freed twice would be handed
/// out twice; one never freed would be missing).
fn exactly_n_more_fit(t: &RefTable, free_slots: usize) {
    let ok = (0..3u64)
        .filter(|i| t.insert(100 + i, 200 + i, false, 1, false, 0).is_ok())
        .count();
    assert_eq!(ok, free_slots);
}

/// An insert losing on the first key (never published) races the reaper's walk, which
/// may claim the half-made slot: exactly one of them frees it.
#[test]
fn loom_insert_losing_on_the_first_key_races_the_reaper() {
    model(|| {
        let t = Arc::new(RefTable::new(2));
        let e0 = t.insert(5, 6, true, 0, true, 0).unwrap();
        let ins = {
            let t = Arc::clone(&t);
            thread::spawn(move || t.insert(5, 7, true, 1, false, 0))
        };
        let reaper = {
            let t = Arc::clone(&t);
            thread::spawn(move || {
                let mut gone = Vec::new();
                t.reap(|id, _| gone.push(id));
                gone
            })
        };
        assert_eq!(ins.join().unwrap(), Err(RefInsertError::ExistsA(e0)));
        let mut gone = reaper.join().unwrap();
        t.reap(|id, _| gone.push(id));
        assert!(!gone.contains(&e0), "a static entry was reaped");
        for id in gone {
            t.free(id);
        }
        exactly_n_more_fit(&t, 1);
    });
}

/// An insert losing on the second key (published under the first, then withdrawn) races
/// the reaper: the withdrawn entry is collected exactly once and its slot comes back.
#[test]
fn loom_insert_withdrawn_on_the_second_key_races_the_reaper() {
    model(|| {
        let t = Arc::new(RefTable::new(2));
        let e0 = t.insert(5, 6, true, 0, true, 0).unwrap();
        let ins = {
            let t = Arc::clone(&t);
            thread::spawn(move || t.insert(1, 6, true, 1, false, 0))
        };
        let reaper = {
            let t = Arc::clone(&t);
            thread::spawn(move || {
                let mut gone = Vec::new();
                t.reap(|id, _| gone.push(id));
                gone
            })
        };
        assert_eq!(ins.join().unwrap(), Err(RefInsertError::ExistsB(e0)));
        let mut gone = reaper.join().unwrap();
        t.reap(|id, _| gone.push(id));
        assert_eq!(gone.len(), 1, "the withdrawn entry, once: {gone:?}");
        assert_ne!(gone[0], e0);
        assert_eq!(t.find_a(1), None);
        t.free(gone[0]);
        exactly_n_more_fit(&t, 1);
    });
}

/// A worker finds an entry under its first key while the insert that made it loses on
/// the second key and withdraws it: if the worker got a reference, the entry must still
/// be alive (the reference was not wiped) and the reaper must leave it alone until the
/// worker lets go, then collect it, once. Either way nobody finds it any more.
#[test]
fn loom_a_reference_is_never_wiped_by_a_withdrawal() {
    model(|| {
        let t = Arc::new(RefTable::new(3));
        t.insert(5, 6, true, 0, true, 0).unwrap();
        let ins = {
            let t = Arc::clone(&t);
            thread::spawn(move || t.insert(1, 6, true, 1, false, 0))
        };
        let user = {
            let t = Arc::clone(&t);
            thread::spawn(move || t.find_a(1).filter(|id| t.try_ref(*id)))
        };
        assert!(matches!(
            ins.join().unwrap(),
            Err(RefInsertError::ExistsB(_))
        ));
        assert_eq!(t.find_a(1), None, "a withdrawn entry is not found");
        if let Some(id) = user.join().unwrap() {
            assert_eq!(t.get(id).unwrap().refs, 1, "reference wiped");
            t.reap(|r, _| assert_ne!(r, id, "referenced entry reaped"));
            assert!(!t.try_ref(id), "no new reference on a withdrawn entry");
            assert_eq!(t.unref(id), 0);
        }
        let mut gone = Vec::new();
        t.reap(|r, _| gone.push(r));
        assert_eq!(
            gone.len(),
            1,
            "the withdrawn entry is collected once: {gone:?}"
        );
    });
}

/// A worker takes a reference while the creator drops its own and the reaper claims
/// unused entries: a reference is only ever granted on an entry the reaper leaves alone.
#[test]
fn loom_try_ref_races_the_reapers_claim() {
    model(|| {
        let t = Arc::new(RefTable::new(2));
        let id = t.insert(7, 0, false, 1, false, 0).unwrap();
        let creator = {
            let t = Arc::clone(&t);
            thread::spawn(move || {
                t.unref(id);
            })
        };
        let user = {
            let t = Arc::clone(&t);
            thread::spawn(move || t.try_ref(id))
        };
        let mut reaped = 0;
        t.reap(|_, _| reaped += 1);
        creator.join().unwrap();
        let got = user.join().unwrap();
        if got {
            assert_eq!(reaped, 0, "claimed while referenced");
            assert_eq!(t.get(id).unwrap().refs, 1);
        }
        t.reap(|_, _| reaped += 1);
        assert_eq!(reaped, usize::from(!got), "claimed once, once unreferenced");
    });
}

/// QSBR: the reaper unlinks a node, advances the epoch and frees the node if every
/// worker has passed a quiescent point since; meanwhile an offline worker comes back
/// online and reads. It must never see the freed node's contents.
#[test]
fn loom_worker_coming_online_never_reads_a_freed_node() {
    const FREED: u64 = 0xdead;
    model(|| {
        let q = Qsbr::new(1);
        let h = q.handle(0);
        h.offline();
        let head = Arc::new(AtomicU32::new(1)); // the bucket, linking node 1
        let node = Arc::new(AtomicU64::new(42)); // node 1's contents
        let worker = {
            let (head, node) = (Arc::clone(&head), Arc::clone(&node));
            thread::spawn(move || {
                h.quiescent();
                if head.load(Ordering::Acquire) == 1 {
                    assert_ne!(node.load(Ordering::Relaxed), FREED, "read a freed node");
                }
                h.offline();
            })
        };
        head.store(0, Ordering::Release); // unlink
        let stamp = q.advance();
        if q.safe_epoch() >= stamp {
            node.store(FREED, Ordering::Relaxed); // reuse
        }
        worker.join().unwrap();
    });
}

/// QSBR: an online worker reading between two quiescent points holds back the reaper.
#[test]
fn loom_online_worker_holds_back_reclamation() {
    const FREED: u64 = 0xdead;
    model(|| {
        let q = Qsbr::new(1);
        let h = q.handle(0);
        let head = Arc::new(AtomicU32::new(1));
        let node = Arc::new(AtomicU64::new(42));
        let worker = {
            let (head, node) = (Arc::clone(&head), Arc::clone(&node));
            thread::spawn(move || {
                if head.load(Ordering::Acquire) == 1 {
                    assert_ne!(node.load(Ordering::Relaxed), FREED, "read a freed node");
                }
                h.quiescent();
            })
        };
        head.store(0, Ordering::Release);
        let stamp = q.advance();
        if q.safe_epoch() >= stamp {
            node.store(FREED, Ordering::Relaxed);
        }
        worker.join().unwrap();
    });
}
