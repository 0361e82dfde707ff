//! Cross-process advisory locks on host paths, held across a read-modify-write.
//!
//! Two sessions (two agents of different packages, a `skyhook-run --apply` beside an agent)
//! editing the same host file with `fs::ensure_line`, `fs::ensure_block`, `fs::append`, ...
//! would otherwise lose updates: both read the old content, each adds its own line, and the
//! second atomic rename replaces the first. In apply mode every write of a file through the
//! host API ([`crate::host::files::fs`]) therefore reads the current content, compares and writes
//! while holding an exclusive `flock(2)` on a *sidecar* lock file:
//!
//! | lock file | for |
//! |---|---|
//! | `/var/lib/skyhook/.locks/<16 hex digits>.lock` | the host path whose canonical form (symlinks resolved inside the root; for a missing file, its parent's canonical form plus the name) hashes to those digits (64-bit FNV-1a of the path's bytes) |
//!
//! A flock on the edited file itself would not do: the atomic write replaces the file's inode
//! by a rename, so a writer that opened the old inode would hold a lock nobody else checks.
//! The sidecar file is never renamed or removed (removing it would let a new opener lock a
//! fresh inode while an old holder still has the unlinked one), so every writer of the path
//! locks the same inode. Distinct paths whose hashes collide merely serialize. The lock is
//! released when the [`PathLock`] is dropped, or by the kernel when the process dies, so a
//! SIGKILLed writer never leaves it held. The hash is fixed (not `std`'s `DefaultHasher`),
//! so agents of different versions agree on the file name.
//!
//! Plan and check mode take no lock (they write nothing and must not create the lock
//! directory). Instead, where the apply would take its first lock, they *plan* the lock
//! directory and its missing parents (0755) in the session's read overlay, without an
//! effect (`Overlay::plan_lock_dir`): on a root without `/var/lib` a later
//! `fs::mkdir("/var/lib/x")` then reports and returns the same in plan and apply. Reports
//! show the lock directory in neither mode (it is the agent's bookkeeping). A call that
//! changes nothing takes no lock (and plans no directory). The directory name starts with
//! `.`, so it can never be a Skyhook's state directory (`/var/lib/skyhook/<skyhook name>`).
//!
//! A lock file lives only while it is held: the holder unlinks it (still holding the lock)
//! when it releases it, so no `.lock` file is left behind after a run. Every locker
//! therefore checks, once `flock` returned, that the path still names the inode it locked
//! (a holder may have unlinked it meanwhile, and a new file may have been made there), and
//! retries when not; the inode it holds is then the one every other locker finds. Agents
//! of an older version, which kept lock files and did not re-check, may run beside this one
//! during an upgrade: an older agent blocked on a lock file this one unlinks then holds a
//! lock nobody else checks, so the two could edit one file at once for that moment (the
//! stamp check of the session's batch, [`crate::host::effects::session`], still refuses a
//! write over a change it did not see).

use std::fs::File;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::host::root::{HostRoot, RootError};

/// The directory of the lock files (a host path).
pub const DIR: &str = "/var/lib/skyhook/.locks";

/// 64-bit FNV-1a of `bytes` (stable across builds and versions).
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The lock file's host path for the canonical host path `key`
/// (`/var/lib/skyhook/.locks/<hash>.lock`).
pub fn lock_file(key: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    Path::new(DIR).join(format!("{:016x}.lock", fnv1a64(key.as_os_str().as_bytes())))
}

/// A held path lock; dropping it unlinks its lock file and unlocks.
#[derive(Debug)]
pub struct PathLock {
    /// The root (a duplicate handle) and the lock file's host path, to unlink on drop.
    unlink: Option<(HostRoot, PathBuf)>,
    _lock: Flock<File>,
}

impl Drop for PathLock {
    fn drop(&mut self) {
        // Still holding the lock: no one else holds this inode, and whoever opened it
        // meanwhile sees it unlinked after its `flock` and retries (module docs).
        if let Some((root, path)) = self.unlink.take() {
            let _ = root.remove_file(&path);
        }
    }
}

/// Open the lock file, creating it (mode 0600, and its directory 0755) when missing.
fn open(root: &HostRoot, path: &Path) -> Result<File, RootError> {
    // Bounded: each failed round means the file vanished or appeared between two calls,
    // which only a foreign process removing lock files can cause.
    let mut last = None;
    for _ in 0..16 {
        match root.create_new(path, 0o600) {
            Ok(f) => return Ok(f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        match root.open_read(path) {
            Ok(f) => return Ok(f),
            Err(e) if e.is_not_found() => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| RootError {
        op: "open lock file",
        path: path.to_path_buf(),
        root: root.mount().to_path_buf(),
        source: std::io::ErrorKind::NotFound.into(),
    }))
}

/// Take the exclusive lock of the canonical host path `key`, blocking until it is free
/// (`flock(LOCK_EX)`, retried on `EINTR`). Holders keep it only for one read-compare-write,
/// so the wait is short.
///
/// Side effects: creates [`DIR`] and the lock file when missing; the lock file is unlinked
/// when the returned lock is dropped.
///
/// # Errors
/// Creating or opening the lock file, or `flock` failing (the error names the lock file).
pub(in crate::host::seam) fn lock(root: &HostRoot, key: &Path) -> Result<PathLock, RootError> {
    let path = lock_file(key);
    // Bounded: each round lost means another holder unlinked the file we waited on.
    for _ in 0..64 {
        let file = open(root, &path)?;
        let held = flock(root, file, &path)?;
        if root.names(&path, &held).unwrap_or(false) {
            return Ok(PathLock {
                unlink: root.try_clone().ok().map(|r| (r, path)),
                _lock: held,
            });
        }
    }
    Err(RootError {
        op: "lock",
        path,
        root: root.mount().to_path_buf(),
        source: std::io::Error::other("the lock file was replaced 64 times in a row"),
    })
}

/// Take the exclusive lock of the host root's own directory (`flock(LOCK_EX)` on the
/// root's `/`, blocking): the lock of work that must not interleave with the same work of
/// another session of any agent on the host (`fs::extract`, which checks an archive
/// against the destination as it is and must not see another extract's entries appear
/// before it writes). Creates nothing and unlinks nothing. Take it before any path lock
/// (its holders take path locks while holding it).
///
/// # Errors
/// Opening the root or `flock` failing.
pub(in crate::host::seam) fn lock_root(root: &HostRoot) -> Result<PathLock, RootError> {
    let dir = Path::new("/");
    let file = root.open_with(
        "lock",
        dir,
        pathrs::flags::OpenFlags::O_RDONLY | pathrs::flags::OpenFlags::O_DIRECTORY,
    )?;
    Ok(PathLock {
        unlink: None,
        _lock: flock(root, file, dir)?,
    })
}

/// `flock(file, LOCK_EX)`, retried on `EINTR`; errors name `path`.
fn flock(root: &HostRoot, mut file: File, path: &Path) -> Result<Flock<File>, RootError> {
    loop {
        match Flock::lock(file, FlockArg::LockExclusive) {
            Ok(l) => return Ok(l),
            Err((f, Errno::EINTR)) => file = f,
            Err((_, errno)) => {
                return Err(RootError {
                    op: "lock",
                    path: path.to_path_buf(),
                    root: root.mount().to_path_buf(),
                    source: std::io::Error::from_raw_os_error(errno as i32),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_file_names_are_stable_and_exclusive() {
        // Fixed value: another agent version must compute the same name.
        assert_eq!(
            lock_file(Path::new("/etc/fstab")),
            Path::new(DIR).join(format!("{:016x}.lock", fnv1a64(b"/etc/fstab")))
        );
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(
            lock_file(Path::new("/etc/a")),
            lock_file(Path::new("/etc/b"))
        );

        let d = tempfile::tempdir().unwrap();
        let r = HostRoot::open(d.path()).unwrap();
        let held = lock(&r, Path::new("/etc/a")).unwrap();
        let f = File::open(
            d.path()
                .join(lock_file(Path::new("/etc/a")).strip_prefix("/").unwrap()),
        )
        .unwrap();
        // Another open file description is excluded while held, free after the drop.
        let f = match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
            Err((f, Errno::EWOULDBLOCK)) => f,
            other => panic!("not excluded: {other:?}"),
        };
        drop(held);
        assert!(Flock::lock(f, FlockArg::LockExclusiveNonblock).is_ok());
        // Another path is independent.
        let _a = lock(&r, Path::new("/etc/a")).unwrap();
        let _b = lock(&r, Path::new("/etc/b")).unwrap();
    }
}
