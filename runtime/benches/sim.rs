//! Simulator speed (issue figures): simulated events per wall-clock
//! second on a ring all-reduce over every PE of the default topology, and
//! the wall time of one such all-reduce; and the same ring on 1,024 PEs of
//! `large` with 64-byte messages, where the simulator is bound by cache
//! misses on each PE's state rather than by instructions (the regime of
//! the 4,096-PE target; docs/architecture.md, Performance).
//!
//! `cargo bench -p kernbench-runtime --bench sim`. Benchmarks build with
//! the `bench` profile, which inherits `release` (no LTO); `tlc bench sim`
//! measures the same ring on whichever build runs it, and the `dist`
//! profile's (fat LTO, abort on panic) is the fastest (about 7 %).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use kernbench_compiler::datapath::{elem, jit::Jit, Tensor};
use kernbench_compiler::sema::{self, DType, Elem, Konst};
use kernbench_runtime::sim::place::{place_args, LaunchArg, Layout};
use kernbench_runtime::sim::{ring_order, select_pes, Communicator, Launch, Machine};
use kernbench_runtime::topology::{Space, Topology};
use std::path::Path;

/// As `tlc` (its main.rs says why), so that these figures are its.
#[global_allocator]
static GLOBAL: kernbench_runtime::alloc::Allocator = kernbench_runtime::alloc::Allocator;

fn ring_kernel() -> kernbench_compiler::ir::Function {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../stdlib/ccl/ring_allreduce.tl");
    let source = std::fs::read_to_string(&path).expect("stdlib ring");
    let options = sema::Options {
        defines: [("T".to_string(), Konst::DType(DType::I32))].into_iter().collect(),
        stdlib_root: None,
    };
    let mut s = sema::Session::new(options);
    s.add_file("ring_allreduce.tl", Some(path), source);
    s.lower("ring_allreduce").1.expect("the ring lowers")
}

/// A fresh machine with `n_elem` zeros of i32 per rank placed in each
/// rank's HBM, and the launch's arguments.
fn placed(
    topo: &Topology,
    comm: &Communicator,
    n_elem: usize,
) -> (Machine, Vec<Vec<kernbench_compiler::datapath::RtValue>>) {
    let world = comm.world() as usize;
    let mut m = Machine::new(topo);
    let data = Tensor::zeros(Elem::Num(DType::I32), &[world, n_elem]);
    let args = vec![
        LaunchArg::Tensor {
            name: "buf".into(),
            tensor: data,
            layout: Layout {
                dist: kernbench_runtime::sim::place::Dist::Shard,
                space: Space::Hbm,
            },
        },
        LaunchArg::Scalar(elem::from_i64(DType::I32, n_elem as i64)),
    ];
    let (args, _) = place_args(&mut m, comm, args).expect("fits");
    (m, args)
}

/// One all-reduce on a placed machine: (events, end time).
fn all_reduce(
    m: &mut Machine,
    comm: &Communicator,
    func: &kernbench_compiler::ir::Function,
    args: Vec<Vec<kernbench_compiler::datapath::RtValue>>,
    jit: &mut Jit,
) -> (u64, u64) {
    let launch = Launch::new(func, comm, args);
    let r = m.run(&launch, jit).expect("runs");
    (r.events, r.end_ps)
}

/// Only the simulation is timed: building the machine and placing the
/// data happen outside the measurement, and the JIT compiles the kernel
/// once (its cache serves every later launch).
fn ring(c: &mut Criterion) {
    let topo = Topology::default_machine();
    let func = ring_kernel();
    let comm = Communicator::new(ring_order(&topo));
    let mut jit = Jit::new();
    let mut g = c.benchmark_group("sim_ring_allreduce_256_pes");
    g.sample_size(10);
    for n_elem in [32768usize, 262144] {
        let name = format!("{}KiB_per_rank_events", n_elem * 4 / 1024);
        bench_ring(&mut g, &name, &topo, &comm, &func, n_elem, &mut jit);
    }
    g.finish();
}

/// One benchmark of `g`: the ring with `n_elem` elements per rank, its
/// throughput in events (counted by one run first).
fn bench_ring(
    g: &mut criterion::BenchmarkGroup<criterion::measurement::WallTime>,
    name: &str,
    topo: &Topology,
    comm: &Communicator,
    func: &kernbench_compiler::ir::Function,
    n_elem: usize,
    jit: &mut Jit,
) {
    let (mut m, args) = placed(topo, comm, n_elem);
    let (events, _) = all_reduce(&mut m, comm, func, args, jit);
    g.throughput(Throughput::Elements(events));
    g.bench_function(name, |b| {
        b.iter_batched(
            || placed(topo, comm, n_elem),
            |(mut m, args)| all_reduce(&mut m, comm, func, args, jit),
            BatchSize::PerIteration,
        )
    });
}

/// 1,024 PEs of `large`, one 64-byte message per ring step (`n_elem`
/// equal to the PE count, as in the 64 MiB run on all 4,096): ~2 M ring
/// steps, a few seconds each run.
fn ring_many_pes(c: &mut Criterion) {
    let topo = Topology::load("large").expect("the large preset");
    let func = ring_kernel();
    let pes = select_pes(&topo, "1024").expect("1,024 PEs");
    let comm = Communicator::new(pes);
    let n_elem = comm.world() as usize;
    let mut jit = Jit::new();
    let mut g = c.benchmark_group("sim_ring_allreduce_1024_pes_large");
    g.sample_size(10);
    bench_ring(&mut g, "64B_messages_events", &topo, &comm, &func, n_elem, &mut jit);
    g.finish();
}

criterion_group!(benches, ring, ring_many_pes);
criterion_main!(benches);
