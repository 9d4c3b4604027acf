//! Four-lane vector code for the innermost loop of elementwise groups.
//!
//! When every member of a group has a vector form — 32-bit numbers and
//! bools, pointers that step by whole elements — the innermost loop takes
//! four elements at a time. A chunk checks, as it goes, what makes its
//! vector form equal to four scalar iterations: the masks of its loads and
//! stores all on, each pointer block consecutive, the 16 bytes inside the
//! cached segment. A chunk that fails a check runs only its first element
//! on the scalar path, and the loop tries four again one element later; so
//! tails, holes in masks and faults take exactly the scalar code. Nothing
//! a failed chunk did is visible: loads have no effect, a group's one
//! store comes last (see `fuse`), and the outputs it wrote are rewritten.
//!
//! Lanes never mix: each float operation is the scalar one four times
//! (SSE arithmetic is IEEE, like the scalar code), and fused reductions
//! fold the four lanes one by one in index order.

use super::codegen::{cl_type, dtype, elem_bytes, flags, float_cc, int_cc, row_major_strides, Gen};
use super::runtime::{transcendental_code, OFF_SEG_BASE, OFF_SEG_LEN, OFF_SEG_LO};
use crate::datapath::elem::CANONICAL_NAN_F32;
use crate::ir::{self, BinaryOp, Op, Type, UnaryOp};
use crate::sema::types::{DType, Elem};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, Block, ConstantData, Endianness, InstBuilder, MemFlagsData, Value};
use std::collections::HashMap;

/// Lanes per chunk.
pub const LANES: i64 = 4;

/// Four lanes of one IR value.
#[derive(Clone, Copy)]
enum Lanes {
    /// One 128-bit register: f32x4 for f32, i32x4 for i32/u32, and for
    /// bools an i32x4 mask (-1 on, 0 off). `scalar` is set when every lane
    /// is that one value (a splat of a scalar input).
    Vec { v: Value, scalar: Option<Value> },
    /// Pointers: lane k is `base + k * stride` bytes.
    Ptr { base: Value, stride: i64 },
}

/// The element types a register holds.
fn lane_dtype(d: DType) -> bool {
    matches!(d, DType::F32 | DType::I32 | DType::U32 | DType::Bool)
}

/// The four-byte numbers (what loads, stores and broadcasts move).
fn word_dtype(d: DType) -> bool {
    matches!(d, DType::F32 | DType::I32 | DType::U32)
}

fn vec_type(d: DType) -> types::Type {
    if d == DType::F32 {
        types::F32X4
    } else {
        types::I32X4
    }
}

fn le() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}

impl Gen<'_, '_> {
    /// Whether every member of this elementwise group over `space` has a
    /// vector form.
    pub(super) fn vectorizable(&self, space: &[u64]) -> bool {
        if space.last().is_none_or(|&n| (n as i64) < LANES) {
            return false;
        }
        let num = |v: ir::Value| match self.f.ty(v).elem() {
            Elem::Num(d) => Some(d),
            Elem::Ptr(_) => None,
        };
        let is_ptr = |v: ir::Value| num(v).is_none();
        let lane =
            |v: ir::Value| matches!(self.f.ty(v), Type::Scalar(_) | Type::Block(..)) && num(v).is_none_or(lane_dtype);
        self.g.insts.iter().all(|&i| {
            let d = self.f.inst(i);
            if !d.args.iter().chain(&d.results).all(|v| lane(*v)) {
                return false;
            }
            let arg_dt = |k: usize| num(d.args[k]);
            match &d.op {
                Op::Arange { .. } => space.len() == 1,
                Op::Splat => true,
                Op::Broadcast => arg_dt(0).is_some_and(word_dtype) && self.inputs.contains_key(&d.args[0]),
                Op::Binary(op) => match arg_dt(0) {
                    Some(DType::F32) => matches!(
                        op,
                        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Max | BinaryOp::Min
                    ),
                    Some(DType::I32 | DType::U32) => matches!(
                        op,
                        BinaryOp::Add
                            | BinaryOp::Sub
                            | BinaryOp::Mul
                            | BinaryOp::And
                            | BinaryOp::Or
                            | BinaryOp::Xor
                            | BinaryOp::Max
                            | BinaryOp::Min
                    ),
                    Some(DType::Bool) => matches!(op, BinaryOp::And | BinaryOp::Or | BinaryOp::Xor),
                    _ => false,
                },
                Op::Cmp(_) => arg_dt(0).is_some_and(word_dtype),
                Op::Unary(op) => match arg_dt(0) {
                    Some(DType::F32) => {
                        matches!(
                            op,
                            UnaryOp::Neg
                                | UnaryOp::Abs
                                | UnaryOp::Sqrt
                                | UnaryOp::Rsqrt
                                | UnaryOp::Floor
                                | UnaryOp::Ceil
                        ) || transcendental_code(*op).is_some()
                    }
                    Some(DType::I32 | DType::U32 | DType::Bool) => {
                        matches!(op, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Invert | UnaryOp::Not)
                    }
                    _ => false,
                },
                Op::Cast { bitcast: false } => arg_dt(0).is_some() && d.results.first().is_some_and(|r| !is_ptr(*r)),
                Op::Cast { bitcast: true } => {
                    arg_dt(0).is_some_and(word_dtype) && d.results.first().and_then(|r| num(*r)).is_some_and(word_dtype)
                }
                Op::Select => d.args.iter().all(|v| !is_ptr(*v)),
                Op::PtrAdd => is_ptr(d.args[0]) && matches!(arg_dt(1), Some(DType::I32 | DType::U32)),
                Op::Load { .. } => d.results.first().and_then(|r| num(*r)).is_some_and(word_dtype),
                Op::Store { .. } => arg_dt(1).is_some_and(word_dtype),
                Op::Reduce { .. } => arg_dt(0).is_some_and(word_dtype),
                _ => false,
            }
        })
    }

    /// Emits four elements starting at `ivs` (the innermost counter is the
    /// first lane's); on any failed check jumps to `fallback`, the scalar
    /// code for the first lane. Falls through when the chunk is done.
    pub(super) fn vector_chunk(&mut self, ivs: &[Value], strides: &[i64], space: &[u64], fallback: Block) {
        let lin = self.linear(ivs, strides);
        let mut vals: HashMap<ir::Value, Lanes> = HashMap::new();
        let members = self.g.insts.clone();
        for (idx, &i) in members.iter().enumerate() {
            let code = idx as u32 + 1;
            let d = self.f.inst(i).clone();
            let mut arg = |gen: &mut Self, k: usize| -> Lanes {
                let v = d.args[k];
                if let Some(x) = vals.get(&v) {
                    return *x;
                }
                let x = gen.input_lanes(v, lin, fallback);
                vals.insert(v, x);
                x
            };
            let vecv = |l: Lanes| match l {
                Lanes::Vec { v, .. } => v,
                Lanes::Ptr { .. } => unreachable!("pointers are only PtrAdd, Load and Store operands"),
            };
            let f = self.f;
            let arg_dt = |k: usize| dtype(f.ty(d.args[k]));
            let vec = |v| Lanes::Vec { v, scalar: None };
            let result: Option<Lanes> = match &d.op {
                Op::Arange { start, .. } => {
                    let j = self.b.ins().iadd_imm_s(ivs[0], *start);
                    let j = self.b.ins().ireduce(types::I32, j);
                    let first = self.b.ins().splat(types::I32X4, j);
                    let iota = self.iota();
                    Some(vec(self.b.ins().iadd(first, iota)))
                }
                Op::Splat => Some(arg(self, 0)),
                Op::Broadcast => Some(vec(self.broadcast_lanes(d.args[0], ivs, space))),
                Op::Binary(op) => {
                    let (a, b) = (vecv(arg(self, 0)), vecv(arg(self, 1)));
                    Some(vec(self.vbinary(*op, arg_dt(0), a, b)))
                }
                Op::Cmp(op) => {
                    let (a, b) = (vecv(arg(self, 0)), vecv(arg(self, 1)));
                    Some(vec(if arg_dt(0) == DType::F32 {
                        self.b.ins().fcmp(float_cc(*op), a, b)
                    } else {
                        self.b.ins().icmp(int_cc(*op, arg_dt(0).is_signed()), a, b)
                    }))
                }
                Op::Unary(op) => {
                    let a = vecv(arg(self, 0));
                    Some(vec(self.vunary(*op, arg_dt(0), a)))
                }
                Op::Cast { bitcast } => {
                    let a = vecv(arg(self, 0));
                    let to = dtype(self.f.ty(d.results[0]));
                    Some(vec(if *bitcast {
                        let t = vec_type(to);
                        if self.b.func.dfg.value_type(a) == t {
                            a
                        } else {
                            self.b.ins().bitcast(t, le(), a)
                        }
                    } else {
                        self.vcast(arg_dt(0), to, a)
                    }))
                }
                Op::Select => {
                    let (c, x, y) = (vecv(arg(self, 0)), vecv(arg(self, 1)), vecv(arg(self, 2)));
                    Some(vec(self.vselect(c, x, y)))
                }
                Op::PtrAdd => {
                    let (p, o) = (arg(self, 0), arg(self, 1));
                    Some(self.vptr_add(p, o, d.args[0], arg_dt(1), fallback))
                }
                Op::Load { has_mask, .. } => {
                    let e = self.f.ty(d.results[0]).elem();
                    let p = arg(self, 0);
                    if *has_mask {
                        let m = vecv(arg(self, 1));
                        self.all_on_or(m, fallback);
                    }
                    Some(vec(self.vload(p, e, code, fallback)))
                }
                Op::Store { has_mask } => {
                    let e = self.f.ty(d.args[1]).elem();
                    let (p, x) = (arg(self, 0), vecv(arg(self, 1)));
                    if *has_mask {
                        let m = vecv(arg(self, 2));
                        self.all_on_or(m, fallback);
                    }
                    self.vstore(p, e, x, code, fallback);
                    None
                }
                Op::Reduce { op, .. } => {
                    let x = vecv(arg(self, 0));
                    let in_dt = arg_dt(0);
                    for k in 0..LANES as u8 {
                        let xk = self.b.ins().extractlane(x, k);
                        self.reduce_step(i, *op, in_dt, xk);
                    }
                    None
                }
                _ => None,
            };
            if let (Some(x), Some(r)) = (result, d.results.first()) {
                vals.insert(*r, x);
                if let Some(out) = self.outputs.get(r).copied() {
                    let e = self.f.ty(*r).elem();
                    self.store_output(out, lin, e, x);
                }
            }
        }
    }

    /// `[0, 1, 2, 3]` as i32x4.
    fn iota(&mut self) -> Value {
        let bytes: Vec<u8> = (0..LANES as i32).flat_map(|k| k.to_le_bytes()).collect();
        let c = self.b.func.dfg.constants.insert(ConstantData::from(bytes));
        self.b.ins().vconst(types::I32X4, c)
    }

    fn zeros(&mut self, t: types::Type) -> Value {
        let c = self.b.func.dfg.constants.insert(ConstantData::from(vec![0u8; 16]));
        self.b.ins().vconst(t, c)
    }

    /// Continues only when every lane of `mask` is on.
    fn all_on_or(&mut self, mask: Value, fallback: Block) {
        let all = self.b.ins().vall_true(mask);
        let cont = self.b.create_block();
        self.b.ins().brif(all, cont, &[], fallback, &[]);
        self.b.switch_to_block(cont);
    }

    /// The lanes of a value defined outside the group: a scalar input as a
    /// splat, a block input read from its buffer at linear index `lin`.
    fn input_lanes(&mut self, v: ir::Value, lin: Value, fallback: Block) -> Lanes {
        let x = self.inputs[&v];
        match self.f.ty(v).clone() {
            Type::Scalar(Elem::Ptr(_)) => Lanes::Ptr { base: x, stride: 0 },
            Type::Scalar(Elem::Num(d)) => {
                let v = if d == DType::Bool {
                    // 0/1 → 0/-1.
                    let w = self.b.ins().uextend(types::I32, x);
                    let one = self.iconst(types::I32, 1);
                    let w = self.b.ins().band(w, one);
                    let m = self.b.ins().ineg(w);
                    self.b.ins().splat(types::I32X4, m)
                } else {
                    self.b.ins().splat(vec_type(d), x)
                };
                Lanes::Vec { v, scalar: Some(x) }
            }
            Type::Block(e, _) => {
                let addr = self.element_addr(x, lin, elem_bytes(e));
                match e {
                    Elem::Ptr(t) => {
                        // Consecutive pointers only: p[k] = p[0] + k * size.
                        let size = t.size_bytes() as i64;
                        let p0 = self.b.ins().load(types::I64, flags(), addr, 0);
                        for k in 1..LANES {
                            let pk = self.b.ins().load(types::I64, flags(), addr, (8 * k) as i32);
                            let expect = self.b.ins().iadd_imm_s(p0, k * size);
                            let ok = self.b.ins().icmp(IntCC::Equal, pk, expect);
                            let cont = self.b.create_block();
                            self.b.ins().brif(ok, cont, &[], fallback, &[]);
                            self.b.switch_to_block(cont);
                        }
                        Lanes::Ptr { base: p0, stride: size }
                    }
                    Elem::Num(DType::Bool) => {
                        // Four 0/1 bytes → four 0/-1 words.
                        let w = self.b.ins().load(types::I32, flags(), addr, 0);
                        let v = self.b.ins().scalar_to_vector(types::I32X4, w);
                        let v = self.b.ins().bitcast(types::I8X16, le(), v);
                        let v = self.b.ins().swiden_low(v);
                        let v = self.b.ins().swiden_low(v);
                        let z = self.zeros(types::I32X4);
                        Lanes::Vec {
                            v: self.b.ins().icmp(IntCC::NotEqual, v, z),
                            scalar: None,
                        }
                    }
                    Elem::Num(d) => Lanes::Vec {
                        v: self.b.ins().load(vec_type(d), flags(), addr, 0),
                        scalar: None,
                    },
                }
            }
            Type::Future(..) => unreachable!("vectorizable() admits scalars and blocks only"),
        }
    }

    fn element_addr(&mut self, base: Value, index: Value, size: i64) -> Value {
        let off = self.b.ins().imul_imm_s(index, size);
        self.b.ins().iadd(base, off)
    }

    /// Writes the lanes of an output block at linear index `lin`.
    fn store_output(&mut self, out: Value, lin: Value, e: Elem, x: Lanes) {
        let addr = self.element_addr(out, lin, elem_bytes(e));
        match (x, e) {
            (Lanes::Ptr { base, stride }, _) => {
                for k in 0..LANES {
                    let p = self.b.ins().iadd_imm_s(base, k * stride);
                    self.b.ins().store(flags(), p, addr, (8 * k) as i32);
                }
            }
            (Lanes::Vec { v, .. }, Elem::Num(DType::Bool)) => {
                // 0/-1 words → four 0/1 bytes.
                let one = self.iconst(types::I32, 1);
                let ones = self.b.ins().splat(types::I32X4, one);
                let w = self.b.ins().band(v, ones);
                let h = self.b.ins().snarrow(w, w);
                let b = self.b.ins().snarrow(h, h);
                let b = self.b.ins().bitcast(types::I32X4, le(), b);
                let word = self.b.ins().extractlane(b, 0);
                self.b.ins().store(flags(), word, addr, 0);
            }
            (Lanes::Vec { v, .. }, _) => {
                self.b.ins().store(flags(), v, addr, 0);
            }
        }
    }

    /// A broadcast source read at the lanes' coordinates: one element
    /// splat when the source is constant along the innermost axis, four
    /// consecutive elements otherwise.
    fn broadcast_lanes(&mut self, src: ir::Value, ivs: &[Value], space: &[u64]) -> Value {
        let st = self.f.ty(src).clone();
        let d = dtype(&st);
        let src_shape = st.shape().to_vec();
        let src_strides = row_major_strides(&src_shape);
        let mut idx = self.iconst(types::I64, 0);
        for (k, j) in ivs.iter().enumerate() {
            if src_shape[k] != 1 || space[k] == 1 {
                let t = self.b.ins().imul_imm_s(*j, src_strides[k]);
                idx = self.b.ins().iadd(idx, t);
            }
        }
        let base = self.inputs[&src];
        let addr = self.element_addr(base, idx, 4);
        let inner = ivs.len() - 1;
        if src_shape[inner] == 1 {
            let x = self.b.ins().load(cl_type(Elem::Num(d)), flags(), addr, 0);
            self.b.ins().splat(vec_type(d), x)
        } else {
            self.b.ins().load(vec_type(d), flags(), addr, 0)
        }
    }

    /// `bitselect` for masks over any register type.
    fn vselect(&mut self, mask: Value, x: Value, y: Value) -> Value {
        let t = self.b.func.dfg.value_type(x);
        let m = if t == types::I32X4 {
            mask
        } else {
            self.b.ins().bitcast(t, le(), mask)
        };
        self.b.ins().bitselect(m, x, y)
    }

    fn vcanon(&mut self, x: Value) -> Value {
        let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
        let c = self.b.ins().f32const(f32::from_bits(CANONICAL_NAN_F32));
        let c = self.b.ins().splat(types::F32X4, c);
        self.vselect(nan, c, x)
    }

    /// The lanewise form of the scalar `fmaxnum` (same rules: NaN loses,
    /// max prefers +0 and min -0 between equal zeros).
    fn vfmaxnum(&mut self, a: Value, b: Value, is_max: bool) -> Value {
        let a_nan = self.b.ins().fcmp(FloatCC::Unordered, a, a);
        let b_nan = self.b.ins().fcmp(FloatCC::Unordered, b, b);
        let (first, second) = if is_max {
            (FloatCC::GreaterThan, FloatCC::LessThan)
        } else {
            (FloatCC::LessThan, FloatCC::GreaterThan)
        };
        let a_wins = self.b.ins().fcmp(first, a, b);
        let b_wins = self.b.ins().fcmp(second, a, b);
        let ai = self.b.ins().bitcast(types::I32X4, le(), a);
        let z = self.zeros(types::I32X4);
        let a_neg = self.b.ins().icmp(IntCC::SignedLessThan, ai, z);
        let tie = if is_max {
            self.vselect(a_neg, b, a)
        } else {
            self.vselect(a_neg, a, b)
        };
        let r = self.vselect(b_wins, b, tie);
        let r = self.vselect(a_wins, a, r);
        let r = self.vselect(b_nan, a, r);
        self.vselect(a_nan, b, r)
    }

    fn vbinary(&mut self, op: BinaryOp, d: DType, a: Value, b: Value) -> Value {
        if d == DType::F32 {
            let r = match op {
                BinaryOp::Add => self.b.ins().fadd(a, b),
                BinaryOp::Sub => self.b.ins().fsub(a, b),
                BinaryOp::Mul => self.b.ins().fmul(a, b),
                BinaryOp::Div => self.b.ins().fdiv(a, b),
                BinaryOp::Max => self.vfmaxnum(a, b, true),
                _ => self.vfmaxnum(a, b, false),
            };
            return self.vcanon(r);
        }
        let signed = d.is_signed();
        let ins = self.b.ins();
        match op {
            BinaryOp::Add => ins.iadd(a, b),
            BinaryOp::Sub => ins.isub(a, b),
            BinaryOp::Mul => ins.imul(a, b),
            BinaryOp::And => ins.band(a, b),
            BinaryOp::Or => ins.bor(a, b),
            BinaryOp::Xor => ins.bxor(a, b),
            BinaryOp::Max if signed => ins.smax(a, b),
            BinaryOp::Max => ins.umax(a, b),
            BinaryOp::Min if signed => ins.smin(a, b),
            _ => ins.umin(a, b),
        }
    }

    fn vunary(&mut self, op: UnaryOp, d: DType, a: Value) -> Value {
        if d == DType::F32 {
            let r = match op {
                UnaryOp::Neg => self.b.ins().fneg(a),
                UnaryOp::Abs => self.b.ins().fabs(a),
                UnaryOp::Sqrt => self.b.ins().sqrt(a),
                UnaryOp::Rsqrt => {
                    let s = self.b.ins().sqrt(a);
                    let one = self.b.ins().f32const(1.0);
                    let one = self.b.ins().splat(types::F32X4, one);
                    self.b.ins().fdiv(one, s)
                }
                UnaryOp::Floor => self.b.ins().floor(a),
                UnaryOp::Ceil => self.b.ins().ceil(a),
                other => {
                    // The shared Rust definition, once per lane.
                    let f = self.h.math[transcendental_code(other).unwrap_or(0) as usize];
                    let mut v = a;
                    for k in 0..LANES as u8 {
                        let x = self.b.ins().extractlane(a, k);
                        let r = self.call1(f, &[x]);
                        v = self.b.ins().insertlane(v, r, k);
                    }
                    v
                }
            };
            return self.vcanon(r);
        }
        let z = self.zeros(types::I32X4);
        match (op, d) {
            (UnaryOp::Not, DType::Bool) | (UnaryOp::Invert, DType::Bool) => self.b.ins().bnot(a),
            (UnaryOp::Not, _) => self.b.ins().icmp(IntCC::Equal, a, z),
            (UnaryOp::Neg | UnaryOp::Abs, DType::Bool) => a,
            (UnaryOp::Neg, _) => self.b.ins().ineg(a),
            (UnaryOp::Invert, _) => self.b.ins().bnot(a),
            (UnaryOp::Abs, DType::I32) => self.b.ins().iabs(a),
            _ => a,
        }
    }

    /// Value casts between f32, i32, u32 and bool (the scalar `cast`'s
    /// rules: float → int saturates, NaN → 0; anything → bool is `!= 0`).
    fn vcast(&mut self, from: DType, to: DType, a: Value) -> Value {
        let z = self.zeros(vec_type(from));
        let bool_to_int = |gen: &mut Self| {
            let one = gen.iconst(types::I32, 1);
            let ones = gen.b.ins().splat(types::I32X4, one);
            gen.b.ins().band(a, ones)
        };
        match (from, to) {
            _ if from == to => a,
            (DType::Bool, DType::F32) => {
                let w = bool_to_int(self);
                self.b.ins().fcvt_from_sint(types::F32X4, w)
            }
            (DType::Bool, _) => bool_to_int(self),
            (DType::F32, DType::Bool) => self.b.ins().fcmp(FloatCC::NotEqual, a, z),
            (_, DType::Bool) => self.b.ins().icmp(IntCC::NotEqual, a, z),
            (DType::F32, DType::I32) => self.b.ins().fcvt_to_sint_sat(types::I32X4, a),
            (DType::F32, _) => self.b.ins().fcvt_to_uint_sat(types::I32X4, a),
            (DType::I32, DType::F32) => self.b.ins().fcvt_from_sint(types::F32X4, a),
            (_, DType::F32) => self.b.ins().fcvt_from_uint(types::F32X4, a),
            // i32 ↔ u32: the same bits.
            _ => a,
        }
    }

    /// `p + o` elementwise. A splat offset moves the base; a vector offset
    /// must count up by one per lane without wrapping (else `fallback`),
    /// which adds one element to the stride.
    fn vptr_add(&mut self, p: Lanes, o: Lanes, ptr: ir::Value, od: DType, fallback: Block) -> Lanes {
        let size = match self.f.ty(ptr).elem() {
            Elem::Ptr(t) => t.size_bytes() as i64,
            Elem::Num(_) => 1,
        };
        let Lanes::Ptr { base, stride } = p else {
            unreachable!("vectorizable() admits pointer first operands only")
        };
        let Lanes::Vec { v, scalar } = o else {
            unreachable!("offsets are integer lanes")
        };
        let (first, stride) = match scalar {
            Some(s) => (s, stride),
            None => {
                let first = self.b.ins().extractlane(v, 0);
                let splat = self.b.ins().splat(types::I32X4, first);
                let diff = self.b.ins().isub(v, splat);
                let iota = self.iota();
                let steps = self.b.ins().icmp(IntCC::Equal, diff, iota);
                let steps = self.b.ins().vall_true(steps);
                // The last lane must not wrap past the type's maximum.
                let limit = if od.is_signed() {
                    i32::MAX as i64
                } else {
                    u32::MAX as i64
                } - (LANES - 1);
                let limit = self.iconst(types::I32, limit);
                let cc = if od.is_signed() {
                    IntCC::SignedLessThanOrEqual
                } else {
                    IntCC::UnsignedLessThanOrEqual
                };
                let room = self.b.ins().icmp(cc, first, limit);
                let ok = self.b.ins().band(steps, room);
                let cont = self.b.create_block();
                self.b.ins().brif(ok, cont, &[], fallback, &[]);
                self.b.switch_to_block(cont);
                (first, stride + size)
            }
        };
        let wide = self.emit_to_i64(od, first);
        let scaled = self.b.ins().imul_imm_s(wide, size);
        Lanes::Ptr {
            base: self.b.ins().iadd(base, scaled),
            stride,
        }
    }

    /// The host address of `bytes` bytes at `va` through the instruction's
    /// segment cache; jumps to `fallback` when they are not all in one
    /// allocation (the scalar code then finds the fault, if any).
    fn vaccess(&mut self, va: Value, elem: i64, bytes: i64, write: bool, code: u32, fallback: Block) -> Value {
        // The cache's limit is for one element: `len - elem + 1`.
        let [seg_lo, seg_limit, seg_base] = self.caches[&code];
        let lo = self.b.use_var(seg_lo);
        let limit = self.b.use_var(seg_limit);
        let off = self.b.ins().isub(va, lo);
        let first_in = self.b.ins().icmp(IntCC::UnsignedLessThan, off, limit);
        let last = self.b.ins().iadd_imm_s(off, bytes - elem);
        let last_in = self.b.ins().icmp(IntCC::UnsignedLessThan, last, limit);
        let ok = self.b.ins().band(first_in, last_in);
        let fast = self.b.create_block();
        let slow = self.b.create_block();
        self.b.ins().brif(ok, fast, &[], slow, &[]);
        self.b.switch_to_block(slow);
        self.b.set_cold_block(slow);
        let nbytes = self.iconst(types::I64, bytes);
        let w = self.iconst(types::I64, write as i64);
        let r = self.call1(self.h.resolve, &[self.ctx, va, nbytes, w]);
        let reload = self.b.create_block();
        self.b.ins().brif(r, fallback, &[], reload, &[]);
        self.b.switch_to_block(reload);
        let lo2 = self.b.ins().load(types::I64, flags(), self.ctx, OFF_SEG_LO);
        let len2 = self.b.ins().load(types::I64, flags(), self.ctx, OFF_SEG_LEN);
        let base2 = self.b.ins().load(types::I64, flags(), self.ctx, OFF_SEG_BASE);
        let limit2 = self.b.ins().iadd_imm_s(len2, 1 - elem);
        self.b.def_var(seg_lo, lo2);
        self.b.def_var(seg_limit, limit2);
        self.b.def_var(seg_base, base2);
        self.b.ins().jump(fast, &[]);
        self.b.switch_to_block(fast);
        let lo = self.b.use_var(seg_lo);
        let base = self.b.use_var(seg_base);
        let off = self.b.ins().isub(va, lo);
        self.b.ins().iadd(base, off)
    }

    /// Four elements at pointer lanes `p`: one access when they are
    /// consecutive, one element splat when they are all the same address.
    fn vload(&mut self, p: Lanes, e: Elem, code: u32, fallback: Block) -> Value {
        let Lanes::Ptr { base, stride } = p else {
            unreachable!("load pointers are pointer lanes")
        };
        let size = elem_bytes(e);
        let d = dtype(&Type::Scalar(e));
        if stride == 0 {
            let host = self.vaccess(base, size, size, false, code, fallback);
            let x = self.b.ins().load(cl_type(e), flags(), host, 0);
            return self.b.ins().splat(vec_type(d), x);
        }
        if stride != size {
            return self.give_up(fallback, vec_type(d));
        }
        let host = self.vaccess(base, size, size * LANES, false, code, fallback);
        self.b.ins().load(vec_type(d), flags(), host, 0)
    }

    fn vstore(&mut self, p: Lanes, e: Elem, x: Value, code: u32, fallback: Block) {
        let Lanes::Ptr { base, stride } = p else {
            unreachable!("store pointers are pointer lanes")
        };
        let size = elem_bytes(e);
        if stride != size {
            let t = self.b.func.dfg.value_type(x);
            self.give_up(fallback, t);
            return;
        }
        let host = self.vaccess(base, size, size * LANES, true, code, fallback);
        self.b.ins().store(flags(), x, host, 0);
    }

    /// A chunk whose pointers are not consecutive: always the scalar path.
    /// Returns a placeholder of type `t` for the unreachable rest.
    fn give_up(&mut self, fallback: Block, t: types::Type) -> Value {
        self.b.ins().jump(fallback, &[]);
        let dead = self.b.create_block();
        self.b.switch_to_block(dead);
        self.zeros(t)
    }
}
