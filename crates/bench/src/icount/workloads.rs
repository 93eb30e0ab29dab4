//! The fixed workloads of `quicknat-bench --icount` and the one loop that is measured.
//!
//! Each workload is one mode's worker and a list of packets, built the same way in every
//! run: the same flows, the same order, the same clock, one thread, and (in the child
//! process that is measured) the keys fixed by
//! [`conntrack::siphash::predictable_keys_for_benchmarks`]. Established workloads replay
//! 1024 flows' packets of one direction over and over; session-create workloads send
//! each packet of [`NEW_FLOWS`] distinct new flows once.

use std::net::Ipv4Addr;
use std::sync::Arc;

use conntrack::Timestamp;
use engine::ila::{CsumMode, IdentFormat, IlaConfig, IlaMode, IlaRouter, UnmappedAction};
use engine::nat44::Nat44Shared;
use engine::nat64::{Nat64Config, Nat64Shared};
use engine::siit::{Siit, SiitConfig, SiitKind};
use engine::{Direction, Egress, Frame, Mode, ModeWorker, Output, HEADROOM};
use xlat::rfc6052::Pref64;

use crate::cells::syn_packets;
use crate::nat64::{build6, nat64_host, prepare_clat, prepare_nat64};
use crate::run::BATCH;
use crate::traffic::{build, config, inside_of, prepare, server_of, FrameMix, Prepared};

/// Established flows of the replay workloads.
pub const FLOWS: usize = 1024;
/// Distinct new flows of the session-create workloads (the most packets they can send).
pub const NEW_FLOWS: usize = 3 * FLOWS;
/// Rules of the NAT44 workloads (as `quicknat-bench`'s main tables use).
const RULES: usize = 1000;
/// The key seed of the measured process.
pub const KEY_SEED: u64 = 0x1C0_0A7;

/// One workload: what it measures, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Its name (the baseline's key; `quicknat-bench --icount-child NAME:N`).
    pub name: &'static str,
    /// What one packet of it is.
    pub what: &'static str,
}

/// Every workload, in report order.
pub const WORKLOADS: [Workload; 12] = [
    Workload {
        name: "nat44-out",
        what: "NAT44 established, outbound (TCP ACK / UDP, 64 B)",
    },
    Workload {
        name: "nat44-in",
        what: "NAT44 established, inbound",
    },
    Workload {
        name: "nat44-new",
        what: "NAT44 first packet: TCP SYN, session + binding created",
    },
    Workload {
        name: "nat64-out",
        what: "NAT64 established, IPv6 -> IPv4 (UDP, 64 B)",
    },
    Workload {
        name: "nat64-in",
        what: "NAT64 established, IPv4 -> IPv6",
    },
    Workload {
        name: "nat64-new",
        what: "NAT64 first packet: UDP, session + binding created",
    },
    Workload {
        name: "siit-4to6",
        what: "SIIT (RFC 7915, Pref64 only), IPv4 -> IPv6 (UDP, 64 B)",
    },
    Workload {
        name: "siit-6to4",
        what: "SIIT, IPv6 -> IPv4",
    },
    Workload {
        name: "clat-out",
        what: "CLAT (464XLAT), host IPv4 -> IPv6 (UDP, 64 B)",
    },
    Workload {
        name: "clat-in",
        what: "CLAT, IPv6 -> host IPv4",
    },
    Workload {
        name: "ila-out",
        what: "ILA SIR -> ILA, 1024 mappings (UDP, 64 B)",
    },
    Workload {
        name: "ila-in",
        what: "ILA ILA -> SIR",
    },
];

/// The workload called `name`.
pub fn workload(name: &str) -> Option<Workload> {
    WORKLOADS.into_iter().find(|w| w.name == name)
}

/// Packets the two measured runs of `w` send: the figure is the difference of their
/// instruction counts over the difference of these, so set-up and the loop's entry cancel.
/// Whole passes over the established flows, a multiple of the batch size.
pub fn packet_counts(w: Workload) -> (usize, usize) {
    match w.name {
        "nat44-new" | "nat64-new" => (NEW_FLOWS / 3, NEW_FLOWS),
        _ => (FLOWS, 3 * FLOWS),
    }
}

/// A mode's worker and its packets.
struct Replay<M: Mode> {
    shared: M,
    bytes: Vec<u8>,
    /// Offset, length and direction of each packet, in replay order.
    pkts: Vec<(usize, usize, Direction)>,
    now: Timestamp,
    /// Each packet once (new flows): at most `pkts.len()` packets may be sent.
    once: bool,
}

impl<M: Mode> Replay<M> {
    /// The packets of `prep` travelling `dir`, replayed just after its warm-up.
    fn established(prep: Prepared<M>, dir: Direction) -> Self {
        let pkts = prep
            .packets
            .iter()
            .filter(|p| p.dir == dir)
            .map(|p| (p.off as usize, usize::from(p.len), dir))
            .collect();
        Replay {
            shared: prep.shared,
            bytes: prep.bytes,
            pkts,
            now: Timestamp::from_nanos(prep.warm_at + 1_000),
            once: false,
        }
    }

    /// Packets in `list`, each travelling the way the mode classifies it.
    fn from_list(shared: M, list: &[Vec<u8>], once: bool) -> Self {
        let mut bytes = Vec::new();
        let mut pkts = Vec::with_capacity(list.len());
        for p in list {
            pkts.push((bytes.len(), p.len(), shared.classify(p)));
            bytes.extend_from_slice(p);
        }
        Replay {
            shared,
            bytes,
            pkts,
            now: Timestamp::from_secs(1000),
            once,
        }
    }

    /// Sends `n` packets through worker 0; returns how many were forwarded.
    fn run(&self, n: usize) -> Result<u64, String> {
        if self.pkts.is_empty() || (self.once && n > self.pkts.len()) {
            return Err(format!(
                "{n} packets asked of a workload of {} (each sent once: {})",
                self.pkts.len(),
                self.once
            ));
        }
        let mut w = self.shared.worker(0);
        let head = if self.shared.in_place() { 0 } else { HEADROOM };
        let mut buf = vec![0u8; 2048];
        let mut out = Output::new();
        let egress = Egress::default();
        let fwd = icount_measured_loop(&mut w, self, n, head, &mut buf, &mut out, &egress);
        w.offline();
        Ok(fwd)
    }
}

/// The measured loop (callgrind collects inside this function only:
/// `--toggle-collect=*icount_measured_loop*`). Per packet: the packet is delivered into
/// the receive buffer (a copy of its bytes, as a NIC would write it) and handed to the
/// worker as the runtime hands it; per batch of [`BATCH`], `begin_batch` and `quiescent`
/// as the runtime's worker calls them. Returns the packets forwarded.
#[inline(never)]
fn icount_measured_loop<M: Mode>(
    w: &mut M::Worker,
    r: &Replay<M>,
    n: usize,
    head: usize,
    buf: &mut [u8],
    out: &mut Output,
    egress: &Egress,
) -> u64 {
    let mut fwd = 0u64;
    let mut at = 0usize;
    for i in 0..n {
        if i % BATCH == 0 {
            w.begin_batch();
        }
        let (off, len, dir) = r.pkts[at];
        buf[head..head + len].copy_from_slice(&r.bytes[off..off + len]);
        let mut f = Frame::new(buf, head, len, out);
        if w.process(r.now, dir, &mut f, egress).is_forward() {
            fwd += 1;
        }
        if i % BATCH == BATCH - 1 {
            w.quiescent();
        }
        at += 1;
        if at == r.pkts.len() {
            at = 0;
        }
    }
    fwd
}

/// The Pref64 of the NAT64, SIIT and CLAT workloads (network-specific, so documentation
/// IPv4 addresses may be embedded).
fn pref64() -> Pref64 {
    "2001:db8:64::/96".parse().expect("literal prefix")
}

/// Builds workload `w` and sends `n` packets through it; returns how many were forwarded.
pub fn run(w: Workload, n: usize) -> Result<u64, String> {
    let (out, inb) = (Direction::Outbound, Direction::Inbound);
    match w.name {
        "nat44-out" | "nat44-in" => {
            let prep = prepare(FLOWS, FrameMix::Fixed(64), RULES, 1);
            let dir = if w.name == "nat44-out" { out } else { inb };
            Replay::established(prep, dir).run(n)
        }
        "nat44-new" => {
            let shared =
                Nat44Shared::new(config(RULES, 2 * NEW_FLOWS), 1).map_err(|e| e.to_string())?;
            let syns = syn_packets(NEW_FLOWS, u32::from(Ipv4Addr::new(10, 64, 0, 1)));
            Replay::from_list(shared, &syns, true).run(n)
        }
        "nat64-out" | "nat64-in" => {
            let prep = prepare_nat64(FLOWS, 1);
            let dir = if w.name == "nat64-out" { out } else { inb };
            Replay::established(prep, dir).run(n)
        }
        "nat64-new" => Replay::from_list(nat64_new()?, &nat64_firsts(), true).run(n),
        "siit-4to6" | "siit-6to4" => {
            let (v4, v6) = siit_packets();
            let list = if w.name == "siit-4to6" { v4 } else { v6 };
            Replay::from_list(siit()?, &list, false).run(n)
        }
        "clat-out" | "clat-in" => {
            let dir = if w.name == "clat-out" { out } else { inb };
            Replay::established(prepare_clat(FLOWS), dir).run(n)
        }
        "ila-out" | "ila-in" => {
            let (mode, sir, ila) = ila()?;
            let list = if w.name == "ila-out" { sir } else { ila };
            let mut r = Replay::from_list(mode, &list, false);
            let dir = if w.name == "ila-out" { out } else { inb };
            r.pkts.iter_mut().for_each(|p| p.2 = dir);
            r.run(n)
        }
        other => Err(format!("no workload {other:?}")),
    }
}

fn nat64_new() -> Result<Arc<Nat64Shared>, String> {
    let cfg = Nat64Config {
        pref64: pref64(),
        pool4: vec!["203.0.113.0/24".parse().expect("literal prefix")],
        max_sessions: 2 * NEW_FLOWS,
        ..Nat64Config::default()
    };
    Nat64Shared::new(cfg, 1).map_err(|e| e.to_string())
}

/// The first IPv6/UDP packet (64-byte frame) of each of [`NEW_FLOWS`] flows.
fn nat64_firsts() -> Vec<Vec<u8>> {
    let pref = pref64();
    (0..NEW_FLOWS)
        .map(|i| {
            let (inside, server) = (inside_of(i), server_of(i));
            let mut p = Vec::with_capacity(50);
            build6(
                &mut p,
                (nat64_host(inside.0), inside.1),
                (pref.embed(server.0), server.1),
                50,
            );
            p
        })
        .collect()
}

/// A stateless translator with the Pref64 alone.
fn siit() -> Result<Siit, String> {
    let cfg = SiitConfig {
        pref64: Some(pref64()),
        ..SiitConfig::default()
    };
    Siit::new(cfg, SiitKind::Siit).map_err(|e| e.to_string())
}

/// [`FLOWS`] UDP flows between 198.51.100.0/24 and 192.0.2.0/24: each as an IPv4 packet
/// (46 bytes) and as the IPv6 packet of the other way (50 bytes), both in 64-byte frames.
fn siit_packets() -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let pref = pref64();
    (0..FLOWS as u32)
        .map(|i| {
            let a = (Ipv4Addr::from(0xC633_6400 | (i & 0xff)), 443);
            let b = (Ipv4Addr::from(0xC000_0200 | (i >> 8)), 40000 + i as u16);
            let mut v4 = Vec::with_capacity(46);
            build(&mut v4, false, a, b, 46);
            let mut v6 = Vec::with_capacity(50);
            build6(&mut v6, (pref.embed(b.0), b.1), (pref.embed(a.0), a.1), 50);
            (v4, v6)
        })
        .unzip()
}

/// The SIR prefix of the ILA workloads.
const SIR: u64 = 0x3333_0000_0000_0001;

/// An ILA router with [`FLOWS`] mappings, and for each an IPv6/UDP packet (64-byte frame)
/// from a host to its SIR address and one from the ILA network to its ILA address.
#[allow(clippy::type_complexity)]
fn ila() -> Result<(IlaMode, Vec<Vec<u8>>, Vec<Vec<u8>>), String> {
    let router = IlaRouter::new(
        IlaConfig {
            sir_prefix: SIR,
            csum: CsumMode::AdjustTransport,
            format: IdentFormat::Luid,
            unmapped: UnmappedAction::Drop,
        },
        FLOWS + 16,
    )
    .map_err(|e| e.to_string())?;
    let mut rng = crate::traffic::Rng(0x11A);
    let mut sir = Vec::with_capacity(FLOWS);
    let mut ila = Vec::with_capacity(FLOWS);
    for i in 0..FLOWS {
        let id = rng.next_u64() & 0x1FFF_FFFF_FFFF_FFFF | 1;
        let locator = 0x2001_0000_0087_0000 | i as u64;
        router
            .table()
            .insert(id, locator)
            .map_err(|e| format!("{e:?}"))?;
        let host = (0x2001_0db8_0000_0001u128 << 64) | (i as u128 + 1);
        for (upper, list) in [(SIR, &mut sir), (locator, &mut ila)] {
            let dst = (u128::from(upper) << 64) | u128::from(id);
            let mut p = Vec::with_capacity(50);
            build6(&mut p, (host.into(), 40000), (dst.into(), 443), 50);
            list.push(p);
        }
    }
    let mode = IlaMode {
        router,
        qsbr: conntrack::Qsbr::new(1),
    };
    Ok((mode, sir, ila))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every workload forwards every packet of its longer run (so the figure measures the
    /// translation, never a drop path), natively and with the keys as random as in
    /// production.
    #[test]
    fn every_workload_forwards_every_packet() {
        for w in WORKLOADS {
            let (n1, n2) = packet_counts(w);
            assert!(n1 < n2 && (n2 - n1) % BATCH == 0, "{w:?}");
            assert_eq!(run(w, n2), Ok(n2 as u64), "{}", w.name);
        }
    }

    /// A new-flow workload cannot send more packets than it has flows.
    #[test]
    fn new_flow_workloads_refuse_more_packets_than_flows() {
        let w = workload("nat44-new").expect("listed");
        assert!(run(w, NEW_FLOWS + 1).is_err());
        assert!(workload("nat45-out").is_none());
    }
}
