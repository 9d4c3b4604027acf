//! Tensor-parallel layers (`kernbench_runtime::tp`) against an ndarray
//! reference, at one and two ranks and on several PEs per rank; the
//! ranks' GEMMs run side by side in simulated time; the async-TP fused
//! GEMMs match the reference and hide their communication; misuse is an
//! error that says what is wrong.

use kernbench_compiler::sema::DType;
use kernbench_runtime::host::{spawn, Ctx, DpPolicy, Runtime};
use kernbench_runtime::topology::Topology;
use kernbench_runtime::tp::{
    fused_all_gather_matmul, fused_matmul_reduce_scatter, initialize_model_parallel, ColumnParallelLinear,
    LinearOptions, MlpOptions, ParallelMlp, ParallelState, RowParallelLinear,
};
use kernbench_tests::f16_values;
use ndarray::{Array1, Array2, ArrayD, Ix2};
use std::sync::Mutex;

fn matrix(rows: usize, cols: usize, seed: u64) -> Array2<f32> {
    Array2::from_shape_vec((rows, cols), f16_values(rows * cols, seed)).unwrap()
}

fn vector(n: usize, seed: u64) -> Array1<f32> {
    Array1::from_vec(f16_values(n, seed))
}

fn f16s(a: &Array2<f32>) -> ArrayD<half::f16> {
    a.mapv(half::f16::from_f32).into_dyn()
}

/// `x @ w + b` in f64.
fn linear_ref(x: &Array2<f32>, w: &Array2<f32>, b: Option<&Array1<f32>>) -> Array2<f64> {
    let mut y = x.mapv(f64::from).dot(&w.mapv(f64::from));
    if let Some(b) = b {
        y += &b.mapv(f64::from);
    }
    y
}

/// The sigmoid GELU of `tp.tl`, rounded to f16 as the kernel stores it.
fn gelu_f16(v: f64) -> f32 {
    let g = v / (1.0 + (-1.702 * v).exp());
    half::f16::from_f64(g).to_f32()
}

/// Largest |got - want| over max(1, |want|): f32 accumulation in another
/// order than the reference's f64 one.
fn max_rel_err(got: &ArrayD<f32>, want: &Array2<f64>) -> f64 {
    let got = got.view().into_dimensionality::<Ix2>().unwrap();
    assert_eq!(got.dim(), want.dim());
    got.iter()
        .zip(want.iter())
        .map(|(g, w)| (f64::from(*g) - w).abs() / w.abs().max(1.0))
        .fold(0.0, f64::max)
}

fn machine() -> Runtime {
    Runtime::new(&Topology::default_machine())
}

/// Runs `f` on `ranks` ranks and returns what each rank returned.
fn on_ranks<T: Send>(
    rt: &mut Runtime,
    ranks: u32,
    f: impl Fn(&Ctx) -> kernbench_runtime::host::Result<T> + Sync,
) -> Vec<T> {
    let out = Mutex::new(Vec::new());
    spawn(rt, ranks, |rank, ctx| {
        let v = f(ctx)?;
        out.lock().unwrap().push((rank, v));
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let mut v = out.into_inner().unwrap();
    v.sort_by_key(|(r, _)| *r);
    v.into_iter().map(|(_, x)| x).collect()
}

#[test]
fn column_and_row_parallel_layers_match_the_reference() {
    let (tokens, hidden, out) = (64, 128, 192);
    let x = matrix(tokens, hidden, 1);
    let (w_col, b_col) = (matrix(hidden, out, 2), vector(out, 3));
    let (w_row, b_row) = (matrix(hidden, out, 4), vector(out, 5));
    let want_col = linear_ref(&x, &w_col, Some(&b_col));
    let want_row = linear_ref(&x, &w_row, Some(&b_row));
    // One PE per rank, and the activations split over two PEs per rank
    // (each PE gathers its own rows of the column layer's output).
    for (ranks, pes) in [(1, 1), (2, 1), (2, 2)] {
        let mut rt = machine();
        let policy = DpPolicy::row_wise(1, pes);
        let opts = LinearOptions {
            policy,
            ..LinearOptions::default()
        };
        let got = on_ranks(&mut rt, ranks, |ctx| {
            let tp = initialize_model_parallel(ctx, ranks)?;
            assert_eq!(tp.tensor_model_parallel_rank(), ctx.get_rank());
            assert_eq!(tp.tensor_model_parallel_world_size(), ranks);
            let xt = ctx.from_ndarray(&f16s(&x), policy)?;
            let col = ColumnParallelLinear::new(ctx, &tp, &w_col, Some(&b_col), opts)?;
            let row = RowParallelLinear::new(ctx, &tp, &w_row, Some(&b_row), opts)?;
            let (yc, skipped) = col.forward(ctx, &xt)?;
            assert!(skipped.is_none());
            let (yr, _) = row.forward(ctx, &xt)?;
            assert_eq!(
                (yc.placement().len(), yr.placement().len()),
                (pes as usize, pes as usize)
            );
            Ok((ctx.to_ndarray::<f32>(&yc)?, ctx.to_ndarray::<f32>(&yr)?))
        });
        for (rank, (yc, yr)) in got.iter().enumerate() {
            let (ec, er) = (max_rel_err(yc, &want_col), max_rel_err(yr, &want_row));
            assert!(
                ec < 1e-5,
                "{ranks} rank(s) on {pes} PE(s), rank {rank}: column-parallel off by {ec}"
            );
            assert!(
                er < 1e-5,
                "{ranks} rank(s) on {pes} PE(s), rank {rank}: row-parallel off by {er}"
            );
        }
    }
}

#[test]
fn ragged_sizes_read_only_this_ranks_columns() {
    // No size a multiple of the 128 x 128 x 32 tiles: 48 tokens, 100
    // input features (each rank's row-parallel part is 50 columns, the
    // second starting at column 50), 72 outputs (36 per rank).
    let (tokens, hidden, out) = (48, 100, 72);
    let x = matrix(tokens, hidden, 41);
    let (w_col, w_row) = (matrix(hidden, out, 42), matrix(hidden, out, 43));
    let (want_col, want_row) = (linear_ref(&x, &w_col, None), linear_ref(&x, &w_row, None));
    let opts = LinearOptions {
        bias: false,
        ..LinearOptions::default()
    };
    let mut rt = machine();
    let got = on_ranks(&mut rt, 2, |ctx| {
        let tp = initialize_model_parallel(ctx, 2)?;
        let xt = ctx.from_ndarray(&f16s(&x), DpPolicy::row_wise(1, 1))?;
        let (yc, _) = ColumnParallelLinear::new(ctx, &tp, &w_col, None, opts)?.forward(ctx, &xt)?;
        let (yr, _) = RowParallelLinear::new(ctx, &tp, &w_row, None, opts)?.forward(ctx, &xt)?;
        Ok((ctx.to_ndarray::<f32>(&yc)?, ctx.to_ndarray::<f32>(&yr)?))
    });
    for (rank, (yc, yr)) in got.iter().enumerate() {
        let (ec, er) = (max_rel_err(yc, &want_col), max_rel_err(yr, &want_row));
        assert!(ec < 1e-5 && er < 1e-5, "rank {rank}: column off by {ec}, row by {er}");
    }
}

#[test]
fn column_parallel_without_gather_keeps_this_ranks_columns_and_the_bias() {
    let (tokens, hidden, out) = (32, 64, 128);
    let x = matrix(tokens, hidden, 11);
    let (w, b) = (matrix(hidden, out, 12), vector(out, 13));
    let mut rt = machine();
    let opts = LinearOptions {
        gather_output: false,
        skip_bias_add: true,
        ..LinearOptions::default()
    };
    let got = on_ranks(&mut rt, 2, |ctx| {
        let tp = initialize_model_parallel(ctx, 2)?;
        let xt = ctx.from_ndarray(&f16s(&x), DpPolicy::row_wise(1, 1))?;
        let col = ColumnParallelLinear::new(ctx, &tp, &w, Some(&b), opts)?;
        let (y, bias) = col.forward(ctx, &xt)?;
        let bias = bias.expect("skip_bias_add returns the bias");
        Ok((ctx.to_ndarray::<f32>(&y)?, ctx.to_ndarray::<f32>(&bias)?))
    });
    let want = linear_ref(&x, &w, None);
    for (rank, (y, bias)) in got.iter().enumerate() {
        let cols = rank * out / 2..(rank + 1) * out / 2;
        let part = want.slice(ndarray::s![.., cols.clone()]).to_owned();
        assert!(max_rel_err(y, &part) < 1e-5, "rank {rank}'s columns");
        let want_b: Vec<f32> = b.slice(ndarray::s![cols]).to_vec();
        assert_eq!(
            bias.iter().copied().collect::<Vec<f32>>(),
            want_b,
            "rank {rank}'s bias part"
        );
    }
}

/// An MLP's input `[tokens, hidden]` and whole weights and biases, from
/// consecutive seeds.
struct Mlp {
    x: Array2<f32>,
    w1: Array2<f32>,
    b1: Array1<f32>,
    w2: Array2<f32>,
    b2: Array1<f32>,
}

impl Mlp {
    fn new(tokens: usize, hidden: usize, ffn: usize, seed: u64) -> Mlp {
        Mlp {
            x: matrix(tokens, hidden, seed),
            w1: matrix(hidden, ffn, seed + 1),
            b1: vector(ffn, seed + 2),
            w2: matrix(ffn, hidden, seed + 3),
            b2: vector(hidden, seed + 4),
        }
    }

    /// The reference output, the activation rounded to f16 as the kernel
    /// does.
    fn reference(&self) -> Array2<f64> {
        let h = linear_ref(&self.x, &self.w1, Some(&self.b1)).mapv(gelu_f16);
        linear_ref(&h, &self.w2, Some(&self.b2))
    }

    /// The layer on this rank, with `opts`.
    fn layer(&self, ctx: &Ctx, tp: &ParallelState, opts: MlpOptions) -> kernbench_runtime::host::Result<ParallelMlp> {
        ParallelMlp::with_options(ctx, tp, &self.w1, Some(&self.b1), &self.w2, Some(&self.b2), opts)
    }
}

/// Checks an MLP output against its reference. Where the f32 and f64 sums
/// straddle a rounding boundary of the f16 activation, it rounds the other
/// way: one f16 step (2^-8 for the activations here, below 8) times a
/// weight below 1, in a few of the output's terms. Anything systematic (a
/// bias missed, a wrong column) shows in the mean: about 0.5 for those, a
/// few 1e-5 from the rounding (f32 sums are good to about 1e-7, so some
/// 1e-4 of the activations round the other way).
fn assert_mlp_output(y: &ArrayD<f32>, want: &Array2<f64>, what: &str) {
    let e = max_rel_err(y, want);
    assert!(e < 2.0 * 2f64.powi(-8), "{what}: the MLP is off by {e}");
    let mean = y
        .iter()
        .zip(want.iter())
        .map(|(g, w)| (f64::from(*g) - w).abs())
        .sum::<f64>()
        / want.len() as f64;
    assert!(mean < 5e-4, "{what}: the MLP is off by {mean} on average");
}

#[test]
fn the_mlp_matches_the_reference_on_several_pes_per_rank() {
    let m = Mlp::new(128, 64, 256, 21);
    let (x, w1, b1, w2, b2) = (&m.x, &m.w1, &m.b1, &m.w2, &m.b2);
    let want = m.reference();
    let mut rt = machine();
    let policy = DpPolicy::row_wise(1, 4);
    let got = on_ranks(&mut rt, 2, |ctx| {
        let tp = initialize_model_parallel(ctx, 2)?;
        let xt = ctx.from_ndarray(&f16s(x), policy)?;
        let mlp = ParallelMlp::new(ctx, &tp, w1, Some(b1), w2, Some(b2), true, policy)?;
        let y = mlp.forward(ctx, &xt)?;
        assert_eq!(y.placement().len(), 4, "the output stays on the layer's 4 PEs");
        ctx.to_ndarray::<f32>(&y)
    });
    for (rank, y) in got.iter().enumerate() {
        assert_mlp_output(y, &want, &format!("rank {rank}"));
    }
}

#[test]
fn the_sequence_parallel_mlp_matches_the_reference() {
    // Megatron's sequence parallelism: each rank holds its block of the
    // tokens; the first GEMM all-gathers them inside (the fused kernel),
    // the second reduce-scatters its output inside. Rank r's output must
    // be rows r * tokens / world .. of the whole MLP's, on one and on two
    // PEs per rank (the fused kernels' per-PE order must cancel out).
    let (tokens, hidden) = (128, 64);
    let m = Mlp::new(tokens, hidden, 256, 41);
    let want = m.reference();
    for (ranks, pes) in [(1u32, 1u32), (2, 1), (2, 2)] {
        let mut rt = machine();
        let policy = DpPolicy::row_wise(1, pes);
        let block = tokens / ranks as usize;
        let got = on_ranks(&mut rt, ranks, |ctx| {
            let tp = initialize_model_parallel(ctx, ranks)?;
            let r0 = ctx.get_rank() as usize * block;
            let mine = m.x.slice(ndarray::s![r0..r0 + block, ..]).to_owned();
            let xt = ctx.from_ndarray(&f16s(&mine), policy)?;
            let opts = MlpOptions {
                policy,
                sequence_parallel: true,
                ..MlpOptions::default()
            };
            let y = m.layer(ctx, &tp, opts)?.forward(ctx, &xt)?;
            assert_eq!(y.shape(), [block, hidden], "this rank's block of the tokens");
            ctx.to_ndarray::<f32>(&y)
        });
        for (rank, y) in got.iter().enumerate() {
            let rows = want.slice(ndarray::s![rank * block..(rank + 1) * block, ..]).to_owned();
            assert_mlp_output(y, &rows, &format!("{ranks} ranks x {pes} PEs, rank {rank}"));
        }
    }
}

#[test]
fn the_ranks_gemms_run_side_by_side_and_the_gather_waits_for_both() {
    // The same GEMM per rank, [128 x 256] @ [256 x 256], at one rank
    // (256 output features) and at two (512, split in two): each SIP runs
    // on its own clock, so two ranks take exactly as long as one.
    let (tokens, hidden, part) = (128, 256, 256);
    let x = matrix(tokens, hidden, 31);
    let mut runs = Vec::new();
    for ranks in [1u32, 2] {
        let w = matrix(hidden, part * ranks as usize, 32);
        let opts = LinearOptions {
            bias: false,
            ..LinearOptions::default()
        };
        let mut rt = machine();
        on_ranks(&mut rt, ranks, |ctx| {
            let tp = initialize_model_parallel(ctx, ranks)?;
            let xt = ctx.from_ndarray(&f16s(&x), DpPolicy::row_wise(1, 1))?;
            let col = ColumnParallelLinear::new(ctx, &tp, &w, None, opts)?;
            let (y, _) = col.forward(ctx, &xt)?;
            ctx.synchronize()?;
            assert_eq!(
                (y.dtype(), y.shape()),
                (DType::F32, &[tokens, part * ranks as usize][..])
            );
            Ok(())
        });
        runs.push(rt.history().to_vec());
    }
    let gemms = |h: &[kernbench_runtime::host::LaunchRecord]| -> Vec<(Option<u32>, u64, u64)> {
        h.iter()
            .filter(|r| r.kernel == "linear")
            .map(|r| (r.device, r.start_ps, r.end_ps))
            .collect()
    };
    let (one, two) = (gemms(&runs[0]), gemms(&runs[1]));
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].0, Some(0), "a rank's GEMM runs on its own SIP's clock");
    let (_, start, end) = one[0];
    assert_eq!(
        two,
        vec![(Some(0), start, end), (Some(1), start, end)],
        "side by side, as long as one"
    );
    // The all-gather of the outputs spans both SIPs: it starts after both
    // GEMMs, and the re-assembly after it.
    let after: Vec<_> = runs[1].iter().skip_while(|r| r.kernel != "linear").skip(2).collect();
    assert_eq!(after.len(), 3, "{after:?}");
    assert_eq!(after[0].device, None, "the all-gather waits for every SIP");
    assert!(after[0].start_ps > end);
    assert!(after[1..]
        .iter()
        .all(|r| r.kernel == "unshard_columns" && r.start_ps >= after[0].end_ps));
}

#[test]
fn misuse_is_an_error_that_says_what_is_wrong() {
    let mut rt = machine();
    let err = |f: &(dyn Fn(&Ctx) -> kernbench_runtime::host::Result<()> + Sync)| -> String {
        let mut rt = machine();
        match spawn(&mut rt, 2, |_, ctx| f(ctx)) {
            Ok(()) => panic!("expected an error"),
            Err(e) => e.to_string(),
        }
    };
    let e = err(&|ctx| initialize_model_parallel(ctx, 4).map(|_| ()));
    assert!(
        e.contains("initialize_model_parallel(4): the tensor-parallel size must be the number of ranks (2)"),
        "{e}"
    );
    let e = err(&|ctx| {
        let tp = initialize_model_parallel(ctx, 2)?;
        ColumnParallelLinear::new(
            ctx,
            &tp,
            &matrix(8, 7, 1),
            None,
            LinearOptions {
                bias: false,
                ..Default::default()
            },
        )
        .map(|_| ())
    });
    assert!(
        e.contains("out_features (7) must split evenly over 2 tensor-parallel ranks"),
        "{e}"
    );
    let e = err(&|ctx| {
        let tp = initialize_model_parallel(ctx, 2)?;
        RowParallelLinear::new(ctx, &tp, &matrix(8, 8, 1), None, LinearOptions::default()).map(|_| ())
    });
    assert!(
        e.contains("RowParallelLinear: `bias` is on and no bias was given"),
        "{e}"
    );
    let e = err(&|ctx| {
        let tp = initialize_model_parallel(ctx, 2)?;
        let opts = LinearOptions {
            bias: false,
            ..Default::default()
        };
        let col = ColumnParallelLinear::new(ctx, &tp, &matrix(16, 8, 1), None, opts)?;
        let x = ctx.zeros(&[4, 12], DType::F16, DpPolicy::default())?;
        col.forward(ctx, &x).map(|_| ())
    });
    assert!(
        e.contains("expected a f16 tensor of [tokens, 16], got f16[4, 12]"),
        "{e}"
    );
    // Sequence parallelism needs the layers' inputs and outputs split.
    let e = err(&|ctx| {
        let tp = initialize_model_parallel(ctx, 2)?;
        let opts = LinearOptions {
            bias: false,
            sequence_parallel: true,
            ..Default::default()
        };
        ColumnParallelLinear::new(ctx, &tp, &matrix(16, 8, 1), None, opts).map(|_| ())
    });
    assert!(
        e.contains("ColumnParallelLinear: `sequence_parallel` needs `gather_output` off"),
        "{e}"
    );
    let e = err(&|ctx| {
        let tp = initialize_model_parallel(ctx, 2)?;
        let opts = LinearOptions {
            bias: false,
            sequence_parallel: true,
            ..Default::default()
        };
        RowParallelLinear::new(ctx, &tp, &matrix(16, 8, 1), None, opts).map(|_| ())
    });
    assert!(
        e.contains("RowParallelLinear: `sequence_parallel` needs `input_is_parallel` on"),
        "{e}"
    );
    // The fused GEMMs check their operands.
    let e = err(&|ctx| {
        let a = ctx.zeros(&[8, 16], DType::F32, DpPolicy::default())?;
        let w = ctx.zeros(&[16, 8], DType::F16, DpPolicy::default())?;
        fused_all_gather_matmul(ctx, &a, &w).map(|_| ())
    });
    assert!(
        e.contains("fused_all_gather_matmul: expected a non-empty 2-D f16 tensor, got f32[8, 16]"),
        "{e}"
    );
    let e = err(&|ctx| {
        let a = ctx.zeros(&[8, 16], DType::F16, DpPolicy::default())?;
        let w = ctx.zeros(&[12, 8], DType::F16, DpPolicy::default())?;
        fused_all_gather_matmul(ctx, &a, &w).map(|_| ())
    });
    assert!(
        e.contains("the weight must be an f16 [16, n] tensor, got f16[12, 8]"),
        "{e}"
    );
    let e = err(&|ctx| {
        let x = ctx.zeros(&[6, 16], DType::F16, DpPolicy::row_wise(1, 2))?;
        let w = ctx.zeros(&[16, 8], DType::F16, DpPolicy::default())?;
        fused_matmul_reduce_scatter(ctx, &x, &w).map(|_| ())
    });
    assert!(
        e.contains("each PE's 3 rows of x must split evenly over the 2 ranks"),
        "{e}"
    );
    // A launch across ranks needs the same kernel everywhere, and each
    // rank on PEs of its own.
    let file = kernbench_runtime::host::default_stdlib().unwrap().join("kernels/tp.tl");
    let e = err(&|ctx| {
        let name = if ctx.get_rank() == 0 { "add_bias" } else { "bias_gelu" };
        let k = ctx.compile(&file, name, &[])?;
        ctx.launch_across_ranks(&k, &[], None)
    });
    assert!(
        e.contains("rank 0 called a launch of `add_bias` across ranks while rank 1 called a launch of `bias_gelu`"),
        "{e}"
    );
    let e = err(&|ctx| {
        let has_bias = kernbench_compiler::sema::Konst::Bool(ctx.get_rank() == 0);
        let k = ctx.compile(&file, "bias_gelu", &[("HAS_BIAS", has_bias)])?;
        ctx.launch_across_ranks(&k, &[], None)
    });
    assert!(
        e.contains("rank 1 launched another kernel (or other queue parameters) across ranks than rank 0's `bias_gelu`"),
        "{e}"
    );
    let mut one = machine();
    let k = one.compile(&file, "add_bias", &[]).unwrap();
    let y = one.zeros(&[4, 4], DType::F32, DpPolicy::default()).unwrap();
    let b = one.zeros(&[4], DType::F32, DpPolicy::default()).unwrap();
    use kernbench_runtime::host::Arg;
    let args = vec![Arg::Tensor(&y), Arg::Tensor(&b), Arg::I32(4), Arg::I32(4)];
    let e = one
        .launch_across(&k, &[args.clone(), args], None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`add_bias` across ranks: two ranks' tensors are on PE"),
        "{e}"
    );
    let y1 = one
        .zeros(
            &[4, 8],
            DType::F32,
            DpPolicy {
                pe: 1,
                ..DpPolicy::default()
            },
        )
        .unwrap();
    let b1 = one
        .zeros(
            &[4],
            DType::F32,
            DpPolicy {
                pe: 1,
                ..DpPolicy::default()
            },
        )
        .unwrap();
    let other = vec![Arg::Tensor(&y1), Arg::Tensor(&b1), Arg::I32(4), Arg::I32(4)];
    let args = vec![Arg::Tensor(&y), Arg::Tensor(&b), Arg::I32(4), Arg::I32(4)];
    let e = one.launch_across(&k, &[args, other], None).unwrap_err().to_string();
    assert!(
        e.contains("rank 1's tensor is f32[4, 8] on 1 PE(s), rank 0's f32[4, 4] on 1; every rank passes tensors alike"),
        "{e}"
    );
    let e = err(&|ctx| {
        let x = ctx.zeros(&[8, 16], DType::F16, DpPolicy::row_wise(1, 2))?;
        let w = ctx.zeros(&[16, 8], DType::F16, DpPolicy::row_wise(1, 2))?;
        fused_all_gather_matmul(ctx, &x, &w).map(|_| ())
    });
    assert!(
        e.contains("the weight must be whole on each of the operand's 2 PE(s) (replicated) or on one PE; it is RowWise over 2 PE(s)"),
        "{e}"
    );
    // One rank is fine on its own.
    on_ranks(&mut rt, 1, |ctx| initialize_model_parallel(ctx, 1).map(|_| ()));
}

/// Rows `pe * ranks * m + j * m ..` of a per-PE gather: PE `pe` of every
/// rank holds the ranks' blocks of its `m` rows, rank after rank.
fn gathered_rows(parts: &[Array2<f32>], pes: usize) -> Array2<f32> {
    let m = parts[0].nrows() / pes;
    let views: Vec<_> = (0..pes)
        .flat_map(|pe| {
            parts
                .iter()
                .map(move |a| a.slice(ndarray::s![pe * m..(pe + 1) * m, ..]))
        })
        .collect();
    ndarray::concatenate(ndarray::Axis(0), &views).unwrap()
}

#[test]
fn fused_all_gather_matmul_gathers_exactly_and_multiplies_within_f32_rounding() {
    // Ragged sizes (no multiple of the 128 x 128 x 32 tiles): 48 rows per
    // rank, k = 100, n = 72; each rank its own shard and weight.
    let (rows, k, n) = (48, 100, 72);
    for (ranks, pes) in [(1u32, 1usize), (2, 1), (2, 2)] {
        let a: Vec<Array2<f32>> = (0..ranks).map(|r| matrix(rows, k, 40 + u64::from(r))).collect();
        let w: Vec<Array2<f32>> = (0..ranks).map(|r| matrix(k, n, 50 + u64::from(r))).collect();
        let policy = DpPolicy::row_wise(1, pes as u32);
        let mut rt = machine();
        let got = on_ranks(&mut rt, ranks, |ctx| {
            let r = ctx.get_rank() as usize;
            let at = ctx.from_ndarray(&f16s(&a[r]), policy)?;
            let wt = ctx.from_ndarray(
                &f16s(&w[r]),
                DpPolicy {
                    dist: kernbench_runtime::host::Dist::Replicate,
                    ..policy
                },
            )?;
            let (ag, y) = fused_all_gather_matmul(ctx, &at, &wt)?;
            Ok((ctx.to_ndarray::<half::f16>(&ag)?, ctx.to_ndarray::<f32>(&y)?))
        });
        let want_ag = gathered_rows(&a, pes);
        for (r, (ag, y)) in got.iter().enumerate() {
            let ag = ag.mapv(half::f16::to_f32).into_dimensionality::<Ix2>().unwrap();
            assert_eq!(ag, want_ag, "{ranks} rank(s) on {pes} PE(s), rank {r}: the gather");
            let e = max_rel_err(y, &linear_ref(&want_ag, &w[r], None));
            assert!(e < 1e-5, "{ranks} rank(s) on {pes} PE(s), rank {r}: y off by {e}");
        }
    }
}

#[test]
fn fused_matmul_reduce_scatter_sums_each_ranks_rows_within_f32_rounding() {
    let (rows, k, n) = (40, 100, 80);
    for (ranks, pes) in [(1u32, 1usize), (2, 1), (2, 2)] {
        let world = ranks as usize;
        let x: Vec<Array2<f32>> = (0..ranks).map(|r| matrix(world * rows, k, 60 + u64::from(r))).collect();
        let w: Vec<Array2<f32>> = (0..ranks).map(|r| matrix(k, n, 70 + u64::from(r))).collect();
        let policy = DpPolicy::row_wise(1, pes as u32);
        let mut rt = machine();
        let got = on_ranks(&mut rt, ranks, |ctx| {
            let r = ctx.get_rank() as usize;
            let xt = ctx.from_ndarray(&f16s(&x[r]), policy)?;
            let wt = ctx.from_ndarray(
                &f16s(&w[r]),
                DpPolicy {
                    dist: kernbench_runtime::host::Dist::Replicate,
                    ..policy
                },
            )?;
            let out = fused_matmul_reduce_scatter(ctx, &xt, &wt)?;
            ctx.to_ndarray::<f32>(&out)
        });
        // Every rank's partial product; PE p's shard of x holds ranks
        // blocks of m rows, block j for rank j.
        let partial: Vec<Array2<f64>> = (0..world).map(|j| linear_ref(&x[j], &w[j], None)).collect();
        let m = rows / pes;
        for (r, out) in got.iter().enumerate() {
            let mut want = Array2::<f64>::zeros((rows, n));
            for pe in 0..pes {
                let src = pe * world * m + r * m;
                for p in &partial {
                    let mut dst = want.slice_mut(ndarray::s![pe * m..(pe + 1) * m, ..]);
                    dst += &p.slice(ndarray::s![src..src + m, ..]);
                }
            }
            let e = max_rel_err(out, &want);
            assert!(e < 1e-5, "{ranks} rank(s) on {pes} PE(s), rank {r}: off by {e}");
        }
    }
}

/// Launches `tp.tl`'s GEMM `y = x @ w` on one PE.
fn gemm(
    ctx: &Ctx,
    x: &kernbench_runtime::host::Tensor,
    w: &kernbench_runtime::host::Tensor,
    y: &kernbench_runtime::host::Tensor,
) -> kernbench_runtime::host::Result<()> {
    use kernbench_runtime::host::Arg;
    let file = kernbench_runtime::host::default_stdlib().unwrap().join("kernels/tp.tl");
    let kernel = ctx.compile(file, "linear", &[])?;
    let (m, k, n) = (x.shape()[0], x.shape()[1], w.shape()[1]);
    ctx.launch(
        &kernel,
        Some([(m.div_ceil(128) * n.div_ceil(128)) as u32, 1, 1]),
        &[
            Arg::Tensor(x),
            Arg::Tensor(w),
            Arg::Tensor(y),
            Arg::I32(m as i32),
            Arg::I32(n as i32),
            Arg::I32(k as i32),
            Arg::I32(k as i32),
            Arg::I32(0),
        ],
    )
}

/// The simulated time from the first launch of `rt`'s history to the
/// last end, and the longest `linear` launch.
fn span_and_gemm(rt: &Runtime) -> (u64, u64) {
    let h = rt.history();
    let span = h.iter().map(|r| r.end_ps).max().unwrap() - h[0].start_ps;
    let gemm = h
        .iter()
        .filter(|r| r.kernel == "linear")
        .map(|r| r.end_ps - r.start_ps)
        .max()
        .unwrap_or(0);
    (span, gemm)
}

#[test]
fn the_fused_gemms_hide_their_collective_under_the_gemm() {
    // Two ranks, the same work fused and unfused (the registry's
    // collective and tp.tl's GEMM one after the other), timed from the
    // first launch (host copies are not launches): the fused kernel must take less
    // than the two in sequence, and no less than the unfused GEMM alone.
    let (rows, k, n) = (256, 512, 512);
    let one_pe = DpPolicy::row_wise(1, 1);
    let w = matrix(k, n, 90);
    // All-gather + GEMM.
    let a: Vec<Array2<f32>> = (0..2).map(|r| matrix(rows, k, 80 + r)).collect();
    let run = |fused: bool| {
        let mut rt = machine();
        on_ranks(&mut rt, 2, |ctx| {
            let at = ctx.from_ndarray(&f16s(&a[ctx.get_rank() as usize]), one_pe)?;
            let wt = ctx.from_ndarray(&f16s(&w), one_pe)?;
            ctx.synchronize()?;
            if fused {
                fused_all_gather_matmul(ctx, &at, &wt)?;
            } else {
                let ag = ctx.empty(&[2 * rows, k], DType::F16, one_pe)?;
                let y = ctx.empty(&[2 * rows, n], DType::F32, one_pe)?;
                ctx.all_gather(&ag, &at)?;
                gemm(ctx, &ag, &wt, &y)?;
            }
            ctx.synchronize()
        });
        rt
    };
    let (fused, unfused) = (run(true), run(false));
    let kernels: Vec<_> = fused.history().iter().map(|r| (r.kernel.clone(), r.device)).collect();
    assert_eq!(
        kernels.last().unwrap(),
        &("fused_all_gather_matmul".to_string(), None),
        "one launch across both SIPs"
    );
    let ((fused_ps, _), (unfused_ps, gemm_ps)) = (span_and_gemm(&fused), span_and_gemm(&unfused));
    assert!(
        fused_ps < unfused_ps && fused_ps >= gemm_ps,
        "all-gather: fused {fused_ps} ps against all-gather + GEMM {unfused_ps} ps (GEMM {gemm_ps} ps)"
    );
    // GEMM + reduce-scatter.
    let x: Vec<Array2<f32>> = (0..2).map(|r| matrix(2 * rows, k, 85 + r)).collect();
    let run = |fused: bool| {
        let mut rt = machine();
        on_ranks(&mut rt, 2, |ctx| {
            let xt = ctx.from_ndarray(&f16s(&x[ctx.get_rank() as usize]), one_pe)?;
            let wt = ctx.from_ndarray(&f16s(&w), one_pe)?;
            ctx.synchronize()?;
            if fused {
                fused_matmul_reduce_scatter(ctx, &xt, &wt)?;
            } else {
                let y = ctx.empty(&[2 * rows, n], DType::F32, one_pe)?;
                let out = ctx.empty(&[rows, n], DType::F32, one_pe)?;
                gemm(ctx, &xt, &wt, &y)?;
                ctx.reduce_scatter(&out, &y, kernbench_runtime::ccl::ReduceOp::Sum)?;
            }
            ctx.synchronize()
        });
        rt
    };
    let (fused, unfused) = (run(true), run(false));
    let ((fused_ps, _), (unfused_ps, gemm_ps)) = (span_and_gemm(&fused), span_and_gemm(&unfused));
    assert!(
        fused_ps < unfused_ps && fused_ps >= gemm_ps,
        "reduce-scatter: fused {fused_ps} ps against GEMM + reduce-scatter {unfused_ps} ps (GEMM {gemm_ps} ps)"
    );
}

#[test]
fn the_fused_kernels_ring_over_three_and_four_ranks() {
    // `Runtime::launch_across` with one "rank" per PE of one SIP: rings of
    // three and four steps, which `spawn` on the default machine's two
    // SIPs cannot give. Ragged sizes: 40 rows per rank, k = 100, n = 72.
    use kernbench_runtime::host::{Arg, QueueSlots};
    let (rows, k, n) = (40, 100, 72);
    let file = kernbench_runtime::host::default_stdlib()
        .unwrap()
        .join("kernels/async_tp.tl");
    let slots = Some(QueueSlots {
        n_slots: 4,
        n_slots_across_sips: 4,
        slot_size_bytes: 128 * 128 * 4,
    });
    let on = |r: usize| DpPolicy {
        pe: r as u32,
        ..DpPolicy::row_wise(1, 1)
    };
    for world in [3usize, 4] {
        let mut rt = machine();
        let seeds = |base: u64| (0..world).map(move |r| base + r as u64);
        let a: Vec<_> = seeds(100).map(|s| matrix(rows, k, s)).collect();
        let xs: Vec<_> = seeds(110).map(|s| matrix(world * rows, k, s)).collect();
        let w: Vec<_> = seeds(120).map(|s| matrix(k, n, s)).collect();
        let mut put = |m: &Array2<f32>, r: usize| rt.from_ndarray(&f16s(m), on(r)).unwrap();
        let (at, xt, wt): (Vec<_>, Vec<_>, Vec<_>) = (
            (0..world).map(|r| put(&a[r], r)).collect(),
            (0..world).map(|r| put(&xs[r], r)).collect(),
            (0..world).map(|r| put(&w[r], r)).collect(),
        );
        let mut new = |shape: &[usize], dtype: DType, r: usize| rt.zeros(shape, dtype, on(r)).unwrap();
        let ag: Vec<_> = (0..world).map(|r| new(&[world * rows, k], DType::F16, r)).collect();
        let y: Vec<_> = (0..world).map(|r| new(&[world * rows, n], DType::F32, r)).collect();
        let out: Vec<_> = (0..world).map(|r| new(&[rows, n], DType::F32, r)).collect();
        let stage: Vec<_> = (0..world).map(|r| new(&[2 * rows, n], DType::F32, r)).collect();
        let dims = [Arg::I32(rows as i32), Arg::I32(n as i32), Arg::I32(k as i32)];
        let gather = rt.compile(&file, "fused_all_gather_matmul", &[]).unwrap();
        let args: Vec<Vec<Arg>> = (0..world)
            .map(|r| {
                [
                    Arg::Tensor(&at[r]),
                    Arg::Tensor(&ag[r]),
                    Arg::Tensor(&wt[r]),
                    Arg::Tensor(&y[r]),
                ]
                .into_iter()
                .chain(dims.clone())
                .collect()
            })
            .collect();
        rt.launch_across(&gather, &args, slots).unwrap();
        let scatter = rt.compile(&file, "fused_matmul_reduce_scatter", &[]).unwrap();
        let args: Vec<Vec<Arg>> = (0..world)
            .map(|r| {
                [
                    Arg::Tensor(&xt[r]),
                    Arg::Tensor(&wt[r]),
                    Arg::Tensor(&out[r]),
                    Arg::Tensor(&stage[r]),
                ]
                .into_iter()
                .chain(dims.clone())
                .collect()
            })
            .collect();
        rt.launch_across(&scatter, &args, slots).unwrap();
        let want_ag = gathered_rows(&a, 1);
        let partial: Vec<Array2<f64>> = (0..world).map(|j| linear_ref(&xs[j], &w[j], None)).collect();
        for r in 0..world {
            let got = rt.to_ndarray::<half::f16>(&ag[r]).unwrap().mapv(half::f16::to_f32);
            assert_eq!(
                got.into_dimensionality::<Ix2>().unwrap(),
                want_ag,
                "{world} ranks, rank {r}: the gather"
            );
            let e = max_rel_err(
                &rt.to_ndarray::<f32>(&y[r]).unwrap(),
                &linear_ref(&want_ag, &w[r], None),
            );
            assert!(e < 1e-5, "{world} ranks, rank {r}: y off by {e}");
            let want = partial.iter().fold(Array2::<f64>::zeros((rows, n)), |s, p| {
                s + p.slice(ndarray::s![r * rows..(r + 1) * rows, ..])
            });
            let e = max_rel_err(&rt.to_ndarray::<f32>(&out[r]).unwrap(), &want);
            assert!(e < 1e-5, "{world} ranks, rank {r}: the reduce-scatter off by {e}");
        }
    }
}

#[test]
fn the_sequence_parallel_mlp_is_faster_with_256_tokens_per_rank() {
    // Two ranks, 512 tokens, hidden 512, ffn 1024, one PE per rank, timed
    // from the first launch: the sequence-parallel MLP (all-gather and
    // reduce-scatter inside the GEMMs, the second bias on half the
    // tokens) against the plain one (replicated input, all-reduce after
    // the second GEMM). Measured: 369.2 against 401.9 us. At 64 tokens per
    // rank it is the slower (131.1 against 110.7 us at 128 x 512 x 1024):
    // below one GEMM tile of rows per rank each chunk loads the weight
    // again (docs/architecture.md, async TP).
    let tokens = 512;
    let m = Mlp::new(tokens, 512, 1024, 51);
    let span = |sequence_parallel: bool| {
        let mut rt = machine();
        let policy = DpPolicy::row_wise(1, 1);
        let block = if sequence_parallel { tokens / 2 } else { tokens };
        on_ranks(&mut rt, 2, |ctx| {
            let tp = initialize_model_parallel(ctx, 2)?;
            let r0 = if sequence_parallel {
                ctx.get_rank() as usize * block
            } else {
                0
            };
            let mine = m.x.slice(ndarray::s![r0..r0 + block, ..]).to_owned();
            let xt = ctx.from_ndarray(&f16s(&mine), policy)?;
            ctx.synchronize()?;
            let opts = MlpOptions {
                policy,
                sequence_parallel,
                ..MlpOptions::default()
            };
            ctx.to_ndarray::<f32>(&m.layer(ctx, &tp, opts)?.forward(ctx, &xt)?)
        });
        span_and_gemm(&rt).0
    };
    let (plain, sp) = (span(false), span(true));
    assert!(sp < plain, "sequence-parallel {sp} ps, plain {plain} ps");
}
