//! The mode loop (agent-contract.md sections 7-8) that the agent (`skyhook-agent MODE`) and
//! `skyhook-run --package` share, below both front ends: the flag decision,
//! `OVERLAY_ALWAYS_RUN_STEP`, `env:` substitution, the reserved step variables, the step's
//! [`StepSpec`](crate::step::StepSpec) and invocation, check summaries, history, and the
//! judging of interrupts script steps request; with what it needs: the run's [`Settings`]
//! (the only reader of the agent's environment), the [`Console`], the step environment
//! (`env`), step log files ([`step_logs`]) and the Skyhook CR's interrupt declarations
//! ([`coverage`]).
//!
//! - [`run_loop`]: [`ModeLoop`], made by [`ModeLoop::new`] alone, its runs of steps and of
//!   checks, and the flag decision;
//! - [`execute`]: one step resolved into a [`StepInvocation`](crate::step::StepInvocation)
//!   and handed to the [`StepRunner`](crate::step::StepRunner);
//! - [`interrupts`]: the requested interrupts judged against the CR, the reboot record;
//! - [`record`]: what the loop decided for each step ([`StepRecord`], [`ModeOutcome`]);
//! - [`state`]: the on-host state as the loop sees it ([`StateView`]);
//! - [`site`]: where a package's step files are, as the loop needs it ([`StepSite`]);
//! - [`error`]: [`ModeError`], what stops the loop between steps.

pub mod console;
pub mod coverage;
pub mod env;
pub mod error;
pub mod execute;
pub mod interrupts;
pub mod record;
pub mod run_loop;
pub mod settings;
pub mod site;
pub mod state;
pub mod step_logs;

pub use console::Console;
pub use coverage::Declarations;
pub use error::ModeError;
pub use record::{Decision, ModeOutcome, StepRecord};
pub use run_loop::{Applying, InterruptPolicy, ModeLoop, PackageMode};
pub use settings::{ResourceId, Settings};
pub use site::{StepScripts, StepSite};
pub use state::StateView;
