//! Root confinement: every file operation on the host goes through [`HostRoot`].
//!
//! A *host path* is an absolute path as the host sees it (`/etc/sysctl.d/x.conf`). It is
//! resolved beneath the root mount with chroot semantics by [`pathrs`] (openat2
//! `RESOLVE_IN_ROOT` where the kernel has it, a checked userspace walk otherwise): `..`
//! components and symlinks, absolute or relative, never leave the root, and a directory
//! swapped for a symlink during an operation cannot redirect it outside.
//!
//! Nothing here checks paths lexically; confinement is the kernel's (or pathrs') job.
//!
//! Durability: an atomic write (`HostRoot::write_atomic` and friends) is temp file, write,
//! fsync(file), rename, fsync(directory), both fsyncs at once. A session's executor writes
//! with `HostRoot::write_atomic_synced` and [`DirSync::Defer`] instead: the file's fsync
//! still comes before the rename, the directory's is collected and done once at the end of
//! the step ([`crate::host::root::durability`], policy `fsync1`).

#[path = "own/agent_files.rs"]
mod agent_files;
pub mod confine;
#[path = "own/deferred.rs"]
pub mod deferred;
pub mod digest;
pub mod durability;
#[cfg(test)]
#[path = "tests/durability_dotdot_tests.rs"]
mod durability_dotdot_tests;
mod entry;
pub mod error;
mod host_root;
#[cfg(test)]
#[path = "tests/host_root_tests.rs"]
mod host_root_tests;
mod local;
mod lookup;
pub mod mount_ns;
#[path = "own/pathlock.rs"]
pub mod pathlock;
#[path = "own/pwdlock.rs"]
pub mod pwdlock;
pub mod read;
mod replace;
mod root_error;
#[path = "own/run_dirs.rs"]
pub mod run_dirs;
#[path = "own/staging.rs"]
pub mod staging;
mod tmp;
mod tree;
pub(crate) mod undo_ops;
mod write;

pub use agent_files::AgentFiles;
pub(crate) use entry::kind_name;
pub use entry::{DirEntry, EntryKind};
use host_root::{ConfinedDir, split};
pub(crate) use host_root::{Confinements, pathrs_io};
pub use host_root::{HostRoot, normalize};
pub use local::{
    MAX_PACKAGE_FILE_BYTES, open_beneath, open_beneath_at, open_local, read_bounded, reopen_regular,
};
pub(crate) use replace::settle_replacement;
pub use root_error::{Result, RootError};
pub use tmp::TMP_PREFIX;
pub(crate) use tmp::{is_stale_tmp, tmp_name};
pub use write::{DirSync, PARENT_DIR_MODE, reserve};

/// For the areas' tests only: the root services they exercise directly, which outside tests
/// only the seam reaches.
#[cfg(test)]
#[path = "tests/test_doors.rs"]
pub(crate) mod test_doors;
