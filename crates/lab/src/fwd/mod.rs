//! `quicknat-lab fwd`: the lab's minimal forwarders, the floors of each I/O model (no NAT,
//! no session table): what quicknat's data path would cost if translating were free.
//!
//! - `af_xdp` / `af_packet`: the product's own ports (`io::afxdp::AfXdp`,
//!   `io::afpacket::PacketPort`) opened as `quicknat run` opens them for one worker, and
//!   the worker's loop (crates/runtime/src/live/worker.rs) without the engine: receive a
//!   batch on each port, forward each frame to the other port (a copy, as quicknat sends
//!   a frame across), flush both, wait on both when idle (50 ms). On AF_PACKET the
//!   kernel's copy of transit IPv4 is dropped at ingress by the same nftables table
//!   quicknat installs (`io::host::IngressFilter`), and GSO frames pass through with their
//!   virtio-net header as quicknat's NAT44 passes them.
//! - `xdp`: `bpf/xdp_fwd.c`, XDP_REDIRECT through a devmap ([`xdp`]).
//! - `xdp-pass`: an XDP_PASS program for the veth peers that receive redirected frames.
//!
//! Every forwarder does what a router does to a frame and no more: TTL decremented (the
//! checksum updated incrementally, as the kernel's `ip_decrease_ttl`), the Ethernet header
//! rewritten to the next hop. Runs until SIGINT/SIGTERM; prints its counters as one JSON
//! line on exit. Test gear: never part of the product.

pub mod xdp;

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use io::port::{Port, Rx};

/// `quicknat-lab fwd` arguments.
#[derive(Debug, clap::Args)]
pub struct FwdArgs {
    /// af_xdp, af_packet, xdp (XDP_REDIRECT through a devmap) or xdp-pass (XDP_PASS on
    /// --inside only, for a veth peer that receives redirected frames).
    #[arg(long)]
    pub backend: String,
    /// The first interface (the only one for xdp-pass).
    #[arg(long)]
    pub inside: String,
    /// The second interface.
    #[arg(long)]
    pub outside: Option<String>,
    /// MAC of the next hop on --inside (frames leaving by it are sent there).
    #[arg(long)]
    pub inside_peer: Option<String>,
    /// MAC of the next hop on --outside.
    #[arg(long)]
    pub outside_peer: Option<String>,
}

/// The Ethernet header of frames leaving by each side: (next hop, own MAC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hop {
    /// Destination: the next hop's MAC.
    pub dst: [u8; 6],
    /// Source: the egress interface's MAC.
    pub src: [u8; 6],
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Result<[u8; 6]> {
    let mut m = [0u8; 6];
    let parts: Vec<&str> = s.trim().split(':').collect();
    if parts.len() != 6 {
        bail!("{s:?}: not a MAC address (aa:bb:cc:dd:ee:ff)");
    }
    for (b, p) in m.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16).with_context(|| format!("{s:?}: not a MAC address"))?;
    }
    Ok(m)
}

/// A `/sys/class/net/IF/WHAT` attribute of `ifname` in this namespace.
fn sys_attr(ifname: &str, what: &str) -> Result<String> {
    Ok(
        std::fs::read_to_string(format!("/sys/class/net/{ifname}/{what}"))
            .with_context(|| format!("reading {what} of {ifname}"))?
            .trim()
            .to_string(),
    )
}

/// The MAC of `ifname` in this namespace.
pub fn own_mac(ifname: &str) -> Result<[u8; 6]> {
    parse_mac(&sys_attr(ifname, "address")?)
}

/// The ifindex of `ifname` in this namespace.
pub fn ifindex(ifname: &str) -> Result<u32> {
    sys_attr(ifname, "ifindex")?
        .parse()
        .with_context(|| format!("ifindex of {ifname}"))
}

/// The first IPv4 address of `ifname` (`ip -4 -o addr show dev IF`), if any.
pub fn ipv4_of(ifname: &str) -> Option<Ipv4Addr> {
    let out = std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show", "dev", ifname])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let word = text
        .split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)?;
    word.split('/').next()?.parse().ok()
}

/// What a router does to an IPv4 frame before sending it on to `hop`: TTL decremented with
/// the header checksum updated incrementally (`ip_decrease_ttl`), Ethernet addresses
/// rewritten. `false` (the frame untouched, not forwarded) for anything else: not IPv4,
/// too short, TTL <= 1.
pub fn route_frame(frame: &mut [u8], hop: &Hop) -> bool {
    if frame.len() < 34 || frame[12..14] != [0x08, 0x00] || frame[14] >> 4 != 4 {
        return false;
    }
    if frame[22] <= 1 {
        return false;
    }
    frame[22] -= 1;
    let mut check = u32::from(u16::from_be_bytes([frame[24], frame[25]])) + 0x0100;
    check = (check & 0xffff) + (check >> 16);
    frame[24..26].copy_from_slice(&(check as u16).to_be_bytes());
    frame[0..6].copy_from_slice(&hop.dst);
    frame[6..12].copy_from_slice(&hop.src);
    true
}

/// What a port forwarder did.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct FwdCounts {
    /// Frames received on both ports.
    pub received: u64,
    /// Frames handed to the other port.
    pub forwarded: u64,
    /// Frames not forwarded (not IPv4, TTL <= 1).
    pub skipped: u64,
}

/// The worker loop without the engine: frames from port `i` leave by port `1 - i` towards
/// `hops[1 - i]`. Runs until `stop`.
pub fn forward<P: Port>(mut ports: [P; 2], hops: [Hop; 2], stop: &AtomicBool) -> FwdCounts {
    let mut c = FwdCounts::default();
    while !stop.load(Ordering::Relaxed) {
        let mut seen = 0;
        for side in 0..2 {
            let [a, b] = &mut ports;
            let (rx, tx) = if side == 0 { (a, b) } else { (b, a) };
            let hop = &hops[1 - side];
            let n = rx.recv(|frame, meta| {
                if route_frame(frame, hop) {
                    let _ = tx.send(frame, meta.vnet.as_ref());
                    c.forwarded += 1;
                } else {
                    c.skipped += 1;
                }
                Rx::Done
            });
            match n {
                Ok(n) => seen += n,
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        c.received += seen as u64;
        for p in &mut ports {
            let _ = p.flush();
        }
        if seen == 0 {
            let _ = P::wait(&[&ports[0], &ports[1]], Duration::from_millis(50));
        }
    }
    c
}

/// `quicknat-lab fwd`.
pub fn run(a: &FwdArgs, stop: &AtomicBool) -> Result<()> {
    if a.backend == "xdp-pass" {
        let _pass = xdp::attach_pass(&a.inside)?;
        eprintln!("fwd: xdp_pass on {}", a.inside);
        wait_stop(stop);
        return Ok(());
    }
    let need = |v: &Option<String>, what: &str| {
        v.clone()
            .ok_or_else(|| anyhow::anyhow!("--backend {} needs --{what}", a.backend))
    };
    let names = [a.inside.clone(), need(&a.outside, "outside")?];
    let peers = [
        parse_mac(&need(&a.inside_peer, "inside-peer")?)?,
        parse_mac(&need(&a.outside_peer, "outside-peer")?)?,
    ];
    let hops = [
        Hop {
            dst: peers[0],
            src: own_mac(&names[0])?,
        },
        Hop {
            dst: peers[1],
            src: own_mac(&names[1])?,
        },
    ];
    let counts = match a.backend.as_str() {
        "af_xdp" => {
            let open = |n: &String| {
                let mut cfg = io::afxdp::AfXdpConfig::new(n.clone());
                cfg.local_v4 = ipv4_of(n).into_iter().collect();
                cfg.steer = io::afxdp::Steer {
                    ipv4: true,
                    ipv6: false,
                };
                io::afxdp::AfXdp::open(&cfg).with_context(|| format!("AF_XDP on {n}"))
            };
            let ports = [open(&names[0])?, open(&names[1])?];
            eprintln!("fwd: AF_XDP (copy mode) {} <-> {}", names[0], names[1]);
            forward(ports, hops, stop)
        }
        "af_packet" => {
            let local: Vec<Ipv4Addr> = names.iter().filter_map(|n| ipv4_of(n)).collect();
            let _filter = io::host::IngressFilter::install(
                &[(names[0].as_str(), 4), (names[1].as_str(), 4)],
                &local,
                &[],
            )
            .context("installing the kernel-bypass ingress table")?;
            let open = |n: &String| {
                let mut cfg = io::afpacket::AfPacketConfig::new(n.clone());
                cfg.ignore_outgoing = true;
                cfg.vnet_hdr = true;
                io::afpacket::PacketPort::open(&cfg).with_context(|| format!("AF_PACKET on {n}"))
            };
            let ports = [open(&names[0])?, open(&names[1])?];
            eprintln!("fwd: AF_PACKET TPACKET_V3 {} <-> {}", names[0], names[1]);
            forward(ports, hops, stop)
        }
        "xdp" => {
            let _fwd = xdp::attach_forwarder(&names, &hops)?;
            eprintln!("fwd: XDP_REDIRECT {} <-> {}", names[0], names[1]);
            wait_stop(stop);
            FwdCounts::default()
        }
        "tc" => {
            let _fwd = xdp::attach_tc_forwarder(&names, &hops)?;
            eprintln!("fwd: tc ingress bpf_redirect {} <-> {}", names[0], names[1]);
            wait_stop(stop);
            FwdCounts::default()
        }
        b => bail!("--backend {b:?}: expected af_xdp, af_packet, xdp, tc or xdp-pass"),
    };
    println!("{}", serde_json::to_string(&counts)?);
    Ok(())
}

/// Sleeps until `stop` (the XDP forwarders run in the kernel; this process only holds
/// their links).
fn wait_stop(stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 20-byte IPv4 header's checksum computed from scratch.
    fn header_checksum(h: &[u8]) -> u16 {
        let mut sum = 0u32;
        for (i, w) in h.chunks(2).enumerate() {
            if i != 5 {
                sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
            }
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    fn frame(ttl: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip = &mut f[14..34];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&28u16.to_be_bytes());
        ip[8] = ttl;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[10, 0, 0, 2]);
        ip[16..20].copy_from_slice(&[198, 51, 100, 2]);
        let c = header_checksum(ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f
    }

    const HOP: Hop = Hop {
        dst: [2, 0, 0, 0, 0, 1],
        src: [2, 0, 0, 0, 0, 2],
    };

    #[test]
    fn routing_decrements_ttl_with_a_valid_checksum_and_rewrites_macs() {
        for ttl in [2u8, 64, 128, 255] {
            let mut f = frame(ttl);
            assert!(route_frame(&mut f, &HOP));
            assert_eq!(f[22], ttl - 1);
            let got = u16::from_be_bytes([f[24], f[25]]);
            let want = header_checksum(&f[14..34]);
            // 0x0000 and 0xffff are the same one's complement value.
            assert!(
                got == want || (got ^ want) == 0xffff,
                "ttl {ttl}: {got:#x} vs {want:#x}"
            );
            assert_eq!(&f[0..6], &HOP.dst);
            assert_eq!(&f[6..12], &HOP.src);
        }
    }

    #[test]
    fn anything_else_is_left_alone() {
        let mut f = frame(1);
        let before = f.clone();
        assert!(!route_frame(&mut f, &HOP), "TTL 1 is the kernel's");
        assert_eq!(f, before);
        let mut arp = frame(64);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(!route_frame(&mut arp, &HOP));
        assert!(!route_frame(&mut [0u8; 20], &HOP));
    }

    #[test]
    fn macs_parse() {
        assert_eq!(
            parse_mac("02:00:0a:ff:00:01").unwrap(),
            [2, 0, 10, 255, 0, 1]
        );
        assert!(parse_mac("02:00").is_err());
        assert!(parse_mac("zz:00:00:00:00:00").is_err());
    }
}
