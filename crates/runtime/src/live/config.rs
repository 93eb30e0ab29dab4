//! The `[gateway]` settings of a live gateway: which interfaces, which I/O backend, how
//! many workers, and the link facts a capture replay needs too (the gateway's own
//! addresses, link MTUs).

use std::net::IpAddr;
use std::time::Duration;

use engine::any::ModeConfig;
use engine::mode::Family;
use engine::Egress;

/// Which packet I/O backend carries the frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// AF_PACKET with TPACKET_V3 receive rings (works on any interface).
    AfPacket,
    /// AF_XDP in copy mode (falls back to AF_PACKET with a warning where unavailable).
    AfXdp,
}

/// The `[gateway]` settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayConfig {
    /// Interface facing the inside network.
    pub inside: String,
    /// Interface facing the outside.
    pub outside: String,
    /// I/O backend.
    pub backend: Backend,
    /// Worker threads.
    pub workers: usize,
    /// AF_PACKET with several workers: how the workers share the flows.
    pub placement: PlacementSwitch,
    /// Add the ports to the NIC's receive hash of TCP and UDP where it lacks them (and put
    /// the old fields back at exit); `false`: only read and report them.
    pub rx_hash_ports: bool,
    /// Spin instead of sleeping when idle.
    pub busy_poll: bool,
    /// Time between counter log lines.
    pub stats_interval: Duration,
    /// Drop transit IPv4 at the kernel's ingress hook once quicknat has its copy.
    pub kernel_bypass: bool,
    /// Turn receive/segmentation offloads off on both interfaces at start-up.
    pub offloads_off: bool,
    /// The local control socket (ILA mapping updates), if any.
    pub control_socket: Option<std::path::PathBuf>,
    /// The group (name or number) whose members may use the control socket besides
    /// root; `None`: root only.
    pub control_group: Option<String>,
    /// AF_PACKET + NAT44: pass GSO/GRO super-packets and partial checksums through with
    /// virtio-net headers (offloads stay on) instead of turning offloads off.
    pub gso: bool,
    /// Per link (inside, outside): the addresses the gateway sends its ICMP errors from
    /// there, overriding the interface's (and the only ones a capture replay knows).
    pub addresses: [Vec<IpAddr>; 2],
    /// Per link: an MTU below the interface's to hold packets to (and the only MTU a
    /// capture replay knows).
    pub mtu: [Option<u32>; 2],
    /// Where the Prometheus metrics listener serves `GET /metrics`; `None`: off.
    pub metrics: Option<std::net::SocketAddr>,
    /// NAT event logging (`[logging]`: RFC 8158 over IPFIX, RFC 5424 syslog); off by
    /// default.
    pub natlog: crate::natlog::NatLogConfig,
    // -- XDP fast path --
    /// AF_XDP + NAT44 or NAT64: forward established flows in the XDP program
    /// (`live::fastpath`); ILA: its mappings (`live::fastpath_ila`).
    pub xdp_fast_path: FastPathSwitch,
    /// The most flow directions (two per session) the fast path's map holds per interface.
    pub xdp_fast_path_entries: u32,
    /// SIIT and CLAT: a flow direction the fast path forwarded nothing of for this long
    /// is taken out of its map (NAT44 and NAT64 entries follow their sessions' timeouts,
    /// ILA entries their mappings).
    pub xdp_fast_path_idle: Duration,
    /// `[routing]`: the prefixes announced to the routing daemon while healthy; off by
    /// default.
    pub routing: crate::routing::RoutingConfig,
    /// The workers' CPUs, worker `i` on the `i`-th (wrapping); `None`: the first CPUs the
    /// process may use (`live::cpus`).
    pub cpus: Option<Vec<usize>>,
    /// The reaper's CPU; `None`: not pinned.
    pub reaper_cpu: Option<usize>,
}

/// `[gateway] placement`: how AF_PACKET's fanout groups give packets to the workers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PlacementSwitch {
    /// New flows to the workers in turn, each IP version on its own, each flow kept on
    /// its worker (the fanout program); the kernel's hash where the program cannot load.
    #[default]
    Flows,
    /// The kernel's flow hash (`PACKET_FANOUT_HASH`): many flows spread evenly, few by luck.
    Hash,
}

/// `[gateway] xdp_fast_path`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FastPathSwitch {
    /// Off: every packet goes through the engine.
    Off,
    /// On where it can be had, else logged and off (the default): on AF_PACKET wherever
    /// the tc program loads; on AF_XDP where the XDP program runs in native mode and the
    /// interfaces are not veths (a veth drops XDP-redirected frames silently unless its
    /// peer runs NAPI, which the gateway cannot see from its side).
    #[default]
    Auto,
    /// On; a gateway that cannot have it does not start.
    On,
}

/// The fast path's map size when not configured: 65,536 flow directions (32,768
/// sessions), 3 MiB of kernel memory per interface.
pub const XDP_FAST_PATH_ENTRIES: u32 = 65_536;

/// How long an idle SIIT/CLAT flow direction stays in the fast path's map when not
/// configured.
pub const XDP_FAST_PATH_IDLE: Duration = Duration::from_secs(30);

impl GatewayConfig {
    /// The defaults for a gateway between `inside` and `outside`: AF_PACKET, one worker,
    /// counters every 10 s, kernel bypass, GSO pass-through, offloads off otherwise,
    /// the fast path where it can be had.
    pub fn new(inside: String, outside: String) -> Self {
        GatewayConfig {
            inside,
            outside,
            backend: Backend::AfPacket,
            workers: 1,
            placement: PlacementSwitch::Flows,
            rx_hash_ports: true,
            busy_poll: false,
            stats_interval: Duration::from_secs(10),
            kernel_bypass: true,
            offloads_off: true,
            control_socket: None,
            control_group: None,
            gso: true,
            addresses: [Vec::new(), Vec::new()],
            mtu: [None, None],
            metrics: None,
            natlog: crate::natlog::NatLogConfig::default(),
            xdp_fast_path: FastPathSwitch::Auto,
            xdp_fast_path_entries: XDP_FAST_PATH_ENTRIES,
            xdp_fast_path_idle: XDP_FAST_PATH_IDLE,
            routing: crate::routing::RoutingConfig::default(),
            cpus: None,
            reaper_cpu: None,
        }
    }

    /// The links as the engine sees them from the configuration alone (a capture replay):
    /// the configured MTUs and, per family, the first configured address.
    pub fn egress(&self) -> Egress {
        let mut e = Egress::default();
        for (i, l) in e.links.iter_mut().enumerate() {
            l.mtu = self.mtu[i];
            (l.addr4, l.addr6) = first_of_each_family(&self.addresses[i]);
        }
        e
    }
}

/// Lowers the next-hop MTUs of an IPv4 <-> IPv6 `mode` (its `ipv4_mtu` / `ipv6_mtu`
/// options, RFC 7915's "MTU of the next-hop interface"; unset, they are the links') to
/// the MTUs of the links that carry each family, `mtus` (inside, outside; `None`: not
/// known, as in a capture replay without `[gateway]` MTUs, taken as Ethernet's 1500). The
/// live gateway calls it at start-up with its links' MTUs and the capture replay with the
/// configured ones, so both translate with the same MTUs. Returns the MTUs in force (IPv4,
/// IPv6), `None` for NAT44 and ILA.
pub(crate) fn clamp_translator_mtus(
    mode: &mut ModeConfig,
    mtus: [Option<u32>; 2],
) -> Option<(u32, u32)> {
    let fams = mode.families();
    let of = |fam: Family| {
        fams.iter()
            .position(|&f| f == fam)
            .and_then(|side| mtus[side])
            .unwrap_or(UNKNOWN_LINK_MTU)
    };
    let (v4, v6) = (of(Family::V4), of(Family::V6));
    mode.clamp_mtus(v4, v6)
}

/// The MTU a translator assumes for a link whose MTU it is not told (a capture replay
/// without `[gateway] inside_mtu` / `outside_mtu`): Ethernet's.
const UNKNOWN_LINK_MTU: u32 = 1500;

/// The first IPv4 and the first IPv6 address of `addrs`.
pub(crate) fn first_of_each_family(
    addrs: &[IpAddr],
) -> (Option<std::net::Ipv4Addr>, Option<std::net::Ipv6Addr>) {
    let v4 = addrs.iter().find_map(|a| match a {
        IpAddr::V4(a) => Some(*a),
        IpAddr::V6(_) => None,
    });
    let v6 = addrs.iter().find_map(|a| match a {
        IpAddr::V6(a) => Some(*a),
        IpAddr::V4(_) => None,
    });
    (v4, v6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::nat44::Nat44Config;
    use engine::nat64::Nat64Config;

    #[test]
    fn translator_mtus_are_lowered_to_the_link_that_carries_each_family() {
        // NAT64: IPv6 on the inside link, IPv4 on the outside one (options 1500 / 1500).
        let mut c = Nat64Config::default();
        c.options.ipv4_mtu = 1500;
        c.options.ipv6_mtu = 1500;
        let mut m = ModeConfig::Nat64(c.clone());
        assert_eq!(
            clamp_translator_mtus(&mut m, [Some(1400), Some(1300)]),
            Some((1300, 1400))
        );
        // A link without a known MTU counts as 1500.
        let mut m = ModeConfig::Nat64(c.clone());
        assert_eq!(
            clamp_translator_mtus(&mut m, [None, Some(1400)]),
            Some((1400, 1500))
        );
        // Next-hop MTUs not configured are the links' (never above 65535).
        let mut m = ModeConfig::Nat64(Nat64Config::default());
        assert_eq!(
            clamp_translator_mtus(&mut m, [Some(9000), Some(1500)]),
            Some((1500, 9000))
        );
        let mut m = ModeConfig::Nat64(Nat64Config::default());
        assert_eq!(
            clamp_translator_mtus(&mut m, [None, None]),
            Some((1500, 1500))
        );
        // Never below the IPv6 minimum; never raised.
        let mut m = ModeConfig::Nat64(c);
        assert_eq!(
            clamp_translator_mtus(&mut m, [Some(1000), Some(9000)]),
            Some((1500, 1280))
        );
        // NAT44 keeps packet sizes: nothing to lower.
        let mut m = ModeConfig::Nat44(Nat44Config::default());
        assert_eq!(
            clamp_translator_mtus(&mut m, [Some(1400), Some(1300)]),
            None
        );
    }
}
