//! Skyhook node agent and Rhai step runtime.
//!
//! Layers, top to bottom (data flows down, never back up), as `docs/architecture.md` draws
//! them:
//!
//! | module | role |
//! |---|---|
//! | [`cli`] | the command lines of `skyhook-agent`, `skyhook-agent serve` and `skyhook-run` side by side, and the one exit-status table ([`cli::exit`]) |
//! | [`fleet`] | `skyhook-run plan`: a Skyhook CR's packages planned read-only on every node it selects, through each node's `serve`, nodes grouped by plan |
//! | [`local`] | `skyhook-run`: one script or a whole package against a local host root (plan, apply, check) |
//! | [`package`] | config.json model, embedded JSON Schema v1, step rules, package loading |
//! | [`agent`] | one mode of one package: the one mode loop ([`agent::mode::ModeLoop`]), flags, history, check summaries, interrupts, SIGTERM, the console |
//! | [`step`] | one step from its spec to its result ([`step::StepRunner`]): a process, a `.rhai` script in-process, or a dry run |
//! | [`process`] | the one process primitive (own group, subreaper, TERM/grace/KILL, streamed output) and the [`process::Cancel`] token |
//! | [`diag`] | diagnostics with `tracing` (`SKYHOOK_LOG`, `SKYHOOK_LOG_FORMAT`, `SKYHOOK_LOG_FILE`), off by default, never on stdout |
//! | [`logs`] | the log sink: chunked relay, timestamps and labels, log files, retention |
//! | [`redact`] | secret redaction: the secret values hidden as `***` in output, logs, plans and errors |
//! | [`state`] | the on-host files the agent owns: flag names, history, markers, all atomic |
//! | [`pyfmt`] | Python-compatible renderings (repr, float, isoformat, json.dumps) the state formats need |
//! | [`script`] | the Rhai engine: limits, module resolver, context, output, error mapping, host API bindings |
//! | [`serve`] | the remote step API (`skyhook-agent serve`): executions, event rings, secrets, auth, HTTP |
//! | [`host`] | root confinement ([`host::root::HostRoot`]) and the host API |
#![warn(missing_docs)]

pub mod agent;
pub mod chain;
pub mod cli;
pub mod clock;
pub mod diag;
pub mod fleet;
pub mod host;
pub mod local;
pub mod logs;
pub mod package;
pub mod process;
pub mod pyfmt;
pub mod redact;
pub mod remote;
pub mod script;
pub mod serve;
pub mod state;
pub mod step;

#[cfg(test)]
mod proptests;

/// The library's own tests count allocations as the binaries do (each binary installs
/// [`script::memory::CountingAlloc`]), so that the memory limit of a script run is tested.
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: script::memory::CountingAlloc = script::memory::CountingAlloc;
