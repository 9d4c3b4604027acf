//! Emission of IR while checking (lowering). The checker walks a kernel
//! once more with a [`Builder`] present; every rule that makes a run-time
//! value also emits the instruction computing it. The helpers here make
//! operands concrete: constants become `const`, dtypes are converted with
//! `cast`, shapes with `splat`/`reshape`/`broadcast` — so the IR's
//! elementwise operations always see operands of one type and shape.
//!
//! In plain checking there is no builder and every function here is a
//! no-op returning `None`.

use super::check::{Checker, Frame, Val};
use super::types::{DType, Elem, Konst, Ty};
use crate::datapath::elem;
use crate::ir::{self, ConstVal, Op, Type, Value};
use crate::span::Span;

impl Val {
    pub fn with_ir(mut self, ir: Option<Value>) -> Val {
        self.ir = ir;
        self
    }
}

impl Checker {
    pub fn emitting(&self) -> bool {
        self.builder.is_some()
    }

    /// The IR type of a checked type; `None` for non-values and for shapes
    /// that are not fully known.
    pub fn ir_type(ty: &Ty) -> Option<Type> {
        match ty {
            Ty::Scalar(e) => Some(Type::Scalar(*e)),
            Ty::Block(e, s) => Some(Type::Block(*e, s.iter().copied().collect::<Option<Vec<u64>>>()?)),
            Ty::Future(d, s) => Some(Type::Future(*d, s.iter().copied().collect::<Option<Vec<u64>>>()?)),
            _ => None,
        }
    }

    /// Records that lowering could not produce a value (a checker bug if no
    /// error was reported).
    fn lost(&mut self) -> Option<Value> {
        if self.builder.is_some() {
            self.emit_failed = true;
        }
        None
    }

    /// Emits a one-result instruction.
    pub fn emit_value(&mut self, f: &Frame, op: Op, args: Vec<Option<Value>>, ty: &Ty, span: Span) -> Option<Value> {
        self.builder.as_ref()?;
        let Some(t) = Self::ir_type(ty) else { return self.lost() };
        self.emit_typed(f, op, args, t, span)
    }

    pub fn emit_typed(&mut self, f: &Frame, op: Op, args: Vec<Option<Value>>, t: Type, span: Span) -> Option<Value> {
        self.builder.as_ref()?;
        let Some(args) = args.into_iter().collect::<Option<Vec<Value>>>() else {
            return self.lost();
        };
        let loc = self.loc(f, span);
        self.builder.as_mut().map(|b| b.value(op, args, t, loc))
    }

    /// Emits an instruction with no result (a store, a send).
    pub fn emit_effect(&mut self, f: &Frame, op: Op, args: Vec<Option<Value>>, span: Span) {
        if self.builder.is_none() {
            return;
        }
        let Some(args) = args.into_iter().collect::<Option<Vec<Value>>>() else {
            self.lost();
            return;
        };
        let loc = self.loc(f, span);
        if let Some(b) = self.builder.as_mut() {
            b.push(op, args, vec![], vec![], loc);
        }
    }

    /// A scalar constant of dtype `d`: the literal's natural value (i64 or
    /// f32) converted to `d`, as a cast would.
    pub fn const_of(&mut self, f: &Frame, k: &Konst, d: DType, span: Span) -> Option<Value> {
        self.builder.as_ref()?;
        // The constant is stored already converted to `d` (ints wrap,
        // floats round through f32), so the IR text shows the exact value.
        let bits = match k {
            Konst::Int(v) => elem::const_int(d, *v),
            Konst::Bool(b) => elem::const_int(d, *b as i64),
            Konst::Float(v) => elem::const_float(d, *v),
            _ => return self.lost(),
        };
        let c = if d.is_float() {
            ConstVal::Float(elem::to_f32(d, bits) as f64)
        } else {
            ConstVal::Int(elem::to_i64(d, bits))
        };
        self.emit_typed(f, Op::Const(c), vec![], Type::Scalar(Elem::Num(d)), span)
    }

    /// `v` as an IR value of exactly type `want`: constants materialized,
    /// converted (`cast`) and broadcast (`splat`, `reshape`, `broadcast`).
    pub fn operand(&mut self, f: &Frame, v: &Val, want: &Type, span: Span) -> Option<Value> {
        self.builder.as_ref()?;
        let mut cur = match (v.ir, &v.konst) {
            (Some(x), _) => x,
            (None, Some(k)) => match want.elem() {
                Elem::Num(d) => self.const_of(f, k, d, span)?,
                Elem::Ptr(_) => return self.lost(),
            },
            (None, None) => return self.lost(),
        };
        let ty = self.builder.as_ref().map(|b| b.ty(cur).clone())?;
        if ty.elem() != want.elem() {
            if matches!(ty.elem(), Elem::Ptr(_)) || matches!(want.elem(), Elem::Ptr(_)) {
                return self.lost();
            }
            cur = self.emit_typed(
                f,
                Op::Cast { bitcast: false },
                vec![Some(cur)],
                ty.with_elem(want.elem()),
                span,
            )?;
        }
        self.broadcast_value(f, cur, want.shape(), span)
    }

    /// Broadcasts an IR value to `shape` (NumPy rules, already checked).
    pub fn broadcast_value(&mut self, f: &Frame, v: Value, shape: &[u64], span: Span) -> Option<Value> {
        let ty = self.builder.as_ref().map(|b| b.ty(v).clone())?;
        if ty.shape() == shape {
            return Some(v);
        }
        let elem = ty.elem();
        if matches!(ty, Type::Scalar(_)) {
            return self.emit_typed(f, Op::Splat, vec![Some(v)], Type::Block(elem, shape.to_vec()), span);
        }
        let mut cur = v;
        let mut cur_shape = ty.shape().to_vec();
        if cur_shape.len() < shape.len() {
            let mut padded = vec![1; shape.len() - cur_shape.len()];
            padded.extend(&cur_shape);
            cur = self.emit_typed(f, Op::Reshape, vec![Some(cur)], Type::Block(elem, padded.clone()), span)?;
            cur_shape = padded;
        }
        if cur_shape.as_slice() != shape {
            cur = self.emit_typed(
                f,
                Op::Broadcast,
                vec![Some(cur)],
                Type::Block(elem, shape.to_vec()),
                span,
            )?;
        }
        Some(cur)
    }

    /// A scalar condition as a bool IR value (`x != 0` for numbers).
    pub fn bool_scalar(&mut self, f: &Frame, v: &Val, span: Span) -> Option<Value> {
        self.builder.as_ref()?;
        match v.ty.dtype() {
            Some(DType::Bool) => self.operand(f, v, &Type::Scalar(Elem::Num(DType::Bool)), span),
            Some(d) => {
                let x = self.operand(f, v, &Type::Scalar(Elem::Num(d)), span);
                let zero = self.const_of(f, &Konst::Int(0), d, span);
                self.emit_typed(
                    f,
                    Op::Cmp(ir::CmpOp::Ne),
                    vec![x, zero],
                    Type::Scalar(Elem::Num(DType::Bool)),
                    span,
                )
            }
            None => match &v.konst {
                Some(k) => {
                    let b = super::consteval::truthy(k).unwrap_or(false);
                    self.const_of(f, &Konst::Bool(b), DType::Bool, span)
                }
                None => self.lost(),
            },
        }
    }

    /// Makes a compile-time value a run-time one (a loop-carried variable
    /// that starts from a constant), emitting its constant.
    pub fn materialize(&mut self, f: &Frame, v: &Val, span: Span) -> Val {
        let ir = match (&v.ty, v.ir) {
            (_, Some(x)) => Some(x),
            (Ty::Scalar(Elem::Num(d)), None) => match &v.konst {
                Some(k) => self.const_of(f, k, *d, span),
                None => self.lost(),
            },
            _ => None,
        };
        Val::runtime(v.ty.clone()).with_ir(ir)
    }
}
