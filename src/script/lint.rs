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

use rhai::{AST, ASTNode, Expr, FnAccess, FnCallExpr, Map, Position, Stmt};

use super::compile::{CompiledScript, compile_source};
use super::engine::ScriptEngine;
use super::errors::ScriptError;
use super::host_api::{FUNCTIONS, SCRIPT_FUNCTIONS};
use super::resolver::ModuleStore;

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

/// The functions a script can call, built once from a [`ScriptEngine`]; cheap to reuse for
/// many files.
#[derive(Debug, Clone)]
pub struct Checker {
    /// Plain-call functions: Rhai packages, script layer, host API globals.
    globals: Arities,
    /// `ns` → its functions (host API namespaces and `log`).
    namespaces: BTreeMap<String, Arities>,
    /// `(ns, name, arity)` → (index of the options argument, accepted keys).
    options: HashMap<(String, String, usize), (usize, &'static [&'static str])>,
}

impl Checker {
    /// The table: Rhai's packages ([`RHAI_FUNCTIONS`]), the script layer
    /// ([`SCRIPT_FUNCTIONS`] and `changed()`) and the host API ([`FUNCTIONS`]).
    pub fn new() -> Checker {
        let mut globals = Arities::new();
        for (name, arities) in RHAI_FUNCTIONS {
            globals
                .entry(name.to_string())
                .or_default()
                .extend(arities.iter().copied());
        }
        let mut namespaces: BTreeMap<String, Arities> = BTreeMap::new();
        let mut options = HashMap::new();
        for d in FUNCTIONS.iter().chain(SCRIPT_FUNCTIONS) {
            let table = if d.ns.is_empty() {
                &mut globals
            } else {
                namespaces.entry(d.ns.to_string()).or_default()
            };
            table
                .entry(d.name.to_string())
                .or_default()
                .insert(d.params.len());
            if let Some(i) = d.params.iter().position(|(_, t)| *t == "Map")
                && !d.options.is_empty()
            {
                options.insert(
                    (d.ns.to_string(), d.name.to_string(), d.params.len()),
                    (i, d.options),
                );
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
            .is_some_and(|a| a.contains(&arity))
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

/// Characters of each line, to look at the source at a position.
struct SourceIndex<'a> {
    lines: Vec<&'a str>,
}

impl<'a> SourceIndex<'a> {
    fn new(source: &'a str) -> Self {
        SourceIndex {
            lines: source.split('\n').collect(),
        }
    }

    /// The character at `pos` (1-based line and column, columns counted in characters as
    /// Rhai counts them).
    fn char_at(&self, pos: Position) -> Option<char> {
        let line = self.lines.get(pos.line()?.checked_sub(1)?)?;
        line.chars().nth(pos.position()?.checked_sub(1)?)
    }

    /// The position of property `key` (followed by `:`) inside the map literal `#{...}`
    /// starting at `map` (Rhai folds a map of constants into one value and keeps only the
    /// map's position). Nested braces are skipped by depth; `None` when not found.
    fn key_in_map(&self, map: Position, key: &str) -> Option<Position> {
        let (l0, c0) = (map.line()? - 1, map.position()? - 1);
        let mut depth = 0usize;
        for (l, line) in self.lines.iter().enumerate().skip(l0) {
            let chars: Vec<char> = line.chars().collect();
            let start = if l == l0 { c0 } else { 0 };
            let mut c = start;
            while c < chars.len() {
                match chars[c] {
                    '{' => depth += 1,
                    '}' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return None;
                        }
                    }
                    ch if depth == 1
                        && (ch.is_alphabetic() || ch == '_')
                        && (c == 0 || !(chars[c - 1].is_alphanumeric() || chars[c - 1] == '_')) =>
                    {
                        let end = (c..chars.len())
                            .find(|&i| !(chars[i].is_alphanumeric() || chars[i] == '_'))
                            .unwrap_or(chars.len());
                        let word: String = chars[c..end].iter().collect();
                        let colon = chars[end..].iter().find(|ch| !ch.is_whitespace());
                        if word == key && colon == Some(&':') {
                            return Some(Position::new(
                                u16::try_from(l + 1).ok()?,
                                u16::try_from(c + 1).ok()?,
                            ));
                        }
                        c = end;
                        continue;
                    }
                    _ => {}
                }
                c += 1;
            }
        }
        None
    }
}

struct Walk<'a> {
    checker: &'a Checker,
    file: &'a str,
    source: SourceIndex<'a>,
    script_fns: &'a Arities,
    variables: &'a HashSet<String>,
    modules: &'a HashMap<String, ModuleInfo>,
    tails: &'a HashSet<*const Stmt>,
    out: Vec<Diagnostic>,
}

impl Walk<'_> {
    fn push(&mut self, pos: Position, severity: Severity, message: String) {
        self.out
            .push(Diagnostic::at(self.file, pos, severity, message));
    }

    fn node(&mut self, path: &[ASTNode]) {
        let Some(node) = path.last() else { return };
        match node {
            ASTNode::Expr(Expr::FnCall(x, pos)) | ASTNode::Stmt(Stmt::FnCall(x, pos)) => {
                self.call(x, *pos);
                self.in_place(path, &x.name, *pos);
                self.unchecked_command(path, x, *pos);
            }
            ASTNode::Expr(Expr::MethodCall(x, pos)) => {
                self.method(x, *pos);
                self.in_place(path, &x.name, *pos);
            }
            ASTNode::Expr(Expr::StringConstant(s, pos)) => {
                let in_interpolation = path.len() >= 2
                    && matches!(
                        path[path.len() - 2],
                        ASTNode::Expr(Expr::InterpolatedString(..))
                    );
                if !in_interpolation && s.contains("\\n") && self.source.char_at(*pos) == Some('`')
                {
                    self.backslash_n(*pos);
                }
            }
            ASTNode::Expr(Expr::InterpolatedString(parts, pos))
                if parts
                    .iter()
                    .any(|p| matches!(p, Expr::StringConstant(s, _) if s.contains("\\n"))) =>
            {
                self.backslash_n(*pos);
            }
            _ => {}
        }
    }

    fn backslash_n(&mut self, pos: Position) {
        self.push(
            pos,
            Severity::Warning,
            "backtick string contains \\n, which Rhai keeps as a backslash and an `n` \
             (backtick strings have no escapes): break the line in the string itself, or use \
             \"...\\n...\""
                .to_string(),
        );
    }

    /// A plain or namespaced call.
    fn call(&mut self, x: &FnCallExpr, pos: Position) {
        let name = x.name.as_str();
        if x.op_token.is_some() || !is_identifier(name) {
            return;
        }
        let argc = x.args.len();
        if x.namespace.is_empty() {
            if KEYWORDS.contains(&name) {
                return;
            }
            let mut arities = BTreeSet::new();
            for t in [&self.checker.globals, self.script_fns] {
                if let Some(a) = t.get(name) {
                    arities.extend(a.iter().copied());
                }
            }
            if arities.is_empty() {
                if self.variables.contains(name) {
                    return; // maybe a function pointer called as `f(x)`
                }
                let hint = self.global_hint(name);
                self.push(
                    pos,
                    Severity::Error,
                    format!("unknown function {name}{hint}"),
                );
            } else if !arities.contains(&argc) {
                self.push(pos, Severity::Error, arity_message(name, &arities, argc));
            } else {
                self.options(x, "", pos);
            }
            return;
        }
        let path = &x.namespace.path;
        let ns = path[0].name.as_str();
        // Report at the start of the qualified name (`fs::wrte` at its `fs`).
        let pos = path[0].pos;
        if ns == "global" || path.len() > 1 && self.modules.contains_key(ns) {
            return;
        }
        if let Some(info) = self.modules.get(ns) {
            if let ModuleInfo::Known(spec, fns) = info {
                self.resolve_in(ns, name, argc, fns, pos, &format!(" in module {spec:?}"));
            }
            return;
        }
        if let Some(fns) = self.checker.namespaces.get(ns) {
            if path.len() == 1 {
                let fns = fns.clone();
                if self.resolve_in(ns, name, argc, &fns, pos, "") {
                    self.options(x, ns, pos);
                }
            }
            return;
        }
        let candidates = self
            .checker
            .namespaces
            .keys()
            .map(String::as_str)
            .chain(self.modules.keys().map(String::as_str));
        let hint = suggest(ns, candidates)
            .map(|s| format!(" (did you mean {s}?)"))
            .unwrap_or_default();
        self.push(
            path[0].pos,
            Severity::Error,
            format!("unknown module {ns}{hint}"),
        );
    }

    /// `ns::name` against the functions `fns` of `ns`; true when it resolves.
    fn resolve_in(
        &mut self,
        ns: &str,
        name: &str,
        argc: usize,
        fns: &Arities,
        pos: Position,
        what: &str,
    ) -> bool {
        match fns.get(name) {
            Some(a) if a.contains(&argc) => true,
            Some(a) => {
                self.push(
                    pos,
                    Severity::Error,
                    arity_message(&format!("{ns}::{name}"), a, argc),
                );
                false
            }
            None => {
                let hint = suggest(name, fns.keys().map(String::as_str))
                    .map(|s| format!(" (did you mean {ns}::{s}?)"))
                    .unwrap_or_default();
                self.push(
                    pos,
                    Severity::Error,
                    format!("unknown function {ns}::{name}{what}{hint}"),
                );
                false
            }
        }
    }

    /// Keys of a literal options map passed to a host function that takes one.
    fn options(&mut self, x: &FnCallExpr, ns: &str, pos: Position) {
        let key = (ns.to_string(), x.name.to_string(), x.args.len());
        let Some(&(i, accepted)) = self.checker.options.get(&key) else {
            return;
        };
        let keys: Vec<(String, Position)> = match &x.args[i] {
            Expr::Map(m, _) => {
                m.0.iter()
                    .map(|(k, _)| (k.name.to_string(), k.pos))
                    .collect()
            }
            Expr::DynamicConstant(d, map_pos) => match d.read_lock::<Map>() {
                Some(m) => m
                    .keys()
                    .map(|k| {
                        let at = (self.source.char_at(*map_pos) == Some('#'))
                            .then(|| self.source.key_in_map(*map_pos, k))
                            .flatten()
                            .unwrap_or(*map_pos);
                        (k.to_string(), at)
                    })
                    .collect(),
                None => return,
            },
            _ => return,
        };
        let fname = super::host_api::fname(ns, &x.name);
        for (k, kpos) in keys {
            if accepted.contains(&k.as_str()) {
                continue;
            }
            let hint = suggest(&k, accepted.iter().copied())
                .map(|s| format!("did you mean {s}? "))
                .unwrap_or_default();
            let at = if kpos.is_none() { pos } else { kpos };
            self.push(
                at,
                Severity::Error,
                format!(
                    "{fname}: unknown option {k} ({hint}accepted: {})",
                    accepted.join(", ")
                ),
            );
        }
    }

    /// A method call `x.name(..)`: unknown names are warnings.
    fn method(&mut self, x: &FnCallExpr, pos: Position) {
        let name = x.name.as_str();
        if KEYWORDS.contains(&name)
            || self.checker.globals.contains_key(name)
            || self.script_fns.contains_key(name)
        {
            return;
        }
        let hint = self.global_hint(name);
        self.push(
            pos,
            Severity::Warning,
            format!("unknown method {name}{hint}"),
        );
    }

    /// ` (did you mean X?)` for the global or script function closest to `name`, or empty.
    fn global_hint(&self, name: &str) -> String {
        let candidates = self
            .checker
            .globals
            .keys()
            .chain(self.script_fns.keys())
            .map(String::as_str);
        suggest(name, candidates)
            .map(|s| format!(" (did you mean {s}?)"))
            .unwrap_or_default()
    }

    /// A thrown-away result of a command call that accepts any exit code (module docs).
    fn unchecked_command(&mut self, path: &[ASTNode], x: &FnCallExpr, pos: Position) {
        let name = x.name.as_str();
        if !x.namespace.is_empty()
            || !matches!(name, "run" | "sh" | "query")
            || self.script_fns.contains_key(name)
            || !result_ignored(path, self.tails)
        {
            return;
        }
        let (check, ok) = match x.args.get(1) {
            None => (Key::Absent, Key::Absent),
            Some(opts) => match (literal_key(opts, "check"), literal_key(opts, "ok")) {
                (Some(check), Some(ok)) => (check, ok),
                _ => return,
            },
        };
        if !matches!(ok, Key::Absent) {
            return; // `ok` lists the codes that pass: the code is checked.
        }
        let message = match (name, check) {
            ("query", Key::Absent | Key::Bool(false)) => {
                "query() returns any exit code, but its result is thrown away, so a failing \
                 command passes silently: read it (`if query(..).ok { .. }`), add \
                 `#{check: true}` to fail the step on a non-zero exit, or use run()"
                    .to_string()
            }
            ("run" | "sh", Key::Bool(false)) => format!(
                "{name}() with check: false accepts any exit code, but its result is thrown \
                 away, so a failing command passes silently: read its `code`, or list the \
                 codes the script expects in `ok` instead of check: false"
            ),
            _ => return,
        };
        self.push(pos, Severity::Warning, message);
    }

    /// The result of an in-place method used as a value.
    fn in_place(&mut self, path: &[ASTNode], name: &str, pos: Position) {
        if !IN_PLACE.contains(&name) || self.script_fns.contains_key(name) {
            return;
        }
        let Some(how) = value_use(path, self.tails) else {
            return;
        };
        // The variable it is called on, for the advice.
        let mut object = None;
        for i in (0..path.len() - 1).rev() {
            let child = &path[i + 1];
            match &path[i] {
                ASTNode::Expr(Expr::Dot(b, ..)) if same(&b.rhs, child) => {
                    if let Expr::Variable(v, ..) = &b.lhs {
                        object = Some(v.1.to_string());
                    }
                    break;
                }
                ASTNode::Expr(Expr::Dot(b, ..)) if same(&b.lhs, child) => {}
                _ => break,
            }
        }
        let advice = match object {
            Some(v) => format!("call `{v}.{name}(..);` as a statement, then use `{v}`"),
            None => "call it on a variable as a statement, then use the variable".to_string(),
        };
        self.push(
            pos,
            Severity::Warning,
            format!(
                "{name}() changes its object in place and returns (), but the result is {how}: \
                 {advice}"
            ),
        );
    }
}

/// What a literal or constant options map says about one key.
enum Key {
    /// Not set (or set to `()`).
    Absent,
    /// Set to a constant bool.
    Bool(bool),
    /// Set to something else (a list, a variable).
    Other,
}

/// What `opts` sets `key` to; `None` when the map is not written at the call (nor a
/// constant), so the checker cannot tell.
fn literal_key(opts: &Expr, key: &str) -> Option<Key> {
    match opts {
        Expr::Map(m, _) => Some(match m.0.iter().find(|(k, _)| k.name == key) {
            None | Some((_, Expr::Unit(_))) => Key::Absent,
            Some((_, Expr::BoolConstant(b, _))) => Key::Bool(*b),
            Some(_) => Key::Other,
        }),
        Expr::DynamicConstant(d, _) => {
            let m = d.read_lock::<Map>()?;
            Some(match m.get(key) {
                None => Key::Absent,
                Some(v) if v.is_unit() => Key::Absent,
                Some(v) => v.as_bool().map_or(Key::Other, Key::Bool),
            })
        }
        _ => None,
    }
}

/// Whether the value of the call at the end of `path` is thrown away: it is a statement of
/// its own, not the tail of a function or closure body, and no enclosing node is an
/// expression (a block used as a value, `let r = if c { query(a) } else { .. };`).
fn result_ignored(path: &[ASTNode], tails: &HashSet<*const Stmt>) -> bool {
    let statement = match path {
        [.., ASTNode::Stmt(Stmt::FnCall(..))] => path.len() - 1,
        [
            ..,
            ASTNode::Stmt(Stmt::Expr(_)),
            ASTNode::Expr(Expr::FnCall(..)),
        ] => path.len() - 2,
        _ => return false,
    };
    path[..=statement].iter().all(|n| match n {
        ASTNode::Stmt(s) => !tails.contains(&std::ptr::from_ref(*s)),
        _ => false,
    })
}

/// How the value of the last node of `path` (a call) is used, if it is: the chain
/// `a.b.f()` it ends is followed up to its top first.
fn value_use(path: &[ASTNode], tails: &HashSet<*const Stmt>) -> Option<&'static str> {
    let tail =
        |n: &ASTNode| matches!(n, ASTNode::Stmt(s) if tails.contains(&std::ptr::from_ref(*s)));
    let mut i = path.len() - 1;
    loop {
        let cur = &path[i];
        let parent = path.get(i.checked_sub(1)?)?;
        match parent {
            ASTNode::Expr(Expr::Dot(b, ..)) if same(&b.rhs, cur) => {
                i -= 1;
            }
            ASTNode::Expr(Expr::Dot(b, ..)) if same(&b.lhs, cur) => {
                return Some("the object of the next call");
            }
            _ => break,
        }
    }
    let cur = &path[i];
    if i == 0 && tail(cur) {
        return Some("returned");
    }
    let parent = path.get(i.checked_sub(1)?)?;
    match parent {
        ASTNode::Stmt(Stmt::Expr(_)) if i == 1 && tail(parent) => Some("returned"),
        ASTNode::Stmt(Stmt::Var(..)) => Some("assigned to a variable"),
        ASTNode::Stmt(Stmt::Assignment(x)) if same(&x.1.rhs, cur) => Some("assigned"),
        ASTNode::Stmt(Stmt::Return(..)) => Some("returned"),
        ASTNode::Expr(Expr::FnCall(x, _)) if x.op_token.is_some() => Some("used in an expression"),
        ASTNode::Expr(Expr::FnCall(..) | Expr::MethodCall(..))
        | ASTNode::Stmt(Stmt::FnCall(..)) => Some("passed as an argument"),
        ASTNode::Stmt(Stmt::If(x, _) | Stmt::While(x, _) | Stmt::Do(x, ..))
            if same(&x.expr, cur) =>
        {
            Some("used as a condition")
        }
        ASTNode::Expr(
            Expr::Index(..)
            | Expr::InterpolatedString(..)
            | Expr::Array(..)
            | Expr::Map(..)
            | Expr::And(..)
            | Expr::Or(..)
            | Expr::Coalesce(..),
        ) => Some("used as a value"),
        _ => None,
    }
}

/// Whether `node` is the expression `e` itself.
fn same(e: &Expr, node: &ASTNode) -> bool {
    matches!(node, ASTNode::Expr(n) if std::ptr::eq(*n, e))
}

fn is_identifier(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// `fs::write expects 2 or 3 arguments, got 1`.
fn arity_message(name: &str, arities: &BTreeSet<usize>, got: usize) -> String {
    let list: Vec<String> = arities.iter().map(usize::to_string).collect();
    let counts = match list.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    };
    let noun = if arities.len() == 1 && arities.contains(&1) {
        "argument"
    } else {
        "arguments"
    };
    format!("{name} expects {counts} {noun}, got {got}")
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
