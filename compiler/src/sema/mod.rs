//! Semantic analysis: module loading and name resolution, the `tl.*`
//! built-in table, dtype promotion, constexpr evaluation, shape inference,
//! and the lints.
//!
//! The checker is an abstract interpreter: it walks each kernel with its
//! constexprs bound (defaults, or `-D NAME=VALUE`), computing a [`Val`] —
//! type, shape and, for constants, value — for every expression. Helpers are
//! checked at each call site with their arguments' types (and once on their
//! own, with unknown parameter types, so an unused helper is still checked).
//! `if` on a constant and `tl.static_range` are evaluated at compile time,
//! as Triton does.
//!
//! **Architecture invariant:** the checker never stops at the first error:
//! an erroneous expression gets the type `Unknown`, which no later rule
//! reports on, so each mistake is reported once, where it is.

pub mod builtins;
mod check;
mod consteval;
mod emit;
mod expr;
mod lints;
mod lower;
mod program;
mod rules;
mod suggest;
pub mod types;
pub use types::Direction;

pub use check::Val;
pub use types::{DType, Dim, Elem, Konst, Shape, Ty};

use crate::diag::{Diagnostic, Diagnostics, SourceMap};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What a check run is given besides the files.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `-D NAME=VALUE`: constexpr values, applied to every kernel with a
    /// constexpr parameter of that name.
    pub defines: BTreeMap<String, Konst>,
    /// Where `from kernels.add import add` looks after the importing file's
    /// own folder.
    pub stdlib_root: Option<PathBuf>,
}

/// What checking produced.
pub struct CheckOutput {
    pub sources: SourceMap,
    /// In source order.
    pub diagnostics: Vec<Diagnostic>,
    /// Every kernel found in the root files, with its specialization.
    pub kernels: Vec<KernelSummary>,
}

impl CheckOutput {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }
}

/// A kernel and the constexpr values it was checked with.
#[derive(Clone, Debug)]
pub struct KernelSummary {
    pub name: String,
    pub file: String,
    /// Constexpr parameter → bound value (`None`: unbound, shapes depending
    /// on it were not checked).
    pub constexprs: Vec<(String, Option<Konst>)>,
}

/// Checks a set of root files; imports are read from disk as needed.
pub struct Session {
    options: Options,
    roots: Vec<(String, Option<PathBuf>, String)>,
}

/// Stack for the checking thread. The AST and the checker recurse over
/// expressions; the layout pass bounds their depth (E0018), and this bound
/// leaves ample room for it. Untouched stack pages cost nothing.
const CHECK_STACK_BYTES: usize = 256 << 20;

impl Session {
    pub fn new(options: Options) -> Session {
        Session {
            options,
            roots: Vec::new(),
        }
    }

    /// Adds a root file. `path` (when the file is on disk) resolves its
    /// relative imports; `name` is how diagnostics print it.
    pub fn add_file(&mut self, name: &str, path: Option<PathBuf>, source: String) {
        self.roots.push((name.to_string(), path, source));
    }

    /// Parses and checks everything added, on a thread with a large stack.
    pub fn finish(self) -> CheckOutput {
        self.run(|checker| checker.finish())
    }

    /// Checks everything added, then lowers kernel `name` to IR (with the
    /// session's `-D` constexprs). The IR is `Err` when the program has
    /// errors (they are in the diagnostics) or no such kernel exists.
    pub fn lower(self, name: &str) -> (CheckOutput, Result<crate::ir::Function, String>) {
        let name = name.to_string();
        self.run(move |checker| checker.lower(&name))
    }

    fn run<T: Send + 'static>(self, job: impl FnOnce(check::Checker) -> T + Send + 'static) -> T {
        let Session { options, roots } = self;
        let work = move || {
            let mut checker = check::Checker::new(options);
            for (name, path, source) in roots {
                checker.add_root(&name, path, source);
            }
            job(checker)
        };
        let spawned = std::thread::Builder::new()
            .name("tl-check".into())
            .stack_size(CHECK_STACK_BYTES)
            .spawn(work);
        match spawned.map(|h| h.join()) {
            Ok(Ok(out)) => out,
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(e) => panic!("cannot start the checking thread: {e}"),
        }
    }
}

/// Checks one in-memory source (tests, benchmarks, editors).
pub fn check_source(name: &str, source: &str, options: &Options) -> CheckOutput {
    let mut s = Session::new(options.clone());
    s.add_file(name, None, source.to_string());
    s.finish()
}

pub(crate) fn sorted(d: Diagnostics) -> Vec<Diagnostic> {
    let mut list = d.into_sorted();
    // An unused variable next to an error is mostly the error's echo (its
    // value failed to check, or the use that failed was its read): as
    // rustc does, it is reported only once the program checks.
    if list.iter().any(|d| !d.code.is_warning()) {
        list.retain(|d| d.code != crate::diag::Code::W0001);
    }
    list
}
