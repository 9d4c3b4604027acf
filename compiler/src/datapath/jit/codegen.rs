//! Cranelift code generation for one plan group.
//!
//! Every compiled group has the signature `fn(args: *const u64, ctx: *mut
//! JitCtx) -> u32`: `args` holds, in order, each input (a scalar's bits, a
//! block's data pointer, or for an input compiled as affine a pointer to
//! its `[base, strides…]` words, see `datapath::affine`) and each output's
//! data pointer; the result is 0,
//! or 1 + the index of the member instruction that failed (an
//! out-of-bounds access — details in `ctx` — or a division by zero).
//!
//! Elementwise groups become one loop nest over their iteration space,
//! evaluating every member per element with no intermediate buffers.
//! Reductions, `dot` and `trans` get loops of their own; `dot` uses f32x4
//! vectors across columns, keeping each element's sums in index order so
//! results match the interpreter bit for bit.

use super::runtime::{dtype_code, transcendental_code, OFF_CACHES, OFF_SEG_BASE, OFF_SEG_LEN, OFF_SEG_LO};
use super::vector::Mode;
use crate::datapath::elem::CANONICAL_NAN_F32;
use crate::datapath::Group;
use crate::ir::{self, BinaryOp, CmpOp, Function, Op, ReduceOp, Type, UnaryOp};
use crate::sema::types::{DType, Elem};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, AbiParam, BlockArg, FuncRef, InstBuilder, MemFlagsData, Signature, Value};
use cranelift_frontend::{FunctionBuilder, Variable};
use std::collections::HashMap;

/// The helper functions compiled code calls, as imported in one function.
pub struct HelperRefs {
    pub resolve: FuncRef,
    pub f16_to_f32: FuncRef,
    pub f32_to_f16: FuncRef,
    pub bf16_to_f32: FuncRef,
    pub f32_to_bf16: FuncRef,
    pub cast: FuncRef,
    pub fma_f32: FuncRef,
    /// `dot_avx::kb_dot_f32`, called by `dot` groups when `native_dot`.
    pub dot_f32: FuncRef,
    /// exp, exp2, log, log2, sin, cos, sigmoid (in `transcendental_code` order).
    pub math: [FuncRef; 7],
}

/// The helper symbols of `HelperRefs::math`.
pub const MATH_HELPERS: [&str; 7] = [
    "kb_expf",
    "kb_exp2f",
    "kb_logf",
    "kb_log2f",
    "kb_sinf",
    "kb_cosf",
    "kb_sigmoidf",
];

/// Helper names and signatures (params, returns).
pub fn helper_signatures(call_conv: cranelift_codegen::isa::CallConv) -> Vec<(&'static str, Signature)> {
    let sig = |params: &[types::Type], rets: &[types::Type]| {
        let mut s = Signature::new(call_conv);
        s.params.extend(params.iter().map(|t| AbiParam::new(*t)));
        s.returns.extend(rets.iter().map(|t| AbiParam::new(*t)));
        s
    };
    use types::{F32, I32, I64};
    vec![
        ("kb_resolve", sig(&[I64, I64, I64, I64], &[I32])),
        ("kb_f16_to_f32", sig(&[I32], &[F32])),
        ("kb_f32_to_f16", sig(&[F32], &[I32])),
        ("kb_bf16_to_f32", sig(&[I32], &[F32])),
        ("kb_f32_to_bf16", sig(&[F32], &[I32])),
        ("kb_cast", sig(&[I32, I32, I64], &[I64])),
        ("kb_fma_f32", sig(&[F32, F32, F32], &[F32])),
        ("kb_expf", sig(&[F32], &[F32])),
        ("kb_exp2f", sig(&[F32], &[F32])),
        ("kb_logf", sig(&[F32], &[F32])),
        ("kb_log2f", sig(&[F32], &[F32])),
        ("kb_sinf", sig(&[F32], &[F32])),
        ("kb_cosf", sig(&[F32], &[F32])),
        ("kb_sigmoidf", sig(&[F32], &[F32])),
        ("kb_dot_f32", sig(&[I64, I64, I64, I64, I64, I64, I64], &[])),
    ]
}

/// The Cranelift type holding one element.
pub fn cl_type(e: Elem) -> types::Type {
    match e {
        Elem::Ptr(_) => types::I64,
        Elem::Num(DType::Bool | DType::I8 | DType::U8) => types::I8,
        Elem::Num(DType::F16 | DType::BF16) => types::I16,
        Elem::Num(DType::I32 | DType::U32) => types::I32,
        Elem::Num(DType::I64) => types::I64,
        Elem::Num(DType::F32) => types::F32,
    }
}

pub(super) fn dtype(t: &Type) -> DType {
    match t.elem() {
        Elem::Num(d) => d,
        Elem::Ptr(_) => DType::I64,
    }
}

pub(super) fn elem_bytes(e: Elem) -> i64 {
    match e {
        Elem::Ptr(_) => 8,
        Elem::Num(d) => d.size_bytes() as i64,
    }
}

pub(super) fn row_major_strides(shape: &[u64]) -> Vec<i64> {
    let mut s = vec![1i64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1] as i64;
    }
    s
}

pub(super) fn flags() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// The condition of a float comparison (`!=` holds for NaN, like IEEE).
pub(super) fn float_cc(op: CmpOp) -> FloatCC {
    match op {
        CmpOp::Eq => FloatCC::Equal,
        CmpOp::Ne => FloatCC::NotEqual,
        CmpOp::Lt => FloatCC::LessThan,
        CmpOp::Le => FloatCC::LessThanOrEqual,
        CmpOp::Gt => FloatCC::GreaterThan,
        CmpOp::Ge => FloatCC::GreaterThanOrEqual,
    }
}

/// The condition of an integer comparison.
pub(super) fn int_cc(op: CmpOp, signed: bool) -> IntCC {
    match op {
        CmpOp::Eq => IntCC::Equal,
        CmpOp::Ne => IntCC::NotEqual,
        CmpOp::Lt if signed => IntCC::SignedLessThan,
        CmpOp::Le if signed => IntCC::SignedLessThanOrEqual,
        CmpOp::Gt if signed => IntCC::SignedGreaterThan,
        CmpOp::Ge if signed => IntCC::SignedGreaterThanOrEqual,
        CmpOp::Lt => IntCC::UnsignedLessThan,
        CmpOp::Le => IntCC::UnsignedLessThanOrEqual,
        CmpOp::Gt => IntCC::UnsignedGreaterThan,
        CmpOp::Ge => IntCC::UnsignedGreaterThanOrEqual,
    }
}

pub struct Gen<'a, 'b> {
    pub f: &'a Function,
    pub g: &'a Group,
    pub b: FunctionBuilder<'b>,
    pub h: HelperRefs,
    pub(super) ctx: Value,
    /// One segment cache per memory instruction (keyed by its failure
    /// code): a loop alternating between two arrays keeps both cached.
    pub(super) caches: HashMap<u32, [Variable; 3]>,
    fail: cranelift_codegen::ir::Block,
    /// Hoisted scalar inputs and block input/output pointers.
    pub inputs: HashMap<ir::Value, Value>,
    /// Block inputs passed as formulas: base and one stride per axis
    /// (element `idx` is `base + Σ idx_k·stride_k`, truncated).
    pub(super) affine: HashMap<ir::Value, (Value, Vec<Value>)>,
    pub outputs: HashMap<ir::Value, Value>,
    /// Reductions fused at the end of an elementwise loop: accumulator and
    /// "no element yet" flag.
    pub(super) reducers: HashMap<ir::Inst, (Variable, Variable)>,
    /// Loop-invariant vectors of a vectorized group, made before its loop.
    pub(super) vconsts: Option<super::vector::VConsts>,
    /// `JitCtx::caches`, and the cache variables of each slot in it.
    cache_ptr: Option<Value>,
    cache_slots: Vec<[Variable; 3]>,
    /// Float `dot` calls the 256-bit kernel (`dot_avx`) instead of
    /// generated loops.
    pub native_dot: bool,
}

impl<'a, 'b> Gen<'a, 'b> {
    /// Sets up the entry block: parameters, the failure exit, the segment
    /// cache, and the inputs and outputs.
    /// Bit `k` of `affine_inputs` set: input `k` is an affine block.
    pub fn new(
        f: &'a Function,
        g: &'a Group,
        mut b: FunctionBuilder<'b>,
        h: HelperRefs,
        affine_inputs: u64,
    ) -> Gen<'a, 'b> {
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let args = b.block_params(entry)[0];
        let ctx = b.block_params(entry)[1];
        let fail = b.create_block();
        b.append_block_param(fail, types::I32);
        // Each memory instruction's segment cache starts as the caller
        // left it (`JitCtx::caches`, three words a slot, in member order)
        // and is written back at exit.
        let mut caches = HashMap::new();
        let mut cache_slots = Vec::new();
        let mut cache_ptr = None;
        for (idx, i) in g.insts.iter().enumerate() {
            if matches!(f.inst(*i).op, Op::Load { .. } | Op::Store { .. }) {
                let cp = *cache_ptr.get_or_insert_with(|| b.ins().load(types::I64, flags(), ctx, OFF_CACHES));
                let slot = cache_slots.len() as i32;
                let vars = [
                    b.declare_var(types::I64),
                    b.declare_var(types::I64),
                    b.declare_var(types::I64),
                ];
                for (w, v) in vars.iter().enumerate() {
                    let x = b.ins().load(types::I64, flags(), cp, 24 * slot + 8 * w as i32);
                    b.def_var(*v, x);
                }
                caches.insert(idx as u32 + 1, vars);
                cache_slots.push(vars);
            }
        }
        let mut gen = Gen {
            f,
            g,
            b,
            h,
            ctx,
            caches,
            fail,
            inputs: HashMap::new(),
            affine: HashMap::new(),
            outputs: HashMap::new(),
            reducers: HashMap::new(),
            vconsts: None,
            native_dot: false,
            cache_ptr,
            cache_slots,
        };
        for (k, v) in g.inputs.iter().enumerate() {
            let raw = gen.b.ins().load(types::I64, flags(), args, (k * 8) as i32);
            let val = match f.ty(*v) {
                Type::Scalar(e) => gen.emit_from_u64(*e, raw),
                _ => raw,
            };
            if k < 64 && affine_inputs >> k & 1 != 0 {
                let load = |gen: &mut Gen, w: usize| gen.b.ins().load(types::I64, flags(), raw, (8 * w) as i32);
                let base = load(&mut gen, 0);
                let strides = (0..f.ty(*v).shape().len()).map(|w| load(&mut gen, 1 + w)).collect();
                gen.affine.insert(*v, (base, strides));
            }
            gen.inputs.insert(*v, val);
        }
        for (k, v) in g.outputs.iter().enumerate() {
            let p = gen
                .b
                .ins()
                .load(types::I64, flags(), args, ((g.inputs.len() + k) * 8) as i32);
            gen.outputs.insert(*v, p);
        }
        gen
    }

    /// Finishes the function: the success return and the failure exit.
    pub fn finish(mut self, config: cranelift_codegen::isa::TargetFrontendConfig) {
        self.save_caches();
        let ok = self.b.ins().iconst(types::I32, 0);
        self.b.ins().return_(&[ok]);
        self.b.switch_to_block(self.fail);
        self.save_caches();
        let code = self.b.block_params(self.fail)[0];
        self.b.ins().return_(&[code]);
        self.b.seal_all_blocks();
        self.b.finalize(config);
    }

    /// Writes every segment cache back to `JitCtx::caches`.
    fn save_caches(&mut self) {
        let Some(cp) = self.cache_ptr else { return };
        for (slot, vars) in self.cache_slots.clone().iter().enumerate() {
            for (w, v) in vars.iter().enumerate() {
                let x = self.b.use_var(*v);
                self.b.ins().store(flags(), x, cp, (24 * slot + 8 * w) as i32);
            }
        }
    }

    fn emit_from_u64(&mut self, e: Elem, raw: Value) -> Value {
        match cl_type(e) {
            types::I64 => raw,
            types::F32 => {
                let i = self.b.ins().ireduce(types::I32, raw);
                self.b.ins().bitcast(types::F32, MemFlagsData::new(), i)
            }
            t => self.b.ins().ireduce(t, raw),
        }
    }

    pub(super) fn iconst(&mut self, t: types::Type, v: i64) -> Value {
        self.b.ins().iconst(t, v)
    }

    /// Branches to the failure exit with `code` when `cond` holds.
    fn fail_if(&mut self, cond: Value, code: u32) {
        let cont = self.b.create_block();
        let c = self.iconst(types::I32, code as i64);
        self.b.ins().brif(cond, self.fail, &[BlockArg::Value(c)], cont, &[]);
        self.b.switch_to_block(cont);
    }

    pub(super) fn canon(&mut self, x: Value) -> Value {
        let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
        let c = self.b.ins().f32const(f32::from_bits(CANONICAL_NAN_F32));
        self.b.ins().select(nan, c, x)
    }

    pub(super) fn call1(&mut self, f: FuncRef, args: &[Value]) -> Value {
        let inst = self.b.ins().call(f, args);
        self.b.inst_results(inst)[0]
    }

    /// An element of dtype `d` as f32 (exact).
    fn emit_to_f32(&mut self, d: DType, x: Value) -> Value {
        match d {
            DType::F32 => x,
            DType::F16 | DType::BF16 => {
                let w = self.b.ins().uextend(types::I32, x);
                let f = if d == DType::F16 {
                    self.h.f16_to_f32
                } else {
                    self.h.bf16_to_f32
                };
                self.call1(f, &[w])
            }
            _ => self.int_to_f32(d, x),
        }
    }

    fn int_to_f32(&mut self, d: DType, x: Value) -> Value {
        let wide = self.emit_to_i64(d, x);
        self.b.ins().fcvt_from_sint(types::F32, wide)
    }

    /// An f32 result stored as dtype `d` (float dtypes), canonicalized.
    fn emit_from_f32(&mut self, d: DType, x: Value) -> Value {
        match d {
            DType::F32 => self.canon(x),
            DType::F16 | DType::BF16 => {
                let f = if d == DType::F16 {
                    self.h.f32_to_f16
                } else {
                    self.h.f32_to_bf16
                };
                let w = self.call1(f, &[x]);
                self.b.ins().ireduce(types::I16, w)
            }
            _ => self.cast_via_helper(DType::F32, d, x),
        }
    }

    /// Sign- or zero-extends an integer element to i64.
    pub(super) fn emit_to_i64(&mut self, d: DType, x: Value) -> Value {
        let t = cl_type(Elem::Num(d));
        if t == types::I64 {
            return x;
        }
        if d.is_signed() {
            self.b.ins().sextend(types::I64, x)
        } else {
            self.b.ins().uextend(types::I64, x)
        }
    }

    fn emit_from_i64(&mut self, d: DType, x: Value) -> Value {
        let t = cl_type(Elem::Num(d));
        let v = if t == types::I64 { x } else { self.b.ins().ireduce(t, x) };
        if d == DType::Bool {
            self.b.ins().band_imm_s(v, 1)
        } else {
            v
        }
    }

    fn emit_to_u64(&mut self, e: Elem, x: Value) -> Value {
        match cl_type(e) {
            types::I64 => x,
            types::F32 => {
                let i = self.b.ins().bitcast(types::I32, MemFlagsData::new(), x);
                self.b.ins().uextend(types::I64, i)
            }
            _ => self.b.ins().uextend(types::I64, x),
        }
    }

    fn cast_via_helper(&mut self, from: DType, to: DType, x: Value) -> Value {
        let bits = self.emit_to_u64(Elem::Num(from), x);
        let (fc, tc) = (
            self.iconst(types::I32, dtype_code(from) as i64),
            self.iconst(types::I32, dtype_code(to) as i64),
        );
        let r = self.call1(self.h.cast, &[fc, tc, bits]);
        self.emit_from_u64(Elem::Num(to), r)
    }

    // ----- memory -----

    /// The host address of `[va, va + bytes)`, through the segment cache;
    /// branches to the failure exit with `code` when it is not allocated.
    fn access(&mut self, va: Value, bytes: i64, write: bool, code: u32) -> Value {
        // Per site: `lo`, `limit` = segment length - access size + 1 (0
        // while nothing is cached, so no offset passes), `base`.
        let [seg_lo, seg_limit, seg_base] = self.caches[&code];
        let lo = self.b.use_var(seg_lo);
        let limit = self.b.use_var(seg_limit);
        let off = self.b.ins().isub(va, lo);
        let ok = self.b.ins().icmp(IntCC::UnsignedLessThan, off, limit);
        let fast = self.b.create_block();
        let slow = self.b.create_block();
        self.b.ins().brif(ok, fast, &[], slow, &[]);
        self.b.switch_to_block(slow);
        self.b.set_cold_block(slow);
        let nbytes = self.iconst(types::I64, bytes);
        let w = self.iconst(types::I64, write as i64);
        let r = self.call1(self.h.resolve, &[self.ctx, va, nbytes, w]);
        self.fail_if(r, code);
        let lo2 = self.b.ins().load(types::I64, flags(), self.ctx, OFF_SEG_LO);
        let len2 = self.b.ins().load(types::I64, flags(), self.ctx, OFF_SEG_LEN);
        let base2 = self.b.ins().load(types::I64, flags(), self.ctx, OFF_SEG_BASE);
        // The resolver only caches a segment the access fits in, so
        // `len2 >= bytes` and the limit does not wrap.
        let limit2 = self.b.ins().iadd_imm_s(len2, 1 - bytes);
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

    // ----- elementwise groups -----

    /// Compiles an elementwise group: one loop nest over its space.
    pub fn elementwise(&mut self) {
        let first = self.g.insts[0];
        let d = self.f.inst(first);
        let space: Vec<u64> = match (&d.op, d.results.first()) {
            (Op::Store { .. }, _) => self.f.ty(d.args[0]).shape().to_vec(),
            (_, Some(r)) => self.f.ty(*r).shape().to_vec(),
            _ => Vec::new(),
        };
        let strides = row_major_strides(&space);
        let rank = space.len();
        for &i in &self.g.insts.clone() {
            if let Op::Reduce { .. } = self.f.inst(i).op {
                let is_float = dtype(self.f.ty(self.f.inst(i).args[0])).is_float();
                let acc = self.b.declare_var(if is_float { types::F32 } else { types::I64 });
                let first = self.b.declare_var(types::I8);
                let zero = if is_float {
                    self.b.ins().f32const(0.0)
                } else {
                    self.iconst(types::I64, 0)
                };
                self.b.def_var(acc, zero);
                let one = self.iconst(types::I8, 1);
                self.b.def_var(first, one);
                self.reducers.insert(i, (acc, first));
            }
        }
        // header[d] takes j_d; body runs the members for one element.
        let headers: Vec<_> = (0..rank).map(|_| self.b.create_block()).collect();
        let exits: Vec<_> = (0..rank).map(|_| self.b.create_block()).collect();
        for h in &headers {
            self.b.append_block_param(*h, types::I64);
        }
        let mut ivs = Vec::new();
        let done = self.b.create_block();
        if rank == 0 {
            self.element(&[], &strides, &space);
            self.b.ins().jump(done, &[]);
        } else {
            let vregs = if self.vectorizable(&space) {
                super::vector::regs_for(space[rank - 1])
            } else {
                0
            };
            // The flag that allows a span probe (see `span`); unused when
            // the group's checks are not linear.
            let probing = (vregs > 0).then(|| {
                self.vector_prelude(vregs);
                let v = self.b.declare_var(types::I8);
                let one = self.iconst(types::I8, 1);
                self.b.def_var(v, one);
                v
            });
            let zero = self.iconst(types::I64, 0);
            self.b.ins().jump(headers[0], &[BlockArg::Value(zero)]);
            for dim in 0..rank {
                self.b.switch_to_block(headers[dim]);
                let j = self.b.block_params(headers[dim])[0];
                ivs.push(j);
                let more = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, j, space[dim] as i64);
                let body = self.b.create_block();
                self.b.ins().brif(more, body, &[], exits[dim], &[]);
                self.b.switch_to_block(body);
                if dim + 1 < rank {
                    if let (Some(v), true) = (probing, dim + 2 == rank) {
                        // A new row: its span has not been probed.
                        let one = self.iconst(types::I8, 1);
                        self.b.def_var(v, one);
                    }
                    let zero = self.iconst(types::I64, 0);
                    self.b.ins().jump(headers[dim + 1], &[BlockArg::Value(zero)]);
                }
            }
            if vregs > 0 {
                // A chunk of elements at a time while a chunk remains; a
                // chunk that cannot run as vectors runs its first element
                // below.
                let inner = rank - 1;
                let regs = vregs;
                let lanes = (regs * 4) as i64;
                let vector = self.b.create_block();
                let scalar = self.b.create_block();
                let room =
                    self.b
                        .ins()
                        .icmp_imm_s(IntCC::SignedLessThanOrEqual, ivs[inner], space[inner] as i64 - lanes);
                self.b.ins().brif(room, vector, &[], scalar, &[]);
                self.b.switch_to_block(vector);
                let here = self.vector_chunk(Mode::Checked, regs, &ivs, &strides, &space, scalar);
                // A span pays off from two trusted chunks on (and costs
                // compile time).
                let probing = probing.filter(|_| here.linear && space[inner] as i64 >= 3 * lanes);
                match probing {
                    Some(v) => self.span(v, here.ok, regs, &ivs, &strides, &space, scalar, headers[inner]),
                    None => {
                        let next = self.b.ins().iadd_imm_s(ivs[inner], lanes);
                        self.b.ins().jump(headers[inner], &[BlockArg::Value(next)]);
                    }
                }
                self.b.switch_to_block(scalar);
                if let Some(v) = probing {
                    // The scalar code may move a segment cache: probe again.
                    let one = self.iconst(types::I8, 1);
                    self.b.def_var(v, one);
                }
            }
            self.element(&ivs, &strides, &space);
            // Latches: after the innermost element, and after each inner
            // loop exits, advance the enclosing counter.
            let inner = rank - 1;
            let next = self.b.ins().iadd_imm_s(ivs[inner], 1);
            self.b.ins().jump(headers[inner], &[BlockArg::Value(next)]);
            for dim in (0..rank).rev() {
                self.b.switch_to_block(exits[dim]);
                if dim == 0 {
                    self.b.ins().jump(done, &[]);
                } else {
                    let next = self.b.ins().iadd_imm_s(ivs[dim - 1], 1);
                    self.b.ins().jump(headers[dim - 1], &[BlockArg::Value(next)]);
                }
            }
        }
        self.b.switch_to_block(done);
        self.finish_reducers();
    }

    /// After a checked chunk at `ivs` passed, in a group whose checks are
    /// all linear (see [`Mode::Probe`]): when the flag `probing` allows,
    /// the chunk's span conditions (`here_ok`) hold and at least one more
    /// whole chunk fits in the row, probes the row's last whole chunk. If
    /// it passes, every chunk between passes too, and they run as trusted
    /// vector code with no check at all. A failed probe clears the flag,
    /// so the row goes on chunk by chunk without probing the same span
    /// again until the scalar code has run (it may have moved a segment
    /// cache) or a new row starts. Ends the current block.
    #[allow(clippy::too_many_arguments)]
    fn span(
        &mut self,
        probing: Variable,
        here_ok: Value,
        regs: usize,
        ivs: &[Value],
        strides: &[i64],
        space: &[u64],
        scalar: cranelift_codegen::ir::Block,
        header: cranelift_codegen::ir::Block,
    ) {
        let inner = ivs.len() - 1;
        let lanes = (regs * 4) as i64;
        let n = space[inner] as i64;
        let next = self.b.ins().iadd_imm_s(ivs[inner], lanes);
        // Whole chunks left after this one: (n - next) / lanes.
        let n_v = self.iconst(types::I64, n);
        let rest = self.b.ins().isub(n_v, next);
        let more = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, rest, lanes);
        let allowed = self.b.use_var(probing);
        let allowed = self.b.ins().band(allowed, here_ok);
        let go = self.b.ins().band(allowed, more);
        let probe = self.b.create_block();
        self.b.ins().brif(go, probe, &[], header, &[BlockArg::Value(next)]);

        self.b.switch_to_block(probe);
        let whole = self.b.ins().iadd_imm_s(rest, -lanes);
        let whole = self.b.ins().udiv_imm_s(whole, lanes);
        let whole = self.b.ins().imul_imm_s(whole, lanes);
        let last = self.b.ins().iadd(next, whole);
        let mut at_last = ivs.to_vec();
        at_last[inner] = last;
        let there = self.vector_chunk(Mode::Probe, regs, &at_last, strides, space, scalar);
        debug_assert!(there.linear, "a probe takes the checked chunk's paths");
        let ok = there.ok;
        let trusted = self.b.create_block();
        self.b.append_block_param(trusted, types::I64);
        let failed = self.b.create_block();
        self.b.ins().brif(ok, trusted, &[BlockArg::Value(next)], failed, &[]);

        self.b.switch_to_block(failed);
        let zero = self.iconst(types::I8, 0);
        self.b.def_var(probing, zero);
        self.b.ins().jump(header, &[BlockArg::Value(next)]);

        self.b.switch_to_block(trusted);
        let k = self.b.block_params(trusted)[0];
        let mut at_k = ivs.to_vec();
        at_k[inner] = k;
        self.vector_chunk(Mode::Trusted, regs, &at_k, strides, space, scalar);
        let after = self.b.ins().iadd_imm_s(k, lanes);
        let within = self.b.ins().icmp(IntCC::SignedLessThanOrEqual, after, last);
        self.b.ins().brif(
            within,
            trusted,
            &[BlockArg::Value(after)],
            header,
            &[BlockArg::Value(after)],
        );
    }

    /// Stores each fused reduction's result (rounded to its dtype).
    fn finish_reducers(&mut self) {
        let mut reducers: Vec<(ir::Inst, (Variable, Variable))> = self.reducers.iter().map(|(k, v)| (*k, *v)).collect();
        reducers.sort_by_key(|(i, _)| *i);
        for (i, (acc, _)) in reducers {
            let d = self.f.inst(i).clone();
            let (in_dt, out_t) = (dtype(self.f.ty(d.args[0])), self.f.ty(d.results[0]).clone());
            let out_dt = dtype(&out_t);
            let a = self.b.use_var(acc);
            let r = if in_dt.is_float() {
                self.emit_from_f32(out_dt, a)
            } else {
                self.emit_from_i64(out_dt, a)
            };
            if let Some(out) = self.outputs.get(&d.results[0]).copied() {
                let zero = self.iconst(types::I64, 0);
                self.store_elem(out, zero, out_t.elem(), r);
            }
        }
    }

    /// Row-major linear index of the current element.
    pub(super) fn linear(&mut self, ivs: &[Value], strides: &[i64]) -> Value {
        let mut lin = self.iconst(types::I64, 0);
        for (j, s) in ivs.iter().zip(strides) {
            let t = self.b.ins().imul_imm_s(*j, *s);
            lin = self.b.ins().iadd(lin, t);
        }
        lin
    }

    pub fn load_at(&mut self, base: Value, index: Value, e: Elem) -> Value {
        self.load_elem(base, index, e)
    }

    pub fn store_at(&mut self, base: Value, index: Value, e: Elem, x: Value) {
        self.store_elem(base, index, e, x)
    }

    pub fn widen(&mut self, d: DType, x: Value) -> Value {
        self.emit_to_i64(d, x)
    }

    pub fn narrow(&mut self, d: DType, x: Value) -> Value {
        self.emit_from_i64(d, x)
    }

    fn load_elem(&mut self, base: Value, index: Value, e: Elem) -> Value {
        let off = self.b.ins().imul_imm_s(index, elem_bytes(e));
        let addr = self.b.ins().iadd(base, off);
        self.b.ins().load(cl_type(e), flags(), addr, 0)
    }

    fn store_elem(&mut self, base: Value, index: Value, e: Elem, x: Value) {
        let off = self.b.ins().imul_imm_s(index, elem_bytes(e));
        let addr = self.b.ins().iadd(base, off);
        self.b.ins().store(flags(), x, addr, 0);
    }

    /// Emits every member for the element at `ivs`.
    fn element(&mut self, ivs: &[Value], strides: &[i64], space: &[u64]) {
        let lin = self.linear(ivs, strides);
        let mut vals: HashMap<ir::Value, Value> = HashMap::new();
        let members = self.g.insts.clone();
        for (idx, &i) in members.iter().enumerate() {
            let code = idx as u32 + 1;
            let d = self.f.inst(i).clone();
            let mut arg = |gen: &mut Self, k: usize| -> Value {
                let v = d.args[k];
                if let Some(x) = vals.get(&v) {
                    return *x;
                }
                let x = gen.inputs[&v];
                let t = gen.f.ty(v).clone();
                let x = match t {
                    Type::Block(e, _) if gen.affine.contains_key(&v) => gen.affine_elem(v, ivs, e),
                    Type::Block(e, _) => gen.load_elem(x, lin, e),
                    _ => x,
                };
                vals.insert(v, x);
                x
            };
            let result: Option<Value> = match &d.op {
                Op::Arange { start, .. } => {
                    let j = ivs.first().copied().unwrap_or_else(|| self.iconst(types::I64, 0));
                    let v = self.b.ins().iadd_imm_s(j, *start);
                    Some(self.b.ins().ireduce(types::I32, v))
                }
                Op::Splat => Some(arg(self, 0)),
                Op::Broadcast if self.affine.contains_key(&d.args[0]) => {
                    // Extent-1 axes of a formula have stride 0.
                    Some(self.affine_elem(d.args[0], ivs, self.f.ty(d.args[0]).elem()))
                }
                Op::Broadcast => {
                    let src = d.args[0];
                    let idx = self.broadcast_index(src, ivs, space);
                    let base = self.inputs[&src];
                    Some(self.load_elem(base, idx, self.f.ty(src).elem()))
                }
                Op::Binary(op) => {
                    let (a, bv) = (arg(self, 0), arg(self, 1));
                    Some(self.binary(*op, dtype(self.f.ty(d.args[0])), a, bv, code))
                }
                Op::Cmp(op) => {
                    let (a, bv) = (arg(self, 0), arg(self, 1));
                    Some(self.compare(*op, dtype(self.f.ty(d.args[0])), a, bv))
                }
                Op::Unary(op) => {
                    let a = arg(self, 0);
                    Some(self.unary(*op, dtype(self.f.ty(d.args[0])), a))
                }
                Op::Cast { bitcast } => {
                    let a = arg(self, 0);
                    let (from, to) = (dtype(self.f.ty(d.args[0])), dtype(self.f.ty(d.results[0])));
                    Some(if *bitcast {
                        self.bitcast(from, to, a)
                    } else {
                        self.cast(from, to, a)
                    })
                }
                Op::Select => {
                    let (c, x, y) = (arg(self, 0), arg(self, 1), arg(self, 2));
                    Some(self.b.ins().select(c, x, y))
                }
                Op::Fma => {
                    let (x, y, z) = (arg(self, 0), arg(self, 1), arg(self, 2));
                    let dt = dtype(self.f.ty(d.args[0]));
                    Some(self.fma(dt, x, y, z))
                }
                Op::PtrAdd => {
                    let (p, o) = (arg(self, 0), arg(self, 1));
                    let size = match self.f.ty(d.args[0]).elem() {
                        Elem::Ptr(t) => t.size_bytes() as i64,
                        Elem::Num(_) => 1,
                    };
                    let od = dtype(self.f.ty(d.args[1]));
                    let wide = self.emit_to_i64(od, o);
                    let scaled = self.b.ins().imul_imm_s(wide, size);
                    Some(self.b.ins().iadd(p, scaled))
                }
                Op::Load { has_mask, has_other } => {
                    let e = self.f.ty(d.results[0]).elem();
                    let p = arg(self, 0);
                    let mask = has_mask.then(|| arg(self, 1));
                    let other = has_other.then(|| arg(self, if *has_mask { 2 } else { 1 }));
                    Some(self.masked_load(p, e, mask, other, code))
                }
                Op::Store { has_mask } => {
                    let e = self.f.ty(d.args[1]).elem();
                    let (p, x) = (arg(self, 0), arg(self, 1));
                    let mask = has_mask.then(|| arg(self, 2));
                    self.masked_store(p, e, x, mask, code);
                    None
                }
                Op::Reduce { op, .. } => {
                    let x = arg(self, 0);
                    self.reduce_step(i, *op, dtype(self.f.ty(d.args[0])), x);
                    None
                }
                _ => None,
            };
            if let (Some(x), Some(r)) = (result, d.results.first()) {
                vals.insert(*r, x);
                if let Some(out) = self.outputs.get(r).copied() {
                    let e = self.f.ty(*r).elem();
                    self.store_elem(out, lin, e, x);
                }
            }
        }
    }

    /// `base + Σ ivs_k·stride_k` of affine input `v` (wrapping, i64).
    pub(super) fn affine_value(&mut self, v: ir::Value, ivs: &[Value]) -> Value {
        let (base, strides) = self.affine[&v].clone();
        let mut x = base;
        for (j, s) in ivs.iter().zip(&strides) {
            let t = self.b.ins().imul(*j, *s);
            x = self.b.ins().iadd(x, t);
        }
        x
    }

    /// Element `ivs` of affine input `v`, as a value of type `e`.
    fn affine_elem(&mut self, v: ir::Value, ivs: &[Value], e: Elem) -> Value {
        let x = self.affine_value(v, ivs);
        match cl_type(e) {
            types::I64 => x,
            t => self.b.ins().ireduce(t, x),
        }
    }

    /// The row-major index into broadcast source `src` of the element at
    /// `ivs` in `space` (axes where the source has extent 1 contribute
    /// nothing).
    pub(super) fn broadcast_index(&mut self, src: ir::Value, ivs: &[Value], space: &[u64]) -> Value {
        let src_shape = self.f.ty(src).shape().to_vec();
        let src_strides = row_major_strides(&src_shape);
        let mut idx = self.iconst(types::I64, 0);
        for (k, j) in ivs.iter().enumerate() {
            if src_shape[k] != 1 || space[k] == 1 {
                let t = self.b.ins().imul_imm_s(*j, src_strides[k]);
                idx = self.b.ins().iadd(idx, t);
            }
        }
        idx
    }

    /// Folds element `x` (dtype `in_dt`) into fused reduction `i`.
    /// Elements arrive in row-major order: the order a whole reduction
    /// folds in. The first element starts the accumulator (so a sum of
    /// one -0.0 stays -0.0).
    pub(super) fn reduce_step(&mut self, i: ir::Inst, op: ReduceOp, in_dt: DType, x: Value) {
        let (acc, first) = self.reducers[&i];
        let x = if in_dt.is_float() {
            self.emit_to_f32(in_dt, x)
        } else {
            self.emit_to_i64(in_dt, x)
        };
        let a = self.b.use_var(acc);
        let combined = match op {
            ReduceOp::Sum if in_dt.is_float() => self.b.ins().fadd(a, x),
            ReduceOp::Sum => self.b.ins().iadd(a, x),
            _ if in_dt.is_float() => self.fmaxnum(a, x, op == ReduceOp::Max),
            ReduceOp::Max => self.b.ins().smax(a, x),
            _ => self.b.ins().smin(a, x),
        };
        let f = self.b.use_var(first);
        let next = self.b.ins().select(f, x, combined);
        self.b.def_var(acc, next);
        let zero = self.iconst(types::I8, 0);
        self.b.def_var(first, zero);
    }

    fn masked_load(&mut self, p: Value, e: Elem, mask: Option<Value>, other: Option<Value>, code: u32) -> Value {
        let t = cl_type(e);
        let merge = self.b.create_block();
        self.b.append_block_param(merge, t);
        if let Some(m) = mask {
            let load = self.b.create_block();
            let skip = self.b.create_block();
            self.b.ins().brif(m, load, &[], skip, &[]);
            self.b.switch_to_block(skip);
            let fill = match other {
                Some(o) => o,
                None => self.zero_of(t),
            };
            self.b.ins().jump(merge, &[BlockArg::Value(fill)]);
            self.b.switch_to_block(load);
        }
        let host = self.access(p, elem_bytes(e), false, code);
        let v = self.b.ins().load(t, flags(), host, 0);
        self.b.ins().jump(merge, &[BlockArg::Value(v)]);
        self.b.switch_to_block(merge);
        self.b.block_params(merge)[0]
    }

    fn zero_of(&mut self, t: types::Type) -> Value {
        if t == types::F32 {
            self.b.ins().f32const(0.0)
        } else {
            self.iconst(t, 0)
        }
    }

    fn masked_store(&mut self, p: Value, e: Elem, x: Value, mask: Option<Value>, code: u32) {
        let cont = self.b.create_block();
        if let Some(m) = mask {
            let store = self.b.create_block();
            self.b.ins().brif(m, store, &[], cont, &[]);
            self.b.switch_to_block(store);
        }
        let host = self.access(p, elem_bytes(e), true, code);
        self.b.ins().store(flags(), x, host, 0);
        self.b.ins().jump(cont, &[]);
        self.b.switch_to_block(cont);
    }

    // ----- element operations (the semantics of `elem.rs`) -----

    /// IEEE maxNum/minNum with `elem`'s rules (a NaN operand loses; max
    /// prefers +0 and min -0 between equal zeros), on f32 scalars or, lane
    /// by lane, on f32x4 registers (comparisons then give masks).
    pub(super) fn fmaxnum(&mut self, a: Value, b: Value, is_max: bool) -> Value {
        let vector = self.b.func.dfg.value_type(a).is_vector();
        let pick = |gen: &mut Self, c: Value, x: Value, y: Value| {
            if vector {
                gen.vselect(c, x, y)
            } else {
                gen.b.ins().select(c, x, y)
            }
        };
        let a_nan = self.b.ins().fcmp(FloatCC::Unordered, a, a);
        let b_nan = self.b.ins().fcmp(FloatCC::Unordered, b, b);
        let (first, second) = if is_max {
            (FloatCC::GreaterThan, FloatCC::LessThan)
        } else {
            (FloatCC::LessThan, FloatCC::GreaterThan)
        };
        let a_wins = self.b.ins().fcmp(first, a, b);
        let b_wins = self.b.ins().fcmp(second, a, b);
        // Equal values: max prefers +0, min prefers -0. The sign of `a`:
        // a bool, or per lane an all-ones mask (the sign bit shifted across).
        let a_neg = if vector {
            let flags = MemFlagsData::new().with_endianness(cranelift_codegen::ir::Endianness::Little);
            let ai = self.b.ins().bitcast(types::I32X4, flags, a);
            self.b.ins().sshr_imm_s(ai, 31)
        } else {
            let ai = self.b.ins().bitcast(types::I32, MemFlagsData::new(), a);
            self.b.ins().icmp_imm_s(IntCC::SignedLessThan, ai, 0)
        };
        let tie = if is_max {
            pick(self, a_neg, b, a)
        } else {
            pick(self, a_neg, a, b)
        };
        let r = pick(self, b_wins, b, tie);
        let r = pick(self, a_wins, a, r);
        let r = pick(self, b_nan, a, r);
        pick(self, a_nan, b, r)
    }

    fn binary_f32(&mut self, op: BinaryOp, a: Value, b: Value) -> Value {
        let r = match op {
            BinaryOp::Add => self.b.ins().fadd(a, b),
            BinaryOp::Sub => self.b.ins().fsub(a, b),
            BinaryOp::Mul => self.b.ins().fmul(a, b),
            BinaryOp::Div => self.b.ins().fdiv(a, b),
            BinaryOp::FloorDiv => {
                let q = self.b.ins().fdiv(a, b);
                self.b.ins().floor(q)
            }
            BinaryOp::Mod => {
                let q = self.b.ins().fdiv(a, b);
                let q = self.b.ins().floor(q);
                let m = self.b.ins().fmul(q, b);
                let m = self.canon(m);
                self.b.ins().fsub(a, m)
            }
            BinaryOp::Max => self.fmaxnum(a, b, true),
            BinaryOp::Min => self.fmaxnum(a, b, false),
            _ => self.b.ins().f32const(f32::NAN),
        };
        self.canon(r)
    }

    fn binary(&mut self, op: BinaryOp, d: DType, a: Value, b: Value, code: u32) -> Value {
        if d.is_float() {
            let (x, y) = (self.emit_to_f32(d, a), self.emit_to_f32(d, b));
            let r = self.binary_f32(op, x, y);
            return self.emit_from_f32(d, r);
        }
        let t = cl_type(Elem::Num(d));
        let signed = d.is_signed();
        let r = match op {
            BinaryOp::Add => self.b.ins().iadd(a, b),
            BinaryOp::Sub => self.b.ins().isub(a, b),
            BinaryOp::Mul => self.b.ins().imul(a, b),
            BinaryOp::Div | BinaryOp::FloorDiv | BinaryOp::Mod => {
                let zero = self.b.ins().icmp_imm_s(IntCC::Equal, b, 0);
                self.fail_if(zero, code);
                let is_mod = op == BinaryOp::Mod;
                if signed {
                    // MIN / -1 would trap: -1 divides as a negation.
                    let minus_one = self.b.ins().icmp_imm_s(IntCC::Equal, b, -1);
                    let one = self.iconst(t, 1);
                    let safe = self.b.ins().select(minus_one, one, b);
                    if is_mod {
                        let r = self.b.ins().srem(a, safe);
                        let z = self.iconst(t, 0);
                        self.b.ins().select(minus_one, z, r)
                    } else {
                        let q = self.b.ins().sdiv(a, safe);
                        let n = self.b.ins().ineg(a);
                        self.b.ins().select(minus_one, n, q)
                    }
                } else if is_mod {
                    self.b.ins().urem(a, b)
                } else {
                    self.b.ins().udiv(a, b)
                }
            }
            BinaryOp::And => self.b.ins().band(a, b),
            BinaryOp::Or => self.b.ins().bor(a, b),
            BinaryOp::Xor => self.b.ins().bxor(a, b),
            BinaryOp::Shl | BinaryOp::Shr if d == DType::Bool => a,
            BinaryOp::Shl => self.b.ins().ishl(a, b),
            BinaryOp::Shr if signed => self.b.ins().sshr(a, b),
            BinaryOp::Shr => self.b.ins().ushr(a, b),
            BinaryOp::Max if signed => self.b.ins().smax(a, b),
            BinaryOp::Max => self.b.ins().umax(a, b),
            BinaryOp::Min if signed => self.b.ins().smin(a, b),
            BinaryOp::Min => self.b.ins().umin(a, b),
        };
        if d == DType::Bool {
            self.b.ins().band_imm_s(r, 1)
        } else {
            r
        }
    }

    fn compare(&mut self, op: CmpOp, d: DType, a: Value, b: Value) -> Value {
        if d.is_float() {
            let (x, y) = (self.emit_to_f32(d, a), self.emit_to_f32(d, b));
            return self.b.ins().fcmp(float_cc(op), x, y);
        }
        self.b.ins().icmp(int_cc(op, d.is_signed()), a, b)
    }

    fn unary(&mut self, op: UnaryOp, d: DType, a: Value) -> Value {
        if d.is_float() {
            let x = self.emit_to_f32(d, a);
            let r = match op {
                UnaryOp::Neg => self.b.ins().fneg(x),
                UnaryOp::Abs => self.b.ins().fabs(x),
                UnaryOp::Sqrt => self.b.ins().sqrt(x),
                UnaryOp::Rsqrt => {
                    let s = self.b.ins().sqrt(x);
                    let one = self.b.ins().f32const(1.0);
                    self.b.ins().fdiv(one, s)
                }
                UnaryOp::Floor => self.b.ins().floor(x),
                UnaryOp::Ceil => self.b.ins().ceil(x),
                other => match transcendental_code(other) {
                    Some(c) => self.call1(self.h.math[c as usize], &[x]),
                    None => self.b.ins().f32const(f32::NAN),
                },
            };
            let r = self.canon(r);
            return self.emit_from_f32(d, r);
        }
        match op {
            UnaryOp::Not => self.b.ins().icmp_imm_s(IntCC::Equal, a, 0),
            UnaryOp::Neg | UnaryOp::Abs if d == DType::Bool => a,
            UnaryOp::Invert if d == DType::Bool => self.b.ins().bxor_imm_s(a, 1),
            UnaryOp::Neg => self.b.ins().ineg(a),
            UnaryOp::Invert => self.b.ins().bnot(a),
            UnaryOp::Abs if d.is_signed() => self.b.ins().iabs(a),
            _ => a,
        }
    }

    fn bitcast(&mut self, from: DType, to: DType, a: Value) -> Value {
        let (ft, tt) = (cl_type(Elem::Num(from)), cl_type(Elem::Num(to)));
        if to == DType::Bool {
            return self.b.ins().band_imm_s(a, 1);
        }
        if ft == tt {
            a
        } else {
            self.b.ins().bitcast(tt, MemFlagsData::new(), a)
        }
    }

    fn cast(&mut self, from: DType, to: DType, a: Value) -> Value {
        if from == to {
            return a;
        }
        let narrow_float = |d: DType| matches!(d, DType::F16 | DType::BF16);
        if narrow_float(from) || narrow_float(to) {
            return self.cast_via_helper(from, to, a);
        }
        match (from.is_float(), to.is_float()) {
            (false, false) => {
                if to == DType::Bool {
                    return self.b.ins().icmp_imm_s(IntCC::NotEqual, a, 0);
                }
                let w = self.emit_to_i64(from, a);
                self.emit_from_i64(to, w)
            }
            (false, true) => self.int_to_f32(from, a),
            (true, false) => match to {
                DType::Bool => {
                    let z = self.b.ins().f32const(0.0);
                    self.b.ins().fcmp(FloatCC::NotEqual, a, z)
                }
                DType::I32 => self.b.ins().fcvt_to_sint_sat(types::I32, a),
                DType::I64 => self.b.ins().fcvt_to_sint_sat(types::I64, a),
                DType::U32 => self.b.ins().fcvt_to_uint_sat(types::I32, a),
                _ => self.cast_via_helper(from, to, a),
            },
            (true, true) => a,
        }
    }

    fn fma(&mut self, d: DType, x: Value, y: Value, z: Value) -> Value {
        if d.is_float() {
            let (a, b, c) = (self.emit_to_f32(d, x), self.emit_to_f32(d, y), self.emit_to_f32(d, z));
            let r = self.call1(self.h.fma_f32, &[a, b, c]);
            return self.emit_from_f32(d, r);
        }
        let m = self.b.ins().imul(x, y);
        let r = self.b.ins().iadd(m, z);
        if d == DType::Bool {
            self.b.ins().band_imm_s(r, 1)
        } else {
            r
        }
    }

    // ----- reductions -----

    /// A reduction group: for each output lane, a loop along the axis.
    pub fn reduce(&mut self, op: ReduceOp, axis: Option<usize>) {
        let i = self.g.insts[0];
        let d = self.f.inst(i).clone();
        let xt = self.f.ty(d.args[0]).clone();
        let rt = self.f.ty(d.results[0]).clone();
        let (in_dt, out_dt) = (dtype(&xt), dtype(&rt));
        let shape = xt.shape().to_vec();
        let strides = row_major_strides(&shape);
        let x = self.inputs[&d.args[0]];
        let out = self.outputs.get(&d.results[0]).copied();
        // Outer dimensions (every axis but the reduced one), and the lane.
        let (outer, lane_len, lane_stride): (Vec<usize>, u64, i64) = match axis {
            Some(a) => ((0..shape.len()).filter(|k| *k != a).collect(), shape[a], strides[a]),
            None => (Vec::new(), shape.iter().product(), 1),
        };
        let outer_count: u64 = outer.iter().map(|k| shape[*k]).product();
        // Base offset of lane `o` (row-major over the outer dims).
        let counter_block = self.b.create_block();
        self.b.append_block_param(counter_block, types::I64);
        let zero = self.iconst(types::I64, 0);
        self.b.ins().jump(counter_block, &[BlockArg::Value(zero)]);
        self.b.switch_to_block(counter_block);
        let o = self.b.block_params(counter_block)[0];
        let more = self
            .b
            .ins()
            .icmp_imm_s(IntCC::SignedLessThan, o, outer_count.max(1) as i64);
        let lane_block = self.b.create_block();
        let done = self.b.create_block();
        self.b.ins().brif(more, lane_block, &[], done, &[]);
        self.b.switch_to_block(lane_block);
        // Decompose `o` into outer coordinates → base offset.
        let mut base = self.iconst(types::I64, 0);
        let mut rem = o;
        for (pos, &k) in outer.iter().enumerate().rev() {
            let dim = shape[k] as i64;
            let coord = if pos == 0 {
                rem
            } else {
                self.b.ins().srem_imm_s(rem, dim)
            };
            if pos != 0 {
                rem = self.b.ins().sdiv_imm_s(rem, dim);
            }
            let t = self.b.ins().imul_imm_s(coord, strides[k]);
            base = self.b.ins().iadd(base, t);
        }
        let result = self.reduce_lane(op, in_dt, out_dt, x, base, lane_len, lane_stride, xt.elem());
        if let Some(out) = out {
            self.store_elem(out, o, rt.elem(), result);
        }
        let next = self.b.ins().iadd_imm_s(o, 1);
        self.b.ins().jump(counter_block, &[BlockArg::Value(next)]);
        self.b.switch_to_block(done);
    }

    #[allow(clippy::too_many_arguments)]
    fn reduce_lane(
        &mut self,
        op: ReduceOp,
        in_dt: DType,
        out_dt: DType,
        x: Value,
        base: Value,
        n: u64,
        stride: i64,
        e: Elem,
    ) -> Value {
        let is_float = in_dt.is_float();
        // Accumulator: f32 for floats, i64 (extended) for integers; and
        // the index of the best element for argmax/argmin.
        let acc_t = if is_float { types::F32 } else { types::I64 };
        let first = self.load_elem(x, base, e);
        let first = if is_float {
            self.emit_to_f32(in_dt, first)
        } else {
            self.emit_to_i64(in_dt, first)
        };
        let header = self.b.create_block();
        self.b.append_block_param(header, types::I64);
        self.b.append_block_param(header, acc_t);
        self.b.append_block_param(header, types::I64);
        let one = self.iconst(types::I64, 1);
        let zero = self.iconst(types::I64, 0);
        self.b.ins().jump(
            header,
            &[BlockArg::Value(one), BlockArg::Value(first), BlockArg::Value(zero)],
        );
        self.b.switch_to_block(header);
        let (k, acc, best) = (
            self.b.block_params(header)[0],
            self.b.block_params(header)[1],
            self.b.block_params(header)[2],
        );
        let more = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, k, n as i64);
        let body = self.b.create_block();
        let exit = self.b.create_block();
        self.b.ins().brif(more, body, &[], exit, &[]);
        self.b.switch_to_block(body);
        let off = self.b.ins().imul_imm_s(k, stride);
        let idx = self.b.ins().iadd(base, off);
        let v = self.load_elem(x, idx, e);
        let v = if is_float {
            self.emit_to_f32(in_dt, v)
        } else {
            self.emit_to_i64(in_dt, v)
        };
        let (acc2, best2) = match op {
            ReduceOp::Sum if is_float => (self.b.ins().fadd(acc, v), best),
            ReduceOp::Sum => (self.b.ins().iadd(acc, v), best),
            ReduceOp::Max | ReduceOp::Min if is_float => (self.fmaxnum(acc, v, op == ReduceOp::Max), best),
            ReduceOp::Max | ReduceOp::Min => {
                let cc = match (op == ReduceOp::Max, in_dt.is_signed()) {
                    (true, true) => IntCC::SignedGreaterThan,
                    (true, false) => IntCC::UnsignedGreaterThan,
                    (false, true) => IntCC::SignedLessThan,
                    (false, false) => IntCC::UnsignedLessThan,
                };
                let better = self.b.ins().icmp(cc, v, acc);
                (self.b.ins().select(better, v, acc), best)
            }
            ReduceOp::Argmax | ReduceOp::Argmin => {
                let is_max = op == ReduceOp::Argmax;
                let better = if is_float {
                    let cc = if is_max {
                        FloatCC::GreaterThan
                    } else {
                        FloatCC::LessThan
                    };
                    let strictly = self.b.ins().fcmp(cc, v, acc);
                    let acc_nan = self.b.ins().fcmp(FloatCC::Unordered, acc, acc);
                    let v_ok = self.b.ins().fcmp(FloatCC::Ordered, v, v);
                    let replace_nan = self.b.ins().band(acc_nan, v_ok);
                    // -0 < +0, as `min`/`max` order them: the index points
                    // at the value they give. Equal floats of different
                    // signs are the two zeros.
                    let equal = self.b.ins().fcmp(FloatCC::Equal, v, acc);
                    let vb = self.b.ins().bitcast(types::I32, MemFlagsData::new(), v);
                    let ab = self.b.ins().bitcast(types::I32, MemFlagsData::new(), acc);
                    // argmin takes -0 over +0, argmax +0 over -0.
                    let (want_neg, want_pos) = if is_max { (ab, vb) } else { (vb, ab) };
                    let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, want_neg, 0);
                    let pos = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, want_pos, 0);
                    let zero_tie = self.b.ins().band(neg, pos);
                    let zero_tie = self.b.ins().band(equal, zero_tie);
                    let better = self.b.ins().bor(strictly, replace_nan);
                    self.b.ins().bor(better, zero_tie)
                } else {
                    let cc = match (is_max, in_dt.is_signed()) {
                        (true, true) => IntCC::SignedGreaterThan,
                        (true, false) => IntCC::UnsignedGreaterThan,
                        (false, true) => IntCC::SignedLessThan,
                        (false, false) => IntCC::UnsignedLessThan,
                    };
                    self.b.ins().icmp(cc, v, acc)
                };
                (
                    self.b.ins().select(better, v, acc),
                    self.b.ins().select(better, k, best),
                )
            }
        };
        let k2 = self.b.ins().iadd_imm_s(k, 1);
        self.b.ins().jump(
            header,
            &[BlockArg::Value(k2), BlockArg::Value(acc2), BlockArg::Value(best2)],
        );
        self.b.switch_to_block(exit);
        match op {
            ReduceOp::Argmax | ReduceOp::Argmin => self.b.ins().ireduce(types::I32, best),
            _ if is_float => self.emit_from_f32(out_dt, acc),
            _ => self.emit_from_i64(out_dt, acc),
        }
    }

    // ----- transpose -----

    pub fn trans(&mut self, perm: &[usize]) {
        let i = self.g.insts[0];
        let d = self.f.inst(i).clone();
        let xt = self.f.ty(d.args[0]).clone();
        let rt = self.f.ty(d.results[0]).clone();
        let in_strides = row_major_strides(xt.shape());
        let out_shape: Vec<u64> = rt.shape().to_vec();
        let total: u64 = out_shape.iter().product();
        let x = self.inputs[&d.args[0]];
        let Some(out) = self.outputs.get(&d.results[0]).copied() else {
            return;
        };
        let header = self.b.create_block();
        self.b.append_block_param(header, types::I64);
        let zero = self.iconst(types::I64, 0);
        self.b.ins().jump(header, &[BlockArg::Value(zero)]);
        self.b.switch_to_block(header);
        let o = self.b.block_params(header)[0];
        let more = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, o, total as i64);
        let body = self.b.create_block();
        let done = self.b.create_block();
        self.b.ins().brif(more, body, &[], done, &[]);
        self.b.switch_to_block(body);
        let mut src = self.iconst(types::I64, 0);
        let mut rem = o;
        for k in (0..out_shape.len()).rev() {
            let dim = out_shape[k] as i64;
            let coord = self.b.ins().srem_imm_s(rem, dim);
            rem = self.b.ins().sdiv_imm_s(rem, dim);
            let t = self.b.ins().imul_imm_s(coord, in_strides[perm[k]]);
            src = self.b.ins().iadd(src, t);
        }
        let v = self.load_elem(x, src, xt.elem());
        self.store_elem(out, o, rt.elem(), v);
        let next = self.b.ins().iadd_imm_s(o, 1);
        self.b.ins().jump(header, &[BlockArg::Value(next)]);
        self.b.switch_to_block(done);
    }
}
