//! [`HostRoot::remove_all`] and [`HostRoot::mounts_below`]: a tree removal that stays on the
//! path's own mount (`rm -r --one-file-system`), so a filesystem mounted below the path (a
//! kubelet volume, a data disk, a bind mount of the same device) is never emptied.
//!
//! A directory is another mount when `statx(2)` says it is a mount root
//! (`STATX_ATTR_MOUNT_ROOT`), or its mount id (`STATX_MNT_ID`) or device differs from its
//! parent's. The walk opens each directory relative to its parent's descriptor with
//! `O_NOFOLLOW`, so it never follows a symlink and never leaves the tree it started in, and
//! removes each entry with `unlinkat(2)` on that descriptor (as `rm -rf` does): an entry
//! `getdents64` types as no directory costs the removal one system call and the check none;
//! a directory (or an untyped entry) is `statx`ed for the mount check.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::dir::{Dir, Type};
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use nix::unistd::{UnlinkatFlags, unlinkat};
use pathrs::flags::OpenFlags;

use super::{HostRoot, Result, split};

/// Directory levels walked at most (deeper trees fail with `ELOOP` rather than exhaust the
/// stack).
const MAX_DEPTH: usize = 1024;

/// What the mount checks need of one entry.
#[derive(Clone, Copy)]
struct Ident {
    dir: bool,
    dev: (u32, u32),
    mnt_id: Option<u64>,
    mount_root: bool,
}

impl Ident {
    /// True when `self`, an entry of the directory `parent`, is the root of another mount.
    fn crosses_from(&self, parent: &Ident) -> bool {
        self.mount_root
            || self.dev != parent.dev
            || matches!((self.mnt_id, parent.mnt_id), (Some(a), Some(b)) if a != b)
    }
}

/// `statx` of `name` in `dir` without following a final symlink; `""` is `dir` itself.
fn ident(dir: impl AsFd, name: &CStr) -> io::Result<Ident> {
    let mut flags = libc::AT_SYMLINK_NOFOLLOW | libc::AT_NO_AUTOMOUNT;
    if name.is_empty() {
        flags |= libc::AT_EMPTY_PATH;
    }
    // SAFETY: `statx` is plain zeroable data, `name` is a NUL-terminated string that
    // outlives the call, and `buf` is a valid out-pointer.
    let mut buf: libc::statx = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::statx(
            dir.as_fd().as_raw_fd(),
            name.as_ptr(),
            flags,
            libc::STATX_TYPE | libc::STATX_MNT_ID,
            &mut buf,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let root_attr = libc::STATX_ATTR_MOUNT_ROOT as u64;
    Ok(Ident {
        dir: u32::from(buf.stx_mode) & libc::S_IFMT == libc::S_IFDIR,
        dev: (buf.stx_dev_major, buf.stx_dev_minor),
        mnt_id: (buf.stx_mask & libc::STATX_MNT_ID != 0).then_some(buf.stx_mnt_id),
        mount_root: buf.stx_attributes_mask & root_attr != 0 && buf.stx_attributes & root_attr != 0,
    })
}

/// The directory `name` in `dir`, opened for listing (`O_NOFOLLOW`: a symlink put in its
/// place fails with `ELOOP`/`ENOTDIR`, never followed).
fn open_dir_at(dir: impl AsFd, name: &CStr) -> io::Result<Dir> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    Ok(Dir::openat(dir, name, flags, Mode::empty())?)
}

/// The entries of `dir` (not `.` and `..`), sorted by name, with the type `getdents64`
/// gave (`None`: unknown, the filesystem does not say).
fn names(dir: &mut Dir) -> io::Result<Vec<(CString, Option<Type>)>> {
    let mut out = Vec::new();
    for e in dir.iter() {
        let e = e?;
        let name = e.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        out.push((name.to_owned(), e.file_type()));
    }
    out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// A walk of a tree: the host paths of the mount points it did not descend into; whether it
/// removes the rest.
struct Walk {
    mounts: Vec<PathBuf>,
    remove: bool,
}

impl Walk {
    /// Visit the directory `dir` (host path `host`, identity `me`): record the mounts below it
    /// and, when removing, remove everything else. Returns whether `dir` is now empty.
    fn dir(&mut self, dir: &mut Dir, host: &Path, me: &Ident, depth: usize) -> io::Result<bool> {
        if depth > MAX_DEPTH {
            return Err(io::Error::from_raw_os_error(libc::ELOOP));
        }
        let mut empty = true;
        for (name, kind) in names(dir)? {
            // Only a directory can hold a mount to refuse; an entry typed as anything else
            // needs no `statx` (unlinking a file bind-mounted over fails with `EBUSY`).
            let id = match kind {
                Some(t) if t != Type::Directory => None,
                _ => match ident(&*dir, &name) {
                    Ok(id) if id.dir => Some(id),
                    Ok(_) => None,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                },
            };
            let Some(id) = id else {
                if self.remove {
                    remove_entry(&*dir, &name, false)?;
                }
                continue;
            };
            let child = host.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
            if id.crosses_from(me) {
                self.mounts.push(child);
                empty = false;
                continue;
            }
            let mut sub = open_dir_at(&*dir, &name)?;
            let sub_empty = self.dir(&mut sub, &child, &id, depth + 1)?;
            drop(sub);
            if self.remove && sub_empty {
                remove_entry(&*dir, &name, true)?;
            } else {
                empty = false;
            }
        }
        Ok(empty)
    }
}

/// `unlinkat(dir, name)` (`AT_REMOVEDIR` for a directory); already gone is fine.
fn remove_entry(dir: impl AsFd, name: &CStr, is_dir: bool) -> io::Result<()> {
    let flag = match is_dir {
        true => UnlinkatFlags::RemoveDir,
        false => UnlinkatFlags::NoRemoveDir,
    };
    match unlinkat(dir, name, flag) {
        Ok(()) | Err(nix::errno::Errno::ENOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The error of a removal that met mount points: `EBUSY`, naming them.
fn mounts_error(mounts: &[PathBuf], removed: bool) -> io::Error {
    let list: Vec<String> = mounts.iter().map(|m| m.display().to_string()).collect();
    io::Error::new(
        io::ErrorKind::ResourceBusy,
        format!(
            "{} {} (another filesystem or a bind mount), not descended into; {}",
            list.join(", "),
            if list.len() == 1 {
                "is a mount point"
            } else {
                "are mount points"
            },
            if removed {
                "everything else was removed"
            } else {
                "nothing was removed"
            }
        ),
    )
}

impl HostRoot {
    /// The mount points at or below `host` (host paths, in walk order): directories on
    /// another mount than their parent — `host` itself when it is one. Symlinks are not
    /// followed; empty when `host` does not exist or is not a directory.
    ///
    /// # Errors
    /// Resolution, `statx` or listing failures (`ELOOP` past 1024 levels).
    pub fn mounts_below(&self, host: &Path) -> Result<Vec<PathBuf>> {
        self.walk(host, false).map(|(_, w)| w.mounts)
    }

    /// Remove a tree (like `rm -rf --one-file-system`): a symlink itself, not its target;
    /// `Ok(false)` when it did not exist.
    ///
    /// Nothing is removed when a mount point is at or below `host` ([`mounts_below`]): the
    /// error (`EBUSY`) names them. A mount appearing during the removal is not descended
    /// into either; the error then says everything else was removed.
    ///
    /// # Errors
    /// Mount points as above; any other failure than "not found".
    ///
    /// [`mounts_below`]: HostRoot::mounts_below
    pub(in crate::host::seam) fn remove_all(&self, host: &Path) -> Result<bool> {
        let (existed, found) = self.walk(host, false)?;
        if !existed {
            return Ok(false);
        }
        if !found.mounts.is_empty() {
            return Err(self.err("remove", host, mounts_error(&found.mounts, false)));
        }
        let (_, done) = self.walk(host, true)?;
        if !done.mounts.is_empty() {
            return Err(self.err("remove", host, mounts_error(&done.mounts, true)));
        }
        Ok(true)
    }

    /// Remove a tree already checked for mounts, with one walk: a mount met (made since)
    /// is not descended into, and the error (`EBUSY`) names it after the rest is removed.
    /// For a tree the caller moved where no mount can be made meanwhile (the undo
    /// journal's moved-aside paths, in its own directory).
    ///
    /// # Errors
    /// Mount points as above; any other failure than "not found".
    pub(in crate::host::seam) fn remove_all_checked(&self, host: &Path) -> Result<bool> {
        let (existed, done) = self.walk(host, true)?;
        if !done.mounts.is_empty() {
            return Err(self.err("remove", host, mounts_error(&done.mounts, true)));
        }
        Ok(existed)
    }

    /// What [`remove_all`](HostRoot::remove_all) would refuse, without removing anything:
    /// the `EBUSY` error naming the mount points at or below `host`.
    ///
    /// # Errors
    /// Mount points; resolution, `statx` or listing failures.
    pub(in crate::host::seam) fn remove_all_check(&self, host: &Path) -> Result<()> {
        let mounts = self.mounts_below(host)?;
        if mounts.is_empty() {
            Ok(())
        } else {
            Err(self.err("remove", host, mounts_error(&mounts, false)))
        }
    }

    /// Walk `host` (removing it when `remove`); `(false, _)` when it did not exist.
    fn walk(&self, host: &Path, remove: bool) -> Result<(bool, Walk)> {
        const OP: &str = "remove";
        self.check_abs(OP, host)?;
        let host = &super::normalize(host);
        let mut walk = Walk {
            mounts: Vec::new(),
            remove,
        };
        let Ok((parent, name)) = split(host) else {
            return Err(self.err(
                OP,
                host,
                io::Error::new(io::ErrorKind::InvalidInput, "refusing to remove /"),
            ));
        };
        let pdir = match self.open_with(OP, &parent, OpenFlags::O_RDONLY | OpenFlags::O_DIRECTORY) {
            Ok(d) => d,
            Err(e) if e.is_not_found() => return Ok((false, walk)),
            Err(e) => return Err(e),
        };
        let err = |e| self.err(OP, host, e);
        let name = CString::new(name.as_bytes())
            .map_err(|_| err(io::Error::from_raw_os_error(libc::EINVAL)))?;
        let pid = ident(&pdir, c"").map_err(err)?;
        let id = match ident(&pdir, &name) {
            Ok(id) => id,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((false, walk)),
            Err(e) => return Err(err(e)),
        };
        if id.dir && id.crosses_from(&pid) {
            walk.mounts.push(host.to_path_buf());
            return Ok((true, walk));
        }
        if id.dir {
            let mut dir = open_dir_at(&pdir, &name).map_err(err)?;
            let empty = walk.dir(&mut dir, host, &id, 0).map_err(err)?;
            drop(dir);
            if !empty || !remove {
                return Ok((true, walk));
            }
        } else if !remove {
            return Ok((true, walk));
        }
        remove_entry(&pdir, &name, id.dir).map_err(err)?;
        Ok((true, walk))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::ExecMode;
    use crate::host::testutil::{TestHost, in_mount_namespace};
    use nix::mount::{MsFlags, mount};

    fn tmpfs(at: &Path) {
        std::fs::create_dir_all(at).unwrap();
        mount(
            Some("tmpfs"),
            at,
            Some("tmpfs"),
            MsFlags::empty(),
            None::<&str>,
        )
        .unwrap();
    }

    fn bind(from: &Path, at: &Path) {
        std::fs::create_dir_all(at).unwrap();
        mount(Some(from), at, None::<&str>, MsFlags::MS_BIND, None::<&str>).unwrap();
    }

    #[test]
    fn remove_all_leaves_a_filesystem_mounted_below_and_names_it() {
        in_mount_namespace(|| {
            let t = TestHost::new();
            t.file("/data/keep.txt", "x");
            tmpfs(&t.p("/data/sub/vol"));
            t.file("/data/sub/vol/volume-data", "precious");
            // A bind mount of the same filesystem: same device, another mount.
            t.file("/elsewhere/bound/file", "bound");
            bind(&t.p("/elsewhere/bound"), &t.p("/data/bind"));
            let root = HostRoot::open(&t.root).unwrap();
            assert_eq!(
                root.mounts_below(Path::new("/data")).unwrap(),
                [Path::new("/data/bind"), Path::new("/data/sub/vol")]
            );
            let e = root.remove_all(Path::new("/data")).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::ResourceBusy);
            assert_eq!(
                e.source.to_string(),
                "/data/bind, /data/sub/vol are mount points (another filesystem or a bind mount), not descended into; nothing was removed"
            );
            assert_eq!(t.read("/data/sub/vol/volume-data"), "precious");
            assert_eq!(t.read("/data/bind/file"), "bound");
            assert_eq!(t.read("/data/keep.txt"), "x");

            // Plan, check and apply of fs::remove_all refuse alike, changing nothing.
            for mode in [ExecMode::Plan, ExecMode::Check, ExecMode::Apply] {
                let mut h = t.host(mode);
                let e = crate::host::files::fs::remove_all(&mut h, "/data/sub").unwrap_err();
                assert_eq!(
                    e.to_string(),
                    format!(
                        "failed to remove /data/sub under host root {}",
                        t.root.display()
                    ),
                    "{mode:?}"
                );
                let chain = format!("{:#}", anyhow_like(&e));
                assert!(
                    chain.contains("/data/sub/vol is a mount point (another filesystem or a bind mount), not descended into; nothing was removed"),
                    "{mode:?}: {chain}"
                );
            }
            assert_eq!(t.read("/data/sub/vol/volume-data"), "precious");

            // The mount point itself is not emptied either.
            let e = root.remove_all(Path::new("/data/sub/vol")).unwrap_err();
            assert!(
                e.source
                    .to_string()
                    .starts_with("/data/sub/vol is a mount point"),
                "{e:?}"
            );
            assert_eq!(t.read("/data/sub/vol/volume-data"), "precious");

            // Without mounts the tree goes, symlinks removed and not followed.
            std::fs::create_dir_all(t.p("/data2")).unwrap();
            std::os::unix::fs::symlink(t.p("/elsewhere"), t.p("/data2/link")).unwrap();
            t.file("/data2/a/b/c", "c");
            assert!(root.remove_all(Path::new("/data2")).unwrap());
            assert!(!t.p("/data2").exists());
            assert_eq!(t.read("/elsewhere/bound/file"), "bound");
            assert!(!root.remove_all(Path::new("/data2")).unwrap());
        });
    }

    /// Kernel filesystems give their real cause: a write to a `/proc/sys` file cannot be an
    /// atomic replacement (not "No such file or directory"), and a removal on a read-only
    /// sysfs fails with `EROFS` (not "Not a directory").
    #[test]
    fn procfs_writes_and_read_only_sysfs_removals_name_the_real_cause() {
        in_mount_namespace(|| {
            let t = TestHost::new();
            std::fs::create_dir_all(t.p("/proc")).unwrap();
            std::fs::create_dir_all(t.p("/sys")).unwrap();
            mount(
                Some("proc"),
                &t.p("/proc"),
                Some("proc"),
                MsFlags::empty(),
                None::<&str>,
            )
            .unwrap();
            mount(
                Some("sysfs"),
                &t.p("/sys"),
                Some("sysfs"),
                MsFlags::MS_RDONLY,
                None::<&str>,
            )
            .unwrap();
            let mut h = t.host(ExecMode::Apply);
            // A read-only key: even a write that got through would change nothing.
            let e = crate::host::files::fs::write(
                &mut h,
                "/proc/sys/kernel/osrelease",
                "x\n",
                &crate::host::files::fs::WriteOptions::default(),
            )
            .unwrap_err();
            assert_eq!(
                anyhow_like(&e),
                format!(
                    "failed to write /proc/sys/kernel/osrelease under host root {}: /proc/sys/kernel is on procfs, whose files are kernel settings, not regular files on a writable filesystem: they cannot be replaced atomically (use sysctl::set for /proc/sys keys)",
                    t.root.display()
                )
            );
            let root = HostRoot::open(&t.root).unwrap();
            let e = root.remove_all(Path::new("/sys/kernel")).unwrap_err();
            assert_eq!(e.source.raw_os_error(), Some(libc::EROFS), "{e:?}");
            assert!(t.p("/sys/kernel").is_dir());
        });
    }

    /// The error and its sources, one per line.
    fn anyhow_like(e: &dyn std::error::Error) -> String {
        let mut out = e.to_string();
        let mut cur = e.source();
        while let Some(s) = cur {
            out.push_str(": ");
            out.push_str(&s.to_string());
            cur = s.source();
        }
        out
    }
}
