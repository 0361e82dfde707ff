//! Staging directories: a directory of the agent's own below a host directory (`fs::extract`'s
//! `/var/lib/skyhook/.extract`), named uniquely across pid namespaces and held by an
//! exclusive `flock` while in use, whose files are created and removed through its handle.
//!
//! A name is `<boot id>-<64 random bits>`: agents in different pods (each pid 1 in its
//! own namespace) never pick the same one, and the boot id (`/proc/sys/kernel/random/
//! boot_id`) tells a directory left before a reboot. Liveness is the lock, not the name:
//! `sweep` removes exactly the directories nobody holds locked (their agent was killed;
//! the kernel drops a dead process's locks), and keeps those of a live agent in any pod.
//!
//! Every change goes through descriptors: the parent directory is opened once (inside
//! the host root), the staging directory is made with `mkdirat` and opened `O_NOFOLLOW`,
//! its files are made with `openat(O_CREAT | O_EXCL | O_NOFOLLOW)` and removed with
//! `unlinkat`, and while it lives it is a confined directory of the root
//! ([`super::confine`]), so the executor's reads of a staged file (by its host path)
//! resolve from the same handle.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use pathrs::flags::OpenFlags;

use super::confine::Confined;
use super::{HostRoot, Result};

/// Attempts at making a staging directory before giving up (each lost race with a sweep or
/// a removal of the parent costs one).
const ATTEMPTS: usize = 8;

/// Directory levels a sweep removes at most below one staging directory.
const MAX_DEPTH: usize = 64;

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)`.
fn open_dir_at(dir: &File, name: &OsStr) -> io::Result<File> {
    let c = cstr(name)?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `dir` is open and `c` a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// `unlinkat(dir, name, is_dir ? AT_REMOVEDIR : 0)`.
fn unlink_at(dir: &File, name: &OsStr, is_dir: bool) -> io::Result<()> {
    let c = cstr(name)?;
    let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: as in `open_dir_at`.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `flock(f, LOCK_EX | LOCK_NB)`: whether the lock was taken (`false`: someone holds it).
fn try_lock(f: &File) -> io::Result<bool> {
    // SAFETY: `f` is an open descriptor.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        _ => Err(e),
    }
}

/// The names in the directory `dir`, sorted.
fn names(dir: &File) -> io::Result<Vec<OsString>> {
    let proc = format!("/proc/self/fd/{}", dir.as_raw_fd());
    let mut out: Vec<OsString> = std::fs::read_dir(proc)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<_>>()?;
    out.sort();
    Ok(out)
}

/// Remove everything in the directory `dir` (never following a symlink, at most
/// [`MAX_DEPTH`] levels).
fn empty(dir: &File, depth: usize) -> io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    for name in names(dir)? {
        match open_dir_at(dir, &name) {
            Ok(sub) => {
                empty(&sub, depth + 1)?;
                unlink_at(dir, &name, true)?;
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) => {
                unlink_at(dir, &name, false)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// This boot's id (`/proc/sys/kernel/random/boot_id` without dashes), `unknown` when
/// unreadable. Read once per process. Also the undo journal's (its names and start record).
pub(crate) fn boot_id() -> String {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .ok()
            .map(|s| s.trim().replace('-', ""))
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .unwrap_or_else(|| "unknown".into())
    })
    .clone()
}

/// 64 random bits from the kernel (`getrandom`), or, should it fail, from std's hasher
/// seed. Also the random part of the undo journal's names.
pub(crate) fn random() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: `b` is a valid buffer of `b.len()` bytes.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == 8 {
        return u64::from_ne_bytes(b);
    }
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish()
}

/// A fresh staging name: `<boot id>-<16 hex digits>` (module docs).
pub fn unique_name() -> String {
    format!("{}-{:016x}", boot_id(), random())
}

/// One staging directory of this process, held locked until dropped (then its files and
/// itself are removed, and its parent when left empty).
#[derive(Debug)]
pub struct StagingDir {
    /// The host directory above the parent (the parent is removed through it).
    above: File,
    /// The parent (e.g. `/var/lib/skyhook/.extract`).
    parent: File,
    /// The staging directory, `flock`ed.
    dir: File,
    name: OsString,
    /// Its host path, for the effects that read the staged files.
    host: PathBuf,
    /// The staged files' names, removed on drop.
    files: Vec<OsString>,
    /// The root's confinement of the directory to `dir`.
    _confined: Confined,
}

impl StagingDir {
    /// Make and lock a new staging directory (mode 0700) in the host directory `parent`
    /// (made 0700 with its missing ancestors when absent).
    ///
    /// # Errors
    /// `parent` cannot be made or opened, or every attempt lost a race.
    pub(in crate::host::seam) fn create(root: &HostRoot, parent: &Path) -> Result<StagingDir> {
        const OP: &str = "create staging directory in";
        let (Some(above_path), Some(parent_name)) = (parent.parent(), parent.file_name()) else {
            let e = io::Error::new(io::ErrorKind::InvalidInput, "has no parent directory");
            return Err(root.err(OP, parent, e));
        };
        let err = |e: io::Error| root.err(OP, parent, e);
        let mut last = None;
        for _ in 0..ATTEMPTS {
            root.create_dir_all(parent, 0o700)?;
            let above =
                root.open_with(OP, above_path, OpenFlags::O_RDONLY | OpenFlags::O_DIRECTORY)?;
            // A sweep of another agent may remove the emptied parent at any point: each
            // step that finds it gone starts again.
            let pdir = match open_dir_at(&above, parent_name) {
                Ok(d) => d,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    last = Some(e);
                    continue;
                }
                Err(e) => return Err(err(e)),
            };
            let name = OsString::from(unique_name());
            let c = cstr(&name).map_err(err)?;
            // SAFETY: `pdir` is open and `c` NUL-terminated.
            if unsafe { libc::mkdirat(pdir.as_raw_fd(), c.as_ptr(), 0o700) } != 0 {
                let e = io::Error::last_os_error();
                if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EEXIST)) {
                    last = Some(e);
                    continue;
                }
                return Err(err(e));
            }
            let dir = match open_dir_at(&pdir, &name) {
                Ok(d) => d,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    last = Some(e);
                    continue;
                }
                Err(e) => return Err(err(e)),
            };
            // A sweep that took the lock between the mkdir and here removes the directory;
            // so the lock counts only if the directory is still linked once it is held.
            if !try_lock(&dir).map_err(err)? || dir.metadata().map_err(err)?.nlink() == 0 {
                last = Some(io::Error::from_raw_os_error(libc::EAGAIN));
                continue;
            }
            let host = parent.join(&name);
            let confine_fd = dir.try_clone().map_err(err)?;
            let confined = root.confine_handle(&host, confine_fd)?;
            return Ok(StagingDir {
                above,
                parent: pdir,
                dir,
                name,
                host,
                files: Vec::new(),
                _confined: confined,
            });
        }
        Err(err(
            last.unwrap_or_else(|| io::Error::other("no attempt made"))
        ))
    }

    /// The directory's host path.
    pub fn path(&self) -> &Path {
        &self.host
    }

    /// Create the new file `name` (one component) in the directory for writing, mode 0600,
    /// through its handle (`O_CREAT | O_EXCL | O_NOFOLLOW`). Returns it and its host path.
    ///
    /// # Errors
    /// `name` taken or not one component; the open.
    pub fn create_file(&mut self, name: &str) -> io::Result<(File, PathBuf)> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a staging file's name is one path component",
            ));
        }
        let c = cstr(OsStr::new(name))?;
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: `self.dir` is open and `c` NUL-terminated.
        let fd = unsafe { libc::openat(self.dir.as_raw_fd(), c.as_ptr(), flags, 0o600) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        self.files.push(name.into());
        // SAFETY: `fd` was just opened and is owned by nobody else.
        Ok((unsafe { File::from_raw_fd(fd) }, self.host.join(name)))
    }
}

use std::os::unix::fs::MetadataExt;

impl Drop for StagingDir {
    /// Remove the staged files, the directory (still locked: no sweep touches it
    /// meanwhile) and the parent when it is left empty; best effort.
    fn drop(&mut self) {
        for f in &self.files {
            let _ = unlink_at(&self.dir, f, false);
        }
        let _ = empty(&self.dir, 0);
        let _ = unlink_at(&self.parent, &self.name, true);
        if let Some(n) = self.host.parent().and_then(Path::file_name) {
            // ENOTEMPTY while another agent stages there: it stays.
            let _ = unlink_at(&self.above, n, true);
        }
    }
}

/// Remove the staging directories in the host directory `parent` that nobody holds
/// locked (each taken with a non-blocking `flock`, emptied and removed while held), and
/// any other entry there; `parent` itself when left empty. Returns the names removed.
/// Nothing to do when `parent` does not exist.
///
/// # Errors
/// Opening or listing `parent`, or removing an entry.
pub(in crate::host::seam) fn sweep(root: &HostRoot, parent: &Path) -> Result<Vec<String>> {
    const OP: &str = "sweep";
    let (Some(above_path), Some(parent_name)) = (parent.parent(), parent.file_name()) else {
        return Ok(Vec::new());
    };
    let above = match root.open_with(OP, above_path, OpenFlags::O_RDONLY | OpenFlags::O_DIRECTORY) {
        Ok(d) => d,
        Err(e) if e.is_not_found() => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let err = |e: io::Error| root.err(OP, parent, e);
    let pdir = match open_dir_at(&above, parent_name) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(err(e)),
    };
    let mut removed = Vec::new();
    for name in names(&pdir).map_err(err)? {
        let shown = name.to_string_lossy().into_owned();
        let e_at = |e: io::Error| root.err("remove", &parent.join(&name), e);
        match open_dir_at(&pdir, &name) {
            Ok(dir) => {
                if !try_lock(&dir).map_err(e_at)? {
                    continue;
                }
                empty(&dir, 0).map_err(e_at)?;
                match unlink_at(&pdir, &name, true) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e_at(e)),
                }
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) => {
                unlink_at(&pdir, &name, false).map_err(e_at)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e_at(e)),
        }
        removed.push(shown);
    }
    let _ = unlink_at(&above, parent_name, true);
    Ok(removed)
}
