//! The one process primitive: everything that spawns a process (a bash step, an interrupt
//! command, a host-API `run`/`sh`/`query`, `systemctl`, package managers, deferred work)
//! goes through this module, and [`cancel::Cancel`] is how a run is stopped.
//!
//! This is a leaf module: it uses std, libc, nix and tokio only (nothing of the agent).
//!
//! # Starting
//!
//! A [`Spec`] is complete: the environment is exactly [`Spec::env`] (nothing inherited),
//! stdin is `/dev/null` or the given bytes, stdout and stderr are pipes, and the process
//! leads its own process group (`pgid == pid`), so the rest of the step can be signalled as
//! a unit. The child is made with `clone(CLONE_VM | CLONE_VFORK)` as `posix_spawn(3)` does (no
//! copy of the agent's memory; see `spawn.rs` for why and for the rules the
//! child follows: system calls only, on `CString`s prepared before the clone, with every
//! signal blocked around it and the child's dispositions reset). Before `exec` the child:
//!
//! 1. sets `PR_SET_PDEATHSIG(SIGKILL)`, and exits with `ESRCH` if its parent already died
//!    (the `getppid` check closes the race with the `prctl`). The kernel sends the
//!    death signal when the **thread** that spawned it exits, not the process:
//!    [`run`](fn@run) spawns from the calling thread and waits on that same thread until the
//!    process is reaped, so the signal only fires when the agent itself dies (e.g. `SIGKILL`);
//! 2. clears `FD_CLOEXEC` on [`Spec::keep_fds`] (e.g. the package-lock `flock` descriptor,
//!    so a rerun waits until the last process of the step is gone);
//! 3. with [`Spec::mount_ns`], enters that mount namespace (`setns(fd, CLONE_NEWNS)`, as
//!    `nsenter -m` does: its root and working directory become the namespace's `/`);
//! 4. `chroot`s to [`Spec::chroot`] when given (a path of the namespace it is then in), then
//!    `chdir`s to [`Spec::cwd`].
//!
//! With [`Spec::cgroup`], it first joins that cgroup (writes `0` to its `cgroup.procs`): it
//! cannot fork before, so every process of the run is a member.
//!
//! (It also joins its own process group, takes the pipes as 0, 1 and 2, and starts with an
//! empty signal mask and default dispositions, `SIGPIPE` included.)
//!
//! `exec` failing with `ENOEXEC` (a script without `#!`) is retried as
//! `/bin/sh <program> <args...>`, as `execvp` does. A program without `/` is looked up in the
//! spec's `PATH`, after the chroot.
//!
//! # Waiting
//!
//! One `poll(2)` loop on the calling thread waits for everything: the two output pipes, the
//! stdin pipe while bytes remain to be written, a pidfd of the main process
//! (`pidfd_open(2)`, Linux ≥ 5.3; without it the loop re-checks `waitid(WNOHANG)` every
//! 50 ms), and the cancel token's [`Cancel::abort_fd`]. Deadlines and grace periods are
//! computed `poll` timeouts; nothing sleeps.
//!
//! Output is handed to a [`Sink`] chunk by chunk in read order (at most
//! [`Options::read_size`] bytes per read); after a run of consecutive reads of one stream
//! (the pipe would block, or 64 KiB were read in a row) [`Sink::flush`] is called so the
//! sink can write what it batched.
//!
//! # Ending
//!
//! - The main process exits: what is left of its process group, and every descendant this
//!   process adopted as a child subreaper (see [`reaper`]), gets `SIGTERM`; the pipes keep
//!   being drained until both reach end of file or [`Options::exit_grace`] passes, whichever
//!   comes first; then `SIGKILL` (so a leftover that closed or never held the pipes gets
//!   `SIGKILL` right after its `SIGTERM`: nothing waits for a process that produces no
//!   output). Output
//!   that is still held open after the `SIGKILL` (a process outside the group when this
//!   process is not a subreaper) is read for at most one more second, then abandoned
//!   ([`Report::drained`] false). When the subreaper is enabled and, at the main process's
//!   exit, it adopted nothing, the group is provably empty (see
//!   [`reaper`]'s `nothing_adopted`): no signal is sent and the final sweep is skipped,
//!   which is the common case of a step that leaves nothing running.
//! - [`Options::timeout`] passes, [`Options::cancel`] is aborted, or the sink asks to stop
//!   ([`Sink::chunk`] returns `Break`): `SIGTERM` to the group and the adopted descendants,
//!   [`Options::term_grace`] while output is drained, then `SIGKILL`.
//!
//! With [`Spec::cgroup`], "the adopted descendants" above are instead the live members of
//! that cgroup (whoever their parent is now), and the final sweep ([`sweep::kill_all`])
//! kills the members until the cgroup is empty (at most 10 s) and reaps the adopted children
//! that exited; other runs' orphans are left alone.
//!
//! The main process stays a zombie until everything else is done (so its pid, hence the
//! group id, cannot be reused while the group is signalled), then it is reaped. When the
//! subreaper is enabled, every adopted descendant is then killed and reaped, until none is
//! left: nothing a run started outlives it.
//!
//! [`run`](fn@run) is the blocking core (host API calls run on plain threads); [`run_async`] runs
//! it on tokio's blocking pool and kills the group if its future is dropped.

pub mod cancel;
pub mod cgroup;
pub mod reaper;
mod run;
mod spawn;
pub mod sweep;

use std::ffi::OsString;
use std::io;
use std::ops::ControlFlow;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use cancel::{Cancel, CancelReason};
pub use run::{run, run_async};

/// Largest single read from a pipe, in bytes (the default pipe capacity, 64 KiB).
pub const MAX_READ: usize = 64 * 1024;

/// `PATH` for a step or command whose environment has none (agent-contract.md 8.3): the one
/// definition, re-exported where steps and host commands are built.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What to run: everything the process sees.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    /// Path of the executable as seen by the process (inside the chroot if any); without a
    /// `/` it is looked up in the `PATH` of [`Spec::env`].
    pub program: PathBuf,
    /// `argv[1..]` (`argv[0]` is `program`).
    pub args: Vec<OsString>,
    /// The complete environment: nothing of this process's is inherited.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory as seen by the process (after the chroot).
    pub cwd: PathBuf,
    /// Directory (as seen by this process) to chroot into; `None`: no chroot.
    pub chroot: Option<PathBuf>,
    /// Bytes written to the process's stdin, then closed; `None`: stdin is `/dev/null`.
    /// Written as the process reads them (no deadlock with a process that writes first);
    /// a process that exits without reading them all is not an error.
    pub stdin: Option<Vec<u8>>,
    /// Descriptors of this process that the child inherits (their `FD_CLOEXEC` is cleared
    /// in the child only). Must be open; must not be 0, 1 or 2.
    pub keep_fds: Vec<RawFd>,
    /// A cgroup directory (see [`cgroup`]) the process joins before `exec`; the run then
    /// ends its members instead of the adopted descendants. `None`: the process group and
    /// the subreaper sweep are the boundary.
    pub cgroup: Option<PathBuf>,
    /// A mount namespace (an open `/proc/<pid>/ns/mnt`, or a bind mount of one) the process
    /// enters before the chroot and `exec`, so what it mounts is mounted there. `None`: the
    /// namespace of the spawning thread.
    pub mount_ns: Option<Arc<OwnedFd>>,
}

/// How a run is bounded; [`Default`]: no timeout, no token, 10 s grace periods, 64 KiB
/// reads.
#[derive(Debug, Clone)]
pub struct Options {
    /// End the run (`SIGTERM`, [`Options::term_grace`], `SIGKILL`) when the main process
    /// runs longer than this; `None`: no limit.
    pub timeout: Option<Duration>,
    /// End the run the same way once this token is aborted ([`Cancel::abort`]; a
    /// [`Cancel::stop`] does not end a running process).
    pub cancel: Option<Cancel>,
    /// Time between `SIGTERM` and `SIGKILL` after a timeout, an abort or a sink's stop.
    pub term_grace: Duration,
    /// Time between `SIGTERM` to what is left of the step and `SIGKILL`, after the main
    /// process exited, while output is still drained (cut short by end of file on both
    /// pipes).
    pub exit_grace: Duration,
    /// Largest single read, in bytes; clamped to `1..=`[`MAX_READ`].
    pub read_size: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timeout: None,
            cancel: None,
            term_grace: Duration::from_secs(10),
            exit_grace: Duration::from_secs(10),
            read_size: MAX_READ,
        }
    }
}

/// One of the two output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// The process's stdout.
    Stdout,
    /// The process's stderr.
    Stderr,
}

impl Stream {
    /// `"stdout"` or `"stderr"`.
    pub fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Receives a run's output, on the thread that runs it.
pub trait Sink {
    /// Called once, right after the process was spawned (not when the spawn failed), before
    /// any chunk.
    fn started(&mut self) {}

    /// Called once with the main process's pid (also its process group id), right before
    /// [`Sink::started`]. The pid stays valid (a zombie at worst) until the run returns.
    fn spawned(&mut self, _pid: i32) {}

    /// One read of `stream` (1 to [`Options::read_size`] bytes, not aligned to lines or
    /// characters), in read order. `Break` ends the run like an abort
    /// ([`Outcome::SinkStopped`]); the sink then receives no more chunks (the rest of the
    /// output is read and discarded).
    fn chunk(&mut self, stream: Stream, bytes: &[u8]) -> ControlFlow<()>;

    /// The chunks of `stream` given since the last flush are all there is for now (its pipe
    /// would block, it reached end of file, or 64 KiB were read in a row): write out
    /// whatever was batched.
    fn flush(&mut self, _stream: Stream) {}
}

/// How the main process ended, when it was reaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// It exited with this code (0-255).
    Code(i32),
    /// It was killed by this signal number.
    Signal(i32),
}

/// How a run ended.
#[derive(Debug)]
pub enum Outcome {
    /// The main process exited by itself with this code.
    Exited(i32),
    /// The main process was killed by this signal number (not sent by the run).
    Signaled(i32),
    /// The process could not be started: program missing or not executable, chroot or chdir
    /// failure (the `pre_exec` or `exec` error), or a failure to make pipes.
    SpawnFailed(io::Error),
    /// [`Options::timeout`] passed and the run was ended; `status` is how the main process
    /// ended then.
    TimedOut {
        /// How the main process ended after the `SIGTERM` (or `SIGKILL`).
        status: Status,
    },
    /// [`Options::cancel`] was aborted while the main process ran.
    Cancelled {
        /// The token's reason.
        reason: CancelReason,
        /// How the main process ended; `None` when the token was aborted before the spawn
        /// (nothing was started).
        status: Option<Status>,
    },
    /// [`Sink::chunk`] returned `Break` and the run was ended.
    SinkStopped {
        /// How the main process ended.
        status: Status,
    },
}

impl Outcome {
    /// The run's status as one number (a step's `FAILED:` line, agent-contract 8.4): the
    /// exit code, `-<signal>` for a signal (Python's convention) and for a cancelled run
    /// (the signal that ended it, `SIGTERM` when it exited by itself after the `SIGTERM` or
    /// was never started), `127` when the process could not start (and for a run its sink
    /// stopped), `124` for a timeout (coreutils `timeout`'s status).
    pub fn display_status(&self) -> i32 {
        match self {
            Outcome::Exited(code) => *code,
            Outcome::Signaled(sig) => -*sig,
            Outcome::SpawnFailed(_) | Outcome::SinkStopped { .. } => 127,
            Outcome::TimedOut { .. } => 124,
            Outcome::Cancelled {
                status: Some(Status::Signal(s)),
                ..
            } => -*s,
            Outcome::Cancelled { .. } => -libc::SIGTERM,
        }
    }

    /// True if and only if the main process exited by itself with a code `accepts` accepts
    /// (a step's `returncodes`). A signal, a timeout, a cancel, a sink's stop or a spawn
    /// failure is always a failure.
    pub fn succeeded_with(&self, accepts: impl Fn(i32) -> bool) -> bool {
        match self {
            Outcome::Exited(code) => accepts(*code),
            _ => false,
        }
    }
}

/// Everything a run observed.
#[derive(Debug)]
pub struct Report {
    /// How it ended.
    pub outcome: Outcome,
    /// False when a pipe was still open (held by a process that could not be killed) when
    /// the run gave up reading it; the rest of that output is lost.
    pub drained: bool,
    /// Failures to read a pipe (at most one per stream; that stream is not read further).
    pub read_errors: Vec<(Stream, io::Error)>,
}

/// A pidfd of `pid` (`pidfd_open(2)`), readable once the process exited; `None` when the
/// process is gone (reaped) or the kernel has no pidfds.
fn pidfd_open(pid: libc::pid_t) -> Option<OwnedFd> {
    // SAFETY: pidfd_open(2) with a pid and no flags; the result is checked.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = RawFd::try_from(fd).ok().filter(|&fd| fd >= 0)?;
    // SAFETY: a fresh descriptor we own.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Test helper: true when the process `pid` (decimal text, surrounding whitespace allowed)
/// has exited (a zombie counts), waiting for its pidfd at most 10 s: a `SIGKILL`ed process
/// that is not our child finishes dying asynchronously.
#[cfg(test)]
pub(crate) fn wait_exited(pid: &str) -> bool {
    use std::os::fd::AsRawFd;
    let pid: libc::pid_t = pid.trim().parse().expect("a pid");
    let Some(fd) = pidfd_open(pid) else {
        return true; // ESRCH: reaped already
    };
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, 10_000) == 1 }
}
