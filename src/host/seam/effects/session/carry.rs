//! [`PlanCarry`]: what one plan session planned, carried into the session of the next mode
//! of the package or the next package of a chain (`serve`'s `package_plan`), so a later
//! mode or package plans against the host as the earlier ones would leave it, as the steps
//! of one mode already do within one session ([`Host::finish_step`]).

use super::Host;
use super::host::{Budget, PlannedCommand};
use crate::host::effects::context::HostOptions;
use crate::host::effects::effect::Effect;
use crate::host::effects::overlay::Overlay;
use crate::host::effects::report::ExecMode;
use crate::host::root::HostRoot;
use crate::host::root::deferred::GrubPending;
use crate::host::root::error::{HostError, Result};
use crate::redact::Redactor;

/// The view a finished plan or check session leaves: the planned file contents, created
/// directories and removed paths (the executor's overlay), the commands the plan did not
/// run (later reads of what they may touch are unknown), the first unplanned program,
/// the deferred work still pending or recorded, and the redactor (every secret read so far,
/// so a later diff of a file holding one is still redacted). Made by [`Host::into_carry`],
/// used by [`Host::carried`].
#[derive(Debug)]
pub struct PlanCarry {
    overlay: Overlay,
    planned_commands: Vec<PlannedCommand>,
    first_unplanned: Option<PlannedCommand>,
    pending: (bool, GrubPending, bool),
    recorded: (bool, bool, bool),
    redactor: Redactor,
    /// A carry made by [`PlanCarry::with_budget`]: only its budget is carried.
    fresh: bool,
    budget: Budget,
}

impl PlanCarry {
    /// A carry of nothing planned yet but a budget of `bytes` of planned file content for
    /// the plan it starts (each planned write counts its whole content): the first session made from it is as
    /// [`Host::new`]'s, held to the budget.
    pub fn with_budget(bytes: u64) -> PlanCarry {
        PlanCarry {
            overlay: Overlay::default(),
            planned_commands: Vec::new(),
            first_unplanned: None,
            pending: Default::default(),
            recorded: Default::default(),
            redactor: Redactor::default(),
            fresh: true,
            budget: Budget {
                planned: 0,
                limit: Some(bytes),
            },
        }
    }
}

impl Host {
    /// End a plan or check session whose steps have each ended their part
    /// ([`Host::finish_step`]) and keep what it planned. `None` for an apply or recording
    /// session (it has no overlay: the host itself is the view).
    pub fn into_carry(mut self) -> Option<PlanCarry> {
        // Ended here: a plan's deferred work is only listed, and each step listed its own.
        self.finished = true;
        let overlay = std::mem::take(self.executor.overlay_mut()?);
        Some(PlanCarry {
            overlay,
            planned_commands: std::mem::take(&mut self.planned_commands),
            first_unplanned: self.first_unplanned.take(),
            pending: (
                self.pending_daemon_reload,
                std::mem::take(&mut self.pending_grub),
                self.pending_initramfs,
            ),
            recorded: (
                self.recorded_reload,
                self.recorded_grub,
                self.recorded_initramfs,
            ),
            redactor: self.redactor.clone(),
            fresh: false,
            budget: self.budget,
        })
    }

    /// Count the content `effect` plans against the session's budget ([`Budget`]).
    ///
    /// # Errors
    /// [`HostError::PlanBudget`]: the write would take the planned bytes past the budget
    /// (it is then not counted, nor planned).
    pub(super) fn charge_planned(&mut self, effect: &Effect) -> Result<()> {
        let (Some(limit), Effect::WriteFile { path, content, .. }) = (self.budget.limit, effect)
        else {
            return Ok(());
        };
        let size = content.len() as u64;
        let planned = self.budget.planned;
        if planned.saturating_add(size) > limit {
            return Err(HostError::PlanBudget {
                path: path.clone(),
                size,
                planned,
                budget: limit,
            });
        }
        self.budget.planned = planned + size;
        Ok(())
    }

    /// A plan (`mode` Plan) or check (`mode` Check) session over `root` with `options`
    /// that starts from `carry`: reads see what the earlier sessions planned, the deferred
    /// work they left pending or recorded is not listed again, and secrets they read stay
    /// redacted (`options.redactor` is replaced by the carried one, which the new
    /// environment's `SKYHOOK_REDACT_ENV` values are added to). Apply is refused by type:
    /// any other `mode` is planned as Plan.
    pub fn carried(
        root: HostRoot,
        mode: ExecMode,
        mut options: HostOptions,
        carry: PlanCarry,
    ) -> Host {
        let mode = match mode {
            ExecMode::Check => ExecMode::Check,
            _ => ExecMode::Plan,
        };
        if carry.fresh {
            let mut host = Host::new(root, mode, options);
            host.budget = carry.budget;
            return host;
        }
        options.redactor = Some(carry.redactor);
        let mut host = Host::new(root, mode, options);
        host.budget = carry.budget;
        if let Some(o) = host.executor.overlay_mut() {
            *o = carry.overlay;
        }
        host.planned_commands = carry.planned_commands;
        host.first_unplanned = carry.first_unplanned;
        (
            host.pending_daemon_reload,
            host.pending_grub,
            host.pending_initramfs,
        ) = carry.pending;
        (
            host.recorded_reload,
            host.recorded_grub,
            host.recorded_initramfs,
        ) = carry.recorded;
        host
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::files::fs::{self, WriteOptions};
    use crate::host::root::HostRoot;
    use crate::host::testutil::TestHost;

    /// A budget of 1,000 planned bytes is one budget over the sessions a carry joins (the
    /// modes and packages of a serve plan): 600 bytes in the first session and 400 in the
    /// second fit, one byte more fails naming the file and the budget, and is not planned.
    #[test]
    fn the_budget_of_planned_bytes_is_carried_from_session_to_session() {
        let t = TestHost::new();
        let open = || HostRoot::open(&t.root).unwrap();
        let o = WriteOptions::default();
        let mut h = Host::carried(
            open(),
            ExecMode::Plan,
            HostOptions::default(),
            PlanCarry::with_budget(1000),
        );
        assert!(fs::write(&mut h, "/etc/a", &"a".repeat(600), &o).unwrap());
        let carry = h.into_carry().unwrap();
        let mut h = Host::carried(open(), ExecMode::Check, HostOptions::default(), carry);
        assert!(fs::write(&mut h, "/etc/b", &"b".repeat(400), &o).unwrap());
        let e = fs::write(&mut h, "/etc/c", "c", &o)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "planning 1 bytes for /etc/c would take the plan's planned writes past its budget \
             of 1000 bytes (0 MiB, serve --plan-bytes): 1000 bytes are planned already"
        );
        assert!(fs::read(&h, "/etc/c").is_err());
        assert_eq!(fs::read(&h, "/etc/a").unwrap(), "a".repeat(600));
        // Without a budget (skyhook-run, the agent) nothing is counted.
        let mut h = t.host(ExecMode::Plan);
        assert!(fs::write(&mut h, "/etc/c", &"c".repeat(2000), &o).unwrap());
    }
}
