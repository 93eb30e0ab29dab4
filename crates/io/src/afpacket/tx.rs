//! The transmit side: frames are copied into one buffer and sent in batches
//! with `sendmmsg` (one syscall per batch of up to [`BATCH`] frames).

use std::io;
use std::os::fd::OwnedFd;

use super::sys;

/// Frames queued before [`AfPacketTx::send`] flushes on its own.
pub const BATCH: usize = sys::SENDMMSG_MAX;

/// A packet socket bound to one interface for sending whole Ethernet frames.
///
/// It is bound with protocol 0, so it never receives anything.
#[derive(Debug)]
pub struct AfPacketTx {
    fd: OwnedFd,
    ifindex: u32,
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
        let ifindex = sys::ifindex(ifname)?;
        let fd = sys::packet_socket()?;
        sys::bind_packet(&fd, ifindex, 0)
            .map_err(|e| io::Error::new(e.kind(), format!("af_packet tx {ifname}: bind: {e}")))?;
        Ok(AfPacketTx {
            fd,
            ifindex,
            buf: Vec::with_capacity(BATCH * 2048),
            ends: Vec::with_capacity(BATCH),
            sent: 0,
            dropped: 0,
        })
    }

    /// Queues a copy of `frame` (so the receive block can be released); flushes when [`BATCH`] are queued.
    pub fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.buf.extend_from_slice(frame);
        self.ends.push(self.buf.len());
        if self.ends.len() >= BATCH {
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
    /// the batch and a frame the kernel refuses (`EMSGSIZE`, `EINVAL`) drops
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
                    Some(libc::EMSGSIZE | libc::EINVAL) => {
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
