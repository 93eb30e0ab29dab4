//! TCP session state, tracked from SYN, FIN and RST so that closed connections expire
//! fast and established ones live long (RFC 5382 §5, RFC 6146 §3.5.2).
//!
//! The tracker is deliberately loose (like Linux's `nf_conntrack_tcp_loose`): a session
//! picked up mid-stream becomes established once both sides have sent something.

use crate::session::Side;

/// The TCP state of one session, as the NAT sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpState {
    flags: u8,
}

const SEEN_ORIG: u8 = 1 << 0;
const SEEN_REPLY: u8 = 1 << 1;
const FIN_ORIG: u8 = 1 << 2;
const FIN_REPLY: u8 = 1 << 3;
const RST_SEEN: u8 = 1 << 4;

/// Which idle timeout applies in a state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpPhase {
    /// Only one side has spoken (SYN sent): transitory timeout.
    Opening,
    /// Both sides have spoken, at most one FIN: established timeout.
    Established,
    /// FIN seen from both sides: transitory (TIME_WAIT) timeout.
    Closing,
    /// A RST was seen: the connection is gone, closed timeout.
    Closed,
}

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

impl TcpState {
    /// Restores a state from its packed form.
    #[inline]
    pub fn from_bits(bits: u8) -> Self {
        Self { flags: bits }
    }

    /// The packed form (fits in 8 bits).
    #[inline]
    pub fn bits(self) -> u8 {
        self.flags
    }

    /// Updates the state with a segment's flags sent from `side`.
    #[inline]
    pub fn observe(&mut self, side: Side, tcp_flags: u8) {
        let (seen, fin) = match side {
            Side::Original => (SEEN_ORIG, FIN_ORIG),
            Side::Reply => (SEEN_REPLY, FIN_REPLY),
        };
        if tcp_flags & flags::SYN != 0
            && tcp_flags & flags::ACK == 0
            && self.phase() != TcpPhase::Opening
        {
            // A fresh SYN on a closing or closed session: the port pair is being reused.
            if matches!(self.phase(), TcpPhase::Closing | TcpPhase::Closed) {
                self.flags = 0;
            }
        }
        if tcp_flags & flags::RST != 0 {
            self.flags |= RST_SEEN;
        }
        self.flags |= seen;
        if tcp_flags & flags::FIN != 0 {
            self.flags |= fin;
        }
    }

    /// The phase that decides the idle timeout.
    #[inline]
    pub fn phase(&self) -> TcpPhase {
        if self.flags & RST_SEEN != 0 {
            TcpPhase::Closed
        } else if self.flags & (FIN_ORIG | FIN_REPLY) == FIN_ORIG | FIN_REPLY {
            TcpPhase::Closing
        } else if self.flags & (SEEN_ORIG | SEEN_REPLY) == SEEN_ORIG | SEEN_REPLY {
            TcpPhase::Established
        } else {
            TcpPhase::Opening
        }
    }
}

#[cfg(test)]
mod tests {
    use super::flags::*;
    use super::*;

    #[test]
    fn handshake_data_fin_fin() {
        let mut s = TcpState::default();
        s.observe(Side::Original, SYN);
        assert_eq!(s.phase(), TcpPhase::Opening);
        s.observe(Side::Reply, SYN | ACK);
        assert_eq!(s.phase(), TcpPhase::Established);
        s.observe(Side::Original, ACK | FIN);
        assert_eq!(
            s.phase(),
            TcpPhase::Established,
            "half-closed stays established"
        );
        s.observe(Side::Reply, ACK | FIN);
        assert_eq!(s.phase(), TcpPhase::Closing);
    }

    #[test]
    fn rst_closes_and_new_syn_reopens() {
        let mut s = TcpState::default();
        s.observe(Side::Original, SYN);
        s.observe(Side::Reply, RST | ACK);
        assert_eq!(s.phase(), TcpPhase::Closed);
        s.observe(Side::Original, SYN);
        assert_eq!(s.phase(), TcpPhase::Opening);
    }

    #[test]
    fn mid_stream_pickup_becomes_established() {
        let mut s = TcpState::default();
        s.observe(Side::Original, ACK);
        s.observe(Side::Reply, ACK);
        assert_eq!(s.phase(), TcpPhase::Established);
    }
}
