//! Which gateway serves which subscribers: the cluster's ownership plan, pure arithmetic
//! (no I/O), so the lab, its tests and an operator's script compute the same thing.
//!
//! Deterministic NAT (RFC 7422) gives each public address a block of `R` consecutive inside
//! addresses (`public = outside + (i >> log2 R)`). A **block** is one public /32 and its
//! inside block of `R` addresses: the smallest unit that can move between gateways without
//! changing anyone's public endpoint. Each block is ranked over the gateways by rendezvous
//! (highest random weight) hashing of (block, gateway name): the first is its primary, the
//! second its backup. Blocks with the same ordered (primary, backup) pair form a **slice**;
//! there are `N·(N−1)` slices, so when a gateway dies its blocks spread over every
//! survivor (each survivor is the backup of some of them), and a slice's routing table on
//! the inside router needs only two candidate next hops.
//!
//! Rendezvous hashing is what keeps the plan stable when the cluster grows: adding a
//! gateway moves only the blocks it now ranks first on (about 1/N of them), none between
//! old gateways.

use std::net::Ipv4Addr;

/// One public address and the inside addresses deterministic NAT maps to it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Block {
    /// The block's index: public address − outside prefix.
    pub id: u32,
    /// First inside address of the block.
    pub inside: Ipv4Addr,
    /// Inside prefix length (32 − log2 R).
    pub inside_len: u8,
    /// The public address (a /32).
    pub public: Ipv4Addr,
    /// Gateway index that announces it plainly.
    pub primary: usize,
    /// Gateway index that announces it as standby (AS path prepended).
    pub backup: usize,
    /// Its slice: the index of the (primary, backup) pair.
    pub slice: usize,
}

/// The cluster's plan: gateways, blocks and slices.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Plan {
    /// Gateway names, the HRW keys.
    pub gateways: Vec<String>,
    /// Every block, in public-address order.
    pub blocks: Vec<Block>,
    /// Slice `s`'s (primary, backup) pair.
    pub slices: Vec<(usize, usize)>,
}

/// The rendezvous weight of `block` on the gateway `name`: FNV-1a of the name, mixed with the
/// block id by splitmix64's finaliser. Fixed forever: any tool computing the plan must agree.
pub fn weight(block: u32, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let mut z = h ^ u64::from(block).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Slice index of the ordered pair (`p`, `b`), `p != b`, among `n` gateways.
pub fn slice_of(p: usize, b: usize, n: usize) -> usize {
    p * (n - 1) + if b > p { b - 1 } else { b }
}

impl Plan {
    /// The plan for `inside` (prefix `inside_len`) behind `outside` (prefix `outside_len`)
    /// over `gateways` (at least 2). Fails when the prefixes do not give a power-of-two
    /// sharing ratio of at least 1.
    pub fn new(
        inside: Ipv4Addr,
        inside_len: u8,
        outside: Ipv4Addr,
        outside_len: u8,
        gateways: &[String],
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(gateways.len() >= 2, "a cluster needs at least 2 gateways");
        anyhow::ensure!(
            inside_len <= 32 && outside_len <= 32 && outside_len >= inside_len,
            "the inside prefix must be at least as large as the outside prefix"
        );
        anyhow::ensure!(outside_len >= 16, "outside prefix larger than a /16");
        let n = gateways.len();
        let shift = outside_len - inside_len;
        let blocks = (0..(1u32 << (32 - outside_len)))
            .map(|id| {
                let mut ranked: Vec<usize> = (0..n).collect();
                ranked.sort_by_key(|&g| std::cmp::Reverse((weight(id, &gateways[g]), g)));
                let (primary, backup) = (ranked[0], ranked[1]);
                Block {
                    id,
                    inside: Ipv4Addr::from(u32::from(inside) + (id << shift)),
                    inside_len: 32 - shift,
                    public: Ipv4Addr::from(u32::from(outside) + id),
                    primary,
                    backup,
                    slice: slice_of(primary, backup, n),
                }
            })
            .collect();
        let slices = (0..n)
            .flat_map(|p| (0..n).filter(move |&b| b != p).map(move |b| (p, b)))
            .collect();
        Ok(Plan {
            gateways: gateways.to_vec(),
            blocks,
            slices,
        })
    }

    /// The block serving subscriber `addr`, if it is one.
    pub fn block_of(&self, addr: Ipv4Addr) -> Option<&Block> {
        let first = self.blocks.first()?;
        let i = u32::from(addr).checked_sub(u32::from(first.inside))?;
        self.blocks.get((i >> (32 - first.inside_len)) as usize)
    }

    /// The gateway serving `addr` while the gateways in `dead` are down: its primary, else
    /// its backup (`None`: both down).
    pub fn serving(&self, addr: Ipv4Addr, dead: &[usize]) -> Option<usize> {
        let b = self.block_of(addr)?;
        [b.primary, b.backup]
            .into_iter()
            .find(|g| !dead.contains(g))
    }

    /// Public /32s gateway `g` announces plainly (its primaries) and as standby (backups).
    pub fn announced(&self, g: usize) -> (Vec<Ipv4Addr>, Vec<Ipv4Addr>) {
        let pick = |f: &dyn Fn(&Block) -> bool| {
            self.blocks
                .iter()
                .filter(|b| f(b))
                .map(|b| b.public)
                .collect()
        };
        (pick(&|b| b.primary == g), pick(&|b| b.backup == g))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("gw{i}")).collect()
    }

    fn plan(n: usize) -> Plan {
        Plan::new(
            Ipv4Addr::new(100, 64, 0, 0),
            22,
            Ipv4Addr::new(203, 0, 113, 0),
            24,
            &names(n),
        )
        .unwrap()
    }

    #[test]
    fn every_subscriber_has_one_block_whose_public_address_matches_rfc7422() {
        let p = plan(3);
        assert_eq!(p.blocks.len(), 256);
        for i in 0..1024u32 {
            let a = Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 0)) + i);
            let b = p.block_of(a).unwrap();
            // RFC 7422 with R = 4: public = outside + (i >> 2).
            assert_eq!(
                b.public,
                Ipv4Addr::from(u32::from(Ipv4Addr::new(203, 0, 113, 0)) + (i >> 2))
            );
            assert_eq!(b.inside_len, 30);
            assert_ne!(b.primary, b.backup);
            assert_eq!(p.slices[b.slice], (b.primary, b.backup));
        }
        assert_eq!(p.block_of(Ipv4Addr::new(100, 64, 4, 0)), None);
        assert_eq!(p.block_of(Ipv4Addr::new(10, 0, 0, 1)), None);
    }

    #[test]
    fn slices_are_every_ordered_pair_once() {
        for n in 2..=5 {
            let p = plan(n);
            assert_eq!(p.slices.len(), n * (n - 1));
            for (s, &(a, b)) in p.slices.iter().enumerate() {
                assert_eq!(slice_of(a, b, n), s);
            }
        }
    }

    #[test]
    fn a_dead_gateways_blocks_spread_over_every_survivor() {
        let p = plan(3);
        for dead in 0..3 {
            let mut took = [0usize; 3];
            for b in p.blocks.iter().filter(|b| b.primary == dead) {
                took[b.backup] += 1;
            }
            for g in (0..3).filter(|&g| g != dead) {
                assert!(
                    took[g] > 0,
                    "gateway {g} takes none of {dead}'s blocks: {took:?}"
                );
            }
        }
    }

    #[test]
    fn adding_a_gateway_moves_only_blocks_to_it() {
        let (p3, p4) = (plan(3), plan(4));
        for (a, b) in p3.blocks.iter().zip(&p4.blocks) {
            assert!(a.primary == b.primary || b.primary == 3, "{a:?} -> {b:?}");
        }
    }

    #[test]
    fn primaries_spread_near_evenly() {
        for n in 2..=3 {
            let p = plan(n);
            let mut per = vec![0usize; n];
            for b in &p.blocks {
                per[b.primary] += 1;
            }
            let (max, min) = (per.iter().max().unwrap(), per.iter().min().unwrap());
            assert!(*max as f64 / *min as f64 <= 1.3, "{n} gateways: {per:?}");
        }
    }
}
