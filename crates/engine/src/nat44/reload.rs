//! NAT44's live reload: builds the next policy generation of a [`Nat44Shared`] from a new
//! configuration, sharing the tables of the one in force, and publishes it.
//!
//! What changes live: rules, pools, static mappings, port forwards, timeouts (existing
//! sessions from their next check), filtering (when the permit table exists), hairpinning,
//! port preservation, TTL decrement, ICMP error rates, per-subscriber limits (new sessions
//! and ports; the counters must exist, i.e. limits were on at start). What needs a
//! restart: `max_sessions`, `max_fragment_records`, `fragment_timeout`, `fragment_hold_bytes`,
//! `max_simultaneous_opens`, `drop_externally_initiated_tcp`, `port_reuse_hold`, turning
//! limits on from off, address-dependent filtering when started without it.
//!
//! Pools: a rule whose pool and port range are unchanged keeps its pool object (ports in
//! use, ports cooling, pairing) whatever its position. A new or changed pool starts with
//! every port that a live binding or a port forward holds on its addresses reserved, so
//! it never hands out a port in use; a freed port returns to whichever pool of the
//! generation in force holds its address, and nowhere if none does. Removed public
//! addresses are drained per [`ReloadDrain`].

use std::net::Ipv4Addr;
use std::sync::Arc;

use conntrack::{Endpoint, PortPool, Proto};
use xlat::prefix::Ipv4Prefix;

use super::rules::RuleTable;
use super::{ep_key, key_ep, key_proto, Nat44Config, Nat44Shared};
use crate::config::{ConfigError, ConfigItem, Filtering, ReloadDrain, Timeouts};
use crate::reload::{refuse_restart_only, ReloadAction, ReloadReport};

impl Nat44Shared {
    /// The policy generation in force (this one if it is the latest).
    pub fn current(self: &Arc<Self>) -> Arc<Self> {
        self.cell.latest().unwrap_or_else(|| Arc::clone(self))
    }

    /// The cell this instance's generations are published in.
    pub(super) fn cell(&self) -> &Arc<crate::reload::PolicyCell<Nat44Shared>> {
        &self.cell
    }

    /// The pool that takes back a port on `addr` of a binding made under rule `user - 1`
    /// of some generation: that rule's pool if it still holds the address, else whichever
    /// pool of this generation does (after a reload moved it), else none (removed).
    #[inline]
    pub(super) fn pool_of(&self, user: u32, addr: Ipv4Addr) -> Option<&PortPool> {
        match self.pools.get(user.wrapping_sub(1) as usize) {
            Some(p) if p.contains_addr(addr) => Some(p),
            _ => self
                .pools
                .iter()
                .find(|p| p.contains_addr(addr))
                .map(|p| &**p),
        }
    }

    /// Whether the reaper ends session `v` at once: drain policy "immediate" and its
    /// public address removed by a reload.
    #[inline]
    pub(super) fn drained(&self, v: &conntrack::SessionView) -> bool {
        !self.drained.is_empty() && self.drained_addr(public_addr(v))
    }

    fn drained_addr(&self, a: Ipv4Addr) -> bool {
        self.drained.iter().any(|&(f, l)| (f..=l).contains(&a)) && !self.is_public(a)
    }

    /// Applies `cfg` live: validates it, refuses what only a restart can change (the
    /// generation in force stays), builds and publishes the next generation, and says
    /// what changed. Call on the instance the workers were made from.
    pub fn reload(self: &Arc<Self>, cfg: Nat44Config) -> Result<ReloadReport, ConfigError> {
        self.reload_as(cfg, ReloadAction::Apply)
    }

    /// [`reload`](Self::reload), or with `ReloadAction::Preview` the same checks and
    /// report with nothing changed (no port reserved, no binding made, nothing
    /// published).
    pub fn reload_as(
        self: &Arc<Self>,
        cfg: Nat44Config,
        action: ReloadAction,
    ) -> Result<ReloadReport, ConfigError> {
        let _one_at_a_time = self.cell.serialise();
        let old = self.current();
        cfg.validate()?;
        refuse_restart_only(&old.restart_only_changes(&cfg))?;
        let removed_forwards: Vec<_> = old
            .cfg
            .port_forwards
            .iter()
            .filter(|f| !cfg.port_forwards.contains(f))
            .copied()
            .collect();
        let mut report = ReloadReport::default();
        report_changes(&old.cfg, &cfg, &mut report);
        let workers = self.qsbr.workers();
        // Pools: reuse the unchanged ones.
        let mut fresh = Vec::new();
        let mut pools: Vec<Arc<PortPool>> = cfg
            .rules
            .iter()
            .map(|r| {
                let same = old
                    .cfg
                    .rules
                    .iter()
                    .position(|o| o.pool == r.pool && o.ports == r.ports);
                match same {
                    Some(i) => Arc::clone(&old.pools[i]),
                    None => {
                        let p = super::dynamic_pool(r, &cfg, workers);
                        fresh.push(Arc::clone(&p));
                        p
                    }
                }
            })
            .collect();
        // Deterministic NAT is restart-only (refused above if changed): its pool carries over.
        if old.det.is_some() {
            pools.extend(old.pools.get(old.cfg.rules.len()).cloned());
        }
        let mut next = Nat44Shared {
            rules: RuleTable::new(super::rules_and_det(&cfg)),
            pools,
            static_by_inside: super::static_by_inside(&cfg),
            static_by_public: super::static_by_public(&cfg),
            forward_inside: super::forward_inside(&cfg),
            public_hosts: Default::default(),
            pool_ranges: super::pool_ranges(&cfg),
            sessions: Arc::clone(&self.sessions),
            bindings: Arc::clone(&self.bindings),
            permits: Arc::clone(&self.permits),
            permits_on: self.permits_on,
            qsbr: Arc::clone(&self.qsbr),
            inside_hosts: self.inside_hosts.clone(),
            frags: Arc::clone(&self.frags),
            subscribers: self.subscribers.clone(),
            held: Arc::clone(&self.held),
            events: Arc::clone(&self.events),
            offload: Arc::clone(&self.offload),
            hints: Arc::clone(&self.hints),
            clears: Arc::clone(&self.clears),
            pptp: Arc::clone(&self.pptp),
            // Only the first generation's cell is polled: no cycle through the latest.
            cell: Arc::default(),
            drained: Vec::new(),
            det: old.det,
            cfg,
        };
        next.public_hosts
            .extend(next.static_by_public.keys().copied());
        next.public_hosts
            .extend(next.cfg.port_forwards.iter().map(|f| *f.public.ip()));
        // Removed public addresses (pools, statics, forwards).
        let mut removed: Vec<(Ipv4Addr, Ipv4Addr)> = Vec::new();
        for p in old.cfg.rules.iter().flat_map(|r| &r.pool) {
            if !next
                .cfg
                .rules
                .iter()
                .flat_map(|r| &r.pool)
                .any(|q| covers(q, p))
            {
                removed.push((p.nth(0), p.nth(p.size() - 1)));
                report.push(format!("pool - {p}"));
            }
        }
        for a in old.public_hosts.iter().copied() {
            if !next.is_public(a) {
                removed.push((a, a));
            }
        }
        for p in next.cfg.rules.iter().flat_map(|r| &r.pool) {
            if !old
                .cfg
                .rules
                .iter()
                .flat_map(|r| &r.pool)
                .any(|q| covers(q, p))
            {
                report.push(format!("pool + {p}"));
            }
        }
        // Port forwards. Checked before anything changes: an added forward whose
        // endpoints a live binding holds is refused.
        let added: Vec<_> = next
            .cfg
            .port_forwards
            .iter()
            .filter(|f| !old.cfg.port_forwards.contains(f))
            .copied()
            .collect();
        for f in &added {
            let (proto, public, inside) = forward_keys(f);
            if self.bindings.find_a(ep_key(proto, inside)).is_some()
                || self.bindings.find_b(ep_key(proto, public)).is_some()
            {
                return Err(ConfigError::new(
                    ConfigItem::Field("forward"),
                    format!(
                        "port forward {} -> {}: its public or inside endpoint is in use by a live binding",
                        f.public, f.inside
                    ),
                ));
            }
        }
        let affected = self
            .sessions
            .live()
            .filter(|v| {
                let a = public_addr(v);
                removed.iter().any(|&(f, l)| (f..=l).contains(&a)) && !next.is_public(a)
            })
            .count();
        report.drain = (!removed.is_empty()).then(|| match next.cfg.reload_drain {
            ReloadDrain::Expire => {
                format!("{affected} sessions on removed addresses left to expire")
            }
            ReloadDrain::Immediate => format!("{affected} sessions drained"),
        });
        if action == ReloadAction::Preview {
            return Ok(report);
        }
        // Removed ones become ordinary bindings that live while their sessions do (their
        // ports stay taken: returned nowhere); added ones static bindings.
        for f in &removed_forwards {
            let (proto, _, inside) = forward_keys(f);
            if let Some(id) = self.bindings.find_a(ep_key(proto, inside)) {
                self.bindings.unpin(id);
            }
        }
        for f in &added {
            let (proto, public, inside) = forward_keys(f);
            for pool in &next.pools {
                pool.reserve(proto, public);
            }
            // A binding made on these endpoints since the check wins (reported).
            if self
                .bindings
                .insert(
                    ep_key(proto, inside),
                    ep_key(proto, public),
                    true,
                    0,
                    true,
                    0,
                )
                .is_err()
            {
                report.push(format!(
                    "forward {} not in force: its endpoint was taken meanwhile; reload again",
                    f.public
                ));
            }
        }
        // New pools start with the ports live bindings and forwards hold on them.
        reserve_live(&fresh, &self.bindings, |h| self.subscriber_of(h));
        for f in &next.cfg.port_forwards {
            let (proto, public, _) = forward_keys(f);
            for p in &fresh {
                p.reserve(proto, public);
            }
        }
        if next.cfg.reload_drain == ReloadDrain::Immediate {
            next.drained = old.drained.clone();
            next.drained.extend(removed);
        }
        self.cell.publish(Arc::new(next));
        // A binding made on a pool being replaced while this ran: reserve it too.
        reserve_live(&fresh, &self.bindings, |h| self.subscriber_of(h));
        Ok(report)
    }

    /// The settings of `new` that differ from this generation's and need a restart.
    fn restart_only_changes(&self, new: &Nat44Config) -> Vec<(&'static str, bool)> {
        let o = &self.cfg;
        let limits_off = self.subscribers.is_none();
        vec![
            ("max_sessions", o.max_sessions != new.max_sessions),
            (
                "max_fragment_records",
                o.max_fragment_records != new.max_fragment_records,
            ),
            (
                "fragment_timeout",
                o.fragment_timeout != new.fragment_timeout,
            ),
            (
                "fragment_hold_bytes",
                o.fragment_hold_bytes != new.fragment_hold_bytes,
            ),
            (
                "max_simultaneous_opens",
                o.max_simultaneous_opens != new.max_simultaneous_opens,
            ),
            (
                "drop_externally_initiated_tcp",
                o.drop_externally_initiated_tcp != new.drop_externally_initiated_tcp,
            ),
            ("port_reuse_hold", o.port_reuse_hold != new.port_reuse_hold),
            // The calls in progress: their control connections are read whatever the
            // switch says; turned off, their GRE would lose its call ids.
            ("pptp", o.pptp != new.pptp),
            // PBA: blocks are cut from each pool's range once; live blocks keep their size.
            ("port_block_size", o.port_block_size != new.port_block_size),
            (
                "blocks_per_subscriber",
                o.blocks_per_subscriber != new.blocks_per_subscriber,
            ),
            (
                "max_sessions_per_host (limits off at start)",
                limits_off && new.max_sessions_per_host != 0,
            ),
            (
                "max_ports_per_host (limits off at start)",
                limits_off && new.max_ports_per_host != 0,
            ),
            // Deterministic NAT: its mapping is what abuse records rest on.
            ("deterministic", o.deterministic != new.deterministic),
            (
                "filtering (address-dependent needs its table from the start)",
                !self.permits_on && new.filtering == Filtering::AddressDependent,
            ),
        ]
    }
}

/// The public address of a session: where the reply record points for one opened from
/// inside, where the initial packet went for one opened from outside.
#[inline]
fn public_addr(v: &conntrack::SessionView) -> Ipv4Addr {
    if v.flags & conntrack::session::FROM_INSIDE != 0 {
        v.revised.src.addr
    } else {
        v.initial.dst.addr
    }
}

/// Whether prefix `outer` holds all of `inner`.
fn covers(outer: &Ipv4Prefix, inner: &Ipv4Prefix) -> bool {
    outer.len() <= inner.len() && outer.contains(inner.addr())
}

fn forward_keys(f: &super::PortForward) -> (Proto, Endpoint, Endpoint) {
    let proto = f.protocol.proto();
    (
        proto,
        Endpoint::new(*f.public.ip(), f.public.port()),
        Endpoint::new(*f.inside.ip(), f.inside.port()),
    )
}

/// Marks in `pools` every port a live dynamic binding holds on their addresses.
/// With PBA on, each port's block becomes its subscriber's (`sub_of`) in the new pool.
fn reserve_live(
    pools: &[Arc<PortPool>],
    bindings: &conntrack::RefTable,
    sub_of: impl Fn(Ipv4Addr) -> u64,
) {
    if pools.is_empty() {
        return;
    }
    for (_, b) in bindings.live_entries() {
        let public = key_ep(b.key_b);
        for p in pools {
            if p.contains_addr(public.addr) {
                let inside = key_ep(b.key_a).addr;
                p.adopt(key_proto(b.key_a), public, sub_of(inside), inside);
            }
        }
    }
}

/// One line per setting that changed.
fn report_changes(o: &Nat44Config, n: &Nat44Config, r: &mut ReloadReport) {
    if o.rules.len() != n.rules.len() {
        r.push(format!("nat44 rules {} → {}", o.rules.len(), n.rules.len()));
    } else if o.rules != n.rules {
        r.push("nat44 rules changed");
    }
    for (label, old, new) in [
        ("static", o.static_nat.len(), n.static_nat.len()),
        ("forwards", o.port_forwards.len(), n.port_forwards.len()),
    ] {
        if old != new {
            r.push(format!("{label} {old} → {new}"));
        }
    }
    timeouts(&o.timeouts, &n.timeouts, r);
    r.compare("filtering", &o.filtering, &n.filtering);
    r.compare("hairpinning", &o.hairpinning, &n.hairpinning);
    r.compare(
        "port_preservation",
        &o.port_preservation,
        &n.port_preservation,
    );
    r.compare("decrement_ttl", &o.decrement_ttl, &n.decrement_ttl);
    r.compare("icmp_rate", &o.icmp_rate, &n.icmp_rate);
    r.compare(
        "max_sessions_per_host",
        &o.max_sessions_per_host,
        &n.max_sessions_per_host,
    );
    r.compare(
        "max_ports_per_host",
        &o.max_ports_per_host,
        &n.max_ports_per_host,
    );
    r.compare("reload_drain", &o.reload_drain, &n.reload_drain);
}

fn timeouts(o: &Timeouts, n: &Timeouts, r: &mut ReloadReport) {
    for (name, a, b) in [
        ("udp", o.udp, n.udp),
        ("tcp_established", o.tcp_established, n.tcp_established),
        ("tcp_transitory", o.tcp_transitory, n.tcp_transitory),
        ("tcp_syn_sent", o.tcp_syn_sent, n.tcp_syn_sent),
        ("tcp_syn_recv", o.tcp_syn_recv, n.tcp_syn_recv),
        ("tcp_closed", o.tcp_closed, n.tcp_closed),
        ("icmp", o.icmp, n.icmp),
        ("sctp", o.sctp, n.sctp),
        ("other", o.other, n.other),
    ] {
        if a != b {
            r.push(format!("{name} {} s → {} s", a.as_secs(), b.as_secs()));
        }
    }
}
