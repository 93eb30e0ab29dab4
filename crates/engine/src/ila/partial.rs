//! Partial transport checksums (CHECKSUM_PARTIAL, GSO super-packets passed through on
//! AF_PACKET). The field then holds the folded pseudo-header sum, not the complement of
//! the full sum, and an update must add the change rather than subtract it:
//! `HC' = HC + delta` instead of RFC 1624's `~(~HC + delta)`. The ILA
//! translation applies the full-checksum rule (when it adjusts the transport checksum at
//! all); [`redo_as_partial`] turns its result into the partial one, whatever the
//! checksum mode: checksum-neutral and no-action leave the field as it was, so it stays.

use wire::checksum::fold;
use wire::ipv6::Ipv6Packet;
use wire::IpProtocol;

/// Where the TCP or UDP checksum of the IPv6 packet `pkt` is (whole or a first
/// fragment), or `None` (another protocol, or no transport header).
pub(super) fn csum_at(pkt: &[u8]) -> Option<usize> {
    let ip = Ipv6Packet::new_checked(pkt).ok()?;
    let up = ip.upper_layer().ok()?;
    if up.fragment.is_some_and(|f| f.offset != 0) {
        return None;
    }
    let at = match up.protocol {
        IpProtocol::Tcp => up.offset + 16,
        IpProtocol::Udp => up.offset + 6,
        _ => return None,
    };
    (at + 2 <= pkt.len()).then_some(at)
}

/// The partial checksum after a change that turned the field `p` into `c` under the
/// full-checksum rule: that rule gave `~c = ~p + delta`, so `delta = ~c + p` and the
/// partial result is `p + delta = 2p + ~c` (ones' complement, modulo 0xFFFF).
pub(super) fn redo_as_partial(p: u16, c: u16) -> u16 {
    fold(2 * u32::from(p) + u32::from(!c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use xlat::csum::Delta;

    proptest::proptest! {
        /// Whatever the delta, redoing a full-rule update as partial equals the partial
        /// rule (as ones'-complement values: 0 and 0xFFFF are the same number).
        #[test]
        fn matches_the_partial_rule(p in 0u16.., old in 0u16.., new in 0u16..) {
            let mut d = Delta::ZERO;
            d.word(old, new);
            let got = redo_as_partial(p, d.apply(p));
            let want = d.apply_partial(p);
            proptest::prop_assert_eq!(u32::from(got) % 0xFFFF, u32::from(want) % 0xFFFF);
        }
    }

    #[test]
    fn unchanged_field_stays() {
        for p in [0u16, 1, 0x1234, 0xFFFE, 0xFFFF] {
            assert_eq!(
                u32::from(redo_as_partial(p, p)) % 0xFFFF,
                u32::from(p) % 0xFFFF
            );
        }
    }
}
