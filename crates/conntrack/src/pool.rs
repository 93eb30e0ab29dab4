//! Public address and port pools for dynamic NAPT.
//!
//! - **Paired pooling** (RFC 4787 REQ-2): an inside host keeps one public address for all
//!   its bindings while it has any.
//! - **No port handed out twice**: one bit per (address, protocol, port).
//! - **Reuse hold**: a released port stays taken for `hold` (RFC 6888 REQ-? / common CGN
//!   practice: 120 s) so late packets of the old flow never reach a new owner.
//! - **Port preservation** when asked and possible, otherwise a start point derived from a
//!   hash of the inside endpoint so allocation is spread over the range (RFC 6056 spirit)
//!   yet deterministic for a given history (reproducible replays and tests).

use std::collections::VecDeque;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::Ipv4Addr;
use std::time::Duration;

use hashbrown::HashMap;
use rustc_hash::FxHasher;

use crate::time::Timestamp;
use crate::tuple::{Endpoint, Proto};

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

const WORDS: usize = 65536 / 64;

/// Why no public port could be handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolError {
    /// The host's paired address has no free port in this protocol.
    PairedAddressFull,
    /// No pool address has a free port.
    Exhausted,
}

#[derive(Debug)]
struct AddrState {
    /// One bit per port, per protocol; allocated on first use.
    used: [Option<Box<[u64; WORDS]>>; Proto::COUNT],
    /// Ports taken (including held back) per protocol.
    taken: [u32; Proto::COUNT],
}

impl AddrState {
    fn new() -> Self {
        Self {
            used: [None, None, None],
            taken: [0; Proto::COUNT],
        }
    }

    fn bits(&mut self, proto: Proto) -> &mut [u64; WORDS] {
        self.used[proto.index()].get_or_insert_with(|| Box::new([0u64; WORDS]))
    }

    fn is_set(&self, proto: Proto, port: u16) -> bool {
        self.used[proto.index()]
            .as_ref()
            .is_some_and(|b| b[port as usize / 64] & (1u64 << (port % 64)) != 0)
    }
}

/// The pool of one dynamic rule: its public addresses and port range.
#[derive(Debug)]
pub struct PortPool {
    addrs: Vec<Ipv4Addr>,
    first: u16,
    last: u16,
    hold: Duration,
    state: FxMap<u32, AddrState>,
    /// Inside host -> (index of its paired address, bindings it holds).
    paired: FxMap<Ipv4Addr, (u32, u32)>,
    /// Released ports waiting out the hold, oldest first.
    cooling: VecDeque<(Timestamp, u32, Proto, u16)>,
}

impl PortPool {
    /// A pool over `addrs`, handing out ports `first..=last`, holding released ports for `hold`.
    pub fn new(addrs: Vec<Ipv4Addr>, first: u16, last: u16, hold: Duration) -> Self {
        let first = first.max(1);
        Self {
            addrs,
            first,
            last: last.max(first),
            hold,
            state: FxMap::default(),
            paired: FxMap::default(),
            cooling: VecDeque::new(),
        }
    }

    /// The pool's addresses.
    pub fn addrs(&self) -> &[Ipv4Addr] {
        &self.addrs
    }

    /// Ports per address and protocol.
    pub fn ports_per_addr(&self) -> u32 {
        u32::from(self.last) - u32::from(self.first) + 1
    }

    /// Whether `addr` is one of the pool's addresses.
    pub fn contains_addr(&self, addr: Ipv4Addr) -> bool {
        self.index_of(addr).is_some()
    }

    fn index_of(&self, addr: Ipv4Addr) -> Option<u32> {
        // Pools are built from sorted prefixes: binary search.
        self.addrs.binary_search(&addr).ok().map(|i| i as u32)
    }

    /// The public address an inside host is paired with, if it holds any binding.
    pub fn paired_addr(&self, host: Ipv4Addr) -> Option<Ipv4Addr> {
        self.paired.get(&host).map(|(i, _)| self.addrs[*i as usize])
    }

    /// Ports taken (in use or held back) on `addr` for `proto`.
    pub fn taken(&self, addr: Ipv4Addr, proto: Proto) -> u32 {
        self.index_of(addr)
            .and_then(|i| self.state.get(&i))
            .map_or(0, |s| s.taken[proto.index()])
    }

    /// Marks a port permanently taken (a port forward inside the pool). False if it is not
    /// in the pool's addresses or range, or already taken.
    pub fn reserve(&mut self, proto: Proto, public: Endpoint) -> bool {
        let Some(i) = self.index_of(public.addr) else {
            return false;
        };
        if !(self.first..=self.last).contains(&public.port) {
            return false;
        }
        let st = self.state.entry(i).or_insert_with(AddrState::new);
        if st.is_set(proto, public.port) {
            return false;
        }
        st.bits(proto)[public.port as usize / 64] |= 1u64 << (public.port % 64);
        st.taken[proto.index()] += 1;
        true
    }

    /// Hands out a public endpoint for `inside`, on the host's paired address.
    pub fn allocate(
        &mut self,
        proto: Proto,
        inside: Endpoint,
        preserve_port: bool,
    ) -> Result<Endpoint, PoolError> {
        let count = self.ports_per_addr();
        let (ai, paired) = match self.paired.get(&inside.addr) {
            Some((i, _)) => (*i, true),
            None => (self.choose_addr(proto, inside.addr, count)?, false),
        };
        let (first, last) = (self.first, self.last);
        let st = self.state.entry(ai).or_insert_with(AddrState::new);
        if st.taken[proto.index()] >= count {
            return Err(if paired {
                PoolError::PairedAddressFull
            } else {
                PoolError::Exhausted
            });
        }
        let port = if preserve_port
            && (first..=last).contains(&inside.port)
            && !st.is_set(proto, inside.port)
        {
            inside.port
        } else {
            let start = first as u32 + (hash(inside, proto) % count);
            find_free(st.bits(proto), first, last, start as u16).ok_or(if paired {
                PoolError::PairedAddressFull
            } else {
                PoolError::Exhausted
            })?
        };
        st.bits(proto)[port as usize / 64] |= 1u64 << (port % 64);
        st.taken[proto.index()] += 1;
        self.paired.entry(inside.addr).or_insert((ai, 0)).1 += 1;
        Ok(Endpoint::new(self.addrs[ai as usize], port))
    }

    fn choose_addr(&self, proto: Proto, host: Ipv4Addr, count: u32) -> Result<u32, PoolError> {
        let n = self.addrs.len() as u32;
        if n == 0 {
            return Err(PoolError::Exhausted);
        }
        let start = {
            let mut h = FxHasher::default();
            h.write_u32(u32::from(host));
            (h.finish() >> 17) as u32 % n
        };
        (0..n)
            .map(|k| (start + k) % n)
            .find(|i| {
                self.state
                    .get(i)
                    .is_none_or(|s| s.taken[proto.index()] < count)
            })
            .ok_or(PoolError::Exhausted)
    }

    /// Gives a port back: it becomes free again `hold` after `now`. The host's pairing ends
    /// with its last binding.
    pub fn release(
        &mut self,
        proto: Proto,
        public: Endpoint,
        inside_host: Ipv4Addr,
        now: Timestamp,
    ) {
        let Some(ai) = self.index_of(public.addr) else {
            return;
        };
        if let Some(e) = self.paired.get_mut(&inside_host) {
            e.1 = e.1.saturating_sub(1);
            if e.1 == 0 {
                self.paired.remove(&inside_host);
            }
        }
        self.cooling
            .push_back((now + self.hold, ai, proto, public.port));
    }

    /// When the next held-back port becomes free.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.cooling.front().map(|c| c.0)
    }

    /// Frees every port whose hold has passed. Returns how many.
    pub fn handle_timeout(&mut self, now: Timestamp) -> usize {
        let mut n = 0;
        while let Some(&(ready, ai, proto, port)) = self.cooling.front() {
            if ready > now {
                break;
            }
            self.cooling.pop_front();
            if let Some(st) = self.state.get_mut(&ai) {
                if st.is_set(proto, port) {
                    st.bits(proto)[port as usize / 64] &= !(1u64 << (port % 64));
                    st.taken[proto.index()] -= 1;
                    n += 1;
                }
            }
        }
        n
    }

    /// Number of ports waiting out the reuse hold.
    pub fn cooling_len(&self) -> usize {
        self.cooling.len()
    }
}

fn hash(inside: Endpoint, proto: Proto) -> u32 {
    let mut h = FxHasher::default();
    h.write_u32(u32::from(inside.addr));
    h.write_u16(inside.port);
    h.write_u8(proto as u8);
    (h.finish() >> 20) as u32
}

/// First clear bit in `first..=last`, scanning from `start` and wrapping.
fn find_free(bits: &[u64; WORDS], first: u16, last: u16, start: u16) -> Option<u16> {
    let scan = |lo: u32, hi: u32| -> Option<u16> {
        // Inclusive range lo..=hi, word at a time.
        let mut p = lo;
        while p <= hi {
            let w = bits[p as usize / 64];
            let bit = p % 64;
            let free = !w >> bit;
            if free != 0 {
                let cand = p + free.trailing_zeros();
                if cand <= hi && (cand / 64) == (p / 64) {
                    return Some(cand as u16);
                }
            }
            p = (p / 64 + 1) * 64;
        }
        None
    };
    let (first, last, start) = (
        u32::from(first),
        u32::from(last),
        u32::from(start.clamp(first, last)),
    );
    scan(start, last).or_else(|| {
        if start > first {
            scan(first, start - 1)
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn ep(host: u8, port: u16) -> Endpoint {
        Endpoint::new(Ipv4Addr::new(10, 0, 0, host), port)
    }

    fn pool(n: u8, first: u16, last: u16) -> PortPool {
        PortPool::new(
            (1..=n).map(|i| Ipv4Addr::new(203, 0, 113, i)).collect(),
            first,
            last,
            Duration::from_secs(120),
        )
    }

    #[test]
    fn preserves_port_when_free_and_in_range() {
        let mut p = pool(1, 1024, 65535);
        assert_eq!(
            p.allocate(Proto::Udp, ep(2, 5000), true).unwrap().port,
            5000
        );
        let second = p.allocate(Proto::Udp, ep(3, 5000), true).unwrap();
        assert_ne!(second.port, 5000, "taken port is not handed out twice");
        assert_eq!(
            p.allocate(Proto::Tcp, ep(3, 5000), true).unwrap().port,
            5000,
            "TCP has its own space"
        );
        let low = p.allocate(Proto::Udp, ep(2, 53), true).unwrap();
        assert!(low.port >= 1024, "outside the range is never preserved");
    }

    #[test]
    fn paired_pooling_keeps_a_host_on_one_address() {
        let mut p = pool(8, 1024, 65535);
        let a = p.allocate(Proto::Udp, ep(2, 1), false).unwrap().addr;
        for port in 2..200 {
            assert_eq!(p.allocate(Proto::Tcp, ep(2, port), false).unwrap().addr, a);
        }
        assert_eq!(p.paired_addr(Ipv4Addr::new(10, 0, 0, 2)), Some(a));
    }

    #[test]
    fn exhaustion_and_hold_before_reuse() {
        let mut p = pool(1, 2000, 2003);
        let got: Vec<_> = (0..4)
            .map(|i| p.allocate(Proto::Udp, ep(2, 3000 + i), false).unwrap())
            .collect();
        let ports: HashSet<_> = got.iter().map(|e| e.port).collect();
        assert_eq!(ports.len(), 4);
        assert_eq!(
            p.allocate(Proto::Udp, ep(2, 4000), false),
            Err(PoolError::PairedAddressFull)
        );
        let t0 = Timestamp::from_secs(100);
        p.release(Proto::Udp, got[1], Ipv4Addr::new(10, 0, 0, 2), t0);
        p.handle_timeout(t0 + Duration::from_secs(119));
        assert!(
            p.allocate(Proto::Udp, ep(2, 4000), false).is_err(),
            "held back for 120 s"
        );
        assert_eq!(p.poll_timeout(), Some(t0 + Duration::from_secs(120)));
        assert_eq!(p.handle_timeout(t0 + Duration::from_secs(120)), 1);
        assert_eq!(
            p.allocate(Proto::Udp, ep(2, 4000), false).unwrap().port,
            got[1].port
        );
    }

    #[test]
    fn other_hosts_move_to_other_addresses_when_one_is_full() {
        let mut p = pool(2, 2000, 2001);
        let mut seen = HashSet::new();
        for h in 1..=4 {
            let e = p.allocate(Proto::Udp, ep(h, 1), false).unwrap();
            assert!(seen.insert(e), "endpoint {e} handed out twice");
        }
        assert_eq!(
            p.allocate(Proto::Udp, ep(9, 1), false),
            Err(PoolError::Exhausted)
        );
    }

    #[test]
    fn reserve_takes_port_out_of_circulation() {
        let mut p = pool(1, 1024, 1024);
        assert!(p.reserve(
            Proto::Tcp,
            Endpoint::new(Ipv4Addr::new(203, 0, 113, 1), 1024)
        ));
        assert!(!p.reserve(
            Proto::Tcp,
            Endpoint::new(Ipv4Addr::new(203, 0, 113, 1), 1024)
        ));
        assert!(p.allocate(Proto::Tcp, ep(2, 1024), true).is_err());
        assert!(!p.reserve(
            Proto::Tcp,
            Endpoint::new(Ipv4Addr::new(198, 51, 100, 1), 1024)
        ));
    }

    proptest! {
        /// Under any sequence of allocations and releases, no endpoint is live twice and the
        /// count of taken ports matches what was handed out and not yet cooled.
        #[test]
        fn never_doubled(ops in proptest::collection::vec((any::<bool>(), 0u8..6, any::<u16>(), any::<bool>()), 1..300)) {
            let mut p = pool(2, 60000, 60063);
            let mut live: Vec<(Endpoint, Ipv4Addr)> = Vec::new();
            let mut now = Timestamp::ZERO;
            for (alloc, host, port, preserve) in ops {
                now = now + Duration::from_secs(7);
                p.handle_timeout(now);
                if alloc || live.is_empty() {
                    if let Ok(e) = p.allocate(Proto::Udp, ep(host, port), preserve) {
                        prop_assert!(!live.iter().any(|(l, _)| *l == e), "{} handed out twice", e);
                        prop_assert!((60000..=60063).contains(&e.port));
                        if let Some((other, _)) = live.iter().find(|(_, h)| *h == Ipv4Addr::new(10, 0, 0, host)) {
                            prop_assert_eq!(other.addr, e.addr, "paired pooling");
                        }
                        live.push((e, Ipv4Addr::new(10, 0, 0, host)));
                    }
                } else {
                    let (e, h) = live.remove(port as usize % live.len());
                    p.release(Proto::Udp, e, h, now);
                }
            }
        }
    }

    #[test]
    fn find_free_wraps_and_respects_bounds() {
        let mut bits = [0u64; WORDS];
        for p in 100..=200u32 {
            bits[p as usize / 64] |= 1 << (p % 64);
        }
        assert_eq!(find_free(&bits, 100, 300, 150), Some(201));
        assert_eq!(find_free(&bits, 100, 200, 150), None);
        assert_eq!(find_free(&bits, 90, 200, 150), Some(90));
        assert_eq!(find_free(&bits, 65535, 65535, 65535), Some(65535));
    }
}
