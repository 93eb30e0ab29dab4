//! Test support shared by the backends' live tests: network namespaces the tests create,
//! run code inside, and always delete (also when a test panics). Compiled for tests only.

use std::process::Command;
use std::thread;

use crate::host::{enter_netns, is_root};

/// Runs `ip ARGS`; whether it succeeded.
pub(crate) fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether iproute2's `ip` is installed.
pub(crate) fn has_iproute2() -> bool {
    Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Namespaces created by a test, deleted on drop.
#[derive(Debug)]
pub(crate) struct Namespaces {
    /// Their names, in creation order.
    pub names: Vec<String>,
}

impl Namespaces {
    /// Creates `names` (each with `lo` up). Panics if `ip` refuses; whatever was created
    /// is deleted again by the drop.
    pub(crate) fn create(names: &[String]) -> Self {
        let mut ns = Namespaces { names: Vec::new() };
        for n in names {
            assert!(ip(&["netns", "add", n]), "ip netns add {n}");
            ns.names.push(n.clone());
            assert!(ip(&["-n", n, "link", "set", "lo", "up"]), "lo up in {n}");
        }
        ns
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// Runs `f` in a new thread inside namespace `ns`.
pub(crate) fn spawn_in<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let ns = ns.to_owned();
    thread::spawn(move || {
        enter_netns(&ns).unwrap_or_else(|e| panic!("{e}"));
        f()
    })
}

/// Joins a test thread, re-raising its panic with the original message.
pub(crate) fn join<T>(h: thread::JoinHandle<T>) -> T {
    h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// Two namespaces of our own joined by a veth pair, deleted on drop:
///
/// ```text
/// ns qn-<tag>-<pid>-a: <dev>0 10.<net>.0.1/24 02:00:00:00:<net>:01
///        ==veth==
/// ns qn-<tag>-<pid>-b: <dev>1 10.<net>.0.2/24 02:00:00:00:<net>:02
///                      route 198.51.100.0/24 via 10.<net>.0.1
/// ```
///
/// 198.51.100.0/24 stands for "addresses the code under test forwards to": not local to
/// namespace a, so its kernel does not answer them.
#[derive(Debug)]
pub(crate) struct VethLab {
    /// The namespace the code under test runs in.
    pub a: String,
    /// The peer namespace (the kernel oracle).
    pub b: String,
    /// The device in namespace a.
    pub dev_a: String,
    _ns: Namespaces,
}

impl VethLab {
    /// Builds the lab, or `None` (test skipped, with a message) when not root or without
    /// `ip`. Panics if a step fails; whatever was created is deleted again.
    pub(crate) fn new(tag: &str, dev: &str, net: u8) -> Option<VethLab> {
        if !is_root() || !has_iproute2() {
            eprintln!("skipping live test {tag}: needs root and iproute2");
            return None;
        }
        let pid = std::process::id();
        let (a, b) = (format!("qn-{tag}-{pid}-a"), format!("qn-{tag}-{pid}-b"));
        let lab = VethLab {
            _ns: Namespaces::create(&[a.clone(), b.clone()]),
            a,
            b,
            dev_a: format!("{dev}0"),
        };
        let (a, b, da, db) = (&lab.a, &lab.b, &lab.dev_a, &format!("{dev}1"));
        let (ip_a, ip_b) = (format!("10.{net}.0.1"), format!("10.{net}.0.2"));
        let (mac_a, mac_b) = (
            format!("02:00:00:00:{net:02x}:01"),
            format!("02:00:00:00:{net:02x}:02"),
        );
        let (net_a, net_b) = (format!("{ip_a}/24"), format!("{ip_b}/24"));
        let steps: [Vec<&str>; 8] = [
            vec![
                "-n", a, "link", "add", da, "type", "veth", "peer", "name", db, "netns", b,
            ],
            vec!["-n", a, "link", "set", da, "address", &mac_a],
            vec!["-n", b, "link", "set", db, "address", &mac_b],
            vec!["-n", a, "addr", "add", &net_a, "dev", da],
            vec!["-n", b, "addr", "add", &net_b, "dev", db],
            vec!["-n", a, "link", "set", da, "up"],
            vec!["-n", b, "link", "set", db, "up"],
            vec!["-n", b, "route", "add", "198.51.100.0/24", "via", &ip_a],
        ];
        for s in &steps {
            // `lab` is dropped (namespaces deleted) if a step fails.
            assert!(ip(s), "lab setup failed: ip {}", s.join(" "));
        }
        Some(lab)
    }
}

/// Ethernet (`src_mac` -> `dst_mac`) + an IPv4 header (DF, TTL 64) for `proto` around
/// `l4`, with the IP checksum.
pub(crate) fn eth_ipv4(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    proto: u8,
    l4: &[u8],
) -> Vec<u8> {
    let mut f = Vec::with_capacity(34 + l4.len());
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    let mut iph = [0u8; 20];
    iph[0] = 0x45;
    iph[2..4].copy_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    iph[6] = 0x40; // DF
    iph[8] = 64;
    iph[9] = proto;
    iph[12..16].copy_from_slice(&src);
    iph[16..20].copy_from_slice(&dst);
    let c = wire::checksum::checksum(&iph);
    iph[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&iph);
    f.extend_from_slice(l4);
    f
}

/// An ICMP echo request (type 8) with `id`, `seq` and `text`, checksummed.
pub(crate) fn icmp_echo(id: u16, seq: u16, text: &[u8]) -> Vec<u8> {
    let mut icmp = vec![8u8, 0, 0, 0];
    icmp.extend_from_slice(&id.to_be_bytes());
    icmp.extend_from_slice(&seq.to_be_bytes());
    icmp.extend_from_slice(text);
    let c = wire::checksum::checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    icmp
}

/// Floods 64-byte UDP datagrams from namespace `ns` (bound to `from`) to `to` for `dur`,
/// in a thread; its result is how many the socket accepted.
pub(crate) fn udp_flood(
    ns: &str,
    from: &'static str,
    to: &'static str,
    dur: std::time::Duration,
) -> thread::JoinHandle<u64> {
    spawn_in(ns, move || {
        let s = std::net::UdpSocket::bind(from).unwrap();
        s.connect(to).unwrap();
        let buf = [0x5au8; 64];
        let (mut sent, start) = (0u64, std::time::Instant::now());
        while start.elapsed() < dur {
            for _ in 0..256 {
                if s.send(&buf).is_ok() {
                    sent += 1;
                }
            }
        }
        sent
    })
}
