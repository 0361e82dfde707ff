//! Root confinement: every file operation on the host goes through [`HostRoot`].
//!
//! A *host path* is an absolute path as the host sees it (`/etc/sysctl.d/x.conf`). It is
//! resolved beneath the root mount with chroot semantics by [`pathrs`] (openat2
//! `RESOLVE_IN_ROOT` where the kernel has it, a checked userspace walk otherwise): `..`
//! components and symlinks, absolute or relative, never leave the root, and a directory
//! swapped for a symlink during an operation cannot redirect it outside.
//!
//! Nothing here checks paths lexically; confinement is the kernel's (or pathrs') job.
//!
//! Durability: an atomic write ([`HostRoot::write_atomic`] and friends) is temp file, write,
//! fsync(file), rename, fsync(directory), both fsyncs at once. A session's executor writes
//! with [`HostRoot::write_atomic_synced`] and [`DirSync::Defer`] instead: the file's fsync
//! still comes before the rename, the directory's is collected and done once at the end of
//! the step ([`crate::host::root::durability`], policy `fsync1`).

use std::ffi::OsString;
use std::fs::{File, Metadata, Permissions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use pathrs::flags::OpenFlags;
use pathrs::{InodeType, Root};

pub mod confine;
pub mod deferred;
pub mod digest;
pub mod durability;
pub mod error;
pub mod mount_ns;
pub mod pathlock;
pub mod pwdlock;
pub mod read;
pub mod run_dirs;
pub mod staging;
mod tree;
pub(crate) mod undo_ops;

#[cfg(test)]
mod durability_dotdot_tests;

/// When an atomic write makes its directory entry durable ([`durability`]).
#[derive(Clone, Copy)]
pub enum DirSync<'a> {
    /// fsync the directory right after the rename (outside a session; the agent's state).
    Now,
    /// Hand the directory to a session's set, fsynced once at the end of the step
    /// ([`durability::DirSyncs::add`]).
    Defer(&'a dyn Fn(&Path)),
}

/// Maximum number of dangling symlinks followed by [`HostRoot::write_atomic`] before it gives
/// up with `ELOOP` (the kernel's own limit for path resolution is 40).
const MAX_SYMLINK_HOPS: usize = 40;

/// Mode of the missing parent directories every creator makes on the way
/// ([`HostRoot::create_dir_all`], and so new files, symlinks and downloads): 0755, set
/// exactly whatever the umask, as the plan reports them (`mkdir -p` under umask 022).
pub const PARENT_DIR_MODE: u32 = 0o755;

/// An error from a file operation under the host root.
///
/// The message reads after "failed to": `failed to write /etc/x.conf under host root /mnt`.
#[derive(Debug, thiserror::Error)]
#[error("failed to {op} {} under host root {}", path.display(), root.display())]
pub struct RootError {
    /// The operation that failed (`write`, `read`, `create directory`, ...).
    pub op: &'static str,
    /// The host path it was applied to.
    pub path: PathBuf,
    /// The root mount.
    pub root: PathBuf,
    /// The OS error. `EXDEV` means pathrs detected an attempt to escape the root.
    #[source]
    pub source: io::Error,
}

impl RootError {
    /// The underlying OS error kind.
    pub fn kind(&self) -> io::ErrorKind {
        self.source.kind()
    }

    /// True when the path (or one of its parents) does not exist.
    pub fn is_not_found(&self) -> bool {
        self.source.kind() == io::ErrorKind::NotFound
    }
}

/// Largest package file the agent reads whole (config.json, a `.rhai` step), in bytes
/// (16 MiB).
pub const MAX_PACKAGE_FILE_BYTES: u64 = 16 << 20;

/// What kind of non-regular file `ft` is, for messages (`a fifo`, `a directory`, ...).
pub(crate) fn kind_name(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a fifo"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

/// Read the whole of the open file `f`, which must be a regular file of at most `max_bytes`
/// bytes (checked with `fstat` before reading, and again while reading, so a file that
/// grows meanwhile is cut off with the same error).
///
/// # Errors
/// `InvalidInput` (not a regular file), `FileTooLarge` (over the limit), read errors.
pub fn read_bounded(f: File, max_bytes: u64) -> io::Result<Vec<u8>> {
    let meta = f.metadata()?;
    let too_large = |n: u64| {
        io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("{n} bytes, more than the limit of {max_bytes} bytes"),
        )
    };
    if !meta.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a regular file ({})", kind_name(meta.file_type())),
        ));
    }
    if meta.len() > max_bytes {
        return Err(too_large(meta.len()));
    }
    let mut buf = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    io::Read::read_to_end(&mut io::Read::take(f, max_bytes + 1), &mut buf)?;
    if buf.len() as u64 > max_bytes {
        return Err(too_large(buf.len() as u64));
    }
    Ok(buf)
}

/// Reopen the `O_PATH` handle `f` for reading (`O_RDONLY | O_NONBLOCK | O_NOCTTY`, through
/// `/proc/self/fd`, the same inode) when it is a regular file. Nothing else is ever opened
/// for reading: opening a device has effects of its own (a watchdog starts counting, a tape
/// rewinds, a serial line's modem lines change), whatever is then read.
///
/// # Errors
/// `IsADirectory` for a directory; `InvalidInput` `not a regular file (a fifo)` (or the
/// device, socket, symlink); the `fstat` or the reopen failing.
pub fn reopen_regular(f: File) -> io::Result<File> {
    let ft = f.metadata()?.file_type();
    if ft.is_dir() {
        return Err(io::ErrorKind::IsADirectory.into());
    }
    if !ft.is_file() {
        let what = match ft.is_symlink() {
            true => "a symlink",
            false => kind_name(ft),
        };
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a regular file ({what})"),
        ));
    }
    pathrs::Handle::from_fd(std::os::fd::OwnedFd::from(f))
        .reopen(OpenFlags::O_RDONLY | OpenFlags::O_NONBLOCK | OpenFlags::O_NOCTTY)
        .map_err(pathrs_io)
}

/// Open a file on this machine (not under a host root) for [`read_bounded`]: a regular
/// file open for reading ([`reopen_regular`], without blocking); anything else only as its
/// `O_PATH` handle, for the caller's `fstat` to refuse, never opened itself (a FIFO's open
/// could block, a device's act).
///
/// # Errors
/// The open fails.
pub fn open_local(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(path)?;
    match f.metadata()?.is_file() {
        true => reopen_regular(f),
        false => Ok(f),
    }
}

/// Open `name` (a path relative to `dir`) in the directory `dir` on this machine (not under
/// a host root), confined to `dir`: `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`, so
/// symlinks are followed only while they stay beneath `dir` (a configMap volume's `key ->
/// ..data/key`, `..data -> ..<timestamp>`); an absolute link or a `..` above `dir` is
/// `EXDEV` (`ErrorKind::CrossesDevices`), checked by the kernel in the open itself.
/// `flags` are `open(2)`'s (`O_CLOEXEC` added): `O_RDONLY | O_NONBLOCK | O_NOCTTY` for
/// [`read_bounded`], `O_PATH` to `fstat` what a name leads to. On a kernel without
/// `openat2` (before 5.6) the open falls back to [`pathrs`]'s `RESOLVE_IN_ROOT`
/// emulation: still confined, but a link out of `dir` resolves inside it (normally to
/// nothing, `NotFound`) instead of `EXDEV`.
///
/// # Errors
/// The open fails (`EXDEV` for a path leading out of `dir`, `ELOOP` for a magic link).
pub fn open_beneath(dir: &Path, name: &Path, flags: libc::c_int) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let d = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(dir)?;
    open_beneath_at(d, name, flags)
}

/// [`open_beneath`] in the directory open as `d` (a directory opened through a
/// [`HostRoot`], so the whole path stays inside the root).
///
/// # Errors
/// As [`open_beneath`].
pub fn open_beneath_at(d: File, name: &Path, flags: libc::c_int) -> io::Result<File> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
    let how = OpenHow::new()
        .flags(OFlag::from_bits_retain(flags | libc::O_CLOEXEC))
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    match openat2(&d, name, how) {
        Ok(fd) => Ok(File::from(fd)),
        Err(nix::errno::Errno::ENOSYS) => Root::from_fd(std::os::fd::OwnedFd::from(d))
            .open_subpath(
                name,
                OpenFlags::from_bits_retain((flags | libc::O_CLOEXEC) as _),
            )
            .map_err(pathrs_io),
        Err(e) => Err(e.into()),
    }
}

/// Result alias for host root operations.
pub type Result<T, E = RootError> = std::result::Result<T, E>;

/// One entry of [`HostRoot::read_dir`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The file name (one path component).
    pub name: OsString,
    /// The entry's own type (symlinks are not followed).
    pub kind: EntryKind,
}

/// The type of a filesystem object, without following a final symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// Anything else (fifo, socket, device).
    Other,
}

impl EntryKind {
    fn of(ft: std::fs::FileType) -> Self {
        if ft.is_symlink() {
            EntryKind::Symlink
        } else if ft.is_dir() {
            EntryKind::Dir
        } else if ft.is_file() {
            EntryKind::File
        } else {
            EntryKind::Other
        }
    }
}

/// The host's `/` as seen from the agent: a directory (the root mount) under which every
/// host path is resolved with chroot semantics.
#[derive(Debug)]
pub struct HostRoot {
    root: Root,
    /// The root mount as given (used for display and for `chroot`).
    mount: PathBuf,
    /// The canonical root mount (used to map resolved handles back to host paths).
    canonical: PathBuf,
    /// Directories whose paths resolve from their own handle, following no symlink
    /// ([`confine`]).
    confined: Confinements,
}

/// The confined directories of one [`HostRoot`] (not shared with its clones; [`confine`]).
#[derive(Debug, Default)]
pub(crate) struct Confinements {
    dirs: std::sync::Arc<std::sync::RwLock<Vec<ConfinedDir>>>,
}

/// One confined directory ([`confine`]).
#[derive(Debug)]
struct ConfinedDir {
    id: u64,
    /// The directory's host path, normalised.
    prefix: PathBuf,
    /// A root on the directory's handle that follows no symlink.
    root: std::sync::Arc<Root>,
}

/// Directories (agent-side, canonical root + host path) whose stale temporaries this process
/// already removed: each is swept once per process, however many sessions open the root.
static SWEPT: std::sync::Mutex<Option<std::collections::HashSet<PathBuf>>> =
    std::sync::Mutex::new(None);

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The prefix of the agent's temporary files (`write_atomic`).
pub const TMP_PREFIX: &str = ".skyhook-tmp-";

/// The start time of process `pid` (clock ticks since boot, `/proc/<pid>/stat` field 22),
/// `None` when it does not exist.
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces: count after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// This process's start time, once.
fn own_start() -> u64 {
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *START.get_or_init(|| process_start(std::process::id()).unwrap_or(0))
}

/// A temporary name that no other writer can hold: `<TMP_PREFIX><pid>-<start>-<n>-<random>`
/// (pid and start time tell whether its writer still lives; the counter and 64 random bits
/// make it unique).
pub(crate) fn tmp_name() -> String {
    use std::hash::{BuildHasher, Hasher};
    let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(n);
    format!(
        "{TMP_PREFIX}{}-{}-{n}-{:016x}",
        std::process::id(),
        own_start(),
        h.finish()
    )
}

/// True when the temporary `name` (ours by its prefix) was left by a writer that is gone:
/// its pid is not running, or runs with another start time (a reused pid), or it has the
/// old `<pid>-<n>` shape of a process that is not this one.
pub(crate) fn is_stale_tmp(name: &str) -> bool {
    let Some(rest) = name.strip_prefix(TMP_PREFIX) else {
        return false;
    };
    let mut parts = rest.split('-');
    let Some(Ok(pid)) = parts.next().map(str::parse::<u32>) else {
        return false;
    };
    let fields: Vec<&str> = parts.collect();
    let alive_start = process_start(pid);
    match (fields.len(), alive_start) {
        (_, None) => true,
        // old shape: `<pid>-<n>`; stale unless a live other process wrote it just now
        (1, Some(_)) => pid == std::process::id(),
        (3, Some(start)) => fields[0].parse::<u64>().ok() != Some(start),
        _ => false,
    }
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
fn split(host: &Path) -> io::Result<(PathBuf, OsString)> {
    let name = host
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let parent = host.parent().unwrap_or(Path::new("/"));
    Ok((parent.to_path_buf(), name.to_os_string()))
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

    fn err(&self, op: &'static str, host: &Path, source: io::Error) -> RootError {
        RootError {
            op,
            path: host.to_path_buf(),
            root: self.mount.clone(),
            source,
        }
    }

    fn check_abs(&self, op: &'static str, host: &Path) -> Result<()> {
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
    fn open_with(&self, op: &'static str, host: &Path, flags: OpenFlags) -> Result<File> {
        self.check_abs(op, host)?;
        self.in_root(host, |r, p| r.open_subpath(p, flags | OpenFlags::O_CLOEXEC))
            .map_err(|e| self.err(op, host, self.explain(host, pathrs_io(e))))
    }

    /// Metadata of `host`, following symlinks. `Ok(None)` when it does not exist (including a
    /// dangling symlink).
    ///
    /// # Errors
    /// Any other resolution or `fstat` failure.
    pub fn metadata(&self, host: &Path) -> Result<Option<Metadata>> {
        match self.open_with("stat", host, OpenFlags::O_PATH) {
            Ok(f) => f
                .metadata()
                .map(Some)
                .map_err(|e| self.err("stat", host, e)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Metadata of `host` itself (a final symlink is not followed). `Ok(None)` when absent.
    ///
    /// # Errors
    /// Any other resolution or `fstat` failure.
    pub fn symlink_metadata(&self, host: &Path) -> Result<Option<Metadata>> {
        self.check_abs("stat", host)?;
        let Ok((parent, name)) = split(host) else {
            return self.metadata(host);
        };
        if self.is_confined(host) && !self.is_confined(&parent) {
            // A confined directory itself: its handle, not what its path names now.
            return self.metadata(host);
        }
        let dir = match self.open_with("stat", &parent, OpenFlags::O_PATH | OpenFlags::O_DIRECTORY)
        {
            Ok(d) => d,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        // The parent is confined; `name` is a single component looked up without following.
        let proc = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(&name);
        match std::fs::symlink_metadata(proc) {
            Ok(m) => Ok(Some(m)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.err("stat", host, e)),
        }
    }

    /// True when `host` exists (following symlinks).
    ///
    /// # Errors
    /// Resolution failures other than "not found".
    pub fn exists(&self, host: &Path) -> Result<bool> {
        Ok(self.metadata(host)?.is_some())
    }

    /// Open an existing file for reading.
    ///
    /// # Errors
    /// Not found, permission, or an attempted escape (`EXDEV`).
    pub fn open_read(&self, host: &Path) -> Result<File> {
        self.open_with("read", host, OpenFlags::O_RDONLY)
    }

    /// Read a whole file.
    ///
    /// # Errors
    /// As [`HostRoot::open_read`], plus read errors.
    pub fn read(&self, host: &Path) -> Result<Vec<u8>> {
        let mut f = self.open_read(host)?;
        let mut buf = Vec::new();
        io::Read::read_to_end(&mut f, &mut buf).map_err(|e| self.err("read", host, e))?;
        Ok(buf)
    }

    /// Read a whole regular file of at most `max_bytes` bytes, without blocking: the file is
    /// opened `O_NONBLOCK | O_NOCTTY` (a FIFO or a terminal cannot hang the caller) and must
    /// be a regular file (not a FIFO, device, socket or directory) no larger than the limit.
    ///
    /// # Errors
    /// As [`HostRoot::open_read`]; `InvalidInput` "not a regular file (a fifo)" and
    /// `FileTooLarge` "N bytes, more than the limit of M bytes" as the cause.
    pub fn read_regular(&self, host: &Path, max_bytes: u64) -> Result<Vec<u8>> {
        let f = self.open_with(
            "read",
            host,
            OpenFlags::O_RDONLY | OpenFlags::O_NONBLOCK | OpenFlags::O_NOCTTY,
        )?;
        read_bounded(f, max_bytes).map_err(|e| self.err("read", host, e))
    }

    /// Open a regular file for reading without blocking (`O_NONBLOCK | O_NOCTTY`, then
    /// `fstat`): for callers that stream a file of any size (the digest of `fs::fetch`).
    ///
    /// # Errors
    /// As [`HostRoot::open_read`]; `InvalidInput` "not a regular file (a fifo)".
    pub fn open_regular(&self, host: &Path) -> Result<File> {
        let f = self.open_with(
            "read",
            host,
            OpenFlags::O_RDONLY | OpenFlags::O_NONBLOCK | OpenFlags::O_NOCTTY,
        )?;
        let ft = f
            .metadata()
            .map_err(|e| self.err("read", host, e))?
            .file_type();
        if !ft.is_file() {
            return Err(self.err(
                "read",
                host,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("not a regular file ({})", kind_name(ft)),
                ),
            ));
        }
        Ok(f)
    }

    /// Read a whole file, `Ok(None)` when it does not exist.
    ///
    /// # Errors
    /// As [`HostRoot::read`], except "not found".
    pub fn read_opt(&self, host: &Path) -> Result<Option<Vec<u8>>> {
        match self.read(host) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

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
    pub fn create_dir_all(&self, host: &Path, mode: u32) -> Result<Vec<PathBuf>> {
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
    pub fn create_new(&self, host: &Path, mode: u32) -> Result<File> {
        self.check_abs("create", host)?;
        self.create_excl("create", host, mode)
    }

    /// Create `host` exclusively for writing with `mode`. The parent directories are created
    /// (0755) only when the first attempt finds one missing, so the common case (they exist)
    /// costs one confined `open` and no directory walk.
    fn create_excl(&self, op: &'static str, host: &Path, mode: u32) -> Result<File> {
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

    /// The host path an open file descriptor refers to (via `/proc/self/fd`).
    fn real_path_of(&self, f: &File) -> PathBuf {
        let link = format!("/proc/self/fd/{}", f.as_raw_fd());
        std::fs::read_link(link).unwrap_or_default()
    }

    /// Map an agent-side canonical path back to a host path.
    fn host_path_of(&self, f: &File) -> Option<PathBuf> {
        let real = self.real_path_of(f);
        let rel = real.strip_prefix(&self.canonical).ok()?;
        Some(Path::new("/").join(rel))
    }

    /// Where a write to `host` should land: `host` itself, or for a symlink the target it
    /// resolves to inside the root (also when the target does not exist yet).
    pub(crate) fn write_target(&self, host: &Path) -> Result<PathBuf> {
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
    pub fn write_atomic(&self, host: &Path, data: &[u8], mode: Option<u32>) -> Result<()> {
        self.write_atomic_owned(host, data, mode, None, None)
    }

    /// Remove the temporaries that dead writers left in `dir` ([`is_stale_tmp`]), the first
    /// time this process writes there. Best effort: a failure is ignored.
    fn sweep_stale_tmps(&self, dir: &Path) {
        {
            let mut swept = SWEPT.lock().unwrap_or_else(|p| p.into_inner());
            let key = self.canonical.join(dir.strip_prefix("/").unwrap_or(dir));
            if !swept.get_or_insert_with(Default::default).insert(key) {
                return;
            }
        }
        let Ok(entries) = self.read_dir(dir) else {
            return;
        };
        for e in entries {
            if let Some(name) = e.name.to_str()
                && e.kind == EntryKind::File
                && is_stale_tmp(name)
            {
                let _ = self.remove_file(&dir.join(name));
            }
        }
    }

    /// fsync a directory (best effort: some filesystems refuse).
    fn sync_dir(&self, dir: &Path) {
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
    pub fn sync_dir_checked(&self, dir: &Path) -> Result<()> {
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
    pub fn remove_file(&self, host: &Path) -> Result<bool> {
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
    pub fn remove_dir(&self, host: &Path) -> Result<bool> {
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
    pub fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.check_abs("rename", from)?;
        self.check_abs("rename", to)?;
        self.rename_raw(from, to)
            .map_err(|e| self.err("rename", from, e))
    }

    /// List a directory: entries (without `.` and `..`) sorted by name.
    ///
    /// # Errors
    /// Not found, not a directory, or read failure.
    pub fn read_dir(&self, host: &Path) -> Result<Vec<DirEntry>> {
        let dir = self.open_with("list", host, OpenFlags::O_RDONLY | OpenFlags::O_DIRECTORY)?;
        // Listing through /proc/self/fd keeps the confined directory handle.
        let proc = format!("/proc/self/fd/{}", dir.as_raw_fd());
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&proc).map_err(|e| self.err("list", host, e))? {
            let entry = entry.map_err(|e| self.err("list", host, e))?;
            let kind = entry
                .file_type()
                .map(EntryKind::of)
                .unwrap_or(EntryKind::Other);
            out.push(DirEntry {
                name: entry.file_name(),
                kind,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Set the permission bits of `host` (following symlinks).
    ///
    /// # Errors
    /// Not found or `fchmod` failure.
    pub fn set_mode(&self, host: &Path, mode: u32) -> Result<()> {
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
    pub fn symlink(&self, target: &Path, link: &Path) -> Result<()> {
        self.check_abs("create symlink", link)?;
        self.in_root(link, |r, p| {
            r.create(p, &InodeType::Symlink(target.to_path_buf()))
        })
        .map_err(|e| self.err("create symlink", link, pathrs_io(e)))
    }

    /// Read a symlink's target as stored.
    ///
    /// # Errors
    /// Not a symlink, or not found.
    pub fn read_link(&self, host: &Path) -> Result<PathBuf> {
        self.check_abs("read link", host)?;
        self.in_root(host, |r, p| r.readlink(p))
            .map_err(|e| self.err("read link", host, pathrs_io(e)))
    }

    /// Resolve `host` (following symlinks inside the root) to the host path it designates.
    /// `Ok(None)` when it does not exist.
    ///
    /// # Errors
    /// Resolution failures other than "not found".
    pub fn canonical(&self, host: &Path) -> Result<Option<PathBuf>> {
        match self.open_with("resolve", host, OpenFlags::O_PATH) {
            Ok(f) => Ok(self.host_path_of(&f)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    // ---- Appended for the host API (src/host/files/fs.rs, tuning.rs) ----

    /// Change the owner and/or group of `host` (following symlinks inside the root). `None`
    /// leaves that id unchanged.
    ///
    /// # Errors
    /// Not found, or the `chown` failure.
    pub fn set_owner(&self, host: &Path, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
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
    pub fn write_in_place(&self, host: &Path, data: &[u8]) -> Result<()> {
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
    pub fn write_atomic_owned(
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
    pub fn write_atomic_from(
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
    pub fn write_atomic_synced(
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

impl HostRoot {
    /// Fail when `parent` is on procfs or sysfs: no file can be created there, so an atomic
    /// replacement of `target` (a temporary beside it, then a rename) always fails, and the
    /// kernel's `ENOENT` for the temporary would name the wrong cause.
    fn check_replaceable(&self, parent: &Path, target: &Path) -> Result<()> {
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

/// The steps of an atomic replacement between its content and its rename, on the temporary
/// file `f`; shared by [`HostRoot::write_atomic_synced`] and
/// [`crate::host::root::run_dirs::RunDirs::write`]. In order: the owner `uid`/`gid` (when either is
/// given; a failure is an error only when `owner_required`, since keeping an old owner is best
/// effort for unprivileged agents in tests), the extended attributes of `old` (after `fchown`,
/// which clears `security.capability`, and before `chmod`, which keeps an ACL's mask in step
/// with the group bits), the permission bits `mode`, and `fsync`.
///
/// # Errors
/// The failed step's operation name (`chown`, `copy extended attributes of`, `write`) and
/// its error.
pub(crate) fn settle_replacement(
    f: &File,
    old: Option<&File>,
    uid: Option<u32>,
    gid: Option<u32>,
    owner_required: bool,
    mode: u32,
) -> std::result::Result<(), (&'static str, io::Error)> {
    if (uid.is_some() || gid.is_some())
        && let Err(e) = nix::unistd::fchown(f, uid.map(Into::into), gid.map(Into::into))
        && owner_required
    {
        return Err(("chown", io::Error::from(e)));
    }
    if let Some(old) = old {
        copy_xattrs(old, f).map_err(|e| ("copy extended attributes of", e))?;
    }
    f.set_permissions(Permissions::from_mode(mode))
        .map_err(|e| ("write", e))?;
    f.sync_all().map_err(|e| ("write", e))
}

/// Copy every extended attribute of `from` to `to` (both open files). Filesystems without
/// xattr support (`ENOTSUP`) are not an error.
pub(crate) fn copy_xattrs(from: &File, to: &File) -> io::Result<()> {
    let fd = from.as_raw_fd();
    // SAFETY: a null buffer with size 0 asks for the needed size.
    let size = unsafe { libc::flistxattr(fd, std::ptr::null_mut(), 0) };
    if size < 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::ENOTSUP) {
            Ok(())
        } else {
            Err(e)
        };
    }
    if size == 0 {
        return Ok(());
    }
    let mut names = vec![0u8; size as usize];
    // SAFETY: the buffer is `names.len()` bytes long.
    let size = unsafe { libc::flistxattr(fd, names.as_mut_ptr().cast(), names.len()) };
    if size < 0 {
        return Err(io::Error::last_os_error());
    }
    names.truncate(size as usize);
    for name in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let Ok(cname) = std::ffi::CString::new(name) else {
            continue;
        };
        // SAFETY: size query with a null buffer.
        let len = unsafe { libc::fgetxattr(fd, cname.as_ptr(), std::ptr::null_mut(), 0) };
        if len < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut value = vec![0u8; len as usize];
        // SAFETY: the buffer is `value.len()` bytes long.
        let len =
            unsafe { libc::fgetxattr(fd, cname.as_ptr(), value.as_mut_ptr().cast(), value.len()) };
        if len < 0 {
            return Err(io::Error::last_os_error());
        }
        value.truncate(len as usize);
        // SAFETY: name and value are valid for the given lengths.
        let r = unsafe {
            libc::fsetxattr(
                to.as_raw_fd(),
                cname.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ENOTSUP) {
                return Err(e);
            }
        }
    }
    Ok(())
}

impl HostRoot {
    /// Set the modification time of `host` (following symlinks); the access time is left as is.
    ///
    /// # Errors
    /// Not found or `utimensat` failure.
    pub fn set_mtime(&self, host: &Path, mtime: std::time::SystemTime) -> Result<()> {
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
    pub fn open_write(&self, host: &Path) -> Result<File> {
        self.open_with("open", host, OpenFlags::O_WRONLY)
    }
}

/// Lexically normalise a path to an absolute one (`.` dropped, `..` pops, never above `/`).
/// Used here only to follow a dangling symlink hop, whose result pathrs resolves again; never
/// a substitute for confined resolution.
pub fn normalize(p: &Path) -> PathBuf {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> (tempfile::TempDir, HostRoot) {
        let d = tempfile::tempdir().unwrap();
        let r = HostRoot::open(d.path()).unwrap();
        (d, r)
    }

    #[test]
    fn write_atomic_creates_parents_and_content() {
        let (d, r) = root();
        r.write_atomic(Path::new("/a/b/c.txt"), b"hello", None)
            .unwrap();
        assert_eq!(std::fs::read(d.path().join("a/b/c.txt")).unwrap(), b"hello");
        let m = std::fs::metadata(d.path().join("a/b/c.txt")).unwrap();
        assert_eq!(m.mode() & 0o777, 0o644);
        // no temp file left behind
        assert_eq!(std::fs::read_dir(d.path().join("a/b")).unwrap().count(), 1);
    }

    #[test]
    fn write_atomic_accepts_255_byte_names() {
        // regression: the temporary name used to embed the destination name and overflowed
        let (d, r) = root();
        let name = "f".repeat(255);
        r.write_atomic(&Path::new("/").join(&name), b"x", None)
            .unwrap();
        assert_eq!(std::fs::read(d.path().join(&name)).unwrap(), b"x");
    }

    #[test]
    fn write_atomic_keeps_existing_mode() {
        let (d, r) = root();
        std::fs::write(d.path().join("f"), "old").unwrap();
        std::fs::set_permissions(d.path().join("f"), Permissions::from_mode(0o600)).unwrap();
        r.write_atomic(Path::new("/f"), b"new", None).unwrap();
        let m = std::fs::metadata(d.path().join("f")).unwrap();
        assert_eq!(m.mode() & 0o777, 0o600);
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"new");
    }

    #[test]
    fn absolute_symlink_stays_inside_root() {
        let outside = tempfile::tempdir().unwrap();
        let (d, r) = root();
        let sentinel = outside.path().join("victim");
        std::os::unix::fs::symlink(&sentinel, d.path().join("link")).unwrap();
        r.write_atomic(Path::new("/link"), b"x", None).unwrap();
        assert!(!sentinel.exists(), "write escaped the root");
        // the link stays, its target was created inside the root
        assert!(
            std::fs::symlink_metadata(d.path().join("link"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        let inside = d.path().join(sentinel.strip_prefix("/").unwrap());
        assert_eq!(std::fs::read(inside).unwrap(), b"x");
    }

    #[test]
    fn dotdot_cannot_climb() {
        let (d, r) = root();
        r.write_atomic(Path::new("/../../../etc-escape-test"), b"x", None)
            .unwrap();
        assert!(d.path().join("etc-escape-test").exists());
        assert!(!Path::new("/etc-escape-test").exists());
    }

    #[test]
    fn relative_paths_are_refused() {
        let (_d, r) = root();
        let e = r.write_atomic(Path::new("rel/x"), b"x", None).unwrap_err();
        assert!(
            e.to_string().contains("paths must be absolute")
                || e.source.to_string().contains("absolute")
        );
    }

    #[test]
    fn create_new_is_exclusive() {
        let (_d, r) = root();
        r.create_new(Path::new("/logs/x.log"), 0o644).unwrap();
        let e = r.create_new(Path::new("/logs/x.log"), 0o644).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    }

    #[test]
    fn read_dir_sorted_and_remove() {
        let (_d, r) = root();
        r.write_atomic(Path::new("/d/b"), b"", None).unwrap();
        r.write_atomic(Path::new("/d/a"), b"", None).unwrap();
        let names: Vec<_> = r
            .read_dir(Path::new("/d"))
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, vec![OsString::from("a"), OsString::from("b")]);
        assert!(r.remove_file(Path::new("/d/a")).unwrap());
        assert!(!r.remove_file(Path::new("/d/a")).unwrap());
        assert_eq!(r.read_opt(Path::new("/d/a")).unwrap(), None);
    }
}
