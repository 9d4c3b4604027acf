//! The IR verifier: definitions before uses in enclosing regions, one
//! terminator per region, operand/result types consistent per operation,
//! and `yield`/`break`/`continue` arities matching their construct.
//! Lowering runs it on every function it builds; a failure is a compiler
//! bug, reported with the instruction it concerns.

use super::*;
use crate::sema::types::DType;
use std::collections::HashSet;

struct Verifier<'f> {
    f: &'f Function,
    defined: HashSet<Value>,
    errors: Vec<String>,
    /// Carried types of the loops enclosing the current region.
    loops: Vec<Vec<Type>>,
}

pub fn verify(f: &Function) -> Result<(), Vec<String>> {
    let mut v = Verifier {
        f,
        defined: HashSet::new(),
        errors: Vec::new(),
        loops: Vec::new(),
    };
    let mut scope: Vec<Value> = Vec::new();
    v.region(f.body, &mut scope, None);
    if let Some(&last) = f.regions[f.body].insts.last() {
        if f.insts[last].op != Op::Return {
            v.errors.push("the kernel body must end in `return`".into());
        }
    }
    if v.errors.is_empty() {
        Ok(())
    } else {
        Err(v.errors)
    }
}

impl Verifier<'_> {
    fn err(&mut self, i: Inst, msg: String) {
        let d = &self.f.insts[i];
        self.errors
            .push(format!("{i} ({}.{}): {msg}", d.engine.name(), d.op.mnemonic()));
    }

    fn ty(&self, v: Value) -> &Type {
        &self.f.values[v].ty
    }

    /// Verifies region `r`; `yield_tys` are the types its `yield` must
    /// carry (None: no yield allowed).
    fn region(&mut self, r: Region, scope: &mut Vec<Value>, yield_tys: Option<&[Type]>) {
        let mark = scope.len();
        for &p in &self.f.regions[r].params {
            if !self.defined.insert(p) {
                self.errors.push(format!("{p} is defined twice"));
            }
            scope.push(p);
        }
        let insts = self.f.regions[r].insts.clone();
        for (k, &i) in insts.iter().enumerate() {
            let d = &self.f.insts[i];
            for a in d.args.clone() {
                if !scope.contains(&a) {
                    self.err(i, format!("operand {a} is not defined in an enclosing scope"));
                }
            }
            let is_last = k + 1 == insts.len();
            if d.op.is_terminator() && !is_last {
                self.err(i, "terminator before the end of its region".into());
            }
            self.inst(i, scope, yield_tys);
            for res in self.f.insts[i].results.clone() {
                if !self.defined.insert(res) {
                    self.err(i, format!("{res} is defined twice"));
                }
                scope.push(res);
            }
        }
        if r != self.f.body && !insts.last().is_some_and(|&i| self.f.insts[i].op.is_terminator()) {
            self.errors.push(format!("{r} does not end in a terminator"));
        }
        scope.truncate(mark);
    }

    fn same_shape(&mut self, i: Inst, a: &Type, b: &Type, what: &str) {
        if a.shape() != b.shape() {
            self.err(i, format!("{what}: shapes {a} and {b} differ"));
        }
    }

    fn check_types(&mut self, i: Inst, got: &[Value], want: &[Type], what: &str) {
        let tys: Vec<Type> = got.iter().map(|v| self.ty(*v).clone()).collect();
        if tys != want {
            let g: Vec<String> = tys.iter().map(|t| t.to_string()).collect();
            let w: Vec<String> = want.iter().map(|t| t.to_string()).collect();
            self.err(
                i,
                format!("{what}: got ({}), expected ({})", g.join(", "), w.join(", ")),
            );
        }
    }

    fn inst(&mut self, i: Inst, scope: &mut Vec<Value>, yield_tys: Option<&[Type]>) {
        let d = self.f.insts[i].clone();
        let arg = |k: usize| d.args.get(k).map(|v| self.f.values[*v].ty.clone());
        let res = d.results.first().map(|v| self.f.values[*v].ty.clone());
        match &d.op {
            Op::Binary(_) | Op::Fma => {
                for k in 0..d.args.len() {
                    if arg(k) != res {
                        self.err(i, "operands and result must have one type".into());
                    }
                }
            }
            Op::Cmp(_) => {
                let (Some(a), Some(b), Some(r)) = (arg(0), arg(1), res) else {
                    return self.err(i, "needs two operands and a result".into());
                };
                if a != b || r.elem() != Elem::Num(DType::Bool) {
                    self.err(i, format!("operands {a}, {b} must match and the result {r} be bool"));
                }
                self.same_shape(i, &a, &r, "comparison");
            }
            Op::Unary(u) => {
                if let (Some(a), Some(r)) = (arg(0), res) {
                    if *u != UnaryOp::Not && a != r {
                        self.err(i, format!("operand {a} and result {r} differ"));
                    }
                    self.same_shape(i, &a, &r, "unary");
                }
            }
            Op::Cast { .. } | Op::PtrAdd => {
                if let (Some(a), Some(r)) = (arg(0), res) {
                    self.same_shape(i, &a, &r, "elementwise");
                }
                if d.op == Op::PtrAdd {
                    if let Some(b) = arg(1) {
                        if !matches!(b.elem(), Elem::Num(t) if t.is_int())
                            || arg(0).is_some_and(|a| a.shape() != b.shape())
                        {
                            self.err(i, format!("offsets {b} must be integers of the pointer's shape"));
                        }
                    }
                }
            }
            Op::Select => {
                if let (Some(c), Some(a), Some(b), Some(r)) = (arg(0), arg(1), arg(2), res) {
                    if c.elem() != Elem::Num(DType::Bool) || c.shape() != r.shape() || a != r || b != r {
                        self.err(i, format!("select({c}, {a}, {b}) -> {r} is ill-typed"));
                    }
                }
            }
            Op::Splat => {
                if let (Some(a), Some(r)) = (arg(0), res) {
                    if !matches!(a, Type::Scalar(_)) || a.elem() != r.elem() {
                        self.err(i, format!("splat of {a} to {r}"));
                    }
                }
            }
            Op::Broadcast => {
                if let (Some(a), Some(r)) = (arg(0), res) {
                    let ok = a.elem() == r.elem()
                        && a.shape().len() == r.shape().len()
                        && a.shape().iter().zip(r.shape()).all(|(x, y)| x == y || *x == 1);
                    if !ok {
                        self.err(i, format!("cannot broadcast {a} to {r}"));
                    }
                }
            }
            Op::Reshape => {
                if let (Some(a), Some(r)) = (arg(0), res) {
                    if a.numel() != r.numel() || a.elem() != r.elem() {
                        self.err(i, format!("cannot reshape {a} to {r}"));
                    }
                }
            }
            Op::Load { has_mask, has_other } => {
                let (Some(p), Some(r)) = (arg(0), res) else {
                    return self.err(i, "load needs a pointer".into());
                };
                match p.elem() {
                    Elem::Ptr(t) if r.elem() == Elem::Num(t) && p.shape() == r.shape() => {}
                    _ => self.err(i, format!("load through {p} cannot give {r}")),
                }
                let mut k = 1;
                if *has_mask {
                    if arg(k).is_some_and(|m| m.elem() != Elem::Num(DType::Bool) || m.shape() != p.shape()) {
                        self.err(i, "mask must be bool of the pointer's shape".into());
                    }
                    k += 1;
                }
                if *has_other && arg(k).as_ref() != Some(&r) {
                    self.err(i, "other must have the result's type".into());
                }
            }
            Op::Store { has_mask } | Op::AtomicAdd { has_mask } => {
                let (Some(p), Some(v)) = (arg(0), arg(1)) else {
                    return self.err(i, "store needs a pointer and a value".into());
                };
                match p.elem() {
                    Elem::Ptr(t) if v.elem() == Elem::Num(t) && p.shape() == v.shape() => {}
                    _ => self.err(i, format!("cannot store {v} through {p}")),
                }
                if *has_mask && arg(2).is_some_and(|m| m.elem() != Elem::Num(DType::Bool) || m.shape() != p.shape()) {
                    self.err(i, "mask must be bool of the pointer's shape".into());
                }
            }
            Op::If => {
                if d.regions.len() != 2 || arg(0).is_none_or(|c| !matches!(c, Type::Scalar(_))) {
                    return self.err(i, "`if` needs a scalar condition and two regions".into());
                }
                let tys: Vec<Type> = d.results.iter().map(|v| self.ty(*v).clone()).collect();
                for &r in &d.regions {
                    self.region(r, scope, Some(&tys));
                }
                // Results must come from somewhere: a branch that yields.
                let yields = d.regions.iter().any(|r| {
                    self.f.regions[*r]
                        .insts
                        .last()
                        .is_some_and(|l| self.f.insts[*l].op == Op::Yield)
                });
                if !tys.is_empty() && !yields {
                    self.err(i, "`if` has results but no branch yields".into());
                }
            }
            Op::For => {
                if d.args.len() < 3 || d.regions.len() != 1 {
                    return self.err(i, "`for` needs bounds, a step and one region".into());
                }
                let carried: Vec<Type> = d.args[3..].iter().map(|v| self.ty(*v).clone()).collect();
                let results: Vec<Type> = d.results.iter().map(|v| self.ty(*v).clone()).collect();
                if carried != results {
                    self.err(i, "results must match the carried values".into());
                }
                let params = self.f.regions[d.regions[0]].params.clone();
                if params.len() != carried.len() + 1 {
                    self.err(
                        i,
                        "region parameters must be the induction variable and the carried values".into(),
                    );
                } else {
                    self.check_types(i, &params[1..], &carried, "region parameters");
                }
                self.loops.push(carried.clone());
                self.region(d.regions[0], scope, Some(&carried));
                self.loops.pop();
            }
            Op::While => {
                let carried: Vec<Type> = d.args.iter().map(|v| self.ty(*v).clone()).collect();
                if d.regions.len() != 2 {
                    return self.err(i, "`while` needs a before- and a body-region".into());
                }
                let results: Vec<Type> = d.results.iter().map(|v| self.ty(*v).clone()).collect();
                if results != carried {
                    self.err(i, "results must match the carried values".into());
                }
                for r in [d.regions[0], d.regions[1]] {
                    let params = self.f.regions[r].params.clone();
                    self.check_types(i, &params, &carried, "region parameters");
                }
                self.loops.push(carried.clone());
                self.region(d.regions[0], scope, None);
                self.region(d.regions[1], scope, Some(&carried));
                self.loops.pop();
            }
            Op::Yield => match yield_tys {
                Some(tys) => {
                    let tys = tys.to_vec();
                    self.check_types(i, &d.args, &tys, "yield")
                }
                None => self.err(i, "`yield` outside a region that yields".into()),
            },
            Op::Break | Op::Continue => match self.loops.last().cloned() {
                Some(tys) => self.check_types(i, &d.args, &tys, "loop exit"),
                None => self.err(i, "outside a loop".into()),
            },
            Op::Condition if arg(0).is_none_or(|c| c != Type::Scalar(Elem::Num(DType::Bool))) => {
                self.err(i, "`condition` needs a bool".into());
            }
            _ => {}
        }
    }
}
