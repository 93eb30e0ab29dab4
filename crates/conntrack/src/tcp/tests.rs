//! The TCP tracker's transitions, window checks and a property test.

use super::flags::*;
use super::*;
use proptest::prelude::*;
use Record::{Original as O, Reply as R};

/// A session's tracker, driven segment by segment.
#[derive(Default)]
struct Conn {
    st: TcpState,
    dirs: [SeqDir; 2],
}

impl Conn {
    fn send(
        &mut self,
        side: Record,
        flags: u8,
        seq: u32,
        ack: u32,
        len: u32,
    ) -> Result<(), Reject> {
        self.seg(
            side,
            Segment {
                flags,
                seq,
                ack,
                window: 1000,
                len,
                wscale: None,
            },
        )
    }
    fn seg(&mut self, side: Record, seg: Segment) -> Result<(), Reject> {
        track(&mut self.st, &mut self.dirs, side, &seg)
    }
    fn state(&self) -> ConnState {
        self.st.state()
    }
}

/// SYN (seq 100) / SYN-ACK (seq 5000) / ACK: the usual opening.
fn handshake() -> Conn {
    let mut c = Conn::default();
    c.send(O, SYN, 100, 0, 0).unwrap();
    assert_eq!(c.state(), ConnState::SynSent);
    assert_eq!(c.st.phase(), TcpPhase::SynSent);
    c.send(R, SYN | ACK, 5000, 101, 0).unwrap();
    assert_eq!(c.state(), ConnState::SynRecv);
    assert_eq!(c.st.phase(), TcpPhase::SynRecv);
    c.send(O, ACK, 101, 5001, 0).unwrap();
    assert_eq!(c.state(), ConnState::Established);
    c
}

#[test]
fn handshake_data_fin_fin() {
    let mut c = handshake();
    c.send(O, ACK, 101, 5001, 500).unwrap();
    c.send(R, ACK, 5001, 601, 1000).unwrap();
    c.send(O, ACK | FIN, 601, 6001, 0).unwrap();
    assert_eq!(c.state(), ConnState::FinWait);
    assert_eq!(
        c.st.phase(),
        TcpPhase::Established,
        "half-closed stays established"
    );
    c.send(R, ACK | FIN, 6001, 602, 0).unwrap();
    assert_eq!(c.state(), ConnState::TimeWait);
    assert_eq!(c.st.phase(), TcpPhase::Closing);
    c.send(O, ACK, 602, 6002, 0).unwrap();
    assert_eq!(c.state(), ConnState::TimeWait);
}

/// SYN and the server's SYN-ACK are not a connection.
#[test]
fn syn_and_syn_ack_alone_are_not_established() {
    let mut c = Conn::default();
    c.send(O, SYN, 100, 0, 0).unwrap();
    c.send(R, SYN | ACK, 5000, 101, 0).unwrap();
    // Retransmissions change nothing.
    c.send(O, SYN, 100, 0, 0).unwrap();
    c.send(R, SYN | ACK, 5000, 101, 0).unwrap();
    assert_eq!(c.state(), ConnState::SynRecv);
    assert!(!c.st.is_confirmed());
    // An ACK from the SYN-ACK's sender does not complete the opener's handshake.
    c.send(R, ACK, 5001, 101, 0).unwrap();
    assert_eq!(c.state(), ConnState::SynRecv);
    // A blind ACK from the opener that does not acknowledge the SYN-ACK neither.
    c.send(O, ACK, 101, 0x9000_0000, 0).unwrap();
    assert_eq!(c.state(), ConnState::SynRecv);
    c.send(O, ACK, 101, 5001, 0).unwrap();
    assert_eq!(c.state(), ConnState::Established);
}

#[test]
fn server_data_with_the_syn_ack_still_completes() {
    let mut c = Conn::default();
    c.send(O, SYN, 100, 0, 0).unwrap();
    c.send(R, SYN | ACK, 5000, 101, 0).unwrap();
    c.send(R, ACK, 5001, 101, 1400).unwrap();
    // The client's first ACK acknowledges the SYN-ACK only, or the data too.
    c.send(O, ACK, 101, 5001 + 1400, 0).unwrap();
    assert_eq!(c.state(), ConnState::Established);
}

#[test]
fn simultaneous_open() {
    let mut c = Conn::default();
    c.send(O, SYN, 100, 0, 0).unwrap();
    c.send(R, SYN, 5000, 0, 0).unwrap();
    assert_eq!(c.state(), ConnState::SynRecv);
    c.send(O, SYN | ACK, 100, 5001, 0).unwrap();
    c.send(R, SYN | ACK, 5000, 101, 0).unwrap();
    assert_eq!(c.state(), ConnState::SynRecv);
    c.send(O, ACK, 101, 5001, 0).unwrap();
    assert_eq!(c.state(), ConnState::Established);
}

#[test]
fn mid_stream_pickup_needs_both_sides() {
    let mut c = Conn::default();
    c.send(O, ACK, 7, 9, 100).unwrap();
    assert_eq!(c.state(), ConnState::PickedUp);
    assert!(!c.st.is_confirmed());
    c.send(O, ACK, 107, 9, 100).unwrap();
    assert_eq!(
        c.state(),
        ConnState::PickedUp,
        "one side alone proves nothing"
    );
    c.send(R, ACK, 9, 207, 0).unwrap();
    assert_eq!(c.state(), ConnState::Established);
    // Picked up: no SYN seen, so window scale is unknown: the largest is assumed.
    assert_eq!(c.st.window_shift(O), 14);
}

#[test]
fn pickup_at_the_syn_ack() {
    let mut c = Conn::default();
    c.send(R, SYN | ACK, 5000, 101, 0).unwrap();
    assert_eq!(c.state(), ConnState::SynRecv);
    c.send(O, ACK, 101, 5001, 0).unwrap();
    assert_eq!(c.state(), ConnState::Established);
}

#[test]
fn stray_syn_in_established_is_ignored() {
    let mut c = handshake();
    c.send(R, SYN, 77, 0, 0).unwrap();
    assert_eq!(c.state(), ConnState::Established);
}

#[test]
fn closed_port_pair_is_reused_by_a_new_syn() {
    for close in [true, false] {
        let mut c = handshake();
        if close {
            c.send(O, ACK | FIN, 101, 5001, 0).unwrap();
            c.send(R, ACK | FIN, 5001, 102, 0).unwrap();
            assert_eq!(c.state(), ConnState::TimeWait);
        } else {
            c.send(R, RST, 5001, 0, 0).unwrap();
            assert_eq!(c.state(), ConnState::Close);
        }
        // The new connection may start from the other side.
        c.send(R, SYN, 90_000, 0, 0).unwrap();
        assert_eq!(c.state(), ConnState::SynSent);
        c.send(O, SYN | ACK, 40_000, 90_001, 0).unwrap();
        assert_eq!(c.state(), ConnState::SynRecv);
        c.send(R, ACK, 90_001, 40_001, 0).unwrap();
        assert_eq!(c.state(), ConnState::Established);
    }
}

#[test]
fn rst_in_and_out_of_window() {
    let mut c = handshake();
    c.send(O, ACK, 101, 5001, 500).unwrap();
    // Off-path guesses: far from the sender's sequence.
    for seq in [3000, 601 + 1001, 601u32.wrapping_sub(1001), 0x8000_0000] {
        assert_eq!(
            c.send(O, RST, seq, 0, 0),
            Err(Reject::RstOutOfWindow),
            "seq {seq}"
        );
        assert_eq!(c.state(), ConnState::Established, "unchanged");
    }
    // Inside the receiver's window (1000) around the sender's end (601).
    assert_eq!(c.send(O, RST, 601 + 1000, 0, 0), Ok(()));
    assert_eq!(c.state(), ConnState::Close);
    assert_eq!(c.st.phase(), TcpPhase::Closed);
    let mut c = handshake();
    assert_eq!(c.send(R, RST | ACK, 5001, 101, 0), Ok(()));
    assert_eq!(c.state(), ConnState::Close);
}

#[test]
fn rst_window_across_sequence_wrap() {
    let mut c = Conn::default();
    let isn = u32::MAX - 10;
    c.send(O, SYN, isn, 0, 0).unwrap();
    c.send(R, SYN | ACK, 5000, isn.wrapping_add(1), 0).unwrap();
    c.send(O, ACK, isn.wrapping_add(1), 5001, 0).unwrap();
    c.send(O, ACK, isn.wrapping_add(1), 5001, 100).unwrap();
    let end = isn.wrapping_add(101); // wrapped past zero
    assert!(end < 100);
    assert_eq!(c.dirs[0].end, end);
    assert_eq!(
        c.send(O, RST, end.wrapping_add(2000), 0, 0),
        Err(Reject::RstOutOfWindow)
    );
    assert_eq!(
        c.send(O, RST, end.wrapping_sub(2000), 0, 0),
        Err(Reject::RstOutOfWindow)
    );
    assert_eq!(c.send(O, RST, end.wrapping_sub(999), 0, 0), Ok(()));
    assert_eq!(c.state(), ConnState::Close);
}

#[test]
fn old_segments_do_not_move_the_end_back() {
    let mut c = handshake();
    c.send(O, ACK, 101, 5001, 500).unwrap();
    c.send(O, ACK, 101, 5001, 100).unwrap(); // a retransmission of the start
    assert_eq!(c.dirs[0].end, 601);
}

#[test]
fn refused_syn_rst_must_ack_the_syn() {
    let mut c = Conn::default();
    c.send(O, SYN, 100, 0, 0).unwrap();
    assert_eq!(c.send(R, RST | ACK, 0, 5, 0), Err(Reject::RstOutOfWindow));
    assert_eq!(c.send(R, RST, 0, 0, 0), Err(Reject::RstOutOfWindow));
    assert_eq!(c.state(), ConnState::SynSent);
    assert_eq!(c.send(R, RST | ACK, 0, 101, 0), Ok(()));
    assert_eq!(c.state(), ConnState::Close);
    assert!(!c.st.is_confirmed());
    assert_eq!(
        c.st.phase(),
        TcpPhase::SynRecv,
        "a refused opening keeps a short timeout"
    );
}

#[test]
fn window_scaling_from_the_syns() {
    let seg = |side, flags, seq, ack, window, wscale| {
        (
            side,
            Segment {
                flags,
                seq,
                ack,
                window,
                len: 0,
                wscale,
            },
        )
    };
    // Both sides scale: the receiver's window 1000 << 7 is what a RST may be within.
    let mut c = Conn::default();
    for (side, s) in [
        seg(O, SYN, 100, 0, 1000, Some(7)),
        seg(R, SYN | ACK, 5000, 101, 1000, Some(7)),
        seg(O, ACK, 101, 5001, 1000, None),
        seg(R, ACK, 5001, 101, 1000, None),
    ] {
        c.seg(side, s).unwrap();
    }
    assert_eq!(c.st.window_shift(R), 7);
    assert_eq!(c.dirs[1].maxwin, 1000 << 7);
    assert_eq!(c.send(O, RST, 101 + (1000 << 7), 0, 0), Ok(()));
    // The SYN-ACK without the option: no scaling in either direction (RFC 7323 §1.3).
    let mut c = Conn::default();
    c.seg(O, seg(O, SYN, 100, 0, 1000, Some(7)).1).unwrap();
    c.seg(R, seg(R, SYN | ACK, 5000, 101, 1000, None).1)
        .unwrap();
    assert_eq!(c.st.window_shift(O), 0);
    assert_eq!(c.st.window_shift(R), 0);
}

#[test]
fn segment_parse_reads_fields_and_wscale() {
    let mut h = [0u8; 32];
    h[4..8].copy_from_slice(&100u32.to_be_bytes());
    h[8..12].copy_from_slice(&200u32.to_be_bytes());
    h[12] = 8 << 4; // 32-byte header
    h[13] = SYN;
    h[14..16].copy_from_slice(&64240u16.to_be_bytes());
    // MSS, SACK-permitted, NOP, wscale 16 (clamped to 14).
    h[20..32].copy_from_slice(&[2, 4, 5, 0xb4, 4, 2, 1, 3, 3, 16, 0, 0]);
    let s = Segment::parse(&h, 32 + 10).unwrap();
    assert_eq!((s.seq, s.ack, s.window, s.len), (100, 200, 64240, 10));
    assert_eq!(s.wscale, Some(14));
    assert_eq!(s.end(), 111);
    assert!(Segment::parse(&h[..19], 100).is_none());
    // Truncated or garbage options never panic.
    for cut in 20..32 {
        let _ = Segment::parse(&h[..cut], 0);
    }
    h[20..24].copy_from_slice(&[3, 0, 3, 9]);
    assert_eq!(Segment::parse(&h, 32).unwrap().wscale, None);
}

#[test]
fn packing_round_trips() {
    let d = SeqDir {
        end: 0xdead_beef,
        maxwin: 65535 << 14,
        valid: true,
    };
    assert_eq!(SeqDir::unpack(d.pack()), d);
    let c = handshake();
    assert_eq!(TcpState::from_bits(c.st.bits()), c.st);
    assert!(c.st.bits() < 1 << BITS);
}

fn any_segment() -> impl Strategy<Value = (bool, Segment)> {
    (
        any::<bool>(),
        any::<u8>(),
        prop_oneof![any::<u32>(), 0u32..300, (u32::MAX - 300)..=u32::MAX],
        any::<u32>(),
        any::<u16>(),
        0u32..3000,
        proptest::option::of(0u8..20),
    )
        .prop_map(|(reply, flags, seq, ack, window, len, wscale)| {
            (
                reply,
                Segment {
                    flags,
                    seq,
                    ack,
                    window,
                    len,
                    wscale,
                },
            )
        })
}

proptest! {
    /// No sequence of segments panics, and a session is only ever on the established
    /// timeout after a segment from each side (the handshake's last ACK or the loose
    /// pick-up's answer), never on one side's segments alone.
    #[test]
    fn no_sequence_panics_or_confirms_one_sided(segs in proptest::collection::vec(any_segment(), 0..40)) {
        let mut c = Conn::default();
        for (reply, seg) in segs {
            let side = if reply { R } else { O };
            let before = (c.st, c.dirs);
            match c.seg(side, seg) {
                Ok(()) => {}
                Err(Reject::RstOutOfWindow) => {
                    prop_assert!(seg.flags & RST != 0);
                    prop_assert_eq!(before, (c.st, c.dirs), "a rejected RST changes nothing");
                }
            }
            prop_assert!(c.st.bits() < 1 << BITS);
            let _ = c.st.window_shift(side);
            if matches!(c.st.phase(), TcpPhase::Established | TcpPhase::Closed) {
                // Only a confirmed session gets a long timeout, and confirming takes both
                // sides.
                prop_assert!(c.st.is_confirmed());
                prop_assert!(c.dirs[0].valid && c.dirs[1].valid);
            }
        }
    }

    /// One side alone (a spoofer who never sees the answers) never reaches a confirmed
    /// state.
    #[test]
    fn one_side_alone_never_confirms(segs in proptest::collection::vec(any_segment(), 0..40), reply in any::<bool>()) {
        let mut c = Conn::default();
        let side = if reply { R } else { O };
        for (_, seg) in segs {
            let _ = c.seg(side, seg);
            prop_assert!(!c.st.is_confirmed());
            prop_assert!(!matches!(c.st.phase(), TcpPhase::Established | TcpPhase::Closed));
        }
    }
}

proptest! {
    /// The session table's shortcut for established ACK/data segments gives exactly what
    /// the full tracker gives.
    #[test]
    fn established_shortcut_equals_the_tracker(segs in proptest::collection::vec(any_segment(), 0..30)) {
        let mut c = handshake();
        for (reply, seg) in segs {
            let side = if reply { R } else { O };
            if only_advances(c.st, &seg) {
                let (mut st, mut dirs) = (c.st, c.dirs);
                track(&mut st, &mut dirs, side, &seg).unwrap();
                let mut d = c.dirs[usize::from(reply)];
                d.advance(&seg, c.st.window_shift(side));
                prop_assert_eq!(st, c.st);
                prop_assert_eq!(d, dirs[usize::from(reply)]);
            }
            let _ = c.seg(side, seg);
        }
    }
}
