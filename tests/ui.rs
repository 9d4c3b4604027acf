//! Golden diagnostics: every `tests/ui/X.tl` is checked and its output
//! compared with `X.stderr` (absent when the file checks clean). `BLESS=1
//! cargo test` rewrites the expectations and `docs/diagnostics.md`.
//!
//! Also: every diagnostic code has a case named after it, and the stdlib
//! checks clean (no warnings either).

use kernbench_compiler::diag::Code;
use kernbench_tests::*;
use std::path::{Path, PathBuf};

#[test]
fn ui_golden_files() {
    enter_repo_root();
    let cases = files_with_ext(Path::new("tests/ui"), "tl");
    assert!(
        cases.len() >= 60,
        "expected at least 60 ui cases, found {}",
        cases.len()
    );
    let mut failures = Vec::new();
    for case in &cases {
        let actual = check_output(case);
        if let Err(diff) = compare_or_bless(&case.with_extension("stderr"), &actual) {
            failures.push(diff);
        }
    }
    for stale in files_with_ext(Path::new("tests/ui"), "stderr") {
        if !stale.with_extension("tl").exists() {
            if blessing() {
                let _ = std::fs::remove_file(&stale);
            } else {
                failures.push(format!(
                    "{}: no matching .tl case (BLESS=1 removes it)",
                    stale.display()
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} ui case(s) differ (BLESS=1 to accept):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// `tests/ui/<CODE>-*.tl`, the case that documents a code.
fn case_for(code: Code) -> Option<PathBuf> {
    files_with_ext(Path::new("tests/ui"), "tl").into_iter().find(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(&format!("{}-", code.as_str())))
    })
}

#[test]
fn every_code_has_a_case_that_emits_it() {
    enter_repo_root();
    let mut missing = Vec::new();
    for &code in Code::ALL {
        match case_for(code) {
            None => missing.push(format!("{}: no tests/ui/{}-*.tl", code.as_str(), code.as_str())),
            Some(case) => {
                let out = check_output(&case);
                if !out.contains(&format!("[{}]", code.as_str())) {
                    missing.push(format!("{}: {} does not emit it", code.as_str(), case.display()));
                }
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// docs/diagnostics.md: for each code, its summary, the explanation from
/// the header comment of its ui case, the case itself and tlc's output.
fn diagnostics_doc() -> String {
    let mut doc = String::from(
        "# Diagnostics\n\n\
         Every diagnostic `tlc check` can print, with a minimal program that triggers it.\n\
         Errors (`E…`) make `tlc check` exit with status 1; warnings (`W…`) do not.\n\
         `tlc check --format json` prints the same diagnostics as JSON Lines.\n\n\
         This file is generated from `tests/ui/<CODE>-*.tl` by `BLESS=1 cargo test -p kernbench-tests --test ui`;\n\
         edit the cases, not this file.\n\n| code | meaning |\n|---|---|\n",
    );
    for &code in Code::ALL {
        doc.push_str(&format!(
            "| [{c}](#{l}) | {s} |\n",
            c = code.as_str(),
            l = code.as_str().to_lowercase(),
            s = code.summary()
        ));
    }
    for &code in Code::ALL {
        doc.push_str(&format!(
            "\n## {}\n\n{}.\n\n",
            code.as_str(),
            capitalize(code.summary())
        ));
        let Some(case) = case_for(code) else { continue };
        let source = std::fs::read_to_string(&case).unwrap_or_default();
        let mut body = Vec::new();
        let mut explanation = Vec::new();
        let mut in_header = true;
        for line in source.lines() {
            if in_header && line.starts_with("# tlc-flags:") {
                body.push(line);
                continue;
            }
            // Directives for the test, not words of the explanation.
            if in_header && line.starts_with("# tlc-lower:") {
                continue;
            }
            if in_header && line.starts_with('#') {
                let text = line.trim_start_matches('#').trim();
                let text = text
                    .strip_prefix(&format!("{}:", code.as_str()))
                    .map(str::trim)
                    .unwrap_or(text);
                explanation.push(text.to_string());
                continue;
            }
            in_header = false;
            body.push(line);
        }
        // The first line may repeat the summary (printed above already),
        // or begin the explanation's first sentence.
        if explanation
            .first()
            .is_some_and(|l| l.trim_end_matches('.').eq_ignore_ascii_case(code.summary()))
        {
            explanation.remove(0);
        }
        if !explanation.is_empty() {
            // A sentence starts with a capital, but the language's name
            // is spelled `tl`.
            let text = explanation.join(" ");
            let text = if text.starts_with("tl ") {
                text
            } else {
                capitalize(&text)
            };
            doc.push_str(&text);
            doc.push_str("\n\n");
        }
        let flags = flags_of(&source);
        let cmd = flags.iter().map(|(n, v)| format!(" -D {n}={v}")).collect::<String>();
        // What only lowering reports shows with the command that lowers.
        let command = match directive(&source, "# tlc-lower:") {
            Some(kernel) => format!("emit-ir --kernel {kernel}"),
            None => "check".to_string(),
        };
        doc.push_str(&format!(
            "```python\n{}\n```\n\n`tlc {command}{cmd} {}`:\n\n```text\n{}```\n",
            body.join("\n").trim(),
            case.display(),
            check_output(&case)
        ));
    }
    doc
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

#[test]
fn diagnostics_doc_is_current() {
    enter_repo_root();
    let doc = diagnostics_doc();
    if let Err(diff) = compare_or_bless(Path::new("docs/diagnostics.md"), &doc) {
        panic!("docs/diagnostics.md is out of date (BLESS=1 regenerates it):\n{diff}");
    }
}

#[test]
fn stdlib_checks_clean() {
    enter_repo_root();
    let mut dirty = Vec::new();
    for dir in ["stdlib/kernels", "stdlib/ccl"] {
        let files = files_with_ext(Path::new(dir), "tl");
        assert!(!files.is_empty(), "{dir} has no .tl files");
        for f in files {
            let out = check_output(&f);
            if !out.is_empty() {
                dirty.push(out);
            }
        }
    }
    assert!(dirty.is_empty(), "stdlib does not check clean:\n{}", dirty.join("\n"));
}
