//! The host root operations the undo journal needs beyond the common ones
//! ([`crate::host::effects::journal`]): a rename that never replaces, FIFO and device
//! nodes, and a log created unnamed (`O_TMPFILE`) and linked once locked. Each resolves
//! its paths through the root's pathrs handle (`openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS`, or its emulation), never through path text, and the final
//! component is created or renamed relative to a directory handle so opened.

use std::ffi::{CString, OsStr};
use std::fs::{File, Permissions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use pathrs::InodeType;
use pathrs::flags::{OpenFlags, RenameFlags};

use super::{HostRoot, Result, pathrs_io};

/// The kind of a special file the journal can make again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Node {
    /// A named pipe (`mkfifo`).
    Fifo,
    /// A character device (`mknod S_IFCHR`).
    Char,
    /// A block device (`mknod S_IFBLK`).
    Block,
}

impl HostRoot {
    /// Rename `from` to `to` (host paths) unless `to` exists (`RENAME_NOREPLACE`).
    ///
    /// # Errors
    /// `AlreadyExists` when `to` is taken, `CrossesDevices` (`EXDEV`) across filesystems,
    /// any other rename failure.
    pub(in crate::host::seam) fn rename_noreplace(&self, from: &Path, to: &Path) -> Result<()> {
        self.check_abs("rename", from)?;
        self.check_abs("rename", to)?;
        self.root
            .rename(from, to, RenameFlags::RENAME_NOREPLACE)
            .map_err(|e| self.err("rename", from, pathrs_io(e)))
    }

    /// Make the special file `host` (`kind`, permission bits `mode`, device number `rdev`
    /// for a device); fails when the name is taken.
    ///
    /// # Errors
    /// The parent missing, the name taken, `mknod` failing.
    pub(in crate::host::seam) fn make_node(
        &self,
        host: &Path,
        kind: Node,
        mode: u32,
        rdev: u64,
    ) -> Result<()> {
        self.check_abs("mknod", host)?;
        let perm = Permissions::from_mode(mode & 0o7777);
        let node = match kind {
            Node::Fifo => InodeType::Fifo(perm),
            Node::Char => InodeType::CharacterDevice(perm, rdev as _),
            Node::Block => InodeType::BlockDevice(perm, rdev as _),
        };
        self.root
            .create(host, &node)
            .map_err(|e| self.err("mknod", host, pathrs_io(e)))
    }

    /// An unnamed regular file (`O_TMPFILE`, mode `mode`, write-only) in the directory
    /// `dir`, and that directory's handle, for [`HostRoot::link_unnamed`].
    ///
    /// # Errors
    /// `dir` missing or not a directory; the filesystem without `O_TMPFILE`.
    pub(in crate::host::seam) fn create_unnamed(
        &self,
        dir: &Path,
        mode: u32,
    ) -> Result<(File, File)> {
        let d = self.open_with("create", dir, OpenFlags::O_PATH | OpenFlags::O_DIRECTORY)?;
        // SAFETY: a NUL-terminated literal, a directory descriptor we own.
        let fd = unsafe {
            libc::openat(
                d.as_raw_fd(),
                c".".as_ptr(),
                libc::O_TMPFILE | libc::O_WRONLY | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(self.err("create", dir, io::Error::last_os_error()));
        }
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        Ok((unsafe { File::from_raw_fd(fd) }, d))
    }

    /// Give the unnamed file `f` the name `name` in the directory `dir` (the handle
    /// [`HostRoot::create_unnamed`] returned; `host_dir` names it in errors).
    ///
    /// # Errors
    /// The name taken, `linkat` failing.
    pub(in crate::host::seam) fn link_unnamed(
        &self,
        f: &File,
        dir: &File,
        host_dir: &Path,
        name: &OsStr,
    ) -> Result<()> {
        let err = |e| self.err("link", &host_dir.join(name), e);
        let cname = CString::new(name.as_bytes())
            .map_err(|e| err(io::Error::new(io::ErrorKind::InvalidInput, e)))?;
        // SAFETY: descriptors we own, a NUL-terminated name; AT_EMPTY_PATH links `f` itself.
        let r = unsafe {
            libc::linkat(
                f.as_raw_fd(),
                c"".as_ptr(),
                dir.as_raw_fd(),
                cname.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        };
        if r < 0 {
            return Err(err(io::Error::last_os_error()));
        }
        Ok(())
    }
}
