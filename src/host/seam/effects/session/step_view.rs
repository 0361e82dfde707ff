//! [`ViewMark`]: the view of a plan or check session before one of its steps, put back when
//! the step fails ([`Host::restore_view`]), so a failed step changes nothing in the view the
//! later steps, modes and packages plan against, as the agent's failed step is undone whole
//! on apply. `skyhook-run --package` and `serve`'s plans mark before each `.rhai` step
//! ([`crate::step::PlanRunner`]).
//!
//! Cost: the overlay logs what each planned change replaces from the mark on
//! ([`Overlay::put_node`], [`Overlay::take_node`]: one path and the old entry, its content
//! shared), so a mark costs nothing in the planned paths; the small maps of planned
//! states (services, packages, mounts, modules, holds) are copied.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use super::Host;
use crate::host::effects::overlay::{Node, Overlay};

/// What the session had planned at a point besides the overlay's paths (which its log
/// puts back): the planned states, how many commands it had planned and whether one was
/// unplanned, and the deferred work already listed.
#[derive(Debug)]
pub struct ViewMark {
    held: usize,
    services: HashMap<String, (Option<bool>, Option<bool>)>,
    packages: HashMap<String, bool>,
    mounts: HashMap<PathBuf, bool>,
    modules: HashSet<String>,
    holds: HashMap<String, bool>,
    grub_default: Option<String>,
    planned_commands: usize,
    unplanned: [bool; 3],
    recorded: (bool, bool, bool),
}

impl Overlay {
    /// Plan `n` at `p` (logged while a step is marked).
    pub(crate) fn put_node(&mut self, p: PathBuf, n: Node) {
        self.held += n.held();
        let key = self.step_log.is_some().then(|| p.clone());
        let old = self.nodes.insert(p, n);
        if let Some(o) = &old {
            self.held -= o.held();
        }
        if let (Some(log), Some(key)) = (&mut self.step_log, key) {
            log.push((key, old));
        }
    }

    /// Drop what is planned at `p` (logged while a step is marked).
    pub(crate) fn take_node(&mut self, p: PathBuf) {
        let Some(old) = self.nodes.remove(&p) else {
            return;
        };
        self.held -= old.held();
        if let Some(log) = &mut self.step_log {
            log.push((p, Some(old)));
        }
    }
}

impl Host {
    /// Mark the session's view: from here its overlay logs what each planned change
    /// replaces. `None` for a session without an overlay (apply, record): the host itself
    /// is its view. End the mark with [`Host::restore_view`] or [`Host::keep_view`].
    pub fn view_mark(&mut self) -> Option<ViewMark> {
        let planned_commands = self.planned_commands.len();
        let unplanned = self.unplanned.set();
        let recorded = (
            self.recorded_reload,
            self.recorded_grub,
            self.recorded_initramfs,
        );
        let o = self.executor.overlay_mut()?;
        o.step_log = Some(Vec::new());
        Some(ViewMark {
            held: o.held,
            services: o.services.clone(),
            packages: o.packages.clone(),
            mounts: o.mounts.clone(),
            modules: o.modules.clone(),
            holds: o.holds.clone(),
            grub_default: o.grub_default.clone(),
            planned_commands,
            unplanned,
            recorded,
        })
    }

    /// Put the view back to `mark` (taken on this session by [`Host::view_mark`]): what
    /// was planned since leaves it; what the real root answered is forgotten (it is asked
    /// again). The step's report is not touched: it still lists what the step planned.
    pub fn restore_view(&mut self, mark: ViewMark) {
        (
            self.recorded_reload,
            self.recorded_grub,
            self.recorded_initramfs,
        ) = mark.recorded;
        self.planned_commands.truncate(mark.planned_commands);
        self.unplanned.clear_unset(mark.unplanned);
        let Some(o) = self.executor.overlay_mut() else {
            return;
        };
        for (p, old) in o.step_log.take().unwrap_or_default().into_iter().rev() {
            match old {
                Some(n) => o.nodes.insert(p, n),
                None => o.nodes.remove(&p),
            };
        }
        o.held = mark.held;
        o.services = mark.services;
        o.packages = mark.packages;
        o.mounts = mark.mounts;
        o.modules = mark.modules;
        o.holds = mark.holds;
        o.grub_default = mark.grub_default;
        o.forget_root();
    }

    /// End the mark of a step that succeeded: what it planned stays, its log is dropped.
    pub fn keep_view(&mut self) {
        if let Some(o) = self.executor.overlay_mut() {
            o.step_log = None;
        }
    }
}
