//! Matrix products. `dot` groups are compiled to an f32 kernel: 4×8
//! blocks of the output kept in f32x4 registers, with a scalar loop for
//! the edges. Each output element is the accumulator plus the products
//! `a[i,k]·b[k,j]` added for k = 0, 1, 2, … in order, each product and sum
//! rounded to f32 (the interpreter's definition): vectors run across
//! columns, never across the sum. NaN sums are stored canonical. f16/bf16
//! operands are widened to f32 before the call; integer products use a
//! scalar loop with wrapping sums. On hosts with AVX the float product is
//! a call to `dot_avx`'s 256-bit kernel instead (same sums, same order).

use super::codegen::Gen;
use crate::datapath::elem::CANONICAL_NAN_F32;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, BlockArg, Endianness, InstBuilder, MemFlagsData, Value};

const MR: i64 = 4;
const NR: i64 = 8;

fn flags() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// A counted loop `for var in start..end step` with `body` emitted by the
/// caller between `begin` and `end`.
struct Loop {
    header: cranelift_codegen::ir::Block,
    exit: cranelift_codegen::ir::Block,
    var: Value,
    step: i64,
}

impl Gen<'_, '_> {
    fn begin_loop(&mut self, start: Value, end: Value, step: i64) -> Loop {
        let header = self.b.create_block();
        self.b.append_block_param(header, types::I64);
        let body = self.b.create_block();
        let exit = self.b.create_block();
        self.b.ins().jump(header, &[BlockArg::Value(start)]);
        self.b.switch_to_block(header);
        let var = self.b.block_params(header)[0];
        let more = self.b.ins().icmp(IntCC::SignedLessThan, var, end);
        self.b.ins().brif(more, body, &[], exit, &[]);
        self.b.switch_to_block(body);
        Loop {
            header,
            exit,
            var,
            step,
        }
    }

    fn end_loop(&mut self, l: Loop) {
        let next = self.b.ins().iadd_imm_s(l.var, l.step);
        self.b.ins().jump(l.header, &[BlockArg::Value(next)]);
        self.b.switch_to_block(l.exit);
    }

    /// Any NaN lane as the canonical NaN (the interpreter rounds each
    /// step to canonical; NaN-ness is the same, so once at the end agrees).
    fn canon_f32x4(&mut self, x: Value) -> Value {
        let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
        let nan = self.b.ins().bitcast(
            types::F32X4,
            MemFlagsData::new().with_endianness(Endianness::Little),
            nan,
        );
        let c = self.b.ins().f32const(f32::from_bits(CANONICAL_NAN_F32));
        let c = self.b.ins().splat(types::F32X4, c);
        self.b.ins().bitselect(nan, c, x)
    }

    fn addr(&mut self, base: Value, index: Value, scale: i64) -> Value {
        let off = self.b.ins().imul_imm_s(index, scale);
        self.b.ins().iadd(base, off)
    }

    /// `out[M,N] = init + a[M,K] @ b[K,N]` over f32 buffers; `init` is the
    /// accumulator buffer (or zeros when absent).
    pub fn dot_f32(&mut self, a: Value, b: Value, init: Option<Value>, out: Value, (m, n, k): (i64, i64, i64)) {
        if self.native_dot {
            // The same sums at twice the vector width (see `dot_avx`).
            let zero = self.b.ins().iconst(types::I64, 0);
            let dims = [m, n, k].map(|d| self.b.ins().iconst(types::I64, d));
            let args = [a, b, init.unwrap_or(zero), out, dims[0], dims[1], dims[2]];
            self.b.ins().call(self.h.dot_f32, &args);
            return;
        }
        let (m4, n8) = (m / MR * MR, n / NR * NR);
        let zero = self.b.ins().iconst(types::I64, 0);
        let m4v = self.b.ins().iconst(types::I64, m4);
        let n8v = self.b.ins().iconst(types::I64, n8);
        // Vector blocks.
        let li = self.begin_loop(zero, m4v, MR);
        let i0 = li.var;
        let lj = self.begin_loop(zero, n8v, NR);
        let j0 = lj.var;
        let mut accs = Vec::new();
        for r in 0..MR {
            for v in 0..2 {
                let row = self.b.ins().iadd_imm_s(i0, r);
                let col = self.b.ins().iadd_imm_s(j0, v * 4);
                let rn = self.b.ins().imul_imm_s(row, n);
                let idx = self.b.ins().iadd(rn, col);
                let x = match init {
                    Some(p) => {
                        let ad = self.addr(p, idx, 4);
                        self.b.ins().load(types::F32X4, flags(), ad, 0)
                    }
                    None => {
                        let z = self.b.ins().f32const(0.0);
                        self.b.ins().splat(types::F32X4, z)
                    }
                };
                accs.push(x);
            }
        }
        // The k loop carries the accumulators and two pointers: to a[i0, kk]
        // (rows r below it at immediate offsets r·k floats) and to
        // b[kk, j0]. Addresses recomputed from the counters each step cost
        // a fifth of the loop.
        let i0k = self.b.ins().imul_imm_s(i0, k);
        let a0 = self.addr(a, i0k, 4);
        let b0 = self.addr(b, j0, 4);
        let header = self.b.create_block();
        for t in [types::I64, types::I64, types::I64] {
            self.b.append_block_param(header, t);
        }
        for _ in 0..accs.len() {
            self.b.append_block_param(header, types::F32X4);
        }
        let body = self.b.create_block();
        let exit = self.b.create_block();
        let mut args = vec![BlockArg::Value(zero), BlockArg::Value(a0), BlockArg::Value(b0)];
        args.extend(accs.iter().map(|v| BlockArg::Value(*v)));
        self.b.ins().jump(header, &args);
        self.b.switch_to_block(header);
        let params = self.b.block_params(header).to_vec();
        let (kk, pa, pb) = (params[0], params[1], params[2]);
        let more = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, kk, k);
        self.b.ins().brif(more, body, &[], exit, &[]);
        self.b.switch_to_block(body);
        let b0 = self.b.ins().load(types::F32X4, flags(), pb, 0);
        let b1 = self.b.ins().load(types::F32X4, flags(), pb, 16);
        let mut next = vec![
            BlockArg::Value(self.b.ins().iadd_imm_s(kk, 1)),
            BlockArg::Value(self.b.ins().iadd_imm_s(pa, 4)),
            BlockArg::Value(self.b.ins().iadd_imm_s(pb, n * 4)),
        ];
        for r in 0..MR {
            // Row r of the block: an immediate offset when it fits one.
            let av = match i32::try_from(r * k * 4) {
                Ok(off) => self.b.ins().load(types::F32, flags(), pa, off),
                Err(_) => {
                    let row = self.b.ins().iadd_imm_s(pa, r * k * 4);
                    self.b.ins().load(types::F32, flags(), row, 0)
                }
            };
            let asplat = self.b.ins().splat(types::F32X4, av);
            for (v, bv) in [b0, b1].into_iter().enumerate() {
                let p = self.b.ins().fmul(asplat, bv);
                let s = self.b.ins().fadd(params[3 + (r as usize) * 2 + v], p);
                next.push(BlockArg::Value(s));
            }
        }
        self.b.ins().jump(header, &next);
        self.b.switch_to_block(exit);
        for r in 0..MR {
            for v in 0..2i64 {
                let row = self.b.ins().iadd_imm_s(i0, r);
                let col = self.b.ins().iadd_imm_s(j0, v * 4);
                let rn = self.b.ins().imul_imm_s(row, n);
                let idx = self.b.ins().iadd(rn, col);
                let ad = self.addr(out, idx, 4);
                let x = params[3 + (r as usize) * 2 + v as usize];
                let x = self.canon_f32x4(x);
                self.b.ins().store(flags(), x, ad, 0);
            }
        }
        self.end_loop(lj);
        self.end_loop(li);
        // Edges: columns n8.. for the vector rows, then rows m4.. entirely
        // (no code for an empty edge: it would only cost compile time).
        let mv = self.b.ins().iconst(types::I64, m);
        let nv = self.b.ins().iconst(types::I64, n);
        if n8 < n && m4 > 0 {
            self.dot_scalar_region(a, b, init, out, (zero, m4v), (n8v, nv), k, n);
        }
        if m4 < m {
            self.dot_scalar_region(a, b, init, out, (m4v, mv), (zero, nv), k, n);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn dot_scalar_region(
        &mut self,
        a: Value,
        b: Value,
        init: Option<Value>,
        out: Value,
        rows: (Value, Value),
        cols: (Value, Value),
        k: i64,
        n: i64,
    ) {
        let li = self.begin_loop(rows.0, rows.1, 1);
        let i = li.var;
        let lj = self.begin_loop(cols.0, cols.1, 1);
        let j = lj.var;
        let rn = self.b.ins().imul_imm_s(i, n);
        let oidx = self.b.ins().iadd(rn, j);
        let s0 = match init {
            Some(p) => {
                let ad = self.addr(p, oidx, 4);
                self.b.ins().load(types::F32, flags(), ad, 0)
            }
            None => self.b.ins().f32const(0.0),
        };
        let header = self.b.create_block();
        self.b.append_block_param(header, types::I64);
        self.b.append_block_param(header, types::F32);
        let body = self.b.create_block();
        let exit = self.b.create_block();
        let zero = self.b.ins().iconst(types::I64, 0);
        self.b.ins().jump(header, &[BlockArg::Value(zero), BlockArg::Value(s0)]);
        self.b.switch_to_block(header);
        let (kk, s) = (self.b.block_params(header)[0], self.b.block_params(header)[1]);
        let more = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, kk, k);
        self.b.ins().brif(more, body, &[], exit, &[]);
        self.b.switch_to_block(body);
        let ik = self.b.ins().imul_imm_s(i, k);
        let aidx = self.b.ins().iadd(ik, kk);
        let aad = self.addr(a, aidx, 4);
        let av = self.b.ins().load(types::F32, flags(), aad, 0);
        let kn = self.b.ins().imul_imm_s(kk, n);
        let bidx = self.b.ins().iadd(kn, j);
        let bad = self.addr(b, bidx, 4);
        let bv = self.b.ins().load(types::F32, flags(), bad, 0);
        let p = self.b.ins().fmul(av, bv);
        let s2 = self.b.ins().fadd(s, p);
        let k2 = self.b.ins().iadd_imm_s(kk, 1);
        self.b.ins().jump(header, &[BlockArg::Value(k2), BlockArg::Value(s2)]);
        self.b.switch_to_block(exit);
        let oad = self.addr(out, oidx, 4);
        let s = self.canon(s);
        self.b.ins().store(flags(), s, oad, 0);
        self.end_loop(lj);
        self.end_loop(li);
    }

    /// Integer products: i8/u8/i32/… operands, sums wrapping in i64 and
    /// truncated to the i32 (or requested) output by the caller's element
    /// type; `elem_bytes`: operand and output element sizes.
    #[allow(clippy::too_many_arguments)]
    pub fn dot_int(
        &mut self,
        a: Value,
        b: Value,
        init: Option<Value>,
        out: Value,
        (m, n, k): (i64, i64, i64),
        in_dt: crate::sema::types::DType,
        out_dt: crate::sema::types::DType,
    ) {
        use crate::sema::types::Elem;
        let (ie, oe) = (Elem::Num(in_dt), Elem::Num(out_dt));
        let zero = self.b.ins().iconst(types::I64, 0);
        let mv = self.b.ins().iconst(types::I64, m);
        let nv = self.b.ins().iconst(types::I64, n);
        let li = self.begin_loop(zero, mv, 1);
        let i = li.var;
        let lj = self.begin_loop(zero, nv, 1);
        let j = lj.var;
        let rn = self.b.ins().imul_imm_s(i, n);
        let oidx = self.b.ins().iadd(rn, j);
        let s0 = match init {
            Some(p) => {
                let x = self.load_at(p, oidx, oe);
                self.widen(out_dt, x)
            }
            None => self.b.ins().iconst(types::I64, 0),
        };
        let header = self.b.create_block();
        self.b.append_block_param(header, types::I64);
        self.b.append_block_param(header, types::I64);
        let body = self.b.create_block();
        let exit = self.b.create_block();
        self.b.ins().jump(header, &[BlockArg::Value(zero), BlockArg::Value(s0)]);
        self.b.switch_to_block(header);
        let (kk, s) = (self.b.block_params(header)[0], self.b.block_params(header)[1]);
        let more = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, kk, k);
        self.b.ins().brif(more, body, &[], exit, &[]);
        self.b.switch_to_block(body);
        let ik = self.b.ins().imul_imm_s(i, k);
        let aidx = self.b.ins().iadd(ik, kk);
        let av = self.load_at(a, aidx, ie);
        let av = self.widen(in_dt, av);
        let kn = self.b.ins().imul_imm_s(kk, n);
        let bidx = self.b.ins().iadd(kn, j);
        let bv = self.load_at(b, bidx, ie);
        let bv = self.widen(in_dt, bv);
        let p = self.b.ins().imul(av, bv);
        let s2 = self.b.ins().iadd(s, p);
        let k2 = self.b.ins().iadd_imm_s(kk, 1);
        self.b.ins().jump(header, &[BlockArg::Value(k2), BlockArg::Value(s2)]);
        self.b.switch_to_block(exit);
        let r = self.narrow(out_dt, s);
        self.store_at(out, oidx, oe, r);
        self.end_loop(lj);
        self.end_loop(li);
    }
}
