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
//! Spawned from a thread of a package plan's mount namespace (serve's `package_plan`), the
//! child is made in the plan's PID namespace, enters its network namespace and takes its
//! rlimits before that, marks every descriptor from 3 up but `keep_fds` close-on-exec (none
//! the server holds reaches it, even one inherited without `FD_CLOEXEC`), and after its
//! `chroot` and `chdir` becomes the plan's query user
//! (not root, no capability, `no_new_privs`; see [`sandbox`]): whatever its `Spec`, it
//! cannot signal a process of the server's namespace, has only its own loopback, reaches
//! only the host files an unprivileged user may and only the allowed host Unix sockets
//! (its `connect`s answered by the plan's broker, `sock_broker/`, to which it sends its
//! seccomp filter's listener before `exec`), and is bounded in memory, CPU time and (with
//! its namespace) process count. It also joins the plan's own cgroup
//! ([`plan_cgroup`]) right after [`Spec::cgroup`]'s, so the plan's processes together are
//! held to the plan's memory and process limits.
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
pub mod dbus_filter;
mod pidfd;
pub mod plan_cgroup;
mod query_user;
pub mod reaper;
mod report;
mod run;
pub mod sandbox;
mod seccomp;
mod sink;
mod sock_broker;
mod spawn;
mod spec;
pub mod sweep;

pub use cancel::{Cancel, CancelReason};
use pidfd::pidfd_open;
#[cfg(test)]
pub(crate) use pidfd::wait_exited;
pub use report::{Outcome, Report, Status};
pub use run::{commands_wall_us, run, run_async};
pub use sink::{Sink, Stream};
pub use spec::{DEFAULT_PATH, MAX_READ, Options, Spec};
