//! Running one step as a process (agent-contract 8.2-8.4: a bash step, an interrupt
//! command) with its output relayed through the log sink (9.3): [`ProcessRunner::run_step`]
//! from a [`StepInvocation`], over [`ProcessRunner::run_with`] on the primitive's own types
//! ([`process::Spec`], [`process::Outcome`], [`process::Report`]).
//!
//! # How a process is started
//!
//! Through the process primitive [`crate::process`]: the [`process::Spec`] is complete (the
//! environment is cleared and set from the spec; 8.3 is the agent's job), stdin is
//! `/dev/null` \[fix: Python inherits the agent's stdin\], and the child gets its own process
//! group (`pgid == pid`) so a timeout or cleanup can signal every process the step started
//! \[fix\]. The optional `chroot` and the `chdir` to `cwd` run in the cloned child before
//! `exec` (`process/spawn.rs`), in that order, with async-signal-safe calls only; the child also gets `PR_SET_PDEATHSIG(SIGKILL)` and
//! inherits [`process::Spec::keep_fds`] (the agent passes its package-lock descriptor, so a
//! rerun waits until the last process of the step is gone). A failure there, or of `exec`,
//! becomes [`process::Outcome::SpawnFailed`]; the agent prints the OS error and uses status 127
//! (8.4). A script without a `#!` line (`ENOEXEC`) is run with `/bin/sh <program>
//! <args...>`. `PATH` lookups (a `program` without `/`) use the spec's `PATH`, after the
//! chroot.
//!
//! # How output is relayed
//!
//! The primitive reads stdout and stderr in reads of at most `buffer_limit` bytes
//! (`SKYHOOK_AGENT_BUFFER_LIMIT`; also capped at 64 KiB, the default pipe capacity, so the
//! memory used stays small whatever the limit: a read returning less than the limit is what
//! any pipe read may do). Each chunk, with its own clock reading, goes through a [`Relay`]
//! into one reused buffer per stream; when the pipe would block (or 64 KiB were read in a
//! row) the primitive says so ([`crate::process::Sink::flush`]) and a [`StreamSink`] writes
//! the batch with one `write` to the console and one to the log file. So a fast producer
//! costs one pair of writes per batch instead of per chunk; the bytes are identical, and
//! nothing is held back while the pipe is empty. No allocation happens per chunk or per
//! line (the benchmark `benches/log_relay.sh` measures throughput against `cat > file` and
//! peak RSS). Console and file writes are blocking writes (page-cache file writes and a
//! console the kubelet drains); while one blocks, the pipes are not read, which cannot
//! deadlock the child since its pipes only fill up.
//!
//! # How the process ends
//!
//! As the primitive ends every run (see [`crate::process`]): when the main process exits,
//! what is left of its group (and every descendant the agent adopted as a child subreaper)
//! gets `SIGTERM`, the pipes are drained until end of file or for at most
//! [`RelayOptions::drain_grace`], then `SIGKILL`; nothing the step started outlives it when
//! the binary enabled the subreaper. With a [`RelayOptions::timeout`], or once
//! [`RelayOptions::cancel`] is aborted, the group gets `SIGTERM`, [`RelayOptions::term_grace`]
//! while output is still relayed, then `SIGKILL`; the outcome is [`process::Outcome::TimedOut`] or
//! [`process::Outcome::Cancelled`]. Nothing sleeps. The run happens on tokio's blocking pool (the
//! thread that clones the child waits, so `PR_SET_PDEATHSIG` only fires when the agent dies); if the
//! future returned by [`ProcessRunner::run_with`] is dropped before the process ended, the run is
//! aborted the same way, which makes a run cancellable.
//!
//! The runner needs a tokio runtime (any flavour).

use std::ffi::OsString;
use std::io::{self, Write};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::Duration;

use chrono::NaiveDateTime;

use crate::logs::LogError;
use crate::logs::sink::{Label, LogFormat, Relay, StepLogFiles, StreamSink};
use crate::process::{self, Cancel, Stream};
use crate::redact::{Redactor, StreamRedactor};

use super::invocation::{ConsoleStreams, StepInvocation, StepProgram, StepResult, log_error_lines};

/// Largest single read, whatever the buffer limit (the default pipe capacity).
const MAX_CHUNK: usize = process::MAX_READ;

/// Knobs of [`ProcessRunner::run_with`] beyond the [`process::Spec`]; [`Default`]: the
/// agent's stdout and stderr, local time, 10 s grace periods, no timeout, no redaction, no
/// token, no preamble.
pub struct RelayOptions {
    /// Kill the process group (`SIGTERM`, grace, `SIGKILL`) when the process runs longer;
    /// `None` waits forever.
    pub timeout: Option<Duration>,
    /// Bytes written raw (unlabelled) to the console stdout and as the first bytes of the
    /// `.log` file before any output: the interrupt command line plus `\n` (9.3, last
    /// paragraph). Not written when the process cannot be started.
    pub preamble: Option<Vec<u8>>,
    /// Console for the relayed stdout; `None` = the agent's stdout (fd 1).
    pub stdout: Option<Box<dyn Write + Send>>,
    /// Console for the relayed stderr; `None` = the agent's stderr (fd 2).
    pub stderr: Option<Box<dyn Write + Send>>,
    /// The clock read once per chunk; default: naive local time (`chrono::Local`), as
    /// Python's `datetime.now()`.
    pub clock: fn() -> NaiveDateTime,
    /// Time between `SIGTERM` and `SIGKILL` after a timeout or a cancel; default 10 s.
    pub term_grace: Duration,
    /// After the main process exited: how long what is left of the step has between
    /// `SIGTERM` and `SIGKILL` while the pipes are still read (cut short when both reach end
    /// of file); default 10 s.
    pub drain_grace: Duration,
    /// Secret values replaced by `***` in the relayed output (console and files), on the
    /// byte stream: a value split across two reads of the pipe is still recognised.
    pub redactor: Option<Redactor>,
    /// Ends the run (`SIGTERM`, [`RelayOptions::term_grace`], `SIGKILL`) once aborted;
    /// `None`: only the timeout or dropping the future does.
    pub cancel: Option<Cancel>,
}

fn local_now() -> NaiveDateTime {
    crate::clock::now_local()
}

impl Default for RelayOptions {
    fn default() -> Self {
        RelayOptions {
            timeout: None,
            preamble: None,
            stdout: None,
            stderr: None,
            clock: local_now,
            term_grace: Duration::from_secs(10),
            drain_grace: Duration::from_secs(10),
            redactor: None,
            cancel: None,
        }
    }
}

impl std::fmt::Debug for RelayOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayOptions")
            .field("stdout", &self.stdout.as_ref().map(|_| "custom"))
            .field("stderr", &self.stderr.as_ref().map(|_| "custom"))
            .field("timeout", &self.timeout)
            .field("preamble", &self.preamble.as_ref().map(Vec::len))
            .field("term_grace", &self.term_grace)
            .field("drain_grace", &self.drain_grace)
            .field("cancel", &self.cancel)
            .finish()
    }
}

/// Runs processes with streamed, labelled output (see the module docs).
#[derive(Debug, Clone)]
pub struct ProcessRunner {
    /// Largest read from a pipe, in bytes (`SKYHOOK_AGENT_BUFFER_LIMIT`); 0 is treated as 1.
    pub buffer_limit: usize,
    /// How relayed lines are written (`SKYHOOK_AGENT_LOG_FORMAT`).
    pub log_format: LogFormat,
}

/// One stream's relay state.
struct StreamState {
    relay: Relay,
    sink: StreamSink,
    out: Vec<u8>,
    errors: Vec<LogError>,
    /// Secret redaction applied to the raw bytes before the relay (so a value split across
    /// two reads is still hidden), with its held-back tail and a scratch buffer.
    redact: Option<(Redactor, StreamRedactor, Vec<u8>)>,
}

impl StreamState {
    fn new(label: Label, format: LogFormat, sink: StreamSink, redactor: Option<Redactor>) -> Self {
        StreamState {
            relay: Relay::with_format(label, format),
            sink,
            out: Vec::new(),
            errors: Vec::new(),
            redact: redactor.map(|r| (r, StreamRedactor::new(), Vec::new())),
        }
    }

    /// Relay `chunk` (redacted first when secrets are known) into `out`.
    fn feed(&mut self, chunk: &[u8], now: NaiveDateTime) {
        match &mut self.redact {
            Some((r, stream, scratch)) => {
                scratch.clear();
                stream.push(r, chunk, scratch);
                self.relay.feed(scratch, now, &mut self.out);
            }
            None => self.relay.feed(chunk, now, &mut self.out),
        }
    }

    /// Write what was relayed since the last write.
    fn write_out(&mut self) {
        if !self.out.is_empty() {
            self.sink.write(&self.out, &mut self.errors);
            self.out.clear();
        }
    }

    fn finish(&mut self, now: NaiveDateTime) {
        self.write_out();
        if let Some((_, stream, scratch)) = &mut self.redact {
            scratch.clear();
            stream.finish(scratch);
            self.relay.feed(scratch, now, &mut self.out);
        }
        self.relay.finish(&mut self.out);
        self.sink.write(&self.out, &mut self.errors);
        self.out.clear();
    }
}

/// The primitive's [`process::Sink`]: both streams' relays, the preamble and the clock.
struct RelaySink {
    out: StreamState,
    err: StreamState,
    clock: fn() -> NaiveDateTime,
    preamble: Option<Vec<u8>>,
    started: bool,
}

impl RelaySink {
    fn state(&mut self, stream: Stream) -> &mut StreamState {
        match stream {
            Stream::Stdout => &mut self.out,
            Stream::Stderr => &mut self.err,
        }
    }
}

impl process::Sink for RelaySink {
    fn started(&mut self) {
        self.started = true;
        if let Some(preamble) = self.preamble.take() {
            self.out.sink.write(&preamble, &mut self.out.errors);
        }
    }

    fn chunk(&mut self, stream: Stream, bytes: &[u8]) -> ControlFlow<()> {
        let now = (self.clock)();
        self.state(stream).feed(bytes, now);
        ControlFlow::Continue(())
    }

    fn flush(&mut self, stream: Stream) {
        self.state(stream).write_out();
    }
}

impl ProcessRunner {
    /// A runner reading at most `buffer_limit` bytes per chunk, relaying in the prefixed
    /// format.
    pub fn new(buffer_limit: usize) -> Self {
        ProcessRunner {
            buffer_limit,
            log_format: LogFormat::Prefixed,
        }
    }

    /// The same runner relaying in `log_format`.
    pub fn with_log_format(self, log_format: LogFormat) -> Self {
        ProcessRunner { log_format, ..self }
    }

    /// Spawn `spec` and relay its output to the consoles of `options` (default: the
    /// agent's stdout/stderr) and, when `logs` is given, to the step's `.log`/`.log.err`
    /// files (`None`: no files, as with `SKYHOOK_AGENT_WRITE_LOGS=false`). Returns the
    /// primitive's report and the output errors: its read errors (taken out of
    /// [`process::Report::read_errors`]) then failures to write a console or a file (a full
    /// disk, a closed console; at most one per target), which do not change the outcome.
    /// A log sink that cannot be set up is a [`process::Outcome::SpawnFailed`].
    pub async fn run_with(
        &self,
        spec: &process::Spec,
        logs: Option<StepLogFiles>,
        options: RelayOptions,
    ) -> (process::Report, Vec<LogError>) {
        let (out_file, err_file) = match logs {
            Some(l) => (
                Some((l.out_file, l.out_path)),
                Some((l.err_file, l.err_path)),
            ),
            None => (None, None),
        };
        let sink = |label: Label,
                    console: Option<Box<dyn Write + Send>>,
                    file: Option<(std::fs::File, PathBuf)>|
         -> Result<StreamSink, LogError> {
            match console {
                Some(c) => Ok(StreamSink::new(
                    match label {
                        Label::Out => "stdout",
                        Label::Err => "stderr",
                    },
                    c,
                    file.map(|(f, p)| (Box::new(f) as Box<dyn Write + Send>, p)),
                )),
                None => StreamSink::console(label, file),
            }
        };
        let failed = |e: LogError| {
            let report = process::Report {
                outcome: process::Outcome::SpawnFailed(io::Error::other(e)),
                drained: true,
                read_errors: Vec::new(),
            };
            (report, Vec::new())
        };
        let out_sink = match sink(Label::Out, options.stdout, out_file) {
            Ok(s) => s,
            Err(e) => return failed(e),
        };
        let err_sink = match sink(Label::Err, options.stderr, err_file) {
            Ok(s) => s,
            Err(e) => return failed(e),
        };
        let relay = RelaySink {
            out: StreamState::new(
                Label::Out,
                self.log_format,
                out_sink,
                options.redactor.clone(),
            ),
            err: StreamState::new(Label::Err, self.log_format, err_sink, options.redactor),
            clock: options.clock,
            preamble: options.preamble,
            started: false,
        };
        let popts = process::Options {
            timeout: options.timeout,
            cancel: options.cancel,
            term_grace: options.term_grace,
            exit_grace: options.drain_grace,
            read_size: self.buffer_limit.clamp(1, MAX_CHUNK),
        };
        let (mut report, mut relay) = process::run_async(spec.clone(), popts, relay).await;
        let mut output_errors: Vec<LogError> = std::mem::take(&mut report.read_errors)
            .into_iter()
            .map(|(stream, source)| LogError::Read {
                stream: stream.name(),
                source,
            })
            .collect();
        if relay.started {
            let clock = relay.clock;
            relay.out.finish(clock());
            relay.err.finish(clock());
        }
        output_errors.append(&mut relay.out.errors);
        output_errors.append(&mut relay.err.errors);
        (report, output_errors)
    }

    /// Run a process step: spawn it through the process primitive with the step's
    /// environment (an interrupt command with its preamble), relay its output (console and
    /// log files, redacted with the spec's redactor), and judge its status by the step's
    /// return codes; the spec's cancel token ends it. A spawn failure prints `skyhook-agent:
    /// failed to execute <host path>: <os error>` and has status 127 (8.4); output errors
    /// are printed on stderr and kept in the result. The result's `code` is
    /// [`process::Outcome::display_status`].
    pub async fn run_step(&self, inv: StepInvocation, console: &dyn ConsoleStreams) -> StepResult {
        let StepProgram::Process {
            program,
            cwd,
            chroot,
            shown,
        } = &inv.program
        else {
            return StepResult::failed(inv.spec.exec(), 1);
        };
        let spec = process::Spec {
            program: program.clone(),
            args: inv.args.iter().map(OsString::from).collect(),
            env: inv.env.clone(),
            cwd: cwd.clone(),
            chroot: chroot.clone(),
            keep_fds: inv.keep_fds.clone(),
            ..process::Spec::default()
        };
        let options = RelayOptions {
            stdout: Some(console.writer(Label::Out)),
            stderr: Some(console.writer(Label::Err)),
            redactor: inv.spec.redactor().cloned(),
            cancel: Some(inv.spec.cancel().clone()),
            preamble: inv.preamble.clone(),
            ..RelayOptions::default()
        };
        let (report, output_errors) = self.run_with(&spec, inv.logs, options).await;
        if let process::Outcome::SpawnFailed(e) = &report.outcome {
            console.error_line(&format!(
                "skyhook-agent: failed to execute {}: {e}",
                shown.display()
            ));
        }
        let log_errors = log_error_lines(&output_errors);
        for line in &log_errors {
            console.error_line(line);
        }
        StepResult {
            ok: report.outcome.succeeded_with(|c| inv.spec.accepts(c)),
            code: report.outcome.display_status(),
            ran: true,
            log_errors,
            ..StepResult::new(inv.spec.exec())
        }
    }
}

#[cfg(test)]
#[path = "process_tests.rs"]
pub(crate) mod tests;
