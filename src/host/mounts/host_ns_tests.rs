//! Tests of `mount::` in the host mount namespace ([`crate::host::root::mount_ns`]), without
//! touching this machine's mounts: each test runs on a thread of its own that first enters a private mount namespace
//! of its own ("ours"), where its bind mounts are made; the "host" namespace is one a child
//! makes (newer than ours, so its namespace file may be bound into ours), with the test's root
//! as its `/`.

use std::ffi::CString;
use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use nix::mount::{MntFlags, MsFlags};

use crate::host::ExecMode;
use crate::host::mounts::mount::{self, MountSpec, MountState};
use crate::host::root::HostRoot;
use crate::host::root::mount_ns::host_mount_ns;
use crate::host::testutil::{TestHost, in_mount_namespace};

/// Bind mounts made in our namespace, undone (lazily) when dropped, before the root is.
struct Binds(Vec<PathBuf>);

impl Binds {
    fn bind(&mut self, src: &Path, dst: &Path) {
        nix::mount::mount(Some(src), dst, None::<&str>, MsFlags::MS_BIND, None::<&str>)
            .unwrap_or_else(|e| panic!("bind {} on {}: {e}", src.display(), dst.display()));
        self.0.push(dst.to_path_buf());
    }
}

impl Drop for Binds {
    fn drop(&mut self) {
        for p in self.0.iter().rev() {
            let _ = nix::mount::umount2(p, MntFlags::MNT_DETACH);
        }
    }
}

/// A shell waiting on its stdin, `setup` run in its child before the exec; returned once it
/// runs (it printed `ready`). `what` names it if it cannot start.
///
/// # Safety
/// `setup` runs between fork and exec: as [`CommandExt::pre_exec`]'s closure, it may only
/// make system calls on what was prepared before the fork.
unsafe fn waiting_shell(
    what: &str,
    setup: impl FnMut() -> std::io::Result<()> + Send + Sync + 'static,
) -> Child {
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", "echo ready; read x || :"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    // SAFETY: the caller's (see above).
    unsafe { cmd.pre_exec(setup) };
    let mut child = cmd.spawn().expect(what);
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    child
}

/// A "host": a child in a new mount namespace whose `/` is `root` (bind, `pivot_root`) with
/// a procfs of its own at `/proc` and a tmpfs at each of `tmpfs` (paths in its new `/`),
/// waiting on its stdin. Returns it once it runs.
fn host_in(root: &Path, tmpfs: &[&str]) -> Child {
    let root_c = CString::new(root.as_os_str().as_bytes()).unwrap();
    let tmpfs: Vec<CString> = tmpfs.iter().map(|p| CString::new(*p).unwrap()).collect();
    // SAFETY: only system calls on strings prepared before the fork.
    unsafe {
        waiting_shell("start the host namespace", move || {
            let none = std::ptr::null::<libc::c_char>();
            let check = |rc: libc::c_long| match rc {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            };
            let dot = c".".as_ptr();
            check(libc::unshare(libc::CLONE_NEWNS).into())?;
            check(
                libc::mount(
                    none,
                    c"/".as_ptr(),
                    none,
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                )
                .into(),
            )?;
            check(
                libc::mount(
                    root_c.as_ptr(),
                    root_c.as_ptr(),
                    none,
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                )
                .into(),
            )?;
            check(libc::chdir(root_c.as_ptr()).into())?;
            check(libc::syscall(libc::SYS_pivot_root, dot, dot))?;
            check(libc::umount2(dot, libc::MNT_DETACH).into())?;
            check(libc::chdir(c"/".as_ptr()).into())?;
            check(
                libc::mount(
                    c"proc".as_ptr(),
                    c"/proc".as_ptr(),
                    c"proc".as_ptr(),
                    0,
                    std::ptr::null(),
                )
                .into(),
            )?;
            for at in &tmpfs {
                let tmpfs = c"tmpfs".as_ptr();
                check(libc::mount(tmpfs, at.as_ptr(), tmpfs, 0, std::ptr::null()).into())?;
            }
            Ok(())
        })
    }
}

/// Ends the host child: its stdin closed, it exits and is reaped.
fn end(mut child: Child) {
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
}

fn mounted_at(mountinfo: &Path, at: &Path) -> Option<mount::MountEntry> {
    let text = std::fs::read_to_string(mountinfo).unwrap();
    mount::parse_mountinfo(&text)
        .unwrap()
        .into_iter()
        .rev()
        .find(|e| e.mount_point == at)
}

fn tmpfs() -> MountSpec {
    MountSpec {
        source: "tmpfs".into(),
        fstype: "tmpfs".into(),
        options: "size=1m".into(),
        dump: 0,
        pass: 0,
        state: MountState::Mounted,
    }
}

/// With `<root>/proc/1/ns/mnt` naming another mount namespace, `mount::ensure`'s `mount`
/// runs there (unchrooted: that namespace's `/` is the root) and the tmpfs appears in that
/// namespace's mount table, not in ours; a second apply finds it mounted (the root's
/// `/proc/1/mountinfo` is that namespace's), and `mount::remove` unmounts it there.
/// (`<root>/proc/1` is a bind of the child's procfs directory, not of its namespace file
/// alone: the kernel lets a mount namespace file be bound only into an older namespace, and
/// on this kernel that order does not always hold between a thread's and a child's.)
#[test]
fn mount_runs_in_the_host_mount_namespace_when_it_is_not_ours() {
    in_mount_namespace(|| {
        let t = TestHost::new();
        t.install_sh();
        t.install("/usr/bin/mount");
        t.install("/usr/bin/umount");
        t.file("/etc/fstab", "# host fstab\n");
        std::fs::create_dir_all(t.p("/proc/1")).unwrap();
        let host = host_in(&t.root, &[]);
        // The root's /proc/1 is the host child's procfs directory, as in a pod with hostPID:
        // ns/mnt there is the magic link to its namespace, mountinfo its mount table.
        let proc_host = PathBuf::from(format!("/proc/{}", host.id()));
        let mut binds = Binds(Vec::new());
        binds.bind(&proc_host, &t.p("/proc/1"));
        // Should the tmpfs land in our namespace after all, it is undone with the binds.
        binds.0.push(t.p("/mnt/x"));

        let root = HostRoot::open(&t.root).unwrap();
        assert!(host_mount_ns(&root).unwrap().is_some());
        let mut h = t.host(ExecMode::Apply);
        assert!(mount::ensure(&mut h, "/mnt/x", &tmpfs()).unwrap());
        h.finish().unwrap();

        let there = mounted_at(&proc_host.join("mountinfo"), Path::new("/mnt/x"));
        assert_eq!(
            there.map(|e| (e.source, e.fstype)),
            Some(("tmpfs".to_string(), "tmpfs".to_string()))
        );
        let ours = Path::new("/proc/thread-self/mountinfo");
        assert_eq!(mounted_at(ours, &t.p("/mnt/x")), None);
        assert_eq!(mounted_at(ours, Path::new("/mnt/x")), None);

        let mut h = t.host(ExecMode::Apply);
        assert!(!mount::ensure(&mut h, "/mnt/x", &tmpfs()).unwrap());
        assert!(h.finish().unwrap().changes.is_empty());

        let mut h = t.host(ExecMode::Apply);
        assert!(mount::remove(&mut h, "/mnt/x").unwrap());
        h.finish().unwrap();
        assert_eq!(
            mounted_at(&proc_host.join("mountinfo"), Path::new("/mnt/x")),
            None
        );
        drop(binds);
        end(host);
    });
}

/// With `<root>/proc/1` a procfs directory of our own namespace (the agent on the host),
/// `mnt` there is a magic link, followed on procfs: it names our namespace, so `mount` runs
/// chrooted into the root as before (the recording stub inside the root is the one run).
#[test]
fn mount_runs_chrooted_when_the_host_namespace_is_ours() {
    in_mount_namespace(|| {
        let t = TestHost::new();
        t.install_sh();
        t.stub("mount", "exit 0");
        t.file("/etc/fstab", "# host fstab\n");
        std::fs::create_dir_all(t.p("/proc/1")).unwrap();
        let task = PathBuf::from(format!(
            "/proc/{}/task/{}",
            std::process::id(),
            nix::unistd::gettid()
        ));
        let mut binds = Binds(Vec::new());
        binds.bind(&task, &t.p("/proc/1"));
        assert!(
            std::fs::symlink_metadata(t.p("/proc/1/ns/mnt"))
                .unwrap()
                .is_symlink()
        );

        let root = HostRoot::open(&t.root).unwrap();
        assert!(host_mount_ns(&root).unwrap().is_none());
        let mut h = t.host(ExecMode::Apply);
        assert!(mount::ensure(&mut h, "/data", &tmpfs()).unwrap());
        h.finish().unwrap();
        assert_eq!(t.calls(), ["mount /data"]);
        drop(binds);
    });
}

/// `<root>/proc/1` the procfs directory of a process in another mount namespace whose `/`
/// is not the root (a fake root over another machine's or container's `/proc`): that is not
/// the host's init, so `mount::remove` does not enter its namespace. `umount` runs chrooted
/// into the root (the recording stub there), and the tmpfs mounted at `/mnt/x` in that
/// other namespace, outside the root, stays mounted.
#[test]
fn mount_never_enters_a_proc_1_that_is_not_the_hosts_init() {
    in_mount_namespace(|| {
        let t = TestHost::new();
        t.install_sh();
        t.stub("umount", "exit 0");
        t.file("/etc/fstab", "/dev/sdb1 /mnt/x ext4 defaults 0 0\n");
        std::fs::create_dir_all(t.p("/proc/1")).unwrap();
        std::fs::create_dir_all(t.p("/mnt/x")).unwrap();
        // Another tree, not the root, with a tmpfs at /mnt/x in its namespace.
        let other = TestHost::new();
        other.install_sh();
        other.install("/usr/bin/umount");
        std::fs::create_dir_all(other.p("/proc")).unwrap();
        std::fs::create_dir_all(other.p("/mnt/x")).unwrap();
        let stranger = host_in(&other.root, &["/mnt/x"]);
        let proc_stranger = PathBuf::from(format!("/proc/{}", stranger.id()));
        let mut binds = Binds(Vec::new());
        binds.bind(&proc_stranger, &t.p("/proc/1"));
        let tmpfs_there = || mounted_at(&proc_stranger.join("mountinfo"), Path::new("/mnt/x"));
        assert!(tmpfs_there().is_some());

        let root = HostRoot::open(&t.root).unwrap();
        let mut h = t.host(ExecMode::Apply);
        assert!(mount::remove(&mut h, "/mnt/x").unwrap());
        h.finish().unwrap();
        assert!(
            tmpfs_there().is_some(),
            "the stranger's /mnt/x, outside the root, was unmounted"
        );
        assert_eq!(t.calls(), ["umount /mnt/x"]);
        assert!(host_mount_ns(&root).unwrap().is_none());
        assert_eq!(t.read("/etc/fstab"), "");
        drop(binds);
        end(stranger);
    });
}

/// `<root>/proc/1` a process chrooted into the root but in a mount namespace whose own `/`
/// is another tree (here: this machine's `/`, in a private copy): its `root` is the root
/// mount, yet a command entering its namespace resolves paths from that namespace's `/`,
/// outside the root. So the namespace is not entered: `umount /srv` runs chrooted into the
/// root (the recording stub there), and neither the tmpfs at the other tree's `/srv` nor
/// anything else outside the root is unmounted.
#[test]
fn mount_never_enters_a_namespace_whose_root_is_not_the_root() {
    in_mount_namespace(|| {
        let t = TestHost::new();
        t.install_sh();
        t.stub("umount", "exit 0");
        t.file("/etc/fstab", "# host fstab\n");
        std::fs::create_dir_all(t.p("/proc/1")).unwrap();
        std::fs::create_dir_all(t.p("/srv")).unwrap();
        let root_c = CString::new(t.root.as_os_str().as_bytes()).unwrap();
        let srv_in_root = CString::new(t.p("/srv").as_os_str().as_bytes()).unwrap();
        // SAFETY: only system calls on strings prepared before the fork.
        let stranger = unsafe {
            waiting_shell("start the chrooted stranger", move || {
                let none = std::ptr::null::<libc::c_char>();
                let check = |rc: libc::c_int| match rc {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                };
                let tmpfs = c"tmpfs".as_ptr();
                check(libc::unshare(libc::CLONE_NEWNS))?;
                let private = libc::MS_REC | libc::MS_PRIVATE;
                check(libc::mount(
                    none,
                    c"/".as_ptr(),
                    none,
                    private,
                    std::ptr::null(),
                ))?;
                // Outside the root (this namespace's /srv) and inside it.
                check(libc::mount(
                    tmpfs,
                    c"/srv".as_ptr(),
                    tmpfs,
                    0,
                    std::ptr::null(),
                ))?;
                check(libc::mount(
                    tmpfs,
                    srv_in_root.as_ptr(),
                    tmpfs,
                    0,
                    std::ptr::null(),
                ))?;
                check(libc::chroot(root_c.as_ptr()))?;
                check(libc::chdir(c"/".as_ptr()))
            })
        };
        let proc_stranger = PathBuf::from(format!("/proc/{}", stranger.id()));
        let mut binds = Binds(Vec::new());
        binds.bind(&proc_stranger, &t.p("/proc/1"));
        // Its root is the root mount, as the host init's is.
        let root = HostRoot::open(&t.root).unwrap();
        let theirs = std::fs::metadata(proc_stranger.join("root")).unwrap();
        let ours = std::fs::metadata(&t.root).unwrap();
        assert_eq!((theirs.dev(), theirs.ino()), (ours.dev(), ours.ino()));
        // The tmpfs inside the root is /srv in its mount table.
        assert!(mounted_at(&proc_stranger.join("mountinfo"), Path::new("/srv")).is_some());

        let mut h = t.host(ExecMode::Apply);
        let removed = mount::remove(&mut h, "/srv");
        h.finish().unwrap();
        assert_eq!(
            t.calls(),
            ["umount /srv"],
            "umount did not run chrooted into the root ({removed:?})"
        );
        assert!(host_mount_ns(&root).unwrap().is_none());
        drop(binds);
        end(stranger);
    });
}

/// No `<root>/proc/1/ns/mnt`: none (chrooted, as every test root). The machine's own
/// `/proc/1/ns/mnt` through the root `/`: the magic link is followed, and it is ours or not
/// as `stat` says (or refused as `stat` is). A regular file there, or a symlink outside procfs, is an error naming it.
#[test]
fn host_mount_ns_is_found_only_for_another_mount_namespace() {
    let t = TestHost::new();
    let root = HostRoot::open(&t.root).unwrap();
    assert!(host_mount_ns(&root).unwrap().is_none());

    // Without the right to inspect pid 1 (a container without CAP_SYS_PTRACE) the open is
    // refused, and that is the error.
    let machine = HostRoot::open("/").unwrap();
    let own = std::fs::metadata("/proc/thread-self/ns/mnt").unwrap();
    match std::fs::metadata("/proc/1/ns/mnt") {
        Ok(init) => {
            let other = (init.dev(), init.ino()) != (own.dev(), own.ino());
            assert_eq!(host_mount_ns(&machine).unwrap().is_some(), other);
        }
        Err(e) => {
            assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
            assert_eq!(
                host_mount_ns(&machine).unwrap_err().to_string(),
                "invalid host mount namespace: /proc/1/ns/mnt: open: Permission denied (os error 13)"
            );
        }
    }

    t.file("/proc/1/ns/mnt", "");
    let shown = t.p("/proc/1/ns/mnt");
    assert_eq!(
        host_mount_ns(&root).unwrap_err().to_string(),
        format!(
            "invalid host mount namespace: {} is not a namespace file (nsfs)",
            shown.display()
        )
    );
    std::fs::remove_file(&shown).unwrap();
    std::os::unix::fs::symlink("/proc/thread-self/ns/mnt", &shown).unwrap();
    let e = host_mount_ns(&root).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!(
            "invalid host mount namespace: {}: open: ",
            shown.display()
        )) && e.contains("(os error 40)"),
        "{e}"
    );
}

/// A namespace file bound at `<root>/proc/1/ns/mnt` (not procfs: opened without following)
/// is checked for its kind: a network namespace there is an error naming the file.
#[test]
fn host_mount_ns_refuses_a_namespace_of_another_kind() {
    in_mount_namespace(|| {
        let t = TestHost::new();
        t.file("/proc/1/ns/mnt", "");
        let mut binds = Binds(Vec::new());
        binds.bind(
            Path::new("/proc/thread-self/ns/net"),
            &t.p("/proc/1/ns/mnt"),
        );
        let root = HostRoot::open(&t.root).unwrap();
        assert_eq!(
            host_mount_ns(&root).unwrap_err().to_string(),
            format!(
                "invalid host mount namespace: {} is not a mount namespace",
                t.p("/proc/1/ns/mnt").display()
            )
        );
        drop(binds);
    });
}
