//! The on-host state the agent owns (agent contract section 6): step flags and the flag
//! directory's housekeeping files, the version history, interrupt markers, and the package
//! lock.
//!
//! This is the one place that knows these file formats. Every write goes through
//! [`HostRoot`] (confined to the host root) and every state file
//! is replaced atomically ([`HostRoot::write_atomic`](crate::host::root::HostRoot::write_atomic)).

pub mod flags;
pub mod history;
pub mod interrupts;
pub mod lock;

use std::path::{Path, PathBuf};

use crate::host::root::{HostRoot, RootError};

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

/// An error reading or writing on-host state.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// A file operation under the host root failed (the error names the operation and path).
    #[error(transparent)]
    Root(#[from] RootError),
    /// A component of a flag path is longer than the 255 bytes a file name may have (very
    /// long argument lists; Python crashes here, and truncating would change the name).
    #[error("step flag name too long: component of {len} bytes (limit 255) in {}", path.display())]
    NameTooLong {
        /// The flag's host path.
        path: PathBuf,
        /// Length in bytes of the longest component.
        len: usize,
    },
    /// Taking the package lock failed.
    #[error("failed to lock {}", path.display())]
    Lock {
        /// The lock file's host path.
        path: PathBuf,
        /// The `flock` error.
        #[source]
        source: nix::Error,
    },
    /// A directory the agent writes into (or one of its parents) is a symlink whose target
    /// does not exist: nothing can be created there.
    #[error(
        "the {what} {} cannot be used: {} is a dangling symlink (to {}); create its target or remove the link",
        path.display(), link.display(), target.display()
    )]
    DanglingSymlink {
        /// What the directory is for (`flags directory`, `log directory`).
        what: &'static str,
        /// The directory's host path.
        path: PathBuf,
        /// The dangling symlink: `path` or a parent of it.
        link: PathBuf,
        /// Its target, as stored.
        target: PathBuf,
    },
    /// The lock file was removed or replaced after every one of `attempts` acquisitions:
    /// each locked descriptor no longer named the file at the path.
    #[error(
        "failed to lock {}: the lock file was removed or replaced after each of {attempts} acquisitions",
        path.display()
    )]
    LockReplaced {
        /// The lock file's host path.
        path: PathBuf,
        /// Acquisitions tried.
        attempts: u32,
    },
    /// The lock file was removed or replaced while this agent held the lock, and it could
    /// not take the new one.
    #[error("lost the package lock {}: {why}", path.display())]
    LockLost {
        /// The lock file's host path.
        path: PathBuf,
        /// What happened.
        why: String,
    },
}
