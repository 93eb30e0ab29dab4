//! The gateway's own CPU time, read from the kernel's accounting instead of a soaker.
//!
//! A SCHED_IDLE soaker measures a core's CPU as the share of its idle rate it lost; on a
//! machine shared with other jobs its baseline drifts, and it reads more than its baseline
//! (so "0 ns per packet") whenever another job leaves the core. Here the gateway's cost is read
//! directly, in nanoseconds, for the same offered load:
//!
//! - quicknat's threads: the first field of `/proc/<pid>/task/*/schedstat` (time on CPU,
//!   ns, user and system), summed over every thread alive at both samples;
//! - the cores' interrupt work: `softirq` + `irq` of their lines in `/proc/stat`. That is
//!   where the kernel's NAT runs, and the kernel half of quicknat's receive path. How the
//!   kernel fills that column depends on its build:
//!   - with `CONFIG_IRQ_TIME_ACCOUNTING` it is charged precisely, but softirq work deferred
//!     to a core's `ksoftirqd/N` thread is charged to that thread (its `schedstat`) and never
//!     to the column, so the threads' run time is added;
//!   - without it (tick accounting, as on the lab's VMs: `CONFIG_TICK_CPU_ACCOUNTING`,
//!     250 Hz), each tick is charged to the column when it lands in softirq, in `ksoftirqd`
//!     too: the column already holds `ksoftirqd`'s share, sampled, and adding the thread's
//!     run time would count it twice. The column is coarse (4 ms ticks), and it is only
//!     unbiased on a core that never idles. With NO_HZ idle, a core that wakes for an
//!     interrupt, runs its softirq and sleeps again has no tick running, and that work is
//!     never sampled. The NAT44 lab therefore reads its gateway core with [`CoreBusy`].
//!
//!   Which one applies is read once from the kernel's config (`/proc/config.gz`, else
//!   `/boot/config-$(uname -r)`); when neither says, tick accounting is assumed.
//!
//! Both arms are charged the same way: quicknat = its threads + the cores' softirq, the
//! kernel = the cores' softirq. Must never signal, stop or otherwise touch the gateway.
//!
//! Every core is read ([`CpuSample::take_cores`] with [`super::floor::all_cores`]): with
//! XDP attached to a veth, or veth NAPI, the receive work runs on the *sending* core, and RPS
//! does not always move it to the gateway's, so reading one core alone can show 0 ns per
//! packet for the kernel's arm. Other jobs' softirq adds to every arm alike (the labs run
//! nothing else meanwhile; the NAT44 lab also subtracts an idle second measured before).

use std::collections::HashMap;

/// One sample of the gateway's CPU counters.
#[derive(Clone, Debug, Default)]
pub(crate) struct CpuSample {
    /// ns on CPU per quicknat thread id.
    threads: HashMap<u32, u64>,
    /// The cores' softirq + irq time, ns (with `ksoftirqd`'s run time where the kernel
    /// charges it apart: [`irq_time_accounting`]).
    core_irq_ns: u64,
    /// The `ksoftirqd` threads' run time (ns), added to `core_irq_ns` or not.
    ksoftirqd_ns: u64,
}

/// Clock ticks per second of `/proc/stat` (USER_HZ: 100 on every Linux architecture the
/// lab runs on; the kernel ABI fixes it for x86).
const USER_HZ: u64 = 100;

impl CpuSample {
    /// Reads the counters now: `pid` quicknat's process (`None` for the kernel's NAT), the
    /// softirq + irq time of every core in `cores` summed.
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
            + if irq_time_accounting() {
                ksoftirqd_ns
            } else {
                0
            };
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

    /// The `ksoftirqd` threads' run time between `self` and `later` (ns): with
    /// [`irq_time_accounting`] part of [`CpuSample::until`]'s softirq time, without it
    /// already sampled in the column; reported apart so a reader can tell where the
    /// kernel's work ran.
    pub(crate) fn ksoftirqd_until(&self, later: &CpuSample) -> u64 {
        later.ksoftirqd_ns.saturating_sub(self.ksoftirqd_ns)
    }
}

/// One core's time not spent working, read from `/proc/stat`: a precise measure where the
/// softirq column is not.
///
/// Under tick accounting the softirq column only counts the ticks that land in softirq, and
/// with `NO_HZ` idle (the lab's VMs: `CONFIG_NO_HZ_IDLE`) a core that wakes from idle for an
/// interrupt, runs its softirq on the way out and goes back to sleep has no tick running:
/// that work is never sampled, so lightly loaded arms look far cheaper in the softirq
/// column than their busy time says.
///
/// The idle column does not have this problem. With `NO_HZ` it is `get_cpu_idle_time_us`,
/// measured from clock reads at idle entry and exit, and an interrupt taken while idle
/// stops it. So `elapsed - (idle + iowait + steal)` is the core's busy time, with the
/// column's 10 ms unit as its only rounding (0.3% of a 3 s cell).
///
/// It is charged to the gateway only where all of the gateway's work runs on its own core:
/// RPS steers the kernel's receive work there and quicknat is pinned there. An XDP program
/// on a veth runs on the sending core, which is the generator's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CoreBusy {
    at: std::time::Instant,
    not_busy_ns: u64,
}

impl CoreBusy {
    /// Reads `core`'s idle, iowait and steal time now.
    pub(crate) fn take(core: usize) -> Self {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        CoreBusy {
            at: std::time::Instant::now(),
            not_busy_ns: core_not_busy_ticks(&stat, core).unwrap_or(0) * (1_000_000_000 / USER_HZ),
        }
    }

    /// The core's busy time (ns) between `self` and `later`.
    pub(crate) fn busy_until(&self, later: &CoreBusy) -> f64 {
        let wall = later.at.duration_since(self.at).as_nanos() as f64;
        (wall - later.not_busy_ns.saturating_sub(self.not_busy_ns) as f64).max(0.0)
    }
}

/// The gateway's CPU as the labs charge it: [`super::GW_CORE`]'s busy time ([`CoreBusy`]),
/// plus every other core's softirq time. The other cores carry the generator, which never
/// lets them idle, so their tick runs and the softirq column samples them without bias.
/// That is where an XDP program on a veth runs, on the sending core. quicknat and the
/// forwarders are pinned to the gateway core and RPS steers the kernel's receive work
/// there; their threads' run time is reported as part of the core's.
#[derive(Clone, Debug)]
pub(crate) struct GatewaySample {
    core: CoreBusy,
    /// The other cores' softirq (and, for `pid`, the threads and every `ksoftirqd`).
    others: CpuSample,
    all: CpuSample,
    ipis: u64,
}

/// What the gateway spent between two [`GatewaySample`]s (ns).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct GatewaySpent {
    /// The gateway core's busy time.
    pub(crate) core: f64,
    /// The other cores' softirq time.
    pub(crate) others: f64,
    /// Of `core`, the gateway process's threads.
    pub(crate) threads: f64,
    /// Every core's `ksoftirqd` run time (where the kernel's work ran, for the reader).
    pub(crate) ksoftirqd: f64,
    /// Function-call IPIs the gateway core took ([`function_call_ipis`]).
    pub(crate) ipis: f64,
}

impl GatewaySpent {
    /// The gateway's CPU: its core's busy time + the other cores' softirq.
    pub(crate) fn total(&self) -> f64 {
        self.core + self.others
    }

    /// `self` over `secs`, less what `idle` (other jobs, no lab traffic) spent over
    /// `idle_secs`, scaled to `secs`.
    pub(crate) fn less_idle(&self, secs: f64, idle: &GatewaySpent, idle_secs: f64) -> Self {
        let k = secs / idle_secs.max(1e-3);
        let core = (self.core - idle.core * k).max(0.0);
        GatewaySpent {
            core,
            others: (self.others - idle.others * k).max(0.0),
            threads: self.threads.min(core),
            ksoftirqd: self.ksoftirqd,
            ipis: self.ipis,
        }
    }
}

impl GatewaySample {
    /// Reads the counters now; `pid`: the gateway's process (`None` for the kernel's NAT).
    pub(crate) fn take(pid: Option<u32>) -> Self {
        let cores = super::floor::all_cores();
        let others: Vec<usize> = cores
            .iter()
            .copied()
            .filter(|&c| c != super::GW_CORE)
            .collect();
        GatewaySample {
            core: CoreBusy::take(super::GW_CORE),
            others: CpuSample::take_cores(None, &others),
            all: CpuSample::take_cores(pid, &cores),
            ipis: function_call_ipis(super::GW_CORE).unwrap_or(0),
        }
    }

    /// What the gateway spent between `self` and `later`. The threads are pinned to the
    /// gateway core, so their time is part of its busy time (and never more than it).
    pub(crate) fn until(&self, later: &GatewaySample) -> GatewaySpent {
        let core = self.core.busy_until(&later.core);
        GatewaySpent {
            core,
            others: self.others.until(&later.others).1 as f64,
            threads: (self.all.until(&later.all).0 as f64).min(core),
            ksoftirqd: self.all.ksoftirqd_until(&later.all) as f64,
            ipis: later.ipis.saturating_sub(self.ipis) as f64,
        }
    }
}

/// The function-call IPIs `core` has taken (`/proc/interrupts`, "CAL"): how RPS wakes the
/// core it steers packets to, once per backlog run. In a VM each one costs its sender a VM
/// exit (the x2APIC write), charged there as softirq.
pub(crate) fn function_call_ipis(core: usize) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/interrupts").ok()?;
    ipis_of(&text, core)
}

fn ipis_of(text: &str, core: usize) -> Option<u64> {
    let line = text.lines().find(|l| l.trim_start().starts_with("CAL:"))?;
    line.split_whitespace().nth(1 + core)?.parse().ok()
}

/// Whether the kernel charges irq/softirq time precisely (`CONFIG_IRQ_TIME_ACCOUNTING=y`),
/// read once from its config; `false` (tick accounting) when the config is not readable.
pub(crate) fn irq_time_accounting() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        let gz = std::process::Command::new("zcat")
            .arg("/proc/config.gz")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        let text = gz.or_else(|| {
            let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
            std::fs::read_to_string(format!("/boot/config-{}", release.trim())).ok()
        });
        text.is_some_and(|t| config_has_irq_time_accounting(&t))
    })
}

fn config_has_irq_time_accounting(config: &str) -> bool {
    config
        .lines()
        .any(|l| l.trim() == "CONFIG_IRQ_TIME_ACCOUNTING=y")
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

/// The fields of `cpuN`'s line in `/proc/stat` text: user nice system idle iowait irq
/// softirq steal ... (ticks).
fn core_fields(stat: &str, core: usize) -> Option<Vec<u64>> {
    let name = format!("cpu{core}");
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))?;
    Some(
        line.split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap_or(0))
            .collect(),
    )
}

/// irq + softirq ticks of `cpuN` in `/proc/stat` text.
fn core_irq_ticks(stat: &str, core: usize) -> Option<u64> {
    let f = core_fields(stat, core)?;
    Some(f.get(5)? + f.get(6)?)
}

/// idle + iowait + steal ticks of `cpuN` in `/proc/stat` text: its time not working.
fn core_not_busy_ticks(stat: &str, core: usize) -> Option<u64> {
    let f = core_fields(stat, core)?;
    Some(f.get(3)? + f.get(4)? + f.get(7)?)
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
        assert_eq!(core_not_busy_ticks(stat, 0), Some(4 + 5 + 8));
        assert_eq!(core_not_busy_ticks(stat, 2), None);
        assert_eq!(core_not_busy_ticks("cpu0 1 2 3 4\n", 0), None);
    }

    #[test]
    fn a_spinning_thread_reads_busy() {
        // 300 ms of spinning reads as busy on the cores, wherever the scheduler put the
        // thread: other jobs only add to it, and steal time (a VM's host) can take from it.
        let cores = crate::topology::floor::all_cores();
        let a: Vec<CoreBusy> = cores.iter().map(|&c| CoreBusy::take(c)).collect();
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(300) {
            std::hint::spin_loop();
        }
        let busy: f64 = cores
            .iter()
            .zip(&a)
            .map(|(&c, a)| a.busy_until(&CoreBusy::take(c)))
            .sum();
        assert!(busy > 150e6, "{busy} ns busy over 300 ms of spinning");
    }

    #[test]
    fn reads_the_function_call_ipis() {
        let text = "           CPU0       CPU1\n  0:  1 2 IO-APIC timer\nRES:  10 20 Rescheduling interrupts\nCAL:   21151387   61947130   Function call interrupts\n";
        assert_eq!(ipis_of(text, 0), Some(21_151_387));
        assert_eq!(ipis_of(text, 1), Some(61_947_130));
        assert_eq!(ipis_of(text, 2), None);
        assert!(function_call_ipis(0).is_some());
    }

    #[test]
    fn reads_irq_time_accounting_from_the_config() {
        assert!(config_has_irq_time_accounting(
            "# x\nCONFIG_IRQ_TIME_ACCOUNTING=y\n"
        ));
        assert!(!config_has_irq_time_accounting(
            "# CONFIG_IRQ_TIME_ACCOUNTING is not set\n"
        ));
        let _ = irq_time_accounting(); // never fails, whatever the machine has
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
        let a = CpuSample::take_cores(Some(me), &[0]);
        let t = std::time::Instant::now();
        let mut x = 1u64;
        while t.elapsed() < std::time::Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(3).rotate_left(5));
        }
        let (ns, _) = a.until(&CpuSample::take_cores(Some(me), &[0]));
        assert!(ns > 0, "no CPU time seen for a spinning thread");
    }
}
