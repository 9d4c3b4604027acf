//! The issue unit: walks one PE's program in order. Scalars and control
//! flow are computed here (one `dispatch` each); block operations, sends
//! and receives are queued on their engines with their operands captured.
//! The issue unit runs ahead of the engines on its own clock and touches
//! only its PE's state, except at a barrier, which it reaches only when
//! its clock has caught up with the global one; whenever it needs
//! something not there yet it stalls, and the event that provides it wakes
//! it at `max(that time, its clock)`.

use super::events::Sim;
use super::ipcq::Half;
use super::pe::{ConeMemo, Frame, FrameKind, OpBox, OpKind, Slot, Stall, Val};
use super::{Engine, SimError};
use crate::exec::{scalar_op, Scalar};
use kernbench_compiler::datapath::{elem, ExecErrorKind, Outputs, RtValue, Step};
use kernbench_compiler::ir::{Inst, Op, Peer, Region, Value};
use kernbench_compiler::sema::types::{DType, Elem};
use smallvec::SmallVec;

/// Steps one issue event may take before yielding to other events (the
/// result does not depend on it; it bounds one event's work).
const ISSUE_BUDGET: usize = 512;

/// Values carried into a region or out of it.
type Carried = SmallVec<[Val; 8]>;

/// Stands in for an input with no data (never read: callers check first).
const UNSET: RtValue = RtValue::Scalar(0);

impl Sim<'_> {
    pub(super) fn issue(&mut self, p: usize) -> Result<(), SimError> {
        {
            let pe = &mut self.pes[p];
            if pe.stall == super::pe::Stall::Finished {
                return Ok(());
            }
            pe.stall = Stall::None;
            pe.issue_ps = pe.issue_ps.max(self.now);
        }
        let mut budget = ISSUE_BUDGET;
        while budget > 0 {
            budget -= 1;
            // A blocking receive or wait holds the issue unit until its data
            // is in.
            if let Some(slot) = &self.pes[p].wait_for {
                match slot.ready() {
                    Some(r) => {
                        let pe = &mut self.pes[p];
                        pe.issue_ps = pe.issue_ps.max(r);
                        pe.wait_for = None;
                    }
                    None => {
                        self.stall(p, Stall::Data);
                        return Ok(());
                    }
                }
            }
            // Nothing issues at or past the time limit: a run stopped by
            // it finds each PE at the step it had reached then, not at one
            // its issue unit (which runs ahead of the clock) got to later.
            if self.pes[p].issue_ps >= self.stop_ps {
                self.wake_issue(p);
                return Ok(());
            }
            let Some(frame) = self.pes[p].frames.last() else {
                return self.end_program(p);
            };
            let Some(&step) = self.plan.steps[frame.region].get(frame.idx) else {
                // A region without a terminator (the verifier forbids it).
                self.pes[p].frames.clear();
                continue;
            };
            let go = match step {
                Step::Inst(i) => match self.issue_pure_scalar(p, i, &mut budget)? {
                    Some(go) => go,
                    None => self.issue_inst(p, i)?,
                },
                Step::Relabel(i) => {
                    // A reshape is the same elements: consumers see them
                    // under their own type.
                    let d = self.func.inst(i);
                    let v = self.pes[p].get(d.args[0]).clone();
                    self.pes[p].set(d.results[0], v);
                    self.advance(p);
                    true
                }
                Step::Group(g) => self.issue_group(p, g)?,
                Step::Control(i) => self.control(p, i)?,
            };
            if !go {
                return Ok(());
            }
        }
        self.wake_issue(p);
        Ok(())
    }

    /// When tracing: a dispatch not before `t`, later than the issue unit's
    /// clock, is a stall for an operand. Out of line: the hot path only
    /// tests `trace`.
    #[cold]
    #[inline(never)]
    fn note_operand_wait(&mut self, p: usize, t: u64) {
        if t > self.pes[p].issue_ps {
            self.note_stall(p, Stall::Data);
        }
    }

    /// Stops issuing until the reason goes away; always false.
    fn stall(&mut self, p: usize, why: Stall) -> bool {
        if self.trace {
            self.note_stall(p, why);
        }
        self.pes[p].stall = why;
        false
    }

    /// Records a stall for the trace: the instruction the issue unit
    /// cannot go past (for a blocking receive, wait or barrier, the one
    /// whose data it waits for), unless it stalled there already with no
    /// dispatch since.
    fn note_stall(&mut self, p: usize, why: Stall) {
        let pe = &self.pes[p];
        let blocking = pe.wait_for.is_some() && why == Stall::Data;
        let inst = match pe.wait_for {
            Some(_) if why == Stall::Data => pe.wait_inst,
            _ => self.issue_step(p).map(|s| match s {
                Step::Inst(i) | Step::Relabel(i) | Step::Control(i) => i,
                Step::Group(g) => self.groups[g].label,
            }),
        }
        // At the program's end (no frame left) it drains at the return.
        .or_else(|| self.func.region(self.func.body).insts.last().copied());
        let Some(inst) = inst else { return };
        // A blocking receive, wait or barrier waits for what arrives; any
        // other stall for data waits for a value (a recv's peer rank, say).
        let why = match (blocking, &self.func.inst(inst).op) {
            (true, Op::Barrier) => "waits for a barrier token",
            (true, Op::Recv { is_async: false, .. }) if self.received_message_is_in(p, inst) => {
                "waits for its receive to copy the message out of its slot"
            }
            (true, _) => "waits for the message it receives",
            (false, _) => why.describe(),
        };
        let pe = &mut self.pes[p];
        let Some(stalls) = pe.issue_stalls.as_mut() else {
            return;
        };
        let last_dispatch_end = pe.issue_spans.as_ref().and_then(|s| s.last()).map_or(0, |s| s.1);
        if let Some(&(at, i, w)) = stalls.last() {
            if i == inst && w == why && last_dispatch_end <= at {
                return;
            }
        }
        stalls.push((pe.issue_ps, inst, why));
    }

    /// Whether PE `p`'s blocking receive `inst` waits only for its own
    /// copy-out: by the issue unit's clock its message is in, and so is
    /// that of every receive queued ahead of it (the engine takes them in
    /// order), or the engine has started it (it starts only once its
    /// message is in).
    fn received_message_is_in(&self, p: usize, inst: Inst) -> bool {
        let pe = &self.pes[p];
        let arrived = |kind: OpKind| match kind {
            OpKind::Recv { queue, msg } => {
                (self.queues.queues[queue as usize].arrival_ps(msg)).is_some_and(|a| a <= pe.issue_ps)
            }
            _ => false,
        };
        let mut ahead_arrived = true;
        for op in pe.engines[Engine::Recv.index()].queue.iter() {
            ahead_arrived &= arrived(op.kind);
            if op.inst == inst {
                return ahead_arrived;
            }
        }
        true
    }

    fn advance(&mut self, p: usize) {
        if let Some(f) = self.pes[p].frames.last_mut() {
            f.idx += 1;
        }
    }

    /// Pays one dispatch at the issue unit's clock (or later, `t`).
    fn dispatch(&mut self, p: usize, t: u64) -> u64 {
        self.dispatch_n(p, t, 1)
    }

    /// Pays `n` dispatches (a fused group: one per instruction). Not
    /// before `t`: an issue unit that waits until then for an operand of
    /// what it computes itself (a scalar, `tl.symm_at`, a notify's
    /// operands) has stalled, and the trace says so.
    fn dispatch_n(&mut self, p: usize, t: u64, n: usize) -> u64 {
        if self.trace {
            self.note_operand_wait(p, t);
        }
        let d = self.dispatch_ps * n as u64;
        self.pes[p].dispatch(t, d)
    }

    /// The program is out of steps: the next one issues at once, its
    /// operations queued behind this one's (DESIGN §2: issue stalls only
    /// for a value, a full queue, a blocking receive or wait); after the
    /// last, the PE finishes once its engines drain.
    fn end_program(&mut self, p: usize) -> Result<(), SimError> {
        if self.pes[p].programs.remaining() {
            self.start_next_program(p);
            return Ok(());
        }
        if !self.pes[p].drained() {
            self.stall(p, Stall::Drain);
            return Ok(());
        }
        self.start_next_program(p);
        Ok(())
    }

    /// When the last of `args` is ready; `None` when one is not produced
    /// yet (its data is not there, or its ready time is not known).
    fn ready_all(&self, p: usize, args: &[Value]) -> Option<u64> {
        let pe = &self.pes[p];
        let mut t = 0;
        for a in args {
            let v = pe.get(*a);
            t = t.max(v.ready_ps()?);
            v.data()?;
        }
        Some(t)
    }

    /// The values of `args` for the issue unit to compute with, and when
    /// the last is ready; `None` when one is not produced yet.
    fn operands(&self, p: usize, args: &[Value]) -> Option<(SmallVec<[RtValue; 4]>, u64)> {
        let t = self.ready_all(p, args)?;
        let pe = &self.pes[p];
        let out = args
            .iter()
            .map(|a| pe.get(*a).data().unwrap_or(&UNSET).clone())
            .collect();
        Some((out, t))
    }

    fn issue_inst(&mut self, p: usize, i: Inst) -> Result<bool, SimError> {
        let func = self.func;
        let d = func.inst(i);
        match &d.op {
            Op::Send(peer) => return self.issue_send(p, i, *peer),
            Op::Recv { peer, is_async } => return self.issue_recv(p, i, *peer, *is_async),
            Op::Wait => {
                let fut = self.pes[p].get(d.args[0]).clone();
                if let Val::Pending(slot) = &fut {
                    self.pes[p].wait_for = Some(slot.clone());
                    self.pes[p].wait_inst = Some(i);
                }
                self.pes[p].set(d.results[0], fut);
                let t = self.pes[p].issue_ps;
                self.dispatch(p, t);
                self.advance(p);
                return Ok(true);
            }
            Op::Barrier => return self.barrier(p, i),
            Op::SymmAt => return self.symm_at(p, i),
            Op::Notify => return self.issue_notify(p, i),
            Op::WaitUntil => return self.wait_until(p, i),
            _ => {}
        }
        let Some((args, ready)) = self.operands(p, &d.args) else {
            return Ok(self.stall(p, Stall::Data));
        };
        let t0 = self.pes[p].issue_ps.max(ready);
        match scalar_op(func, i, &args, &self.pes[p].ctx).map_err(|kind| self.exec_error(p, i, kind))? {
            Scalar::Value(b) => {
                let at = t0 + self.dispatch_ps;
                if let Some(r) = d.results.first() {
                    self.pes[p].set(
                        *r,
                        Val::Ready {
                            v: RtValue::Scalar(b),
                            at,
                        },
                    );
                }
            }
            Scalar::Done => {}
            Scalar::Communication(what) => {
                return Err(self.exec_error(
                    p,
                    i,
                    ExecErrorKind::Unsupported(format!("`{what}` is not supported by the simulator")),
                ))
            }
        }
        self.dispatch(p, t0);
        self.advance(p);
        Ok(true)
    }

    /// The fast path of scalar arithmetic: a pure scalar instruction whose
    /// operands are all scalars already produced is computed from their
    /// bits, with no copies of values; and so are the ones that follow it
    /// in the region while they qualify and the budget lasts (each takes
    /// one step of it, as in `issue`'s loop), without going back through
    /// that loop. `None` when the first does not qualify (the general path
    /// then decides, and stalls if an operand is missing).
    fn issue_pure_scalar(&mut self, p: usize, first: Inst, budget: &mut usize) -> Result<Option<bool>, SimError> {
        let steps = &self.plan.steps;
        let scalar_ops = &self.scalar_ops;
        let (dispatch_ps, stop_ps, trace) = (self.dispatch_ps, self.stop_ps, self.trace);
        let pe = &mut self.pes[p];
        let Some(frame) = pe.frames.last() else {
            return Ok(None);
        };
        let region_steps = &steps[frame.region];
        let start_idx = frame.idx;
        let mut idx = start_idx;
        let mut inst = first;
        let mut failed = None;
        while let Some(step) = scalar_ops.get(inst.as_u32() as usize).and_then(Option::as_ref) {
            let mut bits = [0u64; 3];
            let mut ready = 0;
            let mut have_all = true;
            for (k, a) in step.arg_entries[..step.n_args as usize].iter().enumerate() {
                let (b, at) = match pe.at(*a) {
                    Val::Ready {
                        v: RtValue::Scalar(b),
                        at,
                    } => (*b, *at),
                    Val::Pending(s) => match (s.data.get(), s.ready_ps.get()) {
                        (Some(RtValue::Scalar(b)), at) if at != super::pe::UNKNOWN => (*b, at),
                        _ => {
                            have_all = false;
                            break;
                        }
                    },
                    _ => {
                        have_all = false;
                        break;
                    }
                };
                bits[k] = b;
                ready = ready.max(at);
            }
            if !have_all {
                break;
            }
            if inst != first {
                // The first one's step was taken by `issue`.
                *budget -= 1;
            }
            let b = match step.fast.eval(&bits) {
                Some(b) => b,
                None => match step.op.eval(|k| bits[k], &pe.ctx) {
                    Ok(b) => b,
                    Err(kind) => {
                        failed = Some((inst, kind));
                        break;
                    }
                },
            };
            // One dispatch, once the operands are ready; waiting for them
            // is a stall (as in `dispatch_n`).
            if trace {
                note_scalar_wait(pe, inst, ready);
            }
            let at = pe.dispatch(ready, dispatch_ps);
            if step.result_entry != super::events::NO_ENTRY {
                pe.set_at(
                    step.result_entry,
                    Val::Ready {
                        v: RtValue::Scalar(b),
                        at,
                    },
                );
            }
            idx += 1;
            match region_steps.get(idx) {
                Some(Step::Inst(next)) if *budget > 0 && pe.issue_ps < stop_ps => inst = *next,
                _ => break,
            }
        }
        let started = idx != start_idx;
        if let Some(f) = pe.frames.last_mut() {
            f.idx = idx;
        }
        if let Some((inst, kind)) = failed {
            return Err(self.exec_error(p, inst, kind));
        }
        Ok(started.then_some(true))
    }

    /// Runs a pure group now on its inputs, all produced (see
    /// [`Self::ready_all`]; the data does not depend on when); returns its
    /// outputs. The inputs are read in place from the PE's values.
    fn compute_now(&mut self, p: usize, g: usize) -> Result<Outputs, SimError> {
        let func = self.func;
        let group = &self.plan.groups[g];
        let pe = &self.pes[p];
        let r = super::engines::with_fitted(
            group
                .inputs
                .iter()
                .map(|v| (func.ty(*v), pe.get(*v).data().unwrap_or(&UNSET))),
            |refs| self.dp.run(func, self.plan, g, refs, &mut self.mem),
        );
        r.map_err(|e| self.fail(p, e))
    }

    /// Address generation group `g` on `vals`. With a data path that
    /// hands on formulas, each output's cone is evaluated symbolically, or
    /// reused from the PE's last evaluation of it when its inputs are the
    /// same (the same formula, equal scalars); a cone without a formula
    /// sends the whole group the usual way.
    fn address_now(&mut self, p: usize, g: usize) -> Result<Outputs, SimError> {
        let n = self.cones[g].as_ref().map_or(0, Vec::len);
        if n == 0 || !self.dp.formulas() {
            return self.compute_now(p, g);
        }
        let func = self.func;
        let mut outs = SmallVec::new();
        for k in 0..n {
            let Some(cone) = self.cones[g].as_ref().and_then(|c| c.get(k)) else {
                break;
            };
            let slot = self.cone_base[g] + k;
            let pe = &mut self.pes[p];
            // The cone's input `j` read in place, as it is and fitted to its
            // type.
            let value = |v: Value| pe.get(v).data().unwrap_or(&UNSET);
            let raw = |j: usize| value(cone.group.inputs[j]);
            let input = |j: usize| {
                let v = cone.group.inputs[j];
                super::engines::fit(func.ty(v), value(v))
            };
            // A pointer moved by a scalar is computed faster than the memo
            // is checked, and its offset is new at nearly every use: no memo,
            // and no list of the inputs (the general path below gives the
            // same when the shortcut does not apply). Its operands are not
            // fitted: `eval_on` checks the pointer's shape itself and wants
            // a scalar offset, which fitting leaves alone.
            if let Some(s) = &cone.shift {
                let (pk, ok) = s.operands();
                if let Some(shifted) = s.eval_on(raw(pk), raw(ok)) {
                    outs.push(shifted);
                    continue;
                }
            }
            // The memo is checked input by input; the lists an evaluation
            // takes are built only on a miss.
            let n_inputs = cone.group.inputs.len();
            if let Some(ConeMemo(Some((seen, out)))) = pe.cone_memo.get(slot) {
                if seen.len() == n_inputs && seen.iter().enumerate().all(|(j, a)| same_value(a, &input(j))) {
                    outs.push(out.clone());
                    continue;
                }
            }
            let ins: SmallVec<[std::borrow::Cow<RtValue>; 4]> = (0..n_inputs).map(input).collect();
            let out = {
                let refs: SmallVec<[&RtValue; 4]> = ins.iter().map(|x| &**x).collect();
                let out = cone.group.outputs.first().copied();
                out.and_then(|o| kernbench_compiler::datapath::affine::eval_output(func, &cone.group, &refs, o))
            };
            let Some(out) = out else {
                drop(ins);
                return self.compute_now(p, g);
            };
            pe.cone_memo[slot] = ConeMemo(Some((
                ins.into_iter().map(std::borrow::Cow::into_owned).collect(),
                out.clone(),
            )));
            outs.push(out);
        }
        Ok(outs)
    }

    /// Operations waiting in engine `e`'s queue at the issue unit's clock,
    /// counting compute scheduled ahead (which it drops once started).
    fn queued(&mut self, p: usize, e: Engine) -> usize {
        let pe = &mut self.pes[p];
        let t = pe.issue_ps;
        let eq = &mut pe.engines[e.index()];
        while eq.scheduled_starts.front().is_some_and(|s| *s <= t) {
            eq.scheduled_starts.pop_front();
        }
        eq.queue.len() + eq.scheduled_starts.len()
    }

    /// Whether engine `e`'s queue has room at the issue unit's clock; when
    /// it is full of scheduled compute, the clock moves to the time the
    /// first of it starts (a stall whose end is known). False when queued
    /// operations fill it: the issue unit must wait for one to start.
    fn make_room(&mut self, p: usize, e: Engine) -> bool {
        loop {
            if self.queued(p, e) < self.queue_depth {
                return true;
            }
            let pe = &mut self.pes[p];
            match pe.engines[e.index()].scheduled_starts.front() {
                Some(&s) => pe.issue_ps = pe.issue_ps.max(s),
                None => return false,
            }
        }
    }

    /// Issues a data-path group. Address generation with known operands
    /// is computed now at no engine time, its values ready when its
    /// operands are; a compute group (MATH, `dot`)
    /// whose operands' ready times are known and whose engine has nothing
    /// queued is scheduled now — its start is `max(issue, engine free,
    /// operands ready)` and it touches no shared state, so no event is
    /// needed; everything else is queued and started by an event.
    fn issue_group(&mut self, p: usize, g: usize) -> Result<bool, SimError> {
        let info = self.groups[g];
        let e = info.engine;
        let group = &self.plan.groups[g];
        if info.address || !info.memory {
            if let Some(ready) = self.ready_all(p, &group.inputs) {
                if info.address {
                    // The address generator makes the values once their
                    // operands are ready; the issue unit only dispatches
                    // it and goes on (an operand still being computed
                    // delays the addresses, and the operations that take
                    // them, not the issue unit).
                    let outs = self.address_now(p, g)?;
                    let at = self.dispatch_n(p, 0, group.insts.len()).max(ready);
                    for (v, x) in group.outputs.iter().zip(outs) {
                        self.pes[p].set(*v, Val::Ready { v: x, at });
                    }
                    self.advance(p);
                    return Ok(true);
                }
                if self.pes[p].engines[e.index()].queue.is_empty() && self.make_room(p, e) {
                    let outs = self.compute_now(p, g)?;
                    let t = self.dispatch_n(p, 0, group.insts.len());
                    let eq = &mut self.pes[p].engines[e.index()];
                    let start = t.max(eq.free_at_ps).max(ready);
                    let end = start + info.cost_ps;
                    eq.scheduled_starts.push_back(start);
                    self.occupy(p, e, (start, end, end), info.label);
                    let pe = &mut self.pes[p];
                    pe.last_done_ps = pe.last_done_ps.max(end);
                    for (v, x) in group.outputs.iter().zip(outs) {
                        pe.set(*v, Val::Ready { v: x, at: end });
                    }
                    self.advance(p);
                    return Ok(true);
                }
            }
        }
        if !self.make_room(p, e) {
            return Ok(self.stall(p, Stall::QueueFull(e)));
        }
        let pe = &mut self.pes[p];
        let mem_id = info.memory.then(|| pe.new_mem_op());
        let mut op = self.op_pool.take(info.label, OpKind::Group(g), mem_id);
        let moves = self.group_moves[g];
        for (k, v) in group.inputs.iter().enumerate() {
            let x = match k < 64 && moves >> k & 1 != 0 {
                true => pe.take_value(*v),
                false => pe.get(*v).clone(),
            };
            op.args.push((*v, x));
        }
        for v in &group.outputs {
            let s = Slot::new();
            pe.set(*v, Val::Pending(s.clone()));
            op.results.push(s);
        }
        let t = self.dispatch_n(p, 0, group.insts.len());
        self.enqueue(p, e, t, op);
        self.advance(p);
        Ok(true)
    }

    /// Queues an operation issued at `t`. Only a new head needs a kick (the
    /// engine moves on to later ones itself), and not before the engine
    /// is free and the operands it knows of are ready; an operand not yet
    /// produced kicks the engine when its producer ends, and a receive's
    /// message not yet sent kicks it when its send starts.
    fn enqueue(&mut self, p: usize, e: Engine, t: u64, mut op: OpBox) {
        op.issued_ps = t;
        op.program = self.pes[p].program;
        // A receive waits for its message's arrival, once known; until then
        // the send's start kicks the engine.
        let (awaits_message, arrival) = match op.kind {
            OpKind::Recv { queue, msg } => match self.queues.queues[queue as usize].arrival_ps(msg) {
                Some(a) => (None, a),
                None => (Some((queue, msg)), 0),
            },
            _ => (None, 0),
        };
        let eq = &mut self.pes[p].engines[e.index()];
        let first = eq.queue.is_empty();
        let head = first && awaits_message.is_none();
        // Not before its dispatch, nor before the engine is free.
        let not_before = t.max(eq.free_at_ps);
        if let (true, Some((queue, msg))) = (first, awaits_message) {
            // A new head that waits for its message: the send kicks it.
            self.queues.queues[queue as usize].waiting_recv = Some((msg, not_before));
        }
        let mut at = Some(not_before.max(arrival));
        for (_, v) in &op.args {
            at = match (at, v.ready_ps()) {
                (Some(a), Some(r)) => Some(a.max(r)),
                _ => None,
            };
        }
        eq.queue.push_back(op);
        if !head {
            return;
        }
        match at {
            Some(at) => self.request_kick(p, e, at),
            None => self.pes[p].wait_on_pe(e),
        }
    }

    /// The rank a send or receive talks to.
    /// The PE (launch index) a send or receive talks to; `None` while its
    /// rank operand is not computed yet.
    fn peer_rank(&mut self, p: usize, i: Inst, peer: Peer) -> Result<Option<u32>, SimError> {
        let me = self.pes[p].ctx.rank;
        let world = self.comm(p).world();
        match peer {
            Peer::Dir(d) => Ok(Some(self.pe_of_rank(p, self.comm(p).peer(me, d)))),
            Peer::Rank => {
                let v = self.func.inst(i).args[0];
                let Some((vals, ready)) = self.operands(p, &[v]) else {
                    return Ok(None);
                };
                let pe = &mut self.pes[p];
                pe.issue_ps = pe.issue_ps.max(ready);
                let dt = match self.func.ty(v).elem() {
                    Elem::Num(d) | Elem::Ptr(d) => d,
                };
                let r = elem::to_i64(dt, vals[0].scalar());
                if r < 0 || r >= world as i64 {
                    return Err(self.exec_error(
                        p,
                        i,
                        ExecErrorKind::Unsupported(format!(
                            "rank {r} is outside the communicator (world size {world})"
                        )),
                    ));
                }
                Ok(Some(self.pe_of_rank(p, r as u32)))
            }
        }
    }

    /// The queue PE `p` sends to `peer` on (`sending`) or receives from
    /// it on; `None` while a computed rank is not known yet. A direction's
    /// queues are the same all launch long: the PE keeps them.
    fn queue_with(&mut self, p: usize, i: Inst, peer: Peer, sending: bool) -> Result<Option<u32>, SimError> {
        if let Peer::Dir(d) = peer {
            let known = self.pes[p].dir_queues[sending as usize][d as usize];
            if known != u32::MAX {
                return Ok(Some(known));
            }
        }
        let Some(other) = self.peer_rank(p, i, peer)? else {
            return Ok(None);
        };
        let (src, dst) = if sending { (p as u32, other) } else { (other, p as u32) };
        let half = self.half(src, dst, sending);
        let (queue, new) = self.queue(src, dst, false, half);
        // The slots are the receiver's: counted once, by its side.
        if new && half != Half::Send {
            self.queue_slots_fit(queue, p, i)?;
        }
        if let Peer::Dir(d) = peer {
            self.pes[p].dir_queues[sending as usize][d as usize] = queue;
        }
        Ok(Some(queue))
    }

    /// A new queue `queue` into PE `dst` keeps its slots in `dst`'s TCM
    /// when that is the IPCQ's buffer space: they must fit with the slots
    /// of the queues into it so far (the launch checked one queue's of
    /// `n_slots`; one across SIPs may have more). The error names PE `p`'s
    /// send or receive `i`, which opened the queue.
    pub(super) fn queue_slots_fit(&mut self, queue: u32, p: usize, i: Inst) -> Result<(), SimError> {
        let q = &self.queues.queues[queue as usize];
        let dst = q.dst as usize;
        let queue_bytes = u64::from(q.n_slots) * self.ipcq.slot_size_bytes.0;
        if self.ipcq.buffer_space != crate::topology::Space::Tcm {
            return self.queue_slots_fit_beside_allocations(dst, queue_bytes, p, i);
        }
        let into = &mut self.queues_into[dst];
        into.0 += 1;
        into.1 += queue_bytes;
        let (queues, slots_bytes) = *into;
        let pe = self.coords[dst];
        let need_bytes = self.tcm_base_bytes[dst] + slots_bytes;
        let have_bytes = self.mem.capacity(super::Placement::Tcm(pe));
        if need_bytes <= have_bytes {
            return Ok(());
        }
        Err(SimError::TcmCapacity {
            kernel: self.func.name.clone(),
            pe,
            need_bytes,
            have_bytes,
            queues,
            cause: super::TcmCause::Queue {
                by: self.coords[p],
                rank: self.ranks[p],
                inst: i,
            },
        })
    }

    /// [`Self::queue_slots_fit`] with the IPCQ in SRAM or HBM: the slots
    /// of every queue into that memory so far must fit beside the tensors
    /// allocated there (which a launch does not change).
    fn queue_slots_fit_beside_allocations(
        &mut self,
        dst: usize,
        queue_bytes: u64,
        p: usize,
        i: Inst,
    ) -> Result<(), SimError> {
        let place = super::Placement::near(self.ipcq.buffer_space, self.coords[dst]);
        let into = self.slot_queues.entry(place).or_insert((0, 0));
        into.0 += 1;
        into.1 = into.1.saturating_add(queue_bytes);
        let (queues, slots_bytes) = *into;
        let allocated_bytes = self.mem.used(place);
        let need_bytes = allocated_bytes.saturating_add(slots_bytes);
        let have_bytes = self.mem.capacity(place);
        if need_bytes <= have_bytes {
            return Ok(());
        }
        Err(SimError::SlotCapacity {
            kernel: self.func.name.clone(),
            place,
            need_bytes,
            have_bytes,
            allocated_bytes,
            queues,
            queue_bytes,
            by: self.coords[p],
            rank: self.ranks[p],
            inst: i,
        })
    }

    fn issue_send(&mut self, p: usize, i: Inst, peer: Peer) -> Result<bool, SimError> {
        if !self.make_room(p, Engine::Send) {
            return Ok(self.stall(p, Stall::QueueFull(Engine::Send)));
        }
        let Some(queue) = self.queue_with(p, i, peer, true)? else {
            return Ok(self.stall(p, Stall::Data));
        };
        let d = self.func.inst(i);
        let value = *d.args.last().unwrap_or(&d.args[0]);
        let slots = self.message_slots(p, i, value, queue)?;
        let val = self.pes[p].get(value).clone();
        let t = self.dispatch(p, 0);
        let mut op = self.op_pool.take(i, OpKind::Send { queue, slots }, None);
        op.args.push((value, val));
        self.enqueue(p, Engine::Send, t, op);
        self.advance(p);
        Ok(true)
    }

    fn issue_recv(&mut self, p: usize, i: Inst, peer: Peer, is_async: bool) -> Result<bool, SimError> {
        if !self.make_room(p, Engine::Recv) {
            return Ok(self.stall(p, Stall::QueueFull(Engine::Recv)));
        }
        let Some(queue) = self.queue_with(p, i, peer, false)? else {
            return Ok(self.stall(p, Stall::Data));
        };
        let q = &mut self.queues.queues[queue as usize];
        let msg = q.recvs_issued;
        q.recvs_issued += 1;
        let slot = Slot::new();
        let r = self.func.inst(i).results[0];
        self.pes[p].set(r, Val::Pending(slot.clone()));
        let t = self.dispatch(p, 0);
        let mut op = self.op_pool.take(i, OpKind::Recv { queue, msg }, None);
        op.results.push(slot.clone());
        self.enqueue(p, Engine::Recv, t, op);
        if !is_async {
            self.pes[p].wait_for = Some(slot);
            self.pes[p].wait_inst = Some(i);
        }
        self.advance(p);
        Ok(true)
    }

    /// Rank `r`'s copy of a symmetric buffer address.
    fn symmetric(&self, p: usize, i: Inst, addr: u64, r: u32) -> Result<u64, SimError> {
        self.mem.symmetric_at(addr, r).ok_or_else(|| {
            self.exec_error(
                p,
                i,
                ExecErrorKind::Unsupported(format!(
                    "address {addr:#x} is not in a symmetric buffer (a sharded or replicated tensor) with a copy for rank {r}"
                )),
            )
        })
    }

    /// Rank operand `r` of instruction `i`, checked against PE `p`'s
    /// communicator.
    fn rank_in_world(&self, p: usize, i: Inst, r: i64) -> Result<u32, SimError> {
        let world = self.comm(p).world() as i64;
        if r < 0 || r >= world {
            return Err(self.exec_error(
                p,
                i,
                ExecErrorKind::Unsupported(format!("rank {r} is outside the communicator (world size {world})")),
            ));
        }
        Ok(r as u32)
    }

    /// `tl.symm_at(ptr, rank)`: the same offset in rank's copy (computed
    /// when issued: the layout of memory is fixed during a launch).
    fn symm_at(&mut self, p: usize, i: Inst) -> Result<bool, SimError> {
        let d = self.func.inst(i);
        let Some((vals, ready)) = self.operands(p, &d.args) else {
            return Ok(self.stall(p, Stall::Data));
        };
        let rank_dt = match self.func.ty(d.args[1]).elem() {
            Elem::Num(t) | Elem::Ptr(t) => t,
        };
        let r = self.rank_in_world(p, i, elem::to_i64(rank_dt, vals[1].scalar()))?;
        let out = match vals[0].tensor() {
            None => RtValue::Scalar(self.symmetric(p, i, vals[0].scalar(), r)?),
            Some(t) => {
                // A lane that no symmetric buffer holds may be one a mask
                // turns off (the pointers past the end of the data): it
                // gets an address no allocation has, which an access
                // through it reports (with a note saying where it came
                // from) only if its lane is on.
                let mut o = t.clone().into_owned();
                for k in 0..t.numel() {
                    let a = t.get_bits(k);
                    let moved = self
                        .mem
                        .symmetric_at(a, r)
                        .unwrap_or_else(|| super::memory::not_symmetric(a));
                    o.set_bits(k, moved);
                }
                RtValue::Block(std::rc::Rc::new(o))
            }
        };
        let t = self.pes[p].issue_ps.max(ready);
        let at = self.dispatch(p, t);
        self.pes[p].set(d.results[0], Val::Ready { v: out, at });
        self.advance(p);
        Ok(true)
    }

    /// `tl.notify(sig_ptr, rank, value)`: a one-element put into rank's
    /// copy of the signal word, after every earlier memory operation of
    /// this PE has finished (so it orders the puts before it).
    fn issue_notify(&mut self, p: usize, i: Inst) -> Result<bool, SimError> {
        if !self.make_room(p, Engine::Dma) {
            return Ok(self.stall(p, Stall::QueueFull(Engine::Dma)));
        }
        let d = self.func.inst(i);
        let Some((vals, ready)) = self.operands(p, &d.args) else {
            return Ok(self.stall(p, Stall::Data));
        };
        let rank_dt = match self.func.ty(d.args[1]).elem() {
            Elem::Num(t) | Elem::Ptr(t) => t,
        };
        // A dtype's size: at most 8 bytes.
        let size = match self.func.ty(d.args[0]).elem() {
            Elem::Ptr(t) | Elem::Num(t) => t.size_bytes() as u8,
        };
        let r = self.rank_in_world(p, i, elem::to_i64(rank_dt, vals[1].scalar()))?;
        let addr = self.symmetric(p, i, vals[0].scalar(), r)?;
        let mem_id = Some(self.pes[p].new_mem_op());
        let t = self.pes[p].issue_ps.max(ready);
        let t = self.dispatch(p, t);
        let kind = OpKind::Notify {
            addr,
            bits: vals[2].scalar(),
            size,
        };
        let op = self.op_pool.take(i, kind, mem_id);
        self.enqueue(p, Engine::Dma, t, op);
        self.advance(p);
        Ok(true)
    }

    /// `tl.wait_until(sig_ptr, value)`: reads the signal word at the global
    /// time the issue unit reaches it; until it holds `value` the PE waits
    /// (a notify's arrival, or one of its own stores, wakes it).
    fn wait_until(&mut self, p: usize, i: Inst) -> Result<bool, SimError> {
        let d = self.func.inst(i);
        let Some((vals, ready)) = self.operands(p, &d.args) else {
            return Ok(self.stall(p, Stall::Data));
        };
        let t = self.pes[p].issue_ps.max(ready);
        if t > self.now {
            self.pes[p].issue_ps = t;
            self.wake_issue(p);
            return Ok(false);
        }
        let dt = match self.func.ty(d.args[0]).elem() {
            Elem::Ptr(t) | Elem::Num(t) => t,
        };
        let addr = vals[0].scalar();
        if let Some(place) = self.mem.placement_of(addr).filter(|pl| self.elsewhere(pl.sip())) {
            // Its SIP's process writes it, in a window of its own.
            return Err(self.exec_error(
                p,
                i,
                ExecErrorKind::Unsupported(format!(
                    "tl.wait_until reads its signal word at {addr:#x}, in the {place}, on another SIP: in a launch \
                     over several SIPs it waits on a word of its own SIP (the one tl.notify writes into)"
                )),
            ));
        }
        let mut buf = [0u8; 8];
        let size = dt.size_bytes() as usize;
        use kernbench_compiler::datapath::Memory;
        self.mem
            .read(addr, &mut buf[..size])
            .map_err(|f| self.exec_error(p, i, ExecErrorKind::OutOfBounds(f)))?;
        let mask = if size == 8 { u64::MAX } else { (1u64 << (8 * size)) - 1 };
        if u64::from_le_bytes(buf) & mask != vals[1].scalar() & mask {
            self.signal_waiters.push(p as u32);
            self.pes[p].signal_wait = Some((addr, dt, vals[1].scalar() & mask));
            return Ok(self.stall(p, Stall::Signal));
        }
        self.pes[p].signal_wait = None;
        self.dispatch(p, t);
        self.advance(p);
        Ok(true)
    }

    /// `tl.barrier()` (instruction `i`): the PE's own operations finish
    /// (but receives, which may wait for messages sent after the barrier),
    /// then a dissemination barrier over the communicator's control queues.
    /// In round k rank r sends a token to rank r + 2^k and waits for the
    /// one from rank r - 2^k (mod the world size); after ceil(log2 world)
    /// rounds every rank has heard, directly or through others, from every
    /// rank, so none leaves before all have arrived. A token is a message
    /// of [`BARRIER_TOKEN_BYTES`] on the send engine (slots, credits and
    /// the route into the receiver's slots, as any message); the receiver
    /// notices it when it arrives, without its receive engine (whose queue
    /// may hold receives of messages sent after the barrier). Each round
    /// is entered again when its token is in: `barrier_round` counts them.
    fn barrier(&mut self, p: usize, i: Inst) -> Result<bool, SimError> {
        let round = self.pes[p].barrier_round;
        if round == 0 {
            if !self.pes[p].drained_but_receives() {
                return Ok(self.stall(p, Stall::Drain));
            }
            let pe = &mut self.pes[p];
            pe.issue_ps = pe.issue_ps.max(pe.last_done_ps);
        }
        let rounds = barrier_rounds(self.comm(p).world());
        if u32::from(round) == rounds {
            // Every token is in.
            self.pes[p].barrier_round = 0;
            self.dispatch(p, 0);
            self.advance(p);
            return Ok(true);
        }
        if !self.make_room(p, Engine::Send) {
            return Ok(self.stall(p, Stall::QueueFull(Engine::Send)));
        }
        let (to, from) = self.barrier_peers(p, round);
        let half = self.half(p as u32, to, true);
        let (out, _) = self.queue(p as u32, to, true, half);
        let t = self.dispatch(p, 0);
        let op = self.op_pool.take(i, OpKind::Send { queue: out, slots: 1 }, None);
        self.enqueue(p, Engine::Send, t, op);
        // The token to wait for: here already, or filled in by its send.
        let half = self.half(from, p as u32, false);
        let (inq, _) = self.queue(from, p as u32, true, half);
        let q = &mut self.queues.queues[inq as usize];
        let msg = q.recvs_issued;
        q.recvs_issued += 1;
        let token = Slot::new();
        match q.arrival_ps(msg) {
            Some(arrived) => {
                // Noticed when it is in and this rank has come for it.
                let taken = arrived.max(t);
                token.ready_ps.set(taken);
                self.slots_freed(inq, msg, taken);
            }
            None => q.token_waiter = Some((msg, token.clone())),
        }
        let pe = &mut self.pes[p];
        pe.wait_for = Some(token);
        pe.wait_inst = Some(i);
        pe.barrier_round = round + 1;
        Ok(true)
    }

    /// Side `half` of the queue from PE `src` to PE `dst` (see
    /// [`super::ipcq::Queues::get`]), with more slots when the IPCQ gives
    /// queues across SIPs more.
    pub(super) fn queue(&mut self, src: u32, dst: u32, control: bool, half: Half) -> (u32, bool) {
        let across_sips = self.coords[src as usize].sip != self.coords[dst as usize].sip;
        self.queues.get(src, dst, control, half, across_sips)
    }

    /// The side of queue `src` → `dst` that PE `src` (`sending`) or `dst`
    /// keeps: the whole queue when both are in one logical process.
    fn half(&self, src: u32, dst: u32, sending: bool) -> Half {
        if self.lp_of[src as usize] == self.lp_of[dst as usize] {
            Half::Both
        } else if sending {
            Half::Send
        } else {
            Half::Recv
        }
    }

    /// The ranks PE `p` sends its token of barrier round `round` to and
    /// receives one from, as PE indices.
    pub(super) fn barrier_peers(&self, p: usize, round: u8) -> (u32, u32) {
        let world = self.comm(p).world();
        let me = self.ranks[p];
        let step = (1u64 << round) % u64::from(world);
        let step = step as u32;
        (
            self.pe_of_rank(p, (me + step) % world),
            self.pe_of_rank(p, (me + world - step) % world),
        )
    }

    /// The PE (its index) of rank `r` of PE `p`'s communicator.
    pub(super) fn pe_of_rank(&self, p: usize, r: u32) -> u32 {
        let base = self.group_base[self.group_of[p] as usize];
        self.pe_at[base + r as usize]
    }

    // ----- control flow -----

    fn bind(&mut self, p: usize, region: Region, vals: impl IntoIterator<Item = Val>) {
        let params = &self.func.region(region).params;
        let pe = &mut self.pes[p];
        for (v, x) in params.iter().zip(vals) {
            pe.set(*v, x);
        }
    }

    fn set_results(&mut self, p: usize, results: &[Value], vals: Carried) {
        let pe = &mut self.pes[p];
        for (r, x) in results.iter().zip(vals) {
            pe.set(*r, x);
        }
    }

    /// The values of `args`, to be moved into a region's parameters or an
    /// instruction's results (no allocation for up to eight).
    fn vals(&self, p: usize, args: &[Value]) -> Carried {
        args.iter().map(|a| self.pes[p].get(*a).clone()).collect()
    }

    /// Control flow; false when it stalled on a condition's data.
    fn control(&mut self, p: usize, i: Inst) -> Result<bool, SimError> {
        let func = self.func;
        let d = func.inst(i);
        // Conditions and loop bounds must be known; carried values are
        // passed along as they are.
        let needs: &[Value] = match d.op {
            Op::If | Op::Condition => &d.args[..1],
            Op::For => &d.args[..3],
            _ => &[],
        };
        // Their bits (first element of a block), and when the last is ready.
        let mut vals = [0u64; 3];
        let mut ready = 0;
        for (k, a) in needs.iter().enumerate() {
            let v = self.pes[p].get(*a);
            match (v.ready_ps(), v.data()) {
                (Some(t), Some(x)) => {
                    vals[k] = x.scalar();
                    ready = ready.max(t);
                }
                _ => return Ok(self.stall(p, Stall::Data)),
            }
        }
        let t = self.pes[p].issue_ps.max(ready);
        self.dispatch(p, t);
        match d.op {
            Op::If => {
                self.advance(p);
                let region = d.regions[if vals[0] & 1 != 0 { 0 } else { 1 }];
                self.pes[p].frames.push(Frame {
                    region,
                    idx: 0,
                    kind: FrameKind::If { inst: i },
                });
            }
            Op::For => {
                self.advance(p);
                let dt = match func.ty(d.args[0]).elem() {
                    Elem::Num(t) => t,
                    Elem::Ptr(_) => DType::I64,
                };
                let int = |b: u64| elem::to_i64(dt, b);
                let (lb, ub, step) = (int(vals[0]), int(vals[1]), int(vals[2]));
                if step == 0 {
                    return Err(self.exec_error(
                        p,
                        i,
                        ExecErrorKind::Unsupported("`range` step is zero at run time".into()),
                    ));
                }
                let carried = self.vals(p, &d.args[3..]);
                if iterates(lb, ub, step) {
                    let region = d.regions[0];
                    self.enter_loop(p, region, dt, lb, carried);
                    self.pes[p].frames.push(Frame {
                        region,
                        idx: 0,
                        kind: FrameKind::For {
                            inst: i,
                            iv: lb,
                            ub,
                            step,
                            dt,
                        },
                    });
                } else {
                    self.set_results(p, &d.results, carried);
                }
            }
            Op::While => {
                self.advance(p);
                let carried = self.vals(p, &d.args);
                let region = d.regions[0];
                self.bind(p, region, carried);
                self.pes[p].frames.push(Frame {
                    region,
                    idx: 0,
                    kind: FrameKind::WhileBefore { inst: i },
                });
            }
            Op::Yield if self.next_iteration_in_order(p, i) || self.end_if(p, i) => {}
            Op::Yield | Op::Continue => {
                let carried = self.vals(p, &d.args);
                self.loop_next(p, carried, d.op == Op::Continue);
            }
            Op::Break => {
                let carried = self.vals(p, &d.args);
                self.loop_break(p, carried);
            }
            Op::Condition => {
                let Some(Frame {
                    kind: FrameKind::WhileBefore { inst },
                    region,
                    ..
                }) = self.pes[p].frames.pop()
                else {
                    return Ok(true);
                };
                let carried = self.vals(p, &func.region(region).params);
                let w = func.inst(inst);
                if vals[0] & 1 != 0 {
                    let body = w.regions[1];
                    self.bind(p, body, carried);
                    self.pes[p].frames.push(Frame {
                        region: body,
                        idx: 0,
                        kind: FrameKind::WhileBody { inst },
                    });
                } else {
                    self.set_results(p, &w.results, carried);
                }
            }
            Op::Return => self.pes[p].frames.clear(),
            _ => self.advance(p),
        }
        Ok(true)
    }

    /// `yield` at the end of a `for` body that goes on to the next
    /// iteration: the carried values go straight into the body's
    /// parameters (when `in_order_yields` allows), then the induction
    /// variable. False, doing nothing, in every other case.
    fn next_iteration_in_order(&mut self, p: usize, i: Inst) -> bool {
        if !self.in_order_yields[i.as_u32() as usize] {
            return false;
        }
        let func = self.func;
        let pe = &mut self.pes[p];
        let Some(Frame {
            region,
            kind: FrameKind::For { iv, ub, step, dt, .. },
            ..
        }) = pe.frames.last()
        else {
            return false;
        };
        let (region, next) = (*region, iv.saturating_add(*step));
        if !iterates(next, *ub, *step) {
            return false;
        }
        let dt = *dt;
        let params = &func.region(region).params;
        pe.copy_in_order(
            &func.inst(i).args,
            params.get(1..).unwrap_or(&[]),
            self.yield_moves[i.as_u32() as usize],
        );
        if let Some(&iv_param) = params.first() {
            let at = pe.issue_ps;
            pe.set(iv_param, induction(dt, next, at));
        }
        if let Some(Frame {
            idx,
            kind: FrameKind::For { iv, .. },
            ..
        }) = pe.frames.last_mut()
        {
            *iv = next;
            *idx = 0;
        }
        true
    }

    /// `yield` ending an `if`: its values go straight to the `if`'s
    /// results (never among them). False, doing nothing, when the
    /// innermost frame is not an `if`.
    fn end_if(&mut self, p: usize, i: Inst) -> bool {
        let func = self.func;
        let pe = &mut self.pes[p];
        let Some(Frame {
            kind: FrameKind::If { inst },
            ..
        }) = pe.frames.last()
        else {
            return false;
        };
        let results = &func.inst(*inst).results;
        pe.frames.pop();
        pe.copy_in_order(&func.inst(i).args, results, self.yield_moves[i.as_u32() as usize]);
        true
    }

    fn enter_loop(&mut self, p: usize, region: Region, dt: DType, iv: i64, carried: Carried) {
        let at = self.pes[p].issue_ps;
        self.bind(p, region, std::iter::once(induction(dt, iv, at)).chain(carried));
    }

    /// `yield`/`continue`: end an `if`, or start a loop's next iteration.
    fn loop_next(&mut self, p: usize, carried: Carried, is_continue: bool) {
        let func = self.func;
        if is_continue {
            // `continue` may sit inside `if`s: leave them first.
            while matches!(self.pes[p].frames.last().map(|f| &f.kind), Some(FrameKind::If { .. })) {
                self.pes[p].frames.pop();
            }
        }
        let Some(frame) = self.pes[p].frames.pop() else { return };
        match frame.kind {
            FrameKind::If { inst } => self.set_results(p, &func.inst(inst).results, carried),
            FrameKind::For { inst, iv, ub, step, dt } => {
                let next = iv.saturating_add(step);
                if iterates(next, ub, step) {
                    self.enter_loop(p, frame.region, dt, next, carried);
                    self.pes[p].frames.push(Frame {
                        region: frame.region,
                        idx: 0,
                        kind: FrameKind::For {
                            inst,
                            iv: next,
                            ub,
                            step,
                            dt,
                        },
                    });
                } else {
                    self.set_results(p, &func.inst(inst).results, carried);
                }
            }
            FrameKind::WhileBody { inst } => {
                let before = func.inst(inst).regions[0];
                self.bind(p, before, carried);
                self.pes[p].frames.push(Frame {
                    region: before,
                    idx: 0,
                    kind: FrameKind::WhileBefore { inst },
                });
            }
            FrameKind::Body | FrameKind::WhileBefore { .. } => {}
        }
    }

    fn loop_break(&mut self, p: usize, carried: Carried) {
        let func = self.func;
        while let Some(frame) = self.pes[p].frames.pop() {
            if let FrameKind::For { inst, .. } | FrameKind::WhileBody { inst } = frame.kind {
                self.set_results(p, &func.inst(inst).results, carried);
                return;
            }
        }
    }
}

/// Whether a `range` loop with bound `ub` and step `step` (not zero) runs
/// an iteration with induction variable `iv`.
fn iterates(iv: i64, ub: i64, step: i64) -> bool {
    (step > 0 && iv < ub) || (step < 0 && iv > ub)
}

/// The value of a loop's induction variable `iv` (of dtype `dt`), ready at
/// `at_ps`.
fn induction(dt: DType, iv: i64, at_ps: u64) -> Val {
    Val::Ready {
        v: RtValue::Scalar(elem::from_i64(dt, iv)),
        at: at_ps,
    }
}

/// Whether two operands are certainly the same value: equal scalars, the
/// same block (by identity: the memo holding it keeps its address from
/// being reused), or equal formulas.
fn same_value(a: &RtValue, b: &RtValue) -> bool {
    use std::rc::Rc;
    match (a, b) {
        (RtValue::Scalar(x), RtValue::Scalar(y)) => x == y,
        (RtValue::Block(x), RtValue::Block(y)) => Rc::ptr_eq(x, y),
        (RtValue::Affine(x), RtValue::Affine(y)) => Rc::ptr_eq(x, y) || x == y,
        (RtValue::Mask(x), RtValue::Mask(y)) => Rc::ptr_eq(x, y) || x == y,
        _ => false,
    }
}

/// Rounds of a dissemination barrier among `world` ranks: ceil(log2 world).
pub(super) fn barrier_rounds(world: u32) -> u32 {
    world.max(1).next_power_of_two().trailing_zeros()
}

/// Bytes of a barrier token: one word written into a slot of the
/// receiver's control queue.
pub(super) const BARRIER_TOKEN_BYTES: u64 = 8;

/// When tracing: a scalar instruction `inst` whose operands are ready only
/// at `ready`, after the issue unit's clock, stalls it until then.
#[cold]
#[inline(never)]
fn note_scalar_wait(pe: &mut super::pe::PeState, inst: Inst, ready: u64) {
    if ready > pe.issue_ps {
        if let Some(stalls) = pe.issue_stalls.as_mut() {
            stalls.push((pe.issue_ps, inst, Stall::Data.describe()));
        }
    }
}
