//! The `[routing]` settings into routes, and the status `quicknat status` and `/metrics`
//! show. (The device and the kernel: `io::announce`'s tests; BIRD: tests/e2e/test_routing.py.)

use super::*;

fn p(s: &str) -> Prefix {
    let (a, l) = s.split_once('/').unwrap();
    Prefix {
        addr: a.parse().unwrap(),
        len: l.parse().unwrap(),
    }
}

fn cfg() -> RoutingConfig {
    RoutingConfig {
        announce: vec![p("0.0.0.0/0"), p("203.0.113.0/29")],
        standby: vec![p("203.0.113.8/29")],
        ..RoutingConfig::default()
    }
}

#[test]
fn the_default_announces_nothing() {
    let d = RoutingConfig::default();
    assert!(!d.enabled());
    assert!(d.routes(7).is_empty());
    assert_eq!((d.table, d.protocol, d.standby_metric), (250, 250, 1000));
    assert_eq!(d.device, "qn-announce");
    assert_eq!(d.health_interval, Duration::from_millis(100));
}

#[test]
fn primaries_get_the_primary_metric_and_standbys_theirs() {
    let c = cfg();
    assert!(c.enabled());
    let r = c.routes(7);
    assert_eq!(r.len(), 3);
    assert!(r
        .iter()
        .all(|r| r.ifindex == 7 && r.table == 250 && r.protocol == 250));
    let metrics: Vec<(String, u32)> = r
        .iter()
        .map(|r| (format!("{}/{}", r.dst, r.prefix_len), r.metric))
        .collect();
    assert_eq!(
        metrics,
        [
            ("0.0.0.0/0".to_owned(), PRIMARY_METRIC),
            ("203.0.113.0/29".to_owned(), PRIMARY_METRIC),
            ("203.0.113.8/29".to_owned(), 1000),
        ]
    );
    assert!(PRIMARY_METRIC < c.standby_metric);
    assert_eq!(
        c.describe(),
        ["0.0.0.0/0", "203.0.113.0/29", "203.0.113.8/29 (standby)"]
    );
}

#[test]
fn the_status_counts_changes_not_repeats() {
    let s = RouteStatus::new(&cfg());
    assert!(!s.announced());
    assert_eq!(s.reason(), "starting");
    s.set(true, "healthy".into());
    s.set(true, "healthy".into());
    s.set(false, "outside interface out0 down".into());
    s.set(false, "outside interface out0 down".into());
    s.set(true, "healthy".into());
    assert_eq!(s.changes(), (2, 1));
    let j = s.json();
    assert_eq!(j["announced"], true);
    assert_eq!(j["reason"], "healthy");
    assert_eq!(j["prefixes"][2], "203.0.113.8/29 (standby)");
    assert!(s.metrics_text().contains("\nquicknat_routes_announced 1\n"));
    s.set(false, "stopped".into());
    assert!(s.metrics_text().contains("\nquicknat_routes_announced 0\n"));
}

#[test]
fn metrics_go_before_the_end_of_the_exposition() {
    let out = append_metrics("a 1\n# EOF\n".into(), "b 2\n");
    assert_eq!(out, "a 1\nb 2\n# EOF\n");
    assert_eq!(append_metrics("a 1\n".into(), "b 2\n"), "a 1\nb 2\n");
}
