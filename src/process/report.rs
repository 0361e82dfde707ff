//! How a run ended: [`Outcome`] (with the main process's [`Status`]) and everything it
//! observed, [`Report`].

use std::io;

use super::cancel::CancelReason;
use super::sink::Stream;

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
    /// [`Options::timeout`](super::Options::timeout) passed and the run was ended; `status` is how the main process
    /// ended then.
    TimedOut {
        /// How the main process ended after the `SIGTERM` (or `SIGKILL`).
        status: Status,
    },
    /// [`Options::cancel`](super::Options::cancel) was aborted while the main process ran.
    Cancelled {
        /// The token's reason.
        reason: CancelReason,
        /// How the main process ended; `None` when the token was aborted before the spawn
        /// (nothing was started).
        status: Option<Status>,
    },
    /// [`Sink::chunk`](super::Sink::chunk) returned `Break` and the run was ended.
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
