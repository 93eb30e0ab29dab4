//! The [`Port`] contract, tested once through a tiny worker generic over `P: Port`
//! ([`reflect`]) and run against [`MemPort`] here; `live.rs` runs the same worker on the
//! real backends in network namespaces.

use wire::checksum::{fold, pseudo_header_v4};
use wire::{EtherType, EthernetFrame, IpProtocol, Ipv4Packet, UdpPacket};

use super::*;
use crate::mem::{MemPort, BATCH};
use crate::vnet::{GsoType, F_NEEDS_CSUM};

mod live;

/// UDP port whose datagrams [`reflect`] sends back in place (`Rx::Back`).
pub(crate) const BACK_PORT: u16 = 7777;
/// UDP port whose datagrams [`reflect`] copies out with `send` after `recv`.
pub(crate) const SEND_PORT: u16 = 7778;

/// Swaps the MACs, IPv4 addresses and UDP ports of a UDP frame to [`BACK_PORT`] or
/// [`SEND_PORT`] in place (checksums stay valid: the sums do not depend on the order);
/// returns the destination port it had, `None` (untouched) for any other frame.
pub(crate) fn swap_udp(frame: &mut [u8]) -> Option<u16> {
    let eth = EthernetFrame::new_checked(&frame[..]).ok()?;
    if eth.ethertype() != EtherType::Ipv4 || eth.is_tagged() {
        return None;
    }
    let ip = Ipv4Packet::new_checked(&frame[14..]).ok()?;
    let l4 = 14 + ip.header_len();
    if ip.protocol() != IpProtocol::Udp {
        return None;
    }
    let dport = UdpPacket::new_checked(ip.payload()).ok()?.dst_port();
    if dport != BACK_PORT && dport != SEND_PORT {
        return None;
    }
    for (a, b, n) in [(0, 6, 6), (26, 30, 4), (l4, l4 + 2, 2)] {
        for i in 0..n {
            frame.swap(a + i, b + i);
        }
    }
    Some(dport)
}

thread_local! {
    /// Frames [`reflect`] saw through `peek` on this thread.
    pub(crate) static PEEKED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A one-port worker generic over the backend, as the runtime's will be: one `recv`
/// (frames to [`BACK_PORT`] go back in place, frames to [`SEND_PORT`] are copied out with
/// `send` once `recv` has returned, everything else is left alone), then `flush`.
/// Returns the frames received. Before `recv` it `peek`s (counted in this thread's
/// [`PEEKED`]), and checks that what the port
/// lent is what `recv` then hands out, in order (headers up to the UDP checksum, which
/// `recv` may complete).
pub(crate) fn reflect<P: Port>(port: &mut P) -> io::Result<usize> {
    let mut copies = Vec::new();
    let mut peeked = Vec::new();
    port.peek(|f| peeked.push(f[..f.len().min(40)].to_vec()));
    let mut i = 0;
    let n = port.recv(|frame, meta| {
        if let Some(p) = peeked.get(i) {
            assert_eq!(frame.get(..p.len()), Some(&p[..]), "peeked frame {i}");
        }
        i += 1;
        let vnet = meta.vnet.map(|v| v.for_forward());
        match swap_udp(frame) {
            Some(BACK_PORT) => Rx::Back {
                len: frame.len(),
                vnet,
            },
            Some(_) => {
                copies.push((frame.to_vec(), vnet));
                Rx::Done
            }
            None => Rx::Done,
        }
    })?;
    assert!(
        peeked.len() <= n,
        "peek lent {} frames, recv took {n}",
        peeked.len()
    );
    PEEKED.with(|c| c.set(c.get() + peeked.len()));
    for (c, vnet) in &copies {
        port.send(c, vnet.as_ref())?;
    }
    port.flush()?;
    Ok(n)
}

const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 2];
const IP_A: [u8; 4] = [10, 0, 0, 2];
const IP_B: [u8; 4] = [198, 51, 100, 7];

/// Ethernet (A -> B) + IPv4 + UDP from 40000 to `dport` with `payload`; `partial` leaves
/// the checksum as a sender with tx checksum offload does.
fn udp_frame(dport: u16, payload: &[u8], partial: bool) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&MAC_B);
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&[0x08, 0x00]);
    let ulen = 8 + payload.len();
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((20 + ulen) as u16).to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&IP_A);
    ip[16..20].copy_from_slice(&IP_B);
    let c = wire::checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut u = vec![0u8; 8];
    u[0..2].copy_from_slice(&40000u16.to_be_bytes());
    u[2..4].copy_from_slice(&dport.to_be_bytes());
    u[4..6].copy_from_slice(&(ulen as u16).to_be_bytes());
    u.extend_from_slice(payload);
    let mut udp = UdpPacket::new_unchecked(&mut u[..]);
    if partial {
        udp.set_checksum(fold(pseudo_header_v4(IP_A, IP_B, 17, ulen as u16)));
    } else {
        udp.fill_checksum_v4(IP_A, IP_B);
    }
    f.extend_from_slice(&u);
    f
}

/// Whether `f` is a UDP frame from B:`sport` back to A:40000, MACs swapped, checksum valid.
fn is_reflection(f: &[u8], sport: u16) -> bool {
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    let udp = UdpPacket::new_checked(ip.payload()).unwrap();
    f[0..6] == MAC_A
        && f[6..12] == MAC_B
        && (ip.src_bytes(), ip.dst_bytes()) == (IP_B, IP_A)
        && (udp.src_port(), udp.dst_port()) == (sport, 40000)
        && udp.verify_checksum_v4(IP_B, IP_A)
}

#[test]
fn the_generic_worker_reflects_through_a_mem_port() {
    let (mut port, h) = MemPort::new();
    h.inject(&udp_frame(BACK_PORT, b"back", false));
    h.inject(&udp_frame(SEND_PORT, b"copy", false));
    h.inject(&udp_frame(9, b"ignored", false));
    h.inject(&[0xFF; 10]); // not even Ethernet
    assert_eq!(reflect(&mut port).unwrap(), 4);
    let sent = h.sent();
    assert_eq!(sent.len(), 2);
    assert!(is_reflection(&sent[0], BACK_PORT));
    assert!(is_reflection(&sent[1], SEND_PORT));
    assert_eq!(
        port.stats(),
        PortStats {
            rx_frames: 4,
            tx_frames: 2,
            tx_dropped: 0,
            csum_completed: 0,
            not_for_us: 0,
        }
    );
    assert_eq!(reflect(&mut port).unwrap(), 0);
}

#[test]
fn nothing_leaves_before_flush() {
    let (mut port, h) = MemPort::new();
    h.inject(&udp_frame(BACK_PORT, b"x", false));
    port.recv(|f, _| Rx::Back {
        len: f.len(),
        vnet: None,
    })
    .unwrap();
    port.send(b"copied", None).unwrap();
    assert_eq!((h.sent().len(), port.pending()), (0, 2));
    port.flush().unwrap();
    assert_eq!(h.take_sent().len(), 2);
    assert!(h.sent().is_empty(), "taken");
    assert_eq!(port.stats().tx_frames, 2);
}

#[test]
fn partial_checksums_are_completed_unless_vnet_headers_carry_them() {
    let partial = udp_frame(BACK_PORT, b"offloaded", true);
    let meta = RxMeta {
        csum_not_ready: true,
        ..RxMeta::whole(partial.len())
    };
    // Without virtio-net headers: completed before the callback, flag cleared, counted.
    let (mut port, h) = MemPort::new();
    h.inject_with(&partial, meta);
    assert_eq!(reflect(&mut port).unwrap(), 1);
    assert!(is_reflection(&h.sent()[0], BACK_PORT));
    assert_eq!(port.stats().csum_completed, 1);
    let (mut port, h) = MemPort::new();
    h.inject_with(&partial, meta);
    port.recv(|_, m| {
        assert!(!m.csum_not_ready);
        Rx::Done
    })
    .unwrap();
    // With them: the frame travels on as its header says, untouched.
    let hdr = VnetHdr {
        flags: F_NEEDS_CSUM,
        csum_start: 34,
        csum_offset: 6,
        ..VnetHdr::default()
    };
    let (mut port, h) = MemPort::with_vnet(true);
    h.inject_with(
        &partial,
        RxMeta {
            vnet: Some(hdr),
            ..meta
        },
    );
    port.recv(|f, m| {
        assert!(m.csum_not_ready && m.vnet == Some(hdr));
        assert_eq!(f, &partial[..]);
        Rx::Back {
            len: f.len(),
            vnet: m.vnet,
        }
    })
    .unwrap();
    port.flush().unwrap();
    assert_eq!(port.stats().csum_completed, 0);
    assert_eq!(h.sent_with_vnet(), vec![(partial.clone(), Some(hdr))]);
    // A partial frame that cannot be completed keeps its flag.
    let (mut port, h) = MemPort::new();
    h.inject_with(
        &[0u8; 30],
        RxMeta {
            len: 30,
            snaplen: 30,
            ..meta
        },
    );
    port.recv(|_, m| {
        assert!(m.csum_not_ready);
        Rx::Done
    })
    .unwrap();
    assert_eq!(port.stats().csum_completed, 0);
}

#[test]
fn a_half_done_frame_never_leaves_a_port_without_vnet_headers() {
    let gso = VnetHdr {
        gso_type: GsoType::UdpL4,
        gso_size: 100,
        ..VnetHdr::default()
    };
    let csum = VnetHdr {
        flags: F_NEEDS_CSUM,
        ..VnetHdr::default()
    };
    let frame = udp_frame(BACK_PORT, b"x", false);
    let (mut port, h) = MemPort::new();
    assert!(!port.vnet());
    port.send(&frame, Some(&gso)).unwrap();
    port.send(&frame, Some(&csum)).unwrap();
    port.send(&frame, Some(&VnetHdr::default())).unwrap();
    h.inject(&frame);
    port.recv(|f, _| Rx::Back {
        len: f.len(),
        vnet: Some(gso),
    })
    .unwrap();
    port.flush().unwrap();
    assert_eq!(h.sent_with_vnet(), vec![(frame.clone(), None)]);
    assert_eq!((port.stats().tx_frames, port.stats().tx_dropped), (1, 3));
    // The same frames leave a port with virtio-net headers, behind their header.
    let (mut port, h) = MemPort::with_vnet(true);
    port.send(&frame, Some(&gso)).unwrap();
    port.send(&frame, None).unwrap();
    port.flush().unwrap();
    assert_eq!(
        h.sent_with_vnet(),
        vec![(frame.clone(), Some(gso)), (frame, None)]
    );
}

#[test]
fn back_with_a_bad_length_is_dropped_and_a_shorter_one_cuts() {
    let frame = udp_frame(BACK_PORT, b"0123456789", false);
    let (mut port, h) = MemPort::new();
    for _ in 0..3 {
        h.inject(&frame);
    }
    let mut lens = [0, frame.len() + 1, 20].into_iter();
    port.recv(|_, _| Rx::Back {
        len: lens.next().unwrap(),
        vnet: None,
    })
    .unwrap();
    port.flush().unwrap();
    assert_eq!(h.sent(), vec![frame[..20].to_vec()]);
    assert_eq!(port.stats().tx_dropped, 2);
}

#[test]
fn recv_takes_one_batch_and_wait_answers_at_once() {
    let (mut a, ha) = MemPort::new();
    let (b, _hb) = MemPort::new();
    assert!(!MemPort::wait(&[&a, &b], Duration::from_secs(3600)).unwrap());
    for i in 0..BATCH + 5 {
        ha.inject(&[i as u8; 60]);
    }
    assert!(MemPort::wait(&[&b, &a], Duration::ZERO).unwrap());
    let mut seen = Vec::new();
    assert_eq!(
        a.recv(|f, _| {
            seen.push(f[0]);
            Rx::Done
        })
        .unwrap(),
        BATCH
    );
    assert_eq!(seen, (0..BATCH as u8).collect::<Vec<_>>(), "in order");
    assert_eq!(ha.queued(), 5);
    assert_eq!(a.recv(|_, _| Rx::Done).unwrap(), 5);
    assert!(!MemPort::wait(&[&a], Duration::ZERO).unwrap());
    assert_eq!(a.stats().rx_frames, BATCH as u64 + 5);
}

#[test]
fn the_callback_may_inject_through_a_handle() {
    // A reply injected while receiving (a tap, a fault injector) waits for the next recv.
    let (mut port, h) = MemPort::new();
    h.inject(b"first");
    let h2 = h.clone();
    let mut got = Vec::new();
    for _ in 0..2 {
        port.recv(|f, _| {
            got.push(f.to_vec());
            if f == b"first" {
                h2.inject(b"second");
            }
            Rx::Done
        })
        .unwrap();
    }
    assert_eq!(got, [b"first".to_vec(), b"second".to_vec()]);
}

#[test]
fn ports_move_to_worker_threads() {
    fn is_port<P: Port + 'static>() {}
    is_port::<MemPort>();
    is_port::<crate::afpacket::PacketPort>();
    is_port::<crate::afxdp::AfXdp>();
    fn is_send<T: Send>() {}
    is_send::<crate::mem::MemHandle>();
}

#[test]
fn shared_rules() {
    let gso = VnetHdr {
        gso_type: GsoType::TcpV4,
        ..VnetHdr::default()
    };
    let csum = VnetHdr {
        flags: F_NEEDS_CSUM,
        ..VnetHdr::default()
    };
    assert!(unfinished(Some(&gso)) && unfinished(Some(&csum)));
    assert!(!unfinished(None) && !unfinished(Some(&VnetHdr::default())));
    let f = [1u8, 2, 3];
    assert_eq!(back_bytes(&f, 2, None, false), Some(&f[..2]));
    assert_eq!(back_bytes(&f, 0, None, false), None);
    assert_eq!(back_bytes(&f, 4, None, true), None);
    assert_eq!(back_bytes(&f, 3, Some(&gso), false), None);
    assert_eq!(back_bytes(&f, 3, Some(&gso), true), Some(&f[..]));
    for d in [BACK_PORT, SEND_PORT] {
        let mut fr = udp_frame(d, b"", false);
        assert_eq!(swap_udp(&mut fr), Some(d));
        assert!(is_reflection(&fr, d));
    }
    let mut other = udp_frame(9, b"", false);
    let orig = other.clone();
    assert_eq!(swap_udp(&mut other), None);
    assert_eq!(other, orig);
}

#[test]
fn another_hosts_frames_are_dropped_and_counted_not_handed_on() {
    let frame = udp_frame(BACK_PORT, b"flooded", false);
    let (mut port, h) = MemPort::new();
    h.inject_with(
        &frame,
        RxMeta {
            other_host: true,
            ..RxMeta::whole(frame.len())
        },
    );
    h.inject(&frame);
    let mut seen = 0;
    port.recv(|_, m| {
        assert!(!m.other_host);
        seen += 1;
        Rx::Done
    })
    .unwrap();
    assert_eq!((seen, port.stats().not_for_us), (1, 1));
}

#[test]
fn a_foreign_unicast_destination_is_another_hosts_and_group_addresses_are_everyones() {
    let own = [0x02, 0, 0, 0, 0, 1];
    let mut f = vec![0u8; 60];
    f[..6].copy_from_slice(&own);
    assert!(!for_another_host(&f, &own));
    f[5] = 2;
    assert!(for_another_host(&f, &own));
    f[..6].copy_from_slice(&[0xff; 6]);
    assert!(!for_another_host(&f, &own));
    f[..6].copy_from_slice(&[0x01, 0, 0x5e, 0, 0, 1]);
    assert!(!for_another_host(&f, &own));
    f[..6].copy_from_slice(&[0x33, 0x33, 0, 0, 0, 1]);
    assert!(!for_another_host(&f, &own));
    assert!(!for_another_host(&f[..3], &own));
}
