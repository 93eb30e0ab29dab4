//! Translator fragmentation (RFC 7915 §4.1, §5.1.1), decided and done in the engine.
//!
//! RFC 7915 §4.1: an IPv4 packet without DF that is too big for the IPv6 side once
//! translated "SHOULD be fragmented" so that each translated fragment fits. The packet is
//! cut into IPv4 fragments (`xlat::fragment`), each written into its own slot of the
//! frame's [`Output`] and translated there by the mode's own path, which
//! turns the fragment fields into an IPv6 Fragment header with the same identification
//! ([`cut_for_ipv6`]).
//!
//! The other way, an IPv6 packet translated to an IPv4 packet with DF clear (an IPv6
//! fragment, RFC 7915 §5.1.1: "The IPv4 Don't Fragment (DF) flag is cleared (set to
//! zero), allowing this packet to be further fragmented by IPv4 routers"; or any packet
//! under `df = "clear"`) that is too big for the IPv4 next hop is translated whole and
//! the IPv4 packet cut as an IPv4 router would (RFC 791 §3.2: offsets relative to the
//! original fragment's, MF on every piece but the last piece of a last fragment)
//! ([`cut_for_ipv4`]).

use xlat::fragment::{plan, write};

use super::{Emit, Frame, Output, HEADROOM};
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

/// Bytes of data per IPv4 fragment for an IPv4 next hop of `ipv4_mtu` (IHL 5: the
/// translator writes no IPv4 options), a multiple of 8.
fn ipv4_data_per_fragment(ipv4_mtu: u32) -> usize {
    (ipv4_mtu.min(u32::from(u16::MAX)) as usize).saturating_sub(20) & !7
}

/// Whether the IPv4 translation of the IPv6 packet `pkt` (at most its payload + 20
/// bytes) can be cut for `ipv4_mtu` within one [`Output`]. Checked before translating,
/// so that a packet that cannot be is refused as it arrived (and answered).
pub fn ipv4_cut_fits(pkt: &[u8], ipv4_mtu: u32) -> bool {
    let step = ipv4_data_per_fragment(ipv4_mtu);
    let Some(payload) = pkt
        .get(4..6)
        .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    else {
        return false;
    };
    step != 0 && Output::has_room_for(payload.div_ceil(step), step + 20)
}

/// Cuts the translated IPv4 packet `frame.buf[start..start + len]` (DF clear) into
/// fragments for an IPv4 next hop of `ipv4_mtu`, written in order into `frame.out`.
/// Returns [`Emit::Fragments`] and the number of pieces, or `needs_fragmentation` when it
/// cannot be cut (DF set, malformed, more pieces than the output holds: see
/// [`ipv4_cut_fits`]). The caller counts.
pub fn cut_for_ipv4(
    frame: &mut Frame<'_>,
    start: usize,
    len: usize,
    ipv4_mtu: u32,
) -> Result<(Emit, u64), DropReason> {
    let max_data = ipv4_data_per_fragment(ipv4_mtu);
    let slot_max = max_data + 20;
    let pkt = frame
        .buf
        .get(start..start.saturating_add(len))
        .ok_or(DropReason::Truncated)?;
    frame.out.clear();
    // Any failure leaves no piece behind (`Output::commit` refuses a piece past its
    // capacity, so the count needs no check of its own).
    let cut = plan(pkt, max_data).try_for_each(|(off, plen, more)| {
        let slot = frame.out.slot(slot_max)?;
        let n = write(pkt, off, plen, more, &mut slot[HEADROOM..])?;
        frame.out.commit(slot_max, HEADROOM, n).then_some(())
    });
    if cut.is_none() || frame.out.is_empty() {
        frame.out.clear();
        return Err(DropReason::NeedsFragmentation);
    }
    Ok((Emit::Fragments, frame.out.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn an_ipv4_fragment_is_cut_for_the_ipv4_next_hop_keeping_offset_and_mf() {
        // A translated IPv4 fragment: data offset 1448 (181 * 8), MF set, 1468 bytes.
        let mut buf = v4(1468, false);
        buf[6..8].copy_from_slice(&(0x2000u16 | 181).to_be_bytes());
        let mut out = Output::new();
        let mut f = Frame::new(&mut buf, 0, 0, &mut out);
        let (e, n) = cut_for_ipv4(&mut f, 0, 1468, 1400).unwrap();
        assert_eq!((e, n), (Emit::Fragments, 2));
        let got: Vec<(u16, usize)> = out
            .packets()
            .map(|p| (u16::from_be_bytes([p[6], p[7]]), p.len()))
            .collect();
        // 1448 data bytes: 1376 (1400 - 20) at 1448, 72 at 2824; MF on both.
        assert_eq!(got, [(0x2000 | 181, 1396), (0x2000 | 353, 92)]);
        // DF set: not cut.
        let mut buf = v4(1468, true);
        let mut f = Frame::new(&mut buf, 0, 0, &mut out);
        assert_eq!(
            cut_for_ipv4(&mut f, 0, 1468, 1400),
            Err(DropReason::NeedsFragmentation)
        );
        assert!(out.is_empty());
    }

    #[test]
    fn an_ipv4_cut_is_refused_beforehand_when_the_output_cannot_hold_it() {
        let v6 = |payload: u16| {
            let mut p = vec![0u8; 40];
            p[0] = 0x60;
            p[4..6].copy_from_slice(&payload.to_be_bytes());
            p
        };
        assert!(ipv4_cut_fits(&v6(65_535), 1500));
        assert!(ipv4_cut_fits(&v6(64 * 48), 68));
        assert!(!ipv4_cut_fits(&v6(64 * 48 + 1), 68));
        assert!(!ipv4_cut_fits(&v6(100), 27), "no room for 8 data bytes");
        assert!(!ipv4_cut_fits(&[0x60], 1500), "truncated");
        // 65 pieces are never written: the output's packet list stays as allocated.
        let mut buf = v4(20 + 65 * 48, false);
        let mut out = Output::new();
        let mut f = Frame::new(&mut buf, 0, 0, &mut out);
        assert_eq!(
            cut_for_ipv4(&mut f, 0, 20 + 65 * 48, 68),
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
