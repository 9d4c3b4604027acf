//! The event loop: the simulator's state during one launch, its event
//! queue (integer time, ties broken by creation order), launch set-up, and
//! the end of a run (a report, or the deadlock diagnostic's facts).

use super::divisor::Divisor;
use super::fabric::Endpoint;
use super::ipcq::Queues;
use super::pe::{EventKind, PeSlab, Stall};
use super::queue::EventQueue;
use super::report::{Blocked, PeStat, Slice, WaitReason};
use super::{cost, Communicator, Engine, Machine, SimError};
use crate::topology::schema::Ipcq;
use crate::topology::{PeCoord, Topology};
use kernbench_compiler::datapath::elem::compare_values;
use kernbench_compiler::datapath::{DataPath, ExecError, ExecErrorKind, GroupId, Plan, RtValue};
use kernbench_compiler::ir::{BinaryOp, CmpOp, Function, Inst, Op, Value};
use kernbench_compiler::sema::types::DType;
use std::collections::HashSet;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ev {
    /// Run PE `p`'s issue unit.
    Issue(u32),
    /// Try to start the head of an engine's queue.
    Kick(u32, u8),
    /// An operation finished: PE, in-flight slot.
    Done(u32, u32),
    /// A load's transfer starts and reads memory: PE, in-flight slot.
    Sample(u32, u32),
    /// A hand-off from another logical process takes effect here: its
    /// index among the process's `incoming`.
    Cross(u32),
}

/// A logical process: the PEs of one SIP and its links, with an event
/// queue of its own. A launch over several SIPs runs as one process per
/// SIP of the machine, in windows of simulated time no longer than the
/// SIP links' latency: within a window no process can affect another
/// (whatever crosses a SIP link reaches the next SIP at least one latency
/// later), so each runs its window on its own and what they hand each
/// other is delivered between windows, in an order that depends only on
/// who made it and in which order. A launch on one SIP is one process and
/// runs with no windows.
pub(super) struct Lp {
    pub events: EventQueue<Ev>,
    /// Hand-offs due here and not taken yet, by [`Ev::Cross`] index.
    pub incoming: Vec<Option<Arrival>>,
    pub free_incoming: Vec<u32>,
    /// When the last message of another process arrived here (the run
    /// ends no earlier).
    pub last_arrival_ps: u64,
}

impl Lp {
    fn new() -> Lp {
        Lp {
            events: EventQueue::default(),
            incoming: Vec::new(),
            free_incoming: Vec::new(),
            last_arrival_ps: 0,
        }
    }
}

/// What one logical process hands another (see [`Lp`]), delivered
/// between windows by [`Sim::deliver`].
pub(super) enum Cross {
    /// A transfer whose route goes on in the receiving process.
    Transfer(Handed),
    /// Credits of the queue `(src, dst, control)` are back at its sender
    /// at `back_ps`.
    Credits {
        src: u32,
        dst: u32,
        control: bool,
        back_ps: u64,
        slots: u32,
    },
    /// A put or notify into another SIP is acknowledged: PE `pe`'s
    /// operation in in-flight slot `slot` ends at `at_ps`, with `outs`
    /// (an atomic's old values).
    Ack {
        pe: u32,
        slot: u32,
        at_ps: u64,
        outs: kernbench_compiler::datapath::Outputs,
    },
}

/// A transfer handed to another process: its route from `from` to `to`
/// continues there from where `at` stands.
pub(super) struct Handed {
    pub from: Endpoint,
    pub to: Endpoint,
    pub bytes: u64,
    pub hbm: super::engines::Channels,
    pub at: super::fabric::Progress,
    pub then: Then,
}

/// What takes effect in the process that was handed it, at a time of its
/// own (an [`Ev::Cross`] event); never handed on itself.
pub(super) enum Arrival {
    /// A transfer's head reaches the first stage on this SIP at
    /// `at.arrive_ps`: it books the rest of its route from there, and does
    /// `then` when its last byte is in.
    Transfer(Handed),
    /// A put or notify from another process whose last byte is in at `to`:
    /// it writes.
    Landed { then: Then, to: Endpoint },
}

/// What a transfer handed to another process does when it ends there.
pub(super) enum Then {
    /// Message `msg` of queue `(src, dst, control)` is in its receiver's
    /// slots (sent by `inst`).
    Message {
        src: u32,
        dst: u32,
        control: bool,
        msg: u64,
        bytes: u64,
        slots: u32,
        data: RtValue,
        inst: Inst,
    },
    /// PE `pe`'s store or atomic (group `g`, in-flight slot `slot`, in
    /// its program `program`) writes with its operands `inputs`, then is
    /// acknowledged.
    Put {
        pe: u32,
        slot: u32,
        program: [u32; 3],
        g: usize,
        inputs: Vec<RtValue>,
    },
    /// PE `pe`'s `tl.notify` (in-flight slot `slot`) writes its word, then
    /// is acknowledged.
    Notify {
        pe: u32,
        slot: u32,
        addr: u64,
        bits: u64,
        size: u8,
    },
}

/// A pure scalar instruction of at most three operands, decoded with its
/// operands and result for the issue unit's fast path (which then needs
/// nothing else of the instruction).
#[derive(Clone, Copy, Debug)]
pub(super) struct ScalarStep {
    pub op: crate::exec::PureScalar,
    /// The same operation where a shortcut computes it (the common integer
    /// arithmetic of loop counters and offsets).
    pub fast: FastScalar,
    /// The operands' and the result's entries among the PE's values
    /// ([`super::slots`]: the same on every PE), found once here instead
    /// of at every execution.
    pub arg_entries: [u32; 3],
    pub n_args: u8,
    /// [`NO_ENTRY`] when the instruction has no result.
    pub result_entry: u32,
}

/// A [`ScalarStep`] without a result.
pub(super) const NO_ENTRY: u32 = u32::MAX;

impl ScalarStep {
    pub(super) fn decode(func: &Function, i: Inst, slot_of: &[u32]) -> Option<ScalarStep> {
        let op = crate::exec::PureScalar::decode(func, i)?;
        let d = func.inst(i);
        if d.args.len() > 3 {
            return None;
        }
        let entry = |v: Value| slot_of.get(v.as_u32() as usize).copied();
        let mut arg_entries = [0; 3];
        for (k, a) in d.args.iter().enumerate() {
            arg_entries[k] = entry(*a)?;
        }
        Some(ScalarStep {
            op,
            fast: FastScalar::of(op),
            arg_entries,
            n_args: d.args.len() as u8,
            result_entry: match d.results.first() {
                Some(r) => entry(*r)?,
                None => NO_ENTRY,
            },
        })
    }
}

/// Integer arithmetic, comparisons and selects computed straight from the
/// operands' bits: what `PureScalar::eval` gives for them (`elem::binary`
/// and `elem::compare` read an i32 from the low 32 bits and store a
/// result zero-extended), without its dispatch on dtypes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FastScalar {
    I32(BinaryOp),
    I64(BinaryOp),
    CmpI32(CmpOp),
    CmpI64(CmpOp),
    Select,
    /// Computed by `PureScalar::eval`.
    General,
}

impl FastScalar {
    fn of(op: crate::exec::PureScalar) -> FastScalar {
        use crate::exec::PureScalar as P;
        let simple = |b: BinaryOp| {
            matches!(
                b,
                BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Min | BinaryOp::Max
            )
        };
        match op {
            P::Binary(b, DType::I32) if simple(b) => FastScalar::I32(b),
            P::Binary(b, DType::I64) if simple(b) => FastScalar::I64(b),
            P::Cmp(c, DType::I32) => FastScalar::CmpI32(c),
            P::Cmp(c, DType::I64) => FastScalar::CmpI64(c),
            P::Select => FastScalar::Select,
            _ => FastScalar::General,
        }
    }

    /// The result from operand bits `a`; `None` for [`FastScalar::General`].
    #[inline]
    pub fn eval(self, a: &[u64; 3]) -> Option<u64> {
        fn arith<T: Ord + Copy>(
            b: BinaryOp,
            x: T,
            y: T,
            add: fn(T, T) -> T,
            sub: fn(T, T) -> T,
            mul: fn(T, T) -> T,
        ) -> T {
            match b {
                BinaryOp::Add => add(x, y),
                BinaryOp::Sub => sub(x, y),
                BinaryOp::Mul => mul(x, y),
                BinaryOp::Min => x.min(y),
                _ => x.max(y),
            }
        }
        let i32_of = |b: u64| b as u32 as i32;
        Some(match self {
            FastScalar::I32(b) => arith(
                b,
                i32_of(a[0]),
                i32_of(a[1]),
                i32::wrapping_add,
                i32::wrapping_sub,
                i32::wrapping_mul,
            ) as u32 as u64,
            FastScalar::I64(b) => arith(
                b,
                a[0] as i64,
                a[1] as i64,
                i64::wrapping_add,
                i64::wrapping_sub,
                i64::wrapping_mul,
            ) as u64,
            FastScalar::CmpI32(c) => compare_values(c, i32_of(a[0]), i32_of(a[1])) as u64,
            FastScalar::CmpI64(c) => compare_values(c, a[0] as i64, a[1] as i64) as u64,
            FastScalar::Select => a[if a[0] & 1 != 0 { 1 } else { 2 }],
            FastScalar::General => return None,
        })
    }
}

/// For each instruction, whether it is a `yield` that, ending an iteration
/// of a loop over its region (parameters `[iv, c_0, c_1, …]`), may set
/// `c_k` to its operand `k` one after the other: no operand `k` is a
/// parameter `c_j` with `j < k` (already overwritten by then). The
/// induction variable is set after them, so an operand may be it.
pub(super) fn in_order_yields(func: &Function) -> Vec<bool> {
    let mut out = vec![false; func.insts.len()];
    for r in func.regions.values() {
        let carried = r.params.get(1..).unwrap_or(&[]);
        for &i in &r.insts {
            let d = func.inst(i);
            if d.op == kernbench_compiler::ir::Op::Yield {
                out[i.as_u32() as usize] = d
                    .args
                    .iter()
                    .enumerate()
                    .all(|(k, a)| !carried[..k.min(carried.len())].contains(a));
            }
        }
    }
    out
}

/// For each `yield`, the operands it may move rather than copy into the
/// values it sets (bit `k` for operand `k`), each named once by it:
/// - those defined in the yield's own region. Nothing reads them after
///   the yield, the region's last instruction (a loop's next iteration
///   defines them again; an `if`'s are out of scope);
/// - a loop body's own carried parameter `c_j` passed as operand `k <= j`
///   (a shift `c_k = c_{k+1}`, as in a software pipeline): the in-order
///   copy ([`in_order_yields`]) reads it before it sets `c_j` anew.
///
/// Taking them saves a reference-count increment now and a decrement
/// later, and with them a touch of each value's shared data.
pub(super) fn yield_moves(func: &Function) -> Vec<u64> {
    let mut out = vec![0; func.insts.len()];
    let mut defined_in = vec![false; func.values.len()];
    for r in func.regions.values() {
        let Some(&last) = r.insts.last() else { continue };
        let d = func.inst(last);
        if d.op != kernbench_compiler::ir::Op::Yield {
            continue;
        }
        for &i in &r.insts {
            for v in &func.inst(i).results {
                defined_in[v.as_u32() as usize] = true;
            }
        }
        let carried = r.params.get(1..).unwrap_or(&[]);
        let mut mask = 0u64;
        for (k, a) in d.args.iter().enumerate().take(64) {
            let shifted = carried.iter().position(|c| c == a).is_some_and(|j| j >= k);
            if (defined_in[a.as_u32() as usize] || shifted) && d.args.iter().filter(|b| *b == a).count() == 1 {
                mask |= 1 << k;
            }
        }
        out[last.as_u32() as usize] = mask;
        for &i in &r.insts {
            for v in &func.inst(i).results {
                defined_in[v.as_u32() as usize] = false;
            }
        }
    }
    out
}

/// What the simulator knows about a plan group before running.
#[derive(Clone, Copy, Debug)]
pub(super) struct GroupInfo {
    pub engine: Engine,
    /// Compute time (0 for memory operations, timed by the fabric).
    pub cost_ps: u64,
    /// A load, store, atomic or `tl.gemm`.
    pub memory: bool,
    /// Its data effect happens when it ends (stores, atomics, `tl.gemm`).
    pub effect_at_end: bool,
    /// Address generation (see [`super::agu`]): computed when issued.
    pub address: bool,
    /// `tl.gemm`: its pipeline also holds the PE's DMA and MATH engines
    /// (DMA_IN and DMA_WB, the epilogue), so it starts when they are free
    /// too, and they are busy until it ends.
    pub pipeline: bool,
    /// The member that names the group in traces and diagnostics: a
    /// memory or GEMM group's operation, or a fused chain's last member
    /// that is not address generation (the one making its result).
    pub label: Inst,
}

/// The state of a shard of a launch (`launch.rs`: some of its logical
/// processes with their PEs, or all of them): its events, PEs, queue
/// halves, fabric copy, memory view and data path, and references to what
/// every shard shares.
pub(super) struct Sim<'a> {
    pub topo: &'a Topology,
    pub mem: super::MemView<'a>,
    pub fabric: super::Fabric,
    pub dp: &'a mut dyn DataPath,
    pub func: &'a Function,
    pub comms: &'a [Communicator],
    pub grid: [u32; 3],
    /// Record every operation (a trace).
    pub trace: bool,
    pub plan: &'a Plan,
    pub pes: PeSlab,
    /// The logical processes (one, or one per SIP of the machine; this
    /// shard runs `my_lps`), the one running, and each PE's and each
    /// SIP's.
    pub lps: Vec<Lp>,
    pub my_lps: Vec<usize>,
    pub cur_lp: usize,
    pub lp_of: &'a [u16],
    pub lp_of_sip: &'a [u16],
    /// The windows' length (see [`Lp`]).
    pub window_ps: u64,
    /// Hand-offs made in this window: by which process, to which, what.
    pub outbox: Vec<(u16, u16, Cross)>,
    pub now: u64,
    /// The time of the latest event run, in any process.
    latest_ps: u64,
    pub queues: Queues,
    /// Per PE: the TCM its live blocks and TCM allocations take, and the
    /// IPCQ queues into it so far with their slots' bytes (each holds its
    /// slots there when the buffer space is TCM).
    pub tcm_base_bytes: &'a [u64],
    pub queues_into: Vec<(u32, u64)>,
    /// With the IPCQ in SRAM or HBM: the queues whose slots each memory
    /// holds so far, and their bytes (one SRAM holds those into every PE
    /// of its cube).
    pub slot_queues: std::collections::HashMap<super::Placement, (u32, u64)>,
    /// The writes of each `tl.gemm` that has read its operands and not
    /// ended, by (PE, in-flight slot): they land when it ends.
    pub held_writes: std::collections::HashMap<(u32, u32), super::memory::Writes>,
    pub groups: &'a [GroupInfo],
    /// Per instruction (by index), its decoded form when it is pure
    /// scalar arithmetic.
    pub scalar_ops: &'a [Option<ScalarStep>],
    /// Per instruction: a `yield` whose values may be copied into its
    /// region's carried parameters one by one, in order, with the same
    /// result as all at once (see [`in_order_yields`]).
    pub in_order_yields: &'a [bool],
    /// Per instruction: a `yield`'s operands that may be moved (see
    /// [`yield_moves`]).
    pub yield_moves: &'a [u64],
    /// Per group: the inputs its queued operation may move out of the
    /// environment (see [`super::slots::EnvSlots::group_moves`]).
    pub group_moves: &'a [u64],
    /// Per address-generation group, its outputs' cones (see
    /// [`super::agu::cones`]), and the index of its first cone in each
    /// PE's `cone_memo`.
    pub cones: &'a [Option<Vec<super::agu::Cone>>],
    pub cone_base: &'a [usize],
    pub dispatch_ps: u64,
    pub dma_setup_ps: u64,
    pub queue_depth: usize,
    /// Every PE of the launch, in the simulator's order (the launch's,
    /// grouped by SIP: see `launch::Shared`), and its rank in its group.
    pub coords: &'a [PeCoord],
    pub ranks: &'a [u32],
    /// Each PE's group; each group's first position in the launch, and
    /// the PE at each position (see `launch::Shared`).
    pub group_of: &'a [u32],
    pub group_base: &'a [usize],
    pub pe_at: &'a [u32],
    /// Each PE's position in the launch.
    pub launch_order: &'a [usize],
    /// The IPCQ of this launch.
    pub ipcq: Ipcq,
    /// Its slot counts (within a SIP and across SIPs) and slot size, as
    /// divisors.
    pub ipcq_slots: Divisor,
    pub ipcq_slots_across_sips: Divisor,
    pub ipcq_slot_bytes: Divisor,
    /// The PEs that stalled in `wait_until` since the last wake-up (some
    /// may have left the stall since): a store wakes only these, not a
    /// scan of every PE, which cost O(PEs) per store.
    pub signal_waiters: Vec<u32>,
    /// Boxes of finished operations, for reuse.
    pub op_pool: super::pe::OpPool,
    pub events_run: u64,
    pub slices: Vec<Slice>,
    pub start_ps: u64,
    /// No event at or after this time runs (the launch's time limit).
    pub stop_ps: u64,
    /// The one SIP the launch may reach, when the caller said so.
    pub device: Option<u32>,
    /// See [`super::Launch::progress_ps`].
    pub progress_ps: Option<&'a std::sync::atomic::AtomicU64>,
}

pub(super) fn group_info(m: &Machine, func: &Function, plan: &Plan, g: GroupId, address: &HashSet<Value>) -> GroupInfo {
    let group = &plan.groups[g];
    let i = group.insts[0];
    let topo = &m.topo;
    let (engine, memory, effect_at_end) = group_engine(&func.inst(i).op);
    let is_address = |i: &Inst| is_address_inst(func, *i, address);
    // A fused elementwise chain costs its members' cycles, except those
    // that are address generation.
    let cycles: u64 = computing_members(func, group, address)
        .map(|i| match func.inst(i).op {
            Op::Dot { .. } => cost::dot_cycles_of(topo, func, i),
            _ => cost::math_cycles(topo, func, i),
        })
        .sum();
    GroupInfo {
        engine,
        cost_ps: if memory { 0 } else { topo.cycles_to_ps(cycles) },
        memory,
        effect_at_end,
        address: !memory && group.insts.iter().all(is_address),
        pipeline: matches!(func.inst(i).op, Op::Gemm { .. }),
        label: match engine {
            // The operation that gives the group its engine.
            Engine::Dma | Engine::Gemm => i,
            // A fused elementwise chain ends in the operation that makes its
            // result, whose span holds the whole expression (`x * 2.0 + 1.0`
            // is the `add`; its first member is the `splat` of 2.0).
            _ => computing_members(func, group, address).last().unwrap_or(i),
        },
    }
}

/// The engine of a group whose first instruction is `op`, whether the
/// group touches memory, and whether its effect on memory is at its end
/// (a write) rather than at its start (a load samples memory).
pub(super) fn group_engine(op: &Op) -> (Engine, bool, bool) {
    match op {
        Op::Load { .. } => (Engine::Dma, true, false),
        Op::Store { .. } | Op::AtomicAdd { .. } => (Engine::Dma, true, true),
        Op::Gemm { .. } => (Engine::Gemm, true, true),
        Op::Dot { .. } => (Engine::Gemm, false, false),
        _ => (Engine::Math, false, false),
    }
}

/// Whether instruction `i` only generates addresses (every result is in
/// `address`, [`super::agu::address_values`]).
fn is_address_inst(func: &Function, i: Inst, address: &HashSet<Value>) -> bool {
    let d = func.inst(i);
    !d.results.is_empty() && d.results.iter().all(|r| address.contains(r))
}

/// A group's members that compute data (not address generation), in
/// order: what a fused chain costs, and (the last) what names it.
pub(super) fn computing_members<'g>(
    func: &'g Function,
    group: &'g kernbench_compiler::datapath::Group,
    address: &'g HashSet<Value>,
) -> impl DoubleEndedIterator<Item = Inst> + 'g {
    group
        .insts
        .iter()
        .copied()
        .filter(move |i| !is_address_inst(func, *i, address))
}

impl<'a> Sim<'a> {
    /// A shard holding `pes` and running logical processes `my_lps`, with
    /// its own data path, fabric copy and memory view.
    pub fn new(
        sh: &'a super::launch::Shared<'a>,
        topo: &'a Topology,
        pes: PeSlab,
        my_lps: Vec<usize>,
        dp: &'a mut dyn DataPath,
        fabric: super::Fabric,
        mem: super::MemView<'a>,
    ) -> Sim<'a> {
        let ipcq = sh.ipcq.clone();
        Sim {
            topo,
            mem,
            fabric,
            dp,
            func: sh.func,
            comms: sh.comms,
            grid: sh.grid,
            trace: sh.trace,
            plan: &sh.plan,
            pes,
            lps: (0..sh.n_lps).map(|_| Lp::new()).collect(),
            cur_lp: my_lps.first().copied().unwrap_or(0),
            my_lps,
            lp_of: &sh.lp_of,
            lp_of_sip: &sh.lp_of_sip,
            window_ps: sh.window_ps,
            outbox: Vec::new(),
            now: sh.start_ps,
            latest_ps: sh.start_ps,
            queues: Queues::new(ipcq.slots(false) as u32, ipcq.slots(true) as u32),
            tcm_base_bytes: &sh.tcm_base_bytes,
            queues_into: vec![(0, 0); sh.coords.len()],
            slot_queues: Default::default(),
            held_writes: Default::default(),
            groups: &sh.groups,
            scalar_ops: &sh.scalar_ops,
            in_order_yields: &sh.in_order_yields,
            yield_moves: &sh.yield_moves,
            group_moves: &sh.env_slots.group_moves,
            cones: &sh.cones,
            cone_base: &sh.cone_base,
            dispatch_ps: sh.dispatch_ps,
            dma_setup_ps: sh.dma_setup_ps,
            queue_depth: sh.queue_depth,
            coords: &sh.coords,
            ranks: &sh.ranks,
            group_of: &sh.group_of,
            group_base: &sh.group_base,
            pe_at: &sh.pe_at,
            launch_order: &sh.order,
            ipcq_slots: Divisor::new(ipcq.slots(false)),
            ipcq_slots_across_sips: Divisor::new(ipcq.slots(true)),
            ipcq_slot_bytes: Divisor::new(ipcq.slot_size_bytes.0),
            ipcq,
            signal_waiters: Vec::new(),
            op_pool: Default::default(),
            events_run: 0,
            slices: Vec::new(),
            start_ps: sh.start_ps,
            stop_ps: sh.stop_ps,
            device: sh.device,
            progress_ps: sh.progress_ps,
        }
    }
}

impl Sim<'_> {
    /// Schedules `ev` at `t` in the logical process of its PE.
    pub fn schedule(&mut self, t: u64, ev: Ev) {
        let lp = match ev {
            Ev::Issue(p) | Ev::Kick(p, _) | Ev::Done(p, _) | Ev::Sample(p, _) => self.lp_of[p as usize] as usize,
            Ev::Cross(_) => self.cur_lp,
        };
        self.lps[lp].events.push(t, ev);
    }

    /// Hands `what` to logical process `lp` (delivered after this window).
    pub fn hand_off(&mut self, lp: u16, what: Cross) {
        self.outbox.push((self.cur_lp as u16, lp, what));
    }

    /// Schedules `what` to take effect in the running process at `t` (an
    /// [`Ev::Cross`] event).
    pub fn schedule_cross(&mut self, t: u64, what: Arrival) {
        let l = &mut self.lps[self.cur_lp];
        let k = match l.free_incoming.pop() {
            Some(k) => {
                l.incoming[k as usize] = Some(what);
                k
            }
            None => {
                l.incoming.push(Some(what));
                (l.incoming.len() - 1) as u32
            }
        };
        self.schedule(t, Ev::Cross(k));
    }

    /// Whether the launch runs as several logical processes.
    #[inline]
    pub fn windowed(&self) -> bool {
        self.lps.len() > 1
    }

    /// Makes sure PE `p`'s issue unit runs at `max(now, its clock)`.
    pub fn wake_issue(&mut self, p: usize) {
        let pe = &mut self.pes[p];
        if pe.stall == Stall::Finished || pe.issue_scheduled {
            return;
        }
        pe.stall = Stall::None;
        pe.issue_scheduled = true;
        pe.issue_ps = pe.issue_ps.max(self.now);
        let t = pe.issue_ps;
        self.schedule(t, Ev::Issue(p as u32));
    }

    /// Wakes PE `p`'s issue unit as [`Self::wake_issue`] does, but runs it
    /// at once, inside the current event, when that event would be now
    /// (its clock is not ahead of the global one and none is pending):
    /// the same time, one event fewer, and the PE's state is still in
    /// cache. Only engine events call it; the issue unit itself never
    /// does, so it does not re-enter itself.
    pub fn resume_issue(&mut self, p: usize) -> Result<(), SimError> {
        let pe = &self.pes[p];
        if pe.stall == Stall::Finished || pe.issue_scheduled {
            return Ok(());
        }
        if pe.issue_ps > self.now {
            self.wake_issue(p);
            return Ok(());
        }
        self.issue(p)
    }

    /// Asks engine `e` of PE `p` to try its queue at time `t`.
    #[inline]
    pub fn request_kick(&mut self, p: usize, e: Engine, t: u64) {
        let t = t.max(self.now);
        let eq = &mut self.pes[p].engines[e.index()];
        if eq.kick_at.is_some_and(|k| k <= t && k >= self.now) {
            return;
        }
        eq.kick_at = Some(t);
        self.schedule(t, Ev::Kick(p as u32, e as u8));
    }

    pub fn exec_error(&self, p: usize, inst: kernbench_compiler::ir::Inst, kind: ExecErrorKind) -> SimError {
        self.fail(p, ExecError { inst, kind })
    }

    pub fn fail(&self, p: usize, error: ExecError) -> SimError {
        self.fail_in(p, self.pes[p].program, error)
    }

    /// An error of an operation of program `program` (its index in the
    /// flattened grid) of PE `p`: a queued operation's program, which the
    /// issue unit may have left.
    pub fn fail_in(&self, p: usize, program: u32, error: ExecError) -> SimError {
        SimError::Exec {
            pe: self.coords[p],
            rank: self.pes[p].ctx.rank,
            program: self.program_id(u64::from(program)),
            error,
        }
    }

    /// [`Self::exec_error`] of queued operation `op`.
    pub fn op_error(&self, p: usize, op: &super::pe::OpRec, kind: ExecErrorKind) -> SimError {
        self.fail_in(p, op.program, ExecError { inst: op.inst, kind })
    }

    /// The program id (`tl.program_id` on each axis) of the program at
    /// `idx` of the flattened grid (axis 0 fastest).
    pub(super) fn program_id(&self, idx: u64) -> [u32; 3] {
        let [g0, g1, _] = self.grid;
        let (g0, g1) = (g0.max(1) as u64, g1.max(1) as u64);
        [(idx % g0) as u32, ((idx / g0) % g1) as u32, (idx / (g0 * g1)) as u32]
    }

    /// PE `p`'s communicator.
    pub fn comm(&self, p: usize) -> &Communicator {
        &self.comms[self.group_of[p] as usize]
    }

    /// Starts PE `p`'s next program, or marks it finished.
    pub fn start_next_program(&mut self, p: usize) {
        let func = self.func;
        let Some(idx) = self.pes[p].programs.next() else {
            let pe = &mut self.pes[p];
            pe.stall = Stall::Finished;
            pe.end_ps = pe.issue_ps.max(pe.last_done_ps);
            return;
        };
        let pid = self.program_id(idx);
        let pe = &mut self.pes[p];
        pe.ctx.pid = pid;
        // The grid has fewer than 2^32 programs (checked at launch).
        pe.program = idx as u32;
        pe.frames = vec![super::pe::Frame {
            region: func.body,
            idx: 0,
            kind: super::pe::FrameKind::Body,
        }];
        // At the issue unit's clock: the previous program's operations may
        // still be queued or running (see `end_program`).
        let t = pe.issue_ps;
        let params = &func.region(func.body).params;
        for (k, v) in params.iter().enumerate() {
            if let Some(a) = pe.args.get(k).cloned() {
                pe.set(*v, super::pe::Val::Ready { v: a, at: t });
            }
        }
        pe.stall = Stall::None;
        self.wake_issue(p);
    }

    /// Starts every PE's first program.
    pub fn start_programs(&mut self) {
        for p in self.pes.range() {
            self.start_next_program(p);
        }
    }

    /// The whole launch in this one shard: every process, window after
    /// window when there are several (delivering their hand-offs between
    /// windows in the order they were made), until none has anything
    /// left. The first error, by time then process.
    pub fn run_alone(&mut self) -> Result<(), (u64, usize, SimError)> {
        self.start_programs();
        if !self.windowed() {
            return self.run_lp(0, u64::MAX).map_err(|e| (self.now, 0, e));
        }
        let mut from = self.now;
        loop {
            let until = from.saturating_add(self.window_ps);
            if let Some(e) = self.run_window(until) {
                return Err(e);
            }
            self.now = until;
            for (_, dst, what) in std::mem::take(&mut self.outbox) {
                self.deliver(dst, what);
            }
            match self.next_event_ps() {
                Some(t) if t < self.stop_ps => from = t.max(until),
                _ => return Ok(()),
            }
        }
    }

    /// Runs this shard's processes' events before `until` (a window). An
    /// error stops its process; the first, by time then process, is
    /// returned once every process has run.
    pub fn run_window(&mut self, until: u64) -> Option<(u64, usize, SimError)> {
        let mut first: Option<(u64, usize, SimError)> = None;
        for k in 0..self.my_lps.len() {
            let lp = self.my_lps[k];
            if let Err(e) = self.run_lp(lp, until) {
                if first.as_ref().is_none_or(|(t, _, _)| self.now < *t) {
                    first = Some((self.now, lp, e));
                }
            }
        }
        first
    }

    /// When this shard's earliest event is due.
    pub fn next_event_ps(&self) -> Option<u64> {
        self.my_lps
            .iter()
            .filter_map(|&lp| self.lps[lp].events.peek_time())
            .min()
    }

    /// What this shard leaves once its run ends with `result`: its PEs'
    /// figures, its trace, and (for several shards) the state of the links
    /// it `owns`; when no error stopped it, the PEs it left blocked.
    pub fn finish(
        &mut self,
        result: Result<(), (u64, usize, SimError)>,
        owns: impl Fn(super::LinkId) -> bool,
    ) -> super::launch::ShardOut {
        let error = result.err();
        let timed_out = error.is_none() && self.next_event_ps().is_some();
        let blocked = if error.is_none() { self.blocked() } else { Vec::new() };
        let blocked = blocked.into_iter().map(|(p, b)| (self.launch_order[p], b)).collect();
        // The last message from another SIP to land here (its last byte
        // lands after the event that took it over): nobody may have
        // received it, and it still arrived.
        let last_arrival_ps = self
            .my_lps
            .iter()
            .map(|&lp| self.lps[lp].last_arrival_ps)
            .max()
            .unwrap_or(0);
        // Stuck since the last PE reached the operation it waits in and
        // its last operation ended: its issue clock, and the end of an
        // operation settled when it started, may be past the last event;
        // so may the last arrival.
        let stuck_ps = self
            .pes
            .iter()
            .filter(|(_, pe)| pe.stall != Stall::Finished)
            .map(|(_, pe)| pe.issue_ps.max(pe.last_done_ps))
            .fold(self.latest_ps.max(last_arrival_ps), u64::max);
        let pes: Vec<PeStat> = self
            .pes
            .iter()
            .map(|(p, s)| PeStat {
                pe: self.coords[p],
                rank: s.ctx.rank,
                end_ps: s.end_ps,
                busy_ps: s.busy_ps,
                issue_spans: s.issue_spans.clone().unwrap_or_default(),
                issue_stalls: s.issue_stalls.clone().unwrap_or_default(),
            })
            .collect();
        let end_ps = pes
            .iter()
            .map(|p| p.end_ps)
            .fold(self.start_ps.max(last_arrival_ps), u64::max);
        let links = &self.fabric.links;
        let intervals = match self.fabric.record.take() {
            Some(r) if error.is_none() => r.iter().map(|&(i, s, e)| (links[i as usize].id, s, e)).collect(),
            _ => Vec::new(),
        };
        let unreceived = if error.is_none() { self.unreceived() } else { Vec::new() };
        super::launch::ShardOut {
            error,
            unreceived,
            pes,
            end_ps,
            slices: std::mem::take(&mut self.slices),
            events: self.events_run,
            intervals,
            blocked,
            timed_out,
            stuck_ps,
            links: links.iter().filter(|l| owns(l.id)).cloned().collect(),
        }
    }

    /// Delivers hand-off `what` to process `lp` (between windows): a
    /// transfer is an event there when its head arrives; credits are back
    /// at their sender's half of the queue; an acknowledgement's
    /// operation ends when it arrives.
    pub fn deliver(&mut self, lp: u16, what: Cross) {
        self.cur_lp = lp as usize;
        match what {
            Cross::Transfer(h) => self.schedule_cross(h.at.arrive_ps, Arrival::Transfer(h)),
            Cross::Credits {
                src,
                dst,
                control,
                back_ps,
                slots,
            } => self.credits_back(src, dst, control, back_ps, slots),
            Cross::Ack { pe, slot, at_ps, outs } => {
                if let Some(Some(op)) = self.pes[pe as usize].inflight.get(slot as usize) {
                    for (s, v) in op.results.iter().zip(outs) {
                        let _ = s.data.set(v);
                        s.ready_ps.set(at_ps);
                    }
                }
                self.schedule(at_ps, Ev::Done(pe, slot));
            }
        }
    }

    /// Runs logical process `lp`'s events before `until`.
    fn run_lp(&mut self, lp: usize, until: u64) -> Result<(), SimError> {
        self.cur_lp = lp;
        while let Some((t, ev)) = self.lps[lp].events.pop_before(until.min(self.stop_ps)) {
            self.now = t;
            self.events_run += 1;
            if self.events_run % super::PROGRESS_EVERY_EVENTS == 0 {
                if let Some(p) = self.progress_ps {
                    p.fetch_max(t - self.start_ps, std::sync::atomic::Ordering::Relaxed);
                }
            }
            self.prefetch_next();
            match ev {
                Ev::Issue(p) => {
                    self.pes[p as usize].issue_scheduled = false;
                    self.issue(p as usize)?;
                }
                Ev::Kick(p, e) => {
                    let e = Engine::ALL[e as usize];
                    let eq = &mut self.pes[p as usize].engines[e.index()];
                    if eq.kick_at == Some(t) {
                        eq.kick_at = None;
                    }
                    self.kick(p as usize, e)?;
                }
                Ev::Done(p, slot) => self.done(p as usize, slot)?,
                Ev::Sample(p, slot) => self.sample(p as usize, slot)?,
                Ev::Cross(k) => {
                    let l = &mut self.lps[lp];
                    let what = l.incoming.get_mut(k as usize).and_then(Option::take);
                    l.free_incoming.push(k);
                    if let Some(what) = what {
                        self.take_over(what)?;
                    }
                }
            }
        }
        self.latest_ps = self.latest_ps.max(self.now);
        Ok(())
    }

    /// Starts fetching the PE state the next two events will read, when
    /// the queue knows them: with thousands of PEs, each event's first
    /// reads of its PE would otherwise miss the caches one after the other
    /// (the state, then an operation it points to). The event after next
    /// gets its PE's fields, the next one (whose fields the previous call
    /// fetched) what those point to.
    #[inline(always)]
    fn prefetch_next(&self) {
        let at = |ev: &Ev| match *ev {
            Ev::Issue(p) => (p, EventKind::Issue),
            Ev::Kick(p, e) => (p, EventKind::Kick(e as usize)),
            Ev::Done(p, slot) | Ev::Sample(p, slot) => (p, EventKind::Finish(slot)),
            Ev::Cross(_) => (u32::MAX, EventKind::Issue),
        };
        let events = &self.lps[self.cur_lp].events;
        if let Some((p, kind)) = events.peek_now(1).map(at) {
            if let Some(pe) = self.pes.get(p as usize) {
                pe.prefetch_state(kind);
            }
        }
        if let Some((p, kind)) = events.peek_now(0).map(at) {
            if let Some(pe) = self.pes.get(p as usize) {
                pe.prefetch_targets(kind);
            }
        }
    }

    /// The instruction PE `p`'s issue unit is at (a group's first).
    fn issue_inst_at(&self, p: usize) -> Option<Inst> {
        self.issue_step(p).map(|s| match s {
            kernbench_compiler::datapath::Step::Inst(i)
            | kernbench_compiler::datapath::Step::Relabel(i)
            | kernbench_compiler::datapath::Step::Control(i) => i,
            kernbench_compiler::datapath::Step::Group(g) => self.plan.groups[g].insts[0],
        })
    }

    /// The step PE `p`'s issue unit is at (none once its program returned).
    pub(super) fn issue_step(&self, p: usize) -> Option<kernbench_compiler::datapath::Step> {
        let f = self.pes[p].frames.last()?;
        self.plan.steps[f.region].get(f.idx).copied()
    }

    /// The data messages left in their receivers' slots, per queue (the
    /// receiver's side of one between two processes: the sender's does
    /// not keep them).
    fn unreceived(&self) -> Vec<super::report::Unreceived> {
        self.queues
            .queues
            .iter()
            .filter(|q| !q.control && q.half != super::ipcq::Half::Send)
            .filter_map(|q| {
                let first = q.msgs.front()?;
                let (src, dst) = (q.src as usize, q.dst as usize);
                Some(super::report::Unreceived {
                    from: self.coords[src],
                    from_rank: self.ranks[src],
                    to: self.coords[dst],
                    to_rank: self.ranks[dst],
                    messages: q.msgs.len() as u64,
                    bytes: q.msgs.iter().map(|m| m.bytes).sum(),
                    sent_by: first.sent_by,
                })
            })
            .collect()
    }

    /// What every unfinished PE waits for (the facts of a deadlock).
    fn blocked(&self) -> Vec<(usize, Blocked)> {
        let func = self.func;
        let mut out = Vec::new();
        for (p, pe) in self.pes.iter() {
            if pe.stall == Stall::Finished {
                continue;
            }
            let coord = self.coords[p];
            let mut found = false;
            for e in [Engine::Send, Engine::Recv] {
                let Some(head) = pe.engines[e.index()].queue.front() else {
                    continue;
                };
                let (reason, peer) = match head.kind {
                    super::pe::OpKind::Recv { queue, msg } => {
                        let q = &self.queues.queues[queue as usize];
                        if q.arrival_ps(msg).is_some() {
                            continue;
                        }
                        let from_rank = self.ranks[q.src as usize];
                        (WaitReason::NoData { from_rank }, self.coords[q.src as usize])
                    }
                    super::pe::OpKind::Send { queue, slots: need } => {
                        let q = &self.queues.queues[queue as usize];
                        // Credits back by now count (in a deadlock, every
                        // one is); with enough, the send waits for
                        // something else (its operand, at a time limit).
                        let free = q.credits_by(self.now);
                        if free >= need {
                            continue;
                        }
                        let slots = q.n_slots;
                        let full = WaitReason::QueueFull {
                            to_rank: self.ranks[q.dst as usize],
                            used: slots - free.min(slots),
                            slots,
                        };
                        (full, self.coords[q.dst as usize])
                    }
                    _ => continue,
                };
                found = true;
                out.push((
                    p,
                    Blocked {
                        pe: coord,
                        rank: pe.ctx.rank,
                        inst: head.inst,
                        reason,
                        peer: Some(peer),
                        peer_finished: false,
                        issue_at: match pe.stall {
                            // Stopped before queuing its next operation
                            // (that engine's queue is full): where, and why.
                            Stall::QueueFull(e) => {
                                self.issue_inst_at(p).map(|w| (w, Some((e, self.queue_depth as u32))))
                            }
                            _ => pe.wait_inst.filter(|_| pe.wait_for.is_some()).map(|w| (w, None)),
                        }
                        .filter(|(w, _)| *w != head.inst),
                    },
                ));
            }
            if found {
                continue;
            }
            // Where it is: an issue unit free to go on is at its next step;
            // a stalled one waits for its operations: the one an engine is
            // busy with now (the earliest started), else the oldest started
            // and not finished, else the oldest queued.
            let now = self.now;
            let oldest_op = || {
                let busy = pe
                    .engines
                    .iter()
                    .filter_map(|eq| eq.last_started)
                    .filter(|&(start, end, _)| start <= now && now < end)
                    .map(|(start, _, inst)| (start, inst))
                    .min();
                let started = busy.or_else(|| pe.inflight.iter().flatten().map(|op| (op.issued_ps, op.inst)).min());
                let queued = || {
                    pe.engines
                        .iter()
                        .filter_map(|eq| eq.queue.front().map(|op| (op.issued_ps, op.inst)))
                        .min()
                };
                started.or_else(queued).map(|(_, i)| i)
            };
            let waiting_on_ops = pe.stall != Stall::None && pe.stall != Stall::Signal;
            let inst = waiting_on_ops
                .then(oldest_op)
                .flatten()
                .or_else(|| self.issue_inst_at(p))
                // Its program has returned and a time limit stopped it
                // before it ended: at the return.
                .or_else(|| {
                    pe.frames
                        .is_empty()
                        .then(|| func.region(func.body).insts.last().copied())
                        .flatten()
                })
                .or_else(oldest_op)
                .unwrap_or_else(|| func.region(func.body).insts[0]);
            let mut peer = None;
            let reason = match pe.stall {
                Stall::Signal => {
                    let (addr, dt, want) = pe.signal_wait.unwrap_or((0, DType::I32, 0));
                    let size = dt.size_bytes() as usize;
                    let mut buf = [0u8; 8];
                    let holds = self
                        .mem
                        .peek(addr, &mut buf[..size])
                        .map(|()| kernbench_compiler::datapath::elem::to_i64(dt, u64::from_le_bytes(buf)));
                    WaitReason::Signal {
                        holds,
                        want: kernbench_compiler::datapath::elem::to_i64(dt, want),
                    }
                }
                // Waiting for the token of its last round.
                Stall::Data if pe.barrier_round > 0 && pe.wait_for.is_some() => {
                    let (_, from) = self.barrier_peers(p, pe.barrier_round - 1);
                    peer = Some(self.coords[from as usize]);
                    WaitReason::Barrier {
                        from_rank: self.ranks[from as usize],
                        round: u32::from(pe.barrier_round),
                        rounds: super::issue::barrier_rounds(self.comm(p).world()),
                    }
                }
                _ => WaitReason::Other,
            };
            out.push((
                p,
                Blocked {
                    pe: coord,
                    rank: pe.ctx.rank,
                    inst,
                    reason,
                    peer,
                    peer_finished: false,
                    issue_at: None,
                },
            ));
        }
        out
    }

    /// The control-message latency between two PEs' cores (launch
    /// indices).
    pub fn core_latency_ps(&mut self, from: usize, to: usize) -> u64 {
        let (a, b) = (self.coords[from], self.coords[to]);
        if a == b {
            return 0;
        }
        self.fabric.latency_ps(Endpoint::Core(a), Endpoint::Core(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::{PureScalar, ScalarCtx};

    /// Every shortcut gives `PureScalar::eval`'s bits, on operands with
    /// extreme values and with stray high bits above an i32.
    #[test]
    fn fast_scalars_agree_with_the_general_evaluation() {
        let ctx = ScalarCtx {
            pid: [0; 3],
            grid: [1; 3],
            rank: 0,
            world: 1,
            mesh_id: [0; 2],
            mesh_size: [1; 2],
        };
        let binary = [
            BinaryOp::Add,
            BinaryOp::Sub,
            BinaryOp::Mul,
            BinaryOp::Min,
            BinaryOp::Max,
        ];
        let cmps = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge];
        let mut ops = vec![PureScalar::Select];
        for d in [DType::I32, DType::I64] {
            ops.extend(binary.iter().map(|&b| PureScalar::Binary(b, d)));
            ops.extend(cmps.iter().map(|&c| PureScalar::Cmp(c, d)));
        }
        let special = [
            0u64,
            1,
            u64::MAX,
            i32::MAX as u64,
            i32::MIN as u32 as u64,
            i32::MIN as i64 as u64,
            i64::MIN as u64,
            0xdead_beef_0000_0007,
        ];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for op in ops {
            let fast = FastScalar::of(op);
            assert_ne!(fast, FastScalar::General, "{op:?} has a shortcut");
            for k in 0..2_000 {
                let bits = if k < special.len() * special.len() {
                    [special[k % special.len()], special[k / special.len()], next()]
                } else {
                    [next(), next() >> (k % 64), next()]
                };
                let want = op.eval(|j| bits[j], &ctx).expect("no division");
                assert_eq!(fast.eval(&bits), Some(want), "{op:?} on {bits:x?}");
            }
        }
        assert_eq!(
            FastScalar::of(PureScalar::Binary(BinaryOp::Div, DType::I32)),
            FastScalar::General
        );
        assert_eq!(
            FastScalar::of(PureScalar::Binary(BinaryOp::Add, DType::F32)),
            FastScalar::General
        );
    }
}
