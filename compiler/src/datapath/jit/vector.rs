//! Vector code for the innermost loop of elementwise groups.
//!
//! When every member of a group has a vector form — 32-bit numbers and
//! bools, pointers that step by whole elements — the innermost loop takes
//! a chunk of up to sixteen elements at a time (one to four 128-bit
//! registers per value, fewer when rows are short). A chunk checks, as it
//! goes, what makes its vector form equal to that many scalar iterations:
//! the masks of its loads and stores all on, each pointer block
//! consecutive, the chunk's bytes inside the cached segment; each check is
//! made once per chunk and value. A chunk that fails a check runs only its
//! first element on the scalar path, and the loop tries a chunk again one
//! element later; so tails, holes in masks and faults take exactly the
//! scalar code. Nothing a failed chunk did is visible: loads have no
//! effect, a group's one store comes last (see `fuse`), and the outputs it
//! wrote are rewritten.
//!
//! Lanes never mix: each float operation is the scalar one, lane by lane
//! (SSE arithmetic is IEEE, like the scalar code), and fused reductions
//! fold the lanes one by one in index order.

use super::codegen::{cl_type, dtype, elem_bytes, flags, float_cc, int_cc, Gen};
use super::runtime::transcendental_code;
use crate::datapath::elem::CANONICAL_NAN_F32;
use crate::ir::{self, BinaryOp, CmpOp, Op, Type, UnaryOp};
use crate::sema::types::{DType, Elem};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, Block, ConstantData, Endianness, InstBuilder, MemFlagsData, Value};
use std::collections::HashMap;

/// Lanes per register.
const REG_LANES: i64 = 4;
/// Registers per value, at most.
const MAX_REGS: usize = 4;

/// The registers of one value in a chunk (only the first `regs` of the
/// chunk are meaningful).
type Regs = [Value; MAX_REGS];

/// How many registers per value a group over rows of `n` elements uses
/// (0: rows too short for vectors).
pub fn regs_for(n: u64) -> usize {
    ((n / REG_LANES as u64) as usize).min(MAX_REGS)
}

/// Vectors every chunk of a group uses, made once before its loop (the
/// code generator does not hoist them out of the loop by itself).
pub struct VConsts {
    /// Lanes `4q .. 4q + 4` of `[0, 1, 2, …]`, for each register q.
    iota: Regs,
    zero_i32: Value,
    zero_f32: Value,
    ones_i32: Value,
    canonical_nan: Value,
    one_f32: Value,
    /// The group's scalar inputs, splat.
    scalars: HashMap<ir::Value, Lanes>,
    /// Bool values that only ever serve as load and store masks and are
    /// built from the group's bool inputs by `broadcast`, `splat` and `&`:
    /// a chunk tests them for "all on" from the input bytes (see
    /// `mask_on`) and never makes their lanes.
    lazy_masks: std::collections::HashSet<ir::Value>,
}

/// A chunk's lanes of one IR value.
#[derive(Clone, Copy)]
enum Lanes {
    /// 128-bit registers: f32x4 for f32, i32x4 for i32/u32, and for
    /// bools i32x4 masks (-1 on, 0 off). `scalar` is set when every lane
    /// is that one value (a splat of a scalar input); `first` when lane k
    /// is `first + k` modulo 2^32 (an `arange` shifted by scalars).
    Vec {
        v: Regs,
        scalar: Option<Value>,
        first: Option<Value>,
    },
    /// Pointers: lane k is `base + k * stride` bytes.
    Ptr { base: Value, stride: i64 },
    /// f16/bf16 lanes as loaded: four to an i64 word, one word per
    /// register of the chunk. Moved as they are to outputs and stores;
    /// widened only if something else reads them.
    Halves { words: Regs },
}

/// The element types a register holds.
fn lane_dtype(d: DType) -> bool {
    matches!(d, DType::F32 | DType::I32 | DType::U32 | DType::Bool)
}

/// The four-byte numbers (what loads, stores and broadcasts move).
fn word_dtype(d: DType) -> bool {
    matches!(d, DType::F32 | DType::I32 | DType::U32)
}

/// The 16-bit floats: their lanes hold the raw bits, zero-extended to 32.
fn half_dtype(d: DType) -> bool {
    matches!(d, DType::F16 | DType::BF16)
}

/// What loads and stores move.
fn moved_dtype(d: DType) -> bool {
    word_dtype(d) || half_dtype(d)
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
    /// Makes the loop-invariant vectors of a group with `regs` registers
    /// per value (in the block before its loop).
    pub(super) fn vector_prelude(&mut self, regs: usize) {
        let iota = {
            let mut out = [self.iota_const(0); MAX_REGS];
            for (q, slot) in out.iter_mut().enumerate().take(regs).skip(1) {
                *slot = self.iota_const(q);
            }
            out
        };
        let zero_i32 = self.zeros(types::I32X4);
        let zero_f32 = self.zeros(types::F32X4);
        let one = self.iconst(types::I32, 1);
        let ones_i32 = self.b.ins().splat(types::I32X4, one);
        let nan = self.b.ins().f32const(f32::from_bits(CANONICAL_NAN_F32));
        let canonical_nan = self.b.ins().splat(types::F32X4, nan);
        let one = self.b.ins().f32const(1.0);
        let one_f32 = self.b.ins().splat(types::F32X4, one);
        let mut scalars = HashMap::new();
        for &v in &self.g.inputs {
            let Type::Scalar(e) = self.f.ty(v).clone() else {
                continue;
            };
            let x = self.inputs[&v];
            let lanes = match e {
                Elem::Ptr(_) => Lanes::Ptr { base: x, stride: 0 },
                Elem::Num(d) if !lane_dtype(d) && !half_dtype(d) => continue,
                Elem::Num(d) => {
                    let one = if half_dtype(d) {
                        let w = self.b.ins().uextend(types::I32, x);
                        self.b.ins().splat(types::I32X4, w)
                    } else if d == DType::Bool {
                        // 0/1 → 0/-1.
                        let w = self.b.ins().uextend(types::I32, x);
                        let w = self.b.ins().band_imm_s(w, 1);
                        let m = self.b.ins().ineg(w);
                        self.b.ins().splat(types::I32X4, m)
                    } else {
                        self.b.ins().splat(vec_type(d), x)
                    };
                    Lanes::Vec {
                        v: [one; MAX_REGS],
                        scalar: Some(x),
                        first: None,
                    }
                }
            };
            scalars.insert(v, lanes);
        }
        let lazy_masks = self.lazy_masks();
        self.vconsts = Some(VConsts {
            iota,
            zero_i32,
            zero_f32,
            ones_i32,
            canonical_nan,
            one_f32,
            scalars,
            lazy_masks,
        });
    }

    /// The member defining `v`, if `v` is computed in the group.
    fn member_of(&self, v: ir::Value) -> Option<&ir::InstData> {
        self.g
            .insts
            .iter()
            .map(|&i| self.f.inst(i))
            .find(|d| d.results.first() == Some(&v))
    }

    /// Whether "every lane of bool `v` is on" can be read from the group's
    /// inputs without making `v`'s lanes: a bool input, a splat of one, a
    /// broadcast of a bool block input, or `&` of such.
    fn mask_form(&self, v: ir::Value) -> bool {
        let is_bool = |v: ir::Value| self.f.ty(v).elem() == Elem::Num(DType::Bool);
        if !is_bool(v) {
            return false;
        }
        match self.member_of(v) {
            None => self.inputs.contains_key(&v) && !self.affine.contains_key(&v),
            Some(d) => match d.op {
                Op::Splat | Op::Broadcast => {
                    self.inputs.contains_key(&d.args[0])
                        && self.member_of(d.args[0]).is_none()
                        && !self.affine.contains_key(&d.args[0])
                }
                Op::Binary(BinaryOp::And) => self.mask_form(d.args[0]) && self.mask_form(d.args[1]),
                _ => false,
            },
        }
    }

    /// The members whose lanes no chunk needs: bool values with a mask
    /// form ([`Gen::mask_form`]) that are not outputs and are used only as
    /// masks of loads and stores or inside other such values.
    fn lazy_masks(&self) -> std::collections::HashSet<ir::Value> {
        let mut lazy: std::collections::HashSet<ir::Value> = self
            .g
            .insts
            .iter()
            .filter_map(|&i| self.f.inst(i).results.first().copied())
            .filter(|v| self.mask_form(*v) && !self.g.outputs.contains(v))
            .collect();
        // Drop values with another use, until nothing changes (a value
        // used by a dropped `&` is needed as lanes too).
        loop {
            let needed: Vec<ir::Value> = lazy
                .iter()
                .copied()
                .filter(|v| {
                    self.g.insts.iter().any(|&i| {
                        let d = self.f.inst(i);
                        d.args.iter().enumerate().any(|(k, a)| {
                            a == v
                                && !match d.op {
                                    Op::Load { has_mask: true, .. } => k == 1,
                                    Op::Store { has_mask: true } => k == 2,
                                    Op::Binary(BinaryOp::And) => d.results.first().is_some_and(|r| lazy.contains(r)),
                                    _ => false,
                                }
                        })
                    })
                })
                .collect();
            if needed.is_empty() {
                return lazy;
            }
            for v in needed {
                lazy.remove(&v);
            }
        }
    }

    /// An i8, nonzero when the chunk's lanes of mask `m` (a value with a
    /// mask form) are all on, read from the bytes of the group's inputs.
    fn mask_on(&mut self, c: &mut Chunk, m: ir::Value) -> Value {
        let lanes = c.regs as i64 * REG_LANES;
        match self.member_of(m).cloned() {
            Some(d) if matches!(d.op, Op::Binary(BinaryOp::And)) => {
                let a = self.mask_on(c, d.args[0]);
                let b = self.mask_on(c, d.args[1]);
                self.b.ins().band(a, b)
            }
            Some(d) if matches!(d.op, Op::Splat) => self.byte_on(self.inputs[&d.args[0]]),
            Some(d) => {
                // A broadcast: one byte when the source is constant along
                // the chunk's axis, else the chunk's run of bytes.
                let src = d.args[0];
                let idx = self.broadcast_index(src, &c.ivs.clone(), &c.space.clone());
                let addr = self.b.ins().iadd(self.inputs[&src], idx);
                if self.f.ty(src).shape().last() == Some(&1) {
                    let x = self.b.ins().uload8(types::I32, flags(), addr, 0);
                    self.byte_on(x)
                } else {
                    self.bytes_on(addr, lanes)
                }
            }
            None => match self.f.ty(m) {
                Type::Scalar(_) => self.byte_on(self.inputs[&m]),
                _ => {
                    let addr = self.b.ins().iadd(self.inputs[&m], c.lin);
                    self.bytes_on(addr, lanes)
                }
            },
        }
    }

    /// Whether bool `x` (any integer type) is on, as an i8.
    fn byte_on(&mut self, x: Value) -> Value {
        let bit = self.b.ins().band_imm_s(x, 1);
        self.b.ins().icmp_imm_s(IntCC::NotEqual, bit, 0)
    }

    /// Whether the `n` bool bytes at `addr` (n a multiple of 4, at most 16)
    /// are all on, as an i8: eight (or four) at a time.
    fn bytes_on(&mut self, addr: Value, n: i64) -> Value {
        let mut all: Option<Value> = None;
        let mut off = 0;
        while off < n {
            let (t, pattern) = if n - off >= 8 {
                (types::I64, 0x0101_0101_0101_0101_i64)
            } else {
                (types::I32, 0x0101_0101)
            };
            let w = self.b.ins().load(t, flags(), addr, off as i32);
            let bits = self.b.ins().band_imm_s(w, pattern);
            let on = self.b.ins().icmp_imm_s(IntCC::Equal, bits, pattern);
            all = Some(match all {
                Some(a) => self.b.ins().band(a, on),
                None => on,
            });
            off += if t == types::I64 { 8 } else { 4 };
        }
        all.expect("chunks have at least four lanes")
    }

    fn vc(&self) -> &VConsts {
        self.vconsts.as_ref().expect("vector_prelude runs before the loop")
    }

    /// Whether every member of this elementwise group over `space` has a
    /// vector form.
    pub(super) fn vectorizable(&self, space: &[u64]) -> bool {
        if space.last().is_none_or(|&n| regs_for(n) == 0) {
            return false;
        }
        let num = |v: ir::Value| match self.f.ty(v).elem() {
            Elem::Num(d) => Some(d),
            Elem::Ptr(_) => None,
        };
        let is_ptr = |v: ir::Value| num(v).is_none();
        let lane =
            |v: ir::Value| matches!(self.f.ty(v), Type::Scalar(_) | Type::Block(..)) && num(v).is_none_or(lane_dtype);
        let half = |v: ir::Value| num(v).is_some_and(half_dtype);
        self.g.insts.iter().all(|&i| {
            let d = self.f.inst(i);
            // f16/bf16 lanes only move: loaded, stored, handed over.
            let moves_half = |k: usize| match d.op {
                Op::Load { has_mask, .. } => k == 1 + has_mask as usize,
                Op::Store { .. } => k == 1,
                Op::Splat => true,
                _ => false,
            };
            let args_ok = d
                .args
                .iter()
                .enumerate()
                .all(|(k, v)| lane(*v) || (half(*v) && moves_half(k)));
            let results_ok = d
                .results
                .iter()
                .all(|v| lane(*v) || (half(*v) && matches!(d.op, Op::Load { .. } | Op::Splat)));
            if !(args_ok && results_ok) {
                return false;
            }
            let arg_dt = |k: usize| num(d.args[k]);
            match &d.op {
                Op::Arange { .. } => space.len() == 1,
                Op::Splat => true,
                Op::Broadcast => {
                    arg_dt(0).is_some_and(|t| word_dtype(t) || t == DType::Bool) && self.inputs.contains_key(&d.args[0])
                }
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
                Op::Load { .. } => d.results.first().and_then(|r| num(*r)).is_some_and(moved_dtype),
                Op::Store { .. } => arg_dt(1).is_some_and(moved_dtype),
                Op::Reduce { .. } => arg_dt(0).is_some_and(word_dtype),
                _ => false,
            }
        })
    }

    /// Emits one chunk starting at `ivs` (the innermost counter is the
    /// first lane's) with `regs` registers per value; in [`Mode::Checked`]
    /// any failed check jumps to `fallback`, the scalar code for the first
    /// lane. Falls through when the chunk is done; a probe's findings are
    /// returned.
    pub(super) fn vector_chunk(
        &mut self,
        mode: Mode,
        regs: usize,
        ivs: &[Value],
        strides: &[i64],
        space: &[u64],
        fallback: Block,
    ) -> Probe {
        let mut c = Chunk {
            mode,
            ok: None,
            linear: true,
            exact: HashMap::new(),
            regs,
            fallback,
            lin: self.linear(ivs, strides),
            ivs: ivs.to_vec(),
            space: space.to_vec(),
            vals: HashMap::new(),
            masks_on: Vec::new(),
            consecutive: HashMap::new(),
        };
        let members = self.g.insts.clone();
        for (idx, &i) in members.iter().enumerate() {
            let code = idx as u32 + 1;
            let d = self.f.inst(i).clone();
            if d.results.first().is_some_and(|r| self.vc().lazy_masks.contains(r)) {
                continue;
            }
            let f = self.f;
            let arg_dt = |k: usize| dtype(f.ty(d.args[k]));
            let vec = |v| Lanes::Vec {
                v,
                scalar: None,
                first: None,
            };
            let result: Option<Lanes> = match &d.op {
                Op::Arange { start, .. } => {
                    let j = self.b.ins().iadd_imm_s(ivs[0], *start);
                    if let Some(r) = d.results.first() {
                        c.exact.insert(*r, j);
                    }
                    let j = self.b.ins().ireduce(types::I32, j);
                    let splat = self.b.ins().splat(types::I32X4, j);
                    Some(Lanes::Vec {
                        v: self.map(regs, |g, q| {
                            let iota = g.iota(q);
                            g.b.ins().iadd(splat, iota)
                        }),
                        scalar: None,
                        first: Some(j),
                    })
                }
                Op::Splat => Some(self.arg(&mut c, d.args[0])),
                Op::Broadcast => Some(vec(self.broadcast_lanes(regs, d.args[0], ivs, space))),
                Op::Binary(op) => {
                    let (la, lb) = (self.arg(&mut c, d.args[0]), self.arg(&mut c, d.args[1]));
                    let (a, b) = (self.regs_of(&mut c, d.args[0]), self.regs_of(&mut c, d.args[1]));
                    let v = self.map(regs, |g, q| g.vbinary(*op, arg_dt(0), a[q], b[q]));
                    // An arange moved by a scalar is still one.
                    // Which argument is the arange, and the scalar's sign
                    // in the sum.
                    let moved = match (op, la, lb) {
                        _ if arg_dt(0) != DType::I32 => None,
                        (BinaryOp::Add, Lanes::Vec { first: Some(f), .. }, Lanes::Vec { scalar: Some(s), .. }) => {
                            Some((d.args[0], f, s, false))
                        }
                        (BinaryOp::Add, Lanes::Vec { scalar: Some(s), .. }, Lanes::Vec { first: Some(f), .. }) => {
                            Some((d.args[1], f, s, false))
                        }
                        (BinaryOp::Sub, Lanes::Vec { first: Some(f), .. }, Lanes::Vec { scalar: Some(s), .. }) => {
                            Some((d.args[0], f, s, true))
                        }
                        _ => None,
                    };
                    let first = moved.map(|(range, f, s, sub)| {
                        if let (Some(exact), Some(r)) = (c.exact.get(&range).copied(), d.results.first()) {
                            let wide = self.b.ins().sextend(types::I64, s);
                            let e = if sub {
                                self.b.ins().isub(exact, wide)
                            } else {
                                self.b.ins().iadd(exact, wide)
                            };
                            c.exact.insert(*r, e);
                        }
                        if sub {
                            self.b.ins().isub(f, s)
                        } else {
                            self.b.ins().iadd(f, s)
                        }
                    });
                    Some(Lanes::Vec { v, scalar: None, first })
                }
                Op::Cmp(op) => {
                    let (a, b) = (self.regs_of(&mut c, d.args[0]), self.regs_of(&mut c, d.args[1]));
                    let t = arg_dt(0);
                    Some(vec(self.map(regs, |g, q| {
                        if t == DType::F32 {
                            g.b.ins().fcmp(float_cc(*op), a[q], b[q])
                        } else {
                            g.b.ins().icmp(int_cc(*op, t.is_signed()), a[q], b[q])
                        }
                    })))
                }
                Op::Unary(op) => {
                    let a = self.regs_of(&mut c, d.args[0]);
                    Some(vec(self.map(regs, |g, q| g.vunary(*op, arg_dt(0), a[q]))))
                }
                Op::Cast { bitcast } => {
                    let a = self.regs_of(&mut c, d.args[0]);
                    let to = dtype(self.f.ty(d.results[0]));
                    Some(vec(self.map(regs, |g, q| {
                        if !*bitcast {
                            g.vcast(arg_dt(0), to, a[q])
                        } else if g.b.func.dfg.value_type(a[q]) == vec_type(to) {
                            a[q]
                        } else {
                            g.b.ins().bitcast(vec_type(to), le(), a[q])
                        }
                    })))
                }
                Op::Select => {
                    let cond = self.regs_of(&mut c, d.args[0]);
                    let (x, y) = (self.regs_of(&mut c, d.args[1]), self.regs_of(&mut c, d.args[2]));
                    Some(vec(self.map(regs, |g, q| g.vselect(cond[q], x[q], y[q]))))
                }
                Op::PtrAdd => {
                    let p = self.arg(&mut c, d.args[0]);
                    Some(self.vptr_add(&mut c, p, d.args[1], d.args[0], arg_dt(1)))
                }
                Op::Load { has_mask, .. } => {
                    let e = self.f.ty(d.results[0]).elem();
                    let p = self.arg(&mut c, d.args[0]);
                    if *has_mask {
                        self.all_on_or(&mut c, d.args[1]);
                    }
                    Some(match (e, p) {
                        (Elem::Num(t), Lanes::Ptr { base, stride }) if half_dtype(t) && stride == elem_bytes(e) => {
                            self.vload_halves(&mut c, base, code)
                        }
                        _ => vec(self.vload(&mut c, p, e, code)),
                    })
                }
                Op::Store { has_mask } => {
                    let e = self.f.ty(d.args[1]).elem();
                    let p = self.arg(&mut c, d.args[0]);
                    if *has_mask {
                        self.all_on_or(&mut c, d.args[2]);
                    }
                    match (self.arg(&mut c, d.args[1]), p) {
                        (Lanes::Halves { words }, Lanes::Ptr { base, stride }) if stride == elem_bytes(e) => {
                            let bytes = stride * REG_LANES * c.regs as i64;
                            let host = self.vaccess(&mut c, base, stride, bytes, code);
                            if c.mode == Mode::Probe {
                                continue;
                            }
                            for (q, w) in words.iter().enumerate().take(c.regs) {
                                self.b.ins().store(flags(), *w, host, (8 * q) as i32);
                            }
                        }
                        _ => {
                            let x = self.regs_of(&mut c, d.args[1]);
                            self.vstore(&mut c, p, e, x, code);
                        }
                    }
                    None
                }
                Op::Reduce { .. } if c.mode == Mode::Probe => None,
                Op::Reduce { op, .. } => {
                    let x = self.regs_of(&mut c, d.args[0]);
                    let in_dt = arg_dt(0);
                    for reg in x.iter().take(regs) {
                        for k in 0..REG_LANES as u8 {
                            let xk = self.b.ins().extractlane(*reg, k);
                            self.reduce_step(i, *op, in_dt, xk);
                        }
                    }
                    None
                }
                _ => None,
            };
            if let (Some(x), Some(r)) = (result, d.results.first()) {
                c.vals.insert(*r, x);
                if c.mode == Mode::Probe {
                    continue;
                }
                if let Some(out) = self.outputs.get(r).copied() {
                    let e = self.f.ty(*r).elem();
                    self.store_output(regs, out, c.lin, e, x);
                }
            }
        }
        let ok = match c.ok {
            Some(ok) => ok,
            None => self.iconst(types::I8, 1),
        };
        Probe { ok, linear: c.linear }
    }

    /// `f(gen, q)` for each register `q` of a chunk.
    fn map(&mut self, regs: usize, mut f: impl FnMut(&mut Self, usize) -> Value) -> Regs {
        let first = f(self, 0);
        let mut out = [first; MAX_REGS];
        for (q, slot) in out.iter_mut().enumerate().take(regs).skip(1) {
            *slot = f(self, q);
        }
        out
    }

    /// The chunk's lanes of `v`: computed by an earlier member, or read
    /// from the group's inputs.
    fn arg(&mut self, c: &mut Chunk, v: ir::Value) -> Lanes {
        if let Some(x) = c.vals.get(&v) {
            return *x;
        }
        let x = self.input_lanes(c, v);
        c.vals.insert(v, x);
        x
    }

    fn regs_of(&mut self, c: &mut Chunk, v: ir::Value) -> Regs {
        match self.arg(c, v) {
            Lanes::Vec { v, .. } => v,
            Lanes::Halves { words } => self.map(c.regs, |g, q| g.widen_halves(words[q])),
            Lanes::Ptr { .. } => unreachable!("vectorizable() keeps pointers to PtrAdd, Load and Store"),
        }
    }

    /// Lanes `4q .. 4q + 4` of `[0, 1, 2, …]` as i32x4 (a constant).
    fn iota_const(&mut self, q: usize) -> Value {
        let first = (q as i64 * REG_LANES) as i32;
        let bytes: Vec<u8> = (first..first + REG_LANES as i32)
            .flat_map(|k| k.to_le_bytes())
            .collect();
        let c = self.b.func.dfg.constants.insert(ConstantData::from(bytes));
        self.b.ins().vconst(types::I32X4, c)
    }

    fn iota(&self, q: usize) -> Value {
        self.vc().iota[q]
    }

    /// A zero register of type `t` (i32x4 or f32x4).
    fn zero(&self, t: types::Type) -> Value {
        if t == types::F32X4 {
            self.vc().zero_f32
        } else {
            self.vc().zero_i32
        }
    }

    fn zeros(&mut self, t: types::Type) -> Value {
        let c = self.b.func.dfg.constants.insert(ConstantData::from(vec![0u8; 16]));
        self.b.ins().vconst(t, c)
    }

    /// Continues only when `cond` (an i8) holds (see [`Mode`]).
    fn check(&mut self, c: &mut Chunk, cond: Value) {
        match c.mode {
            Mode::Checked => {
                let cont = self.b.create_block();
                self.b.ins().brif(cond, cont, &[], c.fallback, &[]);
                self.b.switch_to_block(cont);
            }
            Mode::Probe => self.span_cond(c, cond),
            Mode::Trusted => {}
        }
    }

    /// A condition that only spans need (see [`Mode::Probe`]): folded into
    /// the chunk's span flag, never branched on.
    fn span_cond(&mut self, c: &mut Chunk, cond: Value) {
        if c.mode != Mode::Trusted {
            c.ok = Some(match c.ok {
                Some(ok) => self.b.ins().band(ok, cond),
                None => cond,
            });
        }
    }

    /// For i32 lanes `v` that are an arange moved by scalars (lane k is
    /// `first + k` modulo 2^32): asks, for spans, that the exact first
    /// lane lies in `[i32::MIN, max_first]`, so that no lane wraps and the
    /// lanes move linearly along the row. Without the exact value the
    /// chunk is not linear.
    fn no_wrap_along_row(&mut self, c: &mut Chunk, v: ir::Value, max_first: i64) {
        match c.exact.get(&v).copied() {
            Some(exact) => {
                let lo = self
                    .b
                    .ins()
                    .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, exact, i32::MIN as i64);
                let hi = self.b.ins().icmp_imm_s(IntCC::SignedLessThanOrEqual, exact, max_first);
                let both = self.b.ins().band(lo, hi);
                self.span_cond(c, both);
            }
            None => c.linear = false,
        }
    }

    /// A check whose condition does not move linearly along the row.
    fn nonlinear(&mut self, c: &mut Chunk, cond: Value) {
        c.linear = false;
        self.check(c, cond);
    }

    /// Continues only when every lane of mask `m` is on (checked once per
    /// chunk and mask).
    fn all_on_or(&mut self, c: &mut Chunk, m: ir::Value) {
        if c.masks_on.contains(&m) {
            return;
        }
        if !c.vals.contains_key(&m)
            && (self.vc().lazy_masks.contains(&m) || (self.member_of(m).is_none() && self.mask_form(m)))
        {
            let on = self.mask_on(c, m);
            self.nonlinear(c, on);
            c.masks_on.push(m);
            return;
        }
        if let Some(on) = self.range_below(c, m) {
            self.check(c, on);
            c.masks_on.push(m);
            return;
        }
        let regs = self.regs_of(c, m);
        let mut both = regs[0];
        for r in regs.iter().take(c.regs).skip(1) {
            both = self.b.ins().band(both, *r);
        }
        let all = self.b.ins().vall_true(both);
        self.nonlinear(c, all);
        c.masks_on.push(m);
    }

    /// For a mask `r < s` or `r <= s` of i32 lanes where `r` is an arange
    /// moved by scalars (lane k is `first + k`) and `s` is one scalar: an
    /// i8 that is nonzero when every lane of the chunk is on, from the
    /// last lane alone (`first + lanes - 1` must not wrap; if it would, the
    /// answer is "no" and the lanes are left to the scalar code).
    fn range_below(&mut self, c: &mut Chunk, m: ir::Value) -> Option<Value> {
        let d = self.member_of(m)?.clone();
        let Op::Cmp(op @ (CmpOp::Lt | CmpOp::Le)) = d.op else {
            return None;
        };
        if dtype(self.f.ty(d.args[0])) != DType::I32 {
            return None;
        }
        let (
            Some(Lanes::Vec { first: Some(first), .. }),
            Some(Lanes::Vec {
                scalar: Some(bound), ..
            }),
        ) = (c.vals.get(&d.args[0]).copied(), c.vals.get(&d.args[1]).copied())
        else {
            return None;
        };
        let lanes = c.regs as i64 * REG_LANES;
        let bound = self.b.ins().sextend(types::I64, bound);
        self.no_wrap_along_row(c, d.args[0], i32::MAX as i64 - (lanes - 1));
        let first = self.b.ins().sextend(types::I64, first);
        let last = self.b.ins().iadd_imm_s(first, lanes - 1);
        let no_wrap = self
            .b
            .ins()
            .icmp_imm_s(IntCC::SignedLessThanOrEqual, last, i32::MAX as i64);
        let cc = if op == CmpOp::Lt {
            IntCC::SignedLessThan
        } else {
            IntCC::SignedLessThanOrEqual
        };
        let below = self.b.ins().icmp(cc, last, bound);
        Some(self.b.ins().band(no_wrap, below))
    }

    /// The lanes of a value defined outside the group: a scalar input as a
    /// splat, a block input read from its buffer at the chunk's index.
    fn input_lanes(&mut self, c: &mut Chunk, v: ir::Value) -> Lanes {
        let x = self.inputs[&v];
        let regs = c.regs;
        if self.affine.contains_key(&v) {
            return match self.f.ty(v).elem() {
                Elem::Ptr(t) => {
                    // Consecutive when the innermost stride is one element.
                    let size = t.size_bytes() as i64;
                    let step = *self.affine[&v].1.last().expect("vector groups have rank >= 1");
                    let ok = self.b.ins().icmp_imm_s(IntCC::Equal, step, size);
                    self.check(c, ok);
                    Lanes::Ptr {
                        base: self.affine_value(v, &c.ivs),
                        stride: size,
                    }
                }
                Elem::Num(_) => Lanes::Vec {
                    v: self.affine_words(regs, v, &c.ivs),
                    scalar: None,
                    first: None,
                },
            };
        }
        match self.f.ty(v).clone() {
            Type::Scalar(_) => self.vc().scalars[&v],
            Type::Block(e, _) => {
                let addr = self.element_addr(x, c.lin, elem_bytes(e));
                match e {
                    Elem::Ptr(t) => {
                        // Consecutive pointers only: p[k] = p[0] + k * size,
                        // compared two lanes at a time.
                        let size = t.size_bytes() as i64;
                        let p0 = self.b.ins().load(types::I64, flags(), addr, 0);
                        let base = self.b.ins().splat(types::I64X2, p0);
                        let lanes = regs as i64 * REG_LANES;
                        let mut all: Option<Value> = None;
                        for pair in 0..lanes / 2 {
                            let bytes: Vec<u8> = [2 * pair, 2 * pair + 1]
                                .iter()
                                .flat_map(|k| (k * size).to_le_bytes())
                                .collect();
                            let steps = self.b.func.dfg.constants.insert(ConstantData::from(bytes));
                            let steps = self.b.ins().vconst(types::I64X2, steps);
                            let want = self.b.ins().iadd(base, steps);
                            let got = self.b.ins().load(types::I64X2, flags(), addr, (16 * pair) as i32);
                            let eq = self.b.ins().icmp(IntCC::Equal, got, want);
                            let ok = self.b.ins().vall_true(eq);
                            all = Some(match all {
                                Some(a) => self.b.ins().band(a, ok),
                                None => ok,
                            });
                        }
                        // p0 comes from memory: not linear along the row.
                        c.linear = false;
                        if let Some(all) = all {
                            self.check(c, all);
                        }
                        Lanes::Ptr { base: p0, stride: size }
                    }
                    Elem::Num(DType::Bool) => Lanes::Vec {
                        v: self.masks_from_bytes(regs, addr),
                        scalar: None,
                        first: None,
                    },
                    Elem::Num(d) if half_dtype(d) => Lanes::Vec {
                        v: self.map(regs, |g, q| g.load_halves(addr, 8 * q as i32)),
                        scalar: None,
                        first: None,
                    },
                    Elem::Num(d) => Lanes::Vec {
                        v: self.map(regs, |g, q| g.b.ins().load(vec_type(d), flags(), addr, (16 * q) as i32)),
                        scalar: None,
                        first: None,
                    },
                }
            }
            Type::Future(..) => unreachable!("vectorizable() admits scalars and blocks only"),
        }
    }

    /// The lanes of an i32/u32 affine input from `ivs` on: the first
    /// lane's value plus k times the innermost stride (both truncated to
    /// 32 bits, as the lanes are).
    fn affine_words(&mut self, regs: usize, v: ir::Value, ivs: &[Value]) -> Regs {
        let first = self.affine_value(v, ivs);
        let step = *self.affine[&v].1.last().expect("vector groups have rank >= 1");
        let first = self.b.ins().ireduce(types::I32, first);
        let step = self.b.ins().ireduce(types::I32, step);
        let first = self.b.ins().splat(types::I32X4, first);
        let step = self.b.ins().splat(types::I32X4, step);
        self.map(regs, |g, q| {
            let iota = g.iota(q);
            let k = g.b.ins().imul(iota, step);
            g.b.ins().iadd(first, k)
        })
    }

    /// Bools stored as 0/1 bytes at `addr`, four a register, as masks.
    fn masks_from_bytes(&mut self, regs: usize, addr: Value) -> Regs {
        let z = self.zero(types::I32X4);
        self.map(regs, |g, q| {
            let w = g.b.ins().load(types::I32, flags(), addr, (4 * q) as i32);
            let v = g.b.ins().scalar_to_vector(types::I32X4, w);
            let v = g.b.ins().bitcast(types::I8X16, le(), v);
            let v = g.b.ins().swiden_low(v);
            let v = g.b.ins().swiden_low(v);
            g.b.ins().icmp(IntCC::NotEqual, v, z)
        })
    }

    /// Four 16-bit elements at `addr + offset`, zero-extended into i32x4.
    fn load_halves(&mut self, addr: Value, offset: i32) -> Value {
        let w = self.b.ins().load(types::I64, flags(), addr, offset);
        self.widen_halves(w)
    }

    /// Four 16-bit elements packed in an i64, zero-extended into i32x4.
    fn widen_halves(&mut self, w: Value) -> Value {
        let v = self.b.ins().scalar_to_vector(types::I64X2, w);
        let v = self.b.ins().bitcast(types::I16X8, le(), v);
        self.b.ins().uwiden_low(v)
    }

    /// Writes the low 16 bits of each lane of `x` at `addr + offset`.
    fn store_halves(&mut self, x: Value, addr: Value, offset: i32) {
        // Lanes hold 0..=0xffff, so the saturating narrow is exact.
        let v = self.b.ins().unarrow(x, x);
        let v = self.b.ins().bitcast(types::I64X2, le(), v);
        let w = self.b.ins().extractlane(v, 0);
        self.b.ins().store(flags(), w, addr, offset);
    }

    fn element_addr(&mut self, base: Value, index: Value, size: i64) -> Value {
        let off = self.b.ins().imul_imm_s(index, size);
        self.b.ins().iadd(base, off)
    }

    /// Writes the chunk's lanes of an output block at linear index `lin`.
    fn store_output(&mut self, regs: usize, out: Value, lin: Value, e: Elem, x: Lanes) {
        let addr = self.element_addr(out, lin, elem_bytes(e));
        match (x, e) {
            (Lanes::Halves { words }, _) => {
                for (q, w) in words.iter().enumerate().take(regs) {
                    self.b.ins().store(flags(), *w, addr, (8 * q) as i32);
                }
            }
            (Lanes::Ptr { base, stride }, _) => {
                for k in 0..regs as i64 * REG_LANES {
                    let p = self.b.ins().iadd_imm_s(base, k * stride);
                    self.b.ins().store(flags(), p, addr, (8 * k) as i32);
                }
            }
            (Lanes::Vec { v, .. }, Elem::Num(DType::Bool)) => {
                // 0/-1 words → four 0/1 bytes a register.
                let ones = self.vc().ones_i32;
                for (q, reg) in v.iter().enumerate().take(regs) {
                    let w = self.b.ins().band(*reg, ones);
                    let h = self.b.ins().snarrow(w, w);
                    let b = self.b.ins().snarrow(h, h);
                    let b = self.b.ins().bitcast(types::I32X4, le(), b);
                    let word = self.b.ins().extractlane(b, 0);
                    self.b.ins().store(flags(), word, addr, (4 * q) as i32);
                }
            }
            (Lanes::Vec { v, .. }, Elem::Num(d)) if half_dtype(d) => {
                for (q, reg) in v.iter().enumerate().take(regs) {
                    self.store_halves(*reg, addr, (8 * q) as i32);
                }
            }
            (Lanes::Vec { v, .. }, _) => {
                for (q, reg) in v.iter().enumerate().take(regs) {
                    self.b.ins().store(flags(), *reg, addr, (16 * q) as i32);
                }
            }
        }
    }

    /// A broadcast source read at the lanes' coordinates: one element
    /// splat when the source is constant along the innermost axis,
    /// consecutive elements otherwise.
    fn broadcast_lanes(&mut self, regs: usize, src: ir::Value, ivs: &[Value], space: &[u64]) -> Regs {
        if self.affine.contains_key(&src) {
            // Extent-1 axes of a formula have stride 0.
            return self.affine_words(regs, src, ivs);
        }
        let st = self.f.ty(src).clone();
        let d = dtype(&st);
        let src_shape = st.shape().to_vec();
        let idx = self.broadcast_index(src, ivs, space);
        let base = self.inputs[&src];
        let addr = self.element_addr(base, idx, d.size_bytes() as i64);
        let inner = ivs.len() - 1;
        match (src_shape[inner] == 1, d) {
            (true, DType::Bool) => {
                let x = self.b.ins().uload8(types::I32, flags(), addr, 0);
                let x = self.b.ins().band_imm_s(x, 1);
                let m = self.b.ins().ineg(x);
                [self.b.ins().splat(types::I32X4, m); MAX_REGS]
            }
            (true, _) => {
                let x = self.b.ins().load(cl_type(Elem::Num(d)), flags(), addr, 0);
                [self.b.ins().splat(vec_type(d), x); MAX_REGS]
            }
            (false, DType::Bool) => self.masks_from_bytes(regs, addr),
            (false, _) => self.map(regs, |g, q| g.b.ins().load(vec_type(d), flags(), addr, (16 * q) as i32)),
        }
    }

    /// `bitselect` for masks over any register type.
    pub(super) fn vselect(&mut self, mask: Value, x: Value, y: Value) -> Value {
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
        let c = self.vc().canonical_nan;
        self.vselect(nan, c, x)
    }

    fn vbinary(&mut self, op: BinaryOp, d: DType, a: Value, b: Value) -> Value {
        if d == DType::F32 {
            let r = match op {
                BinaryOp::Add => self.b.ins().fadd(a, b),
                BinaryOp::Sub => self.b.ins().fsub(a, b),
                BinaryOp::Mul => self.b.ins().fmul(a, b),
                BinaryOp::Div => self.b.ins().fdiv(a, b),
                BinaryOp::Max => self.fmaxnum(a, b, true),
                _ => self.fmaxnum(a, b, false),
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
                    let one = self.vc().one_f32;
                    self.b.ins().fdiv(one, s)
                }
                UnaryOp::Floor => self.b.ins().floor(a),
                UnaryOp::Ceil => self.b.ins().ceil(a),
                other => {
                    // The shared Rust definition, once per lane.
                    let f = self.h.math[transcendental_code(other).unwrap_or(0) as usize];
                    let mut v = a;
                    for k in 0..REG_LANES as u8 {
                        let x = self.b.ins().extractlane(a, k);
                        let r = self.call1(f, &[x]);
                        v = self.b.ins().insertlane(v, r, k);
                    }
                    v
                }
            };
            return self.vcanon(r);
        }
        let z = self.zero(types::I32X4);
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
        let z = self.zero(vec_type(from));
        let bool_to_int = |gen: &mut Self| {
            let ones = gen.vc().ones_i32;
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
    /// must count up by one per lane without wrapping (else the fallback;
    /// checked once per chunk and offset), which adds one element to the
    /// stride.
    fn vptr_add(&mut self, c: &mut Chunk, p: Lanes, offset: ir::Value, ptr: ir::Value, od: DType) -> Lanes {
        let size = match self.f.ty(ptr).elem() {
            Elem::Ptr(t) => t.size_bytes() as i64,
            Elem::Num(_) => 1,
        };
        let Lanes::Ptr { base, stride } = p else {
            unreachable!("vectorizable() admits pointer first operands only")
        };
        let Lanes::Vec {
            v,
            scalar,
            first: known,
        } = self.arg(c, offset)
        else {
            unreachable!("offsets are integer lanes")
        };
        let (first, stride) = match scalar {
            Some(s) => (s, stride),
            None => {
                let first = match c.consecutive.get(&offset) {
                    Some(first) => *first,
                    None => {
                        // Lanes first + k (mod 2^32): known for an arange
                        // moved by scalars, compared otherwise.
                        let (first, mut ok) = match known {
                            Some(f) => (f, None),
                            None => (self.b.ins().extractlane(v[0], 0), None),
                        };
                        if known.is_none() {
                            c.linear = false;
                            let splat = self.b.ins().splat(types::I32X4, first);
                            let mut diffs = None;
                            for (q, reg) in v.iter().enumerate().take(c.regs) {
                                let diff = self.b.ins().isub(*reg, splat);
                                let iota = self.iota(q);
                                let steps = self.b.ins().icmp(IntCC::Equal, diff, iota);
                                diffs = Some(match diffs {
                                    Some(a) => self.b.ins().band(a, steps),
                                    None => steps,
                                });
                            }
                            ok = diffs.map(|d| self.b.ins().vall_true(d));
                        }
                        // The last lane must not wrap past the type's maximum.
                        let lanes = c.regs as i64 * REG_LANES;
                        let limit = if od.is_signed() {
                            i32::MAX as i64
                        } else {
                            u32::MAX as i64
                        } - (lanes - 1);
                        let limit_value = limit;
                        let limit = self.iconst(types::I32, limit);
                        let cc = if od.is_signed() {
                            IntCC::SignedLessThanOrEqual
                        } else {
                            IntCC::UnsignedLessThanOrEqual
                        };
                        let room = self.b.ins().icmp(cc, first, limit);
                        if od.is_signed() {
                            self.no_wrap_along_row(c, offset, limit_value);
                        } else {
                            c.linear = false;
                        }
                        let all = match ok {
                            Some(a) => self.b.ins().band(a, room),
                            None => room,
                        };
                        self.check(c, all);
                        c.consecutive.insert(offset, first);
                        first
                    }
                };
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
    /// segment cache. When they are not inside the cached segment the
    /// chunk falls back: the scalar code for its first element looks the
    /// segment up (and caches it for the next chunk) or reports the fault.
    /// No call here, so no register is spilled around one.
    fn vaccess(&mut self, c: &mut Chunk, va: Value, elem: i64, bytes: i64, code: u32) -> Value {
        // The cache's limit is for one element: `len - elem + 1`.
        let [seg_lo, seg_limit, seg_base] = self.caches[&code];
        let lo = self.b.use_var(seg_lo);
        let limit = self.b.use_var(seg_limit);
        let off = self.b.ins().isub(va, lo);
        let first_in = self.b.ins().icmp(IntCC::UnsignedLessThan, off, limit);
        let last = self.b.ins().iadd_imm_s(off, bytes - elem);
        let last_in = self.b.ins().icmp(IntCC::UnsignedLessThan, last, limit);
        let ok = self.b.ins().band(first_in, last_in);
        self.check(c, ok);
        let base = self.b.use_var(seg_base);
        self.b.ins().iadd(base, off)
    }

    /// The chunk's elements at pointer lanes `p`: one access when they are
    /// consecutive, one element splat when they are all the same address.
    fn vload(&mut self, c: &mut Chunk, p: Lanes, e: Elem, code: u32) -> Regs {
        let Lanes::Ptr { base, stride } = p else {
            unreachable!("load pointers are pointer lanes")
        };
        let size = elem_bytes(e);
        let d = dtype(&Type::Scalar(e));
        if stride == 0 {
            let host = self.vaccess(c, base, size, size, code);
            if c.mode == Mode::Probe {
                return [self.zero(vec_type(d)); MAX_REGS];
            }
            let x = if half_dtype(d) {
                self.b.ins().uload16(types::I32, flags(), host, 0)
            } else {
                self.b.ins().load(cl_type(e), flags(), host, 0)
            };
            return [self.b.ins().splat(vec_type(d), x); MAX_REGS];
        }
        if stride != size {
            return [self.give_up(c, vec_type(d)); MAX_REGS];
        }
        let bytes = size * REG_LANES * c.regs as i64;
        let host = self.vaccess(c, base, size, bytes, code);
        if c.mode == Mode::Probe {
            return [self.zero(vec_type(d)); MAX_REGS];
        }
        self.map(c.regs, |g, q| {
            if half_dtype(d) {
                g.load_halves(host, 8 * q as i32)
            } else {
                g.b.ins().load(vec_type(d), flags(), host, (16 * q) as i32)
            }
        })
    }

    /// The chunk's f16/bf16 elements from `base` on (consecutive), as
    /// they are in memory.
    fn vload_halves(&mut self, c: &mut Chunk, base: Value, code: u32) -> Lanes {
        let bytes = 2 * REG_LANES * c.regs as i64;
        let host = self.vaccess(c, base, 2, bytes, code);
        if c.mode == Mode::Probe {
            let zero = self.iconst(types::I64, 0);
            return Lanes::Halves {
                words: [zero; MAX_REGS],
            };
        }
        Lanes::Halves {
            words: self.map(c.regs, |g, q| g.b.ins().load(types::I64, flags(), host, (8 * q) as i32)),
        }
    }

    fn vstore(&mut self, c: &mut Chunk, p: Lanes, e: Elem, x: Regs, code: u32) {
        let Lanes::Ptr { base, stride } = p else {
            unreachable!("store pointers are pointer lanes")
        };
        let size = elem_bytes(e);
        if stride != size {
            let t = self.b.func.dfg.value_type(x[0]);
            self.give_up(c, t);
            return;
        }
        let bytes = size * REG_LANES * c.regs as i64;
        let host = self.vaccess(c, base, size, bytes, code);
        if c.mode == Mode::Probe {
            return;
        }
        let half = matches!(e, Elem::Num(d) if half_dtype(d));
        for (q, reg) in x.iter().enumerate().take(c.regs) {
            if half {
                self.store_halves(*reg, host, (8 * q) as i32);
            } else {
                self.b.ins().store(flags(), *reg, host, (16 * q) as i32);
            }
        }
    }

    /// A chunk whose pointers are not consecutive: always the scalar path.
    /// Returns a placeholder of type `t` for the unreachable rest.
    fn give_up(&mut self, c: &mut Chunk, t: types::Type) -> Value {
        c.linear = false;
        if c.mode == Mode::Checked {
            self.b.ins().jump(c.fallback, &[]);
            let dead = self.b.create_block();
            self.b.switch_to_block(dead);
        } else {
            let no = self.iconst(types::I8, 0);
            self.check(c, no);
        }
        self.zero(t)
    }
}

/// How a chunk's code treats what makes its vector form valid.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Mode {
    /// Each check branches to the scalar code for the chunk's first
    /// element when it fails.
    Checked,
    /// No memory access, no output, no reduction: the chunk's checks are
    /// only folded into its span flag.
    ///
    /// In this mode and in `Checked`, a chunk notes whether every check
    /// is *linear*: a condition on values that move linearly with the
    /// chunk's position along the row (masks `arange + s < n`,
    /// consecutive pointers from formulas and aranges, segment bounds of
    /// such pointers), so that holding at two chunks of a row means
    /// holding at every chunk between them. The span flag also asks that
    /// aranges moved by scalars do not wrap (which would make them
    /// non-linear).
    Probe,
    /// Checks are known to hold (a probe of the span's first and last
    /// chunks passed): straight-line vector code.
    Trusted,
}

/// What a chunk found out for spans (see [`Mode::Probe`]).
pub(super) struct Probe {
    /// Nonzero i8 when the span conditions hold, and in a probe every
    /// check too.
    pub ok: Value,
    /// Every check is linear.
    pub linear: bool,
}

/// What one chunk's code has computed and checked so far.
struct Chunk {
    mode: Mode,
    /// The span flag: the conditions only spans need, and in a probe the
    /// checks too; and whether every check so far is linear.
    ok: Option<Value>,
    linear: bool,
    /// Exact (i64) first lanes of values whose lanes are an arange moved
    /// by scalars (`Lanes::Vec::first` is that modulo 2^32).
    exact: HashMap<ir::Value, Value>,
    regs: usize,
    /// The scalar code for the chunk's first element.
    fallback: Block,
    /// The first lane's row-major index.
    lin: Value,
    /// The first lane's coordinates, and the group's space.
    ivs: Vec<Value>,
    space: Vec<u64>,
    vals: HashMap<ir::Value, Lanes>,
    /// Masks already checked all on.
    masks_on: Vec<ir::Value>,
    /// Offsets already checked consecutive: their first lane.
    consecutive: HashMap<ir::Value, Value>,
}
