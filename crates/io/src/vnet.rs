//! The virtio-net header (`struct virtio_net_hdr`, `linux/virtio_net.h`) that a
//! packet socket with `PACKET_VNET_HDR` puts before every frame it receives and
//! expects before every frame it sends (a TUN/TAP device with `IFF_VNET_HDR` speaks
//! the same header). [`crate::Port`]s that pass GSO on carry it beside each frame.
//!
//! It carries what an offloading NIC would have been told: whether the transport
//! checksum still has to be finished (`NEEDS_CSUM`, at `csum_start + csum_offset`)
//! and whether the frame is a GSO super-packet to be cut into `gso_size`-byte
//! segments. Received with it, a 64 KiB TCP super-packet from veth is recognisable
//! as one, not an oversize mystery; sent with it, the kernel segments (or passes to a device
//! with TSO) and completes the checksum, so a user-space forwarder keeps the
//! kernel's offloads.
//!
//! Byte order: `PACKET_VNET_HDR` uses the legacy virtio layout in the *host's*
//! byte order (`vio_le()` in `af_packet.c` is `virtio_legacy_is_little_endian()`),
//! so the 16-bit fields are native-endian here, not the little-endian of virtio 1.0.
//! Offsets (`csum_start`, `hdr_len`) count from the first byte of the Ethernet header.
//!
//! This module only encodes and decodes the header; it never looks into frames.

/// Bytes of `struct virtio_net_hdr` (the size `PACKET_VNET_HDR` uses).
pub const VNET_HDR_LEN: usize = 10;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum at `csum_start + csum_offset` holds only the
/// pseudo-header sum; the sum from `csum_start` to the end must be folded into it.
pub const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`: the transport checksum has been verified (receive only).
pub const F_DATA_VALID: u8 = 2;
/// `VIRTIO_NET_HDR_GSO_ECN`: ORed into `gso_type`: the TCP stream uses ECN (CWR on the first segment only).
const GSO_ECN: u8 = 0x80;

/// `gso_type` of a virtio-net header, without the ECN bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GsoType {
    /// `VIRTIO_NET_HDR_GSO_NONE`: an ordinary frame.
    #[default]
    None,
    /// `VIRTIO_NET_HDR_GSO_TCPV4`: TCP over IPv4, cut into `gso_size`-byte payloads.
    TcpV4,
    /// `VIRTIO_NET_HDR_GSO_UDP`: legacy UFO (IPv4 fragments); the kernel no longer sends it.
    Udp,
    /// `VIRTIO_NET_HDR_GSO_TCPV6`: TCP over IPv6.
    TcpV6,
    /// `VIRTIO_NET_HDR_GSO_UDP_L4`: UDP segmentation (one datagram per `gso_size` bytes).
    UdpL4,
    /// Any other value, kept as is.
    Unknown(u8),
}

impl GsoType {
    /// The wire value (without the ECN bit).
    pub fn to_u8(self) -> u8 {
        match self {
            GsoType::None => 0,
            GsoType::TcpV4 => 1,
            GsoType::Udp => 3,
            GsoType::TcpV6 => 4,
            GsoType::UdpL4 => 5,
            GsoType::Unknown(v) => v,
        }
    }

    /// Decodes a wire value (without the ECN bit).
    pub fn from_u8(v: u8) -> Self {
        match v {
            0 => GsoType::None,
            1 => GsoType::TcpV4,
            3 => GsoType::Udp,
            4 => GsoType::TcpV6,
            5 => GsoType::UdpL4,
            v => GsoType::Unknown(v),
        }
    }
}

/// A decoded `struct virtio_net_hdr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VnetHdr {
    /// `F_NEEDS_CSUM` and/or `F_DATA_VALID`.
    pub flags: u8,
    /// What kind of super-packet this is ([`GsoType::None`] for an ordinary frame).
    pub gso_type: GsoType,
    /// `VIRTIO_NET_HDR_GSO_ECN` was set in `gso_type`.
    pub gso_ecn: bool,
    /// Bytes of headers (Ethernet + IP + transport) that every segment repeats. On receive
    /// the kernel reports its linear length here, which can exceed the headers; on send it
    /// is a hint (the kernel raises it to `csum_start + csum_offset + 2`) and must not
    /// exceed the frame.
    pub hdr_len: u16,
    /// Transport payload bytes per segment (the MSS for TCP); 0 without GSO.
    pub gso_size: u16,
    /// With `F_NEEDS_CSUM`: where the checksummed range starts (the transport header),
    /// counted from the start of the Ethernet frame.
    pub csum_start: u16,
    /// With `F_NEEDS_CSUM`: where the checksum field is, from `csum_start` (TCP 16, UDP 6).
    pub csum_offset: u16,
}

impl VnetHdr {
    /// Decodes the first [`VNET_HDR_LEN`] bytes of `b` (`None` if shorter).
    pub fn parse(b: &[u8]) -> Option<Self> {
        let b: &[u8; VNET_HDR_LEN] = b.get(..VNET_HDR_LEN)?.try_into().ok()?;
        let u16_at = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        Some(VnetHdr {
            flags: b[0],
            gso_type: GsoType::from_u8(b[1] & !GSO_ECN),
            gso_ecn: b[1] & GSO_ECN != 0,
            hdr_len: u16_at(2),
            gso_size: u16_at(4),
            csum_start: u16_at(6),
            csum_offset: u16_at(8),
        })
    }

    /// Encodes the header as the kernel reads it.
    pub fn to_bytes(&self) -> [u8; VNET_HDR_LEN] {
        let mut b = [0u8; VNET_HDR_LEN];
        b[0] = self.flags;
        b[1] = self.gso_type.to_u8() | if self.gso_ecn { GSO_ECN } else { 0 };
        b[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
        b
    }

    /// `F_NEEDS_CSUM`: the transport checksum is partial (the pseudo-header sum only).
    pub fn needs_csum(&self) -> bool {
        self.flags & F_NEEDS_CSUM != 0
    }

    /// `F_DATA_VALID`: the kernel already verified the transport checksum.
    pub fn data_valid(&self) -> bool {
        self.flags & F_DATA_VALID != 0
    }

    /// A GSO super-packet (any `gso_type` but `None`).
    pub fn is_gso(&self) -> bool {
        self.gso_type != GsoType::None
    }

    /// The header for sending a frame received with `self` unchanged (or translated with
    /// the same header sizes, as NAT44 does): `DATA_VALID` is a receive-only flag and is
    /// cleared, everything else kept.
    pub fn for_forward(&self) -> Self {
        VnetHdr {
            flags: self.flags & F_NEEDS_CSUM,
            ..*self
        }
    }

    /// The header after translating the frame between IPv4 and IPv6 (RFC 7915): the
    /// network header grew by `l3_growth` bytes (+20 for 4->6, -20 for 6->4, more with
    /// extension headers), so `csum_start` and `hdr_len` move with it, a TCP super-packet
    /// changes `gso_type` to the new family, and `gso_size` shrinks by the growth so the
    /// segments still fit the same MTU (TCP is a byte stream: cutting it at a smaller MSS
    /// is allowed). `None` if a field would leave its range or the GSO type is not TCP.
    pub fn for_translated(&self, to_ipv6: bool, l3_growth: i32) -> Option<Self> {
        let shift = |v: u16| u16::try_from(i32::from(v) + l3_growth).ok();
        let gso_type = match (self.gso_type, to_ipv6) {
            (GsoType::None, _) => GsoType::None,
            (GsoType::TcpV4 | GsoType::TcpV6, true) => GsoType::TcpV6,
            (GsoType::TcpV4 | GsoType::TcpV6, false) => GsoType::TcpV4,
            (GsoType::UdpL4, _) => GsoType::UdpL4,
            _ => return None,
        };
        let gso_size = if gso_type == GsoType::None || l3_growth <= 0 {
            self.gso_size
        } else {
            u16::try_from(i32::from(self.gso_size) - l3_growth)
                .ok()
                .filter(|&s| s > 0)?
        };
        Some(VnetHdr {
            flags: self.flags & F_NEEDS_CSUM,
            gso_type,
            gso_ecn: self.gso_ecn,
            hdr_len: if self.hdr_len == 0 {
                0
            } else {
                shift(self.hdr_len)?
            },
            gso_size,
            csum_start: if self.needs_csum() {
                shift(self.csum_start)?
            } else {
                self.csum_start
            },
            csum_offset: self.csum_offset,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_layout() {
        let h = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GsoType::TcpV4,
            gso_ecn: true,
            hdr_len: 66,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        };
        let b = h.to_bytes();
        assert_eq!(b[0], 1);
        assert_eq!(b[1], 0x81);
        assert_eq!(&b[4..6], &1448u16.to_ne_bytes());
        assert_eq!(&b[6..8], &34u16.to_ne_bytes());
        assert_eq!(VnetHdr::parse(&b), Some(h));
        assert_eq!(VnetHdr::parse(&b[..9]), None);
        for v in 0..=255u8 {
            let mut b = [0u8; VNET_HDR_LEN];
            b[1] = v;
            assert_eq!(VnetHdr::parse(&b).unwrap().to_bytes(), b);
        }
    }

    #[test]
    fn forward_clears_receive_only_flag() {
        let h = VnetHdr {
            flags: F_NEEDS_CSUM | F_DATA_VALID,
            ..VnetHdr::default()
        };
        assert_eq!(h.for_forward().flags, F_NEEDS_CSUM);
        assert!(!VnetHdr::default().for_forward().needs_csum());
    }

    #[test]
    fn translation_moves_offsets_and_family() {
        let v4 = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GsoType::TcpV4,
            gso_ecn: false,
            hdr_len: 66,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        };
        let v6 = v4.for_translated(true, 20).unwrap();
        assert_eq!(
            (v6.gso_type, v6.hdr_len, v6.csum_start, v6.gso_size),
            (GsoType::TcpV6, 86, 54, 1428)
        );
        let back = v6.for_translated(false, -20).unwrap();
        assert_eq!(
            (back.gso_type, back.hdr_len, back.csum_start, back.gso_size),
            (GsoType::TcpV4, 66, 34, 1428)
        );
        let plain = VnetHdr::default().for_translated(true, 20).unwrap();
        assert_eq!(plain, VnetHdr::default());
        let legacy_ufo = VnetHdr {
            gso_type: GsoType::Udp,
            ..v4
        };
        assert_eq!(legacy_ufo.for_translated(true, 20), None);
        let tiny = VnetHdr { gso_size: 20, ..v4 };
        assert_eq!(tiny.for_translated(true, 20), None);
    }
}
