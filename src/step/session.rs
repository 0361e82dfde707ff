//! The one place a `.rhai` step's session is run and ended: [`ScriptStep::run`] runs the
//! script on its host session, ends the step (deferred work, directory syncs), judges the
//! return code and drift, and collects the requested interrupts into a [`StepResult`].
//! The agent, the dry run, `skyhook-agent serve` and `skyhook-run SCRIPT` all run scripts
//! with it; they differ in the output they supply and the executor of their [`StepSpec`].

use std::sync::Arc;

use crate::host::{ExecMode, Report};
use crate::script::host_api::HostApi;
use crate::script::{CompiledScript, ScriptEngine, ScriptOutput, run_script_with};

use super::invocation::StepResult;
use super::spec::StepSpec;

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
        let opts = self.spec.run_options(output.clone(), self.api);
        let outcome = run_script_with(self.engine, self.script, &self.spec.context(), &opts);
        let mut error = outcome
            .error
            .as_ref()
            .map(|e| redactor.redact(&e.to_string()).into_owned());
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
                e.report.map_or_else(|| Report::new(self.spec.exec), |r| *r)
            }
        };
        let ok = error.is_none() && self.spec.accepts(outcome.code) && report.drift().is_empty();
        let interrupts = match self.spec.exec {
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

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "undo_tests.rs"]
mod undo_tests;
