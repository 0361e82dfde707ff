//! The dry-run runner of `skyhook-run --package`: [`PlanRunner`] runs a mode's `.rhai` steps
//! on one host session on the Plan executor (Check in a `*-check` mode), so later steps see
//! the planned changes of earlier ones, and lists every process step as "would run" without
//! running it. Nothing on the host changes.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::host::secrets::Redactor;
use crate::host::{ExecMode, Report};
use crate::script::host_api::HostApi;
use crate::script::{
    CompiledScript, RunOptions, ScriptEngine, ScriptOutput, StepContext, run_script_with,
};

use super::invocation::{StepInvocation, StepProgram, StepResult, StepRunner};

/// What one script step did: its host report and how it ended.
#[derive(Debug, Clone)]
pub struct StepOutcome {
    /// Changes, actions and interrupts of the step (applied, planned or, in a check, drift).
    pub report: Report,
    /// The step's return code: the script's integer value, 0 for any other value, 1 after an
    /// error (as the agent counts it).
    pub code: i32,
    /// The script error (`file:line:col: message`, already written to the step's stderr) or
    /// the failure of the deferred work (batched line edits' write, daemon-reload, grub
    /// regeneration), redacted: the first of the two; both are written to the step's stderr.
    pub error: Option<String>,
    /// Success: no error, the return code accepted, and in a check no drift.
    pub ok: bool,
    /// Verdicts on requested interrupts (declared in the CR, left to the operator).
    pub notes: Vec<String>,
}

impl StepOutcome {
    /// The JSON form: the report's ([`Report::to_json`]: `mode`, `changes`, `actions`,
    /// `unchanged`, `interrupts`, `summary`) plus `ok`, `return_code`, `error` (string or
    /// null) and `drift` (the number of pending changes of a check, 0 otherwise).
    pub fn to_json(&self, redactor: &Redactor) -> Value {
        let mut v = self.report.to_json(redactor);
        if let Value::Object(m) = &mut v {
            m.insert("ok".into(), self.ok.into());
            m.insert("return_code".into(), self.code.into());
            m.insert(
                "error".into(),
                self.error
                    .as_ref()
                    .map_or(Value::Null, |e| redactor.redact(e).into_owned().into()),
            );
            m.insert("drift".into(), json!(self.report.drift().len()));
            if !self.notes.is_empty() {
                m.insert("notes".into(), json!(self.notes));
            }
        }
        v
    }
}

/// How a step's session ends after the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The session ends with the step ([`HostApi::finish`]).
    Session,
    /// The session continues with the next step ([`HostApi::finish_step`]).
    Step,
}

/// Run one compiled step on `api` with `opts` (its output, cancel token and deadline; the
/// host is set to `api`), then end the step (always, also after a failure) and collect its
/// [`StepOutcome`]. `accepts` decides whether a return code is a success. Errors (the
/// script's, the deferred work's) are written to the output's stderr.
pub fn run_step(
    engine: &ScriptEngine,
    script: &CompiledScript,
    ctx: &StepContext,
    api: &HostApi,
    mut opts: RunOptions,
    accepts: impl Fn(i32) -> bool,
    end: End,
) -> StepOutcome {
    opts.host = Arc::new(api.clone());
    let output = opts.output.clone();
    let outcome = run_script_with(engine, script, ctx, &opts);
    let mut error = outcome.error.as_ref().map(ToString::to_string);
    let finished = match end {
        End::Session => api.finish(),
        End::Step => api.finish_step(),
    };
    let report = match finished {
        Ok(r) => r,
        Err(e) => {
            let mode = match ctx.dry_run {
                true => ExecMode::Plan,
                false if ctx.is_check() => ExecMode::Check,
                false => ExecMode::Apply,
            };
            // Written also after a script error: the pending work may be the script's own
            // batched edits, which the report lists but which were not written then.
            let msg = format!("{}: {}", script.file(), e.message);
            output.stderr(format!("{msg}\n").as_bytes());
            error.get_or_insert(msg);
            e.report.map_or_else(|| Report::new(mode), |r| *r)
        }
    };
    let ok = error.is_none() && accepts(outcome.code) && report.drift().is_empty();
    StepOutcome {
        report,
        code: outcome.code,
        error,
        ok,
        notes: Vec::new(),
    }
}

/// Runs a mode's steps as a dry run on one shared host session (see the module docs).
pub struct PlanRunner<'a> {
    /// The engine.
    pub engine: &'a ScriptEngine,
    /// The session every script step runs on (ended per step with
    /// [`HostApi::finish_step`], so each step's deferred work is its own).
    pub api: &'a HostApi,
    /// Script output (already redacting).
    pub output: Arc<dyn ScriptOutput>,
}

impl StepRunner for PlanRunner<'_> {
    async fn run(&self, inv: StepInvocation) -> StepResult {
        let StepProgram::Script(script) = &inv.program else {
            // Not run: what a process would do is unknown.
            return StepResult {
                ok: true,
                ran: false,
                ..StepResult::default()
            };
        };
        let mut opts = RunOptions::new(self.output.clone(), inv.cancel.clone());
        opts.timeout = inv.script_timeout;
        let o = run_step(
            self.engine,
            script,
            &inv.spec.context(),
            self.api,
            opts,
            |c| inv.accepts(c),
            End::Step,
        );
        // What the step would request (judged by the loop as the agent judges it; a check
        // requests nothing).
        let interrupts = if inv.spec.exec == crate::host::ExecMode::Check {
            Vec::new()
        } else {
            o.report.interrupts.clone()
        };
        StepResult {
            ok: o.ok,
            status: o.code,
            ran: true,
            interrupts,
            error: o.error,
            report: Some(o.report),
            notes: Vec::new(),
            log_errors: Vec::new(),
        }
    }
}

#[cfg(test)]
#[path = "plan_finish_tests.rs"]
mod finish_tests;
