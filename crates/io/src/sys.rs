//! Syscall wrappers every socket backend needs, in one place: errno conversion, plain
//! socket options, waiting on several descriptors, and [`Mmap`] — the one memory mapping
//! behind the AF_PACKET ring, the AF_XDP rings and the AF_XDP UMEM. Backend-specific calls
//! (bind, statistics, ring protocols) stay in each backend's own `sys` module.
//!
//! Every `unsafe` block here has a `// SAFETY:` line; the wrappers take only safe Rust
//! types and turn `-1` into an [`io::Error`].

use std::io;
use std::mem;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// Turns a `-1` syscall return into the thread's `errno`.
pub(crate) fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

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

/// `setsockopt(fd, level, name, &value, sizeof value)` for a plain-old-data `T`.
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

/// `bind(fd, &addr, sizeof addr)` for a plain-old-data socket address `T`
/// (`sockaddr_ll`, `sockaddr_xdp`); the kernel checks its family and fields.
pub(crate) fn bind<T: Copy>(fd: &OwnedFd, addr: &T) -> io::Result<()> {
    // SAFETY: `addr` is a live, initialised `T` and the length passed is exactly its size,
    // so the kernel reads only within it (and does not keep the pointer).
    let ret = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (addr as *const T).cast(),
            mem::size_of::<T>() as libc::socklen_t,
        )
    };
    cvt(ret).map(drop)
}

/// Plain old data a `getsockopt` may fill: integers only, so all-zero and every other
/// bit pattern the kernel writes are valid values.
///
/// # Safety
///
/// Implement only for integers and `repr(C)` structs made of integers (no `bool`, enum,
/// reference or pointer).
pub(crate) unsafe trait Pod: Copy {}

// SAFETY: an integer.
unsafe impl Pod for libc::c_int {}
// SAFETY: three `c_uint`s.
unsafe impl Pod for libc::tpacket_stats_v3 {}
// SAFETY: four `xdp_ring_offset`s, each four `u64`s.
unsafe impl Pod for libc::xdp_mmap_offsets {}
// SAFETY: six `u64`s.
unsafe impl Pod for libc::xdp_statistics {}
// SAFETY: an integer.
unsafe impl Pod for u64 {}
// SAFETY: a pid (`c_int`), a uid and a gid (`u32`s).
unsafe impl Pod for libc::ucred {}
// SAFETY: an array of group ids (`u32`s).
unsafe impl Pod for [libc::gid_t; 256] {}

/// `getsockopt(fd, level, name)` into a zeroed `T`: the value, and how many bytes of it
/// the kernel wrote (an older kernel may write fewer).
pub(crate) fn getsockopt<T: Pod>(
    fd: impl AsFd,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<(T, usize)> {
    // SAFETY: `T: Pod`: all-zero is a valid value.
    let mut v: T = unsafe { mem::zeroed() };
    let mut len = mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is a live, writable `T` of `len` bytes and `len` is a valid in/out
    // length: the kernel writes at most `len` bytes, and whatever it writes is a valid
    // `T` (`Pod`).
    let ret = unsafe {
        libc::getsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            name,
            (&mut v as *mut T).cast(),
            &mut len,
        )
    };
    cvt(ret)?;
    Ok((v, len as usize))
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

/// A memory mapping owned by this value, unmapped on drop: an anonymous one (the AF_XDP
/// UMEM) or a shared one of a socket's ring at a page offset (the AF_PACKET ring, the four
/// AF_XDP rings).
///
/// The kernel may write into the mapping at any time, in the parts its ring protocol gives
/// it. The safe ways in respect that: [`Mmap::atomic_u32`] (a word the kernel also
/// accesses, only atomically) and [`Mmap::user_block`] (a block the TPACKET protocol has
/// handed to user space). [`Mmap::bytes_mut`] and [`Mmap::as_ptr`] are for callers that
/// know from their own ring protocol which bytes the kernel leaves alone.
#[derive(Debug)]
pub(crate) struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned exclusively by this value (no other Rust handle to it
// exists) and is process-wide memory, so moving the owner to another thread is sound. It
// is not Sync: every access that is not atomic needs `&mut self` or `unsafe`.
unsafe impl Send for Mmap {}

impl Mmap {
    /// Anonymous, private, pre-faulted memory of `len` bytes (the AF_XDP UMEM).
    pub(crate) fn anonymous(len: usize) -> io::Result<Mmap> {
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        // SAFETY: a fresh anonymous mapping at a kernel-chosen address aliases no Rust
        // object; failure is reported as MAP_FAILED and checked in `from_raw`.
        let p = unsafe { map(len, flags, -1, 0) };
        Self::from_raw(p, len)
    }

    /// Maps `len` bytes of `fd` at byte `offset` (a page offset such as
    /// `XDP_PGOFF_RX_RING`, or 0 for a packet ring), shared and read-write, pre-faulted and
    /// locked in memory when `RLIMIT_MEMLOCK` allows (unlocked otherwise).
    pub(crate) fn shared(fd: &OwnedFd, len: usize, offset: u64) -> io::Result<Mmap> {
        let off = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mmap offset too large"))?;
        let flags = libc::MAP_SHARED | libc::MAP_POPULATE;
        // SAFETY: maps a region the kernel exposes for this socket at a kernel-chosen
        // address (aliasing no Rust object); the kernel checks `len` and `off` against
        // the ring it set up and fails otherwise (MAP_FAILED, checked).
        let p = unsafe { map(len, flags | libc::MAP_LOCKED, fd.as_raw_fd(), off) };
        let p = if p == libc::MAP_FAILED {
            // MAP_LOCKED fails under a small RLIMIT_MEMLOCK; retry unlocked.
            // SAFETY: as above.
            unsafe { map(len, flags, fd.as_raw_fd(), off) }
        } else {
            p
        };
        Self::from_raw(p, len)
    }

    fn from_raw(p: *mut libc::c_void, len: usize) -> io::Result<Mmap> {
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(Mmap { ptr, len })
    }

    /// The mapping's first byte (page-aligned). Dereferencing it is the caller's `unsafe`.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length of the mapping in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The 4-byte word at `off` as an atomic (`None` if out of range or misaligned): a
    /// status word or ring index the kernel flips concurrently; atomics with
    /// acquire/release give the ordering the ring protocols rely on.
    pub(crate) fn atomic_u32(&self, off: usize) -> Option<&AtomicU32> {
        if !off.is_multiple_of(4) || off.checked_add(4).is_none_or(|end| end > self.len) {
            return None;
        }
        // SAFETY: `off..off+4` lies inside the live mapping (checked above) and the
        // mapping is page-aligned, so the pointer is 4-byte aligned. The word is only ever
        // accessed atomically by us, and the kernel accesses it with its own
        // atomic/barriered stores; the reference borrows `self`, so it cannot outlive the
        // mapping.
        Some(unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(off).cast::<u32>()) })
    }

    /// The TPACKET block `off..off+len` as a mutable slice, if and only if its status word
    /// (at `off + status_off`, read with acquire ordering) has `TP_STATUS_USER` set;
    /// `None` if the kernel owns it or the range is bad.
    ///
    /// While the status says `TP_STATUS_USER` the kernel does not touch the block
    /// (TPACKET_V3 ring protocol), until we store `TP_STATUS_KERNEL` again with
    /// [`Mmap::atomic_u32`], which the `&mut` borrow of the returned slice keeps us from
    /// doing while it lives.
    pub(crate) fn user_block(
        &mut self,
        off: usize,
        len: usize,
        status_off: usize,
    ) -> Option<&mut [u8]> {
        if off.checked_add(len).is_none_or(|end| end > self.len) || status_off.checked_add(4)? > len
        {
            return None;
        }
        let status = self.atomic_u32(off + status_off)?.load(Ordering::Acquire);
        if status & libc::TP_STATUS_USER == 0 {
            return None;
        }
        // SAFETY: the range is inside the live mapping (checked above); the `&mut self`
        // borrow makes the slice the only Rust reference into the mapping for its
        // lifetime; the kernel handed the block to user space (status read with acquire
        // ordering, so its writes are visible) and does not write it again until we give
        // it back.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(off), len) })
    }

    /// The bytes `off..off+len` as a mutable slice (`None` if out of range).
    ///
    /// # Safety
    ///
    /// The kernel must not access the range while the slice lives: by the caller's ring
    /// protocol it owns no descriptor of it (an AF_XDP UMEM chunk taken from the rx ring
    /// or the free list, on neither the fill nor the tx ring). Other Rust references are
    /// excluded by the `&mut self` borrow.
    pub(crate) unsafe fn bytes_mut(&mut self, off: usize, len: usize) -> Option<&mut [u8]> {
        if off.checked_add(len).is_none_or(|end| end > self.len) {
            return None;
        }
        // SAFETY: the range is inside the live mapping (checked above); `&mut self` makes
        // the slice the only Rust reference into it for its lifetime, and the caller
        // guarantees the kernel leaves it alone meanwhile.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(off), len) })
    }
}

/// `mmap(NULL, len, PROT_READ | PROT_WRITE, flags, fd, off)`.
///
/// # Safety
///
/// The caller must not map over memory Rust owns (we never pass `MAP_FIXED`) and must
/// check the result against `MAP_FAILED`.
unsafe fn map(
    len: usize,
    flags: libc::c_int,
    fd: libc::c_int,
    off: libc::off_t,
) -> *mut libc::c_void {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    // SAFETY: no address hint and no MAP_FIXED: the kernel picks fresh addresses, so the
    // mapping cannot overlap any Rust object; the caller checks for MAP_FAILED.
    unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, off) }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe exactly the mapping made in the constructor, and no
        // reference into it can outlive `self` (they all borrow it).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_mapping_bounds_and_words() {
        let mut m = Mmap::anonymous(8192).expect("anonymous mmap");
        assert_eq!(m.len(), 8192);
        assert!(m.atomic_u32(8188).is_some());
        assert!(m.atomic_u32(8189).is_none(), "misaligned");
        assert!(m.atomic_u32(8192).is_none(), "past the end");
        assert!(m.atomic_u32(usize::MAX - 1).is_none(), "overflow");
        m.atomic_u32(4)
            .unwrap()
            .store(0xDEAD_BEEF, Ordering::Relaxed);
        // SAFETY: an anonymous mapping the kernel never writes by itself.
        let b = unsafe { m.bytes_mut(4, 4) }.unwrap();
        assert_eq!(b, &0xDEAD_BEEFu32.to_ne_bytes());
        b[0] ^= 0xFF;
        assert_ne!(
            m.atomic_u32(4).unwrap().load(Ordering::Relaxed),
            0xDEAD_BEEF
        );
        // SAFETY: as above.
        unsafe {
            assert!(m.bytes_mut(8000, 193).is_none());
            assert!(m.bytes_mut(usize::MAX, 2).is_none());
            assert_eq!(m.bytes_mut(8192, 0).map(|b| b.len()), Some(0));
        }
    }

    #[test]
    fn user_block_only_while_the_status_says_user() {
        let mut m = Mmap::anonymous(4096).expect("anonymous mmap");
        assert!(
            m.user_block(0, 1024, 8).is_none(),
            "kernel-owned (status 0)"
        );
        m.atomic_u32(8)
            .unwrap()
            .store(libc::TP_STATUS_USER, Ordering::Release);
        assert_eq!(m.user_block(0, 1024, 8).map(|b| b.len()), Some(1024));
        assert!(
            m.user_block(0, 1024, 1022).is_none(),
            "status past the block"
        );
        assert!(
            m.user_block(3072, 2048, 8).is_none(),
            "block past the mapping"
        );
    }
}
