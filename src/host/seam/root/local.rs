//! Agent-side files outside the host root: bounded reads of an open file, and opens that
//! follow no symlink (a package's files, `open_beneath`).

use super::entry::kind_name;
use super::host_root::pathrs_io;
use pathrs::Root;
use pathrs::flags::OpenFlags;
use std::fs::File;
use std::io::{self};
use std::path::Path;

/// Largest package file the agent reads whole (config.json, a `.rhai` step), in bytes
/// (16 MiB).
pub const MAX_PACKAGE_FILE_BYTES: u64 = 16 << 20;

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
/// `/proc/thread-self/fd`, the same inode) when it is a regular file. Nothing else is ever
/// opened for reading: opening a device has effects of its own (a watchdog starts counting,
/// a tape rewinds, a serial line's modem lines change), whatever is then read.
///
/// The reopen is one `openat` of `thread-self/fd/N` in pathrs' private procfs
/// (`private_procfs`); without one (an old kernel), pathrs' checked reopen, which verifies
/// the procfs it finds before each use (about 60 syscalls).
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
    // Any failure takes pathrs' path below, so errors read as they always did.
    if let Some(r) = reopen_in_private_procfs(&f) {
        return Ok(r);
    }
    pathrs::Handle::from_fd(std::os::fd::OwnedFd::from(f))
        .reopen(OpenFlags::O_RDONLY | OpenFlags::O_NONBLOCK | OpenFlags::O_NOCTTY)
        .map_err(pathrs_io)
}

/// `f` reopened `O_RDONLY | O_NONBLOCK | O_NOCTTY` by one `openat` of
/// `thread-self/fd/N` in [`private_procfs`]; `None` without one or when that open fails.
fn reopen_in_private_procfs(f: &File) -> Option<File> {
    use std::os::fd::AsRawFd;
    let proc = private_procfs()?;
    let magic = format!("thread-self/fd/{}", f.as_raw_fd());
    let flags = nix::fcntl::OFlag::O_RDONLY
        | nix::fcntl::OFlag::O_NONBLOCK
        | nix::fcntl::OFlag::O_NOCTTY
        | nix::fcntl::OFlag::O_CLOEXEC;
    nix::fcntl::openat(proc, magic.as_str(), flags, nix::sys::stat::Mode::empty())
        .ok()
        .map(File::from)
}

/// pathrs' cached procfs handle, duplicated once per process: a procfs of our own
/// (`fsopen`, `subset=pid`) that is mounted nowhere, so nothing can be mounted over a file
/// in it and `thread-self/fd/N` is the kernel's own link to our descriptor `N`. pathrs
/// caches a handle only when it is that kind ([`pathrs::procfs::ProcfsHandle::new`]: a
/// cached handle is borrowed, `into_owned_fd` is `None`); `None` here when it has none (an
/// old kernel, where it opens `/proc` and checks it at each use).
fn private_procfs() -> Option<std::os::fd::BorrowedFd<'static>> {
    use std::os::fd::{AsFd, OwnedFd};
    static PROCFS: std::sync::OnceLock<Option<OwnedFd>> = std::sync::OnceLock::new();
    PROCFS
        .get_or_init(|| {
            let h = pathrs::procfs::ProcfsHandle::new().ok()?;
            let fd = h.as_fd().try_clone_to_owned().ok()?;
            match h.into_owned_fd() {
                None => Some(fd),
                Some(_) => None,
            }
        })
        .as_ref()
        .map(|fd| fd.as_fd())
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
/// `HostRoot`, so the whole path stays inside the root).
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

    fn o_path(p: &Path) -> File {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH)
            .open(p)
            .unwrap()
    }

    /// The reopen goes through the private procfs (one `openat`), reaches the inode the
    /// handle holds whatever the name now leads to, and opens it for reading only.
    #[test]
    fn a_regular_file_is_reopened_by_its_descriptor_in_the_private_procfs() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::write(&a, "first").unwrap();
        std::fs::write(&b, "second").unwrap();
        let f = o_path(&a);
        let ino = f.metadata().unwrap().ino();
        std::fs::rename(&b, &a).unwrap(); // the name now leads to another file
        assert!(
            private_procfs().is_some(),
            "no private procfs on this kernel"
        );
        let r = reopen_in_private_procfs(&f).expect("the private procfs reopen");
        assert_eq!(r.metadata().unwrap().ino(), ino);
        let fl = nix::fcntl::fcntl(&r, nix::fcntl::FcntlArg::F_GETFL).unwrap();
        assert_eq!(fl & libc::O_ACCMODE, libc::O_RDONLY);
        assert_ne!(fl & libc::O_NONBLOCK, 0);
        assert_eq!(
            read_bounded(reopen_regular(f).unwrap(), 100).unwrap(),
            b"first"
        );
    }

    /// Still nothing but a regular file is opened: a FIFO's or a directory's handle is
    /// refused before any reopen.
    #[test]
    fn a_fifo_or_directory_handle_is_still_refused() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = reopen_regular(o_path(&fifo)).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file (a fifo)");
        let e = reopen_regular(o_path(d.path())).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::IsADirectory);
    }
}
