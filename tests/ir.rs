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
