//! A cgroup per run: the boundary that tells one run's processes from every other's.
//!
//! A run whose [`crate::process::Spec::cgroup`] names a directory joins that cgroup before
//! `exec` (the child writes `0` to its `cgroup.procs`, through a descriptor opened before the
//! clone), so every process it forks, including one that calls `setsid` or is re-parented,
//! is a member until it exits. Ending the run signals the members listed in `cgroup.procs`
//! instead of the subreaper's adopted children, so several runs at once never sweep each
//! other's orphans, and a cancel after a server restart still reaches `setsid` grandchildren.
//!
//! [`Root`] is the directory under which runs get their cgroups (`<root>/skyhook-serve`):
//! cgroup v2 (the hierarchy this process lives in), else cgroup v1 `pids` or `freezer`, both
//! through `cgroup.procs`. `SIGKILL` uses `cgroup.kill` (v2, Linux ≥ 5.14) when present, else
//! signals every listed pid, round after round until the list is empty (bounded in rounds
//! and time: [`super::sweep::kill_all`]). Exited members are not listed (the kernel unlinks
//! a task from its cgroup when it exits), so an empty list means nothing of the run is alive.

use std::collections::BTreeSet;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Cgroups of runs in progress: their members are never another run's adopted orphans.
static ACTIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Per-process counter that makes cgroup names unique.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// Which cgroup hierarchy a [`Root`] is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The unified hierarchy.
    V2,
    /// A v1 hierarchy (`pids` or `freezer`).
    V1,
}

/// The directory under which runs get their cgroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    dir: PathBuf,
    version: Version,
}

/// `Some(version)` when `dir` is on a cgroup filesystem.
fn fs_version(dir: &Path) -> Option<Version> {
    let c = CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs(2) fills the zeroed struct from a NUL-terminated path.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)]
    match st.f_type as i64 {
        t if t == libc::CGROUP2_SUPER_MAGIC as i64 => Some(Version::V2),
        t if t == libc::CGROUP_SUPER_MAGIC as i64 => Some(Version::V1),
        _ => None,
    }
}

/// True when `dir` is on a cgroup filesystem (v1 or v2).
pub fn is_cgroup_dir(dir: &Path) -> bool {
    fs_version(dir).is_some()
}

/// True when `dir` is on the cgroup v2 filesystem.
pub(super) fn is_v2_dir(dir: &Path) -> bool {
    fs_version(dir) == Some(Version::V2)
}

/// A mountinfo path field with its `\ooo` escapes decoded ([`unescape_octal`]).
pub(crate) fn unescape(field: &str) -> PathBuf {
    PathBuf::from(
        <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(unescape_octal(field)),
    )
}

/// The bytes of a proc(5) mountinfo or fstab(5) field with its `\ooo` octal escapes
/// decoded (`\040` → space); anything else, an escape above `\377` included, stays as is.
/// The one decoder for this crate's mount-table readers (here and `host::mounts::mount`).
pub fn unescape_octal(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = b[i + 1..i + 4]
                .iter()
                .fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
            if let Ok(c) = u8::try_from(v) {
                out.push(c);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// Where this process's cgroup of one hierarchy is: `(mount point, mount root)` of the
/// first mount with filesystem type `fstype` whose super options name `controller` (any
/// when `None`), from `mountinfo` text.
fn find_mount(
    mountinfo: &str,
    fstype: &str,
    controller: Option<&str>,
) -> Option<(PathBuf, String)> {
    mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let pre: Vec<&str> = pre.split(' ').collect();
        let post: Vec<&str> = post.split(' ').collect();
        if post.first() != Some(&fstype) {
            return None;
        }
        if let Some(c) = controller
            && !post.get(2)?.split(',').any(|o| o == c)
        {
            return None;
        }
        Some((
            unescape(pre.get(4)?),
            unescape(pre.get(3)?).display().to_string(),
        ))
    })
}

/// This process's path in the hierarchy of `/proc/self/cgroup` line `key` (`""` for v2,
/// else a controller name), from its text.
fn own_path(proc_cgroup: &str, key: &str) -> Option<String> {
    proc_cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
        let hit = if key.is_empty() {
            ctrl.is_empty()
        } else {
            ctrl.split(',').any(|c| c == key)
        };
        hit.then(|| path.to_string())
    })
}

/// This process's own cgroup directory in the v2 hierarchy (`controller` `None`) or in the
/// v1 hierarchy of `controller` (`/proc/self/mountinfo` and `/proc/self/cgroup`).
///
/// # Errors
/// `"not mounted"` or `"not in /proc/self/cgroup"`.
pub(crate) fn own_dir(controller: Option<&str>) -> Result<PathBuf, String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let fstype = if controller.is_some() {
        "cgroup"
    } else {
        "cgroup2"
    };
    let (mount, mount_root) =
        find_mount(&mountinfo, fstype, controller).ok_or_else(|| "not mounted".to_string())?;
    let path = own_path(&own, controller.unwrap_or(""))
        .ok_or_else(|| "not in /proc/self/cgroup".to_string())?;
    let rel = path
        .strip_prefix(mount_root.trim_end_matches('/'))
        .unwrap_or(&path);
    Ok(mount.join(rel.trim_start_matches('/')))
}

impl Root {
    /// `<dir>/skyhook-serve`, created when missing; `dir` must be a directory of a cgroup
    /// filesystem (v2, or v1 with `cgroup.procs`) where this process may create one.
    ///
    /// # Errors
    /// A message naming `dir` and what is wrong (not a cgroup filesystem, cannot create).
    pub fn at(dir: &Path) -> Result<Root, String> {
        let Some(version) = fs_version(dir) else {
            return Err(format!(
                "{}: not a directory of a cgroup filesystem",
                dir.display()
            ));
        };
        Root::under(dir, version)
    }

    /// [`Root::at`] without its check that `dir` is on a cgroup filesystem, for a caller
    /// that checked it (or a test's directory standing in for one, with the files a cgroup
    /// has): `<dir>/skyhook-serve`, created when missing, with a `cgroup.procs`.
    ///
    /// # Errors
    /// As [`Root::at`].
    pub(super) fn under(dir: &Path, version: Version) -> Result<Root, String> {
        let mine = dir.join("skyhook-serve");
        match std::fs::create_dir(&mine) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("{}: cannot create: {e}", mine.display())),
        }
        if !mine.join("cgroup.procs").exists() {
            return Err(format!("{}: no cgroup.procs in it", mine.display()));
        }
        Ok(Root { dir: mine, version })
    }

    /// The first usable of: this process's cgroup v2, its v1 `pids` cgroup, its v1 `freezer`
    /// cgroup (each with `skyhook-serve` created below it).
    ///
    /// # Errors
    /// Why none is usable, one reason per candidate, `; `-separated.
    pub fn detect() -> Result<Root, String> {
        let mut why = Vec::new();
        for controller in [None, Some("pids"), Some("freezer")] {
            let what = controller.map_or("cgroup v2".to_string(), |c| format!("cgroup v1 {c}"));
            match own_dir(controller).and_then(|dir| Root::at(&dir)) {
                Ok(r) => return Ok(r),
                Err(e) => why.push(format!("{what}: {e}")),
            }
        }
        Err(why.join("; "))
    }

    /// The `skyhook-serve` directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// v2 or v1.
    pub fn version(&self) -> Version {
        self.version
    }

    /// A new empty cgroup for the run `name` (`<name>.<pid>.<n>`: unique among the servers
    /// sharing this root); its path.
    ///
    /// # Errors
    /// The `mkdir` error.
    pub fn create(&self, name: &str) -> io::Result<PathBuf> {
        let me = std::process::id();
        let mut last = None;
        for _ in 0..16 {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir = self.dir.join(format!("{name}.{me}.{n}"));
            match std::fs::create_dir(&dir) {
                Ok(()) => return Ok(dir),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)))
    }
}

/// Largest `cgroup.procs` read, in bytes: every pid of a `pid_max` of 4194304 (7 digits
/// and a newline each).
pub const MAX_PROCS_BYTES: u64 = 32 << 20;

/// The live members of the cgroup `dir`; empty when it is gone.
///
/// Read only from a cgroup filesystem (the directory's `fstatfs`, then its `cgroup.procs`
/// opened in that directory handle without following a link or blocking, at most
/// [`MAX_PROCS_BYTES`]): a plain directory is no cgroup, whose `cgroup.procs` could list
/// any process or be a FIFO (a cgroup filesystem has neither links nor FIFOs).
pub fn procs(dir: &Path) -> Vec<libc::pid_t> {
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(d) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(dir)
    else {
        return Vec::new();
    };
    // SAFETY: fstatfs(2) fills the zeroed struct for a descriptor we hold.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    #[allow(clippy::unnecessary_cast)]
    let on_cgroupfs = unsafe { libc::fstatfs(std::os::fd::AsRawFd::as_raw_fd(&d), &mut st) } == 0
        && [
            libc::CGROUP2_SUPER_MAGIC as i64,
            libc::CGROUP_SUPER_MAGIC as i64,
        ]
        .contains(&(st.f_type as i64));
    if !on_cgroupfs {
        return Vec::new();
    }
    let flags = nix::fcntl::OFlag::O_RDONLY
        | nix::fcntl::OFlag::O_NOFOLLOW
        | nix::fcntl::OFlag::O_NONBLOCK
        | nix::fcntl::OFlag::O_NOCTTY
        | nix::fcntl::OFlag::O_CLOEXEC;
    let mut bytes = Vec::new();
    if let Ok(fd) = nix::fcntl::openat(&d, "cgroup.procs", flags, nix::sys::stat::Mode::empty()) {
        let _ = std::io::Read::read_to_end(
            &mut std::io::Read::take(std::fs::File::from(fd), MAX_PROCS_BYTES),
            &mut bytes,
        );
    }
    String::from_utf8_lossy(&bytes)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Send `sig` to every member of `dir`; returns how many were listed.
pub fn signal(dir: &Path, sig: Signal) -> usize {
    let pids = procs(dir);
    for &p in &pids {
        let _ = kill(Pid::from_raw(p), sig);
    }
    pids.len()
}

/// Wait until every process of `pids` exited or `until` passed (pidfds polled; a pid that
/// is already gone counts as exited). True when all exited.
pub fn wait_exited(pids: &[libc::pid_t], until: Instant) -> bool {
    let fds: Vec<OwnedFd> = pids.iter().filter_map(|&p| super::pidfd_open(p)).collect();
    wait_fds(&fds, until)
}

/// Wait until every pidfd of `fds` is readable (its process exited) or `until` passed. True
/// when all are.
pub(super) fn wait_fds(fds: &[OwnedFd], until: Instant) -> bool {
    let mut left: Vec<&OwnedFd> = fds.iter().collect();
    while !left.is_empty() {
        let now = Instant::now();
        if now >= until {
            return false;
        }
        let mut p: Vec<libc::pollfd> = left
            .iter()
            .map(|f| libc::pollfd {
                fd: f.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let ms = until.saturating_duration_since(now).as_millis().min(60_000) as libc::c_int + 1;
        // SAFETY: a valid array of pollfd for the duration of the call.
        let n = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
        if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return false;
        }
        left = left
            .into_iter()
            .zip(&p)
            .filter(|(_, pf)| pf.revents == 0)
            .map(|(f, _)| f)
            .collect();
    }
    true
}

/// Remove the (empty) cgroup `dir`; a missing one is fine.
///
/// # Errors
/// The `rmdir` error (`EBUSY` while a member lives).
pub fn remove(dir: &Path) -> io::Result<()> {
    match std::fs::remove_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Mark `dir` as the cgroup of a run in progress (see [`members_of_active`]).
pub(super) fn activate(dir: &Path) {
    ACTIVE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(dir.to_path_buf());
}

/// Undo one [`activate`] of `dir`.
pub(super) fn deactivate(dir: &Path) {
    let mut a = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = a.iter().position(|d| d == dir) {
        a.swap_remove(i);
    }
}

/// Every live member of the cgroups of runs in progress: processes the subreaper sweep of a
/// run without a cgroup must leave alone.
pub(super) fn members_of_active() -> BTreeSet<libc::pid_t> {
    let a = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
    a.iter().flat_map(|d| procs(d)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_and_proc_cgroup_are_parsed() {
        let mi = "\
30 25 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
35 30 0:31 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
36 30 0:32 /kube /sys/fs/cgroup/my\\040v2 rw - cgroup2 cgroup2 rw
";
        assert_eq!(
            find_mount(mi, "cgroup2", None),
            Some((PathBuf::from("/sys/fs/cgroup/my v2"), "/kube".into()))
        );
        assert_eq!(
            find_mount(mi, "cgroup", Some("pids")),
            Some((PathBuf::from("/sys/fs/cgroup/pids"), "/".into()))
        );
        assert_eq!(find_mount(mi, "cgroup", Some("freezer")), None);
        let pc = "8:pids:/a/b\n4:memory,cpu:/m\n0::/kube/pod\n";
        assert_eq!(own_path(pc, "").as_deref(), Some("/kube/pod"));
        assert_eq!(own_path(pc, "pids").as_deref(), Some("/a/b"));
        assert_eq!(own_path(pc, "cpu").as_deref(), Some("/m"));
        assert_eq!(own_path(pc, "freezer"), None);
    }

    #[test]
    fn a_directory_that_is_no_cgroup_is_refused_and_names_itself() {
        let d = tempfile::tempdir().unwrap();
        let e = Root::at(d.path()).unwrap_err();
        assert_eq!(
            e,
            format!(
                "{}: not a directory of a cgroup filesystem",
                d.path().display()
            )
        );
        assert!(!d.path().join("skyhook-serve").exists());
        let e = Root::at(Path::new("/nonexistent/cg")).unwrap_err();
        assert!(e.starts_with("/nonexistent/cg: not a directory"), "{e}");
    }
}
