//! The step seam: a fully resolved [`StepInvocation`], built once around a [`StepSpec`] by
//! the mode loop (`crate::mode`, for every step of a mode) or by an interrupt command, is
//! handed to a [`StepRunner`] (or, for an interrupt command, straight to
//! [`ProcessRunner::run_step`](super::ProcessRunner::run_step)), which returns a
//! [`StepResult`].
//!
//! Runners:
//! - [`AgentRunner`](super::AgentRunner): what the agent runs with — a process step on the
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

use serde_json::{Value, json};

use crate::host::effects::effect::InterruptRequest;
use crate::host::{ExecMode, Report};
use crate::logs::LogError;
use crate::logs::sink::StepLogFiles;
use crate::redact::Redactor;
use crate::script::compile::CompiledScript;

use super::spec::StepSpec;

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
    /// What the step is: its return codes, and for a script step its `step` context, its
    /// host session's options, its timeout and its executor (Apply, Check in a `*-check`
    /// mode, or Plan).
    pub spec: StepSpec,
    /// The step's log files (`None`: `SKYHOOK_AGENT_WRITE_LOGS=false`, or a dry run).
    pub logs: Option<StepLogFiles>,
    /// Interpreter bytes written before the output (interrupt commands only).
    pub preamble: Option<Vec<u8>>,
    /// Descriptors the step's processes inherit (the package lock, so a rerun waits for the
    /// last of them even when the agent died).
    pub keep_fds: Vec<std::os::fd::RawFd>,
}

impl StepInvocation {
    /// True when `code` is one of the step's return codes.
    pub fn accepts(&self, code: i32) -> bool {
        self.spec.accepts(code)
    }
}

/// What one step produced: the result of every runner (the agent's, the dry run's, and the
/// lone script runs of `skyhook-agent serve` and `skyhook-run SCRIPT`).
#[derive(Debug, Clone)]
pub struct StepResult {
    /// The step succeeded (accepted code, no script error, no drift in a check).
    pub ok: bool,
    /// The step's return code, also the status of the `FAILED:` line (8.4): a process's
    /// exit code (`-<signal>` for a signal, 127 when it could not start), a script's
    /// integer value (0 for any other value, 1 after an error).
    pub code: i32,
    /// False when the step was not run (a dry run's process step: "would run").
    pub ran: bool,
    /// Interrupts a script step requested (run by the agent after the flag; never in checks).
    pub interrupts: Vec<InterruptRequest>,
    /// A script step's host report (changes, actions, interrupts; drift in a check); empty
    /// for a process step, whose changes are not tracked.
    pub report: Report,
    /// The script error or deferred-work failure (`file:line:col: message`), redacted.
    pub error: Option<String>,
    /// Lines about the step the agent also printed, e.g. that a requested interrupt is
    /// declared in the Skyhook CR and left to the operator.
    pub notes: Vec<String>,
    /// Output that could not be written (a full log disk, a closed console): reported on
    /// stderr by the runner and kept here; the step's outcome is unchanged (9.3).
    pub log_errors: Vec<String>,
    /// The secret values the step's session knew when it ended (empty for a step without a
    /// session): its report is rendered with it ([`StepResult::to_json`] callers,
    /// [`StepResult::changes_text`]).
    pub redactor: Redactor,
}

impl StepResult {
    /// A step that did not run, with an empty report on `exec`: not ok, code 0.
    pub fn new(exec: ExecMode) -> Self {
        StepResult {
            ok: false,
            code: 0,
            ran: false,
            interrupts: Vec::new(),
            report: Report::new(exec),
            error: None,
            notes: Vec::new(),
            log_errors: Vec::new(),
            redactor: Redactor::new(),
        }
    }

    /// A failure with `code` (a step that could not be set up).
    pub fn failed(exec: ExecMode, code: i32) -> Self {
        StepResult {
            code,
            ..StepResult::new(exec)
        }
    }

    /// The status a step reports (the agent's `FAILED:` line, serve's exit `code`): its
    /// `code`, except that a step with code 0 that failed by an error (a deferred-work
    /// failure) or by drift reports 1.
    pub fn status(&self) -> i32 {
        if self.code == 0 && (self.error.is_some() || !self.report.drift().is_empty()) {
            1
        } else {
            self.code
        }
    }

    /// What a succeeded step on the Apply executor changed, as the agent lists it on the
    /// step's stdout after the step: the report's text form ([`Report::render_text`]) — per change
    /// a `~ <summary>  # file:line` line (after a `+ mkdir <dir>` line per directory it
    /// created, followed by its unified diff when diffs were recorded), per action
    /// `> ran: <command>  # file:line`, per interrupt `! interrupt: <what>  # file:line`, in
    /// the order they happened — then the summary `Apply: N changed, M unchanged.`, every
    /// secret value replaced by `***`. `None` on the Plan and Check executors, for a step
    /// that changed nothing, ran no action and requested no interrupt (it says nothing),
    /// and for a failed step, whose error (and what undoing its changes leaves) is its
    /// own account: its report still has what it did (JSON).
    pub fn changes_text(&self) -> Option<String> {
        let r = &self.report;
        if !self.ok
            || r.mode != ExecMode::Apply
            || (r.changes.is_empty() && r.actions.is_empty() && r.interrupts.is_empty())
        {
            return None;
        }
        Some(r.render_text(&self.redactor))
    }

    /// The JSON form: the report's ([`Report::to_json`]: `mode`, `changes`, `actions`,
    /// `unchanged`, `interrupts`, `summary`) plus `ok`, `return_code`, `error` (string or
    /// null), `drift` (the number of pending changes of a check, 0 otherwise) and, when
    /// there are any, `notes`.
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

    /// [`StepResult::to_json`] written as JSON text to `out` without its closing `}`, one
    /// change at a time ([`Report::write_json_open`]).
    pub fn write_json_open(&self, redactor: &Redactor, out: &mut String) {
        use std::fmt::Write as _;
        self.report.write_json_open(redactor, out);
        let error = self
            .error
            .as_ref()
            .map_or(Value::Null, |e| redactor.redact(e).into_owned().into());
        let _ = write!(
            out,
            ",\"ok\":{},\"return_code\":{},\"error\":{error},\"drift\":{}",
            self.ok,
            self.code,
            self.report.drift().len()
        );
        if !self.notes.is_empty() {
            let _ = write!(out, ",\"notes\":{}", json!(self.notes));
        }
    }
}

/// Runs one resolved step. Implemented by [`AgentRunner`](super::AgentRunner) and
/// [`PlanRunner`](super::plan::PlanRunner); tests implement it to observe the loop.
pub trait StepRunner {
    /// Run `inv` to its end (or its cancellation) and report.
    fn run(&self, inv: StepInvocation) -> impl Future<Output = StepResult>;
}

/// Console writers for relayed step output (the agent's `Console` implements it).
pub trait ConsoleStreams: Send + Sync {
    /// A writer for stdout (`Label::Out`) or stderr (`Label::Err`).
    fn writer(&self, label: crate::logs::sink::Label) -> Box<dyn std::io::Write + Send>;
    /// One line on stderr.
    fn error_line(&self, line: &str);
}

/// Render output errors as `skyhook-agent: <error>: <cause>` lines.
pub(crate) fn log_error_lines(errors: &[LogError]) -> Vec<String> {
    errors
        .iter()
        .map(|e| format!("skyhook-agent: {}", crate::chain::render(e)))
        .collect()
}
