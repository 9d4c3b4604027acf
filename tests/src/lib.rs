//! Shared helpers for the golden tests: locating the repository, checking
//! a file the way `tlc check` does, and comparing against (or, with
//! `BLESS=1`, rewriting) expected output files.

use kernbench_compiler::diag::{render_human, render_summary, ColorMode, SourceMap};
use kernbench_compiler::sema::{self, Konst};
use std::path::{Path, PathBuf};

/// The repository root (the parent of this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Deterministic values in [-1, 1) from a seed (a small LCG), exactly
/// representable in f16, so that an f64 reference sees what the machine
/// reads from f16 tensors.
pub fn f16_values(n: usize, seed: u64) -> Vec<f32> {
    let state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    kernbench_runtime::tp::bench::f16_values_from(state, n)
}

pub fn blessing() -> bool {
    std::env::var_os("BLESS").is_some_and(|v| v != "0")
}

/// `# tlc-flags: -D A=1 -D B=f16` on a file's first line.
pub fn flags_of(source: &str) -> Vec<(String, Konst)> {
    let Some(rest) = source.lines().next().and_then(|l| l.strip_prefix("# tlc-flags:")) else {
        return Vec::new();
    };
    let words: Vec<&str> = rest.split_whitespace().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let def = if words[i] == "-D" {
            i += 1;
            words.get(i).copied()
        } else {
            words[i].strip_prefix("-D")
        };
        if let Some((name, value)) = def.and_then(|d| d.split_once('=')) {
            out.push((name.to_string(), Konst::parse_define(value)));
        }
        i += 1;
    }
    out
}

/// What `tlc check --color never FILE` prints to stderr, for a file given
/// by its path relative to the repository root. Must run with the
/// repository root as the current folder (see [`enter_repo_root`]).
pub fn check_output(rel: &Path) -> String {
    let source = std::fs::read_to_string(rel).unwrap_or_else(|e| panic!("reading {}: {e}", rel.display()));
    let options = sema::Options {
        defines: flags_of(&source).into_iter().collect(),
        stdlib_root: Some(PathBuf::from("stdlib")),
    };
    let lower = directive(&source, "# tlc-lower:");
    let mut session = sema::Session::new(options);
    session.add_file(&rel.display().to_string(), Some(rel.to_path_buf()), source);
    let out = match lower {
        // Diagnostics that only lowering reports (E0214).
        Some(kernel) => session.lower(&kernel).0,
        None => session.finish(),
    };
    format!(
        "{}{}",
        render_human(&out.diagnostics, &out.sources, ColorMode::Never),
        render_summary(&out.diagnostics)
    )
}

/// The value of a `# name: value` header line.
pub fn directive(source: &str, prefix: &str) -> Option<String> {
    source
        .lines()
        .take_while(|l| l.starts_with('#'))
        .find_map(|l| l.strip_prefix(prefix).map(|v| v.trim().to_string()))
}

/// The IR text of every kernel of a file (or of `# kernel: NAME`), as
/// `tlc emit-ir` prints it, or the diagnostics if lowering fails.
pub fn ir_output(rel: &Path) -> String {
    let mut text = String::new();
    for lowered in lower_all(rel) {
        match lowered {
            Ok((f, sources)) => text.push_str(&kernbench_compiler::ir::print_function(&f, &sources)),
            Err(e) => text.push_str(&e),
        }
    }
    text
}

/// Every kernel of `rel` lowered (or the one `# kernel: NAME` names, with
/// the file's `# tlc-flags`), in order: the IR and the sources it points
/// into, or the rendered diagnostics and error.
pub fn lower_all(rel: &Path) -> Vec<Result<(kernbench_compiler::ir::Function, SourceMap), String>> {
    let source = std::fs::read_to_string(rel).unwrap_or_else(|e| panic!("reading {}: {e}", rel.display()));
    let options = sema::Options {
        defines: flags_of(&source).into_iter().collect(),
        stdlib_root: Some(PathBuf::from("stdlib")),
    };
    let names: Vec<String> = match directive(&source, "# kernel:") {
        Some(k) => vec![k],
        None => {
            let mut s = sema::Session::new(options.clone());
            s.add_file(&rel.display().to_string(), Some(rel.to_path_buf()), source.clone());
            s.finish().kernels.into_iter().map(|k| k.name).collect()
        }
    };
    names
        .into_iter()
        .map(|name| {
            let mut s = sema::Session::new(options.clone());
            s.add_file(&rel.display().to_string(), Some(rel.to_path_buf()), source.clone());
            let (out, ir) = s.lower(&name);
            match ir {
                Ok(f) => Ok((f, out.sources)),
                Err(e) => Err(format!(
                    "{}error: {e}\n",
                    render_human(&out.diagnostics, &out.sources, ColorMode::Never)
                )),
            }
        })
        .collect()
}

/// Makes relative paths in diagnostics start at the repository root.
pub fn enter_repo_root() {
    std::env::set_current_dir(repo_root()).expect("cannot enter the repository root");
}

/// Compares `actual` with the file at `expected_path`, or rewrites it when
/// blessing. Returns a readable diff on mismatch.
pub fn compare_or_bless(expected_path: &Path, actual: &str) -> Result<(), String> {
    if blessing() {
        if actual.is_empty() {
            let _ = std::fs::remove_file(expected_path);
        } else {
            std::fs::write(expected_path, actual).map_err(|e| format!("writing {}: {e}", expected_path.display()))?;
        }
        return Ok(());
    }
    let expected = std::fs::read_to_string(expected_path).unwrap_or_default();
    if expected == actual {
        return Ok(());
    }
    let diff = similar::TextDiff::from_lines(expected.as_str(), actual);
    let mut text = format!("--- {} (expected)\n+++ actual\n", expected_path.display());
    for hunk in diff.unified_diff().context_radius(2).iter_hunks() {
        text.push_str(&hunk.to_string());
    }
    Err(text)
}

/// Every file with extension `ext` directly in `dir`, sorted.
pub fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == ext))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

pub mod exec {
    //! Running kernels from source on both data paths, for the numerics and
    //! differential tests.

    use kernbench_compiler::datapath::{interp::Interpreter, jit::Jit, plan_with, DataPath, Fusion, RtValue, Tensor};
    use kernbench_compiler::diag::SourceMap;
    use kernbench_compiler::ir::Function;
    use kernbench_compiler::sema::{self, Konst};
    use kernbench_runtime::exec::{run_grid, FlatMemory, RunError};

    /// Lowers kernel `name` of `source` with `-D` bindings.
    pub fn lower(source: &str, name: &str, defines: &[(&str, Konst)]) -> Result<Function, String> {
        lower_file("case.tl", source, name, defines).map(|(f, _)| f)
    }

    /// Lowers kernel `name` of the file at `path` (its imports resolve
    /// next to it).
    pub fn lower_path(
        path: &std::path::Path,
        name: &str,
        defines: &[(&str, Konst)],
    ) -> Result<(Function, SourceMap), String> {
        let source = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        lower_at(
            &path.display().to_string(),
            Some(path.to_path_buf()),
            &source,
            name,
            defines,
        )
    }

    /// Like [`lower`], naming the file and returning its source map.
    pub fn lower_file(
        file: &str,
        source: &str,
        name: &str,
        defines: &[(&str, Konst)],
    ) -> Result<(Function, SourceMap), String> {
        lower_at(file, None, source, name, defines)
    }

    fn lower_at(
        file: &str,
        path: Option<std::path::PathBuf>,
        source: &str,
        name: &str,
        defines: &[(&str, Konst)],
    ) -> Result<(Function, SourceMap), String> {
        let options = sema::Options {
            defines: defines.iter().map(|(n, k)| (n.to_string(), k.clone())).collect(),
            stdlib_root: Some(crate::repo_root().join("stdlib")),
        };
        let mut s = sema::Session::new(options);
        s.add_file(file, path, source.to_string());
        let (out, ir) = s.lower(name);
        match ir {
            Ok(f) => Ok((f, out.sources)),
            Err(e) => {
                let msgs: Vec<String> = out
                    .diagnostics
                    .iter()
                    .filter(|d| d.is_error())
                    .map(|d| format!("{}: {}", d.code.as_str(), d.message))
                    .collect();
                Err(format!("{e}: {}", msgs.join("; ")))
            }
        }
    }

    /// A kernel argument.
    #[derive(Clone)]
    pub enum Arg {
        Tensor(Tensor),
        Scalar(u64),
    }

    /// Runs `func` over `grid` with `args` on the JIT or the interpreter;
    /// returns every tensor argument after the run.
    pub fn run_raw(func: &Function, args: &[Arg], grid: [u32; 3], jit: bool) -> Result<Vec<Tensor>, RunError> {
        run_fused(func, args, grid, jit, Fusion::Full)
    }

    /// [`run_raw`] with a given fusion (memory operations stay alone with
    /// [`Fusion::None`] and [`Fusion::Compute`]).
    pub fn run_fused(
        func: &Function,
        args: &[Arg],
        grid: [u32; 3],
        jit: bool,
        fusion: Fusion,
    ) -> Result<Vec<Tensor>, RunError> {
        let mut dp: Box<dyn DataPath> = if jit {
            Box::new(Jit::verifying())
        } else {
            Box::new(Interpreter)
        };
        run_on(func, args, grid, dp.as_mut(), fusion)
    }

    /// [`run_fused`] on a given data path.
    pub fn run_on(
        func: &Function,
        args: &[Arg],
        grid: [u32; 3],
        dp: &mut dyn DataPath,
        fusion: Fusion,
    ) -> Result<Vec<Tensor>, RunError> {
        let mut mem = FlatMemory::new();
        let mut values = Vec::new();
        let mut tensors = Vec::new();
        for (i, a) in args.iter().enumerate() {
            match a {
                Arg::Scalar(b) => values.push(RtValue::Scalar(*b)),
                Arg::Tensor(t) => {
                    let name = format!("arg{i}");
                    let addr = mem.alloc(&name, t.bytes().to_vec());
                    tensors.push((name, t.clone()));
                    values.push(RtValue::Scalar(addr));
                }
            }
        }
        let p = plan_with(func, fusion);
        if let Err(e) = dp.prepare(func, &p) {
            panic!("cannot compile {}: {e}", func.name);
        }
        run_grid(func, &p, dp, &mut mem, grid, &values, None)?;
        Ok(tensors
            .into_iter()
            .map(|(name, t)| {
                let seg = mem.segment_named(&name).map(|s| s.data.clone()).unwrap_or_default();
                Tensor::from_bytes(t.elem, &t.shape, &seg).unwrap_or(t)
            })
            .collect())
    }

    /// [`run_raw`] with the error as text.
    pub fn run(func: &Function, args: &[Arg], grid: [u32; 3], jit: bool) -> Result<Vec<Tensor>, String> {
        run_text(func, args, grid, jit, Fusion::Full)
    }

    /// [`run_fused`] with the error as text.
    pub fn run_text(
        func: &Function,
        args: &[Arg],
        grid: [u32; 3],
        jit: bool,
        fusion: Fusion,
    ) -> Result<Vec<Tensor>, String> {
        run_fused(func, args, grid, jit, fusion).map_err(|e| format!("{} at {:?}", e.error.kind, e.error.inst))
    }
}

pub mod sim {
    //! Running kernels on the simulated machine, for the timing and
    //! communication tests.

    use kernbench_compiler::datapath::{jit::Jit, DataPath, Tensor};
    use kernbench_compiler::ir::Function;
    use kernbench_runtime::sim::place::{self, LaunchArg};
    use kernbench_runtime::sim::{Communicator, Launch, Machine, Report, SimError};
    use kernbench_runtime::topology::{PeCoord, Topology};

    pub struct SimRun {
        pub report: Report,
        /// Every tensor argument after the run (shards gathered).
        pub tensors: Vec<Tensor>,
        pub machine: Machine,
        pub placed: Vec<place::PlacedTensor>,
    }

    /// Runs `func` on `pes` of `topo` (one program per PE unless `grid`),
    /// on the verifying JIT and one thread, recording a trace when `trace`
    /// (the usual case of [`TestLaunch`]).
    pub fn simulate(
        topo: &Topology,
        pes: Vec<PeCoord>,
        func: &Function,
        args: Vec<LaunchArg>,
        grid: Option<[u32; 3]>,
        trace: bool,
    ) -> Result<SimRun, SimError> {
        let mut launch = TestLaunch::new(topo, pes, func, args);
        launch.grid = grid;
        launch.trace = trace;
        launch.run()
    }

    /// A launch of a test: `func` on `pes` of `topo` with `args` placed as
    /// their layouts say, and the rest at its default until the test sets
    /// it (one program per PE, no trace, one thread, the verifying JIT).
    pub struct TestLaunch<'a> {
        pub topo: &'a Topology,
        pub pes: Vec<PeCoord>,
        pub func: &'a Function,
        pub args: Vec<LaunchArg>,
        pub grid: Option<[u32; 3]>,
        pub trace: bool,
        /// `Machine::threads`.
        pub threads: usize,
        pub data_path: Box<dyn DataPath>,
        /// `Launch::time_limit_ps`.
        pub time_limit_ps: Option<u64>,
        /// `Launch::progress_ps`.
        pub progress_ps: Option<&'a std::sync::atomic::AtomicU64>,
    }

    impl<'a> TestLaunch<'a> {
        pub fn new(topo: &'a Topology, pes: Vec<PeCoord>, func: &'a Function, args: Vec<LaunchArg>) -> Self {
            TestLaunch {
                topo,
                pes,
                func,
                args,
                grid: None,
                trace: false,
                threads: 1,
                data_path: Box::new(Jit::verifying()),
                time_limit_ps: None,
                progress_ps: None,
            }
        }

        /// Places the arguments, runs, and gathers every tensor back.
        pub fn run(mut self) -> Result<SimRun, SimError> {
            let comm = Communicator::new(self.pes);
            let mut machine = Machine::new(self.topo);
            machine.threads = self.threads;
            let (rank_args, placed) = place::place_args(&mut machine, &comm, self.args).map_err(SimError::Setup)?;
            let mut launch = Launch::new(self.func, &comm, rank_args);
            launch.grid = self.grid.unwrap_or(launch.grid);
            launch.trace = self.trace;
            launch.time_limit_ps = self.time_limit_ps;
            launch.progress_ps = self.progress_ps;
            let report = machine.run(&launch, &mut *self.data_path)?;
            let tensors = placed.iter().map(|t| place::gather(&machine, t)).collect();
            Ok(SimRun {
                report,
                tensors,
                machine,
                placed,
            })
        }
    }

    /// A tensor argument with a layout.
    pub fn tensor(name: &str, t: Tensor, layout: &[&str]) -> LaunchArg {
        LaunchArg::Tensor {
            name: name.into(),
            tensor: t,
            layout: place::Layout::parse(layout).expect("a valid layout"),
        }
    }
}
