//! Directories the agent writes into: refused before `START` when a dangling symlink is on
//! their way.

use std::path::Path;

use crate::host::root::HostRoot;

use super::StateError;

/// Fail with [`StateError::DanglingSymlink`] when the directory `dir` (a host path) or one of
/// its parents is a symlink whose target does not exist, so a run stops before `START`
/// naming the link instead of failing later with "File exists".
///
/// # Errors
/// The dangling symlink; resolution failures.
pub fn check_not_dangling(
    root: &HostRoot,
    dir: &Path,
    what: &'static str,
) -> Result<(), StateError> {
    for p in dir.ancestors() {
        let is_link = root
            .symlink_metadata(p)?
            .is_some_and(|m| m.file_type().is_symlink());
        if is_link && root.metadata(p)?.is_none() {
            return Err(StateError::DanglingSymlink {
                what,
                path: dir.to_path_buf(),
                link: p.to_path_buf(),
                target: root.read_link(p)?,
            });
        }
    }
    Ok(())
}
