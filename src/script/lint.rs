//! The static checker behind `skyhook-run check` and `skyhook-agent validate`: finds mistakes
//! in a compiled script without running it.
//!
//! [`Checker::check`] walks the script's AST (function bodies included) and reports:
//!
//! | finding | severity |
//! |---|---|
//! | a call `ns::f(..)` whose namespace is neither a host API namespace (`fs`, `service`, ...), `log`, nor an `import ... as ns` alias: `unknown module servcie (did you mean service?)` | error |
//! | a namespaced call of a function the namespace does not have: `unknown function fs::wrte (did you mean fs::write?)`; for an alias of a statically imported module, the module's exported (non-private) functions | error |
//! | a known function called with an argument count it has no overload for: `fs::write expects 2 or 3 arguments, got 1` | error |
//! | a plain call `f(..)` of a function that is neither defined in the script, a host API global (`run`, `sh`, ...), a script-layer function (`step`, `env`, `fail`, `print`, ...) nor in Rhai's packages the engine loads | error |
//! | a key of a literal options map (`#{...}`) the host function does not accept: `fs::write: unknown option mod (did you mean mode? accepted: mode, owner, group)` | error |
//! | a method `x.f(..)` no function of any arity has the name of (it may still be a function stored in a map property, hence only a warning) | warning |
//! | a backtick string containing `\n`: Rhai keeps backslash-n literally there | warning |
//! | the result of a command call that accepts any exit code thrown away (a statement of its own): `query(..)` without `check: true` or `ok`, `run(..)`/`sh(..)` with `check: false`; the code is then neither checked nor read, so a failure passes silently (a `run`/`sh` that checks its code, by default or with `ok`, is fine as a statement) | warning |
//! | the result of an in-place method (`replace`, `trim`, `make_upper`, `make_lower`, `pad`, `truncate`, `crop`, `clear`, `sort`, `reverse`), which is `()`, used as a value: assigned, passed as an argument, returned (also as the last expression of a function or closure: `lines.map(\|l\| l.trim())`), compared, a condition, the object of another call | warning |
//!
//! The functions come from the tables a run is verified against: the host API
//! ([`FUNCTIONS`], checked against the registration in tests),
//! the script layer ([`SCRIPT_FUNCTIONS`], each checked
//! to be callable in a run) and the functions of the Rhai packages the [`ScriptEngine`]
//! loads ([`RHAI_FUNCTIONS`], generated from Rhai's metadata for the Rhai version in
//! `Cargo.lock`, which a test pins).
//!
//! Errors on a namespaced call are reported at the start of the qualified name (`fs` of
//! `fs::wrte`), others at the call, an option key at the key.
//!
//! [`check_step`] (what `check` and `validate` use) also walks the package modules a script
//! imports (`import "lib/util" as u;`), each reported in its own file.
//!
//! Known gaps: calls through function pointers (`Fn("name")`, `f.call(..)`) and `call` of a
//! name built at run time are not resolved; a plain call whose name is also a variable (a
//! function pointer called as `f(x)`) is not checked; calls into a module imported by a
//! computed path or from `configmap/` are not checked (the module is only known at run
//! time), nor calls through nested module paths (`a::b::f`); option keys are checked only
//! when the map is written literally at the call (or is a constant); types of arguments are
//! not checked; a missing map property is found at run time (it is an error there, see
//! [`ScriptEngine`]), not here.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rhai::{AST, ASTNode, Expr, FnAccess, Position, Stmt};

use super::compile::{CompiledScript, compile_source};
use super::engine::ScriptEngine;
use super::errors::ScriptError;
use super::host_api::{FUNCTIONS, SCRIPT_FUNCTIONS};
use super::resolver::ModuleStore;

mod walk;
use walk::{SourceIndex, Walk};

/// How serious a [`Diagnostic`] is: errors fail `check` and `validate` (exit 1), warnings are
/// printed and do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// A mistake the script would fail on (or misbehave with) when it runs.
    Error,
    /// A known trap: legal Rhai that is very likely not what was meant.
    Warning,
}

impl Severity {
    /// `error` or `warning`, as printed.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// One finding at a position. `Display` renders `file:line:col: error: message` (or
/// `warning:`); `file:error: message` without a position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file (as the script was named when compiled).
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// Error or warning.
    pub severity: Severity,
    /// What is wrong, in one line.
    pub message: String,
}

impl Diagnostic {
    fn at(file: &str, pos: Position, severity: Severity, message: String) -> Self {
        Diagnostic {
            file: file.to_string(),
            line: pos.line(),
            column: pos.position(),
            severity,
            message,
        }
    }

    /// A compile error (syntax, import, unreadable file) as an error diagnostic.
    pub fn from_compile(e: &ScriptError) -> Self {
        Diagnostic {
            file: e.file.clone(),
            line: e.line,
            column: e.column,
            severity: Severity::Error,
            message: e.message.clone(),
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = self.severity.as_str();
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, "{}:{l}:{c}: {sev}: {}", self.file, self.message),
            (Some(l), None) => write!(f, "{}:{l}: {sev}: {}", self.file, self.message),
            _ => write!(f, "{}: {sev}: {}", self.file, self.message),
        }
    }
}

include!("lint/rhai_functions.rs");

/// Methods that change their object in place and return `()`.
pub const IN_PLACE: &[&str] = &[
    "replace",
    "trim",
    "make_upper",
    "make_lower",
    "pad",
    "truncate",
    "crop",
    "clear",
    "sort",
    "reverse",
];

/// Rhai keywords that look like calls and are resolved by the evaluator itself (any number
/// of arguments is left to Rhai).
const KEYWORDS: &[&str] = &[
    "print",
    "debug",
    "type_of",
    "Fn",
    "call",
    "curry",
    "is_shared",
    "is_def_var",
    "is_def_fn",
    "this",
];

/// Name → the argument counts it accepts.
type Arities = HashMap<String, BTreeSet<usize>>;

/// The argument counts a function of the static tables accepts, one bit per count (bit `n`:
/// `n` arguments). Every function of the tables takes fewer than 64 (`Checker::new` asserts
/// it), and a set of counts costs no allocation: a [`Checker`] is built once per preflight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct ArgCounts(u64);

impl ArgCounts {
    /// `n` arguments are accepted too.
    ///
    /// # Panics
    /// `n` ≥ 64 (no function of the static tables takes that many).
    fn insert(&mut self, n: usize) {
        assert!(n < 64, "a static function with {n} parameters");
        self.0 |= 1 << n;
    }

    /// Whether `n` arguments are accepted.
    pub(super) fn contains(self, n: usize) -> bool {
        n < 64 && self.0 & (1 << n) != 0
    }

    /// The accepted counts, ascending.
    pub(super) fn iter(self) -> impl Iterator<Item = usize> {
        (0..64).filter(move |&n| self.contains(n))
    }
}

/// Name → [`ArgCounts`], of the static tables ([`Checker`]): the names are the tables' own
/// `&'static str`, so building a [`Checker`] copies no name.
type StaticArities = HashMap<&'static str, ArgCounts>;

/// The functions a script can call, built once from a [`ScriptEngine`]; cheap to reuse for
/// many files.
#[derive(Debug, Clone)]
pub struct Checker {
    /// Plain-call functions: Rhai packages, script layer, host API globals.
    globals: StaticArities,
    /// `ns` → its functions (host API namespaces and `log`).
    namespaces: BTreeMap<&'static str, StaticArities>,
    /// `(ns, name, arity)` → (index of the options argument, accepted keys).
    options: HashMap<(&'static str, &'static str, usize), (usize, &'static [&'static str])>,
}

impl Checker {
    /// The table: Rhai's packages ([`RHAI_FUNCTIONS`]), the script layer
    /// ([`SCRIPT_FUNCTIONS`] and `changed()`) and the host API ([`FUNCTIONS`]). Keyed by the
    /// tables' static names (no name is copied: the preflight builds one per run).
    pub fn new() -> Checker {
        let mut globals = StaticArities::with_capacity(RHAI_FUNCTIONS.len() + 64);
        for (name, arities) in RHAI_FUNCTIONS {
            let counts = globals.entry(*name).or_default();
            for &n in *arities {
                counts.insert(n);
            }
        }
        let mut namespaces: BTreeMap<&'static str, StaticArities> = BTreeMap::new();
        let mut options = HashMap::new();
        for d in FUNCTIONS.iter().chain(SCRIPT_FUNCTIONS) {
            let table = if d.ns.is_empty() {
                &mut globals
            } else {
                namespaces.entry(d.ns).or_default()
            };
            table.entry(d.name).or_default().insert(d.params.len());
            if let Some(i) = d.params.iter().position(|(_, t)| *t == "Map")
                && !d.options.is_empty()
            {
                options.insert((d.ns, d.name, d.params.len()), (i, d.options));
            }
        }
        Checker {
            globals,
            namespaces,
            options,
        }
    }

    /// Whether `ns::name` (`ns` empty: a plain call) with `arity` arguments is callable.
    /// Keywords (`print`, `Fn`, ...) are not in the table.
    pub fn knows(&self, ns: &str, name: &str, arity: usize) -> bool {
        let table = if ns.is_empty() {
            Some(&self.globals)
        } else {
            self.namespaces.get(ns)
        };
        table
            .and_then(|t| t.get(name))
            .is_some_and(|a| a.contains(arity))
    }

    /// Check `script` (compiled from `source`): see the module docs for what is reported.
    /// Diagnostics are in source order (errors and warnings mixed).
    pub fn check(
        &self,
        engine: &ScriptEngine,
        script: &CompiledScript,
        source: &str,
    ) -> Vec<Diagnostic> {
        self.check_ast(
            engine,
            script.modules(),
            script.file(),
            script.ast(),
            source,
        )
    }

    /// [`Checker::check`] of `script` and of every module it imports statically from its
    /// package (relative paths, recursively; not the shipped `skyhook/` modules, which their
    /// own tests check, nor `configmap/` ones), each module once: the script's diagnostics
    /// first, then each module's, in import order.
    pub fn check_with_imports(
        &self,
        engine: &ScriptEngine,
        script: &CompiledScript,
        source: &str,
    ) -> Vec<Diagnostic> {
        let mut out = self.check(engine, script, source);
        let store = script.modules();
        let mut seen = HashSet::new();
        let mut queue: Vec<(String, std::sync::Arc<super::resolver::CachedModule>)> = Vec::new();
        let push = |ast: &AST, queue: &mut Vec<_>, seen: &mut HashSet<String>| {
            for (spec, _) in super::resolver::static_imports(ast) {
                if spec.starts_with(super::resolver::STDLIB_PREFIX)
                    || spec.starts_with(super::resolver::CONFIGMAP_PREFIX)
                {
                    continue;
                }
                if let Ok(m) = store.load(engine.compiler(), &spec)
                    && seen.insert(m.file.clone())
                {
                    queue.push((spec, m));
                }
            }
        };
        push(script.ast(), &mut queue, &mut seen);
        let mut i = 0;
        while i < queue.len() {
            let m = queue[i].1.clone();
            out.extend(self.check_ast(engine, store, &m.file, &m.ast, &m.source));
            push(&m.ast, &mut queue, &mut seen);
            i += 1;
        }
        out
    }

    fn check_ast(
        &self,
        engine: &ScriptEngine,
        store: &ModuleStore,
        file: &str,
        ast: &AST,
        source: &str,
    ) -> Vec<Diagnostic> {
        let modules = aliases(engine, store, ast);
        let mut script_fns = Arities::new();
        for f in ast.iter_functions() {
            script_fns
                .entry(f.name.to_string())
                .or_default()
                .insert(f.params.len());
        }
        let variables = variables(ast);
        let tails = tails(ast);
        let mut walk = Walk {
            checker: self,
            file,
            source: SourceIndex::new(source),
            script_fns: &script_fns,
            variables: &variables,
            modules: &modules,
            tails: &tails,
            out: Vec::new(),
        };
        ast.walk(&mut |path: &[ASTNode]| {
            walk.node(path);
            true
        });
        let mut out = walk.out;
        out.sort_by_key(|d| (d.line, d.column));
        out.dedup();
        out
    }
}

/// What an `import ... as alias` names, as far as the checker knows.
#[derive(Debug)]
enum ModuleInfo {
    /// A module compiled ahead of the run: its exported functions, and its import path.
    Known(String, Arities),
    /// Imported by a computed path or from `configmap/`, or not loadable here: unchecked.
    Opaque,
}

/// Every alias of an `import` in `ast` (function bodies included).
fn aliases(engine: &ScriptEngine, store: &ModuleStore, ast: &AST) -> HashMap<String, ModuleInfo> {
    let mut found = Vec::new();
    ast.walk(&mut |path: &[ASTNode]| {
        if let Some(ASTNode::Stmt(Stmt::Import(x, _))) = path.last() {
            let spec = match &x.0 {
                Expr::StringConstant(s, _) => Some(s.to_string()),
                _ => None,
            };
            found.push((x.1.name.to_string(), spec));
        }
        true
    });
    let mut out = HashMap::new();
    for (alias, spec) in found {
        let info = match spec {
            Some(spec) if !spec.starts_with(super::resolver::CONFIGMAP_PREFIX) => {
                match store.load(engine.compiler(), &spec) {
                    Ok(m) => {
                        let mut fns = Arities::new();
                        for f in m.ast.iter_functions() {
                            if f.access != FnAccess::Private {
                                fns.entry(f.name.to_string())
                                    .or_default()
                                    .insert(f.params.len());
                            }
                        }
                        ModuleInfo::Known(spec, fns)
                    }
                    Err(_) => ModuleInfo::Opaque,
                }
            }
            _ => ModuleInfo::Opaque,
        };
        // The same alias bound to two different modules (in different scopes): unchecked.
        match out.get(&alias) {
            Some(ModuleInfo::Known(a, _)) if !matches!(&info, ModuleInfo::Known(b, _) if b == a) => {
                out.insert(alias, ModuleInfo::Opaque);
            }
            Some(_) => {}
            None => {
                out.insert(alias, info);
            }
        }
    }
    out
}

/// Every name bound as a variable, a constant, a `for` variable, a `catch` variable or a
/// parameter anywhere in `ast`.
fn variables(ast: &AST) -> HashSet<String> {
    let mut vars: HashSet<String> = ast
        .iter_functions()
        .flat_map(|f| f.params.into_iter().map(str::to_string))
        .collect();
    vars.insert("step".to_string());
    ast.walk(&mut |path: &[ASTNode]| {
        match path.last() {
            Some(ASTNode::Stmt(Stmt::Var(x, ..))) => {
                vars.insert(x.0.name.to_string());
            }
            Some(ASTNode::Stmt(Stmt::For(x, _))) => {
                vars.insert(x.0.name.to_string());
                if let Some(c) = &x.1 {
                    vars.insert(c.name.to_string());
                }
            }
            Some(ASTNode::Stmt(Stmt::TryCatch(x, _))) => {
                if let Expr::Variable(v, ..) = &x.expr {
                    vars.insert(v.1.to_string());
                }
            }
            _ => {}
        }
        true
    });
    vars
}

/// The last statement of each function and closure body: its value is the function's
/// result. Function bodies are walked as top-level statements, so the tail of a body is the
/// last top-level statement (of the walk) that starts inside the body's span. (The value of
/// the script's own last statement is the step's return code, not checked.)
fn tails(ast: &AST) -> HashSet<*const Stmt> {
    let key = |p: Position| (p.line().unwrap_or(0), p.position().unwrap_or(0));
    let mut top: Vec<(*const Stmt, (usize, usize))> = Vec::new();
    ast.walk(&mut |path: &[ASTNode]| {
        if let [ASTNode::Stmt(s)] = path {
            top.push((std::ptr::from_ref(*s), key(s.position())));
        }
        true
    });
    let mut out = HashSet::new();
    for f in ast.iter_fn_def() {
        let (start, end) = (key(f.body.start_position()), key(f.body.end_position()));
        let inside = top.iter().filter(|(_, p)| *p >= start);
        // A closure of one expression (`|l| l.trim()`) has no end position: its body is the
        // one statement at its start.
        let last = if end == (0, 0) {
            inside.min_by_key(|(_, p)| *p)
        } else {
            inside.filter(|(_, p)| *p <= end).max_by_key(|(_, p)| *p)
        };
        if let Some((s, _)) = last {
            out.insert(*s);
        }
    }
    out
}

/// A name Rhai could call: a letter or `_`, then letters, digits or `_`.
fn is_identifier(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// The candidate closest to `name` by edit distance (adjacent transpositions count one),
/// if it is close enough: at most a third of the name's length (at least 1) edits away.
pub fn suggest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .filter(|c| *c != name && is_identifier(c))
        .map(|c| (distance(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, c)| c)
}

/// Optimal string alignment distance between `a` and `b` (in characters).
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// Compile the step at `path` (imports resolved in `modules`, as
/// [`compile_step_in`](super::compile_step_in)) and check it and the package modules it
/// imports ([`Checker::check_with_imports`]).
///
/// Returns the compiled script (for a caller that runs it next) and the diagnostics: the
/// script's in source order, then each imported module's.
///
/// # Errors
/// As [`compile_step_in`](super::compile_step_in): the file cannot be read, or the script or
/// an import does not compile; nothing is checked then.
pub fn check_step(
    engine: &ScriptEngine,
    checker: &Checker,
    path: &Path,
    modules: Arc<ModuleStore>,
) -> Result<(CompiledScript, Vec<Diagnostic>), ScriptError> {
    let (file, source) = super::compile::read_step_source(path)?;
    let script = compile_source(engine, &file, &source, modules)?;
    let found = checker.check_with_imports(engine, &script, &source);
    Ok((script, found))
}

/// Check script text `source` named `file` with imports in `modules` (tests, tools).
///
/// # Errors
/// As [`compile_source`].
pub fn check_source(
    engine: &ScriptEngine,
    file: &str,
    source: &str,
    modules: Arc<ModuleStore>,
) -> Result<Vec<Diagnostic>, ScriptError> {
    let script = compile_source(engine, file, source, modules)?;
    Ok(Checker::new().check(engine, &script, source))
}

/// Only the errors of `found`.
pub fn errors(found: &[Diagnostic]) -> impl Iterator<Item = &Diagnostic> {
    found.iter().filter(|d| d.severity == Severity::Error)
}

impl Default for Checker {
    fn default() -> Self {
        Checker::new()
    }
}

#[cfg(test)]
mod tests;
