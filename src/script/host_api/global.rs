//! The global functions: commands (`run`, `query`, `sh`) over [`crate::host::system::cmd`], secrets
//! (`secret`, `secret_env`) over [`crate::host::secrets`], `changed()` (registered by the
//! script layer) and the value helpers `sha256` and `to_json` over [`crate::host::files::text`]:
//! each one's reference row and binding, and their tests through Rhai.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rhai::{Array, Dynamic, ImmutableString as S, Map};

use super::convert::{self, check_keys, opt_bool, opt_string};
use super::docs::EffectKind::*;
use super::docs::Effects::*;
use super::docs::FnDoc;
use super::docs::{ARGV, NAME, OPTS, script_layer};
use crate::host::files::text;
use crate::host::secrets;
use crate::host::system::cmd::{self, CmdOutput, Guard, OutputSink, RunOptions, StreamTo};
use crate::script::output::ScriptOutput;

/// The option keys of `query` (and the unguarded part of `run`/`sh`); the binding checks
/// options against these lists, so the docs and the checker cannot drift from it.
pub(crate) const RUN_KEYS: &[&str] = &[
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
pub(crate) const GUARDED_RUN_KEYS: &[&str] = &[
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
fn checked() -> RunOptions {
    RunOptions {
        check: true,
        ..RunOptions::default()
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
) -> Result<RunOptions, String> {
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
    Ok(RunOptions {
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
pub(crate) fn output_map(o: CmdOutput) -> Map {
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
pub(super) const NAMESPACES: &[(&str, &str, &str)] = &[(
    "",
    "Commands, secrets and counters (global functions)",
    "Commands run chrooted in the host root, in their own process group, with the step's environment only. Their result is a map `#{code, stdout, stderr, ok, planned}`: output is captured whole and returned when the command ends, unless `stream: true` relays it live (and keeps only the last 64 KiB of each stream in the result). A command that changes something (`run`, `sh`) fails the step when it exits with a code the script did not list in `ok` (0 when none is listed), so a failing command never passes silently; a probe whose code the script reads is a `query`.",
)];

/// The functions of this file's namespaces, in reference order: each one's reference row
/// and its registration.
pub(super) const FUNCTIONS: &[FnDoc] = &[
    host_fn!(
        "",
        "run",
        &[ARGV],
        "Map",
        Submits(&[Command]),
        "Run `argv` (no shell) chrooted in the host root with the step's environment: `#{code, stdout, stderr, ok, planned}` (`planned` is true when the command was recorded, not run). A non-zero exit code is an error that fails the step (the command, its code and the tail of its stderr), as is a missing program.",
        |h, argv: Array| {
            let argv = convert::strings(&argv, "argv")?;
            Ok(output_map(cmd::run(h, &argv, &checked())?))
        }
    ),
    host_fn!(
        "",
        "run",
        &[ARGV, OPTS],
        "Map",
        Submits(&[Command, GuardedCommand]),
        "As `run(argv)` with `#{check, ok, input, env, cwd, timeout, read_only, stream}`: `ok` lists the exit codes that pass (`run([\"grep\", \"-q\", \"x\", \"/etc/f\"], #{ok: [0, 1]})`; the result's `code` says which), any other is an error (command, code and stderr tail); `check: false` accepts any code, for a script that reads `code` itself (`skyhook-run check` warns when such a result is ignored); `timeout` in seconds kills the process group (default and cap: what remains of the step's deadline), `read_only` marks a query, `stream: true` writes the command's stdout and stderr to the step's as they arrive (the agent's logs timestamp each chunk; nothing when the command is only planned) and keeps only the last 64 KiB of each in the result. Guards make the command a change: `creates: path` (done when the path exists), `removes: path` (done when it does not), `unless: argv` (done when that command exits 0), `onlyif: argv` (done when it exits non-zero). Guards are queries, evaluated in every mode (chrooted like the command, with its `env`, `cwd`, `timeout`); when one says done the command is skipped, counted unchanged and returns `skipped: true`; otherwise it runs (apply), is planned as a change `run: useradd gpuops (unless id gpuops)` (plan) or is drift (check).",
        options = GUARDED_RUN_KEYS,
        api = run,
        |h, argv: Array, o: Map| {
            let argv = convert::strings(&argv, "argv")?;
            let o = run_opts(&o, run.deadline, &run.output, false)?;
            Ok(output_map(cmd::run(h, &argv, &o)?))
        }
    ),
    host_fn!(
        "",
        "query",
        &[ARGV],
        "Map",
        RunsReadOnly,
        "`run(argv)` with `read_only: true`: executed in plan and check mode too, and any exit code is returned (the script reads `code` or `ok`).",
        |h, argv: Array| {
            let argv = convert::strings(&argv, "argv")?;
            Ok(output_map(cmd::query(h, &argv, &RunOptions::default())?))
        }
    ),
    host_fn!(
        "",
        "query",
        &[ARGV, OPTS],
        "Map",
        RunsReadOnly,
        "`run(argv, opts)` with `read_only: true`; the exit code is checked only with `check: true` or `ok: [codes]`.",
        options = RUN_KEYS,
        api = run,
        |h, argv: Array, o: Map| {
            let argv = convert::strings(&argv, "argv")?;
            let o = run_opts(&o, run.deadline, &run.output, true)?;
            Ok(output_map(cmd::query(h, &argv, &o)?))
        }
    ),
    host_fn!(
        "",
        "sh",
        &[("script", "String")],
        "Map",
        Submits(&[Command]),
        "`run([\"/bin/bash\", \"-c\", script])`: a non-zero exit of the script is an error.",
        |h, script: S| Ok(output_map(cmd::sh(h, &script, &checked())?))
    ),
    host_fn!(
        "",
        "sh",
        &[("script", "String"), OPTS],
        "Map",
        Submits(&[Command, GuardedCommand]),
        "`run([\"/bin/bash\", \"-c\", script], opts)`, `ok` and guards included (summary `sh: <script> (creates /path)`).",
        options = GUARDED_RUN_KEYS,
        api = run,
        |h, script: S, o: Map| {
            let o = run_opts(&o, run.deadline, &run.output, false)?;
            Ok(output_map(cmd::sh(h, &script, &o)?))
        }
    ),
    host_fn!(
        "",
        "secret",
        &[NAME, ("key", "String")],
        "String",
        ReadsAgent,
        "`<SKYHOOK_SECRETS_DIR>/<name>/<key>`; `name` must be in `SKYHOOK_ALLOWED_SECRETS`. The key is opened confined to `<SKYHOOK_SECRETS_DIR>/<name>`: symlinks inside it (the kubelet's `..data`) are followed, one pointing out of it is not found. A regular file of at most 1 MiB. The value is redacted (`***`) from output, logs, plans and errors.",
        |h, n: S, k: S| Ok(Dynamic::from(S::from(secrets::secret(h, &n, &k)?)))
    ),
    host_fn!(
        "",
        "secret_env",
        &[("var", "String")],
        "String",
        ReadsAgent,
        "The step environment's variable `var` (error when unset), redacted like `secret`.",
        |h, v: S| Ok(Dynamic::from(S::from(secrets::secret_env(h, &v)?)))
    ),
    script_layer(
        "",
        "changed",
        &[],
        "int",
        ReadsAgent,
        "How many changes this step has made (apply) or would make (plan, check) so far; actions are not counted.",
    ),
    host_fn!(
        "",
        "sha256",
        &[("text", "String")],
        "String",
        Computes,
        "The SHA-256 of the text's UTF-8 bytes, 64 lowercase hex digits (as `sha256sum` prints).",
        |_h, t: S| Ok(convert::s(text::sha256_hex(&t)))
    ),
    host_fn!(
        "",
        "to_json",
        &[("value", "?")],
        "String",
        Computes,
        "`value` (a map, array, string, number, bool or `()`) as pretty-printed JSON: two-space indent, map keys in the map's order (sorted: Rhai maps are ordered by key), `()` as `null`, no final newline. The inverse of Rhai's `parse_json(text)` (JSON `null` → `()`).",
        |_h, v: Dynamic| Ok(convert::s(text::to_json(&convert::to_json(&v, "value")?)))
    ),
    host_fn!(
        "",
        "to_json",
        &[("map", "Map")],
        "String",
        Computes,
        "The same for a map; also called as a method, `m.to_json()` (which replaces Rhai's one-line form).",
        |_h, v: Map| Ok(convert::s(text::to_json(&convert::to_json(
            &Dynamic::from_map(v),
            "value"
        )?)))
    ),
];

#[cfg(test)]
pub(super) mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::super::HostApi;
    use super::super::tests::*;
    use crate::host::effects::report::ExecMode;
    use crate::host::root::HostRoot;
    use crate::host::testutil::TestHost;
    use crate::host::{Host, HostOptions};
    use crate::script::{CaptureOutput, ModuleStore, ScriptEngine, StepContext, compile_source};
    use crate::step::{ScriptRunOptions as RunOptions, run_script_with};

    /// One call of each function of this file, for
    /// [`super::super::tests::declared_effects_are_the_submitted_ones`]: in the root that test
    /// prepares, each call of a function that submits effects changes something.
    pub(in super::super) const SAMPLES: &[&str] = &[
        r#"run(["hello", "x"])"#,
        r#"run(["hello", "x"], #{unless: ["false"]})"#,
        r#"query(["hello", "q"])"#,
        r#"query(["hello", "q"], #{check: true})"#,
        r#"sh("echo x")"#,
        r#"sh("echo x", #{creates: "/made"})"#,
        r#"secret("db", "password")"#,
        r#"secret_env("TOKEN")"#,
        r#"sha256("x")"#,
        r#"to_json(1)"#,
        r#"to_json(#{a: 1})"#,
    ];

    #[test]
    fn commands_run_plan_and_query() {
        let t = TestHost::new();
        t.install_sh();
        t.stub("hello", "echo out-$1; echo err >&2; exit ${2:-0}");
        let src = r#"
            let a = run(["hello", "x"]);
            let b = run(["hello", "y", "3"], #{env: #{V: 1}, ok: [0, 3]});
            let q = query(["hello", "q"]);
            let s = sh("echo shell", #{read_only: false});
            print([a.code, a.stdout, a.stderr, a.ok, a.planned]);
            print([b.code, b.ok, q.stdout, s.planned]);
        "#;
        let before = snapshot(&t);
        let p = run(&t, ExecMode::Plan, src).ok();
        assert_eq!(snapshot(&t), before);
        assert_eq!(
            p.stdout(),
            "[0, \"\", \"\", true, true]\n[0, true, \"out-q\\n\", true]\n"
        );
        assert_eq!(t.calls(), vec!["hello q"]);
        let actions: Vec<&str> = p
            .report
            .actions
            .iter()
            .map(|a| a.summary.as_str())
            .collect();
        assert_eq!(actions.len(), 3, "{actions:?}");
        assert!(p.report.changes.is_empty());
        t.clear_calls();
        let c = run(&t, ExecMode::Check, src).ok();
        assert!(c.report.drift().is_empty(), "commands are never drift");
        t.clear_calls();
        // Apply runs them; no `planned` key.
        let a = run(
            &t,
            ExecMode::Apply,
            &src.replace(
                "sh(\"echo shell\"",
                "run([\"/bin/sh\", \"-c\", \"echo shell\"]",
            ),
        )
        .ok();
        assert_eq!(
            a.stdout(),
            "[0, \"out-x\\n\", \"err\\n\", true, false]\n[3, false, \"out-q\\n\", false]\n"
        );
        assert_eq!(t.calls(), vec!["hello x", "hello y 3", "hello q"]);
        // A non-zero exit throws with the command and its stderr.
        let r = run(&t, ExecMode::Apply, "\n run([\"hello\", \"z\", \"4\"])");
        assert_eq!(
            r.error(),
            "main.rhai:2:2: run: command hello z 4 failed with exit code 4: err"
        );
        let r = run(&t, ExecMode::Apply, r#"run(["no-such-program"])"#);
        assert_eq!(
            r.error(),
            "main.rhai:1:1: run: failed to run no-such-program: program not found"
        );
        let r = run(&t, ExecMode::Apply, r#"run(["hello", 1])"#);
        assert_eq!(
            r.error(),
            "main.rhai:1:1: run: argv[1] must be a string, got i64"
        );
    }

    /// `run`/`sh` fail on an exit code the script did not list in `ok` (guarded commands
    /// too); `query` returns any code unless `check`/`ok` says otherwise; `check: false`
    /// returns any code.
    #[test]
    fn a_failing_command_fails_the_step_unless_its_code_is_expected() {
        let t = TestHost::new();
        t.install_sh();
        t.stub("hello", "echo out-$1; echo err >&2; exit ${2:-0}");
        // `sh` runs /bin/bash: the machine's sh stands in for it.
        std::os::unix::fs::symlink("sh", t.p("/bin/bash")).unwrap();
        let fails = |src: &str| run(&t, ExecMode::Apply, src).error();
        assert_eq!(
            fails(r#"run(["hello", "z", "9"])"#),
            "main.rhai:1:1: run: command hello z 9 failed with exit code 9: err"
        );
        assert_eq!(
            fails(r#"sh("echo no >&2; exit 9")"#),
            "main.rhai:1:1: sh: command /bin/bash -c 'echo no >&2; exit 9' failed with exit \
             code 9: no"
        );
        assert_eq!(
            fails(r#"run(["hello", "z", "2"], #{ok: [0, 1]})"#),
            "main.rhai:1:1: run: command hello z 2 failed with exit code 2 (accepted: 0, 1): err"
        );
        assert_eq!(
            fails(r#"sh("exit 0", #{ok: [3]})"#),
            "main.rhai:1:1: sh: command /bin/bash -c 'exit 0' failed with exit code 0 \
             (accepted: 3)"
        );
        // A guarded command that runs is checked like any other.
        assert_eq!(
            fails(r#"run(["hello", "g", "7"], #{creates: "/nope"})"#),
            "main.rhai:1:1: run: command hello g 7 failed with exit code 7: err"
        );
        assert_eq!(
            fails(r#"query(["hello", "q", "5"], #{ok: [0]})"#),
            "main.rhai:1:1: query: command hello q 5 failed with exit code 5: err"
        );
        let src = r#"
            let a = run(["hello", "a", "1"], #{ok: [0, 1]});
            let b = sh("exit 3", #{ok: [3]});
            let c = query(["hello", "c", "5"]);
            let d = run(["hello", "d", "6"], #{check: false});
            let e = run(["hello", "e", "7"], #{creates: "/nope", ok: [7]});
            print([a.code, a.ok, b.code, c.code, c.ok, d.code, e.code]);
        "#;
        let a = run(&t, ExecMode::Apply, src).ok();
        assert_eq!(a.stdout(), "[1, false, 3, 5, false, 6, 7]\n");
        // Nothing runs in a plan but the query: a planned command passes.
        t.clear_calls();
        let p = run(
            &t,
            ExecMode::Plan,
            r#"run(["hello", "z", "9"]); sh("exit 9")"#,
        )
        .ok();
        assert_eq!(p.outcome.code, 0);
        assert!(t.calls().is_empty(), "{:?}", t.calls());
        // Bad `ok`/`check` values are named.
        for (src, msg) in [
            (
                r#"run(["true"], #{ok: 1})"#,
                "run: option ok must be an array of exit codes, e.g. [0, 1], got i64",
            ),
            (
                r#"run(["true"], #{ok: []})"#,
                "run: option ok must list at least one exit code, e.g. [0, 1]",
            ),
            (
                r#"run(["true"], #{ok: [0, "1"]})"#,
                "run: option ok must be an array of exit codes (integers), got string 1",
            ),
            (
                r#"sh("true", #{ok: [0], check: false})"#,
                "sh: options check: false and ok contradict each other: ok lists the exit \
                 codes that pass the check, check: false accepts any",
            ),
        ] {
            assert_eq!(fails(src), format!("main.rhai:1:1: {msg}"), "{src}");
        }
    }

    #[test]
    fn streamed_commands_write_to_the_run_output() {
        use crate::script::Stream;
        let t = TestHost::new();
        t.install_sh();
        t.stub("hello", "echo out-$1; echo err >&2; exit ${2:-0}");
        let src = r#"
            print("before");
            let r = run(["hello", "s"], #{stream: true});
            let q = query(["hello", "q", "2"], #{stream: true});
            print([r.code, r.stdout, r.stderr, q.code, q.stdout]);
        "#;
        let of = |r: &Ran, which: Stream| -> Vec<String> {
            r.out
                .chunks()
                .into_iter()
                .filter(|(s, _)| *s == which)
                .map(|(_, b)| String::from_utf8(b).unwrap())
                .collect()
        };
        // Apply: each command's output is in the run's output, in order with the prints, and
        // still in the result.
        let a = run(&t, ExecMode::Apply, src).ok();
        assert_eq!(
            of(&a, Stream::Stdout),
            [
                "before\n",
                "out-s\n",
                "out-q\n",
                "[0, \"out-s\\n\", \"err\\n\", 2, \"out-q\\n\"]\n"
            ]
        );
        assert_eq!(of(&a, Stream::Stderr), ["err\n", "err\n"]);
        // Plan: the command is not run and streams nothing; the query streams.
        t.clear_calls();
        let p = run(&t, ExecMode::Plan, src).ok();
        assert_eq!(
            of(&p, Stream::Stdout),
            ["before\n", "out-q\n", "[0, \"\", \"\", 2, \"out-q\\n\"]\n"]
        );
        assert_eq!(of(&p, Stream::Stderr), ["err\n"]);
        assert_eq!(t.calls(), vec!["hello q 2"]);
        let r = run(&t, ExecMode::Apply, r#"run(["hello"], #{stream: 1})"#);
        assert_eq!(
            r.error(),
            "main.rhai:1:1: run: option stream must be a bool, got i64"
        );
    }

    #[test]
    fn command_timeout_defaults_to_the_run_deadline() {
        let t = TestHost::new();
        t.install_sh();
        nix::unistd::mkfifo(
            &t.p("/fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let host = Host::new(
            HostRoot::open(&t.root).unwrap(),
            ExecMode::Apply,
            HostOptions::default(),
        );
        let api = HostApi::new(host);
        let engine = ScriptEngine::default();
        let script = compile_source(
            &engine,
            "main.rhai",
            r#"run(["/bin/sh", "-c", "read x < /fifo"])"#,
            Arc::new(ModuleStore::new(t.dir.path())),
        )
        .unwrap();
        let out = Arc::new(CaptureOutput::new());
        let mut opts = RunOptions::new(out, crate::process::Cancel::new());
        opts.host = Arc::new(api.clone());
        opts.timeout = Some(Duration::from_millis(300));
        let started = Instant::now();
        let outcome = run_script_with(&engine, &script, &StepContext::default(), &opts);
        let err = outcome.error.expect("timed out").to_string();
        assert!(
            err.starts_with(
                "main.rhai:1:1: run: command /bin/sh -c 'read x < /fifo' timed out after"
            ),
            "{err}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        api.finish().unwrap();
    }

    /// A command that prints without end is stopped at the capture limit (16 MiB per stream)
    /// and the step fails at the call with the named error; `query` in plan mode alike.
    #[test]
    fn endless_command_output_stops_at_the_capture_limit() {
        let t = TestHost::new();
        let mut o = opts_for(&t);
        o.commands_chrooted = false;
        o.env = vec![("PATH".into(), "/usr/bin:/bin".into())];
        let msg = "command /usr/bin/yes printed more than 16777216 bytes on stdout (the capture \
                   limit) and was stopped; use the stream option for large output";
        let r = run_with(
            &t,
            ExecMode::Apply,
            "let x = 1;\nrun([\"/usr/bin/yes\"]);\nprint(\"after\");",
            o.clone(),
        );
        assert_eq!(r.error(), format!("main.rhai:2:1: run: {msg}"));
        assert_eq!(r.stdout(), "");
        let r = run_with(&t, ExecMode::Plan, r#"query(["/usr/bin/yes"])"#, o);
        assert_eq!(r.error(), format!("main.rhai:1:1: query: {msg}"));
    }

    const GUARDED: &str = "print(\"before\");\n\
        let r = run([\"useradd\", \"gpuops\"], #{unless: [\"id\", \"gpuops\"]});\n\
        print(`skipped=${r.skipped ?? false} planned=${r.planned ?? false}`);\n\
        sh(\"echo made > /made\", #{creates: \"/made\"});\n\
        changed()\n";

    #[test]
    fn guarded_commands_through_rhai_in_plan_check_and_apply() {
        let t = users_root();
        let pos = |line: usize| {
            Some(crate::host::Position {
                file: "main.rhai".into(),
                line,
            })
        };
        let before = snapshot(&t);
        let plan = run(&t, ExecMode::Plan, GUARDED).ok();
        assert_eq!(snapshot(&t), before);
        assert_eq!(plan.stdout(), "before\nskipped=false planned=true\n");
        assert_eq!(plan.outcome.code, 2);
        let summaries: Vec<(&str, &str, Option<crate::host::Position>)> = plan
            .report
            .changes
            .iter()
            .map(|c| (c.kind.as_str(), c.summary.as_str(), c.position.clone()))
            .collect();
        assert_eq!(
            summaries,
            [
                (
                    "guarded_command",
                    "run: useradd gpuops (unless id gpuops)",
                    pos(2)
                ),
                (
                    "guarded_command",
                    "sh: echo made > /made (creates /made)",
                    pos(4)
                ),
            ]
        );
        let check = run(&t, ExecMode::Check, GUARDED).ok();
        assert_eq!(check.report.drift().len(), 2);

        // No bash in the test root: only the `run` can be applied; `sh` stays drift.
        let apply = run(
            &t,
            ExecMode::Apply,
            "run([\"useradd\", \"gpuops\"], #{unless: [\"id\", \"gpuops\"]}).ok",
        )
        .ok();
        assert_eq!(apply.report.summary(), "Apply: 1 changed, 0 unchanged.");
        assert_eq!(t.read("/users"), "gpuops\n");
        t.file("/made", "made\n");
        let check = run(&t, ExecMode::Check, GUARDED).ok();
        assert!(check.report.drift().is_empty(), "{:?}", check.report);
        assert_eq!(check.report.unchanged, 2);
        assert_eq!(check.stdout(), "before\nskipped=true planned=false\n");
        assert_eq!(check.outcome.code, 0);
    }

    #[test]
    fn guard_options_are_checked() {
        let t = TestHost::new();
        for (src, msg) in [
            (
                "run([\"true\"], #{creates: \"made\"})",
                "run: option creates must be an absolute path, got \"made\"",
            ),
            (
                "run([\"true\"], #{unless: \"id x\"})",
                "run: option unless must be an argv array, got string",
            ),
            (
                "run([\"true\"], #{onlyif: []})",
                "run: option onlyif needs at least a program name",
            ),
            (
                "run([\"true\"], #{creates: \"/x\", read_only: true})",
                "run: a guarded command cannot be read_only (guards are for commands that change something)",
            ),
        ] {
            let r = run(&t, ExecMode::Plan, src);
            assert_eq!(r.error(), format!("main.rhai:1:1: {msg}"), "{src}");
        }
        let r = run(&t, ExecMode::Plan, "query([\"true\"], #{creates: \"/x\"})");
        assert!(r.error().contains("creates"), "{}", r.error());
    }

    /// A `.rhai` step's `secret()` on a key that links out of `<secrets_dir>/<name>` fails at
    /// the call naming the coordinate; the outside content appears in no output, error or
    /// report; the kubelet `..data` layout beside it still reads.
    #[test]
    fn secret_link_out_of_its_dir_is_refused() {
        let t = TestHost::new();
        std::fs::write(t.dir.path().join("outside-file"), "outside-content").unwrap();
        let db = t.dir.path().join("secrets/db");
        std::fs::create_dir_all(db.join("..2026_12_01")).unwrap();
        std::fs::write(db.join("..2026_12_01/pw"), "kube-pw").unwrap();
        std::os::unix::fs::symlink("..2026_12_01", db.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/pw", db.join("pw")).unwrap();
        std::os::unix::fs::symlink(t.dir.path().join("outside-file"), db.join("link")).unwrap();
        let mut o = opts_for(&t);
        o.allowed_secrets = vec!["db".into()];
        let src = "print(secret(\"db\", \"pw\").len());\nprint(secret(\"db\", \"link\"));";
        let r = run_with(&t, ExecMode::Apply, src, o);
        assert_eq!(r.stdout(), "7\n");
        assert_eq!(
            r.error(),
            "main.rhai:2:7: secret: failed to read secret \"db\" key \"link\": No such file or \
             directory (os error 2)"
        );
        let all = format!("{}{}{:?}", r.stdout(), r.stderr(), r.report);
        assert!(!all.contains("outside-content"), "{all}");
    }
}
