//! `[gateway] cpus` and `reaper_cpu`: the CPUs the workers and the reaper run on, read
//! and held against the CPUs the machine lets quicknat run on.

use runtime::live::cpus::{format_cpulist, parse_cpulist};
use toml::Spanned;

use super::raw::RawGateway;
use super::{ConfigFileError, Source};

/// A set of CPUs (0-1023), small enough to keep [`super::Machine`] `Copy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuMask([u64; 16]);

impl CpuMask {
    /// The set of `cpus` (those above 1023 left out).
    pub fn of(cpus: &[usize]) -> CpuMask {
        let mut m = [0u64; 16];
        for &c in cpus.iter().filter(|&&c| c < 1024) {
            m[c / 64] |= 1 << (c % 64);
        }
        CpuMask(m)
    }

    fn contains(&self, c: usize) -> bool {
        c < 1024 && self.0[c / 64] & (1 << (c % 64)) != 0
    }

    fn list(&self) -> Vec<usize> {
        (0..1024).filter(|&c| self.contains(c)).collect()
    }
}

/// `cpus`: a Linux CPU list, or `None` when not written.
pub(super) fn list(
    src: &Source<'_>,
    v: &Option<Spanned<String>>,
) -> Result<Option<Vec<usize>>, ConfigFileError> {
    let Some(v) = v else { return Ok(None) };
    parse_cpulist(v.get_ref())
        .map(Some)
        .map_err(|e| src.bad_value(v, "gateway.cpus".into(), e))
}

/// Refuses a CPU the machine does not let quicknat run on; warns when there are more
/// workers than CPUs listed (workers then share cores).
pub(super) fn check(
    src: &Source<'_>,
    raw: &RawGateway,
    gw: &runtime::live::GatewayConfig,
    allowed: Option<CpuMask>,
    warnings: &mut Vec<String>,
) -> Result<(), ConfigFileError> {
    if let Some(allowed) = allowed {
        let refuse = |span, field: &str, cpu: usize| {
            src.error(
                Some(span),
                field,
                format!(
                    "CPU {cpu} is not one quicknat may run on (this machine allows {})",
                    format_cpulist(&allowed.list())
                ),
            )
        };
        if let (Some(v), Some(list)) = (&raw.cpus, &gw.cpus) {
            if let Some(&c) = list.iter().find(|&&c| !allowed.contains(c)) {
                return Err(refuse(v.span(), "gateway.cpus", c));
            }
        }
        if let Some(v) = &raw.reaper_cpu {
            let c = usize::try_from(*v.get_ref()).unwrap_or(usize::MAX);
            if !allowed.contains(c) {
                return Err(refuse(v.span(), "gateway.reaper_cpu", c));
            }
        }
    }
    if let (Some(v), Some(list)) = (&raw.cpus, &gw.cpus) {
        if list.len() < gw.workers {
            warnings.push(src.warning_at(
                v.span(),
                "gateway.cpus",
                format!(
                    "{} workers on {} CPUs: workers share cores",
                    gw.workers,
                    list.len()
                ),
            ));
        }
    }
    Ok(())
}
