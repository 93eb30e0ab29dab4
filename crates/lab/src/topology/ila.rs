//! `quicknat-lab lab --topology ila`: TCP request/response (`quicknat-lab rr`, N connections, one
//! request in flight on each) between two hosts, directly (kernel IPv6 forwarding in the
//! router namespaces) vs through two quicknat `[ila]` routers, alternating per round.
//!
//! ```text
//! a (SIR ::a) ==a0|ra-a== ra ==ra-n|rb-n== rb ==rb-b|b0== b (SIR ::b)
//!                          \___ ILA network ___/
//! ```
//! Both hosts use SIR addresses under 2001:db8:ffff:1::/64 (identifiers 0:0:0:a and
//! 0:0:0:b); host a's locator is 2001:db8:a:0, host b's 2001:db8:b:0.
//!
//! Why two routers: ILA rewrites destinations only, SIR -> ILA where a packet enters the
//! ILA network and ILA -> SIR where it leaves it. A TCP peer must see the SIR address it
//! connected to, so both ends need a translator; this kernel has no ILA
//! (CONFIG_IPV6_ILA unset) to do the hosts' half. Router ra: inside = a's link, SIR -> ILA
//! for a's packets to b, ILA -> SIR for b's packets arriving from the network; rb the
//! mirror image. The routers route the locators to each other (2001:db8:b::/64 via rb,
//! 2001:db8:a::/64 via ra) and each SIR address to its host.
//!
//! - direct: the routers' kernels forward SIR addresses (a host route to the far host via
//!   the other router), net.ipv6.conf.all.forwarding=1, no quicknat.
//! - ila: quicknat runs in both routers (ra pinned to core 0, rb to core 1), kernel
//!   forwarding off and the SIR routes across the ILA network removed, so every packet
//!   crosses both user-space translators.
//! - forward: the same two quicknat routers with an ILA table that matches nothing (no
//!   mappings, `unmapped = "forward"`, a SIR prefix nobody uses) and the direct path's
//!   SIR routes: the same user-space forwarding, minus the translation. ILA against this
//!   is the cost of translating, the figure Linux's 3.4% measures (ILA vs no ILA on the
//!   same path); ILA against `direct` adds the cost of forwarding in user space.
//! - `--backends ...,xdpfast`: the ila path on AF_XDP with the XDP fast path on
//!   ([`super::xdpfast`]): each router copies its mappings into the steering program, which
//!   rewrites and redirects the packets itself (ra: b's mapping SIR -> ILA, a's ILA -> SIR;
//!   rb the mirror image). The hosts' veths get an `XDP_PASS` program, without which a
//!   veth drops frames redirected into it. It has no fwd-only arm (nothing to offload).
//!   `tcfast`: the same on AF_PACKET, the fast path at the tc ingress hook (no `XDP_PASS`
//!   needed: a tc redirect hands the receiving veth an skb).

use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

use anyhow::{bail, Result};

use super::{
    alternate, chrono_like_date, exe, floor, med, require, stop_child, stop_flag, temp_path,
    xdpfast, Lab,
};

const SIR_A: &str = "2001:db8:ffff:1::a";
const SIR_B: &str = "2001:db8:ffff:1::b";
const PORT: u16 = 7000;
const A: usize = 0;
const RA: usize = 1;
const RB: usize = 2;
const B: usize = 3;

/// What to run.
#[derive(Clone, Debug)]
pub struct IlaOptions {
    /// Seconds per measurement.
    pub seconds: u64,
    /// Alternating rounds (medians reported).
    pub rounds: usize,
    /// Connections of the request/response load.
    pub conns: usize,
    /// Request and response size, bytes.
    pub size: usize,
    /// quicknat backends ("af_xdp", "af_packet", "xdpfast": AF_XDP with the XDP fast path).
    pub backends: Vec<String>,
    /// The quicknat binary run as the ILA routers.
    pub quicknat: PathBuf,
}

/// One path's request/response figures.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RrResult {
    /// Transactions per second.
    pub tps: f64,
    /// Latency percentiles, microseconds.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Connections that failed mid-run.
    pub errors: f64,
    /// xdpfast: the share of both routers' packets the XDP program forwarded (from their
    /// fast-path and AF_XDP socket counters over the measurement); `None` elsewhere.
    pub fast_share: Option<f64>,
}

/// The report: medians per path.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct IlaReport {
    /// UTC date and kernel.
    pub when: String,
    /// Seconds per measurement.
    pub seconds: u64,
    /// Rounds.
    pub rounds: usize,
    /// Connections.
    pub conns: usize,
    /// Request/response bytes.
    pub size: usize,
    /// Kernel forwarding in both routers, no translation.
    pub direct: RrResult,
    /// Through both quicknat ILA routers, per backend.
    pub ila: Vec<(String, RrResult)>,
    /// Through both quicknat routers forwarding without translating, per backend (none
    /// for xdpfast).
    pub forward: Vec<(String, RrResult)>,
}

fn build() -> Result<Lab> {
    let lab = Lab::new(&["ila-a", "ila-ra", "ila-rb", "ila-b"], stop_flag()?)?;
    let (a, ra, rb, b) = (lab.at(A), lab.at(RA), lab.at(RB), lab.at(B));
    lab.veth(a, "a0", ra, "ra-a")?;
    lab.veth(ra, "ra-n", rb, "rb-n")?;
    lab.veth(rb, "rb-b", b, "b0")?;
    lab.addr(a, "a0", "fd00:a::2/64")?;
    lab.addr(a, "a0", &format!("{SIR_A}/128"))?;
    lab.addr(ra, "ra-a", "fd00:a::1/64")?;
    lab.addr(ra, "ra-n", "fd00:f::1/64")?;
    lab.addr(rb, "rb-n", "fd00:f::2/64")?;
    lab.addr(rb, "rb-b", "fd00:b::1/64")?;
    lab.addr(b, "b0", "fd00:b::2/64")?;
    lab.addr(b, "b0", &format!("{SIR_B}/128"))?;
    lab.route(a, &["default", "via", "fd00:a::1", "src", SIR_A])?;
    lab.route(b, &["default", "via", "fd00:b::1", "src", SIR_B])?;
    lab.route(ra, &[&format!("{SIR_A}/128"), "via", "fd00:a::2"])?;
    lab.route(rb, &[&format!("{SIR_B}/128"), "via", "fd00:b::2"])?;
    lab.route(ra, &["2001:db8:b::/64", "via", "fd00:f::2"])?;
    lab.route(rb, &["2001:db8:a::/64", "via", "fd00:f::1"])?;
    // Every path gets the same offloads: off (quicknat turns them off on its interfaces).
    for (ns, dev) in [
        (a, "a0"),
        (ra, "ra-a"),
        (ra, "ra-n"),
        (rb, "rb-n"),
        (rb, "rb-b"),
        (b, "b0"),
    ] {
        lab.offloads(&[(ns, dev)], false);
    }
    Ok(lab)
}

/// The SIR routes across the ILA network (the direct and forward paths); the routers'
/// kernels forward only on the direct path.
fn direct_routes(lab: &Lab, add: bool, kernel_forwards: bool) -> Result<()> {
    let verb = if add { "add" } else { "del" };
    for (r, dst, via) in [(RA, SIR_B, "fd00:f::2"), (RB, SIR_A, "fd00:f::1")] {
        lab.ns(
            lab.at(r),
            &["ip", "route", verb, &format!("{dst}/128"), "via", via],
        )?;
    }
    for r in [RA, RB] {
        lab.sysctl(
            lab.at(r),
            &format!(
                "net.ipv6.conf.all.forwarding={}",
                u8::from(add && kernel_forwards)
            ),
        )?;
    }
    Ok(())
}

/// A router that forwards in user space (its fast path off) but translates nothing.
fn forward_config(backend: &str, inside: &str, outside: &str, sock: &str) -> String {
    format!(
        "[gateway]\ninside = \"{inside}\"\noutside = \"{outside}\"\nbackend = \"{backend}\"\nworkers = 1\nstats_interval = 3600\ncontrol_socket = \"{sock}\"\nxdp_fast_path = \"off\"\n\n\
         [ila]\nsir_prefix = \"2001:db8:eeee:1::/64\"\ncsum_mode = \"adjust-transport\"\nunmapped = \"forward\"\n"
    )
}

fn config(backend: &str, inside: &str, outside: &str, sock: &str) -> String {
    let (backend, fast) = if backend == xdpfast::BACKEND {
        ("af_xdp", "on")
    } else if backend == xdpfast::TC_BACKEND {
        ("af_packet", "on")
    } else {
        (backend, "off")
    };
    format!(
        "[gateway]\ninside = \"{inside}\"\noutside = \"{outside}\"\nbackend = \"{backend}\"\nworkers = 1\nstats_interval = 3600\ncontrol_socket = \"{sock}\"\nxdp_fast_path = \"{fast}\"\n\n\
         [ila]\nsir_prefix = \"2001:db8:ffff:1::/64\"\ncsum_mode = \"adjust-transport\"\nunmapped = \"drop\"\n\n\
         [[ila.mapping]]\nidentifier = \"0:0:0:a\"\nlocator = \"2001:db8:a:0\"\n\n\
         [[ila.mapping]]\nidentifier = \"0:0:0:b\"\nlocator = \"2001:db8:b:0\"\n"
    )
}

/// `XDP_PASS` on the hosts' veths (a0, b0), which the routers' fast path redirects into.
fn host_xdp_pass(lab: &Lab) -> Result<Vec<Child>> {
    let exe = exe()?;
    let mut procs = Vec::new();
    for (ns, dev) in [(lab.at(A), "a0"), (lab.at(B), "b0")] {
        let started = lab.spawn(ns, &[&exe, "fwd", "--backend", "xdp-pass", "--inside", dev]);
        match started {
            Ok(c) => procs.push(c),
            Err(e) => {
                floor::stop(lab, floor::Running::with(0, procs))?;
                return Err(e);
            }
        }
        floor::await_xdp(lab, ns, dev, &mut procs)?;
    }
    Ok(procs)
}

/// One request/response measurement from a to b.
fn rr(lab: &Lab, opts: &IlaOptions) -> Result<RrResult> {
    let exe = exe()?;
    let listen = format!("[{SIR_B}]:{PORT}");
    let server = lab.spawn(
        lab.at(B),
        &[
            &exe,
            "rr",
            "server",
            "--listen",
            &listen,
            "--seconds",
            &(opts.seconds + 15).to_string(),
        ],
    )?;
    std::thread::sleep(Duration::from_millis(300));
    let out = lab.ns(
        lab.at(A),
        &[
            "timeout",
            &(opts.seconds + 20).to_string(),
            &exe,
            "rr",
            "client",
            "--connect",
            &listen,
            "--conns",
            &opts.conns.to_string(),
            "--size",
            &opts.size.to_string(),
            "--seconds",
            &opts.seconds.to_string(),
            "--json",
        ],
    );
    let _ = stop_child(server);
    let out = out?;
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_default();
    let get = |k: &str| v[k].as_f64().unwrap_or(0.0);
    if get("tps") <= 0.0 {
        bail!("rr client reported no transactions: {}", out.trim());
    }
    Ok(RrResult {
        tps: get("tps"),
        p50_us: get("p50_us"),
        p90_us: get("p90_us"),
        p99_us: get("p99_us"),
        errors: get("errors"),
        fast_share: None,
    })
}

/// [`rr`] with the share of both routers' packets the XDP program forwarded meanwhile.
fn rr_fast(lab: &Lab, opts: &IlaOptions, socks: &[PathBuf; 2]) -> Result<RrResult> {
    let snap = || -> Result<xdpfast::FastSnap> {
        Ok(xdpfast::snap_at(&opts.quicknat, &socks[0])?
            + xdpfast::snap_at(&opts.quicknat, &socks[1])?)
    };
    let before = snap()?;
    let r = rr(lab, opts)?;
    let after = snap()?;
    Ok(RrResult {
        fast_share: Some(before.share_until(&after)),
        ..r
    })
}

fn combine(rs: &[RrResult]) -> RrResult {
    RrResult {
        tps: med(rs, |r| r.tps),
        p50_us: med(rs, |r| r.p50_us),
        p90_us: med(rs, |r| r.p90_us),
        p99_us: med(rs, |r| r.p99_us),
        errors: med(rs, |r| r.errors),
        fast_share: rs
            .iter()
            .all(|r| r.fast_share.is_some())
            .then(|| med(rs, |r| r.fast_share.unwrap_or(0.0))),
    }
}

/// Runs the ILA lab.
pub fn run(opts: &IlaOptions) -> Result<IlaReport> {
    require(&["ip", "nft", "ethtool", "taskset"])?;
    let lab = build()?;
    // Per backend and path (translating, forwarding only): the routers' configurations.
    let cfgs: Vec<(String, bool, [PathBuf; 2])> = opts
        .backends
        .iter()
        .flat_map(|b| [(b.clone(), true), (b.clone(), false)])
        .filter(|(b, xlat)| *xlat || !xdpfast::is_fast(b))
        .map(|(b, xlat)| {
            let tag = if xlat { "ila" } else { "fwd" };
            let paths = [
                temp_path(&format!("ila-ra-{b}-{tag}.toml")),
                temp_path(&format!("ila-rb-{b}-{tag}.toml")),
            ];
            (b, xlat, paths)
        })
        .collect();
    let socks = [temp_path("ila-ra.sock"), temp_path("ila-rb.sock")];
    for (b, xlat, [ra, rb]) in &cfgs {
        let make = if *xlat { config } else { forward_config };
        std::fs::write(ra, make(b, "ra-a", "ra-n", &socks[0].to_string_lossy()))?;
        std::fs::write(rb, make(b, "rb-b", "rb-n", &socks[1].to_string_lossy()))?;
    }
    let result = alternate(
        &lab,
        "ila",
        opts.rounds,
        cfgs.len(),
        |arm| {
            arm.map_or("direct (kernel forwarding)".to_string(), |i| {
                let (b, xlat, _) = &cfgs[i];
                format!(
                    "quicknat {} {b}",
                    if *xlat { "ila" } else { "forward-only" }
                )
            })
        },
        |arm| match arm {
            None => {
                direct_routes(&lab, true, true)?;
                let r = rr(&lab, opts);
                direct_routes(&lab, false, true)?;
                r
            }
            Some(i) => {
                let (b, xlat, [ra_cfg, rb_cfg]) = &cfgs[i];
                if !xlat {
                    direct_routes(&lab, true, false)?;
                }
                let pass = if b == xdpfast::BACKEND {
                    host_xdp_pass(&lab)?
                } else {
                    Vec::new()
                };
                let r = (|| {
                    let ra: Child = lab.start_quicknat(&opts.quicknat, lab.at(RA), 0, ra_cfg)?;
                    let rb = lab.start_quicknat(&opts.quicknat, lab.at(RB), 1, rb_cfg);
                    let r = rb.and_then(|rb| {
                        let r = if xdpfast::is_fast(b) {
                            rr_fast(&lab, opts, &socks)
                        } else {
                            rr(&lab, opts)
                        };
                        eprintln!("lab ila: rb {}", stop_child(rb));
                        r
                    });
                    eprintln!("lab ila: ra {}", stop_child(ra));
                    r
                })();
                floor::stop(&lab, floor::Running::with(0, pass))?;
                if !xlat {
                    direct_routes(&lab, false, false)?;
                }
                r
            }
        },
    );
    for (_, _, paths) in &cfgs {
        for p in paths {
            let _ = std::fs::remove_file(p);
        }
    }
    drop(lab);
    for s in &socks {
        let _ = std::fs::remove_file(s);
    }
    let (direct, ila) = result?;
    Ok(IlaReport {
        when: chrono_like_date(),
        seconds: opts.seconds,
        rounds: opts.rounds,
        conns: opts.conns,
        size: opts.size,
        direct: combine(&direct),
        ila: cfgs
            .iter()
            .zip(ila.iter())
            .filter(|((_, xlat, _), _)| *xlat)
            .map(|((b, _, _), r)| (b.clone(), combine(r)))
            .collect(),
        forward: cfgs
            .iter()
            .zip(ila.iter())
            .filter(|((_, xlat, _), _)| !*xlat)
            .map(|((b, _, _), r)| (b.clone(), combine(r)))
            .collect(),
    })
}

impl std::fmt::Display for IlaReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "quicknat lab ila — {} — median of {} alternating rounds, {} s each; rr {} connections x {} B",
            self.when, self.rounds, self.seconds, self.conns, self.size
        )?;
        write!(f, "{:<30} {:>16}", "metric", "direct (kernel)")?;
        for (b, _) in &self.ila {
            write!(
                f,
                " {:>22} {:>22}",
                format!("quicknat fwd-only {b}"),
                format!("quicknat ILA {b}")
            )?;
        }
        writeln!(f)?;
        let fwd_of = |b: &str| self.forward.iter().find(|(x, _)| x == b).map(|(_, r)| r);
        let mut row = |name: &str, get: &dyn Fn(&RrResult) -> f64, prec: usize| {
            write!(f, "{name:<30} {:>16.prec$}", get(&self.direct))?;
            for (b, ila) in &self.ila {
                match fwd_of(b) {
                    Some(fwd) => write!(f, " {:>22.prec$}", get(fwd))?,
                    None => write!(f, " {:>22}", "-")?,
                }
                write!(f, " {:>22.prec$}", get(ila))?;
            }
            writeln!(f)
        };
        row("transactions/s", &|r| r.tps, 0)?;
        row("latency p50 (us)", &|r| r.p50_us, 1)?;
        row("latency p90 (us)", &|r| r.p90_us, 1)?;
        row("latency p99 (us)", &|r| r.p99_us, 1)?;
        row("connection errors", &|r| r.errors, 0)?;
        if self.ila.iter().any(|(_, r)| r.fast_share.is_some()) {
            write!(f, "{:<30} {:>16}", "share through the fast path", "-")?;
            for (_, ila) in &self.ila {
                let s = ila
                    .fast_share
                    .map_or_else(|| "-".into(), |s| format!("{:.1}%", s * 100.0));
                write!(f, " {:>22} {:>22}", "-", s)?;
            }
            writeln!(f)?;
        }
        let cost = |base: f64, r: f64| {
            if base > 0.0 {
                format!("{:.1}%", (1.0 - r / base) * 100.0)
            } else {
                "-".into()
            }
        };
        write!(f, "{:<30} {:>16}", "translation cost (vs fwd-only)", "-")?;
        for (b, ila) in &self.ila {
            let c = fwd_of(b).map_or_else(|| "-".into(), |fwd| cost(fwd.tps, ila.tps));
            write!(f, " {:>22} {:>22}", "-", c)?;
        }
        writeln!(f, "   (goal: < 3.4%, Linux in-kernel ILA vs no ILA)")?;
        write!(f, "{:<30} {:>16}", "cost vs direct kernel path", "-")?;
        for (b, ila) in &self.ila {
            let c = fwd_of(b).map_or_else(|| "-".into(), |fwd| cost(self.direct.tps, fwd.tps));
            write!(f, " {:>22} {:>22}", c, cost(self.direct.tps, ila.tps))?;
        }
        writeln!(f)?;
        write!(
            f,
            "direct = the routers' kernels forward IPv6 (no translation); fwd-only = two quicknat routers \
             (user space, 1 worker each, pinned to cores 0 and 1) forwarding without translating; ILA = the same \
             routers translating SIR <-> ILA (xdpfast: on AF_XDP with the XDP fast path on; tcfast: on AF_PACKET with it at the tc hook); kernel forwarding off \
             for both quicknat paths"
        )
    }
}
