//! The steps of an atomic replacement between its content and its rename (owner, extended
//! attributes, mode, fsync), shared by [`HostRoot::write_atomic_synced`] and the run
//! directories.

use std::fs::{File, Permissions};
use std::io::{self};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;

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
