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

/// Open `p` in `root` as pathrs' `Root::open_subpath` does (`O_CLOEXEC` added), with the
/// kernel's answer taken as it is when that answer is `ENOENT`.
///
/// pathrs' one-shot open is one `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | the
/// root's resolver flags)`; on any failure it renders the root's path into its error through
/// `/proc` and probes openat2 again, 6 syscalls more, which a missing path (the common
/// failure: an absent state file or directory) does not need. So the same `openat2` is made
/// here first: an opened file or `ENOENT` is the answer (the kernel resolved within the root,
/// as it does for pathrs); any other failure (`EAGAIN` of a racing rename, no `openat2`
/// under a sandbox or valgrind, `ELOOP`, a NUL in the path) goes to pathrs, which retries,
/// falls back to its checked walk and words the error as before.
fn open_in(root: &Root, p: &Path, flags: OpenFlags) -> io::Result<File> {
    if !flags.intersects(OpenFlags::O_CREAT | OpenFlags::O_EXCL) {
        match openat2_in_root(root, p, flags, 0) {
            Some(Ok(f)) => return Ok(f),
            Some(Err(e)) if e.raw_os_error() == Some(libc::ENOENT) => return Err(e),
            _ => {}
        }
    }
    root.open_subpath(p, flags | OpenFlags::O_CLOEXEC)
        .map_err(pathrs_io)
}

/// One `openat2` of `p` on `root`'s descriptor with pathrs' flags for a one-shot open:
/// `O_CLOEXEC` (and `O_NOCTTY` without `O_PATH`), `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`,
/// the root's resolver flags and `resolve` (more `RESOLVE_*` bits). `None` when `p` holds a
/// NUL byte.
pub(super) fn openat2_in_root(
    root: &Root,
    p: &Path,
    flags: OpenFlags,
    resolve: u64,
) -> Option<io::Result<File>> {
    use std::os::fd::{AsFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    let mut oflags = flags | OpenFlags::O_CLOEXEC;
    if !oflags.contains(OpenFlags::O_PATH) {
        oflags |= OpenFlags::O_NOCTTY;
    }
    // SAFETY: `open_how` is plain data; zeroed is its empty value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = oflags.bits();
    how.resolve = libc::RESOLVE_IN_ROOT
        | libc::RESOLVE_NO_MAGICLINKS
        | root.resolver_flags().bits()
        | resolve;
    // SAFETY: a valid directory descriptor, a NUL-terminated path and an `open_how` of the
    // size passed, all alive for the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_fd().as_raw_fd(),
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Some(Err(io::Error::last_os_error()));
    }
    // SAFETY: the kernel just returned this descriptor, owned by nothing else.
    Some(Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd as i32) })))
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
        self.in_root(host, |r, p| open_in(r, p, flags))
            .map_err(|e| self.err(op, host, self.explain(host, e)))
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
