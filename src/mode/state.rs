//! [`StateView`]: the on-host state (flags, check results, history) as the mode loop sees it.

use std::path::{Path, PathBuf};

use crate::host::root::HostRoot;
use crate::package::{Package, Step};
use crate::state::{flags, history};

use super::error::ModeError;

/// The on-host state as the loop sees it: flags, check results, history. Read-write for
/// the agent; read-only for a dry run (every write is skipped, reads are real).
#[derive(Debug, Clone, Copy)]
pub struct StateView<'a> {
    /// The host root.
    pub root: &'a HostRoot,
    /// `SKYHOOK_ROOT_DIR` (a host path).
    pub state_root: &'a Path,
    /// False: writes are skipped.
    pub writable: bool,
}

impl StateView<'_> {
    pub(super) fn flag(&self, pkg: &Package, step: &Step) -> PathBuf {
        flags::flag_path(
            self.state_root,
            &pkg.package_name,
            &pkg.package_version,
            step,
        )
    }

    /// The previous version for the upgrade modes (from the history file) and the
    /// messages reading it produced.
    /// Read-only views never create the history directory nor move a corrupt file.
    pub(super) fn previous(&self, pkg: &Package) -> Result<history::HistoryRead, ModeError> {
        let read = if self.writable {
            history::read_previous
        } else {
            history::peek_previous
        };
        Ok(read(self.root, self.state_root, &pkg.package_name)?)
    }
}
