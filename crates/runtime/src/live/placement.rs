//! How the workers share the traffic, for the log and `status`: on AF_XDP by the NIC's
//! receive queues (worker i reads queue i); on AF_PACKET by the fanout program that
//! places flows in turn per IP version ([`FlowPlacement`]), or, where it cannot load, by
//! the kernel's flow hash (`PACKET_FANOUT_HASH`), saying why.

use std::sync::Arc;

use io::afpacket::FlowPlacement;
use serde_json::{json, Value};

/// Flows the placement program remembers at least (the LRU map's floor): a flow forgotten
/// while still live is placed again, possibly on another worker.
const MIN_FLOWS: u32 = 65_536;

/// How the workers get their packets.
#[derive(Debug, Clone)]
pub struct Placement {
    how: &'static str,
    why: String,
    program: Option<Arc<FlowPlacement>>,
}

impl Placement {
    /// AF_PACKET with `workers` workers: loads the placement program, remembering `flows`
    /// flows (at least [`MIN_FLOWS`]), or says why the kernel's hash places them.
    pub(crate) fn packet(workers: usize, flows: u32, log: &(dyn Fn(String) + Sync)) -> Self {
        if workers < 2 {
            return Placement::one();
        }
        match FlowPlacement::load(workers, flows.max(MIN_FLOWS)) {
            Ok(p) => {
                let why = format!(
                    "the fanout program gives new flows to the {workers} workers in turn, each IP version on its own, and keeps each flow on its worker"
                );
                log(format!("workers: {why}"));
                Placement {
                    how: "flows",
                    why,
                    program: Some(Arc::new(p)),
                }
            }
            Err(e) => {
                let why = format!("flow placement unavailable ({e}); the kernel's flow hash spreads packets over the workers (few flows may be uneven)");
                log(format!("warning: workers: {why}"));
                Placement {
                    how: "kernel_hash",
                    why,
                    program: None,
                }
            }
        }
    }

    /// AF_PACKET, `[gateway] placement = "hash"`: the kernel's flow hash.
    pub fn hash(workers: usize) -> Self {
        if workers < 2 {
            return Placement::one();
        }
        Placement {
            how: "kernel_hash",
            why: "gateway.placement = \"hash\": the kernel's flow hash spreads packets over the workers".into(),
            program: None,
        }
    }

    /// AF_XDP: worker i reads receive queue i.
    pub(crate) fn queues(workers: usize) -> Self {
        if workers < 2 {
            return Placement::one();
        }
        Placement {
            how: "queues",
            why: "worker i reads receive queue i: the NIC's receive hash (RSS) places flows".into(),
            program: None,
        }
    }

    fn one() -> Self {
        Placement {
            how: "one_worker",
            why: "one worker takes every packet".into(),
            program: None,
        }
    }

    /// The program the fanout groups join, if flows are placed.
    pub(crate) fn program(&self) -> Option<Arc<FlowPlacement>> {
        self.program.clone()
    }

    /// `status`'s `placement` object: `{"how", "why", "flows_per_worker"}`, the last
    /// (flows placed on each worker since start, per IP version) only when flows are placed.
    pub fn status_json(&self) -> Value {
        let flows = self.program.as_ref().map(|p| {
            let [v4, v6] = p.flows_per_worker();
            json!({"ipv4": v4, "ipv6": v6})
        });
        json!({"how": self.how, "why": self.why, "flows_per_worker": flows})
    }
}
