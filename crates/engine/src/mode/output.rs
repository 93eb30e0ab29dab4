//! Packets a mode originates because of one input packet: an ICMP error it owes, or the
//! translated fragments of a packet it had to cut. One buffer per worker, reused.

use super::HEADROOM;

/// Room for the largest output of one packet: a 64 KiB IPv4 packet cut for a 1280-byte
/// IPv6 MTU is 54 fragments, each in a slot of `HEADROOM + 1280 + 64` bytes.
const CAPACITY: usize = 96 * 1024;

/// Most packets one input yields: the packet list is allocated once, never grown.
pub const MAX_PACKETS: usize = 64;
/// The least room every packet keeps in front of it, for a link header.
const MIN_FRONT: usize = 32;

/// The packets a mode wrote for one input, each with [`HEADROOM`] free bytes in front of
/// it (room for the runtime's link header, written in place).
#[derive(Debug)]
pub struct Output {
    buf: Vec<u8>,
    /// `(slot start, packet start, packet len)` of each packet in `buf`.
    packets: Vec<(usize, usize, usize)>,
    /// Where the next slot starts.
    end: usize,
}

impl Default for Output {
    fn default() -> Self {
        Self::new()
    }
}

impl Output {
    /// An empty output area.
    pub fn new() -> Self {
        Output {
            buf: vec![0; CAPACITY],
            packets: Vec::with_capacity(MAX_PACKETS),
            end: 0,
        }
    }

    /// Forgets every packet.
    #[inline]
    pub fn clear(&mut self) {
        self.packets.clear();
        self.end = 0;
    }

    /// How many packets there are.
    pub fn len(&self) -> usize {
        self.packets.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    /// The packets, in order.
    pub fn packets(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.packets.iter().map(|&(_, s, l)| &self.buf[s..s + l])
    }

    /// Packet `i` with `link` bytes in front of it, for the runtime to write a link
    /// header there: `frame[link..]` is the IP packet. `None` if there is no such packet
    /// or less room than `link` in front of it (every packet has at least 32 bytes).
    pub fn framed_mut(&mut self, i: usize, link: usize) -> Option<&mut [u8]> {
        let &(base, s, l) = self.packets.get(i)?;
        let from = s.checked_sub(link).filter(|&f| f >= base)?;
        self.buf.get_mut(from..s + l)
    }

    /// Forgets the last packet, giving back its slot.
    pub(crate) fn discard_last(&mut self) {
        if let Some((base, _, _)) = self.packets.pop() {
            self.end = base;
        }
    }

    /// Rewrites packet `i` inside its slot: `f` gets the slot and the packet's start and
    /// length in it, and returns where the packet now is (a translation may grow it into
    /// the headroom), or `None` to drop it. A packet left with less than [`MIN_FRONT`] bytes in
    /// front is moved back to `HEADROOM`. Whether packet `i` is still there.
    pub(crate) fn rewrite(
        &mut self,
        i: usize,
        f: impl FnOnce(&mut [u8], usize, usize) -> Option<(usize, usize)>,
    ) -> bool {
        let Some(&(base, s, l)) = self.packets.get(i) else {
            return false;
        };
        let end = self.packets.get(i + 1).map_or(self.end, |p| p.0);
        let moved = self.buf.get_mut(base..end).and_then(|slot| {
            let (s, l) = f(slot, s - base, l).filter(|&(s, l)| s + l <= slot.len())?;
            if s >= MIN_FRONT {
                return Some((s, l));
            }
            let room = slot.get_mut(..HEADROOM + l)?;
            room.copy_within(s..s + l, HEADROOM);
            Some((HEADROOM, l))
        });
        match moved {
            Some((s, l)) => self.packets[i] = (base, base + s, l),
            None => {
                self.packets.remove(i);
            }
        }
        moved.is_some()
    }

    /// Whether `n` packets of at most `max` bytes each fit an empty output.
    pub(crate) fn has_room_for(n: usize, max: usize) -> bool {
        n <= MAX_PACKETS
            && (HEADROOM + max)
                .checked_mul(n)
                .is_some_and(|b| b <= CAPACITY)
    }

    /// A slot for a packet of at most `max` bytes: the bytes before the packet are the
    /// headroom (`HEADROOM` of them), so a translation that grows headers can run in it.
    /// Returns the slot; write the packet at `HEADROOM` and [`commit`](Self::commit) it.
    pub(crate) fn slot(&mut self, max: usize) -> Option<&mut [u8]> {
        let size = HEADROOM.checked_add(max)?;
        let end = self.end.checked_add(size)?;
        self.buf.get_mut(self.end..end)
    }

    /// Keeps the packet at `slot[start..start + len]` of the slot [`slot`](Self::slot)
    /// just gave for `max` bytes. `start` leaves at least 32 bytes in front (a translation
    /// grows into the headroom by 28 at most) and the packet stays inside the slot.
    /// Returns false (and keeps nothing) when that does not hold.
    pub(crate) fn commit(&mut self, max: usize, start: usize, len: usize) -> bool {
        let base = self.end;
        let fits = start >= MIN_FRONT
            && self.packets.len() < MAX_PACKETS
            && start.saturating_add(len) <= HEADROOM + max
            && base + HEADROOM + max <= self.buf.len();
        if fits {
            self.packets.push((base, base + start, len));
            self.end = base + HEADROOM + max;
        }
        fits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_each_other_and_keep_room_for_a_link_header() {
        let mut o = Output::new();
        for i in 0..3u8 {
            let slot = o.slot(100).unwrap();
            slot[HEADROOM..HEADROOM + 10].fill(i);
            assert!(o.commit(100, HEADROOM, 10));
        }
        assert_eq!(o.len(), 3);
        let got: Vec<Vec<u8>> = o.packets().map(<[u8]>::to_vec).collect();
        assert_eq!(got, vec![vec![0; 10], vec![1; 10], vec![2; 10]]);
        let f = o.framed_mut(1, 14).unwrap();
        assert_eq!(f.len(), 24);
        assert_eq!(&f[14..], &[1; 10]);
        assert!(o.framed_mut(1, HEADROOM + 1).is_none());
        assert!(o.framed_mut(3, 14).is_none());
        o.clear();
        assert!(o.is_empty());
    }

    #[test]
    fn a_rewritten_packet_keeps_room_in_front_or_is_dropped() {
        let mut o = Output::new();
        for i in 0..3u8 {
            let slot = o.slot(100).unwrap();
            slot[HEADROOM..HEADROOM + 10].fill(i);
            assert!(o.commit(100, HEADROOM, 10));
        }
        // Grown 40 bytes into the headroom: moved back to leave room for a link header.
        assert!(o.rewrite(0, |slot, s, l| {
            slot[s - 40..s].fill(9);
            Some((s - 40, l + 40))
        }));
        assert!(!o.rewrite(1, |_, _, _| None), "dropped");
        assert!(!o.rewrite(1, |_, s, _| Some((s, 1000))), "past its slot");
        let got: Vec<Vec<u8>> = o.packets().map(<[u8]>::to_vec).collect();
        let mut first = vec![9; 40];
        first.extend([0; 10]);
        assert_eq!(got, vec![first]);
        assert_eq!(
            o.framed_mut(0, HEADROOM).map(|f| f.len()),
            Some(HEADROOM + 50)
        );
        o.discard_last();
        assert!(o.is_empty());
    }

    #[test]
    fn a_packet_outside_its_slot_or_without_room_in_front_is_refused() {
        let mut o = Output::new();
        o.slot(100).unwrap();
        assert!(!o.commit(100, 8, 10));
        assert!(!o.commit(100, HEADROOM, 101));
        assert!(o.is_empty());
        assert!(o.slot(usize::MAX).is_none());
        assert!(o.slot(CAPACITY).is_none());
    }
}
