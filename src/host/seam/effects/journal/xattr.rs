//! Extended attributes of a journaled file: read, listed and set again by the undo.

use std::fs::File;
use std::os::fd::AsRawFd;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// An extended attribute: its name and its value in base64.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Xattr {
    pub(super) name: String,
    pub(super) value: String,
}

/// The extended attributes of an open file (none where the filesystem has none).
pub(super) fn read_xattrs(f: &File) -> std::io::Result<Vec<Xattr>> {
    let fd = f.as_raw_fd();
    let mut out = Vec::new();
    for name in list_xattrs(fd)? {
        let Ok(cname) = std::ffi::CString::new(name.clone()) else {
            continue;
        };
        // SAFETY: size query with a null buffer.
        let len = unsafe { libc::fgetxattr(fd, cname.as_ptr(), std::ptr::null_mut(), 0) };
        if len < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut value = vec![0u8; len as usize];
        // SAFETY: the buffer is `value.len()` bytes long.
        let len =
            unsafe { libc::fgetxattr(fd, cname.as_ptr(), value.as_mut_ptr().cast(), value.len()) };
        if len < 0 {
            return Err(std::io::Error::last_os_error());
        }
        value.truncate(len as usize);
        out.push(Xattr {
            name: String::from_utf8_lossy(&name).into_owned(),
            value: base64::engine::general_purpose::STANDARD.encode(&value),
        });
    }
    Ok(out)
}

pub(super) fn list_xattrs(fd: std::os::fd::RawFd) -> std::io::Result<Vec<Vec<u8>>> {
    // SAFETY: a null buffer with size 0 asks for the needed size.
    let size = unsafe { libc::flistxattr(fd, std::ptr::null_mut(), 0) };
    if size < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOTSUP) => Ok(Vec::new()),
            _ => Err(e),
        };
    }
    let mut names = vec![0u8; size as usize];
    // SAFETY: the buffer is `names.len()` bytes long.
    let size = unsafe { libc::flistxattr(fd, names.as_mut_ptr().cast(), names.len()) };
    if size < 0 {
        return Err(std::io::Error::last_os_error());
    }
    names.truncate(size as usize);
    Ok(names
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

/// Make `f`'s extended attributes exactly `want`: others removed, these set.
pub(super) fn set_xattrs(f: &File, want: &[Xattr]) -> std::io::Result<()> {
    let fd = f.as_raw_fd();
    for name in list_xattrs(fd)? {
        if want.iter().any(|x| x.name.as_bytes() == name) {
            continue;
        }
        let Ok(cname) = std::ffi::CString::new(name) else {
            continue;
        };
        // SAFETY: a valid NUL-terminated name on a descriptor we own.
        if unsafe { libc::fremovexattr(fd, cname.as_ptr()) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    for x in want {
        let Ok(cname) = std::ffi::CString::new(x.name.as_bytes()) else {
            continue;
        };
        let value = base64::engine::general_purpose::STANDARD
            .decode(&x.value)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        // SAFETY: name and value are valid for the given lengths.
        let r =
            unsafe { libc::fsetxattr(fd, cname.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ENOTSUP) {
                return Err(e);
            }
        }
    }
    Ok(())
}
