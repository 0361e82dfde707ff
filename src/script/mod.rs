//! The script layer: the embedded, sandboxed Rhai engine `.rhai` steps are compiled for and
//! evaluated in, and the host API bound into it.
//!
//! - [`engine`]: [`ScriptEngine`] — packages, limits, `eval` off, deadline and cancel.
//! - [`limits`]: [`Limits`], the resource limits of a run.
//! - [`resolver`]: `import "skyhook/<name>"` (embedded `stdlib/`) and imports confined to
//!   the package directory, compiled once per [`ModuleStore`].
//! - [`compile`]: [`compile_step`] (parse and resolve every static import before any state
//!   is written) → [`CompiledScript`].
//! - [`context`]: the `step` constant, `step()`, `env()` from a [`StepContext`].
//! - [`output`]: `print`, `debug`, `log::*` through [`ScriptOutput`], capped per run.
//! - [`memory`]: the counting allocator behind [`Limits::max_memory`].
//! - [`bindings`]: [`ScriptHost`], the seam where the host API (`fs::`, `service::`, ...)
//!   is bound into each run.
//! - [`errors`]: [`ScriptError`], rendered `file:line:col: message`.
//! - [`lint`]: the static checker of `skyhook-run check` and `skyhook-agent validate`
//!   (unknown functions and modules, argument counts, option keys, known Rhai traps).
//! - [`host_api`]: the host functions' rows gathered from the areas (`FUNCTIONS`), the
//!   reference rendered from them, and `HostApi` bound into each run.
//!
//! A compiled step is run (its own thread, deadline, cancel token, the bindings registered
//! on a fresh engine per run) by the step layer, `step::run` (`run_script`,
//! `run_script_with`).
//!
//! Besides the Rhai packages, scripts get: `print(x)`, `debug(x)`, `log::info/warn/error(msg)`,
//! `step` / `step()`, `env(name)` / `env(name, default)`, `fail(msg)` and `changed()`.
//!
//! # Example
//!
//! ```
//! use std::sync::{Arc, atomic::AtomicBool};
//! use skyhook::script::{CaptureOutput, ScriptEngine, StepContext, compile_step};
//! use skyhook::step::run_script;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("apply.rhai");
//! std::fs::write(&path, "print(`hi from ${step.name}`); 3").unwrap();
//!
//! let engine = ScriptEngine::default();
//! let script = compile_step(&engine, &path, dir.path()).unwrap();
//! let ctx = StepContext { name: "apply.rhai".into(), ..Default::default() };
//! let out = Arc::new(CaptureOutput::new());
//! let outcome = run_script(&engine, &script, &ctx, out.clone(), skyhook::process::Cancel::new());
//! assert_eq!(outcome.code, 3);
//! assert!(!outcome.failed());
//! assert_eq!(out.stdout_bytes(), b"hi from apply.rhai\n");
//! ```

pub mod bindings;
pub mod compile;
pub mod context;
pub mod engine;
pub mod errors;
pub mod host_api;
pub mod limits;
pub mod lint;
pub mod memory;
pub mod output;
pub mod resolver;

#[cfg(test)]
mod stdlib_tests;
#[cfg(test)]
mod tests;

pub use bindings::{NoHost, RunBinding, RunHandle, ScriptHost};
pub use compile::{CompiledScript, compile_source, compile_step, compile_step_in};
pub use context::StepContext;
pub use engine::ScriptEngine;
pub use errors::{Limit, ScriptError, ScriptErrorKind, host_error};
pub use limits::{Limits, TIMEOUT_ENV};
pub use output::{CaptureOutput, ScriptOutput, StdioOutput, Stream};
pub use resolver::{MAX_SCRIPT_BYTES, ModuleStore, STDLIB, stdlib_source};
