//! Loads the steering program (`bpf/xdp_steer.c`, compiled by build.rs) with
//! aya, fills its maps and attaches it to the interface.
//!
//! The attachment is a BPF link (`BPF_LINK_CREATE`, Linux >= 5.9) whenever
//! the kernel has them: the link lives exactly as long as its file
//! descriptor, so the program is detached on drop, on a clean exit and also
//! when the process is killed with SIGKILL (the kernel closes the fd). Only
//! on kernels without XDP links does aya fall back to a netlink attachment,
//! which survives a SIGKILL (a clean drop still detaches it).

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::OwnedFd;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;

use aya::maps::{Array, HashMap, XskMap};
use aya::programs::{Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};

use crate::netlink::{Netlink, XdpAttachMode};

/// The compiled program, or empty when clang was missing at build time.
static XDP_STEER_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/xdp_steer.o"));

/// `config[0]` bit: pass IPv4 frames for `local_v4` addresses to the kernel.
/// Keep in sync with `QN_CFG_PASS_LOCAL` in bpf/xdp_steer.c.
const CFG_PASS_LOCAL: u32 = 1;
/// `config[0]` bits: steer IPv4 / IPv6 to the socket (`QN_CFG_STEER_V4/V6`); on the tc
/// hook, the family the kernel bypass keeps from the kernel.
pub(crate) const CFG_STEER_V4: u32 = 2;
pub(crate) const CFG_STEER_V6: u32 = 4;

/// The message `AfXdp::open` fails with when build.rs found no clang.
pub(crate) const NO_CLANG: &str =
    "AF_XDP support was built without clang; install clang and rebuild";

/// Whether this build carries the XDP program (clang was found at build time).
pub fn built_with_bpf() -> bool {
    !XDP_STEER_OBJ.is_empty()
}

/// The loaded program with its attachment; dropping it detaches the program.
pub(crate) struct Steering {
    /// Owns the program, its maps and its link.
    _ebpf: Ebpf,
    /// Whether the program runs in the driver (native) rather than generic mode.
    pub(crate) native: bool,
    /// The fast path's maps, when asked for (`fast_entries > 0`).
    pub(crate) fast: Option<Arc<super::fast_path::FastPath>>,
    /// Attached through netlink (interface, mode): detached on drop by hand, since the
    /// kernel keeps such an attachment after the process.
    netlink: Option<(u32, XdpAttachMode)>,
}

impl Drop for Steering {
    fn drop(&mut self) {
        if let Some((ifindex, mode)) = self.netlink {
            let _ = Netlink::open().and_then(|mut nl| nl.set_xdp_fd(ifindex, -1, mode));
        }
    }
}

/// Attaches `prog` to `ifindex` through netlink in `mode` (see
/// [`crate::host::legacy_attach`]).
fn attach_netlink(prog: &Xdp, ifindex: u32, mode: XdpAttachMode) -> io::Result<()> {
    let fd = prog
        .fd()
        .map_err(|e| io::Error::other(e.to_string()))?
        .as_fd()
        .as_raw_fd();
    Netlink::open()?.set_xdp_fd(ifindex, fd, mode)
}

fn err(what: &str, ifname: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("AF_XDP on {ifname}: {what}: {e}"))
}

/// Loads the program, registers each socket of `xsks` for its queue, fills `local_v4`
/// and attaches to `ifindex` (native mode first, then generic). One program per
/// interface serves every queue's socket.
pub(crate) fn attach(
    ifname: &str,
    ifindex: u32,
    xsks: &[(u32, &OwnedFd)],
    local_v4: &[Ipv4Addr],
    local_v6: &[Ipv6Addr],
    steer: super::Steer,
    fast_entries: u32,
) -> io::Result<Steering> {
    if !built_with_bpf() {
        return Err(io::Error::new(io::ErrorKind::Unsupported, NO_CLANG));
    }
    let mut ebpf = EbpfLoader::new()
        .map_max_entries("fast_v4", fast_entries.max(1))
        .map_max_entries("fast_64", fast_entries.max(1))
        .map_max_entries("fast_46", fast_entries.max(1))
        .map_max_entries("fast_ila", fast_entries.max(1))
        .load(XDP_STEER_OBJ)
        .map_err(|e| err("loading the XDP object", ifname, e))?;
    {
        let map = ebpf
            .map_mut("xsks_map")
            .ok_or_else(|| err("XDP object", ifname, "no xsks_map"))?;
        let mut map = XskMap::try_from(map).map_err(|e| err("xsks_map", ifname, e))?;
        for (queue, xsk) in xsks {
            map.set(*queue, xsk.as_raw_fd(), 0).map_err(|e| {
                err(
                    &format!("registering the socket for queue {queue}"),
                    ifname,
                    e,
                )
            })?;
        }
    }
    fill_local(&mut ebpf, local_v4, local_v6).map_err(|e| err("local addresses", ifname, e))?;
    {
        let map = ebpf
            .map_mut("config")
            .ok_or_else(|| err("XDP object", ifname, "no config map"))?;
        let mut cfg: Array<_, u32> = Array::try_from(map).map_err(|e| err("config", ifname, e))?;
        let mut flags = if local_v4.is_empty() {
            0
        } else {
            CFG_PASS_LOCAL
        };
        if steer.ipv4 {
            flags |= CFG_STEER_V4;
        }
        if steer.ipv6 {
            flags |= CFG_STEER_V6;
        }
        // The fast-path bits are the fast path's own (FastPath::enable).
        cfg.set(0, flags, 0).map_err(|e| err("config", ifname, e))?;
    }
    {
        // Frames for another host's MAC skip the fast path (user space counts them).
        let map = ebpf
            .map_mut("own_mac")
            .ok_or_else(|| err("XDP object", ifname, "no own_mac map"))?;
        let mut own: Array<_, u64> = Array::try_from(map).map_err(|e| err("own_mac", ifname, e))?;
        if let Ok(mac) = crate::netlink::if_mac(ifname) {
            let mut b = [0u8; 8];
            b[..6].copy_from_slice(&mac);
            own.set(0, u64::from_ne_bytes(b), 0)
                .map_err(|e| err("own_mac", ifname, e))?;
        }
    }
    let prog: &mut Xdp = ebpf
        .program_mut("xdp_steer")
        .ok_or_else(|| err("XDP object", ifname, "no program xdp_steer"))?
        .try_into()
        .map_err(|e| err("XDP object", ifname, e))?;
    prog.load()
        .map_err(|e| err("loading the XDP program", ifname, e))?;
    let mut netlink = None;
    let native = if crate::host::legacy_attach() {
        let native = attach_netlink(prog, ifindex, XdpAttachMode::Driver).is_ok();
        let mode = if native {
            XdpAttachMode::Driver
        } else {
            attach_netlink(prog, ifindex, XdpAttachMode::Generic)
                .map_err(|e| err("XDP attach through netlink failed", ifname, e))?;
            XdpAttachMode::Generic
        };
        netlink = Some((ifindex, mode));
        native
    } else {
        match prog.attach_to_if_index(ifindex, XdpMode::Driver) {
            Ok(_) => true,
            Err(native_err) => {
                prog.attach_to_if_index(ifindex, XdpMode::Skb)
                    .map_err(|e| {
                        err(
                            "XDP attach failed",
                            ifname,
                            format!("native: {native_err}; generic: {e}"),
                        )
                    })?;
                false
            }
        }
    };
    let fast = if fast_entries > 0 {
        Some(Arc::new(super::fast_path::FastPath::take(
            &mut ebpf,
            fast_entries,
        )?))
    } else {
        None
    };
    Ok(Steering {
        _ebpf: ebpf,
        native,
        fast,
        netlink,
    })
}

/// Fills the `local_v4` and `local_v6` maps of `ebpf` (bpf/local.h, shared by the XDP
/// steering program and the tc fast path): the host's own addresses, whose frames are the
/// kernel's.
pub(crate) fn fill_local(
    ebpf: &mut Ebpf,
    local_v4: &[Ipv4Addr],
    local_v6: &[Ipv6Addr],
) -> io::Result<()> {
    let map_err =
        |what: String| move |e: aya::maps::MapError| io::Error::other(format!("{what}: {e}"));
    let map = ebpf
        .map_mut("local_v4")
        .ok_or_else(|| io::Error::other("no local_v4 map"))?;
    let mut local: HashMap<_, u32, u8> =
        HashMap::try_from(map).map_err(map_err("local_v4".into()))?;
    for a in local_v4 {
        // The program compares the address as it lies in the packet.
        local
            .insert(u32::from_ne_bytes(a.octets()), 1, 0)
            .map_err(map_err(format!("adding local address {a}")))?;
    }
    let map = ebpf
        .map_mut("local_v6")
        .ok_or_else(|| io::Error::other("no local_v6 map"))?;
    let mut local: HashMap<_, [u32; 4], u8> =
        HashMap::try_from(map).map_err(map_err("local_v6".into()))?;
    for a in local_v6 {
        // As it lies in the packet: four native-endian words of the wire bytes.
        let o = a.octets();
        let w = |i: usize| u32::from_ne_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
        local
            .insert([w(0), w(4), w(8), w(12)], 1, 0)
            .map_err(map_err(format!("adding local address {a}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod build_tests {
    use super::XDP_STEER_OBJ;

    /// The newcomer's path: a first build without clang leaves an empty object; once
    /// clang is on the PATH (scripts/test.sh installs it) build.rs must run again and
    /// compile the program, never keep the stale empty object. Whenever the clang
    /// build.rs would use answers now, the object this test was built with is an ELF
    /// BPF object.
    #[test]
    fn the_xdp_object_is_compiled_whenever_clang_is_there() {
        let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
        let have = std::process::Command::new(&clang)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !have {
            eprintln!("no {clang}: nothing to check");
            return;
        }
        assert!(
            XDP_STEER_OBJ.starts_with(b"\x7fELF"),
            "{clang} is there but the AF_XDP object is {} bytes and no ELF: build.rs kept \
             the object of a build without clang",
            XDP_STEER_OBJ.len()
        );
        // EM_BPF (247) in the ELF header's e_machine field (little-endian object).
        assert_eq!(XDP_STEER_OBJ.get(18..20), Some(&[247u8, 0][..]));
    }
}
