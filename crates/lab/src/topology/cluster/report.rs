//! The cluster lab's report: raw figures per cell, derived figures, and the table.

use std::fmt;
use std::net::Ipv4Addr;

use super::slices::Plan;
use super::{ClusterOptions, Event, NatMode, INSIDE, INSIDE_LEN, OUTSIDE_LEN, SUBSCRIBERS};
use crate::flows::{ClientReport, ServerReport, CLIENT_PORT};
use crate::topology::median;

/// One UDP flow through the failure.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct UdpRow {
    /// The subscriber (source port [`CLIENT_PORT`]).
    pub src: String,
    /// Gateway serving it before the failure, and after (names).
    pub gateway_before: String,
    /// See `gateway_before`.
    pub gateway_after: String,
    /// Public endpoints the server saw, in order.
    pub endpoints: Vec<String>,
    /// Deterministic mode: the endpoint RFC 7422 gives (public address, first port tried).
    pub expected: Option<String>,
    /// Datagrams sent and received (distinct), and received twice.
    pub sent: u64,
    /// See `sent`.
    pub received: u64,
    /// See `sent`.
    pub duplicates: u64,
    /// The outage: the longest run of datagrams lost that began within a second of the
    /// failure, in ms of the sender's 1 kHz schedule (`None`: none lost).
    pub gap_ms: Option<f64>,
    /// Last arrival, ms since the epoch.
    pub last_ms: f64,
    /// Runs of sequence numbers lost: (first, how many).
    pub holes: Vec<(u64, u64)>,
    /// Datagrams arrived after the failure and its gap (the flow resumed).
    pub resumed: bool,
}

/// One TCP connection through the failure.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct TcpRow {
    /// The subscriber.
    pub src: String,
    /// Gateway before, after.
    pub gateway_before: String,
    /// See `gateway_before`.
    pub gateway_after: String,
    /// Public endpoints of the connections the server accepted for it.
    pub endpoints: Vec<String>,
    /// Echoes still arrived in the last second, no error, no reconnect.
    pub survived: bool,
    /// The client's error, if any.
    pub error: Option<String>,
}

/// One failover cell.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Failover {
    /// NAT mode on the gateways.
    pub mode: NatMode,
    /// How the victim failed.
    pub event: Event,
    /// The victim gateway's name.
    pub victim: String,
    /// Subscribers counted per gateway before the failure (of [`SUBSCRIBERS`]).
    pub spread_before: Vec<u64>,
    /// ... and after it.
    pub spread_after: Vec<u64>,
    /// What the plan says, before and after.
    pub planned_before: Vec<u64>,
    /// See `planned_before`.
    pub planned_after: Vec<u64>,
    /// Both routers routed every slice and block as planned after the failure.
    pub reconverged: bool,
    /// UDP flows.
    pub udp: Vec<UdpRow>,
    /// TCP connections.
    pub tcp: Vec<TcpRow>,
    /// The failure, ms since the epoch.
    pub event_ms: f64,
    /// Median and largest gap of the victim's subscribers, ms (infinite: a flow never
    /// resumed; JSON null).
    pub victim_gap_median_ms: f64,
    /// See `victim_gap_median_ms`.
    pub victim_gap_max_ms: f64,
    /// Datagrams lost by the victim's subscribers.
    pub victim_lost: u64,
    /// Datagrams sent and lost by the survivors' subscribers.
    pub survivor_sent: u64,
    /// See `survivor_sent`.
    pub survivor_lost: u64,
    /// Datagrams that arrived twice (all flows).
    pub duplicates: u64,
    /// UDP flows that kept one public endpoint throughout, of all.
    pub udp_kept: usize,
    /// Deterministic mode: flows whose endpoint is RFC 7422's, before and after.
    pub udp_as_computed: usize,
    /// TCP connections that survived: the victim's, all.
    pub tcp_victim_survived: usize,
    /// See `tcp_victim_survived`.
    pub tcp_victim: usize,
    /// See `tcp_victim_survived`.
    pub tcp_survived: usize,
    /// Each gateway's quicknat log (stderr).
    pub quicknat_logs: Vec<String>,
    /// Frames for another host's MAC the gateways dropped (bridge flooding after a link
    /// down): the last `not_for_us` of each log's stats lines, summed.
    pub not_for_us: u64,
}

/// One throughput round: all gateways vs one.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Throughput {
    /// Offered and delivered, one generator per gateway at the per-gateway rate.
    pub offered_all_pps: f64,
    /// See `offered_all_pps`.
    pub delivered_all_pps: f64,
    /// Offered and delivered, the same aggregate rate from one gateway's subscriber.
    pub offered_one_pps: f64,
    /// See `offered_one_pps`.
    pub delivered_one_pps: f64,
}

/// The lab's report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ClusterReport {
    /// Date and kernel.
    pub when: String,
    /// Gateways.
    pub gateways: usize,
    /// Backend.
    pub backend: String,
    /// Short form.
    pub short: bool,
    /// Blocks (public /32s) and slices.
    pub blocks: usize,
    /// See `blocks`.
    pub slices: usize,
    /// Offered per gateway in the throughput cell.
    pub gateway_pps: u64,
    /// Throughput rounds.
    pub throughput: Vec<Throughput>,
    /// The `[nat44.deterministic]` every gateway runs in the deterministic cells.
    pub deterministic: DetSettings,
    /// The UDP flows' source port (for `quicknat det forward --port`).
    pub client_port: u16,
    /// Failover cells.
    pub cells: Vec<Failover>,
}

/// `[nat44.deterministic]` as the lab writes it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DetSettings {
    /// Subscribers' prefix.
    pub inside: String,
    /// Public prefix.
    pub outside: String,
}

/// Deterministic NAT's endpoint for `src` (RFC 7422 as `[nat44.deterministic]` computes
/// it: R subscribers per public address, `floor(64512 / R)` ports each from 1024, the flow's
/// first choice `first + inside_port mod pps`).
pub fn det_endpoint(src: Ipv4Addr) -> Option<String> {
    let i = u32::from(src).checked_sub(u32::from(INSIDE))?;
    let shift = OUTSIDE_LEN - INSIDE_LEN;
    if i >> (32 - INSIDE_LEN) != 0 {
        return None;
    }
    let r = 1u32 << shift;
    let pps = 64_512 / r;
    let public = Ipv4Addr::from(u32::from(super::OUTSIDE) + (i >> shift));
    let first = 1024 + (i & (r - 1)) * pps;
    Some(format!("{public}:{}", first + u32::from(CLIENT_PORT) % pps))
}

fn per_gateway(plan: &Plan, dead: &[usize]) -> Vec<u64> {
    let mut v = vec![0u64; plan.gateways.len()];
    for i in 0..SUBSCRIBERS {
        if let Some(g) = plan.serving(Ipv4Addr::from(u32::from(INSIDE) + i), dead) {
            v[g] += 1;
        }
    }
    v
}

/// Builds a cell's figures from what the client and server recorded.
#[allow(clippy::too_many_arguments)]
pub(super) fn failover(
    plan: &Plan,
    mode: NatMode,
    event: Event,
    victim: usize,
    event_ms: f64,
    udp: &[Ipv4Addr],
    tcp: &[Ipv4Addr],
    client: &ClientReport,
    server: &ServerReport,
    spread_before: Vec<u64>,
    spread_after: Vec<u64>,
    reconverged: bool,
    quicknat_logs: Vec<String>,
) -> Failover {
    let name = |g: Option<usize>| g.map_or("-".to_string(), |g| plan.gateways[g].clone());
    let udp_rows: Vec<UdpRow> = udp
        .iter()
        .enumerate()
        .map(|(i, &src)| {
            let f = server.udp.iter().find(|f| f.id == i as u32);
            // The outage: the longest run of sequence numbers lost that began within a
            // second of the failure, in ms of the sender's schedule (1 kHz: one per ms).
            let per_ms = f64::from(super::PROBE_PPS) / 1000.0;
            let gap_ms = f.and_then(|f| {
                f.holes
                    .iter()
                    .filter(|&&(start, _)| {
                        let at = client.start_ms + start as f64 / per_ms;
                        at >= event_ms - 100.0 && at <= event_ms + 1000.0
                    })
                    .map(|&(_, len)| len as f64 / per_ms)
                    .max_by(f64::total_cmp)
            });
            UdpRow {
                src: src.to_string(),
                gateway_before: name(plan.serving(src, &[])),
                gateway_after: name(plan.serving(src, &[victim])),
                endpoints: f
                    .map(|f| f.endpoints.iter().map(|e| e.from.clone()).collect())
                    .unwrap_or_default(),
                expected: (mode == NatMode::Deterministic)
                    .then(|| det_endpoint(src))
                    .flatten(),
                sent: client.sent.get(i).copied().unwrap_or(0),
                received: f.map_or(0, |f| f.received),
                duplicates: f.map_or(0, |f| f.duplicates),
                resumed: f.is_some_and(|f| f.last_ms > event_ms + gap_ms.unwrap_or(0.0) + 100.0),
                holes: f.map(|f| f.holes.clone()).unwrap_or_default(),
                last_ms: f.map_or(0.0, |f| f.last_ms),
                gap_ms,
            }
        })
        .collect();
    let vname = plan.gateways[victim].clone();
    let (victims, survivors): (Vec<&UdpRow>, Vec<&UdpRow>) =
        udp_rows.iter().partition(|r| r.gateway_before == vname);
    // A victim flow that never resumed counts as the whole window.
    let gaps: Vec<f64> = victims
        .iter()
        .map(|r| {
            if r.resumed {
                r.gap_ms.unwrap_or(0.0)
            } else {
                f64::INFINITY
            }
        })
        .collect();
    let lost = |rs: &[&UdpRow]| {
        rs.iter()
            .map(|r| r.sent.saturating_sub(r.received))
            .sum::<u64>()
    };
    let tcp_rows: Vec<TcpRow> = tcp
        .iter()
        .enumerate()
        .map(|(j, &src)| {
            let cl = client.tcp.get(j).cloned().unwrap_or_default();
            let endpoints: Vec<String> = server
                .tcp
                .iter()
                .filter(|c| c.id == j as u32)
                .map(|c| c.from.clone())
                .collect();
            TcpRow {
                src: src.to_string(),
                gateway_before: name(plan.serving(src, &[])),
                gateway_after: name(plan.serving(src, &[victim])),
                survived: cl.connected
                    && cl.error.is_none()
                    && endpoints.len() == 1
                    && cl.last_echo_ms >= client.end_ms - 1000.0,
                endpoints,
                error: cl.error,
            }
        })
        .collect();
    Failover {
        mode,
        event,
        victim: vname.clone(),
        planned_before: per_gateway(plan, &[]),
        planned_after: per_gateway(plan, &[victim]),
        spread_before,
        spread_after,
        reconverged,
        event_ms,
        victim_gap_median_ms: median(gaps.clone()),
        victim_gap_max_ms: gaps.iter().copied().fold(0.0, f64::max),
        victim_lost: lost(&victims),
        survivor_sent: survivors.iter().map(|r| r.sent).sum(),
        survivor_lost: lost(&survivors),
        duplicates: udp_rows.iter().map(|r| r.duplicates).sum(),
        udp_kept: udp_rows.iter().filter(|r| r.endpoints.len() == 1).count(),
        udp_as_computed: udp_rows
            .iter()
            .filter(|r| {
                r.expected.is_some()
                    && r.endpoints.len() == 1
                    && r.expected.as_ref() == r.endpoints.first()
            })
            .count(),
        tcp_victim: tcp_rows
            .iter()
            .filter(|r| r.gateway_before == vname)
            .count(),
        tcp_victim_survived: tcp_rows
            .iter()
            .filter(|r| r.gateway_before == vname && r.survived)
            .count(),
        tcp_survived: tcp_rows.iter().filter(|r| r.survived).count(),
        udp: udp_rows,
        tcp: tcp_rows,
        not_for_us: quicknat_logs.iter().map(|l| last_not_for_us(l)).sum(),
        quicknat_logs,
    }
}

/// The last ` not_for_us=N` of a quicknat log's stats lines (0 when none).
fn last_not_for_us(log: &str) -> u64 {
    log.lines()
        .rev()
        .find_map(|l| {
            let rest = &l[l.find(" not_for_us=")? + " not_for_us=".len()..];
            let end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            rest[..end].parse().ok()
        })
        .unwrap_or(0)
}

pub(super) fn report(
    o: &ClusterOptions,
    plan: &Plan,
    when: String,
    cells: Vec<Failover>,
    throughput: Vec<Throughput>,
) -> ClusterReport {
    ClusterReport {
        when,
        gateways: o.gateways,
        backend: o.backend.clone(),
        short: o.short,
        blocks: plan.blocks.len(),
        slices: plan.slices.len(),
        gateway_pps: o.gateway_pps,
        throughput,
        deterministic: DetSettings {
            inside: format!("{INSIDE}/{INSIDE_LEN}"),
            outside: format!("{}/{OUTSIDE_LEN}", super::OUTSIDE),
        },
        client_port: CLIENT_PORT,
        cells,
    }
}

/// max/min of the non-zero... of every surviving gateway's count ("-" when one is 0).
fn spread_ratio(v: &[u64], dead: Option<usize>) -> String {
    let live: Vec<u64> = v
        .iter()
        .enumerate()
        .filter(|(g, _)| Some(*g) != dead)
        .map(|(_, &n)| n)
        .collect();
    let (max, min) = (
        live.iter().copied().max().unwrap_or(0),
        live.iter().copied().min().unwrap_or(0),
    );
    if min == 0 {
        "-".into()
    } else {
        format!("{:.2}x", max as f64 / min as f64)
    }
}

fn ms(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.0}")
    } else {
        "never".into()
    }
}

fn list(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join("/")
}

impl Failover {
    fn title(&self) -> String {
        format!(
            "{} {}",
            match self.mode {
                NatMode::Deterministic => "det",
                NatMode::Dynamic => "dyn",
            },
            match self.event {
                Event::Sigkill => "SIGKILL",
                Event::LinkDown => "link down",
                Event::Drain => "drain",
            }
        )
    }
    fn victim_index(&self) -> usize {
        self.victim
            .trim_start_matches("gw")
            .parse::<usize>()
            .unwrap_or(1)
            - 1
    }
}

impl fmt::Display for ClusterReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "quicknat cluster lab — {} — {} gateways ({}), {} blocks in {} slices, {} subscribers{}",
            self.when,
            self.gateways,
            self.backend,
            self.blocks,
            self.slices,
            SUBSCRIBERS,
            if self.short { " (short form)" } else { "" }
        )?;
        if !self.throughput.is_empty() {
            let m =
                |g: fn(&Throughput) -> f64| median(self.throughput.iter().map(g).collect()) / 1e3;
            let (all, one) = (m(|t| t.delivered_all_pps), m(|t| t.delivered_one_pps));
            writeln!(
                f,
                "throughput (64 B UDP, quicknat-lab gen, median of {}): all gateways {all:.1} kpps of {:.1} offered; one gateway {one:.1} kpps of {:.1} offered; ratio {}",
                self.throughput.len(),
                m(|t| t.offered_all_pps),
                m(|t| t.offered_one_pps),
                super::super::ratio(all, one)
            )?;
        }
        if self.cells.is_empty() {
            return Ok(());
        }
        let w = 22;
        write!(f, "| {:<52} |", "measure")?;
        for c in &self.cells {
            write!(f, " {:<w$} |", c.title())?;
        }
        writeln!(f)?;
        write!(f, "|{}|", "-".repeat(54))?;
        for _ in &self.cells {
            write!(f, "{}|", "-".repeat(w + 2))?;
        }
        writeln!(f)?;
        type Cell = Box<dyn Fn(&Failover) -> String>;
        let rows: Vec<(&str, Cell)> = vec![
            (
                "subscribers per gateway before (planned)",
                Box::new(|c| format!("{} ({})", list(&c.spread_before), list(&c.planned_before))),
            ),
            (
                "spread max/min before",
                Box::new(|c| spread_ratio(&c.spread_before, None)),
            ),
            (
                "subscribers per gateway after (planned)",
                Box::new(|c| format!("{} ({})", list(&c.spread_after), list(&c.planned_after))),
            ),
            (
                "spread max/min after (survivors)",
                Box::new(|c| spread_ratio(&c.spread_after, Some(c.victim_index()))),
            ),
            (
                "victim's subscribers: outage (ms lost at 1 kHz) med/max",
                Box::new(|c| {
                    format!(
                        "{} / {}",
                        ms(c.victim_gap_median_ms),
                        ms(c.victim_gap_max_ms)
                    )
                }),
            ),
            (
                "victim's subscribers: datagrams lost (1 kHz)",
                Box::new(|c| c.victim_lost.to_string()),
            ),
            (
                "survivors' subscribers: datagrams lost (sent)",
                Box::new(|c| format!("{} ({})", c.survivor_lost, c.survivor_sent)),
            ),
            (
                "datagrams received twice (all flows)",
                Box::new(|c| c.duplicates.to_string()),
            ),
            (
                "frames for another host dropped (not_for_us, all gateways)",
                Box::new(|c| c.not_for_us.to_string()),
            ),
            (
                "UDP flows that kept their public endpoint",
                Box::new(|c| {
                    format!(
                        "{}/{} ({:.0}%)",
                        c.udp_kept,
                        c.udp.len(),
                        100.0 * c.udp_kept as f64 / c.udp.len().max(1) as f64
                    )
                }),
            ),
            (
                "... and it is RFC 7422's (quicknat det forward)",
                Box::new(|c| {
                    if c.mode == NatMode::Deterministic {
                        format!("{}/{}", c.udp_as_computed, c.udp.len())
                    } else {
                        "-".into()
                    }
                }),
            ),
            (
                "TCP connections survived: victim's",
                Box::new(|c| format!("{}/{}", c.tcp_victim_survived, c.tcp_victim)),
            ),
            (
                "TCP connections survived: all",
                Box::new(|c| format!("{}/{}", c.tcp_survived, c.tcp.len())),
            ),
            (
                "routes as planned after the failure",
                Box::new(|c| {
                    if c.reconverged {
                        "yes".into()
                    } else {
                        "no".into()
                    }
                }),
            ),
        ];
        for (name, cell) in rows {
            write!(f, "| {name:<52} |")?;
            for c in &self.cells {
                write!(f, " {:<w$} |", cell(c))?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_last_not_for_us_of_a_log_is_read() {
        let log = "stats: rx in=1 drops[] early_dropped=0 not_for_us=3\n\
                   stats: rx in=9 drops[] early_dropped=0 not_for_us=17 xdp_fast=2\nbye\n";
        assert_eq!(super::last_not_for_us(log), 17);
        assert_eq!(super::last_not_for_us("stats: rx in=1 drops[]\n"), 0);
    }
}
