//! Flow placement for a fanout group: the program (`bpf/fanout.c`, attached by
//! `PACKET_FANOUT_EBPF`) that gives flows' first packets to the workers in turn (per
//! interface and IP version) and keeps each flow on its worker.
//!
//! The kernel's `PACKET_FANOUT_HASH` places packets by a hash: many flows spread evenly,
//! few flows only by luck (32 flows over 2 workers are within 17/15 in 40% of flow sets,
//! over 4 workers within 9/7 far less often), whatever their IP version. Placing flows
//! gives every worker the same number of flows of each IP version. One program (and
//! one flow table) serves every fanout group of a gateway, so the count is per worker
//! over all its interfaces.
//!
//! The flow table is a fixed-size hash map that the program never forgets a flow from;
//! [`FlowPlacement::sweep`], called periodically, deletes the flows not seen since the
//! sweep before. A new flow that finds the table full is placed by a hash of its key
//! (stable, not balanced); its packets are counted ([`FlowPlacement::overflowed`]).

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Mutex;

use aya::maps::{Array, HashMap, MapData};
use aya::programs::SocketFilter;
use aya::{Ebpf, EbpfLoader};

/// Most workers the program places flows over (`MAX_WORKERS` in `bpf/fanout.c`).
pub const MAX_WORKERS: usize = 256;

/// The compiled program, or empty when clang was missing at build time.
static FANOUT_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fanout.o"));

fn err(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("flow placement: {what}: {e}"))
}

/// The program's flow table: a flow's key (`struct flow`) to its worker and the epoch it
/// was last seen in (`struct place`).
type FlowTable = HashMap<MapData, [u8; 40], [u32; 2]>;

/// The loaded fanout program and its maps. Sockets join with
/// [`FlowPlacement::join`]; the kernel keeps the program while a group uses it.
pub struct FlowPlacement {
    /// Owns the program and the maps.
    _ebpf: Ebpf,
    prog: OwnedFd,
    flows: Mutex<Array<MapData, u64>>,
    overflow: Mutex<Array<MapData, u64>>,
    /// The flow table and the epoch its entries are stamped with, for [`Self::sweep`].
    table: Mutex<(FlowTable, Array<MapData, u32>)>,
    workers: usize,
}

impl std::fmt::Debug for FlowPlacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowPlacement")
            .field("workers", &self.workers)
            .finish_non_exhaustive()
    }
}

/// Compared by identity: the sockets of a group share one program.
impl PartialEq for FlowPlacement {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for FlowPlacement {}

impl FlowPlacement {
    /// Loads the program for `workers` workers, with a flow table of `flows` flows (past
    /// it, new flows are placed by hash until [`sweep`](Self::sweep) makes room).
    pub fn load(workers: usize, flows: u32) -> io::Result<Self> {
        if FANOUT_OBJ.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "built without clang; install clang and rebuild",
            ));
        }
        if !(2..=MAX_WORKERS).contains(&workers) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{workers} workers: flows are placed over 2 to {MAX_WORKERS}"),
            ));
        }
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("placed", flows.max(1))
            .load(FANOUT_OBJ)
            .map_err(|e| err("loading the object", e))?;
        {
            let map = ebpf
                .map_mut("config")
                .ok_or_else(|| err("object", "no config map"))?;
            let mut cfg: Array<_, u32> = Array::try_from(map).map_err(|e| err("config", e))?;
            cfg.set(0, workers as u32, 0)
                .map_err(|e| err("config", e))?;
        }
        let take = |ebpf: &mut Ebpf, name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| err("object", format!("no {name} map")))
        };
        let flows = Array::try_from(take(&mut ebpf, "flows")?).map_err(|e| err("flows", e))?;
        let overflow =
            Array::try_from(take(&mut ebpf, "overflow")?).map_err(|e| err("overflow", e))?;
        let placed = HashMap::try_from(take(&mut ebpf, "placed")?).map_err(|e| err("placed", e))?;
        let epoch = Array::try_from(take(&mut ebpf, "epoch")?).map_err(|e| err("epoch", e))?;
        let prog: &mut SocketFilter = ebpf
            .program_mut("fanout_place")
            .ok_or_else(|| err("object", "no fanout_place program"))?
            .try_into()
            .map_err(|e| err("program type", e))?;
        prog.load().map_err(|e| err("loading the program", e))?;
        let prog = prog
            .fd()
            .map_err(|e| err("program", e))?
            .as_fd()
            .try_clone_to_owned()?;
        Ok(FlowPlacement {
            _ebpf: ebpf,
            prog,
            flows: Mutex::new(flows),
            overflow: Mutex::new(overflow),
            table: Mutex::new((placed, epoch)),
            workers,
        })
    }

    /// Hands the program to the fanout group `fd` belongs to (joined as
    /// `PACKET_FANOUT_EBPF`): from now on it places the group's frames.
    pub(crate) fn join(&self, fd: &OwnedFd) -> io::Result<()> {
        let prog: libc::c_int = self.prog.as_raw_fd();
        crate::sys::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_FANOUT_DATA, &prog)
    }

    /// Packets of new flows placed by hash because the table was full, since the program
    /// was loaded.
    pub fn overflowed(&self) -> u64 {
        let o = self.overflow.lock().unwrap_or_else(|e| e.into_inner());
        o.get(&0, 0).unwrap_or(0)
    }

    /// Starts a new epoch and deletes the flows not seen in the one before it (nor since):
    /// a flow idle for one to two sweep intervals is forgotten, and placed again (in turn)
    /// if it comes back. Returns the flows deleted and those kept.
    pub fn sweep(&self) -> io::Result<(usize, usize)> {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let (placed, epoch) = &mut *t;
        let last = epoch.get(&0, 0).map_err(|e| err("epoch", e))?;
        let now = last.wrapping_add(1);
        epoch.set(0, now, 0).map_err(|e| err("epoch", e))?;
        // Collected first: deleting while walking would restart the walk.
        let mut stale = Vec::new();
        let mut kept = 0;
        for entry in placed.iter() {
            let (key, [_, seen]) = entry.map_err(|e| err("placed", e))?;
            if seen == now || seen == last {
                kept += 1;
            } else {
                stale.push(key);
            }
        }
        for key in &stale {
            // A flow seen again between the walk and here is deleted anyway and placed
            // again in turn: only if it went idle for a whole epoch, then sent just now.
            let _ = placed.remove(key);
        }
        Ok((stale.len(), kept))
    }

    /// Flows placed on each worker since the program was loaded, IPv4 then IPv6 (each
    /// version is spread on its own).
    pub fn flows_per_worker(&self) -> [Vec<u64>; 2] {
        let flows = self.flows.lock().unwrap_or_else(|e| e.into_inner());
        [0, MAX_WORKERS as u32].map(|base| {
            (0..self.workers as u32)
                .map(|w| flows.get(&(base + w), 0).unwrap_or(0))
                .collect()
        })
    }
}
