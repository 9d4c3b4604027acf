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
mod expr;
mod lints;
mod program;
mod rules;
mod suggest;
pub mod types;

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
    checker: check::Checker,
}

impl Session {
    pub fn new(options: Options) -> Session {
        Session {
            checker: check::Checker::new(options),
        }
    }

    /// Adds a root file. `path` (when the file is on disk) resolves its
    /// relative imports; `name` is how diagnostics print it.
    pub fn add_file(&mut self, name: &str, path: Option<PathBuf>, source: String) {
        self.checker.add_root(name, path, source);
    }

    pub fn finish(self) -> CheckOutput {
        self.checker.finish()
    }
}

/// Checks one in-memory source (tests, benchmarks, editors).
pub fn check_source(name: &str, source: &str, options: &Options) -> CheckOutput {
    let mut s = Session::new(options.clone());
    s.add_file(name, None, source.to_string());
    s.finish()
}

pub(crate) fn sorted(d: Diagnostics) -> Vec<Diagnostic> {
    d.into_sorted()
}
