//! Golden IR: every `tests/ir/X.tl` is lowered (all kernels, or the one
//! named by `# kernel: NAME`, with `# tlc-flags: -D …`) and its text form
//! compared with `X.ir`; every stdlib kernel likewise against
//! `tests/ir/stdlib/<folder>-<name>.ir`. `BLESS=1 cargo test` rewrites them.

use kernbench_tests::*;
use std::path::Path;

#[test]
fn ir_golden_files() {
    enter_repo_root();
    let cases = files_with_ext(Path::new("tests/ir"), "tl");
    assert!(
        cases.len() >= 25,
        "expected at least 25 IR cases, found {}",
        cases.len()
    );
    let mut failures = Vec::new();
    for case in &cases {
        let actual = ir_output(case);
        assert!(
            actual.starts_with("kernel @"),
            "{} does not lower:\n{actual}",
            case.display()
        );
        if let Err(diff) = compare_or_bless(&case.with_extension("ir"), &actual) {
            failures.push(diff);
        }
    }
    assert!(
        failures.is_empty(),
        "{} IR case(s) differ (BLESS=1 to accept):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Every stdlib kernel lowers (the verifier runs inside lowering) to the
/// recorded IR (every kernel of a file, in one golden per file).
#[test]
fn stdlib_kernels_lower() {
    enter_repo_root();
    let mut failures = Vec::new();
    for dir in ["kernels", "ccl"] {
        for f in files_with_ext(&Path::new("stdlib").join(dir), "tl") {
            // Modules of helpers only (`ccl/reduce_ops.tl`) have no IR.
            if !std::fs::read_to_string(&f).unwrap_or_default().contains("@kernel") {
                continue;
            }
            let out = ir_output(&f);
            assert!(
                out.starts_with("kernel @") && !out.contains("error"),
                "{}:\n{out}",
                f.display()
            );
            let stem = f.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
            let golden = Path::new("tests/ir/stdlib").join(format!("{dir}-{stem}.ir"));
            if let Err(diff) = compare_or_bless(&golden, &out) {
                failures.push(diff);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "stdlib IR differs (BLESS=1 to accept):\n{}",
        failures.join("\n")
    );
}

/// `tlc emit-ir --format json` says what the text form says: the text
/// form rebuilt from the JSON alone (by the printer below, written from
/// docs/ir.md's description, not from `print.rs`) is the text form, for
/// every IR case and every stdlib kernel; and the flags the text form
/// leaves to the operand count agree with it.
#[test]
fn json_form_says_what_the_text_form_says() {
    enter_repo_root();
    let mut files = files_with_ext(Path::new("tests/ir"), "tl");
    for dir in ["kernels", "ccl"] {
        files.extend(files_with_ext(&Path::new("stdlib").join(dir), "tl"));
    }
    let mut checked = 0;
    for file in &files {
        for (func, sources) in lower_all(file).into_iter().flatten() {
            let text = kernbench_compiler::ir::print_function(&func, &sources);
            let json = kernbench_compiler::ir::function_json(&func, &sources);
            // Through a string, as a tool would read it.
            let json: serde_json::Value = serde_json::from_str(&json.to_string()).expect("valid JSON");
            let rebuilt = json_text::kernel(&json);
            if let Some((n, (want, got))) = text.lines().zip(rebuilt.lines()).enumerate().find(|(_, (a, b))| a != b) {
                panic!(
                    "{} `{}`, line {}:\n  text: {want}\n  json: {got}",
                    file.display(),
                    func.name,
                    n + 1
                );
            }
            assert_eq!(text, rebuilt, "{} `{}`", file.display(), func.name);
            checked += 1;
        }
    }
    assert!(checked >= 75, "only {checked} kernels checked");
}

/// The text form from the JSON form.
mod json_text {
    use serde_json::Value as Json;
    use std::fmt::Write;

    fn s(v: &Json) -> &str {
        v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
    }

    fn list(v: &Json) -> &[Json] {
        v.as_array().map_or(&[], Vec::as_slice)
    }

    fn ty(t: &Json) -> String {
        let dims: Vec<String> = list(&t["shape"]).iter().map(|d| d.to_string()).collect();
        match s(&t["kind"]) {
            "scalar" => s(&t["elem"]).to_string(),
            kind => format!("{kind}[{}, {}]", s(&t["elem"]), dims.join(", ")),
        }
    }

    pub fn kernel(k: &Json) -> String {
        let mut out = String::new();
        let params = list(&k["params"]);
        let typed: Vec<String> = params
            .iter()
            .map(|p| format!("{}: {}", s(&p["value"]), ty(&p["type"])))
            .collect();
        let _ = writeln!(out, "kernel @{}({}) {{", s(&k["name"]), typed.join(", "));
        if !params.is_empty() {
            let named: Vec<String> = params
                .iter()
                .map(|p| format!("{} = {}", s(&p["value"]), s(&p["name"])))
                .collect();
            let _ = writeln!(out, "  // params: {}", named.join(", "));
        }
        let constexprs = list(&k["constexprs"]);
        if !constexprs.is_empty() {
            let cs: Vec<String> = constexprs
                .iter()
                .map(|c| format!("{}={}", s(&c["name"]), s(&c["text"])))
                .collect();
            let _ = writeln!(out, "  // constexprs: {}", cs.join(", "));
        }
        region_insts(&k["body"], 1, &mut out);
        out.push_str("}\n");
        out
    }

    fn region_insts(r: &Json, depth: usize, out: &mut String) {
        for i in list(&r["insts"]) {
            inst(i, depth, out);
        }
    }

    fn attrs(op: &str, a: &Json) -> String {
        let get = |k: &str| &a[k];
        match op {
            "const" => match get("value") {
                Json::String(w) => format!(" {w}"),
                v if v.is_i64() || v.is_u64() => format!(" {v}"),
                v => format!(" {:?}", v.as_f64().unwrap_or(f64::NAN)),
            },
            "program_id" | "num_programs" | "mesh_id" | "mesh_size" => format!(" {}", get("axis")),
            "arange" => format!(" {}, {}", get("start"), get("end")),
            "trans" => {
                let perm: Vec<String> = list(get("perm")).iter().map(|d| d.to_string()).collect();
                format!(" perm=[{}]", perm.join(", "))
            }
            o if o.starts_with("reduce_") => {
                let axis = if get("axis").is_null() {
                    "all".to_string()
                } else {
                    get("axis").to_string()
                };
                let keep = if get("keep_dims").as_bool() == Some(true) {
                    " keep_dims"
                } else {
                    ""
                };
                format!(" axis={axis}{keep}")
            }
            "send" | "recv" | "recv_async" => match s(get("peer")) {
                "rank" => String::new(),
                dir => format!(" {dir}"),
            },
            "gemm" => format!(" a_in={} b_in={}", s(get("a_in")), s(get("b_in"))),
            "assert" => format!(" {:?}", s(get("message"))),
            "print" => format!(" {:?}", s(get("prefix"))),
            _ => String::new(),
        }
    }

    /// How many operands the flags say an operation has, when they say.
    fn operands_by_flags(op: &str, a: &Json) -> Option<usize> {
        let flag = |k: &str| usize::from(a[k].as_bool() == Some(true));
        match op {
            "load" => Some(1 + flag("has_mask") + flag("has_other")),
            "store" | "atomic_add" => Some(2 + flag("has_mask")),
            "dot" => Some(2 + flag("has_acc")),
            _ => None,
        }
    }

    fn inst(i: &Json, depth: usize, out: &mut String) {
        let pad = "  ".repeat(depth);
        let op = s(&i["op"]);
        let args: Vec<&str> = list(&i["args"]).iter().map(s).collect();
        if let Some(n) = operands_by_flags(op, &i["attrs"]) {
            assert_eq!(n, args.len(), "{op} {}: flags against operands", s(&i["id"]));
        }
        let results = list(&i["results"]);
        let mut line = pad.clone();
        if !results.is_empty() {
            let names: Vec<&str> = results.iter().map(|r| s(&r["value"])).collect();
            let _ = write!(line, "{} = ", names.join(", "));
        }
        let attrs = attrs(op, &i["attrs"]);
        let _ = write!(line, "{}.{op}{attrs}", s(&i["engine"]));
        if !args.is_empty() {
            let sep = if attrs.is_empty() { " " } else { ", " };
            let _ = write!(line, "{sep}{}", args.join(", "));
        }
        if !results.is_empty() {
            let tys: Vec<String> = results.iter().map(|r| ty(&r["type"])).collect();
            let _ = write!(line, " : {}", tys.join(", "));
        }
        let regions = list(&i["regions"]);
        if !regions.is_empty() {
            line.push_str(" {");
        }
        let loc = &i["loc"];
        let file = s(&loc["file"]).rsplit('/').next().unwrap_or_default();
        let _ = writeln!(out, "{line}  // {file}:{}:{}", loc["line"], loc["column"]);
        for (k, r) in regions.iter().enumerate() {
            if k > 0 {
                let _ = writeln!(out, "{pad}}} {{");
            }
            let params = list(&r["params"]);
            if !params.is_empty() {
                let ps: Vec<String> = params
                    .iter()
                    .map(|p| format!("{}: {}", s(&p["value"]), ty(&p["type"])))
                    .collect();
                let _ = writeln!(out, "{pad}^({}):", ps.join(", "));
            }
            region_insts(r, depth + 1, out);
        }
        if !regions.is_empty() {
            let _ = writeln!(out, "{pad}}}");
        }
    }
}
