//! Affine blocks: integer and pointer blocks kept as a formula instead of
//! their elements.
//!
//! Pointer blocks in kernels are nearly always `base + i·s_i + j·s_j`: an
//! `arange` scaled, shifted and broadcast, added to a pointer, then moved
//! by a scalar each loop iteration. Stored element by element a 64×64
//! pointer block is 32 KiB written, read back and scanned by every load
//! through it; as a formula it is a few words. The JIT data path
//! evaluates groups made only of such operations symbolically
//! ([`eval_group`]) and hands compiled code, the simulator's address
//! checks and `memcpy` fast paths the formula; anything else gets the
//! elements ([`Affine::materialize`]), so an affine block behaves exactly
//! like the block it stands for.
//!
//! Exactness. For integer blocks the formula is the *exact* integer
//! value `E(idx) = base + Σ idx_k·stride_k` (checked i64 arithmetic: any
//! overflow abandons the symbolic form) and the lane is `E` truncated to
//! the dtype, as lane-wise wrapping arithmetic gives: truncation commutes
//! with `+ − ×`. `ptr_add` sign- or zero-extends its offsets, which does
//! not commute with truncation, so it stays symbolic only when every lane's
//! `E` fits the offset dtype. Pointer formulas are taken modulo 2^64, like
//! the addresses they describe.
//!
//! Masks. A bool block made by comparing such blocks and scalars, and by
//! `&` of those, is kept as a [`Mask`]: the conjunction of conditions
//! `E(idx) op 0`, `E` the exact difference of the two sides. A comparison
//! is symbolic only when every lane of both sides is its exact value (no
//! lane wraps in its dtype), so comparing exact values is comparing the
//! lanes. A mask whose conditions each depend on one axis is a box, whose
//! active lanes (count, first and last) are found without visiting them.

use super::elem::{self, Bits};
use super::{Group, RtValue, Tensor};
use crate::ir::{BinaryOp, CmpOp, Function, Op, Type};
use crate::sema::types::{DType, Elem};
use smallvec::SmallVec;
use std::rc::Rc;

/// Up to four axes inline (kernels' blocks have one to three).
type Axes<T> = SmallVec<[T; 4]>;

/// A block whose element at index `idx` is `base + Σ idx_k·strides[k]`,
/// truncated to `elem` (see the module doc). Axes of extent 1 have stride
/// 0, so the same formula reads the block broadcast.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Affine {
    pub elem: Elem,
    pub shape: Axes<u64>,
    /// `[base, stride_0, stride_1, …]`: the layout compiled code reads.
    pub words: SmallVec<[i64; 5]>,
}

impl Affine {
    fn new(elem: Elem, shape: &[u64], base: i64, strides: &[i64]) -> Affine {
        // Built in place: this runs for every formula of every address
        // computation the simulator makes.
        let mut words: SmallVec<[i64; 5]> = SmallVec::with_capacity(shape.len() + 1);
        words.push(base);
        for (&n, &s) in shape.iter().zip(strides) {
            words.push(if n == 1 { 0 } else { s });
        }
        Affine {
            elem,
            shape: SmallVec::from_slice(shape),
            words,
        }
    }

    /// The same formula of `elem` elements with base `base`: what
    /// [`Self::new`] makes of this one's shape and strides, copied as they
    /// are (`new` has already zeroed the strides of extent-1 axes).
    fn moved_to(&self, elem: Elem, base: i64) -> Affine {
        let mut words = SmallVec::from_slice(&self.words);
        words[0] = base;
        Affine {
            elem,
            shape: SmallVec::from_slice(&self.shape),
            words,
        }
    }

    pub fn base(&self) -> i64 {
        self.words[0]
    }

    pub fn strides(&self) -> &[i64] {
        &self.words[1..]
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product::<u64>() as usize
    }

    /// The element at row-major position `k`, as stored bits.
    pub fn get_bits(&self, k: usize) -> Bits {
        let mut rest = k as u64;
        let mut v = self.base();
        for (&n, &s) in self.shape.iter().zip(self.strides()).rev() {
            v = v.wrapping_add(((rest % n.max(1)) as i64).wrapping_mul(s));
            rest /= n.max(1);
        }
        self.truncate(v)
    }

    fn truncate(&self, v: i64) -> Bits {
        match self.elem {
            Elem::Ptr(_) => v as u64,
            Elem::Num(d) => elem::from_i64(d, v),
        }
    }

    /// Calls `f` with every element's bits in row-major order.
    pub fn for_each(&self, mut f: impl FnMut(Bits)) {
        if self.numel() == 0 {
            return;
        }
        let (Some(&inner), Some(&step)) = (self.shape.last(), self.strides().last()) else {
            f(self.truncate(self.base()));
            return;
        };
        let outer = &self.shape[..self.shape.len() - 1];
        let mut idx = vec![0u64; outer.len()];
        loop {
            let mut row = self.base();
            for (k, &i) in idx.iter().enumerate() {
                row = row.wrapping_add((i as i64).wrapping_mul(self.strides()[k]));
            }
            for j in 0..inner {
                f(self.truncate(row.wrapping_add((j as i64).wrapping_mul(step))));
            }
            // The next row index, last axis fastest.
            let mut k = outer.len();
            loop {
                if k == 0 {
                    return;
                }
                k -= 1;
                idx[k] += 1;
                if idx[k] < outer[k] {
                    break;
                }
                idx[k] = 0;
            }
        }
    }

    /// The elements, stored.
    pub fn materialize(&self) -> Tensor {
        let shape: Axes<usize> = self.shape.iter().map(|&d| d as usize).collect();
        let mut t = Tensor::zeros(self.elem, if shape.is_empty() { &[1] } else { &shape });
        let mut k = 0;
        self.for_each(|b| {
            t.set_bits(k, b);
            k += 1;
        });
        t
    }

    /// The smallest and largest `E(idx)`, exactly (for pointers, the
    /// addresses before any wrap past 2^64).
    pub fn range(&self) -> (i128, i128) {
        let base = match self.elem {
            Elem::Ptr(_) => self.base() as u64 as i128,
            Elem::Num(_) => self.base() as i128,
        };
        exact_range(base, self.strides(), &self.shape)
    }

    /// The same elements under `shape`, when that only adds or removes
    /// axes of extent 1 (other reshapes mix axes: no single formula).
    pub fn reshape(&self, shape: &[u64]) -> Option<Affine> {
        let mut kept = self.shape.iter().zip(self.strides()).filter(|(n, _)| **n != 1);
        let mut strides: Axes<i64> = SmallVec::new();
        for &n in shape {
            if n == 1 {
                strides.push(0);
            } else {
                let (&m, &s) = kept.next()?;
                if m != n {
                    return None;
                }
                strides.push(s);
            }
        }
        if kept.next().is_some() {
            return None;
        }
        Some(Affine::new(self.elem, shape, self.base(), &strides))
    }

    /// Whether, as pointers to `size`-byte elements, the lanes are
    /// consecutive in row-major order (lane k at `base + k·size`).
    pub fn is_consecutive(&self, size: i64) -> bool {
        let mut want = size;
        for (&n, &s) in self.shape.iter().zip(self.strides()).rev() {
            if n != 1 && s != want {
                return false;
            }
            want = want.wrapping_mul(n as i64);
        }
        true
    }
}

/// The smallest and largest `base + Σ idx_k·strides[k]` over `shape`.
fn exact_range(base: i128, strides: &[i64], shape: &[u64]) -> (i128, i128) {
    let (mut lo, mut hi) = (base, base);
    for (&n, &s) in shape.iter().zip(strides) {
        let span = (n.saturating_sub(1)) as i128 * s as i128;
        lo += span.min(0);
        hi += span.max(0);
    }
    (lo, hi)
}

/// A bool block whose lane at `idx` is on when every condition
/// `E(idx) op 0` holds, `E` an exact integer formula (elem `i64`, never
/// past i64) of the mask's shape. No conditions: every lane on.
#[derive(Clone, Debug)]
pub struct Mask {
    shape: Axes<u64>,
    conds: SmallVec<[(Affine, CmpOp); 2]>,
    /// `lanes_on()`, once asked (a mask is read by the copy fast path and
    /// by the simulator's lane scan, and reused while its inputs stay).
    on: std::cell::OnceCell<Option<LanesOn>>,
}

impl PartialEq for Mask {
    fn eq(&self, other: &Mask) -> bool {
        self.shape == other.shape && self.conds == other.conds
    }
}

impl Eq for Mask {}

/// The active lanes of a mask in row-major order: how many, and the
/// positions of the first and the last (both 0 when none is on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LanesOn {
    pub count: u64,
    pub first: u64,
    pub last: u64,
}

fn holds(op: CmpOp, v: i128) -> bool {
    match op {
        CmpOp::Eq => v == 0,
        CmpOp::Ne => v != 0,
        CmpOp::Lt => v < 0,
        CmpOp::Le => v <= 0,
        CmpOp::Gt => v > 0,
        CmpOp::Ge => v >= 0,
    }
}

/// The `i` in `[0, n)` where `b + s·i op 0` holds, when they form one
/// interval `[lo, hi)` (empty as `lo == hi`); `None` when they do not
/// (`!=` whose one false `i` is inside). Closed forms, exact (in i128
/// where i64 could overflow).
fn interval(b: i64, s: i64, n: u64, op: CmpOp) -> Option<(u64, u64)> {
    let at = |i: u64| holds(op, b as i128 + s as i128 * i as i128);
    if n == 0 {
        return Some((0, 0));
    }
    if s == 0 {
        return Some(if at(0) { (0, n) } else { (0, 0) });
    }
    match op {
        CmpOp::Eq | CmpOp::Ne => {
            // The one i with b + s·i = 0, if it is an integer in range.
            let (b, s) = (b as i128, s as i128);
            let root = (b % s == 0).then(|| -(b / s)).filter(|&i| i >= 0 && (i as u64) < n);
            match (op, root) {
                (CmpOp::Eq, Some(i)) => Some((i as u64, i as u64 + 1)),
                (CmpOp::Eq, None) => Some((0, 0)),
                (_, None) => Some((0, n)),
                (_, Some(0)) => Some((1, n)),
                (_, Some(i)) if i as u64 == n - 1 => Some((0, n - 1)),
                _ => None,
            }
        }
        CmpOp::Lt => Some(below_zero(b as i128, s as i128, n)),
        // b + s·i <= 0  <=>  (b - 1) + s·i < 0, and so on.
        CmpOp::Le => Some(below_zero(b as i128 - 1, s as i128, n)),
        CmpOp::Gt => Some(below_zero(-(b as i128), -(s as i128), n)),
        CmpOp::Ge => Some(below_zero(-(b as i128) - 1, -(s as i128), n)),
    }
}

/// The `i` in `[0, n)` with `b + s·i < 0` (`s != 0`): a prefix when `s`
/// is positive, a suffix when it is negative.
fn below_zero(b: i128, s: i128, n: u64) -> (u64, u64) {
    const SMALL: i128 = 1 << 62;
    if b.abs() < SMALL && s.abs() < SMALL {
        // The same in i64, whose division is a machine instruction (i128's
        // is a library call).
        let (b, s) = (b as i64, s as i64);
        let clamp = |i: i64| i.clamp(0, n.min(i64::MAX as u64) as i64) as u64;
        return if s > 0 {
            (0, clamp((-b).div_euclid(s) + ((-b).rem_euclid(s) != 0) as i64))
        } else {
            (clamp(b.div_euclid(-s) + 1), n)
        };
    }
    let clamp = |i: i128| i.clamp(0, n as i128) as u64;
    if s > 0 {
        // i < -b / s, i.e. i < ceil(-b / s).
        let hi = (-b).div_euclid(s) + ((-b).rem_euclid(s) != 0) as i128;
        (0, clamp(hi))
    } else {
        // -s·i > b, i.e. i > b / -s, i.e. i >= floor(b / -s) + 1.
        (clamp(b.div_euclid(-s) + 1), n)
    }
}

impl Mask {
    fn new(shape: &[u64], conds: SmallVec<[(Affine, CmpOp); 2]>) -> Mask {
        Mask {
            shape: SmallVec::from_slice(shape),
            conds,
            on: std::cell::OnceCell::new(),
        }
    }

    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// Every lane of `shape` on (`on`) or off.
    fn constant(shape: &[u64], on: bool) -> Mask {
        let mut conds = SmallVec::new();
        if !on {
            // 1 == 0 never holds.
            let zeros: Axes<i64> = smallvec::smallvec![0; shape.len()];
            conds.push((Affine::new(Elem::Num(DType::I64), shape, 1, &zeros), CmpOp::Eq));
        }
        Mask::new(shape, conds)
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product::<u64>() as usize
    }

    /// Lane `k` (row-major) as bool bits.
    pub fn get_bits(&self, k: usize) -> Bits {
        self.conds
            .iter()
            .all(|(e, op)| holds(*op, e.get_bits(k) as i64 as i128)) as Bits
    }

    /// The box the mask is, when each condition depends on one axis at
    /// most: per axis the on interval `[lo, hi)`.
    pub fn boxed(&self) -> Option<Axes<(u64, u64)>> {
        if self.shape.is_empty() {
            return None;
        }
        let mut b: Axes<(u64, u64)> = self.shape.iter().map(|&n| (0, n)).collect();
        for (e, op) in &self.conds {
            let mut axes = e.strides().iter().enumerate().filter(|(_, s)| **s != 0);
            let (axis, stride) = match (axes.next(), axes.next()) {
                (None, _) => (0, 0),
                (Some((k, s)), None) => (k, *s),
                _ => return None,
            };
            let (lo, hi) = interval(e.base(), stride, self.shape[axis], *op)?;
            let cur = &mut b[axis];
            *cur = (cur.0.max(lo), cur.1.min(hi).max(cur.0.max(lo)));
        }
        Some(b)
    }

    /// The active lanes of a box mask; `None` when it is not a box.
    pub fn lanes_on(&self) -> Option<LanesOn> {
        *self.on.get_or_init(|| self.find_lanes_on())
    }

    fn find_lanes_on(&self) -> Option<LanesOn> {
        if self.shape.is_empty() {
            return Some(LanesOn {
                count: self.get_bits(0),
                first: 0,
                last: 0,
            });
        }
        let b = self.boxed()?;
        let count: u64 = b.iter().map(|(lo, hi)| hi - lo).product();
        if count == 0 {
            return Some(LanesOn {
                count: 0,
                first: 0,
                last: 0,
            });
        }
        let index =
            |corner: &mut dyn Iterator<Item = u64>| corner.zip(&self.shape).fold(0u64, |acc, (i, &n)| acc * n + i);
        Some(LanesOn {
            count,
            first: index(&mut b.iter().map(|(lo, _)| *lo)),
            last: index(&mut b.iter().map(|(_, hi)| hi - 1)),
        })
    }

    /// The elements, stored as a bool block.
    pub fn materialize(&self) -> Tensor {
        let shape: Axes<usize> = self.shape.iter().map(|&d| d as usize).collect();
        let mut t = Tensor::zeros(Elem::Num(DType::Bool), if shape.is_empty() { &[1] } else { &shape });
        let bytes = t.bytes_mut();
        if let Some(b) = self.boxed() {
            // A box: one run of ones per row of its outer axes.
            let (&(lo, hi), outer) = b.split_last().unwrap_or((&(0, 0), &[]));
            if lo >= hi || outer.iter().any(|(l, h)| l >= h) {
                return t;
            }
            let inner = *self.shape.last().unwrap_or(&1) as usize;
            let mut idx: Axes<u64> = outer.iter().map(|(l, _)| *l).collect();
            loop {
                let row = idx
                    .iter()
                    .zip(&self.shape)
                    .fold(0usize, |acc, (i, &n)| acc * n as usize + *i as usize);
                bytes[row * inner + lo as usize..row * inner + hi as usize].fill(1);
                // The next row inside the box, last outer axis fastest.
                let mut k = outer.len();
                loop {
                    if k == 0 {
                        return t;
                    }
                    k -= 1;
                    idx[k] += 1;
                    if idx[k] < outer[k].1 {
                        break;
                    }
                    idx[k] = outer[k].0;
                }
            }
        }
        bytes.fill(1);
        for (e, op) in &self.conds {
            let mut k = 0;
            e.for_each(|v| {
                if !holds(*op, v as i64 as i128) {
                    bytes[k] = 0;
                }
                k += 1;
            });
        }
        t
    }

    /// The same lanes under `shape`, when that only adds or removes axes
    /// of extent 1.
    pub fn reshape(&self, shape: &[u64]) -> Option<Mask> {
        let conds = self
            .conds
            .iter()
            .map(|(e, op)| Some((e.reshape(shape)?, *op)))
            .collect::<Option<_>>()?;
        Some(Mask::new(shape, conds))
    }

    /// Broadcast to `shape` (same rank, extent-1 axes stretched).
    fn broadcast(&self, shape: &[u64]) -> Option<Mask> {
        if self.shape.len() != shape.len() {
            return None;
        }
        let conds = self
            .conds
            .iter()
            .map(|(e, op)| (Affine::new(e.elem, shape, e.base(), e.strides()), *op))
            .collect();
        Some(Mask::new(shape, conds))
    }
}

/// How much of a group [`eval_group`] can do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Symbolic {
    /// No output can be a formula.
    Nothing,
    /// Some outputs may be formulas; the group still runs for the rest.
    Some,
    /// Every member has a symbolic form: when all inputs are scalars or
    /// formulas, the group need not run at all.
    All,
}

/// What [`eval_group`] can do for `group`: integer and pointer arithmetic
/// that keeps blocks affine has a symbolic form; nothing that touches
/// memory, compares or converts does.
pub fn symbolic(func: &Function, group: &Group) -> Symbolic {
    let has_form = |i: &crate::ir::Inst| {
        let d = func.inst(*i);
        if let [r] = d.results[..] {
            if let Type::Block(Elem::Num(DType::Bool), _) = func.ty(r) {
                return match d.op {
                    Op::Cmp(_) => matches!(
                        func.ty(d.args[0]).elem(),
                        Elem::Num(DType::I32 | DType::U32 | DType::I64)
                    ),
                    Op::Binary(BinaryOp::And) | Op::Splat | Op::Broadcast | Op::Reshape => true,
                    _ => false,
                };
            }
        }
        let op_ok = matches!(
            d.op,
            Op::Arange { .. }
                | Op::Splat
                | Op::Broadcast
                | Op::Reshape
                | Op::PtrAdd
                | Op::Binary(BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul)
        );
        op_ok
            && d.results
                .iter()
                .all(|r| matches!(func.ty(*r), Type::Block(..)) && affine_elem(func.ty(*r)))
    };
    let makes_output = group
        .insts
        .iter()
        .any(|i| has_form(i) && func.inst(*i).results.iter().any(|r| group.outputs.contains(r)));
    if !makes_output {
        Symbolic::Nothing
    } else if group.insts.iter().all(has_form) {
        Symbolic::All
    } else {
        Symbolic::Some
    }
}

/// The element types formulas describe.
fn affine_elem(t: &Type) -> bool {
    match t.elem() {
        Elem::Ptr(_) => true,
        Elem::Num(d) => matches!(d, DType::I32 | DType::U32 | DType::I64),
    }
}

/// One value during symbolic evaluation: a scalar (exact integer, or a
/// pointer's bits), an affine block or a mask.
#[derive(Clone)]
enum Sym {
    Scalar(i64),
    Block(Rc<Affine>),
    Mask(Rc<Mask>),
}

/// The values known so far (groups are small: a linear search beats
/// hashing).
type Env = SmallVec<[(crate::ir::Value, Sym); 16]>;

fn lookup(env: &Env, v: crate::ir::Value) -> Option<&Sym> {
    env.iter().rev().find(|(k, _)| *k == v).map(|(_, s)| s)
}

/// Evaluates `group` symbolically as far as it goes: for each output, its
/// formula ([`RtValue::Affine`] or [`RtValue::Mask`]), or `None` where the
/// value has none (a product of two varying blocks, a reshape that mixes
/// axes, an overflow, a comparison of lanes that wrap, a stored input…)
/// and must come from running the group.
pub fn eval_group(func: &Function, group: &Group, inputs: &[&RtValue]) -> Vec<Option<RtValue>> {
    let env = eval_env(func, group, inputs);
    group
        .outputs
        .iter()
        .map(|o| output_formula(func.ty(*o), lookup(&env, *o)?))
        .collect()
}

/// [`eval_group`] for one output, `out`, of `group`: its formula, if it
/// has one.
pub fn eval_output(func: &Function, group: &Group, inputs: &[&RtValue], out: crate::ir::Value) -> Option<RtValue> {
    let env = eval_env(func, group, inputs);
    output_formula(func.ty(out), lookup(&env, out)?)
}

/// A group that is exactly `ptr + splat(offset)`, a pointer block moved by
/// a scalar: the commonest address computation (a ring moves its pointer
/// so every step, and no two steps' offsets are the same, so nothing
/// reuses the formula). [`PtrShift::eval_on`] gives what [`eval_output`]
/// gives for it, a tenth of the work; `None` where it would not give a
/// formula *or* where the shortcut does not apply (ask `eval_output`).
#[derive(Clone, Debug)]
pub struct PtrShift {
    /// Positions of the pointer block and of the scalar among the group's
    /// inputs.
    ptr: usize,
    offset: usize,
    /// The scalar's element type, the splat's dtype (which the offsets
    /// must fit), the pointee's size.
    offset_elem: Elem,
    splat_dt: DType,
    size: i64,
    out_elem: Elem,
    shape: Axes<u64>,
}

impl PtrShift {
    /// The shortcut for `group`, when it is such a group.
    pub fn of(func: &Function, group: &Group) -> Option<PtrShift> {
        let [splat, add] = group.insts[..] else { return None };
        let (ds, da) = (func.inst(splat), func.inst(add));
        let ([s], [v], [p, v2], [out]) = (&ds.args[..], &ds.results[..], &da.args[..], &da.results[..]) else {
            return None;
        };
        if ds.op != Op::Splat || da.op != Op::PtrAdd || v != v2 || p == v || group.outputs[..] != [*out] {
            return None;
        }
        let splat_ty = func.ty(*v);
        let splat_dt = match splat_ty {
            Type::Block(Elem::Num(d), _) if affine_elem(splat_ty) => *d,
            _ => return None,
        };
        let (out_elem, shape, size) = match func.ty(*out) {
            Type::Block(e @ Elem::Ptr(t), shape) => (*e, shape, t.size_bytes() as i64),
            _ => return None,
        };
        let Type::Scalar(offset_elem) = func.ty(*s) else {
            return None;
        };
        Some(PtrShift {
            ptr: group.inputs.iter().position(|x| x == p)?,
            offset: group.inputs.iter().position(|x| x == s)?,
            offset_elem: *offset_elem,
            splat_dt,
            size,
            out_elem,
            shape: shape.iter().copied().collect(),
        })
    }

    /// The positions of the pointer block and of the scalar offset among
    /// the group's inputs.
    pub fn operands(&self) -> (usize, usize) {
        (self.ptr, self.offset)
    }

    /// The output's formula, as `eval_output` computes it, from the
    /// pointer block and the offset (the group's inputs at
    /// [`Self::operands`]): the pointer block's formula with its base moved
    /// by `offset · size`, when the offset fits the splat's dtype
    /// (`eval_affine`'s `ptr_add`).
    pub fn eval_on(&self, ptr: &RtValue, offset: &RtValue) -> Option<RtValue> {
        let (RtValue::Affine(a), RtValue::Scalar(b)) = (ptr, offset) else {
            return None;
        };
        if a.shape != self.shape {
            return None;
        }
        let x = exact_scalar(self.offset_elem, *b);
        if !offsets_fit(self.splat_dt, x as i128, x as i128) {
            return None;
        }
        let base = a.base().wrapping_add(x.wrapping_mul(self.size));
        Some(RtValue::Affine(Rc::new(a.moved_to(self.out_elem, base))))
    }
}

/// A scalar's exact value in symbolic evaluation: a pointer's bits, an
/// integer's value.
fn exact_scalar(e: Elem, bits: Bits) -> i64 {
    match e {
        Elem::Ptr(_) => bits as i64,
        Elem::Num(d) => elem::to_i64(d, bits),
    }
}

/// Whether `ptr_add` offsets whose exact values span `lo..=hi` each fit
/// the offset dtype `od`, so that widening them lane by lane is exact.
fn offsets_fit(od: DType, lo: i128, hi: i128) -> bool {
    match od {
        DType::I32 => lo >= i32::MIN as i128 && hi <= i32::MAX as i128,
        DType::U32 => lo >= 0 && hi <= u32::MAX as i128,
        DType::I64 => lo >= i64::MIN as i128 && hi <= i64::MAX as i128,
        _ => false,
    }
}

/// The formulas of `group`'s inputs and of every member that has one.
#[inline]
fn eval_env(func: &Function, group: &Group, inputs: &[&RtValue]) -> Env {
    let mut env = Env::new();
    for (v, x) in group.inputs.iter().zip(inputs) {
        let s = match x {
            RtValue::Scalar(b) => Sym::Scalar(exact_scalar(func.ty(*v).elem(), *b)),
            RtValue::Affine(a) => Sym::Block(a.clone()),
            RtValue::Mask(m) => Sym::Mask(m.clone()),
            RtValue::Block(_) => continue,
        };
        env.push((*v, s));
    }
    for &i in &group.insts {
        let d = func.inst(i);
        let Some(&r) = d.results.first() else { continue };
        if let Some(x) = eval_inst(func, d, func.ty(r), &env) {
            env.push((r, x));
        }
    }
    env
}

/// The mask instruction `d` makes (of shape `shape`) from the formulas of
/// its operands in `env`, if it has one.
fn eval_mask(func: &Function, d: &crate::ir::InstData, shape: &[u64], env: &Env) -> Option<Mask> {
    let arg = |k: usize| lookup(env, *d.args.get(k)?);
    // Operand `k` as a mask of the result's shape (a bool scalar: constant).
    let mask_at = |k: usize| -> Option<Mask> {
        match arg(k)? {
            Sym::Scalar(x) => Some(Mask::constant(shape, x & 1 != 0)),
            Sym::Mask(m) if m.shape.as_slice() == shape => Some((**m).clone()),
            _ => None,
        }
    };
    match &d.op {
        Op::Splat => mask_at(0),
        Op::Broadcast => match arg(0)? {
            Sym::Mask(m) => m.broadcast(shape),
            _ => None,
        },
        Op::Reshape => match arg(0)? {
            Sym::Mask(m) => m.reshape(shape),
            _ => None,
        },
        Op::Binary(BinaryOp::And) => {
            let (a, b) = (mask_at(0)?, mask_at(1)?);
            let mut conds = a.conds;
            conds.extend(b.conds);
            Some(Mask::new(shape, conds))
        }
        Op::Cmp(op) => {
            let dt = match func.ty(d.args[0]).elem() {
                Elem::Num(dt @ (DType::I32 | DType::U32 | DType::I64)) => dt,
                _ => return None,
            };
            // Each side at the result's shape as (base, strides), every
            // lane its exact value.
            let side = |k: usize| -> Option<(i64, Axes<i64>)> {
                let (base, strides) = match arg(k)? {
                    Sym::Scalar(x) => (*x, Axes::from_elem(0, shape.len())),
                    Sym::Block(a) if a.shape.as_slice() == shape => (a.base(), a.strides().iter().copied().collect()),
                    _ => return None,
                };
                let (lo, hi) = exact_range(base as i128, &strides, shape);
                let fits = match dt {
                    DType::I32 => lo >= i32::MIN as i128 && hi <= i32::MAX as i128,
                    DType::U32 => lo >= 0 && hi <= u32::MAX as i128,
                    _ => true,
                };
                fits.then_some((base, strides))
            };
            let ((ab, a_s), (bb, b_s)) = (side(0)?, side(1)?);
            let base = ab.checked_sub(bb)?;
            let strides = a_s
                .iter()
                .zip(&b_s)
                .map(|(x, y)| x.checked_sub(*y))
                .collect::<Option<Axes<i64>>>()?;
            let (lo, hi) = exact_range(base as i128, &strides, shape);
            if lo < i64::MIN as i128 || hi > i64::MAX as i128 {
                return None;
            }
            let diff = Affine::new(Elem::Num(DType::I64), shape, base, &strides);
            Some(Mask::new(shape, smallvec::smallvec![(diff, *op)]))
        }
        _ => None,
    }
}

/// The formula of instruction `d`'s result (of type `ty`) from those of
/// its operands in `env`, if it has one.
fn eval_inst(func: &Function, d: &crate::ir::InstData, ty: &Type, env: &Env) -> Option<Sym> {
    if let Type::Block(Elem::Num(DType::Bool), shape) = ty {
        return eval_mask(func, d, shape, env).map(|m| Sym::Mask(Rc::new(m)));
    }
    // A splat of a scalar (or a broadcast or reshape of one) stays that
    // scalar: every reader takes a scalar operand as its splat
    // (`at_shape`, a comparison's side), and an output is given its
    // formula at the end ([`output_formula`]). The ring's pointer moves by
    // a splat every step; this spares building that block's formula.
    if matches!(d.op, Op::Splat | Op::Broadcast | Op::Reshape) && matches!(ty, Type::Block(..)) && affine_elem(ty) {
        if let Some(Sym::Scalar(x)) = d.args.first().and_then(|a| lookup(env, *a)) {
            return Some(Sym::Scalar(*x));
        }
    }
    eval_affine(func, d, ty, env).map(|a| Sym::Block(Rc::new(a)))
}

/// The formula of a group output of type `ty` evaluated to `sym`.
fn output_formula(ty: &Type, sym: &Sym) -> Option<RtValue> {
    match sym {
        Sym::Block(a) => Some(RtValue::Affine(a.clone())),
        Sym::Mask(m) => Some(RtValue::Mask(m.clone())),
        // A splat kept as its scalar (see `eval_inst`).
        Sym::Scalar(x) => match ty {
            Type::Block(e, shape) => Some(RtValue::Affine(Rc::new(Affine::new(
                *e,
                shape,
                *x,
                &Axes::from_elem(0, shape.len()),
            )))),
            _ => None,
        },
    }
}

/// The affine formula of an integer or pointer instruction's result.
fn eval_affine(func: &Function, d: &crate::ir::InstData, ty: &Type, env: &Env) -> Option<Affine> {
    if !matches!(ty, Type::Block(..)) || !affine_elem(ty) {
        return None;
    }
    let shape = ty.shape();
    let arg = |k: usize| lookup(env, *d.args.get(k)?);
    // The operand `k` at the result's shape (a scalar as a splat).
    let at_shape = |k: usize| -> Option<(i64, Axes<i64>)> {
        match arg(k)? {
            Sym::Scalar(x) => Some((*x, smallvec::smallvec![0; shape.len()])),
            Sym::Block(a) if a.shape.as_slice() == shape => Some((a.base(), a.strides().iter().copied().collect())),
            Sym::Block(_) | Sym::Mask(_) => None,
        }
    };
    let is_ptr = matches!(ty.elem(), Elem::Ptr(_));
    let out = match &d.op {
        Op::Arange { start, .. } => Affine::new(ty.elem(), shape, *start, &[1]),
        Op::Splat => {
            let (b, s) = at_shape(0)?;
            Affine::new(ty.elem(), shape, b, &s)
        }
        Op::Broadcast => {
            let Sym::Block(a) = arg(0)? else { return None };
            if a.shape.len() != shape.len() {
                return None;
            }
            // Extent-1 source axes have stride 0 already.
            Affine::new(ty.elem(), shape, a.base(), a.strides())
        }
        Op::Reshape => {
            let Sym::Block(a) = arg(0)? else { return None };
            a.reshape(shape)?
        }
        Op::Binary(op) => {
            let ((ab, a_s), (bb, b_s)) = (at_shape(0)?, at_shape(1)?);
            let combine = |x: i64, y: i64| -> Option<i64> {
                if is_ptr {
                    return None;
                }
                match op {
                    BinaryOp::Add => x.checked_add(y),
                    BinaryOp::Sub => x.checked_sub(y),
                    _ => None,
                }
            };
            match op {
                BinaryOp::Add | BinaryOp::Sub => {
                    let base = combine(ab, bb)?;
                    let strides = a_s
                        .iter()
                        .zip(&b_s)
                        .map(|(x, y)| combine(*x, *y))
                        .collect::<Option<Axes<i64>>>()?;
                    Affine::new(ty.elem(), shape, base, &strides)
                }
                BinaryOp::Mul => {
                    // One side must be the same everywhere.
                    let (k, (vb, vs)) = if b_s.iter().all(|&s| s == 0) {
                        (bb, (ab, a_s))
                    } else if a_s.iter().all(|&s| s == 0) {
                        (ab, (bb, b_s))
                    } else {
                        return None;
                    };
                    let base = vb.checked_mul(k)?;
                    let strides = vs.iter().map(|s| s.checked_mul(k)).collect::<Option<Axes<i64>>>()?;
                    Affine::new(ty.elem(), shape, base, &strides)
                }
                _ => return None,
            }
        }
        Op::PtrAdd => {
            let size = match ty.elem() {
                Elem::Ptr(t) => t.size_bytes() as i64,
                Elem::Num(_) => 1,
            };
            let (pb, ps) = at_shape(0)?;
            let (ob, os) = at_shape(1)?;
            // The offsets are widened lane by lane: exact only when
            // every lane's value fits the offset dtype.
            let od = match func.ty(d.args[1]).elem() {
                Elem::Num(od) => od,
                Elem::Ptr(_) => return None,
            };
            let (lo, hi) = exact_range(ob as i128, &os, shape);
            if !offsets_fit(od, lo, hi) {
                return None;
            }
            let base = pb.wrapping_add(ob.wrapping_mul(size));
            let strides: Axes<i64> = ps
                .iter()
                .zip(&os)
                .map(|(p, o)| p.wrapping_add(o.wrapping_mul(size)))
                .collect();
            Affine::new(ty.elem(), shape, base, &strides)
        }
        _ => return None,
    };
    // Exact integers must stay inside i64 at every lane.
    if !is_ptr {
        let (lo, hi) = out.range();
        if lo < i64::MIN as i128 || hi > i64::MAX as i128 {
            return None;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `PtrShift` against the general evaluation, for every offset dtype
    /// with offsets at and past its limits, 1-D and 2-D pointer blocks,
    /// and inputs it must decline (a stored pointer block, another shape).
    #[test]
    fn pointer_shifts_match_the_general_evaluation() {
        use crate::ir::Builder;
        use crate::span::{FileId, Loc, Span};
        let loc = Loc::new(FileId(0), Span::new(0, 0));
        let limits = [
            0i64,
            1,
            -1,
            7,
            i32::MAX as i64,
            i32::MAX as i64 + 1,
            i32::MIN as i64,
            i32::MIN as i64 - 1,
            u32::MAX as i64,
            u32::MAX as i64 + 1,
            i64::MAX,
            i64::MIN,
        ];
        let mut shortcuts = 0;
        for shape in [vec![8u64], vec![4, 3]] {
            for (scalar, splat) in [
                (DType::I32, DType::I32),
                (DType::U32, DType::U32),
                (DType::I64, DType::I64),
                (DType::I32, DType::I64),
                // Wider scalars than the splat: offsets past its range.
                (DType::I64, DType::I32),
                (DType::I64, DType::U32),
            ] {
                let mut b = Builder::new("shift", vec![]);
                let ptr_ty = Type::Block(Elem::Ptr(DType::F32), shape.clone());
                let p = b.add_param("p", ptr_ty.clone());
                let k = b.add_param("k", Type::Scalar(Elem::Num(scalar)));
                let (splat_i, v) = b.push(
                    Op::Splat,
                    vec![k],
                    vec![Type::Block(Elem::Num(splat), shape.clone())],
                    vec![],
                    loc,
                );
                let (add_i, out) = b.push(Op::PtrAdd, vec![p, v[0]], vec![ptr_ty], vec![], loc);
                let func = b.finish();
                let group = Group {
                    insts: vec![splat_i, add_i],
                    inputs: vec![k, p],
                    outputs: vec![out[0]],
                };
                let shift = PtrShift::of(&func, &group).expect("a ptr + splat group");
                let strides: Vec<i64> = if shape.len() == 1 { vec![4] } else { vec![-40, 4] };
                let ptrs = [
                    RtValue::Affine(Rc::new(Affine::new(Elem::Ptr(DType::F32), &shape, 0x1000, &strides))),
                    RtValue::Affine(Rc::new(Affine::new(Elem::Ptr(DType::F32), &[2, 2], 0x1000, &[8, 4]))),
                    RtValue::Block(Rc::new(Tensor::zeros(Elem::Ptr(DType::F32), &[8]))),
                ];
                for x in limits {
                    let bits = elem::from_i64(scalar, x);
                    for ptr in &ptrs {
                        let k_val = RtValue::Scalar(bits);
                        let inputs = [&k_val, ptr];
                        let general = eval_output(&func, &group, &inputs, out[0]);
                        let (pk, ok) = shift.operands();
                        match shift.eval_on(inputs[pk], inputs[ok]) {
                            Some(got) => {
                                shortcuts += 1;
                                assert_eq!(Some(&got), general.as_ref(), "{scalar} offset {x} into {splat}");
                            }
                            None => assert!(
                                general.is_none() || !matches!(ptr, RtValue::Affine(a) if a.shape.as_slice() == shape),
                                "declined a shift the general evaluation makes: {scalar} offset {x} into {splat}"
                            ),
                        }
                    }
                }
            }
        }
        assert!(shortcuts > 30, "the shortcut ran {shortcuts} times");
    }

    #[test]
    fn elements_follow_the_formula_and_wrap_to_the_dtype() {
        let a = Affine::new(Elem::Num(DType::I32), &[2, 3], i32::MAX as i64 - 1, &[10, 1]);
        let t = a.materialize();
        let got: Vec<i64> = (0..6).map(|k| elem::to_i64(DType::I32, t.get_bits(k))).collect();
        let m = i32::MAX as i64;
        let want: Vec<i64> = [m - 1, m, i32::MIN as i64, m + 9, m + 10, m + 11]
            .iter()
            .map(|&v| v as i32 as i64)
            .collect();
        assert_eq!(got, want);
        assert_eq!(
            (0..6).map(|k| a.get_bits(k)).collect::<Vec<_>>(),
            (0..6).map(|k| t.get_bits(k)).collect::<Vec<_>>()
        );
    }

    /// Masks against lane-by-lane evaluation: every comparison, strides
    /// of both signs and zero, bases on both sides of every boundary, one
    /// and two conditions, on one or two axes. Where `lanes_on` answers it
    /// must be the count and the first and last on lanes; it may decline
    /// only where the lanes are not a box.
    #[test]
    fn masks_match_their_lanes() {
        let ops = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge];
        let shape = [3u64, 5];
        let i64e = Elem::Num(DType::I64);
        let mut declined_boxes = 0;
        for op in ops {
            for s0 in -2i64..=2 {
                for s1 in -2i64..=2 {
                    for b in -12i64..=12 {
                        for second in [None, Some((CmpOp::Lt, 2i64, 0i64, -1i64)), Some((CmpOp::Ge, -1, 1, 0))] {
                            let mut conds: SmallVec<[(Affine, CmpOp); 2]> =
                                smallvec::smallvec![(Affine::new(i64e, &shape, b, &[s0, s1]), op)];
                            if let Some((op2, b2, t0, t1)) = second {
                                conds.push((Affine::new(i64e, &shape, b2, &[t0, t1]), op2));
                            }
                            let m = Mask::new(&shape, conds);
                            let lanes: Vec<bool> = (0..15)
                                .map(|k| {
                                    let (i, j) = ((k / 5) as i64, (k % 5) as i64);
                                    m.conds.iter().all(|(e, op)| {
                                        let v = e.base() + i * e.strides()[0] + j * e.strides()[1];
                                        holds(*op, v as i128)
                                    })
                                })
                                .collect();
                            let t = m.materialize();
                            for (k, &on) in lanes.iter().enumerate() {
                                assert_eq!(t.get_bits(k), on as u64, "materialize {m:?} lane {k}");
                                assert_eq!(m.get_bits(k), on as u64, "get_bits {m:?} lane {k}");
                            }
                            let count = lanes.iter().filter(|x| **x).count() as u64;
                            let first = lanes.iter().position(|x| *x).unwrap_or(0) as u64;
                            let last = lanes.iter().rposition(|x| *x).unwrap_or(0) as u64;
                            match m.lanes_on() {
                                Some(on) => {
                                    assert_eq!(on.count, count, "{m:?}");
                                    if count > 0 {
                                        assert_eq!((on.first, on.last), (first, last), "{m:?}");
                                    }
                                }
                                None => {
                                    // Declined: a condition on two axes, or
                                    // `!=` with its one off lane inside.
                                    let two_axes = m.conds.iter().any(|(e, _)| e.strides().iter().all(|s| *s != 0));
                                    assert!(two_axes || op == CmpOp::Ne, "declined a box: {m:?}");
                                    declined_boxes += two_axes as u32;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(declined_boxes > 0);
        // Boxes in three dimensions: stored row by row.
        let shape3 = [2u64, 3, 4];
        for (b0, b1, b2) in [(1i64, -1i64, 2i64), (2, 0, 4), (0, 3, 1), (-1, -2, -3), (1, 2, 0)] {
            let m = Mask::new(
                &shape3,
                smallvec::smallvec![
                    (Affine::new(i64e, &shape3, -b0, &[1, 0, 0]), CmpOp::Lt),
                    (Affine::new(i64e, &shape3, b1, &[0, 1, 0]), CmpOp::Ge),
                    (Affine::new(i64e, &shape3, b2, &[0, 0, -1]), CmpOp::Gt),
                ],
            );
            assert!(m.boxed().is_some());
            let t = m.materialize();
            for k in 0..24 {
                assert_eq!(t.get_bits(k), m.get_bits(k), "{m:?} lane {k}");
            }
        }
        // A 0-d mask and an empty one.
        let zero_d = Mask::constant(&[], false);
        assert_eq!(zero_d.lanes_on().map(|o| o.count), Some(0));
        assert_eq!(Mask::constant(&[], true).lanes_on().map(|o| o.count), Some(1));
        assert_eq!(Mask::constant(&[4, 0], true).lanes_on().map(|o| o.count), Some(0));
    }

    /// Intervals with bases and strides at the ends of i64 (no overflow,
    /// the same lanes as evaluating each one).
    #[test]
    fn intervals_at_the_extremes() {
        let vals = [i64::MIN, i64::MIN + 1, -7, -1, 0, 1, 7, i64::MAX - 1, i64::MAX];
        for op in [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge] {
            for &b in &vals {
                for &s in &vals {
                    for n in [0u64, 1, 2, 5] {
                        let on: Vec<bool> = (0..n).map(|i| holds(op, b as i128 + s as i128 * i as i128)).collect();
                        if let Some((lo, hi)) = interval(b, s, n, op) {
                            let want: Vec<bool> = (0..n).map(|i| i >= lo && i < hi).collect();
                            assert_eq!(on, want, "{b} + {s}·i {op:?} 0, n = {n}");
                        } else {
                            assert_eq!(op, CmpOp::Ne, "only != may split: {b} + {s}·i, n = {n}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn consecutive_means_row_major_with_unit_axes_ignored() {
        let p = |shape: &[u64], strides: &[i64]| Affine::new(Elem::Ptr(DType::F16), shape, 4096, strides);
        assert!(p(&[4, 8], &[16, 2]).is_consecutive(2));
        assert!(p(&[1, 8], &[999, 2]).is_consecutive(2));
        assert!(!p(&[4, 8], &[32, 2]).is_consecutive(2));
        assert!(!p(&[8], &[4]).is_consecutive(2));
    }
}
