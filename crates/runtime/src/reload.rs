//! Reloading a running gateway's configuration, for every mode: `quicknat reload` (the
//! control API calls the [`ReloadHook`]) and SIGHUP (the supervisor calls the same one).
//!
//! The hook re-reads the file through the binary's loader (every check `check-config`
//! makes, the memory estimate included), refuses what only a restart can change (the
//! `[gateway]` settings, table sizes, the mode), then applies the rest atomically through
//! [`engine::any::AnyMode::reload`]. On any error nothing changes and the error
//! (file, line, field) is the answer. On success the answer says what changed.

use std::sync::{Arc, Mutex};

use engine::any::{AnyMode, ModeConfig};
use engine::reload::ReloadAction;

use crate::control::api::ConfigSource;
use crate::control::ControlState;
use crate::live::GatewayConfig;

/// What `quicknat reload` and SIGHUP call: `Ok` is the report of what changed, `Err` why
/// the reload was refused (the configuration in force is kept). With
/// [`ReloadAction::Preview`] (`quicknat reload --dry-run`) the same checks and report,
/// nothing applied.
pub type ReloadHook = Arc<dyn Fn(ReloadAction) -> Result<String, String> + Send + Sync>;

/// Re-reads and fully validates the configuration file the gateway was started with.
pub type Loader = Arc<dyn Fn() -> Result<Loaded, String> + Send + Sync>;

/// A configuration as the loader read it.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The mode's settings.
    pub mode: ModeConfig,
    /// The gateway's settings, with the command line's overrides applied as at start.
    pub gateway: GatewayConfig,
    /// Warnings the loader found (timeouts below RFC minimums, memory), for the log.
    pub warnings: Vec<String>,
    /// SHA-256 of the bytes the loader parsed (lower-case hex), if it read a file: `quicknat
    /// status` shows it once the reload applies.
    pub sha256: Option<String>,
}

/// What a running gateway hands [`hook`].
pub struct Running {
    /// The mode's shared state.
    pub mode: Arc<AnyMode>,
    /// The mode's configuration in force (after the links' MTUs clamped it).
    pub config: ModeConfig,
    /// The gateway's settings in force.
    pub gateway: GatewayConfig,
    /// The links' MTUs (inside, outside), to clamp a new translator configuration alike.
    pub mtus: [u32; 2],
    /// ILA's control state (its mappings reload through it).
    pub ila: Option<Arc<ControlState>>,
    /// The configuration file `quicknat status` shows, shared with the control API: an
    /// applied reload records the hash of the bytes it loaded.
    pub source: Option<Arc<Mutex<ConfigSource>>>,
}

/// Builds the reload hook of a running gateway.
pub fn hook(running: Running, load: Loader) -> ReloadHook {
    let state = Mutex::new(running);
    Arc::new(move |action| {
        // One reload at a time; the data path never takes this lock.
        let mut r = state.lock().unwrap_or_else(|e| e.into_inner());
        reload(&mut r, &load, action)
    })
}

fn reload(r: &mut Running, load: &Loader, action: ReloadAction) -> Result<String, String> {
    let loaded = load()?;
    let changed = gateway_changes(&r.gateway, &loaded.gateway);
    if !changed.is_empty() {
        return Err(format!(
            "[gateway] {}: cannot change live (restart needed)",
            changed.join(", ")
        ));
    }
    let mut mode = loaded.mode;
    crate::live::clamp_translator_mtus(&mut mode, r.mtus.map(Some));
    let preview = action == ReloadAction::Preview;
    let report = if preview {
        r.mode.preview_reload(&r.config, &mode)
    } else {
        r.mode.reload(&r.config, &mode)
    }
    .map_err(|e| format!("{e}"))?;
    let mut line = format!("{}: {report}", mode.name());
    if !preview {
        r.config = mode;
    }
    if let Some(ila) = &r.ila {
        let mappings = if preview {
            ila.preview_reload()
        } else {
            ila.reload()
        }
        .map_err(|e| format!("ILA mappings: {e}"))?;
        // ILA's settings rarely change; its mappings do (the line `ila reload` gives).
        line = if report.is_empty() {
            format!("ILA mappings {mappings}")
        } else {
            format!("{line}; ILA mappings {mappings}")
        };
    }
    for w in loaded.warnings {
        line.push_str(&format!("; warning: {w}"));
    }
    if preview {
        return Ok(format!("dry run, nothing applied: would reload {line}"));
    }
    // Applied: the file in force is the one just read (its hash, for `quicknat status`).
    if let (Some(source), Some(sha256)) = (&r.source, loaded.sha256) {
        source.lock().unwrap_or_else(|e| e.into_inner()).sha256 = sha256;
    }
    Ok(line)
}

/// The `[gateway]` settings that differ (none of them changes live).
fn gateway_changes(o: &GatewayConfig, n: &GatewayConfig) -> Vec<&'static str> {
    let mut named: Vec<&'static str> = [
        ("inside", o.inside != n.inside),
        ("outside", o.outside != n.outside),
        ("backend", o.backend != n.backend),
        ("workers", o.workers != n.workers),
        ("placement", o.placement != n.placement),
        ("rx_hash", o.rx_hash_ports != n.rx_hash_ports),
        ("busy_poll", o.busy_poll != n.busy_poll),
        ("stats_interval", o.stats_interval != n.stats_interval),
        ("kernel_bypass", o.kernel_bypass != n.kernel_bypass),
        ("offloads_off", o.offloads_off != n.offloads_off),
        ("control_socket", o.control_socket != n.control_socket),
        ("control_group", o.control_group != n.control_group),
        ("gso", o.gso != n.gso),
        ("addresses", o.addresses != n.addresses),
        ("mtu", o.mtu != n.mtu),
        ("metrics", o.metrics != n.metrics),
        ("[logging]", o.natlog != n.natlog),
        ("xdp_fast_path", o.xdp_fast_path != n.xdp_fast_path),
        (
            "xdp_fast_path_entries",
            o.xdp_fast_path_entries != n.xdp_fast_path_entries,
        ),
        (
            "xdp_fast_path_idle",
            o.xdp_fast_path_idle != n.xdp_fast_path_idle,
        ),
        ("[routing]", o.routing != n.routing),
        ("cpus", o.cpus != n.cpus),
        ("reaper_cpu", o.reaper_cpu != n.reaper_cpu),
    ]
    .into_iter()
    .filter(|c| c.1)
    .map(|c| c.0)
    .collect();
    // A field added to `[gateway]` later and not named above.
    if named.is_empty() && o != n {
        named.push("other settings");
    }
    named
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::nat44::{DynamicRule, Nat44Config};

    fn nat44(pool: &str, tcp_est: u64) -> ModeConfig {
        let mut c = Nat44Config {
            rules: vec![DynamicRule {
                inside: "10.0.0.0/24".parse().unwrap(),
                pool: vec![pool.parse().unwrap()],
                ports: engine::config::PortRange::new(1024, 65535).unwrap(),
            }],
            ..Nat44Config::default()
        };
        c.timeouts.tcp_established = std::time::Duration::from_secs(tcp_est);
        ModeConfig::Nat44(c)
    }

    fn running(cfg: &ModeConfig) -> Running {
        Running {
            mode: Arc::new(AnyMode::new(cfg, 1).unwrap()),
            config: cfg.clone(),
            gateway: GatewayConfig::new("in0".into(), "out0".into()),
            mtus: [1500, 1500],
            ila: None,
            source: None,
        }
    }

    fn loader(next: Arc<Mutex<Result<Loaded, String>>>) -> Loader {
        Arc::new(move || next.lock().unwrap().clone())
    }

    #[test]
    fn the_hook_reports_changes_and_keeps_the_config_on_refusal() {
        let start = nat44("203.0.113.1/32", 7440);
        let r = running(&start);
        let gw = r.gateway.clone();
        let next = Arc::new(Mutex::new(Ok(Loaded {
            mode: nat44("198.51.100.0/30", 3600),
            gateway: gw.clone(),
            warnings: vec![],
            sha256: None,
        })));
        let h = hook(r, loader(Arc::clone(&next)));
        let ok = h(ReloadAction::Apply).unwrap();
        assert!(ok.contains("pool + 198.51.100.0/30"), "{ok}");
        assert!(ok.contains("tcp_established 7440 s → 3600 s"), "{ok}");
        // A gateway change is refused, naming the field.
        let mut moved = gw.clone();
        moved.workers = 4;
        moved.outside = "eth9".into();
        *next.lock().unwrap() = Ok(Loaded {
            mode: nat44("192.0.2.0/30", 60),
            gateway: moved,
            warnings: vec![],
            sha256: None,
        });
        let e = h(ReloadAction::Apply).unwrap_err();
        assert!(
            e.contains("outside, workers") && e.contains("restart"),
            "{e}"
        );
        // The loader's error is the answer; then the same file again: no change.
        *next.lock().unwrap() = Err("q.toml: line 3: field pool: bad".into());
        assert_eq!(
            h(ReloadAction::Apply).unwrap_err(),
            "q.toml: line 3: field pool: bad"
        );
        *next.lock().unwrap() = Ok(Loaded {
            mode: nat44("198.51.100.0/30", 3600),
            gateway: gw,
            warnings: vec![],
            sha256: None,
        });
        assert_eq!(h(ReloadAction::Apply).unwrap(), "nat44: no change");
    }

    // `quicknat status` shows the hash of the file in force, after a reload too.
    #[test]
    fn an_applied_reload_records_the_hash_a_refused_one_does_not() {
        let start = nat44("203.0.113.1/32", 7440);
        let mut r = running(&start);
        let source = Arc::new(Mutex::new(ConfigSource {
            path: "/etc/q.toml".into(),
            sha256: "aa".into(),
        }));
        r.source = Some(Arc::clone(&source));
        let gw = r.gateway.clone();
        let loaded = |pool: &str, sha: &str| Loaded {
            mode: nat44(pool, 7440),
            gateway: gw.clone(),
            warnings: vec![],
            sha256: Some(sha.into()),
        };
        let next = Arc::new(Mutex::new(Ok(loaded("198.51.100.0/30", "bb"))));
        let h = hook(r, loader(Arc::clone(&next)));
        h(ReloadAction::Apply).unwrap();
        assert_eq!(source.lock().unwrap().sha256, "bb");
        let mut moved = loaded("192.0.2.0/30", "cc");
        moved.gateway.workers = 3;
        *next.lock().unwrap() = Ok(moved);
        assert!(h(ReloadAction::Apply).is_err());
        assert_eq!(
            source.lock().unwrap().sha256,
            "bb",
            "a refused reload keeps the hash"
        );
    }

    #[test]
    fn a_routing_change_is_refused_by_name() {
        let o = GatewayConfig::new("in0".into(), "out0".into());
        let mut n = o.clone();
        n.routing.standby_metric = 2000;
        assert_eq!(gateway_changes(&o, &n), ["[routing]"]);
        assert!(gateway_changes(&o, &o.clone()).is_empty());
    }

    #[test]
    fn a_fast_path_change_is_refused_by_name() {
        let o = GatewayConfig::new("in0".into(), "out0".into());
        let mut n = o.clone();
        n.xdp_fast_path = crate::live::FastPathSwitch::Off;
        n.xdp_fast_path_entries = 1024;
        n.xdp_fast_path_idle = std::time::Duration::from_secs(5);
        assert_eq!(
            gateway_changes(&o, &n),
            [
                "xdp_fast_path",
                "xdp_fast_path_entries",
                "xdp_fast_path_idle"
            ]
        );
    }
}
