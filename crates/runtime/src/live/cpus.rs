//! Which CPUs the gateway's threads run on (`[gateway] cpus` and `reaper_cpu`), and
//! whether a worker shares its CPU with an interface's interrupts: a worker polling on
//! the core that also takes the NIC's receive interrupts loses the time the softirqs
//! take, which is why operators spread IRQ affinity and keep the forwarding cores apart.
//!
//! Interrupts are found as the kernel lists them: the interface's PCI device's MSI
//! vectors (`/sys/class/net/IF/device/msi_irqs`, or its parent's for a virtio device) or
//! its legacy line (`device/irq`), each IRQ's CPUs from `/proc/irq/N/smp_affinity_list`.
//! A virtual interface (veth) has no device and so no interrupts.

use std::fmt::Write;
use std::path::Path;

use super::GatewayConfig;

/// The CPUs this process may run on (its affinity mask), in order; empty if unknown.
pub fn allowed() -> Vec<usize> {
    core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect()
}

/// Parses a Linux CPU list (`"0-3,8,10-11"`, as `taskset -c` and `/proc/irq/N/
/// smp_affinity_list` write them): the CPUs in the order written, each once.
pub fn parse_cpulist(s: &str) -> Result<Vec<usize>, String> {
    let mut out: Vec<usize> = Vec::new();
    let cpu = |t: &str| {
        t.trim()
            .parse::<usize>()
            .ok()
            .filter(|&c| c < 4096)
            .ok_or_else(|| format!("{t:?} is not a CPU number (0-4095)"))
    };
    for part in s.split(',') {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (cpu(a)?, cpu(b)?),
            None => {
                let c = cpu(part)?;
                (c, c)
            }
        };
        if first > last {
            return Err(format!("{part:?}: a range goes upwards (\"2-5\")"));
        }
        for c in first..=last {
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    Ok(out)
}

/// `cpus` as a CPU list, ranges folded: `[0, 1, 2, 5]` is `"0-2,5"`.
pub fn format_cpulist(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        let _ = if i == j {
            write!(out, "{}", sorted[i])
        } else {
            write!(out, "{}-{}", sorted[i], sorted[j])
        };
        i = j + 1;
    }
    out
}

/// Where the threads run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuPlan {
    /// Worker `i`'s CPU (`None`: not pinned, the CPUs being unknown).
    pub workers: Vec<Option<usize>>,
    /// The reaper's CPU, if pinned.
    pub reaper: Option<usize>,
    /// Whether the workers' CPUs were configured (`cpus`) or the first allowed ones.
    pub configured: bool,
}

impl CpuPlan {
    /// Worker `i` on the `i`-th CPU of `gw.cpus`, or else of `allowed` (the process's
    /// affinity), wrapping when there are more workers than CPUs.
    pub fn new(gw: &GatewayConfig, allowed: &[usize]) -> CpuPlan {
        let list = gw.cpus.as_deref().unwrap_or(allowed);
        CpuPlan {
            workers: (0..gw.workers)
                .map(|i| (!list.is_empty()).then(|| list[i % list.len()]))
                .collect(),
            reaper: gw.reaper_cpu,
            configured: gw.cpus.is_some(),
        }
    }

    /// One line for the log and `status`: `workers on CPUs 0-1 (gateway.cpus); reaper on
    /// CPU 0`.
    pub fn describe(&self) -> String {
        let cpus: Vec<usize> = self.workers.iter().flatten().copied().collect();
        let mut s = if cpus.is_empty() {
            "workers not pinned (the CPUs quicknat may use are unknown)".to_owned()
        } else {
            format!(
                "workers on CPU{} {} ({})",
                if cpus.len() == 1 { "" } else { "s" },
                cpus.iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                if self.configured {
                    "gateway.cpus"
                } else {
                    "the first CPUs quicknat may use"
                }
            )
        };
        match self.reaper {
            Some(c) => {
                let _ = write!(s, "; reaper on CPU {c}");
            }
            None => s.push_str("; reaper not pinned"),
        }
        s
    }
}

/// An interface's interrupts: each IRQ number with the CPUs it may run on.
pub type Irqs = Vec<(u32, Vec<usize>)>;

/// The interrupts of interface `iface` and the CPUs each may run on, read from `sys`
/// (`/sys`) and `proc` (`/proc`); empty for a virtual interface.
pub fn interface_irqs(sys: &Path, proc: &Path, iface: &str) -> Irqs {
    let dev = sys.join("class/net").join(iface).join("device");
    let numbers = |dir: &Path| -> Vec<u32> {
        let mut v: Vec<u32> = std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        v.sort_unstable();
        v
    };
    // MSI-X vectors of the device, or of its parent (virtio-net sits on a PCI device).
    let mut irqs = numbers(&dev.join("msi_irqs"));
    if irqs.is_empty() {
        irqs = numbers(&dev.join("../msi_irqs"));
    }
    if irqs.is_empty() {
        let legacy = std::fs::read_to_string(dev.join("irq")).ok();
        irqs.extend(
            legacy
                .and_then(|t| t.trim().parse::<u32>().ok())
                .filter(|&n| n > 0),
        );
    }
    irqs.into_iter()
        .filter_map(|n| {
            let t = std::fs::read_to_string(proc.join(format!("irq/{n}/smp_affinity_list")));
            Some((n, parse_cpulist(t.ok()?.trim()).ok()?))
        })
        .collect()
}

/// A warning for each worker whose CPU takes interrupts of the interfaces (`irqs`: per
/// interface name, its IRQs and their CPUs).
pub fn irq_sharing(plan: &CpuPlan, irqs: &[(&str, Irqs)]) -> Vec<String> {
    let mut out = Vec::new();
    for (w, cpu) in plan.workers.iter().enumerate() {
        let Some(cpu) = cpu else { continue };
        for (iface, list) in irqs {
            let shared: Vec<String> = list
                .iter()
                .filter(|(_, cpus)| cpus.contains(cpu))
                .map(|(n, _)| n.to_string())
                .collect();
            if !shared.is_empty() {
                out.push(format!(
                    "worker {w} on CPU {cpu} shares it with {iface}'s interrupts (IRQ {}): \
                     give the workers other cores ([gateway] cpus) or move the interrupts \
                     (/proc/irq/N/smp_affinity_list)",
                    shared.join(", ")
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_and_print_as_linux_writes_them() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11"),
            Ok(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpulist("5,1,5"), Ok(vec![5, 1]));
        assert_eq!(parse_cpulist(" 2 "), Ok(vec![2]));
        assert!(parse_cpulist("3-1").unwrap_err().contains("upwards"));
        assert!(parse_cpulist("x").unwrap_err().contains("not a CPU"));
        assert!(parse_cpulist("").is_err());
        assert!(parse_cpulist("0-99999").is_err());
        assert_eq!(format_cpulist(&[5, 0, 1, 2, 7, 8]), "0-2,5,7-8");
        assert_eq!(format_cpulist(&[3]), "3");
        for s in ["0", "0-3", "0-2,5,7-8"] {
            assert_eq!(format_cpulist(&parse_cpulist(s).unwrap()), s);
        }
    }

    proptest::proptest! {
        /// Any text: a list or an error, never a panic; a list printed and read again is
        /// the same set.
        #[test]
        fn any_cpu_list_text_parses_or_says_why(s in "[0-9,\\- ]{0,24}") {
            if let Ok(l) = parse_cpulist(&s) {
                let mut a = l.clone();
                a.sort_unstable();
                let mut b = parse_cpulist(&format_cpulist(&l)).unwrap();
                b.sort_unstable();
                proptest::prop_assert_eq!(a, b);
            }
        }
    }

    #[test]
    fn workers_take_the_configured_cpus_in_order_and_wrap() {
        let mut gw = GatewayConfig::new("a".into(), "b".into());
        gw.workers = 3;
        let p = CpuPlan::new(&gw, &[0, 1]);
        assert_eq!(p.workers, [Some(0), Some(1), Some(0)]);
        assert_eq!(
            p.describe(),
            "workers on CPUs 0,1,0 (the first CPUs quicknat may use); reaper not pinned"
        );
        gw.cpus = Some(vec![6, 4]);
        gw.reaper_cpu = Some(2);
        let p = CpuPlan::new(&gw, &[0, 1]);
        assert_eq!(p.workers, [Some(6), Some(4), Some(6)]);
        assert!(p.describe().ends_with("(gateway.cpus); reaper on CPU 2"));
        assert_eq!(
            CpuPlan::new(&GatewayConfig::new("a".into(), "b".into()), &[]).workers,
            [None]
        );
    }

    /// A sysfs and procfs laid out as a virtio-net guest's (this machine's eth0: the PCI
    /// device holds the MSI-X vectors, the net device sits on virtio2 under it).
    #[test]
    fn a_nics_interrupts_are_found_and_a_worker_on_their_cpu_is_warned_about() {
        let root = std::env::temp_dir().join(format!("qn-cpus-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let (sys, proc) = (root.join("sys"), root.join("proc"));
        let pci = sys.join("devices/pci0000:00/0000:00:03.0");
        std::fs::create_dir_all(pci.join("virtio2")).unwrap();
        std::fs::create_dir_all(pci.join("msi_irqs")).unwrap();
        for (n, cpus) in [(37, "0-1"), (38, "1"), (39, "0")] {
            std::fs::write(pci.join("msi_irqs").join(n.to_string()), "msix").unwrap();
            std::fs::create_dir_all(proc.join(format!("irq/{n}"))).unwrap();
            std::fs::write(
                proc.join(format!("irq/{n}/smp_affinity_list")),
                format!("{cpus}\n"),
            )
            .unwrap();
        }
        std::fs::create_dir_all(sys.join("class/net/eth0")).unwrap();
        std::os::unix::fs::symlink(pci.join("virtio2"), sys.join("class/net/eth0/device")).unwrap();
        std::fs::create_dir_all(sys.join("class/net/veth0")).unwrap();
        let eth0 = interface_irqs(&sys, &proc, "eth0");
        assert_eq!(eth0, [(37, vec![0, 1]), (38, vec![1]), (39, vec![0])]);
        assert!(interface_irqs(&sys, &proc, "veth0").is_empty(), "no device");
        let mut gw = GatewayConfig::new("eth0".into(), "veth0".into());
        gw.workers = 1;
        gw.cpus = Some(vec![1]);
        let w = irq_sharing(
            &CpuPlan::new(&gw, &[0, 1]),
            &[("eth0", eth0.clone()), ("veth0", vec![])],
        );
        assert_eq!(w.len(), 1);
        assert!(
            w[0].starts_with("worker 0 on CPU 1 shares it with eth0's interrupts (IRQ 37, 38)"),
            "{}",
            w[0]
        );
        gw.cpus = Some(vec![2]);
        assert!(irq_sharing(&CpuPlan::new(&gw, &[0, 1, 2]), &[("eth0", eth0)]).is_empty());
        let _ = std::fs::remove_dir_all(&root);
    }
}
