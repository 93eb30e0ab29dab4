//! systemd's readiness protocol, `sd_notify(3)`: one datagram per state change to the
//! `AF_UNIX` socket named by `$NOTIFY_SOCKET` (a path, or `@name` in the abstract
//! namespace). Without the variable (not started by systemd as `Type=notify`)
//! every call here does nothing.
//!
//! What the gateway says, and when:
//! - `READY=1` once every gateway of the process forwards (workers running);
//! - `STATUS=...` a one-line counter summary on every stats tick;
//! - `WATCHDOG=1` from the supervising loop, every half of `$WATCHDOG_USEC` (if systemd
//!   asked for it and `$WATCHDOG_PID` is ours or unset), so a stuck supervisor is
//!   restarted;
//! - `RELOADING=1` on SIGHUP, then `READY=1` when the reload is done;
//! - `STOPPING=1` once the gateway starts shutting down.
//!
//! Sending never blocks (the socket is non-blocking) and a failure is ignored: the
//! service manager going away must not stop the gateway.

use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Where and how often to notify.
#[derive(Debug)]
pub struct Notifier {
    socket: UnixDatagram,
    target: Target,
    watchdog: Option<Duration>,
    last_watchdog: Mutex<Option<Instant>>,
    /// Gateways still to report ready before `READY=1` is sent.
    pending: AtomicUsize,
}

/// The `$NOTIFY_SOCKET` address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A file system path.
    Path(std::path::PathBuf),
    /// A name in the abstract namespace (`@name`, sent as `\0name`).
    Abstract(Vec<u8>),
}

impl Target {
    /// The address `$NOTIFY_SOCKET` names, if it is one this module can reach.
    pub fn parse(value: &str) -> Option<Target> {
        if let Some(name) = value.strip_prefix('@') {
            Some(Target::Abstract(name.as_bytes().to_vec()))
        } else if value.starts_with('/') {
            Some(Target::Path(value.into()))
        } else {
            // vsock:... and other forms systemd knows are not needed by a local service.
            None
        }
    }
}

/// The watchdog period systemd asks for: `$WATCHDOG_USEC` microseconds, when
/// `$WATCHDOG_PID` is unset or names `pid`; a ping every half of it (sd_watchdog_enabled(3)).
pub fn watchdog_interval(
    usec: Option<&str>,
    watchdog_pid: Option<&str>,
    pid: u32,
) -> Option<Duration> {
    if let Some(p) = watchdog_pid {
        if p.trim().parse::<u32>().ok() != Some(pid) {
            return None;
        }
    }
    let usec: u64 = usec?.trim().parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

/// A `STATUS=` line: one line, no longer than systemd shows usefully.
pub fn status_message(summary: &str) -> String {
    let one: String = summary
        .chars()
        .map(|c| if c == '\n' { ' ' } else { c })
        .take(400)
        .collect();
    format!("STATUS={one}")
}

impl Notifier {
    /// A notifier for `target`; `gateways` must report ready before `READY=1` is sent.
    pub fn new(
        target: Target,
        watchdog: Option<Duration>,
        gateways: usize,
    ) -> std::io::Result<Notifier> {
        let socket = UnixDatagram::unbound()?;
        socket.set_nonblocking(true)?;
        Ok(Notifier {
            socket,
            target,
            watchdog,
            last_watchdog: Mutex::new(None),
            pending: AtomicUsize::new(gateways.max(1)),
        })
    }

    /// The notifier the environment describes (`NOTIFY_SOCKET`, `WATCHDOG_USEC`,
    /// `WATCHDOG_PID`); `None` when not run as a `Type=notify` service.
    pub fn from_env(gateways: usize) -> Option<Notifier> {
        let target = Target::parse(&std::env::var("NOTIFY_SOCKET").ok()?)?;
        let watchdog = watchdog_interval(
            std::env::var("WATCHDOG_USEC").ok().as_deref(),
            std::env::var("WATCHDOG_PID").ok().as_deref(),
            std::process::id(),
        );
        Notifier::new(target, watchdog, gateways).ok()
    }

    /// Sends `state` (newline-separated `KEY=VALUE` assignments); errors are returned for
    /// tests, ignored by the gateway.
    pub fn send(&self, state: &str) -> std::io::Result<()> {
        match &self.target {
            Target::Path(p) => self.socket.send_to(state.as_bytes(), p).map(|_| ()),
            Target::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                self.socket
                    .send_to_addr(state.as_bytes(), &addr)
                    .map(|_| ())
            }
        }
    }

    /// One gateway is forwarding; `READY=1` goes out when the last one is.
    pub fn ready(&self) {
        let left = self
            .pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(1))
            })
            .unwrap_or(0);
        if left <= 1 {
            let _ = self.send("READY=1");
        }
    }

    /// `WATCHDOG=1` if half the watchdog period has passed since the last one.
    pub fn watchdog(&self, now: Instant) {
        let Some(period) = self.watchdog else { return };
        let Ok(mut last) = self.last_watchdog.lock() else {
            return;
        };
        if last.is_none_or(|t| now.duration_since(t) >= period) {
            *last = Some(now);
            let _ = self.send("WATCHDOG=1");
        }
    }

    /// The watchdog ping period (half of `WATCHDOG_USEC`), if systemd asked for one.
    pub fn watchdog_period(&self) -> Option<Duration> {
        self.watchdog
    }
}

/// The process's notifier, set once by the binary ([`install`]).
static NOTIFIER: OnceLock<Option<Notifier>> = OnceLock::new();

/// Sets the process's notifier from the environment, for `gateways` gateways; returns
/// whether one was found (`$NOTIFY_SOCKET` set). Later calls change nothing.
pub fn install(gateways: usize) -> bool {
    NOTIFIER
        .get_or_init(|| Notifier::from_env(gateways))
        .is_some()
}

fn with(f: impl FnOnce(&Notifier)) {
    if let Some(Some(n)) = NOTIFIER.get() {
        f(n);
    }
}

/// A gateway forwards (see [`Notifier::ready`]).
pub fn ready() {
    with(Notifier::ready);
}

/// `STATUS=` with `summary` (its first 400 characters, on one line).
pub fn status(summary: &str) {
    with(|n| {
        let _ = n.send(&status_message(summary));
    });
}

/// A `WATCHDOG=1` if one is due; cheap to call every loop turn.
pub fn watchdog() {
    with(|n| n.watchdog(Instant::now()));
}

/// `RELOADING=1`: a reload (SIGHUP) begins; [`reloaded`] ends it.
pub fn reloading() {
    with(|n| {
        let _ = n.send("RELOADING=1");
    });
}

/// `READY=1` again after a reload.
pub fn reloaded() {
    with(|n| {
        let _ = n.send("READY=1");
    });
}

/// `STOPPING=1`: the gateway is shutting down.
pub fn stopping() {
    with(|n| {
        let _ = n.send("STOPPING=1");
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_socket_forms() {
        assert_eq!(
            Target::parse("/run/systemd/notify"),
            Some(Target::Path("/run/systemd/notify".into()))
        );
        assert_eq!(
            Target::parse("@abc"),
            Some(Target::Abstract(b"abc".to_vec()))
        );
        assert_eq!(Target::parse("vsock:2:1"), None);
        assert_eq!(Target::parse(""), None);
    }

    #[test]
    fn watchdog_is_half_the_period_and_only_for_our_pid() {
        assert_eq!(
            watchdog_interval(Some("2000000"), None, 7),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            watchdog_interval(Some("2000000"), Some("7"), 7),
            Some(Duration::from_secs(1))
        );
        assert_eq!(watchdog_interval(Some("2000000"), Some("8"), 7), None);
        assert_eq!(watchdog_interval(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval(None, None, 7), None);
        assert_eq!(watchdog_interval(Some("x"), None, 7), None);
    }

    #[test]
    fn status_is_one_line() {
        assert_eq!(status_message("a\nb"), "STATUS=a b");
        assert_eq!(status_message(&"x".repeat(1000)).len(), 7 + 400);
    }

    /// A real datagram socket receives what a notifier sends, to a path and to an
    /// abstract name; READY=1 waits for every gateway; WATCHDOG=1 is rate-limited.
    #[test]
    fn datagrams_reach_a_listening_socket() {
        let dir = std::env::temp_dir().join(format!("qn-sdnotify-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("notify");
        let _ = std::fs::remove_file(&path);
        let rx = UnixDatagram::bind(&path).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let n =
            Notifier::new(Target::Path(path.clone()), Some(Duration::from_secs(10)), 2).unwrap();
        let mut buf = [0u8; 512];
        let mut recv = || {
            let k = rx.recv(&mut buf).unwrap();
            String::from_utf8_lossy(&buf[..k]).into_owned()
        };
        n.ready(); // one of two gateways: nothing yet
        n.send(&status_message("stats: rx in=1")).unwrap();
        assert_eq!(recv(), "STATUS=stats: rx in=1");
        n.ready();
        assert_eq!(recv(), "READY=1");
        let t0 = Instant::now();
        n.watchdog(t0);
        n.watchdog(t0 + Duration::from_secs(1)); // too soon: not sent
        n.watchdog(t0 + Duration::from_secs(10));
        n.send("STOPPING=1").unwrap();
        assert_eq!(recv(), "WATCHDOG=1");
        assert_eq!(recv(), "WATCHDOG=1");
        assert_eq!(recv(), "STOPPING=1");
        let _ = std::fs::remove_dir_all(&dir);

        use std::os::linux::net::SocketAddrExt;
        let name = format!("qn-sdnotify-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let rx = UnixDatagram::bind_addr(&addr).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let n = Notifier::new(Target::parse(&format!("@{name}")).unwrap(), None, 1).unwrap();
        n.ready();
        let k = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..k], b"READY=1");
        n.watchdog(Instant::now()); // no watchdog asked for: nothing
        n.send("STOPPING=1").unwrap();
        let k = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..k], b"STOPPING=1");
    }
}
