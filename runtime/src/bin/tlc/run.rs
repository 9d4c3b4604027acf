//! `tlc run`: lower a kernel, build its arguments, run it — on the
//! simulated machine (default: real data and simulated time, on the PEs of
//! `--pes`), or with `--functional` on the untimed executor — report errors
//! at their source line, print the timing summary, and write the tensors
//! back.

use super::failure;
use super::{color_mode, kernels_of, lower_kernel, parse_defines, read_source, Backend, Color, Format};
use kernbench_compiler::datapath::{interp::Interpreter, jit::Jit, plan, DataPath, RtValue, Tensor};
use kernbench_compiler::sema::{
    self,
    types::{DType, Elem},
};
use kernbench_runtime::args::{self, HostArg};
use kernbench_runtime::exec::{render_run_error, run_grid, FlatMemory};
use kernbench_runtime::sim::place::{self, LaunchArg, Layout};
use kernbench_runtime::sim::{self, Communicator, Launch, Machine};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

pub struct RunArgs {
    pub file: PathBuf,
    /// `None`: the file's only kernel.
    pub kernel: Option<String>,
    pub grid: Option<String>,
    pub args: Vec<String>,
    pub define: Vec<String>,
    pub out: Option<PathBuf>,
    pub backend: Backend,
    pub color: Color,
    pub stdlib: Option<PathBuf>,
    pub functional: bool,
    pub pes: String,
    pub threads: usize,
    pub topology: Option<String>,
    pub trace: Option<PathBuf>,
    pub trace_links: Option<usize>,
    pub format: Format,
    pub time_limit_ps: Option<u64>,
}

/// Parses `--grid`: 1 to 3 axes, each from 1 to `i32::MAX` (a kernel sees
/// `tl.program_id` and `tl.num_programs` as i32, so a larger axis would
/// wrap).
fn parse_grid(g: &str) -> Result<[u32; 3], String> {
    let dims: Result<Vec<u32>, _> = g.split(',').map(|d| d.trim().parse::<u32>()).collect();
    match dims {
        Ok(d) if (1..=3).contains(&d.len()) && d.iter().all(|&x| x > 0 && x <= i32::MAX as u32) => {
            let programs: u64 = d.iter().map(|&x| u64::from(x)).product();
            if programs > u64::from(u32::MAX) {
                return Err(format!(
                    "invalid --grid `{g}`: {programs} programs, more than a launch holds (2^32 - 1)"
                ));
            }
            let mut out = [1; 3];
            out[..d.len()].copy_from_slice(&d);
            Ok(out)
        }
        _ => Err(format!(
            "invalid --grid `{g}`: expected 1 to 3 integers from 1 to {}, e.g. `64` or `8,8`",
            i32::MAX
        )),
    }
}

/// Splits `NAME=SPEC[:LAYOUT…]` into the spec and the layout words
/// (`shard`, `replicate`, `hbm`, `sram`, `tcm`).
fn split_layout(text: &str) -> Result<(String, Layout), String> {
    let mut words = Vec::new();
    let mut rest = text;
    // Every trailing `:word` is a layout word (a misspelt one is an error
    // that says so, not part of a file name: no `.npy` path ends in one).
    while let Some((head, last)) = rest.rsplit_once(':') {
        let word = last.trim();
        if !word.is_empty() && word.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            words.push(last.trim());
            rest = head;
        } else {
            break;
        }
    }
    words.reverse();
    let layout = Layout::parse(&words).map_err(|e| format!("`--arg {text}`: {e}"))?;
    Ok((rest.to_string(), layout))
}

fn pointee_elem(e: Elem) -> Elem {
    match e {
        Elem::Ptr(d) => Elem::Num(d),
        other => other,
    }
}

/// A summary figure: exact for integer tensors (no rounding through a
/// float, no decimals), the float value otherwise.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Figure {
    Int(i128),
    Float(f64),
}

impl Figure {
    fn text(self) -> String {
        match self {
            Figure::Int(v) => v.to_string(),
            Figure::Float(v) => format!("{v:.6}"),
        }
    }

    /// JSON has no infinities nor NaN: those are the strings "inf",
    /// "-inf" and "nan" (serde_json would write null, which reads as no
    /// data); an integer past i64 (a sum) is the nearest float.
    fn json(self) -> serde_json::Value {
        match self {
            Figure::Int(v) => i64::try_from(v).map_or_else(|_| (v as f64).into(), Into::into),
            Figure::Float(v) if v.is_finite() => v.into(),
            Figure::Float(v) if v.is_nan() => "nan".into(),
            Figure::Float(v) if v > 0.0 => "inf".into(),
            Figure::Float(_) => "-inf".into(),
        }
    }
}

/// What an output's summary says of it.
struct Stats {
    sum: Figure,
    /// Of the values that are not NaN (none when every value is NaN).
    min_max: Option<(Figure, Figure)>,
    nans: usize,
}

/// Calls `f` with each element's bits, in order.
fn each_word(t: &Tensor, mut f: impl FnMut(u64)) {
    let size = t.dtype().size_bytes() as usize;
    for c in t.bytes().chunks_exact(size.max(1)) {
        let mut w = [0u8; 8];
        w[..size].copy_from_slice(c);
        f(u64::from_le_bytes(w));
    }
}

/// A tensor's sum, min, max and NaN count.
fn stats(t: &Tensor) -> Stats {
    use kernbench_compiler::datapath::elem;
    let d = t.dtype();
    let size = d.size_bytes() as usize;
    let values = t.bytes().len() / size.max(1);
    if !d.is_float() {
        // Integers add up exactly (an i128 holds any sum of i64s a
        // machine can hold).
        let (mut sum, mut lo, mut hi) = (0i128, i64::MAX, i64::MIN);
        let mut add = |v: i64| {
            sum += i128::from(v);
            lo = lo.min(v);
            hi = hi.max(v);
        };
        match d {
            DType::I32 => t
                .bytes()
                .chunks_exact(4)
                .for_each(|c| add(i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))),
            _ => each_word(t, |b| add(elem::to_i64(d, b))),
        }
        return Stats {
            sum: Figure::Int(sum),
            min_max: (values > 0).then_some((Figure::Int(lo.into()), Figure::Int(hi.into()))),
            nans: 0,
        };
    }
    let (mut sum, mut lo, mut hi) = (0.0f64, f64::INFINITY, f64::NEG_INFINITY);
    // `f64::min` passes over NaN: they are counted, and min and max are
    // those of the other values (the sum is NaN, as it should be).
    let mut nans = 0usize;
    let mut add = |v: f64| {
        sum += v;
        if v.is_nan() {
            nans += 1;
        }
        lo = lo.min(v);
        hi = hi.max(v);
    };
    // f32 without a per-element dispatch (outputs of a many-PE run are
    // hundreds of MiB); the same values in the same order.
    match d {
        DType::F32 => t
            .bytes()
            .chunks_exact(4)
            .for_each(|c| add(f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)),
        _ => each_word(t, |b| add(elem::to_f32(d, b) as f64)),
    }
    Stats {
        sum: Figure::Float(sum),
        // No values, or only NaN: no range.
        min_max: (nans < values).then_some((Figure::Float(lo), Figure::Float(hi))),
        nans,
    }
}

/// A tensor's one-line summary (sum, min, max).
fn summary_line(name: &str, t: &Tensor) -> String {
    let Stats { sum, min_max, nans } = stats(t);
    let range = min_max.map_or(String::new(), |(lo, hi)| {
        format!("  min {}  max {}", lo.text(), hi.text())
    });
    // Min and max are the other values'; with none, say every one is NaN.
    let nans = match (nans, min_max) {
        (0, _) => String::new(),
        (n, None) if n == t.numel() => format!("  all {n} NaN"),
        (n, _) => format!("  {n} NaN"),
    };
    format!("  {name}: {}{:?}  sum {}{range}{nans}", t.dtype(), t.shape, sum.text())
}

/// The outputs as JSON: name, dtype, shape, sum, min, max, NaN count,
/// and the file `--out` wrote (min and max are null when every value is
/// NaN).
fn outputs_json(out: Option<&Path>, tensors: &[(String, Tensor)]) -> serde_json::Value {
    tensors
        .iter()
        .map(|(name, t)| {
            let st = stats(t);
            serde_json::json!({
                "name": name,
                "dtype": t.dtype().to_string(),
                "shape": t.shape.to_vec(),
                "sum": st.sum.json(),
                "min": st.min_max.map(|m| m.0.json()),
                "max": st.min_max.map(|m| m.1.json()),
                "nan": st.nans,
                "file": out.map(|d| d.join(format!("{name}.npy")).display().to_string()),
            })
        })
        .collect()
}

/// Writes every tensor to `DIR/NAME.npy`, or prints its summary on
/// stdout (unless `quiet`: the JSON summary has it).
fn emit_tensors(out: Option<&Path>, tensors: &[(String, Tensor)], quiet: bool) -> Result<(), String> {
    match out {
        None => {
            for (name, t) in tensors.iter().filter(|_| !quiet) {
                outln!("{}", summary_line(name, t));
            }
        }
        Some(dir) => {
            make_out_dir(dir)?;
            // Every tensor that can be written is: one that cannot is no
            // reason to lose the others (the kernel's result among them).
            let mut failed = Vec::new();
            for (name, t) in tensors {
                let path = dir.join(format!("{name}.npy"));
                match args::write_npy(&path, t) {
                    Ok(()) => errln!("wrote {}", path.display()),
                    Err(e) => failed.push(e),
                }
            }
            if !failed.is_empty() {
                return Err(failed.join("; "));
            }
        }
    }
    Ok(())
}

/// Writes `report`'s Chrome trace (of `what`) to `file`, opened before the
/// run at `path`, and says so; why not when it cannot.
fn write_trace(
    path: &Path,
    mut file: std::fs::File,
    report: &sim::Report,
    func: &kernbench_compiler::ir::Function,
    sources: &kernbench_compiler::diag::SourceMap,
    links: Option<usize>,
    what: &str,
) -> Result<(), String> {
    file.set_len(0)
        .and_then(|()| {
            let mut out = std::io::BufWriter::new(&mut file);
            sim::write_trace_json(report, func, sources, links, &mut out)?;
            out.flush()
        })
        .map_err(|e| format!("cannot write `{}`: {e}", path.display()))?;
    errln!(
        "wrote {}: {what} (open it in https://ui.perfetto.dev or chrome://tracing)",
        path.display()
    );
    Ok(())
}

fn new_data_path(backend: Backend) -> Box<dyn DataPath> {
    match backend {
        Backend::Jit => Box::new(Jit::new()),
        Backend::Interp => Box::new(Interpreter),
    }
}

/// Makes `--out DIR` exist as a directory, before the run (so that one
/// that cannot be made, in `/proc` say, is known before minutes of
/// simulation); returns the directories it made, innermost first, for a
/// failed run to take away again.
fn make_out_dir(dir: &Path) -> Result<Vec<PathBuf>, String> {
    out_dir_usable(dir)?;
    let made: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
        .map(Path::to_path_buf)
        .collect();
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
    Ok(made)
}

/// Takes away the directories [`make_out_dir`] made (innermost first),
/// each only while empty: a run that fails leaves none behind.
fn remove_made(dirs: &[PathBuf]) {
    for dir in dirs {
        let _ = std::fs::remove_dir(dir);
    }
}

/// Whether `--out DIR` is a directory or could be made one, as far as the
/// paths show: a usage error when a file is in its way, checked before
/// anything else ([`make_out_dir`] then makes it).
fn out_dir_usable(dir: &Path) -> Result<(), String> {
    if dir.exists() && !dir.is_dir() {
        return Err(format!("--out `{}` is not a directory", dir.display()));
    }
    let blocker = dir.ancestors().skip(1).find(|a| a.exists() && !a.is_dir());
    match blocker {
        Some(file) => Err(format!(
            "cannot create --out `{}`: `{}` is not a directory",
            dir.display(),
            file.display()
        )),
        None => Ok(()),
    }
}

pub fn run(a: RunArgs) -> ExitCode {
    let fail = failure::of_command();
    let defines = match parse_defines(&a.define) {
        Ok(d) => d,
        Err(e) => return fail.usage(&e),
    };
    if let Some(Err(e)) = a.out.as_deref().map(out_dir_usable) {
        return fail.usage(&e);
    }
    let grid = match a.grid.as_deref().map(parse_grid).transpose() {
        Ok(g) => g,
        Err(e) => return fail.usage(&e),
    };
    let mut specs = Vec::new();
    for text in &a.args {
        let parsed = split_layout(text).and_then(|(spec, layout)| {
            if a.functional && layout != Layout::default() {
                return Err(format!(
                    "`--arg {text}`: layouts need the simulated machine (drop --functional)"
                ));
            }
            args::parse_arg(&spec).map(|(n, s)| (n, s, layout))
        });
        match parsed {
            Ok(x) if specs.iter().any(|(n, _, _)| *n == x.0) => {
                return fail.usage(&format!("`--arg {}=…` is given twice", x.0))
            }
            Ok(x) => specs.push(x),
            Err(e) => return fail.usage(&e),
        }
    }
    // The trace would overwrite an output (or the other way round, by
    // the order they are written): refuse before running.
    if let (Some(trace), Some(out)) = (a.trace.as_deref(), a.out.as_deref()) {
        if let Some((name, _, _)) = specs.iter().find(|(n, _, _)| out.join(format!("{n}.npy")) == trace) {
            return fail.usage(&format!(
                "--trace `{}` is where --out writes `{name}`: give the trace another path",
                trace.display()
            ));
        }
    }
    let topo = match super::topology_or_error(a.topology.as_deref()) {
        Ok(t) => t,
        Err((code, e)) => return fail.topology(code, &e),
    };
    let pes = match sim::select_pes(&topo, &a.pes) {
        Ok(p) => p,
        Err(e) => return fail.usage(&e),
    };
    let source = match read_source(&a.file) {
        Ok(s) => s,
        Err(e) => return fail.usage(&e),
    };
    let stdlib_root = match super::stdlib_root(a.stdlib.clone()) {
        Ok(s) => s,
        Err(e) => return fail.usage(&e),
    };
    let mut options = sema::Options { defines, stdlib_root };
    super::bind_layout(&a.file, &source, &mut options, &topo);
    let kernel = match &a.kernel {
        Some(k) => k.clone(),
        None => match kernels_of(&a.file, &source, &options) {
            (names, _) if names.len() == 1 => names[0].clone(),
            // Lowering reports the file's errors.
            (_, true) => String::new(),
            (names, false) if names.is_empty() => {
                return fail.usage(&format!("`{}` defines no `@kernel`", a.file.display()))
            }
            (many, false) => {
                return fail.usage(&format!(
                    "`{}` defines {} kernels ({}): name one with --kernel",
                    a.file.display(),
                    many.len(),
                    many.join(", ")
                ))
            }
        },
    };
    let (func, sources) = match lower_kernel(&a.file, &source, &kernel, &options, a.color) {
        Ok(x) => x,
        Err(failure) => return fail.lower(&failure),
    };
    for (name, _, _) in &specs {
        if !func.params.iter().any(|p| &p.name == name) {
            let names: Vec<&str> = func.params.iter().map(|p| p.name.as_str()).collect();
            return fail.usage(&format!(
                "kernel `{}` has no parameter `{name}` (parameters: {})",
                func.name,
                names.join(", ")
            ));
        }
    }
    // Each parameter's value, in parameter order.
    let mut host_args = Vec::new();
    let fit_mem = sim::SimMemory::new(&topo);
    for p in &func.params {
        let Some((_, spec, layout)) = specs.iter().find(|(n, _, _)| n == &p.name) else {
            return fail.usage(&format!(
                "missing `--arg {}=…` for parameter `{}: {}`",
                p.name, p.name, p.ty
            ));
        };
        // A tensor the host would make is checked against the memory it
        // goes to first: `rand(1073741824,f32)` took 25 s and 8 GB before
        // the HBM slice refused it.
        if let (false, Some(bytes)) = (a.functional, args::made_tensor_bytes(spec, &p.ty)) {
            if let Err(e) = place::check_fits(&fit_mem, pes[0], pes.len(), &p.name, bytes, *layout) {
                return fail.usage(&e);
            }
        }
        match args::resolve(&p.name, spec, &p.ty) {
            // A scalar is passed by value to every rank: it has no memory
            // or distribution to choose.
            Ok(HostArg::Scalar(_)) if *layout != Layout::default() => {
                return fail.usage(&format!(
                    "`--arg {}=…`: `{}` is the scalar `{}`, which takes no layout (`:shard`, `:tcm`, …)",
                    p.name, p.name, p.ty
                ))
            }
            Ok(h) => host_args.push((p.name.clone(), h, *layout)),
            Err(e) => return fail.usage(&e),
        }
    }
    let mut dp = new_data_path(a.backend);
    if a.functional {
        return functional(
            &func,
            &sources,
            &a,
            fail,
            grid.unwrap_or([1, 1, 1]),
            host_args,
            dp.as_mut(),
        );
    }

    let comm = Communicator::new(pes);
    let mut machine = Machine::new(&topo);
    machine.threads = a.threads;
    let launch_args = host_args
        .into_iter()
        .map(|(name, h, layout)| match h {
            HostArg::Scalar(b) => LaunchArg::Scalar(b),
            HostArg::Tensor(t) => LaunchArg::Tensor {
                name,
                tensor: t,
                layout,
            },
        })
        .collect();
    // An argument that cannot be placed (its rows do not split over the
    // ranks, it does not fit its memory) is a bad --arg: exit 2 like the
    // others.
    let (rank_args, placed) = match place::place_args(&mut machine, &comm, launch_args) {
        Ok(x) => x,
        Err(e) => return fail.usage(&e),
    };
    let grid = grid.unwrap_or([comm.world(), 1, 1]);
    // Rank r runs programs r, r + world, …: with fewer programs than
    // ranks, the last ranks run none, and a message to one of them is
    // never received. Worth saying before a deadlock does.
    let programs = grid.iter().map(|&g| u64::from(g)).product::<u64>();
    if programs < u64::from(comm.world()) {
        let last = comm.world() - 1;
        let idle = if programs == u64::from(last) {
            format!("rank {last} runs")
        } else {
            format!("ranks {programs} to {last} run")
        };
        errln!(
            "warning: --grid {} gives {programs} program{} to {} PEs: {idle} no program",
            a.grid.as_deref().unwrap_or_default(),
            if programs == 1 { "" } else { "s" },
            comm.world(),
        );
    }
    let reached_ps = std::sync::atomic::AtomicU64::new(0);
    let mut launch = Launch::new(&func, &comm, rank_args);
    launch.progress_ps = Some(&reached_ps);
    launch.grid = grid;
    launch.trace = a.trace.is_some();
    launch.time_limit_ps = a.time_limit_ps;
    // The trace's file is opened before the run, so that a path that
    // cannot be written is known before minutes of simulation, not after;
    // it is not truncated (nor left behind, if new) unless the run
    // succeeds.
    // --out's directory is made now (a failed run takes it away again);
    // a trace written into it (`--out o --trace o/t.json`) needs it.
    let mut made_dirs = Vec::new();
    if let Some(out) = &a.out {
        let missing = a
            .trace
            .as_deref()
            .and_then(Path::parent)
            .filter(|p| !p.as_os_str().is_empty() && !p.exists() && p.starts_with(out));
        let made = make_out_dir(out).and_then(|mut made| {
            if let Some(dir) = missing {
                let inner = make_out_dir(dir)?;
                made.splice(0..0, inner);
            }
            Ok(made)
        });
        match made {
            Ok(made) => made_dirs = made,
            Err(e) => return fail.error("io", &e),
        }
    }
    let trace_file = match &a.trace {
        Some(path) => match std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
        {
            Ok(f) => {
                let new = f.metadata().map_or(0, |m| m.len()) == 0;
                Some((path, f, new))
            }
            Err(e) => {
                remove_made(&made_dirs);
                return fail.error("io", &format!("cannot write `{}`: {e}", path.display()));
            }
        },
        None => None,
    };
    let t0 = Instant::now();
    let what = format!("`{}` on {} PEs", func.name, comm.world());
    let result = super::progress::simulating(&what, &reached_ps, || machine.run_partial(&launch, dp.as_mut()));
    let wall_ms = t0.elapsed().as_secs_f64() * 1e3;
    let report = match result {
        Ok(r) => r,
        Err((e, partial)) => {
            err!(
                "{}",
                sim::render_sim_error_in(&machine.mem, &func, &sources, &e, color_mode(a.color))
            );
            if a.format == Format::Json {
                outln!(
                    "{}",
                    sim::error_json(&machine.mem, &func, &sources, &e, partial.as_deref())
                );
            }
            match (trace_file, partial) {
                // Stopped by a deadlock or the time limit: the trace up to
                // there shows how it got stuck.
                (Some((path, file, _)), Some(partial)) => {
                    // The run's error is the exit code's reason either way
                    // (and its record the JSON's).
                    if let Err(e) = write_trace(
                        path,
                        file,
                        &partial,
                        &func,
                        &sources,
                        a.trace_links,
                        "the run until it stopped",
                    ) {
                        errln!("error: {e}");
                    }
                }
                (Some((path, _, true)), _) => {
                    let _ = std::fs::remove_file(path);
                }
                _ => {}
            }
            remove_made(&made_dirs);
            return ExitCode::from(1);
        }
    };
    errln!(
        "ran `{}` on {} PE{} of `{}` ({} program{}) with the {} backend{} in {wall_ms:.1} ms wall ({:.2} M events/s)",
        func.name,
        comm.world(),
        if comm.world() == 1 { "" } else { "s" },
        topo.spec.name,
        grid.iter().product::<u32>(),
        if grid.iter().product::<u32>() == 1 { "" } else { "s" },
        dp.name(),
        match report.threads {
            1 => String::new(),
            n => format!(" on {n} threads"),
        },
        report.events as f64 / (wall_ms * 1e3).max(1e-9)
    );
    err!(
        "{}",
        sim::render_unreceived(&func, &sources, &report.unreceived, false, color_mode(a.color))
    );
    // Replicated copies the ranks wrote differently: the output is rank
    // 0's, so the user hears of the others (a warning, and in the JSON).
    let diverging: Vec<(&str, usize, usize)> = placed
        .iter()
        .filter_map(|t| place::replica_divergence(&machine, t).map(|(rank, elem)| (t.name.as_str(), rank, elem)))
        .collect();
    let tensors: Vec<(String, Tensor)> = placed
        .iter()
        .map(|t| (t.name.clone(), place::gather(&machine, t)))
        .collect();
    // Files first: the JSON names them, so they are there when it says so.
    // Every file that can be written is; a write that fails (a tensor or
    // the trace) is the run's error: its record replaces the JSON summary,
    // and the human one is still shown.
    let mut io_errors = Vec::new();
    if a.out.is_some() {
        if let Err(e) = emit_tensors(a.out.as_deref(), &tensors, true) {
            io_errors.push(e);
        }
    }
    if let Some((path, file, _)) = trace_file {
        if let Err(e) = write_trace(path, file, &report, &func, &sources, a.trace_links, "the run") {
            io_errors.push(e);
        }
    }
    if !io_errors.is_empty() {
        if a.format == Format::Human {
            out!("{}", sim::summary_text(&report));
        }
        return fail.error("io", &io_errors.join("; "));
    }
    match a.format {
        Format::Human => out!("{}", sim::summary_text(&report)),
        Format::Json => {
            let mut summary = sim::summary_json(&report);
            summary["outputs"] = outputs_json(a.out.as_deref(), &tensors);
            summary["diverging_replicas"] = diverging
                .iter()
                .map(|(name, rank, elem)| serde_json::json!({"tensor": name, "rank": rank, "element": elem}))
                .collect();
            outln!("{summary}");
        }
    }
    for (name, rank, elem) in &diverging {
        errln!(
            "warning: the ranks' copies of replicated `{name}` differ after the run (rank {rank}'s element {elem} \
             is not rank 0's); the output is rank 0's copy"
        );
    }
    if a.out.is_none() {
        if let Err(e) = emit_tensors(None, &tensors, a.format == Format::Json) {
            errln!("error: {e}");
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}

/// The untimed executor: every program of the grid in turn on flat memory.
fn functional(
    func: &kernbench_compiler::ir::Function,
    sources: &kernbench_compiler::diag::SourceMap,
    a: &RunArgs,
    fail: failure::Failure,
    grid: [u32; 3],
    host_args: Vec<(String, HostArg, Layout)>,
    dp: &mut dyn DataPath,
) -> ExitCode {
    let mut mem = FlatMemory::new();
    let mut values = Vec::new();
    let mut tensors: Vec<(String, Vec<usize>, Elem)> = Vec::new();
    for (name, h, _) in host_args {
        match h {
            HostArg::Scalar(b) => values.push(RtValue::Scalar(b)),
            HostArg::Tensor(t) => {
                let addr = mem.alloc(&name, t.bytes().to_vec());
                tensors.push((name, t.shape.to_vec(), t.elem));
                values.push(RtValue::Scalar(addr));
            }
        }
    }
    let plan = plan(func, true);
    let t0 = Instant::now();
    if let Err(e) = dp.prepare(func, &plan) {
        return fail.error("compile", &format!("cannot compile `{}`: {e}", func.name));
    }
    let compile_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    // No clock here: the time limit bounds the instructions run, one per
    // cycle of the default machine (a lower bound of what it would take).
    let cycle_ps = kernbench_runtime::topology::Topology::default_machine().cycle_ps.max(1);
    let max_steps = a.time_limit_ps.map(|t| t / cycle_ps);
    if max_steps == Some(0) {
        return fail.usage(&format!(
            "--time-limit: with --functional the limit counts instructions, one per cycle ({cycle_ps} ps): {} ps allows none",
            a.time_limit_ps.unwrap_or(0)
        ));
    }
    let result = run_grid(func, &plan, dp, &mut mem, grid, &values, max_steps);
    let run_ms = t1.elapsed().as_secs_f64() * 1e3;
    if let Err(e) = result {
        err!("{}", render_run_error(func, sources, &e, color_mode(a.color)));
        let [x, y, z] = e.program;
        let diagnostic = render_run_error(func, sources, &e, kernbench_compiler::diag::ColorMode::Never);
        let record = serde_json::json!({
            "kind": "exec", "program": [x, y, z], "at": sources.at(func.inst(e.error.inst).loc),
            "what": e.error.kind.to_string(), "message": sim::first_line(&diagnostic),
            "diagnostic": diagnostic.trim_end(),
        });
        return fail.record(record, ExitCode::from(1));
    }
    let programs = grid.iter().map(|&g| g as u64).product::<u64>();
    errln!(
        "ran `{}` on {programs} program{} ({}×{}×{}) with the {} backend: compile {compile_ms:.1} ms, run {run_ms:.1} ms",
        func.name,
        if programs == 1 { "" } else { "s" },
        grid[0],
        grid[1],
        grid[2],
        dp.name()
    );
    let out: Vec<(String, Tensor)> = tensors
        .iter()
        .filter_map(|(name, shape, elem)| {
            let seg = mem.segment_named(name)?;
            Some((name.clone(), Tensor::from_bytes(pointee_elem(*elem), shape, &seg.data)?))
        })
        .collect();
    // With --format json the outputs are in the record, not on lines.
    if let Err(e) = emit_tensors(a.out.as_deref(), &out, fail.json) {
        return fail.error("io", &e);
    }
    if fail.json {
        outln!(
            "{}",
            serde_json::json!({
                "functional": true, "kernel": func.name, "grid": grid, "programs": programs,
                "backend": dp.name(), "outputs": outputs_json(a.out.as_deref(), &out),
            })
        );
    }
    ExitCode::SUCCESS
}
