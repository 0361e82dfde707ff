//! The agent: one run of one mode (or interrupt) of one package (agent-contract.md sections
//! 2-12), and `validate`. The startup of a run (resource id, host root, banner, runtime,
//! SIGTERM) is the command line's (`cli::agent`); the mode loop is [`mode`], an interrupt
//! [`interrupt`].

pub mod args;
pub mod banner;
pub mod console;
pub mod coverage;
pub mod env;
pub mod error;
pub mod interrupt;
pub mod mode;
pub mod prepare;
pub mod prepare_error;
pub mod settings;
pub mod signal;
pub mod site;
pub mod step_logs;
pub mod validate;

pub use validate::validate;

#[cfg(test)]
mod tests;
