//! Syntactic checks that need no types: unused variables and imports,
//! unreachable code, and where a helper may `return`.
//!
//! They run on the AST, not during type checking, so a branch pruned by a
//! compile-time `if` still counts as reading the names it mentions.

use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::span::{FileId, Loc, Span};
use crate::syntax::ast::{Arg, Expr, ExprKind, FunctionDef, Index, Module, Stmt, StmtKind, Target};
use std::collections::{BTreeMap, HashSet};

/// Calls `visit` on every expression node under `e`, outermost first.
pub fn walk_expr<'a>(e: &'a Expr, visit: &mut dyn FnMut(&'a Expr)) {
    visit(e);
    match &e.kind {
        ExprKind::Tuple(items) | ExprKind::List(items) => items.iter().for_each(|i| walk_expr(i, visit)),
        ExprKind::Unary(_, a) => walk_expr(a, visit),
        ExprKind::Binary(_, a, b) | ExprKind::Logic(_, a, b) => {
            walk_expr(a, visit);
            walk_expr(b, visit);
        }
        ExprKind::Compare { first, rest } => {
            walk_expr(first, visit);
            rest.iter().for_each(|(_, _, e)| walk_expr(e, visit));
        }
        ExprKind::IfExp { cond, then, otherwise } => {
            walk_expr(cond, visit);
            walk_expr(then, visit);
            walk_expr(otherwise, visit);
        }
        ExprKind::Call { func, args } => {
            walk_expr(func, visit);
            args.iter().for_each(|Arg { value, .. }| walk_expr(value, visit));
        }
        ExprKind::Attribute { value, .. } => walk_expr(value, visit),
        ExprKind::Subscript { value, indices } => {
            walk_expr(value, visit);
            for i in indices {
                if let Index::Expr(e) = i {
                    walk_expr(e, visit);
                }
            }
        }
        ExprKind::Int(_)
        | ExprKind::Float(_)
        | ExprKind::Bool(_)
        | ExprKind::NoneLit
        | ExprKind::Str(_)
        | ExprKind::Name(_)
        | ExprKind::Error => {}
    }
}

/// Calls `visit` on every statement under `stmts` (nested bodies included)
/// and `visit_expr` on every expression they contain.
fn walk_stmts<'a>(stmts: &'a [Stmt], visit: &mut dyn FnMut(&'a Stmt), visit_expr: &mut dyn FnMut(&'a Expr)) {
    for s in stmts {
        visit(s);
        match &s.kind {
            StmtKind::Expr(e) => walk_expr(e, visit_expr),
            StmtKind::Assign { value, .. } | StmtKind::AugAssign { value, .. } => walk_expr(value, visit_expr),
            StmtKind::AnnAssign { annotation, value, .. } => {
                walk_expr(annotation, visit_expr);
                if let Some(v) = value {
                    walk_expr(v, visit_expr);
                }
            }
            StmtKind::If { branches, orelse } => {
                for (c, b) in branches {
                    walk_expr(c, visit_expr);
                    walk_stmts(b, visit, visit_expr);
                }
                if let Some(b) = orelse {
                    walk_stmts(b, visit, visit_expr);
                }
            }
            StmtKind::For { iter, body, .. } => {
                walk_expr(iter, visit_expr);
                walk_stmts(body, visit, visit_expr);
            }
            StmtKind::While { cond, body } => {
                walk_expr(cond, visit_expr);
                walk_stmts(body, visit, visit_expr);
            }
            StmtKind::Return(Some(e)) => walk_expr(e, visit_expr),
            StmtKind::Def(def) => {
                for d in &def.decorators {
                    walk_expr(d, visit_expr);
                }
                for p in &def.params {
                    if let Some(a) = &p.annotation {
                        walk_expr(a, visit_expr);
                    }
                    if let Some(d) = &p.default {
                        walk_expr(d, visit_expr);
                    }
                }
                if let Some(r) = &def.returns {
                    walk_expr(r, visit_expr);
                }
                walk_stmts(&def.body, visit, visit_expr);
            }
            StmtKind::UnexpectedIndent(body) => walk_stmts(body, visit, visit_expr),
            _ => {}
        }
    }
}

fn target_names<'a>(t: &'a Target, out: &mut Vec<(&'a str, Span)>) {
    match t {
        Target::Name(id) => out.push((&id.name, id.span)),
        Target::Tuple(items, _) => items.iter().for_each(|i| target_names(i, out)),
    }
}

/// Every name a statement list assigns, at any depth.
pub fn assigned_names(stmts: &[Stmt], out: &mut HashSet<String>) {
    walk_stmts(
        stmts,
        &mut |s| {
            let mut names = Vec::new();
            match &s.kind {
                StmtKind::Assign { target, .. } => target_names(target, &mut names),
                StmtKind::AugAssign { target, .. }
                | StmtKind::AnnAssign { target, .. }
                | StmtKind::For { var: target, .. } => names.push((&target.name, target.span)),
                _ => {}
            }
            out.extend(names.into_iter().map(|(n, _)| n.to_string()));
        },
        &mut |_| {},
    );
}

/// Whether a statement list contains a statement or expression that did
/// not parse.
pub fn has_syntax_error(stmts: &[Stmt]) -> bool {
    let mut bad_stmt = false;
    let mut bad_expr = false;
    walk_stmts(
        stmts,
        &mut |s| bad_stmt |= matches!(s.kind, StmtKind::Error),
        &mut |e| bad_expr |= matches!(e.kind, ExprKind::Error),
    );
    bad_stmt || bad_expr
}

/// W0002: names a module imports and never mentions.
pub fn module_lints(module: &Module, file: FileId, diags: &mut Diagnostics) {
    let mut imported: Vec<(&str, Span)> = Vec::new();
    for s in &module.body {
        match &s.kind {
            StmtKind::FromImport { names, .. } => {
                for n in names {
                    let b = n.alias.as_ref().unwrap_or(&n.name);
                    imported.push((&b.name, b.span));
                }
            }
            StmtKind::Import { module: path, alias } => {
                let b = alias.as_ref().or(path.first());
                if let Some(b) = b {
                    imported.push((&b.name, b.span));
                }
            }
            _ => {}
        }
    }
    if imported.is_empty() {
        return;
    }
    let mut used: HashSet<&str> = HashSet::new();
    walk_stmts(&module.body, &mut |_| {}, &mut |e| {
        if let ExprKind::Name(n) = &e.kind {
            used.insert(n);
        }
    });
    for (name, span) in imported {
        if !used.contains(name) && !name.starts_with('_') {
            diags.push(
                Diagnostic::new(
                    Code::W0002,
                    format!("unused import `{name}`"),
                    Loc::new(file, span),
                    "imported but never used",
                )
                .with_help("remove it"),
            );
        }
    }
}

/// W0001, W0004 and E0210 for one function.
pub fn function_lints(def: &FunctionDef, file: FileId, is_kernel: bool, diags: &mut Diagnostics) {
    unreachable(&def.body, file, diags);
    if !is_kernel {
        helper_returns(&def.body, true, file, diags);
    }
    if has_syntax_error(&def.body) {
        // The statement that did not parse may read any variable.
        return;
    }
    // Unused variables: assigned somewhere, read nowhere.
    let mut assigned: BTreeMap<&str, Span> = BTreeMap::new();
    let mut aug_read: Vec<&str> = Vec::new();
    let mut read: HashSet<&str> = HashSet::new();
    walk_stmts(
        &def.body,
        &mut |s| {
            let mut names = Vec::new();
            match &s.kind {
                StmtKind::Assign { target, .. } => target_names(target, &mut names),
                StmtKind::AnnAssign { target, .. } | StmtKind::For { var: target, .. } => {
                    names.push((&target.name, target.span))
                }
                StmtKind::AugAssign { target, .. } => aug_read.push(&target.name),
                _ => {}
            }
            for (n, sp) in names {
                assigned.entry(n).or_insert(sp);
            }
        },
        &mut |e| {
            if let ExprKind::Name(n) = &e.kind {
                read.insert(n);
            }
        },
    );
    read.extend(aug_read);
    for (name, span) in assigned {
        if !read.contains(name) && !name.starts_with('_') {
            diags.push(
                Diagnostic::new(
                    Code::W0001,
                    format!("unused variable `{name}`"),
                    Loc::new(file, span),
                    "assigned here but never read",
                )
                .with_help(format!(
                    "if this is intentional, prefix it with an underscore: `_{name}`"
                )),
            );
        }
    }
}

/// W0004: statements after `break`, `continue` or `return` in one block.
fn unreachable(stmts: &[Stmt], file: FileId, diags: &mut Diagnostics) {
    let mut after: Option<Span> = None;
    for s in stmts {
        if let Some(end) = after {
            diags.push(
                Diagnostic::new(
                    Code::W0004,
                    "unreachable statement",
                    Loc::new(file, s.span),
                    "never runs",
                )
                .with_secondary(Loc::new(file, end), "any code after this is unreachable"),
            );
            break;
        }
        match &s.kind {
            StmtKind::Break | StmtKind::Continue | StmtKind::Return(_) => after = Some(s.span),
            StmtKind::If { branches, orelse } => {
                branches.iter().for_each(|(_, b)| unreachable(b, file, diags));
                if let Some(b) = orelse {
                    unreachable(b, file, diags);
                }
            }
            StmtKind::For { body, .. } | StmtKind::While { body, .. } => unreachable(body, file, diags),
            _ => {}
        }
    }
}

/// E0210: a helper returns only as its last top-level statement (helpers are
/// inlined; an early exit would need control flow the IR does not have).
fn helper_returns(stmts: &[Stmt], top: bool, file: FileId, diags: &mut Diagnostics) {
    for (i, s) in stmts.iter().enumerate() {
        let last = top && i + 1 == stmts.len();
        match &s.kind {
            StmtKind::Return(_) if !last => diags.push(
                Diagnostic::new(
                    Code::E0210,
                    "a helper can only `return` as its last statement",
                    Loc::new(file, s.span),
                    "early return",
                )
                .with_help("compute the result in a variable (`tl.where` or `if`/`else`) and return it at the end"),
            ),
            StmtKind::If { branches, orelse } => {
                branches.iter().for_each(|(_, b)| helper_returns(b, false, file, diags));
                if let Some(b) = orelse {
                    helper_returns(b, false, file, diags);
                }
            }
            StmtKind::For { body, .. } | StmtKind::While { body, .. } => helper_returns(body, false, file, diags),
            _ => {}
        }
    }
}
