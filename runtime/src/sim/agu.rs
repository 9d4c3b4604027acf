//! Address generation: which block values only ever serve as addresses or
//! masks of memory operations.
//!
//! `tl.load(x + offs, mask=offs < n)` computes a block of pointers and a
//! block of booleans before the transfer. A DMA engine generates such
//! address streams and predicates itself, so charging them to the MATH
//! engine (`ceil(numel / lanes)` cycles each) would make every masked load
//! cost several vector operations. The simulator therefore treats an
//! integer, pointer or boolean elementwise block operation (`arange`,
//! `splat`, `broadcast`, pointer and integer arithmetic, comparisons,
//! `&`/`|`, …) whose result reaches, through such operations and loop-
//! carried values only, nothing but the pointer and mask operands of
//! loads, stores and atomics (or a load's `other=` fill value, a splat),
//! possibly through a `tl.symm_at` (which translates pointers at issue), as
//! *address generation*: it is computed when
//! issued (its operands being known), at no engine time. Anything else —
//! an index block that is also stored, or an address computed from loaded
//! data — runs on the MATH engine at its cost.
//!
//! [`cones`] splits such a group, when every member has a formula, into
//! one cone per output: the issue unit evaluates each symbolically and
//! reuses it while its inputs stay the same.

use kernbench_compiler::datapath::{affine, plan_with, Fusion, Group, Plan};
use kernbench_compiler::ir::{BinaryOp, Function, Inst, Op, Region, UnaryOp, Value};
use kernbench_compiler::sema::types::Elem;
use std::collections::HashSet;

struct UnionFind(Vec<u32>);

impl UnionFind {
    fn find(&mut self, x: u32) -> u32 {
        let mut r = x;
        while self.0[r as usize] != r {
            r = self.0[r as usize];
        }
        let mut y = x;
        while self.0[y as usize] != r {
            let next = self.0[y as usize];
            self.0[y as usize] = r;
            y = next;
        }
        r
    }

    fn union(&mut self, a: Value, b: Value) {
        let (ra, rb) = (self.find(a.as_u32()), self.find(b.as_u32()));
        if ra != rb {
            self.0[ra as usize] = rb;
        }
    }
}

/// Whether `i` is an operation whose block result may be an address.
fn candidate_op(func: &Function, i: Inst) -> bool {
    let d = func.inst(i);
    let Some(&r) = d.results.first() else { return false };
    let ty = func.ty(r);
    if !ty.is_block() {
        return false;
    }
    let integral = match ty.elem() {
        Elem::Ptr(_) => true,
        Elem::Num(t) => !t.is_float(),
    };
    let args_integral = d.args.iter().all(|a| match func.ty(*a).elem() {
        Elem::Ptr(_) => true,
        Elem::Num(t) => !t.is_float(),
    });
    // A splat or broadcast of a fill value (`other=`) is part of the load's
    // descriptor, whatever its dtype.
    if matches!(d.op, Op::Splat | Op::Broadcast | Op::Reshape) {
        return true;
    }
    integral
        && args_integral
        && match &d.op {
            Op::Arange { .. } | Op::Splat | Op::Broadcast | Op::Reshape | Op::PtrAdd | Op::Cmp(_) | Op::Select => true,
            Op::Cast { .. } => true,
            Op::Unary(UnaryOp::Not | UnaryOp::Invert | UnaryOp::Neg | UnaryOp::Abs) => true,
            Op::Binary(b) => !matches!(b, BinaryOp::Div | BinaryOp::FloorDiv | BinaryOp::Mod),
            _ => false,
        }
}

/// Operand positions of a memory operation that are addresses, masks or a
/// load's fill value.
fn address_operand(op: &Op, k: usize) -> bool {
    match op {
        Op::Load { .. } => k <= 2,
        Op::Store { has_mask } | Op::AtomicAdd { has_mask } => k == 0 || (*has_mask && k == 2),
        _ => false,
    }
}

/// The block values that only feed addresses and masks.
pub fn address_values(func: &Function) -> HashSet<Value> {
    let n = func.values.len();
    let mut uf = UnionFind((0..n as u32).collect());
    // Values defined by control flow (region parameters, results): they
    // only pass values along.
    let mut transparent = vec![false; n];
    let mut candidate = vec![false; n];
    for (i, d) in func.insts.iter() {
        if candidate_op(func, i) {
            for r in &d.results {
                candidate[r.as_u32() as usize] = true;
            }
        }
    }
    // Unite the values that flow into each other through control flow.
    fn walk(
        func: &Function,
        r: Region,
        owner: Option<Inst>,
        loops: &mut Vec<Inst>,
        uf: &mut UnionFind,
        transparent: &mut [bool],
    ) {
        for &i in &func.region(r).insts {
            let d = func.inst(i);
            let carried_of = |l: Inst| -> Vec<Vec<Value>> {
                // For each carried slot: the values that hold it.
                let ld = func.inst(l);
                match ld.op {
                    Op::For => {
                        let params = &func.region(ld.regions[0]).params;
                        (0..ld.results.len())
                            .map(|k| vec![ld.args[3 + k], params[1 + k], ld.results[k]])
                            .collect()
                    }
                    Op::While => {
                        let (b, body) = (&func.region(ld.regions[0]).params, &func.region(ld.regions[1]).params);
                        (0..ld.results.len())
                            .map(|k| vec![ld.args[k], b[k], body[k], ld.results[k]])
                            .collect()
                    }
                    _ => Vec::new(),
                }
            };
            match d.op {
                Op::For | Op::While => {
                    for slot in carried_of(i) {
                        for w in slot.windows(2) {
                            uf.union(w[0], w[1]);
                        }
                        for v in &slot[1..] {
                            transparent[v.as_u32() as usize] = true;
                        }
                    }
                    if d.op == Op::For {
                        // The induction variable is a scalar: not a block.
                        let iv = func.region(d.regions[0]).params[0];
                        transparent[iv.as_u32() as usize] = false;
                    }
                }
                Op::If => {
                    for r in &d.results {
                        transparent[r.as_u32() as usize] = true;
                    }
                }
                Op::Yield => match owner.map(|o| (o, &func.inst(o).op)) {
                    Some((o, Op::If)) => {
                        for (a, r) in d.args.iter().zip(&func.inst(o).results) {
                            uf.union(*a, *r);
                        }
                    }
                    Some((o, Op::For | Op::While)) => {
                        for (a, slot) in d.args.iter().zip(carried_of(o)) {
                            uf.union(*a, slot[0]);
                        }
                    }
                    _ => {}
                },
                Op::Break | Op::Continue => {
                    if let Some(&l) = loops.last() {
                        for (a, slot) in d.args.iter().zip(carried_of(l)) {
                            uf.union(*a, slot[0]);
                        }
                    }
                }
                _ => {}
            }
            let is_loop = matches!(d.op, Op::For | Op::While);
            if is_loop {
                loops.push(i);
            }
            for &sub in &d.regions {
                walk(func, sub, Some(i), loops, uf, transparent);
            }
            if is_loop {
                loops.pop();
            }
        }
    }
    walk(func, func.body, None, &mut Vec::new(), &mut uf, &mut transparent);
    // A `tl.symm_at` of a block passes its pointers along (translated).
    for (_, d) in func.insts.iter() {
        if d.op == Op::SymmAt {
            for r in &d.results {
                transparent[r.as_u32() as usize] = true;
            }
        }
    }
    // A group is an address group while every member is a candidate (or
    // only passes values along) and no member has a use other than an
    // address, a mask, or an operand of another address group.
    let mut ok = vec![true; n];
    for v in 0..n {
        let g = uf.find(v as u32) as usize;
        if !(candidate[v] || transparent[v]) {
            ok[g] = false;
        }
    }
    // Only block values qualify.
    for (v, data) in func.values.iter() {
        if !data.ty.is_block() {
            let g = uf.find(v.as_u32()) as usize;
            ok[g] = false;
        }
    }
    // Conditional uses: (operand group, result group).
    let mut edges: Vec<(usize, usize)> = Vec::new();
    for (i, d) in func.insts.iter() {
        let flows = matches!(d.op, Op::For | Op::While | Op::Yield | Op::Break | Op::Continue);
        for (k, a) in d.args.iter().enumerate() {
            if flows && !(d.op == Op::For && k < 3) {
                continue;
            }
            let ga = uf.find(a.as_u32()) as usize;
            if address_operand(&d.op, k) {
                continue;
            }
            // `tl.symm_at(ptrs, r)` maps a block of pointers to rank r's
            // copies at issue: the pointers are addresses when what it
            // gives is.
            if candidate_op(func, i) || (d.op == Op::SymmAt && k == 0) {
                let gr = uf.find(d.results[0].as_u32()) as usize;
                edges.push((ga, gr));
            } else {
                ok[ga] = false;
            }
        }
    }
    loop {
        let mut changed = false;
        for &(a, r) in &edges {
            if ok[a] && !ok[r] {
                ok[a] = false;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    func.values
        .keys()
        .filter(|v| candidate[v.as_u32() as usize] && ok[uf.find(v.as_u32()) as usize])
        .collect()
}

/// The simulator's plan of `func` and its address values: fused
/// elementwise chains with every memory operation alone
/// ([`Fusion::Compute`]), each group split into its independent parts
/// ([`Plan::split_independent`]: an address or a result is ready when its
/// own operands are, not when a computation fused beside it ends).
pub(super) fn sim_plan(func: &Function) -> (Plan, HashSet<Value>) {
    let mut plan = plan_with(func, Fusion::Compute);
    plan.split_independent(func);
    (plan, address_values(func))
}

/// One output of an address-generation group with only the instructions
/// and inputs it depends on. Evaluated symbolically on its own, its result
/// can be reused while those inputs stay the same: the mask `lanes < n`
/// of a ring step keeps its bound while the pointer beside it moves.
pub(super) struct Cone {
    pub group: Group,
    /// The shortcut when the cone is `ptr + splat(offset)`.
    pub shift: Option<affine::PtrShift>,
}

/// The cones of `group`, one per output, when every member has a symbolic
/// form (`affine::symbolic` is `All`); `None` otherwise.
pub(super) fn cones(func: &Function, group: &Group) -> Option<Vec<Cone>> {
    if affine::symbolic(func, group) != affine::Symbolic::All {
        return None;
    }
    let cones = group
        .outputs
        .iter()
        .map(|&out| {
            // Walk back from the output, keeping what it reads.
            let mut needed: HashSet<Value> = HashSet::from([out]);
            let mut insts = Vec::new();
            for &i in group.insts.iter().rev() {
                let d = func.inst(i);
                if d.results.iter().any(|r| needed.contains(r)) {
                    insts.push(i);
                    needed.extend(d.args.iter().copied());
                }
            }
            insts.reverse();
            let group = Group {
                insts,
                inputs: group.inputs.iter().copied().filter(|v| needed.contains(v)).collect(),
                outputs: vec![out],
            };
            Cone {
                shift: affine::PtrShift::of(func, &group),
                group,
            }
        })
        .collect();
    Some(cones)
}
