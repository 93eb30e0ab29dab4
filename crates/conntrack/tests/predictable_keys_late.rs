//! `siphash::predictable_keys_for_benchmarks` after a key was drawn (its own process):
//! refused, and the keys stay the OS's.

use conntrack::siphash::predictable_keys_for_benchmarks;
use conntrack::SipKey;

#[test]
fn seeding_after_a_draw_is_refused_and_keys_stay_random() {
    let before = SipKey::random();
    assert!(!predictable_keys_for_benchmarks(42));
    // Had the seed taken, the next key would be the seed's first: it is not.
    let seeded = SipKey::fixed(
        SipKey::fixed(42, !42).hash::<2, 4>(0, 0x6963_6f75_6e74),
        SipKey::fixed(42, !42).hash::<2, 4>(1, 0x6963_6f75_6e74),
    );
    let after = SipKey::random();
    assert_ne!(after.hash2(1, 2), seeded.hash2(1, 2));
    assert_ne!(after.hash2(1, 2), before.hash2(1, 2));
}
