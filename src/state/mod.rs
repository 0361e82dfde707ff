//! The on-host state the agent owns (agent contract section 6): step flags and the flag
//! directory's housekeeping files, the version history, interrupt markers, and the package
//! lock.
//!
//! This is the one place that knows these file formats. Every write goes through
//! [`HostRoot`](crate::host::root::HostRoot) (confined to the host root) and every state file
//! is replaced atomically ([`HostRoot::write_atomic`](crate::host::root::HostRoot::write_atomic)).

pub mod flags;
pub mod history;
pub mod interrupts;
pub mod lock;

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
}
