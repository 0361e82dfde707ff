//! Spawning a [`Spec`]: `clone(CLONE_VM | CLONE_VFORK)` and `exec` (see the module docs of
//! [`crate::process`] for what the child does before `exec`).
//!
//! Why not `fork` (what `std::process::Command` does as soon as a `pre_exec` hook is set):
//! a `fork` copies the agent's page tables and write-protects its private pages, so both the
//! child (until its `exec`) and the agent (after it) take a copy-on-write fault for every
//! page they write, and the `exec` tears down the copied address space. Measured per bash
//! step of a 1,000-step apply (`perf stat`, `strace -T`; docs/benchmarks.md "vfork"):
//! `clone` took twice as long as in a bare C loop, and the agent tree took ~85 page faults
//! more per step. With `CLONE_VM | CLONE_VFORK` (what `posix_spawn(3)` does) the child runs
//! in the agent's memory on a stack of its own until it calls `exec` (or exits), while the
//! calling thread is suspended: nothing is copied.
//!
//! The price is discipline in the child, which shares every byte with the agent's other
//! threads: it runs only raw system calls on data prepared before the `clone` (`CString`s
//! and pointer arrays, the candidate paths of a `PATH` search), allocates nothing, takes no
//! lock, cannot panic, and reports a failure by storing `errno` in an atomic the parent
//! reads after the `clone` returns. Signals: the parent blocks all of them around the
//! `clone`, so no handler of the agent can run on the child's stack; the child resets every
//! handled signal (and `SIGPIPE`) to its default disposition (its own copy of the table:
//! no `CLONE_SIGHAND`) and then unblocks everything, as `std::process::Command` leaves a
//! child: default `SIGPIPE`, an empty mask.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

use super::Spec;

/// The shell a script without an interpreter line is run with (as `execvp` does).
const FALLBACK_SHELL: &str = "/bin/sh";

/// The search path when the spec's environment has no `PATH` (glibc's `execvp` default).
const DEFAULT_PATH: &[u8] = b"/bin:/usr/bin";

/// The child's stack in bytes (plus one guard page below it). The child only makes system
/// calls through libc wrappers: a few KiB are used.
const CHILD_STACK: usize = 256 * 1024;

/// A spawned main process: its pid and this side of its pipes.
pub(super) struct Spawned {
    pub pid: libc::pid_t,
    pub stdin: Option<OwnedFd>,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// Made in a plan's sandbox (its orphans go to the sandbox's init, not to this process).
    pub sandboxed: bool,
}

fn cstring(bytes: &[u8], what: &str) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{what} contains a NUL byte: {}",
                String::from_utf8_lossy(bytes)
            ),
        )
    })
}

fn path_c(p: &Path) -> io::Result<CString> {
    cstring(p.as_os_str().as_bytes(), "path")
}

/// A pipe whose both ends are `O_CLOEXEC` and numbered 3 or above (so the child's `dup2`
/// onto 0, 1 and 2 never clobbers another of its descriptors): (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2(2) writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((above_stdio(r)?, above_stdio(w)?))
}

/// `fd` itself when it is 3 or above, else a `O_CLOEXEC` duplicate that is.
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: fcntl(2) F_DUPFD_CLOEXEC on a descriptor we own.
    let dup = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(dup) })
}

/// The paths `exec` tries for `program`, in order: itself when it contains a `/`, else each
/// directory of the spec's `PATH` joined with it (an empty entry is the working directory),
/// as `execvp(3)` searches.
fn candidates(spec: &Spec, program: &Path) -> io::Result<Vec<CString>> {
    let name = program.as_os_str().as_bytes();
    if name.contains(&b'/') {
        return Ok(vec![path_c(program)?]);
    }
    if name.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    let path = spec
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == OsStr::new("PATH"))
        .map_or(DEFAULT_PATH, |(_, v)| v.as_bytes());
    path.split(|&b| b == b':')
        .map(|dir| {
            let mut full = Vec::with_capacity(dir.len() + 1 + name.len());
            if !dir.is_empty() {
                full.extend_from_slice(dir);
                full.push(b'/');
            }
            full.extend_from_slice(name);
            cstring(&full, "path")
        })
        .collect()
}

/// A `NULL`-terminated array of pointers into `strings` (which must outlive it).
fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// The child's stack: an anonymous mapping with a `PROT_NONE` guard page at its low end, so
/// an overflow faults instead of writing into the agent's memory.
struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

impl Stack {
    fn new() -> io::Result<Stack> {
        // SAFETY: sysconf(3) has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let len = CHILD_STACK + page;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, len };
        // SAFETY: the first page of the mapping just made.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is `len` bytes, private to this value; the guard page is part of
        // the slice but only ever reached by an overflow (which then faults).
        unsafe { std::slice::from_raw_parts_mut(self.base.cast::<u8>(), self.len) }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used (the child exec'ed or exited).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Blocks every signal of the calling thread while alive; restores the previous mask.
struct AllSignalsBlocked(libc::sigset_t);

impl AllSignalsBlocked {
    fn new() -> io::Result<AllSignalsBlocked> {
        // SAFETY: sigset_t is plain data; sigfillset and pthread_sigmask initialise and read
        // the sets given.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            let rc = libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            Ok(AllSignalsBlocked(old))
        }
    }
}

impl Drop for AllSignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
    }
}

/// The errno of the last failed libc call, in the child (no allocation).
fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EINVAL)
}

/// What the child needs, prepared before the `clone`.
struct Child<'a> {
    /// What `getppid` says while the spawning process lives: its pid, or 0 in a sandbox (the
    /// parent is outside the child's PID namespace).
    parent: libc::pid_t,
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    keep: &'a [RawFd],
    /// `cgroup.procs` of the cgroup to join (write-only, close-on-exec), or -1.
    cgroup: RawFd,
    /// `cgroup.procs` of a plan sandbox's cgroups to join after it ([`super::plan_cgroup`]),
    /// or -1.
    plan_cgroup: [RawFd; 2],
    /// The mount namespace to enter (`setns`), or -1.
    mount_ns: RawFd,
    /// A plan sandbox's network namespace to enter (`setns`), or -1.
    net_ns: RawFd,
    /// A plan sandbox's IPC namespace to enter (`setns`), or -1.
    ipc_ns: RawFd,
    /// A plan sandbox's seccomp program, installed last before `exec`.
    filter: Option<libc::sock_fprog>,
    /// With Unix sockets brokered: the broker's inbox, where the child sends its filter's
    /// listener, and the filter it installs instead when it can have no listener.
    broker: Option<(RawFd, libc::sock_fprog)>,
    /// A plan sandbox's rlimits, set before `exec`.
    rlimits: &'a [(libc::c_int, super::sandbox::Rlimit)],
    /// A plan sandbox's query user, become after the `chroot` and `chdir`.
    user: Option<super::sandbox::QueryUser>,
    root: Option<&'a CString>,
    cwd: &'a CString,
    candidates: &'a [CString],
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
    /// Set by the child to the `errno` of what failed (0: it exec'ed).
    error: &'a AtomicI32,
}

impl Child<'_> {
    /// The child's side (module docs): only system calls, no allocation, no panic. Returns
    /// the exit status of a child that could not exec, with `error` set.
    fn run(&self) -> isize {
        let e = self.prepare().and_then(|()| self.exec());
        self.error
            .store(e.err().unwrap_or(libc::EINVAL), Ordering::SeqCst);
        127
    }

    fn prepare(&self) -> Result<(), i32> {
        // SAFETY (every block below): plain system calls on integers and on NUL-terminated
        // strings prepared before the clone; nothing is allocated or freed.
        unsafe {
            // Default dispositions for every signal this process handles, and SIGPIPE (which
            // Rust programs ignore); ignored ones stay ignored, as exec would keep them.
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            for sig in 1..=libc::SIGRTMAX() {
                if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                    continue;
                }
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                    continue; // a signal libc reserves for itself
                }
                if sig == libc::SIGPIPE
                    || (old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN)
                {
                    libc::sigaction(sig, &dfl, std::ptr::null_mut());
                }
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            if libc::setpgid(0, 0) != 0 {
                return Err(errno());
            }
            // "0" moves the writing process; before any fork, so the whole run is inside.
            if self.cgroup >= 0 && libc::write(self.cgroup, b"0".as_ptr().cast(), 1) != 1 {
                return Err(errno());
            }
            for fd in self.plan_cgroup {
                if fd >= 0 && libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(errno());
                }
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(errno());
            }
            if libc::getppid() != self.parent {
                // The spawning thread's process died before the prctl: nobody would wait.
                return Err(libc::ESRCH);
            }
            for (from, to) in [(self.stdin, 0), (self.stdout, 1), (self.stderr, 2)] {
                // dup2 clears FD_CLOEXEC on the copy; the originals (>= 3) close at exec.
                if libc::dup2(from, to) < 0 {
                    return Err(errno());
                }
            }
            // A plan's command starts with 0, 1, 2 (and `keep`) only: every other
            // descriptor of the server's, one it inherited without close-on-exec (a
            // launcher's pipe, a log file), closes at exec instead of reaching the command.
            if self.user.is_some()
                && libc::syscall(
                    libc::SYS_close_range,
                    3u32,
                    u32::MAX,
                    libc::CLOSE_RANGE_CLOEXEC,
                ) != 0
            {
                return Err(errno());
            }
            for &fd in self.keep {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(errno());
                }
            }
            // The child has its own copy of the filesystem context (no CLONE_FS), as setns
            // into a mount namespace requires.
            if self.mount_ns >= 0 && libc::setns(self.mount_ns, libc::CLONE_NEWNS) != 0 {
                return Err(errno());
            }
            if self.net_ns >= 0 && libc::setns(self.net_ns, libc::CLONE_NEWNET) != 0 {
                return Err(errno());
            }
            if self.ipc_ns >= 0 && libc::setns(self.ipc_ns, libc::CLONE_NEWIPC) != 0 {
                return Err(errno());
            }
            super::sandbox::set_rlimits(self.rlimits)?;
            if let Some(root) = self.root
                && libc::chroot(root.as_ptr()) != 0
            {
                return Err(errno());
            }
            if libc::chdir(self.cwd.as_ptr()) != 0 {
                return Err(errno());
            }
            if let Some(user) = self.user {
                super::sandbox::become_query_user(user, self.parent)?;
            }
            if let Some(prog) = &self.filter {
                match self.broker {
                    // Its `connect`s go to the plan's broker: the listener is sent there
                    // (never waiting) and closed here.
                    Some((inbox, deny)) => match super::sandbox::install_filter(prog, true) {
                        Ok(listener) => {
                            let sent = super::sock_broker::send_listener(inbox, listener);
                            libc::close(listener);
                            sent?;
                        }
                        // A filter of the server's own has a listener: no Unix socket.
                        Err(libc::EBUSY) => {
                            super::sandbox::install_filter(&deny, false)?;
                        }
                        Err(e) => return Err(e),
                    },
                    None => {
                        super::sandbox::install_filter(prog, false)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// `execve` each candidate in turn, as `execvp(3)` does (without its `ENOEXEC` retry,
    /// which [`spawn`] makes): the search goes on past a missing or inaccessible file and
    /// stops at any other error; `EACCES` wins over a later `ENOENT`. Returns only on failure.
    fn exec(&self) -> Result<(), i32> {
        let mut denied = false;
        let mut last = libc::ENOENT;
        for path in self.candidates {
            // SAFETY: NUL-terminated path, NULL-terminated argv/envp arrays of pointers to
            // strings that outlive the call (the parent is suspended until exec or exit).
            unsafe { libc::execve(path.as_ptr(), self.argv.as_ptr(), self.envp.as_ptr()) };
            last = errno();
            match last {
                libc::EACCES => denied = true,
                libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
                _ => return Err(last),
            }
        }
        Err(if denied { libc::EACCES } else { last })
    }
}

/// Spawn `program args...` with the spec's environment, root, cwd and descriptors.
fn spawn_one(spec: &Spec, program: &Path, args: &[OsString]) -> io::Result<Spawned> {
    let root = spec.chroot.as_deref().map(path_c).transpose()?;
    let cwd = path_c(&spec.cwd)?;
    let candidates = candidates(spec, program)?;
    let argv_c: Vec<CString> = std::iter::once(program.as_os_str())
        .chain(args.iter().map(OsString::as_os_str))
        .map(|a| cstring(a.as_bytes(), "argument"))
        .collect::<io::Result<_>>()?;
    let envp_c: Vec<CString> = spec
        .env
        .iter()
        .map(|(k, v)| {
            if k.is_empty() || k.as_bytes().contains(&b'=') {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("invalid environment variable name {k:?}"),
                ));
            }
            let mut kv = Vec::with_capacity(k.len() + 1 + v.len());
            kv.extend_from_slice(k.as_bytes());
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            cstring(&kv, "environment variable")
        })
        .collect::<io::Result<_>>()?;
    let (argv, envp) = (pointers(&argv_c), pointers(&envp_c));
    let (stdin_r, stdin_w) = match spec.stdin {
        Some(_) => {
            let (r, w) = pipe()?;
            (r, Some(w))
        }
        None => {
            let null = std::fs::File::open("/dev/null")?;
            (above_stdio(OwnedFd::from(null))?, None)
        }
    };
    let (stdout_r, stdout_w) = pipe()?;
    let (stderr_r, stderr_w) = pipe()?;
    let cgroup = spec
        .cgroup
        .as_ref()
        .map(|d| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(d.join("cgroup.procs"))
                .map(OwnedFd::from)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", d.display())))
        })
        .transpose()?;
    let error = AtomicI32::new(0);
    // A command of a plan's thread runs in the plan's sandbox (see `sandbox`).
    let sandbox = super::sandbox::current();
    // SAFETY: getpid(2) has no preconditions.
    let parent = if sandbox.is_some() {
        0
    } else {
        unsafe { libc::getpid() }
    };
    let child = Child {
        parent,
        stdin: stdin_r.as_raw_fd(),
        stdout: stdout_w.as_raw_fd(),
        stderr: stderr_w.as_raw_fd(),
        keep: &spec.keep_fds,
        cgroup: cgroup.as_ref().map_or(-1, AsRawFd::as_raw_fd),
        plan_cgroup: sandbox
            .as_ref()
            .and_then(|s| s.cgroup.as_ref().ok())
            .map_or([-1, -1], |c| c.procs()),
        mount_ns: spec.mount_ns.as_ref().map_or(-1, |fd| fd.as_raw_fd()),
        net_ns: sandbox.as_ref().map_or(-1, |s| s.net_ns()),
        ipc_ns: sandbox.as_ref().map_or(-1, |s| s.ipc_ns()),
        filter: sandbox.as_ref().map(|s| s.filter()),
        broker: sandbox.as_ref().and_then(|s| s.broker()),
        rlimits: sandbox.as_ref().map_or(&[], |s| s.rlimits()),
        user: sandbox.as_ref().map(|s| s.query_user()),
        root: root.as_ref(),
        cwd: &cwd,
        candidates: &candidates,
        argv: &argv,
        envp: &envp,
        error: &error,
    };
    let mut stack = Stack::new()?;
    let pid = {
        let _blocked = AllSignalsBlocked::new()?;
        // The child is made in the sandbox's PID namespace; this thread's is restored after.
        let _pid_ns = sandbox
            .as_ref()
            .map(|s| s.pid_ns_for_children())
            .transpose()?;
        // SAFETY: CLONE_VM | CLONE_VFORK: this thread is suspended until the child exec'ed
        // or exited, so everything `child` borrows outlives its use; the child only runs
        // `Child::run` (system calls on prepared data: module docs) on its own guarded stack.
        unsafe {
            nix::sched::clone(
                Box::new(|| child.run()),
                stack.as_mut_slice(),
                nix::sched::CloneFlags::CLONE_VM | nix::sched::CloneFlags::CLONE_VFORK,
                Some(libc::SIGCHLD),
            )
        }
        .map_err(io::Error::from)?
        .as_raw()
    };
    drop(stack);
    match error.load(Ordering::SeqCst) {
        0 => Ok(Spawned {
            pid,
            stdin: stdin_w,
            stdout: stdout_r,
            stderr: stderr_r,
            sandboxed: sandbox.is_some(),
        }),
        e => {
            // The child exited with 127 without exec'ing: reap it (it is in no registry).
            while let Err(nix::errno::Errno::EINTR) =
                nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None)
            {}
            Err(io::Error::from_raw_os_error(e))
        }
    }
}

/// Spawn the spec, retrying a file without an interpreter line with `/bin/sh`.
pub(super) fn spawn(spec: &Spec) -> io::Result<Spawned> {
    match spawn_one(spec, &spec.program, &spec.args) {
        Err(e) if e.raw_os_error() == Some(libc::ENOEXEC) => {
            let mut args = Vec::with_capacity(spec.args.len() + 1);
            args.push(spec.program.clone().into_os_string());
            args.extend(spec.args.iter().cloned());
            spawn_one(spec, Path::new(FALLBACK_SHELL), &args)
        }
        other => other,
    }
}
