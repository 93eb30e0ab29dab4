//! Syscall wrappers every socket backend needs, in one place: errno conversion, plain
//! socket options, and waiting on several descriptors. Backend-specific calls (rings,
//! bind, statistics) stay in each backend's own `sys` module.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Turns a `-1` syscall return into the thread's `errno`.
pub(crate) fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `setsockopt(fd, level, name, &value, sizeof value)` for a plain-old-data `T`.
/// A close-on-exec `SOCK_RAW` socket of `domain`; EPERM/EACCES become
/// `PermissionDenied` with `denied` as the message (what privilege is missing).
pub(crate) fn raw_socket(domain: libc::c_int, denied: &'static str) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments; no memory is passed.
    let fd = unsafe { libc::socket(domain, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    match cvt(fd) {
        // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
        Ok(fd) => Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => {
            Err(io::Error::new(io::ErrorKind::PermissionDenied, denied))
        }
        Err(e) => Err(e),
    }
}

pub(crate) fn setsockopt<T: Copy>(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` is a live, initialised `T` (Copy: no drop glue, no interior
    // pointers the kernel could retain) and the length passed is exactly its size, so
    // the kernel reads only within it.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            mem::size_of::<T>() as libc::socklen_t,
        )
    };
    cvt(ret).map(drop)
}

/// Waits until one of `fds` is readable or `timeout` passes. Returns whether any is;
/// an interrupted wait counts as "none".
pub(crate) fn poll_any_readable(
    fds: &[&OwnedFd],
    timeout: std::time::Duration,
) -> io::Result<bool> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `pfds` is a live, correctly sized array of pollfd for the duration of the
    // call, and every fd in it is borrowed from an OwnedFd, so it stays open.
    let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(n > 0)
}
