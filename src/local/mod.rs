//! Local runs for package authors (what `skyhook-run` does): one `.rhai` script, or a whole
//! package the way the agent runs it, against a host root on this machine.
//!
//! - [`script`]: [`ScriptRun`] runs one script as a dry run ([`ExecMode::Plan`](crate::host::ExecMode::Plan)), for real
//!   ([`ExecMode::Apply`](crate::host::ExecMode::Apply)) or as a check ([`ExecMode::Check`](crate::host::ExecMode::Check), the `*-check` modes), and
//!   returns a [`StepResult`] with the host [`Report`](crate::host::Report).
//! - [`package`]: [`PackageRun`] loads and validates a package directory, then either plans
//!   every step of one mode in one host session ([`PackageRun::plan`] → [`PackagePlan`]:
//!   `.rhai` steps run on the Plan or Check executor, other steps are listed as
//!   `would run: <path> <args>`), or copies it into the root and runs the agent's own mode
//!   flow ([`PackageRun::apply`], [`crate::agent::mode::ModeRun`]).
//!
//! Nothing here prints: script output goes to the [`ScriptOutput`](crate::script::ScriptOutput)
//! the caller gives, results come back as values the caller renders
//! ([`crate::host::Report::render_text`], [`PackagePlan::render_text`], the `to_json`
//! methods), except [`PackageRun::apply`], which is the agent flow and prints as the agent
//! does.
//!
//! The step environment is what the caller passes (`skyhook-run`: its own environment plus
//! `--env`), as the agent passes its environment to every step.

mod env;
pub mod error;
pub mod json;
pub mod package;
mod plan_text;
pub mod scaffold;
pub mod script;

pub(crate) use env::{env_default, env_get};
pub use error::LocalError;
pub use json::{error_json, script_error_json};
pub use package::{PackagePlan, PackageRun, PlannedStep, StepKind, default_copy_dir};
pub use script::{ScriptRun, StepResult, script_timeout};

#[cfg(test)]
mod tests;
