//! [`SinkOutput`]: a `.rhai` step's `print`/`debug`/`log::` output through the same log sink
//! as a process step's pipes (labels, per-chunk timestamps, console and `.log`/`.log.err`
//! files, redaction), so logs look the same whatever kind a step is.

use std::sync::Mutex;

use chrono::NaiveDateTime;

use crate::logs::LogError;
use crate::logs::sink::{Label, LogFormat, Relay, StepLogFiles, StreamSink};
use crate::redact::{Redactor, StreamRedactor};
use crate::script::output::ScriptOutput;

/// One output stream of a script: relay state and its sink.
struct Stream {
    relay: Relay,
    sink: StreamSink,
    out: Vec<u8>,
    errors: Vec<LogError>,
    redact: StreamRedactor,
    scratch: Vec<u8>,
}

impl Stream {
    fn new(label: Label, sink: StreamSink) -> Self {
        Stream {
            relay: Relay::new(label),
            sink,
            out: Vec::new(),
            errors: Vec::new(),
            redact: StreamRedactor::new(),
            scratch: Vec::new(),
        }
    }
}

/// A [`ScriptOutput`] that relays each chunk exactly as a process's pipe would be relayed
/// (agent-contract.md 9.3): one chunk per `print`, timestamped with the local time when it is
/// written, secrets replaced by `***`.
pub struct SinkOutput {
    out: Mutex<Stream>,
    err: Mutex<Stream>,
    redactor: Option<Redactor>,
    clock: fn() -> NaiveDateTime,
}

pub(super) fn local_now() -> NaiveDateTime {
    crate::clock::now_local()
}

impl SinkOutput {
    /// Relay to the agent's stdout/stderr and, when given, the step's log files.
    ///
    /// # Errors
    /// When a console descriptor cannot be duplicated.
    pub fn console(
        logs: Option<StepLogFiles>,
        redactor: Option<Redactor>,
    ) -> Result<Self, LogError> {
        let (out_file, err_file) = match logs {
            Some(l) => (
                Some((l.out_file, l.out_path)),
                Some((l.err_file, l.err_path)),
            ),
            None => (None, None),
        };
        Ok(Self::with_sinks(
            StreamSink::console(Label::Out, out_file)?,
            StreamSink::console(Label::Err, err_file)?,
            redactor,
            local_now,
        ))
    }

    /// Relay into the given sinks with `clock` (for tests and embedding).
    pub fn with_sinks(
        out: StreamSink,
        err: StreamSink,
        redactor: Option<Redactor>,
        clock: fn() -> NaiveDateTime,
    ) -> Self {
        SinkOutput {
            out: Mutex::new(Stream::new(Label::Out, out)),
            err: Mutex::new(Stream::new(Label::Err, err)),
            redactor,
            clock,
        }
    }

    /// The same output relaying in `format` (no output may have been relayed yet).
    pub fn with_log_format(self, format: LogFormat) -> Self {
        let set = |m: Mutex<Stream>| {
            let mut s = m.into_inner().unwrap_or_else(|p| p.into_inner());
            s.relay = Relay::with_format(s.relay.label(), format);
            Mutex::new(s)
        };
        SinkOutput {
            out: set(self.out),
            err: set(self.err),
            ..self
        }
    }

    fn feed(&self, stream: &Mutex<Stream>, bytes: &[u8]) {
        let mut s = match stream.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        let s = &mut *s;
        s.out.clear();
        match &self.redactor {
            Some(r) => {
                s.scratch.clear();
                s.redact.push(r, bytes, &mut s.scratch);
                s.relay.feed(&s.scratch, (self.clock)(), &mut s.out);
            }
            None => s.relay.feed(bytes, (self.clock)(), &mut s.out),
        }
        s.sink.write(&s.out, &mut s.errors);
    }

    /// Flush a dangling partial UTF-8 sequence (none in practice: prints are whole strings)
    /// and return the write errors seen (at most one per target).
    pub fn finish(&self) -> Vec<LogError> {
        let mut errors = Vec::new();
        for stream in [&self.out, &self.err] {
            let mut s = match stream.lock() {
                Ok(s) => s,
                Err(p) => p.into_inner(),
            };
            let s = &mut *s;
            s.out.clear();
            s.scratch.clear();
            s.redact.finish(&mut s.scratch);
            s.relay.feed(&s.scratch, (self.clock)(), &mut s.out);
            s.relay.finish(&mut s.out);
            s.sink.write(&s.out, &mut s.errors);
            errors.append(&mut s.errors);
        }
        errors
    }
}

impl ScriptOutput for SinkOutput {
    fn stdout(&self, bytes: &[u8]) {
        self.feed(&self.out, bytes);
    }
    fn stderr(&self, bytes: &[u8]) {
        self.feed(&self.err, bytes);
    }
}
