//! The host API bound into Rhai: [`HostApi`], a [`ScriptHost`] over one [`Host`] session.
//!
//! This layer is thin: every script function converts its Rhai arguments, calls the plain
//! Rust function of the same name in [`crate::host`] and converts the result back. Each
//! script namespace has one file here (`fs.rs`, `service.rs`, ...; the global functions in
//! `global.rs`) holding, per function, one `host_fn!` row: its reference entry (parameters,
//! description, option keys, the [`Effects`] it submits, from which its behaviour in apply,
//! plan and check mode is derived) and its registration, and below them the namespace's tests
//! through Rhai. [`FUNCTIONS`] gathers the rows; `docs/host-api.md` and `docs/skyhook.d.rhai`
//! are generated from it ([`render_markdown`], [`render_definitions`]), the engine's modules
//! are built from it ([`HostApi`]) and the static checker reads it.
//!
//! # Adding a host function
//!
//! 1. Write the plain Rust function in its host area (`crate::host`): it reads through the
//!    session and changes the host only by submitting effects.
//! 2. Add one `host_fn!` row to `FUNCTIONS` of its namespace's file, in reference order:
//!    namespace, name, parameters, return type, [`Effects`] (what it reads, or the
//!    [`EffectKind`]s it submits), the one-line description, `options = KEYS` when it takes
//!    an options map (the binding checks the map against the same `KEYS`), and the binding.
//! 3. Add a sample call to the file's `tests::SAMPLES` (one that changes something in the
//!    effects test's root) and the function's tests to the file's `tests` module.
//! 4. Regenerate the docs: `SKYHOOK_UPDATE_DOCS=1 cargo test --lib script::host_api::tests::docs`.
//!
//! A new namespace is a new file with its `NAMESPACES` section and `FUNCTIONS`, listed in
//! `reference.rs` (`FUNCTION_PARTS`, `NAMESPACE_PARTS`) and its samples in `tests.rs`
//! (`EFFECT_SAMPLES`); a new kind of effect is a new [`EffectKind`].
//!
//! # Use
//!
//! ```no_run
//! # use std::sync::{Arc, atomic::AtomicBool};
//! # use skyhook::host::{ExecMode, Host, HostOptions, root::HostRoot};
//! # use skyhook::script::{host_api::HostApi, *};
//! # use skyhook::step::{ScriptRunOptions, run_script_with};
//! # fn demo(engine: &ScriptEngine, script: &CompiledScript, ctx: &StepContext) {
//! let host = Host::new(HostRoot::open("/").unwrap(), ExecMode::Plan, HostOptions::default());
//! let api = HostApi::new(host);
//! // Route output through the host's redactor (the agent's log sink may share it instead).
//! let output = api.redacting_output(Arc::new(StdioOutput));
//! let mut opts = ScriptRunOptions::new(output, skyhook::process::Cancel::new());
//! opts.host = Arc::new(api.clone());
//! let outcome = run_script_with(engine, script, ctx, &opts);
//! // Always finish, also when the script failed: pending daemon-reload and grub work run.
//! let report = api.finish();
//! # let _ = (outcome, report);
//! # }
//! ```
//!
//! `HostApi` is a cheap handle (`Clone` shares the session). [`HostApi::finish`] takes the
//! session out, runs its deferred work ([`Host::finish`]) and returns the [`Report`]; any
//! later host call from a script fails with "host session already finished".
//!
//! # Errors
//!
//! A failed host call raises a catchable Rhai runtime error at the call's position (so the
//! step fails with `file:line:col: message`), whose message is `<ns>::<fn>: <what>` with the
//! [`HostError`] and its causes, and has passed through the session's
//! [`Redactor`]: a secret's value never appears in it.
//!
//! # Deadline
//!
//! [`ScriptHost::register`] tightens the session's deadline to the run's
//! ([`RunHandle::deadline`]), so commands (`run`, `sh`, and the internal `systemctl`,
//! package manager and grub commands) default to what remains of it; an explicit `timeout`
//! is capped by it too.

/// One host function: its reference row ([`FnDoc`]) and its registration, in one place.
///
/// `host_fn!(ns, name, params, returns, effects, doc, [options = KEYS,] [api = id,]
/// |h, arg: Type, ...| body)`: `params` are the reference's `(name, type)` pairs, `effects`
/// an [`Effects`] (from which the modes column is derived), `KEYS` the accepted keys of the
/// options map. `body` evaluates to `Result<R, CallError>` with the session as
/// `h: &mut Host`; with `api = id` it also sees the run's [`Api`] (deadline, output) as `id`.
/// A failed call becomes a positioned, redacted Rhai error `ns::name: message`.
macro_rules! host_fn {
    ($ns:literal, $name:literal, $params:expr, $ret:literal, $effects:expr, $doc:literal,
     $(options = $opts:expr,)? api = $api:ident, |$h:ident $(, $arg:ident : $ty:ty)*| $body:expr $(,)?) => {
        host_fn!(@row $ns, $name, $params, $ret, $effects, $doc, [$($opts)?], $api,
                 |$h $(, $arg: $ty)*| $body)
    };
    ($ns:literal, $name:literal, $params:expr, $ret:literal, $effects:expr, $doc:literal,
     $(options = $opts:expr,)? |$h:ident $(, $arg:ident : $ty:ty)*| $body:expr $(,)?) => {
        host_fn!(@row $ns, $name, $params, $ret, $effects, $doc, [$($opts)?], api,
                 |$h $(, $arg: $ty)*| $body)
    };
    (@row $ns:literal, $name:literal, $params:expr, $ret:literal, $effects:expr, $doc:literal,
     [$($opts:expr)?], $api:ident, |$h:ident $(, $arg:ident : $ty:ty)*| $body:expr) => {
        $crate::script::host_api::FnDoc {
            ns: $ns,
            name: $name,
            params: $params,
            returns: $ret,
            doc: $doc,
            effects: $effects,
            script_layer: false,
            options: host_fn!(@options $($opts)?),
            register: |r, session| {
                let $api = session.clone();
                let fname = $crate::script::host_api::fname($ns, $name);
                r.add(
                    $ns,
                    $name,
                    move |ctx: rhai::NativeCallContext $(, $arg: $ty)*| {
                        $api.call(&ctx, &fname, |$h| $body)
                    },
                );
            },
        }
    };
    (@options) => { &[] };
    (@options $opts:expr) => { $opts };
}

mod api;
mod config;
mod convert;
mod docs;
mod fs;
mod global;
mod interrupt;
mod kmod;
mod mount;
mod os;
mod pkg;
mod reference;
mod service;
mod structured;
mod tuning;
mod users;
mod version;

#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex};

use rhai::Engine;

use super::bindings::{RunHandle, ScriptHost};
use super::output::ScriptOutput;
use crate::host::secrets::Redactor;
use crate::host::{Host, HostError, Report};
use crate::redact::StreamRedactor;
use api::{Api, Inner, Registrar, lock};

pub(crate) use api::{error_chain, fname};
pub(crate) use convert::explain_not_found;
pub use docs::{EffectKind, Effects, FnDoc, Modes};
pub use reference::{FUNCTIONS, NAMESPACES, SCRIPT_FUNCTIONS, render_definitions, render_markdown};

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

    /// Build the modules of every host function (closures over this session and `run`),
    /// returning them with the registration log.
    pub(crate) fn modules(&self, run: &RunHandle) -> Registrar {
        let api = Api {
            inner: self.inner.clone(),
            deadline: run.deadline,
            output: run.output.clone(),
        };
        let mut r = Registrar::default();
        for f in FUNCTIONS {
            (f.register)(&mut r, &api);
        }
        r
    }
}

impl ScriptHost for HostApi {
    fn register(&self, engine: &mut Engine, run: &RunHandle) {
        if let Some(h) = lock(&self.inner.host).as_mut() {
            h.limit_deadline(run.deadline);
        }
        self.modules(run).install(engine);
    }

    fn changed(&self) -> i64 {
        lock(&self.inner.host)
            .as_ref()
            .map_or(0, |h| i64::try_from(h.changed()).unwrap_or(i64::MAX))
    }
}

/// What [`HostApi::capture_output`] does with script output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// Write both streams as usual and record them in the ordered list (`--output json`).
    Record,
    /// Record stdout instead of writing it (the plan renders it in order); write and record
    /// stderr (a dry run's text plan).
    StdoutInPlan,
}

/// Records output into a session's journal ([`HostApi::capture_output`]).
struct RecordingOutput {
    inner: Arc<dyn ScriptOutput>,
    journal: crate::host::effects::report::Journal,
    forward_stdout: bool,
}

impl ScriptOutput for RecordingOutput {
    fn stdout(&self, bytes: &[u8]) {
        self.journal
            .output(crate::host::effects::report::OutputStream::Stdout, bytes);
        if self.forward_stdout {
            self.inner.stdout(bytes);
        }
    }
    fn stderr(&self, bytes: &[u8]) {
        self.journal
            .output(crate::host::effects::report::OutputStream::Stderr, bytes);
        self.inner.stderr(bytes);
    }
}

/// Redacts each stream as a byte stream (a secret split across two chunks of a streamed
/// command is still hidden, and a multi-byte character split across chunks is passed on
/// intact); a possible partial secret held back at the end is released when the output is
/// dropped.
struct RedactingOutput {
    inner: Arc<dyn ScriptOutput>,
    redactor: Redactor,
    out: Mutex<StreamRedactor>,
    err: Mutex<StreamRedactor>,
}

impl RedactingOutput {
    fn pass(&self, stream: &Mutex<StreamRedactor>, bytes: &[u8], stdout: bool) {
        let mut buf = Vec::with_capacity(bytes.len());
        lock(stream).push(&self.redactor, bytes, &mut buf);
        if !buf.is_empty() {
            if stdout {
                self.inner.stdout(&buf);
            } else {
                self.inner.stderr(&buf);
            }
        }
    }
}

impl ScriptOutput for RedactingOutput {
    fn stdout(&self, bytes: &[u8]) {
        self.pass(&self.out, bytes, true);
    }
    fn stderr(&self, bytes: &[u8]) {
        self.pass(&self.err, bytes, false);
    }
}

impl Drop for RedactingOutput {
    fn drop(&mut self) {
        let mut tail = Vec::new();
        lock(&self.out).finish(&mut tail);
        if !tail.is_empty() {
            self.inner.stdout(&tail);
        }
        tail.clear();
        lock(&self.err).finish(&mut tail);
        if !tail.is_empty() {
            self.inner.stderr(&tail);
        }
    }
}
