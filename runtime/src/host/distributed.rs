//! `distributed`: collectives across ranks (one SIP per rank), each run
//! as the `.tl` algorithm `ccl.yaml` names (per collective, or per call).
//!
//! A collective over per-rank tensors runs on the PEs holding them: for
//! every shard index k, the PEs holding shard k on each rank form one
//! communicator, and all of them run the algorithm side by side in one
//! launch. The communicator's ranks are the host ranks, in order (a
//! gather's order and a broadcast's root depend on it), whatever the
//! algorithm's topology class, and its `world_size` does not apply.
//! `tl.symm_at` would map to one rank's allocation's shards, not to the
//! communicator's ranks, so an algorithm that uses it is refused: the
//! host API's algorithms communicate with `tl.send`/`tl.recv`. So a
//! tensor split row-wise over
//! 8 PEs per SIP, all-reduced across 2 ranks, runs 8 two-rank all-reduces
//! at once; every distribution gives the right result. All-gather and
//! reduce-scatter change the tensor's size, so they take tensors that are
//! on one PE or replicated.

use super::{HostError, Pending, Result, Runtime, Tensor};
use crate::ccl::registry::World;
use crate::ccl::{Collective, ReduceOp};
use crate::sim::Communicator;
use kernbench_compiler::datapath::{elem, RtValue};
use kernbench_compiler::ir::Op;
use kernbench_compiler::sema::{DType, Konst};
use std::sync::Arc;

/// A process group: this rank and the number of ranks.
#[derive(Clone, Debug)]
pub struct ProcessGroup {
    pub rank: u32,
    pub world: u32,
}

fn i32_arg(v: u64) -> RtValue {
    RtValue::Scalar(elem::from_i64(DType::I32, v as i64))
}

impl Runtime {
    /// `ts[k]` (rank `rank_of(k)`'s) have the first's dtype, shard count
    /// and split.
    fn check_alike(&self, what: &str, ts: &[&Tensor], rank_of: impl Fn(usize) -> u32) -> Result<()> {
        let first = ts
            .first()
            .ok_or_else(|| HostError::new(format!("{what} of no tensors")))?;
        let r0 = rank_of(0);
        for (k, t) in ts.iter().enumerate() {
            let r = rank_of(k);
            if t.dtype != first.dtype || t.shards.len() != first.shards.len() {
                return Err(HostError::new(format!(
                    "{what}: rank {r}'s tensor is {}{:?} on {} PEs, rank {r0}'s {}{:?} on {} PEs",
                    t.dtype,
                    t.shape,
                    t.shards.len(),
                    first.dtype,
                    first.shape,
                    first.shards.len()
                )));
            }
            for (a, b) in t.shards.iter().zip(first.shards.iter()) {
                if a.rows != b.rows || a.cols != b.cols {
                    return Err(HostError::new(format!(
                        "{what}: rank {r}'s tensor is split differently from rank {r0}'s ({:?} × {:?} vs {:?} × {:?})",
                        a.rows, a.cols, b.rows, b.cols
                    )));
                }
            }
        }
        Ok(())
    }

    /// Queues collective `c` over the ranks' tensors (`inputs[r]` is rank
    /// r's), with `outputs` for all-gather and reduce-scatter, `root` for
    /// broadcast, and the registry's algorithm unless `algorithm`.
    pub fn collective(
        &mut self,
        c: Collective,
        algorithm: Option<&str>,
        op: ReduceOp,
        inputs: &[&Tensor],
        outputs: &[&Tensor],
        root: u32,
    ) -> Result<()> {
        self.queue_collective(c, algorithm, op, inputs, outputs, root, false)
    }

    /// Queues an all-gather shard by shard, with the registry's algorithm:
    /// for tensors split over several PEs (by rows, say), the shard of
    /// `outputs[r]` on each PE gets the ranks' shards of the inputs on
    /// that PE, rank after rank — every PE gathers its own part, and no
    /// data crosses between a rank's PEs. (On one PE this is
    /// [`Runtime::collective`]'s all-gather.) Each output shard holds world
    /// × its input shard's elements.
    pub fn all_gather_per_shard(&mut self, inputs: &[&Tensor], outputs: &[&Tensor]) -> Result<()> {
        self.queue_collective(Collective::AllGather, None, ReduceOp::Sum, inputs, outputs, 0, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn queue_collective(
        &mut self,
        c: Collective,
        algorithm: Option<&str>,
        op: ReduceOp,
        inputs: &[&Tensor],
        outputs: &[&Tensor],
        root: u32,
        per_shard: bool,
    ) -> Result<()> {
        self.check_alike(c.key(), inputs, |k| k as u32)?;
        let world = inputs.len();
        let dtype = inputs[0].dtype;
        let topo = self.topo.clone();
        let reg = self.registry()?.clone();
        let alg = match algorithm {
            Some(name) => reg.get(name).map_err(HostError::new)?.clone(),
            None => {
                // Each communicator's ranks hold one shard each: the
                // registry's sizes are bytes per rank.
                let shard_elems = inputs[0].shards.iter().map(|s| s.rows.len() * s.cols.len()).max();
                let bytes = (shard_elems.unwrap_or(0) as u64).saturating_mul(dtype.size_bytes());
                // Every shard's communicator has `world` ranks; the one
                // over the most SIPs decides.
                let comm = |k: usize| World::of(&inputs.iter().map(|t| t.shards[k].pe).collect::<Vec<_>>());
                let on = (0..inputs[0].shards.len()).map(comm).max_by_key(|w| w.sips);
                let on = on.unwrap_or(World {
                    ranks: world as u32,
                    sips: 1,
                });
                reg.default_for(c, bytes, on).map_err(HostError::new)?.clone()
            }
        };
        if alg.collective != c {
            return Err(HostError::new(format!(
                "algorithm `{}` is for {}, not for {c}",
                alg.name, alg.collective
            )));
        }
        if root as usize >= world {
            return Err(HostError::new(format!(
                "broadcast root {root} is not a rank (world size {world})"
            )));
        }
        let resizes = matches!(c, Collective::AllGather | Collective::ReduceScatter);
        if resizes {
            if outputs.len() != world {
                return Err(HostError::new(format!("{c} needs an output tensor per rank")));
            }
            self.check_alike(c.key(), outputs, |k| k as u32)?;
            if outputs[0].dtype != dtype {
                return Err(HostError::new(format!(
                    "{c}: the outputs are {}, the inputs {dtype}",
                    outputs[0].dtype
                )));
            }
            for t in inputs.iter().chain(outputs) {
                if !per_shard && t.shards.len() > 1 && t.policy.dist != super::Dist::Replicate {
                    return Err(HostError::new(format!(
                        "{c} takes tensors on one PE or replicated; this one is split {:?} over {} PEs",
                        t.policy.dist,
                        t.shards.len()
                    )));
                }
            }
            if outputs[0].shards.len() != inputs[0].shards.len() {
                return Err(HostError::new(format!(
                    "{c}: the outputs are on other PEs than the inputs"
                )));
            }
            let shard_elems = |s: &super::Shard| s.rows.len() * s.cols.len();
            if let Some((i, o)) = inputs[0]
                .shards
                .iter()
                .zip(outputs[0].shards.iter())
                .find(|(i, o)| per_shard && shard_elems(o) != world * shard_elems(i))
            {
                return Err(HostError::new(format!(
                    "{c} shard by shard over {world} ranks: an input shard of {} and an output shard of {} elements \
                     do not match",
                    shard_elems(i),
                    shard_elems(o)
                )));
            }
            let (n_in, n_out) = (inputs[0].numel(), outputs[0].numel());
            let ok = match c {
                Collective::AllGather => n_out == n_in * world,
                _ => n_in == n_out * world,
            };
            if !ok {
                return Err(HostError::new(format!(
                    "{c} over {world} ranks: inputs of {n_in} and outputs of {n_out} elements do not match"
                )));
            }
        }
        let key = format!("{}:{dtype}:{}", alg.name, op.code());
        let kernel = match self.collective_kernels.get(&key) {
            Some(k) => k.clone(),
            None => {
                let (func, sources) = reg.compile_for(&alg, &topo, dtype, op).map_err(HostError::new)?;
                let k = super::Kernel {
                    func: Arc::new(func),
                    sources: Arc::new(sources),
                };
                self.collective_kernels.insert(key, k.clone());
                k
            }
        };
        refuse_symm_at(
            &kernel,
            &format!("algorithm `{}`", alg.name),
            "Pick an algorithm that communicates with send and recv; `tlc bench ccl` and `tlc run` run this one",
        )?;
        let mut groups = Vec::new();
        let mut args = Vec::new();
        for k in 0..inputs[0].shards.len() {
            groups.push(Communicator::new(inputs.iter().map(|t| t.shards[k].pe).collect()));
            for r in 0..world {
                let s = &inputs[r].shards[k];
                let n = (s.rows.len() * s.cols.len()) as u64;
                args.push(match c {
                    Collective::AllReduce => vec![RtValue::Scalar(s.base), i32_arg(n)],
                    Collective::Broadcast => vec![RtValue::Scalar(s.base), i32_arg(n), i32_arg(root as u64)],
                    Collective::AllGather => vec![
                        RtValue::Scalar(s.base),
                        RtValue::Scalar(outputs[r].shards[k].base),
                        i32_arg(n),
                    ],
                    Collective::ReduceScatter => {
                        let o = &outputs[r].shards[k];
                        vec![
                            RtValue::Scalar(s.base),
                            RtValue::Scalar(o.base),
                            i32_arg((o.rows.len() * o.cols.len()) as u64),
                        ]
                    }
                });
            }
        }
        for t in inputs.iter().chain(outputs) {
            self.check_defined(t, c.key())?;
        }
        let touches = inputs.iter().chain(outputs).map(|t| t.id).collect();
        let tensors: Vec<&Tensor> = inputs.iter().chain(outputs).copied().collect();
        let device = super::one_device(&groups, &tensors);
        self.pending.push(Pending {
            kernel,
            grid: [world as u32, 1, 1],
            grid_per_pe: false,
            groups,
            args,
            ipcq: Some(reg.ipcq(&alg, &topo)),
            packet_bytes: reg.packet_bytes(&alg),
            touches,
            owner: None,
            device,
            note: reg.settings_note(&alg),
        });
        Ok(())
    }

    /// Queues a point-to-point copy of rank `ranks[0]`'s tensor `from`
    /// into rank `ranks[1]`'s `to` (shard by shard, over the IPCQ).
    pub fn send_recv(&mut self, from: &Tensor, to: &Tensor, ranks: [u32; 2]) -> Result<()> {
        self.check_alike("send/recv", &[from, to], |k| ranks[k])?;
        self.check_defined(from, "send")?;
        self.check_defined(to, "recv")?;
        let kernel = self.builtin("p2p", from.dtype)?;
        let mut groups = Vec::new();
        let mut args = Vec::new();
        for (a, b) in from.shards.iter().zip(to.shards.iter()) {
            groups.push(Communicator::new(vec![a.pe, b.pe]));
            let n = (a.rows.len() * a.cols.len()) as u64;
            args.push(vec![RtValue::Scalar(a.base), i32_arg(n)]);
            args.push(vec![RtValue::Scalar(b.base), i32_arg(n)]);
        }
        let device = super::one_device(&groups, &[from, to]);
        self.pending.push(Pending {
            kernel,
            grid: [2, 1, 1],
            grid_per_pe: false,
            groups,
            args,
            ipcq: None,
            packet_bytes: None,
            touches: vec![from.id, to.id],
            owner: None,
            device,
            note: None,
        });
        Ok(())
    }

    /// Queues a barrier across ranks: one PE of each rank's device.
    pub fn barrier_across(&mut self, devices: &[u32]) -> Result<()> {
        if let Some(d) = devices.iter().find(|&&d| d >= self.topo.sips()) {
            return Err(HostError::new(format!(
                "barrier across device {d}: the machine has {} devices (SIPs)",
                self.topo.sips()
            )));
        }
        let kernel = self.builtin("barrier", DType::I32)?;
        let pes = devices
            .iter()
            .map(|d| crate::topology::PeCoord {
                sip: *d,
                cube: 0,
                pe: 0,
            })
            .collect();
        let comm = Communicator::new(pes);
        let args = vec![Vec::new(); comm.world() as usize];
        let device = super::one_device(std::slice::from_ref(&comm), &[]);
        self.pending.push(Pending {
            kernel,
            grid: [comm.world(), 1, 1],
            grid_per_pe: false,
            groups: vec![comm],
            args,
            ipcq: None,
            packet_bytes: None,
            touches: Vec::new(),
            owner: None,
            device,
            note: None,
        });
        Ok(())
    }

    /// The stdlib's point-to-point and barrier kernels (`ccl/p2p.tl`).
    fn builtin(&mut self, kernel: &str, dtype: DType) -> Result<super::Kernel> {
        let key = format!("builtin:{kernel}:{dtype}");
        if let Some(k) = self.collective_kernels.get(&key) {
            return Ok(k.clone());
        }
        let root = self
            .stdlib
            .clone()
            .ok_or_else(|| HostError::new("cannot find the stdlib (set KERNBENCH_STDLIB)"))?;
        let k = self.compile(root.join("ccl").join("p2p.tl"), kernel, &[("T", Konst::DType(dtype))])?;
        self.collective_kernels.insert(key, k.clone());
        Ok(k)
    }
}

/// An error when `kernel` uses `tl.symm_at`, which a launch across ranks
/// cannot run: each rank's tensor is an allocation of its own, so
/// `symm_at` would reach the shards of one rank's tensor, not the other
/// ranks'. `what` names the kernel, `instead` says what to do.
pub(super) fn refuse_symm_at(kernel: &super::Kernel, what: &str, instead: &str) -> Result<()> {
    let Some((_, d)) = kernel.func.insts.iter().find(|(_, d)| matches!(d.op, Op::SymmAt)) else {
        return Ok(());
    };
    Err(HostError::new(format!(
        "{what} uses `tl.symm_at` ({}), which the host API cannot run across ranks: each rank's \
         tensor is an allocation of its own, not one symmetric buffer. {instead}",
        kernel.sources.at(d.loc)
    )))
}
