//! The engines: when the head of a queue may start, what it costs, and
//! what happens to data when it starts and when it ends.
//!
//! - MATH and GEMM (`dot`) compute when they start and are busy for their
//!   cost; the results are ready when they end.
//! - DMA: a load samples memory when its transfer starts (after the
//!   operation's `setup_cycles`, and once the first link of its path
//!   takes it), a store or atomic writes when it ends. The engine is
//!   busy for the setup and until the transfer's tail has left the first
//!   link of its path; the rest of the path overlaps with the next. The memory touched is the
//!   one holding the first active lane's address; masked-off lanes move
//!   no bytes.
//! - `tl.gemm` streams through its four-stage pipeline on the GEMM engine;
//!   it reads A and B when the first of their transfers starts and
//!   writes `out` when it ends.
//! - IPCQ send: needs the message's slots as credits, captures its data
//!   when it starts, and the message is in the receiver's slots when its
//!   last packet arrives. IPCQ receive: starts once its message has
//!   arrived, copies it out of the slots, and the credits travel back to
//!   the sender when the copy is done.

use super::events::{Arrival, Cross, Ev, Handed, Sim, Then};
use super::fabric::{Booked, Endpoint, Route};
use super::ipcq::Half;
use super::memory::HeldWrites;
use super::pe::{Footprint, OpBox, OpKind, OpRec, Ranges, Stall, Val};
use super::{cost, Engine, Placement, SimError};
use crate::topology::{Backpressure, Topology};
use kernbench_compiler::datapath::{
    affine::Affine, elem_size, first_off_lane, ExecErrorKind, MemFault, Outputs, RtValue, Tensor,
};
use kernbench_compiler::ir::{Op, Type};
use kernbench_compiler::sema::types::{DType, Elem};
use smallvec::{smallvec, SmallVec};
use std::borrow::Cow;
use std::rc::Rc;

/// The engines `tl.gemm`'s pipeline holds besides its own (GEMM): DMA for
/// DMA_IN and DMA_WB, MATH for the epilogue.
const PIPELINE_ENGINES: [Engine; 2] = [Engine::Dma, Engine::Math];

/// What a memory operation touches.
struct Access {
    /// One entry per memory touched: where, bytes, bytes per HBM
    /// pseudo-channel (empty unless HBM), and whether it is written.
    parts: SmallVec<[(Placement, u64, Channels, bool); 1]>,
    /// Byte ranges for ordering inside the PE.
    ranges: Ranges,
}

/// A memory operation's lanes: its pointers, its mask, the bytes of an
/// element, and whether it writes.
#[derive(Clone, Copy)]
struct Lanes<'v> {
    ptr: &'v RtValue,
    mask: Option<&'v RtValue>,
    size: u64,
    write: bool,
}

/// Bytes per HBM pseudo-channel.
pub(super) type Channels = SmallVec<[u64; 8]>;

/// Zero bytes on each of `n` pseudo-channels (inline up to eight, as
/// every access to HBM makes one).
#[inline]
fn zero_channels(n: u32) -> Channels {
    match usize::try_from(n) {
        Ok(n) if n <= 8 => Channels::from_buf_and_len([0; 8], n),
        _ => smallvec::smallvec![0; n as usize],
    }
}

fn pointee(ty: &Type) -> DType {
    match ty.elem() {
        Elem::Ptr(d) | Elem::Num(d) => d,
    }
}

/// The same elements under the IR type's shape (a reshape's consumers);
/// borrowed when the value has that shape already (nearly always: a short
/// test, with the conversions kept apart in `refit`).
#[inline(always)]
pub(super) fn fit<'v>(ty: &Type, v: &'v RtValue) -> Cow<'v, RtValue> {
    match (ty, v) {
        (Type::Scalar(_), _) => Cow::Borrowed(v),
        (Type::Block(_, s), RtValue::Block(t))
            if t.shape.len() == s.len() && t.shape.iter().zip(s).all(|(&d, &e)| d as u64 == e) =>
        {
            Cow::Borrowed(v)
        }
        (Type::Block(_, s), RtValue::Affine(_) | RtValue::Mask(_))
            if v.formula_shape().is_some_and(|f| same_axes(f, s)) =>
        {
            Cow::Borrowed(v)
        }
        _ => refit(ty, v),
    }
}

/// `f` on values fitted to their types ([`fit`]): on the values themselves
/// when each has its type's shape already (nearly always), with no list
/// of converted copies; on such a list otherwise.
#[inline]
pub(super) fn with_fitted<'v, R>(
    typed: impl Iterator<Item = (&'v Type, &'v RtValue)> + Clone,
    f: impl FnOnce(&[&RtValue]) -> R,
) -> R {
    let mut refs: SmallVec<[&RtValue; 4]> = SmallVec::new();
    for (ty, v) in typed.clone() {
        match fit(ty, v) {
            Cow::Borrowed(x) => refs.push(x),
            Cow::Owned(_) => {
                let fitted: SmallVec<[Cow<RtValue>; 4]> = typed.map(|(ty, v)| fit(ty, v)).collect();
                let refs: SmallVec<[&RtValue; 4]> = fitted.iter().map(|x| &**x).collect();
                return f(&refs);
            }
        }
    }
    f(&refs)
}

/// Group `g` of operation `op` on its captured operands (fitted to their
/// types) against `mem`: the memory itself, or a view that holds writes.
#[inline]
fn run_captured(
    dp: &mut dyn kernbench_compiler::datapath::DataPath,
    func: &kernbench_compiler::ir::Function,
    plan: &kernbench_compiler::datapath::Plan,
    op: &OpRec,
    g: usize,
    mem: &mut dyn kernbench_compiler::datapath::Memory,
) -> Result<Outputs, kernbench_compiler::datapath::ExecError> {
    const UNSET: RtValue = RtValue::Scalar(0);
    with_fitted(
        op.args.iter().map(|(v, x)| (func.ty(*v), x.data().unwrap_or(&UNSET))),
        |refs| dp.run(func, plan, g, refs, mem),
    )
}

/// Whether two shapes are equal, compared inline: the slices' `==` calls
/// `memcmp`, costly for the one or two axes of a block.
#[inline]
fn same_axes(a: &[u64], b: &[u64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// [`fit`] for a value not of the type's shape already.
#[inline(never)]
fn refit<'v>(ty: &Type, v: &'v RtValue) -> Cow<'v, RtValue> {
    Cow::Owned(match (ty, v) {
        (Type::Block(e, s), RtValue::Block(t)) if t.shape.iter().map(|&d| d as u64).ne(s.iter().copied()) => {
            let shape: Vec<usize> = s.iter().map(|&d| d as usize).collect();
            let t = Tensor::from_bytes(*e, &shape, t.bytes()).unwrap_or_else(|| Tensor::zeros(*e, &shape));
            RtValue::Block(Rc::new(t))
        }
        (Type::Block(_, s), RtValue::Affine(_) | RtValue::Mask(_)) if v.formula_shape() != Some(s.as_slice()) => v
            .reshaped_formula(s)
            .unwrap_or_else(|| fit(ty, &v.stored()).into_owned()),
        (Type::Block(e, s), RtValue::Scalar(b)) => {
            let shape: Vec<usize> = s.iter().map(|&d| d as usize).collect();
            let mut t = Tensor::zeros(*e, &shape);
            for k in 0..t.numel() {
                t.set_bits(k, *b);
            }
            RtValue::Block(Rc::new(t))
        }
        _ => return Cow::Borrowed(v),
    })
}

/// A received message's bytes as a value of the receiver's type.
fn reinterpret(ty: &Type, v: &RtValue) -> RtValue {
    if let (Type::Block(e, s), RtValue::Block(t)) = (ty, v) {
        if t.elem == *e && t.shape.iter().map(|&d| d as u64).eq(s.iter().copied()) {
            return v.clone();
        }
    }
    let bytes: Vec<u8> = match v {
        RtValue::Scalar(b) => b.to_le_bytes().to_vec(),
        v => v.tensor().map(|t| t.bytes().to_vec()).unwrap_or_default(),
    };
    match ty {
        Type::Scalar(e) => {
            let n = elem_size(*e);
            let mut w = [0u8; 8];
            w[..n.min(bytes.len())].copy_from_slice(&bytes[..n.min(bytes.len())]);
            RtValue::Scalar(u64::from_le_bytes(w))
        }
        _ => {
            let shape: Vec<usize> = ty.shape().iter().map(|&d| d as usize).collect();
            let e = Elem::Num(pointee(ty));
            let t = Tensor::from_bytes(e, &shape, &bytes).unwrap_or_else(|| Tensor::zeros(e, &shape));
            RtValue::Block(Rc::new(t))
        }
    }
}

/// Whether lane `k` of a mask is on (no mask: every lane).
fn lane_on(mask: Option<&RtValue>, k: usize) -> bool {
    match mask {
        None => true,
        Some(RtValue::Scalar(m)) => m & 1 != 0,
        Some(RtValue::Block(t)) => t.bytes().get(k).is_some_and(|b| b & 1 != 0),
        Some(RtValue::Affine(a)) => k < a.numel() && a.get_bits(k) & 1 != 0,
        Some(RtValue::Mask(m)) => k < m.numel() && m.get_bits(k) & 1 != 0,
    }
}

/// Calls `f` with every active lane's address.
fn for_each_active(ptr: &RtValue, mask: Option<&RtValue>, mut f: impl FnMut(u64)) {
    match ptr {
        RtValue::Scalar(a) => {
            if lane_on(mask, 0) {
                f(*a)
            }
        }
        RtValue::Block(t) => match t.words() {
            Some(words) => {
                for (k, a) in words.iter().enumerate() {
                    if lane_on(mask, k) {
                        f(*a)
                    }
                }
            }
            None => {
                for k in 0..t.numel() {
                    if lane_on(mask, k) {
                        f(t.get_bits(k))
                    }
                }
            }
        },
        RtValue::Affine(a) => {
            let mut k = 0;
            a.for_each(|addr| {
                if lane_on(mask, k) {
                    f(addr)
                }
                k += 1;
            });
        }
        // Not a pointer type; total for completeness.
        RtValue::Mask(m) => {
            for k in 0..m.numel() {
                if lane_on(mask, k) {
                    f(m.get_bits(k))
                }
            }
        }
    }
}

/// The active lanes of an access: how many, the first, the byte range
/// they span, and whether they are consecutive elements in order.
struct LaneScan {
    count: u64,
    first: Option<u64>,
    lo: u64,
    hi: u64,
    contiguous: bool,
}

impl LaneScan {
    fn of(ptr: &RtValue, mask: Option<&RtValue>, size: u64) -> LaneScan {
        let mut s = LaneScan {
            count: 0,
            first: None,
            lo: u64::MAX,
            hi: 0,
            contiguous: true,
        };
        // Which lanes are on: all, none, or as the mask block says (a mask
        // formula: read off its box against a pointer formula, else
        // stored).
        let stored;
        let mut mask = mask;
        let lanes: Option<&[u8]> = match mask {
            Some(RtValue::Scalar(m)) if m & 1 == 0 => return s,
            Some(RtValue::Block(m)) if !all_on(m.bytes()) => Some(m.bytes()),
            Some(RtValue::Mask(m)) => {
                if let (Some(a), Some(on)) = (ptr_formula(ptr), m.lanes_on()) {
                    if on.count == 0 {
                        return s;
                    }
                    if let Some(scan) = LaneScan::of_formula_span(a, on.count, on.first, on.last, size) {
                        return scan;
                    }
                }
                stored = RtValue::Block(Rc::new(m.materialize()));
                mask = Some(&stored);
                match &stored {
                    RtValue::Block(t) if !all_on(t.bytes()) => Some(t.bytes()),
                    _ => None,
                }
            }
            _ => None,
        };
        if let Some(scan) = ptr_formula(ptr).and_then(|a| LaneScan::of_formula(a, lanes, size)) {
            return scan;
        }
        match (ptr_words(ptr), lanes) {
            // Every lane on (the common case): consecutive addresses span
            // first..last; a vectorizable check, no per-lane branches.
            (Some(words), None) if !words.is_empty() => {
                let first = words[0];
                s.first = Some(first);
                s.count = words.len() as u64;
                let mut expect = first;
                let mut same = true;
                for a in words {
                    same &= *a == expect;
                    expect = expect.wrapping_add(size);
                }
                s.contiguous = same;
                if s.contiguous {
                    s.lo = first;
                    s.hi = first.saturating_add(s.count * size);
                } else {
                    s.lo = words.iter().copied().min().unwrap_or(first);
                    s.hi = words.iter().copied().max().unwrap_or(first).saturating_add(size);
                }
            }
            _ => {
                let mut next = 0u64;
                for_each_active(ptr, mask, |a| {
                    if s.first.is_none() {
                        s.first = Some(a);
                    } else if a != next {
                        s.contiguous = false;
                    }
                    next = a.wrapping_add(size);
                    s.lo = s.lo.min(a);
                    s.hi = s.hi.max(a.saturating_add(size));
                    s.count += 1;
                });
            }
        }
        s
    }

    /// The scan of a pointer formula read off its corners and strides, no
    /// lane visited; under a mask (`on`), consecutive pointers only, the
    /// active lanes' span and count from the mask bytes. `None` when the
    /// addresses would wrap, or nothing is on (the lane walk decides).
    fn of_formula(a: &Affine, on: Option<&[u8]>, size: u64) -> Option<LaneScan> {
        let (lo, hi) = a.range();
        let hi = hi + size as i128;
        if a.numel() == 0 || lo < 0 || hi > u64::MAX as i128 {
            return None;
        }
        let Some(on) = on else {
            return Some(LaneScan {
                count: a.numel() as u64,
                first: Some(a.base() as u64),
                lo: lo as u64,
                hi: hi as u64,
                contiguous: a.is_consecutive(size as i64),
            });
        };
        if on.len() != a.numel() {
            return None;
        }
        let first_k = on.iter().position(|b| b & 1 != 0)? as u64;
        let last_k = on.iter().rposition(|b| b & 1 != 0)? as u64;
        let count = on.iter().filter(|b| *b & 1 != 0).count() as u64;
        LaneScan::of_formula_span(a, count, first_k, last_k, size)
    }

    /// The scan of consecutive pointers (a formula) of which `count` lanes
    /// are on, the first at position `first_k` and the last at `last_k`
    /// (`count >= 1`); `None` when the pointers are not consecutive or
    /// would wrap.
    fn of_formula_span(a: &Affine, count: u64, first_k: u64, last_k: u64, size: u64) -> Option<LaneScan> {
        let (lo, hi) = a.range();
        if a.numel() == 0 || lo < 0 || hi + size as i128 > u64::MAX as i128 || !a.is_consecutive(size as i64) {
            return None;
        }
        let first = (a.base() as u64).wrapping_add(first_k * size);
        Some(LaneScan {
            count,
            first: Some(first),
            lo: first,
            hi: (a.base() as u64).wrapping_add((last_k + 1) * size),
            contiguous: last_k - first_k + 1 == count,
        })
    }
}

/// The footprint of an access whose active lanes `scan` found: their
/// span, and, when the pointers are a formula of one strided axis (one
/// element in every few) or of consecutive rows at a larger pitch (a
/// tile of a wider matrix), the period they repeat with. Every lane of
/// the formula, on or off, lies on that pattern, so it covers the active
/// ones.
fn footprint(ptr: &RtValue, scan: &LaneScan, size: u64, write: bool) -> Footprint {
    let mut f = Footprint::span(scan.lo, scan.hi, write);
    if scan.contiguous {
        return f;
    }
    // Only addresses that do not wrap lie on the pattern from the base
    // (the same test as `LaneScan::of_formula`'s).
    let fits = |a: &&Affine| {
        let (lo, hi) = a.range();
        lo >= 0 && hi + size as i128 <= u64::MAX as i128
    };
    let Some(a) = ptr_formula(ptr).filter(fits) else {
        return f;
    };
    // Axes that move the address, innermost (smallest stride) first.
    let mut axes: SmallVec<[(u64, i64); 4]> = (a.shape.iter().zip(a.strides()))
        .filter(|&(&n, &s)| n > 1 && s != 0)
        .map(|(&n, &s)| (n, s))
        .collect();
    axes.sort_by_key(|&(_, s)| s.unsigned_abs());
    let (run, period) = match *axes.as_slice() {
        // One element in every `s` bytes.
        [(_, s)] if s > 0 => (size, s as u64),
        // Rows of `n` consecutive elements, `s` bytes apart.
        [(n, inner), (_, s)] if inner > 0 && inner as u64 == size && s > 0 => (n * size, s as u64),
        _ => return f,
    };
    if run < period {
        f.period = period;
        f.run = run;
        f.phase = (a.base() as u64) % period;
    }
    f
}

/// Whether every bool of a mask block is on.
fn all_on(bytes: &[u8]) -> bool {
    first_off_lane(bytes) == bytes.len()
}

fn ptr_formula(ptr: &RtValue) -> Option<&Affine> {
    match ptr {
        RtValue::Affine(a) => Some(a),
        _ => None,
    }
}

fn ptr_words(ptr: &RtValue) -> Option<&[u64]> {
    match ptr {
        RtValue::Block(t) => t.words(),
        RtValue::Scalar(_) | RtValue::Affine(_) | RtValue::Mask(_) => None,
    }
}

/// Bytes of a value of type `ty`.
fn value_bytes(ty: &Type) -> u64 {
    ty.numel().max(1) * elem_size(ty.elem()) as u64
}

impl Sim<'_> {
    /// Starts as many operations from the head of engine `e`'s queue as
    /// may start now.
    pub(super) fn kick(&mut self, p: usize, e: Engine) -> Result<(), SimError> {
        loop {
            let now = self.now;
            let eq = &self.pes[p].engines[e.index()];
            let Some(head) = eq.queue.front() else { return Ok(()) };
            // Not before the engine is free, nor before the operation was
            // issued (the issue unit runs ahead of the global clock), nor,
            // for a receive, before its message has arrived; a message
            // not sent yet kicks the engine when its send starts.
            let mut not_before = eq.free_at_ps.max(head.issued_ps);
            if let OpKind::Group(g) = head.kind {
                if self.groups[g].pipeline {
                    let engines = &self.pes[p].engines;
                    for held in PIPELINE_ENGINES {
                        not_before = not_before.max(engines[held.index()].free_at_ps);
                    }
                }
            }
            if let OpKind::Recv { queue, msg } = head.kind {
                let q = &mut self.queues.queues[queue as usize];
                match q.arrival_ps(msg) {
                    Some(a) => not_before = not_before.max(a),
                    None => {
                        q.waiting_recv = Some((msg, not_before));
                        return Ok(());
                    }
                }
            }
            if not_before > now {
                self.request_kick(p, e, not_before);
                return Ok(());
            }
            let mut ready = 0;
            for (_, v) in &head.args {
                match v.ready_ps() {
                    Some(r) => ready = ready.max(r),
                    None => {
                        self.pes[p].wait_on_pe(e);
                        return Ok(());
                    }
                }
            }
            if ready > now {
                self.request_kick(p, e, ready);
                return Ok(());
            }
            let mut access = None;
            match head.kind {
                // Its message has arrived (checked above).
                OpKind::Recv { .. } | OpKind::Remote => {}
                OpKind::Notify { .. } => {
                    // Every earlier memory operation has finished.
                    let mine = head.mem_id();
                    let pe = &mut self.pes[p];
                    pe.mem_retire(now);
                    let first = pe.first_mem_id();
                    let front = pe.mem_ops.front().map(|m| (first, m.done_at_ps));
                    if front.map(|(id, _)| id) != mine {
                        match front {
                            // A load that has sampled: it finishes then.
                            Some((_, t)) if t != super::pe::UNKNOWN => self.request_kick(p, e, t),
                            _ => pe.wait_on_pe(e),
                        }
                        return Ok(());
                    }
                }
                OpKind::Send { queue, slots } => {
                    let q = &mut self.queues.queues[queue as usize];
                    if q.credits_at(now) < slots {
                        let back = q.credits_back_by(slots);
                        // Otherwise a consumed message's return kicks it.
                        q.sender_waiting = back.is_none();
                        let since = *self.pes[p].engines[e.index()].blocked_since.get_or_insert(now);
                        if let Some(c) = back {
                            let t = self.credits_noticed_at(since, c);
                            self.request_kick(p, e, t);
                        }
                        return Ok(());
                    }
                }
                OpKind::Group(g) => {
                    if self.groups[g].memory {
                        let a = self.access(p, head)?;
                        let id = head.mem_id().unwrap_or(0);
                        if !self.pes[p].mem_may_start(id, &a.ranges) {
                            self.pes[p].wait_on_pe(e);
                            return Ok(());
                        }
                        access = Some(a);
                    }
                }
            }
            let pe = &mut self.pes[p];
            pe.take_waiting(e);
            let eq = &mut pe.engines[e.index()];
            eq.blocked_since = None;
            let Some(op) = eq.queue.pop_front() else { return Ok(()) };
            // By reference: an `Access` is a few hundred bytes, and moving
            // it costs a copy on every start (which takes its byte ranges
            // out for the memory-order entry).
            self.start(p, e, op, access.as_mut())?;
            if self.pes[p].stall == Stall::QueueFull(e) {
                self.resume_issue(p)?;
            }
        }
    }

    /// Records an engine's busy interval `[start, busy_end)` (and, for the
    /// trace, the operation's end `done`).
    pub(super) fn occupy(
        &mut self,
        p: usize,
        e: Engine,
        (start, busy_end, done): (u64, u64, u64),
        inst: kernbench_compiler::ir::Inst,
    ) {
        let stop = self.stop_ps;
        let pe = &mut self.pes[p];
        let eq = &mut pe.engines[e.index()];
        eq.free_at_ps = busy_end;
        eq.last_started = Some((start, busy_end, inst));
        // A run stopped by its time limit counts only what was done by
        // then (`stop_ps` is `u64::MAX` without one).
        pe.busy_ps[e.index()] += busy_end.min(stop) - start.min(stop);
        self.trace_slice(p, e, (start, busy_end, done), inst);
    }

    /// Records a slice for the trace, when the launch keeps one.
    #[inline]
    fn trace_slice(
        &mut self,
        p: usize,
        engine: Engine,
        (start_ps, end_ps, done_ps): (u64, u64, u64),
        inst: kernbench_compiler::ir::Inst,
    ) {
        if self.trace && start_ps < self.stop_ps {
            // Up to the time limit, as the rest of the report.
            let stop = self.stop_ps;
            self.slices.push(super::report::Slice {
                rank: p as u32,
                engine,
                start_ps,
                end_ps: end_ps.min(stop),
                done_ps: done_ps.min(stop),
                inst,
            });
        }
    }

    /// Holds engine `e` over `[start, end)` for a pipeline that keeps it
    /// busy `busy_ps` of that time (its stages overlap with the other
    /// engines'); the trace shows the whole span.
    fn hold(
        &mut self,
        p: usize,
        e: Engine,
        (start, end): (u64, u64),
        busy_ps: u64,
        inst: kernbench_compiler::ir::Inst,
    ) {
        let pe = &mut self.pes[p];
        let eq = &mut pe.engines[e.index()];
        eq.free_at_ps = eq.free_at_ps.max(end);
        eq.last_started = Some((start, end, inst));
        // Its work spread over its span, up to a time limit.
        let (span, stop) = (end - start, self.stop_ps);
        let kept = end.min(stop) - start.min(stop);
        pe.busy_ps[e.index()] += (u128::from(busy_ps.min(span)) * u128::from(kept) / u128::from(span.max(1))) as u64;
        self.trace_slice(p, e, (start, end, end), inst);
    }

    /// Parks a started operation and schedules its end.
    #[inline]
    fn finish_at(&mut self, p: usize, op: OpBox, end: u64) {
        let slot = self.pes[p].park(op);
        self.schedule(end, Ev::Done(p as u32, slot));
    }

    /// Starts a `tl.notify`: one word written where `addr` is, once every
    /// earlier memory operation of the PE has finished (its kick waits
    /// for that). Out of line, as [`Self::start_gemm`] is.
    #[inline(never)]
    fn start_notify(
        &mut self,
        p: usize,
        e: Engine,
        op: OpBox,
        (addr, bits, size): (u64, u64, u8),
    ) -> Result<(), SimError> {
        let now = self.now;
        let bytes = u64::from(size);
        let place = self.mem.placement_of(addr).ok_or_else(|| {
            self.op_error(
                p,
                &op,
                ExecErrorKind::OutOfBounds(MemFault {
                    addr,
                    bytes,
                    write: true,
                }),
            )
        })?;
        if let Some(id) = op.mem_id() {
            self.pes[p].mem_started(id, smallvec![Footprint::span(addr, addr + bytes, true)], false);
            self.kick_waiting(p);
        }
        let mut hbm = Channels::new();
        if let Placement::Hbm(_) = place {
            hbm = zero_channels(self.fabric.channels());
            self.fabric.split_contiguous(addr, bytes, &mut hbm);
        }
        let t0 = now + self.dma_setup_ps;
        if self.elsewhere(place.sip()) {
            return self.remote_put(p, e, op, (place, bytes, hbm), t0, |_, pe, slot| Then::Notify {
                pe,
                slot,
                addr,
                bits,
                size,
            });
        }
        let route = self.fabric.core_route(self.coords[p], place.endpoint(), true);
        let tr = self.fabric.reserve(&route, bytes, &hbm, t0);
        self.occupy(p, e, (now, tr.injected_ps, tr.end_ps), op.inst);
        self.finish_at(p, op, tr.end_ps);
        Ok(())
    }

    /// Starts a `tl.gemm`: its pipeline holds each engine until it drains
    /// and keeps it busy for its stages' work. Out of line: its body is
    /// large and, on the paths of loads, stores and messages, never taken.
    #[inline(never)]
    fn start_gemm(&mut self, p: usize, mut op: OpBox, access: &mut Access) -> Result<(), SimError> {
        let now = self.now;
        let (end, pipe, sample_ps) = self.gemm_composite(p, &op, access)?;
        let work = [
            (Engine::Gemm, pipe.tiles * pipe.gemm_ps),
            (Engine::Dma, pipe.tiles * (pipe.dma_in_ps + pipe.dma_wb_ps)),
            (Engine::Math, pipe.tiles * pipe.math_ps),
        ];
        for (held, busy_ps) in work {
            self.hold(p, held, (now, end), busy_ps, op.inst);
        }
        // It reads A and B when their transfers start (see `sample`).
        op.end_ps = end;
        let slot = self.pes[p].park(op);
        self.schedule(sample_ps, Ev::Sample(p as u32, slot));
        Ok(())
    }

    fn start(&mut self, p: usize, e: Engine, mut op: OpBox, access: Option<&mut Access>) -> Result<(), SimError> {
        let now = self.now;
        match op.kind {
            OpKind::Group(g) => {
                let info = self.groups[g];
                if !info.memory {
                    let outs = self.run_group(p, &op, g)?;
                    let end = now + info.cost_ps;
                    for (s, v) in op.results.iter().zip(outs) {
                        let _ = s.data.set(v);
                        s.ready_ps.set(end);
                    }
                    self.occupy(p, e, (now, end, end), op.inst);
                    // Everything its end does is known now: it needs no
                    // event.
                    self.op_pool.give(op);
                    return self.op_settled(p, end, true);
                }
                let mut computed;
                let access = match access {
                    Some(a) => a,
                    None => {
                        computed = self.access(p, &op)?;
                        &mut computed
                    }
                };
                let is_gemm = info.pipeline;
                // A load records its footprint when it samples memory; the
                // others (writes, `tl.gemm`) when they start.
                if info.effect_at_end {
                    if let Some(id) = op.mem_id() {
                        self.pes[p].mem_started(id, std::mem::take(&mut access.ranges), is_gemm);
                        self.kick_waiting(p);
                    }
                }
                if is_gemm {
                    return self.start_gemm(p, op, access);
                }
                let (place, bytes, ref hbm, write) = access.parts[0];
                let me = self.coords[p];
                let t0 = now + self.dma_setup_ps;
                if info.effect_at_end && self.elsewhere(place.sip()) {
                    let hbm = hbm.clone();
                    let program = self.program_id(u64::from(op.program));
                    return self.remote_put(p, e, op, (place, bytes, hbm), t0, |op, pe, slot| Then::Put {
                        pe,
                        slot,
                        program,
                        g,
                        // Copies of their own: they go to another process.
                        inputs: op
                            .args
                            .iter()
                            .map(|(_, v)| v.data().map_or(RtValue::Scalar(0), RtValue::deep_clone))
                            .collect(),
                    });
                }
                // The engine is busy until the transfer's tail has left the
                // first stage; the rest of the path overlaps with the next.
                let (busy_end, end, transfer_start) = if bytes == 0 {
                    (t0, t0, t0)
                } else {
                    // The PE keeps its last route each way: a kernel's
                    // loads and stores mostly go to one memory.
                    let far = place.endpoint();
                    let route = match &self.pes[p].dma_routes[write as usize] {
                        Some((at, r)) if *at == far => r.clone(),
                        _ => {
                            let r = self.fabric.core_route(me, far, write);
                            self.pes[p].dma_routes[write as usize] = Some((far, r.clone()));
                            r
                        }
                    };
                    let tr = self.fabric.reserve(&route, bytes, hbm, t0);
                    (tr.injected_ps, tr.end_ps, tr.start_ps)
                };
                self.occupy(p, e, (now, busy_end, end), op.inst);
                if info.effect_at_end {
                    self.finish_at(p, op, end);
                } else {
                    // A load samples memory when its transfer starts, and
                    // that settles it (see `sample`).
                    for s in &op.results {
                        s.ready_ps.set(end);
                    }
                    op.end_ps = end;
                    if let Some(id) = op.mem_id() {
                        self.pes[p].mem_footprint(id, std::mem::take(&mut access.ranges));
                    }
                    let slot = self.pes[p].park(op);
                    self.schedule(transfer_start, Ev::Sample(p as u32, slot));
                }
            }
            OpKind::Notify { addr, bits, size } => return self.start_notify(p, e, op, (addr, bits, size)),
            OpKind::Send { queue, slots } => {
                let (bytes, data) = match op.args.first() {
                    Some((value, val)) => (
                        value_bytes(self.func.ty(*value)),
                        val.data().cloned().unwrap_or(RtValue::Scalar(0)),
                    ),
                    // A barrier token: one word, no data.
                    None => (super::issue::BARRIER_TOKEN_BYTES, RtValue::Scalar(0)),
                };
                let q = &mut self.queues.queues[queue as usize];
                q.credits -= slots;
                let msg = q.sent;
                q.sent += 1;
                let (src, dst, control, half) = (q.src, q.dst, q.control, q.half);
                let (route, hbm) = self.buffer_route(queue, msg, bytes, true);
                let inst = op.inst;
                // Only a queue between two SIPs has a sender's half; the
                // others' routes stay in one.
                let booked = if half != Half::Send {
                    Booked::Done(self.fabric.reserve(&route, bytes, &hbm, now))
                } else {
                    let ends = self.slot_ends(queue, true);
                    self.book(&route, ends, bytes, &hbm, now, || Then::Message {
                        src,
                        dst,
                        control,
                        msg,
                        bytes,
                        slots,
                        // A copy of its own: it goes to another process.
                        data: data.deep_clone(),
                        inst,
                    })
                };
                match booked {
                    Booked::Done(tr) => {
                        let end = tr.end_ps;
                        let q = &mut self.queues.queues[queue as usize];
                        q.msgs.push_back(super::ipcq::Msg {
                            data,
                            bytes,
                            slots,
                            sent_by: inst,
                            arrived_ps: end,
                        });
                        self.occupy(p, e, (now, tr.injected_ps, end), op.inst);
                        // Everything its end does is known now: it needs no
                        // event.
                        self.op_pool.give(op);
                        self.send_settled(p, queue, msg, end)?;
                    }
                    // Its receiver is on another SIP, whose process takes
                    // it over: for the sender it is done when its tail has
                    // left this SIP.
                    Booked::HandOff(tr, _) => {
                        self.occupy(p, e, (now, tr.injected_ps, tr.end_ps), op.inst);
                        self.op_pool.give(op);
                        self.op_settled(p, tr.end_ps, false)?;
                    }
                }
            }
            OpKind::Remote => {}
            OpKind::Recv { queue, msg } => {
                let func = self.func;
                let r = func.inst(op.inst).results[0];
                // A future receives the value `tl.wait` gives: a scalar for
                // shape `()` (a block of no axes would reach scalar
                // operands as a block), else the block.
                let ty = match func.ty(r) {
                    Type::Future(d, s) if s.is_empty() => Cow::Owned(Type::Scalar(Elem::Num(*d))),
                    Type::Future(d, s) => Cow::Owned(Type::Block(Elem::Num(*d), s.clone())),
                    t => Cow::Borrowed(t),
                };
                let q = &self.queues.queues[queue as usize];
                let src = q.src;
                let Some(m) = q.msg(msg) else { return Ok(()) };
                let (bytes, data) = (m.bytes, m.data.clone());
                let want = value_bytes(&ty);
                // A message keeps its element type: the same bytes as
                // another type are a bug, not a conversion (`.to(...,
                // bitcast=True)` says so on purpose). Its shape may change.
                let sent = func.inst(m.sent_by).args.last().map(|&v| func.ty(v));
                if sent.is_some_and(|s| s.elem() != ty.elem()) || want != bytes {
                    return Err(self.recv_mismatch(p, &op, (&ty, want), (sent, bytes), src));
                }
                let (route, hbm) = self.buffer_route(queue, msg, bytes, false);
                let tr = self.fabric.reserve(&route, bytes, &hbm, now);
                let end = tr.end_ps;
                if let Some(s) = op.results.first() {
                    let _ = s.data.set(reinterpret(&ty, &data));
                    s.ready_ps.set(end);
                }
                self.occupy(p, e, (now, tr.injected_ps, end), op.inst);
                // Everything its end does is known now: it needs no event.
                self.op_pool.give(op);
                self.recv_settled(p, queue, msg, end)?;
            }
        }
        Ok(())
    }

    /// The error of a receive `op` of type `ty` (`want` bytes) whose
    /// message from PE `src` does not fit it: another element type
    /// (`sent`, its operand's type), or `bytes` of another size. Out of
    /// line, as [`Self::check_lanes_elsewhere`] is.
    #[cold]
    #[inline(never)]
    fn recv_mismatch(
        &self,
        p: usize,
        op: &OpRec,
        (ty, want): (&Type, u64),
        (sent, bytes): (Option<&Type>, u64),
        src: u32,
    ) -> SimError {
        // Its rank from the launch's table: the sender may be another
        // shard's PE.
        let rank = self.ranks[src as usize];
        let what = match sent.filter(|s| s.elem() != ty.elem()) {
            Some(sent) => format!(
                "this receive expects {} elements ({ty}) but rank {rank} sent {} elements ({sent}); \
                 convert on either side with `.to(...)`",
                ty.elem(),
                sent.elem()
            ),
            None => format!("this receive expects {want} bytes ({ty}) but rank {rank} sent {bytes} bytes"),
        };
        self.op_error(p, op, ExecErrorKind::Unsupported(what))
    }

    /// Slots a message of `value` sent by `inst` on `queue` takes (an
    /// error when it can never fit).
    pub(super) fn message_slots(
        &self,
        p: usize,
        inst: kernbench_compiler::ir::Inst,
        value: kernbench_compiler::ir::Value,
        queue: u32,
    ) -> Result<u32, SimError> {
        let ipcq = &self.ipcq;
        let bytes = value_bytes(self.func.ty(value));
        let slots = self.ipcq_slot_bytes.div_ceil(bytes).max(1);
        let have = u64::from(self.queues.queues[queue as usize].n_slots);
        if slots > have {
            return Err(self.exec_error(
                p,
                inst,
                ExecErrorKind::Unsupported(format!(
                    "this message of {bytes} bytes needs {slots} slots, but a queue has {} slots of {} bytes \
                     (send smaller blocks, or raise the IPCQ's slots)",
                    have, ipcq.slot_size_bytes.0
                )),
            ));
        }
        Ok(slots as u32)
    }

    /// The route between the slots of queue `queue` (in its receiver's
    /// buffer space) and the sender's core (`to_slots`) or the receiver's,
    /// with the HBM pseudo-channel split of message `msg`'s slots.
    fn buffer_route(&mut self, queue: u32, msg: u64, bytes: u64, to_slots: bool) -> (Rc<Route>, Channels) {
        let q = &self.queues.queues[queue as usize];
        let owner_pe = self.coords[q.dst as usize];
        let ipcq = &self.ipcq;
        let place = Placement::near(ipcq.buffer_space, owner_pe);
        let slots = if u64::from(q.n_slots) == self.ipcq_slots.get() {
            self.ipcq_slots
        } else {
            self.ipcq_slots_across_sips
        };
        let offset = slots.rem(msg) * ipcq.slot_size_bytes.0;
        let route = match &q.routes[to_slots as usize] {
            Some(r) => r.clone(),
            None => {
                // The sender writes into the slots; the receiver reads them.
                let core = self.coords[if to_slots { q.src } else { q.dst } as usize];
                let r = self.fabric.core_route(core, place.endpoint(), to_slots);
                self.queues.queues[queue as usize].routes[to_slots as usize] = Some(r.clone());
                r
            }
        };
        let mut hbm = Channels::new();
        if matches!(place, Placement::Hbm(_)) {
            hbm = zero_channels(self.fabric.channels());
            self.fabric.split_contiguous(offset, bytes, &mut hbm);
        }
        (route, hbm)
    }

    /// Where a message of `queue` travels from and to: the sender's core
    /// and the receiver's slots (`to_slots`), or the slots and the
    /// receiver's core.
    fn slot_ends(&self, queue: u32, to_slots: bool) -> (Endpoint, Endpoint) {
        let q = &self.queues.queues[queue as usize];
        let slots = Placement::near(self.ipcq.buffer_space, self.coords[q.dst as usize]).endpoint();
        if to_slots {
            (Endpoint::Core(self.coords[q.src as usize]), slots)
        } else {
            (slots, Endpoint::Core(self.coords[q.dst as usize]))
        }
    }

    /// Runs a data-path group on the operation's captured operands.
    fn run_group(&mut self, p: usize, op: &OpRec, g: usize) -> Result<Outputs, SimError> {
        let r = run_captured(self.dp, self.func, self.plan, op, g, &mut self.mem);
        r.map_err(|e| self.fail_in(p, op.program, e))
    }

    /// Where a memory operation goes and how many bytes it moves.
    fn access(&self, p: usize, op: &OpRec) -> Result<Access, SimError> {
        let func = self.func;
        let d = func.inst(op.inst);
        let data = |k: usize| op.arg(d.args[k]).and_then(Val::data);
        if let Op::Gemm { .. } = d.op {
            return self.gemm_access(p, op);
        }
        let write = !matches!(d.op, Op::Load { .. });
        let mask_arg = match d.op {
            Op::Load { has_mask: true, .. } => Some(1),
            Op::Store { has_mask: true } | Op::AtomicAdd { has_mask: true } => Some(2),
            _ => None,
        };
        let size = pointee(func.ty(d.args[0])).size_bytes();
        let ptr = data(0).cloned().unwrap_or(RtValue::Scalar(0));
        let mask = mask_arg.and_then(data).cloned();
        let scan = LaneScan::of(&ptr, mask.as_ref(), size);
        let Some(first) = scan.first else {
            return Ok(Access {
                parts: smallvec![(Placement::Tcm(self.coords[p]), 0, Channels::new(), write)],
                ranges: Ranges::new(),
            });
        };
        let fault = || {
            self.op_error(
                p,
                op,
                ExecErrorKind::OutOfBounds(MemFault {
                    addr: first,
                    bytes: size,
                    write,
                }),
            )
        };
        let known = &self.pes[p].last_extent;
        let (base, seg_end, place) = match known.get() {
            Some(e @ (base, end, _)) if (base..end).contains(&first) => e,
            _ => {
                let e = self.mem.extent_of(first).ok_or_else(fault)?;
                known.set(Some(e));
                e
            }
        };
        self.check_reach(p, op, place, first, write)?;
        if scan.lo < base || scan.hi > seg_end {
            let lanes = Lanes {
                ptr: &ptr,
                mask: mask.as_ref(),
                size,
                write,
            };
            self.check_lanes_elsewhere(p, op, lanes, (base, seg_end, place), first)?;
        }
        let bytes = scan.count * size;
        let mut hbm = Channels::new();
        if let Placement::Hbm(_) = place {
            let f = &self.fabric;
            hbm = zero_channels(f.channels());
            if scan.contiguous {
                f.split_contiguous(first, bytes, &mut hbm);
            } else {
                for_each_active(&ptr, mask.as_ref(), |a| hbm[f.channel_of(a)] += size);
            }
        }
        Ok(Access {
            parts: smallvec![(place, bytes, hbm, write)],
            ranges: smallvec![footprint(&ptr, &scan, size, write)],
        })
    }

    /// Lanes beyond the first one's allocation `[base, end)` at `place` (a
    /// gather across tensors) must each be reachable too; their bytes are
    /// charged to the first lane's memory. Out of line: rare, and its
    /// messages would crowd `access`'s common path out of the instruction
    /// cache.
    #[cold]
    #[inline(never)]
    fn check_lanes_elsewhere(
        &self,
        p: usize,
        op: &OpRec,
        lanes: Lanes,
        (base, seg_end, place): (u64, u64, Placement),
        first: u64,
    ) -> Result<(), SimError> {
        let Lanes { ptr, mask, size, write } = lanes;
        let mut bad = None;
        let mut split = None;
        for_each_active(ptr, mask, |a| {
            if bad.is_none() && split.is_none() && !(base..seg_end).contains(&a) {
                bad = Some(a);
                if let Some(pl) = self.mem.placement_of(a) {
                    if self.check_reach(p, op, pl, a, write).is_ok() {
                        bad = None;
                    }
                    // One SIP's process does the whole access.
                    if self.windowed()
                        && self.lp_of_sip.get(pl.sip() as usize) != self.lp_of_sip.get(place.sip() as usize)
                    {
                        split = Some((a, pl));
                    }
                }
            }
        });
        if let Some((a, pl)) = split {
            return Err(self.op_error(
                p,
                op,
                ExecErrorKind::Unsupported(format!(
                    "this access reaches the {place} (at {first:#x}) and the {pl} (at {a:#x}), on two SIPs: in a \
                     launch over several SIPs one access stays on one SIP"
                )),
            ));
        }
        if let Some(a) = bad {
            let outside = self.op_error(
                p,
                op,
                ExecErrorKind::OutOfBounds(MemFault {
                    addr: a,
                    bytes: size,
                    write,
                }),
            );
            return Err(match self.mem.placement_of(a) {
                Some(pl) => self.check_reach(p, op, pl, a, write).err().unwrap_or(outside),
                None => outside,
            });
        }
        Ok(())
    }

    /// A PE reaches its own TCM, its SIP's HBM and SRAM; another SIP only
    /// with a one-sided put into a symmetric buffer, and not at all in a
    /// launch confined to one SIP (it runs on that SIP's clock alone).
    fn check_reach(&self, p: usize, op: &OpRec, place: Placement, addr: u64, write: bool) -> Result<(), SimError> {
        let me = self.coords[p];
        let why = match place {
            Placement::Tcm(owner) if owner != me => Some(format!(
                "the address {addr:#x} is in the TCM of {owner}, which only that PE can access"
            )),
            _ if place.sip() != me.sip && self.device.is_some() => Some(format!(
                "the address {addr:#x} is in the {place}, on another SIP: this launch's PEs and tensors are all on \
                 SIP {}, and it may reach no other (pass the other SIP's tensor, or use a collective)",
                me.sip
            )),
            _ if place.sip() != me.sip => {
                let symmetric = self.mem.lookup(addr).is_some_and(|(_, i)| i.symmetric.is_some());
                if write && symmetric {
                    None
                } else {
                    Some(format!(
                        "the address {addr:#x} is in the {place}, on another SIP: {} it with tl.send/tl.recv{}",
                        if write { "write" } else { "read" },
                        if write { " or a put into a symmetric buffer" } else { "" }
                    ))
                }
            }
            _ => None,
        };
        match why {
            Some(msg) => Err(self.op_error(p, op, ExecErrorKind::Unsupported(msg))),
            None => Ok(()),
        }
    }

    fn gemm_access(&self, p: usize, op: &OpRec) -> Result<Access, SimError> {
        let func = self.func;
        let d = func.inst(op.inst);
        let s = |k: usize| op.arg(d.args[k]).and_then(Val::data).map_or(0, RtValue::scalar);
        let dim = |k: usize| kernbench_compiler::datapath::elem::to_i64(DType::I32, s(k)).max(0) as u64;
        let (m, n, k) = (dim(3), dim(4), dim(5));
        let isz = pointee(func.ty(d.args[0])).size_bytes();
        let osz = pointee(func.ty(d.args[2])).size_bytes();
        let mut parts = SmallVec::new();
        let mut ranges = Ranges::new();
        for (arg, elems, size, write) in [(0, m * k, isz, false), (1, k * n, isz, false), (2, m * n, osz, true)] {
            let addr = s(arg);
            let bytes = elems.saturating_mul(size);
            if bytes == 0 {
                continue;
            }
            let fault = || self.op_error(p, op, ExecErrorKind::OutOfBounds(MemFault { addr, bytes, write }));
            // The whole matrix lies inside one allocation.
            let (base, _) = self.mem.lookup(addr).ok_or_else(fault)?;
            let len = self.mem.len_at(base).unwrap_or(0);
            if addr - base + bytes > len {
                return Err(fault());
            }
            let place = self.mem.placement_of(addr).ok_or_else(fault)?;
            self.check_reach(p, op, place, addr, write)?;
            if self.elsewhere(place.sip()) {
                // Its pipeline books all its traffic when it starts, which
                // the SIP holding `out` books itself in a launch over
                // several SIPs.
                return Err(self.op_error(
                    p,
                    op,
                    ExecErrorKind::Unsupported(format!(
                        "tl.gemm writes its output at {addr:#x}, in the {place}, on another SIP: in a launch over \
                         several SIPs it writes on its own SIP (move the result with a store or tl.send)"
                    )),
                ));
            }
            let mut hbm = Channels::new();
            if let Placement::Hbm(_) = place {
                hbm = zero_channels(self.fabric.channels());
                self.fabric.split_contiguous(addr, bytes, &mut hbm);
            }
            parts.push((place, bytes, hbm, write));
            ranges.push(Footprint::span(addr, addr + bytes, write));
        }
        Ok(Access { parts, ranges })
    }

    /// `tl.gemm`: the pipeline's closed form on idle paths, and the
    /// operands' total traffic reserved on the links (so others see the
    /// contention, and contention slows it down). Returns when it ends,
    /// the pipeline's stage times (the caller holds the engines), and when
    /// the first of its input transfers starts (it reads A and B then).
    fn gemm_composite(
        &mut self,
        p: usize,
        op: &OpRec,
        access: &Access,
    ) -> Result<(u64, cost::GemmPipeline, u64), SimError> {
        let func = self.func;
        let d = func.inst(op.inst);
        let now = self.now;
        let s = |k: usize| op.arg(d.args[k]).and_then(Val::data).map_or(0, RtValue::scalar);
        let dim = |k: usize| kernbench_compiler::datapath::elem::to_i64(DType::I32, s(k)).max(0) as u64;
        let shape = cost::GemmShape {
            m: dim(3),
            n: dim(4),
            k: dim(5),
            in_dtype: pointee(func.ty(d.args[0])),
            out_dtype: pointee(func.ty(d.args[2])),
        };
        let me = self.coords[p];
        let t0 = now + self.dma_setup_ps;
        if access.parts.len() < 3 {
            // An empty product: nothing moves.
            return Ok((t0, cost::GemmPipeline::default(), t0));
        }
        // Idle per-tile streaming (bytes at the bottleneck) and latency of
        // each operand's path.
        let mut routes = Vec::new();
        for (place, _, _, write) in &access.parts {
            routes.push(self.fabric.core_route(me, place.endpoint(), *write));
        }
        let stream = |sim: &Self, k: usize, bytes: u64| -> u64 {
            let (_, total, hbm, _) = &access.parts[k];
            // The tile's share of each pseudo-channel follows the operand's.
            let share: Vec<u64> = hbm.iter().map(|b| (b * bytes).div_ceil((*total).max(1))).collect();
            let c = sim.fabric.idle_cost(&routes[k], bytes, &share);
            c.head_ps + c.stream_ps
        };
        let lat = |sim: &Self, k: usize| sim.fabric.idle_cost(&routes[k], 1, &access.parts[k].2).latency_ps;
        let latency = lat(self, 0).max(lat(self, 1)) + lat(self, 2);
        let pipe = cost::gemm_pipeline(
            self.topo,
            &shape,
            |b| stream(self, 0, b),
            |b| stream(self, 1, b),
            |b| stream(self, 2, b),
            latency,
        );
        let mut end = t0 + pipe.total_ps();
        // The operands' traffic: A tiles are read once per output tile
        // column, B tiles once per output tile row.
        let g = &self.topo.spec.pe.gemm;
        let (tm, tn) = (g.tile_m.0, g.tile_n.0);
        let traffic = [
            shape.n.div_ceil(tn) * access.parts[0].1,
            shape.m.div_ceil(tm) * access.parts[1].1,
            access.parts[2].1,
        ];
        let mut sample_ps = u64::MAX;
        for (k, bytes) in traffic.into_iter().enumerate() {
            let (_, total, hbm, _) = &access.parts[k];
            let scale: Vec<u64> = hbm.iter().map(|b| (b * bytes).div_ceil((*total).max(1))).collect();
            let tr = self.fabric.reserve(&routes[k], bytes, &scale, t0);
            end = end.max(tr.end_ps);
            if k < 2 {
                sample_ps = sample_ps.min(tr.start_ps);
            }
        }
        Ok((end, pipe, sample_ps.min(end)))
    }

    /// A load's transfer starts: it reads memory now. Its end is known
    /// since it started, so this settles it and it needs no event at its
    /// end: its result's data is in, its footprint no longer orders later
    /// writes, it counts as finished (for `tl.notify` and the PE's end)
    /// from its end on, and whatever of the PE waits for it looks again.
    pub(super) fn sample(&mut self, p: usize, slot: u32) -> Result<(), SimError> {
        let Some(op) = self.pes[p].unpark(slot) else {
            return Ok(());
        };
        if let OpKind::Group(g) = op.kind {
            if self.groups[g].pipeline {
                return self.sample_gemm(p, op, g);
            }
        }
        let end = op.end_ps;
        if let Some(id) = op.mem_id() {
            let pe = &mut self.pes[p];
            pe.mem_sampled(id);
            pe.mem_done_at(id, end, self.now);
        }
        let outs = match op.kind {
            OpKind::Group(g) => self.run_group(p, &op, g)?,
            _ => Outputs::new(),
        };
        for (s, v) in op.results.iter().zip(outs) {
            let _ = s.data.set(v);
        }
        self.op_pool.give(op);
        self.ended_at(p, end, true)?;
        self.kick_waiting(p);
        Ok(())
    }

    /// `tl.gemm`'s input transfers start: it reads A and B now and
    /// computes C, whose writes are held until it ends (`done` makes
    /// them). Out of line, as [`Self::start_gemm`] is.
    #[inline(never)]
    fn sample_gemm(&mut self, p: usize, op: OpBox, g: usize) -> Result<(), SimError> {
        let mut held = HeldWrites::new(&mut self.mem);
        let r = run_captured(self.dp, self.func, self.plan, &op, g, &mut held);
        let writes = held.into_writes();
        r.map_err(|e| self.fail_in(p, op.program, e))?;
        let end = op.end_ps;
        let slot = self.pes[p].park(op);
        self.held_writes.insert((p as u32, slot), writes);
        self.schedule(end, Ev::Done(p as u32, slot));
        Ok(())
    }

    /// Retries, in this event, the engines of PE `p` whose head waits for
    /// something of the PE.
    fn retry_waiting(&mut self, p: usize) -> Result<(), SimError> {
        if !self.pes[p].any_waits_on_pe() {
            return Ok(());
        }
        for e in Engine::ALL {
            if self.pes[p].take_waiting(e) {
                self.kick(p, e)?;
            }
        }
        Ok(())
    }

    /// Retries (at once, by event) the engines of PE `p` whose head waits
    /// for something of the PE.
    fn kick_waiting(&mut self, p: usize) {
        if !self.pes[p].any_waits_on_pe() {
            return;
        }
        for e in Engine::ALL {
            if self.pes[p].waits_on_pe(e) {
                let now = self.now;
                self.request_kick(p, e, now);
            }
        }
    }

    /// An operation ended: its end-time effects, then whatever waited for
    /// it.
    pub(super) fn done(&mut self, p: usize, slot: u32) -> Result<(), SimError> {
        let Some(op) = self.pes[p].unpark(slot) else {
            return Ok(());
        };
        let now = self.now;
        match op.kind {
            OpKind::Group(g) if self.groups[g].pipeline => {
                // `tl.gemm`: C, computed when it read A and B, lands now.
                let writes = self.held_writes.remove(&(p as u32, slot)).unwrap_or_default();
                HeldWrites::apply(&mut self.mem, writes)
                    .map_err(|f| self.op_error(p, &op, ExecErrorKind::OutOfBounds(f)))?;
                self.wake_signal_waiters();
            }
            OpKind::Group(g) if self.groups[g].effect_at_end => {
                let outs = self.run_group(p, &op, g)?;
                for (s, v) in op.results.iter().zip(outs) {
                    let _ = s.data.set(v);
                    s.ready_ps.set(now);
                }
                // A store or atomic may have set someone's signal word.
                self.wake_signal_waiters();
            }
            OpKind::Notify { addr, bits, size } => {
                use kernbench_compiler::datapath::Memory;
                let _ = self.mem.write(addr, &bits.to_le_bytes()[..size as usize]);
                self.wake_signal_waiters();
            }
            _ => {}
        }
        let mem_id = op.mem_id();
        // An issue unit stalled on data waits for a value, which only an
        // operation with results provides (a send or a store ending wakes
        // it for nothing: it would look and stall again).
        let produced = !op.results.is_empty();
        self.op_pool.give(op);
        let pe = &mut self.pes[p];
        if let Some(id) = mem_id {
            pe.mem_done(id, now);
        }
        pe.last_done_ps = pe.last_done_ps.max(now);
        let wake = match pe.stall {
            Stall::Data => produced,
            Stall::Drain | Stall::Signal => true,
            _ => false,
        };
        if wake {
            self.resume_issue(p)?;
        }
        self.retry_waiting(p)
    }

    /// A send of message `msg` on `queue` started and its last packet
    /// reaches the receiver's slots at `end_ps`, known now: the receiver's
    /// engine, if its head is this message's receive, starts it then, or
    /// once it is dispatched and the engine is free (a receive issued
    /// later finds the arrival time in the queue); the PE's
    /// last finish moves on, and an issue unit waiting for its engines to
    /// drain looks again.
    fn send_settled(&mut self, p: usize, queue: u32, msg: u64, end_ps: u64) -> Result<(), SimError> {
        self.message_in(queue, msg, end_ps);
        self.op_settled(p, end_ps, false)
    }

    /// The receiver's side of a send: message `msg` of `queue` (the whole
    /// queue, or its receiver's half) is in the slots at `end_ps`, known
    /// now. A barrier token the receiver waits for is taken as it arrives
    /// (or when the receiver came for it, if its clock is ahead); a
    /// receive of it at the head of the receive engine starts then, or
    /// once it is dispatched and the engine is free.
    #[inline]
    fn message_in(&mut self, queue: u32, msg: u64, end_ps: u64) {
        let q = &mut self.queues.queues[queue as usize];
        let dst = q.dst as usize;
        if let Some((_, token)) = q.token_waiter.take_if(|(m, _)| *m == msg) {
            let taken = end_ps.max(self.pes[dst].issue_ps);
            token.ready_ps.set(taken);
            self.slots_freed(queue, msg, taken);
            if self.pes[dst].stall == Stall::Data {
                self.wake_issue(dst);
            }
            return;
        }
        if let Some((waiting, not_before)) = q.waiting_recv {
            if waiting == msg {
                // Not before the receive is dispatched and its engine is
                // free either (neither changes before it starts).
                q.waiting_recv = None;
                self.request_kick(dst, Engine::Recv, end_ps.max(not_before));
            }
        }
    }

    /// A receive of message `msg` of `queue` started and its copy out of
    /// the slots ends at `end_ps`, all settled when it starts: the message
    /// leaves the queue, its credits travel back from `end_ps`, the PE's
    /// last finish moves on, and whatever of the PE waits for the result
    /// (whose data and ready time are now known) looks again. The issue
    /// unit goes on at its own clock, past `end_ps` if it needs the data.
    fn recv_settled(&mut self, p: usize, queue: u32, msg: u64, end_ps: u64) -> Result<(), SimError> {
        self.slots_freed(queue, msg, end_ps);
        self.op_settled(p, end_ps, true)
    }

    /// Message `msg` of `queue` leaves its slots at `end_ps` (copied out,
    /// or a barrier token noticed): its credits travel back to the sender
    /// from then, and a sender waiting for them looks again.
    pub(super) fn slots_freed(&mut self, queue: u32, msg: u64, end_ps: u64) {
        let q = &mut self.queues.queues[queue as usize];
        let slots = q.msg(msg).map_or(0, |m| m.slots);
        q.consume(msg);
        let (src, dst, known) = (q.src, q.dst, q.credit_latency_ps);
        let back = match known {
            Some(t) => t,
            None => {
                let t = self.core_latency_ps(dst as usize, src as usize);
                self.queues.queues[queue as usize].credit_latency_ps = Some(t);
                t
            }
        };
        let q = &mut self.queues.queues[queue as usize];
        if q.half == Half::Recv {
            let (src, dst, control) = (q.src, q.dst, q.control);
            let lp = self.lp_of[src as usize];
            self.hand_off(
                lp,
                Cross::Credits {
                    src,
                    dst,
                    control,
                    back_ps: end_ps + back,
                    slots,
                },
            );
            return;
        }
        self.credits_returning(queue, end_ps + back, slots);
    }

    /// Credits of queue `(src, dst, control)` handed back by its
    /// receiver's process arrive at its sender at `back_ps`.
    pub(super) fn credits_back(&mut self, src: u32, dst: u32, control: bool, back_ps: u64, slots: u32) {
        if let Some(queue) = self.queues.find(src, dst, control, Half::Send) {
            self.credits_returning(queue, back_ps, slots);
        }
    }

    /// `slots` credits of `queue` (its whole or its sender's half) are
    /// back at its sender at `back_ps`; a sender waiting for them looks
    /// again.
    fn credits_returning(&mut self, queue: u32, back_ps: u64, slots: u32) {
        let q = &mut self.queues.queues[queue as usize];
        q.returning.push_back((back_ps, slots));
        if q.sender_waiting {
            self.retry_sender(queue);
        }
    }

    /// An operation of PE `p` that ends at `end_ps` was settled when it
    /// started: [`Self::ended_at`], and when it `produced` results (now
    /// known), the engines whose head waits for something of the PE look
    /// again in this event.
    fn op_settled(&mut self, p: usize, end_ps: u64, produced: bool) -> Result<(), SimError> {
        self.ended_at(p, end_ps, produced)?;
        if produced {
            self.retry_waiting(p)?;
        }
        Ok(())
    }

    /// The issue unit's side of an operation of PE `p` settled before it
    /// ends at `end_ps`: the PE's last finish moves on, and an issue unit
    /// waiting for its engines to drain, or (when the operation `produced`
    /// results) for data, looks again.
    fn ended_at(&mut self, p: usize, end_ps: u64, produced: bool) -> Result<(), SimError> {
        let pe = &mut self.pes[p];
        pe.last_done_ps = pe.last_done_ps.max(end_ps);
        let wake = match pe.stall {
            Stall::Data => produced,
            Stall::Drain => true,
            _ => false,
        };
        if wake {
            self.resume_issue(p)?;
        }
        Ok(())
    }

    /// Whoever waits in `tl.wait_until` looks at its signal word again.
    fn wake_signal_waiters(&mut self) {
        if self.signal_waiters.is_empty() {
            return;
        }
        // In PE order, as a scan of all PEs would wake them.
        let mut waiters = std::mem::take(&mut self.signal_waiters);
        waiters.sort_unstable();
        waiters.dedup();
        // A write reaches only its own SIP's memory: the waiters of other
        // logical processes stay.
        let lp = self.cur_lp as u16;
        for &q in &waiters {
            if self.lp_of[q as usize] == lp && self.pes[q as usize].stall == Stall::Signal {
                self.wake_issue(q as usize);
            }
        }
        waiters.retain(|q| self.lp_of[*q as usize] != lp);
        if !waiters.is_empty() {
            self.signal_waiters.append(&mut waiters);
        }
        // Keep the allocation.
        waiters.clear();
        if self.signal_waiters.is_empty() {
            self.signal_waiters = waiters;
        }
    }

    /// A waiting sender has enough credits once those travelling back
    /// arrive: its engine retries when it notices them.
    fn retry_sender(&mut self, queue: u32) {
        let q = &mut self.queues.queues[queue as usize];
        let p = q.src as usize;
        let head = self.pes[p].engines[Engine::Send.index()]
            .queue
            .front()
            .map(|op| op.kind);
        let Some(OpKind::Send { queue: on, slots }) = head else {
            return;
        };
        if on != queue {
            return;
        }
        let Some(c) = q.credits_back_by(slots) else { return };
        q.sender_waiting = false;
        let since = self.pes[p].engines[Engine::Send.index()].blocked_since.unwrap_or(c);
        let t = self.credits_noticed_at(since, c);
        self.request_kick(p, Engine::Send, t);
    }

    /// Whether memory on SIP `sip` belongs to another logical process
    /// than the one running.
    #[inline]
    pub(super) fn elsewhere(&self, sip: u32) -> bool {
        self.windowed()
            && self
                .lp_of_sip
                .get(sip as usize)
                .is_some_and(|&lp| lp as usize != self.cur_lp)
    }

    /// Books `route` (between `ends`) for `bytes` from `t0` as far as this
    /// logical process's links go. The rest, on another SIP, is handed to
    /// that SIP's process with `then()`, what to do when the transfer
    /// ends there ([`Booked::HandOff`]); a transfer that stays here is
    /// the caller's to finish ([`Booked::Done`]).
    pub(super) fn book(
        &mut self,
        route: &Route,
        ends: (Endpoint, Endpoint),
        bytes: u64,
        hbm: &Channels,
        t0: u64,
        then: impl FnOnce() -> Then,
    ) -> Booked {
        // A route between two places of one SIP stays in it.
        let lp = |e: Endpoint| self.lp_of_sip.get(e.sip() as usize);
        if !self.windowed() || lp(ends.0) == lp(ends.1) {
            return Booked::Done(self.fabric.reserve(route, bytes, hbm, t0));
        }
        let progress = super::fabric::Progress::at_start(t0);
        self.continue_transfer(route, ends, bytes, hbm, progress, then)
    }

    /// [`Self::book`] from where a transfer stands.
    fn continue_transfer(
        &mut self,
        route: &Route,
        (from, to): (Endpoint, Endpoint),
        bytes: u64,
        hbm: &Channels,
        at: super::fabric::Progress,
        then: impl FnOnce() -> Then,
    ) -> Booked {
        let (lp, lp_of_sip) = (self.cur_lp, &self.lp_of_sip);
        let booked = self.fabric.reserve_within(
            route,
            bytes,
            hbm,
            at,
            Some(&|sip| lp_of_sip[sip as usize] as usize == lp),
        );
        if let Booked::HandOff(_, at) = booked {
            let next = self.lp_of_sip[self.fabric.stage_sip(route.stages[at.stage]) as usize];
            self.hand_off(
                next,
                Cross::Transfer(Handed {
                    from,
                    to,
                    bytes,
                    hbm: hbm.clone(),
                    at,
                    then: then(),
                }),
            );
        }
        booked
    }

    /// A store, atomic or notify of PE `p` into memory (`place`, `bytes`,
    /// `hbm`) on another SIP, from `t0`: its transfer is handed to that
    /// SIP's process, which writes when its last byte is in and sends an
    /// acknowledgement back; the operation waits for it in flight.
    #[allow(clippy::type_complexity)]
    fn remote_put(
        &mut self,
        p: usize,
        e: Engine,
        mut op: OpBox,
        (place, bytes, hbm): (Placement, u64, Channels),
        t0: u64,
        then: impl FnOnce(&OpRec, u32, u32) -> Then,
    ) -> Result<(), SimError> {
        let now = self.now;
        let ends = (Endpoint::Core(self.coords[p]), place.endpoint());
        let route = self.fabric.route(ends.0, ends.1);
        let inst = op.inst;
        op.kind = OpKind::Remote;
        // Parked first: the hand-off names its slot.
        let slot = self.pes[p].park(op);
        let op_ref = self.pes[p].inflight[slot as usize].as_deref();
        let Some(op_ref) = op_ref else { return Ok(()) };
        let then = then(op_ref, p as u32, slot);
        let tr = match self.book(&route, ends, bytes, &hbm, t0, || then) {
            Booked::Done(tr) | Booked::HandOff(tr, _) => tr,
        };
        self.occupy(p, e, (now, tr.injected_ps, tr.end_ps), inst);
        Ok(())
    }

    /// What another process handed this one takes effect (an
    /// [`Ev::Cross`] event): a transfer whose head reaches this SIP now
    /// books the rest of its route; a put whose last byte is in writes.
    pub(super) fn take_over(&mut self, what: Arrival) -> Result<(), SimError> {
        match what {
            Arrival::Transfer(Handed {
                from,
                to,
                bytes,
                hbm,
                at,
                then,
            }) => {
                let route = self.fabric.route(from, to);
                let mut then = Some(then);
                let booked = self.continue_transfer(&route, (from, to), bytes, &hbm, at, || {
                    then.take().expect("handed on once")
                });
                match (booked, then) {
                    (Booked::Done(tr), Some(then)) => self.transfer_in(then, tr.end_ps, to),
                    _ => Ok(()),
                }
            }
            Arrival::Landed { then, to } => self.land(then, to),
        }
    }

    /// A transfer from another process ends here at `end_ps` (at `to`):
    /// a message is in its receiver's slots (known now, as a local send
    /// knows when it starts); a put or notify writes then.
    fn transfer_in(&mut self, then: Then, end_ps: u64, to: Endpoint) -> Result<(), SimError> {
        let Then::Message {
            src,
            dst,
            control,
            msg,
            bytes,
            slots,
            data,
            inst,
        } = then
        else {
            return {
                self.schedule_cross(end_ps, Arrival::Landed { then, to });
                Ok(())
            };
        };
        let (queue, new) = self.queue(src, dst, control, Half::Recv);
        if new && !control {
            self.queue_slots_fit(queue, src as usize, inst)?;
        }
        let q = &mut self.queues.queues[queue as usize];
        debug_assert_eq!(msg, q.first_msg + q.msgs.len() as u64, "messages arrive in order");
        q.msgs.push_back(super::ipcq::Msg {
            data,
            bytes,
            slots,
            sent_by: inst,
            arrived_ps: end_ps,
        });
        let l = &mut self.lps[self.cur_lp];
        l.last_arrival_ps = l.last_arrival_ps.max(end_ps);
        self.message_in(queue, msg, end_ps);
        Ok(())
    }

    /// A put or notify from another process writes now, wakes this SIP's
    /// signal waiters, and is acknowledged to its PE (the latency from
    /// the memory back to its core).
    fn land(&mut self, then: Then, to: Endpoint) -> Result<(), SimError> {
        let (pe, slot, outs) = match then {
            Then::Put {
                pe,
                slot,
                program,
                g,
                inputs,
            } => {
                let func = self.func;
                let group = &self.plan.groups[g];
                let r = with_fitted(group.inputs.iter().map(|v| func.ty(*v)).zip(inputs.iter()), |refs| {
                    self.dp.run(func, self.plan, g, refs, &mut self.mem)
                });
                // Its PE is another process's: the error names it from
                // the launch's tables.
                let outs = r.map_err(|error| SimError::Exec {
                    pe: self.coords[pe as usize],
                    rank: self.ranks[pe as usize],
                    program,
                    error,
                })?;
                (pe, slot, outs.iter().map(RtValue::deep_clone).collect())
            }
            Then::Notify {
                pe,
                slot,
                addr,
                bits,
                size,
            } => {
                use kernbench_compiler::datapath::Memory;
                let _ = self.mem.write(addr, &bits.to_le_bytes()[..size as usize]);
                (pe, slot, Outputs::new())
            }
            Then::Message { .. } => return Ok(()),
        };
        self.wake_signal_waiters();
        let back = self.fabric.latency_ps(to, Endpoint::Core(self.coords[pe as usize]));
        let lp = self.lp_of[pe as usize];
        self.hand_off(
            lp,
            Cross::Ack {
                pe,
                slot,
                at_ps: self.now + back,
                outs,
            },
        );
        Ok(())
    }

    /// When a sender waiting since `since_ps` notices credits that arrive
    /// at `back_ps`: at once when it sleeps (the return wakes it), at its
    /// next poll when it polls.
    fn credits_noticed_at(&self, since_ps: u64, back_ps: u64) -> u64 {
        match self.ipcq.backpressure {
            Backpressure::Poll if back_ps > since_ps => {
                let every = Topology::ns_to_ps(self.ipcq.poll_interval_ns.0).max(1);
                since_ps + (back_ps - since_ps).div_ceil(every) * every
            }
            _ => back_ps,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernbench_compiler::datapath::affine::Affine;

    /// Every byte of every active lane lies in the access's footprint,
    /// for pointer formulas of one, two and three axes, strides of every
    /// sign and size, bases of every alignment, addresses that wrap, and
    /// masks with holes; and the strided ones get a period where they
    /// should (an even/odd pair, the rows of a tile).
    #[test]
    fn a_footprint_covers_every_active_lane() {
        let size = 4u64;
        let inside = |f: &Footprint, b: u64| {
            f.lo <= b && b < f.hi && (f.period == 0 || (b % f.period + f.period - f.phase) % f.period < f.run)
        };
        let mut periodic = 0;
        let shapes: [(&[u64], &[i64]); 9] = [
            (&[16], &[8]),
            (&[16], &[12]),
            (&[16], &[-8]),
            (&[16], &[4]),
            (&[4, 8], &[64, 4]),
            (&[8, 4], &[4, 64]),
            (&[4, 8], &[16, 4]),
            (&[2, 3, 4], &[256, 64, 4]),
            (&[4], &[i64::MAX]),
        ];
        for (shape, strides) in shapes {
            for base in [4096i64, 4098, 4101, -8] {
                let mut words = vec![base];
                words.extend_from_slice(strides);
                let a = Affine {
                    elem: Elem::Ptr(DType::I32),
                    shape: smallvec::SmallVec::from_slice(shape),
                    words: smallvec::SmallVec::from_slice(&words),
                };
                let ptr = RtValue::Affine(Rc::new(a.clone()));
                let n = a.numel();
                for holes in [0usize, 1, 3] {
                    let mut m = Tensor::zeros(Elem::Num(DType::Bool), &[n]);
                    for k in 0..n {
                        m.set_bits(k, u64::from(holes == 0 || k % (holes + 1) != 0));
                    }
                    let mask = RtValue::Block(Rc::new(m));
                    let scan = LaneScan::of(&ptr, Some(&mask), size);
                    if scan.first.is_none() {
                        continue;
                    }
                    let f = footprint(&ptr, &scan, size, true);
                    periodic += usize::from(f.period != 0);
                    for_each_active(&ptr, Some(&mask), |addr| {
                        // A lane whose bytes run past 2^64 is out of every
                        // segment (an error before any ordering).
                        if addr.checked_add(size).is_none() {
                            return;
                        }
                        for b in 0..size {
                            let byte = addr.wrapping_add(b);
                            assert!(
                                inside(&f, byte),
                                "{shape:?} {strides:?} base {base} holes {holes}: byte {byte} outside {f:?}"
                            );
                        }
                    });
                }
            }
        }
        // 1-D strides of 8 and 12, the 4-by-8 tile at a 64-byte pitch and
        // its transpose, at 3 bases that do not wrap, 3 masks each.
        assert_eq!(periodic, 4 * 3 * 3, "{periodic}");
    }

    /// Values of their types' shapes are handed on themselves; a block
    /// under another shape (a reshape's consumer) as a converted copy with
    /// the same elements, the others still themselves.
    #[test]
    fn with_fitted_converts_only_what_needs_it() {
        let e = Elem::Num(DType::I32);
        let mut flat = Tensor::zeros(e, &[4]);
        for k in 0..4 {
            flat.set_bits(k, 10 + k as u64);
        }
        let block = RtValue::Block(Rc::new(flat));
        let scalar = RtValue::Scalar(7);
        let (t_scalar, t_flat, t_square) = (Type::Scalar(e), Type::Block(e, vec![4]), Type::Block(e, vec![2, 2]));

        let same = [(&t_scalar, &scalar), (&t_flat, &block)];
        with_fitted(same.iter().copied(), |refs| {
            assert!(std::ptr::eq(refs[0], &scalar) && std::ptr::eq(refs[1], &block));
        });

        let reshaped = [(&t_scalar, &scalar), (&t_square, &block)];
        let got = with_fitted(reshaped.iter().copied(), |refs| {
            assert!(std::ptr::eq(refs[0], &scalar), "a scalar is never copied");
            assert!(!std::ptr::eq(refs[1], &block));
            match refs[1] {
                RtValue::Block(t) => (t.shape.to_vec(), t.bytes().to_vec()),
                other => panic!("a block, not {other:?}"),
            }
        });
        let RtValue::Block(original) = &block else {
            unreachable!()
        };
        assert_eq!(got, (vec![2, 2], original.bytes().to_vec()));
    }
}
