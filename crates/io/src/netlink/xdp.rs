//! XDP attachments through rtnetlink (`IFLA_XDP`): what is attached to an interface, and
//! attaching or detaching a program the way kernels before BPF links (Linux 5.9) do.
//!
//! quicknat attaches its XDP program by a BPF link wherever the kernel has them, and the
//! link goes with the process. An attachment made through netlink instead outlives the
//! process (a SIGKILL leaves it), so a start on such a kernel must find and remove the
//! program a dead gateway left: [`Netlink::xdp_programs`] says which program ids are
//! attached in which mode, [`Netlink::set_xdp_fd`] detaches one (fd -1) or attaches one.

use std::io;

use super::parse::{u32_at, Attrs, NlMsg, ParseError};
use super::Netlink;

const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_SETLINK: u16 = 19;
/// sizeof(struct ifinfomsg).
const IFINFOMSG_LEN: usize = 16;
const IFLA_XDP: u16 = 43;
const NLA_F_NESTED: u16 = 0x8000;
const IFLA_XDP_FD: u16 = 1;
const IFLA_XDP_FLAGS: u16 = 3;
const IFLA_XDP_PROG_ID: u16 = 4;
const IFLA_XDP_DRV_PROG_ID: u16 = 5;
const IFLA_XDP_SKB_PROG_ID: u16 = 6;

/// Where an XDP program runs, as the attach flags say it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpAttachMode {
    /// In the driver (`XDP_FLAGS_DRV_MODE`).
    Driver,
    /// Generic, on the skb (`XDP_FLAGS_SKB_MODE`).
    Generic,
}

impl XdpAttachMode {
    /// The `IFLA_XDP_FLAGS` value selecting this mode.
    pub fn flags(self) -> u32 {
        match self {
            XdpAttachMode::Generic => 1 << 1,
            XdpAttachMode::Driver => 1 << 2,
        }
    }
}

impl Netlink {
    /// The XDP programs attached to interface `ifindex`: (mode, program id) for each mode
    /// that has one (however attached: netlink or link).
    pub fn xdp_programs(&mut self, ifindex: u32) -> io::Result<Vec<(XdpAttachMode, u32)>> {
        let found = self.dump(RTM_GETLINK, &[0u8; IFINFOMSG_LEN], |m| {
            parse_link_xdp(m, ifindex)
        })?;
        Ok(found.into_iter().flatten().collect())
    }

    /// Attaches the program `fd` to `ifindex` in `mode`, or with `fd` -1 detaches the
    /// netlink-attached program of that mode. A program attached by a BPF link cannot be
    /// detached this way (EBUSY): its link's owner holds it.
    pub fn set_xdp_fd(&mut self, ifindex: u32, fd: i32, mode: XdpAttachMode) -> io::Result<()> {
        let mut fixed = [0u8; IFINFOMSG_LEN];
        fixed[4..8].copy_from_slice(&ifindex.to_ne_bytes());
        let mut nested = Vec::with_capacity(16);
        for (ty, v) in [(IFLA_XDP_FD, fd as u32), (IFLA_XDP_FLAGS, mode.flags())] {
            nested.extend_from_slice(&8u16.to_ne_bytes());
            nested.extend_from_slice(&ty.to_ne_bytes());
            nested.extend_from_slice(&v.to_ne_bytes());
        }
        self.request_ack(
            RTM_SETLINK,
            0,
            &fixed,
            &[(IFLA_XDP | NLA_F_NESTED, &nested)],
        )
    }
}

/// The XDP programs of link `ifindex` in an RTM_NEWLINK message (None: another link).
fn parse_link_xdp(
    m: &NlMsg<'_>,
    ifindex: u32,
) -> Result<Option<Vec<(XdpAttachMode, u32)>>, ParseError> {
    if m.ty != RTM_NEWLINK || u32_at(m.body, 4) != Some(ifindex) {
        return Ok(None);
    }
    let mut out = Vec::new();
    let attrs = m.body.get(IFINFOMSG_LEN..).unwrap_or_default();
    for a in Attrs::new(attrs) {
        let (ty, payload) = a?;
        if ty != IFLA_XDP {
            continue;
        }
        let mut any = None;
        for x in Attrs::new(payload) {
            let (xt, xp) = x?;
            let id = u32_at(xp, 0).filter(|&id| id != 0);
            match (xt, id) {
                (IFLA_XDP_DRV_PROG_ID, Some(id)) => out.push((XdpAttachMode::Driver, id)),
                (IFLA_XDP_SKB_PROG_ID, Some(id)) => out.push((XdpAttachMode::Generic, id)),
                (IFLA_XDP_PROG_ID, Some(id)) => any = Some(id),
                _ => {}
            }
        }
        // A single program is reported by IFLA_XDP_PROG_ID alone, with its mode in
        // IFLA_XDP_ATTACHED; the per-mode ids come only when several are attached.
        if out.is_empty() {
            if let Some(id) = any {
                let mode = attached_mode(payload);
                out.push((mode, id));
            }
        }
    }
    Ok(Some(out))
}

/// `IFLA_XDP_ATTACHED` of an `IFLA_XDP` payload as a mode (2: generic; else driver).
fn attached_mode(payload: &[u8]) -> XdpAttachMode {
    const IFLA_XDP_ATTACHED: u16 = 2;
    const XDP_ATTACHED_SKB: u8 = 2;
    let skb = Attrs::new(payload)
        .flatten()
        .any(|(t, p)| t == IFLA_XDP_ATTACHED && p.first() == Some(&XDP_ATTACHED_SKB));
    if skb {
        XdpAttachMode::Generic
    } else {
        XdpAttachMode::Driver
    }
}
