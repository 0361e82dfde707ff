//! Commands: `run`, `query`, `sh`.
//!
//! A command runs chrooted into the host root (when [`HostOptions::commands_chrooted`]; the
//! `chroot` and `chdir` happen in `pre_exec`, which only makes async-signal-safe calls), in
//! its own process group, with stdin from `input` or `/dev/null`, and with exactly the step's
//! environment plus its own `env` (no inherited agent environment). `PATH` is looked up after
//! the chroot, so the host's programs are found.
//!
//! Every command runs through the process primitive ([`crate::process::run`], on the calling
//! thread, which forks and waits). A timeout (the option, else what remains of the step's
//! deadline) or an aborted [`HostOptions::cancel`] token ends the command: `SIGTERM` to its
//! process group (and, in the agent, to every descendant it adopted as a subreaper),
//! [`COMMAND_GRACE`] while its output is still read, then `SIGKILL`. When the main process
//! exits, what is left of its group gets the same treatment, so `sh("sleep 500 &")` returns
//! as soon as bash exits instead of waiting for the background child that holds the pipes.
//! Both pipes (and stdin, for `input`) are served by one `poll(2)` loop, so a child that
//! fills one pipe while writing the other cannot deadlock.
//!
//! Output is collected whole, up to [`CAPTURE_LIMIT`] bytes per stream (beyond that the
//! command is ended and the call fails with [`HostError::OutputTooLarge`]), unless
//! [`RunOptions::stream`] is set: then each chunk is handed to the [`OutputSink`] as soon as
//! it is read (in the calling thread, in the order the chunks were read), and only the last
//! [`STREAM_CAPTURE_LIMIT`] bytes of each stream are kept for the result, so a chatty command
//! cannot exhaust memory.
//!
//! In plan and check mode a command that is not `read_only` is handed to the executor as an
//! [`Effect::Command`] action and not executed; it returns [`CmdOutput::planned`].
//!
//! # Guarded commands
//!
//! A command with [`RunOptions::guards`] (`#{creates: path}`, `#{removes: path}`,
//! `#{unless: argv}`, `#{onlyif: argv}`, as Ansible's `command` module and Puppet's `exec`)
//! is a *change*: its guards are evaluated first, in every mode (a path through the session's
//! view, so a planned write counts; a guard command executed like a query, chrooted like the
//! command, with its `env`, `cwd` and `timeout`). When any guard says the work is done
//! (`creates` exists, `removes` is missing, `unless` exits 0, `onlyif` exits non-zero) the
//! command is skipped, counted unchanged and returns [`CmdOutput::skipped`]; otherwise it is
//! submitted as an [`Effect::GuardedCommand`]: run in apply, recorded as a change in plan,
//! drift in a check.
//!
//! [`HostOptions::commands_chrooted`]: crate::host::HostOptions::commands_chrooted
//! [`HostOptions::cancel`]: crate::host::HostOptions::cancel

use std::ffi::OsString;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::host::Host;
use crate::host::effect::{Effect, quote_argv};
use crate::host::error::{HostError, Result};
use crate::process::{self, Stream};

pub use crate::process::DEFAULT_PATH;

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

/// A shared [`OutputSink`], as held by [`RunOptions::stream`].
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
}

impl Guard {
    /// `creates /path`, `unless id gpuops`, ... (as summaries show it).
    pub fn text(&self) -> String {
        match self {
            Guard::Creates(p) => format!("creates {p}"),
            Guard::Removes(p) => format!("removes {p}"),
            Guard::Unless(a) => format!("unless {}", quote_argv(a)),
            Guard::Onlyif(a) => format!("onlyif {}", quote_argv(a)),
        }
    }
}

/// The summary of a guarded command: `run: useradd gpuops (unless id gpuops)`, or for
/// `sh(script)` (`/bin/bash -c script`) `sh: <script> (...)`.
pub fn guarded_summary(argv: &[String], guards: &[Guard]) -> String {
    let what = match argv {
        [bash, c, script] if bash == "/bin/bash" && c == "-c" => format!("sh: {script}"),
        _ => format!("run: {}", quote_argv(argv)),
    };
    let g: Vec<String> = guards.iter().map(Guard::text).collect();
    format!("{what} ({})", g.join(", "))
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
    /// Idempotence guards (module docs); not empty: the command is a change.
    pub guards: Vec<Guard>,
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

/// `run(argv, opts)`: run a command (see the module docs).
///
/// # Errors
/// [`HostError::Invalid`] for an empty argv; [`HostError::ProgramNotFound`];
/// [`HostError::Spawn`]; [`HostError::Timeout`]; [`HostError::Cancelled`] when the step's
/// token is aborted; [`HostError::OutputTooLarge`] beyond [`CAPTURE_LIMIT`];
/// [`HostError::CommandFailed`] with `check`.
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
    if !opts.guards.is_empty() {
        if guards_say_done(h, opts)? {
            h.note_unchanged();
            return Ok(CmdOutput::skipped());
        }
        let out = h.submit(Effect::GuardedCommand {
            argv: argv.to_vec(),
            opts: opts.clone(),
        })?;
        return Ok(out.unwrap_or_else(CmdOutput::planned));
    }
    let out = h.submit(Effect::Command {
        argv: argv.to_vec(),
        opts: opts.clone(),
    })?;
    Ok(out.unwrap_or_else(CmdOutput::planned))
}

/// Whether any guard of `opts` says the work is done (module docs). Guard commands run as
/// queries with the command's `env`, `cwd` and `timeout` (no input, no streaming, no
/// `check`).
///
/// # Errors
/// An empty guard argv, a guard path that cannot be resolved, a guard command that cannot
/// run (as [`run`]).
fn guards_say_done(h: &Host, opts: &RunOptions) -> Result<bool> {
    let query = RunOptions {
        check: false,
        input: None,
        env: opts.env.clone(),
        cwd: opts.cwd.clone(),
        timeout: opts.timeout,
        read_only: true,
        stream: None,
        guards: Vec::new(),
    };
    for g in &opts.guards {
        let done = match g {
            Guard::Creates(p) | Guard::Removes(p) => {
                let path = crate::host::fs::host_path(p)?;
                let exists = h.view_stat(&path, true)?.is_some();
                exists == matches!(g, Guard::Creates(_))
            }
            Guard::Unless(argv) | Guard::Onlyif(argv) => {
                if argv.is_empty() || argv[0].is_empty() {
                    return Err(HostError::Invalid {
                        what: "guard",
                        message: format!("{} needs at least a program name", g.text()),
                    });
                }
                let ok = exec(h, argv, &query)?.ok;
                ok == matches!(g, Guard::Unless(_))
            }
        };
        if done {
            return Ok(true);
        }
    }
    Ok(false)
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

/// Execute a command now, in every mode (the executor's and the queries' path), through the
/// process primitive ([`crate::process::run`], on this thread).
pub(crate) fn exec(h: &Host, argv: &[String], opts: &RunOptions) -> Result<CmdOutput> {
    // The command may read files with batched line edits ([`crate::host::batch`]).
    h.flush_batch()?;
    let command = quote_argv(argv);
    let _span = tracing::debug_span!("command", argv = %command).entered();
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    let mut has_path = false;
    for (k, v) in h.options().env.iter().chain(opts.env.iter()) {
        has_path |= k == "PATH";
        // Later entries win, as with `Command::env`.
        env.retain(|(ek, _)| ek.as_os_str() != std::ffi::OsStr::new(k));
        env.push((k.into(), v.into()));
    }
    if !has_path {
        env.push(("PATH".into(), DEFAULT_PATH.into()));
    }
    let cwd = opts.cwd.clone().unwrap_or_else(|| "/".into());
    let chroot = if h.options().commands_chrooted {
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
        Some(h.root().mount().to_path_buf())
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
        cgroup: h.options().cgroup.clone(),
    };
    let timeout = opts.timeout.or_else(|| h.remaining());
    let options = process::Options {
        timeout,
        cancel: Some(h.options().cancel.clone()),
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
    use super::*;
    use crate::host::ExecMode;
    use crate::host::testutil::TestHost;
    use crate::process::{Cancel, CancelReason};

    /// A session whose commands run unchrooted (the machine's own bash, sleep, yes).
    fn host(t: &TestHost, cancel: Option<Cancel>) -> Host {
        t.host_with(ExecMode::Apply, |o| {
            o.commands_chrooted = false;
            o.env = vec![("PATH".into(), "/usr/bin:/bin".into())];
            if let Some(c) = cancel {
                o.cancel = c;
            }
        })
    }

    #[test]
    fn sh_with_a_background_child_returns_when_bash_exits() {
        let t = TestHost::new();
        let mut h = host(&t, None);
        let pidfile = t.dir.path().join("pid");
        let start = std::time::Instant::now();
        let out = sh(
            &mut h,
            &format!("sleep 500 & echo $! > {}; echo done", pidfile.display()),
            &RunOptions::default(),
        )
        .unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}",
            start.elapsed()
        );
        assert_eq!((out.code, out.stdout.as_str()), (0, "done\n"));
        // The sleep got SIGTERM with the group: it is gone.
        let pid = std::fs::read_to_string(&pidfile).unwrap();
        assert!(crate::process::wait_exited(&pid));
        h.finish().unwrap();
    }

    #[test]
    fn captured_output_is_capped() {
        let t = TestHost::new();
        let mut h = host(&t, None);
        let e = run(
            &mut h,
            &["/usr/bin/yes".to_string()],
            &RunOptions::default(),
        )
        .unwrap_err();
        assert!(
            matches!(&e, HostError::OutputTooLarge { command, stream: "stdout", limit }
                if command == "/usr/bin/yes" && *limit == CAPTURE_LIMIT),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "command /usr/bin/yes printed more than 16777216 bytes on stdout (the capture limit) \
             and was stopped; use the stream option for large output"
        );
        h.finish().unwrap();
    }

    #[test]
    fn an_aborted_token_ends_the_command() {
        let t = TestHost::new();
        let cancel = Cancel::new();
        let mut h = host(&t, Some(cancel.clone()));
        let c = cancel.clone();
        let aborter = std::thread::spawn(move || {
            c.abort(CancelReason::Signal("SIGTERM"));
        });
        let start = std::time::Instant::now();
        let e = sh(&mut h, "echo up; sleep 500", &RunOptions::default()).unwrap_err();
        aborter.join().unwrap();
        assert!(start.elapsed() < Duration::from_secs(20));
        assert_eq!(
            e.to_string(),
            "command /bin/bash -c 'echo up; sleep 500' was cancelled: SIGTERM received"
        );
    }

    #[test]
    fn input_and_timeout() {
        let t = TestHost::new();
        let mut h = host(&t, None);
        let opts = RunOptions {
            input: Some(b"abc".to_vec()),
            ..RunOptions::default()
        };
        let out = sh(&mut h, "cat", &opts).unwrap();
        assert_eq!(out.stdout, "abc");
        let opts = RunOptions {
            timeout: Some(Duration::from_millis(100)),
            ..RunOptions::default()
        };
        let e = sh(&mut h, "sleep 500", &opts).unwrap_err();
        assert!(matches!(e, HostError::Timeout { .. }), "{e:?}");
        h.finish().unwrap();
    }

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

    fn argv(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    /// A chrooted root with `/bin/sh`, a `useradd` stub appending to `/users` and an `id`
    /// stub that succeeds for a listed user.
    fn users_root() -> TestHost {
        let t = TestHost::new();
        t.install_sh();
        t.stub("useradd", "echo \"$1\" >> /users");
        t.stub(
            "id",
            "[ -e /users ] || exit 1\nwhile read u; do [ \"$u\" = \"$1\" ] && exit 0; done < /users\nexit 1",
        );
        t
    }

    fn useradd(h: &mut Host) -> CmdOutput {
        run(
            h,
            &argv(&["useradd", "gpuops"]),
            &RunOptions {
                guards: vec![Guard::Unless(argv(&["id", "gpuops"]))],
                ..RunOptions::default()
            },
        )
        .unwrap()
    }

    #[test]
    fn a_guarded_command_is_a_change_in_every_mode() {
        let t = users_root();
        let summary = "run: useradd gpuops (unless id gpuops)";

        // Plan: the guard (a query) runs, the command does not; a change.
        let mut h = t.host(ExecMode::Plan);
        assert_eq!(useradd(&mut h), CmdOutput::planned());
        let rep = h.finish().unwrap();
        assert_eq!(t.calls(), ["id gpuops"]);
        assert!(!t.p("/users").exists());
        assert_eq!(rep.changes.len(), 1);
        assert_eq!(rep.changes[0].kind, "guarded_command");
        assert_eq!(rep.changes[0].summary, summary);
        assert!(rep.actions.is_empty());
        assert_eq!(rep.summary(), "Plan: 1 to change, 0 unchanged.");

        // Check: drift while the guard says not done.
        t.clear_calls();
        let mut h = t.host(ExecMode::Check);
        useradd(&mut h);
        let rep = h.finish().unwrap();
        assert_eq!(rep.drift().len(), 1);
        assert_eq!(rep.drift()[0].summary, summary);
        assert_eq!(t.calls(), ["id gpuops"]);

        // Apply: runs, counted as a change.
        t.clear_calls();
        let mut h = t.host(ExecMode::Apply);
        let out = useradd(&mut h);
        assert!(out.ok && !out.planned && !out.skipped, "{out:?}");
        assert_eq!(h.changed(), 1);
        let rep = h.finish().unwrap();
        assert_eq!(rep.summary(), "Apply: 1 changed, 0 unchanged.");
        assert_eq!(t.calls(), ["id gpuops", "useradd gpuops"]);
        assert_eq!(t.read("/users"), "gpuops\n");

        // Done now: skipped and unchanged in apply, plan and check; no drift.
        for mode in [ExecMode::Apply, ExecMode::Plan, ExecMode::Check] {
            t.clear_calls();
            let mut h = t.host(mode);
            assert_eq!(useradd(&mut h), CmdOutput::skipped());
            let rep = h.finish().unwrap();
            assert!(rep.changes.is_empty() && rep.actions.is_empty(), "{rep:?}");
            assert_eq!(rep.unchanged, 1);
            assert!(rep.drift().is_empty());
            assert_eq!(t.calls(), ["id gpuops"], "{mode:?}");
        }
        assert_eq!(t.read("/users"), "gpuops\n");
    }

    #[test]
    fn path_guards_onlyif_and_summaries() {
        let t = users_root();
        let make = |h: &mut Host, guards: Vec<Guard>| {
            run(
                h,
                &argv(&["/bin/sh", "-c", "echo x > /made"]),
                &RunOptions {
                    guards,
                    ..RunOptions::default()
                },
            )
            .unwrap()
        };
        let creates = || vec![Guard::Creates("/made".into())];
        let mut h = t.host(ExecMode::Plan);
        make(&mut h, creates());
        // a planned write satisfies a later `creates` of the same session
        crate::host::fs::write(&mut h, "/made", "planned\n", &Default::default()).unwrap();
        assert_eq!(make(&mut h, creates()), CmdOutput::skipped());
        let rep = h.finish().unwrap();
        assert_eq!(
            rep.changes[0].summary,
            "run: /bin/sh -c 'echo x > /made' (creates /made)"
        );
        assert_eq!(rep.unchanged, 1);

        let mut h = t.host(ExecMode::Apply);
        assert!(make(&mut h, creates()).ok);
        assert_eq!(t.read("/made"), "x\n");
        assert_eq!(make(&mut h, creates()), CmdOutput::skipped());
        // removes: done once the path is gone
        let removes = || vec![Guard::Removes("/gone".into())];
        assert_eq!(make(&mut h, removes()), CmdOutput::skipped());
        // onlyif: done when the guard command fails; any guard saying done skips
        let onlyif = |code: &str| Guard::Onlyif(argv(&["/bin/sh", "-c", &format!("exit {code}")]));
        assert_eq!(make(&mut h, vec![onlyif("1")]), CmdOutput::skipped());
        assert_eq!(
            make(&mut h, vec![onlyif("0"), Guard::Creates("/made".into())]),
            CmdOutput::skipped()
        );
        assert!(!make(&mut h, vec![onlyif("0")]).skipped);
        let rep = h.finish().unwrap();
        assert_eq!(rep.summary(), "Apply: 2 changed, 4 unchanged.");

        // sh's summary names the script; guards are listed in order
        assert_eq!(
            guarded_summary(
                &argv(&["/bin/bash", "-c", "mount /data"]),
                &[
                    Guard::Onlyif(argv(&["test", "-b", "/dev/sdb"])),
                    Guard::Removes("/x y".into())
                ]
            ),
            "sh: mount /data (onlyif test -b /dev/sdb, removes /x y)"
        );

        // a guard command that cannot run is the command's error
        let mut h = t.host(ExecMode::Plan);
        let e = run(
            &mut h,
            &argv(&["true"]),
            &RunOptions {
                guards: vec![Guard::Unless(argv(&["no-such-guard"]))],
                ..RunOptions::default()
            },
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to run no-such-guard: program not found"
        );
    }
}
