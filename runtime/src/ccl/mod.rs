//! Collectives: the registry of `.tl` algorithms (`ccl.yaml`), the
//! conventions their kernels follow, and the glue that runs one on the
//! simulated machine.
//!
//! Kernel conventions (checked when an algorithm is compiled):
//! - `all_reduce(buf: ptr[T], n_elem: i32)`, in place;
//! - `all_gather(src: ptr[T], dst: ptr[T], n_elem: i32)`: `dst` holds every
//!   rank's `n_elem` in rank order;
//! - `reduce_scatter(src: ptr[T], dst: ptr[T], n_elem: i32)`: `src` holds
//!   `world × n_elem`, rank r's `dst` the reduction of every rank's r-th
//!   part;
//! - `broadcast(buf: ptr[T], n_elem: i32, root: i32)`;
//!
//! with constexprs `T` (the dtype) and, for reductions, `OP` (0 sum, 1 max,
//! 2 min, 3 avg). The runtime also binds, when the kernel declares them,
//! the layout constexprs `CUBE_PES`, `SIP_CUBES`, `CUBE_W`, `CUBE_H`.

pub mod bench;
pub mod registry;

pub use registry::{Algorithm, Registry, RegistryError};

use crate::sim::{ring_order, Communicator};
use crate::topology::{PeCoord, Topology};
use serde::Deserialize;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast,
}

impl Collective {
    pub const ALL: [Collective; 4] = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Broadcast,
    ];

    /// The name in `ccl.yaml` and on the command line.
    pub fn key(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::Broadcast => "broadcast",
        }
    }

    pub fn parse(s: &str) -> Option<Collective> {
        Collective::ALL.into_iter().find(|c| c.key() == s)
    }

    /// nccl-tests' bus-bandwidth factor: `busbw = algbw × factor`, the
    /// share of the data each rank's links must carry.
    pub fn bus_factor(self, ranks: u32) -> f64 {
        let n = ranks.max(1) as f64;
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::AllGather | Collective::ReduceScatter => (n - 1.0) / n,
            Collective::Broadcast => 1.0,
        }
    }

    /// The ring edges each block of a ring implementation crosses in turn
    /// (reduce-scatter then all-gather for an all-reduce; one pass for the
    /// others), which sets a ring's latency ([`bench::RingReference`]).
    pub fn ring_hops(self, ranks: u32) -> usize {
        let steps = ranks.max(1) as usize - 1;
        match self {
            Collective::AllReduce => 2 * steps,
            _ => steps,
        }
    }

    pub fn reduces(self) -> bool {
        matches!(self, Collective::AllReduce | Collective::ReduceScatter)
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
    Avg,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg];

    /// The `OP` constexpr.
    pub fn code(self) -> i64 {
        match self {
            ReduceOp::Sum => 0,
            ReduceOp::Max => 1,
            ReduceOp::Min => 2,
            ReduceOp::Avg => 3,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Avg => "avg",
        }
    }

    pub fn parse(s: &str) -> Option<ReduceOp> {
        ReduceOp::ALL.into_iter().find(|o| o.name() == s)
    }
}

/// What an algorithm expects of the order of its ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TopologyClass {
    /// Ranks in physical ring order (`tl.NEXT` is a near neighbour).
    Ring,
    /// A 2-D layout (`tl.NORTH`/`SOUTH`/`EAST`/`WEST`); ring order.
    Mesh,
    /// Any order.
    Tree,
    /// SIP-major, then cube (row-major in the cube grid), then PE: rank //
    /// `CUBE_PES` is the cube group, and so on.
    Hierarchical,
}

/// The PEs of a collective in the rank order its algorithm expects.
pub fn order_pes(topo: &Topology, class: TopologyClass, pes: &[PeCoord]) -> Vec<PeCoord> {
    match class {
        TopologyClass::Hierarchical => {
            let mut v = pes.to_vec();
            v.sort();
            v
        }
        _ => {
            // Ring order of the whole machine, restricted to the set.
            let set: std::collections::HashSet<PeCoord> = pes.iter().copied().collect();
            let ring: Vec<PeCoord> = ring_order(topo).into_iter().filter(|p| set.contains(p)).collect();
            if ring.len() == pes.len() {
                ring
            } else {
                pes.to_vec()
            }
        }
    }
}

/// The constexprs the runtime binds for every run of an algorithm that
/// declares them: the element type, the reduction, and the layout
/// ([`layout_constexprs`]). A registry entry cannot set them.
pub const RUNTIME_CONSTEXPRS: [&str; 8] = ["T", "OP", "CUBE_PES", "SIP_CUBES", "CUBE_W", "CUBE_H", "SIP_W", "SIP_H"];

/// The layout constexprs the runtime binds for algorithms that declare
/// them.
pub fn layout_constexprs(topo: &Topology) -> Vec<(&'static str, i64)> {
    let (w, h) = topo.cube_grid();
    let [sip_w, sip_h] = topo.spec.system.sip_grid.map(|c| c.0 as u32);
    let values = [topo.pes_per_cube(), w * h, w, h, sip_w, sip_h];
    RUNTIME_CONSTEXPRS[2..]
        .iter()
        .zip(values)
        .map(|(&n, v)| (n, i64::from(v)))
        .collect()
}

/// A communicator for an algorithm on a PE set: the algorithm's rank
/// order, and its world-size override.
pub fn communicator(topo: &Topology, a: &Algorithm, pes: &[PeCoord]) -> Result<Communicator, String> {
    let mut ordered = order_pes(topo, a.topology, pes);
    if let Some(n) = a.world_size {
        if n as usize > ordered.len() {
            return Err(format!(
                "{}: runs on {n} PEs (its world_size) but only {} are given",
                a.entry(),
                ordered.len()
            ));
        }
        ordered.truncate(n as usize);
    }
    Ok(Communicator::new(ordered))
}
