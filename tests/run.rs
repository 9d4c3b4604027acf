//! Golden run tests: every `tests/run/X.tl` runs as its `# run:` header
//! says (`tlc run` argument syntax; `rand` with fixed seeds) on the JIT,
//! and the tensors afterwards — or the run-time error — are compared with
//! `X.out`. The interpreter must produce the same text. `BLESS=1` rewrites.

use kernbench_compiler::datapath::{elem, Tensor};
use kernbench_compiler::diag::ColorMode;
use kernbench_compiler::sema::types::Konst;
use kernbench_runtime::args::{parse_arg, resolve, HostArg};
use kernbench_runtime::exec::render_run_error;
use kernbench_tests::exec::{lower_file, run_raw, Arg};
use kernbench_tests::*;
use std::path::Path;

fn format_tensor(name: &str, t: &Tensor) -> String {
    let d = t.dtype();
    let vals: Vec<String> = (0..t.numel())
        .map(|i| {
            let b = t.get_bits(i);
            if d.is_float() {
                format!("{:?}", elem::to_f32(d, b))
            } else {
                format!("{}", elem::to_i64(d, b))
            }
        })
        .collect();
    format!("{name}: {d}{:?} = [{}]\n", t.shape, vals.join(", "))
}

fn run_case(path: &Path, jit: bool) -> String {
    let source = std::fs::read_to_string(path).expect("case source");
    let header = directive(&source, "# run:").unwrap_or_else(|| panic!("{}: no `# run:` header", path.display()));
    let words: Vec<&str> = header.split_whitespace().collect();
    let (mut kernel, mut grid, mut specs, mut defines) = (String::new(), [1u32; 3], Vec::new(), Vec::new());
    let mut i = 0;
    while i < words.len() {
        let value = words.get(i + 1).copied().unwrap_or_default();
        match words[i] {
            "--kernel" => kernel = value.to_string(),
            "--grid" => {
                for (k, g) in value.split(',').enumerate() {
                    grid[k] = g.parse().expect("grid");
                }
            }
            "--arg" => specs.push(parse_arg(value).expect("valid --arg")),
            "-D" => {
                let (n, v) = value.split_once('=').expect("-D NAME=VALUE");
                defines.push((n.to_string(), Konst::parse_define(v)));
            }
            other => panic!("unknown word `{other}` in the run header"),
        }
        i += 2;
    }
    let defs: Vec<(&str, Konst)> = defines.iter().map(|(n, k)| (n.as_str(), k.clone())).collect();
    let (func, sources) =
        lower_file(&path.display().to_string(), &source, &kernel, &defs).unwrap_or_else(|e| panic!("{e}"));
    let mut args = Vec::new();
    let mut names = Vec::new();
    for p in &func.params {
        let (_, spec) = specs
            .iter()
            .find(|(n, _)| n == &p.name)
            .unwrap_or_else(|| panic!("no --arg for {}", p.name));
        match resolve(&p.name, spec, &p.ty).expect("argument resolves") {
            HostArg::Tensor(t) => {
                args.push(Arg::Tensor(t));
                names.push(Some(p.name.clone()));
            }
            HostArg::Scalar(b) => {
                args.push(Arg::Scalar(b));
                names.push(None);
            }
        }
    }
    match run_raw(&func, &args, grid, jit) {
        Ok(tensors) => names
            .iter()
            .flatten()
            .zip(tensors.iter())
            .map(|(n, t)| format_tensor(n, t))
            .collect(),
        Err(e) => render_run_error(&func, &sources, &e, ColorMode::Never),
    }
}

#[test]
fn run_golden_files() {
    enter_repo_root();
    let cases = files_with_ext(Path::new("tests/run"), "tl");
    assert!(cases.len() >= 8, "expected at least 8 run cases");
    let mut failures = Vec::new();
    for case in &cases {
        let jit = run_case(case, true);
        let interp = run_case(case, false);
        assert_eq!(jit, interp, "{}: the JIT and the interpreter disagree", case.display());
        if let Err(diff) = compare_or_bless(&case.with_extension("out"), &jit) {
            failures.push(diff);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
