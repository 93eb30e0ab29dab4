//! Accumulating checksum deltas: many 16-bit field changes, one checksum update.

use wire::checksum::fold64;

/// The ones'-complement sum of `~old + new` over every changed 16-bit word (RFC 1624
/// eqn 3, generalised to several words). Apply it to any checksum covering those words.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delta(u64);

impl Delta {
    /// No change.
    pub const ZERO: Delta = Delta(0);

    /// Records that a 16-bit word changed from `old` to `new`.
    #[inline]
    pub fn word(&mut self, old: u16, new: u16) {
        // Each term is below 2^17: 2^47 of them would be needed to overflow; fold once at the end.
        self.0 += u64::from(!old) + u64::from(new);
    }

    /// Records that a 32-bit word (two adjacent 16-bit words, big-endian) changed from
    /// `old` to `new`: since 2^16 ≡ 1 (mod 0xFFFF), `!old + new` as 32-bit values is the
    /// sum of both halves' terms.
    #[inline]
    pub fn word32(&mut self, old: u32, new: u32) {
        // Each term is below 2^33: 2^31 of them would be needed to overflow.
        self.0 += u64::from(!old) + u64::from(new);
    }

    /// Records a change of a 4-byte field (an IPv4 address).
    #[inline]
    pub fn addr(&mut self, old: [u8; 4], new: [u8; 4]) {
        self.word32(u32::from_be_bytes(old), u32::from_be_bytes(new));
    }

    /// Adds another delta (e.g. the pseudo-header change to a port change).
    #[inline]
    pub fn add(&mut self, other: Delta) {
        self.0 += other.0;
    }

    /// The updated checksum: `~(~HC + delta)`.
    #[inline]
    pub fn apply(self, csum: u16) -> u16 {
        !fold64(u64::from(!csum) + self.0)
    }

    /// Applies the delta to a *partial* checksum (a field holding the folded pseudo-header
    /// sum, not its complement, as CHECKSUM_PARTIAL offloads leave it): `HC + delta`.
    #[inline]
    pub fn apply_partial(self, partial: u16) -> u16 {
        fold64(u64::from(partial) + self.0)
    }

    /// Like [`apply`](Self::apply) under the IPv4 UDP rule: a zero checksum (none sent)
    /// stays zero, and a computed zero is sent as 0xFFFF (RFC 768).
    #[inline]
    pub fn apply_udp4(self, csum: u16) -> u16 {
        if csum == 0 {
            return 0;
        }
        match self.apply(csum) {
            0 => 0xFFFF,
            c => c,
        }
    }
}

/// The checksum of an ICMPv4 message after an incremental update gave `c`: RFC 1624's
/// update yields 0x0000 for a message of zeros only (an echo reply with identifier and
/// sequence 0 and no data), whose checksum is 0xFFFF — ICMPv4 has no pseudo-header, so
/// only it sums to +0, and receivers reject 0x0000. Reads `msg` only when `c` is 0.
#[inline]
pub fn icmp4_checksum(c: u16, msg: &[u8]) -> u16 {
    if c == 0
        && msg
            .iter()
            .enumerate()
            .all(|(i, &b)| b == 0 || i == 2 || i == 3)
    {
        0xFFFF
    } else {
        c
    }
}

/// Reads a big-endian u16 at `off`, if in bounds.
#[inline]
pub fn get16(buf: &[u8], off: usize) -> Option<u16> {
    let b = buf.get(off..off.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

/// Writes a big-endian u16 at `off`; false if out of bounds.
#[inline]
pub fn put16(buf: &mut [u8], off: usize, v: u16) -> bool {
    match off.checked_add(2).and_then(|end| buf.get_mut(off..end)) {
        Some(b) => {
            b.copy_from_slice(&v.to_be_bytes());
            true
        }
        None => false,
    }
}

/// Writes `v` at `off` and records the change in `delta`; false if out of bounds.
#[inline]
pub fn set16(buf: &mut [u8], off: usize, v: u16, delta: &mut Delta) -> bool {
    match get16(buf, off) {
        Some(old) => {
            delta.word(old, v);
            put16(buf, off, v)
        }
        None => false,
    }
}

/// Writes an IPv4 address at `off` and records the change; false if out of bounds.
#[inline]
pub fn set_addr(buf: &mut [u8], off: usize, v: [u8; 4], delta: &mut Delta) -> bool {
    match off.checked_add(4).and_then(|end| buf.get_mut(off..end)) {
        Some(b) => {
            let old = [b[0], b[1], b[2], b[3]];
            delta.addr(old, v);
            b.copy_from_slice(&v);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use wire::checksum::checksum;

    proptest! {
        /// Changing any set of aligned words and applying the delta gives a checksum that
        /// verifies, exactly like a full recompute (equal as ones'-complement values).
        #[test]
        fn delta_equals_recompute(mut data in proptest::collection::vec(any::<u8>(), 2..256),
                                  edits in proptest::collection::vec((any::<usize>(), any::<u16>()), 0..12)) {
            if data.len() % 2 == 1 { data.pop(); }
            let csum = checksum(&data);
            let mut d = Delta::ZERO;
            for (at, v) in edits {
                let off = (at % (data.len() / 2)) * 2;
                set16(&mut data, off, v, &mut d);
            }
            let inc = d.apply(csum);
            let full = checksum(&data);
            // 0x0000 and 0xFFFF are the same ones'-complement value; RFC 1624 eqn 3 yields
            // the form a full recompute yields except when all data words sum to zero.
            prop_assert!(inc == full || (inc ^ full) == 0xFFFF && (inc == 0 || full == 0),
                         "inc {:04x} full {:04x}", inc, full);
        }

        /// A 32-bit change recorded at once updates a checksum exactly as its two 16-bit
        /// halves recorded one by one.
        #[test]
        fn word32_equals_two_words(old in any::<u32>(), new in any::<u32>(), csum in any::<u16>()) {
            let mut one = Delta::ZERO;
            one.word32(old, new);
            let mut two = Delta::ZERO;
            two.word((old >> 16) as u16, (new >> 16) as u16);
            two.word(old as u16, new as u16);
            prop_assert_eq!(one.apply(csum), two.apply(csum));
            prop_assert_eq!(one.apply_partial(csum), two.apply_partial(csum));
        }
    }

    #[test]
    fn udp_zero_rule() {
        assert_eq!(Delta(5u64).apply_udp4(0), 0, "no checksum stays none");
        // Find a delta that drives the checksum to 0x0000 and check it is sent as 0xFFFF.
        let mut d = Delta::ZERO;
        d.word(0x0000, 0x1234);
        let c = !0x1234u16; // ~(~c + 0x1234) with ~c = 0x1234 - ... choose c so result is 0
        let r = d.apply(c);
        if r == 0 {
            assert_eq!(d.apply_udp4(c), 0xFFFF);
        }
        assert_ne!(d.apply_udp4(0xABCD), 0);
    }

    #[test]
    fn out_of_bounds_is_refused_not_a_panic() {
        let mut b = [0u8; 3];
        let mut d = Delta::ZERO;
        assert!(!set16(&mut b, 2, 1, &mut d));
        assert!(!set_addr(&mut b, 0, [1, 2, 3, 4], &mut d));
        assert_eq!(get16(&b, usize::MAX - 1), None);
        assert!(!put16(&mut b, usize::MAX, 1));
    }
}
