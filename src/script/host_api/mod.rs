//! The host API bound into Rhai: the rows of every host function gathered ([`FUNCTIONS`],
//! [`NAMESPACES`]), the reference rendered from them (`docs/host-api.md`,
//! `docs/skyhook.d.rhai`), and [`HostApi`] as the script layer's [`ScriptHost`]: each run's
//! engine gets one Rhai module per namespace, built from the rows over the step's session.
//!
//! A host function has one home: the file of its area in `crate::host` that implements it
//! also holds its `host_fn!` row (see [`crate::host::api`]); its tests through Rhai sit in
//! that area's folder.
//!
//! # Adding a host function
//!
//! 1. Write the plain Rust function in its area file (`src/host/<area>/<file>.rs`): it reads
//!    through the session and changes the host only by submitting effects.
//! 2. Add its `host_fn!` row to that file's `rows::FUNCTIONS` (in its `pub(crate) mod rows`:
//!    namespace, name, parameters, return type, [`Effects`]: what it reads, or the
//!    [`EffectKind`]s it submits, the one-line description, `options = KEYS` when it takes
//!    an options map, and the binding). A file's first row also lists its
//!    `rows::FUNCTIONS` in `reference.rs` (`FUNCTION_PARTS`, in reference order).
//! 3. Add a sample call to the `tests::SAMPLES` of the folder's `*_script_tests.rs` file
//!    that tests its namespace (every function has one; one that submits effects must change
//!    something in the effects test's root), and the function's tests beside it. A new test
//!    file is declared `#[cfg(test)] pub(crate) mod ...` in the folder's `mod.rs` and its
//!    `SAMPLES` listed in `EFFECT_SAMPLES` (`tests.rs`, in reference order).
//! 4. Regenerate the docs (docs/host-api.md, docs/skyhook.d.rhai, the README's list):
//!    `SKYHOOK_UPDATE_DOCS=1 cargo test --lib script::host_api::tests::docs`.
//!
//! A new namespace also gets its reference section in the area file's `rows::NAMESPACES`,
//! listed in `reference.rs` (`NAMESPACE_PARTS`); a new kind of effect is a new
//! [`EffectKind`].
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
//! // End the session: `finish` after a successful run (deferred work, directory syncs);
//! // `fail` after a failed one (an apply step's changes are undone).
//! let report = if outcome.failed() { api.fail().0 } else { api.finish() };
//! # let _ = (outcome, report);
//! # }
//! ```
//!
//! `HostApi` is a cheap handle (`Clone` shares the session). [`HostApi::finish`] takes the
//! session out, runs its deferred work ([`crate::host::Host::finish_with_report`]) and returns the [`crate::host::Report`]; any
//! later host call from a script fails with "host session already finished".
//!
//! # Errors
//!
//! A failed host call raises a catchable Rhai runtime error at the call's position (so the
//! step fails with `file:line:col: message`), whose message is `<ns>::<fn>: <what>` with the
//! [`crate::host::HostError`] and its causes, and has passed through the session's
//! [`crate::redact::Redactor`]: a secret's value never appears in it.
//!
//! # Deadline
//!
//! [`ScriptHost::register`] tightens the session's deadline to the run's
//! ([`RunHandle::deadline`]), so commands (`run`, `sh`, and the internal `systemctl`,
//! package manager and grub commands) default to what remains of it; an explicit `timeout`
//! is capped by it too.

mod reference;

#[cfg(test)]
pub(crate) mod tests;

use rhai::Engine;

use super::bindings::{RunHandle, ScriptHost};
use crate::host::api::Registrar;

pub(crate) use crate::host::api::convert::explain_not_found;
pub use crate::host::api::{Capture, EffectKind, Effects, FinishError, FnDoc, HostApi, Modes};
pub(crate) use crate::host::api::{error_chain, fname};
pub use reference::{FUNCTIONS, NAMESPACES, SCRIPT_FUNCTIONS, render_definitions, render_markdown};

impl ScriptHost for HostApi {
    fn register(&self, engine: &mut Engine, run: &RunHandle) {
        modules(self, run).install(engine);
    }

    fn changed(&self) -> i64 {
        HostApi::changed(self)
    }
}

/// The modules of every host function, closures over `api`'s session and `run` (deadline,
/// output), with the registration log.
pub(crate) fn modules(api: &HostApi, run: &RunHandle) -> Registrar {
    let api = api.for_run(run.deadline, run.output.clone());
    let mut r = Registrar::default();
    for f in FUNCTIONS {
        (f.register)(&mut r, &api);
    }
    r
}
