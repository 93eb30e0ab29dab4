//! The attack lab's report: raw figures per arm and round, and the table of medians.

use super::*;

/// One arm's measurements in one round.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ArmRound {
    /// SYN flood: legitimate connections (attempts, successes).
    pub legit: ConnectReport,
    /// iperf3 in the second before the flood, Gbit/s.
    pub tcp_before_gbps: f64,
    /// iperf3 during the flood, Gbit/s.
    pub tcp_during_gbps: f64,
    /// The flood generator's report.
    pub flood: FloodReport,
    /// Flood SYNs reaching the inside server per second.
    pub flood_reaching_pps: f64,
    /// Greedy host: the 50 others' connections.
    pub greedy_others: ConnectReport,
    /// The greedy generator's report.
    pub greedy: FloodReport,
    /// Kernel only: the same with `ct count over N` per inside host.
    pub greedy_others_ct_count: Option<ConnectReport>,
    /// Gateway-core CPU per forwarded packet, random tuples, ns.
    pub random_ns: f64,
    /// The same with crafted colliding tuples.
    pub crafted_ns: f64,
    /// Forwarded per second, random tuples.
    pub random_fwd_pps: f64,
    /// Forwarded per second, crafted tuples.
    pub crafted_fwd_pps: f64,
    /// Link flap.
    pub flap: Outage,
    /// SIGKILL + restart (quicknat only).
    pub restart: Option<Outage>,
    /// What a killed quicknat left in the gateway namespace, and whether it restarted.
    pub restart_note: String,
    /// quicknat's closing counter line per cell (flood, greedy, collisions).
    pub quicknat_stats: Vec<String>,
    /// The cell of each `quicknat_stats` line.
    pub quicknat_stats_cells: Vec<String>,
    /// Where the gateway's CPU went during the SYN flood (see [`FloodCpu`]).
    pub flood_cpu: FloodCpu,
}

/// The gateway during the SYN flood, from the flood's start to its end: its CPU (share of
/// one core) by where it ran, and the frames its outside link took.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FloodCpu {
    /// quicknat's threads (user and system time; 0 for the kernel's NAT), % of a core.
    pub threads_pct: f64,
    /// The kernel's work (the receive path up to the packet socket or XDP, its NAT,
    /// forwarding): the gateway core's busy time beyond the threads, plus the other cores'
    /// softirq ([`crate::topology::cpu::GatewaySample`]), % of one core.
    pub softirq_pct: f64,
    /// Frames the gateway's outside veth received per second (flood and legitimate).
    pub outside_rx_pps: f64,
    /// Frames the gateway sent on towards the inside per second (`g-in` tx).
    pub inside_tx_pps: f64,
}

/// One row of the report: a measure, its goal, a value per arm.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    /// What is measured.
    pub measure: String,
    /// The goal for this measure ("" when none).
    pub goal: String,
    /// Median per arm (column order of [`AttackReport::arms`]); `None`: not applicable or
    /// never (e.g. no traffic after a restart).
    pub values: Vec<Option<f64>>,
    /// The cells as printed.
    pub cells: Vec<String>,
}

/// The report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AttackReport {
    /// UTC date and kernel.
    pub when: String,
    /// SYN flood seconds.
    pub seconds: u64,
    /// Rounds.
    pub rounds: usize,
    /// Short form.
    pub short: bool,
    /// quicknat `max_sessions`.
    pub max_sessions: usize,
    /// The kernel's `nf_conntrack_max` seen in the gateway namespace, and whether the lab
    /// could set it there.
    pub kernel_conntrack_max: String,
    /// Colliding tuples, and seconds spent finding them.
    pub collisions: usize,
    /// Seconds the collision search took.
    pub collision_search_s: f64,
    /// Fixed rate of the collision cells.
    pub collision_pps: u64,
    /// `ct count over N` of the kernel's per-host-limited run.
    pub host_limit: u32,
    /// The SYN flood's fixed rate, packets per second (`None`: unpaced).
    pub flood_pps: Option<u64>,
    /// Column names: quicknat backends, then the kernel.
    pub arms: Vec<String>,
    /// The table.
    pub rows: Vec<Row>,
    /// Every round's raw figures per arm.
    pub raw: Vec<(String, Vec<ArmRound>)>,
}

/// Row labels, in print order (the e2e test checks each is printed).
pub const ROWS: &[&str] = &[
    "SYN flood: legitimate connections succeeded (%)",
    "SYN flood: legitimate connections tried",
    "SYN flood: established TCP, second before (Gbit/s)",
    "SYN flood: established TCP during flood (Gbit/s)",
    "SYN flood: offered (kpps)",
    "SYN flood: reaching the inside server (kpps)",
    "greedy host: other hosts served (of 50)",
    "greedy host: ... kernel with ct count per host",
    "greedy host: flows offered (kpps)",
    "collisions: CPU/packet, random tuples (ns)",
    "collisions: CPU/packet, crafted tuples (ns)",
    "collisions: crafted / random cost (x)",
    "collisions: forwarded, random (kpps)",
    "collisions: forwarded, crafted (kpps)",
    "link flap: traffic again after link up (ms)",
    "link flap: probes lost (1 kHz)",
    "SIGKILL+restart: traffic again after kill (ms)",
    "SIGKILL+restart: probes lost (1 kHz)",
];

impl std::fmt::Display for AttackReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "quicknat attack lab — {} — median of {} alternating round(s), SYN flood {} s {}{}",
            self.when,
            self.rounds,
            self.seconds,
            match self.flood_pps {
                Some(r) => format!("paced at {r} pps"),
                None => "unpaced (as fast as the generator goes)".to_string(),
            },
            if self.short { " (short form)" } else { "" }
        )?;
        writeln!(
            f,
            "tables: quicknat max_sessions {}, kernel nf_conntrack_max {}; {} colliding tuples \
             (found in {:.1} s) vs as many random ones at {} pps",
            self.max_sessions,
            self.kernel_conntrack_max,
            self.collisions,
            self.collision_search_s,
            self.collision_pps
        )?;
        write!(f, "{:<50} {:>9}", "measure", "goal")?;
        for a in &self.arms {
            write!(f, " {a:>18}")?;
        }
        writeln!(f)?;
        for r in &self.rows {
            write!(f, "{:<50} {:>9}", r.measure, r.goal)?;
            for c in &r.cells {
                write!(f, " {c:>18}")?;
            }
            writeln!(f)?;
        }
        for (arm, rounds) in &self.raw {
            for (i, r) in rounds.iter().enumerate() {
                if !r.restart_note.is_empty() {
                    writeln!(f, "{arm}, round {}: {}", i + 1, r.restart_note)?;
                }
                let counters: Vec<String> = r
                    .quicknat_stats
                    .iter()
                    .zip(&r.quicknat_stats_cells)
                    .map(|(line, cell)| format!("{cell}: {}", counters(line)))
                    .collect();
                let c = &r.flood_cpu;
                if c.outside_rx_pps > 0.0 {
                    writeln!(
                        f,
                        "{arm}, round {}: SYN flood: gateway CPU {:.0}% of a core in its \
                         threads + {:.0}% in the kernel; outside link took {:.1} kpps, \
                         {:.1} kpps went on to the inside",
                        i + 1,
                        c.threads_pct,
                        c.softirq_pct,
                        c.outside_rx_pps / 1e3,
                        c.inside_tx_pps / 1e3
                    )?;
                }
                if !counters.is_empty() {
                    writeln!(f, "{arm}, round {}: {}", i + 1, counters.join("; "))?;
                }
                if self.flood_pps.is_some() {
                    // Why a paced flood fell short of its rate: the link refused frames, or
                    // the generator was descheduled and its schedule slipped.
                    writeln!(
                        f,
                        "{arm}, round {}: SYN flood generator: {} sent, {} refused by the link, \
                         {} skipped behind schedule",
                        i + 1,
                        r.flood.sent,
                        r.flood.dropped,
                        r.flood.skipped
                    )?;
                }
            }
        }
        Ok(())
    }
}

/// `sessions=N drops[...]` out of quicknat's closing counter line.
fn counters(line: &str) -> String {
    let sessions = line.split_whitespace().find(|w| w.starts_with("sessions="));
    let drops = line.find("drops[").map(|i| &line[i..]);
    [sessions, drops]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ")
}

fn pct(c: &ConnectReport) -> f64 {
    if c.attempts == 0 {
        0.0
    } else {
        100.0 * c.ok as f64 / c.attempts as f64
    }
}

/// The median of optional values (`None` counts as never, i.e. +infinity); `None` if all
/// are absent or the median is never.
fn med_opt(v: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = v.map(|x| x.unwrap_or(f64::INFINITY)).collect();
    if v.is_empty() {
        return None;
    }
    let m = crate::topology::median(v);
    m.is_finite().then_some(m)
}

/// Builds the report's rows from every arm's rounds (`arms`: quicknat first, kernel last).
pub(super) fn rows(arms: &[(String, Vec<ArmRound>)], o: &AttackOptions) -> Vec<Row> {
    type Get = Box<dyn Fn(&[ArmRound], bool) -> Option<f64>>;
    let m =
        |f: fn(&ArmRound) -> f64| -> Get { Box::new(move |rs: &[ArmRound], _| Some(med(rs, f))) };
    let limit = o.host_limit;
    let spec: Vec<(&str, String, Get, usize)> = vec![
        (ROWS[0], ">= 99".into(), m(|r| pct(&r.legit)), 1),
        (ROWS[1], String::new(), m(|r| r.legit.attempts as f64), 0),
        (ROWS[2], String::new(), m(|r| r.tcp_before_gbps), 2),
        (ROWS[3], String::new(), m(|r| r.tcp_during_gbps), 2),
        (ROWS[4], String::new(), m(|r| r.flood.pps / 1e3), 1),
        (ROWS[5], String::new(), m(|r| r.flood_reaching_pps / 1e3), 1),
        (ROWS[6], "50".into(), m(|r| r.greedy_others.ok as f64), 0),
        (
            ROWS[7],
            if limit > 0 {
                format!("N={limit}")
            } else {
                String::new()
            },
            Box::new(|rs: &[ArmRound], _| {
                med_opt(
                    rs.iter()
                        .map(|r| r.greedy_others_ct_count.map(|c| c.ok as f64)),
                )
            }),
            0,
        ),
        (ROWS[8], String::new(), m(|r| r.greedy.pps / 1e3), 1),
        (ROWS[9], String::new(), m(|r| r.random_ns), 0),
        (ROWS[10], String::new(), m(|r| r.crafted_ns), 0),
        (
            ROWS[11],
            "<= 1.2".into(),
            m(|r| {
                if r.random_ns > 0.0 {
                    r.crafted_ns / r.random_ns
                } else {
                    0.0
                }
            }),
            2,
        ),
        (ROWS[12], String::new(), m(|r| r.random_fwd_pps / 1e3), 1),
        (ROWS[13], String::new(), m(|r| r.crafted_fwd_pps / 1e3), 1),
        (
            ROWS[14],
            String::new(),
            Box::new(|rs: &[ArmRound], _| med_opt(rs.iter().map(|r| r.flap.recovered_after_ms))),
            0,
        ),
        (ROWS[15], String::new(), m(|r| r.flap.lost as f64), 0),
        (
            ROWS[16],
            "<= 2000".into(),
            Box::new(|rs: &[ArmRound], _| {
                med_opt(
                    rs.iter()
                        .map(|r| r.restart.and_then(|o| o.recovered_after_ms)),
                )
            }),
            0,
        ),
        (
            ROWS[17],
            String::new(),
            Box::new(|rs: &[ArmRound], _| {
                med_opt(rs.iter().map(|r| r.restart.map(|o| o.lost as f64)))
            }),
            0,
        ),
    ];
    spec.into_iter()
        .map(|(measure, goal, get, digits)| {
            let mut values = Vec::new();
            let mut cells = Vec::new();
            for (name, rs) in arms {
                let kernel = name.starts_with("kernel");
                // Rows that do not apply to an arm: the ct count run is the kernel's, the
                // restart quicknat's.
                let applies = match measure {
                    m if m == ROWS[7] => {
                        kernel && rs.iter().any(|r| r.greedy_others_ct_count.is_some())
                    }
                    m if m == ROWS[16] || m == ROWS[17] => !kernel,
                    _ => true,
                };
                let v = if applies { get(rs, kernel) } else { None };
                values.push(v);
                cells.push(match (applies, v) {
                    (false, _) => "-".to_string(),
                    (true, Some(x)) => format!("{x:.digits$}"),
                    (true, None) => "never".to_string(),
                });
            }
            Row {
                measure: measure.to_string(),
                goal,
                values,
                cells,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> AttackOptions {
        AttackOptions {
            seconds: 2,
            rounds: 1,
            backends: vec!["af_packet".into()],
            quicknat: PathBuf::from("/bin/true"),
            max_sessions: None,
            collisions: 16,
            collision_pps: 1000,
            host_limit: 1000,
            flood_pps: None,
            short: false,
            cells: Vec::new(),
        }
    }

    #[test]
    fn every_row_is_printed_with_a_cell_per_arm() {
        let q = ArmRound {
            legit: ConnectReport { attempts: 4, ok: 3 },
            // The rate the paced generator achieved is what the offered row shows.
            flood: FloodReport {
                sent: 159_000,
                dropped: 0,
                skipped: 0,
                seconds: 2.0,
                pps: 79_500.0,
            },
            random_ns: 1000.0,
            crafted_ns: 5000.0,
            flap: Outage {
                recovered_after_ms: Some(12.0),
                ..Outage::default()
            },
            // Killed, and nothing came through afterwards.
            restart: Some(Outage::default()),
            ..ArmRound::default()
        };
        let k = ArmRound {
            greedy_others_ct_count: Some(ConnectReport {
                attempts: 50,
                ok: 50,
            }),
            ..ArmRound::default()
        };
        let arms = vec![
            ("quicknat af_packet".to_string(), vec![q]),
            ("kernel NAT".to_string(), vec![k]),
        ];
        let o = opts();
        let rows = rows(&arms, &o);
        assert_eq!(rows.len(), ROWS.len());
        let r = AttackReport {
            when: "now".into(),
            seconds: 2,
            rounds: 1,
            short: false,
            max_sessions: 1024,
            kernel_conntrack_max: "1024".into(),
            collisions: 16,
            collision_search_s: 0.1,
            collision_pps: 1000,
            host_limit: 1000,
            flood_pps: Some(80_000),
            arms: arms.iter().map(|(n, _)| n.clone()).collect(),
            rows,
            raw: arms,
        };
        let text = r.to_string();
        let header = text.lines().next().unwrap();
        assert!(
            header.contains("SYN flood 2 s paced at 80000 pps"),
            "{header}"
        );
        assert!(
            text.contains(
                "quicknat af_packet, round 1: SYN flood generator: 159000 sent, 0 refused by \
                 the link, 0 skipped behind schedule"
            ),
            "{text}"
        );
        let unpaced = AttackReport {
            flood_pps: None,
            ..r.clone()
        }
        .to_string();
        assert!(
            unpaced
                .lines()
                .next()
                .unwrap()
                .contains("SYN flood 2 s unpaced (as fast as the generator goes)"),
            "{unpaced}"
        );
        assert!(!unpaced.contains("SYN flood generator:"), "{unpaced}");
        for label in ROWS {
            let line = text
                .lines()
                .find(|l| l.starts_with(label))
                .unwrap_or_else(|| panic!("row {label:?} missing:\n{text}"));
            assert!(
                line[label.len()..].split_whitespace().count() >= 2,
                "{line}"
            );
        }
        let cells = |label: &str| {
            r.rows
                .iter()
                .find(|row| row.measure == label)
                .map(|row| row.cells.clone())
                .unwrap()
        };
        assert_eq!(cells(ROWS[0]), ["75.0", "0.0"]);
        assert_eq!(cells(ROWS[4]), ["79.5", "0.0"]);
        assert_eq!(cells(ROWS[7]), ["-", "50"], "ct count: the kernel's only");
        assert_eq!(cells(ROWS[11]), ["5.00", "0.00"]);
        assert_eq!(cells(ROWS[14]), ["12", "never"]);
        assert_eq!(cells(ROWS[16]), ["never", "-"], "restart: quicknat's only");
        assert_eq!(r.rows[16].values, [None, None]);
    }

    #[test]
    fn median_of_optionals_treats_absent_as_never() {
        assert_eq!(med_opt([Some(1.0), Some(3.0), None].into_iter()), Some(3.0));
        assert_eq!(med_opt([Some(1.0), None, None].into_iter()), None);
        assert_eq!(med_opt(std::iter::empty()), None);
    }
}
