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
//! [`CommandOptions::stream`] is set: then each chunk is handed to the [`OutputSink`] as soon as
//! it is read (in the calling thread, in the order the chunks were read), and only the last
//! [`STREAM_CAPTURE_LIMIT`] bytes of each stream are kept for the result, so a chatty command
//! cannot exhaust memory.
//!
//! In plan and check mode a command that is not `read_only` is handed to the executor as an
//! [`Effect::Command`] action and not executed; it returns [`CmdOutput::planned`].
//!
//! # Guarded commands
//!
//! A command with [`CommandOptions::guards`] (`#{creates: path}`, `#{removes: path}`,
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

use crate::host::Host;
use crate::host::effects::effect::Effect;
pub use crate::host::effects::exec::{
    CAPTURE_LIMIT, COMMAND_GRACE, CmdOutput, CommandOptions, DEFAULT_PATH, Guard, OutputSink,
    STREAM_CAPTURE_LIMIT, StreamTo, guarded_summary,
};
use crate::host::root::error::{HostError, Result};

/// `run(argv, opts)`: run a command (see the module docs).
///
/// # Errors
/// [`HostError::Invalid`] for an empty argv; [`HostError::ProgramNotFound`];
/// [`HostError::Spawn`]; [`HostError::Timeout`]; [`HostError::Cancelled`] when the step's
/// token is aborted; [`HostError::OutputTooLarge`] beyond [`CAPTURE_LIMIT`];
/// [`HostError::CommandFailed`] with `check`, for a code `ok` does not list.
pub fn run(h: &mut Host, argv: &[String], opts: &CommandOptions) -> Result<CmdOutput> {
    if argv.is_empty() || argv[0].is_empty() {
        return Err(HostError::Invalid {
            what: "argv",
            message: "a command needs at least a program name".into(),
        });
    }
    if opts.read_only {
        return h.exec(argv, opts);
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
        return Ok(planned_or_ran(h, argv, opts, out));
    }
    let out = h.submit(Effect::Command {
        argv: argv.to_vec(),
        opts: opts.clone(),
    })?;
    Ok(planned_or_ran(h, argv, opts, out))
}

host_fn! {
    /// Run `argv` (no shell) chrooted in the host root with the step's environment: `#{code,
    /// stdout, stderr, ok, planned}` (`planned` is true when the command was recorded, not run). A
    /// non-zero exit code is an error that fails the step (the command, its code and the tail of
    /// its stderr), as is a missing program.
    #[host(ns = "", effects = [Command])]
    fn run(h: &mut Host, argv: Array) -> rhai::Map {
        let argv = convert::strings(&argv, "argv")?;
        Ok(output_map(super::run(h, &argv, &checked())?))
    }

    /// As `run(argv)` with `#{check, ok, input, env, cwd, timeout, read_only, stream}`: `ok` lists
    /// the exit codes that pass (`run(["grep", "-q", "x", "/etc/f"], #{ok: [0, 1]})`; the result's
    /// `code` says which), any other is an error (command, code and stderr tail); `check: false`
    /// accepts any code, for a script that reads `code` itself (`skyhook-run check` warns when such
    /// a result is ignored); `timeout` in seconds kills the process group (default and cap: what
    /// remains of the step's deadline), `read_only` marks a query, `stream: true` writes the
    /// command's stdout and stderr to the step's as they arrive (the agent's logs timestamp each
    /// chunk; nothing when the command is only planned) and keeps only the last 64 KiB of each in
    /// the result. Guards make the command a change: `creates: path` (done when the path exists),
    /// `removes: path` (done when it does not), `unless: argv` (done when that command exits 0),
    /// `onlyif: argv` (done when it exits non-zero). Guards are queries, evaluated in every mode
    /// (chrooted like the command, with its `env`, `cwd`, `timeout`); when one says done the
    /// command is skipped, counted unchanged and returns `skipped: true`; otherwise it runs
    /// (apply), is planned as a change `run: useradd gpuops (unless id gpuops)` (plan) or is drift
    /// (check).
    #[overload(effects = [Command, GuardedCommand], options = GUARDED_RUN_KEYS)]
    fn run_with_opts(run: &Api, h: &mut Host, argv: Array, opts: Map) -> rhai::Map {
        let argv = convert::strings(&argv, "argv")?;
        let opts = run_opts(&opts, run.deadline, &run.output, false)?;
        Ok(output_map(super::run(h, &argv, &opts)?))
    }
}

/// The command's output; when it was only planned (plan mode), what it changes is unknown
/// to the rest of the plan ([`Host::note_planned_command`]).
fn planned_or_ran(
    h: &mut Host,
    argv: &[String],
    opts: &CommandOptions,
    out: Option<CmdOutput>,
) -> CmdOutput {
    match out {
        Some(o) if !o.planned => o,
        _ => {
            let guard_paths: Vec<String> = opts
                .guards
                .iter()
                .filter_map(|g| match g {
                    Guard::Creates(p) | Guard::Removes(p) => Some(p.clone()),
                    _ => None,
                })
                .collect();
            h.note_planned_command(argv, &guard_paths);
            CmdOutput::planned()
        }
    }
}

/// Whether any guard of `opts` says the work is done (module docs). Guard commands run as
/// queries with the command's `env`, `cwd` and `timeout` (no input, no streaming, no
/// `check`).
///
/// # Errors
/// An empty guard argv, a guard path that cannot be resolved, a guard command that cannot
/// run (as [`run`]).
fn guards_say_done(h: &Host, opts: &CommandOptions) -> Result<bool> {
    let query = CommandOptions {
        check: false,
        ok: Vec::new(),
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
                let path = crate::host::files::fs::host_path(p)?;
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
                let ok = h.exec(argv, &query)?.ok;
                ok == matches!(g, Guard::Unless(_))
            }
            Guard::Decided(_) => false,
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
pub fn query(h: &mut Host, argv: &[String], opts: &CommandOptions) -> Result<CmdOutput> {
    let opts = CommandOptions {
        read_only: true,
        ..opts.clone()
    };
    run(h, argv, &opts)
}

host_fn! {
    /// `run(argv)` with `read_only: true`: executed in plan and check mode too, and any exit code
    /// is returned (the script reads `code` or `ok`).
    #[host(ns = "", effects = RunsReadOnly)]
    fn query(h: &mut Host, argv: Array) -> rhai::Map {
        let argv = convert::strings(&argv, "argv")?;
        Ok(output_map(super::query(
            h,
            &argv,
            &CommandOptions::default(),
        )?))
    }

    /// `run(argv, opts)` with `read_only: true`; the exit code is checked only with `check: true`
    /// or `ok: [codes]`.
    #[overload(options = RUN_KEYS)]
    fn query_with_opts(run: &Api, h: &mut Host, argv: Array, opts: Map) -> rhai::Map {
        let argv = convert::strings(&argv, "argv")?;
        let opts = run_opts(&opts, run.deadline, &run.output, true)?;
        Ok(output_map(super::query(h, &argv, &opts)?))
    }
}

/// `sh(script, opts)`: [`run`] of `["/bin/bash", "-c", script]`.
///
/// # Errors
/// As [`run`].
pub fn sh(h: &mut Host, script: &str, opts: &CommandOptions) -> Result<CmdOutput> {
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

host_fn! {
    /// `run(["/bin/bash", "-c", script])`: a non-zero exit of the script is an error.
    #[host(ns = "", effects = [Command])]
    fn sh(h: &mut Host, script: S) -> rhai::Map {
        Ok(output_map(super::sh(h, &script, &checked())?))
    }

    /// `run(["/bin/bash", "-c", script], opts)`, `ok` and guards included (summary `sh: <script>
    /// (creates /path)`).
    #[overload(effects = [Command, GuardedCommand], options = GUARDED_RUN_KEYS)]
    fn sh_with_opts(run: &Api, h: &mut Host, script: S, opts: Map) -> rhai::Map {
        let opts = run_opts(&opts, run.deadline, &run.output, false)?;
        Ok(output_map(super::sh(h, &script, &opts)?))
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::ScriptOutput;
    pub(super) use crate::host::api::convert::{self, check_keys, opt_bool, opt_string};
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::{Array, Dynamic, ImmutableString as S, Map};
    pub(super) use std::sync::Arc;
    pub(super) use std::time::{Duration, Instant};
}
use prelude::*;

/// The option keys of `query` (and the unguarded part of `run`/`sh`); the binding checks
/// options against these lists, so the docs and the checker cannot drift from it.
const RUN_KEYS: &[&str] = &[
    "check",
    "ok",
    "input",
    "env",
    "cwd",
    "timeout",
    "read_only",
    "stream",
];

/// The option keys of `run`/`sh`: [`RUN_KEYS`] and the guards (`query` takes none).
const GUARDED_RUN_KEYS: &[&str] = &[
    "check",
    "ok",
    "input",
    "env",
    "cwd",
    "timeout",
    "read_only",
    "stream",
    "creates",
    "removes",
    "unless",
    "onlyif",
];

/// The run's output as the sink of a streamed command: each chunk goes to the step's stdout
/// or stderr as it arrives.
struct ToScriptOutput(Arc<dyn ScriptOutput>);

impl OutputSink for ToScriptOutput {
    fn stdout(&self, bytes: &[u8]) {
        self.0.stdout(bytes);
    }
    fn stderr(&self, bytes: &[u8]) {
        self.0.stderr(bytes);
    }
}

/// The guard options of `run`/`sh`, in the order they are evaluated.
const GUARD_KEYS: [&str; 4] = ["creates", "removes", "unless", "onlyif"];

/// The guards of `m` (`creates`/`removes`: a path string; `unless`/`onlyif`: an argv array);
/// `()` values are ignored.
fn guards(m: &Map) -> Result<Vec<Guard>, String> {
    let mut out = Vec::new();
    for key in GUARD_KEYS {
        match m.get(key) {
            None => {}
            Some(d) if d.is_unit() => {}
            Some(d) => match key {
                "creates" | "removes" => {
                    let Some(p) = opt_string(m, key)? else {
                        continue;
                    };
                    if !p.starts_with('/') {
                        return Err(format!("option {key} must be an absolute path, got {p:?}"));
                    }
                    out.push(if key == "creates" {
                        Guard::Creates(p)
                    } else {
                        Guard::Removes(p)
                    });
                }
                _ => {
                    let Some(a) = d.read_lock::<Array>() else {
                        return Err(format!(
                            "option {key} must be an argv array, got {}",
                            d.type_name()
                        ));
                    };
                    let argv = convert::strings(&a, key)?;
                    if argv.first().is_none_or(String::is_empty) {
                        return Err(format!("option {key} needs at least a program name"));
                    }
                    out.push(if key == "unless" {
                        Guard::Unless(argv)
                    } else {
                        Guard::Onlyif(argv)
                    });
                }
            },
        }
    }
    Ok(out)
}

/// The options of a `run`/`sh` without an options map: the exit code is checked (0 passes).
fn checked() -> CommandOptions {
    CommandOptions {
        check: true,
        ..CommandOptions::default()
    }
}

/// Whether the exit code is checked and the codes that pass, from `#{check, ok}`: `run`/`sh`
/// check unless `check: false` (any code is returned, for a script that reads it), `query`
/// only with `check: true` or `ok`; `ok` (a non-empty array of exit codes) lists the codes
/// that pass a check, else 0 alone.
fn exit_codes(m: &Map, query: bool) -> Result<(bool, Vec<i32>), String> {
    let ok = match m.get("ok") {
        None => None,
        Some(d) if d.is_unit() => None,
        Some(d) => {
            let Some(a) = d.read_lock::<Array>() else {
                return Err(format!(
                    "option ok must be an array of exit codes, e.g. [0, 1], got {}",
                    d.type_name()
                ));
            };
            if a.is_empty() {
                return Err("option ok must list at least one exit code, e.g. [0, 1]".into());
            }
            let mut codes = Vec::new();
            for v in a.iter() {
                match v.as_int().ok().and_then(|i| i32::try_from(i).ok()) {
                    Some(c) => codes.push(c),
                    None => {
                        return Err(format!(
                            "option ok must be an array of exit codes (integers), got {} {v}",
                            v.type_name()
                        ));
                    }
                }
            }
            Some(codes)
        }
    };
    let check = match m.get("check") {
        Some(d) if !d.is_unit() => Some(opt_bool(m, "check", true)?),
        _ => None,
    };
    match (check, ok) {
        (Some(false), Some(_)) => Err(
            "options check: false and ok contradict each other: ok lists the exit codes \
                 that pass the check, check: false accepts any"
                .into(),
        ),
        (check, Some(codes)) => Ok((check.unwrap_or(true), codes)),
        (check, None) => Ok((check.unwrap_or(!query), Vec::new())),
    }
}

/// `#{check, ok, input, env, cwd, timeout, read_only, stream}` and, unless `query`, the guards
/// `#{creates, removes, unless, onlyif}` (a guarded command is a change). The timeout
/// (seconds, int or float) is capped by what remains of the run's deadline; without one, the
/// session's deadline (tightened to the run's) applies. `stream: true` forwards the
/// command's output to `output`, the run's.
fn run_opts(
    m: &Map,
    deadline: Instant,
    output: &Arc<dyn ScriptOutput>,
    query: bool,
) -> Result<CommandOptions, String> {
    check_keys(m, if query { RUN_KEYS } else { GUARDED_RUN_KEYS })?;
    let guards = if query { Vec::new() } else { guards(m)? };
    if !guards.is_empty() && opt_bool(m, "read_only", false)? {
        return Err(
            "a guarded command cannot be read_only (guards are for commands that change something)"
                .into(),
        );
    }
    let mut env = Vec::new();
    match m.get("env") {
        None => {}
        Some(d) if d.is_unit() => {}
        Some(d) => {
            let Some(em) = d.read_lock::<Map>() else {
                return Err(format!("option env must be a map, got {}", d.type_name()));
            };
            for (k, v) in em.iter() {
                env.push((k.to_string(), convert::scalar(v, &format!("env.{k}"))?));
            }
        }
    }
    let timeout = match m.get("timeout") {
        None => None,
        Some(d) if d.is_unit() => None,
        Some(d) => {
            let secs = if let Ok(i) = d.as_int() {
                i as f64
            } else if let Ok(f) = d.as_float() {
                f
            } else {
                return Err(format!(
                    "option timeout must be a number of seconds, got {}",
                    d.type_name()
                ));
            };
            if !secs.is_finite() || secs <= 0.0 {
                return Err(format!(
                    "option timeout must be a positive number of seconds, got {secs}"
                ));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            Some(Duration::from_secs_f64(secs.min(1e9)).min(left))
        }
    };
    let (check, ok) = exit_codes(m, query)?;
    Ok(CommandOptions {
        check,
        ok,
        input: opt_string(m, "input")?.map(String::into_bytes),
        env,
        cwd: opt_string(m, "cwd")?,
        timeout,
        read_only: opt_bool(m, "read_only", false)?,
        stream: opt_bool(m, "stream", false)?
            .then(|| StreamTo(Arc::new(ToScriptOutput(output.clone())))),
        guards,
    })
}

/// `#{code, stdout, stderr, ok, planned, skipped}`: `planned` is true for a recorded
/// command, `skipped` for a guarded command whose guard said it is done. Always present:
/// reading a missing property is an error in scripts.
fn output_map(o: CmdOutput) -> Map {
    let mut m = Map::new();
    m.insert("code".into(), Dynamic::from(i64::from(o.code)));
    m.insert("stdout".into(), convert::s(o.stdout));
    m.insert("stderr".into(), convert::s(o.stderr));
    m.insert("ok".into(), Dynamic::from(o.ok));
    m.insert("planned".into(), Dynamic::from(o.planned));
    m.insert("skipped".into(), Dynamic::from(o.skipped));
    m
}

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(crate) const NAMESPACES: &[(&str, &str, &str)] = &[(
    "",
    "Commands, secrets and counters (global functions)",
    "Commands run chrooted in the host root, in their own process group, with the step's environment only. Their result is a map `#{code, stdout, stderr, ok, planned}`: output is captured whole and returned when the command ends, unless `stream: true` relays it live (and keeps only the last 64 KiB of each stream in the result). A command that changes something (`run`, `sh`) fails the step when it exits with a code the script did not list in `ok` (0 when none is listed), so a failing command never passes silently; a probe whose code the script reads is a `query`.",
)];

host_fns!(run, query, sh);

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::host::ExecMode;
    use crate::host::testutil::TestHost;
    use crate::process::{Cancel, CancelReason};
    // A chrooted root with `/bin/sh` and `useradd`/`id` stubs over `/users`.
    use crate::script::host_api::tests::users_root;

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
            &CommandOptions::default(),
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
            &CommandOptions::default(),
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
        let e = sh(&mut h, "echo up; sleep 500", &CommandOptions::default()).unwrap_err();
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
        let opts = CommandOptions {
            input: Some(b"abc".to_vec()),
            ..CommandOptions::default()
        };
        let out = sh(&mut h, "cat", &opts).unwrap();
        assert_eq!(out.stdout, "abc");
        let opts = CommandOptions {
            timeout: Some(Duration::from_millis(100)),
            ..CommandOptions::default()
        };
        let e = sh(&mut h, "sleep 500", &opts).unwrap_err();
        assert!(matches!(e, HostError::Timeout { .. }), "{e:?}");
        h.finish().unwrap();
    }

    fn argv(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn useradd(h: &mut Host) -> CmdOutput {
        run(
            h,
            &argv(&["useradd", "gpuops"]),
            &CommandOptions {
                guards: vec![Guard::Unless(argv(&["id", "gpuops"]))],
                ..CommandOptions::default()
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

    /// After a command the plan did not run, a read is unknown exactly for what the command
    /// may have touched: a path its arguments name (at or under it; a glob stands for its
    /// directory), a directory listing above one, a `creates` path, and any missing path;
    /// an existing file it does not name is read as before.
    #[test]
    fn a_planned_command_makes_what_it_may_touch_unknown() {
        let t = TestHost::new();
        for f in [
            "/etc/a.conf",
            "/etc/other.conf",
            "/opt/y/z.txt",
            "/srv/keep",
        ] {
            t.file(f, "x\n");
        }
        let mut h = t.host(ExecMode::Plan);
        let script = "echo x > /etc/a.conf; cp /opt/y/*.txt /srv/";
        let guarded = CommandOptions {
            guards: vec![Guard::Creates("/var/made".into())],
            ..CommandOptions::default()
        };
        assert!(
            run(&mut h, &argv(&["/bin/sh", "-c", script]), &guarded)
                .unwrap()
                .planned
        );
        let unknown = |h: &Host, p: &str, listing: bool| {
            matches!(
                h.check_known_as(std::path::Path::new(p), listing),
                Err(HostError::PlanUnknown { .. })
            )
        };
        for p in [
            "/etc/a.conf",
            "/opt/y/z.txt",
            "/srv/keep",
            "/var/made",
            "/etc/new.conf",
        ] {
            assert!(unknown(&h, p, false), "{p}");
        }
        assert!(unknown(&h, "/etc", true));
        for p in ["/etc/other.conf", "/etc", "/opt"] {
            assert!(!unknown(&h, p, false), "{p}");
        }
        assert_eq!(
            h.view_read(std::path::Path::new("/etc/other.conf"))
                .unwrap()
                .unwrap(),
            b"x\n"
        );
        // Apply and check mode know nothing unknown.
        for mode in [ExecMode::Apply, ExecMode::Check] {
            let mut h = t.host(mode);
            let _ = run(&mut h, &argv(&["true"]), &CommandOptions::default());
            assert!(!unknown(&h, "/etc/new.conf", false), "{mode:?}");
        }
    }

    #[test]
    fn path_guards_onlyif_and_summaries() {
        let t = users_root();
        let make = |h: &mut Host, guards: Vec<Guard>| {
            run(
                h,
                &argv(&["/bin/sh", "-c", "echo x > /made"]),
                &CommandOptions {
                    guards,
                    ..CommandOptions::default()
                },
            )
            .unwrap()
        };
        let creates = |p: &str| vec![Guard::Creates(p.into())];
        let mut h = t.host(ExecMode::Plan);
        // a planned write satisfies a later `creates` of the same session
        crate::host::files::fs::write(&mut h, "/made", "planned\n", &Default::default()).unwrap();
        assert_eq!(make(&mut h, creates("/made")), CmdOutput::skipped());
        make(&mut h, creates("/other"));
        // what a planned command changes is unknown to every later read of the plan
        let e = crate::host::files::fs::write(&mut h, "/made", "again\n", &Default::default())
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "/made is unknown in the plan: the command /bin/sh -c 'echo x > /made' is only run by the apply and may change it"
        );
        let guarded = CommandOptions {
            guards: creates("/made"),
            ..CommandOptions::default()
        };
        let e = run(&mut h, &argv(&["true"]), &guarded).unwrap_err();
        assert!(matches!(e, HostError::PlanUnknown { .. }), "{e}");
        let rep = h.finish().unwrap();
        assert_eq!(
            rep.changes[1].summary,
            "run: /bin/sh -c 'echo x > /made' (creates /other)"
        );
        assert_eq!(rep.unchanged, 1);

        let mut h = t.host(ExecMode::Apply);
        assert!(make(&mut h, creates("/made")).ok);
        assert_eq!(t.read("/made"), "x\n");
        assert_eq!(make(&mut h, creates("/made")), CmdOutput::skipped());
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
            &CommandOptions {
                guards: vec![Guard::Unless(argv(&["no-such-guard"]))],
                ..CommandOptions::default()
            },
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to run no-such-guard: program not found"
        );
    }
}
