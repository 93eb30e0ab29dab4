//! Does listing a full session table stop forwarding? (It must not, even at 1M sessions.)
//!
//! A NAT44 engine holds `sessions` live UDP sessions. One worker thread translates
//! packets of existing sessions as fast as it can (the hot path: lookup, rewrite,
//! refresh), reporting to QSBR between batches as the runtime's worker does. In
//! alternating windows of equal length, a lister thread is off, then on: when on, it
//! streams the whole table through the control socket's own code path
//! (`runtime::control::api::ApiState::answer` for `{"v":1,"cmd":"sessions"}`, each
//! session serialised to its JSON line) into a sink, again and again. Reported: the
//! worker's rate without and with the lister (medians over the windows, and their
//! ratio), and how long one full listing took (median).

use std::io::Write;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use conntrack::Timestamp;
use engine::any::AnyMode;
use engine::config::PortRange;
use engine::introspect::SessionFilter;
use engine::nat44::{DynamicRule, Nat44Config, Nat44Shared};
use engine::Direction;
use runtime::control::api::{ApiRequest, ApiState, GatewayFacts, LinkFacts};

/// What [`run`] measured.
#[derive(Clone, Debug)]
pub struct ListingReport {
    /// Live sessions in the table.
    pub sessions: usize,
    /// Worker packets per second in each window without the lister.
    pub rate_alone: Vec<f64>,
    /// Worker packets per second in each window with the lister streaming.
    pub rate_listing: Vec<f64>,
    /// Worker packets per second beside a thread that only spins (no table access): the
    /// share of the dip that is CPU contention rather than the listing itself.
    pub rate_spinner: Vec<f64>,
    /// Duration of each complete listing.
    pub listings: Vec<Duration>,
    /// Sessions per listing (the last one).
    pub listed: u64,
    /// Bytes of JSON per listing (the last one).
    pub bytes: u64,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

impl std::fmt::Display for ListingReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (a, l) = (median(&self.rate_alone), median(&self.rate_listing));
        let t: Vec<f64> = self.listings.iter().map(Duration::as_secs_f64).collect();
        writeln!(
            f,
            "listing {} live sessions beside one forwarding worker",
            self.sessions
        )?;
        writeln!(
            f,
            "  worker rate alone:        {:.2} Mpps (median of {}; {:?})",
            a / 1e6,
            self.rate_alone.len(),
            self.rate_alone
                .iter()
                .map(|r| (r / 1e4).round() / 1e2)
                .collect::<Vec<_>>()
        )?;
        writeln!(
            f,
            "  worker rate with lister:  {:.2} Mpps (median of {}; {:?})",
            l / 1e6,
            self.rate_listing.len(),
            self.rate_listing
                .iter()
                .map(|r| (r / 1e4).round() / 1e2)
                .collect::<Vec<_>>()
        )?;
        let sp = median(&self.rate_spinner);
        writeln!(
            f,
            "  worker rate with spinner: {:.2} Mpps (median of {}; {:?}) (a thread that only spins: CPU contention alone)",
            sp / 1e6,
            self.rate_spinner.len(),
            self.rate_spinner.iter().map(|r| (r / 1e4).round() / 1e2).collect::<Vec<_>>()
        )?;
        writeln!(
            f,
            "  ratio with lister/alone:   {:.3}",
            if a > 0.0 { l / a } else { 0.0 }
        )?;
        writeln!(
            f,
            "  ratio with spinner/alone:  {:.3}",
            if a > 0.0 { sp / a } else { 0.0 }
        )?;
        writeln!(
            f,
            "  ratio lister/spinner:      {:.3}",
            if sp > 0.0 { l / sp } else { 0.0 }
        )?;
        writeln!(
            f,
            "  one full listing:         {:.3} s median of {} ({} sessions, {:.1} MB of JSON lines)",
            median(&t),
            t.len(),
            self.listed,
            self.bytes as f64 / 1e6
        )
    }
}

fn udp(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16) -> [u8; 36] {
    let mut p = [0u8; 36];
    p[..12].copy_from_slice(&[0x45, 0, 0, 36, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = wire::checksum::checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    p[24..26].copy_from_slice(&16u16.to_be_bytes()); // checksum 0: allowed in IPv4
    p
}

const SERVER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);

/// The `i`th flow's inside endpoint (10.0.0.0/12, 64 ports per host).
fn flow(i: usize) -> (Ipv4Addr, u16) {
    let host = 0x0a00_0000 + (i / 64) as u32 + 1;
    (Ipv4Addr::from(host), 10_000 + (i % 64) as u16)
}

/// A counting sink (what the socket would carry).
struct Count(u64);
impl Write for Count {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0 += b.len() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Fills a table with `sessions` UDP sessions, then alternates `rounds` pairs of windows
/// of `window` each (worker alone, worker beside the lister).
pub fn run(sessions: usize, rounds: usize, window: Duration) -> ListingReport {
    let cfg = Nat44Config {
        rules: vec![DynamicRule {
            inside: "10.0.0.0/12".parse().expect("prefix"),
            pool: vec!["203.0.112.0/22".parse().expect("prefix")],
            ports: PortRange::new(1024, 65535).expect("range"),
        }],
        max_sessions: sessions + sessions / 8 + 1024,
        ..Nat44Config::default()
    };
    let shared = Nat44Shared::new(cfg, 2).expect("config");
    let t = Timestamp::from_secs(1);
    let mut w = shared.worker(0);
    for i in 0..sessions {
        let (h, p) = flow(i);
        let mut pkt = udp(h, p, SERVER, 53);
        let _ = w.process_packet(t, Direction::Outbound, &mut pkt);
        if i % 4096 == 0 {
            w.quiescent();
        }
    }
    let live = shared.session_count();
    // The worker's packets: 64k of the sessions, spread over the table.
    let step = (sessions / 65_536).max(1);
    let packets: Vec<[u8; 36]> = (0..sessions.min(65_536))
        .map(|k| {
            let (h, p) = flow(k * step);
            udp(h, p, SERVER, 53)
        })
        .collect();
    let mode = Arc::new(AnyMode::Nat44(Arc::clone(&shared)));
    let api = ApiState {
        mode,
        clock: Box::new(move || t),
        counters: Box::new(Vec::new),
        reaper: None,
        facts: GatewayFacts {
            mode: "nat44",
            links: [LinkFacts::default(), LinkFacts::default()],
            backend: "bench".into(),
            backend_why: String::new(),
            workers: 1,
            started: Instant::now(),
            config: None,
            cpus: None,
            placement: None,
            rx_hash: None,
        },
        reload: None,
        routing: None,
        fast_path: None,
        tracer: None,
    };
    let done = AtomicBool::new(false);
    let listing = AtomicBool::new(false);
    // Set when a window without the lister starts: a listing in progress stops at once
    // (the socket's own stop flag), so it never spills into that window.
    let halt = AtomicBool::new(true);
    let spin = AtomicBool::new(false);
    let forwarded = AtomicU64::new(0);
    let mut report = ListingReport {
        sessions: live,
        rate_alone: Vec::new(),
        rate_listing: Vec::new(),
        rate_spinner: Vec::new(),
        listings: Vec::new(),
        listed: 0,
        bytes: 0,
    };
    std::thread::scope(|s| {
        // The data path.
        s.spawn(|| {
            let mut buf = [0u8; 36];
            let mut n = 0u64;
            while !done.load(Ordering::Relaxed) {
                for p in &packets {
                    buf.copy_from_slice(p);
                    let _ = w.process_packet(t, Direction::Outbound, &mut buf);
                }
                w.quiescent();
                n += packets.len() as u64;
                forwarded.store(n, Ordering::Relaxed);
            }
            w.offline();
        });
        // The control: a thread that spins while asked, touching nothing.
        s.spawn(|| {
            let mut x = 1u64;
            while !done.load(Ordering::Relaxed) {
                if spin.load(Ordering::Relaxed) {
                    for _ in 0..10_000 {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                } else {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        // The lister: the control socket's code path into a sink, while asked.
        let lister = s.spawn(|| {
            let mut times = Vec::new();
            let (mut listed, mut bytes) = (0, 0);
            let req = ApiRequest::Sessions {
                filter: SessionFilter::default(),
                limit: None,
            };
            while !done.load(Ordering::Relaxed) {
                if !listing.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                let start = Instant::now();
                let mut sink = Count(0);
                let _ = api.answer(&req, &mut sink, &halt);
                if halt.load(Ordering::Relaxed) {
                    continue; // cut short by the window's end: not a full listing
                }
                times.push(start.elapsed());
                bytes = sink.0;
                listed = api.mode.census().live;
            }
            (times, listed, bytes)
        });
        let rate = |on: bool, spinning: bool| {
            spin.store(spinning, Ordering::Relaxed);
            halt.store(!on, Ordering::Relaxed);
            listing.store(on, Ordering::Relaxed);
            let (t0, n0) = (Instant::now(), forwarded.load(Ordering::Relaxed));
            std::thread::sleep(window);
            let (t1, n1) = (Instant::now(), forwarded.load(Ordering::Relaxed));
            listing.store(false, Ordering::Relaxed);
            halt.store(true, Ordering::Relaxed);
            spin.store(false, Ordering::Relaxed);
            (n1 - n0) as f64 / (t1 - t0).as_secs_f64()
        };
        rate(false, false); // warm-up
        for _ in 0..rounds {
            report.rate_alone.push(rate(false, false));
            report.rate_listing.push(rate(true, false));
            report.rate_spinner.push(rate(false, true));
        }
        done.store(true, Ordering::Relaxed);
        let (times, listed, bytes) = lister.join().expect("lister");
        report.listings = times;
        report.listed = listed;
        report.bytes = bytes;
    });
    report
}
