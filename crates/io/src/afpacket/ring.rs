//! The TPACKET_V3 receive ring: block ownership and the block/frame walk.
//!
//! A V3 ring is `block_count` blocks of `block_size` bytes. The kernel fills
//! a block with variable-length frames, then hands it to user space by
//! setting `TP_STATUS_USER` in the block descriptor; user space reads every
//! frame and gives the block back by storing `TP_STATUS_KERNEL`. Blocks are
//! handed over strictly in ring order, so one cursor suffices.
//!
//! Contract: the walk ([`walk_block`]) is safe code over a byte slice and
//! treats every header field as untrusted. A corrupt count, offset or length
//! can only make it skip frames; it never reads outside the block and never
//! panics.

use super::sys;
use crate::port::RxMeta;
use crate::sys::Mmap;
use crate::vnet::{VnetHdr, VNET_HDR_LEN};

/// Byte offsets in `struct tpacket_block_desc` (`linux/if_packet.h`).
pub(crate) mod block {
    /// `hdr.bh1.block_status`: `TP_STATUS_KERNEL` or `TP_STATUS_USER` (| `TP_STATUS_BLK_TMO`).
    pub const STATUS: usize = 8;
    /// `hdr.bh1.num_pkts`: frames in the block.
    pub const NUM_PKTS: usize = 12;
    /// `hdr.bh1.offset_to_first_pkt`: from the start of the block.
    pub const FIRST_PKT: usize = 16;
    /// Size of the descriptor (`version`, `offset_to_priv`, `tpacket_hdr_v1`).
    pub const HEADER_LEN: usize = 48;
}

/// Byte offsets in `struct tpacket3_hdr`.
pub(crate) mod frame {
    /// `tp_next_offset`: from this header to the next one (0 for the last).
    pub const NEXT: usize = 0;
    /// `tp_snaplen`: bytes of the frame present in the ring.
    pub const SNAPLEN: usize = 12;
    /// `tp_len`: bytes of the frame on the wire.
    pub const LEN: usize = 16;
    /// `tp_status`: `TP_STATUS_*` flags of this frame.
    pub const STATUS: usize = 20;
    /// `tp_mac`: from this header to the first byte of the Ethernet header.
    pub const MAC: usize = 24;
    /// `hv1.tp_vlan_tci`: the stripped VLAN tag, when `TP_STATUS_VLAN_VALID`.
    pub const VLAN_TCI: usize = 32;
    /// Size of `struct tpacket3_hdr`.
    pub const HEADER_LEN: usize = 48;
    /// `sll_pkttype` of the `struct sockaddr_ll` the kernel puts right after the header
    /// (at `TPACKET_ALIGN(sizeof(struct tpacket3_hdr))` = 48, field offset 10).
    pub const PKTTYPE: usize = 58;
}

/// `PACKET_OTHERHOST` (`linux/if_packet.h`): a frame addressed to another host.
pub(crate) const PACKET_OTHERHOST: u8 = 3;

/// Reads a native-endian `u32` at `off` (0 past the end).
fn ne32(b: &[u8], off: usize) -> u32 {
    match off.checked_add(4).and_then(|end| b.get(off..end)) {
        Some(&[x0, x1, x2, x3]) => u32::from_ne_bytes([x0, x1, x2, x3]),
        _ => 0,
    }
}

/// Reads a native-endian `u16` at `off` (0 past the end).
fn ne16(b: &[u8], off: usize) -> u16 {
    match off.checked_add(2).and_then(|end| b.get(off..end)) {
        Some(&[x0, x1]) => u16::from_ne_bytes([x0, x1]),
        _ => 0,
    }
}

/// What a walk over one block found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BlockWalk {
    /// Frames handed to the callback.
    pub frames: usize,
    /// Frames the descriptor announced but whose headers were out of bounds.
    pub skipped: usize,
}

/// Calls `f` for every frame of a user-owned block, with the frame's bytes
/// mutable in place. Frames whose header or data fall outside the block are
/// skipped; a bad `tp_next_offset` ends the walk (the rest count as skipped).
/// With `vnet`, the kernel put a virtio-net header right before each frame's
/// Ethernet header (`PACKET_VNET_HDR`); it is decoded into `RxMeta::vnet`.
pub(crate) fn walk_block(
    block: &mut [u8],
    vnet: bool,
    f: &mut impl FnMut(&mut [u8], &RxMeta),
) -> BlockWalk {
    // The vnet header sits between the frame header and the Ethernet header.
    let min_mac = frame::HEADER_LEN + if vnet { VNET_HDR_LEN } else { 0 };
    let mut walk = BlockWalk::default();
    let announced = ne32(block, block::NUM_PKTS) as usize;
    let mut off = ne32(block, block::FIRST_PKT) as usize;
    for i in 0..announced {
        let hdr_ok = off >= block::HEADER_LEN
            && off
                .checked_add(frame::HEADER_LEN)
                .is_some_and(|end| end <= block.len());
        if !hdr_ok {
            walk.skipped += announced - i;
            break;
        }
        let next = ne32(block, off + frame::NEXT) as usize;
        let snaplen = ne32(block, off + frame::SNAPLEN) as usize;
        let len = ne32(block, off + frame::LEN) as usize;
        let status = ne32(block, off + frame::STATUS);
        let mac = usize::from(ne16(block, off + frame::MAC));
        let vlan = ne32(block, off + frame::VLAN_TCI);
        let vnet_hdr = if vnet && mac >= min_mac {
            off.checked_add(mac - VNET_HDR_LEN)
                .and_then(|at| block.get(at..))
                .and_then(VnetHdr::parse)
        } else {
            None
        };
        let meta = RxMeta {
            len,
            snaplen,
            csum_not_ready: status & libc::TP_STATUS_CSUMNOTREADY != 0,
            csum_valid: status & libc::TP_STATUS_CSUM_VALID != 0,
            vlan_tci: (status & libc::TP_STATUS_VLAN_VALID != 0).then_some(vlan as u16),
            truncated: status & libc::TP_STATUS_COPY != 0 || snaplen < len,
            losing: status & libc::TP_STATUS_LOSING != 0,
            vnet: vnet_hdr,
            other_host: block.get(off + frame::PKTTYPE) == Some(&PACKET_OTHERHOST),
        };
        // The data must start after this frame's header and end inside the block.
        let data = (mac >= min_mac)
            .then(|| off.checked_add(mac))
            .flatten()
            .and_then(|start| Some(start..start.checked_add(snaplen)?))
            .filter(|r| r.end <= block.len());
        match data {
            Some(r) => {
                f(&mut block[r], &meta);
                walk.frames += 1;
            }
            None => walk.skipped += 1,
        }
        if i + 1 == announced {
            break;
        }
        // Offsets only move forward, so a corrupt chain cannot loop.
        match off.checked_add(next) {
            Some(n) if next >= frame::HEADER_LEN => off = n,
            _ => {
                walk.skipped += announced - i - 1;
                break;
            }
        }
    }
    walk
}

/// The mapped ring and the cursor of the next block to read.
#[derive(Debug)]
pub(crate) struct Ring {
    map: Mmap,
    block_size: usize,
    block_count: usize,
    /// Frames carry a virtio-net header (`PACKET_VNET_HDR`).
    vnet: bool,
    next: usize,
    /// A block taken from the kernel and not yet given back (set while the
    /// callback runs, so a panic in it does not leak the block forever).
    held: Option<usize>,
}

impl Ring {
    /// Wraps a mapping of `block_count` blocks of `block_size` bytes.
    pub(crate) fn new(map: Mmap, block_size: usize, block_count: usize, vnet: bool) -> Self {
        debug_assert!(block_size.checked_mul(block_count) == Some(map.len()));
        Ring {
            map,
            block_size,
            block_count,
            vnet,
            next: 0,
            held: None,
        }
    }

    /// Is the block under the cursor ready for user space?
    pub(crate) fn ready(&self) -> bool {
        self.map
            .atomic_u32(self.next * self.block_size + block::STATUS)
            .is_some_and(|w| sys::load_acquire(w) & libc::TP_STATUS_USER != 0)
    }

    /// If the block under the cursor is user-owned, walks it with `f`, gives
    /// it back to the kernel and advances; `None` if the kernel still owns it.
    pub(crate) fn take_block(
        &mut self,
        f: &mut impl FnMut(&mut [u8], &RxMeta),
    ) -> Option<BlockWalk> {
        self.release_held();
        let idx = self.next;
        let block = self
            .map
            .user_block(idx * self.block_size, self.block_size, block::STATUS)?;
        self.held = Some(idx);
        let walk = walk_block(block, self.vnet, f);
        self.release_held();
        Some(walk)
    }

    /// Lends the frames of the block under the cursor to `f`, if the kernel has handed it
    /// over, without taking it: the next [`take_block`](Self::take_block) walks the same
    /// frames (see [`crate::Port::peek`]).
    pub(crate) fn peek_block(&mut self, f: &mut impl FnMut(&[u8])) {
        self.release_held();
        let Some(block) =
            self.map
                .user_block(self.next * self.block_size, self.block_size, block::STATUS)
        else {
            return;
        };
        walk_block(block, self.vnet, &mut |d: &mut [u8], _: &RxMeta| f(d));
    }

    /// Gives a held block back to the kernel and moves the cursor past it.
    fn release_held(&mut self) {
        if let Some(idx) = self.held.take() {
            if let Some(w) = self.map.atomic_u32(idx * self.block_size + block::STATUS) {
                sys::store_release(w, libc::TP_STATUS_KERNEL);
            }
            self.next = (idx + 1) % self.block_count;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a synthetic block: descriptor + frames at 16-byte aligned offsets.
    fn synth(frames: &[(&[u8], u32)], block_len: usize) -> Vec<u8> {
        let mut b = vec![0u8; block_len];
        let put32 = |b: &mut Vec<u8>, off: usize, v: u32| {
            b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        };
        put32(&mut b, block::STATUS, libc::TP_STATUS_USER);
        put32(&mut b, block::NUM_PKTS, frames.len() as u32);
        put32(&mut b, block::FIRST_PKT, block::HEADER_LEN as u32);
        let mut off = block::HEADER_LEN;
        for (i, (data, status)) in frames.iter().enumerate() {
            let mac = 80usize; // header + sockaddr_ll + padding, as the kernel does
            let total = (mac + data.len()).next_multiple_of(16);
            let next = if i + 1 == frames.len() {
                0
            } else {
                total as u32
            };
            put32(&mut b, off + frame::NEXT, next);
            put32(&mut b, off + frame::SNAPLEN, data.len() as u32);
            put32(&mut b, off + frame::LEN, data.len() as u32);
            put32(&mut b, off + frame::STATUS, *status);
            b[off + frame::MAC..off + frame::MAC + 2].copy_from_slice(&(mac as u16).to_ne_bytes());
            put32(&mut b, off + frame::VLAN_TCI, 0x2064);
            b[off + mac..off + mac + data.len()].copy_from_slice(data);
            off += total;
        }
        b
    }

    fn collect(block: &mut [u8]) -> (Vec<Vec<u8>>, Vec<RxMeta>, BlockWalk) {
        let (mut datas, mut metas) = (Vec::new(), Vec::new());
        let walk = walk_block(block, false, &mut |d: &mut [u8], m: &RxMeta| {
            datas.push(d.to_vec());
            metas.push(*m);
        });
        (datas, metas, walk)
    }

    #[test]
    fn walks_frames_and_metadata() {
        let a = [1u8; 60];
        let b = [2u8; 1514];
        let c = [3u8; 42];
        let mut blk = synth(
            &[
                (&a, libc::TP_STATUS_USER | libc::TP_STATUS_CSUMNOTREADY),
                (
                    &b,
                    libc::TP_STATUS_USER | libc::TP_STATUS_CSUM_VALID | libc::TP_STATUS_VLAN_VALID,
                ),
                (&c, libc::TP_STATUS_USER | libc::TP_STATUS_LOSING),
            ],
            4096,
        );
        let (d, m, w) = collect(&mut blk);
        assert_eq!(
            w,
            BlockWalk {
                frames: 3,
                skipped: 0
            }
        );
        assert_eq!(d, vec![a.to_vec(), b.to_vec(), c.to_vec()]);
        assert!(m[0].csum_not_ready && !m[0].csum_valid && m[0].vlan_tci.is_none());
        assert!(m[1].csum_valid && m[1].vlan_tci == Some(0x2064));
        assert!(m[2].losing && !m[2].truncated);
        assert_eq!((m[1].len, m[1].snaplen), (1514, 1514));
    }

    #[test]
    fn vnet_header_before_the_mac_header_is_decoded() {
        let hdr = VnetHdr {
            flags: crate::vnet::F_NEEDS_CSUM,
            gso_type: crate::vnet::GsoType::TcpV4,
            gso_ecn: false,
            hdr_len: 66,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        };
        let mut blk = synth(&[(&[7u8; 3000], libc::TP_STATUS_USER)], 4096);
        let at = block::HEADER_LEN + 80 - VNET_HDR_LEN;
        blk[at..at + VNET_HDR_LEN].copy_from_slice(&hdr.to_bytes());
        let (d, m, _) = collect_vnet(&mut blk, true);
        assert_eq!(d[0], vec![7u8; 3000]);
        assert_eq!(m[0].vnet, Some(hdr));
        let (_, m, _) = collect_vnet(&mut blk, false);
        assert_eq!(m[0].vnet, None);
        // tp_mac leaving no room for the vnet header: skipped, not misread.
        let off = block::HEADER_LEN + frame::MAC;
        blk[off..off + 2].copy_from_slice(&50u16.to_ne_bytes());
        let (d, _, w) = collect_vnet(&mut blk, true);
        assert_eq!((d.len(), w.skipped), (0, 1));
    }

    fn collect_vnet(block: &mut [u8], vnet: bool) -> (Vec<Vec<u8>>, Vec<RxMeta>, BlockWalk) {
        let (mut datas, mut metas) = (Vec::new(), Vec::new());
        let walk = walk_block(block, vnet, &mut |d: &mut [u8], m: &RxMeta| {
            datas.push(d.to_vec());
            metas.push(*m);
        });
        (datas, metas, walk)
    }

    #[test]
    fn another_hosts_frames_are_marked() {
        let mut blk = synth(
            &[
                (&[1u8; 60], libc::TP_STATUS_USER),
                (&[2u8; 60], libc::TP_STATUS_USER),
            ],
            1024,
        );
        // sll_pkttype of the first frame: PACKET_OTHERHOST; the second stays PACKET_HOST.
        blk[block::HEADER_LEN + frame::PKTTYPE] = PACKET_OTHERHOST;
        let (d, m, _) = collect(&mut blk);
        assert_eq!(d.len(), 2);
        assert!(m[0].other_host && !m[1].other_host);
    }

    #[test]
    fn frames_are_mutable_in_place() {
        let mut blk = synth(&[(&[0u8; 20], libc::TP_STATUS_USER)], 1024);
        walk_block(&mut blk, false, &mut |d: &mut [u8], _: &RxMeta| d[0] = 0xAB);
        assert_eq!(blk[block::HEADER_LEN + 80], 0xAB);
    }

    #[test]
    fn truncated_when_snaplen_short() {
        let mut blk = synth(&[(&[9u8; 64], libc::TP_STATUS_USER)], 1024);
        let off = block::HEADER_LEN;
        blk[off + frame::LEN..off + frame::LEN + 4].copy_from_slice(&65000u32.to_ne_bytes());
        let (_, m, _) = collect(&mut blk);
        assert!(m[0].truncated);
        assert_eq!((m[0].len, m[0].snaplen), (65000, 64));
    }

    #[test]
    fn corrupt_headers_are_skipped_not_followed() {
        let frames: [(&[u8], u32); 3] = [(&[1u8; 100], 1), (&[2u8; 100], 1), (&[3u8; 100], 1)];
        let base = synth(&frames, 1024);
        let off0 = block::HEADER_LEN;
        let set32 =
            |b: &mut Vec<u8>, off: usize, v: u32| b[off..off + 4].copy_from_slice(&v.to_ne_bytes());

        // Huge frame count: walks the three real ones, then the chain ends.
        let mut b = base.clone();
        set32(&mut b, block::NUM_PKTS, u32::MAX);
        let (d, _, w) = collect(&mut b);
        assert_eq!(d.len(), 3);
        assert_eq!(w.frames + w.skipped, u32::MAX as usize);

        // First-packet offset past the end, inside the descriptor, or near usize::MAX.
        for first in [u32::MAX, 1020, 0, 8] {
            let mut b = base.clone();
            set32(&mut b, block::FIRST_PKT, first);
            let (d, _, w) = collect(&mut b);
            assert_eq!((d.len(), w.skipped), (0, 3), "first={first}");
        }

        // Snaplen running past the block: that frame is skipped, the next ones read.
        let mut b = base.clone();
        set32(&mut b, off0 + frame::SNAPLEN, u32::MAX);
        let (d, _, w) = collect(&mut b);
        assert_eq!((w.frames, w.skipped), (2, 1));
        assert_eq!(d[0][0], 2);

        // tp_mac pointing into the frame header or past the block.
        for mac in [0u16, 47, u16::MAX] {
            let mut b = base.clone();
            b[off0 + frame::MAC..off0 + frame::MAC + 2].copy_from_slice(&mac.to_ne_bytes());
            let (_, _, w) = collect(&mut b);
            assert_eq!((w.frames, w.skipped), (2, 1), "mac={mac}");
        }

        // tp_next_offset zero (would loop), small (overlapping) or huge: walk stops.
        for next in [0u32, 4, u32::MAX] {
            let mut b = base.clone();
            set32(&mut b, off0 + frame::NEXT, next);
            let (_, _, w) = collect(&mut b);
            assert_eq!((w.frames, w.skipped), (1, 2), "next={next}");
        }

        // A block shorter than its own descriptor.
        let mut tiny = base[..20].to_vec();
        let (d, _, _) = collect(&mut tiny);
        assert!(d.is_empty());
        let (d, _, w) = collect(&mut []);
        assert_eq!((d.len(), w), (0, BlockWalk::default()));
    }

    #[test]
    fn random_bytes_never_panic() {
        // A cheap deterministic fuzz: xorshift bytes with a plausible descriptor.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for round in 0..2000 {
            let mut b = vec![0u8; 512 + round % 700];
            for byte in b.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *byte = x as u8;
            }
            if round % 2 == 0 {
                b[block::NUM_PKTS..block::NUM_PKTS + 4]
                    .copy_from_slice(&((round % 9) as u32).to_ne_bytes());
                b[block::FIRST_PKT..block::FIRST_PKT + 4].copy_from_slice(&48u32.to_ne_bytes());
            }
            let len = b.len();
            walk_block(&mut b, round % 3 == 0, &mut |d: &mut [u8], m: &RxMeta| {
                assert!(d.len() == m.snaplen && d.len() <= len);
            });
        }
    }
}
