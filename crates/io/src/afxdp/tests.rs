//! Live tests on a veth pair between two network namespaces of our own:
//!
//! ```text
//! ns qn-xdp-<tag>-<pid>-a: xdp0 10.78.0.1/24 02:00:00:00:4e:01   (AfXdp here)
//!        ==veth==
//! ns qn-xdp-<tag>-<pid>-b: xdp1 10.78.0.2/24 02:00:00:00:4e:02
//!                          route 198.51.100.0/24 via 10.78.0.1
//! ```
//!
//! 198.51.100.7 stands for "an address the gateway forwards to": not local,
//! so the XDP program steers frames for it into the socket, while frames for
//! 10.78.0.1 (in `local_v4`) and ARP go to the kernel of namespace a. The
//! peer's kernel (namespace b) is the independent oracle. Namespaces are
//! deleted by a guard, also when a test fails. Skipped (with a message) when
//! not root, without `ip`, or when the kernel has no AF_XDP; built without
//! clang, the tests FAIL (CI must install clang).

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use super::*;

const MAC_A: [u8; 6] = [2, 0, 0, 0, 78, 1];
const MAC_B: [u8; 6] = [2, 0, 0, 0, 78, 2];
const IP_A: [u8; 4] = [10, 78, 0, 1];
const IP_B: [u8; 4] = [10, 78, 0, 2];
/// A forwarded (non-local) destination behind the AF_XDP side.
const IP_FWD: [u8; 4] = [198, 51, 100, 7];

use crate::host::is_root;
use crate::testnet::{self, has_iproute2, ip, join, spawn_in, Namespaces, VethLab};

/// The lab of these tests ([`VethLab`]: xdp0 in namespace a, xdp1 in b); deleted on drop.
struct Lab(VethLab);

impl std::ops::Deref for Lab {
    type Target = VethLab;
    fn deref(&self) -> &VethLab {
        &self.0
    }
}

/// Why live tests cannot run here, if they cannot. Missing clang is NOT a
/// reason: that fails the test (see [`require_bpf`]).
pub(crate) fn skip_reason() -> Option<&'static str> {
    if !is_root() {
        return Some("needs root");
    }
    if !has_iproute2() {
        return Some("needs iproute2");
    }
    match sys::xdp_socket() {
        Err(e) if e.kind() == io::ErrorKind::Unsupported => {
            Some("the kernel does not support AF_XDP")
        }
        _ => None,
    }
}

/// Fails the test when the crate was built without clang (CI must install it).
pub(crate) fn require_bpf() {
    assert!(
        built_with_bpf(),
        "{}: CI must install clang",
        loader::NO_CLANG
    );
}

impl Lab {
    /// Builds the lab, or returns None (test skipped, reason printed).
    fn new(tag: &str) -> Option<Lab> {
        if let Some(why) = skip_reason() {
            eprintln!("skipping af_xdp live test {tag}: {why}");
            return None;
        }
        require_bpf();
        VethLab::new(&format!("xdp-{tag}"), "xdp", 78).map(Lab)
    }

    /// Runs `f` in a new thread inside namespace `ns`.
    fn spawn<T: Send + 'static>(
        ns: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        spawn_in(ns, f)
    }

    /// Whether an XDP program is attached to xdp0 (per `ip link show`).
    fn xdp_attached(&self) -> bool {
        let out = Command::new("ip")
            .args(["-n", &self.a, "link", "show", "dev", "xdp0"])
            .output()
            .expect("ip link show");
        let s = String::from_utf8_lossy(&out.stdout);
        // `... mtu 1500 xdp qdisc ...` (or xdpgeneric, xdpdrv, ...) and `prog/xdp id N`.
        s.contains("prog/xdp")
            || s.split_whitespace().any(|w| {
                matches!(
                    w,
                    "xdp" | "xdpgeneric" | "xdpdrv" | "xdpoffload" | "xdpmulti"
                )
            })
    }

    /// `ping -c 1` from namespace b; whether a reply came.
    fn ping_from_b(&self, dst: &str) -> bool {
        Command::new("ip")
            .args([
                "netns", "exec", &self.b, "ping", "-n", "-q", "-c", "1", "-W", "2", dst,
            ])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

fn config(local: bool) -> AfXdpConfig {
    AfXdpConfig {
        local_v4: if local { vec![IP_A.into()] } else { Vec::new() },
        ..AfXdpConfig::new("xdp0")
    }
}

/// Ethernet (A -> B) + IPv4 header around `l4`, with the IP checksum.
fn eth_ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, l4: &[u8]) -> Vec<u8> {
    testnet::eth_ipv4(MAC_B, MAC_A, src, dst, proto, l4)
}

/// A parsed IPv4 frame: (src, dst, protocol, L4 bytes).
type V4<'a> = ([u8; 4], [u8; 4], u8, &'a [u8]);

/// Parses an IPv4 frame, if it is one.
fn parse_v4(frame: &[u8]) -> Option<V4<'_>> {
    if frame.len() < 34 || frame[12..14] != [0x08, 0x00] || frame[14] >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(frame[14] & 0xf) * 4;
    let total = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
    let l4 = frame.get(14 + ihl..14 + total)?;
    let src = frame[26..30].try_into().ok()?;
    let dst = frame[30..34].try_into().ok()?;
    Some((src, dst, frame[23], l4))
}

/// Receives for up to `dur`, calling `f` on each frame until `f` returns true.
fn drain(x: &mut AfXdp, dur: Duration, mut f: impl FnMut(&mut [u8]) -> bool) -> bool {
    let end = Instant::now() + dur;
    let mut done = false;
    while Instant::now() < end && !done {
        x.recv_batch(Duration::from_millis(20), |frame| {
            done = done || f(frame);
            None
        })
        .expect("recv_batch");
    }
    done
}

#[test]
fn open_errors_are_clear() {
    let e = AfXdp::open(&AfXdpConfig::new("qn-no-such0"))
        .err()
        .expect("must fail");
    if !built_with_bpf() {
        assert_eq!(e.to_string(), loader::NO_CLANG);
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
        return;
    }
    assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    assert_eq!(e.to_string(), "no such interface: qn-no-such0");
    let bad = AfXdpConfig {
        frame_size: 1000,
        ..AfXdpConfig::new("lo")
    };
    let e = AfXdp::open(&bad).err().expect("must fail");
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("frame_size 1000"), "{e}");
}

#[test]
fn rx_steers_ip_to_the_socket_and_leaves_arp_and_local_to_the_kernel() {
    let Some(lab) = Lab::new("rx") else { return };
    let (ready_tx, ready_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let gw = Lab::spawn(&lab.a, move || {
        // A kernel socket on the local address: must get its datagram, not us.
        let local = UdpSocket::bind("10.78.0.1:9998").expect("bind local");
        local
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut x = AfXdp::open(&config(true)).expect("open AfXdp");
        ready_tx.send(x.native_mode()).unwrap();
        let (mut echo, mut udp, mut leaked) = (0, Vec::new(), 0);
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end && stop_rx.try_recv().is_err() {
            x.recv_batch(Duration::from_millis(20), |frame| {
                let (src, dst, proto, l4) = parse_v4(frame)?;
                if dst == IP_A {
                    leaked += 1;
                }
                if (src, dst) != (IP_B, IP_FWD) {
                    return None;
                }
                assert_eq!((&frame[0..6], &frame[6..12]), (&MAC_A[..], &MAC_B[..]));
                match proto {
                    1 if l4.first() == Some(&8) => echo += 1,
                    17 if l4.len() >= 8 => {
                        let dport = u16::from_be_bytes([l4[2], l4[3]]);
                        udp.push((dport, l4[8..].to_vec()));
                    }
                    _ => {}
                }
                None
            })
            .expect("recv_batch");
        }
        let mut buf = [0u8; 64];
        let local_got = local.recv_from(&mut buf).map(|(n, _)| buf[..n].to_vec());
        (echo, udp, leaked, local_got.ok(), x.stats().unwrap())
    });
    let native = ready_rx.recv().expect("gw thread died");
    assert!(lab.xdp_attached(), "program attached while open");
    // ARP for 10.78.0.1 and the echo to it are answered by namespace a's kernel.
    assert!(lab.ping_from_b("10.78.0.1"), "ping to the local address");
    // An echo to a forwarded address reaches the socket (no reply: nobody answers).
    let _ = lab.ping_from_b("198.51.100.7");
    join(Lab::spawn(&lab.b, || {
        let s = UdpSocket::bind("10.78.0.2:0").unwrap();
        s.send_to(b"to-the-kernel", "10.78.0.1:9998").unwrap();
        for i in 0..3 {
            s.send_to(format!("qn-xdp-rx-{i}").as_bytes(), "198.51.100.7:9999")
                .unwrap();
        }
    }));
    thread::sleep(Duration::from_millis(300));
    stop_tx.send(()).unwrap();
    let (echo, udp, leaked, local_got, stats) = join(gw);
    eprintln!("native XDP: {native}; stats {stats:?}");
    assert!(echo >= 1, "ICMP echo to 198.51.100.7 reached the socket");
    let want: Vec<(u16, Vec<u8>)> = (0..3)
        .map(|i| (9999, format!("qn-xdp-rx-{i}").into_bytes()))
        .collect();
    assert_eq!(udp, want, "UDP datagrams, in order, bytes intact");
    assert_eq!(leaked, 0, "frames for the local address went to the kernel");
    assert_eq!(local_got.as_deref(), Some(&b"to-the-kernel"[..]));
    assert_eq!(stats.rx_dropped, 0);
    assert!(!lab.xdp_attached(), "program detached on drop");
}

/// An ICMP echo request from the forwarded address to B.
fn echo_request(id: u16, seq: u16) -> Vec<u8> {
    let icmp = testnet::icmp_echo(id, seq, b"quicknat af_xdp echo");
    eth_ipv4(IP_FWD, IP_B, 1, &icmp)
}

#[test]
fn tx_echo_request_is_answered_through_the_socket() {
    let Some(lab) = Lab::new("tx") else { return };
    let gw = Lab::spawn(&lab.a, move || {
        let mut x = AfXdp::open(&config(true)).expect("open AfXdp");
        let mut reply = None;
        for seq in 1..=5u16 {
            x.send(&echo_request(0x4343, seq)).unwrap();
            x.flush().unwrap();
            drain(&mut x, Duration::from_secs(1), |frame| {
                if let Some((src, dst, 1, icmp)) = parse_v4(frame) {
                    if icmp.len() >= 8 && icmp[0] == 0 {
                        let id = u16::from_be_bytes([icmp[4], icmp[5]]);
                        reply = Some((src, dst, id, icmp[8..].to_vec()));
                        return true;
                    }
                }
                false
            });
            if reply.is_some() {
                break;
            }
        }
        (reply, x.stats().unwrap())
    });
    let (reply, stats) = join(gw);
    assert_eq!(
        reply,
        Some((IP_B, IP_FWD, 0x4343, b"quicknat af_xdp echo".to_vec())),
        "no echo reply (stats {stats:?})"
    );
    assert_eq!((stats.tx_dropped, stats.invalid_descs), (0, 0));
    assert!(!lab.xdp_attached(), "program detached on drop");
}

#[test]
fn hairpin_returns_a_rewritten_frame_without_copy() {
    let Some(lab) = Lab::new("hp") else { return };
    let (ready_tx, ready_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let gw = Lab::spawn(&lab.a, move || {
        let mut x = AfXdp::open(&config(true)).expect("open AfXdp");
        ready_tx.send(()).unwrap();
        // Reflect UDP to 198.51.100.7:7777 by swapping MACs, addresses and
        // ports in place, in the UMEM frame, and send it back out.
        while stop_rx.try_recv().is_err() {
            x.recv_batch(Duration::from_millis(20), |f| {
                let (_, _, 17, l4) = parse_v4(f)? else {
                    return None;
                };
                if l4.len() < 8 || l4[2..4] != 7777u16.to_be_bytes() {
                    return None;
                }
                let len = f.len();
                for i in 0..6 {
                    f.swap(i, 6 + i);
                }
                for i in 0..4 {
                    f.swap(26 + i, 30 + i);
                }
                for i in 0..2 {
                    f.swap(34 + i, 36 + i);
                }
                // The peer's veth hands over a partial (pseudo-header only)
                // UDP checksum and AF_XDP carries no flag saying so: complete
                // it, as a gateway must when offloads are on.
                let (src, dst) = (IP_FWD, IP_B);
                wire::UdpPacket::new_unchecked(&mut f[34..len]).fill_checksum_v4(src, dst);
                Some(len)
            })
            .unwrap();
        }
        x.stats().unwrap()
    });
    ready_rx.recv().unwrap();
    let got = join(Lab::spawn(&lab.b, || {
        let s = UdpSocket::bind("10.78.0.2:0").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut buf = [0u8; 64];
        for _ in 0..6 {
            s.send_to(b"qn-xdp-hairpin", "198.51.100.7:7777").unwrap();
            if let Ok((n, from)) = s.recv_from(&mut buf) {
                return Some((buf[..n].to_vec(), from));
            }
        }
        None
    }));
    stop_tx.send(()).unwrap();
    let stats = join(gw);
    let (payload, from) = got.unwrap_or_else(|| panic!("no reflected datagram ({stats:?})"));
    assert_eq!(payload, b"qn-xdp-hairpin");
    assert_eq!(from, "198.51.100.7:7777".parse().unwrap());
    assert!(stats.tx_frames >= 1 && stats.tx_dropped == 0, "{stats:?}");
}

/// Kills and reaps a child process on drop (also when a test fails).
struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Child half of [`sigkill_leaves_no_program_attached`]: opens an AfXdp in
/// namespace `$QN_XDP_CHILD_NS`, says so on stdout and waits to be killed.
#[test]
#[ignore = "helper process, run by sigkill_leaves_no_program_attached"]
fn sigkill_child() {
    let Ok(ns) = std::env::var("QN_XDP_CHILD_NS") else {
        return;
    };
    crate::host::enter_netns(&ns).expect("setns");
    let _x = AfXdp::open(&config(true)).expect("child: open AfXdp");
    println!("QN-XDP-CHILD-READY");
    thread::sleep(Duration::from_secs(30));
}

#[test]
fn sigkill_leaves_no_program_attached() {
    let Some(lab) = Lab::new("kill") else { return };
    let exe = std::env::current_exe().expect("test binary");
    let child = Command::new(exe)
        .args([
            "--exact",
            "afxdp::tests::sigkill_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("QN_XDP_CHILD_NS", &lab.a)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let mut child = ChildGuard(child);
    let out = child.0.stdout.take().expect("child stdout");
    let ready = BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.contains("QN-XDP-CHILD-READY"));
    assert!(ready, "child never opened its AfXdp");
    assert!(lab.xdp_attached(), "child attached the program");
    child.0.kill().expect("SIGKILL child");
    child.0.wait().expect("reap child");
    let end = Instant::now() + Duration::from_secs(2);
    while lab.xdp_attached() && Instant::now() < end {
        thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !lab.xdp_attached(),
        "the BPF link died with the process: no program left attached"
    );
}

/// Not a test of correctness: a rough receive rate for a 2 s UDP flood.
/// `cargo test -p io --release afxdp_rx_flood_rate -- --ignored --nocapture`
#[test]
#[ignore = "measurement, prints a rate"]
fn afxdp_rx_flood_rate() {
    let Some(lab) = Lab::new("flood") else { return };
    let dur = Duration::from_secs(2);
    let (ready_tx, ready_rx) = mpsc::channel();
    let gw = Lab::spawn(&lab.a, move || {
        let mut x = AfXdp::open(&config(true)).unwrap();
        ready_tx.send(x.native_mode()).unwrap();
        let (mut n, start) = (0u64, Instant::now());
        while start.elapsed() < dur + Duration::from_millis(200) {
            n += x.recv_batch(Duration::from_millis(10), |_| None).unwrap() as u64;
        }
        (n, x.stats().unwrap())
    });
    let native = ready_rx.recv().unwrap();
    let sent = join(testnet::udp_flood(
        &lab.b,
        "10.78.0.2:0",
        "198.51.100.7:9",
        dur,
    ));
    let (n, stats) = join(gw);
    eprintln!(
        "af_xdp rx (native {native}): sent {sent}, received {n} = {:.0} pps; {stats:?}",
        n as f64 / dur.as_secs_f64()
    );
}

/// IPv6: the host's own address, link-local and multicast (neighbour discovery) go to the
/// kernel; other IPv6 reaches the socket; with IPv4 not steered, IPv4 goes to the kernel
/// even without `local_v4`.
#[test]
fn ipv6_local_and_link_local_go_to_the_kernel_and_unsteered_families_too() {
    let Some(lab) = Lab::new("v6") else { return };
    for s in [
        &[
            "-n",
            lab.a.as_str(),
            "addr",
            "add",
            "fd00:78::1/64",
            "dev",
            "xdp0",
            "nodad",
        ][..],
        &[
            "-n",
            lab.b.as_str(),
            "addr",
            "add",
            "fd00:78::2/64",
            "dev",
            "xdp1",
            "nodad",
        ],
        &[
            "-n",
            lab.b.as_str(),
            "route",
            "add",
            "2001:db8:99::/64",
            "via",
            "fd00:78::1",
        ],
    ] {
        assert!(ip(s), "ip {}", s.join(" "));
    }
    let (ready_tx, ready_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let gw = Lab::spawn(&lab.a, move || {
        let mut cfg = AfXdpConfig::new("xdp0");
        cfg.local_v6 = vec!["fd00:78::1".parse().unwrap()];
        cfg.steer = Steer {
            ipv4: false,
            ipv6: true,
        };
        let mut x = AfXdp::open(&cfg).expect("open AfXdp");
        ready_tx.send(()).unwrap();
        let (mut fwd, mut leaked) = (0, 0);
        let end = Instant::now() + Duration::from_secs(15);
        while Instant::now() < end && stop_rx.try_recv().is_err() {
            x.recv_batch(Duration::from_millis(20), |frame| {
                match u16::from_be_bytes([frame[12], frame[13]]) {
                    0x86dd if frame.len() >= 54 => {
                        let dst = &frame[38..54];
                        if dst[0] == 0x20 && dst[1] == 0x01 {
                            fwd += 1;
                        } else {
                            leaked += 1;
                        }
                    }
                    _ => leaked += 1,
                }
                None
            })
            .expect("recv_batch");
        }
        (fwd, leaked)
    });
    ready_rx.recv().expect("gw thread died");
    let ping6 = |dst: &str| {
        Command::new("ip")
            .args([
                "netns", "exec", &lab.b, "ping", "-6", "-n", "-q", "-c", "1", "-W", "2", dst,
            ])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    assert!(
        ping6("fd00:78::1"),
        "ping6 to the host's own address (ND + echo to the kernel)"
    );
    assert!(
        lab.ping_from_b("10.78.0.1"),
        "IPv4 not steered: the kernel answers"
    );
    let _ = ping6("2001:db8:99::7"); // forwarded: reaches the socket, nobody answers
    thread::sleep(Duration::from_millis(200));
    stop_tx.send(()).unwrap();
    let (fwd, leaked) = join(gw);
    assert!(fwd >= 1, "IPv6 to a forwarded address reached the socket");
    assert_eq!(leaked, 0, "nothing for the kernel reached the socket");
}

/// A sender whose veth keeps its offloads on (tx checksumming, TSO, GSO: the defaults)
/// talks TCP through an AF_XDP bridge:
///
/// ```text
/// ns c: t0 10.79.0.1 ==veth== ns g: t1 (AfXdp) <-> t2 (AfXdp) ==veth== ns s: t3 10.79.0.2
/// ```
///
/// Frames cross unchanged, so the server's kernel checks exactly what the sender's
/// offloads produced. The sender's segments come with partial checksums (which
/// `recv_batch` must complete, or the server drops every one, SYN included) and never
/// larger than the MTU (attaching XDP turns the veth peer's TSO off). ARP would go to
/// ns g's kernel, so the ends use static neighbours.
#[test]
fn tcp_from_a_sender_with_offloads_on_crosses_an_af_xdp_bridge() {
    if let Some(why) = skip_reason() {
        eprintln!("skipping af_xdp live test tso: {why}");
        return;
    }
    assert!(built_with_bpf(), "{}", loader::NO_CLANG);
    let pid = std::process::id();
    let [c, g, s] = ["c", "g", "s"].map(|t| format!("qn-xdp-{pid}-tso-{t}"));
    let _ns = Namespaces::create(&[c.clone(), g.clone(), s.clone()]);
    let (c, g, s) = (c.as_str(), g.as_str(), s.as_str());
    let steps: &[&[&str]] = &[
        &[
            "-n", c, "link", "add", "t0", "type", "veth", "peer", "name", "t1", "netns", g,
        ],
        &[
            "-n", s, "link", "add", "t3", "type", "veth", "peer", "name", "t2", "netns", g,
        ],
        &["-n", c, "link", "set", "t0", "address", "02:00:00:00:02:01"],
        &["-n", s, "link", "set", "t3", "address", "02:00:00:00:02:02"],
        &["-n", c, "addr", "add", "10.79.0.1/24", "dev", "t0"],
        &["-n", s, "addr", "add", "10.79.0.2/24", "dev", "t3"],
        &[
            "-n",
            c,
            "neigh",
            "add",
            "10.79.0.2",
            "lladdr",
            "02:00:00:00:02:02",
            "dev",
            "t0",
            "nud",
            "permanent",
        ],
        &[
            "-n",
            s,
            "neigh",
            "add",
            "10.79.0.1",
            "lladdr",
            "02:00:00:00:02:01",
            "dev",
            "t3",
            "nud",
            "permanent",
        ],
        &["-n", c, "link", "set", "t0", "up"],
        &["-n", g, "link", "set", "t1", "up"],
        &["-n", g, "link", "set", "t2", "up"],
        &["-n", s, "link", "set", "t3", "up"],
    ];
    for st in steps {
        assert!(ip(st), "lab setup failed: ip {}", st.join(" "));
    }
    let (ready_tx, ready_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let bridge = spawn_in(g, move || {
        let mut x = [
            AfXdp::open(&AfXdpConfig::new("t1")).expect("open AfXdp on t1"),
            AfXdp::open(&AfXdpConfig::new("t2")).expect("open AfXdp on t2"),
        ];
        ready_tx.send(()).unwrap();
        let mut longest = 0usize;
        while stop_rx.try_recv().is_err() {
            let _ = wait_readable(&[&x[0], &x[1]], Duration::from_millis(20));
            for i in 0..2 {
                let (l, r) = x.split_at_mut(1);
                let (from, to) = if i == 0 {
                    (&mut l[0], &mut r[0])
                } else {
                    (&mut r[0], &mut l[0])
                };
                from.recv_batch(Duration::ZERO, |f| {
                    longest = longest.max(f.len());
                    let _ = to.send(f);
                    None
                })
                .expect("recv_batch");
                to.flush().expect("flush");
            }
        }
        (longest, x[0].stats().unwrap(), x[1].stats().unwrap())
    });
    ready_rx.recv().unwrap();
    // The defaults, said out loud: the sender keeps every tx offload it is allowed.
    let _ = Command::new("ip")
        .args([
            "netns", "exec", c, "ethtool", "-K", "t0", "tx", "on", "tso", "on", "gso", "on",
        ])
        .output();
    const BYTES: usize = 4 << 20;
    let (port_tx, port_rx) = mpsc::channel();
    let server = spawn_in(s, move || {
        use std::io::Read;
        let l = std::net::TcpListener::bind("10.79.0.2:0").unwrap();
        port_tx.send(l.local_addr().unwrap().port()).unwrap();
        let (mut conn, _) = l.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let (mut got, mut sum) = (0usize, 0u64);
        let mut buf = vec![0u8; 65536];
        while let Ok(n) = conn.read(&mut buf) {
            if n == 0 {
                break;
            }
            got += n;
            sum += buf[..n].iter().map(|&x| u64::from(x)).sum::<u64>();
        }
        (got, sum)
    });
    let port = port_rx.recv().unwrap();
    let client = spawn_in(c, move || {
        use std::io::Write;
        let to = std::net::SocketAddr::from(([10, 79, 0, 2], port));
        let mut conn = std::net::TcpStream::connect_timeout(&to, Duration::from_secs(5))
            .map_err(|e| format!("connect: {e}"))?;
        conn.set_write_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let data: Vec<u8> = (0..BYTES).map(|i| (i % 251) as u8).collect();
        conn.write_all(&data).map_err(|e| format!("write: {e}"))?;
        Ok::<u64, String>(data.iter().map(|&x| u64::from(x)).sum())
    });
    let sent = join(client);
    // The server reads to EOF (or a 5 s silence) while the bridge still runs.
    let (got, sum) = if sent.is_ok() { join(server) } else { (0, 0) };
    stop_tx.send(()).unwrap();
    let (longest, sa, sb) = join(bridge);
    let sent = sent.unwrap_or_else(|e| panic!("TCP through the bridge failed: {e}; {sa:?} {sb:?}"));
    assert_eq!((got, sum), (BYTES, sent), "{sa:?} {sb:?}");
    assert!(
        sa.csum_completed > 0,
        "the sender's partial checksums were completed: {sa:?}"
    );
    assert!(
        longest <= 1514,
        "no super-packet reaches XDP on veth (longest frame {longest})"
    );
}
