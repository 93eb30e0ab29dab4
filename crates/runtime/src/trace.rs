//! Packet trace (`quicknat trace`, `quicknat translate --trace`): for the next packets
//! matching a filter, what happened to each — where it arrived, what the mode decided
//! (session created or found, binding made, translated to what, dropped and why, an ICMP
//! error sent, fragments cut or held, hairpinned), and where it went.
//!
//! The steps are read from what the packet changed, not from hooks inside the engine:
//! the header before and after the mode, and the difference of the worker's engine and
//! I/O counters across the packet (every counter the `stats` command shows). So the
//! engine's packet path is the same code with a trace armed or not, and the only cost
//! when none is armed is one relaxed atomic load per receive batch. Packets the XDP/tc
//! fast path forwards never reach a worker: a live trace says how many the fast path
//! moved while it ran instead of pretending to have seen them.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};

use engine::{Counters, DropReason};
use serde_json::{json, Value};

use crate::control::api::{engine_json, io_json};
use crate::live::IoCounters;

/// Which packets a trace takes (every field optional: all must match).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceFilter {
    /// `tcp`, `udp`, `icmp`, `sctp` or a protocol number, before or after translation.
    pub proto: Option<String>,
    /// An address the packet has as source or destination, before or after translation.
    pub host: Option<IpAddr>,
    /// A port (or ICMP identifier) the packet has, before or after translation.
    pub port: Option<u16>,
    /// `in` (arrived on the outside) or `out` (arrived on the inside).
    pub direction: Option<String>,
    /// Only packets dropped for this reason.
    pub drop_reason: Option<DropReason>,
}

/// The headers of one IP packet, as much as a trace shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    /// `tcp`, `udp`, `icmp`, `icmpv6`, `sctp`, or the protocol number.
    pub proto: String,
    /// Source and destination.
    pub src: IpAddr,
    /// Destination.
    pub dst: IpAddr,
    /// Ports (TCP, UDP, SCTP), or the ICMP identifier twice (echo).
    pub ports: Option<(u16, u16)>,
    /// ICMP type and code.
    pub icmp: Option<(u8, u8)>,
    /// A fragment: not the first (no transport header here).
    pub later_fragment: bool,
    /// IP length.
    pub len: usize,
}

impl Packet {
    /// Reads `pkt` (an IPv4 or IPv6 packet); `None` when it is too short to say.
    pub fn parse(pkt: &[u8]) -> Option<Packet> {
        let (src, dst, mut proto, mut l4, later) = match pkt.first()? >> 4 {
            4 => {
                let ihl = usize::from(pkt.first()? & 0x0f) * 4;
                let a4 = |o: usize| -> Option<IpAddr> {
                    let b: [u8; 4] = pkt.get(o..o + 4)?.try_into().ok()?;
                    Some(IpAddr::from(b))
                };
                let frag = u16::from_be_bytes([*pkt.get(6)?, *pkt.get(7)?]) & 0x1fff;
                (a4(12)?, a4(16)?, *pkt.get(9)?, ihl, frag != 0)
            }
            6 => {
                let a6 = |o: usize| -> Option<IpAddr> {
                    let b: [u8; 16] = pkt.get(o..o + 16)?.try_into().ok()?;
                    Some(IpAddr::from(b))
                };
                (a6(8)?, a6(24)?, *pkt.get(6)?, 40, false)
            }
            _ => return None,
        };
        let mut later_fragment = later;
        // An IPv6 Fragment header: the protocol behind it, and whether this is the first.
        if src.is_ipv6() && proto == 44 {
            proto = *pkt.get(40)?;
            later_fragment = u16::from_be_bytes([*pkt.get(42)?, *pkt.get(43)?]) & 0xfff8 != 0;
            l4 = 48;
        }
        let t = if later_fragment { None } else { pkt.get(l4..) };
        let word =
            |o: usize| t.and_then(|t| Some(u16::from_be_bytes([*t.get(o)?, *t.get(o + 1)?])));
        let (name, ports, icmp) = match proto {
            6 => ("tcp".to_owned(), word(0).zip(word(2)), None),
            17 => ("udp".to_owned(), word(0).zip(word(2)), None),
            132 => ("sctp".to_owned(), word(0).zip(word(2)), None),
            1 | 58 => {
                let tc = t.and_then(|t| Some((*t.first()?, *t.get(1)?)));
                // Echo request and reply (ICMPv4 8/0, ICMPv6 128/129): the identifier.
                let echo = tc.is_some_and(|(ty, _)| matches!(ty, 0 | 8 | 128 | 129));
                let id = word(4).filter(|_| echo);
                let name = if proto == 1 { "icmp" } else { "icmpv6" };
                (name.to_owned(), id.map(|i| (i, i)), tc)
            }
            p => (p.to_string(), None, None),
        };
        Some(Packet {
            proto: name,
            src,
            dst,
            ports,
            icmp,
            later_fragment,
            len: pkt.len(),
        })
    }

    fn endpoint(a: IpAddr, port: Option<u16>) -> String {
        match (a, port) {
            (IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
            (a, Some(p)) => format!("{a}:{p}"),
            (a, None) => a.to_string(),
        }
    }

    /// `udp 10.0.0.2:40000 > 198.51.100.2:7 (30 bytes)`; ICMP with its type, code and id.
    pub fn describe(&self) -> String {
        let (sp, dp) = match (self.icmp, self.ports) {
            (None, Some((s, d))) => (Some(s), Some(d)),
            _ => (None, None),
        };
        let mut s = format!(
            "{} {} > {}",
            self.proto,
            Self::endpoint(self.src, sp),
            Self::endpoint(self.dst, dp)
        );
        if let Some((ty, code)) = self.icmp {
            s.push_str(&format!(" type {ty} code {code}"));
            if let Some((id, _)) = self.ports {
                s.push_str(&format!(" id {id}"));
            }
        }
        if self.later_fragment {
            s.push_str(" (later fragment)");
        }
        s.push_str(&format!(" ({} bytes)", self.len));
        s
    }

    fn proto_matches(&self, want: &str) -> bool {
        self.proto == want || (want == "icmp" && self.proto == "icmpv6")
    }

    fn has_host(&self, a: IpAddr) -> bool {
        self.src == a || self.dst == a
    }

    fn has_port(&self, p: u16) -> bool {
        self.ports.is_some_and(|(s, d)| s == p || d == p)
    }
}

impl TraceFilter {
    /// Whether a packet that looked like `before` (and `after`, if it was translated),
    /// arriving on `side` (0 inside, 1 outside), dropped for `dropped`, is wanted.
    pub fn matches(
        &self,
        side: usize,
        before: &Packet,
        after: Option<&Packet>,
        dropped: Option<DropReason>,
    ) -> bool {
        let either = |f: &dyn Fn(&Packet) -> bool| f(before) || after.is_some_and(f);
        self.proto
            .as_deref()
            .is_none_or(|p| either(&|x| x.proto_matches(p)))
            && self.host.is_none_or(|h| either(&|x| x.has_host(h)))
            && self.port.is_none_or(|p| either(&|x| x.has_port(p)))
            && self
                .direction
                .as_deref()
                .is_none_or(|d| (d == "out" && side == 0) || (d == "in" && side == 1))
            && self.drop_reason.is_none_or(|r| dropped == Some(r))
    }
}

/// The counters of one worker (or the offline replay) at one moment: plain copies, named
/// (as JSON) only for a record the filter wants.
pub struct Snapshot {
    engine: Counters,
    io: IoCounters,
}

impl Snapshot {
    /// Takes the counters as they are.
    pub fn of(engine: &Counters, io: &IoCounters) -> Snapshot {
        Snapshot {
            engine: engine.clone(),
            io: io.clone(),
        }
    }

    /// The reason the mode dropped the packet between `earlier` and this snapshot, if it
    /// did (what the filter's `drop_reason` needs before any record is built).
    pub fn dropped_since(&self, earlier: &Snapshot) -> Option<DropReason> {
        DropReason::ALL
            .iter()
            .copied()
            .find(|&r| self.engine.dropped(r) > earlier.engine.dropped(r))
    }
}

/// Every counter that went up from `a` to `b`, by name (`drops.no_mapping`), with how much.
fn deltas(a: &Value, b: &Value, prefix: &str, out: &mut Vec<(String, u64)>) {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return;
    };
    for (k, vb) in b {
        let va = &a[k];
        match (va.as_u64(), vb.as_u64()) {
            (Some(x), Some(y)) if y > x => out.push((format!("{prefix}{k}"), y - x)),
            _ if vb.is_object() => deltas(va, vb, &format!("{prefix}{k}."), out),
            _ => {}
        }
    }
}

/// One traced packet: built from the packet before and after the mode and the counters
/// around it.
pub struct Record {
    /// The JSON record (`quicknat trace --json`).
    pub json: Value,
    /// The drop reason, if the mode dropped it.
    pub dropped: Option<DropReason>,
}

/// Where a traced packet was seen and what left: the worker (`None` offline), the side it
/// arrived on (0 inside, 1 outside), the interface names, and the links what the mode
/// sent left by (the packet, or the ICMP error or fragments it wrote).
pub struct Seen<'a> {
    /// The worker.
    pub worker: Option<usize>,
    /// The side it arrived on.
    pub side: usize,
    /// Inside and outside interface names.
    pub links: [&'a str; 2],
    /// The links what the mode sent left by.
    pub sent: &'a [usize],
    /// Whether the mode keeps sessions (NAT44, NAT64): a forwarded packet that created
    /// none found one.
    pub stateful: bool,
}

/// Builds the record of one packet seen as `at` says, looking like `before`, and `after`
/// once the mode had it (`None` when it did not forward it); `a`/`b` the counters around
/// it.
pub fn record(
    at: &Seen<'_>,
    before: &Packet,
    after: Option<&Packet>,
    a: &Snapshot,
    b: &Snapshot,
) -> Record {
    let (worker, side, links, stateful) = (at.worker, at.side, at.links, at.stateful);
    let mut d = Vec::new();
    deltas(&engine_json(&a.engine), &engine_json(&b.engine), "", &mut d);
    let mut io = Vec::new();
    deltas(&io_json(&a.io), &io_json(&b.io), "", &mut io);
    let has = |name: &str| d.iter().any(|(k, _)| k == name);
    let dropped = b.dropped_since(a);
    let mut steps: Vec<String> = Vec::new();
    // A name in parentheses when there is one (a capture replay has none).
    let named = |i: usize| {
        let n = links[i.min(1)];
        if n.is_empty() {
            String::new()
        } else {
            format!(" ({n})")
        }
    };
    steps.push(format!(
        "received on the {}{}",
        ["inside", "outside"][side.min(1)],
        named(side)
    ));
    if has("sessions_created") {
        steps.push("session created".into());
    } else if stateful && has("forwarded") && dropped.is_none() {
        steps.push("session found".into());
    }
    if has("bindings_created") {
        steps.push("binding created (a public address and port for the inside endpoint)".into());
    }
    for (k, n) in &d {
        let text = match k.as_str() {
            "hairpinned" => "hairpinned back to the inside".to_owned(),
            "icmp_errors_translated" => "an ICMP error: its quoted packet translated too".into(),
            "fragments_translated" => format!("{n} fragment(s) translated"),
            "fragmented" => "cut into fragments for the next hop".into(),
            "icmp_errors_sent" => "ICMP error sent to the sender".into(),
            "icmp_errors_limited" | "icmp_errors_limited_source" => {
                "ICMP error owed but not sent (rate limit)".into()
            }
            _ => continue,
        };
        steps.push(text);
    }
    if let Some(r) = dropped {
        steps.push(format!("dropped: {} ({})", r.as_str(), r.explain()));
    }
    if let Some(p) = after.filter(|p| *p != before) {
        steps.push(format!("translated to {}", p.describe()));
    }
    let mut sent: Vec<usize> = at.sent.to_vec();
    sent.dedup();
    for (k, _) in &io {
        let text = match k.as_str() {
            "to_kernel" => "left to the kernel (not a packet the mode translates on this link)",
            "via_kernel" => "handed to the kernel to resolve its next hop",
            "no_route" => "no route to its destination: dropped",
            "oversize" => "larger than the link's MTU: dropped",
            "gso_refused" => "an offloaded super-packet that could not pass: dropped",
            _ => continue,
        };
        steps.push(text.into());
    }
    for &i in &sent {
        let side_name = ["inside", "outside"][i.min(1)];
        steps.push(format!("sent on the {side_name}{}", named(i)));
    }
    let verdict = if dropped.is_some() || io.iter().any(|(k, _)| k == "no_route" || k == "oversize")
    {
        "dropped"
    } else if io.iter().any(|(k, _)| k == "to_kernel") {
        "to_kernel"
    } else if !sent.is_empty() || has("forwarded") {
        "forwarded"
    } else {
        "consumed"
    };
    let counters: serde_json::Map<String, Value> = d
        .iter()
        .chain(&io)
        .map(|(k, n)| (k.clone(), (*n).into()))
        .collect();
    let arrived = ["inside", "outside"][side.min(1)];
    Record {
        json: json!({
            "worker": worker,
            "arrived": arrived,
            "interface": links[side],
            "packet": before.describe(),
            "translated": after.map(Packet::describe),
            "steps": steps,
            "verdict": verdict,
            "drop_reason": dropped.map(|r| r.as_str()),
            "counters": counters,
        }),
        dropped,
    }
}

/// The steps of a record as lines for a terminal.
pub fn text(r: &Value) -> String {
    let mut s = format!(
        "{}{}: {}\n",
        r["worker"]
            .as_u64()
            .map_or(String::new(), |w| format!("worker {w} ")),
        r["arrived"].as_str().unwrap_or("?"),
        r["packet"].as_str().unwrap_or("?")
    );
    for step in r["steps"].as_array().into_iter().flatten() {
        s.push_str(&format!("  - {}\n", step.as_str().unwrap_or("?")));
    }
    s.push_str(&format!("  = {}\n", r["verdict"].as_str().unwrap_or("?")));
    s
}

/// A live gateway's trace: armed by the control API, filled by the workers.
#[derive(Default)]
pub struct Tracer {
    armed: AtomicBool,
    session: Mutex<Option<Session>>,
}

struct Session {
    filter: TraceFilter,
    remaining: usize,
    tx: mpsc::SyncSender<Value>,
}

impl Tracer {
    /// Whether a trace is armed (one relaxed load: the workers ask once per batch).
    #[inline]
    pub fn armed(&self) -> bool {
        self.armed.load(Ordering::Relaxed)
    }

    /// Arms a trace of `count` packets; the records arrive on the returned receiver.
    /// Refused while another runs.
    pub fn arm(&self, filter: TraceFilter, count: usize) -> Result<mpsc::Receiver<Value>, String> {
        let mut s = self.session.lock().unwrap_or_else(|e| e.into_inner());
        if s.is_some() {
            return Err("a trace is already running on this gateway".into());
        }
        let (tx, rx) = mpsc::sync_channel(count.max(1));
        *s = Some(Session {
            filter,
            remaining: count,
            tx,
        });
        self.armed.store(true, Ordering::Relaxed);
        Ok(rx)
    }

    /// Ends the trace (its time is up, or its client left).
    pub fn disarm(&self) {
        self.armed.store(false, Ordering::Relaxed);
        *self.session.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The filter of the trace in force, if any (the worker checks a packet against it
    /// before building its record).
    pub fn wants(
        &self,
        side: usize,
        before: &Packet,
        after: Option<&Packet>,
        dropped: Option<DropReason>,
    ) -> bool {
        let s = self.session.lock().unwrap_or_else(|e| e.into_inner());
        s.as_ref()
            .is_some_and(|s| s.remaining > 0 && s.filter.matches(side, before, after, dropped))
    }

    /// Hands over one record; the trace disarms itself after its last.
    pub fn offer(&self, record: Value) {
        let mut g = self.session.lock().unwrap_or_else(|e| e.into_inner());
        let Some(s) = g.as_mut() else { return };
        if s.remaining == 0 {
            return;
        }
        s.remaining -= 1;
        let _ = s.tx.try_send(record);
        if s.remaining == 0 {
            self.armed.store(false, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests;
