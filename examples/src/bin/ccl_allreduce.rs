//! The PyTorch-DDP-shaped worker: every rank (one per SIP) initialises the
//! process group, fills its slice with `rank + 1`, all-reduces it and
//! checks that every element is `1 + 2 + … + world`.
//!
//! `cargo run --release -p kernbench-examples --bin ccl_allreduce`

use kernbench_runtime::ccl::ReduceOp;
use kernbench_runtime::host::{spawn, DpPolicy, HostError, Runtime};
use kernbench_runtime::topology::Topology;
use std::process::ExitCode;

fn main() -> ExitCode {
    let topo = Topology::default_machine();
    let mut rt = Runtime::new(&topo);
    let world = topo.sips();
    let n = 1 << 20; // elements per rank: 4 MiB of f32
    let result = spawn(&mut rt, world, |rank, ctx| {
        let pg = ctx.init_process_group();
        // The rank's slice, split row-wise over the 8 PEs of cube 0 of its SIP.
        let t = ctx.full(&[n], (rank + 1) as f32, DpPolicy::row_wise(1, 8))?;
        ctx.all_reduce(&t, ReduceOp::Sum)?;
        let got = ctx.to_ndarray::<f32>(&t)?;
        let want = (pg.world * (pg.world + 1) / 2) as f32;
        match got.iter().position(|v| *v != want) {
            None => {
                println!("rank {}/{}: all {n} elements are {want}", pg.rank, pg.world);
                Ok(())
            }
            Some(i) => Err(HostError::new(format!("element {i} is {}, expected {want}", got[i]))),
        }
    });
    if let Err(e) = result {
        eprintln!("error: {e}");
        return ExitCode::from(1);
    }
    for l in rt.history() {
        println!(
            "{:<16} on {:>3} PEs: {:>9.3} us simulated",
            l.kernel,
            l.pes,
            (l.end_ps - l.start_ps) as f64 / 1e6
        );
    }
    println!("machine clock at the end: {:.3} us", rt.now_ps() as f64 / 1e6);
    ExitCode::SUCCESS
}
