//! Reload of every mode (`quicknat reload` and SIGHUP report what changed, and refuse,
//! keeping the old configuration, on any error), through the same hook
//! the live gateway gives SIGHUP and `quicknat reload` (`runtime::reload::hook`), with
//! files parsed by the binary's own loader.
//!
//! For NAT44, NAT64, SIIT, CLAT and ILA: an edit that may change live is applied and its
//! report names it; an edit that needs a restart, a file that does not parse, and a change
//! of mode are each refused with the reason, and the configuration in force stays: reloading
//! the file in force afterwards answers "no change".

use std::sync::{Arc, Mutex};

use engine::any::AnyMode;
use engine::reload::ReloadAction;
use runtime::live::GatewayConfig;
use runtime::reload::{hook, Loaded, Loader, ReloadHook, Running};

/// The file the hook's loader reads next: a configuration text, as an operator left it.
type Next = Arc<Mutex<String>>;

fn load(text: &str) -> Result<Loaded, String> {
    let c = quicknat::config::load_str_on(text, "gw.toml", &Default::default())
        .map_err(|e| e.to_string())?;
    Ok(Loaded {
        mode: c.mode,
        gateway: GatewayConfig::new("in0".into(), "out0".into()),
        warnings: c.warnings,
        sha256: None,
    })
}

/// A running instance of `start` and its reload hook, reading whatever `Next` holds.
fn gateway(start: &str) -> (ReloadHook, Next) {
    let cfg = load(start).unwrap();
    // As the live gateway does at start (the hook clamps each new file alike).
    let mut mode = cfg.mode;
    mode.clamp_mtus(1500, 1500);
    let running = Running {
        mode: Arc::new(AnyMode::new(&mode, 1).unwrap()),
        config: mode,
        gateway: cfg.gateway,
        mtus: [1500, 1500],
        ila: None,
        source: None,
    };
    let next: Next = Arc::new(Mutex::new(start.to_string()));
    let file = Arc::clone(&next);
    let loader: Loader = Arc::new(move || load(&file.lock().unwrap()));
    (hook(running, loader), next)
}

/// Reloads `text`; the hook's answer.
fn reload(h: &ReloadHook, next: &Next, text: &str) -> Result<String, String> {
    *next.lock().unwrap() = text.to_string();
    h(ReloadAction::Apply)
}

/// Previews reloading `text` (`quicknat reload --dry-run`); the hook's answer.
fn preview(h: &ReloadHook, next: &Next, text: &str) -> Result<String, String> {
    *next.lock().unwrap() = text.to_string();
    h(ReloadAction::Preview)
}

/// The checks every mode shares: `live` applies and is reported with `changed`; each of
/// `refused` (text, what the refusal must name) is refused and leaves `live` in force.
fn every_mode(start: &str, live: &str, changed: &[&str], refused: &[(&str, &str)]) {
    let (h, next) = gateway(start);
    // A dry run says what the reload will say, twice (it applied nothing).
    let dry = preview(&h, &next, live).unwrap();
    assert_eq!(preview(&h, &next, live).unwrap(), dry);
    let ok = reload(&h, &next, live).unwrap();
    assert_eq!(dry, format!("dry run, nothing applied: would reload {ok}"));
    for c in changed {
        assert!(ok.contains(c), "{ok:?} should name {c:?}");
    }
    for (text, why) in refused {
        let dry = preview(&h, &next, text).unwrap_err();
        let e = reload(&h, &next, text).unwrap_err();
        assert!(e.contains(why), "{e:?} should name {why:?}");
        assert_eq!(dry, e, "a dry run refuses as the reload does");
    }
    // A file that does not parse: refused with its line.
    let e = reload(&h, &next, &format!("{live}\nbogus = ")).unwrap_err();
    assert!(e.contains("gw.toml:"), "{e}");
    // Nothing refused took effect: the edit in force is still the one applied.
    let same = reload(&h, &next, live).unwrap();
    assert!(same.ends_with("no change"), "{same}");
}

#[test]
fn nat44_reloads_or_refuses() {
    let start = "[[nat44.rule]]\ninside = \"10.0.0.0/24\"\npool = [\"203.0.113.1/32\"]\n";
    let live = format!("{start}[nat44.timeouts]\nudp = 120\n")
        .replace("113.1/32\"]", "113.1/32\", \"203.0.113.8/30\"]");
    let restart = live.replace(
        "[nat44.timeouts]",
        "[nat44]\nmax_sessions = 4096\n[nat44.timeouts]",
    );
    every_mode(
        start,
        &live,
        &["nat44: ", "pool + 203.0.113.8/30", "udp 300 s → 120 s"],
        &[
            (&restart, "max_sessions"),
            (
                "[nat64]\npool4 = [\"203.0.113.1/32\"]\n",
                "from nat44 to nat64",
            ),
        ],
    );
}

#[test]
fn nat64_reloads_or_refuses() {
    let start = "[nat64]\npref64 = \"64:ff9b::/96\"\npool4 = [\"203.0.113.1/32\"]\n";
    let live = start.replace("113.1/32\"]", "113.1/32\", \"203.0.113.8/30\"]");
    let restart = live.replace("64:ff9b::/96", "2001:db8:64::/96");
    every_mode(
        start,
        &live,
        &["nat64: ", "pool4 + 203.0.113.8/30"],
        &[(&restart, "pref64")],
    );
}

#[test]
fn siit_reloads_or_refuses() {
    let start = "[siit]\npref64 = \"2001:db8:64::/96\"\n\
        eam = [ { ipv4 = \"192.168.255.10/32\", ipv6 = \"2001:db8:1::10/128\" } ]\n";
    let live = start.replace("255.10/32", "255.20/32");
    // SIIT's whole translator configuration reloads; a mode change does not.
    let clat = "[clat]\nipv4 = \"192.0.0.2/32\"\nipv6 = \"2001:db8:aaaa::2/128\"\n\
        plat = \"64:ff9b::/96\"\n";
    every_mode(
        start,
        &live,
        &["siit: ", "eam: 1 → 1 entries"],
        &[(clat, "from siit to clat")],
    );
}

#[test]
fn clat_reloads_or_refuses() {
    let start = "[clat]\nipv4 = \"192.0.0.2/32\"\nipv6 = \"2001:db8:aaaa::2/128\"\n\
        plat = \"64:ff9b::/96\"\n";
    let live = start.replace("64:ff9b::/96", "2001:db8:64::/96");
    let siit = "[siit]\npref64 = \"2001:db8:64::/96\"\n";
    every_mode(
        start,
        &live,
        &["clat: ", "pref64"],
        &[(siit, "from clat to siit")],
    );
}

#[test]
fn ila_reloads_or_refuses() {
    let start = "[ila]\nsir_prefix = \"3333:0:0:1::/64\"\ncsum_mode = \"adjust-transport\"\n\
        ident_type = \"luid\"\nunmapped = \"drop\"\n";
    // Its mappings reload through the control state (tests/e2e/test_control_api.py,
    // test_ila.py); the same settings are no change, another setting needs a restart.
    let restart = start.replace("adjust-transport", "no-action");
    every_mode(start, start, &["ila: no change"], &[(&restart, "restart")]);
}
