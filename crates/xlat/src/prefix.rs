//! IP prefixes as configuration names them: `10.0.0.0/24`, `2001:db8::/32`. One place for
//! the prefix types every mode uses (NAT44 rules and pools, NAT64's pool4, SIIT's explicit
//! address mappings); the RFC 6052 prefix ([`crate::rfc6052::Pref64`]) is an
//! [`Ipv6Prefix`] with the lengths that RFC allows.
//!
//! Parsing configuration text may allocate (an error carries the text it refused); the
//! arithmetic (`contains`, `overlaps`, `nth`) never does, and nothing here panics.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// Why text or an address and length are not a prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrefixError {
    /// The address part is not an address of the family (the text refused).
    BadAddress {
        /// The text.
        text: String,
        /// 4 or 6.
        version: u8,
    },
    /// The length part is not a number of bits (the text refused).
    BadLength {
        /// The text.
        text: String,
        /// The longest prefix of the family.
        max: u8,
    },
    /// The length is longer than the address.
    TooLong {
        /// The length given.
        len: u8,
        /// The longest prefix of the family.
        max: u8,
    },
    /// Bits beyond the length are set.
    HostBits {
        /// The address given.
        addr: IpAddr,
        /// The address with those bits cleared.
        network: IpAddr,
        /// The length.
        len: u8,
    },
}

impl fmt::Display for PrefixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrefixError::BadAddress { text, version } => {
                write!(f, "\"{text}\" is not an IPv{version} address")
            }
            PrefixError::BadLength { text, max } => {
                write!(f, "\"{text}\" is not a prefix length (0-{max})")
            }
            PrefixError::TooLong { len, max } => {
                write!(f, "prefix length /{len} is longer than {max}")
            }
            PrefixError::HostBits { addr, network, len } => write!(
                f,
                "{addr}/{len} has host bits set (did you mean {network}/{len}?)"
            ),
        }
    }
}

impl std::error::Error for PrefixError {}

/// Splits `addr/len` (or a bare address: the longest prefix), parsing both parts.
fn parse_parts<A: FromStr>(s: &str, version: u8, max: u8) -> Result<(A, u8), PrefixError> {
    let (a, l) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr = a.trim().parse().map_err(|_| PrefixError::BadAddress {
        text: a.to_owned(),
        version,
    })?;
    let len = match l {
        Some(l) => l.trim().parse::<u8>().map_err(|_| PrefixError::BadLength {
            text: l.to_owned(),
            max,
        })?,
        None => max,
    };
    Ok((addr, len))
}

/// An IPv4 prefix such as `10.0.0.0/24`; host bits are always zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv4Prefix {
    addr: Ipv4Addr,
    len: u8,
}

impl Ipv4Prefix {
    /// Builds a prefix; rejects a length over 32 and set host bits.
    pub fn new(addr: Ipv4Addr, len: u8) -> Result<Self, PrefixError> {
        if len > 32 {
            return Err(PrefixError::TooLong { len, max: 32 });
        }
        let masked = u32::from(addr) & mask(len);
        if masked != u32::from(addr) {
            return Err(PrefixError::HostBits {
                addr: addr.into(),
                network: Ipv4Addr::from(masked).into(),
                len,
            });
        }
        Ok(Self { addr, len })
    }

    /// The network address.
    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    /// The prefix length in bits (0..=32).
    #[allow(clippy::len_without_is_empty)] // a prefix length, not a collection
    pub fn len(&self) -> u8 {
        self.len
    }

    /// The netmask as a host-order integer.
    pub fn mask(&self) -> u32 {
        mask(self.len)
    }

    /// Whether `ip` lies inside this prefix.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & self.mask() == u32::from(self.addr)
    }

    /// Whether the two prefixes share any address.
    pub fn overlaps(&self, other: &Ipv4Prefix) -> bool {
        let l = self.len.min(other.len);
        u32::from(self.addr) & mask(l) == u32::from(other.addr) & mask(l)
    }

    /// Number of addresses covered (1 for a /32, 2^32 for /0).
    pub fn size(&self) -> u64 {
        1u64 << (32 - u32::from(self.len))
    }

    /// The `i`-th address of the prefix (no bounds check beyond wrapping inside the prefix).
    pub fn nth(&self, i: u64) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.addr).wrapping_add((i % self.size()) as u32))
    }
}

/// Host-order netmask for an IPv4 prefix length.
pub fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    }
}

impl fmt::Display for Ipv4Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl FromStr for Ipv4Prefix {
    type Err = PrefixError;
    /// Parses `a.b.c.d/len`, or a bare address as a /32.
    fn from_str(s: &str) -> Result<Self, PrefixError> {
        let (addr, len) = parse_parts(s, 4, 32)?;
        Ipv4Prefix::new(addr, len)
    }
}

/// An IPv6 prefix such as `2001:db8::/32`; host bits are always zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv6Prefix {
    addr: Ipv6Addr,
    len: u8,
}

impl Ipv6Prefix {
    /// Builds a prefix; rejects a length over 128 and set host bits.
    pub fn new(addr: Ipv6Addr, len: u8) -> Result<Self, PrefixError> {
        if len > 128 {
            return Err(PrefixError::TooLong { len, max: 128 });
        }
        let masked = u128::from(addr) & mask6(len);
        if masked != u128::from(addr) {
            return Err(PrefixError::HostBits {
                addr: addr.into(),
                network: Ipv6Addr::from(masked).into(),
                len,
            });
        }
        Ok(Self { addr, len })
    }

    /// The network address.
    pub fn addr(&self) -> Ipv6Addr {
        self.addr
    }

    /// The prefix length in bits (0..=128).
    #[allow(clippy::len_without_is_empty)] // a prefix length, not a collection
    pub fn len(&self) -> u8 {
        self.len
    }

    /// Whether `ip` lies inside this prefix.
    pub fn contains(&self, ip: Ipv6Addr) -> bool {
        u128::from(ip) & mask6(self.len) == u128::from(self.addr)
    }

    /// Whether the two prefixes share any address.
    pub fn overlaps(&self, other: &Ipv6Prefix) -> bool {
        let l = self.len.min(other.len);
        u128::from(self.addr) & mask6(l) == u128::from(other.addr) & mask6(l)
    }
}

/// Host-order IPv6 netmask for a prefix length.
pub fn mask6(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len.min(128)))
    }
}

impl fmt::Display for Ipv6Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl FromStr for Ipv6Prefix {
    type Err = PrefixError;
    /// Parses `addr/len`, or a bare address as a /128.
    fn from_str(s: &str) -> Result<Self, PrefixError> {
        let (addr, len) = parse_parts(s, 6, 128)?;
        Ipv6Prefix::new(addr, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parse_and_refuse_with_reasons() {
        assert_eq!("10.0.0.0/24".parse::<Ipv4Prefix>().unwrap().len(), 24);
        assert_eq!("10.0.0.7".parse::<Ipv4Prefix>().unwrap().len(), 32);
        let e = |s: &str| s.parse::<Ipv4Prefix>().unwrap_err().to_string();
        assert_eq!(e("10.0.0/24"), "\"10.0.0\" is not an IPv4 address");
        assert_eq!(e("10.0.0.0/x"), "\"x\" is not a prefix length (0-32)");
        assert_eq!(e("10.0.0.0/33"), "prefix length /33 is longer than 32");
        assert_eq!(
            e("203.0.113.1/28"),
            "203.0.113.1/28 has host bits set (did you mean 203.0.113.0/28?)"
        );
        let e6 = |s: &str| s.parse::<Ipv6Prefix>().unwrap_err().to_string();
        assert_eq!(
            e6("2001:db8::1/32"),
            "2001:db8::1/32 has host bits set (did you mean 2001:db8::/32?)"
        );
        assert_eq!(
            e6("2001:db8::/129"),
            "prefix length /129 is longer than 128"
        );
        assert!("2001:db8::/32"
            .parse::<Ipv6Prefix>()
            .unwrap()
            .contains("2001:db8::5".parse().unwrap()));
    }

    proptest! {
        #[test]
        fn overlap_is_symmetric_and_matches_containment(a in any::<u32>(), la in 0u8..=32, b in any::<u32>(), lb in 0u8..=32) {
            let p = Ipv4Prefix::new(Ipv4Addr::from(a & mask(la)), la).unwrap();
            let q = Ipv4Prefix::new(Ipv4Addr::from(b & mask(lb)), lb).unwrap();
            prop_assert_eq!(p.overlaps(&q), q.overlaps(&p));
            let shorter = if p.len() <= q.len() { &p } else { &q };
            let longer = if p.len() <= q.len() { &q } else { &p };
            prop_assert_eq!(p.overlaps(&q), shorter.contains(longer.addr()));
        }

        #[test]
        fn any_text_parses_or_refuses_without_panic(s in ".{0,48}") {
            let _ = s.parse::<Ipv4Prefix>();
            let _ = s.parse::<Ipv6Prefix>();
        }
    }
}
