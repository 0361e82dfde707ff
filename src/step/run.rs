//! The one step runner: how a step runs once its front end has stated it.
//!
//! - [`run_script_with`]: a compiled `.rhai` script on a script thread with a fixed stack
//!   ([`SCRIPT_STACK_BYTES`](super::SCRIPT_STACK_BYTES), reused from run to run: `script_thread`), its deadline and
//!   cancel token → [`ScriptOutcome`]; on that
//!   thread one evaluation: the run's engine (limits, deadline and cancel checked in
//!   `on_progress`), capped output, the `step` context, `fail()`, `changed()`, the host
//!   API bindings and the run-time module resolver, then the script's value as a return
//!   code or its error at `file:line:col`.
//! - [`ScriptStep::run`]: a `.rhai` step on its host session, for every front end (agent,
//!   dry run, `serve`, `skyhook-run SCRIPT`): the script, then the end of the step (deferred
//!   work, directory syncs, or the undo of a failed step), judged into a [`StepResult`].
//! - [`ScriptRunner::run_step`]: the agent's `.rhai` step: a new session, output relayed
//!   like a process's ([`SinkOutput`]), the script on the blocking pool.
//! - [`AgentRunner`]: the agent's [`StepRunner`]: a `.rhai` step on the [`ScriptRunner`], a
//!   process step on the [`ProcessRunner`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use rhai::{Dynamic, Position, Scope};

use crate::host::root::HostRoot;
use crate::host::root::error::HostError;
use crate::host::{ExecMode, Report, StartMemo};
use crate::logs::sink::{Label, LogFormat, StreamSink};
use crate::process::Cancel;
use crate::script::bindings::{NoHost, RunHandle, ScriptHost};
use crate::script::compile::CompiledScript;
use crate::script::context::{self, StepContext};
use crate::script::engine::ScriptEngine;
use crate::script::errors::{ScriptError, ScriptErrorKind};
use crate::script::host_api::HostApi;
use crate::script::limits::Limits;
use crate::script::output::{self, ScriptOutput};
use crate::script::resolver::RunResolver;

use super::invocation::{
    ConsoleStreams, StepInvocation, StepProgram, StepResult, StepRunner, log_error_lines,
};
use super::output::{SinkOutput, local_now};
use super::process::ProcessRunner;
use super::script_thread::{ThreadError, on_script_thread};
use super::spec::StepSpec;

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
pub struct ScriptRunOptions {
    /// Where `print`, `debug`, `log::` and the final error go.
    pub output: Arc<dyn ScriptOutput>,
    /// Cancels the run when set (checked every few hundred operations).
    pub cancel: crate::process::Cancel,
    /// The host API bindings ([`NoHost`] for none).
    pub host: Arc<dyn ScriptHost>,
    /// Overrides the engine's [`Limits::timeout`](crate::script::Limits::timeout) for this run.
    pub timeout: Option<Duration>,
}

impl ScriptRunOptions {
    /// Options with no host API and the engine's timeout.
    pub fn new(output: Arc<dyn ScriptOutput>, cancel: crate::process::Cancel) -> Self {
        ScriptRunOptions {
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
    run_script_with(engine, script, ctx, &ScriptRunOptions::new(output, cancel))
}

/// Run a compiled step: evaluate it with `step` (the context map) as a top-level constant,
/// output to `opts.output`, the host API from `opts.host`, until it ends, fails, hits a
/// limit, passes its deadline (`opts.timeout`, else the engine's) or is cancelled.
///
/// The script runs on a script thread with a [`SCRIPT_STACK_BYTES`](super::SCRIPT_STACK_BYTES) stack (the calling
/// thread blocks until it ends), so the depth limits hold whatever the caller's stack. The
/// threads are long-lived and reused (`on_script_thread`); the job's `catch_unwind` there
/// is the last resort: a panic inside Rhai or a host binding becomes a
/// [`ScriptErrorKind::Internal`] error, never the agent's crash (this relies on the default
/// `panic = "unwind"`).
///
/// An error is also written to the stderr sink as `file:line:col: message\n`.
pub fn run_script_with(
    engine: &ScriptEngine,
    script: &CompiledScript,
    ctx: &StepContext,
    opts: &ScriptRunOptions,
) -> ScriptOutcome {
    let mut limits = engine.limits().clone();
    if let Some(t) = opts.timeout {
        limits.timeout = t;
    }
    let deadline = Instant::now() + limits.timeout;
    // The job owns what it runs with (clones sharing the engine's frozen parts, the
    // compiled script's AST and the options' sinks), as the script thread outlives the call.
    let job = {
        let (engine, script, ctx, opts) =
            (engine.clone(), script.clone(), ctx.clone(), opts.clone());
        let span = tracing::Span::current();
        move || {
            let _entered = span.enter();
            let run = Evaluation {
                output: &opts.output,
                cancel: &opts.cancel,
                host: &opts.host,
                limits: &limits,
                deadline,
            };
            match evaluate(&engine, &script, &ctx, &run) {
                Ok(code) => ScriptOutcome { code, error: None },
                Err(error) => ScriptOutcome {
                    code: 1,
                    error: Some(error),
                },
            }
        }
    };
    let outcome = match on_script_thread(job) {
        Ok(outcome) => outcome,
        Err(ThreadError::Panicked(what)) => {
            internal(script, format!("script runtime panicked: {what}"))
        }
        Err(ThreadError::Start(e)) => {
            internal(script, format!("cannot start the script thread: {e}"))
        }
    };
    if let Some(err) = &outcome.error
        && err.kind != ScriptErrorKind::PlanUnknown
    {
        opts.output.stderr(format!("{err}\n").as_bytes());
    }
    outcome
}

fn internal(script: &CompiledScript, message: String) -> ScriptOutcome {
    ScriptOutcome {
        code: 1,
        error: Some(ScriptError::new(
            script.file(),
            ScriptErrorKind::Internal,
            message,
        )),
    }
}

/// How a step's session ends after the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The session ends with the step ([`HostApi::finish`]).
    Session,
    /// The session continues with the next step ([`HostApi::finish_step`]): the dry run's
    /// steps share one session, so later steps see the planned changes of earlier ones.
    Step,
}

/// One compiled `.rhai` step on its session, ready to run.
pub struct ScriptStep<'a> {
    /// The engine.
    pub engine: &'a ScriptEngine,
    /// The compiled step.
    pub script: &'a CompiledScript,
    /// What the step is: its `step` context, return codes, cancel token, script timeout and
    /// executor come from here.
    pub spec: &'a StepSpec,
    /// The session the script runs on (opened from `spec`, or shared by a dry run's steps);
    /// its redactor redacts the step's errors.
    pub api: &'a HostApi,
    /// Whether the session ends with the step.
    pub end: End,
    /// Also list a check's pending changes on `output`'s stderr (the agent, whose console
    /// is the only place they show); the other front ends render them from the report.
    pub list_drift: bool,
}

impl ScriptStep<'_> {
    /// A failed step's "not undone: ..." lines: written to `output`'s stderr (the console
    /// and the step's log, after the script's error line, which is written already) and
    /// added to its error (the JSON documents and `serve` carry that).
    fn not_undone<T>(
        &self,
        (finished, lines): (T, Vec<String>),
        error: &mut Option<String>,
        output: &dyn ScriptOutput,
    ) -> T {
        if !lines.is_empty() {
            let text: String = lines.iter().map(|l| format!("not undone: {l}\n")).collect();
            output.stderr(text.as_bytes());
            if let Some(e) = error {
                e.push('\n');
                e.push_str(text.trim_end());
            }
        }
        finished
    }

    /// Run the script with `output`, then end the step (always, also after a failure).
    ///
    /// The result: `ok` when there was no error, the spec accepts the code and no drift; `code` the
    /// script's ([`StepResult::status`] gives the status a failed step reports); `error` the
    /// first of the script's error and the deferred work's failure, redacted; `interrupts`
    /// the requested ones (none on the Check executor); `report` the session's for this
    /// step. A deferred-work failure is also written to `output`'s stderr as
    /// `<file>: <error and its causes>`, redacted (the agent's text: a cause whose text
    /// redaction changed is repeated, redacted).
    pub fn run(&self, output: Arc<dyn ScriptOutput>) -> StepResult {
        let redactor = self.api.redactor();
        for line in self.api.recovered() {
            output.stderr(format!("{line}\n").as_bytes());
        }
        let opts = script_options(self.spec, output.clone(), self.api);
        let mut outcome = run_script_with(self.engine, self.script, self.spec.context(), &opts);
        // The plan stopped at a call whose outcome it cannot know (after a command it did
        // not run; listed in the report as unknown): not a failure, and the script's return
        // code is unknown too, so the step is judged as returning one it accepts.
        if outcome
            .error
            .as_ref()
            .is_some_and(|e| e.kind == ScriptErrorKind::PlanUnknown)
        {
            outcome.error = None;
            outcome.code = self.spec.first_returncode();
        }
        let mut error = outcome
            .error
            .as_ref()
            .map(|e| redactor.redact(&e.to_string()).into_owned());
        // A journal write that failed fails the step whatever the script caught.
        if let Some(f) = self.api.journal_failure() {
            let line = format!(
                "{}: {}",
                self.script.file(),
                HostError::JournalFailed { message: f }
            );
            error = Some(match error {
                Some(e) if !e.contains(&line) => format!("{e}\n{line}"),
                Some(e) => e,
                None => line,
            });
        }
        // A failed step's files are put back (apply with an undo journal) and its deferred
        // work is not run; what cannot be put back is listed in its error.
        let failed = error.is_some() || !self.spec.accepts(outcome.code);
        let finished = match (self.end, failed) {
            (End::Session, false) => self.api.finish(),
            (End::Step, false) => self.api.finish_step(),
            (End::Session, true) => self.not_undone(self.api.fail(), &mut error, &*output),
            (End::Step, true) => self.not_undone(self.api.fail_step(), &mut error, &*output),
        };
        let report = match finished {
            Ok(r) => {
                if self.list_drift && !r.drift().is_empty() {
                    output.stderr(r.render_drift(redactor).as_bytes());
                }
                r
            }
            Err(e) => {
                // Written also after a script error: the pending work may be the script's
                // own batched edits, which the report lists but which were not written then.
                let msg = format!(
                    "{}: {}",
                    self.script.file(),
                    redactor.redact(&crate::chain::render(&e))
                );
                output.stderr(format!("{msg}\n").as_bytes());
                error.get_or_insert(msg);
                e.report
                    .map_or_else(|| Report::new(self.spec.exec()), |r| *r)
            }
        };
        let ok = error.is_none() && self.spec.accepts(outcome.code) && report.drift().is_empty();
        let interrupts = match self.spec.exec() {
            ExecMode::Check => Vec::new(),
            _ => report.interrupts.clone(),
        };
        StepResult {
            ok,
            code: outcome.code,
            ran: true,
            interrupts,
            report,
            error,
            notes: Vec::new(),
            log_errors: Vec::new(),
            redactor: redactor.clone(),
        }
    }
}

/// The options a script runs with on `api`: its output, the step's cancel token and
/// script timeout.
fn script_options(
    spec: &StepSpec,
    output: Arc<dyn ScriptOutput>,
    api: &HostApi,
) -> ScriptRunOptions {
    ScriptRunOptions {
        output,
        cancel: spec.cancel().clone(),
        host: Arc::new(api.clone()),
        timeout: spec.script_timeout(),
    }
}

/// Runs compiled `.rhai` steps on one shared engine, each on a fresh host session over the
/// host root mount.
#[derive(Clone)]
pub struct ScriptRunner {
    /// The engine (built once per run, immutable; the deadline is per step).
    pub engine: Arc<ScriptEngine>,
    /// The host root mount (an agent-side path) each step's session opens.
    pub root: std::path::PathBuf,
    /// The run's open handle on `root`: each step's session gets a duplicate of it
    /// ([`HostRoot::try_clone`]) instead of
    /// canonicalizing and opening the mount again; `None` opens `root` per step.
    pub opened: Option<Arc<HostRoot>>,
    /// How each step's output is relayed (`SKYHOOK_AGENT_LOG_FORMAT`).
    pub log_format: LogFormat,
    /// What the run's sessions found at their start (no journal, no deferred-work record),
    /// not read again by the next step's session while still true ([`StartMemo`]).
    pub start: Arc<StartMemo>,
}

impl ScriptRunner {
    /// Run one `.rhai` step of the agent: a new host session over [`ScriptRunner::root`]
    /// from `inv.spec` ([`StepSpec::session`]; Apply in run modes, Check in `*-check`
    /// modes: pending changes are drift and fail the step, each listed on the step's
    /// stderr), output relayed like a process's (console via `console`, the step's log
    /// files, redaction), then the step's deferred work (daemon-reload, grub), whose failure
    /// fails the step. A succeeded step on the Apply executor then lists what it changed
    /// on its stdout ([`StepResult::changes_text`]; nothing when it
    /// changed nothing).
    ///
    /// The script runs on tokio's blocking pool while the caller awaits it, so the runtime
    /// keeps polling its drivers (a SIGTERM during the step is recorded at once).
    ///
    /// Never fails: a root that cannot be reopened or a runner that panicked is a failed
    /// step with the error on stderr.
    pub async fn run_step(
        &self,
        mut inv: StepInvocation,
        console: Arc<dyn ConsoleStreams>,
    ) -> StepResult {
        let exec = inv.spec.exec();
        let StepProgram::Script(script) = &inv.program else {
            return StepResult::failed(exec, 1);
        };
        let file = script.file().to_string();
        let session_root = match self
            .opened
            .as_ref()
            .map_or_else(|| HostRoot::open(&self.root), |r| r.try_clone())
        {
            Ok(r) => r,
            Err(e) => {
                console.error_line(&format!(
                    "skyhook-agent: {file}: failed to open host root {}: {}",
                    self.root.display(),
                    crate::chain::render(&e)
                ));
                return StepResult::failed(exec, 1);
            }
        };
        let (out_file, err_file) = match inv.logs.take() {
            Some(l) => (
                Some((
                    Box::new(l.out_file) as Box<dyn std::io::Write + Send>,
                    l.out_path,
                )),
                Some((
                    Box::new(l.err_file) as Box<dyn std::io::Write + Send>,
                    l.err_path,
                )),
            ),
            None => (None, None),
        };
        let output = Arc::new(
            SinkOutput::with_sinks(
                StreamSink::new("stdout", console.writer(Label::Out), out_file),
                StreamSink::new("stderr", console.writer(Label::Err), err_file),
                inv.spec.redactor().cloned(),
                local_now,
            )
            .with_log_format(self.log_format),
        );
        let api = inv.spec.session_in_run(session_root, &self.start);
        let ran = {
            let engine = self.engine.clone();
            let (script, spec, out) = (script.clone(), inv.spec.clone(), output.clone());
            // The step's diagnostics span follows the script onto the blocking pool.
            let span = tracing::Span::current();
            tokio::task::spawn_blocking(move || {
                let _entered = span.enter();
                ScriptStep {
                    engine: &engine,
                    script: &script,
                    spec: &spec,
                    api: &api,
                    end: End::Session,
                    list_drift: true,
                }
                .run(out)
            })
            .await
        };
        let mut result = match ran {
            Ok(r) => r,
            Err(e) => {
                let msg = format!("{file}: script runner: {e}\n");
                ScriptOutput::stderr(&*output, msg.as_bytes());
                let log_errors = finish_output(&output, &*console);
                return StepResult {
                    log_errors,
                    ..StepResult::failed(exec, 1)
                };
            }
        };
        result.code = result.status();
        // What the step changed, as step output (agent-contract 9.3 lines, no new marker).
        if let Some(text) = result.changes_text() {
            ScriptOutput::stdout(&*output, text.as_bytes());
        }
        result.log_errors = finish_output(&output, &*console);
        result
    }
}

/// End a step's output and report its write errors on stderr (as a process step's).
fn finish_output(output: &SinkOutput, console: &dyn ConsoleStreams) -> Vec<String> {
    let lines = log_error_lines(&output.finish());
    for line in &lines {
        console.error_line(line);
    }
    lines
}

/// The agent's runner: processes on the [`ProcessRunner`], scripts on
/// the [`ScriptRunner`].
pub struct AgentRunner {
    /// Runs process steps.
    pub process: ProcessRunner,
    /// Runs `.rhai` steps.
    pub script: ScriptRunner,
    /// Where relayed output goes (the agent's stdout/stderr).
    pub console: Arc<dyn ConsoleStreams>,
}

impl StepRunner for AgentRunner {
    async fn run(&self, inv: StepInvocation) -> StepResult {
        match &inv.program {
            StepProgram::Script(_) => self.script.run_step(inv, self.console.clone()).await,
            StepProgram::Process { .. } => self.process.run_step(inv, &*self.console).await,
        }
    }
}

// ---- one evaluation on the script's thread ----

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
    e.register_fn("fail", crate::script::errors::fail);
    let changed = host.clone();
    e.register_fn("changed", move || {
        crate::script::bindings::changed(&*changed)
    });
    let handle = RunHandle {
        deadline,
        cancel: cancel.clone(),
        output: output.clone(),
    };
    // Held until the evaluation ends (also by a panic's unwinding): the host functions serve
    // this run only meanwhile.
    let _bound = host.register(&mut e, &handle);
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
                && let Some(m) = crate::script::host_api::explain_not_found(
                    &error.message,
                    crate::script::host_api::FUNCTIONS,
                )
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

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "session_tests.rs"]
mod session_tests;

#[cfg(test)]
#[path = "undo_tests.rs"]
mod undo_tests;
