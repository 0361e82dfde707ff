//! The host API bound into Rhai: the tables of every host function gathered ([`FUNCTIONS`],
//! [`NAMESPACES`]), the reference rendered from them (`docs/host-api.md`,
//! `docs/skyhook.d.rhai`), and [`HostApi`] as the script layer's `ScriptHost`: each run's
//! engine gets one Rhai module per namespace, built once from the rows, whose functions
//! serve the step's session bound to the evaluating thread.
//!
//! A host function has one home: one `host_fn!` item (see `crate::host::api::define`) in
//! the file of its area in `crate::host`, beside the area function it calls; its tests
//! through Rhai sit in that area's folder.
//!
//! # Adding a host function
//!
//! 1. Write the plain Rust function in its area file (`src/host/<area>/<file>.rs`): it reads
//!    through the session and changes the host only by submitting effects.
//! 2. Below it, write the function as scripts call it, in a `host_fn!` item: its `///` text
//!    is the reference's description, its signature the parameters (their Rhai types
//!    follow from the Rust types, or `as "Map"`) and the return type, `#[host(ns = ...,
//!    effects = ..., options = KEYS)]` the namespace, what it reads or the
//!    [`EffectKind`]s it submits, and the keys of its options map; overloads follow in the
//!    same item (`#[overload]`):
//!
//!    ```ignore
//!    host_fn! {
//!        /// Remove every line matching `regex`; a missing file is unchanged.
//!        #[host(ns = "fs", effects = [Write])]
//!        fn remove_line(h: &mut Host, path: S, regex: S) -> bool {
//!            Ok(super::remove_line(h, &path, &regex)?)
//!        }
//!    }
//!    ```
//! 3. Name it in the file's `host_fns!(...)` table, in reference order (one left out is
//!    dead code, which the build rejects). A new area file's `HOST_FNS` goes in the list of
//!    areas (`reference.rs`, `AREAS`), likewise checked.
//! 4. Add a sample call to the `tests::SAMPLES` of the folder's `*_script_tests.rs` file
//!    that tests its namespace (every function has one; one that submits effects must change
//!    something in the effects test's root), and the function's tests beside it. A new test
//!    file is declared `#[cfg(test)] pub(crate) mod ...` in the folder's `mod.rs` and its
//!    `SAMPLES` listed in `EFFECT_SAMPLES` (`tests.rs`, in reference order).
//! 5. Regenerate the docs (docs/host-api.md, docs/skyhook.d.rhai, the README's list):
//!    `SKYHOOK_UPDATE_DOCS=1 cargo test --lib script::host_api::tests::docs`.
//!
//! A new namespace also gets its reference section in its area file's `NAMESPACES`, listed
//! in `reference.rs` (`NAMESPACE_PARTS`); a new kind of effect is a new [`EffectKind`].
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
//! `ScriptHost::register` binds the run (session, deadline, output) to the evaluating thread
//! for the evaluation (the host modules themselves are built once per process) and tightens
//! the session's deadline to the run's
//! (`RunHandle::deadline`), so commands (`run`, `sh`, and the internal `systemctl`,
//! package manager and grub commands) default to what remains of it; an explicit `timeout`
//! is capped by it too.

mod reference;
mod register;

#[cfg(test)]
pub(crate) mod tests;

pub(crate) use crate::host::api::convert::explain_not_found;
pub use crate::host::api::{Capture, EffectKind, Effects, FinishError, FnDoc, HostApi, Modes};
pub(crate) use crate::host::api::{error_chain, fname};
pub use reference::{FUNCTIONS, NAMESPACES, SCRIPT_FUNCTIONS, render_definitions, render_markdown};
#[cfg(test)]
pub(crate) use register::modules;
pub use register::prepare_modules;
