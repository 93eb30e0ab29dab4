//! The IPFIX encoder against bytes derived by hand from RFC 7011 §3, and a decoder
//! written from the RFC (not from the encoder) that every encoded stream must satisfy.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use conntrack::Timestamp;
use engine::events::{Event, EventKind, Quota};
use proptest::prelude::*;

use super::*;

fn session() -> Event {
    let mut e = Event::new(EventKind::Nat44SessionCreate, Timestamp::ZERO);
    e.proto = 17;
    e.inside = (Ipv4Addr::new(10, 0, 0, 2), 5000);
    e.public = (Ipv4Addr::new(203, 0, 113, 1), 40000);
    e.remote = (Ipv4Addr::new(198, 51, 100, 2), 53);
    e
}

const REFRESH: Refresh = Refresh {
    interval: Duration::from_secs(60),
    messages: 0,
};

#[test]
fn a_nat44_session_record_byte_by_byte() {
    // RFC 7011 §3.4.3: a data record is the fields' values in template order, each
    // in network byte order (§6.1), with the template's lengths.
    let mut out = Vec::new();
    encode_record(&TEMPLATES[0], &session(), 0x0102_0304_0506_0708, &mut out);
    assert_eq!(
        out,
        [
            1, 2, 3, 4, 5, 6, 7, 8,  // observationTimeMilliseconds (323), 8 bytes
            4,  // natEvent (230): NAT44 session create
            17, // protocolIdentifier (4): UDP
            10, 0, 0, 2, // sourceIPv4Address (8)
            0x13, 0x88, // sourceTransportPort (7): 5000
            203, 0, 113, 1, // postNATSourceIPv4Address (225)
            0x9c, 0x40, // postNAPTSourceTransportPort (227): 40000
            198, 51, 100, 2, // destinationIPv4Address (12)
            0, 53, // destinationTransportPort (11)
        ]
    );
    assert_eq!(TEMPLATES[0].record_len(), out.len());
}

#[test]
fn the_first_message_header_template_set_and_data_set_byte_by_byte() {
    let mut enc = Encoder::new(7, 1400, REFRESH);
    let mut msgs = Vec::new();
    let n = enc.encode(1_700_000_000_123, &[(session(), 1_700_000_000_100)], |m| {
        msgs.push(m.to_vec())
    });
    assert_eq!(n, 1);
    let m = &msgs[0];
    let tset = template_set_len();
    // §3.1 message header: version 10, length, export time (s), sequence 0 (no data
    // record sent before), observation domain 7.
    assert_eq!(&m[0..2], &[0x00, 0x0a]);
    assert_eq!(usize::from(u16::from_be_bytes([m[2], m[3]])), m.len());
    assert_eq!(&m[4..8], &1_700_000_000u32.to_be_bytes());
    assert_eq!(&m[8..12], &[0, 0, 0, 0]);
    assert_eq!(&m[12..16], &[0, 0, 0, 7]);
    // §3.3.2 template set: set id 2, its length; first template record: id 256, 9
    // fields, then (IE, length) pairs.
    assert_eq!(&m[16..18], &[0, 2]);
    assert_eq!(usize::from(u16::from_be_bytes([m[18], m[19]])), tset);
    assert_eq!(
        &m[20..24 + 4 * 9],
        &[
            1, 0, 0, 9, // template 256, 9 fields
            0x01, 0x43, 0, 8, // 323 observationTimeMilliseconds, 8
            0, 230, 0, 1, // natEvent, 1
            0, 4, 0, 1, // protocolIdentifier, 1
            0, 8, 0, 4, // sourceIPv4Address, 4
            0, 7, 0, 2, // sourceTransportPort, 2
            0, 225, 0, 4, // postNATSourceIPv4Address, 4
            0, 227, 0, 2, // postNAPTSourceTransportPort, 2
            0, 12, 0, 4, // destinationIPv4Address, 4
            0, 11, 0, 2, // destinationTransportPort, 2
        ][..]
    );
    // §3.3.2 data set: set id = template id 256, length 4 + one 28-byte record.
    let d = 16 + tset;
    assert_eq!(&m[d..d + 4], &[1, 0, 0, 32]);
    assert_eq!(m.len(), d + 32);
    assert_eq!(&m[d + 4..d + 12], &1_700_000_000_100u64.to_be_bytes());
    // The next message counts the one record sent, and carries no templates yet.
    let mut next = Vec::new();
    enc.encode(1_700_000_001_000, &[(session(), 0)], |m| {
        next.push(m.to_vec())
    });
    assert_eq!(&next[0][8..12], &[0, 0, 0, 1]);
    assert_eq!(&next[0][16..18], &[1, 0]);
}

#[test]
fn templates_are_sent_again_after_the_interval_and_after_n_messages() {
    let mut enc = Encoder::new(
        1,
        1400,
        Refresh {
            interval: Duration::from_secs(60),
            messages: 3,
        },
    );
    let has_templates = |enc: &mut Encoder, now: u64| {
        let mut t = false;
        enc.encode(now, &[(session(), now)], |m| t = m[16..18] == [0, 2]);
        t
    };
    let seen: Vec<bool> = [0, 1000, 2000, 3000, 4000, 5000]
        .map(|t| has_templates(&mut enc, t))
        .to_vec();
    assert_eq!(seen, [true, false, false, true, false, false]);
    assert!(has_templates(&mut enc, 65_000 + 6000));
    // With nothing to send, due templates still go out alone.
    let mut alone = 0;
    enc.encode(200_000, &[], |m| {
        assert_eq!(m.len(), HEADER_LEN + template_set_len());
        alone += 1;
    });
    assert_eq!(alone, 1);
    enc.encode(200_001, &[], |_| panic!("nothing due"));
}

// ---- an independent decoder, from RFC 7011 §3 ----

#[derive(Debug)]
struct Decoded {
    sequence: u32,
    domain: u32,
    records: Vec<HashMap<u16, Vec<u8>>>,
    template_ids: Vec<u16>,
}

fn decode(m: &[u8], templates: &mut HashMap<u16, Vec<(u16, u16)>>) -> Decoded {
    assert!(m.len() >= 16);
    assert_eq!(u16::from_be_bytes([m[0], m[1]]), 10);
    assert_eq!(usize::from(u16::from_be_bytes([m[2], m[3]])), m.len());
    let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let mut d = Decoded {
        sequence: be32(&m[8..]),
        domain: be32(&m[12..]),
        records: Vec::new(),
        template_ids: Vec::new(),
    };
    let mut off = 16;
    while off < m.len() {
        let id = u16::from_be_bytes([m[off], m[off + 1]]);
        let len = usize::from(u16::from_be_bytes([m[off + 2], m[off + 3]]));
        assert!(len >= 4 && off + len <= m.len(), "set overruns the message");
        let body = &m[off + 4..off + len];
        if id == 2 {
            let mut p = 0;
            while p + 4 <= body.len() {
                let tid = u16::from_be_bytes([body[p], body[p + 1]]);
                let n = usize::from(u16::from_be_bytes([body[p + 2], body[p + 3]]));
                assert!(tid >= 256);
                let fields = (0..n)
                    .map(|i| {
                        let f = &body[p + 4 + 4 * i..];
                        (
                            u16::from_be_bytes([f[0], f[1]]),
                            u16::from_be_bytes([f[2], f[3]]),
                        )
                    })
                    .collect();
                templates.insert(tid, fields);
                d.template_ids.push(tid);
                p += 4 + 4 * n;
            }
            assert_eq!(p, body.len());
        } else {
            assert!(id >= 256);
            let t = templates.get(&id).expect("data set before its template");
            let rl: usize = t.iter().map(|f| usize::from(f.1)).sum();
            assert_eq!(body.len() % rl, 0, "no padding is sent");
            for r in body.chunks(rl) {
                let mut map = HashMap::new();
                let mut q = 0;
                for &(ie, l) in t {
                    map.insert(ie, r[q..q + usize::from(l)].to_vec());
                    q += usize::from(l);
                }
                d.records.push(map);
            }
        }
        off += len;
    }
    d
}

fn arb_event() -> impl Strategy<Value = Event> {
    (
        0usize..EventKind::ALL.len(),
        any::<u8>(),
        any::<(u32, u16, u32, u16, u32, u16)>(),
        any::<u128>(),
        any::<(u16, u16, u32)>(),
        any::<bool>(),
    )
        .prop_map(|(k, proto, (a, p, b, q, c, r), v6, (bs, bn, lim), sess)| {
            let kind = EventKind::ALL[k];
            let mut e = Event::new(kind, Timestamp::ZERO);
            e.proto = proto;
            e.inside = (Ipv4Addr::from(a), p);
            e.public = (Ipv4Addr::from(b), q);
            e.remote = (Ipv4Addr::from(c), r);
            e.inside6 = (kind.is_nat64() || (kind == EventKind::QuotaExceeded && v6 % 2 == 0))
                .then(|| Ipv6Addr::from(v6));
            e.block = (bs, bn);
            if kind == EventKind::QuotaExceeded {
                e.quota = Some(if sess {
                    (Quota::SessionEntries, lim)
                } else {
                    (Quota::EntriesPerUser, lim)
                });
            }
            e
        })
}

proptest! {
    #[test]
    fn any_event_sequence_decodes_back(events in prop::collection::vec((arb_event(), any::<u64>()), 0..300),
                                       mtu in 512usize..1500, domain: u32) {
        let mut enc = Encoder::new(domain, mtu, REFRESH);
        let mut templates = HashMap::new();
        let mut got = Vec::new();
        let mut expected_seq = 0u32;
        enc.encode(5_000, &events, |m| {
            assert!(m.len() <= mtu, "{} > {mtu}", m.len());
            let d = decode(m, &mut templates);
            assert_eq!(d.domain, domain);
            assert_eq!(d.sequence, expected_seq);
            expected_seq = expected_seq.wrapping_add(d.records.len() as u32);
            got.extend(d.records);
        });
        prop_assert_eq!(got.len(), events.len());
        prop_assert_eq!(enc.sequence(), events.len() as u32);
        for ((e, t), r) in events.iter().zip(&got) {
            prop_assert_eq!(&r[&323], &t.to_be_bytes().to_vec());
            prop_assert_eq!(r[&230][0], e.kind as u8);
            if let Some(src) = r.get(&8) {
                prop_assert_eq!(src, &e.inside.0.octets().to_vec());
            }
            if let Some(src) = r.get(&27) {
                prop_assert_eq!(src, &e.inside6.unwrap().octets().to_vec());
            }
            if let Some(p) = r.get(&227) {
                prop_assert_eq!(p, &e.public.1.to_be_bytes().to_vec());
            }
            if let Some(p) = r.get(&225) {
                prop_assert_eq!(p, &e.public.0.octets().to_vec());
            }
            if let Some(p) = r.get(&12) {
                prop_assert_eq!(p, &e.remote.0.octets().to_vec());
            }
            if let Some(p) = r.get(&466) {
                prop_assert_eq!(p[3], e.quota.unwrap().0 as u8);
            }
        }
    }
}
