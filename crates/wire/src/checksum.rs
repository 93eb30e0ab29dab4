//! The Internet checksum: RFC 1071 full computation and RFC 1624
//! incremental update.
//!
//! Partial sums are `u32` values that may be added together with
//! [`combine`]; [`fold`] reduces one to 16 bits and the checksum field is its
//! ones' complement. Because 2^16 ≡ 1 (mod 0xFFFF), any grouping of the
//! big-endian words gives the same ones'-complement result, which is what
//! lets [`sum`] add 32-bit halves of 64-bit loads.
//!
//! This module must never allocate, panic (any slice length, including odd
//! and mismatched lengths, is accepted) or overflow an integer.

/// Ones'-complement partial sum of `data` as big-endian 16-bit words (RFC 1071).
///
/// An odd trailing byte is padded with a zero low byte. The result is already
/// folded to at most 0xFFFF, so it can be fed to [`combine`] any number of
/// times without overflow.
#[inline]
pub fn sum(data: &[u8]) -> u32 {
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let v = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        // Each term is < 2^33; 2^31 of them would be needed to overflow u64.
        acc += (v >> 32) + (v & 0xFFFF_FFFF);
    }
    let rest = chunks.remainder();
    let mut words = rest.chunks_exact(2);
    for w in &mut words {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        acc += u64::from(*last) << 8;
    }
    u32::from(fold64(acc))
}

/// Folds a 64-bit accumulator into 16 bits, end-around carry included. Four fixed
/// steps, no loop: after them the value is at most 0xFFFF (below 2^33, below 0x30000,
/// at most 0x10001, then at most 0xFFFF), and each step keeps it modulo 0xFFFF and
/// keeps a nonzero value nonzero, so the result is the loop's.
#[inline]
pub fn fold64(acc: u64) -> u16 {
    let a = (acc & 0xFFFF_FFFF) + (acc >> 32);
    let a = (a & 0xFFFF) + (a >> 16);
    let a = (a & 0xFFFF) + (a >> 16);
    let a = (a & 0xFFFF) + (a >> 16);
    a as u16
}

/// Folds the carries of a partial sum into 16 bits (NOT complemented).
#[inline]
pub fn fold(sum: u32) -> u16 {
    fold64(u64::from(sum))
}

/// Adds two partial sums without overflow (end-around carry, RFC 1071).
#[inline]
pub fn combine(a: u32, b: u32) -> u32 {
    let s = u64::from(a) + u64::from(b);
    // 2^32 ≡ 1 (mod 0xFFFF): moving the carry to bit 0 keeps the value.
    ((s & 0xFFFF_FFFF) + (s >> 32)) as u32
}

/// The Internet checksum of `data`: `!fold(sum(data))`.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(data))
}

/// Partial sum of the IPv4 pseudo-header (RFC 768, RFC 9293 §3.1).
#[inline]
pub fn pseudo_header_v4(src: [u8; 4], dst: [u8; 4], protocol: u8, length: u16) -> u32 {
    let s = u32::from(u16::from_be_bytes([src[0], src[1]]))
        + u32::from(u16::from_be_bytes([src[2], src[3]]))
        + u32::from(u16::from_be_bytes([dst[0], dst[1]]))
        + u32::from(u16::from_be_bytes([dst[2], dst[3]]))
        + u32::from(protocol)
        + u32::from(length);
    u32::from(fold(s))
}

/// Partial sum of the IPv6 pseudo-header (RFC 8200 §8.1).
#[inline]
pub fn pseudo_header_v6(src: &[u8; 16], dst: &[u8; 16], next_header: u8, length: u32) -> u32 {
    let s = u64::from(sum(src))
        + u64::from(sum(dst))
        + (u64::from(length) >> 16)
        + (u64::from(length) & 0xFFFF)
        + u64::from(next_header);
    u32::from(fold64(s))
}

/// RFC 1624 eqn. 3 incremental update for one 16-bit word: `HC' = ~(~HC + ~m + m')`.
///
/// Unlike eqn. 2 (`HC' = HC - ~m - m'`), eqn. 3 can yield 0xFFFF (-0) only
/// when `~HC + ~m + m'` is +0, i.e. `HC == 0xFFFF`, `m == 0xFFFF` and
/// `m' == 0`; a checksum computed over any non-zero data is never 0xFFFF, so
/// for real packets the result matches a full recomputation bit for bit
/// (RFC 1624 §3 shows eqn. 2 giving 0xFFFF where 0x0000 is right).
#[inline]
pub fn update16(csum: u16, old: u16, new: u16) -> u16 {
    let s = u32::from(!csum) + u32::from(!old) + u32::from(new);
    !fold(s)
}

/// RFC 1624 incremental update for a 32-bit field (two 16-bit words), e.g. an IPv4 address.
#[inline]
pub fn update32(csum: u16, old: [u8; 4], new: [u8; 4]) -> u16 {
    let s = u32::from(!csum)
        + u32::from(!u16::from_be_bytes([old[0], old[1]]))
        + u32::from(!u16::from_be_bytes([old[2], old[3]]))
        + u32::from(u16::from_be_bytes([new[0], new[1]]))
        + u32::from(u16::from_be_bytes([new[2], new[3]]));
    !fold(s)
}

/// RFC 1624 incremental update for a field that starts at an even offset
/// and changed from `old` to `new` (e.g. an IPv6 address, 16 bytes).
///
/// An odd length is exact: the byte after the field appears unchanged on both
/// sides, so zero padding both of them gives the same difference. Slices of
/// different lengths never panic: the shorter is taken as zero-padded (exact
/// when the packet really held zeros there).
#[inline]
pub fn update_bytes(csum: u16, old: &[u8], new: &[u8]) -> u16 {
    // ~sum(old) is the ones'-complement negation of the whole old field.
    let s = u32::from(!csum) + u32::from(!fold(sum(old))) + sum(new);
    !fold(s)
}

/// Applies an update `f` to an IPv4 UDP checksum, honouring RFC 768's zero.
///
/// A checksum of 0 means the sender computed none: it is returned unchanged.
/// Otherwise `f` is applied and a result of 0x0000 is sent as 0xFFFF, since
/// 0 on the wire would mean "no checksum" (RFC 768).
#[inline]
pub fn udp4_update(csum: u16, f: impl FnOnce(u16) -> u16) -> u16 {
    if csum == 0 {
        return 0;
    }
    match f(csum) {
        0 => 0xFFFF,
        c => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A naive reference: u16 words with end-around carry, one at a time.
    fn naive(data: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for (i, b) in data.iter().enumerate() {
            s += if i % 2 == 0 {
                u32::from(*b) << 8
            } else {
                u32::from(*b)
            };
            s = (s & 0xFFFF) + (s >> 16);
        }
        s as u16
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to 0xddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&d)), 0xddf2);
        assert_eq!(checksum(&d), !0xddf2);
    }

    #[test]
    fn ipv4_header_example() {
        // The classic header 4500 0073 0000 4000 4011 b861 c0a8 0001 c0a8 00c7.
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0);
        let mut z = h;
        z[10] = 0;
        z[11] = 0;
        assert_eq!(checksum(&z), 0xb861);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(sum(&[0xab]), 0xab00);
        assert_eq!(sum(&[0x12, 0x34, 0xab]), 0x12 * 256 + 0x34 + 0xab00);
        assert_eq!(sum(&[]), 0);
        assert_eq!(checksum(&[]), 0xFFFF);
    }

    #[test]
    fn large_buffers_do_not_overflow() {
        let big = vec![0xFFu8; 200_000 + 1];
        assert_eq!(fold(sum(&big)), naive(&big));
        let s = sum(&big);
        let mut acc = 0;
        for _ in 0..100_000 {
            acc = combine(acc, s);
        }
        let _ = fold(acc);
        assert_eq!(combine(u32::MAX, u32::MAX), 0xFFFF_FFFF);
    }

    #[test]
    fn rfc1624_section3_minus_zero_corner() {
        // RFC 1624 §3: other octets sum to 0xCD7A, field m = 0x5555 -> 0x3285.
        let hc = !fold(0xCD7A + 0x5555);
        assert_eq!(hc, 0xDD2F);
        // Full recomputation: ~(0xCD7A + 0x3285) = ~0xFFFF = 0x0000.
        let full = !fold(0xCD7A + 0x3285);
        assert_eq!(full, 0x0000);
        // Eqn. 2 (HC - ~m - m'), with ones'-complement subtraction done as
        // a + ~b and end-around carry, gives -0 = 0xFFFF.
        let sub = |a: u16, b: u16| -> u16 { fold(u32::from(a) + u32::from(!b)) };
        let eqn2 = sub(sub(hc, !0x5555), 0x3285);
        assert_eq!(eqn2, 0xFFFF);
        // Eqn. 3 gives the right +0.
        assert_eq!(update16(hc, 0x5555, 0x3285), 0x0000);
        // And the only way eqn. 3 yields 0xFFFF is HC = 0xFFFF, m = 0xFFFF, m' = 0.
        assert_eq!(update16(0xFFFF, 0xFFFF, 0x0000), 0xFFFF);
    }

    #[test]
    fn pseudo_headers() {
        let v4 = pseudo_header_v4([192, 168, 0, 1], [192, 168, 0, 199], 17, 0x5f);
        let manual = sum(&[192, 168, 0, 1, 192, 168, 0, 199, 0, 17, 0, 0x5f]);
        assert_eq!(fold(v4), fold(manual));
        let a = [0x20u8, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let b = [0xfeu8, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let v6 = pseudo_header_v6(&a, &b, 58, 0x0001_0020);
        let mut buf = [0u8; 40];
        buf[..16].copy_from_slice(&a);
        buf[16..32].copy_from_slice(&b);
        buf[32..36].copy_from_slice(&0x0001_0020u32.to_be_bytes());
        buf[39] = 58;
        assert_eq!(fold(v6), fold(sum(&buf)));
    }

    #[test]
    fn udp4_zero_rules() {
        assert_eq!(udp4_update(0, |_| 0x1234), 0);
        assert_eq!(udp4_update(0x1111, |_| 0), 0xFFFF);
        assert_eq!(udp4_update(0x1111, |c| c + 1), 0x1112);
    }

    #[test]
    fn update_bytes_mismatched_lengths_do_not_panic() {
        let c = 0x1234;
        assert_eq!(update_bytes(c, &[], &[]), update16(c, 0, 0));
        assert_eq!(update_bytes(c, &[1], &[2, 3, 4]), {
            let c1 = update16(c, 0x0100, 0x0203);
            update16(c1, 0, 0x0400)
        });
    }

    fn rewrite(data: &mut [u8], off: usize, new: &[u8]) {
        data[off..off + new.len()].copy_from_slice(new);
    }

    // The property, precisely: let C = checksum(D). After rewriting a field
    // of D (at an even offset, so it is made of whole 16-bit words) into D',
    // the updated value C' must make D' verify, i.e.
    //     fold(sum(D') + C') == 0xFFFF        (ones'-complement zero, -0).
    // That is "C' equals the recomputed checksum as a ones'-complement value":
    // 0x0000 and 0xFFFF are the two encodings of zero, and a comparison of raw
    // bits would wrongly fail only on that pair. In fact eqn. 3 gives the
    // recomputed bits exactly, so we check that too.
    //
    // The one exception is D' all zeros, which no real packet is (the
    // pseudo-header alone holds a non-zero protocol number): its sum is +0,
    // so only C' = 0xFFFF verifies, while eqn. 3 may give 0x0000 (the same
    // ones'-complement value). There we check C' is one of the two zeros.
    fn assert_equivalent(modified: &[u8], updated: u16) {
        if modified.iter().all(|&b| b == 0) {
            assert!(updated == 0 || updated == 0xFFFF, "{updated:#x}");
            return;
        }
        assert_eq!(fold(combine(sum(modified), u32::from(updated))), 0xFFFF);
        assert_eq!(updated, checksum(modified));
    }

    proptest! {
        #[test]
        fn fold64_matches_the_carry_loop(acc in any::<u64>()) {
            let mut a = acc;
            while a >> 16 != 0 {
                a = (a & 0xFFFF) + (a >> 16);
            }
            prop_assert_eq!(fold64(acc), a as u16);
        }

        #[test]
        fn sum_matches_naive(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            prop_assert_eq!(fold(sum(&data)), naive(&data));
        }

        #[test]
        fn split_sums_combine(data in proptest::collection::vec(any::<u8>(), 0..600), cut in any::<usize>()) {
            // Splitting at an even offset keeps the word alignment.
            let cut = (cut % (data.len() + 1)) & !1;
            let s = combine(sum(&data[..cut]), sum(&data[cut..]));
            prop_assert_eq!(fold(s) , fold(sum(&data)));
        }

        #[test]
        fn incremental_16(mut data in proptest::collection::vec(any::<u8>(), 2..300),
                          pos in any::<usize>(), new in any::<u16>()) {
            let off = (pos % (data.len() / 2)) * 2;
            let c = checksum(&data);
            let old = u16::from_be_bytes([data[off], data[off + 1]]);
            rewrite(&mut data, off, &new.to_be_bytes());
            assert_equivalent(&data, update16(c, old, new));
        }

        #[test]
        fn incremental_32(mut data in proptest::collection::vec(any::<u8>(), 4..300),
                          pos in any::<usize>(), new in any::<[u8; 4]>()) {
            let off = (pos % ((data.len() - 2) / 2)) * 2;
            let c = checksum(&data);
            let old = [data[off], data[off + 1], data[off + 2], data[off + 3]];
            rewrite(&mut data, off, &new);
            assert_equivalent(&data, update32(c, old, new));
        }

        #[test]
        fn incremental_bytes(mut data in proptest::collection::vec(any::<u8>(), 1..300),
                             pos in any::<usize>(), new in proptest::collection::vec(any::<u8>(), 0..20)) {
            // A field of any length (odd included) at an even offset; when it
            // runs to the odd end of the packet, its padding byte is the
            // packet's own zero padding.
            let off = (pos % data.len().div_ceil(2)) * 2;
            let len = new.len().min(data.len() - off);
            let c = checksum(&data);
            let old = data[off..off + len].to_vec();
            rewrite(&mut data, off, &new[..len]);
            assert_equivalent(&data, update_bytes(c, &old, &new[..len]));
        }

        #[test]
        fn incremental_zero_field(mut data in proptest::collection::vec(any::<u8>(), 2..64)) {
            // Drive the packet toward all-zero to exercise the 0x0000/0xFFFF pair.
            let c = checksum(&data);
            let old = data.clone();
            data.iter_mut().for_each(|b| *b = 0);
            assert_equivalent(&data, update_bytes(c, &old, &data));
        }

        #[test]
        fn udp4_update_never_zero(c in 1..=u16::MAX, old in any::<u16>(), new in any::<u16>()) {
            prop_assert_ne!(udp4_update(c, |c| update16(c, old, new)), 0);
        }
    }
}
