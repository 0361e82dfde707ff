//! One evaluation of a compiled step on the calling thread: the run's engine (limits,
//! deadline and cancel checked in `on_progress`), `print`/`debug`/`log::` capped, the `step`
//! context, `fail()`, `changed()`, the host API bindings and the run-time module resolver;
//! then the script's value as a return code, or its error at `file:line:col`. The step
//! layer (`step::run`) gives it its own thread, stack, deadline and cancel token.

use std::sync::Arc;
use std::time::Instant;

use rhai::{Dynamic, EvalAltResult, NativeCallContext, Position, Scope};

use super::bindings::{RunHandle, ScriptHost};
use super::compile::CompiledScript;
use super::context::{self, StepContext};
use super::engine::ScriptEngine;
use super::errors::{ScriptError, ScriptErrorKind, Stop};
use super::limits::Limits;
use super::output::{self, ScriptOutput};
use super::resolver::RunResolver;
use crate::process::Cancel;

/// What one evaluation runs with besides the script and its context.
#[derive(Clone, Copy)]
pub struct Evaluation<'a> {
    /// Where `print`, `debug` and `log::` go (capped at [`Limits::max_output`]).
    pub output: &'a Arc<dyn ScriptOutput>,
    /// Ends the evaluation when set (checked every few hundred operations).
    pub cancel: &'a Cancel,
    /// The host API bindings.
    pub host: &'a Arc<dyn ScriptHost>,
    /// The run's limits (its timeout already turned into `deadline`).
    pub limits: &'a Limits,
    /// When the evaluation fails with the deadline error.
    pub deadline: Instant,
}

/// Evaluate `script` with `step` (the context map) as a top-level constant: `Ok` with the
/// return code (the script's value when it is an integer that fits an `i32`, else 0), or
/// the error that ended it (a script error, `fail()`, a hit limit, the deadline, a cancel).
///
/// # Errors
/// As above; the caller turns the error into the step's failure.
pub fn evaluate(
    engine: &ScriptEngine,
    script: &CompiledScript,
    ctx: &StepContext,
    run: &Evaluation<'_>,
) -> Result<i32, ScriptError> {
    let Evaluation {
        output,
        cancel,
        host,
        limits,
        deadline,
    } = *run;
    let out = Arc::new(output::CappedOutput::new(output.clone(), limits.max_output));
    let mut e = engine.run_engine(deadline, cancel.clone(), out.clone());
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
    let changed = host.clone();
    e.register_fn("changed", move || changed.changed());
    let handle = RunHandle {
        deadline,
        cancel: cancel.clone(),
        output: output.clone(),
    };
    host.register(&mut e, &handle);
    e.set_module_resolver(RunResolver::new(script.modules().clone()));

    let mut scope = Scope::new();
    scope.push_constant("step", step);
    let result = e
        .eval_ast_with_scope::<Dynamic>(&mut scope, script.ast())
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
                Ok(code) => Ok(code),
                Err(_) => Err(ScriptError::new(
                    script.file(),
                    ScriptErrorKind::Runtime,
                    format!("script returned {n}, which is not a valid return code"),
                )),
            },
            Err(_) => Ok(0),
        },
        Err(err) => {
            let mut error = ScriptError::from_eval(script.file(), err, limits);
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
            Err(error)
        }
    }
}
