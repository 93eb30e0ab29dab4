//! The fast path's hook on the AF_PACKET backend: a tc program per link (io::tcfast) whose
//! maps the session driver ([`super::fastpath`]) fills exactly as it fills the XDP
//! program's. It is attached before the receive sockets are opened, because it decides
//! how they are opened: bound to the IP version the mode translates on each link, so that
//! the kernel hands them a frame after the program (not before, as it hands a tap), and
//! with the kernel bypass in the program instead of the nftables ingress table.

use std::net::{Ipv4Addr, Ipv6Addr};

use io::tcfast::{Bypass, TcFastPath};

use super::{FastPathSwitch, GatewayConfig, Link, LiveError};

/// Attaches the tc program to both links (maps of `[gateway] xdp_fast_path_entries` flow
/// directions each; `fams`: the IP version translated on each; `local`: the host's own
/// addresses, which the kernel bypass leaves to the kernel) when the configuration asks
/// for the fast path. `None`: not asked for, or "auto" and it cannot be had (logged); an
/// error when it is "on" and cannot be had.
pub(super) fn attach(
    gw: &GatewayConfig,
    links: &[Link; 2],
    fams: [u8; 2],
    local: (&[Ipv4Addr], &[Ipv6Addr]),
    log: &(dyn Fn(String) + Sync),
) -> Result<Option<[TcFastPath; 2]>, LiveError> {
    if gw.xdp_fast_path == FastPathSwitch::Off {
        return Ok(None);
    }
    let hook = |i: usize| {
        let bypass = Bypass {
            ip_version: fams[i],
            on: gw.kernel_bypass,
            local_v4: local.0,
            local_v6: local.1,
        };
        TcFastPath::attach(&links[i].name, gw.xdp_fast_path_entries, bypass)
    };
    match hook(0).and_then(|a| Ok([a, hook(1)?])) {
        Ok(h) => Ok(Some(h)),
        Err(source) if gw.xdp_fast_path == FastPathSwitch::On => Err(LiveError::Io {
            what: "xdp fast path (xdp_fast_path = \"on\")",
            source,
        }),
        Err(e) => {
            log(format!("xdp fast path: off ({e})"));
            Ok(None)
        }
    }
}
