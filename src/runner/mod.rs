//! Runs one step. The seam is [`step::StepRunner`], fed a fully resolved
//! [`step::StepInvocation`]:
//!
//! - [`process::ProcessRunner`] spawns a process through the one process primitive
//!   ([`crate::process`]: chroot, working directory, complete environment, own process group,
//!   streamed output, TERM/grace/KILL) and relays its output through the log sink;
//! - [`script::ScriptRunner`] runs a `.rhai` step in-process on a host session (Apply or
//!   Check executor), output through the same log sink;
//! - [`plan::PlanRunner`] is the dry run: scripts on the Plan executor of one shared
//!   session, processes "would run".
//!
//! [`step::AgentRunner`] is the agent's combination of the first two.

pub mod plan;
pub mod process;
pub mod script;
pub mod step;

pub use plan::{PlanRunner, StepOutcome};
pub use process::{Outcome, ProcessRunner, ProcessSpec, RunOptions, RunReport};
pub use script::{ScriptRunner, SinkOutput};
pub use step::{AgentRunner, StepInvocation, StepProgram, StepResult, StepRunner};
