//! RFC 4884 ICMP extensions in translated ICMP errors (RFC 7915 §4.2, §5.2): where the
//! "original datagram" field of a received error ends and its extension structure starts,
//! and how the translated error is laid out around them.
//!
//! RFC 4884 (§4-§5): a length attribute (ICMPv4: the sixth octet, in 32-bit words; ICMPv6: the
//! fifth octet, in 64-bit words) of Destination Unreachable, Time Exceeded and (ICMPv4)
//! Parameter Problem gives the length of the original datagram field, which is zero-padded
//! to a word boundary and, "when the ICMP Extension Structure is appended", to at least
//! 128 octets; the extension structure (a version 2 header with its own checksum, then
//! objects) follows it to the end of the message.
//!
//! RFC 7915 §4.2: "If the received ICMPv4 packet contains an ICMPv4 Extension [RFC4884],
//! the translation of the ICMPv4 packet will cause the ICMPv6 packet to change length.
//! When this occurs, the ICMPv6 Extension length attribute MUST be adjusted accordingly
//! ... For extensions not defined in [RFC4884], the translator passes the extensions as
//! opaque bit strings" (§5.2 likewise for ICMPv6 -> ICMPv4). The extension is carried
//! byte for byte; the translated datagram is padded, and cut so that the whole error fits
//! the minimum MTU of the outgoing family with the extension kept.
//!
//! Pure arithmetic on lengths: no packet bytes, no allocation, no panic on any input.

/// RFC 4884: "the 'original datagram' field MUST contain at least 128 octets".
pub(super) const MIN_ORIGINAL: usize = 128;
/// The extension header (version, reserved, checksum), RFC 4884 §7.
const EXT_HDR: usize = 4;

/// An extension structure found in a received ICMP error, by offsets into the message's
/// data (the bytes after the 8-byte ICMP header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Found {
    /// Length of the original datagram field (padding included), in bytes.
    pub original: usize,
    /// Length of the extension structure (to the end of the message), in bytes.
    pub ext: usize,
}

/// The extension of an error whose length attribute is `attr` (in `word`-byte words) and
/// whose data is `data_len` bytes long, if the attribute makes sense.
///
/// A length attribute of zero is a message without (or not telling of) an extension:
/// `None`, the whole data is the quote, as before RFC 4884. A length that runs past the message, leaves no room for the
/// extension header, or cannot hold the quoted IP header (`min_original`) makes no sense:
/// the message is handled as one without an extension (`None`, RFC 4884's fallback for
/// messages it cannot parse), rather than guessed at.
pub(super) fn find(attr: u8, word: usize, data_len: usize, min_original: usize) -> Option<Found> {
    if attr == 0 {
        return None;
    }
    let original = usize::from(attr) * word;
    if original < min_original || original + EXT_HDR > data_len {
        return None;
    }
    Some(Found {
        original,
        ext: data_len - original,
    })
}

/// How the translated quote is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Fit {
    /// Bytes of the quoted upper-layer data kept.
    pub keep: usize,
    /// With the extension carried: the padded original datagram field's length (a
    /// multiple of the word, at least 128), where the extension starts.
    pub field: Option<usize>,
}

/// Chooses how much of the quoted upper-layer data (`avail` bytes) to keep behind a
/// translated quoted header of `hdr` bytes, with an extension of `ext` bytes (`None`: no
/// extension is carried), given at most `cap` bytes for the quote and extension together
/// (the minimum MTU less the outer headers) and `room` bytes in the buffer from the start
/// of the translated quoted header.
///
/// Without an extension the quote is cut to fit. With one, the datagram field is cut to
/// a multiple of `word` so that field and extension fit `cap` and `room`; if
/// not even a 128-byte field fits beside the extension, the extension is left out
/// (RFC 7915 §4.2: "If the ICMPv4 Extension exceeds the maximum size of an ICMPv6 message
/// on the outgoing interface, the ICMPv4 extension SHOULD be simply truncated"; a cut
/// extension would fail its own checksum, so it is left out whole).
pub(super) fn fit(
    avail: usize,
    hdr: usize,
    ext: Option<usize>,
    word: usize,
    cap: usize,
    room: usize,
) -> Fit {
    let limit = cap.min(room);
    if let Some(e) = ext {
        let lim = limit.saturating_sub(e) / word * word;
        if lim >= MIN_ORIGINAL && lim >= hdr {
            let keep = avail.min(lim - hdr);
            return Fit {
                keep,
                field: Some(padded(hdr + keep, word)),
            };
        }
    }
    Fit {
        keep: avail.min(limit.saturating_sub(hdr)),
        field: None,
    }
}

/// The original datagram field for `len` bytes of translated datagram: zero-padded to a
/// multiple of `word`, at least 128 bytes (RFC 4884).
pub(super) fn padded(len: usize, word: usize) -> usize {
    len.div_ceil(word).saturating_mul(word).max(MIN_ORIGINAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_follows_rfc4884() {
        // 32 words of 4 bytes = 128 bytes of datagram, 12 bytes of extension.
        assert_eq!(
            find(32, 4, 140, 20),
            Some(Found {
                original: 128,
                ext: 12
            })
        );
        // Zero: no extension.
        assert_eq!(find(0, 4, 140, 20), None);
        // Past the message, or no room for the 4-byte extension header.
        assert_eq!(find(40, 4, 140, 20), None);
        assert_eq!(find(35, 4, 140, 20), None);
        assert_eq!(find(34, 4, 140, 20).map(|f| f.ext), Some(4));
        // Too short for the quoted IPv6 header (40), in 8-byte words.
        assert_eq!(find(4, 8, 200, 40), None);
        assert_eq!(find(16, 8, 200, 40).map(|f| f.original), Some(128));
        assert_eq!(find(255, 8, 200, 40), None);
    }

    #[test]
    fn padding_and_fit() {
        assert_eq!(padded(0, 8), 128);
        assert_eq!(padded(129, 8), 136);
        assert_eq!(padded(136, 8), 136);
        assert_eq!(padded(129, 4), 132);
        // Room for everything: kept whole, padded.
        assert_eq!(
            fit(100, 40, Some(12), 8, 1232, 5000),
            Fit {
                keep: 100,
                field: Some(144)
            }
        );
        // Cut to fit the cap with the extension: 1232 - 100 = 1132 -> 1128 (8-byte words).
        assert_eq!(
            fit(2000, 40, Some(100), 8, 1232, 5000),
            Fit {
                keep: 1088,
                field: Some(1128)
            }
        );
        // The buffer is the limit.
        assert_eq!(fit(2000, 20, Some(8), 4, 548, 300).field, Some(292));
        // An extension too big for a 128-byte field beside it: left out.
        assert_eq!(
            fit(500, 20, Some(500), 4, 548, 5000),
            Fit {
                keep: 500,
                field: None
            }
        );
        // Without an extension: the quote is cut to fit.
        assert_eq!(fit(2000, 48, None, 8, 1232, 5000).keep, 1184);
        assert_eq!(fit(10, 48, None, 8, 0, 5000).keep, 0);
    }
}
