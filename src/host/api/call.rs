//! One host call as a binding makes it ([`Api::call`]): the session locked, the call's
//! script position set, a failure turned into a positioned, redacted Rhai error (or, for a
//! call whose outcome the plan cannot know, the termination that ends the plan,
//! [`PlanUnknown`]); and [`CallError`], what a binding's body fails with.

use std::sync::{Arc, Mutex};

use rhai::{EvalAltResult, NativeCallContext};

use super::ScriptOutput;
use crate::host::{Host, HostError};
use crate::redact::Redactor;

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

/// Why a binding failed: the host call (the session's [`HostError`], or an area's own error,
/// wrapped here), or an argument the binding could not convert.
#[derive(Debug)]
pub(crate) enum CallError {
    Host(HostError),
    Area(Box<dyn AreaError>),
    Arg(String),
}

/// An area's own failure (`SecretError`, `ConfigError`, ...): an error whose message and
/// causes a script sees, and whether it may depend on the host root's state (as
/// [`HostError::depends_on_host`]: after a command the plan did not run, such a failure is
/// unknown in the plan, not a refusal). An area's error enum wraps [`HostError`] for what the
/// session fails with; `area_error!` converts it into a
/// `CallError`, unwrapping that variant.
pub trait AreaError: std::error::Error + Send + Sync + 'static {
    /// Whether the failure may depend on the host root's state.
    fn depends_on_host(&self) -> bool;
}

/// `From<$area> for CallError`: the area error's `Host` variant as [`CallError::Host`], any
/// other as [`CallError::Area`].
macro_rules! area_error {
    ($area:ident) => {
        impl From<$area> for $crate::host::api::CallError {
            fn from(e: $area) -> Self {
                match e {
                    $area::Host(e) => $crate::host::api::CallError::Host(e),
                    e => $crate::host::api::CallError::Area(Box::new(e)),
                }
            }
        }
    };
}
pub(crate) use area_error;

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

/// The run a host call serves: the session, the run's deadline and its output (for
/// streamed commands). The host functions' modules are built once per process and
/// capture none of it: a run binds its `Api` to the thread that evaluates it
/// ([`Api::bind`]) and every binding reads it from there ([`Api::call_current`]).
#[derive(Clone)]
pub(crate) struct Api {
    pub(super) inner: Arc<Inner>,
    pub deadline: std::time::Instant,
    pub output: Arc<dyn ScriptOutput>,
}

thread_local! {
    /// The run bound to this thread ([`Api::bind`]); `None` outside a run.
    static CURRENT: std::cell::RefCell<Option<Api>> = const { std::cell::RefCell::new(None) };
}

/// The binding of one run to the evaluating thread ([`Api::bind`]): dropping it (at the end
/// of the evaluation, also by a panic's unwinding) puts back what was bound before, so no
/// later evaluation on the thread reaches this run's session, deadline or output.
pub(crate) struct Bound {
    previous: Option<Api>,
}

impl Drop for Bound {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

impl Api {
    /// Bind this run to the current thread until the returned [`Bound`] is dropped: the host
    /// functions called on this thread meanwhile serve it.
    pub(crate) fn bind(self) -> Bound {
        Bound {
            previous: CURRENT.with(|c| c.borrow_mut().replace(self)),
        }
    }

    /// [`Api::call`] on the run bound to this thread ([`Api::bind`]), `op` given that run
    /// too. With none bound (a call outside a run, or after its step ended) the call fails
    /// with `<fname>: host session already finished`, as a call on a finished session does.
    pub fn call_current<R>(
        ctx: &NativeCallContext,
        fname: &str,
        op: impl FnOnce(&Api, &mut Host) -> Result<R, CallError>,
    ) -> RhaiResult<R> {
        // A clone (two `Arc`s), so that no borrow of the cell is held during the call.
        match CURRENT.with(|c| c.borrow().clone()) {
            Some(run) => run.call(ctx, fname, |h| op(&run, h)),
            None => Err(host_error(
                ctx,
                format!("{fname}: host session already finished"),
            )),
        }
    }

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
                    CallError::Area(e) if e.depends_on_host() => match h.unplanned_command() {
                        Some((command, position)) => {
                            CallError::Host(HostError::PlanUnknownFailure {
                                failure: error_chain(&*e),
                                command: command.to_string(),
                                position,
                            })
                        }
                        None => CallError::Area(e),
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
                CallError::Area(e) => error_chain(&*e),
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
