//! Async tensor parallelism: a GEMM fused with the collective beside it,
//! so that the communication runs under the GEMM chunk by chunk (PyTorch's
//! `torch.ops.symm_mem.fused_all_gather_matmul` and
//! `fused_matmul_reduce_scatter`). Each is one launch across the ranks of
//! a kernel of `stdlib/kernels/async_tp.tl` that multiplies one chunk while
//! it passes another round the ring ([`Ctx::launch_across_ranks`]).
//!
//! Tensors are split by rows over each rank's PEs (or on one PE) and the
//! weight is on each of those PEs. With several PEs per rank each PE works
//! on its own rows: it gathers (or reduce-scatters) the ranks' blocks of
//! its rows, as [`Ctx::all_gather_per_shard`] does, so a gathered shard
//! holds the ranks' blocks one after another. With one PE per rank that
//! is exactly the gather (or scatter) along the rows.

use super::i32_arg;
use crate::host::{default_stdlib, Arg, Ctx, HostError, Kernel, QueueSlots, Result, Tensor};
use kernbench_compiler::sema::DType;

/// The queues of a fused kernel whose messages are `message_bytes` (one
/// tile: 128 × 32 f16 in the all-gather, 128 × 128 f32 in the
/// reduce-scatter, `async_tp.tl`'s defaults). The ranks run nearly in
/// step; the slots let a sender run a few tiles ahead of its successor
/// (as many across SIPs: 16 of the reduce-scatter's 64 KiB tiles would
/// fill a TCM, and the all-gather's kernel is not bound by them).
fn slots(message_bytes: u64) -> QueueSlots {
    QueueSlots {
        n_slots: 4,
        n_slots_across_sips: 4,
        slot_size_bytes: message_bytes,
    }
}

fn compile(ctx: &Ctx, kernel: &str) -> Result<Kernel> {
    let file = default_stdlib()
        .map(|d| d.join("kernels/async_tp.tl"))
        .ok_or_else(|| HostError::new("cannot find the stdlib (set KERNBENCH_STDLIB)"))?;
    ctx.compile(file, kernel, &[])
}

/// Checks a `[rows, cols]` operand of `dtype` split evenly by rows over
/// its PEs (or on one); returns the rows of each PE.
fn rows_per_pe(what: &str, t: &Tensor, dtype: DType) -> Result<usize> {
    let shape = t.shape();
    if shape.len() != 2 || t.dtype() != dtype || shape[0] == 0 || shape[1] == 0 {
        return Err(HostError::new(format!(
            "{what}: expected a non-empty 2-D {dtype} tensor, got {}{shape:?}",
            t.dtype()
        )));
    }
    let shards = t.placement();
    let rows = shards[0].rows.len();
    if shards.iter().any(|s| s.rows.len() != rows || s.cols.len() != shape[1]) {
        return Err(HostError::new(format!(
            "{what}: its {} rows must be split evenly by rows over its {} PEs",
            shape[0],
            shards.len()
        )));
    }
    Ok(rows)
}

/// Checks the weight `[k, n]` f16 against the operand `x`'s `k`: whole
/// on each of `x`'s PEs (replicated over them), or on one PE; returns `n`.
fn weight_cols(what: &str, w: &Tensor, x: &Tensor, k: usize) -> Result<usize> {
    let shape = w.shape();
    if shape.len() != 2 || w.dtype() != DType::F16 || shape[0] != k || shape[1] == 0 {
        return Err(HostError::new(format!(
            "{what}: the weight must be an f16 [{k}, n] tensor, got {}{shape:?}",
            w.dtype()
        )));
    }
    let n = shape[1];
    let (ws, xs) = (w.placement(), x.placement());
    let whole = ws.iter().all(|s| s.rows.len() == k && s.cols.len() == n);
    let on_x = ws.len() == 1 || (ws.len() == xs.len() && ws.iter().zip(xs).all(|(a, b)| a.pe == b.pe));
    if !whole || !on_x {
        return Err(HostError::new(format!(
            "{what}: the weight must be whole on each of the operand's {} PE(s) (replicated) or on one PE; it is {:?} over {} PE(s)",
            xs.len(),
            w.policy().dist,
            ws.len()
        )));
    }
    Ok(n)
}

/// `ag = all_gather(a)` along the rows and `y = ag @ w`, with the gather
/// under the GEMM: each rank multiplies the chunk it has while it passes
/// it on to the next rank. `a`: this rank's `[rows, k]` f16; `w`: `[k, n]`
/// f16, whole on each PE of `a`. Returns `ag` (`[world · rows, k]` f16)
/// and `y` (`[world · rows, n]` f32, accumulated in f32). With one PE per
/// rank, rank j's block of `ag` is at rows `j · rows`; with P PEs, PE p
/// holds the ranks' blocks of its `m = rows / P` rows one after another
/// (rows `p · world · m + j · m ..` of `ag`). Every rank calls it, with
/// operands of the same shapes.
pub fn fused_all_gather_matmul(ctx: &Ctx, a: &Tensor, w: &Tensor) -> Result<(Tensor, Tensor)> {
    const WHAT: &str = "fused_all_gather_matmul";
    let m = rows_per_pe(WHAT, a, DType::F16)?;
    let k = a.shape()[1];
    let n = weight_cols(WHAT, w, a, k)?;
    let world = ctx.get_world_size() as usize;
    let rows = a.shape()[0];
    // The kernel's offsets are i32.
    i32_arg("the gathered elements per PE", world * m * k.max(n))?;
    let ag = ctx.empty(&[world * rows, k], DType::F16, a.policy())?;
    let y = ctx.empty(&[world * rows, n], DType::F32, a.policy())?;
    let kernel = compile(ctx, WHAT)?;
    ctx.launch_across_ranks(
        &kernel,
        &[
            Arg::Tensor(a),
            Arg::Tensor(&ag),
            Arg::Tensor(w),
            Arg::Tensor(&y),
            i32_arg("rows", m)?,
            i32_arg("output features", n)?,
            i32_arg("input features", k)?,
        ],
        Some(slots(128 * 32 * 2)),
    )?;
    Ok((ag, y))
}

/// `reduce_scatter(x @ w)` (a sum) along the rows, with the reduction
/// under the GEMM: each rank multiplies the chunk whose partial sum it
/// receives next, adds that and passes it on. `x`: this rank's `[world ·
/// rows, k]` f16; `w`: `[k, n]` f16, whole on each PE of `x`. Returns this
/// rank's `[rows, n]` f32. With one PE per rank, rows `j · rows ..` of
/// `x` go to rank j; with P PEs, PE p's `world · m` rows (`m = rows / P`)
/// are the ranks' blocks of its `m` output rows, rank after rank. Every
/// rank calls it, with operands of the same shapes.
pub fn fused_matmul_reduce_scatter(ctx: &Ctx, x: &Tensor, w: &Tensor) -> Result<Tensor> {
    const WHAT: &str = "fused_matmul_reduce_scatter";
    let world = ctx.get_world_size() as usize;
    let pe_rows = rows_per_pe(WHAT, x, DType::F16)?;
    if pe_rows % world != 0 {
        return Err(HostError::new(format!(
            "{WHAT}: each PE's {pe_rows} rows of x must split evenly over the {world} ranks"
        )));
    }
    let m = pe_rows / world;
    let k = x.shape()[1];
    let n = weight_cols(WHAT, w, x, k)?;
    let rows = x.shape()[0] / world;
    i32_arg("the elements of x per PE", world * m * k.max(2 * n))?;
    let out = ctx.empty(&[rows, n], DType::F32, x.policy())?;
    // Two halves: the partial sums received in a step, read in the next.
    let stage = ctx.empty(&[2 * rows, n], DType::F32, x.policy())?;
    let kernel = compile(ctx, WHAT)?;
    ctx.launch_across_ranks(
        &kernel,
        &[
            Arg::Tensor(x),
            Arg::Tensor(w),
            Arg::Tensor(&out),
            Arg::Tensor(&stage),
            i32_arg("rows", m)?,
            i32_arg("output features", n)?,
            i32_arg("input features", k)?,
        ],
        Some(slots(128 * 128 * 4)),
    )?;
    Ok(out)
}
