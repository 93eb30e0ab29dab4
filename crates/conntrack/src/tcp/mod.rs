//! TCP session state as the NAT sees it: the handshake, the close and the sequence
//! window of each direction, so that half-open sessions expire fast, established ones
//! live long (RFC 5382 §5, RFC 6146 §3.5.2, RFC 7857 §2.2) and an off-path RST cannot
//! kill a connection.
//!
//! # States (after Linux's `nf_conntrack_proto_tcp`)
//!
//! | state         | entered by                                              | timeout           |
//! |---------------|---------------------------------------------------------|-------------------|
//! | `SynSent`     | a SYN (no ACK); also a reused closed port pair          | `tcp_syn_sent`    |
//! | `PickedUp`    | a non-SYN segment with no session (mid-stream pick-up)   | `tcp_syn_sent`    |
//! | `SynRecv`     | the SYN-ACK from the other side (or both SYNs crossing) | `tcp_syn_recv`    |
//! | `Established` | the SYN sender's ACK of the SYN-ACK; or, for a picked-up | `tcp_established` |
//! |               | session, a non-SYN segment from the other side (loose)  |                   |
//! | `FinWait`     | a FIN from one side: half-closed, still established     | `tcp_established` |
//! | `TimeWait`    | FINs from both sides                                    | `tcp_transitory`  |
//! | `Close`       | an in-window RST                                        | `tcp_closed`      |
//!
//! A session that reached `Established` is *confirmed* (conntrack's ASSURED) until a new
//! SYN reuses its port pair. An unconfirmed session never gets the established (nor the
//! 4-minute closed) timeout — one reset before its handshake completed keeps
//! `tcp_syn_recv` — and is what the table reclaims first when it fills (early drop). A spoofed SYN at a port forward
//! answered by the inside server's SYN-ACK stays in `SynRecv`: the spoofer never sees the
//! SYN-ACK, so never sends the ACK that acknowledges it.
//!
//! The loose pick-up (like `nf_conntrack_tcp_loose = 1`) keeps connections alive across a
//! gateway restart: both sides exchanging non-SYN segments proves a two-way path, which a
//! spoofer at a port forward cannot produce (the inside server answers an unexpected ACK
//! with a RST, not an ACK).
//!
//! # Sequence window ([`SeqDir`])
//!
//! Per direction the tracker keeps, as conntrack does, the highest sequence end sent
//! (`end` = seq + payload + SYN + FIN, advancing modulo 2^32) and the largest window that
//! direction advertised (`maxwin`, scaled). A RST from side S is accepted when its sequence
//! number lies in `[S.end - R.maxwin, S.end + R.maxwin]` (R = the receiver): conntrack's
//! bounds `seq >= S.end - R.maxwin` and `seq <= R.maxend`, with `R.maxend` approximated by
//! `S.end + R.maxwin` (R can only acknowledge what S sent). A RST from a side that has sent
//! nothing yet (the answer to a SYN) must acknowledge exactly what the other side sent
//! (RFC 9293 §3.10.7.3: in SYN-SENT a RST is acceptable if its ACK acknowledges the SYN).
//! Anything else is out of window: dropped by the caller, state unchanged.
//!
//! Window scaling (RFC 7323): the shift each side announced in its SYN is kept (5 bits a
//! side); it applies when both SYNs carried the option, none applies when a SYN came
//! without it, and for a picked-up session (no SYN seen) the conservative maximum, 14, is
//! assumed. No RFC 5961 challenge ACK is sent: an in-window RST that is not exactly at
//! `S.end` is forwarded, and the endpoint (which implements RFC 5961 itself) decides.

use crate::session::Record;

/// TCP flag bits as they appear in byte 13 of the header.
pub mod flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// ACK.
    pub const ACK: u8 = 0x10;
}
use flags::{ACK, FIN, RST, SYN};

/// The handshake/close state of a session (see the module table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ConnState {
    /// No segment observed yet (a session installed, its first packet not yet seen).
    None = 0,
    /// A SYN was seen, no SYN-ACK yet.
    SynSent = 1,
    /// The SYN-ACK was seen, not the ACK that completes the handshake.
    SynRecv = 2,
    /// The handshake completed (or a picked-up session saw both sides).
    Established = 3,
    /// One side sent a FIN.
    FinWait = 4,
    /// Both sides sent a FIN.
    TimeWait = 5,
    /// An in-window RST was seen.
    Close = 6,
    /// Created by a non-SYN segment; only that side has spoken.
    PickedUp = 7,
}

impl ConnState {
    #[inline]
    fn from_bits(b: u32) -> Self {
        match b & 7 {
            1 => ConnState::SynSent,
            2 => ConnState::SynRecv,
            3 => ConnState::Established,
            4 => ConnState::FinWait,
            5 => ConnState::TimeWait,
            6 => ConnState::Close,
            7 => ConnState::PickedUp,
            _ => ConnState::None,
        }
    }
}

/// Which idle timeout applies in a state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpPhase {
    /// SYN sent (or picked up mid-stream), nothing back: `tcp_syn_sent`.
    SynSent,
    /// SYN-ACK seen, handshake not complete: `tcp_syn_recv`.
    SynRecv,
    /// Handshake complete, at most one FIN: `tcp_established`.
    Established,
    /// FIN seen from both sides: `tcp_transitory` (TIME_WAIT).
    Closing,
    /// An in-window RST was seen: `tcp_closed` (RFC 7857 §2.2).
    Closed,
}

// Packed layout (17 bits used): state 0..3, opener 3, FIN per side 4..6,
// window-scale code per side 6..11 and 11..16 (0: no SYN seen, 1: SYN without the
// option, 2 + shift: SYN with the option), confirmed 16 (reached `Established` once,
// conntrack's ASSURED).
const STATE_MASK: u32 = 7;
const OPENER_REPLY: u32 = 1 << 3;
const FIN_ORIG: u32 = 1 << 4;
const FIN_REPLY: u32 = 1 << 5;
const WS_SHIFT: [u32; 2] = [6, 11];
const WS_MASK: u32 = 0x1f;
const CONFIRMED: u32 = 1 << 16;
/// Bits of the packed form.
pub const BITS: u32 = 17;

/// RFC 7323 §2.3: "If a Window Scale option is received with a shift.cnt value larger
/// than 14, the TCP SHOULD log the error but MUST use 14 instead of the specified value."
const MAX_WSCALE: u8 = 14;

/// How far (in sequence space) the ACK that completes a handshake may acknowledge beyond
/// the SYN-ACK: data the server sent with or right after it (TCP Fast Open).
const HANDSHAKE_ACK_SLACK: u32 = 65535;

/// The TCP state of one session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpState {
    bits: u32,
}

/// The fields of a TCP segment the tracker looks at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    /// Flags (byte 13).
    pub flags: u8,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number (meaningful with ACK).
    pub ack: u32,
    /// Window field as sent (unscaled).
    pub window: u16,
    /// Payload bytes.
    pub len: u32,
    /// Window-scale shift from the options of a SYN (`None`: absent, or not a SYN).
    pub wscale: Option<u8>,
}

impl Segment {
    /// Reads a segment from its header bytes `hdr` (at least 20; options are read from
    /// what `hdr` holds, only for a SYN) and the transport length `l4_len` (header plus
    /// payload). `None` when `hdr` is shorter than 20 bytes. Never panics. Always
    /// inlined: as a call its `Option<Segment>` came back through the stack and was
    /// re-read with a wider load than the stores (a store-forwarding stall, ~6% of the
    /// NAT44 fast path's cycles in `perf`); the options walk stays out of line.
    #[inline(always)]
    pub fn parse(hdr: &[u8], l4_len: usize) -> Option<Segment> {
        let h = hdr.get(..20)?;
        let be32 = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let doff = usize::from(h[12] >> 4) * 4;
        let flags = h[13];
        let wscale = if flags & SYN != 0 {
            window_scale(hdr.get(20..doff.min(hdr.len())).unwrap_or(&[]))
        } else {
            None
        };
        Some(Segment {
            flags,
            seq: be32(4),
            ack: be32(8),
            window: u16::from_be_bytes([h[14], h[15]]),
            len: l4_len.saturating_sub(doff).min(u32::MAX as usize) as u32,
            wscale,
        })
    }

    /// A segment carrying only flags (for tests and callers without the header).
    pub fn with_flags(flags: u8) -> Segment {
        Segment {
            flags,
            ..Segment::default()
        }
    }

    /// The sequence number after this segment: seq + payload + SYN + FIN.
    #[inline]
    pub fn end(&self) -> u32 {
        self.seq
            .wrapping_add(self.len)
            .wrapping_add(u32::from(self.flags & SYN != 0))
            .wrapping_add(u32::from(self.flags & FIN != 0))
    }
}

/// The window-scale shift in a SYN's options (kind 3, length 3), clamped to 14.
fn window_scale(mut opts: &[u8]) -> Option<u8> {
    while let [kind, rest @ ..] = opts {
        match *kind {
            0 => return None,
            1 => opts = rest,
            _ => {
                let len = usize::from(*rest.first()?);
                if len < 2 || len > opts.len() {
                    return None;
                }
                if *kind == 3 && len == 3 {
                    return Some(opts[2].min(MAX_WSCALE));
                }
                opts = &opts[len..];
            }
        }
    }
    None
}

/// `a` is after `b` in sequence space (RFC 9293's `SEG.SEQ > x` modulo 2^32).
#[inline]
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// `x` in `[lo, hi]` modulo 2^32.
#[inline]
fn within(x: u32, lo: u32, hi: u32) -> bool {
    x.wrapping_sub(lo) <= hi.wrapping_sub(lo)
}

/// What one direction has sent: the highest sequence end and the largest window it
/// advertised (scaled). Packed in 64 bits: end (32) | maxwin (31) | valid (1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqDir {
    /// Highest `seq + len (+SYN +FIN)` sent.
    pub end: u32,
    /// Largest window advertised, scaled (at most 65535 << 14 < 2^31).
    pub maxwin: u32,
    /// Whether this direction has sent anything yet.
    pub valid: bool,
}

impl SeqDir {
    /// The packed form.
    #[inline]
    pub fn pack(self) -> u64 {
        u64::from(self.end)
            | u64::from(self.maxwin & 0x7fff_ffff) << 32
            | u64::from(self.valid) << 63
    }

    /// From the packed form.
    #[inline]
    pub fn unpack(w: u64) -> Self {
        SeqDir {
            end: w as u32,
            maxwin: (w >> 32) as u32 & 0x7fff_ffff,
            valid: w >> 63 != 0,
        }
    }

    /// Takes in a segment this direction sent, with the window shift in force.
    #[inline]
    pub(crate) fn advance(&mut self, seg: &Segment, shift: u8) {
        let end = seg.end();
        if !self.valid || after(end, self.end) {
            self.end = end;
        }
        // RFC 7323 §2.2: "The window field in a segment where the SYN bit is set (i.e., a
        // <SYN> or <SYN,ACK>) MUST NOT be scaled."
        let shift = if seg.flags & SYN != 0 { 0 } else { shift };
        let win = u32::from(seg.window) << shift;
        if !self.valid || win > self.maxwin {
            self.maxwin = win;
        }
        self.valid = true;
    }
}

/// Why a segment was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// A RST whose sequence number is outside the window seen for its direction.
    RstOutOfWindow,
}

/// Whether a RST from the side that sent `s` to the side that sent `r` is in window.
#[inline]
pub fn rst_in_window(seg: &Segment, s: SeqDir, r: SeqDir) -> bool {
    if s.valid {
        let w = r.maxwin;
        within(seg.seq, s.end.wrapping_sub(w), s.end.wrapping_add(w))
    } else if r.valid {
        // The answer to a segment (a refused SYN): must acknowledge all of it.
        seg.flags & ACK != 0 && seg.ack == r.end
    } else {
        true
    }
}

impl TcpState {
    /// Restores a state from its packed form.
    #[inline]
    pub fn from_bits(bits: u32) -> Self {
        Self {
            bits: bits & ((1 << BITS) - 1),
        }
    }

    /// The packed form (fits in [`BITS`] bits).
    #[inline]
    pub fn bits(self) -> u32 {
        self.bits
    }

    /// The handshake/close state.
    #[inline]
    pub fn state(self) -> ConnState {
        ConnState::from_bits(self.bits & STATE_MASK)
    }

    #[inline]
    fn set_state(&mut self, s: ConnState) {
        self.bits = (self.bits & !STATE_MASK) | s as u32;
        if s == ConnState::Established {
            self.bits |= CONFIRMED;
        }
    }

    /// Whether the connection reached `Established` (conntrack's ASSURED): only such a
    /// session gets the established or closed timeouts, and early drop never takes it.
    #[inline]
    pub fn is_confirmed(self) -> bool {
        self.bits & CONFIRMED != 0
    }

    /// The side that opened (sent the SYN, or the first segment of a picked-up session).
    #[inline]
    fn opener(self) -> Record {
        if self.bits & OPENER_REPLY != 0 {
            Record::Reply
        } else {
            Record::Original
        }
    }

    #[inline]
    fn ws_code(self, side: Record) -> u32 {
        (self.bits >> WS_SHIFT[idx(side)]) & WS_MASK
    }

    #[inline]
    fn set_ws(&mut self, side: Record, wscale: Option<u8>) {
        let code = wscale.map_or(1, |s| 2 + u32::from(s.min(MAX_WSCALE)));
        let sh = WS_SHIFT[idx(side)];
        self.bits = (self.bits & !(WS_MASK << sh)) | code << sh;
    }

    /// The shift to apply to the window fields `side` sends (RFC 7323 §2.2: only when
    /// both SYNs carried the option; 14, the largest, when no SYN was seen).
    #[inline]
    pub fn window_shift(self, side: Record) -> u8 {
        let (mine, theirs) = (self.ws_code(side), self.ws_code(other(side)));
        if mine == 0 || theirs == 0 {
            MAX_WSCALE
        } else if mine >= 2 && theirs >= 2 {
            (mine - 2) as u8
        } else {
            0
        }
    }

    /// A fresh opening by `side`'s SYN (also a closed port pair reused).
    fn open(&mut self, side: Record, wscale: Option<u8>) {
        self.bits = ConnState::SynSent as u32
            | if side == Record::Reply {
                OPENER_REPLY
            } else {
                0
            };
        self.set_ws(side, wscale);
    }

    /// Updates the state with a segment sent from `side`. `acks_peer`: the segment's ACK
    /// acknowledges what the other side sent (its SYN-ACK), as the caller's sequence
    /// tracking judges it. A RST must have been checked against the window before.
    pub fn observe(&mut self, side: Record, seg: &Segment, acks_peer: bool) {
        let f = seg.flags;
        let st = self.state();
        if f & RST != 0 {
            self.set_state(ConnState::Close);
            return;
        }
        if f & SYN != 0 {
            if f & ACK == 0 {
                match st {
                    ConnState::None
                    | ConnState::PickedUp
                    | ConnState::TimeWait
                    | ConnState::Close => self.open(side, seg.wscale),
                    // A retransmitted SYN.
                    ConnState::SynSent if self.opener() == side => self.set_ws(side, seg.wscale),
                    // Both SYNs crossing (simultaneous open): each side's SYN-ACK and ACK
                    // follow; the opener's ACK completes it.
                    ConnState::SynSent => {
                        self.set_ws(side, seg.wscale);
                        self.set_state(ConnState::SynRecv);
                    }
                    // In an open connection a SYN is stale or forged: ignored, as
                    // conntrack does (the endpoint answers it with a challenge ACK).
                    _ => {}
                }
            } else {
                match st {
                    ConnState::SynSent if self.opener() != side => {
                        self.set_ws(side, seg.wscale);
                        self.set_state(ConnState::SynRecv);
                    }
                    ConnState::SynRecv => self.set_ws(side, seg.wscale),
                    // A session picked up at its SYN-ACK: the other side opened.
                    ConnState::None | ConnState::PickedUp => {
                        self.open(other(side), None);
                        self.bits &= !(WS_MASK << WS_SHIFT[idx(other(side))]);
                        self.set_ws(side, seg.wscale);
                        self.set_state(ConnState::SynRecv);
                    }
                    _ => {}
                }
            }
            return;
        }
        match st {
            ConnState::None => {
                self.bits = ConnState::PickedUp as u32
                    | if side == Record::Reply {
                        OPENER_REPLY
                    } else {
                        0
                    };
            }
            ConnState::PickedUp if self.opener() != side => self.set_state(ConnState::Established),
            ConnState::SynRecv if self.opener() == side && f & ACK != 0 && acks_peer => {
                self.set_state(ConnState::Established)
            }
            _ => {}
        }
        if f & FIN != 0 {
            self.bits |= if side == Record::Original {
                FIN_ORIG
            } else {
                FIN_REPLY
            };
            if matches!(self.state(), ConnState::Established | ConnState::FinWait) {
                self.set_state(
                    if self.bits & (FIN_ORIG | FIN_REPLY) == FIN_ORIG | FIN_REPLY {
                        ConnState::TimeWait
                    } else {
                        ConnState::FinWait
                    },
                );
            }
        }
    }

    /// The phase that decides the idle timeout.
    #[inline]
    pub fn phase(&self) -> TcpPhase {
        match self.state() {
            ConnState::None | ConnState::SynSent | ConnState::PickedUp => TcpPhase::SynSent,
            ConnState::SynRecv => TcpPhase::SynRecv,
            ConnState::Established | ConnState::FinWait => TcpPhase::Established,
            ConnState::TimeWait => TcpPhase::Closing,
            // RFC 7857 §2.2 keeps a reset session 4 minutes; one reset before its
            // handshake completed (a refused or aborted opening, or a spoofer's own
            // RST) is still unconfirmed and keeps the short SYN_RECV timeout.
            ConnState::Close if self.is_confirmed() => TcpPhase::Closed,
            ConnState::Close => TcpPhase::SynRecv,
        }
    }
}

#[inline]
fn idx(side: Record) -> usize {
    match side {
        Record::Original => 0,
        Record::Reply => 1,
    }
}

#[inline]
fn other(side: Record) -> Record {
    match side {
        Record::Original => Record::Reply,
        Record::Reply => Record::Original,
    }
}

/// Whether `seg` in `state` changes nothing but its direction's sequence words: a plain
/// ACK or data segment (no SYN, FIN or RST) of an established connection — the common
/// case, which the session table then handles without the state machine.
#[inline(always)]
pub fn only_advances(state: TcpState, seg: &Segment) -> bool {
    seg.flags & (SYN | FIN | RST) == 0 && state.bits & STATE_MASK == ConnState::Established as u32
}

/// One segment through a session's tracker: the RST window check, then the sequence
/// state of the sender's direction (`dirs[side]`) and the connection state. On `Err`
/// nothing changed. Pure: the session table applies it to its atomics.
#[inline]
pub fn track(
    state: &mut TcpState,
    dirs: &mut [SeqDir; 2],
    side: Record,
    seg: &Segment,
) -> Result<(), Reject> {
    let (s, r) = (idx(side), 1 - idx(side));
    if seg.flags & RST != 0 && !rst_in_window(seg, dirs[s], dirs[r]) {
        return Err(Reject::RstOutOfWindow);
    }
    // The handshake's last ACK acknowledges the SYN-ACK (and at most a little data sent
    // with it): a spoofer who never saw the SYN-ACK cannot produce it.
    let peer = dirs[r];
    let acks_peer = !peer.valid
        || within(
            seg.ack,
            peer.end.wrapping_sub(HANDSHAKE_ACK_SLACK),
            peer.end,
        );
    let shift = state.window_shift(side);
    state.observe(side, seg, acks_peer);
    // The shift may have just been learnt from this SYN; a SYN's window is unscaled.
    dirs[s].advance(seg, shift);
    Ok(())
}

#[cfg(test)]
mod tests;
