//! The transmit side: frames are copied into one buffer and sent in batches
//! with `sendmmsg` (one syscall per batch of up to [`BATCH`] frames).
//!
//! A socket opened with [`AfPacketTx::open_vnet`] has `PACKET_VNET_HDR` set: every
//! frame is sent behind a virtio-net header, so the kernel takes a GSO
//! super-packet whole (segmenting it in software only if the device lacks TSO)
//! and completes a partial checksum. The header is copied into the buffer right
//! before its frame; the kernel reads it off the front of each message.

use std::io;
use std::os::fd::OwnedFd;

use super::sys;
use crate::vnet::VnetHdr;

/// Frames queued before [`AfPacketTx::send`] flushes on its own.
pub const BATCH: usize = sys::SENDMMSG_MAX;

/// Queued bytes after which [`AfPacketTx::send`] flushes on its own (GSO super-packets are
/// up to 64 KiB; this bounds the buffer and the socket's send-buffer charge of one batch).
const BATCH_BYTES: usize = 1 << 20;

/// A packet socket bound to one interface for sending whole Ethernet frames.
///
/// It is bound with protocol 0, so it never receives anything.
#[derive(Debug)]
pub struct AfPacketTx {
    fd: OwnedFd,
    ifindex: u32,
    /// `PACKET_VNET_HDR` is on: each queued frame starts with its virtio-net header.
    vnet: bool,
    /// The queued frames, back to back.
    buf: Vec<u8>,
    /// End offset in `buf` of each queued frame.
    ends: Vec<usize>,
    sent: u64,
    dropped: u64,
}

impl AfPacketTx {
    /// Opens a sending socket on `ifname` (in the calling thread's network namespace).
    pub fn open(ifname: &str) -> io::Result<Self> {
        Self::open_with(ifname, false)
    }

    /// Opens a sending socket with `PACKET_VNET_HDR` on `ifname`: frames go out behind a
    /// virtio-net header ([`AfPacketTx::send_vnet`]; [`AfPacketTx::send`] adds an empty one),
    /// so GSO super-packets and partial checksums are finished by the kernel or the device.
    pub fn open_vnet(ifname: &str) -> io::Result<Self> {
        Self::open_with(ifname, true)
    }

    fn open_with(ifname: &str, vnet: bool) -> io::Result<Self> {
        let ifindex = sys::ifindex(ifname)?;
        let fd = sys::packet_socket()?;
        let ctx = |what: &'static str| {
            move |e: io::Error| {
                io::Error::new(e.kind(), format!("af_packet tx {ifname}: {what}: {e}"))
            }
        };
        if vnet {
            let on: libc::c_int = 1;
            sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &on)
                .map_err(ctx("PACKET_VNET_HDR"))?;
        }
        sys::bind_packet(&fd, ifindex, 0).map_err(ctx("bind"))?;
        Ok(AfPacketTx {
            fd,
            ifindex,
            vnet,
            buf: Vec::with_capacity(BATCH * 2048),
            ends: Vec::with_capacity(BATCH),
            sent: 0,
            dropped: 0,
        })
    }

    /// Queues a copy of `frame` (so the receive block can be released); flushes when [`BATCH`] are queued.
    ///
    /// On a [`AfPacketTx::open_vnet`] socket the frame gets an empty virtio-net header
    /// (no GSO, checksums final).
    pub fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        if self.vnet {
            // `hdr_len` = the whole frame: the kernel's `packet_snd` makes that much of
            // the skb linear; with 0 it keeps only the Ethernet header linear and puts the
            // rest in page fragments, which every later header access must pull.
            let h = VnetHdr {
                hdr_len: u16::try_from(frame.len()).unwrap_or(0),
                ..VnetHdr::default()
            };
            self.buf.extend_from_slice(&h.to_bytes());
        }
        self.push(frame)
    }

    /// Queues `frame` behind the virtio-net header `hdr`, e.g. a GSO super-packet with
    /// `gso_type`/`gso_size`/`hdr_len`, or a frame with `F_NEEDS_CSUM` and
    /// `csum_start`/`csum_offset` counted from the Ethernet header. On a socket without
    /// `PACKET_VNET_HDR` (opened with [`AfPacketTx::open`]) a frame that is finished (no
    /// GSO, no `F_NEEDS_CSUM`) is queued as [`AfPacketTx::send`] would; any other is not
    /// sent but counted as dropped: a half-done frame must never leave unfinished.
    pub fn send_vnet(&mut self, hdr: &VnetHdr, frame: &[u8]) -> io::Result<()> {
        if !self.vnet {
            if !hdr.needs_csum() && !hdr.is_gso() {
                return self.push(frame);
            }
            self.dropped += 1;
            return Ok(());
        }
        self.buf.extend_from_slice(&hdr.to_bytes());
        self.push(frame)
    }

    /// Whether frames go out behind a virtio-net header.
    pub fn vnet(&self) -> bool {
        self.vnet
    }

    fn push(&mut self, frame: &[u8]) -> io::Result<()> {
        self.buf.extend_from_slice(frame);
        self.ends.push(self.buf.len());
        if self.ends.len() >= BATCH || self.buf.len() >= BATCH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// Frames queued and not yet sent.
    pub fn pending(&self) -> usize {
        self.ends.len()
    }

    /// Sends every queued frame; returns how many the kernel accepted.
    ///
    /// A full socket or device queue (`EAGAIN`, `ENOBUFS`) drops the rest of
    /// the batch and a frame the kernel refuses (`EMSGSIZE`, `EINVAL`, `ENOMEM`) drops
    /// that frame, both counted in [`AfPacketTx::dropped`]; `EINTR` is
    /// retried. Any other error drops the batch and is returned.
    pub fn flush(&mut self) -> io::Result<usize> {
        let n = self.ends.len();
        let mut frames: [&[u8]; BATCH] = [&[]; BATCH];
        let mut start = 0;
        for (slot, &end) in frames.iter_mut().zip(&self.ends) {
            *slot = &self.buf[start..end];
            start = end;
        }
        let mut at = 0;
        let mut sent = 0;
        let mut result = Ok(());
        while at < n {
            match sys::sendmmsg_frames(&self.fd, &frames[at..n]) {
                Ok(0) => {
                    // Not expected from the kernel; never spin on it.
                    self.dropped += (n - at) as u64;
                    break;
                }
                Ok(k) => {
                    at += k;
                    sent += k;
                }
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => {}
                    Some(libc::EAGAIN | libc::ENOBUFS) => {
                        self.dropped += (n - at) as u64;
                        break;
                    }
                    // ENOMEM: also what a noqueue device (veth) answers when the
                    // frame fails validate_xmit, e.g. a vnet header whose csum_start
                    // points into the IP header.
                    Some(libc::EMSGSIZE | libc::EINVAL | libc::ENOMEM) => {
                        self.dropped += 1;
                        at += 1;
                    }
                    _ => {
                        self.dropped += (n - at) as u64;
                        result = Err(e);
                        break;
                    }
                },
            }
        }
        self.buf.clear();
        self.ends.clear();
        self.sent += sent as u64;
        result.map(|()| sent)
    }

    /// Index of the interface frames are sent on.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Frames dropped since open (full queues, refused frames, failed batches).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Frames the kernel accepted since open.
    pub fn sent(&self) -> u64 {
        self.sent
    }
}

impl Drop for AfPacketTx {
    fn drop(&mut self) {
        if !self.ends.is_empty() {
            let _ = self.flush();
        }
    }
}
