//! The front end never panics and always answers: property tests over
//! random bytes and over valid programs mutated at random (deletions,
//! duplications, inserted tokens, swapped lines). Every diagnostic must
//! point inside its file, on character boundaries.
//!
//! CI runs the default number of cases; `PROPTEST_CASES=100000` runs longer.

use kernbench_compiler::diag::{check_locations, render_human, render_json, ColorMode};
use kernbench_compiler::sema::{check_source, Options};
use proptest::prelude::*;

fn corpus() -> Vec<String> {
    let root = kernbench_tests::repo_root();
    let mut out = Vec::new();
    for dir in ["stdlib/kernels", "stdlib/ccl", "tests/ui"] {
        for f in kernbench_tests::files_with_ext(&root.join(dir), "tl") {
            if let Ok(s) = std::fs::read_to_string(&f) {
                out.push(s);
            }
        }
    }
    assert!(!out.is_empty(), "no corpus found under {}", root.display());
    out
}

/// Checks `src` and validates every diagnostic's location and rendering.
fn check_never_panics(src: &str) {
    let options = Options {
        stdlib_root: Some(kernbench_tests::repo_root().join("stdlib")),
        ..Options::default()
    };
    let out = check_source("fuzz.tl", src, &options);
    if let Err(e) = check_locations(&out.diagnostics, &out.sources) {
        panic!("{e}");
    }
    let _ = render_human(&out.diagnostics, &out.sources, ColorMode::Never);
    let _ = render_json(&out.diagnostics, &out.sources);
}

const TOKENS: &[&str] = &[
    "(",
    ")",
    "[",
    "]",
    ":",
    ",",
    "=",
    "==",
    "+",
    "*",
    "//",
    "**",
    "\n",
    "\n    ",
    "\t",
    " ",
    "def ",
    "if ",
    "else:",
    "for ",
    "in ",
    "range(",
    "tl.",
    "tl.load(",
    "tl.arange(0, ",
    "None",
    "True",
    "x",
    "BLOCK",
    "1",
    "0.5",
    "\"",
    "#",
    "@kernel\n",
    "return ",
    "break",
    "and",
    "not ",
    "[:, None]",
    ".to(f16)",
    "lambda",
    "é",
    "\\\n",
    "1e999",
    "99999999999999999999",
];

fn mutate(base: &str, ops: &[(u8, usize, usize, usize)]) -> String {
    let mut s: Vec<char> = base.chars().collect();
    for &(kind, a, b, t) in ops {
        let n = s.len().max(1);
        let (i, j) = (a % n, b % n);
        let (lo, hi) = (i.min(j), i.max(j).min(lo_cap(i.min(j), s.len())));
        match kind % 4 {
            0 => {
                s.drain(lo..hi.min(s.len()));
            }
            1 => {
                let piece: Vec<char> = s[lo..hi.min(s.len())].to_vec();
                let at = j.min(s.len());
                s.splice(at..at, piece);
            }
            2 => {
                let tok: Vec<char> = TOKENS[t % TOKENS.len()].chars().collect();
                let at = i.min(s.len());
                s.splice(at..at, tok);
            }
            _ => {
                let text: String = s.iter().collect();
                let mut lines: Vec<&str> = text.lines().collect();
                if lines.len() > 1 {
                    let (x, y) = (a % lines.len(), b % lines.len());
                    lines.swap(x, y);
                }
                s = lines.join("\n").chars().collect();
            }
        }
    }
    s.into_iter().collect()
}

/// Keeps deleted/duplicated ranges short so mutants stay mostly valid.
fn lo_cap(lo: usize, len: usize) -> usize {
    (lo + 40).min(len)
}

/// 256 cases per property unless `PROPTEST_CASES` says otherwise.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        check_never_panics(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn random_token_soup(picks in proptest::collection::vec(0usize..TOKENS.len(), 0..120)) {
        let src: String = picks.iter().map(|&i| TOKENS[i]).collect();
        check_never_panics(&src);
    }

    #[test]
    fn mutated_programs(which in any::<usize>(), ops in proptest::collection::vec((any::<u8>(), any::<usize>(), any::<usize>(), any::<usize>()), 1..6)) {
        let corpus = corpus();
        let base = &corpus[which % corpus.len()];
        check_never_panics(&mutate(base, &ops));
    }
}

#[test]
fn corpus_is_checked_without_panics() {
    for src in corpus() {
        check_never_panics(&src);
    }
}
