//! The layout pass: turns logos' flat token stream into Python's logical
//! lines, adding `Newline`, `Indent` and `Dedent` and reporting lexical
//! errors (which do not stop lexing).
//!
//! Rules (Python's): inside `()`/`[]`/`{}` newlines are ignored, so an
//! expression continues across lines; blank and comment-only lines do not
//! count; an indented line opens a block; a dedent must return to an
//! enclosing level. Tabs in indentation are an error (E0002).

use super::token::Tok;
use crate::diag::{Code, Diagnostic};
use crate::span::{FileId, Loc, Span};
use logos::Logos;

pub type Spanned<'s> = (u32, Tok<'s>, u32);

/// A logical line with more tokens than this, or brackets nested deeper,
/// is replaced by one `TooComplex` token (E0018): the tree it would build
/// is too deep for the checker's recursive walks.
const MAX_LINE_TOKENS: usize = 4000;
const MAX_BRACKET_DEPTH: usize = 200;

pub struct Lexed<'s> {
    pub tokens: Vec<Spanned<'s>>,
    pub diags: Vec<Diagnostic>,
    /// Positions of `Newline` tokens the layout pass invented to recover
    /// from an unclosed bracket; parse errors there would only repeat E0012.
    pub recovery_newlines: Vec<u32>,
    /// An unclosed bracket was reported at end of file.
    pub unclosed_at_eof: bool,
}

/// Keywords that can only start a statement: seeing one on a new line
/// while a bracket is open means the bracket was never closed.
fn starts_statement_only(t: &Tok) -> bool {
    matches!(
        t,
        Tok::Def
            | Tok::For
            | Tok::While
            | Tok::Return
            | Tok::Elif
            | Tok::Pass
            | Tok::Break
            | Tok::Continue
            | Tok::From
            | Tok::Import
            | Tok::At
    )
}

struct Layout<'s> {
    src: &'s str,
    file: FileId,
    out: Lexed<'s>,
    indents: Vec<u32>,
    open: Vec<(Tok<'s>, Span)>,
    at_line_start: bool,
    /// Tokens emitted on the current logical line.
    line_tokens: usize,
    /// Skipping the rest of an over-complex line.
    skipping: bool,
}

pub fn lex(src: &str, file: FileId) -> Lexed<'_> {
    let mut l = Layout {
        src,
        file,
        out: Lexed {
            tokens: Vec::new(),
            diags: Vec::new(),
            recovery_newlines: Vec::new(),
            unclosed_at_eof: false,
        },
        indents: vec![0],
        open: Vec::new(),
        at_line_start: true,
        line_tokens: 0,
        skipping: false,
    };
    // A UTF-8 byte-order mark is not part of the program (Python skips it).
    let bom = if src.starts_with('\u{feff}') {
        '\u{feff}'.len_utf8()
    } else {
        0
    };
    let mut lexer = Tok::lexer(&src[bom..]);
    let mut bad: Option<Span> = None;
    while let Some(result) = lexer.next() {
        let r = lexer.span();
        let span = Span::new((r.start + bom) as u32, (r.end + bom) as u32);
        match result {
            Ok(tok) => {
                if let Some(b) = bad.take() {
                    l.invalid_chars(b);
                }
                l.token(tok, span);
            }
            Err(()) => {
                // Merge a run of invalid characters into one diagnostic.
                bad = Some(match bad {
                    Some(b) if b.hi == span.lo => b.to(span),
                    Some(b) => {
                        l.invalid_chars(b);
                        span
                    }
                    None => span,
                });
            }
        }
    }
    if let Some(b) = bad.take() {
        l.invalid_chars(b);
    }
    l.finish();
    l.out
}

impl<'s> Layout<'s> {
    fn loc(&self, span: Span) -> Loc {
        Loc::new(self.file, span)
    }

    fn push(&mut self, tok: Tok<'s>, span: Span) {
        self.out.tokens.push((span.lo, tok, span.hi));
    }

    fn invalid_chars(&mut self, span: Span) {
        let text = &self.src[span.range()];
        let what = if text.chars().count() == 1 {
            "character"
        } else {
            "characters"
        };
        let mut d = Diagnostic::new(
            Code::E0001,
            format!("invalid {what} `{}` in source", text.escape_debug()),
            self.loc(span),
            "not valid here",
        );
        if text == "$" || text == "?" || text == "!" {
            d = d.with_help(format!("`{text}` is not an operator in tl"));
        }
        self.out.diags.push(d);
    }

    fn token(&mut self, tok: Tok<'s>, span: Span) {
        if self.skipping {
            if tok != Tok::Newline {
                return;
            }
            self.skipping = false;
            self.open.clear();
        }
        if tok == Tok::Newline {
            if self.open.is_empty() && !self.at_line_start {
                self.push(Tok::Newline, span);
                self.at_line_start = true;
                self.line_tokens = 0;
            }
            return;
        }
        self.line_tokens += 1;
        if self.line_tokens > MAX_LINE_TOKENS || self.open.len() >= MAX_BRACKET_DEPTH {
            let why = if self.open.len() >= MAX_BRACKET_DEPTH {
                format!("brackets nested more than {MAX_BRACKET_DEPTH} deep")
            } else {
                format!("more than {MAX_LINE_TOKENS} tokens in one statement")
            };
            self.out.diags.push(
                Diagnostic::new(
                    Code::E0018,
                    format!("statement too complex to check: {why}"),
                    self.loc(span),
                    "the limit is reached here",
                )
                .with_help("split it into several statements with intermediate variables"),
            );
            self.push(Tok::TooComplex, span);
            self.skipping = true;
            return;
        }
        if !self.open.is_empty() && self.first_on_line(span.lo) && self.looks_like_new_statement(&tok, span) {
            self.close_all_open(span.lo);
        }
        if self.at_line_start && self.open.is_empty() {
            self.indentation(span);
        }
        self.at_line_start = false;
        match tok {
            Tok::LParen | Tok::LBracket | Tok::LBrace => self.open.push((tok, span)),
            Tok::RParen | Tok::RBracket | Tok::RBrace => {
                self.open.pop();
            }
            Tok::UnterminatedStr(_) => {
                self.out.diags.push(
                    Diagnostic::new(
                        Code::E0004,
                        "unterminated string literal",
                        self.loc(span),
                        "this string never ends",
                    )
                    .with_help("close it with a matching quote on the same line"),
                );
                // The string swallowed the rest of the line, closing
                // brackets included: do not report them as unclosed too.
                self.open.clear();
            }
            _ => {}
        }
        self.push(tok, span);
    }

    fn line_start(&self, pos: u32) -> u32 {
        self.src[..pos as usize].rfind('\n').map_or(0, |i| i as u32 + 1)
    }

    fn indent_width(&self, pos: u32) -> usize {
        let start = self.line_start(pos) as usize;
        self.src[start..]
            .chars()
            .take_while(|c| *c == ' ' || *c == '\t')
            .count()
    }

    /// Inside an open bracket, a line that starts a statement cannot be a
    /// continuation: either it begins with a statement keyword, or it is
    /// indented no deeper than the line that opened the bracket (and does
    /// not close it).
    fn looks_like_new_statement(&self, tok: &Tok, span: Span) -> bool {
        if starts_statement_only(tok) {
            return true;
        }
        if matches!(tok, Tok::RParen | Tok::RBracket | Tok::RBrace) {
            return false;
        }
        let opener = self.open.first().map_or(0, |(_, s)| s.lo);
        self.line_start(opener) != self.line_start(span.lo) && self.indent_width(span.lo) <= self.indent_width(opener)
    }

    fn first_on_line(&self, pos: u32) -> bool {
        self.src[self.line_start(pos) as usize..pos as usize]
            .chars()
            .all(|c| c == ' ' || c == '\t' || c == '\x0c')
    }

    /// Reports every open bracket as unclosed and resumes at `pos` as if a
    /// new logical line started there.
    fn close_all_open(&mut self, pos: u32) {
        if let Some((tok, span)) = self.open.first().copied() {
            self.out.diags.push(
                Diagnostic::new(
                    Code::E0012,
                    format!("this `{tok}` is never closed"),
                    self.loc(span),
                    "unclosed delimiter",
                )
                .with_help(format!("add the matching `{}`", closer(tok))),
            );
        }
        self.open.clear();
        self.out.recovery_newlines.push(pos);
        self.push(Tok::Newline, Span::new(pos, pos));
        self.at_line_start = true;
    }

    /// Emits `Indent`/`Dedent` for the first token of a logical line.
    fn indentation(&mut self, tok_span: Span) {
        let start = self.line_start(tok_span.lo);
        let ws = &self.src[start as usize..tok_span.lo as usize];
        if !self.first_on_line(tok_span.lo) {
            // The line began with a continuation (`\`); no layout change.
            return;
        }
        let mut width = 0u32;
        for (i, c) in ws.char_indices() {
            if c == '\t' {
                let at = start + i as u32;
                self.out.diags.push(
                    Diagnostic::new(
                        Code::E0002,
                        "tab character in indentation",
                        self.loc(Span::new(at, at + 1)),
                        "tab here",
                    )
                    .with_help("indent with spaces (4 per level is the convention)"),
                );
                // Keep the current level: guessing a width would only add
                // indentation errors on top of this one.
                return;
            }
            width += 1;
        }
        let current = *self.indents.last().unwrap_or(&0);
        let at = Span::new(tok_span.lo, tok_span.lo);
        if width > current {
            self.indents.push(width);
            self.push(Tok::Indent, at);
        } else if width < current {
            while self.indents.len() > 1 && *self.indents.last().unwrap_or(&0) > width {
                self.indents.pop();
                self.push(Tok::Dedent, at);
            }
            let level = *self.indents.last().unwrap_or(&0);
            if level != width {
                self.out.diags.push(
                    Diagnostic::new(
                        Code::E0003,
                        "unindent does not match any outer indentation level",
                        self.loc(Span::new(start, tok_span.lo.max(start + 1).min(tok_span.hi))),
                        format!("indented by {width} column{}", if width == 1 { "" } else { "s" }),
                    )
                    .with_help(format!("line this up with an enclosing block (column {})", level + 1)),
                );
                // Treat the line as part of the enclosing block.
            }
        }
    }

    fn finish(&mut self) {
        let end = self.src.len() as u32;
        if let Some((tok, span)) = self.open.first().copied() {
            self.out.diags.push(
                Diagnostic::new(
                    Code::E0012,
                    format!("this `{tok}` is never closed"),
                    self.loc(span),
                    "unclosed delimiter",
                )
                .with_help(format!("add the matching `{}`", closer(tok))),
            );
            self.out.unclosed_at_eof = true;
        }
        if !self.at_line_start {
            self.push(Tok::Newline, Span::new(end, end));
        }
        while self.indents.len() > 1 {
            self.indents.pop();
            self.push(Tok::Dedent, Span::new(end, end));
        }
    }
}

fn closer(open: Tok) -> &'static str {
    match open {
        Tok::LParen => ")",
        Tok::LBracket => "]",
        _ => "}",
    }
}
