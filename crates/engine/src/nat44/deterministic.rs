//! Deterministic NAT (RFC 7422): the mapping from a subscriber to its public address and
//! port range, and back, as pure functions of the configuration alone.
//!
//! RFC 7422 §2: with `inside` the subscribers' prefix, `outside` the public addresses and
//! `R = |inside| / |outside|` (the sharing ratio, a power of two because both are
//! prefixes), subscriber `i = inside_addr - inside_base` is seen as
//!
//! ```text
//! public address = outside_base + i / R
//! port range     = [1024 + (i mod R) * pps, 1024 + (i mod R + 1) * pps)
//! ```
//!
//! with `pps` ports per subscriber (default `floor(64512 / R)`). The reverse, (public
//! address, port) -> subscriber, is what an abuse desk asks: no log is needed, and every
//! node with the same configuration computes the same answer.
//!
//! The port a new flow gets is reproducible too ([`DetMap::first_choice`]): the engine
//! first tries `first + (inside_port mod pps)` and probes upward, wrapping inside the
//! range, so a node taking over a failed one gives a restarted UDP flow the same public
//! endpoint whenever that port is free there (it is on a fresh node).
//!
//! The mapping ([`DetMap`]) never allocates and never panics on any address or port; the
//! engine's side (validation against the rest of `[nat44]`, the port choice) follows it.

use std::net::Ipv4Addr;

use xlat::prefix::Ipv4Prefix;

use crate::config::{ConfigError, ConfigItem};

/// The first port deterministic NAT hands out (ports below are never shared).
pub const FIRST_PORT: u16 = 1024;
/// Ports per public address shared among its subscribers: 1024..=65535.
pub const PORTS: u32 = 65536 - FIRST_PORT as u32;
/// Largest sharing ratio: every subscriber needs at least one port.
pub const MAX_RATIO: u32 = 32_768;

/// The `[nat44.deterministic]` settings as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deterministic {
    /// The subscribers: each address is one subscriber.
    pub inside: Ipv4Prefix,
    /// The public addresses they share.
    pub outside: Ipv4Prefix,
    /// Ports per subscriber; `None`: `floor(64512 / R)`.
    pub ports_per_subscriber: Option<u32>,
}

/// One subscriber's public address and port range (`first..first + len`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DetRange {
    /// The public address.
    pub public: Ipv4Addr,
    /// First port of the range.
    pub first: u16,
    /// Ports in the range (`ports_per_subscriber`).
    pub len: u16,
}

impl DetRange {
    /// The last port of the range (inclusive).
    pub fn last(&self) -> u16 {
        // first + len - 1 <= 65535 by construction (R * pps <= 64512).
        (u32::from(self.first) + u32::from(self.len) - 1) as u16
    }

    /// Whether `port` lies in the range.
    pub fn contains(&self, port: u16) -> bool {
        (self.first..=self.last()).contains(&port)
    }
}

/// The mapping of a validated [`Deterministic`] configuration, both ways.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DetMap {
    inside: Ipv4Prefix,
    outside: Ipv4Prefix,
    /// log2 of the sharing ratio R.
    shift: u32,
    /// Ports per subscriber (1..=64512 / R).
    pps: u32,
}

const fn item(field: &'static str) -> ConfigItem {
    ConfigItem::Table("deterministic", field)
}

impl DetMap {
    /// Checks `d` and builds its mapping. Refused: fewer inside addresses than outside
    /// ones (R < 1), an outside prefix larger than a /8, prefixes that overlap, 0 ports
    /// per subscriber, or `R * ports_per_subscriber` beyond the 64,512 ports 1024-65535.
    pub fn new(d: &Deterministic) -> Result<Self, ConfigError> {
        let (inside, outside) = (d.inside, d.outside);
        if outside.len() < 8 {
            return Err(ConfigError::new(
                item("outside"),
                format!("{outside} is larger than a /8"),
            ));
        }
        if inside.overlaps(&outside) {
            return Err(ConfigError::new(
                item("outside"),
                format!("{outside} overlaps the inside prefix {inside}"),
            ));
        }
        // Both are prefixes, so R = 2^(outside len - inside len) is a power of two.
        let Some(shift) = u32::from(outside.len()).checked_sub(u32::from(inside.len())) else {
            return Err(ConfigError::new(
                item("outside"),
                format!(
                    "{outside} has more addresses than the inside prefix {inside}: the \
                     sharing ratio would be below 1"
                ),
            ));
        };
        if shift > MAX_RATIO.trailing_zeros() {
            return Err(ConfigError::new(
                item("inside"),
                format!(
                    "{inside} behind {outside} is a sharing ratio of 2^{shift}: at most \
                     {MAX_RATIO} subscribers can share one address's {PORTS} ports"
                ),
            ));
        }
        let ratio = 1u32 << shift;
        let pps = d.ports_per_subscriber.unwrap_or(PORTS / ratio);
        if pps == 0 || u64::from(pps) * u64::from(ratio) > u64::from(PORTS) {
            return Err(ConfigError::new(
                item("ports_per_subscriber"),
                format!(
                    "{pps}: must be between 1 and {} (sharing ratio {ratio} x ports per \
                     subscriber must fit in the {PORTS} ports 1024-65535)",
                    PORTS / ratio
                ),
            ));
        }
        Ok(Self {
            inside,
            outside,
            shift,
            pps,
        })
    }

    /// The subscribers' prefix.
    pub fn inside(&self) -> Ipv4Prefix {
        self.inside
    }

    /// The public prefix.
    pub fn outside(&self) -> Ipv4Prefix {
        self.outside
    }

    /// The sharing ratio R: subscribers per public address.
    pub fn ratio(&self) -> u32 {
        1 << self.shift
    }

    /// Ports per subscriber.
    pub fn ports_per_subscriber(&self) -> u16 {
        self.pps as u16
    }

    /// Whether `addr` is one of the subscribers.
    #[inline]
    pub fn contains_inside(&self, addr: Ipv4Addr) -> bool {
        self.inside.contains(addr)
    }

    /// Whether `addr` is one of the public addresses.
    #[inline]
    pub fn contains_public(&self, addr: Ipv4Addr) -> bool {
        self.outside.contains(addr)
    }

    /// RFC 7422 §2, forward: the public address and port range of subscriber `inside`;
    /// `None` when it is not in the inside prefix.
    #[inline]
    pub fn forward(&self, inside: Ipv4Addr) -> Option<DetRange> {
        if !self.inside.contains(inside) {
            return None;
        }
        let i = u32::from(inside) - u32::from(self.inside.addr());
        let public = Ipv4Addr::from(u32::from(self.outside.addr()) + (i >> self.shift));
        let k = i & (self.ratio() - 1);
        Some(DetRange {
            public,
            first: (u32::from(FIRST_PORT) + k * self.pps) as u16,
            len: self.pps as u16,
        })
    }

    /// RFC 7422 §2, reverse: the one subscriber that holds `port` on `public`; `None`
    /// for an address outside the public prefix, a port below 1024, or a port past the
    /// last subscriber's range (never handed out).
    #[inline]
    pub fn reverse(&self, public: Ipv4Addr, port: u16) -> Option<Ipv4Addr> {
        if !self.outside.contains(public) || port < FIRST_PORT {
            return None;
        }
        let k = u32::from(port - FIRST_PORT) / self.pps;
        if k >= self.ratio() {
            return None;
        }
        let a = u32::from(public) - u32::from(self.outside.addr());
        let i = (a << self.shift) | k;
        Some(Ipv4Addr::from(u32::from(self.inside.addr()) + i))
    }

    /// The port a new flow from `inside_port` tries first in `range`:
    /// `first + (inside_port mod pps)`. The engine probes upward from there, wrapping
    /// inside the range, so any node computes the same first choice.
    #[inline]
    pub fn first_choice(&self, range: &DetRange, inside_port: u16) -> u16 {
        (u32::from(range.first) + u32::from(inside_port) % self.pps) as u16
    }
}

// -- the engine's side: validation against the rest of `[nat44]`, the port choice --

impl super::Nat44Config {
    /// `[nat44.deterministic]` against the rest of the configuration. Dynamic rules,
    /// static mappings and port forwards may sit beside it for other prefixes and
    /// addresses: its inside prefix may not overlap a rule's inside prefix or a static
    /// mapping's inside address, and its public prefix may not overlap a rule's pool, a
    /// static mapping's public address or a port forward's public address (those ports
    /// belong to the subscribers).
    pub(super) fn validate_deterministic(&self) -> Result<(), ConfigError> {
        let Some(d) = &self.deterministic else {
            return Ok(());
        };
        let m = DetMap::new(d)?;
        let (inside, outside) = (m.inside(), m.outside());
        for (i, r) in self.rules.iter().enumerate() {
            if r.inside.overlaps(&inside) || r.inside.overlaps(&outside) {
                return Err(ConfigError::new(
                    item("inside"),
                    format!(
                        "{inside} (or the public {outside}) overlaps the inside prefix {} of \
                         rule {}: a subscriber is either deterministic or dynamic",
                        r.inside,
                        i + 1
                    ),
                ));
            }
            if let Some(p) = r
                .pool
                .iter()
                .find(|p| p.overlaps(&outside) || p.overlaps(&inside))
            {
                return Err(ConfigError::new(
                    item("outside"),
                    format!(
                        "{outside} (or {inside}) overlaps pool {p} of rule {}",
                        i + 1
                    ),
                ));
            }
        }
        for (i, s) in self.static_nat.iter().enumerate() {
            if inside.contains(s.inside) || outside.contains(s.inside) {
                return Err(ConfigError::new(
                    ConfigItem::Entry("static", i, "inside"),
                    format!("{} is in the deterministic prefixes", s.inside),
                ));
            }
            if outside.contains(s.public) || inside.contains(s.public) {
                return Err(ConfigError::new(
                    ConfigItem::Entry("static", i, "public"),
                    format!("{} is in the deterministic prefixes", s.public),
                ));
            }
        }
        for (i, f) in self.port_forwards.iter().enumerate() {
            if outside.contains(*f.public.ip()) || inside.contains(*f.public.ip()) {
                return Err(ConfigError::new(
                    ConfigItem::Entry("forward", i, "public"),
                    format!(
                        "{} is in the deterministic prefixes: its ports belong to subscribers",
                        f.public.ip()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// What the deterministic pool costs: like a dynamic pool, per public address in use,
    /// and its reuse hold.
    pub(super) fn deterministic_memory(&self, m: &mut crate::config::MemoryEstimate) {
        if let Some(d) = &self.deterministic {
            let in_use = d.outside.size().min(self.max_sessions as u64);
            m.add(
                "pool ports",
                item("outside"),
                usize::try_from(in_use)
                    .unwrap_or(usize::MAX)
                    .saturating_mul(super::POOL_BYTES_PER_ADDRESS_IN_USE),
            );
            let size = d.outside.size();
            super::config::port_hold(m, item("outside"), size, PORTS, self.max_sessions);
        }
    }
}

/// The pool a deterministic configuration's ports are taken from: its public addresses,
/// ports 1024-65535, the usual reuse hold (bounded as a dynamic pool's); no port blocks
/// (the ranges are the blocks).
pub(super) fn det_pool(
    m: &DetMap,
    cfg: &super::Nat44Config,
    workers: usize,
) -> std::sync::Arc<conntrack::PortPool> {
    let o = m.outside();
    std::sync::Arc::new(
        conntrack::PortPool::from_ranges(
            vec![(o.nth(0), o.nth(o.size() - 1))],
            FIRST_PORT,
            u16::MAX,
            cfg.port_reuse_hold,
            workers,
        )
        .with_hold_capacity(cfg.max_sessions),
    )
}

impl super::Nat44Shared {
    /// The deterministic mapping in force, if any.
    pub fn deterministic(&self) -> Option<&DetMap> {
        self.det.as_ref()
    }

    /// The range of `inside` when rule index `rule` (from the rule table) is the
    /// deterministic prefix's: it is the index after the dynamic rules.
    #[inline]
    pub(super) fn det_range(&self, rule: u32, inside: Ipv4Addr) -> Option<DetRange> {
        if rule as usize != self.cfg.rules.len() {
            return None;
        }
        self.det.as_ref()?.forward(inside)
    }

    /// A new binding's public endpoint for deterministic subscriber `inside`: a free port
    /// of its own range, the search starting at [`DetMap::first_choice`] and going up,
    /// wrapping inside the range. The port is counted for the subscriber (unlimited: the
    /// range is its limit); a full range is a `subscriber_limit` drop.
    pub(super) fn det_allocate(
        &self,
        pool: &conntrack::PortPool,
        proto: conntrack::Proto,
        inside: conntrack::Endpoint,
        range: DetRange,
    ) -> Result<conntrack::Allocated, crate::verdict::DropReason> {
        use crate::verdict::DropReason;
        let Some(m) = &self.det else {
            return Err(DropReason::NoRule);
        };
        self.acquire_host_unlimited(conntrack::Counted::Ports(proto), inside.addr)?;
        let start = m.first_choice(&range, inside.port);
        match pool.allocate_in_range(proto, range.public, range.first, range.len, start) {
            Some(public) => Ok(conntrack::Allocated {
                public,
                block: None,
            }),
            None => {
                self.release_host(conntrack::Counted::Ports(proto), inside.addr);
                Err(DropReason::SubscriberLimit)
            }
        }
    }
}

impl crate::any::AnyMode {
    /// The deterministic NAT mapping of a NAT44 gateway, for `status`.
    pub fn deterministic(&self) -> Option<DetMap> {
        match self {
            crate::any::AnyMode::Nat44(s) => s.current().deterministic().copied(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn map(inside: &str, outside: &str, pps: Option<u32>) -> Result<DetMap, ConfigError> {
        DetMap::new(&Deterministic {
            inside: inside.parse().unwrap(),
            outside: outside.parse().unwrap(),
            ports_per_subscriber: pps,
        })
    }

    /// A worked example: a /22 behind a /28 is R = 64 and 1008 ports each.
    #[test]
    fn the_example_configuration() {
        let m = map("100.64.0.0/22", "203.0.113.0/28", None).unwrap();
        assert_eq!(m.ratio(), 64);
        assert_eq!(m.ports_per_subscriber(), 1008);
        let r = m.forward(Ipv4Addr::new(100, 64, 0, 0)).unwrap();
        assert_eq!(
            (r.public, r.first, r.last()),
            ("203.0.113.0".parse().unwrap(), 1024, 2031)
        );
        let r = m.forward(Ipv4Addr::new(100, 64, 0, 65)).unwrap();
        assert_eq!((r.public, r.first), ("203.0.113.1".parse().unwrap(), 2032));
        let r = m.forward(Ipv4Addr::new(100, 64, 3, 255)).unwrap();
        assert_eq!(r.public, Ipv4Addr::new(203, 0, 113, 15));
        assert_eq!((r.first, r.last()), (1024 + 63 * 1008, 65535));
        assert_eq!(m.forward(Ipv4Addr::new(100, 64, 4, 0)), None);
        assert_eq!(
            m.reverse(Ipv4Addr::new(203, 0, 113, 1), 2032),
            Some(Ipv4Addr::new(100, 64, 0, 65))
        );
        assert_eq!(m.reverse(Ipv4Addr::new(203, 0, 113, 1), 1023), None);
        assert_eq!(m.reverse(Ipv4Addr::new(203, 0, 113, 16), 2032), None);
        // 1008 ports of a smaller setting leave the top of the port space unused.
        let m = map("100.64.0.0/22", "203.0.113.0/28", Some(500)).unwrap();
        assert_eq!(
            m.reverse(Ipv4Addr::new(203, 0, 113, 0), 1024 + 64 * 500),
            None
        );
        assert_eq!(
            m.reverse(Ipv4Addr::new(203, 0, 113, 0), 1024 + 64 * 500 - 1),
            Some(Ipv4Addr::new(100, 64, 0, 63))
        );
    }

    #[test]
    fn bad_configurations_name_the_field() {
        let e = map("100.64.0.0/30", "203.0.113.0/28", None).unwrap_err();
        assert_eq!(e.item, item("outside"));
        assert!(e.message.contains("below 1"), "{e}");
        let e = map("100.64.0.0/22", "203.0.113.0/28", Some(1009)).unwrap_err();
        assert_eq!(e.item, item("ports_per_subscriber"));
        assert!(e.message.contains("between 1 and 1008"), "{e}");
        let e = map("100.64.0.0/22", "203.0.113.0/28", Some(0)).unwrap_err();
        assert_eq!(e.item, item("ports_per_subscriber"));
        let e = map("10.0.0.0/8", "203.0.113.0/24", None).unwrap_err();
        assert_eq!(e.item, item("inside"));
        assert!(e.message.contains("at most 32768"), "{e}");
        let e = map("10.0.0.0/16", "10.0.1.0/24", None).unwrap_err();
        assert!(e.message.contains("overlaps"), "{e}");
        let e = map("0.0.0.0/4", "100.0.0.0/7", None).unwrap_err();
        assert!(e.message.contains("larger than a /8"), "{e}");
        // R = 32768: two ports each at most, one by default... 64512 / 32768 = 1.
        let m = map("10.0.0.0/9", "203.0.113.0/24", None).unwrap();
        assert_eq!((m.ratio(), m.ports_per_subscriber()), (32_768, 1));
    }

    /// Every inside address of a configuration: reverse(forward(a)) = a at every port of
    /// its range, the ranges of an address's subscribers never overlap, and the first
    /// choice lies in the range.
    fn check_all(m: &DetMap) {
        let n = m.inside().size();
        let mut next_first: std::collections::HashMap<Ipv4Addr, u32> = Default::default();
        for i in 0..n {
            let a = m.inside().nth(i);
            let r = m.forward(a).unwrap();
            assert!(m.contains_public(r.public));
            assert_eq!(u32::from(r.len), m.pps);
            assert!(r.first >= FIRST_PORT);
            // Subscribers of one address come in order, each range right after the last.
            let expect = next_first.entry(r.public).or_insert(u32::from(FIRST_PORT));
            assert_eq!(u32::from(r.first), *expect, "{a}");
            *expect += u32::from(r.len);
            for port in [r.first, r.last(), r.first + r.len / 2] {
                assert_eq!(m.reverse(r.public, port), Some(a), "{a} {port}");
            }
            for p in [0u16, 1, 53, 1023, 40000, 65535] {
                assert!(r.contains(m.first_choice(&r, p)));
            }
        }
        for (_, end) in next_first {
            assert!(end <= 65536);
        }
    }

    #[test]
    fn forward_and_reverse_are_inverse_for_every_address() {
        for (inside, outside, pps) in [
            ("100.64.0.0/22", "203.0.113.0/28", None),  // R = 64
            ("100.64.0.0/24", "203.0.113.0/24", None),  // R = 1
            ("100.64.0.0/20", "198.51.100.0/30", None), // R = 1024
            ("100.64.0.0/20", "198.51.100.0/30", Some(7)),
            ("10.0.0.0/16", "203.0.113.0/29", Some(4)), // R = 8192
        ] {
            check_all(&map(inside, outside, pps).unwrap());
        }
    }

    proptest! {
        /// Any configuration, any inside address: reverse(forward) is the identity; any
        /// public endpoint: forward(reverse) holds it.
        #[test]
        fn inverse_on_any_configuration(
            ibase in any::<u32>(), ilen in 8u8..=32, extra in 0u8..=15, obase in any::<u32>(),
            pps_frac in 1u32..=1000, pick in any::<u64>(), port in any::<u16>(),
        ) {
            let olen = (u32::from(ilen) + u32::from(extra)).min(32) as u8;
            let inside = Ipv4Prefix::new(Ipv4Addr::from(ibase & xlat::prefix::mask(ilen)), ilen).unwrap();
            let outside = Ipv4Prefix::new(Ipv4Addr::from(obase & xlat::prefix::mask(olen)), olen).unwrap();
            let ratio = 1u32 << (olen - ilen);
            let pps = (PORTS / ratio * pps_frac / 1000).max(1);
            let Ok(m) = DetMap::new(&Deterministic { inside, outside, ports_per_subscriber: Some(pps) }) else {
                prop_assume!(false);
                unreachable!()
            };
            let a = inside.nth(pick % inside.size());
            let r = m.forward(a).unwrap();
            prop_assert_eq!(m.reverse(r.public, r.first), Some(a));
            prop_assert_eq!(m.reverse(r.public, r.last()), Some(a));
            let public = outside.nth(pick % outside.size());
            if let Some(s) = m.reverse(public, port) {
                let r = m.forward(s).unwrap();
                prop_assert_eq!(r.public, public);
                prop_assert!(r.contains(port));
            }
        }
    }
}
