//! Expressions: names and attributes, operators with Triton's promotion and
//! NumPy broadcasting, constant folding, subscripts, and calls (argument
//! binding against a signature; the built-ins' rules are in `rules.rs`).

use super::builtins::{self, Builtin};
use super::check::{Checker, Frame, Val, VarState};
use super::consteval;
use super::program::ItemKind;
use super::types::{broadcast, promote, shape_string, DType, Dim, Elem, Konst, Namespace, Shape, Ty};
use crate::diag::{Code, Diagnostic};
use crate::ir::{self, Op};
use crate::span::Span;
use crate::syntax::ast::{BinOp, CmpOp, Expr, ExprKind, Ident, Index, LogicOp, UnOp};

/// An evaluated call argument.
#[derive(Clone, Debug)]
pub struct ArgVal {
    pub keyword: Option<Ident>,
    pub val: Val,
    /// The argument expression's span.
    pub span: Span,
}

/// Arguments matched to a signature: one slot per parameter, plus the
/// extra positional arguments collected by a `*varargs` parameter.
pub struct Bound {
    pub fixed: Vec<Option<ArgVal>>,
    pub varargs: Vec<ArgVal>,
}

/// Python built-in names visible everywhere, for suggestions.
const GLOBAL_NAMES: &[&str] = &[
    "tl", "triton", "range", "float", "int", "min", "max", "len", "bool", "i8", "i32", "i64", "u8", "u32", "f16",
    "bf16", "f32",
];

impl Checker {
    pub fn arg_vals(&mut self, f: &mut Frame, args: &[crate::syntax::ast::Arg]) -> Vec<ArgVal> {
        args.iter()
            .map(|a| ArgVal {
                keyword: a.keyword.clone(),
                val: self.expr(f, &a.value),
                span: a.value.span,
            })
            .collect()
    }

    pub fn expr(&mut self, f: &mut Frame, e: &Expr) -> Val {
        match &e.kind {
            ExprKind::Int(Some(v)) => Val::konst(Konst::Int(*v)),
            ExprKind::Int(None) | ExprKind::Error => Val::unknown(),
            ExprKind::Float(v) => Val::konst(Konst::Float(*v)),
            ExprKind::Bool(b) => Val::konst(Konst::Bool(*b)),
            ExprKind::NoneLit => Val::none(),
            ExprKind::Str(s) => Val::konst(Konst::Str(s.clone())),
            ExprKind::Name(n) => self.name(f, n, e.span),
            ExprKind::Tuple(items) | ExprKind::List(items) => {
                let vals: Vec<Val> = items.iter().map(|i| self.expr(f, i)).collect();
                let konsts: Option<Vec<Konst>> = vals.iter().map(|v| v.konst.clone()).collect();
                match konsts {
                    Some(ks) => Val::konst(Konst::Tuple(ks)),
                    None => Val {
                        is_const: vals.iter().all(|v| v.is_const),
                        ty: Ty::Tuple(vals.iter().map(|v| v.ty.clone()).collect()),
                        konst: None,
                        ir: None,
                        parts: vals,
                    },
                }
            }
            ExprKind::Unary(op, a) => {
                let v = self.expr(f, a);
                self.unary(f, *op, v, e.span, a.span)
            }
            ExprKind::Binary(op, a, b) => {
                let va = self.expr(f, a);
                let vb = self.expr(f, b);
                let op_span = Span::new(a.span.hi, b.span.lo);
                self.binary(f, *op, op_span, (a, va), (b, vb), e.span)
            }
            ExprKind::Logic(op, a, b) => {
                let va = self.expr(f, a);
                let at_right = self.builder.as_ref().map(|b| b.mark());
                let vb = self.expr(f, b);
                self.logic(f, *op, (a, va), (b, vb), at_right)
            }
            ExprKind::Compare { first, rest } => self.compare_chain(f, first, rest, e.span),
            ExprKind::IfExp { cond, then, otherwise } => match self.condition_val(f, cond, "… if … else …") {
                (Some(true), _) => self.expr(f, then),
                (Some(false), _) => self.expr(f, otherwise),
                (None, c) => {
                    let at_then = self.builder.as_ref().map(|b| b.mark());
                    let a = self.expr(f, then);
                    let at_else = self.builder.as_ref().map(|b| b.mark());
                    let b = self.expr(f, otherwise);
                    if a.is_tuple() || b.is_tuple() {
                        // A run-time choice between tuples would need a
                        // tuple-typed IR value; the elements can each be
                        // chosen. (On an unbound constexpr, only checking
                        // sees it: the tuple is not known.)
                        if !c.is_const {
                            let d = Diagnostic::new(
                                Code::E0329,
                                "a run-time `… if … else …` cannot choose between tuples",
                                self.loc(f, e.span),
                                "a tuple on a branch",
                            )
                            .with_help("choose each element on its own: `a = x0 if c else y0`, `b = x1 if c else y1`");
                            self.emit(f, d);
                        }
                        return Val::unknown();
                    }
                    let joined = self.join_values(f, (then, a.clone()), (otherwise, b.clone()), e.span);
                    // A branch with an effect or that may fail (a load, an
                    // atomic, a division, a helper with control flow) runs
                    // only when chosen, as Triton's `scf.if` does: `x[i] if
                    // i < n else 0` must not read x[n].
                    if let (Some(m0), Some(m1)) = (at_then, at_else) {
                        if self.builder.as_ref().is_some_and(|bd| bd.effectful_since(m0)) {
                            let ir = self.if_expr_regions(
                                f,
                                (m0, m1),
                                &c,
                                cond.span,
                                (then, &a),
                                (otherwise, &b),
                                &joined,
                                e.span,
                            );
                            return joined.with_ir(ir);
                        }
                    }
                    // Both sides are pure and cannot fail: both are computed
                    // and `select` picks one.
                    let ir = match Self::ir_type(&joined.ty) {
                        Some(t) if self.emitting() => {
                            let cv = self
                                .bool_scalar(f, &c, cond.span)
                                .and_then(|c| self.broadcast_value(f, c, t.shape(), cond.span));
                            let av = self.operand(f, &a, &t, then.span);
                            let bv = self.operand(f, &b, &t, otherwise.span);
                            self.emit_typed(f, crate::ir::Op::Select, vec![cv, av, bv], t, e.span)
                        }
                        _ => None,
                    };
                    joined.with_ir(ir)
                }
            },
            ExprKind::Call { func, args } => self.call(f, func, args, e.span),
            ExprKind::Attribute { value, attr } => {
                let v = self.expr(f, value);
                self.attribute(f, v, attr, value.span)
            }
            ExprKind::Subscript { value, indices } => {
                let v = self.expr(f, value);
                self.subscript(f, v, indices, value.span, e.span)
            }
        }
    }

    /// `a if c else b` lowered as an `if` whose branches yield the joined
    /// value: the instructions each branch emitted (into the cursor's
    /// region, from mark `at_then` for `a` and `at_else` for `b`) move into
    /// its region, followed by the conversion to the joined type.
    #[allow(clippy::too_many_arguments)]
    fn if_expr_regions(
        &mut self,
        f: &Frame,
        (at_then, at_else): (usize, usize),
        c: &Val,
        cond_span: Span,
        (then, a): (&Expr, &Val),
        (otherwise, b): (&Expr, &Val),
        joined: &Val,
        span: Span,
    ) -> Option<ir::Value> {
        let t = Self::ir_type(&joined.ty)?;
        let bd = self.builder.as_mut()?;
        let (then_r, _) = bd.new_region(&[]);
        let (else_r, _) = bd.new_region(&[]);
        bd.move_since(at_else, else_r);
        bd.move_since(at_then, then_r);
        let cv = self.bool_scalar(f, c, cond_span)?;
        let loc = self.loc(f, span);
        let (inst, _) = self
            .builder
            .as_mut()?
            .push(Op::If, vec![cv], vec![], vec![then_r, else_r], loc);
        for (r, e, v) in [(then_r, then, a), (else_r, otherwise, b)] {
            self.builder.as_mut()?.enter(r);
            let x = self.operand(f, v, &t, e.span);
            self.emit_effect(f, Op::Yield, vec![x], e.span);
            self.builder.as_mut()?.leave();
        }
        self.builder.as_mut()?.set_results(inst, vec![t]).first().copied()
    }

    pub fn name(&mut self, f: &mut Frame, name: &str, span: Span) -> Val {
        if let Some(var) = f.vars.get(name) {
            if let VarState::MaybeUndefined(def) = var.state {
                let val = var.val.clone();
                let d = Diagnostic::new(
                    Code::E0312,
                    format!("`{name}` is possibly undefined here"),
                    self.loc(f, span),
                    "used here",
                )
                .with_secondary(
                    self.loc(f, def),
                    "assigned only on some paths (a branch, or inside a loop)",
                )
                .with_help(format!("assign `{name}` before the `if`/loop so every path defines it"));
                self.emit(f, d);
                if let Some(v) = f.vars.get_mut(name) {
                    v.state = VarState::Defined; // report once
                }
                return val;
            }
            return var.val.clone();
        }
        if let Some(item) = self.modules[f.module.0 as usize].names.get(name) {
            return match &item.kind {
                ItemKind::Func(id) => Val {
                    ty: Ty::Func(*id),
                    konst: None,
                    is_const: true,
                    ir: None,
                    parts: Vec::new(),
                },
                ItemKind::Const(Some(k)) => Val::konst(k.clone()),
                ItemKind::Const(None) | ItemKind::Broken => Val::unknown(),
                ItemKind::Namespace(ns) => Val {
                    ty: Ty::Namespace(*ns),
                    konst: None,
                    is_const: true,
                    ir: None,
                    parts: Vec::new(),
                },
            };
        }
        match name {
            "tl" => {
                return Val {
                    ty: Ty::Namespace(Namespace::Tl),
                    konst: None,
                    is_const: true,
                    ir: None,
                    parts: Vec::new(),
                }
            }
            "triton" => {
                return Val {
                    ty: Ty::Namespace(Namespace::Triton),
                    konst: None,
                    is_const: true,
                    ir: None,
                    parts: Vec::new(),
                }
            }
            "bool" => return Val::konst(Konst::DType(DType::Bool)),
            _ => {}
        }
        if let Some(d) = DType::from_name(name).filter(|d| d.name() == name) {
            return Val::konst(Konst::DType(d));
        }
        if let Some(b) = Builtin::lookup_py(name) {
            return Val {
                ty: Ty::Builtin(b),
                konst: None,
                is_const: true,
                ir: None,
                parts: Vec::new(),
            };
        }
        if f.lenient_names {
            // The function has a syntax error: the name may well be
            // defined by the statement that did not parse.
            return Val::unknown();
        }
        let mut d = Diagnostic::new(
            Code::E0100,
            format!("cannot find `{name}` in this scope"),
            self.loc(f, span),
            "not found in this scope",
        );
        if Builtin::lookup_tl(name).is_some() || builtins::tl_constant(name).is_some() {
            d = d.with_help(format!("did you mean `tl.{name}`?"));
        } else {
            let mut candidates: Vec<String> = f.vars.keys().cloned().collect();
            candidates.extend(self.modules[f.module.0 as usize].names.keys().cloned());
            candidates.extend(GLOBAL_NAMES.iter().map(|s| s.to_string()));
            if let Some(h) = super::suggest::nearest(name, candidates.iter().map(String::as_str)) {
                d = d.with_help(format!("did you mean `{h}`?"));
            } else if name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
            {
                d = d.with_help(format!(
                    "if `{name}` is a block size, add it to the kernel's parameters: `{name}: constexpr`"
                ));
            }
        }
        self.emit(f, d);
        Val::unknown()
    }

    fn attribute(&mut self, f: &mut Frame, v: Val, attr: &Ident, value_span: Span) -> Val {
        let name = attr.name.as_str();
        match &v.ty {
            Ty::Unknown => Val::unknown(),
            Ty::Namespace(Namespace::Tl) => {
                if let Some(b) = Builtin::lookup_tl(name) {
                    return Val {
                        ty: Ty::Builtin(b),
                        konst: None,
                        is_const: true,
                        ir: None,
                        parts: Vec::new(),
                    };
                }
                if let Some(k) = builtins::tl_constant(name) {
                    return Val::konst(k);
                }
                let mut d = Diagnostic::new(
                    Code::E0101,
                    format!("`tl` has no built-in named `{name}`"),
                    self.loc(f, attr.span),
                    "unknown built-in",
                );
                if name == "constexpr" {
                    d = Diagnostic::new(
                        Code::E0208,
                        "`tl.constexpr` is an annotation, not a value",
                        self.loc(f, attr.span),
                        "used as a value",
                    );
                } else if matches!(name, "math" | "libdevice" | "extra") {
                    // Triton's `tl.math.exp`, `tl.extra.libdevice…`.
                    d = d.with_help(format!(
                        "Triton's `tl.{name}` functions are directly under `tl` here: `tl.exp`, `tl.sqrt`, …"
                    ));
                } else if let Some(help) = triton_only_help(name) {
                    d = d.with_help(help);
                } else if let Some(h) = super::suggest::nearest(name, builtins::tl_names()) {
                    d = d.with_help(format!("did you mean `tl.{h}`?"));
                }
                self.emit(f, d);
                Val::unknown()
            }
            Ty::Namespace(Namespace::Triton) => match name {
                "language" => Val {
                    ty: Ty::Namespace(Namespace::Tl),
                    konst: None,
                    is_const: true,
                    ir: None,
                    parts: Vec::new(),
                },
                "cdiv" => Val {
                    ty: Ty::Builtin(Builtin::Cdiv),
                    konst: None,
                    is_const: true,
                    ir: None,
                    parts: Vec::new(),
                },
                _ => {
                    let d = Diagnostic::new(
                        Code::E0318,
                        format!("`triton.{name}` is not available in tl"),
                        self.loc(f, attr.span),
                        "unknown attribute",
                    )
                    .with_help("the kernel language is under `tl.`; `triton.jit` is accepted as a decorator");
                    self.emit(f, d);
                    Val::unknown()
                }
            },
            Ty::Namespace(Namespace::Module(m)) => {
                let m = *m;
                match self.modules[m.0 as usize].names.get(name) {
                    Some(item) => match &item.kind {
                        ItemKind::Func(id) => Val {
                            ty: Ty::Func(*id),
                            konst: None,
                            is_const: true,
                            ir: None,
                            parts: Vec::new(),
                        },
                        ItemKind::Const(Some(k)) => Val::konst(k.clone()),
                        ItemKind::Const(None) | ItemKind::Broken => Val::unknown(),
                        ItemKind::Namespace(ns) => Val {
                            ty: Ty::Namespace(*ns),
                            konst: None,
                            is_const: true,
                            ir: None,
                            parts: Vec::new(),
                        },
                    },
                    None => {
                        let candidates: Vec<String> = self.modules[m.0 as usize].names.keys().cloned().collect();
                        let mut d = Diagnostic::new(
                            Code::E0103,
                            format!("the module has no item named `{name}`"),
                            self.loc(f, attr.span),
                            "not found in module",
                        );
                        if let Some(h) = super::suggest::nearest(name, candidates.iter().map(String::as_str)) {
                            d = d.with_help(format!("did you mean `{h}`?"));
                        }
                        self.emit(f, d);
                        Val::unknown()
                    }
                }
            }
            Ty::Scalar(e) | Ty::Block(e, _) => match (name, e) {
                ("dtype", Elem::Num(d)) => Val::konst(Konst::DType(*d)),
                ("shape", _) => {
                    let shape = v.ty.shape().map(|s| s.to_vec()).unwrap_or_default();
                    let dims: Option<Vec<Konst>> = shape.iter().map(|d| d.map(|d| Konst::Int(d as i64))).collect();
                    dims.map_or_else(Val::unbound_const, |ds| Val::konst(Konst::Tuple(ds)))
                }
                ("to", _) => Val {
                    ty: Ty::ToMethod(Box::new(v.ty.clone())),
                    konst: None,
                    is_const: false,
                    ir: None,
                    parts: Vec::new(),
                },
                _ => {
                    let mut d = Diagnostic::new(
                        Code::E0318,
                        format!("{} has no attribute `{name}`", v.ty),
                        self.loc(f, attr.span),
                        "unknown attribute",
                    )
                    .with_secondary(self.loc(f, value_span), format!("this is {}", v.ty));
                    if matches!(name, "astype" | "type" | "cast") {
                        d = d.with_help("convert with `.to(dtype)`");
                    } else if let ("dtype", Elem::Ptr(pointee)) = (name, e) {
                        // Triton's `p.dtype.element_ty`.
                        d = d.with_help(format!(
                            "a pointer has no dtype attribute; its elements are {pointee}: write the dtype, or pass \
                             it as a constexpr (`p: ptr[T], T: constexpr`)"
                        ));
                    } else if Builtin::lookup_tl(name).is_some() {
                        // Triton's tensor methods: `x.sum(0)`, `x.reshape(…)`.
                        d = d.with_help(format!("`{name}` is a function of `tl` here: `tl.{name}(x, …)`"));
                    } else if let Some(h) = super::suggest::nearest(name, ["dtype", "shape", "to"]) {
                        d = d.with_help(format!("did you mean `{h}`?"));
                    }
                    self.emit(f, d);
                    Val::unknown()
                }
            },
            _ => {
                let d = Diagnostic::new(
                    Code::E0318,
                    format!("{} has no attribute `{name}`", v.ty),
                    self.loc(f, attr.span),
                    "unknown attribute",
                )
                .with_secondary(self.loc(f, value_span), format!("this is {}", v.ty));
                self.emit(f, d);
                Val::unknown()
            }
        }
    }

    fn call(&mut self, f: &mut Frame, func: &Expr, args: &[crate::syntax::ast::Arg], span: Span) -> Val {
        // `x.to(…)` needs the receiver's value, not just its type.
        let (callee, receiver) = match &func.kind {
            ExprKind::Attribute { value, attr } if attr.name == "to" => {
                let recv = self.expr(f, value);
                (self.attribute(f, recv.clone(), attr, value.span), Some(recv))
            }
            _ => (self.expr(f, func), None),
        };
        let argvals = self.arg_vals(f, args);
        match callee.ty {
            Ty::Builtin(b @ (Builtin::PyRange | Builtin::StaticRange)) => {
                let d = Diagnostic::new(
                    Code::E0324,
                    format!("`{}` can only be the iterable of a `for` loop", b.qualified()),
                    self.loc(f, func.span),
                    "used as a value",
                )
                .with_help("write `for i in range(…):`");
                self.emit(f, d);
                Val::unknown()
            }
            Ty::Builtin(b) => self.builtin_call(f, b, argvals, span, func.span),
            Ty::Func(id) => self.call_helper(f, id, argvals, span, func.span),
            Ty::ToMethod(_) => self.conversion_call(f, &receiver.unwrap_or_else(Val::unknown), argvals, span),
            Ty::Unknown => Val::unknown(),
            other => {
                let mut d = Diagnostic::new(
                    Code::E0204,
                    format!("{other} is not callable"),
                    self.loc(f, func.span),
                    "not a function",
                );
                if let crate::syntax::ast::ExprKind::Attribute { attr, .. } = &func.kind {
                    if attr.name == "shape" {
                        d = d.with_help("index the shape instead: `x.shape[0]`");
                    }
                }
                self.emit(f, d);
                Val::unknown()
            }
        }
    }

    /// Matches arguments to parameters (`(name, required)`), Python-style.
    pub fn bind_args(
        &mut self,
        f: &Frame,
        callee: &str,
        params: &[(&str, bool)],
        varargs: Option<&str>,
        args: Vec<ArgVal>,
        call: Span,
    ) -> Option<Bound> {
        let mut fixed: Vec<Option<ArgVal>> = vec![None; params.len()];
        let mut extra = Vec::new();
        let mut ok = true;
        let mut positional = 0usize;
        let mut keyword_seen = false;
        for a in args {
            match &a.keyword {
                // Already reported by the parser (E0016); binding it would
                // put it in the wrong slot.
                None if keyword_seen => ok = false,
                None => {
                    if positional < params.len() {
                        fixed[positional] = Some(a);
                    } else if varargs.is_some() {
                        extra.push(a);
                    } else {
                        let d = Diagnostic::new(
                            Code::E0200,
                            format!(
                                "{callee} takes {} positional argument{} but more were given",
                                params.len(),
                                if params.len() == 1 { "" } else { "s" }
                            ),
                            self.loc(f, a.span),
                            "unexpected argument",
                        )
                        .with_note(format!(
                            "parameters: ({})",
                            params.iter().map(|p| p.0).collect::<Vec<_>>().join(", ")
                        ));
                        self.emit(f, d);
                        ok = false;
                    }
                    positional += 1;
                }
                Some(k) => match params
                    .iter()
                    .inspect(|_| keyword_seen = true)
                    .position(|p| p.0 == k.name)
                {
                    Some(i) => {
                        if fixed[i].is_some() {
                            let d = Diagnostic::new(
                                Code::E0202,
                                format!("{callee} got multiple values for argument `{}`", k.name),
                                self.loc(f, k.span),
                                "given again here",
                            );
                            let d = match &fixed[i] {
                                Some(prev) => d.with_secondary(self.loc(f, prev.span), "first given here"),
                                None => d,
                            };
                            self.emit(f, d);
                            ok = false;
                        } else {
                            fixed[i] = Some(a);
                        }
                    }
                    None => {
                        let mut d = Diagnostic::new(
                            Code::E0201,
                            format!("{callee} has no parameter named `{}`", k.name),
                            self.loc(f, k.span),
                            "unknown keyword",
                        );
                        if let Some(h) = super::suggest::nearest(&k.name, params.iter().map(|p| p.0)) {
                            d = d.with_help(format!("did you mean `{h}`?"));
                        } else {
                            d = d.with_note(format!(
                                "parameters: ({})",
                                params.iter().map(|p| p.0).collect::<Vec<_>>().join(", ")
                            ));
                        }
                        self.emit(f, d);
                        ok = false;
                    }
                },
            }
        }
        let missing: Vec<&str> = params
            .iter()
            .zip(&fixed)
            .filter(|((_, req), a)| *req && a.is_none())
            .map(|((n, _), _)| *n)
            .collect();
        if !missing.is_empty() && ok {
            let list = missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ");
            let d = Diagnostic::new(
                Code::E0203,
                format!(
                    "{callee} is missing {} required argument{}: {list}",
                    missing.len(),
                    if missing.len() == 1 { "" } else { "s" }
                ),
                self.loc(f, call),
                format!("missing {list}"),
            );
            self.emit(f, d);
            ok = false;
        }
        ok.then_some(Bound { fixed, varargs: extra })
    }

    pub fn unary(&mut self, f: &mut Frame, op: UnOp, v: Val, span: Span, operand: Span) -> Val {
        if let Some(k) = &v.konst {
            match consteval::unary(op, k) {
                Some(Ok(k)) => return Val::konst(k),
                Some(Err(msg)) => {
                    self.error(f, Code::E0315, msg, span, "in this constant");
                    return Val::unknown();
                }
                None => {}
            }
        }
        let ty = v.ty.clone();
        match (op, ty.elem()) {
            (_, None) if ty.is_unknown() => Val {
                is_const: v.is_const,
                ..Val::unknown()
            },
            (UnOp::Not, Some(_)) if ty.is_block() => {
                let d = Diagnostic::new(
                    Code::E0303,
                    "`not` cannot be applied to a block",
                    self.loc(f, span),
                    format!("operand is {ty}"),
                )
                .with_help("use `~mask` for elementwise negation of a boolean block, or `x == 0`");
                self.emit(f, d);
                Val::unknown()
            }
            (UnOp::Not, Some(Elem::Num(_))) => {
                let b = self.bool_scalar(f, &v, operand);
                let ir = self.emit_value(f, Op::Unary(ir::UnaryOp::Not), vec![b], &Ty::num(DType::Bool), span);
                Val {
                    ty: Ty::num(DType::Bool),
                    konst: None,
                    is_const: v.is_const,
                    ir,
                    parts: Vec::new(),
                }
            }
            (UnOp::Pos, Some(Elem::Num(_))) => v,
            (UnOp::Neg, Some(Elem::Num(d))) if d != DType::Bool => {
                let x = v.ir;
                let ir = self.emit_value(f, Op::Unary(ir::UnaryOp::Neg), vec![x], &ty, span);
                Val::runtime(ty).with_ir(ir)
            }
            (UnOp::Invert, Some(Elem::Num(d))) if d.is_int() => {
                let op = if d == DType::Bool {
                    ir::UnaryOp::Not
                } else {
                    ir::UnaryOp::Invert
                };
                let x = v.ir;
                let ir = self.emit_value(f, Op::Unary(op), vec![x], &ty, span);
                Val::runtime(ty).with_ir(ir)
            }
            (UnOp::Invert, Some(Elem::Num(_))) => {
                self.error(
                    f,
                    Code::E0310,
                    format!("`~` needs an integer or bool operand, found {ty}"),
                    operand,
                    "floating-point operand",
                );
                Val::unknown()
            }
            _ => {
                let sym = match op {
                    UnOp::Neg => "-",
                    UnOp::Pos => "+",
                    UnOp::Invert => "~",
                    UnOp::Not => "not",
                };
                self.error(
                    f,
                    Code::E0300,
                    format!("cannot apply unary `{sym}` to {ty}"),
                    operand,
                    format!("this is {ty}"),
                );
                Val::unknown()
            }
        }
    }

    fn shape_mismatch(&mut self, f: &Frame, what: &str, (sa, la): (Span, &[Dim]), (sb, lb): (Span, &[Dim])) {
        let d = Diagnostic::new(
            Code::E0301,
            format!(
                "incompatible shapes for {what}: {} and {}",
                shape_string(la),
                shape_string(lb)
            ),
            self.loc(f, sb),
            format!("this has shape {}", shape_string(lb)),
        )
        .with_secondary(self.loc(f, sa), format!("this has shape {}", shape_string(la)))
        .with_note("shapes broadcast when, axis by axis from the right, the sizes are equal or one of them is 1")
        .with_help("add an axis with `x[:, None]` / `x[None, :]`, or reshape with `tl.reshape`");
        self.emit(f, d);
    }

    /// Broadcasts two operand shapes, reporting E0301.
    pub fn broadcast_operands(&mut self, f: &Frame, what: &str, a: (Span, &Ty), b: (Span, &Ty)) -> Option<Shape> {
        let (Some(sa), Some(sb)) = (a.1.shape(), b.1.shape()) else {
            return None;
        };
        match broadcast(sa, sb) {
            Ok(s) => Some(s),
            Err(_) => {
                let (sa, sb) = (sa.to_vec(), sb.to_vec());
                self.shape_mismatch(f, what, (a.0, &sa), (b.0, &sb));
                None
            }
        }
    }

    pub fn binary(
        &mut self,
        f: &mut Frame,
        op: BinOp,
        op_span: Span,
        (le, l): (&Expr, Val),
        (re, r): (&Expr, Val),
        span: Span,
    ) -> Val {
        let _ = op_span;
        if let (Some(a), Some(b)) = (&l.konst, &r.konst) {
            match consteval::binary(op, a, b) {
                Some(Ok(k)) => return Val::konst(k),
                Some(Err(msg)) => {
                    self.error(f, Code::E0315, msg, span, "in this constant expression");
                    return Val::unknown();
                }
                None => {}
            }
        }
        let both_const = l.is_const && r.is_const;
        if l.ty.is_unknown() || r.ty.is_unknown() {
            return Val {
                is_const: both_const,
                ..Val::unknown()
            };
        }
        // An integer `//` or `%` by a constant 0 traps wherever it runs:
        // an error now, as when both operands are constants.
        let int_dividend = matches!(l.ty.elem(), Some(Elem::Num(d)) if d.is_int());
        if matches!(op, BinOp::FloorDiv | BinOp::Mod)
            && int_dividend
            && r.konst.as_ref().and_then(Konst::as_int) == Some(0)
        {
            let what = if op == BinOp::Mod { "modulo" } else { "division" };
            self.error(
                f,
                Code::E0315,
                format!("integer {what} by zero"),
                re.span,
                "zero divisor",
            );
            return Val::unknown();
        }
        let sym = op.symbol();
        let (Some(el), Some(er)) = (l.ty.elem(), r.ty.elem()) else {
            let d = Diagnostic::new(
                Code::E0300,
                format!("unsupported operand types for `{sym}`: {} and {}", l.ty, r.ty),
                self.loc(f, span),
                "in this operation",
            )
            .with_secondary(self.loc(f, le.span), format!("{}", l.ty))
            .with_secondary(self.loc(f, re.span), format!("{}", r.ty));
            self.emit(f, d);
            return Val::unknown();
        };
        let Some(shape) = self.broadcast_operands(f, &format!("`{sym}`"), (le.span, &l.ty), (re.span, &r.ty)) else {
            return Val::unknown();
        };
        let elem = match (el, er) {
            (Elem::Ptr(p), Elem::Num(i)) if i.is_int() && matches!(op, BinOp::Add | BinOp::Sub) => {
                return self.ptr_add(f, (l, p), (r, i), op == BinOp::Sub, shape, span);
            }
            (Elem::Num(i), Elem::Ptr(p)) if i.is_int() && op == BinOp::Add => {
                return self.ptr_add(f, (r, p), (l, i), false, shape, span);
            }
            (Elem::Ptr(_), _) | (_, Elem::Ptr(_)) => {
                let d = Diagnostic::new(
                    Code::E0300,
                    format!("unsupported operand types for `{sym}`: {} and {}", l.ty, r.ty),
                    self.loc(f, span),
                    "invalid pointer arithmetic",
                )
                .with_note("a pointer can only be offset by adding or subtracting integers");
                self.emit(f, d);
                return Val::unknown();
            }
            (Elem::Num(a), Elem::Num(b)) => match op {
                BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor | BinOp::Shl | BinOp::Shr => {
                    if a.is_float() || b.is_float() {
                        let (bad_span, bad_ty) = if a.is_float() {
                            (le.span, &l.ty)
                        } else {
                            (re.span, &r.ty)
                        };
                        let mut d = Diagnostic::new(
                            Code::E0310,
                            format!("`{sym}` needs integer or bool operands, found {bad_ty}"),
                            self.loc(f, bad_span),
                            "floating-point operand",
                        );
                        if matches!(op, BinOp::BitAnd | BinOp::BitOr) {
                            d = d.with_help("to combine conditions, compare first: `(x > 0) & (y > 0)`");
                        }
                        self.emit(f, d);
                        return Val::unknown();
                    }
                    let Some(d) = self.promote_or_report(f, sym, (a, l.is_weak()), (b, r.is_weak()), false, span)
                    else {
                        return Val::unknown();
                    };
                    Elem::Num(d)
                }
                BinOp::Pow => {
                    let d = Diagnostic::new(
                        Code::E0300,
                        "`**` is only defined on compile-time constants",
                        self.loc(f, span),
                        "run-time operand",
                    )
                    .with_help("multiply explicitly, or use `tl.exp2(y * tl.log2(x))`");
                    self.emit(f, d);
                    return Val::unknown();
                }
                _ => {
                    let div_or_mod = matches!(op, BinOp::Div | BinOp::FloorDiv | BinOp::Mod);
                    let Some(d) = self.promote_or_report(f, sym, (a, l.is_weak()), (b, r.is_weak()), div_or_mod, span)
                    else {
                        return Val::unknown();
                    };
                    // `/` is true division: integers divide as f32.
                    Elem::Num(if op == BinOp::Div && d.is_int() { DType::F32 } else { d })
                }
            },
        };
        // A constant divisor converted to the operation's integer dtype
        // wraps (§12.2 of the language reference): `x_i32 // 2**32` divides
        // by 0 wherever it runs.
        if let (Elem::Num(d), true, Some(v)) = (
            elem,
            matches!(op, BinOp::FloorDiv | BinOp::Mod),
            r.konst.as_ref().and_then(Konst::as_int),
        ) {
            let wrapped = match d {
                DType::Bool => v & 1,
                DType::I8 | DType::U8 => i64::from(v as u8),
                DType::I32 | DType::U32 => i64::from(v as u32),
                _ => v,
            };
            if d.is_int() && v != 0 && wrapped == 0 {
                let what = if op == BinOp::Mod { "modulo" } else { "division" };
                let d = Diagnostic::new(
                    Code::E0315,
                    format!("integer {what} by zero: the constant {v} is 0 as {d}"),
                    self.loc(f, re.span),
                    format!("0 as {d}"),
                )
                .with_help(format!(
                    "the constant takes the other operand's dtype and wraps; widen that operand first, e.g. \
                     `x.to(i64) {sym} {v}`"
                ));
                self.emit(f, d);
                return Val::unknown();
            }
        }
        let ty = Ty::with_shape(elem, shape);
        let ir = match Self::ir_type(&ty) {
            Some(t) if self.emitting() => {
                let lv = self.operand(f, &l, &t, le.span);
                let rv = self.operand(f, &r, &t, re.span);
                self.emit_typed(f, Op::Binary(ir_binary(op)), vec![lv, rv], t, span)
            }
            _ => None,
        };
        Val {
            ty,
            konst: None,
            is_const: both_const,
            ir,
            parts: Vec::new(),
        }
    }

    /// `ptr ± offsets`: offsets stay integers (their own dtype) and are
    /// scaled by the element size when executed.
    fn ptr_add(
        &mut self,
        f: &Frame,
        (p, pd): (Val, DType),
        (o, od): (Val, DType),
        negate: bool,
        shape: Shape,
        span: Span,
    ) -> Val {
        let ty = Ty::with_shape(Elem::Ptr(pd), shape);
        let ir = match Self::ir_type(&ty) {
            Some(t) if self.emitting() => {
                let off_dtype = if od == DType::Bool { DType::I32 } else { od };
                let pv = self.operand(f, &p, &t, span);
                let ot = t.with_elem(Elem::Num(off_dtype));
                // Subtraction negates the offset, in i64 so that unsigned
                // and minimal offsets negate exactly.
                let ot = if negate { t.with_elem(Elem::Num(DType::I64)) } else { ot };
                let mut ov = self.operand(f, &o, &ot, span);
                if negate {
                    ov = self.emit_typed(f, Op::Unary(ir::UnaryOp::Neg), vec![ov], ot, span);
                }
                self.emit_typed(f, Op::PtrAdd, vec![pv, ov], t, span)
            }
            _ => None,
        };
        Val {
            ty,
            konst: None,
            is_const: false,
            ir,
            parts: Vec::new(),
        }
    }

    /// Triton's computation type of two operands, or E0300 when there is
    /// none (`/`, `//`, `%` between signed and unsigned integers).
    pub fn promote_or_report(
        &mut self,
        f: &Frame,
        op: &str,
        a: (DType, bool),
        b: (DType, bool),
        div_or_mod: bool,
        span: Span,
    ) -> Option<DType> {
        match promote(a.0, a.1, b.0, b.1, div_or_mod) {
            Ok(d) => Some(d),
            Err(e) => {
                let d = Diagnostic::new(
                    Code::E0300,
                    format!("cannot use `{op}` here: {}", e.0),
                    self.loc(f, span),
                    "no common type",
                )
                .with_help("convert one operand with `.to(…)` so both have the same signedness");
                self.emit(f, d);
                None
            }
        }
    }

    fn compare_chain(&mut self, f: &mut Frame, first: &Expr, rest: &[(CmpOp, Span, Expr)], span: Span) -> Val {
        let l = self.expr(f, first);
        let Some(((op, op_span, rhs), more)) = rest.split_first() else {
            return l;
        };
        let r = self.expr(f, rhs);
        if let Some((op2, op2_span, rhs2)) = more.first() {
            for (_, _, e) in more {
                self.expr(f, e);
            }
            let (a, b, c) = (
                self.snip(f, first.span),
                self.snip(f, rhs.span),
                self.snip(f, rhs2.span),
            );
            let d = Diagnostic::new(
                Code::E0014,
                "comparison operators cannot be chained",
                self.loc(f, *op2_span),
                "second comparison",
            )
            .with_secondary(self.loc(f, *op_span), "first comparison")
            .with_help(format!(
                "split it: `({a} {} {b}) & ({b} {} {c})` for blocks, or `{a} {} {b} and {b} {} {c}` for scalars",
                op.symbol(),
                op2.symbol(),
                op.symbol(),
                op2.symbol()
            ));
            self.emit(f, d);
            return Val::unknown();
        }
        self.compare(f, *op, (first, l), (rhs, r), span)
    }

    fn snip(&self, f: &Frame, span: Span) -> String {
        self.sources
            .snippet(self.modules[f.module.0 as usize].file, span)
            .to_string()
    }

    fn compare(&mut self, f: &mut Frame, op: CmpOp, (le, l): (&Expr, Val), (re, r): (&Expr, Val), span: Span) -> Val {
        if matches!(op, CmpOp::Is | CmpOp::IsNot) {
            let l_none = l.konst == Some(Konst::None);
            let r_none = r.konst == Some(Konst::None);
            if !(l_none || r_none) {
                let d = Diagnostic::new(
                    Code::E0300,
                    "`is` can only compare with `None`",
                    self.loc(f, span),
                    "identity comparison",
                )
                .with_help("use `==` to compare values");
                self.emit(f, d);
                return Val::unknown();
            }
            let same = l_none && r_none;
            return Val::konst(Konst::Bool(if op == CmpOp::Is { same } else { !same }));
        }
        if let (Some(a), Some(b)) = (&l.konst, &r.konst) {
            if let Some(k) = consteval::compare(op, a, b) {
                return Val::konst(k);
            }
        }
        let both_const = l.is_const && r.is_const;
        if l.ty.is_unknown() || r.ty.is_unknown() {
            return Val {
                is_const: both_const,
                ..Val::unknown()
            };
        }
        let (Some(Elem::Num(_)), Some(Elem::Num(_))) = (l.ty.elem(), r.ty.elem()) else {
            if matches!(op, CmpOp::Eq | CmpOp::Ne)
                && l.ty == r.ty
                && matches!(l.ty, Ty::DType | Ty::Str | Ty::Direction)
            {
                return Val {
                    ty: Ty::num(DType::Bool),
                    konst: None,
                    is_const: both_const,
                    ir: None,
                    parts: Vec::new(),
                };
            }
            let d = Diagnostic::new(
                Code::E0300,
                format!("cannot compare {} with {}", l.ty, r.ty),
                self.loc(f, span),
                format!("`{}` on unsupported operands", op.symbol()),
            )
            .with_secondary(self.loc(f, le.span), format!("{}", l.ty))
            .with_secondary(self.loc(f, re.span), format!("{}", r.ty));
            self.emit(f, d);
            return Val::unknown();
        };
        let Some(shape) = self.broadcast_operands(f, &format!("`{}`", op.symbol()), (le.span, &l.ty), (re.span, &r.ty))
        else {
            return Val::unknown();
        };
        let (Some(a), Some(b)) = (l.ty.dtype(), r.ty.dtype()) else {
            return Val::unknown();
        };
        let Some(d) = self.promote_or_report(f, op.symbol(), (a, l.is_weak()), (b, r.is_weak()), false, span) else {
            return Val::unknown();
        };
        // A weak integer constant takes the other operand's dtype; one that
        // does not fit it would be compared wrapped (`x < 200` with an i8
        // `x` is `x < -56`), so it is an error, as in Triton.
        for (e, v, other) in [(le, &l, re), (re, &r, le)] {
            let (true, Some(Konst::Int(c))) = (v.is_weak(), &v.konst) else {
                continue;
            };
            let Some((lo, hi)) = int_range(d) else { continue };
            if (lo..=hi).contains(&i128::from(*c)) {
                continue;
            }
            // The narrowest signed dtype holding both the constant and every
            // value of `d`.
            let fits_i32 = (i128::from(i32::MIN)..=i128::from(i32::MAX)).contains(&i128::from(*c));
            let wider = if fits_i32 && matches!(d, DType::I8 | DType::U8) {
                DType::I32
            } else {
                DType::I64
            };
            let diag = Diagnostic::new(
                Code::E0328,
                format!("the constant {c} does not fit {d}, the dtype of this comparison"),
                self.loc(f, e.span),
                format!("out of range for {d} ({lo}..={hi})"),
            )
            .with_secondary(self.loc(f, other.span), format!("this is {d}"))
            .with_help(format!("convert the other operand first: `.to({wider})`"));
            self.emit(f, diag);
            return Val::unknown();
        }
        let ty = Ty::with_shape(Elem::Num(DType::Bool), shape.clone());
        let ir = match Self::ir_type(&Ty::with_shape(Elem::Num(d), shape)) {
            Some(t) if self.emitting() => {
                let lv = self.operand(f, &l, &t, le.span);
                let rv = self.operand(f, &r, &t, re.span);
                self.emit_typed(
                    f,
                    Op::Cmp(ir_cmp(op)),
                    vec![lv, rv],
                    t.with_elem(Elem::Num(DType::Bool)),
                    span,
                )
            }
            _ => None,
        };
        Val {
            ty,
            konst: None,
            is_const: both_const,
            ir,
            parts: Vec::new(),
        }
    }

    /// `l and r`, `l or r`; `at_right` marks where the right operand's
    /// instructions begin in the cursor's region (when emitting).
    fn logic(
        &mut self,
        f: &mut Frame,
        op: LogicOp,
        (le, l): (&Expr, Val),
        (re, r): (&Expr, Val),
        at_right: Option<usize>,
    ) -> Val {
        let word = if op == LogicOp::And { "and" } else { "or" };
        for (e, v) in [(le, &l), (re, &r)] {
            if v.ty.is_block() {
                let d = Diagnostic::new(
                    Code::E0303,
                    format!("`{word}` cannot be applied to a block"),
                    self.loc(f, e.span),
                    format!("this is {}", v.ty),
                )
                .with_help(format!(
                    "use `{}` for elementwise logic on blocks (with parentheses: `(a < b) {} (c < d)`)",
                    if op == LogicOp::And { "&" } else { "|" },
                    if op == LogicOp::And { "&" } else { "|" }
                ));
                self.emit(f, d);
                return Val::unknown();
            }
        }
        if let Some(a) = &l.konst {
            if let Some(t) = consteval::truthy(a) {
                // Python: `a and b` is `b` if a is true, else `a`.
                let take_right = if op == LogicOp::And { t } else { !t };
                if take_right {
                    return r;
                }
                // The right operand does not run (it was only checked).
                if let (Some(b), Some(m)) = (self.builder.as_mut(), at_right) {
                    b.discard_since(m);
                }
                return l;
            }
        }
        if l.ty.is_unknown() || r.ty.is_unknown() {
            return Val {
                is_const: l.is_const && r.is_const,
                ..Val::unknown()
            };
        }
        for (e, v) in [(le, &l), (re, &r)] {
            if !matches!(v.ty, Ty::Scalar(Elem::Num(_))) {
                self.error(
                    f,
                    Code::E0300,
                    format!("`{word}` needs scalar numbers or bools, found {}", v.ty),
                    e.span,
                    "unsupported operand",
                );
                return Val::unknown();
            }
        }
        // The right operand runs only when the left does not decide, as in
        // Python: an `if` when it has an effect or may fail (`i < n and
        // tl.load(x + i) > 0` must not read x[n]); otherwise both are
        // computed and combined, with the same result.
        if let Some(m) = at_right.filter(|&m| self.builder.as_ref().is_some_and(|b| b.effectful_since(m))) {
            let ir = self.short_circuit(f, op, (le, &l), (re, &r), m);
            return Val {
                ty: Ty::num(DType::Bool),
                konst: None,
                is_const: false,
                ir,
                parts: Vec::new(),
            };
        }
        let ir = if self.emitting() {
            let a = self.bool_scalar(f, &l, le.span);
            let b = self.bool_scalar(f, &r, re.span);
            let op = if op == LogicOp::And {
                ir::BinaryOp::And
            } else {
                ir::BinaryOp::Or
            };
            self.emit_value(
                f,
                Op::Binary(op),
                vec![a, b],
                &Ty::num(DType::Bool),
                le.span.to(re.span),
            )
        } else {
            None
        };
        Val {
            ty: Ty::num(DType::Bool),
            konst: None,
            is_const: l.is_const && r.is_const,
            ir,
            parts: Vec::new(),
        }
    }

    /// `l and r` (`l or r`) as `if l { r } else { False }` (`if l { True }
    /// else { r }`), the right operand's instructions (from mark
    /// `at_right` in the cursor's region) moved into its branch.
    fn short_circuit(
        &mut self,
        f: &Frame,
        op: LogicOp,
        (le, l): (&Expr, &Val),
        (re, r): (&Expr, &Val),
        at_right: usize,
    ) -> Option<ir::Value> {
        let bd = self.builder.as_mut()?;
        let (right_r, _) = bd.new_region(&[]);
        let (other_r, _) = bd.new_region(&[]);
        bd.move_since(at_right, right_r);
        let c = self.bool_scalar(f, l, le.span)?;
        let loc = self.loc(f, le.span.to(re.span));
        let (then_r, else_r) = match op {
            LogicOp::And => (right_r, other_r),
            LogicOp::Or => (other_r, right_r),
        };
        let (inst, _) = self
            .builder
            .as_mut()?
            .push(Op::If, vec![c], vec![], vec![then_r, else_r], loc);
        self.builder.as_mut()?.enter(right_r);
        let x = self.bool_scalar(f, r, re.span);
        self.emit_effect(f, Op::Yield, vec![x], re.span);
        self.builder.as_mut()?.leave();
        self.builder.as_mut()?.enter(other_r);
        let decided = self.const_of(f, &Konst::Bool(op == LogicOp::Or), DType::Bool, le.span);
        self.emit_effect(f, Op::Yield, vec![decided], le.span);
        self.builder.as_mut()?.leave();
        let bool_ty = ir::Type::Scalar(Elem::Num(DType::Bool));
        self.builder.as_mut()?.set_results(inst, vec![bool_ty]).first().copied()
    }

    /// The value of `a if c else b` (or any two-way join of expressions).
    fn join_values(&mut self, f: &mut Frame, (ae, a): (&Expr, Val), (be, b): (&Expr, Val), span: Span) -> Val {
        if a.ty.is_unknown() || b.ty.is_unknown() {
            return Val::unknown();
        }
        if a.ty == b.ty {
            return Val::runtime(a.ty);
        }
        match (a.ty.elem(), b.ty.elem()) {
            (Some(Elem::Num(x)), Some(Elem::Num(y))) => {
                let Some(shape) = self.broadcast_operands(f, "the two branches", (ae.span, &a.ty), (be.span, &b.ty))
                else {
                    return Val::unknown();
                };
                let Some(d) = self.promote_or_report(f, "`if`/`else`", (x, a.is_weak()), (y, b.is_weak()), false, span)
                else {
                    return Val::unknown();
                };
                Val::runtime(Ty::with_shape(Elem::Num(d), shape))
            }
            _ => {
                let d = Diagnostic::new(
                    Code::E0300,
                    format!("the branches have different types: {} and {}", a.ty, b.ty),
                    self.loc(f, span),
                    "branches disagree",
                )
                .with_secondary(self.loc(f, ae.span), format!("{}", a.ty))
                .with_secondary(self.loc(f, be.span), format!("{}", b.ty));
                self.emit(f, d);
                Val::unknown()
            }
        }
    }

    fn subscript(&mut self, f: &mut Frame, v: Val, indices: &[Index], value_span: Span, span: Span) -> Val {
        // `x[]` (a syntax error in Python) would read as `x` but lose
        // what is known of it (a constant would no longer be one).
        if indices.is_empty() {
            let d = Diagnostic::new(
                Code::E0325,
                "an empty subscript",
                self.loc(f, span),
                "nothing between `[]`",
            )
            .with_help("write the value itself, or `x[None]` to add an axis");
            self.emit(f, d);
            return Val::unknown();
        }
        // Indexing a tuple with a constant: `x.shape[0]`, `(a, b)[1]`. Its
        // elements as unpacking gives them (a tuple of unbound constexprs
        // gives unknown constants).
        let items: Option<Vec<Val>> = match (&v.konst, &v.ty) {
            (Some(Konst::Tuple(ks)), _) => Some(ks.iter().cloned().map(Val::konst).collect()),
            (_, Ty::Tuple(ts)) if v.parts.len() == ts.len() => Some(v.parts.clone()),
            (_, Ty::Tuple(ts)) => Some(ts.iter().cloned().map(Val::runtime).collect()),
            _ => None,
        };
        if let (Some(items), [Index::Expr(ie)]) = (items, indices) {
            let iv = self.expr(f, ie);
            return match iv.konst.as_ref().and_then(Konst::as_int) {
                Some(i) => {
                    let n = items.len() as i64;
                    let j = if i < 0 { i + n } else { i };
                    if (0..n).contains(&j) {
                        return items[j as usize].clone();
                    }
                    self.error(
                        f,
                        Code::E0325,
                        format!("index {i} is out of range for a tuple of {n}"),
                        ie.span,
                        "out of range",
                    );
                    Val::unknown()
                }
                // An unbound constexpr, or a constant checking does not
                // enumerate (a long `tl.static_range`'s index): the element
                // is not known either (lowering unrolls, and checks it).
                None if (iv.ty.is_unknown() || iv.is_const) && v.is_const => Val::unbound_const(),
                None if iv.ty.is_unknown() || iv.is_const => Val::unknown(),
                None => {
                    self.error(
                        f,
                        Code::E0209,
                        "a tuple index must be a compile-time integer",
                        ie.span,
                        "not a constant",
                    );
                    Val::unknown()
                }
            };
        }
        let shape: Vec<Dim> = match &v.ty {
            Ty::Unknown => {
                for i in indices {
                    if let Index::Expr(e) = i {
                        self.expr(f, e);
                    }
                }
                return Val::unknown();
            }
            Ty::Scalar(_) | Ty::Block(..) => v.ty.shape().map(|s| s.to_vec()).unwrap_or_default(),
            other => {
                let d = Diagnostic::new(
                    Code::E0325,
                    format!("{other} cannot be subscripted"),
                    self.loc(f, span),
                    "subscript",
                )
                .with_secondary(self.loc(f, value_span), format!("this is {other}"));
                self.emit(f, d);
                return Val::unknown();
            }
        };
        let elem = v.ty.elem().unwrap_or(Elem::Num(DType::I32));
        let mut out = Vec::new();
        let mut axis = 0usize;
        for i in indices {
            match i {
                Index::Full(s) => {
                    if axis >= shape.len() {
                        let d = Diagnostic::new(
                            Code::E0325,
                            format!("too many `:` for a value of rank {}", shape.len()),
                            self.loc(f, *s),
                            "no axis left",
                        )
                        .with_secondary(self.loc(f, value_span), format!("this is {}", v.ty));
                        self.emit(f, d);
                        return Val::unknown();
                    }
                    out.push(shape[axis]);
                    axis += 1;
                }
                Index::Expr(e) if matches!(e.kind, ExprKind::NoneLit) => out.push(Some(1)),
                Index::Expr(e) => {
                    self.expr(f, e);
                    let d = Diagnostic::new(
                        Code::E0325,
                        "blocks can only be subscripted with `:` and `None`",
                        self.loc(f, e.span),
                        "unsupported index",
                    )
                    .with_note("`x[:, None]` adds an axis; to read elements, use `tl.load` on pointers")
                    .with_help("select elements with `tl.where`, or reduce with `tl.sum`/`tl.max`");
                    self.emit(f, d);
                    return Val::unknown();
                }
            }
        }
        out.extend_from_slice(&shape[axis..]);
        let ty = Ty::with_shape(elem, out);
        // Adding unit axes keeps the elements in order: a reshape (or a
        // splat, for a scalar).
        let ir = match Self::ir_type(&ty) {
            Some(t) if self.emitting() => {
                let x = match (v.ir, &v.konst) {
                    (Some(x), _) => Some(x),
                    (None, Some(k)) => match elem {
                        Elem::Num(d) => self.const_of(f, k, d, value_span),
                        Elem::Ptr(_) => None,
                    },
                    (None, None) => None,
                };
                let op = if matches!(v.ty, Ty::Scalar(_)) {
                    Op::Splat
                } else {
                    Op::Reshape
                };
                self.emit_typed(f, op, vec![x], t, span)
            }
            _ => None,
        };
        Val {
            ty,
            konst: None,
            is_const: v.is_const,
            ir,
            parts: Vec::new(),
        }
    }
}

/// The IR operation of a source binary operator (`**` never reaches IR).
fn ir_binary(op: BinOp) -> ir::BinaryOp {
    match op {
        BinOp::Add | BinOp::Pow => ir::BinaryOp::Add,
        BinOp::Sub => ir::BinaryOp::Sub,
        BinOp::Mul => ir::BinaryOp::Mul,
        BinOp::Div => ir::BinaryOp::Div,
        BinOp::FloorDiv => ir::BinaryOp::FloorDiv,
        BinOp::Mod => ir::BinaryOp::Mod,
        BinOp::Shl => ir::BinaryOp::Shl,
        BinOp::Shr => ir::BinaryOp::Shr,
        BinOp::BitAnd => ir::BinaryOp::And,
        BinOp::BitOr => ir::BinaryOp::Or,
        BinOp::BitXor => ir::BinaryOp::Xor,
    }
}

fn ir_cmp(op: CmpOp) -> ir::CmpOp {
    match op {
        CmpOp::Lt => ir::CmpOp::Lt,
        CmpOp::Le => ir::CmpOp::Le,
        CmpOp::Gt => ir::CmpOp::Gt,
        CmpOp::Ge => ir::CmpOp::Ge,
        CmpOp::Eq | CmpOp::Is => ir::CmpOp::Eq,
        CmpOp::Ne | CmpOp::IsNot => ir::CmpOp::Ne,
    }
}

/// The values an integer dtype holds; `None` for floats (and for `bool`,
/// which a weak integer constant never meets: promotion makes it i32).
pub(super) fn int_range(d: DType) -> Option<(i128, i128)> {
    if d.is_float() || d == DType::Bool {
        return None;
    }
    let bits = d.bits();
    Some(if d.is_signed() {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    })
}

/// What to write instead of a Triton built-in `tl` does not have
/// (docs/language.md §12.3).
fn triton_only_help(name: &str) -> Option<String> {
    Some(match name {
        "multiple_of" | "max_contiguous" | "max_constancy" => {
            format!("`tl.{name}` is a hint to Triton's compiler, which this one does not need: pass the value itself")
        }
        "debug_barrier" => "a PE runs its operations in program order (one program, no threads to synchronize): \
                            remove it; `tl.barrier()` synchronizes the ranks of a communicator"
            .to_string(),
        "static_print" => {
            "`tl.static_assert(cond, msg)` checks a constant; `tl.device_print` prints at run time".to_string()
        }
        "range" => "loop with Python's `range(...)` (a run-time loop) or `tl.static_range(...)` (unrolled)".to_string(),
        "permute" => "`tl.trans(x, *dims)` permutes the axes".to_string(),
        "expand_dims" => "index with `None` to add an axis: `x[:, None]`, `x[None, :]`".to_string(),
        "view" => "`tl.reshape(x, shape)` gives the same elements in another shape".to_string(),
        "make_block_ptr" | "advance" => {
            "block pointers are not supported: compute a block of pointers (`ptr + offsets`) and pass a mask"
                .to_string()
        }
        "cumsum" | "cumprod" | "associative_scan" | "reduce" | "cat" | "join" | "split" | "erf" | "rand" | "randn"
        | "histogram" | "sort" | "gather" | "atomic_max" | "atomic_min" | "atomic_cas" | "atomic_xchg"
        | "atomic_and" | "atomic_or" | "atomic_xor" => {
            format!("`tl.{name}` is not supported (docs/language.md §12.3 lists what is missing)")
        }
        _ => return None,
    })
}
