//! Flow-aware dispatch for single-queue input: the first packet of a flow goes to the
//! worker with the fewest flows, and the flow stays there.
//!
//! A per-packet hash (RSS) spreads *many* flows evenly but cannot spread *few*: 32 flows
//! thrown at 8 queues land 4-per-queue only by luck (see [`crate::rss`]). When the
//! benchmark dispatches, it sees every flow's first packet and can place flows exactly,
//! like a NIC's flow director (the live gateway's AF_PACKET fanout program does the same
//! in the kernel, in turn rather than by least flows: `io::afpacket::FlowPlacement`).
//! The flow table is bounded; past its capacity, new flows fall back to the RSS hash.

use std::collections::HashMap;

use crate::rss::Rss;

/// Least-loaded flow placement over `queues` workers.
#[derive(Debug)]
pub struct FlowBalancer {
    rss: Rss,
    placed: HashMap<u32, u16>,
    flows: Vec<u64>,
    capacity: usize,
}

impl FlowBalancer {
    /// A balancer remembering up to `capacity` flows (by RSS hash).
    pub fn new(rss: Rss, capacity: usize) -> Self {
        let queues = rss.queues();
        Self {
            rss,
            placed: HashMap::new(),
            flows: vec![0; queues],
            capacity,
        }
    }

    /// The worker for a raw IP packet.
    pub fn queue_of(&mut self, ip_packet: &[u8]) -> usize {
        let Some(h) = self.rss.hash_of(ip_packet) else {
            return 0;
        };
        if let Some(q) = self.placed.get(&h) {
            return usize::from(*q);
        }
        if self.placed.len() >= self.capacity {
            return self.rss.queue_of_hash(h);
        }
        let (q, _) = self
            .flows
            .iter()
            .enumerate()
            .min_by_key(|(_, n)| **n)
            .unwrap_or((0, &0));
        self.flows[q] += 1;
        self.placed.insert(h, q as u16);
        q
    }

    /// Flows placed on each worker.
    pub fn flows_per_queue(&self) -> &[u64] {
        &self.flows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rss::ToeplitzKey;

    fn udp4(src: [u8; 4], sport: u16) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0];
        p.extend_from_slice(&src);
        p.extend_from_slice(&[192, 0, 2, 10]);
        p.extend_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(&[0, 53, 0, 8, 0, 0]);
        p
    }

    #[test]
    fn few_flows_are_placed_exactly_and_stay_put() {
        for queues in [4, 8] {
            let mut b = FlowBalancer::new(Rss::new(&ToeplitzKey::MICROSOFT, queues), 1024);
            let pkts: Vec<_> = (1..=32)
                .map(|i| udp4([10, 0, 0, i], 40000 + u16::from(i)))
                .collect();
            let first: Vec<_> = pkts.iter().map(|p| b.queue_of(p)).collect();
            assert!(b.flows_per_queue().iter().all(|n| *n == 32 / queues as u64));
            let again: Vec<_> = pkts.iter().map(|p| b.queue_of(p)).collect();
            assert_eq!(first, again, "a flow never moves");
        }
    }
}
