//! Every mode's translation of one packet, driven as the capture replay drives it
//! (`runtime::offline`: [`AnyMode`] built from a configuration file, one worker, a
//! [`Frame`] with headroom, the `[gateway]` links as [`Egress`]). Each packet the gateway
//! would send is checked ([`crate::packet::check_emitted`]); where the mode is
//! reversible the translation is run back and must give the original modulo the fields
//! the RFCs change:
//!
//! - SIIT and CLAT (RFC 7915): IPv4 out, its reply back in, equals the original but for
//!   TTL, checksums, Identification and DF (RFC 7915 §5.1 sets them afresh);
//! - NAT44: outbound, then the reply inbound, gives back the inside endpoints (TTL and
//!   checksums aside);
//! - NAT64: likewise, IPv6 in and out (Hop Limit, Flow Label, checksums aside);
//! - ILA: SIR -> ILA -> SIR gives the same bytes but for the Hop Limit.

use std::sync::OnceLock;

use conntrack::Timestamp;
use engine::any::{AnyMode, ModeConfig, ModeVisitor};
use engine::{Direction, Egress, Emit, Frame, Mode, ModeWorker, Output, HEADROOM};

use crate::packet::{check_emitted, fill_checksums, hex, ip_bytes, l4, make_reply, Origin};

/// The modes a translation target drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// NAT44 (NAPT).
    Nat44,
    /// Stateful NAT64.
    Nat64,
    /// SIIT.
    Siit,
    /// CLAT.
    Clat,
    /// ILA.
    Ila,
}

/// One configuration a target translates with.
pub struct Setup {
    /// The mode.
    pub mode: ModeConfig,
    /// The gateway's links.
    pub egress: Egress,
    /// The Pref64 (as a /96) whose embedded IPv4 addresses are checked like IPv4 ones.
    pub pref96: Option<[u8; 12]>,
}

/// Small tables: the fuzzers build a mode per input.
const MAX_SESSIONS: usize = 64;

fn from_toml(text: &str) -> Setup {
    let cfg = crate::qconfig::load_str_on(text, "fuzz setup", &crate::qconfig::Machine::default())
        .unwrap_or_else(|e| panic!("a shipped configuration does not load: {e}"));
    let mut mode = cfg.mode;
    let egress = cfg
        .gateway
        .as_ref()
        .map(runtime::live::GatewayConfig::egress)
        .unwrap_or_default();
    // As the capture replay does (runtime::live::clamp_translator_mtus): the translator's
    // MTUs no higher than the links' (1500 where not given).
    let mtu = |side: usize| egress.links[side].mtu.unwrap_or(1500);
    match &mode {
        ModeConfig::Siit(_) | ModeConfig::Clat(_) => {
            mode.clamp_mtus(mtu(0), mtu(1));
        }
        ModeConfig::Nat64(_) => {
            mode.clamp_mtus(mtu(1), mtu(0));
        }
        _ => {}
    }
    let pref96 = match &mode {
        ModeConfig::Nat64(c) => Some(c.pref64),
        ModeConfig::Siit(c) | ModeConfig::Clat(c) => c.pref64,
        _ => None,
    }
    .filter(|p| p.len() == 96)
    .map(|p| {
        let mut b = [0u8; 12];
        b.copy_from_slice(&p.prefix().octets()[..12]);
        b
    });
    match &mut mode {
        ModeConfig::Nat44(c) => c.max_sessions = MAX_SESSIONS,
        ModeConfig::Nat64(c) => c.max_sessions = MAX_SESSIONS,
        _ => {}
    }
    Setup {
        mode,
        egress,
        pref96,
    }
}

macro_rules! shipped {
    ($($path:literal),* $(,)?) => {
        &[$(include_str!(concat!("../../", $path))),*]
    };
}

/// The configuration files shipped with the repository, per mode.
fn texts(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Nat44 => shipped!(
            "examples/nat44.toml",
            "tests/golden/nat44.toml",
            "tests/golden/nat44_gateway.toml",
        ),
        Kind::Nat64 => shipped!(
            "examples/nat64.toml",
            "tests/golden/nat64_gateway.toml",
            "tests/golden/nat64_mtu.toml",
        ),
        Kind::Siit => shipped!(
            "examples/siit.toml",
            "tests/golden/siit_errors.toml",
            "tests/golden/siit_gateway.toml",
            "tests/golden/siit_hairpin_simple.toml",
            "tests/golden/siit_mtu.toml",
        ),
        Kind::Clat => shipped!("examples/clat.toml"),
        Kind::Ila => &[ILA_ADJUST, ILA_NEUTRAL, ILA_NO_ACTION],
    }
}

const ILA_ADJUST: &str = r#"
[ila]
sir_prefix = "2001:db8:5::/64"
csum_mode = "adjust-transport"
ident_type = "luid"
unmapped = "drop"
mapping = [
  { identifier = "0:0:0:1", locator = "2001:db8:aaaa:1" },
  { identifier = "0:0:0:2", locator = "2001:db8:aaaa:2" },
]
"#;
const ILA_NEUTRAL: &str = r#"
[ila]
sir_prefix = "2001:db8:5::/64"
csum_mode = "neutral-map"
ident_type = "use-format"
unmapped = "forward"
mapping = [
  { identifier = "2000:0:0:1", locator = "2001:db8:aaaa:1" },
  { identifier = "0:0:0:2", locator = "2001:db8:aaaa:2" },
]
"#;
const ILA_NO_ACTION: &str = r#"
[ila]
sir_prefix = "2001:db8:5::/64"
csum_mode = "no-action"
ident_type = "luid"
mapping = [ { identifier = "0:0:0:1", locator = "2001:db8:aaaa:1" } ]
"#;

/// The setups of `kind`, loaded once per process.
pub fn setups(kind: Kind) -> &'static [Setup] {
    static CELLS: [OnceLock<Vec<Setup>>; 5] = [const { OnceLock::new() }; 5];
    CELLS[kind as usize].get_or_init(|| texts(kind).iter().map(|t| from_toml(t)).collect())
}

/// The fuzz input of a translation target: a control byte — which setup (low 3 bits),
/// checksums left as they are (0x10) instead of filled, travelling inbound (0x20),
/// arrived in a link broadcast (0x40) — then the IP packet.
pub fn check(kind: Kind, data: &[u8]) {
    let Some((&ctl, pkt)) = data.split_first() else {
        return;
    };
    let all = setups(kind);
    let setup = &all[usize::from(ctl & 7) % all.len()];
    let mut input = pkt.to_vec();
    let valid = ctl & 0x10 == 0 && fill_checksums(&mut input);
    let dir = if ctl & 0x20 == 0 {
        Direction::Outbound
    } else {
        Direction::Inbound
    };
    let mode = AnyMode::new(&setup.mode, 1)
        .unwrap_or_else(|e| panic!("a shipped configuration is refused: {e}"));
    mode.visit(One {
        kind,
        setup,
        input: &input,
        valid,
        dir,
        group: ctl & 0x40 != 0,
    });
}

struct One<'a> {
    kind: Kind,
    setup: &'a Setup,
    input: &'a [u8],
    valid: bool,
    dir: Direction,
    group: bool,
}

impl One<'_> {
    /// An ILA packet travelling inbound to a neutral-map router, its identifier's C bit
    /// clear (the sender did not map it checksum-neutrally).
    fn ila_no_c_bit(&self) -> bool {
        self.dir == Direction::Inbound
            && matches!(&self.setup.mode, ModeConfig::Ila(s)
                if s.config.csum == engine::ila::CsumMode::NeutralMap)
            && self.input.get(32).is_some_and(|b| b & 0x10 == 0)
    }
}

/// `input` (inbound to an ILA router) with its transport checksum filled as a sender
/// whose side did no checksum-neutral mapping fills it: over the SIR address the router
/// translates the destination to. A dry run of `mode` says which address that is; a
/// packet the router does not translate (unmapped, not ILA) keeps its checksum as given.
fn sender_checksum_over_sir<M: Mode>(mode: &M, input: &[u8], egress: &Egress) -> Vec<u8> {
    let mut worker = mode.worker(0);
    let mut buf = vec![0u8; HEADROOM + input.len() + 64];
    buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(input);
    let mut out = Output::new();
    let mut frame = Frame::new(&mut buf, HEADROOM, input.len(), &mut out);
    let e = worker.process(NOW, Direction::Inbound, &mut frame, egress);
    worker.quiescent();
    let mut p = input.to_vec();
    let Emit::Forward { start, len } = e else {
        return p;
    };
    let Some(sir) = buf.get(start..start + len).and_then(|o| o.get(24..40)) else {
        return p;
    };
    if p.get(24..40) == Some(sir) || p.len() < 40 {
        return p;
    }
    let ila: [u8; 16] = p[24..40].try_into().unwrap_or([0; 16]);
    p[24..40].copy_from_slice(sir);
    fill_checksums(&mut p);
    p[24..40].copy_from_slice(&ila);
    p
}

/// The time the single-packet targets run at.
const NOW: Timestamp = Timestamp::from_secs(1_000);

/// Runs `pkt` through `worker` travelling `dir`; checks and returns every packet sent
/// (with whether it is the packet itself, forwarded on).
pub fn run<W: ModeWorker>(
    worker: &mut W,
    now: Timestamp,
    dir: Direction,
    pkt: &[u8],
    group: bool,
    egress: &Egress,
    origin: Origin<'_>,
) -> (Emit, Vec<Vec<u8>>) {
    let mut buf = vec![0u8; HEADROOM + pkt.len() + 64];
    buf[HEADROOM..HEADROOM + pkt.len()].copy_from_slice(pkt);
    let mut out = Output::new();
    let mut frame = Frame::new(&mut buf, HEADROOM, pkt.len(), &mut out);
    frame.link_group = group;
    let e = worker.process(now, dir, &mut frame, egress);
    worker.quiescent();
    let sent: Vec<Vec<u8>> = match e {
        Emit::Forward { start, len } | Emit::Hairpin { start, len } => {
            let p = buf
                .get(start..start.saturating_add(len))
                .unwrap_or_else(|| panic!("{e:?} outside the {}-byte buffer", buf.len()));
            vec![p.to_vec()]
        }
        Emit::Reply(_) | Emit::Fragments => {
            assert!(!out.is_empty(), "{e:?} with nothing in the output");
            out.packets().map(<[u8]>::to_vec).collect()
        }
        Emit::Drop(_) => Vec::new(),
    };
    if let Emit::Reply(_) = e {
        assert_eq!(sent.len(), 1, "a reply is one ICMP error");
    }
    for p in &sent {
        check_emitted(p, origin, &format!("{e:?} of a packet travelling {dir:?}"));
    }
    (e, sent)
}

impl ModeVisitor for One<'_> {
    type Output = ();

    fn visit<M: Mode>(self, mode: &M) {
        let mut worker = mode.worker(0);
        let egress = &self.setup.egress;
        // ILA's no-action mode leaves the transport checksum as it was, by design.
        let ila_no_action = matches!(&self.setup.mode, ModeConfig::Ila(s)
            if s.config.csum == engine::ila::CsumMode::NoAction);
        // ILA -> SIR in neutral-map mode with the C bit clear (draft-herbert-intarea-ila,
        // checksum-neutral mapping; Linux `ila_update_ipv6_locator`: "ILA to SIR
        // translation and C-bit isn't set so we're good"): the C bit says whether the
        // sending side made the address checksum-neutral. Clear, it did not: the sender's
        // transport checksum covers the SIR address (no-action mode: wrong in transit,
        // right again once translated back), so the translation back leaves it alone. The
        // fuzzer's input gets its checksum filled as such a sender fills it, over the SIR
        // address it is translated to (found by a dry run of the same mode), and then the
        // output is held to valid checksums like every other packet: no exemption.
        let refilled;
        let input = match self.valid {
            true if self.ila_no_c_bit() => {
                refilled = sender_checksum_over_sir(mode, self.input, egress);
                &refilled[..]
            }
            _ => self.input,
        };
        let ila_no_c_bit = self.ila_no_c_bit();
        let origin = Origin {
            input,
            valid: self.valid && !ila_no_action,
            pref96: self.setup.pref96,
        };
        let (e, sent) = run(
            &mut worker,
            NOW,
            self.dir,
            input,
            self.group,
            egress,
            origin,
        );
        let Emit::Forward { .. } = e else { return };
        if ila_no_c_bit {
            ila_only_locator_changed(input, &sent[0]);
        }
        if !self.valid || self.dir != Direction::Outbound || !reversible(self.input) {
            return;
        }
        // ILA passes a packet not to the SIR prefix on untouched: nothing to undo.
        if let ModeConfig::Ila(s) = &self.setup.mode {
            if self.input.get(24..32) != Some(&s.config.sir_prefix.to_be_bytes()[..]) {
                return;
            }
        }
        let out = &sent[0];
        let back = match self.kind {
            // ILA translates the destination alone: the translated packet goes back as it is.
            Kind::Ila => out.clone(),
            _ => {
                let mut r = out.clone();
                make_reply(&mut r);
                r
            }
        };
        let origin = Origin {
            input: &back,
            ..origin
        };
        let (e2, sent2) = run(
            &mut worker,
            NOW,
            Direction::Inbound,
            &back,
            false,
            egress,
            origin,
        );
        let Emit::Forward { .. } = e2 else { return };
        let mut again = sent2[0].clone();
        if self.kind != Kind::Ila {
            make_reply(&mut again);
        }
        assert_eq!(
            normalize(&again),
            normalize(self.input),
            "{:?}: translated back ({e2:?}) differs from the original\n  in:   {}\n  out:  {}\n  back: {}",
            self.kind,
            hex(self.input),
            hex(out),
            hex(&again),
        );
    }
}

/// Whether a packet's translation can be undone: TCP, UDP or an ICMP echo, unfragmented,
/// without IPv4 options or IPv6 extension headers, with a complete transport header.
fn reversible(pkt: &[u8]) -> bool {
    let pkt = ip_bytes(pkt);
    let Some((off, proto)) = l4(pkt) else {
        return false;
    };
    let ihl_ok = pkt[0] >> 4 == 6 || pkt[0] & 0x0f == 5;
    let seg = &pkt[off..];
    let whole = match proto {
        6 => seg.len() >= 20 && usize::from(seg[12] >> 4) * 4 >= 20,
        17 => seg.len() >= 8 && usize::from(u16::from_be_bytes([seg[4], seg[5]])) == seg.len(),
        // Echo requests: an outbound echo reply answers an inbound request, its "reply"
        // would be a new request, not the same flow.
        1 => seg.len() >= 8 && seg[0] == 8 && seg[1] == 0,
        58 => seg.len() >= 8 && seg[0] == 128 && seg[1] == 0,
        _ => false,
    };
    ihl_ok && whole
}

/// A packet with the fields translation may change zeroed: TTL / Hop Limit, the IPv4
/// header checksum, Identification and DF, the IPv6 Flow Label, the transport checksum.
fn normalize(pkt: &[u8]) -> Vec<u8> {
    let mut p = ip_bytes(pkt).to_vec();
    let Some((off, proto)) = l4(&p) else {
        return p;
    };
    if p[0] >> 4 == 4 {
        p[8] = 0;
        p[10] = 0;
        p[11] = 0;
        p[4] = 0;
        p[5] = 0;
        // RFC 7915 §5.1 sets the flags afresh: DF, and the reserved bit cleared.
        p[6] &= !0xc0;
    } else {
        p[7] = 0;
        p[1] &= 0xf0;
        p[2] = 0;
        p[3] = 0;
    }
    let c = match proto {
        6 => off + 16,
        17 => off + 6,
        _ => off + 2,
    };
    if let Some(b) = p.get_mut(c..c + 2) {
        b.fill(0);
    }
    p
}

/// ILA forwards `input` as `out`: the same bytes but the Hop Limit (decremented) and the
/// destination's upper 64 bits (the locator); transport header and checksum untouched.
fn ila_only_locator_changed(input: &[u8], out: &[u8]) {
    assert_eq!(out.len(), input.len(), "ILA keeps the packet's length");
    let same = |r: std::ops::Range<usize>| {
        assert_eq!(
            out.get(r.clone()),
            input.get(r.clone()),
            "bytes {r:?} changed"
        );
    };
    same(0..7);
    same(8..24);
    same(32..input.len());
    assert_eq!(out[7], input[7].saturating_sub(1), "hop limit");
}
