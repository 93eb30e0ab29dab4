//! IPv4-embedded IPv6 addresses (RFC 6052): the NAT64 prefix `Pref64::/n`, and how an IPv4
//! address is written into and read back out of an IPv6 address under it (§2.2, Figure 1).
//!
//! This module is pure address arithmetic for SIIT, NAT64 and CLAT. It never allocates on
//! the per-packet path (`embed`, `extract`, `contains`, `wkp_allows` work on integers only),
//! never panics on any input, and never decides policy: whether an address may be
//! translated at all (RFC 6052 §3.1, [`wkp_allows`]) is for the caller to ask.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use crate::prefix::{mask6 as mask, Ipv6Prefix};

/// Why a prefix cannot be a `Pref64::/n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pref64Error {
    /// The length is not one of 32, 40, 48, 56, 64 or 96.
    BadLength(u8),
    /// The address has bits set beyond the prefix length.
    HostBitsSet,
    /// A /96 prefix has a non-zero "u" octet (bits 64 to 71).
    UOctetNotZero,
    /// The text is not `<IPv6 address>/<length>`.
    Syntax,
}

impl fmt::Display for Pref64Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pref64Error::BadLength(len) => write!(
                f,
                "prefix length /{len} is not one of /32, /40, /48, /56, /64 or /96 (RFC 6052 §2.2)"
            ),
            Pref64Error::HostBitsSet => {
                f.write_str("prefix has address bits set beyond its prefix length")
            }
            Pref64Error::UOctetNotZero => f.write_str(
                "bits 64 to 71 (the \"u\" octet) of a /96 prefix must be zero (RFC 6052 §2.2)",
            ),
            Pref64Error::Syntax => f.write_str(
                "expected an IPv6 prefix of the form <address>/<length>, e.g. 64:ff9b::/96",
            ),
        }
    }
}

impl std::error::Error for Pref64Error {}

/// Mask of the "u" octet, bits 64 to 71 counted from the most significant bit.
const U_OCTET: u128 = 0xff << 56;

/// A NAT64 prefix (Pref64::/n), n in {32, 40, 48, 56, 64, 96}.
///
/// Invariants (checked by [`Pref64::new`]): the length is valid, no bit beyond it is set,
/// and the "u" octet is zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pref64 {
    prefix: [u8; 16],
    len: u8,
}

impl Pref64 {
    /// The Well-Known Prefix `64:ff9b::/96` (RFC 6052 §2.1).
    pub const WELL_KNOWN: Pref64 = Pref64 {
        prefix: [0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        len: 96,
    };

    /// Validates `prefix/len` as a NAT64 prefix.
    ///
    /// Checks, in order: the length (RFC 6052 §2.2: "the prefix length ... 32, 40, 48, 56,
    /// 64, or 96"), then that no bit beyond the length is set, then the "u" octet.
    /// For lengths up to 64 the u octet lies beyond the prefix, so a non-zero u octet is
    /// reported as [`Pref64Error::HostBitsSet`]; [`Pref64Error::UOctetNotZero`] is the /96
    /// case, where the u octet is part of the prefix itself.
    pub fn new(prefix: Ipv6Addr, len: u8) -> Result<Self, Pref64Error> {
        if !matches!(len, 32 | 40 | 48 | 56 | 64 | 96) {
            return Err(Pref64Error::BadLength(len));
        }
        let bits = u128::from(prefix);
        if bits & !mask(len) != 0 {
            return Err(Pref64Error::HostBitsSet);
        }
        // RFC 6052 §2.2: "Bits 64 to 71 of the address are reserved for compatibility with
        // the host identifier format defined in the IPv6 addressing architecture [RFC4291].
        // These bits MUST be set to zero. When using a /96 Network-Specific Prefix, the
        // administrators MUST ensure that the bits 64 to 71 are set to zero."
        if bits & U_OCTET != 0 {
            return Err(Pref64Error::UOctetNotZero);
        }
        Ok(Pref64 {
            prefix: prefix.octets(),
            len,
        })
    }

    /// The prefix length n.
    #[allow(clippy::len_without_is_empty)] // a prefix length, not a collection
    pub fn len(&self) -> u8 {
        self.len
    }

    /// The prefix address (all bits beyond `len` are zero).
    pub fn prefix(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.prefix)
    }

    /// The same prefix as a plain [`Ipv6Prefix`] (for overlap checks with other prefixes).
    pub fn as_prefix(&self) -> Ipv6Prefix {
        Ipv6Prefix::new(self.prefix(), self.len)
            .unwrap_or_else(|_| unreachable!("a Pref64 has no host bits set"))
    }

    /// Whether this is the Well-Known Prefix `64:ff9b::/96`, which RFC 6052 §3.1 restricts
    /// to global IPv4 addresses (see [`wkp_allows`]).
    pub fn is_well_known(&self) -> bool {
        *self == Self::WELL_KNOWN
    }

    /// Embeds `v4` per RFC 6052 §2.2 (Figure 1): the IPv4 address follows the prefix, split
    /// around the u octet (bits 64 to 71), which is zero; the suffix is zero.
    ///
    /// This does not apply RFC 6052 §3.1 (no non-global addresses under the Well-Known
    /// Prefix): call [`wkp_allows`] first where that rule applies.
    pub fn embed(&self, v4: Ipv4Addr) -> Ipv6Addr {
        let v4 = u128::from(u32::from(v4));
        let base = u128::from_be_bytes(self.prefix);
        // RFC 6052 §2.2: "The IPv4 address is encoded following the prefix, most
        // significant bits first. Depending of the prefix length, the 4 octets of the
        // address may be separated by the reserved octet "u", whose 8 bits MUST be set to
        // zero."  "When the prefix is 96 bits long, the IPv4 address is encoded in
        // positions 96 to 127."
        let embedded = if self.len == 96 {
            v4
        } else {
            // "When the prefix is 32 bits long, the IPv4 address is encoded in positions
            // 32 to 63. When the prefix is 40 bits long, 24 bits of the IPv4 address are
            // encoded in positions 40 to 63, with the remaining 8 bits in position 72 to
            // 79. [...48: 16 + 16, 56: 8 + 24...] When the prefix is 64 bits long, the IPv4
            // address is encoded in positions 72 to 103."
            let (_before_u, after_u) = split(self.len);
            let hi = v4 >> after_u; // the `_before_u` leading bits, ending at bit 63
            let lo = v4 & low_bits(after_u); // the rest, starting at bit 72
            (hi << 64) | (lo << (56 - after_u))
        };
        // The suffix stays zero: "These bits are reserved for future extensions and SHOULD
        // be set to zero."
        Ipv6Addr::from(base | embedded)
    }

    /// Extracts the IPv4 address per RFC 6052 §2.2; `None` if `v6` is not under this
    /// prefix.
    ///
    /// The u octet and the suffix are not checked on extraction: they are accepted and
    /// ignored. RFC 6052 §2.2 says so for the suffix ("Address translators
    /// who receive IPv4-embedded IPv6 addresses where these bits are not set to zero SHOULD
    /// ignore the bits' value and proceed as if the bits' value were zero.") and only
    /// requires the u octet to be zero when an address is formed; we treat it the same way
    /// rather than invent a drop the RFC does not ask for. (For a /96 prefix the u octet is
    /// part of the prefix, so [`Pref64::contains`] already requires it to be zero.)
    pub fn extract(&self, v6: Ipv6Addr) -> Option<Ipv4Addr> {
        if !self.contains(v6) {
            return None;
        }
        let bits = u128::from(v6);
        let v4 = if self.len == 96 {
            bits & low_bits(32)
        } else {
            let (before_u, after_u) = split(self.len);
            let hi = (bits >> 64) & low_bits(before_u);
            let lo = (bits >> (56 - after_u)) & low_bits(after_u);
            (hi << after_u) | lo
        };
        // `v4` has at most 32 significant bits by construction.
        Some(Ipv4Addr::from(v4 as u32))
    }

    /// Whether `v6` lies under this prefix (its first `len` bits equal the prefix).
    pub fn contains(&self, v6: Ipv6Addr) -> bool {
        u128::from(v6) & mask(self.len) == u128::from_be_bytes(self.prefix)
    }
}

/// For a prefix of 32..=64 bits: how many IPv4 bits precede the u octet (bits `len..64`)
/// and how many follow it (from bit 72).
#[inline]
fn split(len: u8) -> (u32, u32) {
    let before_u = 64u32.saturating_sub(u32::from(len)).min(32);
    (before_u, 32 - before_u)
}

/// A `u128` with its `n` (at most 127) least significant bits set.
#[inline]
fn low_bits(n: u32) -> u128 {
    (1u128 << (n & 127)) - 1
}

impl fmt::Display for Pref64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.prefix(), self.len)
    }
}

impl FromStr for Pref64 {
    type Err = Pref64Error;

    /// Parses `64:ff9b::/96` (address, slash, decimal length).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, len) = s.trim().split_once('/').ok_or(Pref64Error::Syntax)?;
        let addr: Ipv6Addr = addr.parse().map_err(|_| Pref64Error::Syntax)?;
        if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Pref64Error::Syntax);
        }
        let len: u8 = len.parse().map_err(|_| Pref64Error::Syntax)?;
        Pref64::new(addr, len)
    }
}

/// Whether the Well-Known Prefix may carry `v4`: false for the special-purpose blocks that
/// are not globally reachable.
///
/// RFC 6052 §3.1: "The Well-Known Prefix MUST NOT be used to represent non-global IPv4
/// addresses, such as those defined in [RFC1918] or listed in Section 3 of [RFC5735]."
/// and "IPv4 translators MUST NOT translate packets in which an address is composed of the
/// Well-Known Prefix and a non-global IPv4 address; they MUST drop these packets."
///
/// The blocks refused are those of the IANA IPv4 Special-Purpose Address Registry (RFC
/// 6890 §2.2.2) marked "Global: False", plus multicast and the limited broadcast, which
/// RFC 5735 §3 lists. Deliberately *allowed*: 192.88.99.0/24 (6to4 relay anycast, "Global:
/// True" in RFC 6890, deprecated by RFC 7526), and 192.0.0.9/32 and 192.0.0.10/32 (PCP and
/// TURN anycast, RFC 7723 and RFC 8155, registered as globally reachable inside
/// 192.0.0.0/24).
///
/// The documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24) are refused
/// too, although RFC 6052 §2.4 illustrates `64:ff9b::192.0.2.33`: tests and labs that need
/// documentation addresses must use a Network-Specific Prefix such as `2001:db8:64::/96`.
pub fn wkp_allows(v4: Ipv4Addr) -> bool {
    /// (network, prefix length, where it is defined)
    const NOT_GLOBAL: [(u32, u32); 15] = [
        (0x0000_0000, 8),  // 0.0.0.0/8 "this network", RFC 1122 §3.2.1.3
        (0x0a00_0000, 8),  // 10.0.0.0/8 private-use, RFC 1918
        (0x6440_0000, 10), // 100.64.0.0/10 shared address space, RFC 6598
        (0x7f00_0000, 8),  // 127.0.0.0/8 loopback, RFC 1122 §3.2.1.3
        (0xa9fe_0000, 16), // 169.254.0.0/16 link local, RFC 3927
        (0xac10_0000, 12), // 172.16.0.0/12 private-use, RFC 1918
        (0xc000_0000, 24), // 192.0.0.0/24 IETF protocol assignments, RFC 6890 (but see below)
        (0xc000_0200, 24), // 192.0.2.0/24 TEST-NET-1, RFC 5737
        (0xc0a8_0000, 16), // 192.168.0.0/16 private-use, RFC 1918
        (0xc612_0000, 15), // 198.18.0.0/15 benchmarking, RFC 2544
        (0xc633_6400, 24), // 198.51.100.0/24 TEST-NET-2, RFC 5737
        (0xcb00_7100, 24), // 203.0.113.0/24 TEST-NET-3, RFC 5737
        (0xe000_0000, 4),  // 224.0.0.0/4 multicast, RFC 5771 (listed in RFC 5735 §3)
        (0xf000_0000, 4),  // 240.0.0.0/4 reserved, RFC 1112 §4
        (0xffff_ffff, 32), // 255.255.255.255/32 limited broadcast, RFC 919 (inside 240/4)
    ];
    let a = u32::from(v4);
    // 192.0.0.9/32 (PCP anycast, RFC 7723) and 192.0.0.10/32 (TURN anycast, RFC 8155) are
    // registered "Globally Reachable: True" within 192.0.0.0/24.
    if a == 0xc000_0009 || a == 0xc000_000a {
        return true;
    }
    !NOT_GLOBAL
        .iter()
        .any(|&(net, len)| a & (u32::MAX << (32 - len)) == net)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    fn pref(s: &str) -> Pref64 {
        s.parse().unwrap()
    }

    /// RFC 6052 §2.4, Table 1: 192.0.2.33 under each prefix length.
    const RFC6052_TABLE: [(&str, &str); 7] = [
        ("2001:db8::/32", "2001:db8:c000:221::"),
        ("2001:db8:100::/40", "2001:db8:1c0:2:21::"),
        ("2001:db8:122::/48", "2001:db8:122:c000:2:2100::"),
        ("2001:db8:122:300::/56", "2001:db8:122:3c0:0:221::"),
        ("2001:db8:122:344::/64", "2001:db8:122:344:c0:2:2100:0"),
        ("2001:db8:122:344::/96", "2001:db8:122:344::192.0.2.33"),
        ("64:ff9b::/96", "64:ff9b::192.0.2.33"),
    ];

    #[test]
    fn rfc6052_section_2_4_examples() {
        let v4 = Ipv4Addr::new(192, 0, 2, 33);
        for (p, expected) in RFC6052_TABLE {
            let p = pref(p);
            let expected = v6(expected);
            assert_eq!(p.embed(v4), expected, "embed under {p}");
            assert_eq!(p.extract(expected), Some(v4), "extract under {p}");
            assert!(p.contains(expected));
        }
    }

    #[test]
    fn well_known_prefix() {
        assert_eq!(pref("64:ff9b::/96"), Pref64::WELL_KNOWN);
        assert!(Pref64::WELL_KNOWN.is_well_known());
        assert!(!pref("2001:db8:64::/96").is_well_known());
        assert!(!pref("64:ff9b::/64").is_well_known());
        assert_eq!(Pref64::WELL_KNOWN.to_string(), "64:ff9b::/96");
        assert_eq!(Pref64::WELL_KNOWN.len(), 96);
        assert_eq!(Pref64::WELL_KNOWN.prefix(), v6("64:ff9b::"));
    }

    #[test]
    fn display_round_trips() {
        for (p, _) in RFC6052_TABLE {
            assert_eq!(pref(p).to_string(), p);
            assert_eq!(pref(&pref(p).to_string()), pref(p));
        }
    }

    #[test]
    fn rejects_bad_lengths() {
        for len in (0..=255u8).filter(|l| !matches!(l, 32 | 40 | 48 | 56 | 64 | 96)) {
            assert_eq!(
                Pref64::new(Ipv6Addr::UNSPECIFIED, len),
                Err(Pref64Error::BadLength(len))
            );
        }
        assert_eq!(
            "64:ff9b::/128".parse::<Pref64>(),
            Err(Pref64Error::BadLength(128))
        );
        assert_eq!("64:ff9b::/300".parse::<Pref64>(), Err(Pref64Error::Syntax));
    }

    #[test]
    fn rejects_host_bits() {
        assert_eq!(
            "2001:db8::1/96".parse::<Pref64>(),
            Err(Pref64Error::HostBitsSet)
        );
        assert_eq!(
            "2001:db8:100::/32".parse::<Pref64>(),
            Err(Pref64Error::HostBitsSet)
        );
        assert_eq!(
            "2001:db8:1:1::/56".parse::<Pref64>(),
            Err(Pref64Error::HostBitsSet)
        );
        // Bit 32 (first bit after a /32) and bit 95 (last bit before a /96).
        assert_eq!(
            "2001:db8:8000::/32".parse::<Pref64>(),
            Err(Pref64Error::HostBitsSet)
        );
        assert!("2001:db8:0:0:0:1::/96".parse::<Pref64>().is_ok());
        assert_eq!(
            "2001:db8:0:0:0:1::/64".parse::<Pref64>(),
            Err(Pref64Error::HostBitsSet)
        );
    }

    #[test]
    fn u_octet_rules() {
        // /96: the u octet is inside the prefix and must be zero.
        assert_eq!(
            "2001:db8:0:0:100::/96".parse::<Pref64>(),
            Err(Pref64Error::UOctetNotZero)
        );
        assert_eq!(
            "2001:db8:0:0:8000::/96".parse::<Pref64>(),
            Err(Pref64Error::UOctetNotZero)
        );
        assert!("2001:db8:0:0:ff::/96".parse::<Pref64>().is_ok()); // bits 72..79 are fine
                                                                   // Shorter prefixes: the u octet is beyond the prefix, so it is a host bit.
        assert_eq!(
            "2001:db8::100:0:0:0/64".parse::<Pref64>(),
            Err(Pref64Error::HostBitsSet)
        );
        // Embedding always leaves the u octet zero.
        for (p, _) in RFC6052_TABLE {
            let a = u128::from(pref(p).embed(Ipv4Addr::new(255, 255, 255, 255)));
            assert_eq!(a & U_OCTET, 0, "u octet under {p}");
        }
        // Extraction ignores a non-zero u octet and suffix (for lengths below 96).
        let p = pref("2001:db8:122:344::/64");
        assert_eq!(
            p.extract(v6("2001:db8:122:344:ffc0:2:21ff:ffff")),
            Some(Ipv4Addr::new(192, 0, 2, 33))
        );
        let p = pref("2001:db8::/32");
        assert_eq!(
            p.extract(v6("2001:db8:c000:221:ff00:1:2:3")),
            Some(Ipv4Addr::new(192, 0, 2, 33))
        );
    }

    #[test]
    fn extract_outside_prefix_is_none() {
        let p = pref("2001:db8:122::/48");
        assert_eq!(p.extract(v6("2001:db8:123:c000:2:2100::")), None);
        assert!(!p.contains(v6("2001:db9::")));
        assert_eq!(
            Pref64::WELL_KNOWN.extract(v6("64:ff9b:0:0:0:1:c000:221")),
            None
        );
    }

    #[test]
    fn parse_errors() {
        for s in [
            "",
            "64:ff9b::",
            "64:ff9b::/",
            "/96",
            "64:ff9b::/x",
            "64:ff9b::/+96",
            "1.2.3.4/96",
            "64:ff9b::/96/1",
            "64:ff9b::/-1",
        ] {
            assert_eq!(s.parse::<Pref64>(), Err(Pref64Error::Syntax), "{s:?}");
        }
        assert!(" 64:ff9b::/96 ".parse::<Pref64>().is_ok());
        assert!(Pref64Error::BadLength(33).to_string().contains("/33"));
        assert!(Pref64Error::UOctetNotZero.to_string().contains("64 to 71"));
    }

    #[test]
    fn well_known_prefix_refuses_non_global() {
        let refused = [
            "0.0.0.0",
            "0.255.255.255",
            "10.0.0.1",
            "10.255.255.255",
            "100.64.0.1",
            "100.127.255.255",
            "127.0.0.1",
            "169.254.1.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.1",
            "192.0.0.8",
            "192.0.0.170",
            "192.0.0.171",
            "192.0.2.33",
            "192.168.1.1",
            "198.18.0.1",
            "198.19.255.255",
            "198.51.100.1",
            "203.0.113.1",
            "224.0.0.1",
            "239.255.255.255",
            "240.0.0.1",
            "255.255.255.255",
        ];
        for a in refused {
            assert!(!wkp_allows(a.parse().unwrap()), "{a} must be refused");
        }
        let allowed = [
            "1.1.1.1",
            "8.8.8.8",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "128.0.0.1",
            "169.253.255.255",
            "172.15.255.255",
            "172.32.0.0",
            "192.0.0.9",
            "192.0.0.10",
            "192.0.1.1",
            "192.0.3.0",
            "192.88.99.1",
            "192.167.255.255",
            "192.169.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "198.51.99.255",
            "203.0.112.255",
            "223.255.255.255",
        ];
        for a in allowed {
            assert!(wkp_allows(a.parse().unwrap()), "{a} must be allowed");
        }
    }

    fn any_pref64() -> impl Strategy<Value = Pref64> {
        (
            prop::sample::select(vec![32u8, 40, 48, 56, 64, 96]),
            any::<u128>(),
        )
            .prop_map(|(len, bits)| {
                let bits = bits & mask(len) & !U_OCTET;
                Pref64::new(Ipv6Addr::from(bits), len).unwrap()
            })
    }

    proptest! {
        /// extract(embed(a)) == a under every prefix length, and the result is under the
        /// prefix with a zero u octet and suffix.
        #[test]
        fn embed_extract_round_trip(p in any_pref64(), a in any::<u32>()) {
            let v4 = Ipv4Addr::from(a);
            let e = p.embed(v4);
            prop_assert!(p.contains(e));
            prop_assert_eq!(p.extract(e), Some(v4));
            prop_assert_eq!(u128::from(e) & U_OCTET, 0);
            if p.len() < 96 {
                let suffix_bits = 128 - 8 - 32 - u32::from(p.len());
                prop_assert_eq!(u128::from(e) & low_bits(suffix_bits), 0);
            }
        }

        /// Any address under the prefix extracts, whatever its u octet and suffix, and
        /// re-embedding it clears exactly those bits.
        #[test]
        fn extract_ignores_u_and_suffix(p in any_pref64(), noise in any::<u128>()) {
            let a = Ipv6Addr::from(u128::from_be_bytes(p.prefix) | (noise & !mask(p.len())));
            let v4 = p.extract(a).unwrap();
            let back = u128::from(p.embed(v4));
            if p.len() < 96 {
                let suffix_bits = 128 - 8 - 32 - u32::from(p.len());
                prop_assert_eq!(back, u128::from(a) & !U_OCTET & !low_bits(suffix_bits));
            } else {
                prop_assert_eq!(back, u128::from(a));
            }
        }

        /// Parsing never panics, and whatever parses displays back to itself.
        #[test]
        fn parse_never_panics(s in "\\PC{0,48}") {
            if let Ok(p) = s.parse::<Pref64>() {
                prop_assert_eq!(p.to_string().parse::<Pref64>(), Ok(p));
            }
        }
    }
}
