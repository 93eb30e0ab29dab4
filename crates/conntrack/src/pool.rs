//! Public address and port pools for dynamic NAPT, shared by all workers without locks.
//!
//! - **Paired pooling** (RFC 4787 REQ-2), stateless: an inside host's public address is
//!   `pool[hash(host) mod |pool|]`, the same on every core and for as long as the pool
//!   is unchanged. A host whose address has no free port is refused rather than moved to
//!   another address, which is what "paired" promises its peers.
//! - **No port handed out twice**: one bit per (address, protocol, port), taken with an
//!   atomic fetch-or; whoever sets the bit owns the port.
//! - **Per-worker slices**: each worker starts its search in its own slice of the range,
//!   so workers do not contend on the same bitmap words; any worker may still use any
//!   free port, so an uneven load never strands free ports.
//! - **Reuse hold**: a released port stays taken for `hold` (default 120 s) so late
//!   packets of the old flow never reach a new owner. Releases come from the reaper.
//! - **Port preservation** when asked and the inside port is free and in range.

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::time::Timestamp;
use crate::tuple::{Endpoint, Proto};

const WORDS: usize = 65536 / 64;

/// Why no public port could be handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolError {
    /// The host's paired address has no free port in this protocol.
    PairedAddressFull,
    /// The pool has no address.
    Empty,
}

#[derive(Debug, Default)]
struct AddrPorts {
    bits: [OnceLock<Box<[AtomicU64]>>; Proto::COUNT],
    taken: [AtomicU32; Proto::COUNT],
}

impl AddrPorts {
    #[inline]
    fn bits(&self, proto: Proto) -> &[AtomicU64] {
        self.bits[proto.index()].get_or_init(|| (0..WORDS).map(|_| AtomicU64::new(0)).collect())
    }

    /// Sets the port's bit; true if this call took it.
    #[inline]
    fn take(&self, proto: Proto, port: u16) -> bool {
        let bit = 1u64 << (port % 64);
        let was = self.bits(proto)[port as usize / 64].fetch_or(bit, Ordering::AcqRel);
        if was & bit == 0 {
            self.taken[proto.index()].fetch_add(1, Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    fn give_back(&self, proto: Proto, port: u16) {
        let bit = 1u64 << (port % 64);
        let was = self.bits(proto)[port as usize / 64].fetch_and(!bit, Ordering::AcqRel);
        if was & bit != 0 {
            self.taken[proto.index()].fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The pool of one dynamic rule: its public addresses and port range.
#[derive(Debug)]
pub struct PortPool {
    addrs: Vec<Ipv4Addr>,
    ports: Box<[AddrPorts]>,
    first: u16,
    last: u16,
    hold: Duration,
    workers: u32,
    /// Released ports waiting out the hold, oldest first (touched by the reaper only).
    cooling: Mutex<VecDeque<(Timestamp, u32, Proto, u16)>>,
}

impl PortPool {
    /// A pool over `addrs` (sorted and deduplicated here), handing out ports
    /// `first..=last`, holding released ports for `hold`, searched by `workers` workers.
    pub fn new(
        mut addrs: Vec<Ipv4Addr>,
        first: u16,
        last: u16,
        hold: Duration,
        workers: usize,
    ) -> Self {
        addrs.sort_unstable();
        addrs.dedup();
        let first = first.max(1);
        Self {
            ports: (0..addrs.len()).map(|_| AddrPorts::default()).collect(),
            addrs,
            first,
            last: last.max(first),
            hold,
            workers: workers.clamp(1, 1024) as u32,
            cooling: Mutex::new(VecDeque::new()),
        }
    }

    /// The pool's addresses, sorted.
    pub fn addrs(&self) -> &[Ipv4Addr] {
        &self.addrs
    }

    /// Ports per address and protocol.
    pub fn ports_per_addr(&self) -> u32 {
        u32::from(self.last) - u32::from(self.first) + 1
    }

    fn index_of(&self, addr: Ipv4Addr) -> Option<usize> {
        self.addrs.binary_search(&addr).ok()
    }

    /// Whether `addr` is one of the pool's addresses.
    pub fn contains_addr(&self, addr: Ipv4Addr) -> bool {
        self.index_of(addr).is_some()
    }

    /// The public address an inside host is paired with.
    #[inline]
    pub fn paired_addr(&self, host: Ipv4Addr) -> Option<Ipv4Addr> {
        self.paired_index(host).map(|i| self.addrs[i])
    }

    #[inline]
    fn paired_index(&self, host: Ipv4Addr) -> Option<usize> {
        if self.addrs.is_empty() {
            return None;
        }
        let h = u64::from(u32::from(host)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        Some((((h >> 32) * self.addrs.len() as u64) >> 32) as usize)
    }

    /// Ports taken (in use or held back) on `addr` for `proto`.
    pub fn taken(&self, addr: Ipv4Addr, proto: Proto) -> u32 {
        self.index_of(addr).map_or(0, |i| {
            self.ports[i].taken[proto.index()].load(Ordering::Relaxed)
        })
    }

    /// Marks a port permanently taken (a port forward inside the pool). False if it is not
    /// in the pool's addresses or range, or already taken.
    pub fn reserve(&self, proto: Proto, public: Endpoint) -> bool {
        match self.index_of(public.addr) {
            Some(i) if (self.first..=self.last).contains(&public.port) => {
                self.ports[i].take(proto, public.port)
            }
            _ => false,
        }
    }

    /// Hands out a public endpoint for `inside` on the host's paired address. `worker`
    /// selects the slice of the range where the search starts.
    pub fn allocate(
        &self,
        proto: Proto,
        inside: Endpoint,
        preserve_port: bool,
        worker: usize,
    ) -> Result<Endpoint, PoolError> {
        let ai = self.paired_index(inside.addr).ok_or(PoolError::Empty)?;
        let ap = &self.ports[ai];
        let count = self.ports_per_addr();
        if ap.taken[proto.index()].load(Ordering::Relaxed) >= count {
            return Err(PoolError::PairedAddressFull);
        }
        if preserve_port
            && (self.first..=self.last).contains(&inside.port)
            && ap.take(proto, inside.port)
        {
            return Ok(Endpoint::new(self.addrs[ai], inside.port));
        }
        // Start in this worker's slice, at a point spread by the inside endpoint.
        let slice = (count / self.workers).max(1);
        let w = worker as u32 % self.workers;
        let h = (u64::from(u32::from(inside.addr)) << 16 | u64::from(inside.port))
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let start = (w * slice + ((h >> 40) as u32 % slice)) % count;
        let bits = ap.bits(proto);
        let (first, last) = (u32::from(self.first), u32::from(self.last));
        let mut p = first + start;
        let mut scanned = 0u32;
        while scanned < count {
            let word = bits[p as usize / 64].load(Ordering::Relaxed);
            let free = !word >> (p % 64);
            let in_word = 64 - p % 64;
            if free != 0 {
                let cand = p + free.trailing_zeros();
                let skip = free.trailing_zeros();
                if cand <= last && skip < in_word {
                    if ap.take(proto, cand as u16) {
                        return Ok(Endpoint::new(self.addrs[ai], cand as u16));
                    }
                    // Lost a race for this bit: look again from the same place.
                    continue;
                }
            }
            let step = in_word.min(last + 1 - p);
            scanned += step;
            p += step;
            if p > last {
                p = first;
            }
        }
        Err(PoolError::PairedAddressFull)
    }

    /// Gives back at once a port that was never published (its binding lost a race).
    pub fn give_back_now(&self, proto: Proto, public: Endpoint) {
        if let Some(ai) = self.index_of(public.addr) {
            self.ports[ai].give_back(proto, public.port);
        }
    }

    /// Gives a port back: it becomes free again `hold` after `now` (reaper only).
    pub fn release(&self, proto: Proto, public: Endpoint, now: Timestamp) {
        let Some(ai) = self.index_of(public.addr) else {
            return;
        };
        if let Ok(mut q) = self.cooling.lock() {
            q.push_back((now + self.hold, ai as u32, proto, public.port));
        }
    }

    /// When the next held-back port becomes free.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.cooling.lock().ok()?.front().map(|c| c.0)
    }

    /// Frees every port whose hold has passed. Returns how many.
    pub fn handle_timeout(&self, now: Timestamp) -> usize {
        let Ok(mut q) = self.cooling.lock() else {
            return 0;
        };
        let mut n = 0;
        while let Some(&(ready, ai, proto, port)) = q.front() {
            if ready > now {
                break;
            }
            q.pop_front();
            if let Some(ap) = self.ports.get(ai as usize) {
                ap.give_back(proto, port);
                n += 1;
            }
        }
        n
    }

    /// Number of ports waiting out the reuse hold.
    pub fn cooling_len(&self) -> usize {
        self.cooling.lock().map_or(0, |q| q.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;
    use std::sync::Arc;

    fn ep(host: u8, port: u16) -> Endpoint {
        Endpoint::new(Ipv4Addr::new(10, 0, 0, host), port)
    }

    fn pool(n: u8, first: u16, last: u16) -> PortPool {
        PortPool::new(
            (1..=n).map(|i| Ipv4Addr::new(203, 0, 113, i)).collect(),
            first,
            last,
            Duration::from_secs(120),
            2,
        )
    }

    #[test]
    fn preserves_port_when_free_and_in_range() {
        let p = pool(1, 1024, 65535);
        assert_eq!(
            p.allocate(Proto::Udp, ep(2, 5000), true, 0).unwrap().port,
            5000
        );
        let second = p.allocate(Proto::Udp, ep(3, 5000), true, 0).unwrap();
        assert_ne!(second.port, 5000, "taken port is not handed out twice");
        assert_eq!(
            p.allocate(Proto::Tcp, ep(3, 5000), true, 1).unwrap().port,
            5000,
            "TCP has its own space"
        );
        let low = p.allocate(Proto::Udp, ep(2, 53), true, 1).unwrap();
        assert!(low.port >= 1024, "outside the range is never preserved");
    }

    #[test]
    fn paired_pooling_keeps_a_host_on_one_address_and_spreads_hosts() {
        let p = pool(8, 1024, 65535);
        let a = p.allocate(Proto::Udp, ep(2, 1), false, 0).unwrap().addr;
        for port in 2..200 {
            assert_eq!(
                p.allocate(Proto::Tcp, ep(2, port), false, (port % 2) as usize)
                    .unwrap()
                    .addr,
                a
            );
        }
        assert_eq!(p.paired_addr(Ipv4Addr::new(10, 0, 0, 2)), Some(a));
        let used: HashSet<_> = (0..=255)
            .map(|h| p.paired_addr(Ipv4Addr::new(10, 0, 0, h)).unwrap())
            .collect();
        assert_eq!(used.len(), 8, "256 hosts use all 8 addresses");
    }

    #[test]
    fn exhaustion_and_hold_before_reuse() {
        let p = pool(1, 2000, 2003);
        let got: Vec<_> = (0..4)
            .map(|i| {
                p.allocate(Proto::Udp, ep(2, 3000 + i), false, i as usize)
                    .unwrap()
            })
            .collect();
        let ports: HashSet<_> = got.iter().map(|e| e.port).collect();
        assert_eq!(ports.len(), 4);
        assert_eq!(
            p.allocate(Proto::Udp, ep(2, 4000), false, 0),
            Err(PoolError::PairedAddressFull)
        );
        let t0 = Timestamp::from_secs(100);
        p.release(Proto::Udp, got[1], t0);
        p.handle_timeout(t0 + Duration::from_secs(119));
        assert!(
            p.allocate(Proto::Udp, ep(2, 4000), false, 0).is_err(),
            "held back for 120 s"
        );
        assert_eq!(p.poll_timeout(), Some(t0 + Duration::from_secs(120)));
        assert_eq!(p.handle_timeout(t0 + Duration::from_secs(120)), 1);
        assert_eq!(
            p.allocate(Proto::Udp, ep(2, 4000), false, 1).unwrap().port,
            got[1].port
        );
    }

    #[test]
    fn reserve_takes_port_out_of_circulation() {
        let p = pool(1, 1024, 1024);
        assert!(p.reserve(
            Proto::Tcp,
            Endpoint::new(Ipv4Addr::new(203, 0, 113, 1), 1024)
        ));
        assert!(!p.reserve(
            Proto::Tcp,
            Endpoint::new(Ipv4Addr::new(203, 0, 113, 1), 1024)
        ));
        assert!(p.allocate(Proto::Tcp, ep(2, 1024), true, 0).is_err());
        assert!(!p.reserve(
            Proto::Tcp,
            Endpoint::new(Ipv4Addr::new(198, 51, 100, 1), 1024)
        ));
    }

    /// Two threads allocate every port of a range at once: each port exactly once.
    #[test]
    fn concurrent_allocation_never_doubles() {
        let p = Arc::new(pool(1, 10000, 19999));
        let hs: Vec<_> = (0..2)
            .map(|w| {
                let p = Arc::clone(&p);
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    for i in 0..6000u16 {
                        if let Ok(e) = p.allocate(Proto::Udp, ep(2, i), i % 3 == 0, w) {
                            got.push(e.port);
                        }
                    }
                    got
                })
            })
            .collect();
        let mut all = HashSet::new();
        for h in hs {
            for port in h.join().unwrap() {
                assert!(all.insert(port), "port {port} handed out twice");
            }
        }
        assert_eq!(all.len(), 10000, "every port used, none stranded");
        assert_eq!(p.taken(Ipv4Addr::new(203, 0, 113, 1), Proto::Udp), 10000);
    }

    proptest! {
        /// Under any sequence of allocations and releases, no endpoint is live twice.
        #[test]
        fn never_doubled(ops in proptest::collection::vec((any::<bool>(), 0u8..6, any::<u16>(), any::<bool>()), 1..300)) {
            let p = pool(2, 60000, 60063);
            let mut live: Vec<Endpoint> = Vec::new();
            let mut now = Timestamp::ZERO;
            for (alloc, host, port, preserve) in ops {
                now = now + Duration::from_secs(7);
                p.handle_timeout(now);
                if alloc || live.is_empty() {
                    if let Ok(e) = p.allocate(Proto::Udp, ep(host, port), preserve, port as usize) {
                        prop_assert!(!live.contains(&e), "{} handed out twice", e);
                        prop_assert!((60000..=60063).contains(&e.port));
                        prop_assert_eq!(Some(e.addr), p.paired_addr(Ipv4Addr::new(10, 0, 0, host)));
                        live.push(e);
                    }
                } else {
                    let e = live.remove(port as usize % live.len());
                    p.release(Proto::Udp, e, now);
                }
            }
        }
    }
}
