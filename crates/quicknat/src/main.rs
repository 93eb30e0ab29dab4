//! The `quicknat` command: loads a configuration file and drives the runtime.
//!
//! This is the only place that turns errors into exit codes and one-line messages;
//! it holds no NAT logic of its own. The measurement lab and its traffic tools are a
//! binary of their own, `quicknat-lab` (crates/lab), and so is the in-memory benchmark,
//! `quicknat-bench` (crates/bench).

mod ctl;
mod ilactl;
// `quicknat trace`: packets through a running gateway, each with its fate.
mod tracectl;
// `quicknat drain`: withdraw the routes, wait for the traffic to move, stop.
mod drainctl;
// The book's generated reference pages, compared with the committed ones by its tests.
#[cfg(test)]
mod reference;
// Completions, man page and the long version.
mod docs;
// deterministic NAT: `quicknat det forward|reverse`.
mod det;
// `quicknat import jool`: Jool's atomic configuration into a quicknat file.
mod import_jool;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use engine::config::Filtering;
use engine::nat44::Nat44Config;

use quicknat::config::{self, Config};

/// quicknat: a user-space NAT44 gateway.
#[derive(Debug, Parser)]
#[command(name = "quicknat", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// What `quicknat sessions` does besides listing.
#[derive(Debug, Subcommand)]
enum SessionsAction {
    /// End the sessions the filters name (every one with --all) as the reaper ends
    /// expired ones: their bindings and ports are released, NAT events logged. Prints how
    /// many match first.
    Clear {
        #[command(flatten)]
        which: ctl::ClearArgs,
        #[command(flatten)]
        opts: ctl::CtlOpts,
    },
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Translate every packet of a pcap capture offline and write the result to another pcap.
    Translate {
        /// Configuration file (default: the built-in examples/nat44.toml).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Capture to read (pcap).
        #[arg(value_name = "IN.pcap")]
        input: PathBuf,
        /// Capture to write (pcap).
        #[arg(value_name = "OUT.pcap")]
        output: PathBuf,
        /// Print what became of each packet the filters take (as `quicknat trace` does on
        /// a running gateway) before the summary.
        #[arg(long)]
        trace: bool,
        /// With --trace: the records as JSON lines.
        #[arg(long, requires = "trace")]
        json: bool,
        #[command(flatten)]
        trace_filter: tracectl::TraceFilterArgs,
    },
    /// Load and validate a configuration file, then print what it sets up.
    CheckConfig {
        /// Configuration file (default: the built-in examples/nat44.toml).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Print the effective configuration instead of the summary: every key with the
        /// value in force, defaults filled in, as TOML in the reference's order (diff two
        /// hosts' outputs).
        #[arg(long)]
        effective: bool,
    },
    /// Run the live gateway on the interfaces named in the configuration's [gateway]
    /// table until SIGINT or SIGTERM.
    Run {
        /// Configuration file (required: the built-in example's pool is a documentation
        /// prefix). Repeat it to run several gateways (each its own mode on its own
        /// interface pair) in one process.
        #[arg(long, value_name = "FILE")]
        config: Vec<PathBuf>,
        /// Override [gateway] inside: the interface facing the inside network.
        #[arg(long, value_name = "IF")]
        inside: Option<String>,
        /// Override [gateway] outside: the interface facing the outside.
        #[arg(long, value_name = "IF")]
        outside: Option<String>,
        /// Override [gateway] workers.
        #[arg(long, value_name = "N")]
        workers: Option<usize>,
    },
    /// List or change the ILA mappings of a running gateway through its control socket.
    Ila(ilactl::IlaArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    Completions(docs::CompletionsArgs),
    /// Print a man page (roff) to stdout: quicknat(1), the command, or quicknat.toml(5),
    /// the configuration file.
    Man {
        /// The manual section: 1 (the command) or 5 (the configuration file).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=5))]
        section: u8,
    },
    // -- the control API's verbs (ctl/) --
    /// List the live sessions of a running gateway (filters narrow the list); `clear`
    /// ends them.
    #[command(args_conflicts_with_subcommands = true)]
    Sessions {
        #[command(subcommand)]
        action: Option<SessionsAction>,
        #[command(flatten)]
        filter: ctl::SessionArgs,
        #[command(flatten)]
        opts: ctl::CtlOpts,
    },
    /// List the bindings (public mappings) of a running gateway; ILA: its mappings.
    Bindings {
        #[command(flatten)]
        opts: ctl::CtlOpts,
    },
    /// Show the use of each public pool address: ports taken, bindings, subscribers.
    Pool {
        #[command(flatten)]
        opts: ctl::CtlOpts,
    },
    /// Show the session table's census: sessions by protocol and TCP state, capacity.
    Census {
        #[command(flatten)]
        opts: ctl::CtlOpts,
    },
    /// Trace the next packets matching a filter through a running gateway: where each
    /// arrived, the mode's decision (session created or found, translated to what, dropped
    /// and why, ICMP error sent) and where it went, printed as they pass.
    Trace(tracectl::TraceArgs),
    /// Withdraw a running gateway's announced routes ([routing]) so the routers move its
    /// traffic to the other gateways, wait until it forwards nothing more, report, and
    /// with --stop stop it: the first step of a rolling upgrade.
    Drain(drainctl::DrainArgs),
    /// Show every counter and drop reason (with its meaning), total and per worker.
    Stats {
        #[command(flatten)]
        opts: ctl::CtlOpts,
    },
    /// Show what a running gateway is: mode, interfaces, backend, workers, uptime, config.
    Status {
        #[command(flatten)]
        opts: ctl::CtlOpts,
    },
    /// Ask a running gateway to reload its configuration; prints its answer. Exits
    /// non-zero when the gateway refuses the file (the configuration in force is kept).
    Reload {
        /// Only say what the reload would change, or why it would be refused; the
        /// gateway is left as it is.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        opts: ctl::CtlOpts,
    },
    // -- deterministic NAT --
    /// Deterministic NAT (RFC 7422) offline from the configuration: `det forward INSIDE`
    /// gives the public address and port range, `det reverse PUBLIC PORT` the subscriber.
    Det(det::DetArgs),
    // -- migration --
    /// Convert another translator's configuration into a quicknat file: `import jool FILE`
    /// reads Jool's atomic configuration (JSON) and lists every setting it cannot carry over.
    Import(import_jool::ImportArgs),
}

fn main() -> ExitCode {
    let matches = Cli::command()
        .long_version(docs::long_version())
        .get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    // One subscriber for the process; `run` takes the first
    // configuration's [gateway] log_level and log_format (the environment overrides it).
    quicknat::logging::init(&log_settings(&cli.command));
    let result = match cli.command {
        Command::Translate {
            config,
            input,
            output,
            trace,
            json,
            trace_filter,
        } => {
            let trace = (trace, &trace_filter, json);
            run_translate(config.as_deref(), &input, &output, trace)
        }
        Command::CheckConfig { config, effective } => {
            run_check_config(config.as_deref(), effective)
        }
        Command::Ila(args) => ilactl::run(&args),
        Command::Sessions {
            action: Some(SessionsAction::Clear { which, opts }),
            ..
        } => ctl::run(&ctl::Verb::ClearSessions(which), &opts),
        Command::Sessions {
            action: None,
            filter,
            opts,
        } => ctl::run(&ctl::Verb::Sessions(filter), &opts),
        Command::Bindings { opts } => ctl::run(&ctl::Verb::Bindings, &opts),
        Command::Pool { opts } => ctl::run(&ctl::Verb::Pool, &opts),
        Command::Census { opts } => ctl::run(&ctl::Verb::Census, &opts),
        Command::Trace(args) => tracectl::run(&args),
        Command::Drain(args) => drainctl::run(&args),
        Command::Stats { opts } => ctl::run(&ctl::Verb::Stats, &opts),
        Command::Status { opts } => ctl::run(&ctl::Verb::Status, &opts),
        Command::Reload { dry_run, opts } => ctl::run(&ctl::Verb::Reload(dry_run), &opts),
        Command::Run {
            config,
            inside,
            outside,
            workers,
        } => run_gateways(&config, inside, outside, workers),
        Command::Completions(args) => docs::completions(&args, Cli::command()),
        Command::Man { section: 5 } => {
            print!("{}", config::reference::man_page(env!("CARGO_PKG_VERSION")));
            Ok(())
        }
        Command::Man { section: 1 } => docs::man(Cli::command()),
        Command::Man { section } => Err(anyhow::anyhow!(
            "no quicknat page in manual section {section}: 1 (the command) or 5 (the configuration file)"
        )),
        Command::Det(args) => det::run(&args),
        Command::Import(args) => import_jool::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, skipping a cause whose text its parent already ends
/// with (errors that print their `source` in their own message would otherwise repeat it).
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// The machine the configuration must fit: its available memory, read here at the edge
/// (`/proc/meminfo`), not checked when it cannot be read.
fn machine() -> config::Machine {
    let mut m: config::Machine = std::fs::read_to_string("/proc/meminfo")
        .map(|t| config::Machine::from_meminfo(&t))
        .unwrap_or_default();
    let cpus = runtime::live::cpus::allowed();
    m.cpus = (!cpus.is_empty()).then(|| config::CpuMask::of(&cpus));
    m
}

/// Loads `path`, or the built-in example when it is `None` (saying so on stderr), held
/// against this machine's memory: `check-config`, `translate` and `run` refuse alike
/// what cannot run, before anything is allocated.
fn load_config(path: Option<&Path>) -> anyhow::Result<Config> {
    let machine = machine();
    let config = match path {
        Some(p) => config::load_file_on(p, &machine)?,
        None => {
            tracing::info!("using built-in config examples/nat44.toml");
            config::load_str_on(
                config::DEFAULT_CONFIG,
                config::DEFAULT_CONFIG_ORIGIN,
                &machine,
            )?
        }
    };
    for w in &config.warnings {
        tracing::warn!(event = "config", "warning: {w}");
    }
    Ok(config)
}

/// `quicknat translate`: replays `input` through the engine into `output`.
/// With `--trace` (`trace`: whether, its filter, and whether as JSON lines), each
/// packet's record is printed as the replay reaches it.
fn run_translate(
    config: Option<&Path>,
    input: &Path,
    output: &Path,
    (on, filter, json): (bool, &tracectl::TraceFilterArgs, bool),
) -> anyhow::Result<()> {
    if !on && filter.filter()? != runtime::trace::TraceFilter::default() {
        anyhow::bail!(
            "--host, --port, --proto, --direction and --drop-reason choose what --trace \
             shows: add --trace"
        );
    }
    let trace = on.then_some((filter, json));
    let config = load_config(config)?;
    let egress = config
        .gateway
        .as_ref()
        .map(runtime::live::GatewayConfig::egress)
        .unwrap_or_default();
    let mut print = |r: serde_json::Value| match trace.is_some_and(|t| t.1) {
        true => println!("{r}"),
        false => print!("{}", runtime::trace::text(&r)),
    };
    let offline_trace = match trace {
        Some((f, _)) => Some(runtime::offline::OfflineTrace {
            filter: f.filter()?,
            sink: &mut print,
        }),
        None => None,
    };
    let report = runtime::offline::translate_pcap_traced(
        &config.mode,
        &egress,
        input,
        output,
        offline_trace,
    )
    .with_context(|| {
        format!(
            "cannot translate {} into {}",
            input.display(),
            output.display()
        )
    })?;
    // JSON trace records own stdout; the summary goes beside them.
    if trace.is_some_and(|t| t.1) {
        eprintln!("{report}");
    } else {
        println!("{report}");
    }
    Ok(())
}

/// `quicknat check-config`: validates and summarises a configuration.
fn run_check_config(path: Option<&Path>, effective: bool) -> anyhow::Result<()> {
    let config = load_config(path)?;
    let origin = path.map_or_else(
        || config::DEFAULT_CONFIG_ORIGIN.to_owned(),
        |p| p.display().to_string(),
    );
    if effective {
        // The loader read and checked it; read again for its keys as written.
        let text = match path {
            Some(p) => String::from_utf8(config::read_file(p)?)?,
            None => config::DEFAULT_CONFIG.to_owned(),
        };
        print!("{}", config::effective::effective(&text, &origin)?);
        return Ok(());
    }
    println!("{origin}: valid");
    print!("{}", mode_summary(&config.mode));
    // What the tables can grow to, against the machine.
    let available = machine()
        .mem_available
        .map_or_else(|| "unknown".to_owned(), engine::config::human_bytes);
    println!(
        "memory: up to {} when every table is full (machine: {available} available)",
        config.memory
    );
    Ok(())
}

/// A next-hop MTU as configured: a number, or the link's when not set (65535).
fn next_hop_mtu(m: u32) -> String {
    if m >= u32::from(u16::MAX) {
        "link".to_owned()
    } else {
        m.to_string()
    }
}

/// What an IPv4/IPv6 translation mode sets up.
fn mode_summary(m: &engine::any::ModeConfig) -> String {
    use engine::any::ModeConfig;
    use std::fmt::Write;
    let mut s = String::new();
    let siit = |s: &mut String, c: &engine::siit::SiitConfig| {
        if let Some(p) = c.pref64 {
            let _ = writeln!(s, "pref64 {p}");
        }
        for e in &c.eam {
            let _ = writeln!(s, "eam {} <-> {}", e.ipv4, e.ipv6);
        }
        if let Some(a) = &c.icmp_error_source {
            let _ = writeln!(s, "icmp error source (RFC 6791) {a}");
        }
        let _ = writeln!(
            s,
            "icmp errors {}; eam hairpin {}",
            if c.icmp_errors { "sent" } else { "off" },
            c.eam_hairpin.as_str()
        );
        let _ = writeln!(
            s,
            "mtu ipv6 {} ipv4 {}; udp zero checksum {}",
            next_hop_mtu(c.options.ipv6_mtu),
            next_hop_mtu(c.options.ipv4_mtu),
            if c.options.translate_udp_zero_csum {
                "computed"
            } else {
                "dropped"
            }
        );
        let _ = writeln!(
            s,
            "ipv6 udp zero checksum {}",
            if c.options.compute_ipv6_udp_zero_csum {
                "computed"
            } else {
                "dropped"
            }
        );
        let o = &c.options;
        let set = |v: Option<u8>| v.map_or("copied".to_owned(), |v| format!("set to {v}"));
        let _ = writeln!(
            s,
            "lowest ipv6 mtu {}; df {}; traffic class {}; tos {}",
            o.lowest_ipv6_mtu,
            o.df.as_str(),
            if o.tos_to_traffic_class || o.traffic_class.is_some() {
                set(o.traffic_class)
            } else {
                "zero".to_owned()
            },
            if o.tos_to_traffic_class || o.tos.is_some() {
                set(o.tos)
            } else {
                "zero".to_owned()
            },
        );
    };
    match m {
        ModeConfig::Nat44(n) => s.push_str(&summary(n)),
        ModeConfig::Siit(c) => {
            let _ = writeln!(s, "mode: siit (stateless, RFC 7915)");
            siit(&mut s, c);
        }
        ModeConfig::Clat(c) => {
            let _ = writeln!(s, "mode: clat (464XLAT customer side, RFC 6877)");
            siit(&mut s, c);
        }
        ModeConfig::Nat64(c) => {
            let pool: Vec<String> = c.pool4.iter().map(ToString::to_string).collect();
            let _ = writeln!(s, "mode: nat64 (stateful, RFC 6146)");
            let _ = writeln!(
                s,
                "pref64 {}; pool4 {} ports {}-{}; hairpinning {}",
                c.pref64,
                pool.join(", "),
                c.ports.first,
                c.ports.last,
                if c.hairpinning { "on" } else { "off" }
            );
            for b in &c.static_bindings {
                let _ = writeln!(s, "static {:?} {} -> {}", b.protocol, b.public, b.inside);
            }
            let _ = writeln!(s, "limits: max sessions {}", c.max_sessions);
        }
        ModeConfig::Ila(c) => {
            let _ = writeln!(s, "mode: ila (identifier-locator addressing)");
            s.push_str(&config::ila::summary(c));
        }
    }
    s
}

/// A short human-readable description of what a configuration sets up.
fn summary(c: &Nat44Config) -> String {
    use std::fmt::Write;
    let on = |b: bool| if b { "on" } else { "off" };
    let filtering = match c.filtering {
        Filtering::EndpointIndependent => "endpoint-independent",
        Filtering::AddressDependent => "address-dependent",
        Filtering::AddressAndPortDependent => "address-and-port-dependent",
    };
    let mut s = String::new();
    // Writing to a String cannot fail; the results are ignored on purpose.
    let _ = writeln!(
        s,
        "filtering: {filtering}; hairpinning {}; port preservation {}; decrement TTL {}",
        on(c.hairpinning),
        on(c.port_preservation),
        on(c.decrement_ttl)
    );
    for (i, r) in c.rules.iter().enumerate() {
        let addrs: u64 = r.pool.iter().map(|p| p.size()).sum();
        let pool: Vec<String> = r.pool.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            s,
            "rule {}: {} -> pool {} ({addrs} addresses), ports {}-{} ({} per address, {} in all)",
            i + 1,
            r.inside,
            pool.join(", "),
            r.ports.first,
            r.ports.last,
            r.ports.count(),
            addrs * u64::from(r.ports.count())
        );
    }
    for (i, m) in c.static_nat.iter().enumerate() {
        let _ = writeln!(s, "static {}: {} <-> {}", i + 1, m.inside, m.public);
    }
    for (i, f) in c.port_forwards.iter().enumerate() {
        let proto = f.protocol.name();
        let _ = writeln!(s, "forward {}: {proto} {} -> {}", i + 1, f.public, f.inside);
    }
    let t = &c.timeouts;
    let _ = writeln!(
        s,
        "timeouts: udp {} s, tcp established {} s, tcp transitory {} s, tcp closed {} s, icmp {} s",
        t.udp.as_secs(),
        t.tcp_established.as_secs(),
        t.tcp_transitory.as_secs(),
        t.tcp_closed.as_secs(),
        t.icmp.as_secs()
    );
    let _ = writeln!(
        s,
        "limits: max sessions {}; port reuse hold {} s",
        c.max_sessions,
        c.port_reuse_hold.as_secs()
    );
    // Deterministic NAT.
    if let Some(m) = c
        .deterministic
        .as_ref()
        .and_then(|d| engine::nat44::deterministic::DetMap::new(d).ok())
    {
        s.push_str(&det::summary(&m));
    }
    s
}

/// `quicknat run`: one live gateway per configuration file, until SIGINT/SIGTERM.
fn run_gateways(
    paths: &[PathBuf],
    inside: Option<String>,
    outside: Option<String>,
    workers: Option<usize>,
) -> anyhow::Result<()> {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let stop = Arc::new(AtomicBool::new(false));
    // A live gateway needs a configuration of its own.
    require_config(paths)?;
    // systemd's notify protocol, when started as a Type=notify unit.
    if runtime::sdnotify::install(paths.len().max(1)) {
        tracing::info!(
            event = "systemd",
            "systemd: notifying $NOTIFY_SOCKET (READY, STATUS, WATCHDOG, RELOADING, STOPPING)"
        );
    }
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("installing signal handlers")?;
    }
    if paths.len() <= 1 {
        return run_gateway(
            paths.first().map(PathBuf::as_path),
            inside,
            outside,
            workers,
            stop,
            "",
            false,
        );
    }
    anyhow::ensure!(
        inside.is_none() && outside.is_none(),
        "--inside/--outside name one interface pair; with several --config files, name the interfaces in each file's [gateway]"
    );
    // Every configuration is checked before any gateway starts.
    let mut sockets: Vec<(PathBuf, &PathBuf)> = Vec::new();
    let mut devices: Vec<(String, &PathBuf)> = Vec::new();
    for p in paths {
        let cfg = load_config(Some(p))?;
        // Each gateway its own control socket: configured, or derived from the file's name.
        let sock = control_socket_path(cfg.gateway.as_ref(), Some(p), true).0;
        if let Some((_, other)) = sockets.iter().find(|(s, _)| *s == sock) {
            anyhow::bail!(
                "{} and {} would both serve the control socket {}: give each [gateway] its own control_socket",
                other.display(),
                p.display(),
                sock.display()
            );
        }
        sockets.push((sock, p));
        // -- routing integration --
        // Each gateway its own announcement device: one's exit must not take the other's
        // routes (the device name identifies them).
        if cfg.routing.enabled() {
            let dev = cfg.routing.device.clone();
            if let Some((_, other)) = devices.iter().find(|(d, _)| *d == dev) {
                anyhow::bail!(
                    "{} and {} would both announce on the device {dev}: give each [routing] its own device",
                    other.display(),
                    p.display(),
                );
            }
            devices.push((dev, p));
        }
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = paths
            .iter()
            .map(|p| {
                let stop = Arc::clone(&stop);
                let tag = format!("{}: ", p.display());
                s.spawn(move || {
                    let r =
                        run_gateway(Some(p), None, None, workers, Arc::clone(&stop), &tag, true);
                    // One gateway failing stops the others: the process is one service.
                    stop.store(true, std::sync::atomic::Ordering::Relaxed);
                    r
                })
            })
            .collect();
        // Each gateway thread drops its privileges once set up; this thread only waits.
        if let Err(e) = runtime::live::drop_privileges() {
            tracing::warn!(
                event = "privileges",
                "warning: privileges of the main thread not dropped: {e}"
            );
        }
        let mut first_err = None;
        for h in handles {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert(anyhow::anyhow!("a gateway thread panicked"));
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    })
}

/// One live gateway until `stop`; log lines start with `tag`.
fn run_gateway(
    path: Option<&Path>,
    inside: Option<String>,
    outside: Option<String>,
    workers: Option<usize>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    tag: &str,
    several: bool,
) -> anyhow::Result<()> {
    let cfg = load_config(path)?;
    let (_, default_socket) = control_socket_path(cfg.gateway.as_ref(), path, several);
    let gw = gateway_of(
        &cfg,
        path,
        several,
        inside.clone(),
        outside.clone(),
        workers,
    )?;
    let api = runtime::control::api::ApiOptions {
        config: path.map(config_source).transpose()?,
        // The reload hook is built by `run` from `loader` (SIGHUP runs the same).
        reload: None,
        default_socket,
    };
    // `quicknat ila reload` re-reads the file the gateway was started with.
    let reload: Option<runtime::control::ReloadFn> = path.map(|p| {
        let p = p.to_path_buf();
        let f: runtime::control::ReloadFn = Box::new(move || {
            let c = config::load_file(&p)?;
            c.ila()
                .cloned()
                .ok_or_else(|| format!("{}: no [ila] table any more", p.display()).into())
        });
        f
    });
    // SIGHUP: re-read the configuration's ILA mappings (like `quicknat ila reload`).
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hup))
        .context("installing the SIGHUP handler")?;
    // Start-up checks, each a warning with its fix.
    for f in runtime::preflight::run(&cfg.mode, &gw) {
        tracing::warn!(event = "preflight", check = f.check, "{tag}warning: {f}");
    }
    // The runtime's lines go to tracing (level, fields); each
    // counter line is also systemd's STATUS=.
    let gateway = tag.trim_end_matches(": ");
    let log = |line: String| {
        quicknat::logging::emit(gateway, &line);
        if quicknat::logging::event_of(&line) == "stats" {
            runtime::sdnotify::status(&format!("{tag}{line}"));
        }
    };
    let loader = path.map(|p| reload_loader(p, several, inside, outside, workers));
    let summary = runtime::live::run(cfg.mode, &gw, stop, reload, Some(hup), &log, loader, api)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    log(format!(
        "stopped. {}",
        runtime::live::stats_line(&summary.engine, &summary.io, summary.sessions)
    ));
    Ok(())
}

// -- logging --

/// The logging settings for `command`: `run`'s first configuration's, else the defaults
/// (a configuration that does not load is reported, with its line, when it is loaded).
fn log_settings(command: &Command) -> quicknat::logging::LogSettings {
    match command {
        Command::Run { config, .. } => config
            .first()
            .and_then(|p| config::load_file(p).ok())
            .map(|c| c.logging)
            .unwrap_or_default(),
        _ => quicknat::logging::LogSettings::default(),
    }
}

/// `run` refuses to start without `--config`: the built-in example's pool
/// (203.0.113.0/28) is a documentation prefix (RFC 5737) that no network routes back, so a
/// live gateway on it would translate every connection into a black hole. `translate` and
/// `check-config` keep the example as their default (README's first command).
fn require_config(paths: &[PathBuf]) -> anyhow::Result<()> {
    anyhow::ensure!(
        !paths.is_empty(),
        "run needs --config FILE: the built-in example's pool 203.0.113.0/28 is a documentation prefix no network routes back; copy examples/nat44.toml, set your pool and [gateway], and pass it (quicknat run --config FILE)"
    );
    Ok(())
}

/// The gateway settings of `cfg` with the command line's overrides.
fn gateway_of(
    cfg: &Config,
    file: Option<&Path>,
    several: bool,
    inside: Option<String>,
    outside: Option<String>,
    workers: Option<usize>,
) -> anyhow::Result<runtime::live::GatewayConfig> {
    let mut gw = match (cfg.gateway.clone(), inside, outside) {
        (Some(g), i, o) => runtime::live::GatewayConfig { inside: i.unwrap_or(g.inside), outside: o.unwrap_or(g.outside), ..g },
        (None, Some(inside), Some(outside)) => runtime::live::GatewayConfig::new(inside, outside),
        _ => anyhow::bail!("no [gateway] table in the configuration: name the interfaces there (inside = \"IF\", outside = \"IF\") or with --inside and --outside"),
    };
    // NAT event logging: `[logging]` applies with interfaces named on the command line too.
    gw.natlog = cfg.natlog.clone();
    // -- routing integration --
    gw.routing = cfg.routing.clone();
    if let Some(w) = workers {
        anyhow::ensure!((1..=64).contains(&w), "--workers must be between 1 and 64");
        gw.workers = w;
    }
    anyhow::ensure!(
        gw.inside != gw.outside,
        "the inside and outside interfaces must differ"
    );
    // Every mode serves the control API (control.rs; ILA its mapping verbs too).
    gw.control_socket = Some(control_socket_path(cfg.gateway.as_ref(), file, several).0);
    Ok(gw)
}

/// Reload: re-reads `path` as `check-config` does (memory estimate included)
/// with the same command-line overrides as at start.
fn reload_loader(
    path: &Path,
    several: bool,
    inside: Option<String>,
    outside: Option<String>,
    workers: Option<usize>,
) -> runtime::reload::Loader {
    let path = path.to_path_buf();
    std::sync::Arc::new(move || {
        // The bytes parsed are the bytes hashed (`quicknat status` after a reload).
        let bytes = config::read_file(&path).map_err(|e| e.to_string())?;
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            format!(
                "{}: cannot read the configuration file: {e}",
                path.display()
            )
        })?;
        let cfg = config::load_str_on(text, &path.display().to_string(), &machine())
            .map_err(|e| e.to_string())?;
        let gateway = gateway_of(
            &cfg,
            Some(&path),
            several,
            inside.clone(),
            outside.clone(),
            workers,
        )
        .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(runtime::reload::Loaded {
            mode: cfg.mode,
            gateway,
            warnings: cfg.warnings,
            sha256: Some(sha256_hex(&bytes)),
        })
    })
}

// -- control API: socket paths and the config's identity (ctl/) --

/// The control socket of a gateway: `[gateway] control_socket`, else the default
/// (`/run/quicknat.sock`), or with several `--config` files one derived from the file's
/// name (`/run/quicknat-NAME.sock`), so each gateway has its own. Also whether it is a
/// default (not configured).
fn control_socket_path(
    gw: Option<&runtime::live::GatewayConfig>,
    file: Option<&Path>,
    several: bool,
) -> (PathBuf, bool) {
    if let Some(p) = gw.and_then(|g| g.control_socket.clone()) {
        return (p, false);
    }
    let stem = file
        .and_then(Path::file_stem)
        .map(|s| s.to_string_lossy().into_owned());
    match stem {
        Some(stem) if several => (PathBuf::from(format!("/run/quicknat-{stem}.sock")), true),
        _ => (PathBuf::from(runtime::control::DEFAULT_SOCKET), true),
    }
}

/// The configuration file's path and the SHA-256 of its bytes (as `sha256sum` prints it).
fn config_source(path: &Path) -> anyhow::Result<runtime::control::api::ConfigSource> {
    let bytes = config::read_file(path)?;
    Ok(runtime::control::api::ConfigSource {
        path: path.to_owned(),
        sha256: sha256_hex(&bytes),
    })
}

/// SHA-256 of `bytes`, lower-case hex (as `sha256sum` prints it).
fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write;
    let mut hex = String::with_capacity(64);
    for b in Sha256::digest(bytes) {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}
