//! `tlc bench tp`: the tensor-parallel layers' forward pass at every
//! tensor-parallel size the machine has SIPs for, each checked against an
//! ndarray reference, with the simulated time split into GEMM,
//! communication and the rest; the async-TP kernels against the same
//! work unfused; and sequence-parallel (ring) attention.

use super::{initialize_model_parallel, ColumnParallelLinear, LinearOptions, ParallelMlp, RowParallelLinear};
use crate::ccl::ReduceOp;
use crate::host::{spawn, DpPolicy, HostError, LaunchRecord, Result, Runtime};
use crate::topology::Topology;
use kernbench_compiler::sema::DType;
use ndarray::{Array1, Array2, ArrayD, Ix2};
use std::sync::Mutex;

/// The layer sizes: `tokens` rows of `hidden` features; the MLP's inner
/// size `ffn`; the activations split by rows over `pes` PEs per rank.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub tokens: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub pes: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// `ColumnParallelLinear` hidden → ffn, output gathered.
    Column,
    /// `RowParallelLinear` ffn → hidden, input not split yet.
    Row,
    /// `ParallelMlp` hidden → ffn → hidden.
    Mlp,
}

impl Layer {
    pub const ALL: [Layer; 3] = [Layer::Column, Layer::Row, Layer::Mlp];

    pub fn name(self) -> &'static str {
        match self {
            Layer::Column => "column",
            Layer::Row => "row",
            Layer::Mlp => "mlp",
        }
    }
}

/// One layer at one tensor-parallel size.
#[derive(Clone, Debug)]
pub struct TpRow {
    pub layer: Layer,
    pub tp: u32,
    /// From the first launch's start to the last one's end.
    pub total_ps: u64,
    /// The GEMMs (`linear`) and the collectives on rank 0's path; `other`
    /// is the rest of the total (bias, activation, re-assembly, launch
    /// latencies).
    pub gemm_ps: u64,
    pub comm_ps: u64,
    /// The layer's multiply-adds × 2 (all ranks').
    pub flops: u64,
    /// Largest |got − want| / bound over every rank's output elements,
    /// the bound being what f32 accumulation may lose (see
    /// [`reference`]): at most 1 when the output is right.
    pub err_ratio: f64,
}

impl TpRow {
    pub fn correct(&self) -> bool {
        self.err_ratio <= 1.0
    }
}

/// Deterministic f16-exact values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    f16_values_from(seed.wrapping_add(0x9E37_79B9_7F4A_7C15), n)
}

/// `n` values in [-1, 1), each exactly representable in f16, from a
/// 64-bit LCG started at `state` (the tests seed it their own way).
pub fn f16_values_from(state: u64, n: usize) -> Vec<f32> {
    let mut s = state;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let v = ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
            half::f16::from_f32(v).to_f32()
        })
        .collect()
}

fn matrix(rows: usize, cols: usize, seed: u64) -> Array2<f32> {
    let v = values(rows * cols, seed);
    Array2::from_shape_fn((rows, cols), |(r, c)| v[r * cols + c])
}

/// `x @ w + b` in f64, and a bound on the error of computing it in f32
/// in any order: (K + 2) · 2^-24 · (|x| @ |w| + |b|) per element (the
/// classic γ_K bound of a K-term sum, the bias and the final rounding).
fn reference(x: &Array2<f32>, w: &Array2<f32>, b: &Array1<f32>) -> (Array2<f64>, Array2<f64>) {
    let k = x.ncols() as f64;
    let want = x.mapv(f64::from).dot(&w.mapv(f64::from)) + &b.mapv(f64::from);
    let size = x.mapv(|v| f64::from(v).abs()).dot(&w.mapv(|v| f64::from(v).abs())) + &b.mapv(|v| f64::from(v).abs());
    (want, size * ((k + 2.0) * 2f64.powi(-24)))
}

fn err_ratio(got: &ArrayD<f32>, want: &Array2<f64>, bound: &Array2<f64>) -> f64 {
    match got.view().into_dimensionality::<Ix2>() {
        Ok(g) if g.dim() == want.dim() => g
            .iter()
            .zip(want.iter().zip(bound.iter()))
            .map(|(g, (w, b))| (f64::from(*g) - w).abs() / b.max(f64::MIN_POSITIVE))
            .fold(0.0, f64::max),
        _ => f64::INFINITY,
    }
}

/// Runs `layer` at tensor-parallel size `tp` on a fresh machine.
pub fn run_layer(topo: &Topology, shape: Shape, layer: Layer, tp: u32) -> Result<TpRow> {
    let Shape {
        tokens,
        hidden,
        ffn,
        pes,
    } = shape;
    let policy = DpPolicy::row_wise(1, pes);
    let x = matrix(tokens, hidden, 1);
    let (w1, b1) = (matrix(hidden, ffn, 2), Array1::from_vec(values(ffn, 3)));
    let (w2, b2) = (matrix(ffn, hidden, 4), Array1::from_vec(values(hidden, 5)));
    let (h, h_bound) = reference(&x, &w1, &b1);
    let (want, bound, input, flops) = match layer {
        Layer::Column => (h, h_bound, x, 2 * tokens * hidden * ffn),
        Layer::Row => {
            let xr = matrix(tokens, ffn, 6);
            let (want, bound) = reference(&xr, &w2, &b2);
            (want, bound, xr, 2 * tokens * hidden * ffn)
        }
        Layer::Mlp => {
            // The activation, rounded to f16 as `bias_gelu` stores it.
            let gelu = h.mapv(|v| half::f16::from_f64(v / (1.0 + (-1.702 * v).exp())).to_f32());
            let (want, bound) = reference(&gelu, &w2, &b2);
            // Where the f32 sum straddles a rounding boundary of the f16
            // activation, it rounds the other way: one f16 step of the
            // largest activation times a weight below 1, allowed in four
            // of the terms.
            let largest = gelu.iter().fold(1f32, |m, v| m.max(v.abs()));
            let step = 2f64.powi(f64::from(largest).log2().floor() as i32 - 10);
            (want, bound + 4.0 * step, x, 4 * tokens * hidden * ffn)
        }
    };
    let (rt, outs) = rank_outputs(topo, tp, |_, ctx| {
        let state = initialize_model_parallel(ctx, tp)?;
        let xt = ctx.from_ndarray(&input.mapv(half::f16::from_f32).into_dyn(), policy)?;
        let opts = LinearOptions {
            policy,
            ..LinearOptions::default()
        };
        let y = match layer {
            Layer::Column => {
                ColumnParallelLinear::new(ctx, &state, &w1, Some(&b1), opts)?
                    .forward(ctx, &xt)?
                    .0
            }
            Layer::Row => {
                RowParallelLinear::new(ctx, &state, &w2, Some(&b2), opts)?
                    .forward(ctx, &xt)?
                    .0
            }
            Layer::Mlp => {
                ParallelMlp::new(ctx, &state, &w1, Some(&b1), &w2, Some(&b2), true, policy)?.forward(ctx, &xt)?
            }
        };
        Ok(y)
    })?;
    let err_ratio = outs.iter().map(|g| err_ratio(g, &want, &bound)).fold(0.0, f64::max);
    let (total_ps, gemm_ps, comm_ps) = split_time(rt.history());
    Ok(TpRow {
        layer,
        tp,
        total_ps,
        gemm_ps,
        comm_ps,
        flops: flops as u64,
        err_ratio,
    })
}

/// Runs `f` on `tp` ranks of a fresh machine and reads back the f32
/// tensor each rank returns: the machine (for its history) and the
/// outputs in rank order.
fn rank_outputs(
    topo: &Topology,
    tp: u32,
    f: impl Fn(u32, &crate::host::Ctx) -> Result<crate::host::Tensor> + Sync,
) -> Result<(Runtime, Vec<ArrayD<f32>>)> {
    let mut rt = Runtime::new(topo);
    let outs = Mutex::new(Vec::new());
    spawn(&mut rt, tp, |rank, ctx| {
        let got = ctx.to_ndarray::<f32>(&f(rank, ctx)?)?;
        outs.lock()
            .map_err(|_| HostError::new("internal: a rank panicked"))?
            .push((rank, got));
        Ok(())
    })
    .map_err(|e| HostError::new(e.to_string()))?;
    let mut outs = outs
        .into_inner()
        .map_err(|_| HostError::new("internal: a rank panicked"))?;
    outs.sort_by_key(|(rank, _)| *rank);
    Ok((rt, outs.into_iter().map(|(_, g)| g).collect()))
}

/// (total, GEMM, communication) of the launches: GEMMs on SIP 0, and the
/// launches over several SIPs (collectives).
fn split_time(history: &[LaunchRecord]) -> (u64, u64, u64) {
    let start = history.iter().map(|r| r.start_ps).min().unwrap_or(0);
    let end = history.iter().map(|r| r.end_ps).max().unwrap_or(0);
    let sum = |keep: &dyn Fn(&LaunchRecord) -> bool| -> u64 {
        history.iter().filter(|r| keep(r)).map(|r| r.end_ps - r.start_ps).sum()
    };
    (
        end - start,
        sum(&|r| r.kernel == "linear" && r.device == Some(0)),
        sum(&|r| r.device.is_none()),
    )
}

/// The tensor-parallel sizes `run` measures: 1 up to the machine's SIPs,
/// those that split `ffn` evenly (every layer splits it: the column
/// layer's outputs, the row layer's inputs).
pub fn sizes(topo: &Topology, shape: Shape) -> Vec<u32> {
    (1..=topo.sips()).filter(|tp| shape.ffn % *tp as usize == 0).collect()
}

/// Every layer at every size of [`sizes`]; `progress` after each.
pub fn run(topo: &Topology, shape: Shape, mut progress: impl FnMut()) -> Result<Vec<TpRow>> {
    let mut rows = Vec::new();
    for layer in Layer::ALL {
        for tp in sizes(topo, shape) {
            rows.push(run_layer(topo, shape, layer, tp)?);
            progress();
        }
    }
    Ok(rows)
}

/// An async-TP kernel of [`super::async_tp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fused {
    /// `fused_all_gather_matmul`: the sequence-parallel input of a column
    /// layer (hidden → ffn) gathered under its GEMM.
    AllGatherMatmul,
    /// `fused_matmul_reduce_scatter`: a row layer's (ffn → hidden)
    /// partial products reduce-scattered to the sequence shards under its
    /// GEMM.
    MatmulReduceScatter,
}

impl Fused {
    pub const ALL: [Fused; 2] = [Fused::AllGatherMatmul, Fused::MatmulReduceScatter];

    pub fn name(self) -> &'static str {
        match self {
            Fused::AllGatherMatmul => "ag+gemm",
            Fused::MatmulReduceScatter => "gemm+rs",
        }
    }
}

/// One async-TP kernel at one tensor-parallel size, against the same work
/// unfused (the registry's collective and `linear`, one after the other).
#[derive(Clone, Debug)]
pub struct AsyncRow {
    pub op: Fused,
    pub tp: u32,
    /// The fused launch.
    pub fused_ps: u64,
    /// The collective and the GEMMs, from the first start to the last end.
    pub unfused_ps: u64,
    /// Rank 0's GEMM in the unfused run.
    pub gemm_ps: u64,
    /// As [`TpRow::err_ratio`], the worse of the two runs'.
    pub err_ratio: f64,
}

impl AsyncRow {
    pub fn correct(&self) -> bool {
        self.err_ratio <= 1.0
    }
}

/// A reference output and its error bound (see [`reference`]).
type Wanted = (Array2<f64>, Array2<f64>);

/// Runs `op` fused and unfused at tensor-parallel size `tp` (each on a
/// fresh machine, one PE per rank): `tokens / tp` rows per rank, `hidden`
/// and `ffn / tp` features.
pub fn run_fused(topo: &Topology, shape: Shape, op: Fused, tp: u32) -> Result<AsyncRow> {
    let Shape {
        tokens, hidden, ffn, ..
    } = shape;
    let world = tp as usize;
    if tokens % world != 0 || ffn % world != 0 {
        return Err(HostError::new(format!(
            "{}: {tokens} tokens and ffn {ffn} must split evenly over {tp} ranks",
            op.name()
        )));
    }
    let (rows, part) = (tokens / world, ffn / world);
    let one_pe = DpPolicy::row_wise(1, 1);
    let zero = |n: usize| Array1::zeros(n);
    // Rank r's operands, and rank r's wanted output with its bound.
    let (inputs, weights, wants): (Vec<Array2<f32>>, Vec<Array2<f32>>, Vec<Wanted>) = match op {
        Fused::AllGatherMatmul => {
            let x = matrix(tokens, hidden, 11);
            let ws: Vec<_> = (0..world).map(|r| matrix(hidden, part, 12 + r as u64)).collect();
            let shards = (0..world)
                .map(|r| x.slice(ndarray::s![r * rows..(r + 1) * rows, ..]).to_owned())
                .collect();
            let wants = ws.iter().map(|w| reference(&x, w, &zero(part))).collect();
            (shards, ws, wants)
        }
        Fused::MatmulReduceScatter => {
            let xs: Vec<_> = (0..world).map(|r| matrix(tokens, part, 13 + r as u64)).collect();
            let ws: Vec<_> = (0..world).map(|r| matrix(part, hidden, 14 + r as u64)).collect();
            // The sum over ranks of x_j @ w_j, rows of rank r; its bound the
            // sum of the ranks' bounds, plus one rounding per added rank.
            let parts: Vec<_> = xs
                .iter()
                .zip(&ws)
                .map(|(x, w)| reference(x, w, &zero(hidden)))
                .collect();
            let wants = (0..world)
                .map(|r| {
                    let rows_of = |a: &Array2<f64>| a.slice(ndarray::s![r * rows..(r + 1) * rows, ..]).to_owned();
                    let sum = |of: &dyn Fn(&Wanted) -> Array2<f64>| -> Array2<f64> {
                        parts.iter().map(of).fold(Array2::zeros((rows, hidden)), |s, p| s + p)
                    };
                    let want = sum(&|(p, _)| rows_of(p));
                    let size = sum(&|(p, _)| rows_of(p).mapv(f64::abs));
                    let bound = sum(&|(_, b)| rows_of(b)) + size * (world as f64 * 2f64.powi(-24));
                    (want, bound)
                })
                .collect();
            (xs, ws, wants)
        }
    };
    let run = |fused: bool| -> Result<(Runtime, f64)> {
        let (rt, outs) = rank_outputs(topo, tp, |rank, ctx| {
            let r = rank as usize;
            let f16 = |a: &Array2<f32>| a.mapv(half::f16::from_f32).into_dyn();
            let x = ctx.from_ndarray(&f16(&inputs[r]), one_pe)?;
            let w = ctx.from_ndarray(&f16(&weights[r]), one_pe)?;
            let linear = || super::compile(ctx, "linear", &[]);
            let y = match (op, fused) {
                (Fused::AllGatherMatmul, true) => super::fused_all_gather_matmul(ctx, &x, &w)?.1,
                (Fused::AllGatherMatmul, false) => {
                    let ag = ctx.empty(&[tokens, hidden], DType::F16, one_pe)?;
                    let y = ctx.empty(&[tokens, part], DType::F32, one_pe)?;
                    ctx.all_gather(&ag, &x)?;
                    super::launch_linear(ctx, &linear()?, &ag, &w, &y, tokens, part, hidden, 0)?;
                    y
                }
                (Fused::MatmulReduceScatter, true) => super::fused_matmul_reduce_scatter(ctx, &x, &w)?,
                (Fused::MatmulReduceScatter, false) => {
                    let y = ctx.empty(&[tokens, hidden], DType::F32, one_pe)?;
                    let out = ctx.empty(&[rows, hidden], DType::F32, one_pe)?;
                    super::launch_linear(ctx, &linear()?, &x, &w, &y, tokens, hidden, part, 0)?;
                    ctx.reduce_scatter(&out, &y, ReduceOp::Sum)?;
                    out
                }
            };
            Ok(y)
        })?;
        let err = outs
            .iter()
            .zip(&wants)
            .map(|(g, (want, bound))| err_ratio(g, want, bound))
            .fold(0.0, f64::max);
        Ok((rt, err))
    };
    let (fused_rt, fused_err) = run(true)?;
    let (unfused_rt, unfused_err) = run(false)?;
    let (unfused_ps, gemm_ps, _) = split_time(unfused_rt.history());
    Ok(AsyncRow {
        op,
        tp,
        fused_ps: split_time(fused_rt.history()).0,
        unfused_ps,
        gemm_ps,
        err_ratio: fused_err.max(unfused_err),
    })
}

/// The tensor-parallel sizes the async-TP kernels run at: those of
/// [`sizes`] from 2 (one rank has nothing to communicate) that split the
/// tokens evenly.
pub fn async_sizes(topo: &Topology, shape: Shape) -> Vec<u32> {
    sizes(topo, shape)
        .into_iter()
        .filter(|tp| *tp >= 2 && shape.tokens % *tp as usize == 0)
        .collect()
}

/// Every async-TP kernel at every size of [`async_sizes`]; `progress`
/// after each.
pub fn run_async(topo: &Topology, shape: Shape, mut progress: impl FnMut()) -> Result<Vec<AsyncRow>> {
    let mut rows = Vec::new();
    for op in Fused::ALL {
        for tp in async_sizes(topo, shape) {
            rows.push(run_fused(topo, shape, op, tp)?);
            progress();
        }
    }
    Ok(rows)
}

/// Sequence-parallel attention ([`super::ring_attention`]) at one size.
#[derive(Clone, Debug)]
pub struct AttentionRow {
    pub causal: bool,
    pub tp: u32,
    /// The launch, from its start to its end.
    pub time_ps: u64,
    /// 2 × the multiply-adds of q kᵀ and p v over the scores that count
    /// (all ranks').
    pub flops: u64,
    /// Largest |got − want| / bound over every rank's output, the bound
    /// being what rounding the probabilities to f16 may cost (see
    /// [`run_attention`]): at most 1 when the output is right.
    pub err_ratio: f64,
}

impl AttentionRow {
    pub fn correct(&self) -> bool {
        self.err_ratio <= 1.0
    }
}

/// Head size of the attention rows; the query heads are `hidden / 128`
/// and the key/value heads about an eighth of those (see
/// [`attention_heads`]), the ratio of grouped-query Llama-2/3-70B (64 and
/// 8).
pub const HEAD_DIM: usize = 128;

/// The attention rows' heads: (query heads, key/value heads), the latter
/// the largest divisor of the former up to an eighth of it.
pub fn attention_heads(shape: Shape) -> (usize, usize) {
    let h = (shape.hidden / HEAD_DIM).max(1);
    let h_kv = (1..=(h / 8).max(1)).rev().find(|d| h % d == 0).unwrap_or(1);
    (h, h_kv)
}

/// `ring_attention` over `tp` ranks (one PE each, one rank per SIP), the
/// sequence of `tokens` positions split evenly, against an f64 softmax
/// reference. The kernel rounds the probabilities to f16 for the product
/// with v: each output is Σ p̃ⱼ vⱼ / Σ pⱼ with p̃ⱼ = pⱼ(1 + δⱼ), |δⱼ| ≤
/// 2⁻¹¹, off by at most 2⁻¹¹ · max |v|; the bound is twice that, for the
/// f32 arithmetic besides.
pub fn run_attention(topo: &Topology, shape: Shape, causal: bool, tp: u32) -> Result<AttentionRow> {
    let world = tp as usize;
    let s = shape.tokens;
    if s % world != 0 {
        return Err(HostError::new(format!(
            "attention: {s} tokens must split evenly over {tp} ranks"
        )));
    }
    let (h, h_kv) = attention_heads(shape);
    let d = HEAD_DIM;
    let heads = |n: usize, seed: u64| ndarray::Array3::from_shape_vec((n, s, d), values(n * s * d, seed));
    let (q, k, v) = (
        heads(h, 21).map_err(|e| HostError::new(e.to_string()))?,
        heads(h_kv, 22).map_err(|e| HostError::new(e.to_string()))?,
        heads(h_kv, 23).map_err(|e| HostError::new(e.to_string()))?,
    );
    let rows = s / world;
    let one_pe = DpPolicy::row_wise(1, 1);
    let (rt, outs) = rank_outputs(topo, tp, |rank, ctx| {
        let r0 = rank as usize * rows;
        let part = |a: &ndarray::Array3<f32>| {
            a.slice(ndarray::s![.., r0..r0 + rows, ..])
                .mapv(half::f16::from_f32)
                .into_dyn()
        };
        let (qt, kt, vt) = (
            ctx.from_ndarray(&part(&q), one_pe)?,
            ctx.from_ndarray(&part(&k), one_pe)?,
            ctx.from_ndarray(&part(&v), one_pe)?,
        );
        super::ring_attention(ctx, &qt, &kt, &vt, causal)
    })?;
    let want = attention_reference(&q, &k, &v, 1.0 / (d as f64).sqrt(), causal);
    let bound = 2.0 * 2f64.powi(-11) * v.iter().fold(0f64, |m, x| m.max(f64::from(x.abs())));
    let mut err = 0f64;
    for (rank, got) in outs.iter().enumerate() {
        let want = want.slice(ndarray::s![.., rank * rows..(rank + 1) * rows, ..]);
        match got.view().into_dimensionality::<ndarray::Ix3>() {
            Ok(got) if got.dim() == want.dim() => {
                for (g, w) in got.iter().zip(want.iter()) {
                    let e = (f64::from(*g) - w).abs();
                    err = err.max(if e.is_nan() { f64::INFINITY } else { e / bound });
                }
            }
            _ => err = f64::INFINITY,
        }
    }
    let pairs = if causal { s * (s + 1) / 2 } else { s * s };
    Ok(AttentionRow {
        causal,
        tp,
        time_ps: split_time(rt.history()).0,
        flops: (4 * h * d * pairs) as u64,
        err_ratio: err,
    })
}

/// `softmax(q kᵀ · scale) v` per query head in f64: `q` `[H, S, D]`, `k`
/// and `v` `[H_KV, S, D]`, query head h using key/value head
/// `h / (H / H_KV)`; with `causal`, position i attends to positions ≤ i.
/// The reference of the attention rows (and of `tests/attention.rs`).
pub fn attention_reference(
    q: &ndarray::Array3<f32>,
    k: &ndarray::Array3<f32>,
    v: &ndarray::Array3<f32>,
    scale: f64,
    causal: bool,
) -> ndarray::Array3<f64> {
    let (h, s, d) = q.dim();
    let group = h / k.dim().0.max(1);
    let mut out = ndarray::Array3::<f64>::zeros((h, s, d));
    for hq in 0..h {
        let g = hq / group.max(1);
        for i in 0..s {
            let keys = if causal { i + 1 } else { s };
            let scores: Vec<f64> = (0..keys)
                .map(|j| {
                    (0..d)
                        .map(|x| f64::from(q[[hq, i, x]]) * f64::from(k[[g, j, x]]))
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let p: Vec<f64> = scores.iter().map(|sc| (sc - max).exp()).collect();
            let sum: f64 = p.iter().sum();
            for x in 0..d {
                out[[hq, i, x]] = (0..keys).map(|j| p[j] * f64::from(v[[g, j, x]])).sum::<f64>() / sum;
            }
        }
    }
    out
}

/// The sizes the attention rows run at: 1 up to the machine's SIPs, those
/// that split the tokens evenly.
pub fn attention_sizes(topo: &Topology, shape: Shape) -> Vec<u32> {
    (1..=topo.sips())
        .filter(|tp| shape.tokens % *tp as usize == 0)
        .collect()
}

/// Attention, not causal then causal, at every size of
/// [`attention_sizes`]; `progress` after each.
pub fn run_attention_all(topo: &Topology, shape: Shape, mut progress: impl FnMut()) -> Result<Vec<AttentionRow>> {
    let mut rows = Vec::new();
    for causal in [false, true] {
        for tp in attention_sizes(topo, shape) {
            rows.push(run_attention(topo, shape, causal, tp)?);
            progress();
        }
    }
    Ok(rows)
}
