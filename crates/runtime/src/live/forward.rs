//! Forwarding: which link a packet leaves by and to which next hop (the kernel's routes
//! and neighbours, read from the [`NetView`]), the Ethernet header it leaves with, and
//! what is not the gateway's to forward (its own addresses, link-local, multicast and
//! broadcast). A packet whose next hop the kernel has not resolved yet is handed to the
//! kernel ([`Handoff`]), which routes it and resolves the neighbour for the packets that
//! follow: nothing is lost while ARP / neighbour discovery completes.
//!
//! The requests to resolve a next hop are bounded: they go on a [`ProbeQueue`] of
//! [`PROBE_QUEUE`] slots that a worker never waits on (a full queue skips the request and
//! counts it, `probe_skipped`: the kernel, which got the packet, resolves the neighbour
//! anyway), and the control thread that sends the probes remembers at most
//! [`MAX_PROBED`] next hops, each for [`PROBE_MEMORY`] (see `netview::ProbeLimiter`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{mpsc, Mutex};

use io::rawip::{RawIpv4, RawIpv6};
use io::VnetHdr;

use super::netview::{Link, NetView};
use super::stats::IoCounters;

/// Where the packets go that the gateway cannot send itself yet: to the kernel, with a
/// request to resolve their next hop.
pub(crate) trait Handoff: Send + Sync {
    /// Hands `pkt` (an IP packet) to the kernel to route, and asks for `next_hop` on
    /// interface `ifindex` to be resolved. Whether that request was queued (`false`: the
    /// probe queue was full and the request skipped; the packet still went).
    fn to_kernel(&self, pkt: &[u8], ifindex: u32, next_hop: IpAddr) -> bool;
}

/// Requests to resolve a next hop waiting for the control thread: at most this many.
pub(crate) const PROBE_QUEUE: usize = 256;

/// Next hops the control thread remembers having probed (one probe a second each).
pub(crate) const MAX_PROBED: usize = 4096;

/// How long the control thread remembers having probed a next hop.
pub(crate) const PROBE_MEMORY: std::time::Duration = std::time::Duration::from_secs(10);

/// A bounded queue of requests to resolve a next hop (interface index, address), from
/// the workers to the control thread. Workers never block on it and take no lock.
#[derive(Clone, Debug)]
pub(crate) struct ProbeQueue(mpsc::SyncSender<(u32, IpAddr)>);

impl ProbeQueue {
    /// A queue of `capacity` requests and its receiving end.
    pub fn bounded(capacity: usize) -> (Self, mpsc::Receiver<(u32, IpAddr)>) {
        let (tx, rx) = mpsc::sync_channel(capacity);
        (ProbeQueue(tx), rx)
    }

    /// Queues a request unless the queue is full (or the control thread gone): whether
    /// it was queued.
    pub fn request(&self, ifindex: u32, next_hop: IpAddr) -> bool {
        self.0.try_send((ifindex, next_hop)).is_ok()
    }
}

/// The real hand-off: raw IP sockets, and neighbour probes sent by the control thread.
pub(crate) struct KernelHandoff {
    raw: Mutex<RawIpv4>,
    raw6: Mutex<RawIpv6>,
    probes: ProbeQueue,
}

impl KernelHandoff {
    /// Over the raw sockets `raw` and `raw6`, asking `probes` to resolve next hops.
    pub fn new(raw: RawIpv4, raw6: RawIpv6, probes: ProbeQueue) -> Self {
        KernelHandoff {
            raw: Mutex::new(raw),
            raw6: Mutex::new(raw6),
            probes,
        }
    }
}

impl Handoff for KernelHandoff {
    fn to_kernel(&self, pkt: &[u8], ifindex: u32, next_hop: IpAddr) -> bool {
        let queued = self.probes.request(ifindex, next_hop);
        match next_hop {
            IpAddr::V4(_) => {
                if let Ok(mut raw) = self.raw.lock() {
                    raw.send(pkt);
                }
            }
            IpAddr::V6(_) => {
                if let Ok(mut raw) = self.raw6.lock() {
                    raw.send(pkt);
                }
            }
        }
        queued
    }
}

/// What choosing a next hop needs for one batch: the links, the network view, the
/// hand-off.
pub(crate) struct Forwarding<'a> {
    pub links: &'a [Link; 2],
    pub view: &'a NetView,
    pub handoff: &'a dyn Handoff,
}

impl Forwarding<'_> {
    /// Whether a packet to `dst` is the kernel's: the gateway's own addresses, and
    /// link-local, multicast and broadcast destinations (neighbour discovery, routing
    /// protocols).
    pub fn for_kernel(&self, dst: IpAddr) -> bool {
        link_scoped(dst)
            || match dst {
                IpAddr::V4(a) => self.view.local.contains(&a),
                IpAddr::V6(a) => self.view.local6.contains(&a),
            }
    }

    /// The link (0 inside, 1 outside) and next-hop MAC for the IP packet `pkt`. When the
    /// route is missing or leaves by neither link, counts `no_route`; when the neighbour
    /// is not resolved yet, hands the packet to the kernel and counts `via_kernel`.
    pub fn next_hop(&self, pkt: &[u8], io: &mut IoCounters) -> Option<(usize, [u8; 6])> {
        let routes = &self.view.routes;
        let hop = match ip_dst(pkt)? {
            IpAddr::V4(a) => routes.lookup(a).map(|(i, h)| (i, IpAddr::V4(h))),
            IpAddr::V6(a) => routes.lookup6(a).map(|(i, h)| (i, IpAddr::V6(h))),
        };
        let Some((ifindex, next_hop)) = hop else {
            io.no_route += 1;
            return None;
        };
        let Some(out) = self.links.iter().position(|l| l.index == ifindex) else {
            io.no_route += 1;
            return None;
        };
        let neigh = &self.view.neighbors;
        let mac = match next_hop {
            IpAddr::V4(h) => neigh.get(ifindex, h),
            IpAddr::V6(h) => neigh.get6(ifindex, h),
        };
        if let Some(mac) = mac {
            return Some((out, mac));
        }
        if !self.handoff.to_kernel(pkt, ifindex, next_hop) {
            io.probe_skipped += 1;
        }
        io.via_kernel += 1;
        None
    }

    /// Routes the framed IP packet `framed` (14 bytes of room for the Ethernet header in
    /// front): finds its link and next hop ([`next_hop`](Self::next_hop)), refuses it
    /// (`oversize`) when longer than that link's MTU, else writes its Ethernet header.
    /// The link it leaves by.
    pub fn frame_out(&self, framed: &mut [u8], io: &mut IoCounters) -> Option<usize> {
        let (out, mac) = self.next_hop(framed.get(14..)?, io)?;
        if framed.len() - 14 > self.links[out].mtu {
            io.oversize += 1;
            return None;
        }
        self.write_eth(framed, out, mac);
        Some(out)
    }

    /// Writes the Ethernet header in the first 14 bytes of `framed` (the IP packet after
    /// them) for leaving by link `out` to `mac`.
    pub fn write_eth(&self, framed: &mut [u8], out: usize, mac: [u8; 6]) {
        if framed.len() < 15 {
            return;
        }
        let ethertype: u16 = if framed[14] >> 4 == 6 { 0x86dd } else { 0x0800 };
        framed[0..6].copy_from_slice(&mac);
        framed[6..12].copy_from_slice(&self.links[out].mac);
        framed[12..14].copy_from_slice(&ethertype.to_be_bytes());
    }
}

/// A GSO header whose segments fit `mtu`: `gso_size` lowered to the room left after the
/// network and transport headers of the super-packet `pkt` (at offset `l3` of its frame).
/// `None` when not even the headers fit.
pub(crate) fn fit_segments(mut v: VnetHdr, pkt: &[u8], l3: usize, mtu: usize) -> Option<VnetHdr> {
    let l4 = usize::from(v.csum_start).checked_sub(l3)?;
    let l4_hdr = match pkt.get(l4 + 12) {
        // TCP: data offset; UDP: 8.
        Some(b) if v.csum_offset == 16 => usize::from(b >> 4) * 4,
        _ => 8,
    };
    let room = mtu.checked_sub(l4 + l4_hdr)?;
    if usize::from(v.gso_size) > room {
        v.gso_size = u16::try_from(room).ok()?;
    }
    Some(v)
}

/// Destinations that are the host's business whatever the configuration, never
/// translated or forwarded: IPv4 broadcast and multicast, IPv6 multicast and link-local
/// (neighbour discovery, MLD, router advertisements).
pub(crate) fn link_scoped(dst: IpAddr) -> bool {
    match dst {
        IpAddr::V4(a) => a.is_broadcast() || a.is_multicast(),
        IpAddr::V6(a) => a.is_multicast() || a.is_unicast_link_local(),
    }
}

/// The destination of the IP packet `p` (IPv4 or IPv6), if it is long enough to have one.
pub(crate) fn ip_dst(p: &[u8]) -> Option<IpAddr> {
    match p.first().map(|b| b >> 4) {
        Some(4) => {
            let d = p.get(16..20)?;
            Some(IpAddr::V4(Ipv4Addr::new(d[0], d[1], d[2], d[3])))
        }
        Some(6) => {
            let d: [u8; 16] = p.get(24..40)?.try_into().ok()?;
            Some(IpAddr::V6(Ipv6Addr::from(d)))
        }
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use io::netlink::{nud, Neighbor, NeighborCache, Route, RouteTable};

    /// Records what was handed to the kernel; with a [`ProbeQueue`], also queues the
    /// probe requests on it as the real hand-off does.
    #[derive(Default)]
    pub(crate) struct Recorder(
        pub Mutex<Vec<(Vec<u8>, u32, IpAddr)>>,
        pub Option<ProbeQueue>,
    );

    impl Handoff for Recorder {
        fn to_kernel(&self, pkt: &[u8], ifindex: u32, next_hop: IpAddr) -> bool {
            if let Ok(mut v) = self.0.lock() {
                v.push((pkt.to_vec(), ifindex, next_hop));
            }
            self.1.as_ref().is_none_or(|q| q.request(ifindex, next_hop))
        }
    }

    pub(crate) const IN_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
    pub(crate) const OUT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
    pub(crate) const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 1, 2];
    pub(crate) const SERVER_MAC: [u8; 6] = [2, 0, 0, 0, 2, 2];

    /// Inside link 10 (10.0.0.0/24, client 10.0.0.2 resolved), outside link 20
    /// (198.51.100.0/24, server .2 resolved, .3 not), a default route via .2 outside.
    pub(crate) fn links_and_view() -> ([Link; 2], NetView) {
        let links = [
            Link {
                name: "in0".into(),
                index: 10,
                mac: IN_MAC,
                mtu: 1500,
            },
            Link {
                name: "out0".into(),
                index: 20,
                mac: OUT_MAC,
                mtu: 1500,
            },
        ];
        let route = |dst: [u8; 4], len, gw: Option<[u8; 4]>, ifindex| Route {
            dst: Ipv4Addr::from(dst),
            prefix_len: len,
            gateway: gw.map(Ipv4Addr::from),
            ifindex,
            prefsrc: None,
            table: 254,
        };
        let routes = RouteTable::new(&[
            route([10, 0, 0, 0], 24, None, 10),
            route([198, 51, 100, 0], 24, None, 20),
            route([0, 0, 0, 0], 0, Some([198, 51, 100, 2]), 20),
            route([192, 0, 2, 0], 24, None, 99),
        ]);
        let neigh = |a: [u8; 4], mac, ifindex| Neighbor {
            ifindex,
            addr: Ipv4Addr::from(a),
            mac: Some(mac),
            state: nud::REACHABLE,
        };
        let view = NetView {
            routes,
            neighbors: NeighborCache::from_dump(&[
                neigh([10, 0, 0, 2], CLIENT_MAC, 10),
                neigh([198, 51, 100, 2], SERVER_MAC, 20),
            ]),
            local: vec![Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(198, 51, 100, 1)],
            local6: Vec::new(),
            addr4: [
                Some(Ipv4Addr::new(10, 0, 0, 1)),
                Some(Ipv4Addr::new(198, 51, 100, 1)),
            ],
            addr6: [None; 2],
        };
        (links, view)
    }

    fn pkt_to(dst: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[16..20].copy_from_slice(&dst);
        p
    }

    #[test]
    fn next_hop_by_route_and_neighbour() {
        let (links, view) = links_and_view();
        let rec = Recorder::default();
        let f = Forwarding {
            links: &links,
            view: &view,
            handoff: &rec,
        };
        let mut io = IoCounters::default();
        assert_eq!(
            f.next_hop(&pkt_to([10, 0, 0, 2]), &mut io),
            Some((0, CLIENT_MAC))
        );
        // Off-link: the default route's gateway.
        assert_eq!(
            f.next_hop(&pkt_to([203, 0, 113, 9]), &mut io),
            Some((1, SERVER_MAC))
        );
        // On-link but unresolved: the kernel takes it and is asked to resolve.
        assert_eq!(f.next_hop(&pkt_to([198, 51, 100, 3]), &mut io), None);
        assert_eq!(io.via_kernel, 1);
        let handed = rec.0.lock().unwrap();
        assert_eq!(handed.len(), 1);
        assert_eq!(
            (handed[0].1, handed[0].2),
            (20, "198.51.100.3".parse().unwrap())
        );
        drop(handed);
        // A route out of another interface is no route of ours.
        assert_eq!(f.next_hop(&pkt_to([192, 0, 2, 1]), &mut io), None);
        assert_eq!(io.no_route, 1);
        assert_eq!(
            f.next_hop(&[0x45], &mut io),
            None,
            "too short to have a destination"
        );
    }

    #[test]
    fn probe_requests_are_bounded_and_a_full_queue_is_counted() {
        let (links, view) = links_and_view();
        let (queue, rx) = ProbeQueue::bounded(4);
        let rec = Recorder(Mutex::default(), Some(queue));
        let f = Forwarding {
            links: &links,
            view: &view,
            handoff: &rec,
        };
        let mut io = IoCounters::default();
        // A flood to unresolved next hops: every packet still goes to the kernel, but
        // only four requests wait; the rest are skipped and counted, never blocking.
        for i in 0..1000u32 {
            let dst = [198, 51, 100, 3 + (i % 200) as u8];
            assert_eq!(f.next_hop(&pkt_to(dst), &mut io), None);
        }
        assert_eq!(io.via_kernel, 1000);
        assert_eq!(io.probe_skipped, 996);
        assert_eq!(
            rec.0.lock().unwrap().len(),
            1000,
            "every packet handed over"
        );
        let queued: Vec<_> = rx.try_iter().collect();
        assert_eq!(queued.len(), 4);
        assert_eq!(queued[0], (20, "198.51.100.3".parse().unwrap()));
        // Drained, the queue takes requests again.
        f.next_hop(&pkt_to([198, 51, 100, 9]), &mut io);
        assert_eq!(io.probe_skipped, 996);
        assert_eq!(rx.try_iter().count(), 1);
        // With the control thread gone, requests are skipped, not an error.
        drop(rx);
        f.next_hop(&pkt_to([198, 51, 100, 9]), &mut io);
        assert_eq!(io.probe_skipped, 997);
    }

    #[test]
    fn the_kernels_traffic_is_recognised() {
        let (links, view) = links_and_view();
        let rec = Recorder::default();
        let f = Forwarding {
            links: &links,
            view: &view,
            handoff: &rec,
        };
        for a in [
            "10.0.0.1",
            "255.255.255.255",
            "224.0.0.5",
            "fe80::1",
            "ff02::1",
        ] {
            assert!(f.for_kernel(a.parse().unwrap()), "{a}");
        }
        for a in ["10.0.0.2", "198.51.100.7", "2001:db8::1"] {
            assert!(!f.for_kernel(a.parse().unwrap()), "{a}");
        }
    }

    #[test]
    fn ethernet_header_for_the_leaving_link() {
        let (links, view) = links_and_view();
        let rec = Recorder::default();
        let f = Forwarding {
            links: &links,
            view: &view,
            handoff: &rec,
        };
        let mut framed = vec![0u8; 14 + 40];
        framed[14] = 0x60;
        f.write_eth(&mut framed, 1, SERVER_MAC);
        assert_eq!(&framed[..6], &SERVER_MAC);
        assert_eq!(&framed[6..12], &OUT_MAC);
        assert_eq!(&framed[12..14], &[0x86, 0xdd]);
    }

    #[test]
    fn gso_segments_are_fitted_to_the_mtu() {
        // IPv4 (20) + TCP (data offset 8: 32 bytes) at l3 = 14; csum_start counts from
        // the Ethernet header.
        let mut pkt = vec![0u8; 100];
        pkt[20 + 12] = 8 << 4;
        let v = VnetHdr {
            csum_start: 14 + 20,
            csum_offset: 16,
            gso_size: 1448,
            ..VnetHdr::default()
        };
        assert_eq!(fit_segments(v, &pkt, 14, 1500).unwrap().gso_size, 1448);
        assert_eq!(fit_segments(v, &pkt, 14, 1300).unwrap().gso_size, 1300 - 52);
        assert!(fit_segments(v, &pkt, 14, 40).is_none());
    }
}
