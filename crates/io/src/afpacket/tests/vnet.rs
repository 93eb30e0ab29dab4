//! Live tests of `PACKET_VNET_HDR` (GSO and partial checksums passed through).
//!
//! Two oracles, both real kernels:
//! * transmit: a hand-built UDP GSO super-packet (`GSO_UDP_L4`, partial checksum) sent
//!   to the peer of the two-namespace lab ([`lab`]) must arrive as the right datagrams on a
//!   UDP socket — once crossing veth whole (TSO on), once segmented and checksummed in
//!   software because the veth's offloads are off;
//! * a user-space bridge, the gateway's job minus translation:
//!
//! ```text
//! ns s: vs0 10.78.0.1 ==veth== g0 [ns g: rx ring + tx, both vnet] g1 ==veth== vr0 10.78.0.2 :ns r
//! ```
//!
//! a TCP transfer from s to r across it completes with the same bytes, and the ring
//! reports the super-packets with sensible `gso_type`/`gso_size`/checksum fields.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::*;
use crate::host::is_root;
use crate::testnet::{has_iproute2, ip, Namespaces};
use crate::vnet::{F_DATA_VALID, F_NEEDS_CSUM};

/// Runs `ethtool ARGS` in namespace `ns`; whether it succeeded.
fn ethtool(ns: &str, args: &[&str]) -> bool {
    Command::new("ip")
        .args(["netns", "exec", ns, "ethtool"])
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

fn has_ethtool() -> bool {
    Command::new("ethtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A UDP GSO super-packet from A to B: `segs` datagrams of `seg` payload bytes each
/// (byte `i` of segment `k` is `k`), with the partial (pseudo-header only) checksum
/// and its virtio-net header.
fn udp_gso_a_to_b(dport: u16, seg: usize, segs: usize) -> (VnetHdr, Vec<u8>) {
    let payload: Vec<u8> = (0..segs).flat_map(|k| vec![k as u8; seg]).collect();
    let ulen = (8 + payload.len()) as u16;
    let mut u = vec![0u8; 8];
    u[0..2].copy_from_slice(&40000u16.to_be_bytes());
    u[2..4].copy_from_slice(&dport.to_be_bytes());
    u[4..6].copy_from_slice(&ulen.to_be_bytes());
    // CHECKSUM_PARTIAL: the field holds the folded pseudo-header sum, not complemented.
    let mut ph = Vec::new();
    ph.extend_from_slice(&IP_A);
    ph.extend_from_slice(&IP_B);
    ph.extend_from_slice(&[0, 17]);
    ph.extend_from_slice(&ulen.to_be_bytes());
    let partial = !checksum::checksum(&ph);
    u[6..8].copy_from_slice(&partial.to_be_bytes());
    u.extend_from_slice(&payload);
    let hdr = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GsoType::UdpL4,
        gso_ecn: false,
        hdr_len: 14 + 20 + 8,
        gso_size: seg as u16,
        csum_start: 14 + 20,
        csum_offset: 6,
    };
    (hdr, eth_ipv4(IP_A, IP_B, 17, &u))
}

/// Sends one UDP GSO super-packet with the vnet header from A and checks the datagrams
/// B's socket receives (the peer kernel drops any with a bad checksum).
fn udp_gso_delivery(tag: &str, offloads: bool) {
    let Some(lab) = lab(tag) else { return };
    if !offloads {
        assert!(
            ethtool(
                &lab.a,
                &["-K", "afp0", "tx", "off", "tso", "off", "gso", "off"]
            ),
            "ethtool -K afp0 offloads off"
        );
    }
    const SEGS: usize = 20;
    let (ready_tx, ready_rx) = mpsc::channel();
    let peer = spawn_in(&lab.b, move || {
        let s = UdpSocket::bind("10.77.0.2:9997").expect("bind peer");
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        ready_tx.send(()).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 65536];
        while got.len() < SEGS {
            match s.recv(&mut buf) {
                Ok(n) => got.push(buf[..n].to_vec()),
                Err(_) => break,
            }
        }
        got
    });
    ready_rx.recv().expect("peer died");
    let gw = spawn_in(&lab.a, move || {
        // The peer's MAC, so no ARP is needed.
        let mut tx = AfPacketTx::open_vnet("afp0").expect("open_vnet");
        assert!(tx.vnet());
        let (hdr, frame) = udp_gso_a_to_b(9997, 1000, SEGS);
        assert!(frame.len() > 20_000);
        tx.send_vnet(&hdr, &frame).unwrap();
        assert_eq!(tx.flush().unwrap(), 1, "kernel refused the super-packet");
        tx.dropped()
    });
    let dropped = join(gw);
    let got = join(peer);
    let how = if offloads {
        "TSO on"
    } else {
        "offloads off: software GSO + checksum"
    };
    assert_eq!(dropped, 0, "{how}");
    assert_eq!(got.len(), SEGS, "{how}: datagrams delivered");
    for (k, d) in got.iter().enumerate() {
        assert_eq!(d, &vec![k as u8; 1000], "{how}: datagram {k}");
    }
}

#[test]
fn tx_udp_gso_super_packet_crosses_veth_whole() {
    udp_gso_delivery("ugso", true);
}

#[test]
fn tx_udp_gso_is_segmented_and_checksummed_without_offloads() {
    if has_ethtool() {
        udp_gso_delivery("usw", false);
    } else {
        eprintln!("skipping: needs ethtool");
    }
}

#[test]
fn tx_partial_checksum_without_vnet_is_never_sent() {
    let Some(lab) = lab("nov") else { return };
    let dropped = join(spawn_in(&lab.a, move || {
        let mut tx = AfPacketTx::open("afp0").unwrap();
        let (hdr, frame) = udp_gso_a_to_b(9, 100, 3);
        tx.send_vnet(&hdr, &frame).unwrap();
        tx.send_vnet(&VnetHdr::default(), &udp_a_to_b(1, 9, b"x"))
            .unwrap();
        (tx.pending(), tx.dropped())
    }));
    assert_eq!(dropped, (1, 1));
}

/// The three namespaces of the bridge test; deleted on drop.
struct BridgeLab {
    s: String,
    g: String,
    r: String,
    _ns: Namespaces,
}

impl BridgeLab {
    fn new(tag: &str) -> Option<BridgeLab> {
        if !is_root() || !has_iproute2() || !has_ethtool() {
            eprintln!("skipping af_packet vnet bridge test {tag}: needs root, iproute2, ethtool");
            return None;
        }
        let pid = std::process::id();
        let n = |x: &str| format!("qn-vn-{pid}-{tag}-{x}");
        let (s, g, r) = (n("s"), n("g"), n("r"));
        let lab = BridgeLab {
            _ns: Namespaces::create(&[s.clone(), g.clone(), r.clone()]),
            s,
            g,
            r,
        };
        let (s, g, r) = (lab.s.as_str(), lab.g.as_str(), lab.r.as_str());
        let steps: &[&[&str]] = &[
            &[
                "-n", s, "link", "add", "vs0", "type", "veth", "peer", "name", "g0", "netns", g,
            ],
            &[
                "-n", r, "link", "add", "vr0", "type", "veth", "peer", "name", "g1", "netns", g,
            ],
            &["-n", s, "addr", "add", "10.78.0.1/24", "dev", "vs0"],
            &["-n", r, "addr", "add", "10.78.0.2/24", "dev", "vr0"],
            &["-n", s, "link", "set", "vs0", "up"],
            &["-n", r, "link", "set", "vr0", "up"],
            &["-n", g, "link", "set", "g0", "up"],
            &["-n", g, "link", "set", "g1", "up"],
        ];
        for st in steps {
            assert!(ip(st), "lab setup failed: ip {}", st.join(" "));
        }
        Some(lab)
    }

    /// Turns every offload off on all four veth ends (the fair baseline for a forwarder
    /// that cannot pass GSO on).
    fn offloads_off(&self) {
        let off = ["tx", "off", "tso", "off", "gso", "off", "gro", "off"];
        for (ns, dev) in [
            (&self.s, "vs0"),
            (&self.g, "g0"),
            (&self.g, "g1"),
            (&self.r, "vr0"),
        ] {
            let mut args = vec!["-K", dev];
            args.extend_from_slice(&off);
            assert!(ethtool(ns, &args), "ethtool -K {dev} off in {ns}");
        }
    }

    /// Turns segmentation and checksum offload off where the bridge sends (g0, g1): its
    /// kernel must then cut the super-packets and finish their checksums in software, and
    /// the receivers verify every segment (with TSO on they trust CHECKSUM_PARTIAL).
    fn egress_offloads_off(&self) {
        for dev in ["g0", "g1"] {
            let args = ["-K", dev, "tx", "off", "tso", "off", "gso", "off"];
            assert!(ethtool(&self.g, &args), "ethtool -K {dev} off");
        }
    }

    /// A kernel bridge between g0 and g1 instead of ours (a reference figure).
    fn kernel_bridge(&self) {
        let g = self.g.as_str();
        for st in [
            &["-n", g, "link", "add", "br0", "type", "bridge"][..],
            &["-n", g, "link", "set", "g0", "master", "br0"],
            &["-n", g, "link", "set", "g1", "master", "br0"],
            &["-n", g, "link", "set", "br0", "up"],
        ] {
            assert!(ip(st), "ip {}", st.join(" "));
        }
    }
}

/// What the user-space bridge saw and did.
#[derive(Debug, Default, Clone, Copy)]
struct BridgeStats {
    frames: u64,
    /// Frames longer than a 1500-byte MTU frame.
    super_frames: u64,
    /// Frames whose vnet header said `GSO_TCPV4`.
    gso_tcp4: u64,
    /// Frames whose vnet header said `NEEDS_CSUM`.
    needs_csum: u64,
    /// Oversize frames dropped (only without vnet).
    oversize: u64,
    tx_dropped: u64,
    /// A GSO frame whose fields did not make sense (see `check_gso`).
    bad_meta: Option<(RxMeta, usize)>,
}

/// Checks what the kernel says about a TCP/IPv4 super-packet from the sender.
fn check_gso(frame: &[u8], meta: &RxMeta) -> bool {
    let Some(v) = meta.vnet else { return false };
    let ihl = usize::from(frame.get(14).map_or(0, |b| b & 0xf)) * 4;
    let thl = usize::from(frame.get(14 + ihl + 12).map_or(0, |b| b >> 4)) * 4;
    let headers = 14 + ihl + thl;
    v.gso_type == GsoType::TcpV4
        && meta.len > 1514
        && meta.len == frame.len()
        && (500..=1460).contains(&v.gso_size)
        && v.needs_csum()
        && usize::from(v.csum_start) == 14 + ihl
        && v.csum_offset == 16
        && usize::from(v.hdr_len) >= headers
        && usize::from(v.hdr_len) <= meta.len
        && frame.len() - headers > usize::from(v.gso_size)
}

/// Forwards every frame between g0 and g1 until `stop`, in the calling thread
/// (which must be in namespace g).
fn bridge(vnet: bool, ready: mpsc::Sender<()>, stop: Arc<AtomicBool>) -> BridgeStats {
    let cfg = |dev: &str| AfPacketConfig {
        vnet_hdr: vnet,
        ..AfPacketConfig::new(dev)
    };
    let mut rx = [
        AfPacket::open(&cfg("g0")).expect("rx g0"),
        AfPacket::open(&cfg("g1")).expect("rx g1"),
    ];
    let open = |dev| {
        if vnet {
            AfPacketTx::open_vnet(dev)
        } else {
            AfPacketTx::open(dev)
        }
    };
    let mut tx = [open("g1").expect("tx g1"), open("g0").expect("tx g0")];
    ready.send(()).unwrap();
    let mut st = BridgeStats::default();
    while !stop.load(Ordering::Relaxed) {
        let mut n = 0;
        for (side, ring) in rx.iter_mut().enumerate() {
            let out = &mut tx[side];
            n += ring
                .recv_batch(Duration::ZERO, |frame, meta| {
                    st.frames += 1;
                    if meta.len > 1514 {
                        st.super_frames += 1;
                    }
                    match meta.vnet {
                        Some(v) => {
                            if v.gso_type == GsoType::TcpV4 {
                                st.gso_tcp4 += 1;
                                if side == 0 && st.bad_meta.is_none() && !check_gso(frame, meta) {
                                    st.bad_meta = Some((*meta, frame.len()));
                                }
                            }
                            st.needs_csum += u64::from(v.needs_csum());
                            out.send_vnet(&v.for_forward(), frame).unwrap();
                        }
                        None => {
                            if meta.len > 1514 || meta.truncated {
                                st.oversize += 1;
                                return;
                            }
                            if complete_checksum(frame, meta) {
                                out.send(frame).unwrap();
                            }
                        }
                    }
                })
                .expect("recv_batch");
        }
        for t in tx.iter_mut() {
            if t.pending() > 0 {
                t.flush().expect("flush");
            }
        }
        if n == 0 {
            let _ = wait_readable(&[&rx[0], &rx[1]], Duration::from_millis(5));
        }
    }
    st.tx_dropped = tx.iter().map(AfPacketTx::dropped).sum();
    st
}

/// A cheap stream hash (FNV-1a, 64 bit).
fn fnv(h: &mut u64, data: &[u8]) {
    for &b in data {
        *h ^= u64::from(b);
        *h = h.wrapping_mul(0x0100_0000_01b3);
    }
}

/// The deterministic byte stream the sender writes.
fn pattern(off: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        let x = off + i as u64;
        *b = (x ^ (x >> 8) ^ (x >> 17)) as u8;
    }
}

/// Result of one transfer: bytes sent, bytes received, hashes of both, seconds.
struct Transfer {
    sent: u64,
    received: u64,
    hash_sent: u64,
    hash_received: u64,
    secs: f64,
}

/// Sends `total` bytes (or for `dur`, when given: then unhashed) from ns s to ns r over TCP.
fn transfer(lab: &BridgeLab, total: u64, dur: Option<Duration>) -> Transfer {
    let (ready_tx, ready_rx) = mpsc::channel();
    let recv = spawn_in(&lab.r, move || {
        let l = TcpListener::bind("10.78.0.2:5201").expect("listen");
        ready_tx.send(()).unwrap();
        let (mut c, _) = l.accept().expect("accept");
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let (mut n, mut h) = (0u64, 0xcbf2_9ce4_8422_2325u64);
        let start = Instant::now();
        loop {
            match c.read(&mut buf) {
                Ok(0) => break,
                Ok(k) => {
                    if dur.is_none() {
                        fnv(&mut h, &buf[..k]);
                    }
                    n += k as u64;
                }
                Err(e) => panic!("receiver: {e} after {n} bytes"),
            }
        }
        (n, h, start.elapsed().as_secs_f64())
    });
    ready_rx.recv().expect("receiver died");
    let send = spawn_in(&lab.s, move || {
        let mut c =
            TcpStream::connect_timeout(&"10.78.0.2:5201".parse().unwrap(), Duration::from_secs(5))
                .expect("connect across the bridge");
        c.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let (mut n, mut h) = (0u64, 0xcbf2_9ce4_8422_2325u64);
        let start = Instant::now();
        // Timed runs measure the path, not this loop: same buffer, no hashing.
        while dur.map_or(n < total, |d| start.elapsed() < d) {
            let k = (buf.len() as u64).min(if dur.is_some() { u64::MAX } else { total - n });
            let chunk = &mut buf[..k as usize];
            if dur.is_none() {
                pattern(n, chunk);
                fnv(&mut h, chunk);
            }
            c.write_all(chunk).expect("sender write");
            n += k;
        }
        c.shutdown(std::net::Shutdown::Write).unwrap();
        (n, h)
    });
    let (sent, hash_sent) = join(send);
    let (received, hash_received, secs) = join(recv);
    Transfer {
        sent,
        received,
        hash_sent,
        hash_received,
        secs,
    }
}

/// Runs the user-space bridge (`Some(vnet)`) or the kernel's (`None`) around one transfer.
fn bridged_transfer(
    lab: &BridgeLab,
    user: Option<bool>,
    total: u64,
    dur: Option<Duration>,
) -> (Transfer, BridgeStats) {
    let Some(vnet) = user else {
        lab.kernel_bridge();
        return (transfer(lab, total, dur), BridgeStats::default());
    };
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel();
    let stop2 = stop.clone();
    let gw = spawn_in(&lab.g, move || bridge(vnet, ready_tx, stop2));
    ready_rx.recv().expect("bridge died");
    let t = transfer(lab, total, dur);
    stop.store(true, Ordering::Relaxed);
    (t, join(gw))
}

#[test]
fn vnet_rx_reports_tcp_super_packets_and_bridge_keeps_the_data() {
    let Some(lab) = BridgeLab::new("br") else {
        return;
    };
    const TOTAL: u64 = 10 << 20;
    let (t, st) = bridged_transfer(&lab, Some(true), TOTAL, None);
    eprintln!(
        "vnet bridge: {} B in {:.3} s ({:.2} Gbit/s); {st:?}",
        t.received,
        t.secs,
        t.received as f64 * 8.0 / t.secs / 1e9
    );
    assert_eq!((t.sent, t.received), (TOTAL, TOTAL));
    assert_eq!(
        t.hash_sent, t.hash_received,
        "data changed across the bridge"
    );
    assert!(st.gso_tcp4 > 0, "no TCPv4 super-packets seen: {st:?}");
    assert!(st.super_frames > 0 && st.needs_csum > 0, "{st:?}");
    assert_eq!(st.bad_meta, None, "a GSO frame with odd vnet fields");
    assert_eq!(st.oversize, 0);
}

#[test]
fn vnet_bridge_segments_and_checksums_in_software_when_egress_lacks_tso() {
    let Some(lab) = BridgeLab::new("sw") else {
        return;
    };
    lab.egress_offloads_off();
    const TOTAL: u64 = 10 << 20;
    let (t, st) = bridged_transfer(&lab, Some(true), TOTAL, None);
    assert_eq!((t.sent, t.received), (TOTAL, TOTAL));
    assert_eq!(
        t.hash_sent, t.hash_received,
        "data changed across the bridge"
    );
    assert!(st.gso_tcp4 > 0 && st.tx_dropped == 0, "{st:?}");
}

#[test]
fn without_vnet_super_packets_are_oversize_but_offloads_off_works() {
    let Some(lab) = BridgeLab::new("nv") else {
        return;
    };
    lab.offloads_off();
    const TOTAL: u64 = 4 << 20;
    let (t, st) = bridged_transfer(&lab, Some(false), TOTAL, None);
    assert_eq!((t.received, t.hash_sent), (TOTAL, t.hash_received));
    assert_eq!((st.super_frames, st.oversize), (0, 0), "{st:?}");
}

/// Not a test of correctness: TCP throughput of the bridge, vnet vs offloads off vs the kernel.
/// `cargo test -p io --release vnet_bridge_throughput -- --ignored --nocapture`
#[test]
#[ignore = "measurement, prints rates"]
fn vnet_bridge_throughput() {
    let dur = Duration::from_secs(
        std::env::var("QN_VNET_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(3),
    );
    let rounds: usize = std::env::var("QN_VNET_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    // (name, user bridge with vnet / without / kernel bridge, offloads: on, off, egress off)
    let modes: [(&str, Option<bool>, u8); 5] = [
        ("user bridge, vnet_hdr, offloads on", Some(true), 0),
        ("user bridge, vnet_hdr, egress tso/csum off", Some(true), 2),
        ("user bridge, plain, offloads off", Some(false), 1),
        ("kernel bridge, offloads on", None, 0),
        ("kernel bridge, offloads off", None, 1),
    ];
    let mut rates = vec![Vec::new(); modes.len()];
    for round in 0..rounds {
        for (i, &(name, user, off)) in modes.iter().enumerate() {
            let Some(lab) = BridgeLab::new(&format!("t{round}{i}")) else {
                return;
            };
            match off {
                1 => lab.offloads_off(),
                2 => lab.egress_offloads_off(),
                _ => {}
            }
            let (t, st) = bridged_transfer(&lab, user, 0, Some(dur));
            assert_eq!(t.sent, t.received, "{name}: bytes lost");
            let gbit = t.received as f64 * 8.0 / t.secs / 1e9;
            eprintln!(
                "round {round} {name}: {gbit:.2} Gbit/s (frames {}, super {}, tx_dropped {})",
                st.frames, st.super_frames, st.tx_dropped
            );
            rates[i].push(gbit);
        }
    }
    for ((name, _, _), r) in modes.iter().zip(rates.iter_mut()) {
        r.sort_by(f64::total_cmp);
        eprintln!("median {name}: {:.2} Gbit/s {r:.2?}", r[r.len() / 2]);
    }
}

/// A mistake in a header or frame, and what it does to the UDP GSO packet.
type Mistake = (&'static str, Box<dyn Fn(&mut VnetHdr, &mut Vec<u8>)>);

/// Not a test of correctness: what the kernel does with common vnet-header mistakes
/// (why a first try "delivers nothing"). Prints one line per mistake and offload state.
/// `cargo test -p io vnet_tx_header_mistakes -- --ignored --nocapture`
#[test]
#[ignore = "diagnostic, prints a table"]
fn vnet_tx_header_mistakes() {
    let variants: Vec<Mistake> = vec![
        ("correct", Box::new(|_, _| {})),
        ("hdr_len 0", Box::new(|h, _| h.hdr_len = 0)),
        (
            "csum_start from IP (20)",
            Box::new(|h, _| h.csum_start = 20),
        ),
        ("no NEEDS_CSUM", Box::new(|h, _| h.flags = 0)),
        ("gso_size 0", Box::new(|h, _| h.gso_size = 0)),
        (
            "big-endian fields",
            Box::new(|h, _| {
                h.hdr_len = h.hdr_len.swap_bytes();
                h.gso_size = h.gso_size.swap_bytes();
                h.csum_start = h.csum_start.swap_bytes();
                h.csum_offset = h.csum_offset.swap_bytes();
            }),
        ),
        ("DATA_VALID kept", Box::new(|h, _| h.flags |= F_DATA_VALID)),
        (
            "hdr_len past the frame",
            Box::new(|h, f| h.hdr_len = f.len() as u16 + 1),
        ),
        (
            "gso_type TCPV4 on a UDP packet",
            Box::new(|h, _| h.gso_type = GsoType::TcpV4),
        ),
        (
            "complete csum field instead of pseudo sum",
            Box::new(|_, f| {
                let c = u16::from_be_bytes([f[40], f[41]]);
                f[40..42].copy_from_slice(&(!c).to_be_bytes());
            }),
        ),
    ];
    for (name, v) in variants {
        for off in [false, true] {
            let Some(lab) = lab("mis") else { return };
            if off {
                ethtool(
                    &lab.a,
                    &["-K", "afp0", "tx", "off", "tso", "off", "gso", "off"],
                );
            }
            let (ready_tx, ready_rx) = mpsc::channel();
            let peer = spawn_in(&lab.b, move || {
                let s = UdpSocket::bind("10.77.0.2:9997").unwrap();
                s.set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                ready_tx.send(()).unwrap();
                let mut n = 0;
                let mut buf = [0u8; 65536];
                while s.recv(&mut buf).is_ok() {
                    n += 1;
                }
                n
            });
            ready_rx.recv().unwrap();
            let (mut h, mut f) = udp_gso_a_to_b(9997, 1000, 20);
            v(&mut h, &mut f);
            let r = join(spawn_in(&lab.a, move || {
                let mut tx = AfPacketTx::open_vnet("afp0").unwrap();
                tx.send_vnet(&h, &f).unwrap();
                let r = tx.flush();
                (format!("{r:?}"), tx.dropped())
            }));
            eprintln!(
                "{name:45} offloads_off={off}: sendmmsg {:?} dropped {} -> {} datagrams",
                r.0,
                r.1,
                join(peer)
            );
        }
    }
}
