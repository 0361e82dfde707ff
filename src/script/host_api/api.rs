//! What every host function's binding shares: [`Api`] (the step's session, the run's
//! deadline and output), through which a call runs and its failure becomes a positioned,
//! redacted Rhai error; [`Registrar`], which collects the bindings into one Rhai module per
//! namespace; and the names and errors of calls. The namespace files and the reference rows
//! ([`super::FnDoc`]) use these; [`super::HostApi`] builds an [`Api`] per run.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rhai::{Engine, EvalAltResult, FuncRegistration, Module, NativeCallContext, RhaiNativeFunc};

use crate::host::secrets::Redactor;
use crate::host::{Host, HostError};
use crate::script::errors::host_error;
use crate::script::output::ScriptOutput;

/// The session [`super::HostApi`] shares with every [`Api`] built from it.
pub(super) struct Inner {
    pub(super) host: Mutex<Option<Host>>,
    pub(super) redactor: Redactor,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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

/// The result type of binding closures.
pub(crate) type RhaiResult<T> = Result<T, Box<EvalAltResult>>;

/// What every binding closure captures: the session, the run's deadline and its output (for
/// streamed commands).
#[derive(Clone)]
pub(crate) struct Api {
    pub(super) inner: Arc<Inner>,
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
                let r = op(h);
                h.set_position(None);
                r
            }
            None => Err(CallError::Arg("host session already finished".into())),
        };
        drop(guard);
        res.map_err(|e| {
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
