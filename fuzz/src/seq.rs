//! Packet sequences through the stateful modes (NAT44, NAT64) with time passed in. The
//! input is a list of steps, each a time delta and an operation: a packet built from a
//! few bytes (a flow among a handful of hosts and ports, any TCP flags), the reply to the
//! last packet the gateway forwarded, raw bytes, a reaper pass. After every step the
//! emitted packets are checked and the tables must agree with themselves (sessions
//! counted = sessions listed = created - expired, within the cap); at the end everything
//! is left to expire, the reaper runs, and nothing may be left behind: no session, no
//! binding but the static ones, no fragment record, no NAT64 host but the static
//! bindings' — and every port of the pool can be handed out again.

use std::sync::Arc;
use std::time::Duration;

use conntrack::Timestamp;
use engine::any::ModeConfig;
use engine::nat44::Nat44Shared;
use engine::nat64::Nat64Shared;
use engine::{Direction, Egress, Emit, ModeWorker};

use crate::packet::{fill_checksums, make_reply, Origin};

/// NAT44 for the sequences: two rules' worth of hosts share one address and 16 ports,
/// a port forward and a static mapping, at most 48 sessions.
const NAT44: &str = r#"
[nat44]
filtering = "address-dependent"
hairpinning = true
port_preservation = true
max_sessions = 48
[[nat44.rule]]
inside = "10.0.0.0/24"
pool = ["203.0.113.1/32"]
ports = "1024-1039"
[[nat44.forward]]
protocol = "tcp"
public = "203.0.113.1:8080"
inside = "10.0.0.20:80"
[[nat44.static]]
inside = "10.0.1.5"
public = "203.0.113.50"
"#;

/// NAT64 for the sequences: 16 ports of one address, one static binding, 48 sessions.
const NAT64: &str = r#"
[nat64]
pref64 = "2001:db8:64::/96"
pool4 = ["203.0.113.1/32"]
ports = "1024-1039"
max_sessions = 48
[[nat64.static]]
protocol = "tcp"
public = "203.0.113.1:8080"
inside = "[2001:db8:1::80]:80"
"#;

const POOL_PORTS: u16 = 16;

/// Which stateful mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stateful {
    /// NAT44.
    Nat44,
    /// NAT64.
    Nat64,
}

/// The tables of either mode, through their public faces.
enum Tables {
    Nat44(Arc<Nat44Shared>),
    Nat64(Arc<Nat64Shared>),
}

impl Tables {
    fn sessions(&self) -> (usize, usize) {
        match self {
            Tables::Nat44(s) => (s.session_count(), s.sessions().len()),
            Tables::Nat64(s) => (s.session_count(), s.sessions().len()),
        }
    }
}

/// A small reader over the fuzz input.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
}

fn v6(last: u16, net: u16) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..6].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, (net >> 8) as u8, net as u8]);
    a[14..].copy_from_slice(&last.to_be_bytes());
    a
}

/// An IPv4 server embedded in the sequences' Pref64.
fn pref64(a: [u8; 4]) -> [u8; 16] {
    let mut p = v6(0, 0x64);
    p[12..].copy_from_slice(&a);
    p
}

/// Builds a packet from four bytes: `a` protocol (TCP, UDP, ICMP echo, IPv4 UDP
/// fragment) and host, `b` ports and server, `c` TCP flags / sequence, `d` payload
/// length and fragment offset.
fn build(mode: Stateful, dir: Direction, [a, b, c, d]: [u8; 4]) -> Vec<u8> {
    let host = 1 + (a >> 2 & 7);
    let server = [198, 51, 100, 1 + (b >> 4 & 3)];
    let inside_port = 1024 + u16::from(b & 15);
    let (public_port, server_port) = match b >> 6 {
        0 => (1024 + u16::from(b & 15), 80),
        1 => (8080, 1000 + u16::from(b & 3)),
        2 => (inside_port, 53),
        _ => (2000, 80),
    };
    let proto = a & 3;
    let payload = usize::from(d & 31);
    let mut l4 = match proto {
        0 => {
            let mut t = vec![0u8; 20 + payload];
            t[4..8].copy_from_slice(&(u32::from(c) << 20).to_be_bytes());
            t[8..12].copy_from_slice(&(u32::from(d) << 12).to_be_bytes());
            t[12] = 0x50;
            // SYN, SYN+ACK, ACK, FIN+ACK, RST, RST+ACK, PSH+ACK, or any byte.
            t[13] = [0x02, 0x12, 0x10, 0x11, 0x04, 0x14, 0x18, c][usize::from(c >> 5)];
            t[14] = 0xff;
            t
        }
        2 => {
            let mut t = vec![0u8; 8 + payload];
            t[0] = if dir == Direction::Outbound { 8 } else { 0 };
            t[4..6].copy_from_slice(&u16::from(b).to_be_bytes());
            t
        }
        _ => {
            let mut t = vec![0u8; 8 + payload];
            t[4..6].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
            t
        }
    };
    let (sport, dport) = match dir {
        Direction::Outbound => (inside_port, server_port),
        Direction::Inbound => (server_port, public_port),
    };
    if proto != 2 {
        l4[0..2].copy_from_slice(&sport.to_be_bytes());
        l4[2..4].copy_from_slice(&dport.to_be_bytes());
    }
    let inside4 = [10, 0, if b >> 6 == 3 { 1 } else { 0 }, host];
    let public4 = if b >> 6 == 3 {
        [203, 0, 113, 50]
    } else {
        [203, 0, 113, 1]
    };
    let mut p = match (mode, dir) {
        (Stateful::Nat44, Direction::Outbound) => ipv4(inside4, server, proto, &l4, d),
        (_, Direction::Inbound) => ipv4(server, public4, proto, &l4, d),
        (Stateful::Nat64, Direction::Outbound) => {
            ipv6(v6(u16::from(host), 1), pref64(server), proto, &l4)
        }
    };
    fill_checksums(&mut p);
    p
}

fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, l4: &[u8], d: u8) -> Vec<u8> {
    let mut p = vec![0u8; 20];
    let len = (20 + l4.len()) as u16;
    p[0] = 0x45;
    p[2..4].copy_from_slice(&len.to_be_bytes());
    p[4] = d;
    p[8] = 64;
    p[9] = [6, 17, 1, 17][usize::from(proto)];
    if proto == 3 {
        // A fragment: the first (offset 0, MF) or a later one.
        let off = u16::from(d >> 5) * 8;
        p[6..8].copy_from_slice(&(0x2000 | (off / 8)).to_be_bytes());
    }
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    p.extend_from_slice(l4);
    p
}

fn ipv6(src: [u8; 16], dst: [u8; 16], proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 40];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&(l4.len() as u16).to_be_bytes());
    p[6] = [6, 17, 58, 17][usize::from(proto)];
    p[7] = 64;
    p[8..24].copy_from_slice(&src);
    p[24..40].copy_from_slice(&dst);
    let mut l4 = l4.to_vec();
    if proto == 2 {
        l4[0] = if l4[0] == 8 { 128 } else { 129 };
    }
    p.extend_from_slice(&l4);
    p
}

/// Runs the sequence `data` through `mode`.
pub fn check(mode: Stateful, data: &[u8]) {
    let text = match mode {
        Stateful::Nat44 => NAT44,
        Stateful::Nat64 => NAT64,
    };
    let cfg =
        crate::qconfig::load_str_on(text, "fuzz sequence", &crate::qconfig::Machine::default())
            .unwrap_or_else(|e| panic!("the sequence configuration does not load: {e}"));
    let egress = Egress::default();
    match &cfg.mode {
        ModeConfig::Nat44(c) => {
            let sh = Nat44Shared::new(c.clone(), 1).expect("sequence config");
            let worker = sh.worker(0);
            let reaper = sh.reaper();
            drive(
                mode,
                data,
                &Tables::Nat44(Arc::clone(&sh)),
                worker,
                Reap::Nat44(reaper),
                &egress,
                c.max_sessions,
            );
            assert_eq!(sh.fragment_count(), 0, "fragment records left behind");
        }
        ModeConfig::Nat64(c) => {
            let sh = Nat64Shared::new(c.clone(), 1).expect("sequence config");
            let worker = sh.worker(0);
            let reaper = sh.reaper();
            drive(
                mode,
                data,
                &Tables::Nat64(Arc::clone(&sh)),
                worker,
                Reap::Nat64(reaper),
                &egress,
                c.max_sessions,
            );
        }
        _ => unreachable!("the sequence configurations are NAT44 and NAT64"),
    }
}

enum Reap {
    Nat44(engine::nat44::Nat44Reaper),
    Nat64(engine::nat64::Nat64Reaper),
}

impl Reap {
    fn run(&mut self, now: Timestamp) {
        match self {
            Reap::Nat44(r) => r.handle_timeout(now),
            Reap::Nat64(r) => r.handle_timeout(now),
        }
    }
    /// Sessions the reaper removed: expired, or early-dropped (unconfirmed TCP sessions
    /// taken when the table is nearly full).
    fn removed(&self) -> u64 {
        let c = match self {
            Reap::Nat44(r) => r.counters(),
            Reap::Nat64(r) => r.counters(),
        };
        c.sessions_expired + c.sessions_early_dropped
    }
}

fn drive<W: ModeWorker>(
    mode: Stateful,
    data: &[u8],
    tables: &Tables,
    mut worker: W,
    mut reaper: Reap,
    egress: &Egress,
    cap: usize,
) {
    let mut input = Bytes(data);
    let mut now = Timestamp::from_secs(1);
    // The last packet forwarded, and which way it travelled.
    let mut last: Option<(Vec<u8>, Direction)> = None;
    let mut out = engine::Output::new();
    let mut steps = 0;
    while let (Some(dt), Some(op)) = (input.u8(), input.u8()) {
        steps += 1;
        if steps > 256 {
            break;
        }
        // Up to 4.6 hours a step, in a cubic scale: most steps are short.
        now = now + Duration::from_millis(u64::from(dt).pow(3));
        if op & 0x08 != 0 {
            reaper.run(now);
        }
        if op & 0x10 != 0 {
            while let Some(t) = worker.poll_timeout().filter(|t| *t <= now) {
                let n = worker.poll(t, egress, &mut out);
                for p in out.packets() {
                    let o = Origin {
                        input: p,
                        valid: true,
                        pref96: None,
                    };
                    crate::packet::check_emitted(p, o, "a held SYN's answer");
                }
                if n == 0 && worker.poll_timeout() == Some(t) {
                    break;
                }
            }
        }
        let dir = if op & 0x20 == 0 {
            Direction::Outbound
        } else {
            Direction::Inbound
        };
        let (pkt, dir, valid) = match op & 3 {
            0 | 1 => {
                let b = input.take(4);
                let mut k = [0u8; 4];
                k[..b.len()].copy_from_slice(b);
                let dir = if op & 1 == 0 {
                    Direction::Outbound
                } else {
                    Direction::Inbound
                };
                (build(mode, dir, k), dir, true)
            }
            2 => match &last {
                Some((p, d)) => {
                    let mut r = p.clone();
                    make_reply(&mut r);
                    let back = match d {
                        Direction::Outbound => Direction::Inbound,
                        Direction::Inbound => Direction::Outbound,
                    };
                    (r, back, true)
                }
                None => continue,
            },
            _ => {
                let n = usize::from(input.u8().unwrap_or(0));
                let mut p = input.take(n).to_vec();
                let valid = op & 0x40 != 0 && fill_checksums(&mut p);
                (p, dir, valid)
            }
        };
        let origin = Origin {
            input: &pkt,
            valid,
            pref96: Some(pref64([0; 4])[..12].try_into().expect("12 bytes")),
        };
        let (e, sent) = crate::modes::run(&mut worker, now, dir, &pkt, false, egress, origin);
        if let Emit::Forward { .. } = e {
            last = Some((sent[0].clone(), dir));
        }
        invariants(tables, &worker, &reaper, cap);
    }
    // Everything left to expire: a day later, reaper passes a grace period apart (the
    // worker passing quiescent points between them), past NAT64's host grace.
    // Then as long again, past the ports' reuse hold from the last release.
    for gap in [86_400, 30, 30, 30, 86_400, 30] {
        now = now + Duration::from_secs(gap);
        worker.quiescent();
        reaper.run(now);
    }
    invariants(tables, &worker, &reaper, cap);
    let (count, listed) = tables.sessions();
    assert_eq!(
        (count, listed),
        (0, 0),
        "sessions left after everything expired"
    );
    let (bindings, statics) = match tables {
        Tables::Nat44(s) => (s.binding_count(), s.config().port_forwards.len()),
        Tables::Nat64(s) => (s.binding_count(), 1),
    };
    assert_eq!(bindings, statics, "bindings left after everything expired");
    if let Reap::Nat44(r) = &reaper {
        assert_eq!(r.limbo_len(), 0, "slots never reclaimed");
    }
    if let Tables::Nat64(s) = tables {
        assert_eq!(
            s.host_count(),
            1,
            "NAT64 host ids left behind (1: the static binding's)"
        );
    }
    // No port leaked: one new flow per port of the pool, each from its own host, all go.
    for i in 0..POOL_PORTS {
        let mut l4 = vec![0u8; 8];
        l4[0..2].copy_from_slice(&(3000 + i).to_be_bytes());
        l4[2..4].copy_from_slice(&53u16.to_be_bytes());
        l4[5] = 8;
        let mut p = match mode {
            Stateful::Nat44 => ipv4([10, 0, 0, 100 + i as u8], [198, 51, 100, 9], 1, &l4, 0),
            Stateful::Nat64 => ipv6(v6(0x100 + i, 1), pref64([198, 51, 100, 9]), 1, &l4),
        };
        fill_checksums(&mut p);
        let origin = Origin {
            input: &p,
            valid: true,
            pref96: None,
        };
        let (e, _) = crate::modes::run(
            &mut worker,
            now,
            Direction::Outbound,
            &p,
            false,
            egress,
            origin,
        );
        assert!(
            e.is_forward(),
            "port {i} of {POOL_PORTS} of the pool not handed out again after everything expired: {e:?}"
        );
    }
}

fn invariants<W: ModeWorker>(tables: &Tables, worker: &W, reaper: &Reap, cap: usize) {
    let (count, listed) = tables.sessions();
    assert_eq!(count, listed, "sessions counted != sessions listed");
    assert!(count <= cap, "{count} sessions in a table of {cap}");
    let c = worker.counters();
    let removed = c.sessions_expired + c.sessions_early_dropped + reaper.removed();
    assert_eq!(
        c.sessions_created.checked_sub(removed),
        Some(count as u64),
        "sessions created {} - removed (expired or early-dropped) {removed} != live {count}",
        c.sessions_created
    );
}
