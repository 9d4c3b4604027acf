//! `tlc`: the kernbench command line.
//!
//! This is the only place that knows every layer; each subcommand parses
//! its arguments (clap), calls the library, and turns results into output
//! and an exit code: 0 ok, 1 user error (diagnostics printed), 2 bad usage.

/// The simulator allocates and frees a few small objects per event (blocks,
/// result slots) and, with thousands of PEs, touches hundreds of MB at
/// random: mimalloc's per-thread free lists are cheaper than glibc's, it
/// maps memory in aligned regions that transparent huge pages back (fewer
/// TLB misses), and the cache in front of it gives a freed small block
/// out again while it is still in cache ([`kernbench_runtime::alloc`];
/// docs/architecture.md, Performance).
#[global_allocator]
static GLOBAL: kernbench_runtime::alloc::Allocator = kernbench_runtime::alloc::Allocator;

/// `eprintln!`/`eprint!`/`println!`/`print!` that drop write errors. The
/// std macros panic when the stream is gone (`tlc run ... 2>&1 | head -1`
/// closes it), and a panic aborts: the run's outputs would be lost to a
/// reader that stopped listening. A closed stream just stops receiving.
/// They also note what a failing command needs for its JSON record
/// ([`failure`]): whether stdout got anything, and the first `error: `
/// line.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = format!($($arg)*);
        $crate::failure::note_stderr(&text);
        let _ = writeln!(std::io::stderr(), "{text}");
    }};
}
macro_rules! err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = format!($($arg)*);
        $crate::failure::note_stderr(&text);
        let _ = write!(std::io::stderr(), "{text}");
    }};
}
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        $crate::failure::note_stdout();
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        $crate::failure::note_stdout();
        let _ = write!(std::io::stdout(), $($arg)*);
    }};
}

mod bench;
mod failure;
mod progress;
mod run;

use clap::{Parser, Subcommand, ValueEnum};
use kernbench_compiler::diag::{render_human, render_json, render_summary, ColorMode};
use kernbench_compiler::sema::{self, DType, Konst};
use std::collections::HashSet;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "tlc",
    version,
    about = "Compile, check and simulate tl kernels for the AHBM machine"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Color {
    Auto,
    Always,
    Never,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub(crate) enum Backend {
    /// Cranelift-compiled native code.
    Jit,
    /// The reference interpreter (slow, the oracle).
    Interp,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
pub(crate) enum Format {
    Human,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Check .tl files (or every .tl file under a folder) and print diagnostics.
    Check {
        /// Files or folders to check.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Bind a constexpr for every kernel that has it: -D BLOCK=128.
        #[arg(short = 'D', value_name = "NAME=VALUE")]
        define: Vec<String>,
        /// Colour diagnostics.
        #[arg(long, value_enum, default_value = "auto")]
        color: Color,
        /// `json` prints one JSON object per diagnostic on stdout.
        #[arg(long, value_enum, default_value = "human")]
        format: Format,
        /// The stdlib folder imports fall back to (default: the one shipped
        /// with tlc, or $KERNBENCH_STDLIB).
        #[arg(long, value_name = "DIR")]
        stdlib: Option<PathBuf>,
        /// A topology file or preset whose layout binds the kernels'
        /// CUBE_PES, SIP_CUBES, CUBE_W, CUBE_H, SIP_W and SIP_H unless -D does (default:
        /// the embedded default machine), as `tlc run` binds them.
        #[arg(long, value_name = "FILE")]
        topology: Option<String>,
    },
    /// Run a kernel on the simulated machine: real data and simulated time.
    Run {
        file: PathBuf,
        /// The kernel to run (default: the file's only `@kernel`).
        #[arg(long, short = 'k')]
        kernel: Option<String>,
        /// Programs per grid axis: G or G0,G1[,G2] (default: one per PE;
        /// rank r runs programs r, r + PEs, …).
        #[arg(long)]
        grid: Option<String>,
        /// NAME=@file.npy | NAME=rand(SHAPE,DTYPE[,SEED]) | NAME=zeros(SHAPE,DTYPE) | NAME=VALUE,
        /// a tensor optionally followed by its layout: `:shard` (axis 0 over the
        /// ranks), `:replicate`, and a memory `:hbm` (default), `:sram`, `:tcm`.
        #[arg(long = "arg", value_name = "NAME=SPEC")]
        args: Vec<String>,
        /// The PEs to run on: 1, N (the first N in ring order), cube, sip, all,
        /// or a list SIP.CUBE.PE,….
        #[arg(long, allow_hyphen_values = true, default_value = "1")]
        pes: String,
        /// Threads a launch over several SIPs runs on, one shard of its
        /// SIPs each (default: every core). The results do not depend on it.
        #[arg(long, value_name = "N", value_parser = thread_count)]
        threads: Option<usize>,
        /// A topology file or preset (tiny, default, large); default: the
        /// embedded default machine.
        #[arg(long, value_name = "FILE")]
        topology: Option<String>,
        /// Write a Chrome trace (Perfetto, chrome://tracing) of the run.
        #[arg(long, value_name = "FILE.json")]
        trace: Option<PathBuf>,
        /// Link counter tracks in the trace for the N busiest links only
        /// (default: every link that carried data).
        #[arg(long, value_name = "N", requires = "trace")]
        trace_links: Option<usize>,
        /// The timing summary as human text or JSON (on stdout).
        #[arg(long, value_enum, default_value = "human")]
        format: Format,
        /// Simulated time the run may take (ps, ns, us, ms, s: `500us`), or
        /// `none`; a run still going then stops with where each PE is.
        #[arg(long, allow_hyphen_values = true, value_name = "TIME", default_value = DEFAULT_TIME_LIMIT, value_parser = time_limit)]
        time_limit: TimeLimit,
        /// Run every program in turn on the untimed executor (no machine,
        /// no communication): the fastest way to check numbers. The
        /// machine's options are errors with it (they were ignored);
        /// --time-limit bounds the instructions it runs, one per cycle;
        /// --format json gives its outputs (or its error) as one record.
        #[arg(long, conflicts_with_all = ["pes", "threads", "topology", "trace", "trace_links"])]
        functional: bool,
        /// Bind a constexpr: -D BLOCK=128.
        #[arg(short = 'D', value_name = "NAME=VALUE")]
        define: Vec<String>,
        /// Write every tensor argument to DIR/NAME.npy after the run.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Which data path executes block operations.
        #[arg(long, value_enum, default_value = "jit")]
        backend: Backend,
        #[arg(long, value_enum, default_value = "auto")]
        color: Color,
        #[arg(long, value_name = "DIR")]
        stdlib: Option<PathBuf>,
    },
    /// Describe a machine: counts, memories, engines, links and peaks.
    Topology {
        /// A topology file, or a preset (tiny, default, large); default: the
        /// embedded default machine.
        file: Option<String>,
        /// The same as FILE, spelt as the other commands spell it.
        #[arg(long = "topology", value_name = "FILE", conflicts_with = "file")]
        topology: Option<String>,
        #[arg(long, value_enum, default_value = "human")]
        format: Format,
    },
    /// Benchmarks on the simulated machine.
    Bench {
        #[command(subcommand)]
        what: BenchCommand,
    },
    /// Traffic probes: DMA latency by distance and congestion scenarios, with
    /// latency broken down by link class and bandwidth against the peaks.
    Probe {
        /// Run only this case (see the list without it).
        #[arg(long)]
        case: Option<String>,
        /// Bytes per transfer (K, M, G suffixes: 64K).
        #[arg(long, default_value = "64K")]
        bytes: String,
        /// A topology file or preset (default: the embedded default machine).
        #[arg(long, value_name = "FILE")]
        topology: Option<String>,
        #[arg(long, value_enum, default_value = "human")]
        format: Format,
    },
    /// Print the per-PE IR of a kernel (all kernels when --kernel is absent).
    EmitIr(EmitIrArgs),
}

#[derive(clap::Args)]
struct EmitIrArgs {
    file: PathBuf,
    /// The kernel to lower.
    #[arg(long, short = 'k')]
    kernel: Option<String>,
    /// Bind a constexpr: -D BLOCK=128.
    #[arg(short = 'D', value_name = "NAME=VALUE")]
    define: Vec<String>,
    #[arg(long, value_enum, default_value = "auto")]
    color: Color,
    #[arg(long, value_name = "DIR")]
    stdlib: Option<PathBuf>,
    /// A topology file or preset whose layout binds the kernels'
    /// CUBE_PES, SIP_CUBES, CUBE_W, CUBE_H, SIP_W and SIP_H unless -D does (default: the
    /// embedded default machine).
    #[arg(long, value_name = "FILE")]
    topology: Option<String>,
    /// `json` prints `{"kernels": [...]}`, each kernel's IR structured as
    /// docs/ir.md describes (diagnostics stay on stderr).
    #[arg(long, value_enum, default_value = "human")]
    format: Format,
}

impl Command {
    /// Whether the command prints JSON (`--format json`).
    fn json(&self) -> bool {
        let format = match self {
            Command::Check { format, .. }
            | Command::Run { format, .. }
            | Command::Topology { format, .. }
            | Command::Probe { format, .. } => format,
            Command::EmitIr(a) => &a.format,
            Command::Bench { what } => match what {
                BenchCommand::Ccl(a) => &a.format,
                BenchCommand::Sim(a) => &a.format,
                BenchCommand::Tp(a) => &a.format,
            },
        };
        *format == Format::Json
    }
}

#[derive(Subcommand)]
enum BenchCommand {
    /// nccl-tests for the collective algorithms of ccl.yaml: size, count,
    /// type, redop, simulated time, algbw, busbw and #wrong per size.
    Ccl(bench::CclArgs),
    /// The simulator's speed: events per wall-clock second on one
    /// all-reduce (default: the ring over every PE), run several times.
    Sim(bench::SimArgs),
    /// Megatron-style tensor-parallel layers (column, row, MLP) at every
    /// tensor-parallel size up to the SIPs: simulated time split into
    /// GEMM, communication and the rest, each output checked.
    Tp(bench::TpArgs),
}

/// A command line clap refuses (or `--help`, `--version`): clap's text
/// and exit code; with `--format json` also a `usage` record on stdout,
/// as every other failure has ([`failure`]).
fn bad_command_line(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let informational = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    // The options before a `--` (after it everything is a file name); an
    // argument that is not UTF-8 is none of these words.
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_str().unwrap_or("").to_string())
        .take_while(|a| a != "--")
        .collect();
    let json =
        args.windows(2).any(|w| w[0] == "--format" && w[1] == "json") || args.iter().any(|a| a == "--format=json");
    if json && !informational {
        // clap's message: its first line and the lines that go on with it
        // (the missing arguments, the possible values), up to the usage.
        let text = e.render().to_string();
        let message: Vec<&str> = text
            .lines()
            .take_while(|l| !l.is_empty() && !l.starts_with("Usage:"))
            .map(str::trim)
            .collect();
        let message = message.join(" ");
        let message = message.strip_prefix("error: ").unwrap_or(&message);
        outln!(
            "{}",
            serde_json::json!({"error": {"kind": "usage", "message": message}})
        );
    }
    let _ = e.print();
    ExitCode::from(if informational { 0 } else { 2 })
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return bad_command_line(&e),
    };
    let json = cli.command.json();
    failure::set_json(json);
    // Stdout holds the one JSON object: a kernel's prints go to stderr.
    kernbench_runtime::exec::device_print_to_stderr(json);
    let code = dispatch(cli.command);
    if json {
        failure::record_unreported(code);
    }
    code
}

fn dispatch(command: Command) -> ExitCode {
    match command {
        Command::Check {
            paths,
            define,
            color,
            format,
            stdlib,
            topology,
        } => check(&paths, &define, color, format, stdlib, topology.as_deref()),
        Command::EmitIr(a) => emit_ir(a),
        Command::Topology {
            file,
            topology: flag,
            format,
        } => topology(file.or(flag).as_deref(), format),
        Command::Bench {
            what: BenchCommand::Ccl(args),
        } => bench::ccl(args),
        Command::Bench {
            what: BenchCommand::Sim(args),
        } => bench::sim(args),
        Command::Bench {
            what: BenchCommand::Tp(args),
        } => bench::tp(args),
        Command::Probe {
            case,
            bytes,
            topology,
            format,
        } => probe(case.as_deref(), &bytes, topology.as_deref(), format),
        Command::Run {
            file,
            kernel,
            grid,
            args,
            pes,
            threads,
            topology,
            trace,
            trace_links,
            format,
            time_limit,
            functional,
            define,
            out,
            backend,
            color,
            stdlib,
        } => run::run(run::RunArgs {
            file,
            kernel,
            grid,
            args,
            define,
            out,
            backend,
            color,
            stdlib,
            functional,
            pes,
            threads: threads.unwrap_or_else(cores),
            topology,
            trace,
            trace_links,
            format,
            time_limit_ps: time_limit.0,
        }),
    }
}

/// `--time-limit` in picoseconds (`None`: no limit).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TimeLimit(pub Option<u64>);

/// Parses `--time-limit`: a simulated time with its unit (`500us`,
/// `1.5ms`), or `none`.
/// `--time-limit`'s default: the host API's
/// (`host::DEFAULT_TIME_LIMIT_PS`), as the option is written.
pub(crate) const DEFAULT_TIME_LIMIT: &str = "100ms";

pub(crate) fn time_limit(arg: &str) -> Result<TimeLimit, String> {
    if arg == "none" {
        return Ok(TimeLimit(None));
    }
    let split = arg.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(arg.len());
    let (number, unit) = arg.split_at(split);
    let ps_per_unit: f64 = match unit {
        "ps" => 1.0,
        "ns" => 1e3,
        "us" => 1e6,
        "ms" => 1e9,
        "s" => 1e12,
        _ => return Err("expected a time with its unit (ps, ns, us, ms, s), e.g. `500us`, or `none`".into()),
    };
    match number.parse::<f64>() {
        // From the simulator's 1 ps resolution (a shorter limit would be
        // silently raised to it) up to about 200 days: u64 picoseconds.
        Ok(v) if v * ps_per_unit >= 1.0 && v * ps_per_unit <= 1.8e19 => {
            Ok(TimeLimit(Some((v * ps_per_unit).round() as u64)))
        }
        _ => Err(format!(
            "expected a time from 1 ps to 1.8e7 s, e.g. `500us`, got `{arg}`"
        )),
    }
}

/// Parses `--threads`: a count of at least one.
pub(crate) fn thread_count(arg: &str) -> Result<usize, String> {
    match arg.parse::<usize>() {
        Ok(0) => Err("expected at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// The cores this machine offers (1 when it cannot tell).
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Prints a usage error the way clap does and returns exit code 2.
pub(crate) fn usage_error(msg: &str) -> ExitCode {
    errln!("error: {msg}");
    ExitCode::from(2)
}

pub(crate) fn default_stdlib() -> Option<PathBuf> {
    kernbench_runtime::host::default_stdlib()
}

/// The stdlib folder: `--stdlib DIR` when given (a path that is not a
/// folder is bad usage, said before anything looks in it), else the
/// default one ([`default_stdlib`]).
pub(crate) fn stdlib_root(given: Option<PathBuf>) -> Result<Option<PathBuf>, String> {
    // The environment's folder is checked as --stdlib's is: a bad one
    // would surface only as "module not found" at an import.
    let (dir, from) = match given {
        Some(dir) => (Some(dir), "--stdlib"),
        None => (
            std::env::var_os("KERNBENCH_STDLIB").map(PathBuf::from),
            "KERNBENCH_STDLIB",
        ),
    };
    match dir {
        Some(dir) if !dir.is_dir() => Err(format!("{from} `{}`: no such folder", dir.display())),
        Some(dir) => Ok(Some(dir)),
        None => Ok(default_stdlib()),
    }
}

/// Parses `-D NAME=VALUE` flags.
pub(crate) fn parse_defines(defines: &[String]) -> Result<std::collections::BTreeMap<String, Konst>, String> {
    let mut out = std::collections::BTreeMap::new();
    for d in defines {
        let Some((name, value)) = d.split_once('=') else {
            return Err(format!("invalid -D `{d}`: expected NAME=VALUE"));
        };
        let name = name.trim();
        if name.is_empty()
            || !name.chars().all(|c| c.is_alphanumeric() || c == '_')
            || name.starts_with(|c: char| c.is_ascii_digit())
        {
            return Err(format!("invalid -D `{d}`: `{name}` is not a parameter name"));
        }
        let k = Konst::parse_define(value);
        if let Konst::Str(v) = &k {
            // Digits past 64 bits are text to `parse_define`, not a number.
            if kernbench_compiler::sema::types::int_literal(v) == Some(None) {
                return Err(format!("invalid -D `{d}`: `{v}` does not fit a 64-bit integer"));
            }
            // A dtype tl does not have (`f64`, `int16`) would be a string,
            // and fail at every use as "expected a dtype, found str".
            let bare = v.trim_start_matches("tl.");
            let digits = bare.trim_start_matches(|c: char| c.is_ascii_alphabetic());
            let prefix = &bare[..bare.len() - digits.len()];
            let dtype_like = matches!(prefix, "f" | "i" | "u" | "bf" | "float" | "int" | "uint" | "bfloat")
                && !digits.is_empty()
                && digits.chars().all(|c| c.is_ascii_digit());
            if dtype_like {
                let names: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
                return Err(format!(
                    "invalid -D `{d}`: `{v}` is not a tl dtype (the dtypes: {})",
                    names.join(", ")
                ));
            }
        }
        // Like a repeated `--arg`: the first value was silently dropped.
        if out.insert(name.to_string(), k).is_some() {
            return Err(format!("-D {name}=… is given twice"));
        }
    }
    Ok(out)
}

/// Every `.tl` file named or under a named folder (regular files only), in
/// a stable order. A folder reached again through a symbolic link is
/// walked once; a named folder with no `.tl` file under it is an error (a
/// mistyped path, most likely), not a silent success.
fn collect_tl_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    fn walk(dir: &Path, seen: &mut HashSet<PathBuf>, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        if !seen.insert(std::fs::canonicalize(dir)?) {
            return Ok(());
        }
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, seen, out)?;
            } else if p.extension().is_some_and(|e| e == "tl") && p.is_file() {
                // Only regular files: reading a FIFO named `x.tl` would
                // wait for a writer forever.
                out.push(p);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for p in paths {
        if p.is_dir() {
            let (before, named_again) = (out.len(), std::fs::canonicalize(p).is_ok_and(|c| seen.contains(&c)));
            walk(p, &mut seen, &mut out).map_err(|e| format!("cannot read folder `{}`: {e}", p.display()))?;
            if out.len() == before && !named_again {
                return Err(format!("no `.tl` file in folder `{}`", p.display()));
            }
        } else if p.is_file() {
            out.push(p.clone());
        } else if p.exists() {
            return Err(format!("`{}` is not a file or a folder", p.display()));
        } else {
            return Err(format!("no such file or folder: `{}`", p.display()));
        }
    }
    Ok(out)
}

pub(crate) fn color_mode(color: Color) -> ColorMode {
    match color {
        Color::Always => ColorMode::Always,
        Color::Never => ColorMode::Never,
        Color::Auto => {
            if std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none() {
                ColorMode::Always
            } else {
                ColorMode::Never
            }
        }
    }
}

/// Reads one source file for a command that takes a single file.
pub(crate) fn read_source(file: &Path) -> Result<String, String> {
    use kernbench_compiler::text::{read_text, ReadError};
    read_text(file).map_err(|e| match e {
        ReadError::Io(e) => format!("cannot read `{}`: {e}", file.display()),
        // "`f.tl` is not UTF-8 text: byte 0xff at line 2, column 11".
        e @ ReadError::NotUtf8 { .. } => format!("`{}` is {e}", file.display()),
    })
}

/// The names of the `@kernel`s `file` defines, in order, and whether the
/// file has errors.
pub(crate) fn kernels_of(file: &Path, source: &str, options: &sema::Options) -> (Vec<String>, bool) {
    let out = summarize(file, source, options);
    let errors = out.has_errors();
    (out.kernels.into_iter().map(|k| k.name).collect(), errors)
}

/// Checks `file` alone: its kernels and diagnostics.
fn summarize(file: &Path, source: &str, options: &sema::Options) -> sema::CheckOutput {
    let mut s = sema::Session::new(options.clone());
    s.add_file(
        &file.display().to_string(),
        Some(file.to_path_buf()),
        source.to_string(),
    );
    s.finish()
}

/// Binds the machine-layout constexprs (`CUBE_PES`, `SIP_CUBES`, `CUBE_W`,
/// `CUBE_H`, `SIP_W`, `SIP_H`) to `topo`'s values where `file`'s kernels declare them and
/// `-D` does not give them, as the runtime does for a registered
/// collective: a layout-aware kernel then fits the machine it runs on
/// instead of its defaults' (the default machine's).
pub(crate) fn bind_layout(
    file: &Path,
    source: &str,
    options: &mut sema::Options,
    topo: &kernbench_runtime::topology::Topology,
) {
    let out = summarize(file, source, options);
    bind_layout_of(&out.kernels, options, topo);
}

/// [`bind_layout`] for checked `kernels`; true when it bound any.
fn bind_layout_of(
    kernels: &[sema::KernelSummary],
    options: &mut sema::Options,
    topo: &kernbench_runtime::topology::Topology,
) -> bool {
    let declared = |name: &str| kernels.iter().any(|k| k.constexprs.iter().any(|(n, _)| n == name));
    let mut bound = false;
    for (name, value) in kernbench_runtime::ccl::layout_constexprs(topo) {
        if declared(name) && !options.defines.contains_key(name) {
            options.defines.insert(name.to_string(), Konst::Int(value));
            bound = true;
        }
    }
    bound
}

/// Why a kernel did not lower.
pub(crate) enum LowerFailure {
    /// The source has errors: its diagnostics (already printed), as JSON.
    Diagnostics(Vec<serde_json::Value>),
    /// The file defines no such kernel: a bad argument (exit 2).
    NoKernel(String),
    /// Lowering failed with no diagnostic to say why.
    Other(String),
}

impl LowerFailure {
    /// Prints what the diagnostics do not say already (if anything); the
    /// exit code.
    pub(crate) fn report(&self) -> ExitCode {
        match self {
            LowerFailure::Diagnostics(_) => ExitCode::from(1),
            LowerFailure::NoKernel(m) => usage_error(m),
            LowerFailure::Other(m) => {
                errln!("error: {m}");
                ExitCode::from(1)
            }
        }
    }
}

/// Checks `file` and lowers kernel `name`: the IR, or why not (the
/// diagnostics printed).
pub(crate) fn lower_kernel(
    file: &Path,
    source: &str,
    name: &str,
    options: &sema::Options,
    color: Color,
) -> Result<(kernbench_compiler::ir::Function, kernbench_compiler::diag::SourceMap), LowerFailure> {
    let mut session = sema::Session::new(options.clone());
    session.add_file(
        &file.display().to_string(),
        Some(file.to_path_buf()),
        source.to_string(),
    );
    let (out, ir) = session.lower(name);
    let text = render_human(&out.diagnostics, &out.sources, color_mode(color));
    err!("{text}{}", render_summary(&out.diagnostics));
    match ir {
        Ok(f) => Ok((f, out.sources)),
        Err(_) if out.has_errors() => Err(LowerFailure::Diagnostics(
            out.diagnostics
                .iter()
                .map(|d| kernbench_compiler::diag::diagnostic_json(d, &out.sources))
                .collect(),
        )),
        // A kernel the file does not define is a bad argument (exit 2),
        // found only when lowering fails: no second check on every run.
        Err(msg) => match kernels_of(file, source, options).0 {
            names if !names.iter().any(|n| n == name) => Err(LowerFailure::NoKernel(format!(
                "`{}` defines no kernel `{name}` (its kernels: {})",
                file.display(),
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ))),
            _ => Err(LowerFailure::Other(msg)),
        },
    }
}

/// The topology of `--topology` (the embedded default without one), or
/// the exit code and why not, printed.
pub(crate) fn topology_or_error(
    file: Option<&str>,
) -> Result<kernbench_runtime::topology::Topology, (ExitCode, kernbench_runtime::topology::TopologyError)> {
    match file {
        Some(f) => kernbench_runtime::topology::Topology::load(f).map_err(|e| {
            errln!("error: {e}");
            (ExitCode::from(if e.unreadable { 2 } else { 1 }), e)
        }),
        None => Ok(kernbench_runtime::topology::Topology::default_machine()),
    }
}

/// The topology of `--topology`, or the exit code after printing why not
/// (with `--format json`, also its record: `file`, `line`, `key`).
pub(crate) fn load_topology(file: Option<&str>) -> Result<kernbench_runtime::topology::Topology, ExitCode> {
    topology_or_error(file).map_err(|(code, e)| failure::of_command().topology(code, &e))
}

fn probe(case: Option<&str>, bytes: &str, topology: Option<&str>, format: Format) -> ExitCode {
    use kernbench_runtime::sim::probe;
    let bytes = match kernbench_runtime::ccl::bench::parse_size(bytes) {
        Ok(b) => b,
        Err(e) => return usage_error(&format!("--bytes: {e}")),
    };
    let topo = match load_topology(topology) {
        Ok(t) => t,
        Err(code) => return code,
    };
    // Every case reads or writes one PE's HBM slice.
    if bytes > topo.hbm_slice_bytes() {
        return usage_error(&format!(
            "--bytes: {bytes} bytes do not fit in a PE's HBM slice ({} bytes on `{}`)",
            topo.hbm_slice_bytes(),
            topo.spec.name
        ));
    }
    let all = probe::cases(&topo);
    let chosen: Vec<&probe::Case> = match case {
        None => all.iter().collect(),
        Some(name) => match all.iter().find(|c| c.name == name) {
            Some(c) => vec![c],
            None => {
                return usage_error(&match probe::case_needs(name) {
                    Some(needs) => format!(
                        "probe case `{name}` needs {}; `{}` has {}",
                        needs.unwrap_or("another topology"),
                        topo.spec.name,
                        topo_shape(&topo)
                    ),
                    None => {
                        let names: Vec<&str> = probe::CASE_NEEDS.iter().map(|(n, _)| *n).collect();
                        format!("no probe case `{name}` (cases: {})", names.join(", "))
                    }
                });
            }
        },
    };
    if case.is_none() {
        // Say which cases this topology has no room for, rather than drop
        // their rows without a word.
        let missing: Vec<String> = probe::CASE_NEEDS
            .iter()
            .filter(|(n, _)| all.iter().all(|c| c.name != *n))
            .map(|(n, needs)| format!("{n} (needs {})", needs.unwrap_or("another topology")))
            .collect();
        if !missing.is_empty() {
            errln!(
                "note: `{}` has {}, so these cases are left out: {}",
                topo.spec.name,
                topo_shape(&topo),
                missing.join(", ")
            );
        }
    }
    // A case whose routes would not fit in memory is skipped (an error
    // when it is the one asked for).
    let mut results = Vec::new();
    for c in chosen {
        let crossings = probe::link_crossings_bound(&topo, c);
        if crossings > probe::MAX_LINK_CROSSINGS {
            let why = format!(
                "probe case `{}` crosses up to {crossings} links ({} flows), past the {} a probe holds in memory",
                c.name,
                c.flows.len(),
                probe::MAX_LINK_CROSSINGS
            );
            if case.is_some() {
                errln!("error: {why}");
                return ExitCode::from(1);
            }
            errln!("warning: skipped: {why}");
            continue;
        }
        results.push(probe::run_case(&topo, c, bytes));
    }
    match format {
        Format::Human => out!("{}", probe::report_text(&topo, &results)),
        Format::Json => outln!("{}", probe::report_json(&results)),
    }
    ExitCode::SUCCESS
}

/// "1 SIP of 1 cube (1 x 1) of 4 PEs": what decides which probe cases a
/// topology has.
fn topo_shape(topo: &kernbench_runtime::topology::Topology) -> String {
    let (w, h) = topo.cube_grid();
    let plural = |n: u32, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    format!(
        "{} of {} ({w} x {h}) of {}",
        plural(topo.sips(), "SIP"),
        plural(w * h, "cube"),
        plural(topo.pes_per_cube(), "PE")
    )
}

fn topology(file: Option<&str>, format: Format) -> ExitCode {
    let topo = match load_topology(file) {
        Ok(t) => t,
        Err(code) => return code,
    };
    match format {
        Format::Json => outln!("{}", kernbench_runtime::topology::summary_json(&topo)),
        Format::Human => out!("{}", kernbench_runtime::topology::summary_text(&topo)),
    }
    ExitCode::SUCCESS
}

fn emit_ir(a: EmitIrArgs) -> ExitCode {
    let EmitIrArgs {
        file,
        kernel,
        define,
        color,
        stdlib,
        topology,
        format,
    } = a;
    let (file, kernel) = (file.as_path(), kernel.as_deref());
    let defines = match parse_defines(&define) {
        Ok(d) => d,
        Err(e) => return usage_error(&e),
    };
    let source = match read_source(file) {
        Ok(s) => s,
        Err(e) => return usage_error(&e),
    };
    let stdlib_root = match stdlib_root(stdlib) {
        Ok(s) => s,
        Err(e) => return usage_error(&e),
    };
    let topo = match load_topology(topology.as_deref()) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let mut options = sema::Options { defines, stdlib_root };
    bind_layout(file, &source, &mut options, &topo);
    let names: Vec<String> = match kernel {
        Some(k) => vec![k.to_string()],
        None => match kernels_of(file, &source, &options) {
            // Errors that hide every kernel (a syntax error): lowering
            // reports them, as in `tlc run`.
            (names, true) if names.is_empty() => vec![String::new()],
            (names, _) => names,
        },
    };
    let mut text = String::new();
    let mut kernels = Vec::new();
    for name in &names {
        match lower_kernel(file, &source, name, &options, color) {
            Ok((func, sources)) => match format {
                Format::Human => text.push_str(&kernbench_compiler::ir::print_function(&func, &sources)),
                Format::Json => kernels.push(kernbench_compiler::ir::function_json(&func, &sources)),
            },
            Err(failure) => return failure::of_command().lower(&failure),
        }
    }
    match format {
        Format::Human => out!("{text}"),
        Format::Json => outln!("{}", serde_json::json!({ "kernels": kernels })),
    }
    ExitCode::SUCCESS
}

fn check(
    paths: &[PathBuf],
    define: &[String],
    color: Color,
    format: Format,
    stdlib: Option<PathBuf>,
    topology: Option<&str>,
) -> ExitCode {
    let defines = match parse_defines(define) {
        Ok(d) => d,
        Err(e) => return usage_error(&e),
    };
    let files = match collect_tl_files(paths) {
        Ok(f) => f,
        Err(e) => return usage_error(&e),
    };
    let stdlib_root = match stdlib_root(stdlib) {
        Ok(s) => s,
        Err(e) => return usage_error(&e),
    };
    let topo = match load_topology(topology) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let mut options = sema::Options { defines, stdlib_root };
    // A file that cannot be read (not UTF-8, say) is reported and the
    // others are still checked; it is bad usage (exit 2), as it is for
    // every command that reads a file.
    let mut readable = Vec::with_capacity(files.len());
    let mut unreadable = Vec::new();
    for file in &files {
        match read_source(file) {
            Ok(s) => readable.push((file, s)),
            Err(e) => {
                errln!("error: {e}");
                unreadable.push((file, e));
            }
        }
    }
    let check_all = |options: &sema::Options| {
        let mut session = sema::Session::new(options.clone());
        for (file, source) in &readable {
            session.add_file(&file.display().to_string(), Some(file.to_path_buf()), source.clone());
        }
        session.finish()
    };
    let mut out = check_all(&options);
    // Kernels that declare layout constexprs are checked again with the
    // machine's values, as `tlc run` would run them.
    if bind_layout_of(&out.kernels, &mut options, &topo) {
        out = check_all(&options);
    }
    if format == Format::Json {
        // Nothing at all without diagnostics: an unreadable file then
        // leaves stdout to the failure's record.
        let json = render_json(&out.diagnostics, &out.sources);
        if !json.is_empty() {
            out!("{json}");
            // Beside diagnostics, an unreadable file is one more line of
            // the stream, shaped like them (no code, no position).
            for (file, message) in &unreadable {
                let line = serde_json::json!({
                    "code": null, "severity": "error", "file": file.display().to_string(),
                    "line": null, "column": null, "message": message,
                    "labels": [], "notes": [], "help": null,
                });
                outln!("{line}");
            }
        }
        let _ = std::io::stdout().flush();
    } else {
        let text = render_human(&out.diagnostics, &out.sources, color_mode(color));
        err!("{text}{}", render_summary(&out.diagnostics));
    }
    if !unreadable.is_empty() {
        ExitCode::from(2)
    } else if out.has_errors() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_time_limit_is_the_host_apis() {
        let parsed = time_limit(DEFAULT_TIME_LIMIT).map(|t| t.0);
        assert_eq!(parsed, Ok(Some(kernbench_runtime::host::DEFAULT_TIME_LIMIT_PS)));
    }

    /// From 1 ps (the resolution) to about 200 days; `none`; anything else
    /// is refused, not rounded into range.
    #[test]
    fn time_limits_parse_within_the_resolution() {
        let ps = |a: &str| time_limit(a).map(|t| t.0);
        assert_eq!(ps("1ps"), Ok(Some(1)));
        assert_eq!(ps("1.4ps"), Ok(Some(1)));
        assert_eq!(ps("2.5ns"), Ok(Some(2500)));
        assert_eq!(ps("none"), Ok(None));
        for bad in ["0.0001ps", "0.9ps", "0s", "-1us", "2e7s", "5", "5 parsecs"] {
            assert!(ps(bad).is_err(), "{bad}");
        }
    }
}
