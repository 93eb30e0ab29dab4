//! IPv4 fragmentation (RFC 791 §3.2), for the translator's own use: RFC 7915 §4.1 asks a
//! translator that receives an IPv4 packet without DF, too big for the IPv6 side, to
//! fragment it so that each translated fragment fits ("the translator MUST ... fragment
//! the IPv4 packet ... such that the translated fragments fit"). quicknat cuts the IPv4
//! packet into IPv4 fragments and translates each one; SIIT turns their fragment fields
//! into IPv6 Fragment headers with the same identification.
//!
//! Fragments after the first carry no IPv4 options (RFC 791 copies only options with the
//! "copied" flag; the ones that have it — security, source routes — are ones a translator
//! refuses anyway). Pure functions over byte slices: never panic, never allocate.

use wire::checksum::checksum;

/// How an IPv4 packet is cut: the data (bytes after the header) goes in pieces of at most
/// `max_data` bytes, a multiple of 8 except for the last. Yields `(offset, len, more)`
/// per piece, offsets relative to the packet's data. Empty if the packet cannot be cut
/// (not IPv4, DF set, malformed, or `max_data` below 8).
pub fn plan(pkt: &[u8], max_data: usize) -> impl Iterator<Item = (usize, usize, bool)> {
    let data = header(pkt).map_or(0, |(ihl, total, _)| total - ihl);
    let step = max_data & !7;
    let n = if step == 0 || data == 0 {
        0
    } else {
        data.div_ceil(step)
    };
    (0..n).map(move |i| {
        let off = i * step;
        let len = step.min(data - off);
        (off, len, off + len < data)
    })
}

/// `(ihl, total length, DF)` of an IPv4 packet that may be fragmented by us.
fn header(pkt: &[u8]) -> Option<(usize, usize, bool)> {
    if pkt.len() < 20 || pkt[0] >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(pkt[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([pkt[2], pkt[3]]));
    let df = pkt[6] & 0x40 != 0;
    (ihl >= 20 && total >= ihl && total <= pkt.len() && !df).then_some((ihl, total, df))
}

/// Writes the fragment holding data bytes `off..off + len` of `pkt` (from [`plan`]) into
/// `out` and returns its length; `None` if `out` is too small or the piece is invalid.
pub fn write(pkt: &[u8], off: usize, len: usize, more: bool, out: &mut [u8]) -> Option<usize> {
    let (ihl, total, _) = header(pkt)?;
    if !off.is_multiple_of(8) || off + len > total - ihl || (more && !len.is_multiple_of(8)) {
        return None;
    }
    let first = off == 0;
    let hl = if first { ihl } else { 20 };
    let flen = hl + len;
    let dst = out.get_mut(..flen)?;
    dst[..20].copy_from_slice(&pkt[..20]);
    if first {
        dst[20..hl].copy_from_slice(&pkt[20..ihl]);
    }
    dst[0] = 0x40 | (hl / 4) as u8;
    dst[2..4].copy_from_slice(&(flen as u16).to_be_bytes());
    // The packet may itself be a fragment: its offset and MF carry over.
    let orig = u16::from_be_bytes([pkt[6], pkt[7]]);
    let orig_off = usize::from(orig & 0x1fff) * 8;
    let orig_mf = orig & 0x2000 != 0;
    let frag_off = (orig_off + off) / 8;
    if frag_off > 0x1fff {
        return None;
    }
    let flags = if more || orig_mf { 0x2000 } else { 0 };
    dst[6..8].copy_from_slice(&(flags | frag_off as u16).to_be_bytes());
    dst[10..12].fill(0);
    let c = checksum(&dst[..hl]);
    dst[10..12].copy_from_slice(&c.to_be_bytes());
    dst[hl..].copy_from_slice(&pkt[ihl + off..ihl + off + len]);
    Some(flen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn packet(data: usize, df: bool, frag: u16) -> Vec<u8> {
        let total = 20 + data;
        let mut p = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0xab,
            0xcd,
            0,
            0,
            64,
            17,
            0,
            0,
        ];
        p[6..8].copy_from_slice(&(frag | if df { 0x4000 } else { 0 }).to_be_bytes());
        p.extend_from_slice(&[192, 0, 2, 1, 198, 51, 100, 7]);
        p.extend((0..data).map(|i| i as u8));
        let c = checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p
    }

    /// Reassembles fragments by offset; returns (data, last fragment's MF).
    fn reassemble(frags: &[Vec<u8>]) -> (Vec<u8>, bool) {
        let mut data = Vec::new();
        let mut mf = false;
        for f in frags {
            assert_eq!(checksum(&f[..20]), 0, "header checksum");
            let ihl = usize::from(f[0] & 15) * 4;
            let w = u16::from_be_bytes([f[6], f[7]]);
            let off = usize::from(w & 0x1fff) * 8;
            assert_eq!(off, data.len(), "contiguous");
            data.extend_from_slice(&f[ihl..]);
            mf = w & 0x2000 != 0;
            assert_eq!(&f[4..6], &[0xab, 0xcd], "same identification");
        }
        (data, mf)
    }

    fn cut(p: &[u8], max: usize) -> Vec<Vec<u8>> {
        plan(p, max)
            .map(|(off, len, more)| {
                let mut out = vec![0u8; 2000];
                let n = write(p, off, len, more, &mut out).unwrap();
                out.truncate(n);
                out
            })
            .collect()
    }

    #[test]
    fn cuts_and_reassembles() {
        let p = packet(3000, false, 0);
        let frags = cut(&p, 1232);
        assert_eq!(frags.len(), 3);
        assert!(frags.iter().all(|f| f.len() <= 20 + 1232));
        let (data, mf) = reassemble(&frags);
        assert_eq!(data, p[20..]);
        assert!(!mf);
    }

    #[test]
    fn a_fragment_is_cut_into_fragments_of_it() {
        // Data offset 1480 (185 * 8), more fragments follow.
        let p = packet(1480, false, 0x2000 | 185);
        let frags = cut(&p, 600);
        let w = u16::from_be_bytes([frags[0][6], frags[0][7]]);
        assert_eq!(w & 0x1fff, 185);
        let last = frags.last().unwrap();
        assert_ne!(
            u16::from_be_bytes([last[6], last[7]]) & 0x2000,
            0,
            "MF kept"
        );
    }

    #[test]
    fn df_packets_are_not_cut() {
        assert_eq!(plan(&packet(3000, true, 0), 1232).count(), 0);
    }

    proptest! {
        #[test]
        fn any_size_round_trips(data in 1usize..4000, max in 8usize..1500) {
            let p = packet(data, false, 0);
            let frags = cut(&p, max);
            prop_assert!(frags.iter().all(|f| f.len() <= 20 + max));
            prop_assert_eq!(reassemble(&frags).0, p[20..].to_vec());
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300), max in 0usize..400, off in 0usize..400, len in 0usize..400, more in any::<bool>()) {
            let mut out = vec![0u8; 300];
            let _ = plan(&bytes, max).count();
            let _ = write(&bytes, off, len, more, &mut out);
        }
    }
}
