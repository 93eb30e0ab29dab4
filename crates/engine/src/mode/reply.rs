//! The ICMP errors the gateway owes, decided and built in the engine.
//!
//! A step that refuses a packet for a reason that calls for an answer (TTL / Hop Limit
//! exhausted, too big for the next hop with DF set or over IPv6) hands the reason and the
//! ICMP error to [`Responder::refuse`], which counts the drop and writes the error into
//! the frame's [`Output`](super::Output): in the family of the packet as it arrived, from
//! the gateway's address on the link it arrived by, quoting the packet as it arrived.
//! `xlat::icmp_reply` applies the rules every router follows (never about an ICMP error,
//! a non-first fragment, a multicast or unspecified source); the rate limit
//! (RFC 1812 §4.3.2.8, RFC 4443 §2.4 (f)) runs on the time the caller passes in, so a
//! replay of a capture answers exactly what the live gateway answered.

use conntrack::Timestamp;
use xlat::icmp_reply::{icmpv4_error, icmpv6_error, IcmpReason};

use super::{Egress, Emit, Family, Frame, Side, HEADROOM};
use crate::config::IcmpRate;
use crate::{Counters, DropReason};

/// The largest ICMP error the gateway builds (RFC 4443 §2.4 (c): the IPv6 minimum MTU;
/// ICMPv4 errors stop at 576 bytes, RFC 1812 §4.3.2.3).
const MAX_ERROR: usize = 1280;

/// A token bucket on the time passed in: `rate` errors per second, bursts of `rate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Nanoseconds of sending time one error costs.
    cost: u64,
    /// Nanoseconds of credit at most (a full bucket).
    cap: u64,
    credit: u64,
    last: Timestamp,
}

impl RateLimit {
    /// ICMP errors per second (and per burst) a worker sends at most by default.
    pub const DEFAULT_RATE: u32 = 200;

    /// A full bucket of `rate` errors per second (0: none are ever sent).
    pub fn new(rate: u32) -> Self {
        let cost = if rate == 0 {
            u64::MAX
        } else {
            1_000_000_000 / u64::from(rate)
        };
        let cap = cost.saturating_mul(u64::from(rate));
        RateLimit {
            cost,
            cap,
            credit: cap,
            last: Timestamp::ZERO,
        }
    }

    /// Takes one token at `now` if there is one.
    pub fn allow(&mut self, now: Timestamp) -> bool {
        self.refill(now);
        self.spend()
    }

    /// Adds the credit earned up to `now` (time going backwards adds none).
    fn refill(&mut self, now: Timestamp) {
        let elapsed = now.as_nanos().saturating_sub(self.last.as_nanos());
        self.last = self.last.max(now);
        self.credit = self.credit.saturating_add(elapsed).min(self.cap);
    }

    /// Whether a token is there (after [`refill`](Self::refill)).
    fn ready(&self) -> bool {
        self.credit >= self.cost
    }

    /// Takes a token if one is there.
    fn spend(&mut self) -> bool {
        let ok = self.ready();
        if ok {
            self.credit -= self.cost;
        }
        ok
    }
}

impl Default for RateLimit {
    fn default() -> Self {
        Self::new(Self::DEFAULT_RATE)
    }
}

/// Per-sender buckets of one budget: a fixed table, so a flood of spoofed sources costs
/// no memory; senders whose keyed hashes collide share a bucket.
const SOURCE_BUCKETS: usize = 256;

/// Why an owed ICMP error was not sent for want of budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Limited {
    /// The sender's own bucket was empty.
    Source,
    /// The worker's bucket was empty.
    Global,
}

/// One kind of error's budget: the worker's bucket and the senders' buckets.
#[derive(Clone, Debug)]
struct Budget {
    global: RateLimit,
    sources: Box<[RateLimit]>,
}

impl Budget {
    fn new(rate: IcmpRate) -> Self {
        Budget {
            global: RateLimit::new(rate.global),
            sources: vec![RateLimit::new(rate.per_source); SOURCE_BUCKETS].into_boxed_slice(),
        }
    }

    /// Takes a token from bucket `slot` and from the worker's bucket at `now`, from
    /// neither unless both have one.
    fn take(&mut self, now: Timestamp, slot: usize) -> Result<(), Limited> {
        let Some(s) = self.sources.get_mut(slot) else {
            return Err(Limited::Source);
        };
        s.refill(now);
        if !s.ready() {
            return Err(Limited::Source);
        }
        self.global.refill(now);
        if !self.global.spend() {
            return Err(Limited::Global);
        }
        s.spend();
        Ok(())
    }
}

/// One worker's ICMP error sender: the rate limits, and the one way every mode refuses a
/// packet.
///
/// Budgets (RFC 1812 §4.3.2.8, RFC 4443 §2.4 (f)), see [`IcmpRate`]: Packet Too Big /
/// Fragmentation Needed have their own, apart from every other error, so a host sending
/// TTL=1 traffic never stops path-MTU discovery for others (nor for itself); within each,
/// a sender has its own bucket besides the worker's. Built once per worker: nothing is
/// allocated per packet.
#[derive(Clone, Debug)]
pub struct Responder {
    /// Keys the sender -> bucket hash (SipHash-1-3, random per responder): which senders
    /// share a bucket cannot be chosen from outside. Fixed in unit tests, so which test
    /// senders share a bucket does not change from run to run.
    key: conntrack::SipKey,
    /// Time Exceeded, Port Unreachable, Parameter Problem and the rest.
    errors: Budget,
    /// Packet Too Big (ICMPv6) and Fragmentation Needed (ICMPv4).
    too_big: Budget,
}

impl Default for Responder {
    fn default() -> Self {
        Self::new(IcmpRate::default())
    }
}

impl Responder {
    /// A responder sending at most `rate` errors (see [`IcmpRate`]).
    pub fn new(rate: IcmpRate) -> Self {
        Responder {
            #[cfg(not(test))]
            key: conntrack::SipKey::random(),
            #[cfg(test)]
            key: conntrack::SipKey::fixed(0x7175_6963_6b6e_6174, 0x6963_6d70_7261_7465),
            errors: Budget::new(rate),
            too_big: Budget::new(rate),
        }
    }

    /// A responder at `rate` when `on`, else one that never sends (an operator's "no
    /// ICMP errors", RFC 7915 §4.4 / §5.4); drops are counted either way.
    pub fn enabled(on: bool, rate: IcmpRate) -> Self {
        Responder::new(if on { rate } else { IcmpRate::OFF })
    }

    /// Takes a token for the error `why` to the sender of `pkt` at `now`, counting a
    /// refusal in `counters`.
    fn budget(
        &mut self,
        now: Timestamp,
        pkt: &[u8],
        why: IcmpReason,
        counters: &mut Counters,
    ) -> bool {
        let word = |b: Option<&[u8]>| {
            b.map_or(0, |b| b.iter().fold(0u64, |w, x| (w << 8) | u64::from(*x)))
        };
        let (a, b) = match pkt.first().map(|b| b >> 4) {
            Some(4) => (word(pkt.get(12..16)), 0),
            Some(6) => (word(pkt.get(8..16)), word(pkt.get(16..24))),
            _ => (0, 0),
        };
        let slot = (self.key.hash2(a, b) % SOURCE_BUCKETS as u64) as usize;
        let budget = match why {
            IcmpReason::TooBig { .. } => &mut self.too_big,
            _ => &mut self.errors,
        };
        match budget.take(now, slot) {
            Ok(()) => true,
            Err(Limited::Source) => {
                counters.icmp_errors_limited_source += 1;
                false
            }
            Err(Limited::Global) => {
                counters.icmp_errors_limited += 1;
                false
            }
        }
    }

    /// Refuses the packet in `frame`, which arrived travelling `dir`: counts the drop
    /// under `reason` and, when `icmp` says an error is owed, answers the sender with it
    /// ([`Emit::Reply`]) unless the rate limits, the lack of an address on that link or
    /// the rules of RFC 1812 / RFC 4443 forbid it ([`Emit::Drop`]). The packet in `frame`
    /// must be as it arrived: it is quoted.
    #[allow(clippy::too_many_arguments)]
    pub fn refuse(
        &mut self,
        now: Timestamp,
        dir: crate::Direction,
        frame: &mut Frame<'_>,
        egress: &Egress,
        counters: &mut Counters,
        reason: DropReason,
        icmp: Option<IcmpReason>,
    ) -> Emit {
        counters.drop(reason);
        match icmp {
            Some(why) if self.answer(now, dir.arrives_on(), frame, egress, why, counters) => {
                counters.icmp_errors_sent += 1;
                Emit::Reply(reason)
            }
            _ => Emit::Drop(reason),
        }
    }

    /// Adds to `out` (after what it holds) the ICMPv4 error `why` about the IPv4 packet
    /// `pkt`, from `src`, unless the rate limits or the rules of RFC 1812 forbid it: for a
    /// mode answering on a timer (a held SYN's Port Unreachable) rather than a packet.
    /// Whether one was written (then counted in `counters.icmp_errors_sent`).
    pub fn answer_v4_from(
        &mut self,
        now: Timestamp,
        src: std::net::Ipv4Addr,
        pkt: &[u8],
        out: &mut super::Output,
        why: IcmpReason,
        counters: &mut Counters,
    ) -> bool {
        if !self.budget(now, pkt, why, counters) {
            return false;
        }
        let Some(slot) = out.slot(MAX_ERROR) else {
            return false;
        };
        let sent = icmpv4_error(&mut slot[HEADROOM..], src, pkt, why)
            .is_some_and(|n| out.commit(MAX_ERROR, HEADROOM, n));
        counters.icmp_errors_sent += u64::from(sent);
        sent
    }

    /// Writes the ICMP error `why` about the packet in `frame` into `frame.out`, from the
    /// gateway's address on `side`. Whether one was written.
    fn answer(
        &mut self,
        now: Timestamp,
        side: Side,
        frame: &mut Frame<'_>,
        egress: &Egress,
        why: IcmpReason,
        counters: &mut Counters,
    ) -> bool {
        let link = egress.link(side);
        let pkt = frame
            .buf
            .get(frame.start..frame.start.saturating_add(frame.len))
            .unwrap_or(&[]);
        let family = Family::of(pkt);
        // RFC 1812 §4.3.2.7: "An ICMP error message MUST NOT be sent as the result of
        // receiving [...] a packet sent as a Link Layer broadcast"; RFC 4443 §2.4 (e.3, e.4)
        // likewise for a link-layer multicast or broadcast, except Packet Too Big (e.2).
        let ptb6 = family == Some(Family::V6) && matches!(why, IcmpReason::TooBig { .. });
        if frame.link_group && !ptb6 {
            return false;
        }
        let have_source = match family {
            Some(Family::V4) => link.addr4.is_some(),
            Some(Family::V6) => link.addr6.is_some(),
            None => false,
        };
        if !have_source || !self.budget(now, pkt, why, counters) {
            return false;
        }
        frame.out.clear();
        let Some(slot) = frame.out.slot(MAX_ERROR) else {
            return false;
        };
        let at = &mut slot[HEADROOM..];
        let n = match (family, link.addr4, link.addr6) {
            (Some(Family::V4), Some(src), _) => icmpv4_error(at, src, pkt, why),
            (Some(Family::V6), _, Some(src)) => icmpv6_error(at, src, pkt, why),
            _ => None,
        };
        n.is_some_and(|n| frame.out.commit(MAX_ERROR, HEADROOM, n))
    }
}

/// For a mode that keeps packet sizes (NAT44, ILA): whether the IP packet `pkt` fits the
/// `mtu` of the link it leaves by (`None`: no limit). Too big: IPv4 with DF set is
/// `fragment_needed`, IPv6 `packet_too_big` (both answered, see [`owed`]); IPv4 without
/// DF `too_big` (these modes do not fragment). The caller leaves GSO super-packets out:
/// the runtime sizes their segments for the link.
#[inline]
pub fn fits(pkt: &[u8], mtu: Option<u32>) -> Result<(), DropReason> {
    let Some(mtu) = mtu else {
        return Ok(());
    };
    let (ip_len, reason) = match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= 8 => {
            let df = pkt[6] & 0x40 != 0;
            let r = if df {
                DropReason::FragmentNeeded
            } else {
                DropReason::TooBig
            };
            (u16::from_be_bytes([pkt[2], pkt[3]]) as usize, r)
        }
        Some(6) if pkt.len() >= 6 => (
            40 + u16::from_be_bytes([pkt[4], pkt[5]]) as usize,
            DropReason::PacketTooBig,
        ),
        _ => return Ok(()),
    };
    if ip_len <= mtu as usize {
        Ok(())
    } else {
        Err(reason)
    }
}

/// The ICMP error a mode that keeps packet sizes owes for refusing a packet for
/// `reason`, `mtu` being the MTU of the link it would have left by.
#[inline]
pub fn owed(reason: DropReason, mtu: Option<u32>) -> Option<IcmpReason> {
    match reason {
        DropReason::TtlExpired => Some(IcmpReason::TimeExceeded),
        DropReason::FragmentNeeded | DropReason::PacketTooBig => {
            mtu.map(|mtu| IcmpReason::TooBig { mtu })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::{Link, Output};
    use crate::Direction;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(ttl: u8, len: usize, df: bool) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[6] = if df { 0x40 } else { 0 };
        p[8] = ttl;
        p[9] = 17;
        p[12..16].copy_from_slice(&[10, 0, 0, 2]);
        p[16..20].copy_from_slice(&[198, 51, 100, 2]);
        let c = wire::checksum::checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p
    }

    fn egress(mtu: Option<u32>) -> Egress {
        let l = Link {
            mtu,
            addr4: Some(Ipv4Addr::new(10, 0, 0, 1)),
            addr6: Some(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
        };
        Egress { links: [l; 2] }
    }

    #[test]
    fn rate_limit_refills_with_the_time_passed_in() {
        let mut r = RateLimit::new(2);
        let t = Timestamp::from_secs(10);
        assert!(r.allow(t));
        assert!(r.allow(t));
        assert!(!r.allow(t));
        assert!(!r.allow(Timestamp::from_nanos(t.as_nanos() + 400_000_000)));
        assert!(r.allow(Timestamp::from_nanos(t.as_nanos() + 500_000_000)));
        // Time going backwards never adds credit.
        assert!(!r.allow(Timestamp::from_secs(1)));
        assert!(!RateLimit::new(0).allow(Timestamp::from_secs(100)));
    }

    #[test]
    fn refuse_answers_from_the_arrival_link_and_quotes_the_packet() {
        let pkt = v4(1, 60, true);
        let mut buf = vec![0u8; HEADROOM + 60];
        buf[HEADROOM..].copy_from_slice(&pkt);
        let mut out = Output::new();
        let mut f = Frame::new(&mut buf, HEADROOM, 60, &mut out);
        let mut r = Responder::default();
        let mut c = Counters::default();
        let e = r.refuse(
            Timestamp::from_secs(1),
            Direction::Outbound,
            &mut f,
            &egress(None),
            &mut c,
            DropReason::TtlExpired,
            Some(IcmpReason::TimeExceeded),
        );
        assert_eq!(e, Emit::Reply(DropReason::TtlExpired));
        assert_eq!(c.dropped(DropReason::TtlExpired), 1);
        assert_eq!(c.icmp_errors_sent, 1);
        let err = out.packets().next().unwrap().to_vec();
        assert_eq!(
            &err[12..16],
            &[10, 0, 0, 1],
            "from the gateway's inside address"
        );
        assert_eq!(&err[16..20], &[10, 0, 0, 2], "to the sender");
        assert_eq!(err[20], 11, "Time Exceeded");
        assert_eq!(&err[28..], &pkt[..], "quotes the packet as it arrived");
    }

    /// RFC 1812 §4.3.2.7 / RFC 4443 §2.4 (e.3, e.4): a packet that came in a link-layer
    /// broadcast or multicast frame gets no ICMP error, apart from an IPv6 Packet Too Big
    /// (e.2); it is still counted.
    #[test]
    fn no_error_about_a_link_layer_broadcast_but_packet_too_big() {
        let refuse = |pkt: &[u8], group: bool, why: IcmpReason| {
            let mut buf = vec![0u8; HEADROOM + pkt.len()];
            buf[HEADROOM..].copy_from_slice(pkt);
            let mut out = Output::new();
            let mut f = Frame::new(&mut buf, HEADROOM, pkt.len(), &mut out);
            f.link_group = group;
            let mut c = Counters::default();
            let e = Responder::default().refuse(
                Timestamp::from_secs(1),
                Direction::Outbound,
                &mut f,
                &egress(None),
                &mut c,
                DropReason::TtlExpired,
                Some(why),
            );
            assert_eq!(c.dropped(DropReason::TtlExpired), 1, "counted either way");
            (e, out.len())
        };
        let v4p = v4(1, 60, true);
        let mut v6p = vec![0u8; 60];
        v6p[0] = 0x60;
        v6p[4..6].copy_from_slice(&20u16.to_be_bytes());
        v6p[6] = 17;
        v6p[7] = 1;
        v6p[8..24].copy_from_slice(&Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2).octets());
        v6p[24..40].copy_from_slice(&Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 9).octets());
        let ttl = IcmpReason::TimeExceeded;
        let ptb = IcmpReason::TooBig { mtu: 1400 };
        let reply = Emit::Reply(DropReason::TtlExpired);
        let drop = Emit::Drop(DropReason::TtlExpired);
        assert_eq!(refuse(&v4p, false, ttl), (reply, 1));
        assert_eq!(refuse(&v4p, true, ttl), (drop, 0));
        assert_eq!(refuse(&v4p, true, ptb), (drop, 0), "no IPv4 exception");
        assert_eq!(refuse(&v6p, false, ttl), (reply, 1));
        assert_eq!(refuse(&v6p, true, ttl), (drop, 0));
        assert_eq!(refuse(&v6p, true, ptb), (reply, 1), "RFC 4443 §2.4 (e.2)");
    }

    #[test]
    fn no_address_on_the_link_means_no_answer() {
        let mut buf = v4(1, 40, true);
        let mut out = Output::new();
        let mut f = Frame::new(&mut buf, 0, 40, &mut out);
        let mut eg = egress(None);
        eg.links[0].addr4 = None;
        let e = Responder::default().refuse(
            Timestamp::ZERO,
            Direction::Outbound,
            &mut f,
            &eg,
            &mut Counters::default(),
            DropReason::TtlExpired,
            Some(IcmpReason::TimeExceeded),
        );
        assert_eq!(e, Emit::Drop(DropReason::TtlExpired));
    }

    #[test]
    fn fits_the_leaving_link() {
        let df = v4(64, 1400, true);
        assert_eq!(fits(&df, Some(1500)), Ok(()));
        assert_eq!(fits(&df, None), Ok(()));
        assert_eq!(fits(&df, Some(1300)), Err(DropReason::FragmentNeeded));
        assert_eq!(
            fits(&v4(64, 1400, false), Some(1300)),
            Err(DropReason::TooBig)
        );
        let mut v6 = vec![0u8; 1400];
        v6[0] = 0x60;
        v6[4..6].copy_from_slice(&1360u16.to_be_bytes());
        assert_eq!(fits(&v6, Some(1400)), Ok(()));
        assert_eq!(fits(&v6, Some(1399)), Err(DropReason::PacketTooBig));
        assert_eq!(
            fits(&[0x45], Some(10)),
            Ok(()),
            "too short to tell: the parser decides"
        );
        assert_eq!(
            owed(DropReason::FragmentNeeded, Some(1300)),
            Some(IcmpReason::TooBig { mtu: 1300 })
        );
        assert_eq!(owed(DropReason::TooBig, Some(1300)), None);
        assert_eq!(
            owed(DropReason::TtlExpired, None),
            Some(IcmpReason::TimeExceeded)
        );
    }
}
