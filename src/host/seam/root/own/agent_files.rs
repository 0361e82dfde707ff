//! [`AgentFiles`]: the one door to a mutating root operation outside the seam, for the
//! agent's own files.
//!
//! The write side of [`HostRoot`] is `pub(in crate::host::seam)`: only `root` and the
//! session's executors (`effects`) call it, so an area (`host/files`, `host/users`, ...)
//! cannot compile a direct write. The agent's own files are not host changes a step makes
//! and go through no executor: `state/` (flags, history, interrupt records, the package
//! lock), `logs/` (step logs and their retention), `mode/` (reboot records), `agent/`
//! (the interrupt directory, the package copy's modes, the chroot's `resolv.conf`).
//! They write through this type, whose every method is the [`HostRoot`] one of the same
//! name; an area naming it is a breach the layers test reports
//! (`no_area_names_a_mutating_root_operation_or_the_mode`).

use std::fs::File;
use std::path::{Path, PathBuf};

use super::{HostRoot, Result};

/// Writes on the host root for the agent's own files (state, logs, the package copy):
/// a borrow of the [`HostRoot`] they are confined to.
#[derive(Clone, Copy)]
pub struct AgentFiles<'a> {
    pub(in crate::host::seam) root: &'a HostRoot,
}

impl<'a> AgentFiles<'a> {
    /// The agent's own files on `root`.
    pub fn new(root: &'a HostRoot) -> Self {
        Self { root }
    }

    /// The root these writes are confined to (for its reads).
    pub fn root(&self) -> &'a HostRoot {
        self.root
    }

    /// `HostRoot::write_atomic`: replace `host` with `data` (temporary, fsync, rename,
    /// fsync of the directory); `mode` as the file's, else the old file's or 0644.
    ///
    /// # Errors
    /// The parent missing or not a directory, `host` a directory, any step of the write.
    pub fn write_atomic(&self, host: &Path, data: &[u8], mode: Option<u32>) -> Result<()> {
        self.root.write_atomic(host, data, mode)
    }

    /// `HostRoot::create_dir_all`: create `host` and its missing parents with `mode`;
    /// the directories it created, outermost first.
    ///
    /// # Errors
    /// A component exists and is not a directory; a create fails.
    pub fn create_dir_all(&self, host: &Path, mode: u32) -> Result<Vec<PathBuf>> {
        self.root.create_dir_all(host, mode)
    }

    /// `HostRoot::create_new`: create the file `host` with `mode`, failing if it exists.
    ///
    /// # Errors
    /// `host` exists (`AlreadyExists`), its parent is missing; the open.
    pub fn create_new(&self, host: &Path, mode: u32) -> Result<File> {
        self.root.create_new(host, mode)
    }

    /// `HostRoot::remove_file`: remove the file or symlink `host`; `false` when absent.
    ///
    /// # Errors
    /// `host` is a directory; the unlink.
    pub fn remove_file(&self, host: &Path) -> Result<bool> {
        self.root.remove_file(host)
    }

    /// `HostRoot::remove_dir`: remove the empty directory `host`; `false` when absent.
    ///
    /// # Errors
    /// `host` not empty or not a directory; the rmdir.
    pub fn remove_dir(&self, host: &Path) -> Result<bool> {
        self.root.remove_dir(host)
    }

    /// `HostRoot::rename`: move `from` to `to` (replacing a file there).
    ///
    /// # Errors
    /// `from` missing; the rename.
    pub fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.root.rename(from, to)
    }

    /// `HostRoot::set_mode`: set the permission bits of `host` to `mode`.
    ///
    /// # Errors
    /// `host` missing; the chmod.
    pub fn set_mode(&self, host: &Path, mode: u32) -> Result<()> {
        self.root.set_mode(host, mode)
    }
}
