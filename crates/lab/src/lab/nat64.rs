//! `quicknat-lab lab --topology nat64`: an IPv6-only client reaches an IPv4 server through the
//! gateway, by quicknat `[nat64]` (each backend) or TAYGA, alternating per round.
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

use std::process::Child;

use anyhow::{Context, Result};

use super::{
    alternate, chrono_like_date, iperf, med, ratio, require, stop_child, stop_flag, temp_path,
    udp_small, Configs, Lab, GW_CORE,
};

const SERVER: &str = "198.51.100.2";
/// The server as the IPv6-only client names it (pref64 + 198.51.100.2).
const SERVER6: &str = "2001:db8:64::c633:6402";
const PREF64: &str = "2001:db8:64::/96";
const TUN: &str = "qnlab64";

/// What to run.
#[derive(Clone, Debug)]
pub struct Nat64Options {
    /// Seconds per measurement.
    pub seconds: u64,
    /// Alternating rounds (medians reported).
    pub rounds: usize,
    /// quicknat backends ("af_xdp", "af_packet").
    pub backends: Vec<String>,
    /// Pin TAYGA to the gateway core (else the scheduler places it).
    pub pin_tayga: bool,
    /// The quicknat binary run as the gateway.
    pub quicknat: std::path::PathBuf,
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
    /// super-packets reach the gateway; quicknat on AF_PACKET passes them through, issue
    /// 15 item 6) (Gbit/s).
    pub tcp1_on: f64,
}

/// The report: medians per system.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Nat64Report {
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
}

fn devs(lab: &Lab) -> [(&str, &str); 4] {
    [
        (lab.cli(), "c0"),
        (lab.gw(), "g-in"),
        (lab.gw(), "g-out"),
        (lab.srv(), "s0"),
    ]
}

fn build() -> Result<Lab> {
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
    Tayga(Child),
}

fn forwarding(lab: &Lab, on: bool) -> Result<()> {
    let v = u8::from(on);
    lab.sysctl(lab.gw(), &format!("net.ipv4.ip_forward={v}"))?;
    lab.sysctl(lab.gw(), &format!("net.ipv6.conf.all.forwarding={v}"))
}

/// TAYGA, or quicknat (`bin`) with configuration `quicknat`.
fn start(
    lab: &Lab,
    bin: &std::path::Path,
    quicknat: Option<&std::path::Path>,
    tayga: &std::path::Path,
    pin: bool,
) -> Result<System> {
    if let Some(cfg) = quicknat {
        forwarding(lab, false)?;
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

fn stop(lab: &Lab, s: System, tayga: &std::path::Path) -> Result<()> {
    match s {
        System::Quicknat(c) => eprintln!("lab nat64: quicknat {}", stop_child(c)),
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

fn measure(lab: &Lab, s: u64) -> Result<Nat64Result> {
    let mut r = Nat64Result {
        tcp1_off: iperf(lab, SERVER, SERVER6, 1, s)?,
        ..Nat64Result::default()
    };
    lab.sink_on(lab.srv(), "s0")?;
    let (offered, fwd, _) = udp_small(lab, &format!("[{SERVER6}]:9"), "g-out", None, s, 0.0)?;
    r.udp_offered_pps = offered;
    r.udp_capacity_pps = fwd;
    lab.sink_off(lab.srv())?;
    // Offloads on at the ends only: the gateway's interfaces stay as each system set
    // them (quicknat on AF_XDP takes no super-packets and turns them off).
    let ends = [(lab.cli(), "c0"), (lab.srv(), "s0")];
    lab.offloads(&ends, true);
    let on = iperf(lab, SERVER, SERVER6, 1, s);
    lab.offloads(&ends, false);
    r.tcp1_on = on?;
    Ok(r)
}

fn combine(rs: &[Nat64Result]) -> Nat64Result {
    Nat64Result {
        tcp1_off: med(rs, |r| r.tcp1_off),
        udp_capacity_pps: med(rs, |r| r.udp_capacity_pps),
        udp_offered_pps: med(rs, |r| r.udp_offered_pps),
        tcp1_on: med(rs, |r| r.tcp1_on),
    }
}

/// Runs the NAT64 lab.
pub fn run(opts: &Nat64Options) -> Result<Nat64Report> {
    require(&["ip", "iperf3", "nft", "ethtool", "taskset", "tayga"])?;
    let lab = build()?;
    lab.offloads(&devs(&lab), false);
    let configs = Configs::gateway(
        "nat64",
        &opts.backends,
        &format!("[nat64]\npref64 = \"{PREF64}\"\npool4 = [\"203.0.113.1/32\"]\n"),
    )?;
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
        "nat64",
        opts.rounds,
        cfgs.len(),
        |arm| {
            arm.map_or("TAYGA".to_string(), |i| {
                format!("quicknat nat64 {}", cfgs[i].0)
            })
        },
        |arm| {
            let sys = start(
                &lab,
                &opts.quicknat,
                arm.map(|i| cfgs[i].1.as_path()),
                &tayga,
                opts.pin_tayga,
            )?;
            let r = measure(&lab, opts.seconds);
            stop(&lab, sys, &tayga)?;
            r
        },
    );
    drop(lab);
    let _ = std::fs::remove_file(&tayga);
    let _ = std::fs::remove_dir_all(&tayga_dir);
    let (t, q) = result?;
    Ok(Nat64Report {
        when: chrono_like_date(),
        seconds: opts.seconds,
        rounds: opts.rounds,
        quicknat: cfgs
            .iter()
            .map(|(b, _)| b.clone())
            .zip(q.iter().map(|r| combine(r)))
            .collect(),
        tayga: combine(&t),
        tayga_pinned: opts.pin_tayga,
    })
}

impl std::fmt::Display for Nat64Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "quicknat lab nat64 — {} — median of {} alternating rounds, {} s each",
            self.when, self.rounds, self.seconds
        )?;
        write!(f, "{:<42}", "metric")?;
        for (b, _) in &self.quicknat {
            write!(f, " {:>18}", format!("quicknat {b}"))?;
        }
        writeln!(f, " {:>10} {:>22}", "TAYGA", "best quicknat / TAYGA")?;
        let mut row =
            |name: &str, get: &dyn Fn(&Nat64Result) -> f64, compare: bool| -> std::fmt::Result {
                write!(f, "{name:<42}")?;
                let mut best = 0.0f64;
                for (_, q) in &self.quicknat {
                    best = best.max(get(q));
                    write!(f, " {:>18.2}", get(q))?;
                }
                let t = get(&self.tayga);
                let r = if compare {
                    ratio(best, t)
                } else {
                    String::new()
                };
                writeln!(f, " {t:>10.2} {r:>22}")
            };
        row("TCP 1 stream, offloads off (Gbit/s)", &|r| r.tcp1_off, true)?;
        row(
            "TCP 1 stream, offloads on at the ends (Gbit/s)",
            &|r| r.tcp1_on,
            true,
        )?;
        row(
            "IPv6 UDP 18 B payload capacity (Mpps)",
            &|r| r.udp_capacity_pps / 1e6,
            true,
        )?;
        row(
            "  offered by the generator (Mpps)",
            &|r| r.udp_offered_pps / 1e6,
            false,
        )?;
        writeln!(
            f,
            "quicknat: stateful NAT64 (RFC 6146, NAPT, per-flow sessions, pool4 203.0.113.1/32), 1 worker on core {GW_CORE}, kernel forwarding off"
        )?;
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
