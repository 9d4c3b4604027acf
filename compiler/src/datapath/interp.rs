//! The reference interpreter: every block operation written plainly over
//! ndarray arrays of element bits, with the element semantics of `elem`.
//! It is the oracle the JIT is tested against, so clarity beats speed.

use super::elem::{self, Bits};
use super::tensor::Tensor;
use super::{DataPath, ExecError, ExecErrorKind, GroupId, Memory, Plan, RtValue};
use crate::ir::{Function, Inst, Op, Type, Value};
use crate::sema::types::{DType, Elem};
use ndarray::{ArrayD, Axis, IxDyn, Zip};
use std::collections::HashMap;
use std::rc::Rc;

#[derive(Default)]
pub struct Interpreter;

fn dtype_of(t: &Type) -> DType {
    match t.elem() {
        Elem::Num(d) => d,
        Elem::Ptr(_) => DType::I64,
    }
}

fn shape_of(t: &Type) -> Vec<usize> {
    t.shape().iter().map(|&d| d as usize).collect()
}

fn err(inst: Inst, kind: ExecErrorKind) -> ExecError {
    ExecError { inst, kind }
}

fn elem_err(inst: Inst, _e: elem::ElemError) -> ExecError {
    err(inst, ExecErrorKind::DivisionByZero)
}

/// A run-time value as an array of bits (scalars are 0-d arrays).
pub fn to_array(v: &RtValue) -> ArrayD<Bits> {
    match v {
        RtValue::Scalar(b) => ArrayD::from_elem(IxDyn(&[]), *b),
        RtValue::Block(t) => t.to_array(),
        RtValue::Affine(a) => a.materialize().to_array(),
        RtValue::Mask(m) => m.materialize().to_array(),
    }
}

/// An array back as a run-time value of type `t`.
pub fn from_array(t: &Type, a: &ArrayD<Bits>) -> RtValue {
    match t {
        Type::Scalar(_) => RtValue::Scalar(a.iter().next().copied().unwrap_or(0)),
        _ => RtValue::Block(Rc::new(Tensor::from_array(t.elem(), a))),
    }
}

impl DataPath for Interpreter {
    fn name(&self) -> &'static str {
        "interp"
    }

    fn prepare(&mut self, _func: &Function, _plan: &Plan) -> Result<(), String> {
        Ok(())
    }

    fn maker(&self) -> Option<fn() -> Box<dyn DataPath>> {
        Some(|| Box::new(Interpreter))
    }

    fn run(
        &mut self,
        func: &Function,
        plan: &Plan,
        g: GroupId,
        inputs: &[&RtValue],
        mem: &mut dyn Memory,
    ) -> Result<super::Outputs, ExecError> {
        let group = &plan.groups[g];
        let mut env: HashMap<Value, ArrayD<Bits>> = HashMap::new();
        for (v, val) in group.inputs.iter().zip(inputs) {
            env.insert(*v, to_array(val));
        }
        for &i in &group.insts {
            let results = eval(func, i, &env, mem)?;
            for (r, a) in func.inst(i).results.iter().zip(results) {
                env.insert(*r, a);
            }
        }
        Ok(group.outputs.iter().map(|v| from_array(func.ty(*v), &env[v])).collect())
    }
}

fn map2(
    a: &ArrayD<Bits>,
    b: &ArrayD<Bits>,
    f: impl Fn(Bits, Bits) -> Result<Bits, elem::ElemError>,
) -> Result<ArrayD<Bits>, elem::ElemError> {
    let mut failure = None;
    let out = Zip::from(a).and(b).map_collect(|&x, &y| match f(x, y) {
        Ok(r) => r,
        Err(e) => {
            failure.get_or_insert(e);
            0
        }
    });
    failure.map_or(Ok(out), Err)
}

/// Evaluates one block instruction.
pub fn eval(
    func: &Function,
    i: Inst,
    env: &HashMap<Value, ArrayD<Bits>>,
    mem: &mut dyn Memory,
) -> Result<Vec<ArrayD<Bits>>, ExecError> {
    let d = func.inst(i);
    let arg = |k: usize| &env[&d.args[k]];
    let arg_ty = |k: usize| func.ty(d.args[k]);
    let rt = d.results.first().map(|r| func.ty(*r).clone());
    let out_shape = rt.as_ref().map(shape_of).unwrap_or_default();
    let one = |a: ArrayD<Bits>| Ok(vec![a]);
    match &d.op {
        Op::Arange { start, end } => {
            let v: Vec<Bits> = (*start..*end).map(|x| elem::from_i64(DType::I32, x)).collect();
            one(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v).unwrap_or_default())
        }
        Op::Splat => one(ArrayD::from_elem(
            IxDyn(&out_shape),
            arg(0).iter().next().copied().unwrap_or(0),
        )),
        Op::Broadcast => match arg(0).broadcast(IxDyn(&out_shape)) {
            Some(v) => one(v.to_owned()),
            None => Err(err(i, ExecErrorKind::Unsupported("invalid broadcast".into()))),
        },
        Op::Reshape => {
            one(ArrayD::from_shape_vec(IxDyn(&out_shape), arg(0).iter().copied().collect()).unwrap_or_default())
        }
        Op::Trans { perm } => one(arg(0)
            .clone()
            .permuted_axes(IxDyn(perm))
            .as_standard_layout()
            .to_owned()),
        Op::Binary(op) => {
            let dt = dtype_of(arg_ty(0));
            map2(arg(0), arg(1), |x, y| elem::binary(*op, dt, x, y))
                .map(|a| vec![a])
                .map_err(|e| elem_err(i, e))
        }
        Op::Cmp(op) => {
            let dt = dtype_of(arg_ty(0));
            one(Zip::from(arg(0))
                .and(arg(1))
                .map_collect(|&x, &y| elem::compare(*op, dt, x, y) as Bits))
        }
        Op::Unary(op) => {
            let dt = dtype_of(arg_ty(0));
            one(arg(0).mapv(|x| elem::unary(*op, dt, x)))
        }
        Op::Cast { bitcast } => {
            let (from, to) = (dtype_of(arg_ty(0)), rt.as_ref().map(dtype_of).unwrap_or(DType::I32));
            one(arg(0).mapv(|x| {
                if *bitcast {
                    elem::bitcast(to, x)
                } else {
                    elem::cast(from, to, x)
                }
            }))
        }
        Op::Select => one(Zip::from(arg(0))
            .and(arg(1))
            .and(arg(2))
            .map_collect(|&c, &x, &y| if c & 1 != 0 { x } else { y })),
        Op::Fma => {
            let dt = dtype_of(arg_ty(0));
            one(Zip::from(arg(0))
                .and(arg(1))
                .and(arg(2))
                .map_collect(|&x, &y, &z| elem::fma(dt, x, y, z)))
        }
        Op::PtrAdd => {
            let size = match arg_ty(0).elem() {
                Elem::Ptr(p) => p.size_bytes(),
                Elem::Num(_) => 1,
            };
            let od = dtype_of(arg_ty(1));
            one(Zip::from(arg(0))
                .and(arg(1))
                .map_collect(|&p, &o| p.wrapping_add((elem::to_i64(od, o) as u64).wrapping_mul(size))))
        }
        Op::Reduce { op, axis, keep_dims } => {
            let (dt, out_dt) = (dtype_of(arg_ty(0)), rt.as_ref().map(dtype_of).unwrap_or(DType::I32));
            let x = arg(0);
            let r = match axis {
                None => {
                    let v = elem::reduce_lane(*op, dt, out_dt, x.iter().copied());
                    ArrayD::from_elem(IxDyn(&out_shape), v)
                }
                Some(ax) => {
                    // Lanes come in row-major order of the other axes: the
                    // result's order, with or without the kept unit axis.
                    let _ = keep_dims;
                    let reduced: Vec<Bits> = x
                        .lanes(Axis(*ax))
                        .into_iter()
                        .map(|l| elem::reduce_lane(*op, dt, out_dt, l.iter().copied()))
                        .collect();
                    ArrayD::from_shape_vec(IxDyn(&out_shape), reduced).unwrap_or_default()
                }
            };
            one(r)
        }
        Op::Dot { has_acc } => {
            let (a, b) = (arg(0), arg(1));
            let (in_dt, out_dt) = (dtype_of(arg_ty(0)), rt.as_ref().map(dtype_of).unwrap_or(DType::F32));
            let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[1]);
            let acc = if *has_acc { Some(arg(2)) } else { None };
            let mut out = ArrayD::from_elem(IxDyn(&[m, n]), 0);
            for r in 0..m {
                for c in 0..n {
                    out[[r, c]] = dot_element(
                        in_dt,
                        out_dt,
                        (0..k).map(|q| (a[[r, q]], b[[q, c]])),
                        acc.map(|x| x[[r, c]]),
                    );
                }
            }
            one(out)
        }
        Op::Load { has_mask, has_other } => {
            let t = rt.clone().unwrap_or(Type::Scalar(Elem::Num(DType::I32)));
            let dt = dtype_of(&t);
            let size = dt.size_bytes() as usize;
            let ptrs = arg(0);
            let mask = has_mask.then(|| arg(1));
            let other = has_other.then(|| arg(if *has_mask { 2 } else { 1 }));
            let mut out = ArrayD::from_elem(IxDyn(&out_shape), 0);
            for (lane, (o, p)) in out.iter_mut().zip(ptrs.iter()).enumerate() {
                let active = mask.is_none_or(|m| m.iter().nth(lane).is_some_and(|b| b & 1 != 0));
                if !active {
                    *o = other.and_then(|x| x.iter().nth(lane).copied()).unwrap_or(0);
                    continue;
                }
                let mut buf = [0u8; 8];
                mem.read(*p, &mut buf[..size])
                    .map_err(|f| err(i, ExecErrorKind::OutOfBounds(f)))?;
                *o = u64::from_le_bytes(buf);
            }
            one(out)
        }
        Op::Store { has_mask } => {
            let dt = dtype_of(arg_ty(1));
            let size = dt.size_bytes() as usize;
            let (ptrs, vals) = (arg(0), arg(1));
            let mask = has_mask.then(|| arg(2));
            for (lane, (p, v)) in ptrs.iter().zip(vals.iter()).enumerate() {
                if mask.is_some_and(|m| m.iter().nth(lane).is_some_and(|b| b & 1 == 0)) {
                    continue;
                }
                mem.write(*p, &v.to_le_bytes()[..size])
                    .map_err(|f| err(i, ExecErrorKind::OutOfBounds(f)))?;
            }
            Ok(vec![])
        }
        Op::AtomicAdd { has_mask } => {
            let dt = dtype_of(arg_ty(1));
            let size = dt.size_bytes() as usize;
            let (ptrs, vals) = (arg(0), arg(1));
            let mask = has_mask.then(|| arg(2));
            let mut old = ArrayD::from_elem(IxDyn(&out_shape), 0);
            for (lane, ((p, v), o)) in ptrs.iter().zip(vals.iter()).zip(old.iter_mut()).enumerate() {
                if mask.is_some_and(|m| m.iter().nth(lane).is_some_and(|b| b & 1 == 0)) {
                    continue;
                }
                let mut buf = [0u8; 8];
                // A read-modify-write: its fault is the write's, as the
                // simulator reports it.
                mem.read(*p, &mut buf[..size]).map_err(|f| {
                    err(
                        i,
                        ExecErrorKind::OutOfBounds(crate::datapath::MemFault { write: true, ..f }),
                    )
                })?;
                *o = u64::from_le_bytes(buf);
                let sum = elem::binary(crate::ir::BinaryOp::Add, dt, *o, *v).map_err(|e| elem_err(i, e))?;
                mem.write(*p, &sum.to_le_bytes()[..size])
                    .map_err(|f| err(i, ExecErrorKind::OutOfBounds(f)))?;
            }
            one(old)
        }
        Op::Gemm { .. } => {
            gemm(func, i, env, mem)?;
            Ok(vec![])
        }
        other => Err(err(
            i,
            ExecErrorKind::Unsupported(format!("`{}` is not a data-path operation", other.mnemonic())),
        )),
    }
}

/// One element of a matrix product: `acc + Σ a·b` in index order, in f32
/// for float inputs (each product and sum rounded), wrapping for integers.
pub fn dot_element(in_dt: DType, out_dt: DType, pairs: impl Iterator<Item = (Bits, Bits)>, acc: Option<Bits>) -> Bits {
    if in_dt.is_float() {
        let mut s = acc.map_or(0.0, |a| elem::to_f32(out_dt, a));
        for (x, y) in pairs {
            let p = elem::canon(elem::to_f32(in_dt, x) * elem::to_f32(in_dt, y));
            s = elem::canon(s + p);
        }
        elem::from_f32(out_dt, s)
    } else {
        let mut s = acc.map_or(0, |a| elem::to_i64(out_dt, a));
        for (x, y) in pairs {
            s = s.wrapping_add(elem::to_i64(in_dt, x).wrapping_mul(elem::to_i64(in_dt, y)));
        }
        elem::from_i64(out_dt, s)
    }
}

/// `tl.gemm`: `out[M, N] = a[M, K] @ b[K, N]`, row-major matrices at the
/// three base pointers, accumulated like `dot`.
fn gemm(func: &Function, i: Inst, env: &HashMap<Value, ArrayD<Bits>>, mem: &mut dyn Memory) -> Result<(), ExecError> {
    let d = func.inst(i);
    let scalar = |k: usize| env[&d.args[k]].iter().next().copied().unwrap_or(0);
    let pointee = |k: usize| match func.ty(d.args[k]).elem() {
        Elem::Ptr(p) => p,
        Elem::Num(n) => n,
    };
    let (a, b, out) = (scalar(0), scalar(1), scalar(2));
    let dim = |k: usize| elem::to_i64(DType::I32, scalar(k)).max(0) as u64;
    let (m, n, k) = (dim(3), dim(4), dim(5));
    let (ad, od) = (pointee(0), pointee(2));
    let read = |mem: &mut dyn Memory, base: u64, idx: u64, dt: DType| -> Result<Bits, ExecError> {
        let size = dt.size_bytes();
        let mut buf = [0u8; 8];
        mem.read(base.wrapping_add(idx * size), &mut buf[..size as usize])
            .map_err(|f| err(i, ExecErrorKind::OutOfBounds(f)))?;
        Ok(u64::from_le_bytes(buf))
    };
    // Each matrix must lie inside one allocation (checked before any
    // buffer is sized from the run-time M, N, K).
    for (base, elems, dt, write) in [(a, m * k, ad, false), (b, k * n, ad, false), (out, m * n, od, true)] {
        let Some(bytes) = elems.checked_mul(dt.size_bytes()) else {
            return Err(err(
                i,
                ExecErrorKind::OutOfBounds(super::MemFault {
                    addr: base,
                    bytes: u64::MAX,
                    write,
                }),
            ));
        };
        if bytes == 0 {
            continue;
        }
        let fits = mem
            .segment(base)
            .is_some_and(|(lo, seg)| base - lo + bytes <= seg.len() as u64);
        if !fits {
            return Err(err(
                i,
                ExecErrorKind::OutOfBounds(super::MemFault {
                    addr: base,
                    bytes,
                    write,
                }),
            ));
        }
    }
    let mut a_mat = vec![0; (m * k) as usize];
    for (idx, slot) in a_mat.iter_mut().enumerate() {
        *slot = read(mem, a, idx as u64, ad)?;
    }
    let mut b_mat = vec![0; (k * n) as usize];
    for (idx, slot) in b_mat.iter_mut().enumerate() {
        *slot = read(mem, b, idx as u64, ad)?;
    }
    for r in 0..m {
        for c in 0..n {
            let v = dot_element(
                ad,
                od,
                (0..k).map(|q| (a_mat[(r * k + q) as usize], b_mat[(q * n + c) as usize])),
                None,
            );
            let size = od.size_bytes();
            mem.write(out.wrapping_add((r * n + c) * size), &v.to_le_bytes()[..size as usize])
                .map_err(|f| err(i, ExecErrorKind::OutOfBounds(f)))?;
        }
    }
    Ok(())
}
