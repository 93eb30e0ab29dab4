//! NAT64's live reload: pool4, its ports, timeouts, filtering, hairpinning, port
//! preservation and per-subscriber limits change live through the NAT44 core it runs on
//! (`nat44::reload`); the translator's settings (pref64, SIIT options, ICMP behaviour),
//! the static bindings (their hosts are pinned at start) and `subscriber_prefix_len` (the
//! subscriber table is keyed by it at start) need a restart.

use std::net::SocketAddrV4;

use super::{Nat64Config, Nat64Shared};
use crate::config::ConfigError;
use crate::reload::{refuse_restart_only, ReloadAction, ReloadReport};

impl Nat64Shared {
    /// Applies `new` live over `old` (the configuration in force), or refuses, keeping it.
    pub fn reload(
        &self,
        old: &Nat64Config,
        new: &Nat64Config,
    ) -> Result<ReloadReport, ConfigError> {
        self.reload_as(old, new, ReloadAction::Apply)
    }

    /// [`reload`](Self::reload), or with `ReloadAction::Preview` its checks and report
    /// only.
    pub fn reload_as(
        &self,
        old: &Nat64Config,
        new: &Nat64Config,
        action: ReloadAction,
    ) -> Result<ReloadReport, ConfigError> {
        new.validate()?;
        refuse_restart_only(&[
            ("pref64", old.pref64 != new.pref64),
            ("static", old.static_bindings != new.static_bindings),
            ("options", old.options != new.options),
            (
                "drop_icmpv6_info",
                old.drop_icmpv6_info != new.drop_icmpv6_info,
            ),
            ("icmp_errors", old.icmp_errors != new.icmp_errors),
            ("icmp_rate", old.icmp_rate != new.icmp_rate),
            (
                "subscriber_prefix_len",
                old.subscriber_prefix_len != new.subscriber_prefix_len,
            ),
        ])?;
        // The static bindings are unchanged: their host ids are the forwards' in force.
        let ids: Vec<SocketAddrV4> = self
            .nat
            .current()
            .config()
            .port_forwards
            .iter()
            .map(|f| f.inside)
            .collect();
        let mut report = self
            .nat
            .reload_as(new.nat44(|i| *ids[i].ip()), action)
            .map_err(super::config::from_nat44)?;
        // NAT64 has one rule: say "pool4" rather than "nat44 rules".
        report.changes.retain(|c| !c.starts_with("nat44 rules"));
        for c in &mut report.changes {
            if let Some(rest) = c.strip_prefix("pool ") {
                *c = format!("pool4 {rest}");
            }
        }
        if old.ports != new.ports {
            report.push(format!(
                "ports {}-{} → {}-{}",
                old.ports.first, old.ports.last, new.ports.first, new.ports.last
            ));
        }
        Ok(report)
    }
}
