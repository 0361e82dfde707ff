//! The host's mount namespace, opened confined to the root, for the `mount`/`umount`
//! commands of `mount::ensure` and `mount::remove`.
//!
//! In a cluster the agent runs in a pod with the host's `/` mounted at its root (propagation
//! `HostToContainer`) and `hostPID`: a `mount` run in the pod's own mount namespace, chrooted
//! or not, mounts in the pod only. So the command enters the mount namespace of the host's
//! init instead, as `nsenter -m -t 1` does: when `<root>/proc/1/ns/mnt` names a mount
//! namespace other than the agent's (their `st_dev`/`st_ino` differ, as `lsns` compares
//! them), [`host_mount_ns`] returns it open and the command runs after `setns` into it, not
//! chrooted (the namespace's `/` is the host's `/`, so `mount` reads the host's `/etc/fstab`).
//! When the file is absent (a test or `skyhook-run` root without `/proc`) or names the
//! agent's own namespace (the agent on the host), the command runs chrooted into the root as
//! every other command.
//!
//! Only the host's init is entered: besides naming another mount namespace, `<root>/proc/1`
//! must be the process whose root directory is the host root, its `<root>/proc/1/root`
//! (followed on procfs) the same directory (`st_dev`/`st_ino`) as the root mount. A
//! `/proc/1` of anything else (a fake root over another machine's or container's `/proc`,
//! a process chrooted into the root inside a namespace whose own `/` is another tree: the
//! namespace's `/` is checked too, from a thread that enters it, or no way to tell) is not
//! entered: the command runs chrooted into the root, so a mount
//! point is always resolved inside the root, never in a tree outside it.
//!
//! The file is opened confined to the root: its directory `<root>/proc/1/ns` through
//! [`HostRoot`], then `mnt` in it. On procfs (the real case) `mnt` is a magic link, which
//! confined resolution refuses to follow, so it is followed there only (procfs's namespace
//! links lead to nsfs and nowhere else); elsewhere (a bind mount of a namespace file) a
//! symlink is refused. What is opened must be a mount namespace (nsfs, `NS_GET_NSTYPE` is
//! `CLONE_NEWNS`).

use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::host::root::HostRoot;
use crate::host::root::error::{HostError, Result};

/// The mount namespace of the host's init (a host path).
pub const INIT_MOUNT_NS: &str = "/proc/1/ns/mnt";

/// The agent's own mount namespace: the calling thread's, which a spawned command inherits.
const OWN_MOUNT_NS: &str = "/proc/thread-self/ns/mnt";

/// `statfs(2)` magic numbers of procfs and nsfs.
const PROC_SUPER_MAGIC: i64 = 0x9fa0;
const NSFS_MAGIC: i64 = 0x6e73_6673;

/// `ioctl_ns(2)` `NS_GET_NSTYPE`: `_IO(0xb7, 0x3)`.
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

fn invalid(message: String) -> HostError {
    HostError::Invalid {
        what: "host mount namespace",
        message,
    }
}

/// The filesystem type (`f_type`) of an open descriptor.
fn fs_type(fd: &impl AsRawFd) -> std::io::Result<i64> {
    // SAFETY: fstatfs(2) fills the zeroed struct for a descriptor we hold.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // `f_type` is a `long` on some targets and narrower on others.
    #[allow(clippy::unnecessary_cast)]
    Ok(st.f_type as i64)
}

/// `(st_dev, st_ino)` of an open descriptor.
fn dev_ino(fd: &impl AsRawFd) -> std::io::Result<(u64, u64)> {
    // SAFETY: fstat(2) fills the zeroed struct for a descriptor we hold.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((st.st_dev, st.st_ino))
}

/// `openat(dir, name, flags | O_CLOEXEC)`.
fn open_at(dir: &impl AsRawFd, name: &CStr, flags: libc::c_int) -> std::io::Result<OwnedFd> {
    // SAFETY: openat(2) with a descriptor we hold and a NUL-terminated single component.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The directory of the host's init (a host path), whose `root` is checked.
const INIT_PROC: &str = "/proc/1";

/// The mount namespace of the host's init ([`INIT_MOUNT_NS`] under the root), open, when it
/// is not the agent's own and `<root>/proc/1` is the host's init (its root directory is the
/// root mount); `None` when the file is absent, names the agent's namespace, or belongs to
/// a process whose root is not the root mount.
///
/// # Errors
/// `<root>/proc/1/ns` not a directory; `mnt` a symlink outside procfs, not a namespace or
/// not a mount namespace; open or stat failures (each naming the path); the agent's own
/// `/proc/thread-self/ns/mnt` unreadable.
pub fn host_mount_ns(root: &HostRoot) -> Result<Option<OwnedFd>> {
    let dir_path = Path::new(INIT_MOUNT_NS).parent().unwrap_or(Path::new("/"));
    let dir = match root.open_read(dir_path) {
        Ok(d) => d,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let shown = root.display_path(Path::new(INIT_MOUNT_NS));
    let fail = |what: &str, e: std::io::Error| invalid(format!("{}: {what}: {e}", shown.display()));
    let meta = dir.metadata().map_err(|e| fail("stat", e))?;
    if !meta.is_dir() {
        return Err(invalid(format!(
            "{} is not a directory",
            root.display_path(dir_path).display()
        )));
    }
    // Follow the magic link only on procfs; elsewhere a symlink is refused (ELOOP).
    let mut flags = libc::O_RDONLY | libc::O_NONBLOCK;
    if fs_type(&dir).map_err(|e| fail("statfs", e))? != PROC_SUPER_MAGIC {
        flags |= libc::O_NOFOLLOW;
    }
    let ns = match open_at(&dir, c"mnt", flags) {
        Ok(fd) => fd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(fail("open", e)),
    };
    if fs_type(&ns).map_err(|e| fail("statfs", e))? != NSFS_MAGIC {
        return Err(invalid(format!(
            "{} is not a namespace file (nsfs)",
            shown.display()
        )));
    }
    // SAFETY: an ioctl without argument on a descriptor we hold.
    let kind = unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_NSTYPE as _) };
    if kind != libc::CLONE_NEWNS {
        return Err(invalid(format!(
            "{} is not a mount namespace",
            shown.display()
        )));
    }
    let theirs = dev_ino(&ns).map_err(|e| fail("stat", e))?;
    let own = std::fs::metadata(OWN_MOUNT_NS)
        .map_err(|e| invalid(format!("the agent's own {OWN_MOUNT_NS}: {e}")))?;
    if (own.dev(), own.ino()) == theirs {
        return Ok(None);
    }
    if !is_hosts_init(root) || !ns_root_is_root(&ns, root) {
        return Ok(None);
    }
    Ok(Some(ns))
}

/// True when the mount namespace `ns`'s own `/` (where a command that enters it resolves
/// paths: `setns` sets the caller's root to it) is the root mount (`st_dev`, `st_ino`).
/// `/proc/1/root` alone does not tell: a process chrooted into the root may live in a
/// namespace whose `/` is another tree. Seen from a thread of its own that enters the
/// namespace (`unshare(CLONE_FS)` first, so no other thread's root or cwd moves) and ends.
/// False when it cannot be told.
fn ns_root_is_root(ns: &OwnedFd, root: &HostRoot) -> bool {
    let Ok(Some(ours)) = root.metadata(Path::new("/")) else {
        return false;
    };
    let want = (ours.dev(), ours.ino());
    let fd = ns.as_raw_fd();
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: unshare(2) and setns(2) change only this thread's filesystem context
            // (after CLONE_FS it is its own); `fd` is held open by the caller.
            if unsafe { libc::unshare(libc::CLONE_FS) } != 0
                || unsafe { libc::setns(fd, libc::CLONE_NEWNS) } != 0
            {
                return false;
            }
            std::fs::metadata("/").is_ok_and(|m| (m.dev(), m.ino()) == want)
        })
        .join()
        .unwrap_or(false)
    })
}

/// True when `<root>/proc/1` is the host's init: its `root` (the magic link, followed on
/// procfs only) is the same directory (`st_dev`, `st_ino`) as the root mount. False when
/// it is another one, or cannot be opened or compared.
fn is_hosts_init(root: &HostRoot) -> bool {
    let Ok(proc1) = root.open_read(Path::new(INIT_PROC)) else {
        return false;
    };
    if !matches!(fs_type(&proc1), Ok(PROC_SUPER_MAGIC)) {
        return false;
    }
    let Ok(init_root) = open_at(&proc1, c"root", libc::O_PATH | libc::O_DIRECTORY) else {
        return false;
    };
    let Ok(Some(ours)) = root.metadata(Path::new("/")) else {
        return false;
    };
    dev_ino(&init_root).is_ok_and(|theirs| theirs == (ours.dev(), ours.ino()))
}
