//! The fragments of one datagram seen so far: where each lies in the datagram's payload,
//! so that an overlap is refused (RFC 5722; RFC 1858 and RFC 3128 for IPv4), an exact
//! copy is recognised as one, and the datagram is known to be complete.

use crate::verdict::DropReason;

/// Fragments one datagram may have at most. A 64 KiB datagram cut for a 1280-byte MTU is
/// 52 fragments; FreeBSD allows 16 by default (`net.inet.ip.maxfragsperpacket`). Bounds
/// the per-datagram work and the packets one release writes.
pub const MAX_PIECES: usize = 64;

/// The least offset a later fragment of a TCP datagram may have: the first fragment
/// holds the whole 20-byte TCP header (the parser refuses one that does not), and a later
/// fragment starting inside it could only rewrite it (RFC 1858 §3.2, RFC 3128: "if
/// FO=1 and PROTOCOL=TCP then drop packet").
const TCP_HEADER: u32 = 20;

/// A fragment's place in its datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Fragment offset in bytes.
    pub offset: u32,
    /// Payload bytes this fragment carries.
    pub len: u32,
    /// More Fragments flag.
    pub more: bool,
}

impl Piece {
    fn end(self) -> u32 {
        self.offset.saturating_add(self.len)
    }

    /// Whether this later fragment of a datagram of protocol `proto` starts inside the
    /// transport header its first fragment carries (RFC 3128's tiny overlapping
    /// fragment).
    pub fn in_transport_header(self, proto: u8) -> bool {
        proto == 6 && self.offset < TCP_HEADER
    }
}

/// What [`Pieces::add`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// A part of the datagram not seen before.
    New,
    /// The same bytes as a fragment already seen (a duplicate on the way).
    Copy,
}

/// The fragments of one datagram seen so far (never two that overlap).
#[derive(Clone, Debug, Default)]
pub struct Pieces {
    /// `(offset, end)` of each, in arrival order (an end is at most 65,535: see `fit`).
    seen: Vec<(u16, u16)>,
    /// Payload bytes seen (the sum of the fragments' lengths).
    bytes: u32,
    /// The payload's length, once the last fragment (MF clear) has been seen.
    end: Option<u32>,
}

impl Pieces {
    /// Whether `p` fits: new, or an exact copy of a fragment seen. A fragment
    /// overlapping another (other than an exact copy), past the datagram's end, or a
    /// second last fragment with another end is an overlap; a fragment beyond
    /// [`MAX_PIECES`] is refused.
    pub fn fit(&self, p: Piece) -> Result<Fit, DropReason> {
        let (o, e) = (p.offset, p.end());
        // RFC 791: a datagram is at most 65,535 bytes; a fragment reaching past that
        // would make a reassembling host overflow (the "ping of death").
        if e > u32::from(u16::MAX) {
            return Err(DropReason::Malformed);
        }
        for &(a, b) in &self.seen {
            let (a, b) = (u32::from(a), u32::from(b));
            if (a, b) == (o, e) {
                return Ok(Fit::Copy);
            }
            if o < b && a < e {
                return Err(DropReason::FragmentOverlap);
            }
        }
        let past_end = match self.end {
            Some(end) => e > end || !p.more,
            None => !p.more && self.seen.iter().any(|&(_, b)| u32::from(b) > e),
        };
        if past_end {
            return Err(DropReason::FragmentOverlap);
        }
        if self.seen.len() >= MAX_PIECES {
            return Err(DropReason::FragmentTooMany);
        }
        Ok(Fit::New)
    }

    /// Records `p`, which [`fit`](Self::fit) found new.
    pub fn push(&mut self, p: Piece) {
        let narrow = |v: u32| u16::try_from(v).unwrap_or(u16::MAX); // `fit` checked
        self.seen.push((narrow(p.offset), narrow(p.end())));
        self.bytes = self.bytes.saturating_add(p.len);
        if !p.more {
            self.end = Some(p.end());
        }
    }

    /// [`fit`](Self::fit), then [`push`](Self::push) when new. Nothing is recorded on an
    /// error.
    pub fn add(&mut self, p: Piece) -> Result<Fit, DropReason> {
        let fit = self.fit(p)?;
        if fit == Fit::New {
            self.push(p);
        }
        Ok(fit)
    }

    /// Whether every byte of the datagram has been seen (no two pieces overlap, so the
    /// byte count tells).
    pub fn complete(&self) -> bool {
        self.end == Some(self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(offset: u32, len: u32, more: bool) -> Piece {
        Piece { offset, len, more }
    }

    #[test]
    fn in_any_order_the_datagram_completes_once() {
        let parts = [p(0, 16, true), p(16, 16, true), p(32, 5, false)];
        for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0], [2, 0, 1]] {
            let mut s = Pieces::default();
            for (n, &i) in order.iter().enumerate() {
                assert!(!s.complete());
                assert_eq!(s.add(parts[i]), Ok(Fit::New), "{order:?} step {n}");
            }
            assert!(s.complete(), "{order:?}");
        }
    }

    #[test]
    fn an_exact_copy_is_a_copy_a_partial_overlap_is_refused() {
        let mut s = Pieces::default();
        s.add(p(0, 16, true)).unwrap();
        s.add(p(32, 8, false)).unwrap();
        assert_eq!(s.add(p(0, 16, true)), Ok(Fit::Copy));
        assert_eq!(s.add(p(8, 16, true)), Err(DropReason::FragmentOverlap));
        assert_eq!(s.add(p(0, 8, true)), Err(DropReason::FragmentOverlap));
        assert_eq!(s.add(p(16, 24, true)), Err(DropReason::FragmentOverlap));
        // Past the end the last fragment set, or a second, different end.
        assert_eq!(s.add(p(40, 8, true)), Err(DropReason::FragmentOverlap));
        assert_eq!(s.add(p(16, 8, false)), Err(DropReason::FragmentOverlap));
        assert!(!s.complete());
        s.add(p(16, 16, true)).unwrap();
        assert!(s.complete());
    }

    #[test]
    fn a_last_fragment_ending_before_a_piece_already_seen_is_refused() {
        let mut s = Pieces::default();
        s.add(p(64, 8, true)).unwrap();
        assert_eq!(s.add(p(16, 8, false)), Err(DropReason::FragmentOverlap));
    }

    #[test]
    fn a_datagram_past_65535_bytes_is_malformed() {
        let mut s = Pieces::default();
        assert_eq!(s.add(p(65_528, 8, false)), Err(DropReason::Malformed));
        assert_eq!(s.add(p(65_520, 8, false)), Ok(Fit::New));
    }

    #[test]
    fn at_most_max_pieces() {
        let mut s = Pieces::default();
        for i in 0..MAX_PIECES as u32 {
            s.add(p(8 * (i + 1), 8, true)).unwrap();
        }
        assert_eq!(
            s.add(p(8 * 1000, 8, true)),
            Err(DropReason::FragmentTooMany)
        );
        assert_eq!(s.add(p(8, 8, true)), Ok(Fit::Copy), "copies still known");
    }

    #[test]
    fn tcp_later_fragments_may_not_start_inside_the_tcp_header() {
        assert!(p(8, 100, true).in_transport_header(6));
        assert!(p(16, 100, true).in_transport_header(6));
        assert!(!p(24, 100, true).in_transport_header(6));
        assert!(!p(8, 100, true).in_transport_header(17));
    }
}
