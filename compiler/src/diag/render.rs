//! Rendering diagnostics: rustc-style text through codespan-reporting, or
//! one JSON object per diagnostic (JSON Lines) for editors and scripts.

use super::{Diagnostic, Label, Severity, SourceMap};
use codespan_reporting::diagnostic as cs;
use codespan_reporting::term::{self, termcolor};
use serde_json::json;

/// Whether human output uses ANSI colours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColorMode {
    Always,
    Never,
}

fn to_codespan(d: &Diagnostic) -> cs::Diagnostic<crate::span::FileId> {
    let severity = match d.severity {
        Severity::Error => cs::Severity::Error,
        Severity::Warning => cs::Severity::Warning,
    };
    let mut labels =
        vec![cs::Label::primary(d.primary.loc.file, d.primary.loc.span.range()).with_message(&d.primary.message)];
    labels.extend(
        d.secondary
            .iter()
            .map(|l| cs::Label::secondary(l.loc.file, l.loc.span.range()).with_message(&l.message)),
    );
    let mut notes: Vec<String> = d.notes.iter().map(|n| format!("note: {n}")).collect();
    if let Some(help) = &d.help {
        notes.push(format!("help: {help}"));
    }
    cs::Diagnostic::new(severity)
        .with_code(d.code.as_str())
        .with_message(&d.message)
        .with_labels(labels)
        .with_notes(notes)
}

/// The closing line rustc prints: `error: aborting due to 2 previous
/// errors; 1 warning emitted`, or `warning: 1 warning emitted`; empty when
/// there is nothing to say.
pub fn render_summary(diags: &[Diagnostic]) -> String {
    let errors = diags.iter().filter(|d| d.is_error()).count();
    let warnings = diags.len() - errors;
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    match (errors, warnings) {
        (0, 0) => String::new(),
        (0, w) => format!("warning: {} emitted\n", plural(w, "warning")),
        (e, 0) => format!("error: aborting due to {}\n", plural(e, "previous error")),
        (e, w) => format!(
            "error: aborting due to {}; {} emitted\n",
            plural(e, "previous error"),
            plural(w, "warning")
        ),
    }
}

/// Renders diagnostics the way rustc does.
pub fn render_human(diags: &[Diagnostic], sources: &SourceMap, color: ColorMode) -> String {
    let mut buffer = match color {
        ColorMode::Always => termcolor::Buffer::ansi(),
        ColorMode::Never => termcolor::Buffer::no_color(),
    };
    let config = term::Config::default();
    for d in diags {
        // Every label was made from a span of a file in `sources`; a failure
        // here would be a front-end bug, so fall back to a plain line.
        if term::emit(&mut buffer, &config, sources, &to_codespan(d)).is_err() {
            use std::io::Write;
            let _ = writeln!(
                buffer,
                "{}[{}]: {}",
                severity_word(d.severity),
                d.code.as_str(),
                d.message
            );
        }
    }
    String::from_utf8_lossy(buffer.as_slice()).into_owned()
}

fn severity_word(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
    }
}

fn label_json(l: &Label, sources: &SourceMap, primary: bool) -> serde_json::Value {
    let (line, column) = sources.line_col(l.loc.file, l.loc.span.lo);
    let (end_line, end_column) = sources.line_col(l.loc.file, l.loc.span.hi);
    json!({
        "file": sources.name(l.loc.file),
        "line": line,
        "column": column,
        "end": { "line": end_line, "column": end_column },
        "message": l.message,
        "primary": primary,
    })
}

/// One diagnostic as a JSON object: its code, severity, message, primary
/// place (1-based line and column; `end` exclusive), every label, notes
/// and help.
pub fn diagnostic_json(d: &Diagnostic, sources: &SourceMap) -> serde_json::Value {
    let primary = label_json(&d.primary, sources, true);
    let mut labels = vec![primary.clone()];
    labels.extend(d.secondary.iter().map(|l| label_json(l, sources, false)));
    json!({
        "code": d.code.as_str(),
        "severity": severity_word(d.severity),
        "message": d.message,
        "file": primary["file"],
        "line": primary["line"],
        "column": primary["column"],
        "end": primary["end"],
        "labels": labels,
        "notes": d.notes,
        "help": d.help,
    })
}

/// One JSON object per diagnostic ([`diagnostic_json`]), one per line.
pub fn render_json(diags: &[Diagnostic], sources: &SourceMap) -> String {
    let mut out = String::new();
    for d in diags {
        out.push_str(&diagnostic_json(d, sources).to_string());
        out.push('\n');
    }
    out
}
