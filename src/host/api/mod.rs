//! Host functions as scripts see them: [`HostApi`], one step's [`Host`](crate::host::Host)
//! session shared by every binding of a run (`handle`); one host call as a binding makes it
//! (`Api::call`, `CallError`, in `call`: the run a call serves is the one bound to the
//! evaluating thread, `Api::bind`); the `host_fn!` item that defines a host function once
//! (its `fn`, `///` text, signature and effects give its registration and its reference
//! row, [`FnDoc`]) and `host_fns!`, a file's table of them (`define`); the registration into
//! Rhai modules, built once per process (`Registrar`, `HostModules`); the conversions
//! between Rhai values and the areas' types ([`convert`]); and [`ScriptOutput`].
//!
//! It sits below the areas so that each host function has one home: the file of its area
//! that implements it also holds its `host_fn!` item, beside the area function it calls.
//! `crate::script::host_api` gathers the files' tables, builds each run's modules from them
//! and renders `docs/host-api.md`.
//!
//! A failed host call raises a catchable Rhai runtime error at the call's position (so the
//! step fails with `file:line:col: message`), whose message is `<ns>::<fn>: <what>` with the
//! error and its causes, passed through the session's redactor: a secret's value never
//! appears in it.

mod call;
pub mod convert;
pub(crate) mod define;
pub mod docs;
mod handle;
mod output;
mod registrar;

pub use call::AreaError;
pub(crate) use call::{Api, CallError, area_error, error_chain, fname};
pub use call::{PlanUnknown, host_error};
pub(crate) use define::{host_fn, host_fns, script_fn};
pub use docs::{EffectKind, Effects, FnDoc, Modes};
pub use handle::{FinishError, HostApi};
pub use output::{Capture, ScriptOutput};
pub(crate) use registrar::{HostModules, Registrar};
