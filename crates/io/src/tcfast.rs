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
//! AF_PACKET receive sockets are taps that see each frame before tc; the claim filter
//! (attached with [`TcFastPath::claim`] to every receive socket of the interface) keeps
//! the offloaded flows' frames from them and hands each one's entry to the tc program.
//! See the program's header comment.
//!
//! The tc program is attached by a TCX link (Linux >= 6.6; older kernels: a clsact
//! qdisc's filter, the qdisc added only then) that lives as long as the [`TcFastPath`]:
//! dropped, or the process killed, and the kernel detaches it.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;

use aya::programs::{tc, SchedClassifier, SocketFilter, TcAttachType};
use aya::{Ebpf, EbpfLoader};

use crate::afpacket::PacketPort;
use crate::afxdp::fast_path::FastPath;

/// The compiled program, or empty when clang was missing at build time.
static TC_FAST_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tc_fast.o"));

/// Whether this build carries the tc program (clang was found at build time).
pub fn built_with_bpf() -> bool {
    !TC_FAST_OBJ.is_empty()
}

fn err(what: &str, ifname: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("tc fast path on {ifname}: {what}: {e}"))
}

/// The tc program attached to one interface, with its claim filter and its maps.
pub struct TcFastPath {
    /// Owns the programs, the maps and the TCX link: dropped, the program is detached.
    ebpf: Ebpf,
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
    /// `ifname`'s ingress. The maps start empty and the program off
    /// ([`FastPath::enable`]).
    pub fn attach(ifname: &str, entries: u32) -> io::Result<Self> {
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
            if let Err(first) = prog.attach(ifname, TcAttachType::Ingress) {
                if tcx {
                    return Err(err("attaching tc_fast at ingress (TCX)", ifname, first));
                }
                tc::qdisc_add_clsact(ifname).map_err(|e| {
                    err(
                        "attaching tc_fast at ingress",
                        ifname,
                        format!("{first}; adding a clsact qdisc for it: {e}"),
                    )
                })?;
                prog.attach(ifname, TcAttachType::Ingress)
                    .map_err(|e| err("attaching tc_fast at ingress (clsact)", ifname, e))?;
            }
        }
        {
            let claim: &mut SocketFilter = ebpf
                .program_mut("tc_fast_claim")
                .ok_or_else(|| err("object", ifname, "no program tc_fast_claim"))?
                .try_into()
                .map_err(|e| err("tc_fast_claim", ifname, e))?;
            claim
                .load()
                .map_err(|e| err("loading tc_fast_claim", ifname, e))?;
        }
        Ok(TcFastPath {
            ebpf,
            fast,
            ifname: ifname.to_string(),
        })
    }

    /// The maps the runtime installs flows in.
    pub fn fast_path(&self) -> Arc<FastPath> {
        Arc::clone(&self.fast)
    }

    /// Attaches the claim filter to `port`'s receive socket (which must be on this
    /// interface): from now on it no longer receives the frames the tc program forwards.
    /// The socket holds its own reference to the filter (`SO_ATTACH_BPF`), so it stays as
    /// long as the socket, whatever is dropped first.
    pub fn claim(&self, port: &PacketPort) -> io::Result<()> {
        let prog = self
            .ebpf
            .program("tc_fast_claim")
            .ok_or_else(|| err("object", &self.ifname, "no program tc_fast_claim"))?;
        let fd = prog
            .fd()
            .map_err(|e| err("tc_fast_claim", &self.ifname, e))?;
        let raw: libc::c_int = fd.as_fd().as_raw_fd();
        crate::sys::setsockopt(port.rx_fd(), libc::SOL_SOCKET, libc::SO_ATTACH_BPF, &raw)
            .map_err(|e| err("SO_ATTACH_BPF on a receive socket", &self.ifname, e))
    }
}
