//! The checker's state and statements: kernels and helpers, assignments,
//! control flow (with compile-time `if` and unrolled `tl.static_range`),
//! and the merging of variable types where control flow joins.

use super::program::{FuncKind, ModuleData};
use super::types::{DType, Elem, FuncId, Konst, ModId, Ty};
use super::{CheckOutput, KernelSummary, Options};
use crate::diag::{Code, Diagnostic, Diagnostics, SourceMap};
use crate::span::{Loc, Span};
use crate::syntax::ast::{self, Expr, ExprKind, Stmt, StmtKind, Target};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::rc::Rc;

/// The checker's knowledge of one value.
#[derive(Clone, Debug, PartialEq)]
pub struct Val {
    pub ty: Ty,
    /// The value, when known at compile time.
    pub konst: Option<Konst>,
    /// A compile-time value (literal, constexpr, or folded from them), even
    /// if its value is not bound yet. Such scalars are *weak* in promotion.
    pub is_const: bool,
    /// The IR value computing it, when lowering (never for constants that
    /// no instruction has needed yet).
    pub ir: Option<crate::ir::Value>,
    /// The elements of a tuple of run-time values (`return a, b`).
    pub parts: Vec<Val>,
}

impl Val {
    pub fn unknown() -> Val {
        Val {
            ty: Ty::Unknown,
            konst: None,
            is_const: false,
            ir: None,
            parts: Vec::new(),
        }
    }

    /// A constexpr whose value is not bound (no default, no `-D`).
    pub fn unbound_const() -> Val {
        Val {
            ty: Ty::Unknown,
            konst: None,
            is_const: true,
            ir: None,
            parts: Vec::new(),
        }
    }

    /// A tuple, constant or not (`(a, b)`, `x.shape`, a helper's
    /// `return a, b`).
    pub fn is_tuple(&self) -> bool {
        matches!(self.ty, Ty::Tuple(_)) || matches!(self.konst, Some(Konst::Tuple(_)))
    }

    pub fn runtime(ty: Ty) -> Val {
        Val {
            ty,
            konst: None,
            is_const: false,
            ir: None,
            parts: Vec::new(),
        }
    }

    pub fn konst(k: Konst) -> Val {
        Val {
            ty: k.ty(),
            konst: Some(k),
            is_const: true,
            ir: None,
            parts: Vec::new(),
        }
    }

    pub fn none() -> Val {
        Val::konst(Konst::None)
    }

    /// A compile-time scalar: weak in promotion.
    pub fn is_weak(&self) -> bool {
        self.is_const && matches!(self.ty, Ty::Scalar(_))
    }

    /// The same value as a run-time one (a loop-carried variable that starts
    /// from a constant).
    pub fn materialized(&self) -> Val {
        Val::runtime(self.ty.clone())
    }
}

#[derive(Clone, Debug)]
pub(super) enum VarState {
    Defined,
    /// Assigned only on some paths (one branch of an `if`, inside a loop);
    /// the span is where.
    MaybeUndefined(Span),
}

#[derive(Clone, Debug)]
pub(super) struct Var {
    pub val: Val,
    /// The latest assignment.
    pub def: Span,
    /// A constexpr parameter or `NAME: constexpr = …`: not assignable.
    pub constexpr: bool,
    pub state: VarState,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LoopKind {
    Runtime,
    Static,
}

/// One activation of a kernel or helper body (or a module's constants).
pub(super) struct Frame {
    pub module: ModId,
    pub func: Option<FuncId>,
    pub is_kernel: bool,
    pub vars: HashMap<String, Var>,
    pub loops: Vec<LoopKind>,
    /// Where this helper activation was called from, for diagnostics.
    pub call_site: Option<Loc>,
    pub ret: Option<Val>,
    /// The current block ended in `break`, `continue` or `return`.
    pub terminated: bool,
    /// The function has a syntax error: unresolved names are not reported
    /// (the broken statement may have defined them).
    pub lenient_names: bool,
    /// When lowering: the carried variables of each enclosing run-time loop
    /// (what `break` and `continue` pass on).
    pub loop_carried: Vec<Vec<(String, crate::ir::Type)>>,
}

impl Frame {
    pub fn new(module: ModId, func: Option<FuncId>, is_kernel: bool) -> Frame {
        Frame {
            module,
            func,
            is_kernel,
            vars: HashMap::new(),
            loops: Vec::new(),
            call_site: None,
            ret: None,
            terminated: false,
            lenient_names: false,
            loop_carried: Vec::new(),
        }
    }
}

pub(super) struct Checker {
    pub sources: SourceMap,
    pub diags: Diagnostics,
    pub options: Options,
    pub modules: Vec<ModuleData>,
    pub funcs: Vec<super::program::FuncData>,
    pub by_path: HashMap<PathBuf, ModId>,
    pub roots: Vec<ModId>,
    /// Helpers being checked, innermost last (recursion detection).
    pub active: Vec<FuncId>,
    /// Helpers whose body raised an error in some call: later calls check
    /// their arguments but not the body again, whose errors would only
    /// repeat (see [`Checker::call_helper`]).
    pub erred_helpers: HashSet<FuncId>,
    pub kernels: Vec<KernelSummary>,
    /// `-D` names some kernel used.
    pub used_defines: HashSet<String>,
    /// Statements checked so far (unrolled loops and inlined helpers
    /// included); see [`MAX_CHECK_STEPS`].
    pub steps: u64,
    pub budget_exhausted: bool,
    /// Present while lowering a kernel to IR (see `emit.rs`).
    pub builder: Option<crate::ir::Builder>,
    /// Lowering met a value it could not emit.
    pub emit_failed: bool,
}

/// How many statements one run may check before giving up with E0327:
/// nested `tl.static_range`s and helpers calling helpers multiply. The
/// stdlib's largest kernel checks in far fewer; a program at the limit
/// lowers to about as many IR instructions, which takes seconds to check,
/// lower, verify and plan (2 s for 10⁶ in release, 5 s under the fuzzer's
/// instrumentation) and is no kernel one would run.
const MAX_CHECK_STEPS: u64 = 500_000;

/// Iterations of `range(start, stop, step)` (step not zero), exactly.
fn static_trips(start: i64, stop: i64, step: i64) -> i128 {
    let (a, b, s) = (i128::from(start), i128::from(stop), i128::from(step));
    if s > 0 {
        (b - a + s - 1).max(0) / s
    } else {
        (a - b - s - 1).max(0) / (-s)
    }
}

/// How many helper calls may nest; deeper is reported as recursion.
pub(crate) const MAX_CALL_DEPTH: usize = 64;
/// `tl.static_range` loops longer than this are checked once, not unrolled.
const MAX_UNROLL_CHECK: i64 = 1024;

impl Checker {
    pub fn new(options: Options) -> Checker {
        Checker {
            sources: SourceMap::new(),
            diags: Diagnostics::default(),
            options,
            modules: Vec::new(),
            funcs: Vec::new(),
            by_path: HashMap::new(),
            roots: Vec::new(),
            active: Vec::new(),
            erred_helpers: HashSet::new(),
            kernels: Vec::new(),
            used_defines: HashSet::new(),
            steps: 0,
            budget_exhausted: false,
            builder: None,
            emit_failed: false,
        }
    }

    pub fn loc(&self, f: &Frame, span: Span) -> Loc {
        Loc::new(self.modules[f.module.0 as usize].file, span)
    }

    /// Reports a diagnostic made in frame `f`; inside a helper call it
    /// points back at the call being checked.
    pub fn emit(&mut self, f: &Frame, mut d: Diagnostic) {
        if let Some(site) = f.call_site {
            if site != d.primary.loc {
                d = d.with_secondary(site, "in this call");
            }
        }
        self.diags.push(d);
    }

    pub fn error(&mut self, f: &Frame, code: Code, message: impl Into<String>, span: Span, label: impl Into<String>) {
        let d = Diagnostic::new(code, message, self.loc(f, span), label);
        self.emit(f, d);
    }

    pub fn finish(mut self) -> CheckOutput {
        for r in self.roots.clone() {
            self.check_module_functions(r);
        }
        self.finish_without_recheck()
    }

    /// The output, once every root module has been checked.
    fn finish_without_recheck(mut self) -> CheckOutput {
        for (name, _) in self.options.defines.clone() {
            if !self.used_defines.contains(&name) && !self.kernels.is_empty() {
                let names: Vec<String> = self
                    .kernels
                    .iter()
                    .flat_map(|k| k.constexprs.iter().map(|(n, _)| n.clone()))
                    .collect();
                let help = super::suggest::nearest(&name, names.iter().map(|s| s.as_str()));
                let first = self.roots.first().map(|m| self.modules[m.0 as usize].file);
                if let Some(file) = first {
                    let mut d = Diagnostic::new(
                        Code::E0211,
                        format!("`-D {name}=…` matches no constexpr parameter of any kernel"),
                        Loc::new(file, Span::new(0, 0)),
                        "checked kernels are in this file",
                    );
                    if let Some(h) = help {
                        d = d.with_help(format!("did you mean `{h}`?"));
                    }
                    self.diags.push(d);
                }
            }
        }
        CheckOutput {
            sources: self.sources,
            diagnostics: super::sorted(self.diags),
            kernels: self.kernels,
        }
    }

    /// Checks every kernel and helper defined in module `m`.
    fn check_module_functions(&mut self, m: ModId) {
        let funcs: Vec<FuncId> = self.modules[m.0 as usize].funcs.clone();
        for fid in funcs {
            match self.funcs[fid.0 as usize].kind {
                FuncKind::Kernel => {
                    self.check_kernel(fid, false);
                }
                FuncKind::Helper => self.check_helper_alone(fid),
            }
        }
    }

    /// Checks a kernel with its constexprs bound from defaults and `-D`.
    /// Checks a kernel with its constexprs bound from defaults and `-D`;
    /// with `lower`, also builds its IR (all constexprs must be bound).
    fn check_kernel(&mut self, fid: FuncId, lower: bool) -> Option<crate::ir::Function> {
        let func = self.funcs[fid.0 as usize].clone();
        let def = func.def.clone();
        let mut f = Frame::new(func.module, Some(fid), true);
        f.lenient_names = func.has_syntax_errors;
        let mut constexprs = Vec::new();
        // Constexpr parameters first: other annotations (`ptr[T]`) may
        // refer to them.
        let mut annots = Vec::new();
        for p in &def.params {
            let annot = match &p.annotation {
                Some(a) => self.annotation(&mut f, a),
                None => {
                    let n = &p.name.name;
                    let d = Diagnostic::new(
                        Code::E0207,
                        format!("kernel parameter `{n}` has no type annotation"),
                        self.loc(&f, p.name.span),
                        "annotation needed",
                    )
                    .with_help(format!(
                        "annotate it: `{n}: ptr[f32]` for a tensor, `{n}: i32` for a scalar, `{n}: constexpr` for a \
                         compile-time constant"
                    ));
                    self.emit(&f, d);
                    Annot::Unknown
                }
            };
            annots.push(annot);
        }
        for (p, annot) in def.params.iter().zip(&annots) {
            if !matches!(annot, Annot::Constexpr) {
                continue;
            }
            let bound = if let Some(k) = self.options.defines.get(&p.name.name) {
                self.used_defines.insert(p.name.name.clone());
                Some(Val::konst(k.clone()))
            } else if let Some(default) = &p.default {
                let v = self.expr(&mut f, default);
                if !v.is_const && !v.ty.is_unknown() {
                    self.error(
                        &f,
                        Code::E0209,
                        "a constexpr default must be a compile-time constant",
                        default.span,
                        "not a constant",
                    );
                }
                Some(v).filter(|v| v.konst.is_some())
            } else {
                None
            };
            constexprs.push((p.name.name.clone(), bound.as_ref().and_then(|v| v.konst.clone())));
            let val = bound.unwrap_or_else(Val::unbound_const);
            self.bind_param(&mut f, p, val, true);
        }
        if lower {
            let unbound: Vec<&str> = constexprs
                .iter()
                .filter(|c| c.1.is_none())
                .map(|c| c.0.as_str())
                .collect();
            if !unbound.is_empty() {
                let list = unbound.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
                let flags = unbound
                    .iter()
                    .map(|n| format!("-D {n}=…"))
                    .collect::<Vec<_>>()
                    .join(" ");
                let d = Diagnostic::new(
                    Code::E0214,
                    format!(
                        "kernel `{}` cannot be compiled: constexpr {list} has no value",
                        def.name.name
                    ),
                    self.loc(&f, def.name.span),
                    "needs a specialization",
                )
                .with_help(format!("give it a default in the signature, or pass {flags}"));
                self.emit(&f, d);
                return None;
            }
            let bound: Vec<(String, Konst)> = constexprs
                .iter()
                .filter_map(|(n, k)| Some((n.clone(), k.clone()?)))
                .collect();
            self.builder = Some(crate::ir::Builder::new(&def.name.name, bound));
        }
        for (p, annot) in def.params.iter().zip(annots) {
            let val = match annot {
                Annot::Constexpr => continue,
                Annot::Type(ty) => Val::runtime(ty),
                Annot::PtrOf(expr) => {
                    let d = self.dtype_expr(&mut f, &expr);
                    d.map_or_else(Val::unknown, |d| Val::runtime(Ty::Scalar(Elem::Ptr(d))))
                }
                Annot::Unknown => Val::unknown(),
            };
            if p.default.is_some() {
                self.error(
                    &f,
                    Code::E0212,
                    format!(
                        "only constexpr parameters can have defaults; `{}` is a run-time argument",
                        p.name.name
                    ),
                    p.span,
                    "default on a run-time parameter",
                );
            }
            let ir = match (Self::ir_type(&val.ty), self.builder.as_mut()) {
                (Some(t), Some(b)) => Some(b.add_param(&p.name.name, t)),
                _ => None,
            };
            self.bind_param(&mut f, p, val.with_ir(ir), false);
        }
        if let Some(r) = def.returns.as_ref().filter(|r| !matches!(r.kind, ExprKind::NoneLit)) {
            self.error(
                &f,
                Code::E0206,
                "a kernel cannot return a value",
                r.span,
                "return annotation on a kernel",
            )
        }
        self.block(&mut f, &def.body);
        if let Some(mut b) = self.builder.take() {
            let body = b.func().body;
            if !b.is_terminated(body) {
                let loc = self.loc(&f, Span::new(def.name.span.lo, def.name.span.lo));
                b.push(crate::ir::Op::Return, vec![], vec![], vec![], loc);
            }
            return Some(b.finish());
        }
        let file = self.sources.name(self.modules[func.module.0 as usize].file).to_string();
        if self.roots.contains(&func.module) {
            self.kernels.push(KernelSummary {
                name: def.name.name.clone(),
                file,
                constexprs,
            });
        }
        None
    }

    /// Checks everything, then lowers kernel `name` of the root files.
    pub fn lower(mut self, name: &str) -> (CheckOutput, Result<crate::ir::Function, String>) {
        let roots = self.roots.clone();
        let mut found = None;
        let mut names = Vec::new();
        for m in &roots {
            for &fid in &self.modules[m.0 as usize].funcs {
                let fd = &self.funcs[fid.0 as usize];
                if fd.kind == FuncKind::Kernel {
                    names.push(fd.def.name.name.clone());
                    if fd.def.name.name == name && found.is_none() {
                        found = Some(fid);
                    }
                }
            }
        }
        let Some(fid) = found else {
            let out = self.finish();
            let available = if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            };
            return (
                out,
                Err(format!("no kernel named `{name}` (kernels in the file: {available})")),
            );
        };
        // Check everything first: lowering is for programs without errors.
        for r in roots {
            self.check_module_functions(r);
        }
        if self.diags.has_errors() {
            let out = self.finish_without_recheck();
            return (out, Err("the program has errors".into()));
        }
        let mut lowered = self.check_kernel(fid, true);
        // Lowering emits a loop's scalar invariants where the source names
        // them; they run once, before the loop (ir/hoist.rs says why).
        if let Some(func) = lowered.as_mut() {
            crate::ir::hoist_loop_invariants(func);
        }
        let failed = self.emit_failed;
        let out = self.finish_without_recheck();
        match lowered {
            _ if out.has_errors() => (out, Err("the program has errors".into())),
            Some(func) if !failed => match crate::ir::verify(&func) {
                Ok(()) => (out, Ok(func)),
                Err(errs) => (
                    out,
                    Err(format!(
                        "internal compiler error: invalid IR for `{name}`:\n{}",
                        errs.join("\n")
                    )),
                ),
            },
            _ => (
                out,
                Err(format!("internal compiler error: `{name}` could not be lowered")),
            ),
        }
    }

    fn bind_param(&mut self, f: &mut Frame, p: &ast::Param, val: Val, constexpr: bool) {
        if f.vars.contains_key(&p.name.name) {
            // Reported once by the item collector (E0105).
            return;
        }
        f.vars.insert(
            p.name.name.clone(),
            Var {
                val,
                def: p.name.span,
                constexpr,
                state: VarState::Defined,
            },
        );
    }

    /// Checks a helper on its own, with parameter types from annotations
    /// (or unknown), so its name errors are found even when it is unused.
    fn check_helper_alone(&mut self, fid: FuncId) {
        let func = self.funcs[fid.0 as usize].clone();
        let def = func.def.clone();
        let mut f = Frame::new(func.module, Some(fid), false);
        f.lenient_names = func.has_syntax_errors;
        for p in &def.params {
            let (val, constexpr) = match &p.annotation {
                Some(a) => match self.annotation(&mut f, a) {
                    Annot::Constexpr => (Val::unbound_const(), true),
                    Annot::Type(ty) => (Val::runtime(ty), false),
                    Annot::PtrOf(e) => {
                        let d = self.dtype_expr(&mut f, &e);
                        (
                            d.map_or_else(Val::unknown, |d| Val::runtime(Ty::Scalar(Elem::Ptr(d)))),
                            false,
                        )
                    }
                    Annot::Unknown => (Val::unknown(), false),
                },
                None => (Val::unknown(), false),
            };
            self.bind_param(&mut f, p, val, constexpr);
        }
        self.active.push(fid);
        self.block(&mut f, &def.body);
        self.active.pop();
    }

    /// Checks a call of helper `fid` with the given argument values.
    pub fn call_helper(
        &mut self,
        caller: &mut Frame,
        fid: FuncId,
        args: Vec<super::expr::ArgVal>,
        call: Span,
        callee_span: Span,
    ) -> Val {
        let func = self.funcs[fid.0 as usize].clone();
        let def = func.def.clone();
        if func.kind == FuncKind::Kernel {
            let d = Diagnostic::new(
                Code::E0205,
                format!("kernel `{}` cannot be called from a kernel", def.name.name),
                self.loc(caller, callee_span),
                "called here",
            )
            .with_secondary(
                Loc::new(self.modules[func.module.0 as usize].file, def.name.span),
                "declared `@kernel` here",
            )
            .with_help("remove `@kernel` to make it a helper (helpers are inlined)");
            self.emit(caller, d);
            return Val::unknown();
        }
        if self.active.contains(&fid) {
            let d = Diagnostic::new(
                Code::E0109,
                format!("helper `{}` calls itself", def.name.name),
                self.loc(caller, callee_span),
                "recursive call",
            )
            .with_note("helpers are inlined at each call site, so they cannot recurse");
            self.emit(caller, d);
            return Val::unknown();
        }
        if self.active.len() >= MAX_CALL_DEPTH {
            // Not recursion: a chain of distinct helpers past the limit
            // (each level is inlined into the one above it).
            let d = Diagnostic::new(
                Code::E0109,
                format!("helper calls nest more than {MAX_CALL_DEPTH} deep"),
                self.loc(caller, callee_span),
                format!("call {} of a chain of nested helper calls", MAX_CALL_DEPTH + 1),
            )
            .with_note(format!(
                "helpers are inlined at each call site, and calls may nest at most {MAX_CALL_DEPTH} deep"
            ));
            self.emit(caller, d);
            return Val::unknown();
        }
        let params: Vec<(&str, bool)> = def
            .params
            .iter()
            .map(|p| (p.name.name.as_str(), p.default.is_none()))
            .collect();
        let Some(bound) = self.bind_args(caller, &format!("`{}`", def.name.name), &params, None, args, call) else {
            return Val::unknown();
        };
        let mut f = Frame::new(func.module, Some(fid), false);
        f.lenient_names = func.has_syntax_errors;
        f.call_site = Some(caller.call_site.unwrap_or(self.loc(caller, call)));
        for (p, arg) in def.params.iter().zip(bound.fixed) {
            let annot = p.annotation.as_ref().map(|a| self.annotation(&mut f, a));
            let val = match arg {
                Some(a) => match &annot {
                    Some(Annot::Constexpr) if !a.val.is_const && !a.val.ty.is_unknown() => {
                        let d = Diagnostic::new(
                            Code::E0209,
                            format!(
                                "parameter `{}` is a constexpr, but this argument is a run-time value",
                                p.name.name
                            ),
                            self.loc(caller, a.span),
                            format!("{} known only at run time", a.val.ty),
                        )
                        .with_secondary(
                            Loc::new(self.modules[func.module.0 as usize].file, p.name.span),
                            "declared constexpr here",
                        );
                        self.emit(caller, d);
                        Val::unbound_const()
                    }
                    Some(Annot::Type(ty)) => {
                        let ty = ty.clone();
                        self.convert_to_declared(caller, a.val, &ty, a.span)
                    }
                    Some(Annot::PtrOf(e)) => {
                        let e = e.clone();
                        match self.dtype_expr(&mut f, &e).map(|d| Ty::Scalar(Elem::Ptr(d))) {
                            Some(ty) if !a.val.ty.compatible(&ty) => {
                                let d = Diagnostic::new(
                                    Code::E0300,
                                    format!("expected {ty}, found {}", a.val.ty),
                                    self.loc(caller, a.span),
                                    format!("this is {}", a.val.ty),
                                );
                                self.emit(caller, d);
                                Val::runtime(ty)
                            }
                            _ => a.val,
                        }
                    }
                    _ => a.val,
                },
                None => match &p.default {
                    Some(d) => {
                        let mut df = Frame::new(func.module, None, false);
                        self.expr(&mut df, d)
                    }
                    None => Val::unknown(),
                },
            };
            let constexpr = matches!(annot, Some(Annot::Constexpr));
            self.bind_param(&mut f, p, val, constexpr);
        }
        if self.erred_helpers.contains(&fid) {
            return Val::unknown();
        }
        let errors = self.diags.error_count();
        self.active.push(fid);
        self.block(&mut f, &def.body);
        self.active.pop();
        if self.diags.error_count() > errors {
            // Checking the body again at every call would repeat the same
            // errors (deduplicated at the same place) and cost a full check
            // each time: a fan-out of calls to a helper with a typo spent
            // seconds in the typo's suggestion search.
            self.erred_helpers.insert(fid);
            return Val::unknown();
        }
        f.ret.unwrap_or_else(Val::none)
    }

    // ----- statements -----

    pub fn block(&mut self, f: &mut Frame, stmts: &[Stmt]) {
        for s in stmts {
            if f.terminated || self.budget_exhausted {
                break;
            }
            self.steps += 1;
            if self.steps > MAX_CHECK_STEPS {
                self.budget_exhausted = true;
                let d = Diagnostic::new(
                    Code::E0327,
                    format!("this program unrolls to more than {MAX_CHECK_STEPS} statements"),
                    self.loc(f, s.span),
                    "checking stopped here",
                )
                .with_note("every `tl.static_range` iteration and every helper call is checked separately")
                .with_help("use `range(…)` for long loops; avoid helpers that call helpers many times");
                self.emit(f, d);
                break;
            }
            self.stmt(f, s);
        }
    }

    fn stmt(&mut self, f: &mut Frame, s: &Stmt) {
        match &s.kind {
            StmtKind::Expr(e) => {
                self.expr(f, e);
            }
            StmtKind::Assign { target, value } => {
                let v = self.expr(f, value);
                self.assign(f, target, v, value.span);
            }
            StmtKind::AugAssign {
                target,
                op,
                op_span,
                value,
            } => {
                let cur = self.name(f, &target.name, target.span);
                let rhs = self.expr(f, value);
                let lhs_expr = Expr::new(ExprKind::Name(target.name.clone()), target.span);
                // `x += y` is `x = x + y`, as in Python and Triton.
                let v = self.binary(f, *op, *op_span, (&lhs_expr, cur), (value, rhs), s.span);
                self.assign(f, &Target::Name(target.clone()), v, s.span);
            }
            StmtKind::AnnAssign {
                target,
                annotation,
                value,
            } => {
                let annot = self.annotation(f, annotation);
                let Some(value) = value else {
                    self.error(f, Code::E0107, "a declaration needs a value", s.span, "no `= value`");
                    return;
                };
                let v = self.expr(f, value);
                match annot {
                    Annot::Constexpr => {
                        if !v.is_const && !v.ty.is_unknown() {
                            self.error(
                                f,
                                Code::E0209,
                                format!(
                                    "`{}` is declared constexpr but its value is known only at run time",
                                    target.name
                                ),
                                value.span,
                                "not a constant",
                            );
                        }
                        if self.check_not_constexpr(f, target) {
                            f.vars.insert(
                                target.name.clone(),
                                Var {
                                    val: v,
                                    def: target.span,
                                    constexpr: true,
                                    state: VarState::Defined,
                                },
                            );
                        }
                    }
                    Annot::Type(ty) => {
                        let v = self.convert_to_declared(f, v, &ty, value.span);
                        self.assign(f, &Target::Name(target.clone()), v, s.span);
                    }
                    // `p: ptr[f16] = …`: the element type is checked as a
                    // parameter's is (it was ignored).
                    Annot::PtrOf(e) => {
                        let v = match self.dtype_expr(f, &e) {
                            Some(d) => self.convert_to_declared(f, v, &Ty::Scalar(Elem::Ptr(d)), value.span),
                            None => v,
                        };
                        self.assign(f, &Target::Name(target.clone()), v, s.span);
                    }
                    _ => self.assign(f, &Target::Name(target.clone()), v, s.span),
                }
            }
            StmtKind::If { branches, orelse } => self.if_chain(f, branches, orelse.as_deref()),
            StmtKind::For { var, iter, body } => self.for_loop(f, var, iter, body),
            StmtKind::While { cond, body } => self.while_loop(f, cond, body),
            StmtKind::Break | StmtKind::Continue => {
                let is_break = matches!(s.kind, StmtKind::Break);
                let word = if is_break { "break" } else { "continue" };
                match f.loops.last() {
                    None => {
                        let code = if is_break { Code::E0400 } else { Code::E0401 };
                        self.error(
                            f,
                            code,
                            format!("`{word}` outside of a loop"),
                            s.span,
                            format!("cannot `{word}` here"),
                        );
                    }
                    Some(LoopKind::Static) => {
                        let d = Diagnostic::new(
                            Code::E0404,
                            format!("`{word}` inside `tl.static_range`"),
                            self.loc(f, s.span),
                            "in an unrolled loop",
                        )
                        .with_help("use `range(…)` for a loop that can exit early");
                        self.emit(f, d);
                    }
                    Some(LoopKind::Runtime) => {
                        if let Some(r) = self.builder.as_ref().map(|b| b.current()) {
                            let carried = f.loop_carried.last().cloned().unwrap_or_default();
                            let vars = f.vars.clone();
                            let op = if is_break {
                                crate::ir::Op::Break
                            } else {
                                crate::ir::Op::Continue
                            };
                            self.yield_vars(f, r, &vars, &carried, op, s.span);
                        }
                    }
                }
                f.terminated = true;
            }
            StmtKind::Pass => {}
            StmtKind::Return(value) => {
                let v = value.as_ref().map(|e| (self.expr(f, e), e.span));
                if f.is_kernel {
                    if let Some(r) = self.builder.as_ref().map(|b| b.current()) {
                        if self.builder.as_ref().is_some_and(|b| !b.is_terminated(r)) {
                            self.emit_effect(f, crate::ir::Op::Return, vec![], s.span);
                        }
                    }
                    if let Some((_, span)) = v {
                        let d = Diagnostic::new(
                            Code::E0206,
                            "a kernel cannot return a value",
                            self.loc(f, span),
                            "returned here",
                        )
                        .with_help("write results to memory with `tl.store`");
                        self.emit(f, d);
                    }
                } else if f.func.is_some() {
                    f.ret = Some(v.map_or_else(Val::none, |(v, _)| v));
                }
                f.terminated = true;
            }
            StmtKind::Def(def) => {
                self.error(
                    f,
                    Code::E0107,
                    "functions cannot be defined inside functions",
                    def.name.span,
                    "nested `def`",
                );
            }
            StmtKind::FromImport { .. } | StmtKind::Import { .. } => {
                self.error(
                    f,
                    Code::E0107,
                    "imports belong at module level",
                    s.span,
                    "import inside a function",
                );
            }
            StmtKind::UnexpectedIndent(body) => self.block(f, body),
            StmtKind::Error => {}
        }
    }

    /// `true` when `target` may be assigned (it is not a constexpr).
    fn check_not_constexpr(&mut self, f: &Frame, target: &ast::Ident) -> bool {
        if let Some(var) = f.vars.get(&target.name) {
            if var.constexpr {
                let d = Diagnostic::new(
                    Code::E0402,
                    format!("cannot assign to constexpr `{}`", target.name),
                    self.loc(f, target.span),
                    "assignment to a constexpr",
                )
                .with_secondary(self.loc(f, var.def), "declared constexpr here")
                .with_help(format!("use a new name, e.g. `{}_val = …`", target.name.to_lowercase()));
                self.emit(f, d);
                return false;
            }
        } else if self.module_const_span(f.module, &target.name).is_some() {
            let def = self.module_const_span(f.module, &target.name).unwrap_or_default();
            let d = Diagnostic::new(
                Code::E0402,
                format!("cannot assign to module constant `{}`", target.name),
                self.loc(f, target.span),
                "assignment to a constexpr",
            )
            .with_secondary(self.loc(f, def), "defined here")
            .with_help("use a new local name");
            self.emit(f, d);
            return false;
        }
        true
    }

    pub fn assign(&mut self, f: &mut Frame, target: &Target, v: Val, value_span: Span) {
        match target {
            Target::Name(id) => {
                if id.name == "_" {
                    return;
                }
                if !self.check_not_constexpr(f, id) {
                    return;
                }
                // A block result keeps being a value of its own; constants
                // stay constants (Python semantics for constexpr folding).
                f.vars.insert(
                    id.name.clone(),
                    Var {
                        val: v,
                        def: id.span,
                        constexpr: false,
                        state: VarState::Defined,
                    },
                );
            }
            Target::Tuple(items, span) => {
                let parts: Option<Vec<Val>> = match (&v.ty, &v.konst) {
                    (_, Some(Konst::Tuple(ks))) => Some(ks.iter().cloned().map(Val::konst).collect()),
                    (Ty::Tuple(ts), _) if v.parts.len() == ts.len() => Some(v.parts.clone()),
                    (Ty::Tuple(ts), _) => Some(ts.iter().cloned().map(Val::runtime).collect()),
                    (Ty::Unknown, _) => None,
                    _ => {
                        self.error(
                            f,
                            Code::E0313,
                            format!("cannot unpack a value of type {} into {} names", v.ty, items.len()),
                            value_span,
                            "not a tuple",
                        );
                        None
                    }
                };
                match parts {
                    Some(parts) if parts.len() != items.len() => {
                        let d = Diagnostic::new(
                            Code::E0313,
                            format!("expected {} values to unpack, found {}", items.len(), parts.len()),
                            self.loc(f, value_span),
                            format!("gives {} values", parts.len()),
                        )
                        .with_secondary(self.loc(f, *span), format!("{} names", items.len()));
                        self.emit(f, d);
                        for t in items {
                            self.assign(f, t, Val::unknown(), value_span);
                        }
                    }
                    Some(parts) => {
                        for (t, p) in items.iter().zip(parts) {
                            self.assign(f, t, p, value_span);
                        }
                    }
                    None => {
                        for t in items {
                            self.assign(f, t, Val::unknown(), value_span);
                        }
                    }
                }
            }
        }
    }

    fn convert_to_declared(&mut self, f: &Frame, v: Val, ty: &Ty, span: Span) -> Val {
        if v.ty.is_unknown() || ty.is_unknown() || v.ty.compatible(ty) {
            return Val { ty: ty.clone(), ..v };
        }
        if v.is_weak() && matches!(ty, Ty::Scalar(Elem::Num(_))) {
            // The constant becomes a run-time value of the declared dtype.
            let as_declared = Val { ty: ty.clone(), ..v };
            return self.materialize(f, &as_declared, span);
        }
        self.error(
            f,
            Code::E0300,
            format!("expected {ty}, found {}", v.ty),
            span,
            format!("this is {}", v.ty),
        );
        Val::runtime(ty.clone())
    }

    /// A condition's compile-time truth (if known) and its value.
    pub fn condition_val(&mut self, f: &mut Frame, cond: &Expr, what: &str) -> (Option<bool>, Val) {
        let v = self.expr(f, cond);
        if let Some(k) = &v.konst {
            return (super::consteval::truthy(k), v);
        }
        match &v.ty {
            Ty::Block(_, shape) => {
                let d = Diagnostic::new(
                    Code::E0304,
                    format!("the condition of `{what}` must be a scalar, found {}", v.ty),
                    self.loc(f, cond.span),
                    format!("a block of shape {}", super::types::shape_string(shape)),
                )
                .with_help("reduce it first (`tl.sum(…) > 0`, `tl.max(…)`), or select per element with `tl.where`");
                self.emit(f, d);
            }
            Ty::Scalar(Elem::Ptr(_)) | Ty::Future(..) | Ty::Tuple(_) => {
                self.error(
                    f,
                    Code::E0304,
                    format!("the condition of `{what}` must be a number or bool, found {}", v.ty),
                    cond.span,
                    "not a condition",
                );
            }
            _ => {}
        }
        (None, v)
    }

    fn if_chain(&mut self, f: &mut Frame, branches: &[(Expr, Vec<Stmt>)], orelse: Option<&[Stmt]>) {
        let Some(((cond, body), rest)) = branches.split_first() else {
            if let Some(b) = orelse {
                self.block(f, b);
            }
            return;
        };
        match self.condition_val(f, cond, "if") {
            (Some(true), _) => self.block(f, body),
            (Some(false), _) => self.if_chain(f, rest, orelse),
            (None, cv) => {
                // Lowering: an `if` with two regions; its results are the
                // variables either branch changes, known after both.
                let lowered = if self.emitting() {
                    let c = self.bool_scalar(f, &cv, cond.span);
                    let loc = self.loc(f, cond.span);
                    self.builder.as_mut().zip(c).map(|(b, c)| {
                        let (t, _) = b.new_region(&[]);
                        let (e, _) = b.new_region(&[]);
                        let (inst, _) = b.push(crate::ir::Op::If, vec![c], vec![], vec![t, e], loc);
                        (inst, t, e)
                    })
                } else {
                    None
                };
                let before = f.vars.clone();
                let was_terminated = f.terminated;
                self.enter_region(lowered.map(|l| l.1));
                self.block(f, body);
                self.leave_region(lowered.map(|l| l.1));
                let then_vars = std::mem::replace(&mut f.vars, before.clone());
                let then_term = f.terminated;
                f.terminated = was_terminated;
                self.enter_region(lowered.map(|l| l.2));
                self.if_chain(f, rest, orelse);
                self.leave_region(lowered.map(|l| l.2));
                let else_vars = std::mem::take(&mut f.vars);
                let else_term = f.terminated;
                f.terminated = was_terminated || (then_term && else_term);
                let mut merged = match (then_term, else_term) {
                    (true, false) => else_vars.clone(),
                    (false, true) => then_vars.clone(),
                    // Both branches leave: what follows is unreachable, and
                    // the variables keep their values from before the `if`.
                    (true, true) => before.clone(),
                    _ => self.merge(f, &before, then_vars.clone(), else_vars.clone(), !cv.is_const),
                };
                // One branch leaves (`return`, `break`): the other's values
                // flow out of the `if`, which cannot carry a tuple either.
                if then_term != else_term && !cv.is_const {
                    let mut names: Vec<&String> = merged.keys().collect();
                    names.sort();
                    let crossing: Vec<(String, Span, Span)> = names
                        .into_iter()
                        .filter_map(|n| {
                            let (b, v) = (before.get(n)?, &merged[n]);
                            tuple_changed(b, v).then(|| (n.clone(), b.def, v.def))
                        })
                        .collect();
                    for (name, was, now) in crossing {
                        self.tuple_crosses(f, &name, Across::If, (was, now));
                        if let Some(v) = merged.get_mut(&name) {
                            v.val = Val::unknown();
                        }
                    }
                }
                if let Some((inst, t, e)) = lowered.filter(|_| !(then_term && else_term)) {
                    let names = changed_runtime_vars(&before, &merged);
                    let tys: Vec<crate::ir::Type> =
                        names.iter().filter_map(|n| Self::ir_type(&merged[n].val.ty)).collect();
                    if tys.len() != names.len() {
                        self.emit_failed = true;
                        return;
                    }
                    let carried: Vec<(String, crate::ir::Type)> =
                        names.iter().cloned().zip(tys.iter().cloned()).collect();
                    for (region, vars) in [(t, &then_vars), (e, &else_vars)] {
                        self.yield_vars(f, region, vars, &carried, crate::ir::Op::Yield, cond.span);
                    }
                    let results = self
                        .builder
                        .as_mut()
                        .map(|b| b.set_results(inst, tys))
                        .unwrap_or_default();
                    for (n, r) in names.iter().zip(results) {
                        if let Some(v) = merged.get_mut(n) {
                            v.val = Val::runtime(v.val.ty.clone()).with_ir(Some(r));
                        }
                    }
                }
                f.vars = merged;
            }
        }
    }

    fn enter_region(&mut self, r: Option<crate::ir::Region>) {
        if let (Some(b), Some(r)) = (self.builder.as_mut(), r) {
            b.enter(r);
        }
    }

    fn leave_region(&mut self, r: Option<crate::ir::Region>) {
        if let (Some(b), Some(_)) = (self.builder.as_mut(), r) {
            b.leave();
        }
    }

    /// Ends region `r` (unless it already ends in `break`, `return`, …)
    /// with `op` (`yield`, `break`, `continue`) carrying `names` from `vars`.
    fn yield_vars(
        &mut self,
        f: &Frame,
        r: crate::ir::Region,
        vars: &HashMap<String, Var>,
        carried: &[(String, crate::ir::Type)],
        op: crate::ir::Op,
        span: Span,
    ) {
        if self.builder.as_ref().is_none_or(|b| b.is_terminated(r)) {
            return;
        }
        self.enter_region(Some(r));
        let mut args = Vec::new();
        for (n, t) in carried {
            let v = vars.get(n).map(|v| v.val.clone()).unwrap_or_else(Val::unknown);
            args.push(self.operand(f, &v, t, span));
        }
        self.emit_effect(f, op, args, span);
        self.leave_region(Some(r));
    }

    /// Joins the variables of two paths (the branches of an `if`);
    /// `runtime`: the IR will choose between them (not a condition on an
    /// unbound constexpr, which only checking sees).
    fn merge(
        &mut self,
        f: &Frame,
        before: &HashMap<String, Var>,
        a: HashMap<String, Var>,
        mut b: HashMap<String, Var>,
        runtime: bool,
    ) -> HashMap<String, Var> {
        let mut out = HashMap::new();
        let mut names: Vec<String> = a.keys().chain(b.keys()).cloned().collect();
        names.sort();
        names.dedup();
        let mut a = a;
        for name in names {
            let merged = match (a.remove(&name), b.remove(&name)) {
                (Some(x), Some(y)) => self.join_var(f, &name, x, y, runtime),
                (Some(x), None) | (None, Some(x)) => {
                    if before.contains_key(&name) {
                        x
                    } else {
                        let def = x.def;
                        Var {
                            state: VarState::MaybeUndefined(def),
                            ..x
                        }
                    }
                }
                (None, None) => continue,
            };
            out.insert(name, merged);
        }
        out
    }

    fn join_var(&mut self, f: &Frame, name: &str, x: Var, y: Var, runtime: bool) -> Var {
        let state = match (&x.state, &y.state) {
            (VarState::MaybeUndefined(s), _) | (_, VarState::MaybeUndefined(s)) => VarState::MaybeUndefined(*s),
            _ => VarState::Defined,
        };
        if tuple_changed(&x, &y) {
            if runtime {
                self.tuple_crosses(f, name, Across::If, (y.def, x.def));
            }
            return Var {
                val: Val::unknown(),
                state,
                ..x
            };
        }
        if x.val == y.val {
            return Var { state, ..x };
        }
        if !x.val.ty.compatible(&y.val.ty) {
            let d = Diagnostic::new(
                Code::E0311,
                format!(
                    "`{name}` has type {} on one path and {} on the other",
                    x.val.ty, y.val.ty
                ),
                self.loc(f, y.def),
                format!("{} here", y.val.ty),
            )
            .with_secondary(self.loc(f, x.def), format!("{} here", x.val.ty))
            .with_help("give it the same type on every path, e.g. with `.to(…)`");
            self.emit(f, d);
            return Var {
                val: Val::unknown(),
                state,
                ..x
            };
        }
        // The type and the assignment a later message shows for it come
        // from the same path: an unknown (an error already reported) takes
        // the other's.
        let (ty, def) = if x.val.ty.is_unknown() {
            (y.val.ty.clone(), y.def)
        } else if y.val.ty.is_unknown() {
            (x.val.ty.clone(), x.def)
        } else {
            (x.val.ty.clone(), y.def)
        };
        Var {
            val: Val::runtime(ty),
            state,
            def,
            constexpr: false,
        }
    }

    /// E0329: variable `name`, a tuple, has another value after a run-time
    /// `if` or loop (assigned at `at`) than it had before it (at `before`): the IR
    /// carries scalars and blocks out of a branch or a loop, not tuples.
    fn tuple_crosses(&mut self, f: &Frame, name: &str, across: Across, (before, at): (Span, Span)) {
        let (what, other) = match across {
            Across::If => ("a run-time `if`", "its value on the other path"),
            Across::Loop => ("a run-time loop", "its value before the loop"),
        };
        let d = Diagnostic::new(
            Code::E0329,
            format!("tuple `{name}` is reassigned across {what}"),
            self.loc(f, at),
            "assigned here",
        )
        .with_secondary(self.loc(f, before), other)
        .with_help(format!(
            "unpack it into separate variables (`a, b = {name}`) and assign those instead"
        ));
        self.emit(f, d);
    }

    /// Before a loop body: variables the body assigns become run-time
    /// values. Returns the variables before the loop and the carried ones
    /// (with their IR types, when lowering).
    fn enter_loop(&mut self, f: &mut Frame, body: &[Stmt]) -> (HashMap<String, Var>, Vec<(String, crate::ir::Type)>) {
        let mut assigned = HashSet::new();
        super::lints::assigned_names(body, &mut assigned);
        let mut names: Vec<&String> = assigned.iter().collect();
        names.sort();
        let mut carried = Vec::new();
        for name in names {
            let Some(var) = f.vars.get(name).cloned() else { continue };
            if var.constexpr || !matches!(var.state, VarState::Defined) {
                continue;
            }
            if var.val.is_const {
                let m = self.materialize(f, &var.val, var.def);
                if let Some(v) = f.vars.get_mut(name) {
                    v.val = m;
                }
            }
            if let Some(t) = Self::ir_type(&var.val.ty) {
                carried.push((name.clone(), t));
            }
        }
        (f.vars.clone(), carried)
    }

    /// Rebinds the carried variables to region parameters or results.
    fn bind_carried(f: &mut Frame, carried: &[(String, crate::ir::Type)], values: &[crate::ir::Value]) {
        for ((n, _), v) in carried.iter().zip(values) {
            if let Some(var) = f.vars.get_mut(n) {
                var.val = Val::runtime(var.val.ty.clone()).with_ir(Some(*v));
            }
        }
    }

    /// After a loop body: carried variables must keep their types; names
    /// first assigned inside are possibly undefined after it.
    /// `runtime`: a loop the IR keeps (not a `tl.static_range` checked
    /// once without unrolling).
    fn exit_loop(&mut self, f: &mut Frame, before: HashMap<String, Var>, runtime: bool) {
        let after = std::mem::take(&mut f.vars);
        let mut out = before.clone();
        let mut names: Vec<&String> = after.keys().collect();
        names.sort();
        for name in names {
            let var = &after[name];
            match before.get(name) {
                Some(old) if runtime && tuple_changed(old, var) => {
                    self.tuple_crosses(f, name, Across::Loop, (old.def, var.def));
                    if let Some(o) = out.get_mut(name) {
                        o.val = Val::unknown();
                    }
                }
                Some(old) => {
                    if !old.val.ty.compatible(&var.val.ty) {
                        let d = Diagnostic::new(
                            Code::E0311,
                            format!(
                                "`{name}` changes type inside the loop: {} before, {} after an iteration",
                                old.val.ty, var.val.ty
                            ),
                            self.loc(f, var.def),
                            format!("this makes it {}", var.val.ty),
                        )
                        .with_secondary(self.loc(f, old.def), format!("{} here", old.val.ty))
                        .with_help(loop_type_help(&old.val.ty, &var.val.ty));
                        self.emit(f, d);
                    } else if let VarState::MaybeUndefined(s) = var.state {
                        if let Some(o) = out.get_mut(name) {
                            o.state = VarState::MaybeUndefined(s);
                        }
                    }
                }
                None => {
                    out.insert(
                        name.clone(),
                        Var {
                            state: VarState::MaybeUndefined(var.def),
                            ..var.clone()
                        },
                    );
                }
            }
        }
        f.vars = out;
    }

    /// Lowers a run-time loop's body into `region` (whose parameters are
    /// `params`: the carried values, after `lead` leading ones such as the
    /// induction variable), ending it with a `yield` of the carried values.
    fn loop_body(
        &mut self,
        f: &mut Frame,
        body: &[Stmt],
        carried: &[(String, crate::ir::Type)],
        region: Option<crate::ir::Region>,
        span: Span,
    ) {
        f.loops.push(LoopKind::Runtime);
        f.loop_carried.push(carried.to_vec());
        self.enter_region(region);
        self.block(f, body);
        self.leave_region(region);
        if let Some(r) = region {
            let vars = f.vars.clone();
            self.yield_vars(f, r, &vars, carried, crate::ir::Op::Yield, span);
        }
        f.terminated = false;
        f.loop_carried.pop();
        f.loops.pop();
    }

    fn for_loop(&mut self, f: &mut Frame, var: &ast::Ident, iter: &Expr, body: &[Stmt]) {
        let ExprKind::Call { func, args } = &iter.kind else {
            self.not_a_range(f, iter);
            self.loop_body_unknown_var(f, var, body);
            return;
        };
        let is_static = func.as_dotted_pair() == Some(("tl", "static_range"))
            || func.as_dotted_pair() == Some(("triton", "static_range"));
        let is_range = matches!(&func.kind, ExprKind::Name(n) if n == "range") && !f.vars.contains_key("range");
        if !is_static && !is_range {
            self.not_a_range(f, iter);
            self.loop_body_unknown_var(f, var, body);
            return;
        }
        let argvals = self.arg_vals(f, args);
        let builtin = if is_static {
            super::builtins::Builtin::StaticRange
        } else {
            super::builtins::Builtin::PyRange
        };
        let sig = builtin.signature();
        let names: Vec<(&str, bool)> = sig.params.iter().map(|p| (p.name, p.is_required())).collect();
        let Some(bound) = self.bind_args(
            f,
            &format!("`{}`", builtin.qualified()),
            &names,
            None,
            argvals,
            iter.span,
        ) else {
            self.loop_body_unknown_var(f, var, body);
            return;
        };
        let present: Vec<super::expr::ArgVal> = bound.fixed.into_iter().flatten().collect();
        if is_static {
            let mut consts = Vec::new();
            for a in &present {
                match a.val.konst.as_ref().and_then(Konst::as_int) {
                    Some(v) if !matches!(a.val.konst, Some(Konst::Bool(_))) => consts.push(Some(v)),
                    _ if a.val.ty.is_unknown() => consts.push(None),
                    _ => {
                        let d = Diagnostic::new(
                            Code::E0209,
                            "`tl.static_range` bounds must be compile-time integers",
                            self.loc(f, a.span),
                            format!("{} known only at run time", a.val.ty),
                        )
                        .with_help("use `range(…)` for a run-time loop");
                        self.emit(f, d);
                        consts.push(None);
                    }
                }
            }
            let (start, stop, step) = match consts.as_slice() {
                [stop] => (Some(0), *stop, Some(1)),
                [start, stop] => (*start, *stop, Some(1)),
                [start, stop, step] => (*start, *stop, *step),
                _ => (None, None, None),
            };
            if step == Some(0) {
                self.error(
                    f,
                    Code::E0317,
                    "`tl.static_range` step cannot be zero",
                    iter.span,
                    "zero step",
                );
                self.loop_body_unknown_var(f, var, body);
                return;
            }
            // The trip count, exactly: in i64 `stop - start + step - 1`
            // can overflow (and once made a loop of 2^62 steps run no
            // iteration).
            let trips = match (start, stop, step) {
                (Some(a), Some(b), Some(s)) => Some((a, s, static_trips(a, b, s))),
                _ => None,
            };
            if let Some((_, _, n)) = trips {
                // Each iteration checks at least one statement: a loop longer
                // than the whole budget fails before any of it is checked
                // (unrolling it first took gigabytes, or overflowed), in
                // `tlc check` as when lowering.
                if n > i128::from(MAX_CHECK_STEPS) {
                    self.budget_exhausted = true;
                    let d = Diagnostic::new(
                        Code::E0327,
                        format!("this loop unrolls to {n} iterations, more than the {MAX_CHECK_STEPS} statements a program may check"),
                        self.loc(f, iter.span),
                        format!("{n} iterations"),
                    )
                    .with_help("use `range(…)` for long loops");
                    self.emit(f, d);
                    return;
                }
            }
            // Lowering unrolls every iteration (the step budget bounds the
            // work); checking alone caps it. Every value lies between start
            // and stop, so it fits in i64.
            let iters = trips
                .filter(|&(_, _, n)| n <= i128::from(MAX_UNROLL_CHECK) || self.emitting())
                .map(|(a, s, n)| (0..n).map(move |i| (i128::from(a) + i * i128::from(s)) as i64));
            f.loops.push(LoopKind::Static);
            match iters {
                Some(values) => {
                    for v in values {
                        f.vars.insert(
                            var.name.clone(),
                            Var {
                                val: Val::konst(Konst::Int(v)),
                                def: var.span,
                                constexpr: false,
                                state: VarState::Defined,
                            },
                        );
                        let errors = self.diags.error_count();
                        self.block(f, body);
                        f.terminated = false;
                        if self.diags.error_count() > errors {
                            // The remaining iterations would repeat this
                            // error (deduplicated) at the price of a full
                            // check each: a 10⁶-iteration nest around a typo
                            // took 47 s. The constants the body assigns
                            // become unknown constants rather than keep
                            // their half-unrolled values; the rest (blocks,
                            // run-time values) keeps its type, so the code
                            // after the loop is still checked.
                            let mut assigned = HashSet::new();
                            super::lints::assigned_names(body, &mut assigned);
                            for name in assigned {
                                if let Some(var) = f.vars.get_mut(&name) {
                                    if var.val.konst.is_some() {
                                        var.val = Val::unbound_const();
                                    }
                                }
                            }
                            break;
                        }
                    }
                }
                None => {
                    let (before, _) = self.enter_loop(f, body);
                    f.vars.insert(
                        var.name.clone(),
                        Var {
                            val: Val {
                                ty: Ty::num(DType::I32),
                                konst: None,
                                is_const: true,
                                ir: None,
                                parts: Vec::new(),
                            },
                            def: var.span,
                            constexpr: false,
                            state: VarState::Defined,
                        },
                    );
                    self.block(f, body);
                    f.terminated = false;
                    self.exit_loop(f, before, false);
                }
            }
            f.loops.pop();
            return;
        }
        // A run-time `range`: integer scalars; the loop variable takes their
        // promoted type (i32 for constants).
        let mut dtype = DType::I32;
        let mut any_strong = false;
        for a in &present {
            match a.val.ty.dtype() {
                Some(d) if d.is_int() && !a.val.ty.is_block() => {
                    if !a.val.is_weak() {
                        dtype = if any_strong {
                            super::types::promote(dtype, false, d, false, false).unwrap_or(d)
                        } else {
                            d
                        };
                        any_strong = true;
                    }
                }
                _ if a.val.ty.is_unknown() => {}
                _ => {
                    self.error(
                        f,
                        Code::E0320,
                        format!("`range` arguments must be integer scalars, found {}", a.val.ty),
                        a.span,
                        "not an integer scalar",
                    );
                }
            }
            if a.val.konst == Some(Konst::Int(0)) && present.len() == 3 && std::ptr::eq(a, &present[2]) {
                self.error(f, Code::E0317, "`range` step cannot be zero", a.span, "zero step");
            }
        }
        // A constant bound takes the loop variable's dtype: one that does
        // not fit would run the loop wrapped (`range(0, 3000000000)` would
        // run no iteration in i32).
        for a in &present {
            let (true, Some(Konst::Int(c))) = (a.val.is_weak(), &a.val.konst) else {
                continue;
            };
            let Some((lo, hi)) = super::expr::int_range(dtype) else {
                continue;
            };
            if !(lo..=hi).contains(&i128::from(*c)) {
                let d = Diagnostic::new(
                    Code::E0326,
                    format!("the `range` bound {c} does not fit {dtype}, the loop variable's dtype"),
                    self.loc(f, a.span),
                    format!("out of range for {dtype} ({lo}..={hi})"),
                )
                .with_help("make a bound an i64 value (an `i64` parameter, or `.to(i64)`): the loop then runs in i64");
                self.emit(f, d);
            }
        }
        let (before, carried) = self.enter_loop(f, body);
        let iv_ty = crate::ir::Type::Scalar(Elem::Num(dtype));
        let lowered = if self.emitting() {
            let bound = |k: usize| present.get(k).map(|a| (a.val.clone(), a.span));
            let (lb, ub, step) = match present.len() {
                1 => (None, bound(0), None),
                2 => (bound(0), bound(1), None),
                _ => (bound(0), bound(1), bound(2)),
            };
            let zero = (Val::konst(Konst::Int(0)), iter.span);
            let one = (Val::konst(Konst::Int(1)), iter.span);
            let mut args = Vec::new();
            for (v, sp) in [
                lb.unwrap_or(zero),
                ub.unwrap_or_else(|| (Val::unknown(), iter.span)),
                step.unwrap_or(one),
            ] {
                args.push(self.operand(f, &v, &iv_ty, sp));
            }
            for (n, t) in &carried {
                let v = f.vars[n].val.clone();
                args.push(self.operand(f, &v, t, iter.span));
            }
            let mut param_tys = vec![iv_ty.clone()];
            param_tys.extend(carried.iter().map(|c| c.1.clone()));
            let loc = self.loc(f, iter.span);
            let result_tys: Vec<crate::ir::Type> = carried.iter().map(|c| c.1.clone()).collect();
            match args.into_iter().collect::<Option<Vec<_>>>() {
                Some(args) => self.builder.as_mut().map(|b| {
                    let (r, params) = b.new_region(&param_tys);
                    let (_, results) = b.push(crate::ir::Op::For, args, result_tys, vec![r], loc);
                    (r, params, results)
                }),
                None => {
                    self.emit_failed = true;
                    None
                }
            }
        } else {
            None
        };
        if let Some((_, params, _)) = &lowered {
            Self::bind_carried(f, &carried, &params[1..]);
        }
        f.vars.insert(
            var.name.clone(),
            Var {
                val: Val::runtime(Ty::num(dtype)).with_ir(lowered.as_ref().map(|l| l.1[0])),
                def: var.span,
                constexpr: false,
                state: VarState::Defined,
            },
        );
        self.loop_body(f, body, &carried, lowered.as_ref().map(|l| l.0), iter.span);
        self.exit_loop(f, before, true);
        if let Some((_, _, results)) = &lowered {
            Self::bind_carried(f, &carried, results);
        }
    }

    /// Checks a loop body whose header was wrong, so its own mistakes are
    /// still found.
    fn loop_body_unknown_var(&mut self, f: &mut Frame, var: &ast::Ident, body: &[Stmt]) {
        let (before, _) = self.enter_loop(f, body);
        f.loops.push(LoopKind::Runtime);
        f.vars.insert(
            var.name.clone(),
            Var {
                val: Val::unknown(),
                def: var.span,
                constexpr: false,
                state: VarState::Defined,
            },
        );
        self.block(f, body);
        f.terminated = false;
        f.loops.pop();
        self.exit_loop(f, before, true);
    }

    fn not_a_range(&mut self, f: &mut Frame, iter: &Expr) {
        // An iterable already in error (`tl.range`, unknown here) is
        // reported once, by that error.
        if self.expr(f, iter).ty.is_unknown() {
            return;
        }
        let d = Diagnostic::new(
            Code::E0324,
            "a `for` loop must iterate over `range(…)` or `tl.static_range(…)`",
            self.loc(f, iter.span),
            "not a range",
        )
        .with_help("write `for i in range(start, stop, step):`");
        self.emit(f, d);
    }

    fn while_loop(&mut self, f: &mut Frame, cond: &Expr, body: &[Stmt]) {
        let (before, carried) = self.enter_loop(f, body);
        let tys: Vec<crate::ir::Type> = carried.iter().map(|c| c.1.clone()).collect();
        // Lowering: `while` with a before-region computing the condition and
        // a body-region, both taking the carried values.
        let lowered = if self.emitting() {
            let mut inits = Vec::new();
            for (n, t) in &carried {
                let v = f.vars[n].val.clone();
                inits.push(self.operand(f, &v, t, cond.span));
            }
            let loc = self.loc(f, cond.span);
            match inits.into_iter().collect::<Option<Vec<_>>>() {
                Some(inits) => self.builder.as_mut().map(|b| {
                    let (cr, cparams) = b.new_region(&tys);
                    let (br, bparams) = b.new_region(&tys);
                    let (_, results) = b.push(crate::ir::Op::While, inits, tys.clone(), vec![cr, br], loc);
                    (cr, cparams, br, bparams, results)
                }),
                None => {
                    self.emit_failed = true;
                    None
                }
            }
        } else {
            None
        };
        if let Some((cr, cparams, ..)) = &lowered {
            Self::bind_carried(f, &carried, cparams);
            self.enter_region(Some(*cr));
        }
        let (known, cv) = self.condition_val(f, cond, "while");
        if let Some((cr, ..)) = &lowered {
            let c = self.bool_scalar(f, &cv, cond.span);
            self.emit_effect(f, crate::ir::Op::Condition, vec![c], cond.span);
            self.leave_region(Some(*cr));
        }
        if known == Some(false) && lowered.is_none() {
            f.vars = before;
            return;
        }
        if let Some((_, _, _, bparams, _)) = &lowered {
            Self::bind_carried(f, &carried, bparams);
        }
        self.loop_body(f, body, &carried, lowered.as_ref().map(|l| l.2), cond.span);
        self.exit_loop(f, before, true);
        if let Some((.., results)) = &lowered {
            Self::bind_carried(f, &carried, results);
        }
    }
}

fn loop_type_help(before: &Ty, after: &Ty) -> String {
    match (before.dtype(), after.dtype(), after) {
        (Some(a), Some(b), _) if a != b => {
            format!("give it the loop's dtype before the loop (`….to({b})`), or convert inside it (`.to({a})`)")
        }
        (_, Some(d), Ty::Block(_, shape)) if shape.iter().all(Option::is_some) => format!(
            "initialize it with its in-loop shape before the loop, e.g. `tl.zeros({}, dtype={d})`",
            super::types::shape_tuple(shape)
        ),
        (_, _, Ty::Block(..)) => "initialize it with its in-loop shape before the loop".into(),
        _ => "keep the same type and shape on every iteration".into(),
    }
}

/// A parameter or declaration annotation.
#[derive(Clone, Debug)]
pub(super) enum Annot {
    Constexpr,
    Type(Ty),
    /// `ptr[T]` where `T` is evaluated later (it may name a constexpr).
    PtrOf(Expr),
    Unknown,
}

impl Checker {
    /// Interprets an annotation expression.
    pub fn annotation(&mut self, f: &mut Frame, a: &Expr) -> Annot {
        match &a.kind {
            ExprKind::Name(n) if n == "constexpr" => return Annot::Constexpr,
            ExprKind::Name(n) if n == "int" => return Annot::Type(Ty::num(DType::I32)),
            ExprKind::Name(n) if n == "float" => return Annot::Type(Ty::num(DType::F32)),
            ExprKind::Subscript { value, indices } if matches!(&value.kind, ExprKind::Name(n) if n == "ptr") => {
                if let [ast::Index::Expr(inner)] = indices.as_slice() {
                    return Annot::PtrOf(inner.clone());
                }
                self.error(
                    f,
                    Code::E0208,
                    "`ptr` takes one element type: `ptr[f16]`",
                    a.span,
                    "invalid pointer type",
                );
                return Annot::Unknown;
            }
            _ => {}
        }
        if let Some(("tl" | "triton", "constexpr")) = a.as_dotted_pair() {
            return Annot::Constexpr;
        }
        if let Some(d) = self.dtype_expr_quiet(f, a) {
            return Annot::Type(Ty::num(d));
        }
        let d = Diagnostic::new(
            Code::E0208,
            format!(
                "`{}` is not a type",
                self.sources.snippet(self.modules[f.module.0 as usize].file, a.span)
            ),
            self.loc(f, a.span),
            "expected a type",
        )
        .with_help("annotate with a dtype (`i32`, `f32`, …), `ptr[f16]`, or `constexpr`");
        self.emit(f, d);
        Annot::Unknown
    }

    fn dtype_expr_quiet(&mut self, f: &mut Frame, e: &Expr) -> Option<DType> {
        match &e.kind {
            ExprKind::Name(n) if n == "bool" => Some(DType::Bool),
            ExprKind::Name(n) if !f.vars.contains_key(n) => DType::from_name(n).filter(|d| d.name() == n.as_str()),
            ExprKind::Attribute { .. } => match e.as_dotted_pair() {
                Some(("tl", n)) => DType::from_name(n),
                _ => None,
            },
            _ => None,
        }
    }

    /// Evaluates an expression that must be a dtype (`T`, `f16`, `tl.float32`).
    pub fn dtype_expr(&mut self, f: &mut Frame, e: &Expr) -> Option<DType> {
        if let Some(d) = self.dtype_expr_quiet(f, e) {
            return Some(d);
        }
        let v = self.expr(f, e);
        match v.konst {
            Some(Konst::DType(d)) => Some(d),
            _ if v.ty.is_unknown() => None,
            _ => {
                self.error(
                    f,
                    Code::E0319,
                    format!("expected a dtype, found {}", v.ty),
                    e.span,
                    "not a dtype",
                );
                None
            }
        }
    }
}

/// Diagnostics about definitions that are collected with the module.
pub(super) fn duplicate(first: Loc, second: Loc, what: &str, name: &str) -> Diagnostic {
    Diagnostic::new(
        Code::E0104,
        format!("the name `{name}` is defined more than once"),
        second,
        format!("{what} redefined here"),
    )
    .with_secondary(first, "first defined here")
}

pub(super) type FuncDef = Rc<ast::FunctionDef>;

/// Variables whose run-time value differs from before an `if`: what the
/// `if` must yield.
/// The run-time control flow a tuple cannot cross (E0329).
#[derive(Clone, Copy)]
enum Across {
    If,
    Loop,
}

/// Whether `a` and `b`, values of one variable on two paths, are different
/// tuples (or a tuple and something else): constants by their values,
/// others by their assignment too, since checking alone gives no IR values
/// and two run-time tuples of one type compare equal.
fn tuple_changed(a: &Var, b: &Var) -> bool {
    if !(a.val.is_tuple() || b.val.is_tuple()) {
        return false;
    }
    match (&a.val.konst, &b.val.konst) {
        (Some(x), Some(y)) => x != y,
        _ => a.val != b.val || a.def != b.def,
    }
}

fn changed_runtime_vars(before: &HashMap<String, Var>, after: &HashMap<String, Var>) -> Vec<String> {
    let mut names: Vec<String> = after
        .iter()
        .filter(|(_, v)| {
            matches!(v.state, VarState::Defined) && v.val.konst.is_none() && Checker::ir_type(&v.val.ty).is_some()
        })
        .filter(|(n, v)| {
            before
                .get(*n)
                .is_none_or(|b| b.val.ir != v.val.ir || v.val.ir.is_none())
        })
        .map(|(n, _)| n.clone())
        .collect();
    names.sort();
    names
}
