//! The unsafe edge of the AF_PACKET backend: thin, safe wrappers over the
//! few syscalls it needs (socket options, bind, poll, sendmmsg); the ring's
//! mapping is the crate's one [`crate::sys::Mmap`].
//!
//! Every `unsafe` block of the backend lives in this file or in `crate::sys`. Each wrapper takes
//! only safe Rust types, checks the return value and turns `-1` into an
//! [`io::Error`]; nothing here knows about ring layouts or frames.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::sys::cvt;
use crate::sys::getsockopt;
pub(crate) use crate::sys::{poll_any_readable, setsockopt};
use std::sync::atomic::{AtomicU32, Ordering};

/// `htons(ETH_P_ALL)`: the protocol number that receives every frame.
pub(crate) const ETH_P_ALL_BE: u16 = (libc::ETH_P_ALL as u16).to_be();

/// The system page size (ring blocks must be a multiple of it).
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf takes an integer and touches no memory of ours.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// Resolves an interface name in the calling thread's network namespace (one
/// implementation for every backend: [`crate::netlink::if_index`]).
pub(crate) use crate::netlink::if_index as ifindex;

/// Opens an `AF_PACKET`/`SOCK_RAW` socket that receives nothing until bound
/// with a protocol (protocol 0), close-on-exec.
pub(crate) fn packet_socket() -> io::Result<OwnedFd> {
    crate::sys::raw_socket(libc::AF_PACKET, "AF_PACKET needs root (CAP_NET_RAW)")
}

/// `getsockopt(PACKET_STATISTICS)` with a `tpacket_stats_v3` (reading resets the kernel's counters).
pub(crate) fn packet_stats_v3(fd: &OwnedFd) -> io::Result<libc::tpacket_stats_v3> {
    getsockopt(fd, libc::SOL_PACKET, libc::PACKET_STATISTICS).map(|(st, _)| st)
}

/// Binds a packet socket to `ifindex`, receiving `protocol_be` (network order; 0 = nothing).
pub(crate) fn bind_packet(fd: &OwnedFd, ifindex: u32, protocol_be: u16) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as libc::c_ushort;
    sll.sll_protocol = protocol_be;
    sll.sll_ifindex = ifindex as libc::c_int;
    crate::sys::bind(fd, &sll)
}

/// Waits up to `timeout_ms` (0 = don't wait) for `fd` to be readable.
/// Returns false on timeout or EINTR; clears a pending socket error.
pub(crate) fn poll_readable(fd: &OwnedFd, timeout_ms: libc::c_int) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN | libc::POLLERR,
        revents: 0,
    };
    // SAFETY: `pfd` is one valid, initialised pollfd and we pass count 1.
    let ret = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    match cvt(ret) {
        Ok(0) => Ok(false),
        Ok(_) => {
            if pfd.revents & libc::POLLERR != 0 {
                // A pending error (e.g. ENETDOWN) keeps poll() waking up until read.
                let _ = take_socket_error(fd);
            }
            Ok(pfd.revents & libc::POLLIN != 0)
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
}

/// Reads and clears `SO_ERROR`.
fn take_socket_error(fd: &OwnedFd) -> io::Result<libc::c_int> {
    getsockopt(fd, libc::SOL_SOCKET, libc::SO_ERROR).map(|(err, _)| err)
}

/// Sends `frames` (whole Ethernet frames) with one `sendmmsg(MSG_DONTWAIT)`
/// on a bound packet socket. Returns how many were sent (at least 1) or the
/// error of the first frame. At most [`SENDMMSG_MAX`] frames are looked at.
pub(crate) fn sendmmsg_frames(fd: &OwnedFd, frames: &[&[u8]]) -> io::Result<usize> {
    let n = frames.len().min(SENDMMSG_MAX);
    if n == 0 {
        return Ok(0);
    }
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; SENDMMSG_MAX];
    for (v, f) in iov.iter_mut().zip(&frames[..n]) {
        // The kernel only reads through iov_base for a send; the cast to *mut is the C ABI's.
        v.iov_base = f.as_ptr() as *mut libc::c_void;
        v.iov_len = f.len();
    }
    // SAFETY: mmsghdr is plain old data (pointers, integers, padding); all-zero
    // is valid: no name, no control data, zero-length iovec lists.
    let mut msgs: [libc::mmsghdr; SENDMMSG_MAX] = unsafe { mem::zeroed() };
    for (m, v) in msgs.iter_mut().zip(iov.iter_mut()).take(n) {
        m.msg_hdr.msg_iov = v;
        m.msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: `msgs[..n]` are initialised mmsghdrs whose iovecs point into
    // `iov`, which in turn points into the borrowed `frames`; all of them
    // outlive the call and the kernel only reads the frame bytes (it writes
    // only `msg_len` of each mmsghdr, which is ours).
    let ret = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            msgs.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    };
    cvt(ret).map(|r| r as usize)
}

/// The largest batch handed to one `sendmmsg`.
pub(crate) const SENDMMSG_MAX: usize = 64;

/// Loads a status word with acquire ordering (pairs with the kernel's barrier
/// before it hands a block to user space).
pub(crate) fn load_acquire(w: &AtomicU32) -> u32 {
    w.load(Ordering::Acquire)
}

/// Stores a status word with release ordering (our reads of the block happen
/// before the kernel may reuse it).
pub(crate) fn store_release(w: &AtomicU32, v: u32) {
    w.store(v, Ordering::Release)
}
