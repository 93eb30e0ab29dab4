//! SipHash-1-3 keyed with a per-process secret, for the choices an outsider must not be
//! able to predict or steer: which public port a new binding gets (RFC 6056) and where a
//! subscriber's counters live. Small and local on purpose (two words in, one word out);
//! the session index has its own keyed hash ([`crate::key::HashKey`], whose test seeds
//! this expands).
//!
//! Never used per packet of an existing flow: only when a binding or session is made.

/// A 128-bit SipHash key, kept as SipHash's initialised state.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SipKey {
    v: [u64; 4],
}

impl std::fmt::Debug for SipKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SipKey(..)") // never print the secret
    }
}

/// `N` random 64-bit words from the OS (`getrandom(2)`). Should the OS give none (it
/// always can on Linux after boot), the standard library's `RandomState`, which the OS
/// seeds as well. In a process that called [`predictable_keys_for_benchmarks`], the
/// next words of that seed's sequence instead.
pub fn os_random<const N: usize>() -> [u64; N] {
    if let Some(words) = predictable::next_words::<N>() {
        return words;
    }
    let mut words = [0u64; N];
    let mut b = vec![0u8; 8 * N];
    match getrandom::fill(&mut b) {
        Ok(()) => {
            for (w, c) in words.iter_mut().zip(b.chunks_exact(8)) {
                *w = c.iter().fold(0u64, |w, x| (w << 8) | u64::from(*x));
            }
        }
        Err(_) => {
            use std::hash::BuildHasher;
            let s = std::collections::hash_map::RandomState::new();
            for (i, w) in words.iter_mut().enumerate() {
                *w = s.hash_one(i as u64);
            }
        }
    }
    words
}

/// Makes every key this process draws from now on ([`os_random`]: the session index's
/// [`HashKey::process`](crate::key::HashKey::process), the port pools' and subscriber
/// tables' [`SipKey::random`]) a fixed function of `seed` and of the order of the draws,
/// so that two runs of the same single-threaded workload probe the same chains and pick
/// the same ports, and execute the same instructions (`quicknat-bench --icount`).
///
/// For benchmarks only: a gateway whose keys can be known is open to the hash flooding
/// and port prediction the random keys exist to prevent. The product never calls it (its
/// default stays `getrandom(2)`). Returns `false`, and changes nothing, when this process
/// already drew a key (the keys drawn so far would stay random) or was already seeded.
pub fn predictable_keys_for_benchmarks(seed: u64) -> bool {
    predictable::fix(seed)
}

/// The state behind [`predictable_keys_for_benchmarks`]: whether a key was drawn, and
/// the seed and the draws made under it. Only touched when a key is made, never per
/// packet.
mod predictable {
    use std::sync::{Mutex, PoisonError};

    use super::SipKey;

    struct Draws {
        /// A key was drawn (from the OS or the seed).
        drawn: bool,
        /// The seed's key, once fixed.
        seed: Option<SipKey>,
        /// Words handed out under the seed.
        count: u64,
    }

    static DRAWS: Mutex<Draws> = Mutex::new(Draws {
        drawn: false,
        seed: None,
        count: 0,
    });

    pub(super) fn fix(seed: u64) -> bool {
        let mut d = DRAWS.lock().unwrap_or_else(PoisonError::into_inner);
        if d.drawn || d.seed.is_some() {
            return false;
        }
        d.seed = Some(SipKey::fixed(seed, !seed));
        true
    }

    /// The next `N` words of the seed's sequence, or `None` (draw from the OS) when the
    /// process was not seeded; either way a key has now been drawn.
    pub(super) fn next_words<const N: usize>() -> Option<[u64; N]> {
        let mut d = DRAWS.lock().unwrap_or_else(PoisonError::into_inner);
        d.drawn = true;
        let key = d.seed?;
        let mut words = [0u64; N];
        for w in &mut words {
            *w = key.hash::<2, 4>(d.count, 0x6963_6f75_6e74);
            d.count += 1;
        }
        Some(words)
    }
}

impl SipKey {
    /// A fresh random key from the OS ([`os_random`]).
    pub fn random() -> Self {
        let [k0, k1] = os_random::<2>();
        Self::fixed(k0, k1)
    }

    /// The key `(k0, k1)`, for tests and reproducible replays.
    pub const fn fixed(k0: u64, k1: u64) -> Self {
        // SipHash's initialisation: "somepseudorandomlygeneratedbytes" xored with the key.
        SipKey {
            v: [
                k0 ^ 0x736f_6d65_7073_6575,
                k1 ^ 0x646f_7261_6e64_6f6d,
                k0 ^ 0x6c79_6765_6e65_7261,
                k1 ^ 0x7465_6462_7974_6573,
            ],
        }
    }

    /// SipHash-1-3 of the 16-byte message `a` (little-endian) then `b`.
    #[inline]
    pub fn hash2(&self, a: u64, b: u64) -> u64 {
        self.hash::<1, 3>(a, b)
    }

    /// SipHash-C-D of the 16 bytes `m0.to_le_bytes() ++ m1.to_le_bytes()`: C SipRounds
    /// per 8-byte word, then the length block (16 << 56), then D finalisation rounds.
    #[inline(always)]
    pub fn hash<const C: usize, const D: usize>(&self, m0: u64, m1: u64) -> u64 {
        let mut v = self.v;
        for m in [m0, m1, 16u64 << 56] {
            v[3] ^= m;
            for _ in 0..C {
                round(&mut v);
            }
            v[0] ^= m;
        }
        v[2] ^= 0xff;
        for _ in 0..D {
            round(&mut v);
        }
        v[0] ^ v[1] ^ v[2] ^ v[3]
    }
}

#[inline(always)]
fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::Hasher;

    /// An independent implementation: std's `DefaultHasher::new()` is SipHash-1-3 with
    /// the zero key, and `write` feeds raw bytes.
    #[test]
    #[allow(deprecated)]
    fn matches_std_siphash13_with_the_zero_key() {
        for (a, b) in [(0u64, 0u64), (1, 2), (u64::MAX, 0x0123_4567_89ab_cdef)] {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            let mut bytes = [0u8; 16];
            bytes[..8].copy_from_slice(&a.to_le_bytes());
            bytes[8..].copy_from_slice(&b.to_le_bytes());
            h.write(&bytes);
            assert_eq!(SipKey::fixed(0, 0).hash2(a, b), h.finish());
        }
    }

    #[test]
    fn keys_change_the_output() {
        let (a, b) = (SipKey::fixed(1, 2), SipKey::fixed(1, 3));
        assert_ne!(a.hash2(5, 6), b.hash2(5, 6));
        assert_ne!(SipKey::random().hash2(5, 6), SipKey::random().hash2(5, 6));
    }
}
