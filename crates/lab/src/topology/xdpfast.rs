//! The NAT44 and NAT64 labs' `quicknat xdpfast` arm: quicknat on AF_XDP with
//! `[gateway] xdp_fast_path = "on"`, so established TCP/UDP flows are rewritten (NAT64:
//! translated, IPv6 <-> IPv4) and redirected by the XDP program (devmap) and never reach
//! the AF_XDP socket. The labs use the same helpers: [`config_for`] with the topology's
//! translation tables, [`start_arm`], [`warm_up`] and [`snap`].
//!
//! Set up like the XDP forwarder floor ([`super::floor`], `XdpFwd`): the veth peers (`c0`,
//! `s0`) get an `XDP_PASS` program, without which a veth drops frames redirected into it;
//! the gateway kernel does not forward. Measured by the same cells as every arm; its CPU
//! is quicknat's threads plus every core's softirq, which is where the XDP program runs
//! (on veth, on the *sending* core).
//!
//! The fast path installs a session from the reaper's walk once it is established (UDP:
//! a reply seen), so the UDP cells send on fixed source ports ([`SRC_PORT`]) and
//! [`warm_up`] first establishes those flows: the server answers them ([`crate::gen::udp_echo`])
//! until the fast path has installed them all. Each cell then reads the fast path's and
//! the AF_XDP sockets' counters (`quicknat stats --json` on this arm's own control socket)
//! and reports the share of the gateway's packets that went through XDP.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::floor::{self, Running};
use super::{exe, Lab, GW_CORE};

/// The arm's backend name in `--backends` (its report name is "quicknat xdpfast").
pub const BACKEND: &str = "xdpfast";
/// The NAT44 lab's arm with the same fast path at the tc ingress hook: AF_PACKET with
/// `xdp_fast_path = "on"` (io::tcfast). Measured like `xdpfast`; its floor is `tc fwd`.
pub const TC_BACKEND: &str = "tcfast";

/// Whether `backend` is one of the fast-path arms.
pub(crate) fn is_fast(backend: &str) -> bool {
    backend == BACKEND || backend == TC_BACKEND
}
/// The UDP flows' first source port (64 flows: 40000..40063).
pub(crate) const SRC_PORT: u16 = 40_000;
/// The flows the UDP cells send on (as `floor::udp_cell`).
const FLOWS: u16 = 64;
/// This arm's control socket (its own, so it never meets another gateway's).
const SOCKET: &str = "/run/quicknat-lab-xdpfast.sock";

/// The gateway configuration of either fast-path arm (AF_XDP for `xdpfast`, AF_PACKET for
/// `tcfast`): the fast path on (a start-up error if it cannot be had, so the arm never
/// silently measures the plain backend), then `mode`.
pub(crate) fn config_for(arm: &str, mode: &str) -> String {
    let backend = if arm == TC_BACKEND {
        "af_packet"
    } else {
        "af_xdp"
    };
    format!(
        "[gateway]\ninside = \"g-in\"\noutside = \"g-out\"\nbackend = \"{backend}\"\nworkers = 1\n\
         stats_interval = 3600\ncontrol_socket = \"{SOCKET}\"\nxdp_fast_path = \"on\"\n\n{mode}"
    )
}

/// The fast path's and the AF_XDP sockets' counters at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct FastSnap {
    /// Packets the XDP program forwarded.
    pub packets: u64,
    /// Sessions it installed so far.
    pub installs: u64,
    /// Frames the AF_XDP sockets received (both interfaces): the slow path.
    pub rx: u64,
}

impl FastSnap {
    /// The share of the packets between `self` and `later` that the XDP program forwarded
    /// (0 when nothing passed).
    pub(crate) fn share_until(&self, later: &FastSnap) -> f64 {
        let fast = later.packets.saturating_sub(self.packets) as f64;
        let slow = later.rx.saturating_sub(self.rx) as f64;
        if fast + slow > 0.0 {
            fast / (fast + slow)
        } else {
            0.0
        }
    }
}

impl std::ops::Add for FastSnap {
    type Output = FastSnap;

    fn add(self, o: FastSnap) -> FastSnap {
        FastSnap {
            packets: self.packets + o.packets,
            installs: self.installs + o.installs,
            rx: self.rx + o.rx,
        }
    }
}

/// Parses `quicknat stats --json` output (its last line holds the `stats` object).
fn parse_stats(out: &str) -> Option<FastSnap> {
    let v: serde_json::Value = serde_json::from_str(out.lines().last()?).ok()?;
    let st = &v["stats"];
    let f = &st["xdp_fast_path"];
    let io = &st["total"]["io"];
    Some(FastSnap {
        packets: f["packets"].as_u64()?,
        installs: f["installs"].as_u64()?,
        rx: io["rx_inside"].as_u64()? + io["rx_outside"].as_u64()?,
    })
}

/// The counters now, from the running gateway.
pub(crate) fn snap(quicknat: &Path) -> Result<FastSnap> {
    snap_at(quicknat, Path::new(SOCKET))
}

/// The counters now, from the gateway whose control socket is `socket`.
pub(crate) fn snap_at(quicknat: &Path, socket: &Path) -> Result<FastSnap> {
    let out = super::run(std::process::Command::new(quicknat).args([
        "stats".as_ref(),
        "--json".as_ref(),
        "--socket".as_ref(),
        socket.as_os_str(),
    ]))?;
    parse_stats(&out).with_context(|| {
        format!(
            "quicknat stats: no xdp_fast_path counters in {}",
            out.trim()
        )
    })
}

/// Starts the arm: `XDP_PASS` on the veth peers when `xdp_peers` (XDP_REDIRECT into a veth
/// needs it; not at the tc hook, whose redirected skbs any veth takes), then quicknat
/// pinned to the gateway core; returns once its control socket answers with the fast path
/// on.
pub(crate) fn start_arm(
    lab: &Lab,
    quicknat: &Path,
    cfg: &Path,
    xdp_peers: bool,
) -> Result<Running> {
    lab.sysctl(lab.gw(), "net.ipv4.ip_forward=0")?;
    let exe = exe()?;
    let mut procs = Vec::new();
    let peers = [(lab.cli(), "c0"), (lab.srv(), "s0")];
    for (ns, dev) in peers.into_iter().filter(|_| xdp_peers) {
        procs.push(lab.spawn(ns, &[&exe, "fwd", "--backend", "xdp-pass", "--inside", dev])?);
        floor::await_xdp(lab, ns, dev, &mut procs)?;
    }
    let started = lab.start_quicknat(quicknat, lab.gw(), GW_CORE, cfg);
    let qn = match started {
        Ok(c) => c,
        Err(e) => {
            floor::stop(lab, Running::with(0, procs))?;
            return Err(e);
        }
    };
    let pid = qn.id();
    procs.push(qn);
    let running = Running::with(pid, procs);
    let t = Instant::now();
    while snap(quicknat).is_err() {
        if t.elapsed() > Duration::from_secs(5) {
            let e = snap(quicknat).err();
            floor::stop(lab, running)?;
            bail!("quicknat xdpfast: the fast path did not answer within 5 s: {e:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(running)
}

/// Establishes the UDP cells' flows and waits until the fast path installed all of them:
/// the server answers each datagram (`quicknat-lab echo` on `listen`, the server's own
/// address and port) while the client sends to `dst` (the server as the client names it:
/// the same address under NAT44, pref64 + it under NAT64) on the cells' source ports;
/// returns the number of installs meanwhile. `per_flow`: the installs one flow makes (a
/// session: 1; a stateless translator's flow: 2, one per direction).
pub(crate) fn warm_up(
    lab: &Lab,
    quicknat: &Path,
    dst: &str,
    listen: &str,
    per_flow: u64,
) -> Result<u64> {
    let want = u64::from(FLOWS) * per_flow;
    let exe = exe()?;
    let before = snap(quicknat)?;
    let mut echo = lab.spawn(
        lab.srv(),
        &[&exe, "echo", "--listen", listen, "--seconds", "30"],
    )?;
    let flows = FLOWS.to_string();
    let port = SRC_PORT.to_string();
    let t = Instant::now();
    let result = loop {
        // A short paced burst: every flow gets a few datagrams and their answers.
        let sent = lab.ns(
            lab.cli(),
            &[
                "taskset",
                "-c",
                "0",
                &exe,
                "gen",
                "--dst",
                dst,
                "--flows",
                &flows,
                "--src-port",
                &port,
                "--payload",
                "18",
                "--pps",
                "2000",
                "--seconds",
                "0.3",
            ],
        );
        if let Err(e) = sent {
            break Err(e);
        }
        // The reaper walks every 200 ms: poll a little past one walk.
        let walk = Instant::now();
        let mut installed = 0;
        while walk.elapsed() < Duration::from_millis(600) {
            installed = snap(quicknat)?.installs.saturating_sub(before.installs);
            if installed >= want {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if installed >= want {
            break Ok(installed);
        }
        if t.elapsed() > Duration::from_secs(10) {
            break Err(anyhow::anyhow!(
                "quicknat xdpfast: {installed} of {want} UDP flow installs after 10 s of warm-up"
            ));
        }
    };
    let _ = echo.kill();
    let _ = echo.wait();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_fast_path_and_the_sockets_counters() {
        let out = "{\"v\":1,\"ok\":true,\"end\":\"stats\",\"stats\":{\"total\":{\"engine\":{},\
                   \"io\":{\"rx_inside\":10,\"rx_outside\":5}},\"workers\":[],\
                   \"xdp_fast_path\":{\"packets\":85,\"installs\":64}}}\n";
        let s = parse_stats(out).unwrap();
        assert_eq!(
            s,
            FastSnap {
                packets: 85,
                installs: 64,
                rx: 15
            }
        );
        // Fast path off: `null`, not counters.
        assert_eq!(
            parse_stats("{\"stats\":{\"total\":{\"io\":{\"rx_inside\":1,\"rx_outside\":1}},\"xdp_fast_path\":null}}"),
            None
        );
        let later = FastSnap {
            packets: 85 + 90,
            installs: 64,
            rx: 15 + 10,
        };
        assert!((s.share_until(&later) - 0.9).abs() < 1e-9);
        assert_eq!(s.share_until(&s), 0.0);
    }

    #[test]
    fn the_config_turns_the_fast_path_on_over_af_xdp() {
        let c = config_for(BACKEND, "[nat44]\n");
        assert!(c.contains("backend = \"af_xdp\"\n"), "{c}");
        assert!(c.contains("xdp_fast_path = \"on\"\n"), "{c}");
        assert!(c.contains(SOCKET), "{c}");
        assert!(c.ends_with("[nat44]\n"));
        let t = config_for(TC_BACKEND, "[nat44]\n");
        assert!(t.contains("backend = \"af_packet\"\n"), "{t}");
        assert!(t.contains("xdp_fast_path = \"on\"\n"), "{t}");
    }
}
