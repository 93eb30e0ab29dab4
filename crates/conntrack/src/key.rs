//! A flow tuple packed into two machine words, so that keys compare, hash and reverse in
//! a handful of instructions and live in atomics that other cores may read.
//!
//! Layout: `w0 = src_addr << 32 | dst_addr`, `w1 = sport << 48 | dport << 32 | proto`.
//! Reversing a tuple swaps the halves of both words.
//!
//! Hashing (RFC 4987's lesson for every table an attacker fills): anyone who can predict
//! which chain a key is filed under can send thousands of flows into one chain and make
//! every later packet walk it (with an unkeyed hash, 20,000 crafted SYNs took 2.18 s
//! against 0.02 s for random ones). So the hash is drawn at random, once per process,
//! from a *strongly universal* family, and the attacker does not know which.
//!
//! # The family: vector multiply-add-shift (Dietzfelbinger 1996; Thorup 2015, §3)
//!
//! A [`HashKey`] is three random 128-bit words `a0, a1, b`, and for a key `x = (x0, x1)`
//! (two 64-bit words) and a table of `m = 2^l` buckets
//!
//! ```text
//! S(x) = (a0·x0 + a1·x1 + b) mod 2^128        bucket(x) = S(x) >> (128 - l)
//! ```
//!
//! — the bucket is the **top** `l` bits of `S`. [`Key::hash`] returns the top 64 bits of
//! `S` and [`crate::chain::ChainIndex`] shifts them right by `64 - l`; taking low bits
//! (a mask) instead would void the proof below, since low bits of a product depend only on
//! low bits of its factors.
//!
//! **Claim** (strong universality): for any two distinct keys `x ≠ y` and any buckets
//! `i, j`, `Pr[bucket(x) = i ∧ bucket(y) = j] = 2^-2l`, over the random `a0, a1, b`,
//! whenever `l ≤ 65` (tables here have at most 2^32 buckets).
//!
//! *Proof sketch.* Say `x0 ≠ y0` (otherwise `x1 ≠ y1`: swap the roles of the words). Fix
//! `a1`. Let `Δ = x0 - y0 = 2^s·o` with `o` odd and `s ≤ 63` (`0 < |Δ| < 2^64`). Then
//! `D = S(x) - S(y) = a0·Δ + c (mod 2^128)` with `c = a1·(x1 - y1)` fixed. As `o` is odd,
//! `a0 ↦ a0·o` permutes the residues mod 2^128, so `a0·Δ = 2^s·(a0·o)` is uniform over
//! the multiples of `2^s`: `D` is uniform on the coset `c + 2^s·Z` (mod 2^128). Since
//! `b` is uniform and independent of `a0`, `S(x)` is uniform and independent of `D`, so
//! `bucket(x)` is uniform. Given `S(x)`, `S(y) = S(x) - D` is uniform on a coset of
//! `2^s·Z`; a bucket is an interval of `2^(128-l)` consecutive residues, a multiple of
//! `2^s` because `s ≤ 63 ≤ 128 - l`, so it holds exactly `2^(128-l-s)` points of the
//! coset, and `bucket(y)` is uniform given `bucket(x)`. ∎
//!
//! **What it buys.** Against an *oblivious* attacker — one whose keys do not depend on
//! the secret `a0, a1, b` — any two keys share a bucket with probability exactly `1/m`,
//! so a lookup of any key walks on average at most `1 + (n - 1)/m` nodes in a table of
//! `n` keys, whatever keys were chosen (below 2 here: indexes have at least as many
//! buckets as entries). Keys crafted against any fixed hash are just keys: they spread
//! like any others (`tests/hash_flood.rs`).
//!
//! **Limits.**
//! - Pairwise independence bounds *expected* chains, not the tail as tightly as a
//!   random function would: Chebyshev gives `Pr[a bucket holds ≥ 32 keys] ≲ 1/900` at one
//!   key per bucket, against `e^-1/32!` for a random function, and linear families have
//!   structured key sets with larger maxima than random functions (Alon, Dietzfelbinger,
//!   Miltersen, Petrank, Tardos, JACM 1999). Real flow sets do not depend on the secret
//!   key, and 20,000 keys crafted along a fixed unkeyed hash's linear structure give
//!   chains of at most 8 in the tests, but the proof alone does not promise `MAX_CHAIN`
//!   never refuses honest flows.
//! - An *adaptive* attacker who learns which of its own flows collided (through timing)
//!   learns that `a·(x - y)` is near 0 mod 2^128, and the family's linearity lets such
//!   differences be combined into more colliding keys (a pseudorandom function such as
//!   SipHash gives no such lever). [`crate::chain::MAX_CHAIN`] bounds what any attacker
//!   can do, key known or not: no chain grows past 32 nodes, so no walk costs more than
//!   32 node visits, and the excess inserts are counted `table_full` drops.
//! - The key is per process ([`HashKey::process`], `getrandom(2)`), never printed
//!   (`Debug` elides it) and never sent anywhere; a restart draws a new one.
//!
//! Cost: four 64-bit multiplies and a few additions, against about 80 instructions for
//! the SipHash-1-3 this module used before (figures in the README's hash-flooding line).

use std::net::Ipv4Addr;
use std::sync::OnceLock;

use crate::tuple::{Endpoint, Proto, Tuple};

/// A packed [`Tuple`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key(pub u64, pub u64);

impl Key {
    /// Packs a tuple.
    #[inline]
    pub fn of(t: &Tuple) -> Key {
        let w0 = (u64::from(u32::from(t.src.addr)) << 32) | u64::from(u32::from(t.dst.addr));
        let w1 = (u64::from(t.src.port) << 48) | (u64::from(t.dst.port) << 32) | t.proto as u64;
        Key(w0, w1)
    }

    /// Unpacks into a tuple.
    #[inline]
    pub fn tuple(self) -> Tuple {
        let proto = Proto::from_index(self.1 & 0xff);
        Tuple::new(
            proto,
            Endpoint::new(Ipv4Addr::from((self.0 >> 32) as u32), (self.1 >> 48) as u16),
            Endpoint::new(Ipv4Addr::from(self.0 as u32), (self.1 >> 32) as u16),
        )
    }

    /// The same flow seen from the other side.
    #[inline]
    pub fn reversed(self) -> Key {
        let ports = (self.1 >> 32) as u32;
        Key(
            self.0.rotate_left(32),
            (u64::from(ports.rotate_left(16)) << 32) | (self.1 & 0xffff_ffff),
        )
    }

    /// The table hash: the top 64 bits of `(a0·x0 + a1·x1 + b) mod 2^128` under the secret
    /// `key` (see the module doc). Buckets are its **top** bits (`hash >> (64 - l)` for
    /// `2^l` buckets): that is what the universality proof covers.
    #[inline(always)]
    pub fn hash(self, key: &HashKey) -> u64 {
        let s = key
            .a0
            .wrapping_mul(u128::from(self.0))
            .wrapping_add(key.a1.wrapping_mul(u128::from(self.1)))
            .wrapping_add(key.b);
        mix((s >> 64) as u64)
    }
}

/// The finaliser: a fixed bijection of 64-bit words (xorshift, then a multiply by an odd
/// constant) applied to the top half of `S`. The proof's pairs `(hi S(x), hi S(y))` are
/// uniform over all pairs (the claim at `l = 64`), and a bijection maps the uniform pair
/// distribution to itself, so strong universality holds for its top bits unchanged. What
/// it buys is the tail on structured key sets: the top bits of a linear function of an
/// arithmetic progression (every port of one host, a /16 scan) fall on a lattice, and for
/// some random keys that lattice packs them into few buckets (measured over 300 seeded keys:
/// chains up to 32, and one key refused 14,122 of 65,536 honest flows of a /16 scan at half
/// load); the multiply folds the low bits of `hi S` into the top ones and breaks the lattice.
#[inline(always)]
fn mix(h: u64) -> u64 {
    (h ^ (h >> 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The secret key of the table hash: the three 128-bit words `a0, a1, b` of the
/// multiply-add-shift function (module doc). [`HashKey::process`] is the one every table
/// uses unless a test passes its own.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HashKey {
    a0: u128,
    a1: u128,
    b: u128,
}

impl std::fmt::Debug for HashKey {
    // The key is a secret: never print it (tables derive Debug).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HashKey(..)")
    }
}

impl HashKey {
    /// A key derived from the seed `(k0, k1)` (tests and reproducible benchmarks;
    /// production uses [`process`](Self::process)). The three words are SipHash-2-4 of
    /// counters under the seed, so even seeds like `(0, 0)` give well-mixed words.
    pub fn new(k0: u64, k1: u64) -> Self {
        let sip = crate::siphash::SipKey::fixed(k0, k1);
        let word = |i: u64| {
            (u128::from(sip.hash::<2, 4>(i, 0)) << 64) | u128::from(sip.hash::<2, 4>(i, 1))
        };
        Self::from_words([word(0), word(1), word(2)])
    }

    fn from_words([a0, a1, b]: [u128; 3]) -> Self {
        HashKey { a0, a1, b }
    }

    /// This process's key: 384 bits from the OS ([`crate::siphash::os_random`]), drawn on first use and
    /// the same for every table after that. If the OS cannot give randomness (it always
    /// can on Linux after boot), the key comes from the standard library's `RandomState`,
    /// which the OS seeds as well.
    pub fn process() -> HashKey {
        static KEY: OnceLock<HashKey> = OnceLock::new();
        *KEY.get_or_init(|| {
            let w = crate::siphash::os_random::<6>();
            let word = |i: usize| (u128::from(w[2 * i]) << 64) | u128::from(w[2 * i + 1]);
            HashKey::from_words([word(0), word(1), word(2)])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tuple(p: u8, a: u32, sp: u16, b: u32, dp: u16) -> Tuple {
        let proto = Proto::from_index(u64::from(p) % Proto::COUNT as u64);
        Tuple::new(
            proto,
            Endpoint::new(a.into(), sp),
            Endpoint::new(b.into(), dp),
        )
    }

    /// The seed expansion is SipHash-2-4 (the reference implementation's parameters):
    /// the same as the standard library's for any key and 16-byte message.
    #[test]
    #[allow(deprecated)] // std::hash::SipHasher: the only keyed SipHash in std
    fn seed_expansion_is_the_reference_siphash_2_4() {
        use std::hash::Hasher;
        let mut rng = 0x1234_5678_9abc_def1u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for _ in 0..1000 {
            let (k0, k1, m0, m1) = (next(), next(), next(), next());
            let mut h = std::hash::SipHasher::new_with_keys(k0, k1);
            h.write(&m0.to_le_bytes());
            h.write(&m1.to_le_bytes());
            assert_eq!(
                crate::siphash::SipKey::fixed(k0, k1).hash::<2, 4>(m0, m1),
                h.finish()
            );
        }
    }

    /// The hash is `a0·x0 + a1·x1 + b` over all 128 bits: checked against schoolbook
    /// 64-bit limb arithmetic (a truncated product, e.g. 64-bit multiplies, would differ).
    #[test]
    fn hash_is_the_top_half_of_the_128_bit_multiply_add() {
        let limbs = |k: &HashKey, x0: u64, x1: u64| {
            // (hi, lo) of a·x mod 2^128 for 128-bit a, 64-bit x.
            let mul = |a: u128, x: u64| {
                let lo = u128::from(a as u64) * u128::from(x);
                let hi = ((a >> 64) as u64).wrapping_mul(x);
                ((lo >> 64) as u64).wrapping_add(hi) as u128 * (1u128 << 64) + (lo as u64) as u128
            };
            let s = mul(k.a0, x0).wrapping_add(mul(k.a1, x1)).wrapping_add(k.b);
            (s >> 64) as u64
        };
        for seed in 0..200u64 {
            let k = HashKey::new(seed, !seed);
            for (x0, x1) in [
                (0, 0),
                (u64::MAX, u64::MAX),
                (1 << 63, 1),
                (seed, seed << 40),
            ] {
                assert_eq!(Key(x0, x1).hash(&k), mix(limbs(&k, x0, x1)));
            }
        }
    }

    /// Strong universality, observed: over many keys, two fixed distinct tuples share one
    /// of 16 buckets (top 4 bits) about 1/16 of the time — for differences in the lowest
    /// bit, the top bit, a port and both words — and each lands in bucket 0 about 1/16.
    #[test]
    fn fixed_pairs_collide_with_probability_one_over_m() {
        const KEYS: u64 = 16_000;
        let x = Key(0x0a01_0203_c633_6401, 0x1f90_0050_0000_0000);
        for y in [
            Key(x.0 ^ 1, x.1),
            Key(x.0 ^ (1 << 63), x.1),
            Key(x.0, x.1 ^ (1 << 32)),
            Key(x.0 ^ (1 << 32), x.1 ^ (1 << 63)),
        ] {
            let (mut same, mut zero) = (0u64, 0u64);
            for i in 0..KEYS {
                let k = HashKey::new(i, 0x5eed);
                let (bx, by) = (x.hash(&k) >> 60, y.hash(&k) >> 60);
                same += u64::from(bx == by);
                zero += u64::from(by == 0);
            }
            // Expected 1000 each, standard deviation about 31.
            assert!((850..1150).contains(&same), "{y:?}: {same} collisions");
            assert!((850..1150).contains(&zero), "{y:?}: {zero} in bucket 0");
        }
    }

    #[test]
    fn process_key_is_one_per_process_and_not_printed() {
        assert_eq!(HashKey::process(), HashKey::process());
        assert_ne!(HashKey::process(), HashKey::new(0, 0));
        assert_eq!(format!("{:?}", HashKey::process()), "HashKey(..)");
    }

    proptest! {
        #[test]
        fn pack_unpack_reverse(p in any::<u8>(), a in any::<u32>(), sp in any::<u16>(), b in any::<u32>(), dp in any::<u16>()) {
            let t = tuple(p, a, sp, b, dp);
            prop_assert_eq!(Key::of(&t).tuple(), t);
            prop_assert_eq!(Key::of(&t).reversed(), Key::of(&t.reversed()));
            prop_assert_eq!(Key::of(&t).reversed().reversed(), Key::of(&t));
        }
    }
}
