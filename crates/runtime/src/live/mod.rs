//! The live gateway: `quicknat run`. Workers receive Ethernet frames on the inside and
//! outside interfaces, hand the IP packets to the mode's worker (NAT44, NAT64, SIIT/CLAT
//! or ILA, through [`engine::ModeWorker`]), and transmit what it decided toward the next
//! hop the kernel's routes and neighbours give. The kernel keeps its own job: ARP and
//! neighbour discovery, the interfaces' own addresses, link-local and multicast traffic,
//! and every family a mode does not translate on that side.
//!
//! This module assembles and supervises; the pieces have their own files:
//! - `config`: the `[gateway]` settings;
//! - `open`: the backend's ports (AF_XDP, falling back to AF_PACKET) and host setup;
//! - `netview`: the links, the kernel's routes and neighbours, and the control thread
//!   that follows them and publishes snapshots the workers pick up between batches;
//! - `worker`: the per-core loop, generic over the I/O backend ([`io::Port`]) and the
//!   mode, with no match on either per packet;
//! - `forward`: next hop, Ethernet header, hand-off to the kernel;
//! - `stats`: the I/O counters and the log's counter line.
//!
//! Threads: one worker per core (RSS queues on AF_XDP, PACKET_FANOUT on AF_PACKET), the
//! reaper, the control thread, and this one, which logs counters and handles SIGHUP.

mod config;
pub mod cpus;
mod fastpath;
mod fastpath_ila;
mod fastpath_siit;
mod fastpath_tc;
// The XDP fast path's status and counters.
mod fastpath_status;
pub(crate) mod forward;
mod gso;
mod netview;
mod open;
mod placement;
mod stats;
pub(crate) mod threads;
mod worker;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use conntrack::Timestamp;
use engine::any::{AnyMode, ModeConfig, ModeVisitor};
use engine::config::ConfigError;
use engine::mode::Family;
use engine::Mode;
use io::netlink::Netlink;
use io::rawip::{RawIpv4, RawIpv6};
use io::Port;

pub(crate) use config::clamp_translator_mtus;
pub use config::{Backend, GatewayConfig, PlacementSwitch};
pub use config::{FastPathSwitch, XDP_FAST_PATH_ENTRIES, XDP_FAST_PATH_IDLE};
pub use fastpath::FastPathCounters;
pub use fastpath_status::FastPathStatus;
use forward::{Handoff, KernelHandoff, ProbeQueue};
use netview::{Link, NetView, Published};
use open::Opened;
pub use placement::Placement;
pub(crate) use stats::Snapshot;
pub use stats::{stats_line, IoCounters, Summary};
use stats::{totals, worker_spread};
use worker::{Worker, WorkerSetup};

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The translation mode's configuration was refused.
    #[error("configuration: {0}")]
    Mode(#[from] ConfigError),
    /// An interface is missing or unusable.
    #[error("interface {name}: {source}")]
    Interface {
        /// The interface.
        name: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The metrics listener could not bind its address.
    #[error("metrics listener on {addr} ([gateway] metrics): {source}")]
    Metrics {
        /// The configured address.
        addr: std::net::SocketAddr,
        /// What the system said (address in use, not on this host, ...).
        source: std::io::Error,
    },
    /// Netlink, sockets or threads failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// What the system said.
        source: std::io::Error,
    },
}

/// The capabilities a running gateway keeps (see [`drop_privileges`]).
pub const KEPT_CAPS: [u32; 1] = [io::privs::CAP_NET_ADMIN];

/// Why, for the log and the README.
pub const KEPT_CAPS_WHY: &str = "only CAP_NET_ADMIN kept (rtnetlink neighbour probes; on exit, removing the nftables tables and restoring offloads); sockets and XDP programs are open already, so CAP_NET_RAW, CAP_BPF and CAP_SYS_ADMIN go";

/// Leaves the calling thread, and the threads it starts from now on, only [`KEPT_CAPS`],
/// with `no_new_privs` set and the bounding set cut to them (the `nft` and `ethtool` it
/// runs get no more). `run` calls it once set up; a process running several gateways
/// calls it in its main thread too.
pub fn drop_privileges() -> std::io::Result<()> {
    io::privs::restrict(&KEPT_CAPS)
}

/// Runs the gateway until `stop` is set. `log` receives one line per event worth telling
/// an operator (start-up facts, periodic counters, warnings).
// The reload inputs (ILA's function, SIGHUP's flag, the loader) and the control API's
// options are each the caller's; bundling them is the next refactor of this signature.
#[allow(clippy::too_many_arguments)]
pub fn run(
    mode: ModeConfig,
    gw: &GatewayConfig,
    stop: Arc<AtomicBool>,
    reload: Option<crate::control::ReloadFn>,
    reload_signal: Option<Arc<AtomicBool>>,
    log: &(dyn Fn(String) + Sync),
    loader: Option<crate::reload::Loader>,
    api: crate::control::api::ApiOptions,
) -> Result<Summary, LiveError> {
    let links = [Link::lookup(&gw.inside)?, Link::lookup(&gw.outside)?];
    let fams = mode.families().map(Family::version);
    // The links' MTUs, lowered by the configuration where it says so.
    let mtus = [0, 1].map(|i| {
        let link = links[i].mtu as u32;
        gw.mtu[i].map_or(link, |m| m.min(link))
    });
    let mut mode = mode;
    clamp_translator_mtus(&mut mode, mtus.map(Some));
    // Staged batches: a session table that fits in one core's private cache
    // is not prefetched; the engine is told that cache's size before workers exist.
    let caches = std::path::Path::new(crate::cpucache::SYSFS_CPU0_CACHES);
    match crate::cpucache::private_cache_bytes(caches) {
        Some(bytes) => {
            engine::nat44::set_private_cache(bytes);
            log(format!(
                "engine: batches staged (prefetched) once sessions outgrow {} KiB, cpu0's private cache",
                bytes >> 10
            ));
        }
        None => log(format!(
            "engine: cpu0's private cache size not found in {}: batches staged once sessions outgrow {} KiB",
            crate::cpucache::SYSFS_CPU0_CACHES,
            engine::nat44::PRIVATE_CACHE >> 10
        )),
    }
    let shared = Arc::new(AnyMode::new(&mode, gw.workers)?);
    // The metrics listener is bound first: an address in use is a start-up error before the host is touched, and
    // a port below 1024 still binds before privileges go.
    let metrics_listener = match gw.metrics {
        Some(addr) => {
            let l = crate::metrics::MetricsListener::bind(addr)
                .map_err(|source| LiveError::Metrics { addr, source })?;
            log(format!(
                "metrics: Prometheus metrics on http://{}/metrics",
                l.local_addr().unwrap_or(addr)
            ));
            Some(l)
        }
        None => None,
    };
    let io_err = |what| move |source| LiveError::Io { what, source };
    let mut nl = Netlink::open().map_err(io_err("rtnetlink"))?;
    let published = Arc::new(Published::default());
    published
        .publish(NetView::read(&links, &mut nl).map_err(io_err("reading routes and neighbours"))?);
    let events = Netlink::subscribe().map_err(io_err("rtnetlink subscription"))?;
    // Open every socket before starting threads, so start-up errors are reported here.
    let view = published.current();
    let local = (&view.local[..], &view.local6[..]);
    // GSO pass-through: NAT44 keeps header sizes, so a super-packet's virtio-net header
    // stays valid after translation and the kernel segments it on transmit; NAT64, SIIT,
    // CLAT and ILA pass them through with the header adjusted (`gso`).
    let want_gso = gw.gso;
    let mut host = open::host_prepare(&links, fams, log)?;
    // The reason for a fallback to AF_PACKET, for `quicknat status`.
    let fallback = std::sync::Mutex::new(None::<String>);
    // The XDP fast path's last word ("xdp fast path: ..."), for `quicknat status`.
    let fast_why = std::sync::Mutex::new(None::<String>);
    // XDP fast path: AF_XDP, every mode.
    let fast_note = |line: String| {
        fastpath_status::note(&fast_why, &line);
        log(line)
    };
    let fast_entries =
        if gw.backend == Backend::AfXdp && fastpath::xdp_wanted(gw, &links, &fast_note) {
            gw.xdp_fast_path_entries
        } else {
            0
        };
    let opened = open::open_ports(
        gw,
        &links,
        fams,
        local,
        want_gso,
        fast_entries,
        &|line: String| {
            if line.contains("AF_XDP unavailable") {
                *fallback.lock().unwrap_or_else(|e| e.into_inner()) = Some(line.clone());
            }
            fastpath_status::note(&fast_why, &line);
            log(line)
        },
    )?;
    let gso = want_gso && matches!(opened, Opened::Packet(..));
    let placement = opened.placement();
    open::host_setup(&mut host, gw, &opened, &links, fams, local, gso, log);
    let (probe_tx, probe_rx) = ProbeQueue::bounded(forward::PROBE_QUEUE);
    let handoff: Arc<dyn Handoff> = Arc::new(KernelHandoff::new(
        RawIpv4::open().map_err(io_err("raw IPv4 socket"))?,
        RawIpv6::open().map_err(io_err("raw IPv6 socket"))?,
        probe_tx,
    ));
    // ILA: mappings change at run time, from the control socket and on SIGHUP.
    let control_state = match &*shared {
        AnyMode::Ila(ila) => Some(Arc::new(crate::control::ControlState::new(
            Arc::clone(&ila.router),
            reload,
            Some(Arc::clone(&ila.qsbr)),
        ))),
        _ => None,
    };
    // The configuration file `status` shows, shared with the reload hook (an
    // applied reload records the hash of the bytes it loaded).
    let config_source = api
        .config
        .clone()
        .map(|c| Arc::new(std::sync::Mutex::new(c)));
    // Reload: `quicknat reload` and SIGHUP, every mode, through one hook.
    let reload_hook: Option<crate::reload::ReloadHook> = loader.map(|load| {
        let running = crate::reload::Running {
            mode: Arc::clone(&shared),
            config: mode.clone(),
            gateway: gw.clone(),
            mtus,
            ila: control_state.clone(),
            source: config_source.clone(),
        };
        crate::reload::hook(running, load)
    });
    // The control socket is bound (and given its group) while the process may still
    // chown; it is served once privileges are dropped.
    let control_socket = match &gw.control_socket {
        Some(path) => {
            let gid = gw
                .control_group
                .as_deref()
                .map(crate::control::group_id)
                .transpose()
                .map_err(io_err("control socket group"))?;
            let access = crate::control::Access { gid };
            match crate::control::bind(path, access) {
                Ok(sock) => {
                    if control_state.is_some() {
                        log(format!(
                            "control: ILA mappings on {} for {} (quicknat ila list|add|set|del|reload --socket {})",
                            path.display(),
                            access.describe(),
                            path.display()
                        ));
                    }
                    log(format!(
                        "control: JSON API v{} on {} for {} (quicknat sessions|bindings|pool|stats|status|reload --socket {})",
                        crate::control::api::VERSION,
                        path.display(),
                        access.describe(),
                        path.display()
                    ));
                    Some(sock)
                }
                // Only ILA needs its socket to work; elsewhere a socket that cannot be
                // had (another gateway on the default path) costs inspection, not traffic.
                Err(e) if control_state.is_none() && api.default_socket => {
                    log(format!("warning: control socket {}: {e}; running without the control API (set [gateway] control_socket)", path.display()));
                    None
                }
                Err(e) => return Err(io_err("control socket")(e)),
            }
        }
        None => None,
    };
    // Metrics.
    let build_info = crate::metrics::BuildInfo::now(
        match opened {
            Opened::Xdp(_) => "af_xdp",
            Opened::Packet(..) => "af_packet",
        },
        mode.name(),
    );
    // Where the threads run, and any worker on a CPU that takes the interfaces' interrupts.
    let cpu_plan = cpus::CpuPlan::new(gw, &cpus::allowed());
    log(cpu_plan.describe());
    let irqs = [&gw.inside, &gw.outside].map(|i| {
        let irqs = cpus::interface_irqs(Path::new("/sys"), Path::new("/proc"), i);
        (i.as_str(), irqs)
    });
    let irq_warnings = cpus::irq_sharing(&cpu_plan, &irqs);
    for w in &irq_warnings {
        log(format!("warning: {w}"));
    }
    // The packet trace the control API arms and the workers fill.
    let tracer = Arc::new(crate::trace::Tracer::default());
    let reaper_lag = crate::metrics::ReaperLag::default();
    let reaper_counters = Arc::new(std::sync::Mutex::new(engine::Counters::new()));
    // Routing integration: the announcement device is created while CAP_NET_ADMIN is surely held; nothing is
    // announced until the workers run and the health check passes.
    let routing = open_routing(gw, log)?;
    let route_status = routing.as_ref().map(|(_, s)| Arc::clone(s));
    let (events_tx, events_rx) = mpsc::sync_channel::<String>(256);
    let base = Instant::now();
    let clock = move || Timestamp::from_nanos(base.elapsed().as_nanos() as u64 + 1_000_000_000);
    let snapshots: Vec<Snapshot> = (0..gw.workers).map(|_| Arc::default()).collect();
    // XDP fast path. Its status and counters are an entry of their own
    // (`fastpath_status`), not one of the workers' snapshots: it has no heartbeat.
    let fast = fastpath::attach(
        gw,
        &opened,
        &shared,
        &links,
        mtus,
        &published,
        clock(),
        &fast_note,
    )?;
    // Every socket is open, every BPF program loaded (the tc fast path's just now) and the
    // host set up: keep only what running and cleaning up need, before any thread starts
    // (capabilities belong to threads).
    match drop_privileges() {
        Ok(()) => log(format!("privileges: {KEPT_CAPS_WHY}; no_new_privs set")),
        Err(e) => log(format!(
            "warning: privileges not dropped ({e}); the gateway keeps what it was started with"
        )),
    }
    // ILA: the mappings are copied into the maps now and kept in step by the control
    // side (`fastpath_ila`), which edits them.
    let ila_offload = match (&fast, &control_state) {
        (Some(f), Some(c)) if f.is_ila() => {
            c.attach_offload(Arc::clone(f) as Arc<dyn crate::control::MappingOffload>);
            Some(Arc::clone(c))
        }
        _ => None,
    };
    let fast_status = Arc::new(fastpath_status::status(
        gw,
        &fast,
        fast_why.lock().unwrap_or_else(|e| e.into_inner()).take(),
    ));
    let control = match control_socket {
        Some(sock) => {
            let why = fallback
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .unwrap_or_else(|| {
                    // The setting as the operator wrote it (not its Debug form).
                    let name = match gw.backend {
                        Backend::AfPacket => "af_packet",
                        Backend::AfXdp => "af_xdp",
                    };
                    format!("[gateway] backend = \"{name}\" (configured)")
                });
            // `quicknat reload` runs what SIGHUP runs.
            let api = crate::control::api::ApiOptions {
                reload: api.reload.or_else(|| reload_hook.clone()),
                ..api
            };
            let api = control_api(
                api,
                &shared,
                &control_state,
                &links,
                opened.describe(),
                why,
                gw.workers,
                &snapshots,
                &reaper_counters,
                clock,
            );
            // Routing integration.
            let mut api = crate::control::api::ApiState {
                routing: route_status.clone(),
                ..api
            };
            // The same file record the reload hook updates.
            if config_source.is_some() {
                api.facts.config = config_source.clone();
            }
            api.facts.cpus = Some((cpu_plan.clone(), irq_warnings.clone()));
            api.facts.placement = Some(placement.clone());
            api.facts.rx_hash = Some(host.rx_hash_json());
            // XDP fast path.
            let api = crate::control::api::ApiState {
                fast_path: Some(Arc::clone(&fast_status)),
                tracer: Some(Arc::clone(&tracer)),
                ..api
            };
            let control = crate::control::Control {
                ila: control_state.clone(),
                api: Some(Arc::new(api)),
            };
            Some(
                sock.serve(control, Arc::clone(&stop), events_tx)
                    .map_err(io_err("control socket"))?,
            )
        }
        None => None,
    };
    let [inside, outside] = &links;
    log(format!(
        "quicknat: {} (IPv{} inside, IPv{} outside) on inside {} (index {}, mtu {}) and outside {} (index {}, mtu {}), {} worker(s), {}{}",
        mode.name(),
        fams[0],
        fams[1],
        inside.name,
        inside.index,
        inside.mtu,
        outside.name,
        outside.index,
        outside.mtu,
        gw.workers,
        opened.describe(),
        if gw.busy_poll { ", busy polling" } else { "" }
    ));
    // NAT event logging (RFC 8158): the rings are attached before any worker starts.
    let natlog = natlog_exporter(&shared, gw, clock(), log)?;
    // What the exporter sent and dropped, exported on /metrics.
    let natlog_counters = natlog.as_ref().map(|(_, c)| Arc::clone(c));
    let setup = |id: usize| WorkerSetup {
        families: fams,
        in_place: mode_in_place(&shared),
        mtus,
        addresses: gw.addresses.clone(),
        links: links.clone(),
        published: Arc::clone(&published),
        handoff: Arc::clone(&handoff),
        snapshot: Arc::clone(&snapshots[id]),
        busy_poll: gw.busy_poll,
        tracer: Arc::clone(&tracer),
        id,
        stateful: matches!(*shared, AnyMode::Nat44(_) | AnyMode::Nat64(_)),
    };
    let failed = std::thread::scope(|scope| {
        let s = threads::Spawner::new(scope, &stop);
        // Control: follow the kernel's routes and neighbours; resolve neighbours on request.
        {
            let (stop, published, links) = (&stop, &published, &links);
            let mut events = events;
            s.spawn(threads::NETVIEW, move || {
                netview::follow(&mut nl, &mut events, links, published, &probe_rx, stop, log)
            });
        }
        // Reaper.
        if let Some(mut r) = shared.reaper() {
            let stop = &stop;
            let (lag, published) = (&reaper_lag, &*reaper_counters);
            let reaper_cpu = cpu_plan.reaper;
            s.spawn(threads::REAPER, move || {
                if let Some(id) = reaper_cpu {
                    core_affinity::set_for_current(core_affinity::CoreId { id });
                }
                // A full pass every 200 ms; between passes, the drain of what the workers
                // evicted at a full table, every millisecond while any waits (so a SYN
                // flood's victims are reclaimed before they fill the room kept for them),
                // every 10 ms otherwise.
                let mut next_pass = clock();
                while !stop.load(Ordering::Relaxed) {
                    let now = clock();
                    if now >= next_pass {
                        lag.record(now.saturating_since(next_pass));
                        r.handle_timeout(now);
                        next_pass = now + Duration::from_millis(200);
                    }
                    let busy = r.drain(now);
                    if let Ok(mut g) = published.try_lock() {
                        g.clone_from(r.counters());
                    }
                    std::thread::sleep(Duration::from_millis(if busy { 1 } else { 10 }));
                }
            });
        }
        // XDP fast path for ILA: mappings whose next hops were unresolved, and routes or
        // neighbours that changed, are taken up by a sync every 500 ms.
        if let Some(c) = &ila_offload {
            let stop = &stop;
            s.spawn(threads::ILA_SYNC, move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(500));
                    c.sync_offload();
                }
            });
        }
        // Fast path for SIIT and CLAT: every 5 ms, a reload's flush and the flows the workers
        // hinted; each second, a walk for next hops and idle flows (`fastpath_siit`).
        if let Some(f) = fast.as_ref().filter(|f| f.is_siit()) {
            let stop = &stop;
            s.spawn(threads::SIIT_SYNC, move || {
                let mut st = fastpath_siit::SiitSync::default();
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(fastpath_siit::SYNC_EVERY);
                    f.siit_sync(&mut st, clock());
                }
            });
        }
        // Flow placement: the flow table's sweeper.
        if let Some(p) = placement.program() {
            let stop = &stop;
            s.spawn(threads::PLACEMENT, move || {
                placement::sweep_until(&p, stop, log)
            });
        }
        // Metrics.
        if let Some(l) = &metrics_listener {
            let sources = crate::metrics::Sources {
                snapshots: &snapshots,
                mode: &shared,
                reaper_lag: Some(&reaper_lag),
                reaper_counters: Some(&*reaper_counters),
                events: natlog_counters.as_deref(),
                build: &build_info,
            };
            let stop = &stop;
            // Routing integration: `quicknat_routes_announced`.
            let routes = route_status.as_deref();
            // The XDP fast path: its own families.
            let fast_status = &fast_status;
            s.spawn(threads::METRICS, move || {
                l.serve(stop, &|| {
                    let text = crate::metrics::render(&sources.sample());
                    let text = match routes {
                        Some(r) => crate::routing::append_metrics(text, &r.metrics_text()),
                        None => text,
                    };
                    crate::routing::append_metrics(text, &fast_status.metrics_text())
                })
            });
        }
        // NAT event exporter: drains the workers' and the reaper's event rings.
        if let Some((exporter, counters)) = natlog {
            let (stop, interval) = (&stop, gw.stats_interval);
            s.spawn(threads::NATLOG, move || exporter.run(stop));
            s.spawn(threads::NATLOG_STATS, move || {
                threads::every(stop, interval, || log(counters.line()));
                log(counters.line());
            });
        }
        // Workers: the one place the backend is chosen; generic from here on.
        match opened {
            Opened::Xdp(ports) => {
                spawn_workers(&s, &shared, ports, &setup, &stop, clock, &cpu_plan)
            }
            Opened::Packet(ports, ..) => {
                spawn_workers(&s, &shared, ports, &setup, &stop, clock, &cpu_plan)
            }
        }
        // Routing integration: announces while the links are up and the workers beat; withdraws otherwise and
        // at stop.
        if let Some((announcer, _)) = routing {
            let (stop, snapshots) = (&stop, &snapshots);
            let names = [links[0].name.as_str(), links[1].name.as_str()];
            s.spawn(threads::ROUTING, move || {
                // The workers' snapshots (the XDP fast path has none).
                let beats = || {
                    snapshots
                        .iter()
                        .take(gw.workers)
                        .map(|s| s.lock().map_or(0, |g| g.1.heartbeats))
                        .collect()
                };
                crate::routing::run(
                    announcer,
                    gw.routing.health_interval,
                    names,
                    &beats,
                    stop,
                    log,
                )
            });
        }
        supervise(
            gw,
            &links,
            (&snapshots, &reaper_counters),
            &shared,
            &control_state,
            &reload_signal,
            &reload_hook,
            &events_rx,
            &stop,
            log,
            &fast_status,
        );
        s.failure()
    });
    // The control thread: its clients wait on the log no more, it sees `stop` and
    // removes its socket file.
    drop(events_rx);
    if let Some(h) = control {
        let _ = h.join();
    }
    for line in host.undo() {
        log(line);
    }
    if let Some((name, source)) = failed {
        log(format!(
            "quicknat: could not start thread {name}: {source}; stopped"
        ));
        return Err(LiveError::Io {
            what: "starting the gateway's threads",
            source,
        });
    }
    let (engine, io) = totals(&snapshots, &reaper_counters);
    Ok(Summary {
        engine,
        io,
        sessions: shared.session_count(),
    })
}

/// Spawns one worker thread per port pair in `s`, each with its mode worker.
fn spawn_workers<'scope, P, C>(
    s: &threads::Spawner<'scope, '_, '_>,
    shared: &AnyMode,
    ports: Vec<[P; 2]>,
    setup: &dyn Fn(usize) -> WorkerSetup,
    stop: &'scope AtomicBool,
    clock: C,
    cpus: &cpus::CpuPlan,
) where
    P: Port + 'scope,
    C: Fn() -> Timestamp + Copy + Send + 'scope,
{
    struct Spawn<'a, 'scope, 'env, P, C> {
        scope: &'a threads::Spawner<'scope, 'env, 'a>,
        ports: Vec<[P; 2]>,
        setup: &'a dyn Fn(usize) -> WorkerSetup,
        stop: &'scope AtomicBool,
        clock: C,
        cpus: &'a cpus::CpuPlan,
    }
    impl<'scope, P, C> ModeVisitor for Spawn<'_, 'scope, '_, P, C>
    where
        P: Port + 'scope,
        C: Fn() -> Timestamp + Copy + Send + 'scope,
    {
        type Output = ();
        fn visit<M: Mode>(self, mode: &M) {
            for (id, ports) in self.ports.into_iter().enumerate() {
                let w = Worker::new(mode.worker(id), ports, (self.setup)(id));
                let (stop, clock) = (self.stop, self.clock);
                let core = self.cpus.workers.get(id).copied().flatten();
                self.scope.spawn(threads::worker(id), move || {
                    if let Some(id) = core {
                        core_affinity::set_for_current(core_affinity::CoreId { id });
                    }
                    w.run(stop, &clock);
                });
            }
        }
    }
    shared.visit(Spawn {
        scope: s,
        ports,
        setup,
        stop,
        clock,
        cpus,
    });
}

/// Whether the mode translates where the packet lies (no headroom needed).
fn mode_in_place(mode: &AnyMode) -> bool {
    struct InPlace;
    impl ModeVisitor for InPlace {
        type Output = bool;
        fn visit<M: Mode>(self, m: &M) -> bool {
            m.in_place()
        }
    }
    mode.visit(InPlace)
}

/// Periodic counters until stopped; SIGHUP reloads the configuration (ILA: its mappings
/// only, when the gateway has no configuration file to re-read).
#[allow(clippy::too_many_arguments)]
fn supervise(
    gw: &GatewayConfig,
    links: &[Link; 2],
    (snapshots, reaper): (&[Snapshot], &std::sync::Mutex<engine::Counters>),
    shared: &AnyMode,
    control_state: &Option<Arc<crate::control::ControlState>>,
    reload_signal: &Option<Arc<AtomicBool>>,
    reload_hook: &Option<crate::reload::ReloadHook>,
    events: &mpsc::Receiver<String>,
    stop: &AtomicBool,
    log: &(dyn Fn(String) + Sync),
    fast: &FastPathStatus,
) {
    let mut last = Instant::now();
    let mut warned_oversize = false;
    let mut worker_rx = Vec::new();
    // systemd hears READY=1 once the workers run, WATCHDOG=1 from this
    // loop, STOPPING=1 when it ends (crate::sdnotify; nothing without $NOTIFY_SOCKET).
    crate::sdnotify::ready();
    while !stop.load(Ordering::Relaxed) {
        crate::sdnotify::watchdog();
        std::thread::sleep(Duration::from_millis(100));
        for line in events.try_iter() {
            log(line);
        }
        // SIGHUP: the whole configuration, every mode (ILA's mappings too).
        if let (Some(hook), Some(hup)) = (reload_hook, reload_signal) {
            if hup.swap(false, Ordering::Relaxed) {
                crate::sdnotify::reloading();
                match hook(engine::reload::ReloadAction::Apply) {
                    Ok(report) => log(format!("reload (SIGHUP): {report}")),
                    Err(e) => log(format!(
                        "warning: reload (SIGHUP) refused, the configuration in force is kept: {e}"
                    )),
                }
                crate::sdnotify::reloaded();
            }
        }
        if let (Some(state), Some(hup)) = (control_state, reload_signal) {
            if hup.swap(false, Ordering::Relaxed) {
                crate::sdnotify::reloading();
                match state.reload() {
                    Ok(summary) => log(format!("reload (SIGHUP): ILA mappings {summary}")),
                    Err(e) => log(format!("warning: reload (SIGHUP) refused: {e}")),
                }
                crate::sdnotify::reloaded();
            }
        }
        if last.elapsed() >= gw.stats_interval {
            last = Instant::now();
            let (e, io) = totals(snapshots, reaper);
            // The XDP fast path's fields close the line.
            log(stats_line(&e, &io, shared.session_count())
                + &worker_spread(snapshots, &mut worker_rx)
                + &fastpath_status::log_suffix(fast.counters().as_ref()));
            if io.oversize > 0 && !warned_oversize {
                warned_oversize = true;
                log(format!("warning: {} frames larger than the MTU arrived (GRO/GSO super-packets); turn offloads off on {} and {}: ethtool -K IF gro off tso off gso off", io.oversize, links[0].name, links[1].name));
            }
        }
    }
    crate::sdnotify::stopping();
}

/// The announcement device of `gw.routing` and the status it reports (`None`: no
/// `[routing]` prefixes).
fn open_routing(
    gw: &GatewayConfig,
    log: &(dyn Fn(String) + Sync),
) -> Result<Option<(crate::routing::Announcer, Arc<crate::routing::RouteStatus>)>, LiveError> {
    if !gw.routing.enabled() {
        return Ok(None);
    }
    let status = Arc::new(crate::routing::RouteStatus::new(&gw.routing));
    let ann =
        crate::routing::Announcer::open(&gw.routing, Arc::clone(&status)).map_err(|source| {
            LiveError::Io {
                what: "[routing] announcement device",
                source,
            }
        })?;
    log(format!(
        "routing: {} ready; announced while healthy (links up, workers beating), checked every {:?}",
        ann.describe(),
        gw.routing.health_interval
    ));
    Ok(Some((ann, status)))
}

/// The NAT event exporter for `gw.natlog`, with its event log attached to the mode's
/// tables (`None`: logging off, or a mode with nothing to log).
fn natlog_exporter(
    shared: &AnyMode,
    gw: &GatewayConfig,
    now: Timestamp,
    log: &(dyn Fn(String) + Sync),
) -> Result<Option<(crate::natlog::Exporter, Arc<crate::natlog::ExportCounters>)>, LiveError> {
    let cfg = &gw.natlog;
    if !cfg.enabled() {
        return Ok(None);
    }
    let Some(events) = shared.attach_event_log(cfg.events, gw.workers, cfg.queue) else {
        log(format!(
            "warning: [logging] ignored: {} keeps no NAT state to log",
            shared.name()
        ));
        return Ok(None);
    };
    let counters = Arc::new(crate::natlog::ExportCounters::default());
    let exporter = crate::natlog::Exporter::new(
        cfg.clone(),
        events,
        crate::natlog::WallClock::at(now),
        Arc::clone(&counters),
    )
    .map_err(|source| LiveError::Io {
        what: "NAT event log socket",
        source,
    })?;
    let classes: Vec<&str> = engine::events::EventClass::ALL
        .into_iter()
        .filter(|c| cfg.events.has(*c))
        .map(|c| c.as_str())
        .collect();
    log(format!(
        "natlog: events {} to{}{}",
        classes.join(","),
        cfg.ipfix.map_or(String::new(), |a| format!(" ipfix {a}")),
        cfg.syslog.map_or(String::new(), |a| format!(" syslog {a}"))
    ));
    Ok(Some((exporter, counters)))
}

/// The JSON control API's state: the mode's tables, the workers' clock and counters, what
/// `status` tells; the reload hook is the caller's, or (ILA) today's mapping reload.
#[allow(clippy::too_many_arguments)]
fn control_api(
    opts: crate::control::api::ApiOptions,
    shared: &Arc<AnyMode>,
    ila: &Option<Arc<crate::control::ControlState>>,
    links: &[Link; 2],
    backend: &str,
    backend_why: String,
    workers: usize,
    snapshots: &[Snapshot],
    reaper: &Arc<std::sync::Mutex<engine::Counters>>,
    clock: impl Fn() -> Timestamp + Send + Sync + 'static,
) -> crate::control::api::ApiState {
    use crate::control::api::{ApiState, GatewayFacts, LinkFacts, ReloadHook};
    let reload = opts.reload.or_else(|| {
        let ila = Arc::clone(ila.as_ref()?);
        let hook: ReloadHook = Arc::new(move |action| match action {
            engine::reload::ReloadAction::Apply => ila
                .reload()
                .map(|s| format!("ILA mappings {s}"))
                .map_err(|e| e.to_string()),
            engine::reload::ReloadAction::Preview => ila
                .preview_reload()
                .map(|s| format!("dry run, nothing applied: would reload ILA mappings {s}"))
                .map_err(|e| e.to_string()),
        });
        Some(hook)
    });
    let snaps = snapshots.to_vec();
    let reaper = Arc::clone(reaper);
    ApiState {
        mode: Arc::clone(shared),
        clock: Box::new(clock),
        counters: Box::new(move || {
            snaps
                .iter()
                .map(|s| s.lock().map(|g| g.clone()).unwrap_or_default())
                .collect()
        }),
        reaper: Some(Box::new(move || {
            reaper.lock().map(|g| g.clone()).unwrap_or_default()
        })),
        facts: GatewayFacts {
            mode: shared.name(),
            links: [0, 1].map(|i| LinkFacts {
                name: links[i].name.clone(),
                index: links[i].index,
                mtu: links[i].mtu as u32,
            }),
            backend: backend.to_owned(),
            backend_why,
            workers,
            started: Instant::now(),
            config: opts.config.map(|c| Arc::new(std::sync::Mutex::new(c))),
            cpus: None,
            placement: None,
            rx_hash: None,
        },
        reload,
        routing: None,
        fast_path: None,
        tracer: None,
    }
}
