//! [`StepSite`]: where a package's step files are, as the mode loop needs it (the agent's
//! `PackageSite`, the copy dir under the root or a package directory on this machine,
//! implements it).

use std::collections::HashMap;
use std::path::PathBuf;

use crate::host::root::RootError;
use crate::package::Step;
use crate::script::compile::CompiledScript;
use crate::step::StepProgram;

/// The compiled `.rhai` steps of a mode, by step index.
pub type StepScripts = HashMap<usize, CompiledScript>;

/// What the loop asks of the place a package's files are.
pub trait StepSite {
    /// What a process step runs (8.2): program, working directory, chroot, shown path.
    fn process(&self, step: &Step) -> StepProgram;
    /// `STEP_ROOT` and `SKYHOOK_DIR` as a step sees them (8.3).
    fn reserved_dirs(&self, on_host: bool) -> (PathBuf, PathBuf);
    /// The configMaps directory as `.rhai` steps read it (agent-side).
    fn configmaps_dir_shown(&self) -> PathBuf;
    /// Add the execute bits to a process step's file (8.2) where the site is on the host;
    /// nothing elsewhere.
    ///
    /// # Errors
    /// The file's metadata or mode change failed.
    fn make_executable(&self, step: &Step) -> Result<(), RootError>;
}
