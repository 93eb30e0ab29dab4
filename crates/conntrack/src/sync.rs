//! The atomics of the lock-free tables: the standard library's, or loom's when built with
//! `--cfg loom`, so that the model tests (`loom_*`, see `scripts/test.sh`) explore every
//! interleaving and every weak-memory outcome the C++/Rust memory model allows of the
//! very code the workers run. A normal build never sees loom.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicUsize, Ordering};
