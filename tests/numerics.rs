//! Every stdlib kernel on several shapes — block multiples and not — against
//! an independent ndarray reference computed here in Rust (in f64 where the
//! kernel computes in f32, with a stated tolerance; exactly where the result
//! is exactly defined).

use kernbench_compiler::datapath::{elem, Tensor};
use kernbench_compiler::sema::types::{DType, Elem, Konst};
use kernbench_runtime::args::random_tensor;
use kernbench_tests::exec::{lower, run, Arg};
use ndarray::{Array1, Array2};

fn stdlib(path: &str) -> String {
    std::fs::read_to_string(kernbench_tests::repo_root().join("stdlib").join(path)).expect("stdlib source")
}

fn f32s(t: &Tensor) -> Vec<f32> {
    (0..t.numel()).map(|i| elem::to_f32(t.dtype(), t.get_bits(i))).collect()
}

fn i32_arg(v: i64) -> Arg {
    Arg::Scalar(elem::from_i64(DType::I32, v))
}

fn cdiv(a: usize, b: usize) -> u32 {
    a.div_ceil(b) as u32
}

/// |got - want| <= abs + rel·|want| for every element.
fn assert_close(what: &str, got: &[f32], want: &[f64], abs: f64, rel: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (*g as f64 - w).abs();
        assert!(
            err <= abs + rel * w.abs(),
            "{what}: element {i}: got {g}, want {w} (error {err:e})"
        );
    }
}

#[test]
fn add_matches_elementwise_sum_exactly() {
    let src = stdlib("kernels/add.tl");
    for (n, block) in [
        (1usize, 1024i64),
        (1000, 1024),
        (1024, 1024),
        (5000, 1024),
        (777, 128),
        (4096, 256),
    ] {
        let func = lower(&src, "add", &[("BLOCK", Konst::Int(block))]).expect("add lowers");
        let (x, y) = (random_tensor(DType::F32, &[n], 1), random_tensor(DType::F32, &[n], 2));
        let args = vec![
            Arg::Tensor(x.clone()),
            Arg::Tensor(y.clone()),
            Arg::Tensor(Tensor::zeros(Elem::Num(DType::F32), &[n])),
            i32_arg(n as i64),
        ];
        let out = run(&func, &args, [cdiv(n, block as usize), 1, 1], true).expect("add runs");
        let want = Array1::from(f32s(&x)) + Array1::from(f32s(&y));
        assert_eq!(f32s(&out[2]), want.to_vec(), "add n={n} BLOCK={block}");
    }
}

fn softmax_ref(x: &Array2<f64>) -> Array2<f64> {
    let mut out = x.clone();
    for mut row in out.rows_mut() {
        let m = row.fold(f64::NEG_INFINITY, |a, &b| a.max(b));
        row.mapv_inplace(|v| (v - m).exp());
        let s = row.sum();
        row.mapv_inplace(|v| v / s);
    }
    out
}

#[test]
fn softmax_matches_reference() {
    let src = stdlib("kernels/softmax.tl");
    for (rows, cols, block) in [
        (1usize, 1usize, 16i64),
        (7, 100, 128),
        (33, 1000, 1024),
        (4, 1024, 1024),
        (5, 3, 4),
    ] {
        let func = lower(&src, "softmax", &[("BLOCK", Konst::Int(block))]).expect("softmax lowers");
        let x = random_tensor(DType::F32, &[rows, cols], 3);
        let args = vec![
            Arg::Tensor(x.clone()),
            Arg::Tensor(Tensor::zeros(Elem::Num(DType::F32), &[rows, cols])),
            i32_arg(rows as i64),
            i32_arg(cols as i64),
            i32_arg(cols as i64),
        ];
        let out = run(&func, &args, [8, 1, 1], true).expect("softmax runs");
        let xs = Array2::from_shape_vec((rows, cols), f32s(&x).into_iter().map(f64::from).collect()).expect("shape");
        let want = softmax_ref(&xs);
        assert_close(
            &format!("softmax {rows}x{cols}"),
            &f32s(&out[1]),
            want.as_slice().expect("contiguous"),
            1e-7,
            2e-6,
        );
    }
}

#[test]
fn layernorm_matches_reference() {
    let src = stdlib("kernels/layernorm.tl");
    for (rows, cols, block) in [(1usize, 1usize, 16i64), (3, 100, 128), (9, 1024, 1024), (5, 7, 8)] {
        let func = lower(&src, "layernorm", &[("BLOCK", Konst::Int(block))]).expect("layernorm lowers");
        let (x, w, b) = (
            random_tensor(DType::F32, &[rows, cols], 4),
            random_tensor(DType::F32, &[cols], 5),
            random_tensor(DType::F32, &[cols], 6),
        );
        let eps = 1e-5f32;
        let args = vec![
            Arg::Tensor(x.clone()),
            Arg::Tensor(w.clone()),
            Arg::Tensor(b.clone()),
            Arg::Tensor(Tensor::zeros(Elem::Num(DType::F32), &[rows, cols])),
            i32_arg(rows as i64),
            i32_arg(cols as i64),
            Arg::Scalar(eps.to_bits() as u64),
        ];
        let out = run(&func, &args, [4, 1, 1], true).expect("layernorm runs");
        let xs = Array2::from_shape_vec((rows, cols), f32s(&x).into_iter().map(f64::from).collect()).expect("shape");
        let (ws, bs): (Vec<f64>, Vec<f64>) = (
            f32s(&w).into_iter().map(f64::from).collect(),
            f32s(&b).into_iter().map(f64::from).collect(),
        );
        let mut want = Vec::new();
        for row in xs.rows() {
            let mean = row.sum() / cols as f64;
            let var = row.mapv(|v| (v - mean) * (v - mean)).sum() / cols as f64;
            let inv = 1.0 / (var + eps as f64).sqrt();
            want.extend(row.iter().enumerate().map(|(j, v)| (v - mean) * inv * ws[j] + bs[j]));
        }
        assert_close(&format!("layernorm {rows}x{cols}"), &f32s(&out[3]), &want, 1e-5, 1e-4);
    }
}

#[test]
fn gemm_matches_reference() {
    let src = stdlib("kernels/gemm.tl");
    for (m, n, k, bm, bn, bk) in [
        (64usize, 64usize, 32usize, 32i64, 32i64, 16i64),
        (50, 70, 40, 16, 32, 16),
        (1, 1, 1, 16, 16, 16),
        (129, 65, 33, 64, 32, 32),
    ] {
        let defines = [
            ("BLOCK_M", Konst::Int(bm)),
            ("BLOCK_N", Konst::Int(bn)),
            ("BLOCK_K", Konst::Int(bk)),
        ];
        let func = lower(&src, "gemm", &defines).expect("gemm lowers");
        let (a, b) = (
            random_tensor(DType::F16, &[m, k], 7),
            random_tensor(DType::F16, &[k, n], 8),
        );
        let strides = [k, 1, n, 1, n, 1];
        let mut args = vec![
            Arg::Tensor(a.clone()),
            Arg::Tensor(b.clone()),
            Arg::Tensor(Tensor::zeros(Elem::Num(DType::F32), &[m, n])),
        ];
        args.extend([m, n, k].iter().chain(&strides).map(|v| i32_arg(*v as i64)));
        let grid = cdiv(m, bm as usize) * cdiv(n, bn as usize);
        let out = run(&func, &args, [grid, 1, 1], true).expect("gemm runs");
        let am = Array2::from_shape_vec((m, k), f32s(&a).into_iter().map(f64::from).collect()).expect("shape");
        let bmat = Array2::from_shape_vec((k, n), f32s(&b).into_iter().map(f64::from).collect()).expect("shape");
        let want = am.dot(&bmat);
        // f16 products are exact in f32; each of the k sums rounds once.
        assert_close(
            &format!("gemm {m}x{n}x{k}"),
            &f32s(&out[2]),
            want.as_slice().expect("contiguous"),
            1e-6,
            k as f64 * 1.2e-7,
        );
    }
}

/// `gemm_composite.tl` (`tl.gemm`, the PE's tiled GEMM) computes the same
/// bits as the hand-tiled `gemm.tl` (both add the products in the order
/// k = 0, 1, 2, ... in f32), on one program and on row blocks of several,
/// ragged ones and one with no rows included.
#[test]
fn gemm_composite_equals_the_tiled_gemm() {
    let composite = lower(&stdlib("kernels/gemm_composite.tl"), "gemm_composite", &[]).expect("lowers");
    let defines = [
        ("BLOCK_M", Konst::Int(16)),
        ("BLOCK_N", Konst::Int(32)),
        ("BLOCK_K", Konst::Int(16)),
    ];
    let tiled = lower(&stdlib("kernels/gemm.tl"), "gemm", &defines).expect("lowers");
    for (m, n, k, programs) in [
        (50usize, 70usize, 40usize, 1u32),
        (50, 70, 40, 3),
        (5, 9, 33, 4),
        (64, 64, 32, 2),
    ] {
        let (a, b) = (
            random_tensor(DType::F16, &[m, k], 21),
            random_tensor(DType::F16, &[k, n], 22),
        );
        let operands = || {
            vec![
                Arg::Tensor(a.clone()),
                Arg::Tensor(b.clone()),
                Arg::Tensor(Tensor::zeros(Elem::Num(DType::F32), &[m, n])),
            ]
        };
        let mut args = operands();
        args.extend([m, n, k].iter().map(|v| i32_arg(*v as i64)));
        let got = run(&composite, &args, [programs, 1, 1], true).expect("gemm_composite runs");
        let mut args = operands();
        args.extend([m, n, k, k, 1, n, 1, n, 1].iter().map(|v| i32_arg(*v as i64)));
        let want = run(&tiled, &args, [cdiv(m, 16) * cdiv(n, 32), 1, 1], true).expect("gemm runs");
        assert_eq!(got[2].bytes(), want[2].bytes(), "{m}x{n}x{k} on {programs} programs");
        assert!(f32s(&got[2]).iter().any(|v| *v != 0.0), "{m}x{n}x{k}: all zeros");
    }
}

/// The interpreter computes the same bits as the JIT on the stdlib kernels.
#[test]
fn stdlib_kernels_jit_equals_interpreter() {
    let src = stdlib("kernels/gemm.tl");
    let defines = [
        ("BLOCK_M", Konst::Int(16)),
        ("BLOCK_N", Konst::Int(16)),
        ("BLOCK_K", Konst::Int(8)),
    ];
    let func = lower(&src, "gemm", &defines).expect("gemm lowers");
    let (m, n, k) = (20usize, 18usize, 13usize);
    let mut args = vec![
        Arg::Tensor(random_tensor(DType::F16, &[m, k], 9)),
        Arg::Tensor(random_tensor(DType::F16, &[k, n], 10)),
        Arg::Tensor(Tensor::zeros(Elem::Num(DType::F32), &[m, n])),
    ];
    args.extend([m, n, k, k, 1, n, 1, n, 1].iter().map(|v| i32_arg(*v as i64)));
    let j = run(&func, &args, [4, 1, 1], true).expect("jit");
    let i = run(&func, &args, [4, 1, 1], false).expect("interp");
    assert_eq!(j[2].bytes(), i[2].bytes());
}
