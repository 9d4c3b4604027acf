//! Tensor-parallel layers (`kernbench_runtime::tp`) against an ndarray
//! reference, at one and two ranks and on several PEs per rank; the
//! ranks' GEMMs run side by side in simulated time; misuse is an error
//! that says what is wrong.

use kernbench_compiler::sema::DType;
use kernbench_runtime::host::{spawn, Ctx, DpPolicy, Runtime};
use kernbench_runtime::topology::Topology;
use kernbench_runtime::tp::{
    initialize_model_parallel, ColumnParallelLinear, LinearOptions, ParallelMlp, RowParallelLinear,
};
use ndarray::{Array1, Array2, ArrayD, Ix2};
use std::sync::Mutex;

/// Deterministic values in [-1, 1) from a seed (a small LCG), exactly
/// representable in f16 so that the reference sees what the machine does.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let v = ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
            half::f16::from_f32(v).to_f32()
        })
        .collect()
}

fn matrix(rows: usize, cols: usize, seed: u64) -> Array2<f32> {
    Array2::from_shape_vec((rows, cols), values(rows * cols, seed)).unwrap()
}

fn vector(n: usize, seed: u64) -> Array1<f32> {
    Array1::from_vec(values(n, seed))
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

#[test]
fn the_mlp_matches_the_reference_on_several_pes_per_rank() {
    let (tokens, hidden, ffn) = (128, 64, 256);
    let x = matrix(tokens, hidden, 21);
    let (w1, b1, w2, b2) = (
        matrix(hidden, ffn, 22),
        vector(ffn, 23),
        matrix(ffn, hidden, 24),
        vector(hidden, 25),
    );
    // The reference rounds the activation to f16 as the kernel does.
    let h = linear_ref(&x, &w1, Some(&b1)).mapv(gelu_f16);
    let want = linear_ref(&h, &w2, Some(&b2));
    let mut rt = machine();
    let policy = DpPolicy::row_wise(1, 4);
    let got = on_ranks(&mut rt, 2, |ctx| {
        let tp = initialize_model_parallel(ctx, 2)?;
        let xt = ctx.from_ndarray(&f16s(&x), policy)?;
        let mlp = ParallelMlp::new(ctx, &tp, &w1, Some(&b1), &w2, Some(&b2), true, policy)?;
        let y = mlp.forward(ctx, &xt)?;
        assert_eq!(y.placement().len(), 4, "the output stays on the layer's 4 PEs");
        ctx.to_ndarray::<f32>(&y)
    });
    for (rank, y) in got.iter().enumerate() {
        // Where the f32 and f64 sums straddle a rounding boundary of the
        // f16 activation, it rounds the other way: one f16 step (2^-8 for
        // the activations here, below 8) times a weight below 1, in a few
        // of the output's 256 terms. Anything systematic (a bias missed,
        // a wrong column) shows in the mean: about 0.5 for those, a few
        // 1e-5 from the rounding (f32 sums are good to about 1e-7, so
        // some 1e-4 of the activations round the other way).
        let e = max_rel_err(y, &want);
        assert!(e < 2.0 * 2f64.powi(-8), "rank {rank}: the MLP is off by {e}");
        let mean = y
            .iter()
            .zip(want.iter())
            .map(|(g, w)| (f64::from(*g) - w).abs())
            .sum::<f64>()
            / want.len() as f64;
        assert!(mean < 5e-4, "rank {rank}: the MLP is off by {mean} on average");
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
    // One rank is fine on its own.
    on_ranks(&mut rt, 1, |ctx| initialize_model_parallel(ctx, 1).map(|_| ()));
}
