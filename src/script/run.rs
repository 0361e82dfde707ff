//! Compiling a step ahead of time and running it.

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rhai::{AST, Dynamic, EvalAltResult, NativeCallContext, Position, Scope};

use super::bindings::{NoHost, RunHandle, ScriptHost};
use super::context::{self, StepContext};
use super::engine::ScriptEngine;
use super::errors::{ScriptError, ScriptErrorKind, Stop};
use super::limits::Limits;
use super::output::{self, ScriptOutput};
use super::resolver::{LoadError, ModuleStore, RunResolver, read_regular, static_imports};

/// Stack of the thread a script runs on. Rhai's evaluator recurses per call level and per
/// expression level; with the limits in [`Limits`] a debug build needs a few MiB at most.
/// The memory is reserved, not committed, so the margin is free.
pub const SCRIPT_STACK_BYTES: usize = 64 * 1024 * 1024;

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

/// How a run ended.
///
/// A run *failed* if and only if `error` is `Some`: a script error, `fail()`, a hit limit,
/// the deadline or a cancel always fail the step, whatever `code` and the step's
/// `returncodes` say. `code` is then 1.
#[derive(Debug)]
pub struct ScriptOutcome {
    /// The step's return code: the script's value when it is an integer (that fits an
    /// `i32`), 0 for any other value, 1 after an error.
    pub code: i32,
    /// Why the run failed, if it did.
    pub error: Option<ScriptError>,
}

impl ScriptOutcome {
    /// True when the run failed (see the type's docs).
    pub fn failed(&self) -> bool {
        self.error.is_some()
    }
}

/// Everything a run needs besides the script and its context.
#[derive(Clone)]
pub struct RunOptions {
    /// Where `print`, `debug`, `log::` and the final error go.
    pub output: Arc<dyn ScriptOutput>,
    /// Cancels the run when set (checked every few hundred operations).
    pub cancel: crate::process::Cancel,
    /// The host API bindings ([`NoHost`] for none).
    pub host: Arc<dyn ScriptHost>,
    /// Overrides the engine's [`Limits::timeout`] for this run.
    pub timeout: Option<Duration>,
}

impl RunOptions {
    /// Options with no host API and the engine's timeout.
    pub fn new(output: Arc<dyn ScriptOutput>, cancel: crate::process::Cancel) -> Self {
        RunOptions {
            output,
            cancel,
            host: Arc::new(NoHost),
            timeout: None,
        }
    }
}

/// Run a compiled step with no host API. See [`run_script_with`].
pub fn run_script(
    engine: &ScriptEngine,
    script: &CompiledScript,
    ctx: &StepContext,
    output: Arc<dyn ScriptOutput>,
    cancel: crate::process::Cancel,
) -> ScriptOutcome {
    run_script_with(engine, script, ctx, &RunOptions::new(output, cancel))
}

/// Run a compiled step: evaluate it with `step` (the context map) as a top-level constant,
/// output to `opts.output`, the host API from `opts.host`, until it ends, fails, hits a
/// limit, passes its deadline (`opts.timeout`, else the engine's) or is cancelled.
///
/// The script runs on its own thread with a [`SCRIPT_STACK_BYTES`] stack (the calling
/// thread blocks until it ends), so the depth limits hold whatever the caller's stack.
/// Joining that thread is the last-resort `catch_unwind`: a panic inside Rhai or a host
/// binding becomes a [`ScriptErrorKind::Internal`] error, never the agent's crash (this
/// relies on the default `panic = "unwind"`).
///
/// An error is also written to the stderr sink as `file:line:col: message\n`.
pub fn run_script_with(
    engine: &ScriptEngine,
    script: &CompiledScript,
    ctx: &StepContext,
    opts: &RunOptions,
) -> ScriptOutcome {
    let mut limits = engine.limits().clone();
    if let Some(t) = opts.timeout {
        limits.timeout = t;
    }
    let deadline = Instant::now() + limits.timeout;
    let limits = &limits;
    let outcome = std::thread::scope(|s| {
        let spawned = std::thread::Builder::new()
            .name("skyhook-script".to_string())
            .stack_size(SCRIPT_STACK_BYTES)
            .spawn_scoped(s, {
                let span = tracing::Span::current();
                move || {
                    let _entered = span.enter();
                    evaluate(engine, script, ctx, opts, limits, deadline)
                }
            });
        match spawned {
            Ok(handle) => handle.join().unwrap_or_else(|panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".to_string());
                internal(script, format!("script runtime panicked: {what}"))
            }),
            Err(e) => internal(script, format!("cannot start the script thread: {e}")),
        }
    });
    if let Some(err) = &outcome.error {
        opts.output.stderr(format!("{err}\n").as_bytes());
    }
    outcome
}

fn internal(script: &CompiledScript, message: String) -> ScriptOutcome {
    ScriptOutcome {
        code: 1,
        error: Some(ScriptError::new(
            script.file.clone(),
            ScriptErrorKind::Internal,
            message,
        )),
    }
}

fn evaluate(
    engine: &ScriptEngine,
    script: &CompiledScript,
    ctx: &StepContext,
    opts: &RunOptions,
    limits: &Limits,
    deadline: Instant,
) -> ScriptOutcome {
    let out = Arc::new(output::CappedOutput::new(
        opts.output.clone(),
        limits.max_output,
    ));
    let mut e = engine.run_engine(deadline, opts.cancel.clone(), out.clone());
    output::register(&mut e, out.clone());
    let step = ctx.to_map();
    context::register(&mut e, step.clone(), Arc::new(ctx.env.clone()));
    e.register_fn(
        "fail",
        |ctx: NativeCallContext, msg: Dynamic| -> Result<(), Box<EvalAltResult>> {
            let text = match msg.clone().into_immutable_string() {
                Ok(s) => s.to_string(),
                Err(_) => msg.to_string(),
            };
            let at = Some((
                ctx.call_source().unwrap_or_default().to_string(),
                ctx.call_position(),
            ));
            Err(Box::new(EvalAltResult::ErrorTerminated(
                Dynamic::from(Stop::Fail(text, at)),
                Position::NONE,
            )))
        },
    );
    let host = opts.host.clone();
    e.register_fn("changed", move || host.changed());
    let handle = RunHandle {
        deadline,
        cancel: opts.cancel.clone(),
        output: opts.output.clone(),
    };
    opts.host.register(&mut e, &handle);
    e.set_module_resolver(RunResolver::new(script.modules.clone()));

    let mut scope = Scope::new();
    scope.push_constant("step", step);
    let result = e
        .eval_ast_with_scope::<Dynamic>(&mut scope, &script.ast)
        .and_then(|value| {
            // A `print` past the limit as the script's last operation: nothing ran after it
            // to stop the run.
            if out.exceeded() {
                Err(output::output_stop(Position::NONE))
            } else {
                Ok(value)
            }
        });
    match result {
        Ok(value) => match value.as_int() {
            Ok(n) => match i32::try_from(n) {
                Ok(code) => ScriptOutcome { code, error: None },
                Err(_) => ScriptOutcome {
                    code: 1,
                    error: Some(ScriptError::new(
                        script.file.clone(),
                        ScriptErrorKind::Runtime,
                        format!("script returned {n}, which is not a valid return code"),
                    )),
                },
            },
            Err(_) => ScriptOutcome {
                code: 0,
                error: None,
            },
        },
        Err(err) => {
            let mut error = ScriptError::from_eval(&script.file, err, limits);
            // A host function called with arguments no overload takes: name the parameter, at
            // the column `check` gives (the call's start, `mount::…`; Rhai points at the
            // function's name after the namespace).
            if error.kind == ScriptErrorKind::Runtime
                && let Some(m) =
                    super::host_api::explain_not_found(&error.message, super::host_api::FUNCTIONS)
            {
                let namespace = error
                    .message
                    .split_once(": ")
                    .and_then(|(_, sig)| sig.split_once(" ("))
                    .and_then(|(name, _)| name.rsplit_once("::"))
                    .map_or(0, |(ns, _)| ns.len() + 2);
                if let Some(c) = error.column.filter(|c| *c > namespace) {
                    error.column = Some(c - namespace);
                }
                error.message = m;
            }
            ScriptOutcome {
                code: 1,
                error: Some(error),
            }
        }
    }
}
