//! [`PacketPort`]: one interface's AF_PACKET receive ring and transmit socket as one
//! [`Port`].
//!
//! The ring lends frames in place; `Rx::Back` and `send` copy them into the transmit
//! socket's batch (one `sendmmsg` per [`Port::flush`], or earlier when a batch fills), so
//! the ring block is given back as soon as the callback has seen its frames.

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use super::{sys, AfPacket, AfPacketConfig, AfPacketTx};
use crate::port::{back_bytes, complete_partial, Port, PortStats, Rx, RxMeta};
use crate::vnet::VnetHdr;

/// An AF_PACKET [`Port`]: a TPACKET_V3 receive ring and a `sendmmsg` transmitter on one
/// interface.
#[derive(Debug)]
pub struct PacketPort {
    rx: AfPacket,
    tx: AfPacketTx,
    rx_frames: u64,
    csum_completed: u64,
    /// `Rx::Back` requests that could not be honoured (bad length, unfinished frame).
    back_dropped: u64,
    /// Frames addressed to another host (`PACKET_OTHERHOST`), dropped unseen.
    not_for_us: u64,
}

impl PacketPort {
    /// The receive socket (the tc fast path's claim filter is attached to it).
    pub(crate) fn rx_fd(&self) -> &OwnedFd {
        &self.rx.fd
    }

    /// Opens the receive ring `cfg` describes and a transmit socket on the same interface.
    /// `cfg.vnet_hdr` turns virtio-net headers on in both directions (GSO pass-through):
    /// frames arrive with [`RxMeta::vnet`] and leave behind the header they are sent with.
    pub fn open(cfg: &AfPacketConfig) -> io::Result<Self> {
        let rx = AfPacket::open(cfg)?;
        let tx = if cfg.vnet_hdr {
            AfPacketTx::open_vnet(&cfg.ifname)?
        } else {
            AfPacketTx::open(&cfg.ifname)?
        };
        Ok(PacketPort {
            rx,
            tx,
            rx_frames: 0,
            csum_completed: 0,
            back_dropped: 0,
            not_for_us: 0,
        })
    }

    /// The receive ring (kernel statistics, interface index, corrupt frames).
    pub fn ring(&mut self) -> &mut AfPacket {
        &mut self.rx
    }

    /// Index of the interface.
    pub fn ifindex(&self) -> u32 {
        self.rx.ifindex()
    }
}

impl Port for PacketPort {
    fn recv<F: FnMut(&mut [u8], &RxMeta) -> Rx>(&mut self, mut f: F) -> io::Result<usize> {
        let (tx, completed, dropped, foreign) = (
            &mut self.tx,
            &mut self.csum_completed,
            &mut self.back_dropped,
            &mut self.not_for_us,
        );
        let vnet = tx.vnet();
        let n = self.rx.recv_batch(Duration::ZERO, |frame, meta| {
            // Another host's frame (a bridge flooding unknown unicast, a promiscuous
            // port): the kernel would drop it (ip_rcv); translating it would forward a
            // packet its addressee forwards too.
            if meta.other_host {
                *foreign += 1;
                return;
            }
            let (meta, done) = complete_partial(frame, meta);
            *completed += u64::from(done);
            if let Rx::Back { len, vnet: hdr } = f(frame, &meta) {
                match back_bytes(frame, len, hdr.as_ref(), vnet) {
                    // A failed batch is counted in the transmitter's `dropped`; receiving
                    // went well, so it is not this call's error.
                    Some(bytes) => drop(send(tx, bytes, hdr.as_ref())),
                    None => *dropped += 1,
                }
            }
        })?;
        self.rx_frames += n as u64;
        Ok(n)
    }

    fn send(&mut self, frame: &[u8], vnet: Option<&VnetHdr>) -> io::Result<()> {
        send(&mut self.tx, frame, vnet)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tx.flush().map(drop)
    }

    fn wait(ports: &[&Self], timeout: Duration) -> io::Result<bool> {
        let fds: Vec<&OwnedFd> = ports.iter().map(|p| &p.rx.fd).collect();
        sys::poll_any_readable(&fds, timeout)
    }

    fn stats(&self) -> PortStats {
        PortStats {
            rx_frames: self.rx_frames,
            tx_frames: self.tx.sent(),
            tx_dropped: self.tx.dropped() + self.back_dropped,
            csum_completed: self.csum_completed,
            not_for_us: self.not_for_us,
        }
    }

    fn vnet(&self) -> bool {
        self.tx.vnet()
    }

    fn peek<F: FnMut(&[u8])>(&mut self, f: F) {
        self.rx.peek_batch(f);
    }
}

/// Queues `frame` behind `vnet` (the transmitter refuses, and counts, an unfinished frame
/// on a socket without virtio-net headers).
fn send(tx: &mut AfPacketTx, frame: &[u8], vnet: Option<&VnetHdr>) -> io::Result<()> {
    match vnet {
        Some(h) => tx.send_vnet(h, frame),
        None => tx.send(frame),
    }
}
