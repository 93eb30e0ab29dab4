//! Routing integration: the gateway tells a routing daemon which prefixes it
//! serves, and withdraws them when it stops forwarding.
//!
//! quicknat owns the announcement; the routing daemon on the gateway (BIRD 2) exports it
//! by BGP. The announcement is a route per prefix, `PREFIX dev qn-announce table 250
//! proto 250 metric M`, on a TUN device of quicknat's own ([`io::announce`]): the device
//! lives exactly as long as the process, so a SIGKILLed or crashed gateway loses its
//! routes at once and BIRD withdraws them; a clean stop deletes them first. Primary
//! prefixes carry [`PRIMARY_METRIC`], standby ones `standby_metric` (BIRD's `krt_metric`,
//! which the example configuration turns into a longer AS path).
//!
//! Pieces:
//! - [`RoutingConfig`]: the `[routing]` settings;
//! - `health`: the decision, pure (links up? workers alive?) and tested alone;
//! - `announcer`: the thread that checks health every `health_interval`, adds or deletes
//!   the routes on a change, logs it with the reason and counts it; [`RouteStatus`] is
//!   what `quicknat status` and `/metrics` read.
//!
//! What this module must never do: touch a packet, the main routing table, or a device
//! it did not create; it runs beside the workers and reads only their published counters.

mod announcer;
mod health;

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use io::netlink::DevRoute;

pub use announcer::{run, Announcer};
pub use health::{Health, Unhealthy, WORKER_STALL};

/// The metric of the primary (`announce`) routes: below any `standby_metric`, so a
/// router learning both from different gateways prefers the primary.
pub const PRIMARY_METRIC: u32 = 100;

/// One announced prefix (host bits zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix {
    /// The network.
    pub addr: IpAddr,
    /// The prefix length.
    pub len: u8,
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// The `[routing]` settings; the default announces nothing (off).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutingConfig {
    /// Prefixes announced with [`PRIMARY_METRIC`] while healthy.
    pub announce: Vec<Prefix>,
    /// Prefixes announced with `standby_metric` while healthy.
    pub standby: Vec<Prefix>,
    /// The standby routes' metric.
    pub standby_metric: u32,
    /// The kernel routing table the routes go to (not used for forwarding).
    pub table: u32,
    /// The routes' `rtm_protocol`.
    pub protocol: u8,
    /// The TUN device's name.
    pub device: String,
    /// Time between health checks.
    pub health_interval: Duration,
}

impl Default for RoutingConfig {
    fn default() -> Self {
        RoutingConfig {
            announce: Vec::new(),
            standby: Vec::new(),
            standby_metric: 1000,
            table: io::netlink::TABLE_ANNOUNCE,
            protocol: io::netlink::PROTO_QUICKNAT,
            device: "qn-announce".to_owned(),
            health_interval: Duration::from_millis(100),
        }
    }
}

impl RoutingConfig {
    /// Whether anything is announced.
    pub fn enabled(&self) -> bool {
        !self.announce.is_empty() || !self.standby.is_empty()
    }

    /// The routes to install on device `ifindex`, primaries first.
    pub fn routes(&self, ifindex: u32) -> Vec<DevRoute> {
        let route = |p: &Prefix, metric| DevRoute {
            dst: p.addr,
            prefix_len: p.len,
            ifindex,
            table: self.table,
            protocol: self.protocol,
            metric,
        };
        self.announce
            .iter()
            .map(|p| route(p, PRIMARY_METRIC))
            .chain(self.standby.iter().map(|p| route(p, self.standby_metric)))
            .collect()
    }

    /// The prefixes, as `status` lists them (`203.0.113.8/29 (standby)`).
    pub fn describe(&self) -> Vec<String> {
        self.announce
            .iter()
            .map(|p| p.to_string())
            .chain(self.standby.iter().map(|p| format!("{p} (standby)")))
            .collect()
    }
}

/// What the announcer last did, for `quicknat status` and `/metrics`.
#[derive(Debug, Default)]
pub struct RouteStatus {
    announced: AtomicBool,
    /// An operator asked to withdraw while healthy (`quicknat drain`).
    draining: AtomicBool,
    /// Why (the unhealthy condition, or what was announced).
    reason: Mutex<String>,
    /// Announcements made (start-up's included).
    announcements: AtomicU64,
    /// Withdrawals made for health (a clean stop's not counted).
    withdrawals: AtomicU64,
    /// The prefixes configured.
    prefixes: Vec<String>,
    /// The device.
    device: String,
}

impl RouteStatus {
    /// A status for `cfg`, nothing announced yet.
    pub fn new(cfg: &RoutingConfig) -> RouteStatus {
        RouteStatus {
            reason: Mutex::new("starting".to_owned()),
            prefixes: cfg.describe(),
            device: cfg.device.clone(),
            ..RouteStatus::default()
        }
    }

    /// Whether the routes are announced now.
    pub fn announced(&self) -> bool {
        self.announced.load(Ordering::Relaxed)
    }

    /// Whether a drain is asked for: the routes are withdrawn and stay so, healthy or not,
    /// until it is cancelled.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Asks for a drain, or cancels it; the announcer acts at its next check.
    pub fn set_draining(&self, on: bool) {
        self.draining.store(on, Ordering::Relaxed);
    }

    /// Why they are (not) announced.
    pub fn reason(&self) -> String {
        self.reason.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// (announcements, withdrawals) since start.
    pub fn changes(&self) -> (u64, u64) {
        (
            self.announcements.load(Ordering::Relaxed),
            self.withdrawals.load(Ordering::Relaxed),
        )
    }

    /// The configured prefixes.
    pub fn prefixes(&self) -> &[String] {
        &self.prefixes
    }

    /// The announcement device's name.
    pub fn device(&self) -> &str {
        &self.device
    }

    fn set(&self, announced: bool, reason: String) {
        if let Ok(mut g) = self.reason.lock() {
            *g = reason;
        }
        let was = self.announced.swap(announced, Ordering::Relaxed);
        if was != announced {
            let c = if announced {
                &self.announcements
            } else {
                &self.withdrawals
            };
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The `status` JSON object.
    pub fn json(&self) -> serde_json::Value {
        let (a, w) = self.changes();
        serde_json::json!({
            "announced": self.announced(),
            "draining": self.draining(),
            "reason": self.reason(),
            "prefixes": self.prefixes,
            "device": self.device,
            "announcements": a,
            "withdrawals": w,
        })
    }

    /// The Prometheus/OpenMetrics lines (`quicknat_routes_announced` and the change
    /// counters), to go before the exposition's `# EOF`.
    pub fn metrics_text(&self) -> String {
        let (a, w) = self.changes();
        format!(
            "# HELP quicknat_routes_announced Whether the [routing] prefixes are announced (1) or withdrawn (0).\n\
             # TYPE quicknat_routes_announced gauge\n\
             quicknat_routes_announced {}\n\
             # HELP quicknat_routes_changes Route announcements and withdrawals since start.\n\
             # TYPE quicknat_routes_changes counter\n\
             quicknat_routes_changes_total{{change=\"announce\"}} {a}\n\
             quicknat_routes_changes_total{{change=\"withdraw\"}} {w}\n",
            u8::from(self.announced())
        )
    }
}

/// Inserts `extra` (whole metric families) before the exposition's closing `# EOF`.
pub fn append_metrics(exposition: String, extra: &str) -> String {
    match exposition.rfind("# EOF") {
        Some(at) => {
            let mut s = exposition;
            s.insert_str(at, extra);
            s
        }
        None => exposition + extra,
    }
}

#[cfg(test)]
mod tests;
