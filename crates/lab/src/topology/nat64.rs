//! `quicknat-lab lab --topology nat64`: an IPv6-only client reaches an IPv4 server through the
//! gateway, by quicknat `[nat64]` (each backend) or TAYGA, alternating per round.
//! `--topology siit`: the same, quicknat running the stateless translator `[siit]` with
//! TAYGA's own mapping (EAM 203.0.113.1 <-> 2001:db8:1::2, the same pref64): the
//! like-for-like comparison, stateless against stateless (a CLAT is this translator).
//!
//! ```text
//! cli (2001:db8:1::2) ==c0|g-in== gw (2001:db8:1::1 | 198.51.100.1) ==g-out|s0== srv (198.51.100.2)
//! ```
//! The client reaches the server as 2001:db8:64::198.51.100.2 (pref64 2001:db8:64::/96,
//! network-specific: RFC 6052 forbids non-global IPv4 under 64:ff9b::/96 and TAYGA
//! refuses it). The server routes 203.0.113.0/24 to the gateway.
//!
//! What each side does (the comparison is of two different translators, said plainly):
//! - quicknat: stateful NAT64 (RFC 6146), NAPT: one session per flow, source ports
//!   allocated from pool4 203.0.113.1/32; frames taken from the veths by AF_XDP or
//!   AF_PACKET, one worker pinned to the gateway core, kernel forwarding off.
//! - TAYGA: stateless NAT64 with a 1:1 address map (`map 203.0.113.1 2001:db8:1::2`: the
//!   client's IPv6 address <-> the same public IPv4 address, ports unchanged, no per-flow
//!   state); the kernel forwards between the veths and TAYGA's TUN device, TAYGA reads and
//!   writes the TUN one packet per syscall, pinned to the gateway core.
//!
//! Both get the same offloads (off), the same RPS steering of the kernel's receive work to
//! the gateway core and the same traffic.
//!
//! `--backends ...,xdpfast` adds quicknat on AF_XDP with the XDP fast path on
//! ([`super::xdpfast`], as in the NAT44 lab): established NAT64 sessions are translated in
//! XDP (IPv6 in, IPv4 out and back) and redirected between the veths, whose peers (`c0`,
//! `s0`) get an `XDP_PASS` program to take redirected frames. Its UDP cell sends on fixed
//! source ports, warmed up first with the server answering until the fast path installed
//! every flow; each of its cells reports the share of the gateway's packets the XDP program
//! forwarded.

use std::path::Path;
use std::process::Child;

use anyhow::{Context, Result};

use super::floor::{self, Running};
use super::{
    alternate, chrono_like_date, iperf, med, ratio, require, stop_child, stop_flag, temp_path,
    udp_small, xdpfast, Configs, Lab, GW_CORE,
};

const SERVER: &str = "198.51.100.2";
/// The server as the IPv6-only client names it (pref64 + 198.51.100.2).
pub(super) const SERVER6: &str = "2001:db8:64::c633:6402";
const PREF64: &str = "2001:db8:64::/96";
const TUN: &str = "qnlab64";

/// What to run.
#[derive(Clone, Debug)]
pub struct Nat64Options {
    /// Seconds per measurement.
    pub seconds: u64,
    /// Alternating rounds (medians reported).
    pub rounds: usize,
    /// quicknat backends ("af_xdp", "af_packet", "xdpfast": AF_XDP with the XDP fast path).
    pub backends: Vec<String>,
    /// Pin TAYGA to the gateway core (else the scheduler places it).
    pub pin_tayga: bool,
    /// The quicknat binary run as the gateway.
    pub quicknat: std::path::PathBuf,
    /// What quicknat runs: stateful NAT64 or the stateless translator.
    pub xlat: Xlat,
}

/// The translator quicknat runs in this lab.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Xlat {
    /// `[nat64]`: stateful NAT64 (RFC 6146), NAPT from pool4.
    #[default]
    Nat64,
    /// `[siit]`: stateless (RFC 7915), TAYGA's 1:1 mapping as an EAM entry.
    Siit,
}

impl Xlat {
    /// The mode's name (`--topology`, the report's title and labels).
    pub fn name(self) -> &'static str {
        match self {
            Xlat::Nat64 => "nat64",
            Xlat::Siit => "siit",
        }
    }

    /// The translation tables every quicknat arm runs.
    pub(super) fn mode(self) -> String {
        match self {
            Xlat::Nat64 => format!("[nat64]\npref64 = \"{PREF64}\"\npool4 = [\"203.0.113.1/32\"]\n"),
            Xlat::Siit => format!(
                "[siit]\npref64 = \"{PREF64}\"\neam = [ {{ ipv4 = \"203.0.113.1/32\", ipv6 = \"2001:db8:1::2/128\" }} ]\n"
            ),
        }
    }

    /// A gateway configuration with its sides as this mode has them: SIIT's inside is
    /// its IPv4 side (g-out), NAT64's its IPv6 side (g-in).
    fn sides(self, cfg: &str) -> Result<String> {
        const NAT64: &str = "inside = \"g-in\"\noutside = \"g-out\"";
        anyhow::ensure!(
            cfg.contains(NAT64),
            "lab: a gateway configuration without `{NAT64}`"
        );
        Ok(match self {
            Xlat::Nat64 => cfg.to_string(),
            Xlat::Siit => cfg.replacen(NAT64, "inside = \"g-out\"\noutside = \"g-in\"", 1),
        })
    }
}

/// One system's measurements.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Nat64Result {
    /// iperf3 IPv6 client -> IPv4 server, 1 stream, offloads off (Gbit/s).
    pub tcp1_off: f64,
    /// IPv6 UDP, 18-byte payload, translated and sent out of the IPv4 side per second (the
    /// server drops at ingress).
    pub udp_capacity_pps: f64,
    /// Packets the generator offered per second in that cell.
    pub udp_offered_pps: f64,
    /// iperf3, 1 stream, offloads ON at the client and the server (TSO: 64 KB
    /// super-packets reach the gateway; quicknat on AF_PACKET passes them through)
    /// (Gbit/s).
    pub tcp1_on: f64,
    /// The XDP fast-path arm: the share of each cell's packets the XDP program forwarded
    /// (the rest reached the AF_XDP socket); `None` for the other arms and TAYGA.
    pub fast_share: Option<Nat64FastShare>,
}

/// Per cell, the fraction (0..1) of the gateway's packets the XDP fast path forwarded.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Nat64FastShare {
    /// TCP 1 stream, offloads off.
    pub tcp1_off: f64,
    /// The UDP capacity cell (its flows warmed up first).
    pub udp: f64,
    /// TCP 1 stream, offloads on at the ends.
    pub tcp1_on: f64,
}

/// One quicknat arm's figures over TAYGA's (higher is better); `None` where TAYGA's is 0.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Nat64Ratio {
    /// "quicknat af_xdp", "quicknat xdpfast", ...
    pub quicknat: String,
    /// TCP 1 stream, offloads off.
    pub tcp1_off: Option<f64>,
    /// TCP 1 stream, offloads on at the ends.
    pub tcp1_on: Option<f64>,
    /// IPv6 UDP capacity.
    pub udp_capacity: Option<f64>,
}

/// The report: medians per system.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Nat64Report {
    /// What quicknat ran.
    pub xlat: Xlat,
    /// UTC date and kernel.
    pub when: String,
    /// Seconds per measurement.
    pub seconds: u64,
    /// Rounds.
    pub rounds: usize,
    /// quicknat per backend, medians.
    pub quicknat: Vec<(String, Nat64Result)>,
    /// TAYGA, medians.
    pub tayga: Nat64Result,
    /// Whether TAYGA was pinned to the gateway core.
    pub tayga_pinned: bool,
    /// Each quicknat arm's figures over TAYGA's, in the order of `quicknat`.
    pub ratios: Vec<Nat64Ratio>,
}

pub(super) fn devs(lab: &Lab) -> [(&str, &str); 4] {
    [
        (lab.cli(), "c0"),
        (lab.gw(), "g-in"),
        (lab.gw(), "g-out"),
        (lab.srv(), "s0"),
    ]
}

pub(super) fn build() -> Result<Lab> {
    let lab = Lab::new(&["cli64", "gw64", "srv64"], stop_flag()?)?;
    lab.veth(lab.cli(), "c0", lab.gw(), "g-in")?;
    lab.veth(lab.srv(), "s0", lab.gw(), "g-out")?;
    lab.addr(lab.cli(), "c0", "2001:db8:1::2/64")?;
    lab.addr(lab.gw(), "g-in", "2001:db8:1::1/64")?;
    lab.addr(lab.gw(), "g-out", "198.51.100.1/24")?;
    lab.addr(lab.srv(), "s0", "198.51.100.2/24")?;
    lab.route(lab.cli(), &[PREF64, "via", "2001:db8:1::1"])?;
    lab.route(lab.srv(), &["203.0.113.0/24", "via", "198.51.100.1"])?;
    lab.rps(lab.gw(), &["g-in", "g-out"], GW_CORE);
    Ok(lab)
}

enum System {
    Quicknat(Child),
    /// quicknat with the XDP fast path, and the veth peers' `XDP_PASS` programs.
    Xdpfast(Running),
    Tayga(Child),
}

fn forwarding(lab: &Lab, on: bool) -> Result<()> {
    let v = u8::from(on);
    lab.sysctl(lab.gw(), &format!("net.ipv4.ip_forward={v}"))?;
    lab.sysctl(lab.gw(), &format!("net.ipv6.conf.all.forwarding={v}"))
}

/// TAYGA, or quicknat (`bin`) on backend `quicknat.0` with configuration `quicknat.1`.
fn start(
    lab: &Lab,
    bin: &Path,
    quicknat: Option<(&str, &Path)>,
    tayga: &Path,
    pin: bool,
) -> Result<System> {
    if let Some((backend, cfg)) = quicknat {
        forwarding(lab, false)?;
        if xdpfast::is_fast(backend) {
            let xdp = backend == xdpfast::BACKEND;
            return Ok(System::Xdpfast(xdpfast::start_arm(lab, bin, cfg, xdp)?));
        }
        return Ok(System::Quicknat(lab.start_quicknat(
            bin,
            lab.gw(),
            GW_CORE,
            cfg,
        )?));
    }
    let conf = tayga.to_string_lossy();
    lab.ns(lab.gw(), &["tayga", "-c", &conf, "--mktun"])?;
    lab.ns(lab.gw(), &["ip", "link", "set", TUN, "up"])?;
    lab.route(lab.gw(), &["203.0.113.0/24", "dev", TUN])?;
    lab.route(lab.gw(), &[PREF64, "dev", TUN])?;
    forwarding(lab, true)?;
    let core = GW_CORE.to_string();
    let run = ["tayga", "-c", &conf, "--nodetach"];
    let pinned = ["taskset", "-c", &core, "tayga", "-c", &conf, "--nodetach"];
    let child = lab.spawn(lab.gw(), if pin { &pinned[..] } else { &run[..] })?;
    std::thread::sleep(std::time::Duration::from_millis(500));
    Ok(System::Tayga(child))
}

fn stop(lab: &Lab, s: System, tayga: &Path) -> Result<()> {
    match s {
        System::Quicknat(c) => eprintln!("lab nat64: quicknat {}", stop_child(c)),
        System::Xdpfast(r) => {
            floor::stop(lab, r)?;
            forwarding(lab, false)?;
        }
        System::Tayga(c) => {
            let _ = stop_child(c);
            forwarding(lab, false)?;
            // Removing the TUN device removes its routes.
            lab.ns(
                lab.gw(),
                &["tayga", "-c", &tayga.to_string_lossy(), "--rmtun"],
            )?;
        }
    }
    Ok(())
}

/// The cells. `fast`: the quicknat binary of the XDP fast-path arm (whose counters are read
/// around each cell, outside it, and whose UDP flows are warmed up first), else `None`.
fn measure(lab: &Lab, xlat: Xlat, s: u64, fast: Option<&Path>) -> Result<Nat64Result> {
    let name = xlat.name();
    let snap = || -> Result<Option<xdpfast::FastSnap>> { fast.map(xdpfast::snap).transpose() };
    let share_of = |a: Option<xdpfast::FastSnap>, b: Option<xdpfast::FastSnap>| {
        a.zip(b).map_or(0.0, |(a, b)| a.share_until(&b))
    };
    let mut share = Nat64FastShare::default();
    let a = snap()?;
    let mut r = Nat64Result {
        tcp1_off: iperf(lab, SERVER, SERVER6, 1, s)?,
        ..Nat64Result::default()
    };
    share.tcp1_off = share_of(a, snap()?);
    let dst = format!("[{SERVER6}]:9");
    // The fast path takes a UDP flow once a reply came back: establish the cell's flows
    // (the server answers them; the sink is not on yet).
    let src_port = match fast {
        Some(bin) => {
            // SIIT installs each direction of a flow on its own.
            let per_flow = if xlat == Xlat::Siit { 2 } else { 1 };
            let n = xdpfast::warm_up(lab, bin, &dst, &format!("{SERVER}:9"), per_flow)?;
            eprintln!("lab {name}: fast path: {n} installs for the UDP flows before the cell");
            Some(xdpfast::SRC_PORT)
        }
        None => None,
    };
    lab.sink_on(lab.srv(), "s0")?;
    let cell = (|| {
        let a = snap()?;
        let c = udp_small(lab, &dst, "g-out", None, s, 0.0, src_port)?;
        Ok::<_, anyhow::Error>((c, share_of(a, snap()?)))
    })();
    lab.sink_off(lab.srv())?;
    let ((offered, fwd, _), udp_share) = cell?;
    r.udp_offered_pps = offered;
    r.udp_capacity_pps = fwd;
    share.udp = udp_share;
    // Offloads on at the ends only: the gateway's interfaces stay as each system set
    // them (quicknat on AF_XDP takes no super-packets and turns them off).
    let ends = [(lab.cli(), "c0"), (lab.srv(), "s0")];
    lab.offloads(&ends, true);
    let a = snap();
    let on = iperf(lab, SERVER, SERVER6, 1, s);
    let b = snap();
    lab.offloads(&ends, false);
    r.tcp1_on = on?;
    share.tcp1_on = share_of(a?, b?);
    r.fast_share = fast.map(|_| share);
    Ok(r)
}

fn combine(rs: &[Nat64Result]) -> Nat64Result {
    Nat64Result {
        tcp1_off: med(rs, |r| r.tcp1_off),
        udp_capacity_pps: med(rs, |r| r.udp_capacity_pps),
        udp_offered_pps: med(rs, |r| r.udp_offered_pps),
        tcp1_on: med(rs, |r| r.tcp1_on),
        fast_share: rs.first().and_then(|r| r.fast_share).map(|_| {
            let sh = |f: &dyn Fn(&Nat64FastShare) -> f64| {
                med(rs, |r| r.fast_share.as_ref().map_or(0.0, f))
            };
            Nat64FastShare {
                tcp1_off: sh(&|x| x.tcp1_off),
                udp: sh(&|x| x.udp),
                tcp1_on: sh(&|x| x.tcp1_on),
            }
        }),
    }
}

/// Each quicknat arm's medians over TAYGA's.
fn ratios(quicknat: &[(String, Nat64Result)], tayga: &Nat64Result) -> Vec<Nat64Ratio> {
    let over = |a: f64, b: f64| (b > 0.0).then(|| a / b);
    quicknat
        .iter()
        .map(|(b, q)| Nat64Ratio {
            quicknat: format!("quicknat {b}"),
            tcp1_off: over(q.tcp1_off, tayga.tcp1_off),
            tcp1_on: over(q.tcp1_on, tayga.tcp1_on),
            udp_capacity: over(q.udp_capacity_pps, tayga.udp_capacity_pps),
        })
        .collect()
}

/// Runs the NAT64 lab.
pub fn run(opts: &Nat64Options) -> Result<Nat64Report> {
    require(&["ip", "iperf3", "nft", "ethtool", "taskset", "tayga"])?;
    let lab = build()?;
    lab.offloads(&devs(&lab), false);
    let (name, mode) = (opts.xlat.name(), opts.xlat.mode());
    let configs = Configs::gateway(name, &opts.backends, &mode)?;
    // The fast-path arms' own configurations (xdp_fast_path = "on": AF_XDP for xdpfast,
    // AF_PACKET for tcfast); SIIT's sides.
    for (b, path) in &configs.0 {
        let cfg = match xdpfast::is_fast(b) {
            true => xdpfast::config_for(b, &mode),
            false => std::fs::read_to_string(path)?,
        };
        std::fs::write(path, opts.xlat.sides(&cfg)?)?;
    }
    let cfgs = &configs.0;
    let tayga_dir = temp_path("tayga");
    let tayga = temp_path("tayga.conf");
    std::fs::create_dir_all(&tayga_dir).context("creating TAYGA's data-dir")?;
    std::fs::write(
        &tayga,
        format!(
            "tun-device {TUN}\nipv4-addr 203.0.113.254\nprefix {PREF64}\nmap 203.0.113.1 2001:db8:1::2\ndata-dir {}\n",
            tayga_dir.display()
        ),
    )?;
    let result = alternate(
        &lab,
        name,
        opts.rounds,
        cfgs.len(),
        |arm| {
            arm.map_or("TAYGA".to_string(), |i| {
                format!("quicknat {name} {}", cfgs[i].0)
            })
        },
        |arm| {
            let quicknat = arm.map(|i| (cfgs[i].0.as_str(), cfgs[i].1.as_path()));
            let sys = start(&lab, &opts.quicknat, quicknat, &tayga, opts.pin_tayga)?;
            let fast = quicknat
                .filter(|(b, _)| xdpfast::is_fast(b))
                .map(|_| opts.quicknat.as_path());
            let r = measure(&lab, opts.xlat, opts.seconds, fast);
            stop(&lab, sys, &tayga)?;
            r
        },
    );
    drop(lab);
    let _ = std::fs::remove_file(&tayga);
    let _ = std::fs::remove_dir_all(&tayga_dir);
    let (t, q) = result?;
    let quicknat: Vec<(String, Nat64Result)> = cfgs
        .iter()
        .map(|(b, _)| b.clone())
        .zip(q.iter().map(|r| combine(r)))
        .collect();
    let tayga = combine(&t);
    Ok(Nat64Report {
        xlat: opts.xlat,
        when: chrono_like_date(),
        seconds: opts.seconds,
        rounds: opts.rounds,
        ratios: ratios(&quicknat, &tayga),
        quicknat,
        tayga,
        tayga_pinned: opts.pin_tayga,
    })
}

impl std::fmt::Display for Nat64Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "quicknat lab {} — {} — median of {} alternating rounds, {} s each",
            self.xlat.name(),
            self.when,
            self.rounds,
            self.seconds
        )?;
        write!(f, "{:<46}", "metric")?;
        for (b, _) in &self.quicknat {
            write!(f, " {:>18}", format!("quicknat {b}"))?;
        }
        writeln!(f, " {:>10} {:>22}", "TAYGA", "best quicknat / TAYGA")?;
        // `get`: a figure, `None` where the arm has none ("-"; TAYGA's column left blank).
        let mut row = |name: &str,
                       get: &dyn Fn(&Nat64Result) -> Option<f64>,
                       compare: bool|
         -> std::fmt::Result {
            write!(f, "{name:<46}")?;
            let mut best = 0.0f64;
            for (_, q) in &self.quicknat {
                match get(q) {
                    Some(v) => {
                        best = best.max(v);
                        write!(f, " {v:>18.2}")?;
                    }
                    None => write!(f, " {:>18}", "-")?,
                }
            }
            let t = get(&self.tayga);
            let r = match t {
                Some(t) if compare => ratio(best, t),
                _ => String::new(),
            };
            let t = t.map_or(String::new(), |t| format!("{t:.2}"));
            writeln!(f, " {t:>10} {r:>22}")
        };
        row(
            "TCP 1 stream, offloads off (Gbit/s)",
            &|r| Some(r.tcp1_off),
            true,
        )?;
        row(
            "TCP 1 stream, offloads on at the ends (Gbit/s)",
            &|r| Some(r.tcp1_on),
            true,
        )?;
        row(
            "IPv6 UDP 18 B payload capacity (Mpps)",
            &|r| Some(r.udp_capacity_pps / 1e6),
            true,
        )?;
        row(
            "  offered by the generator (Mpps)",
            &|r| Some(r.udp_offered_pps / 1e6),
            false,
        )?;
        // The XDP fast-path arm: how much of each cell really went through XDP (%).
        let fast = self.quicknat.iter().any(|(_, q)| q.fast_share.is_some());
        if fast {
            row(
                "XDP fast path share: TCP 1 stream off (%)",
                &|r| r.fast_share.map(|x| x.tcp1_off * 100.0),
                false,
            )?;
            row(
                "XDP fast path share: UDP capacity (%)",
                &|r| r.fast_share.map(|x| x.udp * 100.0),
                false,
            )?;
            row(
                "XDP fast path share: TCP 1 stream on (%)",
                &|r| r.fast_share.map(|x| x.tcp1_on * 100.0),
                false,
            )?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "{:<46} {:>10} {:>10} {:>14}",
            "ratio (quicknat / TAYGA)", "TCP1 off", "TCP1 on", "UDP capacity"
        )?;
        let x = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}x"));
        for r in &self.ratios {
            writeln!(
                f,
                "{:<46} {:>10} {:>10} {:>14}",
                format!("{} / TAYGA", r.quicknat),
                x(r.tcp1_off),
                x(r.tcp1_on),
                x(r.udp_capacity)
            )?;
        }
        writeln!(f)?;
        let what = match self.xlat {
            Xlat::Nat64 => "stateful NAT64 (RFC 6146, NAPT, per-flow sessions, pool4 203.0.113.1/32)",
            Xlat::Siit => "stateless SIIT (RFC 7915), TAYGA's mapping: EAM 203.0.113.1 <-> 2001:db8:1::2, the same pref64; no state",
        };
        writeln!(
            f,
            "quicknat: {what}, 1 worker on core {GW_CORE}, kernel forwarding off"
        )?;
        if fast {
            writeln!(
                f,
                "quicknat xdpfast: AF_XDP with xdp_fast_path = \"on\" (established sessions, SIIT: flows hinted by the engine, translated in XDP, XDP_PASS on the veth peers); \
                 its UDP flows warmed up on fixed source ports with the server answering; share = XDP-forwarded / (that + AF_XDP socket rx);\n\
                 on veth its XDP work runs on the sending core, the generator's: where out = offered, the generator was the limit\n\
                 quicknat tcfast: AF_PACKET with xdp_fast_path = \"on\" (the same sessions translated by a tc ingress program, bpf_skb_change_proto; \
                 TCP super-packets whole when every segment gets DF); share as above, of the AF_PACKET sockets' rx"
            )?;
        }
        write!(
            f,
            "TAYGA: stateless NAT64, 1:1 map 2001:db8:1::2 <-> 203.0.113.1 (no ports, no per-flow state), kernel forwarding via TUN, {}\n\
             pref64 {PREF64}; offloads off; capacity = packets out of the IPv4 side with the server dropping at ingress (84 B frames in, 64 B out)",
            if self.tayga_pinned {
                format!("pinned to core {GW_CORE}")
            } else {
                "placed by the scheduler (--pin-tayga pins it to the gateway core)".to_string()
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(tcp: f64, share: Option<f64>) -> Nat64Result {
        Nat64Result {
            tcp1_off: tcp,
            udp_capacity_pps: 100_000.0,
            udp_offered_pps: 200_000.0,
            tcp1_on: tcp,
            fast_share: share.map(|s| Nat64FastShare {
                tcp1_off: s,
                udp: s,
                tcp1_on: 0.0,
            }),
        }
    }

    #[test]
    fn the_fast_path_share_is_a_median_and_only_the_xdpfast_arm_has_one() {
        let rs = [
            result(1.0, Some(0.9)),
            result(3.0, Some(0.99)),
            result(2.0, Some(0.95)),
        ];
        let m = combine(&rs);
        assert_eq!(m.tcp1_off, 2.0);
        let sh = m.fast_share.unwrap();
        assert!((sh.udp - 0.95).abs() < 1e-9, "{sh:?}");
        assert!(combine(&[result(1.0, None)]).fast_share.is_none());
    }

    #[test]
    fn the_table_prints_the_xdpfast_arm_its_share_and_its_ratios_to_tayga() {
        let quicknat = vec![
            ("af_xdp".to_string(), result(2.0, None)),
            (xdpfast::BACKEND.to_string(), result(3.0, Some(0.97))),
        ];
        let tayga = Nat64Result {
            udp_capacity_pps: 0.0,
            ..result(1.0, None)
        };
        let report = Nat64Report {
            ratios: ratios(&quicknat, &tayga),
            quicknat,
            tayga,
            ..Nat64Report::default()
        };
        assert_eq!(report.ratios[1].quicknat, "quicknat xdpfast");
        assert_eq!(report.ratios[1].tcp1_off, Some(3.0));
        // TAYGA forwarded nothing: no ratio, not infinity.
        assert_eq!(report.ratios[1].udp_capacity, None);
        let t = report.to_string();
        assert!(t.contains("quicknat xdpfast"), "{t}");
        let share = t
            .lines()
            .find(|l| l.starts_with("XDP fast path share: UDP capacity"))
            .unwrap_or_else(|| panic!("{t}"));
        // af_xdp has no fast path ("-"), xdpfast 97%.
        assert!(share.contains(" - ") && share.contains("97.00"), "{share}");
        let r = t
            .lines()
            .find(|l| l.starts_with("quicknat xdpfast / TAYGA"))
            .unwrap_or_else(|| panic!("{t}"));
        assert!(r.contains("3.00x") && r.trim_end().ends_with('-'), "{r}");
        // Without the arm, no share rows.
        let plain = Nat64Report {
            quicknat: vec![("af_xdp".to_string(), result(2.0, None))],
            ..Nat64Report::default()
        };
        assert!(!plain.to_string().contains("XDP fast path share"));
    }

    #[test]
    fn siit_runs_taygas_mapping_with_its_ipv4_side_inside() {
        let cfg = Xlat::Siit
            .sides(&xdpfast::config_for(
                xdpfast::TC_BACKEND,
                &Xlat::Siit.mode(),
            ))
            .unwrap();
        assert!(
            cfg.contains("inside = \"g-out\"\noutside = \"g-in\""),
            "{cfg}"
        );
        assert!(
            cfg.contains("[siit]")
                && cfg.contains("ipv4 = \"203.0.113.1/32\", ipv6 = \"2001:db8:1::2/128\""),
            "{cfg}"
        );
        assert!(
            cfg.contains("backend = \"af_packet\"") && cfg.contains("xdp_fast_path = \"on\""),
            "{cfg}"
        );
        // The plain arms' configuration too, and a template it does not fit.
        let plain =
            Configs::gateway("siit", &["af_packet".to_string()], &Xlat::Siit.mode()).unwrap();
        let text = std::fs::read_to_string(&plain.0[0].1).unwrap();
        assert!(
            Xlat::Siit
                .sides(&text)
                .unwrap()
                .contains("inside = \"g-out\""),
            "{text}"
        );
        assert!(Xlat::Siit.sides("[gateway]\ninside = \"x\"\n").is_err());
        // NAT64 keeps the template's sides.
        let n = Xlat::Nat64
            .sides(&xdpfast::config_for(xdpfast::BACKEND, &Xlat::Nat64.mode()))
            .unwrap();
        assert!(
            n.contains("inside = \"g-in\"\noutside = \"g-out\"") && n.contains("[nat64]"),
            "{n}"
        );
        let t = Nat64Report {
            xlat: Xlat::Siit,
            ..Nat64Report::default()
        }
        .to_string();
        assert!(
            t.starts_with("quicknat lab siit") && t.contains("stateless SIIT"),
            "{t}"
        );
    }
}
