//! The crate's layering, checked from its source: which top-level module may import which
//! ([`LAYERS`], the one place the allowed edges are written down), the order of the folders
//! of `src/host` below its areas ([`HOST_LAYERS`]), and no import cycle between the files of
//! any one folder under `src/`.
//!
//! An edge is one file naming another through a path: `crate::a::b`, `super::x`, `self::x`,
//! a child module declared with `mod x;`, each in `use` trees and in code. A path through a
//! `pub use` re-export counts for the file that defines the item; a module's `mod` lines and
//! its `pub use` of its own children are its interface, not edges. Comments and string
//! literals are not read. Code under `#[cfg(test)]` (test modules, test-only files) is not
//! checked: a test may reach across layers to build its fixture. `src/bin/` (separate crates
//! that use the library by name) and `src/lib.rs` (the crate root, which declares everything)
//! are not checked either.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

/// The top-level modules of `src/`, lowest layer first, each with the top-level modules it may
/// import. Every module in `src/` must have a row; every row may name only rows above it, so the
/// table itself has no cycle. `docs/architecture.md` shows a copy
/// ([`architecture_doc_shows_the_layers_table`]).
#[rustfmt::skip]
const LAYERS: &[(&str, &[&str])] = &[
    // Leaves: std and external crates only.
    ("chain",   &[]),
    ("clock",   &[]),
    ("diag",    &[]),
    ("pyfmt",   &[]),
    ("redact",  &[]),
    ("process", &[]),
    // Root confinement and the host API.
    ("host",    &["chain", "process", "redact"]),
    // The package model; the on-host logs and state the agent owns.
    ("package", &["pyfmt"]),
    ("logs",    &["host"]),
    ("state",   &["host", "package", "process", "pyfmt"]),
    // The Rhai engine and its host API bindings.
    ("script",  &["host", "process"]),
    // Running one step: its spec, the runners, the one result.
    ("step",    &["chain", "clock", "host", "logs", "process", "redact", "script"]),
    // The mode loop the agent and skyhook-run share: settings, console, flags, history.
    ("mode",    &["chain", "clock", "host", "logs", "package", "process", "pyfmt", "redact",
                  "script", "state", "step"]),
    // Front ends: the agent's mode runs, skyhook-run, the remote step API and its client.
    ("agent",   &["chain", "host", "logs", "mode", "package", "process", "pyfmt", "script",
                  "state", "step"]),
    ("local",   &["agent", "host", "mode", "package", "process", "redact", "script", "state",
                  "step"]),
    // serve plans a package read-only through local's package plan (kind package_plan).
    ("serve",   &["chain", "clock", "host", "local", "package", "process", "redact", "script",
                  "step"]),
    ("remote",  &["process", "serve"]),
    // Fleet preview: a CR's packages planned on every selected node through serve.
    ("fleet",   &["package", "process", "remote", "serve"]),
    // The command lines of the three binaries.
    ("cli",     &["agent", "chain", "diag", "fleet", "host", "local", "mode", "package",
                  "process", "remote", "script", "serve"]),
];

/// The folders of `src/host` below its API areas, lowest first: root confinement, the effects
/// seam, the script-facing session and `host_fn!` rows. Each may import only those before it;
/// every other folder or file of `src/host` is an area, which may import all three (and other
/// areas, without a cycle).
const HOST_LAYERS: &[&str] = &["root", "effects", "api"];

/// Violations still to be removed, each as the test words it:
/// `"a -> b"` for an edge between top-level modules that [`LAYERS`] does not allow,
/// `"cycle in src/x"` for a folder whose files import each other in a cycle. The test fails
/// when one of them no longer occurs, so the list only shrinks.
const KNOWN_VIOLATIONS: &[&str] = &[];

/// One token of Rust source, with its 1-based line.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`, or one punctuation character.
    Punct(String),
    /// A string literal's raw text (only read for `#[path = "..."]`).
    Str(String),
    /// Any other literal or a lifetime: breaks a path.
    Other,
}

fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn is_ident_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// When `c[i..]` starts a prefixed string literal (`r"`, `r#"`, `b"`, `br"`, `c"`, `cr#"`):
/// whether it is raw, its number of `#`, and the index of its opening quote.
fn string_prefix(c: &[char], i: usize) -> Option<(bool, usize, usize)> {
    let mut j = i + 1;
    match c[i] {
        'r' => {}
        'b' | 'c' if c.get(j) == Some(&'r') => j += 1,
        'b' | 'c' => return (c.get(j) == Some(&'"')).then_some((false, 0, j)),
        _ => return None,
    }
    let hash_start = j;
    while c.get(j) == Some(&'#') {
        j += 1;
    }
    (c.get(j) == Some(&'"')).then_some((true, j - hash_start, j))
}

/// The tokens of `src`, comments dropped, literals reduced to [`Tok::Str`] and [`Tok::Other`].
fn tokenize(src: &str) -> Vec<(Tok, u32)> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut line = 1u32;
    let mut i = 0;
    // Skips to just after the string whose opening quote is at `i`, with `hashes` `#`s after
    // the closing quote when raw; returns its text.
    let string = |i: &mut usize, line: &mut u32, raw: bool, hashes: usize| -> String {
        let start = *i + 1;
        *i += 1;
        loop {
            match c.get(*i) {
                None => return c[start..].iter().collect(),
                Some('\\') if !raw => *i += 2,
                Some('"') if (0..hashes).all(|k| c.get(*i + 1 + k) == Some(&'#')) => {
                    let text = c[start..*i].iter().collect();
                    *i += 1 + hashes;
                    return text;
                }
                Some(ch) => {
                    if *ch == '\n' {
                        *line += 1;
                    }
                    *i += 1;
                }
            }
        }
    };
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if ch == '"' {
            let l = line;
            let s = string(&mut i, &mut line, false, 0);
            out.push((Tok::Str(s), l));
        } else if let Some((raw, hashes, quote)) = string_prefix(&c, i) {
            i = quote;
            let l = line;
            let s = string(&mut i, &mut line, raw, hashes);
            out.push((Tok::Str(s), l));
        } else if ch == 'b' && next == Some('\'') {
            // b'x', b'\n'
            i += 2;
            while i < c.len() && c[i] != '\'' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push((Tok::Other, line));
        } else if ch == 'r' && next == Some('#') && c.get(i + 2).is_some_and(|&d| is_ident_start(d))
        {
            // r#ident
            let start = i + 2;
            i = start;
            while i < c.len() && is_ident_char(c[i]) {
                i += 1;
            }
            out.push((Tok::Ident(c[start..i].iter().collect()), line));
        } else if is_ident_start(ch) {
            let start = i;
            while i < c.len() && is_ident_char(c[i]) {
                i += 1;
            }
            out.push((Tok::Ident(c[start..i].iter().collect()), line));
        } else if ch.is_ascii_digit() {
            while i < c.len()
                && (is_ident_char(c[i])
                    || (c[i] == '.' && c.get(i + 1).is_some_and(|d| d.is_ascii_digit())))
            {
                i += 1;
            }
            out.push((Tok::Other, line));
        } else if ch == '\'' {
            // A char literal ('x', '\n', '\u{1F600}') or a lifetime ('a, 'static).
            if next == Some('\\') {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < c.len() && is_ident_char(c[i]) {
                    i += 1;
                }
            }
            out.push((Tok::Other, line));
        } else if ch == ':' && next == Some(':') {
            out.push((Tok::Punct("::".into()), line));
            i += 2;
        } else {
            out.push((Tok::Punct(ch.to_string()), line));
            i += 1;
        }
    }
    out
}

/// A path named in one file: where, in which module scope, whether as a `pub use`.
#[derive(Debug)]
struct PathRef {
    line: u32,
    /// The module the path is written in (the file's module plus inline `mod x { }` names).
    scope: Vec<String>,
    /// As written: `crate`/`super`/`self`/a child module first, then the segments.
    segments: Vec<String>,
    /// A `pub use` (a re-export), with the name it exports.
    reexport: Option<String>,
}

/// What one file declares and names.
#[derive(Debug, Default)]
struct FileScan {
    refs: Vec<PathRef>,
    /// `mod x;` at the file's top: the name, its `#[path]`, and whether it is test-only.
    children: Vec<(String, Option<String>, bool)>,
    /// `#![cfg(test)]` at the top of the file.
    test_only: bool,
}

fn ident(t: Option<&(Tok, u32)>) -> Option<&str> {
    match t {
        Some((Tok::Ident(s), _)) => Some(s),
        _ => None,
    }
}

fn punct(t: Option<&(Tok, u32)>, p: &str) -> bool {
    matches!(t, Some((Tok::Punct(s), _)) if s == p)
}

/// True for the tokens of a `cfg` attribute that holds only under test: `cfg(test)`,
/// `cfg(all(test, ..))`; not `cfg(not(test))` nor `cfg(any(test, ..))`.
fn is_test_cfg(attr: &[(Tok, u32)]) -> bool {
    let words: Vec<&str> = attr.iter().filter_map(|t| ident(Some(t))).collect();
    words.first() == Some(&"cfg")
        && words.contains(&"test")
        && !words.contains(&"not")
        && !words.contains(&"any")
}

/// Expands the `use` tree starting at `toks[*i]` into (segments, alias) pairs, leaving `*i`
/// after its closing `;`. A glob ends in `*`; `self` in a group names the group's prefix.
fn use_tree(
    toks: &[(Tok, u32)],
    i: &mut usize,
    prefix: &[String],
    out: &mut Vec<(Vec<String>, String)>,
) {
    let mut path = prefix.to_vec();
    loop {
        match toks.get(*i) {
            Some((Tok::Punct(p), _)) if p == "::" => *i += 1,
            Some((Tok::Punct(p), _)) if p == "{" => {
                *i += 1;
                loop {
                    use_tree(toks, i, &path, out);
                    match toks.get(*i) {
                        Some((Tok::Punct(p), _)) if p == "," => *i += 1,
                        _ => break,
                    }
                    if punct(toks.get(*i), "}") {
                        break;
                    }
                }
                *i += 1; // `}`
                return;
            }
            Some((Tok::Punct(p), _)) if p == "*" => {
                *i += 1;
                path.push("*".into());
                out.push((path, "*".into()));
                return;
            }
            Some((Tok::Ident(s), _)) if s == "as" => {
                let alias = ident(toks.get(*i + 1)).unwrap_or("_").to_string();
                *i += 2;
                out.push((path, alias));
                return;
            }
            Some((Tok::Ident(s), _))
                if s == "self" && !prefix.is_empty() && path.len() == prefix.len() =>
            {
                // `a::{self, ..}`: the prefix itself, under its own name
                *i += 1;
                if ident(toks.get(*i)) == Some("as") {
                    continue;
                }
                let name = path.last().cloned().unwrap_or_default();
                out.push((path, name));
                return;
            }
            Some((Tok::Ident(s), _)) => {
                path.push(s.clone());
                *i += 1;
            }
            _ => {
                if path.len() > prefix.len() {
                    let name = path.last().cloned().unwrap_or_default();
                    out.push((path, name));
                }
                return;
            }
        }
    }
}

/// The paths, child modules and test-only parts of one file whose module is `module`.
fn scan(src: &str, module: &[String]) -> FileScan {
    let toks = tokenize(src);
    let mut scan = FileScan::default();
    // (inline module name if a `mod x {`, test-only) per open `{`
    let mut scopes: Vec<(Option<String>, bool)> = Vec::new();
    // a `#[cfg(test)]` waiting for its item: (brace depth, paren depth) it was read at
    let mut pending_test: Option<(usize, usize)> = None;
    let mut pending_path: Option<String> = None;
    let mut parens = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let in_test = scan.test_only || pending_test.is_some() || scopes.iter().any(|s| s.1);
        let scope: Vec<String> = module
            .iter()
            .cloned()
            .chain(scopes.iter().filter_map(|s| s.0.clone()))
            .collect();
        let at_file_top = scopes.iter().all(|s| s.0.is_none());
        let (tok, line) = &toks[i];
        match tok {
            Tok::Punct(p) if p == "#" => {
                let inner = punct(toks.get(i + 1), "!");
                let open = i + 1 + usize::from(inner);
                if !punct(toks.get(open), "[") {
                    i += 1;
                    continue;
                }
                let mut depth = 0;
                let mut j = open;
                while j < toks.len() {
                    if punct(toks.get(j), "[") {
                        depth += 1;
                    } else if punct(toks.get(j), "]") {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    j += 1;
                }
                let attr = &toks[open + 1..j];
                if is_test_cfg(attr) {
                    if inner && scopes.is_empty() {
                        scan.test_only = true;
                    } else if !inner {
                        pending_test = Some((scopes.len(), parens));
                    }
                }
                if ident(attr.first()) == Some("path")
                    && let Some((Tok::Str(s), _)) = attr.get(2)
                {
                    pending_path = Some(s.clone());
                }
                i = j + 1;
            }
            Tok::Ident(s) if s == "mod" && ident(toks.get(i + 1)).is_some() => {
                let name = ident(toks.get(i + 1)).unwrap().to_string();
                if punct(toks.get(i + 2), "{") {
                    scopes.push((Some(name), in_test));
                    i += 3;
                } else {
                    if at_file_top {
                        scan.children.push((name, pending_path.take(), in_test));
                    }
                    i += 2;
                }
                pending_test = None;
                pending_path = None;
            }
            Tok::Ident(s) if s == "use" => {
                let public = {
                    // `pub use` or `pub(crate) use` / `pub(super) use`
                    let mut k = i;
                    if k > 0 && punct(toks.get(k - 1), ")") {
                        while k > 0 && !punct(toks.get(k - 1), "(") {
                            k -= 1;
                        }
                        k = k.saturating_sub(1);
                    }
                    k > 0 && ident(toks.get(k - 1)) == Some("pub")
                };
                let mut j = i + 1;
                let mut trees = Vec::new();
                use_tree(&toks, &mut j, &[], &mut trees);
                while j < toks.len() && !punct(toks.get(j), ";") {
                    j += 1;
                }
                if !in_test {
                    for (segments, alias) in trees {
                        scan.refs.push(PathRef {
                            line: *line,
                            scope: scope.clone(),
                            segments,
                            reexport: public.then_some(alias),
                        });
                    }
                }
                if pending_test.is_some_and(|(b, _)| b == scopes.len()) {
                    pending_test = None;
                }
                i = j + 1;
            }
            Tok::Ident(s)
                if punct(toks.get(i + 1), "::")
                    && !(i > 0
                        && (punct(toks.get(i - 1), "::") || punct(toks.get(i - 1), "$")))
                    && (matches!(s.as_str(), "crate" | "super" | "self")
                        || (at_file_top && scan.children.iter().any(|c| &c.0 == s))) =>
            {
                let mut segments = vec![s.clone()];
                let mut j = i + 1;
                while punct(toks.get(j), "::") {
                    match ident(toks.get(j + 1)) {
                        Some(seg) => segments.push(seg.to_string()),
                        None => break,
                    }
                    j += 2;
                }
                if !in_test {
                    scan.refs.push(PathRef {
                        line: *line,
                        scope,
                        segments,
                        reexport: None,
                    });
                }
                i = j;
            }
            Tok::Punct(p) if p == "{" => {
                let test = pending_test.is_some_and(|(b, _)| b == scopes.len());
                scopes.push((None, in_test || test));
                if test {
                    pending_test = None;
                }
                i += 1;
            }
            Tok::Punct(p) if p == "}" => {
                scopes.pop();
                if pending_test.is_some_and(|(b, _)| b > scopes.len()) {
                    pending_test = None;
                }
                i += 1;
            }
            Tok::Punct(p) if p == "(" || p == "[" => {
                parens += 1;
                i += 1;
            }
            Tok::Punct(p) if p == ")" || p == "]" => {
                parens = parens.saturating_sub(1);
                i += 1;
            }
            Tok::Punct(p) if p == ";" || p == "," => {
                if pending_test.is_some_and(|(b, pa)| b == scopes.len() && pa == parens) {
                    pending_test = None;
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    scan
}

/// One source file of the library.
#[derive(Debug)]
struct SourceFile {
    /// Relative to the crate root: `src/agent/mode.rs`.
    rel: PathBuf,
    /// Its module path: `["agent", "mode"]`; `[]` for `src/lib.rs`.
    module: Vec<String>,
    scan: FileScan,
    test_only: bool,
}

/// An import of one file by another.
#[derive(Debug, Clone)]
struct Edge {
    from: usize,
    to: usize,
    line: u32,
    path: String,
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path a file has by its place in `src/` (`#[path]` files are renamed later).
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .skip(1)
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs").to_string();
    if stem != "mod" && stem != "lib" {
        parts.push(stem);
    }
    parts
}

/// Reads every library file under `root/src` (not `src/bin/`), fixes up `#[path]` modules
/// and marks test-only files (declared under `#[cfg(test)]`, or below one that is).
fn load(root: &Path) -> Vec<SourceFile> {
    let mut paths = Vec::new();
    rs_files(&root.join("src"), &mut paths);
    let mut files: Vec<SourceFile> = paths
        .into_iter()
        .map(|p| p.strip_prefix(root).unwrap().to_path_buf())
        .filter(|rel| !rel.starts_with("src/bin"))
        .map(|rel| SourceFile {
            module: module_of(&rel),
            scan: FileScan::default(),
            test_only: false,
            rel,
        })
        .collect();
    // `#[path = "x.rs"] mod name;` in a file: x.rs, next to that file, is module `name` in it.
    let mut renamed = HashMap::new();
    for f in &mut files {
        let src = fs::read_to_string(root.join(&f.rel)).unwrap();
        f.scan = scan(&src, &module_of(&f.rel));
        for (name, path, _) in &f.scan.children {
            if let Some(p) = path {
                let target = f.rel.parent().unwrap().join(p);
                let mut module = f.module.clone();
                module.push(name.clone());
                renamed.insert(target, module);
            }
        }
    }
    for f in &mut files {
        if let Some(m) = renamed.remove(&f.rel) {
            f.module = m;
        }
    }
    // Test-only: a file whose own module, or an ancestor's, was declared `#[cfg(test)] mod`.
    let declared_test: BTreeSet<Vec<String>> = files
        .iter()
        .flat_map(|f| {
            f.scan.children.iter().filter(|c| c.2).map(|c| {
                let mut m = f.module.clone();
                m.push(c.0.clone());
                m
            })
        })
        .collect();
    for f in &mut files {
        f.test_only = f.scan.test_only
            || (1..=f.module.len()).any(|n| declared_test.contains(&f.module[..n]));
    }
    files
}

/// Every edge between two different files, paths through `pub use` followed to the file that
/// defines the item.
fn edges(files: &[SourceFile]) -> Vec<Edge> {
    let by_module: HashMap<&[String], usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.module.as_slice(), i))
        .collect();
    // (file, exported name) -> absolute path it names
    let mut reexports: HashMap<(usize, String), Vec<String>> = HashMap::new();
    let absolute = |f: &SourceFile, r: &PathRef| -> Option<Vec<String>> {
        let mut it = r.segments.iter();
        let first = it.next()?;
        let mut abs = match first.as_str() {
            "crate" => Vec::new(),
            "self" => r.scope.clone(),
            "super" => {
                let mut s = r.scope.clone();
                s.pop()?;
                s
            }
            child => {
                let mut s = f.module.clone();
                s.push(child.to_string());
                s
            }
        };
        let mut rest = it.peekable();
        while rest.peek().is_some_and(|s| *s == "super") {
            abs.pop()?;
            rest.next();
        }
        abs.extend(rest.filter(|s| *s != "self").cloned());
        Some(abs)
    };
    for (i, f) in files.iter().enumerate() {
        for r in &f.scan.refs {
            if let (Some(name), Some(abs)) = (&r.reexport, absolute(f, r))
                && name != "*"
            {
                reexports.insert((i, name.clone()), abs);
            }
        }
    }
    // The file that defines what `abs` names: its longest file-module prefix, through
    // re-exports (a bounded number of hops).
    let resolve = |abs: &[String]| -> Option<usize> {
        let mut abs = abs.to_vec();
        for _ in 0..8 {
            let n = (0..=abs.len())
                .rev()
                .find(|n| by_module.contains_key(&abs[..*n]))?;
            let file = by_module[&abs[..n]];
            match abs
                .get(n)
                .and_then(|name| reexports.get(&(file, name.clone())))
            {
                Some(target) if n < abs.len() => {
                    let mut next = target.clone();
                    next.extend(abs[n + 1..].iter().cloned());
                    abs = next;
                }
                _ => return Some(file),
            }
        }
        None
    };
    let mut out = Vec::new();
    for (i, f) in files.iter().enumerate() {
        if f.test_only {
            continue;
        }
        for r in &f.scan.refs {
            let Some(abs) = absolute(f, r) else { continue };
            let Some(to) = resolve(&abs) else { continue };
            // A module's `pub use` of its own descendants is its interface.
            let own = files[to].module.starts_with(&f.module);
            if to == i || (r.reexport.is_some() && own) {
                continue;
            }
            out.push(Edge {
                from: i,
                to,
                line: r.line,
                path: r.segments.join("::"),
            });
        }
    }
    out
}

/// The folder of `src/host` that `f` is in (a file directly in it counts as its own
/// folder), with its rank: its index in [`HOST_LAYERS`], or after them for an area. `None`
/// outside `src/host` and for `src/host/mod.rs`.
fn host_folder(f: &SourceFile) -> Option<(usize, &str)> {
    let [top, sub, rest @ ..] = f.module.as_slice() else {
        return None;
    };
    // `root` and `effects` sit in `host/seam/` (their common parent seals the write side).
    let sub = if sub == "seam" { rest.first()? } else { sub };
    let rank = HOST_LAYERS.iter().position(|l| l == sub);
    (top == "host").then(|| (rank.unwrap_or(HOST_LAYERS.len()), sub.as_str()))
}

/// The violations of [`LAYERS`] and of the no-cycle rule, keyed as [`KNOWN_VIOLATIONS`] words
/// them, each with its lines of detail (`file:line: edge`).
fn violations(files: &[SourceFile], edges: &[Edge]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let layers: HashMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    let loc = |e: &Edge| format!("{}:{}", files[e.from].rel.display(), e.line);
    // Between top-level modules.
    for e in edges {
        let (Some(a), Some(b)) = (files[e.from].module.first(), files[e.to].module.first()) else {
            continue;
        };
        if a == b {
            continue;
        }
        let allowed = layers.get(a.as_str()).copied().unwrap_or(&[]);
        if !allowed.contains(&b.as_str()) {
            out.entry(format!("{a} -> {b}")).or_default().push(format!(
                "{}: {a} -> {b} (`{}`), not in LAYERS: {a} may import {allowed:?}",
                loc(e),
                e.path
            ));
        }
    }
    // Between the folders of `src/host` (HOST_LAYERS).
    for e in edges {
        let (Some((ra, a)), Some((rb, b))) =
            (host_folder(&files[e.from]), host_folder(&files[e.to]))
        else {
            continue;
        };
        if ra < rb {
            out.entry(format!("host/{a} -> host/{b}"))
                .or_default()
                .push(format!(
                    "{}: host/{a} -> host/{b} (`{}`), against HOST_LAYERS {HOST_LAYERS:?} \
                     (the areas above them)",
                    loc(e),
                    e.path
                ));
        }
    }
    // Between the files of one folder (below `src/`, whose folders are the top-level modules
    // that LAYERS orders): a file in a subfolder counts as that subfolder.
    let mut folders: BTreeMap<PathBuf, BTreeMap<(String, String), &Edge>> = BTreeMap::new();
    for e in edges {
        let (from, to) = (&files[e.from].rel, &files[e.to].rel);
        let mut dir = from.parent().unwrap();
        while dir != Path::new("src") && !to.starts_with(dir) {
            dir = dir.parent().unwrap();
        }
        if dir == Path::new("src") {
            continue;
        }
        let node = |p: &Path| {
            let first = p.strip_prefix(dir).unwrap().iter().next().unwrap();
            first.to_string_lossy().trim_end_matches(".rs").to_string()
        };
        let (a, b) = (node(from), node(to));
        if a != b {
            folders
                .entry(dir.to_path_buf())
                .or_default()
                .entry((a, b))
                .or_insert(e);
        }
    }
    for (dir, graph) in &folders {
        for component in components(graph.keys()) {
            let mut detail = vec![format!("files {}", component.join(", "))];
            for ((a, b), e) in graph {
                if component.contains(a) && component.contains(b) {
                    detail.push(format!("{}: {a} -> {b} (`{}`)", loc(e), e.path));
                }
            }
            out.entry(format!("cycle in {}", dir.display()))
                .or_default()
                .extend(detail);
        }
    }
    out
}

/// The strongly connected components of more than one node (the files that import each
/// other in a cycle), each sorted.
fn components<'a>(edges: impl Iterator<Item = &'a (String, String)>) -> Vec<Vec<String>> {
    let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (a, b) in edges {
        next.entry(a).or_default().insert(b);
        next.entry(b).or_default();
    }
    // every node reachable from `from` in one step or more
    let reach = |from: &str| -> BTreeSet<&str> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from];
        while let Some(n) = todo.pop() {
            for &m in &next[n] {
                if seen.insert(m) {
                    todo.push(m);
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&str, BTreeSet<&str>> = next.keys().map(|&n| (n, reach(n))).collect();
    let mut done: BTreeSet<String> = BTreeSet::new();
    let mut out = Vec::new();
    for (&n, from_n) in &reached {
        if done.contains(n) || !from_n.contains(n) {
            continue;
        }
        let component: Vec<String> = from_n
            .iter()
            .filter(|m| reached[**m].contains(n))
            .map(|m| m.to_string())
            .collect();
        done.extend(component.iter().cloned());
        out.push(component);
    }
    out
}

fn crate_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Top-level modules of `src/`: its folders and its files but `lib.rs`.
fn top_level_modules(files: &[SourceFile]) -> BTreeSet<String> {
    files
        .iter()
        .filter_map(|f| f.rel.iter().nth(1))
        .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
        .filter(|m| m != "lib")
        .collect()
}

#[test]
fn layers_table_orders_every_module_and_has_no_cycle() {
    let files = load(&crate_root());
    let mut problems = Vec::new();
    let mut placed = BTreeSet::new();
    for (module, imports) in LAYERS {
        for import in *imports {
            if !placed.contains(import) {
                problems.push(format!(
                    "LAYERS: `{module}` may import `{import}`, which is not a row above it"
                ));
            }
        }
        if !placed.insert(*module) {
            problems.push(format!("LAYERS: `{module}` has two rows"));
        }
    }
    for m in top_level_modules(&files) {
        // test-only top-level modules (src/proptests.rs) have no layer
        let test_only = files
            .iter()
            .filter(|f| f.module.first() == Some(&m))
            .all(|f| f.test_only);
        if !test_only && !placed.contains(m.as_str()) {
            problems.push(format!(
                "src/{m}: a top-level module with no row in LAYERS (tests/layers.rs): give it one"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The problems of the crate at `root` against [`LAYERS`] and `known` (see
/// [`KNOWN_VIOLATIONS`]): each violation not in `known` with its `file:line: edge` lines, and
/// each entry of `known` that no longer occurs.
fn check(root: &Path, known: &[&str]) -> Vec<String> {
    let files = load(root);
    let found = violations(&files, &edges(&files));
    let mut problems = Vec::new();
    for (key, detail) in &found {
        if !known.contains(&key.as_str()) {
            problems.push(format!("{key}:\n  {}", detail.join("\n  ")));
        }
    }
    for known in known {
        if !found.contains_key(*known) {
            problems.push(format!(
                "KNOWN_VIOLATIONS lists `{known}`, which no longer occurs: remove it from tests/layers.rs"
            ));
        }
    }
    problems
}

#[test]
fn no_import_goes_up_a_layer_or_round_a_folder() {
    let problems = check(&crate_root(), KNOWN_VIOLATIONS);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A throwaway crate root holding `files` (path under it, content).
fn fake_crate(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }
    dir
}

#[test]
fn checker_names_the_file_line_and_edge_of_an_upward_import() {
    let dir = fake_crate(&[
        ("src/lib.rs", "pub mod package;\npub mod pyfmt;\n"),
        (
            "src/package/mod.rs",
            "pub mod model;\npub use model::ReturnCode;\n",
        ),
        ("src/package/model.rs", "pub struct ReturnCode;\n"),
        (
            "src/pyfmt.rs",
            "use std::fmt;\n\npub fn f(_: &crate::package::ReturnCode) {}\n",
        ),
    ]);
    assert_eq!(
        check(dir.path(), &[]),
        [
            "pyfmt -> package:\n  src/pyfmt.rs:3: pyfmt -> package (`crate::package::ReturnCode`), \
          not in LAYERS: pyfmt may import []"
        ]
    );
}

#[test]
fn checker_names_an_import_of_an_area_by_the_effects_seam() {
    let dir = fake_crate(&[
        ("src/lib.rs", "pub mod host;\n"),
        ("src/host/mod.rs", "pub mod effects;\npub mod files;\n"),
        ("src/host/effects/mod.rs", "pub mod session;\n"),
        (
            "src/host/effects/session.rs",
            "pub struct Host;\n\nfn f() { crate::host::files::fs::write() }\n",
        ),
        ("src/host/files/mod.rs", "pub mod fs;\n"),
        ("src/host/files/fs.rs", "pub fn write() {}\n"),
    ]);
    assert_eq!(
        check(dir.path(), &[]),
        [
            "host/effects -> host/files:\n  src/host/effects/session.rs:3: host/effects -> \
             host/files (`crate::host::files::fs::write`), against HOST_LAYERS [\"root\", \
             \"effects\", \"api\"] (the areas above them)"
        ]
    );
}

#[test]
fn checker_finds_a_cycle_between_the_files_of_a_folder() {
    let dir = fake_crate(&[
        ("src/lib.rs", "pub mod logs;\n"),
        (
            "src/logs/mod.rs",
            "pub mod a;\npub mod b;\npub mod c;\npub use a::A;\n",
        ),
        ("src/logs/a.rs", "use super::b::B;\npub struct A(B);\n"),
        (
            "src/logs/b.rs",
            "pub struct B;\npub fn f() -> super::c::C { todo!() }\n",
        ),
        // through the re-export in mod.rs, to a.rs
        ("src/logs/c.rs", "pub struct C(pub crate::logs::A);\n"),
    ]);
    assert_eq!(
        check(dir.path(), &[]),
        ["cycle in src/logs:\n  files a, b, c\n  \
          src/logs/a.rs:1: a -> b (`super::b::B`)\n  \
          src/logs/b.rs:2: b -> c (`super::c::C`)\n  \
          src/logs/c.rs:1: c -> a (`crate::logs::A`)"]
    );
    // listed as known, it passes; listed and gone, it fails
    assert_eq!(
        check(dir.path(), &["cycle in src/logs"]),
        Vec::<String>::new()
    );
    fs::write(dir.path().join("src/logs/c.rs"), "pub struct C;\n").unwrap();
    assert_eq!(
        check(dir.path(), &["cycle in src/logs"]),
        [
            "KNOWN_VIOLATIONS lists `cycle in src/logs`, which no longer occurs: remove it from tests/layers.rs"
        ]
    );
}

#[test]
fn checker_skips_comments_strings_and_test_code() {
    let dir = fake_crate(&[
        ("src/lib.rs", "pub mod agent;\npub mod chain;\n"),
        ("src/agent/mod.rs", "pub fn run() {}\n"),
        (
            "src/chain.rs",
            r##"//! [`crate::agent::run`] in a doc comment
/* crate::agent::run /* nested */ crate::agent::run */
pub fn f<'a>(s: &'a str) -> (&'a str, char, &'static str) {
    let _ = r#"crate::agent::run() " still inside"#;
    let _ = b"crate::agent::run";
    (s, '"', "crate::agent::run")
}
#[cfg(test)]
mod tests {
    use crate::agent::run;
}
#[cfg(test)]
mod more_tests;
#[cfg(test)]
fn helper() { crate::agent::run() }
#[cfg(not(test))]
pub fn g() { crate::agent::run() }
"##,
        ),
        ("src/chain/more_tests.rs", "use crate::agent::run;\n"),
    ]);
    assert_eq!(
        check(dir.path(), &[]),
        [
            "chain -> agent:\n  src/chain.rs:17: chain -> agent (`crate::agent::run`), \
          not in LAYERS: chain may import []"
        ]
    );
}

/// The markers around the copy of [`LAYERS`] in `docs/architecture.md`.
const DOC_BEGIN: &str = "<!-- BEGIN LAYERS (tests/layers.rs) -->\n";
const DOC_END: &str = "<!-- END LAYERS -->";

/// [`LAYERS`] as `docs/architecture.md` shows it: a Markdown table, one row per module,
/// lowest first, `—` for a leaf.
fn layers_markdown() -> String {
    let mut out = String::from("| module (lowest first) | may import |\n|---|---|\n");
    for (module, imports) in LAYERS {
        let imports = if imports.is_empty() {
            "—".to_string()
        } else {
            let names: Vec<String> = imports.iter().map(|m| format!("`{m}`")).collect();
            names.join(", ")
        };
        out.push_str(&format!("| `{module}` | {imports} |\n"));
    }
    out
}

/// `doc` with the text between [`DOC_BEGIN`] and [`DOC_END`] replaced by `table`, or why it
/// cannot be (a marker missing).
fn with_layers_table(doc: &str, table: &str) -> Result<String, String> {
    let start = doc
        .find(DOC_BEGIN)
        .ok_or_else(|| format!("no `{}` line", DOC_BEGIN.trim_end()))?
        + DOC_BEGIN.len();
    let end = start
        + doc[start..]
            .find(DOC_END)
            .ok_or_else(|| format!("no `{DOC_END}` line after `{}`", DOC_BEGIN.trim_end()))?;
    Ok(format!("{}{table}{}", &doc[..start], &doc[end..]))
}

#[test]
fn architecture_doc_shows_the_layers_table() {
    let path = crate_root().join("docs/architecture.md");
    let doc = fs::read_to_string(&path).unwrap();
    let want = with_layers_table(&doc, &layers_markdown())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if want == doc {
        return;
    }
    if std::env::var_os("SKYHOOK_UPDATE_DOCS").is_some() {
        fs::write(&path, want).unwrap();
        return;
    }
    panic!(
        "{}: the layers table is not LAYERS of tests/layers.rs; rewrite it with \
         `SKYHOOK_UPDATE_DOCS=1 cargo test --test tests layers`. LAYERS as the doc shows it:\n{}",
        path.display(),
        layers_markdown()
    );
}

#[test]
fn layers_table_copy_is_replaced_between_its_markers_only() {
    let doc = format!("# A\n\n{DOC_BEGIN}| old |\n{DOC_END}\n\nrest\n");
    assert_eq!(
        with_layers_table(&doc, "| new |\n").unwrap(),
        format!("# A\n\n{DOC_BEGIN}| new |\n{DOC_END}\n\nrest\n")
    );
    assert_eq!(
        with_layers_table("# A\n", "x").unwrap_err(),
        "no `<!-- BEGIN LAYERS (tests/layers.rs) -->` line"
    );
    assert_eq!(
        with_layers_table(&format!("{DOC_BEGIN}| old |\n"), "x").unwrap_err(),
        "no `<!-- END LAYERS -->` line after `<!-- BEGIN LAYERS (tests/layers.rs) -->`"
    );
    assert!(layers_markdown().contains("| `chain` | — |\n"));
    assert!(layers_markdown().contains("| `logs` | `host` |\n"));
}

/// `src/lib.rs`'s docs show [`LAYERS`] too: the same table between the same markers, each
/// line a `//! ` doc line.
#[test]
fn lib_docs_show_the_layers_table() {
    let path = crate_root().join("src/lib.rs");
    let text = fs::read_to_string(&path).unwrap();
    let doc = |s: &str| -> String {
        s.lines()
            .map(|l| {
                if l.is_empty() {
                    "//!\n".to_string()
                } else {
                    format!("//! {l}\n")
                }
            })
            .collect()
    };
    let (begin, end) = (doc(DOC_BEGIN), doc(DOC_END));
    let start = text
        .find(&begin)
        .unwrap_or_else(|| panic!("{}: no `{}` line", path.display(), begin.trim_end()))
        + begin.len();
    let stop = start
        + text[start..]
            .find(&end)
            .unwrap_or_else(|| panic!("{}: no `{}` line", path.display(), end.trim_end()));
    let want = format!(
        "{}{}{}",
        &text[..start],
        doc(&layers_markdown()),
        &text[stop..]
    );
    if want == text {
        return;
    }
    if std::env::var_os("SKYHOOK_UPDATE_DOCS").is_some() {
        fs::write(&path, want).unwrap();
        return;
    }
    panic!(
        "{}: the layers table is not LAYERS of tests/layers.rs; rewrite it with \
         `SKYHOOK_UPDATE_DOCS=1 cargo test --test tests layers`",
        path.display()
    );
}

/// Every edge [`LAYERS`] allows is used by some production file: an allowed edge nothing
/// takes is a promise the table does not need to make.
#[test]
fn layers_lists_only_edges_that_are_used() {
    let files = load(&crate_root());
    let used: BTreeSet<(String, String)> = edges(&files)
        .iter()
        .filter_map(|e| {
            let a = files[e.from].module.first()?;
            let b = files[e.to].module.first()?;
            (a != b).then(|| (a.clone(), b.clone()))
        })
        .collect();
    let mut unused = Vec::new();
    for (module, imports) in LAYERS {
        for import in *imports {
            if !used.contains(&(module.to_string(), import.to_string())) {
                unused.push(format!("{module} -> {import}"));
            }
        }
    }
    assert!(
        unused.is_empty(),
        "LAYERS (tests/layers.rs) allows edges no production file takes; remove them: {}",
        unused.join(", ")
    );
}

/// The most lines a production file under `src/` may have (issue 30: files of one idea).
const MAX_FILE_LINES: usize = 1000;

/// No production file (a file of `src/` that is not test-only: not a `*_tests.rs` module
/// declared under `#[cfg(test)]`, nor `#![cfg(test)]`) has more than [`MAX_FILE_LINES`].
#[test]
fn no_production_file_is_over_the_folder_limit() {
    let root = crate_root();
    let mut long = Vec::new();
    for f in load(&root) {
        if f.test_only {
            continue;
        }
        let lines = fs::read_to_string(root.join(&f.rel))
            .unwrap()
            .lines()
            .count();
        if lines > MAX_FILE_LINES {
            long.push(format!("{}: {lines} lines", f.rel.display()));
        }
    }
    assert!(
        long.is_empty(),
        "production files over {MAX_FILE_LINES} lines (split them along their ideas, tests to a \
         sibling *_tests.rs):\n{}",
        long.join("\n")
    );
}

/// Most files a folder of `src/` holds (subfolders not counted): a folder past it is split
/// into subfolders of one idea.
const MAX_FOLDER_FILES: usize = 20;

/// No folder under `src/` holds more than [`MAX_FOLDER_FILES`] files.
#[test]
fn no_folder_holds_more_than_the_folder_limit_of_files() {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        let mut files = 0;
        for e in fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                walk(&e.path(), out);
            } else {
                files += 1;
            }
        }
        if files > MAX_FOLDER_FILES {
            out.push(format!("{}: {files} files", dir.display()));
        }
    }
    let mut big = Vec::new();
    walk(&crate_root().join("src"), &mut big);
    assert!(
        big.is_empty(),
        "folders over {MAX_FOLDER_FILES} files (split them into subfolders of one idea):\n{}",
        big.join("\n")
    );
}

/// The text of an item's head for a report: its tokens from `toks[k]` (its keyword) up to
/// its body, parameters, type or value (`{ ( ; = :`), generics after `impl` left out.
fn item_head(toks: &[(Tok, u32)], mut k: usize) -> String {
    let mut out = String::new();
    // `pub(crate)`, `pub(in a::b)`
    if ident(toks.get(k)) == Some("pub") && punct(toks.get(k + 1), "(") {
        out.push_str("pub(");
        k += 2;
        while let Some((t, _)) = toks.get(k) {
            k += 1;
            match t {
                Tok::Punct(p) if p == ")" => break,
                Tok::Punct(p) => out.push_str(p),
                Tok::Ident(s) if s == "in" => out.push_str("in "),
                Tok::Ident(s) => out.push_str(s),
                _ => {}
            }
        }
        out.push(')');
    }
    let mut glue = out.is_empty();
    let mut angle = 0usize;
    while let Some((t, _)) = toks.get(k) {
        match t {
            Tok::Punct(p) if ["{", "(", ";", "=", ":"].contains(&p.as_str()) && angle == 0 => {
                break;
            }
            Tok::Ident(s) if s == "where" => break,
            Tok::Punct(p) if p == "<" && out.ends_with("impl") => angle += 1,
            Tok::Punct(p) if p == ">" && angle > 0 => angle -= 1,
            _ if angle > 0 => {}
            Tok::Ident(s) => {
                if !glue {
                    out.push(' ');
                }
                out.push_str(s);
                glue = false;
            }
            Tok::Punct(p) => {
                out.push_str(p);
                glue = matches!(p.as_str(), "::" | "<" | "&");
            }
            Tok::Str(_) | Tok::Other => {}
        }
        k += 1;
    }
    out
}

/// The items of the `src/**/mod.rs` files under `root` that are neither a declaration nor a
/// re-export, each as `file:first-last: head`. A `mod.rs` holds module docs, comments,
/// attributes, `mod x;` declarations (`#[cfg(test)]` ones too) and `use`/`pub use` only: its
/// logic lives in a file of its idea (issue 30).
fn mod_rs_logic(root: &Path) -> Vec<String> {
    let mut paths = Vec::new();
    rs_files(&root.join("src"), &mut paths);
    let mut out = Vec::new();
    for p in paths.iter().filter(|p| p.ends_with("mod.rs")) {
        let rel = p.strip_prefix(root).unwrap();
        let toks = tokenize(&fs::read_to_string(p).unwrap());
        // The index of the token closing the bracket opened at `toks[k]`.
        let close = |mut k: usize| {
            let mut depth = 0usize;
            while let Some((t, _)) = toks.get(k) {
                match t {
                    Tok::Punct(s) if ["(", "[", "{"].contains(&s.as_str()) => depth += 1,
                    Tok::Punct(s) if [")", "]", "}"].contains(&s.as_str()) => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                k += 1;
            }
            k
        };
        let mut i = 0;
        while i < toks.len() {
            // `#[..]`, `#![..]`, and a stray `;`
            if punct(toks.get(i), "#") {
                let k = if punct(toks.get(i + 1), "!") {
                    i + 2
                } else {
                    i + 1
                };
                i = close(k) + 1;
                continue;
            }
            if punct(toks.get(i), ";") {
                i += 1;
                continue;
            }
            let mut k = i;
            if ident(toks.get(k)) == Some("pub") {
                k += 1;
                if punct(toks.get(k), "(") {
                    k = close(k) + 1;
                }
            }
            // qualifiers: `const fn`, `async`, `unsafe`, `extern "C"` (`const X: T` is an item)
            while let Some(q @ ("async" | "unsafe" | "extern" | "const")) = ident(toks.get(k)) {
                let next = ident(toks.get(k + 1));
                if q == "const" && !matches!(next, Some("fn" | "unsafe" | "async" | "extern")) {
                    break;
                }
                k += 1;
                if matches!(toks.get(k), Some((Tok::Str(_), _))) {
                    k += 1;
                }
            }
            let kind = ident(toks.get(k)).unwrap_or("");
            let declaration = match kind {
                "use" => true,
                "mod" => punct(toks.get(k + 2), ";"),
                _ => false,
            };
            // The item ends at `;` outside brackets, or at the `}` closing its body (not for
            // items whose value may be a braced expression).
            let to_semicolon = matches!(kind, "use" | "const" | "static" | "type" | "let");
            let mut end = k;
            let mut depth = 0usize;
            while let Some((t, _)) = toks.get(end) {
                match t {
                    Tok::Punct(s) if ["(", "[", "{"].contains(&s.as_str()) => depth += 1,
                    Tok::Punct(s) if [")", "]", "}"].contains(&s.as_str()) => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 && s == "}" && !to_semicolon {
                            break;
                        }
                    }
                    Tok::Punct(s) if s == ";" && depth == 0 => break,
                    _ => {}
                }
                end += 1;
            }
            if !declaration {
                let first = toks[i].1;
                let last = toks[end.min(toks.len() - 1)].1;
                let lines = if first == last {
                    first.to_string()
                } else {
                    format!("{first}-{last}")
                };
                out.push(format!(
                    "{}:{lines}: `{}`",
                    rel.display(),
                    item_head(&toks, i)
                ));
            }
            i = end + 1;
        }
    }
    out
}

/// Every `src/**/mod.rs` only declares and re-exports (issue 30: "no `mod.rs` with logic
/// beyond declarations and re-exports").
#[test]
fn every_mod_rs_only_declares_and_reexports() {
    let found = mod_rs_logic(&crate_root());
    assert!(
        found.is_empty(),
        "mod.rs files hold items that are not a `mod` declaration or a `use` (move each to a \
         file of its idea and re-export it):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn mod_rs_checker_names_each_item_that_is_not_a_declaration() {
    let dir = fake_crate(&[
        ("src/lib.rs", "pub mod a;\nfn f() {}\n"),
        (
            "src/a/mod.rs",
            "//! Docs naming fn f() {}.\n#![allow(dead_code)]\npub mod b;\n#[cfg(test)]\nmod tests;\n\
             pub(crate) use b::{C, D as E};\n/// A thing.\n#[inline]\npub(crate) fn f() -> u8 {\n    1\n}\n\
             impl<T: Copy> fmt::Display for C<T> {}\nconst X: [u8; 2] = [1, 2];\n\
             pub const fn g() {}\nmacro_rules! m { () => {} }\nmod inline {}\nstruct S(u8);\n",
        ),
        ("src/a/b.rs", "pub fn g() {}\n"),
    ]);
    assert_eq!(
        mod_rs_logic(dir.path()),
        [
            "src/a/mod.rs:9-11: `pub(crate) fn f`",
            "src/a/mod.rs:12: `impl fmt::Display for C<T>`",
            "src/a/mod.rs:13: `const X`",
            "src/a/mod.rs:14: `pub const fn g`",
            "src/a/mod.rs:15: `macro_rules! m`",
            "src/a/mod.rs:16: `mod inline`",
            "src/a/mod.rs:17: `struct S`",
        ]
    );
}

/// The `src/...` paths named in `text`: a run of path characters after `src/` that is not
/// part of a longer word (so `tests/src/x` and `$src/x` are not read), up to a character
/// that cannot be in one; a trailing `.`, `,`, `:` or `)` is punctuation. Globs (`*`) and
/// placeholders (`<x>`, `…`, `...`) are left out.
fn src_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(i) = text[from..].find("src/") {
        let at = from + i;
        from = at + 4;
        let before = at.checked_sub(1).map(|j| bytes[j]);
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || b"_-/$.".contains(&c)) {
            continue;
        }
        let end = text[at..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || "_-./*<>…".contains(c)))
            .map_or(text.len(), |n| at + n);
        let path = text[at..end].trim_end_matches(['.', ',', ':']);
        if path.contains(['*', '<', '>', '…']) || path.contains("...") || path == "src/" {
            continue;
        }
        out.push(path.to_string());
    }
    out
}

/// The files a `src/` path named in prose may be found in: `src/**`, `docs/**`, the README.
fn prose_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            prose_files(&p, out);
        } else if p
            .extension()
            .is_some_and(|x| x == "rs" || x == "md" || x == "json" || x == "rhai")
        {
            out.push(p);
        }
    }
}

/// Every `src/...` path named in a comment or a doc (`src/**`, `docs/**`, `README.md`)
/// exists: a renamed or split file leaves no comment pointing at its old name.
#[test]
fn every_src_path_named_in_a_comment_or_doc_exists() {
    let root = crate_root();
    let mut files = Vec::new();
    prose_files(&root.join("src"), &mut files);
    prose_files(&root.join("docs"), &mut files);
    files.push(root.join("README.md"));
    let mut missing = Vec::new();
    for f in files {
        let Ok(text) = fs::read_to_string(&f) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            for p in src_paths(line) {
                if !root.join(&p).exists() {
                    let rel = f.strip_prefix(&root).unwrap();
                    missing.push(format!("{}:{}: {p}", rel.display(), n + 1));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "paths named that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn src_paths_are_read_from_prose() {
    assert_eq!(
        src_paths("see `src/host/root/mod.rs`, and src/agent/ (src/x.rs). tests/src/no.rs"),
        ["src/host/root/mod.rs", "src/agent/", "src/x.rs"]
    );
    assert_eq!(
        src_paths("src/**.rs, src/<area>/x.rs, src/…, $src/a.rs"),
        Vec::<String>::new()
    );
}

// ---- the effects seam: no area names a mutating root operation or the mode ----

/// The write side of `HostRoot` (`src/host/seam/root/write.rs`, `tree.rs`, `confine.rs`'s rename):
/// an area that called one would change the host past its session's executor.
const ROOT_WRITES: &[&str] = &[
    "create_dir_all",
    "create_new",
    "create_excl",
    "write_target",
    "write_atomic",
    "write_atomic_owned",
    "write_atomic_from",
    "write_atomic_synced",
    "write_in_place",
    "sync_dir",
    "sync_dir_checked",
    "remove_file",
    "remove_dir",
    "remove_all",
    "rename",
    "rename_noreplace",
    "rename_raw",
    "set_mode",
    "set_owner",
    "set_mtime",
    "symlink",
    "open_write",
    "sweep_stale_tmps",
];

/// Names an area never uses: the root type itself (an area holds a session and its read view,
/// `RootReads`), the door to the agent's own files (`AgentFiles`, public for `state/`,
/// `logs/`, `mode/`, `agent/`), the root's own writers of locks, staging and deferred-work records, and the
/// session's mode tests.
const SEAM_NAMES: &[&str] = &[
    "HostRoot",
    "AgentFiles",
    "test_doors",
    "may_stage",
    "renders_diffs",
    "lock_pwd",
    "lock_root",
    "record_daemon_reload",
    "record_grub",
    "record_initramfs",
];

/// The session's fields (`src/host/seam/effects/session/host.rs`), private to `effects`.
const SESSION_FIELDS: &[&str] = &[
    "cx",
    "executor",
    "hashes",
    "texts",
    "pending_daemon_reload",
    "pending_grub",
    "recorded_reload",
    "recorded_grub",
    "pending_initramfs",
    "recorded_initramfs",
    "package_index_stale",
    "appended",
    "batch",
    "hold_write",
    "line_write",
    "recorded",
    "planned_commands",
    "first_unplanned",
];

/// The places an area's production code (not its tests) reaches past the effects seam, as
/// `file:line: what`: a name of [`SEAM_NAMES`], a method call `.w(` of [`ROOT_WRITES`], the
/// session's mode (`h.mode()`, `host.mode()`, `h.report().mode`), or a session field (`h.pending_grub`, not a
/// method call). The compiler holds the line (`Host::root` hands out `RootReads`, without a
/// writing method; `HostRoot`'s writes and the root's lock, staging and record writers are
/// `pub(in crate::host::seam)`, a module the areas are outside of; `Host::mode` and the
/// fields are `pub(in crate::host::seam::effects)`); this check documents it, names the
/// offender when a visibility is widened, and holds the one public door, `AgentFiles`.
fn seam_breaches(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for f in load(root) {
        let area = host_folder(&f).is_some_and(|(rank, _)| rank == HOST_LAYERS.len());
        if !area || f.test_only {
            continue;
        }
        let toks = tokenize(&fs::read_to_string(root.join(&f.rel)).unwrap());
        let mut i = 0;
        while i < toks.len() {
            // `#[cfg(test)]` and the item it guards are test code: skipped whole.
            if punct(toks.get(i), "#") && punct(toks.get(i + 1), "[") {
                let end = (i..toks.len())
                    .find(|&k| punct(toks.get(k), "]"))
                    .unwrap_or(toks.len());
                if is_test_cfg(&toks[i + 2..end]) {
                    let mut k = end + 1;
                    while k < toks.len() && !punct(toks.get(k), "{") && !punct(toks.get(k), ";") {
                        k += 1;
                    }
                    if punct(toks.get(k), "{") {
                        let mut depth = 0usize;
                        while k < toks.len() {
                            if punct(toks.get(k), "{") {
                                depth += 1;
                            } else if punct(toks.get(k), "}") {
                                depth -= 1;
                                if depth == 0 {
                                    break;
                                }
                            }
                            k += 1;
                        }
                    }
                    i = k + 1;
                    continue;
                }
            }
            let line = toks[i].1;
            let name = ident(toks.get(i));
            let after_dot = i > 0 && punct(toks.get(i - 1), ".");
            let called = punct(toks.get(i + 1), "(");
            let what = match name {
                Some(n) if SEAM_NAMES.contains(&n) => Some(format!("names `{n}`")),
                Some(n) if after_dot && called && ROOT_WRITES.contains(&n) => {
                    Some(format!("calls the root write `.{n}(`"))
                }
                Some("mode")
                    if after_dot
                        && called
                        && punct(toks.get(i + 2), ")")
                        && matches!(ident(toks.get(i.wrapping_sub(2))), Some("h" | "host")) =>
                {
                    Some("asks the session's mode (`.mode()`)".to_string())
                }
                Some("mode")
                    if after_dot
                        && !called
                        && punct(toks.get(i.wrapping_sub(2)), ")")
                        && punct(toks.get(i.wrapping_sub(3)), "(")
                        && ident(toks.get(i.wrapping_sub(4))) == Some("report")
                        && matches!(ident(toks.get(i.wrapping_sub(6))), Some("h" | "host")) =>
                {
                    Some(
                        "reads the session's mode through its report (`.report().mode`)"
                            .to_string(),
                    )
                }
                Some(n)
                    if after_dot
                        && !called
                        && SESSION_FIELDS.contains(&n)
                        && matches!(ident(toks.get(i.wrapping_sub(2))), Some("h" | "host")) =>
                {
                    Some(format!("touches the session field `.{n}`"))
                }
                _ => None,
            };
            if let Some(what) = what {
                out.push(format!("{}:{line}: {what}", f.rel.display()));
            }
            i += 1;
        }
    }
    out
}

#[test]
fn no_area_names_a_mutating_root_operation_or_the_mode() {
    let found = seam_breaches(&crate_root());
    assert!(
        found.is_empty(),
        "areas reach past the effects seam (submit an effect, or ask the session a \
         question that is not its mode):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn seam_checker_names_each_breach_and_skips_comments_and_tests() {
    let dir = fake_crate(&[
        ("src/lib.rs", "pub mod host;\n"),
        ("src/host/mod.rs", "pub mod files;\n"),
        ("src/host/files/mod.rs", "pub mod fs;\n"),
        (
            "src/host/files/fs.rs",
            "// h.root().write_atomic(p) in a comment\n\
             fn a(h: &mut Host) { if h.mode() == Apply { h.pending_grub = x; } }\n\
             fn b(r: &HostRoot) { r.write_atomic(p, b\"\", None); h.pending_grub(); }\n\
             fn c(e: &Entry) { e.header().mode(); h.may_stage(); }\n\
             fn d(h: &Host) { if h.report().mode == Apply {} r.report().mode; }\n\
             #[cfg(test)]\nmod tests { fn t(r: &HostRoot) { r.remove_file(p); } }\n",
        ),
    ]);
    assert_eq!(
        seam_breaches(dir.path()),
        [
            "src/host/files/fs.rs:2: asks the session's mode (`.mode()`)",
            "src/host/files/fs.rs:2: touches the session field `.pending_grub`",
            "src/host/files/fs.rs:3: names `HostRoot`",
            "src/host/files/fs.rs:3: calls the root write `.write_atomic(`",
            "src/host/files/fs.rs:4: names `may_stage`",
            "src/host/files/fs.rs:5: reads the session's mode through its report (`.report().mode`)",
        ]
    );
}
