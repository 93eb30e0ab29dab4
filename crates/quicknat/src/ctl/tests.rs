//! The client's requests and tables (the server side is tested in runtime's control/api/tests.rs
//! and end to end in tests/e2e/test_control_api.py).

use super::*;

#[test]
fn requests_carry_the_version_and_only_the_filters_given() {
    let filter = || FilterArgs {
        proto: Some("tcp".into()),
        inside: Some("10.0.0.2".parse().unwrap()),
        remote_port: Some(80),
        ..FilterArgs::default()
    };
    let a = SessionArgs {
        filter: filter(),
        limit: Some(5),
    };
    assert_eq!(
        request_of(&Verb::Sessions(a)),
        json!({"v":1,"cmd":"sessions","filter":{"proto":"tcp","inside":"10.0.0.2","remote_port":80},"limit":5})
    );
    let c = ClearArgs {
        filter: filter(),
        dry_run: true,
        ..ClearArgs::default()
    };
    assert_eq!(
        request_of(&Verb::ClearSessions(c)),
        json!({"v":1,"cmd":"clear_sessions","dry_run":true,"filter":{"proto":"tcp","inside":"10.0.0.2","remote_port":80}})
    );
    assert_eq!(
        request_of(&Verb::Sessions(SessionArgs::default())),
        json!({"v":1,"cmd":"sessions"})
    );
    assert_eq!(
        request_of(&Verb::Reload(false)),
        json!({"v":1,"cmd":"reload"})
    );
    assert_eq!(
        request_of(&Verb::Reload(true)),
        json!({"v":1,"cmd":"reload","dry_run":true})
    );
}

#[test]
fn tables_line_up_and_count() {
    let items = vec![
        json!({"proto":"tcp","inside":"10.0.0.2:42000","public":"203.0.113.1:1024",
        "remote":"198.51.100.2:8080","remote_inside":"198.51.100.2:8080","origin":"inside",
        "state":"established","idle_ms":1500,"expires_in_ms":7438500,"age_ms":63200}),
    ];
    let t = table(
        &Verb::Sessions(SessionArgs::default()),
        &items,
        &json!({"v":1,"ok":true,"end":"sessions","count":1}),
    );
    let lines: Vec<&str> = t.lines().collect();
    assert!(lines[0].starts_with("PROTO  INSIDE"), "{t}");
    assert!(
        lines[1].contains("established") && lines[1].contains("1.5s"),
        "{t}"
    );
    assert!(
        lines[1].contains("63.2s  1.5s") && lines[0].find("AGE") == lines[1].find("63.2s"),
        "{t}"
    );
    assert_eq!(lines[2], "1 sessions");
    let done = json!({"v":1,"ok":true,"clear_sessions":{"dry_run":false,"sessions":3}});
    let clear = Verb::ClearSessions(ClearArgs::default());
    assert_eq!(table(&clear, &[], &done), "3 sessions cleared\n");
    // The columns line up: the public endpoint starts where its header does.
    assert_eq!(lines[0].find("PUBLIC"), lines[1].find("203.0.113.1"));
}

// -- routing integration --
#[test]
fn status_tells_whether_the_routes_are_announced_and_why() {
    let mut st = json!({"mode":"nat44","inside":{"name":"g-in","index":2,"mtu":1500},
        "outside":{"name":"g-out","index":3,"mtu":1500},"backend":"AF_PACKET",
        "backend_why":"configured","workers":1,"uptime_s":5,"config":null,
        "version":"0.1.0","pid":42,"sessions":0,"reload":true,"routing":null});
    let last = |st: &Value| json!({"v":1,"ok":true,"end":"status","status":st});
    let plain = table(&Verb::Status, &[], &last(&st));
    assert!(
        !plain.contains("announced"),
        "no [routing]: no row\n{plain}"
    );
    st["routing"] = json!({"announced":false,"reason":"outside interface g-out down",
        "prefixes":["0.0.0.0/0","203.0.113.8/29 (standby)"],"device":"qn-announce",
        "announcements":1,"withdrawals":1});
    let t = table(&Verb::Status, &[], &last(&st));
    let row = |name: &str| {
        t.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} row in\n{t}"))
            .to_owned()
    };
    assert!(
        row("announced").ends_with("no, outside interface g-out down"),
        "{t}"
    );
    assert!(
        row("routes").contains("0.0.0.0/0, 203.0.113.8/29 (standby) on qn-announce"),
        "{t}"
    );
}

// -- XDP fast path --
#[test]
fn status_and_stats_show_the_xdp_fast_path_as_its_own_entry() {
    let st = json!({"mode":"nat44","inside":{"name":"g-in","index":2,"mtu":1500},
        "outside":{"name":"g-out","index":3,"mtu":1500},"backend":"AF_XDP",
        "backend_why":"configured","workers":1,"uptime_s":5,"config":null,
        "version":"0.1.0","pid":42,"sessions":0,"reload":true,"routing":null,
        "xdp_fast_path":{"switch":"auto","on":false,"why":"the XDP program runs in generic (skb) mode"}});
    let t = table(
        &Verb::Status,
        &[],
        &json!({"v":1,"ok":true,"end":"status","status":st}),
    );
    let row = t
        .lines()
        .find(|l| l.starts_with("xdp fast path"))
        .unwrap_or_else(|| panic!("no fast path row in\n{t}"));
    assert!(
        row.ends_with("off (xdp_fast_path = auto: the XDP program runs in generic (skb) mode)"),
        "{t}"
    );
    let stats = json!({"total":{"engine":{"forwarded":3},"io":{"rx_inside":4}},
        "workers":[{"engine":{"forwarded":3},"io":{"rx_inside":4}}],"drop_reasons":{},
        "xdp_fast_path":{"packets":30,"packets_out":20,"packets_in":10,"misses":2}});
    let t = table(
        &Verb::Stats,
        &[],
        &json!({"v":1,"ok":true,"end":"stats","stats":stats}),
    );
    // One worker column (W0) only: the fast path is not a worker.
    assert!(t.lines().next().unwrap().ends_with("W0"), "{t}");
    assert!(!t.contains("W1"), "{t}");
    let after: Vec<&str> = t.lines().skip_while(|l| *l != "xdp fast path:").collect();
    assert!(
        after
            .iter()
            .any(|l| l.starts_with("packets_out") && l.ends_with("20")),
        "{t}"
    );
    assert!(
        after
            .iter()
            .any(|l| l.starts_with("misses") && l.ends_with('2')),
        "{t}"
    );
}

/// A two-worker NAT44 gateway's `status` with `extra`'s fields added.
fn status_with(extra: Value) -> Value {
    let mut st = json!({"mode":"nat44","inside":{"name":"g-in","index":2,"mtu":1500},
        "outside":{"name":"g-out","index":3,"mtu":1500},"backend":"AF_PACKET",
        "backend_why":"configured","workers":2,"uptime_s":5,"config":null,
        "version":"0.1.0","pid":42,"sessions":0,"reload":true,"routing":null});
    for (k, v) in extra.as_object().into_iter().flatten() {
        st[k] = v.clone();
    }
    st
}

/// The row of the `status` table whose name is `name`.
fn status_row(st: &Value, name: &str) -> String {
    let t = table(
        &Verb::Status,
        &[],
        &json!({"v":1,"ok":true,"end":"status","status":st}),
    );
    t.lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no {name} row in\n{t}"))
        .to_owned()
}

#[test]
fn status_shows_how_the_workers_share_the_traffic() {
    let mut st = status_with(json!({
        "placement":{"how":"flows","why":"in turn","flows_per_worker":{"ipv4":[16,15],"ipv6":[3,3]},"hashed_packets":0}}));
    let row = |st: &Value| status_row(st, "placement");
    assert!(
        row(&st).ends_with("flows: ipv4 16,15 ipv6 3,3 (in turn)"),
        "{}",
        row(&st)
    );
    st["placement"]["hashed_packets"] = json!(7);
    assert!(
        row(&st)
            .ends_with("flows: ipv4 16,15 ipv6 3,3, 7 packets by hash (flow table full) (in turn)"),
        "{}",
        row(&st)
    );
    st["placement"] = json!({"how":"kernel_hash","why":"no program","flows_per_worker":null});
    assert!(
        row(&st).ends_with("kernel_hash: (no program)"),
        "{}",
        row(&st)
    );
}

#[test]
fn status_shows_the_receive_hash_of_each_interface() {
    let st = status_with(json!({
        "rx_hash":{"g-in":{"supported":false,"why":"Operation not supported"},
                   "g-out":{"supported":true,"flows":{
                       "tcp6":{"before":"sd","now":"sdfn","error":null},
                       "udp6":{"before":"","now":"","error":"Operation not supported"}}}}}));
    let row = status_row(&st, "receive hash");
    assert!(
        row.ends_with("g-in: not read (Operation not supported); g-out: tcp6 sdfn (was sd), udp6 none (Operation not supported)"),
        "{row}"
    );
}
