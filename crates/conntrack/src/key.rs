//! A flow tuple packed into two machine words, so that keys compare, hash and reverse in
//! a handful of instructions and live in atomics that other cores may read.
//!
//! Layout: `w0 = src_addr << 32 | dst_addr`, `w1 = sport << 48 | dport << 32 | proto`.
//! Reversing a tuple swaps the halves of both words.
//!
//! Hashing (RFC 4987's lesson for every table an attacker fills): the chain index files a
//! key under `hash & mask`, and anyone who can predict that value can send thousands of
//! flows into one chain and make every later packet walk it (with the unkeyed hash this
//! module had before, 20,000 crafted SYNs took 2.18 s against 0.02 s for random ones).
//! So the hash is SipHash-1-3 under a 128-bit [`HashKey`] drawn once per process from the
//! OS (`getrandom(2)`), the hash the Rust standard library's `HashMap` uses for the same
//! reason. SipHash is a pseudorandom function: without the key, outputs (and so bucket
//! collisions) cannot be predicted, even by an attacker who learns which of their own
//! flows collided — unlike a universal (multiply-shift) family, whose linear structure
//! lets one observed collision be extended into many. Cost: 6 SipRounds on two words,
//! about 80 instructions per packet (measured in the README's hash-flooding line).

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
        let proto = match self.1 & 0xff {
            0 => Proto::Tcp,
            1 => Proto::Udp,
            _ => Proto::Icmp,
        };
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

    /// The table hash: SipHash-1-3 of the key's 16 bytes under the secret `key` (see
    /// [`HashKey`]). Every chain index hashes with this, so nobody who does not know the
    /// key can choose tuples that share a bucket.
    #[inline]
    pub fn hash(self, key: &HashKey) -> u64 {
        key.sip13(self.0, self.1)
    }
}

/// The secret key of the table hash: SipHash's initial state, derived from two 64-bit
/// key words. [`HashKey::process`] is the one every table uses unless a test passes its own.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HashKey {
    v: [u64; 4],
}

impl std::fmt::Debug for HashKey {
    // The key is a secret: never print it (tables derive Debug).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HashKey(..)")
    }
}

#[inline(always)]
fn sip_round(v: &mut [u64; 4]) {
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

impl HashKey {
    /// The key `(k0, k1)` (tests and reproducible benchmarks; production uses
    /// [`process`](Self::process)).
    pub const fn new(k0: u64, k1: u64) -> Self {
        // SipHash's initialisation: "somepseudorandomlygeneratedbytes" xored with the key.
        HashKey {
            v: [
                k0 ^ 0x736f_6d65_7073_6575,
                k1 ^ 0x646f_7261_6e64_6f6d,
                k0 ^ 0x6c79_6765_6e65_7261,
                k1 ^ 0x7465_6462_7974_6573,
            ],
        }
    }

    /// This process's key: 128 bits from the OS (`getrandom(2)`), drawn on first use and
    /// the same for every table after that. If the OS cannot give randomness (it always
    /// can on Linux after boot), the key comes from the standard library's `RandomState`,
    /// which the OS seeds as well.
    pub fn process() -> HashKey {
        static KEY: OnceLock<HashKey> = OnceLock::new();
        *KEY.get_or_init(|| {
            let mut b = [0u8; 16];
            let (k0, k1) = match getrandom::fill(&mut b) {
                Ok(()) => {
                    let (lo, hi) = b.split_at(8);
                    let word = |s: &[u8]| s.iter().fold(0u64, |w, x| (w << 8) | u64::from(*x));
                    (word(lo), word(hi))
                }
                Err(_) => {
                    use std::hash::BuildHasher;
                    let s = std::collections::hash_map::RandomState::new();
                    (s.hash_one(0u64), s.hash_one(1u64))
                }
            };
            HashKey::new(k0, k1)
        })
    }

    /// SipHash-1-3 of the 16 bytes `m0.to_le_bytes() ++ m1.to_le_bytes()`: one SipRound
    /// per 8-byte word, then the length block (16 << 56), then three finalisation rounds.
    #[inline(always)]
    pub fn sip13(&self, m0: u64, m1: u64) -> u64 {
        self.sip::<1, 3>(m0, m1)
    }

    #[inline(always)]
    fn sip<const C: usize, const D: usize>(&self, m0: u64, m1: u64) -> u64 {
        let mut v = self.v;
        for m in [m0, m1, 16u64 << 56] {
            v[3] ^= m;
            for _ in 0..C {
                sip_round(&mut v);
            }
            v[0] ^= m;
        }
        v[2] ^= 0xff;
        for _ in 0..D {
            sip_round(&mut v);
        }
        v[0] ^ v[1] ^ v[2] ^ v[3]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tuple(p: u8, a: u32, sp: u16, b: u32, dp: u16) -> Tuple {
        let proto = [Proto::Tcp, Proto::Udp, Proto::Icmp][p as usize % 3];
        Tuple::new(
            proto,
            Endpoint::new(a.into(), sp),
            Endpoint::new(b.into(), dp),
        )
    }

    /// The SipRound and message schedule are SipHash's: with 2 compression and 4
    /// finalisation rounds the same code gives the standard library's SipHash-2-4 (the
    /// reference implementation's parameters) for any key and 16-byte message.
    #[test]
    #[allow(deprecated)] // std::hash::SipHasher: the only keyed SipHash in std
    fn sip_matches_the_reference_siphash_2_4() {
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
            assert_eq!(HashKey::new(k0, k1).sip::<2, 4>(m0, m1), h.finish());
        }
        // And 1-3 is a different function of the same inputs (the rounds are counted).
        let k = HashKey::new(1, 2);
        assert_ne!(k.sip13(3, 4), k.sip::<2, 4>(3, 4));
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
