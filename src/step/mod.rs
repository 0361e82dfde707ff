//! One step, from what its front end says it is ([`spec::StepSpec`]: package, mode, step,
//! environment, configMaps, node metadata, executor, deadline, cancel) and its resolved
//! [`invocation::StepInvocation`] to its [`invocation::StepResult`], through one seam,
//! [`invocation::StepRunner`]:
//!
//! - [`process::ProcessRunner`] spawns a process through the one process primitive
//!   ([`crate::process`]: chroot, working directory, complete environment, own process group,
//!   streamed output, TERM/grace/KILL) and relays its output through the log sink;
//! - [`script::ScriptRunner`] runs a `.rhai` step in-process on a host session (Apply or
//!   Check executor), output through the same log sink;
//! - [`plan::PlanRunner`] is the dry run: scripts on the Plan executor of one shared
//!   session, processes "would run".
//!
//! [`runner::AgentRunner`] is the agent's combination of the first two. [`engine`] is the
//! one script engine every front end (agent, dry run, serve, skyhook-run) runs steps with.

pub mod invocation;
pub mod plan;
pub mod process;
pub mod runner;
pub mod script;
pub mod spec;

use std::sync::Arc;

use crate::script::{Limits, ScriptEngine};

pub use invocation::{StepInvocation, StepProgram, StepResult, StepRunner};
pub use plan::PlanRunner;
pub use process::{Outcome, ProcessRunner, ProcessSpec, RunOptions, RunReport};
pub use runner::AgentRunner;
pub use script::{ScriptRunner, SinkOutput};
pub use spec::{SecretSource, StepSpec};

/// The engine steps are compiled and run with (built once per run or server; every limit
/// but the deadline, which is per step).
pub fn engine() -> Arc<ScriptEngine> {
    Arc::new(ScriptEngine::new(Limits::default()))
}
