//! Sequence-parallel attention on the host API: each rank holds a chunk of
//! the sequence and [`ring_attention`] computes its rows of attention over
//! the whole sequence, the keys and values passing round the ranks' ring
//! under the computation (`ring_attention` of
//! `stdlib/kernels/attention.tl`, one launch across the ranks).

use super::i32_arg;
use crate::host::{default_stdlib, Arg, Ctx, HostError, QueueSlots, Result, Tensor};
use kernbench_compiler::sema::{DType, Konst};

/// The kernel's blocks: BLOCK_M rows of keys by BLOCK_D (`attention.tl`'s
/// defaults). A message is one such f16 block.
const BLOCK_M: u64 = 64;
const BLOCK_D: usize = 128;

/// Checks a `[heads, seq, head_dim]` f16 tensor on one PE; returns its
/// shape.
fn heads_on_one_pe(what: &str, t: &Tensor) -> Result<[usize; 3]> {
    let shape = t.shape();
    let [h, s, d] = match *shape {
        [h, s, d] if t.dtype() == DType::F16 && h > 0 && s > 0 && d > 0 => [h, s, d],
        _ => {
            return Err(HostError::new(format!(
            "ring_attention: {what} must be a non-empty 3-D f16 tensor [heads, sequence, head_dim], got {}{shape:?}",
            t.dtype()
        )))
        }
    };
    if t.placement().len() != 1 {
        return Err(HostError::new(format!(
            "ring_attention: {what} must be on one PE of its rank; it is split over {} PEs",
            t.placement().len()
        )));
    }
    Ok([h, s, d])
}

/// Attention of this rank's queries over the whole sequence, split by
/// positions over the ranks: rank r of p holds positions `r · S .. (r + 1)
/// · S` of `q` (`[H, S, D]` f16), `k` and `v` (`[H_KV, S, D]` f16), all
/// three on one PE. Returns `softmax(q kᵀ / √D) v` for those positions
/// (`[H, S, D]` f32) on the same PE; with `causal`, position i attends to
/// positions ≤ i. Grouped-query: query head h uses key/value head
/// `h / (H / H_KV)`. Every rank calls it, with tensors of the same shapes.
///
/// The probabilities are rounded to f16 for the product with `v`, as
/// Triton's flash attention does; scores and sums accumulate in f32.
pub fn ring_attention(ctx: &Ctx, q: &Tensor, k: &Tensor, v: &Tensor, causal: bool) -> Result<Tensor> {
    let [h, s, d] = heads_on_one_pe("q", q)?;
    let [h_kv, s_k, d_k] = heads_on_one_pe("k", k)?;
    if heads_on_one_pe("v", v)? != [h_kv, s_k, d_k] {
        return Err(HostError::new(format!(
            "ring_attention: v {:?} must have k's shape {:?}",
            v.shape(),
            k.shape()
        )));
    }
    if s_k != s || d_k != d || h % h_kv != 0 {
        return Err(HostError::new(format!(
            "ring_attention: k [H_KV, S, D] = {:?} must match q [H, S, D] = {:?} in S and D, with H a multiple of H_KV",
            k.shape(),
            q.shape()
        )));
    }
    if d > BLOCK_D {
        return Err(HostError::new(format!(
            "ring_attention: the head dimension {d} is more than the kernel's {BLOCK_D}"
        )));
    }
    let pe = q.placement()[0].pe;
    if k.placement()[0].pe != pe || v.placement()[0].pe != pe {
        return Err(HostError::new("ring_attention: q, k and v must be on the same PE"));
    }
    // The kernel's offsets are i32.
    i32_arg("the elements of q", h * s * d)?;
    i32_arg("the elements of the stage", 4 * s * d)?;
    let out = ctx.empty(&[h, s, d], DType::F32, q.policy())?;
    // The chunk being computed and the next one (keys, values); the running
    // row maxima and sums.
    let stage = ctx.empty(&[2, 2, s, d], DType::F16, q.policy())?;
    let ml = ctx.empty(&[2, h, s], DType::F32, q.policy())?;
    let file = default_stdlib()
        .map(|dir| dir.join("kernels/attention.tl"))
        .ok_or_else(|| HostError::new("cannot find the stdlib (set KERNBENCH_STDLIB)"))?;
    let kernel = ctx.compile(file, "ring_attention", &[("CAUSAL", Konst::Bool(causal))])?;
    ctx.launch_across_ranks(
        &kernel,
        &[
            Arg::Tensor(q),
            Arg::Tensor(k),
            Arg::Tensor(v),
            Arg::Tensor(&out),
            Arg::Tensor(&stage),
            Arg::Tensor(&ml),
            i32_arg("heads", h)?,
            i32_arg("key/value heads", h_kv)?,
            i32_arg("positions per rank", s)?,
            i32_arg("head dim", d)?,
            Arg::F32(1.0 / (d as f32).sqrt()),
        ],
        // At least 2 slots (the kernel's deadlock argument); 4 let a rank
        // run further ahead of its successor.
        Some(QueueSlots {
            n_slots: 4,
            n_slots_across_sips: 4,
            slot_size_bytes: BLOCK_M * BLOCK_D as u64 * 2,
        }),
    )?;
    Ok(out)
}
