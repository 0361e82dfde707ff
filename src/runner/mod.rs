//! Runs one step: [`process::ProcessRunner`] spawns a process (chroot, working directory,
//! complete environment, own process group, optional timeout) and [`script::ScriptRunner`]
//! runs a `.rhai` step in-process; both stream output through the log sink ([`crate::logs`]).

pub mod process;
pub mod script;

pub use process::{Outcome, ProcessRunner, ProcessSpec, RunOptions, RunReport};
pub use script::{ScriptRunner, SinkOutput};
