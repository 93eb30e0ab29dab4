//! The exposition read back by an independent parser (the Prometheus Python client's
//! OpenMetrics parser, `scripts/requirements.txt`), values following the counters, and
//! the HTTP listener answering real TCP clients.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use engine::TableOccupancy;
use engine::{Counters, DropReason};

use super::*;

/// Parses `text` with `prometheus_client.openmetrics.parser` (strict: `# EOF`, `_total`
/// on counters, HELP and TYPE per family) and returns every sample as
/// `name{label="value",...}` (labels sorted) -> value, plus each family's type.
fn parse_with_prometheus_client(text: &str) -> (BTreeMap<String, f64>, BTreeMap<String, String>) {
    const SCRIPT: &str = r#"
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
for fam in text_string_to_metric_families(sys.stdin.read()):
    assert fam.documentation, fam.name + ": no HELP"
    print("T", fam.name, fam.type)
    for s in fam.samples:
        labels = ",".join('%s="%s"' % kv for kv in sorted(s.labels.items()))
        print("S", s.name + "{" + labels + "}", repr(float(s.value)))
"#;
    let mut child = Command::new("python3")
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (scripts/test.sh installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the OpenMetrics parser refused the exposition (pip install -r scripts/requirements.txt):\n{}\n---\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (mut samples, mut types) = (BTreeMap::new(), BTreeMap::new());
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let mut w = line.splitn(3, ' ');
        match (w.next(), w.next(), w.next()) {
            (Some("T"), Some(name), Some(ty)) => {
                types.insert(name.to_string(), ty.to_string());
            }
            (Some("S"), Some(name), Some(v)) => {
                let dup = samples.insert(name.to_string(), v.parse().unwrap());
                assert!(dup.is_none(), "sample {name} twice");
            }
            _ => panic!("unexpected parser output {line:?}"),
        }
    }
    (samples, types)
}

/// A sample of two workers with distinct values in every counter the exposition reads.
fn sample(scale: u64) -> Sample {
    let worker = |k: u64| {
        let mut e = Counters::new();
        e.forwarded = 1000 * k * scale;
        e.sessions_created = 10 * k * scale;
        e.bindings_created = 7 * k * scale;
        e.icmp_errors_sent = 3 * k;
        e.icmp_errors_limited = 2 * k;
        e.icmp_errors_limited_source = k;
        e.drops[DropReason::NoMapping as usize] = 5 * k * scale;
        e.drops[DropReason::SubscriberLimit as usize] = 4 * k;
        let io = IoCounters {
            rx: [600 * k * scale, 400 * k * scale],
            tx: [390 * k * scale, 590 * k * scale],
            rx_bytes: [60_000 * k * scale, 40_000 * k * scale],
            tx_bytes: [39_000 * k * scale, 59_000 * k * scale],
            to_kernel: 11 * k,
            via_kernel: 12 * k,
            no_route: 13 * k,
            oversize: 14 * k,
            tx_dropped: 15 * k,
            ..IoCounters::default()
        };
        (e, io)
    };
    let mut reaper = Counters::new();
    reaper.sessions_expired = 6 * scale;
    reaper.sessions_early_dropped = 2;
    reaper.port_holds_cut_short = 4;
    reaper.ports_released_unheld = 5;
    Sample {
        workers: vec![worker(1), worker(2)],
        reaper,
        sessions: 42,
        occupancy: Some(TableOccupancy {
            capacity: 65536,
            live: 42,
            dead_pending: 3,
        }),
        reaper_lag: Some((Duration::from_millis(5), Duration::from_millis(30), 17)),
        events: (100 * scale, 9),
        build: Some(BuildInfo {
            version: "0.1.0",
            backend: "af_xdp",
            mode: "nat44",
            start_time: 1_700_000_000.5,
        }),
        census: Some(engine::introspect::Census {
            capacity: 65536,
            live: 42,
            dead_pending: 3,
            by_proto: [5, 30, 7, 3, 2],
            tcp: [0, 1, 0, 4, 0, 0, 0, 0],
            bindings: 33,
            blocks: conntrack::BlockStats {
                taken: 9,
                released: 4,
                limit_refused: 2,
                exhausted: 1,
            },
        }),
        pool: vec![engine::introspect::PoolAddrUsage {
            addr: "203.0.113.1".parse().unwrap(),
            ports_per_proto: 64512,
            taken: [5, 30, 7, 3, 2],
            bindings: 33,
            subscribers: 4,
            blocks_held: 5,
        }],
    }
}

#[test]
fn the_exposition_parses_and_says_what_the_counters_say() {
    let text = render(&sample(1));
    assert!(text.ends_with("# EOF\n"));
    let (s, types) = parse_with_prometheus_client(&text);
    let v = |k: &str| {
        *s.get(k)
            .unwrap_or_else(|| panic!("no sample {k} in\n{text}"))
    };
    // Totals are the workers' sums (1 + 2 = 3 times worker 1's).
    assert_eq!(v("quicknat_forwarded_packets_total{}"), 3000.0);
    assert_eq!(
        v(r#"quicknat_received_packets_total{interface="inside"}"#),
        1800.0
    );
    assert_eq!(
        v(r#"quicknat_received_packets_total{interface="outside"}"#),
        1200.0
    );
    assert_eq!(
        v(r#"quicknat_received_bytes_total{interface="inside"}"#),
        180_000.0
    );
    assert_eq!(
        v(r#"quicknat_transmitted_packets_total{interface="outside"}"#),
        1770.0
    );
    assert_eq!(
        v(r#"quicknat_transmitted_bytes_total{interface="inside"}"#),
        117_000.0
    );
    assert_eq!(
        v(r#"quicknat_dropped_packets_total{reason="no_mapping"}"#),
        15.0
    );
    assert_eq!(
        v(r#"quicknat_dropped_packets_total{reason="subscriber_limit"}"#),
        12.0
    );
    assert_eq!(v("quicknat_subscriber_limit_hits_total{}"), 12.0);
    // Every reason has its sample, zero or not (rate() needs the series to exist).
    for r in DropReason::ALL {
        let k = format!(
            r#"quicknat_dropped_packets_total{{reason="{}"}}"#,
            r.as_str()
        );
        assert!(s.contains_key(&k), "{k}");
    }
    assert_eq!(v("quicknat_sessions_created_total{}"), 30.0);
    assert_eq!(
        v("quicknat_sessions_expired_total{}"),
        6.0,
        "the reaper's counted"
    );
    assert_eq!(v("quicknat_sessions_early_dropped_total{}"), 2.0);
    assert_eq!(v("quicknat_port_holds_cut_short_total{}"), 4.0);
    assert_eq!(v("quicknat_ports_released_unheld_total{}"), 5.0);
    assert_eq!(v("quicknat_bindings_created_total{}"), 21.0);
    assert_eq!(v("quicknat_icmp_errors_sent_total{}"), 9.0);
    assert_eq!(
        v(r#"quicknat_icmp_errors_rate_limited_total{budget="worker"}"#),
        6.0
    );
    assert_eq!(
        v(r#"quicknat_icmp_errors_rate_limited_total{budget="source"}"#),
        3.0
    );
    assert_eq!(v("quicknat_to_kernel_packets_total{}"), 33.0);
    assert_eq!(v("quicknat_via_kernel_packets_total{}"), 36.0);
    assert_eq!(v("quicknat_no_route_packets_total{}"), 39.0);
    assert_eq!(v("quicknat_oversize_packets_total{}"), 42.0);
    assert_eq!(v("quicknat_tx_dropped_packets_total{}"), 45.0);
    assert_eq!(v("quicknat_sessions{}"), 42.0);
    assert_eq!(v("quicknat_session_table_capacity{}"), 65536.0);
    assert_eq!(v(r#"quicknat_session_table_slots{state="live"}"#), 42.0);
    // The census (sessions by protocol and TCP state) and the pool's use per address.
    assert_eq!(v(r#"quicknat_sessions_by_protocol{protocol="udp"}"#), 30.0);
    assert_eq!(v(r#"quicknat_tcp_sessions{state="established"}"#), 4.0);
    assert_eq!(v(r#"quicknat_tcp_sessions{state="syn_sent"}"#), 1.0);
    assert_eq!(v("quicknat_bindings{}"), 33.0);
    assert_eq!(
        v(r#"quicknat_pool_blocks_held{address="203.0.113.1"}"#),
        5.0
    );
    assert_eq!(v(r#"quicknat_port_blocks_total{event="taken"}"#), 9.0);
    assert_eq!(
        v(r#"quicknat_port_blocks_total{event="limit_refused"}"#),
        2.0
    );
    assert_eq!(v(r#"quicknat_pool_ports{address="203.0.113.1"}"#), 64512.0);
    assert_eq!(
        v(r#"quicknat_pool_subscribers{address="203.0.113.1"}"#),
        4.0
    );
    assert_eq!(
        v(r#"quicknat_pool_ports_taken{address="203.0.113.1",protocol="icmp"}"#),
        7.0
    );
    assert_eq!(
        v(r#"quicknat_session_table_slots{state="dead_pending"}"#),
        3.0
    );
    assert_eq!(v("quicknat_reaper_lag_seconds{}"), 0.005);
    assert_eq!(v("quicknat_reaper_lag_max_seconds{}"), 0.03);
    assert_eq!(v("quicknat_reaper_passes_total{}"), 17.0);
    assert_eq!(v("quicknat_log_events_sent_total{}"), 100.0);
    assert_eq!(v("quicknat_log_events_dropped_total{}"), 9.0);
    assert_eq!(v("quicknat_workers{}"), 2.0);
    assert_eq!(
        v(r#"quicknat_worker_forwarded_packets_total{worker="0"}"#),
        1000.0
    );
    assert_eq!(
        v(r#"quicknat_worker_forwarded_packets_total{worker="1"}"#),
        2000.0
    );
    assert_eq!(
        v(r#"quicknat_worker_received_packets_total{worker="1"}"#),
        2000.0
    );
    assert_eq!(
        v(r#"quicknat_worker_dropped_packets_total{worker="1"}"#),
        18.0
    );
    assert_eq!(
        v(r#"quicknat_build_info{backend="af_xdp",mode="nat44",version="0.1.0"}"#),
        1.0
    );
    assert_eq!(v("quicknat_process_start_time_seconds{}"), 1_700_000_000.5);
    // Types as Prometheus will see them.
    assert_eq!(types["quicknat_forwarded_packets"], "counter");
    assert_eq!(types["quicknat_dropped_packets"], "counter");
    assert_eq!(types["quicknat_sessions"], "gauge");
    assert_eq!(types["quicknat_reaper_lag_seconds"], "gauge");
    assert_eq!(types["quicknat_build"], "info");
}

#[test]
fn values_follow_the_counters_between_scrapes() {
    let (a, _) = parse_with_prometheus_client(&render(&sample(1)));
    let (b, _) = parse_with_prometheus_client(&render(&sample(5)));
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "same series"
    );
    let k = "quicknat_forwarded_packets_total{}";
    assert_eq!((a[k], b[k]), (3000.0, 15000.0));
    let k = r#"quicknat_transmitted_bytes_total{interface="outside"}"#;
    assert_eq!((a[k], b[k]), (177_000.0, 885_000.0));
    let k = "quicknat_log_events_sent_total{}";
    assert_eq!((a[k], b[k]), (100.0, 500.0));
}

#[test]
fn a_stateless_mode_has_no_table_families_and_still_parses() {
    let mut s = sample(1);
    s.occupancy = None;
    s.reaper_lag = None;
    s.build = None;
    let (samples, _) = parse_with_prometheus_client(&render(&s));
    assert!(!samples
        .keys()
        .any(|k| k.starts_with("quicknat_session_table")));
    assert!(!samples.keys().any(|k| k.starts_with("quicknat_reaper_lag")));
    assert!(samples.contains_key("quicknat_sessions{}"));
}

#[test]
fn reaper_lag_reads_what_was_recorded() {
    let lag = ReaperLag::default();
    lag.record(Duration::from_millis(40));
    lag.record(Duration::from_millis(3));
    assert_eq!(
        lag.load(),
        (Duration::from_millis(3), Duration::from_millis(40), 2)
    );
}

#[test]
fn request_lines_are_parsed_strictly() {
    use super::http::{parse, Request};
    assert_eq!(
        parse(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
        Request::Metrics { head: false }
    );
    assert_eq!(
        parse(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"),
        Request::Metrics { head: false }
    );
    assert_eq!(
        parse(b"HEAD /metrics HTTP/1.1\r\n\r\n"),
        Request::Metrics { head: true }
    );
    assert_eq!(parse(b"GET / HTTP/1.1\r\n\r\n"), Request::NotFound);
    assert_eq!(parse(b"GET /metricsx HTTP/1.1\r\n\r\n"), Request::NotFound);
    assert_eq!(parse(b"POST /metrics HTTP/1.1\r\n\r\n"), Request::BadMethod);
    assert_eq!(parse(b"GET /metrics\r\n\r\n"), Request::Bad);
    assert_eq!(parse(b"GET metrics HTTP/1.1\r\n\r\n"), Request::Bad);
    assert_eq!(parse(b"\xff\xfe\r\n\r\n"), Request::Bad);
    assert_eq!(parse(b""), Request::Bad);
}

/// Sends `request` to `addr` and returns the whole answer.
fn ask(addr: SocketAddr, request: &[u8]) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(request).unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn the_listener_serves_metrics_and_refuses_the_rest() {
    let l = MetricsListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    // The same address again: the start-up error an operator sees.
    let busy = MetricsListener::bind(addr).unwrap_err();
    assert_eq!(busy.kind(), std::io::ErrorKind::AddrInUse);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| l.serve(&stop, &|| render(&sample(1))));
        let ok = ask(addr, b"GET /metrics HTTP/1.1\r\nHost: gw\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains(&format!("Content-Type: {CONTENT_TYPE}\r\n")));
        let body = ok.split_once("\r\n\r\n").unwrap().1;
        assert!(ok.contains(&format!("Content-Length: {}\r\n", body.len())));
        assert!(
            body.contains("quicknat_forwarded_packets_total 3000\n"),
            "{body}"
        );
        let head = ask(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200 OK") && head.ends_with("\r\n\r\n"));
        let nf = ask(addr, b"GET /admin HTTP/1.1\r\n\r\n");
        assert!(nf.starts_with("HTTP/1.1 404 Not Found"), "{nf}");
        let post = ask(addr, b"POST /metrics HTTP/1.1\r\n\r\n");
        assert!(post.starts_with("HTTP/1.1 405 ") && post.contains("Allow: GET, HEAD"));
        let bad = ask(addr, b"hello\r\n\r\n");
        assert!(bad.starts_with("HTTP/1.1 400 "), "{bad}");
        // A request head that fills the cap without ending is refused.
        let mut big = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        big.resize(MAX_REQUEST, b'a');
        let long = ask(addr, &big);
        assert!(long.starts_with("HTTP/1.1 431 "), "{long}");
        // A client that connects and says nothing costs at most IO_TIMEOUT; the next
        // is served after it.
        let _silent = TcpStream::connect(addr).unwrap();
        let again = ask(addr, b"GET /metrics HTTP/1.0\r\n\r\n");
        assert!(again.starts_with("HTTP/1.1 200 OK"));
        stop.store(true, Ordering::Relaxed);
    });
}
