//! A receive batch in stages, the way VPP's and DPDK's NAT nodes hide DRAM latency:
//! [`ModeWorker::prefetch`](crate::ModeWorker::prefetch) reads each packet's key straight
//! from its bytes, hashes it and starts loading its index bucket (stage 1); the first
//! `process` after that reads every staged bucket's first node and starts loading those
//! session lines (stage 2); then each packet is translated as usual (stage 3), its bucket
//! and session already in cache. At a million flows each packet otherwise waits on two or
//! three dependent DRAM misses in turn; staged, a batch's misses overlap.
//!
//! Only when the sessions outgrow the core's private cache: while they fit (their
//! working set, live slots times bytes per session, below [`private_cache`]), every
//! lookup hits in L2 and the hints' instructions cost more than the waits they hide;
//! once the sessions outgrow it, staging wins, and by more the larger the table grows
//! (`quicknat-bench --flows` measures both). The choice is looked at again every
//! [`RECHECK`] packets (one relaxed load of the table's count).
//!
//! Hints only: nothing here is a result. `process` looks every packet up in full, so a
//! session made or removed between the stages (by an earlier packet of the same batch,
//! another worker or the reaper) only wastes a prefetch. No allocation: a fixed array of
//! [`STAGE`] entries per worker; packets past it are not staged.

use std::sync::atomic::{AtomicUsize, Ordering};

use conntrack::{Endpoint, Key, Proto, SessionTable, Staged, Tuple};

/// Packets staged per batch at most (the live backends' batches are 64).
pub const STAGE: usize = 64;

/// The data cache private to one core, in bytes, when nobody said otherwise (see
/// [`set_private_cache`]): below this working set the table is not staged. Current
/// server cores have 512 KiB-2 MiB of L2 (AMD EPYC Zen 2-4: 512 KiB-1 MiB, Intel Xeon
/// Skylake-SP on: 1-2 MiB); 1 MiB errs towards staging, whose cost in a table that fits
/// is a few percent, while not staging a table that does not fit costs several times over.
pub const PRIVATE_CACHE: usize = 1 << 20;

/// The private cache size workers created from now on stage against.
static PRIVATE: AtomicUsize = AtomicUsize::new(PRIVATE_CACHE);

/// Tells the engine the size of one core's private data cache (the runtime reads it from
/// the machine at start-up, before it creates workers; the engine does no I/O). A machine
/// fact, the same for every worker, hence process-wide.
pub fn set_private_cache(bytes: usize) {
    PRIVATE.store(bytes, Ordering::Relaxed);
}

/// The private cache size workers stage against now.
fn private_cache() -> usize {
    PRIVATE.load(Ordering::Relaxed)
}

/// Packets between two looks at the table's size.
pub const RECHECK: u32 = 256;

/// One worker's staged batch.
#[derive(Debug)]
pub(super) struct Stage {
    /// Per staged packet: its bucket (after stage 2: the first node of its chain),
    /// whether it is TCP (its sequence words are loaded too), and its key.
    at: [(Staged, bool, Key); STAGE],
    /// Packets staged since the last `process`.
    len: usize,
    /// Whether packets are staged now (the table is larger than `above`).
    on: bool,
    /// Packets until the size is looked at again.
    recheck: u32,
    /// Working set in bytes above which packets are staged.
    above: usize,
}

impl Default for Stage {
    fn default() -> Self {
        Self::above(private_cache())
    }
}

impl Stage {
    /// A stage that stages once the table's working set exceeds `bytes` (0: always).
    pub(super) fn above(bytes: usize) -> Self {
        Self {
            at: [(Staged::NONE, false, Key(0, 0)); STAGE],
            len: 0,
            on: false,
            recheck: 0,
            above: bytes,
        }
    }

    /// Stage 1 for one packet: its key hashed, its bucket on the way (when the table
    /// does not fit in the core's private cache).
    #[inline]
    pub(super) fn bucket(&mut self, sessions: &SessionTable, pkt: &[u8]) {
        if self.recheck == 0 {
            self.recheck = RECHECK;
            let set = sessions
                .occupied()
                .saturating_mul(sessions.bytes_per_session());
            self.on = set >= self.above;
        }
        self.recheck -= 1;
        if !self.on {
            return;
        }
        let Some(slot) = self.at.get_mut(self.len) else {
            return;
        };
        *slot = match key_of(pkt) {
            Some((t, tcp)) => {
                let k = Key::of(&t);
                (sessions.prefetch_bucket(k), tcp, k)
            }
            None => (Staged::NONE, false, Key(0, 0)),
        };
        self.len += 1;
    }

    /// Whether stage 2 has work (one compare on every `process`).
    #[inline(always)]
    pub(super) fn pending(&self) -> bool {
        self.len != 0
    }

    /// Stages 2 and 3 for every staged packet: the session lines the buckets point at on
    /// the way, then, where the first node of a chain is another flow's, the next
    /// node's. Empties the stage.
    #[inline(never)]
    pub(super) fn sessions(&mut self, sessions: &SessionTable) {
        let staged = self.at.get_mut(..self.len).unwrap_or_default();
        for (at, tcp, _) in staged.iter_mut() {
            *at = sessions.prefetch_session(*at, *tcp);
        }
        for &(first, tcp, key) in staged.iter() {
            sessions.prefetch_next(first, key, tcp);
        }
        self.len = 0;
    }
}

/// The lookup tuple of a plain TCP or UDP packet (20-byte IPv4 header, not a fragment),
/// read without validation: a wrong guess only wastes a prefetch. Other packets (ICMP,
/// options, fragments) are not staged; they take the full path unhinted.
#[inline(always)]
fn key_of(pkt: &[u8]) -> Option<(Tuple, bool)> {
    let h: &[u8; 24] = pkt.first_chunk::<24>()?;
    if h[0] != 0x45 || h[6] & 0x3f != 0 || h[7] != 0 {
        return None;
    }
    let proto = match h[9] {
        6 => Proto::Tcp,
        17 => Proto::Udp,
        _ => return None,
    };
    let src = std::net::Ipv4Addr::new(h[12], h[13], h[14], h[15]);
    let dst = std::net::Ipv4Addr::new(h[16], h[17], h[18], h[19]);
    let sp = u16::from_be_bytes([h[20], h[21]]);
    let dp = u16::from_be_bytes([h[22], h[23]]);
    Some((
        Tuple::new(proto, Endpoint::new(src, sp), Endpoint::new(dst, dp)),
        proto == Proto::Tcp,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The staged key is the key the full parse looks up, for TCP and UDP; anything the
    /// fast parse would not take is not staged.
    #[test]
    fn staged_key_is_the_parsed_tuple() {
        for proto in [6u8, 17] {
            let mut p = [0u8; 40];
            p[0] = 0x45;
            p[2..4].copy_from_slice(&40u16.to_be_bytes());
            p[8] = 64;
            p[9] = proto;
            p[12..16].copy_from_slice(&[10, 0, 0, 1]);
            p[16..20].copy_from_slice(&[192, 0, 2, 9]);
            p[20..22].copy_from_slice(&1234u16.to_be_bytes());
            p[22..24].copy_from_slice(&80u16.to_be_bytes());
            p[32] = 0x50; // TCP data offset 5
            p[24..26].copy_from_slice(&20u16.to_be_bytes()); // UDP length
            let sum = !wire::checksum::fold(
                (0..10)
                    .map(|i| u32::from(u16::from_be_bytes([p[2 * i], p[2 * i + 1]])))
                    .sum(),
            );
            p[10..12].copy_from_slice(&sum.to_be_bytes());
            let Ok(super::super::parse::Parsed::Flow(f)) =
                super::super::parse::parse_with(&p, true)
            else {
                panic!("test packet must parse as a flow");
            };
            let (t, tcp) = key_of(&p).expect("staged");
            assert_eq!(t, f.tuple);
            assert_eq!(tcp, proto == 6);
            p[7] = 1; // a later fragment: not staged
            assert_eq!(key_of(&p), None);
        }
        assert_eq!(key_of(&[0x45; 10]), None);
    }

    /// A table whose working set is below the threshold is not staged; at or above it,
    /// it is.
    #[test]
    fn stages_only_a_table_beyond_the_cache() {
        let t = SessionTable::new(16);
        let mut p = [0u8; 40];
        p[0] = 0x45;
        p[9] = 17;
        let mut small = Stage::above(1); // an empty table's working set is 0 bytes
        small.bucket(&t, &p);
        assert!(!small.pending(), "a table that fits is not staged");
        let mut big = Stage::above(0);
        big.bucket(&t, &p);
        assert!(big.pending(), "a table at the threshold is staged");
        big.sessions(&t);
        assert!(!big.pending());
    }

    /// More packets than the stage holds: the rest are ignored, nothing panics.
    #[test]
    fn a_full_stage_ignores_the_rest() {
        let t = SessionTable::new(16);
        let mut s = Stage::above(0);
        let p = [0x45u8; 64];
        for _ in 0..STAGE + 10 {
            s.bucket(&t, &p);
        }
        assert!(s.pending());
        s.sessions(&t);
        assert!(!s.pending());
    }
}
