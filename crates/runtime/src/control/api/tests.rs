//! The JSON protocol: parsing and its errors, every answer's shape, and the server end to
//! end on a real socket with a NAT44 engine that has seen traffic.

use std::io::{BufRead, BufReader, Write};
use std::net::Ipv4Addr;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use conntrack::{Proto, Timestamp};
use engine::any::{AnyMode, ModeConfig};
use engine::introspect::SessionFilter;
use engine::nat44::{DynamicRule, Nat44Config};
use engine::{Counters, Direction, DropReason};
use serde_json::Value;

use super::*;
use crate::control::{bind, Access, Control, MAX_LINE};
use crate::live::IoCounters;

#[test]
fn requests_parse_and_bad_ones_say_why() {
    assert_eq!(parse(r#"{"v":1,"cmd":"status"}"#), Ok(ApiRequest::Status));
    assert_eq!(
        parse(" {\"v\":1,\"cmd\":\"stats\"}\n"),
        Ok(ApiRequest::Stats)
    );
    assert_eq!(parse(r#"{"cmd":"pool","v":1}"#), Ok(ApiRequest::Pool));
    assert_eq!(parse(r#"{"v":1,"cmd":"census"}"#), Ok(ApiRequest::Census));
    assert_eq!(
        parse(r#"{"v":1,"cmd":"reload"}"#),
        Ok(ApiRequest::Reload { dry_run: false })
    );
    assert_eq!(
        parse(r#"{"v":1,"cmd":"reload","dry_run":true}"#),
        Ok(ApiRequest::Reload { dry_run: true })
    );
    assert_eq!(
        parse(r#"{"v":1,"cmd":"bindings","limit":3}"#),
        Ok(ApiRequest::Bindings { limit: Some(3) })
    );
    assert_eq!(
        parse(
            r#"{"v":1,"cmd":"sessions","filter":{"proto":"TCP","inside":"10.0.0.2","inside_port":80,"public":"203.0.113.1","public_port":1,"remote":"2001:db8::1","remote_port":443},"limit":10}"#
        ),
        Ok(ApiRequest::Sessions {
            filter: SessionFilter {
                proto: Some(Proto::Tcp),
                inside: Some("10.0.0.2".parse().unwrap()),
                inside_port: Some(80),
                public: Some("203.0.113.1".parse().unwrap()),
                public_port: Some(1),
                remote: Some("2001:db8::1".parse().unwrap()),
                remote_port: Some(443),
            },
            limit: Some(10),
        })
    );
    assert_eq!(
        parse(r#"{"v":1,"cmd":"clear_sessions","filter":{"inside":"10.0.0.2"},"dry_run":true}"#),
        Ok(ApiRequest::ClearSessions {
            filter: SessionFilter {
                inside: Some("10.0.0.2".parse().unwrap()),
                ..SessionFilter::default()
            },
            dry_run: true,
        })
    );
    assert_eq!(
        parse(r#"{"v":1,"cmd":"clear_sessions"}"#),
        Ok(ApiRequest::ClearSessions {
            filter: SessionFilter::default(),
            dry_run: false,
        })
    );
    assert_eq!(
        parse(r#"{"v":1,"cmd":"drain"}"#),
        Ok(ApiRequest::Drain { cancel: false })
    );
    assert_eq!(
        parse(r#"{"v":1,"cmd":"drain","cancel":true}"#),
        Ok(ApiRequest::Drain { cancel: true })
    );
    assert!(parse(r#"{"v":1,"cmd":"status","cancel":true}"#)
        .unwrap_err()
        .contains("\"cancel\" applies to drain"));
    assert!(matches!(
        parse(
            r#"{"v":1,"cmd":"trace","match":{"host":"10.0.0.2","drop_reason":"no_mapping"},"count":3}"#
        ),
        Ok(ApiRequest::Trace { count: 3, .. })
    ));
    assert!(parse(r#"{"v":1,"cmd":"trace","count":0}"#)
        .unwrap_err()
        .contains("count 0"));
    assert!(
        parse(r#"{"v":1,"cmd":"trace","match":{"drop_reason":"nope"}}"#)
            .unwrap_err()
            .contains("unknown drop reason")
    );
    assert!(parse(r#"{"v":1,"cmd":"trace","match":{"direction":"up"}}"#)
        .unwrap_err()
        .contains("expected \"in\" or \"out\""));
    assert!(parse(r#"{"v":1,"cmd":"sessions","count":1}"#)
        .unwrap_err()
        .contains("apply to trace"));
    let err = |l: &str| parse(l).unwrap_err();
    assert!(
        err(r#"{"v":2,"cmd":"status"}"#).contains("unsupported version 2; this gateway speaks v1")
    );
    assert!(err(r#"{"v":"1","cmd":"status"}"#).contains("unsupported version"));
    assert!(err(r#"{"cmd":"status"}"#).contains("missing field `v`"));
    assert!(err(r#"{"v":1}"#).contains("missing field `cmd`"));
    assert!(err(r#"{"v":1,"cmd":"nope"}"#)
        .starts_with("unknown cmd \"nope\"; expected one of: sessions"));
    assert!(err(r#"{"v":1,"cmd":"status","extra":1}"#).contains("unknown field `extra`"));
    assert!(err(r#"{"v":1,"cmd":"sessions","filter":{"port":1}}"#).contains("unknown field `port`"));
    assert!(err(r#"{"v":1,"cmd":"sessions","filter":{"proto":"dccp"}}"#)
        .contains("unknown proto \"dccp\""));
    assert!(
        err(r#"{"v":1,"cmd":"sessions","filter":{"inside":"10.0.0.300"}}"#).contains("invalid")
    );
    assert!(
        err(r#"{"v":1,"cmd":"sessions","filter":{"inside_port":70000}}"#).contains("bad request")
    );
    assert!(err(r#"{"v":1,"cmd":"pool","limit":1}"#)
        .contains("\"limit\" applies to sessions and bindings"));
    assert!(err(r#"{"v":1,"cmd":"stats","filter":{}}"#).contains("\"filter\" applies to sessions"));
    assert!(err(r#"{"v":1,"cmd":"sessions","dry_run":true}"#)
        .contains("\"dry_run\" applies to clear_sessions and reload, not sessions"));
    assert!(err(r#"{"v":1,"cmd":"clear_sessions","limit":1}"#)
        .contains("\"limit\" applies to sessions and bindings, not clear_sessions"));
    assert!(
        err(r#"{"v":1,"cmd":"clear_sessions","filter":{"proto":"gre"}}"#)
            .contains("unknown proto \"gre\"")
    );
    assert!(err("{not json").starts_with("bad request"));
    let e: Value = serde_json::from_str(&error_line("x \"y\"")).unwrap();
    assert_eq!(e, serde_json::json!({"v":1,"ok":false,"error":"x \"y\""}));
}

fn udp4(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16) -> Vec<u8> {
    let mut p = vec![0x45, 0, 0, 30, 0, 0, 0x40, 0, 64, 17, 0, 0];
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    let c = wire::checksum::checksum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&[0, 10, 0, 0, b'h', b'i']); // checksum 0: allowed in IPv4
    p
}

/// A NAT44 engine that translated `flows` UDP flows from 10.0.0.2.
fn nat44_with(flows: u16) -> Arc<AnyMode> {
    let cfg = ModeConfig::Nat44(Nat44Config {
        rules: vec![DynamicRule {
            inside: "10.0.0.0/24".parse().unwrap(),
            pool: vec!["203.0.113.1/32".parse().unwrap()],
            ports: engine::config::PortRange::new(1024, 65535).unwrap(),
        }],
        ..Nat44Config::default()
    });
    let mode = Arc::new(AnyMode::new(&cfg, 1).unwrap());
    let AnyMode::Nat44(sh) = &*mode else {
        unreachable!()
    };
    let mut w = sh.worker(0);
    for i in 0..flows {
        let mut p = udp4(
            Ipv4Addr::new(10, 0, 0, 2),
            40000 + i,
            Ipv4Addr::new(198, 51, 100, 7),
            7,
        );
        let e = w.process_packet(Timestamp::from_secs(10), Direction::Outbound, &mut p);
        assert_eq!(e.drop_reason(), None);
    }
    mode
}

fn state(mode: Arc<AnyMode>, reload: Option<ReloadHook>) -> ApiState {
    ApiState {
        mode,
        clock: Box::new(|| Timestamp::from_secs(12)),
        counters: Box::new(|| {
            let mut a = Counters {
                forwarded: 5,
                ..Counters::default()
            };
            a.drop(DropReason::NoMapping);
            let b = Counters {
                forwarded: 7,
                ..Counters::default()
            };
            let io = IoCounters {
                rx: [3, 4],
                ..IoCounters::default()
            };
            vec![(a, io.clone()), (b, io)]
        }),
        reaper: Some(Box::new(|| Counters {
            sessions_expired: 4,
            ..Counters::default()
        })),
        facts: GatewayFacts {
            mode: "nat44",
            links: [
                LinkFacts {
                    name: "in0".into(),
                    index: 2,
                    mtu: 1500,
                },
                LinkFacts {
                    name: "out0".into(),
                    index: 3,
                    mtu: 1500,
                },
            ],
            backend: "AF_PACKET TPACKET_V3".into(),
            backend_why: "[gateway] backend = AfPacket".into(),
            workers: 2,
            placement: Some(crate::live::Placement::hash(2)),
            rx_hash: None,
            started: Instant::now(),
            config: Some(Arc::new(std::sync::Mutex::new(ConfigSource {
                path: "/etc/q.toml".into(),
                sha256: "ab".repeat(32),
            }))),
            cpus: Some((
                crate::live::cpus::CpuPlan {
                    workers: vec![Some(0), Some(1)],
                    reaper: None,
                    configured: false,
                },
                vec![],
            )),
        },
        reload,
        routing: None,
        fast_path: None,
        tracer: None,
    }
}

fn ask(st: &ApiState, line: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let _ = st.handle(line, &mut out, &AtomicBool::new(false)).unwrap();
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

#[test]
fn every_command_answers_json_lines_of_the_documented_shape() {
    let st = state(nat44_with(3), None);
    let s = ask(&st, r#"{"v":1,"cmd":"sessions"}"#);
    assert_eq!(s.len(), 4);
    assert_eq!(
        s[3],
        serde_json::json!({"v":1,"ok":true,"end":"sessions","count":3})
    );
    let mut inside: Vec<_> = s[..3]
        .iter()
        .map(|x| x["inside"].as_str().unwrap().to_owned())
        .collect();
    inside.sort();
    assert_eq!(
        inside,
        ["10.0.0.2:40000", "10.0.0.2:40001", "10.0.0.2:40002"]
    );
    for x in &s[..3] {
        assert_eq!(x["proto"], "udp");
        assert_eq!(x["remote"], "198.51.100.7:7");
        assert_eq!(x["origin"], "inside");
        assert_eq!(x["state"], Value::Null);
        assert_eq!(x["idle_ms"], 2000);
        assert_eq!(x["age_ms"], 2000, "created at 10 s, asked at 12 s");
        assert!(x["public"].as_str().unwrap().starts_with("203.0.113.1:"));
        assert!(
            x.get("v").is_none(),
            "items carry no version: the end line does"
        );
    }
    let s = ask(
        &st,
        r#"{"v":1,"cmd":"sessions","filter":{"inside_port":40001}}"#,
    );
    assert_eq!((s.len(), &s[1]["count"]), (2, &Value::from(1)));
    let s = ask(&st, r#"{"v":1,"cmd":"sessions","limit":2}"#);
    assert_eq!(s.last().unwrap()["count"], 2);
    let s = ask(&st, r#"{"v":1,"cmd":"sessions","limit":0}"#);
    assert_eq!(s.len(), 1);

    let b = ask(&st, r#"{"v":1,"cmd":"bindings"}"#);
    assert_eq!(b.last().unwrap()["count"], 3);
    assert_eq!(b[0]["sessions"], 1);
    assert_eq!(b[0]["static"], false);
    let p = ask(&st, r#"{"v":1,"cmd":"pool"}"#);
    assert_eq!(p[0]["addr"], "203.0.113.1");
    assert_eq!(p[0]["taken"]["udp"], 3);
    assert_eq!(p[0]["subscribers"], 1);
    assert_eq!(p[1]["count"], 1);
    let c = ask(&st, r#"{"v":1,"cmd":"census"}"#);
    assert_eq!(c[0]["census"]["live"], 3);
    assert_eq!(c[0]["census"]["by_proto"]["udp"], 3);
    assert_eq!(c[0]["census"]["tcp"]["established"], 0);

    let stats = &ask(&st, r#"{"v":1,"cmd":"stats"}"#)[0]["stats"];
    assert_eq!(stats["total"]["engine"]["forwarded"], 12);
    assert_eq!(stats["total"]["engine"]["drops"]["no_mapping"], 1);
    assert_eq!(stats["total"]["io"]["rx_outside"], 8);
    assert_eq!(stats["workers"][1]["engine"]["forwarded"], 7);
    // The reaper's counters: in the total, and on their own (not as a worker).
    assert_eq!(stats["total"]["engine"]["sessions_expired"], 4);
    assert_eq!(stats["reaper"]["sessions_expired"], 4);
    assert_eq!(stats["workers"].as_array().map(Vec::len), Some(2));
    for r in DropReason::ALL {
        assert!(
            stats["total"]["engine"]["drops"][r.as_str()].is_u64(),
            "{r:?}"
        );
        assert_eq!(stats["drop_reasons"][r.as_str()], r.explain());
    }

    let status = &ask(&st, r#"{"v":1,"cmd":"status"}"#)[0]["status"];
    assert_eq!(status["mode"], "nat44");
    assert_eq!(status["inside"]["name"], "in0");
    assert_eq!(status["workers"], 2);
    assert_eq!(status["placement"]["how"], "kernel_hash");
    assert_eq!(
        status["placement"]["flows_per_worker"],
        serde_json::Value::Null
    );
    assert_eq!(
        status["cpus"],
        serde_json::json!({"workers":[0,1],"reaper":null,"configured":false,"irq_warnings":[]})
    );
    assert_eq!(status["config"]["sha256"], "ab".repeat(32));
    assert_eq!(status["sessions"], 3);
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));

    let r = ask(&st, r#"{"v":1,"cmd":"reload"}"#);
    assert_eq!(
        r[0],
        serde_json::json!({"v":1,"ok":false,"error":"reload not supported"})
    );
    let hook: ReloadHook = Arc::new(|a| Ok(format!("{a:?}: reloaded 2 things")));
    let st = state(nat44_with(0), Some(hook));
    assert_eq!(
        ask(&st, r#"{"v":1,"cmd":"reload"}"#)[0]["reload"],
        "Apply: reloaded 2 things"
    );
    assert_eq!(
        ask(&st, r#"{"v":1,"cmd":"reload","dry_run":true}"#)[0]["reload"],
        "Preview: reloaded 2 things"
    );
    let hook: ReloadHook = Arc::new(|_| Err("bad file".into()));
    let st = state(nat44_with(0), Some(hook));
    assert_eq!(
        ask(&st, r#"{"v":1,"cmd":"reload"}"#)[0]["error"],
        "reload: bad file"
    );
    let e = ask(&st, r#"{"v":9,"cmd":"reload"}"#);
    assert_eq!(e[0]["ok"], false);
}

/// `clear_sessions`: a dry run counts; the real one is answered once the reaper's pass
/// has ended the sessions, which are then gone from `sessions`, the others left.
#[test]
fn clear_sessions_counts_then_ends_through_the_reaper() {
    let mode = nat44_with(3);
    let st = state(Arc::clone(&mode), None);
    let one = r#"{"inside_port":40001}"#;
    let dry = ask(
        &st,
        &format!(r#"{{"v":1,"cmd":"clear_sessions","filter":{one},"dry_run":true}}"#),
    );
    assert_eq!(
        dry[0],
        serde_json::json!({"v":1,"ok":true,"clear_sessions":{"dry_run":true,"sessions":1}})
    );
    assert_eq!(ask(&st, r#"{"v":1,"cmd":"sessions"}"#).len(), 4);
    let mut reaper = mode.reaper().unwrap();
    let asker = std::thread::spawn(move || {
        ask(
            &st,
            &format!(r#"{{"v":1,"cmd":"clear_sessions","filter":{one}}}"#),
        )
    });
    while !asker.is_finished() {
        reaper.handle_timeout(Timestamp::from_secs(12));
        std::thread::yield_now();
    }
    let done = asker.join().unwrap();
    assert_eq!(done[0]["clear_sessions"]["sessions"], 1);
    assert_eq!(done[0]["clear_sessions"]["dry_run"], false);
    let st = state(mode, None);
    let left = ask(&st, r#"{"v":1,"cmd":"sessions"}"#);
    assert_eq!(left.last().unwrap()["count"], 2);
    assert!(left[..2].iter().all(|x| x["inside"] != "10.0.0.2:40001"));
}

#[test]
fn every_drop_reason_is_explained_on_one_line() {
    for r in DropReason::ALL {
        let e = r.explain();
        assert!(
            !e.is_empty() && !e.contains('\n') && e.len() < 100,
            "{r:?}: {e:?}"
        );
    }
}

/// A control socket serving a NAT44 gateway with `flows` sessions, in a directory of its
/// own (`tag`), hanging up on clients idle for `idle`: the directory, the socket's path,
/// the stop flag and the server thread.
fn serve_nat44(
    tag: &str,
    flows: u16,
    idle: std::time::Duration,
) -> (
    std::path::PathBuf,
    std::path::PathBuf,
    Arc<AtomicBool>,
    std::thread::JoinHandle<()>,
) {
    let dir = std::env::temp_dir().join(format!("quicknat-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ctl.sock");
    let sock = bind(&path, Access::default())
        .unwrap()
        .with_idle_timeout(idle);
    let stop = Arc::new(AtomicBool::new(false));
    let (log, _events) = std::sync::mpsc::sync_channel(64);
    let control = Control {
        ila: None,
        api: Some(Arc::new(state(nat44_with(flows), None))),
    };
    let server = sock.serve(control, Arc::clone(&stop), log).unwrap();
    (dir, path, stop, server)
}

/// The server: JSON and text lines on one socket, in any mode, the line cap, a client
/// that asks several things on one connection.
#[test]
fn the_socket_serves_json_in_a_mode_without_ila() {
    let (dir, path, stop, server) = serve_nat44("api", 2, crate::control::IDLE_TIMEOUT);
    let s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let mut line = || {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        l
    };
    writeln!(w, r#"{{"v":1,"cmd":"sessions"}}"#).unwrap();
    let (a, b, end) = (line(), line(), line());
    assert!(
        a.starts_with(r#"{"proto":"udp""#) && b.starts_with(r#"{"proto":"udp""#),
        "{a}{b}"
    );
    assert_eq!(
        end,
        "{\"count\":2,\"end\":\"sessions\",\"ok\":true,\"v\":1}\n"
    );
    writeln!(w, "ila list").unwrap();
    assert!(line().starts_with("error ila requests need an ILA gateway"));
    writeln!(w, r#"{{"v":1,"cmd":"bogus"}}"#).unwrap();
    assert!(line().contains(r#""error":"unknown cmd \"bogus\""#));
    writeln!(w, r#"{{"v":1,"cmd":"status"}}"#).unwrap();
    assert!(line().contains(r#""mode":"nat44""#));
    // An over-long line ends the connection with an error.
    let long = format!(
        "{{\"v\":1,\"cmd\":\"status\",\"x\":\"{}\"}}",
        "a".repeat(MAX_LINE)
    );
    // The server may close before the whole line is written (it stops reading at the
    // cap): the write can fail with EPIPE; the answer is still there to read.
    let _ = writeln!(w, "{long}");
    assert_eq!(
        line(),
        format!("error request longer than {MAX_LINE} bytes\n")
    );
    assert_eq!(line(), "", "closed after the over-long line");
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Clients that never send a request are told so and hung up on after the idle timeout,
/// every slot with them, so a client connecting afterwards is served; one that keeps
/// asking is answered each time.
#[test]
fn idle_clients_are_hung_up_on_and_their_slots_come_back() {
    use crate::control::MAX_CLIENTS;
    let (dir, path, stop, server) = serve_nat44("idle", 1, std::time::Duration::from_millis(300));
    let connect = || {
        let s = UnixStream::connect(&path).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        BufReader::new(s)
    };
    let mut idle: Vec<_> = (0..MAX_CLIENTS).map(|_| connect()).collect();
    for r in &mut idle {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        assert!(l.starts_with("error idle: no request for"), "{l:?}");
        l.clear();
        assert_eq!(r.read_line(&mut l).unwrap(), 0, "hung up after saying so");
    }
    // Every slot is free again: a new client is served, request after request.
    let mut r = connect();
    let mut w = r.get_ref().try_clone().unwrap();
    for _ in 0..3 {
        writeln!(w, r#"{{"v":1,"cmd":"status"}}"#).unwrap();
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        assert!(l.contains(r#""mode":"nat44""#), "{l}");
    }
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A client that trickles its request a byte at a time, each well within the idle
/// timeout, is still hung up on once the line is not whole within it.
#[test]
fn a_request_trickled_in_is_cut_off_at_the_deadline() {
    let (dir, path, stop, server) = serve_nat44("slow", 1, std::time::Duration::from_millis(300));
    let s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut w = s.try_clone().unwrap();
    let started = std::time::Instant::now();
    // One byte every 50 ms: never silent for long, never a whole line.
    let trickle = std::thread::spawn(move || {
        for b in br#"{"v":1,"cmd":"status"#.iter().cycle().take(200) {
            if w.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    });
    let mut r = BufReader::new(s);
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    assert!(
        l.starts_with("error slow: no whole request within"),
        "{l:?}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    l.clear();
    assert_eq!(r.read_line(&mut l).unwrap(), 0, "hung up after saying so");
    trickle.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

// -- deterministic NAT --

/// `status` shows a deterministic gateway's prefixes and sharing ratio, and nothing for
/// one without.
#[test]
fn status_shows_the_deterministic_mapping() {
    let cfg = ModeConfig::Nat44(Nat44Config {
        deterministic: Some(engine::nat44::deterministic::Deterministic {
            inside: "100.64.0.0/22".parse().unwrap(),
            outside: "203.0.113.0/28".parse().unwrap(),
            ports_per_subscriber: None,
        }),
        ..Nat44Config::default()
    });
    let st = state(Arc::new(AnyMode::new(&cfg, 1).unwrap()), None);
    let status = &ask(&st, r#"{"v":1,"cmd":"status"}"#)[0]["status"];
    assert_eq!(
        status["deterministic"],
        serde_json::json!({"inside": "100.64.0.0/22", "outside": "203.0.113.0/28",
                           "ratio": 64, "ports_per_subscriber": 1008})
    );
    let st = state(nat44_with(0), None);
    assert!(ask(&st, r#"{"v":1,"cmd":"status"}"#)[0]["status"]["deterministic"].is_null());
}
