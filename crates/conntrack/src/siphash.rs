//! SipHash-1-3 keyed with a per-process secret, for the choices an outsider must not be
//! able to predict or steer: which public port a new binding gets (RFC 6056) and where a
//! subscriber's counters live. Small and local on purpose (two words in, one word out);
//! the session index has its own keyed hash.
//!
//! Never used per packet of an existing flow: only when a binding or session is made.

use std::hash::BuildHasher;

/// A 128-bit SipHash key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SipKey(u64, u64);

impl std::fmt::Debug for SipKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SipKey(..)") // never print the secret
    }
}

impl SipKey {
    /// A fresh random key (from the OS's random source, through std's `RandomState`).
    pub fn random() -> Self {
        let s = std::collections::hash_map::RandomState::new();
        SipKey(
            s.hash_one(0x5175_6963_6b6e_6174u64),
            s.hash_one(0x706f_7274_6b65_7973u64),
        )
    }

    /// A fixed key, for tests and reproducible replays.
    pub const fn fixed(k0: u64, k1: u64) -> Self {
        SipKey(k0, k1)
    }

    /// SipHash-1-3 of the 16-byte message `a` (little-endian) then `b`.
    #[inline]
    pub fn hash2(&self, a: u64, b: u64) -> u64 {
        let mut v = [
            self.0 ^ 0x736f_6d65_7073_6575,
            self.1 ^ 0x646f_7261_6e64_6f6d,
            self.0 ^ 0x6c79_6765_6e65_7261,
            self.1 ^ 0x7465_6462_7974_6573,
        ];
        for m in [a, b] {
            v[3] ^= m;
            round(&mut v);
            v[0] ^= m;
        }
        // The final block: message length (16) in the top byte, no tail bytes.
        let m = 16u64 << 56;
        v[3] ^= m;
        round(&mut v);
        v[0] ^= m;
        v[2] ^= 0xff;
        round(&mut v);
        round(&mut v);
        round(&mut v);
        v[0] ^ v[1] ^ v[2] ^ v[3]
    }
}

#[inline(always)]
fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13);
    v[1] ^= v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16);
    v[3] ^= v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21);
    v[3] ^= v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17);
    v[1] ^= v[2];
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
