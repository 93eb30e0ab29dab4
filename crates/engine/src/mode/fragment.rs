//! Translator fragmentation (RFC 7915 §4.1), decided and done in the engine.
//!
//! RFC 7915 §4.1: an IPv4 packet without DF that is too big for the IPv6 side once
//! translated "SHOULD be fragmented" so that each translated fragment fits. The packet is
//! cut into IPv4 fragments (`xlat::fragment`), each written into its own slot of the
//! frame's [`Output`](super::Output) and translated there by the mode's own path, which
//! turns the fragment fields into an IPv6 Fragment header with the same identification.

use xlat::fragment::{plan, write};

use super::{Emit, Frame, HEADROOM};
use crate::DropReason;

/// Bytes an IPv4 packet's data may take per fragment so that its IPv6 translation (the
/// 40-byte IPv6 header and an 8-byte Fragment header instead of a 20-byte IPv4 header)
/// fits `ipv6_mtu`.
fn data_per_fragment(ipv6_mtu: u32) -> Option<usize> {
    (ipv6_mtu as usize).checked_sub(48)
}

/// Cuts the IPv4 packet in `frame` into fragments whose IPv6 translations fit
/// `ipv6_mtu`, and translates each with `translate(slot, start, len)`, which returns where
/// the translated fragment lies in its slot. Returns [`Emit::Fragments`] with the
/// translations in `frame.out`, or the reason nothing can be sent: `needs_fragmentation`
/// when the packet cannot be cut (DF set, malformed, more fragments than the output
/// holds), or the first reason `translate` refused a fragment with. The caller counts.
pub fn cut_for_ipv6(
    frame: &mut Frame<'_>,
    ipv6_mtu: u32,
    mut translate: impl FnMut(&mut [u8], usize, usize) -> Result<(usize, usize), DropReason>,
) -> Result<Emit, DropReason> {
    let max_data = data_per_fragment(ipv6_mtu).ok_or(DropReason::NeedsFragmentation)?;
    let slot_max = ipv6_mtu as usize + 64;
    let pkt = frame
        .buf
        .get(frame.start..frame.start.saturating_add(frame.len))
        .ok_or(DropReason::Truncated)?;
    frame.out.clear();
    for (off, len, more) in plan(pkt, max_data) {
        let slot = frame
            .out
            .slot(slot_max)
            .ok_or(DropReason::NeedsFragmentation)?;
        let n = write(pkt, off, len, more, &mut slot[HEADROOM..])
            .ok_or(DropReason::NeedsFragmentation)?;
        let (start, flen) = translate(slot, HEADROOM, n)?;
        if !frame.out.commit(slot_max, start, flen) {
            return Err(DropReason::NoHeadroom);
        }
    }
    if frame.out.is_empty() {
        return Err(DropReason::NeedsFragmentation);
    }
    Ok(Emit::Fragments)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::Output;

    fn v4(len: usize, df: bool) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
        p[6] = if df { 0x40 } else { 0 };
        p[8] = 64;
        p[9] = 17;
        p
    }

    #[test]
    fn cuts_into_pieces_that_fit_and_keeps_their_order() {
        let mut buf = v4(3000, false);
        let mut out = Output::new();
        let mut f = Frame::new(&mut buf, 0, 3000, &mut out);
        let e = cut_for_ipv6(&mut f, 1280, |_, s, l| Ok((s, l))).unwrap();
        assert_eq!(e, Emit::Fragments);
        let pieces: Vec<Vec<u8>> = out.packets().map(<[u8]>::to_vec).collect();
        // 2980 data bytes in pieces of 1232 (1280 - 48, a multiple of 8).
        assert_eq!(pieces.len(), 3);
        for (i, p) in pieces.iter().enumerate() {
            let off = u16::from_be_bytes([p[6], p[7]]) & 0x1fff;
            assert_eq!(usize::from(off) * 8, i * 1232);
            assert!(p.len() + 28 <= 1280);
        }
    }

    #[test]
    fn df_set_or_a_refused_piece_is_not_sent() {
        let mut buf = v4(3000, true);
        let mut out = Output::new();
        let mut f = Frame::new(&mut buf, 0, 3000, &mut out);
        assert_eq!(
            cut_for_ipv6(&mut f, 1280, |_, s, l| Ok((s, l))),
            Err(DropReason::NeedsFragmentation)
        );
        let mut buf = v4(3000, false);
        let mut f = Frame::new(&mut buf, 0, 3000, &mut out);
        assert_eq!(
            cut_for_ipv6(&mut f, 1280, |_, _, _| Err(DropReason::NoAddressMapping)),
            Err(DropReason::NoAddressMapping)
        );
        assert_eq!(
            cut_for_ipv6(&mut f, 40, |_, s, l| Ok((s, l))),
            Err(DropReason::NeedsFragmentation)
        );
    }

    #[test]
    fn the_largest_packet_fits_the_output() {
        let mut buf = v4(65_535, false);
        let mut out = Output::new();
        let mut f = Frame::new(&mut buf, 0, 65_535, &mut out);
        assert_eq!(
            cut_for_ipv6(&mut f, 1280, |_, s, l| Ok((s, l))),
            Ok(Emit::Fragments)
        );
        assert_eq!(out.len(), 54);
    }
}
