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
    /// RFC 6791: the IPv4 sources for ICMPv6 errors whose IPv6 source has no mapping, and
    /// for the ICMPv4 errors the translator itself sends (`None`: the gateway's inside
    /// IPv4 address from `[gateway]`, and untranslatable ICMPv6 errors are dropped).
    pub icmp_error_source: Option<Rfc6791Pool>,
    /// RFC 7915 knobs (MTUs, UDP zero checksum, TTL, TOS).
    pub options: SiitOptions,
    // Gateway-originated ICMP errors and EAM hairpinning.
    /// RFC 7915 §4.4 / §5.4: whether the translator sends ICMP errors about the packets it
    /// refuses ("The translator SHOULD allow an administrator to configure whether the
    /// ICMPv4 error messages are sent"); on by default.
    pub icmp_errors: bool,
    /// RFC 7757 §4: how an IPv6 packet for another IPv6 node's EAM address hairpins.
    pub eam_hairpin: EamHairpin,
    // ICMP error budget.
    /// ICMP errors a worker sends about refused packets, in all and to one sender.
    pub icmp_rate: crate::config::IcmpRate,
}

impl Default for SiitConfig {
    /// No Pref64, no EAM entry (not valid until one is added), RFC defaults elsewhere.
    fn default() -> Self {
        SiitConfig {
            pref64: None,
            eam: Vec::new(),
            icmp_error_source: None,
            options: SiitOptions::default(),
            icmp_errors: true,
            eam_hairpin: EamHairpin::default(),
            icmp_rate: crate::config::IcmpRate::default(),
        }
    }
}

/// EAM hairpinning (RFC 7757 §4): an IPv6 node reaching another IPv6 node of the EAM
/// table through its IPv4 address (written in the Pref64) is translated to IPv4 and,
/// because that IPv4 destination is an EAM entry's, straight back to IPv6 and sent out
/// of the IPv6 side again, its source now the sender's IPv4 address in the Pref64 (so
/// the answer comes back through the translator the same way).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EamHairpin {
    /// No hairpinning: such a packet leaves on the IPv4 side.
    Off,
    /// Hairpin every IPv6 packet whose IPv4 destination is covered by an EAM entry,
    /// however its IPv6 destination was mapped (and every ICMPv6 error to such a node).
    Simple,
    /// Hairpin only what can be an EAM hairpin (RFC 7757 §4.2, Jool's default): a packet
    /// (not an ICMPv6 error) whose destination came out of the Pref64 into an EAM entry's
    /// IPv4 prefix, or an ICMPv6 error whose quoted source did.
    #[default]
    Intrinsic,
}

impl EamHairpin {
    /// The name as configured (`off`, `simple`, `intrinsic`).
    pub fn as_str(self) -> &'static str {
        match self {
            EamHairpin::Off => "off",
            EamHairpin::Simple => "simple",
            EamHairpin::Intrinsic => "intrinsic",
        }
    }
}

impl std::str::FromStr for EamHairpin {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(EamHairpin::Off),
            "simple" => Ok(EamHairpin::Simple),
            "intrinsic" => Ok(EamHairpin::Intrinsic),
            _ => Err("must be \"off\", \"simple\" or \"intrinsic\" (RFC 7757 §4)".into()),
        }
    }
}

/// The RFC 6791 pool: IPv4 addresses the translator gives as the source of an ICMP error
/// it has no IPv4 address for (one address, or prefixes).
///
/// RFC 6791 §5: "If a pool of public IPv4 addresses is configured on the translator, it is
/// RECOMMENDED to randomly select the IPv4 source address from the pool. Random selection
/// reduces the probability that two ICMP messages elicited by the same TRACEROUTE might
/// specify the same source address". [`pick`](Self::pick) spreads by a hash of the key it
/// is given (the IPv6 router's address, or the refused flow): as random as the keys, and a
/// replay of a capture picks the same addresses as the live gateway did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rfc6791Pool {
    prefixes: Vec<Ipv4Prefix>,
    size: u64,
}

impl Rfc6791Pool {
    /// A pool of `prefixes` (`None` when empty).
    pub fn new(prefixes: Vec<Ipv4Prefix>) -> Option<Self> {
        let size = prefixes.iter().map(Ipv4Prefix::size).sum();
        (!prefixes.is_empty()).then_some(Rfc6791Pool { prefixes, size })
    }

    /// The prefixes, as configured.
    pub fn prefixes(&self) -> &[Ipv4Prefix] {
        &self.prefixes
    }

    /// The address for `key`: the same key always gets the same address, different keys
    /// spread over the whole pool.
    #[inline]
    pub fn pick(&self, key: u64) -> Ipv4Addr {
        let mut i = mix64(key) % self.size.max(1);
        for p in &self.prefixes {
            if i < p.size() {
                return p.nth(i);
            }
            i -= p.size();
        }
        self.prefixes
            .first()
            .map_or(Ipv4Addr::UNSPECIFIED, Ipv4Prefix::addr)
    }
}

impl From<Ipv4Addr> for Rfc6791Pool {
    fn from(a: Ipv4Addr) -> Self {
        // A /32 is always a valid prefix.
        let prefixes: Vec<Ipv4Prefix> = Ipv4Prefix::new(a, 32).into_iter().collect();
        Rfc6791Pool {
            size: prefixes.len() as u64,
            prefixes,
        }
    }
}

impl fmt::Display for Rfc6791Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.prefixes.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            if p.len() == 32 {
                write!(f, "{}", p.addr())?;
            } else {
                write!(f, "{p}")?;
            }
        }
        Ok(())
    }
}

/// A 64-bit finaliser (splitmix64's): every key bit moves every output bit.
#[inline]
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
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
            // A CLAT's one EAM entry is its own host or LAN: nothing on its IPv6 side
            // reaches another node of the table through it (RFC 6877 §6.3).
            eam_hairpin: EamHairpin::Off,
            ..SiitConfig::default()
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
        match self.eam.iter().find(|e| e.ipv4.contains(a)) {
            Some(e) => Some(e.map_v4(a)),
            None => self.map4_pref64(a),
        }
    }

    /// The IPv4 address of IPv6 `a`, or `None` when it has none.
    #[inline]
    pub fn map6(&self, a: Ipv6Addr) -> Option<Ipv4Addr> {
        self.map6_how(a).map(|(v4, _)| v4)
    }

    /// The IPv4 address of IPv6 `a` and whether an EAM entry gave it (false: the Pref64).
    #[inline]
    pub(crate) fn map6_how(&self, a: Ipv6Addr) -> Option<(Ipv4Addr, bool)> {
        if let Some(e) = self.eam.iter().find(|e| e.ipv6.contains(a)) {
            return Some((e.map_v6(a), true));
        }
        let p = self.pref64?;
        let v4 = p.extract(a)?;
        (!p.is_well_known() || wkp_allows(v4)).then_some((v4, false))
    }

    /// The IPv6 address of IPv4 `a` by the Pref64 alone (an EAM hairpin's source).
    #[inline]
    pub(crate) fn map4_pref64(&self, a: Ipv4Addr) -> Option<Ipv6Addr> {
        let p = self.pref64?;
        (!p.is_well_known() || wkp_allows(a)).then(|| p.embed(a))
    }

    /// Whether IPv4 `a` is covered by an EAM entry.
    #[inline]
    pub(crate) fn eam_covers4(&self, a: Ipv4Addr) -> bool {
        self.eam.iter().any(|e| e.ipv4.contains(a))
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
