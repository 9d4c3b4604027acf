//! How a command run with `--format json` fails: the message on stderr as
//! always and one record `{"error": {"kind": …, "message": …}}` on stdout,
//! so that a script reading stdout gets one JSON object however the
//! command ends.
//!
//! `tlc run` and `tlc emit-ir` print their records where they fail
//! ([`Failure`], with the finer kinds below), and so does every command
//! whose `--topology` file does not load; for every other failure
//! [`record_unreported`] prints one after the command returns, from the
//! first `error: ` line the command wrote to stderr, unless the command
//! printed something on stdout already (its own record, or a result that
//! says what went wrong, as `tlc check`'s diagnostics and `tlc bench`'s
//! `#wrong` do). The output macros of `main.rs` keep the two facts it
//! needs ([`note_stdout`], [`note_stderr`]).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Whether the command prints JSON (`--format json`).
static JSON: AtomicBool = AtomicBool::new(false);

/// Whether anything went to stdout.
static WROTE_STDOUT: AtomicBool = AtomicBool::new(false);

/// The first `error: ` line written to stderr, without its lead.
static FIRST_ERROR: Mutex<Option<String>> = Mutex::new(None);

/// Set once by `main` from the command line.
pub(crate) fn set_json(json: bool) {
    JSON.store(json, Ordering::Relaxed);
}

/// The [`Failure`] of the command being run (its `--format`, as `main`
/// set it).
pub(crate) fn of_command() -> Failure {
    Failure {
        json: JSON.load(Ordering::Relaxed),
    }
}

pub(crate) fn note_stdout() {
    WROTE_STDOUT.store(true, Ordering::Relaxed);
}

pub(crate) fn note_stderr(text: &str) {
    if !text.starts_with("error: ") {
        return;
    }
    if let Ok(mut first) = FIRST_ERROR.lock() {
        first.get_or_insert_with(|| kernbench_runtime::sim::first_line(text).to_string());
    }
}

/// After a command run with `--format json` that failed with `code` (2:
/// bad usage, else 1): its record, when it printed nothing on stdout.
/// Kind `usage` for exit 2, `failure` otherwise.
pub(crate) fn record_unreported(code: ExitCode) {
    if code == ExitCode::SUCCESS || WROTE_STDOUT.load(Ordering::Relaxed) {
        return;
    }
    let message = FIRST_ERROR
        .lock()
        .ok()
        .and_then(|m| m.clone())
        .unwrap_or_else(|| "the command failed (its messages are on stderr)".to_string());
    let kind = if code == ExitCode::from(2) { "usage" } else { "failure" };
    outln!("{}", serde_json::json!({"error": {"kind": kind, "message": message}}));
}

/// The records of `tlc run` and `tlc emit-ir`, printed where they fail.
/// Kinds: `usage` (a bad argument, exit 2), `topology` (a bad topology
/// file, with its `file`, `line` and `key`), `compile` (the kernel has
/// errors: `diagnostics` as `tlc check --format json` gives them), `io` (a
/// file that cannot be written), `exec` (a run-time error of
/// `--functional`). The simulation's own failures are
/// `kernbench_runtime::sim::error_json`'s.
#[derive(Clone, Copy)]
pub(crate) struct Failure {
    pub json: bool,
}

impl Failure {
    /// Prints `record` (the `error` object) with `--format json`; `code`.
    pub(crate) fn record(self, record: serde_json::Value, code: ExitCode) -> ExitCode {
        if self.json {
            outln!("{}", serde_json::json!({ "error": record }));
        }
        code
    }

    /// A bad argument (exit 2).
    pub(crate) fn usage(self, message: &str) -> ExitCode {
        let code = super::usage_error(message);
        self.record(serde_json::json!({"kind": "usage", "message": message}), code)
    }

    /// A failure of `kind` the command cannot go on from (exit 1).
    pub(crate) fn error(self, kind: &str, message: &str) -> ExitCode {
        errln!("error: {message}");
        self.record(serde_json::json!({"kind": kind, "message": message}), ExitCode::from(1))
    }

    /// A topology file that cannot be read (a usage error) or used.
    pub(crate) fn topology(self, code: ExitCode, e: &kernbench_runtime::topology::TopologyError) -> ExitCode {
        let record = serde_json::json!({
            "kind": if e.unreadable { "usage" } else { "topology" },
            "message": e.to_string(),
            "file": e.file,
            "line": e.line,
            "key": e.path,
        });
        self.record(record, code)
    }

    /// A kernel that does not lower.
    pub(crate) fn lower(self, failure: &super::LowerFailure) -> ExitCode {
        use super::LowerFailure;
        let code = failure.report();
        let record = match failure {
            LowerFailure::Diagnostics(diagnostics) => serde_json::json!({
                "kind": "compile",
                "message": "the kernel has errors",
                "diagnostics": diagnostics,
            }),
            LowerFailure::NoKernel(m) => serde_json::json!({"kind": "usage", "message": m}),
            LowerFailure::Other(m) => serde_json::json!({"kind": "compile", "message": m, "diagnostics": []}),
        };
        self.record(record, code)
    }
}
