//! Runs one step: [`process::ProcessRunner`] spawns a process (chroot, working directory,
//! complete environment, own process group, optional timeout) and streams its output
//! through the log sink ([`crate::logs`]).

pub mod process;

pub use process::{Outcome, ProcessRunner, ProcessSpec, RunOptions, RunReport};
