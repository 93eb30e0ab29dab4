//! Programs a dead gateway left attached. quicknat attaches its XDP program by a BPF link
//! (Linux >= 5.9) and its tc program by a TCX link (>= 6.6): both go with the process.
//! On older kernels both are attached through netlink and outlive a SIGKILL: a leftover
//! tc program keeps marking transit frames `PACKET_OTHERHOST` (a blackhole) and
//! forwarding with its stale map entries; a leftover XDP program keeps redirecting to
//! sockets that are gone. A start finds them by name on its interfaces and detaches them.
//!
//! Called only while holding the interfaces' locks ([`super::InterfaceLock`]): no live
//! quicknat uses them, so a program of ours attached there is a dead one's.

use std::io;

use aya::programs::tc::{self, TcAttachType};
use aya::programs::{loaded_programs, ProgramInfo};

use crate::netlink::{Netlink, XdpAttachMode};

/// The XDP steering program's name (`bpf/xdp_steer.c`).
pub const XDP_PROGRAM: &str = "xdp_steer";
/// The tc fast path's program name (`bpf/tc_fast.c`).
pub const TC_PROGRAM: &str = "tc_fast";

/// Whether programs are to be attached through netlink even where the kernel has BPF and
/// TCX links: `QUICKNAT_LEGACY_ATTACH=1`, a test hook that plays a kernel older than 5.9
/// (XDP) and 6.6 (tc) on this one, so what such kernels leave behind can be tested here.
pub fn legacy_attach() -> bool {
    std::env::var_os("QUICKNAT_LEGACY_ATTACH").is_some_and(|v| v == "1")
}

/// Detaches the netlink-attached quicknat programs on `ifname` (index `ifindex`): each
/// as a line for the log, or the error that kept it attached.
pub fn detach_leftover_programs(ifname: &str, ifindex: u32) -> Vec<io::Result<String>> {
    let mut out = Vec::new();
    match tc::qdisc_detach_program(ifname, TcAttachType::Ingress, TC_PROGRAM) {
        Ok(()) => out.push(Ok(format!(
            "the tc program {TC_PROGRAM} at {ifname}'s ingress (attached through netlink)"
        ))),
        // None found, or no clsact qdisc to look in.
        Err(tc::TcError::IoError(e)) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) if is_absent(&e.to_string()) => {}
        Err(e) => out.push(Err(io::Error::other(format!(
            "tc program {TC_PROGRAM} on {ifname}: {e}"
        )))),
    }
    let attached = match Netlink::open().and_then(|mut nl| nl.xdp_programs(ifindex)) {
        Ok(a) => a,
        Err(e) => {
            out.push(Err(io::Error::new(
                e.kind(),
                format!("XDP programs on {ifname}: {e}"),
            )));
            return out;
        }
    };
    for (mode, id) in attached {
        if !program_named(id, XDP_PROGRAM) {
            continue;
        }
        let how = match mode {
            XdpAttachMode::Driver => "native",
            XdpAttachMode::Generic => "generic",
        };
        out.push(
            Netlink::open()
                .and_then(|mut nl| nl.set_xdp_fd(ifindex, -1, mode))
                .map(|()| {
                    format!("the XDP program {XDP_PROGRAM} (id {id}, {how}) on {ifname} (attached through netlink)")
                })
                .map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("XDP program {XDP_PROGRAM} (id {id}) on {ifname}: {e}"),
                    )
                }),
        );
    }
    out
}

/// Whether the loaded program `id` is called `name`.
fn program_named(id: u32, name: &str) -> bool {
    loaded_programs()
        .flatten()
        .find(|p: &ProgramInfo| p.id() == id)
        .is_some_and(|p| p.name_as_str() == Some(name))
}

/// Whether a tc error only says there is nothing to detach (no clsact qdisc, no filter).
fn is_absent(msg: &str) -> bool {
    msg.contains("No such file or directory") || msg.contains("Invalid argument")
}
