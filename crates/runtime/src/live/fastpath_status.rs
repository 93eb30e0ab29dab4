//! What the XDP fast path tells an operator: whether it is on and
//! why (the `auto` fallback's reason), and its counters — packets and bytes per direction,
//! sessions offloaded, installs, removals, misses, offers refused at a full map, map
//! errors — for `quicknat status`, `quicknat stats`, `/metrics` and the stats log line.
//!
//! Its own entry, never one of the workers': the fast path has no worker thread and no
//! heartbeat, so a slot among the workers' snapshots showed a phantom worker that never
//! beat. Counters are read from the program's per-CPU maps when asked (a few map reads
//! per request, never on the data path).

use std::sync::Arc;

use serde_json::{json, Value};

use super::fastpath::{FastPathCounters, XdpFastPath};
use super::FastPathSwitch;

/// Where the counters come from.
enum Source {
    /// The running fast path.
    Live(Arc<XdpFastPath>),
    /// Fixed values (tests, and the metrics reference's every family).
    Fixed(FastPathCounters),
    /// Off: no counters.
    Off,
}

/// The XDP fast path's state and counters, as reported (see the module doc).
pub struct FastPathStatus {
    switch: FastPathSwitch,
    why: String,
    source: Source,
}

impl std::fmt::Debug for FastPathStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastPathStatus")
            .field("switch", &self.switch)
            .field("on", &self.is_on())
            .field("why", &self.why)
            .finish()
    }
}

fn switch_name(s: FastPathSwitch) -> &'static str {
    match s {
        FastPathSwitch::Off => "off",
        FastPathSwitch::Auto => "auto",
        FastPathSwitch::On => "on",
    }
}

impl FastPathStatus {
    /// The fast path is running: `why` says what it forwards.
    pub(crate) fn on(switch: FastPathSwitch, fast: Arc<XdpFastPath>, why: String) -> Self {
        FastPathStatus {
            switch,
            why,
            source: Source::Live(fast),
        }
    }

    /// It is not: `why` (switched off, or `auto`'s fallback reason).
    pub fn off(switch: FastPathSwitch, why: String) -> Self {
        FastPathStatus {
            switch,
            why,
            source: Source::Off,
        }
    }

    /// On, with fixed counters (tests of what reads them, and the metrics reference).
    pub fn fixed(c: FastPathCounters) -> Self {
        FastPathStatus {
            switch: FastPathSwitch::On,
            why: "test".into(),
            source: Source::Fixed(c),
        }
    }

    /// Whether the XDP program forwards established flows now.
    pub fn is_on(&self) -> bool {
        !matches!(self.source, Source::Off)
    }

    /// Why it is on or off.
    pub fn why(&self) -> &str {
        &self.why
    }

    /// The counters now (`None` when off).
    pub fn counters(&self) -> Option<FastPathCounters> {
        match &self.source {
            Source::Live(f) => Some(f.counters()),
            Source::Fixed(c) => Some(*c),
            Source::Off => None,
        }
    }

    /// `status`'s `xdp_fast_path` object: `{"switch", "on", "why"}`.
    pub fn status_json(&self) -> Value {
        json!({
            "switch": switch_name(self.switch),
            "on": self.is_on(),
            "why": self.why,
        })
    }

    /// `stats`'s `xdp_fast_path` object (`null` when off).
    pub fn stats_json(&self) -> Value {
        self.counters().map_or(Value::Null, |c| counters_json(&c))
    }

    /// The fast path's metric families (OpenMetrics text, before the closing `# EOF`).
    pub fn metrics_text(&self) -> String {
        let mut t = format!(
            "# HELP quicknat_xdp_fast_path_enabled Whether the XDP fast path forwards established flows (1) or not (0).\n\
             # TYPE quicknat_xdp_fast_path_enabled gauge\n\
             quicknat_xdp_fast_path_enabled {}\n",
            u8::from(self.is_on())
        );
        let Some(c) = self.counters() else {
            return t;
        };
        let dir = ["out", "in"];
        let mut family = |name: &str, kind: &str, help: &str, samples: &[(String, u64)]| {
            t.push_str(&format!(
                "# HELP quicknat_xdp_fast_path_{name} {help}\n# TYPE quicknat_xdp_fast_path_{name} {kind}\n"
            ));
            let suffix = if kind == "counter" { "_total" } else { "" };
            for (labels, v) in samples {
                t.push_str(&format!(
                    "quicknat_xdp_fast_path_{name}{suffix}{labels} {v}\n"
                ));
            }
        };
        let per_dir = |v: [u64; 2]| -> Vec<(String, u64)> {
            (0..2)
                .map(|i| (format!("{{direction=\"{}\"}}", dir[i]), v[i]))
                .collect()
        };
        let one = |v: u64| vec![(String::new(), v)];
        family(
            "packets",
            "counter",
            "Packets the XDP program forwarded itself, per direction (out: arrived inside).",
            &per_dir(c.dir_packets),
        );
        family(
            "bytes",
            "counter",
            "Bytes (Ethernet frames) of the packets the XDP program forwarded, per direction.",
            &per_dir(c.dir_bytes),
        );
        family(
            "sessions",
            "gauge",
            "Sessions (ILA: mappings; SIIT/CLAT: flow directions) offloaded to the XDP fast path now.",
            &one(c.sessions),
        );
        family(
            "installs",
            "counter",
            "Sessions (ILA: mappings; SIIT/CLAT: flow directions) offloaded so far.",
            &one(c.installed),
        );
        family(
            "removals",
            "counter",
            "Offloaded sessions taken out so far (ended, reset, rerouted; ILA: mappings changed or removed; SIIT/CLAT: idle, rerouted or reloaded).",
            &one(c.removed),
        );
        family(
            "misses",
            "counter",
            "Packets the XDP program looked up and found no entry for (sent to the AF_XDP socket): IPv4 TCP/UDP; NAT64 also IPv6 TCP/UDP; ILA IPv6 TCP/UDP/ICMPv6.",
            &one(c.misses),
        );
        family(
            "map_full",
            "counter",
            "Offers of an established session refused because the map was full.",
            &one(c.refused_full),
        );
        family(
            "errors",
            "counter",
            "Map updates the kernel refused.",
            &one(c.errors),
        );
        t
    }
}

/// The status of the fast path `attach` gave (`fast`), with the last thing it logged
/// (`said`, "xdp fast path: ...") as the reason.
pub(crate) fn status(
    gw: &super::GatewayConfig,
    fast: &Option<Arc<XdpFastPath>>,
    said: Option<String>,
) -> FastPathStatus {
    // The log line says "on for ..." or "off (why)"; `status` says on or off beside it.
    let said = said.map(|l| {
        let l = l.trim_start_matches("xdp fast path: ");
        let l = l.strip_prefix("on ").unwrap_or(l);
        l.strip_prefix("off (")
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or(l)
            .to_string()
    });
    match fast {
        Some(f) => FastPathStatus::on(
            gw.xdp_fast_path,
            Arc::clone(f),
            said.unwrap_or_else(|| "on".into()),
        ),
        None if gw.xdp_fast_path == FastPathSwitch::Off => FastPathStatus::off(
            FastPathSwitch::Off,
            "turned off in the configuration".into(),
        ),
        None => FastPathStatus::off(
            gw.xdp_fast_path,
            said.unwrap_or_else(|| "not available".into()),
        ),
    }
}

/// Keeps `line` as the fast path's reason in `slot` if it is one of its lines, unless an
/// earlier one said why it is unavailable (the first cause, not its consequence).
pub(crate) fn note(slot: &std::sync::Mutex<Option<String>>, line: &str) {
    if !line.starts_with("xdp fast path: ") {
        return;
    }
    let mut g = slot.lock().unwrap_or_else(|e| e.into_inner());
    if g.as_deref().is_some_and(|o| o.contains("unavailable")) {
        return;
    }
    *g = Some(line.to_string());
}

/// Every counter as a JSON object (per direction: `out` arrived inside, `in` outside).
pub fn counters_json(c: &FastPathCounters) -> Value {
    json!({
        "packets": c.packets,
        "bytes": c.bytes,
        "packets_out": c.dir_packets[0],
        "packets_in": c.dir_packets[1],
        "bytes_out": c.dir_bytes[0],
        "bytes_in": c.dir_bytes[1],
        "sessions": c.sessions,
        "installs": c.installed,
        "removals": c.removed,
        "misses": c.misses,
        "map_full": c.refused_full,
        "errors": c.errors,
    })
}

/// The stats log line's fast-path fields, appended last (empty when off). `xdp_fast=` is
/// the packet count.
pub fn log_suffix(c: Option<&FastPathCounters>) -> String {
    let Some(c) = c else {
        return String::new();
    };
    format!(
        " xdp_fast={} xdp_fast_bytes={} xdp_fast_out={} xdp_fast_in={} xdp_fast_sessions={} xdp_fast_installs={} xdp_fast_removals={} xdp_fast_misses={} xdp_fast_map_full={} xdp_fast_errors={}",
        c.packets,
        c.bytes,
        c.dir_packets[0],
        c.dir_packets[1],
        c.sessions,
        c.installed,
        c.removed,
        c.misses,
        c.refused_full,
        c.errors
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> FastPathCounters {
        FastPathCounters {
            packets: 30,
            bytes: 3000,
            sessions: 2,
            installed: 5,
            removed: 3,
            refused_full: 7,
            errors: 1,
            dir_packets: [20, 10],
            dir_bytes: [2000, 1000],
            misses: 11,
        }
    }

    #[test]
    fn the_first_cause_is_kept_as_the_reason() {
        let slot = std::sync::Mutex::new(None);
        note(&slot, "quicknat: something else");
        assert_eq!(*slot.lock().unwrap(), None);
        note(&slot, "xdp fast path: off (unavailable on g-in: E2BIG)");
        note(
            &slot,
            "xdp fast path: off (the XDP program was loaded without it)",
        );
        assert!(slot.lock().unwrap().as_deref().unwrap().contains("E2BIG"));
        let slot = std::sync::Mutex::new(None);
        note(
            &slot,
            "xdp fast path: off (the AF_XDP backend is not in use)",
        );
        let gw = super::super::GatewayConfig {
            xdp_fast_path: FastPathSwitch::Auto,
            ..super::super::GatewayConfig::new("g-in".into(), "g-out".into())
        };
        let s = status(&gw, &None, slot.lock().unwrap().take());
        assert!(!s.is_on());
        assert_eq!(s.why(), "the AF_XDP backend is not in use");
        let gw = super::super::GatewayConfig {
            xdp_fast_path: FastPathSwitch::Off,
            ..super::super::GatewayConfig::new("g-in".into(), "g-out".into())
        };
        assert_eq!(
            status(&gw, &None, None).why(),
            "turned off in the configuration"
        );
    }

    #[test]
    fn off_reports_why_and_no_counters() {
        let s = FastPathStatus::off(
            FastPathSwitch::Auto,
            "the XDP program runs in generic (skb) mode".into(),
        );
        assert!(!s.is_on());
        assert_eq!(s.counters(), None);
        let j = s.status_json();
        assert_eq!(j["switch"], "auto");
        assert_eq!(j["on"], false);
        assert_eq!(j["why"], "the XDP program runs in generic (skb) mode");
        assert_eq!(s.stats_json(), Value::Null);
        assert_eq!(log_suffix(None), "");
        let m = s.metrics_text();
        assert!(m.contains("quicknat_xdp_fast_path_enabled 0\n"), "{m}");
        assert!(!m.contains("packets"), "{m}");
    }

    #[test]
    fn on_exports_every_counter_in_stats_metrics_and_the_log_line() {
        let s = FastPathStatus::fixed(sample());
        assert!(s.is_on());
        let j = s.stats_json();
        for (k, v) in [
            ("packets", 30),
            ("bytes", 3000),
            ("packets_out", 20),
            ("packets_in", 10),
            ("bytes_out", 2000),
            ("bytes_in", 1000),
            ("sessions", 2),
            ("installs", 5),
            ("removals", 3),
            ("misses", 11),
            ("map_full", 7),
            ("errors", 1),
        ] {
            assert_eq!(j[k], v, "{k} in {j}");
        }
        let m = s.metrics_text();
        for line in [
            "quicknat_xdp_fast_path_enabled 1",
            "quicknat_xdp_fast_path_packets_total{direction=\"out\"} 20",
            "quicknat_xdp_fast_path_packets_total{direction=\"in\"} 10",
            "quicknat_xdp_fast_path_bytes_total{direction=\"out\"} 2000",
            "quicknat_xdp_fast_path_bytes_total{direction=\"in\"} 1000",
            "quicknat_xdp_fast_path_sessions 2",
            "quicknat_xdp_fast_path_installs_total 5",
            "quicknat_xdp_fast_path_removals_total 3",
            "quicknat_xdp_fast_path_misses_total 11",
            "quicknat_xdp_fast_path_map_full_total 7",
            "quicknat_xdp_fast_path_errors_total 1",
            "# TYPE quicknat_xdp_fast_path_packets counter",
            "# TYPE quicknat_xdp_fast_path_sessions gauge",
        ] {
            assert!(m.lines().any(|l| l == line), "{line} missing in\n{m}");
        }
        // No worker label anywhere: it is not a worker.
        assert!(!m.contains("worker"), "{m}");
        let l = log_suffix(s.counters().as_ref());
        assert!(l.starts_with(" xdp_fast=30 "), "{l}");
        for f in [
            "xdp_fast_out=20",
            "xdp_fast_in=10",
            "xdp_fast_sessions=2",
            "xdp_fast_installs=5",
            "xdp_fast_removals=3",
            "xdp_fast_misses=11",
            "xdp_fast_map_full=7",
        ] {
            assert!(l.split(' ').any(|w| w == f), "{f} missing in {l}");
        }
    }
}
