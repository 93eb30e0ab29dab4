//! An in-memory [`Port`] for tests: frames are injected into its receive queue and the
//! frames it transmits are collected, through a [`MemHandle`] the test keeps.
//!
//! Deterministic: no sockets, no threads, no sleeping, no clock. [`Port::wait`] answers
//! at once. It keeps the [`Port`] contract like a real backend does — partial checksums
//! completed on receive (unless virtio-net headers are on), unfinished virtio-net frames
//! never sent on a port without them, nothing transmitted before [`Port::flush`] — so a
//! worker tested against it behaves the same on AF_PACKET or AF_XDP. The handle's shared
//! state is private, so knobs for a fault injector or a tap (refuse sends, reorder, drop)
//! can be added to it later without changing the interface.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::port::{back_bytes, complete_partial, unfinished, Port, PortStats, Rx, RxMeta};
use crate::vnet::VnetHdr;

/// Frames handed to the callback per [`Port::recv`] at most (as AF_XDP's batch).
pub const BATCH: usize = 64;

/// A frame and the virtio-net header it was sent behind.
pub type Sent = (Vec<u8>, Option<VnetHdr>);

/// What the port and its handles share.
#[derive(Debug, Default)]
struct Shared {
    /// Injected frames not yet received.
    rx: VecDeque<(Vec<u8>, RxMeta)>,
    /// Frames transmitted (flushed), in order.
    sent: Vec<Sent>,
}

/// An in-memory port; see the module doc.
#[derive(Debug)]
pub struct MemPort {
    shared: Arc<Mutex<Shared>>,
    /// Frames queued by `send` / `Rx::Back`, transmitted at `flush`.
    queued: Vec<Sent>,
    vnet: bool,
    stats: PortStats,
}

/// The test's side of a [`MemPort`]: injects frames, reads what was transmitted.
/// Cloning gives another handle to the same port.
#[derive(Debug, Clone)]
pub struct MemHandle {
    shared: Arc<Mutex<Shared>>,
}

/// Locks the shared state; a panic elsewhere while it was held leaves it usable.
fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl MemPort {
    /// A port without virtio-net headers, and the handle to drive it.
    pub fn new() -> (MemPort, MemHandle) {
        Self::with_vnet(false)
    }

    /// A port that passes virtio-net headers when `vnet` (frames injected with
    /// [`RxMeta::vnet`] keep their partial checksums; sent frames keep their header).
    pub fn with_vnet(vnet: bool) -> (MemPort, MemHandle) {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let port = MemPort {
            shared: Arc::clone(&shared),
            queued: Vec::new(),
            vnet,
            stats: PortStats::default(),
        };
        (port, MemHandle { shared })
    }

    /// Frames queued and not yet flushed.
    pub fn pending(&self) -> usize {
        self.queued.len()
    }

    /// Queues `frame[..]` behind `hdr` unless this port cannot send it.
    fn queue(&mut self, frame: &[u8], hdr: Option<&VnetHdr>) {
        if !self.vnet && unfinished(hdr) {
            self.stats.tx_dropped += 1;
            return;
        }
        let hdr = if self.vnet { hdr.copied() } else { None };
        self.queued.push((frame.to_vec(), hdr));
    }
}

impl MemHandle {
    /// Queues `frame` for receiving, whole and with final checksums ([`RxMeta::whole`]).
    pub fn inject(&self, frame: &[u8]) {
        self.inject_with(frame, RxMeta::whole(frame.len()));
    }

    /// Queues `frame` for receiving with the metadata `meta`, as given (keep
    /// `meta.snaplen == frame.len()` unless the test is about a lying backend).
    pub fn inject_with(&self, frame: &[u8], meta: RxMeta) {
        lock(&self.shared).rx.push_back((frame.to_vec(), meta));
    }

    /// Injected frames the port has not received yet.
    pub fn queued(&self) -> usize {
        lock(&self.shared).rx.len()
    }

    /// The frames the port has transmitted so far (flushed), in order.
    pub fn sent(&self) -> Vec<Vec<u8>> {
        lock(&self.shared)
            .sent
            .iter()
            .map(|(f, _)| f.clone())
            .collect()
    }

    /// The frames transmitted so far with the virtio-net header each went behind.
    pub fn sent_with_vnet(&self) -> Vec<Sent> {
        lock(&self.shared).sent.clone()
    }

    /// Takes the frames transmitted so far (the next call sees only newer ones).
    pub fn take_sent(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut lock(&self.shared).sent)
            .into_iter()
            .map(|(f, _)| f)
            .collect()
    }
}

impl Port for MemPort {
    fn recv<F: FnMut(&mut [u8], &RxMeta) -> Rx>(&mut self, mut f: F) -> io::Result<usize> {
        let mut n = 0;
        while n < BATCH {
            // Not held while `f` runs: the callback may use a handle (inject a reply).
            let Some((mut frame, meta)) = lock(&self.shared).rx.pop_front() else {
                break;
            };
            n += 1;
            // As the real ports do: another host's frame never reaches the callback.
            if meta.other_host {
                self.stats.not_for_us += 1;
                continue;
            }
            let (meta, completed) = complete_partial(&mut frame, &meta);
            self.stats.csum_completed += u64::from(completed);
            if let Rx::Back { len, vnet } = f(&mut frame, &meta) {
                match back_bytes(&frame, len, vnet.as_ref(), self.vnet) {
                    Some(bytes) => self.queue(bytes, vnet.as_ref()),
                    None => self.stats.tx_dropped += 1,
                }
            }
        }
        self.stats.rx_frames += n as u64;
        Ok(n)
    }

    fn send(&mut self, frame: &[u8], vnet: Option<&VnetHdr>) -> io::Result<()> {
        self.queue(frame, vnet);
        Ok(())
    }

    fn peek<F: FnMut(&[u8])>(&mut self, mut f: F) {
        for (frame, _) in lock(&self.shared).rx.iter().take(BATCH) {
            f(frame);
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stats.tx_frames += self.queued.len() as u64;
        lock(&self.shared).sent.append(&mut self.queued);
        Ok(())
    }

    fn wait(ports: &[&Self], _timeout: Duration) -> io::Result<bool> {
        Ok(ports.iter().any(|p| !lock(&p.shared).rx.is_empty()))
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn vnet(&self) -> bool {
        self.vnet
    }
}
