//! Simulator speed (issue figures): simulated events per wall-clock
//! second on a ring all-reduce over every PE of the default topology, and
//! the wall time of one such all-reduce.
//!
//! `cargo bench -p kernbench-runtime --bench sim`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kernbench_compiler::datapath::{elem, jit::Jit, Tensor};
use kernbench_compiler::sema::{self, DType, Elem, Konst};
use kernbench_runtime::sim::place::{place_args, LaunchArg, Layout};
use kernbench_runtime::sim::{ring_order, Communicator, Launch, Machine};
use kernbench_runtime::topology::{Space, Topology};
use std::path::Path;

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

/// One all-reduce of `n_elem` i32 per rank on every PE: (events, end time).
fn all_reduce(topo: &Topology, func: &kernbench_compiler::ir::Function, n_elem: usize) -> (u64, u64) {
    let comm = Communicator::new(ring_order(topo));
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
    let (args, _) = place_args(&mut m, &comm, args).expect("fits");
    let launch = Launch::new(func, &comm, args);
    let mut jit = Jit::new();
    let r = m.run(&launch, &mut jit).expect("runs");
    (r.events, r.end_ps)
}

fn ring(c: &mut Criterion) {
    let topo = Topology::default_machine();
    let func = ring_kernel();
    let mut g = c.benchmark_group("sim_ring_allreduce_256_pes");
    g.sample_size(10);
    for n_elem in [32768usize, 262144] {
        let (events, _) = all_reduce(&topo, &func, n_elem);
        g.throughput(Throughput::Elements(events));
        g.bench_function(format!("{}KiB_per_rank_events", n_elem * 4 / 1024), |b| {
            b.iter(|| all_reduce(&topo, &func, n_elem))
        });
    }
    g.finish();
}

criterion_group!(benches, ring);
criterion_main!(benches);
