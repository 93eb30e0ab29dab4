//! The IPv4 Identification of packets the translators send with DF clear (RFC 6864), as
//! the Linux IP stack picks it (`ip_idents`, `__ip_select_ident`): a counter per
//! (source, destination, protocol), kept in a fixed table of atomic counters indexed by a
//! keyed hash of the tuple.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU16, Ordering};

use conntrack::SipKey;
use xlat::siit::IdentSource;

/// Counters in the table (a power of two): 8 KiB, the size of Linux's smallest table
/// (2048 counters of 32 bits, of which it sends 16).
const BUCKETS: usize = 4096;

/// The per-tuple Identification counters of one gateway instance, shared by its workers.
///
/// RFC 6864 §4.2: sources of non-atomic datagrams "MUST NOT repeat the ID value within
/// one MSL for a given source address/destination address/protocol tuple". A tuple's
/// counter advances by one per datagram, so its IDs repeat only after 65536 datagrams (the
/// most 16 bits allow); tuples whose hash shares a counter share its sequence, which only
/// brings each one's wrap sooner. The counters are atomics in one table that every worker
/// uses (one relaxed `fetch_add` per datagram, no lock): two workers translating the same
/// tuple take distinct numbers of the same sequence, so spreading a tuple over workers
/// does not bring repeats any sooner than one worker would.
///
/// The hash is SipHash-1-3 with a per-process random key ([`SipKey::random`]) and each
/// counter starts at a random value: from outside, neither which tuples share a counter
/// nor where a counter stands can be predicted, so IDs cannot be guessed to inject
/// fragments into another's datagram, nor counters of others be found to count their
/// traffic (the attack that led Linux from `jhash` to SipHash for this table). Unlike
/// Linux, no random skip is added on a counter's first use after a pause (that needs a
/// clock): a sender sharing a counter with another tuple can see how many datagrams it
/// carried in between, which it could not attribute without knowing the tuple.
pub struct Ipv4Idents {
    key: SipKey,
    ids: Box<[AtomicU16; BUCKETS]>,
}

impl Ipv4Idents {
    /// A table keyed with a fresh random key (or, in a process seeded for benchmarks,
    /// the seed's next one: the benchmark's reproducible keys).
    pub fn new() -> Self {
        Self::with_key(SipKey::random())
    }

    /// A table keyed with `key`: the same key gives the same IDs for the same traffic
    /// (tests and replays).
    pub fn with_key(key: SipKey) -> Self {
        // Each counter starts at a value of its own, drawn from the key.
        const STARTS: u64 = 0x6970_6964_7374_6172;
        let ids = Box::new(std::array::from_fn(|i| {
            AtomicU16::new(key.hash2(i as u64, STARTS) as u16)
        }));
        Ipv4Idents { key, ids }
    }
}

impl Default for Ipv4Idents {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Ipv4Idents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ipv4Idents(..)") // the counters would tell the key
    }
}

impl IdentSource for Ipv4Idents {
    #[inline]
    fn next_ident(&self, src: Ipv4Addr, dst: Ipv4Addr, proto: u8) -> u16 {
        let pair = (u64::from(u32::from(src)) << 32) | u64::from(u32::from(dst));
        let i = self.key.hash2(pair, u64::from(proto)) as usize % BUCKETS;
        // Relaxed: the counter orders nothing but its own values, which the atomic add
        // keeps distinct.
        self.ids[i].fetch_add(1, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);

    #[test]
    fn a_tuple_advances_by_one() {
        let t = Ipv4Idents::with_key(SipKey::fixed(1, 2));
        let first = t.next_ident(A, B, 17);
        for n in 1..70_000u32 {
            assert_eq!(t.next_ident(A, B, 17), first.wrapping_add(n as u16));
        }
    }

    #[test]
    fn the_key_decides_starts_and_sharing() {
        let ids = |k: u64| {
            let t = Ipv4Idents::with_key(SipKey::fixed(k, 7));
            [
                t.next_ident(A, B, 17),
                t.next_ident(A, B, 6),
                t.next_ident(B, A, 17),
                t.next_ident(A, B, 1),
            ]
        };
        assert_eq!(ids(1), ids(1), "the same key, the same IDs");
        assert_ne!(ids(1), ids(2));
        // Tuples differing in any part start apart (the same counter would say +1).
        let t = ids(3);
        assert!(t.windows(2).all(|w| w[1] != w[0].wrapping_add(1)), "{t:?}");
    }

    /// Workers share one table: two threads on one tuple never take the same number.
    #[test]
    fn threads_on_one_tuple_take_distinct_ids() {
        let t = std::sync::Arc::new(Ipv4Idents::new());
        let take = |t: std::sync::Arc<Ipv4Idents>| {
            std::thread::spawn(move || (0..30_000).map(|_| t.next_ident(A, B, 17)).collect())
        };
        let (x, y) = (take(t.clone()), take(t.clone()));
        let mut all: Vec<u16> = x.join().unwrap();
        all.extend(y.join().unwrap());
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 60_000);
    }
}
