//! Diagnostics: what the front end reports, the files it reports about, and
//! how reports are rendered (codespan-reporting for people, JSON for editors).
//!
//! **Invariant:** every diagnostic has a code, a primary label on the exact
//! span at fault, and a lowercase message without a trailing period.

mod codes;
mod render;

pub use codes::Code;
pub use render::{diagnostic_json, render_human, render_json, render_summary, ColorMode};

use crate::span::{FileId, Loc, Span};
use codespan_reporting::files::{self, Files, SimpleFile};
use std::ops::Range;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    Error,
    Warning,
}

/// A span with a message, inside one file.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Label {
    pub loc: Loc,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Diagnostic {
    pub severity: Severity,
    pub code: Code,
    pub message: String,
    /// Where the mistake is.
    pub primary: Label,
    /// Where the other half of the mistake came from.
    pub secondary: Vec<Label>,
    pub notes: Vec<String>,
    /// How to fix it, when a fix is likely.
    pub help: Option<String>,
}

impl Diagnostic {
    /// An error (or, for `W…` codes, a warning) with its primary label.
    pub fn new(code: Code, message: impl Into<String>, loc: Loc, label: impl Into<String>) -> Self {
        Diagnostic {
            severity: if code.is_warning() {
                Severity::Warning
            } else {
                Severity::Error
            },
            code,
            message: message.into(),
            primary: Label {
                loc,
                message: label.into(),
            },
            secondary: Vec::new(),
            notes: Vec::new(),
            help: None,
        }
    }

    pub fn with_secondary(mut self, loc: Loc, message: impl Into<String>) -> Self {
        self.secondary.push(Label {
            loc,
            message: message.into(),
        });
        self
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// A collection of diagnostics that drops exact repeats (a helper checked at
/// several call sites reports its own mistakes once).
#[derive(Default, Debug)]
pub struct Diagnostics {
    list: Vec<Diagnostic>,
    seen: std::collections::HashSet<(Code, Loc, String)>,
}

impl Diagnostics {
    pub fn push(&mut self, d: Diagnostic) {
        if self.seen.insert((d.code, d.primary.loc, d.message.clone())) {
            self.list.push(d);
        }
    }

    pub fn extend(&mut self, ds: impl IntoIterator<Item = Diagnostic>) {
        for d in ds {
            self.push(d);
        }
    }

    pub fn has_errors(&self) -> bool {
        self.list.iter().any(Diagnostic::is_error)
    }

    pub fn error_count(&self) -> usize {
        self.list.iter().filter(|d| d.is_error()).count()
    }

    pub fn warning_count(&self) -> usize {
        self.list.len() - self.error_count()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The diagnostics in source order (file, then position), the order a
    /// reader fixes them in.
    pub fn into_sorted(mut self) -> Vec<Diagnostic> {
        self.list
            .sort_by_key(|d| (d.primary.loc.file, d.primary.loc.span.lo, d.primary.loc.span.hi));
        self.list
    }

    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.list.iter()
    }
}

/// Checks what every diagnostic must satisfy to be rendered: each label
/// lies inside its file and on character boundaries, and the message is
/// not empty. The fuzzers (`fuzz/`, `tests/fuzz_frontend.rs`) hold the
/// front end to it on arbitrary input; `Err` names the first violation.
pub fn check_locations(diagnostics: &[Diagnostic], sources: &SourceMap) -> Result<(), String> {
    for d in diagnostics {
        if d.message.is_empty() {
            return Err(format!("{}: empty message", d.code.as_str()));
        }
        for label in std::iter::once(&d.primary).chain(&d.secondary) {
            let Some(file) = sources.files.get(label.loc.file.0 as usize) else {
                return Err(format!(
                    "{}: label in unknown file {}",
                    d.code.as_str(),
                    label.loc.file.0
                ));
            };
            let text = file.source();
            let (lo, hi) = (label.loc.span.lo as usize, label.loc.span.hi as usize);
            if lo > hi || hi > text.len() {
                return Err(format!(
                    "{}: span {lo}..{hi} outside a file of {} bytes",
                    d.code.as_str(),
                    text.len()
                ));
            }
            if !text.is_char_boundary(lo) || !text.is_char_boundary(hi) {
                return Err(format!(
                    "{}: span {lo}..{hi} not on character boundaries",
                    d.code.as_str()
                ));
            }
        }
    }
    Ok(())
}

/// The source files a run has read, by [`FileId`].
#[derive(Default)]
pub struct SourceMap {
    files: Vec<SimpleFile<String, String>>,
}

impl SourceMap {
    pub fn new() -> Self {
        SourceMap::default()
    }

    /// Adds a file and returns its id. `name` is how diagnostics print it.
    pub fn add(&mut self, name: impl Into<String>, source: impl Into<String>) -> FileId {
        let id = FileId(self.files.len() as u32);
        self.files.push(SimpleFile::new(name.into(), source.into()));
        id
    }

    pub fn name(&self, file: FileId) -> &str {
        self.files[file.0 as usize].name()
    }

    pub fn source(&self, file: FileId) -> &str {
        self.files[file.0 as usize].source()
    }

    /// 1-based (line, column) of a byte offset; columns count characters.
    pub fn line_col(&self, file: FileId, byte: u32) -> (usize, usize) {
        match self.location(file, byte as usize) {
            Ok(loc) => (loc.line_number, loc.column_number),
            Err(_) => (1, 1),
        }
    }

    /// Where `loc` starts, as `file:line:col` with the file as
    /// diagnostics name it.
    pub fn at(&self, loc: Loc) -> String {
        let (line, col) = self.line_col(loc.file, loc.span.lo);
        format!("{}:{line}:{col}", self.name(loc.file))
    }

    /// [`Self::at`] with the file by its own name, without its folders
    /// (short, for IR listings and trace slices; two files of one name
    /// are told apart only by the long form).
    pub fn at_short(&self, loc: Loc) -> String {
        let (line, col) = self.line_col(loc.file, loc.span.lo);
        let name = self.name(loc.file);
        format!("{}:{line}:{col}", name.rsplit('/').next().unwrap_or(name))
    }

    /// The text a span covers.
    pub fn snippet(&self, file: FileId, span: Span) -> &str {
        self.source(file).get(span.range()).unwrap_or("")
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    fn get(&self, id: FileId) -> Result<&SimpleFile<String, String>, files::Error> {
        self.files.get(id.0 as usize).ok_or(files::Error::FileMissing)
    }
}

impl<'a> Files<'a> for SourceMap {
    type FileId = FileId;
    type Name = &'a str;
    type Source = &'a str;

    fn name(&'a self, id: FileId) -> Result<&'a str, files::Error> {
        Ok(self.get(id)?.name().as_str())
    }

    fn source(&'a self, id: FileId) -> Result<&'a str, files::Error> {
        Ok(self.get(id)?.source().as_str())
    }

    fn line_index(&'a self, id: FileId, byte_index: usize) -> Result<usize, files::Error> {
        self.get(id)?.line_index((), byte_index)
    }

    fn line_range(&'a self, id: FileId, line_index: usize) -> Result<Range<usize>, files::Error> {
        self.get(id)?.line_range((), line_index)
    }
}
