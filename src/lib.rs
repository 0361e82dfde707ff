//! Skyhook node agent and Rhai step runtime.
//!
//! The top-level modules and the modules each may import, lowest layer first: a copy of
//! `LAYERS` in `tests/layers.rs`, as `docs/architecture.md` shows it (where each module's role
//! is described); a test checks both copies
//! (`SKYHOOK_UPDATE_DOCS=1 cargo test --test tests layers` rewrites them).
//!
//! <!-- BEGIN LAYERS (tests/layers.rs) -->
//! | module (lowest first) | may import |
//! |---|---|
//! | `chain` | — |
//! | `clock` | — |
//! | `diag` | — |
//! | `pyfmt` | — |
//! | `redact` | — |
//! | `process` | — |
//! | `host` | `chain`, `process`, `redact` |
//! | `package` | `pyfmt` |
//! | `logs` | `host` |
//! | `state` | `host`, `package`, `process`, `pyfmt` |
//! | `script` | `host`, `process` |
//! | `step` | `chain`, `clock`, `host`, `logs`, `process`, `redact`, `script` |
//! | `mode` | `chain`, `clock`, `host`, `logs`, `package`, `process`, `pyfmt`, `redact`, `script`, `state`, `step` |
//! | `agent` | `chain`, `host`, `logs`, `mode`, `package`, `process`, `pyfmt`, `script`, `state`, `step` |
//! | `local` | `agent`, `host`, `mode`, `package`, `process`, `redact`, `script`, `state`, `step` |
//! | `serve` | `chain`, `clock`, `host`, `local`, `package`, `process`, `redact`, `script`, `step` |
//! | `remote` | `process`, `serve` |
//! | `fleet` | `package`, `process`, `remote`, `serve` |
//! | `cli` | `agent`, `chain`, `diag`, `fleet`, `host`, `local`, `mode`, `package`, `process`, `remote`, `script`, `serve` |
//! <!-- END LAYERS -->
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
pub mod mode;
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
