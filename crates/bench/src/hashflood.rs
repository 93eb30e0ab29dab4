//! Hash flooding: new TCP flows from inside hosts whose session keys all land in one
//! bucket of an unkeyed session hash with public constants, against as many random flows.
//! That hash is the attacker's model, written out here ([`old_hash`]): a hash anyone can
//! read in the source lets an attacker put every flow in one chain, so each lookup walks
//! it and the crafted SYNs cost far more than random ones. With the keyed hash (a
//! strongly universal multiply-add-shift under a secret per-process key, see
//! `conntrack::key`) the crafted flows are as spread out as random ones, so the two costs
//! should match (`examples/hashflood.rs` measures the ratio).
//!
//! How the flows are crafted (O(1) each, no search): the unkeyed hash is
//! `mix(w0 * M1 ^ w1 * M2)` with `mix` invertible; any value whose mixed low 20 bits are
//! zero is one bucket of every table up to 2^20 buckets. Pick such a mixed value, invert
//! `mix`, then solve for the fields an inside host controls: the destination address fixes
//! the low 32 bits (`w0`'s low half times odd `M1`), the two ports the high 32 bits
//! (`w1 = ports << 32` times odd `M2`).

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Instant;

use conntrack::Timestamp;
use engine::nat44::Nat44Shared;
use engine::{Direction, Mode};

use crate::run::Driver;
use crate::traffic::{build, config, Rng};

/// A flow: inside source and outside destination endpoints.
pub type Flow = ((Ipv4Addr, u16), (Ipv4Addr, u16));

const M1: u64 = 0x9E37_79B9_7F4A_7C15;
const M2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const M3: u64 = 0xFF51_AFD7_ED55_8CCD;

/// An unkeyed session hash with public constants (the attacker's model): the packed key's
/// two words `w0 = src << 32 | dst`, `w1 = sport << 48 | dport << 32 | proto` (TCP = 0).
pub fn old_hash(w0: u64, w1: u64) -> u64 {
    let mut h = w0.wrapping_mul(M1) ^ w1.wrapping_mul(M2);
    h ^= h >> 31;
    h = h.wrapping_mul(M3);
    h ^ (h >> 29)
}

/// The packed words of a TCP flow (conntrack's `Key` layout).
pub fn words(f: &Flow) -> (u64, u64) {
    let ((s, sp), (d, dp)) = *f;
    (
        (u64::from(u32::from(s)) << 32) | u64::from(u32::from(d)),
        (u64::from(sp) << 48) | (u64::from(dp) << 32),
    )
}

/// The multiplicative inverse of odd `m` modulo 2^64 (Newton's iteration).
fn inverse(m: u64) -> u64 {
    let mut x = m;
    for _ in 0..6 {
        x = x.wrapping_mul(2u64.wrapping_sub(m.wrapping_mul(x)));
    }
    x
}

/// An outside address a NAT44 forwards to: not ours, not special-purpose.
fn routable(a: u32) -> bool {
    let o = a >> 24;
    !(o == 0
        || o == 10
        || o == 127
        || o >= 224
        || a >> 22 == 0x6440_0000 >> 22 // 100.64/10
        || a >> 16 == 0xA9FE // 169.254/16
        || a >> 8 == 0xCB_0071) // 203.0.113/24, the benchmark's pool
}

/// The inside host of flow `i` (16 flows each, from 10.1.0.1 on).
fn host(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(0x0A01_0001 + (i / 16) as u32)
}

/// `n` TCP flows whose old hashes all share their low 20 bits (one bucket of any table
/// of up to 2^20 buckets), from inside hosts of 16 flows each.
pub fn colliding_flows(n: usize) -> Vec<Flow> {
    const B: u32 = 20;
    let (inv1, inv2, inv3) = (
        inverse(M1) as u32,
        inverse(M2 & 0xffff_ffff) as u32,
        inverse(M3),
    );
    let mut out = Vec::with_capacity(n);
    let mut c = 0u64;
    while out.len() < n {
        let src = host(out.len());
        // A mixed value with bits 0..B and 29..29+B clear: `g ^ (g >> 29)` has its low B
        // bits clear. Free bits: B..29 and 29+B..64.
        let g = ((c & 0x1ff) << B) | ((c >> 9) << (29 + B));
        c += 1;
        let f = g.wrapping_mul(inv3);
        let h = f ^ (f >> 31) ^ (f >> 62);
        // Low half: w0 * M1's low 32 bits are dst * M1's (src sits above them).
        let dst = (h as u32).wrapping_mul(inv1);
        let w0 = (u64::from(u32::from(src)) << 32) | u64::from(dst);
        // High half: (w0 * M1)'s high 32 bits xor (ports * M2)'s low 32 bits.
        let ports = (((h >> 32) as u32) ^ ((w0.wrapping_mul(M1) >> 32) as u32)).wrapping_mul(inv2);
        let (sport, dport) = ((ports >> 16) as u16, ports as u16);
        if sport < 1024 || dport == 0 || !routable(dst) {
            continue;
        }
        out.push(((src, sport), (Ipv4Addr::from(dst), dport)));
    }
    out
}

/// `n` random TCP flows from the same inside hosts.
pub fn random_flows(n: usize) -> Vec<Flow> {
    let mut rng = Rng(0x00F1_00D5_EED5);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let r = rng.next_u64();
        let (dst, sport, dport) = (r as u32, (r >> 32) as u16, (r >> 48) as u16);
        if sport < 1024 || dport == 0 || !routable(dst) {
            continue;
        }
        out.push(((host(out.len()), sport), (Ipv4Addr::from(dst), dport)));
    }
    out
}

/// A TCP packet of `f` (outbound) with `flags`, checksums valid.
pub fn packet(f: &Flow, flags: u8) -> Vec<u8> {
    let mut v = Vec::with_capacity(40);
    build(&mut v, true, f.0, f.1, 40);
    v[33] = flags;
    v[36] = 0;
    v[37] = 0;
    let c = !wire::checksum::fold(wire::checksum::combine(
        wire::checksum::pseudo_header_v4(f.0 .0.octets(), f.1 .0.octets(), 6, 20),
        wire::checksum::sum(&v[20..40]),
    ));
    v[36..38].copy_from_slice(&c.to_be_bytes());
    v
}

/// What one run of [`run`] cost.
#[derive(Clone, Copy, Debug, Default)]
pub struct FloodCost {
    /// Nanoseconds per SYN (each a new session: lookup, binding, insert).
    pub syn_ns: f64,
    /// Nanoseconds per packet of the established flows (two ACKs per flow afterwards).
    pub established_ns: f64,
    /// SYNs forwarded (a session was made).
    pub admitted: usize,
}

/// A fresh NAT44 engine (table sized for the flows, as `quicknat-bench` sizes it), every
/// flow's SYN through one worker, then two ACKs per flow: the cost of each phase.
pub fn run(flows: &[Flow]) -> FloodCost {
    let n = flows.len();
    let shared: Arc<Nat44Shared> =
        Nat44Shared::new(config(1, n + n / 4 + 1024), 1).expect("benchmark config is valid");
    let mut w = Mode::worker(&shared, 0);
    let mut driver = Driver::new();
    let now = Timestamp::from_secs(1000);
    let mut syns: Vec<Vec<u8>> = flows.iter().map(|f| packet(f, 0x02)).collect();
    let acks: Vec<Vec<u8>> = flows.iter().map(|f| packet(f, 0x10)).collect();
    let mut admitted = 0;
    let t0 = Instant::now();
    for (i, p) in syns.iter_mut().enumerate() {
        if driver
            .process_all(&mut w, now, Direction::Outbound, p)
            .is_forward()
        {
            admitted += 1;
        }
        if i % 32 == 31 {
            w.quiescent();
        }
    }
    let syn_ns = t0.elapsed().as_nanos() as f64 / n.max(1) as f64;
    let mut buf = Vec::with_capacity(64);
    let t1 = Instant::now();
    for round in 0..2 {
        for (i, p) in acks.iter().enumerate() {
            buf.clear();
            buf.extend_from_slice(p);
            std::hint::black_box(driver.process_all(&mut w, now, Direction::Outbound, &mut buf));
            if (round * n + i) % 32 == 31 {
                w.quiescent();
            }
        }
    }
    let established_ns = t1.elapsed().as_nanos() as f64 / (2 * n).max(1) as f64;
    w.offline();
    FloodCost {
        syn_ns,
        established_ns,
        admitted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crafted flows really are one bucket of the unkeyed hash (so the benchmark attacks
    /// what it claims to), and are distinct, routable TCP flows.
    #[test]
    fn crafted_flows_collide_under_the_old_hash() {
        let flows = colliding_flows(5000);
        let mut seen = std::collections::HashSet::new();
        for f in &flows {
            let (w0, w1) = words(f);
            assert_eq!(old_hash(w0, w1) & 0xf_ffff, 0, "{f:?}");
            assert!(seen.insert(*f), "duplicate flow {f:?}");
            assert!(routable(u32::from(f.1 .0)));
        }
        let spread: std::collections::HashSet<_> = random_flows(5000)
            .iter()
            .map(|f| {
                let (w0, w1) = words(f);
                old_hash(w0, w1) & 0xf_ffff
            })
            .collect();
        assert!(spread.len() > 4900, "random flows spread: {}", spread.len());
    }

    /// Every crafted SYN makes a session on the keyed table (none is refused as a full
    /// chain, which a collision would cause).
    #[test]
    fn crafted_syns_are_all_admitted() {
        let c = run(&colliding_flows(2000));
        assert_eq!(c.admitted, 2000);
    }
}
