//! A sandbox for the commands of a read-only plan (serve's `package_plan`): its own PID,
//! network and IPC namespaces, its own procfs, per-command resource limits and a seccomp
//! filter, entered by every process spawned from a thread of the plan's mount namespace.
//!
//! [`start`], called on the plan's thread before it makes its mounts read-only (the init
//! writes `/proc/sys`), starts the plan's *init*: a child made with
//! `clone(CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC)`, pid 1 of a new PID namespace and
//! alone in new network and IPC namespaces. It brings `lo` up, sets the namespace's
//! `pid_max` (Linux ≥ 6.14 keeps it per PID namespace: at most `pid_max - 1` processes at
//! once, so a fork bomb stops there), makes a procfs of its PID namespace (`fsopen`,
//! `fsmount`: a procfs shows the PID namespace of the process that made it) and sends it
//! with its report (`SCM_RIGHTS`), closes every descriptor, and then only reaps the
//! orphans the kernel gives it (`sigwaitinfo(SIGCHLD)`, `waitpid(-1, WNOHANG)`); it dies with
//! the thread that started it (`PR_SET_PDEATHSIG`), and when it dies the kernel kills every
//! process of its namespace.
//!
//! [`Started::mount_proc_under`] mounts that procfs over every procfs under the plan's
//! root (on a node, the host's `/proc`): no host process, and so no `/proc/PID/root` of
//! one (the host's writable `/`), is there. [`Started::enter`], once the thread has its own
//! mount namespace, registers the sandbox under it. `current` finds it for the
//! calling thread (one `stat` of `/proc/thread-self/ns/mnt`, made only while a sandbox
//! exists), and the spawn then (see `spawn.rs`):
//! - sets the spawning thread's PID namespace for children to the sandbox's around the
//!   `clone` (`setns(CLONE_NEWPID)`, restored right after): the command is a process of the
//!   plan's namespace, where the server and every host process have no pid (`kill` finds
//!   nothing to signal; its parent, the server, is pid 0 to it);
//! - in the child, enters the sandbox's network namespace (`setns(CLONE_NEWNET)`: loopback
//!   only, and no abstract Unix socket of the host, those being per network namespace) and
//!   IPC namespace (no SysV object of the host), sets the [`Limits`] as rlimits:
//!   `RLIMIT_AS`, `RLIMIT_CPU`, `RLIMIT_FSIZE` 0 and `RLIMIT_CORE` 0, marks every
//!   descriptor above 2 close-on-exec (so only its pipes and `keep_fds` reach the command,
//!   not one the server inherited without `FD_CLOEXEC`), after its `chroot`
//!   and `chdir` becomes the [`QueryUser`] (`become_query_user`: one of its own for each plan by default,
//!   never root, no supplementary group, so no capability, and `no_new_privs`), and last
//!   installs the seccomp filter (`key_filter`): the keyring calls (not namespaced) and
//!   `io_uring_setup` are `EPERM`; by default a Unix socket may only be a stream one and
//!   every `connect` is answered by the plan's broker (the filter's listener is sent to it
//!   before `exec`), which reaches only the [`Limits::allow_sockets`] sockets, as the query
//!   user (the system bus as [`Limits::bus_user`]); with [`Limits::unix_sockets`] false (or a kernel before 5.9) `socket(AF_UNIX)` is
//!   `EPERM`.
//!
//! [`start`] also starts the plan's broker (a thread, and the process that connects for it
//! as the query user; see [`crate::process`]'s `sock_broker`), in the server's mount
//! namespace; it ends with the [`Started`].
//!
//! As the query user a command passes the kernel's permission checks as any unprivileged
//! user does: a host daemon's Unix socket that others may not write (systemd's
//! `/run/systemd/private`, containerd's) refuses its `connect` (`EACCES`), a world-writable
//! one (D-Bus, journald) is not reached unless allowed, and then sees its credentials, not
//! root's, and a root-only file is `EACCES` to it; set-user-ID programs and file capabilities grant it nothing
//! (`no_new_privs`, and the plan's mounts are `nosuid`). The init stays root (it only
//! reaps). See docs/fleet.md.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(super) use super::seccomp::install_filter;
use super::seccomp::key_filter;

/// The limits of each command of a sandboxed plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// `RLIMIT_AS` of each command, bytes (its virtual memory).
    pub memory: u64,
    /// `RLIMIT_CPU` of each command, seconds (then `SIGXCPU`, `SIGKILL` a second later).
    pub cpu_seconds: u64,
    /// `pid_max` of the plan's PID namespace: at most `max_pids - 1` processes at once.
    /// The kernel's floor is 301 (a lower value is raised to it).
    pub max_pids: u32,
    /// True (the default): a command may make Unix stream sockets only, and each `connect`
    /// is answered by the plan's broker, which connects it to an [`Limits::allow_sockets`]
    /// socket as the query user (the system bus as [`Limits::bus_user`]) or refuses it (see [`crate::process`]'s `sock_broker`).
    /// False (`--plan-deny-unix-sockets`, and on a kernel before 5.9): no command may make
    /// a Unix socket (`socket(AF_UNIX)` is `EPERM`, so is 32-bit x86's `socketcall`), so
    /// none reaches a host daemon's socket on the filesystem; queries that need one
    /// (`systemctl`) then fail. `io_uring_setup` is `EPERM` either way.
    pub unix_sockets: bool,
    /// The Unix sockets a command may `connect` to, as paths of the server (serve: each
    /// `--plan-allow-socket` under `--root`). Each is opened (`O_PATH`) and `stat`ed when
    /// the plan starts; one missing or not a socket then is left out.
    pub allow_sockets: Vec<std::path::PathBuf>,
    /// The user and group every command runs as.
    pub query_user: QueryUser,
    /// Who connects to an allowed socket named `system_bus_socket` (D-Bus's system bus)
    /// for a command (serve's `--plan-bus-user`): `None` the query user; a user the host
    /// knows, so that the reference `dbus-daemon` takes the connection (the read-only
    /// filter rewrites the command's `AUTH EXTERNAL` claim of its uid to this one's, and
    /// such connections are bounded per plan and in the process: `sock_broker`).
    pub bus_user: Option<QueryUser>,
}

impl Default for Limits {
    /// 4 GiB of address space, 60 s of CPU per command, 512 for `pid_max`, Unix sockets
    /// brokered with none allowed, commands as the first id of `--plan-query-user auto` (serve gives each plan
    /// its own: [`QueryUsers::for_slot`]), the system bus reached as `nobody` (65534, serve's
    /// `--plan-bus-user` default).
    fn default() -> Self {
        Limits {
            memory: 4 << 30,
            cpu_seconds: 60,
            max_pids: 512,
            unix_sockets: true,
            allow_sockets: Vec::new(),
            query_user: QueryUsers::Auto.for_slot(0),
            bus_user: Some(QueryUser::NOBODY),
        }
    }
}

pub use super::query_user::{AUTO_BASE, AUTO_SLOTS, BusUser, QueryUser, QueryUsers};

/// True when this kernel lets a plan's Unix-socket `connect`s be brokered (seccomp user
/// notification with `ADDFD`, Linux ≥ 5.9); false: with [`Limits::unix_sockets`] a
/// plan's commands may make no Unix socket, as without it.
pub fn brokers_sockets() -> bool {
    super::sock_broker::supported()
}

/// The kernel's lowest `pid_max` (`RESERVED_PIDS + 1`).
pub const MIN_PID_MAX: u32 = 301;

/// An rlimit as `prlimit64(2)` takes it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(super) struct Rlimit {
    cur: u64,
    max: u64,
}

/// A plan's sandbox: its namespaces, its init and the rlimits of its commands.
#[derive(Debug)]
pub struct Sandbox {
    /// (device, inode) of the plan's mount namespace: the key of [`current`], once entered.
    mnt: std::sync::OnceLock<(u64, u64)>,
    /// The plan's PID namespace (`/proc/<init>/ns/pid`).
    pid_ns: OwnedFd,
    /// The spawning threads' own PID namespace, restored after each `clone`.
    own_pid_ns: OwnedFd,
    /// The plan's network namespace (`/proc/<init>/ns/net`).
    net_ns: OwnedFd,
    /// The plan's IPC namespace (`/proc/<init>/ns/ipc`).
    ipc_ns: OwnedFd,
    /// The seccomp filter each command installs before `exec` ([`key_filter`]).
    filter: Vec<libc::sock_filter>,
    /// The broker of the plan's `connect`s, when Unix sockets are brokered: where a command
    /// sends its filter's listener, and the filter it installs instead when it can have no
    /// listener (`EBUSY`: the server runs under a filter with one).
    broker: Option<(OwnedFd, Vec<libc::sock_filter>)>,
    /// The init's pid (in this process's namespace) and a pidfd of it.
    init: libc::pid_t,
    init_fd: OwnedFd,
    rlimits: Vec<(libc::c_int, Rlimit)>,
    /// Who each command runs as.
    query_user: QueryUser,
    /// What the init could do: `lo` up, `pid_max` set.
    pub loopback: bool,
    /// True when the namespace's `pid_max` was set (Linux ≥ 6.14).
    pub pids_capped: bool,
    /// The plan's own cgroup, which every command joins ([`super::plan_cgroup`]), or why it
    /// has none.
    pub cgroup: Result<super::plan_cgroup::PlanCgroup, &'static str>,
}

/// Sandboxes alive (what [`current`] checks before any system call).
static COUNT: AtomicUsize = AtomicUsize::new(0);
static ACTIVE: Mutex<Vec<Arc<Sandbox>>> = Mutex::new(Vec::new());

fn active() -> std::sync::MutexGuard<'static, Vec<Arc<Sandbox>>> {
    ACTIVE.lock().unwrap_or_else(|p| p.into_inner())
}

fn mount_ns_key() -> io::Result<(u64, u64)> {
    let m = std::fs::metadata("/proc/thread-self/ns/mnt")?;
    Ok((m.dev(), m.ino()))
}

/// The sandbox of the calling thread's mount namespace, if one was entered there.
pub(super) fn current() -> Option<Arc<Sandbox>> {
    if COUNT.load(Ordering::SeqCst) == 0 {
        return None;
    }
    let key = mount_ns_key().ok()?;
    active().iter().find(|s| s.mnt.get() == Some(&key)).cloned()
}

impl Sandbox {
    /// The network namespace a command enters (`setns` in the child).
    pub(super) fn net_ns(&self) -> RawFd {
        self.net_ns.as_raw_fd()
    }

    /// The IPC namespace a command enters (`setns` in the child).
    pub(super) fn ipc_ns(&self) -> RawFd {
        self.ipc_ns.as_raw_fd()
    }

    /// The seccomp program a command installs before `exec` (it points into the sandbox,
    /// which the caller keeps alive until the child exec'ed).
    pub(super) fn filter(&self) -> libc::sock_fprog {
        libc::sock_fprog {
            len: self.filter.len() as libc::c_ushort,
            filter: self.filter.as_ptr().cast_mut(),
        }
    }

    /// The broker's inbox (a command sends its filter's listener there) and the filter a
    /// command installs when it cannot have a listener, when Unix sockets are brokered.
    pub(super) fn broker(&self) -> Option<(RawFd, libc::sock_fprog)> {
        self.broker.as_ref().map(|(inbox, deny)| {
            let prog = libc::sock_fprog {
                len: deny.len() as libc::c_ushort,
                filter: deny.as_ptr().cast_mut(),
            };
            (inbox.as_raw_fd(), prog)
        })
    }

    /// True when the plan's `connect`s go to its broker ([`Limits::unix_sockets`] on a
    /// kernel that has one); false when its commands may make no Unix socket.
    pub fn sockets_brokered(&self) -> bool {
        self.broker.is_some()
    }

    /// The rlimits a command sets before `exec`.
    pub(super) fn rlimits(&self) -> &[(libc::c_int, Rlimit)] {
        &self.rlimits
    }

    /// The user a command becomes before `exec` ([`become_query_user`]).
    pub(super) fn query_user(&self) -> QueryUser {
        self.query_user
    }

    /// Make the calling thread's next children processes of the plan's PID namespace, until
    /// the guard is dropped.
    ///
    /// # Errors
    /// `setns` failed (no `CAP_SYS_ADMIN`; the init is gone: the plan is over).
    pub(super) fn pid_ns_for_children(&self) -> io::Result<PidNsGuard<'_>> {
        // SAFETY: setns on a namespace descriptor we own.
        if unsafe { libc::setns(self.pid_ns.as_raw_fd(), libc::CLONE_NEWPID) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(PidNsGuard(self))
    }

    /// SIGKILL the init: the kernel kills every process of the namespace, and no command
    /// can start there any more (a `clone` into it fails with `ENOMEM`).
    pub fn kill(&self) {
        // SAFETY: a pidfd we own, a signal number, no siginfo, no flags.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.init_fd.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            );
        }
    }
}

/// Restores the spawning thread's PID namespace for children when dropped.
pub(super) struct PidNsGuard<'a>(&'a Sandbox);

impl Drop for PidNsGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: setns on a namespace descriptor we own (the thread's own active one).
        unsafe { libc::setns(self.0.own_pid_ns.as_raw_fd(), libc::CLONE_NEWPID) };
    }
}

/// A started sandbox: registered once [`Started::enter`]ed; dropped, it is unregistered and
/// its init killed (so is every process left in its namespace) and reaped.
#[derive(Debug)]
pub struct Started(
    Arc<Sandbox>,
    Option<OwnedFd>,
    Option<super::sock_broker::Broker>,
);

impl Started {
    /// The sandbox (to kill it from another thread on a cancel).
    pub fn sandbox(&self) -> Arc<Sandbox> {
        self.0.clone()
    }

    /// Mount the plan's own procfs (made by its init: it shows the plan's PID namespace
    /// only) over every procfs mounted at or under `root` in the calling thread's mount
    /// namespace (`/proc/thread-self/mountinfo`), so no command finds a host process's
    /// `/proc/PID/root` (the host's writable `/`) there. Call it on the plan's thread, in
    /// its own mount namespace, before its mounts are made read-only. Returns how many
    /// mount points were covered.
    ///
    /// # Errors
    /// `mountinfo` unreadable; a procfs is there but the init made none, or a mount failed.
    pub fn mount_proc_under(&mut self, root: &std::path::Path) -> io::Result<usize> {
        use std::os::unix::ffi::OsStrExt;
        let info = std::fs::read_to_string("/proc/thread-self/mountinfo")?;
        let mut points: Vec<std::path::PathBuf> = Vec::new();
        for line in info.lines() {
            // id parent major:minor root mount-point options [optional...] - fstype source ...
            let mut halves = line.splitn(2, " - ");
            let (Some(left), Some(right)) = (halves.next(), halves.next()) else {
                continue;
            };
            if right.split(' ').next() != Some("proc") {
                continue;
            }
            let Some(point) = left.split(' ').nth(4).map(super::cgroup::unescape) else {
                continue;
            };
            if point.starts_with(root) && !points.contains(&point) {
                points.push(point);
            }
        }
        // Outer mount points first, so a procfs under another is covered by the outer one.
        points.sort_by_key(|p| p.as_os_str().len());
        let mut covered: Vec<&std::path::Path> = Vec::new();
        for point in &points {
            if covered.iter().any(|f| point.starts_with(f)) {
                continue;
            }
            let c = std::ffi::CString::new(point.as_os_str().as_bytes())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            let fd = match &self.1 {
                Some(fd) => fd,
                None => {
                    return Err(io::Error::other(format!(
                        "{}: a procfs of the host is there and the plan's init made none of its own",
                        point.display()
                    )));
                }
            };
            // A clone of the detached procfs for each mount point.
            // SAFETY: open_tree on a descriptor we own with an empty path.
            let tree = unsafe {
                libc::syscall(
                    libc::SYS_open_tree,
                    fd.as_raw_fd(),
                    c"".as_ptr(),
                    (libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC) as libc::c_uint
                        | libc::AT_EMPTY_PATH as libc::c_uint,
                )
            };
            if tree < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: a descriptor just made, owned by nobody else.
            let tree = unsafe { OwnedFd::from_raw_fd(tree as RawFd) };
            // SAFETY: move_mount of a detached tree we own onto a C path.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_move_mount,
                    tree.as_raw_fd(),
                    c"".as_ptr(),
                    libc::AT_FDCWD,
                    c.as_ptr(),
                    libc::MOVE_MOUNT_F_EMPTY_PATH,
                )
            };
            if r != 0 {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(
                    e.kind(),
                    format!("{}: {e}", point.display()),
                ));
            }
            covered.push(point);
        }
        Ok(points.len())
    }

    /// Register the sandbox under the calling thread's mount namespace: every process
    /// spawned from a thread of that namespace is then made in it (call it once the thread
    /// has a mount namespace of its own; once).
    ///
    /// # Errors
    /// The namespace cannot be read, or this sandbox was entered already.
    pub fn enter(&self) -> io::Result<()> {
        self.0
            .mnt
            .set(mount_ns_key()?)
            .map_err(|_| io::Error::other("the plan's sandbox was entered already"))?;
        active().push(self.0.clone());
        COUNT.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// How long a drop waits for the killed init to exit before leaving it to the kernel.
const INIT_EXIT: Duration = Duration::from_secs(10);

impl Drop for Started {
    fn drop(&mut self) {
        if self.0.mnt.get().is_some() {
            active().retain(|s| !Arc::ptr_eq(s, &self.0));
            COUNT.fetch_sub(1, Ordering::SeqCst);
        }
        self.0.kill();
        // The broker ends (its thread joined, its connector killed) with the plan.
        drop(self.2.take());
        if super::pidfd::exited_within(&self.0.init_fd, INIT_EXIT) {
            let mut live = super::reaper::registry();
            // SAFETY: waitpid on our own child, which has exited.
            unsafe { libc::waitpid(self.0.init, std::ptr::null_mut(), libc::WNOHANG) };
            live.remove(&self.0.init);
        }
    }
}

/// Start a plan's sandbox: the init in its new PID, network and IPC namespaces (it sets the
/// namespace's `pid_max` through `/proc/sys`: call this before the thread's mounts are made
/// read-only), not yet [`Started::enter`]ed.
///
/// # Errors
/// The `clone` (no `CAP_SYS_ADMIN`), a namespace descriptor or the init's report failed.
pub fn start(limits: &Limits) -> io::Result<Started> {
    // Unix sockets brokered (the default) where the kernel can, else none.
    let broker = if limits.unix_sockets && super::sock_broker::supported() {
        Some(super::sock_broker::start(
            &limits.allow_sockets,
            limits.query_user,
            limits.bus_user,
        )?)
    } else {
        None
    };
    let own_pid_ns = OwnedFd::from(std::fs::File::open("/proc/thread-self/ns/pid")?);
    // The init's report: one byte, and its procfs mount as SCM_RIGHTS when it made one.
    let (report_r, report_w) = super::sock_broker::seqpacket_pair()?;
    let pid_max = limits.max_pids.max(MIN_PID_MAX).to_string();
    let init = {
        let mut live = super::reaper::registry();
        let init = {
            // Every signal blocked around the fork: the init keeps that mask (it waits for
            // SIGCHLD), and no handler of the server's runs in it.
            let old = nix::sys::signal::SigSet::all()
                .thread_swap_mask(nix::sys::signal::SigmaskHow::SIG_SETMASK)
                .map_err(io::Error::from)?;
            // SAFETY: a fork (no CLONE_VM, no stack given): the child runs `init_main`, which
            // makes only system calls on data prepared above and never returns.
            let pid = unsafe {
                libc::syscall(
                    libc::SYS_clone,
                    (libc::CLONE_NEWPID | libc::CLONE_NEWNET | libc::CLONE_NEWIPC | libc::SIGCHLD)
                        as libc::c_ulong,
                    0usize,
                    0usize,
                    0usize,
                    0usize,
                )
            };
            if pid == 0 {
                init_main(report_w.as_raw_fd(), pid_max.as_bytes());
            }
            let failed = (pid < 0).then(io::Error::last_os_error);
            let _ = old.thread_set_mask();
            match failed {
                Some(e) => return Err(e),
                None => pid as libc::pid_t,
            }
        };
        live.insert(init);
        init
    };
    drop(report_w);
    let init_fd = super::pidfd_open(init);
    let ns = |kind: &str| -> io::Result<OwnedFd> {
        Ok(OwnedFd::from(std::fs::File::open(format!(
            "/proc/{init}/ns/{kind}"
        ))?))
    };
    let opened = init_fd
        .ok_or_else(|| io::Error::other("pidfd_open of the plan's init failed"))
        .and_then(|fd| Ok((fd, ns("pid")?, ns("net")?, ns("ipc")?)));
    let read = receive_report(&report_r);
    let ((init_fd, pid_ns, net_ns, ipc_ns), (report, proc)) = match (opened, read) {
        (Ok(o), Ok(r)) => (o, r),
        (opened, read) => {
            // SAFETY: kill and reap our own child.
            unsafe {
                libc::kill(init, libc::SIGKILL);
                libc::waitpid(init, std::ptr::null_mut(), 0);
            }
            super::reaper::registry().remove(&init);
            return Err(match (opened, read) {
                (Err(e), _) | (_, Err(e)) => e,
                _ => unreachable!("one of them failed"),
            });
        }
    };
    let rlimit = |v: u64| Rlimit { cur: v, max: v };
    let sandbox = Arc::new(Sandbox {
        mnt: std::sync::OnceLock::new(),
        pid_ns,
        own_pid_ns,
        net_ns,
        ipc_ns,
        filter: key_filter(broker.is_some()),
        broker: broker
            .as_ref()
            .map(|b| b.inbox())
            .transpose()?
            .map(|inbox| (inbox, key_filter(false))),
        init,
        init_fd,
        rlimits: vec![
            (libc::RLIMIT_AS as libc::c_int, rlimit(limits.memory)),
            (libc::RLIMIT_CPU as libc::c_int, rlimit(limits.cpu_seconds)),
            (libc::RLIMIT_FSIZE as libc::c_int, rlimit(0)),
            (libc::RLIMIT_CORE as libc::c_int, rlimit(0)),
        ],
        query_user: limits.query_user,
        loopback: report & 1 != 0,
        pids_capped: report & 2 != 0,
        cgroup: super::plan_cgroup::for_plan(limits.memory, limits.max_pids)?,
    });
    Ok(Started(sandbox, proc, broker))
}

/// The init's report on `sock`: its status byte and the procfs mount it sent, if any.
///
/// # Errors
/// `recvmsg` failed, or the init exited before it reported.
fn receive_report(sock: &OwnedFd) -> io::Result<(u8, Option<OwnedFd>)> {
    let mut status = [0u8; 1];
    let (n, proc) = super::sock_broker::receive_fd(sock.as_raw_fd(), &mut status, true)?;
    if n != 1 {
        return Err(io::Error::other(
            "the plan's init exited before it reported",
        ));
    }
    Ok((status[0], proc))
}

/// Make the calling process `user` (the spawned child, after its `chroot` and `chdir`,
/// before the filter and `exec`; system calls only; `parent` is what `getppid` says while
/// the spawning process lives):
/// - its standard descriptors that are pipes (the spawn's own, made by root, mode 0600)
///   handed to `user`, so `> /dev/stdout` (a reopen through `/proc/self/fd`) still works;
/// - no supplementary groups, then the group and the user id: real, effective, saved and
///   filesystem; with every user id non-zero the kernel clears the permitted, effective and
///   ambient capabilities;
/// - never dumpable while it shares the server's memory (`CLONE_VM` until `exec`): each
///   change of the effective ids sets the memory's dumpable flag to `fs.suid_dumpable`
///   (so `PR_SET_DUMPABLE` before them would not hold); with 1 a process of the same user
///   could `ptrace` the child and write the server's memory, with 2 a `SIGQUIT` could dump
///   it (its TLS key) to the host's crash handler. So: every signal blocked; the user id
///   taken with the saved user id still 0 (`ptrace` needs the tracer to be the target's
///   real, effective and saved user); `PR_SET_DUMPABLE` 0; then the saved user id
///   dropped, which changes no effective id and only shrinks capabilities, so the flag
///   stays 0; the signals unblocked (a signal now kills without a dump). The flag is the
///   shared memory's: the server stays not dumpable after its first plan command (it was
///   `fs.suid_dumpable` before); `exec` gives the command a dumpable memory of its own;
/// - the parent-death signal set again (a change of ids clears it) and the parent checked;
/// - `no_new_privs`: `execve` of a set-user-ID or set-group-ID program or one with file
///   capabilities grants nothing (`sudo`, `su`, `pkexec` of the host stay the user's).
///
/// The `errno` of what failed (the command then does not run).
pub(super) fn become_query_user(user: QueryUser, parent: libc::pid_t) -> Result<(), i32> {
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)
    };
    // SAFETY (every call below): system calls on integers and on a stat buffer of this
    // (the child's) stack.
    unsafe {
        for fd in 0..3 {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut st) == 0
                && st.st_mode & libc::S_IFMT == libc::S_IFIFO
                && libc::fchown(fd, user.uid, user.gid) != 0
            {
                return Err(errno());
            }
        }
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut before);
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setresgid(user.gid, user.gid, user.gid) != 0
            || libc::setresuid(user.uid, user.uid, 0) != 0
            || libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) != 0
            || libc::setresuid(user.uid, user.uid, user.uid) != 0
        {
            return Err(errno());
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
            return Err(errno());
        }
        if libc::getppid() != parent {
            return Err(libc::ESRCH);
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(errno());
        }
    }
    Ok(())
}

/// Set `rlimits` on the calling process (the spawned child, before `exec`): system calls
/// only. The `errno` of the first that failed.
pub(super) fn set_rlimits(rlimits: &[(libc::c_int, Rlimit)]) -> Result<(), i32> {
    for (resource, lim) in rlimits {
        // SAFETY: prlimit64 on this process with a valid struct and no old-value pointer.
        let r = unsafe {
            libc::syscall(
                libc::SYS_prlimit64,
                0,
                *resource,
                lim as *const Rlimit,
                std::ptr::null_mut::<Rlimit>(),
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL));
        }
    }
    Ok(())
}

/// The plan's init (a forked child: system calls only, nothing allocated, never returns).
/// Reports one byte on `report` (bit 0: `lo` up, bit 1: `pid_max` set) with a detached
/// procfs mount of its PID namespace when it could make one, closes every
/// descriptor and reaps orphans until it is killed.
fn init_main(report: RawFd, pid_max: &[u8]) -> ! {
    // SAFETY (every block below): plain system calls on integers and on buffers of this
    // (copied) address space.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        let mut status = 0u8;
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s >= 0 {
            let mut ifr: libc::ifreq = std::mem::zeroed();
            ifr.ifr_name[0] = b'l' as libc::c_char;
            ifr.ifr_name[1] = b'o' as libc::c_char;
            if libc::ioctl(s, libc::SIOCGIFFLAGS as _, &mut ifr) == 0 {
                ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
                if libc::ioctl(s, libc::SIOCSIFFLAGS as _, &ifr) == 0 {
                    status |= 1;
                }
            }
            libc::close(s);
        }
        let fd = libc::open(
            c"/proc/sys/kernel/pid_max".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            if libc::write(fd, pid_max.as_ptr().cast(), pid_max.len()) == pid_max.len() as isize {
                status |= 2;
            }
            libc::close(fd);
        }
        // A procfs of this PID namespace (a procfs shows the PID namespace of the process
        // that made it), detached, sent with the report: the plan mounts it over the host's
        // `/proc` in its root.
        let mut proc = -1;
        let ctx = libc::syscall(libc::SYS_fsopen, c"proc".as_ptr(), libc::FSOPEN_CLOEXEC) as i32;
        if ctx >= 0 {
            if libc::syscall(
                libc::SYS_fsconfig,
                ctx,
                libc::FSCONFIG_CMD_CREATE,
                std::ptr::null::<libc::c_char>(),
                std::ptr::null::<libc::c_void>(),
                0,
            ) == 0
            {
                proc = libc::syscall(libc::SYS_fsmount, ctx, libc::FSMOUNT_CLOEXEC, 0) as i32;
            }
            libc::close(ctx);
        }
        let mut iov = libc::iovec {
            iov_base: (&raw mut status).cast(),
            iov_len: 1,
        };
        let mut control = [0u64; 8];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        if proc >= 0 {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as _;
            let c = libc::CMSG_FIRSTHDR(&raw const msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), proc);
        }
        libc::sendmsg(report, &raw const msg, 0);
        // Nothing of the server's stays open here (another run's pipe, a listening socket).
        libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32);
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGCHLD, &dfl, std::ptr::null_mut());
        let mut chld: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        // Every signal stays blocked (the mask of the clone): SIGCHLD is waited for.
        loop {
            libc::sigwaitinfo(&chld, std::ptr::null_mut());
            while libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) > 0 {}
        }
    }
}

#[cfg(test)]
#[path = "sandbox_tests.rs"]
pub(crate) mod tests;
