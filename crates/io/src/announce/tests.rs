//! The announcement device and its routes, against the kernel in a namespace of our own:
//! what `ip route` shows is the oracle.

use std::net::IpAddr;
use std::process::Command;

use super::*;
use crate::host::is_root;
use crate::netlink::{DevRoute, Netlink};
use crate::testnet::{has_iproute2, join, spawn_in, Namespaces};

/// `ip -n NS ARGS`'s standard output.
fn ip_out(ns: &str, args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(["-n", ns])
        .args(args)
        .output()
        .expect("ip runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn route(dst: &str, len: u8, ifindex: u32, metric: u32) -> DevRoute {
    DevRoute {
        dst: dst.parse::<IpAddr>().unwrap(),
        prefix_len: len,
        ifindex,
        table: 250,
        protocol: 250,
        metric,
    }
}

#[test]
fn an_interface_name_too_long_is_refused_before_any_syscall() {
    let e = AnnounceDevice::create("a-name-far-too-long").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
}

#[test]
fn routes_on_the_device_appear_in_their_table_and_go_with_the_device() {
    if !is_root() || !has_iproute2() || tun_available().is_err() {
        eprintln!("skipping: needs root, iproute2 and /dev/net/tun");
        return;
    }
    let ns = format!("qn-ann-{}", std::process::id());
    let _guard = Namespaces::create(std::slice::from_ref(&ns));
    let ns2 = ns.clone();
    join(spawn_in(&ns, move || {
        let dev = AnnounceDevice::create("qn-test0").expect("TUN device");
        assert!(
            link_running("qn-test0").unwrap(),
            "the device is up and running"
        );
        // A second gateway with the same device name is refused, not handed ours.
        let again = AnnounceDevice::create("qn-test0").unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists, "{again}");
        let mut nl = Netlink::open().unwrap();
        let routes = [
            route("0.0.0.0", 0, dev.index(), 100),
            route("203.0.113.0", 29, dev.index(), 100),
            route("203.0.113.8", 29, dev.index(), 1000),
            route("2001:db8:64::", 96, dev.index(), 100),
        ];
        for r in &routes {
            nl.add_dev_route(r).unwrap_or_else(|e| panic!("{r:?}: {e}"));
            nl.add_dev_route(r).expect("announcing twice is harmless");
        }
        let v4 = ip_out(&ns2, &["route", "show", "table", "250"]);
        assert!(
            v4.contains("default dev qn-test0 proto 250 scope link metric 100"),
            "{v4}"
        );
        assert!(
            v4.contains("203.0.113.0/29 dev qn-test0 proto 250 scope link metric 100"),
            "{v4}"
        );
        assert!(
            v4.contains("203.0.113.8/29 dev qn-test0 proto 250 scope link metric 1000"),
            "{v4}"
        );
        let v6 = ip_out(&ns2, &["-6", "route", "show", "table", "250"]);
        assert!(
            v6.contains("2001:db8:64::/96 dev qn-test0 proto 250 metric 100"),
            "{v6}"
        );
        // Nothing leaks into the main table.
        assert!(!ip_out(&ns2, &["route", "show"]).contains("qn-test0"));
        // Withdraw one, twice: harmless.
        nl.del_dev_route(&routes[1]).unwrap();
        nl.del_dev_route(&routes[1])
            .expect("withdrawing twice is harmless");
        let v4 = ip_out(&ns2, &["route", "show", "table", "250"]);
        assert!(!v4.contains("203.0.113.0/29"), "{v4}");
        assert!(v4.contains("203.0.113.8/29"), "{v4}");
        // The device (and every route on it) goes with the descriptor.
        drop(dev);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while crate::netlink::if_index("qn-test0").is_ok() {
            assert!(std::time::Instant::now() < deadline, "device still there");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let v4 = ip_out(&ns2, &["route", "show", "table", "250"]);
        assert!(v4.trim().is_empty(), "routes left behind: {v4}");
        assert!(ip_out(&ns2, &["-6", "route", "show", "table", "250"])
            .trim()
            .is_empty());
    }));
}
