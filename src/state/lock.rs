//! The per-package lock `<state root>/locks/<pkg>.lock` (a Rust addition; Python has none).
//!
//! Two agent pods of the same package on one node (a retried pod while the old one is still
//! terminating, or an interrupt pod beside a stage pod) would otherwise race on flags and
//! history. The lock is an advisory `flock(2)` `LOCK_EX` on the lock file, held for the
//! lifetime of [`PackageLock`] and released when it is dropped (or when the process dies, as
//! the kernel drops `flock` locks with the last descriptor). The lock file itself is left in
//! place and is empty.

use std::fs::File;
use std::path::{Path, PathBuf};

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

impl std::os::fd::AsRawFd for PackageLock {
    /// The locked descriptor. A process that inherits it (a step's processes do) keeps the
    /// lock held until it exits, so a rerun waits for the last of them.
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsFd;
        self._lock.as_fd().as_raw_fd()
    }
}

impl PackageLock {
    /// The lock file's host path.
    pub fn path(&self) -> &Path {
        &self.path
    }
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
            Ok(lock) => return Ok(Some(PackageLock { _lock: lock, path })),
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

/// Take the package lock, waiting while another holder has it, unless `cancel` is stopped
/// first (the agent's SIGTERM stops it). `Ok(None)`: stopped while waiting (nothing is
/// held then). A free lock is taken at once, even when `cancel` is already stopped (the
/// caller's loop starts no step then); `on_wait(lock file host path)` is called once, before
/// waiting, only when the lock is busy.
///
/// How: `flock(2)` has no descriptor to poll for a release, so the blocking
/// `flock(LOCK_EX)` (retried on `EINTR`) runs on a helper thread, on its own open file
/// description, while this future waits for either its result or [`Cancel::stopped`]. After
/// a cancel the thread stays blocked until the holder releases; if it then acquires the
/// lock, nobody receives it and it is dropped at once, which releases it. The thread owns
/// nothing else, and its descriptor is close-on-exec, so no step process inherits it.
///
/// # Errors
/// Creating or opening the lock file, `flock` failing, or the helper thread not starting.
///
/// [`Cancel::stopped`]: crate::process::Cancel::stopped
pub async fn lock_package_cancellable(
    root: &HostRoot,
    state_root: &Path,
    pkg: &str,
    cancel: &crate::process::Cancel,
    on_wait: impl FnOnce(&Path),
) -> Result<Option<PackageLock>, StateError> {
    if let Some(held) = try_lock_package(root, state_root, pkg)? {
        return Ok(Some(held));
    }
    let path = lock_path(state_root, pkg);
    on_wait(&path);
    let file = open_lock_file(root, &path)?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("skyhook-lock-wait".into())
        .spawn(move || {
            let mut file = file;
            let result = loop {
                match Flock::lock(file, FlockArg::LockExclusive) {
                    Ok(lock) => break Ok(lock),
                    Err((f, Errno::EINTR)) => file = f,
                    Err((_, errno)) => break Err(errno),
                }
            };
            // A receiver gone (cancelled) drops the lock here, releasing it.
            let _ = tx.send(result);
        })
        .map_err(|e| StateError::Lock {
            path: path.clone(),
            source: e.raw_os_error().map_or(Errno::EAGAIN, Errno::from_raw),
        })?;
    tokio::select! {
        biased;
        r = rx => match r {
            Ok(Ok(lock)) => Ok(Some(PackageLock { _lock: lock, path })),
            Ok(Err(errno)) => Err(StateError::Lock { path, source: errno }),
            // The thread ended without sending: it panicked.
            Err(_) => Err(StateError::Lock { path, source: Errno::EIO }),
        },
        () = cancel.stopped() => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancellable_wait_ends_on_stop_and_a_late_acquisition_is_released() {
        use crate::process::{Cancel, CancelReason};
        let d = tempfile::tempdir().unwrap();
        let r = HostRoot::open(d.path()).unwrap();
        let st = Path::new("/st");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // Free: taken at once, no wait reported, even when already stopped.
        let stopped = Cancel::new();
        stopped.stop(CancelReason::Signal("SIGTERM"));
        let mut waited = None;
        let free = rt
            .block_on(lock_package_cancellable(&r, st, "demo", &stopped, |p| {
                waited = Some(p.to_path_buf())
            }))
            .unwrap();
        assert!(free.is_some() && waited.is_none());

        // Busy: the wait is reported, and a stop ends it with nothing held.
        let cancel = Cancel::new();
        let stopper = cancel.clone();
        let got = rt
            .block_on(async {
                lock_package_cancellable(&r, st, "demo", &cancel, |p| {
                    waited = Some(p.to_path_buf());
                    stopper.stop(CancelReason::Signal("SIGTERM"));
                })
                .await
            })
            .unwrap();
        assert!(got.is_none());
        assert_eq!(waited.as_deref(), Some(Path::new("/st/locks/demo.lock")));
        // The helper thread acquires the lock once it is released, and drops it: a bounded
        // number of blocking takes, each of which succeeds only when nobody holds it.
        drop(free);
        let mut taken = None;
        for _ in 0..1000 {
            if let Some(l) = try_lock_package(&r, st, "demo").unwrap() {
                taken = Some(l);
                break;
            }
            // The helper holds it for an instant between acquiring and dropping.
            std::thread::yield_now();
        }
        let taken = taken.expect("the abandoned waiter kept the lock");
        drop(taken);

        // Busy, then released while waiting: acquired.
        let held = lock_package(&r, st, "demo").unwrap();
        let cancel = Cancel::new();
        let got = rt.block_on(async {
            let wait = lock_package_cancellable(&r, st, "demo", &cancel, |_| {});
            let release = async {
                tokio::task::yield_now().await;
                drop(held);
            };
            let (got, ()) = tokio::join!(wait, release);
            got
        });
        assert!(got.unwrap().is_some());
    }

    #[test]
    fn second_lock_excluded_until_drop() {
        let d = tempfile::tempdir().unwrap();
        let r = HostRoot::open(d.path()).unwrap();
        let st = Path::new("/st");
        let held = lock_package(&r, st, "demo").unwrap();
        assert_eq!(held.path(), Path::new("/st/locks/demo.lock"));
        assert!(d.path().join("st/locks/demo.lock").is_file());
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
        assert!(try_lock_package(&r, st, "demo").unwrap().is_some());
    }
}
