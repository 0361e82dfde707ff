//! [`ViewMark`]: the view of a plan or check session before one of its steps, put back when
//! the step fails ([`Host::restore_view`]), so a failed step changes nothing in the view the
//! later steps, modes and packages plan against, as the agent's failed step is undone whole
//! on apply. `skyhook-run --package` and `serve`'s plans mark before each `.rhai` step
//! ([`crate::step::PlanRunner`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

use super::Host;
use crate::host::effects::overlay::Node;

/// What the session had planned at a point: the overlay's planned objects and states (file
/// contents are shared, not copied), how many commands it had planned and whether one was
/// unplanned, and the deferred work already listed.
#[derive(Debug)]
pub struct ViewMark {
    nodes: BTreeMap<PathBuf, Node>,
    held: usize,
    services: HashMap<String, (Option<bool>, Option<bool>)>,
    packages: HashMap<String, bool>,
    mounts: HashMap<PathBuf, bool>,
    modules: HashSet<String>,
    holds: HashMap<String, bool>,
    grub_default: Option<String>,
    planned_commands: usize,
    unplanned: bool,
    recorded: (bool, bool, bool),
}

impl Host {
    /// The session's view now; `None` for a session without an overlay (apply, record):
    /// the host itself is its view. Costs a copy of the planned paths (not of contents).
    pub fn view_mark(&self) -> Option<ViewMark> {
        let o = self.executor.overlay()?;
        Some(ViewMark {
            nodes: o.nodes.clone(),
            held: o.held,
            services: o.services.clone(),
            packages: o.packages.clone(),
            mounts: o.mounts.clone(),
            modules: o.modules.clone(),
            holds: o.holds.clone(),
            grub_default: o.grub_default.clone(),
            planned_commands: self.planned_commands.len(),
            unplanned: self.first_unplanned.is_some(),
            recorded: (
                self.recorded_reload,
                self.recorded_grub,
                self.recorded_initramfs,
            ),
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
        if !mark.unplanned {
            self.first_unplanned = None;
        }
        let Some(o) = self.executor.overlay_mut() else {
            return;
        };
        o.nodes = mark.nodes;
        o.held = mark.held;
        o.services = mark.services;
        o.packages = mark.packages;
        o.mounts = mark.mounts;
        o.modules = mark.modules;
        o.holds = mark.holds;
        o.grub_default = mark.grub_default;
        o.forget_root();
    }
}
