//! The wait loop of [`run`] and its async entry [`run_async`] (see the module docs of
//! [`crate::process`]).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

use super::cancel::{Cancel, CancelReason};
use super::spawn::{Spawned, spawn};
use super::{MAX_READ, Options, Outcome, Report, Sink, Spec, Status, Stream, pidfd_open, reaper};

/// Bytes of one stream read in a row before [`Sink::flush`] and a look at the other fds.
const MAX_BATCH: usize = 64 * 1024;

/// How long output is still read after the final `SIGKILL`.
const AFTER_KILL: Duration = Duration::from_secs(1);

/// Re-check interval when no pidfd (or no abort eventfd) could be made.
const FALLBACK_TICK: Duration = Duration::from_millis(50);

/// Why the run is being ended before the main process exited by itself.
enum Ending {
    TimedOut,
    Cancelled(CancelReason),
    SinkStopped,
}

fn set_nonblocking(fd: &OwnedFd) {
    if let Ok(flags) = fcntl(fd, FcntlArg::F_GETFL) {
        let flags = OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK;
        let _ = fcntl(fd, FcntlArg::F_SETFL(flags));
    }
}

/// True when `pid` has exited, without reaping it.
fn exited_nowait(pid: libc::pid_t) -> bool {
    match waitid(
        Id::Pid(Pid::from_raw(pid)),
        WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT,
    ) {
        Ok(WaitStatus::StillAlive) => false,
        Ok(_) => true,
        Err(nix::errno::Errno::EINTR) => false,
        // ECHILD: nothing left to wait for.
        Err(_) => true,
    }
}

/// Reap the main process (it has exited, or is being killed) and drop it from the
/// registry, atomically with respect to spawns and sweeps.
fn reap(pid: libc::pid_t) -> io::Result<Status> {
    let mut live = reaper::registry();
    let r = loop {
        match waitid(Id::Pid(Pid::from_raw(pid)), WaitPidFlag::WEXITED) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other,
        }
    };
    live.remove(&pid);
    match r {
        Ok(WaitStatus::Exited(_, code)) => Ok(Status::Code(code)),
        Ok(WaitStatus::Signaled(_, sig, _)) => Ok(Status::Signal(sig as i32)),
        Ok(other) => Err(io::Error::other(format!(
            "unexpected wait status {other:?}"
        ))),
        Err(e) => Err(io::Error::from(e)),
    }
}

/// How long the final sweep of a cgroup keeps killing its members.
const CGROUP_SWEEP: Duration = Duration::from_secs(10);

/// Signal the group led by `pid` and the rest of the run: the members of its cgroup, or
/// else the adopted descendants (`ESRCH` ignored).
fn signal_all(pid: libc::pid_t, cgroup: Option<&std::path::Path>, sig: Signal) {
    let _ = killpg(Pid::from_raw(pid), sig);
    match cgroup {
        Some(dir) => {
            super::cgroup::signal(dir, sig);
        }
        None => reaper::signal_adopted(sig),
    }
}

/// Once the main process exited: true when provably nothing of the run is left (its cgroup
/// is empty, or see [`reaper::nothing_adopted`]). With a cgroup, the adopted children that
/// exited already (e.g. a background child that ended before the main process) are reaped
/// first: an empty cgroup skips the final sweep.
fn nothing_left(cgroup: Option<&std::path::Path>) -> bool {
    match cgroup {
        Some(dir) => {
            reaper::reap_exited_adopted();
            super::cgroup::procs(dir).is_empty()
        }
        None => reaper::nothing_adopted(),
    }
}

/// Kill what is left of the run (its cgroup's members, or the adopted descendants) and reap
/// the adopted children that are gone.
fn sweep(cgroup: Option<&std::path::Path>) {
    match cgroup {
        Some(dir) => {
            super::sweep::kill_all(dir, CGROUP_SWEEP);
        }
        None => {
            reaper::kill_and_reap_adopted();
        }
    }
}

/// Wall time, in microseconds, that [`run`] has spent in this process on commands (from
/// the spawn to the reap, a failed spawn included), summed over every thread: the preflight logs the part of its time
/// its queries took from the difference over its run ([`commands_wall_us`]).
static COMMANDS_WALL_US: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Microseconds this process's [`run`]s have spent on commands so far (from the spawn to the
/// reap, a failed spawn included, summed over every thread); never decreases.
pub fn commands_wall_us() -> u64 {
    COMMANDS_WALL_US.load(std::sync::atomic::Ordering::Relaxed)
}

/// Adds the time from its start to its drop to [`COMMANDS_WALL_US`].
struct CommandClock(Instant);

impl Drop for CommandClock {
    fn drop(&mut self) {
        let us = u64::try_from(self.0.elapsed().as_micros()).unwrap_or(u64::MAX);
        COMMANDS_WALL_US.fetch_add(us, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Keeps a run's cgroup in [`super::cgroup`]'s list of active ones while alive.
struct Active<'a>(Option<&'a std::path::Path>);

impl<'a> Active<'a> {
    fn new(cgroup: Option<&'a std::path::Path>) -> Self {
        if let Some(d) = cgroup {
            super::cgroup::activate(d);
        }
        Active(cgroup)
    }
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        if let Some(d) = self.0 {
            super::cgroup::deactivate(d);
        }
    }
}

fn poll_timeout(now: Instant, until: Option<Instant>) -> libc::c_int {
    match until {
        None => -1,
        Some(t) => {
            let d = t.saturating_duration_since(now);
            // Round up so a wake-up is never early (no spinning on sub-millisecond rests).
            let ms = d.as_micros().div_ceil(1000);
            libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
        }
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The state of one output pipe.
struct Pipe {
    fd: Option<OwnedFd>,
    stream: Stream,
}

/// What the loop does after a look at the clock.
enum Tick {
    /// The run is over: the main process exited and the pipes are done (or abandoned).
    Done,
    /// Something changed (a signal was sent): look again.
    Again,
    /// Wait for the next event.
    Wait,
}

/// What one wait found.
enum Waited {
    /// The ready set and where each descriptor is in it.
    Ready(Vec<libc::pollfd>, Slots),
    /// A signal interrupted the wait: look at the clock again.
    Interrupted,
    /// The wait failed: the run was ended the hard way.
    Failed,
}

/// Where the wait set has each watched descriptor (`None`: not watched this round).
struct Slots {
    stdin: Option<usize>,
    pidfd: Option<usize>,
    abort: Option<usize>,
}

/// One run between its phases: [`spawned`] → ([`Run::tick`], [`Run::wait`],
/// [`Run::pump`], [`Run::feed`], [`Run::watch_main`], [`Run::watch_cancel`])* →
/// [`Run::stop`] → [`Run::reap`].
struct Run<'a> {
    pid: libc::pid_t,
    cgroup: Option<&'a std::path::Path>,
    options: &'a Options,
    /// Readable once the main process exited; `None`: re-checked every [`FALLBACK_TICK`].
    pidfd: Option<OwnedFd>,
    abort_fd: Option<BorrowedFd<'a>>,
    pipes: [Pipe; 2],
    /// The stdin pipe while bytes of `input` remain to be written.
    stdin: Option<OwnedFd>,
    input: &'a [u8],
    written: usize,
    buf: Vec<u8>,
    deadline: Option<Instant>,
    /// Why the run is being ended early, once it is.
    ending: Option<Ending>,
    /// False once the sink asked to stop: later output is read and dropped.
    sink_open: bool,
    main_exited: bool,
    /// When the `SIGKILL` is due (after a `SIGTERM` and its grace).
    kill_at: Option<Instant>,
    /// When the `SIGKILL` was sent.
    killed_at: Option<Instant>,
    /// Set when the main process exited with no descendant left: no signal, no final sweep.
    group_empty: bool,
    /// Made in a plan's sandbox: what it leaves is adopted by the sandbox's init, never by
    /// this process, so an empty adoption list proves nothing (the group is signalled).
    sandboxed: bool,
    read_errors: Vec<(Stream, io::Error)>,
    drained: bool,
    watch_abort: bool,
    cancel_without_fd: bool,
}

/// Spawn `spec` and register its pid with the reaper, atomically with respect to sweeps.
fn spawn_registered(spec: &Spec) -> io::Result<Spawned> {
    let mut live = reaper::registry();
    let s = spawn(spec)?;
    live.insert(s.pid);
    Ok(s)
}

/// The state of a run whose process was just spawned.
fn spawned<'a>(spec: &'a Spec, options: &'a Options, s: Spawned) -> Run<'a> {
    let Spawned {
        pid,
        stdin,
        stdout,
        stderr,
        sandboxed,
    } = s;
    let start = Instant::now();
    let pidfd = pidfd_open(pid);
    let abort_fd: Option<BorrowedFd<'_>> = options.cancel.as_ref().and_then(Cancel::abort_fd);
    for fd in [&stdout, &stderr].into_iter().chain(stdin.as_ref()) {
        set_nonblocking(fd);
    }
    let input: &[u8] = spec.stdin.as_deref().unwrap_or(&[]);
    Run {
        pid,
        cgroup: spec.cgroup.as_deref(),
        options,
        pidfd,
        abort_fd,
        pipes: [
            Pipe {
                fd: Some(stdout),
                stream: Stream::Stdout,
            },
            Pipe {
                fd: Some(stderr),
                stream: Stream::Stderr,
            },
        ],
        stdin: if input.is_empty() { None } else { stdin },
        input,
        written: 0,
        buf: vec![0u8; options.read_size.clamp(1, MAX_READ)],
        deadline: options.timeout.map(|t| start + t),
        ending: None,
        sink_open: true,
        main_exited: false,
        kill_at: None,
        killed_at: None,
        group_empty: false,
        sandboxed,
        read_errors: Vec::new(),
        drained: true,
        watch_abort: abort_fd.is_some(),
        cancel_without_fd: options.cancel.is_some() && abort_fd.is_none(),
    }
}

impl Run<'_> {
    /// Begin ending the run: `SIGTERM` now, `SIGKILL` at the latest `grace` later.
    fn begin_end(&mut self, grace: Duration, now: Instant) {
        signal_all(self.pid, self.cgroup, Signal::SIGTERM);
        self.kill_due(now + grace);
    }

    /// The `SIGKILL` is due at `at`, or earlier if it already was.
    fn kill_due(&mut self, at: Instant) {
        self.kill_at = Some(self.kill_at.map_or(at, |k| k.min(at)));
    }

    /// The clock's part: the end of the run, the due `SIGKILL`, the timeout.
    fn tick(&mut self, now: Instant) -> Tick {
        let pipes_open = self.pipes.iter().any(|p| p.fd.is_some());
        if self.main_exited && !pipes_open {
            return Tick::Done;
        }
        if let Some(k) = self.killed_at {
            if self.main_exited && now >= k + AFTER_KILL {
                self.drained = false;
                return Tick::Done;
            }
        } else if let Some(k) = self.kill_at
            && now >= k
        {
            signal_all(self.pid, self.cgroup, Signal::SIGKILL);
            sweep(self.cgroup);
            self.killed_at = Some(Instant::now());
            return Tick::Again;
        }
        if !self.main_exited
            && self.ending.is_none()
            && let Some(d) = self.deadline
            && now >= d
        {
            self.ending = Some(Ending::TimedOut);
            self.begin_end(self.options.term_grace, now);
            return Tick::Again;
        }
        Tick::Wait
    }

    /// One `poll` on what is watched, until the next deadline. A failure other than `EINTR`
    /// ends the run the hard way (`SIGKILL`, the pipes dropped, the error kept).
    fn wait(&mut self, now: Instant) -> Waited {
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(5);
        let mut watch = |fd: RawFd, events| {
            fds.push(libc::pollfd {
                fd,
                events,
                revents: 0,
            });
            fds.len() - 1
        };
        for p in &self.pipes {
            if let Some(fd) = &p.fd {
                watch(fd.as_raw_fd(), libc::POLLIN);
            }
        }
        let stdin = self
            .stdin
            .as_ref()
            .map(|fd| watch(fd.as_raw_fd(), libc::POLLOUT));
        let pidfd = match &self.pidfd {
            Some(fd) if !self.main_exited => Some(watch(fd.as_raw_fd(), libc::POLLIN)),
            _ => None,
        };
        let abort = match self.abort_fd {
            Some(fd) if self.watch_abort => Some(watch(fd.as_raw_fd(), libc::POLLIN)),
            _ => None,
        };
        let mut until = match self.killed_at {
            Some(k) if self.main_exited => Some(k + AFTER_KILL),
            Some(_) => None,
            None => self.kill_at,
        };
        if !self.main_exited && self.ending.is_none() {
            until = earliest(until, self.deadline);
        }
        let ticking = (!self.main_exited && self.pidfd.is_none())
            || (self.cancel_without_fd && self.ending.is_none());
        if ticking {
            until = earliest(until, Some(now + FALLBACK_TICK));
        }
        let timeout = poll_timeout(now, until);
        // SAFETY: `fds` is a valid array of pollfd for the duration of the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        if n >= 0 {
            return Waited::Ready(
                fds,
                Slots {
                    stdin,
                    pidfd,
                    abort,
                },
            );
        }
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Waited::Interrupted;
        }
        // Cannot wait: end the run the hard way rather than spin.
        signal_all(self.pid, self.cgroup, Signal::SIGKILL);
        for p in &mut self.pipes {
            p.fd = None;
        }
        self.read_errors.push((Stream::Stdout, e));
        Waited::Failed
    }

    /// Output, stdout first then stderr, each until it would block or a batch is full; each
    /// chunk to `sink` while it is open, a flush after each stream's batch.
    fn pump(&mut self, fds: &[libc::pollfd], sink: &mut dyn Sink) {
        let mut slot = 0;
        for i in 0..self.pipes.len() {
            let Some(fd) = self.pipes[i].fd.take() else {
                continue;
            };
            let stream = self.pipes[i].stream;
            let revents = fds[slot].revents;
            slot += 1;
            if revents == 0 {
                self.pipes[i].fd = Some(fd);
                continue;
            }
            let mut batch = 0;
            let mut close = false;
            while batch < MAX_BATCH {
                match nix::unistd::read(fd.as_fd(), &mut self.buf) {
                    Ok(0) => {
                        close = true;
                        break;
                    }
                    Ok(n) => {
                        batch += n;
                        if self.sink_open && sink.chunk(stream, &self.buf[..n]).is_break() {
                            self.sink_open = false;
                            if !self.main_exited && self.ending.is_none() {
                                self.ending = Some(Ending::SinkStopped);
                                self.begin_end(self.options.term_grace, Instant::now());
                            }
                        }
                    }
                    Err(nix::errno::Errno::EINTR) => {}
                    Err(nix::errno::Errno::EAGAIN) => break,
                    Err(e) => {
                        self.read_errors.push((stream, io::Error::from(e)));
                        close = true;
                        break;
                    }
                }
            }
            if self.sink_open && batch > 0 {
                sink.flush(stream);
            }
            if !close {
                self.pipes[i].fd = Some(fd);
            }
        }
    }

    /// Input, as much as the pipe takes; stdin is closed once written (or refused).
    fn feed(&mut self, fds: &[libc::pollfd], slot: Option<usize>) {
        let Some(fd) = &self.stdin else { return };
        if slot.is_none_or(|i| fds[i].revents == 0) {
            return;
        }
        let mut done = false;
        while self.written < self.input.len() {
            match nix::unistd::write(fd, &self.input[self.written..]) {
                Ok(n) => self.written += n,
                Err(nix::errno::Errno::EINTR) => {}
                Err(nix::errno::Errno::EAGAIN) => break,
                // EPIPE: the process does not read its stdin (any more).
                Err(_) => {
                    done = true;
                    break;
                }
            }
        }
        if done || self.written >= self.input.len() {
            self.stdin = None;
        }
    }

    /// The main process: once it exited, what is left of the run gets `SIGTERM` and
    /// [`Options::exit_grace`] (none of it when provably nothing is left).
    fn watch_main(&mut self, fds: &[libc::pollfd], slot: Option<usize>) {
        if self.main_exited {
            return;
        }
        let ready = match &self.pidfd {
            Some(_) => slot.is_some_and(|i| fds[i].revents != 0),
            None => exited_nowait(self.pid),
        };
        if !ready {
            return;
        }
        self.main_exited = true;
        self.stdin = None;
        if self.killed_at.is_none() {
            if !self.sandboxed && nothing_left(self.cgroup) {
                // Nothing is left to signal (see `nothing_adopted`); the pipes are still read
                // until EOF, bounded by the grace as before.
                self.group_empty = true;
                self.kill_due(Instant::now() + self.options.exit_grace);
            } else {
                self.begin_end(self.options.exit_grace, Instant::now());
            }
        }
    }

    /// The cancel token: an abort ends the run (`SIGTERM`, [`Options::term_grace`]), or,
    /// once the main process exited, cuts the rest of the grace short.
    fn watch_cancel(&mut self, fds: &[libc::pollfd], slot: Option<usize>) {
        let Some(c) = &self.options.cancel else {
            return;
        };
        let aborted = if self.watch_abort {
            slot.is_some_and(|i| fds[i].revents != 0)
        } else {
            self.cancel_without_fd && c.is_aborted()
        };
        if !aborted {
            return;
        }
        self.watch_abort = false;
        if self.main_exited {
            // Already ending: do not wait for the rest of the grace.
            self.kill_at = Some(Instant::now());
        } else if self.ending.is_none() {
            self.ending = Some(Ending::Cancelled(
                c.reason().unwrap_or(CancelReason::Parent),
            ));
            self.begin_end(self.options.term_grace, Instant::now());
        }
    }

    /// What is left: the group (the zombie leader keeps its id valid) and adopted orphans,
    /// unless the main process exited with nothing adopted (then nothing is left).
    fn stop(&self) {
        if !self.group_empty {
            if self.killed_at.is_none() {
                let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
            }
            sweep(self.cgroup);
        }
    }

    /// Reap the main process and say how the run ended.
    fn reap(self) -> Report {
        let status = match reap(self.pid) {
            Ok(s) => s,
            Err(e) => {
                return Report {
                    outcome: Outcome::SpawnFailed(e),
                    drained: self.drained,
                    read_errors: self.read_errors,
                };
            }
        };
        let outcome = match self.ending {
            Some(Ending::TimedOut) => Outcome::TimedOut { status },
            Some(Ending::Cancelled(reason)) => Outcome::Cancelled {
                reason,
                status: Some(status),
            },
            Some(Ending::SinkStopped) => Outcome::SinkStopped { status },
            None => match status {
                Status::Code(c) => Outcome::Exited(c),
                Status::Signal(s) => Outcome::Signaled(s),
            },
        };
        Report {
            outcome,
            drained: self.drained,
            read_errors: self.read_errors,
        }
    }
}

/// Run `spec` to its end, on this thread (which forks the process and waits for it, so the
/// child's `PR_SET_PDEATHSIG` fires only if this process dies), giving its output to `sink`.
/// See the module docs for how the run ends. Blocks the calling thread; needs no runtime.
///
/// The phases: a token aborted already starts nothing; spawn; then until the run is over
/// the clock (`Run::tick`), one wait (`Run::wait`) and what it found: output
/// (`Run::pump`), input (`Run::feed`), the main process's exit (`Run::watch_main`),
/// the token (`Run::watch_cancel`); then what is left is killed (`Run::stop`) and the
/// main process reaped (`Run::reap`).
///
/// Never fails: a spawn error is [`Outcome::SpawnFailed`], read errors are in
/// [`Report::read_errors`]. Side effects: the process and its group are signalled, the main
/// process is reaped, and when the subreaper is enabled every adopted descendant is killed
/// and reaped before this returns.
pub fn run(spec: &Spec, options: &Options, sink: &mut dyn Sink) -> Report {
    if let Some(c) = &options.cancel
        && c.is_aborted()
    {
        return Report {
            outcome: Outcome::Cancelled {
                reason: c.reason().unwrap_or(CancelReason::Parent),
                status: None,
            },
            drained: true,
            read_errors: Vec::new(),
        };
    }
    let _clock = CommandClock(Instant::now());
    let _active = Active::new(spec.cgroup.as_deref());
    let mut run = match spawn_registered(spec) {
        Ok(s) => spawned(spec, options, s),
        Err(e) => {
            return Report {
                outcome: Outcome::SpawnFailed(e),
                drained: true,
                read_errors: Vec::new(),
            };
        }
    };
    sink.spawned(run.pid);
    sink.started();
    loop {
        let now = Instant::now();
        match run.tick(now) {
            Tick::Done => break,
            Tick::Again => continue,
            Tick::Wait => {}
        }
        let (fds, slots) = match run.wait(now) {
            Waited::Ready(fds, slots) => (fds, slots),
            Waited::Interrupted => continue,
            Waited::Failed => break,
        };
        run.pump(&fds, sink);
        run.feed(&fds, slots.stdin);
        run.watch_main(&fds, slots.pidfd);
        run.watch_cancel(&fds, slots.abort);
    }
    run.stop();
    run.reap()
}

/// Aborts its token when dropped while armed (the run's future was dropped).
struct AbortOnDrop(Option<Cancel>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            c.abort(CancelReason::Parent);
        }
    }
}

/// [`run`] on tokio's blocking pool (whose thread forks and waits, see [`run`]); returns the
/// report and the sink. Needs a tokio runtime (any flavour).
///
/// If the returned future is dropped before the run ended, the run is aborted (reason
/// [`CancelReason::Parent`]): the group gets `SIGTERM`, [`Options::term_grace`], `SIGKILL`,
/// on the blocking thread, which keeps running until the process is reaped.
///
/// # Panics
/// When the blocking task panicked (the panic is resumed) or was cancelled by a runtime
/// shutdown.
pub async fn run_async<S: Sink + Send + 'static>(
    spec: Spec,
    mut options: Options,
    mut sink: S,
) -> (Report, S) {
    let given = options.cancel.take();
    let token = given.as_ref().map_or_else(Cancel::new, Cancel::child);
    options.cancel = Some(token.clone());
    let mut guard = AbortOnDrop(Some(token));
    let task = tokio::task::spawn_blocking(move || {
        let report = run(&spec, &options, &mut sink);
        (report, sink)
    });
    let result = task.await;
    guard.0 = None;
    match result {
        Ok((mut report, sink)) => {
            // The run saw its child token; report the reason the caller's token was given.
            if let Outcome::Cancelled { reason, .. } = &mut report.outcome
                && let Some(r) = given.as_ref().and_then(Cancel::reason)
            {
                *reason = r;
            }
            (report, sink)
        }
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("the process run's blocking task was cancelled: {e}"),
    }
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
