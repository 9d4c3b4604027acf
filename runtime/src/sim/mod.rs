//! The simulated machine: a deterministic discrete-event model of every PE
//! of a launch running the per-PE IR on real data.
//!
//! Each PE has an in-order issue unit that walks its program, paying
//! `dispatch_cycles` per operation: it computes scalars itself and sends
//! each block operation to an engine's FIFO queue (DMA, GEMM, MATH, and the
//! IPCQ's send and receive sides). An operation starts when its engine is
//! free, its operands are ready (scoreboard) and, for memory operations,
//! no earlier overlapping write of the same PE is in flight; issue stalls
//! only on a value it must read (a scalar of a block, a branch condition, a
//! blocking `recv`/`wait`) or a full queue. Data effects happen in global
//! time order in the same pass that computes the timing: a load reads
//! memory when it starts, a store writes when it ends, a send captures its
//! data when it starts, a receive's data is there when its last packet has
//! arrived (DESIGN §2, normative).
//!
//! Time is integer picoseconds; events at equal times run in the order
//! they were created, so a launch gives the same bits and the same times
//! on every run. A launch over several SIPs runs as one logical process
//! per SIP, in windows, on as many threads as `Machine::threads` allows
//! ([`launch`]), with the same results on any number. Links are FIFO servers with reservations ([`fabric`]);
//! inter-PE queues ([`ipcq`]) have slots, credits and back-pressure. When
//! no event is pending and some PE still waits, the run is a deadlock and
//! the error names every blocked PE, what it waits for and where.

mod agu;
mod comm;
pub mod cost;
mod divisor;
mod engines;
mod events;
pub mod fabric;
mod ipcq;
mod issue;
mod launch;
mod memory;
mod pe;
pub mod place;
pub mod probe;
mod queue;
mod report;
mod slots;

pub use comm::{mesh_dims, ring_order, select_pes, Communicator};
pub use fabric::{Endpoint, Fabric, LinkId, PathCost, Transfer, LINK_CLASSES};
pub use memory::{symm_at_origin, MemView, OutOfMemory, Placement, SimMemory};
pub use report::{
    error_json, first_line, ranks_in, render_deadlock, render_sim_error, render_sim_error_in, render_unreceived,
    summary_json, summary_text, write_trace_json, Blocked, LinkStat, PeStat, Report, Slice, Unreceived, WaitReason,
};

use crate::topology::schema::Ipcq;
use crate::topology::{PeCoord, Space, Topology};
use kernbench_compiler::datapath::{DataPath, ExecError, RtValue};
use kernbench_compiler::ir::{Function, Op, Region, Type, Value};
use std::collections::HashMap;

/// The engines of a PE that have queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Engine {
    Dma,
    Gemm,
    Math,
    /// The IPCQ's send side.
    Send,
    /// The IPCQ's receive side (copies messages out of their slots).
    Recv,
}

impl Engine {
    pub const COUNT: usize = 5;
    pub const ALL: [Engine; 5] = [Engine::Dma, Engine::Gemm, Engine::Math, Engine::Send, Engine::Recv];
    /// Names of the engines and, last, of the issue unit.
    pub const NAMES: [&'static str; 6] = ["dma", "gemm", "math", "ipcq send", "ipcq recv", "issue"];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        Self::NAMES[self.index()]
    }
}

/// The machine's state that outlives a launch: the topology, the memory
/// (allocations with their placement), the fabric's links and the SIPs'
/// clocks.
pub struct Machine {
    pub topo: Topology,
    pub mem: SimMemory,
    pub fabric: Fabric,
    /// When each SIP's last work (launch or host copy) ended. SIPs run
    /// independently of each other, as GPUs' streams do: work confined to
    /// one SIP (its PEs, memories and links) starts on that SIP's clock;
    /// work that may reach several starts once every SIP is done and holds
    /// them all until it ends. Links are booked in time order per SIP
    /// (each link's `free_at_ps`), which this keeps true: no link of a SIP
    /// is booked by work starting before that SIP's clock.
    clock_ps: Vec<u64>,
    /// Threads a launch over several SIPs may run on (one shard of its
    /// SIPs each; see `launch.rs`). The results do not depend on it.
    pub threads: usize,
}

impl Machine {
    pub fn new(topo: &Topology) -> Machine {
        Machine {
            topo: topo.clone(),
            mem: SimMemory::new(topo),
            fabric: Fabric::new(topo),
            clock_ps: vec![0; topo.sips() as usize],
            threads: 1,
        }
    }

    /// Runs a launch to completion (or deadlock) and reports its time.
    pub fn run(&mut self, launch: &Launch, dp: &mut dyn DataPath) -> Result<Report, SimError> {
        launch::run(self, launch, dp)
    }

    /// [`Self::run`], and when a deadlock or the time limit stopped the
    /// launch, the report of what it did until then (ending there), whose
    /// trace shows how it got stuck.
    pub fn run_partial(
        &mut self,
        launch: &Launch,
        dp: &mut dyn DataPath,
    ) -> Result<Report, (SimError, Option<Box<Report>>)> {
        launch::run_partial(self, launch, dp)
    }

    /// When every SIP's work so far has ended.
    pub fn now_ps(&self) -> u64 {
        self.clock_ps.iter().copied().max().unwrap_or(0)
    }

    /// When work on `device` (one SIP) may start, or with `None`, work
    /// that may reach any SIP.
    pub fn clock_ps(&self, device: Option<u32>) -> u64 {
        match device {
            Some(sip) => self.clock_ps.get(sip as usize).copied().unwrap_or(0),
            None => self.now_ps(),
        }
    }

    /// Work on `device` (every SIP with `None`) ended at `end_ps`.
    pub fn advance_clock(&mut self, device: Option<u32>, end_ps: u64) {
        match device {
            Some(sip) => {
                if let Some(c) = self.clock_ps.get_mut(sip as usize) {
                    *c = (*c).max(end_ps);
                }
            }
            None => {
                let end = self.now_ps().max(end_ps);
                self.clock_ps.iter_mut().for_each(|c| *c = end);
            }
        }
    }

    /// Copies `bytes` at `addr` between the host and the memory holding
    /// them, over the SIP's PCIe, IO chiplet and NoC, starting at the
    /// SIP's clock; returns when the copy ends (the caller moves the
    /// clock, after all its copies).
    pub fn host_copy(&mut self, placement: Placement, addr: u64, bytes: u64, to_device: bool) -> u64 {
        let io_cpu = Topology::ns_to_ps(self.topo.spec.host.io_cpu_latency_ns.0);
        let sip = placement.sip();
        let start_ps = self.clock_ps(Some(sip));
        let route = self.fabric.host_route(sip, placement.endpoint(), to_device);
        let mut hbm = smallvec::SmallVec::<[u64; 8]>::new();
        if let Placement::Hbm(_) = placement {
            hbm.resize(self.fabric.channels() as usize, 0);
            self.fabric.split_contiguous(addr, bytes, &mut hbm);
        }
        let t = self.fabric.reserve(&route, bytes, &hbm, start_ps + io_cpu);
        t.end_ps
    }

    /// Host → PCIe → IO CPU → NoC: when a launch issued at `t` starts on
    /// every PE of `pes` (one common time, stamped by the IO CPU).
    pub fn launch_latency_ps(&mut self, pes: &[PeCoord]) -> u64 {
        let h = &self.topo.spec.host;
        let host = Topology::ns_to_ps(h.pcie.latency_ns.0 + h.io_cpu_latency_ns.0 + h.launch_overhead_ns.0);
        let noc = pes.iter().map(|p| self.fabric.io_latency_ps(*p)).max().unwrap_or(0);
        host + noc
    }
}

/// One launch: a kernel, the communicators it runs on, and each PE's
/// arguments (addresses for pointers, bits for scalars).
pub struct Launch<'a> {
    pub func: &'a Function,
    /// One communicator, or several disjoint ones running the kernel side
    /// by side (a collective over the shard groups of a tensor): each has
    /// its own ranks, queues and barrier.
    pub groups: &'a [Communicator],
    /// Each PE's arguments: the groups in order, each in rank order.
    pub args: Vec<Vec<RtValue>>,
    /// Programs per grid axis, in each group; rank r runs programs r,
    /// r + world, … of the flattened grid (axis 0 fastest) — or, with
    /// `grid_per_pe`, every PE runs the whole grid (on its own shards).
    pub grid: [u32; 3],
    pub grid_per_pe: bool,
    /// The IPCQ and packet size for this launch (a collective's
    /// registry entry), instead of the topology's `pe.ipcq` and
    /// `fabric.packet_bytes`.
    pub ipcq: Option<Ipcq>,
    pub packet_bytes: Option<u64>,
    /// Record every operation and link reservation for a trace.
    pub trace: bool,
    /// Simulated time the launch may take; a launch still running then
    /// stops with [`SimError::TimeLimit`] (a kernel that never ends, say).
    /// `None`: no limit.
    pub time_limit_ps: Option<u64>,
    /// The one SIP whose PEs, memories and links the launch uses, when
    /// the caller knows it: it then runs on that SIP's clock, beside other
    /// SIPs' work (see [`Machine`]). `None`: it may reach any SIP, and
    /// starts when every SIP is done.
    pub device: Option<u32>,
    /// Where the run reports how far it has got, for a progress display:
    /// the simulated time reached since the launch's start, raised every
    /// [`PROGRESS_EVERY_EVENTS`] events (by each shard; read it with any
    /// ordering).
    pub progress_ps: Option<&'a std::sync::atomic::AtomicU64>,
}

/// How often a run updates [`Launch::progress_ps`]: rarely enough to cost
/// nothing in the event loop, often enough for a display (tens of
/// milliseconds of wall time).
pub const PROGRESS_EVERY_EVENTS: u64 = 1 << 16;

impl<'a> Launch<'a> {
    /// A launch on one communicator with the topology's IPCQ, one program
    /// per PE unless `grid`.
    pub fn new(func: &'a Function, comm: &'a Communicator, args: Vec<Vec<RtValue>>) -> Launch<'a> {
        Launch {
            func,
            groups: std::slice::from_ref(comm),
            args,
            grid: [comm.world(), 1, 1],
            grid_per_pe: false,
            ipcq: None,
            packet_bytes: None,
            trace: false,
            time_limit_ps: None,
            device: None,
            progress_ps: None,
        }
    }
}

#[derive(Clone, Debug)]
pub enum SimError {
    /// An operation failed (out of bounds, division by zero, assertion, …).
    Exec {
        pe: PeCoord,
        rank: u32,
        program: [u32; 3],
        error: ExecError,
    },
    Deadlock {
        /// When the last PE got stuck (the latest of the last event and
        /// the blocked PEs' issue clocks).
        time_ps: u64,
        blocked: Vec<Blocked>,
    },
    /// The kernel's live blocks (with the PE's TCM allocations and IPCQ
    /// slots) do not fit in a PE's TCM.
    TcmCapacity {
        kernel: String,
        pe: PeCoord,
        need_bytes: u64,
        have_bytes: u64,
        /// IPCQ queues into the PE whose slots are counted (in TCM).
        queues: u32,
        /// What did not fit.
        cause: TcmCause,
    },
    /// The IPCQ slots of the queues into one SRAM (a cube's, shared by its
    /// PEs) or HBM slice, with the allocations there, do not fit in it
    /// (TCM slots are counted in [`SimError::TcmCapacity`]).
    SlotCapacity {
        kernel: String,
        /// The memory the slots are in: `pe.ipcq.buffer_space` near the
        /// receiver.
        place: Placement,
        need_bytes: u64,
        have_bytes: u64,
        /// What the tensors allocated there take.
        allocated_bytes: u64,
        /// Queues whose slots are counted, and the slot bytes of the one
        /// that did not fit (a queue across SIPs may have more slots).
        queues: u32,
        queue_bytes: u64,
        /// Rank `rank` on PE `by` opened the queue that did not fit, in
        /// its `send`/`recv` `inst`.
        by: PeCoord,
        rank: u32,
        inst: kernbench_compiler::ir::Inst,
    },
    /// The launch ran past its time limit: every PE not finished then,
    /// and where it was.
    TimeLimit { limit_ps: u64, running: Vec<Blocked> },
    /// The launch itself is malformed (arguments, compilation).
    Setup(String),
}

/// Why a kernel's TCM overflowed.
#[derive(Clone, Debug)]
pub enum TcmCause {
    /// The launch's own check, before any PE ran: the kernel's live blocks
    /// (`live_bytes` at their peak, first reached at `peak_at`) with the
    /// PE's TCM allocations and one queue's IPCQ slots.
    LiveBlocks {
        live_bytes: u64,
        peak_at: Option<kernbench_compiler::ir::Inst>,
    },
    /// A further queue into the PE, opened during the run by rank `rank`
    /// on PE `by` in its `send`/`recv` `inst`.
    Queue {
        by: PeCoord,
        rank: u32,
        inst: kernbench_compiler::ir::Inst,
    },
}

/// The kernel's peak bytes of live blocks (see [`peak_live`]).
pub fn peak_live_bytes(func: &Function) -> u64 {
    peak_live(func, &agu::address_values(func)).0
}

/// The kernel's peak bytes of live blocks (address generation's aside)
/// and the first instruction where they reach it (`None` for a kernel
/// without blocks). A static estimate:
/// a block is live from its definition to its last use in program order, and a value
/// used inside a loop that does not define it lives until that loop ends
/// (every iteration needs it). A value defined in a loop's body and used
/// later in the same body lives from one to the other; one carried to the
/// next iteration is an operand of the body's yield, its last use.
///
/// `address`: the kernel's address-generation values
/// ([`agu::address_values`]), which take no TCM.
pub fn peak_live(
    func: &Function,
    address: &std::collections::HashSet<Value>,
) -> (u64, Option<kernbench_compiler::ir::Inst>) {
    /// Instructions in program order (each followed by its regions'),
    /// and where each instruction's regions end in that order.
    fn walk(f: &Function, r: Region, order: &mut Vec<kernbench_compiler::ir::Inst>, ends: &mut Vec<usize>) {
        for &i in &f.region(r).insts {
            let at = order.len();
            order.push(i);
            ends.push(at + 1);
            for &sub in &f.inst(i).regions {
                walk(f, sub, order, ends);
            }
            ends[at] = order.len();
        }
    }
    let mut order = Vec::new();
    let mut ends = Vec::new();
    walk(func, func.body, &mut order, &mut ends);
    // Loop bodies: positions start + 1 .. end of a `for` or `while` at
    // start.
    let loops: Vec<(usize, usize)> = order
        .iter()
        .enumerate()
        .filter(|(_, &i)| matches!(func.inst(i).op, Op::For | Op::While))
        .map(|(k, _)| (k, ends[k]))
        .collect();
    let mut last_use: HashMap<Value, usize> = HashMap::new();
    let mut def_at: HashMap<Value, usize> = HashMap::new();
    for (k, &i) in order.iter().enumerate() {
        // Region parameters (loop counters, carried values) exist from the
        // region instruction on; its results once its regions are done.
        for &sub in &func.inst(i).regions {
            for p in &func.region(sub).params {
                def_at.insert(*p, k);
            }
        }
        for r in &func.inst(i).results {
            def_at.insert(*r, ends[k] - 1);
        }
    }
    for (k, &i) in order.iter().enumerate() {
        for a in &func.inst(i).args {
            let def = def_at.get(a).copied();
            // The outermost loop whose body holds this use but not the
            // definition: every iteration needs the value.
            let end = loops
                .iter()
                .filter(|(s, e)| *s < k && k < *e && def.is_none_or(|d| d < *s || d >= *e))
                .map(|(_, e)| *e)
                .max()
                .unwrap_or(k);
            let slot = last_use.entry(*a).or_insert(0);
            *slot = (*slot).max(end);
        }
    }
    let mut delta = vec![0i64; order.len() + 2];
    // Address generation's pointer and mask blocks are made by the DMA
    // engine's address generator as the transfer goes: they take no TCM.
    for (v, data) in func.values.iter() {
        if address.contains(&v) {
            continue;
        }
        let block = match &data.ty {
            Type::Block(e, s) => Some((*e, s)),
            // A received future's data is in the PE once it has arrived.
            Type::Future(d, s) => Some((kernbench_compiler::sema::Elem::Num(*d), s)),
            Type::Scalar(_) => None,
        };
        if let Some((e, s)) = block {
            let bytes = s.iter().product::<u64>() as i64 * kernbench_compiler::datapath::elem_size(e) as i64;
            if let (Some(&d), Some(&u)) = (def_at.get(&v), last_use.get(&v)) {
                delta[d] += bytes;
                delta[u + 1] -= bytes;
            }
        }
    }
    let (mut cur, mut peak, mut peak_at) = (0i64, 0i64, None);
    for (k, d) in delta.into_iter().enumerate() {
        cur += d;
        if cur > peak {
            (peak, peak_at) = (cur, order.get(k).copied());
        }
    }
    (peak.max(0) as u64, peak_at)
}

/// Bytes the slots of one IPCQ queue within a SIP take in its receiver's
/// TCM (0 when they live elsewhere): what a launch reserves on every PE; a
/// queue across SIPs with more slots is counted when it is opened.
pub fn ipcq_tcm_bytes(q: &Ipcq) -> u64 {
    if q.buffer_space == Space::Tcm {
        q.n_slots.0 * q.slot_size_bytes.0
    } else {
        0
    }
}
