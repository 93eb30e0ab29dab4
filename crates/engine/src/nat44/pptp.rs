//! PPTP (RFC 2637) through the NAPT: an inside client (the PNS) reaching an outside
//! server (the PAC) on TCP port 1723, its calls' data in enhanced GRE (GRE version 1).
//!
//! An enhanced GRE header carries one call id, the *receiver's*: the PAC's on the way
//! out, the PNS's on the way in. No packet names both ends, and two inside clients that
//! picked the same call id (Linux starts at the same one) cannot be told apart by their
//! GRE alone. The control channel names both, so this reads it, as Linux's
//! `nf_conntrack_pptp` / `nf_nat_pptp` do:
//!
//! - A call the PNS opens (Outgoing-Call-Request) or accepts (Incoming-Call-Reply) gets
//!   a *public call id*, unique per (public address, PAC): the client's own when it is
//!   free, another otherwise. The NAT writes it in place of the client's id in every
//!   control message that carries the PNS's id (out: Outgoing-Call-Request,
//!   Incoming-Call-Reply, Call-Clear-Request; in: Outgoing-Call-Reply,
//!   Incoming-Call-Connected, WAN-Error-Notify), fixing the TCP checksum by difference.
//!   Ids are 16-bit fields in place: no length changes, no sequence numbers to shift.
//! - The call's GRE session is keyed by (public call id, PAC call id) as its "ports":
//!   outbound GRE (which carries the PAC's id) finds the call by (inside host, PAC, PAC
//!   id), inbound GRE (which carries the public id) by (public address, PAC, public id),
//!   and gets the client's own id written back. Public call ids start at 256, so a GRE
//!   call's tuple is told from an address-only one (whose "ports" are the protocol
//!   number) by its ports alone.
//! - A call ends with Call-Disconnect-Notify or Stop-Control-Connection-Reply, or after
//!   the `other` timeout without a packet (the GRE session's own timeout).
//!
//! A PAC inside (behind a port forward of port 1723) serves outside clients: their GRE
//! carries the PAC's own call ids, which it keeps unique, so no id is rewritten; the
//! control connection only tells that (public address, client) reaches the PAC, so a
//! client's GRE that comes before the PAC's first finds its way in.
//!
//! What is not covered: PPTP through NAT64 (an IPv6 client's GRE goes by address only), a control message split
//! across TCP segments (it is forwarded untouched and its call is not tracked, as in
//! Linux), and ICMP errors from the inside about a call's GRE (an error from the
//! outside about a call's outbound GRE reaches its client: [`PptpCalls::quoted`]).
//! GRE version 0 (`ip tunnel` links, RFC 2784/2890) goes by address only.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use conntrack::{Proto, Timestamp, Tuple};
use xlat::csum::{get16, set16, Delta};

use super::parse::Flow;
use super::worker::Leg;
use super::FxMap;
use crate::verdict::{Direction, DropReason};

/// The PAC's well-known TCP port (RFC 2637 §1.2).
pub const PPTP_PORT: u16 = 1723;
/// Calls tracked at once, every client together; a call beyond it is refused
/// (`pptp_calls_full`: its control message is dropped, its sender retransmits).
pub const MAX_CALLS: usize = 4096;
/// Calls one inside host may hold at once (a sixteenth of the table), so that one host
/// never takes the whole table from the others.
pub const MAX_CALLS_PER_HOST: u32 = 256;
/// The smallest public call id given (see the module's doc).
pub const FIRST_PUBLIC_ID: u16 = 256;

/// GRE's IP protocol number.
const GRE: u16 = 47;
/// GRE's protocol type for PPP (RFC 2637 §4.1).
const PPP: u16 = 0x880b;
/// The PPTP control message magic cookie (RFC 2637 §2.1).
const MAGIC: u32 = 0x1a2b_3c4d;
/// Offsets in a control message (RFC 2637 §2): the call id fields.
const CALL_ID: usize = 12;
const PEER_CALL_ID: usize = 14;
/// Where the messages that carry no Call ID of their own carry the Peer's Call ID
/// (Incoming-Call-Connected, WAN-Error-Notify, Set-Link-Info).
const PEER_ID_FIRST: usize = 12;

/// Control message types (RFC 2637 §2).
mod msg {
    pub const STOP_CONTROL_REPLY: u16 = 4;
    pub const OUTGOING_CALL_REQUEST: u16 = 7;
    pub const OUTGOING_CALL_REPLY: u16 = 8;
    pub const INCOMING_CALL_REPLY: u16 = 10;
    pub const INCOMING_CALL_CONNECTED: u16 = 11;
    pub const CALL_CLEAR_REQUEST: u16 = 12;
    pub const CALL_DISCONNECT_NOTIFY: u16 = 13;
    pub const WAN_ERROR_NOTIFY: u16 = 14;
    pub const SET_LINK_INFO: u16 = 15;
}

/// Whether a new outbound flow is a PPTP control connection the NAT reads.
#[inline]
pub(super) fn is_control(cfg: &super::Nat44Config, t: &Tuple) -> bool {
    cfg.pptp && t.proto == Proto::Tcp && t.dst.port == PPTP_PORT
}

/// Whether a packet may be a call's GRE: GRE (address-only, protocol 47) crossing the
/// wire with PPTP on.
#[inline]
pub(super) fn may_be_gre_call(cfg: &super::Nat44Config, f: &Flow, leg: Leg) -> bool {
    is_gre(cfg, &f.tuple) && leg == Leg::Wire
}

/// Whether `t` is GRE's address-only tuple with PPTP on.
#[inline]
pub(super) fn is_gre(cfg: &super::Nat44Config, t: &Tuple) -> bool {
    cfg.pptp && t.proto == Proto::Other && t.src.port == GRE
}

/// The call id of an enhanced GRE header (version 1, key present, PPP), `None` for any
/// other GRE.
pub fn gre_call_id(gre: &[u8]) -> Option<u16> {
    let h = gre.get(..8)?;
    let key_present = h[0] & 0x20 != 0;
    let version = h[1] & 0x07;
    if !key_present || version != 1 || u16::from_be_bytes([h[2], h[3]]) != PPP {
        return None;
    }
    Some(u16::from_be_bytes([h[6], h[7]]))
}

/// Writes `id` as an enhanced GRE header's call id (it has no checksum to fix).
pub fn set_gre_call_id(gre: &mut [u8], id: u16) -> bool {
    match gre.get_mut(6..8) {
        Some(b) => {
            b.copy_from_slice(&id.to_be_bytes());
            true
        }
        None => false,
    }
}

/// The three hosts of a control connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Control {
    /// The inside host: the client (PNS), or with `served` the server (PAC).
    pub inside: Ipv4Addr,
    /// The public address the connection goes by.
    pub public: Ipv4Addr,
    /// The outside host: the server (PAC), or with `served` the client (PNS).
    pub pac: Ipv4Addr,
    /// The server is the inside host, reached through a port forward.
    pub served: bool,
}

/// A call's GRE, found from a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GreCall {
    /// The inside client.
    pub inside: Ipv4Addr,
    /// The public address the call goes by.
    pub public: Ipv4Addr,
    /// The client's own call id (written into inbound GRE).
    pub pns_id: u16,
    /// The id the PAC knows the client's call by.
    pub public_id: u16,
    /// The PAC's call id.
    pub pac_id: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct PublicKey {
    public: Ipv4Addr,
    pac: Ipv4Addr,
    id: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct PacKey {
    inside: Ipv4Addr,
    pac: Ipv4Addr,
    id: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct PnsKey {
    inside: Ipv4Addr,
    public: Ipv4Addr,
    pac: Ipv4Addr,
    id: u16,
}

#[derive(Clone, Copy, Debug)]
struct Call {
    inside: Ipv4Addr,
    pns_id: u16,
    /// Unknown until the PAC's Outgoing-Call-Reply.
    pac_id: Option<u16>,
    seen: Timestamp,
}

/// The calls, by the public id the PAC knows them by, with indexes by the server's id
/// (outbound GRE; an ICMP error's quote of it) and by the client's own id (its control
/// messages). Every lookup a packet makes is one hash probe.
#[derive(Debug, Default)]
struct Calls {
    by_public: FxMap<PublicKey, Call>,
    by_pac: FxMap<PacKey, PublicKey>,
    by_pns: FxMap<PnsKey, PublicKey>,
    /// (public address, PAC, PAC id) -> call: what an ICMP error quoting the call's
    /// outbound GRE names.
    by_quote: FxMap<PublicKey, PublicKey>,
    /// Calls per inside host.
    per_host: FxMap<Ipv4Addr, u32>,
    /// Inside servers' clients: (public address, client) -> (server, last message).
    served: FxMap<(Ipv4Addr, Ipv4Addr), (Ipv4Addr, Timestamp)>,
}

/// The calls of every client, shared by the workers (a control message and its call's
/// GRE may reach different ones). A lock, taken only by PPTP's packets, and not even by
/// GRE while nothing is tracked (`live`).
#[derive(Debug, Default)]
pub struct PptpCalls {
    calls: Mutex<Calls>,
    /// Calls and served clients tracked, as of the last change.
    live: AtomicUsize,
}

/// The smallest length of each control message type the NAT reads (RFC 2637 §2); a
/// shorter one is left alone.
fn min_len(kind: u16) -> usize {
    match kind {
        msg::OUTGOING_CALL_REQUEST => 168,
        msg::OUTGOING_CALL_REPLY => 32,
        msg::INCOMING_CALL_REPLY | msg::SET_LINK_INFO => 24,
        msg::INCOMING_CALL_CONNECTED => 28,
        msg::CALL_DISCONNECT_NOTIFY => 148,
        msg::WAN_ERROR_NOTIFY => 40,
        _ => 16,
    }
}

impl PptpCalls {
    fn lock(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lock, unless nothing is tracked.
    fn lock_if_live(&self) -> Option<std::sync::MutexGuard<'_, Calls>> {
        (self.live.load(Ordering::Relaxed) != 0).then(|| self.lock())
    }

    fn publish(&self, calls: &Calls) {
        (self.live).store(
            calls.by_public.len() + calls.served.len(),
            Ordering::Relaxed,
        );
    }

    /// Calls tracked now.
    pub fn len(&self) -> usize {
        self.lock().by_public.len()
    }

    /// Server call ids filed for outbound GRE (at most one per call).
    #[cfg(test)]
    pub fn pac_ids(&self) -> usize {
        self.lock().by_pac.len()
    }

    /// The sizes of the indexes (by server id, by client id, by quote).
    #[cfg(test)]
    pub fn index_sizes(&self) -> [usize; 3] {
        let c = self.lock();
        [c.by_pac.len(), c.by_pns.len(), c.by_quote.len()]
    }

    /// Whether no call is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads the control messages in `payload` (a TCP segment's data on connection `c`,
    /// translated already) and rewrites the PNS's call ids in them. Returns the checksum
    /// difference of what it wrote. A message cut short by the segment's end is left as
    /// it is; a call that finds no room refuses the segment.
    pub fn control(
        &self,
        c: Control,
        dir: Direction,
        payload: &mut [u8],
        now: Timestamp,
    ) -> Result<Delta, DropReason> {
        let mut delta = Delta::ZERO;
        let mut at = 0;
        let mut calls = self.lock();
        let mut result = Ok(());
        while let Some(m) = payload.get_mut(at..) {
            let Some(len) = get16(m, 0).map(usize::from) else {
                break;
            };
            // Every control message is of even length; an odd one would put the next
            // one's fields off the checksum's 16-bit words.
            if len < 16 || len > m.len() || len % 2 != 0 {
                break;
            }
            let m = &mut m[..len];
            let (Some(1), Some(cookie)) = (get16(m, 2), m.get(4..8)) else {
                break; // not a control message: the stream is not PPTP's
            };
            if u32::from_be_bytes([cookie[0], cookie[1], cookie[2], cookie[3]]) != MAGIC {
                break;
            }
            at += len;
            let kind = get16(m, 8).unwrap_or(0);
            if len < min_len(kind) {
                continue;
            }
            result = if c.served {
                calls.serve(c, kind == msg::STOP_CONTROL_REPLY, now)
            } else {
                calls.message(c, dir, kind, m, now, &mut delta)
            };
            if result.is_err() {
                break;
            }
        }
        self.publish(&calls);
        result.map(|()| delta)
    }

    /// The call of an outbound GRE packet from `inside` to `pac` carrying `pac_id`.
    pub fn outbound(
        &self,
        inside: Ipv4Addr,
        pac: Ipv4Addr,
        pac_id: u16,
        now: Timestamp,
    ) -> Option<GreCall> {
        let mut calls = self.lock_if_live()?;
        let key = *calls.by_pac.get(&PacKey {
            inside,
            pac,
            id: pac_id,
        })?;
        calls.found(key, now)
    }

    /// The call of an inbound GRE packet from `pac` to `public` carrying `public_id`.
    pub fn inbound(
        &self,
        public: Ipv4Addr,
        pac: Ipv4Addr,
        public_id: u16,
        now: Timestamp,
    ) -> Option<GreCall> {
        let key = PublicKey {
            public,
            pac,
            id: public_id,
        };
        self.lock_if_live()?.found(key, now)
    }

    /// The inside server a client's GRE to `public` goes to, when the client has a
    /// control connection to it.
    pub fn served(&self, public: Ipv4Addr, client: Ipv4Addr, now: Timestamp) -> Option<Ipv4Addr> {
        let mut calls = self.lock_if_live()?;
        let (server, seen) = calls.served.get_mut(&(public, client))?;
        *seen = now;
        Some(*server)
    }

    /// The public call id of the call whose outbound GRE, from `public` to `pac` with
    /// the PAC's `pac_id`, an ICMP error quotes.
    pub fn quoted(&self, public: Ipv4Addr, pac: Ipv4Addr, pac_id: u16) -> Option<u16> {
        let quote = PublicKey {
            public,
            pac,
            id: pac_id,
        };
        self.lock_if_live()?.by_quote.get(&quote).map(|k| k.id)
    }

    /// Forgets the calls idle for `timeout` (their GRE session's own timeout: a call
    /// whose end the NAT never saw).
    pub fn expire(&self, now: Timestamp, timeout: Duration) {
        let Some(mut calls) = self.lock_if_live() else {
            return;
        };
        calls
            .by_public
            .retain(|_, call| now.saturating_since(call.seen) < timeout);
        calls
            .served
            .retain(|_, (_, seen)| now.saturating_since(*seen) < timeout);
        calls.reindex();
        self.publish(&calls);
    }
}

impl Control {
    fn public_key(&self, id: u16) -> PublicKey {
        PublicKey {
            public: self.public,
            pac: self.pac,
            id,
        }
    }

    fn pac_key(&self, id: u16) -> PacKey {
        PacKey {
            inside: self.inside,
            pac: self.pac,
            id,
        }
    }

    fn pns_key(&self, id: u16) -> PnsKey {
        PnsKey {
            inside: self.inside,
            public: self.public,
            pac: self.pac,
            id,
        }
    }
}

impl Calls {
    /// One control message of `kind` between an inside client and its server.
    fn message(
        &mut self,
        c: Control,
        dir: Direction,
        kind: u16,
        m: &mut [u8],
        now: Timestamp,
        delta: &mut Delta,
    ) -> Result<(), DropReason> {
        let field = |o: usize| get16(m, o).unwrap_or(0);
        match (dir, kind) {
            (Direction::Outbound, msg::OUTGOING_CALL_REQUEST) => {
                let public_id = self.open(c, field(CALL_ID), None, now)?;
                set16(m, CALL_ID, public_id, delta);
            }
            (Direction::Outbound, msg::INCOMING_CALL_REPLY) => {
                let pac_id = field(PEER_CALL_ID);
                let public_id = self.open(c, field(CALL_ID), Some(pac_id), now)?;
                set16(m, CALL_ID, public_id, delta);
            }
            (Direction::Outbound, msg::CALL_CLEAR_REQUEST) => {
                if let Some(k) = self.by_pns.get(&c.pns_key(field(CALL_ID))) {
                    set16(m, CALL_ID, k.id, delta);
                }
            }
            (Direction::Inbound, msg::OUTGOING_CALL_REPLY) => {
                let key = c.public_key(field(PEER_CALL_ID));
                if let Some(pns_id) = self.answered(c, key, field(CALL_ID), now) {
                    set16(m, PEER_CALL_ID, pns_id, delta);
                    // Result code 1 is "connected"; any other refuses the call.
                    if m.get(16) != Some(&1) {
                        self.remove(key);
                    }
                }
            }
            (
                Direction::Inbound,
                msg::INCOMING_CALL_CONNECTED | msg::WAN_ERROR_NOTIFY | msg::SET_LINK_INFO,
            ) => {
                // The client's call, by the id the server knows it by (Peer's Call ID).
                let key = c.public_key(field(PEER_ID_FIRST));
                if let Some(call) = self.by_public.get(&key).filter(|x| x.inside == c.inside) {
                    set16(m, PEER_ID_FIRST, call.pns_id, delta);
                }
            }
            (Direction::Inbound, msg::CALL_DISCONNECT_NOTIFY) => {
                if let Some(&key) = self.by_pac.get(&c.pac_key(field(CALL_ID))) {
                    self.remove(key);
                }
            }
            (_, msg::STOP_CONTROL_REPLY) => self.end_control(c),
            _ => {}
        }
        Ok(())
    }

    /// A call of the PNS's id `pns_id` on `c`: the one already open (a retransmitted
    /// message), else a new one under a free public id.
    fn open(
        &mut self,
        c: Control,
        pns_id: u16,
        pac_id: Option<u16>,
        now: Timestamp,
    ) -> Result<u16, DropReason> {
        let key = match self.by_pns.get(&c.pns_key(pns_id)) {
            Some(&k) => k,
            None => {
                let host = self.per_host.get(&c.inside).copied().unwrap_or(0);
                if self.by_public.len() >= MAX_CALLS || host >= MAX_CALLS_PER_HOST {
                    return Err(DropReason::PptpCallsFull);
                }
                let k = c.public_key(self.free_id(c, pns_id));
                self.by_public.insert(
                    k,
                    Call {
                        inside: c.inside,
                        pns_id,
                        pac_id: None,
                        seen: now,
                    },
                );
                self.by_pns.insert(c.pns_key(pns_id), k);
                *self.per_host.entry(c.inside).or_default() += 1;
                k
            }
        };
        match pac_id {
            Some(p) => {
                self.answered(c, key, p, now);
            }
            None => {
                if let Some(call) = self.by_public.get_mut(&key) {
                    call.seen = now;
                }
            }
        }
        Ok(key.id)
    }

    /// The PAC named its id `pac_id` for the call under `key`: filed for the call's
    /// outbound GRE, in place of any id it named before (a server repeating its answer
    /// with other ids never grows the table). Returns the client's own id.
    fn answered(&mut self, c: Control, key: PublicKey, pac_id: u16, now: Timestamp) -> Option<u16> {
        // A message on one client's connection speaks only of that client's calls.
        let call = self
            .by_public
            .get_mut(&key)
            .filter(|x| x.inside == c.inside)?;
        call.seen = now;
        let old = call.pac_id.replace(pac_id);
        let pns_id = call.pns_id;
        if let Some(old) = old.filter(|&o| o != pac_id) {
            self.by_pac.remove(&c.pac_key(old));
            if self.by_quote.get(&c.public_key(old)) == Some(&key) {
                self.by_quote.remove(&c.public_key(old));
            }
        }
        self.by_quote.insert(c.public_key(pac_id), key);
        // Another call of this client and PAC held that id: the newer answer wins.
        if let Some(other) = self.by_pac.insert(c.pac_key(pac_id), key) {
            if other != key {
                if let Some(o) = self.by_public.get_mut(&other) {
                    o.pac_id = None;
                }
            }
        }
        Some(pns_id)
    }

    /// Ends the call under `key`, and its index entries.
    fn remove(&mut self, key: PublicKey) {
        let Some(call) = self.by_public.remove(&key) else {
            return;
        };
        let c = Control {
            inside: call.inside,
            public: key.public,
            pac: key.pac,
            served: false,
        };
        if let Some(p) = call.pac_id {
            if self.by_pac.get(&c.pac_key(p)) == Some(&key) {
                self.by_pac.remove(&c.pac_key(p));
            }
            if self.by_quote.get(&c.public_key(p)) == Some(&key) {
                self.by_quote.remove(&c.public_key(p));
            }
        }
        if self.by_pns.get(&c.pns_key(call.pns_id)) == Some(&key) {
            self.by_pns.remove(&c.pns_key(call.pns_id));
        }
        if let Some(n) = self.per_host.get_mut(&call.inside) {
            *n -= 1;
            if *n == 0 {
                self.per_host.remove(&call.inside);
            }
        }
    }

    /// The indexes and per-host counts rebuilt after calls were dropped in bulk.
    fn reindex(&mut self) {
        let Calls {
            by_public,
            by_pac,
            by_pns,
            by_quote,
            per_host,
            ..
        } = self;
        by_pac.retain(|_, k| by_public.contains_key(k));
        by_pns.retain(|_, k| by_public.contains_key(k));
        by_quote.retain(|_, k| by_public.contains_key(k));
        per_host.clear();
        for call in by_public.values() {
            *per_host.entry(call.inside).or_default() += 1;
        }
    }

    /// A public id no call of (`c.public`, `c.pac`) holds: `wanted` when it may be
    /// given, else the next free one after it. There is always one: at most `MAX_CALLS`
    /// of the 65,280 are taken.
    fn free_id(&self, c: Control, wanted: u16) -> u16 {
        let span = u32::from(u16::MAX - FIRST_PUBLIC_ID) + 1;
        let start = u32::from(wanted.max(FIRST_PUBLIC_ID) - FIRST_PUBLIC_ID);
        (0..span)
            .map(|i| FIRST_PUBLIC_ID + ((start + i) % span) as u16)
            .find(|&id| !self.by_public.contains_key(&c.public_key(id)))
            .unwrap_or(wanted)
    }

    /// A control message between an inside server and an outside client: the client's
    /// GRE may come in to the server from now on; `ended`: no longer.
    fn serve(&mut self, c: Control, ended: bool, now: Timestamp) -> Result<(), DropReason> {
        let key = (c.public, c.pac);
        if ended {
            self.served.remove(&key);
            return Ok(());
        }
        if self.served.len() >= MAX_CALLS && !self.served.contains_key(&key) {
            return Err(DropReason::PptpCallsFull);
        }
        self.served.insert(key, (c.inside, now));
        Ok(())
    }

    /// The control connection closed: its calls with it.
    fn end_control(&mut self, c: Control) {
        self.by_public
            .retain(|k, call| !(k.public == c.public && k.pac == c.pac && call.inside == c.inside));
        self.reindex();
    }

    fn found(&mut self, key: PublicKey, now: Timestamp) -> Option<GreCall> {
        let call = self.by_public.get_mut(&key)?;
        call.seen = now;
        Some(GreCall {
            inside: call.inside,
            public: key.public,
            pns_id: call.pns_id,
            public_id: key.id,
            pac_id: call.pac_id?,
        })
    }
}
