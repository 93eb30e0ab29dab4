//! [`AfXdp`] as a [`Port`].
//!
//! `Rx::Back` is the zero-copy same-socket transmit: the received UMEM chunk goes on the
//! tx ring as it is. `send` copies into a free chunk of this socket's UMEM. An AF_XDP
//! socket carries no virtio-net headers (copy mode hands XDP whole wire frames; see the
//! module doc for what a veth peer's offloads do), so a frame whose header still asks for
//! GSO or a checksum is never sent.

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use super::{sys, AfXdp};
use crate::port::{back_bytes, for_another_host, unfinished, Port, PortStats, Rx, RxMeta};
use crate::vnet::VnetHdr;

impl Port for AfXdp {
    fn recv<F: FnMut(&mut [u8], &RxMeta) -> Rx>(&mut self, mut f: F) -> io::Result<usize> {
        let (own, mut foreign) = (self.own_mac, 0u64);
        let n = self.recv_batch_room(Duration::ZERO, |chunk, len| {
            let (frame, _) = chunk.split_at_mut(len);
            // Another host's frame (a bridge flooding unknown unicast): not ours to
            // translate; its addressee forwards it.
            if own.is_some_and(|mac| for_another_host(frame, &mac)) {
                foreign += 1;
                return None;
            }
            match f(frame, &RxMeta::whole(len)) {
                Rx::Done => None,
                // `Some(0)` is never sent and counted in tx_dropped by `recv_batch_room`.
                Rx::Back { len: n, vnet } => {
                    Some(back_bytes(frame, n, vnet.as_ref(), false).map_or(0, <[u8]>::len))
                }
            }
        });
        self.stats.not_for_us += foreign;
        n
    }

    fn send(&mut self, frame: &[u8], vnet: Option<&VnetHdr>) -> io::Result<()> {
        if unfinished(vnet) {
            self.stats.tx_dropped += 1;
            return Ok(());
        }
        AfXdp::send(self, frame)
    }

    fn flush(&mut self) -> io::Result<()> {
        AfXdp::flush(self)
    }

    fn wait(ports: &[&Self], timeout: Duration) -> io::Result<bool> {
        let fds: Vec<&OwnedFd> = ports.iter().map(|p| &p.fd).collect();
        sys::poll_any_readable(&fds, timeout)
    }

    fn stats(&self) -> PortStats {
        PortStats {
            rx_frames: self.stats.rx_frames,
            tx_frames: self.stats.tx_frames,
            tx_dropped: self.stats.tx_dropped,
            csum_completed: self.stats.csum_completed,
            not_for_us: self.stats.not_for_us,
        }
    }

    fn vnet(&self) -> bool {
        false
    }

    fn peek<F: FnMut(&[u8])>(&mut self, f: F) {
        self.peek_batch(f);
    }
}
