//! How the workers share the traffic, for the log and `status`: on AF_XDP by the NIC's
//! receive queues (worker i reads queue i); on AF_PACKET by the fanout program that
//! places flows in turn per IP version ([`FlowPlacement`]), or, where it cannot load, by
//! the kernel's flow hash (`PACKET_FANOUT_HASH`), saying why.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use io::afpacket::FlowPlacement;
use serde_json::{json, Value};

/// Flows the placement program's table holds at least: beyond them, new flows are placed
/// by a hash of their key (stable, not balanced) until a sweep makes room.
const MIN_FLOWS: u32 = 65_536;

/// How often the sweeper starts a new epoch: a flow idle for one to two of these is
/// forgotten (nothing of it is in flight after so long, so placing it again cannot
/// reorder it).
pub(crate) const SWEEP_EVERY: Duration = Duration::from_secs(20);

/// The sweeper's loop: a sweep every [`SWEEP_EVERY`] until `stop`; an error is logged once.
pub(crate) fn sweep_until(p: &FlowPlacement, stop: &AtomicBool, log: &(dyn Fn(String) + Sync)) {
    let mut warned = false;
    super::threads::every(stop, SWEEP_EVERY, || {
        if let Err(e) = p.sweep() {
            if !std::mem::replace(&mut warned, true) {
                log(format!("warning: workers: the flow table's sweep failed ({e}); idle flows stay until it works, new flows beyond its size are placed by hash"));
            }
        }
    });
}

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
        let flows = flows.max(MIN_FLOWS);
        match FlowPlacement::load(workers, flows) {
            Ok(p) => {
                let why = format!(
                    "the fanout program gives new flows to the {workers} workers in turn, per interface and IP version, and keeps each flow on its worker (the first {flows} live flows; beyond them, by hash)"
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

    /// `status`'s `placement` object: `{"how", "why", "flows_per_worker",
    /// "hashed_packets"}`, the last two (flows placed on each worker since start, per IP
    /// version; packets of new flows placed by hash because the table was full) only when
    /// flows are placed.
    pub fn status_json(&self) -> Value {
        let flows = self.program.as_ref().map(|p| {
            let [v4, v6] = p.flows_per_worker();
            json!({"ipv4": v4, "ipv6": v6})
        });
        let hashed = self.program.as_ref().map(|p| p.overflowed());
        json!({"how": self.how, "why": self.why, "flows_per_worker": flows, "hashed_packets": hashed})
    }
}
