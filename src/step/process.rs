//! Running one step as a process (agent-contract 8.2-8.4) with its output relayed through
//! the log sink (9.3).
//!
//! # How a process is started
//!
//! Through the process primitive [`crate::process`]: [`ProcessSpec`] is complete (the
//! environment is cleared and set from the spec; 8.3 is the agent's job), stdin is
//! `/dev/null` \[fix: Python inherits the agent's stdin\], and the child gets its own process
//! group (`pgid == pid`) so a timeout or cleanup can signal every process the step started
//! \[fix\]. The optional `chroot` and the `chdir` to `cwd` run in the cloned child before
//! `exec` (`process/spawn.rs`), in that order, with async-signal-safe calls only; the child also gets `PR_SET_PDEATHSIG(SIGKILL)` and
//! inherits [`ProcessSpec::keep_fds`] (the agent passes its package-lock descriptor, so a
//! rerun waits until the last process of the step is gone). A failure there, or of `exec`,
//! becomes [`Outcome::SpawnFailed`]; the agent prints the OS error and uses status 127
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
//! the binary enabled the subreaper. With a [`ProcessSpec::timeout`], or once
//! [`RelayOptions::cancel`] is aborted, the group gets `SIGTERM`, [`RelayOptions::term_grace`]
//! while output is still relayed, then `SIGKILL`; the outcome is [`Outcome::TimedOut`] or
//! [`Outcome::Cancelled`]. Nothing sleeps. The run happens on tokio's blocking pool (the
//! thread that clones the child waits, so `PR_SET_PDEATHSIG` only fires when the agent dies); if the
//! future returned by [`ProcessRunner::run`] is dropped before the process ended, the run is
//! aborted the same way, which makes a run cancellable.
//!
//! The runner needs a tokio runtime (any flavour).

use std::ffi::OsString;
use std::io::{self, Write};
use std::ops::ControlFlow;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::time::Duration;

use chrono::NaiveDateTime;

use crate::logs::LogError;
use crate::logs::sink::{Label, LogFormat, Relay, StepLogFiles, StreamSink};
use crate::process::{self, Cancel, CancelReason, Stream};
use crate::redact::{Redactor, StreamRedactor};

/// Largest single read, whatever the buffer limit (the default pipe capacity).
const MAX_CHUNK: usize = process::MAX_READ;

/// What to run: everything the process sees. Built by the agent from a step (8.2, 8.3) or an
/// interrupt command (10).
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// Path of the executable as seen by the process (inside the chroot if any); without a
    /// `/` it is looked up in the spec's `PATH`.
    pub program: PathBuf,
    /// `argv[1..]` (`argv[0]` is `program`).
    pub args: Vec<OsString>,
    /// The complete environment: nothing of the agent's is inherited.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory as seen by the process (after the chroot).
    pub cwd: PathBuf,
    /// Agent-side directory to chroot into; `None` runs in the agent's own filesystem.
    pub chroot: Option<PathBuf>,
    /// Kill the process group (`SIGTERM`, grace, `SIGKILL`) when the process runs longer;
    /// `None` waits forever.
    pub timeout: Option<Duration>,
    /// Bytes written raw (unlabelled) to the console stdout and as the first bytes of the
    /// `.log` file before any output: the interrupt command line plus `\n` (9.3, last
    /// paragraph). Not written when the process cannot be started.
    pub preamble: Option<Vec<u8>>,
    /// Agent descriptors the process inherits (close-on-exec cleared in the child only),
    /// e.g. the package lock's `flock` descriptor; default empty. Must be open and not 0-2.
    pub keep_fds: Vec<RawFd>,
}

/// How a process run ended.
#[derive(Debug)]
pub enum Outcome {
    /// The process exited with this status.
    Exited(i32),
    /// The process was killed by this signal number.
    Signaled(i32),
    /// The process could not be started: program missing or not executable, exec format
    /// error, chroot or chdir failure (the child's error before or at `exec`), or a failure to set
    /// up pipes or wait for it.
    SpawnFailed(io::Error),
    /// [`ProcessSpec::timeout`] expired and the process group was terminated.
    TimedOut,
    /// [`RelayOptions::cancel`] was aborted (or the run's future dropped) and the process group
    /// was terminated.
    Cancelled {
        /// Why the token was aborted.
        reason: CancelReason,
        /// The signal that ended the main process: the one it died of, or `SIGTERM` (15)
        /// when it exited by itself after the `SIGTERM` or was never started.
        signal: i32,
    },
}

impl Outcome {
    /// The status for the `FAILED:` line (8.4): the exit code, `-<signal>` for a signal
    /// (Python's convention) and for a cancelled run (the signal that ended it), `127` when
    /// the process could not start, `124` for a timeout (coreutils `timeout`'s status).
    pub fn display_status(&self) -> i32 {
        match self {
            Outcome::Exited(code) => *code,
            Outcome::Signaled(sig) => -*sig,
            Outcome::SpawnFailed(_) => 127,
            Outcome::TimedOut => 124,
            Outcome::Cancelled { signal, .. } => -*signal,
        }
    }

    /// True if and only if the process exited with a code `accepts` accepts (the step's
    /// `returncodes`). A signal, a timeout, a cancel or a spawn failure is always a failure.
    pub fn succeeded_with(&self, accepts: impl Fn(i32) -> bool) -> bool {
        match self {
            Outcome::Exited(code) => accepts(*code),
            _ => false,
        }
    }
}

/// Knobs of [`ProcessRunner::run_with`] beyond the spec; [`Default`] is what
/// [`ProcessRunner::run`] uses.
pub struct RelayOptions {
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
            .field("term_grace", &self.term_grace)
            .field("drain_grace", &self.drain_grace)
            .field("cancel", &self.cancel)
            .finish()
    }
}

/// Everything [`ProcessRunner::run_with`] observed.
#[derive(Debug)]
pub struct RunReport {
    /// How the process ended.
    pub outcome: Outcome,
    /// Failures to read the pipes or write the console or log files (at most one per
    /// target); the run itself went on.
    pub output_errors: Vec<LogError>,
    /// False when output was cut off because a process that could not be killed (outside
    /// the group, with no subreaper) kept a pipe open after the final `SIGKILL`.
    pub drained: bool,
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

    /// Spawn `spec` and relay its output to the agent's stdout/stderr and, when `logs` is
    /// given, to the step's `.log`/`.log.err` files (`None`: no files, as with
    /// `SKYHOOK_AGENT_WRITE_LOGS=false`). Output errors (a full disk, a closed console) are
    /// printed on stderr as `skyhook-agent: <error>: <cause>` and do not change the outcome.
    pub async fn run(&self, spec: &ProcessSpec, logs: Option<StepLogFiles>) -> Outcome {
        let report = self.run_with(spec, logs, RelayOptions::default()).await;
        for e in &report.output_errors {
            match std::error::Error::source(e) {
                Some(cause) => eprintln!("skyhook-agent: {e}: {cause}"),
                None => eprintln!("skyhook-agent: {e}"),
            }
        }
        report.outcome
    }

    /// [`ProcessRunner::run`] with explicit consoles, clock, grace periods and cancel token,
    /// returning the output errors instead of printing them.
    pub async fn run_with(
        &self,
        spec: &ProcessSpec,
        logs: Option<StepLogFiles>,
        options: RelayOptions,
    ) -> RunReport {
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
        let failed = |e: LogError| RunReport {
            outcome: Outcome::SpawnFailed(io::Error::other(e)),
            output_errors: Vec::new(),
            drained: true,
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
            preamble: spec.preamble.clone(),
            started: false,
        };
        let pspec = process::Spec {
            program: spec.program.clone(),
            args: spec.args.clone(),
            env: spec.env.clone(),
            cwd: spec.cwd.clone(),
            chroot: spec.chroot.clone(),
            stdin: None,
            keep_fds: spec.keep_fds.clone(),
            cgroup: None,
            mount_ns: None,
        };
        let popts = process::Options {
            timeout: spec.timeout,
            cancel: options.cancel,
            term_grace: options.term_grace,
            exit_grace: options.drain_grace,
            read_size: self.buffer_limit.clamp(1, MAX_CHUNK),
        };
        let (report, mut relay) = process::run_async(pspec, popts, relay).await;
        let mut output_errors: Vec<LogError> = report
            .read_errors
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
        let outcome = match report.outcome {
            process::Outcome::Exited(c) => Outcome::Exited(c),
            process::Outcome::Signaled(s) => Outcome::Signaled(s),
            process::Outcome::SpawnFailed(e) => Outcome::SpawnFailed(e),
            process::Outcome::TimedOut { .. } => Outcome::TimedOut,
            process::Outcome::Cancelled { reason, status } => Outcome::Cancelled {
                reason,
                signal: match status {
                    Some(process::Status::Signal(s)) => s,
                    _ => libc::SIGTERM,
                },
            },
            // The relay never asks to stop.
            process::Outcome::SinkStopped { .. } => {
                Outcome::SpawnFailed(io::Error::other("the output relay stopped the run"))
            }
        };
        RunReport {
            outcome,
            output_errors,
            drained: report.drained,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::root::HostRoot;
    use crate::logs::sink::open_step_logs;
    use chrono::Timelike;
    use std::path::Path;
    use std::sync::{Arc, Mutex};

    /// A console that records what it is given.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl Write for Capture {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Capture {
        fn bytes(&self) -> Vec<u8> {
            self.0.lock().unwrap().clone()
        }
    }

    fn fixed_clock() -> NaiveDateTime {
        chrono::NaiveDate::from_ymd_opt(2025, 1, 2)
            .unwrap()
            .and_hms_micro_opt(13, 45, 1, 123_456)
            .unwrap()
    }

    const TS: &str = "2025-01-02T13:45:01.123456";

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                // A broken run hangs instead of failing; bound it generously.
                tokio::time::timeout(Duration::from_secs(60), f)
                    .await
                    .expect("run did not finish within 60 s")
            })
    }

    fn sh(script: &str) -> ProcessSpec {
        ProcessSpec {
            program: PathBuf::from("/bin/sh"),
            args: vec!["-c".into(), script.into()],
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            cwd: PathBuf::from("/"),
            chroot: None,
            timeout: None,
            preamble: None,
            keep_fds: Vec::new(),
        }
    }

    struct Run {
        report: RunReport,
        out: Vec<u8>,
        err: Vec<u8>,
    }

    fn run(limit: usize, spec: &ProcessSpec, logs: Option<StepLogFiles>) -> Run {
        let (out, err) = (Capture::default(), Capture::default());
        let options = RelayOptions {
            stdout: Some(Box::new(out.clone())),
            stderr: Some(Box::new(err.clone())),
            clock: fixed_clock,
            term_grace: Duration::from_millis(200),
            ..RelayOptions::default()
        };
        let report = block_on(ProcessRunner::new(limit).run_with(spec, logs, options));
        Run {
            report,
            out: out.bytes(),
            err: err.bytes(),
        }
    }

    fn tmp_logs() -> (tempfile::TempDir, HostRoot, StepLogFiles) {
        let d = tempfile::tempdir().unwrap();
        let root = HostRoot::open(d.path()).unwrap();
        let start = chrono::DateTime::from_timestamp(1_735_825_501, 0).unwrap();
        let logs = open_step_logs(&root, Path::new("/log/demo/1.0.0"), "foo.sh", start).unwrap();
        (d, root, logs)
    }

    fn read_log(d: &tempfile::TempDir, host: &Path) -> Vec<u8> {
        std::fs::read(d.path().join(host.strip_prefix("/").unwrap())).unwrap()
    }

    #[test]
    fn case_29_lines_labels_and_files() {
        let (d, _root, logs) = tmp_logs();
        let (out_path, err_path) = (logs.out_path.clone(), logs.err_path.clone());
        let r = run(
            8192,
            &sh("printf 'one\\ntwo\\n'; printf 'e1\\n' >&2"),
            Some(logs),
        );
        assert!(matches!(r.report.outcome, Outcome::Exited(0)));
        assert!(r.report.output_errors.is_empty());
        let expected_out = format!("[out]{TS} one\n[out]{TS} two\n[out]{TS} ");
        let expected_err = format!("[err]{TS} e1\n[err]{TS} ");
        assert_eq!(String::from_utf8(r.out).unwrap(), expected_out);
        assert_eq!(String::from_utf8(r.err).unwrap(), expected_err);
        assert_eq!(read_log(&d, &out_path), expected_out.as_bytes());
        assert_eq!(read_log(&d, &err_path), expected_err.as_bytes());
    }

    #[test]
    fn case_30_silent_step_leaves_empty_files() {
        let (d, _root, logs) = tmp_logs();
        let (out_path, err_path) = (logs.out_path.clone(), logs.err_path.clone());
        let r = run(8192, &sh("true"), Some(logs));
        assert!(matches!(r.report.outcome, Outcome::Exited(0)));
        assert_eq!(r.out, b"");
        assert_eq!(r.err, b"");
        assert_eq!(read_log(&d, &out_path), b"");
        assert_eq!(read_log(&d, &err_path), b"");
    }

    #[test]
    fn case_33_limit_four_long_lines() {
        let r = run(
            4,
            &sh("for c in a b c; do printf \"%01000d\\n\" 0 | tr 0 $c; done"),
            None,
        );
        let mut expected = String::new();
        for c in ["a", "b", "c"] {
            expected += &format!("[out]{TS} {}\n", c.repeat(1000));
        }
        expected += &format!("[out]{TS} ");
        assert_eq!(String::from_utf8(r.out).unwrap(), expected);
    }

    #[test]
    fn preamble_precedes_output_on_console_and_file() {
        let (d, _root, logs) = tmp_logs();
        let out_path = logs.out_path.clone();
        let mut spec = sh("echo x");
        spec.preamble = Some(b"systemctl restart containerd\n".to_vec());
        let r = run(8192, &spec, Some(logs));
        let expected = format!("systemctl restart containerd\n[out]{TS} x\n[out]{TS} ");
        assert_eq!(String::from_utf8(r.out).unwrap(), expected);
        assert_eq!(read_log(&d, &out_path), expected.as_bytes());
    }

    #[test]
    fn environment_is_complete_and_cwd_applies() {
        let d = tempfile::tempdir().unwrap();
        let mut spec = sh("echo \"$FOO|${HOME-unset}|$(pwd)\"");
        spec.env.push(("FOO".into(), "bar\nbaz".into()));
        spec.cwd = d.path().to_path_buf();
        let r = run(8192, &spec, None);
        let expected = format!(
            "[out]{TS} bar\n[out]{TS} baz|unset|{}\n[out]{TS} ",
            d.path().display()
        );
        assert_eq!(String::from_utf8(r.out).unwrap(), expected);
    }

    #[test]
    fn exit_code_is_kept() {
        let r = run(8192, &sh("exit 7"), None);
        assert!(matches!(r.report.outcome, Outcome::Exited(7)));
        assert_eq!(r.report.outcome.display_status(), 7);
        assert!(r.report.outcome.succeeded_with(|c| c == 7 || c == 0));
        assert!(!r.report.outcome.succeeded_with(|c| c == 0));
    }

    #[test]
    fn killed_by_signal() {
        let r = run(8192, &sh("kill -9 $$"), None);
        assert!(matches!(r.report.outcome, Outcome::Signaled(9)));
        assert_eq!(r.report.outcome.display_status(), -9);
        assert!(!r.report.outcome.succeeded_with(|_| true));
    }

    #[test]
    fn missing_program_fails_to_spawn() {
        let mut spec = sh("");
        spec.program = PathBuf::from("/nonexistent/skyhook-step");
        let r = run(8192, &spec, None);
        match &r.report.outcome {
            Outcome::SpawnFailed(e) => assert_eq!(e.kind(), io::ErrorKind::NotFound),
            other => panic!("expected SpawnFailed, got {other:?}"),
        }
        assert_eq!(r.report.outcome.display_status(), 127);
        assert!(!r.report.outcome.succeeded_with(|_| true));
    }

    #[test]
    fn bad_cwd_fails_to_spawn() {
        let mut spec = sh("true");
        spec.cwd = PathBuf::from("/nonexistent/skyhook-cwd");
        let r = run(8192, &spec, None);
        assert!(
            matches!(&r.report.outcome, Outcome::SpawnFailed(e) if e.kind() == io::ErrorKind::NotFound)
        );
    }

    #[test]
    fn script_without_shebang_runs_with_sh() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let script = d.path().join("noshebang");
        std::fs::write(&script, "echo \"via sh $1\"\nexit 3\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut spec = sh("");
        spec.program = script;
        spec.args = vec!["x".into()];
        let r = run(8192, &spec, None);
        assert!(matches!(r.report.outcome, Outcome::Exited(3)));
        assert_eq!(
            String::from_utf8(r.out).unwrap(),
            format!("[out]{TS} via sh x\n[out]{TS} ")
        );
    }

    #[test]
    fn background_child_does_not_hang_the_run() {
        // `sleep` inherits both pipes; without the group kill the run would last 1000 s.
        let r = run(8192, &sh("sleep 1000 & echo started"), None);
        assert!(matches!(r.report.outcome, Outcome::Exited(0)));
        assert!(r.report.drained);
        assert_eq!(
            String::from_utf8(r.out).unwrap(),
            format!("[out]{TS} started\n[out]{TS} ")
        );
    }

    #[test]
    fn timeout_terminates_the_group() {
        let mut spec = sh("echo begin; sleep 1000; echo never");
        spec.timeout = Some(Duration::from_millis(100));
        let r = run(8192, &spec, None);
        assert!(matches!(r.report.outcome, Outcome::TimedOut));
        assert_eq!(r.report.outcome.display_status(), 124);
        assert_eq!(
            String::from_utf8(r.out).unwrap(),
            format!("[out]{TS} begin\n[out]{TS} ")
        );
    }

    #[test]
    fn timeout_kills_a_group_ignoring_term() {
        let mut spec = sh("trap '' TERM; sleep 1000; echo never");
        spec.timeout = Some(Duration::from_millis(100));
        let r = run(8192, &spec, None);
        assert!(matches!(r.report.outcome, Outcome::TimedOut));
        assert_eq!(r.out, b"");
    }

    #[test]
    fn cancelled_run_kills_the_group() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // The child opens the fifo for writing, then blocks forever; the test reads the
        // fifo after cancelling: EOF proves every writer (the group) is dead.
        let spec = sh(&format!("exec 3>{}; sleep 1000", fifo.display()));
        let fifo2 = fifo.clone();
        let eof = block_on(async move {
            let runner = ProcessRunner::new(8192);
            let options = RelayOptions {
                stdout: Some(Box::new(Capture::default())),
                stderr: Some(Box::new(Capture::default())),
                ..RelayOptions::default()
            };
            let reader = tokio::task::spawn_blocking(move || std::fs::File::open(fifo2));
            let run = runner.run_with(&spec, None, options);
            tokio::select! {
                _ = run => panic!("run ended by itself"),
                f = reader => {
                    // The writer is open: cancel the run by dropping its future (end of select).
                    let mut f = f.unwrap().unwrap();
                    // Read after the select has dropped (cancelled) the run.
                    let (tx, rx) = std::sync::mpsc::channel();
                    std::thread::spawn(move || {
                        let mut buf = Vec::new();
                        let _ = tx.send(io::Read::read_to_end(&mut f, &mut buf).map(|_| buf));
                    });
                    rx
                }
            }
        })
        .recv_timeout(Duration::from_secs(30))
        .expect("a process of the cancelled run still holds the fifo open")
        .unwrap();
        assert_eq!(eof, b"");
    }

    #[test]
    fn aborted_token_cancels_the_run() {
        let cancel = Cancel::new();
        let c = cancel.clone();
        let spec = sh("echo begin; sleep 1000; echo never");
        let report = block_on(async move {
            let (out, err) = (Capture::default(), Capture::default());
            let options = RelayOptions {
                stdout: Some(Box::new(out)),
                stderr: Some(Box::new(err)),
                clock: fixed_clock,
                term_grace: Duration::from_millis(200),
                cancel: Some(cancel),
                ..RelayOptions::default()
            };
            let runner = ProcessRunner::new(8192);
            let run = runner.run_with(&spec, None, options);
            let abort = async {
                c.abort(CancelReason::Remote("engine-a".into()));
            };
            let (report, ()) = tokio::join!(run, abort);
            report
        });
        match &report.outcome {
            Outcome::Cancelled { reason, signal } => {
                assert_eq!(reason, &CancelReason::Remote("engine-a".into()));
                assert_eq!(*signal, 15);
            }
            other => panic!("expected Cancelled, got {other:?}"),
        }
        assert_eq!(report.outcome.display_status(), -15);
        assert!(!report.outcome.succeeded_with(|_| true));
    }

    static TICKS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

    /// A clock advancing one microsecond per reading.
    fn ticking_clock() -> NaiveDateTime {
        let t = TICKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        fixed_clock().with_nanosecond(t * 1_000).unwrap()
    }

    #[test]
    fn large_output_batches_keep_per_chunk_timestamps_and_identical_bytes() {
        let (d, _root, logs) = tmp_logs();
        let out_path = logs.out_path.clone();
        let (console, err) = (Capture::default(), Capture::default());
        let options = RelayOptions {
            stdout: Some(Box::new(console.clone())),
            stderr: Some(Box::new(err.clone())),
            clock: ticking_clock,
            ..RelayOptions::default()
        };
        // 20000 numbered lines of 80 bytes, read 4096 bytes at a time.
        let spec = sh("i=0; while [ $i -lt 20000 ]; do printf '%079d\\n' $i; i=$((i+1)); done");
        let report = block_on(ProcessRunner::new(4096).run_with(&spec, Some(logs), options));
        assert!(matches!(report.outcome, Outcome::Exited(0)));
        let bytes = console.bytes();
        assert_eq!(read_log(&d, &out_path), bytes);
        let text = String::from_utf8(bytes).unwrap();
        let lines: Vec<&str> = text.split('\n').collect();
        assert_eq!(lines.len(), 20001);
        let mut last = String::new();
        for (i, line) in lines.iter().enumerate() {
            let rest = line.strip_prefix("[out]2025-01-02T13:45:01.").unwrap();
            let (micros, body) = rest.split_at(6);
            assert!(micros.chars().all(|c| c.is_ascii_digit()), "{line}");
            assert!(micros >= last.as_str(), "timestamps go back at line {i}");
            last = micros.to_string();
            let expected = if i < 20000 {
                format!(" {i:079}")
            } else {
                " ".into()
            };
            assert_eq!(body, expected);
        }
        // more than one chunk, so more than one timestamp
        assert_ne!(last, lines[0][25..31]);
    }

    /// Copy `/bin/sh` and the libraries `ldd` lists into `dir`, at the same paths.
    fn populate_chroot(dir: &Path) {
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        let ldd = std::process::Command::new("ldd").arg(&sh).output().unwrap();
        let mut files = vec![(sh, PathBuf::from("/bin/sh"))];
        for line in String::from_utf8(ldd.stdout).unwrap().lines() {
            let path = match line.split_once("=>") {
                Some((_, rest)) => rest.trim(),
                None => line.trim(),
            };
            let path = path.split(" (").next().unwrap_or("").trim();
            if path.starts_with('/') {
                files.push((PathBuf::from(path), PathBuf::from(path)));
            }
        }
        for (src, dst) in files {
            let target = dir.join(dst.strip_prefix("/").unwrap());
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::copy(&src, &target).unwrap();
        }
    }

    #[test]
    fn chroot_runs_inside_the_directory() {
        if !nix::unistd::geteuid().is_root() {
            crate::host::testutil::skip("chroot needs root");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        populate_chroot(d.path());
        std::fs::create_dir_all(d.path().join("work")).unwrap();
        std::fs::write(d.path().join("only-in-chroot"), "").unwrap();
        let mut spec = sh("test -e /only-in-chroot && echo inside; cd . && echo \"$PWD\"");
        spec.chroot = Some(d.path().to_path_buf());
        spec.cwd = PathBuf::from("/work");
        let r = run(8192, &spec, None);
        assert!(
            matches!(r.report.outcome, Outcome::Exited(0)),
            "{:?}",
            r.report
        );
        assert_eq!(
            String::from_utf8(r.out).unwrap(),
            format!("[out]{TS} inside\n[out]{TS} /work\n[out]{TS} ")
        );
    }
}
