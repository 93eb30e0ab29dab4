//! Batched UDP on a connected socket, for traffic tools: [`SendBatch`] offers one payload
//! many times with one `sendmmsg`, [`RecvBatch`] takes what is queued with one
//! `recvmmsg`. Each owns its buffers and message headers, built once, so a call allocates
//! nothing and does no per-datagram set-up.
//!
//! This module is for test gear (the lab's traffic generator and its sink): it never
//! parses what it sends or receives and is not a gateway [`crate::Port`]. The socket is
//! the caller's (opened, bound and connected as it likes); the kernel reports anything
//! wrong with it as an error of the call. Its `unsafe` (zeroed headers, the two syscalls)
//! is in this file, each block with its `// SAFETY:` line.
//!
//! The headers hold raw pointers into the buffers: the buffers are `Vec`s written only
//! before those pointers are taken and never reached through a reference afterwards, so
//! the pointers stay valid (a `Vec`'s heap block does not move when the `Vec` does) for as
//! long as the batch lives.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

use crate::sys::cvt;

/// The most datagrams one `sendmmsg` / `recvmmsg` call moves (the kernel's `UIO_MAXIOV`);
/// batches are at most this large.
pub const MAX_BATCH: usize = 1024;

/// `capacity` message headers, header `i` with one iovec of `len` bytes at
/// `base + i * stride`, and no address or control data.
#[derive(Debug)]
struct Headers {
    hdrs: Vec<libc::mmsghdr>,
    /// Pointed at by `hdrs`; kept alive and unmoved (its heap block) with them.
    _iovs: Vec<libc::iovec>,
}

impl Headers {
    /// The caller keeps `base .. base + (capacity - 1) * stride + len` alive, unmoved and
    /// untouched by references for as long as the headers are used.
    fn new(base: *mut u8, len: usize, stride: usize, capacity: usize) -> Headers {
        let mut iovs: Vec<libc::iovec> = (0..capacity)
            .map(|i| libc::iovec {
                iov_base: base.wrapping_add(i * stride).cast(),
                iov_len: len,
            })
            .collect();
        let iov0 = iovs.as_mut_ptr();
        let hdrs = (0..capacity)
            .map(|i| {
                // SAFETY: mmsghdr is plain old data (integers and raw pointers); all-zero
                // is a valid value: no name, no control data, no flags.
                let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
                h.msg_hdr.msg_iov = iov0.wrapping_add(i);
                h.msg_hdr.msg_iovlen = 1;
                h
            })
            .collect();
        Headers { hdrs, _iovs: iovs }
    }
}

/// One payload offered up to `capacity` times per call with one `sendmmsg`.
#[derive(Debug)]
pub struct SendBatch {
    hdrs: Headers,
    /// Every header's iovec points at it; only the kernel reads it, after construction.
    _payload: Vec<u8>,
}

impl SendBatch {
    /// A batch of `capacity` datagrams (clamped to 1..=[`MAX_BATCH`]), each a copy of
    /// `payload` (which may be empty).
    pub fn new(payload: &[u8], capacity: usize) -> SendBatch {
        let mut payload = payload.to_vec();
        let capacity = capacity.clamp(1, MAX_BATCH);
        let hdrs = Headers::new(payload.as_mut_ptr(), payload.len(), 0, capacity);
        SendBatch {
            hdrs,
            _payload: payload,
        }
    }

    /// Datagrams one call may send.
    pub fn capacity(&self) -> usize {
        self.hdrs.hdrs.len()
    }

    /// Offers `count` datagrams (at most [`SendBatch::capacity`]) on the connected socket
    /// `sock` with one `sendmmsg(MSG_DONTWAIT)`: never blocks. Returns how many the kernel
    /// took (fewer when its buffers fill), or the error of the first one (EAGAIN,
    /// ENOBUFS, ECONNREFUSED after an ICMP error, EDESTADDRREQ if not connected, ...).
    pub fn send(&mut self, sock: &impl AsFd, count: usize) -> io::Result<usize> {
        let hdrs = &mut self.hdrs.hdrs;
        let n = count.min(hdrs.len());
        // SAFETY: `hdrs[..n]` are initialised headers, each with one iovec over the live
        // payload (see `Headers::new`), no name and no control data; the kernel reads the
        // payload and writes only each header's `msg_len`. `n <= MAX_BATCH` fits a c_uint,
        // and the descriptor is borrowed, so it stays open for the call.
        let ret = unsafe {
            libc::sendmmsg(
                sock.as_fd().as_raw_fd(),
                hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        cvt(ret).map(|n| n as usize)
    }
}

/// Up to `capacity` datagrams taken per call with one `recvmmsg`, each into a buffer of
/// its own (longer datagrams are truncated to it).
#[derive(Debug)]
pub struct RecvBatch {
    hdrs: Headers,
    /// `capacity` buffers of `buf_len` bytes back to back; only the kernel writes them.
    _bufs: Vec<u8>,
}

impl RecvBatch {
    /// A batch of `capacity` buffers (clamped to 1..=[`MAX_BATCH`]) of `buf_len` bytes.
    pub fn new(capacity: usize, buf_len: usize) -> RecvBatch {
        let capacity = capacity.clamp(1, MAX_BATCH);
        let mut bufs = vec![0u8; capacity * buf_len];
        let hdrs = Headers::new(bufs.as_mut_ptr(), buf_len, buf_len, capacity);
        RecvBatch { hdrs, _bufs: bufs }
    }

    /// Takes the datagrams queued on `sock` with one `recvmmsg(MSG_WAITFORONE)`: waits
    /// for the first as the socket says (blocking, its read timeout, or EAGAIN when
    /// non-blocking), then takes what is queued without waiting, up to the capacity.
    /// Returns how many arrived; the bytes themselves are not kept for the caller.
    pub fn recv(&mut self, sock: &impl AsFd) -> io::Result<usize> {
        let hdrs = &mut self.hdrs.hdrs;
        // SAFETY: every header has one iovec over its own `buf_len`-byte slice of the live
        // `_bufs` (see `Headers::new`), no name and no control data, so the kernel writes
        // only within those buffers and the headers' length and flag fields. The length
        // fits a c_uint (<= MAX_BATCH); the timeout is null (none); the descriptor is
        // borrowed, so it stays open for the call.
        let ret = unsafe {
            libc::recvmmsg(
                sock.as_fd().as_raw_fd(),
                hdrs.as_mut_ptr(),
                hdrs.len() as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        cvt(ret).map(|n| n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::time::Duration;

    /// A receiver on 127.0.0.1 and a sender connected to it.
    fn pair() -> (UdpSocket, UdpSocket) {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        (rx, tx)
    }

    #[test]
    fn a_batch_sends_copies_of_the_payload() {
        let (rx, tx) = pair();
        let mut batch = SendBatch::new(b"quicknat", 8);
        assert_eq!(batch.capacity(), 8);
        assert_eq!(batch.send(&tx, 5).unwrap(), 5);
        let mut buf = [0u8; 64];
        for _ in 0..5 {
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"quicknat");
        }
        // More than the capacity sends the capacity; an empty payload sends empty datagrams.
        assert_eq!(batch.send(&tx, 100).unwrap(), 8);
        assert_eq!(SendBatch::new(b"", 1).send(&tx, 1).unwrap(), 1);
    }

    #[test]
    fn a_batch_receives_up_to_its_capacity_and_counts_long_datagrams_once() {
        let (rx, tx) = pair();
        assert_eq!(SendBatch::new(&[7u8; 300], 6).send(&tx, 6).unwrap(), 6);
        let mut batch = RecvBatch::new(4, 64);
        let mut got = Vec::new();
        while got.iter().sum::<usize>() < 6 {
            got.push(batch.recv(&rx).unwrap());
        }
        assert_eq!(got.iter().sum::<usize>(), 6, "{got:?}");
        assert!(got.iter().all(|n| (1..=4).contains(n)), "{got:?}");
        rx.set_nonblocking(true).unwrap();
        let e = batch.recv(&rx).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{e}");
    }

    #[test]
    fn capacities_are_clamped_and_errors_are_the_kernels() {
        assert_eq!(SendBatch::new(b"x", 0).capacity(), 1);
        assert_eq!(SendBatch::new(b"x", MAX_BATCH + 1).capacity(), MAX_BATCH);
        assert_eq!(RecvBatch::new(0, 16).hdrs.hdrs.len(), 1);
        let unconnected = UdpSocket::bind("127.0.0.1:0").unwrap();
        let e = SendBatch::new(b"x", 1).send(&unconnected, 1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EDESTADDRREQ), "{e}");
    }
}
