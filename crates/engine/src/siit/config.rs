//! A stateless translator's configuration: the Pref64, the explicit address mappings
//! (RFC 7757) and RFC 7915's knobs, and its validation. Never reads files.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use xlat::prefix::{Ipv4Prefix, Ipv6Prefix};
use xlat::rfc6052::{wkp_allows, Pref64};
use xlat::siit::SiitOptions;

use crate::config::{ConfigError, ConfigItem};

/// One Explicit Address Mapping (RFC 7757): an IPv4 prefix and an IPv6 prefix with suffixes
/// of the same length, so address `ipv4 + n` maps to `ipv6 + n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Eam {
    /// The IPv4 side.
    pub ipv4: Ipv4Prefix,
    /// The IPv6 side.
    pub ipv6: Ipv6Prefix,
}

impl Eam {
    /// Builds an entry; both suffixes must have the same length (RFC 7757 §3.2 allows a
    /// longer IPv6 suffix, not supported here).
    pub fn new(ipv4: Ipv4Prefix, ipv6: Ipv6Prefix) -> Result<Self, EamError> {
        if 32 - u32::from(ipv4.len()) != 128 - u32::from(ipv6.len()) {
            return Err(EamError { ipv4, ipv6 });
        }
        Ok(Eam { ipv4, ipv6 })
    }

    fn suffix_bits(&self) -> u32 {
        32 - u32::from(self.ipv4.len())
    }

    pub(crate) fn map_v4(&self, a: Ipv4Addr) -> Ipv6Addr {
        let n = u128::from(u32::from(a) & low32(self.suffix_bits()));
        Ipv6Addr::from(u128::from(self.ipv6.addr()) | n)
    }

    pub(crate) fn map_v6(&self, a: Ipv6Addr) -> Ipv4Addr {
        let n = (u128::from(a) as u32) & low32(self.suffix_bits());
        Ipv4Addr::from(u32::from(self.ipv4.addr()) | n)
    }
}

fn low32(bits: u32) -> u32 {
    if bits >= 32 {
        u32::MAX
    } else {
        (1u32 << bits) - 1
    }
}

/// A stateless translator's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiitConfig {
    /// The prefix IPv4 addresses without an EAM entry are embedded in (None: EAM only).
    pub pref64: Option<Pref64>,
    /// Explicit address mappings.
    pub eam: Vec<Eam>,
    /// RFC 6791: the IPv4 source for ICMPv6 errors whose IPv6 source has no mapping.
    pub icmp_error_source: Option<Ipv4Addr>,
    /// RFC 7915 knobs (MTUs, UDP zero checksum, TTL, TOS).
    pub options: SiitOptions,
}

impl SiitConfig {
    /// A CLAT (RFC 6877): the private IPv4 `ipv4` (a host or a LAN) <-> the CLAT IPv6
    /// prefix `ipv6`, everything else through the provider's NAT64 prefix `plat`. Errors
    /// name the `[clat]` fields (`ipv4`, `ipv6`, `plat`).
    pub fn clat(ipv4: Ipv4Prefix, ipv6: Ipv6Prefix, plat: Pref64) -> Result<Self, ConfigError> {
        let eam = Eam::new(ipv4, ipv6)
            .map_err(|e| ConfigError::new(ConfigItem::Field("ipv6"), e.to_string()))?;
        let cfg = SiitConfig {
            pref64: Some(plat),
            eam: vec![eam],
            icmp_error_source: None,
            options: SiitOptions::default(),
        };
        cfg.validate()
            .map_err(|e| ConfigError::new(ConfigItem::Field("ipv6"), e.message))?;
        Ok(cfg)
    }

    /// Checks the table: no two EAM entries overlap on either side, none overlaps the
    /// Pref64, and an address mapping exists at all.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.pref64.is_none() && self.eam.is_empty() {
            return Err(ConfigError::new(
                ConfigItem::Field(""),
                "neither pref64 nor an eam entry: no address can be translated",
            ));
        }
        for (i, a) in self.eam.iter().enumerate() {
            for (j, b) in self.eam.iter().enumerate().take(i) {
                if a.ipv4.overlaps(&b.ipv4) {
                    return Err(ConfigError::new(
                        ConfigItem::Entry("eam", i, ""),
                        format!("{} overlaps {} of eam entry {}", a.ipv4, b.ipv4, j + 1),
                    ));
                }
                if a.ipv6.overlaps(&b.ipv6) {
                    return Err(ConfigError::new(
                        ConfigItem::Entry("eam", i, ""),
                        format!("{} overlaps {} of eam entry {}", a.ipv6, b.ipv6, j + 1),
                    ));
                }
            }
            if let Some(p) = self.pref64 {
                if a.ipv6.overlaps(&p.as_prefix()) {
                    return Err(ConfigError::new(
                        ConfigItem::Entry("eam", i, ""),
                        format!("{} overlaps pref64 {p}", a.ipv6),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The IPv6 address of IPv4 `a`, or `None` when it has none.
    #[inline]
    pub fn map4(&self, a: Ipv4Addr) -> Option<Ipv6Addr> {
        if let Some(e) = self.eam.iter().find(|e| e.ipv4.contains(a)) {
            return Some(e.map_v4(a));
        }
        let p = self.pref64?;
        (!p.is_well_known() || wkp_allows(a)).then(|| p.embed(a))
    }

    /// The IPv4 address of IPv6 `a`, or `None` when it has none.
    #[inline]
    pub fn map6(&self, a: Ipv6Addr) -> Option<Ipv4Addr> {
        if let Some(e) = self.eam.iter().find(|e| e.ipv6.contains(a)) {
            return Some(e.map_v6(a));
        }
        let p = self.pref64?;
        let v4 = p.extract(a)?;
        (!p.is_well_known() || wkp_allows(v4)).then_some(v4)
    }
}

/// An explicit address mapping whose two prefixes leave suffixes of different lengths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EamError {
    /// The IPv4 side given.
    pub ipv4: Ipv4Prefix,
    /// The IPv6 side given.
    pub ipv6: Ipv6Prefix,
}

impl fmt::Display for EamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (v4, v6) = (self.ipv4, self.ipv6);
        write!(
            f,
            "{v4} and {v6} have suffixes of different lengths ({} and {} bits); use e.g. {}/{}",
            32 - u32::from(v4.len()),
            128 - u32::from(v6.len()),
            v6.addr(),
            96 + u32::from(v4.len())
        )
    }
}

impl std::error::Error for EamError {}
