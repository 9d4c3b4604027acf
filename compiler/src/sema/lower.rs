//! Lowering built-in calls to IR: given a call's checked arguments and its
//! result type (from `rules.rs`), emit the instructions computing it.
//! Composite built-ins expand here (`tl.softmax`, `tl.clamp`, run-time
//! `tl.cdiv`, `tl.max(…, return_indices=True)`).

use super::builtins::Builtin;
use super::check::{Checker, Frame, Val};
use super::rules::Args;
use super::types::{DType, Elem, Konst, Ty};
use crate::ir::{BinaryOp, CmpOp, Op, Peer, ReduceOp, Space, Type, UnaryOp, Value};
use crate::span::Span;

impl Checker {
    /// `v` as an IR value of its own type.
    fn own(&mut self, f: &Frame, v: &Val, span: Span) -> Option<Value> {
        let t = Self::ir_type(&v.ty)?;
        self.operand(f, v, &t, span)
    }

    fn arg_own(&mut self, f: &Frame, a: &Args, name: &str) -> Option<Value> {
        let v = a.val(name);
        self.own(f, &v, a.span(name))
    }

    fn axis_attr(a: &Args, name: &str) -> u8 {
        a.val(name).konst.as_ref().and_then(Konst::as_int).unwrap_or(0) as u8
    }

    /// The peer of a send/recv: a direction, or a rank operand.
    fn peer_operand(&mut self, f: &Frame, a: &Args, name: &str) -> (Peer, Vec<Option<Value>>) {
        let v = a.val(name);
        match v.konst {
            Some(Konst::Direction(d)) => (Peer::Dir(d), vec![]),
            _ => (Peer::Rank, vec![self.rank_operand(f, a, name)]),
        }
    }

    /// A rank operand (of a send, a receive, `tl.symm_at`, `tl.notify`):
    /// an `i64` or `u32` rank in its own type, any other in `i32`. Cast to
    /// `i32`, 2^32 + 1 would reach rank 1 and the `u32` 2^32 - 1 would be
    /// reported as rank -1; the simulator reads the rank by its type and
    /// checks it against the communicator.
    fn rank_operand(&mut self, f: &Frame, a: &Args, name: &str) -> Option<Value> {
        let v = a.val(name);
        let dt = match v.ty.dtype() {
            Some(d @ (DType::I64 | DType::U32)) => d,
            _ => DType::I32,
        };
        self.operand(f, &v, &Type::Scalar(Elem::Num(dt)), a.span(name))
    }

    pub(super) fn lower_builtin(&mut self, f: &mut Frame, a: &Args, res: Val) -> Val {
        // Folded at compile time (`tl.cdiv(8, 4)`): a constant needs no code.
        if !self.emitting() || res.ty.is_unknown() || res.konst.as_ref().is_some_and(|k| *k != Konst::None) {
            return res;
        }
        let span = a.call;
        use Builtin as B;
        let rt = Self::ir_type(&res.ty);
        let ir: Option<Value> = match a.builtin {
            B::ProgramId => self.emit_value(f, Op::ProgramId(Self::axis_attr(a, "axis")), vec![], &res.ty, span),
            B::NumPrograms => self.emit_value(f, Op::NumPrograms(Self::axis_attr(a, "axis")), vec![], &res.ty, span),
            B::MeshId => self.emit_value(f, Op::MeshId(Self::axis_attr(a, "axis")), vec![], &res.ty, span),
            B::MeshSize => self.emit_value(f, Op::MeshSize(Self::axis_attr(a, "axis")), vec![], &res.ty, span),
            B::Rank => self.emit_value(f, Op::Rank, vec![], &res.ty, span),
            B::WorldSize => self.emit_value(f, Op::WorldSize, vec![], &res.ty, span),
            B::Arange => {
                let start = a.val("start").konst.as_ref().and_then(Konst::as_int).unwrap_or(0);
                let end = a.val("end").konst.as_ref().and_then(Konst::as_int).unwrap_or(0);
                self.emit_value(f, Op::Arange { start, end }, vec![], &res.ty, span)
            }
            B::Zeros => {
                let t = rt.clone();
                t.and_then(|t| self.operand(f, &Val::konst(Konst::Int(0)), &t, span))
            }
            B::Full => {
                let v = a.val("value");
                let t = rt.clone();
                t.and_then(|t| self.operand(f, &v, &t, a.span("value")))
            }
            B::Load | B::AtomicAdd | B::Store => return self.lower_memory(f, a, res),
            B::Dot => {
                let x = self.arg_own(f, a, "input");
                let y = self.arg_own(f, a, "other");
                let has_acc = a.given("acc");
                let mut args = vec![x, y];
                if has_acc {
                    let acc = a.val("acc");
                    let t = rt.clone();
                    args.push(t.and_then(|t| self.operand(f, &acc, &t, a.span("acc"))));
                }
                self.emit_value(f, Op::Dot { has_acc }, args, &res.ty, span)
            }
            B::Sum | B::Max | B::Min | B::Argmax | B::Argmin => return self.lower_reduction(f, a, res),
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
            | B::Ceil
            | B::Abs => {
                let op = match a.builtin {
                    B::Exp => UnaryOp::Exp,
                    B::Exp2 => UnaryOp::Exp2,
                    B::Log => UnaryOp::Log,
                    B::Log2 => UnaryOp::Log2,
                    B::Sqrt => UnaryOp::Sqrt,
                    B::Rsqrt => UnaryOp::Rsqrt,
                    B::Sin => UnaryOp::Sin,
                    B::Cos => UnaryOp::Cos,
                    B::Sigmoid => UnaryOp::Sigmoid,
                    B::Floor => UnaryOp::Floor,
                    B::Ceil => UnaryOp::Ceil,
                    _ => UnaryOp::Abs,
                };
                let x = self.arg_own(f, a, "x");
                self.emit_value(f, Op::Unary(op), vec![x], &res.ty, span)
            }
            B::Softmax => self.lower_softmax(f, a, &res.ty),
            B::Maximum | B::Minimum => {
                let op = if a.builtin == B::Maximum {
                    BinaryOp::Max
                } else {
                    BinaryOp::Min
                };
                self.binary_of(f, a, op, "x", "y", rt.as_ref())
            }
            B::Clamp => {
                let Some(t) = rt.clone() else { return res };
                let (x, lo, hi) = (a.val("x"), a.val("min"), a.val("max"));
                let xv = self.operand(f, &x, &t, a.span("x"));
                let lov = self.operand(f, &lo, &t, a.span("min"));
                let hiv = self.operand(f, &hi, &t, a.span("max"));
                let m = self.emit_typed(f, Op::Binary(BinaryOp::Max), vec![xv, lov], t.clone(), span);
                self.emit_typed(f, Op::Binary(BinaryOp::Min), vec![m, hiv], t, span)
            }
            B::Fma => {
                let Some(t) = rt.clone() else { return res };
                let args: Vec<Option<Value>> = ["x", "y", "z"]
                    .iter()
                    .map(|n| {
                        let v = a.val(n);
                        self.operand(f, &v, &t, a.span(n))
                    })
                    .collect();
                self.emit_typed(f, Op::Fma, args, t, span)
            }
            B::Where => {
                let Some(t) = rt.clone() else { return res };
                let c = a.val("condition");
                let cv = self.operand(f, &c, &t.with_elem(Elem::Num(DType::Bool)), a.span("condition"));
                let (x, y) = (a.val("x"), a.val("y"));
                let xv = self.operand(f, &x, &t, a.span("x"));
                let yv = self.operand(f, &y, &t, a.span("y"));
                self.emit_typed(f, Op::Select, vec![cv, xv, yv], t, span)
            }
            B::Cdiv => {
                // The exact ceiling for every sign, as constants fold (Triton's
                // `(x + div - 1) // div` truncates: wrong for negatives).
                let Some(t) = rt.clone() else { return res };
                let (x, d) = (a.val("x"), a.val("div"));
                // By a constant power of two 2^k, the usual block count, with
                // shifts and no division: the floor quotient `x >> k`
                // (arithmetic for signed types), plus one when the
                // remainder `x & (d - 1)` (in 0..d) is not zero, which
                // `(r + d - 1) >> k` gives with no overflow.
                if let Some(k) = d
                    .konst
                    .as_ref()
                    .and_then(Konst::as_int)
                    .filter(|&c| c > 0 && (c as u64).is_power_of_two())
                {
                    let xv = self.operand(f, &x, &t, a.span("x"));
                    let dm1 = self.operand(f, &Val::konst(Konst::Int(k - 1)), &t, span);
                    let shift = self.operand(f, &Val::konst(Konst::Int(i64::from(k.trailing_zeros()))), &t, span);
                    let bin = |op| Op::Binary(op);
                    let q = self.emit_typed(f, bin(BinaryOp::Shr), vec![xv, shift], t.clone(), span);
                    let r = self.emit_typed(f, bin(BinaryOp::And), vec![xv, dm1], t.clone(), span);
                    let r = self.emit_typed(f, bin(BinaryOp::Add), vec![r, dm1], t.clone(), span);
                    let up = self.emit_typed(f, bin(BinaryOp::Shr), vec![r, shift], t.clone(), span);
                    self.emit_typed(f, bin(BinaryOp::Add), vec![q, up], t, span)
                } else {
                    self.cdiv_exact(f, (&x, a.span("x")), (&d, a.span("div")), t, span)
                }
            }
            B::Reshape => {
                let x = a.val("input");
                let xv = self.own(f, &x, a.span("input"));
                let op = if matches!(x.ty, Ty::Scalar(_)) {
                    Op::Splat
                } else {
                    Op::Reshape
                };
                self.emit_value(f, op, vec![xv], &res.ty, span)
            }
            B::BroadcastTo => {
                let x = a.val("input");
                let shape = rt.as_ref().map(|t| t.shape().to_vec()).unwrap_or_default();
                let xv = self.own(f, &x, a.span("input"));
                xv.and_then(|v| self.broadcast_value(f, v, &shape, span))
            }
            B::Trans => {
                let x = a.val("input");
                let perm: Vec<usize> = if a.bound.varargs.is_empty() {
                    vec![1, 0]
                } else {
                    let ints: Vec<i64> = match a.bound.varargs.as_slice() {
                        [one] => match &one.val.konst {
                            Some(Konst::Tuple(ks)) => ks.iter().filter_map(Konst::as_int).collect(),
                            Some(k) => k.as_int().into_iter().collect(),
                            None => vec![],
                        },
                        many => many
                            .iter()
                            .filter_map(|m| m.val.konst.as_ref().and_then(Konst::as_int))
                            .collect(),
                    };
                    ints.into_iter().map(|i| i as usize).collect()
                };
                let xv = self.own(f, &x, a.span("input"));
                self.emit_value(f, Op::Trans { perm }, vec![xv], &res.ty, span)
            }
            B::DeviceAssert => {
                let c = a.val("cond");
                let t = Self::ir_type(&c.ty).map(|t| t.with_elem(Elem::Num(DType::Bool)));
                let cv = t.and_then(|t| self.operand(f, &c, &t, a.span("cond")));
                let message = match a.val("msg").konst {
                    Some(Konst::Str(s)) => s,
                    _ => String::new(),
                };
                self.emit_effect(f, Op::Assert { message }, vec![cv], span);
                None
            }
            B::DevicePrint => {
                let prefix = match a.val("prefix").konst {
                    Some(Konst::Str(s)) => s,
                    _ => String::new(),
                };
                let vals: Vec<(Val, Span)> = a.bound.varargs.iter().map(|v| (v.val.clone(), v.span)).collect();
                let args: Vec<Option<Value>> = vals
                    .iter()
                    .filter(|(v, _)| Self::ir_type(&v.ty).is_some())
                    .map(|(v, s)| self.own(f, v, *s))
                    .collect();
                self.emit_effect(f, Op::Print { prefix }, args, span);
                None
            }
            B::Gemm => {
                let space = |v: Val| match v.konst {
                    Some(Konst::Str(s)) if s == "tcm" => Space::Tcm,
                    Some(Konst::Str(s)) if s == "sram" => Space::Sram,
                    _ => Space::Hbm,
                };
                let (a_in, b_in) = (space(a.val("a_in")), space(a.val("b_in")));
                let mut args = vec![
                    self.arg_own(f, a, "a"),
                    self.arg_own(f, a, "b"),
                    self.arg_own(f, a, "out"),
                ];
                for n in ["M", "N", "K"] {
                    let v = a.val(n);
                    args.push(self.operand(f, &v, &Type::Scalar(Elem::Num(DType::I32)), a.span(n)));
                }
                self.emit_effect(f, Op::Gemm { a_in, b_in }, args, span);
                None
            }
            B::Send => {
                let (peer, mut args) = self.peer_operand(f, a, "dst");
                args.push(self.arg_own(f, a, "value"));
                self.emit_effect(f, Op::Send(peer), args, span);
                None
            }
            B::Recv | B::RecvAsync => {
                let (peer, args) = self.peer_operand(f, a, "src");
                self.emit_value(
                    f,
                    Op::Recv {
                        peer,
                        is_async: a.builtin == B::RecvAsync,
                    },
                    args,
                    &res.ty,
                    span,
                )
            }
            B::Wait => {
                let fut = self.arg_own(f, a, "future");
                self.emit_value(f, Op::Wait, vec![fut], &res.ty, span)
            }
            B::SymmAt => {
                let p = self.arg_own(f, a, "pointer");
                let rv = self.rank_operand(f, a, "rank");
                self.emit_value(f, Op::SymmAt, vec![p, rv], &res.ty, span)
            }
            B::Notify | B::WaitUntil => {
                let p = a.val("sig_ptr");
                let pointee = match p.ty {
                    Ty::Scalar(Elem::Ptr(d)) => d,
                    _ => DType::I32,
                };
                let mut args = vec![self.own(f, &p, a.span("sig_ptr"))];
                if a.builtin == B::Notify {
                    args.push(self.rank_operand(f, a, "rank"));
                }
                let v = a.val("value");
                args.push(self.operand(f, &v, &Type::Scalar(Elem::Num(pointee)), a.span("value")));
                let op = if a.builtin == B::Notify {
                    Op::Notify
                } else {
                    Op::WaitUntil
                };
                self.emit_effect(f, op, args, span);
                None
            }
            B::Barrier => {
                self.emit_effect(f, Op::Barrier, vec![], span);
                None
            }
            B::StaticAssert | B::StaticRange | B::PyRange | B::PyFloat | B::PyInt | B::PyMin | B::PyMax | B::PyLen => {
                None
            }
        };
        res.with_ir(ir)
    }

    fn binary_of(&mut self, f: &Frame, a: &Args, op: BinaryOp, x: &str, y: &str, t: Option<&Type>) -> Option<Value> {
        let t = t?.clone();
        let (xv, yv) = (a.val(x), a.val(y));
        let xi = self.operand(f, &xv, &t, a.span(x));
        let yi = self.operand(f, &yv, &t, a.span(y));
        self.emit_typed(f, Op::Binary(op), vec![xi, yi], t, a.call)
    }

    /// `tl.cdiv(x, d)` at run time: the truncated quotient, plus one when
    /// the remainder is not zero and has the divisor's sign (the true
    /// quotient is then positive): the exact ceiling, with no overflow.
    fn cdiv_exact(
        &mut self,
        f: &Frame,
        (x, x_span): (&Val, Span),
        (d, d_span): (&Val, Span),
        t: Type,
        span: Span,
    ) -> Option<Value> {
        let signed = matches!(t.elem(), Elem::Num(dt) if dt.is_signed());
        let bools = t.with_elem(Elem::Num(DType::Bool));
        let xv = self.operand(f, x, &t, x_span);
        let dv = self.operand(f, d, &t, d_span);
        let zero = self.operand(f, &Val::konst(Konst::Int(0)), &t, span);
        let one = self.operand(f, &Val::konst(Konst::Int(1)), &t, span);
        let q = self.emit_typed(f, Op::Binary(BinaryOp::Div), vec![xv, dv], t.clone(), span);
        let r = self.emit_typed(f, Op::Binary(BinaryOp::Mod), vec![xv, dv], t.clone(), span);
        let mut up = self.emit_typed(f, Op::Cmp(CmpOp::Ne), vec![r, zero], bools.clone(), span);
        if signed {
            let signs = self.emit_typed(f, Op::Binary(BinaryOp::Xor), vec![r, dv], t.clone(), span);
            let same = self.emit_typed(f, Op::Cmp(CmpOp::Ge), vec![signs, zero], bools.clone(), span);
            up = self.emit_typed(f, Op::Binary(BinaryOp::And), vec![up, same], bools, span);
        }
        let q1 = self.emit_typed(f, Op::Binary(BinaryOp::Add), vec![q, one], t.clone(), span);
        self.emit_typed(f, Op::Select, vec![up, q1, q], t, span)
    }

    fn lower_memory(&mut self, f: &Frame, a: &Args, res: Val) -> Val {
        let p = a.val("pointer");
        let Some(pt) = Self::ir_type(&p.ty) else { return res };
        let Elem::Ptr(pointee) = pt.elem() else { return res };
        let shape = pt.shape().to_vec();
        let pv = self.own(f, &p, a.span("pointer"));
        let mut args = vec![pv];
        let data_name = match a.builtin {
            Builtin::Load => "other",
            Builtin::AtomicAdd => "val",
            _ => "value",
        };
        let data_t = Type::block_or_scalar(Elem::Num(pointee), &shape);
        if a.builtin != Builtin::Load {
            let v = a.val(data_name);
            args.push(self.operand(f, &v, &data_t, a.span(data_name)));
        }
        let has_mask = a.given("mask");
        if has_mask {
            let m = a.val("mask");
            args.push(self.operand(f, &m, &data_t.with_elem(Elem::Num(DType::Bool)), a.span("mask")));
        }
        match a.builtin {
            Builtin::Load => {
                let has_other = a.given("other");
                if has_other {
                    let o = a.val("other");
                    args.push(self.operand(f, &o, &data_t, a.span("other")));
                }
                let ir = self.emit_typed(f, Op::Load { has_mask, has_other }, args, data_t, a.call);
                res.with_ir(ir)
            }
            Builtin::AtomicAdd => {
                let ir = self.emit_typed(f, Op::AtomicAdd { has_mask }, args, data_t, a.call);
                res.with_ir(ir)
            }
            _ => {
                self.emit_effect(f, Op::Store { has_mask }, args, a.call);
                res
            }
        }
    }

    fn lower_reduction(&mut self, f: &Frame, a: &Args, res: Val) -> Val {
        let x = a.val("input");
        let Some(xt) = Self::ir_type(&x.ty) else { return res };
        let rank = xt.shape().len() as i64;
        let axis = match a.val("axis").konst {
            Some(Konst::Int(v)) => Some((if v < 0 { v + rank } else { v }) as usize),
            _ => None,
        };
        let keep_dims = matches!(a.val("keep_dims").konst, Some(Konst::Bool(true)));
        let op = match a.builtin {
            Builtin::Sum => ReduceOp::Sum,
            Builtin::Max => ReduceOp::Max,
            Builtin::Min => ReduceOp::Min,
            Builtin::Argmax => ReduceOp::Argmax,
            _ => ReduceOp::Argmin,
        };
        // `tl.sum` may widen the element type: convert first.
        let in_t = match (&res.ty, op) {
            (Ty::Tuple(_), _) | (_, ReduceOp::Argmax | ReduceOp::Argmin) => xt.clone(),
            (t, _) => xt.with_elem(t.elem().unwrap_or(xt.elem())),
        };
        let xv = self.operand(f, &x, &in_t, a.span("input"));
        if let Ty::Tuple(parts) = &res.ty {
            // max/min with return_indices=True: values and indices.
            let (Some(vt), Some(it)) = (parts.first().cloned(), parts.get(1).cloned()) else {
                return res;
            };
            let arg_op = if op == ReduceOp::Max {
                ReduceOp::Argmax
            } else {
                ReduceOp::Argmin
            };
            let v = self.emit_value(f, Op::Reduce { op, axis, keep_dims }, vec![xv], &vt, a.call);
            let i = self.emit_value(
                f,
                Op::Reduce {
                    op: arg_op,
                    axis,
                    keep_dims,
                },
                vec![xv],
                &it,
                a.call,
            );
            let mut out = res.clone();
            out.parts = vec![Val::runtime(vt).with_ir(v), Val::runtime(it).with_ir(i)];
            return out;
        }
        if rank == 0 {
            // Reducing a scalar: itself (or index 0).
            let ir = match op {
                ReduceOp::Argmax | ReduceOp::Argmin => self.const_of(f, &Konst::Int(0), DType::I32, a.call),
                _ => xv,
            };
            return res.with_ir(ir);
        }
        let ir = self.emit_value(f, Op::Reduce { op, axis, keep_dims }, vec![xv], &res.ty, a.call);
        res.with_ir(ir)
    }

    /// softmax(x) along the last axis: exp(x - max) / sum(exp(x - max)).
    fn lower_softmax(&mut self, f: &Frame, a: &Args, ty: &Ty) -> Option<Value> {
        let t = Self::ir_type(ty)?;
        let x = self.arg_own(f, a, "x")?;
        let shape = t.shape().to_vec();
        let axis = shape.len().checked_sub(1)?;
        let mut kept = shape.clone();
        kept[axis] = 1;
        let kept_t = Type::Block(t.elem(), kept);
        let span = a.call;
        let m = self.emit_typed(
            f,
            Op::Reduce {
                op: ReduceOp::Max,
                axis: Some(axis),
                keep_dims: true,
            },
            vec![Some(x)],
            kept_t.clone(),
            span,
        )?;
        let mb = self.broadcast_value(f, m, &shape, span);
        let d = self.emit_typed(f, Op::Binary(BinaryOp::Sub), vec![Some(x), mb], t.clone(), span);
        let e = self.emit_typed(f, Op::Unary(UnaryOp::Exp), vec![d], t.clone(), span)?;
        let s = self.emit_typed(
            f,
            Op::Reduce {
                op: ReduceOp::Sum,
                axis: Some(axis),
                keep_dims: true,
            },
            vec![Some(e)],
            kept_t,
            span,
        )?;
        let sb = self.broadcast_value(f, s, &shape, span);
        self.emit_typed(f, Op::Binary(BinaryOp::Div), vec![Some(e), sb], t, span)
    }
}
