//! The agent's console: where its own lines (agent-contract.md sections 7-10: step headers,
//! `SUCEEDED`/`FAILED`, skip messages, warnings) and the relayed output of steps go.
//!
//! One [`Console`] is made per run and passed down; nothing prints to the process's stdout
//! behind its back. [`Console::stdio`] is the agent's (fd 1 and fd 2, through duplicated
//! descriptors: no std buffer sits between a header line and the step output relayed after
//! it); [`Console::stderr_only`] sends both streams to fd 2 (`skyhook-run --output json`
//! keeps stdout for its document); [`Console::null`] drops everything (a dry run's loop);
//! [`Console::memory`] records both streams (tests).

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};

use crate::logs::sink::Label;

type Shared = Arc<Mutex<Box<dyn Write + Send>>>;

/// The agent's stdout and stderr (see the module docs). Cloning shares the streams.
#[derive(Clone)]
pub struct Console {
    out: Shared,
    err: Shared,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Console(..)")
    }
}

fn shared(w: Box<dyn Write + Send>) -> Shared {
    Arc::new(Mutex::new(w))
}

fn dup(fd: impl AsFd) -> Box<dyn Write + Send> {
    match fd.as_fd().try_clone_to_owned() {
        Ok(fd) => Box::new(File::from(fd)),
        // No descriptor left: fall back on std's handle (line-buffered for stdout; every
        // write below is flushed).
        Err(_) => Box::new(io::stderr()),
    }
}

/// Memory buffers recording what a [`Console::memory`] console was given.
#[derive(Clone, Default, Debug)]
pub struct Recorded {
    /// Everything written to stdout.
    pub out: Arc<Mutex<Vec<u8>>>,
    /// Everything written to stderr.
    pub err: Arc<Mutex<Vec<u8>>>,
}

impl Recorded {
    /// stdout so far, as text (invalid UTF-8 replaced).
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
    /// stderr so far, as text (invalid UTF-8 replaced).
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.err.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

struct MemWriter(Arc<Mutex<Vec<u8>>>);

impl Write for MemWriter {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A writer onto one stream of a [`Console`] (for a step's relayed output), unbuffered:
/// each `write` goes through to the stream under its lock.
pub struct StreamWriter(Shared);

impl Write for StreamWriter {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let mut w = self.0.lock().unwrap_or_else(|p| p.into_inner());
        w.write_all(b)?;
        w.flush()?;
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Console {
    /// The process's stdout (fd 1) and stderr (fd 2). Flushes `std::io::stdout()` first so
    /// nothing printed earlier through std is overtaken.
    pub fn stdio() -> Self {
        let _ = io::stdout().flush();
        Console {
            out: shared(dup(io::stdout())),
            err: shared(dup(io::stderr())),
        }
    }

    /// Both streams to fd 2.
    pub fn stderr_only() -> Self {
        let err = shared(dup(io::stderr()));
        Console {
            out: err.clone(),
            err,
        }
    }

    /// Drops everything.
    pub fn null() -> Self {
        Console {
            out: shared(Box::new(io::sink())),
            err: shared(Box::new(io::sink())),
        }
    }

    /// Over any two writers (each `write` is followed by a `flush`).
    pub fn with_writers(out: Box<dyn Write + Send>, err: Box<dyn Write + Send>) -> Self {
        Console {
            out: shared(out),
            err: shared(err),
        }
    }

    /// Records both streams in memory; returns the console and its buffers.
    pub fn memory() -> (Self, Recorded) {
        let rec = Recorded::default();
        let console = Console {
            out: shared(Box::new(MemWriter(rec.out.clone()))),
            err: shared(Box::new(MemWriter(rec.err.clone()))),
        };
        (console, rec)
    }

    fn line(stream: &Shared, prefix: &str, line: &str) {
        let mut text = Vec::with_capacity(prefix.len() + line.len() + 1);
        text.extend_from_slice(prefix.as_bytes());
        text.extend_from_slice(line.as_bytes());
        text.push(b'\n');
        let mut w = stream.lock().unwrap_or_else(|p| p.into_inner());
        // A closed console must not stop the agent (the kubelet may have gone away).
        let _ = w.write_all(&text).and_then(|()| w.flush());
    }

    /// One line on stdout (with one `write`).
    pub fn say(&self, line: &str) {
        Self::line(&self.out, "", line);
    }

    /// `WARNING: <line>` on stderr.
    pub fn warn(&self, line: &str) {
        Self::line(&self.err, "WARNING: ", line);
    }

    /// One line on stderr, as it is.
    pub fn error(&self, line: &str) {
        Self::line(&self.err, "", line);
    }

    /// Raw bytes on stdout (the banner).
    pub fn write_out(&self, bytes: &[u8]) {
        let mut w = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let _ = w.write_all(bytes).and_then(|()| w.flush());
    }

    /// A writer onto `label`'s stream, for relaying a step's output through the log sink.
    pub fn writer(&self, label: Label) -> Box<dyn Write + Send> {
        Box::new(StreamWriter(match label {
            Label::Out => self.out.clone(),
            Label::Err => self.err.clone(),
        }))
    }
}

/// The console of relayed step output.
impl crate::step::invocation::ConsoleStreams for Console {
    fn writer(&self, label: crate::logs::sink::Label) -> Box<dyn std::io::Write + Send> {
        Console::writer(self, label)
    }
    fn error_line(&self, line: &str) {
        self.error(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_relay_share_one_ordered_stream() {
        let (c, rec) = Console::memory();
        c.say("header");
        let mut w = c.writer(Label::Out);
        w.write_all(b"[out]relayed\n").unwrap();
        c.say("SUCEEDED: x.sh");
        c.warn("careful");
        c.error("skyhook-agent: error: boom");
        assert_eq!(rec.stdout(), "header\n[out]relayed\nSUCEEDED: x.sh\n");
        assert_eq!(
            rec.stderr(),
            "WARNING: careful\nskyhook-agent: error: boom\n"
        );
    }

    #[test]
    fn stderr_only_and_null_do_not_touch_stdout() {
        // stderr_only: stdout and stderr are one stream (fd 2). Putting a recorder in place of
        // that stream's writer, through `out`, shows every line and the relay land in it, in order.
        let c = Console::stderr_only();
        assert!(Arc::ptr_eq(&c.out, &c.err));
        let rec = Recorded::default();
        *c.out.lock().unwrap() = Box::new(MemWriter(rec.out.clone()));
        c.say("header");
        c.writer(Label::Out).write_all(b"[out]relayed\n").unwrap();
        c.warn("careful");
        c.writer(Label::Err).write_all(b"[err]oops\n").unwrap();
        c.write_out(b"banner\n");
        assert_eq!(
            rec.stdout(),
            "header\n[out]relayed\nWARNING: careful\n[err]oops\nbanner\n"
        );
        assert_eq!(rec.stderr(), "");

        // null: two separate sinks that take every byte and keep none.
        let c = Console::null();
        assert!(!Arc::ptr_eq(&c.out, &c.err));
        c.say("dropped");
        c.write_out(b"dropped too");
        assert_eq!(c.writer(Label::Out).write(b"dropped").unwrap(), 7);
        assert_eq!(c.writer(Label::Err).write(b"dropped!").unwrap(), 8);
        assert_eq!(c.out.lock().unwrap().write(b"x").unwrap(), 1);
    }
}
