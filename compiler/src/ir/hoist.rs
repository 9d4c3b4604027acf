//! Loop-invariant code motion for scalars: a scalar instruction in a loop
//! body that computes the same value on every iteration (its operands are
//! all defined outside the loop) moves in front of the loop.
//!
//! **Why.** Each scalar instruction costs the issue unit `dispatch_cycles`
//! every time it runs (DESIGN §2), and the lowering emits constants and
//! sub-expressions of a loop's bounds where the source names them, often
//! inside the loop (`n - 1` in `if k < n - 1` runs once per iteration). A
//! compiler for a machine whose small messages are bounded by the issue
//! unit hoists them, as LLVM's and Triton's LICM do.
//!
//! **What moves.** Only instructions of the scalar engine that cannot fail
//! and have no effect: constants, the launch queries (`rank`,
//! `program_id`, …), arithmetic, comparisons, casts, `select`, `fma`,
//! `ptr_add`. An integer `/`, `//` or `%` moves only when its divisor is a
//! non-zero constant, since the loop might run zero times on the very
//! inputs that would make it divide by zero. Block instructions stay: a
//! hoisted block would live across the whole loop in TCM, whose capacity
//! is enforced. Instructions inside an `if` in the loop stay (they do not
//! run on every iteration).
//!
//! **Invariant kept.** Moved instructions keep their order and go right
//! before the loop, where every operand is defined, so the function stays
//! in the form [`super::verify`] accepts; lowering verifies after this
//! pass.

use super::*;
use crate::sema::types::Elem;
use cranelift_entity::SecondaryMap;

/// Hoists loop-invariant scalar instructions out of every `for` and
/// `while` of `func`, innermost loops first (so an invariant of an inner
/// loop that is invariant in the outer one leaves both).
pub fn hoist_loop_invariants(func: &mut Function) {
    let mut consts: SecondaryMap<Value, Option<ConstVal>> = SecondaryMap::new();
    for d in func.insts.values() {
        if let (Op::Const(c), Some(&r)) = (&d.op, d.results.first()) {
            consts[r] = Some(*c);
        }
    }
    let mut inside: SecondaryMap<Value, bool> = SecondaryMap::with_capacity(func.values.len());
    let body = func.body;
    hoist_in(func, body, &consts, &mut inside);
}

/// Rewrites region `r`: each loop in it gets its invariants placed before
/// it, after its own nested loops were treated.
fn hoist_in(
    func: &mut Function,
    r: Region,
    consts: &SecondaryMap<Value, Option<ConstVal>>,
    inside: &mut SecondaryMap<Value, bool>,
) {
    let insts = std::mem::take(&mut func.regions[r].insts);
    let mut out = Vec::with_capacity(insts.len());
    for i in insts {
        for k in 0..func.insts[i].regions.len() {
            let child = func.insts[i].regions[k];
            hoist_in(func, child, consts, inside);
        }
        if matches!(func.insts[i].op, Op::For | Op::While) {
            out.extend(take_invariants(func, i, consts, inside));
        }
        out.push(i);
    }
    func.regions[r].insts = out;
}

/// Removes from loop `lp`'s regions the instructions that compute the same
/// value on every iteration and returns them in program order.
fn take_invariants(
    func: &mut Function,
    lp: Inst,
    consts: &SecondaryMap<Value, Option<ConstVal>>,
    inside: &mut SecondaryMap<Value, bool>,
) -> Vec<Inst> {
    let regions = func.insts[lp].regions.clone();
    for &r in &regions {
        mark_defined(func, r, inside, true);
    }
    let mut hoisted = Vec::new();
    for &r in &regions {
        let insts = std::mem::take(&mut func.regions[r].insts);
        let mut kept = Vec::with_capacity(insts.len());
        for i in insts {
            let d = &func.insts[i];
            if movable(func, d, consts) && d.args.iter().all(|a| !inside[*a]) {
                for &v in &d.results {
                    inside[v] = false;
                }
                hoisted.push(i);
            } else {
                kept.push(i);
            }
        }
        func.regions[r].insts = kept;
    }
    for &r in &regions {
        mark_defined(func, r, inside, false);
    }
    hoisted
}

/// Sets `inside` to `on` for every value region `r` defines (its
/// parameters, its instructions' results, nested regions included).
fn mark_defined(func: &Function, r: Region, inside: &mut SecondaryMap<Value, bool>, on: bool) {
    for &p in &func.regions[r].params {
        inside[p] = on;
    }
    for &i in &func.regions[r].insts {
        let d = &func.insts[i];
        for &v in &d.results {
            inside[v] = on;
        }
        for &c in &d.regions {
            mark_defined(func, c, inside, on);
        }
    }
}

/// Whether `d` may run before its loop, and when the loop runs zero
/// times, without changing what the program does.
fn movable(func: &Function, d: &InstData, consts: &SecondaryMap<Value, Option<ConstVal>>) -> bool {
    if d.engine != Engine::Scalar || d.results.len() != 1 || !d.regions.is_empty() {
        return false;
    }
    match &d.op {
        Op::Binary(BinaryOp::Div | BinaryOp::FloorDiv | BinaryOp::Mod) => {
            let float = matches!(func.ty(d.results[0]).elem(), Elem::Num(t) if t.is_float());
            float
                || d.args
                    .get(1)
                    .and_then(|b| consts[*b])
                    .is_some_and(|c| c != ConstVal::Int(0))
        }
        op => op.is_pure_and_infallible(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sema::types::DType;
    use crate::span::Loc;

    fn i32t() -> Type {
        Type::Scalar(Elem::Num(DType::I32))
    }

    /// `for iv in [0, n): x = n - 1; q = n // 3; r = 3 // n; w = iv + x`:
    /// `n - 1`, the constants and the division by the constant leave the
    /// loop; `iv + x` and the division by a run-time value stay.
    #[test]
    fn invariant_scalars_leave_the_loop_and_varying_ones_stay() {
        let mut b = Builder::new("k", vec![]);
        let n = b.add_param("n", i32t());
        let loc = Loc::new(crate::span::FileId(0), crate::span::Span::new(0, 0));
        let konst = |b: &mut Builder, v: i64| b.value(Op::Const(ConstVal::Int(v)), vec![], i32t(), loc);
        let bin = |b: &mut Builder, op: BinaryOp, x: Value, y: Value| b.value(Op::Binary(op), vec![x, y], i32t(), loc);
        let zero = konst(&mut b, 0);
        let one = konst(&mut b, 1);
        let (body, params) = b.new_region(&[i32t()]);
        b.push(Op::For, vec![zero, n, one], vec![], vec![body], loc);
        b.enter(body);
        let c1 = konst(&mut b, 1);
        let x = bin(&mut b, BinaryOp::Sub, n, c1);
        let c3 = konst(&mut b, 3);
        bin(&mut b, BinaryOp::FloorDiv, n, c3);
        bin(&mut b, BinaryOp::FloorDiv, c3, n);
        bin(&mut b, BinaryOp::Add, params[0], x);
        b.push(Op::Yield, vec![], vec![], vec![], loc);
        b.leave();
        b.push(Op::Return, vec![], vec![], vec![], loc);
        let mut f = b.finish();
        verify(&f).expect("valid before hoisting");
        hoist_loop_invariants(&mut f);
        verify(&f).expect("valid after hoisting");
        let ops = |r: Region| -> Vec<String> { f.regions[r].insts.iter().map(|i| f.insts[*i].op.mnemonic()).collect() };
        assert_eq!(
            ops(f.body),
            ["const", "const", "const", "sub", "const", "floordiv", "for", "return"]
        );
        assert_eq!(ops(body), ["floordiv", "add", "yield"]);
    }
}
