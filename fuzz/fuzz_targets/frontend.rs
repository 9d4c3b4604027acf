//! Fuzz target for the front end: any bytes, read as (lossy) UTF-8 source,
//! are checked, their diagnostics validated and rendered, and every kernel
//! of an error-free program is lowered, verified, printed and planned for
//! the data path. A crash is a panic anywhere in there, a diagnostic with
//! a bad location ([`check_locations`]) or an internal compiler error.
//!
//! Seeds: the stdlib's and the golden tests' `.tl` files (`.ci/run` copies
//! them into a corpus folder); `fuzz/tl.dict` gives libFuzzer the
//! language's tokens.

#![no_main]

use kernbench_compiler::datapath::plan;
use kernbench_compiler::diag::{check_locations, render_human, render_json, ColorMode};
use kernbench_compiler::ir::print_function;
use kernbench_compiler::sema::{check_source, Options, Session};
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;

fn options() -> Options {
    Options {
        // Imports (`from reduce_ops import combine`) resolve as for `tlc`.
        stdlib_root: Some(PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../stdlib"))),
        ..Options::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let src = String::from_utf8_lossy(data);
    let out = check_source("fuzz.tl", &src, &options());
    if let Err(e) = check_locations(&out.diagnostics, &out.sources) {
        panic!("{e}");
    }
    let _ = render_human(&out.diagnostics, &out.sources, ColorMode::Never);
    let _ = render_json(&out.diagnostics, &out.sources);
    if out.has_errors() {
        return;
    }
    for kernel in &out.kernels {
        let mut session = Session::new(options());
        session.add_file("fuzz.tl", None, src.to_string());
        let (lowered, func) = session.lower(&kernel.name);
        match func {
            Ok(func) => {
                let _ = print_function(&func, &lowered.sources);
                let _ = plan(&func, true);
            }
            // A checked program that cannot be lowered is the compiler's
            // fault; an unbound constexpr is reported as an error.
            Err(e) if e.starts_with("internal compiler error") => panic!("{e}"),
            Err(_) => {}
        }
    }
});
