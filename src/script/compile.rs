//! Compiling a step ahead of time: the script parsed and every static import resolved and
//! compiled before anything on the host is written, so a step that cannot parse or import
//! fails before its run. Running a compiled step is the step layer's (`step::run`).

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use rhai::AST;

use super::engine::ScriptEngine;
use super::errors::{ScriptError, ScriptErrorKind};
use super::resolver::{LoadError, ModuleStore, read_regular, static_imports};

/// A step script that parsed, with every static import resolved and compiled.
#[derive(Debug, Clone)]
pub struct CompiledScript {
    file: String,
    ast: AST,
    modules: Arc<ModuleStore>,
}

impl CompiledScript {
    /// The script's file name as used in errors (the path as given to [`compile_step`]).
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The module store its imports resolve in.
    pub fn modules(&self) -> &Arc<ModuleStore> {
        &self.modules
    }

    /// The calls `ns::f(...)` of namespace `ns` in this script itself (not its imports),
    /// with their function names and positions (`line`, `column`), in source order. Used to
    /// find what a step can request, e.g. `interrupt::reboot`.
    pub fn namespaced_calls(&self, ns: &str) -> Vec<(String, usize, usize)> {
        let mut found = Vec::new();
        self.ast.walk(&mut |path: &[rhai::ASTNode]| {
            let call = match path.last() {
                Some(rhai::ASTNode::Expr(rhai::Expr::FnCall(call, pos)))
                | Some(rhai::ASTNode::Stmt(rhai::Stmt::FnCall(call, pos))) => Some((call, pos)),
                _ => None,
            };
            if let Some((call, pos)) = call
                && call.namespace.path.len() == 1
                && call.namespace.path[0].name == ns
            {
                found.push((
                    call.name.to_string(),
                    pos.line().unwrap_or(0),
                    pos.position().unwrap_or(0),
                ));
            }
            true
        });
        found
    }

    /// The compiled AST (what the static checker walks).
    pub fn ast(&self) -> &AST {
        &self.ast
    }
}

/// Compile the step script at `path`, resolving its imports under `base_dir`.
///
/// Parses the script, then resolves and compiles every static import (`import "..."` with a
/// string literal, also inside functions) and, recursively, theirs; nothing is evaluated.
/// So a step that would fail to parse or import fails here, before the agent writes any
/// state. Imports computed at run time are resolved when executed.
///
/// # Errors
/// [`ScriptErrorKind::Io`] when the file cannot be read (or is not a regular file, or is
/// larger than [`MAX_SCRIPT_BYTES`](super::MAX_SCRIPT_BYTES)); [`ScriptErrorKind::Syntax`] or
/// a parse-time [`ScriptErrorKind::Limit`] at the position in the script or module;
/// [`ScriptErrorKind::Import`] at the `import` statement that cannot be resolved or is
/// cyclic.
pub fn compile_step(
    engine: &ScriptEngine,
    path: &Path,
    base_dir: &Path,
) -> Result<CompiledScript, ScriptError> {
    compile_step_in(engine, path, Arc::new(ModuleStore::new(base_dir)))
}

/// [`compile_step`] with a given module store, so that every step of a package shares one
/// cache of compiled modules.
///
/// # Errors
/// As [`compile_step`].
pub fn compile_step_in(
    engine: &ScriptEngine,
    path: &Path,
    modules: Arc<ModuleStore>,
) -> Result<CompiledScript, ScriptError> {
    let (file, source) = read_step_source(path)?;
    compile_source(engine, &file, &source, modules)
}

/// Read the step script at `path`: its name for errors (the path as given) and its text.
///
/// # Errors
/// [`ScriptErrorKind::Io`] naming the file (missing, not a regular file, too large, not
/// UTF-8).
pub(crate) fn read_step_source(path: &Path) -> Result<(String, String), ScriptError> {
    let file = path.display().to_string();
    let source = read_script(path).map_err(|e| {
        let mut err = ScriptError::new(
            file.clone(),
            ScriptErrorKind::Io,
            format!("cannot read script: {e}"),
        );
        err.source = Some(e);
        err
    })?;
    Ok((file, source))
}

/// Compile script text `source` whose file name (for errors) is `file`, resolving imports in
/// `modules`. As [`compile_step`] without reading a file.
///
/// # Errors
/// As [`compile_step`], except [`ScriptErrorKind::Io`] for the script itself.
pub fn compile_source(
    engine: &ScriptEngine,
    file: &str,
    source: &str,
    modules: Arc<ModuleStore>,
) -> Result<CompiledScript, ScriptError> {
    let limits = engine.limits();
    let mut ast = engine
        .compiler()
        .compile(source)
        .map_err(|e| ScriptError::from_parse(file, &e, limits))?;
    ast.set_source(file);
    let mut stack = vec![file.to_string()];
    let mut done = HashSet::new();
    check_imports(engine, &modules, file, &ast, &mut stack, &mut done)?;
    Ok(CompiledScript {
        file: file.to_string(),
        ast,
        modules,
    })
}

pub(crate) fn read_script(path: &Path) -> std::io::Result<String> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    read_regular(f)
}

fn check_imports(
    engine: &ScriptEngine,
    modules: &ModuleStore,
    importer: &str,
    ast: &AST,
    stack: &mut Vec<String>,
    done: &mut HashSet<String>,
) -> Result<(), ScriptError> {
    for (spec, pos) in static_imports(ast) {
        let module = match modules.load(engine.compiler(), &spec) {
            Ok(m) => m,
            Err(LoadError::NotFound(msg)) => {
                return Err(ScriptError::new(importer, ScriptErrorKind::Import, msg).at(pos));
            }
            Err(LoadError::Syntax { file, err }) => {
                return Err(ScriptError::from_parse(&file, &err, engine.limits()));
            }
        };
        if stack.contains(&module.file) {
            let mut chain = stack.clone();
            chain.push(module.file.clone());
            return Err(ScriptError::new(
                importer,
                ScriptErrorKind::Import,
                format!(
                    "cannot import {spec:?}: cyclic import ({})",
                    chain.join(" -> ")
                ),
            )
            .at(pos));
        }
        if done.contains(&module.file) {
            continue;
        }
        stack.push(module.file.clone());
        check_imports(engine, modules, &module.file, &module.ast, stack, done)?;
        stack.pop();
        done.insert(module.file.clone());
    }
    Ok(())
}
