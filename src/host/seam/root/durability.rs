//! The durability policy of a session's file changes: `fsync1`.
//!
//! An atomic write is temp file, write, fsync(file), rename, fsync(directory). Outside a
//! session (`HostRoot::write_atomic` and friends: the agent's state
//! under `src/state` (flags, history, interrupts, check results), the deferred write-ahead
//! records of [`crate::host::root::deferred`], `prepare`'s copies) both fsyncs happen at once.
//! Inside a [`Host`](crate::host::Host) session in apply mode:
//!
//! - each write still fsyncs the file **before** its rename, so the data is durable before
//!   the name points at it: a power loss never leaves an empty or torn file, only the old
//!   content or the new one;
//! - the **directory** fsync is deferred: the session collects every directory in which its
//!   effects renamed, created or unlinked an entry ([`DirSyncs`]: writes and downloads,
//!   symlinks, removals, new directories) and fsyncs each once when the step ends
//!   ([`crate::host::Host::finish`], [`crate::host::Host::finish_with_report`],
//!   [`crate::host::Host::finish_step`], [`crate::host::Host::finish_step_with_report`],
//!   and `Drop` as a safety net), after the step's deferred work and before the caller
//!   writes the step's flag.
//!
//! A power loss before that sync may undo some of the step's renames (the old content comes
//! back, never an empty file), but then the step has no flag and runs again: the ordering rule
//! of `docs/benchmarks.md` ("a step's flag is written only after all its file changes are
//! durable") holds. N writes into one directory cost N + 1 fsyncs instead of 2 × N.
//!
//! The write-ahead records of deferred work stay fully durable *before* the drop-in they
//! cover is renamed (they are written outside the executor, with both fsyncs).
//!
//! Errors: a directory that no longer exists at the step's end is skipped (a later effect of
//! the step removed it; its own parent is in the set when the session removed it). A
//! filesystem that refuses `fsync` on a directory (`EINVAL`, `EOPNOTSUPP`: some FUSE and
//! network filesystems) is not an error, as an immediate directory fsync is best effort
//! there too. Any other failure (`EIO`, `ENOSPC`, `EDQUOT`, a failed open) is the
//! step's error, naming the directory: the renames in it may not be durable, so no flag may
//! say the step is done. Every directory is synced even after a failure; the first error is
//! returned.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::host::root::{HostRoot, RootError};

/// The directories a session changed entries in, to fsync once at the end of the step
/// (module docs). Host paths, lexically normalised unless they have a `..`
/// ([`DirSyncs::add`]); interior mutability so that executors holding `&Host` (a download)
/// can add to it.
#[derive(Debug, Default)]
pub struct DirSyncs {
    dirs: Mutex<BTreeSet<PathBuf>>,
}

impl DirSyncs {
    /// Note that an entry of directory `dir` (host path) was renamed, created or unlinked.
    /// Kept lexically normalised, except a path with `..`: the kernel resolves that one
    /// physically, after the symlinks before it, so it is kept as given and resolved when
    /// synced ([`DirSyncs::resolved`]).
    pub fn add(&self, dir: &Path) {
        let dir = match has_dotdot(dir) {
            true => dir.to_path_buf(),
            false => crate::host::root::normalize(dir),
        };
        self.lock().insert(dir);
    }

    /// Note the directory holding `path`: its lexical parent (`/` for `/`); with a `..`,
    /// `path` minus its last name, or `path/..` when that last component is a `..` itself.
    pub fn add_parent_of(&self, path: &Path) {
        if has_dotdot(path) {
            match path.file_name() {
                Some(_) => self.add(path.parent().unwrap_or(Path::new("/"))),
                None => self.add(&path.join("..")),
            }
            return;
        }
        let norm = crate::host::root::normalize(path);
        self.add(norm.parent().unwrap_or(Path::new("/")));
    }

    /// The directories noted so far as they will be synced: each spelling with a `..`
    /// resolved through `root` (skipped when it no longer resolves), sorted, each once.
    ///
    /// # Errors
    /// The first spelling that fails to resolve other than as missing.
    pub fn resolved(&self, root: &HostRoot) -> Result<Vec<PathBuf>, RootError> {
        let dirs = self.lock().clone();
        let (dirs, first) = resolve(dirs, root);
        first.map_or(Ok(dirs.into_iter().collect()), Err)
    }

    /// The directories noted so far, sorted (for tests and reports).
    pub fn pending(&self) -> Vec<PathBuf> {
        self.lock().iter().cloned().collect()
    }

    /// fsync every noted directory once and forget them (module docs: what is skipped,
    /// what is an error). Sorted order, so the sync of a directory comes before its
    /// children's only by name; every one is attempted.
    ///
    /// # Errors
    /// The first directory whose open or fsync failed other than as skipped.
    pub fn sync(&self, root: &HostRoot) -> Result<(), RootError> {
        let dirs = std::mem::take(&mut *self.lock());
        let (dirs, mut first) = resolve(dirs, root);
        for dir in dirs {
            if let Err(e) = root.sync_dir_checked(&dir) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<PathBuf>> {
        self.dirs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn has_dotdot(p: &Path) -> bool {
    p.components().any(|c| c == std::path::Component::ParentDir)
}

/// `dirs` with every spelling with a `..` replaced by the directory it resolves to through
/// `root` (dropped when missing), and the first failure to resolve one.
fn resolve(dirs: BTreeSet<PathBuf>, root: &HostRoot) -> (BTreeSet<PathBuf>, Option<RootError>) {
    let mut out = BTreeSet::new();
    let mut first = None;
    for dir in dirs {
        if !has_dotdot(&dir) {
            out.insert(dir);
            continue;
        }
        match root.canonical(&dir) {
            Ok(Some(c)) => {
                out.insert(c);
            }
            Ok(None) => {}
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    (out, first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_each_directory_once_and_syncs_what_exists() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("etc/a")).unwrap();
        let root = HostRoot::open(dir.path()).unwrap();
        let d = DirSyncs::default();
        d.add_parent_of(Path::new("/etc/a/x"));
        d.add_parent_of(Path::new("/etc/a/../a/y"));
        d.add(Path::new("/etc"));
        d.add_parent_of(Path::new("/gone/z"));
        // The `..` spelling is kept and resolved when synced (`durability_dotdot_tests`).
        assert_eq!(
            d.resolved(&root).unwrap(),
            [
                PathBuf::from("/etc"),
                PathBuf::from("/etc/a"),
                PathBuf::from("/gone")
            ]
        );
        // `/gone` does not exist (removed later in the step): skipped, not an error.
        d.sync(&root).unwrap();
        assert!(d.pending().is_empty());
    }

    #[test]
    fn an_apply_session_notes_the_directories_of_its_effects_and_syncs_them_per_step() {
        use crate::host::ExecMode;
        use crate::host::files::fs::{self, WriteOptions};
        use crate::host::testutil::TestHost;
        let t = TestHost::new();
        t.file("/etc/a/old", "o\n");
        t.file("/srv/gone", "g\n");
        for mode in [ExecMode::Plan, ExecMode::Apply] {
            let mut h = t.host(mode);
            let w = WriteOptions::default();
            assert!(fs::write(&mut h, "/etc/a/x", "x\n", &w).unwrap());
            assert!(fs::write(&mut h, "/etc/a/y", "y\n", &w).unwrap());
            assert!(fs::remove(&mut h, "/srv/gone").unwrap());
            assert!(fs::mkdir(&mut h, "/opt/new/dir", None).unwrap());
            assert!(fs::symlink(&mut h, "/etc/a/x", "/etc/link").unwrap());
            let want: Vec<PathBuf> = match mode {
                ExecMode::Apply => ["/", "/etc", "/etc/a", "/opt", "/opt/new", "/srv"]
                    .iter()
                    .map(PathBuf::from)
                    .collect(),
                _ => Vec::new(),
            };
            assert_eq!(h.dir_syncs().pending(), want, "{mode:?}");
            h.finish_step().unwrap();
            assert!(h.dir_syncs().pending().is_empty(), "{mode:?}");
            h.finish().unwrap();
        }
        assert_eq!(t.read("/etc/a/y"), "y\n");
    }

    #[test]
    fn a_file_where_a_directory_was_noted_is_the_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("etc")).unwrap();
        std::fs::write(dir.path().join("etc/f"), "x").unwrap();
        let root = HostRoot::open(dir.path()).unwrap();
        let d = DirSyncs::default();
        d.add(Path::new("/etc/f"));
        d.add(Path::new("/etc"));
        let e = d.sync(&root).unwrap_err();
        assert_eq!(e.path, PathBuf::from("/etc/f"));
        assert_eq!(e.op, "sync directory");
        assert_eq!(e.source.raw_os_error(), Some(libc::ENOTDIR));
        assert!(d.pending().is_empty(), "every directory was attempted");
    }
}
