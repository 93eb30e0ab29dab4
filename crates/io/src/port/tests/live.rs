//! The [`Port`] contract on the real backends, in network namespaces of our own
//! ([`VethLab`]): one test body, generic over `P: Port`, run for AF_PACKET (plain and with
//! virtio-net headers) and AF_XDP. The gateway side runs [`reflect`] — the same generic
//! worker the `MemPort` tests use — in namespace a; namespace b's kernel is the oracle: it
//! sends UDP to 198.51.100.7 (routed via a) and must receive each datagram back, from
//! 198.51.100.7, with a checksum it accepts (the veth peer's tx offload makes the
//! datagrams arrive partial, so the port must have completed them).

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use super::*;
use crate::afpacket::{AfPacketConfig, PacketPort};
use crate::afxdp::{AfXdp, AfXdpConfig};
use crate::testnet::{join, spawn_in, VethLab};

/// Runs [`reflect`] on the port `open` gives, in namespace a, until the peer in namespace
/// b got a datagram back through `Rx::Back` and one through `send`; returns the stats.
fn reflects_through_the_port<P: Port + 'static>(
    lab: &VethLab,
    open: impl FnOnce(&str) -> io::Result<P> + Send + 'static,
) -> PortStats {
    let (ready_tx, ready_rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let (dev, stop2) = (lab.dev_a.clone(), Arc::clone(&stop));
    let gw = spawn_in(&lab.a, move || {
        let mut port = open(&dev).expect("open port");
        ready_tx.send(()).unwrap();
        while !stop2.load(Ordering::Relaxed) {
            if reflect(&mut port).expect("reflect") == 0 {
                let _ = P::wait(&[&port], Duration::from_millis(20)).expect("wait");
            }
        }
        (port.stats(), PEEKED.with(|c| c.get()))
    });
    ready_rx.recv().expect("gateway thread died");
    let peer = spawn_in(&lab.b, || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 256];
        for dport in [BACK_PORT, SEND_PORT] {
            let msg = format!("qn-port-{dport}");
            let to: SocketAddr = format!("198.51.100.7:{dport}").parse().unwrap();
            for _ in 0..6 {
                s.send_to(msg.as_bytes(), to).unwrap();
                if let Ok((n, from)) = s.recv_from(&mut buf) {
                    got.push((buf[..n].to_vec(), from));
                    break;
                }
            }
        }
        got
    });
    let got = join(peer);
    stop.store(true, Ordering::Relaxed);
    let (stats, peeked) = join(gw);
    // The worker waits until a frame is ready, then peeks: every backend that lends its
    // batch lends at least one of the frames it then received.
    assert!(peeked >= 1, "peek lent nothing ({stats:?})");
    let want: Vec<(Vec<u8>, SocketAddr)> = [BACK_PORT, SEND_PORT]
        .iter()
        .map(|d| {
            let from = format!("198.51.100.7:{d}").parse().unwrap();
            (format!("qn-port-{d}").into_bytes(), from)
        })
        .collect();
    assert_eq!(
        got, want,
        "datagrams reflected by Rx::Back and by send ({stats:?})"
    );
    assert!(stats.rx_frames >= 2 && stats.tx_frames >= 2, "{stats:?}");
    assert_eq!(stats.tx_dropped, 0, "{stats:?}");
    stats
}

#[test]
fn af_packet_port_reflects_by_back_and_by_send() {
    let Some(lab) = VethLab::new("pp", "pp", 81) else {
        return;
    };
    let st = reflects_through_the_port(&lab, |dev| PacketPort::open(&AfPacketConfig::new(dev)));
    eprintln!("AF_PACKET port: {st:?}");
    assert!(
        st.csum_completed >= 1,
        "the peer's UDP arrives partial: {st:?}"
    );
}

#[test]
fn af_packet_port_with_vnet_headers_reflects_by_back_and_by_send() {
    let Some(lab) = VethLab::new("ppv", "ppv", 82) else {
        return;
    };
    let st = reflects_through_the_port(&lab, |dev| {
        let port = PacketPort::open(&AfPacketConfig {
            vnet_hdr: true,
            ..AfPacketConfig::new(dev)
        })?;
        assert!(port.vnet());
        Ok(port)
    });
    eprintln!("AF_PACKET port with vnet headers: {st:?}");
    assert_eq!(st.csum_completed, 0, "partial checksums travel on: {st:?}");
}

#[test]
fn af_xdp_port_reflects_by_back_and_by_send() {
    if let Some(why) = crate::afxdp::skip_reason() {
        eprintln!("skipping af_xdp port test: {why}");
        return;
    }
    crate::afxdp::require_bpf();
    let Some(lab) = VethLab::new("xp", "xp", 83) else {
        return;
    };
    let st = reflects_through_the_port(&lab, |dev| {
        AfXdp::open(&AfXdpConfig {
            local_v4: vec![[10, 83, 0, 1].into()],
            ..AfXdpConfig::new(dev)
        })
    });
    eprintln!("AF_XDP port: {st:?}");
    assert!(
        st.csum_completed >= 1,
        "the peer's UDP arrives partial: {st:?}"
    );
}
