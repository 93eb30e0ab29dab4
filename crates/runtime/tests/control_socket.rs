//! The control socket end to end: `serve` on a temporary Unix socket with a real
//! `IlaRouter`, a client adding, changing and removing mappings, and a worker-like
//! thread looking the identifiers up the whole time (it must never see a locator that
//! was not one of the values written).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use conntrack::qsbr::Qsbr;
use engine::ila::{CsumMode, IdentFormat, IlaConfig, IlaRouter, IlaSettings, UnmappedAction};
use runtime::control::{serve, ControlState, ReloadFn};

/// Locators whose halves differ, so a torn read would be caught.
const LOC_A: u64 = 0x1111_1111_2222_2222;
const LOC_B: u64 = 0x3333_3333_4444_4444;
const LOC_C: u64 = 0x5555_5555_6666_6666;
const IDENT: u64 = 0x0000_0000_0001_0002;

const CONFIG: IlaConfig = IlaConfig {
    sir_prefix: 0x3333_0000_0000_0001,
    csum: CsumMode::AdjustTransport,
    format: IdentFormat::Luid,
    unmapped: UnmappedAction::Drop,
};

fn router(mappings: Vec<(u64, u64)>) -> Arc<IlaRouter> {
    IlaSettings {
        config: CONFIG,
        capacity: 64,
        mappings,
        icmp_rate: Default::default(),
    }
    .router()
    .unwrap()
}

/// A fresh directory for one test's socket.
fn socket_path(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("quicknat-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("ctl.sock")
}

struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Client {
    fn connect(path: &Path) -> Self {
        let s = UnixStream::connect(path).expect("connect to the control socket");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        Self {
            writer: s.try_clone().unwrap(),
            reader: BufReader::new(s),
        }
    }

    /// Sends `req`, returns the status line and (for `list`) the lines that follow it.
    fn ask(&mut self, req: &str) -> (String, Vec<String>) {
        writeln!(self.writer, "{req}").unwrap();
        let mut status = String::new();
        self.reader.read_line(&mut status).unwrap();
        let mut rest = Vec::new();
        if req == "ila list" {
            let n: usize = status.split(' ').nth(1).unwrap().parse().unwrap();
            for _ in 0..n {
                let mut l = String::new();
                self.reader.read_line(&mut l).unwrap();
                rest.push(l.trim_end().to_owned());
            }
        }
        (status.trim_end().to_owned(), rest)
    }
}

#[test]
fn mappings_change_over_the_socket_while_lookups_run() {
    let path = socket_path("ctl");
    let router = router(vec![(IDENT, LOC_A)]);
    // What `ila reload` will find in "the file".
    let reload: ReloadFn = Box::new(|| {
        Ok(IlaSettings {
            config: CONFIG,
            capacity: 64,
            mappings: vec![(IDENT, LOC_C), (7, LOC_A)],
            icmp_rate: Default::default(),
        })
    });
    let qsbr = Qsbr::new(1);
    let state = Arc::new(ControlState::new(
        Arc::clone(&router),
        Some(reload),
        Some(Arc::clone(&qsbr)),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let (log, changes) = std::sync::mpsc::sync_channel(4096);
    let server = serve(&path, Arc::clone(&state), Arc::clone(&stop), log).unwrap();

    // A worker: looks IDENT up in a loop, announcing quiescent states between "batches".
    let lookups = Arc::new(AtomicU64::new(0));
    let worker = {
        let (router, stop, lookups) =
            (Arc::clone(&router), Arc::clone(&stop), Arc::clone(&lookups));
        let handle = qsbr.handle(0);
        std::thread::spawn(move || {
            let mut torn = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..64 {
                    match router.table().lookup(IDENT) {
                        None | Some(LOC_A | LOC_B | LOC_C) => {}
                        Some(other) => torn.push(other),
                    }
                    std::hint::black_box(router.table().lookup(7));
                }
                lookups.fetch_add(64, Ordering::Relaxed);
                handle.quiescent();
            }
            torn
        })
    };

    let mut c = Client::connect(&path);
    assert_eq!(
        c.ask("ila list"),
        (
            "ok 1 mappings".into(),
            vec!["0:0:1:2 1111:1111:2222:2222".into()]
        )
    );
    assert_eq!(
        c.ask("ila add 0:0:0:7 3333:3333:4444:4444").0,
        "ok added 0:0:0:7 3333:3333:4444:4444"
    );
    assert_eq!(router.table().lookup(7), Some(LOC_B));
    // Every change is logged with the peer's uid and pid (this process); a list is not.
    let line = changes.recv_timeout(Duration::from_secs(5)).unwrap();
    let pid = std::process::id();
    assert!(
        line.starts_with("control: uid ")
            && line.ends_with(&format!(
                "pid {pid}: ila add 0:0:0:7 3333:3333:4444:4444 -> ok added 0:0:0:7 3333:3333:4444:4444"
            )),
        "{line}"
    );
    // The log drained as the server writes it (it waits for room, losing nothing).
    let drain = std::thread::spawn(move || changes.iter().count());
    for i in 0..2000 {
        let loc = if i % 2 == 0 {
            "3333:3333:4444:4444"
        } else {
            "1111:1111:2222:2222"
        };
        let (status, _) = c.ask(&format!("ila set 0:0:1:2 {loc}"));
        assert!(status.starts_with("ok set 0:0:1:2"), "{status}");
    }
    assert_eq!(router.table().lookup(IDENT), Some(LOC_A));
    assert_eq!(c.ask("ila del 0:0:0:7").0, "ok deleted 0:0:0:7");
    assert_eq!(router.table().lookup(7), None);
    assert!(c.ask("ila del 0:0:0:7").0.starts_with("error "));
    assert!(c
        .ask("ila frobnicate")
        .0
        .starts_with("error unknown request"));
    // A second client at the same time.
    let mut c2 = Client::connect(&path);
    assert_eq!(
        c2.ask("ila reload").0,
        "ok reload: 1 added, 1 changed, 0 removed, 0 unchanged"
    );
    assert_eq!(router.table().lookup(IDENT), Some(LOC_C));
    assert_eq!(router.table().lookup(7), Some(LOC_A));
    assert_eq!(
        c.ask("ila list").1,
        vec!["0:0:0:7 1111:1111:2222:2222", "0:0:1:2 5555:5555:6666:6666"]
    );

    // The removed slot is recycled once the worker has passed a quiescent point.
    let deadline = Instant::now() + Duration::from_secs(5);
    while router.table().limbo_len() > 0 && Instant::now() < deadline {
        state.reclaim();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(router.table().limbo_len(), 0);

    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
    assert_eq!(
        drain.join().unwrap(),
        2000 + 3,
        "2000 sets, a del, a reload, a failed del"
    );
    let torn = worker.join().unwrap();
    assert!(torn.is_empty(), "torn locators seen: {torn:x?}");
    assert!(lookups.load(Ordering::Relaxed) > 0);
    assert!(!path.exists(), "the socket file is removed on stop");
    let _ = std::fs::remove_dir(path.parent().unwrap());
}

#[test]
fn a_live_socket_is_not_taken_over_and_a_stale_one_is() {
    let path = socket_path("ctl2");
    let state = Arc::new(ControlState::new(router(vec![]), None, None));
    // A stale socket file (bound, then its listener dropped) is replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let (log, _changes) = std::sync::mpsc::sync_channel(16);
    let first = serve(&path, Arc::clone(&state), Arc::clone(&stop), log.clone()).unwrap();
    let second = serve(
        &path,
        Arc::clone(&state),
        Arc::new(AtomicBool::new(false)),
        log,
    );
    assert_eq!(second.unwrap_err().kind(), std::io::ErrorKind::AddrInUse);
    // A request without a trailing newline, then end of stream, is still answered.
    let mut s = UnixStream::connect(&path).unwrap();
    s.write_all(b"ila list").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut s, &mut answer).unwrap();
    assert_eq!(answer, "ok 0 mappings\n");
    // An over-long line is refused and the connection closed.
    let mut s = UnixStream::connect(&path).unwrap();
    s.write_all(&[b'x'; 4096]).unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut s, &mut answer).unwrap();
    assert!(answer.starts_with("error request longer than"), "{answer}");
    stop.store(true, Ordering::Relaxed);
    first.join().unwrap();
    let _ = std::fs::remove_dir(path.parent().unwrap());
}
