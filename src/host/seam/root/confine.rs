//! Confined directories: while a [`Confined`] guard of a [`HostRoot`] lives, every
//! operation of that root on a host path below the directory (its open, create, mkdir,
//! symlink, rename, remove, chmod and chown alike, so the session's executor and journal
//! too) resolves the part below it from a handle on the directory opened once, when the
//! guard was made, with pathrs' `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS |
//! RESOLVE_NO_SYMLINKS`: `..` never leaves the directory and no symlink below it is
//! followed, not even a final one (`ELOOP`). So a write below it cannot be redirected,
//! by a symlink that was there, that an archive made, or that a racing user swaps in for
//! a directory (or for the directory itself: the handle still names the one checked).
//!
//! `fs::extract` confines its destination and its staging directory, `fs::copy_tree` its
//! source and destination ([`crate::host::files`]). A path is matched by its lexical form
//! ([`normalize`]); the innermost confined directory wins.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use pathrs::Root;
use pathrs::flags::ResolverFlags;

use super::{ConfinedDir, Confinements, HostRoot, Result, normalize, pathrs_io};

/// While alive, the operations of the [`HostRoot`] that made it on paths below its
/// directory resolve from the directory's handle, following no symlink (module docs).
#[derive(Debug)]
#[must_use = "the directory is confined only while the guard lives"]
pub struct Confined {
    dirs: Arc<RwLock<Vec<ConfinedDir>>>,
    id: u64,
    prefix: PathBuf,
}

impl Confined {
    /// The confined directory's host path (normalised).
    pub fn path(&self) -> &Path {
        &self.prefix
    }
}

impl Drop for Confined {
    fn drop(&mut self) {
        let mut dirs = self.dirs.write().unwrap_or_else(|p| p.into_inner());
        dirs.retain(|d| d.id != self.id);
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

impl Confinements {
    /// The root and the path below it that `host` resolves in: the innermost confined
    /// directory holding `host` (the path then `/`-based below it), or `None` for the host
    /// root itself.
    pub(crate) fn pick(&self, host: &Path) -> Option<(Arc<Root>, PathBuf)> {
        let dirs = self.dirs.read().unwrap_or_else(|p| p.into_inner());
        if dirs.is_empty() {
            return None;
        }
        let norm = normalize(host);
        dirs.iter()
            .filter_map(|d| norm.strip_prefix(&d.prefix).ok().map(|rest| (d, rest)))
            .max_by_key(|(d, _)| d.prefix.components().count())
            .map(|(d, rest)| (d.root.clone(), Path::new("/").join(rest)))
    }
}

impl HostRoot {
    /// Confine `host`, an existing directory (resolved now, as every path, following
    /// symlinks inside the root and any confinement it lies in): until the guard is
    /// dropped, this root's operations below it resolve from the handle opened here and
    /// follow no symlink (module docs).
    ///
    /// # Errors
    /// `host` missing or not a directory; the open.
    pub fn confine(&self, host: &Path) -> Result<Confined> {
        let dir = self.open_with(
            "confine",
            host,
            pathrs::flags::OpenFlags::O_PATH | pathrs::flags::OpenFlags::O_DIRECTORY,
        )?;
        self.confine_handle(host, dir)
    }

    /// Confine `host` as [`HostRoot::confine`], except that a final symlink is not
    /// followed but refused: for a directory the caller has just created, so that a
    /// symlink a racing user put in its place meanwhile cannot redirect what is written
    /// below it (its parents are still resolved following symlinks inside the root).
    ///
    /// # Errors
    /// `host` missing, a symlink or not a directory; the open.
    pub fn confine_created(&self, host: &Path) -> Result<Confined> {
        use pathrs::flags::OpenFlags;
        let dir = self.open_with("confine", host, OpenFlags::O_PATH | OpenFlags::O_NOFOLLOW)?;
        if dir
            .metadata()
            .map_err(|e| self.err("confine", host, e))?
            .is_symlink()
        {
            let e = io::Error::other(
                "is a symlink now, where this call created a directory (not followed)",
            );
            return Err(self.err("confine", host, e));
        }
        self.confine_handle(host, dir)
    }

    /// Confine `host` to the directory handle `dir` (opened by the caller, e.g. one it
    /// created and locked): as [`HostRoot::confine`].
    ///
    /// # Errors
    /// `dir` is not a directory.
    pub fn confine_handle(&self, host: &Path, dir: File) -> Result<Confined> {
        let meta = dir.metadata().map_err(|e| self.err("confine", host, e))?;
        if !meta.is_dir() {
            let e = io::Error::new(io::ErrorKind::NotADirectory, "is not a directory");
            return Err(self.err("confine", host, e));
        }
        let root =
            Root::from_fd(OwnedFd::from(dir)).with_resolver_flags(ResolverFlags::NO_SYMLINKS);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let prefix = normalize(host);
        let dirs = self.confined.dirs.clone();
        dirs.write()
            .unwrap_or_else(|p| p.into_inner())
            .push(ConfinedDir {
                id,
                prefix: prefix.clone(),
                root: Arc::new(root),
            });
        Ok(Confined { dirs, id, prefix })
    }

    /// Run `f` on the pathrs root and the path `host` resolves in ([`Confinements::pick`]).
    pub(crate) fn in_root<T>(&self, host: &Path, f: impl FnOnce(&Root, &Path) -> T) -> T {
        match self.confined.pick(host) {
            Some((root, rest)) => f(&root, &rest),
            None => f(&self.root, host),
        }
    }

    /// `e`, the error of an operation on `host`, with `ELOOP` in a confined directory said
    /// as what it is there: a symlink on the way, which is not followed.
    pub(crate) fn explain(&self, host: &Path, e: io::Error) -> io::Error {
        if e.raw_os_error() != Some(libc::ELOOP) {
            return e;
        }
        let dirs = self.confined.dirs.read().unwrap_or_else(|p| p.into_inner());
        let norm = normalize(host);
        match dirs
            .iter()
            .filter(|d| norm.starts_with(&d.prefix))
            .max_by_key(|d| d.prefix.components().count())
        {
            Some(d) => io::Error::new(
                e.kind(),
                format!(
                    "a symlink on the way below {}, where no symlink is followed: {e}",
                    d.prefix.display()
                ),
            ),
            None => e,
        }
    }

    /// True when `host` lies in a confined directory (no symlink below it is followed).
    pub(crate) fn is_confined(&self, host: &Path) -> bool {
        self.confined.pick(host).is_some()
    }

    /// Rename `from` to `to`, each resolved in its own root ([`HostRoot::in_root`]): one
    /// `renameat` between the two parents' handles.
    pub(in crate::host::seam) fn rename_raw(&self, from: &Path, to: &Path) -> io::Result<()> {
        use pathrs::flags::RenameFlags;
        let a = self.confined.pick(from);
        let b = self.confined.pick(to);
        match (&a, &b) {
            (None, None) => {
                return self
                    .root
                    .rename(from, to, RenameFlags::empty())
                    .map_err(pathrs_io);
            }
            (Some((ra, pa)), Some((rb, pb))) if Arc::ptr_eq(ra, rb) => {
                return ra.rename(pa, pb, RenameFlags::empty()).map_err(pathrs_io);
            }
            _ => {}
        }
        let side = |host: &Path,
                    c: &Option<(Arc<Root>, PathBuf)>|
         -> io::Result<(OwnedFd, std::ffi::CString)> {
            let (root, p): (&Root, &Path) = match c {
                Some((r, p)) => (r, p),
                None => (&self.root, host),
            };
            let name = p.file_name().ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "path has no file name")
            })?;
            let parent = p.parent().unwrap_or(Path::new("/"));
            let dir = root.resolve(parent).map_err(pathrs_io)?;
            let name = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(name))
                .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
            Ok((OwnedFd::from(dir), name))
        };
        let (fa, na) = side(from, &a)?;
        let (fb, nb) = side(to, &b)?;
        use std::os::fd::AsRawFd;
        // SAFETY: both descriptors are open directories and both names NUL-terminated
        // strings that outlive the call.
        let rc =
            unsafe { libc::renameat(fa.as_raw_fd(), na.as_ptr(), fb.as_raw_fd(), nb.as_ptr()) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::host::root::HostRoot;

    /// Below a confined directory no symlink is followed, not even one inside it, and the
    /// handle keeps naming the directory checked after its path is swapped; a rename
    /// between it and the rest of the root works; the guard's drop ends it.
    #[test]
    fn a_confined_directory_follows_no_symlink_and_keeps_its_handle() {
        let d = tempfile::tempdir().unwrap();
        let r = HostRoot::open(d.path()).unwrap();
        std::fs::create_dir_all(d.path().join("dest/in")).unwrap();
        std::fs::create_dir_all(d.path().join("etc")).unwrap();
        std::os::unix::fs::symlink("in", d.path().join("dest/lnk")).unwrap();
        let guard = r.confine(Path::new("/dest")).unwrap();
        let e = r
            .write_atomic(Path::new("/dest/lnk/x"), b"x", None)
            .unwrap_err();
        let e = crate::chain::render(&e);
        assert!(
            e.contains(": a symlink on the way below /dest, where"),
            "{e}"
        );
        let e = r
            .write_atomic(Path::new("/dest/lnk"), b"x", None)
            .unwrap_err();
        assert!(
            e.to_string().starts_with("failed to write /dest/lnk"),
            "{e}"
        );
        r.write_atomic(Path::new("/dest/in/x"), b"x", None).unwrap();
        r.rename(Path::new("/dest/in/x"), Path::new("/etc/x"))
            .unwrap();
        r.rename(Path::new("/etc/x"), Path::new("/dest/y")).unwrap();
        // The path swapped for a symlink: the handle still names the directory checked.
        std::fs::rename(d.path().join("dest"), d.path().join("old")).unwrap();
        std::os::unix::fs::symlink("/etc", d.path().join("dest")).unwrap();
        r.write_atomic(Path::new("/dest/z"), b"z", None).unwrap();
        assert!(d.path().join("old/z").exists() && d.path().join("old/y").exists());
        assert!(!d.path().join("etc/z").exists());
        assert!(
            r.symlink_metadata(Path::new("/dest"))
                .unwrap()
                .unwrap()
                .is_dir()
        );
        drop(guard);
        r.write_atomic(Path::new("/dest/z"), b"z", None).unwrap();
        assert!(d.path().join("etc/z").exists());
    }
}
