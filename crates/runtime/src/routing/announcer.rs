//! The announcer: owns the announcement device and its routes, and the loop that checks
//! the gateway's health every `health_interval` and announces or withdraws on a change.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use io::announce::{link_running, AnnounceDevice};
use io::netlink::{DevRoute, Netlink};

use super::health::Unhealthy;
use super::{Health, RouteStatus, RoutingConfig};

/// The announcement device, its routes and whether they are in the kernel now.
pub struct Announcer {
    dev: AnnounceDevice,
    nl: Netlink,
    routes: Vec<DevRoute>,
    /// Whether the routes were added (and not deleted since).
    announced: bool,
    /// A one-line summary for the log: `0.0.0.0/0, 203.0.113.8/29 (standby) on qn-announce table 250`.
    what: String,
    status: Arc<RouteStatus>,
}

impl std::fmt::Debug for Announcer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Announcer")
            .field("what", &self.what)
            .field("announced", &self.announced)
            .finish()
    }
}

impl Announcer {
    /// Creates the device of `cfg` (nothing announced yet). Call before privileges are
    /// dropped or with CAP_NET_ADMIN kept.
    pub fn open(cfg: &RoutingConfig, status: Arc<RouteStatus>) -> std::io::Result<Announcer> {
        let dev = AnnounceDevice::create(&cfg.device)?;
        let nl = Netlink::open()?;
        Ok(Announcer {
            routes: cfg.routes(dev.index()),
            what: format!(
                "{} on {} table {} proto {}",
                cfg.describe().join(", "),
                cfg.device,
                cfg.table,
                cfg.protocol
            ),
            dev,
            nl,
            announced: false,
            status,
        })
    }

    /// What is announced, for the log.
    pub fn describe(&self) -> &str {
        &self.what
    }

    /// Adds every route (replacing any of the same key). Every route is tried; the first
    /// error is returned.
    pub fn announce(&mut self) -> std::io::Result<()> {
        let mut first = Ok(());
        for r in &self.routes {
            if let Err(e) = self.nl.add_dev_route(r) {
                if first.is_ok() {
                    first = Err(std::io::Error::new(
                        e.kind(),
                        format!("{}/{}: {e}", r.dst, r.prefix_len),
                    ));
                }
            }
        }
        self.announced = first.is_ok();
        first
    }

    /// Deletes every route (the device stays). Every route is tried; the first error is
    /// returned.
    pub fn withdraw(&mut self) -> std::io::Result<()> {
        let mut first = Ok(());
        for r in &self.routes {
            if let Err(e) = self.nl.del_dev_route(r) {
                first = first.and(Err(e));
            }
        }
        self.announced = false;
        first
    }

    /// The device's name.
    pub fn device(&self) -> &str {
        self.dev.name()
    }
}

/// Checks health every `interval` until `stop`, announcing while healthy and withdrawing
/// while not; every change is logged with its reason and counted in the status. `links`
/// are the inside and outside interfaces; `beats` reads each worker's heartbeat count.
/// On `stop`, withdraws and deletes the device (the process's exit would too).
pub fn run(
    mut ann: Announcer,
    interval: Duration,
    links: [&str; 2],
    beats: &dyn Fn() -> Vec<u64>,
    stop: &AtomicBool,
    log: &(dyn Fn(String) + Sync),
) {
    let status = Arc::clone(&ann.status);
    let mut health = Health::new(beats().len(), Instant::now());
    // The last failure to announce, logged once until it changes.
    let mut failing: Option<String> = None;
    // Whether the "withdrawn" state was logged since the last announcement.
    let mut withdrawn = false;
    while !stop.load(Ordering::Relaxed) {
        let up = links.map(|l| (l, link_running(l).map_err(|e| e.to_string())));
        // A drain withdraws as an unhealthy gateway does, whatever the health.
        let verdict = health.check(Instant::now(), up, &beats());
        let verdict = if status.draining() {
            Err(Unhealthy::Draining)
        } else {
            verdict
        };
        match verdict {
            Ok(()) if !ann.announced => match ann.announce() {
                Ok(()) => {
                    (failing, withdrawn) = (None, false);
                    status.set(true, "healthy".to_owned());
                    log(format!("routing: announced {}: healthy", ann.describe()));
                }
                Err(e) => {
                    let msg = format!("announcing failed: {e}");
                    if failing.as_deref() != Some(&msg) {
                        log(format!(
                            "warning: routing: {msg}; retrying every {interval:?}"
                        ));
                    }
                    status.set(false, msg.clone());
                    failing = Some(msg);
                }
            },
            Ok(()) => {}
            Err(why) => {
                if ann.announced || !withdrawn {
                    let verb = if ann.announced {
                        "withdrew"
                    } else {
                        "not announcing"
                    };
                    let r = ann.withdraw();
                    log(format!(
                        "routing: {verb} {}: {why}{}",
                        ann.describe(),
                        r.err()
                            .map_or(String::new(), |e| format!(" (deleting: {e})"))
                    ));
                    withdrawn = true;
                }
                // The reason stays current (a stall's length grows) without a log line.
                status.set(false, why.to_string());
            }
        }
        let next = Instant::now() + interval;
        while !stop.load(Ordering::Relaxed) && Instant::now() < next {
            std::thread::sleep(interval.min(Duration::from_millis(20)));
        }
    }
    if ann.announced {
        let r = ann.withdraw();
        log(format!(
            "routing: withdrew {}: stopping{}",
            ann.describe(),
            r.err()
                .map_or(String::new(), |e| format!(" (deleting: {e})"))
        ));
    }
    status.set(false, "stopped".to_owned());
    log(format!("routing: {} removed", ann.device()));
}
