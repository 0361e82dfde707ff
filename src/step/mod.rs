//! One step, from what its front end says it is ([`spec::StepSpec`], made only by
//! [`StepSpec::builder`]: the script's `step` context once, the executor
//! [`spec::exec_mode`] decides, environment, configMaps, node metadata, secrets, deadline,
//! cancel) and its resolved [`invocation::StepInvocation`] to its
//! [`invocation::StepResult`], through one seam, [`invocation::StepRunner`]:
//!
//! - [`run`]: the one step runner. A `.rhai` step, whichever front end runs it, runs and
//!   ends its session through [`run::ScriptStep`], its script on a long-lived script thread
//!   ([`run::run_script_with`], `script_thread`); [`run::ScriptRunner`] is the agent's `.rhai` step (a
//!   session per step, output relayed through [`output::SinkOutput`]) and
//!   [`run::AgentRunner`] the agent's runner (scripts there, processes on the
//!   [`process::ProcessRunner`]);
//! - [`process::ProcessRunner::run_step`] runs a process step (a bash step, an interrupt
//!   command) through the one process primitive and its types ([`crate::process`]:
//!   `Spec`, `Outcome`, `Report`; chroot, working directory, complete environment, own
//!   process group, streamed output, TERM/grace/KILL) and relays its output through the
//!   log sink;
//! - [`plan::PlanRunner`] is the dry run: scripts on the Plan executor of one shared
//!   session, processes "would run";
//! - [`lone::LoneRunner`] runs a lone step whose front end takes its output raw
//!   (`skyhook-agent serve`'s `sh` and `rhai` executions).
//!
//! [`engine()`] (`engine.rs`) is the one script engine every front end (agent, dry run, serve, skyhook-run)
//! runs steps with.

mod engine;
pub mod invocation;
pub mod lone;
pub mod output;
pub mod plan;
pub mod process;
pub mod run;
mod script_thread;
pub mod spec;

pub use engine::engine;
pub use invocation::{StepInvocation, StepProgram, StepResult, StepRunner};
pub use lone::{LoneOutput, LoneRunner};
pub use output::SinkOutput;
pub use plan::PlanRunner;
pub use process::{ProcessRunner, RelayOptions};
pub use run::{
    AgentRunner, End, ScriptOutcome, ScriptRunOptions, ScriptRunner, ScriptStep, run_script,
    run_script_with,
};
pub use script_thread::SCRIPT_STACK_BYTES;
pub(crate) use script_thread::on_script_thread;
pub use spec::{SecretSource, StepBuilder, StepSpec, exec_mode};
