//! [`Sink`]: what receives a run's output, chunk by chunk, and [`Stream`]: which pipe a
//! chunk came from.

use std::ops::ControlFlow;

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

    /// One read of `stream` (1 to [`Options::read_size`](super::Options::read_size) bytes, not aligned to lines or
    /// characters), in read order. `Break` ends the run like an abort
    /// ([`Outcome::SinkStopped`](super::Outcome::SinkStopped)); the sink then receives no more chunks (the rest of the
    /// output is read and discarded).
    fn chunk(&mut self, stream: Stream, bytes: &[u8]) -> ControlFlow<()>;

    /// The chunks of `stream` given since the last flush are all there is for now (its pipe
    /// would block, it reached end of file, or 64 KiB were read in a row): write out
    /// whatever was batched.
    fn flush(&mut self, _stream: Stream) {}
}
