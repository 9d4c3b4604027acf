//! `tlc bench ccl`: the nccl-tests table for the collective algorithms of
//! the registry (the stdlib's `ccl.yaml`, with `--config` merged over it),
//! with simulated times. `tlc bench sim`: the simulator's own speed
//! (events per wall-clock second) on one all-reduce, run several times.

use super::{load_topology, usage_error, Format};
use indicatif::{ProgressBar, ProgressStyle};
use kernbench_compiler::datapath::jit::Jit;
use kernbench_compiler::sema::DType;
use kernbench_runtime::ccl::bench::{self, Row};
use kernbench_runtime::ccl::registry::World;
use kernbench_runtime::ccl::{communicator, Collective, ReduceOp, Registry};
use kernbench_runtime::sim;
use kernbench_runtime::topology::{PeCoord, Topology};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

/// The options of `tlc bench ccl`.
#[derive(clap::Args)]
pub struct CclArgs {
    /// all_reduce, all_gather, reduce_scatter or broadcast.
    #[arg(long, default_value = "all_reduce")]
    pub op: String,
    /// An algorithm of the registry, `all` of the collective's, or
    /// `default`: the ones ccl.yaml's `defaults` pick (what the host's
    /// collectives run).
    #[arg(long, default_value = "all")]
    pub algo: String,
    /// MIN:MAX (powers of two), or a list: 1K:64M, 8K, 4K,1M.
    #[arg(long, default_value = "1K:64M")]
    pub sizes: String,
    /// f16, bf16, f32 or i32.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// sum, max, min or avg (default sum); only for a collective that
    /// reduces (all_reduce, reduce_scatter).
    #[arg(long)]
    pub redop: Option<String>,
    /// Broadcast: the root rank (default: world / 3, neither the first
    /// rank nor the last once there are three).
    #[arg(long, value_name = "RANK")]
    pub root: Option<u64>,
    /// The PEs: 1, N, cube, sip, all, or SIP.CUBE.PE,….
    #[arg(long, allow_hyphen_values = true, default_value = "cube")]
    pub pes: String,
    /// Threads a launch over several SIPs runs on (default: every core).
    /// The results do not depend on it.
    #[arg(long, value_name = "N", value_parser = super::thread_count)]
    pub threads: Option<usize>,
    /// A topology file or preset (default: the embedded default machine).
    #[arg(long, value_name = "FILE")]
    pub topology: Option<String>,
    /// A user ccl.yaml merged over the stdlib's.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[arg(long, value_name = "DIR")]
    pub stdlib: Option<PathBuf>,
    /// Simulated time one size may take (ps, ns, us, ms, s), or `none`; a
    /// size still running then is an error (an algorithm that never
    /// ends).
    #[arg(long, allow_hyphen_values = true, value_name = "TIME", default_value = super::DEFAULT_TIME_LIMIT, value_parser = super::time_limit)]
    pub time_limit: super::TimeLimit,
    #[arg(long, value_enum, default_value = "human")]
    pub format: Format,
}

/// The options of `tlc bench sim`.
#[derive(clap::Args)]
pub struct SimArgs {
    /// The all-reduce algorithm of the registry to simulate.
    #[arg(long, default_value = "ring_allreduce")]
    pub algo: String,
    /// Bytes of int32 each rank reduces (K, M, G suffixes).
    #[arg(long, default_value = "128K")]
    pub bytes: String,
    /// The PEs: 1, N, cube, sip, all, or SIP.CUBE.PE,….
    #[arg(long, allow_hyphen_values = true, default_value = "all")]
    pub pes: String,
    /// A topology file or preset (default: the embedded default machine).
    #[arg(long, value_name = "FILE")]
    pub topology: Option<String>,
    /// Timed runs, each on a fresh machine (the JIT compiles once, before).
    #[arg(long, default_value_t = 5)]
    pub runs: u32,
    /// Threads a launch over several SIPs runs on (one shard of its SIPs
    /// each); the results do not depend on it. 1 measures one core.
    #[arg(long, default_value_t = 1, value_parser = super::thread_count)]
    pub threads: usize,
    #[arg(long, value_name = "DIR")]
    pub stdlib: Option<PathBuf>,
    /// Simulated time each run may take (ps, ns, us, ms, s), or `none`; a
    /// run still going then is an error (an algorithm that never ends).
    #[arg(long, allow_hyphen_values = true, value_name = "TIME", default_value = super::DEFAULT_TIME_LIMIT, value_parser = super::time_limit)]
    pub time_limit: super::TimeLimit,
    #[arg(long, value_enum, default_value = "human")]
    pub format: Format,
}

/// The simulator's speed: the all-reduce run `--runs` times after one
/// untimed run (the JIT's compilation, the first touch of memory), each
/// time on a fresh machine; only the simulation itself is timed. Every run
/// is checked against the exact result, and must give the same events and
/// simulated time (the simulator is deterministic).
pub fn sim(a: SimArgs) -> ExitCode {
    let size = match bench::parse_size(&a.bytes) {
        Ok(s) => s,
        Err(e) => return usage_error(&format!("--bytes: {e}")),
    };
    if a.runs == 0 {
        return usage_error("--runs: expected at least 1");
    }
    let (topo, pes, reg) = match machine_and_registry(a.topology.as_deref(), &a.pes, a.stdlib.clone()) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let alg = match reg.get(&a.algo) {
        Ok(x) if x.collective == Collective::AllReduce => x.clone(),
        Ok(x) => {
            return usage_error(&format!(
                "`{}` is an algorithm for {}, not for all_reduce",
                x.name, x.collective
            ))
        }
        Err(e) => return usage_error(&e),
    };
    let (dtype, redop) = (DType::I32, ReduceOp::Sum);
    let (func, sources) = match reg.compile_for(&alg, &topo, dtype, redop) {
        Ok(x) => x,
        Err(e) => {
            errln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let case = bench::Case {
        topo: &topo,
        reg: &reg,
        algorithm: &alg,
        func: &func,
        sources: &sources,
        pes: &pes,
        dtype,
        op: redop,
        threads: a.threads,
        time_limit_ps: a.time_limit.0,
        root: None,
    };
    let mut jit = Jit::new();
    let mut cache = bench::DataCache::default();
    let progress = ProgressBar::new(u64::from(a.runs) + 1);
    let mut rows: Vec<Row> = Vec::new();
    for _ in 0..=a.runs {
        match bench::run_one(&case, &mut jit, &mut cache, size) {
            Ok(r) => rows.push(r),
            Err(e) => {
                progress.finish_and_clear();
                errln!("error: {e}");
                return ExitCode::from(1);
            }
        }
        progress.inc(1);
    }
    progress.finish_and_clear();
    let first = rows.remove(0);
    if let Some(r) = rows
        .iter()
        .find(|r| (r.events, r.time_ps) != (first.events, first.time_ps))
    {
        errln!(
            "error: the simulator is not deterministic: {} events in {} ps, then {} events in {} ps",
            first.events,
            first.time_ps,
            r.events,
            r.time_ps
        );
        return ExitCode::from(1);
    }
    let wrong: u64 = rows.iter().map(|r| r.wrong).sum::<u64>() + first.wrong;
    let mut walls: Vec<f64> = rows.iter().map(|r| r.sim_wall.as_secs_f64()).collect();
    walls.sort_by(f64::total_cmp);
    let median = if walls.len() % 2 == 1 {
        walls[walls.len() / 2]
    } else {
        (walls[walls.len() / 2 - 1] + walls[walls.len() / 2]) / 2.0
    };
    let (min, max) = (walls[0], walls[walls.len() - 1]);
    let rate = |wall: f64| first.events as f64 / wall.max(1e-12);
    let ranks = pes.len();
    match a.format {
        Format::Human => {
            // A size that is not whole int32 elements runs rounded down (to
            // one element at least), as `bench ccl` rounds; said here.
            let rounded = match first.size_bytes == size {
                true => String::new(),
                false => format!(" (--bytes {size} rounded to whole int32 elements)"),
            };
            outln!(
                "# simulator speed: `{}` all_reduce of {} bytes of int32 per rank{rounded} ({} bytes in all) on {ranks} PE{} of `{}`, {}",
                alg.name,
                first.size_bytes,
                first.size_bytes * ranks as u64,
                if ranks == 1 { "" } else { "s" },
                topo.spec.name,
                // Said always: a figure on one core and one on several differ
                // by up to 2x, and both get quoted.
                match (a.threads, first.threads) {
                    (0 | 1, _) => "one thread".to_string(),
                    (n, 1) => format!("one thread (of {n} allowed: one shard)"),
                    (n, used) if used == n => format!("{n} threads"),
                    (n, used) => format!("{used} threads (of {n} allowed)"),
                }
            );
            outln!(
                "# {} events, {:.3} us simulated, #wrong {wrong} {}",
                first.events,
                first.time_ps as f64 / 1e6,
                if wrong == 0 { "OK" } else { "FAILED" }
            );
            outln!(
                "wall per run (s)   min {min:.4}   median {median:.4}   max {max:.4}   ({} run{})",
                walls.len(),
                if walls.len() == 1 { "" } else { "s" }
            );
            outln!(
                "events/s (M)       best {:.3}   median {:.3}",
                rate(min) / 1e6,
                rate(median) / 1e6
            );
        }
        Format::Json => outln!(
            "{}",
            json!({
                "algorithm": alg.name, "ranks": ranks, "topology": topo.spec.name,
                "bytes_per_rank": first.size_bytes, "requested_bytes_per_rank": size,
                "events": first.events, "threads": a.threads, "threads_used": first.threads,
                "simulated_us": first.time_ps as f64 / 1e6, "wrong": wrong,
                "wall_s": { "min": min, "median": median, "max": max, "runs": walls.len() },
                "events_per_s": { "best": rate(min), "median": rate(median) },
            })
        ),
    }
    if wrong > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// The topology (`--topology`), the PEs picked from it (`--pes`) and the
/// stdlib's algorithm registry (`--stdlib`, else the default), or the exit
/// code after the message: 2 for bad usage, 1 for a bad file.
fn machine_and_registry(
    topology: Option<&str>,
    pes: &str,
    stdlib: Option<PathBuf>,
) -> Result<(Topology, Vec<PeCoord>, Registry), ExitCode> {
    let topo = load_topology(topology)?;
    let pes = sim::select_pes(&topo, pes).map_err(|e| usage_error(&e))?;
    let Some(root) = super::stdlib_root(stdlib).map_err(|e| usage_error(&e))? else {
        errln!("error: cannot find the stdlib (set KERNBENCH_STDLIB or pass --stdlib)");
        return Err(ExitCode::from(2));
    };
    let reg = Registry::stdlib(&root).map_err(|e| {
        errln!("error: {e}");
        ExitCode::from(1)
    })?;
    Ok((topo, pes, reg))
}

/// A module's path relative to the current folder when it is inside it.
fn shown(p: &std::path::Path) -> String {
    let cwd = std::env::current_dir().ok().and_then(|c| c.canonicalize().ok());
    let abs = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    match cwd.as_deref().and_then(|c| abs.strip_prefix(c).ok()) {
        Some(rel) => rel.display().to_string(),
        None => abs.display().to_string(),
    }
}

fn fmt_size(b: u64) -> String {
    format!("{b:>12}")
}

pub fn ccl(a: CclArgs) -> ExitCode {
    let Some(op) = Collective::parse(&a.op) else {
        return usage_error(&format!(
            "--op `{}`: expected all_reduce, all_gather, reduce_scatter or broadcast",
            a.op
        ));
    };
    let redop_name = a.redop.as_deref().unwrap_or("sum");
    let Some(redop) = ReduceOp::parse(redop_name) else {
        return usage_error(&format!("--redop `{redop_name}`: expected sum, max, min or avg"));
    };
    if a.redop.is_some() && !op.reduces() {
        return usage_error(&format!(
            "--redop: {op} reduces nothing (pass --op all_reduce or reduce_scatter)"
        ));
    }
    let dtype = match DType::from_name(&a.dtype) {
        Some(d) if matches!(d, DType::F16 | DType::BF16 | DType::F32 | DType::I32) => d,
        _ => return usage_error(&format!("--dtype `{}`: expected f16, bf16, f32 or i32", a.dtype)),
    };
    if a.root.is_some() && op != Collective::Broadcast {
        return usage_error("--root: only a broadcast has a root (pass --op broadcast)");
    }
    let sizes = match bench::parse_sizes(&a.sizes) {
        Ok(s) => s,
        Err(e) => return usage_error(&format!("--sizes: {e}")),
    };
    let threads = a.threads.unwrap_or_else(crate::cores);
    let (topo, pes, mut reg) = match machine_and_registry(a.topology.as_deref(), &a.pes, a.stdlib.clone()) {
        Ok(x) => x,
        Err(code) => return code,
    };
    // A root past every rank fails every size alike: say so once, now.
    if let Some(root) = a.root.filter(|&r| r >= pes.len() as u64) {
        return usage_error(&format!(
            "--root {root}: past the last rank ({}) of the {} PEs given",
            pes.len().saturating_sub(1),
            pes.len()
        ));
    }
    if let Some(cfg) = &a.config {
        if let Err(e) = reg.merge_file(cfg) {
            errln!("error: {e}");
            // A file that cannot be read is bad usage, as for --topology.
            return ExitCode::from(if e.unreadable { 2 } else { 1 });
        }
    }
    // With `--algo default`, each size runs only the algorithm the
    // defaults pick for it, by the bytes of each rank's input, as
    // `distributed` picks (a curve, not every default at every size).
    let by_default = a.algo == "default";
    let world = pes.len() as u64;
    let on = World::of(&pes);
    let picked_for = |size: u64| -> Option<String> {
        let per_rank_input = match op {
            Collective::AllGather => size / world.max(1),
            _ => size,
        };
        reg.default_for(op, per_rank_input, on).ok().map(|x| x.name.clone())
    };
    let algos: Vec<String> = if by_default {
        // What the registry's `defaults` pick for this collective on these
        // PEs (what `distributed.all_reduce` and the others run), size
        // band by size band.
        let bands = match reg.default_bands(op, on) {
            Ok(b) => b,
            Err(e) => return usage_error(&e),
        };
        if a.format == Format::Human {
            outln!(
                "# the defaults for {op} on {} PEs: {}\n#",
                pes.len(),
                describe_bands(&bands)
            );
        }
        let mut names: Vec<String> = Vec::new();
        for (_, name) in bands {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    } else if a.algo == "all" {
        reg.algorithms
            .values()
            .filter(|x| x.collective == op)
            .map(|x| x.name.clone())
            .collect()
    } else {
        match reg.get(&a.algo) {
            Ok(x) if x.collective == op => vec![x.name.clone()],
            Ok(x) => {
                return usage_error(&format!(
                    "algorithm `{}` is for {}; pass --op {}",
                    x.name, x.collective, x.collective
                ))
            }
            Err(e) => return usage_error(&e),
        }
    };
    let mut algos = algos;
    if by_default {
        // A default no size picks has no rows to show.
        algos.retain(|name| {
            sizes
                .iter()
                .any(|&size| picked_for(size).as_deref() == Some(name.as_str()))
        });
    }
    let runs = if by_default {
        sizes.len()
    } else {
        algos.len() * sizes.len()
    };
    let progress = ProgressBar::new(runs as u64);
    progress.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut json_out = Vec::new();
    let mut failed = false;
    // Compile every algorithm first.
    struct Prepared {
        alg: kernbench_runtime::ccl::Algorithm,
        func: kernbench_compiler::ir::Function,
        sources: kernbench_compiler::diag::SourceMap,
        ranks: u32,
        reference: bench::RingReference,
        jit: Jit,
        rows: Vec<Row>,
        /// Sizes that failed (their errors were printed).
        failed_sizes: Vec<u64>,
        /// Sizes run as another (whole elements; for all-gather and
        /// reduce-scatter, whole elements per rank): asked, run.
        rounded: Vec<(u64, u64)>,
    }
    let mut prepared = Vec::new();
    // The JSON entries of algorithms that could not be prepared.
    let mut json_failed = Vec::new();
    for name in &algos {
        let Ok(alg) = reg.get(name).cloned() else { continue };
        let compiled = reg
            .compile_for(&alg, &topo, dtype, redop)
            .and_then(|func| communicator(&topo, &alg, &pes).map(|c| (func, c)));
        match compiled {
            Ok(((func, sources), comm)) => {
                let reference = bench::ring_reference(&topo, &reg, &alg, &comm.pes);
                prepared.push(Prepared {
                    alg,
                    func,
                    sources,
                    ranks: comm.world(),
                    reference,
                    jit: Jit::new(),
                    rows: Vec::new(),
                    failed_sizes: Vec::new(),
                    rounded: Vec::new(),
                });
            }
            Err(e) => {
                progress.suspend(|| errln!("error: {e}"));
                // In the JSON too: an algorithm left out would read as
                // one never asked for.
                let message = e.to_string();
                json_failed.push(json!({
                    "op": op.key(), "algorithm": name, "ok": false,
                    "error": message.lines().next().unwrap_or_default(),
                }));
                failed = true;
                let mine = sizes
                    .iter()
                    .filter(|&&size| !by_default || picked_for(size).as_deref() == Some(name.as_str()))
                    .count();
                progress.inc(mine as u64);
            }
        }
    }
    // Size by size, so every algorithm shares a size's data.
    let mut cache = bench::DataCache::default();
    for &size in &sizes {
        let picked = picked_for(size).filter(|_| by_default);
        for p in prepared.iter_mut() {
            if picked.as_ref().is_some_and(|name| *name != p.alg.name) {
                continue;
            }
            progress.set_message(format!("{} {size} B", p.alg.name));
            let case = bench::Case {
                topo: &topo,
                reg: &reg,
                algorithm: &p.alg,
                func: &p.func,
                sources: &p.sources,
                pes: &pes,
                dtype,
                op: redop,
                threads,
                time_limit_ps: a.time_limit.0,
                root: a.root,
            };
            match bench::run_one(&case, &mut p.jit, &mut cache, size) {
                Ok(r) => {
                    if r.size_bytes != size {
                        p.rounded.push((size, r.size_bytes));
                    }
                    // Sizes that round to the same whole elements are one
                    // row (the note on rounded sizes says which).
                    if p.rows.last().is_none_or(|last| last.size_bytes != r.size_bytes) {
                        p.rows.push(r)
                    }
                }
                Err(e) => {
                    progress.suspend(|| errln!("error: {e}"));
                    p.failed_sizes.push(size);
                }
            }
            progress.inc(1);
        }
    }
    for p in &prepared {
        let (alg, rows, ranks) = (&p.alg, &p.rows, p.ranks);
        let bw = p.reference.bottleneck_gbps;
        let hops = alg.collective.ring_hops(ranks);
        let ring_us = p.reference.latency_ns(hops) / 1000.0;
        let alpha = p.reference.mean_hop_ns();
        let (rtt, window) = p.reference.credit_edge().unwrap_or((0.0, 0));
        let credit_us = p.reference.credit_ns(hops) / 1000.0;
        let name = &alg.name;
        let avg_bus = if rows.is_empty() {
            0.0
        } else {
            rows.iter().map(|r| r.busbw_gbps).sum::<f64>() / rows.len() as f64
        };
        let wrong: u64 = rows.iter().map(|r| r.wrong).sum();
        let ok = wrong == 0 && p.failed_sizes.is_empty();
        failed |= !ok;
        match a.format {
            Format::Human => {
                let mut o = String::new();
                o.push_str(&format!(
                    "# {op} with `{name}` ({}) on {ranks} PE{} of `{}`, {}{}\n",
                    shown(&alg.module),
                    if ranks == 1 { "" } else { "s" },
                    topo.spec.name,
                    bench::type_name(dtype),
                    match op {
                        _ if op.reduces() => format!(" {}", redop.name()),
                        Collective::Broadcast => format!(", root {}", bench::broadcast_root(a.root, ranks as u64)),
                        _ => String::new(),
                    }
                ));
                if ranks < 2 {
                    o.push_str("# reference: one rank, no ring: nothing crosses a link\n#\n");
                } else {
                    o.push_str(&format!(
                        "# reference: a ring step's bottleneck {bw:.1} GB/s; a ring's latency over its {hops} hops {ring_us:.2} us (mean hop α = {alpha:.1} ns)\n\
                         # credits: {window} slots per round trip of {rtt:.1} ns on the tightest edge, so a ring's {hops} messages over each edge take at least {credit_us:.2} us\n#\n",
                    ));
                }
                o.push_str(
                    "#        size         count      type   redop     time(us)   algbw(GB/s)   busbw(GB/s)  #wrong\n",
                );
                for r in rows {
                    o.push_str(&format!(
                        "{} {:>13} {:>9} {:>7} {:>12.2} {:>13.2} {:>13.2} {:>7}\n",
                        fmt_size(r.size_bytes),
                        r.count,
                        bench::type_name(dtype),
                        if op.reduces() { redop.name() } else { "none" },
                        r.time_ps as f64 / 1e6,
                        r.algbw_gbps,
                        r.busbw_gbps,
                        r.wrong
                    ));
                }
                if !p.rounded.is_empty() {
                    let sizes: Vec<String> = p.rounded.iter().map(|(asked, ran)| format!("{asked} → {ran}")).collect();
                    o.push_str(&format!(
                        "# Rounded sizes        : {} (bytes: whole {} elements{})\n",
                        sizes.join(", "),
                        bench::type_name(dtype),
                        if matches!(op, Collective::AllGather | Collective::ReduceScatter) {
                            ", the same number per rank"
                        } else {
                            ""
                        }
                    ));
                }
                if !p.failed_sizes.is_empty() {
                    let sizes: Vec<String> = p.failed_sizes.iter().map(u64::to_string).collect();
                    o.push_str(&format!(
                        "# Failed sizes         : {} (bytes; errors above)\n",
                        sizes.join(", ")
                    ));
                }
                // A size that failed to run is a failure even with no
                // wrong value among those that ran.
                o.push_str(&format!(
                    "# Out of bounds values : {wrong} {}\n",
                    match (wrong, p.failed_sizes.len()) {
                        (0, 0) => "OK",
                        (0, _) => "FAILED (in the sizes that failed)",
                        _ => "FAILED",
                    }
                ));
                o.push_str(&format!("# Avg bus bandwidth    : {avg_bus:.3} \n#\n"));
                progress.suspend(|| out!("{o}"));
            }
            Format::Json => json_out.push(json!({
                "op": op.key(), "algorithm": name, "module": shown(&alg.module),
                "ranks": ranks, "dtype": bench::type_name(dtype), "redop": if op.reduces() { redop.name() } else { "none" },
                "root": (op == Collective::Broadcast).then(|| bench::broadcast_root(a.root, ranks as u64)),
                "reference_bottleneck_gbps": bw, "reference_mean_hop_ns": alpha,
                "reference_ring_hops": hops, "reference_ring_latency_us": ring_us,
                "reference_credit_round_trip_ns": rtt, "reference_credit_us": credit_us, "reference_window_slots": window,
                "avg_busbw_gbps": avg_bus, "wrong": wrong, "failed_sizes": p.failed_sizes, "rounded_sizes": p.rounded, "ok": ok,
                "rows": rows.iter().map(|r| json!({
                    "size": r.size_bytes, "count": r.count, "time_us": r.time_ps as f64 / 1e6,
                    "algbw_gbps": r.algbw_gbps, "busbw_gbps": r.busbw_gbps, "wrong": r.wrong, "events": r.events,
                })).collect::<Vec<_>>(),
            })),
        }
    }
    progress.finish_and_clear();
    if a.format == Format::Json {
        json_out.extend(json_failed);
        outln!("{}", serde_json::Value::Array(json_out));
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// The options of `tlc bench tp`.
#[derive(clap::Args)]
pub struct TpArgs {
    /// Rows (tokens) of the activations.
    #[arg(long, default_value_t = 128)]
    pub tokens: usize,
    /// The model's hidden size (the column layer's input, the row layer's
    /// output).
    #[arg(long, default_value_t = 512)]
    pub hidden: usize,
    /// The MLP's inner size (the column layer's output, the row layer's
    /// input).
    #[arg(long, default_value_t = 2048)]
    pub ffn: usize,
    /// PEs per rank (of cube 0) the activations are split over by rows,
    /// each with a copy of the rank's weights.
    #[arg(long, default_value_t = 1)]
    pub pes: u32,
    /// A topology file or preset (default: the embedded default machine).
    #[arg(long, value_name = "FILE")]
    pub topology: Option<String>,
    #[arg(long, value_enum, default_value = "human")]
    pub format: Format,
}

/// The tensor-parallel layers' forward pass at every tensor-parallel size
/// up to the machine's SIPs (one rank per SIP), with simulated times and
/// each output checked against a reference.
pub fn tp(a: TpArgs) -> ExitCode {
    use kernbench_runtime::tp::bench::{self as tp_bench, Shape};
    for (name, v) in [("--tokens", a.tokens), ("--hidden", a.hidden), ("--ffn", a.ffn)] {
        if v == 0 {
            return usage_error(&format!("{name}: expected at least 1"));
        }
    }
    let topo = match load_topology(a.topology.as_deref()) {
        Ok(t) => t,
        Err(code) => return code,
    };
    // The host holds each matrix and its f64 reference: at most 2^26
    // elements each (512 MiB in f64).
    const MAX_ELEMS: usize = 1 << 26;
    for (what, m) in [
        ("--tokens × --hidden", a.tokens.checked_mul(a.hidden)),
        ("--hidden × --ffn", a.hidden.checked_mul(a.ffn)),
        ("--tokens × --ffn", a.tokens.checked_mul(a.ffn)),
    ] {
        if m.is_none_or(|m| m > MAX_ELEMS) {
            return usage_error(&format!("{what}: at most {MAX_ELEMS} elements per matrix"));
        }
    }
    if a.pes == 0 || a.pes > topo.pes_per_cube() || a.tokens % a.pes as usize != 0 {
        return usage_error(&format!(
            "--pes: expected 1 to {} PEs that split the {} tokens evenly",
            topo.pes_per_cube(),
            a.tokens
        ));
    }
    let shape = Shape {
        tokens: a.tokens,
        hidden: a.hidden,
        ffn: a.ffn,
        pes: a.pes,
    };
    let sizes = tp_bench::sizes(&topo, shape);
    let async_sizes = tp_bench::async_sizes(&topo, shape);
    let attention_sizes = tp_bench::attention_sizes(&topo, shape);
    let progress = ProgressBar::new((3 * sizes.len() + 2 * async_sizes.len() + 2 * attention_sizes.len()) as u64);
    let rows = tp_bench::run(&topo, shape, || progress.inc(1)).and_then(|rows| {
        let async_rows = tp_bench::run_async(&topo, shape, || progress.inc(1))?;
        let attention_rows = tp_bench::run_attention_all(&topo, shape, || progress.inc(1))?;
        Ok((rows, async_rows, attention_rows))
    });
    progress.finish_and_clear();
    let (rows, async_rows, attention_rows) = match rows {
        Ok(r) => r,
        Err(e) => {
            errln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let us = |ps: u64| ps as f64 / 1e6;
    let wrong = rows.iter().filter(|r| !r.correct()).count()
        + async_rows.iter().filter(|r| !r.correct()).count()
        + attention_rows.iter().filter(|r| !r.correct()).count();
    match a.format {
        Format::Human => {
            outln!(
                "# tensor-parallel forward on `{}`: {} tokens, hidden {}, ffn {}; f16 inputs, f32 accumulation; one rank per SIP, activations on {} PE{} per rank",
                topo.spec.name,
                a.tokens,
                a.hidden,
                a.ffn,
                a.pes,
                if a.pes == 1 { "" } else { "s" }
            );
            outln!(
                "# column: hidden -> ffn, output gathered; row: ffn -> hidden, all-reduced; mlp: both, GELU between"
            );
            let skipped: Vec<String> = (1..=topo.sips())
                .filter(|tp| !sizes.contains(tp))
                .map(|tp| tp.to_string())
                .collect();
            if !skipped.is_empty() {
                outln!(
                    "# tp {} skipped: ffn {} does not split evenly over them",
                    skipped.join(", "),
                    a.ffn
                );
            }
            outln!(
                "{:>7} {:>3} {:>11} {:>11} {:>11} {:>11} {:>9} {:>10}  check",
                "layer",
                "tp",
                "total(us)",
                "gemm(us)",
                "comm(us)",
                "other(us)",
                "TFLOP/s",
                "err/bound"
            );
            for r in &rows {
                outln!(
                    "{:>7} {:>3} {:>11.3} {:>11.3} {:>11.3} {:>11.3} {:>9.2} {:>10.2e}  {}",
                    r.layer.name(),
                    r.tp,
                    us(r.total_ps),
                    us(r.gemm_ps),
                    us(r.comm_ps),
                    us(r.total_ps.saturating_sub(r.gemm_ps + r.comm_ps)),
                    r.flops as f64 / r.total_ps.max(1) as f64,
                    r.err_ratio,
                    if r.correct() { "OK" } else { "WRONG" }
                );
            }
            outln!(
                "# gemm: rank 0's GEMMs; comm: the collectives; other: bias, activation, re-assembly, launch latency"
            );
            outln!("# err/bound: the largest error over what f32 accumulation may lose (at most 1 when right)");
            if !async_rows.is_empty() {
                outln!();
                outln!(
                    "# async TP, one PE per rank: ag+gemm gathers a sequence-parallel [tokens/tp, hidden] input under the column GEMM (hidden -> ffn/tp); gemm+rs reduce-scatters the row GEMM's (ffn/tp -> hidden) partial sums under it"
                );
                let skipped: Vec<String> = sizes
                    .iter()
                    .filter(|tp| **tp >= 2 && !async_sizes.contains(tp))
                    .map(|tp| tp.to_string())
                    .collect();
                if !skipped.is_empty() {
                    outln!(
                        "# tp {} skipped: {} tokens do not split evenly over them",
                        skipped.join(", "),
                        a.tokens
                    );
                }
                outln!(
                    "{:>7} {:>3} {:>11} {:>12} {:>11} {:>7} {:>10}  check",
                    "op",
                    "tp",
                    "fused(us)",
                    "unfused(us)",
                    "gemm(us)",
                    "saved",
                    "err/bound"
                );
                for r in &async_rows {
                    outln!(
                        "{:>7} {:>3} {:>11.3} {:>12.3} {:>11.3} {:>6.1}% {:>10.2e}  {}",
                        r.op.name(),
                        r.tp,
                        us(r.fused_ps),
                        us(r.unfused_ps),
                        us(r.gemm_ps),
                        100.0 * (1.0 - r.fused_ps as f64 / r.unfused_ps.max(1) as f64),
                        r.err_ratio,
                        if r.correct() { "OK" } else { "WRONG" }
                    );
                }
                outln!(
                    "# unfused: the registry's collective and the GEMM one after the other; gemm: rank 0's GEMM in it"
                );
                outln!(
                    "# the fused kernels multiply chunk by chunk: below 128 rows per rank (one GEMM tile) each chunk loads the weight again, which can cost more than the overlap saves"
                );
            }
            if !attention_rows.is_empty() {
                let (h, h_kv) = tp_bench::attention_heads(shape);
                outln!();
                outln!(
                    "# sequence-parallel attention (tp::ring_attention), one PE per rank: {} positions split over the ranks, {h} query and {h_kv} key/value head(s) of {}; keys and values pass round the ranks' ring under a flash-style attention",
                    a.tokens,
                    tp_bench::HEAD_DIM
                );
                outln!(
                    "{:>7} {:>3} {:>11} {:>9} {:>8} {:>10}  check",
                    "attn",
                    "tp",
                    "time(us)",
                    "TFLOP/s",
                    "speedup",
                    "err/bound"
                );
                for r in &attention_rows {
                    let one = attention_rows
                        .iter()
                        .find(|o| o.causal == r.causal && o.tp == 1)
                        .map_or(r.time_ps, |o| o.time_ps);
                    outln!(
                        "{:>7} {:>3} {:>11.3} {:>9.2} {:>7.2}x {:>10.2e}  {}",
                        if r.causal { "causal" } else { "full" },
                        r.tp,
                        us(r.time_ps),
                        r.flops as f64 / r.time_ps.max(1) as f64,
                        one as f64 / r.time_ps.max(1) as f64,
                        r.err_ratio,
                        if r.correct() { "OK" } else { "WRONG" }
                    );
                }
                outln!("# speedup: over the same attention on one rank; causal: later ranks' keys are masked whole, so the last rank does the most work (not balanced)");
                outln!("# err/bound: the largest error over what rounding the probabilities to f16 may cost (at most 1 when right)");
            }
        }
        Format::Json => {
            let v: Vec<_> = rows
                .iter()
                .map(|r| {
                    json!({
                        "layer": r.layer.name(),
                        "tp": r.tp,
                        "total_ps": r.total_ps,
                        "gemm_ps": r.gemm_ps,
                        "comm_ps": r.comm_ps,
                        "flops": r.flops,
                        "err_over_bound": r.err_ratio,
                        "ok": r.correct(),
                    })
                })
                .collect();
            let a: Vec<_> = async_rows
                .iter()
                .map(|r| {
                    json!({
                        "op": r.op.name(),
                        "tp": r.tp,
                        "fused_ps": r.fused_ps,
                        "unfused_ps": r.unfused_ps,
                        "gemm_ps": r.gemm_ps,
                        "err_over_bound": r.err_ratio,
                        "ok": r.correct(),
                    })
                })
                .collect();
            let att: Vec<_> = attention_rows
                .iter()
                .map(|r| {
                    json!({
                        "causal": r.causal,
                        "tp": r.tp,
                        "time_ps": r.time_ps,
                        "flops": r.flops,
                        "err_over_bound": r.err_ratio,
                        "ok": r.correct(),
                    })
                })
                .collect();
            outln!(
                "{}",
                serde_json::to_string_pretty(
                    &json!({ "topology": topo.spec.name, "rows": v, "async": a, "attention": att })
                )
                .unwrap_or_default()
            );
        }
    }
    if wrong == 0 {
        ExitCode::SUCCESS
    } else {
        errln!("error: {wrong} layer(s), async-TP or attention kernel(s) gave wrong results");
        ExitCode::from(1)
    }
}

/// What `--algo default` runs, for its header line: "`rd_allreduce` below
/// 16384 bytes per rank, `ring_allreduce` from 16384 on".
fn describe_bands(bands: &[(u64, String)]) -> String {
    if let [(_, only)] = bands {
        return format!("`{only}` at every size");
    }
    let mut parts = Vec::new();
    for (i, (from, name)) in bands.iter().enumerate() {
        parts.push(match (i, bands.get(i + 1)) {
            (0, Some((to, _))) => format!("`{name}` below {to} bytes per rank"),
            (_, Some((to, _))) => format!("`{name}` from {from} to {to}"),
            (_, None) => format!("`{name}` from {from} on"),
        });
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::describe_bands;

    #[test]
    fn bands_read_as_a_curve() {
        let b = |v: &[(u64, &str)]| v.iter().map(|&(f, n)| (f, n.to_string())).collect::<Vec<_>>();
        assert_eq!(describe_bands(&b(&[(0, "ring")])), "`ring` at every size");
        assert_eq!(
            describe_bands(&b(&[(0, "rd"), (16384, "ring")])),
            "`rd` below 16384 bytes per rank, `ring` from 16384 on"
        );
        assert_eq!(
            describe_bands(&b(&[(0, "rd"), (1024, "tree"), (65536, "rd")])),
            "`rd` below 1024 bytes per rank, `tree` from 1024 to 65536, `rd` from 65536 on"
        );
    }
}
