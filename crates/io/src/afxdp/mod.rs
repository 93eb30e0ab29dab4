//! AF_XDP backend: an XDP program steers IPv4/IPv6 frames of one interface
//! queue into an `AF_XDP` socket whose rings and packet memory (the UMEM) are
//! mapped into this process.
//!
//! ```text
//!  NIC/veth ──► xdp_steer (bpf/xdp_steer.c) ──IPv4/IPv6──► rx ring ──► recv_batch(f)
//!                   │ ARP, ND, local IPv4, other ──► kernel stack         │ Some(len): same frame
//!                   ▼                                                     ▼ back out (no copy)
//!  fill ring ◄── free UMEM frames ◄── completion ring ◄── kernel ◄── tx ring ◄── send(frame)
//! ```
//!
//! Copy mode (`XDP_COPY`) only: zero-copy is not available on veth (the lab
//! gets EOPNOTSUPP) and copy mode works on every driver. The socket binds with
//! `XDP_USE_NEED_WAKEUP` when the kernel supports it, so `flush` issues a
//! `sendto` only when the kernel asks for one.
//!
//! Offloads of the sender: a NIC hands XDP only complete wire frames. A veth
//! peer is different in two ways. Its TSO cannot reach us: attaching XDP to a
//! veth removes `NETIF_F_GSO_SOFTWARE` from the peer (`veth_xdp_set`,
//! `veth_fix_features`), so `ethtool -k` on the peer shows
//! `tcp-segmentation-offload: off [fixed]` whatever the order of `ethtool -K`
//! and attaching, and the peer's stack segments in software before the veth.
//! But its tx checksum offload stays on, and those frames arrive with
//! partial TCP/UDP checksums that XDP_REDIRECT does not mark: `recv_batch`
//! recognises and completes them ([`crate::csum::complete_if_partial`], counted in
//! [`AfXdpStats::csum_completed`]); otherwise every such segment is dropped
//! by its receiver.
//!
//! Forwarding between two interfaces: open one [`AfXdp`] per interface and,
//! inside `a.recv_batch(..)`'s closure, call `b.send(frame)` (one copy into
//! `b`'s UMEM; each socket owns its UMEM) and return `None`; then `b.flush()`.
//! Returning `Some(len)` instead transmits the rewritten frame back out of
//! the interface it came from without a copy.
//!
//! The XDP program is attached with a BPF link: it is detached when the
//! [`AfXdp`] is dropped, and also when the process dies (even by SIGKILL),
//! because the kernel then closes the link's file descriptor.
//!
//! Like every io backend this module never parses beyond what steering
//! needs and knows nothing of NAT. Without clang at build time it compiles
//! but [`AfXdp::open`] fails with a clear error, so the caller falls back to
//! AF_PACKET.

pub mod fast_path;
pub(crate) mod loader;
mod port;
mod ring;
mod sys;

#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) use tests::{require_bpf, skip_reason};

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use crate::sys::Mmap;
pub use loader::built_with_bpf;
use ring::Ring;

/// At most this many frames are handed to the closure per `recv_batch`.
const RX_BATCH: usize = 64;
/// Size of the XSKMAP in the program: queues must be below it.
const MAX_QUEUES: u32 = 64;

/// What to open: interface, queue and UMEM geometry.
#[derive(Clone, Debug)]
pub struct AfXdpConfig {
    /// Interface name, resolved in the calling thread's network namespace.
    pub ifname: String,
    /// Receive queue to bind (0 on a single-queue veth).
    pub queue: u32,
    /// Number of UMEM frames (at least 64); rings get half, rounded down to a power of two.
    pub frames: u32,
    /// Bytes per UMEM frame: 2048 or 4096.
    pub frame_size: u32,
    /// The host's own IPv4 addresses: frames to them go to the kernel, not the socket.
    pub local_v4: Vec<Ipv4Addr>,
    /// The host's own IPv6 addresses: frames to them go to the kernel, as do link-local,
    /// multicast and neighbour discovery.
    pub local_v6: Vec<Ipv6Addr>,
    /// Which families go to the socket (the other goes to the kernel).
    pub steer: Steer,
    /// XDP fast path: the most flow directions its map holds; 0 turns it off (see
    /// [`fast_path`]).
    pub fast_path_entries: u32,
}

/// Which IP families the XDP program steers to the socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Steer {
    /// IPv4 to the socket.
    pub ipv4: bool,
    /// IPv6 to the socket.
    pub ipv6: bool,
}

impl Default for Steer {
    /// Both families.
    fn default() -> Self {
        Steer {
            ipv4: true,
            ipv6: true,
        }
    }
}

impl AfXdpConfig {
    /// Queue 0, 4096 frames of 2048 bytes (8 MiB of UMEM), no local addresses.
    pub fn new(ifname: impl Into<String>) -> Self {
        AfXdpConfig {
            ifname: ifname.into(),
            queue: 0,
            frames: 4096,
            frame_size: 2048,
            local_v4: Vec::new(),
            local_v6: Vec::new(),
            steer: Steer::default(),
            fast_path_entries: 0,
        }
    }
}

/// Counters kept by the socket (ours) and the kernel (`XDP_STATISTICS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AfXdpStats {
    /// Frames handed to the `recv_batch` closure.
    pub rx_frames: u64,
    /// Frames placed on the tx ring.
    pub tx_frames: u64,
    /// Frames we could not transmit (tx ring full, no free UMEM frame, too long).
    pub tx_dropped: u64,
    /// Received TCP/UDP frames whose partial checksum (a veth peer's tx checksum
    /// offload) we completed before handing them on.
    pub csum_completed: u64,
    /// Kernel: frames dropped for lack of rx ring space or other reasons.
    pub rx_dropped: u64,
    /// Kernel: rx ring full.
    pub rx_ring_full: u64,
    /// Kernel: fill ring empty when a frame arrived.
    pub rx_fill_empty: u64,
    /// Kernel: invalid descriptors on the rx/tx rings.
    pub invalid_descs: u64,
    /// Frames addressed to another host (unicast destination MAC not the interface's),
    /// dropped by [`crate::Port::recv`] before its callback.
    pub not_for_us: u64,
}

/// One AF_XDP socket bound to one interface queue, with its UMEM, rings and
/// the XDP program that feeds it. Dropping it detaches the program.
pub struct AfXdp {
    // Field order is drop order: the program is detached first (by the last socket of
    // the interface to go, when several queues share it).
    steering: Arc<loader::Steering>,
    rx: Ring<libc::xdp_desc>,
    tx: Ring<libc::xdp_desc>,
    fill: Ring<u64>,
    comp: Ring<u64>,
    umem: Mmap,
    /// UMEM frame addresses owned by us and unused.
    free: Vec<u64>,
    frame_size: u32,
    ifindex: u32,
    need_wakeup: bool,
    stats: AfXdpStats,
    fd: OwnedFd,
    /// The interface's MAC: unicast frames for any other (XDP sees every frame a bridge
    /// floods to the port) are not translated. `None`: not Ethernet, nothing filtered.
    own_mac: Option<[u8; 6]>,
}

/// A socket's pieces between binding and attaching the program.
struct Parts {
    rx: Ring<libc::xdp_desc>,
    tx: Ring<libc::xdp_desc>,
    fill: Ring<u64>,
    comp: Ring<u64>,
    umem: Mmap,
    free: Vec<u64>,
    frame_size: u32,
    ifindex: u32,
    need_wakeup: bool,
    fd: OwnedFd,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl AfXdp {
    /// Opens the socket, sets up UMEM and rings, binds in copy mode and attaches
    /// the steering program (native mode, falling back to generic).
    pub fn open(cfg: &AfXdpConfig) -> io::Result<Self> {
        let mut v = Self::open_queues(cfg, &[cfg.queue])?;
        v.pop()
            .ok_or_else(|| invalid("AF_XDP: no queue to open".into()))
    }

    /// One socket per queue in `queues` of `cfg.ifname` (each with its own UMEM and
    /// rings, for one worker each), fed by one steering program that redirects every
    /// queue's frames to its socket. `cfg.queue` is ignored.
    pub fn open_queues(cfg: &AfXdpConfig, queues: &[u32]) -> io::Result<Vec<Self>> {
        let mut socks = Vec::with_capacity(queues.len());
        for &q in queues {
            socks.push(Self::socket(&AfXdpConfig {
                queue: q,
                ..cfg.clone()
            })?);
        }
        let fds: Vec<(u32, &OwnedFd)> = queues
            .iter()
            .copied()
            .zip(socks.iter().map(|s| &s.fd))
            .collect();
        let ifindex = socks.first().map_or(0, |s| s.ifindex);
        let own_mac = crate::netlink::if_mac(&cfg.ifname).ok();
        let steering = Arc::new(loader::attach(
            &cfg.ifname,
            ifindex,
            &fds,
            &cfg.local_v4,
            &cfg.local_v6,
            cfg.steer,
            cfg.fast_path_entries,
        )?);
        Ok(socks
            .into_iter()
            .map(|p| {
                let mut s = AfXdp {
                    steering: Arc::clone(&steering),
                    rx: p.rx,
                    tx: p.tx,
                    fill: p.fill,
                    comp: p.comp,
                    umem: p.umem,
                    free: p.free,
                    frame_size: p.frame_size,
                    ifindex: p.ifindex,
                    need_wakeup: p.need_wakeup,
                    stats: AfXdpStats::default(),
                    fd: p.fd,
                    own_mac,
                };
                s.refill();
                s
            })
            .collect())
    }

    /// A bound socket with its UMEM and rings, not yet fed by a program.
    fn socket(cfg: &AfXdpConfig) -> io::Result<Parts> {
        if !built_with_bpf() {
            return Err(io::Error::new(io::ErrorKind::Unsupported, loader::NO_CLANG));
        }
        if cfg.frame_size != 2048 && cfg.frame_size != 4096 {
            return Err(invalid(format!(
                "AF_XDP: frame_size {} must be 2048 or 4096",
                cfg.frame_size
            )));
        }
        if !(64..=1 << 20).contains(&cfg.frames) {
            return Err(invalid(format!(
                "AF_XDP: frames {} must be between 64 and 1048576",
                cfg.frames
            )));
        }
        if cfg.queue >= MAX_QUEUES {
            return Err(invalid(format!(
                "AF_XDP: queue {} must be below {MAX_QUEUES}",
                cfg.queue
            )));
        }
        let ifindex = sys::ifindex(&cfg.ifname)?;
        let fd = sys::xdp_socket()?;
        let ctx = |what: &str, e: io::Error| {
            io::Error::new(e.kind(), format!("AF_XDP on {}: {what}: {e}", cfg.ifname))
        };

        let umem_len = cfg.frames as usize * cfg.frame_size as usize;
        let umem = Mmap::anonymous(umem_len).map_err(|e| ctx("UMEM mmap", e))?;
        let reg = libc::xdp_umem_reg_v1 {
            addr: umem.as_ptr() as u64,
            len: umem_len as u64,
            chunk_size: cfg.frame_size,
            headroom: 0,
        };
        sys::setsockopt_xdp(&fd, libc::XDP_UMEM_REG, &reg).map_err(|e| ctx("XDP_UMEM_REG", e))?;

        // Largest power of two <= frames / 2.
        let ring_size = 1u32 << (31 - (cfg.frames / 2).leading_zeros());
        for (opt, name) in [
            (libc::XDP_UMEM_FILL_RING, "XDP_UMEM_FILL_RING"),
            (libc::XDP_UMEM_COMPLETION_RING, "XDP_UMEM_COMPLETION_RING"),
            (libc::XDP_RX_RING, "XDP_RX_RING"),
            (libc::XDP_TX_RING, "XDP_TX_RING"),
        ] {
            sys::setsockopt_xdp(&fd, opt, &ring_size).map_err(|e| ctx(name, e))?;
        }
        let off = sys::mmap_offsets(&fd).map_err(|e| ctx("XDP_MMAP_OFFSETS", e))?;
        let rx = Ring::map(&fd, &off.rx, ring_size, libc::XDP_PGOFF_RX_RING as u64)
            .map_err(|e| ctx("rx ring mmap", e))?;
        let tx = Ring::map(&fd, &off.tx, ring_size, libc::XDP_PGOFF_TX_RING as u64)
            .map_err(|e| ctx("tx ring mmap", e))?;
        let fill = Ring::map(&fd, &off.fr, ring_size, libc::XDP_UMEM_PGOFF_FILL_RING)
            .map_err(|e| ctx("fill ring mmap", e))?;
        let comp = Ring::map(
            &fd,
            &off.cr,
            ring_size,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
        )
        .map_err(|e| ctx("completion ring mmap", e))?;

        let copy = libc::XDP_COPY;
        let need_wakeup =
            match sys::bind_xdp(&fd, ifindex, cfg.queue, copy | libc::XDP_USE_NEED_WAKEUP) {
                Ok(()) => true,
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    sys::bind_xdp(&fd, ifindex, cfg.queue, copy).map_err(|e| ctx("bind", e))?;
                    false
                }
                Err(e) => return Err(ctx(&format!("bind to queue {}", cfg.queue), e)),
            };

        let free = (0..cfg.frames as u64)
            .rev()
            .map(|i| i * cfg.frame_size as u64)
            .collect();
        Ok(Parts {
            rx,
            tx,
            fill,
            comp,
            umem,
            free,
            frame_size: cfg.frame_size,
            ifindex,
            need_wakeup,
            fd,
        })
    }

    /// Gives free UMEM frames to the kernel for receiving (up to the fill ring's room).
    fn refill(&mut self) {
        let mut pushed = false;
        while let Some(&addr) = self.free.last() {
            if !self.fill.push(addr) {
                break;
            }
            self.free.pop();
            pushed = true;
        }
        if pushed {
            self.fill.publish();
        }
    }

    /// Takes back the frames the kernel has finished transmitting.
    fn reap_completions(&mut self) {
        let mask = !(self.frame_size as u64 - 1);
        let mut any = false;
        while let Some(addr) = self.comp.pop() {
            self.free.push(addr & mask);
            any = true;
        }
        if any {
            self.comp.release();
        }
    }

    /// Receives up to a batch (64 frames), waiting up to `timeout` for the
    /// first one, and calls `f` with each frame's bytes in the UMEM.
    ///
    /// `f` returns `Some(len)` to transmit the first `len` bytes of the
    /// (possibly rewritten) frame back out of this socket's interface without
    /// a copy, or `None` to recycle it (drop, or after copying it elsewhere
    /// with another socket's [`AfXdp::send`]). `len` may not reach past the
    /// end of the frame's UMEM chunk. Returns the number of frames received;
    /// transmissions are kicked before returning.
    pub fn recv_batch(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(&mut [u8]) -> Option<usize>,
    ) -> io::Result<usize> {
        self.recv_batch_room(timeout, |chunk, len| f(&mut chunk[..len]))
    }

    /// Like [`recv_batch`](Self::recv_batch), but `f` gets the whole rest of the frame's
    /// UMEM chunk and the received length (`chunk[..len]` is the frame), so it can send
    /// back a frame longer than the one received (an ICMP error quoting it, a packet whose
    /// headers grew): return `Some(n)` with `n <= chunk.len()`.
    pub fn recv_batch_room(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(&mut [u8], usize) -> Option<usize>,
    ) -> io::Result<usize> {
        self.reap_completions();
        self.refill();
        if self.rx.available() == 0 {
            if self.need_wakeup && self.fill.needs_wakeup() {
                sys::kick_rx(&self.fd);
            }
            if timeout.is_zero() || !sys::poll_any_readable(&[&self.fd], timeout)? {
                return Ok(0);
            }
        }
        let fs = self.frame_size as u64;
        let (mut n, mut queued) = (0usize, 0u32);
        while n < RX_BATCH {
            let Some(d) = self.rx.pop() else { break };
            n += 1;
            let chunk = d.addr & !(fs - 1);
            let room = (chunk + fs).saturating_sub(d.addr) as usize;
            let start = d.addr as usize;
            // SAFETY: [start, start + room) lies within one chunk that the kernel handed
            // to us on the rx ring (`bytes_mut` checks it is inside the UMEM); the kernel
            // does not touch the chunk again until we put it on the fill or tx ring, and
            // the slice dies with this call of `f`.
            let buf = unsafe { self.umem.bytes_mut(start, room) };
            let verdict = match buf {
                Some(buf) if d.len as usize <= room => {
                    if crate::csum::complete_if_partial(&mut buf[..d.len as usize]) {
                        self.stats.csum_completed += 1;
                    }
                    f(buf, d.len as usize)
                }
                _ => None,
            };
            match verdict {
                Some(len)
                    if len > 0
                        && len <= room
                        && self.tx.push(libc::xdp_desc {
                            addr: d.addr,
                            len: len as u32,
                            options: 0,
                        }) =>
                {
                    queued += 1
                }
                Some(_) => {
                    self.stats.tx_dropped += 1;
                    self.free.push(chunk);
                }
                None => self.free.push(chunk),
            }
        }
        self.rx.release();
        self.stats.rx_frames += n as u64;
        self.stats.tx_frames += queued as u64;
        if queued > 0 {
            self.flush()?;
        }
        self.refill();
        Ok(n)
    }

    /// Lends the frames the next [`AfXdp::recv_batch_room`] would take (at most one
    /// batch) to `f`, read-only, taking none (see [`crate::Port::peek`]).
    pub fn peek_batch(&mut self, mut f: impl FnMut(&[u8])) {
        let fs = self.frame_size as u64;
        let n = self.rx.available().min(RX_BATCH as u32);
        for k in 0..n {
            let Some(d) = self.rx.peek(k) else { break };
            let chunk = d.addr & !(fs - 1);
            if d.addr + u64::from(d.len) > chunk + fs {
                continue;
            }
            // SAFETY: as in `recv_batch_room`: the range lies within one chunk the kernel
            // handed to us on the rx ring (`bytes_mut` checks it is inside the UMEM), which
            // it does not touch until we put it on the fill or tx ring, and the slice dies
            // with this call of `f`.
            if let Some(buf) = unsafe { self.umem.bytes_mut(d.addr as usize, d.len as usize) } {
                f(buf);
            }
        }
    }

    /// Copies `frame` into a free UMEM frame and puts it on the tx ring.
    /// Nothing leaves until [`AfXdp::flush`]. Fails with `WouldBlock` when no
    /// frame or tx slot is free (counted in `tx_dropped`), `InvalidInput` when
    /// the frame does not fit a UMEM frame.
    pub fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        if frame.is_empty() || frame.len() > self.frame_size as usize {
            self.stats.tx_dropped += 1;
            return Err(invalid(format!(
                "AF_XDP: frame of {} bytes does not fit a {}-byte UMEM frame",
                frame.len(),
                self.frame_size
            )));
        }
        if self.free.is_empty() || self.tx.free() == 0 {
            self.flush()?;
        }
        let Some(addr) = self.free.pop() else {
            self.stats.tx_dropped += 1;
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "AF_XDP: no free UMEM frame",
            ));
        };
        // SAFETY: `addr` is a chunk from our free list, on neither the fill nor the tx
        // ring, so the kernel does not access it; frame.len() <= frame_size was checked
        // above, so the range stays inside the chunk (`bytes_mut` checks the mapping).
        match unsafe { self.umem.bytes_mut(addr as usize, frame.len()) } {
            Some(chunk) => chunk.copy_from_slice(frame),
            None => {
                self.free.push(addr);
                self.stats.tx_dropped += 1;
                return Err(io::Error::other("AF_XDP: UMEM frame out of range"));
            }
        }
        let desc = libc::xdp_desc {
            addr,
            len: frame.len() as u32,
            options: 0,
        };
        if !self.tx.push(desc) {
            self.free.push(addr);
            self.stats.tx_dropped += 1;
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "AF_XDP: tx ring full",
            ));
        }
        self.stats.tx_frames += 1;
        Ok(())
    }

    /// Publishes queued transmissions, kicks the kernel when it needs it, and
    /// reaps completed frames.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.tx.unpublished() > 0 {
            self.tx.publish();
        }
        // Copy mode transmits inside sendto, a bounded batch per call, and
        // always wants the kick: kick until the kernel has taken everything
        // (or stops making progress).
        for _ in 0..64 {
            let pending = self.tx.in_flight();
            if pending == 0 {
                break;
            }
            sys::kick_tx(&self.fd)?;
            if self.tx.in_flight() == pending {
                break;
            }
        }
        self.reap_completions();
        Ok(())
    }

    /// The interface index the socket is bound to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Received frames whose partial TCP/UDP checksum was completed (see
    /// [`AfXdpStats::csum_completed`]); no system call, unlike [`AfXdp::stats`].
    pub fn csum_completed(&self) -> u64 {
        self.stats.csum_completed
    }

    /// Whether the program runs in native (driver) XDP mode rather than generic.
    pub fn native_mode(&self) -> bool {
        self.steering.native
    }

    /// The interface's XDP fast path (shared by its sockets), when opened with
    /// `fast_path_entries > 0`.
    pub fn fast_path(&self) -> Option<Arc<fast_path::FastPath>> {
        self.steering.fast.clone()
    }

    /// Our counters plus the kernel's `XDP_STATISTICS`.
    pub fn stats(&self) -> io::Result<AfXdpStats> {
        let k = sys::statistics(&self.fd)?;
        Ok(AfXdpStats {
            rx_dropped: k.rx_dropped,
            rx_ring_full: k.rx_ring_full,
            rx_fill_empty: k.rx_fill_ring_empty_descs,
            invalid_descs: k.rx_invalid_descs + k.tx_invalid_descs,
            ..self.stats
        })
    }
}

/// Waits until one of `socks` has frames to receive or `timeout` passes (the tests' idle
/// wait on bare sockets; workers use [`crate::Port::wait`]).
#[cfg(test)]
pub(crate) fn wait_readable(socks: &[&AfXdp], timeout: Duration) -> io::Result<bool> {
    let fds: Vec<&OwnedFd> = socks.iter().map(|s| &s.fd).collect();
    sys::poll_any_readable(&fds, timeout)
}
