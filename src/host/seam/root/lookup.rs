//! The read side of [`HostRoot`]: metadata, opens for reading, whole-file reads, listings,
//! symlink targets and resolution. Nothing here changes the host.

use super::entry::{DirEntry, EntryKind, kind_name};
use super::host_root::split;
use super::host_root::{HostRoot, openat2_in_root, pathrs_io};
use super::local::read_bounded;
use super::root_error::Result;
use pathrs::flags::OpenFlags;
use std::fs::{File, Metadata};
use std::io::{self};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

impl HostRoot {
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

    /// Whether `host` itself (a final symlink not followed) names the open file `f` now:
    /// the same device and inode. A lock taken on a file unlinked or replaced since it was
    /// opened is a lock nobody else checks, so lockers check this after locking.
    ///
    /// # Errors
    /// As [`HostRoot::symlink_metadata`]; `fstat` of `f`.
    pub fn names(&self, host: &Path, f: &File) -> Result<bool> {
        use std::os::unix::fs::MetadataExt;
        let held = f.metadata().map_err(|e| self.err("stat", host, e))?;
        Ok(self
            .symlink_metadata(host)?
            .is_some_and(|now| now.ino() == held.ino() && now.dev() == held.dev()))
    }

    /// True when the kernel resolved `host` meeting no symlink: one `openat2(O_PATH)` with
    /// `RESOLVE_NO_SYMLINKS` that opened it, or failed with `ENOENT` (the components before
    /// the missing one were no symlinks; those after it do not exist). False when it cannot
    /// tell: a symlink on the way (`ELOOP`), any other failure, no `openat2`. For callers
    /// that walk the ancestors only when this is false.
    pub fn no_symlink_on_the_way(&self, host: &Path) -> bool {
        if !host.is_absolute() {
            return false;
        }
        let opened = self.in_root(host, |r, p| {
            openat2_in_root(r, p, OpenFlags::O_PATH, libc::RESOLVE_NO_SYMLINKS)
        });
        match opened {
            Some(Ok(_)) => true,
            Some(Err(e)) => e.raw_os_error() == Some(libc::ENOENT),
            None => false,
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

    /// [`HostRoot::canonical`] and [`HostRoot::metadata`] of `host` from one resolution (one
    /// `openat2`, then `fstat` and the descriptor's path): `Ok(None)` when it does not exist,
    /// else its canonical host path (`None` as [`HostRoot::canonical`] gives it) and its
    /// metadata, symlinks followed.
    ///
    /// # Errors
    /// Resolution or `fstat` failures other than "not found".
    pub fn canonical_metadata(&self, host: &Path) -> Result<Option<(Option<PathBuf>, Metadata)>> {
        match self.open_with("resolve", host, OpenFlags::O_PATH) {
            Ok(f) => {
                let m = f.metadata().map_err(|e| self.err("stat", host, e))?;
                Ok(Some((self.host_path_of(&f), m)))
            }
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }
}
