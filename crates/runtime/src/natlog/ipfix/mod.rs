//! IPFIX (RFC 7011) messages carrying RFC 8158 NAT events, sans-I/O: events in, UDP
//! payloads out. The exporter owns the socket and the clock.
//!
//! One template per event shape (NAT44/NAT64 session, BIB, exhaustion, quota, port
//! block), sent in the first message and again every `refresh` (RFC 7011 §8.4 / §10.3.6:
//! over UDP "the Exporting Process MUST re-send all active Templates ... at regular
//! intervals"). Every message stays under `max_message` bytes (the path MTU minus the IP
//! and UDP headers): §10.3.3 "the Exporting Process MUST NOT generate IPFIX Messages
//! that exceed the path MTU". The header's sequence number is, per §3.1, "incremental
//! sequence counter modulo 2^32 of all IPFIX Data Records sent in the current stream
//! from the current Observation Domain by the Exporting Process", before this message.

use std::time::Duration;

use engine::events::{Event, EventKind, Quota};

/// RFC 7011 §3.1: version number of an IPFIX message.
pub const VERSION: u16 = 10;
/// Message header bytes.
pub const HEADER_LEN: usize = 16;
/// Set header bytes.
const SET_HEADER_LEN: usize = 4;
/// RFC 7011 §3.3.2: the set id of a template set.
pub const TEMPLATE_SET_ID: u16 = 2;

/// IANA IPFIX information elements used here (RFC 7012, RFC 8158 §5).
pub mod ie {
    /// protocolIdentifier.
    pub const PROTOCOL_IDENTIFIER: u16 = 4;
    /// sourceTransportPort.
    pub const SOURCE_TRANSPORT_PORT: u16 = 7;
    /// sourceIPv4Address.
    pub const SOURCE_IPV4_ADDRESS: u16 = 8;
    /// destinationTransportPort.
    pub const DESTINATION_TRANSPORT_PORT: u16 = 11;
    /// destinationIPv4Address.
    pub const DESTINATION_IPV4_ADDRESS: u16 = 12;
    /// sourceIPv6Address.
    pub const SOURCE_IPV6_ADDRESS: u16 = 27;
    /// postNATSourceIPv4Address.
    pub const POST_NAT_SOURCE_IPV4_ADDRESS: u16 = 225;
    /// postNAPTSourceTransportPort.
    pub const POST_NAPT_SOURCE_TRANSPORT_PORT: u16 = 227;
    /// natEvent.
    pub const NAT_EVENT: u16 = 230;
    /// observationTimeMilliseconds.
    pub const OBSERVATION_TIME_MILLISECONDS: u16 = 323;
    /// portRangeStart.
    pub const PORT_RANGE_START: u16 = 361;
    /// portRangeEnd.
    pub const PORT_RANGE_END: u16 = 362;
    /// natQuotaExceededEvent.
    pub const NAT_QUOTA_EXCEEDED_EVENT: u16 = 466;
    /// maxSessionEntries.
    pub const MAX_SESSION_ENTRIES: u16 = 471;
    /// maxEntriesPerUser.
    pub const MAX_ENTRIES_PER_USER: u16 = 473;
}

use ie::*;

/// A template: its id and its fields (information element, length in bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Template {
    /// Template id (256 and up).
    pub id: u16,
    /// The fields in record order.
    pub fields: &'static [(u16, u16)],
}

impl Template {
    /// Bytes of one data record.
    pub fn record_len(&self) -> usize {
        self.fields.iter().map(|f| usize::from(f.1)).sum()
    }

    /// Bytes of this template's record in a template set.
    fn template_len(&self) -> usize {
        4 + 4 * self.fields.len()
    }
}

const TIME: (u16, u16) = (OBSERVATION_TIME_MILLISECONDS, 8);
const EVENT: (u16, u16) = (NAT_EVENT, 1);
const PROTO: (u16, u16) = (PROTOCOL_IDENTIFIER, 1);
const SRC4: (u16, u16) = (SOURCE_IPV4_ADDRESS, 4);
const SRC6: (u16, u16) = (SOURCE_IPV6_ADDRESS, 16);
const SPORT: (u16, u16) = (SOURCE_TRANSPORT_PORT, 2);
const PUB4: (u16, u16) = (POST_NAT_SOURCE_IPV4_ADDRESS, 4);
const PUBPORT: (u16, u16) = (POST_NAPT_SOURCE_TRANSPORT_PORT, 2);
const DST4: (u16, u16) = (DESTINATION_IPV4_ADDRESS, 4);
const DPORT: (u16, u16) = (DESTINATION_TRANSPORT_PORT, 2);

/// Every template, one per event shape (RFC 8158 §4.1's templates, the fields this NAT
/// knows).
pub const TEMPLATES: [Template; 9] = [
    // NAT44 session create/delete (RFC 8158 §4.1.1).
    Template {
        id: 256,
        fields: &[TIME, EVENT, PROTO, SRC4, SPORT, PUB4, PUBPORT, DST4, DPORT],
    },
    // NAT64 session create/delete (§4.1.2).
    Template {
        id: 257,
        fields: &[TIME, EVENT, PROTO, SRC6, SPORT, PUB4, PUBPORT, DST4, DPORT],
    },
    // NAT44 BIB create/delete (§4.1.3).
    Template {
        id: 258,
        fields: &[TIME, EVENT, PROTO, SRC4, SPORT, PUB4, PUBPORT],
    },
    // NAT64 BIB create/delete (§4.1.4).
    Template {
        id: 259,
        fields: &[TIME, EVENT, PROTO, SRC6, SPORT, PUB4, PUBPORT],
    },
    // Addresses / ports exhausted (§4.1.5, §4.1.6): the pool's (first) address.
    Template {
        id: 260,
        fields: &[TIME, EVENT, PUB4],
    },
    // Quota exceeded, maximum session entries (§4.1.7).
    Template {
        id: 261,
        fields: &[
            TIME,
            EVENT,
            (NAT_QUOTA_EXCEEDED_EVENT, 4),
            (MAX_SESSION_ENTRIES, 4),
        ],
    },
    // Quota exceeded, maximum entries per user (§4.1.7), IPv4 and IPv6 subscriber.
    Template {
        id: 262,
        fields: &[
            TIME,
            EVENT,
            (NAT_QUOTA_EXCEEDED_EVENT, 4),
            (MAX_ENTRIES_PER_USER, 4),
            SRC4,
        ],
    },
    Template {
        id: 263,
        fields: &[
            TIME,
            EVENT,
            (NAT_QUOTA_EXCEEDED_EVENT, 4),
            (MAX_ENTRIES_PER_USER, 4),
            SRC6,
        ],
    },
    // Port block allocation/de-allocation (§4.1.10).
    Template {
        id: 264,
        fields: &[
            TIME,
            EVENT,
            SRC4,
            PUB4,
            (PORT_RANGE_START, 2),
            (PORT_RANGE_END, 2),
        ],
    },
];

/// The template an event is sent with.
pub fn template_of(e: &Event) -> &'static Template {
    use EventKind::*;
    let i = match e.kind {
        Nat44SessionCreate | Nat44SessionDelete => 0,
        Nat64SessionCreate | Nat64SessionDelete => 1,
        Nat44BibCreate | Nat44BibDelete => 2,
        Nat64BibCreate | Nat64BibDelete => 3,
        AddressesExhausted | PortsExhausted => 4,
        QuotaExceeded => match e.quota {
            Some((Quota::SessionEntries, _)) => 5,
            _ if e.inside6.is_some() => 7,
            _ => 6,
        },
        PortBlockAllocate | PortBlockRelease => 8,
    };
    &TEMPLATES[i]
}

/// Appends `e`'s data record (in `t`'s field order) to `out`; `time_ms` is its wall-clock
/// time in milliseconds since the Unix epoch.
pub fn encode_record(t: &Template, e: &Event, time_ms: u64, out: &mut Vec<u8>) {
    for &(id, len) in t.fields {
        match id {
            OBSERVATION_TIME_MILLISECONDS => out.extend_from_slice(&time_ms.to_be_bytes()),
            NAT_EVENT => out.push(e.kind as u8),
            PROTOCOL_IDENTIFIER => out.push(e.proto),
            SOURCE_IPV4_ADDRESS => out.extend_from_slice(&e.inside.0.octets()),
            SOURCE_IPV6_ADDRESS => out.extend_from_slice(
                &e.inside6
                    .unwrap_or(std::net::Ipv6Addr::UNSPECIFIED)
                    .octets(),
            ),
            SOURCE_TRANSPORT_PORT => out.extend_from_slice(&e.inside.1.to_be_bytes()),
            POST_NAT_SOURCE_IPV4_ADDRESS => out.extend_from_slice(&e.public.0.octets()),
            POST_NAPT_SOURCE_TRANSPORT_PORT => out.extend_from_slice(&e.public.1.to_be_bytes()),
            DESTINATION_IPV4_ADDRESS => out.extend_from_slice(&e.remote.0.octets()),
            DESTINATION_TRANSPORT_PORT => out.extend_from_slice(&e.remote.1.to_be_bytes()),
            NAT_QUOTA_EXCEEDED_EVENT => {
                let q = e.quota.map_or(0u32, |(q, _)| q as u32);
                out.extend_from_slice(&q.to_be_bytes())
            }
            MAX_SESSION_ENTRIES | MAX_ENTRIES_PER_USER => {
                out.extend_from_slice(&e.quota.map_or(0, |q| q.1).to_be_bytes())
            }
            PORT_RANGE_START => out.extend_from_slice(&e.block.0.to_be_bytes()),
            PORT_RANGE_END => {
                let end = e.block.0.saturating_add(e.block.1.saturating_sub(1));
                out.extend_from_slice(&end.to_be_bytes())
            }
            _ => out.extend(std::iter::repeat_n(0, usize::from(len))),
        }
    }
}

/// Appends one template set holding every template.
pub fn encode_template_set(out: &mut Vec<u8>) {
    let len = SET_HEADER_LEN + TEMPLATES.iter().map(Template::template_len).sum::<usize>();
    out.extend_from_slice(&TEMPLATE_SET_ID.to_be_bytes());
    out.extend_from_slice(&(len as u16).to_be_bytes());
    for t in &TEMPLATES {
        out.extend_from_slice(&t.id.to_be_bytes());
        out.extend_from_slice(&(t.fields.len() as u16).to_be_bytes());
        for &(id, l) in t.fields {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&l.to_be_bytes());
        }
    }
}

/// Bytes of the template set.
pub fn template_set_len() -> usize {
    SET_HEADER_LEN + TEMPLATES.iter().map(Template::template_len).sum::<usize>()
}

/// When templates are sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refresh {
    /// After this long (RFC 7011 §10.3.6 templateRefreshTimeout).
    pub interval: Duration,
    /// After this many messages (0: by time only).
    pub messages: u32,
}

/// The exporting process's state for one observation domain over one UDP stream.
#[derive(Debug)]
pub struct Encoder {
    domain: u32,
    max_message: usize,
    refresh: Refresh,
    /// Data records sent so far (the next message's sequence number, mod 2^32).
    sequence: u32,
    /// Export time (ms) the templates were last sent, None before the first.
    templates_sent_ms: Option<u64>,
    messages_since_templates: u32,
}

impl Encoder {
    /// An encoder for observation domain `domain`, messages of at most `max_message`
    /// bytes (at least the template set and one record fit: raised to 512 if lower).
    pub fn new(domain: u32, max_message: usize, refresh: Refresh) -> Encoder {
        Encoder {
            domain,
            max_message: max_message.clamp(512, usize::from(u16::MAX)),
            refresh,
            sequence: 0,
            templates_sent_ms: None,
            messages_since_templates: 0,
        }
    }

    /// The sequence number the next message carries: data records sent so far.
    pub fn sequence(&self) -> u32 {
        self.sequence
    }

    fn templates_due(&self, now_ms: u64) -> bool {
        match self.templates_sent_ms {
            None => true,
            Some(t) => {
                now_ms.saturating_sub(t) >= self.refresh.interval.as_millis() as u64
                    || (self.refresh.messages > 0
                        && self.messages_since_templates >= self.refresh.messages)
            }
        }
    }

    /// Encodes `events` (each with its wall-clock time in ms) into messages exported at
    /// `now_ms`, calling `send` with each; templates go first when due. With no events,
    /// sends the templates alone when due (so a collector that starts late learns them).
    pub fn encode(
        &mut self,
        now_ms: u64,
        events: &[(Event, u64)],
        mut send: impl FnMut(&[u8]),
    ) -> usize {
        let mut msg = Vec::with_capacity(self.max_message);
        let mut sent = 0;
        let mut i = 0;
        loop {
            msg.clear();
            msg.resize(HEADER_LEN, 0);
            if self.templates_due(now_ms) {
                encode_template_set(&mut msg);
                self.templates_sent_ms = Some(now_ms);
                self.messages_since_templates = 0;
            }
            let first_sequence = self.sequence;
            let mut set_start: Option<(usize, u16)> = None;
            while let Some((e, t_ms)) = events.get(i) {
                let t = template_of(e);
                let same_set = set_start.is_some_and(|(_, id)| id == t.id);
                let need = t.record_len() + if same_set { 0 } else { SET_HEADER_LEN };
                if msg.len() + need > self.max_message {
                    break;
                }
                if !same_set {
                    close_set(&mut msg, set_start);
                    set_start = Some((msg.len(), t.id));
                    msg.extend_from_slice(&t.id.to_be_bytes());
                    msg.extend_from_slice(&[0, 0]);
                }
                encode_record(t, e, *t_ms, &mut msg);
                self.sequence = self.sequence.wrapping_add(1);
                i += 1;
            }
            close_set(&mut msg, set_start);
            if msg.len() == HEADER_LEN {
                return sent;
            }
            let len = msg.len() as u16;
            msg[0..2].copy_from_slice(&VERSION.to_be_bytes());
            msg[2..4].copy_from_slice(&len.to_be_bytes());
            msg[4..8].copy_from_slice(&((now_ms / 1000) as u32).to_be_bytes());
            msg[8..12].copy_from_slice(&first_sequence.to_be_bytes());
            msg[12..16].copy_from_slice(&self.domain.to_be_bytes());
            send(&msg);
            sent += 1;
            self.messages_since_templates += 1;
            if i >= events.len() {
                return sent;
            }
        }
    }
}

/// Writes the length of the set that starts at `start`, if any.
fn close_set(msg: &mut [u8], start: Option<(usize, u16)>) {
    if let Some((s, _)) = start {
        let len = (msg.len() - s) as u16;
        msg[s + 2..s + 4].copy_from_slice(&len.to_be_bytes());
    }
}

#[cfg(test)]
mod tests;
