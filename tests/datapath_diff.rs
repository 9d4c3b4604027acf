//! The JIT and the reference interpreter agree bit for bit: every block
//! operation, every dtype, odd shapes, and data salted with NaN (various
//! payloads), ±Inf, ±0 and subnormals. A deterministic sweep covers every
//! (operation, dtype) pair; proptest then varies shapes and data.
//! Failures (integer division by zero) must agree too.

use kernbench_compiler::datapath::{elem, Fusion, Tensor};
use kernbench_compiler::sema::types::{promote, DType, Elem};
use kernbench_tests::exec::{lower, run, run_text, Arg};
use proptest::prelude::*;

#[derive(Clone, Copy, Debug)]
enum Shape {
    D1(usize),
    D2(usize, usize),
}

impl Shape {
    fn dims(self) -> Vec<usize> {
        match self {
            Shape::D1(n) => vec![n],
            Shape::D2(m, n) => vec![m, n],
        }
    }

    fn offs(self) -> String {
        match self {
            Shape::D1(n) => format!("tl.arange(0, {n})"),
            Shape::D2(m, n) => format!("tl.arange(0, {m})[:, None] * {n} + tl.arange(0, {n})[None, :]"),
        }
    }
}

/// An operation under test: how to write it and its result dtype.
#[derive(Clone, Debug)]
struct Template {
    name: &'static str,
    expr: &'static str,
    /// Result dtype from the input dtype (None: not applicable).
    result: fn(DType) -> Option<DType>,
    /// Output shape kind.
    out: Out,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Out {
    Same,
    /// Reduced along an axis (1-D: to a scalar).
    ReduceLast,
    ReduceAll,
    Transposed,
}

fn arith(div_or_mod: bool, true_div: bool) -> impl Fn(DType) -> Option<DType> {
    move |t| {
        let d = promote(t, false, t, false, div_or_mod).ok()?;
        Some(if true_div && d.is_int() { DType::F32 } else { d })
    }
}

fn int_only(t: DType) -> Option<DType> {
    t.is_int().then_some(t)
}
fn float_only(t: DType) -> Option<DType> {
    t.is_float().then_some(t)
}
fn any_dtype(t: DType) -> Option<DType> {
    Some(t)
}
fn not_bool(t: DType) -> Option<DType> {
    (t != DType::Bool).then_some(t)
}
fn to_bool(_: DType) -> Option<DType> {
    Some(DType::Bool)
}
fn sum_type(t: DType) -> Option<DType> {
    Some(if t.is_int() && t.bits() < 32 {
        if t.is_signed() {
            DType::I32
        } else {
            DType::U32
        }
    } else {
        t
    })
}
fn index_type(_: DType) -> Option<DType> {
    Some(DType::I32)
}

fn templates() -> Vec<Template> {
    let t = |name, expr, result: fn(DType) -> Option<DType>, out| Template {
        name,
        expr,
        result,
        out,
    };
    vec![
        t("add", "a + b", |d| arith(false, false)(d), Out::Same),
        t("sub", "a - b", |d| arith(false, false)(d), Out::Same),
        t("mul", "a * b", |d| arith(false, false)(d), Out::Same),
        t("div", "a / b", |d| arith(true, true)(d), Out::Same),
        t("floordiv", "a // b", |d| arith(true, false)(d), Out::Same),
        t("mod", "a % b", |d| arith(true, false)(d), Out::Same),
        t("and", "a & b", int_only, Out::Same),
        t("or", "a | b", int_only, Out::Same),
        t("xor", "a ^ b", int_only, Out::Same),
        t("shl", "a << b", int_only, Out::Same),
        t("shr", "a >> b", int_only, Out::Same),
        t("scalar_mul", "a * s", |d| arith(false, false)(d), Out::Same),
        t("weak_add", "a + 3", not_bool, Out::Same),
        t("weak_float_mul", "a * 0.5", float_only, Out::Same),
        t("maximum", "tl.maximum(a, b)", any_dtype, Out::Same),
        t("minimum", "tl.minimum(a, b)", any_dtype, Out::Same),
        t("clamp", "tl.clamp(a, b, c)", any_dtype, Out::Same),
        t("lt", "a < b", to_bool, Out::Same),
        t("le", "a <= b", to_bool, Out::Same),
        t("eq", "a == b", to_bool, Out::Same),
        t("ne", "a != b", to_bool, Out::Same),
        t("gt", "a > b", to_bool, Out::Same),
        t("ge", "a >= b", to_bool, Out::Same),
        t("neg", "-a", not_bool, Out::Same),
        t("invert", "~a", int_only, Out::Same),
        t("abs", "tl.abs(a)", any_dtype, Out::Same),
        t("exp", "tl.exp(a)", float_only, Out::Same),
        t("exp2", "tl.exp2(a)", float_only, Out::Same),
        t("log", "tl.log(a)", float_only, Out::Same),
        t("log2", "tl.log2(a)", float_only, Out::Same),
        t("sqrt", "tl.sqrt(a)", float_only, Out::Same),
        t("rsqrt", "tl.rsqrt(a)", float_only, Out::Same),
        t("sin", "tl.sin(a)", float_only, Out::Same),
        t("cos", "tl.cos(a)", float_only, Out::Same),
        t("sigmoid", "tl.sigmoid(a)", float_only, Out::Same),
        t("floor", "tl.floor(a)", float_only, Out::Same),
        t("ceil", "tl.ceil(a)", float_only, Out::Same),
        t("fma", "tl.fma(a, b, c)", float_only, Out::Same),
        t("where", "tl.where(a < b, a, c)", any_dtype, Out::Same),
        t("select_scalar_cond", "a if s > s else b", any_dtype, Out::Same),
        t(
            "masked_load",
            "tl.load(x + offs, mask=(offs % 3) != 0, other=1)",
            any_dtype,
            Out::Same,
        ),
        t("to_bool", "a.to(bool)", to_bool, Out::Same),
        t("to_i8", "a.to(i8)", |_| Some(DType::I8), Out::Same),
        t("to_u8", "a.to(u8)", |_| Some(DType::U8), Out::Same),
        t("to_i32", "a.to(i32)", |_| Some(DType::I32), Out::Same),
        t("to_u32", "a.to(u32)", |_| Some(DType::U32), Out::Same),
        t("to_i64", "a.to(i64)", |_| Some(DType::I64), Out::Same),
        t("to_f16", "a.to(f16)", |_| Some(DType::F16), Out::Same),
        t("to_bf16", "a.to(bf16)", |_| Some(DType::BF16), Out::Same),
        t("to_f32", "a.to(f32)", |_| Some(DType::F32), Out::Same),
        t(
            "bitcast_32",
            "a.to(i32, bitcast=True)",
            |d| (d.bits() == 32).then_some(DType::I32),
            Out::Same,
        ),
        t(
            "bitcast_16",
            "a.to(bf16, bitcast=True)",
            |d| (d.bits() == 16).then_some(DType::BF16),
            Out::Same,
        ),
        t("sum_last", "tl.sum(a, axis=-1)", sum_type, Out::ReduceLast),
        t("sum_all", "tl.sum(a)", sum_type, Out::ReduceAll),
        t("max_last", "tl.max(a, axis=-1)", any_dtype, Out::ReduceLast),
        t("min_all", "tl.min(a)", any_dtype, Out::ReduceAll),
        t("argmax_last", "tl.argmax(a, axis=-1)", index_type, Out::ReduceLast),
        t("argmin_last", "tl.argmin(a, axis=-1)", index_type, Out::ReduceLast),
        t("trans", "tl.trans(a)", any_dtype, Out::Transposed),
        t("softmax", "tl.softmax(a)", float_only, Out::Same),
        t(
            "broadcast_outer",
            "a + tl.max(b, axis=-1, keep_dims=True)",
            |d| arith(false, false)(d),
            Out::Same,
        ),
    ]
}

/// Random bits for dtype `d`, with special values mixed in for floats.
/// One program of `func` on `args`, run on the JIT and on the
/// interpreter (each from the same inputs); panics if either fails.
fn jit_and_interp(func: &kernbench_compiler::ir::Function, args: &[Arg]) -> (Vec<Tensor>, Vec<Tensor>) {
    let jit = run(func, args, [1, 1, 1], true).unwrap_or_else(|e| panic!("jit: {e}"));
    let interp = run(func, args, [1, 1, 1], false).unwrap_or_else(|e| panic!("interpreter: {e}"));
    (jit, interp)
}

fn random_tensor(d: DType, dims: &[usize], seed: u64) -> Tensor {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut t = Tensor::zeros(Elem::Num(d), dims);
    for i in 0..t.numel() {
        let r = next();
        let bits = match d {
            DType::F32 => match r % 10 {
                0 => [
                    0x7fc0_0000u64,
                    0xffc0_0001,
                    0x7f80_0001,
                    0x7f80_0000,
                    0xff80_0000,
                    0x8000_0000,
                    0,
                    1,
                    0x8000_0003,
                    0x7f7f_ffff,
                ][(r >> 8) as usize % 10],
                _ => elem::from_f32(DType::F32, ((r >> 11) as f64 / (1u64 << 53) as f64 * 8.0 - 4.0) as f32),
            },
            DType::F16 | DType::BF16 => match r % 10 {
                0 => {
                    let specials: [u64; 6] = if d == DType::F16 {
                        [0x7e00, 0xfe01, 0x7c00, 0xfc00, 0x8000, 0x0001]
                    } else {
                        [0x7fc0, 0xffc1, 0x7f80, 0xff80, 0x8000, 0x0001]
                    };
                    specials[(r >> 8) as usize % 6]
                }
                _ => elem::from_f32(d, ((r >> 11) as f64 / (1u64 << 53) as f64 * 8.0 - 4.0) as f32),
            },
            DType::Bool => r >> 33 & 1,
            // Small values most of the time (shifts, divisions), extremes
            // sometimes, zero sometimes (division by zero must agree).
            _ => match r % 8 {
                0 => 0,
                1 => elem::from_i64(d, i64::MIN),
                2 => elem::from_i64(d, -1),
                _ => elem::from_i64(d, (r >> 20) as i64 % 37 - 9),
            },
        };
        t.set_bits(i, bits);
    }
    t
}

fn source(tpl: &Template, t: DType, r: DType, shape: Shape) -> String {
    let dims = shape.dims();
    let out_offs = match (tpl.out, shape) {
        (Out::Same, s) => s.offs(),
        (Out::ReduceAll, _) | (Out::ReduceLast, Shape::D1(_)) => String::new(),
        (Out::ReduceLast, Shape::D2(m, _)) => format!("tl.arange(0, {m})"),
        (Out::Transposed, Shape::D2(m, n)) => format!("tl.arange(0, {n})[:, None] * {m} + tl.arange(0, {m})[None, :]"),
        (Out::Transposed, Shape::D1(_)) => unreachable!("filtered"),
    };
    let store = if out_offs.is_empty() {
        "tl.store(out, r)".to_string()
    } else {
        format!("tl.store(out + ({out_offs}), r)")
    };
    let _ = dims;
    format!(
        "@kernel\ndef k(x: ptr[{t}], y: ptr[{t}], z: ptr[{t}], out: ptr[{r}], s: {t}):\n    offs = {offs}\n    a = tl.load(x + offs)\n    b = tl.load(y + offs)\n    c = tl.load(z + offs)\n    r = {expr}\n    {store}\n",
        offs = shape.offs(),
        expr = tpl.expr,
    )
}

fn out_dims(tpl: &Template, shape: Shape) -> Vec<usize> {
    match (tpl.out, shape) {
        (Out::Same, s) => s.dims(),
        (Out::ReduceAll, _) | (Out::ReduceLast, Shape::D1(_)) => vec![1],
        (Out::ReduceLast, Shape::D2(m, _)) => vec![m],
        (Out::Transposed, Shape::D2(m, n)) => vec![n, m],
        (Out::Transposed, Shape::D1(n)) => vec![n],
    }
}

/// Runs one case on both backends; `Ok(false)` when the case does not
/// apply (operation not defined for the dtype).
fn check_case(tpl: &Template, t: DType, shape: Shape, seed: u64) -> Result<bool, String> {
    let Some(r) = (tpl.result)(t) else { return Ok(false) };
    if tpl.out == Out::Transposed && matches!(shape, Shape::D1(_)) {
        return Ok(false);
    }
    let src = source(tpl, t, r, shape);
    let func = match lower(&src, "k", &[]) {
        Ok(f) => f,
        // Combinations the language rejects (e.g. `/` between signed and
        // unsigned) are not data-path cases.
        Err(e) if e.contains("the program has errors") => return Ok(false),
        Err(e) => return Err(format!("{}[{t}]: {e}\n{src}", tpl.name)),
    };
    let dims = shape.dims();
    let args = vec![
        Arg::Tensor(random_tensor(t, &dims, seed)),
        Arg::Tensor(random_tensor(t, &dims, seed ^ 0x1111)),
        Arg::Tensor(random_tensor(t, &dims, seed ^ 0x2222)),
        Arg::Tensor(Tensor::zeros(Elem::Num(r), &out_dims(tpl, shape))),
        Arg::Scalar(random_tensor(t, &[1], seed ^ 0x3333).get_bits(0)),
    ];
    let interp = run(&func, &args, [1, 1, 1], false);
    // Fused whole, and with the operation alone in its group, on the
    // blocks its loads produced (the simulator's plan, and the JIT's
    // shortcut for such groups).
    for fusion in [Fusion::Full, Fusion::Compute] {
        let jit = run_text(&func, &args, [1, 1, 1], true, fusion);
        match (&jit, &interp) {
            (Ok(a), Ok(b)) if a[3].bytes() == b[3].bytes() => continue,
            (Err(a), Err(b)) if a == b => continue,
            _ => {}
        }
        let show = |x: &Result<Vec<Tensor>, String>| match x {
            Ok(ts) => format!(
                "{:?}",
                (0..ts[3].numel())
                    .map(|i| format!("{:x}", ts[3].get_bits(i)))
                    .collect::<Vec<_>>()
            ),
            Err(e) => e.clone(),
        };
        return Err(format!(
            "{} on {t} {shape:?} seed {seed} ({fusion:?}): jit {} vs interp {}\n{src}",
            tpl.name,
            show(&jit),
            show(&interp)
        ));
    }
    Ok(true)
}

/// Every operation on every dtype it applies to, two shapes each.
#[test]
fn every_operation_and_dtype_agree() {
    let mut ran = 0;
    let mut failures = Vec::new();
    for tpl in templates() {
        for &t in &DType::ALL {
            for (k, shape) in [Shape::D1(13), Shape::D2(3, 7)].into_iter().enumerate() {
                match check_case(&tpl, t, shape, 42 + k as u64) {
                    Ok(true) => ran += 1,
                    Ok(false) => {}
                    Err(e) => failures.push(e),
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} disagreement(s):\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    eprintln!("{ran} cases ran");
    assert!(ran > 500, "only {ran} cases ran");
}

/// `dot` on every operand dtype, edge shapes included (not multiples of
/// the vector blocks: 4×8 for the generated kernel, 6×16 then 8 columns
/// for the AVX kernel), with and without an accumulator, on both float
/// kernels (the AVX one where the host has it). Small shapes get NaN/Inf
/// and signed zeros often; the larger ones clean data with one planted
/// special value, so that most of their outputs are ordinary sums.
#[test]
fn dot_agrees() {
    use kernbench_compiler::datapath::{jit::Jit, Fusion};
    use kernbench_tests::exec::run_on;
    let mut failures = Vec::new();
    let mut jits = vec![("generated", Jit::verifying().generated_dot())];
    let native = Jit::verifying();
    if native.native_dot() {
        jits.push(("avx", native));
    }
    let shapes = [
        (4, 8, 8),
        (5, 3, 9),
        (1, 1, 1),
        (8, 16, 24),
        (7, 5, 11),
        (13, 7, 27),
        (6, 32, 16),
        (12, 4, 40),
        (3, 9, 8),
    ];
    for (t, out) in [
        (DType::F32, DType::F32),
        (DType::F16, DType::F32),
        (DType::BF16, DType::F32),
        (DType::I8, DType::I32),
        (DType::F16, DType::F16),
    ] {
        for (m, k, n) in shapes {
            for with_acc in [false, true] {
                let acc_expr = if with_acc { ", acc" } else { "" };
                let acc_decl = if with_acc {
                    format!("    acc = tl.load(c + tl.arange(0, {m})[:, None] * {n} + tl.arange(0, {n})[None, :])\n")
                } else {
                    String::new()
                };
                let out_dtype = if out == DType::F16 { ", out_dtype=f16" } else { "" };
                let src = format!(
                    "@kernel\ndef k(a: ptr[{t}], b: ptr[{t}], c: ptr[{out}], out: ptr[{out}]):\n    ta = tl.load(a + tl.arange(0, {m})[:, None] * {k} + tl.arange(0, {k})[None, :])\n    tb = tl.load(b + tl.arange(0, {k})[:, None] * {n} + tl.arange(0, {n})[None, :])\n{acc_decl}    r = tl.dot(ta, tb{acc_expr}{out_dtype})\n    tl.store(out + tl.arange(0, {m})[:, None] * {n} + tl.arange(0, {n})[None, :], r)\n"
                );
                let func = lower(&src, "k", &[]).unwrap_or_else(|e| panic!("{e}\n{src}"));
                let large = m * n > 100;
                let data = |d: DType, dims: &[usize], seed: u64| {
                    if large && d.is_float() {
                        clean_tensor(d, dims, seed)
                    } else {
                        random_tensor(d, dims, seed)
                    }
                };
                let mut a = data(t, &[m, k], 7);
                if large && t.is_float() {
                    // One NaN and one infinity: a row of NaNs, and a row
                    // that is ±Inf or NaN (Inf·0, Inf − Inf) by column.
                    a.set_bits(k + 1, elem::from_f32(t, f32::NAN));
                    a.set_bits(2 * k, elem::from_f32(t, f32::INFINITY));
                }
                let args = vec![
                    Arg::Tensor(a),
                    Arg::Tensor(data(t, &[k, n], 8)),
                    Arg::Tensor(data(out, &[m, n], 9)),
                    Arg::Tensor(Tensor::zeros(Elem::Num(out), &[m, n])),
                ];
                let want = run(&func, &args, [1, 1, 1], false);
                for (name, jit) in jits.iter_mut() {
                    let got = run_on(&func, &args, [1, 1, 1], jit, Fusion::Full);
                    match (got, &want) {
                        (Ok(a), Ok(b)) if a[3].bytes() == b[3].bytes() => {}
                        (a, b) => failures.push(format!(
                            "{name} dot {t}->{out} {m}x{k}x{n} acc={with_acc}: {:?} vs {:?}",
                            a.map(|v| v[3].clone()).map_err(|e| e.error.kind.to_string()),
                            b.as_ref().map(|v| v[3].clone())
                        )),
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Floats uniform in [-4, 4), no special values.
fn clean_tensor(d: DType, dims: &[usize], seed: u64) -> Tensor {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut t = Tensor::zeros(Elem::Num(d), dims);
    for i in 0..t.numel() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let x = ((state >> 11) as f64 / (1u64 << 53) as f64 * 8.0 - 4.0) as f32;
        t.set_bits(i, elem::from_f32(d, x));
    }
    t
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(96)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn random_shapes_and_data_agree(which in 0usize..1000, dt in 0usize..9, two_d in any::<bool>(), m in 1usize..9, n in 1usize..40, seed in any::<u64>()) {
        let tpls = templates();
        let tpl = &tpls[which % tpls.len()];
        let shape = if two_d { Shape::D2(m, n) } else { Shape::D1(n) };
        if let Err(e) = check_case(tpl, DType::ALL[dt], shape, seed) {
            prop_assert!(false, "{}", e);
        }
    }
}

/// Lone loads and stores (the simulator's plan) take the JIT's contiguous
/// copy path when their pointers are consecutive and their masks switch
/// off a tail; strided pointers, masks with holes and accesses past the
/// end take the compiled loop. Both agree with the interpreter.
#[test]
fn lone_loads_and_stores_agree_on_every_path() {
    use kernbench_compiler::datapath::Fusion;
    use kernbench_tests::exec::run_fused;
    let cases = [
        ("offs", "n"),               // contiguous, tail mask
        ("offs", "64"),              // contiguous, all on
        ("offs * 2", "n"),           // strided
        ("63 - offs", "n"),          // reversed
        ("offs", "(offs % 3) != 1"), // holes in the mask
        ("offs + 1", "70"),          // runs past the end: a fault
    ];
    for (ptr, mask) in cases {
        let mask_expr = if mask.contains('%') {
            mask.to_string()
        } else {
            format!("offs < {mask}")
        };
        let src = format!(
            "@kernel\ndef k(x: ptr[f16], y: ptr[f16], n: i32):\n    offs = tl.arange(0, 64)\n    m = {mask_expr}\n    v = tl.load(x + {ptr}, mask=m, other=-2.5)\n    tl.store(y + {ptr}, v, mask=m)\n"
        );
        let func = lower(&src, "k", &[]).unwrap_or_else(|e| panic!("{e}"));
        let mut x = Tensor::zeros(Elem::Num(DType::F16), &[128]);
        for i in 0..128 {
            x.set_bits(i, elem::from_f32(DType::F16, i as f32 * 0.5 - 7.0));
        }
        let args = [
            Arg::Tensor(x),
            Arg::Tensor(Tensor::zeros(Elem::Num(DType::F16), &[128])),
            Arg::Scalar(37),
        ];
        for fusion in [Fusion::None, Fusion::Compute] {
            let jit = run_fused(&func, &args, [1, 1, 1], true, fusion);
            let interp = run_fused(&func, &args, [1, 1, 1], false, fusion);
            match (jit, interp) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{ptr} / {mask}"),
                (Err(a), Err(b)) => assert_eq!(a.error.kind, b.error.kind, "{ptr} / {mask}"),
                (a, b) => panic!(
                    "{ptr} / {mask}: jit {:?} vs interpreter {:?}",
                    a.map(|_| ()),
                    b.map(|_| ())
                ),
            }
        }
    }
}

/// The JIT's vector chunks against the interpreter where a chunk must
/// give up: loop-carried pointer blocks that are strided (never
/// consecutive) beside consecutive ones, tails switched off by masks,
/// broadcasts along either axis, bool blocks crossing group boundaries,
/// and a store whose pointers repeat one address.
#[test]
fn vector_chunks_agree_where_they_give_up() {
    let src = "@kernel
def k(x: ptr[f32], out: ptr[f32], flags: ptr[i32], n: i32):
    offs = tl.arange(0, 32)
    on = offs < n
    strided = x + offs * 2
    straight = x + offs
    acc = tl.zeros((32,), dtype=f32)
    for i in range(3):
        acc += tl.load(strided, mask=on, other=1.5) + tl.load(straight)
        strided += 1
        straight += 1
    rows = tl.arange(0, 4)[:, None] * 8 + tl.arange(0, 8)[None, :]
    row = tl.load(x + tl.arange(0, 8))
    col = tl.load(x + tl.arange(0, 4) * 3)
    grid = tl.load(x + rows) * row[None, :] - col[:, None]
    tl.store(out + 32 + rows, grid, mask=rows < n)
    tl.store(out + offs, acc, mask=on)
    big = acc > 2.0
    tl.store(flags + offs, big.to(i32) + (offs % 5 == 0).to(i32), mask=on)
    tl.store(flags + 40 + offs * 0, offs)
";
    let func = lower(src, "k", &[]).unwrap_or_else(|e| panic!("{e}"));
    for n in [0u64, 3, 29, 32] {
        let args = vec![
            Arg::Tensor(random_tensor(DType::F32, &[128], 7 + n)),
            Arg::Tensor(Tensor::zeros(Elem::Num(DType::F32), &[64])),
            Arg::Tensor(Tensor::zeros(Elem::Num(DType::I32), &[48])),
            Arg::Scalar(n),
        ];
        let jit = run(&func, &args, [1, 1, 1], true).unwrap_or_else(|e| panic!("jit, n = {n}: {e}"));
        let interp = run(&func, &args, [1, 1, 1], false).unwrap_or_else(|e| panic!("interpreter, n = {n}: {e}"));
        for k in 1..3 {
            assert_eq!(jit[k].bytes(), interp[k].bytes(), "tensor {k}, n = {n}");
        }
        // The repeated-address store leaves the last lane's value.
        assert_eq!(jit[2].get_bits(40), 31, "n = {n}");
    }
}

/// With full fusion a store after loads gets a group of its own that
/// recomputes its pointers and mask: the loading group hands over only the
/// stored values, not pointer or mask blocks; the store's group hands
/// over nothing. An aliasing store (into the array the loads read, one
/// element ahead) still sees every load done first.
#[test]
fn a_store_after_loads_recomputes_its_pointers() {
    use kernbench_compiler::datapath::{plan_with, Fusion};
    use kernbench_compiler::ir::Op;
    let src = "@kernel
def k(x: ptr[f32], y: ptr[f32], out: ptr[f32], n: i32):
    offs = tl.arange(0, 64)
    m = offs < n
    a = tl.load(x + offs, mask=m)
    b = tl.load(y + offs, mask=m)
    tl.store(out + offs, a + b, mask=m)
    tl.store(x + offs + 1, a * 2.0, mask=offs < n - 1)
";
    let func = lower(src, "k", &[]).unwrap_or_else(|e| panic!("{e}"));
    let plan = plan_with(&func, Fusion::Full);
    let stores: Vec<_> = plan
        .groups
        .iter()
        .filter(|g| g.insts.iter().any(|i| matches!(func.inst(*i).op, Op::Store { .. })))
        .collect();
    assert_eq!(stores.len(), 2, "{:#?}", plan.groups);
    for g in &stores {
        assert!(g.outputs.is_empty(), "{g:?}");
        assert!(
            g.inputs
                .iter()
                .all(|v| !(matches!(func.ty(*v).elem(), Elem::Ptr(_)) && func.ty(*v).is_block())),
            "a store group reads a pointer block: {g:?}"
        );
    }
    let loading = plan
        .groups
        .iter()
        .find(|g| g.insts.iter().any(|i| matches!(func.inst(*i).op, Op::Load { .. })))
        .expect("a loading group");
    assert!(
        loading
            .outputs
            .iter()
            .all(|v| !matches!(func.ty(*v).elem(), Elem::Ptr(_) | Elem::Num(DType::Bool))),
        "the loading group hands over pointers or masks: {:?}",
        loading
            .outputs
            .iter()
            .map(|v| func.ty(*v).to_string())
            .collect::<Vec<_>>()
    );
    let x = random_tensor(DType::F32, &[64], 11);
    let args = vec![
        Arg::Tensor(x),
        Arg::Tensor(random_tensor(DType::F32, &[64], 12)),
        Arg::Tensor(Tensor::zeros(Elem::Num(DType::F32), &[64])),
        Arg::Scalar(50),
    ];
    let (jit, interp) = jit_and_interp(&func, &args);
    assert_eq!(jit[0].bytes(), interp[0].bytes());
    assert_eq!(jit[2].bytes(), interp[2].bytes());
    // Reference: every load happened before the shifting store.
    let (x0, y0) = match (&args[0], &args[1]) {
        (Arg::Tensor(x), Arg::Tensor(y)) => (x.clone(), y.clone()),
        _ => unreachable!(),
    };
    for i in 0..64usize {
        let (xv, yv) = (
            elem::to_f32(DType::F32, x0.get_bits(i)),
            elem::to_f32(DType::F32, y0.get_bits(i)),
        );
        let want_out = if i < 50 { elem::canon(xv + yv) } else { 0.0 };
        assert_eq!(
            elem::to_f32(DType::F32, jit[2].get_bits(i)).to_bits(),
            want_out.to_bits(),
            "out[{i}]"
        );
        if (1..50).contains(&i) {
            let prev = elem::to_f32(DType::F32, x0.get_bits(i - 1));
            assert_eq!(
                elem::to_f32(DType::F32, jit[0].get_bits(i)).to_bits(),
                elem::canon(prev * 2.0).to_bits(),
                "x[{i}]"
            );
        }
    }
}

/// 16-bit floats move through the vector path untouched (loads, stores,
/// blocks handed between groups), under 2-D masks built from broadcast
/// bools along either axis, with ragged edges.
#[test]
fn half_floats_move_bit_for_bit_under_broadcast_masks() {
    for t in ["f16", "bf16"] {
        let src = format!(
            "@kernel
def k(x: ptr[{t}], y: ptr[{t}], rows: i32, cols: i32):
    r = tl.arange(0, 8)
    c = tl.arange(0, 24)
    row_ok = r[:, None] < rows
    col_ok = c[None, :] < cols
    offs = r[:, None] * 24 + c[None, :]
    v = tl.load(x + offs, mask=row_ok & col_ok, other=-3.5)
    tl.store(y + offs, v, mask=row_ok | col_ok)
"
        );
        let func = lower(&src, "k", &[]).unwrap_or_else(|e| panic!("{e}"));
        let d = if t == "f16" { DType::F16 } else { DType::BF16 };
        for (rows, cols) in [(8u64, 24u64), (5, 24), (8, 17), (3, 5), (0, 0)] {
            let args = vec![
                Arg::Tensor(random_tensor(d, &[8, 24], rows * 31 + cols)),
                Arg::Tensor(Tensor::zeros(Elem::Num(d), &[8, 24])),
                Arg::Scalar(rows),
                Arg::Scalar(cols),
            ];
            let (jit, interp) = jit_and_interp(&func, &args);
            assert_eq!(jit[1].bytes(), interp[1].bytes(), "{t} {rows}x{cols}");
            if rows == 8 && cols == 24 {
                assert_eq!(jit[1].bytes(), jit[0].bytes(), "{t}: a full copy");
            }
        }
    }
}

/// The JIT keeps each group's segment caches from one call to the next
/// while the memory's layout is unchanged. One JIT running the same kernel
/// on two memories whose allocations sit at the same addresses must write
/// into the memory it is given (a cache carried over from the first would
/// write into the first's buffers), and a memory that grows between
/// launches is seen whole.
#[test]
fn segment_caches_never_outlive_the_memory_layout() {
    use kernbench_compiler::datapath::{jit::Jit, plan, DataPath, RtValue};
    use kernbench_runtime::exec::{run_grid, FlatMemory};
    let src = "@kernel
def k(x: ptr[f32], y: ptr[f32], n: i32):
    offs = tl.program_id(0) * 64 + tl.arange(0, 64)
    m = offs < n
    tl.store(y + offs, tl.load(x + offs, mask=m) * 2.0, mask=m)
";
    let func = lower(src, "k", &[]).unwrap_or_else(|e| panic!("{e}"));
    let p = plan(&func, true);
    let mut jit = Jit::verifying();
    jit.prepare(&func, &p).expect("compiles");
    let bytes = |v: f32, n: usize| (0..n).flat_map(|_| v.to_le_bytes()).collect::<Vec<u8>>();
    let launch = |jit: &mut Jit, mem: &mut FlatMemory, x: u64, y: u64| {
        let args = [RtValue::Scalar(x), RtValue::Scalar(y), RtValue::Scalar(256)];
        run_grid(&func, &p, jit as &mut dyn DataPath, mem, [4, 1, 1], &args, None).expect("runs");
    };
    let mut a = FlatMemory::new();
    let (xa, ya) = (a.alloc("x", bytes(1.0, 256)), a.alloc("y", bytes(0.0, 256)));
    launch(&mut jit, &mut a, xa, ya);
    let mut b = FlatMemory::new();
    let (xb, yb) = (b.alloc("x", bytes(3.0, 256)), b.alloc("y", bytes(0.0, 256)));
    assert_eq!((xa, ya), (xb, yb), "the same layout, other buffers");
    launch(&mut jit, &mut b, xb, yb);
    let y = |m: &FlatMemory| m.segment_named("y").map(|s| s.data.clone()).unwrap_or_default();
    assert!(y(&a) == bytes(2.0, 256), "the first memory keeps its result");
    assert!(
        y(&b) == bytes(6.0, 256),
        "the second launch wrote into the second memory"
    );
    // A memory that grows: the third launch reads the new allocation.
    let z = b.alloc("z", bytes(5.0, 256));
    launch(&mut jit, &mut b, z, yb);
    assert!(y(&b) == bytes(10.0, 256), "the third launch read the new allocation");
}

/// `maximum`/`minimum` on vector chunks and on the scalar tail, on the
/// pairs random data rarely holds: ±0 against ∓0, NaN against numbers and
/// NaN, ±Inf. Both data paths give `elem`'s answer lane by lane.
#[test]
fn max_and_min_order_zeros_and_ignore_nans_on_every_path() {
    let src = "@kernel
def k(x: ptr[f32], y: ptr[f32], hi: ptr[f32], lo: ptr[f32]):
    offs = tl.arange(0, 19)
    a = tl.load(x + offs)
    b = tl.load(y + offs)
    tl.store(hi + offs, tl.maximum(a, b))
    tl.store(lo + offs, tl.minimum(a, b))
";
    let func = lower(src, "k", &[]).unwrap_or_else(|e| panic!("{e}"));
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    let pairs: [(f32, f32); 19] = [
        (-0.0, 0.0),
        (0.0, -0.0),
        (-0.0, -0.0),
        (0.0, 0.0),
        (nan, 1.0),
        (1.0, nan),
        (nan, nan),
        (-inf, inf),
        (inf, -inf),
        (-1.5, -2.5),
        (2.0, 3.0),
        (nan, -0.0),
        (-0.0, nan),
        (0.0, -0.0),
        (-0.0, 0.0),
        (7.0, 7.0),
        (-0.0, 0.0),
        (0.0, -0.0),
        (nan, inf),
    ];
    let tensor = |vals: Vec<f32>| {
        let mut t = Tensor::zeros(Elem::Num(DType::F32), &[19]);
        for (i, v) in vals.into_iter().enumerate() {
            t.set_bits(i, v.to_bits() as u64);
        }
        t
    };
    let args = vec![
        Arg::Tensor(tensor(pairs.iter().map(|p| p.0).collect())),
        Arg::Tensor(tensor(pairs.iter().map(|p| p.1).collect())),
        Arg::Tensor(Tensor::zeros(Elem::Num(DType::F32), &[19])),
        Arg::Tensor(Tensor::zeros(Elem::Num(DType::F32), &[19])),
    ];
    let (jit, interp) = jit_and_interp(&func, &args);
    for (k, op) in [
        (2, kernbench_compiler::ir::BinaryOp::Max),
        (3, kernbench_compiler::ir::BinaryOp::Min),
    ] {
        for (i, (a, b)) in pairs.iter().enumerate() {
            let want = elem::binary(op, DType::F32, a.to_bits() as u64, b.to_bits() as u64).expect("no division");
            assert_eq!(jit[k].get_bits(i), want, "jit {op:?}({a}, {b}) at lane {i}");
            assert_eq!(interp[k].get_bits(i), want, "interpreter {op:?}({a}, {b}) at lane {i}");
        }
    }
}

/// Pointer and index blocks travel as formulas (`datapath::affine`) where
/// they are affine: loop-carried tiles moved by a scalar, masks and fills
/// around them. Where a formula would not be exact — offsets whose exact
/// values leave i32 and wrap lane by lane, a product of two varying
/// blocks, a reshape that mixes axes, a reversed range — the elements are
/// computed instead. Every case must match the interpreter (which never
/// uses formulas) bit for bit, and the formula path must actually run.
#[test]
fn affine_blocks_agree_with_elements_at_their_limits() {
    use kernbench_compiler::datapath::{jit::Jit, Fusion};
    use kernbench_tests::exec::run_on;
    let src = "@kernel
def tiles(x: ptr[i32], out: ptr[i32], n: i32, stride: i32):
    r = tl.arange(0, 8)
    c = tl.arange(0, 16)
    p = x + r[:, None] * stride + c[None, :]
    q = out + r[:, None] * 16 + c[None, :]
    every_other = x + r[:, None] * stride + c[None, :] * 2
    idx = r[:, None] * 16 + c[None, :]
    for it in range(0, 3):
        v = tl.load(p, mask=(r[:, None] < n) & (c[None, :] < n + it), other=-1)
        tl.store(q, v + it)
        tl.store(q + 384, tl.load(every_other))
        tl.store(q + 768, idx)
        p += 3
        q += 128
        every_other += 1
        idx += stride

@kernel
def wrap(x: ptr[i32], out: ptr[i32], k: i32, m: i32):
    o = (tl.arange(0, 4) + k) * m
    tl.store(out + tl.arange(0, 4), tl.load(x + o))

@kernel
def shapes(x: ptr[i32], out: ptr[i32]):
    rev = 15 - tl.arange(0, 16)
    tl.store(out + tl.arange(0, 16), tl.load(x + rev))
    sq = tl.arange(0, 4)[:, None] * tl.arange(0, 4)[None, :]
    tl.store(out + 16 + tl.arange(0, 16), tl.load(x + tl.reshape(sq, [16])))
    mixed = tl.reshape(tl.arange(0, 16), [4, 4])
    tl.store(out + 32 + mixed, tl.load(x + mixed * 2))

@kernel
def splats(x: ptr[i32], out: ptr[i32], k: i32):
    r = tl.arange(0, 4)
    s = tl.broadcast_to(k, [4])
    t = tl.broadcast_to(tl.reshape(s, [1, 4]), [3, 4])
    tl.store(out + r, s)
    tl.store(out + 4 + tl.arange(0, 12), tl.reshape(t, [12]))
    tl.store(out + 16 + r, tl.load(x + s + r, mask=(s + r >= 0) & (s + r < 40), other=-1))
";
    let i32s = |n: usize, seed: u64| random_tensor(DType::I32, &[n], seed);
    let zeros = |n: usize| Tensor::zeros(Elem::Num(DType::I32), &[n]);
    let int = |v: i64| Arg::Scalar(elem::from_i64(DType::I32, v));
    let cases: Vec<(&str, Vec<Arg>)> = vec![
        (
            "tiles",
            vec![Arg::Tensor(i32s(192, 1)), Arg::Tensor(zeros(1152)), int(6), int(20)],
        ),
        (
            "tiles",
            vec![Arg::Tensor(i32s(192, 2)), Arg::Tensor(zeros(1152)), int(8), int(20)],
        ),
        // Exact offsets (i + 65536)·65536 exceed i32; the lanes wrap to
        // i·65536, which is where the loads go.
        (
            "wrap",
            vec![
                Arg::Tensor(i32s(3 * 65536 + 1, 3)),
                Arg::Tensor(zeros(4)),
                int(65536),
                int(65536),
            ],
        ),
        ("shapes", vec![Arg::Tensor(i32s(32, 4)), Arg::Tensor(zeros(48))]),
        // Splats (kept as their scalar while evaluated symbolically),
        // broadcast and reshaped, stored as data and used as offsets.
        ("splats", vec![Arg::Tensor(i32s(40, 5)), Arg::Tensor(zeros(20)), int(7)]),
        (
            "splats",
            vec![Arg::Tensor(i32s(40, 6)), Arg::Tensor(zeros(20)), int(38)],
        ),
        (
            "splats",
            vec![Arg::Tensor(i32s(40, 7)), Arg::Tensor(zeros(20)), int(-2_000_000_000)],
        ),
    ];
    for (kernel, args) in cases {
        let func = lower(src, kernel, &[]).unwrap_or_else(|e| panic!("{e}"));
        let want = run(&func, &args, [1, 1, 1], false).unwrap_or_else(|e| panic!("{kernel}: {e}"));
        // Full fusion keeps pointers inside load and store groups where it
        // can; compute fusion (the simulator's) hands every one over.
        for fusion in [Fusion::Full, Fusion::Compute] {
            let mut jit = Jit::verifying();
            let got = run_on(&func, &args, [1, 1, 1], &mut jit, fusion)
                .unwrap_or_else(|e| panic!("{kernel}: {} at {:?}", e.error.kind, e.error.inst));
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(
                    g.bytes(),
                    w.bytes(),
                    "{kernel} ({fusion:?}): JIT and interpreter differ"
                );
            }
            if kernel == "tiles" || fusion == Fusion::Compute {
                assert!(
                    jit.formula_outputs > 0,
                    "{kernel} ({fusion:?}): no block travelled as a formula"
                );
            }
            if kernel == "tiles" {
                assert!(
                    jit.formula_only_runs > 0,
                    "{kernel} ({fusion:?}): every pointer group still ran"
                );
            }
            if kernel == "wrap" {
                let Arg::Tensor(x) = &args[0] else { unreachable!() };
                for i in 0..4 {
                    assert_eq!(got[1].get_bits(i), x.get_bits(i * 65536), "wrap ({fusion:?}): lane {i}");
                }
            }
        }
    }
}

/// A sweep of loop-carried 2-D tiles: rows and columns of 1 (where
/// formulas drop the axis's stride) to 17 (vector chunks and a scalar
/// tail), row strides wider than a row, and negative ones (pointers that
/// walk down), masked columns with a fill value, under both fusion modes:
/// the JIT, with formulas, gives the interpreter's bits.
#[test]
fn affine_tiles_sweep() {
    use kernbench_compiler::datapath::{jit::Jit, Fusion};
    use kernbench_compiler::sema::types::Konst;
    use kernbench_tests::exec::run_on;
    let src = "@kernel
def sweep(x: ptr[i32], out: ptr[i32], base: i32, stride: i32, n: i32, R: constexpr, C: constexpr):
    r = tl.arange(0, R)
    c = tl.arange(0, C)
    p = x + base + r[:, None] * stride + c[None, :]
    q = out + r[:, None] * C + c[None, :]
    for it in range(0, 3):
        v = tl.load(p, mask=c[None, :] < n, other=7)
        tl.store(q + it * R * C, v * 3 + r[:, None])
        p += stride
";
    let int = |v: i64| Arg::Scalar(elem::from_i64(DType::I32, v));
    let mut formulas = 0;
    for (rows, cols) in [(1i64, 1i64), (1, 17), (3, 5), (8, 16), (17, 4)] {
        let func =
            lower(src, "sweep", &[("R", Konst::Int(rows)), ("C", Konst::Int(cols))]).unwrap_or_else(|e| panic!("{e}"));
        for stride in [cols, cols + 3, -cols - 1] {
            // Keep every pointer of the three steps inside x.
            let reach = (rows + 3) * stride.abs();
            let base = if stride < 0 { reach } else { 0 };
            let len = (base + reach + cols) as usize;
            let args = vec![
                Arg::Tensor(random_tensor(DType::I32, &[len], (rows * 31 + cols) as u64)),
                Arg::Tensor(Tensor::zeros(Elem::Num(DType::I32), &[(3 * rows * cols) as usize])),
                int(base),
                int(stride),
                int(cols - 1),
            ];
            let want = run(&func, &args, [1, 1, 1], false).unwrap_or_else(|e| panic!("{e}"));
            for fusion in [Fusion::Full, Fusion::Compute] {
                let mut jit = Jit::verifying();
                let got = run_on(&func, &args, [1, 1, 1], &mut jit, fusion).unwrap_or_else(|e| {
                    panic!("{rows}x{cols} stride {stride}: {} at {:?}", e.error.kind, e.error.inst)
                });
                assert_eq!(
                    got[1].bytes(),
                    want[1].bytes(),
                    "{rows}x{cols} stride {stride} ({fusion:?}): JIT and interpreter differ"
                );
                formulas += jit.formula_outputs;
            }
        }
    }
    assert!(formulas > 0, "no tile pointer travelled as a formula");
}

/// Masks made of comparisons of affine blocks with scalars, and `&` of
/// those, travel as formulas (`datapath::affine::Mask`): read off as a box
/// by the copy fast path and the simulator, stored as elements where a
/// compiled group takes them. Every comparison, signed and unsigned, on
/// one and two axes, including a `!=` that switches off one inner lane, a
/// condition on both axes (not a box), lanes that wrap in i32 (no formula
/// then), a mask reshaped, and a mask stored as data: the JIT must give
/// the interpreter's bits at bounds before, inside and past the block, and
/// the formulas must be used.
#[test]
fn mask_formulas_agree_with_elements() {
    use kernbench_compiler::datapath::{jit::Jit, Fusion};
    use kernbench_tests::exec::run_on;
    let src = "@kernel
def masks(x: ptr[i32], out: ptr[i32], n: i32, k: i32, u: u32):
    r = tl.arange(0, 4)
    c = tl.arange(0, 16)
    lanes = tl.arange(0, 64)
    p = x + r[:, None] * 16 + c[None, :]
    o = out + r[:, None] * 16 + c[None, :]
    tl.store(o, tl.load(p, mask=(r[:, None] < k) & (c[None, :] >= n), other=-1))
    tl.store(o + 64, tl.load(p, mask=(r[:, None] * 16 + c[None, :]) < n, other=-2))
    tl.store(o + 128, tl.load(p, mask=(c[None, :] != n) & (r[:, None] == k), other=-3))
    tl.store(out + 192 + lanes, tl.load(x + lanes, mask=lanes <= n, other=-4), mask=lanes > k)
    tl.store(out + 256 + lanes, tl.load(x + lanes, mask=(lanes + 2147483600) < n + 2147483600, other=-5))
    tl.store(out + 320 + lanes, tl.load(x + lanes, mask=lanes.to(u32) < u, other=-6))
    tl.store(o + 384, (tl.reshape(c[None, :] < n, [16])[None, :] | (r[:, None] > k)).to(i32))
    tl.store(out + 448 + lanes, (lanes * -1 > -n).to(i32), mask=lanes < n + k)
";
    let func = lower(src, "masks", &[]).unwrap_or_else(|e| panic!("{e}"));
    let int = |v: i64| Arg::Scalar(elem::from_i64(DType::I32, v));
    let mut formulas = 0;
    for (n, k) in [
        (-1i64, -1i64),
        (0, 0),
        (5, 2),
        (15, 3),
        (16, 1),
        (40, 4),
        (63, 70),
        (64, 0),
        (2000, 10),
    ] {
        let args = vec![
            Arg::Tensor(random_tensor(DType::I32, &[64], (n + 100) as u64)),
            Arg::Tensor(Tensor::zeros(Elem::Num(DType::I32), &[512])),
            int(n),
            int(k),
            Arg::Scalar(elem::from_i64(DType::U32, n.max(0))),
        ];
        let want = run(&func, &args, [1, 1, 1], false).unwrap_or_else(|e| panic!("{e}"));
        for fusion in [Fusion::Full, Fusion::Compute] {
            let mut jit = Jit::verifying();
            let got = run_on(&func, &args, [1, 1, 1], &mut jit, fusion)
                .unwrap_or_else(|e| panic!("n {n} k {k}: {} at {:?}", e.error.kind, e.error.inst));
            for part in 0..8 {
                let bytes = |t: &Tensor| t.bytes()[part * 256..(part + 1) * 256].to_vec();
                assert_eq!(
                    bytes(&got[1]),
                    bytes(&want[1]),
                    "n {n} k {k} ({fusion:?}): store {part} differs from the interpreter"
                );
            }
            formulas += jit.mask_formula_outputs;
        }
    }
    assert!(formulas > 0, "no mask travelled as a formula");
}

/// A mask `offs < n` whose bound falls inside a vector chunk, on buffers
/// longer than `n`: the lanes past the bound must be neither loaded (they
/// take `other`) nor stored, though every byte is inside the allocation
/// (so only the mask, not the bounds check, keeps them out).
#[test]
fn arange_masks_stop_inside_a_chunk() {
    let src = "@kernel
def k(x: ptr[i32], out: ptr[i32], n: i32, lo: i32):
    offs = lo + tl.arange(0, 64)
    v = tl.load(x + offs, mask=offs < n, other=-5)
    tl.store(out + offs, v + 1, mask=offs <= n)
";
    let func = lower(src, "k", &[]).unwrap_or_else(|e| panic!("{e}"));
    let int = |v: i64| Arg::Scalar(elem::from_i64(DType::I32, v));
    for (n, lo) in [(37, 0), (20, 3), (63, 0), (70, 1), (0, 0), (-1, 0)] {
        let args = vec![
            Arg::Tensor(random_tensor(DType::I32, &[96], 41)),
            Arg::Tensor(Tensor::zeros(Elem::Num(DType::I32), &[96])),
            int(n),
            int(lo),
        ];
        let (jit, interp) = jit_and_interp(&func, &args);
        assert_eq!(jit[1].bytes(), interp[1].bytes(), "n = {n}, lo = {lo}");
        // Independent reference: out[i] = x[i] + 1 for i < n, other + 1 at
        // i == n, untouched beyond.
        let Arg::Tensor(x) = &args[0] else { unreachable!() };
        for i in 0..96i64 {
            let got = elem::to_i64(DType::I32, jit[1].get_bits(i as usize));
            let in_block = i >= lo && i < lo + 64;
            let want = if !in_block || i > n {
                0
            } else if i < n {
                elem::to_i64(DType::I32, x.get_bits(i as usize)) + 1
            } else {
                -4
            };
            assert_eq!(got, want, "n = {n}, lo = {lo}, i = {i}");
        }
    }
}

/// Spans: after one checked vector chunk, a probe of the row's last whole
/// chunk lets every chunk between run with no checks. That is right only
/// where the checks move linearly along the row, so the span must stop
/// (and the chunks go back to being checked one by one) where a mask
/// `s + arange < n` turns off, where `s + arange` wraps past `i32::MAX`
/// (the lanes stop growing: on, off, then on again), and where the row's
/// bytes leave an allocation in its last chunk only (an error that the
/// JIT must report just as the interpreter does).
#[test]
fn spans_stop_where_a_chunk_would_fail_its_checks() {
    let masked = "@kernel
def k(x: ptr[i32], out: ptr[i32], n: i32, s: i32):
    i = tl.arange(0, 128)
    offs = s + i
    v = tl.load(x + i, mask=offs < n, other=-5)
    tl.store(out + i, v + 1)
";
    let func = lower(masked, "k", &[]).unwrap_or_else(|e| panic!("{e}"));
    let int = |v: i64| Arg::Scalar(elem::from_i64(DType::I32, v));
    let max = i32::MAX as i64;
    let cases = [
        (max, max - 20),
        (max, max - 100),
        (max - 3, max - 127),
        (100, 0),
        (10, -50),
        (0, i32::MIN as i64),
        (max, 0),
    ];
    for (n, s) in cases {
        let args = vec![
            Arg::Tensor(random_tensor(DType::I32, &[128], 43)),
            Arg::Tensor(Tensor::zeros(Elem::Num(DType::I32), &[128])),
            int(n),
            int(s),
        ];
        let (jit, interp) = jit_and_interp(&func, &args);
        assert_eq!(jit[1].bytes(), interp[1].bytes(), "n = {n}, s = {s}");
        // Independent reference, with i32 wrapping.
        let Arg::Tensor(x) = &args[0] else { unreachable!() };
        for i in 0..128 {
            let on = (s as i32).wrapping_add(i as i32) < n as i32;
            let v = if on {
                elem::to_i64(DType::I32, x.get_bits(i))
            } else {
                -5
            };
            let got = elem::to_i64(DType::I32, jit[1].get_bits(i));
            assert_eq!(got, (v as i32).wrapping_add(1) as i64, "n = {n}, s = {s}, i = {i}");
        }
    }

    // Loads and stores whose last chunk alone leaves the allocation.
    let shifted = "@kernel
def k(x: ptr[f32], out: ptr[f32], lo: i32, to: i32):
    i = tl.arange(0, 64)
    v = tl.load(x + lo + i)
    tl.store(out + to + i, v * 2.0)
";
    let func = lower(shifted, "k", &[]).unwrap_or_else(|e| panic!("{e}"));
    for (lo, to) in [(0, 0), (36, 0), (37, 0), (0, 36), (0, 37), (49, 0), (0, 1)] {
        let args = vec![
            Arg::Tensor(random_tensor(DType::F32, &[100], 44)),
            Arg::Tensor(Tensor::zeros(Elem::Num(DType::F32), &[100])),
            int(lo),
            int(to),
        ];
        let jit = run(&func, &args, [1, 1, 1], true);
        let interp = run(&func, &args, [1, 1, 1], false);
        let in_bounds = lo + 64 <= 100 && to + 64 <= 100;
        assert_eq!(jit.is_ok(), in_bounds, "lo = {lo}, to = {to}: {jit:?}");
        match (jit, interp) {
            (Ok(j), Ok(i)) => assert_eq!(j[1].bytes(), i[1].bytes(), "lo = {lo}, to = {to}"),
            (Err(j), Err(i)) => assert_eq!(j, i, "lo = {lo}, to = {to}"),
            (j, i) => panic!("lo = {lo}, to = {to}: jit {j:?}, interpreter {i:?}"),
        }
    }
}
