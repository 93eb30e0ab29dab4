//! What an ILA router is built from, as plain values: the [`IlaConfig`], a capacity and
//! the identifier -> locator mappings; and [`Addr64`], the 64-bit notation Linux
//! `ip ila add loc_match ... loc ...` uses (four 16-bit hex groups, `2001:0:87:0`).
//!
//! The configuration file and the control socket both produce these; the runtime turns
//! them into an [`IlaRouter`]. Nothing here touches packets.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use conntrack::ila_table::IlaTableError;

use super::{CsumMode, IdentFormat, IlaConfig, IlaConfigError, IlaRouter};
use crate::config::{ConfigError, ConfigItem, IcmpRate};

/// A 64-bit identifier or locator written as four 16-bit hex groups (`0:0:1:2`), as
/// iproute2's `get_addr64` reads it: exactly four groups, no `::` shorthand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addr64(pub u64);

/// Why text is not an [`Addr64`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("\"{text}\": {why} (expected four 16-bit hex groups like 2001:0:87:0)")]
pub struct Addr64Error {
    /// The text refused.
    pub text: String,
    /// What is wrong with it.
    pub why: String,
}

impl FromStr for Addr64 {
    type Err = Addr64Error;

    fn from_str(s: &str) -> Result<Self, Addr64Error> {
        let bad = |why: String| Addr64Error {
            text: s.to_owned(),
            why,
        };
        let mut value = 0u64;
        let mut groups = 0;
        for g in s.split(':') {
            groups += 1;
            if groups > 4 {
                return Err(bad("more than four groups".into()));
            }
            if g.is_empty() || g.len() > 4 || !g.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad(format!("group \"{g}\" is not 1-4 hex digits")));
            }
            // Cannot fail: 1-4 hex digits.
            let n = u16::from_str_radix(g, 16).map_err(|e| bad(e.to_string()))?;
            value = (value << 16) | u64::from(n);
        }
        if groups != 4 {
            return Err(bad(format!("{groups} groups")));
        }
        Ok(Addr64(value))
    }
}

impl fmt::Display for Addr64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        write!(
            f,
            "{:x}:{:x}:{:x}:{:x}",
            v >> 48,
            (v >> 32) & 0xffff,
            (v >> 16) & 0xffff,
            v & 0xffff
        )
    }
}

/// Everything needed to build an [`IlaRouter`] and fill its table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IlaSettings {
    /// SIR prefix, checksum mode, identifier format, unmapped action.
    pub config: IlaConfig,
    /// Room in the mapping table (removed mappings count until reclaimed).
    pub capacity: usize,
    /// `(identifier, locator)` pairs, identifiers distinct.
    pub mappings: Vec<(u64, u64)>,
    /// ICMP errors (Time Exceeded, Packet Too Big) a worker sends at most.
    pub icmp_rate: IcmpRate,
}

/// Why [`IlaSettings::router`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IlaSettingsError {
    /// The configuration cannot work.
    #[error(transparent)]
    Config(#[from] IlaConfigError),
    /// A mapping did not fit or was a duplicate.
    #[error(transparent)]
    Table(#[from] IlaTableError),
}

impl IlaSettings {
    /// Checks the settings without building the table: the checksum mode and identifier
    /// format agree, identifiers are distinct, and the mappings fit the capacity.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.config.csum == CsumMode::NeutralMap && self.config.format != IdentFormat::UseFormat
        {
            return Err(ConfigError::new(
                ConfigItem::Field("csum_mode"),
                IlaConfigError::NeutralMapNeedsFormat.to_string(),
            ));
        }
        if self.mappings.len() > self.capacity {
            return Err(ConfigError::new(
                ConfigItem::Field("max_mappings"),
                format!(
                    "{} mappings do not fit a table of {}",
                    self.mappings.len(),
                    self.capacity
                ),
            ));
        }
        let mut seen = std::collections::HashMap::with_capacity(self.mappings.len());
        for (i, &(identifier, _)) in self.mappings.iter().enumerate() {
            if let Some(j) = seen.insert(identifier, i) {
                return Err(ConfigError::new(
                    ConfigItem::Entry("mapping", i, "identifier"),
                    format!(
                        "identifier {} is already mapped by mapping {}",
                        Addr64(identifier),
                        j + 1
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A router with these settings and every mapping inserted.
    pub fn router(&self) -> Result<Arc<IlaRouter>, IlaSettingsError> {
        let router = IlaRouter::with_icmp_rate(self.config, self.capacity, self.icmp_rate)?;
        for &(identifier, locator) in &self.mappings {
            router.table().insert(identifier, locator)?;
        }
        Ok(router)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addr64_round_trips_ila_rst_values() {
        for (text, value) in [
            ("2001:0:87:0", 0x2001_0000_0087_0000u64),
            ("2000:0:1:87", 0x2000_0000_0001_0087),
            ("0:0:1:2", 0x0000_0000_0001_0002),
            ("ffff:ffff:ffff:ffff", u64::MAX),
        ] {
            let a: Addr64 = text.parse().unwrap();
            assert_eq!(a.0, value, "{text}");
            assert_eq!(a.to_string(), text);
        }
        assert_eq!(
            "0001:00AB:0:0".parse::<Addr64>().unwrap().to_string(),
            "1:ab:0:0"
        );
    }

    #[test]
    fn addr64_rejects_other_notations() {
        for bad in [
            "",
            "1:2:3",
            "1:2:3:4:5",
            "1::2",
            "::",
            "1:2:3:10000",
            "1:2:3:g",
            " 1:2:3:4",
            "1:2:3:4:",
            "2001:db8::1",
        ] {
            assert!(bad.parse::<Addr64>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn settings_build_a_filled_router() {
        let s = IlaSettings {
            config: IlaConfig {
                sir_prefix: 0x3333_0000_0000_0001,
                csum: xlat::ila::CsumMode::AdjustTransport,
                format: xlat::ila::IdentFormat::Luid,
                unmapped: super::super::UnmappedAction::Forward,
            },
            capacity: 4,
            mappings: vec![(1, 10), (2, 20)],
            icmp_rate: IcmpRate {
                global: 9,
                per_source: 3,
            },
        };
        let r = s.router().unwrap();
        assert_eq!(r.table().lookup(2), Some(20));
        assert_eq!(r.icmp_rate(), s.icmp_rate);
        let dup = IlaSettings {
            mappings: vec![(1, 10), (1, 11)],
            ..s
        };
        assert!(matches!(dup.router(), Err(IlaSettingsError::Table(_))));
    }
}
