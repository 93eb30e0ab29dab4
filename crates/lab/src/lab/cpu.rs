//! The gateway's own CPU time, read from the kernel's accounting instead of a soaker.
//!
//! A SCHED_IDLE soaker measures a core's CPU as the share of its idle rate it lost; on a
//! machine shared with other jobs its baseline drifts, and it read more than its baseline
//! (so "0 ns per packet") whenever a compiler left the core. Here the gateway's cost is read
//! directly, in nanoseconds, for the same offered load:
//!
//! - quicknat's threads: the first field of `/proc/<pid>/task/*/schedstat` (time on CPU,
//!   ns, user and system), summed over every thread alive at both samples;
//! - the gateway core's interrupt work: `softirq` + `irq` of its line in `/proc/stat`
//!   (with `CONFIG_IRQ_TIME_ACCOUNTING` the kernel charges softirq time there, precisely,
//!   and not to whatever task it interrupted). That is where the kernel's NAT runs (RPS
//!   steers the gateway's receive work to its core), and the kernel half of quicknat's
//!   AF_PACKET receive path;
//! - the gateway core's `ksoftirqd/N` thread (its `schedstat`): when softirq work exceeds
//!   its budget, or the core is busy, the kernel defers it to that thread and charges it
//!   there, as the thread's system time, never to the softirq column. On a loaded machine
//!   most of the kernel NAT's work can run there (a CI run read 0 ns per packet for the
//!   kernel's arm without it).
//!
//! Both arms are charged the same way: quicknat = its threads + its core's softirq, the
//! kernel = its core's softirq. Must never signal, stop or otherwise touch the gateway.
//!
//! Shared by the attack lab (the gateway core only, [`CpuSample::take`]) and the NAT44
//! lab's floor arms ([`CpuSample::take_cores`], every core): with XDP attached to a veth,
//! the XDP program and the veth's NAPI run on the *sending* core, so a gateway whose work
//! runs partly there (AF_XDP's steering, an XDP forwarder) is only seen whole when every
//! core's softirq is read. On a kernel without `CONFIG_IRQ_TIME_ACCOUNTING` the softirq
//! column is sampled at each tick (in_serving_softirq), which is unbiased but coarse: a
//! few seconds at a few hundred kpps keep it within a few percent.

use std::collections::HashMap;

/// One sample of the gateway's CPU counters.
#[derive(Clone, Debug, Default)]
pub(crate) struct CpuSample {
    /// ns on CPU per quicknat thread id.
    threads: HashMap<u32, u64>,
    /// The gateway core's softirq + irq time, ns, including its `ksoftirqd`'s run time.
    core_irq_ns: u64,
    /// Of which the `ksoftirqd` threads' run time (ns).
    ksoftirqd_ns: u64,
}

/// Clock ticks per second of `/proc/stat` (USER_HZ: 100 on every Linux architecture the
/// lab runs on; the kernel ABI fixes it for x86).
const USER_HZ: u64 = 100;

impl CpuSample {
    /// Reads the counters now: `pid` quicknat's process (`None` for the kernel's NAT).
    pub(crate) fn take(pid: Option<u32>, core: usize) -> Self {
        Self::take_cores(pid, &[core])
    }

    /// Like [`CpuSample::take`], with the softirq + irq time (and `ksoftirqd`) of every core
    /// in `cores` summed.
    pub(crate) fn take_cores(pid: Option<u32>, cores: &[usize]) -> Self {
        let mut threads = HashMap::new();
        if let Some(pid) = pid {
            if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) {
                for e in dir.flatten() {
                    let Some(tid) = e.file_name().to_str().and_then(|s| s.parse().ok()) else {
                        continue;
                    };
                    if let Some(ns) = std::fs::read_to_string(e.path().join("schedstat"))
                        .ok()
                        .as_deref()
                        .and_then(schedstat_ns)
                    {
                        threads.insert(tid, ns);
                    }
                }
            }
        }
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let ksoftirqd_ns = cores.iter().map(|&c| ksoftirqd_ns(c).unwrap_or(0)).sum();
        let core_irq_ns = cores
            .iter()
            .map(|&core| core_irq_ticks(&stat, core).map_or(0, |t| t * (1_000_000_000 / USER_HZ)))
            .sum::<u64>()
            + ksoftirqd_ns;
        CpuSample {
            threads,
            core_irq_ns,
            ksoftirqd_ns,
        }
    }

    /// (quicknat threads' ns, core softirq+irq ns) spent between `self` and `later`.
    pub(crate) fn until(&self, later: &CpuSample) -> (u64, u64) {
        let threads = later
            .threads
            .iter()
            .filter_map(|(tid, ns)| Some(ns.saturating_sub(*self.threads.get(tid)?)))
            .sum();
        (threads, later.core_irq_ns.saturating_sub(self.core_irq_ns))
    }

    /// The `ksoftirqd` threads' share of [`CpuSample::until`]'s softirq time (ns). On a
    /// kernel with tick-based accounting a tick that lands in `ksoftirqd` is also charged to
    /// the softirq column, so that share may be counted twice: reported apart so a reader
    /// can tell.
    pub(crate) fn ksoftirqd_until(&self, later: &CpuSample) -> u64 {
        later.ksoftirqd_ns.saturating_sub(self.ksoftirqd_ns)
    }
}

/// The run time (ns) in a `schedstat` line: "RUN_NS WAIT_NS SLICES".
fn schedstat_ns(s: &str) -> Option<u64> {
    s.split_whitespace().next()?.parse().ok()
}

/// Run time (ns) of the `ksoftirqd/<core>` kernel thread, from its `schedstat`.
fn ksoftirqd_ns(core: usize) -> Option<u64> {
    let name = format!("ksoftirqd/{core}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        if comm.trim_end() != name {
            return None;
        }
        schedstat_ns(&std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?)
    })
}

/// irq + softirq ticks of `cpuN` in `/proc/stat` text.
fn core_irq_ticks(stat: &str, core: usize) -> Option<u64> {
    let name = format!("cpu{core}");
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))?;
    // cpuN user nice system idle iowait irq softirq steal ...
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    Some(f.get(5)? + f.get(6)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_schedstat_and_the_cores_irq_time() {
        assert_eq!(schedstat_ns("123456789 42 7\n"), Some(123_456_789));
        assert_eq!(schedstat_ns(""), None);
        let stat = "cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 1 2 3 4 5 60 70 8 0 0\ncpu1 1 2 3 4 5 6 700 8 0 0\nintr 1\n";
        assert_eq!(core_irq_ticks(stat, 0), Some(130));
        assert_eq!(core_irq_ticks(stat, 1), Some(706));
        assert_eq!(core_irq_ticks(stat, 2), None);
    }

    #[test]
    fn the_cores_ksoftirqd_is_found() {
        // Every CPU has one; its run time is readable (0 on an idle machine is fine).
        assert!(ksoftirqd_ns(0).is_some());
        assert!(ksoftirqd_ns(100_000).is_none());
    }

    #[test]
    fn own_threads_are_counted_and_threads_that_came_or_went_are_not() {
        let a = CpuSample {
            threads: HashMap::from([(1, 100), (2, 50)]),
            core_irq_ns: 1_000,
            ksoftirqd_ns: 100,
        };
        let b = CpuSample {
            threads: HashMap::from([(1, 400), (3, 999)]),
            core_irq_ns: 3_000,
            ksoftirqd_ns: 250,
        };
        assert_eq!(a.until(&b), (300, 2_000));
        assert_eq!(a.ksoftirqd_until(&b), 150);
    }

    #[test]
    fn this_process_is_seen_spending_cpu() {
        let me = std::process::id();
        let a = CpuSample::take(Some(me), 0);
        let t = std::time::Instant::now();
        let mut x = 1u64;
        while t.elapsed() < std::time::Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(3).rotate_left(5));
        }
        let (ns, _) = a.until(&CpuSample::take(Some(me), 0));
        assert!(ns > 0, "no CPU time seen for a spinning thread");
    }
}
