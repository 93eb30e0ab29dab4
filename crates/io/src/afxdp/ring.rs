//! One AF_XDP ring (fill, completion, rx or tx): a power-of-two array of
//! descriptors in memory shared with the kernel, plus a producer and a
//! consumer index.
//!
//! The side that produces writes descriptors, then publishes its index with
//! release ordering; the side that consumes reads the other's index with
//! acquire ordering before it reads descriptors. Indices run freely and wrap
//! at 2^32; `index & mask` is the slot.

use std::io;
use std::marker::PhantomData;
use std::mem;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::sys::Mmap;

/// A mapped ring of `T` descriptors (`u64` UMEM addresses for fill and
/// completion, `xdp_desc` for rx and tx).
pub(crate) struct Ring<T: Copy> {
    map: Mmap,
    producer: usize,
    consumer: usize,
    flags: usize,
    desc: usize,
    mask: u32,
    size: u32,
    /// Our producer index (ahead of the published one until `publish`).
    prod: u32,
    /// Our consumer index (ahead of the published one until `release`).
    cons: u32,
    /// Last index of the other side that we read.
    other: u32,
    _t: PhantomData<T>,
}

impl<T: Copy> Ring<T> {
    /// Maps the ring of `size` entries described by `off` at page offset `pgoff`.
    pub(crate) fn map(
        fd: &OwnedFd,
        off: &libc::xdp_ring_offset,
        size: u32,
        pgoff: u64,
    ) -> io::Result<Self> {
        debug_assert!(size.is_power_of_two());
        let desc = off.desc as usize;
        let len = desc + size as usize * mem::size_of::<T>();
        let map = Mmap::shared(fd, len, pgoff)?;
        for o in [off.producer, off.consumer, off.flags] {
            if o as usize + 4 > desc || !o.is_multiple_of(4) {
                return Err(io::Error::other(format!(
                    "AF_XDP: unexpected ring offset {o} (desc at {desc})"
                )));
            }
        }
        if !desc.is_multiple_of(mem::align_of::<T>()) {
            return Err(io::Error::other("AF_XDP: misaligned ring descriptors"));
        }
        let mut ring = Ring {
            map,
            producer: off.producer as usize,
            consumer: off.consumer as usize,
            flags: off.flags as usize,
            desc,
            mask: size - 1,
            size,
            prod: 0,
            cons: 0,
            other: 0,
            _t: PhantomData,
        };
        ring.prod = ring.word(ring.producer).load(Ordering::Acquire);
        ring.cons = ring.word(ring.consumer).load(Ordering::Acquire);
        // For a producer ring `other` is the kernel's consumer index (= cons);
        // for a consumer ring, "nothing known to be available yet".
        ring.other = ring.cons;
        Ok(ring)
    }

    /// The shared index word at byte offset `off` (checked in `map`).
    fn word(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off + 4 <= self.map.len() && off.is_multiple_of(4));
        // SAFETY: `off` was checked in `map` to lie inside the mapping and be
        // 4-byte aligned; the word is shared with the kernel, so it is only
        // ever accessed atomically; the reference borrows `self`, which keeps
        // the mapping alive.
        unsafe { &*self.map.as_ptr().add(off).cast::<AtomicU32>() }
    }

    /// Pointer to the descriptor slot of free-running index `i`.
    fn slot(&self, i: u32) -> *mut T {
        let idx = (i & self.mask) as usize;
        // SAFETY: idx < size, and the mapping holds `size` descriptors from `desc`
        // (its length was computed that way in `map`).
        unsafe { self.map.as_ptr().add(self.desc).cast::<T>().add(idx) }
    }

    /// Whether the kernel asks to be woken (`XDP_RING_NEED_WAKEUP`).
    pub(crate) fn needs_wakeup(&self) -> bool {
        self.word(self.flags).load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    // ---- producer side (fill, tx) ----

    /// Free slots we may still write (refreshes the kernel's consumer index).
    pub(crate) fn free(&mut self) -> u32 {
        let used = self.prod.wrapping_sub(self.other);
        if used < self.size {
            return self.size - used;
        }
        self.other = self.word(self.consumer).load(Ordering::Acquire);
        self.size - self.prod.wrapping_sub(self.other)
    }

    /// Writes `v` into the next slot; false if the ring is full. Not visible
    /// to the kernel until [`Ring::publish`].
    pub(crate) fn push(&mut self, v: T) -> bool {
        if self.free() == 0 {
            return false;
        }
        let p = self.slot(self.prod);
        // SAFETY: the slot lies between the kernel's consumer index and ours +
        // size, so the kernel does not read it until we publish; `p` is in
        // bounds and aligned (see `slot`, `map`).
        unsafe { p.write_volatile(v) };
        self.prod = self.prod.wrapping_add(1);
        true
    }

    /// Entries pushed but not yet published.
    pub(crate) fn unpublished(&self) -> u32 {
        self.prod
            .wrapping_sub(self.word(self.producer).load(Ordering::Relaxed))
    }

    /// Published entries the kernel has not consumed yet.
    pub(crate) fn in_flight(&mut self) -> u32 {
        self.other = self.word(self.consumer).load(Ordering::Acquire);
        self.prod.wrapping_sub(self.other)
    }

    /// Makes all pushed entries visible to the kernel.
    pub(crate) fn publish(&mut self) {
        self.word(self.producer).store(self.prod, Ordering::Release);
    }

    // ---- consumer side (rx, completion) ----

    /// Takes the next entry the kernel produced, if any. The slot is ours
    /// until [`Ring::release`].
    pub(crate) fn pop(&mut self) -> Option<T> {
        if self.cons == self.other {
            self.other = self.word(self.producer).load(Ordering::Acquire);
            if self.cons == self.other {
                return None;
            }
        }
        let p = self.slot(self.cons);
        // SAFETY: the kernel published this slot (acquire load of its producer
        // index above) and does not rewrite it until we release our consumer
        // index past it; `p` is in bounds and aligned.
        let v = unsafe { p.read_volatile() };
        self.cons = self.cons.wrapping_add(1);
        Some(v)
    }

    /// Entries the kernel has produced that we have not popped yet.
    pub(crate) fn available(&mut self) -> u32 {
        self.other = self.word(self.producer).load(Ordering::Acquire);
        self.other.wrapping_sub(self.cons)
    }

    /// The entry `k` places after the next one to pop, among those [`Ring::available`]
    /// last counted; pops nothing.
    pub(crate) fn peek(&self, k: u32) -> Option<T> {
        if k >= self.other.wrapping_sub(self.cons) {
            return None;
        }
        let p = self.slot(self.cons.wrapping_add(k));
        // SAFETY: as in `pop`: the kernel published this slot (it lies before the
        // producer index `available` loaded with acquire) and does not rewrite it until
        // we release our consumer index past it; `p` is in bounds and aligned.
        Some(unsafe { p.read_volatile() })
    }

    /// Hands all popped slots back to the kernel.
    pub(crate) fn release(&mut self) {
        self.word(self.consumer).store(self.cons, Ordering::Release);
    }
}

// SAFETY: the ring is memory shared with the kernel and owned by this value;
// all access goes through `&mut self` or atomics, so moving it to another
// thread is sound.
unsafe impl<T: Copy> Send for Ring<T> {}
