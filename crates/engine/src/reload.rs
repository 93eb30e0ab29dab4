//! Live reload: a mode's policy (rules, pools, mappings, timeouts, limits — everything a
//! reload may change) is an immutable value published in a [`PolicyCell`]; a reload
//! builds the next generation beside the one in force, sharing its tables (sessions,
//! bindings), and publishes it with one store. Workers see the new generation at their
//! next packet: one atomic load of the generation number per packet, and a clone of the
//! `Arc` once per reload, taken with `try_lock` so a worker never waits (a worker that
//! finds the cell busy keeps the generation it has and looks again at the next packet).
//!
//! A generation is freed when the last worker holding it moves on (`Arc`): no grace
//! period is needed for the policy itself. What a reload must never do — touch the
//! session table or a live binding — it cannot: those are shared, not rebuilt.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::config::{ConfigError, ConfigItem};

/// Whether a reload changes the gateway or only says what it would change and whether it
/// would be refused (`quicknat reload --dry-run`): the same checks, the same report,
/// nothing published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReloadAction {
    /// Apply the new configuration.
    Apply,
    /// Check and report only.
    Preview,
}

/// The generations of one instance's policy: a counter the workers poll and the latest
/// generation (`None` until the first reload: the instance's own first one is in force).
pub struct PolicyCell<T> {
    generation: AtomicU64,
    latest: Mutex<Option<Arc<T>>>,
    /// Held for the whole of a reload, so two never interleave.
    serial: Mutex<()>,
}

impl<T> Default for PolicyCell<T> {
    fn default() -> Self {
        Self {
            generation: AtomicU64::new(0),
            latest: Mutex::new(None),
            serial: Mutex::new(()),
        }
    }
}

impl<T> std::fmt::Debug for PolicyCell<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyCell")
            .field("generation", &self.generation())
            .finish()
    }
}

impl<T> PolicyCell<T> {
    /// The generation in force (0: the first; each reload adds one).
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The latest published generation, `None` before any reload. Blocks only against
    /// a concurrent [`publish`](Self::publish) (control path).
    pub fn latest(&self) -> Option<Arc<T>> {
        self.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The generation in force and its value (`None`: the first), read together under
    /// the lock a publish takes (control path).
    pub fn current(&self) -> (u64, Option<Arc<T>>) {
        let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        (self.generation(), latest.clone())
    }

    /// For a worker: the latest generation and its number if the cell is free at once;
    /// `None` (try again at the next packet) if a reload holds it this instant.
    pub fn try_latest(&self) -> Option<(u64, Option<Arc<T>>)> {
        let g = self.generation();
        let latest = self.latest.try_lock().ok()?;
        Some((g, latest.clone()))
    }

    /// Held by a reload from start to publish: reloads one at a time (control path).
    pub fn serialise(&self) -> std::sync::MutexGuard<'_, ()> {
        self.serial.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes `next` as the generation in force; returns its number.
    pub fn publish(&self, next: Arc<T>) -> u64 {
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        *latest = Some(next);
        // Under the lock: a worker that reads the new number finds the new value.
        self.generation.fetch_add(1, Ordering::AcqRel) + 1
    }
}

/// What a reload changed, one line per item, for the log and `quicknat reload`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReloadReport {
    /// What changed ("pool + 198.51.100.0/30", "tcp_established 7440 s → 3600 s").
    pub changes: Vec<String>,
    /// Sessions ended (drain policy "immediate") or left to expire on removed addresses.
    pub drain: Option<String>,
}

impl ReloadReport {
    /// Records one change.
    pub fn push(&mut self, change: impl Into<String>) {
        self.changes.push(change.into());
    }

    /// Whether nothing changed (and nothing was drained).
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty() && self.drain.is_none()
    }

    /// Records `what` changing from `old` to `new` if it did (Debug forms).
    pub fn compare<V: PartialEq + std::fmt::Debug>(&mut self, what: &str, old: &V, new: &V) {
        if old != new {
            self.push(format!("{what} {old:?} → {new:?}"));
        }
    }

    /// [`compare`](Self::compare) for an optional setting shown as the operator writes it
    /// (`2001:db8:64::/96`, not the Debug form of its bytes), `none` when unset.
    pub fn compare_shown<V: PartialEq + std::fmt::Display>(
        &mut self,
        what: &str,
        old: &Option<V>,
        new: &Option<V>,
    ) {
        let show = |v: &Option<V>| v.as_ref().map_or_else(|| "none".to_owned(), V::to_string);
        if old != new {
            self.push(format!("{what} {} → {}", show(old), show(new)));
        }
    }
}

impl std::fmt::Display for ReloadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.changes.is_empty() {
            f.write_str("no change")?;
        } else {
            f.write_str(&self.changes.join("; "))?;
        }
        if let Some(d) = &self.drain {
            write!(f, "; {d}")?;
        }
        Ok(())
    }
}

/// Refuses a reload that changes settings only a restart can apply, naming them all.
/// `fields` are (field name, changed?) pairs.
pub fn refuse_restart_only(fields: &[(&'static str, bool)]) -> Result<(), ConfigError> {
    let changed: Vec<&str> = fields.iter().filter(|f| f.1).map(|f| f.0).collect();
    match changed.first() {
        None => Ok(()),
        Some(first) => Err(ConfigError::new(
            ConfigItem::Field(first),
            format!(
                "cannot change live (restart needed): {}",
                changed.join(", ")
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_publish_is_seen_with_its_generation() {
        let c: PolicyCell<u32> = PolicyCell::default();
        assert_eq!(c.generation(), 0);
        assert!(c.latest().is_none());
        assert_eq!(c.publish(Arc::new(7)), 1);
        let (g, v) = c.try_latest().unwrap();
        assert_eq!((g, v.map(|v| *v)), (1, Some(7)));
    }

    #[test]
    fn refusal_names_every_restart_only_field() {
        let e = refuse_restart_only(&[("max_sessions", true), ("x", false), ("workers", true)])
            .unwrap_err();
        assert!(e.to_string().contains("max_sessions, workers"), "{e}");
        assert!(refuse_restart_only(&[("max_sessions", false)]).is_ok());
    }
}
