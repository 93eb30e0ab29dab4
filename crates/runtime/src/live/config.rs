//! The `[gateway]` settings of a live gateway: which interfaces, which I/O backend, how
//! many workers, and the link facts a capture replay needs too (the gateway's own
//! addresses, link MTUs).

use std::net::IpAddr;
use std::time::Duration;

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
    /// AF_PACKET + NAT44: pass GSO/GRO super-packets and partial checksums through with
    /// virtio-net headers (offloads stay on) instead of turning offloads off.
    pub gso: bool,
    /// Per link (inside, outside): the addresses the gateway sends its ICMP errors from
    /// there, overriding the interface's (and the only ones a capture replay knows).
    pub addresses: [Vec<IpAddr>; 2],
    /// Per link: an MTU below the interface's to hold packets to (and the only MTU a
    /// capture replay knows).
    pub mtu: [Option<u32>; 2],
}

impl GatewayConfig {
    /// The defaults for a gateway between `inside` and `outside`: AF_PACKET, one worker,
    /// counters every 10 s, kernel bypass, GSO pass-through, offloads off otherwise.
    pub fn new(inside: String, outside: String) -> Self {
        GatewayConfig {
            inside,
            outside,
            backend: Backend::AfPacket,
            workers: 1,
            busy_poll: false,
            stats_interval: Duration::from_secs(10),
            kernel_bypass: true,
            offloads_off: true,
            control_socket: None,
            gso: true,
            addresses: [Vec::new(), Vec::new()],
            mtu: [None, None],
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
