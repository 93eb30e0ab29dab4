//! Software prefetch: a hint that the cache line holding a value will be read soon, so
//! that the load which needs it later finds it in L1 instead of waiting ~100 ns on DRAM.
//! The engine's staged batches use it the way VPP's and DPDK's NAT nodes do: hash every
//! key of a batch and prefetch the index buckets, then prefetch the session lines the
//! buckets point at, then translate.
//!
//! A hint only: it never changes what any load returns, never faults (the CPU drops a
//! prefetch of an unmapped address), and is a no-op on architectures without a stable
//! intrinsic. This crate exists because the workspace forbids `unsafe` outside
//! `crates/io` and the intrinsic is an `unsafe fn`; it must hold nothing else.

#![no_std]

/// Hints that the cache line holding `*v` will be read soon (into all cache levels).
#[inline(always)]
pub fn read<T>(v: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = (v as *const T).cast::<i8>();
        // SAFETY: a prefetch never faults and has no architectural effect (Intel SDM,
        // PREFETCHh: "does not affect program behavior"); `p` comes from a live reference.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = v;
    }
}

/// [`read`] of the element at `i`, if there is one (an index past the end hints nothing).
#[inline(always)]
pub fn read_at<T>(s: &[T], i: usize) {
    if let Some(v) = s.get(i) {
        read(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_changes_nothing() {
        let v = [1u64, 2, 3];
        read(&v[1]);
        read_at(&v, 2);
        read_at(&v, 99);
        assert_eq!(v, [1, 2, 3]);
    }
}
