//! The per-package lock `<state root>/locks/<pkg>.lock` (a Rust addition; Python has none).
//!
//! Two agent pods of the same package on one node (a retried pod while the old one is still
//! terminating, or an interrupt pod beside a stage pod) would otherwise race on flags and
//! history. The lock is an advisory `flock(2)` `LOCK_EX` on the lock file, held for the
//! lifetime of [`PackageLock`] and released when it is dropped (or when the process dies, as
//! the kernel drops `flock` locks with the last descriptor). The lock file itself is left in
//! place and is empty.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::StateError;
use crate::host::root::HostRoot;

/// A held package lock; dropping it unlocks.
#[derive(Debug)]
pub struct PackageLock {
    _lock: Flock<File>,
    path: PathBuf,
}

/// The locks this process holds (host path, descriptor), for [`held_fd`].
static HELD: Mutex<Vec<(PathBuf, RawFd)>> = Mutex::new(Vec::new());

fn held() -> std::sync::MutexGuard<'static, Vec<(PathBuf, RawFd)>> {
    match HELD.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl PackageLock {
    /// The lock file's host path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The descriptor holding the `flock`. A process that inherits it keeps the package
    /// locked until it exits (the kernel drops the lock with the last descriptor of the open
    /// file), even if this process died: the agent passes it to step processes.
    pub fn as_raw_fd(&self) -> RawFd {
        self._lock.as_raw_fd()
    }

    fn new(lock: Flock<File>, path: PathBuf) -> PackageLock {
        held().push((path.clone(), lock.as_raw_fd()));
        PackageLock { _lock: lock, path }
    }
}

impl AsRawFd for PackageLock {
    fn as_raw_fd(&self) -> RawFd {
        PackageLock::as_raw_fd(self)
    }
}

impl Drop for PackageLock {
    fn drop(&mut self) {
        let fd = self._lock.as_raw_fd();
        held().retain(|(p, f)| !(*f == fd && *p == self.path));
    }
}

/// The descriptor of the lock on `path` (a [`lock_path`]) while this process holds it
/// ([`PackageLock::as_raw_fd`]), for code that cannot be handed the [`PackageLock`];
/// `None` when it is not held here.
pub fn held_fd(path: &Path) -> Option<RawFd> {
    held().iter().find(|(p, _)| p == path).map(|(_, fd)| *fd)
}

/// `<state root>/locks/<pkg>.lock`.
pub fn lock_path(state_root: &Path, pkg: &str) -> PathBuf {
    state_root.join("locks").join(format!("{pkg}.lock"))
}

/// Open (creating it and its directory if needed, mode 0644) the lock file.
fn open_lock_file(root: &HostRoot, path: &Path) -> Result<File, StateError> {
    loop {
        match root.create_new(path, 0o644) {
            Ok(f) => return Ok(f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e.into()),
        }
        match root.open_read(path) {
            Ok(f) => return Ok(f),
            // removed between the two calls: try creating again
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
}

fn lock_with(
    root: &HostRoot,
    state_root: &Path,
    pkg: &str,
    arg: FlockArg,
) -> Result<Option<PackageLock>, StateError> {
    let path = lock_path(state_root, pkg);
    let mut file = open_lock_file(root, &path)?;
    loop {
        match Flock::lock(file, arg) {
            Ok(lock) => return Ok(Some(PackageLock::new(lock, path))),
            Err((f, Errno::EINTR)) => file = f,
            Err((_, Errno::EWOULDBLOCK)) if arg == FlockArg::LockExclusiveNonblock => {
                return Ok(None);
            }
            Err((_, errno)) => {
                return Err(StateError::Lock {
                    path,
                    source: errno,
                });
            }
        }
    }
}

/// Take the package lock, blocking until it is free (`flock(LOCK_EX)`, retried on `EINTR`).
///
/// # Errors
/// Creating or opening the lock file, or `flock` failing.
pub fn lock_package(
    root: &HostRoot,
    state_root: &Path,
    pkg: &str,
) -> Result<PackageLock, StateError> {
    let path = lock_path(state_root, pkg);
    lock_with(root, state_root, pkg, FlockArg::LockExclusive)?.ok_or(StateError::Lock {
        path,
        source: Errno::EWOULDBLOCK,
    })
}

/// Take the package lock if it is free (`LOCK_EX | LOCK_NB`); `Ok(None)` when another holder
/// has it.
///
/// # Errors
/// Creating or opening the lock file, or `flock` failing otherwise.
pub fn try_lock_package(
    root: &HostRoot,
    state_root: &Path,
    pkg: &str,
) -> Result<Option<PackageLock>, StateError> {
    lock_with(root, state_root, pkg, FlockArg::LockExclusiveNonblock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_excluded_until_drop() {
        let d = tempfile::tempdir().unwrap();
        let r = HostRoot::open(d.path()).unwrap();
        let st = Path::new("/st");
        let held = lock_package(&r, st, "demo").unwrap();
        assert_eq!(held.path(), Path::new("/st/locks/demo.lock"));
        assert!(d.path().join("st/locks/demo.lock").is_file());
        assert_eq!(held_fd(held.path()), Some(held.as_raw_fd()));
        // flock locks belong to the open file description: a second open is excluded
        assert!(try_lock_package(&r, st, "demo").unwrap().is_none());
        // another package is independent
        assert!(try_lock_package(&r, st, "other").unwrap().is_some());

        let mount = d.path();
        let waiter = std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::channel();
            let h = s.spawn(move || {
                let root = HostRoot::open(mount).unwrap();
                tx.send(()).unwrap();
                lock_package(&root, st, "demo").map(|l| l.path().to_path_buf())
            });
            rx.recv().unwrap();
            drop(held);
            h.join().unwrap()
        });
        assert_eq!(waiter.unwrap(), Path::new("/st/locks/demo.lock"));
        assert_eq!(held_fd(Path::new("/st/locks/demo.lock")), None, "dropped");
        assert!(try_lock_package(&r, st, "demo").unwrap().is_some());
    }
}
