//! The XDP fast path's maps: what user space installs so the steering
//! program (`bpf/fast_path.h`) rewrites and redirects a flow's packets itself.
//!
//! One [`FastPath`] per interface: its `fast_v4` map holds the flows *arriving* on that
//! interface, each with the header fields it leaves with, checksum deltas computed here
//! once, the egress slot in its `tx_port` devmap (0 inside, 1 outside, set with
//! [`FastPath::set_ports`]) and the Ethernet addresses. The program stamps each hit's
//! `last_seen` (CLOCK_MONOTONIC, as [`monotonic_ns`]) and counts per CPU.
//!
//! Two more maps carry flows whose packets change family (NAT64): `fast_64` holds IPv6
//! flows arriving inside that leave as IPv4 ([`Rewrite64`]), `fast_46` IPv4 flows arriving
//! outside that leave as IPv6 ([`Rewrite46`]). [`FastPath::enable`] says which maps the
//! program looks in.
//!
//! ILA's `fast_ila` (bpf/fast_path_ila.h) is keyed by an IPv6 destination alone: packets
//! to this address leave to that one ([`IlaRewrite`]), the transport checksum updated for
//! the change or left.
//!
//! Like the rest of io this knows no NAT: an entry is "packets with this 5-tuple leave
//! with that one"; which flows qualify and when is the caller's business.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Mutex;

use aya::maps::{Array, DevMap, HashMap, MapData, MapError, PerCpuArray};

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

/// Where a flow's packets leave: the interface and the Ethernet addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NextHop {
    /// The `tx_port` slot of the interface it leaves by (0 or 1).
    pub egress: u32,
    /// Next hop's MAC.
    pub dst_mac: [u8; 6],
    /// The egress interface's MAC.
    pub src_mac: [u8; 6],
}

/// What the packets of one [`FlowTuple`] leave with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastRewrite {
    /// The tuple after the rewrite (same protocol).
    pub to: FlowTuple,
    /// Where it leaves.
    pub hop: NextHop,
    /// Decrement the TTL (and leave packets arriving with TTL <= 1 to user space).
    pub decrement_ttl: bool,
    /// Packets with a longer IP total length go to user space.
    pub mtu: u16,
}

/// An IPv6 flow, as its packets carry it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowTuple6 {
    /// `PROTO_TCP` or `PROTO_UDP`.
    pub proto: u8,
    /// Source address.
    pub src: Ipv6Addr,
    /// Source port.
    pub sport: u16,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Destination port.
    pub dport: u16,
}

/// Which flows the program looks up (`config[0]`'s fast-path bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FastKind {
    /// IPv4 -> IPv4 (`fast_v4`).
    Nat44,
    /// IPv6 -> IPv4 (`fast_64`) and IPv4 -> IPv6 (`fast_46`).
    Nat64,
    /// IPv6 destinations (`fast_ila`).
    Ila,
}

/// One entry, as [`FastPath::remove`] and [`FastPath::last_seen_ns`] name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FastFlow {
    /// In `fast_v4`.
    V4(FlowTuple),
    /// In `fast_64`.
    V6To4(FlowTuple6),
    /// In `fast_46`.
    V4To6(FlowTuple),
    /// In `fast_ila`: packets to this destination.
    Ila(Ipv6Addr),
}

/// A header byte the translation writes: copied from the other family's header, or fixed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteRule {
    /// The IPv4 TOS from the IPv6 traffic class (or back).
    Copy,
    /// This value.
    Fixed(u8),
}

/// The DF flag of an IPv4 packet translated from IPv6 (no Fragment header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DfRule {
    /// Set above 1260 bytes (RFC 7915 §5.1); below, clear with a content-derived ID.
    Rfc,
    /// Always clear.
    Clear,
    /// Always set.
    Set,
}

/// What the packets of an IPv6 flow leave as: IPv4, by the other interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rewrite64 {
    /// The IPv4 tuple after the rewrite: its destination port is the arriving one.
    pub to: FlowTuple,
    /// Where it leaves.
    pub hop: NextHop,
    /// TTL = hop limit - 1 (else the hop limit).
    pub decrement_ttl: bool,
    /// The TOS.
    pub tos: ByteRule,
    /// The DF flag.
    pub df: DfRule,
    /// Packets whose IPv4 total length would exceed this go to user space.
    pub mtu: u16,
}

/// What the packets of an IPv4 flow leave as: IPv6, by the other interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rewrite46 {
    /// The IPv6 tuple after the rewrite: its source port is the arriving one.
    pub to: FlowTuple6,
    /// Where it leaves.
    pub hop: NextHop,
    /// Hop limit = TTL - 1 (else the TTL).
    pub decrement_ttl: bool,
    /// The traffic class.
    pub tc: ByteRule,
    /// Packets with DF whose IPv6 length would exceed this go to user space.
    pub mtu_df: u16,
    /// Packets without DF (which the translator fragments) likewise.
    pub mtu_nodf: u16,
}

/// What the IPv6 packets to one destination leave with (ILA): the destination `to`, by the
/// other interface, the hop limit decremented.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IlaRewrite {
    /// The destination after the rewrite.
    pub to: Ipv6Addr,
    /// Update the TCP/UDP/ICMPv6 checksum for the change of the destination's upper 64
    /// bits (adj-transport); `false`: leave it (no-action, and the checksum-neutral modes,
    /// whose `to` keeps the address's ones'-complement sum).
    pub adjust: bool,
    /// Where it leaves.
    pub hop: NextHop,
    /// Packets with a longer IPv6 length (header included) go to user space.
    pub mtu: u16,
}

/// `struct fast_val_ila` in bpf/fast_path_ila.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct ValIla {
    daddr: [u8; 16],
    l4_delta: [u8; 2],
    adjust: u8,
    pad0: u8,
    egress: u32,
    dmac: [u8; 6],
    smac: [u8; 6],
    mtu: u16,
    pad1: u16,
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

/// `struct fast_key6`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Key6 {
    saddr: [u8; 16],
    daddr: [u8; 16],
    sport: [u8; 2],
    dport: [u8; 2],
    proto: u8,
    pad: [u8; 3],
}

/// `struct fast_val64`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Val64 {
    saddr: [u8; 4],
    daddr: [u8; 4],
    sport: [u8; 2],
    siit_delta: [u8; 2],
    egress: u32,
    dmac: [u8; 6],
    smac: [u8; 6],
    decrement_ttl: u8,
    tos_copy: u8,
    tos: u8,
    df: u8,
    mtu: u16,
    pad0: u16,
    /// The flow's next IPv4 Identification (RFC 6864), advanced by the program.
    ident: u32,
    last_seen: u64,
}

/// `struct fast_val46`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Val46 {
    saddr: [u8; 16],
    daddr: [u8; 16],
    dport: [u8; 2],
    siit_delta: [u8; 2],
    egress: u32,
    dmac: [u8; 6],
    smac: [u8; 6],
    decrement_ttl: u8,
    tc_copy: u8,
    tc: u8,
    pad0: u8,
    mtu_df: u16,
    mtu_nodf: u16,
    pad1: u32,
    last_seen: u64,
}

const _: () = assert!(std::mem::size_of::<Key>() == 16);
const _: () = assert!(std::mem::size_of::<Val>() == 48);
const _: () = assert!(std::mem::size_of::<Key6>() == 40);
const _: () = assert!(std::mem::size_of::<Val64>() == 48);
const _: () = assert!(std::mem::size_of::<Val46>() == 72);
const _: () = assert!(std::mem::size_of::<ValIla>() == 40);

// SAFETY: plain old data, `repr(C)`, every field an integer or an integer array, no
// implicit padding (sizes asserted above): any bit pattern is valid.
unsafe impl aya::Pod for Key {}
// SAFETY: as for `Key`.
unsafe impl aya::Pod for Val {}
// SAFETY: as for `Key`.
unsafe impl aya::Pod for Key6 {}
// SAFETY: as for `Key`.
unsafe impl aya::Pod for Val64 {}
// SAFETY: as for `Key`.
unsafe impl aya::Pod for Val46 {}
// SAFETY: as for `Key`.
unsafe impl aya::Pod for ValIla {}

impl Key6 {
    fn of(t: &FlowTuple6) -> Key6 {
        Key6 {
            saddr: t.src.octets(),
            daddr: t.dst.octets(),
            sport: t.sport.to_be_bytes(),
            dport: t.dport.to_be_bytes(),
            proto: t.proto,
            pad: [0; 3],
        }
    }
}

impl ByteRule {
    /// (copy, value) as the program reads them.
    fn fields(self) -> (u8, u8) {
        match self {
            ByteRule::Copy => (1, 0),
            ByteRule::Fixed(v) => (0, v),
        }
    }
}

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

/// The folded ones'-complement sum of `words`.
fn sum_words(words: impl IntoIterator<Item = u16>) -> u16 {
    let mut s: u64 = words.into_iter().map(u64::from).sum();
    while s > 0xFFFF {
        s = (s & 0xFFFF) + (s >> 16);
    }
    s as u16
}

fn words6(a: Ipv6Addr) -> [u16; 8] {
    a.segments()
}

/// The transport checksum delta of replacing a pseudo-header's IPv6 addresses by IPv4
/// ones (`to_v6` false) or back: RFC 7915 §5.5 / §4.5. Protocol and length are the same
/// number in both pseudo-headers, so only the address sums change (as xlat::siit does
/// it: one 16-bit word, the sum of each side's address words).
fn siit_delta(v4: (Ipv4Addr, Ipv4Addr), v6: (Ipv6Addr, Ipv6Addr), to_v6: bool) -> u16 {
    let s4 = sum_words(words(v4.0).into_iter().chain(words(v4.1)));
    let s6 = sum_words(words6(v6.0).into_iter().chain(words6(v6.1)));
    if to_v6 {
        delta(&[(s4, s6)])
    } else {
        delta(&[(s6, s4)])
    }
}

/// ILA's transport checksum delta (adj-transport): the destination's upper 64 bits, word
/// by word, as xlat::ila's transport_fix records them (the identifier does not change).
fn ila_delta(from: Ipv6Addr, to: Ipv6Addr) -> u16 {
    let (f, t) = (from.segments(), to.segments());
    delta(&[(f[0], t[0]), (f[1], t[1]), (f[2], t[2]), (f[3], t[3])])
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
    /// TCP/UDP packets (IPv4; IPv6 under NAT64, SIIT and CLAT; ILA's IPv6 destinations)
    /// looked up and not found (a flow not offloaded: sent to user
    /// space, the AF_XDP socket).
    pub misses: u64,
    /// At the tc hook: packets the program began to rewrite and could not forward (a
    /// helper failed after the first change), dropped. 0 unless something is wrong.
    pub lost: u64,
}

/// One interface's fast-path maps (see the module doc).
pub struct FastPath {
    flows: Mutex<HashMap<MapData, Key, Val>>,
    flows64: Mutex<HashMap<MapData, Key6, Val64>>,
    flows46: Mutex<HashMap<MapData, Key, Val46>>,
    /// Keyed by the IPv6 destination's 16 bytes.
    ila: Mutex<HashMap<MapData, [u8; 16], ValIla>>,
    config: Mutex<Array<MapData, u32>>,
    ports: Mutex<DevMap<MapData>>,
    stats: PerCpuArray<MapData, u64>,
    capacity: u32,
    /// The secret key that starts each NAT64 flow's Identification counter, and the
    /// number of counters started (part of each start: a flow removed and installed
    /// again does not count from where it started before).
    ident_key: std::hash::RandomState,
    ident_starts: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for FastPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastPath")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

fn map_err(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("fast path: {what}: {e}"))
}

impl FastPath {
    /// Takes the fast path's maps out of the loaded object.
    pub(crate) fn take(ebpf: &mut aya::Ebpf, capacity: u32) -> io::Result<Self> {
        let mut take = |name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| map_err("BPF object", format!("no map {name}")))
        };
        let flows = HashMap::try_from(take("fast_v4")?).map_err(|e| map_err("fast_v4", e))?;
        let flows64 = HashMap::try_from(take("fast_64")?).map_err(|e| map_err("fast_64", e))?;
        let flows46 = HashMap::try_from(take("fast_46")?).map_err(|e| map_err("fast_46", e))?;
        let ila = HashMap::try_from(take("fast_ila")?).map_err(|e| map_err("fast_ila", e))?;
        let config = Array::try_from(take("config")?).map_err(|e| map_err("config", e))?;
        let ports = DevMap::try_from(take("tx_port")?).map_err(|e| map_err("tx_port", e))?;
        let stats =
            PerCpuArray::try_from(take("fast_stats")?).map_err(|e| map_err("fast_stats", e))?;
        Ok(FastPath {
            flows: Mutex::new(flows),
            flows64: Mutex::new(flows64),
            flows46: Mutex::new(flows46),
            ila: Mutex::new(ila),
            config: Mutex::new(config),
            ports: Mutex::new(ports),
            stats,
            capacity,
            ident_key: std::hash::RandomState::new(),
            ident_starts: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The most flows (directions) the map holds.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Makes the program look up the flows of `kind` (and no others) from now on.
    pub fn enable(&self, kind: FastKind) -> io::Result<()> {
        let mut cfg = self.config.lock().unwrap_or_else(|e| e.into_inner());
        let flags = cfg.get(&0, 0).map_err(|e| map_err("config", e))?;
        let on = match kind {
            FastKind::Nat44 => CFG_FAST_V4,
            FastKind::Nat64 => CFG_FAST_64 | CFG_FAST_46,
            FastKind::Ila => CFG_FAST_ILA,
        };
        let flags = (flags & !(CFG_FAST_V4 | CFG_FAST_64 | CFG_FAST_46 | CFG_FAST_ILA)) | on;
        cfg.set(0, flags, 0).map_err(|e| map_err("config", e))
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
            egress: r.hop.egress,
            dmac: r.hop.dst_mac,
            smac: r.hop.src_mac,
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

    /// Installs (or replaces) the translation of the IPv6 packets of `from` arriving here.
    pub fn insert_64(&self, from: &FlowTuple6, r: &Rewrite64) -> io::Result<()> {
        let (tos_copy, tos) = r.tos.fields();
        let v = Val64 {
            saddr: r.to.src.octets(),
            daddr: r.to.dst.octets(),
            sport: r.to.sport.to_be_bytes(),
            siit_delta: siit_delta((r.to.src, r.to.dst), (from.src, from.dst), false).to_be_bytes(),
            egress: r.hop.egress,
            dmac: r.hop.dst_mac,
            smac: r.hop.src_mac,
            decrement_ttl: u8::from(r.decrement_ttl),
            tos_copy,
            tos,
            df: match r.df {
                DfRule::Rfc => 0,
                DfRule::Clear => 1,
                DfRule::Set => 2,
            },
            mtu: r.mtu,
            ..Val64::default()
        };
        let mut flows = self.flows64.lock().unwrap_or_else(|e| e.into_inner());
        // The Identification counter goes on where a replaced entry left it (a repeat
        // within the datagrams' lifetime is what RFC 6864 forbids); a new flow's starts at
        // a keyed random value: from outside, where its IDs stand cannot be guessed (to
        // inject fragments into its datagrams).
        let ident = match flows.get(&Key6::of(from), 0) {
            Ok(old) => old.ident,
            Err(_) => {
                let n = (self.ident_starts).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                std::hash::BuildHasher::hash_one(&self.ident_key, (from, n)) as u32
            }
        };
        let v = Val64 { ident, ..v };
        flows
            .insert(Key6::of(from), v, 0)
            .map_err(|e| map_err("fast_64 insert", e))
    }

    /// Installs (or replaces) the translation of the IPv4 packets of `from` arriving here.
    pub fn insert_46(&self, from: &FlowTuple, r: &Rewrite46) -> io::Result<()> {
        let (tc_copy, tc) = r.tc.fields();
        let v = Val46 {
            saddr: r.to.src.octets(),
            daddr: r.to.dst.octets(),
            dport: r.to.dport.to_be_bytes(),
            siit_delta: siit_delta((from.src, from.dst), (r.to.src, r.to.dst), true).to_be_bytes(),
            egress: r.hop.egress,
            dmac: r.hop.dst_mac,
            smac: r.hop.src_mac,
            decrement_ttl: u8::from(r.decrement_ttl),
            tc_copy,
            tc,
            mtu_df: r.mtu_df,
            mtu_nodf: r.mtu_nodf,
            ..Val46::default()
        };
        let mut flows = self.flows46.lock().unwrap_or_else(|e| e.into_inner());
        flows
            .insert(Key::of(from), v, 0)
            .map_err(|e| map_err("fast_46 insert", e))
    }

    /// Installs (or replaces) the rewrite of the IPv6 packets to `from` arriving here.
    pub fn insert_ila(&self, from: Ipv6Addr, r: &IlaRewrite) -> io::Result<()> {
        let v = ValIla {
            daddr: r.to.octets(),
            l4_delta: ila_delta(from, r.to).to_be_bytes(),
            adjust: u8::from(r.adjust),
            egress: r.hop.egress,
            dmac: r.hop.dst_mac,
            smac: r.hop.src_mac,
            mtu: r.mtu,
            ..ValIla::default()
        };
        lock(&self.ila)
            .insert(from.octets(), v, 0)
            .map_err(|e| map_err("fast_ila insert", e))
    }

    /// Removes the entry of `from`; whether there was one.
    pub fn remove(&self, from: &FastFlow) -> bool {
        match from {
            FastFlow::V4(t) => lock(&self.flows).remove(&Key::of(t)).is_ok(),
            FastFlow::V6To4(t) => lock(&self.flows64).remove(&Key6::of(t)).is_ok(),
            FastFlow::V4To6(t) => lock(&self.flows46).remove(&Key::of(t)).is_ok(),
            FastFlow::Ila(a) => lock(&self.ila).remove(&a.octets()).is_ok(),
        }
    }

    /// The last time (CLOCK_MONOTONIC ns, see [`monotonic_ns`]) the program forwarded a
    /// packet of `from` (to within 50 ms), 0 if never; `None` without an entry.
    pub fn last_seen_ns(&self, from: &FastFlow) -> Option<u64> {
        fn seen<V: aya::Pod>(r: Result<V, MapError>, at: impl Fn(&V) -> u64) -> Option<u64> {
            r.ok().map(|v| at(&v))
        }
        match from {
            FastFlow::V4(t) => seen(lock(&self.flows).get(&Key::of(t), 0), |v| v.last_seen),
            FastFlow::V6To4(t) => seen(lock(&self.flows64).get(&Key6::of(t), 0), |v| v.last_seen),
            FastFlow::V4To6(t) => seen(lock(&self.flows46).get(&Key::of(t), 0), |v| v.last_seen),
            // ILA mappings do not expire: the program stamps nothing, so nothing is read.
            FastFlow::Ila(_) => None,
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
            lost: sum(4),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `config[0]`'s fast-path bits (`QN_CFG_FAST_*` in bpf/xdp_steer.c).
const CFG_FAST_V4: u32 = 8;
const CFG_FAST_64: u32 = 16;
const CFG_FAST_46: u32 = 32;
const CFG_FAST_ILA: u32 = 64;

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
            hop: NextHop {
                egress: 1,
                dst_mac: [0; 6],
                src_mac: [0; 6],
            },
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

    /// The transport checksum with the pseudo-header `addrs` (their bytes), `proto` and
    /// the segment's length, over `seg` (whose checksum field is zero).
    fn l4_csum(addrs: &[u8], proto: u8, seg: &[u8]) -> u16 {
        let mut b = addrs.to_vec();
        b.extend_from_slice(&[0, proto]);
        b.extend_from_slice(&(seg.len() as u16).to_be_bytes());
        b.extend_from_slice(seg);
        sum16(&b)
    }

    fn apply(c: u16, d: u16) -> u16 {
        let mut s = u32::from(!c) + u32::from(d);
        while s > 0xFFFF {
            s = (s & 0xFFFF) + (s >> 16);
        }
        !(s as u16)
    }

    /// The NAT64 maps' pseudo-header deltas turn a segment's IPv6 checksum into its IPv4
    /// one and back, as a full recompute gives them (the program applies them with RFC
    /// 1624 eqn 3, as xlat::siit does).
    #[test]
    fn siit_delta_matches_a_full_recompute() {
        let (h6, s6): (Ipv6Addr, Ipv6Addr) = (
            "2001:db8:1::2".parse().unwrap(),
            "2001:db8:64::c633:6402".parse().unwrap(),
        );
        let (p4, s4) = (
            Ipv4Addr::new(203, 0, 113, 1),
            Ipv4Addr::new(198, 51, 100, 2),
        );
        for seg in [
            vec![
                0x9c, 0x40, 0x00, 0x50, 1, 2, 3, 4, 5, 6, 7, 8, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0,
            ],
            vec![
                0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0,
                0, 0, 0, 0, 0xab,
            ],
        ] {
            let v6: Vec<u8> = [h6.octets(), s6.octets()].concat();
            let v4: Vec<u8> = [p4.octets(), s4.octets()].concat();
            let c6 = l4_csum(&v6, PROTO_TCP, &seg);
            let c4 = l4_csum(&v4, PROTO_TCP, &seg);
            assert_eq!(apply(c6, siit_delta((p4, s4), (h6, s6), false)), c4);
            assert_eq!(apply(c4, siit_delta((p4, s4), (h6, s6), true)), c6);
        }
    }
}
