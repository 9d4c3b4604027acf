//! `tlc run`: lower a kernel, build its arguments, execute every program
//! of the grid on the chosen data path, report errors at their source
//! line, and write the tensors back.

use super::{color_mode, default_stdlib, lower_kernel, parse_defines, read_source, usage_error, Backend, Color};
use kernbench_compiler::datapath::{interp::Interpreter, jit::Jit, plan, DataPath, RtValue};
use kernbench_compiler::sema;
use kernbench_runtime::args::{self, HostArg};
use kernbench_runtime::exec::{render_run_error, run_grid, FlatMemory};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

pub struct RunArgs {
    pub file: PathBuf,
    pub kernel: String,
    pub grid: String,
    pub args: Vec<String>,
    pub define: Vec<String>,
    pub out: Option<PathBuf>,
    pub backend: Backend,
    pub color: Color,
    pub stdlib: Option<PathBuf>,
}

fn parse_grid(g: &str) -> Result<[u32; 3], String> {
    let dims: Result<Vec<u32>, _> = g.split(',').map(|d| d.trim().parse::<u32>()).collect();
    match dims {
        Ok(d) if (1..=3).contains(&d.len()) && d.iter().all(|&x| x > 0) => {
            let mut out = [1; 3];
            out[..d.len()].copy_from_slice(&d);
            Ok(out)
        }
        _ => Err(format!(
            "invalid --grid `{g}`: expected 1 to 3 positive integers, e.g. `64` or `8,8`"
        )),
    }
}

pub fn run(a: RunArgs) -> ExitCode {
    let defines = match parse_defines(&a.define) {
        Ok(d) => d,
        Err(e) => return usage_error(&e),
    };
    let grid = match parse_grid(&a.grid) {
        Ok(g) => g,
        Err(e) => return usage_error(&e),
    };
    let specs: Vec<(String, args::ArgSpec)> = match a.args.iter().map(|s| args::parse_arg(s)).collect() {
        Ok(v) => v,
        Err(e) => return usage_error(&e),
    };
    let source = match read_source(&a.file) {
        Ok(s) => s,
        Err(e) => return usage_error(&e),
    };
    let options = sema::Options {
        defines,
        stdlib_root: a.stdlib.clone().or_else(default_stdlib),
    };
    let (func, sources) = match lower_kernel(&a.file, &source, &a.kernel, &options, a.color) {
        Ok(x) => x,
        Err((code, msg)) => {
            if !msg.is_empty() {
                eprintln!("error: {msg}");
            }
            return code;
        }
    };
    // Arguments, in parameter order.
    for (name, _) in &specs {
        if !func.params.iter().any(|p| &p.name == name) {
            let names: Vec<&str> = func.params.iter().map(|p| p.name.as_str()).collect();
            return usage_error(&format!(
                "kernel `{}` has no parameter `{name}` (parameters: {})",
                func.name,
                names.join(", ")
            ));
        }
    }
    let mut mem = FlatMemory::new();
    let mut values = Vec::new();
    let mut tensors: Vec<(String, u64, Vec<usize>)> = Vec::new();
    for p in &func.params {
        let Some((_, spec)) = specs.iter().find(|(n, _)| n == &p.name) else {
            return usage_error(&format!(
                "missing `--arg {}=…` for parameter `{}: {}`",
                p.name, p.name, p.ty
            ));
        };
        match args::resolve(&p.name, spec, &p.ty) {
            Ok(HostArg::Scalar(b)) => values.push(RtValue::Scalar(b)),
            Ok(HostArg::Tensor(t)) => {
                let addr = mem.alloc(&p.name, t.bytes().to_vec());
                tensors.push((p.name.clone(), addr, t.shape.clone()));
                values.push(RtValue::Scalar(addr));
            }
            Err(e) => return usage_error(&e),
        }
    }
    let plan = plan(&func, true);
    let mut dp: Box<dyn DataPath> = match a.backend {
        Backend::Jit => Box::new(Jit::new()),
        Backend::Interp => Box::new(Interpreter),
    };
    let t0 = Instant::now();
    if let Err(e) = dp.prepare(&func, &plan) {
        eprintln!("error: cannot compile `{}`: {e}", func.name);
        return ExitCode::from(1);
    }
    let compile_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    let result = run_grid(&func, &plan, dp.as_mut(), &mut mem, grid, &values);
    let run_ms = t1.elapsed().as_secs_f64() * 1e3;
    if let Err(e) = result {
        eprint!("{}", render_run_error(&func, &sources, &e, color_mode(a.color)));
        return ExitCode::from(1);
    }
    let programs = grid.iter().map(|&g| g as u64).product::<u64>();
    eprintln!(
        "ran `{}` on {programs} program{} ({}×{}×{}) with the {} backend: compile {compile_ms:.1} ms, run {run_ms:.1} ms",
        func.name,
        if programs == 1 { "" } else { "s" },
        grid[0],
        grid[1],
        grid[2],
        dp.name()
    );
    if a.out.is_none() {
        // Without --out, a one-line summary per tensor shows the result.
        for (name, _, shape) in &tensors {
            let Some(seg) = mem.segment_named(name) else { continue };
            let Some(d) = func.params.iter().find(|p| &p.name == name).map(|p| match p.ty.elem() {
                kernbench_compiler::sema::types::Elem::Ptr(d) | kernbench_compiler::sema::types::Elem::Num(d) => d,
            }) else {
                continue;
            };
            let Some(t) = kernbench_compiler::datapath::Tensor::from_bytes(
                kernbench_compiler::sema::types::Elem::Num(d),
                shape,
                &seg.data,
            ) else {
                continue;
            };
            let vals: Vec<f64> = (0..t.numel())
                .map(|i| {
                    let b = t.get_bits(i);
                    if d.is_float() {
                        kernbench_compiler::datapath::elem::to_f32(d, b) as f64
                    } else {
                        kernbench_compiler::datapath::elem::to_i64(d, b) as f64
                    }
                })
                .collect();
            let (lo, hi) = vals
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| (l.min(*v), h.max(*v)));
            eprintln!(
                "  {name}: {d}{shape:?}  sum {:.6}  min {lo:.6}  max {hi:.6}",
                vals.iter().sum::<f64>()
            );
        }
    }
    if let Some(dir) = &a.out {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("error: cannot create `{}`: {e}", dir.display());
            return ExitCode::from(1);
        }
        for (name, _, shape) in &tensors {
            let Some(seg) = mem.segment_named(name) else { continue };
            let elem = func.params.iter().find(|p| &p.name == name).map(|p| p.ty.elem());
            let Some(elem) = elem.map(|e| match e {
                kernbench_compiler::sema::types::Elem::Ptr(d) => kernbench_compiler::sema::types::Elem::Num(d),
                other => other,
            }) else {
                continue;
            };
            let Some(t) = kernbench_compiler::datapath::Tensor::from_bytes(elem, shape, &seg.data) else {
                continue;
            };
            let path = dir.join(format!("{name}.npy"));
            if let Err(e) = args::write_npy(&path, &t) {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
            eprintln!("wrote {}", path.display());
        }
    }
    ExitCode::SUCCESS
}
