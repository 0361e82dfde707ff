//! The dry-run runner of `skyhook-run --package`: [`PlanRunner`] runs a mode's `.rhai` steps
//! on one host session on the Plan executor (Check in a `*-check` mode), so later steps see
//! the planned changes of earlier ones (a failed step's leave the view again, as the agent
//! undoes a failed step whole), and lists every process step as "would run" without
//! running it. Nothing on the host changes.

use std::sync::Arc;

use crate::host::Host;
use crate::script::host_api::HostApi;
use crate::script::{ScriptEngine, ScriptOutput};

use super::invocation::{StepInvocation, StepProgram, StepResult, StepRunner};
use super::run::{End, ScriptStep};

/// Runs a mode's steps as a dry run on one shared host session (see the module docs).
pub struct PlanRunner<'a> {
    /// The engine.
    pub engine: &'a ScriptEngine,
    /// The session every script step runs on (ended per step with
    /// [`HostApi::finish_step`], so each step's deferred work is its own).
    pub api: &'a HostApi,
    /// Script output (already redacting).
    pub output: Arc<dyn ScriptOutput>,
}

impl StepRunner for PlanRunner<'_> {
    async fn run(&self, inv: StepInvocation) -> StepResult {
        let StepProgram::Script(script) = &inv.program else {
            // Not run: what a process would do is unknown.
            return StepResult {
                ok: true,
                ..StepResult::new(inv.spec.exec())
            };
        };
        // A failed step changes nothing (the agent undoes it whole): what it planned leaves
        // the view later steps, modes and packages plan against; its report keeps it.
        let mark = self.api.with_host(|h| h.view_mark()).flatten();
        // What the step would request is judged by the loop as the agent judges it.
        let result = ScriptStep {
            engine: self.engine,
            script,
            spec: &inv.spec,
            api: self.api,
            end: End::Step,
            list_drift: false,
        }
        .run(self.output.clone());
        match (result.ok, mark) {
            (false, Some(mark)) => self.api.with_host(|h| h.restore_view(mark)),
            _ => self.api.with_host(Host::keep_view),
        };
        result
    }
}
