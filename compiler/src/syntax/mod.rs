//! Syntax: source text → tokens (logos + the layout pass) → AST (lalrpop).
//!
//! **Architecture invariant:** parsing never fails as a whole: it always
//! returns a [`Module`] (with `Error` nodes where statements did not parse)
//! plus the diagnostics, so the checker can still report what it can.

pub mod ast;
pub mod layout;
pub mod token;

#[allow(clippy::all, unused_parens, unused_imports, dead_code)]
mod grammar {
    include!(concat!(env!("OUT_DIR"), "/syntax/grammar.rs"));
}

use crate::diag::{Code, Diagnostic};
use crate::span::{FileId, Loc, Span};
use ast::{Arg, Expr, ExprKind, Module, Stmt, StmtKind, Target};
use lalrpop_util::{ErrorRecovery, ParseError};
use token::Tok;

/// A problem the grammar's actions find themselves (not a token mismatch).
#[derive(Clone, Debug, PartialEq)]
pub enum SyntaxIssue {}

type Recovery<'s> = ErrorRecovery<u32, Tok<'s>, SyntaxIssue>;

/// What grammar actions write to: recovered parse errors and diagnostics
/// about well-formed but invalid syntax (bad assignment targets, …).
pub struct ParseSink<'s> {
    file: FileId,
    pub(crate) recovered: Vec<Recovery<'s>>,
    pub(crate) diags: Vec<Diagnostic>,
}

impl<'s> ParseSink<'s> {
    fn loc(&self, span: Span) -> Loc {
        Loc::new(self.file, span)
    }

    /// Converts the left side of `=` into an assignment target.
    pub(crate) fn target(&mut self, e: Expr) -> Target {
        match e.kind {
            ExprKind::Name(name) => Target::Name(ast::Ident { name, span: e.span }),
            ExprKind::Tuple(items) | ExprKind::List(items) => {
                Target::Tuple(items.into_iter().map(|i| self.target(i)).collect(), e.span)
            }
            ExprKind::Error => Target::Name(ast::Ident {
                name: "_".into(),
                span: e.span,
            }),
            ref other => {
                let (what, help) = match other {
                    ExprKind::Subscript { .. } => (
                        "a subscript",
                        "blocks are values: write memory with `tl.store(ptr, value)`",
                    ),
                    ExprKind::Attribute { .. } => ("an attribute", "assign to a plain name instead"),
                    ExprKind::Call { .. } => ("a function call", "assign to a plain name instead"),
                    _ => ("this expression", "assign to a plain name or a tuple of names"),
                };
                self.diags.push(
                    Diagnostic::new(
                        Code::E0015,
                        format!("cannot assign to {what}"),
                        self.loc(e.span),
                        "not assignable",
                    )
                    .with_help(help),
                );
                Target::Name(ast::Ident {
                    name: "_".into(),
                    span: e.span,
                })
            }
        }
    }

    /// Converts the left side of `+=` (and the other `op=`) into its one
    /// name; anything else (`a[0] += 1`, a common habit from Python) is
    /// E0015, as for `=`, and gives `None`.
    pub(crate) fn aug_target(&mut self, e: Expr) -> Option<ast::Ident> {
        let span = e.span;
        match e.kind {
            ExprKind::Name(name) => Some(ast::Ident { name, span }),
            ExprKind::Tuple(_) | ExprKind::List(_) => {
                self.diags.push(
                    Diagnostic::new(
                        Code::E0015,
                        "cannot assign to a tuple with an augmented assignment",
                        self.loc(span),
                        "not one name",
                    )
                    .with_help("update each name on its own line"),
                );
                None
            }
            // An error already reported.
            ExprKind::Error => None,
            _ => {
                // What `=` says of it.
                let _ = self.target(e);
                None
            }
        }
    }

    pub(crate) fn check_arg_order(&mut self, args: &[Arg]) {
        let mut keyword_seen: Option<Span> = None;
        for a in args {
            match (&a.keyword, keyword_seen) {
                (Some(_), None) => keyword_seen = Some(a.span),
                (None, Some(kw)) => {
                    self.diags.push(
                        Diagnostic::new(
                            Code::E0016,
                            "positional argument follows keyword argument",
                            self.loc(a.span),
                            "positional argument",
                        )
                        .with_secondary(self.loc(kw), "keyword argument given before it")
                        .with_help("put positional arguments first"),
                    );
                    return;
                }
                _ => {}
            }
        }
    }

    pub(crate) fn int_literal(&mut self, text: &str, span: Span) -> Expr {
        let digits: String = text.chars().filter(|&c| c != '_').collect();
        let parsed = if let Some(hex) = digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
            i64::from_str_radix(hex, 16)
        } else if let Some(bin) = digits.strip_prefix("0b").or_else(|| digits.strip_prefix("0B")) {
            i64::from_str_radix(bin, 2)
        } else {
            digits.parse::<i64>()
        };
        match parsed {
            Ok(v) => Expr::new(ExprKind::Int(Some(v)), span),
            Err(e)
                if matches!(
                    e.kind(),
                    std::num::IntErrorKind::Empty | std::num::IntErrorKind::InvalidDigit
                ) =>
            {
                self.diags.push(
                    Diagnostic::new(
                        Code::E0005,
                        format!("invalid number literal `{text}`"),
                        self.loc(span),
                        "no digits",
                    )
                    .with_help("write digits after the prefix, e.g. `0x1f` or `0b101`"),
                );
                Expr::new(ExprKind::Int(None), span)
            }
            Err(_) => {
                self.diags.push(
                    Diagnostic::new(
                        Code::E0005,
                        format!("integer literal `{text}` is out of range"),
                        self.loc(span),
                        "does not fit in 64 bits",
                    )
                    .with_note("integer constants are 64-bit signed: -2**63 to 2**63 - 1"),
                );
                Expr::new(ExprKind::Int(None), span)
            }
        }
    }

    pub(crate) fn float_literal(&mut self, text: &str, span: Span) -> Expr {
        let digits: String = text.chars().filter(|&c| c != '_').collect();
        match digits.parse::<f64>() {
            Ok(v) if v.is_finite() => Expr::new(ExprKind::Float(v), span),
            _ => {
                self.diags.push(
                    Diagnostic::new(
                        Code::E0005,
                        format!("float literal `{text}` is out of range"),
                        self.loc(span),
                        "overflows to infinity",
                    )
                    .with_help("write `float(\"inf\")` for infinity"),
                );
                Expr::new(ExprKind::Float(f64::INFINITY), span)
            }
        }
    }
}

/// Where a statement list ends (the end of its last statement), so that
/// a compound statement's span does not run on to the next one.
pub(crate) fn end_of(stmts: &[Stmt], fallback: u32) -> u32 {
    stmts.last().map_or(fallback, |s| s.span.hi)
}

/// The text of a string literal without quotes, with escapes resolved.
pub(crate) fn unquote(lit: &str) -> String {
    for q in ["\"\"\"", "'''"] {
        if let Some(inner) = lit.strip_prefix(q) {
            return inner.strip_suffix(q).unwrap_or(inner).to_string();
        }
    }
    let mut chars = lit.chars();
    let quote = chars.next();
    let mut body: String = chars.collect();
    if body.ends_with(quote.unwrap_or('"')) && !body.is_empty() {
        body.pop();
    }
    let mut out = String::with_capacity(body.len());
    let mut it = body.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('0') => out.push('\0'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// Parses one file. Always returns a module; errors are in the diagnostics.
pub fn parse(src: &str, file: FileId) -> (Module, Vec<Diagnostic>) {
    let lexed = layout::lex(src, file);
    let mut diags = lexed.diags;
    let mut sink = ParseSink {
        file,
        recovered: Vec::new(),
        diags: Vec::new(),
    };
    let tokens = lexed.tokens.into_iter().map(Ok::<_, SyntaxIssue>);
    let result = grammar::ModuleParser::new().parse(&mut sink, tokens);
    let mut errors: Vec<ParseError<u32, Tok, SyntaxIssue>> = sink.recovered.drain(..).map(|r| r.error).collect();
    let module = match result {
        Ok(m) => m,
        Err(e) => {
            errors.push(e);
            Module { body: Vec::new() }
        }
    };
    // A line with a lexical error would only add a confusing syntax error.
    let lexical_lines: std::collections::HashSet<u32> = diags
        .iter()
        .filter(|d| d.code != Code::E0012)
        .map(|d| line_of(src, d.primary.loc.span.lo))
        .collect();
    let mut last_line_reported: Option<u32> = None;
    for e in errors {
        let Some(d) = syntax_error(e, src, file, &lexed.recovery_newlines, lexed.unclosed_at_eof) else {
            continue;
        };
        // One syntax error per line: the first is the real one.
        let line = line_of(src, d.primary.loc.span.lo);
        if last_line_reported == Some(line) || lexical_lines.contains(&line) {
            continue;
        }
        last_line_reported = Some(line);
        diags.push(d);
    }
    diags.extend(sink.diags);
    report_unexpected_indents(&module.body, file, &mut diags);
    (module, diags)
}

fn line_of(src: &str, pos: u32) -> u32 {
    src.as_bytes()[..(pos as usize).min(src.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count() as u32
}

/// `UnexpectedIndent` blocks are errors unless they follow a statement that
/// already failed to parse (its body being indented is then no surprise).
fn report_unexpected_indents(body: &[Stmt], file: FileId, diags: &mut Vec<Diagnostic>) {
    let mut prev_was_error = false;
    for s in body {
        match &s.kind {
            StmtKind::UnexpectedIndent(inner) => {
                if !prev_was_error {
                    diags.push(
                        Diagnostic::new(
                            Code::E0013,
                            "unexpected indent",
                            Loc::new(file, Span::new(s.span.lo, s.span.lo)),
                            "this line is indented more than the one before",
                        )
                        .with_help("only the body of `def`, `if`, `for` and `while` is indented"),
                    );
                }
                report_unexpected_indents(inner, file, diags);
            }
            StmtKind::If { branches, orelse } => {
                for (_, b) in branches {
                    report_unexpected_indents(b, file, diags);
                }
                if let Some(b) = orelse {
                    report_unexpected_indents(b, file, diags);
                }
            }
            StmtKind::For { body, .. } | StmtKind::While { body, .. } => report_unexpected_indents(body, file, diags),
            StmtKind::Def(f) => report_unexpected_indents(&f.body, file, diags),
            _ => {}
        }
        prev_was_error = matches!(s.kind, StmtKind::Error);
    }
}

/// What a set of expected terminals means, in a Python user's words.
fn describe_expected(expected: &[String]) -> String {
    let has = |t: &str| expected.iter().any(|e| e == t);
    let strip = |e: &String| e.trim_matches('"').to_string();
    if has("\"INDENT\"") && expected.len() == 1 {
        return "an indented block".into();
    }
    let expression_start = has("\"name\"") && has("\"int\"") && has("\"(\"");
    let mut words: Vec<String> = Vec::new();
    if expression_start {
        words.push("an expression".into());
    }
    // `x += …` may follow any expression that starts a statement (the
    // checker refuses all but a name); listing twelve of them after every
    // expression statement would bury what was likely meant.
    let augmented = [
        "+=", "-=", "*=", "/=", "//=", "%=", "**=", "&=", "|=", "^=", "<<=", ">>=",
    ];
    for e in expected {
        let t = strip(e);
        if augmented.contains(&t.as_str()) {
            continue;
        }
        if expression_start
            && matches!(
                t.as_str(),
                "name"
                    | "int"
                    | "float"
                    | "string"
                    | "unterminated string"
                    | "("
                    | "["
                    | "-"
                    | "+"
                    | "~"
                    | "not"
                    | "True"
                    | "False"
                    | "None"
            )
        {
            continue;
        }
        let w = match t.as_str() {
            "NEWLINE" => "end of line".to_string(),
            "INDENT" => "an indented block".to_string(),
            "DEDENT" => "end of the block".to_string(),
            "name" => "a name".to_string(),
            "int" | "float" => "a number".to_string(),
            "string" | "unterminated string" => "a string".to_string(),
            other => format!("`{other}`"),
        };
        if !words.contains(&w) {
            words.push(w);
        }
    }
    // Binary operators are always possible after an expression; listing all
    // of them buries the useful alternatives.
    let operators = [
        "`+`", "`-`", "`*`", "`/`", "`//`", "`%`", "`**`", "`<<`", "`>>`", "`&`", "`|`", "`^`", "`<`", "`>`", "`<=`",
        "`>=`", "`==`", "`!=`", "`is`", "`and`", "`or`", "`if`", "`.`", "`(`", "`[`",
    ];
    let n_ops = words.iter().filter(|w| operators.contains(&w.as_str())).count();
    if n_ops > 4 {
        words.retain(|w| !operators.contains(&w.as_str()));
        words.push("an operator".into());
    }
    match words.len() {
        0 => "something else".into(),
        1 => words.remove(0),
        n if n <= 6 => {
            let last = words.pop().unwrap_or_default();
            format!("{} or {}", words.join(", "), last)
        }
        _ => {
            words.truncate(5);
            format!("one of {}, …", words.join(", "))
        }
    }
}

fn syntax_error(
    e: ParseError<u32, Tok, SyntaxIssue>,
    src: &str,
    file: FileId,
    recovery_newlines: &[u32],
    unclosed_at_eof: bool,
) -> Option<Diagnostic> {
    match e {
        ParseError::UnrecognizedToken {
            token: (lo, tok, hi),
            expected,
        } => {
            if tok == Tok::Newline && recovery_newlines.contains(&lo) {
                return None;
            }
            if unclosed_at_eof && lo as usize >= src.len() {
                return None;
            }
            let span = Span::new(lo, hi);
            if tok == Tok::TooComplex {
                return None;
            }
            if let Tok::Reserved(kw) = tok {
                return Some(
                    Diagnostic::new(
                        Code::E0017,
                        format!("`{kw}` is not supported in tl"),
                        Loc::new(file, span),
                        "Python keyword without a tl meaning",
                    )
                    .with_note("tl kernels use a subset of Python: see docs/language.md"),
                );
            }
            let wanted = describe_expected(&expected);
            // Newlines, dedents and end-of-file tokens are zero-width or
            // invisible: point at the end of the previous line instead.
            let (span, found) = match tok {
                Tok::Newline | Tok::Dedent => {
                    let at = src[..lo as usize].trim_end().len() as u32;
                    (Span::new(at, at), tok.describe())
                }
                _ => (span, tok.describe()),
            };
            let mut d = Diagnostic::new(
                Code::E0010,
                format!("expected {wanted}, found {found}"),
                Loc::new(file, span),
                format!("expected {wanted}"),
            );
            if wanted.contains("`:`") && tok == Tok::Eq {
                // `if n = 3:`: an assignment where a condition goes.
                d = d.with_help("to compare, use `==`");
            } else if wanted.contains("`:`") && !wanted.contains(',') {
                d = d.with_help("a `def`, `if`, `elif`, `else`, `for` or `while` line ends with `:`");
            } else if tok == Tok::Indent {
                d = d.with_help("indent only the body of a block");
            }
            Some(d)
        }
        ParseError::UnrecognizedEof { location, expected } => {
            if unclosed_at_eof {
                return None;
            }
            let at = src.trim_end().len() as u32;
            let _ = location;
            Some(Diagnostic::new(
                Code::E0011,
                format!("unexpected end of file: expected {}", describe_expected(&expected)),
                Loc::new(file, Span::new(at, at)),
                "file ends here",
            ))
        }
        ParseError::ExtraToken { token: (lo, tok, hi) } => Some(Diagnostic::new(
            Code::E0010,
            format!("unexpected {}", tok.describe()),
            Loc::new(file, Span::new(lo, hi)),
            "not expected here",
        )),
        ParseError::InvalidToken { location } => Some(Diagnostic::new(
            Code::E0001,
            "invalid token",
            Loc::new(file, Span::new(location, location)),
            "here",
        )),
        ParseError::User { error } => match error {},
    }
}
