//! Start-up checks: what the host must look like for the gateway to
//! work as configured, told before it starts, each as a clear warning with its fix.
//!
//! Every check is a pure decision on facts passed in ([`Facts`], read by [`gather`] from
//! `/proc/sys`, rtnetlink and `ethtool -k`, or made up by a test), so each is unit-tested
//! on fixtures; [`run`] reads the facts and decides. None of them refuses: each is a
//! setting some operator has a reason for (the lab runs the kernel's forwarding next to
//! quicknat on purpose), so they warn, loudly, and the gateway starts.
//!
//! - **Kernel forwarding** on for a family quicknat translates: the forward guard
//!   (`io::host::ForwardGuard`) keeps the kernel from routing the gateway's interfaces'
//!   traffic while it runs and after a crash, but once it stops cleanly the kernel routes
//!   that traffic again, untranslated. quicknat never needs the kernel to forward: packets
//!   it hands to the kernel are sent from the host itself (raw sockets).
//! - **Pool addresses on an interface**: the kernel answers ARP for them and takes their
//!   traffic as its own (the upstream router must route the pool to the gateway instead).
//! - **Offloads on with AF_XDP** (`offloads_off = false`): GRO merges frames into
//!   super-packets an XDP socket cannot take, TSO hands it unsegmented ones.
//! - **AF_XDP asked for but not built** (no clang at build time): it falls back to
//!   AF_PACKET; the fix is to install clang and rebuild.
//! - **No TUN driver with `[routing]`**: the announcement device cannot be
//!   created, so the gateway cannot start; the fix is `modprobe tun` (or passing
//!   /dev/net/tun into the container).

use std::net::Ipv4Addr;

use engine::any::ModeConfig;
use engine::mode::Family;

use crate::live::{Backend, GatewayConfig};

/// One thing found wrong, for the log (at warning level).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// Which check (`forwarding`, `pool_address`, `offloads`, `af_xdp`).
    pub check: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "preflight: {}", self.message)
    }
}

/// What the checks look at.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// `net.ipv4.ip_forward`.
    pub ipv4_forward: bool,
    /// `net.ipv6.conf.all.forwarding`.
    pub ipv6_forward: bool,
    /// The host's IPv4 addresses with the interface holding each.
    pub ipv4_addrs: Vec<(String, Ipv4Addr)>,
    /// Per gateway interface, the offloads `ethtool -k` reports on (`generic-receive-offload`, ...).
    pub offloads_on: Vec<(String, Vec<String>)>,
    /// Whether this build carries the AF_XDP program.
    pub af_xdp_built: bool,
    /// Why /dev/net/tun cannot be used, if it cannot.
    pub tun_missing: Option<String>,
}

/// The IPv4 addresses a mode hands out as its public ones: NAT44's pools, static and
/// forwarded addresses, NAT64's pool4.
pub fn public_pool(mode: &ModeConfig) -> Vec<(Ipv4Addr, u8)> {
    match mode {
        ModeConfig::Nat44(c) => c
            .rules
            .iter()
            .flat_map(|r| r.pool.iter().map(|p| (p.addr(), p.len())))
            .chain(c.static_nat.iter().map(|s| (s.public, 32)))
            .chain(c.port_forwards.iter().map(|f| (*f.public.ip(), 32)))
            // Deterministic NAT: its public prefix.
            .chain(
                c.deterministic
                    .iter()
                    .map(|d| (d.outside.addr(), d.outside.len())),
            )
            .collect(),
        ModeConfig::Nat64(c) => c.pool4.iter().map(|p| (p.addr(), p.len())).collect(),
        _ => Vec::new(),
    }
}

fn in_prefix(a: Ipv4Addr, (net, len): (Ipv4Addr, u8)) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    };
    u32::from(a) & mask == u32::from(net) & mask
}

/// Kernel forwarding on for a family the mode translates.
pub fn check_forwarding(families: [Family; 2], facts: &Facts) -> Vec<Finding> {
    let mut out = Vec::new();
    for (fam, on, key) in [
        (Family::V4, facts.ipv4_forward, "net.ipv4.ip_forward"),
        (
            Family::V6,
            facts.ipv6_forward,
            "net.ipv6.conf.all.forwarding",
        ),
    ] {
        if on && families.contains(&fam) {
            out.push(Finding {
                check: "forwarding",
                message: format!(
                    "kernel forwarding is on ({key}=1): quicknat's forward guard keeps the kernel from routing its interfaces' traffic untranslated while it runs and after a crash, but after a clean stop the kernel routes it again, untranslated; quicknat needs no forwarding: sysctl -w {key}=0"
                ),
            });
        }
    }
    out
}

/// Public pool addresses configured on one of the host's interfaces.
pub fn check_pool_addresses(pool: &[(Ipv4Addr, u8)], facts: &Facts) -> Vec<Finding> {
    facts
        .ipv4_addrs
        .iter()
        .filter(|(_, a)| pool.iter().any(|p| in_prefix(*a, *p)))
        .map(|(ifname, a)| Finding {
            check: "pool_address",
            message: format!(
                "pool address {a} is configured on interface {ifname}: the kernel answers ARP for it and takes its traffic as its own; remove it (ip addr del {a}/32 dev {ifname}) and have the upstream router route the pool to this gateway"
            ),
        })
        .collect()
}

/// Offloads on with AF_XDP when quicknat is told not to turn them off.
pub fn check_offloads(gw: &GatewayConfig, facts: &Facts) -> Vec<Finding> {
    if gw.backend != Backend::AfXdp || gw.offloads_off {
        return Vec::new();
    }
    facts
        .offloads_on
        .iter()
        .filter(|(_, on)| !on.is_empty())
        .map(|(ifname, on)| Finding {
            check: "offloads",
            message: format!(
                "{} on on {ifname} with AF_XDP and offloads_off = false: XDP sockets cannot take merged super-packets; ethtool -K {ifname} gro off tso off gso off lro off, or set offloads_off = true",
                on.join(", ")
            ),
        })
        .collect()
}

/// AF_XDP asked for in a build without the XDP program.
pub fn check_af_xdp(gw: &GatewayConfig, facts: &Facts) -> Vec<Finding> {
    if gw.backend == Backend::AfXdp && !facts.af_xdp_built {
        vec![Finding {
            check: "af_xdp",
            message: "backend = \"af_xdp\" but this quicknat was built without clang (no XDP program): it falls back to AF_PACKET; install clang (apt-get install clang) and rebuild (cargo build --release -p quicknat)".into(),
        }]
    } else {
        Vec::new()
    }
}

/// `[routing]` announces prefixes but the TUN driver is missing.
pub fn check_tun(gw: &GatewayConfig, facts: &Facts) -> Vec<Finding> {
    match &facts.tun_missing {
        Some(why) if gw.routing.enabled() => vec![Finding {
            check: "tun",
            message: format!(
                "[routing] announces prefixes on a TUN device ({}), but {why}: the gateway cannot start",
                gw.routing.device
            ),
        }],
        _ => Vec::new(),
    }
}

/// Every check's findings for `mode` on `gw`, given `facts`.
pub fn decide(mode: &ModeConfig, gw: &GatewayConfig, facts: &Facts) -> Vec<Finding> {
    let mut out = check_forwarding(mode.families(), facts);
    out.extend(check_pool_addresses(&public_pool(mode), facts));
    out.extend(check_offloads(gw, facts));
    out.extend(check_af_xdp(gw, facts));
    out.extend(check_tun(gw, facts));
    out
}

/// The offloads `ethtool -k` output says are on, of those that matter to AF_XDP.
pub fn parse_ethtool_k(text: &str) -> Vec<String> {
    const WATCHED: [&str; 4] = [
        "generic-receive-offload",
        "large-receive-offload",
        "tcp-segmentation-offload",
        "generic-segmentation-offload",
    ];
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            let k = k.trim();
            (WATCHED.contains(&k) && v.trim_start().starts_with("on")).then(|| k.to_owned())
        })
        .collect()
}

/// Whether the sysctl `key` (`net.ipv4.ip_forward`) reads 1.
pub(crate) fn sysctl_on(key: &str) -> bool {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    std::fs::read_to_string(path).is_ok_and(|s| s.trim() == "1")
}

/// Reads the facts for `gw` from this host (what cannot be read is taken as fine).
pub fn gather(gw: &GatewayConfig) -> Facts {
    let names: std::collections::HashMap<u32, String> = std::fs::read_dir("/sys/class/net")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let idx = std::fs::read_to_string(e.path().join("ifindex")).ok()?;
            Some((idx.trim().parse().ok()?, name))
        })
        .collect();
    let ipv4_addrs = io::netlink::Netlink::open()
        .and_then(|mut nl| nl.dump_ipv4_addrs())
        .unwrap_or_default()
        .into_iter()
        .map(|(idx, a, _)| {
            (
                names
                    .get(&idx)
                    .cloned()
                    .unwrap_or_else(|| format!("#{idx}")),
                a,
            )
        })
        .collect();
    let offloads_on = if gw.backend == Backend::AfXdp && !gw.offloads_off {
        [&gw.inside, &gw.outside]
            .into_iter()
            .map(|ifname| {
                let out = std::process::Command::new(io::host::tool("ethtool"))
                    .args(["-k", ifname])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default();
                (ifname.clone(), parse_ethtool_k(&out))
            })
            .collect()
    } else {
        Vec::new()
    };
    Facts {
        ipv4_forward: sysctl_on("net.ipv4.ip_forward"),
        ipv6_forward: sysctl_on("net.ipv6.conf.all.forwarding"),
        ipv4_addrs,
        offloads_on,
        af_xdp_built: af_xdp_built(),
        tun_missing: if gw.routing.enabled() {
            io::announce::tun_available().err().map(|e| e.to_string())
        } else {
            None
        },
    }
}

/// Whether this build carries the AF_XDP program (clang was found at build time).
pub fn af_xdp_built() -> bool {
    io::afxdp::built_with_bpf()
}

/// Reads this host's facts and decides.
pub fn run(mode: &ModeConfig, gw: &GatewayConfig) -> Vec<Finding> {
    decide(mode, gw, &gather(gw))
}

#[cfg(test)]
mod tests {
    use super::*;
    fn gw(backend: Backend, offloads_off: bool) -> GatewayConfig {
        GatewayConfig {
            backend,
            offloads_off,
            ..GatewayConfig::new("in0".into(), "out0".into())
        }
    }

    #[test]
    fn forwarding_matters_only_for_the_families_translated() {
        let facts = Facts {
            ipv4_forward: true,
            ..Facts::default()
        };
        let f = check_forwarding([Family::V4, Family::V4], &facts);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].message.contains("sysctl -w net.ipv4.ip_forward=0"),
            "{}",
            f[0]
        );
        // ILA translates IPv6 only: IPv4 forwarding is not its business.
        assert!(check_forwarding([Family::V6, Family::V6], &facts).is_empty());
        let facts = Facts {
            ipv6_forward: true,
            ..Facts::default()
        };
        let f = check_forwarding([Family::V6, Family::V4], &facts);
        assert_eq!(f.len(), 1);
        assert!(f[0].message.contains("net.ipv6.conf.all.forwarding"));
        assert!(check_forwarding([Family::V4, Family::V4], &Facts::default()).is_empty());
    }

    #[test]
    fn a_pool_address_on_an_interface_is_named_with_its_interface() {
        let facts = Facts {
            ipv4_addrs: vec![
                ("eth0".into(), Ipv4Addr::new(198, 51, 100, 1)),
                ("eth0".into(), Ipv4Addr::new(203, 0, 113, 5)),
            ],
            ..Facts::default()
        };
        let pool = [(Ipv4Addr::new(203, 0, 113, 0), 28)];
        let f = check_pool_addresses(&pool, &facts);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].message
                .contains("pool address 203.0.113.5 is configured on interface eth0"),
            "{}",
            f[0]
        );
        assert!(f[0].message.contains("ARP"));
        let elsewhere = [(Ipv4Addr::new(203, 0, 113, 16), 28)];
        assert!(check_pool_addresses(&elsewhere, &facts).is_empty());
        let one = [(Ipv4Addr::new(198, 51, 100, 1), 32)];
        assert_eq!(check_pool_addresses(&one, &facts).len(), 1);
    }

    #[test]
    fn offloads_matter_on_af_xdp_when_quicknat_leaves_them_on() {
        let text = "Features for veth0:\nrx-checksumming: on\ntcp-segmentation-offload: on\n\ttx-tcp-segmentation: on\ngeneric-segmentation-offload: off\ngeneric-receive-offload: on\nlarge-receive-offload: off [fixed]\n";
        let on = parse_ethtool_k(text);
        assert_eq!(
            on,
            vec!["tcp-segmentation-offload", "generic-receive-offload"]
        );
        let facts = Facts {
            offloads_on: vec![("in0".into(), on), ("out0".into(), Vec::new())],
            ..Facts::default()
        };
        let f = check_offloads(&gw(Backend::AfXdp, false), &facts);
        assert_eq!(f.len(), 1);
        assert!(f[0].message.contains("on in0 with AF_XDP"), "{}", f[0]);
        assert!(check_offloads(&gw(Backend::AfXdp, true), &facts).is_empty());
        assert!(check_offloads(&gw(Backend::AfPacket, false), &facts).is_empty());
    }

    #[test]
    fn af_xdp_without_clang_names_the_fix() {
        let f = check_af_xdp(&gw(Backend::AfXdp, true), &Facts::default());
        assert_eq!(f.len(), 1);
        assert!(f[0].message.contains("install clang"), "{}", f[0]);
        let built = Facts {
            af_xdp_built: true,
            ..Facts::default()
        };
        assert!(check_af_xdp(&gw(Backend::AfXdp, true), &built).is_empty());
        assert!(check_af_xdp(&gw(Backend::AfPacket, true), &Facts::default()).is_empty());
    }

    #[test]
    fn nat44_publics_include_statics_and_forwards() {
        let mut c = engine::nat44::Nat44Config::default();
        c.static_nat.push(engine::nat44::StaticNat {
            inside: Ipv4Addr::new(10, 0, 0, 9),
            public: Ipv4Addr::new(203, 0, 113, 99),
        });
        let p = public_pool(&ModeConfig::Nat44(c));
        assert!(p.contains(&(Ipv4Addr::new(203, 0, 113, 99), 32)), "{p:?}");
    }

    #[test]
    fn a_missing_tun_driver_matters_only_with_routing() {
        let facts = Facts {
            tun_missing: Some(
                "/dev/net/tun: No such file or directory (load the tun module: modprobe tun)"
                    .into(),
            ),
            ..Facts::default()
        };
        let mut g = gw(Backend::AfPacket, true);
        assert!(
            check_tun(&g, &facts).is_empty(),
            "no [routing]: no TUN needed"
        );
        g.routing.announce.push(crate::routing::Prefix {
            addr: "0.0.0.0".parse().unwrap(),
            len: 0,
        });
        let f = check_tun(&g, &facts);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].message.contains("qn-announce") && f[0].message.contains("modprobe tun"),
            "{}",
            f[0]
        );
        assert!(
            check_tun(&g, &Facts::default()).is_empty(),
            "TUN present: fine"
        );
    }
}
