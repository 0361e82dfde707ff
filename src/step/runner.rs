//! [`AgentRunner`], the runner the agent runs steps with: a process step on the
//! [`ProcessRunner`](super::ProcessRunner), a `.rhai` step on the
//! [`ScriptRunner`](super::ScriptRunner).

use std::ffi::OsString;
use std::sync::Arc;

use super::invocation::{
    ConsoleStreams, StepInvocation, StepProgram, StepResult, StepRunner, log_error_lines,
};

/// The agent's runner: processes on the [`ProcessRunner`](super::ProcessRunner), scripts on
/// the [`ScriptRunner`](super::ScriptRunner).
pub struct AgentRunner {
    /// Runs process steps.
    pub process: super::ProcessRunner,
    /// Runs `.rhai` steps.
    pub script: super::ScriptRunner,
    /// Where relayed output goes (the agent's stdout/stderr).
    pub console: Arc<dyn ConsoleStreams>,
}

impl StepRunner for AgentRunner {
    async fn run(&self, inv: StepInvocation) -> StepResult {
        match &inv.program {
            StepProgram::Script(_) => self.script.run_step(inv, self.console.clone()).await,
            StepProgram::Process { .. } => {
                run_process_step(&self.process, inv, &*self.console).await
            }
        }
    }
}

/// Run a process step: spawn it through the process primitive with the step's environment,
/// relay its output (console and log files, redacted), and judge its status by the step's
/// return codes. A spawn failure prints `skyhook-agent: failed to execute <host path>: <os
/// error>` and has status 127 (8.4); output errors are printed on stderr and kept in the
/// result.
async fn run_process_step(
    runner: &super::ProcessRunner,
    inv: StepInvocation,
    console: &dyn ConsoleStreams,
) -> StepResult {
    let StepProgram::Process {
        program,
        cwd,
        chroot,
        shown,
    } = &inv.program
    else {
        return StepResult::failed(inv.spec.exec, 1);
    };
    let spec = super::ProcessSpec {
        program: program.clone(),
        args: inv.args.iter().map(OsString::from).collect(),
        env: inv.env.clone(),
        cwd: cwd.clone(),
        chroot: chroot.clone(),
        timeout: None,
        preamble: inv.preamble.clone(),
        keep_fds: inv.keep_fds.clone(),
    };
    let options = super::RunOptions {
        stdout: Some(console.writer(crate::logs::sink::Label::Out)),
        stderr: Some(console.writer(crate::logs::sink::Label::Err)),
        redactor: inv.spec.redactor.clone(),
        cancel: Some(inv.spec.cancel.clone()),
        ..super::RunOptions::default()
    };
    let report = runner.run_with(&spec, inv.logs, options).await;
    if let super::Outcome::SpawnFailed(e) = &report.outcome {
        console.error_line(&format!(
            "skyhook-agent: failed to execute {}: {e}",
            shown.display()
        ));
    }
    let log_errors = log_error_lines(&report.output_errors);
    for line in &log_errors {
        console.error_line(line);
    }
    StepResult {
        ok: report.outcome.succeeded_with(|c| inv.spec.accepts(c)),
        code: report.outcome.display_status(),
        ran: true,
        log_errors,
        ..StepResult::new(inv.spec.exec)
    }
}
