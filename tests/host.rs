//! The host runtime as a user drives it: tensors over PEs, launches that
//! fan out over their shards, reads that wait for the work writing them,
//! collectives across ranks with `spawn`, failures, and the CCL registry's
//! errors.

use kernbench_compiler::sema::{DType, Konst};
use kernbench_runtime::ccl::registry::World;
use kernbench_runtime::ccl::{Collective, ReduceOp, Registry};
use kernbench_runtime::host::{spawn, Arg, Ctx, Dist, DpPolicy, Kernel, Runtime, Tensor};
use kernbench_runtime::topology::{PeCoord, Topology, DEFAULT_YAML};
use kernbench_tests::repo_root;
use ndarray::{ArrayD, IxDyn};

fn arr(shape: &[usize], f: impl Fn(usize) -> f32) -> ArrayD<f32> {
    let n: usize = shape.iter().product();
    ArrayD::from_shape_vec(IxDyn(shape), (0..n).map(f).collect()).unwrap()
}

/// The default machine with `sips` SIPs in a ring.
fn machine(sips: u32) -> Topology {
    let y = DEFAULT_YAML
        .replace("sips: 2", &format!("sips: {sips}"))
        .replace("sip_grid: [2, 1]", &format!("sip_grid: [{sips}, 1]"));
    Topology::parse("t.yaml", &y).expect("valid")
}

#[test]
fn launches_fan_out_over_shards_and_reads_wait_for_them() {
    let mut rt = Runtime::new(&Topology::default_machine());
    let add = compile_add(&rt, 256);
    let policy = DpPolicy::row_wise(1, 4);
    let x = rt.from_ndarray(&arr(&[1024], |i| i as f32), policy).unwrap();
    let y = rt.from_ndarray(&arr(&[1024], |i| 2.0 * i as f32), policy).unwrap();
    let out = rt.zeros(&[1024], DType::F32, policy).unwrap();
    assert_eq!(out.placement().len(), 4);
    assert_eq!(out.placement()[3].pe, PeCoord { sip: 0, cube: 0, pe: 3 });
    assert_eq!(out.placement()[3].rows, 768..1024);
    // Each PE adds its own 256-element shard (one program on each PE).
    rt.launch(
        &add,
        None,
        &[Arg::Tensor(&x), Arg::Tensor(&y), Arg::Tensor(&out), Arg::I32(256)],
    )
    .unwrap();
    assert_eq!(rt.pending_launches(), 1, "a launch is queued, not run");
    let before = rt.now_ps();
    let got: ArrayD<f32> = rt.to_ndarray(&out).unwrap();
    assert_eq!(rt.pending_launches(), 0, "the read ran the launch that writes `out`");
    assert!(got.iter().enumerate().all(|(i, v)| *v == 3.0 * i as f32));
    assert_eq!(rt.history().len(), 1);
    assert!(rt.now_ps() > before, "the launch and the copy back took simulated time");
    // A launch that touches another tensor is not run by reading `out`.
    let z = rt.zeros(&[1024], DType::F32, policy).unwrap();
    rt.launch(
        &add,
        None,
        &[Arg::Tensor(&x), Arg::Tensor(&x), Arg::Tensor(&z), Arg::I32(256)],
    )
    .unwrap();
    let _: ArrayD<f32> = rt.to_ndarray(&out).unwrap();
    assert_eq!(rt.pending_launches(), 1);
    let zz: ArrayD<f32> = rt.to_ndarray(&z).unwrap();
    assert!(zz.iter().enumerate().all(|(i, v)| *v == 2.0 * i as f32));
}

#[test]
fn policies_place_shards_structurally_and_round_trip() {
    let mut rt = Runtime::new(&Topology::default_machine());
    let a = arr(&[8, 6], |i| i as f32 * 0.5);
    for policy in [
        DpPolicy::replicate(2, 2),
        DpPolicy::row_wise(2, 2),
        DpPolicy::column_wise(1, 3),
        DpPolicy::tiled(2, 3, 2, 3),
        DpPolicy::row_wise(1, 2)
            .at(5, 4)
            .in_space(kernbench_runtime::topology::Space::Sram),
    ] {
        let t = rt.from_ndarray(&a, policy).unwrap();
        let back: ArrayD<f32> = rt.to_ndarray(&t).unwrap();
        assert_eq!(back, a, "{policy:?}");
    }
    let t = rt.from_ndarray(&a, DpPolicy::tiled(2, 3, 2, 3)).unwrap();
    let s = &t.placement()[4];
    assert_eq!((s.pe.cube, s.pe.pe, s.rows.clone(), s.cols.clone()), (1, 1, 4..8, 2..4));
    rt.set_device(1).unwrap();
    let u = rt.zeros(&[4], DType::I32, DpPolicy::default()).unwrap();
    assert_eq!(u.placement()[0].pe, PeCoord { sip: 1, cube: 0, pe: 0 });
    assert!(rt.set_device(2).is_err());
    assert!(
        rt.from_ndarray(&a, DpPolicy::row_wise(1, 3)).is_err(),
        "8 rows do not split in 3"
    );
    assert!(
        rt.zeros(&[4], DType::I32, DpPolicy::row_wise(1, 9)).is_err(),
        "a cube has 8 PEs"
    );
    // Shapes past any memory are errors before a host buffer is made: one
    // that does not fit a PE's HBM slice, one whose byte count wraps, one
    // whose element count wraps (to 0).
    for shape in [&[1usize << 40][..], &[1 << 61, 3], &[1 << 62, 4]] {
        let e = rt.zeros(shape, DType::F32, DpPolicy::default()).expect_err("too large");
        assert!(
            e.to_string().contains("does not fit") || e.to_string().contains("larger than any memory"),
            "{e}"
        );
    }
    let e = rt
        .full(&[1usize << 62, 4], 1.0f32, DpPolicy::default())
        .expect_err("too large");
    assert!(e.to_string().contains("larger than any memory"), "{e}");
    let e = rt
        .full(&[1usize << 40], 1.0f32, DpPolicy::default())
        .expect_err("too large");
    assert!(e.to_string().contains("does not fit"), "{e}");
    // So does a rank's `full` inside `spawn` (it used to build the host
    // buffer first, in the rank's thread).
    spawn(&mut rt, 1, |_, ctx| {
        let e = ctx
            .full(&[1usize << 62, 4], 1i32, DpPolicy::default())
            .expect_err("too large");
        assert!(e.to_string().contains("larger than any memory"), "{e}");
        Ok(())
    })
    .expect("the rank checks its error");
    // A barrier across a device the machine does not have.
    let e = rt.barrier_across(&[0, 7]).expect_err("no device 7");
    assert!(e.to_string().contains("the machine has 2 devices"), "{e}");
    assert_eq!(DpPolicy::tiled(1, 2, 1, 2).dist, Dist::Tiled { rows: 1, cols: 2 });
}

#[test]
fn ddp_all_reduce_across_ranks() {
    let mut rt = Runtime::new(&machine(4));
    // Each rank's tensor is split row-wise over 4 PEs of its SIP; every
    // rank fills it with rank + 1.
    spawn(&mut rt, 4, |rank, ctx| {
        ctx.init_process_group();
        let world = ctx.get_world_size();
        for (op, want) in [
            (ReduceOp::Sum, 10.0),
            (ReduceOp::Max, 4.0),
            (ReduceOp::Min, 1.0),
            (ReduceOp::Avg, 2.5),
        ] {
            let t = ctx.full(&[1000], (rank + 1) as f32, DpPolicy::row_wise(1, 4))?;
            ctx.all_reduce(&t, op)?;
            let got: ArrayD<f32> = ctx.to_ndarray(&t)?;
            if let Some((i, v)) = got.iter().enumerate().find(|(_, v)| **v != want) {
                return Err(kernbench_runtime::host::HostError::new(format!(
                    "rank {rank}/{world} {op:?}: element {i} is {v}, expected {want}"
                )));
            }
        }
        // Exact integer sums with another algorithm, per call.
        let t = ctx.full(&[777], (rank * 1000 + 7) as i32, DpPolicy::replicate(1, 2))?;
        ctx.all_reduce_with(&t, ReduceOp::Sum, Some("tree_allreduce"))?;
        let got: ArrayD<i32> = ctx.to_ndarray(&t)?;
        assert!(got.iter().all(|v| *v == 6028), "{:?}", &got.as_slice().unwrap()[..4]);
        Ok(())
    })
    .expect("every rank succeeds");
    assert_eq!(rt.pending_launches(), 0);
}

/// A collective across devices (a launch over several SIPs) gives the same
/// data and the same time on one thread and on two
/// (`Runtime::set_threads`).
#[test]
fn threads_do_not_change_a_collective_across_devices() {
    let run = |threads: usize| {
        let mut rt = Runtime::new(&machine(4));
        rt.set_threads(threads);
        let out = std::sync::Mutex::new(Vec::new());
        spawn(&mut rt, 4, |rank, ctx| {
            let t = ctx.full(&[4992], (rank * 3 + 1) as i32, DpPolicy::row_wise(2, 8))?;
            ctx.all_reduce(&t, ReduceOp::Sum)?;
            let got: ArrayD<i32> = ctx.to_ndarray(&t)?;
            if let Ok(mut o) = out.lock() {
                o.push((rank, got.iter().copied().collect::<Vec<i32>>()));
            }
            Ok(())
        })
        .expect("every rank succeeds");
        let mut out = out.into_inner().expect("lock");
        out.sort();
        let threads = rt.history().iter().map(|l| l.threads).max();
        ((out, rt.now_ps()), threads)
    };
    let (one, threads) = run(1);
    assert_eq!(threads, Some(1));
    assert!(
        one.0.iter().all(|(_, v)| v.iter().all(|x| *x == 1 + 4 + 7 + 10)),
        "exact sums"
    );
    // The all-reduce's shard groups interleave the SIPs in the launch: the
    // simulator groups its PEs by SIP, and it runs on two threads.
    let (two, threads) = run(2);
    assert_eq!(threads, Some(2));
    assert_eq!(two, one);
}

/// The tree all-gather moves values, not sums: -0.0, NaN payloads,
/// infinities and subnormals arrive bit for bit (a gather by summing with
/// zeros would turn -0.0 into +0.0). Five ranks, one per SIP: a tree of
/// depth 2 with short and missing subtrees.
#[test]
fn tree_all_gather_passes_every_bit() {
    let mut rt = Runtime::new(&machine(5));
    let n = 300usize;
    let bits = |rank: usize, i: usize| -> u32 {
        match i % 6 {
            0 => 0x8000_0000,                            // -0.0
            1 => 0x7fc0_0000 | (rank * 1000 + i) as u32, // a quiet NaN's payload
            2 => 0xff80_0000,                            // -inf
            3 => 0x0000_0001 + i as u32,                 // subnormals
            _ => (rank as f32 * 1000.0 + i as f32).to_bits(),
        }
    };
    spawn(&mut rt, 5, |rank, ctx| {
        let one = DpPolicy::default();
        let mine: Vec<f32> = (0..n).map(|i| f32::from_bits(bits(rank as usize, i))).collect();
        let mine = ctx.from_ndarray(&ArrayD::from_shape_vec(IxDyn(&[n]), mine).unwrap(), one)?;
        let all = ctx.zeros(&[5 * n], DType::F32, one)?;
        ctx.all_gather_with(&all, &mine, Some("tree_all_gather"))?;
        let got: ArrayD<f32> = ctx.to_ndarray(&all)?;
        for (k, v) in got.iter().enumerate() {
            let want = bits(k / n, k % n);
            if v.to_bits() != want {
                return Err(kernbench_runtime::host::HostError::new(format!(
                    "rank {rank}: element {k} has bits {:#010x}, expected {want:#010x}",
                    v.to_bits()
                )));
            }
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn gather_scatter_broadcast_point_to_point_and_barrier() {
    let mut rt = Runtime::new(&machine(3));
    spawn(&mut rt, 3, |rank, ctx| {
        let one = DpPolicy::default();
        let mine = ctx.full(&[5], rank as i32 + 1, one)?;
        let all = ctx.zeros(&[15], DType::I32, one)?;
        ctx.all_gather(&all, &mine)?;
        let g: ArrayD<i32> = ctx.to_ndarray(&all)?;
        assert_eq!(g.as_slice().unwrap(), &[1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3]);
        let src = ctx.from_ndarray(
            &ArrayD::from_shape_vec(IxDyn(&[6]), (0..6).map(|i| i + rank as i32).collect()).unwrap(),
            one,
        )?;
        let part = ctx.zeros(&[2], DType::I32, one)?;
        ctx.reduce_scatter(&part, &src, ReduceOp::Sum)?;
        let p: ArrayD<i32> = ctx.to_ndarray(&part)?;
        let base = 2 * rank as i32;
        assert_eq!(p.as_slice().unwrap(), &[3 * base + 3, 3 * base + 6]);
        let b = ctx.full(&[9], 10 * rank as i32, DpPolicy::row_wise(1, 3))?;
        ctx.broadcast(&b, 2)?;
        let bb: ArrayD<i32> = ctx.to_ndarray(&b)?;
        assert!(bb.iter().all(|v| *v == 20));
        ctx.barrier()?;
        // Rank 0 sends to rank 1; rank 2 sits it out.
        let buf = ctx.full(&[3000], rank as i32 * 5 + 1, DpPolicy::row_wise(1, 2))?;
        match rank {
            0 => ctx.send(&buf, 1)?,
            1 => {
                ctx.recv(&buf, 0)?;
                let r: ArrayD<i32> = ctx.to_ndarray(&buf)?;
                assert!(r.iter().all(|v| *v == 1));
            }
            _ => {}
        }
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{e}"));
}

/// `stdlib/kernels/add.tl`'s `add` with `BLOCK = block`.
fn compile_add(rt: &Runtime, block: i64) -> Kernel {
    rt.compile(
        repo_root().join("stdlib/kernels/add.tl"),
        "add",
        &[("BLOCK", Konst::Int(block))],
    )
    .expect("add compiles")
}

/// Inside a rank: queues `add` on a 10-element tensor with `n = 1000`,
/// which reads out of bounds when it runs; returns the tensor.
fn queue_out_of_bounds_add(ctx: &Ctx) -> kernbench_runtime::host::Result<Tensor> {
    let k = ctx.compile(
        repo_root().join("stdlib/kernels/add.tl"),
        "add",
        &[("BLOCK", Konst::Int(64))],
    )?;
    let x = ctx.full(&[10], 1.0f32, DpPolicy::default())?;
    ctx.launch(
        &k,
        None,
        &[Arg::Tensor(&x), Arg::Tensor(&x), Arg::Tensor(&x), Arg::I32(1000)],
    )?;
    Ok(x)
}

/// A collective that fails at run time on a registry setting says which
/// settings it ran with and where each is written, as `tlc bench ccl`
/// does.
#[test]
fn a_failed_collective_names_its_registry_settings() {
    let dir = std::env::temp_dir().join(format!("kernbench-host-note-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let yaml = dir.join("small_slots.yaml");
    std::fs::write(&yaml, "defaults:\n  slot_size_bytes: 100\n").expect("write the registry");
    let mut rt = Runtime::new(&machine(2));
    rt.load_registry(Some(&yaml)).expect("a valid registry");
    let e = spawn(&mut rt, 2, |_, ctx| {
        let t = ctx.full(&[4096], 1.0f32, DpPolicy::default())?;
        ctx.all_reduce(&t, ReduceOp::Sum)?;
        let _: ArrayD<f32> = ctx.to_ndarray(&t)?;
        Ok(())
    })
    .expect_err("messages of KiB in slots of 100 bytes");
    let text = e.to_string();
    assert!(text.contains("slots of 100 bytes"), "{text}");
    assert!(text.contains("= note: algorithm `"), "{text}");
    let at = format!("slot_size_bytes = 100 ({}:2: defaults.slot_size_bytes)", yaml.display());
    assert!(text.contains(&at), "{text}");
}

#[test]
fn spawn_reports_root_causes_and_stops_the_others() {
    let mut rt = Runtime::new(&machine(4));
    // Rank 2 fails; the others wait for it in a collective and are stopped.
    let e = spawn(&mut rt, 4, |rank, ctx| {
        let t = ctx.full(&[64], 1.0f32, DpPolicy::default())?;
        if rank == 2 {
            return Err(kernbench_runtime::host::HostError::new(
                "rank 2 could not load its data",
            ));
        }
        ctx.all_reduce(&t, ReduceOp::Sum)?;
        let _: ArrayD<f32> = ctx.to_ndarray(&t)?;
        Ok(())
    })
    .expect_err("a rank failed");
    assert_eq!(e.failures.len(), 1, "{e}");
    assert_eq!(e.failures[0].0, 2);
    assert!(
        e.to_string().contains("rank 2 failed: rank 2 could not load its data"),
        "{e}"
    );
    assert_eq!(rt.pending_launches(), 0, "no work is left behind");
    // Every rank failing (one by panicking): all are root causes.
    let e = spawn(&mut rt, 2, |rank, _ctx| {
        if rank == 0 {
            panic!("boom");
        }
        Err(kernbench_runtime::host::HostError::new("no"))
    })
    .expect_err("both fail");
    assert_eq!(e.failures.iter().map(|f| f.0).collect::<Vec<_>>(), vec![0, 1]);
    assert!(e.failures[0].1.message.contains("boom"));
    // Mismatched collectives are an error for every rank, not a hang.
    let e = spawn(&mut rt, 2, |rank, ctx| {
        let t = ctx.full(&[8], 1i32, DpPolicy::default())?;
        if rank == 0 {
            ctx.all_reduce(&t, ReduceOp::Sum)
        } else {
            ctx.broadcast(&t, 0)
        }
    })
    .expect_err("mismatch");
    assert!(e.to_string().contains("must match"), "{e}");
    // A simulated failure inside a launch surfaces at the read that needs it.
    let e = spawn(&mut rt, 1, |_, ctx| {
        let x = queue_out_of_bounds_add(ctx)?;
        let _: ArrayD<f32> = ctx.to_ndarray(&x)?;
        Ok(())
    })
    .expect_err("out of bounds");
    assert!(e.to_string().contains("outside every allocation"), "{e}");
    assert_eq!(rt.pending_launches(), 0);
}

#[test]
fn registry_errors_name_the_entry() {
    let root = repo_root().join("stdlib");
    let stdlib = Registry::stdlib(&root).expect("the stdlib registry is valid");
    let cube = World { ranks: 8, sips: 1 };
    let sip = World { ranks: 128, sips: 1 };
    let machine = World { ranks: 256, sips: 2 };
    let pick = |c: Collective, bytes: u64, on: World| stdlib.default_for(c, bytes, on).unwrap().name.clone();
    // Each row: bytes per rank, the communicator, the algorithm picked.
    let expect = |c: Collective, rows: &[(u64, World, &str)]| {
        for &(bytes, on, want) in rows {
            assert_eq!(pick(c, bytes, on), want, "{c:?}: {bytes} B on {on:?}");
        }
    };
    // Small buffers take recursive doubling (below 16 KiB per rank), then
    // the ring; from 128 ranks the tree below 512 KiB; over SIPs, on 256
    // ranks, the tree below 4 MiB, then the ring.
    expect(
        Collective::AllReduce,
        &[
            (4096, cube, "rd_allreduce"),
            (16383, cube, "rd_allreduce"),
            (16384, cube, "ring_allreduce"),
            (1 << 20, cube, "ring_allreduce"),
            (4096, World { ranks: 64, sips: 1 }, "tree_allreduce"),
            (65536, World { ranks: 64, sips: 1 }, "ring_allreduce"),
            (4096, sip, "tree_allreduce"),
            (524287, sip, "tree_allreduce"),
            (524288, sip, "ring_allreduce"),
            (4096, machine, "tree_allreduce"),
            (4194303, machine, "tree_allreduce"),
            (4194304, machine, "ring_allreduce"),
            // Fewer ranks over two SIPs: the tree only from 8 ranks, and below
            // less, then the ring; on 2 ranks recursive doubling below 64 KiB,
            // then the ring with 64 KiB messages.
            (4096, World { ranks: 2, sips: 2 }, "rd_allreduce"),
            (32768, World { ranks: 2, sips: 2 }, "rd_allreduce"),
            (65536, World { ranks: 2, sips: 2 }, "ring_allreduce_large"),
            // A band inside a band: from 8 ranks recursive doubling below
            // 32 KiB within the tree's 128 KiB (from 32 ranks, below 8 KiB).
            (4096, World { ranks: 8, sips: 2 }, "rd_allreduce"),
            (32767, World { ranks: 8, sips: 2 }, "rd_allreduce"),
            (32768, World { ranks: 8, sips: 2 }, "tree_allreduce"),
            (4096, World { ranks: 32, sips: 2 }, "rd_allreduce"),
            (8192, World { ranks: 32, sips: 2 }, "tree_allreduce"),
            (65536, World { ranks: 8, sips: 2 }, "tree_allreduce"),
            (131072, World { ranks: 8, sips: 2 }, "ring_allreduce"),
            (1 << 20, World { ranks: 8, sips: 2 }, "ring_allreduce"),
            (131072, World { ranks: 64, sips: 2 }, "tree_allreduce"),
            (262144, World { ranks: 64, sips: 2 }, "ring_allreduce"),
            (16 << 20, World { ranks: 64, sips: 2 }, "ring_allreduce"),
            // From 32 ranks on one SIP the tree below 64 KiB, recursive
            // doubling below 8 KiB; from 16 over SIPs recursive doubling below
            // 16 KiB.
            (4096, World { ranks: 32, sips: 1 }, "rd_allreduce"),
            (8192, World { ranks: 32, sips: 1 }, "tree_allreduce"),
            (65536, World { ranks: 32, sips: 1 }, "ring_allreduce"),
            (16383, World { ranks: 16, sips: 2 }, "rd_allreduce"),
            (16384, World { ranks: 16, sips: 2 }, "tree_allreduce"),
            // Levels one above a power of two start bands of their own:
            // recursive doubling on 17 to 31 ranks below 8 KiB, on 33 to 63
            // below 2 KiB, then the tree; over SIPs, 6 ranks take the tree.
            (8191, World { ranks: 24, sips: 1 }, "rd_allreduce"),
            (16384, World { ranks: 24, sips: 1 }, "tree_allreduce"),
            (2047, World { ranks: 48, sips: 1 }, "rd_allreduce"),
            (4096, World { ranks: 48, sips: 1 }, "tree_allreduce"),
            (32768, World { ranks: 6, sips: 2 }, "tree_allreduce"),
            (262144, World { ranks: 6, sips: 2 }, "ring_allreduce"),
            // 129 to 255 ranks over SIPs: the tree to 2 MiB, the mesh from
            // 48 KiB on 146 to 203.
            (262144, World { ranks: 129, sips: 2 }, "tree_allreduce"),
            (49151, World { ranks: 192, sips: 2 }, "tree_allreduce"),
            (49152, World { ranks: 192, sips: 2 }, "mesh_allreduce"),
            (2 << 20, World { ranks: 192, sips: 2 }, "ring_allreduce"),
            (65536, World { ranks: 240, sips: 2 }, "tree_allreduce"),
        ],
    );
    // Reduce-scatter (bytes: a rank's whole input): the tree on many ranks
    // and small buffers (from 8 ranks below 8 KiB), the ring otherwise; over SIPs from 32 ranks the
    // one-SIP levels' wider tree bands do not apply.
    expect(
        Collective::ReduceScatter,
        &[
            (4095, cube, "tree_reduce_scatter"),
            (8192, cube, "reduce_scatter"),
            (16383, World { ranks: 16, sips: 1 }, "tree_reduce_scatter"),
            (16384, World { ranks: 16, sips: 1 }, "reduce_scatter"),
            (65535, World { ranks: 64, sips: 1 }, "tree_reduce_scatter"),
            (524287, sip, "tree_reduce_scatter"),
            (524288, sip, "reduce_scatter"),
            (16384, World { ranks: 32, sips: 2 }, "tree_reduce_scatter"),
            (32768, World { ranks: 32, sips: 2 }, "reduce_scatter"),
            (65536, World { ranks: 64, sips: 2 }, "tree_reduce_scatter"),
            (131072, World { ranks: 64, sips: 2 }, "reduce_scatter"),
            (524287, World { ranks: 128, sips: 2 }, "tree_reduce_scatter"),
            (524288, World { ranks: 128, sips: 2 }, "reduce_scatter"),
            (1048575, machine, "tree_reduce_scatter"),
            (1048576, machine, "reduce_scatter"),
        ],
    );
    // A level that names nothing for a collective leaves it to the next.
    assert_eq!(pick(Collective::Broadcast, 64, machine), "broadcast");
    // The tree all-gather below a few hundred bytes per rank from 32 ranks
    // (over SIPs below 256 bytes on 32 to 63, then 1 KiB, then 2 KiB), the
    // ring otherwise.
    expect(
        Collective::AllGather,
        &[
            (64, World { ranks: 16, sips: 1 }, "all_gather"),
            (127, World { ranks: 32, sips: 1 }, "tree_all_gather"),
            (128, World { ranks: 32, sips: 1 }, "all_gather"),
            (511, sip, "tree_all_gather"),
            (512, sip, "all_gather"),
            (255, World { ranks: 32, sips: 2 }, "tree_all_gather"),
            (256, World { ranks: 32, sips: 2 }, "all_gather"),
            (1023, World { ranks: 64, sips: 2 }, "tree_all_gather"),
            (1024, World { ranks: 64, sips: 2 }, "all_gather"),
            (2047, World { ranks: 128, sips: 2 }, "tree_all_gather"),
            (2047, machine, "tree_all_gather"),
            (2048, machine, "all_gather"),
        ],
    );
    let bands = stdlib.default_bands(Collective::AllReduce, sip).unwrap();
    assert_eq!(
        bands,
        [
            (0, "tree_allreduce".to_string()),
            (524288, "ring_allreduce".to_string())
        ]
    );
    let bands = stdlib
        .default_bands(Collective::AllReduce, World { ranks: 16, sips: 1 })
        .unwrap();
    assert_eq!(
        bands,
        [(0, "rd_allreduce".to_string()), (16384, "ring_allreduce".to_string())]
    );
    let bands = stdlib
        .default_bands(Collective::AllReduce, World { ranks: 8, sips: 2 })
        .unwrap();
    assert_eq!(
        bands,
        [
            (0, "rd_allreduce".to_string()),
            (32768, "tree_allreduce".to_string()),
            (131072, "ring_allreduce".to_string())
        ]
    );
    // A user file that names a collective in a level's `small` bands
    // decides that collective's bands there: the stdlib's two for the
    // all-reduce on 8 ranks over SIPs go, its plain choice stays.
    let mut mine = Registry::stdlib(&root).unwrap();
    mine.merge_text(
        "my_ccl.yaml",
        &root,
        "defaults:\n  across_sips:\n    from_ranks:\n      8:\n        small: {below_bytes: 1024, all_reduce: ring_allreduce_sram}\n",
    )
    .expect("merges");
    assert_eq!(
        mine.default_bands(Collective::AllReduce, World { ranks: 8, sips: 2 })
            .unwrap(),
        [
            (0, "ring_allreduce_sram".to_string()),
            (1024, "ring_allreduce".to_string())
        ]
    );
    // A user file's levels merge over the stdlib's, and a wrong name is
    // reported at its key.
    let mut mine = Registry::stdlib(&root).unwrap();
    mine.merge_text(
        "my_ccl.yaml",
        &root,
        "defaults:\n  from_ranks:\n    128:\n      all_reduce: mesh_allreduce\n",
    )
    .expect("merges");
    assert_eq!(
        mine.default_for(Collective::AllReduce, 1 << 30, sip).unwrap().name,
        "mesh_allreduce"
    );
    assert_eq!(
        mine.default_for(Collective::AllReduce, 4096, sip).unwrap().name,
        "tree_allreduce"
    );
    // A collective a user's plain defaults name is theirs everywhere: the
    // stdlib's levels no longer name it (theirs still may).
    let mut mine = Registry::stdlib(&root).unwrap();
    mine.merge_text(
        "my_ccl.yaml",
        &root,
        "defaults:\n  all_reduce: hierarchical_allreduce\n  across_sips:\n    small: {below_bytes: 1024, all_reduce: tree_allreduce}\n",
    )
    .expect("merges");
    for (bytes, on, want) in [
        // The stdlib's plain `small.all_reduce` is another key: it stays.
        (4096, cube, "rd_allreduce"),
        (1 << 20, cube, "hierarchical_allreduce"),
        // The stdlib's from_ranks.128 (the tree below 512 KiB) is gone...
        (65536, sip, "hierarchical_allreduce"),
        // ...and so are its across_sips levels, but not the user's own.
        (512, machine, "tree_allreduce"),
        (1 << 20, machine, "hierarchical_allreduce"),
    ] {
        assert_eq!(
            mine.default_for(Collective::AllReduce, bytes, on).unwrap().name,
            want,
            "{bytes} B on {on:?}"
        );
    }
    // The stdlib's levels still decide the other collectives.
    assert_eq!(
        mine.default_for(Collective::AllGather, 64, machine).unwrap().name,
        "tree_all_gather"
    );
    let e = Registry::stdlib(&root)
        .unwrap()
        .merge_text(
            "my_ccl.yaml",
            &root,
            "defaults:\n  across_sips:\n    small:\n      below_bytes: 1024\n      all_reduce: nope\n",
        )
        .expect_err("no such algorithm")
        .to_string();
    assert!(
        e.contains("my_ccl.yaml:5: defaults.across_sips.small.all_reduce: no algorithm `nope` is registered"),
        "{e}"
    );
    let e = Registry::stdlib(&root)
        .unwrap()
        .merge_text(
            "my_ccl.yaml",
            &root,
            "defaults:\n  from_ranks:\n    8:\n      all_reduce: all_gather\n",
        )
        .expect_err("not an all-reduce")
        .to_string();
    assert!(
        e.contains("my_ccl.yaml:4: defaults.from_ranks.8.all_reduce: `all_gather` is an algorithm for all_gather"),
        "{e}"
    );
    let dir = std::env::temp_dir().join(format!("kb-reg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("mine.tl"),
        "@kernel\ndef mine(buf: ptr[T], n_elem: f32, T: constexpr = f32):\n    pass\n",
    )
    .unwrap();
    let try_yaml = |text: &str| -> String {
        let mut r = Registry::stdlib(&root).unwrap();
        match r.merge_text("my_ccl.yaml", &dir, text) {
            Err(e) => e.to_string(),
            Ok(()) => {
                let a = r.get("mine").unwrap().clone();
                r.compile(&a, DType::F32, ReduceOp::Sum, &[]).err().unwrap_or_default()
            }
        }
    };
    let e = try_yaml(
        "algorithms:\n  mine:\n    collective: all_reduce\n    module: nope.tl\n    kernel: mine\n    topology: ring\n",
    );
    // Errors about the module and the kernel name their key and its line.
    assert!(
        e.contains("my_ccl.yaml:4: algorithms.mine.module: cannot read `") && e.contains("nope.tl`"),
        "{e}"
    );
    let e = try_yaml(
        "algorithms:\n  mine:\n    collective: all_reduce\n    module: mine.tl\n    kernel: mine\n    topology: ring\n    constexprs:\n      T: 5\n",
    );
    assert!(
        e.contains("my_ccl.yaml:8: algorithms.mine.constexprs.T: `T` is bound by the runtime for each run"),
        "{e}"
    );
    let e = try_yaml("algorithms:\n  mine:\n    collective: all_reduce\n    module: mine.tl\n    kernel: other\n    topology: ring\n");
    assert!(
        e.contains("my_ccl.yaml:5: algorithms.mine.kernel: module `")
            && e.contains("has no kernel `other` (kernels: mine)"),
        "{e}"
    );
    // A default pinned to its first N PEs would run on fewer ranks than
    // the collective was called on.
    let e = try_yaml(
        "defaults:\n  all_reduce: mine\nalgorithms:\n  mine:\n    collective: all_reduce\n    module: mine.tl\n    kernel: mine\n    topology: ring\n    world_size: 2\n",
    );
    assert!(
        e.contains("my_ccl.yaml:2: defaults.all_reduce: `mine` runs on its first 2 PEs only (`world_size`), so it cannot be a default"),
        "{e}"
    );
    let e = try_yaml(
        "algorithms:\n  mine:\n    collective: all_reduce\n    module: mine.tl\n    kernel: mine\n    topology: ring\n",
    );
    assert!(
        e.contains("must take (buf: ptr[T], n_elem: i32) for an all_reduce algorithm") && e.contains("n_elem: f32"),
        "{e}"
    );
    // A kernel of one element type, or without `OP`, run for another type
    // or reduction: refused, not run on the wrong bytes or as a sum.
    std::fs::write(
        dir.join("sum_f32.tl"),
        "@kernel\ndef sum_f32(buf: ptr[f32], n_elem: i32):\n    pass\n",
    )
    .unwrap();
    let mut r = Registry::stdlib(&root).unwrap();
    r.merge_text(
        "my_ccl.yaml",
        &dir,
        "algorithms:\n  sum_f32:\n    collective: all_reduce\n    module: sum_f32.tl\n    kernel: sum_f32\n    topology: ring\n",
    )
    .expect("registers");
    let a = r.get("sum_f32").unwrap().clone();
    assert!(r.compile(&a, DType::F32, ReduceOp::Sum, &[]).is_ok());
    let e = r.compile(&a, DType::I32, ReduceOp::Sum, &[]).err().unwrap_or_default();
    assert!(
        e.contains("with T = i32 here, but takes (buf: ptr[f32], n_elem: i32)"),
        "{e}"
    );
    let e = r.compile(&a, DType::F32, ReduceOp::Max, &[]).err().unwrap_or_default();
    assert!(
        e.contains("kernel `sum_f32` declares no `OP` constexpr, so it cannot be told to max"),
        "{e}"
    );
    let e = try_yaml("algorithms:\n  mine:\n    collective: all_reduce\n    module: mine.tl\n    kernel: mine\n    topology: ring\n    constexprs: {CHUNK: 8}\n");
    // In a flow mapping the key's line is its mapping's.
    assert!(
        e.contains("my_ccl.yaml:7: algorithms.mine.constexprs.CHUNK: kernel `mine` has no constexpr `CHUNK`"),
        "{e}"
    );
    // A constexpr of another kind than the kernel's default is reported at
    // its key (an integer may stand for a float); one the kernel has no
    // default for, when it breaks the kernel, names the values and where
    // in the kernel it broke.
    std::fs::write(
        dir.join("sized.tl"),
        "@kernel\ndef mine(buf: ptr[T], n_elem: i32, CB: constexpr, T: constexpr = f32, OP: constexpr = 0, \
         CH: constexpr = 64, SCALE: constexpr = 0.5):\n    offs = tl.arange(0, CB)\n    \
         tl.store(buf + offs, tl.load(buf + offs, mask=offs < n_elem) * SCALE, mask=offs < n_elem)\n",
    )
    .unwrap();
    let sized = |constexprs: &str| {
        try_yaml(&format!(
            "algorithms:\n  mine:\n    collective: all_reduce\n    module: sized.tl\n    kernel: mine\n    topology: ring\n    constexprs:\n{constexprs}"
        ))
    };
    assert_eq!(sized("      SCALE: 2\n      CH: 8\n      CB: 16\n"), "");
    let e = sized("      SCALE: 2\n      CH: \"big\"\n      CB: 16\n");
    assert!(
        e.ends_with(
            "my_ccl.yaml:9: algorithms.mine.constexprs.CH: `CH` is \"big\", a string, \
             but kernel `mine` declares it with the default 64, an integer"
        ),
        "{e}"
    );
    let e = sized("      CH: 12.5\n      CB: 16\n");
    assert!(e.contains("constexprs.CH: `CH` is 12.5, a float, but kernel"), "{e}");
    let e = try_yaml(
        "algorithms:\n  mine:\n    collective: all_reduce\n    module: sized.tl\n    kernel: mine\n    topology: ring\n    constexprs: {CB: 16, CH: 2.5}\n",
    );
    assert!(
        e.contains("my_ccl.yaml:7: algorithms.mine.constexprs.CH: `CH` is 2.5, a float"),
        "{e}"
    );
    let e = sized("      SCALE: f16\n      CB: 16\n");
    assert!(
        e.contains("my_ccl.yaml:8: algorithms.mine.constexprs.SCALE: `SCALE` is f16, a dtype"),
        "{e}"
    );
    let e = sized("      CB: 2.5\n      CH: 8\n");
    assert!(
        e.contains("my_ccl.yaml:2: algorithm `mine`: kernel `mine` does not compile with CB=2.5, CH=8: ")
            && e.contains("sized.tl:3:25: E0320: `tl.arange` bounds must be integers"),
        "{e}"
    );
    let e = try_yaml(
        "algorithms:\n  mine:\n    collective: al_reduce\n    module: mine.tl\n    kernel: mine\n    topology: ring\n",
    );
    assert!(
        e.starts_with("my_ccl.yaml:3: algorithms.mine.collective: unknown variant `al_reduce`"),
        "{e}"
    );
    let e = try_yaml("defaults:\n  all_reduce: missing\n");
    assert!(
        e.starts_with("my_ccl.yaml:2: defaults.all_reduce: no algorithm `missing`"),
        "{e}"
    );
    let e = try_yaml("defaults:\n  small:\n    below_bytes: 64\n    all_reduce: missing\n");
    assert!(
        e.starts_with("my_ccl.yaml:4: defaults.small.all_reduce: no algorithm `missing`"),
        "{e}"
    );
    let e = try_yaml("defaults:\n  small:\n    below_bytes: 64\n    all_gather: rd_allreduce\n");
    assert!(
        e.contains("defaults.small.all_gather: `rd_allreduce` is an algorithm for all_reduce, not for all_gather"),
        "{e}"
    );
    let e = try_yaml("defaults:\n  small:\n    all_reduce: rd_allreduce\n");
    assert!(e.contains("defaults.small") && e.contains("below_bytes"), "{e}");
    let e = try_yaml(
        "defaults:\n  across_sips:\n    small:\n      below_bytes: 1024\n      small:\n        below_bytes: 4096\n        all_reduce: tree_allreduce\n",
    );
    assert!(
        e.starts_with(
            "my_ccl.yaml:6: defaults.across_sips.small.small.below_bytes: 4096 is not below the enclosing `small`'s \
             below_bytes (1024)"
        ),
        "{e}"
    );
    // A level's key is a number of ranks, at least 1, named with its line
    // (it was `defaults.from_ranks.?`, and 0 was taken).
    for (key, line, at) in [
        ("-1", 3, "from_ranks"),
        ("0", 3, "from_ranks"),
        ("many", 4, "across_sips.from_ranks"),
    ] {
        let text = match at {
            "from_ranks" => format!("defaults:\n  from_ranks:\n    {key}:\n      all_reduce: ring_allreduce\n"),
            _ => format!(
                "defaults:\n  across_sips:\n    from_ranks:\n      {key}:\n        all_reduce: ring_allreduce\n"
            ),
        };
        let e = try_yaml(&text);
        let want = format!("my_ccl.yaml:{line}: defaults.{at}.{key}: a level's key is a number of ranks, at least 1");
        assert!(e.starts_with(&want), "{e}");
    }
    // A default redefined for another collective is blamed at its own key.
    let e = try_yaml(
        "algorithms:\n  ring_allreduce:\n    collective: broadcast\n    module: mine.tl\n    kernel: mine\n    topology: ring\n",
    );
    assert!(
        e.starts_with(
            "my_ccl.yaml:3: algorithms.ring_allreduce.collective: `ring_allreduce` is the all_reduce default \
             (defaults.all_reduce), so it must stay an algorithm for all_reduce, not broadcast"
        ),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Queues do not outlive a launch: a kernel that leaves a message nobody
/// received fails, at its send, instead of losing the data silently.
#[test]
fn a_launch_that_leaves_messages_unreceived_fails() {
    let dir = std::env::temp_dir().join(format!("kb-host-leak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("leak.tl");
    std::fs::write(
        &file,
        "@kernel\ndef leak(x: ptr[f32]):\n    offs = tl.arange(0, 4)\n    if tl.rank() == 0:\n        \
         tl.send(1, tl.load(x + offs))\n",
    )
    .unwrap();
    let mut rt = Runtime::new(&Topology::default_machine());
    let leak = rt.compile(&file, "leak", &[]).expect("compiles");
    let x = rt
        .from_ndarray(&arr(&[8], |i| i as f32), DpPolicy::row_wise(1, 2))
        .unwrap();
    rt.launch(&leak, None, &[Arg::Tensor(&x)]).unwrap();
    let e = rt.synchronize().expect_err("a message was left behind").to_string();
    assert!(
        e.contains("error: `leak` ended with 1 message sent and never received")
            && e.contains("leak.tl:5:9")
            && e.contains("rank 0 (sip 0, cube 0, pe 0) sent rank 1 (sip 0, cube 0, pe 1) 1 message (16 bytes)"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A launch that fails takes its tensors' contents with it, and so do the
/// launches queued after it, which are dropped unrun: reading any of them
/// is an error naming why (not stale data) until `copy_from` writes it
/// anew, and a launch that takes one is refused.
#[test]
fn a_failed_launch_leaves_its_tensors_and_the_dropped_ones_undefined() {
    let mut rt = Runtime::new(&Topology::default_machine());
    let add = compile_add(&rt, 64);
    let p = DpPolicy::default();
    let x = rt.full(&[10], 1.0f32, p).unwrap();
    let (y, z) = (
        rt.full(&[10], 1.0f32, p).unwrap(),
        rt.zeros(&[10], DType::F32, p).unwrap(),
    );
    fn tensors<'a>(a: &'a Tensor, b: &'a Tensor, c: &'a Tensor, n: i32) -> [Arg<'a>; 4] {
        [Arg::Tensor(a), Arg::Tensor(b), Arg::Tensor(c), Arg::I32(n)]
    }
    // Out of bounds: 1000 elements of a 10-element tensor.
    rt.launch(&add, None, &tensors(&x, &x, &x, 1000)).unwrap();
    rt.launch(&add, None, &tensors(&y, &y, &z, 10)).unwrap();
    let e = rt.to_ndarray::<f32>(&z).expect_err("the first launch fails");
    assert!(e.message.contains("outside every allocation"), "{e}");
    assert_eq!(rt.pending_launches(), 0);
    let e = rt.to_ndarray::<f32>(&z).expect_err("z was never computed");
    assert!(
        e.message
            .contains("not defined: its launch of `add` was not run: an earlier launch (`add`) failed"),
        "{e}"
    );
    let e = rt.to_ndarray::<f32>(&x).expect_err("x's launch failed");
    assert!(e.message.contains("the launch of `add` that takes it failed"), "{e}");
    let e = rt.launch(&add, None, &tensors(&y, &y, &x, 10)).expect_err("refused");
    assert!(
        e.message
            .starts_with("argument `x`: the tensor's contents are not defined"),
        "{e}"
    );
    // Written anew, x is defined again; an untouched tensor never stopped being.
    rt.copy_from(&x, &arr(&[10], |i| i as f32)).unwrap();
    rt.launch(&add, None, &tensors(&x, &x, &x, 10)).unwrap();
    let got = rt.to_ndarray::<f32>(&x).unwrap();
    assert!(got.iter().enumerate().all(|(i, v)| *v == 2.0 * i as f32), "{got}");
}

/// A host launch has `tlc run`'s time limit (settable), so a kernel that
/// never ends is an error instead of a hang; scalar arguments are taken
/// only where their value survives the parameter's dtype.
#[test]
fn host_launches_have_a_time_limit_and_scalars_do_not_change() {
    let mut rt = Runtime::new(&Topology::default_machine());
    let src = "@kernel\ndef spin(x: ptr[i32], n: i32, on: bool, h: f16):\n    i = 0\n    while i < n:\n        \
               i = i + 0\n    tl.store(x, i)\n";
    let spin = rt.compile_source("spin.tl", None, src, "spin", &[]).unwrap();
    let x = rt.zeros(&[1], DType::I32, DpPolicy::default()).unwrap();
    let mut args = |n: Arg<'_>, on: Arg<'_>, h: Arg<'_>| rt.launch(&spin, None, &[Arg::Tensor(&x), n, on, h]).err();
    for (n, on, h, want) in [
        (
            Arg::I64(5_000_000_000),
            Arg::Bool(true),
            Arg::F32(1.0),
            "argument `n`: 5000000000 does not fit in i32",
        ),
        (
            Arg::F32(2.7),
            Arg::Bool(true),
            Arg::F32(1.0),
            "argument `n` is i32: pass an integer, not a float",
        ),
        (
            Arg::I32(0),
            Arg::I32(2),
            Arg::F32(1.0),
            "argument `on` is bool: 2 is neither 0 nor 1",
        ),
        (
            Arg::I32(0),
            Arg::Bool(true),
            Arg::F32(1e6),
            "argument `h`: 1000000 does not fit in f16",
        ),
    ] {
        let e = args(n, on, h).expect("refused");
        assert_eq!(e.message, want);
    }
    assert_eq!(rt.pending_launches(), 0);
    // The edges that fit are taken.
    rt.launch(
        &spin,
        None,
        &[
            Arg::Tensor(&x),
            Arg::I64(i64::from(i32::MIN)),
            Arg::I32(1),
            Arg::F32(65504.0),
        ],
    )
    .unwrap();
    assert_eq!(rt.to_ndarray::<i32>(&x).unwrap()[[0]], 0);
    rt.set_time_limit_ps(Some(2_000_000));
    rt.launch(
        &spin,
        None,
        &[Arg::Tensor(&x), Arg::I32(1), Arg::Bool(true), Arg::F32(0.5)],
    )
    .unwrap();
    let e = rt.synchronize().expect_err("it never ends");
    assert!(
        e.message.contains("did not finish within its time limit of 2.000 us"),
        "{e}"
    );
}

/// Inside `spawn`: a rank whose wait ran another rank's failed launch
/// reports that rank as the root cause; sends and receives that cannot
/// pair up say why, naming the real ranks; and the caller's device is
/// back afterwards.
#[test]
fn spawn_names_the_rank_at_fault_and_restores_the_device() {
    let mut rt = Runtime::new(&machine(4));
    rt.set_device(1).unwrap();
    let e = spawn(&mut rt, 2, |rank, ctx| {
        if rank == 0 {
            queue_out_of_bounds_add(ctx)?;
            ctx.barrier()
        } else {
            ctx.barrier()?;
            ctx.synchronize()
        }
    })
    .expect_err("rank 0's launch fails");
    assert_eq!(e.failures.len(), 1, "{e}");
    assert_eq!(e.failures[0].0, 0, "{e}");
    assert!(e.failures[0].1.message.contains("outside every allocation"), "{e}");
    assert_eq!(rt.device(), 1, "spawn gives the caller's device back");
    // Two ranks sending to each other wait for each other.
    let e = spawn(&mut rt, 2, |rank, ctx| {
        let t = ctx.full(&[8], 1i32, DpPolicy::default())?;
        ctx.send(&t, 1 - rank)
    })
    .expect_err("deadlock");
    assert!(
        e.to_string()
            .contains("every rank waits in a send or receive and none pair up (rank 0 in send to rank 1, rank 1 in send to rank 0): a deadlock"),
        "{e}"
    );
    let e = spawn(&mut rt, 2, |rank, ctx| {
        let t = ctx.full(&[8], 1i32, DpPolicy::default())?;
        if rank == 0 {
            ctx.send(&t, 7)?;
        }
        Ok(())
    })
    .expect_err("no rank 7");
    assert!(
        e.to_string()
            .contains("rank 0: send to rank 7: not a rank (world size 2)"),
        "{e}"
    );
    let e = spawn(&mut rt, 4, |rank, ctx| match rank {
        2 => ctx.send(&ctx.full(&[8], 1i32, DpPolicy::default())?, 3),
        3 => ctx.recv(&ctx.full(&[8], 0.0f32, DpPolicy::default())?, 2),
        _ => Ok(()),
    })
    .expect_err("dtypes differ");
    assert!(
        e.to_string()
            .contains("send/recv: rank 3's tensor is f32[8] on 1 PEs, rank 2's i32[8] on 1 PEs"),
        "{e}"
    );
}

/// `load_registry` replaces an algorithm of the same name, compiled anew;
/// an algorithm that uses `tl.symm_at` is refused by the host API, whose
/// ranks' tensors are no symmetric buffer.
#[test]
fn host_collectives_follow_the_registry_and_refuse_symm_at() {
    let dir = std::env::temp_dir().join(format!("kb-host-reg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("noop.tl"),
        "@kernel\ndef noop(buf: ptr[T], n_elem: i32, T: constexpr = f32, OP: constexpr = 0):\n    pass\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("put.tl"),
        "@kernel\ndef put(buf: ptr[T], n_elem: i32, T: constexpr = f32, OP: constexpr = 0):\n    \
         offs = tl.arange(0, 8)\n    tl.store(tl.symm_at(buf + offs, 0), tl.load(buf + offs))\n",
    )
    .unwrap();
    let entry = |name: &str, module: &str, kernel: &str| {
        format!(
            "  {name}:\n    collective: all_reduce\n    module: {module}\n    kernel: {kernel}\n    topology: ring\n"
        )
    };
    let yaml = dir.join("ccl.yaml");
    std::fs::write(
        &yaml,
        format!(
            "algorithms:\n{}{}",
            entry("rd_allreduce", "noop.tl", "noop"),
            entry("put", "put.tl", "put")
        ),
    )
    .unwrap();
    let mut rt = Runtime::new(&machine(2));
    let sums = |rt: &mut Runtime, algo: &'static str| {
        let got = std::sync::Mutex::new(Vec::new());
        spawn(rt, 2, |rank, ctx| {
            let t = ctx.full(&[8], rank as i32 + 1, DpPolicy::default())?;
            ctx.all_reduce_with(&t, ReduceOp::Sum, Some(algo))?;
            // Read before locking: a rank holding the lock while the
            // runtime waits for every rank to ask would wait forever.
            let first = ctx.to_ndarray::<i32>(&t)?[[0]];
            got.lock().unwrap().push((rank, first));
            Ok(())
        })
        .map(|_| {
            let mut v = got.into_inner().unwrap();
            v.sort();
            v
        })
    };
    assert_eq!(sums(&mut rt, "rd_allreduce").unwrap(), vec![(0, 3), (1, 3)]);
    rt.load_registry(Some(&yaml)).unwrap();
    assert_eq!(
        sums(&mut rt, "rd_allreduce").unwrap(),
        vec![(0, 1), (1, 2)],
        "the registry's new rd_allreduce (a no-op) runs"
    );
    let e = sums(&mut rt, "put").expect_err("refused");
    assert!(
        e.to_string().contains("algorithm `put` uses `tl.symm_at` (") && e.to_string().contains("put.tl:4:"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tensor's memory goes back when its last handle is dropped, but not
/// before the queued launches that take it have run.
#[test]
fn dropped_tensors_give_their_memory_back() {
    use kernbench_runtime::topology::Space;
    let mut rt = Runtime::new(&Topology::default_machine());
    let tcm = DpPolicy::default().in_space(Space::Tcm);
    // 800 KB each in a 1 MiB TCM: only one at a time fits.
    for _ in 0..3 {
        let t = rt.zeros(&[200_000], DType::F32, tcm).unwrap();
        drop(t);
    }
    let add = compile_add(&rt, 1024);
    let n = 100_000;
    let x = rt.full(&[n], 1.5f32, tcm).unwrap();
    let out = rt.zeros(&[n], DType::F32, DpPolicy::default()).unwrap();
    rt.launch(
        &add,
        Some([98, 1, 1]),
        &[Arg::Tensor(&x), Arg::Tensor(&x), Arg::Tensor(&out), Arg::I32(n as i32)],
    )
    .unwrap();
    let copy = x.clone();
    drop(x);
    drop(copy);
    // x's 400 KB stay while its launch is queued: 400 KB more fit, 800 do not.
    let y = rt.zeros(&[n], DType::F32, tcm).unwrap();
    let e = rt.zeros(&[n], DType::F32, tcm).expect_err("x is still there");
    assert!(e.message.contains("does not fit in the TCM"), "{e}");
    rt.synchronize().unwrap();
    let z = rt.zeros(&[n], DType::F32, tcm).expect("x is gone once its launch ran");
    assert!(rt.to_ndarray::<f32>(&out).unwrap().iter().all(|v| *v == 3.0));
    drop((y, z));
}

#[test]
fn a_launch_on_one_sip_reaches_no_other_and_a_failed_one_moves_its_clock() {
    let mut rt = Runtime::new(&Topology::default_machine());
    rt.set_device(1).unwrap();
    let far = rt.zeros(&[256], DType::F32, DpPolicy::default()).unwrap();
    rt.set_device(0).unwrap();
    let near = rt.zeros(&[256], DType::F32, DpPolicy::default()).unwrap();
    let src = "@kernel\ndef poke(p: ptr[f32], off: i64):\n    tl.store(p + off + tl.arange(0, 64), tl.zeros((64,), dtype=f32))\n";
    let poke = rt.compile_source("poke.tl", None, src, "poke", &[]).unwrap();
    let off = (far.placement()[0].base as i64 - near.placement()[0].base as i64) / 4;
    // `near` is on SIP 0 alone, so the launch runs on SIP 0's clock and
    // may not write SIP 1's memory (it would book SIP 1's links on
    // another clock).
    rt.launch(&poke, None, &[Arg::Tensor(&near), Arg::I64(off)]).unwrap();
    let e = rt.synchronize().expect_err("a write into SIP 1").to_string();
    assert!(
        e.contains("on another SIP: this launch's PEs and tensors are all on SIP 0, and it may reach no other"),
        "{e}"
    );
    // A launch that stops at its time limit has booked links up to then:
    // its SIP's clock moves past them, the other SIP's stays.
    let before = (rt.device_now_ps(0).unwrap(), rt.device_now_ps(1).unwrap());
    let src = "@kernel\ndef churn(p: ptr[f32]):\n    i = 0\n    while i < 1:\n        \
               tl.store(p + tl.arange(0, 64), tl.load(p + tl.arange(0, 64)))\n";
    let churn = rt.compile_source("churn.tl", None, src, "churn", &[]).unwrap();
    rt.set_time_limit_ps(Some(2_000_000));
    let x = rt.zeros(&[64], DType::F32, DpPolicy::default()).unwrap();
    rt.launch(&churn, None, &[Arg::Tensor(&x)]).unwrap();
    let e = rt.synchronize().expect_err("never ends").to_string();
    assert!(e.contains("time limit"), "{e}");
    let after = (rt.device_now_ps(0).unwrap(), rt.device_now_ps(1).unwrap());
    assert!(after.0 >= before.0 + 2_000_000, "{before:?} -> {after:?}");
    assert_eq!(after.1, before.1);
    assert!(rt
        .device_now_ps(2)
        .unwrap_err()
        .to_string()
        .contains("device 2 does not exist"));
}

/// A tensor is another runtime's memory: reading, writing, launching on
/// or reducing it through a second runtime is refused with a message, and
/// neither runtime's data changes.
#[test]
fn a_tensor_is_used_only_with_the_runtime_that_made_it() {
    let mut a = Runtime::new(&Topology::default_machine());
    let mut b = Runtime::new(&Topology::default_machine());
    let policy = DpPolicy::row_wise(1, 4);
    let x = a.from_ndarray(&arr(&[1024], |i| i as f32), policy).unwrap();
    // b's own tensor at the same addresses as a's `x` (both first).
    let mine = b.full(&[1024], 7.0f32, policy).unwrap();
    let refused = |e: kernbench_runtime::host::HostError, what: &str| {
        assert!(e.message.contains("belongs to another Runtime"), "{what}: {e}");
    };
    refused(b.to_ndarray::<f32>(&x).expect_err("read"), "read");
    refused(b.copy_from(&x, &arr(&[1024], |_| -1.0)).expect_err("write"), "write");
    let add = compile_add(&b, 256);
    let e = b
        .launch(
            &add,
            None,
            &[Arg::Tensor(&x), Arg::Tensor(&x), Arg::Tensor(&mine), Arg::I32(256)],
        )
        .expect_err("launch");
    assert!(e.message.contains("argument `x`"), "{e}");
    refused(e, "launch");
    let e = spawn(&mut b, 1, |_, ctx: &Ctx| ctx.all_reduce(&x, ReduceOp::Sum)).expect_err("all_reduce");
    let (rank, e) = e.failures.into_iter().next().expect("a failure");
    assert_eq!(rank, 0);
    refused(e, "all_reduce");
    assert!(b.to_ndarray::<f32>(&mine).unwrap().iter().all(|v| *v == 7.0));
    let back: ArrayD<f32> = a.to_ndarray(&x).unwrap();
    assert!(back.iter().enumerate().all(|(i, v)| *v == i as f32));
}
