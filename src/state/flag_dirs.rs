//! Step flags written relative to their directory's descriptor, opened once per run.
//!
//! [`HostRoot::write_atomic`] resolves the destination inside the root about six times per
//! write (symlink check, `stat`, the old file, the temporary, the rename, the directory
//! fsync), and each confined resolution is the most expensive thing an agent step does
//! after its `fork` (pathrs checks every step of the walk). A run writes one flag per step,
//! mostly into one directory (`<state root>/flags/<pkg>/<ver>`), so [`FlagDirs`] resolves
//! each flag directory once, through the root, keeps its descriptor for the run, and writes
//! every flag in it with `*at` calls on names that are single components: nothing is
//! resolved again, and nothing can leave the root (a symlink at the flag's name is never
//! followed: such a flag, and anything that is not a regular file, goes through
//! [`HostRoot::write_atomic`] as before).
//!
//! The write is the same as [`HostRoot::write_atomic`]'s: a temporary file beside the flag
//! (the same name shape, so a crashed writer's leftovers are swept the same way), the
//! content, the old flag's owner, extended attributes and mode kept (0644 for a new flag),
//! `fsync` of the file, `rename` over the flag, `fsync` of the directory; on failure the
//! temporary is removed and the flag is unchanged. So the flag's content is durable before
//! its rename and the rename before the next step starts.
//!
//! The first flag written into a directory in a run goes through
//! [`HostRoot::write_atomic`] (which creates missing directories and sweeps stale
//! temporaries there), then the directory is opened. A directory replaced by another
//! process during the run would be written through its old descriptor: the package lock
//! keeps other agents out for the run, which is as long as [`FlagDirs`] lives.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::host::root::{HostRoot, RootError};

/// Mode of a new flag (as [`HostRoot::write_atomic`] gives a new file).
const NEW_FLAG_MODE: u32 = 0o644;

/// The flag directories of one run, each resolved once (see the module docs). Start with
/// [`FlagDirs::default`]; use one per run and per [`HostRoot`].
#[derive(Debug, Default)]
pub struct FlagDirs {
    /// By directory (host path): its open descriptor (`O_RDONLY | O_DIRECTORY`).
    dirs: Mutex<HashMap<PathBuf, File>>,
}

/// What is at the flag's name, seen through the directory.
enum Existing {
    /// Nothing.
    None,
    /// A regular file, open for reading (its metadata and extended attributes are kept).
    File(File),
    /// A symlink or anything else: [`HostRoot::write_atomic`]'s case.
    Other,
}

impl FlagDirs {
    /// Replace `host` (a flag or other small state file) with `data` atomically and durably,
    /// as [`HostRoot::write_atomic`] with no mode does, writing relative to the descriptor of
    /// `host`'s directory kept for this run (opened through `root` on the first write
    /// there). Side effects: the temporary file, the rename, two `fsync`s; missing
    /// directories are created (0755) on the first write into them.
    ///
    /// # Errors
    /// A [`RootError`] naming `host` (operation `write`): creation, write, `fsync` or rename
    /// failure; the flag is then unchanged and the temporary removed.
    pub fn write(&self, root: &HostRoot, host: &Path, data: &[u8]) -> Result<(), RootError> {
        let (Some(parent), Some(name)) = (host.parent(), host.file_name()) else {
            return root.write_atomic(host, data, None);
        };
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        let Some(dir) = dirs.get(parent) else {
            root.write_atomic(host, data, None)?;
            // Later writes go through the directory; if it cannot be opened they keep
            // taking the path above.
            if let Ok(d) = root.open_read(parent)
                && d.metadata().is_ok_and(|m| m.is_dir())
            {
                dirs.insert(parent.to_path_buf(), d);
            }
            return Ok(());
        };
        let err = |source: io::Error| RootError {
            op: "write",
            path: host.to_path_buf(),
            root: root.mount().to_path_buf(),
            source,
        };
        let name = CString::new(name.as_bytes()).map_err(|_| {
            err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "file name contains a NUL byte",
            ))
        })?;
        match existing(dir, &name).map_err(err)? {
            Existing::Other => {
                drop(dirs);
                root.write_atomic(host, data, None)
            }
            Existing::None => write_at(dir, &name, data, None).map_err(err),
            Existing::File(old) => write_at(dir, &name, data, Some(&old)).map_err(err),
        }
    }
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Open `name` in `dir` without following a symlink and without blocking on a FIFO.
fn existing(dir: &File, name: &CString) -> io::Result<Existing> {
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    // SAFETY: a valid directory descriptor and NUL-terminated name; the result is checked.
    match cvt(unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) }) {
        // SAFETY: a fresh descriptor we own.
        Ok(fd) => {
            let f = unsafe { File::from_raw_fd(fd) };
            if f.metadata()?.is_file() {
                Ok(Existing::File(f))
            } else {
                Ok(Existing::Other)
            }
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(Existing::None),
        // A symlink (O_NOFOLLOW), or something that cannot be opened this way.
        Err(_) => Ok(Existing::Other),
    }
}

/// The atomic write in `dir`: temporary, content, owner, extended attributes and mode of
/// `old` (or 0644), fsync, rename over `name`, fsync of `dir`. The temporary is removed on
/// failure.
fn write_at(dir: &File, name: &CString, data: &[u8], old: Option<&File>) -> io::Result<()> {
    let dirfd = dir.as_raw_fd();
    let (tmp, mut f) = {
        let mut attempt = 0;
        loop {
            let tmp = CString::new(crate::host::root::tmp_name()).map_err(io::Error::other)?;
            let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
            // SAFETY: valid descriptor and name; mode for O_CREAT; the result is checked.
            match cvt(unsafe {
                libc::openat(dirfd, tmp.as_ptr(), flags | libc::O_CLOEXEC, 0o600)
            }) {
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
        let mut mode = NEW_FLAG_MODE;
        if let Some(old) = old {
            let m = old.metadata()?;
            mode = m.mode() & 0o7777;
            // Keeping the old owner is best effort, as in `write_atomic_owned`.
            let _ = nix::unistd::fchown(&f, Some(m.uid().into()), Some(m.gid().into()));
            crate::host::root::copy_xattrs(old, &f)?;
        }
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
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

    #[test]
    fn flags_in_one_directory_are_written_like_write_atomic() {
        let t = tempfile::tempdir().unwrap();
        let root = HostRoot::open(t.path()).unwrap();
        let dirs = FlagDirs::default();
        let d = t.path().join("state/flags/pkg/1.0");
        // The first write creates the directories and keeps the directory's descriptor.
        dirs.write(&root, Path::new("/state/flags/pkg/1.0/a.sh_X"), b"one")
            .unwrap();
        assert_eq!(dirs.dirs.lock().unwrap().len(), 1);
        dirs.write(&root, Path::new("/state/flags/pkg/1.0/b.sh_Y"), b"two")
            .unwrap();
        assert_eq!(std::fs::read(d.join("a.sh_X")).unwrap(), b"one");
        assert_eq!(std::fs::read(d.join("b.sh_Y")).unwrap(), b"two");
        assert_eq!(mode(&d.join("b.sh_Y")), 0o644, "a new flag is 0644");
        // Rewriting keeps the old file's mode; no temporary is left.
        std::fs::set_permissions(d.join("a.sh_X"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        dirs.write(&root, Path::new("/state/flags/pkg/1.0/a.sh_X"), b"three")
            .unwrap();
        assert_eq!(std::fs::read(d.join("a.sh_X")).unwrap(), b"three");
        assert_eq!(mode(&d.join("a.sh_X")), 0o600);
        assert_eq!(names(&d), ["a.sh_X", "b.sh_Y"]);
        assert_eq!(dirs.dirs.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_symlinked_flag_is_replaced_at_its_target_inside_the_root() {
        let t = tempfile::tempdir().unwrap();
        let root = HostRoot::open(t.path()).unwrap();
        let dirs = FlagDirs::default();
        let d = t.path().join("flags");
        dirs.write(&root, Path::new("/flags/first"), b"x").unwrap();
        // An absolute link: resolved inside the root (as `write_atomic` does), never on the
        // agent's own filesystem.
        std::fs::create_dir(t.path().join("elsewhere")).unwrap();
        symlink("/elsewhere/target", d.join("link")).unwrap();
        dirs.write(&root, Path::new("/flags/link"), b"through")
            .unwrap();
        assert_eq!(
            std::fs::read(t.path().join("elsewhere/target")).unwrap(),
            b"through"
        );
        assert!(std::fs::symlink_metadata(d.join("link")).unwrap().is_symlink());
        assert_eq!(names(&d), ["first", "link"]);
    }

    #[test]
    fn a_directory_at_the_flag_name_is_an_error_naming_the_flag() {
        let t = tempfile::tempdir().unwrap();
        let root = HostRoot::open(t.path()).unwrap();
        let dirs = FlagDirs::default();
        dirs.write(&root, Path::new("/flags/first"), b"x").unwrap();
        std::fs::create_dir(t.path().join("flags/taken")).unwrap();
        let e = dirs
            .write(&root, Path::new("/flags/taken"), b"y")
            .unwrap_err();
        assert_eq!(e.path, Path::new("/flags/taken"));
        assert_eq!(names(&t.path().join("flags")), ["first", "taken"]);
    }
}
