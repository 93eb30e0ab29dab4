//! The worker: one per core, generic over the I/O backend (`P: Port`) and the mode
//! (`W: ModeWorker`), with no backend or mode match on the packet path. Per batch it
//! takes the current network view, receives from the inside and the outside port, hands
//! every IP frame the mode translates on that side to the mode, and transmits what the
//! mode decided: the frame rewritten in place (back out of the same port without a copy,
//! or copied to the other), the translation from its scratch buffer, or the packets the
//! mode originated (ICMP errors, fragments). Frames the mode does not translate there
//! (ARP, the other IP version, the gateway's own traffic) are left to the kernel.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use conntrack::Timestamp;
use engine::mode::Link as EgressLink;
use engine::{Direction, Egress, Emit, Frame, ModeWorker, Offload, Output, HEADROOM};
use io::{Port, Rx, RxMeta, VnetHdr};

use super::config::first_of_each_family;
use super::forward::{fit_segments, ip_dst, Forwarding, Handoff};
use super::gso;
use super::netview::{Link, NetView, Published};
use super::stats::{IoCounters, Snapshot};

/// Bytes of a worker's translation buffer: one 64 KB packet with headroom.
const SCRATCH: usize = HEADROOM + 65_536 + 64;

/// What a worker is given at start-up, besides its mode worker and its ports.
pub(crate) struct WorkerSetup {
    /// The IP version (4 or 6) the mode translates on the inside and the outside.
    pub families: [u8; 2],
    /// Whether the mode translates where the packet lies (in the receive buffer).
    pub in_place: bool,
    /// Per link: the MTU packets are held to.
    pub mtus: [u32; 2],
    /// Per link: configured ICMP error source addresses (else the interface's).
    pub addresses: [Vec<std::net::IpAddr>; 2],
    pub links: [Link; 2],
    pub published: Arc<Published>,
    pub handoff: Arc<dyn Handoff>,
    pub snapshot: Snapshot,
    pub busy_poll: bool,
    /// The packet trace (`quicknat trace`), read once per batch.
    pub tracer: Arc<crate::trace::Tracer>,
    /// This worker's number (for trace records).
    pub id: usize,
    /// Whether the mode keeps sessions (NAT44, NAT64), for trace records.
    pub stateful: bool,
}

/// One worker thread's state.
pub(crate) struct Worker<P, W> {
    mode: W,
    /// Inside (0) and outside (1).
    ports: [P; 2],
    setup: WorkerSetup,
    /// Translation buffer with headroom for growing headers.
    scratch: Vec<u8>,
    /// ICMP errors and fragments the mode writes.
    out: Output,
    /// Frames to send back out of the port they came from after its receive pass (they
    /// do not fit `Rx::Back`: longer than the received frame, or several).
    deferred: Vec<u8>,
    /// End offsets of the frames in `deferred`.
    deferred_ends: Vec<usize>,
    /// The virtio-net header of each frame in `deferred` (GSO pass-through).
    deferred_vnet: Vec<Option<VnetHdr>>,
    /// Where each of `out`'s packets leaves: (link, packet index in `out`); kept across
    /// passes so a pass that answers allocates nothing.
    routes: Vec<(usize, usize)>,
    io: IoCounters,
}

/// Where a handled frame goes.
enum Out {
    /// The received frame, rewritten in place, leaves by this link (behind this
    /// virtio-net header, when the frame came with one).
    InPlace(usize, Option<VnetHdr>),
    /// The translation in the scratch buffer (this range, Ethernet header included)
    /// leaves by this link (behind this virtio-net header: a super-packet or a partial
    /// checksum passed through, see `gso`).
    Scratch(usize, Range<usize>, Option<VnetHdr>),
    /// The packets the mode wrote to its output (an ICMP error, fragments), already
    /// framed; each with the link it leaves by.
    Extra,
}

impl<P: Port, W: ModeWorker> Worker<P, W> {
    /// A worker translating with `mode` between `ports` (inside, outside).
    pub fn new(mode: W, ports: [P; 2], setup: WorkerSetup) -> Self {
        Worker {
            mode,
            ports,
            setup,
            scratch: vec![0u8; SCRATCH],
            out: Output::new(),
            deferred: Vec::with_capacity(4096),
            deferred_ends: Vec::with_capacity(8),
            deferred_vnet: Vec::with_capacity(8),
            routes: Vec::with_capacity(64),
            io: IoCounters::default(),
        }
    }

    /// The links as the engine sees them: MTUs, and the addresses ICMP errors come from
    /// (configured, else the interface's).
    fn egress(&self, view: &NetView) -> Egress {
        let mut e = Egress::default();
        for (i, l) in e.links.iter_mut().enumerate() {
            let (conf4, conf6) = first_of_each_family(&self.setup.addresses[i]);
            *l = EgressLink {
                mtu: Some(self.setup.mtus[i]),
                addr4: conf4.or(view.addr4[i]),
                addr6: conf6.or(view.addr6[i]),
            };
        }
        e
    }

    /// Runs until `stop`: batches, quiescent points between them, a counter snapshot
    /// twice a second, and (unless busy polling) a wait on both ports when idle.
    pub fn run(mut self, stop: &AtomicBool, clock: &dyn Fn() -> Timestamp) {
        let published = Arc::clone(&self.setup.published);
        let mut view = published.current();
        let mut egress = self.egress(&view);
        let mut version = published.version();
        let mut last_snapshot = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let v = published.version();
            if v != version {
                version = v;
                view = published.current();
                egress = self.egress(&view);
            }
            // Reload: the mode's policy generation in force, once per batch.
            self.mode.begin_batch();
            let seen = self.step(clock(), &view, &egress);
            self.mode.quiescent();
            if last_snapshot.elapsed() > Duration::from_millis(500) {
                last_snapshot = Instant::now();
                self.publish_counters(false);
            }
            if seen == 0 && !self.setup.busy_poll {
                // Idle: hold no references while waiting, then wait on both ports.
                self.mode.offline();
                let _ = P::wait(&[&self.ports[0], &self.ports[1]], Duration::from_millis(50));
                self.mode.quiescent();
            }
        }
        self.publish_counters(true);
        self.mode.offline();
    }

    /// Copies the counters where the supervisor reads them (waiting for the lock only
    /// when `wait`).
    fn publish_counters(&mut self, wait: bool) {
        // The heartbeat the routing health check follows.
        self.io.heartbeats += 1;
        let mut io = self.io.clone();
        for p in &self.ports {
            let s = p.stats();
            io.csum_completed += s.csum_completed;
            io.tx_dropped += s.tx_dropped;
            io.not_for_us += s.not_for_us;
        }
        let g = if wait {
            self.setup.snapshot.lock().ok()
        } else {
            self.setup.snapshot.try_lock().ok()
        };
        if let Some(mut g) = g {
            *g = (self.mode.counters().clone(), io);
        }
    }

    /// One receive pass over both ports at `now`, everything sent and flushed; returns the
    /// frames received.
    pub fn step(&mut self, now: Timestamp, view: &NetView, egress: &Egress) -> usize {
        let mut seen = 0;
        for side in 0..2 {
            match self.receive(side, now, view, egress) {
                Ok(n) => seen += n,
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
            // Frames for the port they came from that `Rx::Back` could not carry.
            let mut start = 0;
            for (&end, vnet) in self.deferred_ends.iter().zip(&self.deferred_vnet) {
                let ok = self.ports[side]
                    .send(&self.deferred[start..end], vnet.as_ref())
                    .is_ok();
                self.io.count_sent(side, ok, end - start);
                start = end;
            }
            self.deferred.clear();
            self.deferred_ends.clear();
            self.deferred_vnet.clear();
        }
        self.send_polled(now, view, egress);
        for p in &mut self.ports {
            let _ = p.flush();
        }
        seen
    }

    /// Sends what the mode originates because time passed, with no packet arriving (a
    /// held TCP SYN answered after 6 s): each packet routed by its destination.
    fn send_polled(&mut self, now: Timestamp, view: &NetView, egress: &Egress) {
        if self.mode.poll_timeout().is_none_or(|t| t > now)
            || self.mode.poll(now, egress, &mut self.out) == 0
        {
            return;
        }
        let fwd = Forwarding {
            links: &self.setup.links,
            view,
            handoff: &*self.setup.handoff,
        };
        for i in 0..self.out.len() {
            let Some(framed) = self.out.framed_mut(i, 14) else {
                continue;
            };
            let Some(out) = fwd.frame_out(framed, &mut self.io) else {
                continue;
            };
            let ok = self.ports[out].send(framed, None).is_ok();
            self.io.count_sent(out, ok, framed.len());
        }
    }

    /// Receives one batch on port `side` and sends on what the mode decided.
    fn receive(
        &mut self,
        side: usize,
        now: Timestamp,
        view: &NetView,
        egress: &Egress,
    ) -> std::io::Result<usize> {
        let dir = if side == 0 {
            Direction::Outbound
        } else {
            Direction::Inbound
        };
        let (a, b) = self.ports.split_at_mut(1);
        let (me, other) = if side == 0 {
            (&mut a[0], &mut b[0])
        } else {
            (&mut b[0], &mut a[0])
        };
        stage_batch(me, &mut self.mode, dir);
        let mut h = Handler {
            mode: &mut self.mode,
            family: self.setup.families[side],
            to_v6: self.setup.families[side] == 4 && self.setup.families[1 - side] == 6,
            in_place: self.setup.in_place,
            scratch: &mut self.scratch,
            out: &mut self.out,
            routes: &mut self.routes,
            egress,
            fwd: Forwarding {
                links: &self.setup.links,
                view,
                handoff: &*self.setup.handoff,
            },
            io: &mut self.io,
            now,
            side,
            trace: self.setup.tracer.armed().then_some((
                &*self.setup.tracer,
                self.setup.id,
                self.setup.stateful,
            )),
            link_names: [&self.setup.links[0].name, &self.setup.links[1].name],
        };
        let deferred = &mut self.deferred;
        let deferred_ends = &mut self.deferred_ends;
        let deferred_vnet = &mut self.deferred_vnet;
        let mut defer = |frame: &[u8], vnet: Option<VnetHdr>| {
            deferred.extend_from_slice(frame);
            deferred_ends.push(deferred.len());
            deferred_vnet.push(vnet);
        };
        me.recv(|frame, meta| match h.frame(frame, meta, dir) {
            Some(Out::InPlace(out, vnet)) if out == side => {
                h.io.count_sent(out, true, frame.len());
                Rx::Back {
                    len: frame.len(),
                    vnet,
                }
            }
            Some(Out::InPlace(out, vnet)) => {
                let ok = other.send(frame, vnet.as_ref()).is_ok();
                h.io.count_sent(out, ok, frame.len());
                Rx::Done
            }
            Some(Out::Scratch(out, r, vnet)) if out == side => {
                defer(&h.scratch[r], vnet);
                Rx::Done
            }
            Some(Out::Scratch(out, r, vnet)) => {
                let len = r.len();
                let ok = other.send(&h.scratch[r], vnet.as_ref()).is_ok();
                h.io.count_sent(out, ok, len);
                Rx::Done
            }
            Some(Out::Extra) => {
                for &(out, i) in h.routes.iter() {
                    let Some(f) = h.out.framed_mut(i, 14) else {
                        continue;
                    };
                    if out == side {
                        defer(f, None);
                    } else {
                        let ok = other.send(f, None).is_ok();
                        h.io.count_sent(out, ok, f.len());
                    }
                }
                Rx::Done
            }
            None => Rx::Done,
        })
    }
}

/// The engine's staged batch: the mode sees every IP packet of the
/// batch `port` is about to receive ([`ModeWorker::prefetch`]) before it processes the
/// first, so that their index buckets and session lines load in parallel. A hint only:
/// what `recv` then hands over is decided the same way, staged or not.
#[inline]
fn stage_batch<P: Port, W: ModeWorker>(port: &mut P, mode: &mut W, dir: Direction) {
    port.peek(|frame| {
        if let Some(pkt) = crate::link::l3_offset(io::pcap::LinkType::Ethernet, frame)
            .and_then(|l3| frame.get(l3..))
        {
            mode.prefetch(dir, pkt);
        }
    });
}

/// The per-frame work of one receive pass.
struct Handler<'a, W> {
    mode: &'a mut W,
    /// The IP version the mode translates on this side.
    family: u8,
    /// This side's packets become IPv6 (IPv4 inside or outside of NAT64, SIIT, CLAT).
    to_v6: bool,
    in_place: bool,
    scratch: &'a mut Vec<u8>,
    out: &'a mut Output,
    /// Where each of `out`'s packets leaves: (link, packet index in `out`).
    routes: &'a mut Vec<(usize, usize)>,
    egress: &'a Egress,
    fwd: Forwarding<'a>,
    io: &'a mut IoCounters,
    now: Timestamp,
    side: usize,
    /// The trace armed at the start of this batch, this worker's number, and whether the
    /// mode keeps sessions.
    trace: Option<(&'a crate::trace::Tracer, usize, bool)>,
    link_names: [&'a str; 2],
}

impl<W: ModeWorker> Handler<'_, W> {
    /// Handles one received frame (and, with a trace armed, records what became of it).
    #[inline]
    fn frame(&mut self, frame: &mut [u8], meta: &RxMeta, dir: Direction) -> Option<Out> {
        match self.trace {
            None => self.frame_inner(frame, meta, dir),
            Some((tracer, id, stateful)) => self.traced(tracer, (id, stateful), frame, meta, dir),
        }
    }

    /// [`frame_inner`](Self::frame_inner) with the packet's headers read before and
    /// after, and the counters around it, offered to the trace.
    #[cold]
    fn traced(
        &mut self,
        tracer: &crate::trace::Tracer,
        (id, stateful): (usize, bool),
        frame: &mut [u8],
        meta: &RxMeta,
        dir: Direction,
    ) -> Option<Out> {
        use crate::trace::{Packet, Snapshot};
        let l3 = crate::link::l3_offset(io::pcap::LinkType::Ethernet, frame);
        let Some(before) = l3.and_then(|l3| Packet::parse(frame.get(l3..)?)) else {
            return self.frame_inner(frame, meta, dir);
        };
        let a = Snapshot::of(self.mode.counters(), self.io);
        let out = self.frame_inner(frame, meta, dir);
        let b = Snapshot::of(self.mode.counters(), self.io);
        let (after, sent) = match &out {
            Some(Out::InPlace(o, _)) => {
                (l3.and_then(|l3| Packet::parse(frame.get(l3..)?)), vec![*o])
            }
            Some(Out::Scratch(o, r, _)) => (
                self.scratch
                    .get(r.start + 14..r.end)
                    .and_then(Packet::parse),
                vec![*o],
            ),
            Some(Out::Extra) => (
                self.out.packets().next().and_then(Packet::parse),
                self.routes.iter().map(|&(o, _)| o).collect(),
            ),
            None => (None, Vec::new()),
        };
        let seen = crate::trace::Seen {
            worker: Some(id),
            side: self.side,
            links: self.link_names,
            sent: &sent,
            stateful,
        };
        // The filter first: a record is built only for a packet it takes.
        if tracer.wants(self.side, &before, after.as_ref(), b.dropped_since(&a)) {
            tracer.offer(crate::trace::record(&seen, &before, after.as_ref(), &a, &b).json);
        }
        out
    }

    /// Handles one received frame; returns where the translated frame goes, or `None`
    /// when it is dropped (counted by the mode), left to the kernel or handed to it.
    fn frame_inner(&mut self, frame: &mut [u8], meta: &RxMeta, dir: Direction) -> Option<Out> {
        self.io.rx[self.side] += 1;
        self.io.rx_bytes[self.side] += frame.len() as u64;
        let Some(l3) = crate::link::l3_offset(io::pcap::LinkType::Ethernet, frame) else {
            self.io.to_kernel += 1; // ARP and friends: the kernel's business
            return None;
        };
        let pkt = &frame[l3..];
        let version = pkt.first().map_or(0, |b| b >> 4);
        if version != self.family || ip_dst(pkt).is_none_or(|d| self.fwd.for_kernel(d)) {
            self.io.to_kernel += 1;
            return None;
        }
        let offload = match meta.vnet {
            Some(v) if v.is_gso() => Offload::Gso,
            Some(v) if v.needs_csum() => Offload::PartialCsum,
            _ => Offload::None,
        };
        if offload != Offload::Gso && meta.len > self.fwd.links[self.side].mtu + l3 {
            self.io.oversize += 1;
            return None;
        }
        let len = frame.len() - l3;
        let link_group = crate::link::link_group(io::pcap::LinkType::Ethernet, frame);
        if self.in_place {
            let mut f = Frame {
                buf: frame,
                start: l3,
                len,
                offload,
                link_group,
                out: self.out,
            };
            match self.mode.process(self.now, dir, &mut f, self.egress) {
                Emit::Forward { .. } | Emit::Hairpin { .. } => {}
                Emit::Reply(_) | Emit::Fragments => return self.route_out(),
                Emit::Drop(_) => return None,
            }
            let (out, mac) = self.fwd.next_hop(&frame[l3..], self.io)?;
            let mtu = self.fwd.links[out].mtu;
            let hdr = match meta.vnet {
                // A super-packet: its segments must fit the next hop; TCP is a byte stream,
                // so the kernel may cut it at a smaller size.
                Some(v) if v.is_gso() => match fit_segments(v.for_forward(), &frame[l3..], l3, mtu)
                {
                    Some(v) => Some(v),
                    None => {
                        self.io.gso_refused += 1;
                        return None;
                    }
                },
                Some(v) => Some(v.for_forward()),
                None => None,
            };
            frame[0..6].copy_from_slice(&mac);
            frame[6..12].copy_from_slice(&self.fwd.links[out].mac);
            if hdr.is_some_and(|v| v.is_gso()) {
                self.io.gso += 1;
            }
            return Some(Out::InPlace(out, hdr));
        }
        // The headers change size: translate in the scratch buffer, behind headroom.
        let n = len.min(self.scratch.len() - HEADROOM - 64);
        self.scratch[HEADROOM..HEADROOM + n].copy_from_slice(&frame[l3..l3 + n]);
        // Offload work passed through: the mode sees one segment.
        let passed = match meta.vnet.filter(|v| v.is_gso() || v.needs_csum()) {
            Some(v) => match self.present(&v, n, l3) {
                Some(p) => Some((v, p)),
                None => return None,
            },
            None => None,
        };
        let given = passed.map_or(n, |(_, p)| p.len);
        let mut f = Frame::new(self.scratch, HEADROOM, given, self.out);
        f.link_group = link_group;
        let (start, len) = match self.mode.process(self.now, dir, &mut f, self.egress) {
            Emit::Forward { start, len } | Emit::Hairpin { start, len } => (start, len),
            // The mode cut one segment into fragments: the rest would be lost.
            Emit::Fragments if passed.is_some_and(|(v, _)| v.is_gso()) => {
                self.io.gso_refused += 1;
                return None;
            }
            Emit::Reply(_) | Emit::Fragments => return self.route_out(),
            Emit::Drop(_) => return None,
        };
        let Some((v, p)) = passed else {
            let framed = self.scratch.get_mut(start.checked_sub(14)?..start + len)?;
            let out = self.fwd.frame_out(framed, self.io)?;
            return Some(Out::Scratch(out, start - 14..start + len, None));
        };
        let fitted = gso::finish(self.scratch, start, len, &v, &p, 14).and_then(|(len, hdr)| {
            let framed = self.scratch.get_mut(start.saturating_sub(14)..start + len);
            let framed = framed
                .filter(|_| start >= 14)
                .ok_or(gso::GsoRefusal::Translated)?;
            // Longer than the MTU as a whole: its segments are what must fit.
            let Some((out, mac)) = self.fwd.next_hop(&framed[14..], self.io) else {
                return Ok(None);
            };
            let hdr = gso::fit_mtu(hdr, 14, self.fwd.links[out].mtu)?;
            if !hdr.is_gso() && framed.len() - 14 > self.fwd.links[out].mtu {
                self.io.oversize += 1;
                return Ok(None);
            }
            self.fwd.write_eth(framed, out, mac);
            Ok(Some((out, len, hdr)))
        });
        match fitted {
            Ok(Some((out, len, hdr))) => {
                if hdr.is_gso() {
                    self.io.gso += 1;
                }
                Some(Out::Scratch(out, start - 14..start + len, Some(hdr)))
            }
            Ok(None) => None,
            Err(_) => {
                self.io.gso_refused += 1;
                None
            }
        }
    }

    /// [`gso::present`]s the `n` bytes in the scratch buffer received behind `v`; counts
    /// and returns `None` when they cannot pass.
    fn present(&mut self, v: &VnetHdr, n: usize, l3: usize) -> Option<gso::Presented> {
        let pkt = &mut self.scratch[HEADROOM..HEADROOM + n];
        // Link padding after the IP packet is not part of it.
        let pkt = match gso::ip_len(pkt) {
            Some(l) if l <= pkt.len() => &mut pkt[..l],
            _ => pkt,
        };
        match gso::present(pkt, v, l3, self.to_v6) {
            Ok(p) => Some(p),
            Err(_) => {
                self.io.gso_refused += 1;
                None
            }
        }
    }

    /// Routes the packets the mode wrote to its output (an ICMP error, fragments) and
    /// writes their Ethernet headers in front of them.
    fn route_out(&mut self) -> Option<Out> {
        self.routes.clear();
        for i in 0..self.out.len() {
            let Some(framed) = self.out.framed_mut(i, 14) else {
                continue;
            };
            if let Some(out) = self.fwd.frame_out(framed, self.io) {
                self.routes.push((out, i));
            }
        }
        (!self.routes.is_empty()).then_some(Out::Extra)
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_gso;
