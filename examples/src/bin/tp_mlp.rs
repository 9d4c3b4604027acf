//! A Megatron-style tensor-parallel MLP: every rank (one per SIP) sets up
//! tensor parallelism over all ranks, builds a `ParallelMlp` from the same
//! full weights (each keeps its slice), runs the forward pass on 8 PEs of
//! its SIP (the tokens split by rows) and checks its output against the
//! MLP computed on the host. Then it prints the launches: the ranks' GEMMs
//! side by side in simulated time, the all-reduce after both.
//!
//! `cargo run --release -p kernbench-examples --bin tp_mlp`

use kernbench_runtime::host::{spawn, DpPolicy, HostError, Runtime};
use kernbench_runtime::topology::Topology;
use kernbench_runtime::tp::{initialize_model_parallel, ParallelMlp};
use ndarray::{Array1, Array2};
use std::process::ExitCode;

const TOKENS: usize = 256;
const HIDDEN: usize = 256;
const FFN: usize = 1024;

/// Small f16-exact values, different per seed.
fn weights(rows: usize, cols: usize, seed: usize) -> Array2<f32> {
    Array2::from_shape_fn((rows, cols), |(r, c)| {
        ((r * 7 + c * 13 + seed * 31) % 17) as f32 / 64.0 - 0.125
    })
}

fn main() -> ExitCode {
    let topo = Topology::default_machine();
    let mut rt = Runtime::new(&topo);
    let world = topo.sips();
    let x = weights(TOKENS, HIDDEN, 1);
    let (w1, w2) = (weights(HIDDEN, FFN, 2), weights(FFN, HIDDEN, 3));
    let (b1, b2) = (Array1::from_elem(FFN, 0.25f32), Array1::from_elem(HIDDEN, -0.5f32));
    // The host's MLP in f64, with the activation rounded to f16 as the
    // machine stores it.
    let h = (x.mapv(f64::from).dot(&w1.mapv(f64::from)) + &b1.mapv(f64::from))
        .mapv(|v| half::f16::from_f64(v / (1.0 + (-1.702 * v).exp())).to_f64());
    let want = h.dot(&w2.mapv(f64::from)) + &b2.mapv(f64::from);
    let policy = DpPolicy::row_wise(1, 8);
    let result = spawn(&mut rt, world, |rank, ctx| {
        let tp = initialize_model_parallel(ctx, world)?;
        let xt = ctx.from_ndarray(&x.mapv(half::f16::from_f32).into_dyn(), policy)?;
        let mlp = ParallelMlp::new(ctx, &tp, &w1, Some(&b1), &w2, Some(&b2), true, policy)?;
        let y = ctx.to_ndarray::<f32>(&mlp.forward(ctx, &xt)?)?;
        // f32 sums in another order than f64, and the few f16
        // activations that round the other way because of it.
        let worst = y
            .iter()
            .zip(want.iter())
            .map(|(g, w)| (f64::from(*g) - w).abs() / w.abs().max(1.0))
            .fold(0.0, f64::max);
        if worst > 1e-2 {
            return Err(HostError::new(format!("the output is off by {worst}")));
        }
        println!("rank {rank}/{world}: {TOKENS} x {HIDDEN} output matches the host's MLP (largest error {worst:.1e})");
        Ok(())
    });
    if let Err(e) = result {
        eprintln!("error: {e}");
        return ExitCode::from(1);
    }
    for l in rt.history() {
        let on = match l.device {
            Some(d) => format!("SIP {d}"),
            None => "all SIPs".to_string(),
        };
        println!(
            "{:<16} on {:>3} PEs ({on:<8}): {:>9.3} .. {:>9.3} us",
            l.kernel,
            l.pes,
            l.start_ps as f64 / 1e6,
            l.end_ps as f64 / 1e6
        );
    }
    println!("machine clock at the end: {:.3} us", rt.now_ps() as f64 / 1e6);
    ExitCode::SUCCESS
}
