//! The agent: one run of one mode (or interrupt) of one package (agent-contract.md sections
//! 2-12), and `validate`. The startup of a run (resource id, host root, banner, runtime,
//! SIGTERM) is the command line's (`cli::agent`); a mode run is [`mode`] (over the shared
//! loop of [`crate::mode`]), an interrupt [`interrupt`].

pub mod args;
pub mod banner;
pub mod error;
pub mod interrupt;
pub mod mode;
pub mod prepare;
pub mod prepare_error;
pub mod signal;
pub mod site;
pub mod validate;

pub use validate::validate;

/// The mode layer's parts the agent's files name (`crate::mode` is where they live).
pub use crate::mode::{console, coverage, env, settings, step_logs};

#[cfg(test)]
mod tests;
