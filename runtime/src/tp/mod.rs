//! `tp`: Megatron-style tensor parallelism on the host API, inside
//! [`spawn`](crate::host::spawn): the parallel state
//! ([`initialize_model_parallel`]), [`ColumnParallelLinear`],
//! [`RowParallelLinear`] and the [`ParallelMlp`] built of the two.
//! Beside them: the async-TP fused GEMMs ([`fused_all_gather_matmul`],
//! [`fused_matmul_reduce_scatter`]), which the layers run under
//! Megatron's sequence parallelism
//! ([`LinearOptions::sequence_parallel`]), and sequence-parallel
//! [`ring_attention`].
//!
//! Each rank (one SIP) holds its partition of a layer's weights and runs
//! the layer's GEMM on its own PEs (`stdlib/kernels/tp.tl`); the
//! communication Megatron puts between layers (the all-gather of a
//! column-parallel output, the all-reduce of a row-parallel one) runs as
//! the registry's collective algorithms. Since SIPs keep clocks of their
//! own (see [`Runtime::device_now_ps`](crate::host::Runtime::device_now_ps)),
//! the ranks' GEMMs overlap in simulated time and the collectives wait
//! for the slowest rank, as on real devices.
//!
//! Shapes and dtypes follow Megatron: activations `[tokens, features]`;
//! GEMM inputs f16, outputs f32 (accumulated in f32); weights stored as
//! `[in_features, out_features]` f16 (so `y = x @ w`), biases f32.
//! Activations are split row-wise (by token) over the PEs of the layer's
//! [`DpPolicy`], and each of those PEs holds the rank's whole weight
//! partition.

mod async_tp;
mod attention;
pub mod bench;

pub use async_tp::{fused_all_gather_matmul, fused_matmul_reduce_scatter};
pub use attention::ring_attention;

use crate::ccl::ReduceOp;
use crate::host::{default_stdlib, Arg, Ctx, Dist, DpPolicy, HostError, Kernel, Result, Tensor};
use kernbench_compiler::sema::{DType, Konst};
use ndarray::{s, Array1, Array2, ArrayD};
use std::path::PathBuf;

/// The tensor-model-parallel group of a rank: Megatron's parallel state.
/// Every rank of the `spawn` is in the one group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParallelState {
    rank: u32,
    world: u32,
}

/// Sets up tensor parallelism over the `spawn`'s ranks (Megatron's
/// `initialize_model_parallel`): `tensor_model_parallel_size` must be the
/// number of ranks (pipeline and data parallelism are not modelled).
pub fn initialize_model_parallel(ctx: &Ctx, tensor_model_parallel_size: u32) -> Result<ParallelState> {
    let world = ctx.get_world_size();
    if tensor_model_parallel_size != world {
        return Err(HostError::new(format!(
            "initialize_model_parallel({tensor_model_parallel_size}): the tensor-parallel size must be the \
             number of ranks ({world}); pipeline and data parallelism are not modelled"
        )));
    }
    Ok(ParallelState {
        rank: ctx.get_rank(),
        world,
    })
}

impl ParallelState {
    pub fn tensor_model_parallel_rank(&self) -> u32 {
        self.rank
    }

    pub fn tensor_model_parallel_world_size(&self) -> u32 {
        self.world
    }

    /// This rank's part of `n` features split evenly over the group.
    fn part(&self, what: &str, n: usize) -> Result<usize> {
        let w = self.world as usize;
        if n == 0 || n % w != 0 {
            return Err(HostError::new(format!(
                "{what} ({n}) must split evenly over {w} tensor-parallel ranks"
            )));
        }
        Ok(n / w)
    }
}

/// The Megatron options of a parallel linear layer, and where its
/// activations live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinearOptions {
    /// Add a bias (per output feature).
    pub bias: bool,
    /// Column-parallel: all-gather the output so every rank has all of it
    /// (else each keeps its columns).
    pub gather_output: bool,
    /// Row-parallel: the input is already split by columns over the ranks
    /// (each rank's `[tokens, in_features / world]` f16, as `ParallelMlp`
    /// hands its activation on); else each rank reads its columns of the
    /// whole input.
    pub input_is_parallel: bool,
    /// Return the bias beside the output instead of adding it (for a
    /// following fused bias + activation). A column-parallel layer returns
    /// this rank's part of the bias, as Megatron does, also when it
    /// gathers its output.
    pub skip_bias_add: bool,
    /// The PEs of each rank's SIP that hold the activations (split by
    /// rows) and a copy each of the weights.
    pub policy: DpPolicy,
    /// Megatron's sequence parallelism, with the collective under the
    /// GEMM (async TP). Column-parallel: the input is this rank's block of
    /// the tokens, `[tokens / world, in_features]`, all-gathered along the
    /// tokens inside the GEMM ([`fused_all_gather_matmul`]); the output is
    /// `[tokens, out_features / world]`, and `gather_output` must be off.
    /// Row-parallel: `input_is_parallel` must be on, and the output is
    /// reduce-scattered along the tokens inside the GEMM
    /// ([`fused_matmul_reduce_scatter`]): this rank's `[tokens / world,
    /// out_features]`. With P PEs per rank, the gathered tokens are in the
    /// fused kernels' per-PE order (each PE gathers the ranks' blocks of
    /// its own rows), which the row-parallel layer's scatter undoes.
    pub sequence_parallel: bool,
}

impl Default for LinearOptions {
    /// Megatron's defaults: a bias, added; a gathered column-parallel
    /// output; a row-parallel input that is not split yet; one PE.
    fn default() -> Self {
        LinearOptions {
            bias: true,
            gather_output: true,
            input_is_parallel: false,
            skip_bias_add: false,
            policy: DpPolicy::row_wise(1, 1),
            sequence_parallel: false,
        }
    }
}

impl LinearOptions {
    fn activations(&self) -> DpPolicy {
        DpPolicy {
            dist: Dist::RowWise,
            ..self.policy
        }
    }

    fn weights(&self) -> DpPolicy {
        DpPolicy {
            dist: Dist::Replicate,
            ..self.policy
        }
    }

    fn pes(&self) -> usize {
        (self.policy.num_cubes * self.policy.num_pes) as usize
    }
}

/// GEMM tile sizes of `linear` (`tp.tl`'s defaults): 128 × 128 × 32, as
/// gemm.tl's, the fastest there (in `tlc bench tp` at the default sizes,
/// half the GEMM time of 64 × 64 × 32).
const BLOCK_M: usize = 128;
const BLOCK_N: usize = 128;
/// Rows × columns per program of the element-wise kernels (`tp.tl`'s
/// defaults).
const ELEMWISE_ROWS: usize = 16;
const ELEMWISE_COLS: usize = 256;

/// Programs of an element-wise kernel over `rows × cols`.
fn elemwise_programs(rows: usize, cols: usize) -> usize {
    cdiv(rows, ELEMWISE_ROWS) * cdiv(cols, ELEMWISE_COLS)
}

fn kernels_file() -> Result<PathBuf> {
    default_stdlib()
        .map(|d| d.join("kernels/tp.tl"))
        .ok_or_else(|| HostError::new("cannot find the stdlib (set KERNBENCH_STDLIB)"))
}

fn compile(ctx: &Ctx, kernel: &str, constexprs: &[(&str, Konst)]) -> Result<Kernel> {
    ctx.compile(kernels_file()?, kernel, constexprs)
}

fn i32_arg(what: &str, n: usize) -> Result<Arg<'static>> {
    i32::try_from(n)
        .map(Arg::I32)
        .map_err(|_| HostError::new(format!("{what} ({n}) does not fit the kernels' i32")))
}

fn cdiv(a: usize, b: usize) -> usize {
    a.div_ceil(b)
}

fn grid(programs: usize) -> Result<Option<[u32; 3]>> {
    let g = u32::try_from(programs)
        .map_err(|_| HostError::new(format!("{programs} programs are more than a launch's grid takes")))?;
    Ok(Some([g.max(1), 1, 1]))
}

/// Checks an activation: `[rows, features]` of `dtype`, split by rows
/// over the layer's PEs; returns the rows each PE holds.
fn check_activation(what: &str, x: &Tensor, features: usize, dtype: DType, opts: &LinearOptions) -> Result<usize> {
    let shape = x.shape();
    if shape.len() != 2 || shape[1] != features || x.dtype() != dtype {
        return Err(HostError::new(format!(
            "{what}: expected a {dtype} tensor of [tokens, {features}], got {}{shape:?}",
            x.dtype()
        )));
    }
    if shape.len() == 2 && shape[0] == 0 {
        return Err(HostError::new(format!("{what}: the input has no tokens")));
    }
    let pes = opts.pes();
    let wanted = opts.activations();
    let same = x.policy() == wanted || (pes == 1 && x.policy().cube == wanted.cube && x.policy().pe == wanted.pe);
    if !same || x.placement().len() != pes {
        return Err(HostError::new(format!(
            "{what}: the input must be split by rows over the layer's {pes} PE(s) ({wanted:?}); it is {:?}",
            x.policy()
        )));
    }
    Ok(shape[0] / pes)
}

/// The GEMM `y[:, :] = x[:, col0 .. col0 + k] @ w` on every PE of the
/// layer, `rows` rows each.
#[allow(clippy::too_many_arguments)]
fn launch_linear(
    ctx: &Ctx,
    linear: &Kernel,
    x: &Tensor,
    w: &Tensor,
    y: &Tensor,
    rows: usize,
    n: usize,
    k: usize,
    col0: usize,
) -> Result<()> {
    let ldx = x.shape()[1];
    ctx.launch(
        linear,
        grid(cdiv(rows, BLOCK_M) * cdiv(n, BLOCK_N))?,
        &[
            Arg::Tensor(x),
            Arg::Tensor(w),
            Arg::Tensor(y),
            i32_arg("tokens", rows)?,
            i32_arg("output features", n)?,
            i32_arg("input features", k)?,
            i32_arg("input features", ldx)?,
            i32_arg("input features", col0)?,
        ],
    )
}

/// `y[r, :] += bias` on every PE of the layer (`rows` rows each).
fn launch_add_bias(ctx: &Ctx, add_bias: &Kernel, y: &Tensor, bias: &Tensor, rows: usize) -> Result<()> {
    let n = y.shape()[1];
    ctx.launch(
        add_bias,
        grid(elemwise_programs(rows, n))?,
        &[
            Arg::Tensor(y),
            Arg::Tensor(bias),
            i32_arg("tokens", rows)?,
            i32_arg("features", n)?,
        ],
    )
}

fn to_f16(a: ArrayD<f32>) -> ArrayD<half::f16> {
    a.mapv(half::f16::from_f32)
}

/// Megatron's `ColumnParallelLinear`: `y = x @ w + b` with `w`'s columns
/// (output features) split over the ranks.
pub struct ColumnParallelLinear {
    state: ParallelState,
    opts: LinearOptions,
    in_features: usize,
    out_features: usize,
    /// `[in_features, out_features / world]`, f16, on every PE.
    weight: Tensor,
    /// `[out_features / world]`, f32, on every PE.
    bias: Option<Tensor>,
    linear: Kernel,
    add_bias: Kernel,
    unshard: Kernel,
}

impl ColumnParallelLinear {
    /// The layer from the whole weight `[in_features, out_features]` (and
    /// bias `[out_features]` when `opts.bias`): this rank keeps its
    /// columns.
    pub fn new(
        ctx: &Ctx,
        state: &ParallelState,
        weight: &Array2<f32>,
        bias: Option<&Array1<f32>>,
        opts: LinearOptions,
    ) -> Result<ColumnParallelLinear> {
        if opts.sequence_parallel && opts.gather_output {
            return Err(HostError::new(
                "ColumnParallelLinear: `sequence_parallel` needs `gather_output` off (the output keeps this rank's columns of every token)",
            ));
        }
        let (in_features, out_features) = weight.dim();
        let part = state.part("ColumnParallelLinear: out_features", out_features)?;
        let c0 = state.rank as usize * part;
        let w = weight.slice(s![.., c0..c0 + part]).to_owned().into_dyn();
        let weight_t = ctx.from_ndarray(&to_f16(w), opts.weights())?;
        let bias_t = load_bias(ctx, "ColumnParallelLinear", bias, out_features, c0..c0 + part, &opts)?;
        Ok(ColumnParallelLinear {
            state: *state,
            opts,
            in_features,
            out_features,
            weight: weight_t,
            bias: bias_t,
            linear: compile(ctx, "linear", &[])?,
            add_bias: compile(ctx, "add_bias", &[])?,
            unshard: compile(ctx, "unshard_columns", &[])?,
        })
    }

    /// The output (`[tokens, out_features]` f32 with `gather_output`, else
    /// this rank's `[tokens, out_features / world]`) and, with
    /// `skip_bias_add`, the bias still to add. `x`: `[tokens,
    /// in_features]` f16, the same on every rank (with
    /// `sequence_parallel`: this rank's `[tokens / world, in_features]`).
    pub fn forward(&self, ctx: &Ctx, x: &Tensor) -> Result<(Tensor, Option<Tensor>)> {
        let o = &self.opts;
        let mut rows = check_activation("ColumnParallelLinear", x, self.in_features, DType::F16, o)?;
        let y = if o.sequence_parallel {
            rows *= self.state.world as usize;
            fused_all_gather_matmul(ctx, x, &self.weight)?.1
        } else {
            let y = ctx.empty(&[x.shape()[0], self.weight.shape()[1]], DType::F32, o.activations())?;
            launch_linear(
                ctx,
                &self.linear,
                x,
                &self.weight,
                &y,
                rows,
                y.shape()[1],
                self.in_features,
                0,
            )?;
            y
        };
        let (tokens, part) = (y.shape()[0], y.shape()[1]);
        if let (Some(b), false) = (&self.bias, o.skip_bias_add) {
            launch_add_bias(ctx, &self.add_bias, &y, b, rows)?;
        }
        let skipped = if o.skip_bias_add { self.bias.clone() } else { None };
        let world = self.state.world as usize;
        if !o.gather_output || world == 1 {
            return Ok((y, skipped));
        }
        // Each PE gathers the ranks' blocks of its rows ([rows, part]
        // each, stacked rank after rank); one more pass puts each block in
        // its columns.
        let stacked = ctx.empty(&[world * tokens, part], DType::F32, o.activations())?;
        ctx.all_gather_per_shard(&stacked, &y)?;
        let out = ctx.empty(&[tokens, self.out_features], DType::F32, o.activations())?;
        ctx.launch(
            &self.unshard,
            grid(world * elemwise_programs(rows, part))?,
            &[
                Arg::Tensor(&stacked),
                Arg::Tensor(&out),
                i32_arg("tokens", rows)?,
                i32_arg("features", part)?,
                i32_arg("ranks", world)?,
            ],
        )?;
        Ok((out, skipped))
    }
}

/// This rank's part `cols` of a bias of `n` features, on every PE of the
/// layer (`None` without `opts.bias`).
fn load_bias(
    ctx: &Ctx,
    layer: &str,
    bias: Option<&Array1<f32>>,
    n: usize,
    cols: std::ops::Range<usize>,
    opts: &LinearOptions,
) -> Result<Option<Tensor>> {
    match (opts.bias, bias) {
        (false, None) => Ok(None),
        (false, Some(_)) => Err(HostError::new(format!("{layer}: a bias was given, but `bias` is off"))),
        (true, None) => Err(HostError::new(format!("{layer}: `bias` is on and no bias was given"))),
        (true, Some(b)) if b.len() != n => Err(HostError::new(format!(
            "{layer}: the bias has {} features, the layer {n} outputs",
            b.len()
        ))),
        (true, Some(b)) => {
            let part = b.slice(s![cols]).to_owned().into_dyn();
            ctx.from_ndarray(&part, opts.weights()).map(Some)
        }
    }
}

/// Megatron's `RowParallelLinear`: `y = x @ w + b` with `w`'s rows (input
/// features) split over the ranks; the partial products are all-reduced
/// (the registry's all-reduce) before the bias is added.
pub struct RowParallelLinear {
    state: ParallelState,
    opts: LinearOptions,
    in_features: usize,
    /// `[in_features / world, out_features]`, f16, on every PE.
    weight: Tensor,
    /// `[out_features]`, f32, on every PE.
    bias: Option<Tensor>,
    linear: Kernel,
    add_bias: Kernel,
}

impl RowParallelLinear {
    /// The layer from the whole weight `[in_features, out_features]` (and
    /// bias `[out_features]` when `opts.bias`): this rank keeps its rows.
    pub fn new(
        ctx: &Ctx,
        state: &ParallelState,
        weight: &Array2<f32>,
        bias: Option<&Array1<f32>>,
        opts: LinearOptions,
    ) -> Result<RowParallelLinear> {
        if opts.sequence_parallel && !opts.input_is_parallel {
            return Err(HostError::new(
                "RowParallelLinear: `sequence_parallel` needs `input_is_parallel` on (the input is this rank's columns of every token)",
            ));
        }
        let (in_features, out_features) = weight.dim();
        let part = state.part("RowParallelLinear: in_features", in_features)?;
        let r0 = state.rank as usize * part;
        let w = weight.slice(s![r0..r0 + part, ..]).to_owned().into_dyn();
        let weight_t = ctx.from_ndarray(&to_f16(w), opts.weights())?;
        let bias_t = load_bias(ctx, "RowParallelLinear", bias, out_features, 0..out_features, &opts)?;
        Ok(RowParallelLinear {
            state: *state,
            opts,
            in_features,
            weight: weight_t,
            bias: bias_t,
            linear: compile(ctx, "linear", &[])?,
            add_bias: compile(ctx, "add_bias", &[])?,
        })
    }

    /// The output `[tokens, out_features]` f32, the same on every rank
    /// (with `sequence_parallel`: this rank's `[tokens / world,
    /// out_features]`), and with `skip_bias_add` the bias still to add.
    /// `x`: `[tokens, in_features / world]` f16 with `input_is_parallel`,
    /// else `[tokens, in_features]` (the same on every rank).
    pub fn forward(&self, ctx: &Ctx, x: &Tensor) -> Result<(Tensor, Option<Tensor>)> {
        let o = &self.opts;
        let part = self.weight.shape()[0];
        let (features, col0) = match o.input_is_parallel {
            true => (part, 0),
            false => (self.in_features, self.state.rank as usize * part),
        };
        let mut rows = check_activation("RowParallelLinear", x, features, DType::F16, o)?;
        let y = if o.sequence_parallel {
            let y = fused_matmul_reduce_scatter(ctx, x, &self.weight)?;
            rows /= self.state.world as usize;
            y
        } else {
            let y = ctx.empty(&[x.shape()[0], self.weight.shape()[1]], DType::F32, o.activations())?;
            launch_linear(ctx, &self.linear, x, &self.weight, &y, rows, y.shape()[1], part, col0)?;
            if self.state.world > 1 {
                ctx.all_reduce(&y, ReduceOp::Sum)?;
            }
            y
        };
        match (&self.bias, o.skip_bias_add) {
            (Some(b), false) => {
                launch_add_bias(ctx, &self.add_bias, &y, b, rows)?;
                Ok((y, None))
            }
            (b, _) => Ok((y, b.clone())),
        }
    }
}

/// Megatron's `ParallelMLP`: `h = gelu(x @ w1 + b1)` column-parallel (the
/// bias and GELU fused, in f16), then `y = h @ w2 + b2` row-parallel. The
/// only communication is the all-reduce of the second layer (with
/// sequence parallelism: the all-gather inside the first GEMM and the
/// reduce-scatter inside the second). GELU is the sigmoid form,
/// `x · σ(1.702 x)`.
pub struct ParallelMlp {
    fc1: ColumnParallelLinear,
    fc2: RowParallelLinear,
    bias_gelu: Kernel,
}

/// How a [`ParallelMlp`] is built: biases, the PEs of each rank, and
/// sequence parallelism (see [`LinearOptions::sequence_parallel`]: the
/// input and the output are then this rank's block of the tokens).
#[derive(Clone, Copy, Debug)]
pub struct MlpOptions {
    pub bias: bool,
    pub policy: DpPolicy,
    pub sequence_parallel: bool,
}

impl Default for MlpOptions {
    /// Biases, one PE, no sequence parallelism.
    fn default() -> Self {
        MlpOptions {
            bias: true,
            policy: DpPolicy::row_wise(1, 1),
            sequence_parallel: false,
        }
    }
}

impl ParallelMlp {
    /// From the whole weights: `w1` `[hidden, ffn]`, `w2` `[ffn, hidden]`,
    /// and biases `b1` `[ffn]`, `b2` `[hidden]` when `bias`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ctx: &Ctx,
        state: &ParallelState,
        w1: &Array2<f32>,
        b1: Option<&Array1<f32>>,
        w2: &Array2<f32>,
        b2: Option<&Array1<f32>>,
        bias: bool,
        policy: DpPolicy,
    ) -> Result<ParallelMlp> {
        let opts = MlpOptions {
            bias,
            policy,
            sequence_parallel: false,
        };
        ParallelMlp::with_options(ctx, state, w1, b1, w2, b2, opts)
    }

    /// [`ParallelMlp::new`] with every option.
    pub fn with_options(
        ctx: &Ctx,
        state: &ParallelState,
        w1: &Array2<f32>,
        b1: Option<&Array1<f32>>,
        w2: &Array2<f32>,
        b2: Option<&Array1<f32>>,
        opts: MlpOptions,
    ) -> Result<ParallelMlp> {
        let MlpOptions {
            bias,
            policy,
            sequence_parallel,
        } = opts;
        if w1.dim().1 != w2.dim().0 || w1.dim().0 != w2.dim().1 {
            return Err(HostError::new(format!(
                "ParallelMlp: w1 is {:?} and w2 {:?}; they must be [hidden, ffn] and [ffn, hidden]",
                w1.dim(),
                w2.dim()
            )));
        }
        let fc1 = ColumnParallelLinear::new(
            ctx,
            state,
            w1,
            b1,
            LinearOptions {
                bias,
                gather_output: false,
                skip_bias_add: true,
                policy,
                sequence_parallel,
                ..LinearOptions::default()
            },
        )?;
        let fc2 = RowParallelLinear::new(
            ctx,
            state,
            w2,
            b2,
            LinearOptions {
                bias,
                input_is_parallel: true,
                policy,
                sequence_parallel,
                ..LinearOptions::default()
            },
        )?;
        let bias_gelu = compile(ctx, "bias_gelu", &[("HAS_BIAS", Konst::Bool(bias))])?;
        Ok(ParallelMlp { fc1, fc2, bias_gelu })
    }

    /// `[tokens, hidden]` f32 on every rank, from `x` `[tokens, hidden]`
    /// f16 (the same on every rank); with `sequence_parallel`, this rank's
    /// `[tokens / world, hidden]` from its `[tokens / world, hidden]`.
    pub fn forward(&self, ctx: &Ctx, x: &Tensor) -> Result<Tensor> {
        let (h32, b1) = self.fc1.forward(ctx, x)?;
        let o = &self.fc1.opts;
        let rows = h32.shape()[0] / o.pes();
        let n = h32.shape()[1];
        let h = ctx.empty(h32.shape(), DType::F16, o.activations())?;
        // Without a bias the kernel never reads its bias pointer.
        let bias = b1.as_ref().unwrap_or(&h32);
        ctx.launch(
            &self.bias_gelu,
            grid(elemwise_programs(rows, n))?,
            &[
                Arg::Tensor(&h32),
                Arg::Tensor(bias),
                Arg::Tensor(&h),
                i32_arg("tokens", rows)?,
                i32_arg("features", n)?,
            ],
        )?;
        Ok(self.fc2.forward(ctx, &h)?.0)
    }
}
