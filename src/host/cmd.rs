//! Commands: `run`, `query`, `sh`.
//!
//! A command runs chrooted into the host root (when [`HostOptions::commands_chrooted`]; the
//! `chroot` and `chdir` happen in `pre_exec`, which only makes async-signal-safe calls), in
//! its own process group, with stdin from `input` or `/dev/null`, and with exactly the step's
//! environment plus its own `env` (no inherited agent environment). `PATH` is looked up after
//! the chroot, so the host's programs are found.
//!
//! A timeout (the option, else what remains of the step's deadline) kills the whole process
//! group with `SIGKILL`. Both pipes are read concurrently (one thread each), so a child that
//! fills one pipe while the other is not being read cannot deadlock.
//!
//! Output is collected whole, unless [`RunOptions::stream`] is set: then each chunk is handed
//! to the [`OutputSink`] as soon as it is read (in the calling thread, in the order the chunks
//! were read), and only the last [`STREAM_CAPTURE_LIMIT`] bytes of each stream are kept for the
//! result, so a chatty command cannot exhaust memory.
//!
//! In plan and check mode a command that is not `read_only` is handed to the executor as an
//! [`Effect::Command`] action and not executed; it returns [`CmdOutput::planned`].
//!
//! [`HostOptions::commands_chrooted`]: crate::host::HostOptions::commands_chrooted

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::host::Host;
use crate::host::effect::{Effect, quote_argv};
use crate::host::error::{HostError, Result};

/// `PATH` given to commands when the step's environment has none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// At most this many bytes (64 KiB) of each of stdout and stderr are kept in the result of a
/// streamed command (the last ones; a multi-byte character cut at the start is dropped).
pub const STREAM_CAPTURE_LIMIT: usize = 64 * 1024;

/// Bytes read from a pipe at a time (one chunk at most this long).
const CHUNK: usize = 64 * 1024;

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

/// A shared [`OutputSink`], as held by [`RunOptions::stream`].
#[derive(Clone)]
pub struct StreamTo(pub Arc<dyn OutputSink>);

impl std::fmt::Debug for StreamTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamTo(..)")
    }
}

/// Options of `run(argv, #{...})`.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Fail with [`HostError::CommandFailed`] on a non-zero exit code.
    pub check: bool,
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
        }
    }
}

/// `run(argv, opts)`: run a command (see the module docs).
///
/// # Errors
/// [`HostError::Invalid`] for an empty argv; [`HostError::ProgramNotFound`];
/// [`HostError::Spawn`]; [`HostError::Timeout`]; [`HostError::CommandFailed`] with `check`.
pub fn run(h: &mut Host, argv: &[String], opts: &RunOptions) -> Result<CmdOutput> {
    if argv.is_empty() || argv[0].is_empty() {
        return Err(HostError::Invalid {
            what: "argv",
            message: "a command needs at least a program name".into(),
        });
    }
    if opts.read_only {
        return exec(h, argv, opts);
    }
    let out = h.submit(Effect::Command {
        argv: argv.to_vec(),
        opts: opts.clone(),
    })?;
    Ok(out.unwrap_or_else(CmdOutput::planned))
}

/// `query(argv, opts)`: [`run`] with `read_only: true` (executed in every mode).
///
/// # Errors
/// As [`run`].
pub fn query(h: &mut Host, argv: &[String], opts: &RunOptions) -> Result<CmdOutput> {
    let opts = RunOptions {
        read_only: true,
        ..opts.clone()
    };
    run(h, argv, &opts)
}

/// `sh(script, opts)`: [`run`] of `["/bin/bash", "-c", script]`.
///
/// # Errors
/// As [`run`].
pub fn sh(h: &mut Host, script: &str, opts: &RunOptions) -> Result<CmdOutput> {
    run(
        h,
        &[
            "/bin/bash".to_string(),
            "-c".to_string(),
            script.to_string(),
        ],
        opts,
    )
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

/// One of a command's two output pipes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pipe {
    Stdout,
    Stderr,
}

enum Event {
    Exited(std::io::Result<std::process::ExitStatus>),
    /// One read of a pipe.
    Chunk(Pipe, Vec<u8>),
    /// The pipe reached end of file (or failed to read).
    Eof,
}

/// Events in flight at most (backpressure: a sink slower than the command slows the readers,
/// it does not buffer without bound).
const QUEUE: usize = 16;

/// Read `r` to its end in chunks, sending each; then [`Event::Eof`]. Stops early when the
/// receiver is gone.
fn pump(mut r: impl Read, pipe: Pipe, tx: mpsc::SyncSender<Event>) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if tx.send(Event::Chunk(pipe, buf[..n].to_vec())).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = tx.send(Event::Eof);
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

/// Execute a command now, in every mode (the executor's and the queries' path).
pub(crate) fn exec(h: &Host, argv: &[String], opts: &RunOptions) -> Result<CmdOutput> {
    let command = quote_argv(argv);
    let spawn_err = |source: std::io::Error| HostError::Spawn {
        command: command.clone(),
        source,
    };
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    cmd.env_clear();
    let mut has_path = false;
    for (k, v) in h.options().env.iter().chain(opts.env.iter()) {
        has_path |= k == "PATH";
        cmd.env(k, v);
    }
    if !has_path {
        cmd.env("PATH", DEFAULT_PATH);
    }
    cmd.stdin(if opts.input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::piped());
    cmd.stderr(Stdio::piped());
    cmd.process_group(0);
    let cwd = opts.cwd.clone().unwrap_or_else(|| "/".into());
    if h.options().commands_chrooted {
        // Checked here so that a bad cwd is not reported as a missing program.
        if !h
            .root()
            .metadata(std::path::Path::new(&cwd))?
            .is_some_and(|m| m.is_dir())
        {
            return Err(HostError::Invalid {
                what: "working directory",
                message: format!("{cwd} is not a directory under the host root"),
            });
        }
        let bad = |what: &str| HostError::Invalid {
            what: "command directory",
            message: format!("{what} contains a NUL byte"),
        };
        let root =
            CString::new(h.root().mount().as_os_str().as_bytes()).map_err(|_| bad("root"))?;
        let dir = CString::new(cwd.as_bytes()).map_err(|_| bad("cwd"))?;
        // SAFETY: chroot and chdir are async-signal-safe; the CStrings are moved in and
        // outlive the fork.
        unsafe {
            cmd.pre_exec(move || {
                if libc::chroot(root.as_ptr()) != 0 || libc::chdir(dir.as_ptr()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    } else {
        cmd.current_dir(&cwd);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(HostError::ProgramNotFound { command });
        }
        Err(e) => return Err(spawn_err(e)),
    };
    let pid = child.id() as i32;
    let (tx, rx) = mpsc::sync_channel(QUEUE);
    if let (Some(mut stdin), Some(input)) = (child.stdin.take(), opts.input.clone()) {
        std::thread::spawn(move || {
            // A child that exits without reading gives EPIPE: not an error of ours.
            let _ = stdin.write_all(&input);
        });
    }
    let mut open = 0;
    if let Some(out) = child.stdout.take() {
        let tx = tx.clone();
        open += 1;
        std::thread::spawn(move || pump(out, Pipe::Stdout, tx));
    }
    if let Some(err) = child.stderr.take() {
        let tx = tx.clone();
        open += 1;
        std::thread::spawn(move || pump(err, Pipe::Stderr, tx));
    }
    std::thread::spawn(move || {
        let _ = tx.send(Event::Exited(child.wait()));
    });
    let sink = opts.stream.as_ref().map(|s| &s.0);
    let limit = sink.map(|_| STREAM_CAPTURE_LIMIT);
    let (mut stdout, mut stderr) = (Capture::new(limit), Capture::new(limit));
    let timeout = opts.timeout.or_else(|| h.remaining());
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut status = None;
    let mut timed_out = false;
    while open > 0 || status.is_none() {
        let ev = match deadline {
            Some(d) if !timed_out => {
                match rx.recv_timeout(d.saturating_duration_since(Instant::now())) {
                    Ok(ev) => ev,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        timed_out = true;
                        let _ = nix::sys::signal::killpg(
                            nix::unistd::Pid::from_raw(pid),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
            _ => match rx.recv() {
                Ok(ev) => ev,
                Err(_) => break,
            },
        };
        match ev {
            Event::Exited(s) => status = Some(s.map_err(spawn_err)?),
            Event::Chunk(Pipe::Stdout, b) => {
                if let Some(sink) = sink {
                    sink.stdout(&b);
                }
                stdout.push(&b);
            }
            Event::Chunk(Pipe::Stderr, b) => {
                if let Some(sink) = sink {
                    sink.stderr(&b);
                }
                stderr.push(&b);
            }
            Event::Eof => open -= 1,
        }
    }
    if timed_out {
        return Err(HostError::Timeout {
            command,
            secs: timeout.unwrap_or_default().as_secs_f64(),
        });
    }
    let status = status.ok_or_else(|| spawn_err(std::io::Error::other("lost the child")))?;
    let code = status
        .code()
        .unwrap_or_else(|| -status.signal().unwrap_or(0));
    let out = CmdOutput {
        code,
        stdout: stdout.into_string(),
        stderr: stderr.into_string(),
        ok: code == 0,
        planned: false,
    };
    if opts.check && !out.ok {
        return Err(HostError::CommandFailed {
            command,
            code,
            stderr_tail: tail(&out.stderr),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::Capture;

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
