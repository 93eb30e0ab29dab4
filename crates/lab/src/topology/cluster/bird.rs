//! The cluster lab's BIRD 2 configurations, generated from the [`Plan`]:
//!
//! - **inside router** (`rin`, AS 65000): one BGP session per gateway (BFD 100 ms × 3, hold
//!   3 s), each importing only the gateway's default route into a table of its own
//!   (`gwN`); per slice a table `sS` fed by two pipes, the slice's primary at preference 200
//!   and its backup at 100, exported by a kernel protocol to kernel table `100 + S`, which
//!   `ip rule from <block> lookup 100+S` selects for the slice's subscribers (policy
//!   routing: the inside router's ECMP hash could never match the outside router's, so the
//!   slice, not a hash, decides the gateway, and the return traffic finds the same one);
//! - **outside router** (`rout`, AS 65100): one BGP session per gateway (same timers),
//!   importing the public /32s; the plain announcement (primary) beats the prepended one
//!   (standby) by AS-path length, and a withdrawal or a BFD down makes the standby best;
//! - **gateway** (`gwN`, AS 65000 + N): learns the routes quicknat holds in kernel table 250
//!   (`[routing]`: they vanish with its TUN device when it dies and are withdrawn when it is
//!   unhealthy), sends the default route to the inside router and the public prefixes to
//!   the outside router, prepending its AS three times to standby routes (metric ≥ 1000).
//!   `examples/cluster/bird-gateway.conf` is the same configuration for an operator.

use std::fmt::Write;

use super::slices::Plan;
use super::{gw_in_addr, gw_out_addr, RIN_BR, ROUT_BR};

/// BFD: 100 ms × 3 (detection in 300 ms), on every session.
const BFD: &str = "protocol bfd {\n  interface \"*\" {\n    min rx interval 100 ms;\n    min tx interval 100 ms;\n    multiplier 3;\n  };\n}\n";

/// BGP timers: hold 3 s (BIRD's minimum), keepalive 1 s, fast reconnects; BFD on.
const TIMERS: &str = "  hold time 3;\n  keepalive time 1;\n  connect retry time 1;\n  error wait time 1, 5;\n  bfd on;\n";

/// The kernel table quicknat's `[routing]` installs its routes in.
pub const ROUTING_TABLE: u32 = 250;
/// `[routing] standby_metric`: routes at or above it are standby.
pub const STANDBY_METRIC: u32 = 1000;

fn header(log: &str, id: &str) -> String {
    format!("log \"{log}\" all;\nrouter id {id};\nprotocol device {{ scan time 10; }}\n{BFD}")
}

/// The inside router's configuration.
pub fn inside_router(plan: &Plan, log: &str) -> String {
    let mut c = header(log, RIN_BR);
    for (g, name) in plan.gateways.iter().enumerate() {
        let _ = write!(
            c,
            "ipv4 table {name}t;\nprotocol bgp {name} {{\n  local {RIN_BR} as 65000;\n  neighbor {} as {};\n{TIMERS}  ipv4 {{\n    table {name}t;\n    import filter {{ if net = 0.0.0.0/0 then accept; reject; }};\n    export none;\n  }};\n}}\n",
            gw_in_addr(g),
            65001 + g
        );
    }
    for (s, &(p, b)) in plan.slices.iter().enumerate() {
        let _ = writeln!(c, "ipv4 table s{s};");
        for (g, pref) in [(p, 200), (b, 100)] {
            let _ = write!(
                c,
                "protocol pipe s{s}_{name} {{\n  table {name}t;\n  peer table s{s};\n  import none;\n  export filter {{ preference = {pref}; accept; }};\n}}\n",
                name = plan.gateways[g]
            );
        }
        let _ = write!(
            c,
            "protocol kernel k{s} {{\n  kernel table {};\n  ipv4 {{ table s{s}; import none; export all; }};\n}}\n",
            slice_table(s)
        );
    }
    c
}

/// Kernel table of slice `s` on the inside router.
pub fn slice_table(s: usize) -> u32 {
    100 + s as u32
}

/// The outside router's configuration.
pub fn outside_router(plan: &Plan, log: &str) -> String {
    let mut c = header(log, ROUT_BR);
    c.push_str("protocol kernel {\n  ipv4 { import none; export all; };\n}\n");
    for (g, name) in plan.gateways.iter().enumerate() {
        let _ = write!(
            c,
            "protocol bgp {name} {{\n  local {ROUT_BR} as 65100;\n  neighbor {} as {};\n{TIMERS}  ipv4 {{ import all; export none; }};\n}}\n",
            gw_out_addr(g),
            65001 + g
        );
    }
    c
}

/// Gateway `g`'s configuration.
pub fn gateway(_plan: &Plan, g: usize, log: &str) -> String {
    let asn = 65001 + g;
    let mut c = header(log, &gw_in_addr(g));
    let _ = write!(
        c,
        "# quicknat's [routing] routes: table {ROUTING_TABLE}, held through its TUN device.\n\
         protocol kernel quicknat {{\n  kernel table {ROUTING_TABLE};\n  learn;\n  scan time 1;\n  ipv4 {{ import all; export none; }};\n}}\n\
         protocol bgp inside {{\n  local {} as {asn};\n  neighbor {RIN_BR} as 65000;\n{TIMERS}  ipv4 {{\n    import none;\n    export filter {{ if net = 0.0.0.0/0 then accept; reject; }};\n    next hop self;\n  }};\n}}\n\
         protocol bgp outside {{\n  local {} as {asn};\n  neighbor {ROUT_BR} as 65100;\n{TIMERS}  ipv4 {{\n    import none;\n    export filter {{\n      if net = 0.0.0.0/0 then reject;\n      if krt_metric >= {STANDBY_METRIC} then {{\n        bgp_path.prepend({asn}); bgp_path.prepend({asn}); bgp_path.prepend({asn});\n      }}\n      accept;\n    }};\n    next hop self;\n  }};\n}}\n",
        gw_in_addr(g),
        gw_out_addr(g),
    );
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(n: usize) -> Plan {
        let names: Vec<String> = (1..=n).map(|g| format!("gw{g}")).collect();
        Plan::new(
            super::super::INSIDE,
            super::super::INSIDE_LEN,
            super::super::OUTSIDE,
            super::super::OUTSIDE_LEN,
            &names,
        )
        .unwrap()
    }

    #[test]
    fn the_inside_router_prefers_each_slices_primary_over_its_backup() {
        let p = plan(3);
        let c = inside_router(&p, "/dev/null");
        for (s, &(a, b)) in p.slices.iter().enumerate() {
            let (pa, pb) = (&p.gateways[a], &p.gateways[b]);
            assert!(c.contains(&format!("protocol pipe s{s}_{pa} {{\n  table {pa}t;\n  peer table s{s};\n  import none;\n  export filter {{ preference = 200;")), "{s}");
            assert!(c.contains(&format!("protocol pipe s{s}_{pb} {{\n  table {pb}t;\n  peer table s{s};\n  import none;\n  export filter {{ preference = 100;")), "{s}");
            assert!(c.contains(&format!("kernel table {};", slice_table(s))));
        }
        assert_eq!(c.matches("bfd on;").count(), 3);
    }

    #[test]
    fn gateways_prepend_only_standby_routes_towards_the_outside() {
        let c = gateway(&plan(2), 1, "/dev/null");
        assert!(c.contains(&format!("kernel table {ROUTING_TABLE};\n  learn;")));
        assert!(c.contains(&format!(
            "if krt_metric >= {STANDBY_METRIC} then {{\n        bgp_path.prepend(65002);"
        )));
        assert!(
            c.contains("neighbor 10.1.0.1 as 65000;") && c.contains("neighbor 10.2.0.1 as 65100;")
        );
    }

    /// BIRD itself parses every configuration (`bird -p`), when it is installed.
    #[test]
    fn bird_parses_every_configuration() {
        if std::process::Command::new("bird")
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("bird is not installed (apt-get install bird2): parse check skipped");
            return;
        }
        for n in 2..=3 {
            let p = plan(n);
            let mut confs = vec![
                inside_router(&p, "/dev/null"),
                outside_router(&p, "/dev/null"),
            ];
            confs.extend((0..n).map(|g| gateway(&p, g, "/dev/null")));
            for (i, conf) in confs.iter().enumerate() {
                let path = std::env::temp_dir()
                    .join(format!("qn-bird-test-{}-{n}-{i}.conf", std::process::id()));
                std::fs::write(&path, conf).unwrap();
                let out = std::process::Command::new("bird")
                    .arg("-p")
                    .arg("-c")
                    .arg(&path)
                    .output()
                    .unwrap();
                let _ = std::fs::remove_file(&path);
                assert!(
                    out.status.success(),
                    "{n} gateways, config {i}: {}\n{conf}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
}
