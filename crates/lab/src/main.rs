//! The `quicknat-lab` command: the measurement lab and its test gear, apart from the
//! product binary.
//!
//! - `lab`: network namespaces, quicknat against a reference on the same topology. It runs
//!   the product (`quicknat run`, found with `--quicknat`) and this program's own
//!   subcommands (`gen`, `soak`, `rr`) inside the namespaces.
//! - `gen`: the small-packet UDP traffic generator.
//! - `rr`: the TCP request/response load tool.
//! - `soak`: a CPU soaker; the lab runs it at the lowest priority.
//! - `flood`, `probe`: the attack lab's raw-frame generator and its measuring tools.
//!
//! Like the product binary, this is the only place that turns errors into exit codes and
//! one-line messages. Nothing here is ever on the data path.

mod flood;
mod flows;
mod fwd;
mod gen;
mod probe;
mod rr;
mod topology;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// quicknat-lab: measures quicknat in network namespaces; traffic and load tools.
#[derive(Debug, Parser)]
#[command(name = "quicknat-lab", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Build network namespaces and measure quicknat against a reference on the same
    /// topology, alternating (root): nat44 (vs the kernel's nftables NAT), nat64 and siit (vs TAYGA),
    /// ila (TCP request/response, direct kernel forwarding vs through quicknat ILA routers),
    /// attack (NAT44 vs the kernel's NAT under floods, a greedy host, hash collisions,
    /// link flaps and a gateway restart), spread (how evenly workers share few flows).
    Lab {
        /// Which topology: nat44, nat64, siit, ila, attack, cluster or spread.
        #[arg(long, value_enum, default_value_t = Topology::Nat44)]
        topology: Topology,
        /// Seconds per measurement (default 5; attack: seconds of SYN flood, 60 in the
        /// full form).
        #[arg(long, value_name = "S", default_value_t = 5)]
        seconds: u64,
        /// Alternating rounds; medians are reported (default 3).
        #[arg(long, value_name = "N", default_value_t = 3)]
        rounds: usize,
        /// Offered load for the CPU-per-packet measurement, packets per second (nat44).
        #[arg(long, value_name = "PPS", default_value_t = 200_000)]
        fixed_pps: u64,
        /// Skip the TCP run with offloads on (nat44).
        #[arg(long)]
        no_offloads_on: bool,
        /// Skip the floor arms: kernel forwarding, the flowtable, the minimal XDP, AF_XDP
        /// and AF_PACKET forwarders (nat44).
        #[arg(long)]
        no_floors: bool,
        /// Pin TAYGA to the gateway core like quicknat's worker (nat64; default: the
        /// scheduler places it, as it would on a real box).
        #[arg(long)]
        pin_tayga: bool,
        /// Print JSON instead of the table.
        #[arg(long)]
        json: bool,
        /// quicknat backends to measure (comma-separated): af_xdp, af_packet (default: both;
        /// attack: af_packet, quicknat's default); nat44, nat64, siit and ila also tcfast (AF_PACKET with the fast path at tc ingress); nat44, nat64, siit and ila also xdpfast (AF_XDP with
        /// the XDP fast path on).
        #[arg(long, value_name = "LIST")]
        backends: Option<String>,
        /// Request/response connections (ila).
        #[arg(long, value_name = "N", default_value_t = 200)]
        conns: usize,
        /// Request and response size in bytes (ila).
        #[arg(long, value_name = "BYTES", default_value_t = 64)]
        size: usize,
        /// The quicknat binary the lab runs as the gateway (`quicknat run`) (default: the
        /// `quicknat` next to this program, e.g. target/release/quicknat).
        #[arg(long, value_name = "PATH")]
        quicknat: Option<PathBuf>,
        /// attack: the short form for CI (short cells, no `ct count` run; figures are not
        /// comparable with the full form's).
        #[arg(long)]
        short: bool,
        /// attack: session table size for both (default: the kernel's nf_conntrack_max,
        /// which cannot be set inside a namespace on every kernel).
        #[arg(long, value_name = "N")]
        max_sessions: Option<usize>,
        /// attack: crafted colliding tuples (and as many random ones).
        #[arg(long, value_name = "N", default_value_t = 1024)]
        collisions: usize,
        /// attack: fixed offered rate of the collision cells, packets per second.
        #[arg(long, value_name = "PPS", default_value_t = 100_000)]
        collision_pps: u64,
        /// attack: the kernel's best-practice per-host limit (`ct count over N`); 0 skips it.
        #[arg(long, value_name = "N", default_value_t = 1000)]
        host_limit: u32,
        /// attack: pace the SYN flood at this many packets per second, so quicknat and the
        /// kernel face the same load (default: as fast as the generator goes).
        #[arg(long, value_name = "PPS")]
        flood_pps: Option<u64>,
        /// attack: run only these cells (comma-separated: flood, greedy, collisions,
        /// recovery; default all). Rows of cells not run read 0.
        #[arg(long, value_name = "LIST", value_delimiter = ',')]
        cells: Vec<String>,
        /// cluster: quicknat gateways (2 or 3; default 3, 2 with --short).
        #[arg(long, value_name = "N")]
        gateways: Option<usize>,
        /// cluster: offered rate per gateway's subscribers in the throughput cell, packets/s.
        #[arg(long, value_name = "PPS", default_value_t = 50_000)]
        gateway_pps: u64,
        // -- plots --
        /// nat44: write SVG charts (lab-ratios.svg: quicknat over each reference, per
        /// measure) into this directory.
        #[arg(long, value_name = "DIR")]
        plot: Option<PathBuf>,
    },
    /// The cluster lab's traffic: a recording server, subscribers' UDP flows and TCP
    /// connections, one datagram per subscriber.
    Flows(flows::FlowsArgs),
    /// Write raw Ethernet frames on an interface (attack lab): a spoofed SYN flood, replayed
    /// SYN tuples, or one host's new flows. Prints a JSON report.
    Flood(FloodArgs),
    /// The attack lab's measuring tools: a UDP sequence probe, connection loops.
    Probe(probe::ProbeArgs),
    /// Offer 64-byte UDP traffic (by default) to IP:PORT from many source ports, for the lab.
    Gen {
        /// Destination address and port: IPv4 (IP:PORT) or IPv6 ([IP]:PORT).
        #[arg(long, value_name = "IP:PORT")]
        dst: String,
        /// Local address to send from, of the destination's IP version (default: the
        /// kernel chooses).
        #[arg(long, value_name = "IP")]
        src: Option<String>,
        /// Distinct source ports, 1..=4096, used round robin.
        #[arg(long, value_name = "N", default_value_t = 1)]
        flows: u16,
        /// UDP payload bytes (18 gives 64-byte Ethernet frames over IPv4, 84-byte over IPv6).
        #[arg(long, value_name = "BYTES", default_value_t = gen::PAYLOAD_64B_FRAME)]
        payload: usize,
        /// Packets per second (default: as fast as possible).
        #[arg(long, value_name = "RATE")]
        pps: Option<u64>,
        /// How long to send, in seconds.
        #[arg(long, value_name = "S", default_value_t = 10.0)]
        seconds: f64,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// First source port: flow i sends from PORT+i, the same flows every run
        /// (default: ephemeral ports).
        #[arg(long, value_name = "PORT")]
        src_port: Option<u16>,
    },
    /// Answer every UDP datagram received on ADDR:PORT with itself (the NAT44 lab's
    /// warm-up of the flows the XDP fast path takes).
    Echo {
        /// Address and port to answer on.
        #[arg(long, value_name = "ADDR:PORT")]
        listen: std::net::SocketAddr,
        /// Stop after this many seconds.
        #[arg(long, value_name = "S", default_value_t = 10.0)]
        seconds: f64,
    },
    /// TCP request/response load: `rr server` echoes, `rr client` keeps one request in
    /// flight on each of N connections and reports transactions/s and p50/p90/p99.
    Rr(rr::RrArgs),
    /// A minimal forwarder (no NAT), the floor of an I/O model: AF_XDP or AF_PACKET with
    /// quicknat's own ports and batching, or XDP_REDIRECT through a devmap (the lab runs it
    /// in the gateway namespace until SIGTERM).
    Fwd(fwd::FwdArgs),
    /// Spin on one core counting loop iterations; `quicknat-lab lab` runs it at the lowest
    /// priority to measure how much of a core the gateway leaves idle.
    Soak {
        /// Seconds to spin.
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
    },
}

/// The `quicknat-lab lab` topologies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Topology {
    /// quicknat NAT44 vs the kernel's nftables NAT.
    Nat44,
    /// quicknat NAT64 vs TAYGA, IPv6-only client, IPv4 server.
    Nat64,
    /// The same with quicknat as a stateless translator (SIIT, TAYGA's own 1:1 mapping).
    Siit,
    /// TCP request/response directly vs through two quicknat ILA routers.
    Ila,
    /// quicknat NAT44 vs the kernel's NAT under attack (SYN flood at a port forward, a
    /// greedy inside host, hash collisions, link flap, SIGKILL + restart).
    Attack,
    /// 2-3 quicknat gateways between BIRD routers (BGP, BFD, policy-routed slices): spread,
    /// throughput, and failover by SIGKILL and link down, deterministic vs dynamic NAT.
    Cluster,
    /// How evenly 2 AF_PACKET workers share 32 IPv6 and 32 IPv4 flows (NAT64), flow
    /// placement against the kernel's hash.
    Spread,
}

/// `quicknat-lab flood` arguments.
#[derive(Debug, clap::Args)]
struct FloodArgs {
    /// Interface to send on.
    #[arg(long)]
    dev: String,
    /// Destination MAC (the gateway's interface).
    #[arg(long)]
    dst_mac: String,
    /// Source MAC.
    #[arg(long)]
    src_mac: String,
    /// spoofed-syn (--dst, --src-net), tuples (--dst, --tuples), greedy (--src, --dst-net).
    #[arg(long)]
    pattern: String,
    /// Destination IPv4:PORT (spoofed-syn, tuples).
    #[arg(long)]
    dst: Option<String>,
    /// Prefix the spoofed sources are drawn from (spoofed-syn).
    #[arg(long)]
    src_net: Option<String>,
    /// File of sources, one IPv4:PORT per line, replayed round robin (tuples).
    #[arg(long)]
    tuples: Option<PathBuf>,
    /// The one source address (greedy).
    #[arg(long)]
    src: Option<std::net::Ipv4Addr>,
    /// Prefix the destinations are drawn from (greedy).
    #[arg(long)]
    dst_net: Option<String>,
    /// Frames per second (default: as fast as possible).
    #[arg(long)]
    pps: Option<u64>,
    /// Seconds.
    #[arg(long)]
    seconds: f64,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Lab {
            topology,
            seconds,
            rounds,
            fixed_pps,
            no_offloads_on,
            no_floors,
            pin_tayga,
            json,
            backends,
            conns,
            size,
            quicknat,
            short,
            max_sessions,
            collisions,
            collision_pps,
            host_limit,
            flood_pps,
            cells,
            gateways,
            gateway_pps,
            plot,
        } => run_lab(
            topology,
            LabArgs {
                seconds,
                rounds,
                fixed_pps,
                offloads_on: !no_offloads_on,
                floors: !no_floors,
                pin_tayga,
                json,
                conns,
                size,
                quicknat,
                attack: AttackArgs {
                    short,
                    max_sessions,
                    collisions,
                    collision_pps,
                    host_limit,
                    flood_pps,
                    cells,
                },
                cluster: ClusterArgs {
                    gateways,
                    gateway_pps,
                },
                plot,
            },
            backends.as_deref().unwrap_or(
                if matches!(topology, Topology::Attack | Topology::Cluster) {
                    "af_packet"
                } else {
                    "af_xdp,af_packet"
                },
            ),
        ),
        Command::Rr(args) => rr::run(&args),
        Command::Fwd(args) => topology::stop_flag().and_then(|stop| fwd::run(&args, &stop)),
        Command::Probe(args) => probe::run(&args),
        Command::Flows(args) => flows::run(&args),
        Command::Flood(args) => run_flood(&args),
        Command::Soak { seconds } => {
            println!(
                "{}",
                topology::soak(std::time::Duration::from_secs_f64(
                    seconds.clamp(0.01, 600.0)
                ))
            );
            Ok(())
        }
        Command::Gen {
            dst,
            src,
            flows,
            payload,
            pps,
            seconds,
            json,
            src_port,
        } => run_gen(
            &dst,
            src.as_deref(),
            (flows, src_port),
            payload,
            pps,
            seconds,
            json,
        ),
        Command::Echo { listen, seconds } => run_echo(listen, seconds),
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

/// `quicknat-lab gen`: the lab traffic generator; prints one report line (or JSON).
fn run_gen(
    dst: &str,
    src: Option<&str>,
    (flows, src_port): (u16, Option<u16>),
    payload: usize,
    pps: Option<u64>,
    seconds: f64,
    json: bool,
) -> anyhow::Result<()> {
    use std::net::{IpAddr, SocketAddr};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let dst: SocketAddr = dst.parse().map_err(|_| {
        anyhow::anyhow!(
            "--dst {dst:?}: not an address and port (expected IP:PORT or [IPv6]:PORT, e.g. 198.51.100.2:9000)"
        )
    })?;
    let src_ip = src
        .map(|s| {
            s.parse::<IpAddr>()
                .map_err(|_| anyhow::anyhow!("--src {s:?}: not an IP address"))
        })
        .transpose()?;
    anyhow::ensure!(
        seconds.is_finite() && seconds > 0.0 && seconds <= 86_400.0,
        "--seconds must be between 0 and 86400"
    );
    let cfg = gen::GenConfig {
        src_ip,
        flows,
        payload,
        rate_pps: pps,
        duration: std::time::Duration::from_secs_f64(seconds),
        src_port,
        ..gen::GenConfig::new(dst)
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("installing signal handlers")?;
    }
    let report = gen::run(&cfg, &stop)?;
    if json {
        println!("{}", report.to_json());
    } else {
        println!("{report}");
    }
    Ok(())
}

/// `quicknat-lab lab` options (some apply to one topology only).
struct LabArgs {
    seconds: u64,
    rounds: usize,
    fixed_pps: u64,
    offloads_on: bool,
    floors: bool,
    pin_tayga: bool,
    json: bool,
    conns: usize,
    size: usize,
    quicknat: Option<PathBuf>,
    attack: AttackArgs,
    cluster: ClusterArgs,
    /// `--plot DIR` (nat44).
    plot: Option<PathBuf>,
}

/// `quicknat-lab lab --topology cluster` options.
struct ClusterArgs {
    gateways: Option<usize>,
    gateway_pps: u64,
}

/// `quicknat-lab lab --topology attack` options.
struct AttackArgs {
    short: bool,
    max_sessions: Option<usize>,
    collisions: usize,
    collision_pps: u64,
    host_limit: u32,
    flood_pps: Option<u64>,
    cells: Vec<String>,
}

/// `quicknat-lab flood`: prints the generator's JSON report.
fn run_flood(a: &FloodArgs) -> anyhow::Result<()> {
    use flood::{parse_endpoint, parse_mac, parse_net, Pattern};
    anyhow::ensure!(
        a.seconds.is_finite() && a.seconds > 0.0 && a.seconds <= 3600.0,
        "--seconds must be between 0 and 3600"
    );
    anyhow::ensure!(a.pps != Some(0), "--pps must be at least 1");
    let need = |v: &Option<String>, what: &str| {
        v.clone()
            .ok_or_else(|| anyhow::anyhow!("--pattern {} needs --{what}", a.pattern))
    };
    let pattern = match a.pattern.as_str() {
        "spoofed-syn" => Pattern::SpoofedSyn {
            dst: parse_endpoint(&need(&a.dst, "dst")?)?,
            src_net: parse_net(&need(&a.src_net, "src-net")?)?,
        },
        "tuples" => Pattern::Tuples {
            dst: parse_endpoint(&need(&a.dst, "dst")?)?,
            srcs: flood::read_tuples(
                a.tuples
                    .as_deref()
                    .ok_or_else(|| anyhow::anyhow!("--pattern tuples needs --tuples"))?,
            )?,
        },
        "greedy" => Pattern::Greedy {
            src: a
                .src
                .ok_or_else(|| anyhow::anyhow!("--pattern greedy needs --src"))?,
            dst_net: parse_net(&need(&a.dst_net, "dst-net")?)?,
        },
        p => anyhow::bail!("--pattern {p:?}: expected spoofed-syn, tuples or greedy"),
    };
    let cfg = flood::FloodConfig {
        dev: a.dev.clone(),
        dst_mac: parse_mac(&a.dst_mac)?,
        src_mac: parse_mac(&a.src_mac)?,
        pattern,
        pps: a.pps,
        duration: std::time::Duration::from_secs_f64(a.seconds),
        seed: a.seed,
    };
    let stop = topology::stop_flag()?;
    let r = flood::run(&cfg, &stop)?;
    println!("{}", serde_json::to_string(&r)?);
    Ok(())
}

/// Prints a lab report as JSON or as its table.
fn print_report<R: serde::Serialize + std::fmt::Display>(r: &R, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
    } else {
        println!("{r}");
    }
    Ok(())
}

/// `quicknat-lab lab`: quicknat vs a reference in network namespaces.
fn run_lab(topology: Topology, a: LabArgs, backends: &str) -> anyhow::Result<()> {
    let LabArgs {
        seconds,
        rounds,
        fixed_pps,
        offloads_on,
        floors,
        pin_tayga,
        json,
        conns,
        size,
        quicknat,
        attack,
        cluster,
        plot,
    } = a;
    anyhow::ensure!(
        plot.is_none() || topology == Topology::Nat44,
        "--plot applies to --topology nat44 only"
    );
    let backends: Vec<String> = backends
        .split(',')
        .map(|b| b.trim().to_string())
        .filter(|b| !b.is_empty())
        .collect();
    for b in &backends {
        // The NAT44, NAT64, SIIT and ILA labs take the fast path's arms: xdpfast,
        // AF_XDP with the XDP fast path on, and tcfast, AF_PACKET with it at the tc hook.
        let fast_lab = matches!(
            topology,
            Topology::Nat44 | Topology::Nat64 | Topology::Siit | Topology::Ila
        );
        let xdpfast = b == topology::xdpfast::BACKEND && fast_lab;
        let tcfast = b == topology::xdpfast::TC_BACKEND && fast_lab;
        anyhow::ensure!(
            b == "af_xdp" || b == "af_packet" || xdpfast || tcfast,
            "--backends: unknown backend \"{b}\" (af_xdp, af_packet; xdpfast with --topology nat44, nat64, siit or ila; tcfast with nat44, nat64, siit or ila)"
        );
    }
    anyhow::ensure!(
        (1..=600).contains(&seconds),
        "--seconds must be between 1 and 600"
    );
    anyhow::ensure!(
        (1..=50).contains(&rounds),
        "--rounds must be between 1 and 50"
    );
    if topology == Topology::Attack {
        anyhow::ensure!(
            (16..=1_000_000).contains(&attack.collisions),
            "--collisions must be between 16 and 1000000"
        );
        anyhow::ensure!(
            (100..=1_000_000).contains(&attack.collision_pps),
            "--collision-pps must be between 100 and 1000000"
        );
        anyhow::ensure!(
            attack
                .max_sessions
                .is_none_or(|m| (1024..=1 << 26).contains(&m)),
            "--max-sessions must be between 1024 and 67108864"
        );
        anyhow::ensure!(
            attack
                .flood_pps
                .is_none_or(|r| (100..=10_000_000).contains(&r)),
            "--flood-pps must be between 100 and 10000000"
        );
    } else {
        anyhow::ensure!(
            attack.flood_pps.is_none(),
            "--flood-pps applies to --topology attack only"
        );
    }
    anyhow::ensure!(
        (1_000..=10_000_000).contains(&fixed_pps),
        "--fixed-pps must be between 1000 and 10000000"
    );
    if topology == Topology::Ila {
        anyhow::ensure!(
            (1..=1000).contains(&conns),
            "--conns must be between 1 and 1000"
        );
        anyhow::ensure!(
            (1..=65536).contains(&size),
            "--size must be between 1 and 65536"
        );
    }
    if topology == Topology::Cluster {
        anyhow::ensure!(
            backends.len() == 1,
            "--backends: the cluster runs one backend on every gateway (af_packet or af_xdp)"
        );
        anyhow::ensure!(
            (1_000..=5_000_000).contains(&cluster.gateway_pps),
            "--gateway-pps must be between 1000 and 5000000"
        );
    }
    // Found before any namespace is built, so a missing product binary costs nothing.
    let quicknat = topology::quicknat_binary(quicknat)?;
    match topology {
        Topology::Nat44 => {
            let report = topology::run_lab(&topology::LabOptions {
                seconds,
                rounds,
                fixed_pps,
                offloads_on,
                backends,
                quicknat,
                floors,
            })?;
            if let Some(dir) = &plot {
                for f in topology::plot::nat44(dir, &report)? {
                    eprintln!("lab: wrote {}", f.display());
                }
            }
            print_report(&report, json)
        }
        Topology::Nat64 | Topology::Siit => print_report(
            &topology::nat64::run(&topology::nat64::Nat64Options {
                seconds,
                rounds,
                backends,
                pin_tayga,
                quicknat,
                xlat: match topology {
                    Topology::Siit => topology::nat64::Xlat::Siit,
                    _ => topology::nat64::Xlat::Nat64,
                },
            })?,
            json,
        ),
        Topology::Ila => print_report(
            &topology::ila::run(&topology::ila::IlaOptions {
                seconds,
                rounds,
                conns,
                size,
                backends,
                quicknat,
            })?,
            json,
        ),
        Topology::Attack => print_report(
            &topology::attack::run_attack(&topology::attack::AttackOptions {
                seconds,
                rounds,
                backends,
                quicknat,
                max_sessions: attack.max_sessions,
                collisions: attack.collisions,
                collision_pps: attack.collision_pps,
                host_limit: attack.host_limit,
                flood_pps: attack.flood_pps,
                short: attack.short,
                cells: attack.cells,
            })?,
            json,
        ),
        Topology::Spread => print_report(
            &topology::spread::run_spread(&topology::spread::SpreadOptions {
                seconds,
                rounds,
                quicknat,
            })?,
            json,
        ),
        Topology::Cluster => print_report(
            &topology::cluster::run_cluster(&topology::cluster::ClusterOptions {
                gateways: cluster.gateways.unwrap_or(if attack.short { 2 } else { 3 }),
                backend: backends[0].clone(),
                quicknat,
                short: attack.short,
                seconds,
                rounds,
                gateway_pps: cluster.gateway_pps,
                cells: attack.cells,
            })?,
            json,
        ),
    }
}

/// `quicknat-lab echo`: answers UDP datagrams until the time is up or a signal.
fn run_echo(listen: std::net::SocketAddr, seconds: f64) -> anyhow::Result<()> {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    anyhow::ensure!(
        seconds.is_finite() && seconds > 0.0 && seconds <= 86_400.0,
        "--seconds must be between 0 and 86400"
    );
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("installing signal handlers")?;
    }
    let n = gen::udp_echo(listen, std::time::Duration::from_secs_f64(seconds), &stop)?;
    println!("answered {n}");
    Ok(())
}
