//! The fast path at the tc ingress hook, for the AF_PACKET backend (`bpf/tc_fast.c`,
//! compiled by build.rs).
//!
//! The same maps and entries as the XDP fast path ([`crate::afxdp::fast_path::FastPath`]):
//! user space installs the established flows' rewrites exactly as it does for XDP. What
//! differs is the hook. At tc an skb is still an skb, so a GSO super-packet is rewritten
//! once and forwarded as it is, and a partial checksum stays partial; and no XDP program
//! is attached, so a veth peer keeps its TSO. On veth this costs about half what the XDP
//! forwarder costs per packet (the lab's `tc fwd` and `XDP fwd` floors).
//!
//! The receive sockets of an interface with this program are bound to the IP version the
//! mode translates there ([`crate::afpacket::AfPacketConfig::ip_version`]), so the kernel
//! hands them a frame after the tc hook, not before it as it hands a tap (`ETH_P_ALL`):
//! the program's decision is the only one. It forwards the offloaded flows' packets, and
//! with [`Bypass::on`] it also keeps the transit frames it leaves to the engine from the
//! kernel (marked `PACKET_OTHERHOST`, which `ip_rcv` drops first thing), in place of the
//! nftables ingress table ([`crate::host::IngressFilter`]), which would drop them before a
//! protocol-bound socket saw them. See the program's header comment.
//!
//! The tc program is attached by a TCX link (Linux >= 6.6; older kernels: a clsact
//! qdisc's filter, the qdisc added only then) that lives as long as the [`TcFastPath`]:
//! dropped, or the process killed, and the kernel detaches it.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use aya::maps::Array;
use aya::programs::{tc, SchedClassifier, TcAttachType};
use aya::{Ebpf, EbpfLoader};

use crate::afxdp::fast_path::FastPath;
use crate::afxdp::loader::{fill_local, CFG_STEER_V4, CFG_STEER_V6};

/// `config[0]` bit: mark transit frames PACKET_OTHERHOST (`QN_CFG_BYPASS`, bpf/common.h).
const CFG_BYPASS: u32 = 128;

/// The compiled program, or empty when clang was missing at build time.
static TC_FAST_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tc_fast.o"));

/// Whether this build carries the tc program (clang was found at build time).
pub fn built_with_bpf() -> bool {
    !TC_FAST_OBJ.is_empty()
}

fn err(what: &str, ifname: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("tc fast path on {ifname}: {what}: {e}"))
}

/// What the program keeps from the kernel on one interface: the kernel bypass.
#[derive(Debug, Clone, Copy)]
pub struct Bypass<'a> {
    /// The IP version the engine translates on this interface (4 or 6): its frames are
    /// the ones the receive sockets are bound to.
    pub ip_version: u8,
    /// Keep that version's transit frames from the kernel (`[gateway] kernel_bypass`).
    pub on: bool,
    /// The host's own IPv4 addresses: their frames are the kernel's, as are broadcast,
    /// multicast, link-local and neighbour discovery.
    pub local_v4: &'a [Ipv4Addr],
    /// The host's own IPv6 addresses.
    pub local_v6: &'a [Ipv6Addr],
}

/// The tc program attached to one interface, with its maps.
pub struct TcFastPath {
    /// Owns the program, the maps and the TCX link: dropped, the program is detached.
    _ebpf: Ebpf,
    fast: Arc<FastPath>,
    ifname: String,
}

impl std::fmt::Debug for TcFastPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcFastPath")
            .field("ifname", &self.ifname)
            .finish_non_exhaustive()
    }
}

impl TcFastPath {
    /// Loads the program with maps of `entries` flow directions and attaches it to
    /// `ifname`'s ingress. The maps start empty and the fast path off
    /// ([`FastPath::enable`]); the kernel bypass works from now on, as `bypass` says.
    pub fn attach(ifname: &str, entries: u32, bypass: Bypass<'_>) -> io::Result<Self> {
        if !built_with_bpf() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the tc fast path was built without clang; install clang and rebuild",
            ));
        }
        let entries = entries.max(1);
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("fast_v4", entries)
            .map_max_entries("fast_64", entries)
            .map_max_entries("fast_46", entries)
            .map_max_entries("fast_ila", entries)
            .load(TC_FAST_OBJ)
            .map_err(|e| err("loading the object", ifname, e))?;
        fill_local(&mut ebpf, bypass.local_v4, bypass.local_v6)
            .map_err(|e| err("local addresses", ifname, e))?;
        {
            let map = ebpf
                .map_mut("config")
                .ok_or_else(|| err("object", ifname, "no config map"))?;
            let mut cfg: Array<_, u32> =
                Array::try_from(map).map_err(|e| err("config", ifname, e))?;
            let mut flags = if bypass.ip_version == 6 {
                CFG_STEER_V6
            } else {
                CFG_STEER_V4
            };
            if bypass.on {
                flags |= CFG_BYPASS;
            }
            // The fast-path bits are the fast path's own (FastPath::enable).
            cfg.set(0, flags, 0).map_err(|e| err("config", ifname, e))?;
        }
        let fast = Arc::new(FastPath::take(&mut ebpf, entries)?);
        {
            let prog: &mut SchedClassifier = ebpf
                .program_mut("tc_fast")
                .ok_or_else(|| err("object", ifname, "no program tc_fast"))?
                .try_into()
                .map_err(|e| err("tc_fast", ifname, e))?;
            prog.load().map_err(|e| err("loading tc_fast", ifname, e))?;
            // A TCX link (Linux >= 6.6) needs no qdisc, so none is added: the interface
            // is left as it was found when the link goes. Older kernels attach a clsact
            // qdisc's filter: only then is the qdisc added (if missing), and it stays
            // after the gateway (other filters may be using it by then).
            let tcx = aya::util::KernelVersion::current()
                .is_ok_and(|v| v >= aya::util::KernelVersion::new(6, 6, 0));
            // `QUICKNAT_LEGACY_ATTACH` plays a kernel before 6.6: a clsact qdisc's filter.
            let legacy = crate::host::legacy_attach();
            let attach = |prog: &mut SchedClassifier| {
                if legacy {
                    let nl = tc::TcAttachOptions::Netlink(tc::NlOptions::default());
                    prog.attach_with_options(ifname, TcAttachType::Ingress, nl)
                } else {
                    prog.attach(ifname, TcAttachType::Ingress)
                }
            };
            let attached = attach(prog).map(drop);
            if let Err(first) = attached {
                if tcx && !legacy {
                    return Err(err("attaching tc_fast at ingress (TCX)", ifname, first));
                }
                tc::qdisc_add_clsact(ifname).map_err(|e| {
                    err(
                        "attaching tc_fast at ingress",
                        ifname,
                        format!("{first}; adding a clsact qdisc for it: {e}"),
                    )
                })?;
                attach(prog)
                    .map_err(|e| err("attaching tc_fast at ingress (clsact)", ifname, e))?;
            }
        }
        Ok(TcFastPath {
            _ebpf: ebpf,
            fast,
            ifname: ifname.to_string(),
        })
    }

    /// The maps the runtime installs flows in.
    pub fn fast_path(&self) -> Arc<FastPath> {
        Arc::clone(&self.fast)
    }
}
