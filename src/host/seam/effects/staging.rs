//! Staging, a service of the executor: content an area streams to disk before an effect
//! copies it into place (`fs::extract`'s entries), and the locks and confinements around
//! such a write. Only an executor that changes the host stages (apply); a plan, a check
//! and the recording double write nothing, and an area is told `None` without learning the
//! mode. The directories live in the agent's state directory inside the host root
//! ([`STAGING`], [`crate::host::root::staging`]).

use std::path::Path;

use crate::host::effects::session::Host;
use crate::host::root::HostRoot;
use crate::host::root::confine::Confined;
use crate::host::root::error::Result;
use crate::host::root::pathlock::PathLock;
use crate::host::root::staging;
pub use crate::host::root::staging::StagingDir;

/// Where `fs::extract` stages the entries it copies into place, one directory per call
/// (`<boot id>-<random>`, held by an `flock` while the call runs, removed when it ends, or
/// after a kill by the next run's [`sweep_staging`]; [`StagingDir`]): the agent's state
/// directory, inside the host root.
pub const STAGING: &str = "/var/lib/skyhook/.extract";

/// Remove the staging directories under [`STAGING`] that no process holds locked (left by
/// an agent killed while unpacking; a live agent in any pod holds its own), whatever their
/// names. Returns one line per directory removed; [`STAGING`] itself goes when it is left
/// empty. The agent's start calls it, before any session.
///
/// # Errors
/// Listing [`STAGING`] or removing a directory.
pub fn sweep_staging(root: &HostRoot) -> Result<Vec<String>> {
    Ok(staging::sweep(root, Path::new(STAGING))?
        .into_iter()
        .map(|name| format!("removed {STAGING}/{name}, left by an fs::extract that did not end"))
        .collect())
}

impl Host {
    /// A new staging directory of this call in [`STAGING`] when the executor changes the
    /// host (locked while it lives, removed when dropped); `None` otherwise (the copies
    /// then name their source instead).
    ///
    /// # Errors
    /// Making or opening the directory.
    pub(crate) fn staging_dir(&self) -> Result<Option<StagingDir>> {
        if !self.executor.changes_host() {
            return Ok(None);
        }
        self.batch.flush_checked(&self.cx, &*self.executor)?;
        Ok(Some(StagingDir::create(&self.cx.root, Path::new(STAGING))?))
    }

    /// When the executor changes the host: the exclusive lock of the root's own directory
    /// ([`crate::host::root::pathlock::lock_root`]) that makes the extracts of one host
    /// root run one at a time, taken after the session's pending edit is written (no path
    /// lock is held while waiting). `None` otherwise.
    ///
    /// # Errors
    /// Writing the pending edit; opening or locking the root.
    pub(crate) fn lock_extracts(&mut self) -> Result<Option<PathLock>> {
        if !self.executor.changes_host() {
            return Ok(None);
        }
        self.settle_batch()?;
        Ok(Some(crate::host::root::pathlock::lock_root(&self.cx.root)?))
    }

    /// When the executor changes the host, for a directory `dir` missing now (which the call
    /// will make with its missing parents): confine its nearest existing ancestor
    /// ([`HostRoot::confine`]), so that the mkdirs of `dir` and its parents resolve from a
    /// handle opened now and follow no symlink a racing user puts in place of one of them
    /// meanwhile. `None` otherwise, or when that ancestor is the root's `/` (which only
    /// root can write).
    ///
    /// # Errors
    /// Resolution failures; opening the ancestor.
    pub(crate) fn confine_ancestor(&self, dir: &Path) -> Result<Option<Confined>> {
        if !self.executor.changes_host() {
            return Ok(None);
        }
        let root = self.root();
        let mut at = crate::host::effects::overlay::normalize(dir);
        while at.pop() && at != Path::new("/") {
            if root.metadata(&at)?.is_some_and(|m| m.is_dir()) {
                return Ok(Some(root.confine(&at)?));
            }
        }
        Ok(None)
    }
}
