//! The write side of [`HostRoot`]: directories, new files, atomic replacements (temp file,
//! fsync, rename; [`DirSync`] for when the directory is synced), removals, renames,
//! modes, owners, symlinks and times. Every method is `pub(in crate::host::seam)`: the root
//! itself and the session's executors and undo journal (`host/seam/effects`) call them; an
//! area does not compile a call (it holds a session, whose root is
//! [`crate::host::effects::reads::RootReads`]); the agent's own files (`state/`, `logs/`,
//! `mode/`, `agent/`) are written through [`super::AgentFiles`].

use super::host_root::split;
use super::host_root::{HostRoot, normalize, pathrs_io};
use super::replace::settle_replacement;
use super::root_error::Result;
use super::tmp::tmp_name;
use pathrs::InodeType;
use pathrs::flags::OpenFlags;
use std::fs::{File, Permissions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// When an atomic write makes its directory entry durable (`durability`).
#[derive(Clone, Copy)]
pub enum DirSync<'a> {
    /// fsync the directory right after the rename (outside a session; the agent's state).
    Now,
    /// Hand the directory to a session's set, fsynced once at the end of the step
    /// (`durability::DirSyncs::add`).
    Defer(&'a dyn Fn(&Path)),
}

/// Writes of at least this many bytes reserve their blocks first ([`reserve`]).
const RESERVE_FROM: u64 = 64 * 1024;

/// Reserve `len` bytes of blocks for file `f` before its content is written
/// (`fallocate(FALLOC_FL_KEEP_SIZE)`; its size stays as it is), so a write that does not
/// fit fails with `ENOSPC` before it has filled the filesystem, instead of after: a full
/// disk half-way through a large copy would otherwise hold the node's other writers at
/// `ENOSPC` until the temporary is gone, and longer while any process forked meanwhile
/// still holds its descriptor. Below 64 KiB, and on a filesystem that
/// cannot reserve (`EOPNOTSUPP`), nothing is done.
///
/// # Errors
/// `ENOSPC`, `EFBIG`, `EDQUOT` and the like from `fallocate`.
pub fn reserve(f: &File, len: u64) -> io::Result<()> {
    if len < RESERVE_FROM {
        return Ok(());
    }
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: fallocate on an open descriptor, no memory passed.
    let r = unsafe { libc::fallocate(f.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 0, len) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL) => Ok(()),
        _ => Err(e),
    }
}

/// Maximum number of dangling symlinks followed by [`HostRoot::write_atomic`] before it gives
/// up with `ELOOP` (the kernel's own limit for path resolution is 40).
pub(super) const MAX_SYMLINK_HOPS: usize = 40;

/// Mode of the missing parent directories every creator makes on the way
/// ([`AgentFiles::create_dir_all`](super::AgentFiles::create_dir_all), and so new files, symlinks and downloads): 0755, set
/// exactly whatever the umask, as the plan reports them (`mkdir -p` under umask 022).
pub const PARENT_DIR_MODE: u32 = 0o755;

impl HostRoot {
    /// Fail when `parent` is on procfs or sysfs: no file can be created there, so an atomic
    /// replacement of `target` (a temporary beside it, then a rename) always fails, and the
    /// kernel's `ENOENT` for the temporary would name the wrong cause.
    pub(super) fn check_replaceable(&self, parent: &Path, target: &Path) -> Result<()> {
        let Ok(dir) = self.open_with("write", parent, OpenFlags::O_PATH | OpenFlags::O_DIRECTORY)
        else {
            // A missing parent is created or reported by the write itself.
            return Ok(());
        };
        let Ok(fs) = nix::sys::statfs::fstatfs(&dir) else {
            return Ok(());
        };
        let (kind, hint) = match fs.filesystem_type() {
            nix::sys::statfs::PROC_SUPER_MAGIC => ("procfs", "use sysctl::set for /proc/sys keys"),
            nix::sys::statfs::SYSFS_MAGIC => ("sysfs", "sysfs attributes are written in place"),
            _ => return Ok(()),
        };
        Err(self.err(
            "write",
            target,
            io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "{} is on {kind}, whose files are kernel settings, not regular files on a writable filesystem: they cannot be replaced atomically ({hint})",
                    parent.display()
                ),
            ),
        ))
    }
}

impl HostRoot {
    /// Set the modification time of `host` (following symlinks); the access time is left as is.
    ///
    /// # Errors
    /// Not found or `utimensat` failure.
    pub(in crate::host::seam) fn set_mtime(
        &self,
        host: &Path,
        mtime: std::time::SystemTime,
    ) -> Result<()> {
        let f = self.open_with("set times of", host, OpenFlags::O_RDONLY)?;
        f.set_modified(mtime)
            .map_err(|e| self.err("set times of", host, e))
    }

    /// Open an existing file for writing without truncating it (`O_WRONLY`), following
    /// symlinks inside the root: for a lock that needs a writable descriptor
    /// (`fcntl(F_SETLKW)` with `F_WRLCK`, [`crate::host::root::pwdlock`]).
    ///
    /// # Errors
    /// Not found, permission, or an attempted escape (`EXDEV`).
    pub(in crate::host::seam) fn open_write(&self, host: &Path) -> Result<File> {
        self.open_with("open", host, OpenFlags::O_WRONLY)
    }
}

impl HostRoot {
    /// Create `host` and its missing parents as directories, `mkdir -p` style: each missing
    /// parent gets mode [`PARENT_DIR_MODE`] (0755), `host` itself `mode`, both set exactly
    /// (`chmod` after `mkdir`, so the agent's umask does not matter; the plan reports the same
    /// modes). Existing directories, also one at `host`, keep their mode, owner and times; a
    /// directory another process creates concurrently counts as existing. `..` is resolved
    /// lexically ([`normalize`]), symlinks inside the root are followed. Returns the
    /// directories created, outermost first.
    ///
    /// # Errors
    /// A component exists and is not a directory (`ENOTDIR`, naming it), or a `mkdir`/`chmod`
    /// fails (naming the directory).
    pub(in crate::host::seam) fn create_dir_all(
        &self,
        host: &Path,
        mode: u32,
    ) -> Result<Vec<PathBuf>> {
        const OP: &str = "create directory";
        self.check_abs(OP, host)?;
        let host = normalize(host);
        // Walk up to the nearest existing directory, then create downwards.
        let mut missing = Vec::new();
        let mut cur = host.as_path();
        loop {
            match self
                .metadata(cur)
                .map_err(|e| self.err(OP, cur, e.source))?
            {
                Some(m) if m.is_dir() => break,
                Some(_) => {
                    let e = io::Error::new(
                        io::ErrorKind::NotADirectory,
                        "exists and is not a directory",
                    );
                    return Err(self.err(OP, cur, e));
                }
                None => missing.push(cur.to_path_buf()),
            }
            match cur.parent() {
                Some(p) => cur = p,
                None => break,
            }
        }
        missing.reverse();
        let mut created = Vec::with_capacity(missing.len());
        for dir in missing {
            let m = if dir == host { mode } else { PARENT_DIR_MODE };
            let perm = Permissions::from_mode(m & 0o777);
            match self.in_root(&dir, |r, p| r.create(p, &InodeType::Directory(perm))) {
                Ok(()) => {
                    self.set_mode(&dir, m)?;
                    created.push(dir);
                }
                Err(e) => {
                    let e = pathrs_io(e);
                    let raced = e.kind() == io::ErrorKind::AlreadyExists
                        && self.metadata(&dir)?.is_some_and(|m| m.is_dir());
                    if !raced {
                        return Err(self.err(OP, &dir, e));
                    }
                }
            }
        }
        Ok(created)
    }

    /// Create a new file exclusively (`O_EXCL`) with `mode` for writing, creating missing
    /// parent directories with mode 0755. Fails with `AlreadyExists` when the name is taken.
    ///
    /// # Errors
    /// `AlreadyExists`, or any creation failure.
    pub(in crate::host::seam) fn create_new(&self, host: &Path, mode: u32) -> Result<File> {
        self.check_abs("create", host)?;
        self.create_excl("create", host, mode)
    }

    /// Create `host` exclusively for writing with `mode`. The parent directories are created
    /// (0755) only when the first attempt finds one missing, so the common case (they exist)
    /// costs one confined `open` and no directory walk.
    pub(super) fn create_excl(&self, op: &'static str, host: &Path, mode: u32) -> Result<File> {
        let attempt = || {
            self.in_root(host, |r, p| {
                r.create_file(
                    p,
                    OpenFlags::O_WRONLY | OpenFlags::O_EXCL | OpenFlags::O_CLOEXEC,
                    &Permissions::from_mode(mode),
                )
            })
            .map_err(|e| self.err(op, host, self.explain(host, pathrs_io(e))))
        };
        match attempt() {
            Err(e) if e.is_not_found() => {
                if let Some(parent) = host.parent() {
                    self.create_dir_all(parent, PARENT_DIR_MODE)?;
                }
                attempt()
            }
            other => other,
        }
    }

    /// Where a write to `host` should land: `host` itself, or for a symlink the target it
    /// resolves to inside the root (also when the target does not exist yet).
    pub(in crate::host::seam) fn write_target(&self, host: &Path) -> Result<PathBuf> {
        let mut cur = host.to_path_buf();
        for _ in 0..MAX_SYMLINK_HOPS {
            match self.symlink_metadata(&cur)? {
                Some(m) if m.file_type().is_symlink() && self.is_confined(&cur) => {
                    let e = io::Error::other(
                        "is a symlink in a confined directory, which is not followed",
                    );
                    return Err(self.err("write", &cur, e));
                }
                Some(m) if m.file_type().is_symlink() => {
                    // Existing target: let pathrs resolve it, then map back.
                    if let Ok(f) = self.open_with("write", &cur, OpenFlags::O_PATH) {
                        return self
                            .host_path_of(&f)
                            .ok_or_else(|| self.err("write", host, io::ErrorKind::Other.into()));
                    }
                    // Dangling: follow one hop by hand, relative to the link's directory.
                    let target = self
                        .in_root(&cur, |r, p| r.readlink(p))
                        .map_err(|e| self.err("read link", &cur, pathrs_io(e)))?;
                    let base = cur.parent().unwrap_or(Path::new("/")).to_path_buf();
                    cur = normalize(&base.join(target));
                }
                _ => return Ok(cur),
            }
        }
        Err(self.err("write", host, io::Error::from_raw_os_error(libc::ELOOP)))
    }

    /// Replace the content of `host` atomically: write a temporary file in the same directory,
    /// fsync it, rename it over the destination and fsync the directory. Missing parents are
    /// created (0755). An existing file keeps its mode, owner, group and extended attributes
    /// (see [`HostRoot::write_atomic_owned`]) unless `mode` is given;
    /// a new file gets `mode` or 0644. When `host` is a symlink, its target (resolved inside the
    /// root) is replaced and the link is left in place.
    ///
    /// # Errors
    /// Any creation, write, fsync or rename failure; the destination is then unchanged and the
    /// temporary file removed.
    pub(in crate::host::seam) fn write_atomic(
        &self,
        host: &Path,
        data: &[u8],
        mode: Option<u32>,
    ) -> Result<()> {
        self.write_atomic_owned(host, data, mode, None, None)
    }

    /// fsync a directory (best effort: some filesystems refuse).
    pub(super) fn sync_dir(&self, dir: &Path) {
        if let Ok(f) = self.open_with("sync", dir, OpenFlags::O_RDONLY | OpenFlags::O_DIRECTORY) {
            let _ = f.sync_all();
        }
    }

    /// fsync directory `dir` for a session's deferred directory sync
    /// ([`crate::host::root::durability`]): `Ok` when `dir` does not exist or the filesystem
    /// refuses to fsync a directory (`EINVAL`, `EOPNOTSUPP`).
    ///
    /// # Errors
    /// Any other open or fsync failure (`EIO`, `ENOSPC`, `ENOTDIR`, ...), op `sync directory`.
    pub(in crate::host::seam) fn sync_dir_checked(&self, dir: &Path) -> Result<()> {
        const OP: &str = "sync directory";
        let f = match self.open_with(OP, dir, OpenFlags::O_RDONLY | OpenFlags::O_DIRECTORY) {
            Ok(f) => f,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        };
        match f.sync_all() {
            Err(e) if !matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) => {
                Err(self.err(OP, dir, e))
            }
            _ => Ok(()),
        }
    }

    /// Remove a file or symlink. `Ok(false)` when it did not exist.
    ///
    /// # Errors
    /// Any failure other than "not found" (a directory gives `EISDIR`).
    pub(in crate::host::seam) fn remove_file(&self, host: &Path) -> Result<bool> {
        self.check_abs("remove", host)?;
        match self.in_root(host, |r, p| r.remove_file(p)) {
            Ok(()) => Ok(true),
            Err(e) => {
                let io = pathrs_io(e);
                if io.kind() == io::ErrorKind::NotFound {
                    Ok(false)
                } else {
                    Err(self.err("remove", host, io))
                }
            }
        }
    }

    /// Remove an empty directory. `Ok(false)` when it did not exist.
    ///
    /// # Errors
    /// Not empty, not a directory, or another failure.
    pub(in crate::host::seam) fn remove_dir(&self, host: &Path) -> Result<bool> {
        self.check_abs("remove directory", host)?;
        match self.in_root(host, |r, p| r.remove_dir(p)) {
            Ok(()) => Ok(true),
            Err(e) => {
                let io = pathrs_io(e);
                if io.kind() == io::ErrorKind::NotFound {
                    Ok(false)
                } else {
                    Err(self.err("remove directory", host, io))
                }
            }
        }
    }

    /// Rename `from` to `to` (both host paths), replacing `to`.
    ///
    /// # Errors
    /// Any rename failure.
    pub(in crate::host::seam) fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.check_abs("rename", from)?;
        self.check_abs("rename", to)?;
        self.rename_raw(from, to)
            .map_err(|e| self.err("rename", from, e))
    }

    /// Set the permission bits of `host` (following symlinks).
    ///
    /// # Errors
    /// Not found or `fchmod` failure.
    pub(in crate::host::seam) fn set_mode(&self, host: &Path, mode: u32) -> Result<()> {
        let f = self.open_with("chmod", host, OpenFlags::O_PATH)?;
        // fchmod does not work on O_PATH descriptors; chmod through /proc/self/fd does.
        let proc = format!("/proc/self/fd/{}", f.as_raw_fd());
        std::fs::set_permissions(proc, Permissions::from_mode(mode))
            .map_err(|e| self.err("chmod", host, e))
    }

    /// Create a symlink at `link` pointing to `target` (stored as given).
    ///
    /// # Errors
    /// `AlreadyExists` or any creation failure.
    pub(in crate::host::seam) fn symlink(&self, target: &Path, link: &Path) -> Result<()> {
        self.check_abs("create symlink", link)?;
        self.in_root(link, |r, p| {
            r.create(p, &InodeType::Symlink(target.to_path_buf()))
        })
        .map_err(|e| self.err("create symlink", link, pathrs_io(e)))
    }

    // ---- Appended for the host API (src/host/files/fs.rs, tuning.rs) ----

    /// Change the owner and/or group of `host` (following symlinks inside the root). `None`
    /// leaves that id unchanged.
    ///
    /// # Errors
    /// Not found, or the `chown` failure.
    pub(in crate::host::seam) fn set_owner(
        &self,
        host: &Path,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<()> {
        let f = self.open_with("chown", host, OpenFlags::O_PATH)?;
        // fchown does not work on O_PATH descriptors; chown through /proc/self/fd does.
        let proc = format!("/proc/self/fd/{}", f.as_raw_fd());
        std::os::unix::fs::chown(proc, uid, gid).map_err(|e| self.err("chown", host, e))
    }

    /// Overwrite an existing file in place (`O_WRONLY|O_TRUNC`, no rename): for files that
    /// cannot be replaced, such as `/proc/sys/...` entries.
    ///
    /// # Errors
    /// Not found (the file is never created), permission, or the write failure.
    pub(in crate::host::seam) fn write_in_place(&self, host: &Path, data: &[u8]) -> Result<()> {
        let mut f = self.open_with("write", host, OpenFlags::O_WRONLY | OpenFlags::O_TRUNC)?;
        f.write_all(data).map_err(|e| self.err("write", host, e))
    }

    /// [`HostRoot::write_atomic`] with ownership and extended attributes: an existing file
    /// keeps its mode, owner, group and extended attributes (SELinux label
    /// `security.selinux`, POSIX ACLs `system.posix_acl_*`, `user.*`, ...) unless `mode`,
    /// `uid` or `gid` are given; the attributes are copied from the old file to the temporary
    /// file before the rename. A new file gets `mode` or 0644, `uid`/`gid` or the agent's.
    ///
    /// # Errors
    /// As [`HostRoot::write_atomic`], plus a failure to copy an extended attribute (except
    /// when the filesystem does not support them).
    pub(in crate::host::seam) fn write_atomic_owned(
        &self,
        host: &Path,
        data: &[u8],
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<()> {
        self.write_atomic_from(host, mode, uid, gid, |f| f.write_all(data))
    }

    /// [`HostRoot::write_atomic_owned`] whose content `fill` writes into the temporary file
    /// (for content streamed from elsewhere, e.g. a download). When `fill` fails nothing is
    /// renamed: the destination is unchanged and the temporary file removed, and the error
    /// names the destination.
    ///
    /// # Errors
    /// As [`HostRoot::write_atomic_owned`], plus `fill`'s error.
    pub(in crate::host::seam) fn write_atomic_from(
        &self,
        host: &Path,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        fill: impl FnOnce(&mut File) -> io::Result<()>,
    ) -> Result<()> {
        self.write_atomic_synced(host, mode, uid, gid, DirSync::Now, fill)
    }

    /// [`HostRoot::write_atomic_from`] whose directory fsync is `dir_sync`'s: at once
    /// ([`DirSync::Now`], as every other writer), or the directory of the rename added to
    /// a session's set for one fsync at the end of the step ([`DirSync::Defer`]; the
    /// file's own fsync still comes before the rename: [`crate::host::root::durability`]).
    ///
    /// # Errors
    /// As [`HostRoot::write_atomic_from`].
    pub(in crate::host::seam) fn write_atomic_synced(
        &self,
        host: &Path,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        dir_sync: DirSync<'_>,
        fill: impl FnOnce(&mut File) -> io::Result<()>,
    ) -> Result<()> {
        self.check_abs("write", host)?;
        let target = self.write_target(host)?;
        let (parent, _) = split(&target).map_err(|e| self.err("write", host, e))?;
        self.check_replaceable(&parent, &target)?;
        let existing = self.metadata(&target)?;
        let old = match &existing {
            Some(m) if m.is_file() => {
                Some(self.open_with("write", &target, OpenFlags::O_RDONLY)?)
            }
            _ => None,
        };
        let final_mode =
            mode.unwrap_or_else(|| existing.as_ref().map_or(0o644, |m| m.mode() & 0o7777));
        self.sweep_stale_tmps(&parent);
        // Short and independent of `name`, so a destination name of up to 255 bytes still
        // has a valid temporary name beside it; a taken name (EEXIST) is retried with a new
        // one.
        let mut attempt = 0;
        let (tmp, mut f) = loop {
            let tmp = parent.join(tmp_name());
            match self.create_excl("write", &tmp, 0o600) {
                Ok(f) => break (tmp, f),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 8 => {
                    attempt += 1;
                }
                Err(e) => return Err(self.err("write", &target, e.source)),
            }
        };
        let result = (|| -> Result<()> {
            // Errors name the target, not the temporary the user never asked for.
            fill(&mut f).map_err(|e| self.err("write", &target, e))?;
            settle_replacement(
                &f,
                old.as_ref(),
                uid.or(existing.as_ref().map(|m| m.uid())),
                gid.or(existing.as_ref().map(|m| m.gid())),
                uid.is_some() || gid.is_some(),
                final_mode,
            )
            .map_err(|(op, e)| self.err(op, &target, e))?;
            self.rename_raw(&tmp, &target)
                .map_err(|e| self.err("write", &target, e))?;
            match dir_sync {
                DirSync::Now => self.sync_dir(&parent),
                DirSync::Defer(add) => add(&parent),
            }
            Ok(())
        })();
        if result.is_err() {
            let _ = self.remove_file(&tmp);
        }
        result
    }
}
