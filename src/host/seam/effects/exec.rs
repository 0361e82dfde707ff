//! The command primitive: one command run through [`crate::process::run`] on the calling
//! thread, chrooted into the host root when the session says so, with exactly the step's
//! environment, its output captured whole (up to [`CAPTURE_LIMIT`]) or streamed to an
//! [`OutputSink`], and ended by its timeout or the step's cancel token. The apply executor runs
//! [`crate::host::effects::effect::Effect::Command`]s with it and `cmd::` runs queries and guards
//! with it; `crate::host::system::cmd`'s module docs describe the behaviour scripts see.

use std::ffi::OsString;
use std::ops::ControlFlow;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::host::effects::context::Context;
use crate::host::root::error::{HostError, Result};
pub use crate::process::DEFAULT_PATH;
use crate::process::{self, Stream};

/// At most this many bytes (64 KiB) of each of stdout and stderr are kept in the result of a
/// streamed command (the last ones; a multi-byte character cut at the start is dropped).
pub const STREAM_CAPTURE_LIMIT: usize = 64 * 1024;

/// At most this many bytes (16 MiB) of each of stdout and stderr are captured for a command
/// that is not streamed: a command printing more is ended and the call fails with
/// [`HostError::OutputTooLarge`] (use the `stream` option for large output).
pub const CAPTURE_LIMIT: usize = 16 * 1024 * 1024;

/// Bytes read from a pipe at a time (one chunk at most this long).
const CHUNK: usize = 64 * 1024;

/// Time a command's process group has between `SIGTERM` and `SIGKILL`: after a timeout, a
/// cancel or the capture limit, and after the main process exited (while its pipes are
/// still read), 5 s.
pub const COMMAND_GRACE: Duration = Duration::from_secs(5);

/// Receives a streamed command's output live (`run(argv, #{stream: true})`): the script layer
/// passes the step's output, so the agent's log sink labels, timestamps and writes each chunk.
///
/// Called from the thread that runs the command, one chunk (the bytes of one pipe read, at most
/// 64 KiB, not aligned to lines or characters) at a time, stdout and stderr chunks interleaved
/// in the order they were read. Must not fail: output never fails a command.
pub trait OutputSink: Send + Sync {
    /// One chunk of the command's stdout.
    fn stdout(&self, bytes: &[u8]);
    /// One chunk of the command's stderr.
    fn stderr(&self, bytes: &[u8]);
}

/// A shared [`OutputSink`], as held by [`CommandOptions::stream`].
#[derive(Clone)]
pub struct StreamTo(pub Arc<dyn OutputSink>);

impl std::fmt::Debug for StreamTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamTo(..)")
    }
}

/// One idempotence guard of a command (see the module docs): the work is *done* when the
/// guard says so, and the command is then skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guard {
    /// Done when this host path exists (`#{creates: path}`).
    Creates(String),
    /// Done when this host path does not exist (`#{removes: path}`).
    Removes(String),
    /// Done when this command exits 0 (`#{unless: argv}`).
    Unless(Vec<String>),
    /// Done when this command exits non-zero (`#{onlyif: argv}`).
    Onlyif(Vec<String>),
    /// Already decided not done by the host function that submitted the command
    /// (`raid::create`, `fs::mkfs` read the host themselves); the text says what the command
    /// does (`raid /dev/md/x level 0 from [...]`) and leads the report's summary. Never
    /// evaluated.
    Decided(String),
}

impl Guard {
    /// `creates /path`, `unless id gpuops`, ... (as summaries show it).
    pub fn text(&self) -> String {
        match self {
            Guard::Creates(p) => format!("creates {p}"),
            Guard::Removes(p) => format!("removes {p}"),
            Guard::Unless(a) => format!("unless {}", quote_argv(a)),
            Guard::Onlyif(a) => format!("onlyif {}", quote_argv(a)),
            Guard::Decided(t) => t.clone(),
        }
    }
}

/// The summary of a guarded command: `run: useradd gpuops (unless id gpuops)`, or for
/// `sh(script)` (`/bin/bash -c script`) `sh: <script> (...)`; for a command a host
/// function decided ([`Guard::Decided`]) `<what it does>: <argv>`.
pub fn guarded_summary(argv: &[String], guards: &[Guard]) -> String {
    if let [Guard::Decided(what)] = guards {
        return format!("{what}: {}", quote_argv(argv));
    }
    let what = match argv {
        [bash, c, script] if bash == "/bin/bash" && c == "-c" => format!("sh: {script}"),
        _ => format!("run: {}", quote_argv(argv)),
    };
    let g: Vec<String> = guards.iter().map(Guard::text).collect();
    format!("{what} ({})", g.join(", "))
}

/// Options of `run(argv, #{...})`.
#[derive(Debug, Clone, Default)]
pub struct CommandOptions {
    /// Fail with [`HostError::CommandFailed`] on an exit code not in [`CommandOptions::ok`].
    pub check: bool,
    /// The exit codes `check` accepts; empty: only 0.
    pub ok: Vec<i32>,
    /// Bytes written to stdin (else stdin is `/dev/null`).
    pub input: Option<Vec<u8>>,
    /// Extra environment variables (after the step's, so they win).
    pub env: Vec<(String, String)>,
    /// Working directory (a host path); default `/`.
    pub cwd: Option<String>,
    /// Kill the process group after this long; default: what remains of the step's deadline,
    /// none without a deadline.
    pub timeout: Option<Duration>,
    /// A query, safe to execute during a plan or check.
    pub read_only: bool,
    /// Forward stdout and stderr to this sink as they arrive; the result then keeps only the
    /// last [`STREAM_CAPTURE_LIMIT`] bytes of each. A command that is not executed (plan and
    /// check mode, not `read_only`) streams nothing.
    pub stream: Option<StreamTo>,
    /// Idempotence guards (module docs); not empty: the command is a change.
    pub guards: Vec<Guard>,
}

impl CommandOptions {
    /// Whether exit `code` is a success for `check`: listed in `ok`, or 0 when `ok` is empty.
    pub fn accepts(&self, code: i32) -> bool {
        if self.ok.is_empty() {
            code == 0
        } else {
            self.ok.contains(&code)
        }
    }
}

/// The result of a command (`#{code, stdout, stderr, ok, planned}` in scripts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CmdOutput {
    /// Exit code; the negated signal number when killed by a signal (as Python's
    /// `subprocess`).
    pub code: i32,
    /// Standard output (UTF-8, invalid bytes replaced); for a streamed command its last
    /// [`STREAM_CAPTURE_LIMIT`] bytes.
    pub stdout: String,
    /// Standard error (UTF-8, invalid bytes replaced); for a streamed command its last
    /// [`STREAM_CAPTURE_LIMIT`] bytes.
    pub stderr: String,
    /// `code == 0`.
    pub ok: bool,
    /// True when the command was recorded, not executed (plan/check mode).
    pub planned: bool,
    /// True when a guard said the work was done and the command did not run.
    pub skipped: bool,
}

impl CmdOutput {
    /// The result of a command recorded in plan or check mode:
    /// `#{code: 0, stdout: "", stderr: "", ok: true, planned: true}`.
    pub fn planned() -> Self {
        CmdOutput {
            code: 0,
            stdout: String::new(),
            stderr: String::new(),
            ok: true,
            planned: true,
            skipped: false,
        }
    }

    /// The result of a guarded command whose guard said it is done:
    /// `#{code: 0, stdout: "", stderr: "", ok: true, skipped: true}`.
    pub fn skipped() -> Self {
        CmdOutput {
            planned: false,
            skipped: true,
            ..CmdOutput::planned()
        }
    }
}

/// The last lines of `s` (at most 20 lines and 2000 bytes).
fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.trim_end().lines().collect();
    let start = lines.len().saturating_sub(20);
    let mut t = lines[start..].join("\n");
    if t.len() > 2000 {
        let mut cut = t.len() - 2000;
        while !t.is_char_boundary(cut) {
            cut += 1;
        }
        t = t[cut..].to_string();
    }
    t
}

/// The captured bytes of one stream: whole, or the last `limit` bytes.
struct Capture {
    buf: Vec<u8>,
    limit: Option<usize>,
    truncated: bool,
}

impl Capture {
    fn new(limit: Option<usize>) -> Self {
        Capture {
            buf: Vec::new(),
            limit,
            truncated: false,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        // Trim only once twice the limit is held, so each byte is moved O(1) times.
        if let Some(limit) = self.limit
            && self.buf.len() > 2 * limit
        {
            self.cut_to(limit);
        }
    }

    fn cut_to(&mut self, limit: usize) {
        let cut = self.buf.len() - limit;
        self.buf.drain(..cut);
        self.truncated = true;
    }

    /// The text (invalid UTF-8 replaced); when bytes were dropped, a character cut at the
    /// start is dropped too rather than shown as a replacement character.
    fn into_string(mut self) -> String {
        if let Some(limit) = self.limit
            && self.buf.len() > limit
        {
            self.cut_to(limit);
        }
        let mut start = 0;
        if self.truncated {
            // At most 3 continuation bytes follow a lead byte.
            while start < 3.min(self.buf.len()) && self.buf[start] & 0xC0 == 0x80 {
                start += 1;
            }
        }
        String::from_utf8_lossy(&self.buf[start..]).into_owned()
    }
}

/// The primitive's sink for a command: forwards to the [`OutputSink`] of a streamed command
/// and captures each stream (its tail when streamed, else whole up to [`CAPTURE_LIMIT`]).
struct CommandSink<'a> {
    stream: Option<&'a Arc<dyn OutputSink>>,
    stdout: Capture,
    stderr: Capture,
    /// The stream that went over [`CAPTURE_LIMIT`].
    over: Option<Stream>,
}

impl process::Sink for CommandSink<'_> {
    fn chunk(&mut self, stream: Stream, bytes: &[u8]) -> ControlFlow<()> {
        let capture = match stream {
            Stream::Stdout => &mut self.stdout,
            Stream::Stderr => &mut self.stderr,
        };
        if let Some(sink) = self.stream {
            match stream {
                Stream::Stdout => sink.stdout(bytes),
                Stream::Stderr => sink.stderr(bytes),
            }
        } else if capture.buf.len() + bytes.len() > CAPTURE_LIMIT {
            self.over = Some(stream);
            return ControlFlow::Break(());
        }
        capture.push(bytes);
        ControlFlow::Continue(())
    }
}

/// Execute a command now with the root and options of `cx`, through the process primitive
/// ([`crate::process::run`], on this thread): the apply executor's path, and through
/// [`Host::exec`](crate::host::Host::exec) the queries' path in every mode.
///
/// # Errors
/// A working directory that is not a directory under the root, a missing program, a
/// timeout or cancel, a failing `check`ed command.
pub(crate) fn exec(cx: &Context, argv: &[String], opts: &CommandOptions) -> Result<CmdOutput> {
    exec_in(cx, argv, opts, None)
}

/// [`exec`] in mount namespace `mount_ns` when given ([`crate::process::Spec::mount_ns`]):
/// the command then runs in that namespace and is not chrooted (the namespace's `/` is the
/// host's; `mount::`'s `mount`/`umount`, see [`crate::host::root::mount_ns`]).
///
/// # Errors
/// As [`exec`].
pub(crate) fn exec_in(
    cx: &Context,
    argv: &[String],
    opts: &CommandOptions,
    mount_ns: Option<Arc<OwnedFd>>,
) -> Result<CmdOutput> {
    let command = quote_argv(argv);
    let _span = tracing::debug_span!("command", argv = %command).entered();
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    let mut has_path = false;
    for (k, v) in cx.opts.env.iter().chain(opts.env.iter()) {
        has_path |= k == "PATH";
        // Later entries win, as with `Command::env`.
        env.retain(|(ek, _)| ek.as_os_str() != std::ffi::OsStr::new(k));
        env.push((k.into(), v.into()));
    }
    if !has_path {
        env.push(("PATH".into(), DEFAULT_PATH.into()));
    }
    let cwd = opts.cwd.clone().unwrap_or_else(|| "/".into());
    let chroot = if cx.opts.commands_chrooted && mount_ns.is_none() {
        // Checked here so that a bad cwd is not reported as a missing program; `/` is the
        // root itself, a directory (no lookup: most commands run there).
        if cwd != "/"
            && !cx
                .root
                .metadata(std::path::Path::new(&cwd))?
                .is_some_and(|m| m.is_dir())
        {
            return Err(HostError::Invalid {
                what: "working directory",
                message: format!("{cwd} is not a directory under the host root"),
            });
        }
        Some(cx.root.mount().to_path_buf())
    } else {
        None
    };
    let spec = process::Spec {
        program: PathBuf::from(&argv[0]),
        args: argv[1..].iter().map(OsString::from).collect(),
        env,
        cwd: PathBuf::from(&cwd),
        chroot,
        stdin: opts.input.clone(),
        keep_fds: Vec::new(),
        cgroup: cx.opts.cgroup.clone(),
        mount_ns,
    };
    let timeout = opts.timeout.or_else(|| cx.remaining());
    let options = process::Options {
        timeout,
        cancel: Some(cx.opts.cancel.clone()),
        term_grace: COMMAND_GRACE,
        exit_grace: COMMAND_GRACE,
        read_size: CHUNK,
    };
    let streamed = opts.stream.as_ref().map(|s| &s.0);
    let limit = streamed.map(|_| STREAM_CAPTURE_LIMIT);
    let mut sink = CommandSink {
        stream: streamed,
        stdout: Capture::new(limit),
        stderr: Capture::new(limit),
        over: None,
    };
    let report = process::run(&spec, &options, &mut sink);
    let code = match report.outcome {
        process::Outcome::Exited(code) => code,
        process::Outcome::Signaled(sig) => -sig,
        process::Outcome::SpawnFailed(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(HostError::ProgramNotFound { command });
        }
        process::Outcome::SpawnFailed(source) => return Err(HostError::Spawn { command, source }),
        process::Outcome::TimedOut { .. } => {
            return Err(HostError::Timeout {
                command,
                secs: timeout.unwrap_or_default().as_secs_f64(),
            });
        }
        process::Outcome::Cancelled { reason, .. } => {
            return Err(HostError::Cancelled {
                command,
                reason: reason.to_string(),
            });
        }
        process::Outcome::SinkStopped { .. } => {
            return Err(HostError::OutputTooLarge {
                command,
                stream: sink.over.unwrap_or(Stream::Stdout).name(),
                limit: CAPTURE_LIMIT,
            });
        }
    };
    let out = CmdOutput {
        code,
        stdout: sink.stdout.into_string(),
        stderr: sink.stderr.into_string(),
        ok: code == 0,
        planned: false,
        skipped: false,
    };
    if opts.check && !opts.accepts(code) {
        return Err(HostError::CommandFailed {
            command,
            code,
            ok: opts.ok.clone(),
            stderr_tail: tail(&out.stderr),
        });
    }
    Ok(out)
}

/// Render an argv as a shell-like command line for messages: words made only of safe
/// characters stay bare, anything else is single-quoted (`'` as `'\''`).
pub fn quote_argv(argv: &[String]) -> String {
    argv.iter()
        .map(|a| quote_word(a))
        .collect::<Vec<_>>()
        .join(" ")
}

fn quote_word(a: &str) -> String {
    let safe = !a.is_empty()
        && a.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./=:,+@%^".contains(c));
    if safe {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_keeps_the_tail_and_drops_a_cut_character() {
        // x x é(C3 A9) €(E2 82 AC): the last 4 bytes start inside `é`.
        let mut c = Capture::new(Some(4));
        c.push("xxé€".as_bytes());
        assert_eq!(c.into_string(), "€");
        // Trimmed while pushing (beyond twice the limit) and at the end.
        let mut c = Capture::new(Some(4));
        for b in ["abc", "def", "ghi", "jk"] {
            c.push(b.as_bytes());
        }
        assert_eq!(c.into_string(), "hijk");
        // Nothing dropped: kept as it is, a stray continuation byte included.
        let mut c = Capture::new(Some(4));
        c.push(&[0xA9, b'a']);
        assert_eq!(c.into_string(), "\u{FFFD}a");
        let mut c = Capture::new(None);
        c.push(&[b'z'; 100]);
        assert_eq!(c.into_string().len(), 100);
    }
}
