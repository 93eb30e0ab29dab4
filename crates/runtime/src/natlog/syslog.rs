//! RFC 5424 syslog lines for NAT events, sans-I/O: one event in, one message out.
//!
//! `<PRI>1 TIMESTAMP HOSTNAME quicknat PROCID MSGID [nat@32473 ...] text`: PRI is
//! facility * 8 + severity (§6.2.1), TIMESTAMP RFC 3339 in UTC with milliseconds
//! (§6.2.3), MSGID the event's name, the structured data element `nat@32473` (32473 is
//! the private enterprise number RFC 5612 reserves for documentation; SD-IDs with an
//! `@` are private, §7.3) carries the RFC 8158 fields by their IPFIX names, and the
//! free-text MSG says the same for a human.

use std::fmt::Write;

use engine::events::Event;

/// Facility and severity, and who sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyslogHeader {
    /// RFC 5424 facility (0-23); 16 (local0) by default.
    pub facility: u8,
    /// RFC 5424 severity (0-7); 6 (informational) by default.
    pub severity: u8,
    /// HOSTNAME (printable US-ASCII, at most 255; "-" if unknown).
    pub hostname: String,
    /// PROCID.
    pub procid: u32,
}

/// The SD-ID of quicknat's structured data.
pub const SD_ID: &str = "nat@32473";

/// `ms` since the Unix epoch as an RFC 3339 UTC timestamp with milliseconds.
pub fn rfc3339_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        ms % 1000
    )
}

fn proto_name(p: u8) -> &'static str {
    match p {
        6 => "TCP",
        17 => "UDP",
        1 => "ICMP",
        _ => "-",
    }
}

/// One RFC 5424 message for `e` at wall-clock time `time_ms`.
pub fn format(h: &SyslogHeader, e: &Event, time_ms: u64) -> String {
    let pri = u16::from(h.facility.min(23)) * 8 + u16::from(h.severity.min(7));
    let host = if h.hostname.is_empty() {
        "-"
    } else {
        h.hostname.as_str()
    };
    let mut s = format!(
        "<{pri}>1 {} {host} quicknat {} {} [{SD_ID} natEvent=\"{}\"",
        rfc3339_ms(time_ms),
        h.procid,
        e.kind.as_str(),
        e.kind as u8
    );
    let kind = e.kind;
    let inside = match e.inside6 {
        Some(v6) => format!("[{v6}]:{}", e.inside.1),
        None => format!("{}:{}", e.inside.0, e.inside.1),
    };
    // Values are addresses and numbers: no '"', '\' or ']' to escape (§6.3.3).
    if e.proto != 0 {
        let _ = write!(s, " protocolIdentifier=\"{}\"", e.proto);
    }
    use engine::events::EventClass::*;
    match kind.class() {
        Session | Binding => {
            match e.inside6 {
                Some(v6) => {
                    let _ = write!(s, " sourceIPv6Address=\"{v6}\"");
                }
                None => {
                    let _ = write!(s, " sourceIPv4Address=\"{}\"", e.inside.0);
                }
            }
            let _ = write!(
                s,
                " sourceTransportPort=\"{}\" postNATSourceIPv4Address=\"{}\" postNAPTSourceTransportPort=\"{}\"",
                e.inside.1, e.public.0, e.public.1
            );
            if kind.class() == Session {
                let _ = write!(
                    s,
                    " destinationIPv4Address=\"{}\" destinationTransportPort=\"{}\"",
                    e.remote.0, e.remote.1
                );
            }
        }
        Block => {
            let _ = write!(
                s,
                " sourceIPv4Address=\"{}\" postNATSourceIPv4Address=\"{}\" portRangeStart=\"{}\" portRangeEnd=\"{}\"",
                e.inside.0,
                e.public.0,
                e.block.0,
                e.block.0.saturating_add(e.block.1.saturating_sub(1))
            );
        }
        Limits => {
            if let Some((q, limit)) = e.quota {
                let _ = write!(
                    s,
                    " natQuotaExceededEvent=\"{}\" limit=\"{limit}\"",
                    q as u8
                );
            }
            if e.public.0 != std::net::Ipv4Addr::UNSPECIFIED {
                let _ = write!(s, " postNATSourceIPv4Address=\"{}\"", e.public.0);
            }
            if e.inside.0 != std::net::Ipv4Addr::UNSPECIFIED || e.inside6.is_some() {
                let _ = write!(s, " subscriber=\"{inside}\"");
            }
        }
    }
    s.push_str("] ");
    let _ = match kind.class() {
        Session => write!(
            s,
            "{} {} {inside} -> {}:{} to {}:{}",
            kind.as_str(),
            proto_name(e.proto),
            e.public.0,
            e.public.1,
            e.remote.0,
            e.remote.1
        ),
        Binding => write!(
            s,
            "{} {} {inside} -> {}:{}",
            kind.as_str(),
            proto_name(e.proto),
            e.public.0,
            e.public.1
        ),
        Block => write!(
            s,
            "{} {} -> {} ports {}-{}",
            kind.as_str(),
            e.inside.0,
            e.public.0,
            e.block.0,
            e.block.0.saturating_add(e.block.1.saturating_sub(1))
        ),
        Limits => write!(s, "{} {inside}", kind.as_str()),
    };
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::events::EventKind;
    use std::net::Ipv4Addr;

    fn header() -> SyslogHeader {
        SyslogHeader {
            facility: 16,
            severity: 6,
            hostname: "gw1".into(),
            procid: 42,
        }
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day of a century leap year) 12:34:56.789.
        assert_eq!(rfc3339_ms(951_827_696_789), "2000-02-29T12:34:56.789Z");
        assert_eq!(rfc3339_ms(1_795_996_800_000), "2026-11-30T00:00:00.000Z");
    }

    /// RFC 5424 §6: SYSLOG-MSG = HEADER SP STRUCTURED-DATA [SP MSG]; HEADER = PRI VERSION
    /// SP TIMESTAMP SP HOSTNAME SP APP-NAME SP PROCID SP MSGID. Parsed field by field
    /// with the grammar's limits (APP-NAME 48, PROCID 128, MSGID 32, PRINTUSASCII).
    fn parse(line: &str) -> (u16, Vec<String>, Vec<(String, String)>, String) {
        let rest = line.strip_prefix('<').expect("PRI");
        let (pri, rest) = rest.split_once('>').unwrap();
        assert!((1..=3).contains(&pri.len()) && pri.bytes().all(|b| b.is_ascii_digit()));
        let rest = rest.strip_prefix("1 ").expect("VERSION 1");
        let mut parts = rest.splitn(6, ' ');
        let header: Vec<String> = (0..5).map(|_| parts.next().unwrap().to_owned()).collect();
        for (h, max) in header.iter().zip([64, 255, 48, 128, 32]) {
            assert!(!h.is_empty() && h.len() <= max, "{h}");
            assert!(h.bytes().all(|b| (33..=126).contains(&b)), "{h}");
        }
        let sd = parts.next().unwrap();
        let sd = sd.strip_prefix('[').expect("one SD-ELEMENT");
        let (element, msg) = sd.split_once("] ").unwrap();
        let mut it = element.splitn(2, ' ');
        assert_eq!(it.next().unwrap(), SD_ID);
        let mut params = Vec::new();
        let mut body = it.next().unwrap_or("");
        while !body.is_empty() {
            let (name, r) = body.split_once("=\"").unwrap();
            assert!(name.len() <= 32 && !name.contains([' ', '=', ']', '"']));
            let (value, r) = r.split_once('"').unwrap();
            params.push((name.to_owned(), value.to_owned()));
            body = r.trim_start();
        }
        (pri.parse().unwrap(), header, params, msg.to_owned())
    }

    #[test]
    fn a_session_event_follows_the_grammar_and_names_every_endpoint() {
        let mut e = Event::new(EventKind::Nat44SessionCreate, conntrack::Timestamp::ZERO);
        e.proto = 17;
        e.inside = (Ipv4Addr::new(10, 0, 0, 2), 5000);
        e.public = (Ipv4Addr::new(203, 0, 113, 1), 40000);
        e.remote = (Ipv4Addr::new(198, 51, 100, 2), 53);
        let line = format(&header(), &e, 951_827_696_789);
        assert_eq!(
            line,
            "<134>1 2000-02-29T12:34:56.789Z gw1 quicknat 42 nat44-session-create [nat@32473 natEvent=\"4\" protocolIdentifier=\"17\" sourceIPv4Address=\"10.0.0.2\" sourceTransportPort=\"5000\" postNATSourceIPv4Address=\"203.0.113.1\" postNAPTSourceTransportPort=\"40000\" destinationIPv4Address=\"198.51.100.2\" destinationTransportPort=\"53\"] nat44-session-create UDP 10.0.0.2:5000 -> 203.0.113.1:40000 to 198.51.100.2:53"
        );
        let (pri, h, params, _) = parse(&line);
        assert_eq!(pri, 16 * 8 + 6);
        assert_eq!(h[4], "nat44-session-create");
        assert!(params.contains(&("postNAPTSourceTransportPort".into(), "40000".into())));
    }

    #[test]
    fn every_kind_parses() {
        for k in EventKind::ALL {
            let mut e = Event::new(k, conntrack::Timestamp::ZERO);
            e.inside6 = k.is_nat64().then(|| "2001:db8::1".parse().unwrap());
            e.quota = (k == EventKind::QuotaExceeded)
                .then_some((engine::events::Quota::EntriesPerUser, 10));
            let (_, h, params, msg) = parse(&format(&header(), &e, 1));
            assert_eq!(h[4], k.as_str());
            assert_eq!(params[0], ("natEvent".into(), (k as u8).to_string()));
            assert!(msg.starts_with(k.as_str()));
        }
    }
}
