//! `siphash::predictable_keys_for_benchmarks` in a process of its own (it changes every
//! key the process draws after it, so it must not run beside the unit tests).

use conntrack::key::HashKey;
use conntrack::siphash::{os_random, predictable_keys_for_benchmarks};
use conntrack::SipKey;

/// The words a seed gives, computed independently of the crate's sequence: SipHash-2-4
/// under `(seed, !seed)` of `(draw number, "icount")`.
fn expected(seed: u64, draw: u64) -> u64 {
    SipKey::fixed(seed, !seed).hash::<2, 4>(draw, 0x6963_6f75_6e74)
}

/// One test, so the order is fixed: seeding works before the first draw, the words are
/// the seed's sequence in draw order, and a second seeding (or one after a draw) is
/// refused.
#[test]
fn a_seed_fixes_every_later_key_and_only_before_the_first_draw() {
    assert!(predictable_keys_for_benchmarks(42));
    assert!(!predictable_keys_for_benchmarks(43), "seeded once only");
    let w: [u64; 3] = os_random();
    assert_eq!(w, [expected(42, 0), expected(42, 1), expected(42, 2)]);
    // Keys made from the sequence differ from one another (no two tables share a key)...
    let (a, b) = (SipKey::random(), SipKey::random());
    assert_ne!(a.hash2(5, 6), b.hash2(5, 6));
    assert_eq!(
        a.hash2(5, 6),
        SipKey::fixed(expected(42, 3), expected(42, 4)).hash2(5, 6)
    );
    // ... and the session index's process key comes from it too.
    let k = HashKey::process();
    assert_eq!(k, HashKey::process());
    assert_ne!(k, HashKey::new(0, 0));
}
