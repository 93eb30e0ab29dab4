//! The one interface a worker sees of a link's packet I/O, in the spirit of smoltcp's
//! `phy::Device`: [`Port`]. AF_PACKET ([`crate::afpacket::PacketPort`]), AF_XDP
//! ([`crate::afxdp::AfXdp`]) and the in-memory [`crate::mem::MemPort`] implement it; a
//! worker generic over `P: Port` never matches on the backend, and a new backend (a pcap
//! tap, a fault injector, TUN) is one more `impl Port`. A wrapper composes around any port
//! (`struct Tap<P: Port>` calling the inner `recv` with its own closure).
//!
//! The trait is batched and callback-driven: [`Port::recv`] lends each received frame
//! *mutably in the backend's own buffer* (the ring, the UMEM), so a worker rewrites
//! headers in place, and the callback's [`Rx`] says whether the frame goes back out of the
//! same port without a copy. Frames for another port are copied with that port's
//! [`Port::send`]. Nothing leaves for sure before [`Port::flush`].
//!
//! This module holds the interface and what every implementation shares (the partial
//! checksum rule, the rule for unfinished virtio-net frames); it never touches a socket.

use std::io;
use std::time::Duration;

use crate::vnet::VnetHdr;

/// What the backend knows about one received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RxMeta {
    /// Length on the wire (a GSO super-frame can exceed the MTU: check before forwarding).
    pub len: usize,
    /// Bytes present in the buffer (the slice length).
    pub snaplen: usize,
    /// The TCP/UDP checksum holds only the pseudo-header sum (veth offload,
    /// `TP_STATUS_CSUMNOTREADY`). [`Port::recv`] completes such frames before the callback
    /// sees them and clears the flag; it stays set on a frame that could not be completed
    /// (not TCP/UDP, IPv6 extension headers, truncated) and on a port with virtio-net
    /// headers, where [`RxMeta::vnet`] says the same.
    pub csum_not_ready: bool,
    /// `TP_STATUS_CSUM_VALID`: the kernel (or NIC) has verified the transport checksum.
    pub csum_valid: bool,
    /// The VLAN TCI the kernel stripped from the frame (`TP_STATUS_VLAN_VALID`).
    pub vlan_tci: Option<u16>,
    /// `TP_STATUS_COPY` or `snaplen < len`: the slice is not the whole frame.
    pub truncated: bool,
    /// `TP_STATUS_LOSING`: the socket dropped frames since its statistics were last read.
    /// Not a property of this frame (it is still whole); kept apart from `truncated`.
    pub losing: bool,
    /// The virtio-net header of the frame (only on a port with virtio-net headers): GSO
    /// type and segment size of a super-packet, `NEEDS_CSUM` with where the checksum is.
    pub vnet: Option<VnetHdr>,
    /// The frame was addressed to another host (AF_PACKET's `PACKET_OTHERHOST`: a unicast
    /// destination MAC that is not the interface's, as a bridge flooding unknown unicast
    /// or a promiscuous port delivers). [`Port::recv`] never hands such frames to its
    /// callback: it drops them and counts them in [`PortStats::not_for_us`].
    pub other_host: bool,
}

impl RxMeta {
    /// Metadata for a frame delivered whole, with final checksums.
    pub fn whole(len: usize) -> Self {
        RxMeta {
            len,
            snaplen: len,
            csum_not_ready: false,
            csum_valid: false,
            vlan_tci: None,
            truncated: false,
            losing: false,
            vnet: None,
            other_host: false,
        }
    }
}

/// What the receive callback wants done with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rx {
    /// Nothing more: dropped, left to the kernel, or copied out through another port's
    /// [`Port::send`].
    Done,
    /// Transmit the first `len` bytes of the (possibly rewritten) frame back out of this
    /// same port — without a copy where the backend can (AF_XDP: the UMEM chunk goes on the
    /// tx ring) — behind `vnet` when the port passes virtio-net headers. `len` <= the
    /// frame's length; a `len` of 0 or past the frame, or a `vnet` asking for GSO or a
    /// checksum on a port without virtio-net headers, is not sent but counted in
    /// [`PortStats::tx_dropped`].
    Back {
        /// Bytes of the frame to send, from its start.
        len: usize,
        /// The virtio-net header to send it behind (ports with [`Port::vnet`] only).
        vnet: Option<VnetHdr>,
    },
}

/// Counters every port keeps (cheap to read, no syscall).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortStats {
    /// Frames handed to the [`Port::recv`] callback.
    pub rx_frames: u64,
    /// Frames the port committed to the wire: accepted by the kernel (AF_PACKET), placed
    /// on the tx ring (AF_XDP), flushed (MemPort).
    pub tx_frames: u64,
    /// Frames not transmitted: queue or ring full, too long, refused by the kernel, or an
    /// unfinished virtio-net frame on a port without virtio-net headers.
    pub tx_dropped: u64,
    /// Received frames whose partial TCP/UDP checksum the port completed.
    pub csum_completed: u64,
    /// Received frames addressed to another host (a unicast destination MAC not the
    /// interface's: bridge flooding, promiscuous mode), dropped before the callback.
    pub not_for_us: u64,
}

/// One link's packet I/O as a worker sees it.
pub trait Port: Send {
    /// Receives what is ready now, at most one batch, without waiting. Calls `f` with each
    /// frame (mutable bytes in the backend's own buffer: the ring or the UMEM) and its
    /// metadata. Partial TCP/UDP checksums (a veth peer's tx offload) are completed before
    /// `f` sees the frame, counted in `csum_completed` — except on a port that passes
    /// virtio-net headers, where they travel on as the header says. Returns the frame count.
    fn recv<F: FnMut(&mut [u8], &RxMeta) -> Rx>(&mut self, f: F) -> io::Result<usize>;

    /// Queues a copy of `frame` for transmission (behind `vnet` on a port with virtio-net
    /// headers; on a port without, a frame whose header asks for GSO or a checksum is not
    /// sent but counted in tx_dropped — a half-done frame never leaves).
    fn send(&mut self, frame: &[u8], vnet: Option<&VnetHdr>) -> io::Result<()>;

    /// Transmits everything queued.
    fn flush(&mut self) -> io::Result<()>;

    /// Waits until one of `ports` has frames to receive or `timeout` passes; returns
    /// whether one has.
    fn wait(ports: &[&Self], timeout: Duration) -> io::Result<bool>
    where
        Self: Sized;

    /// The port's counters.
    fn stats(&self) -> PortStats;

    /// Whether frames come and go with virtio-net headers (GSO pass-through).
    fn vnet(&self) -> bool;

    /// Lends each frame the next [`recv`](Self::recv) would hand out (at most one batch),
    /// read-only and without taking it, so that a worker can start loading what those
    /// frames will need before it processes the first (the engine's staged batch). A
    /// hint: frames arriving meanwhile are received unpeeked, and partial
    /// checksums are not completed yet. The default lends nothing.
    fn peek<F: FnMut(&[u8])>(&mut self, _f: F) {}
}

/// Whether the Ethernet `frame` is addressed to another host: its destination MAC is
/// unicast (group bit clear) and not `own`. Broadcast and multicast are for everyone.
#[inline]
pub(crate) fn for_another_host(frame: &[u8], own: &[u8; 6]) -> bool {
    match frame.get(..6) {
        Some(dst) => dst[0] & 1 == 0 && dst != own,
        None => false,
    }
}

/// Whether a frame behind `vnet` still needs work a port without virtio-net headers
/// cannot ask the kernel for (GSO, a partial checksum): such a frame is never sent there.
pub(crate) fn unfinished(vnet: Option<&VnetHdr>) -> bool {
    vnet.is_some_and(|v| v.is_gso() || v.needs_csum())
}

/// The [`Port::recv`] checksum rule for a frame received with `meta`: completes a partial
/// checksum unless a virtio-net header describes it. Returns the metadata the callback
/// gets (`csum_not_ready` cleared when completed) and whether it completed one.
pub(crate) fn complete_partial(frame: &mut [u8], meta: &RxMeta) -> (RxMeta, bool) {
    if meta.csum_not_ready && meta.vnet.is_none() && crate::csum::complete_checksum(frame, meta) {
        let done = RxMeta {
            csum_not_ready: false,
            ..*meta
        };
        return (done, true);
    }
    (*meta, false)
}

/// The bytes [`Rx::Back`] asks to send from `frame`, if the request is one this port can
/// honour (`vnet`: whether it passes virtio-net headers); `None` means "count as dropped".
pub(crate) fn back_bytes<'a>(
    frame: &'a [u8],
    len: usize,
    hdr: Option<&VnetHdr>,
    vnet: bool,
) -> Option<&'a [u8]> {
    if len == 0 || (!vnet && unfinished(hdr)) {
        return None;
    }
    frame.get(..len)
}

#[cfg(test)]
mod tests;
