//! The XDP fast path's maps (issue 15 item 2): what user space installs so the steering
//! program (`bpf/fast_path.h`) rewrites and redirects a flow's packets itself.
//!
//! One [`FastPath`] per interface: its `fast_v4` map holds the flows *arriving* on that
//! interface, each with the header fields it leaves with, checksum deltas computed here
//! once, the egress slot in its `tx_port` devmap (0 inside, 1 outside, set with
//! [`FastPath::set_ports`]) and the Ethernet addresses. The program stamps each hit's
//! `last_seen` (CLOCK_MONOTONIC, as [`monotonic_ns`]) and counts per CPU.
//!
//! Like the rest of io this knows no NAT: an entry is "packets with this 5-tuple leave
//! with that one"; which flows qualify and when is the caller's business.

use std::io;
use std::net::Ipv4Addr;
use std::sync::Mutex;

use aya::maps::{DevMap, HashMap, MapData, MapError, PerCpuArray};

/// IP protocol numbers the fast path handles.
pub const PROTO_TCP: u8 = 6;
/// UDP.
pub const PROTO_UDP: u8 = 17;

/// One direction of a flow, as its packets carry it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowTuple {
    /// `PROTO_TCP` or `PROTO_UDP`.
    pub proto: u8,
    /// Source address.
    pub src: Ipv4Addr,
    /// Source port.
    pub sport: u16,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Destination port.
    pub dport: u16,
}

/// What the packets of one [`FlowTuple`] leave with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastRewrite {
    /// The tuple after the rewrite (same protocol).
    pub to: FlowTuple,
    /// The `tx_port` slot of the interface it leaves by (0 or 1).
    pub egress: u32,
    /// Next hop's MAC.
    pub dst_mac: [u8; 6],
    /// The egress interface's MAC.
    pub src_mac: [u8; 6],
    /// Decrement the TTL (and leave packets arriving with TTL <= 1 to user space).
    pub decrement_ttl: bool,
    /// Packets with a longer IP total length go to user space.
    pub mtu: u16,
}

/// `struct fast_key` in bpf/fast_path.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Key {
    saddr: [u8; 4],
    daddr: [u8; 4],
    sport: [u8; 2],
    dport: [u8; 2],
    proto: u8,
    pad: [u8; 3],
}

/// `struct fast_val` in bpf/fast_path.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Val {
    saddr: [u8; 4],
    daddr: [u8; 4],
    sport: [u8; 2],
    dport: [u8; 2],
    ip_delta: [u8; 2],
    l4_delta: [u8; 2],
    egress: u32,
    dmac: [u8; 6],
    smac: [u8; 6],
    decrement_ttl: u8,
    pad0: u8,
    mtu: u16,
    pad1: u32,
    last_seen: u64,
}

const _: () = assert!(std::mem::size_of::<Key>() == 16);
const _: () = assert!(std::mem::size_of::<Val>() == 48);

// SAFETY: plain old data, `repr(C)`, every field an integer or an integer array, no
// implicit padding (sizes asserted above): any bit pattern is valid.
unsafe impl aya::Pod for Key {}
// SAFETY: as for `Key`.
unsafe impl aya::Pod for Val {}

impl Key {
    fn of(t: &FlowTuple) -> Key {
        Key {
            saddr: t.src.octets(),
            daddr: t.dst.octets(),
            sport: t.sport.to_be_bytes(),
            dport: t.dport.to_be_bytes(),
            proto: t.proto,
            pad: [0; 3],
        }
    }
}

/// The ones'-complement sum `~old + new` of the 16-bit words changed (RFC 1624 eqn 3),
/// folded to 16 bits. Folding early gives the same update as folding late (both operands
/// are in the same residue class mod 0xFFFF and the sum they are added to is positive).
fn delta(pairs: &[(u16, u16)]) -> u16 {
    let mut s: u64 = pairs
        .iter()
        .map(|&(o, n)| u64::from(!o) + u64::from(n))
        .sum();
    while s > 0xFFFF {
        s = (s & 0xFFFF) + (s >> 16);
    }
    s as u16
}

fn words(a: Ipv4Addr) -> [u16; 2] {
    let o = a.octets();
    [
        u16::from_be_bytes([o[0], o[1]]),
        u16::from_be_bytes([o[2], o[3]]),
    ]
}

/// The checksum deltas (IPv4 header, transport) of rewriting `from` to `r.to`.
fn deltas(from: &FlowTuple, r: &FastRewrite) -> (u16, u16) {
    let (os, od, ns, nd) = (
        words(from.src),
        words(from.dst),
        words(r.to.src),
        words(r.to.dst),
    );
    let addrs = [
        (os[0], ns[0]),
        (os[1], ns[1]),
        (od[0], nd[0]),
        (od[1], nd[1]),
    ];
    let mut ip: Vec<(u16, u16)> = addrs.to_vec();
    if r.decrement_ttl {
        // `~w + (w - 0x0100)` is 0xFEFF for every TTL word w >= 0x0100.
        ip.push((0x0100, 0));
    }
    let mut l4 = addrs.to_vec();
    l4.push((from.sport, r.to.sport));
    l4.push((from.dport, r.to.dport));
    (delta(&ip), delta(&l4))
}

/// Counters of the fast path, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FastPathStats {
    /// Packets rewritten and redirected by the program.
    pub packets: u64,
    /// Their bytes (Ethernet frames).
    pub bytes: u64,
    /// Hits whose egress slot had no interface (sent to user space instead).
    pub no_port: u64,
    /// IPv4 TCP/UDP packets looked up and not found (a flow not offloaded: sent to user
    /// space, the AF_XDP socket).
    pub misses: u64,
}

/// One interface's fast-path maps (see the module doc).
pub struct FastPath {
    flows: Mutex<HashMap<MapData, Key, Val>>,
    ports: Mutex<DevMap<MapData>>,
    stats: PerCpuArray<MapData, u64>,
    capacity: u32,
}

impl std::fmt::Debug for FastPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastPath")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

fn map_err(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("XDP fast path: {what}: {e}"))
}

impl FastPath {
    /// Takes the fast path's maps out of the loaded object.
    pub(crate) fn take(ebpf: &mut aya::Ebpf, capacity: u32) -> io::Result<Self> {
        let mut take = |name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| map_err("XDP object", format!("no map {name}")))
        };
        let flows = HashMap::try_from(take("fast_v4")?).map_err(|e| map_err("fast_v4", e))?;
        let ports = DevMap::try_from(take("tx_port")?).map_err(|e| map_err("tx_port", e))?;
        let stats =
            PerCpuArray::try_from(take("fast_stats")?).map_err(|e| map_err("fast_stats", e))?;
        Ok(FastPath {
            flows: Mutex::new(flows),
            ports: Mutex::new(ports),
            stats,
            capacity,
        })
    }

    /// The most flows (directions) the map holds.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Sets the interfaces redirected to: slot 0 (inside) and 1 (outside).
    pub fn set_ports(&self, ifindexes: [u32; 2]) -> io::Result<()> {
        let mut ports = self.ports.lock().unwrap_or_else(|e| e.into_inner());
        for (slot, ifindex) in ifindexes.into_iter().enumerate() {
            ports
                .set(slot as u32, ifindex, None, 0)
                .map_err(|e| map_err("tx_port", e))?;
        }
        Ok(())
    }

    /// Installs (or replaces) the rewrite of the packets of `from` arriving here. Fails
    /// when the map is full (`E2BIG`) or the kernel refuses.
    pub fn insert(&self, from: &FlowTuple, r: &FastRewrite) -> io::Result<()> {
        let (ip, l4) = deltas(from, r);
        let v = Val {
            saddr: r.to.src.octets(),
            daddr: r.to.dst.octets(),
            sport: r.to.sport.to_be_bytes(),
            dport: r.to.dport.to_be_bytes(),
            ip_delta: ip.to_be_bytes(),
            l4_delta: l4.to_be_bytes(),
            egress: r.egress,
            dmac: r.dst_mac,
            smac: r.src_mac,
            decrement_ttl: u8::from(r.decrement_ttl),
            pad0: 0,
            mtu: r.mtu,
            pad1: 0,
            last_seen: 0,
        };
        let mut flows = self.flows.lock().unwrap_or_else(|e| e.into_inner());
        flows
            .insert(Key::of(from), v, 0)
            .map_err(|e| map_err("fast_v4 insert", e))
    }

    /// Removes the entry of `from`; whether there was one.
    pub fn remove(&self, from: &FlowTuple) -> bool {
        let mut flows = self.flows.lock().unwrap_or_else(|e| e.into_inner());
        flows.remove(&Key::of(from)).is_ok()
    }

    /// The last time (CLOCK_MONOTONIC ns, see [`monotonic_ns`]) the program forwarded a
    /// packet of `from` (to within 50 ms), 0 if never; `None` without an entry.
    pub fn last_seen_ns(&self, from: &FlowTuple) -> Option<u64> {
        let flows = self.flows.lock().unwrap_or_else(|e| e.into_inner());
        match flows.get(&Key::of(from), 0) {
            Ok(v) => Some(v.last_seen),
            Err(MapError::KeyNotFound) => None,
            Err(_) => None,
        }
    }

    /// The program's counters, summed over CPUs.
    pub fn stats(&self) -> FastPathStats {
        let sum = |i: u32| {
            self.stats
                .get(&i, 0)
                .map(|v| v.iter().copied().fold(0u64, u64::wrapping_add))
                .unwrap_or(0)
        };
        FastPathStats {
            packets: sum(0),
            bytes: sum(1),
            no_port: sum(2),
            misses: sum(3),
        }
    }
}

/// Now on CLOCK_MONOTONIC in nanoseconds: the clock `bpf_ktime_get_ns` stamps with.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum16(b: &[u8]) -> u16 {
        let mut s: u32 = b
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
            .sum();
        while s > 0xFFFF {
            s = (s & 0xFFFF) + (s >> 16);
        }
        !(s as u16)
    }

    /// The precomputed deltas give the same IPv4 header checksum as a full recompute,
    /// TTL decrement included (the XDP program applies them with RFC 1624 eqn 3).
    #[test]
    fn ip_delta_matches_a_full_recompute() {
        let from = FlowTuple {
            proto: PROTO_UDP,
            src: Ipv4Addr::new(10, 0, 0, 2),
            sport: 40000,
            dst: Ipv4Addr::new(198, 51, 100, 2),
            dport: 53,
        };
        let r = FastRewrite {
            to: FlowTuple {
                src: Ipv4Addr::new(203, 0, 113, 1),
                sport: 1025,
                ..from
            },
            egress: 1,
            dst_mac: [0; 6],
            src_mac: [0; 6],
            decrement_ttl: true,
            mtu: 1500,
        };
        let (ip, _) = deltas(&from, &r);
        let mut h = [
            0x45u8, 0, 0, 28, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 2, 198, 51, 100, 2,
        ];
        let c = sum16(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        let updated = !{
            let mut s = u32::from(!c) + u32::from(ip);
            while s > 0xFFFF {
                s = (s & 0xFFFF) + (s >> 16);
            }
            s as u16
        };
        h[8] = 63;
        h[12..16].copy_from_slice(&[203, 0, 113, 1]);
        h[10..12].copy_from_slice(&[0, 0]);
        assert_eq!(updated, sum16(&h));
    }
}
