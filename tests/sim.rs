//! The simulated machine: timing of single operations against their
//! closed forms (computed here from the topology's numbers, not by the
//! simulator's own cost functions), contention, communication with exact
//! integer results at many world sizes, the ring all-reduce's time against
//! the alpha-beta model, deadlock diagnostics and determinism.

use kernbench_compiler::datapath::{elem, Tensor};
use kernbench_compiler::diag::ColorMode;
use kernbench_compiler::sema::types::{DType, Elem, Konst};
use kernbench_runtime::args::random_tensor;
use kernbench_runtime::sim::place::LaunchArg;
use kernbench_runtime::sim::{self, Engine, SimError};
use kernbench_runtime::topology::{PeCoord, Topology};
use kernbench_tests::exec::lower_file;
use kernbench_tests::sim::{simulate, tensor, SimRun, TestLaunch};
use kernbench_tests::*;

fn pe(sip: u32, cube: u32, pe: u32) -> PeCoord {
    PeCoord { sip, cube, pe }
}

fn lower(
    src: &str,
    kernel: &str,
    defines: &[(&str, Konst)],
) -> (kernbench_compiler::ir::Function, kernbench_compiler::diag::SourceMap) {
    lower_file("case.tl", src, kernel, defines).unwrap_or_else(|e| panic!("{e}"))
}

fn i32s(shape: &[usize], f: impl Fn(usize) -> i32) -> Tensor {
    let mut t = Tensor::zeros(Elem::Num(DType::I32), shape);
    for k in 0..t.numel() {
        t.set_bits(k, elem::from_i64(DType::I32, f(k) as i64));
    }
    t
}

fn scalar_i32(v: i64) -> LaunchArg {
    LaunchArg::Scalar(elem::from_i64(DType::I32, v))
}

/// The one slice of an instruction whose source text is `what` (rank 0).
fn slice_of<'a>(run: &'a SimRun, func: &kernbench_compiler::ir::Function, mnemonic: &str) -> &'a sim::Slice {
    let found: Vec<&sim::Slice> = run
        .report
        .slices
        .iter()
        .filter(|s| s.rank == 0 && func.inst(s.inst).op.mnemonic() == mnemonic)
        .collect();
    assert_eq!(found.len(), 1, "one `{mnemonic}` slice expected, found {}", found.len());
    found[0]
}

fn ps(ns: f64) -> f64 {
    ns * 1000.0
}

/// Relative difference.
fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-9)
}

const LOAD_STORE: &str = "
@kernel
def copy(src: ptr[f32], dst: ptr[f32], N: constexpr = 4096):
    offs = tl.arange(0, N)
    tl.store(dst + offs, tl.load(src + offs))
";

#[test]
fn one_dma_from_own_hbm_matches_the_closed_form() {
    let topo = Topology::default_machine();
    let (func, _) = lower(LOAD_STORE, "copy", &[]);
    let n = 4096usize;
    let run = simulate(
        &topo,
        vec![pe(0, 0, 0)],
        &func,
        vec![
            tensor("src", random_tensor(DType::F32, &[n], 1), &[]),
            tensor("dst", Tensor::zeros(Elem::Num(DType::F32), &[n]), &["tcm"]),
        ],
        None,
        true,
    )
    .expect("runs");
    let s = &topo.spec;
    let c = &s.pe.hbm_controller;
    // setup + controller latency + bytes over all pseudo-channels (the
    // buffer is 4 KiB aligned, so each channel takes an equal share).
    let bytes = 4.0 * n as f64;
    let channel_bw = c.channel_bandwidth_bytes_per_ns.0 * c.efficiency.0;
    let want = ps(s.pe.dma.setup_cycles.0 as f64 / s.clock_ghz.0
        + c.latency_ns.0
        + bytes / c.pseudo_channels.0 as f64 / channel_bw);
    let load = slice_of(&run, &func, "load");
    let got = (load.done_ps - load.start_ps) as f64;
    assert!(rel(got, want) < 1e-3, "load took {got} ps, closed form {want} ps");
    // The store into the PE's own TCM: setup + TCM latency + bytes at the
    // write port.
    let store = slice_of(&run, &func, "store");
    let want = ps(s.pe.dma.setup_cycles.0 as f64 / s.clock_ghz.0
        + s.pe.tcm.latency_ns.0
        + bytes / s.pe.tcm.write_bandwidth_bytes_per_ns.0);
    let got = (store.done_ps - store.start_ps) as f64;
    assert!(rel(got, want) < 1e-3, "store took {got} ps, closed form {want} ps");
    assert!(store.start_ps >= load.done_ps, "the store waits for the loaded block");
    // And the data arrived.
    assert_eq!(run.tensors[1], run.tensors[0]);
}

/// Pointers that only reach a load through `tl.symm_at` are address
/// generation like any other (no MATH time): `tl.symm_at(x + offs, 1)`
/// loads as early as `tl.symm_at(x, 1) + offs`, and both read rank 1's
/// shard.
#[test]
fn pointers_through_symm_at_are_address_generation() {
    let topo = Topology::default_machine();
    let src = "
@kernel
def block_then_symm(x: ptr[i32], out: ptr[i32], N: constexpr = 1024):
    offs = tl.arange(0, N)
    if tl.rank() == 0:
        tl.store(out + offs, tl.load(tl.symm_at(x + offs, 1)))

@kernel
def symm_then_block(x: ptr[i32], out: ptr[i32], N: constexpr = 1024):
    offs = tl.arange(0, N)
    if tl.rank() == 0:
        tl.store(out + offs, tl.load(tl.symm_at(x, 1) + offs))
";
    let mut loads = Vec::new();
    for kernel in ["block_then_symm", "symm_then_block"] {
        let (func, _) = lower(src, kernel, &[]);
        let run = simulate(
            &topo,
            vec![pe(0, 0, 0), pe(0, 0, 1)],
            &func,
            vec![
                tensor("x", i32s(&[2048], |k| k as i32), &["shard"]),
                tensor("out", Tensor::zeros(Elem::Num(DType::I32), &[2048]), &["shard"]),
            ],
            None,
            true,
        )
        .expect("runs");
        let math: Vec<_> = run.report.slices.iter().filter(|s| s.engine == Engine::Math).collect();
        assert!(math.is_empty(), "{kernel}: MATH slices {math:?}");
        let want = i32s(&[1024], |k| k as i32 + 1024);
        assert_eq!(run.tensors[1].bytes()[..4096], want.bytes()[..], "{kernel}");
        loads.push(slice_of(&run, &func, "load").start_ps);
    }
    assert_eq!(loads[0], loads[1]);
}

/// `tl.symm_at` of a block whose last lanes point past the buffer (the
/// usual masked tail): those lanes are left unusable, not an error, so a
/// masked put works; an active lane among them is an out-of-bounds access
/// whose address says where it came from.
#[test]
fn symm_at_leaves_masked_lanes_past_the_buffer_alone() {
    let topo = Topology::default_machine();
    let src = "
@kernel
def put_tail(x: ptr[i32], n: i32):
    offs = tl.arange(0, 1024)
    if tl.rank() == 0:
        tl.store(tl.symm_at(x + offs, 1), offs + 7, mask=offs < n)
";
    let (func, _) = lower(src, "put_tail", &[]);
    let run = |n: i32| {
        simulate(
            &topo,
            vec![pe(0, 0, 0), pe(0, 0, 1)],
            &func,
            vec![
                tensor("x", Tensor::zeros(Elem::Num(DType::I32), &[2000]), &["shard"]),
                scalar_i32(i64::from(n)),
            ],
            None,
            false,
        )
    };
    let done = run(1000).expect("a masked put past the buffer runs");
    let want = i32s(&[1000], |k| k as i32 + 7);
    assert_eq!(done.tensors[0].bytes()[4000..], want.bytes()[..]);
    match run(1001) {
        Err(SimError::Exec { error, .. }) => match error.kind {
            kernbench_compiler::datapath::ExecErrorKind::OutOfBounds(f) => {
                assert_eq!(sim::symm_at_origin(f.addr), Some(f.addr & 0xffff_ffff_ffff), "{f:?}")
            }
            k => panic!("{k:?}"),
        },
        other => panic!("an active lane past the buffer: {:?}", other.err()),
    }
}

/// A masked store moves its active lanes only: its time is the closed
/// form for those bytes, whether the mask is a prefix of a 1-D block or
/// the first rows of a 2-D one (masks the simulator reads off as a
/// formula), and only those bytes change.
#[test]
fn masked_dma_moves_only_its_active_lanes() {
    let topo = Topology::default_machine();
    let src = "
@kernel
def prefix(src: ptr[i32], dst: ptr[i32], n: i32):
    offs = tl.arange(0, 4096)
    tl.store(dst + offs, tl.load(src + offs), mask=offs < n)

@kernel
def rows(src: ptr[i32], dst: ptr[i32], n: i32):
    r = tl.arange(0, 8)
    c = tl.arange(0, 512)
    offs = r[:, None] * 512 + c[None, :]
    tl.store(dst + offs, tl.load(src + offs), mask=(r[:, None] < n) & (c[None, :] < 512))
";
    let s = &topo.spec;
    for (kernel, n, active) in [
        ("prefix", 4096usize, 4096usize),
        ("prefix", 2500, 2500),
        ("prefix", 1, 1),
        ("rows", 3, 1536),
    ] {
        let (func, _) = lower(src, kernel, &[]);
        let data = i32s(&[4096], |k| k as i32 + 1);
        let run = simulate(
            &topo,
            vec![pe(0, 0, 0)],
            &func,
            vec![
                tensor("src", data.clone(), &[]),
                tensor("dst", Tensor::zeros(Elem::Num(DType::I32), &[4096]), &["tcm"]),
                scalar_i32(n as i64),
            ],
            None,
            true,
        )
        .expect("runs");
        let bytes = 4.0 * active as f64;
        let want = ps(s.pe.dma.setup_cycles.0 as f64 / s.clock_ghz.0
            + s.pe.tcm.latency_ns.0
            + bytes / s.pe.tcm.write_bandwidth_bytes_per_ns.0);
        let store = slice_of(&run, &func, "store");
        let got = (store.done_ps - store.start_ps) as f64;
        // Within rounding to whole picoseconds (one lane is 8 ps).
        assert!(
            (got - want).abs() <= 2.0,
            "{kernel} n = {n}: store took {got} ps, closed form {want} ps"
        );
        for k in 0..4096 {
            let want = if k < active { k as u64 + 1 } else { 0 };
            assert_eq!(run.tensors[1].get_bits(k), want, "{kernel} n = {n}: element {k}");
        }
    }
}

#[test]
fn remote_cube_dma_is_latency_sum_plus_bytes_over_the_bottleneck() {
    let topo = Topology::default_machine();
    // `src` is one copy, in rank 0's HBM slice at (0,5,3); only rank 1, at
    // (0,0,0), copies it.
    let src = "
@kernel
def copy(src: ptr[f32], dst: ptr[f32], N: constexpr = 4096):
    offs = tl.arange(0, N)
    if tl.rank() == 1:
        tl.store(dst + offs, tl.load(src + offs))
";
    let (func, _) = lower(src, "copy", &[]);
    let n = 4096usize;
    let far = pe(0, 5, 3);
    let run = simulate(
        &topo,
        vec![far, pe(0, 0, 0)],
        &func,
        vec![
            tensor("src", random_tensor(DType::F32, &[n], 2), &[]),
            tensor("dst", Tensor::zeros(Elem::Num(DType::F32), &[n]), &["replicate", "tcm"]),
        ],
        None,
        true,
    )
    .expect("runs");
    // Rank 1 at (0,0,0) reads (0,5,3)'s HBM slice: HBM → router hop
    // (corner 1 → 0 of cube 5) → UCIe 5→4 → hop (1 → 0 of cube 4) → UCIe
    // 4→0 → hop (2 → 0 of cube 0) → router→PE.
    let s = &topo.spec;
    let c = &s.pe.hbm_controller;
    let hop = s.cube.router.hop_latency_ns.0;
    let lat = c.latency_ns.0 + 3.0 * hop + 2.0 * s.sip.ucie.latency_ns.0 + hop;
    let hbm_bw = c.pseudo_channels.0 as f64 * c.channel_bandwidth_bytes_per_ns.0 * c.efficiency.0;
    let min_bw = hbm_bw
        .min(s.cube.router.link_bandwidth_bytes_per_ns.0)
        .min(topo.ucie_bandwidth_bytes_per_ns());
    let bytes = 4.0 * n as f64;
    let closed = ps(s.pe.dma.setup_cycles.0 as f64 / s.clock_ghz.0 + lat + bytes / min_bw);
    let load = run
        .report
        .slices
        .iter()
        .find(|sl| sl.rank == 1 && func.inst(sl.inst).op.mnemonic() == "load")
        .expect("rank 1's load");
    let got = (load.done_ps - load.start_ps) as f64;
    // The head packet is stored and forwarded at each link: at most its
    // serialization on every link beyond the closed form.
    let head = s.fabric.packet_bytes.0 as f64;
    let slack = ps(head / hbm_bw
        + 5.0 * head / s.cube.router.link_bandwidth_bytes_per_ns.0
        + 2.0 * head / topo.ucie_bandwidth_bytes_per_ns());
    assert!(
        got >= closed - 1.0 && got <= closed + slack + 1.0,
        "remote load took {got} ps, closed form {closed} ps (+ ≤ {slack} ps)"
    );
    assert!(rel(got, closed) < 0.05);
}

const BUMP: &str = "
@kernel
def bump(x: ptr[i32], N: constexpr = 64):
    offs = tl.arange(0, N)
    tl.store(x + offs, tl.load(x + offs) + 1)
";

/// `text` with `from` replaced by `to`; `from` must occur exactly once, so
/// a variant of a preset changes the key it means to and no other.
fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(text.matches(from).count(), 1, "`{from}` once in the topology");
    text.replacen(from, to, 1)
}

/// The host path's numbers of a topology variant, in ns.
#[derive(Clone, Copy, Debug)]
struct HostPath {
    pcie: u64,
    io_cpu: u64,
    overhead: u64,
    hop: u64,
}

impl HostPath {
    /// The `tiny` preset with these numbers.
    fn tiny(self) -> Topology {
        let (_, yaml) = kernbench_runtime::topology::PRESETS
            .iter()
            .find(|(n, _)| *n == "tiny")
            .expect("the tiny preset");
        let y = replace_once(yaml, "latency_ns: 1000\n", &format!("latency_ns: {}\n", self.pcie));
        let y = replace_once(
            &y,
            "io_cpu_latency_ns: 200\n",
            &format!("io_cpu_latency_ns: {}\n", self.io_cpu),
        );
        let y = replace_once(
            &y,
            "launch_overhead_ns: 2000\n",
            &format!("launch_overhead_ns: {}\n", self.overhead),
        );
        let y = replace_once(&y, "hop_latency_ns: 2\n", &format!("hop_latency_ns: {}\n", self.hop));
        let topo = Topology::parse("host-path.yaml", &y).expect("valid variant");
        let h = &topo.spec.host;
        assert_eq!(
            (h.pcie.latency_ns.0, h.io_cpu_latency_ns.0, h.launch_overhead_ns.0),
            (self.pcie as f64, self.io_cpu as f64, self.overhead as f64),
            "the variant sets the host path"
        );
        topo
    }
}

/// Runs `bump` on `pes` (each rank its own shard in its TCM) and checks
/// every rank's result; returns the run.
fn bump_on(topo: &Topology, pes: &[PeCoord]) -> SimRun {
    let (func, _) = lower(BUMP, "bump", &[]);
    let world = pes.len();
    let run = simulate(
        topo,
        pes.to_vec(),
        &func,
        vec![tensor("x", i32s(&[world, 64], |k| k as i32), &["shard", "tcm"])],
        None,
        true,
    )
    .expect("runs");
    for k in 0..world * 64 {
        assert_eq!(elem::to_i64(DType::I32, run.tensors[0].get_bits(k)), k as i64 + 1);
    }
    // One common start: every rank reaches its load after the same
    // instructions, so the loads start together.
    let loads: Vec<u64> = (0..world as u32)
        .map(|r| {
            run.report
                .slices
                .iter()
                .find(|s| s.rank == r && func.inst(s.inst).op.mnemonic() == "load")
                .expect("each rank's load")
                .start_ps
        })
        .collect();
    assert!(
        loads.iter().all(|&t| t == loads[0]) && loads[0] >= run.report.start_ps,
        "ranks start at once: loads at {loads:?}, launch start {}",
        run.report.start_ps
    );
    run
}

/// A launch starts on all its PEs at one time the IO CPU stamps
/// (docs/hardware-model.md §7): PCIe latency + IO CPU latency + launch
/// overhead + the NoC latency from the IO chiplet (corner 0 of
/// `io_chiplet_cube`, in each PE's own SIP) to the farthest PE of the
/// launch. The closed form counts the links from the routing rules of §3:
/// router hops XY between the corners of the 2×2 mesh (corner `c` at
/// `(c % 2, c / 2)`), a UCIe port per cube crossed, and the router→PE link.
/// Each host number is changed on its own and the start moves by exactly
/// the change; a second launch on the same machine starts the same time
/// after the first one ended.
#[test]
fn a_launch_starts_after_the_host_path_on_every_pe() {
    let base = HostPath {
        pcie: 1000,
        io_cpu: 200,
        overhead: 2000,
        hop: 2,
    };
    // `tiny`: one cube (the IO chiplet's), one PE per corner (PE p at
    // corner p).
    let noc_ns = |h: HostPath, p: u32| h.hop * u64::from(p % 2 + p / 2 + 1);
    let sets: [&[u32]; 6] = [&[0], &[1], &[2], &[3], &[0, 1, 2, 3], &[3, 0]];
    let start_of = |h: HostPath, set: &[u32]| {
        let pes: Vec<PeCoord> = set.iter().map(|&p| pe(0, 0, p)).collect();
        bump_on(&h.tiny(), &pes).report.start_ps
    };
    let closed = |h: HostPath, set: &[u32]| {
        1000 * (h.pcie + h.io_cpu + h.overhead + set.iter().map(|&p| noc_ns(h, p)).max().unwrap_or(0))
    };
    let base_starts: Vec<u64> = sets.iter().map(|set| start_of(base, set)).collect();
    for (set, got) in sets.iter().zip(&base_starts) {
        assert_eq!(*got, closed(base, set), "tiny, PEs {set:?}");
    }
    // The farthest PE sets the start, wherever it is in the list.
    assert_eq!(base_starts[4], base_starts[3]);
    assert_eq!(base_starts[5], base_starts[3]);
    for (variant, shift_ns) in [
        (HostPath { pcie: 1750, ..base }, 750),
        (HostPath { io_cpu: 530, ..base }, 330),
        (HostPath { overhead: 2125, ..base }, 125),
    ] {
        for (set, b) in sets.iter().zip(&base_starts) {
            let got = start_of(variant, set);
            assert_eq!(got, closed(variant, set), "{variant:?}, PEs {set:?}");
            assert_eq!(
                got - b,
                1000 * shift_ns,
                "{variant:?}, PEs {set:?}: the start shifts by the change"
            );
        }
    }
    let slow_noc = HostPath { hop: 7, ..base };
    for set in sets {
        assert_eq!(
            start_of(slow_noc, set),
            closed(slow_noc, set),
            "{slow_noc:?}, PEs {set:?}"
        );
    }

    // The default machine: 4×4 cubes, IO chiplet at cube 0, two PEs per
    // corner. (s, 5, 3) is in cube 5 = (1, 1), at corner 1: corner 0→1 of
    // cube 0 to its east port, UCIe 0→1, in at corner 0; corner 0→2 to the
    // south port, UCIe 1→5, in at corner 0; corner 0→1; router→PE. On
    // SIP 1 the path starts at SIP 1's own IO chiplet (each SIP has its
    // PCIe link), so no SIP link is crossed.
    let topo = Topology::default_machine();
    let s = &topo.spec;
    let host = s.host.pcie.latency_ns.0 + s.host.io_cpu_latency_ns.0 + s.host.launch_overhead_ns.0;
    let hop = s.cube.router.hop_latency_ns.0;
    let far = 4.0 * hop + 2.0 * s.sip.ucie.latency_ns.0;
    for (pes, noc) in [
        (vec![pe(0, 0, 0)], hop),
        (vec![pe(1, 0, 0)], hop),
        (vec![pe(0, 5, 3)], far),
        (vec![pe(1, 5, 3)], far),
        (vec![pe(0, 0, 0), pe(0, 5, 3), pe(1, 0, 1)], far),
    ] {
        let got = bump_on(&topo, &pes).report.start_ps;
        assert_eq!(got as f64, ps(host + noc), "default machine, PEs {pes:?}");
    }

    // A launch issued at the machine's time t starts at t + the same
    // latency: a second launch after the first one ended.
    let tiny = base.tiny();
    let mut first = bump_on(&tiny, &[pe(0, 0, 3), pe(0, 0, 0)]);
    let (func, _) = lower(BUMP, "bump", &[]);
    let comm = sim::Communicator::new(vec![pe(0, 0, 3), pe(0, 0, 0)]);
    let args = (0..2)
        .map(|r| vec![kernbench_compiler::datapath::RtValue::Scalar(first.placed[0].bases[r])])
        .collect();
    let launch = sim::Launch::new(&func, &comm, args);
    let mut jit = kernbench_compiler::datapath::jit::Jit::verifying();
    let second = first.machine.run(&launch, &mut jit).expect("runs again");
    assert_eq!(
        second.start_ps,
        first.report.end_ps + closed(base, &[3, 0]),
        "the second launch starts after the first one's end"
    );
}

#[test]
fn math_and_dot_cost_their_cycles() {
    let topo = Topology::default_machine();
    let src = "
@kernel
def ops(x: ptr[f32], a: ptr[f16], b: ptr[f16], out: ptr[f32], N: constexpr = 1000, M: constexpr = 64):
    v = tl.load(x + tl.arange(0, N))
    tl.store(x + tl.arange(0, N), tl.exp(v))
    r = tl.arange(0, M)
    ta = tl.load(a + r[:, None] * M + r[None, :])
    tb = tl.load(b + r[:, None] * M + r[None, :])
    tl.store(out + r[:, None] * M + r[None, :], tl.dot(ta, tb))
";
    let (func, _) = lower(src, "ops", &[]);
    let run = simulate(
        &topo,
        vec![pe(0, 0, 0)],
        &func,
        vec![
            tensor("x", random_tensor(DType::F32, &[1000], 3), &[]),
            tensor("a", random_tensor(DType::F16, &[64, 64], 4), &[]),
            tensor("b", random_tensor(DType::F16, &[64, 64], 5), &[]),
            tensor("out", Tensor::zeros(Elem::Num(DType::F32), &[64, 64]), &[]),
        ],
        None,
        true,
    )
    .expect("runs");
    let s = &topo.spec;
    let exp = slice_of(&run, &func, "exp");
    let want = 1000u64.div_ceil(s.pe.math.lanes.0) * s.pe.math.op_cycles["exp"].0 * topo.cycle_ps;
    assert_eq!(exp.done_ps - exp.start_ps, want, "exp on 1000 elements");
    let dot = slice_of(&run, &func, "dot");
    let g = &s.pe.gemm;
    let tiles = 64u64.div_ceil(g.tile_m.0) * 64u64.div_ceil(g.tile_n.0) * 64u64.div_ceil(g.tile_k.0);
    let want = (tiles * g.cycles_per_tile["f16"].0 + g.pipeline_latency_cycles.0) * topo.cycle_ps;
    assert_eq!(dot.done_ps - dot.start_ps, want, "dot 64x64x64 f16");
    assert_eq!(exp.engine, Engine::Math);
    assert_eq!(dot.engine, Engine::Gemm);
}

/// `pe.queue_depth`: the issue unit stalls while an engine queue holds
/// that many waiting operations. Six loads queue on the DMA engine ahead
/// of an `exp` that needs none of them: with depth `d` the sixth load (and
/// so the `exp` after it) is issued only once the load `d` places before
/// it has started, and no later than the start of the one after that; with
/// a queue deeper than the loads the `exp` runs while the first load is
/// still moving.
#[test]
fn a_full_engine_queue_stalls_issue() {
    let src = "
@kernel
def k(x: ptr[f32], out: ptr[f32], N: constexpr = 2048):
    offs = tl.arange(0, N)
    a0 = tl.load(x + offs)
    a1 = tl.load(x + offs)
    a2 = tl.load(x + offs)
    a3 = tl.load(x + offs)
    a4 = tl.load(x + offs)
    a5 = tl.load(x + offs)
    tl.store(out + offs, tl.exp(offs.to(f32)))
    tl.store(x + offs, a0 + a1 + a2 + a3 + a4 + a5)
";
    let (func, _) = lower(src, "k", &[]);
    let loads = 6usize;
    for depth in [1usize, 2, 4, 8] {
        let y = kernbench_runtime::topology::DEFAULT_YAML.replace("queue_depth: 8", &format!("queue_depth: {depth}"));
        let topo = Topology::parse("depth.yaml", &y).expect("valid variant");
        let run = simulate(
            &topo,
            vec![pe(0, 0, 0)],
            &func,
            vec![
                tensor("x", random_tensor(DType::F32, &[2048], 9), &[]),
                tensor("out", Tensor::zeros(Elem::Num(DType::F32), &[2048]), &[]),
            ],
            None,
            true,
        )
        .expect("runs");
        let mut load_starts: Vec<u64> = run
            .report
            .slices
            .iter()
            .filter(|s| func.inst(s.inst).op.mnemonic() == "load")
            .map(|s| s.start_ps)
            .collect();
        load_starts.sort_unstable();
        assert_eq!(load_starts.len(), loads);
        assert!(
            load_starts.windows(2).all(|w| w[0] < w[1]),
            "the loads take the DMA engine one after the other: {load_starts:?}"
        );
        // The group of the cast and the exp, named by the exp (its result).
        let exp = slice_of(&run, &func, "exp").start_ps;
        if depth < loads {
            let freed = load_starts[loads - 1 - depth];
            assert!(
                exp > freed && exp < load_starts[loads - depth],
                "depth {depth}: exp at {exp} ps, after load {} starts ({freed} ps), before the next ({} ps)",
                loads - 1 - depth,
                load_starts[loads - depth]
            );
        } else {
            assert!(
                exp < load_starts[1],
                "depth {depth}: nothing stalls, exp at {exp} ps, second load at {} ps",
                load_starts[1]
            );
        }
    }
}

#[test]
fn n_flows_into_one_hbm_controller_take_n_times_as_long_and_wait_in_turn() {
    let topo = Topology::default_machine();
    // Every rank copies its 64 KiB chunk of a tensor in rank 0's HBM.
    let src = "
@kernel
def pull(src: ptr[f32], dst: ptr[f32], N: constexpr = 16384):
    r = tl.rank()
    tl.store(dst + tl.arange(0, N), tl.load(src + r * N + tl.arange(0, N)))
";
    let (func, _) = lower(src, "pull", &[]);
    let (mut times, mut waits) = (Vec::new(), Vec::new());
    for n in [1usize, 2, 4, 8] {
        let pes: Vec<PeCoord> = (0..n as u32).map(|k| pe(0, 0, k)).collect();
        let run = simulate(
            &topo,
            pes,
            &func,
            vec![
                tensor("src", random_tensor(DType::F32, &[8 * 16384], 6), &[]),
                // In each PE's TCM: the stores stay off the controller.
                tensor(
                    "dst",
                    Tensor::zeros(Elem::Num(DType::F32), &[n * 16384]),
                    &["shard", "tcm"],
                ),
            ],
            None,
            true,
        )
        .expect("runs");
        let last = run
            .report
            .slices
            .iter()
            .filter(|s| func.inst(s.inst).op.mnemonic() == "load")
            .map(|s| s.done_ps)
            .max()
            .unwrap();
        let first = run
            .report
            .slices
            .iter()
            .filter(|s| func.inst(s.inst).op.mnemonic() == "load")
            .map(|s| s.start_ps)
            .min()
            .unwrap();
        times.push((last - first) as f64);
        // The controller's pseudo-channels are the most contended links:
        // what each flow waited for them, summed (none for one flow).
        let contended = run.report.contended_links(usize::MAX);
        let hbm_wait = contended
            .iter()
            .filter(|l| matches!(l.id, sim::LinkId::HbmChannel { at, .. } if at == pe(0, 0, 0)))
            .map(|l| l.wait_ps)
            .max();
        waits.push((hbm_wait.unwrap_or(0) as f64, contended.first().map(|l| l.id)));
    }
    // Beyond the fixed latency (DMA setup and the controller's), N flows
    // stream N times the bytes through one controller.
    let s = &topo.spec;
    let fixed = ps(s.pe.dma.setup_cycles.0 as f64 / s.clock_ghz.0 + s.pe.hbm_controller.latency_ns.0);
    let one = times[0] - fixed;
    for (k, n) in [1.0, 2.0, 4.0, 8.0].iter().enumerate() {
        let ratio = (times[k] - fixed) / one;
        assert!(
            (ratio - n).abs() / n < 0.05,
            "{n} flows: {ratio:.2}× one flow ({times:?})"
        );
        // A FIFO server: flow j waits for the j before it, one flow's time
        // each, so a channel's summed wait is n (n - 1) / 2 flows' times.
        let (wait, top) = waits[k];
        let want = one * n * (n - 1.0) / 2.0;
        match k {
            0 => assert_eq!((wait, top), (0.0, None), "one flow waits for nothing"),
            _ => {
                assert!(
                    (wait - want).abs() <= 0.1 * want,
                    "{n} flows: a channel's summed wait {wait} ps, want {want} ps"
                );
                assert!(
                    matches!(top, Some(sim::LinkId::HbmChannel { .. })),
                    "{n} flows: the most contended link is {top:?}"
                );
            }
        }
    }
}

const SEND_RECV: &str = "
@kernel
def pair(buf: ptr[i32], N: constexpr = 1024):
    offs = tl.arange(0, N)
    if tl.rank() == 0:
        tl.send(1, tl.load(buf + offs))
    else:
        tl.store(buf + offs, tl.recv(0, [N], i32))
";

#[test]
fn a_send_recv_pair_matches_the_closed_form() {
    let topo = Topology::default_machine();
    let (func, _) = lower(SEND_RECV, "pair", &[]);
    // Ranks on corners 0 and 1 of one cube: one router hop apart.
    let run = simulate(
        &topo,
        vec![pe(0, 0, 0), pe(0, 0, 2)],
        &func,
        vec![tensor(
            "buf",
            i32s(&[2, 1024], |k| if k < 1024 { k as i32 } else { -1 }),
            &["shard", "tcm"],
        )],
        None,
        true,
    )
    .expect("runs");
    let out = &run.tensors[0];
    for k in 0..1024 {
        assert_eq!(out.get_bits(1024 + k), k as u64, "rank 1 received rank 0's data");
    }
    let s = &topo.spec;
    let bytes = 4096.0;
    let head = s.fabric.packet_bytes.0 as f64;
    let (link_bw, hop) = (
        s.cube.router.link_bandwidth_bytes_per_ns.0,
        s.cube.router.hop_latency_ns.0,
    );
    let tcm_w = s.pe.tcm.write_bandwidth_bytes_per_ns.0;
    // PE→router, router hop, router→PE, TCM write port (the IPCQ slots).
    let want = ps(3.0 * hop + s.pe.tcm.latency_ns.0 + 3.0 * head / link_bw + head / tcm_w + (bytes - head) / link_bw);
    let send = run
        .report
        .slices
        .iter()
        .find(|sl| sl.engine == Engine::Send)
        .expect("a send");
    let got = (send.done_ps - send.start_ps) as f64;
    assert!(rel(got, want) < 1e-3, "send took {got} ps, closed form {want} ps");
    let recv = run
        .report
        .slices
        .iter()
        .find(|sl| sl.engine == Engine::Recv)
        .expect("a recv");
    assert!(recv.start_ps >= send.done_ps, "a receive starts after its data arrived");
    let want = ps(s.pe.tcm.latency_ns.0 + bytes / s.pe.tcm.read_bandwidth_bytes_per_ns.0);
    let got = (recv.done_ps - recv.start_ps) as f64;
    assert!(rel(got, want) < 1e-3, "copy-out took {got} ps, closed form {want} ps");
}

const LATE_RECV: &str = "
@kernel
def late(buf: ptr[i32], SPIN: constexpr = 200, N: constexpr = 64):
    offs = tl.arange(0, N)
    if tl.rank() == 0:
        tl.send(1, tl.load(buf + offs))
    else:
        acc = 0
        for i in range(SPIN):
            acc += i
        tl.store(buf + offs, tl.recv(0, [N], i32) + acc)
";

/// An operation never starts before the issue unit dispatched it, even
/// when what it waits for comes first: rank 1 dispatches at least SPIN
/// instructions (one `+=` per iteration) before its receive, queued ahead
/// of the global clock, while rank 0's message arrives well before that.
/// The receive must start at its dispatch, not at the message's arrival.
#[test]
fn a_receive_starts_no_earlier_than_its_dispatch() {
    let topo = Topology::default_machine();
    let (func, _) = lower(LATE_RECV, "late", &[]);
    let run = simulate(
        &topo,
        vec![pe(0, 0, 0), pe(0, 0, 2)],
        &func,
        vec![tensor("buf", i32s(&[2, 64], |k| k as i32), &["shard"])],
        None,
        true,
    )
    .expect("runs");
    let spin: u64 = 200;
    let sum: i64 = (0..spin as i64).sum();
    for k in 0..64 {
        assert_eq!(
            elem::to_i64(DType::I32, run.tensors[0].get_bits(64 + k)),
            k as i64 + sum,
            "lane {k}"
        );
    }
    let dispatch_ps = topo.cycles_to_ps(topo.spec.pe.dispatch_cycles.0);
    let earliest = run.report.start_ps + spin * dispatch_ps;
    let find = |e: Engine| run.report.slices.iter().find(|sl| sl.engine == e).expect("a slice");
    let (send, recv) = (find(Engine::Send), find(Engine::Recv));
    assert!(
        send.done_ps < earliest,
        "the message ({} ps) should arrive before rank 1 can reach its receive ({earliest} ps)",
        send.done_ps
    );
    assert!(
        recv.start_ps >= earliest,
        "the receive started at {} ps, before rank 1 could have dispatched it ({earliest} ps)",
        recv.start_ps
    );
}

/// Runs the test ring all-reduce on `world` PEs (ring order) with i32
/// data and checks every rank holds the exact sum.
fn ring_exact(topo: &Topology, world: usize, n_elem: usize, chunk: i64, stdlib: bool, layout: &[&str]) -> SimRun {
    let file = repo_root().join(if stdlib {
        "stdlib/ccl/ring_allreduce.tl"
    } else {
        "tests/sim/ring_allreduce.tl"
    });
    let (func, _) = kernbench_tests::exec::lower_path(
        &file,
        "ring_allreduce",
        &[("T", Konst::DType(DType::I32)), ("CHUNK", Konst::Int(chunk))],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let pes = sim::select_pes(topo, &world.to_string()).expect("enough PEs");
    let data = i32s(&[world, n_elem], |k| {
        ((k * 7919) % 2001) as i32 - 1000 + (k / n_elem) as i32 * 100_000
    });
    let run = simulate(
        topo,
        pes,
        &func,
        vec![tensor("buf", data.clone(), layout), scalar_i32(n_elem as i64)],
        None,
        false,
    )
    .unwrap_or_else(|e| panic!("world {world}: {e:?}"));
    let out = &run.tensors[0];
    for i in 0..n_elem {
        let want: i64 = (0..world)
            .map(|r| elem::to_i64(DType::I32, data.get_bits(r * n_elem + i)))
            .sum();
        for r in 0..world {
            let got = elem::to_i64(DType::I32, out.get_bits(r * n_elem + i));
            assert_eq!(got, want, "world {world}, rank {r}, element {i}");
        }
    }
    run
}

#[test]
fn ring_allreduce_is_exact_at_many_world_sizes() {
    let topo = Topology::default_machine();
    for world in [2, 3, 4, 7, 8, 16, 128] {
        // Element counts that do not divide by the world size, and some
        // smaller than it.
        for n in [1000, 13] {
            ring_exact(&topo, world, n, 64, false, &["shard"]);
        }
    }
    // The stdlib's simple ring too.
    for world in [2, 3, 8] {
        ring_exact(&topo, world, 777, 256, true, &["shard"]);
    }
}

/// A topology where the ring's links are the bottleneck: TCM ports and
/// DMA setup fast enough that only the links limit bandwidth.
fn link_bound_topology() -> Topology {
    let y = kernbench_runtime::topology::DEFAULT_YAML
        .replace("read_bandwidth_bytes_per_ns: 512", "read_bandwidth_bytes_per_ns: 4096")
        .replace(
            "write_bandwidth_bytes_per_ns: 512",
            "write_bandwidth_bytes_per_ns: 4096",
        )
        .replace("setup_cycles: 10", "setup_cycles: 1")
        .replace("link_bandwidth_bytes_per_ns: 256", "link_bandwidth_bytes_per_ns: 32");
    Topology::parse("link-bound.yaml", &y).expect("valid variant")
}

#[test]
fn ring_allreduce_time_follows_the_alpha_beta_model() {
    let topo = link_bound_topology();
    let world = 8usize;
    let n_elem = 128 * 1024; // 512 KiB of i32 per rank
    let run = ring_exact(&topo, world, n_elem, 1024, false, &["shard", "tcm"]);
    let s = &topo.spec;
    let p = world as f64;
    let bytes = 4.0 * n_elem as f64;
    // B: the bottleneck link of a ring step (PE→router, router hops and
    // router→PE all run at the router's link bandwidth). α: one chunk's
    // trip on an idle path (3 link latencies at most within a cube, the
    // TCM write, the head packet's store-and-forward) plus its copy out
    // of the slots.
    let b = s.cube.router.link_bandwidth_bytes_per_ns.0;
    let chunk = 4096.0;
    let alpha = 3.0 * s.cube.router.hop_latency_ns.0
        + 2.0 * s.pe.tcm.latency_ns.0
        + chunk / s.pe.tcm.read_bandwidth_bytes_per_ns.0
        + 3.0 * s.fabric.packet_bytes.0 as f64 / b;
    let model = 2.0 * (p - 1.0) / p * bytes / b + 2.0 * (p - 1.0) * alpha;
    let got = run.report.elapsed_ps() as f64 / 1000.0;
    assert!(
        rel(got, model) < 0.10,
        "ring all-reduce of {bytes} bytes on {world} PEs: {got:.1} ns, model {model:.1} ns ({:.1}% off)",
        100.0 * rel(got, model)
    );
}

/// Runs `kernel` of `src` on the first `n` PEs (`sim::select_pes`) with
/// `buf`, an i32 block of `shape` sharded over them, and returns its
/// deadlock (any other outcome fails the test).
fn deadlock_of(
    src: &str,
    kernel: &str,
    n: &str,
    shape: &[usize],
) -> (
    kernbench_compiler::ir::Function,
    kernbench_compiler::diag::SourceMap,
    SimError,
) {
    let topo = Topology::default_machine();
    let (func, sources) = lower(src, kernel, &[]);
    let pes = sim::select_pes(&topo, n).unwrap();
    let e = simulate(
        &topo,
        pes,
        &func,
        vec![tensor("buf", i32s(shape, |k| k as i32), &["shard"])],
        None,
        false,
    )
    .err()
    .expect("a deadlock");
    assert!(matches!(e, SimError::Deadlock { .. }), "expected a deadlock, got {e:?}");
    (func, sources, e)
}

const DEADLOCK: &str = "
@kernel
def wrong_ring(buf: ptr[i32], N: constexpr = 64):
    offs = tl.arange(0, N)
    got = tl.recv(tl.PREV, [N], i32)
    tl.send(tl.NEXT, tl.load(buf + offs) + got)
";

#[test]
fn receiving_first_deadlocks_with_a_diagnostic() {
    let (func, sources, e) = deadlock_of(DEADLOCK, "wrong_ring", "4", &[4, 64]);
    let SimError::Deadlock { ref blocked, .. } = e else {
        panic!("expected a deadlock, got {e:?}")
    };
    assert_eq!(blocked.len(), 4);
    for b in blocked {
        assert_eq!(
            b.reason,
            sim::WaitReason::NoData {
                from_rank: (b.rank + 3) % 4
            }
        );
    }
    let text = sim::render_sim_error(&func, &sources, &e, ColorMode::Never);
    compare_or_bless(&repo_root().join("tests/sim/deadlock-recv-first.stderr"), &text)
        .unwrap_or_else(|d| panic!("{d}"));
}

const FLOOD: &str = "
@kernel
def flood(buf: ptr[i32], N: constexpr = 1024):
    offs = tl.arange(0, N)
    for i in range(16):
        tl.send(tl.NEXT, tl.load(buf + offs))
    for i in range(16):
        tl.store(buf + offs, tl.recv(tl.PREV, [N], i32))
";

/// `e` is a deadlock where every blocked PE waits in a send to a queue
/// with all 4 of its 4 slots taken.
fn assert_every_queue_full(e: &SimError) {
    let SimError::Deadlock { blocked, .. } = e else {
        panic!("expected a deadlock, got {e:?}")
    };
    assert!(
        blocked
            .iter()
            .all(|b| matches!(b.reason, sim::WaitReason::QueueFull { used: 4, slots: 4, .. })),
        "{blocked:?}"
    );
}

#[test]
fn a_full_queue_deadlocks_with_a_diagnostic() {
    let (func, sources, e) = deadlock_of(FLOOD, "flood", "2", &[2, 1024]);
    assert_every_queue_full(&e);
    let text = sim::render_sim_error(&func, &sources, &e, ColorMode::Never);
    compare_or_bless(&repo_root().join("tests/sim/deadlock-queue-full.stderr"), &text)
        .unwrap_or_else(|d| panic!("{d}"));
}

/// `pe.ipcq.n_slots_across_sips` gives queues whose ends are on different
/// SIPs their own slots, and only them: with 16 there, `flood` (16
/// messages of one slot each before any receive) runs through between two
/// SIPs, exact, while the same pair within a SIP still fills its 4 slots
/// and deadlocks, reported as 4 of 4; the topology summary names both.
#[test]
fn queues_across_sips_have_their_own_slots() {
    let y = replace_once(
        kernbench_runtime::topology::DEFAULT_YAML,
        "    n_slots: 4\n",
        "    n_slots: 4\n    n_slots_across_sips: 16\n",
    );
    let topo = Topology::parse("across.yaml", &y).expect("valid");
    assert_eq!((topo.spec.pe.ipcq.slots(false), topo.spec.pe.ipcq.slots(true)), (4, 16));
    let summary = kernbench_runtime::topology::summary_text(&topo);
    assert!(summary.contains("ipcq  4 slots (16 across SIPs) × 4 KiB"), "{summary}");
    let (func, _) = lower(FLOOD, "flood", &[]);
    let buf = i32s(&[2, 1024], |k| k as i32);
    let run = simulate(
        &topo,
        vec![pe(0, 0, 0), pe(1, 0, 0)],
        &func,
        vec![tensor("buf", buf.clone(), &["shard"])],
        None,
        false,
    )
    .unwrap_or_else(|e| panic!("across SIPs: {e:?}"));
    // Each rank stored its peer's row, 16 times.
    let want = i32s(&[2, 1024], |k| ((k + 1024) % 2048) as i32);
    assert_eq!(run.tensors[0].bytes(), want.bytes());
    let e = simulate(
        &topo,
        vec![pe(0, 0, 0), pe(0, 0, 1)],
        &func,
        vec![tensor("buf", buf, &["shard"])],
        None,
        false,
    )
    .err()
    .expect("a deadlock within a SIP");
    assert_every_queue_full(&e);
}

const ASYNC_FIRST: &str = "
@kernel
def async_first(buf: ptr[i32], N: constexpr = 8):
    offs = tl.arange(0, N)
    f = tl.recv_async(tl.PREV, [N], i32)
    x = tl.wait(f)
    tl.send(tl.NEXT, x)
    tl.store(buf + offs, x)
";

/// Every rank receives asynchronously, then waits, before sending: the
/// receives are blocked, and the issue units wait at the `tl.wait`, which
/// the diagnostic shows beside the receive.
#[test]
fn a_blocked_async_receive_shows_where_the_issue_unit_waits() {
    let (func, sources, e) = deadlock_of(ASYNC_FIRST, "async_first", "2", &[2, 8]);
    let SimError::Deadlock { ref blocked, .. } = e else {
        panic!("expected a deadlock, got {e:?}")
    };
    assert_eq!(blocked.len(), 2, "{blocked:?}");
    for b in blocked {
        assert!(matches!(b.reason, sim::WaitReason::NoData { .. }), "{b:?}");
        assert_eq!(func.inst(b.inst).op.mnemonic(), "recv_async", "{b:?}");
        let (w, full) = b.issue_at.expect("the issue unit waits elsewhere");
        assert_eq!(func.inst(w).op.mnemonic(), "wait", "{b:?}");
        assert_eq!(full, None, "{b:?}");
    }
    let text = sim::render_sim_error(&func, &sources, &e, ColorMode::Never);
    compare_or_bless(&repo_root().join("tests/sim/deadlock-recv-async.stderr"), &text)
        .unwrap_or_else(|d| panic!("{d}"));
}

/// More asynchronous receives than the receive engine's queue holds
/// before any send: each issue unit stops at the receive it cannot queue,
/// and the diagnostic shows it there with the full queue, beside the
/// first receive (which waits for a message never sent).
#[test]
fn a_full_engine_queue_shows_where_the_issue_unit_stopped() {
    let depth = Topology::default_machine().spec.pe.queue_depth.0 as usize;
    let mut src = String::from("\n@kernel\ndef deep(buf: ptr[i32]):\n    lanes = tl.arange(0, 4)\n");
    for k in 0..=depth {
        src += &format!("    f{k} = tl.recv_async(tl.PREV, [4], i32)\n");
    }
    src += "    tl.send(tl.NEXT, tl.load(buf + lanes))\n";
    for k in 0..=depth {
        src += &format!("    tl.store(buf + lanes, tl.wait(f{k}))\n");
    }
    let (func, sources, e) = deadlock_of(&src, "deep", "4", &[4, 4]);
    let SimError::Deadlock { ref blocked, .. } = e else {
        panic!("expected a deadlock, got {e:?}")
    };
    assert_eq!(blocked.len(), 4, "{blocked:?}");
    for b in blocked {
        assert!(matches!(b.reason, sim::WaitReason::NoData { .. }), "{b:?}");
        let (w, full) = b.issue_at.expect("the issue unit waits elsewhere");
        assert_eq!(func.inst(w).op.mnemonic(), "recv_async", "{b:?}");
        assert_ne!(w, b.inst, "{b:?}");
        assert_eq!(full, Some((Engine::Recv, depth as u32)), "{b:?}");
    }
    let text = sim::render_sim_error(&func, &sources, &e, ColorMode::Never);
    compare_or_bless(&repo_root().join("tests/sim/deadlock-engine-queue-full.stderr"), &text)
        .unwrap_or_else(|d| panic!("{d}"));
}

const SPIN: &str = "
@kernel
def spin_or_wait(buf: ptr[i32], N: constexpr = 8):
    offs = tl.arange(0, N)
    if tl.rank() % 2 == 0:
        i = 0
        while i >= 0:
            i = i + 1 - 1
        tl.send(tl.NEXT, tl.load(buf + offs))
    else:
        tl.store(buf + offs, tl.recv(tl.PREV, [N], i32))
";

/// A kernel that never ends stops at the launch's time limit with where
/// each PE was: spinning, or waiting for a spinning rank. On two SIPs, so
/// that the windowed run and its threads stop there too.
#[test]
fn a_kernel_that_never_ends_stops_at_the_time_limit() {
    let topo = Topology::default_machine();
    let (func, sources) = lower(SPIN, "spin_or_wait", &[]);
    let pes = sim::select_pes(&topo, "0.0.0,0.0.1,1.0.0,1.0.1").unwrap();
    let limit_ps = 20_000_000;
    let mut rendered = Vec::new();
    for threads in [1, 2] {
        let mut launch = TestLaunch::new(
            &topo,
            pes.clone(),
            &func,
            vec![tensor("buf", i32s(&[4, 8], |k| k as i32), &["shard"])],
        );
        launch.threads = threads;
        launch.time_limit_ps = Some(limit_ps);
        let e = launch.run().err().expect("the time limit");
        let SimError::TimeLimit {
            limit_ps: l,
            ref running,
        } = e
        else {
            panic!("expected the time limit, got {e:?}")
        };
        assert_eq!(l, limit_ps);
        let reasons: Vec<(u32, sim::WaitReason)> = running.iter().map(|b| (b.rank, b.reason.clone())).collect();
        assert_eq!(
            reasons,
            vec![
                (0, sim::WaitReason::Other),
                (1, sim::WaitReason::NoData { from_rank: 0 }),
                (2, sim::WaitReason::Other),
                (3, sim::WaitReason::NoData { from_rank: 2 }),
            ],
            "{threads} threads"
        );
        rendered.push(sim::render_sim_error(&func, &sources, &e, ColorMode::Never));
    }
    assert_eq!(rendered[0], rendered[1], "threads change nothing");
    compare_or_bless(&repo_root().join("tests/sim/time-limit-spin.stderr"), &rendered[0])
        .unwrap_or_else(|d| panic!("{d}"));
}

const PASS_ON: &str = "
@kernel
def pass_on(buf: ptr[i32], N: constexpr = 1024):
    offs = tl.arange(0, N)
    tl.send(tl.NEXT, tl.load(buf + offs))
    tl.store(buf + offs, tl.recv(tl.PREV, [N], i32))
";

/// Stopped early (the loads still in HBM), each rank is counted once and
/// waits for its receive: its send, which waits for the load, is not
/// \"blocked on a full queue\" whose slots are all free. Later, each waits
/// at what its engines are doing.
#[test]
fn a_time_limit_names_each_rank_once_at_what_it_waits_for() {
    let topo = Topology::default_machine();
    let (func, sources) = lower(PASS_ON, "pass_on", &[]);
    let pes = sim::select_pes(&topo, "2").unwrap();
    let launch = |time_limit_ps: Option<u64>| {
        let mut launch = TestLaunch::new(
            &topo,
            pes.clone(),
            &func,
            vec![tensor("buf", i32s(&[2, 1024], |k| k as i32), &["shard"])],
        );
        launch.time_limit_ps = time_limit_ps;
        launch.run()
    };
    let run = |limit_ps: u64| launch(Some(limit_ps)).err().expect("the time limit");
    let e = run(50_000);
    let SimError::TimeLimit { ref running, .. } = e else {
        panic!("expected the time limit, got {e:?}")
    };
    let reasons: Vec<(u32, sim::WaitReason)> = running.iter().map(|b| (b.rank, b.reason.clone())).collect();
    assert_eq!(
        reasons,
        vec![
            (0, sim::WaitReason::NoData { from_rank: 1 }),
            (1, sim::WaitReason::NoData { from_rank: 0 }),
        ]
    );
    let text = sim::render_sim_error(&func, &sources, &e, ColorMode::Never);
    assert!(text.contains("time limit of 50 ns: 2 ranks still running"), "{text}");
    // The whole run, then a limit inside each rank's final store.
    let whole = launch(None).expect("it runs");
    let e = run(whole.report.elapsed_ps() - 1);
    let SimError::TimeLimit { ref running, .. } = e else {
        panic!("expected the time limit, got {e:?}")
    };
    let store = func
        .region(func.body)
        .insts
        .iter()
        .copied()
        .rfind(|&i| matches!(func.inst(i).op, kernbench_compiler::ir::Op::Store { .. }));
    assert!(store.is_some());
    assert!(running.iter().any(|b| Some(b.inst) == store), "{running:?}");
}

const SLOW_START: &str = "
@kernel
def slow_start(buf: ptr[i32], n: i32, N: constexpr = 16):
    offs = tl.arange(0, N)
    a = n + 1
    b = a * 3
    c = b - n
    d = c * c
    e = d + a
    tl.store(buf + offs, tl.recv(tl.PREV, [N], i32) + e)
    tl.send(tl.NEXT, tl.load(buf + offs))
";

/// A time limit reports where each PE was at the limit, not where its
/// issue unit (which runs ahead of the clock) got to later: at 1.5 ns
/// (a cycle per dispatch) every rank is in its scalar preamble, before
/// the receive it reaches some nanoseconds later.
#[test]
fn a_time_limit_reports_the_step_reached_by_then() {
    let topo = Topology::default_machine();
    let (func, _) = lower(SLOW_START, "slow_start", &[]);
    let pes = sim::select_pes(&topo, "2").unwrap();
    let mut launch = TestLaunch::new(
        &topo,
        pes,
        &func,
        vec![tensor("buf", i32s(&[2, 16], |k| k as i32), &["shard"]), scalar_i32(5)],
    );
    launch.time_limit_ps = Some(1_500);
    let e = launch.run().err().expect("the time limit");
    let SimError::TimeLimit { ref running, .. } = e else {
        panic!("expected the time limit, got {e:?}")
    };
    let body = &func.region(func.body).insts;
    let position = |i: kernbench_compiler::ir::Inst| body.iter().position(|&b| b == i);
    let recv = body
        .iter()
        .position(|&i| matches!(func.inst(i).op, kernbench_compiler::ir::Op::Recv { .. }))
        .expect("a receive");
    assert_eq!(running.len(), 2);
    for b in running {
        assert_eq!(b.reason, sim::WaitReason::Other, "{b:?}");
        let at = position(b.inst).expect("a body instruction");
        // Where its issue clock first reached the limit: the body's
        // instruction 3 (the constant 3, after the arange, the 1 and
        // n + 1), long before the receive (instruction 10); not the
        // receive, nor (the fallback when a PE is nowhere) instruction 0.
        assert_eq!((at, recv), (3, 10), "rank {} reported at instruction {at}", b.rank);
    }
    // A PE whose return is issued as the limit passes, its program not
    // ended, is at its return.
    let (func, _) = lower(
        "@kernel\ndef quick(n: i32):\n    a = n + 1\n    b = a * a\n",
        "quick",
        &[],
    );
    let pes = sim::select_pes(&topo, "1").unwrap();
    let launch = |time_limit_ps: Option<u64>| {
        let mut launch = TestLaunch::new(&topo, pes.clone(), &func, vec![scalar_i32(5)]);
        launch.time_limit_ps = time_limit_ps;
        launch.run()
    };
    let whole = launch(None).expect("it runs").report.elapsed_ps();
    let e = launch(Some(whole - 1)).err().expect("the time limit");
    let SimError::TimeLimit { ref running, .. } = e else {
        panic!("expected the time limit, got {e:?}")
    };
    let body = &func.region(func.body).insts;
    assert_eq!(running.len(), 1);
    assert_eq!(Some(running[0].inst), body.last().copied(), "{running:?}");
    assert!(matches!(
        func.inst(running[0].inst).op,
        kernbench_compiler::ir::Op::Return
    ));
}

const LEFT_BEHIND: &str = "
@kernel
def left_behind(x: ptr[i32], N: constexpr = 16):
    offs = tl.arange(0, N)
    if tl.rank() == 0:
        for k in range(3):
            tl.send(1, tl.load(x + offs) + k)
    elif tl.rank() == 1:
        tl.store(x + offs, tl.recv(0, [N], i32))
        tl.send(2, tl.load(x + offs))
";

/// Messages a rank sent that its receiver never took are reported with
/// their count, bytes and first send, in the same PE as the receiver or
/// on another SIP (where the receiver's half of the queue holds them),
/// on one thread or two; a run that takes every message reports none.
#[test]
fn messages_never_received_are_reported_at_their_send() {
    let topo = Topology::default_machine();
    let (func, sources) = lower(LEFT_BEHIND, "left_behind", &[]);
    let mut rendered = Vec::new();
    for (pes, threads) in [
        ("0.0.0,0.0.1,0.0.2", 1),
        ("0.0.0,1.0.0,0.0.2", 1),
        ("0.0.0,1.0.0,0.0.2", 2),
    ] {
        let mut launch = TestLaunch::new(
            &topo,
            sim::select_pes(&topo, pes).unwrap(),
            &func,
            vec![tensor("x", i32s(&[3, 16], |k| k as i32), &["shard"])],
        );
        launch.threads = threads;
        let run = launch.run().unwrap_or_else(|e| panic!("{e:?}"));
        let got: Vec<(u32, u32, u64, u64)> = run
            .report
            .unreceived
            .iter()
            .map(|u| (u.from_rank, u.to_rank, u.messages, u.bytes))
            .collect();
        assert_eq!(
            got,
            vec![(0, 1, 2, 2 * 64), (1, 2, 1, 64)],
            "{pes} on {threads} threads"
        );
        // Rank 1 received the first message: rank 0's row, plus 0.
        assert_eq!(elem::to_i64(DType::I32, run.tensors[0].get_bits(16 + 5)), 5);
        rendered.push(sim::render_unreceived(
            &func,
            &sources,
            &run.report.unreceived,
            false,
            ColorMode::Never,
        ));
        assert_eq!(
            sim::summary_json(&run.report)["unreceived"][0]["messages"].as_u64(),
            Some(2)
        );
    }
    assert_eq!(rendered[1], rendered[2], "threads change nothing");
    compare_or_bless(&repo_root().join("tests/sim/unreceived.stderr"), &rendered[0]).unwrap_or_else(|d| panic!("{d}"));
    // The ring takes everything it is sent.
    let (ring, _) = lower(DEADLOCK_FREE_RING, "ring", &[]);
    let run = TestLaunch::new(
        &topo,
        sim::select_pes(&topo, "8").unwrap(),
        &ring,
        vec![tensor("buf", i32s(&[8, 64], |k| k as i32), &["shard"])],
    )
    .run()
    .unwrap_or_else(|e| panic!("{e:?}"));
    assert!(run.report.unreceived.is_empty(), "{:?}", run.report.unreceived);
}

/// A limit the launch stays under changes nothing; one it passes stops it.
#[test]
fn a_time_limit_changes_nothing_until_it_is_reached() {
    let topo = Topology::default_machine();
    let (func, _) = lower(DEADLOCK_FREE_RING, "ring", &[]);
    let pes = sim::select_pes(&topo, "8").unwrap();
    let run = |limit: Option<u64>| {
        let mut launch = TestLaunch::new(
            &topo,
            pes.clone(),
            &func,
            vec![tensor("buf", i32s(&[8, 64], |k| k as i32), &["shard"])],
        );
        launch.time_limit_ps = limit;
        launch.run()
    };
    let free = run(None).expect("no limit");
    let elapsed = free.report.elapsed_ps();
    let under = run(Some(elapsed + 1)).expect("just under the limit");
    assert_eq!(under.report.elapsed_ps(), elapsed);
    assert_eq!(under.report.events, free.report.events);
    assert_eq!(under.tensors[0].bytes(), free.tensors[0].bytes());
    let e = run(Some(elapsed / 2)).err().expect("past the limit");
    assert!(matches!(e, SimError::TimeLimit { .. }), "{e:?}");
}

const DEADLOCK_FREE_RING: &str = "
@kernel
def ring(buf: ptr[i32], N: constexpr = 64):
    offs = tl.arange(0, N)
    tl.send(tl.NEXT, tl.load(buf + offs))
    tl.store(buf + offs, tl.recv(tl.PREV, [N], i32))
";

const RETYPE: &str = "
@kernel
def retype(buf: ptr[i32], out: ptr[i32], AS_FLOAT: constexpr = 0):
    offs = tl.arange(0, 64)
    v = tl.reshape(tl.load(buf + offs), [8, 8])
    if AS_FLOAT == 1:
        tl.send(tl.NEXT, v.to(f32))
    elif AS_FLOAT == 2:
        tl.send(tl.NEXT, tl.load(buf + tl.arange(0, 32)))
    else:
        tl.send(tl.NEXT, v)
    tl.store(out + offs, tl.recv(tl.PREV, [64], i32))
";

/// A message may arrive in another shape but not as another element type
/// (f32 bits received as i32 were silently reinterpreted), nor in another
/// number of bytes.
#[test]
fn a_receive_of_another_element_type_is_an_error() {
    let topo = Topology::default_machine();
    let pes = sim::select_pes(&topo, "2").unwrap();
    let args = || {
        vec![
            tensor("buf", i32s(&[2, 64], |k| k as i32), &["shard"]),
            tensor("out", i32s(&[2, 64], |_| 0), &["shard"]),
        ]
    };
    let (func, _) = lower(RETYPE, "retype", &[]);
    let run = TestLaunch::new(&topo, pes.clone(), &func, args())
        .run()
        .expect("a reshape is fine");
    let want = i32s(&[2, 64], |k| ((k + 64) % 128) as i32);
    assert_eq!(run.tensors[1].bytes(), want.bytes());

    let (func, sources) = lower(RETYPE, "retype", &[("AS_FLOAT", Konst::Int(1))]);
    let e = TestLaunch::new(&topo, pes, &func, args())
        .run()
        .err()
        .expect("f32 received as i32");
    let text = sim::render_sim_error(&func, &sources, &e, ColorMode::Never);
    assert!(
        text.contains(
            "this receive expects i32 elements (block[i32, 64]) but rank 0 sent f32 elements (block[f32, 8, 8])"
        ),
        "{text}"
    );
    assert!(text.contains("case.tl:12:"), "{text}");
    // The same element type in fewer bytes is no such block either.
    let (func, sources) = lower(RETYPE, "retype", &[("AS_FLOAT", Konst::Int(2))]);
    let e = TestLaunch::new(&topo, sim::select_pes(&topo, "2").unwrap(), &func, args())
        .run()
        .err()
        .expect("128 bytes received as 256");
    let text = sim::render_sim_error(&func, &sources, &e, ColorMode::Never);
    assert!(
        text.contains("this receive expects 256 bytes (block[i32, 64]) but rank 0 sent 128 bytes"),
        "{text}"
    );
}

/// A run raises `Launch::progress_ps` to the simulated time it has reached
/// every `PROGRESS_EVERY_EVENTS` events (what `tlc run`'s spinner shows):
/// after a run of many events, over two SIPs on two threads and on one, it
/// is past zero and within the run; a run of fewer events reports nothing.
#[test]
fn a_run_reports_the_simulated_time_it_has_reached() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let topo = Topology::default_machine();
    let (func, _) = kernbench_tests::exec::lower_path(
        &repo_root().join("stdlib/ccl/ring_allreduce.tl"),
        "ring_allreduce",
        &[("T", Konst::DType(DType::I32))],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for (pes, n_elem, threads) in [("all", 32768usize, 2usize), ("all", 32768, 1), ("4", 64, 1)] {
        let pes = sim::select_pes(&topo, pes).expect("enough PEs");
        let world = pes.len();
        let reached = AtomicU64::new(0);
        let mut launch = TestLaunch::new(
            &topo,
            pes,
            &func,
            vec![
                tensor("buf", i32s(&[world, n_elem], |k| k as i32), &["shard"]),
                scalar_i32(n_elem as i64),
            ],
        );
        launch.threads = threads;
        launch.progress_ps = Some(&reached);
        let run = launch.run().expect("runs");
        let (r, events) = (&run.report, run.report.events);
        let got = reached.load(Ordering::Relaxed);
        if events >= kernbench_runtime::sim::PROGRESS_EVERY_EVENTS {
            assert!(
                got > 0 && got <= r.end_ps - r.start_ps,
                "{world} PEs, {threads} thread(s), {events} events: reached {got} ps of {} ps",
                r.end_ps - r.start_ps
            );
        } else {
            assert_eq!(got, 0, "{world} PEs: {events} events");
        }
    }
}

/// A run stopped by its time limit reports up to the stop: a transfer
/// still running then counts its time, bytes and trace slice only until
/// the stop (a 512 KiB load cut after 500 ns had counted all its bytes, at
/// five times the HBM's peak, and 514 % DMA busy).
#[test]
fn a_time_limit_cuts_the_report_at_the_stop() {
    use kernbench_runtime::sim::{Communicator, Launch, Machine};
    let topo = Topology::default_machine();
    let src = "
@kernel
def big(x: ptr[f32], out: ptr[f32], N: constexpr = 131072):
    offs = tl.arange(0, N)
    tl.store(out + offs, tl.load(x + offs))
";
    let (func, _) = lower(src, "big", &[]);
    let run = |limit_ps: Option<u64>| {
        let comm = Communicator::new(vec![pe(0, 0, 0)]);
        let mut machine = Machine::new(&topo);
        let args = vec![
            tensor("x", random_tensor(DType::F32, &[131072], 3), &[]),
            tensor("out", Tensor::zeros(Elem::Num(DType::F32), &[131072]), &[]),
        ];
        let (rank_args, _) = sim::place::place_args(&mut machine, &comm, args).expect("placed");
        let mut launch = Launch::new(&func, &comm, rank_args);
        launch.trace = true;
        launch.time_limit_ps = limit_ps;
        let mut dp = kernbench_compiler::datapath::jit::Jit::new();
        machine.run_partial(&launch, &mut dp)
    };
    let whole = run(None).expect("runs to the end");
    let hbm_bytes = |r: &sim::Report| -> u64 {
        r.links
            .iter()
            .filter(|l| matches!(l.id, sim::LinkId::HbmChannel { .. }))
            .map(|l| l.bytes)
            .sum()
    };
    assert_eq!(hbm_bytes(&whole), 2 * 524288, "the load and the store, whole");
    let limit = 500_000;
    let Err((SimError::TimeLimit { .. }, Some(cut))) = run(Some(limit)) else {
        panic!("stopped by the time limit with a partial report")
    };
    let stop = cut.start_ps + limit;
    assert_eq!(cut.end_ps, stop);
    let elapsed = cut.elapsed_ps();
    for p in &cut.pes {
        for (e, busy) in p.busy_ps.iter().enumerate() {
            assert!(*busy <= elapsed, "engine {e}: busy {busy} ps in a {elapsed} ps run");
        }
    }
    for l in &cut.links {
        assert!(
            l.busy_ps <= elapsed,
            "{:?}: busy {} ps in {elapsed} ps",
            l.id,
            l.busy_ps
        );
    }
    let moved = hbm_bytes(&cut);
    assert!(
        moved > 0 && moved < 524288,
        "part of the load by the stop: {moved} bytes"
    );
    assert!(cut
        .slices
        .iter()
        .all(|s| s.end_ps <= stop && s.done_ps <= stop && s.start_ps < stop));
    assert!(cut.link_intervals.iter().all(|&(_, a, b)| a < stop && b <= stop));
    let dma = cut.pes[0].busy_ps[Engine::Dma.index()];
    assert!(dma > 0, "the load was running");
}

#[test]
fn same_inputs_give_same_bits_and_times() {
    let topo = Topology::default_machine();
    let a = ring_exact(&topo, 16, 5000, 128, false, &["shard"]);
    let b = ring_exact(&topo, 16, 5000, 128, false, &["shard"]);
    assert_eq!(a.tensors, b.tensors);
    assert_eq!(a.report.end_ps, b.report.end_ps);
    assert_eq!(a.report.events, b.report.events);
    let busy = |r: &SimRun| r.report.pes.iter().map(|p| p.busy_ps).collect::<Vec<_>>();
    assert_eq!(busy(&a), busy(&b));
    let links = |r: &SimRun| {
        r.report
            .links
            .iter()
            .map(|l| (l.id, l.busy_ps, l.bytes))
            .collect::<Vec<_>>()
    };
    assert_eq!(links(&a), links(&b));
}

/// `tl.gemm`'s time is its pipeline's closed form, and the pipeline holds
/// the PE's DMA and MATH engines too: they are busy for their stages'
/// work, it starts once the load issued before it has left the DMA
/// engine, and the store issued after it once it has drained.
#[test]
fn tl_gemm_follows_its_pipeline_closed_form() {
    let topo = Topology::default_machine();
    let src = "
@kernel
def g(a: ptr[f16], b: ptr[f16], c: ptr[f32], M: i32, N: i32, K: i32, x: ptr[f32], y: ptr[f32]):
    offs = tl.arange(0, 256)
    v = tl.load(x + offs)
    tl.gemm(a, b, c, M, N, K)
    tl.store(y + offs, v)
";
    let (func, _) = lower(src, "g", &[]);
    let (m, n, k) = (128usize, 128usize, 128usize);
    let a = random_tensor(DType::F16, &[m, k], 11);
    let b = random_tensor(DType::F16, &[k, n], 12);
    let run = simulate(
        &topo,
        vec![pe(0, 0, 0)],
        &func,
        vec![
            tensor("a", a.clone(), &[]),
            tensor("b", b.clone(), &[]),
            tensor("c", Tensor::zeros(Elem::Num(DType::F32), &[m, n]), &[]),
            scalar_i32(m as i64),
            scalar_i32(n as i64),
            scalar_i32(k as i64),
            tensor("x", random_tensor(DType::F32, &[256], 13), &[]),
            tensor("y", Tensor::zeros(Elem::Num(DType::F32), &[256]), &[]),
        ],
        None,
        true,
    )
    .expect("runs");
    // Numbers: c = a @ b accumulated in f32.
    let c = &run.tensors[2];
    for (i, j) in [(0, 0), (5, 77), (127, 127), (64, 3)] {
        let want: f32 = (0..k)
            .map(|q| elem::to_f32(DType::F16, a.get_bits(i * k + q)) * elem::to_f32(DType::F16, b.get_bits(q * n + j)))
            .sum();
        let got = elem::to_f32(DType::F32, c.get_bits(i * n + j));
        assert!(
            (got - want).abs() <= 1e-3 * want.abs().max(1.0),
            "c[{i}][{j}] = {got}, want {want}"
        );
    }
    // Time: every operand in the PE's own HBM slice (all pseudo-channels).
    let s = &topo.spec;
    let g = &s.pe.gemm;
    let (tm, tn, tk) = (g.tile_m.0 as f64, g.tile_n.0 as f64, g.tile_k.0 as f64);
    let hc = &s.pe.hbm_controller;
    let hbm_bw = hc.pseudo_channels.0 as f64 * hc.channel_bandwidth_bytes_per_ns.0 * hc.efficiency.0;
    let k_steps = (k as f64 / tk).ceil();
    let tiles = (m as f64 / tm).ceil() * (n as f64 / tn).ceil();
    let dma_in = k_steps * (tm * tk * 2.0 + tk * tn * 2.0) / hbm_bw;
    let gemm = k_steps * g.cycles_per_tile["f16"].0 as f64 / s.clock_ghz.0;
    let math = (tm * tn / s.pe.math.lanes.0 as f64).ceil() * s.pe.math.op_cycles["default"].0 as f64 / s.clock_ghz.0;
    let wb = tm * tn * 4.0 / hbm_bw;
    let latency = 2.0 * hc.latency_ns.0 + g.pipeline_latency_cycles.0 as f64 / s.clock_ghz.0;
    let slowest = dma_in.max(gemm).max(math).max(wb);
    let want = ps(s.pe.dma.setup_cycles.0 as f64 / s.clock_ghz.0
        + latency
        + dma_in
        + gemm
        + math
        + wb
        + (tiles - 1.0) * slowest);
    let on = |engine: Engine| {
        let found: Vec<&sim::Slice> = run
            .report
            .slices
            .iter()
            .filter(|s| s.engine == engine && func.inst(s.inst).op.mnemonic() == "gemm")
            .collect();
        assert_eq!(found.len(), 1, "one tl.gemm slice on {engine:?}");
        found[0]
    };
    let sl = on(Engine::Gemm);
    let got = (sl.done_ps - sl.start_ps) as f64;
    assert!(
        rel(got, want) < 1e-3,
        "tl.gemm took {got} ps, pipeline closed form {want} ps"
    );
    // The DMA and MATH engines are held over the same span.
    for engine in [Engine::Dma, Engine::Math] {
        let held = on(engine);
        assert_eq!((held.start_ps, held.end_ps), (sl.start_ps, sl.end_ps), "{engine:?}");
    }
    let load = slice_of(&run, &func, "load");
    let store = slice_of(&run, &func, "store");
    assert!(
        sl.start_ps >= load.end_ps,
        "tl.gemm starts at {} ps, while the load issued before it holds the DMA engine (until {} ps)",
        sl.start_ps,
        load.end_ps
    );
    assert!(
        store.start_ps >= sl.end_ps,
        "the store starts at {} ps, before tl.gemm drains at {} ps",
        store.start_ps,
        sl.end_ps
    );
    // Busy time is the stages' work, not the span: every tile's DMA_IN and
    // DMA_WB (and the load and the store) on DMA, its epilogue on MATH.
    let busy = &run.report.pes[0].busy_ps;
    let dma_want = ps(tiles * (dma_in + wb)) + ((load.end_ps - load.start_ps) + (store.end_ps - store.start_ps)) as f64;
    let dma_got = busy[Engine::Dma.index()] as f64;
    assert!(
        rel(dma_got, dma_want) < 1e-3,
        "DMA busy {dma_got} ps, want {dma_want} ps"
    );
    let math_got = busy[Engine::Math.index()] as f64;
    assert!(
        rel(math_got, ps(tiles * math)) < 1e-3,
        "MATH busy {math_got} ps, want {} ps",
        ps(tiles * math)
    );
    assert!(
        dma_got < (sl.end_ps - sl.start_ps) as f64,
        "busy counts work, not the held span"
    );
}

/// `tl.gemm` reads A and B when its input transfers start and writes C when
/// it ends (DESIGN §2: a load samples memory when its transfer starts, a
/// store is visible when it ends): another PE's store into A that lands
/// while the gemm streams does not change C; one that lands before it
/// starts does.
#[test]
fn tl_gemm_reads_its_operands_when_its_transfers_start() {
    let topo = Topology::default_machine();
    let src = "
@kernel
def g(a: ptr[f16], b: ptr[f16], c: ptr[f32], D: i32):
    if tl.rank() == 0:
        for i in range(D):
            pass
        tl.gemm(a, b, c, 32, 64, 32)
    else:
        offs = tl.arange(0, 1024)
        tl.store(a + offs, tl.full((1024,), 0.0, tl.float16))
";
    let (func, _) = lower(src, "g", &[]);
    let (m, n, k) = (32usize, 64usize, 32usize);
    let a = random_tensor(DType::F16, &[m, k], 21);
    let b = random_tensor(DType::F16, &[k, n], 22);
    let product: Vec<f32> = (0..m * n)
        .map(|ij| {
            let (i, j) = (ij / n, ij % n);
            (0..k)
                .map(|q| {
                    elem::to_f32(DType::F16, a.get_bits(i * k + q)) * elem::to_f32(DType::F16, b.get_bits(q * n + j))
                })
                .sum()
        })
        .collect();
    let (mut before, mut during) = (0, 0);
    for delay in (0..=400).step_by(25) {
        let run = simulate(
            &topo,
            vec![pe(0, 0, 0), pe(0, 0, 1)],
            &func,
            vec![
                tensor("a", a.clone(), &[]),
                tensor("b", b.clone(), &[]),
                tensor("c", Tensor::zeros(Elem::Num(DType::F32), &[m, n]), &[]),
                scalar_i32(delay),
            ],
            None,
            true,
        )
        .expect("runs");
        let find = |rank: u32, engine: Engine, mnemonic: &str| {
            run.report
                .slices
                .iter()
                .find(|s| s.rank == rank && s.engine == engine && func.inst(s.inst).op.mnemonic() == mnemonic)
                .cloned()
                .unwrap_or_else(|| panic!("no `{mnemonic}` slice on rank {rank}"))
        };
        let gemm = find(0, Engine::Gemm, "gemm");
        let store = find(1, Engine::Dma, "store");
        let c = &run.tensors[2];
        let got = |ij: usize| elem::to_f32(DType::F32, c.get_bits(ij));
        // The store lands when its slice is done.
        if store.done_ps <= gemm.start_ps {
            before += 1;
            assert!(
                (0..m * n).all(|ij| got(ij) == 0.0),
                "D = {delay}: the store landed at {} ps, before tl.gemm started at {} ps, so C is A's zeros times B",
                store.done_ps,
                gemm.start_ps
            );
        } else if store.done_ps > gemm.start_ps + ps(50.0) as u64 && store.done_ps < gemm.done_ps {
            during += 1;
            for (ij, want) in product.iter().enumerate() {
                assert!(
                    (got(ij) - want).abs() <= 1e-3 * want.abs().max(1.0),
                    "D = {delay}: the store landed at {} ps, inside tl.gemm's [{}, {}) ps: c[{ij}] = {}, want {want} \
                     (A as it was when the gemm's transfers started)",
                    store.done_ps,
                    gemm.start_ps,
                    gemm.done_ps,
                    got(ij)
                );
            }
        }
    }
    assert!(
        before > 0 && during > 0,
        "the delays cover both cases: {before} before, {during} during"
    );
}

const ASYNC: &str = "
@kernel
def two(buf: ptr[i32], out: ptr[i32], N: constexpr = 256):
    offs = tl.arange(0, N)
    if tl.rank() == 0:
        tl.send(1, tl.load(buf + offs))
        tl.send(1, tl.load(buf + N + offs))
    else:
        first = tl.recv_async(0, [N], i32)
        second = tl.recv_async(0, [N], i32)
        tl.store(out + offs, tl.wait(second))
        tl.store(out + N + offs, tl.wait(first))
";

#[test]
fn recv_async_matches_messages_in_order_whatever_the_wait_order() {
    let topo = Topology::default_machine();
    let (func, _) = lower(ASYNC, "two", &[]);
    let run = simulate(
        &topo,
        vec![pe(0, 0, 0), pe(0, 3, 5)],
        &func,
        vec![
            tensor("buf", i32s(&[512], |k| k as i32), &[]),
            tensor("out", Tensor::zeros(Elem::Num(DType::I32), &[2, 512]), &["shard"]),
        ],
        None,
        false,
    )
    .expect("runs");
    let out = &run.tensors[1];
    for i in 0..256 {
        assert_eq!(out.get_bits(512 + i), (256 + i) as u64, "second message first");
        assert_eq!(out.get_bits(512 + 256 + i), i as u64, "then the first");
    }
}

/// A future of shape `()` gives a scalar: used as a scalar operand (an
/// address offset, a stored value, arithmetic) it is the value sent, on
/// either data path.
#[test]
fn scalar_recv_async_gives_the_value_sent() {
    let topo = Topology::default_machine();
    let src = "
@kernel
def ring(out: ptr[i32], outf: ptr[f32]):
    r = tl.rank()
    fi = tl.recv_async(tl.PREV, (), i32)
    ff = tl.recv_async(tl.PREV, (), tl.float32)
    tl.send(tl.NEXT, r * 10 + 5)
    tl.send(tl.NEXT, r.to(tl.float32) + 0.5)
    v = tl.wait(fi)
    tl.store(out + r, v + 1)
    tl.store(outf + r, tl.wait(ff) * 2.0)
";
    let (func, _) = lower(src, "ring", &[]);
    for interp in [false, true] {
        let mut launch = TestLaunch::new(
            &topo,
            (0..4).map(|k| pe(0, 0, k)).collect(),
            &func,
            vec![
                tensor("out", Tensor::zeros(Elem::Num(DType::I32), &[4]), &[]),
                tensor("outf", Tensor::zeros(Elem::Num(DType::F32), &[4]), &[]),
            ],
        );
        if interp {
            launch.data_path = Box::new(kernbench_compiler::datapath::interp::Interpreter);
        }
        let run = launch.run().expect("runs");
        for r in 0..4u64 {
            let prev = (r + 3) % 4;
            assert_eq!(
                elem::to_i64(DType::I32, run.tensors[0].get_bits(r as usize)),
                (prev * 10 + 6) as i64,
                "rank {r}, interp {interp}"
            );
            assert_eq!(
                elem::to_f32(DType::F32, run.tensors[1].get_bits(r as usize)),
                (prev as f32 + 0.5) * 2.0,
                "rank {r}, interp {interp}"
            );
        }
    }
}

const BARRIER: &str = "
@kernel
def b(buf: ptr[f32], flag: ptr[f32], out: ptr[f32], N: constexpr = 4096):
    offs = tl.arange(0, N)
    if tl.rank() == 0:
        x = tl.load(buf + offs)
        tl.store(flag + offs, tl.exp(tl.exp(tl.exp(x))))
    tl.barrier()
    tl.store(out + offs, tl.load(flag + offs))
";

#[test]
fn barrier_orders_memory_and_time() {
    let topo = Topology::default_machine();
    let (func, _) = lower(BARRIER, "b", &[]);
    let x = random_tensor(DType::F32, &[4096], 13);
    let run = simulate(
        &topo,
        sim::select_pes(&topo, "cube").unwrap(),
        &func,
        vec![
            tensor("buf", x.clone(), &[]),
            tensor("flag", Tensor::zeros(Elem::Num(DType::F32), &[4096]), &[]),
            tensor("out", Tensor::zeros(Elem::Num(DType::F32), &[8, 4096]), &["shard"]),
        ],
        None,
        true,
    )
    .expect("runs");
    // Every rank reads what rank 0 stored before the barrier.
    let flag = &run.tensors[1];
    let out = &run.tensors[2];
    for r in 0..8 {
        for i in (0..4096).step_by(97) {
            assert_eq!(out.get_bits(r * 4096 + i), flag.get_bits(i), "rank {r} element {i}");
        }
    }
    let store0 = run
        .report
        .slices
        .iter()
        .filter(|s| s.rank == 0 && func.inst(s.inst).op.mnemonic() == "store")
        .map(|s| s.done_ps)
        .min()
        .unwrap();
    for r in 1..8 {
        let load = run
            .report
            .slices
            .iter()
            .find(|s| s.rank == r && func.inst(s.inst).op.mnemonic() == "load")
            .unwrap();
        assert!(load.start_ps > store0, "rank {r} loads after rank 0's store completed");
    }
}

const LATE_BARRIER: &str = "
@kernel
def late(buf: ptr[f32], out: ptr[f32], LATE: constexpr = 0, N: constexpr = 4096):
    offs = tl.arange(0, N)
    if tl.rank() == LATE:
        tl.store(out + offs, tl.exp(tl.exp(tl.exp(tl.load(buf + offs)))))
    tl.barrier()
    tl.store(out + offs, tl.load(buf + offs))
";

/// Rounds of a dissemination barrier: ceil(log2 n).
fn rounds_for(n: usize) -> usize {
    let mut r = 0;
    while (1usize << r) < n {
        r += 1;
    }
    r
}

#[test]
fn barrier_tokens_travel_over_ipcq_queues() {
    let topo = Topology::default_machine();
    let cube: Vec<PeCoord> = (0..8).map(|k| pe(0, 0, k)).collect();
    let spread = vec![pe(0, 0, 0), pe(0, 0, 3), pe(0, 1, 2), pe(0, 5, 7), pe(1, 0, 1)];
    for (pes, late) in [
        (vec![pe(0, 0, 0)], 0),
        (vec![pe(0, 0, 0), pe(0, 0, 2)], 1),
        (spread, 3),
        (cube, 5),
    ] {
        let n = pes.len();
        let (func, _) = lower(LATE_BARRIER, "late", &[("LATE", Konst::Int(late))]);
        let run = simulate(
            &topo,
            pes,
            &func,
            vec![
                tensor("buf", random_tensor(DType::F32, &[4096], 3), &["replicate"]),
                tensor("out", Tensor::zeros(Elem::Num(DType::F32), &[n, 4096]), &["shard"]),
            ],
            None,
            true,
        )
        .expect("runs");
        // Every rank's token sends (the barrier's slices on the send
        // engine), in order.
        let tokens: Vec<Vec<&sim::Slice>> = (0..n as u32)
            .map(|r| {
                let mut v: Vec<&sim::Slice> = run
                    .report
                    .slices
                    .iter()
                    .filter(|s| s.rank == r && s.engine == Engine::Send)
                    .filter(|s| func.inst(s.inst).op.mnemonic() == "barrier")
                    .collect();
                v.sort_by_key(|s| s.start_ps);
                v
            })
            .collect();
        let rounds = rounds_for(n);
        for (r, t) in tokens.iter().enumerate() {
            assert_eq!(t.len(), rounds, "{n} ranks: rank {r} sends one token per round");
        }
        // Round k starts once the token of round k - 1 from rank r - 2^(k-1)
        // has arrived.
        for r in 0..n {
            for k in 1..rounds {
                let from = (r + n - (1 << (k - 1)) % n) % n;
                let arrived = tokens[from][k - 1].done_ps;
                assert!(
                    tokens[r][k].start_ps >= arrived,
                    "{n} ranks: rank {r} round {k} starts before rank {from}'s token of round {} arrived",
                    k - 1
                );
            }
        }
        // Nobody leaves before the late rank has arrived (its first token),
        // nor before its own last token came in.
        let late_arrival = tokens[late as usize].first().map_or(0, |s| s.start_ps);
        for r in 0..n as u32 {
            let after = run
                .report
                .slices
                .iter()
                .filter(|s| s.rank == r && func.inst(s.inst).op.mnemonic() == "load")
                .map(|s| s.start_ps)
                .max()
                .expect("a load after the barrier");
            assert!(
                after >= late_arrival,
                "{n} ranks: rank {r} left before rank {late} arrived"
            );
        }
        if n == 2 {
            // One round between two corners of a cube: each token is a
            // message of one word, PE→router, a hop, router→PE, into the
            // receiver's TCM slots.
            let s = &topo.spec;
            let bytes = 8.0;
            let (link_bw, hop) = (
                s.cube.router.link_bandwidth_bytes_per_ns.0,
                s.cube.router.hop_latency_ns.0,
            );
            let want = ps(3.0 * hop
                + s.pe.tcm.latency_ns.0
                + 3.0 * bytes / link_bw
                + bytes / s.pe.tcm.write_bandwidth_bytes_per_ns.0);
            for t in &tokens {
                let got = (t[0].done_ps - t[0].start_ps) as f64;
                assert!(rel(got, want) < 1e-3, "a token took {got} ps, closed form {want} ps");
            }
        }
    }
}

const BARRIER_THEN_RECV: &str = "
@kernel
def early(buf: ptr[i32], N: constexpr = 64):
    offs = tl.arange(0, N)
    f = tl.recv_async(tl.PREV, [N], i32)
    tl.barrier()
    tl.send(tl.NEXT, tl.load(buf + offs))
    tl.store(buf + offs, tl.wait(f))
";

#[test]
fn a_barrier_passes_receives_of_messages_sent_after_it() {
    // The tokens do not queue behind the pending receive on the receive
    // engine: its message is sent only after the barrier.
    let topo = Topology::default_machine();
    let (func, _) = lower(BARRIER_THEN_RECV, "early", &[]);
    let run = simulate(
        &topo,
        sim::select_pes(&topo, "4").unwrap(),
        &func,
        vec![tensor("buf", i32s(&[4, 64], |k| k as i32), &["shard"])],
        None,
        false,
    )
    .expect("runs");
    let out = &run.tensors[0];
    for r in 0..4 {
        for i in 0..64 {
            let from = (r + 3) % 4;
            assert_eq!(out.get_bits(r * 64 + i), (from * 64 + i) as u64, "rank {r} element {i}");
        }
    }
}

const SKIPPED_BARRIER: &str = "
@kernel
def skip():
    if tl.rank() != 3:
        tl.barrier()
";

#[test]
fn a_skipped_barrier_deadlocks_with_a_diagnostic() {
    let topo = Topology::default_machine();
    let (func, sources) = lower(SKIPPED_BARRIER, "skip", &[]);
    let e = simulate(&topo, sim::select_pes(&topo, "4").unwrap(), &func, vec![], None, false)
        .err()
        .expect("a deadlock");
    let SimError::Deadlock { ref blocked, .. } = e else {
        panic!("expected a deadlock, got {e:?}")
    };
    // Rank 0 waits for rank 3 in round 1; rank 1 hears from rank 0 and
    // then waits for rank 3 in round 2; rank 2 hears from rank 1 and waits
    // for rank 0, stuck in round 1.
    let mut got: Vec<(u32, sim::WaitReason)> = blocked.iter().map(|b| (b.rank, b.reason.clone())).collect();
    got.sort_by_key(|g| g.0);
    let at = |from_rank, round| sim::WaitReason::Barrier {
        from_rank,
        round,
        rounds: 2,
    };
    assert_eq!(got, vec![(0, at(3, 1)), (1, at(3, 2)), (2, at(0, 2))]);
    // Rank 3 skipped the barrier and finished: the ranks waiting for it
    // say so (rank 2 waits for rank 0, blocked too).
    let mut finished: Vec<(u32, bool)> = blocked.iter().map(|b| (b.rank, b.peer_finished)).collect();
    finished.sort();
    assert_eq!(finished, vec![(0, true), (1, true), (2, false)]);
    let text = sim::render_sim_error(&func, &sources, &e, ColorMode::Never);
    compare_or_bless(&repo_root().join("tests/sim/deadlock-barrier.stderr"), &text).unwrap_or_else(|d| panic!("{d}"));
}

#[test]
fn polling_senders_notice_credits_later_than_sleeping_ones() {
    // Messages of four slots: the queue holds one, so every send after the
    // first waits for credits and must notice them coming back.
    let src = "
@kernel
def flood(buf: ptr[i32], N: constexpr = 4096):
    offs = tl.arange(0, N)
    if tl.rank() == 0:
        for i in range(12):
            tl.send(1, tl.load(buf + offs))
    else:
        for i in range(12):
            tl.store(buf + offs, tl.recv(0, [N], i32))
";
    let (func, _) = lower(src, "flood", &[]);
    let time = |yaml: String| {
        let topo = Topology::parse("t.yaml", &yaml).expect("valid");
        let run = simulate(
            &topo,
            vec![pe(0, 0, 0), pe(0, 0, 1)],
            &func,
            vec![tensor("buf", i32s(&[2, 4096], |k| k as i32), &["shard", "tcm"])],
            None,
            false,
        )
        .expect("runs");
        run.report.elapsed_ps()
    };
    let base = kernbench_runtime::topology::DEFAULT_YAML.to_string();
    let sleep = time(base.clone());
    let poll = time(
        base.replace("backpressure: sleep", "backpressure: poll")
            .replace("poll_interval_ns: 50", "poll_interval_ns: 2000"),
    );
    // Eleven sends wait for credits; each notices them at its next poll.
    assert!(
        poll > sleep + 10 * 1_000_000,
        "polling every 2 us ({poll} ps) vs sleeping ({sleep} ps)"
    );
}

/// The TCM estimate follows structured liveness: a block defined in a
/// loop's body and used later in the same body lives only between the
/// two; one defined before the loop and used in it lives to the loop's
/// end; a loop's results exist once its body is done.
#[test]
fn live_blocks_are_counted_where_they_live() {
    let src = "
@kernel
def k(x: ptr[f32]):
    offs = tl.arange(0, 1024)
    p = x + offs
    acc = tl.zeros((1024,), dtype=f32)
    for _ in range(3):
        a = tl.load(p)
        acc = acc + a
    tl.store(p, acc)
";
    let (func, _) = lower(src, "k", &[]);
    // In program order: offs, the splat of x and p (address generation:
    // no TCM), zeros (4 KiB), the loop (its parameter acc, 4), a (4),
    // acc + a (4), the yield, the loop's result (4), the store. zeros
    // lives only to the loop's start, the result from the loop's end: the
    // peak is 12 KiB, the parameter + a + their sum in the body. Counting
    // zeros to the loop's end, or the result from its start, gives 16.
    assert_eq!(sim::peak_live_bytes(&func), 12 * 1024);
}

#[test]
fn live_blocks_that_exceed_the_tcm_are_an_error() {
    let topo = Topology::default_machine();
    let src = "
@kernel
def big(x: ptr[f32], N: constexpr = 524288):
    v = tl.load(x + tl.arange(0, N))
    tl.store(x + tl.arange(0, N), v * 2.0)
";
    let (func, sources) = lower(src, "big", &[]);
    let e = simulate(
        &topo,
        vec![pe(0, 0, 0)],
        &func,
        vec![tensor("x", random_tensor(DType::F32, &[524288], 1), &[])],
        None,
        false,
    )
    .err()
    .expect("too big for the TCM");
    match &e {
        SimError::TcmCapacity {
            kernel,
            need_bytes,
            have_bytes,
            ..
        } => {
            assert_eq!(kernel, "big");
            assert!(need_bytes > have_bytes && *have_bytes == topo.spec.pe.tcm.capacity_bytes.0);
        }
        other => panic!("expected a TCM error, got {other:?}"),
    }
    // It points at where the blocks peak.
    let text = sim::render_sim_error(&func, &sources, &e, ColorMode::Never);
    assert!(
        text.contains("┌─ case.tl:5:35\n") && text.contains("6291456 bytes of blocks are live in this `mul`"),
        "{text}"
    );
}

/// With the IPCQ in TCM every queue into a PE keeps its slots there: a PE
/// that receives from one rank fits, one that receives from three does not,
/// and the error counts the queues and points at the send or receive that
/// opened the queue that did not fit: a sender's `tl.send` when the senders
/// get there first, the receiver's `tl.recv_async` when it opens its
/// queues before the senders (which spin first) send.
#[test]
fn every_queue_into_a_pe_takes_its_slots_of_the_tcm() {
    // 4 slots of 128 KiB: one queue's half MiB fits the 1 MiB TCM, two do
    // not.
    let y = kernbench_runtime::topology::DEFAULT_YAML.replace("slot_size_bytes: 4096", "slot_size_bytes: 131072");
    let topo = Topology::parse("big-slots.yaml", &y).expect("valid variant");
    let src = "
@kernel
def gather(x: ptr[i32], N: constexpr = 64):
    offs = tl.arange(0, N)
    if tl.rank() == 0:
        for r in range(1, tl.world_size()):
            tl.store(x + offs, tl.recv(r, [N], i32))
    else:
        tl.send(0, tl.load(x + offs))

@kernel
def early(x: ptr[i32], N: constexpr = 64, SPIN: constexpr = 100):
    offs = tl.arange(0, N)
    if tl.rank() == 0:
        a = tl.recv_async(1, [N], i32)
        b = tl.recv_async(2, [N], i32)
        tl.store(x + offs, tl.wait(a) + tl.wait(b))
    else:
        acc = 0
        for i in range(SPIN):
            acc += i
        tl.send(0, tl.load(x + offs) + acc)
";
    let launch = |kernel: &str, world: usize| {
        let (func, sources) = lower(src, kernel, &[]);
        let pes = sim::select_pes(&topo, &world.to_string()).expect("enough PEs");
        let run = simulate(
            &topo,
            pes,
            &func,
            vec![tensor("x", i32s(&[world, 64], |k| k as i32), &["shard"])],
            None,
            false,
        );
        (run, func, sources)
    };
    let two = launch("gather", 2).0.expect("one queue into rank 0 fits");
    assert_eq!(
        elem::to_i64(DType::I32, two.tensors[0].get_bits(5)),
        64 + 5,
        "rank 1's block in rank 0's row"
    );
    // (kernel, world, the line and column of the opening operation, the
    // rank that ran it). In `gather` ranks 1, 2 and 3 reach their sends at
    // the same time and events at equal times run in the order they were
    // created: the queue from rank 1 (which rank 0 also receives from
    // first) opens first, rank 2's send opens the second.
    for (kernel, world, at, rank) in [("gather", 4, "case.tl:9:9", 2), ("early", 3, "case.tl:16:13", 0)] {
        let (run, func, sources) = launch(kernel, world);
        let err = run.err().expect("a second queue into rank 0 does not fit");
        match &err {
            SimError::TcmCapacity {
                kernel: k,
                need_bytes,
                have_bytes,
                queues,
                ..
            } => {
                assert_eq!(k, kernel);
                assert_eq!(*queues, 2, "the second queue is the first that does not fit");
                assert_eq!(*have_bytes, topo.spec.pe.tcm.capacity_bytes.0);
                assert!(
                    *need_bytes > *have_bytes && *need_bytes >= 2 * 4 * 131072,
                    "{need_bytes}"
                );
            }
            other => panic!("expected a TCM error, got {other:?}"),
        }
        let text = sim::render_sim_error(&func, &sources, &err, ColorMode::Never);
        assert!(
            text.contains("bytes of TCM on (sip 0, cube 0, pe 0)") && text.contains(&format!("┌─ {at}\n")),
            "{kernel}: the error points at {at}:\n{text}"
        );
        assert!(
            text.contains(&format!("rank {rank} ")) && text.contains("opens queue 2 into (sip 0, cube 0, pe 0)"),
            "{kernel}: rank {rank} opens the queue:\n{text}"
        );
    }
}

#[test]
fn bad_accesses_are_errors_at_the_source_line() {
    let topo = Topology::default_machine();
    let src = "
@kernel
def oob(x: ptr[f32], N: constexpr = 64):
    v = tl.load(x + tl.arange(0, N) + 8)
    tl.store(x + tl.arange(0, N), v)
";
    let (func, sources) = lower(src, "oob", &[]);
    let e = simulate(
        &topo,
        vec![pe(0, 0, 0)],
        &func,
        vec![tensor("x", random_tensor(DType::F32, &[64], 1), &[])],
        None,
        false,
    )
    .err()
    .expect("out of bounds");
    let text = sim::render_sim_error(&func, &sources, &e, ColorMode::Never);
    assert!(
        text.contains("outside every allocation")
            && text.contains("case.tl:4:9")
            && text.contains("rank 0 (sip 0, cube 0, pe 0)"),
        "{text}"
    );
    // Another SIP's memory is out of a plain load's reach.
    let src = "
@kernel
def far(x: ptr[f32], y: ptr[f32], N: constexpr = 64):
    tl.store(y + tl.arange(0, N), tl.load(x + tl.arange(0, N)))
";
    let (func, sources) = lower(src, "far", &[]);
    let e = simulate(
        &topo,
        vec![pe(0, 0, 0), pe(1, 0, 0)],
        &func,
        vec![
            tensor("x", random_tensor(DType::F32, &[64], 1), &[]),
            tensor("y", Tensor::zeros(Elem::Num(DType::F32), &[128]), &["shard"]),
        ],
        None,
        false,
    )
    .err()
    .expect("cross-SIP load");
    let text = sim::render_sim_error(&func, &sources, &e, ColorMode::Never);
    assert!(text.contains("on another SIP") && text.contains("rank 1"), "{text}");
    // A PE's TCM is its own: `x` in rank 0's TCM is out of rank 1's reach,
    // even in the same cube.
    let e = simulate(
        &topo,
        vec![pe(0, 0, 0), pe(0, 0, 1)],
        &func,
        vec![
            tensor("x", random_tensor(DType::F32, &[64], 1), &["tcm"]),
            tensor("y", Tensor::zeros(Elem::Num(DType::F32), &[128]), &["shard"]),
        ],
        None,
        false,
    )
    .err()
    .expect("a load from another PE's TCM");
    let text = sim::render_sim_error(&func, &sources, &e, ColorMode::Never);
    assert!(
        text.contains("in the TCM of (sip 0, cube 0, pe 0), which only that PE can access")
            && text.contains("rank 1")
            && text.contains("case.tl:4:"),
        "{text}"
    );
}

/// A rank of type `i64` or `u32` is taken whole: one past 2^32 is not
/// rank 1, and the `u32` 2^32 - 1 is not rank -1 (each is an error naming
/// the rank), for sends, receives, `tl.symm_at` and `tl.notify`; an `i64`
/// rank in range talks to that rank.
#[test]
fn wide_ranks_are_not_truncated() {
    let topo = Topology::default_machine();
    let src = "
@kernel
def k(buf: ptr[i32], out: ptr[i32], R: tl.int64, U: tl.uint32, WHAT: tl.constexpr):
    lanes = tl.arange(0, 4)
    if tl.rank() == 0:
        if WHAT == 0:
            tl.send(R, lanes + 7)
        elif WHAT == 1:
            tl.send(U, lanes + 7)
        elif WHAT == 2:
            tl.store(tl.symm_at(buf + lanes, R), lanes + 7)
        else:
            tl.notify(buf, R, 9)
    elif WHAT < 2:
        tl.store(out + lanes, tl.recv(0, [4], tl.int32))
";
    let run = |what: i64, r: i64, u: u32| {
        let (func, sources) = lower(src, "k", &[("WHAT", Konst::Int(what))]);
        let result = simulate(
            &topo,
            vec![pe(0, 0, 0), pe(0, 0, 1)],
            &func,
            vec![
                tensor("buf", Tensor::zeros(Elem::Num(DType::I32), &[2, 4]), &["shard"]),
                tensor("out", Tensor::zeros(Elem::Num(DType::I32), &[2, 4]), &["shard"]),
                LaunchArg::Scalar(r as u64),
                LaunchArg::Scalar(u64::from(u)),
            ],
            None,
            false,
        );
        result.map_err(|e| sim::render_sim_error(&func, &sources, &e, ColorMode::Never))
    };
    // In range: rank 1 receives the block.
    let ok = run(0, 1, 1).expect("an i64 rank of 1 is rank 1");
    assert_eq!(
        (0..4).map(|k| ok.tensors[1].get_bits(4 + k)).collect::<Vec<_>>(),
        vec![7, 8, 9, 10]
    );
    let wide = (1i64 << 32) + 1;
    for (what, r, u, said) in [
        (0, wide, 1, "rank 4294967297 is outside the communicator (world size 2)"),
        (
            1,
            1,
            u32::MAX,
            "rank 4294967295 is outside the communicator (world size 2)",
        ),
        (2, wide, 1, "rank 4294967297 is outside the communicator (world size 2)"),
        (3, wide, 1, "rank 4294967297 is outside the communicator (world size 2)"),
    ] {
        let text = run(what, r, u)
            .err()
            .unwrap_or_else(|| panic!("WHAT = {what}: an error"));
        assert!(
            text.contains(said) && text.contains("rank 0 (sip 0"),
            "WHAT = {what}: {text}"
        );
    }
}

const PUT_NOTIFY: &str = "
@kernel
def put(buf: ptr[i32], flag: ptr[i32], out: ptr[i32], N: constexpr = 512):
    offs = tl.arange(0, N)
    if tl.rank() == 0:
        # One-sided put into rank 1's copy of buf, then the signal.
        tl.store(tl.symm_at(buf + offs, 1), tl.load(buf + offs) * 2)
        tl.notify(flag, 1, 7)
    else:
        tl.wait_until(flag, 7)
        tl.store(out + offs, tl.load(buf + offs))
";

#[test]
fn one_sided_puts_are_ordered_by_notify_and_wait_until() {
    let topo = Topology::default_machine();
    let (func, _) = lower(PUT_NOTIFY, "put", &[]);
    // Across SIPs too: puts into symmetric memory may cross them.
    for pes in [vec![pe(0, 0, 0), pe(0, 7, 3)], vec![pe(0, 0, 0), pe(1, 2, 5)]] {
        let run = simulate(
            &topo,
            pes,
            &func,
            vec![
                tensor(
                    "buf",
                    i32s(&[2, 512], |k| if k < 512 { k as i32 } else { -1 }),
                    &["shard"],
                ),
                tensor("flag", Tensor::zeros(Elem::Num(DType::I32), &[2]), &["shard"]),
                tensor("out", Tensor::zeros(Elem::Num(DType::I32), &[2, 512]), &["shard"]),
            ],
            None,
            true,
        )
        .expect("runs");
        let out = &run.tensors[2];
        for i in 0..512 {
            assert_eq!(
                elem::to_i64(DType::I32, out.get_bits(512 + i)),
                2 * i as i64,
                "rank 1 saw the put"
            );
        }
        let notify = run
            .report
            .slices
            .iter()
            .find(|s| func.inst(s.inst).op.mnemonic() == "notify")
            .expect("notify");
        let put = run
            .report
            .slices
            .iter()
            .find(|s| s.rank == 0 && func.inst(s.inst).op.mnemonic() == "store")
            .expect("put");
        assert!(
            notify.start_ps >= put.done_ps,
            "the signal leaves after the put has landed"
        );
    }
    // Nobody sets the signal: a deadlock naming the wait, what the word
    // holds and what it waits for.
    let blocked_on_flag = |src: &str, name: &str, pes: Vec<PeCoord>| -> Vec<sim::Blocked> {
        let (func, _) = lower(src, name, &[]);
        let n = pes.len();
        let e = simulate(
            &topo,
            pes,
            &func,
            vec![tensor("flag", Tensor::zeros(Elem::Num(DType::I32), &[n]), &["shard"])],
            None,
            false,
        )
        .err()
        .expect("deadlock");
        let SimError::Deadlock { blocked, .. } = e else {
            panic!("{e:?}")
        };
        blocked
    };
    let src = "
@kernel
def never(flag: ptr[i32]):
    tl.wait_until(flag, 1)
";
    let blocked = blocked_on_flag(src, "never", vec![pe(0, 0, 0)]);
    assert_eq!(
        blocked[0].reason,
        sim::WaitReason::Signal {
            holds: Some(0),
            want: 1
        }
    );
    // Set, but to another value: the note says which.
    let src = "
@kernel
def other(flag: ptr[i32]):
    if tl.rank() == 0:
        tl.notify(flag, 1, 3)
    else:
        tl.wait_until(flag, 4)
";
    let blocked = blocked_on_flag(src, "other", vec![pe(0, 0, 0), pe(0, 5, 2)]);
    assert_eq!(
        (blocked.len(), blocked[0].rank, &blocked[0].reason),
        (
            1,
            1,
            &sim::WaitReason::Signal {
                holds: Some(3),
                want: 4
            }
        )
    );
}

/// A notify waits for every earlier memory operation of its PE to finish,
/// loads included: a load is settled when it samples memory, long before
/// its transfer ends, and the notify behind it must still wait for that
/// end.
#[test]
fn a_notify_waits_for_the_end_of_an_earlier_load() {
    let src = "
@kernel
def k(buf: ptr[i32], flag: ptr[i32], out: ptr[i32], N: constexpr = 4096):
    offs = tl.arange(0, N)
    if tl.rank() == 0:
        x = tl.load(buf + offs)
        tl.notify(flag, 1, 7)
        tl.store(out + offs, x)
    else:
        tl.wait_until(flag, 7)
";
    let topo = Topology::default_machine();
    let (func, _) = lower(src, "k", &[]);
    let run = simulate(
        &topo,
        vec![pe(0, 0, 0), pe(0, 0, 1)],
        &func,
        vec![
            tensor("buf", i32s(&[2, 4096], |k| k as i32), &["shard"]),
            tensor("flag", Tensor::zeros(Elem::Num(DType::I32), &[2]), &["shard"]),
            tensor("out", Tensor::zeros(Elem::Num(DType::I32), &[2, 4096]), &["shard"]),
        ],
        None,
        true,
    )
    .expect("runs");
    let slice = |name: &str| {
        run.report
            .slices
            .iter()
            .find(|s| s.rank == 0 && func.inst(s.inst).op.mnemonic() == name)
            .unwrap_or_else(|| panic!("no {name}"))
    };
    let (load, notify) = (slice("load"), slice("notify"));
    // 16 KiB from HBM take far longer than the DMA setup before the
    // sample: the wait is visible.
    assert!(load.done_ps > load.start_ps + 10_000, "{load:?}");
    assert!(
        notify.start_ps >= load.done_ps,
        "notify {notify:?} before the load ended {load:?}"
    );
    assert_eq!(elem::to_i64(DType::I32, run.tensors[2].get_bits(4095)), 4095);
}

/// Loop-carried values the issue unit passes from one iteration to the
/// next: rotations it may copy one by one (no carried value is read after
/// it has been replaced) and swaps it must copy all at once, of scalars,
/// blocks and values still being produced by an engine (a load), and a
/// value of the body carried twice and one from outside the loop carried as
/// it is (a yield may move neither out of its place), against the same
/// loops computed here.
#[test]
fn loop_carried_values_rotate_and_swap_as_written() {
    let topo = Topology::default_machine();
    let src = "
@kernel
def carry(src: ptr[i32], out: ptr[i32], n: i32):
    r = tl.arange(0, 4)
    a = 1
    b = 2
    c = 3
    for i in range(n):
        a, b, c = b, c, a + i
    x = r
    y = r * 10
    for i in range(n):
        x, y = y, x + i
    p = 5
    q = 6
    s = 7
    for i in range(n):
        s, q, p = q, p, s * 2 + i
    u = tl.load(src + r)
    w = tl.load(src + 4 + r)
    for i in range(n):
        u, w = w + i, u
    # A value of the body carried twice, and one from outside the loop
    # carried as it is (it is read again after the loop).
    k1 = r * 3
    m1 = r
    m2 = r
    z = r
    for i in range(n):
        t = m1 + m2 + i
        m1, m2, z = t, t, k1
    tl.store(out + r, x + (a * 100 + b * 1000 + c * 10000))
    tl.store(out + 4 + r, y + (p * 100 + q * 1000 + s * 10000))
    tl.store(out + 8 + r, u)
    tl.store(out + 12 + r, w)
    tl.store(out + 16 + r, m1 + m2 * 1000)
    tl.store(out + 20 + r, z + k1 * 100)
";
    let (func, _) = lower(src, "carry", &[]);
    for n in [0i64, 1, 2, 5] {
        let data = i32s(&[8], |k| 7 * k as i32 - 3);
        let run = simulate(
            &topo,
            vec![pe(0, 0, 0)],
            &func,
            vec![
                tensor("src", data, &[]),
                tensor("out", Tensor::zeros(Elem::Num(DType::I32), &[24]), &[]),
                scalar_i32(n),
            ],
            None,
            false,
        )
        .expect("runs");
        // The same loops, in Rust.
        let (mut a, mut b, mut c) = (1i64, 2i64, 3i64);
        let mut x: Vec<i64> = (0..4).collect();
        let mut y: Vec<i64> = (0..4).map(|k| k * 10).collect();
        let (mut p, mut q, mut s) = (5i64, 6i64, 7i64);
        let mut u: Vec<i64> = (0..4).map(|k| 7 * k - 3).collect();
        let mut w: Vec<i64> = (4..8).map(|k| 7 * k - 3).collect();
        let k1: Vec<i64> = (0..4).map(|k| k * 3).collect();
        let (mut m1, mut m2, mut z): (Vec<i64>, Vec<i64>, Vec<i64>) =
            ((0..4).collect(), (0..4).collect(), (0..4).collect());
        for i in 0..n {
            let t: Vec<i64> = m1.iter().zip(&m2).map(|(a, b)| a + b + i).collect();
            (m1, m2, z) = (t.clone(), t, k1.clone());
        }
        for i in 0..n {
            (a, b, c) = (b, c, a + i);
            (x, y) = (y.clone(), x.iter().map(|v| v + i).collect());
            (s, q, p) = (q, p, s * 2 + i);
            (u, w) = (w.iter().map(|v| v + i).collect(), u.clone());
        }
        let mut want: Vec<i64> = x.iter().map(|v| v + a * 100 + b * 1000 + c * 10000).collect();
        want.extend(y.iter().map(|v| v + p * 100 + q * 1000 + s * 10000));
        want.extend(&u);
        want.extend(&w);
        want.extend(m1.iter().zip(&m2).map(|(a, b)| a + b * 1000));
        want.extend(z.iter().zip(&k1).map(|(a, b)| a + b * 100));
        let got: Vec<i64> = (0..24)
            .map(|k| elem::to_i64(DType::I32, run.tensors[1].get_bits(k)))
            .collect();
        assert_eq!(got, want, "n = {n}");
    }
}

/// Control flow on the simulator, where values share environment entries
/// by live range: `while` with `continue` and `break` inside a `for`, an
/// `if` whose results come from either arm, a block and a scalar defined
/// before the loops and read only after them (their entries must outlive
/// every value the loops define), against the same walk computed here.
#[test]
fn control_flow_keeps_values_live_across_loops() {
    let topo = Topology::default_machine();
    let src = "
@kernel
def walk(out: ptr[i32], limit: i32):
    r = tl.arange(0, 8)
    before = r * 7 + 1
    kept = limit * 3
    for start in range(1, 9):
        n = start
        steps = 0
        peak = n
        while n != 1:
            if n % 2 == 0:
                n = n // 2
                steps += 1
                continue
            n = 3 * n + 1
            peak = tl.maximum(peak, n)
            steps += 1
            if steps > limit:
                break
        last = steps if steps <= limit else -1
        tl.store(out + (start - 1), last)
        tl.store(out + 8 + (start - 1), peak)
    tl.store(out + 16 + r, before + kept)
";
    let (func, _) = lower(src, "walk", &[]);
    for limit in [3i64, 100] {
        let run = simulate(
            &topo,
            vec![pe(0, 0, 0)],
            &func,
            vec![
                tensor("out", Tensor::zeros(Elem::Num(DType::I32), &[24]), &[]),
                scalar_i32(limit),
            ],
            None,
            false,
        )
        .expect("runs");
        let mut want = vec![0i64; 24];
        for start in 1..9i64 {
            let (mut n, mut steps, mut peak) = (start, 0i64, start);
            while n != 1 {
                if n % 2 == 0 {
                    n /= 2;
                    steps += 1;
                    continue;
                }
                n = 3 * n + 1;
                peak = peak.max(n);
                steps += 1;
                if steps > limit {
                    break;
                }
            }
            want[(start - 1) as usize] = if steps <= limit { steps } else { -1 };
            want[(start + 7) as usize] = peak;
        }
        for k in 0..8 {
            want[16 + k] = k as i64 * 7 + 1 + limit * 3;
        }
        let got: Vec<i64> = (0..24)
            .map(|k| elem::to_i64(DType::I32, run.tensors[0].get_bits(k)))
            .collect();
        assert_eq!(got, want, "limit = {limit}");
    }
}

// ----- launches over several SIPs (one logical process per SIP) -----

const TWO_INTO_ONE: &str = "
@kernel
def k(buf: ptr[i32], N: constexpr = 1024):
    lanes = tl.arange(0, N)
    r = tl.rank()
    if r == 1:
        x = tl.recv(2, [N], i32)
        y = tl.recv(0, [N], i32)
        tl.store(buf + lanes, x * 1000 + y)
    else:
        tl.send(1, tl.load(buf + lanes))
";

/// A transfer into another SIP books that SIP's links when its head gets
/// there, not when its sender starts: rank 0 (SIP 0) and rank 2 (SIP 1)
/// send to rank 1 (SIP 1) at the same time, over the same last links
/// (router→PE, TCM write port). Rank 2's message, whose head is there
/// first, goes first and arrives as on an idle path, long before rank 0's
/// has crossed the SIP link (a booking at the sender's start would have
/// queued it behind rank 0's message, a SIP link latency later).
#[test]
fn a_transfer_into_another_sip_books_its_links_when_its_head_gets_there() {
    let topo = Topology::default_machine();
    let (func, _) = lower(TWO_INTO_ONE, "k", &[]);
    let pes = vec![pe(0, 0, 0), pe(1, 0, 0), pe(1, 0, 1)];
    let run = simulate(
        &topo,
        pes,
        &func,
        vec![tensor(
            "buf",
            i32s(&[3, 1024], |k| (k % 1024) as i32 + (k / 1024) as i32),
            &["shard", "tcm"],
        )],
        None,
        true,
    )
    .expect("runs");
    let out = &run.tensors[0];
    for k in 0..1024 {
        assert_eq!(
            elem::to_i64(DType::I32, out.get_bits(1024 + k)),
            (k as i64 + 2) * 1000 + k as i64,
            "rank 1 combined both messages"
        );
    }
    let sends: Vec<&sim::Slice> = run.report.slices.iter().filter(|s| s.engine == Engine::Send).collect();
    let send = |rank: u32| *sends.iter().find(|s| s.rank == rank).expect("a send");
    let (far, near) = (send(0), send(2));
    assert_eq!(far.start_ps, near.start_ps, "both send at the same time");
    let s = &topo.spec;
    let sip_latency = ps(s.system.sip_link.latency_ns.0);
    // Rank 2 to rank 1 on an idle path: PE→router, router→PE (same
    // corner), TCM write port.
    let (bytes, head) = (4096.0, s.fabric.packet_bytes.0 as f64);
    let (link_bw, hop) = (
        s.cube.router.link_bandwidth_bytes_per_ns.0,
        s.cube.router.hop_latency_ns.0,
    );
    let tcm_w = s.pe.tcm.write_bandwidth_bytes_per_ns.0;
    let idle = ps(2.0 * hop + s.pe.tcm.latency_ns.0 + 2.0 * head / link_bw + head / tcm_w + (bytes - head) / link_bw);
    let got = (near.done_ps - near.start_ps) as f64;
    assert!(rel(got, idle) < 1e-3, "rank 2's message took {got} ps, idle {idle} ps");
    assert!(
        (far.start_ps as f64 + sip_latency) > near.done_ps as f64,
        "rank 2's message is in before rank 0's could cross the SIP link"
    );
    // Rank 1 takes rank 2's message first, then rank 0's once it is in.
    let recvs: Vec<&sim::Slice> = run
        .report
        .slices
        .iter()
        .filter(|s| s.rank == 1 && s.engine == Engine::Recv)
        .collect();
    assert_eq!(recvs.len(), 2);
    assert!(recvs[0].start_ps >= near.done_ps && (recvs[0].start_ps as f64) < far.start_ps as f64 + sip_latency);
    assert!(recvs[1].start_ps as f64 > far.start_ps as f64 + sip_latency);
}

/// With the IPCQ in SRAM, a cube's SRAM holds the slots of every queue
/// into its PEs beside the tensors allocated there: a ring over four PEs
/// of one cube (four queues of 4 × 4 KiB, and 16 KiB of tensor) runs in
/// an SRAM of exactly 80 KiB, with the right data, and not in one byte
/// less, where the error names the memory, counts what it holds and
/// points at the operation that opened the fourth queue.
#[test]
fn ipcq_slots_in_sram_take_its_room() {
    let variant = |sram_bytes: u64| {
        let y = kernbench_runtime::topology::DEFAULT_YAML
            .replace("buffer_space: tcm", "buffer_space: sram")
            .replace("capacity_bytes: 67108864", &format!("capacity_bytes: {sram_bytes}"));
        Topology::parse("sram-slots.yaml", &y).expect("valid variant")
    };
    let (func, sources) = lower(PASS_ON, "pass_on", &[]);
    let run = |topo: &Topology| {
        let pes = sim::select_pes(topo, "0.0.0,0.0.1,0.0.2,0.0.3").expect("one cube's PEs");
        simulate(
            topo,
            pes,
            &func,
            vec![tensor("buf", i32s(&[4, 1024], |k| k as i32), &["shard", "sram"])],
            None,
            false,
        )
    };
    let fits = variant(80 * 1024);
    let done = run(&fits).expect("four queues and the tensor fill the SRAM exactly");
    for r in 0..4 {
        let from = (r + 3) % 4;
        assert_eq!(
            elem::to_i64(DType::I32, done.tensors[0].get_bits(r * 1024 + 7)),
            (from * 1024 + 7) as i64,
            "rank {r} holds its predecessor's row"
        );
    }
    let short = variant(80 * 1024 - 1);
    let e = run(&short).err().expect("the fourth queue does not fit");
    match &e {
        SimError::SlotCapacity {
            kernel,
            place,
            need_bytes,
            have_bytes,
            allocated_bytes,
            queues,
            queue_bytes,
            ..
        } => {
            assert_eq!(kernel, "pass_on");
            assert_eq!(*place, sim::Placement::Sram { sip: 0, cube: 0 });
            assert_eq!((*queues, *queue_bytes, *allocated_bytes), (4, 16384, 16384));
            assert_eq!((*need_bytes, *have_bytes), (81920, 81919));
        }
        other => panic!("expected the slots' capacity error, got {other:?}"),
    }
    let text = sim::render_sim_error(&func, &sources, &e, ColorMode::Never);
    assert!(
        text.contains(
            "needs 81920 bytes of the SRAM of (sip 0, cube 0) (16384 bytes of tensors and 65536 bytes of the IPCQ \
             slots of 4 queues into it, the last one's 16384)"
        ) && text.contains("opens queue 4 into the SRAM of (sip 0, cube 0) in this `"),
        "{text}"
    );
}

/// IPCQ slots in HBM take room in the receiver's slice, as in SRAM: a
/// 4-PE ring with 4 KiB shards fits in slices of exactly 20 KiB (one
/// queue of 16 KiB into each) and fails one byte short. A queue into
/// another SIP's SRAM counts there, the same on one thread as on two (the
/// receiver's process counts it).
#[test]
fn ipcq_slots_in_hbm_and_across_sips_take_their_room() {
    let (func, _) = lower(PASS_ON, "pass_on", &[]);
    let hbm_variant = |slice_bytes: u64| {
        let y = kernbench_runtime::topology::DEFAULT_YAML
            .replace("buffer_space: tcm", "buffer_space: hbm")
            .replace(
                "hbm_capacity_bytes: 17179869184",
                &format!("hbm_capacity_bytes: {}", 8 * slice_bytes),
            );
        Topology::parse("hbm-slots.yaml", &y).expect("valid variant")
    };
    let run = |topo: &Topology, pes: &str, layout: &[&str], threads: usize| {
        let pes = sim::select_pes(topo, pes).expect("PEs");
        let n = pes.len();
        let mut l = TestLaunch::new(
            topo,
            pes,
            &func,
            vec![tensor("buf", i32s(&[n, 1024], |k| k as i32), layout)],
        );
        l.threads = threads;
        l.run()
    };
    let holds_predecessors_rows = |done: &SimRun, n: usize| {
        for r in 0..n {
            let from = (r + n - 1) % n;
            assert_eq!(
                elem::to_i64(DType::I32, done.tensors[0].get_bits(r * 1024 + 7)),
                (from * 1024 + 7) as i64,
                "rank {r} holds its predecessor's row"
            );
        }
    };
    let ring = "0.0.0,0.0.1,0.0.2,0.0.3";
    let done = run(&hbm_variant(20 * 1024), ring, &["shard"], 1).expect("shard and slots fill each slice");
    holds_predecessors_rows(&done, 4);
    match run(&hbm_variant(20 * 1024 - 1), ring, &["shard"], 1) {
        Err(SimError::SlotCapacity {
            place,
            need_bytes,
            have_bytes,
            allocated_bytes,
            queues,
            queue_bytes,
            ..
        }) => {
            assert!(matches!(place, sim::Placement::Hbm(_)), "{place:?}");
            assert_eq!((queues, queue_bytes, allocated_bytes), (1, 16384, 4096));
            assert_eq!((need_bytes, have_bytes), (20480, 20479));
        }
        other => panic!("expected the slots' capacity error, got {:?}", other.err()),
    }
    // A ring of two PEs on two SIPs, slots and shards in each cube's SRAM.
    let sram_variant = |sram_bytes: u64| {
        let y = kernbench_runtime::topology::DEFAULT_YAML
            .replace("buffer_space: tcm", "buffer_space: sram")
            .replace("capacity_bytes: 67108864", &format!("capacity_bytes: {sram_bytes}"));
        Topology::parse("sram-slots.yaml", &y).expect("valid variant")
    };
    let apart = "0.0.0,1.0.0";
    let mut errors = Vec::new();
    for threads in [1, 2] {
        let done = run(&sram_variant(20 * 1024), apart, &["shard", "sram"], threads).expect("fits exactly");
        holds_predecessors_rows(&done, 2);
        let e = run(&sram_variant(20 * 1024 - 1), apart, &["shard", "sram"], threads)
            .err()
            .expect("one byte short");
        match &e {
            SimError::SlotCapacity {
                need_bytes,
                have_bytes,
                queues,
                ..
            } => assert_eq!((*need_bytes, *have_bytes, *queues), (20480, 20479, 1)),
            other => panic!("{threads} threads: expected the slots' capacity error, got {other:?}"),
        }
        errors.push(format!("{e:?}"));
    }
    assert_eq!(errors[0], errors[1], "the same error on one thread and on two");
}

const PUT_FAR: &str = "
@kernel
def put(buf: ptr[i32], N: constexpr = 512):
    offs = tl.arange(0, N)
    if tl.rank() == 0:
        tl.store(tl.symm_at(buf + offs, 1), tl.load(buf + offs) + 1)
";

/// A put into another SIP's memory writes there when its last byte is in
/// and ends, for the PE that issued it, when the acknowledgement is back:
/// the idle transfer (PE→router, SIP link, SRAM port: latency sum, head
/// packet stored and forwarded, the rest at the SIP link's bandwidth) plus
/// the latency back (SRAM port, SIP link, router→PE).
#[test]
fn a_put_into_another_sip_ends_when_its_acknowledgement_is_back() {
    let topo = Topology::default_machine();
    let (func, _) = lower(PUT_FAR, "put", &[]);
    let run = simulate(
        &topo,
        vec![pe(0, 0, 0), pe(1, 0, 0)],
        &func,
        vec![tensor("buf", i32s(&[2, 512], |k| k as i32), &["shard", "sram"])],
        None,
        true,
    )
    .expect("runs");
    for i in 0..512 {
        assert_eq!(
            elem::to_i64(DType::I32, run.tensors[0].get_bits(512 + i)),
            i as i64 + 1,
            "rank 1's copy holds the put"
        );
    }
    let store = slice_of(&run, &func, "store");
    let s = &topo.spec;
    let (bytes, head) = (2048.0, s.fabric.packet_bytes.0 as f64);
    let (router_bw, hop) = (
        s.cube.router.link_bandwidth_bytes_per_ns.0,
        s.cube.router.hop_latency_ns.0,
    );
    let (sip_bw, sip_lat) = (
        s.system.sip_link.bandwidth_bytes_per_ns.0,
        s.system.sip_link.latency_ns.0,
    );
    let (sram_bw, sram_lat) = (s.cube.sram.bandwidth_bytes_per_ns.0, s.cube.sram.latency_ns.0);
    let setup = s.pe.dma.setup_cycles.0 as f64 / s.clock_ghz.0;
    let transfer =
        hop + sip_lat + sram_lat + head / router_bw + head / sip_bw + head / sram_bw + (bytes - head) / sip_bw;
    let back = sram_lat + sip_lat + hop;
    let want = store.start_ps as f64 + ps(setup + transfer + back);
    let end = run.report.pes[0].end_ps as f64;
    assert!(rel(end, want) < 1e-3, "rank 0 ends at {end} ps, closed form {want} ps");
}

/// A message between SIPs that are not neighbours crosses a SIP with no
/// PE of the launch (two SIP links of the `large` torus): the ring
/// all-reduce over ranks on SIPs 0, 2 and 10 still gives exact sums.
#[test]
fn messages_cross_sips_without_pes_of_the_launch() {
    let topo = Topology::load("large").expect("preset");
    let file = repo_root().join("tests/sim/ring_allreduce.tl");
    let (func, _) = kernbench_tests::exec::lower_path(
        &file,
        "ring_allreduce",
        &[("T", Konst::DType(DType::I32)), ("CHUNK", Konst::Int(64))],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let pes = vec![pe(0, 3, 1), pe(2, 0, 0), pe(10, 5, 7)];
    let n = 1000;
    let data = i32s(&[3, n], |k| (k * 31 % 977) as i32 - 400);
    let run = simulate(
        &topo,
        pes,
        &func,
        vec![tensor("buf", data.clone(), &["shard"]), scalar_i32(n as i64)],
        None,
        false,
    )
    .expect("runs");
    for i in 0..n {
        let want: i64 = (0..3).map(|r| elem::to_i64(DType::I32, data.get_bits(r * n + i))).sum();
        for r in 0..3 {
            assert_eq!(elem::to_i64(DType::I32, run.tensors[0].get_bits(r * n + i)), want);
        }
    }
    // Every hop of the way was booked: both SIP links out of SIP 0 towards
    // SIP 2 carried the messages of rank 0.
    let busy = |from: u32, to: u32| {
        run.report
            .links
            .iter()
            .any(|l| l.id == sim::LinkId::SipLink { from, to } && l.bytes > 0)
    };
    assert!(busy(0, 1) && busy(1, 2), "rank 0's messages crossed SIP 1");
}

/// Everything a run gives, for comparing runs: the data, the time, the
/// events, each PE's figures, each link's, the trace's slices and link
/// intervals; or the error.
fn fingerprint(r: Result<SimRun, SimError>) -> String {
    let r = match r {
        Ok(r) => r,
        Err(e) => return format!("error {e:?}"),
    };
    let rep = &r.report;
    let pes: Vec<_> = rep.pes.iter().map(|p| (p.pe, p.rank, p.end_ps, p.busy_ps)).collect();
    let links: Vec<_> = rep.links.iter().map(|l| (l.id, l.busy_ps, l.bytes)).collect();
    let slices: Vec<_> = rep
        .slices
        .iter()
        .map(|s| (s.rank, s.engine, s.start_ps, s.end_ps, s.done_ps, s.inst))
        .collect();
    format!(
        "{:?}\n{} {} {}\n{pes:?}\n{links:?}\n{slices:?}\n{:?}",
        r.tensors, rep.start_ps, rep.end_ps, rep.events, rep.link_intervals
    )
}

/// A launch over several SIPs runs as one shard of its SIPs per thread,
/// and the threads change nothing but the wall time: the stdlib's ring
/// all-reduce over both SIPs of the default machine and over three of
/// `large` (with a trace), a barrier, a deadlock and a failing access
/// across SIPs give the same data, times, events, figures, trace and
/// errors on 1, 2 and 3 threads.
#[test]
fn threads_change_nothing_but_the_wall_time() {
    let ring = |topo: &Topology, world: usize, n: usize, threads: usize| {
        let (func, _) = kernbench_tests::exec::lower_path(
            &repo_root().join("stdlib/ccl/ring_allreduce.tl"),
            "ring_allreduce",
            &[("T", Konst::DType(DType::I32))],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let pes = sim::select_pes(topo, &world.to_string()).expect("enough PEs");
        let data = i32s(&[world, n], |k| (k * 7919 % 2001) as i32 - 1000);
        let args = vec![tensor("buf", data, &["shard"]), scalar_i32(n as i64)];
        let mut launch = TestLaunch::new(topo, pes, &func, args);
        launch.trace = true;
        launch.threads = threads;
        fingerprint(launch.run())
    };
    let default = Topology::default_machine();
    let large = Topology::load("large").expect("preset");
    for (topo, world, n) in [(&default, 256, 256 * 37 + 5), (&large, 600, 600 * 2)] {
        let one = ring(topo, world, n, 1);
        assert!(one.starts_with('['), "the ring runs: {}", &one[..one.len().min(300)]);
        for threads in [2, 3] {
            assert!(ring(topo, world, n, threads) == one, "{world} PEs on {threads} threads");
        }
    }
    let all = sim::select_pes(&default, "all").expect("256 PEs");
    let cases = [
        // A barrier over both SIPs.
        ("@kernel\ndef k():\n    tl.barrier()\n", false, "["),
        // Everyone receives first: a deadlock naming every PE.
        (
            "@kernel\ndef k():\n    x = tl.recv(tl.PREV, [16], i32)\n    tl.send(tl.NEXT, x)\n",
            false,
            "error Deadlock",
        ),
        // Ranks 40 and 200 (one per SIP) read out of bounds, rank 200
        // first: its error is the one reported.
        (
            "@kernel\ndef k(buf: ptr[i32]):\n    r = tl.rank()\n    x = tl.arange(0, 16)\n    if r == 200:\n        tl.store(buf + x + 100000, x)\n    elif r == 40:\n        for i in range(50):\n            r += 1\n        tl.store(buf + x + 100000, x)\n",
            true,
            "error Exec { pe: PeCoord { sip: 1",
        ),
    ];
    for (src, with_buf, outcome) in cases {
        let (func, _) = lower(src, "k", &[]);
        let run = |threads| {
            let args = match with_buf {
                true => vec![tensor("buf", i32s(&[256, 16], |k| k as i32), &["shard"])],
                false => Vec::new(),
            };
            let mut launch = TestLaunch::new(&default, all.clone(), &func, args);
            launch.trace = true;
            launch.threads = threads;
            fingerprint(launch.run())
        };
        let one = run(1);
        assert!(one.starts_with(outcome), "{src}: {}", &one[..one.len().min(300)]);
        for threads in [2, 3] {
            assert!(run(threads) == one, "{src} on {threads} threads:\n{one}");
        }
    }
}

/// A data path with a bug on one thread: `ShardBug(Bug::OnCaller)`
/// panics on the thread that made it, and its copies for other threads
/// interpret; `ShardBug(Bug::OnHelpers)` interprets and its copies panic.
struct ShardBug(Bug);

#[derive(Clone, Copy)]
enum Bug {
    OnCaller,
    OnHelpers,
    /// A copy made by `OnHelpers`.
    Here,
    /// A copy made by `OnCaller`.
    Nowhere,
}

impl kernbench_compiler::datapath::DataPath for ShardBug {
    fn name(&self) -> &'static str {
        "shard-bug"
    }

    fn prepare(
        &mut self,
        _func: &kernbench_compiler::ir::Function,
        _plan: &kernbench_compiler::datapath::Plan,
    ) -> Result<(), String> {
        Ok(())
    }

    fn maker(&self) -> Option<fn() -> Box<dyn kernbench_compiler::datapath::DataPath>> {
        Some(match self.0 {
            Bug::OnHelpers => || Box::new(ShardBug(Bug::Here)),
            _ => || Box::new(ShardBug(Bug::Nowhere)),
        })
    }

    fn run(
        &mut self,
        func: &kernbench_compiler::ir::Function,
        plan: &kernbench_compiler::datapath::Plan,
        g: kernbench_compiler::datapath::GroupId,
        inputs: &[&kernbench_compiler::datapath::RtValue],
        mem: &mut dyn kernbench_compiler::datapath::Memory,
    ) -> Result<kernbench_compiler::datapath::Outputs, kernbench_compiler::datapath::ExecError> {
        match self.0 {
            Bug::OnCaller => panic!("a bug on the first shard's thread"),
            Bug::Here => panic!("a bug on the second shard's thread"),
            Bug::OnHelpers | Bug::Nowhere => {
                kernbench_compiler::datapath::interp::Interpreter.run(func, plan, g, inputs, mem)
            }
        }
    }
}

/// A panic on one shard's thread (a bug), a helper's or the caller's,
/// stops the other shards at their next meeting and comes out of
/// `Machine::run` as that panic, as it would on one thread, instead of
/// leaving the others waiting for good. Each launch runs on a thread of
/// its own, so that a hang fails the test.
#[test]
fn a_panic_on_a_shards_thread_stops_the_launch() {
    use kernbench_compiler::datapath::DataPath;
    let panic_of = |data_path: fn() -> Box<dyn DataPath>| {
        let (done, outcome) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let result = std::panic::catch_unwind(|| {
                let topo = Topology::default_machine();
                let (func, _) = lower(
                    "@kernel\ndef k(buf: ptr[i32]):\n    x = tl.arange(0, 16)\n    tl.store(buf + x, tl.load(buf + x) + 1)\n",
                    "k",
                    &[],
                );
                let all = sim::select_pes(&topo, "all").expect("256 PEs");
                let args = vec![tensor("buf", i32s(&[256, 16], |k| k as i32), &["shard"])];
                let mut launch = TestLaunch::new(&topo, all, &func, args);
                launch.threads = 2;
                launch.data_path = data_path();
                launch.run().map(|r| r.report.end_ps)
            });
            let message = match result {
                Ok(r) => format!("no panic: {r:?}"),
                Err(payload) => payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_default(),
            };
            let _ = done.send(message);
        });
        outcome
            .recv_timeout(std::time::Duration::from_secs(300))
            .expect("the launch ends (a panic on one thread must not hang the others)")
    };
    assert_eq!(
        panic_of(|| Box::new(ShardBug(Bug::OnHelpers))),
        "a bug on the second shard's thread"
    );
    assert_eq!(
        panic_of(|| Box::new(ShardBug(Bug::OnCaller))),
        "a bug on the first shard's thread"
    );
}

const PROGRAMS: &str = "
@kernel
def programs(x: ptr[i32], N: constexpr = 1024, OOB: constexpr = 0):
    pid = tl.program_id(0)
    offs = pid * N + tl.arange(0, N)
    v = tl.load(x + offs)
    far = (1 - tl.minimum(pid, 1)) * OOB
    tl.store(x + (offs + far), v + 1)
";

/// A PE running several programs issues the next as soon as the previous
/// one's last instruction is dispatched (DESIGN §2 names no stall at a
/// program's end): program 1's load starts before program 0's store has
/// landed, the data is right, and 4 programs take less than 4 times one.
/// An error of a queued operation names the program that issued it, not
/// the one issuing by then.
#[test]
fn programs_on_one_pe_overlap_and_errors_name_their_program() {
    let topo = Topology::default_machine();
    let (func, _) = lower(PROGRAMS, "programs", &[]);
    let run = |grid: u32| {
        simulate(
            &topo,
            vec![pe(0, 0, 0)],
            &func,
            vec![tensor("x", i32s(&[4096], |k| k as i32), &[])],
            Some([grid, 1, 1]),
            true,
        )
        .expect("runs")
    };
    let (one, four) = (run(1), run(4));
    let got = &four.tensors[0];
    assert!((0..4096).all(|k| elem::to_i64(DType::I32, got.get_bits(k)) == k as i64 + 1));
    let t = |r: &SimRun| r.report.elapsed_ps();
    assert!(t(&four) < 4 * t(&one), "4 programs {} ps, one {} ps", t(&four), t(&one));
    let dma: Vec<&sim::Slice> = four
        .report
        .slices
        .iter()
        .filter(|s| s.engine == sim::Engine::Dma)
        .collect();
    // load 0, store 0, load 1, …: the second load starts before the first
    // store's last byte is in.
    assert_eq!(dma.len(), 8, "{dma:?}");
    assert!(dma[2].start_ps < dma[1].done_ps, "{dma:?}");

    // Program 0's store goes out of bounds; when it starts, the issue
    // unit is in program 1.
    let (bad, _) = lower(PROGRAMS, "programs", &[("OOB", Konst::Int(100_000_000))]);
    let e = simulate(
        &topo,
        vec![pe(0, 0, 0)],
        &bad,
        vec![tensor("x", i32s(&[4096], |k| k as i32), &[])],
        Some([2, 1, 1]),
        false,
    )
    .err()
    .expect("out of bounds");
    match e {
        SimError::Exec { program, .. } => assert_eq!(program, [0, 0, 0]),
        other => panic!("expected an out-of-bounds store, got {other:?}"),
    }
}

const STRIDED: &str = "
@kernel
def strided(x: ptr[i32], y: ptr[i32], SHIFT: constexpr = 1, N: constexpr = 512):
    k = tl.arange(0, N)
    tl.store(x + 2 * k, k)
    v = tl.load(x + (2 * k + SHIFT))
    tl.store(y + k, v)
";

/// A store to the even elements and a load of the odd ones share no byte:
/// the load does not wait for the store (their footprints repeat every 8
/// bytes, 4 of them each, apart). Loading the even ones back is a true
/// read-after-write: it waits for the store's end and reads what it
/// wrote.
#[test]
fn a_strided_store_orders_only_loads_of_its_own_bytes() {
    let topo = Topology::default_machine();
    let run = |shift: i64| {
        let (func, _) = lower(STRIDED, "strided", &[("SHIFT", Konst::Int(shift))]);
        let r = simulate(
            &topo,
            vec![pe(0, 0, 0)],
            &func,
            vec![
                tensor("x", i32s(&[1025], |k| 1000 + k as i32), &[]),
                tensor("y", i32s(&[512], |_| 0), &[]),
            ],
            None,
            true,
        )
        .expect("runs");
        // The first store (into x) and the load.
        let first = |what: &str| {
            let mut of: Vec<sim::Slice> = (r.report.slices.iter())
                .filter(|s| func.inst(s.inst).op.mnemonic() == what)
                .cloned()
                .collect();
            of.sort_by_key(|s| s.start_ps);
            of[0].clone()
        };
        let (store, load) = (first("store"), first("load"));
        let y: Vec<i64> = (0..512)
            .map(|k| elem::to_i64(DType::I32, r.tensors[1].get_bits(k)))
            .collect();
        (store, load, y)
    };
    let (store, load, y) = run(1);
    assert!(load.start_ps < store.done_ps, "store {store:?}, load {load:?}");
    assert!(y.iter().enumerate().all(|(k, &v)| v == 1001 + 2 * k as i64), "{y:?}");
    let (store, load, y) = run(0);
    assert!(load.start_ps >= store.done_ps, "store {store:?}, load {load:?}");
    assert!(y.iter().enumerate().all(|(k, &v)| v == k as i64), "{y:?}");
}
