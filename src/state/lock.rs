//! The per-package lock `<state root>/locks/<pkg>.lock` (a Rust addition; Python has none).
//!
//! Two agent pods of the same package on one node (a retried pod while the old one is still
//! terminating, or an interrupt pod beside a stage pod) would otherwise race on flags and
//! history. The lock is an advisory `flock(2)` `LOCK_EX` on the lock file, held for the
//! lifetime of [`PackageLock`] and released when it is dropped (or when the process dies, as
//! the kernel drops `flock` locks with the last descriptor). The lock file itself is left in
//! place and is empty.
//!
//! A `flock` belongs to an inode, not to the path: a lock file removed or replaced while an
//! agent waits on it would give that agent a lock on an inode nobody else opens. So after
//! every acquisition the locked descriptor is compared with the file now at the path (device
//! and inode); a mismatch drops the lock and starts again, at most `MAX_LOCK_ATTEMPTS`
//! times.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::StateError;
use crate::host::root::{AgentFiles, HostRoot};

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

/// Open (creating it and its directory if needed, mode 0644) the lock file. The open comes
/// first: the file is there on every run but a node's first.
fn open_lock_file(root: &HostRoot, path: &Path) -> Result<File, StateError> {
    loop {
        match root.open_read(path) {
            Ok(f) => return Ok(f),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
        match AgentFiles::new(root).create_new(path, 0o644) {
            Ok(f) => return Ok(f),
            // created between the two calls: open it again
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Acquisitions tried before [`StateError::LockReplaced`]: each retry means somebody removed
/// or replaced the lock file between our open and our `flock`, which a sane host does rarely.
const MAX_LOCK_ATTEMPTS: u32 = 64;

/// What one `flock` on an opened lock file gave.
enum Locked {
    /// Held, and the descriptor is the file at the path.
    Held(Flock<File>),
    /// Held, but the file at the path is another one (or none): the lock protects nothing,
    /// and dropping it releases it.
    Stale,
    /// `LOCK_NB` and another holder has it.
    Busy,
}

/// True when `locked` is the file now at `path` (same device and inode, `fstat` vs `stat`).
/// A lock file removed (a cleanup) or replaced after we opened it still locks, but only its
/// old inode: another agent opening the path gets a different file and a lock of its own.
fn still_at_path(root: &HostRoot, path: &Path, locked: &File) -> Result<bool, StateError> {
    use std::os::unix::fs::MetadataExt;
    let ours = locked.metadata().map_err(|e| StateError::Lock {
        path: path.to_path_buf(),
        source: e.raw_os_error().map_or(Errno::EIO, Errno::from_raw),
    })?;
    Ok(root
        .metadata(path)?
        .is_some_and(|now| now.dev() == ours.dev() && now.ino() == ours.ino()))
}

/// `flock(arg)` on an opened lock file (retried on `EINTR`), then check it is still the file
/// at `path`.
fn lock_opened(
    root: &HostRoot,
    path: &Path,
    mut file: File,
    arg: FlockArg,
) -> Result<Locked, StateError> {
    loop {
        match Flock::lock(file, arg) {
            Ok(lock) => {
                return Ok(if still_at_path(root, path, &lock)? {
                    Locked::Held(lock)
                } else {
                    Locked::Stale
                });
            }
            Err((f, Errno::EINTR)) => file = f,
            Err((_, Errno::EWOULDBLOCK)) if arg == FlockArg::LockExclusiveNonblock => {
                return Ok(Locked::Busy);
            }
            Err((_, errno)) => {
                return Err(StateError::Lock {
                    path: path.to_path_buf(),
                    source: errno,
                });
            }
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
    for _ in 0..MAX_LOCK_ATTEMPTS {
        let file = open_lock_file(root, &path)?;
        match lock_opened(root, &path, file, arg)? {
            Locked::Held(lock) => return Ok(Some(PackageLock { _lock: lock, path })),
            Locked::Busy => return Ok(None),
            Locked::Stale => {}
        }
    }
    Err(StateError::LockReplaced {
        path,
        attempts: MAX_LOCK_ATTEMPTS,
    })
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
    let path = lock_path(state_root, pkg);
    let mut on_wait = Some(on_wait);
    for _ in 0..MAX_LOCK_ATTEMPTS {
        let file = open_lock_file(root, &path)?;
        match lock_opened(root, &path, file, FlockArg::LockExclusiveNonblock)? {
            Locked::Held(lock) => return Ok(Some(PackageLock { _lock: lock, path })),
            Locked::Stale => continue,
            Locked::Busy => {}
        }
        if let Some(f) = on_wait.take() {
            f(&path);
        }
        let file = open_lock_file(root, &path)?;
        let Some(lock) = wait_for_flock(file, &path, cancel).await? else {
            return Ok(None);
        };
        if still_at_path(root, &path, &lock)? {
            return Ok(Some(PackageLock { _lock: lock, path }));
        }
    }
    Err(StateError::LockReplaced {
        path,
        attempts: MAX_LOCK_ATTEMPTS,
    })
}

/// The blocking `flock(LOCK_EX)` of [`lock_package_cancellable`] on a helper thread;
/// `Ok(None)` when `cancel` stops first.
async fn wait_for_flock(
    file: File,
    path: &Path,
    cancel: &crate::process::Cancel,
) -> Result<Option<Flock<File>>, StateError> {
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
            path: path.to_path_buf(),
            source: e.raw_os_error().map_or(Errno::EAGAIN, Errno::from_raw),
        })?;
    let err = |source| StateError::Lock {
        path: path.to_path_buf(),
        source,
    };
    tokio::select! {
        biased;
        r = rx => match r {
            Ok(Ok(lock)) => Ok(Some(lock)),
            Ok(Err(errno)) => Err(err(errno)),
            // The thread ended without sending: it panicked.
            Err(_) => Err(err(Errno::EIO)),
        },
        () = cancel.stopped() => Ok(None),
    }
}

/// Keeps `<state root>/locks/<pkg>.lock` naming a file this agent holds locked, for as long
/// as a [`PackageLock`] is held (the whole mode run).
///
/// The waiter's identity check cannot stop an agent that arrives after the lock file was
/// removed (a cleanup) or replaced (a rename onto the path): it creates or opens the new
/// file, locks it, and its check passes. So the holder watches the locks directory
/// (inotify: delete, rename from/to, create, and the directory itself going) from a task on
/// the run's tokio runtime; when the name no longer names a file it holds, it takes whatever
/// is there now (creating it `O_EXCL` through the root-confined calls if nothing is) with
/// `LOCK_EX | LOCK_NB` and keeps that descriptor, so a newcomer finds the path locked and
/// waits. If another holder got there first (a race of microseconds), the lock is lost:
/// [`LockKeeper::check`] reports [`StateError::LockLost`] and the mode loop fails the run
/// after the step that is running (a step cannot be interrupted safely).
///
/// The task waits for the inotify descriptor to be readable (the runtime's own poll, no
/// thread of its own); a restore runs under a mutex with no await in it.
/// [`LockKeeper::stop`] (or drop) ends the task and releases what it took, at once: on the
/// run's current-thread runtime no restore can be in flight then, on a multi-thread one
/// `stop` waits for the one in flight. No per-step cost: the task wakes only on events in
/// the locks directory.
#[derive(Debug)]
pub struct LockKeeper {
    /// The keeper's state; `None` once stopped or lost (what it took released).
    keeper: Arc<std::sync::Mutex<Option<Keeper>>>,
    /// The watching task, once [`LockKeeper::arm`]ed.
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    runtime: tokio::runtime::Handle,
    lost: Arc<std::sync::OnceLock<String>>,
    path: PathBuf,
}

/// The errno of an I/O error (`EINVAL` when it has none).
fn io_errno(e: std::io::Error) -> Errno {
    e.raw_os_error().map_or(Errno::EINVAL, Errno::from_raw)
}

/// The inotify descriptor as tokio's [`tokio::io::unix::AsyncFd`] takes it.
#[derive(Debug)]
struct InotifyFd(nix::sys::inotify::Inotify);

impl std::os::fd::AsRawFd for InotifyFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsFd;
        self.0.as_fd().as_raw_fd()
    }
}

impl LockKeeper {
    /// Start keeping `lock`'s path for `root`, on the current tokio runtime (which must have
    /// its I/O driver enabled).
    ///
    /// # Errors
    /// [`StateError::Lock`] when the locks directory cannot be opened or watched, or there is
    /// no runtime with I/O to watch from (`EINVAL`).
    pub fn start(root: &HostRoot, lock: &PackageLock) -> Result<Self, StateError> {
        use std::os::unix::fs::MetadataExt;
        let path = lock.path.clone();
        let err = |source: Errno| StateError::Lock {
            path: path.clone(),
            source,
        };
        let meta = lock._lock.metadata().map_err(|e| err(io_errno(e)))?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| err(Errno::EINVAL))?;
        let root = root.try_clone()?;
        let lost = Arc::new(std::sync::OnceLock::new());
        let keeper = Arc::new(std::sync::Mutex::new(Some(Keeper {
            root,
            path: path.clone(),
            ours: (meta.dev(), meta.ino()),
            taken: None,
            lost: Arc::clone(&lost),
        })));
        Ok(LockKeeper {
            keeper,
            task: std::sync::Mutex::new(None),
            runtime,
            lost,
            path,
        })
    }

    /// Start watching, if not yet: the mode loop arms the keeper before the first step it
    /// runs, so a run whose steps are all skipped makes no inotify instance (whose teardown
    /// at exit waits for an RCU grace period, milliseconds). A removal or replacement of the
    /// lock path before the watch is settled here, as an event would be. Then
    /// [`LockKeeper::check`].
    ///
    /// # Errors
    /// [`StateError::Lock`] when the locks directory cannot be opened or watched;
    /// [`StateError::LockLost`].
    pub fn arm(&self) -> Result<(), StateError> {
        use nix::sys::inotify::{InitFlags, Inotify};
        let mut task = self.task.lock().unwrap_or_else(|p| p.into_inner());
        if task.is_some() {
            return self.check();
        }
        let mut guard = self.keeper.lock().unwrap_or_else(|p| p.into_inner());
        let Some(keeper) = guard.as_mut() else {
            drop(guard);
            return self.check();
        };
        let err = |source: Errno| StateError::Lock {
            path: self.path.clone(),
            source,
        };
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).map_err(err)?;
        let _dir = watch_locks_dir(&keeper.root, &inotify, &self.path)?;
        let inotify = {
            let _entered = self.runtime.enter();
            // SAFETY: `InotifyFd` owns the inotify descriptor and always returns it, open,
            // until the `AsyncFd` is dropped.
            unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(
                    InotifyFd(inotify),
                    tokio::io::Interest::READABLE,
                )
            }
            .map_err(|e| err(io_errno(e.into_parts().1)))?
        };
        if let Err(why) = keeper.restore() {
            if let Some(k) = guard.take() {
                let _ = k.lost.set(why);
            }
            drop(guard);
            return self.check();
        }
        drop(guard);
        *task = Some(self.runtime.spawn(watch(inotify, Arc::clone(&self.keeper))));
        Ok(())
    }

    /// `Err(StateError::LockLost)` once another holder has the file at the lock path.
    ///
    /// # Errors
    /// [`StateError::LockLost`].
    pub fn check(&self) -> Result<(), StateError> {
        match self.lost.get() {
            None => Ok(()),
            Some(why) => Err(StateError::LockLost {
                path: self.path.clone(),
                why: why.clone(),
            }),
        }
    }

    /// Stop watching; a lock file taken meanwhile is released. Then [`LockKeeper::check`].
    ///
    /// # Errors
    /// [`StateError::LockLost`].
    pub fn stop(mut self) -> Result<(), StateError> {
        self.end();
        self.check()
    }

    /// Abort the task and drop the keeper's state (waiting for a restore in flight on
    /// another worker thread, if any).
    fn end(&mut self) {
        let task = self.task.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(task) = task.take() {
            task.abort();
        }
        let mut keeper = self.keeper.lock().unwrap_or_else(|p| p.into_inner());
        drop(keeper.take());
    }
}

impl Drop for LockKeeper {
    fn drop(&mut self) {
        self.end();
    }
}

/// The task of [`LockKeeper`]: wait for events of the locks directory and restore the lock
/// path after each that touches it; ends when the keeper is stopped or the lock lost.
async fn watch(
    inotify: tokio::io::unix::AsyncFd<InotifyFd>,
    shared: Arc<std::sync::Mutex<Option<Keeper>>>,
) {
    use nix::sys::inotify::AddWatchFlags as W;
    let lose = |why: String| {
        let mut keeper = shared.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = keeper.take() {
            let _ = k.lost.set(why);
        }
    };
    loop {
        let mut ready = match inotify.readable().await {
            Ok(ready) => ready,
            Err(e) => return lose(format!("watching the locks directory failed: {e}")),
        };
        let events =
            match ready.try_io(|fd| fd.get_ref().0.read_events().map_err(std::io::Error::from)) {
                Ok(Ok(events)) => events,
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return lose(format!("watching the locks directory failed: {e}")),
                // Not readable after all (readiness cleared): wait again.
                Err(_) => continue,
            };
        let mut guard = shared.lock().unwrap_or_else(|p| p.into_inner());
        let Some(keeper) = guard.as_mut() else {
            return;
        };
        let name = keeper.path.file_name().map(std::ffi::OsStr::to_os_string);
        let mut touched = false;
        let mut rewatch = false;
        for ev in &events {
            touched |= ev.name == name || ev.mask.contains(W::IN_Q_OVERFLOW);
            rewatch |= ev.mask.intersects(W::IN_DELETE_SELF | W::IN_MOVE_SELF);
        }
        if !(touched || rewatch) {
            continue;
        }
        let mut why = keeper.restore().err();
        if why.is_none() && rewatch {
            // The directory went (or moved): the restore created a new one; watch it.
            why = watch_locks_dir(&keeper.root, &inotify.get_ref().0, &keeper.path)
                .err()
                .map(|e| format!("{e:#}"));
        }
        if let Some(why) = why {
            // Lost: what was taken is released, as the keeper ends.
            if let Some(k) = guard.take() {
                let _ = k.lost.set(why);
            }
            return;
        }
    }
}

/// Watch the lock file's directory for the name going or changing, and the directory itself
/// going. The directory is opened through `root` (confined) and watched through its
/// `/proc/self/fd` name; the returned descriptor must outlive the `add_watch` call only.
fn watch_locks_dir(
    root: &HostRoot,
    inotify: &nix::sys::inotify::Inotify,
    path: &Path,
) -> Result<File, StateError> {
    use nix::sys::inotify::AddWatchFlags as W;
    use std::os::fd::AsRawFd;
    let dir_path = path.parent().unwrap_or(Path::new("/"));
    let dir = root.open_read(dir_path)?;
    inotify
        .add_watch(
            &PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())),
            W::IN_DELETE
                | W::IN_MOVED_FROM
                | W::IN_MOVED_TO
                | W::IN_CREATE
                | W::IN_DELETE_SELF
                | W::IN_MOVE_SELF
                | W::IN_ONLYDIR,
        )
        .map_err(|source| StateError::Lock {
            path: dir_path.to_path_buf(),
            source,
        })?;
    Ok(dir)
}

/// The state of [`LockKeeper`]'s task.
#[derive(Debug)]
struct Keeper {
    root: HostRoot,
    path: PathBuf,
    /// Device and inode of the lock taken by [`lock_package`] and friends.
    ours: (u64, u64),
    /// The lock file this thread took after the path stopped naming `ours`.
    taken: Option<Flock<File>>,
    lost: Arc<std::sync::OnceLock<String>>,
}

impl Keeper {
    /// Make the lock path name a file this agent holds locked again. `Err(why)` when another
    /// holder has the file now there.
    fn restore(&mut self) -> Result<(), String> {
        use std::os::unix::fs::MetadataExt;
        let at_path = |root: &HostRoot, path: &Path| {
            root.metadata(path)
                .map(|m| m.map(|m| (m.dev(), m.ino())))
                .map_err(|e| format!("{e}"))
        };
        for _ in 0..MAX_LOCK_ATTEMPTS {
            let now = at_path(&self.root, &self.path)?;
            let taken = match &self.taken {
                Some(l) => l.metadata().ok().map(|m| (m.dev(), m.ino())),
                None => None,
            };
            if now.is_some() && (now == Some(self.ours) || now == taken) {
                return Ok(());
            }
            let file = open_lock_file(&self.root, &self.path).map_err(|e| format!("{e}"))?;
            // Another descriptor of the same open file: its description is closed (an
            // inotify IN_CLOSE for a watcher of the file) only once a loss is recorded.
            let open = file.try_clone().ok();
            match lock_opened(
                &self.root,
                &self.path,
                file,
                FlockArg::LockExclusiveNonblock,
            )
            .map_err(|e| format!("{e}"))?
            {
                Locked::Held(l) => {
                    // The file taken before (if any) no longer names the path: release it.
                    self.taken = Some(l);
                    return Ok(());
                }
                Locked::Busy => {
                    let why = format!(
                        "the lock file was removed or replaced while this agent held it, and another agent (pid {}) locked the new one first; both may have run steps of the package at the same time",
                        holder_pid(&self.path, &self.root)
                            .map_or_else(|| "unknown".to_string(), |p| p.to_string())
                    );
                    let _ = self.lost.set(why.clone());
                    drop(open);
                    return Err(why);
                }
                Locked::Stale => {}
            }
        }
        Err(format!(
            "the lock file was removed or replaced again during each of {MAX_LOCK_ATTEMPTS} attempts to restore it"
        ))
    }
}

/// The pid holding a `flock` on the file now at `path`, from `/proc/locks` (`None` when it
/// cannot be told).
pub(crate) fn holder_pid(path: &Path, root: &HostRoot) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let m = root.metadata(path).ok()??;
    let ino = m.ino();
    let text = std::fs::read_to_string("/proc/locks").ok()?;
    // `1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF`
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.get(1) != Some(&"FLOCK") {
            return None;
        }
        let id = f.get(5)?;
        let file_ino: u64 = id.rsplit(':').next()?.parse().ok()?;
        (file_ino == ino).then(|| f.get(4)?.parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host root in a temp dir (kept alive by the first value) and the state dir `/st`.
    fn state_root() -> (tempfile::TempDir, HostRoot, &'static Path) {
        let d = tempfile::tempdir().unwrap();
        let r = HostRoot::open(d.path()).unwrap();
        (d, r, Path::new("/st"))
    }

    /// Where package `demo`'s lock file is on the agent's side, under the root `d`.
    fn demo_lock_file(d: &tempfile::TempDir) -> PathBuf {
        d.path().join("st/locks/demo.lock")
    }

    /// Whether package `demo`'s lock is free: taken (and released at once) without waiting.
    fn demo_free(r: &HostRoot) -> bool {
        try_lock_package(r, Path::new("/st"), "demo")
            .unwrap()
            .is_some()
    }

    /// Which pid holds `demo`'s lock path.
    fn demo_holder(r: &HostRoot) -> Option<u32> {
        holder_pid(Path::new("/st/locks/demo.lock"), r)
    }

    /// A current-thread runtime, as the agent's.
    fn current_thread() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A keeper of `held` started on `rt`.
    fn start_keeper(rt: &tokio::runtime::Runtime, r: &HostRoot, held: &PackageLock) -> LockKeeper {
        rt.block_on(async { LockKeeper::start(r, held) }).unwrap()
    }

    #[test]
    fn cancellable_wait_ends_on_stop_and_a_late_acquisition_is_released() {
        use crate::process::{Cancel, CancelReason};
        let (_d, r, st) = state_root();
        let rt = current_thread();
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
        let (d, r, st) = state_root();
        let held = lock_package(&r, st, "demo").unwrap();
        assert_eq!(held.path(), Path::new("/st/locks/demo.lock"));
        assert!(demo_lock_file(&d).is_file());
        // flock locks belong to the open file description: a second open is excluded
        assert!(!demo_free(&r));
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
        assert!(demo_free(&r));
    }

    #[test]
    fn a_lock_on_a_removed_lock_file_is_not_taken() {
        // A waiter opened the lock file, then a cleanup removed it and a second agent created
        // and locked a new one: the waiter's flock succeeds on the old inode, which must not
        // count as holding the package lock.
        let (d, r, st) = state_root();
        let path = lock_path(st, "demo");
        let first = lock_package(&r, st, "demo").unwrap();
        let waiter_file = open_lock_file(&r, &path).unwrap();
        std::fs::remove_file(demo_lock_file(&d)).unwrap();
        let second = try_lock_package(&r, st, "demo").unwrap();
        assert!(second.is_some(), "a new lock file is free");
        drop(first);
        let got = lock_opened(&r, &path, waiter_file, FlockArg::LockExclusiveNonblock).unwrap();
        assert!(matches!(got, Locked::Stale));
        // Through the public calls the waiter finds the new file, held by the second agent.
        assert!(!demo_free(&r));
        let rt = current_thread();
        let cancel = crate::process::Cancel::new();
        let stopper = cancel.clone();
        let got = rt
            .block_on(lock_package_cancellable(&r, st, "demo", &cancel, |_| {
                stopper.stop(crate::process::CancelReason::Signal("SIGTERM"));
            }))
            .unwrap();
        assert!(got.is_none(), "the second agent still holds it");
        drop(second);
        // The cancelled wait's helper thread may take the released lock for a moment before
        // it drops it (see lock_package_cancellable): wait for the lock, bounded, instead of
        // trying once.
        let (tx, rx) = std::sync::mpsc::channel();
        let mount = d.path().to_path_buf();
        std::thread::spawn(move || {
            let root = HostRoot::open(&mount).unwrap();
            let _ = tx.send(lock_package(&root, Path::new("/st"), "demo").is_ok());
        });
        let free = rx.recv_timeout(std::time::Duration::from_secs(10));
        assert_eq!(free, Ok(true), "the lock was not free again within 10 s");
    }

    /// Another agent got the file at the lock path first (it was replaced by a file already
    /// locked): the holder cannot re-take the path, and says so naming the path and the pid.
    #[test]
    fn a_lock_path_another_holder_took_first_is_reported_lost() {
        use std::os::unix::fs::MetadataExt;
        let (d, r, st) = state_root();
        let held = lock_package(&r, st, "demo").unwrap();
        let m = held._lock.metadata().unwrap();

        // The restore itself: the name removed, and a newcomer created and locked a new file.
        std::fs::remove_file(demo_lock_file(&d)).unwrap();
        let other = try_lock_package(&r, st, "demo").unwrap().unwrap();
        let mut keeper = Keeper {
            root: r.try_clone().unwrap(),
            path: lock_path(st, "demo"),
            ours: (m.dev(), m.ino()),
            taken: None,
            lost: Arc::default(),
        };
        let why = keeper.restore().unwrap_err();
        let pid = std::process::id();
        assert_eq!(
            why,
            format!(
                "the lock file was removed or replaced while this agent held it, and another agent (pid {pid}) locked the new one first; both may have run steps of the package at the same time"
            )
        );
        drop(other);

        // The keeper's task on a current-thread runtime (as the agent's): a file locked by
        // another holder renamed onto the path, seen while the runtime waits.
        let rt = current_thread();
        let held = lock_package(&r, st, "demo").unwrap();
        assert!(matches!(
            LockKeeper::start(&r, &held),
            Err(StateError::Lock {
                source: Errno::EINVAL,
                ..
            })
        ));
        let keeper = start_keeper(&rt, &r, &held);
        rt.block_on(async { keeper.arm() }).unwrap();
        assert!(keeper.check().is_ok());
        let other = lock_package(&r, st, "other").unwrap();
        std::fs::rename(d.path().join("st/locks/other.lock"), demo_lock_file(&d)).unwrap();
        rt.block_on(async {
            let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while keeper.check().is_ok() && std::time::Instant::now() < end {
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        });
        let e = keeper.stop().unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("lost the package lock /st/locks/demo.lock: {why}")
        );
        drop(other);
        drop(held);
    }

    /// The keeper armed only at the first step that runs: a lock file removed before then
    /// is re-taken by `arm` itself, before the step, so a newcomer finds it busy.
    #[test]
    fn a_lock_file_removed_before_the_keeper_is_armed_is_retaken_by_arm() {
        let (d, r, st) = state_root();
        let rt = current_thread();
        let held = lock_package(&r, st, "demo").unwrap();
        let keeper = start_keeper(&rt, &r, &held);
        std::fs::remove_file(demo_lock_file(&d)).unwrap();
        rt.block_on(async { keeper.arm() }).unwrap();
        assert_eq!(
            demo_holder(&r),
            Some(std::process::id()),
            "arm did not re-take the lock path removed before it"
        );
        assert!(!demo_free(&r));
        keeper.stop().unwrap();
        assert!(demo_free(&r));
        drop(held);
    }

    /// The lock file removed while held: the keeper's task re-creates and locks it (a
    /// newcomer finds it busy), and `stop` releases it at once.
    #[test]
    fn the_keeper_task_restores_a_removed_lock_file_and_stop_releases_it() {
        let (d, r, st) = state_root();
        let rt = current_thread();
        let held = lock_package(&r, st, "demo").unwrap();
        let keeper = start_keeper(&rt, &r, &held);
        rt.block_on(async { keeper.arm() }).unwrap();
        std::fs::remove_file(demo_lock_file(&d)).unwrap();
        let restored = rt.block_on(async {
            for _ in 0..10_000 {
                if demo_holder(&r) == Some(std::process::id()) {
                    return true;
                }
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
            false
        });
        assert!(restored, "the keeper did not re-take the lock path");
        assert!(!demo_free(&r));
        keeper.stop().unwrap();
        // What the keeper took is released by `stop`; the original lock is on the old inode.
        assert!(demo_free(&r));
        drop(held);
    }

    #[test]
    fn a_lock_file_replaced_every_time_gives_up_with_the_path() {
        let (d, r, _) = state_root();
        let path = Path::new("/st/locks/demo.lock");
        std::fs::create_dir_all(d.path().join("st/locks")).unwrap();
        std::fs::write(demo_lock_file(&d), "").unwrap();
        let old = open_lock_file(&r, path).unwrap();
        std::fs::remove_file(demo_lock_file(&d)).unwrap();
        let got = lock_opened(&r, path, old, FlockArg::LockExclusive).unwrap();
        assert!(matches!(got, Locked::Stale), "removed: nothing at the path");
        let e = StateError::LockReplaced {
            path: path.to_path_buf(),
            attempts: MAX_LOCK_ATTEMPTS,
        };
        assert_eq!(
            e.to_string(),
            "failed to lock /st/locks/demo.lock: the lock file was removed or replaced after each of 64 acquisitions"
        );
    }
}
