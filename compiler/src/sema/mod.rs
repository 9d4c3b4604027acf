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
    // rustc does, it is reported only once its file checks. Another file's
    // errors do not silence it (`tlc check a.tl b.tl`).
    let with_errors: std::collections::HashSet<u32> = list
        .iter()
        .filter(|d| !d.code.is_warning())
        .map(|d| d.primary.loc.file.0)
        .collect();
    list.retain(|d| d.code != crate::diag::Code::W0001 || !with_errors.contains(&d.primary.loc.file.0));
    list
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::Code;

    fn codes_and_messages(out: &CheckOutput) -> Vec<(Code, String)> {
        out.diagnostics.iter().map(|d| (d.code, d.message.clone())).collect()
    }

    /// A chain of distinct helpers past the nesting limit is not called
    /// recursion; one at the limit checks.
    #[test]
    fn a_deep_chain_of_helpers_is_not_recursion() {
        let chain = |n: usize| {
            let mut src: String = (0..n)
                .map(|i| format!("def h{i}(x):\n    return h{}(x)\n\n\n", i + 1))
                .collect();
            src.push_str(&format!("def h{n}(x):\n    return x + 1\n\n\n"));
            src.push_str("@kernel\ndef k(p: ptr[i32]):\n    tl.store(p, h0(tl.load(p)))\n");
            check_source("chain.tl", &src, &Options::default())
        };
        let ok = chain(check::MAX_CALL_DEPTH - 1);
        assert!(!ok.has_errors(), "{:?}", codes_and_messages(&ok));
        let deep = chain(check::MAX_CALL_DEPTH + 5);
        let found = codes_and_messages(&deep);
        assert_eq!(
            found,
            vec![(
                Code::E0109,
                format!("helper calls nest more than {} deep", check::MAX_CALL_DEPTH)
            )]
        );
    }

    /// With constexprs unbound (`tlc check` without `-D`) the checks that
    /// need their values are skipped, not failed: a `tl.static_range` over
    /// one, a tuple of them indexed by one.
    #[test]
    fn unbound_constexprs_skip_the_checks_that_need_them() {
        let src = "@kernel\ndef k(x: ptr[f32], B: constexpr, C: constexpr):\n    \
                   for i in tl.static_range(B):\n        q = tl.arange(0, i + 1)\n        \
                   tl.store(x + q, 1.0, mask=q < 4)\n    t = (B, C)[B]\n    tl.store(x, t)\n";
        let out = check_source("u.tl", src, &Options::default());
        assert_eq!(codes_and_messages(&out), vec![]);
        // Bound, the same checks run: `tl.arange(0, 1)` is fine, and index
        // 2 of a pair is out of range.
        let mut options = Options::default();
        options.defines.insert("B".into(), Konst::Int(2));
        options.defines.insert("C".into(), Konst::Int(8));
        let out = check_source("u.tl", src, &options);
        assert_eq!(
            codes_and_messages(&out),
            vec![(Code::E0325, "index 2 is out of range for a tuple of 2".to_string())]
        );
    }

    /// A `tl.static_range` too long to unroll while checking (over 1024
    /// iterations) binds its index to a constant of unknown value: what
    /// needs the value (an axis, a shape) is checked when lowering unrolls
    /// the loop, not refused as "known only at run time" (which failed
    /// `emit-ir` too, before it could unroll). A loop longer than the whole
    /// check budget is E0327 at once, from its trip count, and one whose
    /// count overflows i64 arithmetic runs its iterations.
    #[test]
    fn long_static_ranges_check_and_lower() {
        let src = "@kernel\ndef k(x: ptr[f32]):\n    for i in tl.static_range(1100):\n        \
                   p = tl.program_id(i % 3)\n        z = tl.zeros((i % 4 + 1, 2), f32)\n        \
                   tl.store(x + p, tl.sum(tl.sum(z, axis=i % 2), axis=0))\n";
        let out = check_source("l.tl", src, &Options::default());
        assert_eq!(codes_and_messages(&out), vec![]);
        let mut session = Session::new(Options::default());
        session.add_file("l.tl", None, src.to_string());
        let (out, ir) = session.lower("k");
        assert_eq!(codes_and_messages(&out), vec![]);
        let ir = ir.expect("lowers");
        // Every iteration unrolled: one `program_id` each.
        let ids = ir
            .insts
            .values()
            .filter(|d| matches!(d.op, crate::ir::Op::ProgramId(_)))
            .count();
        assert_eq!(ids, 1100);
        let huge = "@kernel\ndef k(x: ptr[f32]):\n    for i in tl.static_range(0, 9223372036854775807):\n        \
                    tl.atomic_add(x, 1.0)\n";
        let out = check_source("h.tl", huge, &Options::default());
        assert_eq!(out.diagnostics.first().map(|d| d.code), Some(Code::E0327));
    }

    /// An unused variable is reported in a file that checks, whatever
    /// another file's errors; not in a file with errors.
    #[test]
    fn unused_variables_are_silenced_per_file() {
        let mut s = Session::new(Options::default());
        let unused = "@kernel\ndef k(p: ptr[i32]):\n    x = 1\n    tl.store(p, 2)\n";
        s.add_file("a.tl", None, unused.to_string());
        s.add_file(
            "b.tl",
            None,
            "@kernel\ndef j(p: ptr[i32]):\n    tl.store(p, tl.nope(1))\n".to_string(),
        );
        s.add_file(
            "c.tl",
            None,
            format!("{unused}\n\n@kernel\ndef m(p: ptr[i32]):\n    tl.store(p, tl.nope(1))\n"),
        );
        let out = s.finish();
        let files: Vec<(Code, &str)> = out
            .diagnostics
            .iter()
            .map(|d| (d.code, out.sources.name(d.primary.loc.file)))
            .collect();
        assert_eq!(
            files,
            vec![(Code::W0001, "a.tl"), (Code::E0101, "b.tl"), (Code::E0101, "c.tl")]
        );
    }
}
