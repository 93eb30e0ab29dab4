//! The commands `host` runs, checked word for word against what the runtime ran before
//! they moved here, and live in namespaces of our own: the kernel's view after `ethtool`,
//! and the ingress table's effect on traffic (the kernel of the filtered namespace stops
//! answering transit packets, keeps answering its own).

use std::net::UdpSocket;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use super::*;
use crate::testnet::{join, spawn_in, VethLab};

#[test]
fn ingress_commands_are_the_ones_the_runtime_ran() {
    let local = [Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(198, 51, 100, 1)];
    let local6: [Ipv6Addr; 1] = ["fd00::1".parse().unwrap()];
    let got = commands("quicknat_7", &[("in0", 4), ("out0", 6)], &local, &local6);
    let want: Vec<Vec<&str>> = vec![
        vec!["add", "table", "netdev", "quicknat_7"],
        vec![
            "add",
            "chain",
            "netdev",
            "quicknat_7",
            "in0",
            "{ type filter hook ingress device \"in0\" priority -500; }",
        ],
        vec![
            "add",
            "rule",
            "netdev",
            "quicknat_7",
            "in0",
            "meta",
            "protocol",
            "ip",
            "ip",
            "daddr",
            "!=",
            "{ 10.0.0.1, 198.51.100.1, 255.255.255.255, 224.0.0.0/4 }",
            "drop",
        ],
        vec![
            "add",
            "chain",
            "netdev",
            "quicknat_7",
            "in1",
            "{ type filter hook ingress device \"out0\" priority -500; }",
        ],
        vec![
            "add",
            "rule",
            "netdev",
            "quicknat_7",
            "in1",
            "meta",
            "protocol",
            "ip6",
            "ip6",
            "daddr",
            "!=",
            "{ fd00::1, fe80::/10, ff00::/8 }",
            "drop",
        ],
    ];
    assert_eq!(got, want);
    // No local addresses: the sets keep only what is always the kernel's.
    let bare = commands("t", &[("d", 4)], &[], &[]);
    assert_eq!(bare[2][11], "{ 255.255.255.255, 224.0.0.0/4 }");
    assert_eq!(commands("t", &[], &[], &[]).len(), 1);
}

#[test]
fn offloads_untouched_without_ethtool() {
    match offloads_off_with(std::path::Path::new("qn-no-such-ethtool"), "lo") {
        Offloads::Untouched(e) => assert_eq!(e.kind(), io::ErrorKind::NotFound),
        other => panic!("expected Untouched, got {other:?}"),
    }
}

/// A [`VethLab`] for a test that also needs `tool`; `None` (skipped, with a message)
/// without it, without root or without `ip`.
fn lab_with(tool: &str, tag: &str, net: u8) -> Option<VethLab> {
    let has = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has {
        eprintln!("skipping {tag}: needs {tool}");
        return None;
    }
    VethLab::new(tag, tag, net)
}

/// `ip netns exec NS PROG ARGS`: its stdout, if it succeeded.
fn exec_in(ns: &str, prog: &str, args: &[&str]) -> Option<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, prog])
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn offloads_off_turns_them_off_on_a_veth() {
    let Some(lab) = lab_with("ethtool", "hoff", 84) else {
        return;
    };
    let dev = lab.dev_a.clone();
    let (did, unknown) = join(spawn_in(&lab.a, move || {
        (offloads_off(&dev), offloads_off("qn-no-such0"))
    }));
    eprintln!("ethtool on a veth: {did:?}");
    assert!(!matches!(did, Offloads::Untouched(_)), "{did:?}");
    assert!(matches!(unknown, Offloads::Partly(_)), "{unknown:?}");
    let k = exec_in(&lab.a, "ethtool", &["-k", &lab.dev_a]).expect("ethtool -k");
    for feature in [
        "generic-receive-offload",
        "tcp-segmentation-offload",
        "generic-segmentation-offload",
        "tx-checksumming",
        "large-receive-offload",
    ] {
        let line = k
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{feature}:")))
            .unwrap_or_else(|| panic!("{feature} not listed:\n{k}"));
        assert!(line.contains(": off"), "{line}");
    }
}

/// Sends a datagram from namespace b to 198.51.100.7 (routed via a) on a connected socket
/// and reports whether an ICMP error came back for it (namespace a's kernel, forwarding
/// with no route onwards, answers "network unreachable"; rate-limited to a burst of 5,
/// then one a second: each call uses one).
fn icmp_answers_transit(lab: &VethLab) -> bool {
    join(spawn_in(&lab.b, || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        // "Network unreachable" is a soft error: reported only with IP_RECVERR.
        let fd = std::os::fd::OwnedFd::from(s);
        let on: libc::c_int = 1;
        crate::sys::setsockopt(&fd, libc::SOL_IP, libc::IP_RECVERR, &on).unwrap();
        let s = UdpSocket::from(fd);
        s.connect("198.51.100.7:9").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(400)))
            .unwrap();
        (0..3).any(|_| {
            let _ = s.send(b"qn-host-transit");
            let mut buf = [0u8; 64];
            matches!(s.recv(&mut buf), Err(e) if e.kind() != io::ErrorKind::WouldBlock
                && e.kind() != io::ErrorKind::TimedOut)
        })
    }))
}

#[test]
fn ingress_filter_drops_transit_keeps_local_and_goes_away_on_drop() {
    let Some(lab) = lab_with("nft", "hnft", 85) else {
        return;
    };
    exec_in(&lab.a, "sysctl", &["-qw", "net.ipv4.ip_forward=1"]).expect("ip_forward");
    assert!(
        icmp_answers_transit(&lab),
        "the oracle: a forwards and complains"
    );
    let (table_tx, table_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let dev = lab.dev_a.clone();
    let gw = spawn_in(&lab.a, move || {
        let local = [Ipv4Addr::new(10, 85, 0, 1)];
        let f = IngressFilter::install(&[(&dev, 4)], &local, &[]).expect("install");
        table_tx.send(f.table().to_string()).unwrap();
        done_rx.recv().unwrap();
        drop(f);
    });
    let table = table_rx.recv().expect("filter thread died");
    let listing = exec_in(&lab.a, "nft", &["list", "table", "netdev", &table]).expect("nft list");
    assert!(
        listing.contains("hook ingress") && listing.contains("10.85.0.1"),
        "{listing}"
    );
    let pinged = join(spawn_in(&lab.b, || {
        Command::new("ping")
            .args(["-n", "-q", "-c", "1", "-W", "2", "10.85.0.1"])
            .output()
            .is_ok_and(|o| o.status.success())
    }));
    let transit_answered = icmp_answers_transit(&lab);
    done_tx.send(()).unwrap();
    join(gw);
    assert!(pinged, "the local address still reaches the kernel");
    assert!(!transit_answered, "transit dropped at ingress");
    assert!(
        exec_in(&lab.a, "nft", &["list", "table", "netdev", &table]).is_none(),
        "table removed on drop"
    );
    assert!(
        icmp_answers_transit(&lab),
        "transit reaches the kernel again"
    );
}

/// The soft and hard open-file limits, as `/proc/self/limits` shows them.
fn open_file_limits() -> (String, String) {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let mut words = line.split_whitespace().skip(3);
    let soft = words.next().unwrap().to_string();
    (soft, words.next().unwrap().to_string())
}

#[test]
fn open_file_limit_is_raised_never_lowered() {
    let (soft, hard) = open_file_limits();
    raise_open_file_limit(1).unwrap();
    assert_eq!(open_file_limits(), (soft.clone(), hard.clone()), "lowered");
    let Ok(soft_n) = soft.parse::<u64>() else {
        return; // unlimited: nothing to raise
    };
    raise_open_file_limit(soft_n + 1).unwrap();
    let (now, _) = open_file_limits();
    let want = hard
        .parse::<u64>()
        .map_or(soft_n + 1, |h| h.min(soft_n + 1));
    assert_eq!(now, want.to_string(), "hard limit {hard}");
}

#[test]
fn is_root_agrees_with_proc() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .unwrap();
    assert_eq!(is_root(), euid == "0");
}

#[test]
fn entering_a_missing_namespace_names_it() {
    let e = enter_netns("qn-no-such-namespace").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    assert!(
        e.to_string()
            .contains("/var/run/netns/qn-no-such-namespace"),
        "{e}"
    );
}

#[test]
fn driver_line_is_read_from_ethtool_output() {
    let text = "driver: veth\nversion: 1.0\nfirmware-version: \nbus-info: \n";
    assert_eq!(parse_driver(text).as_deref(), Some("veth"));
    assert_eq!(parse_driver("driver: \nversion: 1\n"), None);
    assert_eq!(parse_driver("no such line\n"), None);
}

#[test]
fn driver_names_a_veth_and_fails_on_no_interface() {
    let Some(lab) = lab_with("ethtool", "hdrv", 86) else {
        return;
    };
    let dev = lab.dev_a.clone();
    let (veth, none) = join(spawn_in(&lab.a, move || {
        (driver(&dev), driver("qn-no-such0"))
    }));
    assert_eq!(veth.expect("ethtool -i on a veth"), "veth");
    assert!(none.is_err(), "{none:?}");
}

#[test]
fn forward_guard_script_guards_each_interface_for_its_family_in_one_transaction() {
    let s = guard::script("quicknat_in0_out0", &[("in0", 6), ("out0", 4)]);
    let lines: Vec<&str> = s.lines().map(str::trim).collect();
    // Replacing a leftover table and installing the new one is one transaction: the
    // `add` makes the `delete` of a missing table a no-op.
    assert_eq!(lines[0], "add table inet quicknat_in0_out0");
    assert_eq!(lines[1], "delete table inet quicknat_in0_out0");
    assert!(lines.contains(&"type filter hook forward priority -500; policy accept;"));
    assert!(lines
        .iter()
        .any(|l| l.starts_with("iif \"in0\" meta nfproto ipv6 counter drop")));
    assert!(lines
        .iter()
        .any(|l| l.starts_with("iif \"out0\" meta nfproto ipv4 counter drop")));
    assert!(
        !s.contains("oif"),
        "what the kernel routes to the interfaces is not ours"
    );
}

#[test]
fn guard_counters_are_summed_from_the_listing() {
    let listing = "table inet t {\n\tchain forward {\n\t\ttype filter hook forward priority -500; policy accept;\n\t\tiif \"a\" meta nfproto ipv4 counter packets 7 bytes 700 drop comment \"x\"\n\t\tiif \"b\" meta nfproto ipv6 counter packets 2 bytes 160 drop\n\t}\n}\n";
    assert_eq!(
        guard::parse_counters(listing),
        Dropped {
            packets: 9,
            bytes: 860
        }
    );
    assert_eq!(guard::parse_counters(""), Dropped::default());
}

/// Datagrams to 198.51.100.7 namespace `ns` routed out (counted at postrouting by the
/// test's own table, so the interfaces' own traffic does not count).
fn routed(ns: &str) -> u64 {
    exec_in(ns, "nft", &["list", "table", "ip", "qgoracle"])
        .map(|l| guard::parse_counters(&l).packets)
        .expect("oracle table")
}

/// Sends `n` datagrams from namespace b to 198.51.100.7 (routed via a).
fn send_transit(lab: &VethLab, n: usize) {
    join(spawn_in(&lab.b, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        for _ in 0..n {
            let _ = s.send_to(b"qn-guard", "198.51.100.7:9");
        }
    }));
}

#[test]
fn forward_guard_drops_what_the_kernel_would_route_and_outlives_its_owner() {
    let Some(lab) = lab_with("nft", "hgrd", 86) else {
        return;
    };
    // Namespace a forwards 198.51.100.0/24 out of a veth of its own (a static neighbour:
    // no ARP); a counter at its postrouting hook is the oracle: every datagram routed.
    exec_in(&lab.a, "sysctl", &["-qw", "net.ipv4.ip_forward=1"]).expect("ip_forward");
    let ip = |args: &[&str]| exec_in(&lab.a, "ip", args).expect("ip");
    ip(&["link", "add", "qg0", "type", "veth", "peer", "name", "qg1"]);
    ip(&["link", "set", "qg0", "up"]);
    ip(&["link", "set", "qg1", "up"]);
    ip(&["route", "add", "198.51.100.0/24", "dev", "qg0"]);
    ip(&[
        "neigh",
        "add",
        "198.51.100.7",
        "lladdr",
        "02:00:00:00:00:07",
        "dev",
        "qg0",
        "nud",
        "permanent",
    ]);
    let oracle = "table ip qgoracle { chain post { type filter hook postrouting priority 0; ip daddr 198.51.100.7 counter; }; }";
    exec_in(&lab.a, "nft", &[oracle]).expect("oracle table");
    let before = routed(&lab.a);
    send_transit(&lab, 3);
    assert!(
        wait_until(|| routed(&lab.a) >= before + 3),
        "the oracle: a routes the datagrams out of qg0"
    );

    // Installed, then "killed": the process forgets the guard without removing it.
    let table = "quicknat_guard_test";
    let dev = lab.dev_a.clone();
    let leftover = join(spawn_in(&lab.a, move || {
        let (g, leftover) = ForwardGuard::install(table, &[(&dev, 4)]).expect("install");
        std::mem::forget(g);
        leftover
    }));
    assert_eq!(leftover, None, "no table before");
    let so_far = routed(&lab.a);
    send_transit(&lab, 5);
    let listing = || exec_in(&lab.a, "nft", &["list", "table", "inet", table]);
    assert!(
        wait_until(|| listing().is_some_and(|l| guard::parse_counters(&l).packets >= 5)),
        "{:?}",
        listing()
    );
    assert_eq!(routed(&lab.a), so_far, "nothing routed while guarded");

    // The next owner replaces it with no gap and learns what it dropped; its drop (a clean
    // stop) gives the interface back to the kernel.
    let dev = lab.dev_a.clone();
    let leftover = join(spawn_in(&lab.a, move || {
        let (g, leftover) = ForwardGuard::install(table, &[(&dev, 4)]).expect("reinstall");
        drop(g);
        leftover
    }));
    assert_eq!(leftover.map(|d| d.packets), Some(5));
    assert!(listing().is_none(), "removed on drop");
    send_transit(&lab, 2);
    assert!(
        wait_until(|| routed(&lab.a) >= so_far + 2),
        "routed again once the guard is gone"
    );
}

/// Whether `f` holds within 2 s (polled; the kernel counts asynchronously to the sender).
fn wait_until(f: impl Fn() -> bool) -> bool {
    let end = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        if f() {
            return true;
        }
        if std::time::Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
