//! What compute costs, from the topology: MATH operations in
//! `ceil(numel / lanes) × op_cycles[class]` cycles, `dot` in GEMM tiles of
//! `tile_m × tile_n × tile_k` at `cycles_per_tile[dtype]` plus the
//! pipeline latency, and the `tl.gemm` composite as a four-stage pipeline
//! (DMA_IN → GEMM → MATH → DMA_WB) over its output tiles.

use crate::topology::Topology;
use kernbench_compiler::ir::{BinaryOp, Function, Inst, Op, UnaryOp};
use kernbench_compiler::sema::types::{DType, Elem};

/// The `op_cycles` class of a MATH operation.
pub fn math_class(op: &Op) -> &'static str {
    match op {
        Op::Binary(BinaryOp::Div | BinaryOp::FloorDiv | BinaryOp::Mod) => "div",
        Op::Unary(UnaryOp::Sqrt | UnaryOp::Rsqrt) => "sqrt",
        Op::Unary(UnaryOp::Exp | UnaryOp::Exp2 | UnaryOp::Sigmoid) => "exp",
        Op::Unary(UnaryOp::Log | UnaryOp::Log2) => "log",
        Op::Unary(UnaryOp::Sin) => "sin",
        Op::Unary(UnaryOp::Cos) => "cos",
        Op::Reduce { .. } => "reduce",
        Op::Cast { bitcast: false } => "convert",
        _ => "default",
    }
}

/// Cycles per `lanes` elements of a class (`default` for unlisted ones).
pub fn op_cycles(topo: &Topology, class: &str) -> u64 {
    let m = &topo.spec.pe.math;
    m.op_cycles
        .get(class)
        .or_else(|| m.op_cycles.get("default"))
        .map_or(1, |c| c.0)
}

/// Cycles of a MATH-engine operation: the work is the larger of its
/// operands and its result (a reduction reads every element).
pub fn math_cycles(topo: &Topology, func: &Function, i: Inst) -> u64 {
    let d = func.inst(i);
    let numel = d
        .args
        .iter()
        .chain(&d.results)
        .map(|v| func.ty(*v).numel())
        .max()
        .unwrap_or(1)
        .max(1);
    numel.div_ceil(topo.spec.pe.math.lanes.0) * op_cycles(topo, math_class(&d.op))
}

/// The `cycles_per_tile` key of an operand dtype.
pub fn gemm_dtype_key(d: DType) -> &'static str {
    match d {
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::I8 | DType::U8 => "i8",
        _ => "f32",
    }
}

pub fn cycles_per_tile(topo: &Topology, d: DType) -> u64 {
    topo.spec
        .pe
        .gemm
        .cycles_per_tile
        .get(gemm_dtype_key(d))
        .map_or(1, |c| c.0)
}

/// Cycles of `dot` on an `m × k` by `k × n` product.
pub fn dot_cycles(topo: &Topology, m: u64, n: u64, k: u64, d: DType) -> u64 {
    let g = &topo.spec.pe.gemm;
    let tiles = m.div_ceil(g.tile_m.0) * n.div_ceil(g.tile_n.0) * k.div_ceil(g.tile_k.0);
    tiles * cycles_per_tile(topo, d) + g.pipeline_latency_cycles.0
}

pub fn dot_cycles_of(topo: &Topology, func: &Function, i: Inst) -> u64 {
    let d = func.inst(i);
    let (a, b) = (func.ty(d.args[0]).shape(), func.ty(d.args[1]).shape());
    let dt = match func.ty(d.args[0]).elem() {
        Elem::Num(t) | Elem::Ptr(t) => t,
    };
    dot_cycles(topo, a[0], b[1], a[1], dt)
}

/// The per-tile stage times of the `tl.gemm` pipeline (picoseconds) and
/// its one-off latency (all zero: an empty product).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GemmPipeline {
    pub tiles: u64,
    pub dma_in_ps: u64,
    pub gemm_ps: u64,
    pub math_ps: u64,
    pub dma_wb_ps: u64,
    /// Path latencies in and out plus the GEMM pipeline latency.
    pub latency_ps: u64,
}

impl GemmPipeline {
    /// The pipeline's closed form: the first tile pays every stage and the
    /// latency, each further tile the slowest stage.
    pub fn total_ps(&self) -> u64 {
        let slowest = self.dma_in_ps.max(self.gemm_ps).max(self.math_ps).max(self.dma_wb_ps);
        self.latency_ps
            + self.dma_in_ps
            + self.gemm_ps
            + self.math_ps
            + self.dma_wb_ps
            + self.tiles.saturating_sub(1) * slowest
    }
}

/// Streaming times per output tile: `in_ps(bytes)` is the DMA time of
/// operand bytes (A, then B), `wb_ps(bytes)` of result bytes, both without
/// path latency.
pub struct GemmShape {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub in_dtype: DType,
    pub out_dtype: DType,
}

pub fn gemm_pipeline(
    topo: &Topology,
    s: &GemmShape,
    a_stream_ps: impl Fn(u64) -> u64,
    b_stream_ps: impl Fn(u64) -> u64,
    wb_stream_ps: impl Fn(u64) -> u64,
    latency_ps: u64,
) -> GemmPipeline {
    let g = &topo.spec.pe.gemm;
    let (tm, tn, tk) = (g.tile_m.0, g.tile_n.0, g.tile_k.0);
    let k_steps = s.k.div_ceil(tk).max(1);
    let isz = s.in_dtype.size_bytes();
    let osz = s.out_dtype.size_bytes();
    let lanes = topo.spec.pe.math.lanes.0;
    GemmPipeline {
        tiles: s.m.div_ceil(tm) * s.n.div_ceil(tn),
        dma_in_ps: k_steps * (a_stream_ps(tm * tk * isz) + b_stream_ps(tk * tn * isz)),
        gemm_ps: topo.cycles_to_ps(k_steps * cycles_per_tile(topo, s.in_dtype)),
        math_ps: topo.cycles_to_ps((tm * tn).div_ceil(lanes) * op_cycles(topo, "default")),
        dma_wb_ps: wb_stream_ps(tm * tn * osz),
        latency_ps: latency_ps + topo.cycles_to_ps(g.pipeline_latency_cycles.0),
    }
}
