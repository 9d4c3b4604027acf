//! The abstract syntax tree of one `.tl` file, as the parser builds it.
//!
//! **Invariant:** the AST is syntax only: names are not resolved, types are
//! not known, and every node carries the span of the text it came from.
//! Statements at module level are kept as parsed; the checker decides which
//! of them are items (kernels, helpers, constants, imports).

use crate::span::Span;

#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    pub body: Vec<Stmt>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StmtKind {
    Expr(Expr),
    /// `a = e` or `a, b = e`.
    Assign {
        target: Target,
        value: Expr,
    },
    /// `a += e`.
    AugAssign {
        target: Ident,
        op: BinOp,
        op_span: Span,
        value: Expr,
    },
    /// `NAME: annotation = value` (a module constant or a local constexpr).
    AnnAssign {
        target: Ident,
        annotation: Expr,
        value: Option<Expr>,
    },
    If {
        branches: Vec<(Expr, Vec<Stmt>)>,
        orelse: Option<Vec<Stmt>>,
    },
    /// `for var in iter:` where `iter` is `range(…)` or `tl.static_range(…)`.
    For {
        var: Ident,
        iter: Expr,
        body: Vec<Stmt>,
    },
    While {
        cond: Expr,
        body: Vec<Stmt>,
    },
    Break,
    Continue,
    Pass,
    Return(Option<Expr>),
    Def(FunctionDef),
    /// `from a.b import c, d as e`.
    FromImport {
        module: Vec<Ident>,
        names: Vec<ImportName>,
    },
    /// `import a.b as c`.
    Import {
        module: Vec<Ident>,
        alias: Option<Ident>,
    },
    /// A block indented where no block may start; reported by the parser's
    /// caller unless it directly follows a statement that failed to parse.
    UnexpectedIndent(Vec<Stmt>),
    /// A statement that did not parse; its error is already reported.
    Error,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ImportName {
    pub name: Ident,
    pub alias: Option<Ident>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    Name(Ident),
    Tuple(Vec<Target>, Span),
}

impl Target {
    pub fn span(&self) -> Span {
        match self {
            Target::Name(id) => id.span,
            Target::Tuple(_, span) => *span,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct FunctionDef {
    pub decorators: Vec<Expr>,
    pub name: Ident,
    pub params: Vec<Param>,
    pub returns: Option<Expr>,
    pub body: Vec<Stmt>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: Ident,
    pub annotation: Option<Expr>,
    pub default: Option<Expr>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// An integer literal; `None` when it does not fit in 64 bits (already
    /// reported).
    Int(Option<i64>),
    Float(f64),
    Bool(bool),
    NoneLit,
    Str(String),
    Name(String),
    Tuple(Vec<Expr>),
    List(Vec<Expr>),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `a and b`, `a or b`.
    Logic(LogicOp, Box<Expr>, Box<Expr>),
    /// `a < b`, or a chain `a < b < c` (rejected by the checker, E0014).
    Compare {
        first: Box<Expr>,
        rest: Vec<(CmpOp, Span, Expr)>,
    },
    /// `then if cond else otherwise`.
    IfExp {
        cond: Box<Expr>,
        then: Box<Expr>,
        otherwise: Box<Expr>,
    },
    Call {
        func: Box<Expr>,
        args: Vec<Arg>,
    },
    Attribute {
        value: Box<Expr>,
        attr: Ident,
    },
    Subscript {
        value: Box<Expr>,
        indices: Vec<Index>,
    },
    /// An expression that did not parse; its error is already reported.
    Error,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Arg {
    pub keyword: Option<Ident>,
    pub value: Expr,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Index {
    /// `:` — keep the whole axis.
    Full(Span),
    /// An index expression; `None` (`x[:, None]`) adds an axis.
    Expr(Expr),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Pos,
    Invert,
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    Mod,
    Pow,
    Shl,
    Shr,
    BitAnd,
    BitOr,
    BitXor,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::FloorDiv => "//",
            BinOp::Mod => "%",
            BinOp::Pow => "**",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
            BinOp::BitAnd => "&",
            BinOp::BitOr => "|",
            BinOp::BitXor => "^",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogicOp {
    And,
    Or,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    Is,
    IsNot,
}

impl CmpOp {
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Is => "is",
            CmpOp::IsNot => "is not",
        }
    }
}

impl Expr {
    pub fn new(kind: ExprKind, span: Span) -> Expr {
        Expr { kind, span }
    }

    /// `tl.foo` → `Some(("tl", "foo"))`: the shape of most built-in calls.
    pub fn as_dotted_pair(&self) -> Option<(&str, &str)> {
        match &self.kind {
            ExprKind::Attribute { value, attr } => match &value.kind {
                ExprKind::Name(base) => Some((base.as_str(), attr.name.as_str())),
                _ => None,
            },
            _ => None,
        }
    }
}
