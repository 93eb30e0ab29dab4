//! A [`Sample`] into a `prometheus_client` registry: every family with its HELP text,
//! names in Prometheus style (`quicknat_` prefix, units in names, counters `_total`).
//! A fresh registry per scrape: the values are the gateway's own counters, copied, so
//! nothing here is shared with the data path.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use std::sync::atomic::AtomicU64;

use engine::DropReason;

use super::Sample;

/// A label set: (name, value) pairs.
type Labels = Vec<(&'static str, String)>;

/// The interfaces' label values, in the I/O counters' order.
const INTERFACES: [&str; 2] = ["inside", "outside"];

/// Registers counter `name` (its samples get `_total`) with value `v`.
fn counter(reg: &mut Registry, name: &str, help: &str, v: u64) {
    let c: Counter = Counter::default();
    c.inc_by(v);
    reg.register(name, help, c);
}

/// Registers a counter family: one sample per label set.
fn counters(
    reg: &mut Registry,
    name: &str,
    help: &str,
    items: impl IntoIterator<Item = (Labels, u64)>,
) {
    let f: Family<Labels, Counter> = Family::default();
    for (labels, v) in items {
        f.get_or_create(&labels).inc_by(v);
    }
    reg.register(name, help, f);
}

/// Registers integer gauge `name` with value `v`.
fn gauge(reg: &mut Registry, name: &str, help: &str, v: u64) {
    let g: Gauge = Gauge::default();
    g.set(i64::try_from(v).unwrap_or(i64::MAX));
    reg.register(name, help, g);
}

/// Registers a gauge family: one sample per label set.
fn gauges(
    reg: &mut Registry,
    name: &str,
    help: &str,
    items: impl IntoIterator<Item = (Labels, u64)>,
) {
    let f: Family<Labels, Gauge> = Family::default();
    for (labels, v) in items {
        f.get_or_create(&labels)
            .set(i64::try_from(v).unwrap_or(i64::MAX));
    }
    reg.register(name, help, f);
}

/// Registers floating-point gauge `name` with value `v`.
fn gauge_f64(reg: &mut Registry, name: &str, help: &str, v: f64) {
    let g: Gauge<f64, AtomicU64> = Gauge::default();
    g.set(v);
    reg.register(name, help, g);
}

/// One label.
fn label(name: &'static str, value: impl Into<String>) -> Labels {
    vec![(name, value.into())]
}

/// Per interface: `[inside, outside]` values with their `interface` label.
fn per_interface(v: [u64; 2]) -> impl Iterator<Item = (Labels, u64)> {
    (0..2).map(move |i| (label("interface", INTERFACES[i]), v[i]))
}

/// Every metric of `s`, in a registry with the `quicknat` prefix.
pub fn collect(s: &Sample) -> Registry {
    let mut reg = Registry::with_prefix("quicknat");
    build(&mut reg, s);
    traffic(&mut reg, s);
    table(&mut reg, s);
    per_worker(&mut reg, s);
    census(&mut reg, s);
    reg
}

/// The registry of `s` in the OpenMetrics text format (ends with `# EOF`).
pub fn render(s: &Sample) -> String {
    let mut out = String::with_capacity(16 * 1024);
    // Writing to a String cannot fail.
    let _ = encode(&mut out, &collect(s));
    out
}

/// Build info and process start time.
fn build(reg: &mut Registry, s: &Sample) {
    let Some(b) = &s.build else { return };
    reg.register(
        "build",
        "quicknat's version, the I/O backend in use and the translation mode",
        Info::new(vec![
            ("version", b.version.to_string()),
            ("backend", b.backend.to_string()),
            ("mode", b.mode.to_string()),
        ]),
    );
    gauge_f64(
        reg,
        "process_start_time_seconds",
        "When the gateway started, in seconds since the Unix epoch",
        b.start_time,
    );
}

/// Packets and bytes, forwarding, drops per reason, session churn, ICMP errors, I/O.
fn traffic(reg: &mut Registry, s: &Sample) {
    let (e, io) = s.totals();
    counters(
        reg,
        "received_packets",
        "Frames received per interface (inside: outbound traffic, outside: inbound)",
        per_interface(io.rx),
    );
    counters(
        reg,
        "received_bytes",
        "Bytes of the frames received per interface (Ethernet headers included)",
        per_interface(io.rx_bytes),
    );
    counters(
        reg,
        "transmitted_packets",
        "Frames transmitted per interface",
        per_interface(io.tx),
    );
    counters(
        reg,
        "transmitted_bytes",
        "Bytes of the frames transmitted per interface (Ethernet headers included)",
        per_interface(io.tx_bytes),
    );
    counter(
        reg,
        "forwarded_packets",
        "Packets translated and forwarded",
        e.forwarded,
    );
    counters(
        reg,
        "dropped_packets",
        "Packets dropped, per reason (see quicknat stats for each reason's explanation)",
        DropReason::ALL
            .iter()
            .map(|r| (label("reason", r.as_str()), e.dropped(*r))),
    );
    counter(
        reg,
        "subscriber_limit_hits",
        "Packets refused because an inside host reached max_sessions_per_host or max_ports_per_host (drop reason subscriber_limit)",
        e.dropped(DropReason::SubscriberLimit),
    );
    counter(
        reg,
        "sessions_created",
        "Sessions created",
        e.sessions_created,
    );
    counter(
        reg,
        "sessions_expired",
        "Sessions removed by expiry (idle timeout, TCP close)",
        e.sessions_expired,
    );
    counter(
        reg,
        "sessions_early_dropped",
        "Unconfirmed TCP sessions reclaimed because the table was nearly full",
        e.sessions_early_dropped,
    );
    counter(
        reg,
        "bindings_created",
        "Bindings (public address and port mappings) created",
        e.bindings_created,
    );
    counter(
        reg,
        "port_holds_cut_short",
        "Released public ports given back before port_reuse_hold had passed, to make room in a pool's full reuse hold (it holds at most max_sessions ports)",
        e.port_holds_cut_short,
    );
    counter(
        reg,
        "ports_released_unheld",
        "Released public ports given back at once, without port_reuse_hold: no packet ever came in through their binding",
        e.ports_released_unheld,
    );
    counter(
        reg,
        "icmp_errors_sent",
        "ICMP errors the gateway sent (Time Exceeded, Fragmentation Needed, Packet Too Big)",
        e.icmp_errors_sent,
    );
    counters(
        reg,
        "icmp_errors_rate_limited",
        "ICMP errors owed but not sent: the sender's budget (icmp_error_rate_per_source) or the worker's (icmp_error_rate) was spent",
        [
            (label("budget", "source"), e.icmp_errors_limited_source),
            (label("budget", "worker"), e.icmp_errors_limited),
        ],
    );
    counter(
        reg,
        "icmp_errors_translated",
        "ICMP errors whose quoted packet was translated",
        e.icmp_errors_translated,
    );
    counter(
        reg,
        "hairpinned_packets",
        "Packets hairpinned",
        e.hairpinned,
    );
    counter(
        reg,
        "fragments_translated",
        "Fragments translated (also counted in forwarded)",
        e.fragments_translated,
    );
    counter(
        reg,
        "fragmented_packets",
        "Packets cut into fragments for the IPv6 side (RFC 7915 4.1)",
        e.fragmented,
    );
    counter(
        reg,
        "to_kernel_packets",
        "Frames left to the kernel (ARP, neighbour discovery, the gateway's own addresses, families not translated)",
        io.to_kernel,
    );
    counter(
        reg,
        "via_kernel_packets",
        "Translated packets handed to the kernel because the next hop's MAC was unknown",
        io.via_kernel,
    );
    counter(
        reg,
        "probe_skipped",
        "Neighbour resolutions skipped because the probe queue was full",
        io.probe_skipped,
    );
    counter(
        reg,
        "no_route_packets",
        "Translated packets with no route out of either interface",
        io.no_route,
    );
    counter(
        reg,
        "oversize_packets",
        "Frames larger than the MTU (GRO/GSO super-packets with offloads on) dropped",
        io.oversize,
    );
    counter(
        reg,
        "tx_dropped_packets",
        "Frames the transmit queue refused",
        io.tx_dropped,
    );
    counter(
        reg,
        "csum_completed_packets",
        "Partial checksums (offload) completed in software",
        io.csum_completed,
    );
    counter(
        reg,
        "gso_packets",
        "GSO super-packets passed through to the kernel",
        io.gso,
    );
    counter(
        reg,
        "not_for_us_packets",
        "Frames addressed to another host's MAC (bridge flooding, promiscuous port) dropped, never translated",
        io.not_for_us,
    );
    counter(
        reg,
        "gso_refused_packets",
        "Frames with offload work (GSO, partial checksum) that could not pass through: dropped",
        io.gso_refused,
    );
    counter(
        reg,
        "log_events_sent",
        "NAT event log records sent to collectors",
        s.events.0,
    );
    counter(
        reg,
        "log_events_dropped",
        "NAT event log records dropped (queue full): never blocks a worker",
        s.events.1,
    );
}

/// Live sessions, the table's capacity and occupancy, the reaper's lag.
fn table(reg: &mut Registry, s: &Sample) {
    gauge(reg, "sessions", "Live sessions (ILA: mappings)", s.sessions);
    if let Some(o) = s.occupancy {
        gauge(
            reg,
            "session_table_capacity",
            "Sessions the table holds at most (max_sessions)",
            o.capacity as u64,
        );
        gauges(
            reg,
            "session_table_slots",
            "Session table slots taken: live sessions, and dead ones waiting for the reaper's grace period",
            [
                (label("state", "live"), o.live as u64),
                (label("state", "dead_pending"), o.dead_pending as u64),
            ],
        );
    }
    if let Some((last, max, passes)) = s.reaper_lag {
        gauge_f64(
            reg,
            "reaper_lag_seconds",
            "How late the reaper's last full pass started after it was due",
            last.as_secs_f64(),
        );
        gauge_f64(
            reg,
            "reaper_lag_max_seconds",
            "The latest the reaper's full pass started after it was due, since start",
            max.as_secs_f64(),
        );
        counter(reg, "reaper_passes", "Full passes of the reaper", passes);
    }
}

/// Per-worker counters (label `worker`): rates come from Prometheus' `rate()`.
fn per_worker(reg: &mut Registry, s: &Sample) {
    gauge(reg, "workers", "Worker threads", s.workers.len() as u64);
    let each = |f: &dyn Fn(&engine::Counters, &crate::live::IoCounters) -> u64| {
        s.workers
            .iter()
            .enumerate()
            .map(move |(i, (e, io))| (label("worker", i.to_string()), f(e, io)))
            .collect::<Vec<_>>()
    };
    counters(
        reg,
        "worker_received_packets",
        "Frames received per worker, both interfaces",
        each(&|_, io| io.rx[0] + io.rx[1]),
    );
    counters(
        reg,
        "worker_forwarded_packets",
        "Packets forwarded per worker",
        each(&|e, _| e.forwarded),
    );
    counters(
        reg,
        "worker_dropped_packets",
        "Packets dropped per worker, all reasons",
        each(&|e, _| e.total_dropped()),
    );
}

/// Sessions by protocol and TCP state, bindings, and each pool address's use (from the
/// control API's census: one read-only walk of the tables per scrape).
fn census(reg: &mut Registry, s: &Sample) {
    use conntrack::Proto;
    use engine::introspect::{tcp_state_name, TCP_STATES};
    if let Some(c) = &s.census {
        gauges(
            reg,
            "sessions_by_protocol",
            "Live sessions per protocol (counted by a walk of the table)",
            Proto::ALL.map(|p| (label("protocol", p.as_str()), c.by_proto[p.index()])),
        );
        gauges(
            reg,
            "tcp_sessions",
            "Live TCP sessions per state (syn_sent and syn_recv: handshakes not completed)",
            TCP_STATES
                .iter()
                .zip(c.tcp)
                .map(|(st, n)| (label("state", tcp_state_name(*st)), n)),
        );
        gauge(
            reg,
            "bindings",
            "Live bindings (public address and port mappings)",
            c.bindings,
        );
        let b = c.blocks;
        let f: Family<Labels, Counter> = Family::default();
        for (event, n) in [
            ("taken", b.taken),
            ("released", b.released),
            ("limit_refused", b.limit_refused),
            ("exhausted", b.exhausted),
        ] {
            f.get_or_create(&label("event", event)).inc_by(n);
        }
        reg.register(
            "port_blocks",
            "Port-block allocation: blocks taken and released, new bindings refused at a subscriber's block limit or for want of a free block (0 with PBA off)",
            f,
        );
    }
    if s.pool.is_empty() {
        return;
    }
    let per_addr = |f: &dyn Fn(&engine::introspect::PoolAddrUsage) -> u64| {
        s.pool
            .iter()
            .map(|u| (label("address", u.addr.to_string()), f(u)))
            .collect::<Vec<_>>()
    };
    gauges(
        reg,
        "pool_ports",
        "Ports per protocol each public pool address hands out",
        per_addr(&|u| u64::from(u.ports_per_proto)),
    );
    let taken: Vec<(Labels, u64)> = s
        .pool
        .iter()
        .flat_map(|u| {
            Proto::ALL.map(|p| {
                (
                    vec![
                        ("address", u.addr.to_string()),
                        ("protocol", p.as_str().to_string()),
                    ],
                    u64::from(u.taken[p.index()]),
                )
            })
        })
        .collect();
    gauges(
        reg,
        "pool_ports_taken",
        "Ports taken per public pool address and protocol (in use or held back after use): divide by quicknat_pool_ports for utilisation",
        taken,
    );
    gauges(
        reg,
        "pool_blocks_held",
        "Port blocks held on each public pool address (port-block allocation)",
        per_addr(&|u| u64::from(u.blocks_held)),
    );
    gauges(
        reg,
        "pool_subscribers",
        "Inside hosts with a binding on each public pool address",
        per_addr(&|u| u64::from(u.subscribers)),
    );
}
