//! The unsafe edge of the AF_XDP backend: thin, safe wrappers over the
//! syscalls it needs (socket, socket options, bind, poll, sendto); the rings
//! and the UMEM are mapped with the crate's one [`crate::sys::Mmap`].
//!
//! Every `unsafe` block of the socket side lives here, in `crate::sys`, or in
//! `ring.rs`/`mod.rs` next to the raw memory it guards. Each wrapper takes only safe
//! Rust types, checks the return value and turns `-1` into an [`io::Error`].

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::sys::getsockopt;
pub(crate) use crate::sys::poll_any_readable;

/// Resolves an interface name in the calling thread's network namespace (one
/// implementation for every backend: [`crate::netlink::if_index`]).
pub(crate) use crate::netlink::if_index as ifindex;

/// Opens an `AF_XDP` socket, close-on-exec, with clear errors for a kernel
/// without AF_XDP (`Unsupported`) and a caller without privileges.
pub(crate) fn xdp_socket() -> io::Result<OwnedFd> {
    crate::sys::raw_socket(
        libc::AF_XDP,
        "AF_XDP needs root (CAP_NET_RAW and CAP_BPF/CAP_SYS_ADMIN)",
    )
    .map_err(|e| match e.raw_os_error() {
        Some(libc::EAFNOSUPPORT) => io::Error::new(
            io::ErrorKind::Unsupported,
            "AF_XDP is not supported by this kernel (CONFIG_XDP_SOCKETS)",
        ),
        _ => e,
    })
}

/// `setsockopt(fd, SOL_XDP, name, &value, sizeof value)` for a plain-old-data `T`.
pub(crate) fn setsockopt_xdp<T: Copy>(
    fd: &OwnedFd,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    crate::sys::setsockopt(fd, libc::SOL_XDP, name, value)
}

/// Reads the ring layout (`XDP_MMAP_OFFSETS`, the flags-carrying version).
pub(crate) fn mmap_offsets(fd: &OwnedFd) -> io::Result<libc::xdp_mmap_offsets> {
    let (off, len) =
        getsockopt::<libc::xdp_mmap_offsets>(fd, libc::SOL_XDP, libc::XDP_MMAP_OFFSETS)?;
    if len != mem::size_of::<libc::xdp_mmap_offsets>() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "AF_XDP: kernel too old (XDP_MMAP_OFFSETS without ring flags, < 5.4)",
        ));
    }
    Ok(off)
}

/// Reads the socket's drop counters (`XDP_STATISTICS`).
pub(crate) fn statistics(fd: &OwnedFd) -> io::Result<libc::xdp_statistics> {
    getsockopt(fd, libc::SOL_XDP, libc::XDP_STATISTICS).map(|(st, _)| st)
}

/// Binds the socket to `ifindex`/`queue` with `flags` (`XDP_COPY`, ...).
pub(crate) fn bind_xdp(fd: &OwnedFd, ifindex: u32, queue: u32, flags: u16) -> io::Result<()> {
    let sxdp = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: 0,
    };
    crate::sys::bind(fd, &sxdp)
}

/// Kicks the kernel to process the tx ring (`sendto(fd, NULL, 0, MSG_DONTWAIT)`).
/// Transient conditions (ring busy, no buffers, device down) are not errors.
pub(crate) fn kick_tx(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: a zero-length send with no buffer and no address; the kernel
    // touches no memory of ours.
    let ret = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    if ret >= 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::ENETDOWN | libc::EINTR) => Ok(()),
        _ => Err(e),
    }
}

/// Kicks the kernel to refill from the fill ring (`recvfrom(MSG_DONTWAIT)`), for
/// drivers that set `XDP_RING_NEED_WAKEUP` on the fill ring.
pub(crate) fn kick_rx(fd: &OwnedFd) {
    // SAFETY: a zero-length receive with no buffer and no address.
    let _ = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            std::ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
}
