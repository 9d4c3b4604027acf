//! Launch arguments on the simulated machine: where each tensor argument
//! lives and what pointer each rank sees. A tensor is either one copy (in
//! the memory of rank 0's PE; every rank sees the same pointer), sharded
//! along axis 0 (rank r's pointer sees its own shard, placed in its own
//! PE's memory), or replicated (a full copy per rank). Sharded and
//! replicated tensors are symmetric: `tl.symm_at` finds a rank's copy.

use super::{Communicator, Machine, OutOfMemory, Placement, SimMemory};
use crate::topology::{PeCoord, Space};
use kernbench_compiler::datapath::{elem::Bits, RtValue, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dist {
    /// One copy, near rank 0.
    Single,
    /// Split along axis 0 into one equal shard per rank.
    Shard,
    /// A full copy per rank.
    Replicate,
}

/// How a tensor argument is laid out over a communicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub dist: Dist,
    pub space: Space,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            dist: Dist::Single,
            space: Space::Hbm,
        }
    }
}

impl Layout {
    /// Parses `shard`, `shard:tcm`, `replicate:sram`, `tcm`, … (the part
    /// after the argument's value).
    pub fn parse(words: &[&str]) -> Result<Layout, String> {
        let mut l = Layout::default();
        // At most one word of each kind: `:shard:replicate` or
        // `:tcm:sram` would silently keep the last.
        let (mut dist, mut space): (Option<&str>, Option<&str>) = (None, None);
        for w in words {
            let (kind, seen, what) = match *w {
                "shard" | "replicate" => ("distribution", &mut dist, "a tensor is sharded or replicated"),
                "hbm" | "sram" | "tcm" => ("memory", &mut space, "a tensor lives in one memory"),
                other => return Err(format!("`:{other}` is not a layout (shard, replicate, hbm, sram, tcm)")),
            };
            match seen.replace(w) {
                Some(first) if first == *w => return Err(format!("`:{w}` is given twice")),
                Some(first) => return Err(format!("`:{first}` and `:{w}` are both a {kind}: {what}")),
                None => {}
            }
            match *w {
                "shard" => l.dist = Dist::Shard,
                "replicate" => l.dist = Dist::Replicate,
                "hbm" => l.space = Space::Hbm,
                "sram" => l.space = Space::Sram,
                _ => l.space = Space::Tcm,
            }
        }
        Ok(l)
    }
}

pub enum LaunchArg {
    Scalar(Bits),
    Tensor {
        name: String,
        tensor: Tensor,
        layout: Layout,
    },
}

/// A tensor argument after placement.
#[derive(Clone, Debug)]
pub struct PlacedTensor {
    pub name: String,
    pub elem: kernbench_compiler::sema::types::Elem,
    pub shape: Vec<usize>,
    pub layout: Layout,
    /// Base address of each part (one, or one per rank).
    pub bases: Vec<u64>,
}

/// Whether a tensor of `bytes` with `layout` can fit where it would go
/// on an empty machine with `world` ranks: each part (the whole tensor, or
/// one rank's shard) against its memory's capacity. Checked before the
/// host makes the data, so that a tensor many times too large is an error
/// at once rather than after gigabytes of host memory; [`place_args`]
/// still checks each allocation against what is in use.
pub fn check_fits(
    mem: &SimMemory,
    pe: PeCoord,
    world: usize,
    name: &str,
    bytes: u64,
    layout: Layout,
) -> Result<(), String> {
    let part = match layout.dist {
        Dist::Shard => bytes / world.max(1) as u64,
        Dist::Single | Dist::Replicate => bytes,
    };
    let placement = Placement::near(layout.space, pe);
    let capacity = mem.capacity(placement);
    if part > capacity {
        return Err(OutOfMemory {
            name: name.to_string(),
            need_bytes: part,
            placement,
            used_bytes: 0,
            capacity_bytes: capacity,
        }
        .to_string());
    }
    Ok(())
}

/// Allocates every tensor argument and returns each rank's argument
/// values and the placed tensors (in argument order).
pub fn place_args(
    m: &mut Machine,
    comm: &Communicator,
    args: Vec<LaunchArg>,
) -> Result<(Vec<Vec<RtValue>>, Vec<PlacedTensor>), String> {
    let world = comm.world() as usize;
    let mut per_rank: Vec<Vec<RtValue>> = vec![Vec::with_capacity(args.len()); world];
    let mut placed = Vec::new();
    for a in args {
        match a {
            LaunchArg::Scalar(b) => per_rank.iter_mut().for_each(|v| v.push(RtValue::Scalar(b))),
            LaunchArg::Tensor { name, tensor, layout } => {
                let bytes = tensor.bytes();
                let bases = match layout.dist {
                    Dist::Single => {
                        let p = Placement::near(layout.space, comm.pes[0]);
                        vec![m.mem.alloc(&name, p, bytes.to_vec()).map_err(|e| e.to_string())?]
                    }
                    Dist::Replicate => {
                        let parts = comm
                            .pes
                            .iter()
                            .map(|pe| (Placement::near(layout.space, *pe), bytes.to_vec()))
                            .collect();
                        m.mem.alloc_symmetric(&name, parts).map_err(|e| e.to_string())?
                    }
                    Dist::Shard => {
                        // A 0-d tensor is one element: whole on one rank.
                        let rows = match tensor.shape.first() {
                            Some(&rows) => rows,
                            None if world == 1 => 1,
                            None => {
                                return Err(format!(
                                    "`{name}` is 0-d (one element): it has no axis 0 to split into {world} shards (replicate it)"
                                ))
                            }
                        };
                        if rows % world != 0 {
                            return Err(format!(
                                "`{name}` has {rows} element{} along axis 0, which do not split into {world} equal shards",
                                if rows == 1 { "" } else { "s" }
                            ));
                        }
                        let part = bytes.len() / world;
                        let parts = comm
                            .pes
                            .iter()
                            .enumerate()
                            .map(|(r, pe)| {
                                (
                                    Placement::near(layout.space, *pe),
                                    bytes[r * part..(r + 1) * part].to_vec(),
                                )
                            })
                            .collect();
                        m.mem.alloc_symmetric(&name, parts).map_err(|e| e.to_string())?
                    }
                };
                for (r, v) in per_rank.iter_mut().enumerate() {
                    let base = if bases.len() == 1 { bases[0] } else { bases[r] };
                    v.push(RtValue::Scalar(base));
                }
                placed.push(PlacedTensor {
                    name,
                    elem: tensor.elem,
                    shape: tensor.shape.to_vec(),
                    layout,
                    bases,
                });
            }
        }
    }
    Ok((per_rank, placed))
}

/// A placed tensor's current contents: shards concatenated, rank 0's copy
/// of a replicated tensor.
pub fn gather(m: &Machine, t: &PlacedTensor) -> Tensor {
    let parts: &[u64] = match t.layout.dist {
        Dist::Shard => &t.bases,
        _ => &t.bases[..1],
    };
    let shards = || parts.iter().map(|&b| m.mem.bytes_at(b).unwrap_or(&[]));
    // Copied once, straight into the tensor: concatenating first and
    // converting after copied every byte twice, into fresh pages the
    // kernel zeroes first.
    let mut out = Tensor::zeros(t.elem, &t.shape);
    if shards().map(<[u8]>::len).sum::<usize>() == out.bytes().len() {
        let mut at = 0;
        let dst = out.bytes_mut();
        for shard in shards() {
            dst[at..at + shard.len()].copy_from_slice(shard);
            at += shard.len();
        }
    }
    out
}

/// Where the ranks' copies of a replicated tensor first disagree after a
/// run: the first rank whose copy differs from rank 0's and the index of
/// its first element that does. `None` when they all agree, or when the
/// tensor is not replicated. ([`gather`] returns rank 0's copy: a kernel
/// that wrote its copies differently should hear that the others were
/// dropped.)
pub fn replica_divergence(m: &Machine, t: &PlacedTensor) -> Option<(usize, usize)> {
    if t.layout.dist != Dist::Replicate {
        return None;
    }
    let esz = kernbench_compiler::datapath::elem_size(t.elem).max(1);
    let first = m.mem.bytes_at(*t.bases.first()?).unwrap_or(&[]);
    t.bases.iter().enumerate().skip(1).find_map(|(r, &b)| {
        let copy = m.mem.bytes_at(b).unwrap_or(&[]);
        let at = first.iter().zip(copy).position(|(x, y)| x != y)?;
        Some((r, at / esz))
    })
}

/// Every rank's copy of a replicated tensor (or each shard), in rank order.
pub fn parts(m: &Machine, t: &PlacedTensor) -> Vec<Vec<u8>> {
    t.bases
        .iter()
        .map(|&b| m.mem.bytes_at(b).unwrap_or(&[]).to_vec())
        .collect()
}
