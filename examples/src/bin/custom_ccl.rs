//! A collective written by a user: `examples/custom_ccl/direct_allreduce.tl`
//! registered by `examples/custom_ccl/ccl.yaml` (merged over the stdlib's
//! registry), checked on every rank like any stdlib algorithm, then timed
//! against the stdlib's ring with the nccl-tests table of `tlc bench ccl`.
//!
//! `cargo run --release -p kernbench-examples --bin custom_ccl`

use kernbench_compiler::datapath::jit::Jit;
use kernbench_compiler::sema::DType;
use kernbench_runtime::ccl::bench::{self, Case};
use kernbench_runtime::ccl::ReduceOp;
use kernbench_runtime::host::{spawn, DpPolicy, HostError, Runtime};
use kernbench_runtime::sim;
use kernbench_runtime::topology::Topology;
use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("custom_ccl/ccl.yaml");
    let topo = Topology::default_machine();
    let mut rt = Runtime::new(&topo);
    rt.load_registry(Some(&config))?;
    // Correctness, the way a user's training loop would call it.
    spawn(&mut rt, topo.sips(), |rank, ctx| {
        let t = ctx.full(&[10_000], rank as i32 * 3 + 1, DpPolicy::row_wise(1, 4))?;
        ctx.all_reduce_with(&t, ReduceOp::Sum, Some("direct_allreduce"))?;
        let got = ctx.to_ndarray::<i32>(&t)?;
        if got.iter().all(|v| *v == 1 + 4) {
            Ok(())
        } else {
            Err(HostError::new("wrong sums"))
        }
    })?;
    println!("direct_allreduce: correct on {} ranks", topo.sips());
    // Time against the ring on the 8 PEs of one cube.
    let reg = {
        let mut r =
            kernbench_runtime::ccl::Registry::stdlib(&kernbench_runtime::host::default_stdlib().ok_or("no stdlib")?)?;
        r.merge_file(&config)?;
        r
    };
    let pes = sim::select_pes(&topo, "cube")?;
    println!("#        size    {:>28} {:>28}", "direct_allreduce", "ring_allreduce");
    println!(
        "#         (B)    {:>14}{:>14} {:>14}{:>14}",
        "time(us)", "busbw(GB/s)", "time(us)", "busbw(GB/s)"
    );
    let mut cases = Vec::new();
    for name in ["direct_allreduce", "ring_allreduce"] {
        let a = reg.get(name)?.clone();
        let (func, sources) = reg.compile_for(&a, &topo, DType::F32, ReduceOp::Sum)?;
        cases.push((a, func, sources));
    }
    let mut cache = bench::DataCache::default();
    for size in bench::parse_sizes("1K:4M")? {
        let mut cols = String::new();
        for (a, func, sources) in &cases {
            let case = Case {
                topo: &topo,
                reg: &reg,
                algorithm: a,
                func,
                sources,
                pes: &pes,
                dtype: DType::F32,
                op: ReduceOp::Sum,
                threads: 1,
                time_limit_ps: Some(kernbench_runtime::host::DEFAULT_TIME_LIMIT_PS),
                root: None,
            };
            let row = bench::run_one(&case, &mut Jit::new(), &mut cache, size)?;
            if row.wrong != 0 {
                return Err(format!("{}: {} wrong elements at {size} B", a.name, row.wrong).into());
            }
            cols.push_str(&format!("{:>14.2}{:>14.2} ", row.time_ps as f64 / 1e6, row.busbw_gbps));
        }
        println!("{size:>13}    {cols}");
    }
    Ok(())
}
