//! [`HostRoot`]: the handle on a host root mount (a `pathrs` root, its canonical mount path,
//! its confined directories), how it is opened and cloned, and how a host path is resolved
//! and named in its errors.

use super::root_error::Result;
use super::root_error::RootError;
use pathrs::Root;
use pathrs::flags::OpenFlags;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self};
use std::os::fd::AsRawFd;
use std::path::{Component, Path, PathBuf};

/// The host's `/` as seen from the agent: a directory (the root mount) under which every
/// host path is resolved with chroot semantics.
#[derive(Debug)]
pub struct HostRoot {
    pub(super) root: Root,
    /// The root mount as given (used for display and for `chroot`).
    pub(super) mount: PathBuf,
    /// The canonical root mount (used to map resolved handles back to host paths).
    pub(super) canonical: PathBuf,
    /// Directories whose paths resolve from their own handle, following no symlink
    /// ([`confine`]).
    pub(super) confined: Confinements,
}

/// The confined directories of one [`HostRoot`] (not shared with its clones; [`confine`]).
#[derive(Debug, Default)]
pub(crate) struct Confinements {
    pub(super) dirs: std::sync::Arc<std::sync::RwLock<Vec<ConfinedDir>>>,
}

/// One confined directory ([`confine`]).
#[derive(Debug)]
pub(super) struct ConfinedDir {
    pub(super) id: u64,
    /// The directory's host path, normalised.
    pub(super) prefix: PathBuf,
    /// A root on the directory's handle that follows no symlink.
    pub(super) root: std::sync::Arc<Root>,
}

pub(crate) fn pathrs_io(err: pathrs::error::Error) -> io::Error {
    match err.kind() {
        pathrs::error::ErrorKind::OsError(Some(errno)) => io::Error::from_raw_os_error(errno),
        pathrs::error::ErrorKind::SafetyViolation => io::Error::new(
            io::ErrorKind::CrossesDevices,
            format!("path escapes the host root: {err}"),
        ),
        _ => io::Error::other(err.to_string()),
    }
}

/// Split a host path into its parent and final component. `/` has no final component.
pub(super) fn split(host: &Path) -> io::Result<(PathBuf, OsString)> {
    let name = host
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let parent = host.parent().unwrap_or(Path::new("/"));
    Ok((parent.to_path_buf(), name.to_os_string()))
}

/// Lexically normalise a path to an absolute one (`.` dropped, `..` pops, never above `/`).
/// Used here only to follow a dangling symlink hop, whose result pathrs resolves again; never
/// a substitute for confined resolution.
pub fn normalize(p: &Path) -> PathBuf {
    // Most paths are normal already (`/` and names that are not `.` or `..`, one `/` apart):
    // copied as they are, not rebuilt component by component (every planned change
    // normalises its path several times).
    let b = std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str());
    if b == b"/"
        || (b.first() == Some(&b'/')
            && b.last() != Some(&b'/')
            && b[1..]
                .split(|&c| c == b'/')
                .all(|n| !n.is_empty() && n != b"." && n != b".."))
    {
        return p.to_path_buf();
    }
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

impl HostRoot {
    /// Another handle on the same root: the root descriptor duplicated (`fcntl(F_DUPFD_CLOEXEC)`),
    /// nothing resolved or canonicalized again (for a run that opens a session per step).
    ///
    /// # Errors
    /// The `dup` failure (e.g. `EMFILE`).
    pub fn try_clone(&self) -> Result<Self> {
        let root = self.root.try_clone().map_err(|e| RootError {
            op: "open",
            path: PathBuf::from("/"),
            root: self.mount.clone(),
            source: pathrs_io(e),
        })?;
        Ok(HostRoot {
            root,
            mount: self.mount.clone(),
            canonical: self.canonical.clone(),
            confined: Default::default(),
        })
    }
}

impl HostRoot {
    /// Open the root mount `mount` (an existing directory on the agent's side).
    ///
    /// # Errors
    /// When `mount` does not exist or is not a directory.
    pub fn open(mount: impl AsRef<Path>) -> Result<Self> {
        let mount = mount.as_ref().to_path_buf();
        let err = |source| RootError {
            op: "open",
            path: PathBuf::from("/"),
            root: mount.clone(),
            source,
        };
        let canonical = std::fs::canonicalize(&mount).map_err(err)?;
        let root = Root::open(&canonical).map_err(|e| err(pathrs_io(e)))?;
        Ok(HostRoot {
            root,
            mount,
            canonical,
            confined: Default::default(),
        })
    }

    /// The root mount as given to [`HostRoot::open`].
    pub fn mount(&self) -> &Path {
        &self.mount
    }

    /// The agent-side spelling of a host path: the root mount joined with `host` by plain
    /// concatenation (one separator). For messages and for handing to a chrooted process;
    /// never use it to open files (that would not be confined).
    pub fn display_path(&self, host: &Path) -> PathBuf {
        let rel = host.strip_prefix("/").unwrap_or(host);
        if rel.as_os_str().is_empty() {
            self.mount.clone()
        } else {
            self.mount.join(rel)
        }
    }

    pub(super) fn err(&self, op: &'static str, host: &Path, source: io::Error) -> RootError {
        RootError {
            op,
            path: host.to_path_buf(),
            root: self.mount.clone(),
            source,
        }
    }

    pub(super) fn check_abs(&self, op: &'static str, host: &Path) -> Result<()> {
        if host.is_absolute() {
            Ok(())
        } else {
            Err(self.err(
                op,
                host,
                io::Error::new(io::ErrorKind::InvalidInput, "paths must be absolute"),
            ))
        }
    }

    /// Open `host` (following symlinks inside the root) with `flags`.
    pub(super) fn open_with(
        &self,
        op: &'static str,
        host: &Path,
        flags: OpenFlags,
    ) -> Result<File> {
        self.check_abs(op, host)?;
        self.in_root(host, |r, p| r.open_subpath(p, flags | OpenFlags::O_CLOEXEC))
            .map_err(|e| self.err(op, host, self.explain(host, pathrs_io(e))))
    }

    /// The host path an open file descriptor refers to (via `/proc/self/fd`).
    pub(super) fn real_path_of(&self, f: &File) -> PathBuf {
        let link = format!("/proc/self/fd/{}", f.as_raw_fd());
        std::fs::read_link(link).unwrap_or_default()
    }

    /// Map an agent-side canonical path back to a host path.
    pub(super) fn host_path_of(&self, f: &File) -> Option<PathBuf> {
        let real = self.real_path_of(f);
        let rel = real.strip_prefix(&self.canonical).ok()?;
        Some(Path::new("/").join(rel))
    }
}
