//! AF_PACKET backend: a TPACKET_V3 receive ring and a `sendmmsg` transmitter.
//!
//! [`PacketPort`] is the backend as a [`crate::Port`]: one interface's ring and
//! transmit socket, opened from one [`AfPacketConfig`]. Its parts:
//! [`AfPacket`] receives every Ethernet frame of one interface into a ring
//! shared with the kernel and lends each frame to the caller *mutably, in
//! the ring*, so the engine can rewrite headers in place without a copy.
//! [`AfPacketTx`] queues frames (copying them, so the receive block can be
//! given back at once) and sends a batch with one `sendmmsg`.
//!
//! This module moves frames; it must never parse them, keep sessions, or know
//! what NAT is (completing partial checksums is [`crate::csum`]'s job). All of
//! its `unsafe` code lives in `sys.rs` and `crate::sys`, behind safe wrappers;
//! everything the kernel writes into the ring is bounds-checked before use
//! (`ring.rs`).
//!
//! Traps (see `/work/shared/LAB-NOTES.md`):
//! * in a fanout group the per-socket `PACKET_IGNORE_OUTGOING` is ignored;
//!   the group needs `PACKET_FANOUT_FLAG_IGNORE_OUTGOING`, or transmitted
//!   frames loop back into the ring;
//! * veth with offloads on delivers frames whose transport checksum holds
//!   only the pseudo-header sum (`RxMeta::csum_not_ready`), and GSO
//!   super-frames up to 64 KiB: `RxMeta::len` larger than the MTU. The ring
//!   reports them; [`PacketPort`] completes the checksums — or, with
//!   `AfPacketConfig::vnet_hdr`, passes them on described by their
//!   virtio-net header ([`VnetHdr`]) and lets the kernel segment and checksum
//!   them on the way out.

mod placement;
mod port;
mod ring;
mod sys;
mod tx;

/// Waits until one of `socks` has a block ready or `timeout` passes (the tests' idle
/// wait on bare rings; workers use [`crate::Port::wait`]).
#[cfg(test)]
pub(crate) fn wait_readable(socks: &[&AfPacket], timeout: Duration) -> io::Result<bool> {
    let fds: Vec<&OwnedFd> = socks.iter().map(|s| &s.fd).collect();
    sys::poll_any_readable(&fds, timeout)
}

#[cfg(test)]
mod tests;

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use placement::FlowPlacement;
pub use port::PacketPort;
pub use tx::AfPacketTx;

use crate::port::RxMeta;
#[cfg(test)]
use crate::{csum::complete_checksum, vnet::*};

/// Settings of a receive ring; [`AfPacketConfig::new`] gives the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfPacketConfig {
    /// Interface to receive from (in the calling thread's network namespace).
    pub ifname: String,
    /// Bytes per ring block; a multiple of the page size (default 1 MiB).
    pub block_size: usize,
    /// Blocks in the ring (default 16).
    pub block_count: usize,
    /// Nominal frame size; V3 packs frames of any length, this only sizes `tp_frame_nr` (default 2048).
    pub frame_size: usize,
    /// Hand a partly filled block to user space after this many ms (default 1).
    pub block_timeout_ms: u32,
    /// Join fanout group `id`: sockets of a group share the traffic by flow, placed by
    /// [`placement`](Self::placement) or else by the kernel's hash (`PACKET_FANOUT_HASH`).
    pub fanout: Option<u16>,
    /// With `fanout`: the program that places the group's flows (`PACKET_FANOUT_EBPF`);
    /// every socket of the group must name the same one. `None`: the kernel's hash.
    pub placement: Option<Arc<FlowPlacement>>,
    /// Do not receive frames this host transmits on the interface (default true).
    /// Applied as `PACKET_IGNORE_OUTGOING`, or as `PACKET_FANOUT_FLAG_IGNORE_OUTGOING` in a fanout group.
    pub ignore_outgoing: bool,
    /// Ask for a virtio-net header with every frame (`PACKET_VNET_HDR`, default false):
    /// GSO super-packets and partial checksums arrive described in [`RxMeta::vnet`]. A
    /// [`PacketPort`] opens its transmit socket with virtio-net headers too.
    pub vnet_hdr: bool,
    /// Receive only IPv4 (4) or IPv6 (6) frames, bound to that ethertype: the kernel then
    /// hands them over after the tc ingress hook and netfilter's ingress, as it hands them
    /// to `ip_rcv`, so a tc program (the fast path, [`crate::tcfast`]) decides first, and
    /// no transmitted frame comes back. `None` (the default): every frame, as a tap
    /// (`ETH_P_ALL`) sees it, before tc. A bound socket reads a frame the tc program
    /// marked `PACKET_OTHERHOST` (its kernel bypass) as its own when the frame's
    /// destination MAC is the interface's ([`PacketPort`]).
    pub ip_version: Option<u8>,
}

impl AfPacketConfig {
    /// The defaults for `ifname`: 16 blocks of 1 MiB, 1 ms block timeout, no fanout, ignore outgoing.
    pub fn new(ifname: impl Into<String>) -> Self {
        AfPacketConfig {
            ifname: ifname.into(),
            block_size: 1 << 20,
            block_count: 16,
            frame_size: 2048,
            block_timeout_ms: 1,
            fanout: None,
            placement: None,
            ignore_outgoing: true,
            vnet_hdr: false,
            ip_version: None,
        }
    }

    /// Checks the geometry before the kernel sees it, with an error that names the field.
    fn validate(&self) -> io::Result<()> {
        let bad = |what: String| Err(io::Error::new(io::ErrorKind::InvalidInput, what));
        let page = sys::page_size();
        if self.block_size == 0
            || !self.block_size.is_multiple_of(page)
            || self.block_size > u32::MAX as usize
        {
            return bad(format!(
                "af_packet {}: block_size {} must be a non-zero multiple of the page size ({page})",
                self.ifname, self.block_size
            ));
        }
        if self.frame_size < 128
            || !self.frame_size.is_multiple_of(16)
            || self.frame_size > self.block_size
        {
            return bad(format!(
                "af_packet {}: frame_size {} must be a multiple of 16 in 128..=block_size",
                self.ifname, self.frame_size
            ));
        }
        let total = self.block_size.checked_mul(self.block_count);
        if self.block_count == 0 || self.block_count > u32::MAX as usize || total.is_none() {
            return bad(format!(
                "af_packet {}: block_count {} out of range",
                self.ifname, self.block_count
            ));
        }
        Ok(())
    }
}

/// A TPACKET_V3 receive ring on one interface.
#[derive(Debug)]
pub struct AfPacket {
    // Field order: the ring is unmapped before the socket is closed.
    ring: ring::Ring,
    fd: OwnedFd,
    ifindex: u32,
    packets: u64,
    drops: u64,
    skipped: u64,
}

impl AfPacket {
    /// Opens a packet socket on `cfg.ifname`, maps its V3 ring and binds it (`ETH_P_ALL`,
    /// or the ethertype of [`AfPacketConfig::ip_version`]).
    pub fn open(cfg: &AfPacketConfig) -> io::Result<Self> {
        cfg.validate()?;
        let ifindex = sys::ifindex(&cfg.ifname)?;
        // Protocol 0 until bound: nothing is queued from other interfaces meanwhile.
        let fd = sys::packet_socket()?;
        let ctx = |what: &str| {
            let name = cfg.ifname.clone();
            let what = what.to_owned();
            move |e: io::Error| io::Error::new(e.kind(), format!("af_packet {name}: {what}: {e}"))
        };
        let version = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
        sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_VERSION, &version)
            .map_err(ctx("PACKET_VERSION=TPACKET_V3"))?;
        if cfg.vnet_hdr {
            // Before the ring exists (EBUSY after): the kernel then reserves room for the
            // header in front of every frame's Ethernet header.
            let on: libc::c_int = 1;
            sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &on)
                .map_err(ctx("PACKET_VNET_HDR"))?;
        }
        let req = libc::tpacket_req3 {
            tp_block_size: cfg.block_size as u32,
            tp_block_nr: cfg.block_count as u32,
            tp_frame_size: cfg.frame_size as u32,
            tp_frame_nr: ((cfg.block_size / cfg.frame_size) * cfg.block_count) as u32,
            tp_retire_blk_tov: cfg.block_timeout_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)
            .map_err(ctx("PACKET_RX_RING"))?;
        let map = crate::sys::Mmap::shared(&fd, cfg.block_size * cfg.block_count, 0)
            .map_err(ctx("mmap ring"))?;
        let ring = ring::Ring::new(map, cfg.block_size, cfg.block_count, cfg.vnet_hdr);
        let protocol = match cfg.ip_version {
            None => sys::ETH_P_ALL_BE,
            Some(4) => (libc::ETH_P_IP as u16).to_be(),
            Some(6) => (libc::ETH_P_IPV6 as u16).to_be(),
            Some(v) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "af_packet {}: ip_version {v} is neither 4 nor 6",
                        cfg.ifname
                    ),
                ))
            }
        };
        sys::bind_packet(&fd, ifindex, protocol).map_err(ctx("bind"))?;
        let on: libc::c_int = 1;
        match cfg.fanout {
            Some(group) => {
                // LAB-NOTES trap: the per-socket option is ignored inside a group.
                let mut flags = if cfg.placement.is_some() {
                    libc::PACKET_FANOUT_EBPF
                } else {
                    libc::PACKET_FANOUT_HASH
                };
                if cfg.ignore_outgoing {
                    flags |= libc::PACKET_FANOUT_FLAG_IGNORE_OUTGOING;
                }
                let arg = (u32::from(group) | (flags << 16)) as libc::c_int;
                sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_FANOUT, &arg)
                    .map_err(ctx(&format!("PACKET_FANOUT group {group}")))?;
                if let Some(p) = &cfg.placement {
                    p.join(&fd)
                        .map_err(ctx(&format!("PACKET_FANOUT_DATA group {group}")))?;
                }
            }
            None if cfg.ignore_outgoing => {
                sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &on)
                    .map_err(ctx("PACKET_IGNORE_OUTGOING"))?;
            }
            None => {}
        }
        Ok(AfPacket {
            ring,
            fd,
            ifindex,
            packets: 0,
            drops: 0,
            skipped: 0,
        })
    }

    /// Waits up to `timeout` for a block (zero: don't wait), calls `f` on each of its
    /// frames (bytes mutable in the ring) and gives the block back; returns the frame count.
    pub fn recv_batch(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(&mut [u8], &RxMeta),
    ) -> io::Result<usize> {
        if let Some(n) = self.try_block(&mut f) {
            return Ok(n);
        }
        if timeout.is_zero() {
            return Ok(0);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(0);
            }
            let ms = left
                .as_nanos()
                .div_ceil(1_000_000)
                .min(libc::c_int::MAX as u128);
            if !self.ring.ready() {
                sys::poll_readable(&self.fd, ms as libc::c_int)?;
            }
            if let Some(n) = self.try_block(&mut f) {
                return Ok(n);
            }
        }
    }

    /// Lends the frames the next [`AfPacket::recv_batch`] would take (the block under the
    /// cursor) to `f`, read-only, taking none (see [`crate::Port::peek`]).
    pub fn peek_batch(&mut self, mut f: impl FnMut(&[u8])) {
        self.ring.peek_block(&mut f);
    }

    /// Walks the block under the cursor if the kernel has handed it over.
    fn try_block(&mut self, f: &mut impl FnMut(&mut [u8], &RxMeta)) -> Option<usize> {
        let walk = self.ring.take_block(f)?;
        self.skipped += walk.skipped as u64;
        Some(walk.frames)
    }

    /// Index of the interface the ring is bound to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Frames skipped because their ring headers were out of bounds (should stay 0).
    pub fn corrupt_frames(&self) -> u64 {
        self.skipped
    }

    /// Totals since open from `PACKET_STATISTICS`: (frames received incl. drops, frames dropped).
    ///
    /// The kernel resets its counters on every read; this keeps the running sums.
    pub fn stats(&mut self) -> io::Result<(u64, u64)> {
        let st = sys::packet_stats_v3(&self.fd)?;
        self.packets += u64::from(st.tp_packets);
        self.drops += u64::from(st.tp_drops);
        Ok((self.packets, self.drops))
    }
}
