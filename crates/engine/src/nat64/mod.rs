//! Stateful NAT64 (RFC 6146): IPv6-only hosts inside reach IPv4 servers through an IPv4
//! pool, the servers seen at Pref64-embedded IPv6 addresses (RFC 6052).
//!
//! Built from two pieces that already exist rather than a third copy of either:
//!
//! - The header translation is SIIT (`xlat::siit`, RFC 7915), including ICMP errors and
//!   their quoted packets.
//! - The binding information base and the session table are NAT44's (lock-free session
//!   table with an original and a reply record per session, bindings with
//!   endpoint-independent mapping, port pools, filtering, hairpinning, the reaper, the TCP
//!   state that drives timeouts). What NAT44 keys by an inside IPv4 address, NAT64 keys by
//!   a 32-bit *host id* standing for the IPv6 source address ([`HostTable`]); a host id
//!   lives exactly as long as the bindings that use it.
//!
//! An outbound IPv6 packet is translated to IPv4 with the host id as its source, then runs
//! through NAT44 (which rewrites the host id and port to the pool address and port). An
//! inbound IPv4 packet runs through NAT44 (public address and port -> host id and port),
//! then is translated to IPv6 with the host id's IPv6 address as destination. A packet
//! from one IPv6 host to another's public address comes back out of NAT44 addressed to a
//! host id and is translated back to IPv6 (hairpinning, RFC 6146 §3.8).
//!
//! RFC 6146's TCP state machine is NAT44's (`conntrack::tcp`): SYN seen from both sides
//! makes a session established (2 h 4 min idle timeout), FIN from both or RST makes it
//! transitory (4 min) or closed. An inbound SYN with no binding (or one the filter
//! refuses) is held 6 s for a simultaneous open, then answered with ICMPv4 Port
//! Unreachable (RFC 6146 §3.5.2.2, `nat44::held`). So is one that an IPv6 host sends to a
//! pool4 endpoint, a hairpinned packet being "processed as an incoming IPv4 packet"
//! (RFC 6146 §3.8); its Port Unreachable takes the hairpin back and reaches the host as
//! ICMPv6 Port Unreachable.
//!
//! Fragments (RFC 6146 §3.4/§3.5): SIIT turns an IPv6 Fragment header into the IPv4
//! identification, MF and offset fields and back, statelessly (RFC 7915 §4.1/§5.1.1),
//! so NAT44 sees IPv4 fragments in both directions and its fragment records
//! (`nat44::frag`) give the later fragments of a datagram the addresses its first got:
//! the public address outbound, the host id (hence the IPv6 host) inbound. The IPv4
//! identification is the low 16 bits of the IPv6 one. A later fragment that arrives
//! before its first is held there (as IPv4) and sent right after it (`poll_due`: to IPv6
//! when it goes inside); fragmented ICMP is not translated (RFC 7915 §1.2). The fast
//! paths never take fragments.
//!
//! Never reads a clock, never does I/O, never panics on packet bytes.

mod census;
pub mod config;
mod reload;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_evict;
#[cfg(test)]
mod tests_hairpin;
#[cfg(test)]
mod tests_limits;
#[cfg(test)]
mod tests_reload;
#[cfg(test)]
mod tests_tcp;

pub use config::{Nat64Config, Nat64Static};

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
use std::sync::Arc;
use std::time::Duration;

use conntrack::host_table::HostTable;
use conntrack::{Endpoint, Proto, TcpSegment, Timestamp, Tuple};
use wire::checksum::{udp4_update, update16, update32};
use xlat::icmp_reply::IcmpReason;
use xlat::rfc6052::{wkp_allows, Pref64};
use xlat::siit::{ipv4_precheck, ipv4_to_ipv6, ipv6_to_ipv4, SiitOptions, SiitVerdict};

use crate::config::{ConfigError, ConfigItem};
use crate::ipid::Ipv4Idents;
use crate::mode::reply::Responder;
use crate::mode::{fragment, Egress, Family, Frame, Mode, ModeWorker, Output};
use crate::nat44::{InsideHosts, Nat44Reaper, Nat44Shared, Nat44Worker};
use crate::siit::{icmp4_is_error, icmp6_type, ipv6_at, Refusal};
use crate::{Counters, Direction, DropReason, Emit};

/// How long a host id stays after its last binding went (so a host that opens its next
/// connection a moment later keeps its id).
pub const HOST_GRACE: Duration = Duration::from_secs(10);

/// The host table as NAT44 sees it: bindings hold references on host ids. The second
/// field: the subscriber prefix length (1-64, or 128: each address its own subscriber).
#[derive(Debug)]
struct Hosts(HostTable, u8);

impl InsideHosts for Hosts {
    fn acquire(&self, inside: Ipv4Addr) -> bool {
        self.0.try_ref(inside)
    }
    fn release(&self, inside: Ipv4Addr, now: Timestamp) {
        self.0.unref(inside, now);
    }
    fn ipv6(&self, inside: Ipv4Addr) -> Option<std::net::Ipv6Addr> {
        self.0.addr(inside)
    }
    /// The upper `self.1` bits of the host's IPv6 address (its /64 by default), or the
    /// host id itself for /128. A host id keeps its address while any binding (hence any
    /// counted session or port) uses it, so the key is the same at release.
    fn subscriber(&self, inside: Ipv4Addr) -> u64 {
        match (self.1, self.0.addr(inside)) {
            (len @ 1..=64, Some(a)) => {
                let upper = (u128::from(a) >> 64) as u64;
                upper & (u64::MAX << (64 - u32::from(len)))
            }
            _ => u64::from(u32::from(inside)),
        }
    }
}

/// Everything the threads of one NAT64 instance share.
#[derive(Debug)]
pub struct Nat64Shared {
    pref64: Pref64,
    options: SiitOptions,
    /// `options` without a second TTL decrement (the hairpin leg).
    options_again: SiitOptions,
    /// Whether ICMP errors are sent (RFC 7915 §4.4 / §5.4).
    icmp_errors: bool,
    /// `options` with no IPv4 next-hop limit: translates an IPv6 packet that is then cut
    /// into IPv4 fragments for the real one.
    options_unbounded4: SiitOptions,
    hosts: Arc<Hosts>,
    nat: Arc<Nat44Shared>,
    /// RFC 6146 §3.5.3: ICMPv6 informational messages from the inside are dropped.
    drop_icmpv6_info: bool,
    /// The IPv4 Identification counters of the translated packets.
    idents: Ipv4Idents,
}

impl Nat64Shared {
    /// Validates `cfg` and builds the shared state for `workers` threads.
    pub fn new(cfg: Nat64Config, workers: usize) -> Result<Arc<Self>, ConfigError> {
        cfg.validate()?;
        let hosts = Arc::new(Hosts(
            HostTable::new(cfg.max_sessions.max(1)),
            cfg.subscriber_prefix_len,
        ));
        let mut ids = Vec::with_capacity(cfg.static_bindings.len());
        for (i, s) in cfg.static_bindings.iter().enumerate() {
            let id = hosts.0.pin(*s.inside.ip(), Timestamp::ZERO).map_err(|_| {
                ConfigError::new(
                    ConfigItem::Entry("static", i, "inside"),
                    "no room for the static bindings' hosts (max_sessions)",
                )
            })?;
            ids.push(id);
        }
        let nat = cfg.nat44(|i| ids[i]);
        let inside: Arc<dyn InsideHosts> = hosts.clone();
        let nat = Nat44Shared::with_inside_hosts(nat, workers, Some(inside))
            .map_err(config::from_nat44)?;
        Ok(Arc::new(Nat64Shared {
            pref64: cfg.pref64,
            options: cfg.options,
            // The hairpin goes back out of the IPv6 link it came in on, which it fitted:
            // no MTU of the way out applies.
            options_again: SiitOptions {
                decrement_ttl: false,
                ipv6_mtu: u32::from(u16::MAX),
                lowest_ipv6_mtu: u32::from(u16::MAX),
                ..cfg.options
            },
            icmp_errors: cfg.icmp_errors,
            options_unbounded4: SiitOptions {
                ipv4_mtu: u32::from(u16::MAX),
                ..cfg.options
            },
            hosts,
            nat,
            drop_icmpv6_info: cfg.drop_icmpv6_info,
            idents: Ipv4Idents::new(),
        }))
    }

    /// A worker handle for thread `id`.
    pub fn worker(self: &Arc<Self>, id: usize) -> Nat64Worker {
        Nat64Worker {
            shared: Arc::clone(self),
            nat: self.nat.worker(id),
            responder: Responder::enabled(self.icmp_errors, self.nat.config().icmp_rate),
        }
    }

    /// The reaper (one per instance).
    pub fn reaper(self: &Arc<Self>) -> Nat64Reaper {
        Nat64Reaper {
            shared: Arc::clone(self),
            nat: self.nat.reaper(),
            limbo: Vec::new(),
        }
    }

    /// Live sessions (a walk).
    pub fn session_count(&self) -> usize {
        self.nat.session_count()
    }

    /// The NAT44 tables underneath (bindings and sessions keyed by host id), e.g. to
    /// attach an event log ([`Nat44Shared::attach_events`]).
    pub fn nat44(&self) -> &Arc<Nat44Shared> {
        &self.nat
    }

    /// Live IPv6 hosts (a walk).
    pub fn host_count(&self) -> usize {
        self.hosts.0.len()
    }

    /// Live bindings (a walk).
    pub fn binding_count(&self) -> usize {
        self.nat.binding_count()
    }

    /// The sessions as `(IPv6 host, its port, public IPv4 endpoint, remote IPv4 endpoint)`:
    /// those the IPv6 host opened and those opened from outside through a static binding
    /// (whose host id is the translated destination), so that every session counted by
    /// [`session_count`](Self::session_count) is listed.
    pub fn sessions(&self) -> Vec<(SocketAddrV6, SocketAddrV4, SocketAddrV4)> {
        let v4 = |e: conntrack::Endpoint| SocketAddrV4::new(e.addr, e.port);
        self.nat
            .sessions()
            .into_iter()
            .filter_map(|v| {
                // (host id endpoint, public endpoint, remote endpoint)
                let (inside, public, remote) = if HostTable::is_host_id(v.initial.src.addr) {
                    (v.initial.src, v.revised.src, v.revised.dst)
                } else {
                    (v.revised.dst, v.initial.dst, v.initial.src)
                };
                let host = self.hosts.0.addr(inside.addr)?;
                Some((
                    SocketAddrV6::new(host, inside.port, 0, 0),
                    v4(public),
                    v4(remote),
                ))
            })
            .collect()
    }

    /// The IPv6 ends of a session the inside opened, as its IPv6 packets carry them:
    /// (the host's address, the server's Pref64 address), for `initial` (host id ->
    /// server). `None` for any other session (opened from outside, or a hairpin). What the
    /// XDP fast path keys a session's IPv6 direction by.
    pub fn session_ends6(&self, initial: &Tuple) -> Option<(Ipv6Addr, Ipv6Addr)> {
        let (host, server) = (initial.src.addr, initial.dst.addr);
        if !HostTable::is_host_id(host) || HostTable::is_host_id(server) {
            return None;
        }
        Some((self.hosts.0.addr(host)?, self.v4_to_inside(server)?))
    }

    /// The header translation's options in force (what the established path translates by).
    pub fn options(&self) -> &SiitOptions {
        &self.options
    }

    /// The IPv4 address of IPv6 `a` seen from inside: a Pref64 address (a server) or a
    /// known host.
    #[inline]
    fn inside_to_v4(&self, a: Ipv6Addr) -> Option<Ipv4Addr> {
        if self.pref64.contains(a) {
            self.server_v4(a)
        } else {
            self.hosts.0.find(a)
        }
    }

    /// The IPv4 server behind Pref64 address `a`: never a host id, never a non-global
    /// address under the Well-Known Prefix (RFC 6052 §3.1).
    #[inline]
    fn server_v4(&self, a: Ipv6Addr) -> Option<Ipv4Addr> {
        let v4 = self.pref64.extract(a)?;
        let ok = !HostTable::is_host_id(v4) && (!self.pref64.is_well_known() || wkp_allows(v4));
        ok.then_some(v4)
    }

    /// The IPv4 packet at `buf[start..start + len]`, which NAT44 addressed to a host id,
    /// to IPv6 for that host: from outside, or on a hairpin's return pass (`hairpin`: a
    /// second translation, no second hop-limit decrement, back out of the IPv6 link the
    /// packet came in on, which it fitted). The packet is rewritten already, so no ICMP
    /// error quoting it is possible any more. Returns where the IPv6 packet is.
    fn to_ipv6(
        &self,
        buf: &mut [u8],
        start: usize,
        len: usize,
        hairpin: bool,
    ) -> Result<(usize, usize), Refusal> {
        let h = buf
            .get(start..start.saturating_add(20))
            .ok_or(DropReason::Truncated)?;
        let src = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
        let dst = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
        let src6 = self.v4_to_inside(src).ok_or(DropReason::NoAddressMapping)?;
        let dst6 = self.hosts.0.addr(dst).ok_or(DropReason::NoMapping)?;
        let inner = |a: Ipv4Addr, b: Ipv4Addr| Some((self.v4_to_inside(a)?, self.v4_to_inside(b)?));
        let opts = if hairpin {
            &self.options_again
        } else {
            &self.options
        };
        match ipv4_to_ipv6(buf, start, len, src6, dst6, &inner, opts) {
            SiitVerdict::Forward { start, len } => Ok((start, len)),
            SiitVerdict::Drop(d) => Err(Refusal::from(d).unanswered()),
        }
    }

    /// The IPv6 address of IPv4 `a` seen from inside: a host id's host, or `a` embedded.
    #[inline]
    fn v4_to_inside(&self, a: Ipv4Addr) -> Option<Ipv6Addr> {
        if HostTable::is_host_id(a) {
            self.hosts.0.addr(a)
        } else if !self.pref64.is_well_known() || wkp_allows(a) {
            Some(self.pref64.embed(a))
        } else {
            None
        }
    }
}

/// One data-plane thread's handle on a NAT64 instance.
#[derive(Debug)]
pub struct Nat64Worker {
    shared: Arc<Nat64Shared>,
    nat: Nat44Worker,
    /// The ICMP errors this worker sends (RFC 7915 §4, §5).
    responder: Responder,
}

/// Why a packet was not sent on, and whether NAT44 had already counted it as forwarded
/// (a translation after the NAT44 pass refused it).
type Refused = (Refusal, bool);

impl Nat64Worker {
    /// This worker's counters (NAT44 core and translation drops in one set).
    pub fn counters(&self) -> &Counters {
        self.nat.counters()
    }

    /// A quiescent point (between batches).
    #[inline]
    pub fn quiescent(&self) {
        self.nat.quiescent();
    }

    /// Idle: holds no references.
    pub fn offline(&self) {
        self.nat.offline();
    }

    /// Translates `buf[start..start + len]` with no ICMP errors and no fragmentation (a
    /// packet that would get either is dropped): an IPv6 packet from the inside
    /// (`Outbound`) or an IPv4 packet from the outside (`Inbound`). Leave
    /// [`crate::HEADROOM`] bytes in front of `start`.
    pub fn process_packet(
        &mut self,
        now: Timestamp,
        dir: Direction,
        buf: &mut [u8],
        start: usize,
        len: usize,
    ) -> Emit {
        match self.translate(now, dir, buf, start, len) {
            Ok(e) => e,
            Err(r) => self.count_refused(r),
        }
    }

    /// The fast path, else the full path.
    #[inline]
    fn translate(
        &mut self,
        now: Timestamp,
        dir: Direction,
        buf: &mut [u8],
        start: usize,
        len: usize,
    ) -> Result<Emit, Refused> {
        let fast = self.fast(now, dir, buf, start, len);
        self.after_fast(fast, now, dir, buf, start, len)
    }

    /// The established-flow path of `dir` (`None`: take the full path).
    #[inline]
    fn fast(
        &mut self,
        now: Timestamp,
        dir: Direction,
        buf: &mut [u8],
        start: usize,
        len: usize,
    ) -> Option<Result<(usize, usize), Refusal>> {
        match dir {
            Direction::Outbound => self.outbound_fast(now, buf, start, len),
            Direction::Inbound => self.inbound_fast(now, buf, start, len),
        }
    }

    /// What the fast path's outcome leaves to do: count its translation, pass on its
    /// refusal, or take the full path.
    #[inline]
    fn after_fast(
        &mut self,
        fast: Option<Result<(usize, usize), Refusal>>,
        now: Timestamp,
        dir: Direction,
        buf: &mut [u8],
        start: usize,
        len: usize,
    ) -> Result<Emit, Refused> {
        match fast {
            Some(Ok((start, len))) => {
                self.nat.counters_mut().forwarded += 1;
                Ok(Emit::Forward { start, len })
            }
            Some(Err(r)) => Err((r, false)),
            None => match dir {
                Direction::Outbound => self.outbound(now, buf, start, len, false),
                Direction::Inbound => self.inbound(now, buf, start, len),
            },
        }
    }

    /// Everything [`ModeWorker::process`] does not decide on the fast path: its refusal
    /// or the full path, then ICMP errors owed and fragmentation for the IPv6 side.
    #[inline(never)]
    fn process_rest(
        &mut self,
        fast: Option<Result<(usize, usize), Refusal>>,
        now: Timestamp,
        dir: Direction,
        frame: &mut Frame<'_>,
        egress: &Egress,
    ) -> Emit {
        match self.after_fast(fast, now, dir, frame.buf, frame.start, frame.len) {
            Ok(e) => e,
            Err((r, false))
                if r.reason == DropReason::NeedsFragmentation && dir == Direction::Outbound =>
            {
                self.fragment_for_ipv4(now, frame, egress)
            }
            Err((r, false)) if r.reason == DropReason::NeedsFragmentation => {
                // Each fragment goes through NAT44 and SIIT like a packet of its own
                // (NAT44 counts it forwarded and files the datagram for the ones after).
                let ipv6_mtu = self.shared.options.ipv6_fragment_mtu();
                let mut counted = false;
                let cut = fragment::cut_for_ipv6(frame, ipv6_mtu, |b, s, l| {
                    let e = match self.inbound_translate(now, b, s, l) {
                        Ok(Emit::Forward { start, len }) => return Ok((start, len)),
                        Ok(e) => e,
                        Err(refused) => self.count_refused(refused),
                    };
                    counted = true;
                    Err(e.drop_reason().unwrap_or(DropReason::NeedsFragmentation))
                });
                let c = self.nat.counters_mut();
                match cut {
                    Ok(e) => {
                        c.fragmented += 1;
                        e
                    }
                    Err(r) => {
                        if !counted {
                            c.drop(r);
                        }
                        Emit::Drop(r)
                    }
                }
            }
            Err((r, false)) if r.icmp.is_some() => self.responder.refuse(
                now,
                dir,
                frame,
                egress,
                self.nat.counters_mut(),
                r.reason,
                r.icmp,
            ),
            Err(refused) => self.count_refused(refused),
        }
    }

    /// An IPv6 packet whose IPv4 translation has DF clear (an IPv6 fragment, RFC 7915
    /// §5.1.1) and is too big for the IPv4 next hop: translated whole on the full path,
    /// then cut into IPv4 fragments. One that cannot be cut into the output is answered
    /// with Packet Too Big 1280, never dropped silently.
    #[inline(never)]
    fn fragment_for_ipv4(
        &mut self,
        now: Timestamp,
        frame: &mut Frame<'_>,
        egress: &Egress,
    ) -> Emit {
        let dir = Direction::Outbound;
        let mtu = self.shared.options.ipv4_mtu;
        let reason = DropReason::NeedsFragmentation;
        let too_big = Some(IcmpReason::TooBig { mtu: 1280 });
        if !fragment::ipv4_cut_fits(frame.packet(), mtu) {
            let c = self.nat.counters_mut();
            return self
                .responder
                .refuse(now, dir, frame, egress, c, reason, too_big);
        }
        match self.outbound(now, frame.buf, frame.start, frame.len, true) {
            Ok(Emit::Forward { start, len }) => {
                match fragment::cut_for_ipv4(frame, start, len, mtu) {
                    Ok((e, pieces)) => {
                        // NAT44 counted the packet forwarded once; each piece is.
                        let c = self.nat.counters_mut();
                        c.fragmented += 1;
                        c.forwarded += pieces.saturating_sub(1);
                        e
                    }
                    Err(r) => self.count_refused((r.into(), true)),
                }
            }
            Ok(e) => e,
            // Refused before any rewrite (an IPv4 packet over 65535 bytes: answered with
            // Packet Too Big 1280), or owing an error of its own.
            Err((r, false)) if r.reason == reason || r.icmp.is_some() => {
                let icmp = if r.reason == reason { too_big } else { r.icmp };
                let c = self.nat.counters_mut();
                self.responder
                    .refuse(now, dir, frame, egress, c, r.reason, icmp)
            }
            Err(refused) => self.count_refused(refused),
        }
    }

    /// The held SYNs whose 6 s passed at `now`, answered into `out` (cleared first; RFC
    /// 6146 §3.5.2.2): a SYN from outside with ICMPv4 Port Unreachable, which leaves by
    /// the IPv4 side; a hairpinned one with that error after its own hairpin return pass
    /// (RFC 6146 §3.8), translated to ICMPv6 for the IPv6 host that sent the SYN. Then
    /// the later fragments their first fragment released (`nat44::frag`): from outside,
    /// translated to IPv6 as their first was; hairpinned, back to IPv6 like it; the
    /// others leave by the IPv4 side as they are. Returns `out`'s packet count.
    pub fn poll_due(&mut self, now: Timestamp, out: &mut Output) -> usize {
        self.nat.poll_due(now, out);
        let sh = &*self.shared;
        let mut i = 0;
        while i < out.len() {
            let mut refused = DropReason::Truncated;
            let kept = out.rewrite(i, |slot, start, len| {
                let a = slot.get(start + 12..start + 20)?;
                if !HostTable::is_host_id(Ipv4Addr::new(a[4], a[5], a[6], a[7])) {
                    return Some((start, len));
                }
                // From one of the pool's own endpoints: the hairpin's return pass.
                let from = Ipv4Addr::new(a[0], a[1], a[2], a[3]);
                let hairpin = sh.nat.is_public(from);
                let moved = sh.to_ipv6(slot, start, len, hairpin);
                moved.map_err(|r| refused = r.reason).ok()
            });
            if kept {
                i += 1;
            } else {
                self.nat.counters_mut().error_unsent(refused);
            }
        }
        out.len()
    }

    /// Counts a refusal that is not answered.
    fn count_refused(&mut self, (r, nat_counted): Refused) -> Emit {
        let c = self.nat.counters_mut();
        if nat_counted {
            // NAT44 forwarded it, translation afterwards refused it.
            c.forwarded = c.forwarded.saturating_sub(1);
        }
        c.drop(r.reason);
        Emit::Drop(r.reason)
    }

    /// The established-flow path from the inside: a plain TCP/UDP IPv6 packet whose
    /// session exists is translated once, straight to its public endpoint (one SIIT pass
    /// and a port patch), instead of SIIT to the host id and then a NAT44 pass. `None`:
    /// take the full path. A refusal leaves the packet as it arrived.
    #[inline]
    fn outbound_fast(
        &mut self,
        now: Timestamp,
        buf: &mut [u8],
        start: usize,
        len: usize,
    ) -> Option<Result<(usize, usize), Refusal>> {
        let sh = &*self.shared;
        let p = buf.get(start..start.checked_add(60)?.min(buf.len()))?;
        if p.len() < 48 || p[0] >> 4 != 6 || p[7] <= 1 || 40 + be16(p, 4) > len {
            return None;
        }
        // TCP: the segment for the state tracker; a SYN takes the full path, which has
        // its options (window scale).
        let (proto, seg) = match p[6] {
            6 => {
                let seg = TcpSegment::parse(p.get(40..60)?, be16(p, 4))?;
                if seg.flags & conntrack::tcp::flags::SYN != 0 {
                    return None;
                }
                (Proto::Tcp, Some(seg))
            }
            17 => (Proto::Udp, None),
            _ => return None,
        };
        let host = sh.hosts.0.find(ipv6_at(p, 8))?;
        let dst4 = sh.server_v4(ipv6_at(p, 24))?;
        let (sport, dport) = (be16(p, 40) as u16, be16(p, 42) as u16);
        let t = Tuple::new(
            proto,
            Endpoint::new(host, sport),
            Endpoint::new(dst4, dport),
        );
        // The NAT44 core's policy generation in force (live reload: timeouts).
        let to = self
            .nat
            .shared()
            .fast_hit(now, Direction::Outbound, &t, seg.as_ref())?;
        let no_quote = |_: Ipv6Addr, _: Ipv6Addr| None;
        let v = ipv6_to_ipv4(
            buf,
            start,
            len,
            to.src.addr,
            to.dst.addr,
            &no_quote,
            &sh.idents,
            &sh.options,
        );
        Some(match v {
            SiitVerdict::Forward { start: s4, len } => {
                // No extension headers, so the IPv4 header is 20 bytes.
                set_port(buf, s4 + 20, proto, 0, sport, to.src.port);
                Ok((s4, len))
            }
            SiitVerdict::Drop(d) => Err(d.into()),
        })
    }

    /// The established-flow path from the outside (see
    /// [`outbound_fast`](Self::outbound_fast)). Only packets no ICMP error can be owed
    /// for take it: the TTL lasts and the IPv6 packet fits.
    #[inline]
    fn inbound_fast(
        &mut self,
        now: Timestamp,
        buf: &mut [u8],
        start: usize,
        len: usize,
    ) -> Option<Result<(usize, usize), Refusal>> {
        let sh = &*self.shared;
        let p = buf.get(start..start.checked_add(40)?.min(buf.len()))?;
        // IHL 5, not a fragment, TTL left, whole.
        if p.len() < 34 || p[0] != 0x45 || p[6] & 0x3f != 0 || p[7] != 0 || p[8] <= 1 {
            return None;
        }
        let total = be16(p, 2);
        // RFC 7915 §4.1: with DF, the next hop's MTU; without, the lowest IPv6 MTU.
        let mtu6 = if p[6] & 0x40 != 0 {
            sh.options.ipv6_mtu
        } else {
            sh.options.ipv6_fragment_mtu()
        };
        if total > len || total < 28 || total + 20 > mtu6 as usize {
            return None;
        }
        let (proto, seg) = match p[9] {
            6 => {
                let seg = TcpSegment::parse(p.get(20..40)?, total - 20)?;
                if seg.flags & conntrack::tcp::flags::SYN != 0 {
                    return None;
                }
                (Proto::Tcp, Some(seg))
            }
            17 => (Proto::Udp, None),
            _ => return None,
        };
        let src4 = Ipv4Addr::new(p[12], p[13], p[14], p[15]);
        let dst4 = Ipv4Addr::new(p[16], p[17], p[18], p[19]);
        let (sport, dport) = (be16(p, 20) as u16, be16(p, 22) as u16);
        let t = Tuple::new(
            proto,
            Endpoint::new(src4, sport),
            Endpoint::new(dst4, dport),
        );
        let to = self
            .nat
            .shared()
            .fast_hit(now, Direction::Inbound, &t, seg.as_ref())?;
        let dst6 = sh.hosts.0.addr(to.dst.addr)?;
        let src6 = sh.v4_to_inside(src4)?;
        set_port(buf, start + 20, proto, 2, dport, to.dst.port);
        let no_quote = |_: Ipv4Addr, _: Ipv4Addr| None;
        Some(
            match ipv4_to_ipv6(buf, start, len, src6, dst6, &no_quote, &sh.options) {
                SiitVerdict::Forward { start, len } => Ok((start, len)),
                SiitVerdict::Drop(d) => Err(Refusal::from(d).unanswered()),
            },
        )
    }

    fn outbound(
        &mut self,
        now: Timestamp,
        buf: &mut [u8],
        start: usize,
        len: usize,
        unbounded4: bool,
    ) -> Result<Emit, Refused> {
        let sh = &*self.shared;
        let refused = |r: DropReason| (Refusal::from(r), false);
        let hdr = buf
            .get(start..start + 40)
            .ok_or(refused(DropReason::Truncated))?;
        if hdr[0] >> 4 != 6 {
            return Err(refused(DropReason::NotIpv6));
        }
        // RFC 6146 §3.5.3: "If the local security policy determines that ICMPv6
        // Informational packets are to be filtered, the packet is silently discarded."
        if sh.drop_icmpv6_info && icmp6_type(buf, start).is_some_and(|t| t >= 128) {
            return Err(refused(DropReason::Icmpv6InfoFiltered));
        }
        let (src6, dst6) = (ipv6_at(hdr, 8), ipv6_at(hdr, 24));
        let dst4 = sh
            .server_v4(dst6)
            .ok_or(refused(DropReason::NoAddressMapping))?;
        // To a pool address it is a hairpin (RFC 6146 §3.8): it never crosses the IPv4
        // link, so that link's MTU does not apply.
        let opts = if unbounded4 || sh.nat.is_public(dst4) {
            &sh.options_unbounded4
        } else {
            &sh.options
        };
        let host = match sh.hosts.0.find(src6) {
            Some(h) => h,
            // An ICMPv6 error from a router (no host of ours): no host id for it, its
            // IPv4 source is written after NAT44 (`error_source`).
            None if icmp6_type(buf, start).is_some_and(|t| t < 128) => Ipv4Addr::UNSPECIFIED,
            None => sh
                .hosts
                .0
                .intern(src6, now)
                .map_err(|_| refused(DropReason::TableFull))?,
        };
        let inner = |a: Ipv6Addr, b: Ipv6Addr| Some((sh.inside_to_v4(a)?, sh.inside_to_v4(b)?));
        // SIIT refuses (TTL, too big for IPv4) before it writes: the packet is as it arrived.
        let (s4, l4) = match ipv6_to_ipv4(buf, start, len, host, dst4, &inner, &sh.idents, opts) {
            SiitVerdict::Forward { start, len } => (start, len),
            SiitVerdict::Drop(d) => return Err((d.into(), false)),
        };
        let pkt = buf
            .get_mut(s4..s4 + l4)
            .ok_or(refused(DropReason::Truncated))?;
        if let Emit::Drop(r) = self.nat.process_packet(now, Direction::Outbound, pkt) {
            return Ok(Emit::Drop(r)); // counted by NAT44
        }
        error_source(pkt);
        let dst = Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]);
        if !HostTable::is_host_id(dst) {
            return Ok(Emit::Forward { start: s4, len: l4 });
        }
        // Hairpin: NAT44 addressed it to another IPv6 host; back to IPv6.
        match sh.to_ipv6(buf, s4, l4, true) {
            Ok((start, len)) => Ok(Emit::Hairpin { start, len }),
            Err(r) => Err((r, true)),
        }
    }

    /// The full path from the outside: first the checks that owe the IPv4 sender an ICMP
    /// error, on the packet as it arrived (NAT44 rewrites it next).
    fn inbound(
        &mut self,
        now: Timestamp,
        buf: &mut [u8],
        start: usize,
        len: usize,
    ) -> Result<Emit, Refused> {
        let pkt = buf
            .get(start..start.saturating_add(len))
            .ok_or((Refusal::from(DropReason::Truncated), false))?;
        if pkt.first().map(|b| b >> 4) != Some(4) {
            return Err((DropReason::NotIpv4.into(), false));
        }
        ipv4_precheck(pkt, &self.shared.options).map_err(|d| (Refusal::from(d), false))?;
        self.inbound_translate(now, buf, start, len)
    }

    /// NAT44 (public endpoint -> host id), then SIIT to IPv6.
    fn inbound_translate(
        &mut self,
        now: Timestamp,
        buf: &mut [u8],
        start: usize,
        len: usize,
    ) -> Result<Emit, Refused> {
        let sh = &*self.shared;
        let pkt = buf
            .get_mut(start..start.saturating_add(len))
            .ok_or((Refusal::from(DropReason::Truncated), false))?;
        if let Emit::Drop(r) = self.nat.process_packet(now, Direction::Inbound, pkt) {
            return Ok(Emit::Drop(r)); // counted by NAT44
        }
        match sh.to_ipv6(buf, start, len, false) {
            Ok((start, len)) => Ok(Emit::Forward { start, len }),
            Err(r) => Err((r, true)),
        }
    }
}

impl ModeWorker for Nat64Worker {
    /// Translates the packet in `frame`: an IPv6 packet from the inside (`Outbound`) or
    /// an IPv4 packet from the outside (`Inbound`). A packet whose TTL / Hop Limit runs
    /// out here or that is too big for the other side is answered with an ICMP error in
    /// its own family (RFC 7915 §4, §5, as RFC 6146 §3.5 asks); an IPv4 packet without DF
    /// too big for the IPv6 side is cut and each fragment translated (RFC 7915 §4.1).
    #[inline]
    fn process(
        &mut self,
        now: Timestamp,
        dir: Direction,
        frame: &mut Frame<'_>,
        egress: &Egress,
    ) -> Emit {
        // Established flows (nearly every packet) are decided here, everything else out
        // of line: kept small, this function gets the fast path's helpers inlined. With
        // the whole decision in it, a packet cost 6-10% more instructions (callgrind,
        // bench's hotloop example: 4->6 961 vs 871 split, 6->4 1171 vs 1061).
        match self.fast(now, dir, frame.buf, frame.start, frame.len) {
            Some(Ok((start, len))) => {
                self.nat.counters_mut().forwarded += 1;
                Emit::Forward { start, len }
            }
            fast => self.process_rest(fast, now, dir, frame, egress),
        }
    }

    /// Held SYNs whose 6 s passed, answered (see [`Nat64Worker::poll_due`]).
    fn poll(&mut self, now: Timestamp, _egress: &Egress, out: &mut Output) -> usize {
        self.poll_due(now, out)
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        self.nat.due_timeout()
    }

    fn counters(&self) -> &Counters {
        self.nat.counters()
    }

    fn begin_batch(&mut self) {
        self.nat.refresh_if_stale();
    }

    fn quiescent(&self) {
        self.nat.quiescent();
    }

    fn offline(&self) {
        self.nat.offline();
    }
}

impl Mode for Arc<Nat64Shared> {
    type Worker = Nat64Worker;

    fn name(&self) -> &'static str {
        "nat64"
    }

    fn families(&self) -> [Family; 2] {
        [Family::V6, Family::V4]
    }

    fn in_place(&self) -> bool {
        false
    }

    fn worker(&self, id: usize) -> Nat64Worker {
        Nat64Shared::worker(self, id)
    }

    fn reaper(&self) -> Option<Box<dyn crate::mode::Reaper>> {
        Some(Box::new(Nat64Shared::reaper(self)))
    }

    /// IPv6 comes from the inside.
    fn classify(&self, pkt: &[u8]) -> Direction {
        match Family::of(pkt) {
            Some(Family::V6) => Direction::Outbound,
            _ => Direction::Inbound,
        }
    }

    fn session_count(&self) -> usize {
        Nat64Shared::session_count(self)
    }
}

/// RFC 6146 §3.5.3 / RFC 6791: an ICMPv4 error that NAT44 translated from the inside
/// leaves from a pool4 address. NAT44 rewrites the source only when it is the session's
/// own host; an error from an IPv6 router (no host id, 0.0.0.0 here) or from another
/// IPv6 host (its host id) would otherwise carry an internal 240.0.0.0/4 id onto the wire
/// (or, hairpinned, the router's raw IPv6 source). It gets the session's public address:
/// the quoted packet's destination, in public terms after NAT44.
#[inline]
fn error_source(pkt: &mut [u8]) {
    // SIIT wrote a 20-byte IPv4 header; an ICMP error quoting an IPv4 header follows.
    let Some(h) = pkt.get(..48) else {
        return;
    };
    let src = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
    if h[0] != 0x45
        || h[9] != 1
        || !icmp4_is_error(h, 0)
        || !(src.is_unspecified() || HostTable::is_host_id(src))
    {
        return;
    }
    let public = [h[44], h[45], h[46], h[47]];
    let c = update32(u16::from_be_bytes([h[10], h[11]]), src.octets(), public);
    pkt[12..16].copy_from_slice(&public);
    pkt[10..12].copy_from_slice(&c.to_be_bytes());
}

/// The big-endian 16-bit value at `off` of `p` (the caller checked the length).
#[inline]
fn be16(p: &[u8], off: usize) -> usize {
    usize::from(u16::from_be_bytes([p[off], p[off + 1]]))
}

/// Writes port `new` (at `which`: 0 source, 2 destination) of the TCP/UDP header at
/// `l4` in an IPv4 packet, updating its checksum incrementally (a zero UDP checksum stays
/// zero).
#[inline]
fn set_port(buf: &mut [u8], l4: usize, proto: Proto, which: usize, old: u16, new: u16) {
    if old == new {
        return;
    }
    let csum_at = l4 + if proto == Proto::Tcp { 16 } else { 6 };
    let (Some(_), Some(_)) = (buf.get(l4 + which + 1), buf.get(csum_at + 1)) else {
        return;
    };
    buf[l4 + which..l4 + which + 2].copy_from_slice(&new.to_be_bytes());
    let c = u16::from_be_bytes([buf[csum_at], buf[csum_at + 1]]);
    let c = if proto == Proto::Udp {
        udp4_update(c, |c| update16(c, old, new))
    } else {
        update16(c, old, new)
    };
    buf[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
}

/// The NAT64 reaper: NAT44's, then the host ids no binding uses any more.
#[derive(Debug)]
pub struct Nat64Reaper {
    shared: Arc<Nat64Shared>,
    nat: Nat44Reaper,
    /// Host slots unlinked, waiting for their grace period: (epoch stamp, slot).
    limbo: Vec<(u64, u32)>,
}

impl crate::mode::Reaper for Nat64Reaper {
    fn poll_timeout(&self) -> Option<Timestamp> {
        Nat64Reaper::poll_timeout(self)
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        Nat64Reaper::handle_timeout(self, now);
    }

    fn drain(&mut self, now: Timestamp) -> bool {
        Nat64Reaper::drain(self, now)
    }

    fn counters(&self) -> &Counters {
        Nat64Reaper::counters(self)
    }
}

impl Nat64Reaper {
    /// The reaper's counters (expiries).
    pub fn counters(&self) -> &Counters {
        self.nat.counters()
    }

    /// When the next pass is due.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.nat.poll_timeout()
    }

    /// Between passes: NAT44's drain, which unlinks and frees the sessions the workers
    /// evicted at a full table (without it their slots wait for the next full pass, and a
    /// SYN flood fills the table with dead sessions). True while anything still waits.
    pub fn drain(&mut self, now: Timestamp) -> bool {
        self.nat.drain(now)
    }

    /// One pass: NAT44's (sessions, bindings, ports), then idle hosts.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.nat.handle_timeout(now);
        let qsbr = self.shared.nat.qsbr();
        let mut unlinked = Vec::new();
        self.shared
            .hosts
            .0
            .reap(now, HOST_GRACE, |n| unlinked.push(n));
        if !unlinked.is_empty() {
            let stamp = qsbr.advance();
            self.limbo.extend(unlinked.into_iter().map(|n| (stamp, n)));
        }
        let safe = qsbr.safe_epoch();
        let hosts = &self.shared.hosts.0;
        self.limbo.retain(|(stamp, n)| {
            if *stamp > safe {
                return true;
            }
            hosts.free(*n);
            false
        });
    }
}

/// One worker and the reaper together: the single-threaded face (offline replay, tests).
#[derive(Debug)]
pub struct Nat64 {
    shared: Arc<Nat64Shared>,
    worker: Nat64Worker,
    reaper: Nat64Reaper,
}

impl Nat64 {
    /// Builds a single-threaded instance.
    pub fn new(cfg: Nat64Config) -> Result<Self, ConfigError> {
        let shared = Nat64Shared::new(cfg, 1)?;
        Ok(Nat64 {
            worker: shared.worker(0),
            reaper: shared.reaper(),
            shared,
        })
    }

    /// The shared state.
    pub fn shared(&self) -> &Arc<Nat64Shared> {
        &self.shared
    }

    /// Counters since start (worker and reaper).
    pub fn counters(&self) -> Counters {
        let mut c = self.worker.counters().clone();
        c.merge(self.reaper.counters());
        c
    }

    /// See [`Nat64Worker::process_packet`].
    pub fn process(
        &mut self,
        now: Timestamp,
        dir: Direction,
        buf: &mut [u8],
        start: usize,
        len: usize,
    ) -> Emit {
        self.worker.nat.refresh_if_stale();
        let e = self.worker.process_packet(now, dir, buf, start, len);
        self.worker.quiescent();
        e
    }

    /// When [`handle_timeout`](Self::handle_timeout) should next run.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.reaper.poll_timeout()
    }

    /// What the engine sends at `now` with no packet arriving (held SYNs answered, see
    /// [`ModeWorker::poll`]), written into `out` (cleared first); how many.
    pub fn poll(&mut self, now: Timestamp, out: &mut Output) -> usize {
        self.worker.poll_due(now, out)
    }

    /// When [`poll`](Self::poll) next has something to send.
    pub fn poll_due_timeout(&self) -> Option<Timestamp> {
        self.worker.nat.due_timeout()
    }

    /// Runs the reaper now.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.reaper.handle_timeout(now);
    }

    /// Runs the reaper's drain now (what a live reaper does every millisecond or so while
    /// evicted sessions wait): true while anything is still waiting.
    pub fn drain(&mut self, now: Timestamp) -> bool {
        self.reaper.drain(now)
    }
}

// Table occupancy for metrics.
impl Nat64Shared {
    /// The session table's capacity, live and dead-pending counts (O(1)).
    pub fn occupancy(&self) -> crate::TableOccupancy {
        self.nat.occupancy()
    }
}
