//! Files of a run of many steps written relative to their directory's descriptor, each
//! directory resolved once per run.
//!
//! Every [`HostRoot`] operation resolves its path inside the root, and a confined resolution
//! is the most expensive thing an agent step does after its `fork` (pathrs checks the walk
//! through `/proc`): [`AgentFiles::write_atomic`] alone resolves about six times per write
//! (symlink check, `stat`, the old file, the temporary, the rename, the directory fsync). A
//! run of N steps touches the same few directories N times: the step flags in
//! `<state root>/flags/<pkg>/<ver>` (a `stat` before the step, the write after it) and the
//! step logs in `<log root>/<pkg>/<ver>` (two files created, two removed by retention).
//! [`RunDirs`] resolves each such directory once, through the root, keeps its descriptor
//! for the run, and works in it with `*at` calls on single-component names: nothing is
//! resolved again and nothing can leave the root, because a symlink at the name is never
//! followed by these calls (a symlinked name, and anything that is not a regular file where
//! one is expected, goes through the confined [`HostRoot`] operation instead).
//!
//! [`RunDirs::write`] is [`AgentFiles::write_atomic`]'s write of the agent's own file (a
//! step flag): a temporary file beside the destination (the same name shape, so a crashed
//! writer's leftovers are swept the same way), the content, mode 0644 (an old file's owner,
//! extended attributes and mode are not carried over: the flag is the agent's), `fsync` of
//! the file, `rename` over the destination, `fsync` of the directory;
//! on failure the temporary is removed and the destination is unchanged. So a flag's
//! content is durable before its rename and the rename before the next step starts. The
//! first write into a directory in a run goes through [`AgentFiles::write_atomic`] itself
//! (which creates missing directories and sweeps stale temporaries there).
//!
//! A directory is opened (and kept) after the first operation in it through the root, when
//! it exists. A kept directory that was removed meanwhile (link count 0: a step deleting
//! its package's flags) is dropped and the operation goes through the root again. Only a
//! step can remove it during the run, so its link count is looked at (one `fstat`) by the
//! first operation in it after each step ([`RunDirs::step_ran`]), not by every operation. A
//! directory renamed away and replaced by another process during the run would still be
//! used through its old descriptor: the package lock keeps other agents out for the run,
//! which is as long as a [`RunDirs`] lives.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use super::{AgentFiles, HostRoot, RootError};

/// Mode of a file written by [`RunDirs::write`] (as [`AgentFiles::write_atomic`] gives a new
/// file).
const FILE_MODE: u32 = 0o644;

/// One kept directory.
#[derive(Debug)]
struct Dir {
    /// Its descriptor (`O_RDONLY`, a directory).
    fd: File,
    /// A [`AgentFiles::write_atomic`] into it ran in this run (stale temporaries swept).
    swept: bool,
    /// The [`RunDirs::step_ran`] count when its link count was last seen above 0 (or it was
    /// opened).
    seen: u64,
}

/// The directories of one run, each resolved once (see the module docs). Start with
/// [`RunDirs::default`]; use one per run and per [`HostRoot`].
#[derive(Debug, Default)]
pub struct RunDirs {
    /// By directory (host path).
    dirs: Mutex<HashMap<PathBuf, Dir>>,
    /// How many steps ran ([`RunDirs::step_ran`]).
    steps: std::sync::atomic::AtomicU64,
}

/// What is at a name, seen through its directory.
enum Existing {
    /// Nothing.
    None,
    /// A regular file.
    File,
    /// A symlink or anything else: the [`HostRoot`] operation's case.
    Other,
}

/// `host` split into its directory and a NUL-terminated final component; `None` for `/` or
/// a name with a NUL byte (the [`HostRoot`] operation then reports it).
fn split(host: &Path) -> Option<(&Path, CString)> {
    let (parent, name) = (host.parent()?, host.file_name()?);
    Some((parent, CString::new(name.as_bytes()).ok()?))
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The kept descriptor of `dir`, unless that directory was removed since it was opened (a
/// step, or an uninstall, deleting it during the run): its link count is then 0, the entry
/// is dropped and the caller goes through the root again, which re-creates the directory
/// where it writes, so nothing is written into a deleted directory. The link count is read
/// once after each step (`steps`, the [`RunDirs::step_ran`] count): nothing else removes
/// the directory during the run. (A directory renamed away and replaced keeps a link count:
/// the package lock is what keeps that out.)
fn live<'a>(dirs: &'a mut HashMap<PathBuf, Dir>, dir: &Path, steps: u64) -> Option<&'a Dir> {
    let removed = match dirs.get_mut(dir) {
        Some(d) if d.seen != steps => {
            let gone = d.fd.metadata().map_or(true, |m| m.nlink() == 0);
            d.seen = steps;
            gone
        }
        _ => false,
    };
    if removed {
        dirs.remove(dir);
    }
    dirs.get(dir)
}

impl RunDirs {
    fn lock(&self) -> MutexGuard<'_, HashMap<PathBuf, Dir>> {
        self.dirs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A step ran: it may have removed a kept directory, so the next operation in each
    /// looks at its link count again (see `live`). Call it after every step the run runs.
    pub fn step_ran(&self) {
        self.steps
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn steps(&self) -> u64 {
        self.steps.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Keep `dir`'s descriptor after an operation in it went through the root (best
    /// effort: a directory that cannot be opened keeps taking that path).
    fn keep(&self, root: &HostRoot, dir: &Path, swept: bool) {
        let mut dirs = self.lock();
        if let Some(d) = dirs.get_mut(dir) {
            d.swept |= swept;
            return;
        }
        if let Ok(fd) = root.open_read(dir)
            && fd.metadata().is_ok_and(|m| m.is_dir())
        {
            let seen = self.steps();
            dirs.insert(dir.to_path_buf(), Dir { fd, swept, seen });
        }
    }

    fn err(root: &HostRoot, op: &'static str, host: &Path, source: io::Error) -> RootError {
        RootError {
            op,
            path: host.to_path_buf(),
            root: root.mount().to_path_buf(),
            source,
        }
    }

    /// [`HostRoot::exists`] of `host` (following a symlink inside the root): one
    /// `fstatat` in its kept directory.
    ///
    /// # Errors
    /// As [`HostRoot::exists`].
    pub fn exists(&self, root: &HostRoot, host: &Path) -> Result<bool, RootError> {
        if let Some((parent, name)) = split(host) {
            let mut dirs = self.lock();
            if let Some(d) = live(&mut dirs, parent, self.steps()) {
                // SAFETY: an all-zero `stat` is a valid value to be overwritten.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                // SAFETY: valid descriptor, NUL-terminated name, a `stat` to fill.
                let r = cvt(unsafe {
                    libc::fstatat(
                        d.fd.as_raw_fd(),
                        name.as_ptr(),
                        &mut st,
                        libc::AT_SYMLINK_NOFOLLOW,
                    )
                });
                match r {
                    Ok(_) if st.st_mode & libc::S_IFMT != libc::S_IFLNK => return Ok(true),
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(false),
                    // A symlink (followed inside the root), or an error the root reports.
                    _ => {}
                }
                drop(dirs);
                return root.exists(host);
            }
            drop(dirs);
            let r = root.exists(host)?;
            self.keep(root, parent, false);
            return Ok(r);
        }
        root.exists(host)
    }

    /// [`AgentFiles::create_new`] of `host` with `mode`: one `openat(O_CREAT | O_EXCL |
    /// O_NOFOLLOW)` in its kept directory.
    ///
    /// # Errors
    /// As [`AgentFiles::create_new`] (`AlreadyExists` when the name is taken, a symlink
    /// included).
    pub fn create_new(
        &self,
        files: &AgentFiles<'_>,
        host: &Path,
        mode: u32,
    ) -> Result<File, RootError> {
        let root = files.root;
        if let Some((parent, name)) = split(host) {
            let mut dirs = self.lock();
            if let Some(d) = live(&mut dirs, parent, self.steps()) {
                let flags = libc::O_WRONLY
                    | libc::O_CREAT
                    | libc::O_EXCL
                    | libc::O_NOFOLLOW
                    | libc::O_NOCTTY
                    | libc::O_CLOEXEC;
                // SAFETY: valid descriptor and name; mode for O_CREAT; the result is checked.
                let fd = cvt(unsafe {
                    libc::openat(d.fd.as_raw_fd(), name.as_ptr(), flags, mode as libc::c_uint)
                })
                .map_err(|e| Self::err(root, "create", host, e))?;
                // SAFETY: a fresh descriptor we own.
                return Ok(unsafe { File::from_raw_fd(fd) });
            }
            drop(dirs);
            let f = root.create_new(host, mode)?;
            self.keep(root, parent, false);
            return Ok(f);
        }
        root.create_new(host, mode)
    }

    /// [`AgentFiles::remove_file`] of `host`: one `unlinkat` in its kept directory.
    /// `Ok(false)` when it did not exist.
    ///
    /// # Errors
    /// As [`AgentFiles::remove_file`] (a directory gives `EISDIR`).
    pub fn remove_file(&self, files: &AgentFiles<'_>, host: &Path) -> Result<bool, RootError> {
        let root = files.root;
        if let Some((parent, name)) = split(host) {
            let mut dirs = self.lock();
            if let Some(d) = live(&mut dirs, parent, self.steps()) {
                // SAFETY: valid descriptor and name.
                return match cvt(unsafe { libc::unlinkat(d.fd.as_raw_fd(), name.as_ptr(), 0) }) {
                    Ok(_) => Ok(true),
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
                    Err(e) => Err(Self::err(root, "remove", host, e)),
                };
            }
            drop(dirs);
            let r = root.remove_file(host)?;
            self.keep(root, parent, false);
            return Ok(r);
        }
        root.remove_file(host)
    }

    /// Replace `host` with `data` atomically and durably, as [`AgentFiles::write_atomic`]
    /// with mode 0644 does (see the module docs), relative to its kept directory. Side
    /// effects: the temporary file, the rename, two `fsync`s; missing directories are
    /// created (0755) by the first write into them.
    ///
    /// # Errors
    /// A [`RootError`] naming `host` (operation `write`): creation, write, `fsync` or rename
    /// failure; the destination is then unchanged and the temporary removed.
    pub fn write(&self, files: &AgentFiles<'_>, host: &Path, data: &[u8]) -> Result<(), RootError> {
        let root = files.root;
        let Some((parent, name)) = split(host) else {
            return root.write_atomic(host, data, None);
        };
        let mut dirs = self.lock();
        let Some(d) = live(&mut dirs, parent, self.steps()).filter(|d| d.swept) else {
            drop(dirs);
            root.write_atomic(host, data, Some(FILE_MODE))?;
            self.keep(root, parent, true);
            return Ok(());
        };
        let err = |e| Self::err(root, "write", host, e);
        match existing(&d.fd, &name).map_err(err)? {
            Existing::Other => {
                drop(dirs);
                root.write_atomic(host, data, Some(FILE_MODE))
            }
            Existing::None | Existing::File => write_at(&d.fd, &name, data).map_err(err),
        }
    }
}

/// What is at `name` in `dir`, not following a symlink: one `fstatat`.
fn existing(dir: &File, name: &CString) -> io::Result<Existing> {
    // SAFETY: an all-zero `stat` is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor, NUL-terminated name, a `stat` to fill; the result is checked.
    match cvt(unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    }) {
        Ok(_) if st.st_mode & libc::S_IFMT == libc::S_IFREG => Ok(Existing::File),
        Ok(_) => Ok(Existing::Other),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(Existing::None),
        // Something the root's operation reports.
        Err(_) => Ok(Existing::Other),
    }
}

/// The atomic write in `dir`: temporary, content, mode 0644, fsync, rename over `name`,
/// fsync of `dir`. The temporary is removed on failure.
fn write_at(dir: &File, name: &CString, data: &[u8]) -> io::Result<()> {
    let dirfd = dir.as_raw_fd();
    let (tmp, mut f) = {
        let mut attempt = 0;
        loop {
            let tmp = CString::new(super::tmp_name()).map_err(io::Error::other)?;
            let flags =
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
            // SAFETY: valid descriptor and name; mode for O_CREAT; the result is checked.
            match cvt(unsafe { libc::openat(dirfd, tmp.as_ptr(), flags, 0o600) }) {
                // SAFETY: a fresh descriptor we own.
                Ok(fd) => break (tmp, unsafe { File::from_raw_fd(fd) }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 8 => {
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    };
    let result = (|| -> io::Result<()> {
        f.write_all(data)?;
        // Mode, then the file's fsync before its rename.
        super::settle_replacement(&f, None, None, None, false, FILE_MODE).map_err(|(_, e)| e)?;
        // SAFETY: valid descriptors and NUL-terminated single-component names.
        cvt(unsafe { libc::renameat(dirfd, tmp.as_ptr(), dirfd, name.as_ptr()) })?;
        // Best effort, as `write_atomic`'s directory fsync (some filesystems refuse).
        let _ = dir.sync_all();
        Ok(())
    })();
    if result.is_err() {
        // SAFETY: valid descriptor and name.
        unsafe { libc::unlinkat(dirfd, tmp.as_ptr(), 0) };
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::fs::symlink;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    /// A host root in a temp dir and a run's kept directories over it.
    struct Run {
        t: tempfile::TempDir,
        root: HostRoot,
        dirs: RunDirs,
    }

    impl Run {
        fn new() -> Run {
            let t = tempfile::tempdir().unwrap();
            let root = HostRoot::open(t.path()).unwrap();
            Run {
                t,
                root,
                dirs: RunDirs::default(),
            }
        }

        /// The agent-side path of `rel` under the root.
        fn at(&self, rel: &str) -> PathBuf {
            self.t.path().join(rel)
        }

        /// [`RunDirs::write`] of `data` to the host path `host`.
        fn try_write(&self, host: &str, data: &[u8]) -> Result<(), RootError> {
            self.dirs
                .write(&AgentFiles::new(&self.root), Path::new(host), data)
        }

        /// [`RunDirs::write`], which must succeed.
        fn write(&self, host: &str, data: &[u8]) {
            self.try_write(host, data).unwrap();
        }

        /// [`RunDirs::create_new`] of the host path `host` with `mode`.
        fn create_new(&self, host: &str, mode: u32) -> Result<File, RootError> {
            self.dirs
                .create_new(&AgentFiles::new(&self.root), Path::new(host), mode)
        }

        /// [`RunDirs::remove_file`] of the host path `host`, which must not fail.
        fn remove_file(&self, host: &str) -> bool {
            self.dirs
                .remove_file(&AgentFiles::new(&self.root), Path::new(host))
                .unwrap()
        }

        /// [`RunDirs::exists`] of the host path `host`, which must not fail.
        fn exists(&self, host: &str) -> bool {
            self.dirs.exists(&self.root, Path::new(host)).unwrap()
        }

        /// How many directories the run keeps.
        fn kept(&self) -> usize {
            self.dirs.dirs.lock().unwrap().len()
        }
    }

    #[test]
    fn flags_in_one_directory_are_written_like_write_atomic() {
        let r = Run::new();
        let d = r.at("state/flags/pkg/1.0");
        // The first write creates the directories and keeps the directory's descriptor.
        r.write("/state/flags/pkg/1.0/a.sh_X", b"one");
        assert_eq!(r.kept(), 1);
        r.write("/state/flags/pkg/1.0/b.sh_Y", b"two");
        assert_eq!(std::fs::read(d.join("a.sh_X")).unwrap(), b"one");
        assert_eq!(std::fs::read(d.join("b.sh_Y")).unwrap(), b"two");
        assert_eq!(mode(&d.join("b.sh_Y")), 0o644, "a new flag is 0644");
        // A rewrite is 0644 too (the agent's own file: an old mode is not carried over); no
        // temporary is left.
        std::fs::set_permissions(d.join("a.sh_X"), std::fs::Permissions::from_mode(0o600)).unwrap();
        r.write("/state/flags/pkg/1.0/a.sh_X", b"three");
        assert_eq!(std::fs::read(d.join("a.sh_X")).unwrap(), b"three");
        assert_eq!(mode(&d.join("a.sh_X")), 0o644);
        assert_eq!(names(&d), ["a.sh_X", "b.sh_Y"]);
        assert_eq!(r.kept(), 1);
    }

    /// A kept directory removed during the run (a step deleting its package's flags or
    /// logs) is not written into: the write goes through the root, which re-creates it, and
    /// the file is where the path says (not in the deleted directory, where it would be
    /// lost). Creating a log and checking a flag do the same.
    #[test]
    fn a_kept_directory_removed_during_the_run_is_created_again() {
        let r = Run::new();
        let d = r.at("state/flags/pkg/1.0");
        r.write("/state/flags/pkg/1.0/a", b"one");
        r.write("/state/flags/pkg/1.0/b", b"two");
        // Removed by a step: the next operation in the directory after the step sees it.
        std::fs::remove_dir_all(r.at("state")).unwrap();
        r.dirs.step_ran();
        assert!(!r.exists("/state/flags/pkg/1.0/a"));
        r.write("/state/flags/pkg/1.0/c", b"three");
        assert_eq!(names(&d), ["c"]);
        assert_eq!(std::fs::read(d.join("c")).unwrap(), b"three");
        // The new directory is kept in turn.
        r.write("/state/flags/pkg/1.0/d", b"four");
        assert_eq!(names(&d), ["c", "d"]);
        let logs = r.at("log");
        std::fs::create_dir(&logs).unwrap();
        drop(r.create_new("/log/x.log", 0o644).unwrap());
        std::fs::remove_dir_all(&logs).unwrap();
        std::fs::create_dir(&logs).unwrap();
        r.dirs.step_ran();
        drop(r.create_new("/log/y.log", 0o644).unwrap());
        assert_eq!(names(&logs), ["y.log"]);
    }

    #[test]
    fn a_symlinked_flag_is_replaced_at_its_target_inside_the_root() {
        let r = Run::new();
        let d = r.at("flags");
        r.write("/flags/first", b"x");
        // An absolute link: resolved inside the root (as `write_atomic` does), never on the
        // agent's own filesystem.
        std::fs::create_dir(r.at("elsewhere")).unwrap();
        symlink("/elsewhere/target", d.join("link")).unwrap();
        r.write("/flags/link", b"through");
        assert_eq!(std::fs::read(r.at("elsewhere/target")).unwrap(), b"through");
        assert!(
            std::fs::symlink_metadata(d.join("link"))
                .unwrap()
                .is_symlink()
        );
        assert_eq!(names(&d), ["first", "link"]);
    }

    #[test]
    fn a_directory_at_the_flag_name_is_an_error_naming_the_flag() {
        let r = Run::new();
        r.write("/flags/first", b"x");
        std::fs::create_dir(r.at("flags/taken")).unwrap();
        let e = r.try_write("/flags/taken", b"y").unwrap_err();
        assert_eq!(e.path, Path::new("/flags/taken"));
        assert_eq!(names(&r.at("flags")), ["first", "taken"]);
    }

    #[test]
    fn exists_create_and_remove_through_the_kept_directory() {
        let r = Run::new();
        let d = r.at("log/pkg");
        std::fs::create_dir_all(&d).unwrap();
        // The first operation goes through the root and keeps the directory.
        assert!(!r.exists("/log/pkg/a.log"));
        assert_eq!(r.kept(), 1);
        let mut f = r.create_new("/log/pkg/a.log", 0o640).unwrap();
        f.write_all(b"hello").unwrap();
        drop(f);
        assert_eq!(std::fs::read(d.join("a.log")).unwrap(), b"hello");
        assert_eq!(mode(&d.join("a.log")), 0o640);
        let taken = r.create_new("/log/pkg/a.log", 0o640).unwrap_err();
        assert_eq!(taken.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(taken.path, Path::new("/log/pkg/a.log"));
        assert!(r.exists("/log/pkg/a.log"));
        assert!(r.remove_file("/log/pkg/a.log"));
        assert!(!r.remove_file("/log/pkg/a.log"));
        assert!(!r.exists("/log/pkg/a.log"));
        // A symlink at the name is never followed by the descriptor calls: `exists` asks the
        // root (inside it, `/etc/x` is missing), `create_new` refuses the taken name.
        symlink("/etc/x", d.join("l")).unwrap();
        assert!(!r.exists("/log/pkg/l"));
        std::fs::create_dir(r.at("etc")).unwrap();
        std::fs::write(r.at("etc/x"), b"").unwrap();
        assert!(r.exists("/log/pkg/l"));
        let e = r.create_new("/log/pkg/l", 0o644).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert!(r.remove_file("/log/pkg/l"));
        assert!(r.at("etc/x").exists(), "the link went, not its target");
        assert_eq!(names(&d), Vec::<String>::new());
        assert_eq!(r.kept(), 1);
    }

    #[test]
    fn the_first_write_into_a_kept_directory_still_sweeps_stale_temporaries() {
        let r = Run::new();
        let d = r.at("flags");
        std::fs::create_dir(&d).unwrap();
        // A temporary of the old `<pid>-<n>` shape with this process's pid: stale by
        // `is_stale_tmp` (no writer of this process is running).
        let stale = format!("{}{}-7", crate::host::root::TMP_PREFIX, std::process::id());
        std::fs::write(d.join(&stale), b"partial").unwrap();
        // Kept by a stat, not yet written: the first write goes through `write_atomic`.
        assert!(!r.exists("/flags/f"));
        assert!(!r.dirs.lock()[Path::new("/flags")].swept);
        r.write("/flags/f", b"1");
        assert!(r.dirs.lock()[Path::new("/flags")].swept);
        r.write("/flags/g", b"2");
        assert_eq!(names(&d), ["f", "g"]);
    }

    #[test]
    fn a_cloned_root_is_the_same_confined_root() {
        let Run { t, root, .. } = Run::new();
        let clone = root.try_clone().unwrap();
        assert_eq!(clone.mount(), root.mount());
        clone.write_atomic(Path::new("/etc/f"), b"x", None).unwrap();
        assert_eq!(root.read(Path::new("/etc/f")).unwrap(), b"x");
        symlink("/../../etc", t.path().join("up")).unwrap();
        assert!(
            clone.exists(Path::new("/up/f")).unwrap(),
            "resolved inside the root"
        );
        drop(root);
        assert_eq!(
            clone.read(Path::new("/etc/f")).unwrap(),
            b"x",
            "its own descriptor"
        );
    }
}
