//! For the areas' tests only: the root services they exercise directly, which outside tests
//! only the seam reaches.

use std::path::Path;

use super::{HostRoot, Result, RootError};

/// [`super::pwdlock::lock_pwd`].
pub(crate) fn lock_pwd(root: &HostRoot) -> std::result::Result<super::pwdlock::PwdLock, RootError> {
    super::pwdlock::lock_pwd(root)
}

/// [`super::staging::StagingDir`], with its `create`.
pub(crate) struct StagingDir;

impl StagingDir {
    /// [`super::staging::StagingDir::create`].
    pub(crate) fn create(root: &HostRoot, parent: &Path) -> Result<super::staging::StagingDir> {
        super::staging::StagingDir::create(root, parent)
    }
}
