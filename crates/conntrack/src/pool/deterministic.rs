//! Deterministic port choice (RFC 7422): a port taken inside a range the caller computed
//! (a subscriber's own range on its own address), the search starting at a port the
//! caller computed, so two nodes with the same configuration choose the same port for
//! the same flow. The pool's bitmaps, reuse hold and release stay what they are for
//! dynamic bindings: only where the search looks differs.
//!
//! Lock-free like [`PortPool::allocate`]: a port is owned by whoever sets its bit.

use std::sync::atomic::Ordering;

use super::PortPool;
use crate::tuple::{Endpoint, Proto};

impl PortPool {
    /// Takes the first free port of `first..first + len` on `public` (one of the pool's
    /// addresses) for `proto`, looking at `start` first and then upward, wrapping to
    /// `first` at the end of the range. `None`: every port of the range is taken (or in
    /// its reuse hold), or `public` is not in the pool, or the range is empty or runs
    /// past port 65535.
    pub fn allocate_in_range(
        &self,
        proto: Proto,
        public: std::net::Ipv4Addr,
        first: u16,
        len: u16,
        start: u16,
    ) -> Option<Endpoint> {
        let (first, end) = (u32::from(first), u32::from(first) + u32::from(len));
        let start = u32::from(start);
        if len == 0 || end > 65536 || !(first..end).contains(&start) {
            return None;
        }
        let ai = self.addrs.index_of(public)?;
        let ap = self.ports.get_or_init(ai)?;
        let bits = ap.bits(proto, &self.bitmap_bytes);
        // From the start to the end of the range, then from its first port to the start.
        for (lo, hi) in [(start, end), (first, start)] {
            let mut p = lo;
            while p < hi {
                let word = bits[p as usize / 64].load(Ordering::Relaxed);
                let free = !word >> (p % 64);
                let cand = p + free.trailing_zeros();
                if free != 0 && cand < hi && free.trailing_zeros() < 64 - p % 64 {
                    if ap.take(proto, cand as u16, &self.bitmap_bytes) {
                        return Some(Endpoint::new(public, cand as u16));
                    }
                    // Lost a race for this bit: look again from it.
                    p = cand;
                    continue;
                }
                p = (p / 64 + 1) * 64;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    fn pool() -> PortPool {
        PortPool::from_ranges(
            vec![(Ipv4Addr::new(203, 0, 113, 0), Ipv4Addr::new(203, 0, 113, 3))],
            1024,
            65535,
            Duration::ZERO,
            2,
        )
    }

    #[test]
    fn starts_at_start_probes_up_and_wraps_inside_the_range() {
        let p = pool();
        let a = Ipv4Addr::new(203, 0, 113, 1);
        let take = |start| {
            p.allocate_in_range(Proto::Udp, a, 2000, 100, start)
                .map(|e| e.port)
        };
        assert_eq!(take(2050), Some(2050));
        assert_eq!(take(2050), Some(2051));
        assert_eq!(take(2099), Some(2099));
        assert_eq!(take(2099), Some(2000), "wraps to the range's first port");
        // Another protocol has its own ports.
        assert_eq!(
            p.allocate_in_range(Proto::Tcp, a, 2000, 100, 2050)
                .map(|e| e.port),
            Some(2050)
        );
        // Fill the range: every port handed out once, then none.
        let mut seen: std::collections::HashSet<u16> = [2050, 2051, 2099, 2000].into();
        for _ in 0..96 {
            let port = take(2030).unwrap();
            assert!((2000..2100).contains(&port));
            assert!(seen.insert(port), "{port} twice");
        }
        assert_eq!(take(2030), None);
        assert_eq!(take(2000), None);
        // The neighbours' ports were never touched.
        assert_eq!(p.taken(a, Proto::Udp), 100);
        assert_eq!(
            p.allocate_in_range(Proto::Udp, a, 2100, 100, 2100)
                .map(|e| e.port),
            Some(2100)
        );
        // Out of the pool, empty or past-the-end ranges, a start outside the range.
        assert_eq!(
            p.allocate_in_range(Proto::Udp, Ipv4Addr::new(203, 0, 113, 9), 2000, 10, 2000),
            None
        );
        assert_eq!(p.allocate_in_range(Proto::Udp, a, 2000, 0, 2000), None);
        assert_eq!(p.allocate_in_range(Proto::Udp, a, 65530, 10, 65530), None);
        assert_eq!(p.allocate_in_range(Proto::Udp, a, 3000, 10, 2999), None);
        // The top of the port space, up to 65535.
        assert_eq!(
            p.allocate_in_range(Proto::Udp, a, 65500, 36, 65535)
                .map(|e| e.port),
            Some(65535)
        );
        assert_eq!(
            p.allocate_in_range(Proto::Udp, a, 65500, 36, 65535)
                .map(|e| e.port),
            Some(65500)
        );
    }

    /// Threads taking ports of one range at once, a core kept busy beside them, never
    /// get the same port twice, and together take every port of the range.
    #[test]
    fn no_port_twice_under_contention() {
        use std::sync::atomic::AtomicBool;
        let p = std::sync::Arc::new(pool());
        let a = Ipv4Addr::new(203, 0, 113, 2);
        let stop = AtomicBool::new(false);
        let got: Vec<Vec<u16>> = std::thread::scope(|s| {
            let busy = s.spawn(|| {
                let mut x = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                }
                x
            });
            let hs: Vec<_> = (0..4)
                .map(|t| {
                    let p = &p;
                    s.spawn(move || {
                        let mut v = Vec::new();
                        while let Some(e) =
                            p.allocate_in_range(Proto::Udp, a, 4096, 1000, 4096 + t * 7)
                        {
                            v.push(e.port);
                        }
                        v
                    })
                })
                .collect();
            let got = hs.into_iter().map(|h| h.join().unwrap()).collect();
            stop.store(true, Ordering::Relaxed);
            busy.join().unwrap();
            got
        });
        let mut all: Vec<u16> = got.into_iter().flatten().collect();
        all.sort_unstable();
        assert_eq!(all, (4096..5096).collect::<Vec<u16>>());
    }
}
