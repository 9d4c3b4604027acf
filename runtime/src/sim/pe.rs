//! One PE's state during a launch: its issue unit (where it is in the
//! program, the values it has defined), its engines' FIFO queues, the
//! operations in flight, and the memory operations that order each other.
//!
//! **Renaming.** The issue unit runs ahead of the engines, so a loop body
//! may define a value again before the previous iteration's consumers have
//! run. Every dynamic definition therefore gets its own [`Slot`]; an
//! operation captures the slots of its operands when it is issued (the way
//! hardware renames registers), and the environment maps each IR value to
//! its latest definition.

use super::fabric::{Endpoint, Route};
use super::Engine;
use kernbench_compiler::datapath::RtValue;
use kernbench_compiler::ir::{Inst, Region, Value};
use kernbench_compiler::sema::types::{DType, Direction};
use smallvec::SmallVec;
use std::cell::{Cell, OnceCell};
use std::collections::VecDeque;
use std::ptr::NonNull;
use std::rc::Rc;

/// Captured operands: most operations have few.
pub type Args = SmallVec<[(Value, Val); 3]>;
/// The footprints of a memory operation. One inline (a load or store;
/// `tl.gemm`'s three spill): the PE walks its memory operations' list
/// before each new one starts, so this keeps the list small.
pub type Ranges = SmallVec<[Footprint; 1]>;

/// Bytes a memory operation may touch, for ordering inside the PE: those
/// of `[lo, hi)` and, with a `period`, only the `run` bytes from `phase`
/// of every `period` bytes (a strided access: one element in every few,
/// or the rows of a tile). A superset of what it touches is safe (it
/// orders more than it must); a subset never is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    pub lo: u64,
    pub hi: u64,
    /// 0: every byte of `[lo, hi)`.
    pub period: u64,
    /// Where in each period the touched bytes start (`< period`).
    pub phase: u64,
    /// How many bytes of each period are touched (`<= period`).
    pub run: u64,
    pub write: bool,
}

impl Footprint {
    /// Every byte of `[lo, hi)`.
    pub fn span(lo: u64, hi: u64, write: bool) -> Footprint {
        Footprint {
            lo,
            hi,
            period: 0,
            phase: 0,
            run: 0,
            write,
        }
    }

    /// Whether the two may share a byte: their spans meet and, when both
    /// repeat with the same period, their runs meet within it (two
    /// different periods, or one span, are taken to meet: conservative).
    pub fn overlaps(&self, other: &Footprint) -> bool {
        if self.lo >= other.hi || other.lo >= self.hi {
            return false;
        }
        let p = self.period;
        if p == 0 || other.period != p {
            return true;
        }
        // Other's runs start `d` bytes after ours in every period.
        let d = (other.phase + p - self.phase) % p;
        d < self.run || p - d < other.run
    }
}

/// Ready time of a value whose producer has not started.
pub const UNKNOWN: u64 = u64::MAX;

/// The result of an engine operation: filled when the operation starts
/// (its data) and ready when it ends.
#[derive(Debug)]
pub struct Slot {
    pub data: OnceCell<RtValue>,
    pub ready_ps: Cell<u64>,
}

impl Slot {
    pub fn new() -> Rc<Slot> {
        Rc::new(Slot {
            data: OnceCell::new(),
            ready_ps: Cell::new(UNKNOWN),
        })
    }

    /// When the value is ready, once its producer has started.
    #[inline]
    pub fn ready(&self) -> Option<u64> {
        Some(self.ready_ps.get()).filter(|t| *t != UNKNOWN)
    }
}

/// A value as the issue unit holds it.
#[derive(Clone, Debug, Default)]
pub enum Val {
    #[default]
    Unset,
    /// Known now (computed by the issue unit), ready at `at`.
    Ready { v: RtValue, at: u64 },
    /// Produced by an engine operation.
    Pending(Rc<Slot>),
}

impl Val {
    /// When the value is ready, if its producer has started.
    #[inline]
    pub fn ready_ps(&self) -> Option<u64> {
        match self {
            Val::Unset => Some(0),
            Val::Ready { at, .. } => Some(*at),
            Val::Pending(s) => s.ready(),
        }
    }

    /// The data, once the producer has started.
    #[inline]
    pub fn data(&self) -> Option<&RtValue> {
        match self {
            Val::Unset => None,
            Val::Ready { v, .. } => Some(v),
            Val::Pending(s) => s.data.get(),
        }
    }
}

/// What kind of engine operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// A data-path group: compute (MATH, GEMM) or memory (DMA, `tl.gemm`).
    Group(usize),
    /// `tl.send` on queue `queue` of a message taking `slots` slots (its
    /// message number is given when it starts).
    Send { queue: u32, slots: u32 },
    /// `tl.recv`/`tl.recv_async` of message `msg` of queue `queue`.
    Recv { queue: u32, msg: u64 },
    /// `tl.notify`: write `bits` (`size` bytes, at most 8) at `addr` once
    /// every earlier memory operation of the PE has finished.
    Notify { addr: u64, bits: u64, size: u8 },
    /// A put or notify into another SIP's memory, handed to that SIP's
    /// logical process: it writes there, and this operation ends when the
    /// acknowledgement is back (its results, if any, come with it).
    Remote,
}

/// An issued operation: three cache lines, aligned. Its engine, its
/// in-flight slot and the PE's finishing events each look at it long after
/// the issue unit wrote it, cold once a launch has thousands of PEs, and
/// every PE has several in flight (docs/architecture.md, Performance).
#[derive(Debug)]
#[repr(align(64))]
pub struct OpRec {
    pub inst: Inst,
    /// The program that issued it, as its index in the flattened grid
    /// (filled when queued): the next program may be issuing by the time
    /// it starts, and its errors name its own.
    pub program: u32,
    pub kind: OpKind,
    /// Captured operands: for a group its inputs (in the group's order),
    /// for a send the value (and rank), for a receive nothing.
    pub args: Args,
    pub results: SmallVec<[Rc<Slot>; 1]>,
    /// Its entry in the PE's memory-order list ([`NO_MEM_OP`]: none; see
    /// [`Self::mem_id`]).
    mem_id: u64,
    /// When the issue unit dispatched it (filled when queued): it starts
    /// no earlier, whatever wakes its engine.
    pub issued_ps: u64,
    /// A load's end, from its start until it samples memory.
    pub end_ps: u64,
    /// The operation behind it in its engine's queue ([`OpFifo`], which
    /// owns it).
    next: Option<NonNull<OpRec>>,
}

const _: () = assert!(std::mem::size_of::<OpRec>() == 192);

/// The memory-order number of an operation that is not a memory operation.
const NO_MEM_OP: u64 = u64::MAX;

/// An operation as the queues and the in-flight list hold it: boxed, so
/// that it moves as a pointer, and recycled through [`OpPool`].
pub type OpBox = Box<OpRec>;

/// Finished operations' boxes, emptied, for the next ones: issuing an
/// operation then writes its fields in place, with no allocation and no
/// copy of the 192-byte record (moving it by value between issue, queue,
/// engine and in-flight list cost ~10 copies per operation).
#[derive(Default)]
pub struct OpPool(Vec<OpBox>);

impl OpPool {
    /// An operation with no operands or results yet.
    pub fn take(&mut self, inst: Inst, kind: OpKind, mem_id: Option<u64>) -> OpBox {
        match self.0.pop() {
            Some(mut op) => {
                op.inst = inst;
                op.kind = kind;
                op.mem_id = mem_id.unwrap_or(NO_MEM_OP);
                op.issued_ps = 0;
                op.end_ps = 0;
                op.program = 0;
                op
            }
            None => Box::new(OpRec {
                inst,
                kind,
                args: Args::new(),
                results: SmallVec::new(),
                mem_id: mem_id.unwrap_or(NO_MEM_OP),
                issued_ps: 0,
                end_ps: 0,
                program: 0,
                next: None,
            }),
        }
    }

    /// Takes back a finished operation (its operands and results are
    /// released now).
    pub fn give(&mut self, mut op: OpBox) {
        op.args.clear();
        op.results.clear();
        self.0.push(op);
    }
}

impl OpRec {
    /// Its entry in the PE's memory-order list, if it is a memory
    /// operation.
    #[inline]
    pub fn mem_id(&self) -> Option<u64> {
        (self.mem_id != NO_MEM_OP).then_some(self.mem_id)
    }

    pub fn arg(&self, v: Value) -> Option<&Val> {
        self.args.iter().find(|(a, _)| *a == v).map(|(_, x)| x)
    }
}

/// Operations in order, linked through their records: the head is in the
/// queue itself, so the engine reaches it with no separate buffer to read
/// (one cold line fewer per engine event on a launch of thousands of PEs,
/// and the event loop can prefetch the head from the engine's line).
/// Linked as `std::collections::LinkedList` is: the queue owns its
/// records as raw pointers from `Box::into_raw`, one box again each when
/// it leaves.
#[derive(Default)]
pub struct OpFifo {
    head: Option<NonNull<OpRec>>,
    tail: Option<NonNull<OpRec>>,
    len: usize,
}

impl OpFifo {
    #[inline]
    pub fn front(&self) -> Option<&OpRec> {
        // SAFETY: `head` is a record this queue owns (from `Box::into_raw`,
        // freed only by `pop_front`), and nothing else refers to it while
        // the queue is borrowed.
        self.head.map(|op| unsafe { op.as_ref() })
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The operations from the head on.
    pub fn iter(&self) -> impl Iterator<Item = &OpRec> {
        // SAFETY: as in `front`: every linked record is owned by the
        // queue borrowed here.
        std::iter::successors(self.front(), |op| op.next.map(|next| unsafe { next.as_ref() }))
    }

    pub fn push_back(&mut self, mut op: OpBox) {
        op.next = None;
        let op = NonNull::from(Box::leak(op));
        match self.tail {
            None => self.head = Some(op),
            // SAFETY: `tail` is the last record this queue owns, and no
            // reference to it is alive (`front`'s borrows the queue).
            Some(mut last) => unsafe { last.as_mut().next = Some(op) },
        }
        self.tail = Some(op);
        self.len += 1;
    }

    pub fn pop_front(&mut self) -> Option<OpBox> {
        let first = self.head?;
        // SAFETY: `head` came from `Box::into_raw` (`Box::leak`) in
        // `push_back` and leaves the queue here, once.
        let mut op = unsafe { Box::from_raw(first.as_ptr()) };
        self.head = op.next.take();
        if self.head.is_none() {
            self.tail = None;
        }
        self.len -= 1;
        Some(op)
    }
}

impl Drop for OpFifo {
    fn drop(&mut self) {
        while self.pop_front().is_some() {}
    }
}

impl std::fmt::Debug for OpFifo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|op| (op.inst, op.kind)))
            .finish()
    }
}

/// An engine's FIFO queue.
#[derive(Debug, Default)]
pub struct EngineQueue {
    pub queue: OpFifo,
    /// When the engine can start its next operation.
    pub free_at_ps: u64,
    /// The earliest pending kick event (avoids duplicates).
    pub kick_at: Option<u64>,
    /// Since when the head waits for credits (poll back-pressure).
    pub blocked_since: Option<u64>,
    /// Start times of compute scheduled at issue (it occupies queue
    /// entries until it starts).
    pub scheduled_starts: VecDeque<u64>,
    /// The operation it started last: its start, the end of its busy
    /// time, its instruction (where a PE is when a run stops at its time
    /// limit).
    pub last_started: Option<(u64, u64, kernbench_compiler::ir::Inst)>,
}

/// A memory operation's footprint, for ordering inside the PE. Its number
/// is implicit: the list holds consecutive numbers (operations are added
/// in program order and retired from the front), so an operation is found
/// by subtraction, not by a search.
#[derive(Debug)]
pub struct MemOp {
    pub ranges: Ranges,
    /// It has read (or, writing only, started): later operations may be
    /// ordered against its footprint.
    pub started: bool,
    pub done: bool,
    /// When it finishes, once known before it does (a load, when it
    /// samples memory); [`UNKNOWN`] otherwise. It counts as done from
    /// then on.
    pub done_at_ps: u64,
    /// Its inputs stream in until it ends (`tl.gemm`, which takes their
    /// data when its first transfer starts, but whose tiles, in the
    /// machine, keep reading them): a later write to them
    /// waits for its end, not its start.
    pub reads_at_end: bool,
}

/// An address-generation cone's last evaluation on a PE: the inputs it
/// saw and the formula they gave. One cache line, aligned: a loop checks
/// its memo at every iteration, cold once a launch has thousands of PEs
/// (two inputs inline, the usual count; more spill).
#[derive(Clone, Debug, Default)]
#[repr(align(64))]
pub struct ConeMemo(pub Option<(SmallVec<[RtValue; 2]>, RtValue)>);

const _: () = assert!(std::mem::size_of::<ConeMemo>() == 64);

/// Where the issue unit is inside a region.
#[derive(Clone, Debug)]
pub enum FrameKind {
    Body,
    If {
        inst: Inst,
    },
    For {
        inst: Inst,
        iv: i64,
        ub: i64,
        step: i64,
        dt: DType,
    },
    WhileBefore {
        inst: Inst,
    },
    WhileBody {
        inst: Inst,
    },
}

#[derive(Clone, Debug)]
pub struct Frame {
    pub region: Region,
    pub idx: usize,
    pub kind: FrameKind,
}

/// The programs a PE still runs: `next, next + step, …` below `end`.
#[derive(Clone, Copy, Debug)]
pub struct Programs {
    pub next: u64,
    pub step: u64,
    pub end: u64,
}

impl Programs {
    /// Whether a program is left to run.
    pub fn remaining(&self) -> bool {
        self.next < self.end
    }
}

impl Iterator for Programs {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        (self.next < self.end).then(|| {
            let n = self.next;
            self.next = self.next.saturating_add(self.step.max(1));
            n
        })
    }
}

/// What an event will look at in its PE, for prefetching.
#[derive(Clone, Copy, Debug)]
pub enum EventKind {
    /// The issue unit (its frames and values).
    Issue,
    /// Engine queue (by index).
    Kick(usize),
    /// An operation in flight (by slot) finishing or sampling memory.
    Finish(u32),
}

/// Why the issue unit is not issuing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stall {
    /// It may go on (an issue event is scheduled or due).
    None,
    /// It needs a value an engine has not produced yet, or a barrier
    /// token that has not arrived.
    Data,
    /// An engine queue is full.
    QueueFull(Engine),
    /// Its engines must drain (program end, barrier).
    Drain,
    /// `tl.wait_until`: a signal word has not reached its value.
    Signal,
    /// No programs left.
    Finished,
}

impl Stall {
    /// Why, in a trace's words.
    pub fn describe(self) -> &'static str {
        match self {
            Stall::None => "may go on",
            Stall::Data => "waits for a value not produced yet",
            Stall::QueueFull(Engine::Dma) => "the DMA queue is full",
            Stall::QueueFull(Engine::Gemm) => "the GEMM queue is full",
            Stall::QueueFull(Engine::Math) => "the MATH queue is full",
            Stall::QueueFull(Engine::Send) => "the send queue is full",
            Stall::QueueFull(Engine::Recv) => "the receive queue is full",
            Stall::Drain => "waits for its engines to drain",
            Stall::Signal => "waits for a signal word",
            Stall::Finished => "finished",
        }
    }
}

pub struct PeState {
    /// Programs still to run (flattened grid indices).
    pub programs: Programs,
    /// What the built-ins (`tl.program_id`, `tl.rank`, …) answer for the
    /// current program: its rank (`ctx.rank`) and program id (`ctx.pid`).
    pub ctx: crate::exec::ScalarCtx,
    /// The current program's index in the flattened grid (`ctx.pid` is
    /// its id on each axis).
    pub program: u32,
    pub frames: Vec<Frame>,
    /// The values the issue unit holds, one entry per live range
    /// ([`super::slots`]): `env[slot_of[v]]` is value `v`'s.
    env: Vec<Val>,
    slot_of: std::sync::Arc<[u32]>,
    /// The PE's arguments, bound at the start of each program.
    pub args: Vec<RtValue>,
    /// The issue unit's own clock (never behind the global clock when it
    /// acts on shared state).
    pub issue_ps: u64,
    pub stall: Stall,
    pub issue_scheduled: bool,
    pub engines: [EngineQueue; Engine::COUNT],
    /// Bit `e` set when engine `e`'s head waits for something of this PE
    /// (an operand, an earlier memory operation): the PE's next finishing
    /// operation retries it. One word for all engines, so that finding
    /// them does not touch each engine's state.
    waiting_on_pe: u8,
    /// Started, not finished operations (slab indices).
    pub inflight: Vec<Option<OpBox>>,
    pub free_slots: Vec<u32>,
    pub inflight_count: u32,
    pub mem_ops: VecDeque<MemOp>,
    pub next_mem_id: u64,
    /// Busy time per engine, plus the issue unit's (last entry).
    pub busy_ps: [u64; Engine::COUNT + 1],
    /// When the last operation of the PE finished.
    pub last_done_ps: u64,
    pub end_ps: u64,
    /// Rounds of the current barrier begun (0: not in one): its token of
    /// round `barrier_round - 1` is the one it waits for.
    pub barrier_round: u8,
    /// `tl.wait_until` stalled on: the signal word's address and dtype,
    /// and the value it waits for (what a deadlock's note compares).
    pub signal_wait: Option<(u64, DType, u64)>,
    /// A blocking receive or wait: issue resumes when this is ready.
    pub wait_for: Option<Rc<Slot>>,
    /// Per address-generation cone (`Sim::cones`), its last evaluation.
    pub cone_memo: Vec<ConeMemo>,
    /// The queue to (`[1]`) and from (`[0]`) each direction's peer, once
    /// used (`u32::MAX` before).
    pub dir_queues: [[u32; Direction::COUNT]; 2],
    /// The last route of a DMA from (`[0]`) and to (`[1]`) a memory, with
    /// that memory's endpoint.
    pub dma_routes: [Option<(Endpoint, Rc<Route>)>; 2],
    /// The allocation the PE's last memory operation went to (its first
    /// and one-past-last address, its placement): a kernel's accesses
    /// mostly stay in one, and allocations do not move during a launch,
    /// so the next one in it needs no lookup (whose lines are cold on a
    /// launch of thousands of PEs).
    pub last_extent: Cell<Option<(u64, u64, super::Placement)>>,
    /// When tracing, the issue unit's busy spans: back-to-back dispatches
    /// merged into one `[start, end)`; a stall ends a span.
    pub issue_spans: Option<Vec<(u64, u64)>>,
    /// When tracing, where the issue unit stopped and why: its clock, the
    /// instruction it could not go past, the reason; one per stall (a
    /// retry that stalls again at the same place, with no dispatch
    /// between, adds none).
    pub issue_stalls: Option<Vec<(u64, Inst, &'static str)>>,
    /// The receive, wait or barrier whose data `wait_for` waits for.
    pub wait_inst: Option<Inst>,
}

/// The PEs a shard of a launch holds (`launch.rs`): a contiguous range of
/// the launch's PE indices, indexed by launch index. Indexing a PE of
/// another shard panics: a shard never reaches into another's PEs.
pub struct PeSlab {
    first: usize,
    pes: Vec<PeState>,
}

impl PeSlab {
    /// `pes` are PEs `first, first + 1, …` of the launch.
    pub fn new(first: usize, pes: Vec<PeState>) -> PeSlab {
        PeSlab { first, pes }
    }

    #[inline]
    pub fn get(&self, p: usize) -> Option<&PeState> {
        self.pes.get(p.wrapping_sub(self.first))
    }

    /// The PEs with their launch indices.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &PeState)> {
        self.pes.iter().enumerate().map(|(k, pe)| (self.first + k, pe))
    }

    /// Their launch indices.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.first..self.first + self.pes.len()
    }
}

impl std::ops::Index<usize> for PeSlab {
    type Output = PeState;

    #[inline]
    fn index(&self, p: usize) -> &PeState {
        &self.pes[p.wrapping_sub(self.first)]
    }
}

impl std::ops::IndexMut<usize> for PeSlab {
    #[inline]
    fn index_mut(&mut self, p: usize) -> &mut PeState {
        &mut self.pes[p.wrapping_sub(self.first)]
    }
}

/// Asks the CPU to bring the cache line holding `at` into its caches: a
/// hint with no effect on results.
#[inline(always)]
fn prefetch<T>(at: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and never changes memory, whatever
    // the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// [`prefetch`]es all of `x`: a line at its start and at every 64 bytes
/// after (exactly its lines when it is aligned to them, as [`OpRec`] is).
#[inline(always)]
fn prefetch_all<T>(x: &T) {
    let at: *const u8 = (x as *const T).cast();
    for offset in (0..std::mem::size_of::<T>()).step_by(64) {
        prefetch(at.wrapping_add(offset));
    }
}

impl PeState {
    pub fn new(
        ctx: crate::exec::ScalarCtx,
        programs: Programs,
        slots: &super::slots::EnvSlots,
        n_cones: usize,
        t0: u64,
        args: Vec<RtValue>,
    ) -> PeState {
        PeState {
            args,
            programs,
            ctx,
            program: 0,
            frames: Vec::new(),
            env: vec![Val::Unset; slots.count],
            slot_of: slots.slot_of.clone(),
            issue_ps: t0,
            stall: Stall::None,
            issue_scheduled: false,
            engines: Default::default(),
            waiting_on_pe: 0,
            inflight: Vec::new(),
            free_slots: Vec::new(),
            inflight_count: 0,
            mem_ops: VecDeque::new(),
            next_mem_id: 0,
            busy_ps: [0; Engine::COUNT + 1],
            last_done_ps: t0,
            end_ps: t0,
            barrier_round: 0,
            signal_wait: None,
            wait_for: None,
            cone_memo: vec![ConeMemo::default(); n_cones],
            dir_queues: [[u32::MAX; Direction::COUNT]; 2],
            dma_routes: [None, None],
            last_extent: Cell::new(None),
            issue_spans: None,
            issue_stalls: None,
            wait_inst: None,
        }
    }

    /// Prefetches the fields an event of `kind` reads first (see
    /// `Sim::run_lp`).
    #[inline(always)]
    pub fn prefetch_state(&self, kind: EventKind) {
        match kind {
            EventKind::Issue => {
                prefetch(&self.stall);
                prefetch(&self.frames);
                prefetch(&self.env);
            }
            EventKind::Kick(e) => prefetch_all(&self.engines[e]),
            EventKind::Finish(_) => prefetch(&self.inflight),
        }
    }

    /// Prefetches what the fields [`Self::prefetch_state`] fetched point
    /// to: the current frame and the values, an engine queue's head, an
    /// operation in flight.
    #[inline(always)]
    pub fn prefetch_targets(&self, kind: EventKind) {
        match kind {
            EventKind::Issue => {
                if let Some(f) = self.frames.last() {
                    prefetch(f);
                }
                prefetch(self.env.as_ptr());
            }
            EventKind::Kick(e) => {
                if let Some(op) = self.engines[e].queue.front() {
                    prefetch_all::<OpRec>(op);
                }
            }
            EventKind::Finish(slot) => {
                if let Some(Some(op)) = self.inflight.get(slot as usize) {
                    prefetch_all::<OpRec>(op);
                }
            }
        }
    }

    /// Every queue empty and nothing in flight.
    pub fn drained(&self) -> bool {
        self.inflight_count == 0 && self.engines.iter().all(|e| e.queue.is_empty())
    }

    /// Drained but for receives that have not started (a barrier waits for
    /// the PE's own work, not for messages from others).
    pub fn drained_but_receives(&self) -> bool {
        self.inflight_count == 0
            && self
                .engines
                .iter()
                .enumerate()
                .all(|(k, e)| e.queue.is_empty() || k == super::Engine::Recv.index())
    }

    /// Marks engine `e`'s head as waiting for something of this PE.
    #[inline]
    pub fn wait_on_pe(&mut self, e: Engine) {
        self.waiting_on_pe |= 1 << e.index();
    }

    /// Whether engine `e`'s head waited for something of this PE; clears
    /// the mark.
    #[inline]
    pub fn take_waiting(&mut self, e: Engine) -> bool {
        let bit = 1 << e.index();
        let was = self.waiting_on_pe & bit != 0;
        self.waiting_on_pe &= !bit;
        was
    }

    /// Whether any engine's head waits for something of this PE.
    #[inline]
    pub fn any_waits_on_pe(&self) -> bool {
        self.waiting_on_pe != 0
    }

    /// Whether engine `e`'s head waits for something of this PE.
    #[inline]
    pub fn waits_on_pe(&self, e: Engine) -> bool {
        self.waiting_on_pe >> e.index() & 1 != 0
    }

    #[inline]
    fn entry(&self, v: Value) -> usize {
        self.slot_of[v.as_u32() as usize] as usize
    }

    #[inline]
    pub fn get(&self, v: Value) -> &Val {
        &self.env[self.entry(v)]
    }

    /// Takes value `v` out of the environment (leaving it unset): for its
    /// last reader (see `slots::EnvSlots::group_moves`).
    #[inline]
    pub fn take_value(&mut self, v: Value) -> Val {
        let e = self.entry(v);
        std::mem::take(&mut self.env[e])
    }

    /// The value in environment entry `e` (`env`'s index: `slot_of[v]` for
    /// value `v`).
    #[inline]
    pub fn at(&self, e: u32) -> &Val {
        &self.env[e as usize]
    }

    #[inline(always)]
    pub fn set(&mut self, v: Value, x: Val) {
        let e = self.entry(v);
        self.set_at(e as u32, x);
    }

    /// Sets environment entry `e` (as [`Self::at`]).
    #[inline(always)]
    pub fn set_at(&mut self, e: u32, x: Val) {
        let slot = &mut self.env[e as usize];
        // Most values the issue unit replaces are scalars, which own
        // nothing: no need to call the drop of a `Val` for them.
        if matches!(
            slot,
            Val::Unset
                | Val::Ready {
                    v: RtValue::Scalar(_),
                    ..
                }
        ) {
            std::mem::forget(std::mem::replace(slot, x));
        } else {
            *slot = x;
        }
    }

    /// Pays `cost_ps` of dispatch at the issue unit's clock, or at `t` if
    /// later; returns the new clock.
    #[inline]
    pub fn dispatch(&mut self, t: u64, cost_ps: u64) -> u64 {
        let start = self.issue_ps.max(t);
        self.issue_ps = start + cost_ps;
        self.busy_ps[Engine::COUNT] += cost_ps;
        if let Some(spans) = &mut self.issue_spans {
            match spans.last_mut() {
                Some(last) if last.1 == start => last.1 = self.issue_ps,
                _ if cost_ps > 0 => spans.push((start, self.issue_ps)),
                _ => {}
            }
        }
        self.issue_ps
    }

    /// Sets `to[k]` to the value of `from[k]`, one after the other (the
    /// caller makes sure no `from` is overwritten before it is read); the
    /// `from[k]` with bit `k` of `moves` set are moved out, left unset.
    pub fn copy_in_order(&mut self, from: &[Value], to: &[Value], moves: u64) {
        for (k, (a, b)) in from.iter().zip(to).enumerate() {
            let v = if k < 64 && moves >> k & 1 != 0 {
                let e = self.entry(*a);
                std::mem::take(&mut self.env[e])
            } else {
                self.get(*a).clone()
            };
            self.set(*b, v);
        }
    }

    /// Parks a started operation until it finishes; returns its slab index.
    pub fn park(&mut self, op: OpBox) -> u32 {
        self.inflight_count += 1;
        match self.free_slots.pop() {
            Some(i) => {
                self.inflight[i as usize] = Some(op);
                i
            }
            None => {
                self.inflight.push(Some(op));
                (self.inflight.len() - 1) as u32
            }
        }
    }

    pub fn unpark(&mut self, i: u32) -> Option<OpBox> {
        let op = self.inflight.get_mut(i as usize)?.take()?;
        self.free_slots.push(i);
        self.inflight_count -= 1;
        Some(op)
    }

    /// Registers a memory operation in program order.
    pub fn new_mem_op(&mut self) -> u64 {
        let id = self.next_mem_id;
        self.next_mem_id += 1;
        self.mem_ops.push_back(MemOp {
            ranges: Ranges::new(),
            started: false,
            done: false,
            done_at_ps: UNKNOWN,
            reads_at_end: false,
        });
        id
    }

    /// The number of the first memory operation in the list (the next one
    /// to be added when it is empty).
    #[inline]
    pub fn first_mem_id(&self) -> u64 {
        self.next_mem_id - self.mem_ops.len() as u64
    }

    /// Memory operation `id`, unless retired.
    #[inline]
    fn mem_op(&mut self, id: u64) -> Option<&mut MemOp> {
        let k = id.checked_sub(self.first_mem_id())?;
        self.mem_ops.get_mut(usize::try_from(k).ok()?)
    }

    /// Whether memory operation `id` (with `ranges`) may start: every
    /// earlier memory operation has started (a load: has sampled memory),
    /// and none that overlaps and writes is still in flight, nor one that
    /// overlaps, reads at its end and would see this one's write. (An
    /// earlier load has read its bytes when it sampled, so a later write to
    /// them may go ahead.)
    pub fn mem_may_start(&self, id: u64, ranges: &[Footprint]) -> bool {
        let earlier = id.saturating_sub(self.first_mem_id()) as usize;
        for m in self.mem_ops.iter().take(earlier) {
            if !m.started {
                return false;
            }
            if m.done {
                continue;
            }
            for before in &m.ranges {
                for mine in ranges {
                    if (before.write || (mine.write && m.reads_at_end)) && before.overlaps(mine) {
                        return false;
                    }
                }
            }
        }
        true
    }

    /// Records memory operation `id`'s footprint once it has started (a
    /// load: sampled memory).
    pub fn mem_started(&mut self, id: u64, ranges: Ranges, reads_at_end: bool) {
        if let Some(m) = self.mem_op(id) {
            m.ranges = ranges;
            m.started = true;
            m.reads_at_end = reads_at_end;
        }
    }

    /// Records load `id`'s footprint when it starts. Until it samples
    /// memory ([`Self::mem_sampled`]) it orders nothing: it is not started.
    /// (Kept here, not in the operation, so that an operation stays three
    /// cache lines.)
    pub fn mem_footprint(&mut self, id: u64, ranges: Ranges) {
        if let Some(m) = self.mem_op(id) {
            m.ranges = ranges;
        }
    }

    /// Load `id`, its footprint recorded, samples memory: from now on it
    /// orders later writes to its footprint.
    pub fn mem_sampled(&mut self, id: u64) {
        if let Some(m) = self.mem_op(id) {
            m.started = true;
            m.reads_at_end = false;
        }
    }

    pub fn mem_done(&mut self, id: u64, now_ps: u64) {
        if let Some(m) = self.mem_op(id) {
            m.done = true;
        }
        self.mem_retire(now_ps);
    }

    /// Memory operation `id` finishes at `at_ps` (a load that has sampled
    /// memory: nothing about it changes until then).
    pub fn mem_done_at(&mut self, id: u64, at_ps: u64, now_ps: u64) {
        if let Some(m) = self.mem_op(id) {
            m.done_at_ps = at_ps;
        }
        self.mem_retire(now_ps);
    }

    /// Drops the finished memory operations at the front of the list (by
    /// time `now_ps`).
    pub fn mem_retire(&mut self, now_ps: u64) {
        while self.mem_ops.front().is_some_and(|m| m.done || m.done_at_ps <= now_ps) {
            self.mem_ops.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernbench_compiler::ir::Inst;

    /// The bytes a footprint names, listed.
    fn bytes_of(f: &Footprint) -> Vec<u64> {
        (f.lo..f.hi)
            .filter(|b| f.period == 0 || (b + f.period - f.phase) % f.period < f.run)
            .collect()
    }

    /// Two footprints that share a byte always overlap (never a missed
    /// hazard), and two of one period whose runs never meet do not:
    /// checked against the bytes themselves over small windows, periods,
    /// phases and runs.
    #[test]
    fn footprints_overlap_when_they_share_a_byte() {
        let mut cases = Vec::new();
        for period in [0u64, 4, 8, 12] {
            for phase in 0..period.max(1) {
                for run in [1u64, 2, 4, 6] {
                    if period != 0 && run >= period {
                        continue;
                    }
                    for (lo, hi) in [(0u64, 24u64), (3, 17), (8, 40), (20, 28)] {
                        let f = Footprint {
                            lo,
                            hi,
                            period,
                            phase,
                            run,
                            write: true,
                        };
                        cases.push(f);
                    }
                }
            }
        }
        for a in &cases {
            let mine = bytes_of(a);
            for b in &cases {
                let shared = bytes_of(b).iter().any(|x| mine.contains(x));
                if shared {
                    assert!(a.overlaps(b), "{a:?} and {b:?} share a byte");
                }
                if a.period != 0 && a.period == b.period && a.lo == b.lo && a.hi == b.hi && a.hi - a.lo >= 2 * a.period
                {
                    assert_eq!(a.overlaps(b), shared, "{a:?} {b:?}");
                }
            }
        }
        // Even and odd i32 elements; rows 0..16 and 16..32 of a 64-byte pitch.
        let even = Footprint {
            lo: 0,
            hi: 4092,
            period: 8,
            phase: 0,
            run: 4,
            write: true,
        };
        let odd = Footprint {
            lo: 4,
            hi: 4096,
            period: 8,
            phase: 4,
            run: 4,
            write: false,
        };
        assert!(!even.overlaps(&odd) && !odd.overlaps(&even));
        let left = Footprint {
            lo: 0,
            hi: 1024,
            period: 64,
            phase: 0,
            run: 16,
            write: true,
        };
        let right = Footprint {
            lo: 16,
            hi: 1040,
            period: 64,
            phase: 16,
            run: 16,
            write: false,
        };
        assert!(!left.overlaps(&right));
        // A plain span is taken to meet a strided footprint it crosses,
        // even in a gap (conservative).
        assert!(left.overlaps(&Footprint::span(40, 41, false)));
    }

    /// The linked queue against a `VecDeque` under a pseudo-random mix of
    /// pushes and pops: the same operations in the same order, the same
    /// length; and dropping it with operations inside releases them (their
    /// result slots are let go).
    #[test]
    fn op_fifo_is_a_fifo_and_drops_what_it_holds() {
        let mut pool = OpPool::default();
        let mut fifo = OpFifo::default();
        let mut reference = std::collections::VecDeque::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for n in 0..2_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x % 3 != 0 {
                fifo.push_back(pool.take(Inst::from_u32(n), OpKind::Group(n as usize), None));
                reference.push_back(n);
            } else {
                let got = fifo.pop_front().map(|op| {
                    let n = op.inst.as_u32();
                    pool.give(op);
                    n
                });
                assert_eq!(got, reference.pop_front());
            }
            assert_eq!(fifo.len(), reference.len());
            assert_eq!(fifo.is_empty(), reference.is_empty());
            assert_eq!(fifo.front().map(|op| op.inst.as_u32()), reference.front().copied());
        }
        let slot = Slot::new();
        let mut op = pool.take(Inst::from_u32(0), OpKind::Group(0), None);
        op.results.push(slot.clone());
        fifo.push_back(op);
        assert_eq!(Rc::strong_count(&slot), 2);
        drop(fifo);
        assert_eq!(Rc::strong_count(&slot), 1, "dropping the queue frees its operations");
    }
}
