//! The per-thread face of NAT44: `process(now, dir, packet)`, lock-free.

use std::collections::VecDeque;
use std::sync::Arc;

use conntrack::session::{ALG, FROM_INSIDE, HAIRPIN, INBOUND_SEEN};
use conntrack::{
    Counted, Endpoint, InsertError, NewSession, PoolError, Proto, QsbrHandle, Record, RecordRef,
    RefInsertError, Room, SessionId, TcpReject, TcpSegment, Timestamp, Tuple,
};
use xlat::icmp_reply::IcmpReason;
use xlat::nat44::{rewrite, rewrite_icmp_error, rewrite_partial, IcmpErrorRewrite, L4Kind};

use super::frag::{rewrite_fragment, Arrival, FragKey, FragRewrite, Held, Later, Piece};
use super::held::Hold;
use super::natlog::Origin;
use super::parse::{parse_fast, parse_full, parse_with, Flow, Fragment, IcmpError, Parsed};
use super::pptp;
use super::stage::Stage;
use super::{ep_key, key_ep, rewrite_of, Nat44Shared};
use crate::config::Filtering;
use crate::mode::reply::{fits, owed, Responder};
use crate::mode::{Egress, Emit, Frame, ModeWorker, Output, HEADROOM};
use crate::stats::Counters;
use crate::verdict::Offload;
use crate::verdict::{Direction, DropReason};

/// One data-plane thread's handle on a NAT44 instance.
#[derive(Debug)]
pub struct Nat44Worker {
    shared: Arc<Nat44Shared>,
    qsbr: QsbrHandle,
    id: usize,
    counters: Counters,
    /// The ICMP errors this worker sends (TTL exhausted, too big for the next hop).
    responder: Responder,
    /// Where reloads publish the policy (the first generation's cell) and the
    /// generation `shared` is.
    cell: Arc<crate::reload::PolicyCell<Nat44Shared>>,
    generation: u64,
    /// The receive batch in stages (see `stage`): buckets and session lines prefetched.
    stage: Stage,
    /// Later fragments held for their first, released by it through this worker: sent,
    /// translated, right after it (`poll`).
    released: VecDeque<Released>,
}

/// A held fragment whose first fragment passed here.
#[derive(Debug)]
struct Released {
    held: Held,
    to: FragRewrite,
    dir: Direction,
    /// When its first fragment passed: it is due then.
    at: Timestamp,
}

/// The direction packets matching `side` of a session with `flags` legitimately travel.
#[inline]
fn side_direction(flags: u32, side: Record) -> Direction {
    let orig = if flags & FROM_INSIDE != 0 {
        Direction::Outbound
    } else {
        Direction::Inbound
    };
    match side {
        Record::Original => orig,
        Record::Reply => match orig {
            Direction::Outbound => Direction::Inbound,
            Direction::Inbound => Direction::Outbound,
        },
    }
}

/// Which pass through the NAT a packet is on. A hairpinned packet makes two (RFC 4787
/// REQ-9, RFC 5128 §3.3): out from its sender's mapping as to any outside peer, then back
/// in to the destination's mapping as from any outside peer, each pass with its own
/// session and its own filtering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Leg {
    /// As the packet arrived on a link.
    Wire,
    /// The return pass of a hairpin: an inbound packet the NAT itself sent to one of its
    /// public endpoints. The router hop (TTL) was taken on the first pass.
    Hairpin,
}

impl Leg {
    /// Whether this pass decrements the TTL: only the first, and only if configured.
    #[inline]
    fn decrement_ttl(self, configured: bool) -> bool {
        configured && self == Leg::Wire
    }
}

impl Nat44Worker {
    pub(super) fn new(shared: Arc<Nat44Shared>, id: usize) -> Self {
        let qsbr = shared.qsbr.handle(id);
        let responder = Responder::new(shared.cfg.icmp_rate);
        let cell = Arc::clone(shared.cell());
        let mut w = Self {
            shared,
            qsbr,
            id,
            counters: Counters::default(),
            responder,
            cell,
            generation: 0,
            stage: Stage::default(),
            released: VecDeque::new(),
        };
        w.refresh();
        w
    }

    /// Stages every batch whatever the table's size (tests of the staged path).
    #[cfg(test)]
    pub(super) fn stage_always(&mut self) {
        self.stage = Stage::above(0);
    }

    /// Picks up the policy generation a reload published (see `crate::reload`); without
    /// waiting: if the cell is busy this instant, the next packet looks again.
    #[cold]
    #[inline(never)]
    fn refresh(&mut self) {
        if let Some((g, latest)) = self.cell.try_latest() {
            if let Some(next) = latest {
                if next.cfg.icmp_rate != self.shared.cfg.icmp_rate {
                    self.responder = Responder::new(next.cfg.icmp_rate);
                }
                self.shared = next;
            }
            self.generation = g;
        }
    }

    /// Whether a reload published a generation this worker has not picked up.
    #[inline(always)]
    fn stale(&self) -> bool {
        self.cell.generation() != self.generation
    }

    /// Picks up a newer policy generation if a reload published one (one atomic load):
    /// call at the start of each batch ([`ModeWorker::begin_batch`]).
    #[inline(always)]
    pub fn refresh_if_stale(&mut self) {
        if self.stale() {
            self.refresh();
        }
    }

    /// The shared state.
    pub fn shared(&self) -> &Arc<Nat44Shared> {
        &self.shared
    }

    /// This worker's counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// This worker's counters, for a mode built around NAT44 (NAT64) that counts its own
    /// drops in the same set.
    pub fn counters_mut(&mut self) -> &mut Counters {
        &mut self.counters
    }

    /// Announces a quiescent point: call between batches (never while holding a packet
    /// half-processed). The reaper reuses slots only after every worker has done so.
    #[inline]
    pub fn quiescent(&self) {
        self.qsbr.quiescent();
    }

    /// Announces that this worker is idle and holds nothing (e.g. before sleeping).
    pub fn offline(&self) {
        self.qsbr.offline();
    }

    /// Translates one IPv4 packet in place, with no next-hop MTU and no ICMP errors (a
    /// packet the gateway would answer is dropped): the engine alone, as tests and the
    /// benchmark drive it. `pkt` starts at the IPv4 header; bytes after the IPv4 total
    /// length (link padding) are left alone. Forwarded: `Emit::Forward` over all of `pkt`.
    #[inline]
    pub fn process_packet(&mut self, now: Timestamp, dir: Direction, pkt: &mut [u8]) -> Emit {
        match self.process_inner(now, dir, pkt, Offload::None, None) {
            Ok(()) => {
                self.counters.forwarded += 1;
                Emit::Forward {
                    start: 0,
                    len: pkt.len(),
                }
            }
            Err(r) => {
                self.counters.drop(r);
                Emit::Drop(r)
            }
        }
    }

    #[inline]
    fn process_inner(
        &mut self,
        now: Timestamp,
        dir: Direction,
        pkt: &mut [u8],
        offload: Offload,
        mtu: Option<u32>,
    ) -> Result<(), DropReason> {
        if self.stage.pending() {
            // The first packet of a staged batch: its session lines on the way first.
            self.stage.sessions(&self.shared.sessions);
        }
        let verify_ip = offload != Offload::Gso;
        // The common case first: a plain TCP or UDP packet, read straight from the bytes.
        if let Some(f) = parse_fast(pkt, verify_ip) {
            self.router_checks(f.ttl, pkt, mtu)?;
            // An established session: translate. Anything else (no session, one idle
            // past its timeout) goes out of line; the flow is never handed to a call
            // here, so it stays in registers instead of being laid out in memory.
            let sh = &*self.shared;
            let h = match sh.sessions.hit(&f.tuple) {
                Some(h) if is_live(sh, &h, now) => h,
                found => return self.flow_miss(now, dir, pkt, offload, found.is_none()),
            };
            // A session a gateway reads (PPTP's control channel) goes out of line too.
            let flags = h.flags();
            if flags & ALG != 0 {
                return self.flow_miss(now, dir, pkt, offload, false);
            }
            let f = Flow { offload, ..f };
            let hairpin = forward_with::<false>(sh, h, flags, dir, Leg::Wire, &f, now, pkt)?;
            return self.hairpin_if(hairpin, now, offload, pkt);
        }
        self.process_other(now, dir, pkt, offload, mtu)
    }

    /// What a router checks before forwarding: the TTL, then the next hop's MTU (RFC 1812
    /// §5.2.6, §4.2.2.7: in that order).
    #[inline(always)]
    fn router_checks(&self, ttl: u8, pkt: &[u8], mtu: Option<u32>) -> Result<(), DropReason> {
        if self.shared.cfg.decrement_ttl && ttl <= 1 {
            return Err(DropReason::TtlExpired);
        }
        fits(pkt, mtu)
    }

    /// The hairpin's return pass, when the first pass sent the packet to one of the NAT's
    /// own public endpoints.
    #[inline(always)]
    fn hairpin_if(
        &mut self,
        hairpin: bool,
        now: Timestamp,
        offload: Offload,
        pkt: &mut [u8],
    ) -> Result<(), DropReason> {
        if hairpin {
            self.hairpin_return(now, offload, pkt)?;
        }
        Ok(())
    }

    /// The common shape without a live session (`absent`: none was found at all, so the
    /// lookup is not repeated): parsed again (cheap beside making a session) and taken
    /// through the general flow path.
    #[cold]
    #[inline(never)]
    fn flow_miss(
        &mut self,
        now: Timestamp,
        dir: Direction,
        pkt: &mut [u8],
        offload: Offload,
        absent: bool,
    ) -> Result<(), DropReason> {
        let Some(f) = parse_fast(pkt, offload != Offload::Gso) else {
            return Err(DropReason::Malformed); // not reached: the same bytes parsed before
        };
        let f = Flow { offload, ..f };
        let hairpin = if absent {
            self.flow_create(now, dir, Leg::Wire, f, pkt)?
        } else {
            self.flow(now, dir, Leg::Wire, f, pkt)?
        };
        self.hairpin_if(hairpin, now, offload, pkt)
    }

    /// Every other shape (options, fragments, ICMP, a bad checksum, a drop to name): the
    /// full parse, out of line so the common case above stays small.
    #[cold]
    #[inline(never)]
    fn process_other(
        &mut self,
        now: Timestamp,
        dir: Direction,
        pkt: &mut [u8],
        offload: Offload,
        mtu: Option<u32>,
    ) -> Result<(), DropReason> {
        let parsed = parse_full(pkt, offload != Offload::Gso)?;
        let ttl = match parsed {
            Parsed::Flow(f) | Parsed::FirstFragment(f, _) => f.ttl,
            Parsed::IcmpError(e) => e.ttl,
            Parsed::Fragment(g) => g.ttl,
        };
        self.router_checks(ttl, pkt, mtu)?;
        let hairpin = self.pass(now, dir, Leg::Wire, parsed, offload, pkt)?;
        self.hairpin_if(hairpin, now, offload, pkt)
    }

    /// RFC 4787 REQ-9 / RFC 5128 §3.3: the packet left its sender's mapping for one of the
    /// NAT's own public endpoints, as it would for an outside peer (that session is the
    /// sender's filtering state: a hole punched). Now it comes back in to that endpoint's
    /// mapping, from the sender's public endpoint, subject to the destination's filtering
    /// like any inbound packet. Out of line: a second inlined copy of the table pass
    /// costed the established-flow path a quarter of its speed.
    #[cold]
    #[inline(never)]
    fn hairpin_return(
        &mut self,
        now: Timestamp,
        offload: Offload,
        pkt: &mut [u8],
    ) -> Result<(), DropReason> {
        let parsed = parse_with(pkt, offload != Offload::Gso)?;
        self.pass(now, Direction::Inbound, Leg::Hairpin, parsed, offload, pkt)?;
        self.counters.hairpinned += 1;
        Ok(())
    }

    /// One pass through the tables. `Ok(true)`: the packet now goes to one of the NAT's
    /// public endpoints and must make the hairpin's return pass. Always inlined: as a
    /// call, the parsed packet is copied into it and the established-flow path slows.
    #[inline(always)]
    fn pass(
        &mut self,
        now: Timestamp,
        dir: Direction,
        leg: Leg,
        parsed: Parsed,
        offload: Offload,
        pkt: &mut [u8],
    ) -> Result<bool, DropReason> {
        match parsed {
            Parsed::Flow(f) if pptp::may_be_gre_call(&self.shared.cfg, &f, leg) => {
                self.gre_call(now, dir, leg, Flow { offload, ..f }, None, pkt)
            }
            Parsed::FirstFragment(f, ident) if pptp::may_be_gre_call(&self.shared.cfg, &f, leg) => {
                self.gre_call(now, dir, leg, Flow { offload, ..f }, Some(ident), pkt)
            }
            Parsed::Flow(f) => self.flow(now, dir, leg, Flow { offload, ..f }, pkt),
            Parsed::IcmpError(e) => self.icmp_error(now, dir, leg, e, pkt),
            Parsed::FirstFragment(f, ident) => {
                self.first_fragment(now, dir, leg, Flow { offload, ..f }, ident, pkt)
            }
            Parsed::Fragment(g) => self.later_fragment(now, dir, leg, g, pkt),
        }
    }

    /// Enhanced GRE (PPTP's data): a call the control channel announced goes by its call
    /// ids as ports (`pptp`), the inbound packet given its client's own id back; GRE of
    /// no known call by address only. The call's session is made by its first packet
    /// either way: the PAC may speak first. `first`: the packet is a datagram's first
    /// fragment (its identification), whose later fragments follow its addresses.
    #[cold]
    #[inline(never)]
    fn gre_call(
        &mut self,
        now: Timestamp,
        dir: Direction,
        leg: Leg,
        mut f: Flow,
        first: Option<u16>,
        pkt: &mut [u8],
    ) -> Result<bool, DropReason> {
        let end = f.total_len.min(pkt.len());
        let Some(id) = pkt.get(f.l4_off..end).and_then(pptp::gre_call_id) else {
            return self.flow_or_first(now, dir, leg, f, first, pkt);
        };
        let (src, dst) = (f.tuple.src.addr, f.tuple.dst.addr);
        let calls = &self.shared.pptp;
        match dir {
            Direction::Outbound => {
                if let Some(call) = calls.outbound(src, dst, id, now) {
                    f.tuple.src.port = call.public_id;
                    f.tuple.dst.port = call.pac_id;
                    self.retire_stale_call_session(&call, dst, now);
                }
                self.flow_or_first(now, dir, leg, f, first, pkt)
            }
            Direction::Inbound => {
                let Some(call) = calls.inbound(dst, src, id, now) else {
                    // A client of an inside server: its GRE may come before the server's.
                    if let Some(server) = calls.served(dst, src, now) {
                        let original = Tuple::new(
                            Proto::Other,
                            Endpoint::new(server, f.tuple.dst.port),
                            Endpoint::new(src, f.tuple.src.port),
                        );
                        self.open_for(now, &f.tuple, &original)?;
                    }
                    return self.flow_or_first(now, dir, leg, f, first, pkt);
                };
                f.tuple.src.port = call.pac_id;
                f.tuple.dst.port = call.public_id;
                self.retire_stale_call_session(&call, src, now);
                let original = Tuple::new(
                    Proto::Other,
                    Endpoint::new(call.inside, call.public_id),
                    Endpoint::new(src, call.pac_id),
                );
                self.open_for(now, &f.tuple, &original)?;
                let hairpin = self.flow_or_first(now, dir, leg, f, first, pkt)?;
                pptp::set_gre_call_id(&mut pkt[f.l4_off..end], call.pns_id);
                Ok(hairpin)
            }
        }
    }

    /// An inbound packet of tuple `t` that the control channel expects, before the
    /// inside host has sent anything: its session made from the inside's `original`.
    fn open_for(&mut self, now: Timestamp, t: &Tuple, original: &Tuple) -> Result<(), DropReason> {
        if live_hit(&self.shared, t, now).is_none() {
            self.new_outbound(now, original)?;
        }
        Ok(())
    }

    /// A call's public id is free again as soon as the call ends, while the ended call's
    /// GRE session lives on until its timeout: when a new call (another client's) takes
    /// the id and the server reuses its own, that session would carry the new call's GRE
    /// to the old client. It is ended first.
    fn retire_stale_call_session(
        &mut self,
        call: &pptp::GreCall,
        pac: std::net::Ipv4Addr,
        now: Timestamp,
    ) {
        let sh = &*self.shared;
        let reply = Tuple::new(
            Proto::Other,
            Endpoint::new(pac, call.pac_id),
            Endpoint::new(call.public, call.public_id),
        );
        let Some(r) = sh.sessions.lookup(&reply) else {
            return;
        };
        let original = RecordRef {
            session: r.session,
            side: conntrack::Record::Original,
        };
        if sh
            .sessions
            .initial(original)
            .is_some_and(|t| t.src.addr != call.inside)
        {
            expire(
                sh,
                &mut self.counters,
                r.session,
                Origin { ring: self.id, now },
            );
        }
    }

    /// A whole packet through its flow, or a first fragment (`first`: its datagram's
    /// identification) through its flow and filed for the fragments that follow.
    #[inline]
    fn flow_or_first(
        &mut self,
        now: Timestamp,
        dir: Direction,
        leg: Leg,
        f: Flow,
        first: Option<u16>,
        pkt: &mut [u8],
    ) -> Result<bool, DropReason> {
        match first {
            Some(ident) => self.first_fragment(now, dir, leg, f, ident, pkt),
            None => self.flow(now, dir, leg, f, pkt),
        }
    }

    /// An ICMP error from the outside quoting a call's outbound GRE (which carries the
    /// PAC's call id): the quote's tuple is given the call's ports, so the error finds
    /// the call's session and reaches its client.
    #[cold]
    fn gre_call_quoted(&self, e: &mut IcmpError, pkt: &[u8]) {
        let gre = e.icmp_off + 8 + e.quote_ihl;
        let q = &mut e.quoted;
        let Some(pac_id) = pkt.get(gre..).and_then(pptp::gre_call_id) else {
            return;
        };
        if let Some(public_id) = self.shared.pptp.quoted(q.src.addr, q.dst.addr, pac_id) {
            q.src.port = public_id;
            q.dst.port = pac_id;
        }
    }

    /// RFC 4787 REQ-14, RFC 6146 §3.4: the first fragment carries the ports, so it goes
    /// through its session like a whole packet (creating it if need be); then the
    /// addresses it left with are filed for the fragments that follow.
    fn first_fragment(
        &mut self,
        now: Timestamp,
        dir: Direction,
        leg: Leg,
        f: Flow,
        ident: u16,
        pkt: &mut [u8],
    ) -> Result<bool, DropReason> {
        let key = FragKey {
            src: f.tuple.src.addr,
            dst: f.tuple.dst.addr,
            // As the later fragments carry it (a PPTP call's tuple carries call ids).
            proto: pkt.get(9).copied().ok_or(DropReason::Truncated)?,
            ident,
        };
        let hairpin = self.flow(now, dir, leg, f, pkt)?;
        let h = pkt.get(12..20).ok_or(DropReason::Truncated)?;
        let to = FragRewrite {
            src: std::net::Ipv4Addr::new(h[0], h[1], h[2], h[3]),
            dst: std::net::Ipv4Addr::new(h[4], h[5], h[6], h[7]),
        };
        let piece = Piece {
            offset: 0,
            len: f.total_len.saturating_sub(f.l4_off) as u32,
            more: true,
        };
        let held = (self.shared.frags).first(now, key, to, dir, piece, &mut self.counters)?;
        self.released.extend(held.into_iter().map(|held| Released {
            held,
            to,
            dir,
            at: now,
        }));
        self.counters.fragments_translated += 1;
        Ok(hairpin)
    }

    /// A fragment after the first: its datagram's record gives the addresses; there is
    /// no transport header to touch. No record: the first fragment has not passed, and
    /// this one is held for it (`frag`); never on a hairpin's return pass, whose first
    /// fragment made its pass just before.
    fn later_fragment(
        &mut self,
        now: Timestamp,
        dir: Direction,
        leg: Leg,
        g: Fragment,
        pkt: &mut [u8],
    ) -> Result<bool, DropReason> {
        let sh = &*self.shared;
        // Only the hairpin's return pass comes in from one of the NAT's own addresses.
        if leg == Leg::Wire && dir == Direction::Inbound && sh.is_public(g.key.src) {
            return Err(DropReason::WrongDirection);
        }
        let arrival = Arrival {
            key: g.key,
            dir,
            piece: g.piece,
            packet: pkt,
            ihl: g.ihl,
            may_hold: leg == Leg::Wire,
        };
        let to = match sh.frags.later(now, &arrival, &mut self.counters)? {
            Later::Rewrite(to) => to,
            Later::Held => return Err(DropReason::FragmentHeld),
        };
        if !rewrite_fragment(pkt, g.ihl, to, leg.decrement_ttl(sh.cfg.decrement_ttl)) {
            return Err(DropReason::Truncated);
        }
        self.counters.fragments_translated += 1;
        Ok(dir == Direction::Outbound && sh.is_public(to.dst))
    }

    /// Looks a tuple up; a session found idle past its timeout is expired on the spot.
    #[inline]
    fn lookup_live(&mut self, t: &Tuple, now: Timestamp) -> Option<RecordRef> {
        let at = Origin { ring: self.id, now };
        live_or_expire(&self.shared, &mut self.counters, t, at).map(|h| h.r)
    }

    #[inline]
    fn flow(
        &mut self,
        now: Timestamp,
        dir: Direction,
        leg: Leg,
        f: Flow,
        pkt: &mut [u8],
    ) -> Result<bool, DropReason> {
        // Fast path: an established session, its slot located once.
        let at = Origin { ring: self.id, now };
        if let Some(h) = live_or_expire(&self.shared, &mut self.counters, &f.tuple, at) {
            return forward(&self.shared, h, dir, leg, &f, now, pkt);
        }
        self.flow_create(now, dir, leg, f, pkt)
    }

    /// No live session for `f`: make one (or refuse the packet), then translate.
    #[inline]
    fn flow_create(
        &mut self,
        now: Timestamp,
        dir: Direction,
        leg: Leg,
        f: Flow,
        pkt: &mut [u8],
    ) -> Result<bool, DropReason> {
        let r = match dir {
            Direction::Outbound => self.new_outbound(now, &f.tuple)?,
            // A hairpin's return pass is an inbound packet in every respect (RFC 4787
            // REQ-9, RFC 6146 §3.8): an unsolicited SYN on it is held like one from
            // outside, its Port Unreachable making the hairpin back to the sender.
            Direction::Inbound => match self.new_inbound(now, leg, &f.tuple) {
                Ok(r) => r,
                Err(e) => return Err(self.unsolicited(now, &f, pkt, e)),
            },
        };
        let sh = &*self.shared;
        let h = sh.sessions.hit_of(r).ok_or(DropReason::NoMapping)?;
        if dir == Direction::Outbound && f.kind == L4Kind::Tcp && is_syn(f.tcp_flags) {
            // RFC 5382 REQ-4: "If during this interval the NAT receives and translates an
            // outbound SYN for the connection the NAT MUST silently drop the original
            // unsolicited inbound SYN packet."
            sh.held.release(&h.revised());
        }
        forward(sh, h, dir, leg, &f, now, pkt)
    }

    /// An inbound packet no session or binding lets in (`e`: `no_mapping` or `filtered`).
    /// RFC 6146 §3.5.2.2 and RFC 5382 REQ-4: a TCP SYN to a public address may be the
    /// peer's half of a simultaneous open, so it is held for 6 s (see `held`) unless
    /// `drop_externally_initiated_tcp` is set; anything else keeps its reason.
    #[cold]
    fn unsolicited(&mut self, now: Timestamp, f: &Flow, pkt: &[u8], e: DropReason) -> DropReason {
        let sh = &*self.shared;
        if f.kind != L4Kind::Tcp
            || !is_syn(f.tcp_flags)
            || !matches!(e, DropReason::NoMapping | DropReason::Filtered)
            || sh.cfg.drop_externally_initiated_tcp
            || !sh.is_public(f.tuple.dst.addr)
        {
            return e;
        }
        let end = f.total_len.min(pkt.len());
        match sh.held.hold(now, &f.tuple, &pkt[..end]) {
            Hold::Held | Hold::Again => DropReason::SynHeld,
            Hold::Full => DropReason::SynHoldFull,
        }
    }

    /// RFC 5382 REQ-4: "Otherwise, the NAT SHOULD send an ICMP Port Unreachable error
    /// (Type 3, Code 3) for the original SYN": the held SYNs whose 6 s have passed at
    /// `now` are answered into `out` (cleared first), from the address each was sent to,
    /// rate limited with this worker's other ICMP errors. Returns `out`'s packet count.
    ///
    /// Then the later fragments their first fragment released here, translated as their
    /// first was (and hairpinned like it), in the order they arrived, as many as `out`
    /// holds: the rest stay due.
    pub fn poll_due(&mut self, now: Timestamp, out: &mut Output) -> usize {
        out.clear();
        let shared = Arc::clone(&self.shared);
        shared
            .held
            .expire(now, |syn| self.answer_held(now, syn, out));
        while let Some(r) = self.released.front() {
            let bytes = &r.held.bytes;
            let Some(slot) = out.slot(bytes.len()) else {
                break;
            };
            slot[HEADROOM..HEADROOM + bytes.len()].copy_from_slice(bytes);
            if !out.commit(bytes.len(), HEADROOM, bytes.len()) {
                break;
            }
            let r = self.released.pop_front().expect("looked at above");
            self.send_released(now, r, out);
        }
        out.len()
    }

    /// Translates the released fragment `r`, copied as `out`'s last packet, to its first
    /// fragment's addresses (its hairpin's return pass too, when the first made one);
    /// one that cannot be is dropped from `out`, counted.
    fn send_released(&mut self, now: Timestamp, r: Released, out: &mut Output) {
        let last = out.len() - 1;
        let decrement = self.shared.cfg.decrement_ttl;
        let hairpin = r.dir == Direction::Outbound && self.shared.is_public(r.to.dst);
        let sent = match out.framed_mut(last, 0) {
            Some(p) => {
                if !rewrite_fragment(p, r.held.ihl, r.to, decrement) {
                    Err(DropReason::Truncated)
                } else if hairpin {
                    self.hairpin_return(now, Offload::None, p)
                } else {
                    Ok(())
                }
            }
            None => Err(DropReason::Truncated),
        };
        match sent {
            Ok(()) => {
                self.counters.forwarded += 1;
                self.counters.fragments_translated += 1;
            }
            Err(why) => {
                out.discard_last();
                self.counters.drop(why);
            }
        }
    }

    /// Adds the Port Unreachable for the held SYN `syn` to `out`, from the address it was
    /// sent to. A SYN held on a hairpin's return pass came from one of the NAT's own
    /// public endpoints: its answer makes that return pass too, back to the host inside
    /// that sent it (an error that cannot is dropped, counted, never sent out).
    fn answer_held(&mut self, now: Timestamp, syn: &[u8], out: &mut Output) {
        let Some(a) = syn.get(12..20) else {
            return;
        };
        let from = std::net::Ipv4Addr::new(a[0], a[1], a[2], a[3]);
        let src = std::net::Ipv4Addr::new(a[4], a[5], a[6], a[7]);
        let why = IcmpReason::PortUnreachable;
        let c = &mut self.counters;
        if !self.responder.answer_v4_from(now, src, syn, out, why, c)
            || !self.shared.is_public(from)
        {
            return;
        }
        let last = out.len() - 1;
        let back = match out.framed_mut(last, 0) {
            Some(error) => self.hairpin_return(now, Offload::None, error),
            None => Err(DropReason::Truncated),
        };
        if let Err(r) = back {
            out.discard_last();
            self.counters.error_unsent(r);
        }
    }

    /// When [`poll_due`](Self::poll_due) next has something to send: a SYN to answer,
    /// or a released fragment (due when its first fragment passed).
    pub fn due_timeout(&self) -> Option<Timestamp> {
        let fragment = self.released.front().map(|r| r.at);
        match (self.shared.held.next_expiry(), fragment) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn icmp_error(
        &mut self,
        now: Timestamp,
        dir: Direction,
        leg: Leg,
        e: IcmpError,
        pkt: &mut [u8],
    ) -> Result<bool, DropReason> {
        let mut e = e;
        if dir == Direction::Inbound && pptp::is_gre(&self.shared.cfg, &e.quoted) {
            self.gre_call_quoted(&mut e, pkt);
        }
        // The quote is a packet this NAT forwarded; its reverse is the tuple of the record
        // the error travels along (RFC 5508 §7). An error does not refresh the session.
        let r = self
            .lookup_live(&e.quoted.reversed(), now)
            .ok_or(DropReason::IcmpErrorNoSession)?;
        let sessions = &self.shared.sessions;
        let flags = sessions.flags(r.session);
        if side_direction(flags, r.side) != dir || !leg_allowed(flags, dir, leg) {
            return Err(DropReason::WrongDirection);
        }
        let (initial, revised) = match (sessions.initial(r), sessions.revised(r)) {
            (Some(i), Some(v)) => (i, v),
            _ => return Err(DropReason::IcmpErrorNoSession),
        };
        if e.outer_dst != initial.dst.addr {
            return Err(DropReason::IcmpErrorNoSession);
        }
        let how = IcmpErrorRewrite {
            icmp_off: e.icmp_off,
            outer_src: if e.outer_src == initial.src.addr {
                revised.src.addr
            } else {
                e.outer_src
            },
            outer_dst: revised.dst.addr,
            quote_ihl: e.quote_ihl,
            quote_kind: e.quote_kind,
            quote_to: rewrite_of(&revised.reversed()),
        };
        let end = e.total_len.min(pkt.len());
        let decrement = leg.decrement_ttl(self.shared.cfg.decrement_ttl);
        if !rewrite_icmp_error(&mut pkt[..end], &how, decrement) {
            return Err(DropReason::IcmpErrorMalformed);
        }
        self.counters.icmp_errors_translated += 1;
        Ok(returns(flags, dir))
    }

    /// A new flow from the inside: find or make the binding, then install both records.
    /// To one of the NAT's own public endpoints (a hairpin) it is the same: the session
    /// records the sender's mapping and filtering state toward that endpoint exactly as
    /// toward an outside peer (RFC 4787 REQ-9), whether or not the destination's filter
    /// then lets the packet in on the return pass — so that the destination's answer
    /// passes (hole punching, RFC 5128 §3.3/§3.4).
    fn new_outbound(&mut self, now: Timestamp, t: &Tuple) -> Result<RecordRef, DropReason> {
        let hairpin = self.shared.is_public(t.dst.addr);
        if hairpin && !self.shared.cfg.hairpinning {
            return Err(DropReason::HairpinDisabled);
        }
        // RFC 6888 REQ-5: the session is counted before anything is made for it, and
        // given back unless this call installed it (another worker's copy is theirs).
        let at = Origin { ring: self.id, now };
        if let Err(e) = self.shared.acquire_host(Counted::Sessions, t.src.addr) {
            let limit = self.shared.cfg.max_sessions_per_host;
            self.shared.log_refusal(at, e, t.proto, t.src, limit);
            return Err(e);
        }
        let created = self.counters.sessions_created;
        let r = self.new_outbound_counted(now, t, hairpin);
        if r.is_err() || self.counters.sessions_created == created {
            self.shared.release_host(Counted::Sessions, t.src.addr);
        }
        if let Err(e) = r {
            let limit = self.shared.refused_port_limit(e, t.proto, t.src.addr);
            self.shared.log_refusal(at, e, t.proto, t.src, limit);
        }
        r
    }

    fn new_outbound_counted(
        &mut self,
        now: Timestamp,
        t: &Tuple,
        hairpin: bool,
    ) -> Result<RecordRef, DropReason> {
        let bid = self.outbound_binding(now, t.proto, t.src)?;
        let mut public = self
            .shared
            .bindings
            .get(bid)
            .map(|b| key_ep(b.key_b))
            .ok_or(DropReason::NoMapping)?;
        if t.proto == Proto::Other {
            // Address only: the binding's port just keeps its key unique; the tuple
            // carries the protocol number (see `parse::address_only`).
            public.port = t.src.port;
        }
        let revised = Tuple::new(t.proto, public, t.dst);
        let flags = FROM_INSIDE
            | if hairpin {
                HAIRPIN
            } else if pptp::is_control(&self.shared.cfg, t) {
                ALG
            } else {
                0
            };
        self.install(now, *t, revised, bid, flags)
    }

    /// A new flow from the outside to a public endpoint; on the hairpin's return pass,
    /// from another inside host's public endpoint.
    fn new_inbound(
        &mut self,
        now: Timestamp,
        leg: Leg,
        t: &Tuple,
    ) -> Result<RecordRef, DropReason> {
        let sh = &self.shared;
        // Only the hairpin's return pass comes in from one of the NAT's own addresses.
        if leg == Leg::Wire && sh.is_public(t.src.addr) {
            return Err(DropReason::WrongDirection);
        }
        // RFC 6146 §3.5.3, RFC 5508 §3.1: an ICMP echo request from the outside reaches
        // the binding of its identifier (a request carries it as its source "port").
        let echo_request = t.proto == Proto::Icmp && t.dst.port == 0;
        let public = if echo_request {
            Endpoint::new(t.dst.addr, t.src.port)
        } else {
            t.dst
        };
        let (inside, existing) = sh
            .inbound_target(t.proto, public)
            .ok_or(DropReason::NoMapping)?;
        let bid = match existing {
            Some(b) => {
                if !sh.filter_allows(b, t.src) {
                    return Err(DropReason::Filtered);
                }
                if !sh.bindings.try_ref(b) {
                    return Err(DropReason::NoMapping);
                }
                b
            }
            // Static 1:1: the binding is made on demand, port kept.
            None => {
                if !sh.acquire_inside(inside.addr) {
                    return Err(DropReason::NoMapping);
                }
                match sh.bindings.insert_within(
                    ep_key(t.proto, inside),
                    ep_key(t.proto, public),
                    true,
                    1,
                    false,
                    0,
                    sh.binding_room(),
                ) {
                    Ok(b) => b,
                    Err(e) => {
                        sh.release_inside_unless_withdrawn(inside.addr, e, now);
                        match e {
                            RefInsertError::ExistsA(b) if sh.bindings.try_ref(b) => b,
                            RefInsertError::Full => return Err(DropReason::TableFull),
                            _ => return Err(DropReason::NoMapping),
                        }
                    }
                }
            }
        };
        let revised = if echo_request {
            // The request reaches the host with the host's own identifier.
            Tuple::new(
                t.proto,
                Endpoint::new(t.src.addr, inside.port),
                Endpoint::new(inside.addr, 0),
            )
        } else {
            Tuple::new(t.proto, t.src, inside)
        };
        // Made by a packet that came in: its binding has had one.
        let flags = INBOUND_SEEN
            | if leg == Leg::Hairpin {
                HAIRPIN
            } else if pptp::is_control(&sh.cfg, t) {
                ALG
            } else {
                0
            };
        self.install(now, *t, revised, bid, flags)
    }

    /// The binding an inside endpoint uses, with a reference taken for the new session:
    /// existing, static 1:1, or newly allocated from its rule's pool (endpoint-independent
    /// mapping, paired pooling). When two workers create it at once, the binding table's
    /// insert picks one and the other gives its port back.
    fn outbound_binding(
        &mut self,
        now: Timestamp,
        proto: Proto,
        inside: Endpoint,
    ) -> Result<u32, DropReason> {
        let sh = Arc::clone(&self.shared);
        let key = ep_key(proto, inside);
        for _ in 0..4 {
            if let Some(b) = sh.bindings.find_a(key) {
                if sh.bindings.try_ref(b) {
                    return Ok(b);
                }
            }
            let (public, rule) = if let Some(p) = sh.static_by_inside.get(&inside.addr) {
                (Endpoint::new(*p, inside.port), None)
            } else {
                let rule = sh.rules.lookup(inside.addr).ok_or(DropReason::NoRule)?;
                let pool = &sh.pools[rule as usize];
                let a = if let Some(range) = sh.det_range(rule, inside.addr) {
                    // Deterministic NAT: a port of the subscriber's own range.
                    sh.det_allocate(pool, proto, inside, range)?
                } else {
                    // RFC 6888 REQ-4: the port is counted before it is taken; the reaper
                    // gives it back with the binding, or this call when no binding is made.
                    sh.acquire_host(Counted::Ports(proto), inside.addr)?;
                    pool.allocate_for(
                        proto,
                        inside,
                        sh.subscriber_of(inside.addr),
                        sh.cfg.port_preservation,
                        self.id,
                    )
                    .map_err(|e| {
                        sh.release_host(Counted::Ports(proto), inside.addr);
                        match e {
                            PoolError::PairedAddressFull | PoolError::Empty => {
                                DropReason::PoolExhausted
                            }
                            // PBA: the subscriber's blocks are full and it may take no more.
                            PoolError::BlockLimit => DropReason::SubscriberLimit,
                        }
                    })?
                };
                if let Some(b) = &a.block {
                    sh.log_block(Origin { ring: self.id, now }, true, b);
                }
                (a.public, Some(rule))
            };
            // Undoes the count of a port this call took and will not bind.
            let uncount = |sh: &Nat44Shared| {
                if rule.is_some() {
                    sh.release_host(Counted::Ports(proto), inside.addr);
                }
            };
            let give_back = |sh: &Nat44Shared| {
                if let Some(r) = rule {
                    if let Some(b) = sh.pools[r as usize].give_back_now(proto, public) {
                        sh.log_block(Origin { ring: self.id, now }, false, &b);
                    }
                }
            };
            if !sh.acquire_inside(inside.addr) {
                give_back(&sh);
                uncount(&sh);
                return Err(DropReason::NoMapping);
            }
            let inserted = sh.bindings.insert_within(
                key,
                ep_key(proto, public),
                true,
                1,
                false,
                rule.map_or(0, |r| r + 1),
                sh.binding_room(),
            );
            if let Err(e) = inserted {
                sh.release_inside_unless_withdrawn(inside.addr, e, now);
            }
            match inserted {
                Ok(b) => {
                    self.counters.bindings_created += 1;
                    sh.log_binding(Origin { ring: self.id, now }, true, proto, inside, public);
                    return Ok(b);
                }
                Err(RefInsertError::ExistsA(_)) => {
                    // another worker won: use its binding
                    give_back(&sh);
                    uncount(&sh);
                }
                // Published, then withdrawn: the reaper uncounts it when it collects it.
                Err(RefInsertError::ExistsB(_)) => {
                    give_back(&sh);
                    return Err(DropReason::PoolExhausted);
                }
                Err(RefInsertError::Full) => {
                    give_back(&sh);
                    uncount(&sh);
                    return Err(DropReason::TableFull);
                }
            }
        }
        Err(DropReason::PoolExhausted)
    }

    fn install(
        &mut self,
        now: Timestamp,
        initial: Tuple,
        revised: Tuple,
        bid: u32,
        flags: u32,
    ) -> Result<RecordRef, DropReason> {
        let sh = Arc::clone(&self.shared);
        let permit = if sh.cfg.filtering == Filtering::AddressDependent {
            let remote = if flags & FROM_INSIDE != 0 {
                revised.dst.addr
            } else {
                initial.src.addr
            };
            match sh.acquire_permit(bid, remote) {
                Some(p) => Some(p),
                None => {
                    sh.bindings.unref(bid);
                    return Err(DropReason::TableFull);
                }
            }
        } else {
            None
        };
        let undo = |sh: &Nat44Shared| {
            sh.bindings.unref(bid);
            if let Some(p) = permit {
                sh.permits.unref(p);
            }
        };
        // Sessions opened from the outside: at most 3/4 of the table live, and 7/8 of its
        // slots with the dead ones awaiting reclamation; the last eighth stays for the
        // inside users even under a spoofed SYN flood at a port forward (see `reaper`).
        let room = if flags & (FROM_INSIDE | HAIRPIN) == 0 {
            super::reaper::outside_room(sh.sessions.capacity())
        } else {
            Room::ANY
        };
        let new = NewSession {
            initial,
            revised,
            binding: bid,
            flags,
        };
        let counters = &mut self.counters;
        // At the live bound, one unconfirmed session is evicted and the new one gets in
        // (conntrack's early_drop at insert); the victim's slot comes back through the
        // reaper's queue within a tick.
        let inserted = sh.sessions.insert_evicting(
            &new,
            now,
            room,
            super::reaper::EARLY_DROP_SCAN,
            super::reaper::is_victim,
            |_, v| {
                release_session(&sh, &v, Origin { ring: self.id, now });
                counters.sessions_early_dropped += 1;
            },
        );
        match inserted {
            Ok(id) => {
                self.counters.sessions_created += 1;
                let at = Origin { ring: self.id, now };
                sh.log_session(at, true, flags, &initial, &revised);
                Ok(RecordRef {
                    session: id,
                    side: Record::Original,
                })
            }
            Err(InsertError::Exists(r)) => {
                undo(&sh);
                // Another worker created this session a moment ago: use the winner's.
                // Unless the record it found is another inside host's: address-only
                // protocols have no port to tell two hosts apart, so one host at a time
                // holds a (public address, remote, protocol).
                match sh.sessions.initial(r) {
                    Some(t) if t != initial && initial.proto == Proto::Other => {
                        Err(DropReason::AddressOnlyInUse)
                    }
                    _ => Ok(r),
                }
            }
            Err(InsertError::Full) => {
                undo(&sh);
                // An inside user's session found no slot at all: make room for the next
                // ones, unconfirmed sessions first, reclaimed by the reaper within a tick.
                // (An outside one was refused at its bounds: with no victim, or with the
                // dead slots not yet freed; dropping more would not help it.)
                if room == Room::ANY {
                    super::reaper::evict(
                        &sh,
                        &mut self.counters,
                        Origin { ring: self.id, now },
                        super::reaper::EARLY_DROP_SCAN,
                        super::reaper::EARLY_DROP_MAX,
                    );
                }
                Err(DropReason::TableFull)
            }
        }
    }
}

/// Whether a record of a session with `flags`, matched from `dir`, may be used on `leg`:
/// the inbound records of a hairpin session (`HAIRPIN`: its peer is one of the NAT's own
/// public endpoints) carry one of the NAT's addresses as source, so only the hairpin's
/// return pass may use them, never a packet from the outside claiming that source.
#[inline]
fn leg_allowed(flags: u32, dir: Direction, leg: Leg) -> bool {
    flags & HAIRPIN == 0 || dir == Direction::Outbound || leg == Leg::Hairpin
}

/// Whether a packet translated along a record of a session with `flags`, from `dir`, now
/// goes to one of the NAT's public endpoints (and must make the hairpin's return pass).
#[inline]
fn returns(flags: u32, dir: Direction) -> bool {
    flags & HAIRPIN != 0 && dir == Direction::Outbound
}

/// Whether the session `h` hit is within its idle timeout at `now`.
#[inline(always)]
fn is_live(sh: &Nat44Shared, h: &conntrack::Hit<'_>, now: Timestamp) -> bool {
    let (seen, tcp, proto) = h.activity();
    seen + sh.timeout(proto, tcp) > now
}

/// The session `t` hits, if it is live (see [`is_live`]); one found idle past its
/// timeout is expired on the spot (by `at`).
#[inline(always)]
fn live_or_expire<'a>(
    sh: &'a Nat44Shared,
    counters: &mut Counters,
    t: &Tuple,
    at: Origin,
) -> Option<conntrack::Hit<'a>> {
    let h = sh.sessions.hit(t)?;
    if is_live(sh, &h, at.now) {
        return Some(h);
    }
    expire(sh, counters, h.r.session, at);
    None
}

/// The session `t` hits, if it is live (see [`is_live`]); one idle past its timeout is
/// left for the general path to expire.
#[inline(always)]
fn live_hit<'a>(sh: &'a Nat44Shared, t: &Tuple, now: Timestamp) -> Option<conntrack::Hit<'a>> {
    sh.sessions.hit(t).filter(|h| is_live(sh, h, now))
}

/// Translates a packet along the record it hit; `Ok(true)` when the packet now goes to
/// one of the NAT's public endpoints (see [`returns`]). A session a gateway reads (PPTP's
/// control channel) takes the same steps out of line, and its payload is read after.
#[inline(always)]
fn forward(
    sh: &Nat44Shared,
    h: conntrack::Hit<'_>,
    dir: Direction,
    leg: Leg,
    f: &Flow,
    now: Timestamp,
    pkt: &mut [u8],
) -> Result<bool, DropReason> {
    let flags = h.flags();
    if flags & ALG != 0 {
        return forward_alg(sh, h, flags, dir, leg, f, now, pkt);
    }
    forward_with::<false>(sh, h, flags, dir, leg, f, now, pkt)
}

#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)] // forward_with's, passed on
fn forward_alg(
    sh: &Nat44Shared,
    h: conntrack::Hit<'_>,
    flags: u32,
    dir: Direction,
    leg: Leg,
    f: &Flow,
    now: Timestamp,
    pkt: &mut [u8],
) -> Result<bool, DropReason> {
    forward_with::<true>(sh, h, flags, dir, leg, f, now, pkt)
}

/// [`forward`]'s steps; `ALG_READS`: the session's payload is read (`pptp_control`)
/// and it is never shown to the offload.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // one body for two call sites, folded by the constant
fn forward_with<const ALG_READS: bool>(
    sh: &Nat44Shared,
    h: conntrack::Hit<'_>,
    flags: u32,
    dir: Direction,
    leg: Leg,
    f: &Flow,
    now: Timestamp,
    pkt: &mut [u8],
) -> Result<bool, DropReason> {
    if side_direction(flags, h.r.side) != dir || !leg_allowed(flags, dir, leg) {
        return Err(DropReason::WrongDirection);
    }
    let end = f.total_len.min(pkt.len());
    if f.kind == L4Kind::Tcp {
        observe_tcp(&h, pkt, f.l4_off, end)?;
    }
    h.touch_from(now, dir == Direction::Inbound);
    if !ALG_READS {
        sh.hint_offload(&h);
    }
    let to = h.revised();
    let to = rewrite_of(&to);
    let decrement = leg.decrement_ttl(sh.cfg.decrement_ttl);
    match f.offload {
        Offload::None => rewrite(&mut pkt[..end], f.l4_off, f.kind, &to, decrement),
        Offload::PartialCsum | Offload::Gso => {
            rewrite_partial(&mut pkt[..end], f.l4_off, f.kind, &to, decrement)
        }
    };
    if ALG_READS {
        pptp_control(sh, &h, flags, dir, f, now, &mut pkt[..end])?;
    }
    Ok(returns(flags, dir))
}

/// A PPTP control connection's segment, translated: its calls read and the client's
/// call ids rewritten (`pptp`), the TCP checksum fixed by the difference (left alone
/// when a receive offload finishes it: it covers only the pseudo-header then).
#[cold]
#[inline(never)]
fn pptp_control(
    sh: &Nat44Shared,
    h: &conntrack::Hit<'_>,
    flags: u32,
    dir: Direction,
    f: &Flow,
    now: Timestamp,
    pkt: &mut [u8],
) -> Result<(), DropReason> {
    // The record's tuples name the inside host, the public address and the outside
    // host, whichever way the packet goes; the server is the inside host when the
    // outside opened the connection (a port forward).
    let (initial, revised) = (h.initial(), h.revised());
    let (inside, public, pac) = match dir {
        Direction::Outbound => (initial.src.addr, revised.src.addr, initial.dst.addr),
        Direction::Inbound => (revised.dst.addr, initial.dst.addr, initial.src.addr),
    };
    let c = pptp::Control {
        inside,
        public,
        pac,
        served: flags & FROM_INSIDE == 0,
    };
    let Some(&off) = pkt.get(f.l4_off + 12) else {
        return Ok(());
    };
    let data = f.l4_off + usize::from(off >> 4) * 4;
    let Some(payload) = pkt.get_mut(data..) else {
        return Ok(());
    };
    let delta = sh.pptp.control(c, dir, payload, now)?;
    if f.offload == Offload::None {
        if let Some(b) = pkt.get_mut(f.l4_off + 16..f.l4_off + 18) {
            let sum = u16::from_be_bytes([b[0], b[1]]);
            b.copy_from_slice(&delta.apply(sum).to_be_bytes());
        }
    }
    Ok(())
}

/// Feeds the TCP segment at `pkt[l4_off..end]` into its session: an out-of-window RST
/// is refused, state and timestamps untouched.
#[inline(always)]
fn observe_tcp(
    h: &conntrack::Hit<'_>,
    pkt: &[u8],
    l4_off: usize,
    end: usize,
) -> Result<(), DropReason> {
    let l4 = pkt.get(l4_off..end).ok_or(DropReason::Truncated)?;
    let seg = TcpSegment::parse(l4, l4.len()).ok_or(DropReason::Truncated)?;
    h.observe_tcp(&seg)
        .map_err(|TcpReject::RstOutOfWindow| DropReason::TcpRstOutOfWindow)
}

/// Marks a session dead and, if this call did, releases what it held.
fn expire(sh: &Nat44Shared, counters: &mut Counters, id: SessionId, at: Origin) {
    if let Some(v) = sh.sessions.view(id) {
        if sh.sessions.mark_dead(id) {
            release_session(sh, &v, at);
            counters.sessions_expired += 1;
        }
    }
}

/// Releases what a dead session held: its binding reference and its filtering permit.
/// Called exactly once per session, by whoever marked it dead.
pub(super) fn release_session(sh: &Nat44Shared, v: &conntrack::SessionView, at: Origin) {
    // The offload stops forwarding it first, before its binding and port can go.
    if let Some(o) = sh.offload() {
        o.remove(v);
    }
    sh.log_session(at, false, v.flags, &v.initial, &v.revised);
    // Before the reference goes, so the reaper sees the mark when it takes the binding:
    // its port then waits out the hold (see `reaper`).
    if v.flags & INBOUND_SEEN != 0 {
        sh.bindings.mark(v.binding);
    }
    sh.bindings.unref(v.binding);
    if v.flags & FROM_INSIDE != 0 {
        sh.release_host(Counted::Sessions, v.initial.src.addr);
    }
    // Whatever the filtering in force now: the session may predate a reload.
    if sh.permits_on {
        let remote = if v.flags & FROM_INSIDE != 0 {
            v.revised.dst.addr
        } else {
            v.initial.src.addr
        };
        if let Some(p) = sh.permits.find_a(permit_key(v.binding, remote)) {
            sh.permits.unref(p);
        }
    }
}

/// A TCP SYN opening a connection: SYN set, ACK and RST clear.
#[inline]
fn is_syn(flags: u8) -> bool {
    flags & 0x16 == 0x02
}

#[inline]
fn permit_key(binding: u32, remote: std::net::Ipv4Addr) -> u64 {
    u64::from(binding) << 32 | u64::from(u32::from(remote))
}

impl ModeWorker for Nat44Worker {
    /// Translates the IPv4 packet in `frame` in place. A packet whose TTL runs out here, or
    /// that is too big for the link it leaves by (DF set), is answered with an ICMP error
    /// from the gateway's address on the link it arrived by (`Emit::Reply`).
    #[inline]
    fn process(
        &mut self,
        now: Timestamp,
        dir: Direction,
        frame: &mut Frame<'_>,
        egress: &Egress,
    ) -> Emit {
        let mtu = egress.leaving_mtu(dir, frame.offload);
        let (start, len, offload) = (frame.start, frame.len, frame.offload);
        match self.process_inner(now, dir, frame.packet_mut(), offload, mtu) {
            Ok(()) => {
                self.counters.forwarded += 1;
                Emit::Forward { start, len }
            }
            Err(r) => {
                let icmp = owed(r, mtu);
                self.responder
                    .refuse(now, dir, frame, egress, &mut self.counters, r, icmp)
            }
        }
    }

    fn poll(&mut self, now: Timestamp, _egress: &Egress, out: &mut Output) -> usize {
        self.poll_due(now, out)
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        self.due_timeout()
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn quiescent(&self) {
        Nat44Worker::quiescent(self);
    }

    fn offline(&self) {
        Nat44Worker::offline(self);
    }

    fn begin_batch(&mut self) {
        self.refresh_if_stale();
    }

    /// Stage 1 of a staged batch (see `stage`): the packet's bucket on the way.
    #[inline]
    fn prefetch(&mut self, _dir: Direction, pkt: &[u8]) {
        self.stage.bucket(&self.shared.sessions, pkt);
    }
}

impl Nat44Shared {
    /// The fast path of a mode built around NAT44 (NAT64): the live, non-hairpin session
    /// `t` hits from `dir`, refreshed (timestamp, TCP state) exactly as `process` would,
    /// and the tuple to rewrite to. `None` whenever `process` must decide (no session,
    /// expired, wrong direction, hairpin): the caller then takes the full path, which
    /// counts every outcome.
    #[inline]
    pub(crate) fn fast_hit(
        &self,
        now: Timestamp,
        dir: Direction,
        t: &Tuple,
        segment: Option<&TcpSegment>,
    ) -> Option<Tuple> {
        let h = live_hit(self, t, now)?;
        let flags = h.flags();
        if flags & (HAIRPIN | ALG) != 0 || side_direction(flags, h.r.side) != dir {
            return None;
        }
        // Refused (an out-of-window RST): the full path drops and counts it.
        if let Some(seg) = segment {
            h.observe_tcp(seg).ok()?;
        }
        h.touch_from(now, dir == Direction::Inbound);
        Some(h.revised())
    }

    /// Tells the inside-host hook a binding for `addr` is about to be made.
    #[inline]
    fn acquire_inside(&self, addr: std::net::Ipv4Addr) -> bool {
        self.inside_hosts.as_ref().is_none_or(|h| h.acquire(addr))
    }

    /// Undoes [`acquire_inside`](Self::acquire_inside) after a failed binding insert,
    /// except when the insert published and withdrew the entry: the reaper releases that
    /// one when it collects it, exactly as for any removed binding.
    fn release_inside_unless_withdrawn(
        &self,
        addr: std::net::Ipv4Addr,
        e: RefInsertError,
        now: Timestamp,
    ) {
        if !matches!(e, RefInsertError::ExistsB(_)) {
            if let Some(h) = &self.inside_hosts {
                h.release(addr, now);
            }
        }
    }

    /// Where a packet to public endpoint `dst` goes: the inside endpoint, and the binding
    /// if one exists (a static 1:1 address may not have one yet).
    #[inline]
    fn inbound_target(&self, proto: Proto, dst: Endpoint) -> Option<(Endpoint, Option<u32>)> {
        // An address-only protocol's dynamic bindings are keyed by a pool port no packet
        // carries: from outside it reaches only a static 1:1 host.
        if proto == Proto::Other && !self.static_by_public.contains_key(&dst.addr) {
            return None;
        }
        if let Some(b) = self.bindings.find_b(ep_key(proto, dst)) {
            return self.bindings.get(b).map(|x| (key_ep(x.key_a), Some(b)));
        }
        self.static_by_public
            .get(&dst.addr)
            .map(|inside| (Endpoint::new(*inside, dst.port), None))
    }

    fn filter_allows(&self, b: u32, remote: Endpoint) -> bool {
        match self.cfg.filtering {
            Filtering::EndpointIndependent => true,
            // A static binding (port forward, static NAT) publishes a service: open to
            // any remote under every behaviour, which is about dynamic mappings.
            Filtering::AddressDependent => {
                self.permits.find_a(permit_key(b, remote.addr)).is_some() || self.is_static(b)
            }
            // An allowed packet would have matched its session's reply record directly.
            Filtering::AddressAndPortDependent => self.is_static(b),
        }
    }

    /// Whether binding `b` is a static one (a port forward or static NAT).
    fn is_static(&self, b: u32) -> bool {
        self.bindings.get(b).is_some_and(|x| x.is_static)
    }

    /// Takes a reference on the (binding, remote address) permit, creating it if needed.
    fn acquire_permit(&self, b: u32, remote: std::net::Ipv4Addr) -> Option<u32> {
        let key = permit_key(b, remote);
        for _ in 0..4 {
            if let Some(p) = self.permits.find_a(key) {
                if self.permits.try_ref(p) {
                    return Some(p);
                }
            }
            match self.permits.insert(key, 0, false, 1, false, 0) {
                Ok(p) => return Some(p),
                Err(RefInsertError::Full) => return None,
                Err(_) => continue,
            }
        }
        None
    }
}
