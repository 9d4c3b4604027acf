//! `tlc bench ccl`: nccl-tests for the simulated machine. Each row runs one
//! collective of one size on a fresh machine, with real data, and reports
//! the simulated time, the algorithm bandwidth (`size / time`), the bus
//! bandwidth (`algbw × factor`, nccl-tests' factors) and `#wrong`, the
//! number of elements that differ from the expected result, computed for
//! real.
//!
//! Sizes follow nccl-tests: the buffer of each rank for all-reduce and
//! broadcast, the gathered (receive) buffer for all-gather, the send
//! buffer for reduce-scatter. Data are small integers in every dtype, so
//! every sum is exact whatever the order of additions and `#wrong` counts
//! real mistakes only.

use super::{communicator, layout_constexprs, Algorithm, Collective, ReduceOp, Registry};
use crate::sim::fabric::Endpoint;
use crate::sim::place::{self, Dist, LaunchArg, Layout};
use crate::sim::{Launch, Machine, Placement};
use crate::topology::{PeCoord, Space, Topology};
use kernbench_compiler::datapath::{elem, jit::Jit, Tensor};
use kernbench_compiler::sema::{DType, Elem};

/// One row of the table.
#[derive(Clone, Debug)]
pub struct Row {
    pub size_bytes: u64,
    /// Elements per rank's buffer (nccl-tests' `count`).
    pub count: u64,
    pub time_ps: u64,
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
    pub wrong: u64,
    pub events: u64,
}

/// nccl-tests' name of a dtype.
pub fn type_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::F16 => "half",
        DType::BF16 => "bfloat16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::I8 => "int8",
        DType::U8 => "uint8",
        DType::U32 => "uint32",
        DType::Bool => "bool",
    }
}

/// A small integer for rank `r`, element `i`: exact in every dtype, and
/// so are sums of up to 256 of them in f16 (bf16: values in -1..=1).
fn value(d: DType, r: u64, i: u64) -> i64 {
    let span = if d == DType::BF16 || d == DType::Bool || !d.is_signed() && !d.is_float() {
        2
    } else {
        5
    };
    let v = ((r * 7 + i * 13 + (i >> 10)) % span) as i64;
    if d.is_signed() || d.is_float() {
        v - span as i64 / 2
    } else {
        v
    }
}

fn bits_of(d: DType, v: i64) -> u64 {
    if d.is_float() {
        elem::from_f32(d, v as f32)
    } else {
        elem::from_i64(d, v)
    }
}

fn val_of(d: DType, b: u64) -> f64 {
    if d.is_float() {
        elem::to_f32(d, b) as f64
    } else {
        elem::to_i64(d, b) as f64
    }
}

fn tensor(d: DType, rows: usize, cols: usize, f: impl Fn(u64, u64) -> i64) -> Tensor {
    let mut t = Tensor::zeros(Elem::Num(d), &[rows, cols]);
    for r in 0..rows {
        for i in 0..cols {
            t.set_bits(r * cols + i, bits_of(d, f(r as u64, i as u64)));
        }
    }
    t
}

fn combine(op: ReduceOp, xs: impl Iterator<Item = i64>, n: i64) -> i64 {
    let v: Vec<i64> = xs.collect();
    match op {
        ReduceOp::Sum => v.iter().sum(),
        ReduceOp::Max => v.iter().copied().max().unwrap_or(0),
        ReduceOp::Min => v.iter().copied().min().unwrap_or(0),
        ReduceOp::Avg => v.iter().sum::<i64>() / n.max(1),
    }
}

/// Reference figures of a ring-shaped collective on these PEs: the
/// per-step bottleneck bandwidth (GB/s) of the data path of a ring edge —
/// the slowest of the link route into the receiver's slots and the
/// memory port each rank streams its buffer through — and α, one step's
/// latency (DMA setup, memory latency, the route's latency, the copy out
/// of the slots).
pub fn ring_reference(topo: &Topology, reg: &Registry, a: &Algorithm, pes: &[PeCoord]) -> (f64, f64) {
    let ipcq = reg.ipcq(a, topo);
    let mut m = Machine::new(topo);
    let n = pes.len();
    if n < 2 {
        return (0.0, 0.0);
    }
    let mut bw = f64::INFINITY;
    let mut alpha: f64 = 0.0;
    let bytes = ipcq.slot_size_bytes.0;
    for k in 0..n {
        let (a_pe, b_pe) = (pes[k], pes[(k + 1) % n]);
        let slots = Placement::near(ipcq.buffer_space, b_pe).endpoint();
        let route = m.fabric.route(Endpoint::Core(a_pe), slots);
        let c = m.fabric.idle_cost(&route, bytes, &[]);
        bw = bw.min(c.bottleneck_bytes_per_us as f64 / 1000.0);
        let copy = m.fabric.route(slots, Endpoint::Core(b_pe));
        let cc = m.fabric.idle_cost(&copy, bytes, &[]);
        alpha = alpha.max((c.latency_ps + cc.latency_ps) as f64 / 1000.0);
    }
    // The buffers: each rank reads (or writes) its HBM slice once per
    // byte it sends (or receives).
    let hbm = topo.hbm_bandwidth_bytes_per_ns();
    bw = bw.min(hbm);
    let s = &topo.spec;
    alpha += s.pe.dma.setup_cycles as f64 / s.clock_ghz.0 + s.pe.hbm_controller.latency_ns.0;
    (bw, alpha)
}

/// What a table measures: one algorithm, compiled, on a PE set.
pub struct Case<'a> {
    pub topo: &'a Topology,
    pub reg: &'a Registry,
    pub algorithm: &'a Algorithm,
    pub func: &'a kernbench_compiler::ir::Function,
    pub pes: &'a [PeCoord],
    pub dtype: DType,
    pub op: ReduceOp,
}

/// Runs one collective of `size_bytes` on a fresh machine.
pub fn run_one(case: &Case, jit: &mut Jit, size_bytes: u64) -> Result<Row, String> {
    let Case {
        topo,
        reg,
        algorithm: a,
        func,
        pes,
        dtype,
        op,
    } = *case;
    let comm = communicator(topo, a, pes)?;
    let n = comm.world() as u64;
    let esz = dtype.size_bytes();
    let count = (size_bytes / esz).max(1);
    // Elements each rank contributes.
    let per_rank = match a.collective {
        Collective::AllGather | Collective::ReduceScatter => (count / n).max(1),
        _ => count,
    };
    let mut m = Machine::new(topo);
    let hbm = Layout {
        dist: Dist::Shard,
        space: Space::Hbm,
    };
    let (nu, pr) = (n as usize, per_rank as usize);
    let scalar = |v: u64| LaunchArg::Scalar(elem::from_i64(DType::I32, v as i64));
    let root = (n / 3) as usize;
    let args = match a.collective {
        Collective::AllReduce => vec![
            LaunchArg::Tensor {
                name: "buf".into(),
                tensor: tensor(dtype, nu, pr, |r, i| value(dtype, r, i)),
                layout: hbm,
            },
            scalar(per_rank),
        ],
        Collective::Broadcast => vec![
            LaunchArg::Tensor {
                name: "buf".into(),
                tensor: tensor(dtype, nu, pr, |r, i| value(dtype, r, i)),
                layout: hbm,
            },
            scalar(per_rank),
            scalar(root as u64),
        ],
        Collective::AllGather => vec![
            LaunchArg::Tensor {
                name: "src".into(),
                tensor: tensor(dtype, nu, pr, |r, i| value(dtype, r, i)),
                layout: hbm,
            },
            LaunchArg::Tensor {
                name: "dst".into(),
                tensor: Tensor::zeros(Elem::Num(dtype), &[nu, nu * pr]),
                layout: hbm,
            },
            scalar(per_rank),
        ],
        Collective::ReduceScatter => vec![
            LaunchArg::Tensor {
                name: "src".into(),
                tensor: tensor(dtype, nu, nu * pr, |r, i| value(dtype, r, i)),
                layout: hbm,
            },
            LaunchArg::Tensor {
                name: "dst".into(),
                tensor: Tensor::zeros(Elem::Num(dtype), &[nu, pr]),
                layout: hbm,
            },
            scalar(per_rank),
        ],
    };
    let (rank_args, placed) = place::place_args(&mut m, &comm, args)?;
    let mut launch = Launch::new(func, &comm, rank_args);
    launch.ipcq = Some(reg.ipcq(a, topo));
    launch.packet_bytes = reg.defaults.packet_bytes;
    let report = m.run(&launch, jit).map_err(|e| match e {
        crate::sim::SimError::Deadlock { blocked, .. } => {
            format!(
                "algorithm `{}` deadlocked on {n} PEs ({} ranks blocked)",
                a.name,
                blocked.len()
            )
        }
        other => format!("algorithm `{}` failed on {n} PEs: {other:?}", a.name),
    })?;
    // Count wrong elements against the exact expected values.
    let out = place::gather(&m, placed.last().unwrap_or(&placed[0]));
    let get = |k: usize| val_of(dtype, out.get_bits(k));
    let want_bits = |v: i64| val_of(dtype, bits_of(dtype, v));
    let ni = n as i64;
    let mut wrong = 0u64;
    match a.collective {
        Collective::AllReduce => {
            for i in 0..pr {
                let w = want_bits(combine(op, (0..n).map(|r| value(dtype, r, i as u64)), ni));
                wrong += (0..nu).filter(|r| get(r * pr + i) != w).count() as u64;
            }
        }
        Collective::Broadcast => {
            for i in 0..pr {
                let w = want_bits(value(dtype, root as u64, i as u64));
                wrong += (0..nu).filter(|r| get(r * pr + i) != w).count() as u64;
            }
        }
        Collective::AllGather => {
            for q in 0..nu {
                for i in 0..pr {
                    let w = want_bits(value(dtype, q as u64, i as u64));
                    wrong += (0..nu).filter(|r| get(r * nu * pr + q * pr + i) != w).count() as u64;
                }
            }
        }
        Collective::ReduceScatter => {
            for r in 0..nu {
                for i in 0..pr {
                    let col = (r * pr + i) as u64;
                    let w = want_bits(combine(op, (0..n).map(|q| value(dtype, q, col)), ni));
                    wrong += (get(r * pr + i) != w) as u64;
                }
            }
        }
    }
    let bytes = match a.collective {
        Collective::AllGather | Collective::ReduceScatter => per_rank * n * esz,
        _ => per_rank * esz,
    };
    let t = report.elapsed_ps().max(1);
    let algbw = bytes as f64 * 1000.0 / t as f64;
    Ok(Row {
        size_bytes: bytes,
        count: bytes / esz,
        time_ps: t,
        algbw_gbps: algbw,
        busbw_gbps: algbw * a.collective.bus_factor(comm.world()),
        wrong,
        events: report.events,
    })
}

/// Compiles an algorithm for a bench run (layout constexprs bound).
pub fn compile(
    topo: &Topology,
    reg: &Registry,
    a: &Algorithm,
    dtype: DType,
    op: ReduceOp,
) -> Result<kernbench_compiler::ir::Function, String> {
    reg.compile(a, dtype, op, &layout_constexprs(topo)).map(|(f, _)| f)
}

/// `1K:64M` (powers of two from 1 KiB to 64 MiB), `8K`, or `4K,1M,3000`.
pub fn parse_sizes(s: &str) -> Result<Vec<u64>, String> {
    let one = |t: &str| -> Result<u64, String> {
        let t = t.trim();
        let (num, mult) = match t.char_indices().last() {
            Some((i, 'K' | 'k')) => (&t[..i], 1u64 << 10),
            Some((i, 'M' | 'm')) => (&t[..i], 1 << 20),
            Some((i, 'G' | 'g')) => (&t[..i], 1 << 30),
            _ => (t, 1),
        };
        num.trim()
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(mult))
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("`{t}` is not a size (bytes, optionally with K, M or G)"))
    };
    if let Some((lo, hi)) = s.split_once(':') {
        let (lo, hi) = (one(lo)?, one(hi)?);
        if lo > hi {
            return Err(format!("`{s}`: the first size is larger than the last"));
        }
        let mut v = Vec::new();
        let mut x = lo;
        while x <= hi {
            v.push(x);
            x = x.saturating_mul(2);
        }
        return Ok(v);
    }
    s.split(',').map(one).collect()
}
