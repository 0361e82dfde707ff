//! [`HostApi`]: one step's [`Host`] session as scripts reach it, shared by every run bound to
//! it, and its end ([`HostApi::finish`], [`HostApi::fail`], [`FinishError`]).

use std::sync::{Arc, Mutex};

use super::call::{Api, Inner, error_chain, lock};
use super::output::{RecordingOutput, RedactingOutput};
use super::{Capture, ScriptOutput};
use crate::host::{Host, HostError, Report};
use crate::redact::{Redactor, StreamRedactor};

/// The host API for scripts: one step's [`Host`] session, bound into each run's engine.
/// See the module docs.
#[derive(Clone)]
pub struct HostApi {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for HostApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostApi").finish_non_exhaustive()
    }
}

/// [`HostApi::finish`] failed: the work pending at the end of the step failed (batched line
/// edits' write, daemon-reload, grub or initramfs regeneration, directory fsyncs).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct FinishError {
    /// The report, listing every action that ran (the deferred ones that succeeded
    /// included); `None` when the session had already been finished.
    pub report: Option<Box<Report>>,
    /// The failure, redacted, with its causes: `the work pending at the end of the step
    /// failed: ...`.
    pub message: String,
    /// The host error.
    #[source]
    pub source: Option<HostError>,
}

fn already_finished() -> FinishError {
    FinishError {
        report: None,
        message: "host session already finished".into(),
        source: None,
    }
}

impl HostApi {
    /// Wrap a session. The session's redactor is the one errors pass through.
    pub fn new(host: Host) -> HostApi {
        let redactor = host.redactor().clone();
        HostApi {
            inner: Arc::new(Inner {
                host: Mutex::new(Some(host)),
                redactor,
            }),
        }
    }

    /// The session's redactor (shared: values added by `secret()` later are included).
    pub fn redactor(&self) -> &Redactor {
        &self.inner.redactor
    }

    /// `inner` wrapped so that every chunk written passes through [`HostApi::redactor`]
    /// (for callers whose sink does not redact by itself, such as `skyhook-run`).
    pub fn redacting_output(&self, inner: Arc<dyn ScriptOutput>) -> Arc<dyn ScriptOutput> {
        Arc::new(RedactingOutput {
            inner,
            redactor: self.inner.redactor.clone(),
            out: Mutex::new(StreamRedactor::new()),
            err: Mutex::new(StreamRedactor::new()),
        })
    }

    /// `inner` wrapped so that every chunk is also recorded in the session's ordered list
    /// ([`Host::journal`], [`Report::items`]) where it happened between changes and actions.
    /// With [`Capture::StdoutInPlan`] stdout is only recorded (the plan shows it, in order),
    /// not written to `inner`; stderr is always written too. Wrap the result with
    /// [`HostApi::redacting_output`] so that what is recorded is redacted as well. `inner`
    /// unchanged when the session was already finished.
    pub fn capture_output(
        &self,
        inner: Arc<dyn ScriptOutput>,
        capture: Capture,
    ) -> Arc<dyn ScriptOutput> {
        match lock(&self.inner.host).as_ref() {
            Some(h) => Arc::new(RecordingOutput {
                inner,
                journal: h.journal().clone(),
                forward_stdout: capture == Capture::Record,
            }),
            None => inner,
        }
    }

    /// End the session: run its deferred work and return the [`Report`]. Call it after a
    /// successful run ([`HostApi::fail`] after a failed one). The second call fails (no
    /// session).
    ///
    /// # Errors
    /// [`FinishError`] when the deferred work fails (with the report) or
    /// the session was already finished.
    pub fn finish(&self) -> Result<Report, FinishError> {
        let host = lock(&self.inner.host).take();
        let Some(host) = host else {
            return Err(FinishError {
                report: None,
                message: "host session already finished".into(),
                source: None,
            });
        };
        let (report, result) = host.finish_with_report();
        self.finished(report, result)
    }

    /// End a plan or check session whose steps have each ended their part and keep what
    /// it planned for the next mode or package ([`Host::into_carry`]); `None` when the
    /// session was already finished or is not a plan.
    pub fn finish_plan(&self) -> Option<crate::host::PlanCarry> {
        lock(&self.inner.host).take()?.into_carry()
    }

    /// The report, or the [`FinishError`] carrying it.
    fn finished(
        &self,
        report: Report,
        result: Result<(), HostError>,
    ) -> Result<Report, FinishError> {
        match result {
            Ok(()) => Ok(report),
            Err(e) => Err(FinishError {
                report: Some(Box::new(report)),
                message: format!(
                    "the work pending at the end of the step failed: {}",
                    self.inner.redactor.redact(&error_chain(&e))
                ),
                source: Some(e),
            }),
        }
    }

    /// End the session of a failed step ([`Host::fail_with_report`]): with an undo journal
    /// (apply) the step's files are put back and the deferred work is not run; otherwise
    /// as [`HostApi::finish`]. Returns the report and the lines of what is left changed
    /// ([`crate::host::effects::session::Undone`]), redacted, also when the end failed
    /// (as [`HostApi::finish`] fails).
    /// The lines come with the error too.
    pub fn fail(&self) -> (Result<Report, FinishError>, Vec<String>) {
        let host = lock(&self.inner.host).take();
        let Some(host) = host else {
            return (Err(already_finished()), Vec::new());
        };
        let (report, undone, result) = host.fail_with_report();
        let lines = self.redacted(undone.not_undone);
        (self.finished(report, result), lines)
    }

    /// [`HostApi::fail`] for one step of a session that continues
    /// ([`HostApi::finish_step`]).
    ///
    pub fn fail_step(&self) -> (Result<Report, FinishError>, Vec<String>) {
        let mut guard = lock(&self.inner.host);
        let Some(host) = guard.as_mut() else {
            return (Err(already_finished()), Vec::new());
        };
        let (report, undone, result) = host.fail_step_with_report();
        drop(guard);
        let lines = self.redacted(undone.not_undone);
        (self.finished(report, result), lines)
    }

    fn redacted(&self, lines: Vec<String>) -> Vec<String> {
        lines
            .into_iter()
            .map(|l| self.inner.redactor.redact(&l).into_owned())
            .collect()
    }

    /// The first failed write of the step's undo journal ([`Host::journal_failure`]),
    /// redacted: the step fails and is undone whatever its script caught.
    pub fn journal_failure(&self) -> Option<String> {
        lock(&self.inner.host)
            .as_ref()
            .and_then(|h| h.journal_failure())
            .map(|m| self.inner.redactor.redact(&m).into_owned())
    }

    /// What the session's start undid of journals left by steps that did not end
    /// ([`Host::recovered`]); empty once finished.
    pub fn recovered(&self) -> Vec<String> {
        lock(&self.inner.host)
            .as_ref()
            .map(|h| h.recovered().to_vec())
            .unwrap_or_default()
    }

    /// End one step but keep the session for the next one (see [`Host::finish_step`]): the
    /// deferred work runs and the step's [`Report`] is returned; the plan overlay stays, so a
    /// later run on this `HostApi` sees the planned effects of earlier ones. Call
    /// [`HostApi::finish`] after the last step.
    ///
    /// # Errors
    /// As [`HostApi::finish`].
    pub fn finish_step(&self) -> Result<Report, FinishError> {
        let mut guard = lock(&self.inner.host);
        let Some(host) = guard.as_mut() else {
            return Err(FinishError {
                report: None,
                message: "host session already finished".into(),
                source: None,
            });
        };
        let (report, result) = host.finish_step_with_report();
        drop(guard);
        self.finished(report, result)
    }

    /// Run `f` on the session directly (Rust callers that act on the host outside a script,
    /// e.g. `skyhook-run --package` planning the `root_dir/` overlay through the same
    /// session as the steps). `None` when the session was already finished.
    pub fn with_host<R>(&self, f: impl FnOnce(&mut Host) -> R) -> Option<R> {
        lock(&self.inner.host).as_mut().map(f)
    }

    /// The handle the bindings of one run capture: this session, the run's deadline and
    /// its output (for streamed commands). The session's deadline is tightened to the run's.
    pub(crate) fn for_run(
        &self,
        deadline: std::time::Instant,
        output: Arc<dyn ScriptOutput>,
    ) -> Api {
        if let Some(h) = lock(&self.inner.host).as_mut() {
            h.limit_deadline(deadline);
        }
        Api {
            inner: self.inner.clone(),
            deadline,
            output,
        }
    }

    /// How many effects this step has changed so far (`changed()` in scripts).
    pub fn changed(&self) -> i64 {
        lock(&self.inner.host)
            .as_ref()
            .map_or(0, |h| i64::try_from(h.changed()).unwrap_or(i64::MAX))
    }
}
