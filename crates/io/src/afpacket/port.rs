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
    /// On a socket bound to one IP version: the interface's MAC, which tells a frame the
    /// tc program marked `PACKET_OTHERHOST` (its kernel bypass) from another host's.
    own_mac: Option<[u8; 6]>,
}

impl PacketPort {
    /// Opens the receive ring `cfg` describes and a transmit socket on the same interface.
    /// `cfg.vnet_hdr` turns virtio-net headers on in both directions (GSO pass-through):
    /// frames arrive with [`RxMeta::vnet`] and leave behind the header they are sent with.
    pub fn open(cfg: &AfPacketConfig) -> io::Result<Self> {
        let rx = AfPacket::open(cfg)?;
        let own_mac = match cfg.ip_version {
            Some(_) => Some(crate::netlink::if_mac(&cfg.ifname).map_err(|e| {
                io::Error::new(e.kind(), format!("af_packet {}: its MAC: {e}", cfg.ifname))
            })?),
            None => None,
        };
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
            own_mac,
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
        let (tx, completed, dropped, foreign, own_mac) = (
            &mut self.tx,
            &mut self.csum_completed,
            &mut self.back_dropped,
            &mut self.not_for_us,
            self.own_mac,
        );
        let vnet = tx.vnet();
        let n = self.rx.recv_batch(Duration::ZERO, |frame, meta| {
            // Another host's frame (a bridge flooding unknown unicast, a promiscuous
            // port): the kernel would drop it (ip_rcv); translating it would forward a
            // packet its addressee forwards too.
            if meta.other_host && !marked_ours(frame, own_mac) {
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

/// Whether a `PACKET_OTHERHOST` frame is the tc program's mark on one of this interface's
/// (`own_mac`: a socket bound to one IP version) rather than another host's: its
/// destination MAC is the interface's, the rule by which the kernel sets
/// `PACKET_OTHERHOST` (`eth_type_trans`) in the first place.
fn marked_ours(frame: &[u8], own_mac: Option<[u8; 6]>) -> bool {
    own_mac.is_some_and(|mac| frame.get(..6) == Some(&mac[..]))
}

/// Queues `frame` behind `vnet` (the transmitter refuses, and counts, an unfinished frame
/// on a socket without virtio-net headers).
fn send(tx: &mut AfPacketTx, frame: &[u8], vnet: Option<&VnetHdr>) -> io::Result<()> {
    match vnet {
        Some(h) => tx.send_vnet(h, frame),
        None => tx.send(frame),
    }
}

#[cfg(test)]
mod tests {
    use super::marked_ours;

    const OWN: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

    #[test]
    fn a_marked_frame_is_ours_only_on_a_bound_socket_and_for_our_mac() {
        let mut frame = vec![0u8; 60];
        frame[..6].copy_from_slice(&OWN);
        // A socket bound to one IP version: the tc program's mark on our frame.
        assert!(marked_ours(&frame, Some(OWN)));
        // Another host's MAC: foreign, however it is bound.
        frame[5] = 0x02;
        assert!(!marked_ours(&frame, Some(OWN)));
        // A tap (ETH_P_ALL) sees frames before tc: PACKET_OTHERHOST is the kernel's own
        // verdict there, never a mark.
        frame[5] = 0x01;
        assert!(!marked_ours(&frame, None));
        // A frame too short to hold a MAC is never ours.
        assert!(!marked_ours(&frame[..4], Some(OWN)));
    }
}
