//! The NAT rule table, searched by hashing instead of a sequential scan (Quick NAT's rule
//! search): one hash probe per distinct prefix length, longest length first, so the first
//! hit is the longest match. Cost grows with the number of distinct lengths (at most 33),
//! not with the number of rules.

use std::hash::BuildHasherDefault;
use std::net::Ipv4Addr;

use hashbrown::HashMap;
use rustc_hash::FxHasher;

use xlat::prefix::{mask, Ipv4Prefix};

/// Inside prefix -> rule index, searched longest prefix first.
#[derive(Debug, Default, Clone)]
pub struct RuleTable {
    /// Distinct prefix lengths, longest first.
    lens: Vec<u8>,
    /// (length, masked address) -> rule index.
    map: HashMap<u64, u32, BuildHasherDefault<FxHasher>>,
}

#[inline]
fn key(len: u8, masked: u32) -> u64 {
    (u64::from(masked) << 8) | u64::from(len)
}

impl RuleTable {
    /// Builds the table from rules' inside prefixes (index = position). Later duplicates
    /// of a prefix are ignored (config validation refuses them anyway).
    pub fn new<'a>(prefixes: impl IntoIterator<Item = &'a Ipv4Prefix>) -> Self {
        let mut t = RuleTable::default();
        for (i, p) in prefixes.into_iter().enumerate() {
            t.map
                .entry(key(p.len(), u32::from(p.addr())))
                .or_insert(i as u32);
            if !t.lens.contains(&p.len()) {
                t.lens.push(p.len());
            }
        }
        t.lens.sort_unstable_by(|a, b| b.cmp(a));
        t
    }

    /// The rule whose inside prefix is the longest match for `ip`.
    #[inline]
    pub fn lookup(&self, ip: Ipv4Addr) -> Option<u32> {
        let a = u32::from(ip);
        self.lens
            .iter()
            .find_map(|&len| self.map.get(&key(len, a & mask(len))).copied())
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there is no rule.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Number of distinct prefix lengths (= hash probes on a miss).
    pub fn probes(&self) -> usize {
        self.lens.len()
    }
}

/// The reference the hashed search is checked against (and benchmarked against): scan
/// every rule, keep the longest match, first one on ties.
pub fn linear_lookup(prefixes: &[Ipv4Prefix], ip: Ipv4Addr) -> Option<u32> {
    let mut best: Option<(u8, u32)> = None;
    for (i, p) in prefixes.iter().enumerate() {
        if p.contains(ip) && best.is_none_or(|(l, _)| p.len() > l) {
            best = Some((p.len(), i as u32));
        }
    }
    best.map(|(_, i)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn longest_prefix_wins() {
        let p: Vec<Ipv4Prefix> = ["10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "0.0.0.0/0"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let t = RuleTable::new(&p);
        assert_eq!(t.lookup(Ipv4Addr::new(10, 1, 2, 3)), Some(2));
        assert_eq!(t.lookup(Ipv4Addr::new(10, 1, 3, 3)), Some(1));
        assert_eq!(t.lookup(Ipv4Addr::new(10, 2, 0, 1)), Some(0));
        assert_eq!(t.lookup(Ipv4Addr::new(192, 0, 2, 1)), Some(3));
        assert_eq!(t.probes(), 4);
    }

    /// Thousands of random rules: the hashed search and the linear reference agree on every
    /// probe address, including addresses drawn from inside the rules.
    #[test]
    fn hashed_matches_linear_on_thousands_of_random_rules() {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        for round in 0..4 {
            let n = 1000 + round * 1500;
            let mut prefixes = Vec::new();
            let mut seen = std::collections::HashSet::new();
            while prefixes.len() < n {
                let len = (rng.next_u32() % 25 + 8) as u8;
                let addr = rng.next_u32() & mask(len) & 0x0FFF_FFFF; // clustered: more nesting
                let p = Ipv4Prefix::new(Ipv4Addr::from(addr), len).unwrap();
                if seen.insert(p) {
                    prefixes.push(p);
                }
            }
            let t = RuleTable::new(&prefixes);
            for i in 0..20_000 {
                let ip = if i % 2 == 0 {
                    let p = prefixes[rng.next_u32() as usize % prefixes.len()];
                    p.nth(u64::from(rng.next_u32()))
                } else {
                    Ipv4Addr::from(rng.next_u32() & 0x0FFF_FFFF)
                };
                assert_eq!(t.lookup(ip), linear_lookup(&prefixes, ip), "ip {ip}");
            }
        }
    }

    /// A tiny deterministic generator so the test needs no extra crates.
    struct XorShift(u64);
    impl XorShift {
        fn next_u32(&mut self) -> u32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 32) as u32
        }
    }

    proptest! {
        #[test]
        fn agree_on_any_rule_set(raw in proptest::collection::vec((any::<u32>(), 0u8..=32), 0..200), probes in proptest::collection::vec(any::<u32>(), 1..50)) {
            let mut prefixes = Vec::new();
            for (a, l) in raw {
                let p = Ipv4Prefix::new(Ipv4Addr::from(a & mask(l)), l).unwrap();
                if !prefixes.contains(&p) { prefixes.push(p); }
            }
            let t = RuleTable::new(&prefixes);
            for ip in probes {
                let ip = Ipv4Addr::from(ip);
                prop_assert_eq!(t.lookup(ip), linear_lookup(&prefixes, ip));
            }
        }
    }
}
