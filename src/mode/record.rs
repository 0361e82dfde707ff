//! What the mode loop decided for each step: [`Decision`], [`StepRecord`], [`ModeOutcome`].

use std::path::PathBuf;

use crate::package::Step;
use crate::step::StepResult;

/// What the loop decided for one step.
#[derive(Debug)]
pub enum Decision {
    /// The runner ran it (or, in a dry run, listed it: `result.ran` is false).
    Ran(StepResult),
    /// Skipped: its flag exists (a host path).
    Skipped {
        /// The flag file.
        flag: PathBuf,
    },
    /// Failed before running: an `env:` argument's variable is unset (the agent's message,
    /// one line per missing name, joined by `; `).
    MissingEnv {
        /// The message.
        message: String,
    },
    /// Not reached: an earlier step failed, or the run was stopped before it.
    NotRun,
}

/// One step of the mode and what happened to it.
#[derive(Debug)]
pub struct StepRecord {
    /// The step's index in the mode.
    pub index: usize,
    /// Its arguments: after `env:` substitution and upgrade versions when it ran, as
    /// configured otherwise.
    pub args: Vec<String>,
    /// The decision.
    pub decision: Decision,
}

impl StepRecord {
    /// False for a failed step (runner failure or a missing `env:` variable).
    pub fn ok(&self) -> bool {
        match &self.decision {
            Decision::Ran(r) => r.ok,
            Decision::MissingEnv { .. } => false,
            Decision::Skipped { .. } | Decision::NotRun => true,
        }
    }
}

/// How a mode ended.
#[derive(Debug)]
pub struct ModeOutcome {
    /// Exit 0.
    pub ok: bool,
    /// Every step of the mode, in order.
    pub steps: Vec<StepRecord>,
}

/// The record of a step that was not reached.
pub(super) fn not_run(index: usize, step: &Step) -> StepRecord {
    StepRecord {
        index,
        args: step.arguments.clone(),
        decision: Decision::NotRun,
    }
}
