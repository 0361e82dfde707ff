//! The step seam: a fully resolved [`StepInvocation`], built once by the mode loop
//! ([`crate::agent::mode`]), is handed to a [`StepRunner`], which returns a [`StepResult`].
//!
//! Runners:
//! - [`AgentRunner`]: what the agent runs with — a process step on the
//!   [`ProcessRunner`](super::ProcessRunner), a `.rhai` step on the
//!   [`ScriptRunner`](super::ScriptRunner) (Apply executor, or Check in a `*-check` mode).
//! - [`PlanRunner`](super::plan::PlanRunner): what `skyhook-run --package` runs with — a
//!   process step "would run", a `.rhai` step on the Plan (or Check) executor of one host
//!   session shared by the mode's steps.
//!
//! The runner owns running a step: the mode loop never reaches into the host, script, log
//! or process layers to assemble one.

use std::ffi::OsString;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use crate::host::effects::effect::InterruptRequest;
use crate::host::{ExecMode, HostOptions, Report};
use crate::logs::redact::Redactor;
use crate::logs::sink::{LogError, StepLogFiles};
use crate::process::Cancel;
use crate::script::context::StepContext;
use crate::script::run::CompiledScript;

/// What a step runs.
#[derive(Debug, Clone)]
pub enum StepProgram {
    /// A process (bash or any executable).
    Process {
        /// The executable as the process sees it (inside `chroot` when set).
        program: PathBuf,
        /// Working directory as the process sees it.
        cwd: PathBuf,
        /// Agent-side directory to chroot into (`on_host: true`); `None` runs in the agent's
        /// filesystem (`on_host: false`).
        chroot: Option<PathBuf>,
        /// The program as a host path, for the "failed to execute" message.
        shown: PathBuf,
    },
    /// A compiled `.rhai` step (its imports compiled too).
    Script(CompiledScript),
}

/// One step, fully resolved: everything a runner needs and nothing it must look up.
pub struct StepInvocation {
    /// The step's path relative to `skyhook_dir` (messages, results).
    pub path: String,
    /// What runs.
    pub program: StepProgram,
    /// Arguments after `env:` substitution and the upgrade versions.
    pub args: Vec<String>,
    /// The complete environment of the step (8.3): the agent's, the step's `env`, the
    /// reserved variables (`STEP_ROOT`, `SKYHOOK_DIR`, `PREVIOUS_VERSION`,
    /// `CURRENT_VERSION`), `PATH` defaulted.
    pub env: Vec<(OsString, OsString)>,
    /// The context a script sees (`step` in Rhai).
    pub context: StepContext,
    /// The host session options a script step's session gets (configMaps, node metadata,
    /// secrets, deadline, resource id, cancel token).
    pub host: HostOptions,
    /// The executor of a script step: Apply, Check (a `*-check` mode) or Plan.
    pub exec: ExecMode,
    /// The step's log files (`None`: `SKYHOOK_AGENT_WRITE_LOGS=false`, or a dry run).
    pub logs: Option<StepLogFiles>,
    /// Secret values hidden from output and logs (`SKYHOOK_REDACT_ENV` and secrets read).
    pub redactor: Redactor,
    /// Return codes that count as success (the step's `returncodes`).
    pub returncodes: Vec<i32>,
    /// The step's deadline in seconds for a script (`SKYHOOK_SCRIPT_TIMEOUT`, from the run's
    /// settings); `None` for none.
    pub script_timeout: Option<std::time::Duration>,
    /// Aborting it ends the step (TERM, grace, KILL for a process; the next operation for
    /// a script).
    pub cancel: Cancel,
    /// Interpreter bytes written before the output (interrupt commands only).
    pub preamble: Option<Vec<u8>>,
    /// Descriptors the step's processes inherit (the package lock, so a rerun waits for the
    /// last of them even when the agent died).
    pub keep_fds: Vec<std::os::fd::RawFd>,
}

impl StepInvocation {
    /// True when `code` is one of the step's return codes.
    pub fn accepts(&self, code: i32) -> bool {
        self.returncodes.contains(&code)
    }
}

/// What one step produced.
#[derive(Debug, Default)]
pub struct StepResult {
    /// The step succeeded (accepted code, no script error, no drift in a check).
    pub ok: bool,
    /// The status for the `FAILED:` line (8.4).
    pub status: i32,
    /// False when the step was not run (a dry run's process step: "would run").
    pub ran: bool,
    /// Interrupts a script step requested (run by the agent after the flag; never in checks).
    pub interrupts: Vec<InterruptRequest>,
    /// A script step's host report (changes, actions, interrupts; drift in a check).
    pub report: Option<Report>,
    /// The script error or deferred-work failure (`file:line:col: message`), redacted.
    pub error: Option<String>,
    /// Lines about the step the agent also printed, e.g. that a requested interrupt is
    /// declared in the Skyhook CR and left to the operator.
    pub notes: Vec<String>,
    /// Output that could not be written (a full log disk, a closed console): reported on
    /// stderr by the runner and kept here; the step's outcome is unchanged (9.3).
    pub log_errors: Vec<String>,
}

impl StepResult {
    /// A failure with `status` (a step that could not be set up).
    pub fn failed(status: i32) -> Self {
        StepResult {
            ok: false,
            status,
            ran: false,
            ..StepResult::default()
        }
    }
}

/// Runs one resolved step. Implemented by [`AgentRunner`] and
/// [`PlanRunner`](super::plan::PlanRunner); tests implement it to observe the loop.
pub trait StepRunner {
    /// Run `inv` to its end (or its cancellation) and report.
    fn run(&self, inv: StepInvocation) -> impl Future<Output = StepResult>;
}

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

/// Console writers for relayed step output (the agent's [`Console`](crate::agent::console::Console)).
pub trait ConsoleStreams: Send + Sync {
    /// A writer for stdout (`Label::Out`) or stderr (`Label::Err`).
    fn writer(&self, label: crate::logs::sink::Label) -> Box<dyn std::io::Write + Send>;
    /// One line on stderr.
    fn error_line(&self, line: &str);
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

/// Render output errors as `skyhook-agent: <error>: <cause>` lines.
pub(crate) fn log_error_lines(errors: &[LogError]) -> Vec<String> {
    errors
        .iter()
        .map(|e| format!("skyhook-agent: {}", crate::chain::render(e)))
        .collect()
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
        return StepResult::failed(1);
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
        redactor: Some(inv.redactor.clone()),
        cancel: Some(inv.cancel.clone()),
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
        ok: report
            .outcome
            .succeeded_with(|c| inv.returncodes.contains(&c)),
        status: report.outcome.display_status(),
        ran: true,
        log_errors,
        ..StepResult::default()
    }
}
