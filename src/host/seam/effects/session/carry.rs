//! [`PlanCarry`]: what one plan session planned, carried into the session of the next mode
//! of the package or the next package of a chain (`serve`'s `package_plan`), so a later
//! mode or package plans against the host as the earlier ones would leave it, as the steps
//! of one mode already do within one session ([`Host::finish_step`]).

use super::Host;
use super::host::PlannedCommand;
use crate::host::effects::context::HostOptions;
use crate::host::effects::overlay::Overlay;
use crate::host::effects::report::ExecMode;
use crate::host::root::HostRoot;
use crate::host::root::deferred::GrubPending;
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
        })
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
        options.redactor = Some(carry.redactor);
        let mut host = Host::new(root, mode, options);
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
