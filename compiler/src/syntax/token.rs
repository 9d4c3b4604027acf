//! Tokens of `tl`, recognized by logos.
//!
//! Indentation is not handled here: logos produces `Newline` markers and
//! [`super::layout`] turns line starts into `Indent`/`Dedent`, Python-style.

use logos::Logos;
use std::fmt;

#[derive(Logos, Clone, Copy, Debug, PartialEq, Eq)]
#[logos(skip r"[ \t\f\r]+")]
#[logos(skip r"#[^\n]*")]
#[logos(skip r"\\\r?\n")]
pub enum Tok<'s> {
    #[token("def")]
    Def,
    #[token("if")]
    If,
    #[token("elif")]
    Elif,
    #[token("else")]
    Else,
    #[token("for")]
    For,
    #[token("in")]
    In,
    #[token("while")]
    While,
    #[token("break")]
    Break,
    #[token("continue")]
    Continue,
    #[token("return")]
    Return,
    #[token("pass")]
    Pass,
    #[token("and")]
    And,
    #[token("or")]
    Or,
    #[token("not")]
    Not,
    #[token("is")]
    Is,
    #[token("from")]
    From,
    #[token("import")]
    Import,
    #[token("as")]
    As,
    #[token("True")]
    True,
    #[token("False")]
    False,
    #[token("None")]
    None,
    /// Python keywords that `tl` does not support; the parser names them.
    #[regex("class|lambda|with|try|except|finally|raise|global|nonlocal|del|yield|async|await|assert")]
    Reserved(&'s str),

    #[regex("[A-Za-z_][A-Za-z0-9_]*")]
    Ident(&'s str),
    #[regex("[0-9][0-9_]*")]
    #[regex("0[xX][0-9a-fA-F_]*")]
    #[regex("0[bB][01_]*")]
    Int(&'s str),
    #[regex(r"[0-9][0-9_]*\.[0-9_]*([eE][+-]?[0-9_]+)?")]
    #[regex(r"\.[0-9][0-9_]*([eE][+-]?[0-9_]+)?")]
    #[regex(r"[0-9][0-9_]*[eE][+-]?[0-9_]+")]
    Float(&'s str),
    /// A string literal, quotes included (triple-quoted ones may span
    /// lines: docstrings).
    #[regex(r#""([^"\\\n]|\\.)*""#)]
    #[regex(r#""""([^"]|"[^"]|""[^"])*""""#)]
    #[regex(r#"'([^'\\\n]|\\.)*'"#)]
    Str(&'s str),
    /// A string literal whose closing quote is missing on its line.
    #[regex(r#""([^"\\\n]|\\.)*"#)]
    #[regex(r#"'([^'\\\n]|\\.)*"#)]
    UnterminatedStr(&'s str),

    #[token("+")]
    Plus,
    #[token("-")]
    Minus,
    #[token("*")]
    Star,
    #[token("/")]
    Slash,
    #[token("//")]
    DoubleSlash,
    #[token("%")]
    Percent,
    #[token("**")]
    DoubleStar,
    #[token("<<")]
    Shl,
    #[token(">>")]
    Shr,
    #[token("&")]
    Amp,
    #[token("|")]
    Pipe,
    #[token("^")]
    Caret,
    #[token("~")]
    Tilde,
    #[token("<")]
    Lt,
    #[token(">")]
    Gt,
    #[token("<=")]
    Le,
    #[token(">=")]
    Ge,
    #[token("==")]
    EqEq,
    #[token("!=")]
    Ne,
    #[token("=")]
    Eq,
    #[token("+=")]
    PlusEq,
    #[token("-=")]
    MinusEq,
    #[token("*=")]
    StarEq,
    #[token("/=")]
    SlashEq,
    #[token("//=")]
    DoubleSlashEq,
    #[token("%=")]
    PercentEq,
    #[token("**=")]
    DoubleStarEq,
    #[token("&=")]
    AmpEq,
    #[token("|=")]
    PipeEq,
    #[token("^=")]
    CaretEq,
    #[token("<<=")]
    ShlEq,
    #[token(">>=")]
    ShrEq,
    #[token("(")]
    LParen,
    #[token(")")]
    RParen,
    #[token("[")]
    LBracket,
    #[token("]")]
    RBracket,
    #[token("{")]
    LBrace,
    #[token("}")]
    RBrace,
    #[token(",")]
    Comma,
    #[token(":")]
    Colon,
    #[token(";")]
    Semi,
    #[token(".")]
    Dot,
    #[token("@")]
    At,
    #[token("->")]
    Arrow,

    #[token("\n")]
    Newline,
    /// Synthesized by the layout pass: the line is indented deeper.
    Indent,
    /// Synthesized by the layout pass: an indented block ends.
    Dedent,
    /// Synthesized by the layout pass in place of a logical line that is
    /// too long or too deeply nested to check (E0018).
    TooComplex,
}

impl Tok<'_> {
    /// How a syntax error names this token to a Python user.
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("identifier `{s}`"),
            Tok::Int(s) | Tok::Float(s) => format!("number `{s}`"),
            Tok::Str(s) | Tok::UnterminatedStr(s) => format!("string {s}"),
            Tok::Reserved(s) => format!("keyword `{s}`"),
            Tok::Newline => "end of line".to_string(),
            Tok::Indent => "indented block".to_string(),
            Tok::Dedent => "end of indented block".to_string(),
            Tok::TooComplex => "an over-complex line".to_string(),
            other => format!("`{other}`"),
        }
    }
}

impl fmt::Display for Tok<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Tok::Def => "def",
            Tok::If => "if",
            Tok::Elif => "elif",
            Tok::Else => "else",
            Tok::For => "for",
            Tok::In => "in",
            Tok::While => "while",
            Tok::Break => "break",
            Tok::Continue => "continue",
            Tok::Return => "return",
            Tok::Pass => "pass",
            Tok::And => "and",
            Tok::Or => "or",
            Tok::Not => "not",
            Tok::Is => "is",
            Tok::From => "from",
            Tok::Import => "import",
            Tok::As => "as",
            Tok::True => "True",
            Tok::False => "False",
            Tok::None => "None",
            Tok::Reserved(s) | Tok::Ident(s) | Tok::Int(s) | Tok::Float(s) => s,
            Tok::Str(s) | Tok::UnterminatedStr(s) => s,
            Tok::Plus => "+",
            Tok::Minus => "-",
            Tok::Star => "*",
            Tok::Slash => "/",
            Tok::DoubleSlash => "//",
            Tok::Percent => "%",
            Tok::DoubleStar => "**",
            Tok::Shl => "<<",
            Tok::Shr => ">>",
            Tok::Amp => "&",
            Tok::Pipe => "|",
            Tok::Caret => "^",
            Tok::Tilde => "~",
            Tok::Lt => "<",
            Tok::Gt => ">",
            Tok::Le => "<=",
            Tok::Ge => ">=",
            Tok::EqEq => "==",
            Tok::Ne => "!=",
            Tok::Eq => "=",
            Tok::PlusEq => "+=",
            Tok::MinusEq => "-=",
            Tok::StarEq => "*=",
            Tok::SlashEq => "/=",
            Tok::DoubleSlashEq => "//=",
            Tok::PercentEq => "%=",
            Tok::DoubleStarEq => "**=",
            Tok::AmpEq => "&=",
            Tok::PipeEq => "|=",
            Tok::CaretEq => "^=",
            Tok::ShlEq => "<<=",
            Tok::ShrEq => ">>=",
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::LBracket => "[",
            Tok::RBracket => "]",
            Tok::LBrace => "{",
            Tok::RBrace => "}",
            Tok::Comma => ",",
            Tok::Colon => ":",
            Tok::Semi => ";",
            Tok::Dot => ".",
            Tok::At => "@",
            Tok::Arrow => "->",
            Tok::Newline => "\\n",
            Tok::Indent => "<indent>",
            Tok::Dedent => "<dedent>",
            Tok::TooComplex => "<too complex>",
        };
        f.write_str(s)
    }
}
