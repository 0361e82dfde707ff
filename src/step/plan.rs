//! The dry-run runner of `skyhook-run --package`: [`PlanRunner`] runs a mode's `.rhai` steps
//! on one host session on the Plan executor (Check in a `*-check` mode), so later steps see
//! the planned changes of earlier ones, and lists every process step as "would run" without
//! running it. Nothing on the host changes.

use std::sync::Arc;

use crate::host::{ExecMode, Report};
use crate::script::host_api::HostApi;
use crate::script::{
    CompiledScript, RunOptions, ScriptEngine, ScriptOutput, StepContext, run_script_with,
};

use super::invocation::{StepInvocation, StepProgram, StepResult, StepRunner};

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
/// [`StepResult`] (`ran`; `interrupts` left empty for the caller to judge). `accepts`
/// decides whether a return code is a success. Errors (the script's, the deferred work's)
/// are written to the output's stderr; `error` keeps the first of them.
pub fn run_step(
    engine: &ScriptEngine,
    script: &CompiledScript,
    ctx: &StepContext,
    api: &HostApi,
    mut opts: RunOptions,
    accepts: impl Fn(i32) -> bool,
    end: End,
) -> StepResult {
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
    StepResult {
        ok,
        code: outcome.code,
        ran: true,
        interrupts: Vec::new(),
        report,
        error,
        notes: Vec::new(),
        log_errors: Vec::new(),
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
                ..StepResult::new(inv.spec.exec)
            };
        };
        let mut opts = RunOptions::new(self.output.clone(), inv.cancel.clone());
        opts.timeout = inv.script_timeout;
        let mut o = run_step(
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
        if inv.spec.exec != ExecMode::Check {
            o.interrupts = o.report.interrupts.clone();
        }
        o
    }
}

#[cfg(test)]
#[path = "plan_finish_tests.rs"]
mod finish_tests;
