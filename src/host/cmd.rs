//! Commands: `run`, `query`, `sh`.
//!
//! A command runs chrooted into the host root (when [`HostOptions::commands_chrooted`]; the
//! `chroot` and `chdir` happen in `pre_exec`, which only makes async-signal-safe calls), in
//! its own process group, with stdin from `input` or `/dev/null`, and with exactly the step's
//! environment plus its own `env` (no inherited agent environment). `PATH` is looked up after
//! the chroot, so the host's programs are found.
//!
//! A timeout (the option, else what remains of the step's deadline) kills the whole process
//! group with `SIGKILL`. Output is collected whole (these are short helpers; step output
//! streaming is the runner's job).
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
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::host::Host;
use crate::host::effect::{Effect, quote_argv};
use crate::host::error::{HostError, Result};

/// `PATH` given to commands when the step's environment has none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

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
}

/// The result of a command (`#{code, stdout, stderr, ok, planned}` in scripts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CmdOutput {
    /// Exit code; the negated signal number when killed by a signal (as Python's
    /// `subprocess`).
    pub code: i32,
    /// Standard output (UTF-8, invalid bytes replaced).
    pub stdout: String,
    /// Standard error (UTF-8, invalid bytes replaced).
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

enum Event {
    Exited(std::io::Result<std::process::ExitStatus>),
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
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
    let (tx, rx) = mpsc::channel();
    if let (Some(mut stdin), Some(input)) = (child.stdin.take(), opts.input.clone()) {
        std::thread::spawn(move || {
            // A child that exits without reading gives EPIPE: not an error of ours.
            let _ = stdin.write_all(&input);
        });
    }
    if let Some(mut out) = child.stdout.take() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = out.read_to_end(&mut buf);
            let _ = tx.send(Event::Stdout(buf));
        });
    }
    if let Some(mut err) = child.stderr.take() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = err.read_to_end(&mut buf);
            let _ = tx.send(Event::Stderr(buf));
        });
    }
    std::thread::spawn(move || {
        let _ = tx.send(Event::Exited(child.wait()));
    });
    let timeout = opts.timeout.or_else(|| h.remaining());
    let deadline = timeout.map(|t| Instant::now() + t);
    let (mut stdout, mut stderr, mut status) = (None, None, None);
    let mut timed_out = false;
    while stdout.is_none() || stderr.is_none() || status.is_none() {
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
            Event::Stdout(b) => stdout = Some(b),
            Event::Stderr(b) => stderr = Some(b),
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
        stdout: String::from_utf8_lossy(&stdout.unwrap_or_default()).into_owned(),
        stderr: String::from_utf8_lossy(&stderr.unwrap_or_default()).into_owned(),
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
