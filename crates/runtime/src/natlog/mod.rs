//! NAT event export: one thread drains the engine's event rings ([`engine::events`]) and
//! sends each event as IPFIX (RFC 7011 with RFC 8158's information elements) and/or RFC
//! 5424 syslog, over UDP. Workers never wait for it: a ring that fills while the
//! exporter is slow drops events and counts them.
//!
//! The encoders are sans-I/O (`ipfix`, `syslog`); this module owns the sockets and maps
//! the engine's monotonic time to wall-clock time.

pub mod ipfix;
pub mod syslog;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use conntrack::Timestamp;
use engine::events::{Event, EventLog, EventMask, RING_CAPACITY};

/// The `[logging]` settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatLogConfig {
    /// Which events are recorded (empty: none, the default).
    pub events: EventMask,
    /// The IPFIX collector, if any.
    pub ipfix: Option<SocketAddr>,
    /// The syslog receiver, if any.
    pub syslog: Option<SocketAddr>,
    /// IPFIX templates are sent again after this long.
    pub template_refresh: Duration,
    /// ... and after this many messages (0: by time only).
    pub template_refresh_messages: u32,
    /// IPFIX observation domain id.
    pub observation_domain: u32,
    /// Largest IPFIX message (the path MTU less IP and UDP headers).
    pub max_message: usize,
    /// syslog facility (0-23).
    pub syslog_facility: u8,
    /// syslog severity (0-7).
    pub syslog_severity: u8,
    /// Events each worker's ring (and the reaper's) holds before dropping.
    pub queue: usize,
}

impl Default for NatLogConfig {
    fn default() -> Self {
        NatLogConfig {
            events: EventMask::NONE,
            ipfix: None,
            syslog: None,
            template_refresh: Duration::from_secs(60),
            template_refresh_messages: 0,
            observation_domain: 1,
            max_message: 1400,
            syslog_facility: 16,
            syslog_severity: 6,
            queue: RING_CAPACITY,
        }
    }
}

impl NatLogConfig {
    /// Whether anything is to be recorded and sent.
    pub fn enabled(&self) -> bool {
        self.events != EventMask::NONE && (self.ipfix.is_some() || self.syslog.is_some())
    }
}

/// What the exporter did, for the stats line and metrics.
#[derive(Debug, Default)]
pub struct ExportCounters {
    /// Events sent (to every configured target).
    pub events_sent: AtomicU64,
    /// Events dropped because a ring was full (copied from the rings).
    pub events_dropped: AtomicU64,
    /// IPFIX messages sent.
    pub ipfix_messages: AtomicU64,
    /// syslog messages sent.
    pub syslog_messages: AtomicU64,
    /// Datagrams the socket refused (collector unreachable, buffer full).
    pub send_errors: AtomicU64,
}

impl ExportCounters {
    /// `natlog: events_sent=N events_dropped=M ...` for the log.
    pub fn line(&self) -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "natlog: events_sent={} events_dropped={} ipfix_messages={} syslog_messages={} send_errors={}",
            g(&self.events_sent),
            g(&self.events_dropped),
            g(&self.ipfix_messages),
            g(&self.syslog_messages),
            g(&self.send_errors)
        )
    }
}

/// Maps the engine's clock to wall-clock milliseconds: `origin` is the wall-clock time of
/// the engine's `Timestamp::ZERO`.
#[derive(Clone, Copy, Debug)]
pub struct WallClock {
    /// Unix time (ms) of the engine's time zero.
    pub origin_ms: u64,
}

impl WallClock {
    /// The mapping for an engine clock that reads `now` at this moment.
    pub fn at(now: Timestamp) -> WallClock {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        WallClock {
            origin_ms: wall.saturating_sub(now.as_nanos() / 1_000_000),
        }
    }

    /// Wall-clock ms of engine time `t`.
    pub fn ms(&self, t: Timestamp) -> u64 {
        self.origin_ms + t.as_nanos() / 1_000_000
    }

    /// Wall-clock ms now.
    pub fn now_ms() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64
    }
}

/// The exporter: sockets, encoders, and a buffer reused between drains.
pub struct Exporter {
    cfg: NatLogConfig,
    log: Arc<EventLog>,
    clock: WallClock,
    socket: UdpSocket,
    ipfix: ipfix::Encoder,
    syslog: syslog::SyslogHeader,
    buf: Vec<(Event, u64)>,
    counters: Arc<ExportCounters>,
}

impl Exporter {
    /// An exporter for `log` (opens its UDP socket now, before privileges are dropped).
    pub fn new(
        cfg: NatLogConfig,
        log: Arc<EventLog>,
        clock: WallClock,
        counters: Arc<ExportCounters>,
    ) -> std::io::Result<Exporter> {
        let v6 = cfg.ipfix.or(cfg.syslog).is_some_and(|a| a.is_ipv6());
        let socket = UdpSocket::bind(if v6 { "[::]:0" } else { "0.0.0.0:0" })?;
        let ipfix = ipfix::Encoder::new(
            cfg.observation_domain,
            cfg.max_message,
            ipfix::Refresh {
                interval: cfg.template_refresh,
                messages: cfg.template_refresh_messages,
            },
        );
        let syslog = syslog::SyslogHeader {
            facility: cfg.syslog_facility,
            severity: cfg.syslog_severity,
            hostname: hostname(),
            procid: std::process::id(),
        };
        Ok(Exporter {
            cfg,
            log,
            clock,
            socket,
            ipfix,
            syslog,
            buf: Vec::with_capacity(4096),
            counters,
        })
    }

    /// Drains every ring and sends what was in them; returns how many events.
    pub fn flush(&mut self) -> usize {
        self.buf.clear();
        let (buf, clock) = (&mut self.buf, self.clock);
        for r in self.log.rings() {
            r.drain(|e| buf.push((e, clock.ms(e.time))));
        }
        // Rings are per producer: one data set per template, each in time order.
        self.buf
            .sort_by_key(|(e, t)| (ipfix::template_of(e).id, *t));
        let n = self.buf.len();
        let now = WallClock::now_ms();
        if let Some(to) = self.cfg.ipfix {
            let (sock, c) = (&self.socket, &self.counters);
            self.ipfix
                .encode(now, &self.buf, |m| match sock.send_to(m, to) {
                    Ok(_) => {
                        c.ipfix_messages.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        c.send_errors.fetch_add(1, Ordering::Relaxed);
                    }
                });
        }
        if let Some(to) = self.cfg.syslog {
            for (e, t) in &self.buf {
                let line = syslog::format(&self.syslog, e, *t);
                match self.socket.send_to(line.as_bytes(), to) {
                    Ok(_) => self
                        .counters
                        .syslog_messages
                        .fetch_add(1, Ordering::Relaxed),
                    Err(_) => self.counters.send_errors.fetch_add(1, Ordering::Relaxed),
                };
            }
        }
        self.counters
            .events_sent
            .fetch_add(n as u64, Ordering::Relaxed);
        self.counters
            .events_dropped
            .store(self.log.dropped(), Ordering::Relaxed);
        n
    }

    /// Runs until `stop`, draining every 10 ms, then a last drain.
    pub fn run(mut self, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            self.flush();
            std::thread::sleep(Duration::from_millis(10));
        }
        self.flush();
    }
}

/// This host's name for syslog's HOSTNAME ("-" if unknown).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty() && s.bytes().all(|b| (33..=126).contains(&b)))
        .unwrap_or_else(|| "-".to_owned())
}
