//! Loading modules: parsing a file, collecting its items (kernels,
//! helpers, constants, imports), resolving `from … import …` against the
//! importing file's folder and the stdlib root, and detecting import cycles.

use super::check::{duplicate, Checker, Frame, FuncDef};
use super::types::{FuncId, Konst, ModId, Namespace};
use crate::diag::{Code, Diagnostic};
use crate::span::{FileId, Loc, Span};
use crate::syntax::{self, ast};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FuncKind {
    Kernel,
    Helper,
}

#[derive(Clone, Debug)]
pub struct FuncData {
    pub module: ModId,
    pub def: FuncDef,
    pub kind: FuncKind,
    /// Some statement of the body did not parse.
    pub has_syntax_errors: bool,
}

/// What a module-level name refers to.
#[derive(Clone, Debug)]
pub enum ItemKind {
    Func(FuncId),
    /// A module constant; `None` when its value could not be computed
    /// (already reported).
    Const(Option<Konst>),
    Namespace(Namespace),
    /// An import that failed (already reported): uses stay silent.
    Broken,
}

#[derive(Clone, Debug)]
pub struct Item {
    pub kind: ItemKind,
    /// Where the name is defined (or imported).
    pub span: Span,
}

pub struct ModuleData {
    pub file: FileId,
    /// The folder relative imports are resolved in.
    pub dir: Option<PathBuf>,
    pub names: BTreeMap<String, Item>,
    pub funcs: Vec<FuncId>,
    /// Still being loaded (an import reaching it again is a cycle).
    pub loading: bool,
}

impl Checker {
    pub fn add_root(&mut self, name: &str, path: Option<PathBuf>, source: String) {
        let canonical = path.as_ref().and_then(|p| p.canonicalize().ok());
        if let Some(m) = canonical.as_ref().and_then(|c| self.by_path.get(c)).copied() {
            if !self.roots.contains(&m) {
                self.roots.push(m);
            }
            return;
        }
        let dir = path.as_ref().and_then(|p| p.parent().map(Path::to_path_buf));
        let m = self.load_module(name, dir, canonical, source);
        self.roots.push(m);
    }

    fn load_module(&mut self, name: &str, dir: Option<PathBuf>, canonical: Option<PathBuf>, source: String) -> ModId {
        let file = self.sources.add(name, source);
        let id = ModId(self.modules.len() as u32);
        if let Some(c) = canonical {
            self.by_path.insert(c, id);
        }
        self.modules.push(ModuleData {
            file,
            dir,
            names: BTreeMap::new(),
            funcs: Vec::new(),
            loading: true,
        });
        if self.sources.source(file).len() > u32::MAX as usize / 2 {
            self.diags.push(Diagnostic::new(
                Code::E0005,
                "source file is too large (over 2 GiB)",
                Loc::new(file, Span::new(0, 0)),
                "here",
            ));
            self.modules[id.0 as usize].loading = false;
            return id;
        }
        let src = self.sources.source(file).to_string();
        let (module, diags) = syntax::parse(&src, file);
        self.diags.extend(diags);
        super::lints::module_lints(&module, file, &mut self.diags);
        self.collect_items(id, module);
        self.modules[id.0 as usize].loading = false;
        id
    }

    fn define(&mut self, m: ModId, name: &ast::Ident, kind: ItemKind, what: &str) {
        let file = self.modules[m.0 as usize].file;
        if let Some(prev) = self.modules[m.0 as usize].names.get(&name.name) {
            let d = duplicate(Loc::new(file, prev.span), Loc::new(file, name.span), what, &name.name);
            self.diags.push(d);
            return;
        }
        self.modules[m.0 as usize]
            .names
            .insert(name.name.clone(), Item { kind, span: name.span });
    }

    fn collect_items(&mut self, m: ModId, module: ast::Module) {
        let file = self.modules[m.0 as usize].file;
        for stmt in module.body {
            match stmt.kind {
                ast::StmtKind::Def(def) => self.collect_function(m, def),
                ast::StmtKind::AnnAssign {
                    target,
                    annotation,
                    value,
                } => {
                    let mut f = Frame::new(m, None, false);
                    let is_constexpr = matches!(self.annotation(&mut f, &annotation), super::check::Annot::Constexpr);
                    let value_k = match (&value, is_constexpr) {
                        (Some(v), true) => {
                            let val = self.expr(&mut f, v);
                            if val.konst.is_none() && !val.ty.is_unknown() {
                                self.error(
                                    &f,
                                    Code::E0209,
                                    format!("module constant `{}` must be a compile-time constant", target.name),
                                    v.span,
                                    "known only at run time",
                                );
                            }
                            val.konst
                        }
                        (None, _) => {
                            self.error(
                                &f,
                                Code::E0107,
                                "a module constant needs a value",
                                stmt.span,
                                "no `= value`",
                            );
                            None
                        }
                        (Some(_), false) => {
                            let d = Diagnostic::new(
                                Code::E0107,
                                "module-level variables must be constexpr",
                                Loc::new(file, annotation.span),
                                "not `constexpr`",
                            )
                            .with_help(format!("write `{}: constexpr = …`", target.name));
                            self.diags.push(d);
                            None
                        }
                    };
                    self.define(m, &target, ItemKind::Const(value_k), "constant");
                }
                ast::StmtKind::Assign {
                    target: ast::Target::Name(id),
                    ..
                } => {
                    let d = Diagnostic::new(
                        Code::E0107,
                        "module-level variables must be declared constexpr",
                        Loc::new(file, id.span),
                        "plain assignment at module level",
                    )
                    .with_help(format!("write `{}: constexpr = …`", id.name));
                    self.diags.push(d);
                    self.define(m, &id, ItemKind::Broken, "constant");
                }
                ast::StmtKind::FromImport { module: path, names } => self.import_from(m, &path, &names, stmt.span),
                ast::StmtKind::Import { module: path, alias } => self.import(m, &path, alias.as_ref(), stmt.span),
                ast::StmtKind::Error => {}
                ast::StmtKind::UnexpectedIndent(_) => {}
                _ => {
                    let d = Diagnostic::new(
                        Code::E0107,
                        "statements are not allowed at module level",
                        Loc::new(file, stmt.span),
                        "module-level statement",
                    )
                    .with_help("put it inside a `@kernel` function");
                    self.diags.push(d);
                }
            }
        }
    }

    fn collect_function(&mut self, m: ModId, def: ast::FunctionDef) {
        let file = self.modules[m.0 as usize].file;
        let mut kind = FuncKind::Helper;
        for d in &def.decorators {
            let text = self.sources.snippet(file, d.span).to_string();
            match text.as_str() {
                "kernel" | "tl.kernel" | "triton.jit" | "jit" => kind = FuncKind::Kernel,
                _ => {
                    let diag = Diagnostic::new(
                        Code::E0108,
                        format!("unknown decorator `@{text}`"),
                        Loc::new(file, d.span),
                        "not a tl decorator",
                    )
                    .with_help("kernels are marked `@kernel` (or Triton's `@triton.jit`); helpers have no decorator");
                    self.diags.push(diag);
                }
            }
        }
        let mut seen: BTreeMap<&str, Span> = BTreeMap::new();
        let mut first_default: Option<Span> = None;
        for p in &def.params {
            match (&p.default, first_default) {
                (Some(_), None) => first_default = Some(p.span),
                (None, Some(d)) => {
                    let diag = Diagnostic::new(
                        Code::E0213,
                        format!(
                            "parameter `{}` has no default but follows a parameter with one",
                            p.name.name
                        ),
                        Loc::new(file, p.span),
                        "needs a default",
                    )
                    .with_secondary(Loc::new(file, d), "first parameter with a default")
                    .with_help("put parameters with defaults last, as Python requires");
                    self.diags.push(diag);
                }
                _ => {}
            }
            if let Some(first) = seen.get(p.name.name.as_str()) {
                let d = Diagnostic::new(
                    Code::E0105,
                    format!("parameter `{}` appears more than once", p.name.name),
                    Loc::new(file, p.name.span),
                    "duplicate parameter",
                )
                .with_secondary(Loc::new(file, *first), "first declared here");
                self.diags.push(d);
            } else {
                seen.insert(&p.name.name, p.name.span);
            }
        }
        super::lints::function_lints(&def, file, kind == FuncKind::Kernel, &mut self.diags);
        let id = FuncId(self.funcs.len() as u32);
        let name = def.name.clone();
        let has_syntax_errors = super::lints::has_syntax_error(&def.body);
        self.funcs.push(FuncData {
            module: m,
            def: Rc::new(def),
            kind,
            has_syntax_errors,
        });
        self.modules[m.0 as usize].funcs.push(id);
        self.define(
            m,
            &name,
            ItemKind::Func(id),
            if kind == FuncKind::Kernel { "kernel" } else { "function" },
        );
    }

    /// Finds the file of a dotted module path: the importing file's folder
    /// first, then the stdlib root.
    fn resolve_module_path(&self, m: ModId, path: &[ast::Ident]) -> Option<PathBuf> {
        let mut rel = PathBuf::new();
        for seg in path {
            rel.push(&seg.name);
        }
        rel.set_extension("tl");
        let mut bases: Vec<PathBuf> = Vec::new();
        if let Some(d) = &self.modules[m.0 as usize].dir {
            bases.push(d.clone());
        }
        if let Some(s) = &self.options.stdlib_root {
            bases.push(s.clone());
        }
        bases.into_iter().map(|b| b.join(&rel)).find(|p| p.is_file())
    }

    /// Loads the module `path` refers to, reporting E0102/E0106.
    fn import_module(&mut self, m: ModId, path: &[ast::Ident], span: Span) -> Option<ModId> {
        let file = self.modules[m.0 as usize].file;
        let dotted: Vec<&str> = path.iter().map(|i| i.name.as_str()).collect();
        let dotted = dotted.join(".");
        let path_span = path
            .first()
            .map_or(span, |a| a.span.to(path.last().map_or(a.span, |b| b.span)));
        let Some(found) = self.resolve_module_path(m, path) else {
            let mut d = Diagnostic::new(
                Code::E0102,
                format!("module `{dotted}` not found"),
                Loc::new(file, path_span),
                "no such module",
            );
            d = d.with_note(format!(
                "looked for `{}.tl` next to this file{}",
                dotted.replace('.', "/"),
                if self.options.stdlib_root.is_some() {
                    " and in the stdlib"
                } else {
                    ""
                }
            ));
            self.diags.push(d);
            return None;
        };
        let canonical = found.canonicalize().unwrap_or(found.clone());
        if let Some(&existing) = self.by_path.get(&canonical) {
            if self.modules[existing.0 as usize].loading {
                let d = Diagnostic::new(
                    Code::E0106,
                    format!("import cycle: `{dotted}` is still being loaded"),
                    Loc::new(file, path_span),
                    "imported here",
                )
                .with_help("move the shared definitions into a third module both import");
                self.diags.push(d);
                return None;
            }
            return Some(existing);
        }
        let source = match crate::text::read_text(&found) {
            Ok(s) => s,
            Err(e) => {
                self.diags.push(Diagnostic::new(
                    Code::E0102,
                    format!("cannot read module `{dotted}`: {e}"),
                    Loc::new(file, path_span),
                    "imported here",
                ));
                return None;
            }
        };
        let display = display_path(&found);
        let dir = found.parent().map(Path::to_path_buf);
        Some(self.load_module(&display, dir, Some(canonical), source))
    }

    fn import_from(&mut self, m: ModId, path: &[ast::Ident], names: &[ast::ImportName], span: Span) {
        let file = self.modules[m.0 as usize].file;
        let dotted: Vec<&str> = path.iter().map(|i| i.name.as_str()).collect();
        if dotted.first() == Some(&"triton") {
            // `from triton import language as tl`, `from triton.language import …`
            for n in names {
                let bound = n.alias.as_ref().unwrap_or(&n.name);
                let kind = match (dotted.as_slice(), n.name.name.as_str()) {
                    (["triton"], "language") => ItemKind::Namespace(Namespace::Tl),
                    (["triton"], "jit") => ItemKind::Namespace(Namespace::Triton),
                    _ => {
                        let d = Diagnostic::new(
                            Code::E0103,
                            format!("`{}` cannot be imported from `{}`", n.name.name, dotted.join(".")),
                            Loc::new(file, n.name.span),
                            "not importable",
                        )
                        .with_help("use `tl.<name>` directly");
                        self.diags.push(d);
                        ItemKind::Broken
                    }
                };
                self.define(m, bound, kind, "import");
            }
            return;
        }
        let target = self.import_module(m, path, span);
        for n in names {
            let bound = n.alias.as_ref().unwrap_or(&n.name);
            let kind = match target {
                None => ItemKind::Broken,
                Some(t) => match self.modules[t.0 as usize].names.get(&n.name.name) {
                    Some(item) => item.kind.clone(),
                    None => {
                        let candidates: Vec<String> = self.modules[t.0 as usize].names.keys().cloned().collect();
                        let mut d = Diagnostic::new(
                            Code::E0103,
                            format!("`{}` is not defined in module `{}`", n.name.name, dotted.join(".")),
                            Loc::new(file, n.name.span),
                            "not found",
                        );
                        if let Some(h) = super::suggest::nearest(&n.name.name, candidates.iter().map(String::as_str)) {
                            d = d.with_help(format!("did you mean `{h}`?"));
                        }
                        self.diags.push(d);
                        ItemKind::Broken
                    }
                },
            };
            self.define(m, bound, kind, "import");
        }
    }

    fn import(&mut self, m: ModId, path: &[ast::Ident], alias: Option<&ast::Ident>, span: Span) {
        let file = self.modules[m.0 as usize].file;
        let dotted: Vec<&str> = path.iter().map(|i| i.name.as_str()).collect();
        let (kind, bound) = match (dotted.as_slice(), alias) {
            (["triton", "language"], Some(a)) => (ItemKind::Namespace(Namespace::Tl), a.clone()),
            (["triton"], a) => (
                ItemKind::Namespace(Namespace::Triton),
                a.cloned().unwrap_or_else(|| path[0].clone()),
            ),
            ([_], a) => {
                let t = self.import_module(m, path, span);
                (
                    t.map_or(ItemKind::Broken, |t| ItemKind::Namespace(Namespace::Module(t))),
                    a.cloned().unwrap_or_else(|| path[0].clone()),
                )
            }
            (_, Some(a)) => {
                let t = self.import_module(m, path, span);
                (
                    t.map_or(ItemKind::Broken, |t| ItemKind::Namespace(Namespace::Module(t))),
                    a.clone(),
                )
            }
            (_, None) => {
                let d = Diagnostic::new(
                    Code::E0017,
                    "`import a.b` needs a name in tl",
                    Loc::new(file, span),
                    "no `as NAME`",
                )
                .with_help(format!(
                    "write `import {} as {}`",
                    dotted.join("."),
                    dotted.last().unwrap_or(&"m")
                ));
                self.diags.push(d);
                (ItemKind::Broken, path[0].clone())
            }
        };
        self.define(m, &bound, kind, "import");
    }

    /// The span of a module constant `name` in module `m`, if it is one.
    pub fn module_const_span(&self, m: ModId, name: &str) -> Option<Span> {
        match self.modules[m.0 as usize].names.get(name) {
            Some(Item {
                kind: ItemKind::Const(_),
                span,
            }) => Some(*span),
            _ => None,
        }
    }
}

/// A path as diagnostics print it: relative to the current folder when
/// possible, so golden files do not depend on where the repo is.
fn display_path(p: &Path) -> String {
    if let Ok(cwd) = std::env::current_dir() {
        if let Ok(rel) = p.strip_prefix(&cwd) {
            return rel.display().to_string();
        }
        if let (Ok(cp), Ok(cc)) = (p.canonicalize(), cwd.canonicalize()) {
            if let Ok(rel) = cp.strip_prefix(&cc) {
                return rel.display().to_string();
            }
        }
    }
    p.display().to_string()
}
