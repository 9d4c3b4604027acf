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

use super::{communicator, Algorithm, Collective, ReduceOp, Registry};
use crate::args::splitmix64;
use crate::sim::fabric::Endpoint;
use crate::sim::{Launch, Machine, Placement};
use crate::topology::{PeCoord, Space, Topology};
use kernbench_compiler::datapath::{elem, jit::Jit, RtValue};
use kernbench_compiler::diag::{ColorMode, SourceMap};
use kernbench_compiler::sema::DType;
use std::sync::Arc;

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
    /// Wall-clock time of the simulation alone (not the machine's set-up,
    /// the data's placement or the check), for the simulator's speed.
    pub sim_wall: std::time::Duration,
    /// Threads the simulation ran on (one shard each; fewer than asked
    /// when the launch has fewer SIPs, or windows too short to share).
    pub threads: usize,
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

/// The test data: for rank `r` (of `n`), element `i`, a small integer,
/// exact in every dtype, and so are sums of up to 256 of them in f16
/// (bf16 and unsigned types: values in 0..=1 or -1..=0 before the bumps
/// below).
///
/// The values are hashed from `(r, i)`, so no two ranks' data repeat each
/// other, and a reduction that drops a rank or takes one rank's data for
/// another's gives other numbers. For max (min) one rank per element, a
/// different one element by element, holds a value above (below) every
/// other rank's: the result is that rank's, so an algorithm that leaves
/// out any rank, or writes a constant, is wrong somewhere.
fn value(d: DType, op: ReduceOp, n: u64, r: u64, i: u64) -> i64 {
    let narrow = d == DType::BF16 || d == DType::Bool || (!d.is_signed() && !d.is_float());
    let span = if narrow { 2 } else { 5 };
    let offset = if d.is_signed() || d.is_float() { span / 2 } else { 0 };
    // Unsigned data for a min sits one above 0, which only the min's rank
    // (below) holds.
    let lift = i64::from(op == ReduceOp::Min && offset == 0);
    let v = (splitmix64(r << 32 ^ i) % span) as i64 - offset as i64 + lift;
    let winner = splitmix64(i ^ 0x5bd1_e995) % n.max(1);
    if op == ReduceOp::Max && r == winner {
        // Above every other value (for bool: 1 against 0).
        return if d == DType::Bool { 1 } else { (span - offset) as i64 };
    }
    if op == ReduceOp::Min && r == winner {
        return if d == DType::Bool {
            0
        } else {
            -(offset as i64) - 1 + lift
        };
    }
    if d == DType::Bool && op == ReduceOp::Max {
        return 0;
    }
    if d == DType::Bool && op == ReduceOp::Min {
        return 1;
    }
    v
}

fn bits_of(d: DType, v: f64) -> u64 {
    if d.is_float() {
        elem::from_f32(d, v as f32)
    } else {
        elem::from_i64(d, v as i64)
    }
}

/// A running reduction over ranks of one element's values, and the
/// element it gives as the dtype holds it (avg: true division for floats,
/// truncating for integers, as `reduce_ops.tl` does).
#[derive(Clone, Copy)]
struct Reduction {
    op: ReduceOp,
}

impl Reduction {
    fn start(self) -> i64 {
        match self.op {
            ReduceOp::Sum | ReduceOp::Avg => 0,
            ReduceOp::Max => i64::MIN,
            ReduceOp::Min => i64::MAX,
        }
    }

    #[inline]
    fn add(self, acc: i64, v: i64) -> i64 {
        match self.op {
            ReduceOp::Sum | ReduceOp::Avg => acc + v,
            ReduceOp::Max => acc.max(v),
            ReduceOp::Min => acc.min(v),
        }
    }

    /// The element of `acc` over `n` ranks.
    fn finish(self, d: DType, acc: i64, n: u64) -> u64 {
        let n = n.max(1) as i64;
        match self.op {
            ReduceOp::Avg if d.is_float() => bits_of(d, acc as f64 / n as f64),
            ReduceOp::Avg => bits_of(d, (acc / n) as f64),
            _ => bits_of(d, acc as f64),
        }
    }
}

/// Element bytes of a rank's buffer: `len` elements, element i = f(i).
fn bytes(d: DType, len: usize, mut f: impl FnMut(u64) -> u64) -> Vec<u8> {
    fn fill<const N: usize>(out: &mut Vec<u8>, len: usize, f: &mut impl FnMut(u64) -> u64) {
        for i in 0..len as u64 {
            let b = f(i).to_le_bytes();
            // A fixed-size copy: one store, where a slice of the element
            // size cost a memcpy call per element.
            let mut e = [0u8; N];
            e.copy_from_slice(&b[..N]);
            out.extend_from_slice(&e);
        }
    }
    let esz = d.size_bytes() as usize;
    let mut out = Vec::with_capacity(len * esz);
    match esz {
        1 => fill::<1>(&mut out, len, &mut f),
        2 => fill::<2>(&mut out, len, &mut f),
        4 => fill::<4>(&mut out, len, &mut f),
        _ => fill::<8>(&mut out, len, &mut f),
    }
    out
}

/// The inputs and expected outputs of one row, for every rank (element
/// bytes), reused by every algorithm of a sweep.
pub struct Data {
    key: (Collective, DType, ReduceOp, u64, u64, u64),
    /// Each rank's input (`buf` or `src`).
    src: Vec<Vec<u8>>,
    /// Each rank's `dst` size in bytes (0: in place).
    dst_bytes: usize,
    /// Each rank's expected result (`buf` or `dst`).
    expected: Vec<Arc<Vec<u8>>>,
}

/// The last row's data, kept for the next algorithm of the sweep.
#[derive(Default)]
pub struct DataCache(Option<Data>);

fn make_data(c: Collective, d: DType, op: ReduceOp, n: u64, per_rank: u64, root: u64) -> Data {
    let (nu, pr) = (n as usize, per_rank as usize);
    let input_len = if c == Collective::ReduceScatter { nu * pr } else { pr };
    // The inputs, and for a reduction the reduction over ranks of every
    // element as they are made: each value is hashed once.
    let red = Reduction { op };
    let reduces = matches!(c, Collective::AllReduce | Collective::ReduceScatter);
    let mut acc = vec![red.start(); if reduces { input_len } else { 0 }];
    let src: Vec<Vec<u8>> = (0..n)
        .map(|r| {
            bytes(d, input_len, |i| {
                let v = value(d, op, n, r, i);
                if let Some(a) = acc.get_mut(i as usize) {
                    *a = red.add(*a, v);
                }
                bits_of(d, v as f64)
            })
        })
        .collect();
    let reduced = |from: usize| bytes(d, pr, |i| red.finish(d, acc[from + i as usize], n));
    let expected: Vec<Arc<Vec<u8>>> = match c {
        // Every rank expects the same bytes: one shared buffer.
        Collective::AllReduce => std::iter::repeat_n(Arc::new(reduced(0)), nu).collect(),
        Collective::Broadcast => std::iter::repeat_n(Arc::new(src[root as usize].clone()), nu).collect(),
        Collective::AllGather => std::iter::repeat_n(Arc::new(src.concat()), nu).collect(),
        Collective::ReduceScatter => (0..nu).map(|r| Arc::new(reduced(r * pr))).collect(),
    };
    let dst_bytes = match c {
        Collective::AllGather => nu * pr * d.size_bytes() as usize,
        Collective::ReduceScatter => pr * d.size_bytes() as usize,
        _ => 0,
    };
    Data {
        key: (c, d, op, n, per_rank, root),
        src,
        dst_bytes,
        expected,
    }
}

/// Reference figures of a ring over a communicator's PEs (in rank order),
/// for `tlc bench ccl`'s header.
#[derive(Clone, Debug, PartialEq)]
pub struct RingReference {
    /// The per-step bottleneck bandwidth (GB/s) of the data path of a ring
    /// edge: the slowest of the link routes into the receivers' slots and
    /// the memory ports each rank's buffer and slots stream through, as
    /// they are shared (see [`ring_reference`]).
    pub bottleneck_gbps: f64,
    /// Each edge's step latency α (ns), edge k from rank k to rank k + 1:
    /// the route's latency into the receiver's slots and the copy out of
    /// them, which every message pays. Nothing else is on the path a
    /// message takes through the ring: an IPCQ send or receive has no DMA
    /// setup (counting one made this "floor" 10 ns a hop too high, above
    /// what small rings measured), and the memory latency of the buffers
    /// is left out (a pipelined algorithm prefetches).
    pub hop_ns: Vec<f64>,
    /// Each edge's credit round trip (ns): its hop and the way back of
    /// the credits from the receiver's core to the sender's. A sender has
    /// `window_slots[k]` slots, so message m + window_slots[k] of edge k
    /// leaves no sooner than one round trip after message m.
    pub round_trip_ns: Vec<f64>,
    /// The slots of each edge's queue (the most messages in flight on it:
    /// more across SIPs when the IPCQ gives those queues more).
    pub window_slots: Vec<u64>,
}

impl RingReference {
    pub fn mean_hop_ns(&self) -> f64 {
        self.hop_ns.iter().sum::<f64>() / self.hop_ns.len().max(1) as f64
    }

    /// The latency of the slowest `hops` consecutive ring edges (ns): in
    /// a ring collective each rank's last block has crossed the `hops`
    /// edges before it in turn (2(p - 1) for an all-reduce, p - 1 for an
    /// all-gather or reduce-scatter), so the ring finishes no sooner than
    /// its slowest such chain. Edges differ (a SIP link among cube hops):
    /// the slowest edge times the hops, as this was once computed,
    /// overstated it 22× on the 256-PE ring (270 µs against 12.3 µs).
    pub fn latency_ns(&self, hops: usize) -> f64 {
        let n = self.hop_ns.len();
        if n == 0 || hops == 0 {
            return 0.0;
        }
        let edge = |k: usize| self.hop_ns[k % n];
        let mut window: f64 = (0..hops).map(edge).sum();
        let mut worst = window;
        for start in 1..n {
            window += edge(start + hops - 1) - edge(start - 1);
            worst = worst.max(window);
        }
        worst
    }

    /// The edge whose credits allow the fewest slots per ns: its round
    /// trip (ns) and slots; `None` without edges.
    pub fn credit_edge(&self) -> Option<(f64, u64)> {
        let edges = self
            .round_trip_ns
            .iter()
            .copied()
            .zip(self.window_slots.iter().copied());
        edges.fold(None, |worst: Option<(f64, u64)>, (rtt, slots)| match worst {
            Some((w_rtt, w_slots)) if w_rtt * slots.max(1) as f64 >= rtt * w_slots.max(1) as f64 => worst,
            _ => Some((rtt, slots)),
        })
    }

    /// What the credits alone cost `messages` messages over every edge
    /// (ns): on each edge, message m + window leaves a round trip after
    /// message m; the slowest edge counts. For small buffers on a ring
    /// over SIPs this, not the hops' latency, is the floor (the SIP link's
    /// round trip over 4 slots: 133 µs on the default machine's 256 PEs).
    pub fn credit_ns(&self, messages: usize) -> f64 {
        let edges = self.round_trip_ns.iter().zip(&self.window_slots);
        let edge = |(rtt, slots): (&f64, &u64)| (messages.saturating_sub(1) as u64 / (*slots).max(1)) as f64 * rtt;
        edges.map(edge).fold(0.0, f64::max)
    }
}

/// The [`RingReference`] of algorithm `a`'s IPCQ over `pes` (rank order).
pub fn ring_reference(topo: &Topology, reg: &Registry, a: &Algorithm, pes: &[PeCoord]) -> RingReference {
    let ipcq = reg.ipcq(a, topo);
    let mut m = Machine::new(topo);
    let n = pes.len();
    if n < 2 {
        return RingReference {
            bottleneck_gbps: 0.0,
            hop_ns: Vec::new(),
            round_trip_ns: Vec::new(),
            window_slots: Vec::new(),
        };
    }
    let mut bw = f64::INFINITY;
    let mut hop_ns = Vec::with_capacity(n);
    let mut round_trip_ns = Vec::with_capacity(n);
    let mut window_slots = Vec::with_capacity(n);
    let bytes = ipcq.slot_size_bytes.0;
    for k in 0..n {
        let (a_pe, b_pe) = (pes[k], pes[(k + 1) % n]);
        let slots = Placement::near(ipcq.buffer_space, b_pe).endpoint();
        let route = m.fabric.route(Endpoint::Core(a_pe), slots);
        let c = m.fabric.idle_cost(&route, bytes, &[]);
        bw = bw.min(c.bottleneck_bytes_per_us as f64 / 1000.0);
        let copy = m.fabric.route(slots, Endpoint::Core(b_pe));
        let cc = m.fabric.idle_cost(&copy, bytes, &[]);
        let hop_ps = c.latency_ps + cc.latency_ps;
        hop_ns.push(hop_ps as f64 / 1000.0);
        let back_ps = if a_pe == b_pe {
            0
        } else {
            m.fabric.latency_ps(Endpoint::Core(b_pe), Endpoint::Core(a_pe))
        };
        round_trip_ns.push((hop_ps + back_ps) as f64 / 1000.0);
        window_slots.push(ipcq.slots(a_pe.sip != b_pe.sip));
    }
    // A window of full slots per round trip on each edge.
    for (rtt, slots) in round_trip_ns.iter().zip(&window_slots) {
        if *rtt > 0.0 {
            bw = bw.min((slots * bytes) as f64 / rtt);
        }
    }
    // The memories every step streams through, shared: each rank reads
    // (or writes) its buffer in its HBM slice once per byte it sends (or
    // receives); slots in HBM add the message's write into the
    // receiver's slice and its copy out (three passes through one
    // controller); slots in SRAM put both of those through the cube's one
    // SRAM port, for every ring member the cube holds (each receives).
    let hbm = topo.hbm_bandwidth_bytes_per_ns();
    let memory = match ipcq.buffer_space {
        Space::Tcm => hbm,
        Space::Hbm => hbm / 3.0,
        Space::Sram => {
            let mut per_cube: std::collections::HashMap<(u32, u32), u32> = std::collections::HashMap::new();
            for p in pes {
                *per_cube.entry((p.sip, p.cube)).or_insert(0) += 1;
            }
            let receivers = per_cube.values().copied().max().unwrap_or(1);
            let sram = topo.spec.cube.sram.bandwidth_bytes_per_ns.0;
            hbm.min(sram / (2.0 * f64::from(receivers)))
        }
    };
    RingReference {
        bottleneck_gbps: bw.min(memory),
        hop_ns,
        round_trip_ns,
        window_slots,
    }
}

/// What a table measures: one algorithm, compiled, on a PE set.
pub struct Case<'a> {
    pub topo: &'a Topology,
    pub reg: &'a Registry,
    pub algorithm: &'a Algorithm,
    pub func: &'a kernbench_compiler::ir::Function,
    /// The sources `func` was compiled from (for error messages).
    pub sources: &'a SourceMap,
    pub pes: &'a [PeCoord],
    pub dtype: DType,
    pub op: ReduceOp,
    /// Threads a launch over several SIPs may run on (`Machine::threads`:
    /// the results do not depend on it).
    pub threads: usize,
    /// Simulated time one size may take (`Launch::time_limit_ps`); `None`:
    /// no limit.
    pub time_limit_ps: Option<u64>,
    /// A broadcast's root rank; `None`: [`broadcast_root`]'s default.
    pub root: Option<u64>,
}

/// The root a broadcast over `world` ranks runs from: `root`, else a third
/// of the way round (neither the first rank nor the last once there are
/// three).
pub fn broadcast_root(root: Option<u64>, world: u64) -> u64 {
    root.unwrap_or(world / 3)
}

/// Runs one collective of `size_bytes` on a fresh machine.
pub fn run_one(case: &Case, jit: &mut Jit, cache: &mut DataCache, size_bytes: u64) -> Result<Row, String> {
    run_size(case, jit, cache, size_bytes)
        .map_err(|e| format!("algorithm `{}` at {size_bytes} bytes: {e}", case.algorithm.name))
}

fn run_size(case: &Case, jit: &mut Jit, cache: &mut DataCache, size_bytes: u64) -> Result<Row, String> {
    let Case {
        topo,
        reg,
        algorithm: a,
        func,
        sources,
        pes,
        dtype,
        op,
        threads,
        time_limit_ps,
        root,
    } = *case;
    let comm = communicator(topo, a, pes)?;
    let n = comm.world() as u64;
    let root = broadcast_root(root, n);
    if root >= n {
        return Err(format!("--root {root}: the communicator's ranks are 0 to {}", n - 1));
    }
    let esz = dtype.size_bytes();
    let count = (size_bytes / esz).max(1);
    // Elements each rank contributes.
    let per_rank = match a.collective {
        Collective::AllGather | Collective::ReduceScatter => (count / n).max(1),
        _ => count,
    };
    // Before the host builds the data (n ranks × the buffers): a size the
    // machine cannot hold is an error, not gigabytes of host memory first.
    let (input_elems, output_elems) = match a.collective {
        Collective::AllGather => (per_rank, n.saturating_mul(per_rank)),
        Collective::ReduceScatter => (n.saturating_mul(per_rank), per_rank),
        _ => (per_rank, 0),
    };
    let need = input_elems.saturating_add(output_elems).saturating_mul(esz);
    let slice = topo.hbm_slice_bytes();
    if need > slice {
        return Err(format!(
            "each rank needs {need} bytes of HBM for its input{} buffer, and a PE's HBM slice on `{}` holds {slice}",
            if output_elems > 0 { " and output" } else { "" },
            topo.spec.name
        ));
    }
    // The data lives on the host too (the simulator carries real bytes):
    // each rank's input twice (the host's copy and the machine's), its
    // output, and the expected result. Past the host's memory the run
    // would end in the kernel's out-of-memory kill, after minutes and
    // without a word.
    let host_need = n.saturating_mul(need.saturating_add(input_elems.saturating_mul(esz)));
    if let Some(avail) = crate::args::host_memory_available_bytes() {
        if host_need > avail {
            return Err(format!(
                "{n} ranks need about {:.1} GiB of host memory for their data, and this machine has {:.1} GiB available",
                host_need as f64 / (1u64 << 30) as f64,
                avail as f64 / (1u64 << 30) as f64
            ));
        }
    }
    let key = (a.collective, dtype, op, n, per_rank, root);
    if cache.0.as_ref().is_none_or(|d| d.key != key) {
        cache.0 = None; // free the previous size's buffers first
        cache.0 = Some(make_data(a.collective, dtype, op, n, per_rank, root));
    }
    let data = cache.0.as_ref().ok_or("no data")?;
    let mut m = Machine::new(topo);
    m.threads = threads;
    let parts = |bufs: Vec<Vec<u8>>| {
        comm.pes
            .iter()
            .map(|pe| Placement::near(Space::Hbm, *pe))
            .zip(bufs)
            .collect()
    };
    let oom = |e: crate::sim::OutOfMemory| e.to_string();
    let src = m.mem.alloc_symmetric("input", parts(data.src.clone())).map_err(oom)?;
    let dst = if data.dst_bytes > 0 {
        m.mem
            .alloc_symmetric("output", parts(vec![vec![0u8; data.dst_bytes]; n as usize]))
            .map_err(oom)?
    } else {
        Vec::new()
    };
    let i32_arg = |v: u64| RtValue::Scalar(elem::from_i64(DType::I32, v as i64));
    let args: Vec<Vec<RtValue>> = (0..n as usize)
        .map(|r| match a.collective {
            Collective::AllReduce => vec![RtValue::Scalar(src[r]), i32_arg(per_rank)],
            Collective::Broadcast => vec![RtValue::Scalar(src[r]), i32_arg(per_rank), i32_arg(root)],
            Collective::AllGather | Collective::ReduceScatter => {
                vec![RtValue::Scalar(src[r]), RtValue::Scalar(dst[r]), i32_arg(per_rank)]
            }
        })
        .collect();
    let mut launch = Launch::new(func, &comm, args);
    launch.ipcq = Some(reg.ipcq(a, topo));
    launch.packet_bytes = reg.packet_bytes(a);
    launch.time_limit_ps = time_limit_ps;
    let t0 = std::time::Instant::now();
    let result = m.run(&launch, jit);
    let sim_wall = t0.elapsed();
    let report = result.map_err(|e| {
        // The whole diagnostic (a deadlock's blocked ranks and why, an
        // out-of-bounds access's nearest allocation), as `tlc run` gives
        // it; its own "error: " would follow the caller's.
        let shown = crate::sim::render_sim_error_in(&m.mem, func, sources, &e, ColorMode::Never);
        let shown = shown.trim_end();
        let note = (reg.settings_note(a)).map_or(String::new(), |n| format!("\n  = note: {n}"));
        format!(
            "failed on {n} PEs: {}{note}",
            shown.strip_prefix("error: ").unwrap_or(shown)
        )
    })?;
    // A collective that leaves messages behind is wrong even when its
    // data is right (a later collective would receive them).
    if !report.unreceived.is_empty() {
        let total: u64 = report.unreceived.iter().map(|u| u.messages).sum();
        return Err(format!(
            "left {total} message{} unreceived on {n} PEs:\n{}",
            if total == 1 { "" } else { "s" },
            crate::sim::render_unreceived(func, sources, &report.unreceived, true, ColorMode::Never).trim_end()
        ));
    }
    // Count the wrong elements against the exact expected results.
    let out = if dst.is_empty() { &src } else { &dst };
    let mut wrong = 0u64;
    for (r, base) in out.iter().enumerate() {
        let got = m.mem.bytes_at(*base).unwrap_or(&[]);
        let want = &data.expected[r];
        if got != want.as_slice() {
            wrong += got
                .chunks(esz as usize)
                .zip(want.chunks(esz as usize))
                .filter(|(g, w)| g != w)
                .count() as u64
                + (want.len().abs_diff(got.len()) / esz as usize) as u64;
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
        // As nccl-tests prints it: elements per rank (for all-gather
        // and reduce-scatter a rank's share of `size`, not the total).
        count: per_rank,
        time_ps: t,
        algbw_gbps: algbw,
        busbw_gbps: algbw * a.collective.bus_factor(comm.world()),
        wrong,
        events: report.events,
        sim_wall,
        threads: report.threads,
    })
}

/// A byte count with an optional K, M or G suffix (powers of 1024).
pub fn parse_size(t: &str) -> Result<u64, String> {
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
        .ok_or_else(|| format!("`{t}` is not a size (a positive number of bytes, optionally with K, M or G)"))
}

/// `1K:64M` (powers of two from 1 KiB to 64 MiB), `8K`, or `4K,1M,3000`.
pub fn parse_sizes(s: &str) -> Result<Vec<u64>, String> {
    if let Some((lo, hi)) = s.split_once(':') {
        let (lo, hi) = (parse_size(lo)?, parse_size(hi)?);
        if lo > hi {
            return Err(format!("`{s}`: the first size is larger than the last"));
        }
        let mut v = Vec::new();
        let mut x = lo;
        while x <= hi {
            v.push(x);
            // Past u64's last power of two the range ends (saturating
            // would stay at u64::MAX, which is not past `hi` = u64::MAX).
            match x.checked_mul(2) {
                Some(next) => x = next,
                None => break,
            }
        }
        return Ok(v);
    }
    s.split(',').map(parse_size).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A range ends at its last power of two, up to u64's (it used to loop
    /// forever with `u64::MAX` for its end).
    #[test]
    fn size_ranges_end() {
        assert_eq!(parse_sizes("1K:4K"), Ok(vec![1024, 2048, 4096]));
        let all = parse_sizes("1:18446744073709551615").expect("a range");
        assert_eq!((all.len(), all.last().copied()), (64, Some(1 << 63)));
    }

    /// The expected results made in one pass over the inputs are, element
    /// by element, the reduction over ranks of the inputs as the kernel
    /// reads them (decoded from the input bytes), for every collective,
    /// dtype and operation, odd sizes included.
    #[test]
    fn expected_results_reduce_the_inputs() {
        let decode = |d: DType, b: &[u8], i: usize| -> f64 {
            let esz = d.size_bytes() as usize;
            let mut w = [0u8; 8];
            w[..esz].copy_from_slice(&b[i * esz..(i + 1) * esz]);
            let bits = u64::from_le_bytes(w);
            if d.is_float() {
                f64::from(elem::to_f32(d, bits))
            } else {
                elem::to_i64(d, bits) as f64
            }
        };
        for d in [
            DType::F32,
            DType::F16,
            DType::BF16,
            DType::I32,
            DType::I64,
            DType::U8,
            DType::I8,
        ] {
            for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg] {
                for (n, pr) in [(1u64, 5u64), (3, 37), (8, 64)] {
                    for c in [Collective::AllReduce, Collective::ReduceScatter] {
                        let data = make_data(c, d, op, n, pr, 0);
                        for r in 0..n as usize {
                            for i in 0..pr as usize {
                                let at = if c == Collective::ReduceScatter {
                                    r * pr as usize + i
                                } else {
                                    i
                                };
                                let xs: Vec<f64> = data.src.iter().map(|b| decode(d, b, at)).collect();
                                let want = match op {
                                    ReduceOp::Sum => xs.iter().sum(),
                                    ReduceOp::Max => xs.iter().copied().fold(f64::MIN, f64::max),
                                    ReduceOp::Min => xs.iter().copied().fold(f64::MAX, f64::min),
                                    ReduceOp::Avg if d.is_float() => xs.iter().sum::<f64>() / n as f64,
                                    ReduceOp::Avg => (xs.iter().sum::<f64>() / n as f64).trunc(),
                                };
                                let got = decode(d, &data.expected[r], i);
                                let tol = if d.is_float() { want.abs() / 64.0 } else { 0.0 };
                                assert!(
                                    (got - want).abs() <= tol,
                                    "{c:?} {d:?} {op:?} n {n} rank {r} element {i}: {got} against {want} from {xs:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// A ring's latency is its slowest chain of consecutive edges, wrapping
    /// round the ring when the hops outnumber the edges.
    #[test]
    fn ring_latency_is_the_slowest_chain_of_hops() {
        let r = RingReference {
            bottleneck_gbps: 1.0,
            hop_ns: vec![1.0, 1.0, 10.0, 1.0],
            round_trip_ns: vec![2.0, 2.0, 30.0, 2.0],
            window_slots: vec![4; 4],
        };
        assert_eq!(r.latency_ns(1), 10.0);
        assert_eq!(r.latency_ns(2), 11.0);
        assert_eq!(r.latency_ns(6), 24.0); // 1 + 10 + 1 + 1 + 1 + 10
        assert_eq!(r.latency_ns(0), 0.0);
        assert_eq!(r.mean_hop_ns(), 3.25);
        // Messages 4 and 8 each wait a round trip of the slowest edge.
        assert_eq!(r.credit_ns(9), 60.0);
        assert_eq!(r.credit_ns(4), 0.0);
        assert_eq!(r.credit_edge(), Some((30.0, 4)));
        // With 16 slots on the slow edge, a fast edge with 1 binds:
        // 8 round trips of 2 ns against none of 30.
        let wide = RingReference {
            window_slots: vec![1, 4, 16, 4],
            ..r
        };
        assert_eq!(wide.credit_ns(9), 16.0);
        assert_eq!(wide.credit_edge(), Some((2.0, 1)));
        let empty = RingReference {
            bottleneck_gbps: 0.0,
            hop_ns: Vec::new(),
            round_trip_ns: Vec::new(),
            window_slots: Vec::new(),
        };
        assert_eq!(empty.latency_ns(4), 0.0);
        assert_eq!(empty.credit_ns(4), 0.0);
        assert_eq!(empty.credit_edge(), None);
    }
}
