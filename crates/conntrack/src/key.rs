//! A flow tuple packed into two machine words, so that keys compare, hash and reverse in
//! a handful of instructions and live in atomics that other cores may read.
//!
//! Layout: `w0 = src_addr << 32 | dst_addr`, `w1 = sport << 48 | dport << 32 | proto`.
//! Reversing a tuple swaps the halves of both words.

use std::net::Ipv4Addr;

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

    /// A well-mixed 64-bit hash (two multiply-xorshift rounds).
    #[inline]
    pub fn hash(self) -> u64 {
        let mut h =
            self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ self.1.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
        h ^= h >> 31;
        h = h.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
        h ^ (h >> 29)
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
