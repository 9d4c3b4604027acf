//! Execution plans: which instructions run on the executor (scalars,
//! control flow, communication) and which on the data path, grouped.
//!
//! With fusion, consecutive elementwise block operations over one
//! iteration space form one group — compiled by the JIT into one loop —
//! together with their loads. A store ends a group only if the group has
//! no load (a fused loop would interleave the store with later lanes'
//! loads, which program order forbids); otherwise it gets a group of its
//! own, which recomputes the load-free elementwise values it needs
//! (pointers, masks) instead of reading them back as blocks. A reduction
//! of a whole operand (sum/max/min) may end a group over the operand's
//! space; other reductions, `dot`, `trans` and `gemm` are groups of their
//! own;
//! `reshape` is a relabelling the executor does itself. Without fusion
//! every data-path instruction is its own group. [`Fusion::Compute`]
//! fuses elementwise chains but keeps every memory operation alone, so
//! that each group runs on one engine: the simulator's plan, which then
//! splits each group into its independent parts
//! ([`Plan::split_independent`]).

use crate::ir::{Function, Inst, Op, ReduceOp, Region, Value};
use cranelift_entity::SecondaryMap;
use std::collections::HashSet;

pub type GroupId = usize;

/// Data-path instructions executed as one unit.
#[derive(Clone, Debug, Default)]
pub struct Group {
    pub insts: Vec<Inst>,
    /// Values defined outside and read inside, in first-use order.
    pub inputs: Vec<Value>,
    /// Values defined inside and needed after the group.
    pub outputs: Vec<Value>,
}

/// What the executor does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A scalar instruction, communication, or an effect (assert/print).
    Inst(Inst),
    /// A reshape: the same elements under a new shape.
    Relabel(Inst),
    Group(GroupId),
    /// `for`, `if`, `while`, or a terminator.
    Control(Inst),
}

#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub groups: Vec<Group>,
    pub steps: SecondaryMap<Region, Vec<Step>>,
}

/// How an instruction participates in fusion.
#[derive(PartialEq, Eq)]
enum Kind {
    /// Elementwise over its result's shape; may join a group.
    Elementwise,
    /// A sum/max/min over every element of its operand: may end a group
    /// over the operand's space (one loop computes and reduces).
    FullReduce,
    Load,
    Store,
    /// A data-path operation that is a group of its own.
    Alone,
    Relabel,
    Executor,
    Control,
}

fn kind(func: &Function, i: Inst) -> Kind {
    let d = func.inst(i);
    let block_result = d.results.first().is_some_and(|r| func.ty(*r).is_block());
    match &d.op {
        Op::For | Op::If | Op::While | Op::Yield | Op::Break | Op::Continue | Op::Return | Op::Condition => {
            Kind::Control
        }
        Op::Load { .. } => Kind::Load,
        Op::Store { .. } => Kind::Store,
        Op::Reduce {
            op: ReduceOp::Sum | ReduceOp::Max | ReduceOp::Min,
            axis,
            ..
        } if axis.is_none() || func.ty(d.args[0]).shape().len() == 1 => Kind::FullReduce,
        Op::AtomicAdd { .. } | Op::Reduce { .. } | Op::Dot { .. } | Op::Trans { .. } | Op::Gemm { .. } => Kind::Alone,
        Op::Reshape => Kind::Relabel,
        Op::Arange { .. } | Op::Splat | Op::Broadcast => Kind::Elementwise,
        Op::Binary(_) | Op::Cmp(_) | Op::Unary(_) | Op::Cast { .. } | Op::Select | Op::Fma | Op::PtrAdd
            if block_result =>
        {
            Kind::Elementwise
        }
        _ => Kind::Executor,
    }
}

/// Whether an executor instruction can fail or has an effect (so it keeps
/// its place in program order relative to data-path groups).
fn observable(op: &Op) -> bool {
    !op.is_pure_and_infallible()
}

/// The iteration space of an elementwise or memory instruction.
fn space(func: &Function, i: Inst) -> Vec<u64> {
    let d = func.inst(i);
    match (&d.op, d.results.first()) {
        (Op::Store { .. } | Op::Reduce { .. }, _) => {
            d.args.first().map(|a| func.ty(*a).shape().to_vec()).unwrap_or_default()
        }
        (_, Some(r)) => func.ty(*r).shape().to_vec(),
        _ => Vec::new(),
    }
}

/// How a plan groups instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fusion {
    /// Every data-path instruction is a group of its own.
    None,
    /// Elementwise chains with their loads (and a closing store or
    /// whole-operand reduction): the fastest functional execution.
    Full,
    /// Elementwise chains (and a closing whole-operand reduction) only:
    /// memory operations stay alone, so a group runs on one engine. The
    /// simulator's plan.
    Compute,
}

struct Planner<'f> {
    func: &'f Function,
    mode: Fusion,
    plan: Plan,
    /// Every use of each value, to compute group outputs.
    uses: SecondaryMap<Value, Vec<Inst>>,
}

/// Plans `func`'s execution; `fuse` groups elementwise chains with their
/// loads ([`Fusion::Full`]), otherwise nothing is grouped.
pub fn plan(func: &Function, fuse: bool) -> Plan {
    plan_with(func, if fuse { Fusion::Full } else { Fusion::None })
}

/// Plans `func`'s execution with the given fusion.
pub fn plan_with(func: &Function, mode: Fusion) -> Plan {
    let mut p = Planner {
        func,
        mode,
        plan: Plan::default(),
        uses: uses_of(func),
    };
    p.region(func.body);
    p.plan
}

impl Planner<'_> {
    fn region(&mut self, r: Region) {
        let insts = self.func.region(r).insts.clone();
        let mut steps = Vec::new();
        // The open group: members, their shape, whether it has a load.
        let mut open: Vec<Inst> = Vec::new();
        let mut open_space: Vec<u64> = Vec::new();
        let mut open_has_load = false;
        for i in insts {
            let k = kind(self.func, i);
            let fusible = match self.mode {
                Fusion::None => false,
                Fusion::Full => matches!(k, Kind::Elementwise | Kind::Load | Kind::Store | Kind::FullReduce),
                Fusion::Compute => matches!(k, Kind::Elementwise | Kind::FullReduce),
            };
            if !open.is_empty()
                && self.mode == Fusion::Full
                && k == Kind::Store
                && open_has_load
                && space(self.func, i) == open_space
            {
                // The store cannot join a group with loads, but the pure
                // elementwise values it needs (pointers, mask) are
                // recomputed in its own group rather than written out as
                // blocks for it to read back.
                let remat = self.rematerializable(&open, i);
                let store_group: Vec<Inst> = remat.into_iter().chain([i]).collect();
                let g = self.group_serving(std::mem::take(&mut open), &store_group);
                steps.push(Step::Group(g));
                let g = self.group_serving(store_group, &[]);
                // Whatever else uses the recomputed values reads the first
                // group's outputs.
                self.plan.groups[g].outputs.clear();
                steps.push(Step::Group(g));
                open_has_load = false;
                continue;
            }
            if !open.is_empty() {
                let same_space = space(self.func, i) == open_space;
                let joins = fusible && same_space && !(k == Kind::Store && open_has_load);
                let uses_open = self
                    .func
                    .inst(i)
                    .args
                    .iter()
                    .any(|a| open.iter().any(|o| self.func.inst(*o).results.contains(a)));
                // An executor step that can fail or be observed must not
                // run before group members that precede it in the program.
                let ordered = k == Kind::Executor && observable(&self.func.inst(i).op);
                if !joins && (k != Kind::Executor || uses_open || ordered) {
                    self.close(&mut open, &mut steps);
                    open_has_load = false;
                }
            }
            match k {
                Kind::Executor => steps.push(Step::Inst(i)),
                Kind::Relabel => steps.push(Step::Relabel(i)),
                Kind::Control => {
                    for &sub in &self.func.inst(i).regions.clone() {
                        self.region(sub);
                    }
                    steps.push(Step::Control(i));
                }
                Kind::Alone => {
                    let g = self.group(vec![i]);
                    steps.push(Step::Group(g));
                }
                _ if !fusible || (k == Kind::FullReduce && open.is_empty()) => {
                    let g = self.group(vec![i]);
                    steps.push(Step::Group(g));
                }
                _ => {
                    if open.is_empty() {
                        open_space = space(self.func, i);
                    }
                    open.push(i);
                    open_has_load |= k == Kind::Load;
                    if matches!(k, Kind::Store | Kind::FullReduce) {
                        self.close(&mut open, &mut steps);
                        open_has_load = false;
                    }
                }
            }
        }
        self.close(&mut open, &mut steps);
        self.plan.steps[r] = steps;
    }

    fn close(&mut self, open: &mut Vec<Inst>, steps: &mut Vec<Step>) {
        if open.is_empty() {
            return;
        }
        let g = self.group(std::mem::take(open));
        steps.push(Step::Group(g));
    }

    /// The members of `open` that `store` needs and that do not depend on
    /// a load of `open` (pure elementwise values), in program order.
    fn rematerializable(&self, open: &[Inst], store: Inst) -> Vec<Inst> {
        let producer = |v: Value| open.iter().copied().find(|o| self.func.inst(*o).results.contains(&v));
        let mut after_load: HashSet<Inst> = HashSet::new();
        for &o in open {
            let d = self.func.inst(o);
            if matches!(d.op, Op::Load { .. })
                || d.args
                    .iter()
                    .any(|a| producer(*a).is_some_and(|p| after_load.contains(&p)))
            {
                after_load.insert(o);
            }
        }
        let mut needed: HashSet<Inst> = HashSet::new();
        let mut work: Vec<Value> = self.func.inst(store).args.clone();
        while let Some(v) = work.pop() {
            if let Some(p) = producer(v) {
                if kind(self.func, p) == Kind::Elementwise && !after_load.contains(&p) && needed.insert(p) {
                    work.extend(self.func.inst(p).args.iter().copied());
                }
            }
        }
        open.iter().copied().filter(|o| needed.contains(o)).collect()
    }

    fn group(&mut self, insts: Vec<Inst>) -> GroupId {
        self.group_serving(insts, &[])
    }

    /// A group of `insts`, serving `next` (see [`make_group`]).
    fn group_serving(&mut self, insts: Vec<Inst>, next: &[Inst]) -> GroupId {
        let g = make_group(self.func, &self.uses, insts, next);
        self.plan.groups.push(g);
        self.plan.groups.len() - 1
    }
}

/// Every use of each value of `func`.
fn uses_of(func: &Function) -> SecondaryMap<Value, Vec<Inst>> {
    let mut uses: SecondaryMap<Value, Vec<Inst>> = SecondaryMap::new();
    for (i, d) in func.insts.iter() {
        for a in &d.args {
            uses[*a].push(i);
        }
    }
    uses
}

/// A group of `insts`. Its outputs are the results used outside it,
/// except by members of `next`, a group that recomputes them.
fn make_group(func: &Function, uses: &SecondaryMap<Value, Vec<Inst>>, insts: Vec<Inst>, next: &[Inst]) -> Group {
    let members: HashSet<Inst> = insts.iter().copied().collect();
    let defined: HashSet<Value> = insts.iter().flat_map(|i| func.inst(*i).results.clone()).collect();
    let mut inputs = Vec::new();
    for &i in &insts {
        for &a in &func.inst(i).args {
            if !defined.contains(&a) && !inputs.contains(&a) {
                inputs.push(a);
            }
        }
    }
    let mut outputs = Vec::new();
    for &i in &insts {
        let recomputed = next.contains(&i);
        for &r in &func.inst(i).results {
            if uses[r]
                .iter()
                .any(|u| !(members.contains(u) || (recomputed && next.contains(u))))
            {
                outputs.push(r);
            }
        }
    }
    Group { insts, inputs, outputs }
}

impl Plan {
    /// Splits every group into its independent parts: members joined by
    /// a value one makes and another takes (directly or through other
    /// members) stay together; each such part becomes a group, in the
    /// order of its first member, which cannot change a result. A group
    /// of one part is left as it is.
    ///
    /// Why: fusion joins every elementwise instruction of one iteration
    /// space, related or not, and the simulator runs a group as one
    /// operation that starts when all its inputs are ready and whose
    /// results are all ready when it ends. Apart, each starts when its
    /// own operands are (DESIGN §2's scoreboard): an `arange` for
    /// addresses fused beside a combine of received data would otherwise
    /// make the load it addresses wait for the receive, and a computation
    /// on data already there would wait for a load it does not use.
    pub fn split_independent(&mut self, func: &Function) {
        let uses = uses_of(func);
        let mut groups = Vec::with_capacity(self.groups.len());
        // Old group id to its new ids, in order.
        let mut renumbered: Vec<Vec<GroupId>> = Vec::with_capacity(self.groups.len());
        for g in std::mem::take(&mut self.groups) {
            let parts = independent_parts(func, &g.insts);
            if parts.len() == 1 {
                renumbered.push(vec![groups.len()]);
                groups.push(g);
                continue;
            }
            renumbered.push((groups.len()..groups.len() + parts.len()).collect());
            groups.extend(parts.into_iter().map(|insts| make_group(func, &uses, insts, &[])));
        }
        self.groups = groups;
        for (_, steps) in self.steps.iter_mut() {
            *steps = steps
                .iter()
                .flat_map(|s| match *s {
                    Step::Group(g) => renumbered[g].iter().map(|&n| Step::Group(n)).collect(),
                    other => vec![other],
                })
                .collect();
        }
    }
}

/// `insts` (one group's members, in program order) in parts that share no
/// value, each in program order, the parts ordered by their first member.
fn independent_parts(func: &Function, insts: &[Inst]) -> Vec<Vec<Inst>> {
    // Union-find over member positions, joined along each value a member
    // takes from another.
    let mut parent: Vec<usize> = (0..insts.len()).collect();
    fn root(parent: &mut [usize], mut k: usize) -> usize {
        while parent[k] != k {
            parent[k] = parent[parent[k]];
            k = parent[k];
        }
        k
    }
    for (k, &i) in insts.iter().enumerate() {
        for a in &func.inst(i).args {
            let maker = insts[..k].iter().position(|m| func.inst(*m).results.contains(a));
            if let Some(m) = maker {
                let (rk, rm) = (root(&mut parent, k), root(&mut parent, m));
                parent[rk.max(rm)] = rk.min(rm);
            }
        }
    }
    let mut parts: Vec<(usize, Vec<Inst>)> = Vec::new();
    for (k, &i) in insts.iter().enumerate() {
        let r = root(&mut parent, k);
        match parts.iter_mut().find(|(pr, _)| *pr == r) {
            Some((_, members)) => members.push(i),
            None => parts.push((r, vec![i])),
        }
    }
    parts.into_iter().map(|(_, members)| members).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lower(src: &str) -> Function {
        let mut s = crate::sema::Session::new(crate::sema::Options::default());
        s.add_file("t.tl", None, src.to_string());
        s.lower("k").1.expect("lowers")
    }

    fn ops(func: &Function, g: &Group) -> Vec<String> {
        g.insts.iter().map(|i| func.inst(*i).op.mnemonic()).collect()
    }

    /// Two chains of one space fused into one group (the store's pointers
    /// and the multiply it stores) become a group each, in program order,
    /// each handing on what the store takes. Groups of one part (the
    /// load's pointers) are left alone.
    #[test]
    fn independent_parts_of_a_group_are_split() {
        let f = lower(
            "@kernel\ndef k(x: ptr[f32], y: ptr[f32]):\n    offs = tl.arange(0, 64)\n    \
             a = tl.load(x + offs)\n    tl.store(y + offs, a * 2.0)\n",
        );
        let mut plan = plan_with(&f, Fusion::Compute);
        let before: Vec<Vec<String>> = plan.groups.iter().map(|g| ops(&f, g)).collect();
        plan.split_independent(&f);
        let after: Vec<Vec<String>> = plan.groups.iter().map(|g| ops(&f, g)).collect();
        let mixed = before
            .iter()
            .position(|g| g.contains(&"mul".to_string()))
            .expect("a chain with the mul");
        assert_eq!(before[mixed], ["splat", "ptr_add", "splat", "mul"], "{before:?}");
        assert_eq!(after.len(), before.len() + 1, "{before:?} -> {after:?}");
        assert_eq!(after[..mixed], before[..mixed]);
        assert_eq!(after[mixed], ["splat", "ptr_add"], "{after:?}");
        assert_eq!(after[mixed + 1], ["splat", "mul"], "{after:?}");
        let steps: Vec<GroupId> = plan.steps[f.body]
            .iter()
            .filter_map(|s| match s {
                Step::Group(g) => Some(*g),
                _ => None,
            })
            .collect();
        assert_eq!(
            steps,
            (0..after.len()).collect::<Vec<_>>(),
            "every group once, in order"
        );
        let store = plan.groups.last().expect("the store");
        for part in [&plan.groups[mixed], &plan.groups[mixed + 1]] {
            assert_eq!(part.outputs.len(), 1, "{part:?}");
            assert!(store.inputs.contains(&part.outputs[0]), "{part:?} feeds {store:?}");
        }
    }

    /// Members joined through another member stay one group: `exp(a)` and
    /// `r * 3` both feed the `add` (the store's pointers, fused beside
    /// them, go apart).
    #[test]
    fn parts_joined_through_a_member_stay_one_group() {
        let f = lower(
            "@kernel\ndef k(x: ptr[f32], y: ptr[f32]):\n    r = tl.arange(0, 64)\n    a = tl.load(x + r)\n    \
             tl.store(y + r, tl.exp(a) + r.to(tl.float32) * 3.0)\n",
        );
        let mut plan = plan_with(&f, Fusion::Compute);
        let with_exp = |p: &Plan| {
            p.groups
                .iter()
                .find(|g| ops(&f, g).contains(&"exp".to_string()))
                .map(|g| ops(&f, g))
        };
        let before = with_exp(&plan);
        plan.split_independent(&f);
        let after = with_exp(&plan);
        assert_eq!(
            before.as_deref(),
            Some(&["splat", "ptr_add", "exp", "cast", "splat", "mul", "add"].map(String::from)[..])
        );
        assert_eq!(
            after.as_deref(),
            Some(&["exp", "cast", "splat", "mul", "add"].map(String::from)[..])
        );
    }
}
