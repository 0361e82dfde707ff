//! The read side of the host root as an area sees it: [`RootReads`], what
//! [`Host::root`](crate::host::Host::root) hands out. It has no mutating method and no way back to the
//! [`HostRoot`] it borrows, so an area that holds a session cannot write the host but by
//! submitting an effect (the seam: `docs/architecture.md`). Reads that a plan changes
//! (what a path resolves to, the mount check of a removal) are the session's view methods
//! (`Host::view_canonical`, `Host::check_remove_all` in `view.rs`); `RootReads` keeps what no
//! effect plans: device nodes under `/dev`, streaming a file the view located, messages.

use std::fs::{File, Metadata};
use std::path::{Path, PathBuf};

use crate::host::root::HostRoot;
use crate::host::root::confine::Confined;
use crate::host::root::error::Result;

/// A read-only borrow of the session's host root ([`Host::root`](crate::host::Host::root)): no method writes, and
/// the [`HostRoot`] inside cannot be named from it.
#[derive(Clone, Copy)]
pub struct RootReads<'a>(&'a HostRoot);

impl<'a> RootReads<'a> {
    /// The read view of `root` (effects only: areas get theirs from `Host::root`).
    pub(in crate::host::seam::effects) fn of(root: &'a HostRoot) -> Self {
        RootReads(root)
    }

    /// The root mount ([`HostRoot::mount`]).
    pub fn mount(&self) -> &'a Path {
        self.0.mount()
    }

    /// The agent-side spelling of a host path, for messages ([`HostRoot::display_path`]).
    pub fn display_path(&self, host: &Path) -> PathBuf {
        self.0.display_path(host)
    }

    /// Metadata of `host` on disk, following symlinks ([`HostRoot::metadata`]).
    ///
    /// # Errors
    /// As [`HostRoot::metadata`].
    pub fn metadata(&self, host: &Path) -> Result<Option<Metadata>> {
        Ok(self.0.metadata(host)?)
    }

    /// Metadata of `host` itself on disk ([`HostRoot::symlink_metadata`]).
    ///
    /// # Errors
    /// As [`HostRoot::symlink_metadata`].
    pub fn symlink_metadata(&self, host: &Path) -> Result<Option<Metadata>> {
        Ok(self.0.symlink_metadata(host)?)
    }

    /// Open an existing file or directory for reading ([`HostRoot::open_read`]).
    ///
    /// # Errors
    /// As [`HostRoot::open_read`].
    pub fn open_read(&self, host: &Path) -> Result<File> {
        Ok(self.0.open_read(host)?)
    }

    /// Open a regular file for streaming ([`HostRoot::open_regular`]); for a path the view
    /// located (`Host::view_for_digest`).
    ///
    /// # Errors
    /// As [`HostRoot::open_regular`].
    pub fn open_regular(&self, host: &Path) -> Result<File> {
        Ok(self.0.open_regular(host)?)
    }

    /// Confine the existing directory `host` ([`HostRoot::confine`]): reads and writes
    /// below it resolve from one handle until the guard drops. Changes nothing on disk.
    ///
    /// # Errors
    /// As [`HostRoot::confine`].
    pub fn confine(&self, host: &Path) -> Result<Confined> {
        Ok(self.0.confine(host)?)
    }

    /// Confine the directory `host` just created, refusing a symlink in its place
    /// ([`HostRoot::confine_created`]).
    ///
    /// # Errors
    /// As [`HostRoot::confine_created`].
    pub fn confine_created(&self, host: &Path) -> Result<Confined> {
        Ok(self.0.confine_created(host)?)
    }
}
