//! The typing rule of every built-in: what each `tl.*` call accepts and
//! what it returns (dtype and shape), with Triton's conventions.

use super::builtins::{ArgDefault, Builtin};
use super::check::{Checker, Frame, Val};
use super::expr::{ArgVal, Bound};
use super::types::{broadcast, numel, shape_string, DType, Dim, Elem, Konst, Shape, Ty};
use crate::diag::{Code, Diagnostic};
use crate::ir::Op;
use crate::span::Span;

/// Largest block the checker accepts (elements). A PE's TCM holds far less;
/// this only stops absurd shapes from reaching later stages.
const MAX_BLOCK_ELEMS: u64 = 1 << 24;

/// A built-in's arguments, by parameter name.
pub(super) struct Args {
    pub builtin: Builtin,
    pub bound: Bound,
    pub call: Span,
}

impl Args {
    pub fn index(&self, name: &str) -> usize {
        self.builtin
            .signature()
            .params
            .iter()
            .position(|p| p.name == name)
            .unwrap_or(usize::MAX)
    }

    pub fn get(&self, name: &str) -> Option<&ArgVal> {
        self.bound.fixed.get(self.index(name)).and_then(|a| a.as_ref())
    }

    /// The argument's value, or its default.
    pub fn val(&self, name: &str) -> Val {
        if let Some(a) = self.get(name) {
            return a.val.clone();
        }
        let default = self.builtin.signature().params.get(self.index(name)).map(|p| p.default);
        match default {
            Some(ArgDefault::Bool(b)) => Val::konst(Konst::Bool(b)),
            Some(ArgDefault::Int(v)) => Val::konst(Konst::Int(v)),
            Some(ArgDefault::Str(s)) => Val::konst(Konst::Str(s.to_string())),
            Some(ArgDefault::DType(d)) => Val::konst(Konst::DType(d)),
            _ => Val::none(),
        }
    }

    pub fn span(&self, name: &str) -> Span {
        self.get(name).map_or(self.call, |a| a.span)
    }

    pub fn given(&self, name: &str) -> bool {
        self.get(name).is_some_and(|a| a.val.konst != Some(Konst::None))
    }
}

impl Checker {
    pub fn builtin_call(&mut self, f: &mut Frame, b: Builtin, argvals: Vec<ArgVal>, call: Span, callee: Span) -> Val {
        let sig = b.signature();
        let params: Vec<(&str, bool)> = sig.params.iter().map(|p| (p.name, p.is_required())).collect();
        let Some(bound) = self.bind_args(f, &format!("`{}`", b.qualified()), &params, sig.varargs, argvals, call)
        else {
            return Val::unknown();
        };
        // A required argument that is `None` (the result of a helper with
        // no `return`, say) is no value at all: said here, where the rules
        // below would take it for an optional argument left out. Those
        // that take None say so (`ArgDefault::RequiredOrNone`: the `axis`
        // of `tl.argmax`).
        for (p, arg) in sig.params.iter().zip(&bound.fixed) {
            let Some(arg) = arg.as_ref().filter(|_| p.default == ArgDefault::Required) else {
                continue;
            };
            if arg.val.konst == Some(Konst::None) {
                let d = Diagnostic::new(
                    Code::E0300,
                    format!("`{}` of `{}` needs a value, found None", p.name, b.qualified()),
                    self.loc(f, arg.span),
                    "this is None",
                )
                .with_help("pass a value here; a helper with no `return` gives None, so return the value it computes");
                self.emit(f, d);
                return Val::unknown();
            }
        }
        let a = Args {
            builtin: b,
            bound,
            call,
        };
        let _ = callee;
        let result = self.builtin_rule(f, &a);
        self.lower_builtin(f, &a, result)
    }

    /// The typing rule: checks the arguments, returns the result's type.
    fn builtin_rule(&mut self, f: &mut Frame, a: &Args) -> Val {
        let (b, call) = (a.builtin, a.call);
        use Builtin as B;
        match b {
            B::ProgramId | B::NumPrograms => {
                self.axis_const(f, a, "axis", 3);
                Val::runtime(Ty::num(DType::I32))
            }
            B::MeshId | B::MeshSize => {
                self.axis_const(f, a, "axis", 2);
                Val::runtime(Ty::num(DType::I32))
            }
            B::Rank | B::WorldSize => Val::runtime(Ty::num(DType::I32)),
            B::Arange => {
                let errors = self.diags.error_count();
                let start = self.shape_int(f, a, "start", "`tl.arange` bounds");
                let end = self.shape_int(f, a, "end", "`tl.arange` bounds");
                let (Some(s), Some(e)) = (start, end) else {
                    // A bound in error (`-D BLOCK=2.5`): reported once, not
                    // again at every use of the block.
                    if self.diags.error_count() > errors {
                        return Val::unknown();
                    }
                    // Unbound constexprs: a block of a length not known yet.
                    return Val::runtime(Ty::Block(Elem::Num(DType::I32), vec![None]));
                };
                if e <= s {
                    self.error(
                        f,
                        Code::E0317,
                        format!("`tl.arange({s}, {e})` is empty"),
                        call,
                        "end must be greater than start",
                    );
                    return Val::unknown();
                }
                // The block is i32: every element must be one.
                let i32_range = i64::from(i32::MIN)..=i64::from(i32::MAX) + 1;
                if !i32_range.contains(&s) || !i32_range.contains(&e) {
                    self.error(
                        f,
                        Code::E0326,
                        format!("`tl.arange({s}, {e})` has elements outside i32"),
                        call,
                        "its elements are i32",
                    );
                    return Val::unknown();
                }
                let n = (e - s) as u64;
                if n > MAX_BLOCK_ELEMS {
                    self.too_large(f, call, n);
                    return Val::unknown();
                }
                Val::runtime(Ty::Block(Elem::Num(DType::I32), vec![Some(n)]))
            }
            B::Zeros | B::Full => {
                let shape = self.shape_arg(f, a.get("shape"));
                let dtype = self.dtype_arg(f, a.get("dtype"));
                if b == B::Full {
                    let v = a.val("value");
                    if !v.ty.is_unknown() && !matches!(v.ty, Ty::Scalar(Elem::Num(_))) {
                        self.error(
                            f,
                            Code::E0300,
                            format!("`tl.full` fills with a scalar, found {}", v.ty),
                            a.span("value"),
                            "not a scalar number",
                        );
                    }
                }
                match (shape, dtype) {
                    (Some(s), Some(d)) => Val::runtime(Ty::with_shape(Elem::Num(d), s)),
                    _ => Val::unknown(),
                }
            }
            B::Load => self.load_store(f, a, true),
            B::Store => {
                self.load_store(f, a, false);
                Val::none()
            }
            B::AtomicAdd => self.load_store(f, a, true),
            B::Dot => self.dot(f, a),
            B::Sum | B::Max | B::Min | B::Argmax | B::Argmin => self.reduction(f, a),
            B::Exp
            | B::Exp2
            | B::Log
            | B::Log2
            | B::Sqrt
            | B::Rsqrt
            | B::Sin
            | B::Cos
            | B::Sigmoid
            | B::Floor
            | B::Ceil => self.float_unary(f, a, "x"),
            B::Softmax => {
                let v = self.float_unary(f, a, "x");
                if matches!(v.ty, Ty::Scalar(_)) {
                    self.error(f, Code::E0322, "`tl.softmax` needs a block", a.span("x"), "a scalar");
                }
                v
            }
            B::Abs => {
                let v = a.val("x");
                match v.ty.elem() {
                    Some(Elem::Num(_)) => Val::runtime(v.ty),
                    _ if v.ty.is_unknown() => Val::unknown(),
                    _ => {
                        self.error(
                            f,
                            Code::E0300,
                            format!("`tl.abs` needs numbers, found {}", v.ty),
                            a.span("x"),
                            "not a number",
                        );
                        Val::unknown()
                    }
                }
            }
            B::Maximum | B::Minimum => self.elementwise(f, a, &["x", "y"], false),
            B::Clamp => self.elementwise(f, a, &["x", "min", "max"], false),
            B::Fma => self.elementwise(f, a, &["x", "y", "z"], true),
            B::Where => {
                let c = a.val("condition");
                if let Some(d) = c.ty.dtype() {
                    if d != DType::Bool {
                        self.error(
                            f,
                            Code::E0306,
                            format!("`tl.where` needs a boolean condition, found {}", c.ty),
                            a.span("condition"),
                            "not boolean",
                        );
                    }
                }
                let v = self.elementwise(f, a, &["x", "y"], false);
                if v.ty.is_unknown() || c.ty.is_unknown() {
                    return Val::unknown();
                }
                let Some(shape) =
                    self.broadcast_operands(f, "`tl.where`", (a.span("condition"), &c.ty), (a.span("x"), &v.ty))
                else {
                    return Val::unknown();
                };
                Val::runtime(Ty::with_shape(v.ty.elem().unwrap_or(Elem::Num(DType::F32)), shape))
            }
            B::Cdiv => {
                let x = a.val("x");
                let d = a.val("div");
                // By a constant 0 it traps wherever it runs.
                if d.konst.as_ref().and_then(Konst::as_int) == Some(0) {
                    self.error(f, Code::E0315, "`tl.cdiv` by zero", a.span("div"), "zero divisor");
                    return Val::unknown();
                }
                if let (Some(xk), Some(dk)) = (
                    x.konst.as_ref().and_then(Konst::as_int),
                    d.konst.as_ref().and_then(Konst::as_int),
                ) {
                    // The exact ceiling, as at run time (`lower.rs`).
                    let folded = xk.checked_div(dk).and_then(|q| {
                        let r = xk % dk;
                        if r != 0 && (r > 0) == (dk > 0) {
                            q.checked_add(1)
                        } else {
                            Some(q)
                        }
                    });
                    return match folded {
                        Some(k) => Val::konst(Konst::Int(k)),
                        _ => {
                            self.error(
                                f,
                                Code::E0315,
                                "integer overflow in `tl.cdiv`",
                                call,
                                "in this constant",
                            );
                            Val::unknown()
                        }
                    };
                }
                for (name, v) in [("x", &x), ("div", &d)] {
                    if !v.ty.is_unknown() && !v.ty.dtype().is_some_and(DType::is_int) {
                        self.error(
                            f,
                            Code::E0320,
                            format!("`tl.cdiv` needs integers, found {}", v.ty),
                            a.span(name),
                            "not an integer",
                        );
                        return Val::unknown();
                    }
                }
                self.elementwise(f, a, &["x", "div"], false)
            }
            B::Reshape | B::BroadcastTo => self.reshape_like(f, a),
            B::Trans => self.trans(f, a),
            B::StaticRange | B::PyRange => Val::unknown(),
            B::StaticAssert => {
                let c = a.val("cond");
                match c.konst.as_ref().and_then(super::consteval::truthy) {
                    Some(true) => {}
                    Some(false) => {
                        let msg = match a.val("msg").konst {
                            Some(Konst::Str(s)) if !s.is_empty() => s,
                            _ => "static assertion failed".to_string(),
                        };
                        self.error(
                            f,
                            Code::E0316,
                            format!("static assertion failed: {msg}"),
                            a.span("cond"),
                            "evaluates to False",
                        );
                    }
                    // Unknown, or a constant checking does not enumerate:
                    // asserted when lowering unrolls its loop.
                    None if c.ty.is_unknown() || c.is_const => {}
                    None => {
                        let d = Diagnostic::new(
                            Code::E0209,
                            "`tl.static_assert` needs a compile-time condition",
                            self.loc(f, a.span("cond")),
                            "known only at run time",
                        )
                        .with_help("use `tl.device_assert` for run-time checks");
                        self.emit(f, d);
                    }
                }
                Val::none()
            }
            B::DeviceAssert => {
                let c = a.val("cond");
                if !c.ty.is_unknown() && c.ty.dtype().is_none() {
                    self.error(
                        f,
                        Code::E0300,
                        format!("`tl.device_assert` needs a condition, found {}", c.ty),
                        a.span("cond"),
                        "not a condition",
                    );
                }
                Val::none()
            }
            B::DevicePrint => {
                let p = a.val("prefix");
                if !p.ty.is_unknown() && p.ty != Ty::Str {
                    self.error(
                        f,
                        Code::E0300,
                        "`tl.device_print` starts with a string prefix",
                        a.span("prefix"),
                        "not a string",
                    );
                }
                Val::none()
            }
            B::Gemm => self.gemm(f, a),
            B::Send => {
                self.peer(f, a, "dst");
                let v = a.val("value");
                if !v.ty.is_unknown() && !matches!(v.ty.elem(), Some(Elem::Num(_))) {
                    self.error(
                        f,
                        Code::E0300,
                        format!("`tl.send` sends numbers, found {}", v.ty),
                        a.span("value"),
                        "cannot be sent",
                    );
                }
                Val::none()
            }
            B::Recv | B::RecvAsync => {
                self.peer(f, a, "src");
                let shape = self.shape_arg(f, a.get("shape"));
                let dtype = self.dtype_arg(f, a.get("dtype"));
                match (shape, dtype) {
                    (Some(s), Some(d)) if b == B::Recv => Val::runtime(Ty::with_shape(Elem::Num(d), s)),
                    (Some(s), Some(d)) => Val::runtime(Ty::Future(d, s)),
                    _ => Val::unknown(),
                }
            }
            B::Wait => {
                let v = a.val("future");
                match v.ty {
                    Ty::Future(d, s) => Val::runtime(Ty::with_shape(Elem::Num(d), s)),
                    Ty::Unknown => Val::unknown(),
                    other => {
                        let d = Diagnostic::new(
                            Code::E0300,
                            format!("`tl.wait` needs a future from `tl.recv_async`, found {other}"),
                            self.loc(f, a.span("future")),
                            "not a future",
                        );
                        self.emit(f, d);
                        Val::unknown()
                    }
                }
            }
            B::SymmAt => {
                let p = a.val("pointer");
                self.int_scalar(f, a, "rank");
                match p.ty {
                    Ty::Scalar(Elem::Ptr(_)) | Ty::Block(Elem::Ptr(_), _) => Val::runtime(p.ty),
                    Ty::Unknown => Val::unknown(),
                    other => {
                        self.not_pointer(f, "tl.symm_at", &other, a.span("pointer"));
                        Val::unknown()
                    }
                }
            }
            B::Notify | B::WaitUntil => {
                let p = a.val("sig_ptr");
                match p.ty {
                    Ty::Scalar(Elem::Ptr(d)) if d.is_int() => {}
                    Ty::Unknown => {}
                    other => {
                        let d = Diagnostic::new(
                            Code::E0307,
                            format!(
                                "`{}` needs a pointer to an integer signal word, found {other}",
                                b.qualified()
                            ),
                            self.loc(f, a.span("sig_ptr")),
                            "not a scalar integer pointer",
                        );
                        self.emit(f, d);
                    }
                }
                if b == B::Notify {
                    self.int_scalar(f, a, "rank");
                }
                self.int_scalar(f, a, "value");
                Val::none()
            }
            B::Barrier => Val::none(),
            B::PyFloat => {
                let x = a.val("x");
                match &x.konst {
                    Some(Konst::Str(s)) => match s.trim().to_ascii_lowercase().as_str() {
                        "inf" | "+inf" | "infinity" => Val::konst(Konst::Float(f64::INFINITY)),
                        "-inf" | "-infinity" => Val::konst(Konst::Float(f64::NEG_INFINITY)),
                        "nan" => Val::konst(Konst::Float(f64::NAN)),
                        other => match other.parse::<f64>() {
                            Ok(v) => Val::konst(Konst::Float(v)),
                            Err(_) => {
                                self.error(
                                    f,
                                    Code::E0326,
                                    format!("cannot convert {s:?} to float"),
                                    a.span("x"),
                                    "not a number",
                                );
                                Val::unknown()
                            }
                        },
                    },
                    Some(Konst::Int(v)) => Val::konst(Konst::Float(*v as f64)),
                    Some(Konst::Float(v)) => Val::konst(Konst::Float(*v)),
                    Some(Konst::Bool(v)) => Val::konst(Konst::Float(*v as i64 as f64)),
                    _ if x.ty.is_unknown() => Val::unknown(),
                    _ => {
                        let d = Diagnostic::new(
                            Code::E0209,
                            "`float(…)` only converts constants",
                            self.loc(f, a.span("x")),
                            "not a constant",
                        )
                        .with_help("convert run-time values with `.to(f32)`");
                        self.emit(f, d);
                        Val::unknown()
                    }
                }
            }
            B::PyInt => {
                let x = a.val("x");
                match &x.konst {
                    Some(Konst::Int(v)) => Val::konst(Konst::Int(*v)),
                    Some(Konst::Bool(v)) => Val::konst(Konst::Int(*v as i64)),
                    Some(Konst::Float(v)) if v.is_finite() && v.abs() < 9.2e18 => {
                        Val::konst(Konst::Int(v.trunc() as i64))
                    }
                    // A constant all the same, which Python refuses too.
                    Some(Konst::Float(v)) => {
                        let why = match v.is_nan() {
                            true => "cannot convert NaN to an integer".to_string(),
                            false => format!("`int({v})` does not fit a 64-bit integer"),
                        };
                        self.error(f, Code::E0315, why, a.span("x"), "out of range");
                        Val::unknown()
                    }
                    // Python's `int("42")`: decimal digits, a sign, `_`.
                    Some(Konst::Str(text)) => {
                        let t = text.trim();
                        let body = t.trim_start_matches(['+', '-']).to_ascii_lowercase();
                        let prefixed = ["0x", "0o", "0b"].iter().any(|p| body.starts_with(p));
                        match super::types::int_literal(t).filter(|_| !prefixed) {
                            Some(Some(v)) => Val::konst(Konst::Int(v)),
                            Some(None) => {
                                let why = format!("`int({text:?})` does not fit a 64-bit integer");
                                self.error(f, Code::E0315, why, a.span("x"), "out of range");
                                Val::unknown()
                            }
                            None => {
                                let why = format!("cannot convert {text:?} to int");
                                self.error(f, Code::E0326, why, a.span("x"), "not a decimal integer");
                                Val::unknown()
                            }
                        }
                    }
                    _ if x.ty.is_unknown() => Val::unknown(),
                    _ => {
                        let d = Diagnostic::new(
                            Code::E0209,
                            "`int(…)` only converts constants",
                            self.loc(f, a.span("x")),
                            "not a constant",
                        )
                        .with_help("convert run-time values with `.to(i32)`");
                        self.emit(f, d);
                        Val::unknown()
                    }
                }
            }
            B::PyMin | B::PyMax => {
                let (x, y) = (a.val("a"), a.val("b"));
                match (&x.konst, &y.konst) {
                    (Some(p), Some(q)) => match super::consteval::compare(crate::syntax::ast::CmpOp::Lt, p, q) {
                        Some(Konst::Bool(lt)) => {
                            if lt == (b == B::PyMin) {
                                x
                            } else {
                                y
                            }
                        }
                        _ => {
                            self.error(
                                f,
                                Code::E0300,
                                format!("`{}` compares numbers", b.name()),
                                call,
                                "not comparable",
                            );
                            Val::unknown()
                        }
                    },
                    _ if x.ty.is_unknown() || y.ty.is_unknown() => Val::unknown(),
                    _ => {
                        let d = Diagnostic::new(
                            Code::E0209,
                            format!("`{}(…)` works on constants", b.name()),
                            self.loc(f, call),
                            "run-time operand",
                        )
                        .with_help(format!("use `tl.{}imum(x, y)` for run-time values", b.name()));
                        self.emit(f, d);
                        Val::unknown()
                    }
                }
            }
            B::PyLen => {
                let x = a.val("x");
                match (&x.konst, &x.ty) {
                    (Some(Konst::Tuple(t)), _) => Val::konst(Konst::Int(t.len() as i64)),
                    (_, Ty::Tuple(t)) => Val::konst(Konst::Int(t.len() as i64)),
                    (_, Ty::Unknown) => Val::unknown(),
                    _ => {
                        self.error(
                            f,
                            Code::E0300,
                            format!("`len` needs a tuple, found {}", x.ty),
                            a.span("x"),
                            "no length",
                        );
                        Val::unknown()
                    }
                }
            }
        }
    }

    fn too_large(&mut self, f: &Frame, span: Span, n: u64) {
        let n = if n == u64::MAX {
            "2^64 or more".to_string()
        } else {
            n.to_string()
        };
        self.error(
            f,
            Code::E0323,
            format!("block of {n} elements is too large (limit {MAX_BLOCK_ELEMS})"),
            span,
            "too many elements",
        );
    }

    fn not_pointer(&mut self, f: &Frame, what: &str, ty: &Ty, span: Span) {
        let mut d = Diagnostic::new(
            Code::E0307,
            format!("`{what}` needs a pointer, found {ty}"),
            self.loc(f, span),
            format!("this is {ty}"),
        );
        if matches!(ty.elem(), Some(Elem::Num(_))) {
            d = d.with_help("pass a pointer argument plus offsets, e.g. `x_ptr + offs`");
        }
        self.emit(f, d);
    }

    /// A compile-time integer used as an axis, in `0..limit`.
    fn axis_const(&mut self, f: &Frame, a: &Args, name: &str, limit: i64) -> Option<i64> {
        let arg = a.get(name)?;
        match arg.val.konst.as_ref().and_then(Konst::as_int) {
            Some(v) if (0..limit).contains(&v) => Some(v),
            Some(v) => {
                self.error(
                    f,
                    Code::E0309,
                    format!(
                        "axis {v} is out of range: `{}` takes 0..{}",
                        a.builtin.qualified(),
                        limit - 1
                    ),
                    arg.span,
                    format!("must be 0..={}", limit - 1),
                );
                None
            }
            // Unknown, or a constant checking does not enumerate (the index
            // of a `tl.static_range` too long to unroll while checking):
            // checked when the kernel is lowered, which unrolls it.
            None if arg.val.ty.is_unknown() || arg.val.is_const => None,
            None => {
                self.error(
                    f,
                    Code::E0209,
                    format!("`{name}` must be a compile-time integer"),
                    arg.span,
                    "known only at run time",
                );
                None
            }
        }
    }

    /// A compile-time integer that a shape depends on.
    fn shape_int(&mut self, f: &Frame, a: &Args, name: &str, what: &str) -> Option<i64> {
        let arg = a.get(name)?;
        self.shape_int_val(f, &arg.val, arg.span, what)
    }

    fn shape_int_val(&mut self, f: &Frame, v: &Val, span: Span, what: &str) -> Option<i64> {
        match &v.konst {
            Some(Konst::Int(i)) => Some(*i),
            _ if v.ty.is_unknown() => None,
            // A constant whose value checking does not enumerate (the
            // index of a `tl.static_range` over an unbound constexpr):
            // known when the kernel is specialized, checked then.
            None if v.is_const => None,
            Some(k) => {
                self.error(
                    f,
                    Code::E0320,
                    format!("{what} must be integers, found the constant {k}"),
                    span,
                    format!("{} constant", v.ty),
                );
                None
            }
            _ => {
                let name = self
                    .sources
                    .snippet(self.modules[f.module.0 as usize].file, span)
                    .to_string();
                let mut d = Diagnostic::new(
                    Code::E0302,
                    format!("{what} must be compile-time constants"),
                    self.loc(f, span),
                    format!("{} known only at run time", v.ty),
                );
                if name.chars().all(|c| c.is_alphanumeric() || c == '_') && !name.is_empty() {
                    d = d.with_help(format!("make `{name}` a `constexpr` parameter (`{name}: constexpr`), or mask a fixed-size block instead"));
                } else {
                    d = d.with_help("block shapes come from constexprs; use a fixed block size and a mask");
                }
                self.emit(f, d);
                None
            }
        }
    }

    /// A shape argument: an int or a tuple/list of ints, all constexpr.
    /// `None` when not known (reported, or unbound constexprs).
    fn shape_arg(&mut self, f: &Frame, arg: Option<&ArgVal>) -> Option<Shape> {
        let arg = arg?;
        let dims: Vec<Val> = match (&arg.val.konst, &arg.val.ty) {
            (Some(Konst::Tuple(ks)), _) => ks.iter().cloned().map(Val::konst).collect(),
            (Some(Konst::Int(_)), _) => vec![arg.val.clone()],
            // Each part as it is: a constant checking does not enumerate
            // (a long `tl.static_range`'s index) stays a constant.
            (_, Ty::Tuple(ts)) if arg.val.parts.len() == ts.len() => arg.val.parts.clone(),
            (_, Ty::Tuple(ts)) => ts.iter().cloned().map(Val::runtime).collect(),
            (_, Ty::Unknown) => return None,
            (_, Ty::Scalar(Elem::Num(d))) if d.is_int() => vec![arg.val.clone()],
            (_, other) => {
                self.error(
                    f,
                    Code::E0300,
                    format!("expected a shape (a tuple of constexpr integers), found {other}"),
                    arg.span,
                    "not a shape",
                );
                return None;
            }
        };
        let mut shape = Vec::new();
        let mut known = true;
        for d in &dims {
            match self.shape_int_val(f, d, arg.span, "block shapes") {
                Some(v) if v > 0 => shape.push(Some(v as u64)),
                Some(v) => {
                    self.error(
                        f,
                        Code::E0317,
                        format!("shape dimension {v} is not positive"),
                        arg.span,
                        "invalid shape",
                    );
                    return None;
                }
                None => {
                    known = false;
                    shape.push(None);
                }
            }
        }
        if let Some(n) = numel(&shape) {
            if n > MAX_BLOCK_ELEMS {
                self.too_large(f, arg.span, n);
                return None;
            }
        }
        let _ = known;
        Some(shape)
    }

    fn dtype_arg(&mut self, f: &Frame, arg: Option<&ArgVal>) -> Option<DType> {
        let arg = arg?;
        match &arg.val.konst {
            Some(Konst::DType(d)) => Some(*d),
            _ if arg.val.ty.is_unknown() => None,
            _ => {
                let d = Diagnostic::new(
                    Code::E0319,
                    format!("expected a dtype, found {}", arg.val.ty),
                    self.loc(f, arg.span),
                    "not a dtype",
                )
                .with_help("write a dtype such as `f32`, `tl.float16`, or `x.dtype`");
                self.emit(f, d);
                None
            }
        }
    }

    fn int_scalar(&mut self, f: &Frame, a: &Args, name: &str) {
        let Some(arg) = a.get(name) else { return };
        match &arg.val.ty {
            Ty::Scalar(Elem::Num(d)) if d.is_int() => {}
            Ty::Unknown => {}
            other => {
                self.error(
                    f,
                    Code::E0320,
                    format!("`{name}` must be an integer scalar, found {other}"),
                    arg.span,
                    "not an integer scalar",
                );
            }
        }
    }

    /// The `dst`/`src` of a send/recv: a direction or an integer rank.
    fn peer(&mut self, f: &Frame, a: &Args, name: &str) {
        let Some(arg) = a.get(name) else { return };
        match &arg.val.ty {
            Ty::Direction => {}
            Ty::Scalar(Elem::Num(d)) if d.is_int() && *d != DType::Bool => {}
            Ty::Unknown => {}
            other => {
                let d = Diagnostic::new(
                    Code::E0321,
                    format!("`{name}` must be a rank (an integer) or a direction such as `tl.NEXT`, found {other}"),
                    self.loc(f, arg.span),
                    "not a peer",
                )
                .with_note("directions: tl.NEXT, tl.PREV (ring), tl.NORTH, tl.SOUTH, tl.EAST, tl.WEST (mesh)");
                self.emit(f, d);
            }
        }
    }

    fn load_store(&mut self, f: &mut Frame, a: &Args, is_load: bool) -> Val {
        let what = a.builtin.qualified();
        let p = a.val("pointer");
        let (pointee, shape) = match &p.ty {
            Ty::Scalar(Elem::Ptr(d)) => (*d, Vec::new()),
            Ty::Block(Elem::Ptr(d), s) => (*d, s.clone()),
            Ty::Unknown => (DType::F32, vec![]),
            other => {
                self.not_pointer(f, &what, other, a.span("pointer"));
                return Val::unknown();
            }
        };
        let known = !p.ty.is_unknown();
        let mask_given = a.given("mask");
        if mask_given {
            let m = a.val("mask");
            match m.ty.dtype() {
                Some(DType::Bool) if known => {
                    self.fits_shape(f, &m.ty, a.span("mask"), &shape, a.span("pointer"), "the mask");
                }
                Some(DType::Bool) => {}
                Some(_) | None if !m.ty.is_unknown() => {
                    let d = Diagnostic::new(
                        Code::E0306,
                        format!("the mask of `{what}` must be boolean, found {}", m.ty),
                        self.loc(f, a.span("mask")),
                        "not boolean",
                    )
                    .with_help("build masks from comparisons, e.g. `offs < n`");
                    self.emit(f, d);
                }
                _ => {}
            }
        } else if known && !shape.is_empty() && a.builtin != Builtin::AtomicAdd {
            let d = Diagnostic::new(
                Code::W0003,
                format!("`{what}` with a computed offset has no mask"),
                self.loc(f, a.span("pointer")),
                "offsets computed from a block",
            )
            .with_help("pass a mask such as `mask=offsets < n` unless every lane is in bounds by construction");
            self.emit(f, d);
        }
        let data_param = if is_load && a.builtin == Builtin::Load {
            "other"
        } else if a.builtin == Builtin::AtomicAdd {
            "val"
        } else {
            "value"
        };
        if a.given(data_param) {
            let v = a.val(data_param);
            match v.ty.elem() {
                Some(Elem::Num(_)) => {
                    if known {
                        self.fits_shape(
                            f,
                            &v.ty,
                            a.span(data_param),
                            &shape,
                            a.span("pointer"),
                            &format!("`{data_param}`"),
                        );
                    }
                }
                _ if v.ty.is_unknown() => {}
                _ => {
                    self.error(
                        f,
                        Code::E0300,
                        format!("`{data_param}` must be numbers, found {}", v.ty),
                        a.span(data_param),
                        "not storable",
                    );
                }
            }
        }
        if !known {
            return Val::unknown();
        }
        if is_load {
            Val::runtime(Ty::with_shape(Elem::Num(pointee), shape))
        } else {
            Val::none()
        }
    }

    /// `ty` must broadcast to `shape` (a mask or value against its pointer).
    fn fits_shape(&mut self, f: &Frame, ty: &Ty, span: Span, shape: &[Dim], ptr_span: Span, what: &str) {
        let Some(s) = ty.shape() else { return };
        match broadcast(s, shape) {
            Ok(b)
                if b.len() == shape.len() && b.iter().zip(shape).all(|(x, y)| x.is_none() || y.is_none() || x == y) => {
            }
            _ => {
                let d = Diagnostic::new(
                    Code::E0301,
                    format!(
                        "{what} has shape {}, which does not broadcast to the pointer's shape {}",
                        shape_string(s),
                        shape_string(shape)
                    ),
                    self.loc(f, span),
                    format!("shape {}", shape_string(s)),
                )
                .with_secondary(
                    self.loc(f, ptr_span),
                    format!("pointer block of shape {}", shape_string(shape)),
                );
                self.emit(f, d);
            }
        }
    }

    fn dot(&mut self, f: &mut Frame, a: &Args) -> Val {
        let x = a.val("input");
        let y = a.val("other");
        if x.ty.is_unknown() || y.ty.is_unknown() {
            return Val::unknown();
        }
        let mut dims = Vec::new();
        for (name, v) in [("input", &x), ("other", &y)] {
            match &v.ty {
                Ty::Block(Elem::Num(d), s) if s.len() == 2 => dims.push((*d, s.clone())),
                other => {
                    let d = Diagnostic::new(
                        Code::E0322,
                        format!("`tl.dot` multiplies 2-D blocks, but `{name}` is {other}"),
                        self.loc(f, a.span(name)),
                        "not a 2-D block",
                    )
                    .with_help("reshape with `tl.reshape`, or add an axis with `x[None, :]`");
                    self.emit(f, d);
                    return Val::unknown();
                }
            }
        }
        let (da, sa) = dims[0].clone();
        let (db, sb) = dims[1].clone();
        if let (Some(k1), Some(k2)) = (sa[1], sb[0]) {
            if k1 != k2 {
                let d = Diagnostic::new(
                    Code::E0305,
                    format!(
                        "`tl.dot` inner dimensions differ: {} @ {}",
                        shape_string(&sa),
                        shape_string(&sb)
                    ),
                    self.loc(f, a.span("other")),
                    format!("{k2} rows"),
                )
                .with_secondary(self.loc(f, a.span("input")), format!("{k1} columns"))
                .with_help("the columns of `input` must equal the rows of `other`; `tl.trans` transposes");
                self.emit(f, d);
                return Val::unknown();
            }
        }
        if da != db {
            let d = Diagnostic::new(
                Code::E0300,
                format!("`tl.dot` operands have different dtypes: {da} and {db}"),
                self.loc(f, a.span("other")),
                format!("{db}"),
            )
            .with_secondary(self.loc(f, a.span("input")), format!("{da}"))
            .with_help(format!("convert one of them, e.g. `b.to({da})`"));
            self.emit(f, d);
            return Val::unknown();
        }
        if da == DType::Bool {
            self.error(
                f,
                Code::E0300,
                "`tl.dot` does not multiply bool blocks",
                a.span("input"),
                "bool operand",
            );
            return Val::unknown();
        }
        let out_dtype = match a.val("out_dtype").konst {
            Some(Konst::DType(d)) => d,
            _ if a.val("out_dtype").ty.is_unknown() => return Val::unknown(),
            _ => {
                self.dtype_arg(f, a.get("out_dtype"));
                return Val::unknown();
            }
        };
        // Integer inputs accumulate in i32 whatever the float default says.
        let mut out = if da.is_int() && !a.given("out_dtype") {
            DType::I32
        } else {
            out_dtype
        };
        let shape = vec![sa[0], sb[1]];
        if a.given("acc") {
            let acc = a.val("acc");
            match &acc.ty {
                Ty::Block(Elem::Num(d), s) if s.len() == 2 => {
                    let fits = s.iter().zip(&shape).all(|(x, y)| x.is_none() || y.is_none() || x == y);
                    if !fits {
                        let d2 = Diagnostic::new(
                            Code::E0301,
                            format!(
                                "`acc` has shape {}, but the product is {}",
                                shape_string(s),
                                shape_string(&shape)
                            ),
                            self.loc(f, a.span("acc")),
                            format!("shape {}", shape_string(s)),
                        );
                        self.emit(f, d2);
                        return Val::unknown();
                    }
                    if a.given("out_dtype") && *d != out_dtype {
                        self.error(
                            f,
                            Code::E0300,
                            format!("`acc` is {d} but `out_dtype` is {out_dtype}"),
                            a.span("acc"),
                            "dtype differs",
                        );
                    }
                    out = *d;
                }
                Ty::Unknown => return Val::unknown(),
                other => {
                    self.error(
                        f,
                        Code::E0300,
                        format!("`acc` must be a 2-D block, found {other}"),
                        a.span("acc"),
                        "not an accumulator",
                    );
                    return Val::unknown();
                }
            }
        }
        // As in Triton: float inputs accumulate in f32 and give a float,
        // integer inputs wrap and give an integer (no bool). A float result
        // of integers, or an integer one of floats, has no one obvious
        // rounding; convert the operands or the result instead.
        if da.is_float() != out.is_float() || out == DType::Bool {
            let (from, span) = match a.given("acc") {
                true => ("`acc`", a.span("acc")),
                false => ("`out_dtype`", a.span("out_dtype")),
            };
            let kind = |d: DType| if d.is_float() { "float" } else { "integer" };
            let d = Diagnostic::new(
                Code::E0300,
                format!(
                    "`tl.dot` of {da} operands gives {} results, but {from} is {out}",
                    kind(da)
                ),
                self.loc(f, span),
                format!("{out}"),
            )
            .with_secondary(self.loc(f, a.span("input")), format!("{da}"))
            .with_help(match da.is_float() {
                true => "accumulate in f32 (or f16, bf16) and convert the result with `.to(...)`".to_string(),
                false => "accumulate in an integer dtype (i32 by default) and convert the result, or convert the \
                          operands first, e.g. `a.to(f32)`"
                    .to_string(),
            });
            self.emit(f, d);
            return Val::unknown();
        }
        Val::runtime(Ty::Block(Elem::Num(out), shape))
    }

    fn reduction(&mut self, f: &mut Frame, a: &Args) -> Val {
        let b = a.builtin;
        let x = a.val("input");
        let (dtype, shape) = match &x.ty {
            Ty::Block(Elem::Num(d), s) => (*d, s.clone()),
            Ty::Scalar(Elem::Num(d)) => (*d, Vec::new()),
            Ty::Unknown => return Val::unknown(),
            other => {
                self.error(
                    f,
                    Code::E0300,
                    format!("`{}` reduces numbers, found {other}", b.qualified()),
                    a.span("input"),
                    "not numeric",
                );
                return Val::unknown();
            }
        };
        let axis = match a.val("axis").konst {
            Some(Konst::None) => None,
            Some(Konst::Int(v)) => {
                let rank = shape.len() as i64;
                let ax = if v < 0 { v + rank } else { v };
                if !(0..rank.max(1)).contains(&ax) || rank == 0 {
                    let d = Diagnostic::new(
                        Code::E0309,
                        format!("axis {v} is out of range for a value of rank {rank}"),
                        self.loc(f, a.span("axis")),
                        "invalid axis",
                    )
                    .with_secondary(self.loc(f, a.span("input")), format!("{}", x.ty));
                    self.emit(f, d);
                    return Val::unknown();
                }
                Some(ax as usize)
            }
            // Unknown, or a constant checking does not enumerate (see
            // `axis_const`): the result's shape is known when lowering.
            _ if a.val("axis").ty.is_unknown() || a.val("axis").is_const => return Val::unknown(),
            _ => {
                self.error(
                    f,
                    Code::E0209,
                    "`axis` must be a compile-time integer or None",
                    a.span("axis"),
                    "not a constant",
                );
                return Val::unknown();
            }
        };
        let keep = matches!(a.val("keep_dims").konst, Some(Konst::Bool(true)));
        let out_shape: Shape = match (axis, keep) {
            (None, false) => Vec::new(),
            (None, true) => vec![Some(1); shape.len()],
            (Some(ax), false) => shape
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != ax)
                .map(|(_, d)| *d)
                .collect(),
            (Some(ax), true) => shape
                .iter()
                .enumerate()
                .map(|(i, d)| if i == ax { Some(1) } else { *d })
                .collect(),
        };
        let out_dtype = match b {
            Builtin::Argmax | Builtin::Argmin => DType::I32,
            Builtin::Sum => match a.val("dtype").konst {
                Some(Konst::DType(d)) => d,
                // Triton widens small integers so sums do not overflow.
                _ if dtype.is_int() && dtype.bits() < 32 => {
                    if dtype.is_signed() {
                        DType::I32
                    } else {
                        DType::U32
                    }
                }
                _ => dtype,
            },
            _ => dtype,
        };
        let values = Val::runtime(Ty::with_shape(Elem::Num(out_dtype), out_shape.clone()));
        if matches!(b, Builtin::Max | Builtin::Min) && matches!(a.val("return_indices").konst, Some(Konst::Bool(true)))
        {
            let idx = Ty::with_shape(Elem::Num(DType::I32), out_shape);
            return Val::runtime(Ty::Tuple(vec![values.ty, idx]));
        }
        values
    }

    fn float_unary(&mut self, f: &mut Frame, a: &Args, name: &str) -> Val {
        let x = a.val(name);
        match x.ty.elem() {
            Some(Elem::Num(d)) if d.is_float() => Val::runtime(x.ty),
            _ if x.ty.is_unknown() => Val::unknown(),
            Some(Elem::Num(d)) => {
                let d2 = Diagnostic::new(
                    Code::E0300,
                    format!(
                        "`{}` needs floating-point values, found {}",
                        a.builtin.qualified(),
                        x.ty
                    ),
                    self.loc(f, a.span(name)),
                    format!("{d} values"),
                )
                .with_help("convert first: `x.to(f32)`");
                self.emit(f, d2);
                Val::unknown()
            }
            _ => {
                self.error(
                    f,
                    Code::E0300,
                    format!("`{}` needs numbers, found {}", a.builtin.qualified(), x.ty),
                    a.span(name),
                    "not numeric",
                );
                Val::unknown()
            }
        }
    }

    /// Elementwise n-ary rule: promotion over all operands, broadcasting.
    fn elementwise(&mut self, f: &mut Frame, a: &Args, names: &[&str], float_only: bool) -> Val {
        let mut acc: Option<(DType, bool, Shape, Span)> = None;
        for name in names {
            let v = a.val(name);
            if v.ty.is_unknown() {
                return Val::unknown();
            }
            let Some(Elem::Num(d)) = v.ty.elem() else {
                self.error(
                    f,
                    Code::E0300,
                    format!("`{}` needs numbers, found {}", a.builtin.qualified(), v.ty),
                    a.span(name),
                    "not numeric",
                );
                return Val::unknown();
            };
            if float_only && !d.is_float() && !v.is_weak() {
                self.error(
                    f,
                    Code::E0300,
                    format!(
                        "`{}` needs floating-point values, found {}",
                        a.builtin.qualified(),
                        v.ty
                    ),
                    a.span(name),
                    "not floating-point",
                );
                return Val::unknown();
            }
            let s = v.ty.shape().map(|s| s.to_vec()).unwrap_or_default();
            acc = Some(match acc {
                None => (d, v.is_weak(), s, a.span(name)),
                Some((pd, pw, ps, pspan)) => {
                    let Some(dt) = self.promote_or_report(
                        f,
                        &a.builtin.qualified(),
                        (pd, pw),
                        (d, v.is_weak()),
                        false,
                        a.span(name),
                    ) else {
                        return Val::unknown();
                    };
                    let shape = match broadcast(&ps, &s) {
                        Ok(sh) => sh,
                        Err(_) => {
                            let d2 = Diagnostic::new(
                                Code::E0301,
                                format!(
                                    "incompatible shapes for `{}`: {} and {}",
                                    a.builtin.qualified(),
                                    shape_string(&ps),
                                    shape_string(&s)
                                ),
                                self.loc(f, a.span(name)),
                                format!("this has shape {}", shape_string(&s)),
                            )
                            .with_secondary(self.loc(f, pspan), format!("this has shape {}", shape_string(&ps)));
                            self.emit(f, d2);
                            return Val::unknown();
                        }
                    };
                    (dt, pw && v.is_weak(), shape, pspan)
                }
            });
        }
        let Some((d, _, shape, _)) = acc else {
            return Val::unknown();
        };
        let d = if float_only && !d.is_float() { DType::F32 } else { d };
        Val {
            ty: Ty::with_shape(Elem::Num(d), shape),
            konst: None,
            is_const: false,
            ir: None,
            parts: Vec::new(),
        }
    }

    /// The target shape of `reshape`/`broadcast_to`: varargs ints, or one
    /// tuple.
    fn varargs_shape(&mut self, f: &Frame, a: &Args) -> Option<Shape> {
        match a.bound.varargs.as_slice() {
            [] => {
                self.error(
                    f,
                    Code::E0203,
                    format!("`{}` needs a shape", a.builtin.qualified()),
                    a.call,
                    "missing shape",
                );
                None
            }
            [one] => self.shape_arg(f, Some(one)),
            many => {
                let ks: Vec<Konst> = many.iter().filter_map(|m| m.val.konst.clone()).collect();
                if ks.len() != many.len() {
                    if many.iter().any(|m| m.val.ty.is_unknown()) {
                        return None;
                    }
                    let span = many[0].span.to(many[many.len() - 1].span);
                    let v = Val::runtime(Ty::num(DType::I32));
                    self.shape_int_val(f, &v, span, "block shapes");
                    return None;
                }
                let span = many[0].span.to(many[many.len() - 1].span);
                let tuple = ArgVal {
                    keyword: None,
                    val: Val::konst(Konst::Tuple(ks)),
                    span,
                };
                self.shape_arg(f, Some(&tuple))
            }
        }
    }

    fn reshape_like(&mut self, f: &mut Frame, a: &Args) -> Val {
        let x = a.val("input");
        let target = self.varargs_shape(f, a);
        let (elem, shape) = match &x.ty {
            Ty::Block(e, s) => (*e, s.clone()),
            Ty::Scalar(e) => (*e, Vec::new()),
            Ty::Unknown => return Val::unknown(),
            other => {
                self.error(
                    f,
                    Code::E0300,
                    format!("`{}` needs a block, found {other}", a.builtin.qualified()),
                    a.span("input"),
                    "not a block",
                );
                return Val::unknown();
            }
        };
        let Some(target) = target else {
            return Val::unknown();
        };
        let target_span = a
            .bound
            .varargs
            .first()
            .map_or(a.call, |v| v.span.to(a.bound.varargs[a.bound.varargs.len() - 1].span));
        if a.builtin == Builtin::Reshape {
            if let (Some(n0), Some(n1)) = (numel(&shape), numel(&target)) {
                if n0 != n1 {
                    let d = Diagnostic::new(
                        Code::E0314,
                        format!(
                            "cannot reshape {} ({n0} elements) into {} ({n1} elements)",
                            shape_string(&shape),
                            shape_string(&target)
                        ),
                        self.loc(f, target_span),
                        format!("{n1} elements"),
                    )
                    .with_secondary(self.loc(f, a.span("input")), format!("{n0} elements"));
                    self.emit(f, d);
                    return Val::unknown();
                }
            }
        } else {
            let ok = match broadcast(&shape, &target) {
                Ok(b) => {
                    b.len() == target.len() && b.iter().zip(&target).all(|(x, y)| x.is_none() || y.is_none() || x == y)
                }
                Err(_) => false,
            };
            if !ok {
                let d = Diagnostic::new(
                    Code::E0301,
                    format!("cannot broadcast {} to {}", shape_string(&shape), shape_string(&target)),
                    self.loc(f, target_span),
                    "target shape",
                )
                .with_secondary(self.loc(f, a.span("input")), format!("shape {}", shape_string(&shape)));
                self.emit(f, d);
                return Val::unknown();
            }
        }
        Val::runtime(Ty::with_shape(elem, target))
    }

    fn trans(&mut self, f: &mut Frame, a: &Args) -> Val {
        let x = a.val("input");
        let (elem, shape) = match &x.ty {
            Ty::Block(e, s) => (*e, s.clone()),
            Ty::Unknown => return Val::unknown(),
            other => {
                self.error(
                    f,
                    Code::E0322,
                    format!("`tl.trans` needs a block, found {other}"),
                    a.span("input"),
                    "not a block",
                );
                return Val::unknown();
            }
        };
        let perm: Vec<usize> = if a.bound.varargs.is_empty() {
            if shape.len() != 2 {
                let d = Diagnostic::new(
                    Code::E0322,
                    format!(
                        "`tl.trans` without `dims` needs a 2-D block, found rank {}",
                        shape.len()
                    ),
                    self.loc(f, a.span("input")),
                    format!("{}", x.ty),
                )
                .with_help("pass the permutation: `tl.trans(x, 2, 0, 1)`");
                self.emit(f, d);
                return Val::unknown();
            }
            vec![1, 0]
        } else {
            let Some(dims) = self.varargs_shape_raw(f, a) else {
                return Val::unknown();
            };
            let mut sorted = dims.clone();
            sorted.sort_unstable();
            if sorted != (0..shape.len() as i64).collect::<Vec<_>>() {
                let span = a.bound.varargs[0]
                    .span
                    .to(a.bound.varargs[a.bound.varargs.len() - 1].span);
                self.error(
                    f,
                    Code::E0309,
                    format!(
                        "`dims` must be a permutation of the axes {}",
                        (0..shape.len()).map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
                    ),
                    span,
                    "not a permutation",
                );
                return Val::unknown();
            }
            dims.into_iter().map(|d| d as usize).collect()
        };
        Val::runtime(Ty::Block(elem, perm.iter().map(|&i| shape[i]).collect()))
    }

    /// Varargs ints without the positivity rule of shapes (`trans` dims).
    fn varargs_shape_raw(&mut self, f: &Frame, a: &Args) -> Option<Vec<i64>> {
        let mut out = Vec::new();
        let items: Vec<Val> = match a.bound.varargs.as_slice() {
            [one] => match &one.val.konst {
                Some(Konst::Tuple(ks)) => ks.iter().cloned().map(Val::konst).collect(),
                _ => vec![one.val.clone()],
            },
            many => many.iter().map(|m| m.val.clone()).collect(),
        };
        for (i, v) in items.iter().enumerate() {
            let span = a
                .bound
                .varargs
                .get(i)
                .or(a.bound.varargs.first())
                .map_or(a.call, |x| x.span);
            match v.konst.as_ref().and_then(Konst::as_int) {
                Some(k) => out.push(k),
                None if v.ty.is_unknown() => return None,
                None => {
                    self.error(
                        f,
                        Code::E0209,
                        "`dims` must be compile-time integers",
                        span,
                        "not a constant",
                    );
                    return None;
                }
            }
        }
        Some(out)
    }

    fn gemm(&mut self, f: &mut Frame, a: &Args) -> Val {
        let mut dtypes = Vec::new();
        for name in ["a", "b", "out"] {
            let v = a.val(name);
            match v.ty {
                Ty::Scalar(Elem::Ptr(d)) => dtypes.push(Some(d)),
                Ty::Unknown => dtypes.push(None),
                other => {
                    let d = Diagnostic::new(
                        Code::E0307,
                        format!("`tl.gemm` operand `{name}` must be a base pointer, found {other}"),
                        self.loc(f, a.span(name)),
                        "not a scalar pointer",
                    )
                    .with_note("`tl.gemm` streams whole row-major matrices from their base pointers");
                    self.emit(f, d);
                    dtypes.push(None);
                }
            }
        }
        if let (Some(da), Some(db)) = (dtypes[0], dtypes[1]) {
            if da != db {
                let d = Diagnostic::new(
                    Code::E0300,
                    format!("`tl.gemm` operands have different dtypes: {da} and {db}"),
                    self.loc(f, a.span("b")),
                    format!("ptr[{db}]"),
                )
                .with_secondary(self.loc(f, a.span("a")), format!("ptr[{da}]"));
                self.emit(f, d);
            }
        }
        for name in ["M", "N", "K"] {
            self.int_scalar(f, a, name);
            // The engine takes i32 sizes: a wider value would be cut down
            // silently (4294967296 to 0, a GEMM that does nothing).
            let v = a.val(name);
            let wide = match (&v.konst, v.ty.dtype()) {
                (Some(k), _) => k.as_int().is_some_and(|i| i32::try_from(i).is_err()),
                (None, Some(d)) => matches!(d, DType::I64 | DType::U32),
                _ => false,
            };
            if wide {
                let d = Diagnostic::new(
                    Code::E0300,
                    format!(
                        "`{name}` of `tl.gemm` is an i32 size, found {}",
                        v.konst.as_ref().map_or_else(|| v.ty.to_string(), |k| k.to_string())
                    ),
                    self.loc(f, a.span(name)),
                    "wider than i32",
                )
                .with_help(match v.konst {
                    Some(_) => "a GEMM size is at most 2147483647".to_string(),
                    None => format!("pass an i32 (`{name}.to(i32)` when it fits)"),
                });
                self.emit(f, d);
            }
        }
        for name in ["a_in", "b_in"] {
            let v = a.val(name);
            match &v.konst {
                Some(Konst::Str(s)) if matches!(s.as_str(), "hbm" | "tcm" | "sram") => {}
                Some(Konst::Str(s)) => {
                    self.error(
                        f,
                        Code::E0326,
                        format!("`{name}` must be \"hbm\", \"sram\" or \"tcm\", found {s:?}"),
                        a.span(name),
                        "unknown memory space",
                    );
                }
                _ if v.ty.is_unknown() => {}
                _ => {
                    self.error(
                        f,
                        Code::E0209,
                        format!("`{name}` must be a constant string"),
                        a.span(name),
                        "not a constant string",
                    );
                }
            }
        }
        Val::none()
    }

    /// `x.to(dtype, bitcast=False)`.
    pub fn conversion_call(&mut self, f: &mut Frame, recv: &Val, args: Vec<ArgVal>, call: Span) -> Val {
        let src = &recv.ty;
        let params = [("dtype", true), ("bitcast", false)];
        let Some(bound) = self.bind_args(f, "`to`", &params, None, args, call) else {
            return Val::unknown();
        };
        let Some(target) = bound.fixed[0].as_ref().and_then(|a| self.dtype_arg(f, Some(a))) else {
            return Val::unknown();
        };
        let bitcast = bound.fixed[1]
            .as_ref()
            .is_some_and(|a| a.val.konst == Some(Konst::Bool(true)));
        match src.elem() {
            Some(Elem::Num(d)) => {
                if bitcast && d.bits() != target.bits() {
                    self.error(
                        f,
                        Code::E0308,
                        format!(
                            "cannot bitcast {d} ({} bits) to {target} ({} bits)",
                            d.bits(),
                            target.bits()
                        ),
                        call,
                        "sizes differ",
                    );
                    return Val::unknown();
                }
                let shape = src.shape().map(|s| s.to_vec()).unwrap_or_default();
                let ty = Ty::with_shape(Elem::Num(target), shape);
                let x = match recv.ir {
                    Some(x) => Some(x),
                    None => recv.konst.as_ref().and_then(|k| self.const_of(f, k, d, call)),
                };
                let ir = if d == target {
                    x
                } else {
                    self.emit_value(f, Op::Cast { bitcast }, vec![x], &ty, call)
                };
                Val::runtime(ty).with_ir(ir)
            }
            Some(Elem::Ptr(_)) => {
                let d = Diagnostic::new(
                    Code::E0308,
                    "pointers cannot be converted with `.to`",
                    self.loc(f, call),
                    "pointer conversion",
                )
                .with_help("declare the parameter with the element type you need: `ptr[f32]`");
                self.emit(f, d);
                Val::unknown()
            }
            None => Val::unknown(),
        }
    }
}
