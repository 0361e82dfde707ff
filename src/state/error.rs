//! [`StateError`]: what can fail reading or writing on-host state.

use std::path::PathBuf;

use crate::host::root::RootError;

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
