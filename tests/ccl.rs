//! Every registered collective algorithm at many world sizes (odd ones
//! included, up to every PE of a SIP) and element counts (not divisible
//! by the world size, smaller than it): integer results exact for every
//! reduction, f16/bf16 within a stated tolerance of an f64 reference.

use kernbench_compiler::datapath::jit::Jit;
use kernbench_compiler::sema::{DType, Konst};
use kernbench_runtime::ccl::bench::{self, Case};
use kernbench_runtime::ccl::{Algorithm, Collective, ReduceOp, Registry};
use kernbench_runtime::host::{spawn, DpPolicy, HostError, Runtime};
use kernbench_runtime::sim;
use kernbench_runtime::topology::{Topology, DEFAULT_YAML};
use kernbench_tests::repo_root;
use ndarray::{ArrayD, IxDyn};

fn registry() -> Registry {
    Registry::stdlib(&repo_root().join("stdlib")).expect("the stdlib registry is valid")
}

/// Runs `algo` on the first `world` PEs with `bytes` per rank's buffer and
/// returns the number of wrong elements.
fn wrong(topo: &Topology, reg: &Registry, algo: &str, world: usize, bytes: u64, dtype: DType, op: ReduceOp) -> u64 {
    run(topo, reg, algo, world, bytes, dtype, op).wrong
}

/// The simulated time of `algo` (a sum) on all 256 PEs of the default
/// machine at `bytes`, after checking that the result is exact.
fn exact_time_on_256(topo: &Topology, reg: &Registry, algo: &str, bytes: u64, dtype: DType) -> u64 {
    let row = run(topo, reg, algo, 256, bytes, dtype, ReduceOp::Sum);
    assert_eq!(row.wrong, 0, "{algo} at {bytes} bytes");
    row.time_ps
}

/// Runs `algo` as [`wrong`] does; the whole bench row.
fn run(
    topo: &Topology,
    reg: &Registry,
    algo: &str,
    world: usize,
    bytes: u64,
    dtype: DType,
    op: ReduceOp,
) -> bench::Row {
    let a = reg.get(algo).expect("registered");
    let compiled = reg.compile_for(a, topo, dtype, op).unwrap_or_else(|e| panic!("{e}"));
    run_compiled(topo, reg, a, &compiled, world, bytes, dtype, op, None)
}

/// Runs algorithm `a` as [`run`] does, as compiled here (`compiled`).
#[allow(clippy::too_many_arguments)]
fn run_compiled(
    topo: &Topology,
    reg: &Registry,
    a: &Algorithm,
    (func, sources): &(kernbench_compiler::ir::Function, kernbench_compiler::diag::SourceMap),
    world: usize,
    bytes: u64,
    dtype: DType,
    op: ReduceOp,
    root: Option<u64>,
) -> bench::Row {
    run_compiled_on(
        topo,
        reg,
        a,
        (func, sources),
        &world.to_string(),
        bytes,
        dtype,
        op,
        root,
    )
}

/// Runs algorithm `a` as [`run_compiled`] does, on the PEs `pes` (as
/// `--pes` takes them).
#[allow(clippy::too_many_arguments)]
fn run_compiled_on(
    topo: &Topology,
    reg: &Registry,
    a: &Algorithm,
    (func, sources): (&kernbench_compiler::ir::Function, &kernbench_compiler::diag::SourceMap),
    pes: &str,
    bytes: u64,
    dtype: DType,
    op: ReduceOp,
    root: Option<u64>,
) -> bench::Row {
    let pes = sim::select_pes(topo, pes).expect("enough PEs");
    let world = pes.len();
    let case = Case {
        topo,
        reg,
        algorithm: a,
        func,
        sources,
        pes: &pes,
        dtype,
        op,
        // Launches over both SIPs run on two threads: the same results.
        threads: 2,
        time_limit_ps: None,
        root,
    };
    let mut jit = Jit::new();
    bench::run_one(&case, &mut jit, &mut bench::DataCache::default(), bytes)
        .unwrap_or_else(|e| panic!("{} on {world} PEs, {bytes} B: {e}", a.name))
}

/// Compiles and runs registered algorithm `name` as an i32 sum on the PEs
/// `pes` (as `--pes` takes them), on one thread, with `bytes` per rank: a
/// failure to compile or to run is the error.
fn try_sum_i32(topo: &Topology, reg: &Registry, name: &str, pes: &str, bytes: u64) -> Result<bench::Row, String> {
    let a = reg.get(name)?;
    let (func, sources) = reg.compile_for(a, topo, DType::I32, ReduceOp::Sum)?;
    let pes = sim::select_pes(topo, pes)?;
    let case = Case {
        topo,
        reg,
        algorithm: a,
        func: &func,
        sources: &sources,
        pes: &pes,
        dtype: DType::I32,
        op: ReduceOp::Sum,
        threads: 1,
        time_limit_ps: None,
        root: None,
    };
    bench::run_one(&case, &mut Jit::new(), &mut bench::DataCache::default(), bytes)
}

/// The simulated time of the stdlib's broadcast (as `compiled`, f32) of
/// `bytes` from `root` on the first `world` PEs, after checking that every
/// rank has the root's data.
fn exact_broadcast_time(
    topo: &Topology,
    reg: &Registry,
    compiled: &(kernbench_compiler::ir::Function, kernbench_compiler::diag::SourceMap),
    world: usize,
    root: u64,
    bytes: u64,
) -> u64 {
    let a = reg.get("broadcast").expect("registered");
    let row = run_compiled(
        topo,
        reg,
        a,
        compiled,
        world,
        bytes,
        DType::F32,
        ReduceOp::Sum,
        Some(root),
    );
    assert_eq!(row.wrong, 0, "{world} PEs from root {root}, {bytes} bytes");
    row.time_ps
}

/// Recursive doubling exists for small buffers: log2(p) steps against the
/// ring's 2(p - 1), so below a few KiB it finishes first; at 1 MiB the
/// ring's p-th-sized steps win. (Both are exact; see above.)
#[test]
fn recursive_doubling_wins_small_and_loses_large() {
    let topo = Topology::default_machine();
    let reg = registry();
    let time = |algo: &str, bytes: u64| run(&topo, &reg, algo, 8, bytes, DType::F32, ReduceOp::Sum).time_ps;
    for bytes in [1024, 4096] {
        let (rd, ring) = (time("rd_allreduce", bytes), time("ring_allreduce", bytes));
        assert!(rd < ring, "{bytes} B: recursive doubling {rd} ps, ring {ring} ps");
    }
    let (rd, ring) = (time("rd_allreduce", 1 << 20), time("ring_allreduce", 1 << 20));
    assert!(rd > 2 * ring, "1 MiB: recursive doubling {rd} ps, ring {ring} ps");
    // At 8 KiB recursive doubling still beats the ring; the ring's latency
    // over its 2(p - 1) hops (each hop α, as `tlc bench` prints it) is a
    // floor the ring never beats, even with one element.
    let rd = time("rd_allreduce", 8192);
    let ring = time("ring_allreduce", 8192);
    assert!(rd < ring, "8 KiB: recursive doubling {rd} ps, ring {ring} ps");
    let ring_algo = reg.get("ring_allreduce").expect("registered");
    // (On 128 PEs the hops dominate: 4.23 µs against a floor of 2.58;
    // with the DMA setup counted in every hop the "floor" was 5.12.)
    for world in [8usize, 128] {
        let pes = sim::select_pes(&topo, &world.to_string()).expect("enough PEs");
        let floor_ps = bench::ring_reference(&topo, &reg, ring_algo, &pes)
            .latency_ns(Collective::AllReduce.ring_hops(world as u32))
            * 1000.0;
        let one = run(&topo, &reg, "ring_allreduce", world, 4, DType::F32, ReduceOp::Sum).time_ps as f64;
        assert!(
            one >= floor_ps,
            "{world} PEs, one element: {one} ps against a floor of {floor_ps} ps"
        );
    }
}

#[test]
fn every_algorithm_is_exact_at_many_world_sizes() {
    let topo = Topology::default_machine();
    let reg = registry();
    let names: Vec<(String, Collective)> = reg
        .algorithms
        .values()
        .map(|a| (a.name.clone(), a.collective))
        .collect();
    assert!(names.len() >= 10, "{names:?}");
    for (name, c) in &names {
        for world in [1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 24] {
            // i32 counts per rank: 1, fewer than the ranks, not divisible,
            // several chunks.
            for count in [1u64, 5, 1003, 12289] {
                let bytes = count
                    * 4
                    * if matches!(c, Collective::AllGather | Collective::ReduceScatter) {
                        world as u64
                    } else {
                        1
                    };
                let n = wrong(&topo, &reg, name, world, bytes, DType::I32, ReduceOp::Sum);
                assert_eq!(n, 0, "{name} on {world} PEs, {count} i32 per rank: {n} wrong elements");
            }
        }
        // Half precision: the test data are small integers, exact in
        // every dtype, so the results must be exact too.
        for dtype in [DType::F16, DType::BF16, DType::F32] {
            for world in [2, 7] {
                let n = wrong(&topo, &reg, name, world, 2 * 3001 * world as u64, dtype, ReduceOp::Sum);
                assert_eq!(n, 0, "{name} {dtype} on {world} PEs");
            }
        }
        if c.reduces() {
            for op in [ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg] {
                for world in [3, 8] {
                    let n = wrong(&topo, &reg, name, world, 4 * 2000, DType::I32, op);
                    assert_eq!(n, 0, "{name} {op:?} on {world} PEs");
                }
            }
        }
    }
}

/// Every broadcast algorithm is exact from every root (the bench's default
/// is `world / 3`).
#[test]
fn broadcast_is_exact_from_every_root() {
    let topo = Topology::default_machine();
    let reg = registry();
    for a in reg
        .algorithms
        .values()
        .filter(|a| a.collective == Collective::Broadcast)
    {
        let compiled = reg.compile_for(a, &topo, DType::I32, ReduceOp::Sum).expect("compiles");
        // 3 and 4 ranks take the chain even for one chunk, 5 and 8 the trees.
        for world in [2u64, 3, 4, 5, 8] {
            for root in 0..world {
                let row = run_compiled(
                    &topo,
                    &reg,
                    a,
                    &compiled,
                    world as usize,
                    4 * 1003,
                    DType::I32,
                    ReduceOp::Sum,
                    Some(root),
                );
                assert_eq!(row.wrong, 0, "{} on {world} PEs from root {root}", a.name);
            }
        }
    }
}

/// A broadcast to few chunks per rank runs down a tree of SIP groups, so
/// over both SIPs one edge crosses their link, whatever the root, and each
/// group's tree is rotated by whole cubes, so its edges leave cubes alike
/// from every root: 1 MiB to all 256 PEs from roots 0, 1, 44, 85 and 255
/// takes 14.4, 14.4, 17.9, 14.6 and 14.5 us, within 1.75x the SIP link's
/// serialization of 1 MiB (10.5 us); 4 KiB takes 1.46 to 1.53 us, within
/// 10 % from root to root. The single in-order tree over all ranks it
/// replaced took 14.4, 22.0, 74.5 and 22.1 us at 1 MiB from roots 0, 1,
/// 85 and 255, and 1.36 to 4.64 at 4 KiB; the group tree rotated rank by
/// rank (not by cubes) took 25.5 us from root 85, where one group edge
/// after another shared a router hop (6 MiB over one in cube 4); the
/// heap-ordered tree before them 1345, 1345, 895 and 1335 us.
#[test]
fn a_broadcast_over_both_sips_crosses_their_link_once() {
    let topo = Topology::default_machine();
    let reg = registry();
    let a = reg.get("broadcast").expect("registered");
    let compiled = reg.compile_for(a, &topo, DType::F32, ReduceOp::Sum).expect("compiles");
    let time = |root: u64, bytes: u64| exact_broadcast_time(&topo, &reg, &compiled, 256, root, bytes);
    // 1 MiB at the SIP link's bytes per ns, in ps.
    let floor_ps = (1u64 << 20) * 1000 / topo.spec.system.sip_link.bandwidth_bytes_per_ns.0 as u64;
    for root in [0, 1, 44, 85, 255] {
        let t = time(root, 1 << 20);
        assert!(
            t * 4 < floor_ps * 7,
            "from root {root}: {t} ps on 256 PEs against the SIP link's {floor_ps} ps"
        );
    }
    let small: Vec<u64> = [0, 1, 85, 255].iter().map(|&root| time(root, 4096)).collect();
    let (lo, hi) = (
        small.iter().min().copied().unwrap_or(0),
        small.iter().max().copied().unwrap_or(0),
    );
    assert!(hi * 10 < lo * 11, "4 KiB from roots 0, 1, 85, 255: {small:?} ps");
}

/// Bruck's all-gather takes ceil(log2 p) steps where the ring takes
/// p - 1: on all 256 PEs a 1 KiB all-gather (4 bytes per rank) takes 4.68
/// us against the ring's 17.04, under half; at 64 KiB in all (256 bytes
/// per rank) the ring's pipeline wins (17.06 against 60.6 us). (The
/// tree all-gather beats it where it beats the ring: it is no default.)
#[test]
fn bruck_all_gather_wins_small_on_many_ranks_and_loses_large() {
    let topo = Topology::default_machine();
    let reg = registry();
    let time = |algo: &str, bytes: u64| exact_time_on_256(&topo, &reg, algo, bytes, DType::F32);
    let (bruck, ring) = (time("bruck_all_gather", 1024), time("all_gather", 1024));
    assert!(2 * bruck < ring, "1 KiB: Bruck {bruck} ps against the ring's {ring}");
    let (bruck, ring) = (time("bruck_all_gather", 65536), time("all_gather", 65536));
    assert!(ring < bruck, "64 KiB: Bruck {bruck} ps against the ring's {ring}");
}

/// The tree reduce-scatter runs the tree all-reduce's 2 log2(p) levels
/// where the ring takes p - 1 steps, but reduces every rank's whole buffer
/// on the way up: on all 256 PEs at 4 KiB per rank's input it takes 2.17
/// us against the ring's 17.47, at 512 KiB 15.08 against 18.30 (the way
/// down pruned to each subtree's part; 18.57 unpruned); at 2 MiB the ring
/// wins (36.07 against 49.85 us), so the defaults take the tree only below
/// 1 MiB there. The tree
/// all-reduce under it is exact in each of its block sizes (CHUNK // 16,
/// // 8, // 4, // 2 and CHUNK, for up to 512, 2048, 4096, 8192 and more
/// elements: 200, 1500, 3000, 6000 and 9000 i32 here).
#[test]
fn tree_reduce_scatter_wins_small_on_many_ranks_and_loses_large() {
    let topo = Topology::default_machine();
    let reg = registry();
    let time = |algo: &str, bytes: u64| exact_time_on_256(&topo, &reg, algo, bytes, DType::I32);
    let (tree, ring) = (time("tree_reduce_scatter", 4096), time("reduce_scatter", 4096));
    assert!(4 * tree < ring, "4 KiB: tree {tree} ps against the ring's {ring}");
    let (tree, ring) = (
        time("tree_reduce_scatter", 512 << 10),
        time("reduce_scatter", 512 << 10),
    );
    assert!(
        tree * 10 < ring * 9,
        "512 KiB: tree {tree} ps against the ring's {ring}"
    );
    let (tree, ring) = (time("tree_reduce_scatter", 2 << 20), time("reduce_scatter", 2 << 20));
    assert!(ring < tree, "2 MiB: tree {tree} ps against the ring's {ring}");
    for count in [200u64, 1500, 3000, 6000, 9000] {
        for world in [8, 13] {
            let n = wrong(
                &topo,
                &reg,
                "tree_allreduce",
                world,
                4 * count,
                DType::I32,
                ReduceOp::Avg,
            );
            assert_eq!(n, 0, "tree_allreduce avg of {count} i32 on {world} PEs");
        }
    }
}

/// The tree all-gather gathers up the tree and sends the whole result
/// down it: on all 256 PEs 2.20 us at 1 KiB in all, against the ring's
/// 17.04 and Bruck's 4.68; at 1 MiB the ring wins (18.20 against 32.5
/// us). (That every bit passes, -0.0 and NaN payloads too, is
/// tests/host.rs's `tree_all_gather_passes_every_bit`.)
#[test]
fn tree_all_gather_wins_small_on_many_ranks_and_loses_large() {
    let topo = Topology::default_machine();
    let reg = registry();
    let time = |algo: &str, bytes: u64| exact_time_on_256(&topo, &reg, algo, bytes, DType::F32);
    let (tree, ring, bruck) = (
        time("tree_all_gather", 1024),
        time("all_gather", 1024),
        time("bruck_all_gather", 1024),
    );
    assert!(
        4 * tree < ring && tree < bruck,
        "1 KiB: tree {tree} ps, ring {ring}, Bruck {bruck}"
    );
    let (tree, ring) = (time("tree_all_gather", 1 << 20), time("all_gather", 1 << 20));
    assert!(ring < tree, "1 MiB: tree {tree} ps against the ring's {ring}");
}

/// The broadcast picks the chain or the trees by how many chunks it has
/// for how many ranks, and the two meet where their times do: one element
/// more no longer doubles the time. 256 PEs, 127 chunks of 16 KiB and 4
/// bytes more: the switch at 2 chunks per 2 ranks gave 26.5 and 51.9 us.
/// (On 128 PEs, 4 MiB takes the chain now: 47.93 us, the trees 50.44.)
#[test]
fn a_broadcast_takes_no_jump_at_its_switch() {
    let topo = Topology::default_machine();
    let reg = registry();
    let a = reg.get("broadcast").expect("registered");
    let compiled = reg.compile_for(a, &topo, DType::F32, ReduceOp::Sum).expect("compiles");
    let time = |world: usize, bytes: u64| exact_broadcast_time(&topo, &reg, &compiled, world, 0, bytes);
    // 127 chunks of 16 KiB, then one element into a 128th.
    let (below, at) = (time(256, 127 << 14), time(256, (127 << 14) + 4));
    assert!(
        at * 100 <= below * 105,
        "256 PEs: {at} ps for 127 chunks and an element against {below} ps for 127 chunks"
    );
}

/// The broadcast's tree of SIP groups is exact on every world size and
/// from every root, with short last groups and leaders that feed two other
/// groups besides their own: four SIPs of eight PEs (SIP_PES = 8), one
/// chunk per rank.
#[test]
fn a_broadcast_over_many_sips_is_exact_from_every_root() {
    let topo = sip_grid_machine("ring", 4, [4, 1]);
    let reg = registry();
    let a = reg.get("broadcast").expect("registered");
    let compiled = reg.compile_for(a, &topo, DType::I32, ReduceOp::Sum).expect("compiles");
    for world in [3usize, 9, 13, 20, 32] {
        for root in 0..world as u64 {
            let row = run_compiled(
                &topo,
                &reg,
                a,
                &compiled,
                world,
                4 * 1003,
                DType::I32,
                ReduceOp::Sum,
                Some(root),
            );
            assert_eq!(row.wrong, 0, "{world} PEs from root {root}");
        }
    }
}

/// The bench's check catches wrong algorithms whatever the reduction and
/// dtype: one that leaves out the last rank, one that writes a constant
/// and a broadcast that ignores its root. (Its data once repeated every
/// five ranks, so that max and min had constant answers on five ranks or
/// more, and such algorithms passed.)
#[test]
fn the_bench_check_catches_wrong_algorithms() {
    let dir = std::env::temp_dir().join(format!("kernbench-wrong-ccl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(
        dir.join("wrong.tl"),
        "from ccl.reduce_ops import combine, finish\n\n\
         # Rank 0 combines every rank but the last, then sends the result out.\n\
         @kernel\n\
         def drop_last(buf: ptr[T], n_elem: i32, T: constexpr = f32, OP: constexpr = 0, CHUNK: constexpr = 1024):\n\
         \x20   rank = tl.rank()\n\
         \x20   ws = tl.world_size()\n\
         \x20   lanes = tl.arange(0, CHUNK)\n\
         \x20   for off in range(0, n_elem, CHUNK):\n\
         \x20       idx = off + lanes\n\
         \x20       m = idx < n_elem\n\
         \x20       v = tl.load(buf + idx, mask=m, other=0)\n\
         \x20       if rank == 0:\n\
         \x20           acc = v\n\
         \x20           for k in range(1, ws):\n\
         \x20               got = tl.recv(k, [CHUNK], T)\n\
         \x20               if k < ws - 1:\n\
         \x20                   acc = combine(acc, got, OP)\n\
         \x20           acc = finish(acc, ws, OP)\n\
         \x20           for k in range(1, ws):\n\
         \x20               tl.send(k, acc)\n\
         \x20           tl.store(buf + idx, acc, mask=m)\n\
         \x20       else:\n\
         \x20           tl.send(0, v)\n\
         \x20           tl.store(buf + idx, tl.recv(0, [CHUNK], T), mask=m)\n\n\
         @kernel\n\
         def constant(buf: ptr[T], n_elem: i32, T: constexpr = f32, OP: constexpr = 0, CHUNK: constexpr = 1024):\n\
         \x20   lanes = tl.arange(0, CHUNK)\n\
         \x20   for off in range(0, n_elem, CHUNK):\n\
         \x20       idx = off + lanes\n\
         \x20       tl.store(buf + idx, tl.full([CHUNK], 2, T), mask=idx < n_elem)\n\n\
         @kernel\n\
         def from_zero(buf: ptr[T], n_elem: i32, root: i32, T: constexpr = f32, CHUNK: constexpr = 1024):\n\
         \x20   lanes = tl.arange(0, CHUNK)\n\
         \x20   for off in range(0, n_elem, CHUNK):\n\
         \x20       idx = off + lanes\n\
         \x20       m = idx < n_elem\n\
         \x20       if tl.rank() == 0:\n\
         \x20           v = tl.load(buf + idx, mask=m, other=0)\n\
         \x20           for k in range(1, tl.world_size()):\n\
         \x20               tl.send(k, v)\n\
         \x20       else:\n\
         \x20           tl.store(buf + idx, tl.recv(0, [CHUNK], T), mask=m)\n",
    )
    .expect("write the kernels");
    let mut reg = registry();
    let yaml = "algorithms:\n\
                \x20 drop_last: {collective: all_reduce, module: wrong.tl, kernel: drop_last, topology: tree}\n\
                \x20 constant: {collective: all_reduce, module: wrong.tl, kernel: constant, topology: tree}\n\
                \x20 from_zero: {collective: broadcast, module: wrong.tl, kernel: from_zero, topology: tree}\n";
    reg.merge_text("wrong.yaml", &dir, yaml).expect("a valid registry");
    let topo = Topology::default_machine();
    for algo in ["drop_last", "constant"] {
        for dtype in [DType::F32, DType::BF16, DType::I32] {
            for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg] {
                for world in [2, 8] {
                    let n = wrong(&topo, &reg, algo, world, 4 * 1000, dtype, op);
                    assert!(n > 0, "{algo} {dtype} {op:?} on {world} PEs passed");
                }
            }
        }
    }
    for world in [3, 8] {
        let n = wrong(&topo, &reg, "from_zero", world, 4 * 1000, DType::F32, ReduceOp::Sum);
        assert!(n > 0, "a broadcast from rank 0 passed on {world} PEs");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn all_reduce_algorithms_on_a_whole_sip_and_both_sips() {
    let topo = Topology::default_machine();
    let reg = registry();
    for a in reg
        .algorithms
        .values()
        .filter(|a| a.collective == Collective::AllReduce)
    {
        for world in [128, 131, 256] {
            let n = wrong(&topo, &reg, &a.name, world, 4 * 4099, DType::I32, ReduceOp::Sum);
            assert_eq!(n, 0, "{} on {world} PEs", a.name);
        }
    }
}

/// A machine of `sips` SIPs on `grid` (`sip_topology` `kind`), each of
/// two cubes of four PEs: small enough to run every PE.
fn sip_grid_machine(kind: &str, sips: u32, grid: [u32; 2]) -> Topology {
    let y = DEFAULT_YAML
        .replace("sips: 2", &format!("sips: {sips}"))
        .replace("sip_topology: ring ", &format!("sip_topology: {kind} "))
        .replace("sip_grid: [2, 1]", &format!("sip_grid: [{}, {}]", grid[0], grid[1]))
        .replace("cube_grid: [4, 4]", "cube_grid: [2, 1]")
        .replace("pe_per_corner: 2 ", "pe_per_corner: 1 ");
    let topo = Topology::parse("grid.yaml", &y).expect("valid");
    assert_eq!(
        (topo.sips(), topo.spec.system.sip_grid[1].0),
        (sips, u64::from(grid[1]))
    );
    topo
}

/// On a 2-D grid of SIPs (torus or mesh), lrab's exchange between SIPs
/// runs along the grid's rows and columns (reduce-scatter, all-reduce,
/// all-gather): exact with the whole grid (the last SIP full or partial)
/// and with the ring it falls back to when SIPs are missing; and faster
/// than the ring in SIP order it replaced (the same kernel told the grid
/// is one row, `SIP_H = 1`).
#[test]
fn lrab_exchanges_over_a_2d_grid_of_sips() {
    let reg = registry();
    for (kind, sips, grid) in [("torus_2d", 4, [2, 2]), ("mesh_2d", 6, [3, 2])] {
        let topo = sip_grid_machine(kind, sips, grid);
        let all = (sips * 8) as usize;
        for world in [all, all - 3, 24] {
            for count in [1u64, 5, 1003, 4099] {
                let n = wrong(
                    &topo,
                    &reg,
                    "lrab_allreduce",
                    world,
                    4 * count,
                    DType::I32,
                    ReduceOp::Sum,
                );
                assert_eq!(n, 0, "{kind} {grid:?}, {world} PEs, {count} i32: {n} wrong elements");
            }
        }
        for op in [ReduceOp::Avg, ReduceOp::Max] {
            let n = wrong(&topo, &reg, "lrab_allreduce", all, 4 * 2000, DType::I32, op);
            assert_eq!(n, 0, "{kind} {grid:?} {op:?}");
        }
        let a = reg.get("lrab_allreduce").expect("registered");
        let layout: Vec<(&str, i64)> = kernbench_runtime::ccl::layout_constexprs(&topo)
            .into_iter()
            .map(|(k, v)| match k {
                "SIP_W" => (k, i64::from(sips)),
                "SIP_H" => (k, 1),
                _ => (k, v),
            })
            .collect();
        let ring = reg.compile(a, DType::I32, ReduceOp::Sum, &layout).expect("compiles");
        let ring = run_compiled(&topo, &reg, a, &ring, all, 1 << 20, DType::I32, ReduceOp::Sum, None);
        let grid_row = run(&topo, &reg, "lrab_allreduce", all, 1 << 20, DType::I32, ReduceOp::Sum);
        assert_eq!(ring.wrong + grid_row.wrong, 0);
        // At least 10 % faster (on the torus 62.3 against 72.2 us; 20 %
        // before the stdlib gave queues across SIPs 16 slots, which sped
        // the ring in SIP order up more).
        assert!(
            grid_row.time_ps * 10 < ring.time_ps * 9,
            "{kind} {grid:?}, 1 MiB: grid exchange {} ps, ring {} ps",
            grid_row.time_ps,
            ring.time_ps
        );
    }
}

#[test]
fn half_precision_all_reduce_is_within_tolerance() {
    // Random values in [-1, 1): the result is compared with the exact sum
    // of the inputs as the dtype holds them. Each of the world - 1
    // additions rounds once to the dtype (at most half an ulp of a partial
    // sum, which is below world in magnitude), so the error stays below
    // (world - 1) × ulp × world; the test allows world² × ulp (ulp: 2^-10
    // for f16, 2^-7 for bf16, 2^-23 for f32, at magnitude 1).
    let mut y = DEFAULT_YAML.to_string();
    y = y
        .replace("sips: 2", "sips: 8")
        .replace("sip_grid: [2, 1]", "sip_grid: [8, 1]");
    let topo = Topology::parse("eight.yaml", &y).expect("valid");
    for (dtype, ulp) in [
        (DType::F16, 2f64.powi(-10)),
        (DType::BF16, 2f64.powi(-7)),
        (DType::F32, 2f64.powi(-23)),
    ] {
        let mut rt = Runtime::new(&topo);
        let world = 8u32;
        let n = 3001usize;
        let data = |r: u32, i: usize| (((r as usize * 7919 + i * 104729) % 2000) as f64 / 1000.0) - 1.0;
        let result = std::sync::Mutex::new(Vec::new());
        for algo in [
            "ring_allreduce",
            "tree_allreduce",
            "mesh_allreduce",
            "hierarchical_allreduce",
            "lrab_allreduce",
        ] {
            spawn(&mut rt, world, |rank, ctx| {
                let a = ArrayD::from_shape_vec(IxDyn(&[n]), (0..n).map(|i| data(rank, i) as f32).collect()).unwrap();
                let t = match dtype {
                    DType::F16 => ctx.from_ndarray(&a.mapv(half::f16::from_f32), DpPolicy::default())?,
                    DType::BF16 => ctx.from_ndarray(&a.mapv(half::bf16::from_f32), DpPolicy::default())?,
                    _ => ctx.from_ndarray(&a, DpPolicy::default())?,
                };
                ctx.all_reduce_with(&t, ReduceOp::Sum, Some(algo))?;
                let got: Vec<f64> = match dtype {
                    DType::F16 => ctx.to_ndarray::<half::f16>(&t)?.iter().map(|x| x.to_f64()).collect(),
                    DType::BF16 => ctx.to_ndarray::<half::bf16>(&t)?.iter().map(|x| x.to_f64()).collect(),
                    _ => ctx.to_ndarray::<f32>(&t)?.iter().map(|x| *x as f64).collect(),
                };
                if rank == 0 {
                    result.lock().map_err(|_| HostError::new("poisoned"))?.push((algo, got));
                }
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{algo} {dtype}: {e}"));
        }
        for (algo, got) in result.into_inner().unwrap() {
            for (i, g) in got.iter().enumerate() {
                // The inputs as the dtype holds them, summed exactly.
                let exact: f64 = (0..world)
                    .map(|r| match dtype {
                        DType::F16 => half::f16::from_f64(data(r, i)).to_f64(),
                        DType::BF16 => half::bf16::from_f64(data(r, i)).to_f64(),
                        _ => data(r, i) as f32 as f64,
                    })
                    .sum();
                let tol = (world as f64) * ulp * (world as f64);
                assert!(
                    (g - exact).abs() <= tol,
                    "{algo} {dtype} element {i}: {g} vs {exact} (tolerance {tol})"
                );
            }
        }
    }
}

#[test]
fn hello_send_passes_buffers_round_the_ring() {
    let topo = Topology::default_machine();
    let src = std::fs::read_to_string(repo_root().join("stdlib/ccl/hello_send.tl")).unwrap();
    let (func, _) =
        kernbench_tests::exec::lower_file("hello_send.tl", &src, "hello_send", &[("CHUNK", Konst::Int(64))])
            .unwrap_or_else(|e| panic!("{e}"));
    for world in [2usize, 5, 8] {
        let n = 300usize;
        let mut t =
            kernbench_compiler::datapath::Tensor::zeros(kernbench_compiler::sema::Elem::Num(DType::I32), &[world, n]);
        for k in 0..world * n {
            t.set_bits(k, k as u64);
        }
        let run = kernbench_tests::sim::simulate(
            &topo,
            sim::select_pes(&topo, &world.to_string()).unwrap(),
            &func,
            vec![
                kernbench_tests::sim::tensor("buf", t, &["shard"]),
                kernbench_tests::sim::tensor(
                    "out",
                    kernbench_compiler::datapath::Tensor::zeros(
                        kernbench_compiler::sema::Elem::Num(DType::I32),
                        &[world, n],
                    ),
                    &["shard"],
                ),
                sim::place::LaunchArg::Scalar(n as u64),
            ],
            None,
            false,
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        let out = &run.tensors[1];
        for r in 0..world {
            let prev = (r + world - 1) % world;
            for i in 0..n {
                assert_eq!(out.get_bits(r * n + i), (prev * n + i) as u64, "world {world} rank {r}");
            }
        }
    }
}

/// An algorithm's own `backpressure`, `poll_interval_ns` and `packet_bytes`
/// override the registry's defaults for it alone, and reach the run: on 64
/// PEs (8 cubes) the same ring with 64-byte packets finishes earlier than
/// with the defaults' 256 (a message's head leaves each hop after one
/// packet, so a multi-hop path fills sooner; 18.147 against 18.352 us at
/// 1 MiB), and is as exact.
#[test]
fn an_algorithm_s_own_ipcq_and_packet_settings_apply_to_it_alone() {
    use kernbench_runtime::topology::Backpressure;
    let topo = Topology::default_machine();
    let mut reg = registry();
    let dir = repo_root().join("stdlib/ccl");
    let yaml = "
algorithms:
  ring_small_packets:
    collective: all_reduce
    module: ring_allreduce.tl
    kernel: ring_allreduce
    topology: ring
    backpressure: poll
    poll_interval_ns: 20
    packet_bytes: 64
";
    reg.merge_text("user.yaml", &dir, yaml)
        .unwrap_or_else(|e| panic!("{e}"));
    let (mine, ring) = (
        reg.get("ring_small_packets").unwrap(),
        reg.get("ring_allreduce").unwrap(),
    );
    let q = reg.ipcq(mine, &topo);
    assert_eq!((q.backpressure, q.poll_interval_ns.0), (Backpressure::Poll, 20.0));
    assert_eq!(reg.packet_bytes(mine), Some(64));
    // The stdlib's ring keeps the defaults.
    assert_eq!(reg.ipcq(ring, &topo).backpressure, Backpressure::Sleep);
    assert_eq!(reg.packet_bytes(ring), Some(256));
    let small = run(
        &topo,
        &reg,
        "ring_small_packets",
        64,
        1 << 20,
        DType::I32,
        ReduceOp::Sum,
    );
    let default = run(&topo, &reg, "ring_allreduce", 64, 1 << 20, DType::I32, ReduceOp::Sum);
    assert_eq!((small.wrong, default.wrong), (0, 0));
    assert!(
        small.time_ps < default.time_ps,
        "64-byte packets {} ps, 256-byte {} ps",
        small.time_ps,
        default.time_ps
    );
}

/// A queue across SIPs keeps its (more) slots in its receiver's TCM too:
/// with 128 KiB slots, 4 fit (512 KiB) and a ring within a SIP runs, but
/// the stdlib's 16 across SIPs (2 MiB) do not, and a ring over two SIPs
/// stops with the TCM error of the queue that did not fit (an algorithm's
/// own `n_slots_across_sips: 4` runs there).
#[test]
fn slots_across_sips_must_fit_in_a_tcm() {
    let topo = Topology::default_machine();
    let mut reg = registry();
    let yaml = "
algorithms:
  ring_wide_slots:
    collective: all_reduce
    module: ring_allreduce.tl
    kernel: ring_allreduce
    topology: ring
    slot_size_bytes: 131072
  ring_wide_slots_4:
    collective: all_reduce
    module: ring_allreduce.tl
    kernel: ring_allreduce
    topology: ring
    slot_size_bytes: 131072
    n_slots_across_sips: 4
";
    reg.merge_text("user.yaml", &repo_root().join("stdlib/ccl"), yaml)
        .unwrap_or_else(|e| panic!("{e}"));
    let run_on = |name: &str, pes: &str| try_sum_i32(&topo, &reg, name, pes, 1 << 16);
    let within = run_on("ring_wide_slots", "0.0.0,0.0.1").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(within.wrong, 0);
    let across = run_on("ring_wide_slots_4", "0.0.0,1.0.0").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(across.wrong, 0);
    let Err(e) = run_on("ring_wide_slots", "0.0.0,1.0.0") else {
        panic!("16 slots of 128 KiB in a TCM?")
    };
    assert!(
        e.contains("bytes of TCM on (sip 1, cube 0, pe 0)") || e.contains("bytes of TCM on (sip 0, cube 0, pe 0)"),
        "{e}"
    );
}

/// Recursive doubling over both SIPs with many ranks on each: a rank has
/// queues from several partners on the other SIP into its TCM, which
/// must hold their slots (68 + 68 ranks overflowed it with 16 slots each
/// across SIPs). Exact, on splits that overflowed and one that did not.
#[test]
fn recursive_doubling_fits_its_queues_across_sips() {
    let topo = Topology::default_machine();
    let reg = registry();
    let a = reg.get("rd_allreduce").expect("registered");
    let compiled = reg
        .compile_for(a, &topo, DType::I32, ReduceOp::Sum)
        .unwrap_or_else(|e| panic!("{e}"));
    for per_sip in [68, 88, 96] {
        let pes: Vec<String> = (0..2)
            .flat_map(|sip| (0..per_sip).map(move |i| format!("{sip}.{}.{}", i / 8, i % 8)))
            .collect();
        let row = run_compiled_on(
            &topo,
            &reg,
            a,
            (&compiled.0, &compiled.1),
            &pes.join(","),
            1 << 10,
            DType::I32,
            ReduceOp::Sum,
            None,
        );
        assert_eq!(row.wrong, 0, "{per_sip} + {per_sip} ranks");
    }
}

/// A failure at run time is reported inside the kernel, but the key to
/// change is in a ccl.yaml: the error names each registry setting the run
/// had, with its value and its file, line and key path; a constexpr that
/// makes the kernel fail to compile is the error's place.
#[test]
fn registry_settings_behind_a_failure_are_named_with_their_keys() {
    let topo = Topology::default_machine();
    let mut reg = registry();
    let yaml = "\
defaults:
  slot_size_bytes: 100
algorithms:
  ring_big_chunks:
    collective: all_reduce
    module: ring_allreduce.tl
    kernel: ring_allreduce
    topology: ring
    slot_size_bytes: 16384
    constexprs:
      CHUNK: 100000
  ring_no_chunks:
    collective: all_reduce
    module: ring_allreduce.tl
    kernel: ring_allreduce
    topology: ring
    constexprs:
      CHUNK: 0
";
    reg.merge_text("user.yaml", &repo_root().join("stdlib/ccl"), yaml)
        .unwrap_or_else(|e| panic!("{e}"));
    let run_on = |name: &str| try_sum_i32(&topo, &reg, name, "4", 4096).map(|row| row.wrong);
    // 4 KiB messages in slots of 100 bytes, from the user's defaults.
    let e = run_on("ring_allreduce").expect_err("a 4 KiB message in 4 slots of 100 bytes");
    assert!(e.contains("a queue has 4 slots of 100 bytes"), "{e}");
    assert!(
        e.contains("= note: algorithm `ring_allreduce` runs with these registry settings:"),
        "{e}"
    );
    assert!(
        e.contains("slot_size_bytes = 100 (user.yaml:2: defaults.slot_size_bytes)"),
        "{e}"
    );
    // The stdlib's defaults the user did not replace, at their own lines.
    let n_slots_line = std::fs::read_to_string(repo_root().join("stdlib/ccl/ccl.yaml"))
        .expect("the stdlib registry")
        .lines()
        .position(|l| l.starts_with("  n_slots: 4"))
        .expect("the stdlib sets n_slots")
        + 1;
    assert!(
        e.contains("n_slots = 4 (") && e.contains(&format!("ccl.yaml:{n_slots_line}: defaults.n_slots)")),
        "{e}"
    );
    // The entry's own slot size wins over the defaults'; its constexpr
    // overflows the TCM.
    let e = run_on("ring_big_chunks").expect_err("blocks of 100000 elements in a TCM");
    assert!(e.contains("bytes of TCM on (sip 0, cube 0, pe "), "{e}");
    assert!(
        e.contains("slot_size_bytes = 16384 (user.yaml:9: algorithms.ring_big_chunks.slot_size_bytes)"),
        "{e}"
    );
    assert!(
        e.contains("CHUNK = 100000 (user.yaml:11: algorithms.ring_big_chunks.constexprs.CHUNK)"),
        "{e}"
    );
    // A kernel that does not compile with its one constexpr: at that key.
    let e = run_on("ring_no_chunks").expect_err("CHUNK = 0");
    assert!(
        e.starts_with(
            "user.yaml:18: algorithms.ring_no_chunks.constexprs.CHUNK: kernel `ring_allreduce` does not compile with CHUNK=0: "
        ),
        "{e}"
    );
    assert!(e.contains("E0315"), "{e}");
    // A kernel that does not compile with its own default either: at the
    // entry, the constexpr named but not blamed.
    let dir = std::env::temp_dir().join(format!("kernbench-ccl-broken-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(
        dir.join("broken.tl"),
        "@kernel\ndef broken(buf: ptr[T], n_elem: i32, T: constexpr = f32, OP: constexpr = 0, CH: constexpr = 64):\n    \
         tl.store(buf + tl.arange(0, CH), tl.load(buf + tl.arange(0, CH)) + no_such_name)\n",
    )
    .expect("write the module");
    let mut reg = registry();
    reg.merge_text(
        "user.yaml",
        &dir,
        "algorithms:\n  broken:\n    collective: all_reduce\n    module: broken.tl\n    kernel: broken\n    topology: ring\n    constexprs: {CH: 32}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let a = reg.get("broken").expect("registered");
    let Err(e) = reg.compile_for(a, &topo, DType::I32, ReduceOp::Sum) else {
        panic!("an undefined name compiles")
    };
    assert!(
        e.starts_with("user.yaml:2: algorithm `broken`: kernel `broken` does not compile with CH=32: "),
        "{e}"
    );
}

/// On both SIPs of the default machine a small ring all-reduce is bound by
/// the SIP link's credit round trip over its queue's slots, not by its
/// hops' latency: it takes at least the reference's credit floor, and
/// (nothing else on its path being near as long) within 5 % of it. With
/// 4 slots across SIPs (a user's `n_slots_across_sips: 4`) the floor is
/// 18× the hops' latency and the bandwidth reference is the same window
/// (4 slots of 16 KiB per round trip); the stdlib's 16 cut the floor, and
/// the time, by 4 (133 to 33 us on 256 ranks at 4 KiB).
#[test]
fn a_ring_over_sips_is_bound_by_its_credit_round_trip() {
    let topo = Topology::default_machine();
    let pes = sim::select_pes(&topo, "all").expect("every PE");
    let hops = Collective::AllReduce.ring_hops(pes.len() as u32);
    let mut times = Vec::new();
    for across in [4, 16] {
        let mut reg = registry();
        if across == 4 {
            let yaml = "defaults:\n  n_slots_across_sips: 4\n";
            reg.merge_text("user.yaml", &repo_root().join("stdlib/ccl"), yaml)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let ring = reg.get("ring_allreduce").expect("registered");
        let ipcq = reg.ipcq(ring, &topo);
        assert_eq!((ipcq.slots(false), ipcq.slots(true)), (4, across));
        let comm = kernbench_runtime::ccl::communicator(&topo, ring, &pes).expect("a ring");
        let reference = bench::ring_reference(&topo, &reg, ring, &comm.pes);
        let credit_ps = reference.credit_ns(hops) * 1000.0;
        let latency_ps = reference.latency_ns(hops) * 1000.0;
        assert!(
            credit_ps > (10 * 4 / across) as f64 * latency_ps,
            "{across} slots: credits {credit_ps} ps, hops {latency_ps} ps"
        );
        let row = run(
            &topo,
            &reg,
            "ring_allreduce",
            pes.len(),
            4096,
            DType::F32,
            ReduceOp::Sum,
        );
        assert_eq!(row.wrong, 0);
        let t = row.time_ps as f64;
        assert!(
            t >= credit_ps && t <= 1.05 * credit_ps,
            "{across} slots: {t} ps against a credit floor of {credit_ps} ps"
        );
        times.push(t);
        // The tightest edge is the SIP link's (its round trip both ways),
        // with the slots of a queue across SIPs.
        let (rtt_ns, slots) = reference.credit_edge().expect("edges");
        assert_eq!(slots, across);
        let window_gbps = (across * ipcq.slot_size_bytes.0) as f64 / rtt_ns;
        if across == 4 {
            // The bandwidth figure is the window's.
            assert!(
                (reference.bottleneck_gbps - window_gbps).abs() < 1e-9,
                "{} against {window_gbps}",
                reference.bottleneck_gbps
            );
            assert!((63.0..64.0).contains(&window_gbps), "{window_gbps}");
        } else {
            // 16 slots per round trip outrun the link: it bounds.
            assert!(window_gbps > 100.0, "{window_gbps}");
            assert_eq!(reference.bottleneck_gbps, 100.0);
        }
    }
    assert!(times[0] > 3.9 * times[1], "{times:?}");
}

#[test]
fn the_ring_reference_counts_shared_slot_memories() {
    let topo = Topology::default_machine();
    let reg = registry();
    let pes = sim::select_pes(&topo, "cube").expect("a cube");
    for (algo, want) in [
        ("ring_allreduce_sram", Some(16.0)),
        ("ring_allreduce_hbm", None),
        ("ring_allreduce", None),
    ] {
        let a = reg.get(algo).expect("registered");
        let reference = bench::ring_reference(&topo, &reg, a, &pes).bottleneck_gbps;
        if let Some(w) = want {
            assert!((reference - w).abs() < 1e-9, "{algo}: reference {reference} GB/s");
        }
        let row = run(&topo, &reg, algo, 8, 4 << 20, DType::F32, ReduceOp::Sum);
        assert_eq!(row.wrong, 0);
        assert!(
            row.busbw_gbps <= reference,
            "{algo}: {} GB/s above {reference}",
            row.busbw_gbps
        );
        if want.is_some() {
            assert!(
                row.busbw_gbps >= 0.98 * reference,
                "{algo}: {} GB/s against {reference}",
                row.busbw_gbps
            );
        }
    }
}
