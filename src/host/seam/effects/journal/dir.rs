//! The journal directory under [`DIR`]: one per step, held by an `flock` while its step
//! runs (so a recovery skips a live one), and its removal.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::records::{DIR, LOG, jerr};
use crate::host::root::HostRoot;
use crate::host::root::error::Result;

/// Remove a journal's directory (the log and what it moved aside), fsync its parent; then
/// the journals' directory and the ones the journal created above it when empty. All of it
/// holding the journals' directory exclusively: a recovery scanning takes a journal
/// directory without a log for one never linked and removes it, which under a step
/// removing its own made that step's removal fail (`No such file`) and the step with it,
/// though it had succeeded.
pub(super) fn remove_journal(root: &HostRoot, dir: &Path, made: &[PathBuf]) -> Result<()> {
    #[cfg(test)]
    super::fail_point::reach("remove_journal");
    let guard = hold_dir(root, LockOp::Exclusive)?;
    root.remove_file(&dir.join(LOG))?;
    // What it moved aside was checked for mounts before the move, into this directory.
    root.remove_all_checked(dir)?;
    if guard.is_some() {
        let _ = root.remove_dir(Path::new(DIR));
        for d in made.iter().rev() {
            if root.remove_dir(d).is_err() {
                break;
            }
        }
    }
    drop(guard);
    root.sync_dir_checked(Path::new(DIR).parent().unwrap_or(Path::new("/")))?;
    if root.symlink_metadata(Path::new(DIR))?.is_some() {
        root.sync_dir_checked(Path::new(DIR))?;
    }
    Ok(())
}

/// How [`lock`] takes an `flock`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LockOp {
    /// Shared, waiting for it.
    Shared,
    /// Exclusive, waiting for it.
    Exclusive,
    /// Exclusive, or `WouldBlock` at once when another holds it.
    TryExclusive,
}

/// The journals' directory [`DIR`], open and `flock`ed: shared by a step while it makes its
/// journal and links its log, exclusive for a recovery's scan and for removing the
/// directory. Under the exclusive lock, a journal whose log is missing or unlocked was left
/// by a process that is gone. `None` when the directory does not exist. The lock is on the
/// directory the path names once it is granted: one removed (by another agent's cleanup)
/// while this waited for its lock is let go and the path's new directory locked instead,
/// at most 16 times (a lock on the removed one would not keep a step from making its
/// journal in the new one, which a recovery would then take for an abandoned one).
///
/// # Errors
/// Opening the directory, or `flock`; the race lost 16 times in a row.
pub(super) fn hold_dir(root: &HostRoot, op: LockOp) -> Result<Option<File>> {
    let dir = Path::new(DIR);
    for _ in 0..16 {
        if root.symlink_metadata(dir)?.is_none() {
            return Ok(None);
        }
        let f = match root.open_read(dir) {
            Ok(f) => f,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        #[cfg(test)]
        super::fail_point::reach("hold_dir_opened");
        lock(&f, op).map_err(|e| jerr(dir, root, e))?;
        if root.names(dir, &f)? {
            return Ok(Some(f));
        }
    }
    Err(jerr(
        dir,
        root,
        std::io::Error::other("removed by another agent's cleanup 16 times in a row"),
    ))
}

/// Create [`DIR`] (returning the directories made) and hold it shared. A cleanup that
/// removed the directory between its creation and the lock is seen (the held directory is
/// no longer the one at the path) and the creation retried, at most 16 times.
///
/// # Errors
/// Creating or opening the directory; the race lost 16 times in a row.
pub(super) fn hold_dir_created(root: &HostRoot) -> Result<(Vec<PathBuf>, File)> {
    let dir = Path::new(DIR);
    let mut made = Vec::new();
    for _ in 0..16 {
        match root.create_dir_all(dir, 0o700) {
            Ok(m) => made.extend(m),
            // An ancestor removed by another agent's cleanup while it was being made.
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e.into()),
        }
        let Some(f) = hold_dir(root, LockOp::Shared)? else {
            continue;
        };
        if root.names(dir, &f)? {
            return Ok((made, f));
        }
    }
    Err(jerr(
        dir,
        root,
        std::io::Error::other("removed by another agent's cleanup 16 times in a row"),
    ))
}

/// `flock` `f` as `op` says.
pub(super) fn lock(f: &File, op: LockOp) -> std::io::Result<()> {
    let op = match op {
        LockOp::Shared => libc::LOCK_SH,
        LockOp::Exclusive => libc::LOCK_EX,
        LockOp::TryExclusive => libc::LOCK_EX | libc::LOCK_NB,
    };
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), op) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
