//! The walk of one script's AST behind [`super::Checker`]: each call, method and in-place
//! method checked against the checker's tables, with the source looked at for the position
//! of an option key.

use std::collections::{BTreeSet, HashMap, HashSet};

use rhai::{ASTNode, Expr, FnCallExpr, Map, Position, Stmt};

use super::{
    ArgCounts, Arities, Checker, Diagnostic, IN_PLACE, KEYWORDS, ModuleInfo, Severity,
    is_identifier, suggest,
};

/// Characters of each line, to look at the source at a position.
pub(super) struct SourceIndex<'a> {
    lines: Vec<&'a str>,
}

impl<'a> SourceIndex<'a> {
    pub(super) fn new(source: &'a str) -> Self {
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

pub(super) struct Walk<'a> {
    pub(super) checker: &'a Checker,
    pub(super) file: &'a str,
    pub(super) source: SourceIndex<'a>,
    pub(super) script_fns: &'a Arities,
    pub(super) variables: &'a HashSet<String>,
    pub(super) modules: &'a HashMap<String, ModuleInfo>,
    pub(super) tails: &'a HashSet<*const Stmt>,
    pub(super) out: Vec<Diagnostic>,
}

impl Walk<'_> {
    fn push(&mut self, pos: Position, severity: Severity, message: String) {
        self.out
            .push(Diagnostic::at(self.file, pos, severity, message));
    }

    pub(super) fn node(&mut self, path: &[ASTNode]) {
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
            let global = self.checker.globals.get(name).copied();
            let script = self.script_fns.get(name);
            if global.is_none() && script.is_none() {
                if self.variables.contains(name) {
                    return; // maybe a function pointer called as `f(x)`
                }
                let hint = self.global_hint(name);
                self.push(
                    pos,
                    Severity::Error,
                    format!("unknown function {name}{hint}"),
                );
            } else if !global.is_some_and(|a| a.contains(argc))
                && !script.is_some_and(|a| a.contains(&argc))
            {
                // The message lists the counts of both (a script's function of a global's
                // name adds its own).
                let arities: BTreeSet<usize> = global
                    .into_iter()
                    .flat_map(ArgCounts::iter)
                    .chain(script.into_iter().flatten().copied())
                    .collect();
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
        // The checker outlives `self`'s borrow: its table is read in place, not copied.
        let checker = self.checker;
        if let Some(fns) = checker.namespaces.get(ns) {
            if path.len() == 1 && self.resolve_in(ns, name, argc, fns, pos, "") {
                self.options(x, ns, pos);
            }
            return;
        }
        let candidates = self
            .checker
            .namespaces
            .keys()
            .copied()
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
    fn resolve_in<K: std::borrow::Borrow<str> + std::hash::Hash + Eq, C: Counts>(
        &mut self,
        ns: &str,
        name: &str,
        argc: usize,
        fns: &HashMap<K, C>,
        pos: Position,
        what: &str,
    ) -> bool {
        match fns.get(name) {
            Some(a) if a.accepts(argc) => true,
            Some(a) => {
                self.push(
                    pos,
                    Severity::Error,
                    arity_message(&format!("{ns}::{name}"), &a.counts(), argc),
                );
                false
            }
            None => {
                let hint = suggest(name, fns.keys().map(|k| k.borrow()))
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
        let key = (ns, x.name.as_str(), x.args.len());
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
        let fname = crate::script::host_api::fname(ns, &x.name);
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
            .copied()
            .chain(self.script_fns.keys().map(String::as_str));
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

/// The argument counts of a function in one of the checker's tables: the static ones
/// ([`ArgCounts`]) or a script's or module's own (a set).
trait Counts {
    /// Whether `n` arguments are accepted.
    fn accepts(&self, n: usize) -> bool;
    /// The accepted counts.
    fn counts(&self) -> BTreeSet<usize>;
}

impl Counts for ArgCounts {
    fn accepts(&self, n: usize) -> bool {
        self.contains(n)
    }
    fn counts(&self) -> BTreeSet<usize> {
        self.iter().collect()
    }
}

impl Counts for BTreeSet<usize> {
    fn accepts(&self, n: usize) -> bool {
        self.contains(&n)
    }
    fn counts(&self) -> BTreeSet<usize> {
        self.clone()
    }
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
