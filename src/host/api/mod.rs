//! Host functions as scripts see them: [`HostApi`], one step's [`Host`]
//! session shared by every binding of a run; the `host_fn!` row that declares a function's
//! reference entry (parameters, description, option keys, the [`Effects`] it submits, from
//! which its behaviour per mode is derived) together with its registration; the conversions
//! between Rhai values and the areas' types ([`convert`]); and [`ScriptOutput`].
//!
//! It sits below the areas so that each host function has one home: the file of its area that
//! implements it also holds its `host_fn!` row (as Rhai's `#[export_module]` keeps a function,
//! its registration and its docs together). `crate::script::host_api` gathers the rows, builds
//! each run's modules from them and renders `docs/host-api.md`.
//!
//! A failed host call raises a catchable Rhai runtime error at the call's position (so the
//! step fails with `file:line:col: message`), whose message is `<ns>::<fn>: <what>` with the
//! [`HostError`] and its causes, passed through the session's
//! redactor: a secret's value never appears in it.

/// One host function: its reference row ([`FnDoc`]) and its registration, in one place.
///
/// `host_row!(ns, name, params, returns, effects, doc, [options = KEYS,] [api = id,]
/// |h, arg: Type, ...| body)`: `params` are the reference's `(name, type)` pairs, `effects`
/// an [`Effects`] (from which the modes column is derived), `KEYS` the accepted keys of the
/// options map. `body` evaluates to `Result<R, CallError>` with the session as
/// `h: &mut Host`; with `api = id` it also sees the run's [`Api`] (deadline, output) as `id`.
/// A failed call becomes a positioned, redacted Rhai error `ns::name: message`.
macro_rules! host_row {
    ($ns:literal, $name:literal, $params:expr, $ret:literal, $effects:expr, $doc:literal,
     $(options = $opts:expr,)? api = $api:ident, |$h:ident $(, $arg:ident : $ty:ty)*| $body:expr $(,)?) => {
        host_row!(@row $ns, $name, $params, $ret, $effects, $doc, [$($opts)?], $api,
                 |$h $(, $arg: $ty)*| $body)
    };
    ($ns:literal, $name:literal, $params:expr, $ret:literal, $effects:expr, $doc:literal,
     $(options = $opts:expr,)? |$h:ident $(, $arg:ident : $ty:ty)*| $body:expr $(,)?) => {
        host_row!(@row $ns, $name, $params, $ret, $effects, $doc, [$($opts)?], api,
                 |$h $(, $arg: $ty)*| $body)
    };
    (@row $ns:literal, $name:literal, $params:expr, $ret:literal, $effects:expr, $doc:literal,
     [$($opts:expr)?], $api:ident, |$h:ident $(, $arg:ident : $ty:ty)*| $body:expr) => {
        $crate::host::api::FnDoc {
            ns: $ns,
            name: $name,
            params: $params,
            returns: $ret,
            doc: $doc,
            effects: $effects,
            script_layer: false,
            options: host_row!(@options $($opts)?),
            register: |r, session| {
                let $api = session.clone();
                let fname = $crate::host::api::fname($ns, $name);
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
pub(crate) use host_row;

pub(crate) mod define;
pub(crate) use define::{host_fn, host_fns};

pub mod convert;
pub mod docs;
mod output;

pub use docs::{EffectKind, Effects, FnDoc, Modes};
pub use output::{Capture, ScriptOutput};

use crate::host::{Host, HostError, Report};
use crate::redact::Redactor;
use crate::redact::StreamRedactor;
use output::{RecordingOutput, RedactingOutput};
use rhai::{Engine, EvalAltResult, FuncRegistration, Module, NativeCallContext, RhaiNativeFunc};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The session [`HostApi`] shares with every [`Api`] built from it.
pub(crate) struct Inner {
    pub(crate) host: Mutex<Option<Host>>,
    pub(crate) redactor: Redactor,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic inside a host call is contained by the script runner; the session stays usable
    // for `finish`.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An error with its causes, `a: b: c` (see [`crate::chain::render`]).
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    crate::chain::render(e)
}

/// Why a binding failed: the host call, or an argument the binding could not convert.
#[derive(Debug)]
pub(crate) enum CallError {
    Host(HostError),
    Arg(String),
}

impl From<HostError> for CallError {
    fn from(e: HostError) -> Self {
        CallError::Host(e)
    }
}

impl From<String> for CallError {
    fn from(e: String) -> Self {
        CallError::Arg(e)
    }
}

/// The token of the termination that ends a plan at a call whose outcome is unknown
/// ([`HostError::PlanUnknown`]: it reads what a command the step only planned may have
/// changed): the rest of the step is checked statically only, as the steps after a bash
/// step are. The step runner treats it as the end of the plan, not as a failure.
#[derive(Debug, Clone)]
pub struct PlanUnknown {
    /// `<ns>::<fn>: <path> is unknown in the plan: ...`, redacted.
    pub message: String,
}

/// The result type of binding closures.
pub(crate) type RhaiResult<T> = Result<T, Box<EvalAltResult>>;

/// What every binding closure captures: the session, the run's deadline and its output (for
/// streamed commands).
#[derive(Clone)]
pub(crate) struct Api {
    inner: Arc<Inner>,
    pub deadline: std::time::Instant,
    pub output: Arc<dyn ScriptOutput>,
}

impl Api {
    /// Run `op` on the session; a failure becomes a positioned, redacted Rhai error
    /// `<fname>: <message>`.
    pub fn call<R>(
        &self,
        ctx: &NativeCallContext,
        fname: &str,
        op: impl FnOnce(&mut Host) -> Result<R, CallError>,
    ) -> RhaiResult<R> {
        let _span = tracing::debug_span!("host_api", function = fname).entered();
        let mut guard = lock(&self.inner.host);
        let res = match guard.as_mut() {
            Some(h) => {
                // Effects submitted by this call carry its script position.
                h.set_position(position(ctx));
                let r = op(h).map_err(|e| match e {
                    // After a command the plan did not run, a failure that depends on the
                    // host may not happen in the apply: unknown, not a refusal.
                    CallError::Host(e) if e.depends_on_host() => match h.unplanned_command() {
                        Some((command, position)) => {
                            CallError::Host(HostError::PlanUnknownFailure {
                                failure: error_chain(&e),
                                command: command.to_string(),
                                position,
                            })
                        }
                        None => CallError::Host(e),
                    },
                    e => e,
                });
                if let Err(CallError::Host(e)) = &r
                    && e.is_plan_unknown()
                {
                    h.note_unknown(fname, e);
                }
                h.set_position(None);
                r
            }
            None => Err(CallError::Arg("host session already finished".into())),
        };
        drop(guard);
        res.map_err(|e| {
            if let CallError::Host(e) = &e
                && e.is_plan_unknown()
            {
                // Ends the script (no `try`/`catch` intercepts a termination): the step's
                // plan stops here, and the step runner does not count it as a failure.
                let message = self
                    .inner
                    .redactor
                    .redact(&format!("{fname}: {}", error_chain(e)))
                    .into_owned();
                return Box::new(EvalAltResult::ErrorTerminated(
                    rhai::Dynamic::from(PlanUnknown { message }),
                    ctx.call_position(),
                ));
            }
            let text = match e {
                CallError::Host(e) => error_chain(&e),
                CallError::Arg(s) => s,
            };
            host_error(
                ctx,
                self.inner
                    .redactor
                    .redact(&format!("{fname}: {text}"))
                    .into_owned(),
            )
        })
    }
}

/// The script position of a host call: the source of the AST that made it (the script file,
/// or an imported module's) and the line. `None` when Rhai knows no position.
fn position(ctx: &NativeCallContext) -> Option<crate::host::Position> {
    let pos = ctx.call_position();
    Some(crate::host::Position {
        file: ctx.call_source().unwrap_or_default().to_string(),
        line: pos.line()?,
    })
}

/// The name of `ns::name` in messages (`name` alone for a global function).
pub(crate) fn fname(ns: &str, name: &str) -> String {
    if ns.is_empty() {
        name.to_string()
    } else {
        format!("{ns}::{name}")
    }
}

/// One registered function, as Rhai recorded it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Registered {
    /// Namespace (`""` for global functions).
    pub ns: &'static str,
    /// Name as Rhai stored it.
    pub name: String,
    /// Number of parameters as Rhai counted them (the call context excluded).
    pub params: usize,
    /// Rhai's hash of the function (to check it is in the module).
    pub hash: u64,
}

/// Collects functions into one module per namespace and logs each registration.
#[derive(Default)]
pub(crate) struct Registrar {
    pub log: Vec<Registered>,
    pub modules: BTreeMap<&'static str, Module>,
}

impl Registrar {
    /// Register `func` as `ns::name` (`ns` empty: a global function). Every host function is
    /// volatile (never constant-folded) and pure (never modifies its first argument).
    pub fn add<A: 'static, const N: usize, const X: bool, R, const F: bool, FUNC>(
        &mut self,
        ns: &'static str,
        name: &'static str,
        func: FUNC,
    ) where
        R: rhai::Variant + Clone,
        FUNC: RhaiNativeFunc<A, N, X, R, F> + Send + Sync + 'static,
    {
        let module = self.modules.entry(ns).or_default();
        let reg = FuncRegistration::new(name)
            .with_volatility(true)
            .with_purity(true);
        let reg = if ns.is_empty() {
            reg.in_global_namespace()
        } else {
            reg.in_internal_namespace()
        };
        let meta = reg.set_into_module(module, func);
        self.log.push(Registered {
            ns,
            name: meta.name.to_string(),
            params: meta.num_params,
            hash: meta.hash,
        });
    }

    /// Install the modules: global functions as a global module, the rest as static modules
    /// named after their namespace.
    pub fn install(self, engine: &mut Engine) {
        for (ns, m) in self.modules {
            if ns.is_empty() {
                engine.register_global_module(m.into());
            } else {
                engine.register_static_module(ns, m.into());
            }
        }
    }
}

/// A failed host call as a Rhai runtime error at the call's position: the step fails with
/// `file:line:col: message`. Rhai fills in a missing position for errors of global functions
/// but not for namespaced ones (`fs::write`), so every binding takes the
/// [`NativeCallContext`] and passes it here.
pub fn host_error(ctx: &NativeCallContext, message: impl Into<String>) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorRuntime(
        rhai::Dynamic::from(message.into()),
        ctx.call_position(),
    ))
}

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
