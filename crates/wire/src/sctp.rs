//! SCTP's common header (RFC 9260 §3.1) and its checksum, CRC32c (RFC 9260 Appendix A,
//! the Castagnoli polynomial of RFC 3309).
//!
//! Unlike TCP's and UDP's, the checksum covers no pseudo-header: translating addresses
//! leaves it right, and only a changed port changes it. It covers the whole packet, so
//! it can be recomputed only over a whole packet (never over a first fragment or the
//! quote inside an ICMP error).

/// Field offsets of the common header.
pub mod field {
    /// Source port.
    pub const SRC_PORT: usize = 0;
    /// Destination port.
    pub const DST_PORT: usize = 2;
    /// Verification tag.
    pub const VTAG: usize = 4;
    /// CRC32c, least significant byte first (RFC 9260 Appendix A).
    pub const CHECKSUM: usize = 8;
    /// The common header's length.
    pub const HEADER_LEN: usize = 12;
}

/// CRC32c's reflected polynomial.
const POLY: u32 = 0x82F6_3B78;

/// Slicing-by-8 tables: `T[0]` the classic byte table, `T[k][b]` the CRC of byte `b`
/// followed by `k` zero bytes.
const TABLES: [[u32; 256]; 8] = tables();

const fn tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut b = 0;
    while b < 256 {
        let mut c = b as u32;
        let mut i = 0;
        while i < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            i += 1;
        }
        t[0][b] = c;
        b += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut b = 0;
        while b < 256 {
            let prev = t[k - 1][b];
            t[k][b] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            b += 1;
        }
        k += 1;
    }
    t
}

/// Runs the CRC register `crc` (reflected, no final inversion) over `data`.
fn update(mut crc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let lo = crc ^ u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        crc = TABLES[7][(lo & 0xff) as usize]
            ^ TABLES[6][((lo >> 8) & 0xff) as usize]
            ^ TABLES[5][((lo >> 16) & 0xff) as usize]
            ^ TABLES[4][(lo >> 24) as usize]
            ^ TABLES[3][usize::from(c[4])]
            ^ TABLES[2][usize::from(c[5])]
            ^ TABLES[1][usize::from(c[6])]
            ^ TABLES[0][usize::from(c[7])];
    }
    for &b in chunks.remainder() {
        crc = (crc >> 8) ^ TABLES[0][((crc ^ u32::from(b)) & 0xff) as usize];
    }
    crc
}

/// CRC32c of `data` (the check value of "123456789" is 0xE3069283).
pub fn crc32c(data: &[u8]) -> u32 {
    !update(!0, data)
}

/// The checksum `packet` (a whole SCTP packet, common header first) should carry: the
/// CRC32c of the packet with its checksum field taken as zero. `None` when it is shorter
/// than the common header.
pub fn checksum(packet: &[u8]) -> Option<u32> {
    let (head, rest) = packet.split_at_checked(field::HEADER_LEN)?;
    let crc = update(!0, &head[..field::CHECKSUM]);
    let crc = update(crc, &[0; 4]);
    Some(!update(crc, rest))
}

/// The checksum as the packet carries it.
pub fn stored_checksum(packet: &[u8]) -> Option<u32> {
    let b = packet.get(field::CHECKSUM..field::CHECKSUM + 4)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Sets the ports of the whole SCTP packet `packet` and moves its checksum with them:
/// the new checksum is the old one changed by exactly what the ports changed, so a
/// packet that arrived with a wrong checksum leaves with a wrong one (as TCP's and
/// UDP's incremental updates carry an error through), never repaired. Returns false
/// (nothing written) when `packet` is shorter than the common header.
pub fn set_ports(packet: &mut [u8], sport: u16, dport: u16) -> bool {
    let (Some(before), Some(stored)) = (checksum(packet), stored_checksum(packet)) else {
        return false;
    };
    let ports = (u32::from(sport) << 16) | u32::from(dport);
    if packet[..4] == ports.to_be_bytes() {
        return true;
    }
    packet[..4].copy_from_slice(&ports.to_be_bytes());
    let after = checksum(packet).unwrap_or(before);
    let c = stored ^ before ^ after;
    packet[field::CHECKSUM..field::CHECKSUM + 4].copy_from_slice(&c.to_le_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The bit-at-a-time definition, for the table-driven one to be held to.
    fn crc32c_slow(data: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in data {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            }
        }
        !c
    }

    /// RFC 3720 §B.4's CRC32c examples (iSCSI uses the same CRC), and the catalogue's
    /// check value.
    #[test]
    fn rfc3720_examples() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62A8_AB43);
        let inc: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&inc), 0x46DD_794E);
        let dec: Vec<u8> = (0..32).rev().collect();
        assert_eq!(crc32c(&dec), 0x113F_DB5C);
    }

    /// An SCTP INIT as usrsctp (the userland stack Debian ships) sent it, captured
    /// with tcpdump: port 59730 to 13, checksum bytes d4 4d 3b cb.
    const INIT: [u8; 112] = [
        0xe9, 0x52, 0x00, 0x0d, 0x00, 0x00, 0x00, 0x00, 0xd4, 0x4d, 0x3b, 0xcb, 0x01, 0x00, 0x00,
        0x64, 0x7b, 0x01, 0x95, 0x82, 0x00, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x08, 0x00, 0xe3, 0xb6,
        0x4a, 0x7f, 0x80, 0x00, 0x00, 0x04, 0xc0, 0x00, 0x00, 0x04, 0x80, 0x08, 0x00, 0x09, 0xc0,
        0x0f, 0xc1, 0x80, 0x82, 0x00, 0x00, 0x00, 0x80, 0x02, 0x00, 0x24, 0x0b, 0x7c, 0x92, 0x40,
        0x4a, 0x5f, 0x68, 0xaa, 0x62, 0x6b, 0xa3, 0x9a, 0x3d, 0x9b, 0x21, 0x30, 0x63, 0x25, 0x21,
        0xd7, 0x40, 0x1b, 0xbc, 0xa2, 0x80, 0xcf, 0xb2, 0xf7, 0xf5, 0x1d, 0x9a, 0xee, 0x80, 0x04,
        0x00, 0x06, 0x00, 0x01, 0x00, 0x00, 0x80, 0x03, 0x00, 0x06, 0x80, 0xc1, 0x00, 0x00, 0x00,
        0x0c, 0x00, 0x08, 0x00, 0x05, 0x00, 0x06,
    ];

    #[test]
    fn a_real_packets_checksum_checks() {
        assert_eq!(checksum(&INIT), stored_checksum(&INIT));
    }

    #[test]
    fn new_ports_move_the_checksum_and_keep_it_right() {
        let mut p = INIT;
        assert!(set_ports(&mut p, 40000, 38412));
        assert_eq!(&p[..4], &[0x9c, 0x40, 0x96, 0x0c]);
        assert_eq!(checksum(&p), stored_checksum(&p));
        assert_ne!(stored_checksum(&p), stored_checksum(&INIT));
        assert_eq!(p[4..8], INIT[4..8]);
        assert_eq!(p[12..], INIT[12..]);
    }

    #[test]
    fn a_wrong_checksum_stays_wrong_by_the_same_bits() {
        let mut p = INIT;
        p[9] ^= 0x10;
        let err = stored_checksum(&p).unwrap() ^ checksum(&p).unwrap();
        assert!(set_ports(&mut p, 1, 2));
        assert_eq!(stored_checksum(&p).unwrap() ^ checksum(&p).unwrap(), err);
    }

    #[test]
    fn shorter_than_the_header_is_refused_untouched() {
        let mut p = [1u8; 11];
        assert!(!set_ports(&mut p, 5, 6));
        assert_eq!(p, [1u8; 11]);
        assert_eq!(checksum(&p), None);
    }

    proptest! {
        #[test]
        fn table_driven_equals_the_definition(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            prop_assert_eq!(crc32c(&data), crc32c_slow(&data));
        }

        #[test]
        fn set_ports_keeps_a_right_checksum_right(
            body in proptest::collection::vec(any::<u8>(), 12..300), sp: u16, dp: u16
        ) {
            let mut p = body;
            let c = checksum(&p).unwrap();
            p[8..12].copy_from_slice(&c.to_le_bytes());
            prop_assert!(set_ports(&mut p, sp, dp));
            prop_assert_eq!(checksum(&p), stored_checksum(&p));
            prop_assert_eq!(u16::from_be_bytes([p[0], p[1]]), sp);
            prop_assert_eq!(u16::from_be_bytes([p[2], p[3]]), dp);
        }
    }
}
