//! Cross-process locks of a read-compare-write: a path's lock ([`Host::lock_for_update`]),
//! and the files' own tools' lock ([`ToolLock`]) around an update of several files.

use super::Host;
use crate::host::effects::overlay::normalize;
use crate::host::root::error::{HostError, Result};
use std::path::{Path, PathBuf};

/// The lock of a file set's own tools that `Host::locked_update` takes after the path
/// locks, in apply mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolLock {
    /// shadow-utils' `/etc/.pwd.lock` ([`crate::host::root::pwdlock`]), for the account
    /// files.
    Pwd,
}

impl Host {
    /// In apply mode, take the cross-process lock of the file at `path` for a
    /// read-compare-write ([`crate::host::root::pathlock`]); the caller must read the current
    /// content only after this returns. `None` in plan and check mode (nothing is written,
    /// and the overlay is private to the session); there the lock directory the apply would
    /// create is planned instead ([`crate::host::effects::overlay::Overlay::plan_lock_dir`]), so later reads agree.
    ///
    /// # Errors
    /// Creating, opening or locking the lock file.
    pub(crate) fn lock_for_update(
        &mut self,
        path: &Path,
    ) -> Result<Option<crate::host::root::pathlock::PathLock>> {
        // At most one path lock per session: a batch's lock is released first.
        self.settle_batch()?;
        if !self.executor.changes_host() {
            if let Some(overlay) = self.executor.overlay_mut() {
                overlay.plan_lock_dir(&self.cx.root)?;
            }
            return Ok(None);
        }
        let key = self.lock_key(path);
        Ok(Some(crate::host::root::pathlock::lock(
            &self.cx.root,
            &key,
        )?))
    }

    /// Run `update`, a read-modify-write of the files at `paths` through the session, where
    /// the apply executor holds the paths' locks ([`Host::lock_for_update`], in order) and
    /// then `lock`'s guard (a lock of the files' own tools, such as `/etc/.pwd.lock`) across
    /// it, released in the reverse order; `update` is told `true`, so it reads the files
    /// again under the locks. In plan and check mode nothing is locked: the lock directory
    /// the apply would create is planned and `update` is told `false` (what it read before
    /// still holds).
    ///
    /// # Errors
    /// Taking a lock; whatever `update` fails with.
    pub(crate) fn locked_update<T, E: From<HostError>>(
        &mut self,
        paths: &[&Path],
        lock: ToolLock,
        update: impl FnOnce(&mut Host, bool) -> Result<T, E>,
    ) -> Result<T, E> {
        if !self.executor.changes_host() {
            if let Some(overlay) = self.executor.overlay_mut() {
                overlay.plan_lock_dir(&self.cx.root)?;
            }
            return update(self, false);
        }
        let mut held = Vec::new();
        for p in paths {
            if let Some(l) = self.lock_for_update(p)? {
                held.push(l);
            }
        }
        let guard = match lock {
            ToolLock::Pwd => {
                crate::host::root::pwdlock::lock_pwd(&self.cx.root).map_err(HostError::from)?
            }
        };
        let r = update(self, true);
        drop(guard);
        drop(held);
        r
    }

    /// The path a lock of `path` is keyed by: the canonical parent directory plus the final
    /// name, following a final symlink (at most 40 hops) the same way. Never the canonical
    /// form of the file itself: resolving an open file's path races with the rename of a
    /// concurrent writer (the kernel then reports the replaced inode as `... (deleted)`),
    /// while directories are not replaced. A path that does not resolve is keyed by what
    /// resolved of it; the read or write that follows reports the real error.
    pub(super) fn lock_key(&self, path: &Path) -> PathBuf {
        // A `..` resolves physically (after a symlink before it): start from the real parent.
        let mut cur = match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) if path.components().any(|c| c.as_os_str() == "..") => {
                match self.cx.root.canonical(parent) {
                    Ok(Some(d)) => d.join(name),
                    _ => normalize(path),
                }
            }
            _ => normalize(path),
        };
        for _ in 0..40 {
            let (Some(parent), Some(name)) = (cur.parent(), cur.file_name()) else {
                return cur;
            };
            let dir = match self.cx.root.canonical(parent) {
                Ok(Some(d)) => d,
                _ => parent.to_path_buf(),
            };
            let at = dir.join(name);
            match self.cx.root.symlink_metadata(&at) {
                Ok(Some(m)) if m.file_type().is_symlink() => match self.cx.root.read_link(&at) {
                    // An absolute target is a host path (chroot semantics): `join` keeps it.
                    Ok(target) => cur = normalize(&dir.join(target)),
                    Err(_) => return at,
                },
                _ => return at,
            }
        }
        cur
    }
}
