//! The seam for the host API: `fs::`, `service::`, `pkg::`, ... are plain Rust in
//! [`crate::host`]; a [`ScriptHost`] binds them into each run's engine.
//!
//! A host implementation is typically a per-step session (host root, executor — apply, plan
//! or check — and its record of effects) behind an `Arc`. [`ScriptHost::register`] is called
//! once per run, on the run's fresh engine, after the script-layer functions (output,
//! context, `fail`, `changed`) and before the run starts; it registers static modules
//! (`engine.register_static_module("fs", module)`) or global functions, whose closures
//! capture what they need of `self` and of the [`RunHandle`]. Host functions report failure
//! with [`host_error`](super::host_error) (or any `Box<EvalAltResult>`): Rhai adds the call's
//! position, the step fails with `file:line:col: message`.
//!
//! Registering a prebuilt `Shared<Module>` is an `Arc` clone, so a host with many functions
//! can build its modules once and keep the per-run cost near zero: the run-specific state
//! (session, deadline, output) is then what `register` binds for the evaluation and returns
//! as its [`RunBinding`] (the host API binds it to the evaluating thread).

use std::sync::Arc;
use std::time::Instant;

use rhai::Engine;

use super::output::ScriptOutput;
use crate::host::api::{host_fns, script_fn};

/// What a host binding may need of the current run.
#[derive(Clone)]
pub struct RunHandle {
    /// When the step's deadline passes. Blocking host calls (commands, lock waits) must not
    /// wait beyond it; `on_progress` cannot interrupt them.
    pub deadline: Instant,
    /// Set when the step is cancelled; long host calls should poll it.
    pub cancel: crate::process::Cancel,
    /// The step's output sink (e.g. for streaming a command's output live).
    pub output: Arc<dyn ScriptOutput>,
}

impl std::fmt::Debug for RunHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandle")
            .field("deadline", &self.deadline)
            .field("cancel", &self.cancel)
            .finish_non_exhaustive()
    }
}

/// What a [`ScriptHost::register`] keeps for the length of one evaluation (e.g. the run bound
/// to the evaluating thread), dropped on that thread when the evaluation ends.
#[derive(Default)]
pub struct RunBinding {
    /// Dropped with the binding.
    _held: Option<Box<dyn std::any::Any>>,
}

impl RunBinding {
    /// Nothing to keep.
    pub fn none() -> RunBinding {
        RunBinding { _held: None }
    }

    /// Keep `guard` until the evaluation ends.
    pub fn keep(guard: impl std::any::Any) -> RunBinding {
        RunBinding {
            _held: Some(Box::new(guard)),
        }
    }
}

/// The host API as seen by the script layer.
pub trait ScriptHost: Send + Sync {
    /// Register the host API into `engine` (one run's engine), on the thread that evaluates
    /// the run; the binding returned is held until the evaluation ends. See the module docs.
    fn register(&self, engine: &mut Engine, run: &RunHandle) -> RunBinding;

    /// How many effects this step has changed so far: the value of `changed()` in scripts.
    /// Actions are not counted (`docs/host-api.md`, Principles).
    fn changed(&self) -> i64;
}

script_fn! {
    /// How many changes this step has made (apply) or would make (plan, check) so far;
    /// actions are not counted.
    #[script(ns = "", effects = ReadsAgent)]
    fn changed(host: &dyn ScriptHost;) -> i64 {
        host.changed()
    }
}

host_fns!(SCRIPT_FNS: changed);

/// No host API: only the script layer's own functions exist, `changed()` is always 0. For
/// `skyhook-run check`, tests, and pure computation.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHost;

impl ScriptHost for NoHost {
    fn register(&self, _engine: &mut Engine, _run: &RunHandle) -> RunBinding {
        RunBinding::none()
    }

    fn changed(&self) -> i64 {
        0
    }
}
